#!/usr/bin/env bash
# deploy/netns-mesh.sh — a multi-host mesh on one machine: one network namespace per worker and
# one for the coordinator, each with its own address on a veth link to a bridge.
#
#   deploy/netns-mesh.sh up      [options]   create the hosts, start the mesh, wait until ready
#   deploy/netns-mesh.sh down    [options]   stop every process and remove all that up created
#   deploy/netns-mesh.sh status  [options]   the hosts, their addresses and /readyz
#   deploy/netns-mesh.sh exec    [options] HOST CMD...    run CMD on HOST (coord, w0, w1, ...)
#   deploy/netns-mesh.sh link    [options] HOST down|up   cut HOST's cable, or plug it back
#   deploy/netns-mesh.sh shape   [options] HOST delay MS|rate KBIT|clear
#                                            slow HOST's link down in both directions
#
# Options (up records them in the state directory; the other commands read them from there):
#   --state DIR      the mesh's directory: mesh.toml, logs, hosts, pids (default
#                    ${TMPDIR:-/tmp}/layermesh-netns)
#   --prefix P       namespace names start with P (default lmn<pid>): unique per run, so two
#                    meshes, or a mesh and the leftovers of another, never collide
#   --workers N      workers (default 3)
#   --fence "A:B ..." pin each worker's layers (default: the balanced plan)
#   --model PATH     the GGUF model (default models/stories260K.gguf)
#   --bin DIR        where layermesh and layermesh-worker are (default: build/coordinator and
#                    build/worker of this checkout)
#   --max-seq N      positions per sequence (default 256)
#   --subnet A.B     the hosts' /24 is A.B.0.0 (default 10.77; private to this mesh's bridge)
#   --timeout S      `layermesh up --timeout`: how long one attempt to reach a worker lasts
#                    before it counts as a restart (default 30)
#
# The layout. A hub namespace holds a bridge; each host namespace (P-coord, P-w0, ...) has one
# interface, eth0, the end of a veth pair whose other end is plugged into the bridge. Addresses:
# the coordinator A.B.0.1, worker i A.B.0.(10+i). Every host resolves the others by name
# (coordinator.mesh, w0.mesh, ...) through /etc/netns/<namespace>/hosts, which `ip netns exec`
# mounts over /etc/hosts: mesh.toml names hosts, as a Kubernetes mesh.toml names pods, and every
# process listens on the wildcard at its ports (--listen-any). The API listens on 127.0.0.1:8080
# inside the coordinator's namespace: reach it with `netns-mesh.sh exec coord curl ...`.
#
# Nothing here touches the host's own interfaces, routes or addresses: every link lives in the
# mesh's namespaces. `down` removes everything `up` created: it kills the processes inside the
# mesh's namespaces (only this mesh's: its prefix is its own), deletes the namespaces (and with
# them the veths and the bridge) and the /etc/netns entries. `up` runs `down` itself when it
# fails. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; `shape ... delay` needs
# the kernel's netem qdisc, `shape ... rate` its htb qdisc.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
prog=netns-mesh

die() {
	printf '%s: error: %s\n' "$prog" "$*" >&2
	exit 1
}
say() { printf '%s: %s\n' "$prog" "$*" >&2; }

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

# ------------------------------------------------------------------ options and state

cmd=${1:-}
[ -n "$cmd" ] || {
	usage >&2
	exit 2
}
shift
state=${TMPDIR:-/tmp}/layermesh-netns
prefix=lmn$$
workers=3
fence=""
model=$here/models/stories260K.gguf
bindir=""
max_seq=256
subnet=10.77
timeout=30
while [ $# -gt 0 ]; do
	case "$1" in
	--state) state=$2; shift 2 ;;
	--prefix) prefix=$2; shift 2 ;;
	--workers) workers=$2; shift 2 ;;
	--fence) fence=$2; shift 2 ;;
	--model) model=$2; shift 2 ;;
	--bin) bindir=$2; shift 2 ;;
	--max-seq) max_seq=$2; shift 2 ;;
	--subnet) subnet=$2; shift 2 ;;
	--timeout) timeout=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	--*) die "unknown option $1 (see --help)" ;;
	*) break ;;
	esac
done

load_state() {
	[ -f "$state/netns.env" ] || die "no mesh at $state (netns-mesh.sh up first, or give --state)"
	# shellcheck source=/dev/null
	source "$state/netns.env"
}

hosts() {
	echo coord
	local i
	for ((i = 0; i < workers; i++)); do echo "w$i"; done
}
host_ip() {
	case "$1" in
	coord) echo "$subnet.0.1" ;;
	w[0-9]*) echo "$subnet.0.$((10 + ${1#w}))" ;;
	*) die "no host '$1' (coord, w0 .. w$((workers - 1)))" ;;
	esac
}
host_name() { [ "$1" = coord ] && echo coordinator.mesh || echo "$1.mesh"; }
ns() { echo "$prefix-$1"; }
hub() { echo "$prefix-hub"; }
ns_exists() { ip netns list | awk '{ print $1 }' | grep -qxF "$1"; }

# ------------------------------------------------------------------ down

# Stops every process in the mesh's namespaces: SIGTERM, up to 10 s, then SIGKILL.
stop_processes() {
	local h pids=() i
	for h in $(hosts); do
		ns_exists "$(ns "$h")" || continue
		# shellcheck disable=SC2207
		pids+=($(ip netns pids "$(ns "$h")" 2>/dev/null || true))
	done
	[ ${#pids[@]} -gt 0 ] || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		local alive=0 p
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" -eq 1 ] || return 0
		sleep 0.1
	done
	say "killing what did not stop in 10 s: ${pids[*]}"
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

do_down() {
	load_state
	stop_processes
	local h
	for h in $(hosts) hub; do
		if ns_exists "$(ns "$h")"; then
			ip netns del "$(ns "$h")" || say "cannot delete namespace $(ns "$h")"
		fi
		rm -rf "/etc/netns/$(ns "$h")"
	done
	rm -f "$state/netns.env" "$state/pids"
	say "down: removed namespaces $prefix-* and their links"
}

# ------------------------------------------------------------------ up

write_mesh_toml() {
	local i ranges=()
	[ -z "$fence" ] || read -r -a ranges <<<"$fence"
	[ -z "$fence" ] || [ ${#ranges[@]} -eq "$workers" ] ||
		die "--fence has ${#ranges[@]} ranges for $workers workers"
	{
		echo "# Written by deploy/netns-mesh.sh: one host (network namespace) per process."
		echo "[model]"
		echo "path = \"$model\""
		echo "max_seq_len = $max_seq"
		echo "slots = 16"
		echo "max_batch = 64"
		echo
		echo "[coordinator]"
		echo "http = \"127.0.0.1:8080\""
		echo "data_in = \"tcp://coordinator.mesh:7000\""
		# The planes cross hosts over plain tcp://, which a mesh must ask for: the namespaces
		# are this machine's own, made for the run.
		echo "insecure = true"
		echo
		echo "[plan]"
		echo "strategy = \"$([ -n "$fence" ] && echo pinned || echo balanced)\""
		for ((i = 0; i < workers; i++)); do
			echo
			echo "[[worker]]"
			echo "name = \"w$i\""
			echo "control = \"tcp://w$i.mesh:7001\""
			echo "data = \"tcp://w$i.mesh:7002\""
			echo "http = \"w$i.mesh:9100\""
			echo "memory_limit = \"256MiB\""
			echo "threads = 1"
			[ -z "$fence" ] || echo "layers = [${ranges[$i]%%:*}, ${ranges[$i]##*:}]"
		done
	} >"$state/mesh.toml"
}

create_hosts() {
	local h hosts_file="$state/hosts"
	{
		echo "127.0.0.1 localhost"
		for h in $(hosts); do echo "$(host_ip "$h") $(host_name "$h")"; done
	} >"$hosts_file"
	ip netns add "$(hub)"
	ip -n "$(hub)" link set lo up
	ip -n "$(hub)" link add br0 type bridge
	ip -n "$(hub)" link set br0 up
	for h in $(hosts); do
		ip netns add "$(ns "$h")"
		mkdir -p "/etc/netns/$(ns "$h")"
		cp "$hosts_file" "/etc/netns/$(ns "$h")/hosts"
		ip -n "$(hub)" link add "v-$h" type veth peer name eth0 netns "$(ns "$h")"
		ip -n "$(hub)" link set "v-$h" master br0 up
		ip -n "$(ns "$h")" link set lo up
		ip -n "$(ns "$h")" addr add "$(host_ip "$h")/24" dev eth0
		ip -n "$(ns "$h")" link set eth0 up
	done
}

# Runs "$@" in HOST's namespace in the background, its output in $state/HOST.log.
start_on() {
	local h=$1
	shift
	ip netns exec "$(ns "$h")" "$@" </dev/null >>"$state/$h.log" 2>&1 &
	echo "$h $!" >>"$state/pids"
}

wait_ready() {
	local i
	for ((i = 0; i < 600; i++)); do
		if ip netns exec "$(ns coord)" curl -sf -o /dev/null --max-time 2 \
			http://127.0.0.1:8080/readyz; then
			return 0
		fi
		local pid
		pid=$(awk '$1 == "coord" { print $2 }' "$state/pids")
		kill -0 "$pid" 2>/dev/null || {
			tail -n 20 "$state/coord.log" >&2
			die "the coordinator exited before it was ready (log: $state/coord.log)"
		}
		sleep 0.1
	done
	tail -n 20 "$state/coord.log" >&2
	die "the mesh was not ready within 60 s (logs: $state/*.log)"
}

do_up() {
	[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
	command -v ip >/dev/null || die "needs iproute2 (ip)"
	[[ "$workers" =~ ^[1-9][0-9]?$ ]] || die "--workers expects 1 to 99, got '$workers'"
	[[ "$prefix" =~ ^[A-Za-z0-9]{1,16}$ ]] ||
		die "--prefix expects 1 to 16 letters or digits, got '$prefix'"
	[ -f "$model" ] || die "no model at $model (deploy/setup.sh build copies the default one)"
	model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
	if [ -z "$bindir" ]; then
		coord_bin=$here/build/coordinator/layermesh
		worker_bin=$here/build/worker/layermesh-worker
	else
		coord_bin=$bindir/layermesh
		worker_bin=$bindir/layermesh-worker
	fi
	[ -x "$coord_bin" ] && [ -x "$worker_bin" ] ||
		die "layermesh and layermesh-worker are not at $coord_bin, $worker_bin (--bin DIR)"
	mkdir -p "$state"
	[ ! -f "$state/netns.env" ] ||
		die "$state already holds a mesh (netns-mesh.sh down --state $state first)"
	if ip netns list | grep -q "^$prefix-"; then
		die "namespaces named $prefix-* exist already: pick another --prefix"
	fi
	# Recorded before anything is created, so that down finds everything, even after a failure.
	printf 'prefix=%q\nworkers=%q\nsubnet=%q\n' "$prefix" "$workers" "$subnet" >"$state/netns.env"
	: >"$state/pids"
	trap 'rc=$?; if [ $rc -ne 0 ]; then say "up failed: cleaning up"; do_down || true; fi' EXIT

	write_mesh_toml
	create_hosts
	local h
	for h in $(hosts); do
		[ "$h" = coord ] && continue
		start_on "$h" "$worker_bin" --config "$state/mesh.toml" --worker "$h" --listen-any
	done
	start_on coord "$coord_bin" up --no-spawn --listen-any --timeout "$timeout" \
		"$state/mesh.toml"
	wait_ready
	trap - EXIT
	say "up: $workers workers and the coordinator, each in its own namespace ($prefix-*)"
	do_status
}

# ------------------------------------------------------------------ the rest

do_status() {
	load_state
	local h
	for h in $(hosts); do
		printf '%-6s %-18s %-14s %s\n' "$h" "$(ns "$h")" "$(host_ip "$h")" \
			"$(ip -n "$(hub)" -br link show "v-$h" 2>/dev/null | awk '{ print $2 }')"
	done
	printf 'readyz: %s\n' "$(ip netns exec "$(ns coord)" curl -s --max-time 2 \
		http://127.0.0.1:8080/readyz || echo unreachable)"
}

do_exec() {
	load_state
	[ $# -ge 2 ] || die "exec HOST CMD..."
	local h=$1
	shift
	host_ip "$h" >/dev/null
	exec ip netns exec "$(ns "$h")" "$@"
}

do_link() {
	load_state
	[ $# -eq 2 ] && { [ "$2" = down ] || [ "$2" = up ]; } || die "link HOST down|up"
	host_ip "$1" >/dev/null
	ip -n "$(hub)" link set "v-$1" "$2"
}

# shape HOST delay MS | rate KBIT | clear: a qdisc on both ends of HOST's link, so both
# directions are slowed. Exits 3 when the kernel lacks the qdisc.
do_shape() {
	load_state
	[ $# -ge 2 ] || die "shape HOST delay MS|rate KBIT|clear"
	local h=$1 what=$2 val=${3:-} err
	host_ip "$h" >/dev/null
	local ends=("$(hub) v-$h" "$(ns "$h") eth0") e nsname dev
	for e in "${ends[@]}"; do
		read -r nsname dev <<<"$e"
		tc -n "$nsname" qdisc del dev "$dev" root 2>/dev/null || true
		case "$what" in
		clear) ;;
		delay)
			[[ "$val" =~ ^[0-9]+$ ]] || die "shape HOST delay MS"
			if ! err=$(tc -n "$nsname" qdisc add dev "$dev" root netem delay "${val}ms" 2>&1); then
				say "cannot add a netem delay: $err (the kernel lacks sch_netem?)"
				exit 3
			fi
			;;
		rate)
			[[ "$val" =~ ^[0-9]+$ ]] || die "shape HOST rate KBIT"
			if ! err=$(tc -n "$nsname" qdisc add dev "$dev" root handle 1: htb default 1 2>&1 &&
				tc -n "$nsname" class add dev "$dev" parent 1: classid 1:1 htb \
					rate "${val}kbit" ceil "${val}kbit" 2>&1); then
				say "cannot add an htb rate limit: $err"
				exit 3
			fi
			;;
		*) die "shape HOST delay MS|rate KBIT|clear" ;;
		esac
	done
}

case "$cmd" in
up) do_up ;;
down) do_down ;;
status) do_status ;;
exec) do_exec "$@" ;;
link) do_link "$@" ;;
shape) do_shape "$@" ;;
-h | --help | help) usage ;;
*) die "unknown command '$cmd' (see --help)" ;;
esac

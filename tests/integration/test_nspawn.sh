#!/usr/bin/env bash
# layermesh under systemd as PID 1: Debian 12 containers booted with systemd-nspawn, the units
# installed by deploy/systemd/install.sh as on a real host.
#   1. one host: `systemctl enable --now layermesh.target` brings three workers and the coordinator
#      up; a completion equals `layermesh run`'s;
#   2. a worker SIGKILLed: systemd's Restart= brings it back (NRestarts), the coordinator
#      re-attaches (it serves again, the worker's restarts_total counts it);
#   3. `systemctl restart layermesh-worker@w1` while clients keep requests in flight: no request
#      fails and every answer equals the single process's;
#   4. three hosts, one container each on a bridge of their own network namespace, every plane
#      over tls+tcp:// with the [tls] files as credentials: the mesh serves a completion equal
#      to run's, and /readyz carries no note of plain tcp.
# What systemd reported (unit states, NRestarts, its journal lines) is printed as it goes.
#
# The containers share one read-only root, a debootstrapped Debian 12 (minbase, systemd, dbus and
# the libraries layermesh links) kept outside the clone in $LM_NSPAWN_ROOT (default
# /var/cache/layermesh/nspawn-bookworm): made once with the Debian mirror (about a minute), then
# reused; each container writes into a tmpfs overlay (--volatile=overlay). The built programs,
# the units and the model reach the containers through a read-only bind mount.
#
# The CI form loads the rolling restart for LM_NSPAWN_LOAD_S (8) seconds; the longer manual form
# (LM_NSPAWN_LONG=1) loads for 60 s, restarts every worker in turn under load and SIGKILLs each.
# Skips (77), saying why, where it cannot run: not root, no systemd-nspawn, no root and no
# debootstrap or mirror to make one, a first container that cannot boot here (nspawn's own
# words), a sanitizer build (the containers lack its runtime).
source "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/../.." && pwd)
model="$LM_SHARED/models/stories260K.gguf"
root=${LM_NSPAWN_ROOT:-/var/cache/layermesh/nspawn-bookworm}
long=${LM_NSPAWN_LONG:-}
load_s=${LM_NSPAWN_LOAD_S:-8}
[ -z "$long" ] || load_s=60
packages=systemd,systemd-sysv,dbus,libnng1,libuv1,libcjson1,curl,jq,iproute2,ca-certificates,procps
t_start=$(date +%s)

skip() {
	echo "SKIP: $*"
	exit 77
}
[ "$(id -u)" -eq 0 ] || skip "systemd-nspawn needs root"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn is missing (apt-get install systemd-container)"
! ldd "$LM_WORKER" | grep -q "libasan\|libubsan" ||
	skip "a sanitizer build: the containers lack its runtime (the plain build's run boots them)"

# ---------------------------------------------------------------- the root
if [ ! -x "$root/usr/lib/systemd/systemd" ] || [ "$(cat "$root/.layermesh" 2>/dev/null)" != "$packages" ]; then
	command -v debootstrap >/dev/null || skip "no root at $root and no debootstrap to make one"
	mkdir -p "$(dirname "$root")"
	(
		flock 9
		if [ "$(cat "$root/.layermesh" 2>/dev/null)" != "$packages" ]; then
			rm -rf "$root.new"
			t=$(date +%s)
			if ! debootstrap --variant=minbase --include="$packages" bookworm "$root.new" \
				http://deb.debian.org/debian >"$LM_TMP/debootstrap.log" 2>&1; then
				rm -rf "$root.new"
				exit 3
			fi
			echo "$packages" >"$root.new/.layermesh"
			rm -rf "$root" && mv "$root.new" "$root"
			echo "made the root $root in $(($(date +%s) - t)) s"
		fi
	) 9>"$(dirname "$root")/.nspawn.lock" || {
		tail -n 3 "$LM_TMP/debootstrap.log" >&2
		skip "cannot make the root (debootstrap needs the Debian mirror)"
	}
fi

# What the containers see at /opt/lm (read-only): the programs, the units and install.sh, the
# model, the mesh.toml of each host and the certificates.
stage="$LM_TMP/stage"
mkdir -p "$stage/bin" "$stage/etc" "$stage/models"
chmod 0755 "$stage"
cp "$LM_BIN" "$stage/bin/layermesh"
cp "$LM_WORKER" "$stage/bin/layermesh-worker"
cp -r "$here/deploy/systemd" "$stage/systemd"
cp "$model" "$stage/models/"
chmod -R a+rX "$stage"

# ---------------------------------------------------------------- containers
declare -A LEADER NSPAWN
hub=""
# boot NAME [nspawn options]: boots a container; LEADER[NAME] is its PID 1 (seen from here).
boot() {
	local name=$1 i pid leader="" state
	shift
	local run=()
	[ -z "$hub" ] || run=(nsenter "--net=/run/netns/$hub")
	"${run[@]}" systemd-nspawn -b -D "$root" --register=no --keep-unit --console=passive \
		--volatile=overlay --machine="$name" --bind-ro="$stage:/opt/lm" "$@" \
		>"$LM_TMP/$name.console" 2>&1 &
	pid=$!
	NSPAWN[$name]=$pid
	LM_PIDS+=("$pid")
	for ((i = 0; i < 600; i++)); do
		leader=$(pgrep -P "$pid" -x systemd || true)
		if [ -n "$leader" ]; then
			state=$(nsenter -t "$leader" -a systemctl is-system-running 2>/dev/null || true)
			case "$state" in running | degraded) break ;; esac
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			# The first container tells whether nspawn can run here at all.
			[ ${#LEADER[@]} -gt 0 ] || [ "$name" != one ] ||
				skip "systemd-nspawn cannot boot a container here: $(grep -v '^Press\|^Spawning' "$LM_TMP/$name.console" | tail -n 1)"
			fail "container $name did not boot: $(tail -n 5 "$LM_TMP/$name.console")"
		fi
		sleep 0.1
	done
	LEADER[$name]=$leader
	echo "$name: booted, systemd says '$state' ($(in_c "$name" systemctl --version | head -n 1))"
}
in_c() { # in_c NAME CMD...: runs CMD in the container, as its own processes do
	local name=$1
	shift
	nsenter -t "${LEADER[$name]}" -a "$@"
}
poweroff() {
	local name
	for name in "${!LEADER[@]}"; do
		in_c "$name" systemctl poweroff 2>/dev/null || true
	done
	for name in "${!NSPAWN[@]}"; do
		lm_wait_exit "${NSPAWN[$name]}" 30 || kill -KILL "${NSPAWN[$name]}" 2>/dev/null || true
	done
	LEADER=()
	NSPAWN=()
}
cleanup_nspawn() {
	poweroff
	[ -z "$hub" ] || ip netns del "$hub" 2>/dev/null || true
}
trap 'cleanup_nspawn; lm_cleanup' EXIT

# systemd's view of a unit: its state, restarts and main pid.
unit_state() {
	in_c "$1" systemctl show -p ActiveState -p SubState -p NRestarts -p MainPID "$2" |
		tr '\n' ' '
}
# install NAME WORKERS COORDINATOR(0/1): mesh.toml (and [tls] files) into /etc/layermesh, the
# units by install.sh, enabled, and layermesh.target enabled and started (README's commands).
install_host() {
	local name=$1 workers=$2 coord=$3 w
	in_c "$name" sh -c "mkdir -p /etc/layermesh && cp /opt/lm/etc/$name/* /etc/layermesh/ &&
		chmod 0600 /etc/layermesh/*"
	in_c "$name" /opt/lm/systemd/install.sh --config /etc/layermesh/mesh.toml \
		--bindir /opt/lm/bin --workers "$workers" >/dev/null
	in_c "$name" systemctl daemon-reload
	for w in $workers; do in_c "$name" systemctl enable -q "layermesh-worker@$w.service"; done
	[ "$coord" = 0 ] || in_c "$name" systemctl enable -q layermesh-coordinator.service
	in_c "$name" systemctl enable -q --now layermesh.target
}
# readyz NAME: the coordinator's /readyz body, from inside the container.
readyz() { in_c "$1" curl -s -m 2 http://127.0.0.1:8080/readyz || true; }
wait_ready() { # wait_ready NAME LIMIT_S: prints the ms it took
	local name=$1 i t0
	t0=$(date +%s%N)
	for ((i = 0; i < $2 * 10; i++)); do
		if [[ "$(readyz "$name")" == ready* ]]; then
			echo $((($(date +%s%N) - t0) / 1000000))
			return 0
		fi
		sleep 0.1
	done
	return 1
}
# attached NAME WORKER: until the coordinator serves with the worker's current process (the pid
# its HELLO gave equals systemd's MainPID) and /readyz is 200; prints the ms it took.
attached() {
	local name=$1 w=$2 i t0 pid seen
	t0=$(date +%s%N)
	for ((i = 0; i < 600; i++)); do
		pid=$(in_c "$name" systemctl show -p MainPID --value "layermesh-worker@$w.service")
		seen=$(in_c "$name" curl -s -m 2 http://127.0.0.1:8080/v1/status |
			jq -r ".workers[] | select(.name == \"$w\" and .state == \"ready\") | .pid" || true)
		if [ "$pid" != 0 ] && [ "$seen" = "$pid" ] && [[ "$(readyz "$name")" == ready* ]]; then
			echo $((($(date +%s%N) - t0) / 1000000))
			return 0
		fi
		sleep 0.1
	done
	return 1
}
# A stand-in for layermesh that runs the real one in the container's network (for lm_client).
gen_in() {
	printf '#!/bin/sh\nexec nsenter -t %s -n %q "$@"\n' "${LEADER[$1]}" "$LM_BIN" >"$LM_TMP/gen-$1"
	chmod +x "$LM_TMP/gen-$1"
	echo "$LM_TMP/gen-$1"
}

# ---------------------------------------------------------------- 1. one host
mkdir -p "$stage/etc/one"
LM_SLOTS=16 lm_mesh_toml "$stage/etc/one/mesh.toml" /opt/lm/models/stories260K.gguf tcp 8080 \
	0:2 2:4 4:5
chmod -R a+rX "$stage/etc"
boot one --private-network
install_host one "w0 w1 w2" 1
ms=$(wait_ready one 60) || {
	in_c one journalctl -u 'layermesh*' -o cat --no-pager | tail -n 20 >&2
	fail "layermesh.target did not serve within 60 s: $(readyz one)"
}
for u in layermesh.target layermesh-workers.target layermesh-coordinator.service \
	layermesh-worker@w0.service layermesh-worker@w1.service layermesh-worker@w2.service; do
	echo "  systemd: $u: $(unit_state one "$u")"
done
echo "one host: layermesh.target started, the mesh ready after $ms ms"
"$LM_BIN" run --model "$model" --prompt "Once upon a time" -n 48 --temp 0 --ctx 256 --ids \
	>"$LM_TMP/want" 2>/dev/null
gen=$(gen_in one)
"$gen" generate --url http://127.0.0.1:8080 --prompt "Once upon a time" -n 48 --temp 0 --ids \
	--timeout 60 >"$LM_TMP/got" 2>"$LM_TMP/got.err" || fail "no completion: $(cat "$LM_TMP/got.err")"
cmp -s "$LM_TMP/want" "$LM_TMP/got" || fail "the completion differs from run's: $(cat "$LM_TMP/got")"
echo "one host: a completion of 48 tokens, the ids of layermesh run"

# ---------------------------------------------------------------- 2. SIGKILL, Restart=
kill_and_back() { # kill_and_back WORKER
	local w=$1 old new i
	old=$(in_c one systemctl show -p MainPID --value "layermesh-worker@$w.service")
	local n0
	n0=$(in_c one systemctl show -p NRestarts --value "layermesh-worker@$w.service")
	in_c one kill -KILL "$old"
	for ((i = 0; i < 300; i++)); do
		new=$(in_c one systemctl show -p MainPID --value "layermesh-worker@$w.service")
		[ "$new" != 0 ] && [ "$new" != "$old" ] && break
		sleep 0.1
	done
	[ "$new" != 0 ] && [ "$new" != "$old" ] || fail "systemd did not restart $w: $(unit_state one "layermesh-worker@$w.service")"
	ms=$(attached one "$w") || fail "the coordinator did not re-attach $w: $(readyz one)"
	local n1 total
	n1=$(in_c one systemctl show -p NRestarts --value "layermesh-worker@$w.service")
	[ "$n1" -eq $((n0 + 1)) ] || fail "NRestarts of $w went from $n0 to $n1"
	total=$(in_c one curl -s http://127.0.0.1:8080/v1/status | jq ".workers[] | select(.name == \"$w\") | .restarts_total")
	echo "SIGKILL of $w (pid $old): systemd restarted it as pid $new (NRestarts $n1);" \
		"the coordinator re-attached it $ms ms later (its restarts_total $total)"
	in_c one journalctl -u "layermesh-worker@$w.service" -o cat --no-pager |
		grep -E "Main process exited|Failed with result|Scheduled restart job|Started layermesh" |
		tail -n 4 | sed 's/^/  journal: /'
	"$gen" generate --url http://127.0.0.1:8080 --prompt "Once upon a time" -n 48 --temp 0 \
		--ids --timeout 60 >"$LM_TMP/got" 2>/dev/null || fail "no completion after $w came back"
	cmp -s "$LM_TMP/want" "$LM_TMP/got" || fail "after $w came back: $(cat "$LM_TMP/got")"
}
kill_and_back w1
if [ -n "$long" ]; then
	kill_and_back w0
	kill_and_back w2
fi

# ---------------------------------------------------------------- 3. a rolling restart
dir="$LM_TMP/load"
mkdir -p "$dir"
lm_specs_init "$dir" "$model" 256 32
LM_URL=http://127.0.0.1:8080
real_bin=$LM_BIN
LM_BIN=$gen
lm_load_start "$dir" 8 10000
sleep 1
rolled=()
t_end=$(($(date +%s) + load_s))
for w in w1 ${long:+w0 w2 w1}; do
	in_c one systemctl restart "layermesh-worker@$w.service"
	rolled+=("$w")
	ms=$(attached one "$w") || fail "not ready after restarting $w: $(readyz one)"
	echo "systemctl restart layermesh-worker@$w: $(unit_state one "layermesh-worker@$w.service")re-attached after $ms ms"
	sleep 1
done
while [ "$(date +%s)" -lt "$t_end" ]; do sleep 0.5; done
lm_load_stop "$dir"
LM_BIN=$real_bin
lm_load_tally "$dir"
[ "$LOAD_FAILED" -eq 0 ] || fail "$LOAD_FAILED of $LOAD_TOTAL requests failed across the restarts"
[ "$LOAD_DIFFER" -eq 0 ] || fail "$LOAD_DIFFER of $LOAD_TOTAL answers differ"
echo "rolling restart of ${rolled[*]} under load: $LOAD_TOTAL requests in ${load_s} s, 0 failed," \
	"all equal to the single process; the slowest took $LOAD_MAX_MS ms"
poweroff

# ---------------------------------------------------------------- 4. three hosts, TLS
hub="lm-nspawn-$$"
ip netns add "$hub"
ip -n "$hub" link set lo up
ip -n "$hub" link add lmbr type bridge
ip -n "$hub" link set lmbr up
lm_certs "$LM_TMP/certs"
hosts=(a b c)
for h in "${hosts[@]}"; do
	mkdir -p "$stage/etc/lm-$h"
	cp "$LM_TMP/certs/ca.pem" "$LM_TMP/certs/mesh.pem" "$LM_TMP/certs/mesh.key" "$stage/etc/lm-$h/"
	{
		echo "[model]"
		echo "path = \"/opt/lm/models/stories260K.gguf\""
		echo "max_seq_len = 256"
		echo "slots = 16"
		echo "[coordinator]"
		echo "http = \"127.0.0.1:8080\""
		echo "data_in = \"tls+tcp://lm-a:7000\""
		echo "[plan]"
		echo "strategy = \"pinned\""
		echo "[tls]"
		echo "ca_file = \"ca.pem\""
		echo "cert_file = \"mesh.pem\""
		echo "key_file = \"mesh.key\""
		i=0
		for r in a:0:2 b:2:4 c:4:5; do
			IFS=: read -r host s e <<<"$r"
			echo "[[worker]]"
			echo "name = \"w$i\""
			echo "control = \"tls+tcp://lm-$host:7101\""
			echo "data = \"tls+tcp://lm-$host:7102\""
			echo "http = \"lm-$host:9100\""
			echo "memory_limit = \"64MiB\""
			echo "layers = [$s, $e]"
			i=$((i + 1))
		done
	} >"$stage/etc/lm-$h/mesh.toml"
done
chmod -R a+rX "$stage/etc"
n=11
for h in "${hosts[@]}"; do
	boot "lm-$h" --network-bridge=lmbr
	in_c "lm-$h" sh -c "ip addr add 10.77.0.$n/24 dev host0 && ip link set host0 up &&
		printf '10.77.0.11 lm-a\n10.77.0.12 lm-b\n10.77.0.13 lm-c\n' >>/etc/hosts"
	n=$((n + 1))
done
install_host lm-b w1 0
install_host lm-c w2 0
install_host lm-a w0 1
ms=$(wait_ready lm-a 90) || {
	in_c lm-a journalctl -u 'layermesh*' -o cat --no-pager | tail -n 20 >&2
	fail "the three-host mesh did not serve within 90 s: $(readyz lm-a)"
}
for h in "${hosts[@]}"; do
	for u in $(in_c "lm-$h" systemctl list-units --no-legend --plain 'layermesh*' | awk '{ print $1 }'); do
		echo "  systemd on lm-$h: $u: $(unit_state "lm-$h" "$u")"
	done
done
body=$(readyz lm-a)
[ "$body" = ready ] || fail "/readyz of the TLS mesh: $body"
gen=$(gen_in lm-a)
"$gen" generate --url http://127.0.0.1:8080 --prompt "Once upon a time" -n 48 --temp 0 --ids \
	--timeout 60 >"$LM_TMP/got" 2>"$LM_TMP/got.err" || fail "no completion: $(cat "$LM_TMP/got.err")"
cmp -s "$LM_TMP/want" "$LM_TMP/got" || fail "the three-host completion differs: $(cat "$LM_TMP/got")"
echo "three hosts over tls+tcp:// (lm-a: coordinator and w0, lm-b: w1, lm-c: w2): ready after" \
	"$ms ms, /readyz '$body', a completion of 48 tokens with run's ids"
in_c lm-b journalctl -u layermesh-worker@w1.service -o cat --no-pager | grep -E "listening|ready:" |
	tail -n 2 | sed 's/^/  journal on lm-b: /'
echo "nspawn: $(($(date +%s) - t_start)) s in all"
echo "ok: nspawn"

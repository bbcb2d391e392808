#!/usr/bin/env bash
# deploy/systemd/install.sh — install layermesh's systemd units for one mesh.toml.
#
#   deploy/systemd/install.sh [--config FILE] [--bindir DIR] [--unitdir DIR] [--workers "w0 w1"]
#
# Writes into --unitdir (default /etc/systemd/system):
#   layermesh-worker@.service, layermesh-coordinator.service, layermesh-workers.target,
#   layermesh.target
#       with --bindir (default /usr/local/bin, where `meson install` puts layermesh and
#       layermesh-worker) and --config (default /etc/layermesh/mesh.toml) in their command lines;
#   layermesh-worker@NAME.service.d/memory.conf for each [[worker]] of mesh.toml (or each NAME
#       of --workers: the ones this host runs), with MemoryMax = its memory_limit + 64 MiB: the
#       limit counts the weights, KV cache, scratch and embedding/head that the planner placed;
#       the 64 MiB are for the program, its libraries and NNG's buffers. A backend = "cuda"
#       worker gets none: its memory_limit is device memory;
#   layermesh-worker@.service.d/tls.conf and layermesh-coordinator.service.d/tls.conf when
#       mesh.toml has a [tls] table: its three files, which must be plain names of files
#       beside mesh.toml (ca_file = "ca.pem"), become credentials of the same names, so that
#       they sit beside the mesh.toml credential in the service as they do in /etc/layermesh.
# It reads mesh.toml through `layermesh-worker --config FILE --index N --show-config`, so it
# refuses a mesh.toml that the worker would refuse. It enables and starts nothing: it prints the
# systemctl commands that would.
set -euo pipefail

src=$(cd "$(dirname "$0")" && pwd)
config=/etc/layermesh/mesh.toml
bindir=/usr/local/bin
unitdir=/etc/systemd/system
only=""
headroom=$((64 << 20))

die() {
	printf 'install: error: %s\n' "$*" >&2
	exit 1
}
while [ $# -gt 0 ]; do
	case "$1" in
	--config) config=$2; shift 2 ;;
	--bindir) bindir=$2; shift 2 ;;
	--unitdir) unitdir=$2; shift 2 ;;
	--workers) only=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
case "$config$bindir" in
/*/*) ;;
*) die "--config and --bindir must be absolute paths (they go into the units)" ;;
esac
[[ "$config$bindir" != *[[:space:]\|\&\\]* ]] ||
	die "paths with spaces, '|', '&' or '\\' are not supported"
worker_bin=$bindir/layermesh-worker
[ -x "$worker_bin" ] || die "$worker_bin is missing (meson install, or --bindir)"
[ -x "$bindir/layermesh" ] || die "$bindir/layermesh is missing (meson install, or --bindir)"
[ -r "$config" ] || die "cannot read $config (--config)"

# name=value lines of every [[worker]], one --show-config after another.
names=()
declare -A limit
for ((i = 0; ; i++)); do
	if ! out=$("$worker_bin" --config "$config" --index "$i" --show-config 2>&1); then
		[ "$i" -gt 0 ] && grep -q "out of range" <<<"$out" && break
		die "$out"
	fi
	name=$(sed -n 's/^name=//p' <<<"$out")
	names+=("$name")
	limit[$name]=$(sed -n 's/^memory_limit=//p' <<<"$out")
	# A cuda worker's memory_limit is device memory (and 0 when the planner is to take the
	# device's free memory): it says nothing of the host memory MemoryMax bounds.
	[ "$(sed -n 's/^backend=//p' <<<"$out")" != cuda ] || limit[$name]=cuda
done
if [ -n "$only" ]; then
	for name in $only; do
		[ -n "${limit[$name]:-}" ] || die "$config has no worker '$name' (it has: ${names[*]})"
	done
	read -r -a names <<<"$only"
fi

# [tls]: the files the services load as credentials, beside mesh.toml.
tls_files=()
if tls=$("$worker_bin" --config "$config" --index 0 --show-config | grep '^tls_'); then
	confdir=$(dirname "$config")
	for key in ca_file cert_file key_file; do
		val=$(sed -n "/^\[tls\]/,/^\[/s/^$key *= *\"\(.*\)\"/\1/p" "$config")
		case "$val" in
		"" | */*) die "[tls] $key must be the name of a file beside $config (it is \"$val\"):" \
			"the services find it beside their mesh.toml credential" ;;
		esac
		[ -r "$confdir/$val" ] || die "[tls] $key: cannot read $confdir/$val"
		tls_files+=("$val")
	done
	: "$tls" # the worker read the same files
fi

mkdir -p "$unitdir"
for unit in layermesh-worker@.service layermesh-coordinator.service layermesh-workers.target \
	layermesh.target; do
	sed -e "s|/usr/local/bin/|$bindir/|g" -e "s|/etc/layermesh/mesh.toml|$config|g" \
		"$src/$unit" >"$unitdir/$unit"
done
for name in "${names[@]}"; do
	mkdir -p "$unitdir/layermesh-worker@$name.service.d"
	if [ "${limit[$name]}" = cuda ]; then
		rm -f "$unitdir/layermesh-worker@$name.service.d/memory.conf"
		echo "worker $name runs on CUDA: no MemoryMax (its memory_limit is the device's)"
		continue
	fi
	cat >"$unitdir/layermesh-worker@$name.service.d/memory.conf" <<EOF
# Written by deploy/systemd/install.sh from $config: worker $name's memory_limit
# (${limit[$name]} bytes) + 64 MiB for the program, its libraries and its buffers.
[Service]
MemoryMax=$((${limit[$name]} + headroom))
EOF
done

if [ ${#tls_files[@]} -gt 0 ]; then
	for unit in layermesh-worker@.service layermesh-coordinator.service; do
		mkdir -p "$unitdir/$unit.d"
		{
			echo "# Written by deploy/systemd/install.sh from $config: its [tls] files, as"
			echo "# credentials beside the mesh.toml credential."
			echo "[Service]"
			for f in "${tls_files[@]}"; do
				echo "LoadCredential=$f:$(dirname "$config")/$f"
			done
		} >"$unitdir/$unit.d/tls.conf"
	done
fi

# The instances are WantedBy layermesh-workers.target, which layermesh.target wants: enabling
# layermesh.target is what brings them up at boot, on a host that runs only workers too.
echo "installed into $unitdir: the units and MemoryMax for ${names[*]}${tls_files:+, the [tls] credentials}. Then:"
echo "  systemctl daemon-reload"
echo "  systemctl enable$(printf ' layermesh-worker@%s' "${names[@]}")"
echo "  systemctl enable layermesh-coordinator   # on the coordinator's host"
echo "  systemctl enable --now layermesh.target"

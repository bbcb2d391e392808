#!/usr/bin/env bash
# The systemd units of deploy/systemd:
#   1. install.sh writes the units for deploy/systemd/mesh.toml with this build's binaries,
#      each worker's MemoryMax is its memory_limit + 64 MiB, and its [tls] files become
#      credentials beside mesh.toml's (a [tls] path that is not a file beside it is refused);
#   2. `systemd-analyze verify` accepts every unit without a word (and does complain about a
#      misspelt key, so the check can fail);
#   3. `systemd-analyze security --offline` rates each service's exposure at most 2.0 ("OK");
#   4. the workers and the coordinator, run under strace as the units run them (workers by
#      --config and --worker, `layermesh up --no-spawn`), make only system calls that the
#      units' SystemCallFilter allows, and open no /proc file beyond their own (ProcSubset=pid).
# Skips (77) without systemd-analyze.
source "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/../.." && pwd)
command -v systemd-analyze >/dev/null || {
	echo "SKIP: systemd-analyze is missing (Debian: apt-get install systemd)"
	exit 77
}

# ---------------------------------------------------------------- 1. install
bindir="$LM_TMP/bin"
units="$LM_TMP/units"
mkdir -p "$bindir"
ln -s "$LM_BIN" "$bindir/layermesh"
ln -s "$LM_WORKER" "$bindir/layermesh-worker"
etc="$LM_TMP/etc"
lm_certs "$etc"
cp "$here/deploy/systemd/mesh.toml" "$etc/mesh.toml"
"$here/deploy/systemd/install.sh" --config "$etc/mesh.toml" --bindir "$bindir" \
	--unitdir "$units" >"$LM_TMP/install.out"
for u in layermesh-worker@.service layermesh-coordinator.service; do
	for f in ca.pem mesh.pem mesh.key; do
		grep -qx "LoadCredential=$f:$etc/$f" "$units/$u.d/tls.conf" ||
			fail "$u's tls.conf: $(cat "$units/$u.d/tls.conf" 2>&1)"
	done
done
sed 's|^ca_file = "ca.pem"|ca_file = "/etc/ssl/ca.pem"|' "$etc/mesh.toml" >"$etc/abs.toml"
if "$here/deploy/systemd/install.sh" --config "$etc/abs.toml" --bindir "$bindir" \
	--unitdir "$LM_TMP/u3" 2>"$LM_TMP/err"; then
	fail "install.sh took a [tls] file that is not beside mesh.toml"
fi
grep -q "must be the name of a file beside" "$LM_TMP/err" || fail "install.sh: $(cat "$LM_TMP/err")"
for w in w0 w1 w2; do
	f="$units/layermesh-worker@$w.service.d/memory.conf"
	# deploy/systemd/mesh.toml gives every worker 64 MiB: 64 MiB + 64 MiB = 134217728 bytes.
	grep -qx "MemoryMax=134217728" "$f" || fail "$f: $(cat "$f" 2>&1)"
done
want="ExecStart=$bindir/layermesh-worker --config \${CREDENTIALS_DIRECTORY}/mesh.toml --worker %i"
grep -qF "$want" "$units/layermesh-worker@.service" ||
	fail "the worker's ExecStart: $(grep ExecStart "$units"/*)"
grep -q "ExecStart=$bindir/layermesh up --no-spawn" "$units/layermesh-coordinator.service" ||
	fail "the coordinator's ExecStart: $(grep ExecStart "$units/layermesh-coordinator.service")"
if "$here/deploy/systemd/install.sh" --config "$etc/mesh.toml" \
	--bindir "$bindir" --unitdir "$LM_TMP/u2" --workers "w1 w9" 2>"$LM_TMP/err"; then
	fail "install.sh took a worker that mesh.toml does not have"
fi
grep -q "has no worker 'w9'" "$LM_TMP/err" || fail "install.sh: $(cat "$LM_TMP/err")"
echo "install.sh: units, MemoryMax=134217728 for w0 w1 w2, [tls] as credentials"

# ---------------------------------------------------------------- 2. verify
# verify DIR UNIT...: systemd-analyze verify must succeed and say nothing at all.
verify() {
	local dir=$1 out rc=0
	shift
	out=$(cd "$dir" && SYSTEMD_UNIT_PATH="$dir:" systemd-analyze verify "$@" 2>&1) || rc=$?
	[ "$rc" -eq 0 ] && [ -z "$out" ] && return 0
	echo "exit $rc: $out"
	return 1
}
all=(layermesh-worker@w0.service layermesh-worker@w1.service layermesh-worker@w2.service
	layermesh-coordinator.service layermesh-workers.target layermesh.target)
out=$(verify "$units" "${all[@]}") || fail "systemd-analyze verify: $out"
cp -r "$units" "$LM_TMP/typo"
sed -i 's/^ProtectSystem=/ProtectSytem=/' "$LM_TMP/typo/layermesh-worker@.service"
if out=$(verify "$LM_TMP/typo" layermesh-worker@w0.service); then
	fail "systemd-analyze verify took a misspelt key"
fi
grep -q "Unknown key 'ProtectSytem'" <<<"$out" || fail "verify of a misspelt key said: $out"
echo "systemd-analyze verify: ${all[*]}: clean (and a misspelt key is caught)"

# ---------------------------------------------------------------- 3. security
for u in layermesh-worker@w0.service layermesh-coordinator.service; do
	out=$(cd "$units" && SYSTEMD_UNIT_PATH="$units:" systemd-analyze security --offline=yes \
		--threshold=20 "$u" 2>&1) || fail "$u is exposed beyond 2.0: $(tail -n 3 <<<"$out")"
	grep -o "Overall exposure level for [^ ]*: [0-9.]* [A-Z]*" <<<"$out"
done

# ---------------------------------------------------------------- 4. system calls
if ! command -v strace >/dev/null; then
	echo "SKIP part 4: strace is missing (Debian: apt-get install strace)"
	echo "ok: systemd"
	exit 0
fi
if ldd "$LM_WORKER" | grep -q "libasan\|libubsan"; then
	# The sanitizers' runtime makes calls of its own (personality, sigaltstack, ...).
	echo "SKIP part 4: a sanitizer build; the plain build's run checks the system calls"
	echo "ok: systemd"
	exit 0
fi
# The calls SystemCallFilter=@system-service with ~@privileged @resources allows, from this
# machine's systemd, nested groups expanded.
declare -A seen
expand() {
	local g=$1 line
	[ -z "${seen[$g]:-}" ] || return 0
	seen[$g]=1
	while read -r line; do
		case "$line" in
		"" | "#"*) ;;
		@*) expand "$line" ;;
		*) echo "$line" ;;
		esac
	done < <(systemd-analyze syscall-filter "$g" | tail -n +2)
}
expand @system-service | sort -u >"$LM_TMP/allow"
seen=()
expand @privileged | sort -u >"$LM_TMP/deny"
seen=()
expand @resources | sort -u >>"$LM_TMP/deny"
sort -u -o "$LM_TMP/deny" "$LM_TMP/deny"
comm -23 "$LM_TMP/allow" "$LM_TMP/deny" >"$LM_TMP/allowed"
[ "$(wc -l <"$LM_TMP/allowed")" -gt 200 ] ||
	fail "the filter expanded to $(wc -l <"$LM_TMP/allowed") calls"

dir="$LM_TMP/trace"
mkdir -p "$dir"
model="$LM_SHARED/models/stories260K.gguf"
lm_mesh_toml "$dir/mesh.toml" "$model" tcp "$(lm_port)" 0:2 2:5
# traced NAME CMD...: CMD under strace -f; the pids of the traced program and of strace go to
# LM_PIDS and STRACE_PIDS. (strace's children are not all the program: the program is the
# process whose command line starts with CMD's.)
STRACE_PIDS=()
traced() {
	local name=$1 i child=""
	shift
	strace -f -qq -o "$dir/$name.trace" "$@" >>"$dir/$name.log" 2>&1 &
	STRACE_PIDS+=($!)
	for ((i = 0; i < 50; i++)); do
		child=$(pgrep -xf -- "$*" || true)
		[ -z "$child" ] || break
		sleep 0.1
	done
	[ -n "$child" ] || fail "strace did not start $name"
	LM_PIDS+=("$child")
}
traced w0 "$LM_WORKER" --config "$dir/mesh.toml" --worker w0
traced w1 "$LM_WORKER" --config "$dir/mesh.toml" --worker w1
port=$(sed -n 's/^http = "127.0.0.1:\([0-9]*\)"/\1/p' "$dir/mesh.toml" | head -n 1)
traced coord "$LM_BIN" up --no-spawn --timeout 60 "$dir/mesh.toml"
for ((i = 0; i < 600; i++)); do
	curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null ||
	fail "the traced mesh is not ready: $(tail "$dir/coord.log")"
"$LM_BIN" generate --url "http://127.0.0.1:$port" --prompt "Once upon a time" -n 32 --temp 0 \
	--timeout 60 >/dev/null
curl -sf "http://127.0.0.1:$port/v1/status" >/dev/null
curl -sf "http://127.0.0.1:$port/metrics" >/dev/null
for pid in "${LM_PIDS[@]}"; do kill -TERM "$pid"; done
for pid in "${LM_PIDS[@]}" "${STRACE_PIDS[@]}"; do
	lm_wait_exit "$pid" 20 || fail "pid $pid did not stop"
done
sed -n 's/^[0-9]\+ \+\([a-z_0-9]\+\)(.*/\1/p' "$dir"/*.trace | sort -u >"$dir/used"
[ "$(wc -l <"$dir/used")" -gt 20 ] || fail "the traces hold only $(wc -l <"$dir/used") calls"
denied=$(comm -23 "$dir/used" "$LM_TMP/allowed" | tr '\n' ' ')
[ -z "$denied" ] || fail "calls the units' SystemCallFilter refuses: $denied"
proc=$(grep -ho 'open[a-z]*(AT_FDCWD, "/proc/[^"]*"' "$dir"/*.trace |
	grep -v '"/proc/self/\|"/proc/thread-self/' | sort -u || true)
[ -z "$proc" ] || fail "/proc files beyond the process's own: $proc"
echo "system calls: $(wc -l <"$dir/used") distinct ones, all within the units' filter"
echo "ok: systemd"

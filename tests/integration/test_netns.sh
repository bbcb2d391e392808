#!/usr/bin/env bash
# A multi-host mesh on one machine (deploy/netns-mesh.sh): three workers and the coordinator, each
# in its own network namespace with its own address, over tcp:// between them, names resolved
# per host as in a Kubernetes mesh.toml.
#   1. plain: greedy generations through it are those of `layermesh run`;
#   2. a slow link (netem 20 ms each way where the kernel has netem; else an htb rate limit):
#      the same ids, and slower;
#   3. a cable cut during requests and plugged back after 3 s: every request completes with
#      the same ids or fails with a clear error, within a bound; then the mesh serves again;
#   4. a cut that outlasts the coordinator's patience: waiting requests fail with HTTP 503 and
#      the reason; once plugged back, the mesh serves again;
#   5. `down` leaves nothing behind, and neither does an `up` that fails half-way.
# Needs root and network namespaces; skips (77) without them.
source "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")/../.." && pwd)
nm="$here/deploy/netns-mesh.sh"
model="$LM_SHARED/models/stories260K.gguf"
prefix="lmt$$"
state="$LM_TMP/netns"
bindir="$LM_TMP/bin"

skip() {
	echo "SKIP: $*"
	exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "needs iproute2 (ip)"
command -v tc >/dev/null || skip "needs iproute2 (tc)"
ip netns add "$prefix-probe" 2>/dev/null || skip "cannot create a network namespace here"
ip netns del "$prefix-probe"

# Whatever happens, the namespaces (and the processes in them) go before lib.sh's cleanup.
netns_cleanup() {
	local rc=$?
	if [ -f "$state/netns.env" ]; then
		if [ "$rc" -ne 0 ]; then
			for f in "$state"/*.log; do
				echo "--- $f" >&2
				tail -n 15 "$f" >&2
			done
			# Where each process of the mesh is: a hang shows in its threads' stacks.
			local host pid
			while read -r host pid; do
				echo "--- $host" >&2
				lm_stacks "$pid"
			done <"$state/pids"
		fi
		"$nm" down --state "$state" || true
	fi
	lm_cleanup
}
trap netns_cleanup EXIT

leftovers() {
	{ ip netns list | awk '{ print $1 }' | grep "^$1-" || true; } | tr '\n' ' '
	find /etc/netns -maxdepth 1 -name "$1-*" 2>/dev/null | tr '\n' ' ' || true
}

mkdir -p "$bindir"
ln -s "$LM_BIN" "$bindir/layermesh"
ln -s "$LM_WORKER" "$bindir/layermesh-worker"
"$nm" up --state "$state" --prefix "$prefix" --bin "$bindir" --model "$model" \
	--fence "0:2 2:4 4:5" --max-seq 256 --timeout 2
on_coord() { "$nm" exec --state "$state" coord "$@"; }
readyz() { on_coord curl -s --max-time 2 http://127.0.0.1:8080/readyz || true; }
generate() {
	on_coord timeout 90 "$LM_BIN" generate --url http://127.0.0.1:8080 --temp 0 --ids \
		--timeout 60 "$@"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ---------------------------------------------------------------- 1. plain
prompts=("Once upon a time" "The cat" "Tom had 3 red apples!")
for i in "${!prompts[@]}"; do
	"$LM_BIN" run --model "$model" --prompt "${prompts[$i]}" -n 200 --temp 0 --ctx 256 --ids \
		>"$LM_TMP/want.$i" 2>/dev/null
	generate --prompt "${prompts[$i]}" -n 200 >"$LM_TMP/got.$i" 2>/dev/null
	cmp -s "$LM_TMP/want.$i" "$LM_TMP/got.$i" ||
		fail "'${prompts[$i]}' across namespaces: $(cat "$LM_TMP/got.$i"), run: $(cat "$LM_TMP/want.$i")"
done
echo "plain: ${#prompts[@]} prompts, greedy ids equal to layermesh run"
# Without [tls] the planes leave every host in the clear: the mesh had to ask for it with
# insecure = true, and even so plan warns, up and /readyz say so. Without that key, plan
# refuses the same file.
"$LM_BIN" plan "$state/mesh.toml" >/dev/null 2>"$LM_TMP/plan.err" || true
grep -q "warning: .* hosts over plain tcp://" "$LM_TMP/plan.err" ||
	fail "plan does not warn about plain tcp across hosts: $(cat "$LM_TMP/plan.err")"
grep -v '^insecure = true$' "$state/mesh.toml" >"$LM_TMP/secure.toml"
if "$LM_BIN" plan "$LM_TMP/secure.toml" >/dev/null 2>"$LM_TMP/plan.err"; then
	fail "plan took plain tcp:// across hosts without insecure = true"
fi
grep -q "insecure = true" "$LM_TMP/plan.err" ||
	fail "plan's refusal does not say how to allow it: $(cat "$LM_TMP/plan.err")"
grep -q "no TLS" <<<"$(readyz)" || fail "/readyz does not say there is no TLS: $(readyz)"
grep -q "warn: no TLS" "$state/coord.log" || fail "the coordinator's log does not say it"
echo "no TLS: plan warns; /readyz says: $(readyz)"

# timed LINK: timed_ms = the median of three timed generations of 64 tokens, in ms.
timed() {
	local t=() i s
	for i in 1 2 3; do
		s=$(now_ms)
		generate --prompt "The cat" -n 64 >"$LM_TMP/timed" 2>/dev/null
		t+=($(($(now_ms) - s)))
		cmp -s "$LM_TMP/want.64" "$LM_TMP/timed" ||
			fail "a generation on the $1 link differs: $(cat "$LM_TMP/timed")"
	done
	timed_ms=$(printf '%s\n' "${t[@]}" | sort -n | sed -n 2p)
}
"$LM_BIN" run --model "$model" --prompt "The cat" -n 64 --temp 0 --ctx 256 --ids \
	>"$LM_TMP/want.64" 2>/dev/null

# ---------------------------------------------------------------- 2. a slow link
timed plain
plain_ms=$timed_ms
rc=0
"$nm" shape --state "$state" w1 delay 20 2>"$LM_TMP/shape.err" || rc=$?
if [ "$rc" -eq 0 ]; then
	slow="netem delay 20 ms each way on w1's link"
	# Each of the 64 decode steps crosses w1's link twice (w0 -> w1 -> w2): >= 40 ms more.
	min_extra=$((64 * 40 * 8 / 10))
elif [ "$rc" -eq 3 ]; then
	echo "no netem here ($(tail -n 1 "$LM_TMP/shape.err")): an htb rate limit instead"
	"$nm" shape --state "$state" w1 rate 256
	slow="htb 256 kbit/s each way on w1's link (this kernel has no netem)"
	min_extra=300
else
	fail "shape failed: $(cat "$LM_TMP/shape.err")"
fi
timed slow
slow_ms=$timed_ms
"$nm" shape --state "$state" w1 clear
echo "latency of 64 tokens (median of 3): plain $plain_ms ms, $slow: $slow_ms ms; equal ids"
[ "$slow_ms" -ge $((plain_ms + min_extra)) ] ||
	fail "the slow link added $((slow_ms - plain_ms)) ms, expected at least $min_extra"

# ---------------------------------------------------------------- 3. a short cut
# run_requests TAG N: N background generations; each writes TAG.i.{out,err,rc,ms}.
run_requests() {
	local tag=$1 n=$2 i
	for ((i = 0; i < n; i++)); do
		(
			s=$(now_ms)
			rc=0
			generate --prompt "Once upon a time" -n 200 >"$LM_TMP/$tag.$i.out" \
				2>"$LM_TMP/$tag.$i.err" || rc=$?
			echo $(($(now_ms) - s)) >"$LM_TMP/$tag.$i.ms"
			echo "$rc" >"$LM_TMP/$tag.$i.rc"
		) &
	done
}
# check_requests TAG N LIMIT_MS: each completed with the reference ids or failed with a clear
# error, within LIMIT_MS. Sets ok and failed to the counts.
check_requests() {
	local tag=$1 n=$2 limit=$3 i rc ms
	ok=0
	failed=0
	for ((i = 0; i < n; i++)); do
		rc=$(cat "$LM_TMP/$tag.$i.rc")
		ms=$(cat "$LM_TMP/$tag.$i.ms")
		[ "$ms" -le "$limit" ] || fail "$tag request $i took $ms ms (limit $limit)"
		if [ "$rc" -eq 0 ]; then
			cmp -s "$LM_TMP/want.0" "$LM_TMP/$tag.$i.out" ||
				fail "$tag request $i completed with other ids: $(cat "$LM_TMP/$tag.$i.out")"
			ok=$((ok + 1))
		else
			[ "$rc" -ne 124 ] || fail "$tag request $i hung until killed"
			grep -q "HTTP [45][0-9][0-9]: ." "$LM_TMP/$tag.$i.err" ||
				fail "$tag request $i failed without a clear error: $(cat "$LM_TMP/$tag.$i.err")"
			failed=$((failed + 1))
		fi
	done
}
# wait_ready: until /readyz says ready, at most 30 s; back_ms = how long that took.
wait_ready() {
	local i s
	s=$(now_ms)
	for ((i = 0; i < 300; i++)); do
		[[ "$(readyz)" != ready* ]] || {
			back_ms=$(($(now_ms) - s))
			return 0
		}
		sleep 0.1
	done
	fail "the mesh was not ready 30 s after the link came back: $(readyz)"
}

run_requests before 4
sleep 0.02
"$nm" link --state "$state" w1 down
run_requests during 4
sleep 3
echo "cut for 3 s: readyz says: $(readyz)"
"$nm" link --state "$state" w1 up
wait_ready
wait
check_requests before 4 60000
ok1=$ok failed1=$failed
check_requests during 4 60000
ok2=$ok failed2=$failed
slowest=$(cat "$LM_TMP"/before.*.ms "$LM_TMP"/during.*.ms | sort -n | tail -n 1)
echo "short cut: $((ok1 + ok2)) of 8 requests completed with equal ids, $((failed1 + failed2))" \
	"failed clearly; the slowest took $slowest ms; ready $back_ms ms after the link came back"
generate --prompt "Once upon a time" -n 200 >"$LM_TMP/after1" 2>/dev/null
cmp -s "$LM_TMP/want.0" "$LM_TMP/after1" || fail "after the short cut: $(cat "$LM_TMP/after1")"

# ---------------------------------------------------------------- 4. a long cut
# With --timeout 2 the coordinator reports w1 failed after 5 attempts in a row (about 15 s);
# requests waiting for it then fail with the reason, later ones fail at once, and the keeper
# goes on trying until the link is back.
"$nm" link --state "$state" w1 down
cut=$(now_ms)
run_requests long 2
for ((i = 0; i < 400; i++)); do
	grep -q "cannot start" <<<"$(readyz)" && break
	sleep 0.1
done
gave_up_ms=$(($(now_ms) - cut))
grep -q "cannot start" <<<"$(readyz)" || fail "w1 was not reported failed after 40 s: $(readyz)"
wait
check_requests long 2 60000
ok3=$ok failed3=$failed
s=$(now_ms)
rc=0
generate --prompt "The cat" -n 8 >/dev/null 2>"$LM_TMP/fast.err" || rc=$?
fast_ms=$(($(now_ms) - s))
[ "$rc" -ne 0 ] && grep -q "HTTP 503: worker w1 cannot start" "$LM_TMP/fast.err" ||
	fail "a request to the mesh without w1: exit $rc, $(cat "$LM_TMP/fast.err")"
[ "$fast_ms" -lt 3000 ] || fail "the 503 took $fast_ms ms"
echo "long cut: w1 reported failed after $gave_up_ms ms; $failed3 waiting requests failed with" \
	"'$(head -n 1 "$LM_TMP/long.0.err")', $ok3 completed; a new one failed in $fast_ms ms"
"$nm" link --state "$state" w1 up
wait_ready
s=$(now_ms)
generate --prompt "Once upon a time" -n 200 >"$LM_TMP/after2" 2>/dev/null
cmp -s "$LM_TMP/want.0" "$LM_TMP/after2" || fail "after the long cut: $(cat "$LM_TMP/after2")"
echo "after the long cut: ready in $back_ms ms; the next request took $(($(now_ms) - s)) ms," \
	"equal ids"

# ---------------------------------------------------------------- 5. nothing left behind
"$nm" down --state "$state"
left=$(leftovers "$prefix")
[ -z "${left// /}" ] || fail "down left: $left"
if pgrep -f "$state/mesh.toml" >/dev/null; then
	fail "processes survived down: $(pgrep -af "$state/mesh.toml")"
fi
# An up that fails half-way (a coordinator that dies at start) removes what it created.
mkdir -p "$LM_TMP/badbin"
printf '#!/bin/sh\necho "this coordinator is broken" >&2\nexit 3\n' >"$LM_TMP/badbin/layermesh"
chmod +x "$LM_TMP/badbin/layermesh"
ln -s "$LM_WORKER" "$LM_TMP/badbin/layermesh-worker"
if "$nm" up --state "$LM_TMP/bad" --prefix "${prefix}b" --bin "$LM_TMP/badbin" \
	--model "$model" 2>"$LM_TMP/bad.err"; then
	fail "up succeeded with a broken coordinator"
fi
grep -q "exited before it was ready" "$LM_TMP/bad.err" ||
	fail "up's failure: $(cat "$LM_TMP/bad.err")"
left=$(leftovers "${prefix}b")
[ -z "${left// /}" ] || fail "a failed up left: $left"
if pgrep -f "$LM_TMP/bad/mesh.toml" >/dev/null; then
	fail "a failed up left its workers running"
fi
echo "down and a failed up left no namespace, link, hosts file or process"
echo "ok: netns"

#!/usr/bin/env bash
# Worker faults with real processes:
#   1. a storm: workers killed with SIGKILL several times while 32 requests run; every request
#      completes with exactly the output of a fault-free run; then the same storm on a mesh
#      that speculates (stories260K drafted by its own q8_0 copy): the replays rebuild every
#      cache from the accepted tokens, and every request still ends as `run` ends it;
#   2. a worker that cannot come back (its binary is gone): after five failed starts in a row
#      it is reported failed, requests fail fast with 503 and the reason, /readyz says why;
#      the keeper goes on trying, and once the binary is back the mesh serves again; then a
#      worker that hangs while starting (it stops itself: alive and silent) is watched from
#      its spawn: /readyz says it is starting, then that it hung; it is killed once its start
#      bound has passed (not after the 60 s handshake), and started again until it serves;
#      and a worker that dies while a redeploy of another one runs: the redeploy is rolled
#      back, saying why, and the mesh serves on;
#   3. a worker that crashes at start: `layermesh up` fails with the reason, and leaves nothing;
#   4. a stop while a worker restarts and a request runs: everything ends, nothing hangs.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
worker_pid() { pgrep -f "layermesh-worker --name $1 .*$2" | head -n 1; }

# ---------------------------------------------------------------- 1. the storm
# storm NAME [SPECULATIVE_TOML]: 32 requests (greedy and seeded) while workers are killed.
storm() {
	local name=$1 spec=${2:-}
	dir="$LM_TMP/$name"
	mkdir -p "$dir"
	LM_MAX_SEQ=512 LM_WORKER_TIMEOUT=$(lm_storm_worker_timeout) lm_mesh_toml "$dir/mesh.toml" \
		"$model" ipc "$(lm_port)" 0:2 2:4 4:5
	[ -z "$spec" ] || printf '\n[speculative]\n%b' "$spec" >>"$dir/mesh.toml"
	lm_up "$dir/mesh.toml" "$dir/up.log"
	local prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!")
	local args=() i
	for i in $(seq 0 31); do
		if ((i % 2)); then args+=("--temp 0.8 --seed $i"); else args+=("--temp 0"); fi
	done
	for i in "${!args[@]}"; do
		[ -f "$LM_TMP/solo.$i" ] && continue # the fault-free runs, once for both storms
		# shellcheck disable=SC2086
		"$LM_BIN" run --model "$model" --prompt "${prompts[$((i % 4))]}" -n 300 --ctx 512 \
			${args[$i]} >"$LM_TMP/solo.$i" 2>/dev/null
	done
	local pids=()
	for i in "${!args[@]}"; do
		# shellcheck disable=SC2086
		"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$((i % 4))]}" -n 300 ${args[$i]} \
			--timeout 120 >"$dir/mesh.$i" 2>"$dir/mesh.$i.err" &
		pids+=($!)
	done
	local kills=0 w pid rc
	for w in w1 w2 w0 w1; do
		sleep 0.4
		pid=$(worker_pid "$w" "$dir") || true
		[ -n "$pid" ] || continue
		kill -KILL "$pid" && kills=$((kills + 1))
		echo "killed $w (pid $pid)"
	done
	for i in "${!pids[@]}"; do
		rc=0
		wait "${pids[$i]}" || rc=$?
		[ "$rc" -eq 0 ] || { ls -la "$dir" >&2; cat "$dir/mesh.$i" "$dir/mesh.$i.err" >&2; tail -30 "$dir/up.log" >&2; fail "request $i failed during the storm (exit $rc)"; }
	done
	for i in "${!args[@]}"; do
		cmp -s "$LM_TMP/solo.$i" "$dir/mesh.$i" || {
			diff "$LM_TMP/solo.$i" "$dir/mesh.$i" >&2 || true
			fail "$name: request $i (${args[$i]}) differs from its fault-free run"
		}
	done
	local status replays restarts
	status=$(curl -sf "$LM_URL/v1/status")
	replays=$(jq '.scheduler.replays' <<<"$status")
	restarts=$(jq '[.workers[].restarts_total] | add' <<<"$status")
	echo "$name: $kills kills, $restarts restarts, $replays sequences replayed; 32/32 identical;" \
		"$(jq '.scheduler.spec_drafted' <<<"$status") drafted," \
		"$(jq '.scheduler.spec_accepted' <<<"$status") accepted"
	[ "$kills" -ge 3 ] || fail "only $kills workers were killed"
	[ "$restarts" -eq "$kills" ] ||
		fail_restarts "$dir/up.log" "$name: $kills kills, but $restarts restarts counted"
	[ -z "$spec" ] || [ "$(jq '.scheduler.spec_accepted' <<<"$status")" -gt 0 ] ||
		fail "$name: no draft was accepted"
	curl -sf "$LM_URL/readyz" >/dev/null || fail "the mesh is not ready after the storm"
	lm_down "$dir"
}
storm storm
"$LM_BIN" quantize --in "$model" --out "$LM_TMP/draft.gguf" --type q8_0 >/dev/null ||
	fail "layermesh quantize"
# MXFP4 is an experts' type (synth --experts-type): quantize refuses it for a whole model.
"$LM_BIN" quantize --in "$model" --out "$LM_TMP/mx.gguf" --type mxfp4 2>"$LM_TMP/mx.err" &&
	fail "layermesh quantize --type mxfp4 was accepted"
grep -q "got 'mxfp4'" "$LM_TMP/mx.err" || fail "quantize --type mxfp4: $(cat "$LM_TMP/mx.err")"
storm storm-spec "draft_model = \"$LM_TMP/draft.gguf\"\nmax_draft = 4\nmax_streams = 0\n"

# ---------------------------------------------------------------- 2. cannot come back
dir="$LM_TMP/gone"
mkdir -p "$dir/bin"
cp "$LM_WORKER" "$dir/bin/layermesh-worker"
lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:3 3:5
LM_WORKER="$dir/bin/layermesh-worker" lm_up "$dir/mesh.toml" "$dir/up.log"
rm "$dir/bin/layermesh-worker"
kill -KILL "$(worker_pid w1 "$dir")"
# 100 + 200 + 400 + 800 ms of backoff between five failed starts, then it is failed.
for _ in $(seq 200); do
	body=$(curl -s "$LM_URL/readyz" || true)
	grep -q "cannot start" <<<"$body" && break
	sleep 0.1
done
grep -q "cannot start" <<<"$body" || fail "/readyz does not say the worker cannot start: $body"
grep -q "missing" <<<"$body" || fail "/readyz does not give the reason: $body"
echo "readyz: $body"
start=$(date +%s%N)
code=$(curl -s -o "$dir/resp.json" -w '%{http_code}' "$LM_URL/v1/completions" \
	-H 'Content-Type: application/json' -d '{"prompt": "The cat", "max_tokens": 8}')
ms=$((($(date +%s%N) - start) / 1000000))
[ "$code" = 503 ] || fail "a request to a mesh without w1 got HTTP $code: $(cat "$dir/resp.json")"
jq -e '.error.message | test("w1")' "$dir/resp.json" >/dev/null ||
	fail "the 503 does not name the worker: $(cat "$dir/resp.json")"
[ "$ms" -lt 2000 ] || fail "the 503 took $ms ms"
echo "request while it cannot start: HTTP 503 in $ms ms: $(jq -r .error.message "$dir/resp.json")"
# The keeper never gives up: with the binary back, its next try (at most 5 s away) heals it.
cp "$LM_WORKER" "$dir/bin/layermesh-worker"
ready_ms=$(lm_ready_wait "$LM_URL" 20) || fail "the mesh did not come back with the binary"
"$LM_BIN" generate --url "$LM_URL" --prompt "The cat" -n 8 --temp 0 --timeout 30 >/dev/null ||
	fail "the healed mesh does not serve"
echo "binary back: ready after $ready_ms ms and serving"
# readyz_until PATTERN LIMIT_S: until /readyz's body matches; prints the last body.
readyz_until() {
	local body="" i
	for ((i = 0; i < $2 * 10; i++)); do
		body=$(curl -s -m 1 "$LM_URL/readyz" || true)
		grep -q "$1" <<<"$body" && break
		sleep 0.1
	done
	echo "$body"
}
rm "$dir/bin/layermesh-worker"
printf '#!/bin/sh\nkill -STOP $$\n' >"$dir/bin/layermesh-worker"
chmod +x "$dir/bin/layermesh-worker"
kill -KILL "$(worker_pid w1 "$dir")"
body=$(readyz_until "starting pid" 10)
grep -q "worker w1 is restarting (starting pid" <<<"$body" ||
	fail "/readyz does not say w1 is starting: $body"
hung=$(worker_pid w1 "$dir")
[ -n "$hung" ] || fail "no stopped w1 to watch"
echo "hangs at start: readyz: $body"
# The bound: 10 worker_timeouts (1 s; 3 s in a sanitizer build) for a slice this small.
body=$(readyz_until "hung while starting" $((LM_ASAN ? 45 : 20)))
grep -q "hung while starting" <<<"$body" || fail "/readyz does not say w1 hung: $body"
lm_wait_exit "$hung" 10 || fail "the hung w1 (pid $hung) is still there"
echo "hangs at start: readyz: $body"
cp "$LM_WORKER" "$dir/bin/layermesh-worker"
ready_ms=$(lm_ready_wait "$LM_URL" 40) || fail "the mesh did not come back after the hang"
echo "hangs at start: killed, and ready $ready_ms ms after the binary was back"
# A keeper's fault in the middle of a redeploy: w1's new build takes 1 s to start, and w0 dies
# meanwhile and cannot come back (its binary is gone). The redeploy stops before its next
# step, drops the candidate and says why; once w0 is back the old build serves on.
printf '#!/bin/sh\nsleep 1\nexec %s "$@"\n' "$LM_WORKER" >"$dir/slow-worker"
chmod +x "$dir/slow-worker"
code=$(curl -s -o "$dir/rd.json" -w '%{http_code}' "$LM_URL/v1/admin/redeploy" \
	-H 'Content-Type: application/json' \
	-d "{\"workers\": [\"w1\"], \"binary\": \"$dir/slow-worker\"}")
[ "$code" = 202 ] || fail "the redeploy was not started: HTTP $code $(cat "$dir/rd.json")"
rm "$dir/bin/layermesh-worker"
kill -KILL "$(worker_pid w0 "$dir")"
for _ in $(seq 300); do
	rd=$(curl -s "$LM_URL/v1/admin/redeploy" || true)
	[ "$(jq -r .state <<<"$rd")" = running ] || break
	sleep 0.1
done
echo "fault mid-redeploy: $(jq -c '{state, failed_step, error}' <<<"$rd")"
jq -e '.state == "failed"' <<<"$rd" >/dev/null || fail "the redeploy did not fail: $rd"
jq -e '.error | test("worker w0 went away during the redeploy")' <<<"$rd" >/dev/null ||
	fail "the redeploy does not say w0 went away: $rd"
cp "$LM_WORKER" "$dir/bin/layermesh-worker"
lm_ready_wait "$LM_URL" 20 >/dev/null || fail "the mesh did not come back after the fault"
"$LM_BIN" generate --url "$LM_URL" --prompt "The cat" -n 8 --temp 0 --timeout 30 >/dev/null ||
	fail "the mesh does not serve after the rolled-back redeploy"
lm_down "$dir"

# ---------------------------------------------------------------- 3. crashes at start
dir="$LM_TMP/crash"
mkdir -p "$dir"
printf '#!/bin/sh\necho "this build is broken" >&2\nexit 3\n' >"$dir/broken-worker"
chmod +x "$dir/broken-worker"
lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:5
start=$(date +%s)
if "$LM_BIN" up "$dir/mesh.toml" --worker-bin "$dir/broken-worker" --timeout 10 \
	>"$dir/up.log" 2>&1; then
	fail "layermesh up succeeded with a worker that crashes at start"
fi
took=$(($(date +%s) - start))
grep -q "exited with status 3: this build is broken" "$dir/up.log" ||
	fail "the reason is not reported in the worker's words: $(tail -5 "$dir/up.log")"
[ "$took" -lt 30 ] || fail "layermesh up took $took s to give up"
! pgrep -f "broken-worker" >/dev/null || fail "a broken worker survived"
echo "crash at start: layermesh up gave up in $took s: $(grep -m1 'cannot start' "$dir/up.log")"

# A "binary" the kernel refuses to execute (a directory passes access(X_OK)): every spawn
# fails inside libuv, and each failed process handle must still be closed before it is freed
# (the sanitizer build of this test catches it if not).
mkdir -p "$dir/not-a-binary"
if "$LM_BIN" up "$dir/mesh.toml" --worker-bin "$dir/not-a-binary" --timeout 10 \
	>"$dir/up-dir.log" 2>&1; then
	fail "layermesh up succeeded with a directory for a worker binary"
fi
grep -q "cannot start .*not-a-binary" "$dir/up-dir.log" ||
	fail "the reason is not reported: $(tail -5 "$dir/up-dir.log")"
echo "unexecutable binary: $(grep -m1 'cannot start' "$dir/up-dir.log")"
# ---------------------------------------------------------------- 4. stopped mid-restart
# SIGTERM lands while a keeper is bringing a killed worker back (its service updates race
# the stop) and while a request is in flight: the request ends, with its text or a clear
# error, and `layermesh up` stops with nothing left (lm_down checks processes and files).
for delay in 0 0.05 0.2 0.5; do
	dir="$LM_TMP/stop-$delay"
	mkdir -p "$dir"
	lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
	lm_up "$dir/mesh.toml" "$dir/up.log"
	"$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time" -n 200 --timeout 30 \
		>"$dir/gen.out" 2>"$dir/gen.err" &
	gen=$!
	sleep 0.1
	pid=$(worker_pid w1 "$dir") || true
	[ -n "$pid" ] && kill -KILL "$pid"
	sleep "$delay"
	lm_down "$dir"
	lm_wait_exit "$gen" 20 || fail "a request outlived the coordinator by 20 s (delay $delay s)"
	rc=0
	wait "$gen" || rc=$?
	if [ "$rc" -ne 0 ] && ! grep -qE "stopping|restarting|503|connect" "$dir/gen.err"; then
		fail "the request failed without a reason (delay $delay s): $(cat "$dir/gen.err")"
	fi
	echo "stop ${delay} s after a kill: stopped; the request exited $rc"
done
echo "ok: faults"

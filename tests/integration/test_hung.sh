#!/usr/bin/env bash
# Workers that are alive but do not work:
#   1. a worker stopped with SIGSTOP while 16 clients keep requests in flight: the liveness
#      probe on its control plane declares it down within about a second, the coordinator
#      kills it and starts another, its sequences are replayed, and every request completes
#      with the tokens of the single process;
#   2. a worker whose control plane answers but which drops every data message from some
#      point on (a test build): the progress check on the batches it holds finds it, and the
#      same happens.
#
# LM_HUNG_STOP_S (40) bounds how long the stopped worker is left stopped.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
stop_s=${LM_HUNG_STOP_S:-40}
worker_pid() { pgrep -f "layermesh-worker[a-z-]* --name $1 .*$2" | head -n 1; }

# ---------------------------------------------------------------- 1. SIGSTOP
dir="$LM_TMP/stopped"
mkdir -p "$dir"
LM_SLOTS=16 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"
lm_specs_init "$dir" "$model" 256 48
lm_load_start "$dir" 16 200
sleep 2
pid=$(worker_pid w1 "$dir")
t0=$(date +%s%N)
kill -STOP "$pid"
echo "stopped w1 (pid $pid)"
down_ms=none
gone_ms=none
for ((i = 0; i < stop_s * 20; i++)); do
	if [ "$down_ms" = none ] && ! curl -sf -m 1 "$LM_URL/readyz" >/dev/null 2>&1; then
		down_ms=$((($(date +%s%N) - t0) / 1000000))
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		gone_ms=$((($(date +%s%N) - t0) / 1000000))
		break
	fi
	sleep 0.05
done
kill -CONT "$pid" 2>/dev/null || true
ready_ms=$(lm_ready_wait "$LM_URL" 30) || ready_ms=none
sleep 2
lm_load_stop "$dir"
lm_load_tally "$dir"
status=$(curl -sf "$LM_URL/v1/status")
echo "SIGSTOP: not ready after $down_ms ms, the stopped process gone after $gone_ms ms, ready" \
	"again $ready_ms ms later; w1: $(jq -c '.workers[1] | {state, restarts, restarts_total}' \
	<<<"$status")"
grep -m1 "worker w1 is down" "$dir/up.log" || true
[ "$gone_ms" != none ] || fail "the stopped worker was left alone for $stop_s s"
[ "$LOAD_FAILED" -eq 0 ] || fail "$LOAD_FAILED of $LOAD_TOTAL requests failed"
[ "$LOAD_DIFFER" -eq 0 ] || fail "$LOAD_DIFFER of $LOAD_TOTAL answers differ"
[ "$gone_ms" -le 5000 ] || fail "the stopped worker was killed only after $gone_ms ms"
grep -q "worker w1 is down: .*control" "$dir/up.log" ||
	fail "the log does not say why w1 was declared down"
lm_down "$dir"

# ---------------------------------------------------------------- 2. drops data
if [ -z "${LM_WORKER_DROPDATA:-}" ]; then
	echo "ok: hung (no drop-data build)"
	exit 0
fi
dir="$LM_TMP/drops"
mkdir -p "$dir"
LM_SLOTS=16 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
LM_WORKER="$LM_WORKER_DROPDATA" lm_up "$dir/mesh.toml" "$dir/up.log"
lm_specs_init "$dir" "$model" 256 48
lm_load_start "$dir" 16 100
sleep 2
pid=$(worker_pid w1 "$dir")
t0=$(date +%s%N)
touch "$dir/w1.data.drop" # the test build's cue: from now on, drop every data message
gone_ms=none
for ((i = 0; i < 600; i++)); do
	if ! kill -0 "$pid" 2>/dev/null; then
		gone_ms=$((($(date +%s%N) - t0) / 1000000))
		break
	fi
	sleep 0.05
done
ready_ms=$(lm_ready_wait "$LM_URL" 30) || ready_ms=none
sleep 2
lm_load_stop "$dir"
lm_load_tally "$dir"
why=$(grep -m1 "worker w1 is down" "$dir/up.log" || true)
echo "drops data: the dropping process gone after $gone_ms ms, ready $ready_ms ms later: $why"
[ "$gone_ms" != none ] || fail "the worker that drops data was not noticed in 30 s"
[ "$LOAD_FAILED" -eq 0 ] || fail "$LOAD_FAILED of $LOAD_TOTAL requests failed"
[ "$LOAD_DIFFER" -eq 0 ] || fail "$LOAD_DIFFER of $LOAD_TOTAL answers differ"
grep -q "worker w1 is down: .*batch" <<<"$why" || fail "the log does not say why: $why"
lm_down "$dir"
echo "ok: hung"

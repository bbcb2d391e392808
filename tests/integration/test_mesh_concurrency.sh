#!/usr/bin/env bash
# 16 sequences at once through a 3-worker mesh: each gets exactly the tokens it gets alone in
# `layermesh run` (greedy and seeded sampling), and the scheduler packs them into shared
# FORWARD batches (far fewer batches than tokens). SIGINT stops everything cleanly.
#
# So that the 16 really are at the coordinator together (16 client processes start one after
# another; on a busy machine each could finish before the next arrives), the first worker is
# held with SIGSTOP until all 16 have been admitted, then let go.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!" "The dog ran"
	"One day" "She saw a bird" "The sun was hot")

dir="$LM_TMP/mesh"
mkdir -p "$dir"
lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"

# 16 requests: each prompt greedy, and each prompt sampled with its own seed.
args=()
for i in "${!prompts[@]}"; do
	args+=("--temp 0")
	args+=("--temp 0.9 --seed $((1000 + i))")
done
for k in "${!args[@]}"; do
	p=${prompts[$((k / 2))]}
	# shellcheck disable=SC2086
	"$LM_BIN" run --model "$model" --prompt "$p" -n 48 --ctx 256 ${args[$k]} \
		>"$LM_TMP/solo.$k" 2>/dev/null
done
w0=$(pgrep -f "layermesh-worker --name w0 .*$dir") || fail "no w0 process"
kill -STOP "$w0"
pids=()
for k in "${!args[@]}"; do
	p=${prompts[$((k / 2))]}
	# shellcheck disable=SC2086
	"$LM_BIN" generate --url "$LM_URL" --prompt "$p" -n 48 ${args[$k]} \
		>"$LM_TMP/mesh.$k" 2>"$LM_TMP/mesh.$k.err" &
	pids+=($!)
done
for _ in $(seq 300); do
	s=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.active + .scheduler.queued')
	[ "$s" -lt 16 ] || break
	sleep 0.1
done
kill -CONT "$w0"
[ "$s" -ge 16 ] || fail "only $s of 16 requests reached the coordinator within 30 s"
for pid in "${pids[@]}"; do
	wait "$pid" || fail "a concurrent generate failed"
done
for k in "${!args[@]}"; do
	cmp -s "$LM_TMP/solo.$k" "$LM_TMP/mesh.$k" || {
		diff "$LM_TMP/solo.$k" "$LM_TMP/mesh.$k" >&2 || true
		fail "request $k (${args[$k]}, '${prompts[$((k / 2))]}') differs from its solo run"
	}
done
echo "ok: 16 concurrent requests equal their solo runs"

status=$(curl -sf "$LM_URL/v1/status")
batches=$(jq '.scheduler.batches' <<<"$status")
tokens=$(jq '.scheduler.tokens_generated' <<<"$status")
echo "scheduler: $tokens tokens generated in $batches batches"
[ "$tokens" -ge 16 ] || fail "only $tokens tokens generated"
[ $((batches * 3)) -lt "$tokens" ] || fail "sequences were not batched: $batches batches for $tokens tokens"

# The workers `up` spawned share this machine's CPUs (one thread each): by default as many
# batches travel as the CPUs compute at once, at most one per worker, and the log says so when
# that is fewer than the workers.
cpus=$(nproc)
want=$((cpus < 3 ? cpus : 3))
inflight=$(jq '.scheduler.batches_in_flight' <<<"$status")
[ "$inflight" = "$want" ] || fail "batches in flight: $inflight, want $want ($cpus CPUs, 3 workers)"
if [ "$want" -lt 3 ]; then
	grep -q "batches in flight: $want, as many as this machine's $cpus CPUs" "$dir/up.log" ||
		fail "the log does not say why $want batches travel: $(cat "$dir/up.log")"
fi
echo "ok: $inflight batches in flight on $cpus CPUs"

# Ctrl-C: the same clean stop as SIGTERM.
kill -INT "$LM_UP_PID"
lm_wait_exit "$LM_UP_PID" 20 || fail "layermesh up did not stop on SIGINT"
sleep 0.2
if pgrep -f "layermesh-worker.*$dir" >/dev/null; then
	fail "workers survived SIGINT"
fi
left=$(find "$dir" -maxdepth 1 \( -name '*.data' -o -name '*.ctl' \))
[ -z "$left" ] || fail "ipc files left behind: $left"
echo "ok: SIGINT stopped every process and removed the ipc files"

# mesh.toml's batches_in_flight is taken as it is.
sed -i 's/^\[coordinator\]/[coordinator]\nbatches_in_flight = 5/' "$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up2.log"
inflight=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.batches_in_flight')
[ "$inflight" = 5 ] || fail "batches_in_flight = 5 in mesh.toml, $inflight in /v1/status"
lm_down "$dir"
echo "ok: batches_in_flight = 5 from mesh.toml"

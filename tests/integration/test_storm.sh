#!/usr/bin/env bash
# A storm of kills, as an adversary would make it: a random worker gets SIGKILL every 1.5 s
# for 20 s while 48 clients keep requests in flight (greedy and seeded, in turn), on the
# default three-worker cut and on ten workers. The mesh restarts every worker as often as it
# is killed (no budget runs out on a worker that was healthy between kills), every request
# completes with exactly the tokens of the single process, and the mesh is ready again within
# 5 s of the last kill. /v1/status and /metrics count every restart and every replay.
#
# LM_STORM_SECONDS (20), LM_STORM_EVERY_MS (1500), LM_STORM_CLIENTS (48) and
# LM_STORM_MESHES ("3 10") change the storm.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
seconds=${LM_STORM_SECONDS:-20}
every_ms=${LM_STORM_EVERY_MS:-1500}
clients=${LM_STORM_CLIENTS:-48}
worker_pid() { pgrep -f "layermesh-worker --name $1 .*$2" | head -n 1; }

storm() {
	local n=$1 dir="$LM_TMP/storm$1" fence=() i kills=0 last_kill t_end m=$model
	mkdir -p "$dir"
	if [ "$n" -eq 3 ]; then
		fence=(0:2 2:4 4:5)
	else
		# One layer per worker: a synthetic model as deep as the mesh, stories260K's width
		# and vocabulary.
		m="$dir/deep.gguf"
		"$LM_BIN" synth --out "$m" --dim 64 --layers "$n" --heads 8 --kv-heads 4 --ffn 172 \
			--vocab 512 --type f32 --vocab-from "$model" --ctx 512 >/dev/null
		for ((i = 0; i < n; i++)); do fence+=("$i:$((i + 1))"); done
	fi
	LM_SLOTS=48 LM_MAX_SEQ=256 LM_WORKER_TIMEOUT=$(lm_storm_worker_timeout) lm_mesh_toml \
		"$dir/mesh.toml" "$m" ipc "$(lm_port)" "${fence[@]}"
	lm_up "$dir/mesh.toml" "$dir/up.log"
	lm_specs_init "$dir" "$m" 256 32
	lm_load_start "$dir" "$clients" 400
	sleep 1
	t_end=$(($(date +%s%N) / 1000000 + seconds * 1000))
	local pause
	pause=$(awk -v ms="$every_ms" 'BEGIN { printf "%.3f", ms / 1000 }')
	while :; do
		local w="w$((RANDOM % n))" pid
		pid=$(worker_pid "$w" "$dir") || true
		if [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; then
			kills=$((kills + 1))
			last_kill=$(date +%s%N)
		fi
		[ $(($(date +%s%N) / 1000000)) -lt $((t_end - every_ms)) ] || break
		sleep "$pause"
	done
	# Ready again: every kill seen (a restart counted for each) and /readyz 200.
	local ready_ms=none counted
	for ((i = 0; i < 600; i++)); do
		counted=$(curl -sf -m 1 "$LM_URL/v1/status" | jq '[.workers[].restarts_total] | add')
		if [ "${counted:-0}" -ge "$kills" ] && curl -sf -m 1 "$LM_URL/readyz" >/dev/null; then
			ready_ms=$((($(date +%s%N) - last_kill) / 1000000))
			break
		fi
		sleep 0.05
	done
	sleep 2 # requests in flight at the last kill finish on the healed mesh
	lm_load_stop "$dir"
	lm_load_tally "$dir"
	local status metrics restarts total replays
	status=$(curl -sf "$LM_URL/v1/status")
	metrics=$(curl -sf "$LM_URL/metrics")
	restarts=$(jq '[.workers[].restarts_total // .workers[].restarts] | add' <<<"$status")
	replays=$(jq '.scheduler.replays' <<<"$status")
	total=$(grep -c '^layermesh_worker_restarts_total{' <<<"$metrics" || true)
	echo "storm on $n workers: $kills kills in ${seconds} s, $restarts restarts counted," \
		"$replays sequences replayed; ready ${ready_ms} ms after the last kill"
	jq -c '[.workers[] | {name, state, restarts, restarts_total, replays}]' <<<"$status"
	[ "$ready_ms" != none ] || fail "the mesh was not ready 30 s after the storm"
	[ "$LOAD_FAILED" -eq 0 ] || fail "$LOAD_FAILED of $LOAD_TOTAL requests failed"
	[ "$LOAD_DIFFER" -eq 0 ] || fail "$LOAD_DIFFER of $LOAD_TOTAL answers differ"
	[ "$ready_ms" -le 5000 ] || fail "ready only $ready_ms ms after the last kill"
	[ "$restarts" -eq "$kills" ] ||
		fail_restarts "$dir/up.log" "$kills kills but $restarts restarts counted"
	[ "$total" -eq "$n" ] || fail "/metrics has $total layermesh_worker_restarts_total samples"
	lm_down "$dir"
}

for n in ${LM_STORM_MESHES:-3 10}; do
	storm "$n"
done
echo "ok: storm"

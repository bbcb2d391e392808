#!/usr/bin/env bash
# tests/gpu/mesh_cuda.sh — a three-worker mesh over stories260K with a cuda worker between two
# cpu workers: its greedy ids must equal the single-process CPU run's, for every prompt. The cuda
# worker has no memory_limit: the planner takes its device's free memory (printed, with the
# plan's bytes for it and the worker's /status device memory). Run by run_gpu_checks.sh, with
# LM_BIN, LM_WORKER and LM_SHARED (a directory holding models/stories260K.gguf) set.
source "$(dirname "$0")/../integration/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
prompts=("Once upon a time" "The cat" "Tom had 3 red apples!")
dir="$LM_TMP/mesh"
mkdir -p "$dir"
lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
# w1 on the GPU, without a memory_limit. (LM_MESH_BACKEND=cpu: the same script on a machine
# without one, w1 on the CPU with its limit, to check the script itself.)
backend=${LM_MESH_BACKEND:-cuda}
awk -v be="$backend" '/^name = "w1"$/ { print; print "backend = \"" be "\""; w1 = 1; next }
     w1 && /^memory_limit/ { w1 = 0; if (be == "cuda") next } { print }' "$dir/mesh.toml" \
	>"$dir/m.toml"
mv "$dir/m.toml" "$dir/mesh.toml"

"$LM_BIN" plan "$dir/mesh.toml" >"$dir/plan.txt" 2>&1 || { cat "$dir/plan.txt"; fail "plan"; }
sed 's/^/plan: /' "$dir/plan.txt"

declare -A want=()
for p in "${prompts[@]}"; do
	want[$p]=$("$LM_BIN" run --model "$model" --prompt "$p" --temp 0 -n 40 --ctx 256 --ids \
		2>/dev/null)
done
lm_up "$dir/mesh.toml" "$dir/up.log"
for p in "${prompts[@]}"; do
	got=$("$LM_BIN" generate --url "$LM_URL" --prompt "$p" --temp 0 -n 40 --ids 2>/dev/null) ||
		fail "generate failed"
	[ "$got" = "${want[$p]}" ] ||
		fail "'$p' through the cpu-cuda-cpu mesh gave
  $got
instead of the single process's
  ${want[$p]}"
done
http=$(sed -n '/^name = "w1"$/,/^layers/ s/^http = "\(.*\)"/\1/p' "$dir/mesh.toml")
st=$(curl -sf "http://$http/status") || fail "w1 /status"
echo "device: w1 /status backend $(jq -r .backend <<<"$st"), memory $(jq -c .backend_memory <<<"$st")"
kind=$([ "$backend" = cuda ] && echo device || echo host)
jq -e --arg be "$backend" --arg kind "$kind" '.backend == $be and .backend_memory.kind == $kind
	and .backend_memory.used_bytes > 0' <<<"$st" >/dev/null || fail "w1 /status: $st"
# Read whole before grep: grep -q stops at its match, and under pipefail the curl it leaves
# writing into a closed pipe would fail the check at random.
metrics=$(curl -sf "http://$http/metrics") || fail "w1 /metrics"
grep -q "layermesh_worker_backend_memory_used_bytes{kind=\"$kind\"}" <<<"$metrics" ||
	fail "w1 /metrics has no $kind memory"
lm_down "$dir"
echo "ok: ${#prompts[@]} prompts through cpu, $backend, cpu workers equal the single process"

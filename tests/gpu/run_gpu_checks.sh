#!/usr/bin/env bash
# tests/gpu/run_gpu_checks.sh [CARRY] — every GPU check of the CUDA backend, in one run of about
# five to ten minutes on an H200, printing a summary table last.
#
# First, on the CPU machine: bash tests/gpu/prepare_carry.sh (builds .gpu-carry/: the binaries,
# their libraries, stories260K and llama.cpp's references). Then on the GPU machine:
#     bash tests/gpu/run_gpu_checks.sh .gpu-carry
# (the device tool: run(command="bash tests/gpu/run_gpu_checks.sh .gpu-carry",
#  carry=[".gpu-carry"], timeout_s=600)). Without CARRY/bin it builds here instead, with
# -Dcuda=enabled, which needs layermesh's Debian packages on that machine.
#
# The checks, each a line of the summary:
#   1 matrix     tests/gpu/op_matrix --backend cuda: every op x type x shape against the CPU
#                backend's scalar reference (its pass count)
#   2 stories    `layermesh run --backend cuda` on stories260K against llama.cpp's logits (last
#                prompt position, tolerance 1e-4) and, fed llama.cpp's greedy continuation,
#                argmax agreement at every position (tests/oracle/compare_logits.py greedy)
#   3 gemma4     the same for synthetic Gemma 4 models in f32, q8_0 and q4_K
#   3b caches    `layermesh run --backend cuda` with bf16, fp8, q4_0 and q5_1 caches on global
#      archs     and sliding layers, and on synthetic qwen35 (recurrent layers), qwen3moe and
#                gpt-oss (MXFP4 experts, sinks, YaRN): greedy ids equal the CPU's, same settings
#   4 mesh       tests/gpu/mesh_cuda.sh: a cpu, cuda, cpu mesh over stories260K whose greedy ids
#                equal `layermesh run` on the CPU; the cuda worker without memory_limit, so the
#                planner takes the device's free memory; its plan and /status device memory
#   5 bench      bench_cuda (GEMV bandwidth of q4_K and q8_0 against a device-to-device copy,
#                prefill matmuls by batch size on both sides of the tensor-core GEMM's
#                threshold, and one decode token's launches: wall time against GPU time),
#                bench_run --backend cuda on synthetic 8B-shaped llamas in q4_K and q8_0 (decode
#                tok/s after a 512-token prefill, and the prefill's tok/s)
# Every step has its own time limit (a hung kernel fails its step, not the run).
# Exit: 0 when every check passed, 1 when one failed, 77 when this machine has no NVIDIA GPU.
# Logs go to $OUT (the device tool's folder) or ./gpu-out.
#
# A dry run of the script itself on a machine without a GPU: LM_GPU_BACKEND=cpu runs every step
# on the CPU backend (bench_cuda then skips), with LM_GPU_BIG_LAYERS and LM_GPU_BIG_VOCAB
# shrinking the "8B" models (default 32 layers, vocabulary 128256).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
carry=${1:-.gpu-carry}
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
fails=0
t_start=$SECONDS
say() { echo "$*" | tee -a "$summary"; }
check() { # NAME OK(0/1) DETAIL
	if [ "$2" = 0 ]; then say "PASS $1: $3"; else say "FAIL $1: $3"; fails=$((fails + 1)); fi
}

be=${LM_GPU_BACKEND:-cuda}
if [ "$be" = cuda ]; then
	if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
		echo "SKIP: no NVIDIA GPU here ($(head -n 1 "$out/gpu.txt" 2>/dev/null || echo "no nvidia-smi"))"
		exit 77
	fi
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv \
		>>"$out/gpu.txt"
	say "gpu: $(tail -n 1 "$out/gpu.txt")"
else
	say "dry run: backend $be instead of cuda (no GPU is used)"
fi
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

if [ ! -d "$carry/ref" ] || [ ! -f "$carry/models/stories260K.gguf" ]; then
	echo "FAIL: no references in $carry: run tests/gpu/prepare_carry.sh first (on a machine" \
		"with the llama.cpp oracle) and carry $carry"
	exit 1
fi
if [ -x "$carry/bin/layermesh" ]; then
	bin=$(cd "$carry/bin" && pwd)
	export LD_LIBRARY_PATH="$(cd "$carry/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	LM=$bin/layermesh WORKER=$bin/layermesh-worker OPM=$bin/op_matrix
	BRUN=$bin/bench_run BCUDA=$bin/bench_cuda
else
	say "build: no $carry/bin: building build-gpu with -Dcuda=enabled"
	meson setup build-gpu -Dcuda=enabled >"$out/build.log" 2>&1 &&
		ninja -C build-gpu >>"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
	LM=build-gpu/coordinator/layermesh WORKER=build-gpu/worker/layermesh-worker
	OPM=build-gpu/tests/gpu/op_matrix BRUN=build-gpu/bench/bench_run
	BCUDA=build-gpu/bench/bench_cuda
fi
ref=$(cd "$carry/ref" && pwd)
models=$(cd "$carry/models" && pwd)
source tests/gpu/gpu_cases.sh
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# The 8B-shaped models take a minute or two to write: start them now, on the CPU cores.
cores=$(nproc)
big() { # TYPE
	timeout 400 "$LM" synth --out "$tmp/llama8b-$1.gguf" --dim 4096 --layers "${LM_GPU_BIG_LAYERS:-32}" \
		--heads 32 --kv-heads 8 --ffn 14336 --vocab "${LM_GPU_BIG_VOCAB:-128256}" --ctx 8192 \
		--type "$1" --seed 1 \
		--threads $((cores > 2 ? cores / 2 : 1)) >"$out/synth-$1.log" 2>&1
}
big q4_K &
pid_q4=$!
big q8_0 &
pid_q8=$!

# 1. The op matrix.
t=$SECONDS
timeout 240 "$OPM" --backend "$be" >"$out/op_matrix.txt" 2>&1
rc=$?
check matrix $((rc != 0)) "$(tail -n 1 "$out/op_matrix.txt") ($((SECONDS - t)) s)"
grep FAIL "$out/op_matrix.txt" | head -n 20

# 2 and 3. layermesh run --backend cuda against llama.cpp.
oracle_case() { # NAME MODEL
	local name=$1 model=$2 tol r1 r2 ok=0
	tol=$(gpu_tolerance "$name")
	timeout 60 "$LM" run --model "$model" --prompt "$GPU_PROMPT" --temp 0 -n 1 --backend "$be" \
		--logits "$tmp/$name.last" >/dev/null 2>"$tmp/$name.err" ||
		{ check "$name" 1 "layermesh run: $(tail -n 1 "$tmp/$name.err")"; return; }
	r1=$(python3 tests/oracle/compare_logits.py last "$tmp/$name.last" "$ref/$name.last" "$tol") ||
		ok=1
	timeout 60 "$LM" run --model "$model" --prompt-ids "$(cat "$ref/$name.seq")" --temp 0 -n 1 \
		--backend "$be" --logits-all "$tmp/$name.all" >/dev/null 2>>"$tmp/$name.err" || ok=1
	r2=$(python3 tests/oracle/compare_logits.py greedy "$tmp/$name.all" "$ref/$name.all" "$tol" \
		"$(cat "$ref/$name.n_prompt")") || ok=1
	# The same model on the CPU backend, the same ids: the GPU changes no greedy token.
	local gpu cpu
	gpu=$(timeout 60 "$LM" run --model "$model" --prompt "$GPU_PROMPT" --temp 0 -n 32 --backend "$be" \
		--ids 2>/dev/null)
	cpu=$(timeout 60 "$LM" run --model "$model" --prompt "$GPU_PROMPT" --temp 0 -n 32 --ids 2>/dev/null)
	[ -n "$gpu" ] && [ "$gpu" = "$cpu" ] || { ok=1; r2="$r2; greedy ids differ from the CPU's"; }
	check "$name" $ok "prompt logits: $r1; $r2"
}
t=$SECONDS
oracle_case stories "$models/stories260K.gguf"
for ty in $GPU_GEMMA4_TYPES; do
	gpu_gemma4_synth "$LM" "$tmp/gemma4-$ty.gguf" "$ty"
	oracle_case "gemma4-$ty" "$tmp/gemma4-$ty.gguf"
done
say "(llama.cpp comparisons: $((SECONDS - t)) s)"

# 3b. What runs on the GPU beyond the oracle's cases, each against the CPU with the same
# settings (greedy ids equal): the cache types bf16, q4_0, q5_1 and fp8 on global and sliding
# layers (stories260K's heads of 8 take no block type: bf16 and fp8 there), then the
# architectures of the seam's newer ops: qwen35's recurrent layers (delta rule on the host),
# qwen3moe's experts, gpt-oss (MXFP4 experts, attention sinks, YaRN, the clamped SwiGLU).
ids_case() { # NAME MODEL ARGS...
	local name=$1 model=$2 gpu cpu
	shift 2
	gpu=$(timeout 60 "$LM" run --model "$model" --prompt "$GPU_PROMPT" --temp 0 -n 32 \
		--backend "$be" --ids "$@" 2>"$tmp/$name.err")
	cpu=$(timeout 60 "$LM" run --model "$model" --prompt "$GPU_PROMPT" --temp 0 -n 32 --ids \
		"$@" 2>/dev/null)
	if [ -n "$gpu" ] && [ "$gpu" = "$cpu" ]; then
		check "$name" 0 "greedy ids equal the CPU's ${*:-}"
	else
		check "$name" 1 "greedy ids differ from the CPU's ${*:-}: $(tail -n 1 "$tmp/$name.err")"
	fi
}
t=$SECONDS
ids_case cache-stories "$models/stories260K.gguf" --ctk bf16 --ctv fp8
ids_case cache-gemma4-blocks "$tmp/gemma4-f32.gguf" --ctk q5_1 --ctv q4_0 --ctk-swa q4_0 \
	--ctv-swa q5_1
ids_case cache-gemma4-floats "$tmp/gemma4-f32.gguf" --ctk fp8 --ctv bf16 --ctk-swa bf16 \
	--ctv-swa fp8
gpu_arch_synth "$LM" "$tmp"
for a in $GPU_ARCHS; do
	ids_case "arch-$a" "$tmp/arch-$a.gguf"
done
say "(cache types and architectures: $((SECONDS - t)) s)"

# 4. The mesh.
t=$SECONDS
LM_MESH_BACKEND=$be LM_BIN=$LM LM_WORKER=$WORKER LM_SHARED=$(cd "$carry" && pwd) \
	timeout 180 bash tests/gpu/mesh_cuda.sh \
	>"$out/mesh.txt" 2>&1
rc=$?
check mesh $((rc != 0)) "$(tail -n 1 "$out/mesh.txt") ($((SECONDS - t)) s)"
[ $rc = 0 ] || tail -n 30 "$out/mesh.txt"
grep -E '^(plan|device)' "$out/mesh.txt" | tee -a "$summary"

# 5. The benchmark.
t=$SECONDS
timeout 180 "$BCUDA" >"$out/bench_cuda.txt" 2>&1
rc=$?
if [ $rc = 77 ] && [ "$be" != cuda ]; then
	say "skip bench_cuda: $(tail -n 1 "$out/bench_cuda.txt")"
else
	check bench_cuda $((rc != 0)) "($((SECONDS - t)) s)"
fi
tee -a "$summary" <"$out/bench_cuda.txt"
for ty in q4_K q8_0; do
	pid=$pid_q4
	[ $ty = q8_0 ] && pid=$pid_q8
	if ! wait "$pid"; then
		check "decode-$ty" 1 "synth: $(tail -n 1 "$out/synth-$ty.log")"
		continue
	fi
	t=$SECONDS
	timeout 240 "$BRUN" --backend "$be" --model "$tmp/llama8b-$ty.gguf" --bench-prefill 512 \
		--bench-decode 128 --reps 3 --bench-warmup >"$out/bench_run-$ty.txt" 2>&1
	rc=$?
	pre=$(awk '/^prefill/ { for (i = 1; i <= NF; i++) if ($i ~ /^tok_s=/) print substr($i, 7) }' \
		"$out/bench_run-$ty.txt" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	dec=$(awk '/^decode/ { for (i = 1; i <= NF; i++) if ($i ~ /^tok_s=/) print substr($i, 7) }' \
		"$out/bench_run-$ty.txt" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	check "llama8b-$ty" $((rc != 0)) "decode ${dec:-?} tok/s, prefill(512) ${pre:-?} tok/s" \
		"(median of 3; $((SECONDS - t)) s)"
	[ $rc = 0 ] || tail -n 5 "$out/bench_run-$ty.txt"
	grep '^info' "$out/bench_run-$ty.txt" | tee -a "$summary"
	rm -f "$tmp/llama8b-$ty.gguf"
done

say "total: $((SECONDS - t_start)) s, $fails failed"
echo "--- summary"
cat "$summary"
[ "$fails" = 0 ]

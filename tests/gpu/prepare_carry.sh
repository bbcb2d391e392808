#!/usr/bin/env bash
# tests/gpu/prepare_carry.sh — run on the CPU machine, before the GPU call: builds what the GPU
# checks run and the llama.cpp references they compare with, into .gpu-carry/ (git-ignored),
# which the call carries to the GPU machine (it has nvcc but none of layermesh's libraries, and
# no network):
#
#   bash tests/gpu/prepare_carry.sh           then, with the device tool:
#   run(command="bash tests/gpu/run_gpu_checks.sh .gpu-carry", carry=[".gpu-carry"],
#       timeout_s=600)
#
#   .gpu-carry/bin/     layermesh, layermesh-worker, op_matrix, bench_run, bench_cuda
#                       (-Dcuda=enabled; the CUDA runtime linked statically, so they
#                       need only the driver there)
#   .gpu-carry/lib/     the shared libraries they need beyond glibc and libstdc++ (NNG, libuv,
#                       msgpack-c, cJSON, mbedTLS), from this machine's Debian 12
#   .gpu-carry/models/  stories260K.gguf
#   .gpu-carry/ref/     llama.cpp's logits and greedy ids (lm_oracle, its generic x64 CPU build,
#                       f32 KV cache) for stories260K and for synthetic Gemma 4 models in f32,
#                       q8_0 and q4_K, made here by `layermesh synth` with the same options the
#                       GPU script uses, so the GPU machine needs no llama.cpp
# Environment: LM_SHARED (default ../shared), LM_ORACLE (the oracle install, default
# /tmp/ci0/.oracle), LM_GPU_BUILD (the build directory, default build-gpu).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
shared=$(cd "${LM_SHARED:-$root/../shared}" && pwd)
oracle=${LM_ORACLE:-/tmp/ci0/.oracle}
build=${LM_GPU_BUILD:-build-gpu}
out=.gpu-carry

if [ ! -d "$build" ]; then
	meson setup "$build" -Dcuda=enabled -Dwerror=true \
		-Dshared_dir="$shared" -Dllama_oracle="$oracle" >/dev/null
fi
ninja -C "$build" coordinator/layermesh worker/layermesh-worker tests/gpu/op_matrix \
	bench/bench_run bench/bench_cuda tests/oracle/lm_oracle | tail -n 1

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/models" "$out/ref"
for b in coordinator/layermesh worker/layermesh-worker tests/gpu/op_matrix bench/bench_run \
	bench/bench_cuda; do
	cp "$build/$b" "$out/bin/"
	strip "$out/bin/$(basename "$b")"
done
# Libraries beyond the C and C++ runtimes, which every Linux there has (newer: compatible).
for b in "$out"/bin/*; do
	ldd "$b" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
	while read -r lib; do cp -L "$lib" "$out/lib/"; done
cp "$shared/models/stories260K.gguf" "$out/models/"

# The references. The prompts and models are the GPU script's (tests/gpu/gpu_cases.sh).
source "$root/tests/gpu/gpu_cases.sh"
lm="$build/coordinator/layermesh"
orc="$build/tests/oracle/lm_oracle"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ref_case() { # NAME MODEL
	local name=$1 model=$2
	"$orc" --model "$model" --prompt "$GPU_PROMPT" --cpu-variant x64 \
		--logits-last "$out/ref/$name.last" >/dev/null 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; exit 1; }
	"$orc" --model "$model" --prompt "$GPU_PROMPT" --cpu-variant x64 -n "$GPU_CONTINUE" \
		2>/dev/null >"$out/ref/$name.ids"
	"$orc" --model "$model" --prompt "$GPU_PROMPT" --tokenize 2>/dev/null | wc -w \
		>"$out/ref/$name.n_prompt"
	local ids seq
	ids=$(cat "$out/ref/$name.ids")
	seq=$(echo "$ids" | cut -d' ' -f1-$(($(echo "$ids" | wc -w) - 1)))
	echo "$seq" >"$out/ref/$name.seq"
	"$orc" --model "$model" --ids "$seq" --cpu-variant x64 --logits-all "$out/ref/$name.all" \
		>/dev/null 2>&1
	echo "ref: $name ($(wc -w <"$out/ref/$name.seq") ids)"
}
ref_case stories "$out/models/stories260K.gguf"
for t in $GPU_GEMMA4_TYPES; do
	gpu_gemma4_synth "$lm" "$tmp/gemma4-$t.gguf" "$t"
	ref_case "gemma4-$t" "$tmp/gemma4-$t.gguf"
done
du -sh "$out"
echo "ready: run tests/gpu/run_gpu_checks.sh $out on the GPU machine, carrying $out"

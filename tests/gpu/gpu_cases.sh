# tests/gpu/gpu_cases.sh — what the GPU checks compare, shared by prepare_carry.sh (which makes
# llama.cpp's references on the CPU machine) and run_gpu_checks.sh (which runs layermesh on the
# GPU), so both sides see the same prompt and the same synthetic models. Sourced.

# A prompt of 24 tokens for stories260K, longer than the synthetic Gemma 4's window of 8.
GPU_PROMPT="Once upon a time there was a little girl named Lily who loved to play in the park"
# llama.cpp's greedy continuation fed back to both sides (teacher forcing).
GPU_CONTINUE=24
GPU_GEMMA4_TYPES="f32 q8_0 q4_K"

# gpu_gemma4_synth LAYERMESH OUT TYPE: test_oracle_archs.sh's Gemma 4 (two head sizes and KV head
# counts, sliding layers of window 8, each third layer global, 5 layers, GQA 8/2).
gpu_gemma4_synth() {
	"$1" synth --out "$2" --arch gemma4 --head-dim 64 --head-dim-swa 32 --kv-heads-swa 4 \
		--window 8 --swa-period 3 --dim 256 --layers 5 --heads 8 --kv-heads 2 --ffn 512 \
		--vocab 512 --type "$3" --seed 7 >/dev/null
}

# Tolerances of the last prompt position's logits against llama.cpp's generic x64 build (max
# |diff|), those of tests/oracle: f32 stories260K 1e-4, Gemma 4 f32 5e-3 (its GELU rounds through
# f16), quantized types 0.3 (one activation on a quantization boundary moves a dot product by a
# whole quantum), but Gemma 4 in q4_K 0.5: on this model and prompt the CPU backend itself, whose
# kernels the unit tests hold to the generic reference order, is 0.304 from llama.cpp (a dry run
# with LM_GPU_BACKEND=cpu, 29df94b): the K-quants' order of float sums is layermesh's own, and
# Gemma's GELU and softcapping carry it further than llama's layers do.
gpu_tolerance() { # NAME
	case $1 in
	stories) echo 1e-4 ;;
	gemma4-f32) echo 5e-3 ;;
	gemma4-q4_K) echo 0.5 ;;
	*) echo 0.3 ;;
	esac
}

# The architectures of the seam's newer ops, run on the GPU against the CPU (run_gpu_checks.sh's
# step 3b): gpu_arch_synth LAYERMESH DIR writes DIR/arch-<name>.gguf for each.
GPU_ARCHS="qwen35 qwen3moe gpt-oss"
gpu_arch_synth() {
	"$1" synth --out "$2/arch-qwen35.gguf" --arch qwen35 --dim 256 --layers 4 --heads 8 \
		--kv-heads 2 --ffn 512 --vocab 512 --type q8_0 --seed 5 >/dev/null
	"$1" synth --out "$2/arch-qwen3moe.gguf" --arch qwen3moe --dim 256 --layers 4 --heads 8 \
		--kv-heads 2 --ffn 256 --experts 8 --experts-used 2 --vocab 512 --type q4_K \
		--seed 6 >/dev/null
	"$1" synth --out "$2/arch-gpt-oss.gguf" --arch gpt-oss --dim 256 --layers 4 --heads 8 \
		--kv-heads 2 --head-dim 64 --ffn 256 --experts 4 --experts-used 2 \
		--experts-type mxfp4 --window 8 --vocab 512 --type q8_0 --rope-yarn 32 \
		--rope-yarn-orig 64 --seed 3 >/dev/null
}

#!/usr/bin/env bash
# Every architecture through the mesh. For each of llama (and Mistral's window), qwen2, qwen3,
# qwen3moe, gemma3, gemma4, gemma4moe (Gemma 4 26B-A4B's layout), qwen35, qwen35moe and gpt-oss, a
# synthetic GQA model of 7 layers runs over a 3-worker mesh whose fence crosses sliding/global
# boundaries (gemma: window 8, layers 2 and 5 global; the fence [0,2) [2,5) [5,7) starts a worker
# on each global layer and ends one on a sliding layer; gpt-oss: even layers slide), cuts inside
# the run of mixture-of-experts layers (qwen3moe, gpt-oss: 8 experts, 2 per token, on every
# layer; gpt-oss also with MXFP4 experts; gemma4moe: the same experts beside the shared FFN of
# every layer but the first, so that the first worker holds a dense layer and a MoE one) and
# between recurrent and attention layers (qwen35 and qwen35moe: odd layers attend, even ones are
# gated delta-nets, so the cuts fall after an attention and after a recurrent layer; qwen35moe's
# FFNs are 8 experts, 2 per token, beside a gated shared expert):
#   - greedy generation of 30 tokens (over 3x the window) equals `layermesh run`'s ids;
#   - `layermesh diff` finds every layer of the mesh equal to the single process.
# The single process is held to llama.cpp by tests/oracle/test_oracle_archs.sh.
# LM_TEST_ARCHS (space-separated) runs only those architectures, for a local check.
source "$(dirname "$0")/lib.sh"

prompt="Once upon a time there was a little girl"
shape() {
	case $1 in
	gemma4) echo "--arch gemma4 --head-dim 64 --head-dim-swa 32 --kv-heads-swa 4 --window 8 --swa-period 3" ;;
	gemma3) echo "--arch gemma3 --head-dim 32 --window 8 --swa-period 3" ;;
	mistral) echo "--window 8" ;;
	qwen3moe) echo "--arch qwen3moe --experts 8 --experts-used 2 --ffn-exp 128" ;;
	gemma4moe) echo "--arch gemma4 --head-dim 64 --head-dim-swa 32 --kv-heads-swa 4 --window 8 --swa-period 3 --experts 8 --experts-used 2 --ffn-exp 128 --dense-layers 1" ;;
	qwen35) echo "--arch qwen35 --full-attn-every 2" ;;
	qwen35moe) echo "--arch qwen35moe --full-attn-every 2 --experts 8 --experts-used 2 --ffn-exp 128" ;;
	gpt-oss) echo "--arch gpt-oss --experts 8 --experts-used 2 --ffn-exp 128 --window 8 --rope-base 150000 --rope-yarn 32 --rope-yarn-orig 64" ;;
	llama) echo "" ;;
	*) echo "--arch $1" ;;
	esac
}

types() { # arch: gpt-oss adds MXFP4 experts (f32 elsewhere)
	case $1 in
	gpt-oss) echo "q8_0 f32 mxfp4" ;;
	*) echo "q8_0 f32" ;;
	esac
}

weights() {
	case $1 in
	mxfp4) echo "--type f32 --experts-type mxfp4" ;;
	*) echo "--type $1" ;;
	esac
}

n=0
for arch in ${LM_TEST_ARCHS:-llama mistral qwen2 qwen3 qwen3moe gemma3 gemma4 gemma4moe qwen35 qwen35moe gpt-oss}; do
	for type in $(types $arch); do
		model="$LM_TMP/$arch-$type.gguf"
		# shellcheck disable=SC2046
		"$LM_BIN" synth --out "$model" $(shape $arch) --dim 256 --layers 7 --heads 8 \
			--kv-heads 2 --ffn 512 --vocab 512 $(weights $type) --seed 11 >/dev/null ||
			fail "synth $arch $type"
		want=$("$LM_BIN" run --model "$model" --prompt "$prompt" --temp 0 -n 30 --ctx 256 \
			--ids 2>/dev/null) || fail "run $arch $type"
		dir="$LM_TMP/m$n"
		n=$((n + 1))
		mkdir -p "$dir"
		lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:5 5:7
		lm_up "$dir/mesh.toml" "$dir/up.log"
		got=$("$LM_BIN" generate --url "$LM_URL" --prompt "$prompt" --temp 0 -n 30 --ids \
			2>/dev/null) || fail "generate $arch $type"
		[ "$got" = "$want" ] || fail "$arch $type: the mesh gave
  $got
instead of
  $want"
		lm_down "$dir"
		"$LM_BIN" diff "$dir/mesh.toml" --prompt "$prompt" --worker-bin "$LM_WORKER" \
			>"$dir/diff.out" 2>&1 || { cat "$dir/diff.out" >&2; fail "diff $arch $type"; }
		[ "$(awk '$1 ~ /^[0-6]$/ && $3 != 0' "$dir/diff.out" | wc -l)" -eq 0 ] || {
			cat "$dir/diff.out" >&2
			fail "$arch $type: diff found a layer where the mesh differs"
		}
		echo "ok: $arch $type over [0,2) [2,5) [5,7): $(echo "$got" | wc -w) ids"
	done
done

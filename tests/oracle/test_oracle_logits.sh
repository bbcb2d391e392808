#!/usr/bin/env bash
# layermesh's logits against llama.cpp's on the same synthetic files, for every weight type: a
# grouped-query model (8 heads over 2 KV heads) with an odd layer count (3), the last prompt
# position's logits of `layermesh run --logits` against `lm_oracle --logits-last` with an f32 KV
# cache, one token per micro-batch and no repacking (--ubatch 1 --no-repack): llama.cpp's
# reference CPU arithmetic, its vec_dot kernels.
#
# Stated tolerances:
#   a 5-token prompt   max |logit diff| <= 1e-4 for f32, bf16, q8_0, q4_0, q4_K, q6_K
#                      (measured 2.4e-7 .. 1.8e-6), <= 5e-3 for f16 (measured 1.9e-3)
#   a 20-token prompt  the same argmax, mean |logit diff| <= 3e-2 and max <= 0.2
# Why two regimes: both implementations round activations to the weight's "vec_dot type" (f16,
# bf16, 8-bit blocks) before the products, and sum in different orders. A value that lands
# within an ulp of a rounding boundary then rounds differently on the two sides, and the
# flipped quantum travels through the KV cache to every later token; with ~4e4 rounded values
# per 10 tokens in this model one such flip is expected around the tenth token (measured: the
# q8_0 difference jumps from 3.6e-7 at 8 tokens to 5e-2 at 10). Over seeds 1..6 at 20 tokens,
# 3 q8_0 and 2 q4_0 models had such a flip (max 1.4e-2 .. 5.7e-2, mean ~1e-2), the others
# agreed to 4.8e-7. f16 rounds finely enough that flips happen from the first tokens. q4_K and
# q6_K agreed to 1.4e-6 even at 20 tokens.
#
# Flips happen at 5 tokens too, at a rate that depends only on how the float sums are ordered:
# over seeds 1-8 and 11 of q8_0, q4_0 and q4_K, 2 of the 27 models flipped with the AVX-512
# kernels' order and 4 with the generic kernels' order (ggml's own reference order, which the
# multi-token GEMMs reproduce bit for bit), each at 2.8e-2 .. 7.4e-2 while the others agreed to
# 1.4e-6. So the 5-token bound holds for a model, not for every model: a type passes when one of
# seeds 11, 12, 13 agrees within it. A wrong formula differs on every seed; a flip does on one
# in about seven.
set -euo pipefail
bin=${1:?layermesh binary}
oracle=${2:?lm_oracle binary}
vocab="${LM_SHARED:?}/models/stories260K.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# max and mean |a - b| and whether the argmaxes agree, over two files of one value per line.
compare() {
	paste "$1" "$2" | awk '
		{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; s += d; n++
		  if (n == 1 || $1 > ma) { ma = $1; ia = n } if (n == 1 || $2 > mb) { mb = $2; ib = n } }
		END { printf "%.3g %.3g %s\n", m, s / n, (ia == ib) ? "same" : "different" }'
}
# check TYPE SEED PROMPT: prints one line and returns 1 when the prompt's rule fails.
check() {
	local t=$1 seed=$2 prompt=$3 ids n max mean top ok rule tol
	"$bin" synth --out "$tmp/m.gguf" --dim 256 --layers 3 --heads 8 --kv-heads 2 --ffn 512 \
		--vocab 512 --type "$t" --seed "$seed" --vocab-from "$vocab" >/dev/null
	"$bin" run --model "$tmp/m.gguf" --prompt "$prompt" -n 0 --threads 1 \
		--logits "$tmp/ours.txt" >/dev/null 2>&1
	ids=$("$bin" tokenize --model "$tmp/m.gguf" "$prompt")
	n=$(wc -w <<<"$ids")
	"$oracle" --model "$tmp/m.gguf" --ids "$ids" --threads 1 --ubatch 1 --no-repack \
		--logits-last "$tmp/theirs.txt" >/dev/null 2>&1
	[ "$(wc -l <"$tmp/ours.txt")" -eq 512 ] || { echo "FAIL: $t: no logits"; exit 1; }
	read -r max mean top < <(compare "$tmp/ours.txt" "$tmp/theirs.txt")
	if [ "$n" -le 8 ]; then
		tol=1e-4
		[ "$t" = f16 ] && tol=5e-3
		ok=$(awk -v d="$max" -v t="$tol" 'BEGIN {print (d <= t) ? "ok" : "FAIL"}')
		rule="max <= $tol"
	else
		ok=$(awk -v m="$max" -v a="$mean" -v s="$top" \
			'BEGIN {print (m <= 0.2 && a <= 3e-2 && s == "same") ? "ok" : "FAIL"}')
		rule="same argmax, mean <= 3e-2, max <= 0.2"
	fi
	printf '%-5s seed %2d %2d tokens: max |diff| %-9s mean %-9s argmax %-9s (%s) %s\n' "$t" \
		"$seed" "$n" "$max" "$mean" "$top" "$rule" "$ok"
	[ "$ok" = ok ]
}

status=0
for t in f32 f16 bf16 q8_0 q4_0 q4_K q6_K; do
	passed=0
	for seed in 11 12 13; do
		if check "$t" "$seed" "Once upon a time"; then
			passed=1
			break
		fi
		echo "      (a rounding flip on this seed, or a real difference: the next seed decides)"
	done
	[ "$passed" = 1 ] || status=1
	check "$t" 11 "The cat sat on the mat and looked at the dog." || status=1
done
exit $status

#!/bin/sh
# test_oracle_synth.sh LAYERMESH LM_ORACLE — llama.cpp loads `layermesh synth` files of every
# weight type and computes sane logits from them.
#
# For each type, a small model whose shapes every type allows (dim 256, 2-3 layers, 8 heads with
# 4 or 2 KV heads, ffn 512 or 768, vocab >= 300) is written, then llama.cpp (lm_oracle) evaluates
# a prompt: every logit at every position must be finite, each position's logits must have
# std > 0.1 and a spread (max - min) > 0.5, positions must differ from each other, two runs must
# agree exactly, and greedy generation must run. A tied-embedding file and one with the 32000-token
# llama vocabulary copied in (--vocab-from) are checked the same way. Then one shape in every type
# is compared with its f32 version.
set -eu

LAYERMESH=$1
ORACLE=$2
: "${LM_SHARED:?LM_SHARED must name the shared data directory}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PROMPT="Once upon a time, the little cat sat on a mat."
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# stats FILE: per line (position) check the logits; prints "ok min_std min_spread" or a reason.
stats() {
	awk '
		{
			n = NF; s = 0; q = 0; mn = 0; mx = 0
			for (i = 1; i <= NF; i++) {
				v = $i
				if (v !~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/) {
					print "non-finite logit " v " at position " NR - 1; bad = 1; exit
				}
				v += 0; s += v; q += v * v
				if (i == 1 || v < mn) mn = v
				if (i == 1 || v > mx) mx = v
			}
			m = s / n; sd = sqrt(q / n - m * m)
			if (NR == 1 || sd < min_sd) min_sd = sd
			if (NR == 1 || mx - mn < min_spread) min_spread = mx - mn
			if ($0 in seen) { print "positions " seen[$0] " and " NR - 1 " have equal logits"; bad = 1; exit }
			seen[$0] = NR - 1
		}
		END {
			if (bad) exit
			if (NR == 0) { print "no logits"; exit }
			if (min_sd <= 0.1) { printf "logit std %.3g <= 0.1\n", min_sd; exit }
			if (min_spread <= 0.5) { printf "logit spread %.3g <= 0.5\n", min_spread; exit }
			printf "ok %d positions x %d, min std %.3g, min spread %.3g\n", NR, n, min_sd, min_spread
		}' "$1"
}

# check NAME SYNTH_ARGS...: write the file, evaluate it twice, generate.
check() {
	name=$1
	shift
	f=$TMP/$name.gguf
	if ! "$LAYERMESH" synth --out "$f" "$@" >"$TMP/synth.out" 2>&1; then
		fail "$name: layermesh synth $*: $(cat "$TMP/synth.out")"
		return
	fi
	if ! "$ORACLE" --model "$f" --prompt "$PROMPT" --logits-all "$TMP/a.txt" >"$TMP/ids" \
		2>"$TMP/err"; then
		fail "$name: llama.cpp: $(cat "$TMP/err")"
		return
	fi
	"$ORACLE" --model "$f" --prompt "$PROMPT" --logits-all "$TMP/b.txt" >/dev/null
	cmp -s "$TMP/a.txt" "$TMP/b.txt" || fail "$name: two llama.cpp runs disagree"
	r=$(stats "$TMP/a.txt")
	case $r in
	ok*) echo "ok: $name: $r" ;;
	*) fail "$name: $r" ;;
	esac
	n_prompt=$(wc -w <"$TMP/ids")
	gen=$("$ORACLE" --model "$f" --prompt "$PROMPT" -n 8) || fail "$name: generation failed"
	[ "$(echo "$gen" | wc -w)" -eq $((n_prompt + 8)) ] || fail "$name: generated '$gen'"
}

common="--dim 256 --heads 8 --vocab 320 --ctx 256 --seed 11"
check f32 $common --layers 3 --kv-heads 4 --ffn 512 --type f32
check f16 $common --layers 2 --kv-heads 2 --ffn 768 --type f16
check bf16 $common --layers 3 --kv-heads 4 --ffn 768 --type bf16
check q8_0 $common --layers 2 --kv-heads 2 --ffn 512 --type q8_0
check q4_0 $common --layers 3 --kv-heads 4 --ffn 768 --type q4_0
check q4_K $common --layers 2 --kv-heads 2 --ffn 512 --type q4_K
check q6_K $common --layers 3 --kv-heads 4 --ffn 768 --type q6_K
check f16_tied $common --layers 2 --kv-heads 4 --ffn 512 --type f16 --tied
check f32_spm --dim 256 --heads 8 --kv-heads 2 --layers 2 --ffn 512 --ctx 256 --seed 3 \
	--vocab-from "$LM_SHARED/tokenizer/ggml-vocab-llama-spm.gguf"

# The same model in every type: llama.cpp's logits from a converted or quantized file must stay
# near the f32 file's (mean |difference| under a per-type bound, about 2x what was measured;
# weights llama.cpp decoded differently from what synth meant would give ~1.1, the mean |a - b|
# of two unrelated unit-variance logit sets).
same="--dim 256 --layers 2 --heads 8 --kv-heads 2 --ffn 512 --vocab 320 --ctx 256 --seed 5"
"$LAYERMESH" synth --out "$TMP/same_f32.gguf" $same --type f32 >/dev/null
"$ORACLE" --model "$TMP/same_f32.gguf" --prompt "$PROMPT" --logits-all "$TMP/same_f32.txt" >/dev/null
for tb in f16:0.005 bf16:0.03 q8_0:0.08 q6_K:0.2 q4_K:0.5 q4_0:0.6; do
	t=${tb%%:*}
	bound=${tb#*:}
	if ! "$LAYERMESH" synth --out "$TMP/same_$t.gguf" $same --type "$t" >"$TMP/synth.out" 2>&1; then
		fail "same_$t: $(cat "$TMP/synth.out")"
		continue
	fi
	"$ORACLE" --model "$TMP/same_$t.gguf" --prompt "$PROMPT" --logits-all "$TMP/same_$t.txt" >/dev/null
	r=$(paste -d' ' "$TMP/same_f32.txt" "$TMP/same_$t.txt" | awk -v b="$bound" '
		{ h = NF / 2; for (i = 1; i <= h; i++) { d = $i - $(i + h); s += d < 0 ? -d : d; n++ } }
		END { m = n > 0 ? s / n : 99; printf "%s %.4g\n", (m < b) ? "ok" : "bad", m }')
	case $r in
	ok*) echo "ok: $t vs f32: mean |logit difference| ${r#ok } (bound $bound)" ;;
	*) fail "$t vs f32: mean |logit difference| ${r#bad } (bound $bound)" ;;
	esac
done

# The built-in vocabulary tokenizes like a SentencePiece one: BOS, then "\u2581"-prefixed pieces.
ids=$("$ORACLE" --model "$TMP/f32.gguf" --prompt "the cat" --tokenize)
[ "$ids" = "1 262 275 261 284 265 263" ] || fail "built-in vocabulary: 'the cat' -> '$ids'"

if [ "$fails" -ne 0 ]; then
	echo "$fails check(s) failed"
	exit 1
fi
echo "all checks passed"

#!/bin/sh
# test_oracle_reference.sh LM_ORACLE — lm_oracle reproduces the shared stories260K references.
#
# $LM_SHARED/models/reference/ holds what llama.cpp v0.4.0 produced through its C API (greedy,
# F32 KV cache, no flash attention; see its SUMMARY.md). For every prompt there, lm_oracle must give
# the same prompt ids, the same greedy ids over 64 positions (run.c's -n 64: 65 ids in all, prompt
# included), and the same last-position logits within 1e-6; the 65-position logits of the
# once_upon_a_time sequence must match too. A harness that drifts (another API call, another
# batch shape, an F16 cache) fails here before anything is compared against it.
#
# The layer dumps are checked for shape and self-consistency: the last row of a --dump-all dump is
# the --dump-layers dump of the last position, byte for byte, and dumping changes no logit.
set -eu

ORACLE=$1
: "${LM_SHARED:?LM_SHARED must name the shared data directory}"
MODEL=$LM_SHARED/models/stories260K.gguf
REF=$LM_SHARED/models/reference
# The references were made with an AVX-512 ggml CPU backend; on a CPU without AVX-512 llama.cpp
# picks an AVX2 build, whose sums round differently (measured on a Zen 2: up to 5.8e-6 on the
# last logits, 1.05e-5 over all 65 positions).
if grep -qw avx512f /proc/cpuinfo; then TOL=1e-6; else TOL=2e-5; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# maxdiff A B: the largest |a - b| over whitespace-separated numbers; fails on a count mismatch.
maxdiff() {
	tr -s ' \n' '\n\n' <"$1" | grep -v '^$' >"$TMP/a.col"
	tr -s ' \n' '\n\n' <"$2" | grep -v '^$' >"$TMP/b.col"
	na=$(wc -l <"$TMP/a.col")
	nb=$(wc -l <"$TMP/b.col")
	if [ "$na" -ne "$nb" ] || [ "$na" -eq 0 ]; then
		echo "count-mismatch($na,$nb)"
		return
	fi
	paste "$TMP/a.col" "$TMP/b.col" | awk '
		BEGIN { num = "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$" }
		$1 !~ num || $2 !~ num { bad = 1 }
		{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
		END { if (bad) print "not-a-number"; else printf "%.3g\n", m }'
}

# within D TOL: D is a number no larger than TOL.
within() {
	case $1 in
	*[!0-9.e+-]* | "") return 1 ;;
	esac
	awk -v d="$1" -v t="$2" 'BEGIN { exit !(d + 0 <= t + 0) }'
}

n_prompts=0
for pf in "$REF"/*.prompt.txt; do
	slug=$(basename "$pf" .prompt.txt)
	prompt=$(cat "$pf")
	n_prompts=$((n_prompts + 1))

	want_ids=$(cat "$REF/$slug.llamacpp_prompt_ids.txt")
	got_ids=$("$ORACLE" --model "$MODEL" --prompt "$prompt" --tokenize)
	[ "$got_ids" = "$want_ids" ] || fail "$slug: prompt ids '$got_ids', want '$want_ids'"

	n_prompt=$(echo "$want_ids" | wc -w)
	want_gen=$(sed -n 's/^ids: //p' "$REF/$slug.llamacpp_generate.txt")
	got_gen=$("$ORACLE" --model "$MODEL" --prompt "$prompt" -n $((65 - n_prompt)) \
		--logits-last "$TMP/last.txt")
	[ "$got_gen" = "$want_gen" ] || fail "$slug: greedy ids differ:
  got  $got_gen
  want $want_gen"

	d=$(maxdiff "$TMP/last.txt" "$REF/$slug.llamacpp_last_logits.txt")
	if within "$d" "$TOL"; then
		echo "ok: $slug: ids match, last logits max |diff| = $d"
	else
		fail "$slug: last logits max |diff| = $d (tolerance $TOL; the references were made with an AVX-512 ggml CPU backend, an AVX2-only one differs by ~5e-6)"
	fi
done
[ "$n_prompts" -ge 5 ] || fail "only $n_prompts reference prompts under $REF"

# All 65 positions of the once_upon_a_time greedy sequence, decoded as one prompt.
seq=$(sed -n 's/^ids: //p' "$REF/once_upon_a_time.llamacpp_generate.txt")
"$ORACLE" --model "$MODEL" --ids "$seq" --logits-all "$TMP/all.txt" >/dev/null
[ "$(wc -l <"$TMP/all.txt")" -eq 65 ] || fail "--logits-all: $(wc -l <"$TMP/all.txt") lines, want 65"
d=$(maxdiff "$TMP/all.txt" "$REF/once_upon_a_time.llamacpp_all_logits_seq.txt")
if within "$d" "$TOL"; then
	echo "ok: once_upon_a_time: 65-position logits max |diff| = $d"
else
	fail "once_upon_a_time: 65-position logits max |diff| = $d (tolerance $TOL)"
fi

# Layer dumps: shape, and the last row of the all-positions dump is the last-position dump.
"$ORACLE" --model "$MODEL" --prompt "Once upon a time" --dump-layers "$TMP/dl" \
	--logits-last "$TMP/last_d.txt" >/dev/null
"$ORACLE" --model "$MODEL" --prompt "Once upon a time" --dump-layers "$TMP/dla" --dump-all \
	>/dev/null
"$ORACLE" --model "$MODEL" --prompt "Once upon a time" --logits-last "$TMP/last_n.txt" >/dev/null
cmp -s "$TMP/last_d.txt" "$TMP/last_n.txt" || fail "--dump-layers changed the logits"
printf 'n_layer 5\nn_embd 64\nrows 1\nn_prompt 5\n' | cmp -s - "$TMP/dl/meta.txt" ||
	fail "dump meta.txt: $(cat "$TMP/dl/meta.txt")"
for l in 0 1 2 3 4; do
	a=$TMP/dl/layer_$l.f32
	b=$TMP/dla/layer_$l.f32
	[ "$(wc -c <"$a")" -eq 256 ] || fail "layer_$l.f32: $(wc -c <"$a") bytes, want 64 x 4"
	[ "$(wc -c <"$b")" -eq 1280 ] || fail "--dump-all layer_$l.f32: $(wc -c <"$b") bytes, want 5 x 64 x 4"
	tail -c 256 "$b" | cmp -s - "$a" || fail "layer $l: last row of --dump-all differs"
done
cmp -s "$TMP/dl/layer_0.f32" "$TMP/dl/layer_1.f32" && fail "layers 0 and 1 dumped the same bytes"
[ -e "$TMP/dl/layer_5.f32" ] && fail "a layer_5.f32 for a 5-layer model"

# Errors are reported, not crashed on.
if "$ORACLE" --model "$MODEL" --ids "1 512" >/dev/null 2>"$TMP/err"; then
	fail "an out-of-vocabulary id was accepted"
fi
grep -q "not a token id" "$TMP/err" || fail "bad-id message: $(cat "$TMP/err")"

if [ "$fails" -ne 0 ]; then
	echo "$fails check(s) failed"
	exit 1
fi
echo "all checks passed"

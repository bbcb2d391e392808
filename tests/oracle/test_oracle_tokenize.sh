#!/bin/bash
# test_oracle_tokenize.sh LAYERMESH LM_ORACLE — `layermesh tokenize` against llama.cpp itself.
#
# The unit tests hold the tokenizer to llama.cpp's own test vectors; this holds it to the live
# library on the few hundred texts of tokenize_texts.txt (next to this script): many scripts,
# emoji sequences, code, white space runs, digit runs, contractions in both cases, special-token
# text, malformed UTF-8 and NUL bytes. Every vocabulary in $LM_SHARED/tokenizer that both sides
# load, and stories260K, is checked three ways, each one process per side over all the texts
# (--file): the vocabulary's BOS, EOS, EOT, add_bos, end-of-generation and special ids
# (--vocab-info); every text with BOS by the vocabulary's rule; every text with --no-bos
# --special (parse_special). A vocabulary layermesh does not support (bert) is skipped, by name.
# Llama 3's vocabulary is checked again under the gpt-4o and llama4 pre-tokenizers, which no
# shared vocabulary has (gguf_set_str.py next to this script rewrites tokenizer.ggml.pre).
set -eu

LAYERMESH=$1
ORACLE=$2
: "${LM_SHARED:?LM_SHARED must name the shared data directory}"
texts_file=$(dirname "$0")/tokenize_texts.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS

# The texts in llama.cpp's .inp form, and each one's escaped line for messages.
escaped=()
while IFS= read -r line || [ -n "$line" ]; do
	case $line in '' | '#' | '# '*) continue ;; esac
	escaped+=("$line")
	printf '%b' "$line"
	printf '\n__ggml_vocab_test__\n'
done <"$texts_file" >"$work/texts.inp"
n_texts=${#escaped[@]}
[ "$n_texts" -ge 300 ] || { echo "FAIL: only $n_texts texts in $texts_file"; exit 1; }

fails=0 checks=0 vocabs=0 skipped=0

# compare NAME MODE: ours.ids against theirs.ids, one line per text.
compare() {
	local -a ours theirs
	mapfile -t ours <"$work/ours.ids"
	mapfile -t theirs <"$work/theirs.ids"
	if [ "${#ours[@]}" -ne "$n_texts" ] || [ "${#theirs[@]}" -ne "$n_texts" ]; then
		echo "FAIL: $1 $2: $n_texts texts, layermesh gave ${#ours[@]} lines," \
			"llama.cpp ${#theirs[@]}"
		fails=$((fails + n_texts))
		checks=$((checks + n_texts))
		return
	fi
	local i
	for ((i = 0; i < n_texts; i++)); do
		checks=$((checks + 1))
		if [ "${ours[i]}" != "${theirs[i]}" ]; then
			fails=$((fails + 1))
			echo "FAIL: $1 $2 text $((i + 1)): '${escaped[i]}'"
			echo "  layermesh: ${ours[i]}"
			echo "  llama.cpp: ${theirs[i]}"
		fi
	done
}

# check VOCAB NAME [required]: one vocabulary, every way; one layermesh refuses is skipped
# unless required.
check() {
	local vocab=$1 name=$2 mode
	if ! "$LAYERMESH" tokenize --model "$vocab" --vocab-info >"$work/ours.info" \
		2>"$work/err"; then
		if [ -z "${3:-}" ] && grep -q "is not supported\|is not a supported" "$work/err"; then
			echo "skip: $name ($(cat "$work/err"))"
			skipped=$((skipped + 1))
			return
		fi
		echo "FAIL: $name: $(cat "$work/err")"
		fails=$((fails + 1))
		return
	fi
	vocabs=$((vocabs + 1))
	"$ORACLE" --model "$vocab" --vocab-info >"$work/theirs.info"
	checks=$((checks + 1))
	if ! cmp -s "$work/ours.info" "$work/theirs.info"; then
		echo "FAIL: $name --vocab-info:"
		diff "$work/ours.info" "$work/theirs.info" | cut -c1-200 || true
		fails=$((fails + 1))
	fi
	for mode in "" "--no-bos --special"; do
		# shellcheck disable=SC2086 # $mode is two options or none
		"$LAYERMESH" tokenize --model "$vocab" $mode --file "$work/texts.inp" \
			>"$work/ours.ids" 2>&1 || true
		# shellcheck disable=SC2086
		"$ORACLE" --model "$vocab" --tokenize $mode --file "$work/texts.inp" \
			>"$work/theirs.ids" || true
		compare "$name" "${mode:-(bos by the vocabulary)}"
	done
}

for vocab in "$LM_SHARED"/tokenizer/ggml-vocab-*.gguf "$LM_SHARED"/models/stories260K.gguf; do
	check "$vocab" "$(basename "$vocab" .gguf)"
done
# Pre-tokenizers the shared vocabularies do not carry, under a vocabulary that has the right
# shape for them (byte-level BPE): GPT-4o's regex (gpt-oss, Llama 4) with Llama 3's tokens.
for pre in gpt-4o llama4; do
	python3 "$(dirname "$0")/gguf_set_str.py" "$LM_SHARED/tokenizer/ggml-vocab-llama-bpe.gguf" \
		"$work/vocab-$pre.gguf" tokenizer.ggml.pre "$pre"
	check "$work/vocab-$pre.gguf" "llama-bpe-as-$pre" required
done
echo "$vocabs vocabularies ($skipped skipped) x $n_texts texts x 2 modes, plus --vocab-info:" \
	"$((checks - fails)) of $checks passed, $fails failed, in $((SECONDS - start)) s"
[ "$fails" -eq 0 ] && [ "$vocabs" -gt 0 ]

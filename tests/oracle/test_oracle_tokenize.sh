#!/bin/bash
# test_oracle_tokenize.sh LAYERMESH LM_ORACLE — `layermesh tokenize` against llama.cpp itself.
#
# The unit tests hold the tokenizer to llama.cpp's own test vectors; this holds it to the live
# library on texts those vectors lack: runs of mixed white space, apostrophes, digits of several
# scripts, CJK and Hangul, combining marks, emoji, user-defined and special-looking token text,
# and malformed UTF-8. Every vocabulary in $LM_SHARED/tokenizer that both sides support is
# checked, with BOS by the vocabulary's rule and with --no-bos.
set -eu

LAYERMESH=$1
ORACLE=$2
: "${LM_SHARED:?LM_SHARED must name the shared data directory}"
fails=0
checks=0

texts=(
	"Hello world" " Hello  world  " "\t\tx\n\n\ny  \r\n z" "I'll've it's we'RE 'S"
	"3.14159 +1,000,000 ١٢٣ ४५६ Ⅻ ½" "日本語のテキスト 한국어 텍스트 中文"
	"e\xcc\x81 n\xcc\x83 \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7" "😀👍🏽 🇫🇷 ❤️"
	"<s> </s> <unk> <|endoftext|> <|im_end|> <fim_prefix>" "\xe2\x96\x81\xe2\x96\x81 x"
	"\xff\xfe bad \xc3 \xe2\x82 \xed\xa0\x80 \xc0\xaf end" "def f(x):\n    return x**2  # sq\n"
	"\xc2\xa0nbsp\xe3\x80\x80ideo\xe2\x80\xa8ls" "   " "a" '$$$ +=== <=> ^^ ~~ || `x`'
	"ǅungla ﬁne 𝔘𝔫𝔦 ℕ" "\x01\x02\x7f ctl"
)

for vocab in "$LM_SHARED"/tokenizer/ggml-vocab-*.gguf "$LM_SHARED"/models/stories260K.gguf; do
	case $vocab in *bert*) continue ;; esac
	for t in "${texts[@]}"; do
		text=$(printf '%b' "$t")
		for bos in "" "--no-bos"; do
			checks=$((checks + 1))
			ours=$("$LAYERMESH" tokenize --model "$vocab" $bos -- "$text" 2>&1) || true
			theirs=$("$ORACLE" --model "$vocab" $bos --prompt "$text" --tokenize 2>/dev/null) || true
			ours=$(echo $ours)
			theirs=$(echo $theirs)
			if [ -z "$theirs" ] || [ "$ours" != "$theirs" ]; then
				echo "FAIL: $(basename "$vocab") $bos '$t'"
				echo "  layermesh: $ours"
				echo "  llama.cpp: $theirs"
				fails=$((fails + 1))
			fi
		done
	done
done
echo "$((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]

#!/usr/bin/env bash
# The chat path against each model's own Jinja template rendered by @huggingface/jinja (npm,
# pinned in tests/node/package.json), twice: as the chat API renders it (the template through
# layermesh's Jinja engine, coordinator/api/jinja.h) and by the format's formatter of
# coordinator/api/chat_template.h (what mesh.toml's [model] chat_template uses): every conversation of
# tests/chat/conversations.json (system or none, multi-turn, empty content, unicode, white space
# at the ends, text parts, thinking tags, roles a template refuses, with and without the
# generation prompt) must come out byte for byte the same, or be refused where the template
# raises, in its words. The templates are those of ../shared/chat-templates/ and the ones the
# vocabularies of ../shared/tokenizer/ carry; each must also be recognised as its format.
source "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
node_dir="$root/tests/node"
if ! command -v node >/dev/null; then
	echo "SKIP: node is not installed (deploy/setup.sh test installs it)"
	exit 77
fi
if [ ! -f "$node_dir/node_modules/@huggingface/jinja/package.json" ]; then
	echo "SKIP: @huggingface/jinja is not installed (npm ci in tests/node; deploy/setup.sh does it)"
	exit 77
fi
convs="$root/tests/chat/conversations.json"
tmpl_dir="$LM_SHARED/chat-templates"
summary=()
failed=0

# check NAME TEMPLATE FORMAT BOS EOS [SOURCE...]: the reference renders TEMPLATE with BOS and
# EOS; layermesh renders from SOURCE (default: the same template and texts).
check() {
	local name=$1 tmpl=$2 want=$3 bos=$4 eos=$5 got
	shift 5
	local src=("$@")
	[ ${#src[@]} -gt 0 ] || src=(--template "$tmpl" --bos "$bos" --eos "$eos")
	got=$("$LM_BIN" template "${src[@]}" --detect) || fail "$name: not recognised"
	[ "$got" = "$want" ] || fail "$name: recognised as $got, expected $want"
	"$LM_BIN" template "${src[@]}" --conversations "$convs" >"$LM_TMP/ours.json" ||
		fail "$name: layermesh template failed"
	if ! node "$node_dir/render_templates.mjs" "$tmpl" "$want" "$bos" "$eos" "$convs" \
		"$LM_TMP/ours.json" >"$LM_TMP/cmp.txt"; then
		failed=1
	fi
	cat "$LM_TMP/cmp.txt"
	summary+=("$name ($want): $(tail -n 1 "$LM_TMP/cmp.txt" | sed 's/^[^:]*: //')")
	# The same conversations by the formatter alone.
	"$LM_BIN" template "${src[@]}" --format "$want" --conversations "$convs" \
		>"$LM_TMP/fmt.json" || fail "$name: layermesh template --format $want failed"
	if ! node "$node_dir/render_templates.mjs" "$tmpl" "$want" "$bos" "$eos" "$convs" \
		"$LM_TMP/fmt.json" >"$LM_TMP/cmp.txt"; then
		failed=1
	fi
	cat "$LM_TMP/cmp.txt"
	summary+=("$name, formatter $want: $(tail -n 1 "$LM_TMP/cmp.txt" | sed 's/^[^:]*: //')")
}

check "Gemma 4 (31B-it)" "$tmpl_dir/google-gemma-4-31B-it.jinja" gemma4 "<bos>" "<eos>"
check "Gemma 2/3 (2-2b-it)" "$tmpl_dir/google-gemma-2-2b-it.jinja" gemma "<bos>" "<eos>"
check "Llama 3.1" "$tmpl_dir/meta-llama-Llama-3.1-8B-Instruct.jinja" llama3.1 \
	"<|begin_of_text|>" "<|eot_id|>"
check "ChatML / Qwen 2.5" "$tmpl_dir/Qwen-Qwen2.5-7B-Instruct.jinja" qwen2.5 "" "<|im_end|>"
check "Qwen 3" "$tmpl_dir/Qwen-Qwen3-0.6B.jinja" qwen3 "" "<|im_end|>"
check "Mistral (Nemo)" "$tmpl_dir/mistralai-Mistral-Nemo-Instruct-2407.jinja" mistral "<s>" "</s>"
check "Phi-3.5" "$tmpl_dir/microsoft-Phi-3.5-mini-instruct.jinja" phi3.5 "<s>" "<|endoftext|>"

# The templates real vocabularies carry, with their own BOS and EOS texts.
for v in gemma-4:gemma4-unmerged phi-3:phi3 qwen2:qwen2; do
	vocab="$LM_SHARED/tokenizer/ggml-vocab-${v%%:*}.gguf"
	[ -f "$vocab" ] || continue
	"$LM_BIN" template --model "$vocab" --print >"$LM_TMP/${v%%:*}.jinja"
	texts=$("$LM_BIN" template --model "$vocab" --tokens)
	check "ggml-vocab-${v%%:*}.gguf" "$LM_TMP/${v%%:*}.jinja" "${v##*:}" \
		"$(jq -r .bos_token <<<"$texts")" "$(jq -r .eos_token <<<"$texts")" --model "$vocab"
done
printf '%s\n' "${summary[@]}"
[ "$failed" = 0 ] || fail "a rendering differs from its Jinja template (above)"
echo "ok: every chat format renders as its model's own template"

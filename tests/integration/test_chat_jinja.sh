#!/usr/bin/env bash
# The chat API rendering a model's own template that no formatter knows, through the Jinja
# engine, on a real mesh (two workers over ipc): the model is a synthetic one with Phi-3's
# vocabulary and a template of no known family. /v1/models names the engine; each request's
# prompt ids (return_token_ids) are the ids of what @huggingface/jinja renders for the same
# variables (messages as the API hands them: developer is system, text parts joined; BOS and
# EOS the vocabulary's; chat_template_kwargs as variables), tokenized by the mesh's /tokenize
# with special tokens parsed (the template writes the BOS text, which the API keeps once);
# a conversation the template refuses is a 400 quoting raise_exception with the line; a
# request's knobs change the prompt. A model whose template the engine cannot parse refuses
# chat with the parser's reason.
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
vocab="$LM_SHARED/tokenizer/ggml-vocab-phi-3.gguf"
[ -f "$vocab" ] || { echo "SKIP: $vocab is missing"; exit 77; }
dir="$LM_TMP/m"
mkdir -p "$dir"
cat >"$dir/own.jinja" <<'TEMPLATE'
{{- bos_token -}}
{%- for m in messages -%}
<<{{ m.role|upper }}>> {{ m.content|trim }}
{% endfor -%}
{%- if messages[-1].content == "" %}{{ raise_exception("An empty last message at turn " ~ messages|length) }}{% endif -%}
{%- if add_generation_prompt %}<<ASSISTANT>>{% if enable_thinking is defined and enable_thinking %} (think){% endif %}{% endif -%}
TEMPLATE
model="$dir/own.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 4 --heads 4 --ffn 128 --type q8_0 \
	--vocab-from "$vocab" --chat-template "$dir/own.jinja" >/dev/null
! "$LM_BIN" template --model "$model" --detect >/dev/null 2>&1 ||
	fail "the test template should be of no known family"
LM_SLOTS=2 LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4
lm_up "$dir/mesh.toml" "$dir/up.log"
json=(-H 'Content-Type: application/json')
grep -q "chat template: the model's own, by the Jinja engine" "$dir/up.log" ||
	fail "the mesh did not say it renders with the engine: $(cat "$dir/up.log")"
curl -sf "$LM_URL/v1/models" | jq -e '.data[0].chat_template == "jinja" and
	.data[0].chat_template_renderer == "jinja"' >/dev/null || fail "/v1/models: $(curl -s "$LM_URL/v1/models")"
echo "ok: a template of no known family is served, by the engine"

texts=$("$LM_BIN" template --model "$model" --tokens)
bos=$(jq -r .bos_token <<<"$texts")
eos=$(jq -r .eos_token <<<"$texts")
# check NAME BODY MESSAGES KWARGS: the prompt ids of BODY are those of the reference's render of
# MESSAGES (as the API hands them) with KWARGS.
check() {
	local name=$1 body=$2 messages=$3 kwargs=$4 want got
	jq -n --argjson m "$messages" --argjson k "$kwargs" --arg b "$bos" --arg e "$eos" \
		'{messages: $m, tools: null, add_generation_prompt: true, bos_token: $b,
		  eos_token: $e} + $k' >"$dir/vars.json"
	want=$(node "$node_dir/render_one.mjs" "$dir/own.jinja" "$dir/vars.json")
	jq -e 'type == "string"' <<<"$want" >/dev/null || fail "$name: the reference refused: $want"
	curl -sf "${json[@]}" "$LM_URL/tokenize" \
		-d "$(jq -n --argjson t "$want" '{content: $t, add_special: false, parse_special: true}')" |
		jq -c '.tokens' >"$dir/want_ids"
	got=$(curl -s "${json[@]}" "$LM_URL/v1/chat/completions" -d "$body")
	jq -e '.prompt_token_ids' <<<"$got" >/dev/null || fail "$name: $got"
	[ "$(jq -c '.prompt_token_ids' <<<"$got")" = "$(cat "$dir/want_ids")" ] ||
		fail "$name: prompt ids $(jq -c '.prompt_token_ids' <<<"$got"), the reference's render \
$want tokenizes to $(cat "$dir/want_ids")"
	echo "ok: $name: $(jq -c '.prompt_token_ids | length' <<<"$got") prompt ids, as the reference renders $want"
}
msgs='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hello "}]'
check "system and user" "{\"messages\": $msgs, \"max_tokens\": 1, \"return_token_ids\": true}" \
	"$msgs" '{}'
check "enable_thinking through chat_template_kwargs" \
	"{\"messages\": $msgs, \"max_tokens\": 1, \"return_token_ids\": true, \"chat_template_kwargs\": {\"enable_thinking\": true}}" \
	"$msgs" '{"enable_thinking": true}'
check "developer role and text parts" \
	'{"messages": [{"role": "developer", "content": "Terse."}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "max_tokens": 1, "return_token_ids": true}' \
	'[{"role": "system", "content": "Terse."}, {"role": "user", "content": "a\nb"}]' '{}'

r=$(curl -s "${json[@]}" "$LM_URL/v1/chat/completions" \
	-d '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes?"}, {"role": "user", "content": ""}]}')
[ "$(jq -r .error.message <<<"$r")" = "the chat template refuses this conversation: line 5: An empty last message at turn 3" ] ||
	fail "a conversation the template raises on: $r"
echo "ok: what the template refuses is a 400 in its words, with the line"
lm_down "$dir"

# A template the engine cannot parse: chat is refused with the reason, the rest is served.
printf '{%% for m in messages %%}{{ m.content }}' >"$dir/bad.jinja"
"$LM_BIN" synth --out "$dir/bad.gguf" --dim 64 --layers 4 --heads 4 --ffn 128 --type q8_0 \
	--vocab-from "$vocab" --chat-template "$dir/bad.jinja" >/dev/null
LM_SLOTS=2 LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$dir/bad.gguf" ipc "$(lm_port)" 0:4
lm_up "$dir/mesh.toml" "$dir/up.log"
r=$(curl -s "${json[@]}" "$LM_URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}]}')
jq -e '.error.message | startswith("the model'"'"'s chat template cannot be parsed (line 1: ")' <<<"$r" \
	>/dev/null || fail "an unparsable template: $r"
echo "ok: a template the engine cannot parse refuses chat with the reason: $(jq -r .error.message <<<"$r" | cut -c1-100)"
lm_down "$dir"

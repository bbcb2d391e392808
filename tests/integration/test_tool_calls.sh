#!/usr/bin/env bash
# Tool calls and reasoning through a real mesh: requests with tools, a tool history and
# tool_choice render and run; the output is parsed by the template's syntax (Gemma 4's here,
# whose markers are control tokens, which plain text leaves out). A random-weight model calls
# no tool by itself, so the parse is driven where a request can drive it: the template opens
# the reasoning block (enable_thinking), so the whole output is reasoning_content; logit_bias
# makes every token a marker (<channel|> closes the reasoning: what follows is content;
# <|tool_call> starts a call the model never finishes: it comes back as text, never
# half-parsed). Streams carry the same text in deltas. The expected texts come from the plain
# completion of the same tokens, and from the markers' own texts. tool_choice "required" or
# named does force a call (constrained decoding): Gemma 4's <|tool_call> is drawn as its control
# token, and on a second mesh with Qwen 2.5's template and vocabulary (Hermes calls) every forced
# call parses and its arguments validate against the function's parameters, streamed or not.
source "$(dirname "$0")/lib.sh"

vocab="$LM_SHARED/tokenizer/ggml-vocab-gemma-4.gguf"
[ -f "$vocab" ] || { echo "SKIP: $vocab is missing"; exit 77; }
dir="$LM_TMP/tools"
mkdir -p "$dir"
# Gemma 4's markers and a template that renders tools and a tool history as templates do.
cat >"$dir/tools.jinja" <<'TEMPLATE'
{{- bos_token -}}
{%- if tools -%}<|turn>system
{% for t in tools %}<|tool>{{ t.function.name }}{{ t.function.parameters | tojson }}<tool|>{% endfor %}<turn|>
{% endif -%}
{%- for m in messages -%}
<|turn>{{ m.role }}
{{ m.content | trim }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}<|tool_call>call:{{ c.function.name }}{{ c.function.arguments | tojson }}<tool_call|>{% endfor %}{% endif -%}
{%- if m.tool_call_id %} ({{ m.tool_call_id }}){% endif %}<turn|>
{% endfor -%}
{%- if add_generation_prompt %}<|turn>model
{% if enable_thinking is defined and enable_thinking %}<|channel>thought
{% endif %}{% endif -%}
TEMPLATE
model="$dir/gemma4.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 2 --heads 4 --ffn 128 --type q8_0 \
	--vocab-from "$vocab" --chat-template "$dir/tools.jinja" >/dev/null
LM_SLOTS=2 LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:1 1:2
lm_up "$dir/mesh.toml" "$dir/up.log"
grep -q "tool calls: gemma4, reasoning apart" "$dir/up.log" ||
	fail "the mesh did not recognise the template's tool-call syntax: $(cat "$dir/up.log")"
json=(-H 'Content-Type: application/json')
chat() { curl -s "${json[@]}" "$LM_URL/v1/chat/completions" -d "$1"; }
# A stream's chunks, joined: {content, reasoning, calls, finish}.
chat_stream() {
	curl -sN "${json[@]}" "$LM_URL/v1/chat/completions" -d "$1" | sed -n 's/^data: //p' |
		grep -v '^\[DONE\]$' | jq -s '{content: (map(.choices[0].delta.content // "") | add),
			reasoning: (map(.choices[0].delta.reasoning_content // "") | add),
			calls: (map(.choices[0].delta.tool_calls // []) | add),
			finish: (map(.choices[0].finish_reason // empty) | last)}'
}
tools='[{"type": "function", "function": {"name": "get_weather", "description": "The weather.",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]'
history='[{"role": "user", "content": "Weather in Paris?"},
	{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
	 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
	{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
	{"role": "user", "content": "And tomorrow?"}]'

# (a) Tools, a tool history and each tool_choice render and run.
for choice in '"auto"' '"none"' '"required"' '{"type": "function", "function": {"name": "get_weather"}}'; do
	out=$(chat "{\"messages\": $history, \"tools\": $tools, \"tool_choice\": $choice,
		\"parallel_tool_calls\": false, \"max_tokens\": 4, \"return_token_ids\": true}")
	jq -e '.choices[0].message.role == "assistant" and
		(.choices[0].finish_reason | IN("stop", "length", "tool_calls"))' <<<"$out" >/dev/null ||
		fail "tool_choice $choice: $out"
done
# The template got the tools, and the history's arguments as an object.
prompt=$(jq -c '.prompt_token_ids' <<<"$out")
text=$(curl -s "${json[@]}" "$LM_URL/detokenize" -d "{\"tokens\": $prompt}" | jq -r .content)
grep -qF '<|tool>get_weather{"type": "object", "properties": {"city": {"type": "string"}}}<tool|>' <<<"$text" ||
	fail "the tools did not reach the template: $text"
grep -qF 'get_weather{"city": "Paris"}' <<<"$text" || fail "the history's call: $text"
grep -qF 'sunny (call_1)' <<<"$text" || fail "the tool message: $text"
echo "ok: tools, a tool history and each tool_choice render and run"

out=$(chat "{\"messages\": $history, \"tools\": [{\"type\": \"function\"}]}")
jq -e '.error.param == "tools" and (.error.message | contains("tools[0]"))' <<<"$out" >/dev/null || fail "a malformed tool: $out"
out=$(chat "{\"messages\": $history, \"tools\": $tools, \"tool_choice\": \"sometimes\"}")
jq -e '.error.param == "tool_choice"' <<<"$out" >/dev/null || fail "a malformed tool_choice: $out"
echo "ok: malformed tools and tool_choice are 400s naming the field"

# (b) Reasoning: the template opens it, so the output is all reasoning, trimmed.
ask='[{"role": "user", "content": "Think."}]'
body="{\"messages\": $ask, \"chat_template_kwargs\": {\"enable_thinking\": true},
	\"temperature\": 0, \"max_tokens\": 12, \"return_token_ids\": true"
out=$(chat "$body}")
prompt=$(jq -c '.prompt_token_ids' <<<"$out")
plain=$(curl -s "${json[@]}" "$LM_URL/v1/completions" \
	-d "{\"prompt\": $prompt, \"temperature\": 0, \"max_tokens\": 12}" | jq .choices[0].text)
jq -e --argjson plain "$plain" '.choices[0].message.content == "" and
	.choices[0].message.reasoning_content == ($plain | sub("^\\s+"; "") | sub("\\s+$"; "")) and
	.choices[0].finish_reason == "length" and (.choices[0].message | has("tool_calls") | not)' \
	<<<"$out" >/dev/null || fail "reasoning: $out (the plain completion: $plain)"
stream=$(chat_stream "$body, \"stream\": true}")
jq -e --argjson o "$out" '.reasoning == $o.choices[0].message.reasoning_content and
	.content == "" and .finish == "length"' <<<"$stream" >/dev/null ||
	fail "the streamed reasoning: $stream vs $out"
echo "ok: the reasoning comes back apart, streamed or not"

# <channel|> closes the reasoning; the markers after it are content.
close=$("$LM_BIN" tokenize --model "$vocab" --special --no-bos '<channel|>')
body="{\"messages\": $ask, \"chat_template_kwargs\": {\"enable_thinking\": true},
	\"logit_bias\": {\"$close\": 100}, \"max_tokens\": 4"
out=$(chat "$body}")
jq -e '.choices[0].message.reasoning_content == null and
	.choices[0].message.content == "<channel|><channel|><channel|>"' <<<"$out" >/dev/null ||
	fail "a closed reasoning block: $out"
stream=$(chat_stream "$body, \"stream\": true}")
jq -e '.reasoning == "" and .content == "<channel|><channel|><channel|>"' <<<"$stream" \
	>/dev/null || fail "a closed reasoning block, streamed: $stream"
echo "ok: the reasoning's end is found in the control tokens the model writes"

# A call begun and never finished is text, not a call.
open=$("$LM_BIN" tokenize --model "$vocab" --special --no-bos '<|tool_call>')
body="{\"messages\": $history, \"tools\": $tools, \"logit_bias\": {\"$open\": 100},
	\"max_tokens\": 3"
out=$(chat "$body}")
jq -e '.choices[0].message.content == "<|tool_call><|tool_call><|tool_call>" and
	(.choices[0].message | has("tool_calls") | not) and .choices[0].finish_reason == "length"' \
	<<<"$out" >/dev/null || fail "a call written badly: $out"
stream=$(chat_stream "$body, \"stream\": true}")
jq -e '.content == "<|tool_call><|tool_call><|tool_call>" and (.calls | length) == 0 and
	.finish == "length"' <<<"$stream" >/dev/null || fail "a call written badly, streamed: $stream"
echo "ok: a call written badly comes back as text, streamed or not"

# (c) tool_choice "required" holds the output to the template's call syntax. Gemma 4's markers
# are control tokens: the first token drawn is <|tool_call> itself, where the grammar spells
# its text (a random-weight model then writes arguments as long as max_tokens lets it).
out=$(chat "{\"messages\": $history, \"tools\": $tools, \"tool_choice\": \"required\",
	\"parallel_tool_calls\": false, \"max_tokens\": 24, \"return_token_ids\": true,
	\"temperature\": 0}")
jq -e --argjson open "$open" '.token_ids[0] == $open and .choices[0] as $c |
	($c.finish_reason == "tool_calls" and ($c.message.tool_calls | length) == 1 and
	 $c.message.tool_calls[0].function.name == "get_weather" and
	 ($c.message.tool_calls[0].function.arguments | fromjson | type) == "object") or
	($c.finish_reason == "length" and ($c.message.content | startswith("<|tool_call>call:get_weather{")))' \
	<<<"$out" >/dev/null || fail "a required call in Gemma 4's syntax: $out"
out=$(chat "{\"messages\": $history, \"tools\": $tools, \"tool_choice\": \"required\",
	\"response_format\": {\"type\": \"json_object\"}}")
jq -e '.error.param == "tool_choice" and (.error.message | contains("cannot be combined"))' \
	<<<"$out" >/dev/null || fail "a forced call beside a response_format: $out"
echo "ok: tool_choice required forces a call in Gemma 4's syntax; with a response_format, a 400"
lm_down "$dir"

# (d) Hermes (Qwen 2.5's template and vocabulary): every forced call parses, and its arguments
# validate against the function's parameters; streamed, the same call.
qvocab="$LM_SHARED/tokenizer/ggml-vocab-qwen2.gguf"
qtmpl="$LM_SHARED/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
[ -f "$qvocab" ] && [ -f "$qtmpl" ] || { echo "SKIP: $qvocab or $qtmpl is missing"; exit 77; }
qdir="$dir/qwen"
mkdir -p "$qdir"
"$LM_BIN" synth --out "$qdir/qwen.gguf" --dim 64 --layers 2 --heads 4 --ffn 128 --type q8_0 \
	--vocab-from "$qvocab" --chat-template "$qtmpl" >/dev/null
LM_SLOTS=4 LM_MAX_SEQ=1024 lm_mesh_toml "$qdir/mesh.toml" "$qdir/qwen.gguf" ipc "$(lm_port)" 0:1 1:2
lm_up "$qdir/mesh.toml" "$qdir/up.log"
grep -q "tool calls: hermes" "$qdir/up.log" ||
	fail "the mesh did not take Qwen's template for Hermes calls: $(cat "$qdir/up.log")"
params='{"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
	"days": {"type": "integer"}, "unit": {"enum": ["C", "F"]}}, "required": ["city", "days"],
	"additionalProperties": false}'
jq -n --argjson p "$params" '$p' >"$qdir/schema.json"
qtools="[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": $params}},
	{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": \"object\"}}}]"
ask='[{"role": "user", "content": "Weather in Paris for 3 days?"}]'
named='{"type": "function", "function": {"name": "get_weather"}}'
for seed in 1 2 3 4 5 6; do
	out=$(chat "{\"messages\": $ask, \"tools\": $qtools, \"tool_choice\": $named,
		\"parallel_tool_calls\": false, \"temperature\": 0.9, \"seed\": $seed, \"max_tokens\": 300}")
	jq -e '.choices[0].finish_reason == "tool_calls" and
		(.choices[0].message.tool_calls | length) == 1 and
		.choices[0].message.tool_calls[0].function.name == "get_weather" and
		(.choices[0].message.tool_calls[0].id | startswith("call_"))' <<<"$out" >/dev/null ||
		fail "seed $seed: a named call in Hermes syntax: $out"
	jq '{choices: [{text: .choices[0].message.tool_calls[0].function.arguments,
		finish_reason: .choices[0].finish_reason}], usage}' \
		<<<"$out" >"$qdir/args.$seed.json"
done
python3 "$(dirname "$0")/json_validate.py" "$qdir/schema.json" "$qdir"/args.*.json ||
	fail "a call's arguments do not validate against its parameters"
# "required": a call to either function (one: a random-weight model given parallel calls would
# write them until max_tokens).
out=$(chat "{\"messages\": $ask, \"tools\": $qtools, \"tool_choice\": \"required\",
	\"parallel_tool_calls\": false, \"temperature\": 0, \"max_tokens\": 300}")
jq -e '.choices[0].finish_reason == "tool_calls" and
	(.choices[0].message.tool_calls | length) == 1 and
	(.choices[0].message.tool_calls[0].function.name | IN("get_weather", "get_time")) and
	(.choices[0].message.tool_calls[0].function.arguments | fromjson | type) == "object"' \
	<<<"$out" >/dev/null || fail "required: $out"
body="{\"messages\": $ask, \"tools\": $qtools, \"tool_choice\": $named,
	\"parallel_tool_calls\": false, \"temperature\": 0, \"max_tokens\": 300"
out=$(chat "$body}")
stream=$(chat_stream "$body, \"stream\": true}")
jq -e --argjson o "$out" '.finish == "tool_calls" and (.calls | length) == 1 and
	.calls[0].function.name == "get_weather" and
	.calls[0].function.arguments == $o.choices[0].message.tool_calls[0].function.arguments' \
	<<<"$stream" >/dev/null || fail "the streamed call: $stream vs $out"
echo "ok: Hermes calls forced by tool_choice parse, their arguments validate, streamed or not"
lm_down "$qdir"

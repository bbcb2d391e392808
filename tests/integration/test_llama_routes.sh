#!/usr/bin/env bash
# llama-server's own endpoints as the mesh offers them (api_native.h), against a real mesh of
# stories260K over two workers:
#   - POST /completion: greedy text equal to the single process's (`layermesh run`), with
#     llama-server's fields (tokens_predicted, tokens_evaluated, stop_type, the prompt as text,
#     timings); return_tokens gives the ids /detokenize turns back into the text; a stream
#     carries one token an event, adds up to the same text and ends with the whole answer and
#     no [DONE]; n_probs, stop (stop_type "word", stopping_word), response_fields, n_predict -1,
#     seed -1, logit_bias in llama-server's forms; refusals name their field (n, n_cmpl and
#     best_of above 1 among them: one completion a request);
#   - GET /health and /v1/health: {"status": "ok"};
#   - GET /props: the slots, the context of each, the model's path, the server's seed;
#   - [coordinator] seed: a request without a seed samples with it (the same text twice), one
#     with a seed with its own, /completion's seed -1 with a fresh one;
#   - POST /apply-template: the prompt chat renders (ChatML for a model without a template);
#   - POST /chat/completions/input_tokens: that prompt's tokens, counted;
#   - timings_per_token: each streamed event carries llama-server's timings so far.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
dir="$LM_TMP/routes"
mkdir -p "$dir"
model="$LM_SHARED/models/stories260K.gguf"
LM_SLOTS=4 LM_MAX_SEQ=128 LM_SEED=42 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:5
lm_up "$dir/mesh.toml" "$dir/up.log"

# post PATH BODY: the response body on stdout; fails unless the status is $want (default 200).
post() {
	local code
	code=$(curl -s -o "$dir/resp" -w '%{http_code}' -H 'Content-Type: application/json' \
		--data-binary "$2" "$LM_URL$1")
	[ "$code" = "${want:-200}" ] || fail "POST $1 $2: status $code, expected ${want:-200}: $(head -c 400 "$dir/resp")"
	cat "$dir/resp"
}
# expect JSON FILTER VALUE: jq -r FILTER of JSON must print VALUE.
expect() {
	local got
	# (-j and the dot: trailing newlines of the value are kept.)
	got=$(jq -j "$2" <<<"$1" && echo .) || fail "jq '$2' failed on: $1"
	got=${got%.}
	[ "$got" = "$3" ] || fail "$2: expected '$3', got '$got' in: $(head -c 600 <<<"$1")"
}

prompt="Once upon a time"
"$LM_BIN" run --model "$model" --prompt "$prompt" -n 8 --temp 0 --ctx 128 >"$dir/solo" 2>/dev/null ||
	fail "layermesh run failed"
solo=$(head -c -1 "$dir/solo") # run ends its text with a newline
n_prompt=$(post /tokenize "{\"content\": \"$prompt\", \"add_special\": true}" | jq '.tokens | length')

echo "== /completion, plain"
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 8, \"temperature\": 0, \"return_tokens\": true}")
expect "$r" .content "$solo"
expect "$r" .stop true
expect "$r" .tokens_predicted 8
expect "$r" .tokens_evaluated "$n_prompt"
expect "$r" .stop_type limit
expect "$r" .truncated false
expect "$r" .prompt "<s> $prompt"
expect "$r" .generation_settings.n_predict 8
expect "$r" '.timings.predicted_n' 8
expect "$r" '.timings.prompt_n + .timings.cache_n' "$n_prompt"
expect "$r" '.tokens | length' 8
d=$(post /detokenize "$(jq -c '{tokens}' <<<"$r")")
expect "$d" .content "$solo"
# The same request without return_tokens: no ids.
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 8, \"temperature\": 0}")
expect "$r" '.tokens | length' 0

echo "== /completion, streamed"
curl -sN -H 'Content-Type: application/json' "$LM_URL/completion" \
	-d "{\"prompt\": \"$prompt\", \"n_predict\": 8, \"temperature\": 0, \"stream\": true}" >"$dir/sse"
grep -q '\[DONE\]' "$dir/sse" && fail "a /completion stream ends without [DONE], as llama-server's"
sed -n 's/^data: //p' "$dir/sse" >"$dir/events"
[ "$(wc -l <"$dir/events")" = 9 ] || fail "expected 8 token events and the last, got: $(cat "$dir/sse")"
[ "$(head -n 8 "$dir/events" | jq -s 'map(select(.stop == false and (.tokens | length) == 1)) | length')" = 8 ] ||
	fail "each token event must carry its token: $(cat "$dir/events")"
joined=$(jq -rs 'map(.content) | join("")' "$dir/events")
[ "$joined" = "$solo" ] || fail "the stream's text '$joined' differs from '$solo'"
last=$(tail -n 1 "$dir/events")
expect "$last" .stop true
expect "$last" .stop_type limit
expect "$last" .tokens_predicted 8

echo "== /completion: n_probs, stop, response_fields, n_predict -1, seed -1"
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 3, \"temperature\": 0, \"n_probs\": 4}")
expect "$r" '.completion_probabilities | length' 3
expect "$r" '[.completion_probabilities[] | (.top_logprobs | length) == 4 and (.id | type) == "number" and .logprob <= 0] | all' true
# The greedy token is the likeliest of the top ones.
expect "$r" '[.completion_probabilities[] | .id == .top_logprobs[0].id] | all' true
# ... with the same logprob, and the alternatives' probabilities sum to at most 1.
expect "$r" '[.completion_probabilities[] | .logprob == .top_logprobs[0].logprob and ([.top_logprobs[].logprob | exp] | add) <= 1.000001] | all' true
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 8, \"temperature\": 0, \"stop\": [\"little\"]}")
expect "$r" .content "${solo%%little*}"
expect "$r" .stop_type word
expect "$r" .stopping_word little
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 8, \"temperature\": 0, \"response_fields\": [\"content\", \"generation_settings/n_predict\"]}")
expect "$r" 'keys | join(",")' "content,generation_settings/n_predict"
expect "$r" '."generation_settings/n_predict"' 8
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": -1, \"seed\": -1}")
expect "$r" '.tokens_predicted > 0 and .tokens_predicted <= 128 - .tokens_evaluated' true
expect "$r" '.stop_type == "eos" or .stop_type == "limit"' true
expect "$r" '.generation_settings.seed != -1' true
# The JSON prompt form.
r=$(post /completion "{\"prompt\": {\"prompt_string\": \"$prompt\"}, \"n_predict\": 8, \"temperature\": 0}")
expect "$r" .content "$solo"

echo "== /completion: logit_bias in llama-server's forms"
first=$(post /tokenize "{\"content\": \"$solo\"}" | jq '.tokens[0]')
for lb in "[[$first, false]]" "[[$first, -100]]" "{\"$first\": -100}"; do
	r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 1, \"temperature\": 0, \"logit_bias\": $lb, \"return_tokens\": true}")
	expect "$r" ".tokens[0] != $first" true
done
# Text: each of its tokens is biased.
word=$(jq -r '.tokens[0]' <<<"$(post /tokenize "{\"content\": \"$solo\", \"with_pieces\": true}")" | jq -r .piece)
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 1, \"temperature\": 0, \"logit_bias\": [[\"$word\", false]], \"return_tokens\": true}")
expect "$r" ".tokens[0] != $first" true

echo "== /completion: refusals"
want=400 post /completion '{"prompt": {"prompt_string": "a", "multimodal_data": ["x"]}}' | jq -e '.error.param == "prompt"' >/dev/null ||
	fail "multimodal_data must be refused naming prompt"
want=400 post /completion '{"prompt": [[1, 2], [3]]}' | jq -e '.error.param == "prompt"' >/dev/null ||
	fail "a batch of prompts must be refused naming prompt"
want=400 post /completion '{"prompt": "a", "n_predict": "x"}' | jq -e '.error.param == "n_predict"' >/dev/null ||
	fail "a bad n_predict must be refused naming it"
want=400 post /completion '{"prompt": "a\u0000b"}' | jq -e '.error.param == "prompt"' >/dev/null ||
	fail "U+0000 in /completion's prompt must be refused"
want=400 post /completion '{"prompt": "a", "logit_bias": [[1]]}' | jq -e '.error.param == "logit_bias"' >/dev/null ||
	fail "a bad logit_bias entry must be refused naming it"
want=400 post /completion '[1]' >/dev/null
# One completion a request: n (llama-server's n_cmpl) and best_of above 1 are refused, not
# answered with the first choice alone.
for f in n n_cmpl best_of; do
	want=400 post /completion "{\"prompt\": \"a\", \"$f\": 2}" | jq -e ".error.param == \"$f\"" >/dev/null ||
		fail "$f = 2 on /completion must be refused naming it"
done
r=$(post /completion "{\"prompt\": \"$prompt\", \"n\": 1, \"n_predict\": 8, \"temperature\": 0}")
expect "$r" .content "$solo"

echo "== /health, /v1/health"
for path in /health /v1/health; do
	expect "$(curl -sf "$LM_URL$path")" .status ok
done

echo "== /props"
p=$(curl -sf "$LM_URL/props") || fail "GET /props failed"
expect "$p" .total_slots 4
expect "$p" .default_generation_settings.n_ctx 128
expect "$p" .model_path "$model"
expect "$p" .modalities.vision false
expect "$p" .default_generation_settings.params.seed 42

echo "== [coordinator] seed"
body="{\"prompt\": \"$prompt\", \"max_tokens\": 16, \"temperature\": 1}"
a=$(post /v1/completions "$body")
b=$(post /v1/completions "$body")
expect "$a" .seed 42
expect "$b" .choices[0].text "$(jq -j .choices[0].text <<<"$a")"
expect "$(post /v1/completions "${body%\}}, \"seed\": 7}")" .seed 7
r=$(post /completion "{\"prompt\": \"$prompt\", \"n_predict\": 4, \"seed\": -1}")
expect "$r" '.generation_settings.seed != 42' true

echo "== /apply-template"
r=$(post /apply-template '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}')
expect "$r" .prompt $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'
want=400 post /apply-template '{"messages": []}' >/dev/null
want=400 post /apply-template 'nope' >/dev/null

echo "== /chat/completions/input_tokens"
msgs='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]'
text=$(post /apply-template "{\"messages\": $msgs}" | jq .prompt)
n=$(post /tokenize "{\"content\": $text, \"add_special\": true, \"parse_special\": true}" | jq '.tokens | length')
[ "$n" -gt 5 ] || fail "the ChatML prompt has only $n tokens"
for path in /chat/completions/input_tokens /v1/chat/completions/input_tokens; do
	expect "$(post $path "{\"messages\": $msgs}")" .input_tokens "$n"
done
want=400 post /v1/chat/completions/input_tokens '{"messages": "Hi"}' | jq -e '.error.param == "messages"' >/dev/null ||
	fail "input_tokens must refuse what chat refuses"

echo "== timings_per_token"
for path in /v1/chat/completions /completion; do
	body="{\"messages\": $msgs, \"prompt\": \"$prompt\", \"max_tokens\": 4, \"n_predict\": 4, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"timings_per_token\": true}"
	[ "$path" = /completion ] && body=${body/\"stream_options\": \{\"include_usage\": true\}, /}
	curl -sN -H 'Content-Type: application/json' "$LM_URL$path" -d "$body" |
		sed -n 's/^data: //p' | grep -v '^\[DONE\]' >"$dir/events"
	# Every event after a token has come carries timings, predicted_n counting the tokens.
	counts=$(jq -s -c '[.[] | select(.timings != null) | .timings.predicted_n]' "$dir/events")
	case $path in
	/completion) [ "$counts" = "[1,2,3,4,4]" ] || fail "$path timings' predicted_n: $counts" ;;
	*) [ "$counts" = "[1,2,3,4,4]" ] || fail "$path timings' predicted_n: $counts (the usage chunk's last)" ;;
	esac
done
# Without it, chunks carry none.
curl -sN -H 'Content-Type: application/json' "$LM_URL/v1/chat/completions" \
	-d "{\"messages\": $msgs, \"max_tokens\": 4, \"stream\": true}" | grep -q '"timings"' &&
	fail "chunks carry timings without timings_per_token"

lm_down "$dir"
echo "PASS: llama-server's endpoints"

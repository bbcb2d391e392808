#!/usr/bin/env bash
# The HTTP API as clients meet it, against a real mesh (a synthetic model with Phi-3's
# vocabulary and chat template, over two workers):
#   - every error is OpenAI-style JSON: 404, 405 (with Allow), 413, 415, 400 (no Host, bytes
#     after the JSON), 429 (with Retry-After), 408; chunked bodies and Expect: 100-continue;
#   - chat and completions, plain and streamed, in OpenAI's shapes; the template's end of turn
#     stops a sequence and never shows; no seed: a fresh one, reported, that repeats the text;
#     logit_bias changes the draw; refused parameters name their field; U+0000 in a prompt is
#     tokenized, not cut; /tokenize, /detokenize, /health, /v1/models/{id};
#   - a client that leaves, plain or streaming, frees its sequence within a step;
#   - a conversation reuses its rows through the prefix cache, with the same answers, also
#     across a worker's restart;
#   - the queue bound; slow senders (slowloris) and idle connections are bounded;
#   - /metrics counts responses by status and refusals by reason and passes promtool's check
#     (when Debian's prometheus package is installed) and the tests' strict reader.
source "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
dir="$LM_TMP/api"
mkdir -p "$dir"
vocab="$LM_SHARED/tokenizer/ggml-vocab-phi-3.gguf"
model="$dir/phi3.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 4 --heads 4 --ffn 128 --vocab 32064 \
	--type q8_0 --vocab-from "$vocab" >/dev/null
# worker_timeout is long: "a client that leaves" holds w0 with SIGSTOP, which the liveness
# probe would otherwise take for a hung worker and restart.
LM_SLOTS=2 LM_MAX_SEQ=256 LM_WORKER_TIMEOUT=120 lm_mesh_toml "$dir/mesh.toml" "$model" ipc \
	"$(lm_port)" 0:2 2:4
sed -i '/^\[coordinator\]/a max_queued = 2\nhttp_read_timeout = 2\nhttp_idle_timeout = 3\nmax_connections = 64' \
	"$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up.log"
host=127.0.0.1
port=${LM_URL##*:}
json=(-H 'Content-Type: application/json')

# post PATH BODY [curl args]: prints "CODE BODY".
post() {
	local path=$1 body=$2
	shift 2
	curl -s -o "$dir/resp" -w '%{http_code}' "$@" "${json[@]}" --data-binary "$body" \
		"$LM_URL$path"
	printf ' %s' "$(cat "$dir/resp")"
}
# is_error STATUS "CODE BODY" [PARAM]: the answer is STATUS with an OpenAI-style error.
is_error() {
	local want=$1 got=$2 param=${3:-}
	[ "${got%% *}" = "$want" ] || fail "expected HTTP $want, got: $got"
	jq -e '.error.message | type == "string" and length > 0' <<<"${got#* }" >/dev/null ||
		fail "HTTP $want without an OpenAI-style error: ${got#* }"
	[ -z "$param" ] || jq -e --arg p "$param" '.error.param == $p' <<<"${got#* }" >/dev/null ||
		fail "the error does not name '$param': ${got#* }"
	echo "HTTP $want: $(jq -r .error.message <<<"${got#* }")"
}
metric() { curl -sf "$LM_URL/metrics" | "$LM_PROM_CHECK" | awk -v k="$1" '$1 == k { print $2 }'; }

# ---------------------------------------------------------------- errors are JSON
is_error 404 "$(curl -s -w '%{http_code}' -o "$dir/r" "$LM_URL/v1/nope"; printf ' %s' "$(cat "$dir/r")")"
code=$(curl -s -D "$dir/h" -o "$dir/r" -w '%{http_code}' -X DELETE "$LM_URL/v1/models")
is_error 405 "$code $(cat "$dir/r")"
grep -qi '^Allow: GET, HEAD, OPTIONS' "$dir/h" || fail "405 without Allow: $(cat "$dir/h")"
is_error 415 "$(curl -s -o "$dir/r" -w '%{http_code}' -H 'Content-Type: text/plain' -d '{"prompt": "x"}' "$LM_URL/v1/completions"; printf ' %s' "$(cat "$dir/r")")"
# curl -d without -H: its own form type from a client that is not a browser, taken as JSON.
code=$(curl -s -o "$dir/r" -w '%{http_code}' -d '{"prompt": "x", "max_tokens": 2}' "$LM_URL/v1/completions")
[ "$code" = 200 ] || fail "curl -d without a Content-Type of JSON: HTTP $code $(cat "$dir/r")"
head -c $((5 << 20)) /dev/zero | tr '\0' ' ' >"$dir/big"
is_error 413 "$(curl -s -o "$dir/r" -w '%{http_code}' "${json[@]}" --data-binary @"$dir/big" "$LM_URL/v1/completions"; printf ' %s' "$(cat "$dir/r")")"
exec 3<>"/dev/tcp/$host/$port"
printf 'GET /v1/models HTTP/1.1\r\n\r\n' >&3
reply=$(timeout 10 cat <&3 || true)
exec 3<&-
grep -q '^HTTP/1.1 400 ' <<<"$reply" && grep -q 'Host header is missing' <<<"$reply" ||
	fail "no Host: $reply"
is_error 400 "$(post /v1/completions '{"prompt": "x", "max_tokens": 1} trailing')"
is_error 400 "$(post /v1/completions '{"prompt": "x", "best_of": 3}')" best_of
is_error 400 "$(post /v1/completions '{"prompt": "x", "suffix": "y"}')" suffix
is_error 400 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "n": 3}')" n
is_error 400 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}')" tools
echo "ok: errors are OpenAI-style JSON"

# ---------------------------------------------------------------- bodies: chunked, 100-continue
out=$(post /v1/completions '{"prompt": "x", "max_tokens": 2, "seed": 1}' -H 'Transfer-Encoding: chunked')
[ "${out%% *}" = 200 ] || fail "a chunked body: $out"
printf '{"prompt": "%s", "max_tokens": 1, "seed": 1}' "$(head -c 100 /dev/zero | tr '\0' a)" >"$dir/mid"
curl -sv "${json[@]}" -H 'Expect: 100-continue' --data-binary @"$dir/mid" "$LM_URL/v1/completions" \
	-o "$dir/r" 2>"$dir/v"
grep -q '< HTTP/1.1 100 Continue' "$dir/v" || fail "no 100 Continue: $(cat "$dir/v")"
jq -e '.choices[0].text | type == "string"' "$dir/r" >/dev/null || fail "after 100: $(cat "$dir/r")"
echo "ok: chunked bodies are read, Expect: 100-continue is answered"

# ---------------------------------------------------------------- chat and completions
out=$(post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_tokens": 6}')
[ "${out%% *}" = 200 ] || fail "chat: $out"
jq -e '.object == "chat.completion" and .choices[0].message.role == "assistant" and
	(.choices[0].message.content | type == "string") and .usage.completion_tokens > 0 and
	(.system_fingerprint | startswith("fp_")) and (.seed | type == "number")' \
	<<<"${out#* }" >/dev/null || fail "chat shape: ${out#* }"
curl -sN "${json[@]}" "$LM_URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}],
	"max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}' >"$dir/sse"
sed -n 's/^data: //p' "$dir/sse" >"$dir/events"
tail -n 1 "$dir/events" | grep -qx '\[DONE\]' || fail "no [DONE]: $(cat "$dir/sse")"
head -n -1 "$dir/events" | jq -s -e '
	(.[0].choices[0].delta == {"role": "assistant", "content": ""}) and
	(all(.[]; .object == "chat.completion.chunk")) and
	(.[-2].choices[0].finish_reason == "length") and
	(.[-1].choices == [] and .[-1].usage.completion_tokens == 4)' >/dev/null ||
	fail "chat stream shape: $(cat "$dir/events")"
echo "ok: chat, plain and streamed, in OpenAI's shapes"

# The template's end of turn (<|end|>, made certain by a bias) stops the sequence unseen.
end_id=$(curl -sf "${json[@]}" "$LM_URL/tokenize" -d '{"content": "<|end|>"}' | jq '.tokens[0]')
out=$(post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 8, \"logit_bias\": {\"$end_id\": 100}}")
jq -e '.choices[0].finish_reason == "stop" and .choices[0].message.content == "" and
	.usage.completion_tokens == 0' <<<"${out#* }" >/dev/null ||
	fail "<|end|> (id $end_id) did not stop the turn: ${out#* }"
echo "ok: the template's end of turn ends the answer and is not shown"

# No seed: a fresh one each time, reported; the reported seed repeats the text.
body='{"prompt": "Once upon", "max_tokens": 12, "temperature": 1.0}'
a=$(post /v1/completions "$body")
b=$(post /v1/completions "$body")
seed_a=$(jq '.seed' <<<"${a#* }")
seed_b=$(jq '.seed' <<<"${b#* }")
[ "$seed_a" != "$seed_b" ] || fail "two requests without a seed got seed $seed_a both"
again=$(post /v1/completions "{\"prompt\": \"Once upon\", \"max_tokens\": 12, \"temperature\": 1.0, \"seed\": $seed_a}")
[ "$(jq .choices[0].text <<<"${again#* }")" = "$(jq .choices[0].text <<<"${a#* }")" ] ||
	fail "seed $seed_a did not repeat the text"
echo "ok: no seed gives a fresh one ($seed_a, $seed_b); the reported seed repeats the text"

# logit_bias changes the draw: ban the greedy first token.
g=$(post /v1/completions '{"prompt": "Once upon", "max_tokens": 1, "temperature": 0, "return_token_ids": true}')
first=$(jq '.token_ids[0]' <<<"${g#* }")
h=$(post /v1/completions "{\"prompt\": \"Once upon\", \"max_tokens\": 1, \"temperature\": 0, \"return_token_ids\": true, \"logit_bias\": {\"$first\": -100}, \"presence_penalty\": 0.5}")
[ "$(jq '.token_ids[0]' <<<"${h#* }")" != "$first" ] || fail "logit_bias -100 on $first did not change the draw"
echo "ok: logit_bias bans the greedy token $first"

# U+0000 in a prompt is a character: tokenized by length.
n_nul=$(curl -sf "${json[@]}" "$LM_URL/tokenize" -d '{"content": "ab\u0000cd"}' | jq '.tokens | length')
n_cut=$(curl -sf "${json[@]}" "$LM_URL/tokenize" -d '{"content": "ab"}' | jq '.tokens | length')
[ "$n_nul" -gt "$n_cut" ] || fail "/tokenize cut the text at U+0000 ($n_nul tokens, 'ab' has $n_cut)"
p=$(post /v1/completions '{"prompt": "ab\u0000cd", "max_tokens": 1}')
[ "$(jq .usage.prompt_tokens <<<"${p#* }")" = $((n_nul + 1)) ] ||
	fail "the prompt with U+0000 has $(jq .usage.prompt_tokens <<<"${p#* }") tokens, not $n_nul + BOS"
printf '{"prompt": "ab\0cd", "max_tokens": 1}' >"$dir/raw_nul"
r=$(curl -s -w ' %{http_code}' "${json[@]}" --data-binary @"$dir/raw_nul" "$LM_URL/v1/completions")
[ "${r##* }" = 400 ] && jq -e '.error.message | test("raw control character U\\+0000")' \
	<<<"${r% *}" >/dev/null || fail "a raw NUL, which JSON does not allow: $r"
echo "ok: U+0000 in a prompt is tokenized ($n_nul tokens + BOS) escaped; raw, it is a 400"

# /tokenize is llama-server's: the ids `layermesh tokenize --special --no-bos` gives.
ids=$(curl -sf "${json[@]}" "$LM_URL/tokenize" -d '{"content": "Hello <|user|> world"}' | jq -c .tokens)
want=$("$LM_BIN" tokenize --model "$model" --special --no-bos "Hello <|user|> world" | jq -cR 'split(" ") | map(tonumber)')
[ "$ids" = "$want" ] || fail "/tokenize: $ids, layermesh tokenize: $want"
text=$(curl -sf "${json[@]}" "$LM_URL/detokenize" -d "{\"tokens\": $ids}" | jq -r .content)
[[ "$text" == *Hello*"<|user|>"*world ]] || fail "/detokenize: '$text'"
curl -sf "${json[@]}" "$LM_URL/tokenize" -d '{"content": "Hi", "with_pieces": true, "add_special": true}' |
	jq -e '.tokens[0].id == 1 and (.tokens[1].piece | type == "string")' >/dev/null || fail "with_pieces"
curl -sf "$LM_URL/health" | jq -e '.status == "ok"' >/dev/null || fail "/health"
curl -sf "$LM_URL/v1/models/phi3" | jq -e '.id == "phi3" and .chat_template == "phi3"' >/dev/null ||
	fail "/v1/models/phi3"
is_error 404 "$(curl -s -o "$dir/r" -w '%{http_code}' "$LM_URL/v1/models/gpt-4"; printf ' %s' "$(cat "$dir/r")")" model
"$LM_BIN" status --url "$LM_URL" | grep -q '^chat template: phi3 (family phi3)$' || fail "layermesh status"
echo "ok: /tokenize, /detokenize, /health, /v1/models/{id}, layermesh status"

# ---------------------------------------------------------------- a client that leaves
# The first worker is held (SIGSTOP) from before the request until after its client is gone, so
# the request is in flight the whole time; once let go, the sequence must end at its next step.
w0=$(pgrep -f "layermesh-worker --name w0 .*$dir") || fail "no w0"
for kind in plain stream; do
	stream=false
	[ $kind = plain ] || stream=true
	kill -STOP "$w0"
	before=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.tokens_generated')
	curl -sN -m 120 "${json[@]}" "$LM_URL/v1/completions" -o /dev/null \
		-d "{\"prompt\": \"x\", \"max_tokens\": 200, \"stream\": $stream, \"temperature\": 0}" &
	client=$!
	for _ in $(seq 300); do
		[ "$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.active')" = 1 ] && break
		sleep 0.02
	done
	kill -KILL "$client"
	wait "$client" 2>/dev/null || true
	kill -CONT "$w0"
	for _ in $(seq 200); do
		s=$(curl -sf "$LM_URL/v1/status")
		[ "$(jq '.scheduler.active' <<<"$s")" = 0 ] && break
		sleep 0.05
	done
	[ "$(jq '.scheduler.active' <<<"$s")" = 0 ] || fail "$kind: the sequence is still held"
	made=$(($(jq '.scheduler.tokens_generated' <<<"$s") - before))
	[ "$made" -le 1 ] || fail "$kind: $made tokens were made after the client left"
	echo "ok: a $kind client gone with its request in flight: $made of 200 tokens made"
done

# ---------------------------------------------------------------- the queue bound
kill -STOP "$w0"
pids=()
for k in 1 2 3 4; do # two take the slots, two wait: the bound
	curl -s -m 120 "${json[@]}" "$LM_URL/v1/completions" -o "$dir/q.$k" \
		-d '{"prompt": "x", "max_tokens": 4}' &
	pids+=($!)
done
for _ in $(seq 300); do
	s=$(curl -sf "$LM_URL/v1/status")
	[ "$(jq '.scheduler.active + .scheduler.queued' <<<"$s")" = 4 ] && break
	sleep 0.02
done
code=$(curl -s -D "$dir/h" -o "$dir/r" -w '%{http_code}' "${json[@]}" "$LM_URL/v1/completions" \
	-d '{"prompt": "x", "max_tokens": 4}')
kill -CONT "$w0"
is_error 429 "$code $(cat "$dir/r")"
grep -qi '^Retry-After: ' "$dir/h" || fail "429 without Retry-After"
for pid in "${pids[@]}"; do wait "$pid" || fail "a queued request failed"; done
[ "$(metric 'layermesh_http_refused_total{reason="queue_full"}')" = 1 ] || fail "queue_full not counted"
[ "$(metric 'layermesh_http_responses_total{code="429"}')" = 1 ] || fail "429 not counted"
echo "ok: past max_queued a request gets 429 with Retry-After; the queued ones complete"

# ---------------------------------------------------------------- the prefix cache
# A conversation of three turns, each prompt the last one's prompt and answer and more: with
# cache_prompt (the default) each turn reuses the rows its predecessor left, and the answers
# and logprobs are those of cache_prompt false. A worker killed before the third turn took
# its rows with it: the third turn reuses nothing and still answers the same.
turn() { # turn IDS CACHE: prints the answer's ids, its logprobs and its cached token count
	local r
	r=$(curl -sf "${json[@]}" "$LM_URL/v1/completions" -d "{\"prompt\": $1, \"max_tokens\": 8,
		\"temperature\": 0, \"logprobs\": 1, \"return_token_ids\": true, \"cache_prompt\": $2}") ||
		fail "a turn failed: $1"
	jq -c '[.token_ids, .choices[0].logprobs.token_logprobs,
		.usage.prompt_tokens_details.cached_tokens]' <<<"$r"
}
conversation() { # conversation CACHE KILL: the three turns, one JSON line each
	local ids='[1, 306, 763, 29871, 13, 1576, 278, 4799]' out i
	for i in 1 2 3; do
		if [ "$i" = 3 ] && [ "$2" = kill ]; then
			kill -KILL "$(pgrep -f "layermesh-worker --name w1 .*$dir" | head -n 1)"
			sleep 0.3
			lm_ready_wait "$LM_URL" 30 >/dev/null || fail "the mesh did not come back"
		fi
		out=$(turn "$ids" "$1")
		echo "$out"
		ids=$(jq -c --argjson a "$out" '. + $a[0] + [4799, 278]' <<<"$ids")
	done
}
conversation false keep >"$dir/conv.off"
conversation true kill >"$dir/conv.on"
cmp -s <(jq -c '.[0:2]' "$dir/conv.off") <(jq -c '.[0:2]' "$dir/conv.on") ||
	fail "the cache changed the answers: $(cat "$dir/conv.off" "$dir/conv.on")"
cached=$(jq -c '.[2]' "$dir/conv.on" | tr '\n' ' ')
# (The first turn may reuse what the same turn without the cache left in a slot.)
[ "$(jq -s '[.[] | .[2]] | .[1] > 8 and .[2] == 0' "$dir/conv.on")" = true ] ||
	fail "cached tokens per turn: $cached (want the first turn's rows, then 0 after the kill)"
[ "$(jq -s '[.[] | .[2]] | add' "$dir/conv.off")" = 0 ] || fail "cache_prompt false reused rows"
[ "$(metric layermesh_prompt_tokens_cached_total)" -ge "$(jq -s '.[1][2]' "$dir/conv.on")" ] ||
	fail "/metrics does not count the reused prompt tokens"
echo "ok: prefix cache: cached tokens per turn $cached; the same ids and logprobs as without it"

# ---------------------------------------------------------------- slow and idle clients
python3 "$here/http_clients.py" slowloris "$host" "$port" 50 >"$dir/slow" &
slow=$!
ok=$(post /v1/completions '{"prompt": "x", "max_tokens": 2}')
[ "${ok%% *}" = 200 ] || fail "a request beside 50 slow senders: $ok"
wait "$slow" || fail "slow senders held their connections: $(cat "$dir/slow")"
cat "$dir/slow"
grep -q ' 50 answered 408' "$dir/slow" || fail "not every slow sender got 408"
python3 "$here/http_clients.py" idle "$host" "$port" 500 2 >"$dir/idle" &
idle=$!
for _ in $(seq 300); do grep -q open "$dir/idle" 2>/dev/null && break; sleep 0.05; done
# A connection that has said nothing is kept from eviction for its first 200 ms (its request
# may be on its way), and one past the cap is told 503 once it has been silent that long and
# the server's sweep (every second here) comes by.
sleep 1.5
conns=$(metric layermesh_http_connections)
ok=$(post /v1/completions '{"prompt": "x", "max_tokens": 2}')
[ "${ok%% *}" = 200 ] || fail "a request beside 500 idle connections: $ok"
wait "$idle" || fail "idle connections were kept: $(cat "$dir/idle")"
cat "$dir/idle"
[ "$conns" -le 66 ] || fail "$conns connections open with max_connections = 64"
echo "ok: 50 slowloris senders got 408; 500 idle connections held the server at $conns open, all closed"

# ---------------------------------------------------------------- metrics
curl -sf "$LM_URL/metrics" >"$dir/metrics"
"$LM_PROM_CHECK" <"$dir/metrics" >/dev/null || fail "/metrics refused by the strict reader"
if command -v promtool >/dev/null; then
	promtool check metrics <"$dir/metrics" || fail "promtool check metrics"
	echo "ok: promtool check metrics"
else
	echo "promtool not installed (Debian's prometheus package): skipped its check"
fi
for r in not_found method_not_allowed unsupported_media_type body_too_large malformed_request \
	invalid_request read_timeout; do
	v=$(metric "layermesh_http_refused_total{reason=\"$r\"}")
	[ "${v:-0}" -ge 1 ] || fail "refusal '$r' not counted"
done
grep -q '^layermesh_queue_wait_seconds_count ' "$dir/metrics" || fail "no time-in-queue histogram"
echo "ok: /metrics counts responses by status and refusals by reason"
lm_down "$dir"

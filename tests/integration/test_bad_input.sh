#!/usr/bin/env bash
# Bad input everywhere, against real processes:
#   HTTP: invalid JSON, wrong types, negative or huge max_tokens, a prompt longer than the
#   context, raw control characters in a string -> 4xx with an OpenAI-style JSON error; the
#   mesh keeps serving. Unknown fields are ignored and named in a response header; the paths
#   without /v1 answer; a model without a chat template chats in ChatML, with a warning.
#   A client that disconnects mid-stream frees its sequence on the coordinator and on every
#   worker.
#   Files: a corrupt GGUF or a bad mesh.toml -> `layermesh up` fails before starting anything,
#   naming the file and the line, field or offset.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
dir="$LM_TMP/bad"
mkdir -p "$dir"
LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:5
lm_up "$dir/mesh.toml" "$dir/up.log"

# expect STATUS PARAM_OR_- BODY: the API answers STATUS with {"error": {...}} naming PARAM.
expect() {
	local status=$1 param=$2 body=$3 code
	code=$(curl -s -o "$dir/resp.json" -w '%{http_code}' "$LM_URL/v1/completions" \
		-H 'Content-Type: application/json' --data-binary "$body")
	[ "$code" = "$status" ] || fail "body '$body': HTTP $code, expected $status: $(cat "$dir/resp.json")"
	jq -e '.error.message | type == "string" and length > 0' "$dir/resp.json" >/dev/null ||
		fail "body '$body': no OpenAI-style error: $(cat "$dir/resp.json")"
	jq -e '.error.type | type == "string"' "$dir/resp.json" >/dev/null ||
		fail "body '$body': the error has no type"
	if [ "$param" != - ]; then
		jq -e --arg p "$param" '.error.param == $p' "$dir/resp.json" >/dev/null ||
			fail "body '$body': the error does not name '$param': $(cat "$dir/resp.json")"
	fi
	echo "HTTP $code for $(head -c 60 <<<"$body"): $(jq -r .error.message "$dir/resp.json")"
}
expect 400 - '{"prompt": "The cat", "max_tokens": 4'
expect 400 - 'not json at all'
expect 400 - '[1, 2, 3]'
expect 400 prompt '{"prompt": 42}'
expect 400 prompt '{"max_tokens": 4}'
expect 400 prompt '{"prompt": ["a", "b"]}'
expect 400 prompt '{"prompt": [1, 99999]}'
expect 400 max_tokens '{"prompt": "The cat", "max_tokens": -1}'
expect 400 max_tokens '{"prompt": "The cat", "max_tokens": 100000000}'
expect 400 max_tokens '{"prompt": "The cat", "max_tokens": "ten"}'
expect 400 max_tokens '{"prompt": "The cat", "max_tokens": 1.5}'
expect 400 temperature '{"prompt": "The cat", "temperature": "hot"}'
expect 400 top_p '{"prompt": "The cat", "top_p": 2}'
expect 400 stream '{"prompt": "The cat", "stream": "yes"}'
expect 400 stop '{"prompt": "The cat", "stop": [1, 2]}'
expect 400 n '{"prompt": "The cat", "n": 17}'
printf '{"prompt": "The \001cat"}' >"$dir/raw_ctl"
expect 400 - "$(cat "$dir/raw_ctl")"
# An unknown field is ignored and named in a response header (and a debug log line).
curl -s -D "$dir/h" -o "$dir/resp.json" "$LM_URL/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt": "The cat", "max_tokens": 2, "frobnicate": true, "store": false}'
grep -qi '^X-Layermesh-Ignored-Fields: frobnicate, store' "$dir/h" ||
	fail "unknown fields not named: $(cat "$dir/h" "$dir/resp.json")"
jq -e '.choices[0].text | type == "string"' "$dir/resp.json" >/dev/null ||
	fail "a request with unknown fields was not served: $(cat "$dir/resp.json")"
echo "ok: unknown fields ignored and named: $(grep -i '^X-Layermesh-Ignored' "$dir/h" | tr -d '\r')"
# The paths without /v1, and chat on a model with no template: ChatML, with the warning.
curl -sf "$LM_URL/models" | jq -e '.data[0].chat_template == "chatml" and
	(.data[0].chat_template_warning | test("falls back to ChatML"))' >/dev/null ||
	fail "/models: $(curl -s "$LM_URL/models")"
curl -sf "$LM_URL/completions" -d '{"prompt": "The cat", "max_tokens": 2}' |
	jq -e '.choices[0].text | type == "string"' >/dev/null || fail "/completions without /v1"
curl -sf "$LM_URL/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}' |
	jq -e '.choices[0].message.role == "assistant"' >/dev/null || fail "/chat/completions (ChatML)"
grep -q "warn: chat template: chatml: the model has no chat template" "$dir/up.log" ||
	fail "the log does not warn of the ChatML fallback"
echo "ok: /models, /completions, /chat/completions without /v1; ChatML for a model without a template"
long=$(printf 'Once upon a time %.0s' $(seq 80))
expect 400 prompt "{\"prompt\": \"$long\"}"
curl -sf "$LM_URL/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt": "The cat", "max_tokens": 4}' |
	jq -e '.choices[0].text | length > 0' >/dev/null || fail "the mesh stopped serving after bad requests"
echo "ok: bad HTTP bodies get 4xx and the mesh keeps serving"

# A client gone mid-stream: its sequence is cut short and released everywhere.
before=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.tokens_generated')
curl -sN "$LM_URL/v1/completions" -H 'Content-Type: application/json' \
	-d '{"prompt": "The cat", "max_tokens": 240, "stream": true}' \
	>"$dir/stream.txt" &
client=$!
for _ in $(seq 1000); do
	grep -q '^data:' "$dir/stream.txt" 2>/dev/null && break
	sleep 0.005
done
kill -KILL "$client" 2>/dev/null || true
wait "$client" 2>/dev/null || true
released=no
for _ in $(seq 100); do
	status=$(curl -sf "$LM_URL/v1/status")
	if [ "$(jq '.scheduler.active' <<<"$status")" = 0 ]; then
		released=yes
		break
	fi
	sleep 0.05
done
[ $released = yes ] || fail "the coordinator still holds the sequence: $(jq -c .scheduler <<<"$status")"
made=$(($(jq '.scheduler.tokens_generated' <<<"$status") - before))
[ "$made" -lt 240 ] || fail "the sequence ran to its end ($made tokens) although its client left"
echo "client gone after $(grep -c '^data:' "$dir/stream.txt") events: $made of 240 tokens made"
echo "ok: a client gone mid-stream freed its sequence"
lm_down "$dir"

# Files: a corrupt GGUF and bad mesh.toml files fail before anything starts.
head -c 2000 "$model" >"$dir/truncated.gguf"
sed "s|path = \".*\"|path = \"$dir/truncated.gguf\"|" "$dir/mesh.toml" >"$dir/corrupt.toml"
if "$LM_BIN" up "$dir/corrupt.toml" --worker-bin "$LM_WORKER" >"$dir/corrupt.log" 2>&1; then
	fail "layermesh up started on a truncated model"
fi
grep -q "truncated.gguf.*offset" "$dir/corrupt.log" ||
	fail "the GGUF error names no file and offset: $(cat "$dir/corrupt.log")"
echo "corrupt GGUF: $(tail -n 1 "$dir/corrupt.log")"
printf '[model]\npath = "%s"\nslots = "many"\n' "$model" >"$dir/typo.toml"
if "$LM_BIN" up "$dir/typo.toml" --worker-bin "$LM_WORKER" >"$dir/typo.log" 2>&1; then
	fail "layermesh up started on a bad mesh.toml"
fi
grep -q "typo.toml:3:.*slots" "$dir/typo.log" ||
	fail "the mesh.toml error names no line and key: $(cat "$dir/typo.log")"
echo "bad mesh.toml: $(tail -n 1 "$dir/typo.log")"
! pgrep -f "layermesh-worker.*$dir" >/dev/null || fail "a worker started for a bad configuration"
echo "ok: bad input"

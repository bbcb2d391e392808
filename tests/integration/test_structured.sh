#!/usr/bin/env bash
# Structured output by constrained decoding, through a real 3-worker mesh of a random-weight
# model (docs/constrained-decoding.md):
#   1. json_schema, response_format json_schema and json_object, greedy and seeded, sent at
#      once with speculation on (a draft model, whose unconstrained drafts the grammar often
#      rejects): every output parses with Python's json and validates against the schema
#      (tests/integration/json_validate.py), and ends because the grammar completed;
#   2. a GBNF grammar holds the output to its sentences; a bad grammar and an unenforceable
#      schema are 400s with the reason;
#   3. a replay: the last worker and a middle one are killed while constrained requests run;
#      the restarted last worker rebuilds each matcher from the grammar and the tokens the
#      coordinator sends again, and every greedy request ends exactly as without the fault;
#   4. a rolling redeploy of the last worker under constrained load: the same.
source "$(dirname "$0")/lib.sh"

here=$(dirname "$0")
model="$LM_TMP/rand.gguf"
"$LM_BIN" synth --out "$model" --dim 128 --layers 6 --heads 4 --ffn 256 --vocab 512 \
	--type f32 --seed 11 --vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null ||
	fail "layermesh synth"
"$LM_BIN" quantize --in "$model" --out "$LM_TMP/draft.gguf" --type q8_0 >/dev/null ||
	fail "layermesh quantize"

dir="$LM_TMP/mesh"
mkdir -p "$dir"
LM_MAX_SEQ=1024 LM_SLOTS=16 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:6
printf '\n[speculative]\ndraft_model = "%s"\nmax_draft = 4\nmax_streams = 0\n' \
	"$LM_TMP/draft.gguf" >>"$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up.log"

# Bounded everywhere (strings, arrays, numbers, white space), so every output must end.
cat >"$dir/schema.json" <<'EOF'
{"type": "object",
 "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"},
                     "y": {"type": "number"}}, "required": ["x", "y"],
                     "additionalProperties": false}},
 "properties": {
   "name": {"type": "string", "maxLength": 24},
   "age": {"type": "integer"},
   "ok": {"type": "boolean"},
   "color": {"enum": ["red", "green", "blue", null]},
   "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 4},
   "at": {"$ref": "#/$defs/point"},
   "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 8}]},
   "kind": {"const": "demo"}},
 "required": ["name", "age", "ok", "color", "tags", "at"],
 "additionalProperties": false}
EOF
schema=$(cat "$dir/schema.json")

post() { # post FILE BODY: the body to /v1/completions, the response in FILE; prints the code
	curl -s -o "$1" -w '%{http_code}' "$LM_URL/v1/completions" \
		-H 'Content-Type: application/json' -d "$2"
}

# ---------------------------------------------------------------- 1. schemas at once
# LM_STRUCTURED_N requests (default 12; issue 24 asks 1,000 once), 16 at a time.
prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!")
n_req=${LM_STRUCTURED_N:-12}
pids=()
for i in $(seq 0 $((n_req - 1))); do
	if ((${#pids[@]} >= 16)); then
		wait "${pids[0]}" || fail "request $((i - 16)): curl failed"
		pids=("${pids[@]:1}")
	fi
	p=${prompts[$((i % 4))]}
	if ((i % 2)); then samp='"temperature": 0.8, "seed": '$i; else samp='"temperature": 0'; fi
	if ((i % 3 == 0)); then
		field='"json_schema": '"$schema"
	else
		field='"response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": true, "schema": '"$schema"'}}'
	fi
	post "$dir/r.$i.json" '{"prompt": "'"$p"'", "max_tokens": 900, '"$samp"', '"$field"'}' \
		>"$dir/r.$i.code" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a request: curl failed"; done
for i in $(seq 0 $((n_req - 1))); do
	[ "$(cat "$dir/r.$i.code")" = 200 ] || fail "request $i: HTTP $(cat "$dir/r.$i.code"): $(cat "$dir/r.$i.json")"
	jq -e '.choices[0].finish_reason == "stop"' "$dir/r.$i.json" >/dev/null ||
		fail "request $i did not end with the grammar: $(cat "$dir/r.$i.json")"
done
python3 "$here/json_validate.py" "$dir/schema.json" "$dir"/r.*.json >"$dir/valid.txt" ||
	fail "an output does not validate"
[ "$(wc -l <"$dir/valid.txt")" -eq "$n_req" ] || fail "$(wc -l <"$dir/valid.txt") of $n_req checked"
((n_req > 12)) || cat "$dir/valid.txt"
drafted=$(curl -sf "$LM_URL/metrics" | awk '$1 == "layermesh_spec_drafted_tokens_total" { print $2 }')
[ "${drafted:-0}" -gt 0 ] || fail "nothing was drafted: speculation did not run"
echo "$n_req constrained requests valid, with $drafted drafted tokens"
# The last worker's own count of its grammar draws, in its /status (through /v1/status).
gr=$(curl -sf "$LM_URL/v1/status" | jq -c '[.. | objects | .grammar? | select(type == "object")] | .[0]')
[ "$(jq '.draws' <<<"$gr")" -gt 0 ] || fail "the last worker counts no grammar draws: $gr"
echo "last worker: $gr"

# json_object: any JSON object.
code=$(post "$dir/obj.json" '{"prompt": "The dog", "max_tokens": 600, "temperature": 0, "response_format": {"type": "json_object"}}')
[ "$code" = 200 ] || fail "json_object: HTTP $code"
if jq -e '.choices[0].finish_reason == "stop"' "$dir/obj.json" >/dev/null; then
	jq -r '.choices[0].text' "$dir/obj.json" | python3 -c 'import json, sys; v = json.load(sys.stdin); assert isinstance(v, dict), v' ||
		fail "json_object: not a JSON object: $(cat "$dir/obj.json")"
fi
echo "json_object: $(jq -c '.choices[0] | {text, finish_reason}' "$dir/obj.json")"

# Chat, streamed and not: the same schema through response_format (the model has no template
# of its own: ChatML).
code=$(curl -s -o "$dir/chat.json" -w '%{http_code}' "$LM_URL/v1/chat/completions" \
	-H 'Content-Type: application/json' -d '{"messages": [{"role": "user", "content": "Describe a cat."}], "max_tokens": 900, "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": true, "schema": '"$schema"'}}}')
[ "$code" = 200 ] || fail "chat: HTTP $code: $(cat "$dir/chat.json")"
python3 "$here/json_validate.py" "$dir/schema.json" "$dir/chat.json" || fail "chat: the output does not validate"
curl -sfN "$LM_URL/v1/chat/completions" -H 'Content-Type: application/json' \
	-d '{"messages": [{"role": "user", "content": "Describe a cat."}], "max_tokens": 900, "temperature": 0, "stream": true, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": '"$schema"'}}}' \
	>"$dir/chat.sse" || fail "chat, streamed: the request failed"
sed -n 's/^data: //p' "$dir/chat.sse" | grep -v '^\[DONE\]' |
	jq -rj '.choices[0].delta.content // empty' >"$dir/chat-stream.txt"
cmp -s "$dir/chat-stream.txt" <(jq -rj '.choices[0].message.content' "$dir/chat.json") ||
	fail "chat, streamed: '$(cat "$dir/chat-stream.txt")' is not the unstreamed answer"
echo "chat: valid, streamed the same: $(jq -c '.choices[0].message.content' "$dir/chat.json")"

# ---------------------------------------------------------------- 2. grammars
for seed in 1 2 3 4 5 6; do
	code=$(post "$dir/g.json" '{"prompt": "The cat", "max_tokens": 50, "temperature": 1, "seed": '$seed', "grammar": "root ::= (\"yes\" | \"no\") \"!\"{1,3}"}')
	[ "$code" = 200 ] || fail "grammar: HTTP $code: $(cat "$dir/g.json")"
	text=$(jq -r '.choices[0].text' "$dir/g.json")
	[[ "$text" =~ ^(yes|no)!{1,3}$ ]] || fail "grammar: output '$text' is not a sentence of it"
	echo "grammar, seed $seed: $text"
done
code=$(post "$dir/bad.json" '{"prompt": "x", "grammar": "root ::= \"a\"\nitem ::= [0-9"}')
[ "$code" = 400 ] || fail "a bad grammar: HTTP $code"
jq -e '.error.message | test("line 2, column 10: unterminated character class")' "$dir/bad.json" >/dev/null ||
	fail "a bad grammar's message: $(cat "$dir/bad.json")"
code=$(post "$dir/bad2.json" '{"prompt": "x", "json_schema": {"type": "string", "pattern": "^a$"}}')
[ "$code" = 400 ] || fail "an unenforceable schema: HTTP $code"
jq -e '.error.param == "json_schema" and (.error.message | test("pattern"))' "$dir/bad2.json" >/dev/null ||
	fail "an unenforceable schema's message: $(cat "$dir/bad2.json")"
echo "refusals: $(jq -r .error.message "$dir/bad.json"); $(jq -r .error.message "$dir/bad2.json")"

# ---------------------------------------------------------------- 3. a replay
worker_pid() { pgrep -f "layermesh-worker --name $1 .*$2" | head -n 1; }
run_greedy() { # run_greedy TAG: 8 greedy constrained requests at once, their pids in `pids`
	local i
	pids=()
	for i in $(seq 0 7); do
		post "$dir/$1.$i.json" '{"prompt": "'"${prompts[$((i % 4))]}"' '"$i"'", "max_tokens": 900, "temperature": 0, "json_schema": '"$schema"'}' \
			>"$dir/$1.$i.code" &
		pids+=($!)
	done
}
run_greedy calm
for p in "${pids[@]}"; do wait "$p"; done
replays0=$(curl -sf "$LM_URL/metrics" | awk '$1 == "layermesh_replays_total" { print $2 }')
run_greedy storm
sleep 0.3
for w in w2 w1; do
	pid=$(worker_pid "$w" "$dir") || true
	[ -n "$pid" ] && kill -KILL "$pid" && echo "killed $w (pid $pid)"
	sleep 0.3
done
for p in "${pids[@]}"; do wait "$p"; done
replays=$(($(curl -sf "$LM_URL/metrics" | awk '$1 == "layermesh_replays_total" { print $2 }') - replays0))
for i in $(seq 0 7); do
	[ "$(cat "$dir/storm.$i.code")" = 200 ] || fail "request $i in the storm: HTTP $(cat "$dir/storm.$i.code"): $(cat "$dir/storm.$i.json")"
	a=$(jq -c '.choices[0] | {text, finish_reason}' "$dir/calm.$i.json")
	b=$(jq -c '.choices[0] | {text, finish_reason}' "$dir/storm.$i.json")
	[ "$a" = "$b" ] || fail "request $i: after the replay $b, without faults $a"
done
python3 "$here/json_validate.py" "$dir/schema.json" "$dir"/storm.*.json >/dev/null ||
	fail "an output of the storm does not validate"
echo "replay: 8 greedy constrained requests equal to the fault-free ones ($replays sequences replayed)"
[ "$replays" -gt 0 ] || echo "note: the requests ended before the kills; nothing was replayed"
# The killed workers restart; a redeploy is refused (503) until every worker is ready again.
lm_ready_wait "$LM_URL" 60 >/dev/null || fail "the mesh was not ready again 60 s after the kills"

# ---------------------------------------------------------------- 4. a rolling redeploy
# The last worker replaced under load: rounds of the same requests run until the redeploy is
# done; the new worker gets each sequence's grammar again (the scheduler's quiesce), and every
# round ends as without it.
errors0=$(curl -sf "$LM_URL/metrics" | awk '$1 == "layermesh_ring_errors_total" { print $2 }')
rounds=0 rd=
while { [ -z "$rd" ] || kill -0 "$rd" 2>/dev/null; } && ((rounds < 30)); do
	run_greedy "rd$rounds"
	if [ -z "$rd" ]; then # once the first round's requests are under way
		sleep 0.05
		"$LM_BIN" redeploy --url "$LM_URL" --workers w2 >"$dir/rd.out" 2>&1 &
		rd=$!
	fi
	for p in "${pids[@]}"; do wait "$p"; done
	for i in $(seq 0 7); do
		a=$(jq -c '.choices[0] | {text, finish_reason}' "$dir/calm.$i.json")
		b=$(jq -c '.choices[0] | {text, finish_reason}' "$dir/rd$rounds.$i.json" 2>/dev/null || true)
		[ "$a" = "$b" ] || fail "round $rounds, request $i during the redeploy: $b, without it $a"
	done
	rounds=$((rounds + 1))
done
wait "$rd" || fail "the redeploy failed: $(cat "$dir/rd.out")"
moved=$(curl -sf "$LM_URL/v1/admin/redeploy" | jq -r '.moved_sequences')
# The new worker had each grammar sent with the sequence's next step: it never had to refuse a
# batch for a matcher it lacked (which the coordinator would mend by replaying the sequence).
errors=$(curl -sf "$LM_URL/metrics" | awk '$1 == "layermesh_ring_errors_total" { print $2 }')
[ "$errors" = "$errors0" ] || fail "the redeploy cost $((errors - errors0)) refused batches"
echo "redeploy of the last worker: $rounds rounds of 8 constrained requests, each as without it ($moved sequences moved live)"
lm_down "$dir"
echo "ok"

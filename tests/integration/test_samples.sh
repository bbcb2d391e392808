#!/usr/bin/env bash
# Parallel samples (n, best_of) and the slots, against a real mesh (a synthetic model with
# Phi-3's vocabulary and chat template, over two workers):
#   - n = 4 greedy: four choices, each the text of a request of its own; the prompt is computed
#     once (its rows copied into the other slots: /metrics' shared tokens) and counted once
#     in usage;
#   - choice i samples with seed + i: at temperature 1 it is the request of its own with that
#     seed;
#   - best_of: the choice with the highest sum of logprobs among best_of samples;
#   - a chat stream of n = 2 carries each choice's index: a role chunk, its text and its
#     finish each;
#   - more choices than slots (6, and the probe's): 400 naming n;
#   - GET /slots: every slot, idle or processing, the rows the prefix cache keeps;
#   - a worker killed in the middle of a cached conversation's turn: the turn is replayed and
#     answers as without the cache; one killed while n = 4 decodes: each choice still the
#     request of its own;
#   - sliding-window layers (gemma3): the prefix cache reuses only what the rings still hold.
source "$(dirname "$0")/lib.sh"

dir="$LM_TMP/samples"
mkdir -p "$dir"
vocab="$LM_SHARED/tokenizer/ggml-vocab-phi-3.gguf"
model="$dir/phi3.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 4 --heads 4 --ffn 128 --vocab 32064 \
	--type q8_0 --vocab-from "$vocab" >/dev/null
LM_SLOTS=6 LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4
lm_up "$dir/mesh.toml" "$dir/up.log"
json=(-H 'Content-Type: application/json')
metric() { curl -sf "$LM_URL/metrics" | "$LM_PROM_CHECK" | awk -v k="$1" '$1 == k { print $2 }'; }
complete() { # complete BODY: the answer of POST /v1/completions
	curl -sf "${json[@]}" "$LM_URL/v1/completions" -d "$1" || fail "a completion failed: $1"
}

prompt='"The quick brown fox jumps over the lazy dog, and then the dog"'
# ---------------------------------------------------------------- n = 4 greedy
single=$(complete "{\"prompt\": $prompt, \"max_tokens\": 12, \"temperature\": 0,
	\"cache_prompt\": false}")
want=$(jq -r '.choices[0].text' <<<"$single")
n_prompt=$(jq '.usage.prompt_tokens' <<<"$single")
shared0=$(metric layermesh_prompt_tokens_shared_total)
four=$(complete "{\"prompt\": $prompt, \"max_tokens\": 12, \"temperature\": 0, \"n\": 4,
	\"cache_prompt\": false}")
[ "$(jq '[.choices[].index]' -c <<<"$four")" = '[0,1,2,3]' ] || fail "n = 4: indexes: $four"
jq -e --arg w "$want" '[.choices[].text == $w] | all' <<<"$four" >/dev/null ||
	fail "n = 4 greedy differs from the request of its own ('$want'): $four"
jq -e --argjson p "$n_prompt" '.usage.prompt_tokens == $p and
	.usage.completion_tokens == ([.choices[]] | length) * 12' <<<"$four" >/dev/null ||
	fail "n = 4: usage: $(jq -c .usage <<<"$four")"
shared=$(($(metric layermesh_prompt_tokens_shared_total) - shared0))
[ "$shared" = $((3 * (n_prompt - 1))) ] ||
	fail "n = 4 shared $shared prompt tokens, want 3 x $((n_prompt - 1))"
echo "ok: n = 4 greedy: four times '$want'; $shared prompt tokens copied, not computed"

# ---------------------------------------------------------------- seeds
two=$(complete "{\"prompt\": $prompt, \"max_tokens\": 10, \"temperature\": 1, \"seed\": 41,
	\"n\": 2}")
for i in 0 1; do
	own=$(complete "{\"prompt\": $prompt, \"max_tokens\": 10, \"temperature\": 1,
		\"seed\": $((41 + i))}")
	[ "$(jq -r ".choices[$i].text" <<<"$two")" = "$(jq -r '.choices[0].text' <<<"$own")" ] ||
		fail "choice $i is not seed $((41 + i))'s: $two / $own"
	[ "$(jq ".choices[$i].seed" <<<"$two")" = $((41 + i)) ] || fail "choice $i's seed: $two"
done
echo "ok: choice i samples with seed + i, and says so"

# ---------------------------------------------------------------- best_of
all=$(complete "{\"prompt\": $prompt, \"max_tokens\": 8, \"temperature\": 1, \"seed\": 7,
	\"n\": 3, \"logprobs\": 1}")
best=$(complete "{\"prompt\": $prompt, \"max_tokens\": 8, \"temperature\": 1, \"seed\": 7,
	\"n\": 1, \"best_of\": 3}")
top=$(jq -r '[.choices[] | {t: .text, s: (.logprobs.token_logprobs | add)}] | max_by(.s) | .t' \
	<<<"$all")
[ "$(jq '.choices | length' <<<"$best")" = 1 ] || fail "best_of 3, n 1: $best"
[ "$(jq -r '.choices[0].text' <<<"$best")" = "$top" ] ||
	fail "best_of did not return the likeliest of its samples ('$top'): $best / $all"
[ "$(jq '.usage.completion_tokens' <<<"$best")" = 24 ] || fail "best_of usage: $best"
echo "ok: best_of 3 returns the sample of the highest sum of logprobs"

# ---------------------------------------------------------------- a stream of two choices
chat='{"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 10,
	"temperature": 0, "n": 2, "stream": true}'
curl -sfN "${json[@]}" "$LM_URL/v1/chat/completions" -d "$chat" >"$dir/stream" ||
	fail "the stream failed"
plain=$(curl -sf "${json[@]}" "$LM_URL/v1/chat/completions" -d "$(jq -c '.stream = false | .n = 1' <<<"$chat")")
text=$(jq -r '.choices[0].message.content' <<<"$plain")
[ "$(tail -n 2 "$dir/stream" | head -n 1)" = "data: [DONE]" ] || fail "no [DONE]: $(tail -n 3 "$dir/stream")"
grep '^data: {' "$dir/stream" | sed 's/^data: //' >"$dir/chunks"
for i in 0 1; do
	got=$(jq -rj --argjson i "$i" 'select(.choices[0].index == $i) | .choices[0].delta.content // ""' \
		"$dir/chunks")
	[ "$got" = "$text" ] || fail "choice $i streamed '$got', the plain answer is '$text'"
	[ "$(jq -s --argjson i "$i" '[.[] | select(.choices[0].index == $i and .choices[0].delta.role == "assistant")] | length' "$dir/chunks")" = 1 ] ||
		fail "choice $i: not one role chunk"
	[ "$(jq -s --argjson i "$i" '[.[] | select(.choices[0].index == $i and .choices[0].finish_reason != null)] | length' "$dir/chunks")" = 1 ] ||
		fail "choice $i: not one finishing chunk"
done
echo "ok: a stream of n = 2 carries each choice's index; each is the plain answer '$text'"
curl -sfN "${json[@]}" "$LM_URL/v1/completions" -d "{\"prompt\": $prompt, \"max_tokens\": 12,
	\"temperature\": 0, \"n\": 3, \"stream\": true, \"logprobs\": 1,
	\"cache_prompt\": false}" | grep '^data: {' | sed 's/^data: //' >"$dir/cchunks" ||
	fail "the completions stream failed"
for i in 0 1 2; do
	got=$(jq -rj --argjson i "$i" 'select(.choices[0].index == $i) | .choices[0].text' \
		"$dir/cchunks")
	[ "$got" = "$want" ] || fail "completion choice $i streamed '$got', want '$want'"
done
[ "$(jq -s '[.[] | select(.usage != null)] | length' "$dir/cchunks")" = 1 ] &&
	[ "$(jq -s '[.[] | select(.usage != null)][0].usage.completion_tokens' "$dir/cchunks")" = 36 ] ||
	fail "the completions stream's usage: $(grep usage "$dir/cchunks")"
echo "ok: a completions stream of n = 3: each choice the greedy text, one usage of all 36 tokens"

# ---------------------------------------------------------------- limits
code=$(curl -s -o "$dir/r" -w '%{http_code}' "${json[@]}" "$LM_URL/v1/completions" \
	-d "{\"prompt\": $prompt, \"n\": 7}")
[ "$code" = 400 ] && jq -e '.error.param == "n"' "$dir/r" >/dev/null ||
	fail "n past the slots: HTTP $code $(cat "$dir/r")"
echo "ok: n past the slots: $(jq -r .error.message "$dir/r")"

# ---------------------------------------------------------------- /slots
curl -sf "$LM_URL/slots" >"$dir/slots" || fail "GET /slots"
jq -e 'length == 7 and all(.[]; .n_ctx == 256 and (.is_processing | not) and .id_task == -1)
	and ([.[] | .reserved] == [false, false, false, false, false, false, true])
	and ([.[] | .n_cached] | max) >= '"$((n_prompt - 1))" "$dir/slots" >/dev/null ||
	fail "/slots while idle: $(cat "$dir/slots")"
curl -sfN "${json[@]}" "$LM_URL/v1/completions" -d "{\"prompt\": $prompt, \"max_tokens\": 200,
	\"stream\": true}" >"$dir/long" &
long=$!
for _ in $(seq 100); do
	curl -sf "$LM_URL/slots" >"$dir/slots"
	jq -e 'any(.[]; .is_processing)' "$dir/slots" >/dev/null && break
	sleep 0.05
done
jq -e 'map(select(.is_processing)) | length == 1 and .[0].id_task > 0 and
	.[0].n_prompt_tokens == '"$n_prompt"' and .[0].state == "processing"' "$dir/slots" >/dev/null ||
	fail "/slots while a request runs: $(cat "$dir/slots")"
wait "$long"
echo "ok: /slots: $(jq -c '[.[] | {id, state, n_past, n_cached}]' "$dir/slots")"

# ---------------------------------------------------------------- a kill in a cached turn
# Two turns of a conversation; the second reuses the first's rows, and w1 is killed while it
# generates: its sequence is replayed from its history, and its answer is the one without the
# cache.
turn2() { # turn2 CACHE KILL: the second turn's token ids
	local ids='[1, 306, 763, 29871, 13, 1576, 278, 4799, 29889]' r
	r=$(complete "{\"prompt\": $ids, \"max_tokens\": 8, \"temperature\": 0,
		\"return_token_ids\": true, \"cache_prompt\": $1}")
	ids=$(jq -c --argjson a "$(jq -c .token_ids <<<"$r")" '. + $a + [4799, 278]' <<<"$ids")
	if [ "$2" = kill ]; then
		curl -sfN "${json[@]}" "$LM_URL/v1/completions" -d "{\"prompt\": $ids,
			\"max_tokens\": 120, \"temperature\": 0, \"return_token_ids\": true,
			\"stream\": true, \"cache_prompt\": true}" >"$dir/kill.stream" &
		local c=$!
		for _ in $(seq 200); do
			[ "$(grep -c '^data: {' "$dir/kill.stream")" -ge 3 ] && break
			sleep 0.02
		done
		kill -KILL "$(pgrep -f "layermesh-worker --name w1 .*$dir" | head -n 1)"
		wait "$c" || fail "the killed turn's stream failed"
		grep '^data: {' "$dir/kill.stream" | sed 's/^data: //' |
			jq -sc '[.[] | .token_ids // [] | .[]]'
		grep -q '"cached_tokens":[1-9]' "$dir/kill.stream" ||
			fail "the killed turn reused no rows: $(tail -n 3 "$dir/kill.stream")"
	else
		complete "{\"prompt\": $ids, \"max_tokens\": 120, \"temperature\": 0,
			\"return_token_ids\": true, \"cache_prompt\": false}" | jq -c .token_ids
	fi
}
off=$(turn2 false keep)
on=$(turn2 true kill)
[ "$on" = "$off" ] || fail "the turn killed in the middle answered $on, without the cache $off"
lm_ready_wait "$LM_URL" 30 >/dev/null || fail "the mesh did not come back"
[ "$(metric layermesh_replays_total)" -ge 1 ] || fail "no replay counted"
echo "ok: a worker killed in a cached turn: replayed, the same $(jq length <<<"$on") tokens"

# n = 4 with w0 killed while the samples decode: their copied rows are rebuilt by the replay
# as any sequence's, and each choice is still the request of its own.
long1=$(complete "{\"prompt\": $prompt, \"max_tokens\": 100, \"temperature\": 0,
	\"cache_prompt\": false}" | jq -r '.choices[0].text')
replays0=$(metric layermesh_replays_total)
curl -sfN "${json[@]}" "$LM_URL/v1/completions" -d "{\"prompt\": $prompt, \"max_tokens\": 100,
	\"temperature\": 0, \"n\": 4, \"stream\": true, \"cache_prompt\": false}" >"$dir/n4kill" &
c=$!
for _ in $(seq 200); do
	[ "$(grep -c '^data: {' "$dir/n4kill")" -ge 8 ] && break
	sleep 0.02
done
kill -KILL "$(pgrep -f "layermesh-worker --name w0 .*$dir" | head -n 1)"
wait "$c" || fail "the stream of n = 4 failed after the kill"
grep '^data: {' "$dir/n4kill" | sed 's/^data: //' >"$dir/n4chunks"
for i in 0 1 2 3; do
	got=$(jq -rj --argjson i "$i" 'select(.choices[0].index == $i) | .choices[0].text' \
		"$dir/n4chunks")
	[ "$got" = "$long1" ] || fail "after the kill, choice $i streamed '$got', want '$long1'"
done
[ "$(metric layermesh_replays_total)" -gt "$replays0" ] || fail "the kill replayed nothing"
lm_ready_wait "$LM_URL" 30 >/dev/null || fail "the mesh did not come back"
echo "ok: n = 4 with a worker killed while it decodes: replayed, each choice the greedy text"

# ---------------------------------------------------------------- sliding windows
# gemma3 with a window of 8 (max_batch 8: each ring keeps 8 + 7 rows, a rollback of at most 8
# once it has wrapped). Every answer is the one cache_prompt false gives:
#   - a conversation's next turn reuses its rows (nothing rolled back);
#   - a prompt that shares only the start of a slot whose rings wrapped reuses nothing;
#   - one that rolls back a few rows reuses them, and so does one that rolls back far in rings
#     that have not wrapped;
#   - n = 2 copies the rings with the rows, and both choices are the request of its own.
lm_down "$dir"
swa="$dir/gemma3.gguf"
"$LM_BIN" synth --out "$swa" --arch gemma3 --head-dim 32 --window 8 --swa-period 3 --dim 128 \
	--layers 4 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 --type f32 --seed 5 >/dev/null
mkdir -p "$dir/swa"
LM_SLOTS=4 LM_MAX_SEQ=128 LM_MAX_BATCH=8 lm_mesh_toml "$dir/swa/mesh.toml" "$swa" ipc \
	"$(lm_port)" 0:2 2:4
lm_up "$dir/swa/mesh.toml" "$dir/swa/up.log"
ask() { # ask IDS CACHE [N]: the choices' ids and the cached count, one JSON line (no BOS or
	# EOS, the synthetic vocabulary's 1 and 2, ends an answer early)
	complete "{\"prompt\": $1, \"max_tokens\": 10, \"temperature\": 0, \"n\": ${3:-1},
		\"return_token_ids\": true, \"cache_prompt\": $2,
		\"logit_bias\": {\"1\": -100, \"2\": -100}}" |
		jq -c '[(if .choices[0].token_ids then [.choices[].token_ids] else [.token_ids] end),
			.usage.prompt_tokens_details.cached_tokens]'
}
same() { # same IDS WHAT: the answer with the cache is the one without; prints the cached count
	local on off
	on=$(ask "$1" true)
	off=$(ask "$1" false)
	[ "$(jq -c '.[0]' <<<"$on")" = "$(jq -c '.[0]' <<<"$off")" ] ||
		fail "$2: with the cache $on, without $off"
	jq '.[1]' <<<"$on"
}
ids='[3, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]'
same "$ids" "turn 1" >/dev/null
turn=$(ask "$ids" true)
[ "$(jq '.[0][0] | length' <<<"$turn")" = 10 ] || fail "turn 1 ended early: $turn"
ids2=$(jq -c --argjson a "$turn" '. + $a[0][0] + [60, 61]' <<<"$ids")
c2=$(same "$ids2" "turn 2")
[ "$c2" = 21 ] || fail "turn 2 reused $c2 rows, want its whole history (21)"
early=$(jq -c '.[0:5] + [90, 91, 92]' <<<"$ids2")
c3=$(same "$early" "a prompt sharing the start of wrapped rings")
[ "$c3" = 0 ] || fail "a prompt sharing 5 rows of a wrapped ring reused $c3"
turn2=$(ask "$ids2" true)
near=$(jq -c --argjson a "$turn2" '. + $a[0][0][0:6] + [93, 94]' <<<"$ids2")
c4=$(same "$near" "a rollback of a few rows")
[ "$c4" = $(($(jq length <<<"$ids2") + 6)) ] || fail "a rollback of a few rows reused $c4 rows"
# Rings written to 15 rows, their size, have lost nothing: a rollback of 12 rows is reused.
short='[3, 40, 41, 42, 43, 44]'
ask "$short" true >/dev/null
c5=$(same '[3, 40, 41, 99, 98]' "a rollback in rings that have not wrapped")
[ "$c5" = 3 ] || fail "a rollback in rings that have not wrapped reused $c5 rows, want 3"
[ "$(metric layermesh_ring_errors_total)" = 0 ] || fail "a worker refused a reuse"
single=$(ask "$ids" false)
two=$(ask "$ids" false 2)
[ "$(jq -c '.[0][0]' <<<"$single")" = "$(jq -c '.[0][0]' <<<"$two")" ] &&
	[ "$(jq -c '.[0][1]' <<<"$two")" = "$(jq -c '.[0][0]' <<<"$single")" ] ||
	fail "n = 2 on sliding layers: $two, the request of its own $single"
echo "ok: sliding windows: turn 2 reused $c2 rows, a wrapped ring's start 0, a short rollback $c4, one in unwrapped rings $c5; n = 2 equals the single answer"

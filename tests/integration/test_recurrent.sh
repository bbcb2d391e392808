#!/usr/bin/env bash
# Recurrent state through everything that moves a sequence, on real 3-worker meshes of a
# synthetic qwen35 (7 layers: odd ones attend, even ones are gated delta-nets; the fence
# [0,2) [2,5) [5,7) cuts after an attention and after a recurrent layer), its vocabulary
# stories260K's so that n-gram drafts find repeats:
#   1. speculative decoding, n-gram and draft model (its own q8_0 copy): greedy requests are
#      identical with speculation on and off (`layermesh run` does not speculate), and every
#      rejected draft rolls each stage's delta-net states back to a kept one (no sequence is
#      refused and replayed);
#   2. workers killed with SIGKILL while speculating requests run: the replays rebuild each
#      sequence's states from position 0 and every request ends as without faults;
#   3. a rolling redeploy under load: each moved sequence's conv rings and SSM states travel
#      with its KV rows and are read back and compared before the switch; outputs identical;
#   4. n = 3 over COPY, each choice the greedy text;
#   5. the prefix cache: a conversation's turns reuse the last turn's slot where a stage can
#      return to its state, a diverging prompt and a turn after a kill reuse nothing, and every
#      answer is that of cache_prompt false.
# Outputs are compared as token ids (--ids).
source "$(dirname "$0")/lib.sh"

stories="$LM_SHARED/models/stories260K.gguf"
model="$LM_TMP/qwen35.gguf"
"$LM_BIN" synth --out "$model" --arch qwen35 --full-attn-every 2 --dim 256 --layers 7 \
	--heads 8 --kv-heads 2 --ffn 512 --vocab-from "$stories" --type f32 --seed 5 \
	>/dev/null || fail "synth qwen35"
"$LM_BIN" quantize --in "$model" --out "$LM_TMP/draft.gguf" --type q8_0 >/dev/null ||
	fail "layermesh quantize"
draft="draft_model = \"$LM_TMP/draft.gguf\"\nmax_draft = 4\nmax_streams = 0\n"
prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!")
for i in 0 1 2 3; do
	"$LM_BIN" run --model "$model" --prompt "${prompts[$i]}" --temp 0 -n 80 --ctx 256 --ids \
		>"$LM_TMP/solo.$i" 2>/dev/null || fail "run $i"
done
worker_pid() { pgrep -f "layermesh-worker --name $1 .*$2" | head -n 1; }
metric() { curl -sf "$LM_URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }

# up NAME SPEC_TOML: a mesh of the model with the [speculative] table.
up() {
	dir="$LM_TMP/$1"
	mkdir -p "$dir"
	LM_MAX_SEQ=256 LM_MAX_BATCH=16 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" \
		0:2 2:5 5:7
	printf '\n[speculative]\n%b' "$2" >>"$dir/mesh.toml"
	lm_up "$dir/mesh.toml" "$dir/up.log"
}

# requests NAME: 8 greedy requests at once (each prompt twice), in the background; pids.
requests() {
	pids=()
	local i
	for i in $(seq 0 7); do
		"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$((i % 4))]}" --temp 0 -n 80 \
			--ids --timeout 120 >"$dir/mesh.$i" 2>"$dir/mesh.$i.err" &
		pids+=($!)
	done
}

# check NAME: every request succeeded and equals the run without speculation or faults.
check() {
	local i
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "$1: request $i failed: $(cat "$dir/mesh.$i.err")"
	done
	for i in "${!pids[@]}"; do
		cmp -s "$LM_TMP/solo.$((i % 4))" "$dir/mesh.$i" || {
			diff "$LM_TMP/solo.$((i % 4))" "$dir/mesh.$i" >&2 || true
			fail "$1: request $i differs from the run without speculation"
		}
	done
}

# ---------------------------------------------------------------- 1. speculation
for source in ngram draft; do
	if [ $source = ngram ]; then spec='source = "ngram"\nmax_draft = 4\nmax_streams = 0\n'; else spec=$draft; fi
	up "spec-$source" "$spec"
	requests
	check "spec-$source"
	drafted=$(metric layermesh_spec_drafted_tokens_total)
	accepted=$(metric layermesh_spec_accepted_tokens_total)
	[ "${drafted:-0}" -gt 0 ] || fail "spec-$source: nothing was drafted"
	[ $source = ngram ] || [ "${accepted:-0}" -gt 0 ] || fail "spec-$source: no draft accepted"
	[ "${accepted:-0}" -lt "${drafted:-0}" ] || fail "spec-$source: no draft was rejected"
	# Every rejected draft rolled back to a state a stage kept: none was refused and replayed.
	replays=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.replays')
	[ "$replays" = 0 ] || fail "spec-$source: $replays sequences were replayed from 0"
	echo "ok: spec $source: 8 requests identical; $drafted drafted, $accepted accepted"
	lm_down "$dir"
done

# ---------------------------------------------------------------- 2. workers killed
up faults "$draft"
requests
kills=0
for w in w1 w2 w0; do
	sleep 0.4
	pid=$(worker_pid "$w" "$dir") || true
	[ -n "$pid" ] || continue
	kill -KILL "$pid" && kills=$((kills + 1))
done
check faults
replays=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.replays')
[ "$kills" -ge 2 ] || fail "only $kills workers were killed"
echo "ok: $kills workers killed, $replays sequences replayed, 8 requests identical"
lm_down "$dir"

# ---------------------------------------------------------------- 3. rolling redeploy
# Eight clients each send request after request (at most 40) until the redeploy has ended, so
# that sequences are under way at every worker's switch, however long the redeploy takes here.
up redeploy "$draft"
pids=()
for i in $(seq 0 7); do
	(
		n=0
		while [ ! -e "$dir/rd.done" ] && ((n < 40)); do
			"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$((i % 4))]}" --temp 0 -n 80 \
				--ids --timeout 120 >"$dir/rd.$i.$n" 2>"$dir/rd.$i.$n.err" || exit 1
			n=$((n + 1))
		done
	) &
	pids+=($!)
done
sleep 0.5
"$LM_BIN" redeploy --url "$LM_URL" --all >"$dir/rd.out" 2>&1 || fail "redeploy: $(cat "$dir/rd.out")"
touch "$dir/rd.done"
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || fail "redeploy: client $i's request failed: $(cat "$dir"/rd.$i.*.err)"
done
st=$(curl -sf "$LM_URL/v1/admin/redeploy")
moved=$(jq '.moved_sequences' <<<"$st")
for f in "$dir"/rd.[0-7].*; do
	case $f in *.err) continue ;; esac
	i=${f#"$dir"/rd.}
	i=${i%%.*}
	cmp -s "$LM_TMP/solo.$((i % 4))" "$f" || fail "redeploy: $f differs from the run without speculation"
done
[ "$moved" -gt 0 ] || fail "the redeploy moved no sequence's state"
served=$(find "$dir" -name 'rd.[0-7].*' ! -name '*.err' | wc -l)
echo "ok: a redeploy under load moved $moved sequences' states ($(jq '.moved_kv_bytes' <<<"$st") bytes, read back bit for bit), $served requests identical"
lm_down "$dir"
# ---------------------------------------------------------------- 4. parallel samples
# (and /v1/status names each worker's layers by kind, as the mesh page draws them)
# n = 3 shares one prefill by COPY: a recurrent state copies only at the source's own length,
# else the stage refuses and the sample is computed from 0. Either way each greedy choice is
# the single request's text.
up samples ""
body='{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0'
curl -sf "$LM_URL/v1/completions" -d "$body}" >"$dir/one" || fail "samples: the single request failed"
curl -sf "$LM_URL/v1/completions" -d "$body, \"n\": 3}" >"$dir/three" ||
	fail "samples: the n = 3 request failed"
kinds=$(curl -sf "$LM_URL/v1/status" | jq -c '[.workers[].layer_kinds[]] | unique')
[ "$kinds" = '["global","recurrent"]' ] || fail "layer_kinds: $kinds, not global and recurrent"
one=$(jq -r '.choices[0].text' "$dir/one")
[ "$(jq '.choices | length' "$dir/three")" = 3 ] || fail "samples: not 3 choices: $(cat "$dir/three")"
for i in 0 1 2; do
	[ "$(jq -r ".choices[$i].text" "$dir/three")" = "$one" ] ||
		fail "samples: choice $i differs from the single request"
done
echo "ok: n = 3 on recurrent layers, each choice the greedy text ($(metric layermesh_prompt_tokens_shared_total) prompt tokens shared)"
lm_down "$dir"

# ---------------------------------------------------------------- 5. the prefix cache
# A recurrent stage returns only to the live state after a slot's last batch or to a state it
# kept (docs/recurrent-cache.md, "Prefix reuse"): a turn whose prompt extends all the last one
# held (its prompt and answer, as token ids) reuses it, at exactly that length; a prompt that
# leaves it mid-way reuses nothing (a llama would reuse the common part). The draft model
# speculates, so a turn's last batch may be a verify batch that the next turn's reuse rolls back
# into. Every answer and logprob is that of cache_prompt false. A worker killed before the fourth
# turn took its states with it: that turn is computed from 0, and answers the same.
up prefix "$draft"
turn() { # turn IDS CACHE: the answer's ids, its logprobs, its cached tokens, its prompt length
	local r
	r=$(curl -sf "$LM_URL/v1/completions" -d "{\"prompt\": $1, \"max_tokens\": 8,
		\"temperature\": 0, \"logprobs\": 1, \"return_token_ids\": true, \"cache_prompt\": $2}") ||
		fail "prefix: a turn failed: $1"
	jq -c '[.token_ids, .choices[0].logprobs.token_logprobs,
		.usage.prompt_tokens_details.cached_tokens, .usage.prompt_tokens]' <<<"$r"
}
conversation() { # conversation CACHE: four turns, one JSON line each; w1 killed before the 4th
	local ids='[1, 400, 260, 300, 13, 380, 278, 290]' out i
	for i in 1 2 3 4; do
		if [ "$i" = 4 ] && [ "$1" = true ]; then
			replays=$(curl -sf "$LM_URL/v1/status" | jq '.scheduler.replays')
			[ "$replays" = 0 ] || fail "prefix: $replays sequences replayed before the kill"
			kill -KILL "$(worker_pid w1 "$dir")"
			sleep 0.3
			lm_ready_wait "$LM_URL" 30 >/dev/null || fail "prefix: the mesh did not come back"
		fi
		out=$(turn "$ids" "$1")
		echo "$out"
		ids=$(jq -c --argjson a "$out" '. + $a[0] + [300, 278]' <<<"$ids")
	done
	echo "$ids" >"$dir/ids.$1"
}
conversation true >"$dir/conv.on"
# The fourth turn's prompt, left after its first 12 tokens.
diverge=$(jq -c '.[0:12] + [420, 421, 422, 423, 424]' "$dir/ids.true")
status() { curl -sf "$LM_URL/v1/status" | jq -c '[.scheduler.replays, .scheduler.ring_errors]'; }
before=$(status)
div_on=$(turn "$diverge" true)
[ "$(status)" = "$before" ] ||
	fail "prefix: the diverging prompt was offered rows a stage refused: $before, then $(status)"
conversation false >"$dir/conv.off"
div_off=$(turn "$diverge" false)
cmp -s <(jq -c '.[0:2]' "$dir/conv.off") <(jq -c '.[0:2]' "$dir/conv.on") ||
	fail "prefix: the cache changed the answers: $(cat "$dir/conv.off" "$dir/conv.on")"
cached=$(jq -c '.[2]' "$dir/conv.on" | tr '\n' ' ')
# Turns 2 and 3 reuse all the last turn computed: its prompt and its answer but the last
# token, which was sampled and never fed back (an answer cut by a stop id fed all of its own).
held='def held: .[3] + (.[0] | length) - (if (.[0] | length) == 8 then 1 else 0 end);'
[ "$(jq -s "$held"' .[1][2] == (.[0] | held) and .[2][2] == (.[1] | held) and .[0][2] == 0 and
	.[3][2] == 0' "$dir/conv.on")" = true ] ||
	fail "prefix: cached tokens per turn $cached (want 0, the last turn's rows twice, 0 after the kill)"
[ "$(jq -s '[.[] | .[2]] | add' "$dir/conv.off")" = 0 ] || fail "prefix: cache_prompt false reused rows"
[ "$(jq -c '.[0:2]' <<<"$div_on")" = "$(jq -c '.[0:2]' <<<"$div_off")" ] ||
	fail "prefix: the diverging prompt's answer changed: $div_on / $div_off"
[ "$(jq '.[2]' <<<"$div_on")" = 0 ] ||
	fail "prefix: a prompt that leaves the slot's tokens mid-way reused $(jq '.[2]' <<<"$div_on") rows"
echo "ok: prefix cache on recurrent layers: cached tokens per turn $cached, 0 for a prompt that diverges mid-way, 0 after a kill; answers and logprobs those of cache_prompt false ($(metric layermesh_spec_drafted_tokens_total) drafted, $(metric layermesh_spec_accepted_tokens_total) accepted)"
lm_down "$dir"
echo "ok: recurrent state"

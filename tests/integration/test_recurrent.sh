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
#      with its KV rows and are read back and compared before the switch; outputs identical.
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
up redeploy "$draft"
requests
sleep 0.5
"$LM_BIN" redeploy --url "$LM_URL" --all >"$dir/rd.out" 2>&1 || fail "redeploy: $(cat "$dir/rd.out")"
st=$(curl -sf "$LM_URL/v1/admin/redeploy")
moved=$(jq '.moved_sequences' <<<"$st")
check redeploy
[ "$moved" -gt 0 ] || fail "the redeploy moved no sequence's state"
echo "ok: a redeploy under load moved $moved sequences' states ($(jq '.moved_kv_bytes' <<<"$st") bytes, read back bit for bit), 8 requests identical"
lm_down "$dir"
# ---------------------------------------------------------------- 4. parallel samples
# n = 3 shares one prefill by COPY: a recurrent state copies only at the source's own length,
# else the stage refuses and the sample is computed from 0. Either way each greedy choice is
# the single request's text.
up samples ""
body='{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0'
curl -sf "$LM_URL/v1/completions" -d "$body}" >"$dir/one" || fail "samples: the single request failed"
curl -sf "$LM_URL/v1/completions" -d "$body, \"n\": 3}" >"$dir/three" ||
	fail "samples: the n = 3 request failed"
one=$(jq -r '.choices[0].text' "$dir/one")
[ "$(jq '.choices | length' "$dir/three")" = 3 ] || fail "samples: not 3 choices: $(cat "$dir/three")"
for i in 0 1 2; do
	[ "$(jq -r ".choices[$i].text" "$dir/three")" = "$one" ] ||
		fail "samples: choice $i differs from the single request"
done
echo "ok: n = 3 on recurrent layers, each choice the greedy text ($(metric layermesh_prompt_tokens_shared_total) prompt tokens shared)"
lm_down "$dir"
echo "ok: recurrent state"

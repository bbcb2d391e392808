#!/usr/bin/env bash
# Speculative decoding through real 3-worker meshes: a greedy request's tokens are identical
# with speculation on and off (`layermesh run` is the reference: it does not speculate), and so
# are a seeded request's, for both draft sources:
#   1. stories260K, n-gram lookup;
#   2. stories260K, its own q8_0 copy as the draft model (`layermesh quantize`);
#   3. a synthetic Gemma 4 with a small window (8) and rings of window + max_batch - 1 = 15
#      rows, with either source, so rejected drafts overwrite ring rows the next step must not
#      need;
#   4. that Gemma 4 with a quantized cache (q8_0 K / q5_1 V on the sliding layers, fp8 on the
#      global ones) and its draft model, across two rolling redeploys under load: the KV
#      migration moves the quantized rows (and the rings' high-water marks) as they are, and
#      every request ends as `layermesh run --ctk fp8 --ctv fp8 --ctk-swa q8_0 --ctv-swa q5_1`
#      ends it.
# Requests run concurrently, so speculating and non-speculating sequences (those without an
# n-gram match, and those sent with "speculate": false) share batches. /metrics must show the
# drafted and accepted tokens. Outputs are compared as token ids (--ids): a random model's text
# may hold a NUL byte, which `run` prints and JSON does not carry.
source "$(dirname "$0")/lib.sh"

stories="$LM_SHARED/models/stories260K.gguf"
"$LM_BIN" quantize --in "$stories" --out "$LM_TMP/stories-q8.gguf" --type q8_0 ||
	fail "layermesh quantize"
gemma="$LM_TMP/gemma4.gguf"
"$LM_BIN" synth --out "$gemma" --arch gemma4 --head-dim 64 --head-dim-swa 32 --kv-heads-swa 4 \
	--window 8 --swa-period 3 --dim 256 --layers 6 --heads 8 --kv-heads 2 --ffn 512 \
	--vocab 512 --type f32 --seed 7 --vocab-from "$stories" >/dev/null
"$LM_BIN" quantize --in "$gemma" --out "$LM_TMP/gemma4-q8.gguf" --type q8_0 ||
	fail "layermesh quantize"

prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!" "The dog ran"
	"One day" "She saw a bird" "The sun was hot")

# metric NAME: its value on the mesh's /metrics.
metric() {
	curl -sf "$LM_URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# run_case NAME MODEL N_TOKENS SPEC_TOML RUN_ARGS... : a mesh of MODEL with the [speculative]
# table SPEC_TOML; 8 greedy and 4 seeded requests at once, each compared with `layermesh run`.
run_case() {
	local name=$1 model=$2 n=$3 spec=$4
	shift 4
	local dir="$LM_TMP/$name" i
	mkdir -p "$dir"
	lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:$LM_LAYERS
	printf '\n[speculative]\n%b' "$spec" >>"$dir/mesh.toml"
	lm_up "$dir/mesh.toml" "$dir/up.log"
	local args=() pids=()
	for i in $(seq 0 11); do
		if ((i < 8)); then args+=("--temp 0"); else args+=("--temp 0.8 --seed $i"); fi
	done
	for i in "${!args[@]}"; do
		# shellcheck disable=SC2086
		"$LM_BIN" run --model "$model" --prompt "${prompts[$((i % 8))]}" -n "$n" --ctx 256 \
			${args[$i]} --ids "$@" >"$dir/solo.$i" 2>/dev/null
	done
	for i in "${!args[@]}"; do
		# shellcheck disable=SC2086
		"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$((i % 8))]}" -n "$n" \
			${args[$i]} --ids --timeout 120 >"$dir/mesh.$i" 2>"$dir/mesh.$i.err" &
		pids+=($!)
	done
	# One more that does not speculate, beside the others.
	curl -sf -H "Content-Type: application/json" "$LM_URL/v1/completions" -d "{\"prompt\": \"${prompts[0]}\", \"max_tokens\": $n, \
\"temperature\": 0, \"speculate\": false}" >"$dir/plain.json" || fail "$name: a request with speculate false"
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "$name: request $i failed: $(cat "$dir/mesh.$i.err")"
	done
	for i in "${!args[@]}"; do
		cmp -s "$dir/solo.$i" "$dir/mesh.$i" || {
			diff "$dir/solo.$i" "$dir/mesh.$i" >&2 || true
			fail "$name: request $i (${args[$i]}) differs from the run without speculation"
		}
	done
	local drafted accepted batches
	drafted=$(metric layermesh_spec_drafted_tokens_total)
	accepted=$(metric layermesh_spec_accepted_tokens_total)
	batches=$(metric layermesh_batches_total)
	[ "${drafted:-0}" -gt 0 ] || fail "$name: nothing was drafted"
	# A draft model agrees with its model often; n-gram lookup only where a text repeats,
	# which a random model's may not do (its drafts are then all rejected and rolled back).
	case $spec in
	*draft_model*) [ "${accepted:-0}" -gt 0 ] || fail "$name: no draft was accepted" ;;
	esac
	echo "$name: 13 requests identical; $drafted drafted, $accepted accepted ($((100 * accepted / drafted))%), $batches batches"
	lm_down "$dir"
}

# max_streams = 0: every one of the concurrent requests may draft, so that speculating and
# plain sequences share batches (the default stops drafting past 4 sequences).
LM_LAYERS=5 LM_MAX_SEQ=256 run_case stories-ngram "$stories" 200 \
	'source = "ngram"\nmax_draft = 4\nmax_streams = 0\n'
LM_LAYERS=5 LM_MAX_SEQ=256 run_case stories-draft "$stories" 200 \
	"draft_model = \"$LM_TMP/stories-q8.gguf\"\nmax_draft = 4\nmax_streams = 0\n"
# Rings of 8 + 8 - 1 rows: a batch of 8 tokens at most, drafts of up to 4.
LM_LAYERS=6 LM_MAX_SEQ=256 LM_MAX_BATCH=8 run_case gemma4-ngram "$gemma" 120 \
	'source = "ngram"\nmax_draft = 4\nmax_streams = 0\n'
LM_LAYERS=6 LM_MAX_SEQ=256 LM_MAX_BATCH=8 run_case gemma4-draft "$gemma" 120 \
	"draft_model = \"$LM_TMP/gemma4-q8.gguf\"\nmax_draft = 4\nmax_streams = 0\n"

# ---------------------------------------------------------------- 4. quantized, redeployed
dir="$LM_TMP/quant-redeploy"
mkdir -p "$dir/load"
# max_batch 16: the redeploy's probe prompt (10 tokens) goes in one batch; rings of 23 rows.
LM_MAX_SEQ=256 LM_MAX_BATCH=16 LM_SLOTS=16 LM_KV_TYPE_K=fp8 LM_KV_TYPE_V=fp8 \
	LM_KV_TYPE_K_SWA=q8_0 LM_KV_TYPE_V_SWA=q5_1 \
	lm_mesh_toml "$dir/mesh.toml" "$gemma" ipc "$(lm_port)" 0:2 2:4 4:6
printf '\n[speculative]\ndraft_model = "%s"\nmax_draft = 4\nmax_streams = 0\n' "$LM_TMP/gemma4-q8.gguf" \
	>>"$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up.log"
kv=(--ctk fp8 --ctv fp8 --ctk-swa q8_0 --ctv-swa q5_1)
for i in "${!prompts[@]}"; do
	"$LM_BIN" run --model "$gemma" --prompt "${prompts[$i]}" --temp 0 -n 160 --ctx 256 "${kv[@]}" \
		--ids >"$dir/solo.$i" 2>/dev/null
done
load() { # rounds of 16 concurrent greedy requests until told to stop (at most 40)
	local round k
	for ((round = 0; round < 40; round++)); do
		[ -f "$dir/stop" ] && break
		local pids=()
		for k in $(seq 0 15); do
			"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$((k % 8))]}" --temp 0 \
				-n 160 --ids --timeout 60 >"$dir/load/$round.$k" \
				2>"$dir/load/$round.$k.err" &
			pids+=($!)
		done
		for k in "${!pids[@]}"; do
			wait "${pids[$k]}" || echo "$round.$k" >>"$dir/load/failed"
		done
		echo "$round" >"$dir/load/rounds"
	done
}
load &
LM_PIDS+=($!)
loader=$!
wait_round() {
	local target=$(($(cat "$dir/load/rounds" 2>/dev/null || echo -1) + 1)) i
	for ((i = 0; i < 600; i++)); do
		[ "$(cat "$dir/load/rounds" 2>/dev/null || echo -1)" -ge "$target" ] && return 0
		sleep 0.1
	done
	fail "the load stopped making progress"
}
wait_round
moved=0 moved_bytes=0
for args in "--all" "--all --batch 2"; do
	# shellcheck disable=SC2086 # the arguments are words
	"$LM_BIN" redeploy --url "$LM_URL" $args >"$dir/rd.out" 2>&1 || fail "redeploy: $(cat "$dir/rd.out")"
	st=$(curl -sf "$LM_URL/v1/admin/redeploy")
	moved=$((moved + $(jq '.moved_sequences' <<<"$st")))
	moved_bytes=$((moved_bytes + $(jq '.moved_kv_bytes' <<<"$st")))
	wait_round
done
# Each moved slot was read back from the new process and compared byte for byte with what the
# old one exported (fp8, q8_0 and q5_1 rows): a redeploy that prefilled the sequences again
# instead would move none.
[ "$moved" -gt 0 ] || fail "the redeploys moved no sequence's KV rows"
touch "$dir/stop"
wait "$loader" || true
[ ! -f "$dir/load/failed" ] || fail "requests failed across the redeploys: $(head -3 "$dir/load/failed")"
bad=0 n=0
for f in "$dir"/load/*.*; do
	case "$f" in *.err) continue ;; esac
	n=$((n + 1))
	k=${f##*.}
	cmp -s "$f" "$dir/solo.$((k % 8))" || { bad=$((bad + 1)); echo "differs: $f" >&2; }
done
[ "$bad" -eq 0 ] || fail "$bad of $n outputs differ from the run without speculation or redeploys"
pause=$(curl -sf "$LM_URL/v1/admin/redeploy" | jq '.max_pause_ms')
echo "quantized mesh: 2 redeploys of 3 workers under load (longest pause $pause ms;" \
	"$moved sequences' KV moved, $moved_bytes bytes, read back bit for bit), $n" \
	"requests identical; $(metric layermesh_spec_drafted_tokens_total) drafted," \
	"$(metric layermesh_spec_accepted_tokens_total) accepted"
lm_down "$dir"
echo "ok: speculation"

#!/usr/bin/env bash
# Each worker holds its own slice: its KV bytes are exactly the formula for its layers, in the
# cache types of mesh.toml, and its peak resident memory (VmHWM, after a request has run through
# it) is bounded by its slice's planned bytes plus 16 MiB, for every cache type, far below the
# whole model's. Then the same bound at the mission's shape, in its CI form: a synthetic Gemma 4
# of 60 layers (50 sliding of 16 KV heads x 256, 10 global of 4 x 512) with the real Gemma 4
# vocabulary of 262,144 tokens, over 20 workers of 3 layers, after load, speculation and a
# redeploy under load; and a worker resident past its memory_limit refuses its slice, saying
# both figures. Mixture-of-experts slices (qwen3moe, gemma4 with experts; gpt-oss with MXFP4
# experts) and a recurrent one (qwen35, its states kept for rollback included) are held to the
# same bound.
source "$(dirname "$0")/lib.sh"

# 8 layers of about 12.6 MB each (f32, dim 512, ffn 1536, 4 KV heads of 64): a 100 MB model.
model="$LM_TMP/big.gguf"
"$LM_BIN" synth --out "$model" --dim 512 --layers 8 --heads 8 --kv-heads 4 --ffn 1536 \
	--vocab 512 --type f32 --seed 3 --vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null
model_bytes=$(stat -c %s "$model")

# Bytes of one position's K or V row of 4 heads x 64 of each type.
row_bytes() {
	case $1 in
	f32) echo 1024 ;; f16 | bf16) echo 512 ;; fp8) echo 256 ;; q8_0) echo 272 ;;
	q5_1) echo 192 ;; q4_0) echo 144 ;;
	esac
}

slack=$((16 * 1024 * 1024)) # binary, libraries, NNG's threads, allocator arenas
# Under AddressSanitizer its shadow memory and the quarantine of freed blocks are resident too
# (measured: w0 of f32 at planned + 19 MiB); the normal build holds the 16 MiB. The same extra
# goes on the bound of half the model's bytes.
[ "$LM_ASAN" = 0 ] || slack=$((48 * 1024 * 1024))
for pair in f32:f32 f16:f16 bf16:bf16 q8_0:q8_0 q5_1:q5_1 q4_0:q4_0 fp8:fp8 q8_0:q5_1; do
	k=${pair%%:*} v=${pair##*:}
	dir="$LM_TMP/mesh-$k-$v"
	mkdir -p "$dir"
	LM_MAX_SEQ=128 LM_SLOTS=4 LM_KV_TYPE_K=$k LM_KV_TYPE_V=$v \
		lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:6 6:8
	lm_up "$dir/mesh.toml" "$dir/up.log"
	"$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time" -n 64 --temp 0 >/dev/null ||
		fail "K $k V $v: a request failed"
	status=$(curl -sf "$LM_URL/v1/status")
	# Per layer: 128 positions x (4 slots + 1 kept for probes) x (K row + V row).
	per_layer=$((128 * 5 * ($(row_bytes "$k") + $(row_bytes "$v"))))
	worst=0
	for j in 0 1 2 3; do
		w=$(jq ".workers[$j]" <<<"$status")
		kv=$(jq '.kv_bytes' <<<"$w")
		[ "$kv" -eq $((2 * per_layer)) ] ||
			fail "K $k V $v: w$j reports $kv bytes of KV; its 2 layers need $((2 * per_layer))"
		planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
		pid=$(jq '.pid' <<<"$w")
		peak=$(($(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status") * 1024))
		over=$((peak - planned))
		[ "$over" -gt "$worst" ] && worst=$over
		[ "$peak" -le $((planned + slack)) ] ||
			fail "K $k V $v: w$j peaked at $peak bytes; its slice plans $planned (+ $slack allowed)"
		[ "$peak" -lt $((model_bytes / 2 + slack - 16 * 1024 * 1024)) ] ||
			fail "K $k V $v: w$j peaked at $peak bytes, not far from the whole model's $model_bytes"
	done
	echo "K $k V $v: KV $((2 * per_layer)) bytes a worker; peak resident at most planned + $((worst / 1024)) KiB"
	lm_down "$dir"
done
echo "every worker holds its slice and no more, in every cache type"

# ---------------------------------------------------------------- a mixture of experts
# qwen3moe, 8 layers of 16 experts (2 per token) of width 512, q8_0: a layer's bytes are all its
# experts (16 x 3 x 512 x 512 in q8_0, about 13.4 MB), and a worker's peak stays within its plan
# after a request that routes through many of them. gemma4 with the same experts beside each
# layer's shared FFN (Gemma 4 26B-A4B's layout), likewise.
moe_shape() {
	case $1 in
	qwen3moe) echo "--arch qwen3moe" ;;
	gemma4) echo "--arch gemma4 --head-dim 64 --window 32 --swa-period 4" ;;
	esac
}
for arch in qwen3moe gemma4; do
	moe="$LM_TMP/moe-$arch.gguf"
	# shellcheck disable=SC2046
	"$LM_BIN" synth --out "$moe" $(moe_shape $arch) --dim 512 --layers 8 --heads 8 \
		--kv-heads 4 --ffn 1536 --ffn-exp 512 --experts 16 --experts-used 2 --vocab 512 \
		--type q8_0 --seed 3 --vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null
	moe_bytes=$(stat -c %s "$moe")
	dir="$LM_TMP/mesh-moe-$arch"
	mkdir -p "$dir"
	LM_MAX_SEQ=128 LM_SLOTS=4 lm_mesh_toml "$dir/mesh.toml" "$moe" ipc "$(lm_port)" 0:2 2:4 4:6 6:8
	lm_up "$dir/mesh.toml" "$dir/up.log"
	"$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time" -n 64 --temp 0 >/dev/null ||
		fail "$arch: a request failed"
	status=$(curl -sf "$LM_URL/v1/status")
	worst=0
	for j in 0 1 2 3; do
		planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
		weights=$(jq ".plan.workers[$j].weight_bytes" <<<"$status")
		[ "$weights" -gt $((2 * 12 * 1024 * 1024)) ] ||
			fail "$arch: w$j plans $weights bytes of weights, fewer than its 2 layers' experts"
		pid=$(jq ".workers[$j].pid" <<<"$status")
		peak=$(($(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status") * 1024))
		over=$((peak - planned))
		[ "$over" -gt "$worst" ] && worst=$over
		[ "$peak" -le $((planned + slack)) ] ||
			fail "$arch: w$j peaked at $peak bytes; its slice plans $planned (+ $slack allowed)"
		[ "$peak" -lt $((moe_bytes / 2 + slack - 16 * 1024 * 1024)) ] ||
			fail "$arch: w$j peaked at $peak bytes, not far from the whole model's $moe_bytes"
	done
	echo "$arch, experts: peak resident at most planned + $((worst / 1024)) KiB"
	lm_down "$dir"
done

# gpt-oss, 8 layers of 16 MXFP4 experts (2 per token) of width 512 and f32 elsewhere: the
# experts at 17 bytes per 32 weights (16 x 3 x 512 x 512 x 17 / 32, about 6.7 MB a layer), their
# f32 biases, and a worker's peak within its plan.
oss="$LM_TMP/oss.gguf"
"$LM_BIN" synth --out "$oss" --arch gpt-oss --dim 512 --layers 8 --heads 8 --kv-heads 4 \
	--ffn 1536 --ffn-exp 512 --experts 16 --experts-used 2 --window 32 --vocab 512 --type f32 \
	--experts-type mxfp4 --seed 3 --vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null
oss_bytes=$(stat -c %s "$oss")
dir="$LM_TMP/mesh-oss"
mkdir -p "$dir"
LM_MAX_SEQ=128 LM_SLOTS=4 lm_mesh_toml "$dir/mesh.toml" "$oss" ipc "$(lm_port)" 0:2 2:4 4:6 6:8
lm_up "$dir/mesh.toml" "$dir/up.log"
"$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time" -n 64 --temp 0 >/dev/null ||
	fail "gpt-oss: a request failed"
status=$(curl -sf "$LM_URL/v1/status")
worst=0
for j in 0 1 2 3; do
	planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
	weights=$(jq ".plan.workers[$j].weight_bytes" <<<"$status")
	[ "$weights" -gt $((2 * 6 * 1024 * 1024)) ] ||
		fail "gpt-oss: w$j plans $weights bytes of weights, fewer than its 2 layers' experts"
	pid=$(jq ".workers[$j].pid" <<<"$status")
	peak=$(($(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status") * 1024))
	over=$((peak - planned))
	[ "$over" -gt "$worst" ] && worst=$over
	[ "$peak" -le $((planned + slack)) ] ||
		fail "gpt-oss: w$j peaked at $peak bytes; its slice plans $planned (+ $slack allowed)"
	[ "$peak" -lt $((oss_bytes / 2 + slack - 16 * 1024 * 1024)) ] ||
		fail "gpt-oss: w$j peaked at $peak bytes, not far from the whole model's $oss_bytes"
done
echo "gpt-oss (MXFP4 experts): peak resident at most planned + $((worst / 1024)) KiB"
lm_down "$dir"

# qwen35, 8 layers alternating gated delta-net and attention, speculating (max_draft 4): a
# worker's cache is its attention layer's rows and its recurrent layer's state per slot (conv
# ring 3 x (2 x 4 + 16) x 128 and state 16 x 128 x 128, f32) with the 4 states it keeps for
# rollback, 1 MiB each, resident and held to the plan.
rec="$LM_TMP/qwen35.gguf"
"$LM_BIN" synth --out "$rec" --arch qwen35 --full-attn-every 2 --dim 512 --layers 8 --heads 8 \
	--kv-heads 4 --ssm-state 128 --ssm-v-heads 16 --ffn 1536 --type q8_0 --seed 3 \
	--vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null
dir="$LM_TMP/mesh-qwen35"
mkdir -p "$dir"
LM_MAX_SEQ=128 LM_SLOTS=4 lm_mesh_toml "$dir/mesh.toml" "$rec" ipc "$(lm_port)" 0:2 2:4 4:6 6:8
printf '\n[speculative]\nsource = "ngram"\nmax_draft = 4\nmax_streams = 0\n' >>"$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up.log"
"$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time" -n 64 --temp 0 >/dev/null ||
	fail "qwen35: a request failed"
status=$(curl -sf "$LM_URL/v1/status")
# (4 slots + 1 for probes) x: 128 rows of K and V (4 x 64 f32), and (1 + 4) states of
# (9216 + 262144) f32.
want_kv=$((5 * 128 * 2 * 1024 + 5 * 5 * (9216 + 262144) * 4))
worst=0
for j in 0 1 2 3; do
	w=$(jq ".workers[$j]" <<<"$status")
	kv=$(jq '.kv_bytes' <<<"$w")
	[ "$kv" -eq "$want_kv" ] || fail "qwen35: w$j reports $kv bytes of cache; its layers need $want_kv"
	planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
	[ "$(jq ".plan.workers[$j].kv_bytes" <<<"$status")" -eq "$want_kv" ] ||
		fail "qwen35: w$j's plan prices its cache at $(jq ".plan.workers[$j].kv_bytes" <<<"$status"), not $want_kv"
	pid=$(jq '.pid' <<<"$w")
	peak=$(($(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status") * 1024))
	over=$((peak - planned))
	[ "$over" -gt "$worst" ] && worst=$over
	[ "$peak" -le $((planned + slack)) ] ||
		fail "qwen35: w$j peaked at $peak bytes; its slice plans $planned (+ $slack allowed)"
done
echo "qwen35: each worker's cache $want_kv bytes as planned; peak resident at most planned + $((worst / 1024)) KiB"
lm_down "$dir"

# ---------------------------------------------------------------- the mission's shape
# dim 128 keeps the layers small, so that what a worker holds besides its layers (the
# vocabulary it must not load, the process itself) shows against its plan.
vocab="$LM_SHARED/tokenizer/ggml-vocab-gemma-4.gguf"
[ -f "$vocab" ] || fail "$vocab is missing: the mission's vocabulary"
g4="$LM_TMP/gemma4-mission.gguf"
"$LM_BIN" synth --out "$g4" --arch gemma4 --dim 128 --layers 60 --heads 16 --kv-heads 4 \
	--head-dim 512 --kv-heads-swa 16 --head-dim-swa 256 --window 128 --swa-period 6 --ffn 512 \
	--type q8_0 --tied --seed 5 --threads 2 --vocab-from "$vocab" >/dev/null
dir="$LM_TMP/mission"
mkdir -p "$dir/load"
fence=()
for ((j = 0; j < 20; j++)); do fence+=("$((3 * j)):$((3 * j + 3))"); done
LM_MAX_SEQ=128 LM_SLOTS=2 LM_KV_TYPE_K=f16 LM_KV_TYPE_V=f16 \
	lm_mesh_toml "$dir/mesh.toml" "$g4" ipc "$(lm_port)" "${fence[@]}"
printf '\n[speculative]\nsource = "ngram"\nmax_draft = 4\nmax_streams = 0\n' >>"$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up.log"

# check_hwm WHAT: every worker's VmHWM against its planned bytes; the worst excess into WORST.
check_hwm() {
	local what=$1 status j planned pid peak
	status=$(curl -sf "$LM_URL/v1/status")
	WORST=-1073741824
	for ((j = 0; j < 20; j++)); do
		planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
		pid=$(jq ".workers[$j].pid" <<<"$status")
		peak=$(($(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status") * 1024))
		[ $((peak - planned)) -le "$WORST" ] || WORST=$((peak - planned))
		[ "$peak" -le $((planned + slack)) ] ||
			fail "$what: w$j peaked at $peak bytes; its slice plans $planned (+ $slack allowed)"
	done
	echo "$what: VmHWM - plan is at most $((WORST / 1024)) KiB in every worker"
}

# Speculation: prompts that repeat themselves, so the n-gram drafter proposes and the last
# stage verifies drafts (logits of 1 + 4 rows a sequence over the 262,144-token head).
spec_prompt="one two three four one two three four one two three four one two three"
for k in 1 2; do
	"$LM_BIN" generate --url "$LM_URL" --prompt "$spec_prompt" -n 48 --temp 0 >/dev/null ||
		fail "a speculative request failed"
done
drafted=$(curl -sf "$LM_URL/metrics" | awk '/^layermesh_spec_drafted_tokens_total / {print $2}')
[ "${drafted:-0}" -gt 0 ] || fail "the n-gram drafter proposed nothing: no speculation ran"
echo "speculation: $drafted tokens drafted"
check_hwm "after load and speculation"

# A redeploy of the first, a middle and the last worker while two clients generate: the old
# processes export their sequences' KV rows and the new ones import them. An old process's
# VmHWM is read until it exits (every 50 ms; the peak only grows, so the last reading is the
# lower bound of the final one that the exports have already raised).
load() {
	local i
	for ((i = 0; i < 40; i++)); do
		[ -f "$dir/stop" ] && break
		"$LM_BIN" generate --url "$LM_URL" --prompt "$spec_prompt $1" -n 100 --temp 0 \
			--timeout 60 >/dev/null 2>>"$dir/load/err" || echo "$1.$i" >>"$dir/load/failed"
	done
}
watch_hwm() { # PID OUT: the process's VmHWM in bytes into OUT until it exits (at most 120 s)
	local i v
	for ((i = 0; i < 2400; i++)); do
		v=$(awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null) || break
		[ -n "$v" ] || break
		echo $((v * 1024)) >"$2"
		sleep 0.05
	done
}
status=$(curl -sf "$LM_URL/v1/status")
watchers=()
for j in 0 10 19; do
	watch_hwm "$(jq ".workers[$j].pid" <<<"$status")" "$dir/old.$j" &
	watchers+=($!)
	LM_PIDS+=($!)
done
load a &
l1=$!
load b &
l2=$!
LM_PIDS+=("$l1" "$l2")
sleep 1
"$LM_BIN" redeploy --url "$LM_URL" --workers w0,w10,w19 >"$dir/rd.out" 2>&1 ||
	fail "redeploy: $(cat "$dir/rd.out")"
moved=$(curl -sf "$LM_URL/v1/admin/redeploy" | jq '.moved_sequences')
touch "$dir/stop"
wait "$l1" "$l2" || true
for w in "${watchers[@]}"; do wait "$w" || true; done
[ ! -f "$dir/load/failed" ] || fail "requests failed across the redeploy: $(tail -3 "$dir/load/err")"
for j in 0 10 19; do
	planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
	peak=$(cat "$dir/old.$j")
	[ "$peak" -le $((planned + slack)) ] ||
		fail "the replaced w$j peaked at $peak bytes; its slice plans $planned (+ $slack allowed)"
	echo "the replaced w$j: VmHWM - plan is $(((peak - planned) / 1024)) KiB"
done
echo "redeploy: ${moved:-0} sequences moved"
check_hwm "after the redeploy"
lm_down "$dir"

# ---------------------------------------------------------------- over its memory_limit
# A worker resident past its memory_limit once its slice is loaded says so, with both figures,
# and serves nothing: here one given its slice by flags and a limit of 4 MiB.
"$LM_WORKER" --name tight --control "ipc://$LM_TMP/tight.ctl" --data "ipc://$LM_TMP/tight.data" \
	--model "$g4" --layers 0:3 --embedding --next "ipc://$LM_TMP/nobody.data" --max-seq 16 \
	--slots 1 --memory-limit 4MiB >"$LM_TMP/tight.log" 2>&1 &
tight=$!
LM_PIDS+=("$tight")
lm_wait_exit "$tight" 60 || fail "a worker past its memory_limit kept running"
if ! grep -q "over its memory_limit of 4194304 bytes (4.00 MiB)" "$LM_TMP/tight.log" ||
	! grep -Eq "resident at [0-9]+ bytes" "$LM_TMP/tight.log"; then
	fail "no message with both figures: $(cat "$LM_TMP/tight.log")"
fi
! grep -q "^.*ready:" "$LM_TMP/tight.log" || fail "it reported ready: $(cat "$LM_TMP/tight.log")"
echo "past its memory_limit: $(grep -o 'resident at .*MiB)' "$LM_TMP/tight.log" | head -1)"

# Through `layermesh up`: a scratch_bytes that under-counts the workers passes the planner,
# and w1 (memory_limit 1 MiB above its planned bytes) refuses its slice; up says which and why.
dir="$LM_TMP/tight-up"
mkdir -p "$dir"
LM_MAX_SEQ=64 LM_SLOTS=1 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:4 4:8
sed -i 's/^wire_dtype = .*/&\nscratch_bytes = "64KiB"/' "$dir/mesh.toml"
need=$("$LM_BIN" plan --json "$dir/mesh.toml" | jq '.plan.workers[1].total_bytes')
awk -v lim=$((need + 1048576)) '/^\[\[worker\]\]/ {n++} n == 2 && /^memory_limit/ {
	$0 = "memory_limit = \"" lim "\"" } {print}' "$dir/mesh.toml" >"$dir/m" && mv "$dir/m" "$dir/mesh.toml"
if "$LM_BIN" up "$dir/mesh.toml" --worker-bin "$LM_WORKER" --timeout 60 >"$dir/up.log" 2>&1; then
	fail "a mesh whose worker is past its memory_limit came up"
fi
grep -q "over its memory_limit of $((need + 1048576)) bytes" "$dir/up.log" ||
	fail "up did not say why: $(tail -5 "$dir/up.log")"
echo "up refused: $(grep -o 'worker w1 is resident at [0-9]* bytes' "$dir/up.log" | head -1)"
echo "ok: every worker holds its slice and no more, at the mission's shape too"

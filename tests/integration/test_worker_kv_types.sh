#!/usr/bin/env bash
# Workers with cache types of their own (a small worker in a mixed fleet): w0 stores K and V of
# its layers in q4_0, w1 in f16, over a mesh whose [model] types are f32. Each worker must report
# its own types and its KV bytes in them; the mesh's greedy ids must equal those of
# `layermesh run` given the same per-layer types (--kv-layers), and differ from the single
# process in f32 (so the comparison could fail); `layermesh diff` must find the hidden states
# equal at every layer; `layermesh plan` shows each worker's types.
source "$(dirname "$0")/lib.sh"

# head_dim 32 (256 / 8 heads), so the block types tile every head; 2 KV heads.
model="$LM_TMP/kv.gguf"
"$LM_BIN" synth --out "$model" --dim 256 --layers 4 --heads 8 --kv-heads 2 --ffn 512 \
	--vocab 512 --type q8_0 --seed 7 --vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null
dir="$LM_TMP/mesh"
mkdir -p "$dir"
LM_MAX_SEQ=256 LM_SLOTS=4 LM_WORKER_KV="q4_0 f16" \
	lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4

"$LM_BIN" plan "$dir/mesh.toml" >"$dir/plan.out" 2>&1 || { cat "$dir/plan.out" >&2; fail "plan failed"; }
grep -q "cache of worker w0: its own types, K q4_0, V q4_0" "$dir/plan.out" ||
	{ cat "$dir/plan.out" >&2; fail "plan does not show w0's types"; }
grep -Eq "^w1 +f16 " "$dir/plan.out" || { cat "$dir/plan.out" >&2; fail "plan's KV table lacks w1's f16"; }

# --kv-layers is refused, with the reason, where its ranges overlap or pass the model's end.
err=$("$LM_BIN" run --model "$model" --prompt x -n 1 --kv-layers 0:3=f16 --kv-layers 2:4=f32 2>&1) &&
	fail "overlapping --kv-layers accepted"
grep -q "kv-layers 2:4 overlaps 0:3" <<<"$err" || fail "overlap: $err"
err=$("$LM_BIN" run --model "$model" --prompt x -n 1 --kv-layers 2:5=f16 2>&1) &&
	fail "--kv-layers past the model accepted"
grep -q "kv-layers 2:5: .* has 4 layers" <<<"$err" || fail "past the end: $err"

prompts=("Once upon a time" "The cat" "Tom had 3 red apples!")
kv=(--kv-layers 0:2=q4_0 --kv-layers 2:4=f16)
declare -A want=()
differs=0
for p in "${prompts[@]}"; do
	want[$p]=$("$LM_BIN" run --model "$model" --prompt "$p" --temp 0 -n 40 --ctx 256 --ids \
		"${kv[@]}" 2>/dev/null) || fail "run --kv-layers failed for '$p'"
	f32=$("$LM_BIN" run --model "$model" --prompt "$p" --temp 0 -n 40 --ctx 256 --ids 2>/dev/null)
	[ "$f32" = "${want[$p]}" ] || differs=$((differs + 1))
done
# The types must matter to the ids at all, or equal ids would prove nothing.
[ "$differs" -gt 0 ] || fail "the per-layer types do not change any prompt's greedy ids"

lm_up "$dir/mesh.toml" "$dir/up.log"
status=$(curl -sf "$LM_URL/v1/status")
# Per layer: 256 positions x (4 slots + 1 kept for probes) x (K row + V row); a row of 2 heads
# x 32 is 36 bytes in q4_0 (2 blocks of 18) and 128 in f16.
for j in 0 1; do
	t=$([ "$j" = 0 ] && echo q4_0 || echo f16)
	row=$([ "$j" = 0 ] && echo 36 || echo 128)
	got=$(jq -r "[.workers[$j].status.kv_type_k, .workers[$j].status.kv_type_v] | join(\" \")" <<<"$status")
	[ "$got" = "$t $t" ] || fail "w$j reports cache types '$got', not '$t $t'"
	bytes=$(jq ".workers[$j].status.kv_bytes" <<<"$status")
	[ "$bytes" -eq $((2 * 256 * 5 * 2 * row)) ] ||
		fail "w$j holds $bytes bytes of KV; 2 layers of $t need $((2 * 256 * 5 * 2 * row))"
	planned=$(jq ".plan.workers[$j].kv_bytes" <<<"$status")
	[ "$planned" -eq "$bytes" ] || fail "w$j: planned $planned bytes of KV, holds $bytes"
done
for p in "${prompts[@]}"; do
	got=$("$LM_BIN" generate --url "$LM_URL" --prompt "$p" --temp 0 -n 40 --ids 2>/dev/null) ||
		fail "generate failed for '$p'"
	[ "$got" = "${want[$p]}" ] || fail "'$p': the mesh gave
  $got
the single process with the same per-layer types
  ${want[$p]}"
done
lm_down "$dir"

"$LM_BIN" diff "$dir/mesh.toml" --prompt "Once upon a time" --worker-bin "$LM_WORKER" \
	>"$dir/diff.out" 2>&1 || { cat "$dir/diff.out" >&2; fail "diff failed"; }
[ "$(awk '$1 ~ /^[0-3]$/ && $3 != 0' "$dir/diff.out" | wc -l)" -eq 0 ] ||
	{ cat "$dir/diff.out" >&2; fail "diff: the mesh's hidden states differ from the single process's"; }
echo "ok: per-worker cache types, $differs of ${#prompts[@]} prompts changed by them"

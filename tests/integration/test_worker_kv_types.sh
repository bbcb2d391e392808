#!/usr/bin/env bash
# Workers with cache types of their own (a small worker in a mixed fleet): w0 stores K and V of
# its layers in q4_0, w1 in f16, over a mesh whose [model] types are f32. Each worker must report
# its own types and its KV bytes in them; the mesh's greedy ids must equal those of
# `layermesh run` given the same per-layer types (--kv-layers), and differ from the single
# process in f32 (so the comparison could fail); `layermesh diff` must find the hidden states
# equal at every layer; `layermesh plan` shows each worker's types. A cuda worker is planned
# from the CUDA backend's own lists (without a GPU): refused, by plan and up, over a model whose
# needs its backend lacks.
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

# A cuda worker is planned from the CUDA backend's own lists, no GPU needed: w1 on cuda with its
# own q5_1 K and fp8 V plans, and so does gpt-oss (MXFP4 experts, attention sinks, YaRN, the
# clamped SwiGLU), all of which that backend runs. A weight type it lacks (stories260K with one
# tensor retyped to i32) is refused by `layermesh plan` and `layermesh up`, naming the worker,
# the backend and the type, before any worker starts.
cdir="$LM_TMP/cuda"
mkdir -p "$cdir"
cuda_w1() { awk '/^name = "w1"$/ { print; print "backend = \"cuda\""; next } { print }' "$1" >"$2"; }
LM_MAX_SEQ=256 LM_SLOTS=4 LM_WORKER_KV="q4_0 q5_1,fp8" \
	lm_mesh_toml "$cdir/kv.toml" "$model" ipc "$(lm_port)" 0:2 2:4
cuda_w1 "$cdir/kv.toml" "$cdir/kv-cuda.toml"
"$LM_BIN" plan "$cdir/kv-cuda.toml" >"$cdir/plan.out" 2>&1 ||
	{ cat "$cdir/plan.out" >&2; fail "a cuda worker with q5_1 and fp8 caches was refused"; }
grep -q "cache of worker w1: its own types, K q5_1, V fp8" "$cdir/plan.out" ||
	{ cat "$cdir/plan.out" >&2; fail "plan does not show the cuda worker's types"; }
"$LM_BIN" synth --out "$cdir/gptoss.gguf" --arch gpt-oss --dim 256 --layers 4 --heads 8 \
	--kv-heads 2 --head-dim 32 --ffn 256 --experts 4 --experts-used 2 --experts-type mxfp4 \
	--window 8 --vocab 512 --type q8_0 --seed 3 >/dev/null
LM_MAX_SEQ=256 LM_SLOTS=4 lm_mesh_toml "$cdir/g.toml" "$cdir/gptoss.gguf" ipc "$(lm_port)" 0:2 2:4
cuda_w1 "$cdir/g.toml" "$cdir/g-cuda.toml"
"$LM_BIN" plan "$cdir/g-cuda.toml" >"$cdir/plan.out" 2>&1 ||
	{ cat "$cdir/plan.out" >&2; fail "gpt-oss with a cuda worker does not plan"; }
# blk.3.attn_norm.weight (w1's) as i32 (4 bytes an element, as f32: the file still reads).
python3 - "$LM_SHARED/models/stories260K.gguf" "$cdir/i32.gguf" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
name = b"blk.3.attn_norm.weight"
at = b.find(len(name).to_bytes(8, "little") + name) + 8 + len(name)
nd = int.from_bytes(b[at:at + 4], "little")
b[at + 4 + 8 * nd:at + 8 + 8 * nd] = (26).to_bytes(4, "little")
open(sys.argv[2], "wb").write(b)
PY
LM_MAX_SEQ=256 LM_SLOTS=4 lm_mesh_toml "$cdir/i.toml" "$cdir/i32.gguf" ipc "$(lm_port)" 0:2 2:5
cuda_w1 "$cdir/i.toml" "$cdir/i-cuda.toml"
err=$("$LM_BIN" plan "$cdir/i-cuda.toml" 2>&1) && fail "an i32 weight planned on a cuda worker: $err"
for want in "worker w1 (line" "backend cuda" "holds layers [2, 5)" \
	"weights of type i32 (blk.3.attn_norm.weight)"; do
	grep -qF "$want" <<<"$err" || fail "plan's refusal lacks '$want': $err"
done
err=$(timeout 30 "$LM_BIN" up "$cdir/i-cuda.toml" --worker-bin "$LM_WORKER" --timeout 20 2>&1) &&
	fail "up started a cuda worker on an i32 weight"
grep -qF "weights of type i32 (blk.3.attn_norm.weight)" <<<"$err" || fail "up's refusal: $err"
! pgrep -f "layermesh-worker.*$cdir" >/dev/null || fail "up started workers before refusing"
echo "ok: refused: $err"
echo "ok: per-worker cache types, $differs of ${#prompts[@]} prompts changed by them"

#!/usr/bin/env bash
# Each worker holds its own slice: its KV bytes are exactly the formula for its layers, and its
# resident memory after loading is bounded by its slice's bytes plus a small constant, far
# below the whole model's.
source "$(dirname "$0")/lib.sh"

# 8 layers of about 12.6 MB each (f32, dim 512, ffn 1536, 4 KV heads of 64): a 100 MB model.
model="$LM_TMP/big.gguf"
"$LM_BIN" synth --out "$model" --dim 512 --layers 8 --heads 8 --kv-heads 4 --ffn 1536 \
	--vocab 512 --type f32 --seed 3 --vocab-from "$LM_SHARED/models/stories260K.gguf" >/dev/null
model_bytes=$(stat -c %s "$model")

dir="$LM_TMP/mesh"
mkdir -p "$dir"
LM_MAX_SEQ=128 LM_SLOTS=4 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:6 6:8
lm_up "$dir/mesh.toml" "$dir/up.log"
status=$(curl -sf "$LM_URL/v1/status")

# Per layer: 2 x 4 heads x 64 x 128 positions x (4 slots + 1 kept for probes)
# x 4 bytes.
per_layer=$((2 * 4 * 64 * 128 * 5 * 4))
slack=$((24 * 1024 * 1024)) # binary, libraries, NNG's threads, allocator arenas
for j in 0 1 2 3; do
	w=$(jq ".workers[$j]" <<<"$status")
	kv=$(jq '.kv_bytes' <<<"$w")
	[ "$kv" -eq $((2 * per_layer)) ] ||
		fail "w$j reports $kv bytes of KV; its 2 layers need $((2 * per_layer))"
	planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
	pid=$(jq '.pid' <<<"$w")
	rss=$(($(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status") * 1024))
	echo "w$j: KV $kv bytes, planned $planned bytes, resident $rss bytes (model $model_bytes)"
	[ "$rss" -le $((planned + slack)) ] ||
		fail "w$j is resident for $rss bytes; its slice plans $planned (+ $slack allowed)"
	[ "$rss" -lt $((model_bytes / 2)) ] ||
		fail "w$j is resident for $rss bytes, not far from the whole model's $model_bytes"
done
lm_down "$dir"
echo "ok: every worker holds its slice and no more"

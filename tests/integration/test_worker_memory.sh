#!/usr/bin/env bash
# Each worker holds its own slice: its KV bytes are exactly the formula for its layers, in the
# cache types of mesh.toml, and its peak resident memory (VmHWM, after a request has run through
# it) is bounded by its slice's planned bytes plus 16 MiB, for every cache type, far below the
# whole model's.
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
echo "ok: every worker holds its slice and no more, in every cache type"

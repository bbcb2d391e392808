#!/usr/bin/env bash
# layermesh diff: over an f32 wire the mesh's hidden states equal the single process's at every
# layer, and so they do with K and V cached in different types; over an f16 wire the first layer past a tight tolerance is the first layer of the
# second worker (its input was rounded on the way); against llama.cpp's own layer dump (when the
# oracle is built) every layer is within 1e-4.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
dir="$LM_TMP/diff"
mkdir -p "$dir"
lm_mesh_toml "$dir/f32.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
"$LM_BIN" diff "$dir/f32.toml" --prompt "Once upon a time" --worker-bin "$LM_WORKER" \
	>"$dir/f32.out" 2>&1 || { cat "$dir/f32.out" >&2; fail "diff failed on an f32 wire"; }
cat "$dir/f32.out"
grep -q "every layer within tolerance" "$dir/f32.out" || fail "f32 wire: not within tolerance"
[ "$(awk '$1 ~ /^[0-4]$/ && $3 != 0' "$dir/f32.out" | wc -l)" -eq 0 ] ||
	fail "f32 wire: some layer differs at all"

# K and V in different types: the mesh's workers must store each as the reference run does
# (diff once started its workers with the K type for both, and every layer differed).
LM_KV_TYPE_K=f16 LM_KV_TYPE_V=f32 lm_mesh_toml "$dir/kv.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
"$LM_BIN" diff "$dir/kv.toml" --prompt "Once upon a time" --worker-bin "$LM_WORKER" \
	>"$dir/kv.out" 2>&1 || { cat "$dir/kv.out" >&2; fail "diff failed with K f16 and V f32"; }
cat "$dir/kv.out"
[ "$(awk '$1 ~ /^[0-4]$/ && $3 != 0' "$dir/kv.out" | wc -l)" -eq 0 ] ||
	fail "K f16 / V f32: the mesh's hidden states differ from the single process's"

LM_WIRE_DTYPE=f16 lm_mesh_toml "$dir/f16.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
if "$LM_BIN" diff "$dir/f16.toml" --prompt "Once upon a time" --tolerance 1e-7 \
	--worker-bin "$LM_WORKER" >"$dir/f16.out" 2>&1; then
	cat "$dir/f16.out" >&2
	fail "diff did not notice an f16 wire at tolerance 1e-7"
fi
cat "$dir/f16.out"
grep -q "first layer past tolerance: 2" "$dir/f16.out" ||
	fail "f16 wire: the first layer past tolerance should be 2, the second worker's first"

if [ -n "${LM_ORACLE:-}" ]; then
	"$LM_ORACLE" --model "$model" --prompt "Once upon a time" --dump-layers "$dir/dump" \
		--dump-all >/dev/null
	"$LM_BIN" diff "$dir/f32.toml" --prompt "Once upon a time" --external "$dir/dump" \
		--worker-bin "$LM_WORKER" >"$dir/ext.out" 2>&1 ||
		{ cat "$dir/ext.out" >&2; fail "diff against llama.cpp's dump failed"; }
	cat "$dir/ext.out"
else
	echo "(llama.cpp oracle not built: the external comparison is skipped)"
fi
ls -d /tmp/layermesh-diff.* 2>/dev/null && fail "diff left its temporary directory"
echo "ok: diff"

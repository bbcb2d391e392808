#!/usr/bin/env bash
# The model a worker serves, and bad files and numbers:
#   1. a change written in place, into the file the workers have mapped: every worker stops
#      before serving it, the restarted w1 is refused by its digest, and the original bytes
#      written back heal the mesh; then the weights are replaced under a running mesh (same layout and metadata, so the same
#      fingerprint) and a worker restarts: its slice's digest no longer matches, it is refused
#      with both values (/readyz, /v1/status, the 503 body, the log), nothing answers with the
#      other weights, a redeploy onto the new file is refused too, and putting the file back
#      heals the mesh;
#   2. the file is truncated under the mesh and a worker restarts: every report carries the
#      worker's own error (the tensor past the end of the file), not how the process ended;
#   3. a model whose layer 3 makes NaN: the request fails at once, naming the worker and the
#      layer, and `layermesh diff` names the layer;
#   4. a FIFO as the model path: `layermesh plan`, `up` and `run` refuse it at once.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
worker_pid() { pgrep -f "layermesh-worker --name $1 .*$2" | head -n 1; }
# readyz_wait PATTERN: until /readyz's body matches (at most 20 s); prints the body.
readyz_wait() {
	local body i
	for ((i = 0; i < 200; i++)); do
		body=$(curl -s -m 2 "$LM_URL/readyz" || true)
		if grep -qE "$1" <<<"$body"; then
			echo "$body"
			return 0
		fi
		sleep 0.1
	done
	echo "$body"
	return 1
}
gen() { "$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time" -n 32 --temp 0 --timeout 30; }

dir="$LM_TMP/swap"
mkdir -p "$dir"
cp "$model" "$dir/model.gguf"
LM_REQUEST_TIMEOUT=${LM_REQUEST_TIMEOUT-5} lm_mesh_toml "$dir/mesh.toml" "$dir/model.gguf" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"
"$LM_BIN" run --model "$model" --prompt "Once upon a time" -n 32 --temp 0 >"$dir/solo" 2>/dev/null
gen >"$dir/before" 2>/dev/null || fail "the mesh does not serve"
cmp -s "$dir/solo" "$dir/before" || fail "the mesh differs from the single process"

# ---------------------------------------------------------------- 1. written in place
# A change written into the file the workers have mapped (same inode): they see it
# at once through their mappings, so each stops before anything computed from it goes on
# (exit status 3, saying why), and the restarted w1 is refused by its digest. No request is
# answered with the changed weights. Writing the original bytes back in place heals it.
cp "$dir/model.gguf" "$dir/original.gguf"
"$LM_GGUF_EDIT" "$dir/original.gguf" "$dir/perturbed.gguf" blk.2.attn_q.weight perturb
dd if="$dir/perturbed.gguf" of="$dir/model.gguf" conv=notrunc status=none
rc=0
gen >"$dir/inplace" 2>"$dir/inplace.err" || rc=$?
if [ "$rc" -eq 0 ] && ! cmp -s "$dir/solo" "$dir/inplace"; then
	fail "the mesh answered with weights written in place: $(cat "$dir/inplace")"
fi
body=$(readyz_wait "w1 cannot serve: .*digest") ||
	fail "/readyz does not say w1's slice changed: $body"
grep -q "was written while this worker serves it" "$dir/up.log" ||
	fail "no worker said the model file was written under it"
dd if="$dir/original.gguf" of="$dir/model.gguf" conv=notrunc status=none
ready_ms=$(lm_ready_wait "$LM_URL" 30) || fail "the mesh did not heal once the bytes were back"
gen >"$dir/healed2" 2>/dev/null || fail "the healed mesh does not serve"
cmp -s "$dir/solo" "$dir/healed2" || fail "the healed mesh differs from the single process"
echo "written in place: a request then exited $rc; $(grep -c "was written while" "$dir/up.log") stops logged;" \
	"/readyz: ${body:0:120}; the bytes back: ready after $ready_ms ms"
rm -f "$dir/original.gguf" "$dir/perturbed.gguf"

# ---------------------------------------------------------------- 1. replaced weights
cp "$dir/model.gguf" "$dir/original.gguf"
"$LM_GGUF_EDIT" "$dir/original.gguf" "$dir/model.gguf" blk.2.attn_q.weight perturb
kill -KILL "$(worker_pid w1 "$dir")"
# One refusal marks it failed, and the report counts no tries: there was one.
body=$(readyz_wait "cannot serve: .*digest") || true
echo "readyz after the swap: $body"
t0=$(date +%s%N)
rc=0
gen >"$dir/after" 2>"$dir/after.err" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
echo "a request after the swap: exit $rc in $ms ms: $(cat "$dir/after.err")"
if [ "$rc" -eq 0 ] && ! cmp -s "$dir/solo" "$dir/after"; then
	fail "the mesh answered with the replaced weights: $(cat "$dir/after")"
fi
grep -q "w1 cannot serve: .*digest" <<<"$body" ||
	fail "/readyz does not say the slice changed: $body"
! grep -q "tries in a row" <<<"$body" || fail "/readyz counts tries after one refusal: $body"
[ "$(grep -oE '[0-9a-f]{16}' <<<"$body" | sort -u | wc -l)" -ge 2 ] ||
	fail "/readyz does not give both digests: $body"
[ "$rc" -ne 0 ] || fail "a request was served by a mesh with a replaced slice"
grep -q "HTTP 503.*w1.*digest" "$dir/after.err" || fail "the 503 does not say why"
jq -e '.workers[1].why | test("digest")' <<<"$(curl -sf "$LM_URL/v1/status")" >/dev/null ||
	fail "/v1/status does not say why w1 is down"
grep -q "w1.*digest" "$dir/up.log" || fail "the log does not say why w1 was refused"
# Back to the weights the mesh serves: the keeper's next try brings w1 back.
mv "$dir/original.gguf" "$dir/model.gguf"
ready_ms=$(lm_ready_wait "$LM_URL" 20) || fail "the mesh did not heal once the file was back"
gen >"$dir/healed" 2>/dev/null || fail "the healed mesh does not serve"
cmp -s "$dir/solo" "$dir/healed" || fail "the healed mesh differs from the single process"
echo "file back: ready after $ready_ms ms, the same tokens as before"
# A redeploy onto a replaced file is refused the same way, and the old process keeps serving.
cp "$dir/model.gguf" "$dir/original.gguf"
"$LM_GGUF_EDIT" "$dir/original.gguf" "$dir/model.gguf" blk.2.attn_q.weight perturb
rc=0
"$LM_BIN" redeploy --url "$LM_URL" --workers w1 >"$dir/redeploy.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "a redeploy onto replaced weights succeeded"
grep -q "digest" "$dir/redeploy.out" || fail "the redeploy's refusal does not say why: $(cat "$dir/redeploy.out")"
echo "redeploy onto replaced weights: $(grep -m1 digest "$dir/redeploy.out")"
gen >"$dir/kept" 2>/dev/null || fail "the mesh stopped serving after a refused redeploy"
cmp -s "$dir/solo" "$dir/kept" || fail "the mesh differs after a refused redeploy"
mv "$dir/original.gguf" "$dir/model.gguf"

# ---------------------------------------------------------------- 2. truncated under the mesh
cp "$dir/model.gguf" "$dir/original.gguf"
truncate -s 300000 "$dir/model.gguf"
kill -KILL "$(worker_pid w1 "$dir")"
body=$(readyz_wait "past the end|ends past") || true
echo "readyz after the truncation: $body"
grep -qE "past the end|ends past" <<<"$body" || fail "/readyz lost the worker's own error: $body"
! grep -q "signal 9" <<<"$body" || fail "/readyz reports the kill, not the cause: $body"
code=$(curl -s -o "$dir/trunc.json" -w '%{http_code}' "$LM_URL/v1/completions" \
	-H "Content-Type: application/json" \
	-d '{"prompt": "Once upon a time", "max_tokens": 8}')
[ "$code" = 503 ] && jq -e '.error.message | test("past the end|ends past")' "$dir/trunc.json" \
	>/dev/null || fail "the 503 body lost the worker's own error: HTTP $code $(cat "$dir/trunc.json")"
"$LM_BIN" status --url "$LM_URL" >"$dir/status.out" 2>&1 || true
grep -qE "past the end|ends past" "$dir/status.out" ||
	fail "layermesh status lost the worker's own error: $(cat "$dir/status.out")"
echo "truncated: HTTP $code: $(jq -r .error.message "$dir/trunc.json")"
mv "$dir/original.gguf" "$dir/model.gguf"
lm_ready_wait "$LM_URL" 20 >/dev/null || fail "the mesh did not heal once the file was back"
lm_down "$dir"

# ---------------------------------------------------------------- 3. NaN from layer 3
dir="$LM_TMP/nan"
mkdir -p "$dir"
"$LM_GGUF_EDIT" "$model" "$dir/nan.gguf" blk.3.ffn_norm.weight nan
lm_mesh_toml "$dir/mesh.toml" "$dir/nan.gguf" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"
t0=$(date +%s%N)
rc=0
gen >/dev/null 2>"$dir/nan.err" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
echo "NaN model: exit $rc in $ms ms: $(cat "$dir/nan.err")"
[ "$rc" -ne 0 ] || fail "a model that makes NaN was served"
grep -q "w1.*layer 3" "$dir/nan.err" || fail "the error does not name the worker and the layer"
[ "$ms" -lt 5000 ] || fail "the NaN request took $ms ms to fail"
curl -sf "$LM_URL/readyz" >/dev/null || fail "the mesh is not ready after a NaN request"
lm_down "$dir"
rc=0
"$LM_BIN" diff "$dir/mesh.toml" --prompt "Once upon a time" --worker-bin "$LM_WORKER" \
	>"$dir/diff.out" 2>&1 || rc=$?
echo "diff: $(grep -iE 'first|non-finite|nan' "$dir/diff.out" | head -n 3)"
grep -qiE "layer 3.*(nan|non-finite)|(nan|non-finite).*layer 3" "$dir/diff.out" ||
	fail "layermesh diff does not name layer 3: $(tail -n 12 "$dir/diff.out")"

# ---------------------------------------------------------------- 4. a FIFO as the model
dir="$LM_TMP/fifo"
mkdir -p "$dir"
mkfifo "$dir/model.gguf"
lm_mesh_toml "$dir/mesh.toml" "$dir/model.gguf" ipc "$(lm_port)" 0:5
for cmd in "plan $dir/mesh.toml" "up $dir/mesh.toml --worker-bin $LM_WORKER" \
	"run --model $dir/model.gguf --prompt x -n 1"; do
	rc=0
	# shellcheck disable=SC2086
	timeout 10 "$LM_BIN" $cmd >"$dir/out" 2>&1 || rc=$?
	[ "$rc" -ne 124 ] || fail "layermesh ${cmd%% *} hangs on a FIFO"
	[ "$rc" -ne 0 ] || fail "layermesh ${cmd%% *} accepted a FIFO"
	grep -q "not a regular file" "$dir/out" || fail "layermesh ${cmd%% *}: $(tail -n 2 "$dir/out")"
	echo "FIFO, layermesh ${cmd%% *}: $(grep -m1 'not a regular file' "$dir/out")"
done
echo "ok: model files"

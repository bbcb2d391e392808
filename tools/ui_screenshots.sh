#!/usr/bin/env bash
# tools/ui_screenshots.sh BUILD OUT_DIR — the README's screenshots of the mesh page: a mesh of 3
# workers and one of 20, each on a synthetic Gemma 3 (sliding and global layers) under a little
# load, taken by headless Chromium (tests/integration/ui_browser.mjs shot).
#
#   tools/ui_screenshots.sh build docs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: ui_screenshots.sh BUILD OUT_DIR}" && pwd)
out=$(mkdir -p "${2:?usage: ui_screenshots.sh BUILD OUT_DIR}" && cd "$2" && pwd)
export LM_BIN=$build/coordinator/layermesh LM_WORKER=$build/worker/layermesh-worker
export LM_SHARED=${LM_SHARED:-$root/../shared}
source "$root/tests/integration/lib.sh"

# shot N_WORKERS LAYERS_PER_WORKER FILE SIZE
shot() {
	local n=$1 per=$2 file=$3 size=$4 dir="$LM_TMP/m$1" fence=() i load=()
	mkdir -p "$dir"
	"$LM_BIN" synth --out "$dir/gemma3-synth.gguf" --arch gemma3 --dim 128 --layers $((n * per)) \
		--heads 4 --kv-heads 2 --head-dim 32 --window 64 --swa-period 3 --ffn 256 \
		--vocab 512 --type q8_0 >/dev/null
	for ((i = 0; i < n; i++)); do fence+=("$((i * per)):$(((i + 1) * per))"); done
	LM_SLOTS=8 LM_MAX_SEQ=512 lm_mesh_toml "$dir/mesh.toml" "$dir/gemma3-synth.gguf" ipc "$(lm_port)" \
		"${fence[@]}"
	sed -i 's/^memory_limit = .*/memory_limit = "48MiB"/' "$dir/mesh.toml"
	lm_up "$dir/mesh.toml" "$dir/up.log"
	for ((i = 0; i < 3; i++)); do
		(for ((k = 0; k < 400; k++)); do
			"$LM_BIN" generate --url "$LM_URL" --prompt "Once upon a time $k" -n 96 \
				--temp 0.8 --seed "$k" >/dev/null 2>&1 || sleep 0.2
		done) &
		load+=($!)
		LM_PIDS+=($!)
	done
	local workers
	workers=$(curl -sf "$LM_URL/v1/status" | jq -c '[.workers[] | {name, start, "end": .end}]')
	BROWSER=$(command -v chromium) URL=$LM_URL TOKEN='' PROFILE="$dir/profile" \
		WORKERS=$workers SIZE=$size SHOT_WAIT_MS=25000 \
		node "$root/tests/integration/ui_browser.mjs" shot "$file"
	kill "${load[@]}" 2>/dev/null || true
	lm_down "$dir"
}

shot 3 4 "$out/ui-mesh-3.png" 1400,700
shot 20 2 "$out/ui-mesh-20.png" 1600,1000

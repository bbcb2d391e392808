#!/usr/bin/env bash
# The official OpenAI SDK (npm openai, pinned in tests/node/package.json) against a real mesh: chat
# and completions, streaming and not, models.list and models.retrieve, and parameters the API
# refuses, which must surface as the SDK's BadRequestError with the API's message. The model is
# synthetic with Phi-3's vocabulary and chat template; its text is noise, its shapes are not.
# Then a mesh with Qwen 2.5's template (Hermes calls): calls forced by tool_choice, created and
# streamed (the SDK assembles the call).
source "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v node >/dev/null; then
	echo "SKIP: node is not installed (deploy/setup.sh test installs it)"
	exit 77
fi
if [ ! -f "$root/tests/node/node_modules/openai/package.json" ]; then
	echo "SKIP: the openai package is not installed (npm ci in tests/node; deploy/setup.sh does it)"
	exit 77
fi
dir="$LM_TMP/sdk"
mkdir -p "$dir"
model="$dir/phi3.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 4 --heads 4 --ffn 128 --vocab 32064 \
	--type q8_0 --vocab-from "$LM_SHARED/tokenizer/ggml-vocab-phi-3.gguf" >/dev/null
LM_SLOTS=4 LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4
lm_up "$dir/mesh.toml" "$dir/up.log"
node "$root/tests/node/openai_sdk.mjs" "$LM_URL/v1" phi3 || fail "an SDK call did not do what it should (above)"
lm_down "$dir"
# Calls forced by tool_choice, assembled by the SDK: Qwen 2.5's template (Hermes calls).
qvocab="$LM_SHARED/tokenizer/ggml-vocab-qwen2.gguf"
qtmpl="$LM_SHARED/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
[ -f "$qvocab" ] && [ -f "$qtmpl" ] || { echo "SKIP: $qvocab or $qtmpl is missing"; exit 77; }
mkdir -p "$dir/qwen"
"$LM_BIN" synth --out "$dir/qwen/qwen.gguf" --dim 64 --layers 2 --heads 4 --ffn 128 --type q8_0 \
	--vocab-from "$qvocab" --chat-template "$qtmpl" >/dev/null
LM_SLOTS=2 LM_MAX_SEQ=1024 lm_mesh_toml "$dir/qwen/mesh.toml" "$dir/qwen/qwen.gguf" ipc "$(lm_port)" 0:1 1:2
lm_up "$dir/qwen/mesh.toml" "$dir/qwen/up.log"
node "$root/tests/node/openai_sdk.mjs" "$LM_URL/v1" qwen tools || fail "a forced tool call through the SDK (above)"
echo "ok: the OpenAI SDK $(jq -r .version "$root/tests/node/node_modules/openai/package.json")"
lm_down "$dir/qwen"

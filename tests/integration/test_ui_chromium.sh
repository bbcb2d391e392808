#!/usr/bin/env bash
# The coordinator's pages in a real browser (Debian's chromium, headless, driven over the
# DevTools protocol by ui_browser.mjs; DOM assertions, not pixels), on a mesh of three real
# workers with a bearer token:
#   - the pages are served with a Content-Security-Policy that allows no inline script, and
#     without the token the mesh page shows nothing of the mesh (a wrong token neither);
#   - with it, one box per worker with the slices of /v1/status;
#   - SIGKILL of a worker turns its box to restarting with the reason within 2 s, then back to
#     ready (its restart is held back 3 s by a wrapper, as a large model's load would, so
#     that the state is there to be seen);
#   - SIGSTOP of another: its box shows it hung, with the reason, until it is ready again;
#   - a rolling redeploy of every worker: its outcome, canary and each worker's status;
#   - a chat reply streams, and Stop ends it: active_sequences returns to 0;
#   - a prompt of <img src=x onerror=alert(1)> is shown as text (no element, no dialog);
#   - a second reply streams to its end with its tokens per second.
# Then a model without a chat template: the chat page says it chats in ChatML and does not
# refuse; and [coordinator] ui = false: no pages (404), the API unchanged.
source "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
	echo "SKIP: chromium is not installed (Debian's chromium package; deploy/setup.sh test)"
	exit 77
fi
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
dir="$LM_TMP/ui"
mkdir -p "$dir"
# A Gemma 3 of sliding and global layers (every third global), with Phi-3's vocabulary and
# chat template.
model="$dir/gemma3.gguf"
"$LM_BIN" synth --out "$model" --arch gemma3 --dim 64 --layers 6 --heads 4 --head-dim 16 \
	--window 32 --swa-period 3 --ffn 128 --type q8_0 \
	--vocab-from "$LM_SHARED/tokenizer/ggml-vocab-phi-3.gguf" >/dev/null
# The workers start through a wrapper that waits 3 s first while $dir/slow exists.
real_worker=$LM_WORKER
cat >"$dir/worker.sh" <<EOF
#!/bin/sh
[ ! -e "$dir/slow" ] || sleep 3
exec "$real_worker" "\$@"
EOF
chmod +x "$dir/worker.sh"
token="ui-test-$RANDOM$RANDOM"
LM_AUTH_TOKEN=$token LM_SLOTS=4 LM_MAX_SEQ=4096 \
	lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:6
LM_WORKER="$dir/worker.sh" lm_up "$dir/mesh.toml" "$dir/up.log"

# What is sent: the pages and their assets with the policy, and no data without the token.
for path in / /chat /ui/mesh.js /ui/chat.js /ui/common.js /ui/ui.css; do
	curl -s -D "$dir/head" -o /dev/null "$LM_URL$path"
	grep -q '^HTTP/1.1 200' "$dir/head" || fail "GET $path: $(head -n 1 "$dir/head")"
	csp=$(sed -n 's/^Content-Security-Policy: //Ip' "$dir/head" | tr -d '\r')
	case "$csp" in
	*"script-src 'self'"*) ;;
	*) fail "GET $path: Content-Security-Policy is '$csp'" ;;
	esac
	case "$csp" in *unsafe*) fail "GET $path: the policy allows something unsafe: $csp" ;; esac
	grep -qi '^X-Content-Type-Options: nosniff' "$dir/head" || fail "GET $path: no nosniff"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "$LM_URL/v1/status")
[ "$code" = 401 ] || fail "/v1/status without the token answered $code"
echo "ok: / and /chat and their assets carry a policy without inline script; /v1/status needs the token"

# Each worker's slice, and its layers' kinds by Gemma 3's rule (layer i is global when i + 1 is
# a multiple of the period).
status=$(curl -sf -H "Authorization: Bearer $token" "$LM_URL/v1/status")
workers=$(jq -c '[.workers[] | {name, start, "end": .end, kinds: [range(.start; .end) |
	if (. + 1) % 3 == 0 then "global" else "sliding" end]}]' <<<"$status")
[ "$(jq length <<<"$workers")" = 3 ] || fail "the mesh has not 3 workers: $workers"
jq -e --argjson want "$workers" '[.workers[] | .layer_kinds] == [$want[] | .kinds]' \
	<<<"$status" >/dev/null ||
	fail "/v1/status's layer_kinds are $(jq -c '[.workers[].layer_kinds]' <<<"$status")"
echo "ok: /v1/status gives each worker's layer kinds: $(jq -c '[.workers[].layer_kinds]' <<<"$status")"
# One request around the ring first, so that every hop has a latency to show.
curl -sf -H "Authorization: Bearer $token" "$LM_URL/v1/completions" \
	-d '{"prompt": "Once", "max_tokens": 4}' >/dev/null || fail "a completion failed"
BROWSER=$browser URL=$LM_URL TOKEN=$token PROFILE="$dir/profile" WORKERS=$workers \
	SLOW="$dir/slow" REDEPLOY_BIN=$real_worker timeout 150 node "$root/tests/integration/ui_browser.mjs" mesh ||
	fail "the pages failed in chromium"
lm_down "$dir"

# A model without a chat template (stories260K): the chat page says it chats in ChatML, the
# fallback, and does not refuse.
dir2="$LM_TMP/nochat"
mkdir -p "$dir2"
lm_mesh_toml "$dir2/mesh.toml" "$LM_SHARED/models/stories260K.gguf" ipc "$(lm_port)" 0:5
lm_up "$dir2/mesh.toml" "$dir2/up.log"
BROWSER=$browser URL=$LM_URL TOKEN='' PROFILE="$dir2/profile" \
	timeout 60 node "$root/tests/integration/ui_browser.mjs" nochat ||
	fail "the chat page of a model without a template failed in chromium"
lm_down "$dir2"

# ui = false: no pages, the API as before.
dir3="$LM_TMP/noui"
mkdir -p "$dir3"
lm_mesh_toml "$dir3/mesh.toml" "$LM_SHARED/models/stories260K.gguf" ipc "$(lm_port)" 0:5
sed -i '/^\[coordinator\]/a ui = false' "$dir3/mesh.toml"
lm_up "$dir3/mesh.toml" "$dir3/up.log"
for path in / /chat /ui/mesh.js; do
	code=$(curl -s -o /dev/null -w '%{http_code}' "$LM_URL$path")
	[ "$code" = 404 ] || fail "with ui = false, GET $path answered $code"
done
curl -sf "$LM_URL/v1/status" | jq -e '.workers | length == 1' >/dev/null ||
	fail "with ui = false, /v1/status does not answer"
echo "ok: ui = false: /, /chat and /ui/ answer 404; /v1/status answers"
lm_down "$dir3"
echo "ok: chromium $("$browser" --version 2>/dev/null | awk '{print $2}'): the mesh page and the chat"

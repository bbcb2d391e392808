#!/usr/bin/env bash
# CORS in a real browser (Debian's chromium, headless): with [coordinator] cors_origins naming
# one origin, a page on that origin streams a chat from the API; the same page on another
# origin is refused (its preflight gets 403, so the browser never sends the request) and runs
# nothing, and neither page's "simple" text/plain POST (sent without a preflight) runs
# anything either (415, and 403 for the other origin). The mesh's request counter says what
# ran.
source "$(dirname "$0")/lib.sh"

root=$(cd "$(dirname "$0")/../.." && pwd)
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
	echo "SKIP: chromium is not installed (Debian's chromium package; deploy/setup.sh test)"
	exit 77
fi
dir="$LM_TMP/cors"
mkdir -p "$dir/www"
cp "$root/tests/chat/cors_page.html" "$dir/www/page.html"
model="$dir/phi3.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 4 --heads 4 --ffn 128 --vocab 32064 \
	--type q8_0 --vocab-from "$LM_SHARED/tokenizer/ggml-vocab-phi-3.gguf" >/dev/null
allowed=$(lm_port)
other=$(lm_port)
LM_SLOTS=4 LM_MAX_SEQ=256 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4
sed -i "/^\[coordinator\]/a cors_origins = [\"http://127.0.0.1:$allowed\"]" "$dir/mesh.toml"
lm_up "$dir/mesh.toml" "$dir/up.log"
for p in "$allowed" "$other"; do
	python3 -m http.server --bind 127.0.0.1 --directory "$dir/www" "$p" >"$dir/www.$p.log" 2>&1 &
	LM_PIDS+=($!)
done
for p in "$allowed" "$other"; do
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/page.html" >/dev/null && break; sleep 0.1; done
done
requests() { curl -sf "$LM_URL/metrics" | "$LM_PROM_CHECK" | awk '$1 == "layermesh_requests_total" { print $2 }'; }
refused_origin() {
	curl -sf "$LM_URL/metrics" | "$LM_PROM_CHECK" |
		awk '$1 == "layermesh_http_refused_total{reason=\"origin_not_allowed\"}" { print $2 }'
}

# visit PORT: the page on http://127.0.0.1:PORT, until it reports; prints its report.
visit() {
	local port=$1 pid report
	"$browser" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
		--user-data-dir="$dir/profile.$port" \
		"http://127.0.0.1:$port/page.html?api=$LM_URL" >"$dir/chromium.$port.log" 2>&1 &
	pid=$!
	LM_PIDS+=("$pid")
	for _ in $(seq 600); do
		report=$(sed -n 's/.*"GET \/done?\([^ ]*\) HTTP.*/\1/p' "$dir/www.$port.log" | head -n 1)
		[ -n "$report" ] && break
		sleep 0.1
	done
	kill -TERM "$pid" 2>/dev/null || true
	lm_wait_exit "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
	[ -n "$report" ] || { tail -n 20 "$dir/chromium.$port.log" >&2; fail "the page on :$port never reported"; }
	python3 -c 'import sys, urllib.parse; print(urllib.parse.unquote(sys.argv[1]))' "$report"
}

before=$(requests)
ok=$(visit "$allowed")
echo "allowed origin http://127.0.0.1:$allowed: $ok"
jq -e '.status == 200 and .events >= 3 and .done and .role' <<<"$ok" >/dev/null ||
	fail "the allowed origin's page did not stream a chat: $ok"
after_ok=$(requests)
[ "$after_ok" = $((before + 1)) ] || fail "the allowed page ran $((after_ok - before)) requests, not 1"
refused_before=$(refused_origin)
no=$(visit "$other")
echo "other origin http://127.0.0.1:$other: $no"
jq -e '(.status | not) and (.error | test("Failed to fetch"))' <<<"$no" >/dev/null ||
	fail "the other origin's page was not refused: $no"
[ "$(requests)" = "$after_ok" ] || fail "the other origin's page ran a request"
[ "$(refused_origin)" -ge $((refused_before + 2)) ] ||
	fail "the other origin's preflight and simple POST were not both refused for their origin"
echo "ok: chromium $("$browser" --version 2>/dev/null | awk '{print $2}'): the allowed origin streams a chat; another origin is refused and runs nothing"
lm_down "$dir"

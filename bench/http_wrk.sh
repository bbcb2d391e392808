#!/usr/bin/env bash
# bench/http_wrk.sh — the HTTP API's throughput with wrk, two builds side by side.
#
#   bench/http_wrk.sh [--seconds S] [--rounds R] LABEL=BIN_DIR [LABEL=BIN_DIR ...]
#
# Each BIN_DIR holds a `layermesh` and a `layermesh-worker`. For each build a mesh of
# stories260K over three workers (ipc) comes up on its own port; then R rounds, each running
# every build in turn (interleaved, so machine load falls on all alike) with wrk -t2 at 32 and
# 128 connections for S seconds (default 10) on two workloads:
#   completions  POST /v1/completions {"prompt": "Once upon a time", "max_tokens": 8,
#                "temperature": 0} with Content-Type: application/json
#   models       GET /v1/models (the HTTP server alone)
# It prints one line per build, workload and connection count: requests/s of every round and
# their median, average latency, non-2xx and socket errors; and checks that the greedy text is
# the same before and after the load. wrk: Debian's wrk package.
set -euo pipefail
secs=10 rounds=3
builds=()
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) secs=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	-h | --help) sed -n '2,17p' "$0"; exit 0 ;;
	*=*) builds+=("$1"); shift ;;
	*) echo "http_wrk: unexpected argument '$1'" >&2; exit 2 ;;
	esac
done
[ ${#builds[@]} -gt 0 ] || { echo "http_wrk: give LABEL=BIN_DIR" >&2; exit 2; }
command -v wrk >/dev/null || { echo "http_wrk: wrk is not installed (Debian's wrk)" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
model=${LM_MODEL:-$here/models/stories260K.gguf}
[ -f "$model" ] || model=${LM_SHARED:-$here/../shared}/models/stories260K.gguf
tmp=$(mktemp -d /tmp/http_wrk.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait; rm -rf "$tmp"' EXIT

# up LABEL BIN PORT: a mesh in $tmp/LABEL, ready.
up() {
	local label=$1 bin=$2 port=$3 d=$tmp/$1
	mkdir -p "$d"
	{
		printf '[model]\npath = "%s"\nslots = 16\nmax_batch = 64\n' "$model"
		printf '[coordinator]\nhttp = "127.0.0.1:%s"\ndata_in = "ipc://%s/c.data"\nlog_level = "warn"\n' "$port" "$d"
		for i in 0 1 2; do
			printf '[[worker]]\nname = "w%d"\ndata = "ipc://%s/w%d.data"\ncontrol = "ipc://%s/w%d.ctl"\n' "$i" "$d" "$i" "$d" "$i"
			printf 'http = "127.0.0.1:%d"\nmemory_limit = "8MiB"\n' $((port + 10 + i))
		done
	} >"$d/mesh.toml"
	"$bin/layermesh" up "$d/mesh.toml" --worker-bin "$bin/layermesh-worker" >"$d/up.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return; sleep 0.1; done
	echo "http_wrk: $label did not come up: $(tail -n 3 "$d/up.log")" >&2
	exit 1
}
greedy() {
	curl -s "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}' | jq -c '.choices[0].text'
}
cat >"$tmp/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}'
wrk.headers["Content-Type"] = "application/json"
LUA

declare -A port before
k=0
for b in "${builds[@]}"; do
	label=${b%%=*}
	port[$label]=$((18000 + RANDOM % 500 + 600 * k))
	up "$label" "${b#*=}" "${port[$label]}"
	before[$label]=$(greedy "${port[$label]}")
	k=$((k + 1))
done
declare -A rps lat non2 errs
for ((r = 0; r < rounds; r++)); do
	for c in 32 128; do
		for w in completions models; do
			for b in "${builds[@]}"; do
				label=${b%%=*}
				url=http://127.0.0.1:${port[$label]}
				if [ $w = completions ]; then
					out=$(wrk -t2 -c$c -d${secs}s -s "$tmp/post.lua" "$url/v1/completions" 2>&1)
				else
					out=$(wrk -t2 -c$c -d${secs}s "$url/v1/models" 2>&1)
				fi
				key="$label $w $c"
				rps[$key]+="$(awk '/Requests\/sec/ { print $2 }' <<<"$out") "
				lat[$key]+="$(awk '/Latency/ { print $2 }' <<<"$out") "
				non2[$key]=$(( ${non2[$key]:-0} + $(awk '/Non-2xx/ { print $5 }' <<<"$out" | grep . || echo 0) ))
				errs[$key]+="$(grep -o 'Socket errors.*' <<<"$out" | tr -d ',' | tr ' ' '_' || true) "
			done
		done
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
printf '%-10s %-12s %5s  %-34s %10s  %-30s %8s  %s\n' build workload conns "req/s per round" median "latency avg per round" non-2xx "socket errors"
for c in 32 128; do
	for w in completions models; do
		for b in "${builds[@]}"; do
			label=${b%%=*}
			key="$label $w $c"
			printf '%-10s %-12s %5s  %-34s %10s  %-30s %8s  %s\n' "$label" "$w" "$c" "${rps[$key]}" \
				"$(median <<<"${rps[$key]}")" "${lat[$key]}" "${non2[$key]}" "${errs[$key]:-none}"
		done
	done
done
for b in "${builds[@]}"; do
	label=${b%%=*}
	after=$(greedy "${port[$label]}")
	[ "$after" = "${before[$label]}" ] && same=unchanged || same="CHANGED: ${before[$label]} -> $after"
	echo "$label: greedy text after the load: $same"
done

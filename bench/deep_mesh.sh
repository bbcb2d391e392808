#!/usr/bin/env bash
# bench/deep_mesh.sh [BUILD_DIR] — very deep meshes on one machine (the seeds' topology: a
# 60-layer model cut into single-layer workers), against the same model in shallower cuts:
#
#   1. a synthetic 60-layer llama (dim 64, 8/4 heads, ffn 172, stories260K's vocabulary, f32)
#      on 1 worker of 60 layers, 20 workers of 3 and 60 of 1 (ipc://);
#   2. each: its bring-up time, the coordinator's threads and file descriptors and the
#      workers' resident memory; greedy answers for four prompts held to `layermesh run`;
#      per-token decode latency of one greedy sequence (median of 3, 128 tokens: the API's
#      predicted_ms, which runs from the first token to the last, over predicted_n - 1
#      intervals), against hops (workers + 1, the coordinator's push and pull) x the hop cost
#      fitted over the three cuts; aggregate tokens/s with 1, 16 and 64 sequences in flight
#      (64 tokens each, seeded sampling at temperature 0.8 so that the sequences differ): how
#      much of the pipeline's bubble concurrency hides. Every request must answer 200;
#   3. on 60 single-layer workers: the storm of tests/integration/test_storm.sh (a SIGKILL
#      every 1.5 s for 20 s, 48 clients), then two full `layermesh redeploy --all --batch 10`
#      under 16 clients, which must fail no request and change no answer.
#
# It prints a heading and a Markdown table for a person to paste into bench/RESULTS.md (it
# writes nothing there itself), then the storm's and the redeploys' figures and a last line
# that says whether every check held (exit 1 when one did not). The machine may be shared: the
# load average is printed at the start and the end.
#
# LM_SHARED overrides the shared data directory; by default it is the build's shared_dir
# (meson introspect), as for bench/run.sh. tests/integration/test_deep.sh is the bounded form
# that CI runs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
export LM_BIN=$build/coordinator/layermesh LM_WORKER=$build/worker/layermesh-worker
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
bench_require deep_mesh "$build" "$LM_BIN" "$LM_WORKER"
LM_SHARED=$(bench_shared_dir "$build")
export LM_SHARED
vocab="$LM_SHARED/models/stories260K.gguf"
[ -f "$vocab" ] || {
	echo "deep_mesh: $vocab is missing (the build's shared_dir, or set LM_SHARED)" >&2
	exit 1
}
source "$here/tests/integration/lib.sh"

model="$LM_TMP/deep60.gguf"
"$LM_BIN" synth --out "$model" --dim 64 --layers 60 --heads 8 --kv-heads 4 --ffn 172 \
	--vocab 512 --type f32 --vocab-from "$vocab" --ctx 512 >/dev/null
prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!")
for i in "${!prompts[@]}"; do
	"$LM_BIN" run --model "$model" --prompt "${prompts[$i]}" -n 64 --temp 0 --ctx 256 --ids \
		>"$LM_TMP/want.$i" 2>/dev/null
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "### $(date -u '+%Y-%m-%d %H:%M') UTC: deep meshes (bench/deep_mesh.sh), $cpu," \
	"$(nproc) CPUs, commit $commit"
echo
echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
single=$("$LM_BIN" run --model "$model" --prompt "Once upon a time" -n 128 --temp 0 --ctx 256 \
	2>&1 >/dev/null | sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p')
echo "The single process (layermesh run): decode $single tok/s."
echo

# deep_toml FILE WORKERS LAYERS_EACH: a pinned ipc mesh of the 60 layers.
deep_toml() {
	local file=$1 n=$2 per=$3 r=() i
	for ((i = 0; i < n; i++)); do r+=("$((i * per)):$(((i + 1) * per))"); done
	LM_SLOTS=64 LM_MAX_SEQ=256 lm_mesh_toml "$file" "$model" ipc "$(lm_port)" "${r[@]}"
	sed -i 's/^memory_limit = "1GiB"/memory_limit = "512MiB"/' "$file"
}

# throughput C: C requests at once, 64 tokens each, seeded sampling at temperature 0.8; sets
# TP to the round's tokens/s. Any answer but a 200 fails the run: a failed request would only
# lower the figure.
throughput() {
	local c=$1 i t0 ns toks code pids=()
	rm -f "$LM_TMP"/tp.*
	for ((i = 0; i < c; i++)); do
		jq -nc --arg p "${prompts[$((i % 4))]}" --argjson s "$i" \
			'{prompt: $p, max_tokens: 64, temperature: 0.8, seed: $s}' >"$LM_TMP/tp.$i.req"
	done
	t0=$(date +%s%N)
	for ((i = 0; i < c; i++)); do
		curl -s -m 300 -o "$LM_TMP/tp.$i.json" -w '%{http_code}' \
			-H 'Content-Type: application/json' --data-binary "@$LM_TMP/tp.$i.req" \
			"$LM_URL/v1/completions" >"$LM_TMP/tp.$i.code" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || true; done # curl's failures show as their codes
	ns=$(($(date +%s%N) - t0))
	for ((i = 0; i < c; i++)); do
		code=$(cat "$LM_TMP/tp.$i.code")
		[ "$code" = 200 ] || fail "$cut, $c sequences: request $i got HTTP $code:" \
			"$(head -c 300 "$LM_TMP/tp.$i.json" 2>/dev/null)"
	done
	toks=$(cat "$LM_TMP"/tp.*.json | jq -s 'map(.usage.completion_tokens) | add')
	TP=$(awk -v n="$toks" -v ns="$ns" 'BEGIN { printf "%.0f", n / (ns / 1e9) }')
}

# latency DIR: sets LAT to the ms per decoded token of one greedy 128-token request.
latency() {
	local code
	code=$(curl -s -m 300 -o "$1/lat.json" -w '%{http_code}' -H 'Content-Type: application/json' \
		-d '{"prompt": "Once upon a time", "max_tokens": 128, "temperature": 0}' \
		"$LM_URL/v1/completions") || true
	[ "$code" = 200 ] || fail "$cut: a latency request got HTTP $code: $(head -c 300 "$1/lat.json")"
	LAT=$(jq -e '.timings | select(.predicted_n > 1) | .predicted_ms / (.predicted_n - 1)' \
		"$1/lat.json") || fail "$cut: fewer than 2 tokens to time: $(head -c 300 "$1/lat.json")"
}

declare -A lat tp1 tp16 tp64 up_ms
for cut in 1x60 20x3 60x1; do
	n=${cut%x*}
	per=${cut#*x}
	dir="$LM_TMP/$cut"
	mkdir -p "$dir"
	chmod 0700 "$dir"
	deep_toml "$dir/mesh.toml" "$n" "$per"
	t0=$(date +%s%N)
	lm_up "$dir/mesh.toml" "$dir/up.log"
	up_ms[$cut]=$((($(date +%s%N) - t0) / 1000000))
	for i in "${!prompts[@]}"; do
		"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$i]}" -n 64 --temp 0 --ids \
			--timeout 120 >"$dir/got.$i" 2>"$dir/got.$i.err" ||
			fail "$cut: no answer for '${prompts[$i]}': $(cat "$dir/got.$i.err")"
		cmp -s "$LM_TMP/want.$i" "$dir/got.$i" || fail "$cut: '${prompts[$i]}' differs from run"
	done
	t=()
	for r in 1 2 3; do
		latency "$dir"
		t+=("$LAT")
	done
	lat[$cut]=$(printf '%s\n' "${t[@]}" | sort -g | sed -n 2p)
	throughput 1
	tp1[$cut]=$TP
	throughput 16
	tp16[$cut]=$TP
	throughput 64
	tp64[$cut]=$TP
	threads=$(awk '/Threads/ { print $2 }' "/proc/$LM_UP_PID/status")
	fds=$(find "/proc/$LM_UP_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
	rss=0
	for p in $(pgrep -f "layermesh-worker --name .*$dir/" || true); do
		# A worker may exit between pgrep and the read: it counts 0.
		kib=$(awk '/VmRSS/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
		rss=$((rss + ${kib:-0}))
	done
	echo "- $cut: up in ${up_ms[$cut]} ms; the coordinator $threads threads, $fds descriptors;" \
		"the workers $((rss / 1024)) MiB resident in all; ${#prompts[@]} of ${#prompts[@]}" \
		"greedy answers equal run's"
	lm_down "$dir"
done

# The hop cost: least squares of latency = compute + hops x hop over the three cuts.
fit=$(for cut in 1x60 20x3 60x1; do echo "$((${cut%x*} + 1)) ${lat[$cut]}"; done |
	awk '{ n++; sx += $1; sy += $2; sxx += $1 * $1; sxy += $1 * $2 }
	     END { b = (n * sxy - sx * sy) / (n * sxx - sx * sx); a = (sy - b * sx) / n;
	           printf "%.4f %.4f", a, b }')
read -r compute hop <<<"$fit"
echo
echo "| cut | hops | ms per token, greedy, 1 seq | compute + hops x hop (fit) |" \
	"tok/s, seeded at 0.8: 1 seq | 16 seqs | 64 seqs | 64 vs 1 |"
echo "|---|---|---|---|---|---|---|---|"
for cut in 1x60 20x3 60x1; do
	h=$((${cut%x*} + 1))
	awk -v c="$cut" -v h="$h" -v l="${lat[$cut]}" -v a="$compute" -v b="$hop" \
		-v t1="${tp1[$cut]}" -v t16="${tp16[$cut]}" -v t64="${tp64[$cut]}" 'BEGIN {
		printf "| %s | %d | %.2f | %.2f + %d x %.3f = %.2f | %d | %d | %d | %.1fx |\n",
			c, h, l, a, h, b, a + h * b, t1, t16, t64, (t1 > 0 ? t64 / t1 : 0) }'
done
echo
echo "Fitted hop cost $hop ms (the coordinator's push and pull count as hops); compute" \
	"$compute ms a token."

# ---------------------------------------------------------------- the storm and redeploys
echo
storm_rc=0
LM_STORM_MESHES=60 bash "$here/tests/integration/test_storm.sh" >"$LM_TMP/storm.out" 2>&1 ||
	storm_rc=$?
if [ "$storm_rc" -eq 0 ]; then
	grep -E '^(load|storm|  a failure)' "$LM_TMP/storm.out" || true
else
	echo "the storm on 60 workers failed (exit $storm_rc); its whole output:"
	cat "$LM_TMP/storm.out"
fi
dir="$LM_TMP/redeploy"
mkdir -p "$dir"
chmod 0700 "$dir"
deep_toml "$dir/mesh.toml" 60 1
lm_up "$dir/mesh.toml" "$dir/up.log"
lm_specs_init "$dir" "$model" 256 32
lm_load_start "$dir" 16 400
sleep 2
for r in 1 2; do
	t0=$(date +%s%N)
	"$LM_BIN" redeploy --url "$LM_URL" --all --batch 10 >"$dir/redeploy.$r" 2>&1 ||
		fail "redeploy $r: $(tail -n 3 "$dir/redeploy.$r")"
	echo "redeploy --all --batch 10 ($r of 2): $((($(date +%s%N) - t0) / 1000000)) ms," \
		"$(tail -n 1 "$dir/redeploy.$r")"
done
lm_load_stop "$dir"
lm_load_tally "$dir"
lm_down "$dir"
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
[ "$LOAD_FAILED" -eq 0 ] || fail "$LOAD_FAILED of $LOAD_TOTAL requests failed across the redeploys"
[ "$LOAD_DIFFER" -eq 0 ] || fail "$LOAD_DIFFER of $LOAD_TOTAL answers differed across the redeploys"
[ "$storm_rc" -eq 0 ] || fail "the storm on 60 workers failed (its output is above)"
echo "deep_mesh: ok: 3 cuts, $((3 * ${#prompts[@]})) greedy answers equal run's, every" \
	"throughput request answered; the storm on 60 workers passed; 2 redeploys under 16" \
	"clients: $LOAD_TOTAL requests, 0 failed, 0 differ"

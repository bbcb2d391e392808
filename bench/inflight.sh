#!/usr/bin/env bash
# bench/inflight.sh — batches in flight where the workers share one machine: aggregate decode
# through real meshes (`layermesh up`, one thread a worker, ipc) for each setting of
# [coordinator] batches_in_flight, the settings alternating.
#
#   bench/inflight.sh [--reps N] [--passes N] [--build DIR] [--settings "workers default 2 4"]
#                     [--meshes "0.85b deep20 deep60"] [--record]
#
# Meshes:
#   0.85b   the synthetic 0.85B llama q8_0 of bench/run.sh over 3 workers (layers 0-6, 6-12,
#           12-16: run.sh's balanced fence), 16 sequences at once;
#   deep20  a synthetic 60-layer llama (dim 64, f32; bench/deep_mesh.sh's) over 20 workers of
#           3 layers, 64 sequences at once;
#   deep60  the same over 60 workers of one layer, 64 sequences at once.
# Each round: the sequences' requests at once (64 tokens each, seeded sampling at temperature
# 0.8, so that they differ), the generated tokens over the round's wall time. Settings:
# "workers" writes batches_in_flight = the worker count (one per worker: the default of workers
# on their own machines), "default" leaves it out (what `layermesh up` then takes, shown by
# /v1/status), a number writes it. Each pass brings each setting's mesh up once and runs --reps
# rounds on it; the passes alternate the settings' order. Every request must answer 200.
# Output: a markdown section on stdout (with --record also appended to bench/RESULTS.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
REPS=3
PASSES=2
SETTINGS="workers default"
MESHES="0.85b deep20 deep60"
RECORD=0
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--passes) PASSES=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--settings) SETTINGS=$2; shift ;;
	--meshes) MESHES=$2; shift ;;
	--record) RECORD=1 ;;
	-h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "inflight.sh: unknown option $1 (--help)" >&2; exit 2 ;;
	esac
	shift
done
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
LM=$BUILD/coordinator/layermesh
WORKER=$BUILD/worker/layermesh-worker
bench_require inflight.sh "$BUILD" "$LM" "$WORKER"
SHARED=$(bench_shared_dir "$BUILD")
STORIES=$SHARED/models/stories260K.gguf
VOCAB=$SHARED/tokenizer/ggml-vocab-llama-spm.gguf
for f in "$STORIES" "$VOCAB"; do
	[ -f "$f" ] || { echo "inflight.sh: $f is missing (LM_SHARED)" >&2; exit 1; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lm-inflight.XXXXXX")
trap bench_cleanup EXIT

mkdir -p "$ROOT/bench/models"
big=$ROOT/bench/models/synth-0.85b-q8_0.gguf
[ -f "$big" ] || "$LM" synth --out "$big" --dim 2048 --layers 16 --heads 32 --kv-heads 8 \
	--ffn 5632 --type q8_0 --seed 1 --ctx 2048 --vocab-from "$VOCAB" >/dev/null
deep=$TMP/deep60.gguf
"$LM" synth --out "$deep" --dim 64 --layers 60 --heads 8 --kv-heads 4 --ffn 172 --vocab 512 \
	--type f32 --vocab-from "$STORIES" --ctx 512 >/dev/null

# fence N PER: N workers of PER layers each, as bench_mesh_up takes it.
fence() {
	local i f=""
	for ((i = 0; i < $1; i++)); do f+="$((i * $2)):$(((i + 1) * $2)) "; done
	echo "$f"
}

# round C: C requests at once; prints the round's generated tokens per second.
round() {
	local c=$1 i t0 ns pids=()
	rm -f "$TMP"/r.*
	t0=$(date +%s%N)
	for ((i = 0; i < c; i++)); do
		curl -s -m 600 -o "$TMP/r.$i.json" -w '%{http_code}' -H 'Content-Type: application/json' \
			-d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 64, \"temperature\": 0.8, \"seed\": $i}" \
			"$URL/v1/completions" >"$TMP/r.$i.code" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || true; done
	ns=$(($(date +%s%N) - t0))
	for ((i = 0; i < c; i++)); do
		[ "$(cat "$TMP/r.$i.code")" = 200 ] || {
			echo "inflight.sh: a request got HTTP $(cat "$TMP/r.$i.code"): $(head -c 300 "$TMP/r.$i.json")" >&2
			exit 1
		}
	done
	cat "$TMP"/r.*.json | jq -s --argjson ns "$ns" \
		'map(.usage.completion_tokens) | add / ($ns / 1e9) | . * 10 | round / 10'
}

# one MESH SETTING: a pass of one setting on one mesh; appends its rounds to $TMP/res.MESH.SETTING
# and the batches in flight /v1/status showed to $TMP/bif.MESH.SETTING.
one() {
	local mesh=$1 set=$2 model n per seqs memory coord="" r
	case $mesh in
	0.85b) model=$big n=3 per=0 seqs=16 memory=4GiB ;;
	deep20) model=$deep n=20 per=3 seqs=64 memory=512MiB ;;
	deep60) model=$deep n=60 per=1 seqs=64 memory=512MiB ;;
	*) echo "inflight.sh: no mesh $mesh" >&2; exit 2 ;;
	esac
	case $set in
	workers) coord="batches_in_flight = $n\n" ;;
	default) ;;
	*) coord="batches_in_flight = $set\n" ;;
	esac
	local f
	if [ "$per" = 0 ]; then f="0:6 6:12 12:16"; else f=$(fence "$n" "$per"); fi
	BENCH_SLOTS=$seqs bench_mesh_up "$mesh-$set" "$model" 256 "$memory" "$f" "$coord" "" 600
	curl -sf "$URL/v1/status" | jq '.scheduler.batches_in_flight' >"$TMP/bif.$mesh.$set"
	for ((r = 0; r < REPS; r++)); do round "$seqs" >>"$TMP/res.$mesh.$set"; done
	mesh_down
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
fam=$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
mdl=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
read -r -a sets <<<"$SETTINGS"
for mesh in $MESHES; do
	for ((p = 0; p < PASSES; p++)); do
		order=("${sets[@]}")
		if ((p % 2)); then
			order=()
			for ((i = ${#sets[@]} - 1; i >= 0; i--)); do order+=("${sets[$i]}"); done
		fi
		for s in "${order[@]}"; do one "$mesh" "$s"; done
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

out=$TMP/section.md
{
	echo "### $(date -u '+%Y-%m-%d %H:%M') UTC: batches in flight (bench/inflight.sh), $cpu" \
		"(family $fam model $mdl), $(nproc) CPUs, commit $commit"
	echo
	echo "Load average $load0 at the start, $load1 at the end; $(($(date +%s) - t0)) s." \
		"$PASSES passes of $REPS rounds per setting, the settings' order alternating."
	echo
	echo "| mesh | batches_in_flight | in flight (/v1/status) | tok/s, median (min-max) | vs one per worker |"
	echo "|---|---|---|---|---|"
	for mesh in $MESHES; do
		ref=""
		[ -f "$TMP/res.$mesh.workers" ] && ref=$(median <"$TMP/res.$mesh.workers")
		for s in "${sets[@]}"; do
			m=$(median <"$TMP/res.$mesh.$s")
			lo=$(sort -g "$TMP/res.$mesh.$s" | head -n 1)
			hi=$(sort -g "$TMP/res.$mesh.$s" | tail -n 1)
			vs=""
			[ -z "$ref" ] || vs=$(awk -v a="$m" -v b="$ref" 'BEGIN { printf "%.2fx", a / b }')
			echo "| $mesh | $s | $(cat "$TMP/bif.$mesh.$s") | $m ($lo-$hi) | $vs |"
		done
	done
} >"$out"
cat "$out"
if [ "$RECORD" = 1 ]; then
	{ echo; cat "$out"; } >>"$ROOT/bench/RESULTS.md"
fi

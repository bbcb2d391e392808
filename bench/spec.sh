#!/usr/bin/env bash
# bench/spec.sh — speculative decoding through a real mesh, on and off, interleaved.
#
#   bench/spec.sh [--reps N] [--tokens T] [--build DIR] [--record]
#
# Meshes of stories260K over ipc (`layermesh up`, one thread a worker), each with a
# [speculative] table; every request runs twice, once with "speculate": false, alternately, so
# both see the same machine. Measured, per configuration (medians over --reps):
#   - decode tokens/s of one stream (the API's predicted_n / predicted_ms), off and on, over
#     10 x --reps pairs of requests; the speedup is the median of the pairs' ratios;
#   - the acceptance rate (accepted / drafted drafts, from /metrics);
#   - sixteen streams at once: the mesh's tokens/s in all (tokens over the wall time of the
#     round), off and on, over 10 x --reps pairs of rounds; the speedup is the median of the
#     pairs' ratios.
# Configurations:
#   ngram-repeat  3 workers, n-gram lookup, a prompt that repeats itself
#   ngram-story   3 workers, n-gram lookup, an ordinary prompt (low acceptance)
#   draft-1       1 worker,  drafts from stories260K's own q8_0 copy (`layermesh quantize`)
#   draft-3       3 workers, the same
#   draft-5       5 workers (one layer each), the same: the longest pipeline stories260K has
# Then the sliding layers' ring memory against llama.cpp's --swa-full sizing: llama.cpp's own
# log of its caches (lm_oracle --verbose) beside a mesh worker's KV bytes (/v1/status), on a
# synthetic Gemma 4, and the planner's figures for the mission's geometry at a long context.
#
# The machine may be shared: the load average is printed at the start and the end. Output: a
# markdown section on stdout (with --record also appended to bench/RESULTS.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
REPS=3
TOKENS=128
RECORD=0
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--tokens) TOKENS=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--record) RECORD=1 ;;
	*) echo "bench/spec.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
LM=$BUILD/coordinator/layermesh
WORKER=$BUILD/worker/layermesh-worker
ORACLE=$BUILD/tests/oracle/lm_oracle
bench_require bench/spec.sh "$BUILD" "$LM" "$WORKER"
SHARED=$(bench_shared_dir "$BUILD")
STORIES=$SHARED/models/stories260K.gguf
[ -f "$STORIES" ] || { echo "bench/spec.sh: $STORIES is missing (LM_SHARED)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/lm-bench-spec.XXXXXX)
trap bench_cleanup EXIT
OUT=$TMP/out.md
say() { echo "$*" >>"$OUT"; }

"$LM" quantize --in "$STORIES" --out "$TMP/draft.gguf" --type q8_0

# mesh_up NAME FENCE SPEC: a mesh of stories260K over the workers of FENCE ("0:2 2:4 4:5").
mesh_up() {
	bench_mesh_up "$1" "$STORIES" 512 256MiB "$2" "" "[speculative]\n$3\n\n" 60
}

# one PROMPT SPECULATE: decode tokens/s of one request.
one() {
	curl -sf -H "Content-Type: application/json" "$URL/v1/completions" -d "{\"prompt\": \"$1\", \"max_tokens\": $TOKENS, \
\"temperature\": 0, \"speculate\": $2}" |
		jq -r '.timings | (.predicted_n / .predicted_ms * 1000)'
}

# many PROMPT SPECULATE: 16 requests at once; the tokens/s of the round.
many() {
	local t0 t1 k pids=()
	t0=$(date +%s.%N)
	for k in $(seq 16); do
		curl -sf -H "Content-Type: application/json" "$URL/v1/completions" -d "{\"prompt\": \"$1\", \"max_tokens\": $TOKENS, \
\"temperature\": 0, \"speculate\": $2}" >/dev/null &
		pids+=($!)
	done
	for k in "${pids[@]}"; do wait "$k"; done
	t1=$(date +%s.%N)
	python3 -c "print(16 * $TOKENS / ($t1 - $t0))"
}

# pairs FN PROMPT OFF ON: 10 x REPS pairs of `FN PROMPT false` and `FN PROMPT true`, back to back,
# appended to the arrays named OFF and ON; each goes first in every other pair, so that neither
# always follows the other.
pairs() {
	local fn=$1 prompt=$2 i
	local -n pairs_off=$3 pairs_on=$4
	for ((i = 0; i < 10 * REPS; i++)); do
		if ((i % 2 == 0)); then
			pairs_off+=("$("$fn" "$prompt" false)")
			pairs_on+=("$("$fn" "$prompt" true)")
		else
			pairs_on+=("$("$fn" "$prompt" true)")
			pairs_off+=("$("$fn" "$prompt" false)")
		fi
	done
}

# pair_ratio "ON..." "OFF...": the median of on[i] / off[i].
pair_ratio() {
	paste -d' ' <(tr ' ' '\n' <<<"$1") <(tr ' ' '\n' <<<"$2") | awk '{print $1 / $2}' | median
}

# measure NAME FENCE SPEC PROMPT: one table row.
measure() {
	local name=$1 fence=$2 spec=$3 prompt=$4 off=() on=() moff=() mon=() d0 a0
	mesh_up "$name" "$fence" "$spec"
	one "$prompt" false >/dev/null # warm up
	one "$prompt" true >/dev/null
	d0=$(metric layermesh_spec_drafted_tokens_total)
	a0=$(metric layermesh_spec_accepted_tokens_total)
	# A request, or a round of 16 streams, lasts a fraction of a second, and on a 2-vCPU VM
	# single pairs' ratios spread by +-12% (Zen 5, 80 pairs of ngram-story): 10 x REPS pairs of
	# each, and a speedup is the median of the pairs' ratios (the two of a pair run back to
	# back, so their ratio leaves out the machine's slower drifts).
	pairs one "$prompt" off on
	local d1 a1
	d1=$(metric layermesh_spec_drafted_tokens_total)
	a1=$(metric layermesh_spec_accepted_tokens_total)
	pairs many "$prompt" moff mon
	mesh_down
	local so son mo mon_m
	so=$(echo "${off[*]}" | median)
	son=$(echo "${on[*]}" | median)
	mo=$(echo "${moff[*]}" | median)
	mon_m=$(echo "${mon[*]}" | median)
	python3 - "$name" "$so" "$son" "$mo" "$mon_m" "$((d1 - d0))" "$((a1 - a0))" \
		"$(pair_ratio "${on[*]}" "${off[*]}")" "$(pair_ratio "${mon[*]}" "${moff[*]}")" >>"$OUT" <<'EOF'
import sys
n, so, son, mo, mon, d, a, p1, p16 = sys.argv[1:]
so, son, mo, mon, d, a = float(so), float(son), float(mo), float(mon), int(d), int(a)
print("| %s | %.0f | %.0f | %.2fx | %.1f%% (%d of %d) | %.0f | %.0f | %.2fx |" %
      (n, so, son, float(p1), 100.0 * a / d if d else 0.0, a, d, mo, mon, float(p16)))
EOF
}

say "### $(date -u '+%Y-%m-%d %H:%M') UTC: speculative decoding, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, commit $(git -C "$ROOT" rev-parse --short HEAD)"
say ""
say "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg). stories260K, $TOKENS greedy"
say "tokens a request, drafts of up to 4 tokens; $((10 * REPS)) pairs of requests (of rounds of 16 streams),"
say "off and on back to back, each first in every other pair: tok/s are medians, a speedup the"
say "median of the pairs' ratios."
say ""
say "| configuration | 1 stream off tok/s | on tok/s | speedup | accepted | 16 streams off tok/s | on tok/s | speedup |"
say "|---|---|---|---|---|---|---|---|"
REPEAT="The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
STORY="Once upon a time"
NGRAM='source = "ngram"\nmax_draft = 4'
DRAFT="draft_model = \"$TMP/draft.gguf\"\nmax_draft = 4"
measure ngram-repeat "0:2 2:4 4:5" "$NGRAM" "$REPEAT"
measure ngram-story "0:2 2:4 4:5" "$NGRAM" "$STORY"
measure draft-1 "0:5" "$DRAFT" "$STORY"
measure draft-3 "0:2 2:4 4:5" "$DRAFT" "$STORY"
measure draft-5 "0:1 1:2 2:3 3:4 4:5" "$DRAFT" "$STORY"

# ---- ring memory against --swa-full
"$LM" synth --out "$TMP/gemma4.gguf" --arch gemma4 --head-dim 64 --head-dim-swa 32 \
	--kv-heads-swa 4 --window 8 --swa-period 3 --dim 256 --layers 6 --heads 8 --kv-heads 2 \
	--ffn 512 --vocab 512 --type f32 --seed 7 --vocab-from "$STORIES" >/dev/null
swa_mib() { # llama.cpp's SWA cache in MiB for n_ctx 1024, one sequence
	"$ORACLE" --model "$TMP/gemma4.gguf" --ids "1 2 3" --ctx 1024 "$@" --verbose \
		--logits-last /dev/null 2>&1 | awk '/llama_kv_cache: size =/ { v = $4 } END { print v }'
}
cells() {
	"$ORACLE" --model "$TMP/gemma4.gguf" --ids "1 2 3" --ctx 1024 "$@" --verbose \
		--logits-last /dev/null 2>&1 | sed -n 's/.*creating     SWA KV cache, size = \([0-9]*\) cells/\1/p'
}
say ""
say "Sliding-window rings against llama.cpp's --swa-full: a synthetic Gemma 4 (6 layers, 4 of"
say "them sliding with window 8, 4 KV heads x 32, f32 cache), 1024 positions, one sequence."
say ""
say "| cache | rows per sliding layer | sliding layers' KV |"
say "|---|---|---|"
say "| llama.cpp --swa-full (log) | $(cells --swa-full) | $(swa_mib --swa-full) MiB |"
say "| llama.cpp without it (log; cannot roll back for speculation) | $(cells) | $(swa_mib) MiB |"
dir=$TMP/ring
mkdir -p "$dir"
mesh_ring() { # MAX_BATCH: a one-worker mesh's KV bytes of its 4 sliding layers
	local http=$((20000 + RANDOM % 10000))
	printf '[model]\npath = "%s"\nmax_seq_len = 1024\nslots = 1\nmax_batch = %d\n\n[coordinator]\nhttp = "127.0.0.1:%d"\ndata_in = "ipc://%s/c.data"\n\n[speculative]\nmax_draft = 4\n\n[[worker]]\nname = "w0"\ndata = "ipc://%s/w0.data"\ncontrol = "ipc://%s/w0.ctl"\nhttp = "127.0.0.1:%d"\nmemory_limit = "256MiB"\n' \
		"$TMP/gemma4.gguf" "$1" "$http" "$dir" "$dir" "$dir" $((http + 1)) >"$dir/mesh.toml"
	URL=http://127.0.0.1:$http
	"$LM" up "$dir/mesh.toml" --worker-bin "$WORKER" --timeout 60 >"$dir/up.log" 2>&1 &
	UP_PID=$!
	for i in $(seq 600); do curl -sf "$URL/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
	curl -sf "$URL/v1/status" | jq '.workers[0].status.kv_bytes_per_layer'
	mesh_down
}
for mb in 8 64; do
	per=$(mesh_ring $mb)
	# layers 2 and 5 are global (each third); the others slide. Two slots: one kept for probes.
	swa=$(jq '[.[0], .[1], .[3], .[4]] | add' <<<"$per")
	say "| layermesh, max_batch $mb, drafts of 4 (worker /v1/status) | $((8 + mb - 1)) | $(python3 -c "print('%.3f' % ($swa / 2 / 1048576))") MiB |"
done

# The mission's geometry (Gemma 4's 60 layers: 50 sliding of window 1024, 16 KV heads x 256;
# 10 global of 4 x 512), f16 cache, one sequence of 32768 positions: the planner's bytes for a
# mesh that speculates (max_batch 64, drafts of 4), beside llama.cpp's sizing by the rule its
# log shows above (a sliding layer holds n_ctx cells with --swa-full, else n_swa + n_ubatch
# rounded up to 256, n_ubatch 512).
"$LM" synth --out "$TMP/g4-mission.gguf" --arch gemma4 --layers 60 --dim 5376 --heads 32 \
	--kv-heads 4 --kv-heads-swa 16 --head-dim 512 --head-dim-swa 256 --ffn 21504 --vocab 262144 \
	--ctx 131072 --window 1024 --swa-period 6 --type q4_K --tied --sparse >/dev/null
printf '[model]\npath = "%s"\nmax_seq_len = 32768\nslots = 1\nmax_batch = 64\nkv_type_k = "f16"\nkv_type_v = "f16"\n\n[coordinator]\ndata_in = "ipc://%s/c.data"\n\n[speculative]\nmax_draft = 4\n\n[[worker]]\nname = "w0"\ndata = "ipc://%s/w0.data"\ncontrol = "ipc://%s/w0.ctl"\nhttp = "127.0.0.1:29999"\nmemory_limit = "1TiB"\n' \
	"$TMP/g4-mission.gguf" "$dir" "$dir" "$dir" >"$dir/mission.toml"
mission=$("$LM" plan --json "$dir/mission.toml" | jq '.plan.workers[0].kv_by_type |
	[.sliding_k.bytes + .sliding_v.bytes, .global_k.bytes + .global_v.bytes]')
python3 - "$mission" >>"$OUT" <<'EOF2'
import json, sys
swa, glob = json.loads(sys.argv[1])
swa, glob = swa / 2, glob / 2  # the plan holds the probe slot too
row = 16 * 256 * 2 * 2  # K and V of one position of a sliding layer, f16
full = 50 * row * 32768
pad = 50 * row * ((1024 + 512 + 255) // 256 * 256)
print("")
print("The mission's geometry, f16, one sequence of 32768 positions (sliding layers only; the")
print("10 global layers hold %.0f MiB in every case):" % (glob / 2**20))
print("")
print("| cache | rows per sliding layer | sliding layers' KV |")
print("|---|---|---|")
print("| llama.cpp --swa-full (its rule) | 32768 | %.0f MiB |" % (full / 2**20))
print("| llama.cpp without it (its rule; no rollback) | %d | %.0f MiB |" % ((1024 + 512 + 255) // 256 * 256, pad / 2**20))
print("| layermesh ring, max_batch 64, drafts of 4 (the planner) | %d | %.0f MiB |" % (1024 + 63, swa / 2**20))
EOF2
say ""
say "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
cat "$OUT"
if [ "$RECORD" = 1 ]; then
	{ echo; cat "$OUT"; } >>"$ROOT/bench/RESULTS.md"
fi

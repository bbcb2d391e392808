#!/usr/bin/env bash
# bench/prefix.sh — the prefix cache through a real 3-worker mesh, on and off, interleaved.
#
#   bench/prefix.sh [--reps N] [--build DIR] [--record] [--quick] [--arch qwen35] [--chat]
#
# A synthetic llama (q8_0, dim 256, 6 layers, 4,096 positions, stories260K's vocabulary) over
# three workers on ipc (`layermesh up`, one thread a worker); --arch qwen35: a qwen35 of the same
# sizes whose even layers are gated delta-nets (each worker holds two of them and one attention
# layer). --chat measures the chat alone. Prompts are token ids, so every
# figure is about the ring, not the tokenizer. Measured (medians over --reps, on and off
# alternately so both see the same machine):
#   - chat: the fifth turn of a conversation whose history is 2,000 tokens, adding 50: the
#     time to its first token (a request of max_tokens 1, the wall time of the call) with
#     cache_prompt true, after the fourth turn left its rows, and with cache_prompt false;
#   - shared: 16 clients at once, each a 4,000-token system prompt shared by all and 16 tokens
#     of its own (other in each round), in two rounds: the second round's prompt tokens the
#     mesh computed (/metrics:
#     prompt tokens less cached ones) and its wall time, on a mesh with [coordinator]
#     prefix_cache on, and on one with it off. (A slot's rows serve the requests that come
#     after it: the first round's 16 concurrent clients share nothing yet.)
#   - samples: one request of n = 4 against 4 separate requests at once, the same 1,000-token
#     prompt, 32 tokens each, greedy, cache_prompt false (so only the n = 4 request shares its
#     prefill): wall time and prompt tokens the ring computed (/metrics), alternately.
# --quick shrinks every size (a 200-token history, a 300-token system prompt among 4 clients,
# a 100-token prompt, 8 tokens) to check that the script runs; its figures mean nothing.
# The machine may be shared: the load average is printed at the start and the end. Output: a
# markdown section on stdout (with --record also appended to bench/RESULTS.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
REPS=5
RECORD=0
QUICK=0
ARCH=llama
CHAT_ONLY=0
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--record) RECORD=1 ;;
	--quick) QUICK=1 ;;
	--arch) ARCH=$2; shift ;;
	--chat) CHAT_ONLY=1 ;;
	*) echo "bench/prefix.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
LM=$BUILD/coordinator/layermesh
WORKER=$BUILD/worker/layermesh-worker
bench_require bench/prefix.sh "$BUILD" "$LM" "$WORKER"
SHARED=$(bench_shared_dir "$BUILD")
[ -f "$SHARED/models/stories260K.gguf" ] ||
	{ echo "bench/prefix.sh: $SHARED/models/stories260K.gguf is missing (LM_SHARED)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/lm-bench-prefix.XXXXXX)
trap bench_cleanup EXIT
# The sizes: history and turn, system prompt and clients, the samples' prompt and tokens.
HIST=2000 TURN=50 SYS=4000 CLIENTS=16 NPROMPT=1000 NTOK=32
[ "$QUICK" = 0 ] || { HIST=200 TURN=10 SYS=300 CLIENTS=4 NPROMPT=100 NTOK=8; }
OUT=$TMP/out.md
say() { echo "$*" >>"$OUT"; }

MODEL=$TMP/m.gguf
ARCH_ARGS=()
[ "$ARCH" = llama ] || ARCH_ARGS=(--arch "$ARCH")
[ "$ARCH" != qwen35 ] || ARCH_ARGS+=(--full-attn-every 2)
"$LM" synth --out "$MODEL" "${ARCH_ARGS[@]}" --dim 256 --layers 6 --heads 8 --kv-heads 2 \
	--ffn 768 --vocab 512 --ctx 4096 --type q8_0 --seed 3 \
	--vocab-from "$SHARED/models/stories260K.gguf" >/dev/null

# mesh_up NAME CACHE: the model over three workers, [coordinator] prefix_cache = CACHE.
mesh_up() {
	bench_mesh_up "$1" "$MODEL" 4096 1GiB "0:2 2:4 4:6" \
		"prefix_cache = $2\nrequest_timeout = 600\n" "" 120
}

# ids N SEED: N token ids, as a JSON array.
ids() { python3 -c "import random; r = random.Random($2); print([1] + [r.randrange(3, 512) for _ in range($1 - 1)])"; }

# ttft PROMPT_FILE CACHE: seconds from the call to its one token.
ttft() {
	curl -sf -o /dev/null -w '%{time_total}' -H "Content-Type: application/json" \
		"$URL/v1/completions" --data-binary @<(printf '{"prompt": %s, "max_tokens": 1, "temperature": 0, "cache_prompt": %s}' "$(cat "$1")" "$2")
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
FAM=$(lscpu | sed -n 's/^CPU family: *//p' | head -n 1)
MOD=$(lscpu | sed -n 's/^Model: *//p' | head -n 1)

# ---------------------------------------------------------------- chat
mesh_up chat true
ids "$HIST" 1 >"$TMP/history"
cp "$TMP/history" "$TMP/turn4"
on=() off=()
for ((i = 0; i < REPS; i++)); do
	python3 -c "import json, random; h = json.load(open('$TMP/history')); r = random.Random(100 + $i); print(json.dumps(h + [r.randrange(3, 512) for _ in range($TURN)]))" >"$TMP/turn5"
	ttft "$TMP/turn4" true >/dev/null # the fourth turn leaves the history's rows
	on+=("$(ttft "$TMP/turn5" true)")
	off+=("$(ttft "$TMP/turn5" false)")
done
cached=$(metric layermesh_prompt_tokens_cached_total)
mesh_down
on_m=$(echo "${on[*]}" | median)
off_m=$(echo "${off[*]}" | median)

# ---------------------------------------------------------------- shared
if [ "$CHAT_ONLY" = 0 ]; then
ids "$SYS" 2 >"$TMP/system"
round() { # round R: $CLIENTS clients at once, each the system prompt and 16 tokens of its own for
	# round R; prints the wall seconds
	local t0 t1 k pids=()
	t0=$(date +%s.%N)
	for k in $(seq "$CLIENTS"); do
		python3 -c "import json; s = json.load(open('$TMP/system')); print(json.dumps(s + [3 + ($k * 31 + $1 * 7 + j) % 500 for j in range(16)]))" >"$TMP/c$k"
		curl -sf -o /dev/null -H "Content-Type: application/json" "$URL/v1/completions" \
			--data-binary @<(printf '{"prompt": %s, "max_tokens": 4, "temperature": 0}' "$(cat "$TMP/c$k")") &
		pids+=($!)
	done
	for k in "${pids[@]}"; do wait "$k"; done
	t1=$(date +%s.%N)
	python3 -c "print(round($t1 - $t0, 3))"
}
declare -A wall computed
for cache in true false; do
	mesh_up "shared-$cache" "$cache"
	round 1 >/dev/null # the first round fills the slots; the second is measured
	p0=$(metric layermesh_prompt_tokens_total)
	c0=$(metric layermesh_prompt_tokens_cached_total)
	wall[$cache]=$(round 2)
	computed[$cache]=$(($(metric layermesh_prompt_tokens_total) - p0 - ($(metric layermesh_prompt_tokens_cached_total) - c0)))
	mesh_down
done

# ---------------------------------------------------------------- samples
ids "$NPROMPT" 3 >"$TMP/nprompt"
# samples N K: K requests at once of n = N each; prints the wall seconds and the prompt tokens
# the ring computed
samples() {
	local t0 t1 k p0 pids=()
	p0=$(metric layermesh_prompt_tokens_computed_total)
	t0=$(date +%s.%N)
	for k in $(seq "$2"); do
		curl -sf -o /dev/null -H "Content-Type: application/json" "$URL/v1/completions" \
			--data-binary @<(printf '{"prompt": %s, "max_tokens": %d, "temperature": 0, "n": %d, "cache_prompt": false}' "$(cat "$TMP/nprompt")" "$NTOK" "$1") &
		pids+=($!)
	done
	for k in "${pids[@]}"; do wait "$k"; done
	t1=$(date +%s.%N)
	echo "$(python3 -c "print(round($t1 - $t0, 3))") $(($(metric layermesh_prompt_tokens_computed_total) - p0))"
}
mesh_up samples true
samples 1 1 >/dev/null # warm up
n4=() sep=()
for ((i = 0; i < REPS; i++)); do
	n4+=("$(samples 4 1)")
	sep+=("$(samples 1 4)")
done
mesh_down
n4_wall=$(printf '%s\n' "${n4[@]}" | cut -d' ' -f1 | median)
sep_wall=$(printf '%s\n' "${sep[@]}" | cut -d' ' -f1 | median)
n4_comp=$(printf '%s\n' "${n4[@]}" | cut -d' ' -f2 | median)
sep_comp=$(printf '%s\n' "${sep[@]}" | cut -d' ' -f2 | median)
fi

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
say "### Prefix cache ($(date -u +%Y-%m-%d), $(git -C "$ROOT" rev-parse --short HEAD))"
say ""
say "$CPU (family $FAM, model $MOD), $(nproc) vCPUs; load $LOAD0 at the start, $LOAD1 at the end."
say "Synthetic $ARCH q8_0 (dim 256, 6 layers, vocab 512, 4,096 positions) over 3 workers on ipc, 1 thread each; medians of $REPS."
say ""
say "| measure | cache on | cache off | on vs off |"
say "|---|---|---|---|"
say "| time to first token, 5th turn ($HIST + $TURN tokens) | $(printf '%.3f' "$on_m") s | $(printf '%.3f' "$off_m") s | $(python3 -c "print(f'{$off_m / $on_m:.2f}x faster')") |"
if [ "$CHAT_ONLY" = 0 ]; then
say "| $CLIENTS clients, a shared $SYS-token system prompt, 2nd round: prompt tokens computed | ${computed[true]} | ${computed[false]} | $(python3 -c "print(f'{${computed[false]} / max(1, ${computed[true]}):.1f}x fewer')") |"
say "| the same: wall time of the round | ${wall[true]} s | ${wall[false]} s | $(python3 -c "print(f'{${wall[false]} / ${wall[true]}:.2f}x faster')") |"
say ""
say "| $NPROMPT-token prompt, $NTOK tokens each, greedy | n = 4, one request | 4 requests at once | n = 4 vs 4 |"
say "|---|---|---|---|"
say "| wall time | $n4_wall s | $sep_wall s | $(python3 -c "print(f'{$sep_wall / $n4_wall:.2f}x faster')") |"
say "| prompt tokens computed | $n4_comp | $sep_comp | $(python3 -c "print(f'{$sep_comp / max(1, $n4_comp):.1f}x fewer')") |"
fi
say ""
say "Prompt tokens reused in the chat runs: $cached."
cat "$OUT"
if [ "$RECORD" = 1 ]; then
	{ echo; cat "$OUT"; } >>"$ROOT/bench/RESULTS.md"
fi

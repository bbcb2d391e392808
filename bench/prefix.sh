#!/usr/bin/env bash
# bench/prefix.sh — the prefix cache through a real 3-worker mesh, on and off, interleaved.
#
#   bench/prefix.sh [--reps N] [--build DIR] [--record]
#
# A synthetic llama (q8_0, dim 256, 6 layers, 4,096 positions, stories260K's vocabulary) over
# three workers on ipc (`layermesh up`, one thread a worker). Prompts are token ids, so every
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
# The machine may be shared: the load average is printed at the start and the end. Output: a
# markdown section on stdout (with --record also appended to bench/RESULTS.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
REPS=5
RECORD=0
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--build) BUILD=$2; shift ;;
	--record) RECORD=1 ;;
	*) echo "bench/prefix.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
LM=$BUILD/coordinator/layermesh
WORKER=$BUILD/worker/layermesh-worker
SHARED=$(meson introspect "$BUILD" --buildoptions | jq -r '.[] | select(.name == "shared_dir") | .value')
TMP=$(mktemp -d /tmp/lm-bench-prefix.XXXXXX)
UP_PID=
cleanup() {
	[ -z "$UP_PID" ] || { kill -TERM "$UP_PID" 2>/dev/null; wait "$UP_PID" 2>/dev/null || true; }
	rm -rf "$TMP"
}
trap cleanup EXIT
OUT=$TMP/out.md
say() { echo "$*" >>"$OUT"; }

MODEL=$TMP/m.gguf
"$LM" synth --out "$MODEL" --dim 256 --layers 6 --heads 8 --kv-heads 2 --ffn 768 --vocab 512 \
	--ctx 4096 --type q8_0 --seed 3 --vocab-from "$SHARED/models/stories260K.gguf" >/dev/null

# mesh_up NAME CACHE: the model over three workers, [coordinator] prefix_cache = CACHE.
mesh_up() {
	local dir=$TMP/$1 i http
	mkdir -p "$dir"
	http=$((20000 + RANDOM % 10000))
	{
		printf '[model]\npath = "%s"\nmax_seq_len = 4096\nslots = 17\nmax_batch = 64\n\n' "$MODEL"
		printf '[coordinator]\nhttp = "127.0.0.1:%d"\ndata_in = "ipc://%s/c.data"\n' "$http" "$dir"
		printf 'prefix_cache = %s\nrequest_timeout = 600\n\n' "$2"
		printf '[plan]\nstrategy = "pinned"\n\n'
		for i in 0 1 2; do
			printf '[[worker]]\nname = "w%d"\ndata = "ipc://%s/w%d.data"\n' $i "$dir" $i
			printf 'control = "ipc://%s/w%d.ctl"\nhttp = "127.0.0.1:%d"\n' "$dir" $i $((http + 1 + i))
			printf 'memory_limit = "1GiB"\nlayers = [%d, %d]\n\n' $((2 * i)) $((2 * i + 2))
		done
	} >"$dir/mesh.toml"
	URL=http://127.0.0.1:$http
	"$LM" up "$dir/mesh.toml" --worker-bin "$WORKER" --timeout 120 >"$dir/up.log" 2>&1 &
	UP_PID=$!
	for i in $(seq 1200); do
		curl -sf "$URL/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$UP_PID" 2>/dev/null || { cat "$dir/up.log" >&2; exit 1; }
		sleep 0.1
	done
	echo "bench/prefix.sh: $1 did not come up" >&2
	exit 1
}

mesh_down() {
	kill -TERM "$UP_PID"
	wait "$UP_PID" 2>/dev/null || true
	UP_PID=
}

metric() { curl -sf "$URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

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
ids 2000 1 >"$TMP/history"
cp "$TMP/history" "$TMP/turn4"
on=() off=()
for ((i = 0; i < REPS; i++)); do
	python3 -c "import json, random; h = json.load(open('$TMP/history')); r = random.Random(100 + $i); print(json.dumps(h + [r.randrange(3, 512) for _ in range(50)]))" >"$TMP/turn5"
	ttft "$TMP/turn4" true >/dev/null # the fourth turn leaves the history's rows
	on+=("$(ttft "$TMP/turn5" true)")
	off+=("$(ttft "$TMP/turn5" false)")
done
cached=$(metric layermesh_prompt_tokens_cached_total)
mesh_down
on_m=$(echo "${on[*]}" | median)
off_m=$(echo "${off[*]}" | median)

# ---------------------------------------------------------------- shared
ids 4000 2 >"$TMP/system"
round() { # round R: 16 clients at once, each the system prompt and 16 tokens of its own for
	# round R; prints the wall seconds
	local t0 t1 k pids=()
	t0=$(date +%s.%N)
	for k in $(seq 16); do
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

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
say "### Prefix cache ($(date -u +%Y-%m-%d), $(git -C "$ROOT" rev-parse --short HEAD))"
say ""
say "$CPU (family $FAM, model $MOD), $(nproc) vCPUs; load $LOAD0 at the start, $LOAD1 at the end."
say "Synthetic llama q8_0 (dim 256, 6 layers, vocab 512, 4,096 positions) over 3 workers on ipc, 1 thread each; medians of $REPS."
say ""
say "| measure | cache on | cache off | on vs off |"
say "|---|---|---|---|"
say "| time to first token, 5th turn (2,000 + 50 tokens) | $(printf '%.3f' "$on_m") s | $(printf '%.3f' "$off_m") s | $(python3 -c "print(f'{$off_m / $on_m:.2f}x faster')") |"
say "| 16 clients, a shared 4,000-token system prompt, 2nd round: prompt tokens computed | ${computed[true]} | ${computed[false]} | $(python3 -c "print(f'{${computed[false]} / max(1, ${computed[true]}):.1f}x fewer')") |"
say "| the same: wall time of the round | ${wall[true]} s | ${wall[false]} s | $(python3 -c "print(f'{${wall[false]} / ${wall[true]}:.2f}x faster')") |"
say ""
say "Prompt tokens reused in the chat runs: $cached."
cat "$OUT"
if [ "$RECORD" = 1 ]; then
	{ echo; cat "$OUT"; } >>"$ROOT/bench/RESULTS.md"
fi

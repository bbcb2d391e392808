#!/usr/bin/env bash
# bench/run.sh — layermesh beside llama.cpp on the same GGUF files, in one run, interleaved.
#
#   bench/run.sh [--quick] [--sections LIST] [options]
#
# Sections (--sections, comma-separated; default all):
#   bw      memory read bandwidth: bench_membw, 1 GiB, 1 and 2 threads (the decode bound)
#   unix    raw unix-socket round trip and 4-process ring, 256 B and 16 KiB (bench_unix)
#   single  prefill (--prefill tokens) and decode (--decode tokens) speed at each of --threads,
#           llama.cpp (lm_oracle) and layermesh (bench_run) on stories260K and on a synthetic
#           0.85B llama (dim 2048, 16 layers, 32/8 heads, FFN 5632, the 32000-token llama
#           vocabulary) in each of --types
#   mesh    decode through a 3-worker `layermesh up` mesh over ipc against the single process,
#           on stories260K (the ring latency), on a 3-layer dim-4096 model (16 KiB hidden states:
#           the per-hop cost) and on the 0.85B q8_0 model
#   batch   16 concurrent sequences against one through the 0.85B q8_0 mesh's HTTP API, and each
#           worker's peak resident memory (VmHWM) beside its planned bytes; then the single
#           process's forwards of the steps 16 sequences make (over the batches the mesh keeps in
#           flight), the bound on their gain
#   moe     a synthetic qwen3moe of 1.91B parameters, 0.50B of them active per token (dim 2048,
#           16 layers, 32/8 heads, 32 experts of width 512 of which a token takes 4, the
#           32000-token llama vocabulary; 2.0 GB in q8_0) in each of --moe-types: prefill and
#           decode at each of --threads, llama.cpp and layermesh interleaved as in single, with
#           the weight bytes a decode token read (bench_run's counter: the bytes of every matrix
#           its matmuls took) beside the active bytes (every tensor but the experts a token does
#           not take); the same for a qwen35 hybrid of the 0.85B llama's size (gated delta-net
#           layers, every 4th layer full attention); then 16 concurrent sequences against one
#           through a 3-worker mesh of the MoE, and its steps as in batch
#   peer    llama.cpp's own layer split over RPC (3 ggml-rpc-servers of one thread under a
#           llama-server, built once from the oracle's llama.cpp into bench/peer/: see
#           bench/peer.sh) beside the 3-worker mesh of one thread a worker, on the 0.85B q8_0
#           model, through both HTTP APIs: single-stream decode (--decode tokens), 16 streams of
#           --batch-tokens, the time to the first token of a 512-token prompt, and what each
#           side's client gets when the middle stage is SIGKILLed mid-request
#
# Every comparison is interleaved, repetition by repetition: both programs are loaded and warmed
# up once (--bench-warmup), then told to run one repetition at a time (--bench-wait), llama.cpp's
# rep i, layermesh's rep i, llama.cpp's rep i+1, ...; the mesh sections alternate a request to the
# mesh with a repetition of the single process the same way. Only forward passes are timed, never
# loading. Figures are medians with min-max over the repetitions; ratios are layermesh over
# llama.cpp (mesh over single process), of the medians, with the min-max of the per-repetition
# ratios. The single-process lines also carry cpu_ms (CPU time of the process): at one thread
# that is the work without the waits a loaded machine adds, and the ratio of CPU times is shown
# beside the ratio of wall times.
#
# Options:
#   --quick           a small subset to try the driver: bw, unix, single on stories260K and q4_0
#                     at 1 thread (32-token prefill, 8-token decode), mesh on stories260K; with
#                     --sections moe, a 5M-parameter MoE (dim 256, 4 layers, 8 experts of width
#                     128, 2 per token, stories260K's vocabulary) in place of the 2B one; with
#                     --sections peer, stories260K and a 128-token prompt;
#                     nothing is written to RESULTS.md unless --record
#   --sections LIST   e.g. single,mesh
#   --reps N          repetitions of every measurement (default 5)
#   --threads LIST    thread counts of the single section (default "1 2")
#   --types LIST      0.85B weight types (default "q8_0 q4_0 q4_K")
#   --moe-types LIST  the MoE model's weight types (default "q8_0"; the first also runs the mesh)
#   --prefill N       prompt tokens of the single section (default 128)
#   --decode M        decoded tokens on the 0.85B models (default 64) ...
#   --decode-small M  ... and on stories260K and the hop model (default 64)
#   --batch-tokens T  tokens each sequence generates in the batch section (default 32)
#   --kernels K       layermesh's kernel set, in the single process and the mesh's workers: auto
#                     (the default, batch invariant) or amx (adds the AMX GEMMs: see
#                     `layermesh run --help`)
#   --build DIR       the meson build directory (default: build); it must have been configured
#                     with -Dllama_oracle for the llama.cpp side (peer builds its llama.cpp from
#                     that directory's bundle, or from LM_ORACLE_DIR's)
#   --models DIR      where the generated models are cached (default: bench/models)
#   --out DIR         raw results (default: bench/out): run-STAMP.csv and run-STAMP.log
#   --record          append the summary to bench/RESULTS.md (the default without --quick)
#   --no-record       do not
#
# The machine may be shared: the load average is recorded at the start and the end of the run.
# Generated models (about 1.9 GB for the three 0.85B files, 2.0 GB for the q8_0 MoE) are written
# once and reused (bench/models is not tracked by git); so is peer's llama.cpp build (bench/peer,
# not tracked either; its first build takes some 15 minutes on 2 CPUs).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
MODELS=$ROOT/bench/models
OUT=$ROOT/bench/out
SECTIONS="bw,unix,single,mesh,batch,moe,peer"
KERNELS=auto
REPS=5
THREADS="1 2"
TYPES="q8_0 q4_0 q4_K"
MOE_TYPES="q8_0"
PREFILL=128
DECODE=64
DECODE_SMALL=64
BATCH_TOKENS=32
QUICK=0
RECORD=

die() {
	echo "bench/run.sh: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--sections) SECTIONS=$2; shift ;;
	--kernels) KERNELS=$2; shift ;;
	--reps) REPS=$2; shift ;;
	--threads) THREADS=$2; shift ;;
	--types) TYPES=$2; shift ;;
	--moe-types) MOE_TYPES=$2; shift ;;
	--prefill) PREFILL=$2; shift ;;
	--decode) DECODE=$2; shift ;;
	--decode-small) DECODE_SMALL=$2; shift ;;
	--batch-tokens) BATCH_TOKENS=$2; shift ;;
	--build) BUILD=$(cd "$2" && pwd); shift ;;
	--models) MODELS=$2; shift ;;
	--out) OUT=$2; shift ;;
	--record) RECORD=1 ;;
	--no-record) RECORD=0 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown option '$1' (--help lists them)" ;;
	esac
	shift
done
if [ "$QUICK" = 1 ]; then
	[ "$SECTIONS" = "bw,unix,single,mesh,batch,moe,peer" ] && SECTIONS="bw,unix,single,mesh"
	THREADS=1 TYPES=q4_0 PREFILL=32 DECODE=8 DECODE_SMALL=16
	PEER_PROMPT=128 PEER_KILL_TOKENS=200 PEER_KILL_AFTER=0.02
	QUICK_MESH=1
fi
: "${RECORD:=$((1 - QUICK))}"
if ! [[ $REPS =~ ^[0-9]+$ ]] || [ "$REPS" -lt 1 ]; then
	die "--reps expects a count"
fi
[ "$REPS" -ge 5 ] || echo "bench/run.sh: note: fewer than 5 repetitions" >&2

has() { [[ ",$SECTIONS," == *",$1,"* ]]; }

# --- programs and data ------------------------------------------------------------------------

LM=$BUILD/coordinator/layermesh
WORKER=$BUILD/worker/layermesh-worker
BRUN=$BUILD/bench/bench_run
MEMBW=$BUILD/bench/bench_membw
UNIXB=$BUILD/bench/bench_unix
NNGB=$BUILD/bench/bench_nng
ORACLE=$BUILD/tests/oracle/lm_oracle
for p in "$LM" "$WORKER" "$BRUN" "$MEMBW" "$UNIXB" "$NNGB"; do
	[ -x "$p" ] || die "$p is missing: build first (ninja -C $BUILD)"
done
if { has single || has moe; } && [ ! -x "$ORACLE" ]; then
	die "$ORACLE is missing: configure with -Dllama_oracle=DIR (deploy/oracle-setup.sh DIR)"
fi
for t in jq curl; do command -v $t >/dev/null || die "$t is needed"; done

# The shared data directory the build was configured with, else LM_SHARED, else ../shared.
SHARED=$(meson introspect "$BUILD" --buildoptions 2>/dev/null |
	jq -r '.[] | select(.name == "shared_dir") | .value' 2>/dev/null || true)
[ -n "$SHARED" ] || SHARED=${LM_SHARED:-$ROOT/../shared}
STORIES=$SHARED/models/stories260K.gguf
VOCAB=$SHARED/tokenizer/ggml-vocab-llama-spm.gguf
[ -f "$STORIES" ] || die "$STORIES is missing (the shared data directory: LM_SHARED)"
# The llama.cpp oracle the build was configured with (-Dllama_oracle), else LM_ORACLE_DIR.
PEER_ORACLE=$(meson introspect "$BUILD" --buildoptions 2>/dev/null |
	jq -r '.[] | select(.name == "llama_oracle") | .value' 2>/dev/null || true)
[ -n "$PEER_ORACLE" ] || PEER_ORACLE=${LM_ORACLE_DIR:-}

mkdir -p "$MODELS" "$OUT"
STAMP=$(date -u +%Y%m%d-%H%M%S)
CSV=$OUT/run-$STAMP.csv
LOG=$OUT/run-$STAMP.log
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lm-bench.XXXXXX")
echo "section,model,impl,threads,rep,metric,value" >"$CSV"

log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }
row() { echo "$1,$2,$3,$4,$5,$6,$7" >>"$CSV"; }

# Processes this script started, stopped on exit by their pids.
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT

# synth NAME ARGS...: bench/models/NAME.gguf, written once.
synth() {
	local name=$1 f=$MODELS/$1.gguf
	shift
	if [ ! -f "$f" ]; then
		log "writing $f"
		"$LM" synth --out "$f" "$@" >>"$LOG" 2>&1 || die "layermesh synth $name failed"
	fi
	echo "$f"
}
model_085b() {
	[ -f "$VOCAB" ] || die "$VOCAB is missing"
	synth "synth-0.85b-$1" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 5632 \
		--type "$1" --seed 1 --ctx 2048 --vocab-from "$VOCAB"
}
# 16 KiB f32 hidden states; attention output and q are dim x dim, everything else small.
model_hop() {
	synth synth-hop-4096 --dim 4096 --layers 3 --heads 32 --kv-heads 1 --ffn 32 --type q4_0 \
		--seed 1 --ctx 512 --vocab-from "$STORIES"
}

# The MoE model of the moe section (see the top); --quick: a 5M-parameter one.
model_moe() {
	if [ "$QUICK" = 1 ]; then
		synth "synth-moe-tiny-$1" --arch qwen3moe --dim 256 --layers 4 --heads 8 --kv-heads 2 \
			--ffn 128 --ffn-exp 128 --experts 8 --experts-used 2 --type "$1" --seed 1 \
			--ctx 2048 --vocab-from "$STORIES"
		return
	fi
	[ -f "$VOCAB" ] || die "$VOCAB is missing"
	synth "synth-moe-2b-a05b-$1" --arch qwen3moe --dim 2048 --layers 16 --heads 32 --kv-heads 8 \
		--ffn 512 --ffn-exp 512 --experts 32 --experts-used 4 --type "$1" --seed 1 --ctx 2048 \
		--vocab-from "$VOCAB"
}
moe_name() { if [ "$QUICK" = 1 ]; then echo "moe-tiny-$1"; else echo "moe-2B-A0.5B-$1"; fi; }
# The qwen35 hybrid of the moe section: gated delta-net layers with every 4th layer attending, the
# 0.85B llama's width and depth (dim 2048, 16 layers, 16 heads of 128, 4 KV heads, FFN 5632, the
# delta-nets with 4 key and 16 value heads of 128); --quick: a small one on stories260K's vocabulary.
model_hybrid() {
	if [ "$QUICK" = 1 ]; then
		synth "synth-qwen35-tiny-$1" --arch qwen35 --dim 256 --layers 4 --heads 8 --kv-heads 2 \
			--ffn 512 --type "$1" --seed 1 --ctx 2048 --vocab-from "$STORIES"
		return
	fi
	[ -f "$VOCAB" ] || die "$VOCAB is missing"
	synth "synth-qwen35-0.9b-$1" --arch qwen35 --dim 2048 --layers 16 --heads 16 --kv-heads 4 \
		--ffn 5632 --type "$1" --seed 1 --ctx 2048 --vocab-from "$VOCAB"
}
hybrid_name() { if [ "$QUICK" = 1 ]; then echo "qwen35-tiny-$1"; else echo "qwen35-0.9B-$1"; fi; }

# --- interleaved servers ----------------------------------------------------------------------
# srv_start ID CMD...: starts CMD (which takes --bench-warmup --bench-wait) with its stdin and
# stdout on fifos, and waits until it prints "ready" (loaded and warmed up).
declare -A SRV_IN SRV_OUT SRV_PID SRV_INFO
srv_start() {
	local id=$1 line fd_in fd_out
	shift
	mkfifo "$TMP/$id.in" "$TMP/$id.out"
	"$@" <"$TMP/$id.in" >"$TMP/$id.out" 2>>"$LOG" &
	SRV_PID[$id]=$!
	PIDS+=("$!")
	exec {fd_in}>"$TMP/$id.in"
	exec {fd_out}<"$TMP/$id.out"
	SRV_IN[$id]=$fd_in
	SRV_OUT[$id]=$fd_out
	SRV_INFO[$id]=
	while :; do
		read -r -t 1800 -u "$fd_out" line || die "$id ($1) ended before it was ready (see $LOG)"
		case $line in
		ready) break ;;
		info*) SRV_INFO[$id]=$line ;;
		esac
	done
}
# srv_rep ID: one repetition; prints its lines, up to "decode ..." (or bench_membw's "end ...").
# srv_go ID starts one and srv_read ID prints its lines, for servers run at once.
srv_go() { echo go >&"${SRV_IN[$1]}"; }
srv_read() {
	local id=$1 line
	while :; do
		read -r -t 1800 -u "${SRV_OUT[$id]}" line || die "$id stopped answering (see $LOG)"
		echo "$line"
		[[ $line == decode* || $line == end* ]] && break
	done
}
srv_rep() {
	srv_go "$1"
	srv_read "$1"
}
srv_stop() {
	local id=$1 fd_in=${SRV_IN[$1]} fd_out=${SRV_OUT[$1]}
	exec {fd_in}>&-
	wait "${SRV_PID[$id]}" || die "$id failed (see $LOG)"
	exec {fd_out}<&-
	rm -f "$TMP/$id.in" "$TMP/$id.out"
}
# field LINE KEY: the value of KEY=VALUE in LINE.
field() { sed -n "s/.*[ ]$2=\([^ ]*\).*/\1/p" <<<" $1"; }

# record_rep SECTION MODEL IMPL THREADS REP LINES: the prefill/decode lines as CSV rows.
record_rep() {
	local l
	while read -r l; do
		local phase=${l%% *}
		row "$1" "$2" "$3" "$4" "$5" "${phase}_tok_s" "$(field "$l" tok_s)"
		row "$1" "$2" "$3" "$4" "$5" "${phase}_cpu_ms" "$(field "$l" cpu_ms)"
		row "$1" "$2" "$3" "$4" "$5" "${phase}_ms" "$(field "$l" ms)"
		if [ -n "$(field "$l" read_bytes_tok)" ]; then
			row "$1" "$2" "$3" "$4" "$5" "${phase}_read_bytes_tok" "$(field "$l" read_bytes_tok)"
		fi
	done <<<"$6"
}

# --- sections ---------------------------------------------------------------------------------

section_bw() {
	log "bandwidth: 1 GiB, threads 1 and 2, $((REPS + 2)) reps interleaved"
	local out
	out=$("$MEMBW" --mib 1024 --reps $((REPS + 2)) --threads "1 2")
	echo "$out" >>"$LOG"
	while read -r l; do
		case $l in
		read*) row bw mem bench_membw "$(field "$l" threads)" "$(field "$l" rep)" gb_s \
			"$(field "$l" gb_s)" ;;
		esac
	done <<<"$out"
}

# unix_rows SECTION MODEL REP OUTPUT: bench_unix's lines as rows (the model column names the
# size in the unix section).
unix_rows() {
	local l
	while read -r l; do
		case $l in
		rtt*) row "$1" "${2:-$(field "$l" size)}" rtt 1 "$3" median_us \
			"$(field "$l" median_us)" ;;
		ring*) row "$1" "${2:-$(field "$l" size)}" ring4 1 "$3" hop_median_us \
			"$(field "$l" hop_median_us)" ;;
		nng_ring*) row "$1" "${2:-$(field "$l" size)}" \
			"nng4$([ "$(field "$l" work_us)" -gt 0 ] 2>/dev/null && echo w)" 1 "$3" \
			hop_median_us "$(field "$l" hop_median_us)" ;;
		esac
	done <<<"$4"
}

section_unix() {
	log "raw unix sockets and NNG's own push/pull: round trip and 4-process rings, 256 B, 8 KiB" \
		"and 16 KiB, $REPS runs"
	local out r
	for ((r = 0; r < REPS; r++)); do
		out=$("$UNIXB" --sizes "256 8192 16384" --iters 2000 --ring 4)
		out+=$'\n'$("$NNGB" --sizes "256 8192 16384" --iters 2000 --ring 4)
		echo "$out" >>"$LOG"
		unix_rows unix "" "$r" "$out"
	done
}

# single_pair NAME FILE THREADS DECODE: llama.cpp and layermesh, interleaved; the rows go to
# section PAIR_SECTION (default single).
single_pair() {
	local name=$1 file=$2 th=$3 dec=$4 r a b c sec=${PAIR_SECTION:-single}
	log "$sec: $name, $th thread(s), prefill $PREFILL, decode $dec, $REPS reps"
	srv_start oracle "$ORACLE" --model "$file" --bench-prefill "$PREFILL" --bench-decode "$dec" \
		--reps "$REPS" --threads "$th" --bench-warmup --bench-wait
	srv_start layermesh "$BRUN" --model "$file" --bench-prefill "$PREFILL" --bench-decode "$dec" \
		--reps "$REPS" --threads "$th" --kernels "$KERNELS" --bench-warmup --bench-wait
	srv_start membw "$MEMBW" --mib 1024 --reps "$REPS" --threads "$th" --bench-wait
	row "$sec" "$name" layermesh "$th" 0 decode_bytes "$(field "${SRV_INFO[layermesh]}" decode_bytes)"
	row "$sec" "$name" layermesh "$th" 0 weight_bytes "$(field "${SRV_INFO[layermesh]}" weight_bytes)"
	echo "$(field "${SRV_INFO[layermesh]}" kernels)" >"$TMP/kernels"
	for ((r = 0; r < REPS; r++)); do
		a=$(srv_rep oracle)
		b=$(srv_rep layermesh)
		c=$(srv_rep membw | grep '^read')
		row "$sec" "$name" bw "$th" "$r" gb_s "$(field "$c" gb_s)"
		{
			echo "$name th=$th llama.cpp: $a" | tr '\n' ' '
			echo "| layermesh: $b | $c" | tr '\n' ' '
			echo
		} >>"$LOG"
		record_rep "$sec" "$name" llama.cpp "$th" "$r" "$a"
		record_rep "$sec" "$name" layermesh "$th" "$r" "$b"
	done
	srv_stop oracle
	srv_stop layermesh
	srv_stop membw
}

section_single() {
	local th t
	for th in $THREADS; do
		single_pair stories260K "$STORIES" "$th" "$DECODE_SMALL"
	done
	for t in $TYPES; do
		local f
		f=$(model_085b "$t")
		for th in $THREADS; do
			single_pair "0.85B-$t" "$f" "$th" "$DECODE"
		done
	done
}

# A TCP port on loopback that is free now and was not handed out before in this run: counting up
# from a random start in 10000-32000 (below the ephemeral range), kept in a file because port
# runs in $(...) subshells.
port() {
	local p
	[ -f "$TMP/port" ] || echo $((10000 + RANDOM % 20000)) >"$TMP/port"
	p=$(cat "$TMP/port")
	while :; do
		p=$((p + 1))
		[ "$p" -lt 32000 ] || p=10000
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p" >"$TMP/port"
			echo "$p"
			return
		fi
	done
}

# mesh_up NAME FILE: a 3-worker mesh over ipc (balanced fence, one thread each, 16 slots of 256
# positions, or MESH_SEQ); sets URL, UP_PID and WORKER_HTTP (each worker's health server).
WORKER_HTTP=()
mesh_up() {
	local name=$1 file=$2 dir=$TMP/mesh-$1 i
	mkdir -p "$dir"
	{
		echo "[model]"
		echo "path = \"$file\""
		echo "max_seq_len = ${MESH_SEQ:-256}"
		echo "slots = 16"
		echo "max_batch = 64"
		echo "[coordinator]"
		echo "http = \"127.0.0.1:$(port)\""
		echo "data_in = \"ipc://$dir/coord.data\""
		echo "log_level = \"warn\""
		echo "ring_stamps = true"
		[ -n "${BIF:-}" ] && echo "batches_in_flight = $BIF"
		echo "[plan]"
		echo "strategy = \"balanced\""
		for i in 0 1 2; do
			WORKER_HTTP[i]=127.0.0.1:$(port)
			echo "[[worker]]"
			echo "name = \"w$i\""
			echo "data = \"ipc://$dir/w$i.data\""
			echo "control = \"ipc://$dir/w$i.ctl\""
			echo "http = \"${WORKER_HTTP[i]}\""
			echo "memory_limit = \"4GiB\""
			echo "threads = 1"
			echo "kernels = \"$KERNELS\""
		done
	} >"$dir/mesh.toml"
	URL="http://$(sed -n 's/^http = "\(.*\)"/\1/p' "$dir/mesh.toml" | head -n 1)"
	"$LM" up "$dir/mesh.toml" --worker-bin "$WORKER" --timeout 600 >>"$LOG" 2>&1 &
	UP_PID=$!
	PIDS+=("$UP_PID")
	for _ in $(seq 6000); do
		curl -sf "$URL/readyz" >/dev/null 2>&1 && break
		kill -0 "$UP_PID" 2>/dev/null || die "layermesh up ($name) exited (see $LOG)"
		sleep 0.1
	done
	curl -sf "$URL/readyz" >/dev/null || die "the $name mesh was not ready in 10 minutes"
	curl -sf "$URL/v1/status" | jq -c '.plan.workers[] | {name, start, "end": .end, total_bytes}' \
		>>"$LOG"
}
mesh_down() {
	kill -TERM "$UP_PID"
	wait "$UP_PID" || true
}

# complete PROMPT_IDS MAX_TOKENS: a greedy request; prints "predicted_n predicted_ms".
complete() {
	local ids=$1 max=$2 body resp
	body=$(jq -cn --arg ids "$ids" --argjson max "$max" \
		'{prompt: ($ids | split(" ") | map(tonumber)), max_tokens: $max, temperature: 0,
		  stream: false}')
	resp=$(curl -sS --max-time 1800 "$URL/v1/completions" -H 'Content-Type: application/json' \
		-d "$body" 2>&1) || {
		echo "request failed: $resp" >>"$LOG"
		return 1
	}
	jq -er 'select(.timings.predicted_n != null) |
		"\(.timings.predicted_n) \(.timings.predicted_ms)"' <<<"$resp" 2>/dev/null || {
		echo "the mesh answered: $resp" >>"$LOG"
		return 1
	}
}

# worker_sums: for each worker, the sum and count of its /metrics histograms of the stage's
# handling of a ring message (compute), of the wait between a message's arrival and its compute
# (receive wait) and of handing it to the successor (send): six numbers per worker, one line.
worker_sums() {
	local h
	for h in "${WORKER_HTTP[@]}"; do
		curl -sf "http://$h/metrics" | awk '
			/^layermesh_worker_compute_seconds_sum/ { cs = $NF }
			/^layermesh_worker_compute_seconds_count/ { cc = $NF }
			/^layermesh_worker_receive_wait_seconds_sum/ { rs = $NF }
			/^layermesh_worker_receive_wait_seconds_count/ { rc = $NF }
			/^layermesh_worker_send_seconds_sum/ { ss = $NF }
			/^layermesh_worker_send_seconds_count/ { sc = $NF }
			END { printf "%s %s %s %s %s %s ", cs, cc, rs, rc, ss, sc }'
	done
	echo
}

# ring_snap: the sums and counts of the ring's latency histograms, every worker's and the
# coordinator's, as one line of KEY=VALUE (w0.transit_sum=..., c.turnaround_count=...).
ring_snap() {
	local h j=0
	for h in "${WORKER_HTTP[@]}"; do
		curl -sf "http://$h/metrics" | awk -v p="w$j" '
			/^layermesh_worker_(transit|receive_wait|compute|forward|pre_send|send)_seconds_(sum|count) / {
				k = $1; sub(/^layermesh_worker_/, "", k); sub(/_seconds/, "", k)
				printf "%s.%s=%s ", p, k, $NF }'
		j=$((j + 1))
	done
	curl -sf "$URL/metrics" | awk '
		/^layermesh_ring_(return|wake|turnaround|send)_seconds_(sum|count) / {
			k = $1; sub(/^layermesh_ring_/, "", k); sub(/_seconds/, "", k)
			printf "c.%s=%s ", k, $NF }'
	echo
}

# ring_parts BEFORE AFTER TOKEN_MS: the mean of each part of one token's trip around the ring
# between two ring_snaps, in microseconds, in ring order: the coordinator's turnaround (TOKENS
# in to FORWARD out), then per worker the transit into it (from the sender's stamp), its
# receive wait, compute and pre-send; then the last hop back (ring_return). Their sum, and the
# measured time per token less it (unaccounted). Also, not in the sum: each worker's forward
# pass (within compute) and send (within the next transit), the coordinator's wake (within the
# turnaround). One line of KEY=VALUE.
ring_parts() {
	awk -v a="$1" -v b="$2" -v tok="$3" '
		function load(s, m,   n, i, kv, f) {
			n = split(s, f, " ")
			for (i = 1; i <= n; i++) { split(f[i], kv, "="); m[kv[1]] = kv[2] }
		}
		# A worker part per FORWARD it computed (the RELEASE that ends a request passes
		# too, and its share belongs to the request); the coordinator parts per message.
		function mean(k,   dc, w) {
			w = substr(k, 1, 1) == "w" ? substr(k, 1, 3) "forward" : k
			dc = B[w "_count"] - A[w "_count"]
			return dc > 0 ? (B[k "_sum"] - A[k "_sum"]) / dc * 1e6 : 0
		}
		function part(name, k,   v) { v = mean(k); sum += v; printf "%s=%.1f ", name, v }
		function aside(name, k) { printf "%s=%.1f ", name, mean(k) }
		BEGIN {
			load(a, A); load(b, B); sum = 0
			part("turnaround", "c.turnaround")
			for (j = 0; j < 3; j++) {
				w = "w" j
				part(w "_transit", w ".transit"); part(w "_queue", w ".receive_wait")
				part(w "_compute", w ".compute"); part(w "_pre_send", w ".pre_send")
				aside(w "_forward", w ".forward"); aside(w "_send", w ".send")
			}
			part("return", "c.return")
			aside("c_wake", "c.wake"); aside("c_send", "c.send")
			printf "sum=%.1f total=%.1f unaccounted=%.1f\n", sum, tok * 1000, tok * 1000 - sum
		}'
}

# mesh_pair NAME FILE DECODE HIDDEN_BYTES: the mesh against bench_run at one thread, interleaved.
# The prompt is the one token BOS, so that every message of the ring is a one-token forward: the
# request asks for DECODE + 1 tokens (the first comes from the prompt's forward), bench_run
# decodes DECODE after a one-token prefill. The workers' compute histograms, read before and
# after each request, give the compute time of a token in the mesh; what the ring adds to it,
# over 4 hops, is the cost of a hop.
mesh_pair() {
	local name=$1 file=$2 dec=$3 hidden=$4 ids r a n ms c0 c1 line tps tok comp hop rwait snd
	local s0 s1 parts kv work iters
	log "mesh: $name, 3 workers over ipc against one process, decode $dec, $REPS reps"
	ids=$("$BRUN" --model "$file" --bench-prefill 1 --print-prompt)
	mesh_up "$name" "$file"
	srv_start layermesh "$BRUN" --model "$file" --bench-prefill 1 --bench-decode "$dec" \
		--reps "$REPS" --threads 1 --bench-warmup --bench-wait
	complete "$ids" 2 >/dev/null # the mesh's own warm-up
	row mesh "$name" mesh 1 0 hidden_bytes "$hidden"
	for ((r = 0; r < REPS; r++)); do
		c0=$(worker_sums)
		s0=$(ring_snap)
		read -r n ms <<<"$(complete "$ids" $((dec + 1)))"
		c1=$(worker_sums)
		s1=$(ring_snap)
		a=$(srv_rep layermesh)
		[ "$n" -ge 2 ] || die "the $name mesh generated $n tokens"
		# ms per token through the ring; per token, summed over the workers (each handles one
		# message per token), their mean compute, receive wait and send per message; and what
		# the ring adds to the compute, over 4 hops.
		line=$(awk -v n="$n" -v ms="$ms" -v c0="$c0" -v c1="$c1" '
			function mean(k) { return b[k + 1] > a[k + 1] ? \
				(b[k] - a[k]) / (b[k + 1] - a[k + 1]) * 1000 : 0 }
			BEGIN {
				split(c0, a, " "); nb = split(c1, b, " "); comp = rw = sd = 0
				for (i = 1; i + 5 <= nb; i += 6) {
					comp += mean(i); rw += mean(i + 2); sd += mean(i + 4)
				}
				tok = ms / (n - 1)
				printf "%.4f %.4f %.4f %.3f %.4f %.4f", 1000 / tok, tok, comp, \
					(tok - comp) / 4 * 1000, rw, sd
			}')
		read -r tps tok comp hop rwait snd <<<"$line"
		echo "$name mesh: $n tokens, $ms ms after the first; compute $comp ms/token;" \
			"$hop us per hop | single: $a" | tr '\n' ' ' >>"$LOG"
		echo >>"$LOG"
		row mesh "$name" mesh 1 "$r" decode_tok_s "$tps"
		row mesh "$name" mesh 1 "$r" ms_per_token "$tok"
		row mesh "$name" mesh 1 "$r" compute_ms_per_token "$comp"
		row mesh "$name" mesh 1 "$r" hop_us "$hop"
		row mesh "$name" mesh 1 "$r" recv_wait_ms_per_token "$rwait"
		row mesh "$name" mesh 1 "$r" send_ms_per_token "$snd"
		# Where one token's trip goes (ring_parts), with the load it was measured under.
		parts=$(ring_parts "$s0" "$s1" "$tok")
		echo "$name ring parts (us; load $(cut -d' ' -f1 /proc/loadavg)): $parts" >>"$LOG"
		for kv in $parts; do
			row mesh "$name" mesh 1 "$r" "ring_${kv%%=*}_us" "${kv##*=}"
		done
		row mesh "$name" mesh 1 "$r" load1 "$(cut -d' ' -f1 /proc/loadavg)"
		record_rep mesh "$name" single 1 "$r" "$(grep '^decode' <<<"$a")"
		# The raw and NNG floors, under the same load as this repetition.
		unix_rows mesh "$name" "$r" "$("$UNIXB" --sizes "$hidden" --iters 1000 --ring 4)"
		unix_rows mesh "$name" "$r" "$("$NNGB" --sizes "$hidden" --iters 1000 --ring 4)"
		# NNG's hop between processes that take turns as the workers do: each reads through
		# memory for this rep's mean forward time per worker before it sends on (nng4w).
		work=$(awk -v c="$comp" 'BEGIN { printf "%d", c * 1000 / 3 }')
		iters=$(awk -v w="$work" 'BEGIN { n = int(5e6 / (3 * w + 100))
			if (n < 30) n = 30; if (n > 1000) n = 1000; print n }')
		line=$("$NNGB" --sizes "$hidden" --iters "$iters" --ring 4 --work-us "$work")
		echo "$name NNG floor between working stages: $line" >>"$LOG"
		unix_rows mesh "$name" "$r" "$line"
	done
	srv_stop layermesh
	[ "${KEEP_MESH:-0}" = 1 ] || mesh_down
}

section_mesh() {
	mesh_pair stories260K "$STORIES" "$DECODE_SMALL" 256
	[ "${QUICK_MESH:-0}" = 1 ] && return
	mesh_pair hop-4096 "$(model_hop)" "$DECODE_SMALL" 16384
	if has batch; then
		KEEP_MESH=1 mesh_pair 0.85B-q8_0 "$(model_085b q8_0)" "$DECODE" 8192
		section_batch_on_mesh
		mesh_down
		section_batch_one_inflight
	else
		mesh_pair 0.85B-q8_0 "$(model_085b q8_0)" "$DECODE" 8192
	fi
}

# batch_round K T IDS_ALL: K concurrent requests of T tokens, prompts of 4 ids taken from IDS_ALL
# (BOS, then 3 ids at offset 3k); prints "aggregate_timings aggregate_wall".
batch_round() {
	local k=$1 t=$2 i t0 t1 files=()
	local -a all pids=()
	read -r -a all <<<"$3"
	t0=$(date +%s%N)
	for ((i = 0; i < k; i++)); do
		complete "${all[0]} ${all[*]:$((1 + 3 * i)):3}" "$t" >"$TMP/batch.$i" &
		pids+=($!)
		files+=("$TMP/batch.$i")
	done
	for i in "${pids[@]}"; do wait "$i" || die "a batch request failed"; done
	t1=$(date +%s%N)
	awk -v k="$k" -v wall_ns=$((t1 - t0)) '
		{ dec += $1 - 1; gen += $1; if ($2 > maxms) maxms = $2 }
		END { printf "%.3f %.3f\n", dec / maxms * 1000, gen / (wall_ns / 1e9) }' "${files[@]}"
}

# busy_round IMPL REP K T IDS: batch_round of K sequences, with each worker's utilisation over
# it (its compute histogram's sum grown over the wall time) as rows (of section BATCH_SECTION,
# default batch, and model BATCH_MODEL, default 0.85B-q8_0).
busy_round() {
	local impl=$1 r=$2 c0 c1 t0 t1 out j u
	c0=$(worker_sums)
	t0=$(date +%s%N)
	out=$(batch_round "$3" "$4" "$5")
	t1=$(date +%s%N)
	c1=$(worker_sums)
	local sec=${BATCH_SECTION:-batch} m=${BATCH_MODEL:-0.85B-q8_0}
	row "$sec" "$m" "$impl" 1 "$r" agg_tok_s "${out%% *}"
	row "$sec" "$m" "$impl" 1 "$r" wall_tok_s "${out##* }"
	for j in 0 1 2; do
		u=$(awk -v a="$c0" -v b="$c1" -v j="$j" -v ns=$((t1 - t0)) 'BEGIN {
			split(a, x, " "); split(b, y, " "); printf "%.3f", (y[6 * j + 1] - x[6 * j + 1]) / (ns / 1e9) }')
		row "$sec" "$m" "$impl" 1 "$r" "busy_w$j" "$u"
	done
	echo "$out"
}

# steps_rep SECTION MODEL WHAT A IMPL_A REP_A B IMPL_B REP_B: two servers' lines of one
# repetition (A and B), logged on one line and recorded as IMPL_A / IMPL_B, reps REP_A / REP_B.
steps_rep() {
	echo "$1 $2 $3: $4 | $7" | tr '\n' ' ' >>"$LOG"
	echo >>"$LOG"
	record_rep "$1" "$2" "$5" 1 "$6" "$4"
	record_rep "$1" "$2" "$8" 1 "$9" "$7"
}

# mesh_inflight SECTION MODEL: the batches the mesh up now keeps on the ring (/v1/status), as
# INFLIGHT for step_rates and as a row for summarize.sh.
mesh_inflight() {
	INFLIGHT=$(curl -sf "$URL/v1/status" | jq '.scheduler.batches_in_flight')
	row "$1" "$2" steps 1 0 inflight "$INFLIGHT"
}

# step_rates SECTION MODEL FILE: what the batched matmul gives a 16-sequence step, measured in the
# single process at one thread. The scheduler spreads 16 sequences over the INFLIGHT batches in
# flight (mesh_inflight; a batch takes at most ceil(16 / INFLIGHT) of them): with 2, each worker
# step is a forward of 8 tokens; with 3, of 6, 6 or 4. Those forwards (interleaved rep by rep
# where there are two sizes), each followed by a one-token decode; then two processes doing the
# larger forward at once (rep by rep, both started together): what a second CPU adds where the
# two share the memory's bandwidth. summarize.sh turns them into the bound on 16 sequences' gain
# over one.
step_rates() {
	local sec=$1 name=$2 file=$3 r a b k=${INFLIGHT:-3} big last
	big=$(((16 + k - 1) / k))
	last=$((16 - (k - 1) * big))
	log "$sec: $name, the forwards of a 16-sequence step over $k batches ($big and $last tokens) against one token, $REPS reps"
	srv_start "step$big" "$BRUN" --model "$file" --bench-prefill "$big" --bench-decode 8 \
		--reps $((2 * REPS)) --threads 1 --kernels "$KERNELS" --bench-warmup --bench-wait
	if [ "$last" != "$big" ]; then
		srv_start "step$last" "$BRUN" --model "$file" --bench-prefill "$last" --bench-decode 8 \
			--reps "$REPS" --threads 1 --kernels "$KERNELS" --bench-warmup --bench-wait
	fi
	for ((r = 0; r < REPS; r++)); do
		b=$(srv_rep "step$big")
		if [ "$last" != "$big" ]; then
			a=$(srv_rep "step$last")
			steps_rep "$sec" "$name" "$last- and $big-token steps, rep $r" "$a" "step$last" "$r" \
				"$b" "step$big" "$r"
		else
			echo "$sec $name $big-token steps, rep $r: $b" | tr '\n' ' ' >>"$LOG"
			echo >>"$LOG"
			record_rep "$sec" "$name" "step$big" 1 "$r" "$b"
		fi
	done
	[ "$last" = "$big" ] || srv_stop "step$last"
	srv_start "step${big}b" "$BRUN" --model "$file" --bench-prefill "$big" --bench-decode 8 \
		--reps "$REPS" --threads 1 --kernels "$KERNELS" --bench-warmup --bench-wait
	for ((r = 0; r < REPS; r++)); do
		srv_go "step$big"
		srv_go "step${big}b"
		a=$(srv_read "step$big")
		b=$(srv_read "step${big}b")
		steps_rep "$sec" "$name" "two $big-token steps at once, rep $r" "$a" "step${big}pair" "$r" \
			"$b" "step${big}pair" "$((REPS + r))"
	done
	srv_stop "step$big"
	srv_stop "step${big}b"
}

section_batch_on_mesh() {
	local ids r one sixteen
	log "batch: 1 and 16 concurrent sequences of $BATCH_TOKENS tokens, $REPS reps"
	ids=$("$BRUN" --model "$(model_085b q8_0)" --bench-prefill 64 --print-prompt)
	for ((r = 0; r < REPS; r++)); do
		one=$(busy_round seq1 "$r" 1 "$BATCH_TOKENS" "$ids")
		sixteen=$(busy_round seq16 "$r" 16 "$BATCH_TOKENS" "$ids")
		echo "batch rep $r: 1 seq $one | 16 seqs $sixteen (timings, wall tok/s)" >>"$LOG"
	done
	mesh_inflight batch 0.85B-q8_0
	local status j pid hwm planned
	status=$(curl -sf "$URL/v1/status")
	for j in 0 1 2; do
		pid=$(jq ".workers[$j].pid" <<<"$status")
		hwm=$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$pid/status")
		planned=$(jq ".plan.workers[$j].total_bytes" <<<"$status")
		row batch "w$j" worker 1 0 vmhwm_bytes "$hwm"
		row batch "w$j" worker 1 0 planned_bytes "$planned"
		row batch "w$j" worker 1 0 layers "$(jq -r ".workers[$j] | \"\(.start)-\(.end)\"" \
			<<<"$status")"
	done
}

# The forwards of a 16-sequence step (step_rates), run here so that both ways into the batch
# section (with and without mesh) take them; then the same 16 sequences in one batch travelling
# the ring (batches_in_flight = 1), against the default (one batch per worker, or as many as
# the CPUs compute at once where that is fewer): weight reuse against keeping stages busy.
section_batch_one_inflight() {
	local ids r out
	step_rates batch 0.85B-q8_0 "$(model_085b q8_0)"
	log "batch: 16 concurrent sequences with batches_in_flight = 1, $REPS reps"
	ids=$("$BRUN" --model "$(model_085b q8_0)" --bench-prefill 64 --print-prompt)
	BIF=1 mesh_up 0.85B-q8_0-bif1 "$(model_085b q8_0)"
	for ((r = 0; r < REPS; r++)); do
		out=$(busy_round seq16_bif1 "$r" 16 "$BATCH_TOKENS" "$ids")
		echo "batch (1 in flight) rep $r: 16 seqs $out (timings, wall tok/s)" >>"$LOG"
	done
	mesh_down
}

section_batch() {
	local f
	f=$(model_085b q8_0)
	mesh_up 0.85B-q8_0 "$f"
	section_batch_on_mesh
	mesh_down
	section_batch_one_inflight
}

# The MoE model against llama.cpp at each thread count, then 1 and 16 sequences through a
# 3-worker mesh of it (the first of --moe-types), interleaved round by round.
section_moe() {
	local t th f name ids r one sixteen
	for t in $MOE_TYPES; do
		f=$(model_moe "$t")
		name=$(moe_name "$t")
		for th in $THREADS; do
			PAIR_SECTION=moe single_pair "$name" "$f" "$th" "$DECODE"
		done
		f=$(model_hybrid "$t")
		name=$(hybrid_name "$t")
		for th in $THREADS; do
			PAIR_SECTION=moe single_pair "$name" "$f" "$th" "$DECODE"
		done
	done
	t=${MOE_TYPES%% *}
	f=$(model_moe "$t")
	name=$(moe_name "$t")
	log "moe batch: $name, 1 and 16 concurrent sequences of $BATCH_TOKENS tokens through 3 workers, $REPS reps"
	mesh_up "$name" "$f"
	ids=$("$BRUN" --model "$f" --bench-prefill 64 --print-prompt)
	complete "$ids" 2 >/dev/null # the mesh's own warm-up
	for ((r = 0; r < REPS; r++)); do
		one=$(BATCH_SECTION=moebatch BATCH_MODEL=$name busy_round seq1 "$r" 1 "$BATCH_TOKENS" "$ids")
		sixteen=$(BATCH_SECTION=moebatch BATCH_MODEL=$name busy_round seq16 "$r" 16 \
			"$BATCH_TOKENS" "$ids")
		echo "moe batch rep $r: 1 seq $one | 16 seqs $sixteen (timings, wall tok/s)" >>"$LOG"
	done
	mesh_inflight moebatch "$name"
	mesh_down
	step_rates moebatch "$name" "$f"
}

# shellcheck source=bench/peer.sh
. "$ROOT/bench/peer.sh"

# --- run --------------------------------------------------------------------------------------

CPU=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)
# The instruction sets the kernels choose by, as the CPU reports them.
FLAGS=$(sed -n 's/^flags[^:]*: //p' /proc/cpuinfo | head -n 1 | tr ' ' '\n' |
	grep -xE 'avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|avx512vbmi|gfni|amx_tile|amx_int8|amx_bf16' |
	tr '\n' ' ' | sed 's/ $//')
# The family and model name the microarchitecture where the model name does not ("AMD EPYC"
# in these VMs: family 25 is Zen 3 and Zen 4, family 26 Zen 5).
FAMILY=$(sed -n 's/^cpu family[^:]*: //p' /proc/cpuinfo | head -n 1)
MODEL=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
CPU="$CPU (family $FAMILY model $MODEL) [$FLAGS]"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT+dirty"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
log "bench/run.sh: sections $SECTIONS, kernels $KERNELS, $REPS reps; $CPU, $(nproc) CPUs, commit $COMMIT, load $LOAD0"
log "raw results: $CSV"

has bw && section_bw
has unix && section_unix
has single && section_single
has mesh && section_mesh
has batch && ! has mesh && section_batch
has moe && section_moe
has peer && section_peer

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
MINUTES=$((($(date +%s) - T_START + 30) / 60))
log "done in $MINUTES min; load $LOAD1"

LABEL=$COMMIT
[ "$KERNELS" = auto ] || LABEL="$COMMIT, layermesh with --kernels $KERNELS"
[ -s "$TMP/kernels" ] && LABEL="$LABEL, kernel set $(cat "$TMP/kernels")"
SUMMARY=$("$ROOT/bench/summarize.sh" "$CSV" "$CPU" "$LABEL" "$LOAD0" "$LOAD1" "$MINUTES" \
	"$PREFILL" "$DECODE" "$DECODE_SMALL" "$BATCH_TOKENS" "$REPS")
echo "$SUMMARY" | tee -a "$LOG"
if [ "$RECORD" = 1 ]; then
	printf '\n%s\n' "$SUMMARY" >>"$ROOT/bench/RESULTS.md"
	log "appended to bench/RESULTS.md"
fi

# shellcheck shell=bash
# bench/peer.sh — the peer section of bench/run.sh, sourced by it: llama.cpp's own layer split
# over RPC beside a layermesh mesh of the same model, both through their HTTP APIs.
#
# llama.cpp's ggml-rpc-server and llama-server are built from the llama.cpp release that the
# oracle's npm package carries (its git bundle), once, into bench/peer/ (not tracked by git).
# Three rpc-servers of one thread each on loopback hold the layers (llama-server's --rpc, every
# layer offloaded, split 1:1:1; llama-server's own CPU device keeps only the token embeddings'
# lookup); the mesh is run.sh's mesh_up: 3 workers of one thread each, balanced fence. Both run
# at once and are asked in turn, repetition by repetition. Every request is greedy, with
# cache_prompt false (llama-server's prompt cache and layermesh's prefix cache both off).

PEER_DIR=$ROOT/bench/peer
PEER_BIN=$PEER_DIR/build/bin
# The prompt of the time-to-first-token measure (run.sh's --quick sets 128).
: "${PEER_PROMPT:=512}"
# The request a stage is killed under, and how long into it (run.sh's --quick sets both lower).
: "${PEER_KILL_TOKENS:=400}" "${PEER_KILL_AFTER:=3}"

# peer_build: bench/peer/build/bin/{ggml-rpc-server,llama-server}, built when missing from a
# clone of the bundle under PEER_ORACLE (the build's -Dllama_oracle, or LM_ORACLE_DIR).
peer_build() {
	local src=$PEER_DIR/llama.cpp bundle
	[ -x "$PEER_BIN/ggml-rpc-server" ] && [ -x "$PEER_BIN/llama-server" ] && return 0
	bundle=$PEER_ORACLE/node_modules/node-llama-cpp/llama/gitRelease.bundle
	[ -f "$bundle" ] || die "$bundle is missing (the llama.cpp oracle: -Dllama_oracle, LM_ORACLE_DIR)"
	mkdir -p "$PEER_DIR"
	if [ ! -d "$src/.git" ]; then
		log "peer: cloning llama.cpp from $bundle"
		git clone -q "$bundle" "$src" >>"$LOG" 2>&1 || die "git clone of $bundle failed"
	fi
	log "peer: building llama.cpp's ggml-rpc-server and llama-server (minutes; log in $LOG)"
	cmake -S "$src" -B "$PEER_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
		-DBUILD_SHARED_LIBS=OFF >>"$LOG" 2>&1 || die "cmake configure of llama.cpp failed (see $LOG)"
	nice cmake --build "$PEER_DIR/build" --target ggml-rpc-server llama-server -j2 >>"$LOG" 2>&1 ||
		die "the llama.cpp build failed (see $LOG)"
}

# peer_wait_port PORT PID WHAT: until PORT accepts a connection (60 s), or PID exits.
peer_wait_port() {
	for _ in $(seq 600); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || die "$3 exited (see $LOG)"
		sleep 0.1
	done
	die "$3 did not listen on port $1 in 60 s"
}

# peer_up FILE SLOT_CTX: 3 rpc-servers and a llama-server of 16 slots of SLOT_CTX positions
# over them; sets PEER_URL, PEER_PID (llama-server) and PEER_STAGE (the rpc-servers' pids).
PEER_STAGE=()
peer_up() {
	local file=$1 ctx=$2 i p rpc='' http
	for i in 0 1 2; do
		p=$(port)
		"$PEER_BIN/ggml-rpc-server" -H 127.0.0.1 -p "$p" -t 1 >"$TMP/rpc$i.log" 2>&1 &
		PEER_STAGE[i]=$!
		PIDS+=("$!")
		peer_wait_port "$p" "$!" "ggml-rpc-server $i"
		rpc+=${rpc:+,}127.0.0.1:$p
	done
	http=$(port)
	PEER_URL=http://127.0.0.1:$http
	"$PEER_BIN/llama-server" -m "$file" --rpc "$rpc" -ngl 999 --fit off --split-mode layer \
		--tensor-split 1,1,1 -t 1 -tb 1 --parallel 16 -c $((16 * ctx)) --cache-ram 0 \
		--no-webui --host 127.0.0.1 --port "$http" -lv 4 >"$TMP/llama-server.log" 2>&1 &
	PEER_PID=$!
	PIDS+=("$PEER_PID")
	for _ in $(seq 6000); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$PEER_URL/health")" = 200 ] &&
			break
		kill -0 "$PEER_PID" 2>/dev/null || { cat "$TMP/llama-server.log" >>"$LOG"; die "llama-server exited (see $LOG)"; }
		sleep 0.1
	done
	curl -sf --max-time 5 "$PEER_URL/health" >/dev/null || die "llama-server was not ready in 10 minutes"
	# Where llama.cpp put the weights, one buffer per device (verbosity 4 logs it, and a few
	# lines a request).
	grep -E 'model buffer size|offloaded|pipeline parallelism' "$TMP/llama-server.log" >>"$LOG" || true
}

# peer_body IDS MAX: the request both servers get.
peer_body() {
	jq -cn --arg ids "$1" --argjson max "$2" \
		'{prompt: ($ids | split(" ") | map(tonumber)), max_tokens: $max, temperature: 0,
		  cache_prompt: false, stream: false}'
}

# peer_req URL IDS MAX: one request; prints "predicted_n predicted_ms prompt_ms wall_ms".
peer_req() {
	local out resp code wall
	out=$(mktemp "$TMP/req.XXXXXX")
	read -r code wall <<<"$(curl -sS --max-time 1800 -o "$out" -w '%{http_code} %{time_total}' \
		"$1/v1/completions" -H 'Content-Type: application/json' -d "$(peer_body "$2" "$3")" \
		2>>"$LOG")" || true
	resp=$(cat "$out")
	rm -f "$out"
	[ "$code" = 200 ] || { echo "$1 answered $code: $resp" >>"$LOG"; return 1; }
	jq -er --arg wall "$wall" 'select(.timings.predicted_n != null) |
		"\(.timings.predicted_n) \(.timings.predicted_ms) \(.timings.prompt_ms) \($wall | tonumber * 1e6 | round / 1e3)"' \
		<<<"$resp" || { echo "$1 answered: $resp" >>"$LOG"; return 1; }
}

# peer_round URL K T IDS_ALL: K concurrent requests of T tokens, prompts of 4 ids from IDS_ALL as
# in batch_round; prints "aggregate_decode_tok_s wall_tok_s tokens" (the batch section's two
# figures, and every token generated).
peer_round() {
	local url=$1 k=$2 t=$3 i t0 t1 files=() pids=()
	local -a all
	read -r -a all <<<"$4"
	t0=$(date +%s%N)
	for ((i = 0; i < k; i++)); do
		peer_req "$url" "${all[0]} ${all[*]:$((1 + 3 * i)):3}" "$t" >"$TMP/peer.$i" &
		pids+=($!)
		files+=("$TMP/peer.$i")
	done
	for i in "${pids[@]}"; do wait "$i" || die "a request of $k to $url failed (see $LOG)"; done
	t1=$(date +%s%N)
	awk -v wall_ns=$((t1 - t0)) '
		{ dec += $1 - 1; gen += $1; if ($2 > maxms) maxms = $2 }
		END { printf "%.3f %.3f %d\n", dec / maxms * 1000, gen / (wall_ns / 1e9), gen }' "${files[@]}"
}

# peer_cpu_ms PID...: the CPU time (user and system, every thread) the processes have taken, ms.
peer_cpu_ms() {
	local p s t=0 tck
	local -a f
	tck=$(getconf CLK_TCK)
	for p in "$@"; do
		s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		read -r -a f <<<"${s##*) }" # from field 3, the state: utime is field 14, stime 15
		t=$((t + f[11] + f[12]))
	done
	echo $((t * 1000 / tck))
}

# The processes of each side: llama-server and its rpc-servers; `layermesh up` (the coordinator)
# and its workers.
peer_pids() {
	if [ "$1" = layermesh ]; then
		echo "$UP_PID" $(pgrep -P "$UP_PID")
	else
		echo "$PEER_PID" "${PEER_STAGE[@]}"
	fi
}

# peer_rep NAME IMPL URL REP BOS DECODE IDS16 IDS_LONG: one repetition of the three measures,
# each with the CPU time all of the side's processes took over it (the figure a loaded machine
# moves least: wall time waits for the other tenants, CPU time does not).
peer_rep() {
	local name=$1 impl=$2 url=$3 r=$4 n ms pms wall out c0 c1 c2 c3 dec agg tok
	local -a pids
	read -r -a pids <<<"$(peer_pids "$impl")"
	c0=$(peer_cpu_ms "${pids[@]}")
	read -r n ms pms wall <<<"$(peer_req "$url" "$5" $(($6 + 1)))" || true
	[ "${n:-0}" -ge 2 ] || die "$impl generated ${n:-no} tokens (see $LOG)"
	c1=$(peer_cpu_ms "${pids[@]}")
	out=$(peer_round "$url" 16 "$BATCH_TOKENS" "$7")
	c2=$(peer_cpu_ms "${pids[@]}")
	read -r dec agg tok <<<"$out"
	row peer "$name" "$impl" 1 "$r" decode_tok_s "$(awk -v n="$n" -v ms="$ms" 'BEGIN { printf "%.4f", (n - 1) / ms * 1000 }')"
	row peer "$name" "$impl" 1 "$r" decode_n "$n"
	row peer "$name" "$impl" 1 "$r" decode_cpu_ms_tok "$(awk -v c=$((c1 - c0)) -v n="$n" 'BEGIN { printf "%.3f", c / n }')"
	row peer "$name" "$impl" 1 "$r" agg16_tok_s "$dec"
	row peer "$name" "$impl" 1 "$r" wall16_tok_s "$agg"
	row peer "$name" "$impl" 1 "$r" agg16_cpu_ms_tok "$(awk -v c=$((c2 - c1)) -v n="$tok" 'BEGIN { printf "%.3f", c / n }')"
	read -r _ _ pms wall <<<"$(peer_req "$url" "$8" 1)" || true
	[ -n "${wall:-}" ] || die "$impl failed the ${PEER_PROMPT}-token prompt (see $LOG)"
	c3=$(peer_cpu_ms "${pids[@]}")
	row peer "$name" "$impl" 1 "$r" ttft_ms "$wall"
	row peer "$name" "$impl" 1 "$r" prompt_ms "$pms"
	row peer "$name" "$impl" 1 "$r" ttft_cpu_ms $((c3 - c2))
	echo "peer $impl rep $r: $n tokens in $ms ms after the first, CPU $((c1 - c0)) ms;" \
		"16 streams $dec $agg tok/s (decode, wall), $tok tokens, CPU $((c2 - c1)) ms;" \
		"${PEER_PROMPT}-token prompt: first token $wall ms (server $pms ms), CPU $((c3 - c2)) ms" >>"$LOG"
}

# peer_text S: S as one CSV field (no commas, no line breaks, 200 characters at most).
peer_text() { tr ',|\n\r' ';/  ' <<<"$1" | sed 's/  */ /g; s/ $//' | cut -c1-200; }

# peer_kill NAME IMPL URL HEALTH STAGE_PID SERVER_PID BOS [SERVER_LOG]: a request of PEER_KILL_TOKENS tokens,
# the middle stage SIGKILLed PEER_KILL_AFTER seconds into it; rows: what the client got, whether the server lived,
# (if it died, the abort SERVER_LOG names: ggml's names its file and line) and whether it served
# the next request (waiting up to 120 s after the reply for HEALTH to
# answer 200).
peer_kill() {
	local name=$1 impl=$2 url=$3 health=$4 stage=$5 server=$6 cpid rc code body t0 t1 next alive
	log "peer: $impl, the middle stage (pid $stage) killed mid-request"
	curl -sS --max-time 300 -o "$TMP/kill.body" -w '%{http_code}' "$url/v1/completions" \
		-H 'Content-Type: application/json' -d "$(peer_body "$7" "$PEER_KILL_TOKENS")" \
		>"$TMP/kill.code" 2>"$TMP/kill.err" &
	cpid=$!
	sleep "$PEER_KILL_AFTER"
	kill -0 "$cpid" 2>/dev/null || log "peer: $impl's request ended before the kill"
	kill -KILL "$stage"
	row peer "$name" "$impl" 1 0 kill_after_s "$PEER_KILL_AFTER"
	t0=$(date +%s%N)
	rc=0
	wait "$cpid" || rc=$?
	t1=$(date +%s%N)
	code=$(cat "$TMP/kill.code")
	# A completion is told by its finish and token count, an error by its message.
	body=$(jq -r 'if .choices then "finish_reason \(.choices[0].finish_reason); \(.usage.completion_tokens) tokens"
		elif .error then "error: \(.error.message // .error)" else tostring end' \
		"$TMP/kill.body" 2>/dev/null || cat "$TMP/kill.body" "$TMP/kill.err" 2>/dev/null || true)
	[ -n "$body" ] || body=$(cat "$TMP/kill.err" 2>/dev/null || true)
	body=${body:0:300}
	echo "peer $impl kill: curl exit $rc, HTTP $code after $(((t1 - t0) / 1000000)) ms: $body" >>"$LOG"
	row peer "$name" "$impl" 1 0 kill_reply "$(peer_text "curl exit $rc; HTTP $code after $(((t1 - t0) / 1000000)) ms; $body")"
	alive=gone
	kill -0 "$server" 2>/dev/null && alive=up
	if [ "$alive" = gone ] && [ -n "${8:-}" ]; then
		alive="gone: $(grep -m 1 -E '\.(c|cpp):[0-9]+: ' "$8" | sed 's|^.*/||' || true)"
	fi
	next="the server is gone"
	if [ "$alive" = up ]; then
		next="not ready in 120 s"
		for _ in $(seq 1200); do
			if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url$health")" = 200 ]; then
				t0=$(date +%s%N)
				if peer_req "$url" "$7" 8 >/dev/null; then
					next="served (ready $(((t0 - t1) / 1000000)) ms after the reply)"
				else
					next="failed (ready $(((t0 - t1) / 1000000)) ms after the reply; see the log)"
				fi
				break
			fi
			kill -0 "$server" 2>/dev/null || { next="the server exited after the kill"; break; }
			sleep 0.1
		done
	fi
	echo "peer $impl after the kill: server $alive; next request: $next" >>"$LOG"
	row peer "$name" "$impl" 1 0 kill_server "$(peer_text "$alive")"
	row peer "$name" "$impl" 1 0 kill_next "$(peer_text "$next")"
}

section_peer() {
	local f name bos ids16 long r u
	peer_build
	if [ "$QUICK" = 1 ]; then
		f=$STORIES name=stories260K
	else
		f=$(model_085b q8_0) name=0.85B-q8_0
	fi
	log "peer: $name, llama.cpp's RPC split over 3 rpc-servers against a 3-worker mesh, 1 thread" \
		"a stage; decode $DECODE, 16 streams of $BATCH_TOKENS, a ${PEER_PROMPT}-token prompt, $REPS reps"
	bos=$("$BRUN" --model "$f" --bench-prefill 1 --print-prompt)
	ids16=$("$BRUN" --model "$f" --bench-prefill 64 --print-prompt)
	long=$("$BRUN" --model "$f" --bench-prefill "$PEER_PROMPT" --print-prompt)
	row peer "$name" llama.cpp-rpc 1 0 prompt_tokens "$PEER_PROMPT"
	peer_up "$f" $((PEER_PROMPT + 128))
	MESH_SEQ=$((PEER_PROMPT + 128)) mesh_up "peer-$name" "$f"
	row peer "$name" llama.cpp-rpc 1 0 split "$(peer_text "$(awk '/model buffer size/ {
		if ($0 ~ /CPU/) printf "llama-server %s MiB ", $(NF - 1)
		else printf "rpc%d %s MiB ", n++, $(NF - 1) }' "$TMP/llama-server.log")")"
	row peer "$name" layermesh 1 0 split "$(peer_text "$(curl -sf --max-time 10 "$URL/v1/status" |
		jq -r '.plan.workers[] | "\(.name) layers \(.start)-\(.end) \(.total_bytes / 1048576 | floor) MiB"' | tr '\n' ' ')")"
	# Each side's warm-up: a short request and a long prompt.
	for u in "$PEER_URL" "$URL"; do
		peer_req "$u" "$bos" 4 >/dev/null || die "the warm-up request to $u failed (see $LOG)"
		peer_req "$u" "$long" 1 >/dev/null || die "the warm-up prompt to $u failed (see $LOG)"
	done
	for ((r = 0; r < REPS; r++)); do
		peer_rep "$name" llama.cpp-rpc "$PEER_URL" "$r" "$bos" "$DECODE" "$ids16" "$long"
		peer_rep "$name" layermesh "$URL" "$r" "$bos" "$DECODE" "$ids16" "$long"
	done
	peer_kill "$name" llama.cpp-rpc "$PEER_URL" /health "${PEER_STAGE[1]}" "$PEER_PID" "$bos" \
		"$TMP/llama-server.log"
	peer_kill "$name" layermesh "$URL" /readyz \
		"$(curl -sf --max-time 10 "$URL/v1/status" | jq '.workers[] | select(.name == "w1") | .pid')" \
		"$UP_PID" "$bos"
	mesh_down
}

# tests/integration/lib.sh — helpers for tests that bring real meshes up.
#
# Sourced by the test scripts. Every mesh lives in its own temporary directory (ipc sockets,
# mesh.toml, logs); every wait is bounded; whatever a test started is stopped when it exits,
# also when it fails.
#
# Environment (set by meson): LM_BIN (the layermesh binary), LM_WORKER (layermesh-worker),
# LM_SHARED (the shared data directory).

set -euo pipefail

: "${LM_BIN:?LM_BIN must point at the layermesh binary}"
: "${LM_WORKER:?LM_WORKER must point at layermesh-worker}"
: "${LM_SHARED:?LM_SHARED must point at the shared data directory}"

LM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/lm-test.XXXXXX")
# A sanitizer build runs several times slower: its liveness probes get 3 s instead of 1 s, so a
# worker starved by the instrumentation is not taken for a hung one. LM_ASAN=1 tells the tests
# whose bounds are the normal build's (resident memory, a 60-worker redeploy's timeouts).
LM_ASAN=0
if ldd "$LM_WORKER" 2>/dev/null | grep -q libasan; then
	LM_ASAN=1
	[ -n "${LM_WORKER_TIMEOUT:-}" ] || LM_WORKER_TIMEOUT=3
fi
LM_PIDS=()

lm_cleanup() {
	local pid
	for pid in "${LM_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${LM_PIDS[@]}"; do
		lm_wait_exit "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
	done
	# Anything still holding our directory in its arguments is ours and must go.
	pkill -KILL -f "$LM_TMP" 2>/dev/null || true
	# LM_KEEP_TMP=1 keeps the logs and sockets for a look (debugging a test).
	[ -n "${LM_KEEP_TMP:-}" ] && echo "kept $LM_TMP" >&2 || rm -rf "$LM_TMP"
}
trap lm_cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	# The logs go with the temporary directory: show the end of each mesh's here.
	local f
	for f in $(find "$LM_TMP" -name up.log 2>/dev/null); do
		echo "--- the last lines of $f" >&2
		tail -n 40 "$f" >&2
	done
	exit 1
}

# The worker_timeout (s) of a kill storm, which counts restarts against kills: a kill is seen at
# once (the process ends), so the liveness bound need only outlast a worker starved of CPU by a
# storm's clients and replays on a loaded 2-CPU machine (with the default 1 s, one CI run
# counted 5 restarts for 4 kills). At least 5 s, or $LM_WORKER_TIMEOUT when longer.
lm_storm_worker_timeout() {
	local wt=${LM_WORKER_TIMEOUT:-5}
	((wt >= 5)) || wt=5
	echo "$wt"
}

# fail_restarts LOG MESSAGE: fail with the keeper's lines of LOG on why workers went down and
# came back (the end of the log that fail shows may not reach them).
fail_restarts() {
	grep -E 'is down|starting again|before it was ready|hung' "$1" >&2 || true
	fail "$2"
}

# lm_stacks PID: where each thread of a process is, on stderr (a hang shows in the stacks).
lm_stacks() {
	local pid=$1
	echo "--- pid $pid: $(awk '{ print "state " $3 }' "/proc/$pid/stat" 2>/dev/null || echo gone)" >&2
	command -v gdb >/dev/null || return 0
	timeout 20 gdb -p "$pid" -batch -ex "thread apply all bt" 2>/dev/null |
		grep -E '^Thread|^#' >&2 || true
}

# A TCP port that is free now and was not handed out before in this test. Ports come from
# 10000-32000, below Linux's ephemeral range (32768-60999) so no outgoing connection holds one,
# starting at a point derived from the test's pid (parallel tests stay apart); a counter file
# survives the subshells of $(lm_port).
lm_port() {
	local counter="$LM_TMP/.port" p
	[ -f "$counter" ] || echo $(( 10000 + ($$ * 97) % 22000 )) >"$counter"
	p=$(cat "$counter")
	while :; do
		p=$((p + 1))
		[ "$p" -lt 32000 ] || p=10000
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p" >"$counter"
			echo "$p"
			return
		fi
	done
}

# Waits until process $1 has exited, at most $2 seconds.
lm_wait_exit() {
	local pid=$1 limit=${2:-10} i
	for ((i = 0; i < limit * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

# lm_mesh_toml FILE MODEL TRANSPORT HTTP_PORT FENCE... writes a mesh.toml with one worker per
# fence range ("0:2 2:5"), pinned, over TRANSPORT: ipc, tcp, or tls (tls+tcp://, with the
# certificates in $LM_TLS_DIR: ca.pem, mesh.pem, mesh.key). $LM_AUTH_TOKEN, when set, becomes
# [coordinator] auth_token; $LM_REQUEST_TIMEOUT and $LM_WORKER_TIMEOUT (seconds), [coordinator]
# request_timeout and worker_timeout; $LM_SEED, [coordinator] seed; $LM_KV_TYPE_K, $LM_KV_TYPE_V, $LM_KV_TYPE_K_SWA and
# $LM_KV_TYPE_V_SWA, [model] kv_type_k, kv_type_v, kv_type_k_swa and kv_type_v_swa;
# $LM_WORKER_KV, one word per worker in order ("q4_0 - f16,f32"), the worker's own kv_type_k and
# kv_type_v: T for both, K,V apart, "-" for none.
lm_mesh_toml() {
	local file=$1 model=$2 transport=$3 http=$4
	shift 4
	local dir scheme=$transport kv=()
	dir=$(dirname "$file")
	read -r -a kv <<<"${LM_WORKER_KV:-}"
	[ "$transport" != tls ] || scheme=tls+tcp
	{
		echo "[model]"
		echo "path = \"$model\""
		echo "max_seq_len = ${LM_MAX_SEQ:-256}"
		echo "slots = ${LM_SLOTS:-16}"
		echo "max_batch = ${LM_MAX_BATCH:-64}"
		echo "wire_dtype = \"${LM_WIRE_DTYPE:-f32}\""
		[ -z "${LM_KV_TYPE_K:-}" ] || echo "kv_type_k = \"$LM_KV_TYPE_K\""
		[ -z "${LM_KV_TYPE_V:-}" ] || echo "kv_type_v = \"$LM_KV_TYPE_V\""
		[ -z "${LM_KV_TYPE_K_SWA:-}" ] || echo "kv_type_k_swa = \"$LM_KV_TYPE_K_SWA\""
		[ -z "${LM_KV_TYPE_V_SWA:-}" ] || echo "kv_type_v_swa = \"$LM_KV_TYPE_V_SWA\""
		echo
		echo "[coordinator]"
		echo "http = \"127.0.0.1:$http\""
		[ -z "${LM_AUTH_TOKEN:-}" ] || echo "auth_token = \"$LM_AUTH_TOKEN\""
		[ -z "${LM_REQUEST_TIMEOUT:-}" ] || echo "request_timeout = $LM_REQUEST_TIMEOUT"
		[ -z "${LM_WORKER_TIMEOUT:-}" ] || echo "worker_timeout = $LM_WORKER_TIMEOUT"
		[ -z "${LM_SEED:-}" ] || echo "seed = $LM_SEED"
		[ -z "${LM_RING_STAMPS:-}" ] || echo "ring_stamps = $LM_RING_STAMPS"
		if [ "$transport" != ipc ]; then
			echo "data_in = \"$scheme://127.0.0.1:$(lm_port)\""
		else
			echo "data_in = \"ipc://$dir/coord.data\""
		fi
		echo
		echo "[plan]"
		echo "strategy = \"pinned\""
		if [ "$transport" = tls ]; then
			echo
			echo "[tls]"
			echo "ca_file = \"$LM_TLS_DIR/ca.pem\""
			echo "cert_file = \"$LM_TLS_DIR/mesh.pem\""
			echo "key_file = \"$LM_TLS_DIR/mesh.key\""
		fi
		local i=0 r
		for r in "$@"; do
			echo
			echo "[[worker]]"
			echo "name = \"w$i\""
			if [ "$transport" != ipc ]; then
				echo "data = \"$scheme://127.0.0.1:$(lm_port)\""
				echo "control = \"$scheme://127.0.0.1:$(lm_port)\""
			else
				echo "data = \"ipc://$dir/w$i.data\""
				echo "control = \"ipc://$dir/w$i.ctl\""
			fi
			echo "http = \"127.0.0.1:$(lm_port)\""
			echo "memory_limit = \"1GiB\""
			echo "layers = [${r%%:*}, ${r##*:}]"
			if [ -n "${kv[$i]:-}" ] && [ "${kv[$i]}" != - ]; then
				echo "kv_type_k = \"${kv[$i]%%,*}\""
				echo "kv_type_v = \"${kv[$i]##*,}\""
			fi
			i=$((i + 1))
		done
	} >"$file"
}

# lm_up TOML LOG [ARGS...]: starts `layermesh up` in the background (ARGS appended to its
# command line) and waits until /readyz answers 200. Sets LM_UP_PID and LM_URL.
lm_up() {
	local toml=$1 log=$2 port
	shift 2
	port=$(sed -n 's/^http = "127.0.0.1:\([0-9]*\)"/\1/p' "$toml" | head -n 1)
	LM_URL="http://127.0.0.1:$port"
	"$LM_BIN" up "$toml" --worker-bin "$LM_WORKER" --timeout 60 "$@" >"$log" 2>&1 &
	LM_UP_PID=$!
	LM_PIDS+=("$LM_UP_PID")
	local i
	for ((i = 0; i < 600; i++)); do
		if curl -sf "$LM_URL/readyz" >/dev/null 2>&1; then
			return 0
		fi
		if ! kill -0 "$LM_UP_PID" 2>/dev/null; then
			cat "$log" >&2
			fail "layermesh up exited before it was ready"
		fi
		sleep 0.1
	done
	cat "$log" >&2
	fail "the mesh was not ready within 60 s"
}

# lm_down: SIGTERM to `layermesh up`, which must stop every worker and remove its ipc files.
lm_down() {
	local dir=$1
	kill -TERM "$LM_UP_PID"
	if ! lm_wait_exit "$LM_UP_PID" 20; then
		lm_stacks "$LM_UP_PID"
		fail "layermesh up did not stop within 20 s"
	fi
	wait "$LM_UP_PID" 2>/dev/null || true
	if pgrep -f "layermesh-worker.*$dir" >/dev/null; then
		pgrep -af "layermesh-worker.*$dir" >&2
		fail "workers survived layermesh up"
	fi
	local left
	left=$(find "$dir" -maxdepth 1 \( -name '*.data' -o -name '*.ctl' -o -name '*.data.b' \
		-o -name '*.ctl.b' \) | head -n 5)
	[ -z "$left" ] || fail "ipc files left behind: $left"
}

# ---------------------------------------------------------------- load under faults
#
# lm_specs_init DIR MODEL CTX N [SPEC...]: the requests a load cycles through. Each SPEC is
# "PROMPT|ARGS" (ARGS for `layermesh run` and `generate`: --temp 0, or --temp 0.8 --seed 3);
# DIR/solo.K receives what the single process prints for spec K with -n N, the reference every
# answer of the mesh is held to. Without SPECs: eight, greedy and seeded, over four prompts.
lm_specs_init() {
	local dir=$1 model=$2 ctx=$3 n=$4 k
	shift 4
	LM_SPECS=("$@")
	if [ ${#LM_SPECS[@]} -eq 0 ]; then
		LM_SPECS=("Once upon a time|--temp 0" "The cat|--temp 0.8 --seed 1"
			"Lily wanted|--temp 0" "Tom had 3 red apples!|--temp 0.8 --seed 4"
			"The cat|--temp 0" "Once upon a time|--temp 0.8 --seed 6"
			"Tom had 3 red apples!|--temp 0" "Lily wanted|--temp 0.8 --seed 8")
	fi
	LM_SPEC_N=$n
	for k in "${!LM_SPECS[@]}"; do
		# shellcheck disable=SC2086
		"$LM_BIN" run --model "$model" --prompt "${LM_SPECS[$k]%%|*}" -n "$n" --ctx "$ctx" \
			${LM_SPECS[$k]#*|} >"$dir/solo.$k" 2>/dev/null ||
			fail "layermesh run failed for spec $k (${LM_SPECS[$k]})"
	done
}

# One client: requests in turn until DIR/stop exists (at most MAX of them); one line per
# request in DIR/client.ID: spec, exit status, milliseconds, same (1 when the answer equals the
# single process's, 0 when it differs, - when it failed).
lm_client() {
	local dir=$1 id=$2 max=$3 i k rc t0 ms same
	for ((i = 0; i < max; i++)); do
		[ ! -e "$dir/stop" ] || break
		k=$(((id + i) % ${#LM_SPECS[@]}))
		t0=$(date +%s%N)
		rc=0
		# shellcheck disable=SC2086
		"$LM_BIN" generate --url "$LM_URL" --prompt "${LM_SPECS[$k]%%|*}" -n "$LM_SPEC_N" \
			${LM_SPECS[$k]#*|} --timeout 120 >"$dir/out.$id" 2>"$dir/err.$id" || rc=$?
		ms=$((($(date +%s%N) - t0) / 1000000))
		same=-
		if [ "$rc" -eq 0 ]; then
			if cmp -s "$dir/out.$id" "$dir/solo.$k"; then same=1; else
				same=0
				cp "$dir/out.$id" "$dir/differs.$id.$i"
			fi
		else
			cp "$dir/err.$id" "$dir/failed.$id.$i"
			sleep 0.1 # a mesh that fails fast must not turn the load into a flood
		fi
		echo "$k $rc $ms $same" >>"$dir/client.$id"
	done
}

# lm_load_start DIR CLIENTS MAX: CLIENTS clients in the background (lm_specs_init first).
lm_load_start() {
	local dir=$1 n=$2 max=$3 c
	rm -f "$dir/stop" "$dir"/client.* "$dir"/failed.* "$dir"/differs.*
	LM_LOAD_PIDS=()
	for ((c = 0; c < n; c++)); do
		lm_client "$dir" "$c" "$max" &
		LM_LOAD_PIDS+=($!)
	done
}

# lm_load_stop DIR: lets every client finish the request it is in, and waits (at most 180 s).
lm_load_stop() {
	local dir=$1 pid
	touch "$dir/stop"
	for pid in "${LM_LOAD_PIDS[@]}"; do
		lm_wait_exit "$pid" 180 || fail "a load client did not finish within 180 s"
		wait "$pid" 2>/dev/null || true
	done
}

# lm_load_tally DIR: sets LOAD_TOTAL, LOAD_FAILED, LOAD_DIFFER, LOAD_SLOW (over 5 s) and
# LOAD_MAX_MS from the clients' lines, and prints them.
lm_load_tally() {
	local dir=$1
	read -r LOAD_TOTAL LOAD_FAILED LOAD_DIFFER LOAD_SLOW LOAD_MAX_MS < <(cat "$dir"/client.* |
		awk '{ n++; if ($2 != 0) f++; if ($4 == "0") d++; if ($3 > 5000) s++;
		       if ($3 > m) m = $3 } END { printf "%d %d %d %d %d\n", n, f, d, s, m }')
	echo "load: $LOAD_TOTAL requests, $LOAD_FAILED failed, $LOAD_DIFFER differ from the" \
		"single process, $LOAD_SLOW over 5 s, slowest $LOAD_MAX_MS ms"
	local f
	for f in $(find "$dir" -maxdepth 1 -name 'failed.*' | head -n 3); do
		echo "  a failure: $(tail -n 1 "$f")"
	done
}

# lm_ready_wait URL LIMIT_S: waits until URL/readyz answers 200; prints the milliseconds it
# took, or returns 1 after LIMIT_S seconds.
lm_ready_wait() {
	local url=$1 limit=$2 t0 i
	t0=$(date +%s%N)
	for ((i = 0; i < limit * 20; i++)); do
		if curl -sf -m 1 "$url/readyz" >/dev/null 2>&1; then
			echo $((($(date +%s%N) - t0) / 1000000))
			return 0
		fi
		sleep 0.05
	done
	return 1
}

# lm_certs DIR: a CA (ca.pem, ca.key) and one certificate it signs for the mesh's name and
# 127.0.0.1 (mesh.pem, mesh.key), as README.md ("Security") makes them.
lm_certs() {
	local d=$1
	command -v openssl >/dev/null || fail "openssl is needed to make the test's certificates"
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=layermesh test CA" \
		-keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/CN=layermesh" \
		-keyout "$d/mesh.key" -out "$d/mesh.csr" 2>/dev/null
	printf 'subjectAltName=DNS:layermesh,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' \
		>"$d/ext.cnf"
	openssl x509 -req -in "$d/mesh.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/ext.cnf" -out "$d/mesh.pem" 2>/dev/null
}

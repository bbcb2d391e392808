# shellcheck shell=bash
# bench/lib.sh — what the mesh benchmarks share (sourced by bench/prefix.sh, bench/spec.sh,
# bench/inflight.sh and bench/deep_mesh.sh): their checks, a mesh up and down, its /metrics,
# medians.
#
# The caller sets LM (layermesh), WORKER (layermesh-worker) and TMP (a scratch directory) and
# traps EXIT to bench_cleanup; bench_mesh_up sets URL and UP_PID. bench_require and
# bench_shared_dir need none of that: a script calls them first, before it makes anything.

UP_PID=

# bench_require NAME BUILD BINARY...: exits, saying what to do, unless every BINARY is built
# (in BUILD) and jq and curl are installed. NAME is the script, for the message.
bench_require() {
	local name=$1 build=$2 p t
	shift 2
	for p in "$@"; do
		[ -x "$p" ] || { echo "$name: $p is missing: build first (ninja -C $build)" >&2; exit 1; }
	done
	for t in jq curl; do
		command -v "$t" >/dev/null || { echo "$name: $t is needed" >&2; exit 1; }
	done
}

# bench_shared_dir BUILD: the shared data directory: LM_SHARED where set, else the one BUILD
# was configured with (meson's shared_dir option); empty when neither says.
bench_shared_dir() {
	[ -z "${LM_SHARED:-}" ] || { echo "$LM_SHARED"; return; }
	meson introspect "$1" --buildoptions 2>/dev/null |
		jq -r '.[] | select(.name == "shared_dir") | .value' 2>/dev/null || true
}

# bench_cleanup: the mesh still up is stopped, the scratch directory removed.
bench_cleanup() {
	[ -z "$UP_PID" ] || { kill -TERM "$UP_PID" 2>/dev/null; wait "$UP_PID" 2>/dev/null || true; }
	rm -rf "$TMP"
}

# bench_mesh_up NAME MODEL MAX_SEQ MEMORY FENCE COORD EXTRA TIMEOUT: MODEL over the workers of
# FENCE ("0:2 2:4 4:6"), each with memory_limit MEMORY, 17 slots (or BENCH_SLOTS) of MAX_SEQ
# positions, on ipc under $TMP/NAME; COORD: more lines of [coordinator] ("prefix_cache =
# false\n"), EXTRA: more tables ("[speculative]\nmax_draft = 4\n\n"), both printf %b strings;
# TIMEOUT: seconds `layermesh up` may take to start each worker. Waits for /readyz (exits if the mesh dies).
bench_mesh_up() {
	local name=$1 model=$2 max_seq=$3 memory=$4 fence=$5 coord=$6 extra=$7 timeout=$8
	local dir=$TMP/$1 i=0 r http
	mkdir -p "$dir"
	http=$((20000 + RANDOM % 10000))
	{
		printf '[model]\npath = "%s"\nmax_seq_len = %d\nslots = %d\nmax_batch = 64\n\n' \
			"$model" "$max_seq" "${BENCH_SLOTS:-17}"
		printf '[coordinator]\nhttp = "127.0.0.1:%d"\ndata_in = "ipc://%s/c.data"\n' "$http" "$dir"
		printf '%b\n[plan]\nstrategy = "pinned"\n\n%b' "$coord" "$extra"
		for r in $fence; do
			printf '[[worker]]\nname = "w%d"\ndata = "ipc://%s/w%d.data"\n' $i "$dir" $i
			printf 'control = "ipc://%s/w%d.ctl"\nhttp = "127.0.0.1:%d"\n' "$dir" $i $((http + 1 + i))
			printf 'memory_limit = "%s"\nlayers = [%s, %s]\n\n' "$memory" "${r%%:*}" "${r##*:}"
			i=$((i + 1))
		done
	} >"$dir/mesh.toml"
	URL=http://127.0.0.1:$http
	"$LM" up "$dir/mesh.toml" --worker-bin "$WORKER" --timeout "$timeout" >"$dir/up.log" 2>&1 &
	UP_PID=$!
	for i in $(seq $((timeout * 10))); do
		curl -sf "$URL/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$UP_PID" 2>/dev/null || { cat "$dir/up.log" >&2; exit 1; }
		sleep 0.1
	done
	echo "$(basename "$0"): $name did not come up" >&2
	exit 1
}

mesh_down() {
	kill -TERM "$UP_PID"
	wait "$UP_PID" 2>/dev/null || true
	UP_PID=
}

# metric NAME: the value of a /metrics sample without labels.
metric() { curl -sf "$URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }

# median: of the numbers on stdin (spaces or lines).
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

#!/usr/bin/env bash
# layermesh-worker started the way systemd and Kubernetes start it:
#   1. --config mesh.toml with --worker NAME or --index N takes that [[worker]]'s name, addresses,
#      backend and threads; flags given as well win; --listen-any keeps the ports and listens on
#      the wildcard host; unknown names, indexes out of range and bad combinations are refused
#      with a message that says why;
#   2. three workers started so, and `layermesh up --no-spawn --listen-any` attached to them over
#      tcp://, generate exactly what `layermesh run` generates;
#   3. `layermesh up --no-spawn` leaves the workers it did not start running when it stops.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
dir="$LM_TMP/cfg"
mkdir -p "$dir"
toml="$dir/mesh.toml"
lm_mesh_toml "$toml" "$model" tcp "$(lm_port)" 0:2 2:4 4:5
# Give the entries values the flags would not default to, so taking them is visible.
sed -i '0,/^memory_limit = .*/s//memory_limit = "96MiB"\nthreads = 2\nkernels = "scalar"/' "$toml"

# The value of KEY in the [[worker]] entry number N (from 0) of the test's mesh.toml.
entry() {
	awk -v n="$1" -v k="$2" '/^\[\[worker\]\]/ { i++ } i == n + 1 && $1 == k {
		gsub(/"/, "", $3); print $3; exit }' "$toml"
}
# The value of KEY in --show-config's output $1.
shown() { sed -n "s/^$2=//p" <<<"$1"; }

# ---------------------------------------------------------------- 1. the entry and the flags
out=$("$LM_WORKER" --config "$toml" --worker w0 --show-config)
[ "$(shown "$out" name)" = w0 ] || fail "--worker w0 gave: $out"
for k in control data http; do
	[ "$(shown "$out" $k)" = "$(entry 0 $k)" ] || fail "w0's $k is not its entry's: $out"
	[ "$(shown "$out" listen_$k)" = "$(entry 0 $k)" ] || fail "w0 listens elsewhere: $out"
done
[ "$(shown "$out" threads)" = 2 ] || fail "w0's threads = 2 was not taken: $out"
[ "$(shown "$out" memory_limit)" = $((96 << 20)) ] || fail "w0's memory_limit: $out"
[ "$(shown "$out" backend)" = cpu ] || fail "w0's backend: $out"
[ "$(shown "$out" kernels)" = scalar ] || fail "w0's kernels = \"scalar\" was not taken: $out"
out=$("$LM_WORKER" --config "$toml" --worker w0 --kernels amx --show-config)
[ "$(shown "$out" kernels)" = amx ] || fail "--kernels did not win over the entry: $out"

# A cuda entry's device, and --device over it.
cuda_toml="$dir/cuda.toml"
awk '/^name = "w1"$/ { print; print "backend = \"cuda\""; print "device = 3"; next } { print }' \
	"$toml" >"$cuda_toml"
out=$("$LM_WORKER" --config "$cuda_toml" --worker w1 --show-config)
[ "$(shown "$out" backend)" = cuda ] && [ "$(shown "$out" device)" = 3 ] ||
	fail "w1's backend cuda, device 3: $out"
out=$("$LM_WORKER" --config "$cuda_toml" --worker w1 --device 1 --show-config)
[ "$(shown "$out" device)" = 1 ] || fail "--device did not win over the entry: $out"

out=$("$LM_WORKER" --config "$toml" --index 2 --show-config)
[ "$(shown "$out" name)" = w2 ] || fail "--index 2 is not w2: $out"
[ "$(shown "$out" data)" = "$(entry 2 data)" ] || fail "--index 2 has not w2's data: $out"
[ "$(shown "$out" threads)" = 1 ] || fail "w2's threads: $out"
[ "$(shown "$out" kernels)" = auto ] || fail "w2's kernels default: $out"

out=$("$LM_WORKER" --config "$toml" --worker w1 --threads 3 --http 127.0.0.1:1 --name other \
	--listen-any --show-config)
[ "$(shown "$out" name)" = other ] || fail "--name did not win over the entry: $out"
[ "$(shown "$out" threads)" = 3 ] || fail "--threads did not win over the entry: $out"
[ "$(shown "$out" http)" = 127.0.0.1:1 ] || fail "--http did not win over the entry: $out"
[ "$(shown "$out" listen_http)" = 0.0.0.0:1 ] || fail "--listen-any, http: $out"
port=$(entry 1 control)
port=${port##*:}
[ "$(shown "$out" control)" = "$(entry 1 control)" ] || fail "w1's control: $out"
[ "$(shown "$out" listen_control)" = "tcp://0.0.0.0:$port" ] || fail "--listen-any: $out"

# refused CMD... EXPECTED: CMD exits 2 and says EXPECTED on stderr.
refused() {
	local want=${*: -1} err rc=0
	err=$("${@:1:$#-1}" 2>&1 >/dev/null) || rc=$?
	[ "$rc" -eq 2 ] || fail "exit $rc, not 2, from: ${*:1:$#-1}"
	grep -qF -- "$want" <<<"$err" || fail "'$want' is not in: $err"
	echo "refused: $err"
}
refused "$LM_WORKER" --config "$toml" --worker w9 "has no worker 'w9' (its workers: w0, w1, w2)"
refused "$LM_WORKER" --config "$toml" --index 3 \
	"--index 3 is out of range: $toml has 3 workers (0 to 2)"
refused "$LM_WORKER" --config "$toml" --index -1 "--index expects a worker's position"
refused "$LM_WORKER" --index 0 "--worker and --index need --config"
refused "$LM_WORKER" --config "$toml" "--config needs one of --worker NAME and --index N"
refused "$LM_WORKER" --config "$toml" --worker w0 --index 0 "--config needs one of"
refused "$LM_WORKER" --config "$dir/none.toml" --worker w0 "none.toml"
printf '[model]\npath = "m.gguf"\nslots = "x"\n' >"$dir/bad.toml"
refused "$LM_WORKER" --config "$dir/bad.toml" --worker w0 "bad.toml:3:"
refused "$LM_WORKER" --name a --control tcp://a_b:1 --data tcp://h:2 --listen-any \
	"'_' cannot appear in a host name"
# Plain tcp:// beyond loopback is refused unless asked for, and --insecure asks.
refused "$LM_WORKER" --name a --control tcp://10.9.0.1:7001 --data ipc:///tmp/lm-x.data \
	"tcp://10.9.0.1:7001 is plain tcp:// beyond loopback"
refused "$LM_WORKER" --name a --control ipc:///tmp/lm-x.ctl --data tcp://10.9.0.1:7002 \
	"pass --insecure to run in the clear anyway"
out=$("$LM_WORKER" --name a --control tcp://10.9.0.1:7001 --data tcp://10.9.0.1:7002 \
	--insecure --show-config) || fail "--insecure did not allow plain tcp://"
[ "$(shown "$out" control)" = "tcp://10.9.0.1:7001" ] || fail "--insecure: $out"

# ---------------------------------------------------------------- 2. a mesh of such workers
# w2 dials the coordinator at data_in's host name; `up --listen-any` listens on the wildcard.
sed -i 's|^data_in = "tcp://127.0.0.1:|data_in = "tcp://localhost:|' "$toml"
start_worker() {
	"$LM_WORKER" --config "$toml" "$@" >>"$dir/workers.log" 2>&1 &
	LM_PIDS+=($!)
}
start_worker --worker w0
start_worker --index 1
start_worker --worker w2 --listen-any
lm_up "$toml" "$dir/up.log" --no-spawn --listen-any
# Who listens where: w0 at its entry's address, w2 and the coordinator on the wildcard.
listener() { ss -Hltn "sport = :${1##*:}" | awk '{ print $4 }' | head -n 1; }
[ "$(listener "$(entry 0 control)")" = "127.0.0.1:$(entry 0 control | sed 's/.*://')" ] ||
	fail "w0 does not listen at its entry's address: $(listener "$(entry 0 control)")"
for a in "$(entry 2 control)" "$(entry 2 data)" "$(sed -n 's/^data_in = "\(.*\)"/\1/p' "$toml")"; do
	[ "$(listener "$a")" = "0.0.0.0:${a##*:}" ] ||
		fail "nothing listens on the wildcard for $a: $(listener "$a")"
done
for prompt in "Once upon a time" "Tom had 3 red apples!"; do
	want=$("$LM_BIN" run --model "$model" --prompt "$prompt" -n 96 --temp 0 --ctx 256 --ids \
		2>/dev/null)
	got=$("$LM_BIN" generate --url "$LM_URL" --prompt "$prompt" -n 96 --temp 0 --ids \
		--timeout 60)
	[ "$got" = "$want" ] || fail "'$prompt': the mesh gave $got, layermesh run $want"
	echo "'$prompt': $(wc -w <<<"$got") ids, as layermesh run"
done

# ---------------------------------------------------------------- 3. up --no-spawn stops alone
kill -TERM "$LM_UP_PID"
lm_wait_exit "$LM_UP_PID" 20 || fail "layermesh up did not stop within 20 s"
for pid in "${LM_PIDS[@]:0:3}"; do
	kill -0 "$pid" 2>/dev/null || fail "worker $pid stopped with a coordinator that did not start it"
done
echo "ok: worker_config"

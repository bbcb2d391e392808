#!/usr/bin/env bash
# The data plane against a stranger on the same machine, and what an operator is left with:
#   1. a frame that announces 256 MiB on a worker's data socket costs it nothing beyond what a
#      batch can legally carry (the frame is refused at its header);
#   2. the mesh's ipc sockets are owner-only, and a process of another user cannot connect (that
#      part needs root, for setpriv --reuid=nobody, and is skipped without it);
#      The owner's own process, asking HELLO as a stranger would, learns no fingerprint it could
#      forge FORWARDs with: all are refused and counted;
#   3. 20,000 malformed messages into a worker's data socket while 16 clients keep requests in
#      flight fail no request and make no live batch refused; the log holds a few lines about
#      them (rate-limited, with the count held back) while the counters hold all 20,000;
#   4. three kills of a worker, each after it served for longer than a streak lasts: each
#      restart is the first of its streak, /v1/status shows the streak over (0) once it has
#      served again and restarts_total = 3, /metrics the same counter, and the replays per
#      worker;
#   5. a SIGKILLed coordinator leaves its data_in socket: the next `up` removes it, says so,
#      and serves; a second mesh configured onto a running mesh's data_in is refused and the
#      running mesh keeps its socket and serves on;
#   6. a peer that connects to a worker and is gone before the worker answers its handshake
#      (NNG 1.5.2 then stops accepting there for good): the worker's listener guard listens
#      again, and a w0 restarted afterwards reaches it, with the same answers as before.
source "$(dirname "$0")/lib.sh"

model="$LM_SHARED/models/stories260K.gguf"
worker_pid() { pgrep -f "layermesh-worker --name $1 .*$2" | head -n 1; }
rss_kib() { awk '/VmRSS/ { print $2 }' "/proc/$1/status"; }
metric() { "$LM_PROM_CHECK" <<<"$(curl -sf "$LM_URL/metrics")" | awk -v k="$1" '$1 == k { print $2 }'; }

dir="$LM_TMP/dp"
mkdir -p -m 0700 "$dir"
LM_SLOTS=16 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"

# ---------------------------------------------------------------- 1. a partial 256 MiB frame
pid=$(worker_pid w1 "$dir")
before=$(rss_kib "$pid")
"$LM_INJECT" partial "ipc://$dir/w1.data" $((256 << 20)) $((128 << 20)) 2000 >"$dir/partial" &
inj=$!
sleep 1.5
during=$(rss_kib "$pid")
wait "$inj" || true
echo "partial frame: w1 resident $before KiB before, $during KiB while it was sent;" \
	"$(cat "$dir/partial")"
[ $((during - before)) -lt 8192 ] || fail "a partial frame cost w1 $((during - before)) KiB"

# ---------------------------------------------------------------- 2. owner-only sockets
for f in w0.data w0.ctl w1.data w1.ctl coord.data; do
	mode=$(stat -c '%a' "$dir/$f")
	[ "$mode" = 600 ] || fail "$f has mode $mode"
done
# Another user's connection: root runs the injector as nobody, with every directory on the way
# open to it (even where the directory lets others in, the sockets keep them out).
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null; then
	echo "sockets: mode 600; skipped another user's connection: it needs root and setpriv"
else
	chmod 0755 "$dir"
	chmod 0711 "$LM_TMP"
	# The child says who it is, and that it can reach the sockets and run the injector, before
	# it becomes the injector: a setpriv or exec failure says "Permission denied" too.
	rc=0
	# shellcheck disable=SC2016 # the child's script, expanded by the child
	setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c '
		echo "as $(id -un)"
		[ -x "$1" ] && [ -x "$2" ] || { echo "cannot reach $1 or run $2"; exit 77; }
		shift
		exec "$@"' sh "$dir" "$LM_INJECT" forge "ipc://$dir/w0.data" "ipc://$dir/w0.ctl" 5 0 \
		>"$dir/nobody.out" 2>"$dir/nobody.err" || rc=$?
	chmod 0700 "$dir" "$LM_TMP"
	[ "$(head -n 1 "$dir/nobody.out")" = "as nobody" ] ||
		fail "setpriv did not run as nobody: exit $rc, $(cat "$dir/nobody.out" "$dir/nobody.err")"
	if [ "$rc" -eq 77 ]; then
		why=$(tail -n 1 "$dir/nobody.out")
		echo "sockets: mode 600; skipped another user's connection: nobody $why"
	else
		[ "$rc" -ne 0 ] &&
			grep -qF "ring_inject: ipc://$dir/w0.ctl: Permission denied" "$dir/nobody.err" ||
			fail "another user reached the mesh's sockets: exit $rc, $(cat "$dir/nobody.err")"
		echo "sockets: mode 600; another user: $(head -n 1 "$dir/nobody.err")"
	fi
fi

# The mesh's own user asks w0's HELLO like a stranger and forges FORWARDs with what it said:
# HELLO proves the fingerprint without telling it, so every forgery is refused at w0 and
# counted, and the mesh serves on.
w0_fp=$(curl -sf "$LM_URL/v1/status" | jq -r '.workers[0].status.fingerprint')
errors0=$(curl -sf "$LM_URL/v1/status" | jq '.workers[0].status.ring_errors')
"$LM_INJECT" forge "ipc://$dir/w0.data" "ipc://$dir/w0.ctl" 50 0 >"$dir/forge" ||
	fail "the forger could not send: $(cat "$dir/forge")"
told=$(sed -n 's/^forge: fingerprint \([0-9a-f]*\),.*/\1/p' "$dir/forge")
[ -n "$w0_fp" ] && [ "$w0_fp" != null ] && [ -n "$told" ] || fail "no fingerprints: '$w0_fp' '$told'"
[ "$told" != "$w0_fp" ] || fail "HELLO told a stranger the model's fingerprint $w0_fp"
for _ in $(seq 50); do
	errors=$(($(curl -sf "$LM_URL/v1/status" | jq '.workers[0].status.ring_errors') - errors0))
	[ "$errors" -ge 50 ] && break
	sleep 0.1
done
[ "$errors" -eq 50 ] || fail "w0 counted $errors of 50 forged FORWARDs"
out=$("$LM_BIN" generate --url "$LM_URL" --prompt "Once" -n 8 --temp 0 2>&1) ||
	fail "the mesh does not serve after the forgeries: $out"
echo "forged: HELLO said $told, not $w0_fp; w0 refused all 50 FORWARDs and serves on"

# ---------------------------------------------------------------- 3. malformed messages
lines0=$(wc -l <"$dir/up.log")
errors0=$(curl -sf "$LM_URL/v1/status" | jq '.workers[1].status.ring_errors')
replays0=$(metric layermesh_replays_total)
lm_specs_init "$dir" "$model" 256 48
lm_load_start "$dir" 16 40
sleep 1
"$LM_INJECT" malformed "ipc://$dir/w1.data" 20000 4000 >"$dir/malformed"
lm_load_stop "$dir"
lm_load_tally "$dir"
lines=$(($(wc -l <"$dir/up.log") - lines0))
about=$(tail -n "$lines" "$dir/up.log" | grep -c "malformed" || true)
errors=$(($(curl -sf "$LM_URL/v1/status" | jq '.workers[1].status.ring_errors') - errors0))
refused=$(tail -n "$lines" "$dir/up.log" | grep -c "refused" || true)
replays=$(($(metric layermesh_replays_total) - replays0))
echo "malformed: $(cat "$dir/malformed"); $lines log lines ($about about them), w1 counted" \
	"$errors; $refused lines of refused batches, $replays sequences replayed"
[ "$LOAD_FAILED" -eq 0 ] || fail "$LOAD_FAILED of $LOAD_TOTAL requests failed"
[ "$LOAD_DIFFER" -eq 0 ] || fail "$LOAD_DIFFER of $LOAD_TOTAL answers differ"
[ "$errors" -eq 20000 ] || fail "w1 counted $errors of 20000 malformed messages"
[ "$refused" -eq 0 ] || fail "malformed messages made live batches refused"
[ "$about" -le 50 ] || fail "20000 malformed messages wrote $about log lines"
grep -q "more like it" "$dir/up.log" || fail "the log does not say how many it held back"

# ---------------------------------------------------------------- 4. counters
lines0=$(wc -l <"$dir/up.log")
for i in 1 2 3; do
	kill -KILL "$(worker_pid w1 "$dir")"
	lm_ready_wait "$LM_URL" 20 >/dev/null || fail "not ready after kill $i"
	"$LM_BIN" generate --url "$LM_URL" --prompt "The cat" -n 16 --temp 0 --timeout 30 \
		>/dev/null || fail "no answer after kill $i"
	sleep 1.2 # up for longer than a streak lasts
done
w1=$(curl -sf "$LM_URL/v1/status" | jq -c '.workers[1] | {restarts, restarts_total, replays}')
total=$(metric 'layermesh_worker_restarts_total{worker="w1"}')
echo "counters after three kills of w1: $w1; /metrics restarts_total $total"
[ "$(jq .restarts_total <<<"$w1")" -eq 3 ] || fail "restarts_total: $w1"
[ "$(jq .restarts <<<"$w1")" -eq 0 ] || fail "the streak is not over once w1 served again: $w1"
firsts=$(tail -n +"$((lines0 + 1))" "$dir/up.log" | grep -c "w1: starting again .*(restart 1 of this streak)" || true)
[ "$firsts" -eq 3 ] || fail "$firsts of the 3 restarts were the first of their streak"
[ "$total" = 3 ] || fail "/metrics says $total restarts"
metric 'layermesh_worker_replays_total{worker="w1"}' | grep -q . || fail "no replays counter"

# ---------------------------------------------------------------- 5. stale files
kill -KILL "$LM_UP_PID"
wait "$LM_UP_PID" 2>/dev/null || true
for ((i = 0; i < 100; i++)); do
	pgrep -f "layermesh-worker.*$dir" >/dev/null || break
	sleep 0.1
done
[ -S "$dir/coord.data" ] || fail "expected the killed coordinator's data_in to be left"
lm_up "$dir/mesh.toml" "$dir/up2.log"
said=$(grep -m1 "removed the stale ipc socket .*coord.data" "$dir/up2.log") ||
	fail "the next up did not say it removed the stale socket"
echo "after a SIGKILL: $said"
other="$LM_TMP/other"
mkdir -p -m 0700 "$other"
LM_SLOTS=4 lm_mesh_toml "$other/mesh.toml" "$model" ipc "$(lm_port)" 0:5
sed -i "s|^data_in = .*|data_in = \"ipc://$dir/coord.data\"|" "$other/mesh.toml"
rc=0
timeout 30 "$LM_BIN" up "$other/mesh.toml" --worker-bin "$LM_WORKER" >"$other/up.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a second mesh on the same data_in: exit $rc"
grep -q "in use" "$other/up.log" || fail "the refusal does not say why: $(tail -n 3 "$other/up.log")"
[ -S "$dir/coord.data" ] || fail "the second mesh removed the running mesh's socket"
"$LM_BIN" generate --url "$LM_URL" --prompt "The cat" -n 16 --temp 0 --timeout 30 >/dev/null ||
	fail "the running mesh stopped serving"
echo "a second mesh on the same data_in: $(grep -m1 'in use' "$other/up.log")"

# ---------------------------------------------------------------- 6. a handshake cut short
# The connections are made and closed while w1 is stopped, so its listeners meet a peer that
# has gone when they write their half of the handshake: the write fails with EPIPE.
want=$("$LM_BIN" generate --url "$LM_URL" --prompt "The cat" -n 16 --temp 0 --ids --timeout 30) ||
	fail "no answer before the cut handshakes"
pid=$(worker_pid w1 "$dir")
kill -STOP "$pid"
python3 - "$dir/w1.ctl" "$dir/w1.data" <<'PY' || { kill -CONT "$pid"; fail "cannot connect to w1"; }
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.close()
PY
kill -CONT "$pid"
relistened() { grep -c "listener at ipc://$dir/w1\.\(ctl\|data\) stopped accepting" "$dir/up2.log"; }
for ((i = 0; i < 200; i++)); do
	[ "$(relistened)" -lt 2 ] || break
	sleep 0.1
done
[ "$(relistened)" -ge 2 ] || fail "w1 did not listen again after the cut handshakes (log: $(relistened))"
kill -KILL "$(worker_pid w0 "$dir")"
lm_ready_wait "$LM_URL" 30 >/dev/null || fail "not ready after w0's restart"
got=$("$LM_BIN" generate --url "$LM_URL" --prompt "The cat" -n 16 --temp 0 --ids --timeout 30) ||
	fail "no answer after w0's restart"
[ "$got" = "$want" ] || fail "after the cut handshakes the mesh answers $got instead of $want"
echo "cut handshakes: w1's control and data listeners listened again; a restarted w0 reached" \
	"w1 and the mesh answers the same"
lm_down "$dir"
echo "ok: dataplane"

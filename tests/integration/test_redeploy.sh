#!/usr/bin/env bash
# Rolling redeploys with real processes and a bounded load running throughout (32 concurrent
# greedy requests, round after round): redeploying every worker fails no request and changes no
# output; the longest pause is reported. Broken builds -- one that exits at start, one that
# speaks another protocol version, one for another model, one whose numerics are wrong, one that
# corrupts the KV rows it imports -- are each rolled back automatically at the right step while
# traffic keeps flowing. Every sequence live at a switch has its KV rows moved and read back.
source "$(dirname "$0")/lib.sh"

: "${LM_WORKER_BADPROTO:?}" "${LM_WORKER_OTHERMODEL:?}" "${LM_WORKER_BADMATH:?}" \
	"${LM_WORKER_BADIMPORT:?}"
model="$LM_SHARED/models/stories260K.gguf"
dir="$LM_TMP/redeploy"
mkdir -p "$dir/load"
LM_MAX_SEQ=512 LM_SLOTS=32 lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"

prompts=("Once upon a time" "The cat" "Lily wanted" "Tom had 3 red apples!" "The dog ran"
	"One day" "She saw a bird" "The sun was hot")
n_tokens=200
for i in "${!prompts[@]}"; do
	"$LM_BIN" run --model "$model" --prompt "${prompts[$i]}" --temp 0 -n $n_tokens --ctx 512 \
		>"$dir/solo.$i" 2>/dev/null
done

# The load: rounds of 32 concurrent greedy requests until told to stop (at most 60 rounds).
load() {
	local round
	for ((round = 0; round < 60; round++)); do
		[ -f "$dir/stop" ] && break
		local pids=() k
		for k in $(seq 0 31); do
			"$LM_BIN" generate --url "$LM_URL" --prompt "${prompts[$((k % 8))]}" --temp 0 \
				-n $n_tokens --timeout 60 >"$dir/load/$round.$k" 2>"$dir/load/$round.$k.err" &
			pids+=($!)
		done
		for k in "${!pids[@]}"; do
			wait "${pids[$k]}" || echo "$round.$k" >>"$dir/load/failed"
		done
		echo "$round" >"$dir/load/rounds"
	done
}
load &
loader=$!
LM_PIDS+=("$loader")
wait_rounds() { # until the load has finished at least N more rounds
	local target=$(($(cat "$dir/load/rounds" 2>/dev/null || echo -1) + $1)) i
	for ((i = 0; i < 600; i++)); do
		[ "$(cat "$dir/load/rounds" 2>/dev/null || echo -1)" -ge "$target" ] && return 0
		sleep 0.1
	done
	fail "the load stopped making progress"
}
wait_rounds 1

# redeploy ARGS...: runs `layermesh redeploy` and prints its output; returns its status.
redeploy() {
	"$LM_BIN" redeploy --url "$LM_URL" "$@" >"$dir/rd.out" 2>&1
	local rc=$?
	sed 's/^/    /' "$dir/rd.out"
	return $rc
}
expect_rollback() { # STEP NEEDLE ARGS...
	local step=$1 needle=$2
	shift 2
	if redeploy "$@"; then fail "a broken build ($*) was rolled out"; fi
	rolled_back "$step" "$needle"
}
rolled_back() { # STEP NEEDLE: what the failed redeploy said, and the mesh after it
	local step=$1 needle=$2
	grep -q "failed at $step" "$dir/rd.out" || fail "expected a failure at '$step'"
	grep -q -- "$needle" "$dir/rd.out" || fail "the failure does not say '$needle'"
	curl -sf "$LM_URL/readyz" >/dev/null || fail "the mesh is not ready after a rollback"
	local i n
	for ((i = 0; i < 50; i++)); do # the rolled-back process is killed, then reaped
		n=$(pgrep -fc "layermesh-worker.* --control ipc://$dir/") || true
		[ "$n" -eq 3 ] && break
		sleep 0.1
	done
	[ "$n" -eq 3 ] || fail "$n worker processes run after a rollback; 3 should"
}

moved() { curl -sf "$LM_URL/v1/admin/redeploy" | jq -r "$1"; }

echo "1. every worker, the same build"
redeploy --all || fail "the redeploy failed"
pause1=$(moved '.max_pause_ms')
moved1=$(moved '"\(.moved_sequences) sequences, \(.moved_kv_bytes) bytes"')
wait_rounds 1
# Every worker now serves at its alternate address: /v1/status asks it there.
st=$(curl -sf "$LM_URL/v1/status")
[ "$(jq '[.workers[] | select(.status_error != null)] | length' <<<"$st")" = 0 ] ||
	fail "/v1/status cannot reach a moved worker: $(jq -c '[.workers[] | {name, http, status_error}]' <<<"$st")"

echo "2. a build that exits at start"
printf '#!/bin/sh\necho "this build is broken" >&2\nexit 3\n' >"$dir/broken"
chmod +x "$dir/broken"
expect_rollback prepare "exited with status 3" --workers w1 --binary "$dir/broken"

echo "3. a build of another protocol version"
expect_rollback prepare "version 99, this build speaks version" \
	--workers w1 --binary "$LM_WORKER_BADPROTO"

echo "4. a build for another model"
expect_rollback prepare "fingerprint" --workers w2 --binary "$LM_WORKER_OTHERMODEL"
grep -Eq "fingerprint [0-9a-f]{16}.*has [0-9a-f]{16}" "$dir/rd.out" ||
	fail "the refusal does not name both fingerprints"

echo "5. a build whose numerics are wrong"
expect_rollback smoke "differs from the old build" --workers w1 --binary "$LM_WORKER_BADMATH"
wait_rounds 1

echo "6. a build that corrupts the KV rows it imports"
# The read-back needs a sequence live at the switch. The load leaves none only between its
# rounds; a switch that moved nothing (the build then serves w1 until step 7) is tried again.
for attempt in 1 2 3 4; do
	if redeploy --workers w1 --binary "$LM_WORKER_BADIMPORT"; then
		[ "$(moved '.moved_sequences')" = 0 ] ||
			fail "a build that corrupts the KV rows it imports was rolled out"
		[ "$attempt" -lt 4 ] || fail "no sequence was live at 4 switches"
		echo "    (no sequence was live at the switch: again)"
		wait_rounds 1
		continue
	fi
	rolled_back switch "holds other KV rows than the old one exported"
	break
done
wait_rounds 1

echo "7. every worker again, two at a time after the canary"
redeploy --all --batch 2 --canary w2 || fail "the second redeploy failed"
pause2=$(moved '.max_pause_ms')
moved2=$(moved '"\(.moved_sequences) sequences, \(.moved_kv_bytes) bytes"')
wait_rounds 1

touch "$dir/stop"
wait "$loader" || true
rounds=$(($(cat "$dir/load/rounds") + 1))
[ ! -f "$dir/load/failed" ] || fail "requests failed: $(head -3 "$dir/load/failed" | tr '\n' ' ') $(cat "$dir/load/$(head -1 "$dir/load/failed").err")"
bad=0
for f in "$dir"/load/*.*; do
	case "$f" in *.err) continue ;; esac
	k=${f##*.}
	cmp -s "$f" "$dir/solo.$((k % 8))" || { bad=$((bad + 1)); echo "differs: $f" >&2; }
done
[ "$bad" -eq 0 ] || fail "$bad outputs differ from a run without redeploys"
echo "load: $rounds rounds of 32 requests, $((rounds * 32)) requests, 0 failed, all identical"
echo "longest pause: ${pause1} ms (one at a time), ${pause2} ms (two at a time)"
echo "KV moved and read back bit for bit: $moved1 (one at a time), $moved2 (two at a time)"
lm_down "$dir"
echo "ok: redeploy"

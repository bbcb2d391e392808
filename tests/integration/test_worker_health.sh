#!/usr/bin/env bash
# Every process's health and metrics, over real HTTP:
#   - a worker started by hand without a slice is alive (/healthz 200) and not ready (/readyz
#     503 saying it has no assignment);
#   - in a 3-worker stories260K mesh after some requests, each worker answers /healthz and
#     /readyz 200, its /status has its slice, its KV cache exactly as the formula says, its
#     counters and latency percentiles, and its /metrics page parses (prom_check) and agrees
#     with /status; with the ring stamped (ring_stamps), every FORWARD's transit into each
#     worker and every TOKENS' return to the coordinator is counted; the coordinator's
#     /v1/status carries every worker's own /status and its /metrics the request histograms,
#     the ring's wake-up and turnaround and per-worker up gauges; `layermesh status` prints them;
#   - a worker that stops answering is reported with its error while /v1/status still answers
#     at once.
source "$(dirname "$0")/lib.sh"
: "${LM_PROM_CHECK:?LM_PROM_CHECK must point at the prom_check program}"

model="$LM_SHARED/models/stories260K.gguf"

# The value of one sample (name{labels} as prom_check prints it) in a checked page.
mval() {
	awk -v k="$2" '$1 == k { print $2; found = 1 } END { exit !found }' <<<"$1" ||
		fail "no sample $2 in the page"
}

# GET url; prints the body; fails unless the status is $2.
get() {
	local url=$1 want=$2 out code
	out=$(curl -s -m 5 -w '\n%{http_code}' "$url") || fail "GET $url: curl failed"
	code=${out##*$'\n'}
	[ "$code" = "$want" ] || fail "GET $url answered $code, not $want: ${out%$'\n'*}"
	printf '%s' "${out%$'\n'*}"
}

# A checked /metrics page as name{labels} value lines.
metrics() {
	local page
	page=$(get "$1/metrics" 200)
	"$LM_PROM_CHECK" <<<"$page" || fail "$1/metrics does not parse"
}

# ------------------------------------------------------------------ a worker without a slice

port=$(lm_port)
"$LM_WORKER" --name solo --control "ipc://$LM_TMP/solo.ctl" --data "ipc://$LM_TMP/solo.data" \
	--http "127.0.0.1:$port" 2>"$LM_TMP/solo.log" &
solo=$!
LM_PIDS+=("$solo")
for ((i = 0; i < 100; i++)); do
	curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	kill -0 "$solo" 2>/dev/null || { cat "$LM_TMP/solo.log" >&2; fail "the solo worker exited"; }
	sleep 0.1
done
[ "$(get "http://127.0.0.1:$port/healthz" 200)" = ok ] || fail "/healthz does not say ok"
body=$(get "http://127.0.0.1:$port/readyz" 503)
[[ "$body" == "not ready: no assignment yet"* ]] || fail "/readyz of the solo worker: '$body'"
st=$(get "http://127.0.0.1:$port/status" 200)
jq -e '.name == "solo" and .phase == "waiting" and .assigned == false and .ready == false
	and (.not_ready | startswith("no assignment yet")) and .slice == null
	and .pid > 0 and .protocol >= 1' <<<"$st" >/dev/null || fail "solo /status: $st"
page=$(metrics "http://127.0.0.1:$port")
[ "$(mval "$page" layermesh_worker_ready)" = 0 ] || fail "the solo worker reports ready"
kill -TERM "$solo"
lm_wait_exit "$solo" 10 || fail "the solo worker did not stop on SIGTERM"
echo "ok: a worker without a slice is alive, not ready, and says why"

# ------------------------------------------------------------------ a mesh under load

dir="$LM_TMP/mesh"
mkdir -p "$dir"
max_seq=256 slots=16
# worker_timeout is long: "a worker that does not answer" stops w1 with SIGSTOP to see its
# /status reported missing, which the liveness probe would otherwise end by restarting it.
# ring_stamps: every FORWARD carries its send time, so each hop's transit is measured.
LM_MAX_SEQ=$max_seq LM_SLOTS=$slots LM_WORKER_TIMEOUT=60 LM_RING_STAMPS=true \
	lm_mesh_toml "$dir/mesh.toml" "$model" ipc "$(lm_port)" 0:2 2:4 4:5
lm_up "$dir/mesh.toml" "$dir/up.log"

n_req=6
pids=()
for ((k = 0; k < n_req; k++)); do
	curl -sf -m 60 "$LM_URL/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"prompt\": \"Once upon a time $k\", \"max_tokens\": 24, \"temperature\": 0}" \
		>"$LM_TMP/req.$k" &
	pids+=($!)
done
for pid in "${pids[@]}"; do
	wait "$pid" || fail "a completion request failed"
done

# Idle: nothing active, every RELEASE back home, the counters still. The slots a worker still
# holds are those whose rows the coordinator keeps for its prefix cache.
for ((i = 0; i < 100; i++)); do
	a=$(get "$LM_URL/v1/status" 200 | jq -c '[.scheduler, [.workers[].status.releases]]')
	sleep 0.1
	b=$(get "$LM_URL/v1/status" 200 | jq -c '[.scheduler, [.workers[].status.releases]]')
	[ "$a" = "$b" ] && jq -e '.[0].active == 0 and .[0].queued == 0' <<<"$a" >/dev/null && break
done
status=$(get "$LM_URL/v1/status" 200)
[ "$(jq .scheduler.cached_slots <<<"$status")" -ge 1 ] ||
	fail "no slot kept its rows for the prefix cache: $(jq -c .scheduler <<<"$status")"
fingerprint=$(jq -r .fingerprint <<<"$status")
build=$("$LM_BIN" version | awk '{print $2}')
batches=$(jq .scheduler.batches <<<"$status")

# stories260K: 4 KV heads of head_dim 8 in every layer; f32 K and V.
# (workers hold one slot more than [model] slots: the probe slot)
kv_layer=$((2 * 4 * 8 * max_seq * (slots + 1) * 4))
ranges=("0 2" "2 4" "4 5")
tokens0=
for j in 0 1 2; do
	read -r a b <<<"${ranges[$j]}"
	http=$(jq -r ".workers[$j].http" <<<"$status")
	url="http://$http"
	[ "$(get "$url/healthz" 200)" = ok ] || fail "w$j /healthz"
	[ "$(get "$url/readyz" 200)" = ready ] || fail "w$j /readyz"
	st=$(get "$url/status" 200)
	# The coordinator's copy is the same document (taken a moment earlier).
	jq -e --argjson c "$(jq ".workers[$j].status" <<<"$status")" \
		'.slice == $c.slice and .batches == $c.batches and .pid == $c.pid' <<<"$st" \
		>/dev/null || fail "w$j: /v1/status does not carry its /status"
	jq -e --arg name "w$j" --arg build "$build" --arg fp "$fingerprint" \
		--argjson a "$a" --argjson b "$b" --argjson kvl "$kv_layer" \
		--argjson cached "$(jq .scheduler.cached_slots <<<"$status")" \
		--argjson first "$([ "$j" = 0 ] && echo true || echo false)" \
		--argjson last "$([ "$j" = 2 ] && echo true || echo false)" '
		.name == $name and .build == $build and .protocol >= 1 and .fingerprint == $fp
		and .phase == "assigned" and .ready == true and .successor_connected == true
		and .slice == [$a, $b] and .kv_base == $a and .kv_num_layers == $b - $a
		and .embedding == $first and .head == $last
		and (.kv_bytes_per_layer | length) == $b - $a
		and all(.kv_bytes_per_layer[]; . == $kvl)
		and .kv_bytes == $kvl * ($b - $a)
		and .weight_bytes > 0 and .mapped_bytes >= .weight_bytes and .rss_bytes > 0
		and .backend == "cpu" and .backend_memory.kind == "host"
		and .backend_memory.total_bytes > 0 and .backend_memory.free_bytes > 0
		and .backend_memory.free_bytes <= .backend_memory.total_bytes
		and .backend_memory.used_bytes >= .kv_bytes
		and .tokens_processed > 0 and .batches > 0 and .active_sequences == $cached
		and .ring_errors == 0 and .dropped == 0 and .uptime_s > 0
		and all(.latency_ms.receive, .latency_ms.compute, .latency_ms.send,
			.latency_ms.forward, .latency_ms.pre_send, .latency_ms.transit;
			.count > 0 and .p50 > 0 and .p50 <= .p90 and .p90 <= .p99
			and .p99 <= .max)' <<<"$st" >/dev/null ||
		fail "w$j /status: $st"
	# Every FORWARD passes every stage with the same tokens.
	[ "$(jq .batches <<<"$st")" = "$batches" ] ||
		fail "w$j computed $(jq .batches <<<"$st") batches; the coordinator sent $batches"
	tokens=$(jq .tokens_processed <<<"$st")
	[ -z "$tokens0" ] || [ "$tokens" = "$tokens0" ] ||
		fail "w$j computed $tokens tokens, w0 $tokens0"
	tokens0=$tokens

	page=$(metrics "$url")
	for pair in batches_total:batches tokens_total:tokens_processed \
		ring_errors_total:ring_errors dropped_total:dropped releases_total:releases copies_total:copies \
		kv_bytes:kv_bytes weight_bytes:weight_bytes active_sequences:active_sequences; do
		m=$(mval "$page" "layermesh_worker_${pair%%:*}")
		s=$(jq ".${pair##*:}" <<<"$st")
		[ "$m" = "$s" ] || fail "w$j: layermesh_worker_${pair%%:*} is $m, /status ${pair##*:} $s"
	done
	[ "$(mval "$page" layermesh_worker_ready)" = 1 ] || fail "w$j: layermesh_worker_ready"
	# The backend's memory (the device's for a cuda worker; the host's here).
	for f in total free used; do
		m=$(mval "$page" "layermesh_worker_backend_memory_${f}_bytes{kind=\"host\"}")
		[ -n "$m" ] && [ "${m%.*}" -gt 0 ] || fail "w$j: backend_memory_${f}_bytes is '$m'"
	done
	mval "$page" "layermesh_worker_info{worker=\"w$j\",build=\"$build\",protocol=\"$(jq .protocol \
		<<<"$st")\",fingerprint=\"$fingerprint\"}" >/dev/null
	# Each ring message is received, computed and sent once: the FORWARDs and the RELEASEs.
	msgs=$(jq '.batches + .releases' <<<"$st")
	for h in receive_wait compute send; do
		n=$(mval "$page" "layermesh_worker_${h}_seconds_count")
		[ "$n" = "$msgs" ] || fail "w$j: ${h} histogram counts $n messages, not $msgs"
		inf=$(mval "$page" "layermesh_worker_${h}_seconds_bucket{le=\"+Inf\"}")
		[ "$inf" = "$n" ] || fail "w$j: ${h} +Inf bucket $inf, count $n"
	done
	# Every FORWARD was stamped (by the coordinator, then by each worker that sent it on) and
	# computed; the RELEASEs pass unstamped.
	for h in transit forward; do
		n=$(mval "$page" "layermesh_worker_${h}_seconds_count")
		[ "$n" = "$batches" ] || fail "w$j: ${h} histogram counts $n messages, not $batches"
	done
	n=$(mval "$page" layermesh_worker_pre_send_seconds_count)
	[ "$n" = "$msgs" ] || fail "w$j: pre_send histogram counts $n messages, not $msgs"
	for h in compute transit; do
		n=$(mval "$page" "layermesh_worker_${h}_seconds_count")
		[ "$(jq ".latency_ms.$h.count" <<<"$st")" = "$n" ] ||
			fail "w$j: /status and /metrics count different $h latencies"
	done
	echo "w$j: layers [$a, $b), KV $(jq .kv_bytes <<<"$st") bytes, $tokens tokens," \
		"compute p50 $(jq .latency_ms.compute.p50 <<<"$st") ms," \
		"p99 $(jq .latency_ms.compute.p99 <<<"$st") ms, receive p50" \
		"$(jq .latency_ms.receive.p50 <<<"$st") ms, send p50 $(jq .latency_ms.send.p50 <<<"$st") ms"
done
echo "ok: every worker is healthy, ready, and its /status and /metrics agree"

# ------------------------------------------------------------------ the coordinator

[ "$(get "$LM_URL/readyz" 200)" = ready ] || fail "the coordinator's /readyz"
page=$(metrics "$LM_URL")
[ "$(mval "$page" layermesh_requests_total)" = "$n_req" ] || fail "layermesh_requests_total"
[ "$(mval "$page" layermesh_batches_total)" = "$batches" ] || fail "layermesh_batches_total"
for j in 0 1 2; do
	[ "$(mval "$page" "layermesh_worker_up{worker=\"w$j\"}")" = 1 ] || fail "w$j is not up"
done
generated=$(mval "$page" layermesh_tokens_generated_total)
[ "$generated" = "$(jq .scheduler.tokens_generated <<<"$status")" ] ||
	fail "tokens generated: /metrics $generated, /v1/status $(jq .scheduler.tokens_generated <<<"$status")"
ttft=$(mval "$page" layermesh_time_to_first_token_seconds_count)
tok=$(mval "$page" layermesh_token_decode_seconds_count)
dur=$(mval "$page" layermesh_request_duration_seconds_count)
[ "$ttft" = "$n_req" ] || fail "$ttft first tokens for $n_req requests"
[ $((ttft + tok)) = "$generated" ] || fail "$ttft first + $tok later tokens, $generated generated"
[ "$dur" = "$n_req" ] || fail "$dur request durations for $n_req requests"
# The coordinator's part of the ring: every batch's TOKENS came back stamped by the last worker
# and woke the scheduler; a turnaround is counted for each FORWARD sent in the turn that took
# the tokens it follows, so never more than there were batches.
[ "$(mval "$page" layermesh_ring_return_seconds_count)" = "$batches" ] ||
	fail "layermesh_ring_return_seconds counts $(mval "$page" layermesh_ring_return_seconds_count), not $batches"
wakes=$(mval "$page" layermesh_ring_wake_seconds_count)
turns=$(mval "$page" layermesh_ring_turnaround_seconds_count)
[ "$wakes" -ge "$batches" ] || fail "$wakes ring wake-ups for $batches batches"
[ "$turns" -ge 1 ] && [ "$turns" -lt "$batches" ] || fail "$turns turnarounds for $batches batches"
awk -v s="$(mval "$page" layermesh_request_duration_seconds_sum)" \
	-v f="$(mval "$page" layermesh_time_to_first_token_seconds_sum)" \
	'BEGIN { exit !(s > 0 && f > 0 && f <= s) }' || fail "request duration and TTFT sums"
echo "ok: the coordinator's /metrics: $n_req requests, $generated tokens, 3 workers up"

# ------------------------------------------------------------------ layermesh status

out=$("$LM_BIN" status --url "$LM_URL") || fail "layermesh status failed"
echo "$out"
for j in 0 1 2; do
	read -r a b <<<"${ranges[$j]}"
	pid=$(jq ".workers[$j].pid" <<<"$status")
	row=$(grep -E "^w$j +ready +$pid +\[$a, $b\) " <<<"$out") || fail "no row for w$j"
	# KV MiB, tokens and the compute p50 as the worker says them.
	kv=$(awk -v k="$kv_layer" -v n=$((b - a)) 'BEGIN { printf "%.2f", k * n / 1048576 }')
	read -r -a f <<<"${row//[\[\),]/ }"
	# name state pid start end restarts KV weights resident active tokens p50 p99
	[ "${f[5]}" = "0/0" ] || fail "w$j: restarts ${f[5]}, not 0/0"
	[ "${f[6]}" = "$kv" ] || fail "w$j: KV MiB ${f[6]}, not $kv"
	cached=$(curl -sf "$LM_URL/v1/status" | jq .scheduler.cached_slots)
	[ "${f[9]}" = "$cached" ] || fail "w$j: active ${f[9]}, the prefix cache keeps $cached"
	[ "${f[10]}" = "$tokens0" ] || fail "w$j: tokens ${f[10]}, not $tokens0"
	[[ "${f[11]}" =~ ^[0-9]+\.[0-9]{3}$ && "${f[12]}" =~ ^[0-9]+\.[0-9]{3}$ ]] ||
		fail "w$j: compute percentiles '${f[11]}' '${f[12]}'"
done
grep -q "^scheduler: $n_req requests, 0 active, 0 queued, $generated tokens generated, $batches batches, 0 ring errors, 0 replays, 0 batches forgotten, 0 drafted, 0 accepted$" <<<"$out" ||
	fail "the scheduler line"
grep -q "fence \[0, 2, 4, 5\]" <<<"$out" || fail "the fence"
"$LM_BIN" status --url "$LM_URL" --json | jq -e '.workers | length == 3' >/dev/null ||
	fail "layermesh status --json"
if "$LM_BIN" status --url "http://127.0.0.1:$(lm_port)" 2>/dev/null; then
	fail "layermesh status succeeded without a coordinator"
fi
echo "ok: layermesh status"

# ------------------------------------------------------------------ a worker that does not answer

pid1=$(jq '.workers[1].pid' <<<"$status")
kill -STOP "$pid1"
t0=$(date +%s%N)
st=$(curl -sf -m 10 "$LM_URL/v1/status") || { kill -CONT "$pid1"; fail "/v1/status failed"; }
ms=$((($(date +%s%N) - t0) / 1000000))
out=$("$LM_BIN" status --url "$LM_URL")
kill -CONT "$pid1"
echo "/v1/status with w1 stopped: ${ms} ms"
[ "$ms" -lt 3000 ] || fail "/v1/status took $ms ms with a worker stopped"
jq -e '.workers[1].status == null and (.workers[1].status_error | test("no answer"))
	and .workers[0].status.name == "w0" and .workers[2].status.name == "w2"' <<<"$st" \
	>/dev/null || fail "w1's error is not reported: $(jq -c .workers[1] <<<"$st")"
grep -qE '^w1 .* - +- +- +-$' <<<"$out" || fail "the w1 row lacks its dashes: $out"
grep -q '^w1: GET http://.*/status: no answer' <<<"$out" || fail "no reason for w1: $out"
echo "ok: a worker that does not answer is reported with its error"

lm_down "$dir"
echo "ok: health, readiness, status and metrics of every process"

#!/usr/bin/env bash
# bench/summarize.sh CSV CPU COMMIT LOAD0 LOAD1 MINUTES PREFILL DECODE DECODE_SMALL BATCH_TOKENS REPS
#
# Turns the raw rows bench/run.sh wrote (section,model,impl,threads,rep,metric,value) into the
# Markdown block it appends to bench/RESULTS.md: medians with min-max, ratios of the medians
# with the min-max of the per-repetition ratios (the repetitions were interleaved, so rep i of
# one side ran next to rep i of the other), and each target of the performance work beside the
# figure it is judged by. Sections that did not run are left out.
set -euo pipefail
[ $# -eq 11 ] || {
	echo "usage: bench/summarize.sh CSV CPU COMMIT LOAD0 LOAD1 MINUTES PREFILL DECODE" \
		"DECODE_SMALL BATCH_TOKENS REPS" >&2
	exit 2
}
csv=$1
export LC_ALL=C
awk -F, -v cpu="$2" -v commit="$3" -v load0="$4" -v load1="$5" -v minutes="$6" \
	-v prefill="$7" -v decode="$8" -v decode_small="$9" -v batch_tokens="${10}" -v reps="${11}" \
	-v date="$(date -u '+%Y-%m-%d %H:%M UTC')" -v ncpu="$(nproc)" '
NR == 1 { next }
{
	k = $1 "|" $2 "|" $3 "|" $4 "|" $6
	if (!(k in list)) { list[k] = $7; order[++n_keys] = k } else list[k] = list[k] " " $7
	one[k "|" $5] = $7
	seen[$1] = 1
	if ($1 == "single" && !(($2) in model_seen)) { model_seen[$2] = 1; models[++n_models] = $2 }
	if ($1 == "single" && !(($4) in th_seen)) { th_seen[$4] = 1; ths[++n_ths] = $4 }
	if ($1 == "mesh" && !(($2) in mesh_seen)) { mesh_seen[$2] = 1; meshes[++n_meshes] = $2 }
	if ($1 == "batch" && $3 == "worker" && !(($2) in w_seen)) { w_seen[$2] = 1; ws[++n_ws] = $2 }
	if ($1 == "moe" && !(($2) in moe_seen)) { moe_seen[$2] = 1; moes[++n_moes] = $2 }
	if ($1 == "moe" && !(($4) in moe_th_seen)) { moe_th_seen[$4] = 1; moe_ths[++n_moe_ths] = $4 }
	if ($1 == "moebatch") moebatch = $2
	if ($1 == "peer") peer = $2
}
function sorted(s, a,   n, i, j, x) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) {
		x = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > x; j--) a[j + 1] = a[j]
		a[j + 1] = x
	}
	return n
}
function med(k,   a, n) {
	if (!(k in list)) return ""
	n = sorted(list[k], a)
	return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
}
function lo(k,   a) { if (!(k in list)) return ""; sorted(list[k], a); return a[1] + 0 }
function hi(k,   a, n) { if (!(k in list)) return ""; n = sorted(list[k], a); return a[n] + 0 }
function f(x) {
	if (x == "") return "-"
	x += 0
	if (x >= 1000) return sprintf("%.0f", x)
	if (x >= 100) return sprintf("%.1f", x)
	if (x >= 10) return sprintf("%.2f", x)
	return sprintf("%.3f", x)
}
function mmm(k) { return (k in list) ? f(med(k)) " (" f(lo(k)) "-" f(hi(k)) ")" : "-" }
# Ratio of the medians of ka over kb, with the min-max of the per-repetition ratios.
function ratio(ka, kb,   r, x, rmin, rmax, m) {
	if (!(ka in list) || !(kb in list) || med(kb) == 0) return "-"
	rmin = ""; rmax = ""
	for (r = 0; r < 1000; r++) {
		if (!((ka "|" r) in one) || !((kb "|" r) in one) || one[kb "|" r] + 0 == 0) continue
		x = one[ka "|" r] / one[kb "|" r]
		if (rmin == "" || x < rmin) rmin = x
		if (rmax == "" || x > rmax) rmax = x
	}
	m = med(ka) / med(kb)
	return sprintf("%.3fx", m) (rmin == "" ? "" : sprintf(" (%.3f-%.3f)", rmin, rmax))
}
function rnum(ka, kb) { return (ka in list && kb in list && med(kb) != 0) ? med(ka) / med(kb) : "" }
function yes(ok) { return ok ? "**met**" : "not met" }
# The bound on the gain of 16 sequences over one that the figures of this run give (step_rates
# in run.sh): the workers can be busy at most ncpu / (their busy sum at one sequence) times as
# much as they are at one sequence, and a 16-sequence step over k batches in flight (as the mesh
# keeps them, mesh_inflight; 3 where a run did not record it) does the work of 16 tokens in (k - 1)
# forwards of ceil(16 / k) tokens and one of the rest, against t(1) a token one at a time. On
# 2 CPUs, two of the larger forwards at once say how many CPUs at full speed the two are worth
# where they share the bandwidth of the memory (at most 2): that replaces ncpu.
function steps_bound(sec, m, A,   K, k, big, last, SB, SL, SP, t, dec, gain, busy, cpus, conc, why, shape, i) {
	K = sec "|" m "|steps|1|inflight"
	k = (K in list) ? med(K) : 3
	big = int((16 + k - 1) / k); last = 16 - (k - 1) * big
	SB = sec "|" m "|step" big "|1|"; SL = sec "|" m "|step" last "|1|"
	SP = sec "|" m "|step" big "pair|1|"
	if (!((SB "prefill_ms") in list) || !((SL "prefill_ms") in list) || !((A "busy_w0") in list))
		return ""
	t = (k - 1) * med(SB "prefill_ms") + med(SL "prefill_ms")
	dec = (med(SL "decode_tok_s") + med(SB "decode_tok_s")) / 2
	gain = 16000 / t / dec
	busy = med(A "busy_w0") + med(A "busy_w1") + med(A "busy_w2")
	cpus = ncpu
	why = sprintf("%d CPUs", ncpu)
	if (ncpu == 2 && (SP "prefill_ms") in list && med(SP "prefill_ms") > 0) {
		cpus = 2 * med(SB "prefill_ms") / med(SP "prefill_ms")
		cpus = cpus > 2 ? 2 : cpus
		why = sprintf("two %d-token forwards at once take %s ms each, so the 2 CPUs, which " \
			"share the memory, do the work of %.2f at full speed, and", big, mmm(SP "prefill_ms"), cpus)
	}
	conc = busy > 0 ? cpus / busy : 0
	shape = big
	for (i = 2; i < k; i++) shape = shape ", " big
	if (k > 1) shape = shape " and " last
	printf "\nThe bound on 16 sequences here, from this run: a 16-sequence step is a forward of "
	printf "%s tokens (%d batches in flight); the single process at one thread does ", shape, k
	if (last != big)
		printf "a %d-token forward in %s ms and ", last, mmm(SL "prefill_ms")
	printf "a %d-token one in %s ms, so 16 tokens at %.1f tok/s ", big, mmm(SB "prefill_ms"), 16000 / t
	printf "against %.1f decoding one at a time: %.2fx. One sequence keeps the workers busy %.2f " \
		"of the wall time in all; %s give at most %.2fx more. Bound: %.2fx.\n", \
		dec, gain, busy, why, conc, gain * conc
	return gain * conc
}
END {
	printf "### %s: %s, %d CPUs, commit %s\n\n", date, cpu, ncpu, commit
	printf "Load average %s at the start and %s at the end: the machine is shared with other ", \
		load0, load1
	printf "engineers'"'"' builds and tests, so absolute figures move with their load; the "
	printf "interleaved medians and the ratios are the figures to compare. %d repetitions, %s min.\n\n", \
		reps, minutes
	ts = ""
	if (seen["bw"]) {
		printf "Memory read bandwidth (1 GiB buffer): 1 thread %s GB/s, 2 threads %s GB/s.\n", \
			mmm("bw|mem|bench_membw|1|gb_s"), mmm("bw|mem|bench_membw|2|gb_s")
	}
	if (seen["unix"]) {
		printf "Raw unix-socket round trip (socketpair; the median of each run'"'"'s median, with "
		printf "the runs'"'"' min-max): 256 B %s us, 8 KiB %s us, 16 KiB %s us; one hop of a ", \
			mmm("unix|256|rtt|1|median_us"), mmm("unix|8192|rtt|1|median_us"), \
			mmm("unix|16384|rtt|1|median_us")
		printf "4-process ring: 256 B %s us, 16 KiB %s us.\n", \
			mmm("unix|256|ring4|1|hop_median_us"), mmm("unix|16384|ring4|1|hop_median_us")
		if (("unix|256|nng4|1|hop_median_us") in list)
			printf "NNG'"'"'s own floor (bench_nng: push/pull over ipc://, 4 processes, each forwarding the message it received): one hop 256 B %s us, 8 KiB %s us, 16 KiB %s us.\n", \
				mmm("unix|256|nng4|1|hop_median_us"), mmm("unix|8192|nng4|1|hop_median_us"), \
				mmm("unix|16384|nng4|1|hop_median_us")
	}
	if (seen["single"]) {
		printf "\nSingle process, tok/s: prefill of a %d-token prompt; decode of %d tokens ", \
			prefill, decode
		printf "(%d on stories260K). Ratios are layermesh / llama.cpp; \"CPU\" is the ratio ", \
			decode_small
		printf "of the CPU times (at 1 thread, the figure least moved by the load). Bandwidth "
		printf "efficiency is decode bytes per token x tok/s / the read bandwidth at the same "
		printf "thread count measured at the start of the run, before any model is loaded "
		printf "(bench_membw, 1 GiB); the bandwidth measured between the repetitions of each row "
		printf "is shown beside it. With both 0.85B processes resident that one reads half or "
		printf "less and falls over the repetitions (each process alone leaves it whole; the "
		printf "cause is not known), so it would put the efficiencies above 1."
		if (n_ths > 1 || ths[1] > 1)
			printf " Rows at 2 or more threads need every CPU free: where another process holds "
		if (n_ths > 1 || ths[1] > 1)
			printf "one, llama.cpp'"'"'s threads spin at each barrier (CPU time near threads x wall) "
		if (n_ths > 1 || ths[1] > 1)
			printf "and its figures collapse; read them with the load average above."
		printf "\n\n"
		printf "| model | thr | prefill llama.cpp | prefill layermesh | ratio | CPU | "
		printf "decode llama.cpp | decode layermesh | ratio | CPU | MB/token | read GB/s | "
		printf "read GB/s between reps | BW eff llama.cpp | BW eff layermesh |\n"
		printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
		for (i = 1; i <= n_models; i++) for (j = 1; j <= n_ths; j++) {
			m = models[i]; t = ths[j]
			L = "single|" m "|llama.cpp|" t "|"; M = "single|" m "|layermesh|" t "|"
			if (!((L "decode_tok_s") in list)) continue
			cpu_p = ((L "prefill_cpu_ms") in list) ? \
				sprintf("%.3fx", med(L "prefill_cpu_ms") / med(M "prefill_cpu_ms")) : "-"
			cpu_d = ((L "decode_cpu_ms") in list) ? \
				sprintf("%.3fx", med(L "decode_cpu_ms") / med(M "decode_cpu_ms")) : "-"
			bytes = med("single|" m "|layermesh|" t "|decode_bytes")
			ROW = "single|" m "|bw|" t "|gb_s"
			BW = "bw|mem|bench_membw|" t "|gb_s"
			if (!(BW in list)) BW = ROW
			bw = med(BW)
			# A model of a few MB decodes from the caches: no bandwidth figure.
			big = bw && bytes >= 64e6
			effl = big ? sprintf("%.2f", bytes * med(L "decode_tok_s") / (bw * 1e9)) : "-"
			effm = big ? sprintf("%.2f", bytes * med(M "decode_tok_s") / (bw * 1e9)) : "-"
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %s | %s |\n", \
				m, t, mmm(L "prefill_tok_s"), mmm(M "prefill_tok_s"), \
				ratio(M "prefill_tok_s", L "prefill_tok_s"), cpu_p, \
				mmm(L "decode_tok_s"), mmm(M "decode_tok_s"), \
				ratio(M "decode_tok_s", L "decode_tok_s"), cpu_d, bytes / 1e6, mmm(BW), \
				(ROW in list) ? mmm(ROW) : "-", effl, effm
			if (m ~ /^0\.85B/) {
				rd = rnum(M "decode_tok_s", L "decode_tok_s")
				rp = rnum(M "prefill_tok_s", L "prefill_tok_s")
				ts = ts sprintf("| decode >= 1.10x llama.cpp, %s %s thr | %.3fx | %s |\n", \
					m, t, rd, yes(rd >= 1.10))
				if (bw) ts = ts sprintf("| decode bytes/token x tok/s >= 0.85 of read bandwidth, %s %s thr | %s | %s |\n", \
					m, t, effm, yes(effm + 0 >= 0.85))
				ts = ts sprintf("| prefill >= 1.5x llama.cpp, %s %s thr | %.3fx | %s |\n", \
					m, t, rp, yes(rp >= 1.5))
			}
		}
	}
	if (seen["mesh"]) {
		printf "\nMesh: 3 workers of one thread each over ipc (`layermesh up`, balanced fence), "
		printf "greedy requests through the HTTP API against bench_run at 1 thread, interleaved. "
		printf "The prompt is BOS alone, so every message of the ring is a one-token forward; "
		printf "decode tok/s from the API'"'"'s timings (first token to last). A token crosses 4 "
		printf "hops (coordinator, w0, w1, w2, coordinator). The workers'"'"' compute per token "
		printf "is the sum of each worker'"'"'s mean compute per message (its /metrics histogram, "
		printf "read before and after each request); the cost of a hop is (mesh ms/token - that "
		printf "compute) / 4, per repetition, which leaves the noise of the compute out. Beside "
		printf "it, the raw unix-socket round trip and 4-process ring lap of the hidden state'"'"'s "
		printf "size (bench_unix), and NNG'"'"'s own hop over a 4-process push/pull ring of that "
		printf "size (bench_nng), both run between the repetitions.\n\n"
		printf "| model | hidden state | single tok/s | mesh tok/s | mesh / single | "
		printf "single ms/token | mesh ms/token | workers'"'"' compute ms/token | cost per hop | "
		printf "raw unix RTT | hop / RTT | raw 4-hop ring lap | NNG hop | hop / NNG hop |\n"
		printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
		for (i = 1; i <= n_meshes; i++) {
			m = meshes[i]
			S = "mesh|" m "|single|1|decode_tok_s"; X = "mesh|" m "|mesh|1|decode_tok_s"
			P = "mesh|" m "|mesh|1|"
			hb = med(P "hidden_bytes")
			hop = med(P "hop_us")
			rk = "mesh|" m "|rtt|1|median_us"
			if (!(rk in list)) rk = "unix|" hb "|rtt|1|median_us"
			gk = "mesh|" m "|ring4|1|hop_median_us"
			if (!(gk in list)) gk = "unix|" hb "|ring4|1|hop_median_us"
			rtt = med(rk)
			nk = "mesh|" m "|nng4|1|hop_median_us"
			if (!(nk in list)) nk = "unix|" hb "|nng4|1|hop_median_us"
			nhop = med(nk)
			printf "| %s | %d B | %s | %s | %s | %s | %s | %s | %s us | %s | %s | %s | %s | %s |\n", \
				m, hb, mmm(S), mmm(X), ratio(X, S), f(1000 / med(S)), mmm(P "ms_per_token"), \
				mmm(P "compute_ms_per_token"), mmm(P "hop_us"), \
				rtt == "" ? "-" : mmm(rk) " us", \
				rtt == "" || hop == "" ? "-" : sprintf("%.1fx", hop / rtt), \
				(gk in list) ? f(4 * med(gk)) " us" : "-", \
				nhop == "" ? "-" : mmm(nk) " us", \
				nhop == "" || hop == "" ? "-" : sprintf("%.2fx", hop / nhop)
			r = rnum(X, S)
			if (m ~ /^0\.85B/)
				ts = ts sprintf("| mesh >= 0.98x single process, %s | %.3fx | %s |\n", m, r, \
					yes(r >= 0.98))
			if (nhop != "" && hop != "")
				ts = ts sprintf("| cost per hop <= 1.25x NNG'"'"'s own hop, %s (%d B) | %s us vs %s us (%.2fx) | %s |\n", \
					m, hb, f(hop), f(nhop), hop / nhop, yes(hop <= 1.25 * nhop))
		}
	}
	if (seen["mesh"] && (("mesh|" meshes[1] "|mesh|1|recv_wait_ms_per_token") in list)) {
		printf "\nWhere a token'"'"'s time goes in the mesh, us per token, medians over the "
		printf "repetitions (ring stamps: bench/run.sh'"'"'s ring_parts): the workers'"'"' compute; the 4 "
		printf "hops'"'"' transit (a sender'"'"'s stamp, as it begins to send, to the message'"'"'s arrival: "
		printf "NNG, the kernel and the receiving threads'"'"' wake-ups); the workers'"'"' queue (arrival to "
		printf "the start of compute: the data thread'"'"'s wake-up) and pre-send (compute end to send); "
		printf "the coordinator'"'"'s turnaround (TOKENS in to FORWARD out); what the parts leave of the "
		printf "measured time. A worker'"'"'s send overlaps the next transit and is not a part. NNG "
		printf "hop between working stages: bench_nng --work-us, each process streaming memory for "
		printf "a worker'"'"'s mean forward time before it sends on.\n\n"
		printf "| model | mesh us/token | compute | transit | queue | pre-send | turnaround | unaccounted | per hop | NNG hop between working stages |\n"
		printf "|---|---|---|---|---|---|---|---|---|---|\n"
		for (i = 1; i <= n_meshes; i++) {
			P = "mesh|" meshes[i] "|mesh|1|ring_"
			if (!((P "total_us") in list))
				continue
			comp = tran = que = pre = 0
			for (j = 0; j < 3; j++) {
				comp += med(P "w" j "_compute_us"); tran += med(P "w" j "_transit_us")
				que += med(P "w" j "_queue_us"); pre += med(P "w" j "_pre_send_us")
			}
			tran += med(P "return_us")
			nw = "mesh|" meshes[i] "|nng4w|1|hop_median_us"
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s us | %s |\n", meshes[i], \
				f(med(P "total_us")), f(comp), f(tran), f(que), f(pre), \
				f(med(P "turnaround_us")), f(med(P "unaccounted_us")), \
				f((tran + que + pre + med(P "turnaround_us")) / 4), \
				(nw in list) ? mmm(nw) " us" : "-"
		}
	}
	if (seen["batch"]) {
		printf "\nBatching (0.85B q8_0, the same mesh): %d greedy tokens per sequence, prompts of ", \
			batch_tokens
		printf "4 ids, the 16 requests sent at once, interleaved with the single request. "
		printf "Aggregate decode tok/s from the API'"'"'s timings: the tokens after each sequence'"'"'s "
		printf "first over the longest first-to-last span; \"wall\": every token generated over "
		printf "the wall time from sending to the last answer (prefill included).\n\n"
		printf "| sequences | aggregate decode tok/s | ratio | wall tok/s | ratio |\n"
		printf "|---|---|---|---|---|\n"
		A = "batch|0.85B-q8_0|seq1|1|"; B = "batch|0.85B-q8_0|seq16|1|"
		printf "| 1 | %s | | %s | |\n", mmm(A "agg_tok_s"), mmm(A "wall_tok_s")
		K = "batch|0.85B-q8_0|steps|1|inflight"
		printf "| 16%s | %s | %s | %s | %s |\n", \
			(K in list) ? sprintf(", %d batches in flight (the default)", med(K)) : "", mmm(B "agg_tok_s"), \
			ratio(B "agg_tok_s", A "agg_tok_s"), mmm(B "wall_tok_s"), \
			ratio(B "wall_tok_s", A "wall_tok_s")
		C = "batch|0.85B-q8_0|seq16_bif1|1|"
		if ((C "agg_tok_s") in list)
			printf "| 16, batches_in_flight = 1 | %s | %s | %s | %s |\n", mmm(C "agg_tok_s"), \
				sprintf("%.3fx", rnum(C "agg_tok_s", A "agg_tok_s")), mmm(C "wall_tok_s"), \
				sprintf("%.3fx", rnum(C "wall_tok_s", A "wall_tok_s"))
		if ((B "busy_w0") in list) {
			printf "\nEach worker'"'"'s utilisation over the rounds (its compute time / the round'"'"'s wall "
			printf "time; 2 CPUs serve 3 workers and the coordinator):\n\n"
			printf "| sequences | w0 | w1 | w2 |\n|---|---|---|---|\n"
			printf "| 1 | %s | %s | %s |\n", mmm(A "busy_w0"), mmm(A "busy_w1"), mmm(A "busy_w2")
			printf "| 16 | %s | %s | %s |\n", mmm(B "busy_w0"), mmm(B "busy_w1"), mmm(B "busy_w2")
			if ((C "busy_w0") in list)
				printf "| 16, batches_in_flight = 1 | %s | %s | %s |\n", mmm(C "busy_w0"), \
					mmm(C "busy_w1"), mmm(C "busy_w2")
		}
		r = rnum(B "agg_tok_s", A "agg_tok_s")
		bd = steps_bound("batch", "0.85B-q8_0", A)
		ts = ts sprintf("| 16 sequences >= 8x one sequence, aggregate decode | %.2fx%s | %s |\n", \
			r, bd == "" ? "" : sprintf(" (bound here %.2fx)", bd), yes(r >= 8))
		printf "\nPeak resident memory (VmHWM, after the batching runs) beside the plan:\n\n"
		printf "| worker | layers | planned MiB | VmHWM MiB | VmHWM - planned |\n|---|---|---|---|---|\n"
		for (i = 1; i <= n_ws; i++) {
			w = ws[i]
			P = med("batch|" w "|worker|1|planned_bytes"); H = med("batch|" w "|worker|1|vmhwm_bytes")
			printf "| %s | %s | %.1f | %.1f | %+.1f MiB |\n", w, list["batch|" w "|worker|1|layers"], \
				P / 1048576, H / 1048576, (H - P) / 1048576
			ts = ts sprintf("| peak RSS <= planned + 16 MiB, %s | %+.1f MiB | %s |\n", w, \
				(H - P) / 1048576, yes(H <= P + 16 * 1048576))
		}
	}
	if (seen["moe"]) {
		printf "\nMixture of experts and hybrid attention, single process, tok/s: a synthetic "
		printf "qwen3moe and a synthetic qwen35 (gated delta-net layers), interleaved "
		printf "with llama.cpp as above (prefill of %d tokens, decode of %d). Active MB/token: ", \
			prefill, decode
		printf "the bytes of every tensor, of the expert tensors only the share of the experts "
		printf "a token takes, the head and one embedding row; read "
		printf "MB/token: bench_run'"'"'s counter of the bytes of every weight matrix its decode "
		printf "matmuls took, per token.\n\n"
		printf "| model | thr | prefill llama.cpp | prefill layermesh | ratio | CPU | "
		printf "decode llama.cpp | decode layermesh | ratio | CPU | all MB | active MB/token | "
		printf "read MB/token | read / active |\n"
		printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
		for (i = 1; i <= n_moes; i++) for (j = 1; j <= n_moe_ths; j++) {
			m = moes[i]; t = moe_ths[j]
			L = "moe|" m "|llama.cpp|" t "|"; M = "moe|" m "|layermesh|" t "|"
			if (!((L "decode_tok_s") in list)) continue
			cpu_p = sprintf("%.3fx", med(L "prefill_cpu_ms") / med(M "prefill_cpu_ms"))
			cpu_d = sprintf("%.3fx", med(L "decode_cpu_ms") / med(M "decode_cpu_ms"))
			act = med(M "decode_bytes"); rd = med(M "decode_read_bytes_tok")
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.3f |\n", \
				m, t, mmm(L "prefill_tok_s"), mmm(M "prefill_tok_s"), \
				ratio(M "prefill_tok_s", L "prefill_tok_s"), cpu_p, \
				mmm(L "decode_tok_s"), mmm(M "decode_tok_s"), \
				ratio(M "decode_tok_s", L "decode_tok_s"), cpu_d, \
				med(M "weight_bytes") / 1e6, act / 1e6, rd / 1e6, act ? rd / act : 0
			rn = rnum(M "decode_tok_s", L "decode_tok_s")
			ts = ts sprintf("| decode >= 1.10x llama.cpp, %s %s thr | %.3fx | %s |\n", \
				m, t, rn, yes(rn >= 1.10))
			if (m ~ /^moe/)
				ts = ts sprintf("| MoE bytes read per token within 10%% of the active bytes, %s %s thr | %.3f | %s |\n", \
					m, t, act ? rd / act : 0, yes(act && rd / act <= 1.10 && rd / act >= 0.90))
		}
	}
	if (moebatch != "") {
		A = "moebatch|" moebatch "|seq1|1|"; B = "moebatch|" moebatch "|seq16|1|"
		printf "\nMixture of experts through a 3-worker mesh (%s, balanced fence, one thread a ", \
			moebatch
		printf "worker): 1 and 16 concurrent sequences as in the batching table.\n\n"
		printf "| sequences | aggregate decode tok/s | ratio | wall tok/s | ratio | w0 | w1 | w2 |\n"
		printf "|---|---|---|---|---|---|---|---|\n"
		printf "| 1 | %s | | %s | | %s | %s | %s |\n", mmm(A "agg_tok_s"), mmm(A "wall_tok_s"), \
			mmm(A "busy_w0"), mmm(A "busy_w1"), mmm(A "busy_w2")
		printf "| 16 | %s | %s | %s | %s | %s | %s | %s |\n", mmm(B "agg_tok_s"), \
			ratio(B "agg_tok_s", A "agg_tok_s"), mmm(B "wall_tok_s"), \
			ratio(B "wall_tok_s", A "wall_tok_s"), mmm(B "busy_w0"), mmm(B "busy_w1"), \
			mmm(B "busy_w2")
		r = rnum(B "agg_tok_s", A "agg_tok_s")
		bd = steps_bound("moebatch", moebatch, A)
		ts = ts sprintf("| MoE 16 sequences >= 6x one sequence through 3 workers, aggregate decode | %.2fx%s | %s |\n", \
			r, bd == "" ? "" : sprintf(" (bound here %.2fx)", bd), yes(r >= 6))
	}
	if (peer != "") {
		L = "peer|" peer "|llama.cpp-rpc|1|"; M = "peer|" peer "|layermesh|1|"
		printf "\nThe closest peer: llama.cpp'"'"'s layer split over RPC (llama-server with `--rpc` " \
			"over 3 ggml-rpc-servers of one thread each on loopback, every layer offloaded, " \
			"split 1:1:1; the llama.cpp the oracle carries, built with GGML_RPC and GGML_NATIVE) " \
			"beside a 3-worker mesh of one thread a worker over ipc, on %s; both up at once and " \
			"asked in turn, repetition by repetition, through their HTTP APIs (/v1/completions, " \
			"greedy, cache_prompt false). Single stream: %d tokens after a BOS prompt, decode " \
			"tok/s from each server'"'"'s timings (first token to last, the same definition on " \
			"both sides). 16 streams of %d tokens sent at once: aggregate decode tok/s as in the " \
			"batching table, and every token over the wall time. First token: the wall time of " \
			"a request of one token after a %d-token prompt. CPU: the CPU time (user and " \
			"system) that all of a side'"'"'s processes took over the measure (llama-server and " \
			"its 3 rpc-servers; the coordinator and its 3 workers), which the other tenants of a " \
			"loaded machine move least. The last column is how many times faster layermesh is " \
			"(for times, llama.cpp'"'"'s over layermesh'"'"'s).\n\n", \
			peer, decode + 1, batch_tokens, med(L "prompt_tokens")
		printf "| measure | llama.cpp RPC | layermesh | layermesh faster by |\n|---|---|---|---|\n"
		printf "| single-stream decode tok/s | %s | %s | %s |\n", mmm(L "decode_tok_s"), \
			mmm(M "decode_tok_s"), ratio(M "decode_tok_s", L "decode_tok_s")
		printf "| single stream, CPU ms per token | %s | %s | %s |\n", \
			mmm(L "decode_cpu_ms_tok"), mmm(M "decode_cpu_ms_tok"), \
			ratio(L "decode_cpu_ms_tok", M "decode_cpu_ms_tok")
		printf "| 16 streams, aggregate decode tok/s | %s | %s | %s |\n", mmm(L "agg16_tok_s"), \
			mmm(M "agg16_tok_s"), ratio(M "agg16_tok_s", L "agg16_tok_s")
		printf "| 16 streams, wall tok/s | %s | %s | %s |\n", mmm(L "wall16_tok_s"), \
			mmm(M "wall16_tok_s"), ratio(M "wall16_tok_s", L "wall16_tok_s")
		printf "| 16 streams, CPU ms per token | %s | %s | %s |\n", \
			mmm(L "agg16_cpu_ms_tok"), mmm(M "agg16_cpu_ms_tok"), \
			ratio(L "agg16_cpu_ms_tok", M "agg16_cpu_ms_tok")
		printf "| first token after %d prompt tokens, ms | %s | %s | %s |\n", \
			med(L "prompt_tokens"), mmm(L "ttft_ms"), mmm(M "ttft_ms"), \
			ratio(L "ttft_ms", M "ttft_ms")
		printf "| the same, the server'"'"'s prompt_ms | %s | %s | %s |\n", mmm(L "prompt_ms"), \
			mmm(M "prompt_ms"), ratio(L "prompt_ms", M "prompt_ms")
		printf "| the same, CPU ms | %s | %s | %s |\n", mmm(L "ttft_cpu_ms"), \
			mmm(M "ttft_cpu_ms"), ratio(L "ttft_cpu_ms", M "ttft_cpu_ms")
		printf "| the layers (llama.cpp: its weight buffers; layermesh: each worker'"'"'s planned " \
			"bytes, its KV cache included) | %s | %s | |\n", list[L "split"], list[M "split"]
		if ((L "kill_reply") in list) {
			printf "\nThe middle stage SIGKILLed %s s into a request of one stream:\n\n", \
				list[L "kill_after_s"]
			printf "| | llama.cpp RPC | layermesh |\n|---|---|---|\n"
			printf "| the client got | %s | %s |\n", list[L "kill_reply"], list[M "kill_reply"]
			printf "| the server after it | %s | %s |\n", list[L "kill_server"], \
				list[M "kill_server"]
			printf "| the next request | %s | %s |\n", list[L "kill_next"], list[M "kill_next"]
		}
		r = rnum(M "decode_tok_s", L "decode_tok_s")
		ts = ts sprintf("| single-stream decode >= 1.5x llama.cpp RPC, %s | %.3fx | %s |\n", \
			peer, r, yes(r >= 1.5))
		r = rnum(M "agg16_tok_s", L "agg16_tok_s")
		ts = ts sprintf("| 16-stream aggregate decode >= 2x llama.cpp RPC, %s | %.3fx | %s |\n", \
			peer, r, yes(r >= 2))
	}
	if (ts != "") {
		printf "\nTargets:\n\n| target | measured | |\n|---|---|---|\n%s", ts
	}
}' "$csv"

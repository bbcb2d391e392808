/* mesh.js — the mesh, live (GET /): once a second it reads /v1/status, /metrics and /readyz
 * and draws the ring, the throughput and a redeploy's progress from what they say.
 *
 * Every string of the mesh (names, reasons, errors) goes in as text (lm.el, textContent). */
"use strict";

const POLL_MS = 1000;
const HISTORY = 300; /* samples kept for the plot: five minutes */
const SVG = "http://www.w3.org/2000/svg";

const main = document.getElementById("main");
const samples = []; /* {t (ms), tokens, active, queued} */

/* "name{labels}" -> value, from Prometheus text. */
function parseMetrics(text) {
	const m = new Map();
	for (const line of text.split("\n")) {
		if (!line || line[0] === "#") continue;
		const at = line.lastIndexOf(" ");
		if (at > 0) m.set(line.slice(0, at), Number(line.slice(at + 1)));
	}
	return m;
}

/* Quantile q of histogram `name` (seconds), interpolated within its bucket; null when empty. */
function quantile(metrics, name, q) {
	const buckets = [];
	const re = new RegExp("^" + name + '_bucket\\{le="([^"]+)"\\}$');
	for (const [k, v] of metrics) {
		const mm = re.exec(k);
		if (mm) buckets.push([mm[1] === "+Inf" ? Infinity : Number(mm[1]), v]);
	}
	buckets.sort((a, b) => a[0] - b[0]);
	const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
	if (!total) return null;
	const rank = q * total;
	let lo = 0, below = 0;
	for (const [le, count] of buckets) {
		if (count >= rank) {
			if (le === Infinity) return lo;
			return lo + (le - lo) * (rank - below) / Math.max(count - below, 1e-9);
		}
		lo = le;
		below = count;
	}
	return lo;
}

/* "p50 / p99 ms" of a latency summary (a worker's /status latency_ms). */
function pair(lat) {
	if (!lat || lat.count === 0) return "– / –";
	return lm.num(lat.p50) + " / " + lm.ms(lat.p99);
}

/* The state a box shows: the mesh's own (starting, ready, restarting, failed), or "hung" for
 * a worker restarting because it stopped answering or stopped moving data. */
function shownState(w) {
	if (w.state === "restarting" &&
	    /liveness probe|makes no progress|takes no data/.test(w.why || ""))
		return "hung";
	return w.state;
}

function memoryBar(box, plan, w) {
	const limit = plan && plan.memory_limit;
	if (!limit) return;
	const parts = [["weights", plan.weight_bytes + (plan.extra_bytes || 0)],
		["kv", plan.kv_bytes], ["scratch", plan.scratch_bytes]];
	const bar = lm.el("div", "mem");
	bar.title = "planned against memory_limit " + lm.bytes(limit);
	for (const [cls, n] of parts) {
		const s = lm.el("span", cls);
		s.style.width = Math.min(100, 100 * (n || 0) / limit).toFixed(2) + "%";
		bar.append(s);
	}
	const rss = w.status && w.status.rss_bytes;
	if (rss) {
		const r = lm.el("span", "resident");
		r.style.left = Math.min(99.5, 100 * rss / limit).toFixed(2) + "%";
		bar.append(r);
	}
	box.append(bar);
	box.append(lm.el("p", "mem-text", "weights " + lm.bytes(parts[0][1]) + " · KV " +
		lm.bytes(parts[1][1])));
	box.append(lm.el("p", "mem-text", "scratch " + lm.bytes(parts[2][1])));
	box.append(lm.el("p", "mem-text", "resident " + (rss ? lm.bytes(rss) : "?") + " of " +
		lm.bytes(limit)));
}

function workerBox(w, plan, ro) {
	const st = shownState(w);
	const box = lm.el("article", "node worker");
	box.dataset.name = w.name;
	box.dataset.state = st;
	const h = lm.el("h3");
	const name = lm.el("span", "name", w.name);
	if (w.pid) name.append(lm.el("span", "pid", " pid " + w.pid));
	h.append(name, lm.el("span", "badge state " + st, st));
	box.append(h);
	box.append(lm.el("p", "slice", "layers [" + w.start + ", " + w.end + ")"));
	if (Array.isArray(w.layer_kinds)) {
		const strip = lm.el("div", "layers");
		w.layer_kinds.forEach((kind, i) => {
			const cell = lm.el("span", String(kind).replace(/[^a-z]/g, ""));
			cell.title = "layer " + (w.start + i) + ": " + kind;
			strip.append(cell);
		});
		box.append(strip);
	}
	memoryBar(box, plan, w);
	if (w.why) box.append(lm.el("p", "why", (st === "ready" ? "last ended: " : "") + w.why));
	box.append(lm.el("p", "counts", "restarts " + (w.restarts_total || 0) + " · replays " +
		(w.replays || 0)));
	const lat = w.status && w.status.latency_ms;
	if (lat) {
		box.append(lm.el("p", "compute", "compute " + pair(lat.compute)));
		box.append(lm.el("p", "wait", "queued " + pair(lat.receive)));
	}
	if (w.status_error) box.append(lm.el("p", "why", "its /status: " + w.status_error));
	const rw = ro && ro.state === "running" && (ro.workers || []).find((x) => x.name === w.name);
	if (rw && rw.status !== "untouched" && rw.status !== "replaced") {
		const p = lm.el("p", "redeploy");
		p.append(lm.el("span", "badge redeploy",
			"redeploy: " + rw.status + (rw.step ? " (" + rw.step + ")" : "")));
		box.append(p);
	}
	return box;
}

function arrow(label, title) {
	const a = lm.el("div", "arrow");
	a.append(lm.el("span", "head", "→"), lm.el("span", "lat", label));
	a.title = title;
	return a;
}

function coordinatorBox(status, metrics) {
	const box = lm.el("article", "node coordinator");
	const q = status.scheduler || {};
	box.append(lm.el("h3", "", "coordinator"));
	box.append(lm.el("p", "", "active " + (q.active || 0) + " · queued " + (q.queued || 0)));
	box.append(lm.el("p", "", "requests " + (q.requests || 0) + " · replays " +
		(q.replays || 0)));
	const sec = (x) => (x === null ? null : x * 1000);
	for (const [what, name] of [["per token", "layermesh_token_decode_seconds"],
		["first token", "layermesh_time_to_first_token_seconds"]]) {
		box.append(lm.el("p", "", what + " " + lm.num(sec(quantile(metrics, name, 0.5))) +
			" / " + lm.ms(sec(quantile(metrics, name, 0.99)))));
	}
	return box;
}

function renderRing(status, metrics) {
	const ring = document.getElementById("ring");
	const planned = (status.plan && status.plan.workers) || [];
	const ws = status.workers || [];
	const nodes = [coordinatorBox(status, metrics)];
	const sec = (x) => (x === null ? null : x * 1000);
	ws.forEach((w, i) => {
		nodes.push(i === 0
			? arrow(lm.num(sec(quantile(metrics, "layermesh_ring_send_seconds", 0.5))) +
				" / " + lm.ms(sec(quantile(metrics, "layermesh_ring_send_seconds", 0.99))),
				"the coordinator hands its batches to " + w.name + " (p50 / p99)")
			: arrow(pair(ws[i - 1].status && ws[i - 1].status.latency_ms &&
				ws[i - 1].status.latency_ms.send),
				ws[i - 1].name + " hands its batches to " + w.name + " (p50 / p99)"));
		nodes.push(workerBox(w, planned[i], status.rollout));
	});
	if (ws.length) {
		const last = ws[ws.length - 1];
		nodes.push(arrow(pair(last.status && last.status.latency_ms &&
			last.status.latency_ms.send), last.name + " sends the sampled tokens back"));
		nodes.push(lm.el("article", "node coordinator back", "↩ coordinator"));
	}
	ring.replaceChildren(...nodes);
}

function renderRollout(ro) {
	const sec = document.getElementById("rollout");
	if (!ro) {
		sec.hidden = true;
		return;
	}
	sec.hidden = false;
	const canary = ro.plan && ro.plan[0] && ro.plan[0][0];
	const now = (ro.workers || []).find((w) => w.status === "in progress");
	document.getElementById("rollout-summary").textContent = ro.state + " · canary " +
		(canary || "?") + (now ? " · at " + now.name + ": " + (now.step || "") : "") +
		" · elapsed " + ((ro.elapsed_ms || 0) / 1000).toFixed(1) + " s · longest pause " +
		lm.ms(ro.max_pause_ms) + " · moved " + (ro.moved_sequences || 0) + " sequences, " +
		lm.bytes(ro.moved_kv_bytes || 0) + " of KV" +
		(ro.error ? " · failed at " + (ro.failed_step || "?") + ": " + ro.error : "");
	const rows = (ro.workers || []).map((w) => {
		const tr = lm.el("tr");
		tr.append(lm.el("td", "", w.name), lm.el("td", "", w.status),
			lm.el("td", "", w.step || ""),
			lm.el("td", "", w.pause_ms !== undefined ? lm.ms(w.pause_ms) : ""));
		return tr;
	});
	document.getElementById("rollout-rows").replaceChildren(...rows);
}

function line(points, cls) {
	const p = document.createElementNS(SVG, "polyline");
	p.setAttribute("class", cls);
	p.setAttribute("points", points.map((xy) => xy[0].toFixed(1) + "," + xy[1].toFixed(1))
		.join(" "));
	return p;
}

function label(x, y, text, anchor) {
	const t = document.createElementNS(SVG, "text");
	t.setAttribute("x", x);
	t.setAttribute("y", y);
	t.setAttribute("text-anchor", anchor);
	t.textContent = text;
	return t;
}

function renderPlot() {
	const svg = document.getElementById("plot");
	const W = 600, H = 140, top = 14;
	const tps = [];
	for (let i = 1; i < samples.length; i++) {
		const dt = (samples[i].t - samples[i - 1].t) / 1000;
		const dn = samples[i].tokens - samples[i - 1].tokens;
		tps.push({t: samples[i].t, v: dt > 0 && dn >= 0 ? dn / dt : 0});
	}
	/* The span shown grows with what has been seen, from one minute to five. */
	const t1 = samples.length ? samples[samples.length - 1].t : 0;
	const span = Math.min(HISTORY * POLL_MS, Math.max(60000, t1 - (samples[0] || {t: t1}).t));
	const x = (t) => W - (t1 - t) / span * W;
	const maxTps = Math.max(1, ...tps.map((s) => s.v));
	const maxSeq = Math.max(1, ...samples.map((s) => Math.max(s.active, s.queued)));
	const y = (v, max) => H - (H - top) * v / max;
	svg.replaceChildren(
		line(tps.map((s) => [x(s.t), y(s.v, maxTps)]), "tps"),
		line(samples.map((s) => [x(s.t), y(s.active, maxSeq)]), "active"),
		line(samples.map((s) => [x(s.t), y(s.queued, maxSeq)]), "queued"),
		label(4, 11, maxTps.toFixed(0) + " tokens/s", "start"),
		label(W - 4, 11, maxSeq + (maxSeq === 1 ? " sequence" : " sequences"), "end"));
	const nowTps = tps.length ? tps[tps.length - 1].v : 0;
	document.getElementById("span").textContent = Math.round(span / 1000) + " s";
	document.getElementById("rate").textContent = "Now: " + nowTps.toFixed(1) +
		" tokens/s, " + (samples.length ? samples[samples.length - 1].active : 0) + " active, " +
		(samples.length ? samples[samples.length - 1].queued : 0) + " queued.";
}

function render(status, metrics, readyz) {
	document.getElementById("model").textContent = "model " + status.model + " (" +
		(status.workers || []).length + " workers)";
	document.getElementById("updated").textContent = "updated " +
		new Date().toLocaleTimeString();
	const rz = document.getElementById("readyz");
	rz.textContent = "/readyz: " + readyz.text.trim();
	rz.className = readyz.ok ? "ok" : "bad";
	document.getElementById("error").textContent = "";
	renderRing(status, metrics);
	renderRollout(status.rollout);
	samples.push({t: Date.now(), tokens: metrics.get("layermesh_tokens_generated_total") || 0,
		active: metrics.get("layermesh_active_sequences") || 0,
		queued: metrics.get("layermesh_queued_sequences") || 0});
	while (samples.length > HISTORY) samples.shift();
	renderPlot();
}

/* Nothing of the mesh stays on the page once a token is refused. */
function forget() {
	for (const id of ["ring", "rollout-rows", "plot"])
		document.getElementById(id).replaceChildren();
	for (const id of ["model", "updated", "readyz", "rate", "span", "rollout-summary", "error"])
		document.getElementById(id).textContent = "";
	document.getElementById("rollout").hidden = true;
	samples.length = 0;
}

async function poll() {
	try {
		const [status, metrics, readyz] = await Promise.all([
			lm.json("/v1/status"), lm.text("/metrics"),
			fetch("/readyz", {cache: "no-store"})
				.then((r) => r.text().then((text) => ({ok: r.ok, text})))]);
		main.hidden = false;
		render(status, parseMetrics(metrics), readyz);
	} catch (e) {
		if (e.auth) {
			forget();
			lm.askToken(main, poll, lm.token() ? "That token was refused." : "");
			return;
		}
		main.hidden = false;
		document.getElementById("error").textContent = "Cannot read the mesh: " + e.message;
	}
	setTimeout(poll, POLL_MS);
}

poll();

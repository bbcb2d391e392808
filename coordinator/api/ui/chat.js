/* chat.js — a chat with the model (GET /chat), through POST /v1/chat/completions with stream:
 * the reply arrives as server-sent events and is shown as it comes; Stop aborts the request,
 * and the coordinator cancels the sequence of a client that went away.
 *
 * What the model writes, like what the person writes, is put on the page as text. */
"use strict";

const main = document.getElementById("main");
const $ = (id) => document.getElementById(id);
const history = []; /* {role, content}: the conversation so far */
let running = null; /* the AbortController of the reply streaming now */

function busy(on) {
	$("send").disabled = on;
	$("stop").disabled = !on;
}

function message(role, text) {
	const m = lm.el("div", "msg " + role);
	m.append(lm.el("span", "who", role), lm.el("span", "text", text));
	$("log").append(m);
	return m;
}

function refuse(why) {
	const r = $("refusal");
	r.hidden = false;
	r.textContent = why;
	for (const id of ["prompt", "send", "system"]) $(id).disabled = true;
}

/* The reply's events: each "data: {chunk}" line, then "data: [DONE]". */
function* events(buffer) {
	for (const line of buffer.split("\n")) {
		if (!line.startsWith("data:")) continue;
		const data = line.slice(5).trim();
		if (data && data !== "[DONE]") yield JSON.parse(data);
	}
}

async function stream(response, reply, out) {
	const reader = response.body.getReader();
	const decoder = new TextDecoder();
	const text = reply.querySelector(".text");
	let buf = "";
	for (;;) {
		const {value, done} = await reader.read();
		if (done) break;
		buf += decoder.decode(value, {stream: true}).replace(/\r\n/g, "\n");
		let at;
		while ((at = buf.indexOf("\n\n")) >= 0) {
			const block = buf.slice(0, at);
			buf = buf.slice(at + 2);
			for (const chunk of events(block)) {
				if (chunk.error) throw new Error(chunk.error.message);
				if (chunk.usage) out.tokens = chunk.usage.completion_tokens;
				const c = chunk.choices && chunk.choices[0];
				if (c && c.delta && typeof c.delta.content === "string" && c.delta.content) {
					out.content += c.delta.content;
					out.pieces++;
					out.last = performance.now();
					if (out.first === null) out.first = out.last;
					text.textContent = out.content;
				}
				if (c && c.finish_reason) out.finish = c.finish_reason;
			}
		}
	}
}

function stats(out) {
	const n = out.tokens !== null ? out.tokens : out.pieces;
	let s = n + (n === 1 ? " token" : " tokens");
	if (out.first !== null && out.last > out.first && n > 1)
		s += ", " + ((n - 1) / ((out.last - out.first) / 1000)).toFixed(1) + " tokens/s";
	if (out.first !== null) s += ", first after " + lm.ms(out.first - out.start);
	const why = {stop: "finished", length: "max tokens reached", stopped: "stopped"};
	return s + " · " + (why[out.finish] || out.finish || "ended");
}

async function send(ev) {
	ev.preventDefault();
	const prompt = $("prompt").value;
	if (running || !prompt.trim()) return;
	$("prompt").value = "";
	$("error").textContent = "";
	history.push({role: "user", content: prompt});
	message("user", prompt);
	const reply = message("assistant", "");
	reply.dataset.state = "streaming";
	const messages = [];
	if ($("system").value.trim()) messages.push({role: "system", content: $("system").value});
	messages.push(...history);
	const req = {messages, stream: true, stream_options: {include_usage: true},
		temperature: Number($("temperature").value),
		max_tokens: Math.max(1, Math.floor(Number($("max-tokens").value)))};
	const out = {content: "", pieces: 0, tokens: null, first: null, last: null,
		start: performance.now(), finish: null};
	running = new AbortController();
	busy(true);
	try {
		const r = await lm.request("/v1/chat/completions", {method: "POST",
			headers: {"Content-Type": "application/json"}, body: JSON.stringify(req),
			signal: running.signal});
		if (!r.ok) throw new Error("HTTP " + r.status + ": " + (await lm.errorText(r)));
		await stream(r, reply, out);
		reply.dataset.state = "done";
	} catch (e) {
		if (e.name === "AbortError") {
			out.finish = "stopped";
			reply.dataset.state = "stopped";
		} else {
			reply.dataset.state = "error";
			$("error").textContent = e.auth ? "The token was refused: reload to give another."
				: e.message;
		}
	} finally {
		running = null;
		busy(false);
	}
	history.push({role: "assistant", content: out.content});
	reply.append(lm.el("span", "stats", stats(out)));
}

async function start() {
	try {
		const models = await lm.json("/v1/models");
		const m = models.data[0];
		$("model").textContent = "model " + m.id;
		main.hidden = false;
		if (m.chat_template && m.chat_template_warning) {
			/* A model without a template of its own chats in ChatML: said, not refused. */
			$("notice").hidden = false;
			$("notice").textContent = "Chat format " + m.chat_template + ": " +
				m.chat_template_warning;
		}
		if (!m.chat_template) {
			let why = "";
			try {
				const st = await lm.json("/v1/status");
				why = (st.chat_template && st.chat_template.why) || "";
			} catch (_) { /* the refusal stands without its reason */ }
			refuse("This model has no chat template, so the mesh does not chat with it" +
				(why ? ": " + why : "."));
		}
	} catch (e) {
		if (e.auth) {
			lm.askToken(main, start, lm.token() ? "That token was refused." : "");
			return;
		}
		main.hidden = false;
		$("error").textContent = "Cannot reach the coordinator: " + e.message;
	}
}

$("chat").addEventListener("submit", send);
$("stop").addEventListener("click", () => running && running.abort());
$("clear").addEventListener("click", () => {
	if (running) running.abort();
	history.length = 0;
	$("log").replaceChildren();
});
$("prompt").addEventListener("keydown", (ev) => {
	if (ev.key === "Enter" && !ev.shiftKey) {
		ev.preventDefault();
		$("chat").requestSubmit();
	}
});
start();

// ui_browser.mjs — drives headless Chromium through the coordinator's pages (test_ui_chromium.sh).
//
// It speaks the Chrome DevTools protocol over --remote-debugging-pipe (JSON messages ended by
// NUL on file descriptors 3 and 4), so it needs nothing but Node and the browser. Assertions
// read the DOM, never pixels. Every wait is bounded.
//
//   node ui_browser.mjs mesh  (checks of the mesh page and the chat; see main below)
//   node ui_browser.mjs shot OUT.png   (a screenshot of the mesh page, for the README)
//
// Environment: BROWSER (the chromium binary), URL (the coordinator), TOKEN (its bearer token,
// or empty), PROFILE (a fresh directory), WORKERS (JSON: [{name, start, end}] as /v1/status
// says, and optionally kinds: each layer's, "global" or "sliding", as its strip must show),
// REDEPLOY_BIN (the worker build a redeploy rolls out), SLOW (a file whose presence makes a worker's restart take seconds: see the shell
// test), SIZE (the window, "1400,900").
import { spawn } from "node:child_process";
import fs from "node:fs";

const env = process.env;
const url = env.URL;
const log = (...a) => console.log("ui:", ...a);

class Browser {
	constructor() {
		const size = env.SIZE || "1400,900";
		this.proc = spawn(env.BROWSER, ["--headless=new", "--no-sandbox", "--disable-gpu",
			"--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
			"--disable-extensions", "--disable-sync", "--hide-scrollbars",
			"--user-data-dir=" + env.PROFILE, "--window-size=" + size,
			"--remote-debugging-pipe", "about:blank"],
			{stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"]});
		this.proc.stderr.on("data", () => {}); // chromium's own chatter
		this.next = 1;
		this.waiting = new Map();
		this.handlers = [];
		let buf = Buffer.alloc(0);
		this.proc.stdio[4].on("data", (chunk) => {
			buf = Buffer.concat([buf, chunk]);
			let at;
			while ((at = buf.indexOf(0)) >= 0) {
				const msg = JSON.parse(buf.subarray(0, at).toString("utf8"));
				buf = buf.subarray(at + 1);
				if (msg.id && this.waiting.has(msg.id)) {
					const {resolve, reject, method} = this.waiting.get(msg.id);
					this.waiting.delete(msg.id);
					if (msg.error) reject(new Error(method + ": " + msg.error.message));
					else resolve(msg.result);
				} else if (msg.method) {
					for (const h of this.handlers) h(msg);
				}
			}
		});
	}

	send(method, params = {}, sessionId) {
		const id = this.next++;
		const msg = {id, method, params};
		if (sessionId) msg.sessionId = sessionId;
		this.proc.stdio[3].write(JSON.stringify(msg) + "\0");
		return new Promise((resolve, reject) => {
			this.waiting.set(id, {resolve, reject, method});
			setTimeout(() => {
				if (this.waiting.delete(id)) reject(new Error(method + ": no answer in 30 s"));
			}, 30000).unref();
		});
	}

	close() {
		this.proc.kill("SIGTERM");
	}
}

class Page {
	static async open(browser) {
		const {targetId} = await browser.send("Target.createTarget", {url: "about:blank"});
		const {sessionId} = await browser.send("Target.attachToTarget", {targetId, flatten: true});
		const p = new Page(browser, sessionId);
		await p.cmd("Page.enable");
		await p.cmd("Runtime.enable");
		await p.cmd("Log.enable");
		return p;
	}

	constructor(browser, sessionId) {
		this.b = browser;
		this.s = sessionId;
		this.problems = []; // exceptions, CSP violations, dialogs: each fails the test
		browser.handlers.push((m) => {
			if (m.sessionId !== sessionId) return;
			if (m.method === "Runtime.exceptionThrown")
				this.problems.push("exception: " + m.params.exceptionDetails.text + " " +
					JSON.stringify(m.params.exceptionDetails.exception?.description || ""));
			if (m.method === "Log.entryAdded" && m.params.entry.level === "error" &&
			    /Content Security Policy|Refused to/.test(m.params.entry.text))
				this.problems.push("browser: " + m.params.entry.text);
			if (m.method === "Page.javascriptDialogOpening") {
				this.problems.push("a dialog opened: " + m.params.message);
				this.cmd("Page.handleJavaScriptDialog", {accept: true}).catch(() => {});
			}
		});
	}

	cmd(method, params) {
		return this.b.send(method, params, this.s);
	}

	async goto(path) {
		await this.cmd("Page.navigate", {url: url + path});
		await this.until("document.readyState === 'complete'", 10000, "the page " + path + " loads");
	}

	async eval(expr) {
		const r = await this.cmd("Runtime.evaluate", {expression: expr, awaitPromise: true,
			returnByValue: true});
		if (r.exceptionDetails)
			throw new Error("in the page: " + expr + ": " + r.exceptionDetails.text + " " +
				(r.exceptionDetails.exception?.description || ""));
		return r.result.value;
	}

	// Waits until expr is truthy (checked every 50 ms), at most ms; returns its value and the
	// milliseconds it took.
	async until(expr, ms, what) {
		const t0 = Date.now();
		for (;;) {
			const v = await this.eval(expr);
			if (v) return {value: v, ms: Date.now() - t0};
			if (Date.now() - t0 > ms) throw new Error("not within " + ms + " ms: " + what);
			await sleep(50);
		}
	}

	async shot(file) {
		const {data} = await this.cmd("Page.captureScreenshot", {format: "png",
			captureBeyondViewport: true});
		fs.writeFileSync(file, Buffer.from(data, "base64"));
	}

	check() {
		if (this.problems.length) throw new Error(this.problems.join("\n"));
	}
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function apiHeaders() {
	return env.TOKEN ? {Authorization: "Bearer " + env.TOKEN} : {};
}

async function metric(name) {
	const text = await (await fetch(url + "/metrics", {headers: apiHeaders()})).text();
	const line = text.split("\n").find((l) => l.startsWith(name + " "));
	return line === undefined ? NaN : Number(line.split(" ")[1]);
}

async function workerPid(name) {
	const st = await (await fetch(url + "/v1/status", {headers: apiHeaders()})).json();
	return st.workers.find((w) => w.name === name).pid;
}

// The token form, with a wrong token and then the right one.
async function signIn(page, workers) {
	await page.until("!document.getElementById('login').hidden", 5000, "the token form shows");
	const shown = await page.eval("[document.querySelectorAll('.worker').length, " +
		"document.getElementById('main').hidden, document.body.innerText]");
	if (shown[0] !== 0 || !shown[1] || workers.some((w) => shown[2].includes(w.name)))
		throw new Error("the page without a token shows something of the mesh: " +
			JSON.stringify(shown));
	const submit = (token) => page.eval(`(() => {
		document.getElementById('token').value = ${JSON.stringify(token)};
		document.getElementById('login').requestSubmit();
		return true; })()`);
	await submit("not-the-token");
	await page.until("!document.getElementById('login').hidden && " +
		"/refused/.test(document.getElementById('login-why').textContent)", 5000,
		"a wrong token is refused");
	if (await page.eval("document.querySelectorAll('.worker').length") !== 0)
		throw new Error("a wrong token shows workers");
	log("without the token (and with a wrong one) the page shows the token form only");
	await submit(env.TOKEN);
}

async function checkRing(page, workers) {
	const {value: boxes} = await page.until(`(() => {
		const b = [...document.querySelectorAll('.worker')];
		return b.length === ${workers.length} &&
			b.map((e) => [e.dataset.name, e.querySelector('.slice').textContent,
			e.dataset.state,
			[...e.querySelectorAll('.layers span')].map((s) => s.className)]); })()`,
		5000, workers.length + " worker boxes");
	workers.forEach((w, i) => {
		const want = [w.name, "layers [" + w.start + ", " + w.end + ")", "ready",
			w.kinds || boxes[i][3]];
		if (JSON.stringify(boxes[i]) !== JSON.stringify(want))
			throw new Error("box " + i + " shows " + JSON.stringify(boxes[i]) + ", not " +
				JSON.stringify(want));
	});
	/* Every hop of the ring carries its latency, the coordinator's hand-off to w0 too, once a
	 * batch has gone around (the page polls once a second). */
	const {value: hops} = await page.until(`(() => {
		const a = [...document.querySelectorAll('.arrow .lat')].map((e) => e.textContent);
		return a.length === ${workers.length + 1} && a.every((t) => /[0-9]/.test(t)) && a; })()`,
		5000, "a latency on every arrow");
	log("the ring's hops: " + hops.join(" | "));
	log(workers.length + " worker boxes with the slices of /v1/status" +
		(workers[0].kinds ? " and their layers' kinds" : "") + ": " +
		boxes.map((b) => b[0] + " " + b[1] + (workers[0].kinds ? " " + b[3].join(",") : ""))
			.join("; "));
}

// SIGKILL of a worker: its box turns to restarting with the reason, then back to ready.
async function checkKill(page, name) {
	const pid = await workerPid(name);
	fs.writeFileSync(env.SLOW, "");
	process.kill(pid, "SIGKILL");
	const sel = `document.querySelector('.worker[data-name="${name}"]')`;
	const down = await page.until(`(() => { const b = ${sel};
		return b && b.dataset.state === 'restarting' &&
			b.querySelector('.why') && b.querySelector('.why').textContent; })()`, 2000,
		name + "'s box turns to restarting with its reason within 2 s of the SIGKILL");
	fs.unlinkSync(env.SLOW);
	if (!/killed by signal 9/.test(down.value))
		throw new Error(name + "'s reason is " + JSON.stringify(down.value));
	const rz = await page.eval("document.getElementById('readyz').textContent");
	/* "restarting (killed by signal 9)", or, once its next process is starting, "restarting
	 * (starting pid N (before it: killed by signal 9))": the reason as /readyz gives it. */
	if (!rz.includes("worker " + name + " is restarting (") || !rz.includes("killed by signal 9"))
		throw new Error("the page's /readyz line is " + JSON.stringify(rz));
	log(`SIGKILL of ${name} (pid ${pid}): its box showed restarting, "${down.value}", ` +
		`after ${down.ms} ms`);
	const up = await page.until(`(() => { const b = ${sel};
		return b && b.dataset.state === 'ready' &&
			b.querySelector('.counts').textContent; })()`, 30000, name + " back to ready");
	if (!/restarts 1/.test(up.value))
		throw new Error(name + " is ready again but shows " + JSON.stringify(up.value));
	log(`${name} back to ready after ${up.ms} ms more: "${up.value}"`);
}

// SIGSTOP of a worker: once it leaves its liveness probe unanswered its box shows it hung,
// with the reason; the keeper kills it and starts it again.
async function checkHung(page, name) {
	const pid = await workerPid(name);
	fs.writeFileSync(env.SLOW, "");
	process.kill(pid, "SIGSTOP");
	const sel = `document.querySelector('.worker[data-name="${name}"]')`;
	const hung = await page.until(`(() => { const b = ${sel};
		return b && b.dataset.state === 'hung' && b.querySelector('.why').textContent; })()`,
		10000, name + "'s box shows it hung");
	fs.unlinkSync(env.SLOW);
	if (!/did not answer its liveness probe/.test(hung.value))
		throw new Error(name + "'s reason is " + JSON.stringify(hung.value));
	log(`SIGSTOP of ${name}: its box showed hung, "${hung.value}", after ${hung.ms} ms`);
	await page.until(`${sel}.dataset.state === 'ready'`, 30000, name + " back to ready");
}

// A rolling redeploy of every worker: the page shows its outcome, canary, and each worker's
// status.
async function checkRedeploy(page, workers) {
	const post = await fetch(url + "/v1/admin/redeploy", {method: "POST",
		headers: Object.assign({"Content-Type": "application/json"}, apiHeaders()),
		body: JSON.stringify({binary: env.REDEPLOY_BIN, all: true})});
	if (post.status !== 202) throw new Error("the redeploy was refused: " + (await post.text()));
	const done = await page.until(`(() => {
		const s = document.getElementById('rollout-summary').textContent;
		return !document.getElementById('rollout').hidden && /^succeeded/.test(s) &&
			[s, [...document.querySelectorAll('#rollout-rows tr')]
				.map((r) => r.children[0].textContent + " " + r.children[1].textContent)];
		})()`, 60000, "the redeploy's outcome shows");
	const want = workers.map((w) => w.name + " replaced");
	if (!done.value[0].includes("canary " + workers[0].name) ||
	    JSON.stringify(done.value[1]) !== JSON.stringify(want))
		throw new Error("the redeploy shows " + JSON.stringify(done.value));
	log(`a redeploy of every worker: "${done.value[0]}", ${done.value[1].join(", ")}`);
}

async function checkChat(page) {
	await page.goto("/chat");
	await page.until("!document.getElementById('main').hidden", 5000, "the chat shows");
	if (!(await page.eval("document.getElementById('refusal').hidden")))
		throw new Error("the chat is refused: " +
			(await page.eval("document.getElementById('refusal').textContent")));
	const evil = "<img src=x onerror=alert(1)>";
	const fill = (text, maxTokens) => page.eval(`(() => {
		document.getElementById('system').value = 'You are terse.';
		document.getElementById('temperature').value = '0.8';
		document.getElementById('max-tokens').value = '${maxTokens}';
		document.getElementById('prompt').value = ${JSON.stringify(text)};
		document.getElementById('send').click();
		return true; })()`);
	// A long reply, stopped once it streams.
	await fill(evil, 3500);
	const streaming = await page.until(`(() => {
		const r = document.querySelectorAll('.msg.assistant');
		const last = r[r.length - 1];
		return last && last.dataset.state === 'streaming' &&
			last.querySelector('.text').textContent.length > 0 &&
			!document.getElementById('stop').disabled; })()`, 10000, "the reply streams");
	const active = await metric("layermesh_active_sequences");
	await page.eval("document.getElementById('stop').click(), true");
	const stopped = await page.until(`(() => {
		const r = document.querySelectorAll('.msg.assistant');
		const last = r[r.length - 1];
		return last.dataset.state !== 'streaming' &&
			[last.dataset.state, last.querySelector('.stats').textContent]; })()`, 5000,
		"the reply ends once Stop is clicked");
	if (stopped.value[0] !== "stopped")
		throw new Error("the reply ended as " + JSON.stringify(stopped.value));
	let left = NaN;
	for (let i = 0; i < 100; i++) {
		left = await metric("layermesh_active_sequences");
		if (left === 0) break;
		await sleep(100);
	}
	if (left !== 0) throw new Error("active_sequences is " + left + " 10 s after Stop");
	log(`the reply streamed (${streaming.ms} ms to its first text; active_sequences ${active} ` +
		`while it did), Stop ended it ("${stopped.value[1]}"), and active_sequences returned ` +
		"to 0");
	const echo = await page.eval(`[document.querySelector('.msg.user .text').textContent,
		document.querySelectorAll('#log img, #log [onerror]').length]`);
	if (echo[0] !== evil || echo[1] !== 0)
		throw new Error("the prompt " + evil + " was not shown as text: " + JSON.stringify(echo));
	log("the prompt " + evil + " is shown as text (no element made of it, no dialog)");
	// A short reply streams to its end with its tokens per second.
	await fill("Tell me a story.", 12);
	const done = await page.until(`(() => {
		const r = document.querySelectorAll('.msg.assistant');
		const last = r[r.length - 1];
		return r.length === 2 && last.dataset.state !== 'streaming' &&
			[last.dataset.state, last.querySelector('.stats').textContent]; })()`, 20000,
		"a second reply ends");
	if (done.value[0] !== "done" || !/tokens\/s/.test(done.value[1]))
		throw new Error("the second reply ended as " + JSON.stringify(done.value));
	log(`a second reply streamed to its end: "${done.value[1]}"`);
}

async function main() {
	const mode = process.argv[2];
	const workers = JSON.parse(env.WORKERS || "[]");
	const browser = new Browser();
	const watchdog = setTimeout(() => {
		console.error("ui: FAIL: the browser checks took over 120 s");
		browser.close();
		process.exit(1);
	}, 120000);
	let page = null;
	try {
		page = await Page.open(browser);
		if (mode === "nochat") {
			/* No template of its own: the page says it chats in ChatML, and it does. */
			await page.goto("/chat");
			const r = await page.until(`!document.getElementById('notice').hidden &&
				document.getElementById('notice').textContent`, 5000, "the ChatML notice");
			if (!/falls back to ChatML/.test(r.value) ||
			    (await page.eval("document.getElementById('send').disabled")) ||
			    !(await page.eval("document.getElementById('refusal').hidden")))
				throw new Error("the notice reads " + JSON.stringify(r.value));
			log(`a model without a chat template: "${r.value}"`);
		} else if (mode === "chat") {
			await checkChat(page);
			if (process.argv[3]) await page.shot(process.argv[3]);
		} else if (mode === "shot") {
			await page.goto("/");
			if (env.TOKEN) await signIn(page, workers);
			await checkRing(page, workers);
			await sleep(Number(env.SHOT_WAIT_MS || 3000));
			await page.shot(process.argv[3]);
			log("wrote " + process.argv[3]);
		} else {
			await page.goto("/");
			if (env.TOKEN) await signIn(page, workers);
			await checkRing(page, workers);
			await checkKill(page, workers[1].name);
			await checkHung(page, workers[2].name);
			await checkRedeploy(page, workers);
			await checkChat(page);
		}
		page.check();
	} catch (e) {
		console.error("ui: FAIL: " + e.message);
		if (page) {
			const seen = await page.eval("document.body.innerText").catch((x) => x.message);
			console.error("ui: the page reads:\n" + seen + "\nui: problems: " +
				JSON.stringify(page.problems));
		}
		process.exitCode = 1;
	} finally {
		clearTimeout(watchdog);
		browser.close();
	}
	// Once chromium has gone (or 5 s later), so that no profile file is written meanwhile.
	const gone = new Promise((r) => browser.proc.once("exit", r));
	await Promise.race([gone, sleep(5000)]);
	process.exit();
}

main();

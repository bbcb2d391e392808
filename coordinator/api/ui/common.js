/* common.js — what both pages share: the bearer token, requests, and building elements.
 *
 * Everything the mesh or the model says is put on the page with textContent, never as HTML. */
"use strict";

const lm = {
	/* The token lives in this tab's sessionStorage: it goes when the tab closes. */
	token() {
		return sessionStorage.getItem("layermesh.token") || "";
	},

	headers(extra) {
		const h = Object.assign({}, extra);
		const t = lm.token();
		if (t) h.Authorization = "Bearer " + t;
		return h;
	},

	/* fetch with the token; a 401 throws an error with .auth set. */
	async request(path, init) {
		const opts = Object.assign({cache: "no-store"}, init);
		opts.headers = lm.headers(opts.headers);
		const r = await fetch(path, opts);
		if (r.status === 401) {
			const e = new Error("a bearer token is required");
			e.auth = true;
			throw e;
		}
		return r;
	},

	async json(path) {
		const r = await lm.request(path);
		if (!r.ok) throw new Error(path + ": HTTP " + r.status + " " + (await lm.errorText(r)));
		return r.json();
	},

	async text(path) {
		const r = await lm.request(path);
		if (!r.ok) throw new Error(path + ": HTTP " + r.status);
		return r.text();
	},

	/* The message of an OpenAI-style error body, or the body itself. */
	async errorText(r) {
		const body = await r.text();
		try {
			const e = JSON.parse(body).error;
			if (e && typeof e.message === "string") return e.message;
		} catch (_) { /* not JSON */ }
		return body.trim();
	},

	/* An element with a class and text (as text). */
	el(tag, cls, text) {
		const e = document.createElement(tag);
		if (cls) e.className = cls;
		if (text !== undefined && text !== null) e.textContent = String(text);
		return e;
	},

	/* Shows the token form in place of `hide` (the caller has emptied what it showed of the
	 * mesh) and calls done() once a token is given. */
	askToken(hide, done, why) {
		const form = document.getElementById("login");
		hide.hidden = true;
		form.hidden = false;
		document.getElementById("login-why").textContent = why || "";
		form.onsubmit = (ev) => {
			ev.preventDefault();
			const input = document.getElementById("token");
			sessionStorage.setItem("layermesh.token", input.value.trim());
			input.value = "";
			form.hidden = true;
			hide.hidden = false;
			done();
		};
		document.getElementById("token").focus();
	},

	bytes(n) {
		if (typeof n !== "number" || !isFinite(n)) return "?";
		const units = ["B", "KiB", "MiB", "GiB", "TiB"];
		let u = 0;
		while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
		return (u === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)) + " " +
			units[u];
	},

	/* Milliseconds to three significant digits or so; "–" for none. */
	num(x) {
		if (typeof x !== "number" || !isFinite(x)) return "–";
		return x < 1 ? x.toFixed(3) : x < 100 ? x.toFixed(1) : x.toFixed(0);
	},

	ms(x) {
		return lm.num(x) + (typeof x === "number" && isFinite(x) ? " ms" : "");
	},
};

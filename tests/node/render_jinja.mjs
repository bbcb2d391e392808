// render_jinja.mjs — the reference side of tests/integration/test_jinja_templates.sh: every
// case of a corpus of chat requests rendered by each given Jinja template with
// @huggingface/jinja (pinned in package.json) and compared byte for byte with what layermesh's
// own Jinja engine renders for it (`layermesh template --template T --jinja CORPUS`).
//
//   node render_jinja.mjs LAYERMESH CORPUS.json TEMPLATE.jinja...
//
// A case is {messages, tools?, add_generation_prompt, chat_template_kwargs?}; the template gets
// the variables coordinator/api/chat_jinja.h describes: messages and tools as they are (no
// tools is null, as transformers passes None),
// add_generation_prompt, bos_token "<s>", eos_token "</s>", and each chat_template_kwargs key.
// strftime_now() is the reference's own (today, local time), as is the engine's default.
// A case agrees when both render the same text, or both refuse it with the same message (the
// engine's is "line N: " and the reference's). Prints one line per template and a
// summary; exits 1 when any template disagrees on any case.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { Template } from "@huggingface/jinja";

const [bin, corpusPath, ...templates] = process.argv.slice(2);
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));

function vars(c) {
	const v = { messages: c.messages };
	v.tools = c.tools ?? null;
	v.add_generation_prompt = c.add_generation_prompt === true;
	v.bos_token = "<s>";
	v.eos_token = "</s>";
	for (const [k, x] of Object.entries(c.chat_template_kwargs ?? {})) v[k] = x;
	return v;
}

function reference(src) {
	let t;
	try {
		t = new Template(src);
	} catch (e) {
		return corpus.map(() => ({ error: String(e.message ?? e) }));
	}
	return corpus.map((c) => {
		try {
			return { text: t.render(vars(structuredClone(c))) };
		} catch (e) {
			return { error: String(e.message ?? e) };
		}
	});
}

let failed = 0, cases = 0, agree = 0;
for (const path of templates) {
	const want = reference(readFileSync(path, "utf8"));
	const got = JSON.parse(execFileSync(bin, ["template", "--template", path, "--bos", "<s>", "--eos", "</s>",
		"--jinja", corpusPath],
		{ encoding: "utf8", maxBuffer: 1 << 28 }));
	const diffs = [];
	let refused = 0;
	want.forEach((w, i) => {
		const g = got[i] ?? {};
		const same = w.text !== undefined
			? g.text === w.text
			: g.error !== undefined && g.error.endsWith(`: ${w.error}`);
		if (w.text === undefined) refused++;
		if (same) agree++;
		else diffs.push({ i, name: corpus[i].name, want: w, got: g });
	});
	cases += want.length;
	const name = basename(path);
	if (diffs.length === 0) {
		console.log(`PASS ${name}: ${want.length} of ${want.length} cases` +
			(refused ? ` (${refused} refused by the template)` : ""));
	} else {
		failed++;
		console.log(`FAIL ${name}: ${want.length - diffs.length} of ${want.length} cases`);
		for (const d of diffs.slice(0, 3)) {
			console.log(`  case ${d.i} (${d.name})`);
			console.log(`    jinja:     ${JSON.stringify(d.want).slice(0, 600)}`);
			console.log(`    layermesh: ${JSON.stringify(d.got).slice(0, 600)}`);
		}
	}
}
console.log(`${templates.length - failed} of ${templates.length} templates agree on every case ` +
	`(${agree} of ${cases} cases)`);
process.exit(failed === 0 ? 0 : 1);

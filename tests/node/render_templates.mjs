// render_templates.mjs — the reference side of tests/integration/test_chat_templates.sh: each
// conversation of a JSON file rendered by a model's own Jinja chat template with
// @huggingface/jinja (the Hugging Face implementation, pinned in package.json), and compared
// byte for byte with what `layermesh template` rendered.
//
//   node render_templates.mjs TEMPLATE.jinja FORMAT BOS EOS CONVERSATIONS.json OURS.json
//
// The messages reach the template as the chat API hands them to its formatter
// (coordinator/api/api_request.h): "developer" is "system"; null content is ""; an array of text
// parts stays an array for Gemma 4's user and model turns (its template iterates them) and is
// joined with "\n" everywhere else (an empty start takes no newline, as llama.cpp joins them);
// other message fields are dropped (the templates here do not render them).
// Prints one line per difference and a summary "FORMAT: P of N"; exits 1 on any difference.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [tmplPath, format, bos, eos, convPath, oursPath] = process.argv.slice(2);
const template = new Template(readFileSync(tmplPath, "utf8"));
const conversations = JSON.parse(readFileSync(convPath, "utf8"));
const ours = JSON.parse(readFileSync(oursPath, "utf8"));

function joinParts(parts) {
	let text = "";
	for (const p of parts) {
		if (text.length > 0) text += "\n";
		text += p.text;
	}
	return text;
}

function normalise(m) {
	const role = m.role === "developer" ? "system" : m.role;
	let content = m.content ?? "";
	if (Array.isArray(content)) {
		content = format.startsWith("gemma4") && role !== "system"
			? content.map((p) => ({ type: "text", text: p.text }))
			: joinParts(content);
	}
	return { role, content };
}

let pass = 0;
conversations.forEach((c, i) => {
	let want;
	try {
		want = {
			text: template.render({
				messages: c.messages.map(normalise),
				add_generation_prompt: c.add_generation_prompt,
				bos_token: bos,
				eos_token: eos,
			}),
		};
	} catch (e) {
		want = { error: String(e.message ?? e) };
	}
	const got = ours[i];
	// Where the template raises, the formatter must refuse too, in the template's words.
	const same = want.text !== undefined
		? got.text === want.text
		: got.error !== undefined && got.error.includes(want.error);
	if (same) {
		pass++;
	} else {
		console.log(`${format}: conversation ${i} (${c.name}) differs`);
		console.log(`  jinja:     ${JSON.stringify(want)}`);
		console.log(`  layermesh: ${JSON.stringify(got)}`);
	}
});
console.log(`${format}: ${pass} of ${conversations.length} equal`);
process.exit(pass === conversations.length ? 0 : 1);

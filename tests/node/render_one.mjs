// render_one.mjs — one render by @huggingface/jinja (pinned in package.json), for the
// integration tests that hold what the chat API tokenizes to the reference:
//
//   node render_one.mjs TEMPLATE.jinja VARS.json
//
// prints the text as a JSON string, or {"error": message} when the template raises.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [tmplPath, varsPath] = process.argv.slice(2);
try {
	const text = new Template(readFileSync(tmplPath, "utf8")).render(
		JSON.parse(readFileSync(varsPath, "utf8")));
	console.log(JSON.stringify(text));
} catch (e) {
	console.log(JSON.stringify({ error: String(e.message ?? e) }));
}

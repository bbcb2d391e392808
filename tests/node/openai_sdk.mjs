// openai_sdk.mjs — the official OpenAI SDK (npm openai, pinned in package.json) against a
// running mesh, as tests/integration/test_openai_sdk.sh starts it:
//
//   node openai_sdk.mjs BASE_URL MODEL
//
// Every call is checked for what it must return (or for the error class and message it must
// raise), and printed as a row of a Markdown table: SDK call | endpoint | parameters | result.
// Exit status 1 when any call did not do what it should.
import OpenAI, { BadRequestError, NotFoundError } from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const rows = [];
let failed = 0;

async function row(call, endpoint, params, fn) {
	let result;
	try {
		result = await fn();
	} catch (e) {
		result = `FAILED: ${e?.constructor?.name}: ${e?.message}`;
		failed++;
	}
	rows.push(`| \`${call}\` | ${endpoint} | ${params} | ${result} |`);
}

function must(cond, what) {
	if (!cond) throw new Error(what);
}

// A call that must be refused with a 400 that the SDK raises as BadRequestError.
async function refused(call, endpoint, params, fn, needle) {
	await row(call, endpoint, params, async () => {
		try {
			await fn();
		} catch (e) {
			must(e instanceof BadRequestError, `raised ${e?.constructor?.name}, not BadRequestError`);
			must(e.message.includes(needle), `message '${e.message}' lacks '${needle}'`);
			return `refused: 400 BadRequestError "${e.error?.message ?? e.message}"`;
		}
		throw new Error("accepted");
	});
}

const hello = [{ role: "user", content: "Hello" }];

function finish() {
	console.log("| SDK call | endpoint | parameters | result |");
	console.log("| --- | --- | --- | --- |");
	for (const r of rows) console.log(r);
	console.log(`\n${rows.length - failed} of ${rows.length} calls did what they should`);
	process.exit(failed === 0 ? 0 : 1);
}

// A mesh whose template has Hermes calls (`node openai_sdk.mjs BASE_URL MODEL tools`): calls
// forced by tool_choice, their arguments held to the function's parameters, streamed and not.
async function forcedCalls() {
	const weather = { type: "function", function: { name: "get_weather", description: "The weather.",
		parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer" } },
			required: ["city", "days"], additionalProperties: false } } };
	const ask = [{ role: "user", content: "Weather in Paris for 3 days?" }];
	function checkCall(c) {
		must(c.finish_reason === "tool_calls" && c.message.tool_calls?.length === 1, JSON.stringify(c));
		const call = c.message.tool_calls[0];
		must(call.type === "function" && call.function.name === "get_weather" && call.id.startsWith("call_"), JSON.stringify(call));
		const a = JSON.parse(call.function.arguments);
		must(typeof a.city === "string" && a.city.length <= 12 && Number.isInteger(a.days) &&
			Object.keys(a).length === 2, call.function.arguments);
		return call.function.arguments;
	}
	const params = { model, messages: ask, tools: [weather], tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_tokens: 300 };
	let plain = "";
	await row("chat.completions.create", "POST /v1/chat/completions", "tools, tool_choice required", async () => {
		const r = await client.chat.completions.create(params);
		plain = checkCall(r.choices[0]);
		return `works: get_weather(${plain})`;
	});
	await row("chat.completions.stream().finalChatCompletion()", "POST /v1/chat/completions", "stream, tools, tool_choice named", async () => {
		const s = client.chat.completions.stream({ ...params, tool_choice: { type: "function", function: { name: "get_weather" } } });
		const r = await s.finalChatCompletion();
		const args = checkCall(r.choices[0]);
		must(args === plain, `streamed ${args}, not ${plain}`);
		return `works: assembled, get_weather(${args})`;
	});
	await refused("chat.completions.create", "POST /v1/chat/completions", "tool_choice required with response_format json_object",
		() => client.chat.completions.create({ ...params, response_format: { type: "json_object" } }), "cannot be combined");
}
if (process.argv[4] === "tools") {
	await forcedCalls();
	finish();
}

await row("models.list()", "GET /v1/models", "-", async () => {
	const page = await client.models.list();
	must(page.data.length === 1 && page.data[0].id === model, JSON.stringify(page.data));
	return `works: [${page.data[0].id}]`;
});
await row("models.retrieve(id)", "GET /v1/models/{id}", `id "${model}"`, async () => {
	const m = await client.models.retrieve(model);
	must(m.id === model && m.object === "model", JSON.stringify(m));
	return `works: ${m.id}, chat_template ${m.chat_template}`;
});
await row("models.retrieve(id)", "GET /v1/models/{id}", 'id "gpt-4o"', async () => {
	try {
		await client.models.retrieve("gpt-4o");
	} catch (e) {
		must(e instanceof NotFoundError, `raised ${e?.constructor?.name}`);
		return `refused: 404 NotFoundError "${e.error?.message}"`;
	}
	throw new Error("found");
});

await row("chat.completions.create", "POST /v1/chat/completions", "messages, max_tokens", async () => {
	const r = await client.chat.completions.create({ model, messages: hello, max_tokens: 8 });
	const c = r.choices[0];
	must(r.object === "chat.completion" && c.message.role === "assistant", JSON.stringify(r));
	must(typeof c.message.content === "string" && r.usage.completion_tokens > 0, JSON.stringify(r));
	return `works: finish_reason ${c.finish_reason}, ${r.usage.completion_tokens} tokens`;
});
const sampling = {
	model,
	messages: [{ role: "system", content: "Be brief." }, ...hello],
	max_completion_tokens: 10,
	temperature: 0.9,
	top_p: 0.95,
	seed: 1234,
	stop: ["\n\n"],
	presence_penalty: 0.5,
	frequency_penalty: 0.3,
	logit_bias: { "5": -100 },
	user: "test",
};
await row("chat.completions.create", "POST /v1/chat/completions",
	"system + user, max_completion_tokens, temperature, top_p, seed, stop, presence_penalty, " +
	"frequency_penalty, logit_bias, user", async () => {
		const a = await client.chat.completions.create(sampling);
		const b = await client.chat.completions.create(sampling);
		must(a.choices[0].message.content === b.choices[0].message.content,
			"the same seed gave two texts");
		must(a.seed === 1234, `seed ${a.seed}`);
		return `works: seed 1234 twice, the same ${a.usage.completion_tokens} tokens`;
	});
await row("chat.completions.create", "POST /v1/chat/completions", "no seed (twice)", async () => {
	const a = await client.chat.completions.create({ model, messages: hello, max_tokens: 6 });
	const b = await client.chat.completions.create({ model, messages: hello, max_tokens: 6 });
	must(a.seed !== b.seed, `both seed ${a.seed}`);
	return `works: fresh seeds ${a.seed} and ${b.seed}, each reported`;
});
await row("chat.completions.create", "POST /v1/chat/completions", "logprobs, top_logprobs 3", async () => {
	const r = await client.chat.completions.create({ model, messages: hello, max_tokens: 4, logprobs: true, top_logprobs: 3 });
	const lp = r.choices[0].logprobs.content;
	must(lp.length === 4 && lp.every((t) => t.top_logprobs.length === 3 && t.logprob <= 0 && Array.isArray(t.bytes)),
		JSON.stringify(lp));
	return `works: ${lp.length} tokens with logprob, bytes, 3 top_logprobs`;
});
await row("chat.completions.create", "POST /v1/chat/completions",
	"stream, stream_options.include_usage", async () => {
		const s = await client.chat.completions.create({ model, messages: hello, max_tokens: 5, stream: true, stream_options: { include_usage: true } });
		let first = null, text = "", finish = null, usage = null, n = 0;
		for await (const chunk of s) {
			n++;
			if (first === null) first = chunk.choices[0]?.delta;
			if (chunk.choices.length > 0) {
				text += chunk.choices[0].delta.content ?? "";
				finish = chunk.choices[0].finish_reason ?? finish;
			}
			if (chunk.usage) usage = chunk.usage;
		}
		must(first?.role === "assistant", `first delta ${JSON.stringify(first)}`);
		must(finish === "length" && usage?.completion_tokens === 5, `finish ${finish}, usage ${JSON.stringify(usage)}`);
		return `works: ${n} chunks, delta.role first, finish_reason ${finish}, usage ${usage.total_tokens} tokens`;
	});
await row("chat.completions.create", "POST /v1/chat/completions", "content as text parts", async () => {
	const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: "there" }] }], max_tokens: 3 });
	return `works: ${r.usage.prompt_tokens} prompt tokens`;
});
await row("completions.create", "POST /v1/completions", "prompt, max_tokens, temperature 0", async () => {
	const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
	must(r.object === "text_completion" && typeof r.choices[0].text === "string", JSON.stringify(r));
	return `works: finish_reason ${r.choices[0].finish_reason}, ${r.usage.completion_tokens} tokens`;
});
await row("completions.create", "POST /v1/completions", "logprobs 2, seed, top_p, stop", async () => {
	const r = await client.completions.create({ model, prompt: "Once", max_tokens: 4, logprobs: 2, seed: 7, top_p: 0.9, stop: ["."] });
	const lp = r.choices[0].logprobs;
	must(lp.tokens.length === lp.token_logprobs.length && lp.top_logprobs.every((t) => Object.keys(t).length <= 2), JSON.stringify(lp));
	return `works: ${lp.tokens.length} tokens with logprobs`;
});
await row("completions.create", "POST /v1/completions", "stream, stream_options.include_usage", async () => {
	const s = await client.completions.create({ model, prompt: "Once", max_tokens: 4, stream: true, stream_options: { include_usage: true } });
	let text = "", usage = null;
	for await (const chunk of s) {
		if (chunk.choices.length > 0) text += chunk.choices[0].text;
		if (chunk.usage) usage = chunk.usage;
	}
	must(usage?.completion_tokens === 4, JSON.stringify(usage));
	return `works: ${text.length} characters, usage ${usage.total_tokens} tokens`;
});

// Structured output: the content parses and holds to the schema, streamed and not.
const person = {
	type: "object",
	properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" }, pet: { enum: ["cat", "dog"] } },
	required: ["name", "age", "pet"], additionalProperties: false,
};
const personFormat = { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } };
function checkPerson(text) {
	const v = JSON.parse(text);
	must(typeof v.name === "string" && v.name.length <= 20, `name: ${text}`);
	must(Number.isInteger(v.age) && ["cat", "dog"].includes(v.pet), `age, pet: ${text}`);
	must(Object.keys(v).length === 3, `keys: ${text}`);
	return v;
}
await row("chat.completions.create", "POST /v1/chat/completions", "response_format json_schema (strict)", async () => {
	const r = await client.chat.completions.create({ model, messages: hello, temperature: 0, response_format: personFormat });
	must(r.choices[0].finish_reason === "stop", `finish_reason ${r.choices[0].finish_reason}`);
	return `works: ${JSON.stringify(checkPerson(r.choices[0].message.content))}`;
});
await row("chat.completions.create", "POST /v1/chat/completions", "response_format json_schema, stream", async () => {
	const stream = await client.chat.completions.create({ model, messages: hello, temperature: 0.8, seed: 3, stream: true, response_format: personFormat });
	let text = "";
	for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
	return `works: ${JSON.stringify(checkPerson(text))}`;
});
await row("completions.create", "POST /v1/completions", "response_format json_object", async () => {
	const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 200, temperature: 0, response_format: { type: "json_object" } });
	if (r.choices[0].finish_reason !== "stop") return `works: cut at max_tokens (${r.choices[0].text.length} characters)`;
	const v = JSON.parse(r.choices[0].text);
	must(v !== null && typeof v === "object" && !Array.isArray(v), r.choices[0].text);
	return `works: ${r.choices[0].text.trim()}`;
});
await row("chat.completions.create", "POST /v1/chat/completions", "n 2, temperature 0", async () => {
	const r = await client.chat.completions.create({ model, messages: hello, n: 2, max_tokens: 6, temperature: 0 });
	must(r.choices.length === 2 && r.choices[0].index === 0 && r.choices[1].index === 1, JSON.stringify(r.choices));
	must(r.choices[0].message.content === r.choices[1].message.content, "greedy choices differ");
	return `works: 2 choices, equal under greedy`;
});
await refused("chat.completions.create", "POST /v1/chat/completions", "n 17",
	() => client.chat.completions.create({ model, messages: hello, n: 17 }), "'n'");
const tools = [{ type: "function", function: { name: "get_weather", description: "The weather.",
	parameters: { type: "object", properties: { city: { type: "string" } } } } }];
const toolHistory = [
	...hello,
	{ role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
		function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
	{ role: "tool", tool_call_id: "call_1", content: "sunny" },
];
// This template has no tool-call syntax: the output is the content, whatever it says.
await row("chat.completions.create", "POST /v1/chat/completions", "tools, tool_choice auto, parallel_tool_calls", async () => {
	const r = await client.chat.completions.create({ model, messages: hello, tools, tool_choice: "auto", parallel_tool_calls: false, max_tokens: 4 });
	const c = r.choices[0];
	must(c.message.role === "assistant" && typeof c.message.content === "string" && !c.message.tool_calls, JSON.stringify(r));
	return `works: finish_reason ${c.finish_reason}, no tool call in this template's output`;
});
await row("chat.completions.create", "POST /v1/chat/completions", "assistant tool_calls and a tool message in messages", async () => {
	const r = await client.chat.completions.create({ model, messages: toolHistory, tools, max_tokens: 4 });
	must(r.choices[0].message.role === "assistant", JSON.stringify(r));
	return `works: ${r.usage.prompt_tokens} prompt tokens`;
});
// Nothing to force a call into: this template has no call syntax.
await refused("chat.completions.stream()", "POST /v1/chat/completions", "stream, tools, tool_choice required",
	() => client.chat.completions.stream({ model, messages: toolHistory, tools, tool_choice: "required", max_tokens: 4 }).finalChatCompletion(),
	"cannot force a call");
await refused("chat.completions.create", "POST /v1/chat/completions", "tool_choice naming no tool",
	() => client.chat.completions.create({ model, messages: hello, tools, tool_choice: { type: "function", function: { name: "f" } } }),
	"which 'tools' does not have");
await refused("chat.completions.create", "POST /v1/chat/completions", "response_format json_schema with a pattern",
	() => client.chat.completions.create({ model, messages: hello,
		response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "a+" } } } }),
	"'pattern' is not supported");
await refused("chat.completions.create", "POST /v1/chat/completions", "role function",
	() => client.chat.completions.create({ model, messages: [...hello, { role: "function", name: "f", content: "x" }] }),
	"role 'function' is not supported");
await refused("chat.completions.create", "POST /v1/chat/completions", "top_logprobs without logprobs",
	() => client.chat.completions.create({ model, messages: hello, top_logprobs: 2 }), "top_logprobs");
await row("chat.completions.create", "POST /v1/chat/completions", "store, metadata, user, service_tier (unknown here)", async () => {
	const { data, response } = await client.chat.completions.create({
		model, messages: hello, max_tokens: 4, store: false, metadata: { k: "v" },
		user: "u1", service_tier: "auto",
	}).withResponse();
	must(data.choices[0].message.role === "assistant", JSON.stringify(data));
	const ignored = response.headers.get("x-layermesh-ignored-fields");
	must(ignored === "store, metadata, service_tier", `X-Layermesh-Ignored-Fields: ${ignored}`);
	return `works, ignored and named: X-Layermesh-Ignored-Fields: ${ignored}`;
});
await row("completions.create", "POST /v1/completions", "best_of 3, n 1", async () => {
	const r = await client.completions.create({ model, prompt: "Once", best_of: 3, max_tokens: 4, seed: 7 });
	must(r.choices.length === 1 && r.usage.completion_tokens === 12, JSON.stringify(r));
	return `works: the best of 3, usage ${r.usage.completion_tokens} completion tokens`;
});
await refused("completions.create", "POST /v1/completions", "suffix",
	() => client.completions.create({ model, prompt: "x", suffix: "y" }), "'suffix' is not supported");
await refused("completions.create", "POST /v1/completions", "echo true",
	() => client.completions.create({ model, prompt: "x", echo: true }), "echo is not supported");
await refused("completions.create", "POST /v1/completions", "presence_penalty 3",
	() => client.completions.create({ model, prompt: "x", presence_penalty: 3 }), "presence_penalty");

finish();

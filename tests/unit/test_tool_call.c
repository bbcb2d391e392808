/* coordinator/tool_call: which syntax each real template teaches; each format's calls parsed
 * (one, several, text before and after), written badly (bad JSON, truncated, unknown name:
 * the text comes back as content), the reasoning apart; a stream's partial parses always a
 * prefix of the final one; the GBNF grammars well formed. Expected values are written out by
 * hand from the formats as the templates render them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "coordinator/api/tool_call.h"

static char *slurp_template(const char *name, size_t *n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/tests/chat/templates/%s", getenv("LM_SOURCE_ROOT"), name);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	struct lm_buf b = {0};
	char tmp[4096];
	size_t k;
	while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
		cr_assert_eq(lm_buf_add(&b, tmp, k), 0);
	fclose(f);
	*n = b.len;
	return b.p;
}

static struct tool_syntax detect(const char *name)
{
	size_t n;
	char *t = slurp_template(name, &n);
	struct tool_syntax s = tool_syntax_detect(t, n);
	free(t);
	return s;
}

Test(tool_call, detects_the_templates_formats)
{
	static const struct {
		const char *file;
		enum tool_format fmt;
		const char *think;
	} cases[] = {
		{"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", TOOL_FMT_HERMES, NULL},
		{"Qwen-Qwen2.5-7B-Instruct.jinja", TOOL_FMT_HERMES, NULL},
		{"Qwen-Qwen3-0.6B.jinja", TOOL_FMT_HERMES, "<think>"},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", TOOL_FMT_LLAMA3, NULL},
		{"meta-llama-Llama-3.2-3B-Instruct.jinja", TOOL_FMT_LLAMA3, NULL},
		{"meta-llama-Llama-3.3-70B-Instruct.jinja", TOOL_FMT_LLAMA3, NULL},
		{"mistralai-Mistral-Nemo-Instruct-2407.jinja", TOOL_FMT_MISTRAL, NULL},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", TOOL_FMT_MISTRAL, "[THINK]"},
		{"openai-gpt-oss-120b.jinja", TOOL_FMT_HARMONY, NULL},
		{"google-gemma-4-31B-it.jinja", TOOL_FMT_GEMMA4, "<|channel>thought"},
		{"deepseek-ai-DeepSeek-V3.1.jinja", TOOL_FMT_DEEPSEEK, "<think>"},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TOOL_FMT_DEEPSEEK, "<think>"},
		{"Qwen3-Coder.jinja", TOOL_FMT_NONE, NULL},
		{"GLM-4.6.jinja", TOOL_FMT_NONE, "<think>"},
		{"google-gemma-2-2b-it.jinja", TOOL_FMT_NONE, NULL},
		{"microsoft-Phi-3.5-mini-instruct.jinja", TOOL_FMT_NONE, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tool_syntax s = detect(cases[i].file);
		cr_expect_eq(s.fmt, cases[i].fmt, "%s: %s", cases[i].file, tool_format_name(s.fmt));
		if (cases[i].think == NULL)
			cr_expect_null(s.think_open, "%s", cases[i].file);
		else
			cr_expect_str_eq(s.think_open != NULL ? s.think_open : "(none)",
					 cases[i].think, "%s", cases[i].file);
	}
	struct tool_syntax nemo = detect("mistralai-Mistral-Nemo-Instruct-2407.jinja");
	struct tool_syntax devstral = detect("unsloth-mistral-Devstral-Small-2507.jinja");
	cr_expect(!nemo.mistral_args);
	cr_expect(devstral.fmt == TOOL_FMT_MISTRAL && devstral.mistral_args);
	struct tool_syntax none = tool_syntax_detect(NULL, 0);
	cr_expect(!tool_syntax_active(&none));
}

/* The control tokens whose text a parsed output keeps: the syntax's own markers only. */
Test(tool_call, markers)
{
	struct tool_syntax g = {TOOL_FMT_GEMMA4, "<|channel>thought", "<channel|>", false, false};
	cr_expect(tool_syntax_marker(&g, "<|tool_call>", 12));
	cr_expect(tool_syntax_marker(&g, "<channel|>", 10));
	cr_expect(tool_syntax_marker(&g, "<|channel>", 10));
	cr_expect(!tool_syntax_marker(&g, "<|turn>", 7));
	cr_expect(!tool_syntax_marker(&g, "<|tool_cal", 10));
	struct tool_syntax h = {TOOL_FMT_HARMONY, NULL, NULL, false, false};
	cr_expect(tool_syntax_marker(&h, "<|message|>", 11));
	cr_expect(!tool_syntax_marker(&h, "<|return|>", 10));
	struct tool_syntax none = {0};
	cr_expect(!tool_syntax_marker(&none, "<|tool_call>", 12));
}

Test(tool_call, the_prompt_can_leave_reasoning_open)
{
	struct tool_syntax s = {TOOL_FMT_DEEPSEEK, "<think>", "</think>", false, false};
	tool_syntax_prompt(&s, "<｜Assistant｜><think>\n", strlen("<｜Assistant｜><think>\n"));
	cr_expect(s.think_open_at_start);
	tool_syntax_prompt(&s, "<｜Assistant｜></think>", strlen("<｜Assistant｜></think>"));
	cr_expect(!s.think_open_at_start);
}

/* ------------------------------------------------------------------ parsing */

static const struct tool_want any = {true, NULL, 0};

struct want_call {
	const char *name, *args;
};

static void expect_parse(const struct tool_syntax *s, const struct tool_want *w, const char *text,
			 const char *content, const char *reasoning, int n,
			 const struct want_call *calls)
{
	struct tool_parsed p;
	int rc = tool_parse(s, w, text, strlen(text), true, &p);
	cr_assert_eq(rc, 0, "%s: %d", text, rc);
	cr_expect_str_eq(p.content.p, content, "content of %s", text);
	cr_expect_str_eq(p.reasoning.p, reasoning, "reasoning of %s", text);
	cr_expect_eq(p.n_calls, n, "calls in %s", text);
	for (int i = 0; i < n && i < p.n_calls; i++) {
		cr_expect_str_eq(p.calls[i].name, calls[i].name, "%s", text);
		cr_expect_str_eq(p.calls[i].args, calls[i].args, "%s", text);
	}
	tool_parsed_fini(&p);
}

/* Every prefix's partial parse is a prefix of the final parse (what a stream has sent stays
 * true), and holds no call. */
static void expect_prefixes(const struct tool_syntax *s, const struct tool_want *w,
			    const char *text)
{
	struct tool_parsed full;
	cr_assert_eq(tool_parse(s, w, text, strlen(text), true, &full), 0);
	for (size_t k = 0; k <= strlen(text); k++) {
		struct tool_parsed p;
		cr_assert_eq(tool_parse(s, w, text, k, false, &p), 0);
		cr_expect(p.content.len <= full.content.len &&
				  memcmp(p.content.p, full.content.p, p.content.len) == 0,
			  "content of %.*s (%s) is not a prefix of %s's (%s)", (int)k, text,
			  p.content.p, text, full.content.p);
		cr_expect(p.reasoning.len <= full.reasoning.len &&
				  memcmp(p.reasoning.p, full.reasoning.p, p.reasoning.len) == 0,
			  "reasoning of %.*s (%s) is not a prefix of %s's (%s)", (int)k, text,
			  p.reasoning.p, text, full.reasoning.p);
		cr_expect_eq(p.n_calls, 0);
		tool_parsed_fini(&p);
	}
	tool_parsed_fini(&full);
}

static const struct want_call weather[] = {
	{"get_weather", "{\"city\":\"Paris\"}"},
	{"get_time", "{\"tz\":\"CET\",\"n\":[1,2.5,true,null]}"}};

Test(tool_call, hermes)
{
	struct tool_syntax s = {TOOL_FMT_HERMES, "<think>", "</think>", false, false};
	const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
			  "\"Paris\"}}\n</tool_call>";
	expect_parse(&s, &any, one, "", "", 1, weather);
	const char *two = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
			  "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
			  "\"get_time\", \"arguments\": {\"tz\": \"CET\", \"n\": [1, 2.5, true, "
			  "null]}}\n</tool_call> done";
	expect_parse(&s, &any, two, "Let me check.\n done", "", 2, weather);
	const char *think = "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": "
			    "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
	expect_parse(&s, &any, think, "", "The user wants weather.", 1, weather);
	/* The arguments as a string of JSON, as some models write them. */
	expect_parse(&s, &any,
		     "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
		     "\\\"Paris\\\"}\"}</tool_call>",
		     "", "", 1, weather);
	/* Written badly: the text as it is. */
	const char *bad_json =
		"Hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
		"Paris}}\n</tool_call>";
	expect_parse(&s, &any, bad_json, bad_json, "", 0, NULL);
	const char *truncated = "<tool_call>\n{\"name\": \"get_weather\", \"argu";
	expect_parse(&s, &any, truncated, truncated, "", 0, NULL);
	const char *unclosed = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}";
	expect_parse(&s, &any, unclosed, unclosed, "", 0, NULL);
	/* A second call written badly undoes the first: never half-parsed. */
	const char *half = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
			   "\"Paris\"}}</tool_call><tool_call>{\"name\": 3}</tool_call>";
	expect_parse(&s, &any, half, half, "", 0, NULL);
	const char *no_args = "<tool_call>{\"name\": \"get_weather\"}</tool_call>";
	expect_parse(&s, &any, no_args, no_args, "", 0, NULL);
	const char *array_args = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
	expect_parse(&s, &any, array_args, array_args, "", 0, NULL);
	/* A name the request has no tool for is not a call. */
	const char *const names[] = {"get_time"};
	struct tool_want only_time = {true, names, 1};
	expect_parse(&s, &only_time, one, one, "", 0, NULL);
	/* tool_choice "none": no calls looked for. */
	struct tool_want none = {false, NULL, 0};
	expect_parse(&s, &none, one, one, "", 0, NULL);
	expect_prefixes(&s, &any, two);
	expect_prefixes(&s, &any, think);
	expect_prefixes(&s, &any, bad_json);
	expect_prefixes(&s, &any, half);
}

Test(tool_call, reasoning)
{
	struct tool_syntax s = {TOOL_FMT_NONE, "<think>", "</think>", false, false};
	expect_parse(&s, &any, "<think>a b</think>\n\nHello", "Hello", "a b", 0, NULL);
	expect_parse(&s, &any, "Hello <think>x</think>", "Hello <think>x</think>", "", 0, NULL);
	/* Unclosed: reasoning (the model ran out of tokens). */
	expect_parse(&s, &any, "<think>\nstill thinking", "", "still thinking", 0, NULL);
	expect_parse(&s, &any, "<thi", "<thi", "", 0, NULL);
	s.think_open_at_start = true;
	expect_parse(&s, &any, "\nthought\n</think>\n\nanswer", "answer", "thought", 0, NULL);
	expect_prefixes(&s, &any, "\nthought  more\n</think>\n\nanswer </think>");
	s.think_open_at_start = false;
	expect_prefixes(&s, &any, "<think>\nthought\n</think>\n\nanswer");
	struct tool_syntax m = {TOOL_FMT_MISTRAL, "[THINK]", "[/THINK]", false, true};
	expect_parse(&m, &any, "[THINK]hmm[/THINK]ok", "ok", "hmm", 0, NULL);
}

Test(tool_call, llama3)
{
	struct tool_syntax s = {TOOL_FMT_LLAMA3, NULL, NULL, false, false};
	expect_parse(&s, &any, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
		     "", "", 1, weather);
	expect_parse(&s, &any,
		     "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": "
		     "\"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\", "
		     "\"n\": [1, 2.5, true, null]}}",
		     "", "", 2, weather);
	/* Text, or JSON that is not a call, is content. */
	expect_parse(&s, &any, "The weather is fine.", "The weather is fine.", "", 0, NULL);
	const char *not_call = "{\"answer\": 42}";
	expect_parse(&s, &any, not_call, not_call, "", 0, NULL);
	const char *after = "{\"name\": \"get_weather\", \"parameters\": {}} and more";
	expect_parse(&s, &any, after, after, "", 0, NULL);
	const char *truncated = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Pa";
	expect_parse(&s, &any, truncated, truncated, "", 0, NULL);
	expect_prefixes(&s, &any, "  {\"name\": \"get_weather\", \"parameters\": {}}");
	expect_prefixes(&s, &any, "Plain text { with a brace");
}

Test(tool_call, mistral)
{
	struct tool_syntax nemo = {TOOL_FMT_MISTRAL, NULL, NULL, false, false};
	expect_parse(&nemo, &any,
		     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
		     "\"Paris\"}, \"id\": \"abcdefghi\"}, {\"name\": \"get_time\", \"arguments\": "
		     "{\"tz\": \"CET\", \"n\": [1, 2.5, true, null]}}]",
		     "", "", 2, weather);
	struct tool_syntax s = {TOOL_FMT_MISTRAL, NULL, NULL, false, true};
	expect_parse(&s, &any,
		     "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time"
		     "[CALL_ID]a1b2c3d4e[ARGS]{\"tz\": \"CET\", \"n\": [1, 2.5, true, null]}",
		     "Sure.", "", 2, weather);
	const char *bad = "[TOOL_CALLS]get_weather[ARGS]{\"city\": ";
	expect_parse(&s, &any, bad, bad, "", 0, NULL);
	const char *empty = "[TOOL_CALLS][]";
	expect_parse(&s, &any, empty, empty, "", 0, NULL);
	const char *no_args = "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}";
	expect_parse(&s, &any, no_args, no_args, "", 0, NULL);
	expect_prefixes(&s, &any, "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}");
}

Test(tool_call, harmony)
{
	struct tool_syntax s = {TOOL_FMT_HARMONY, NULL, NULL, false, false};
	const char *call = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
			   "<|channel|>commentary to=functions.get_weather <|constrain|>json"
			   "<|message|>{\"city\": \"Paris\"}<|call|>";
	expect_parse(&s, &any, call, "", "Need weather.", 1, weather);
	/* The call's end is an end-of-generation token: the text may stop before it. */
	const char *in_role = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>"
			      "assistant to=functions.get_weather<|channel|>commentary json"
			      "<|message|>{\"city\": \"Paris\"}";
	expect_parse(&s, &any, in_role, "", "Need weather.", 1, weather);
	const char *answer = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant"
			     "<|channel|>final<|message|>It is sunny.";
	expect_parse(&s, &any, answer, "It is sunny.", "Easy.", 0, NULL);
	expect_parse(&s, &any, "plain words", "plain words", "", 0, NULL);
	const char *bad = "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>"
			  "commentary to=functions.get_weather<|message|>{\"city\": Paris}<|call|>";
	expect_parse(&s, &any, bad,
		     "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>"
		     "{\"city\": Paris}<|call|>",
		     "Hm.", 0, NULL);
	expect_prefixes(&s, &any, call);
	expect_prefixes(&s, &any, answer);
	expect_prefixes(&s, &any, bad);
}

Test(tool_call, gemma4)
{
	struct tool_syntax s = {TOOL_FMT_GEMMA4, "<|channel>thought", "<channel|>", false, false};
	const char *two =
		"<|channel>thought\nweather first<channel|><|tool_call>call:get_weather"
		"{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_call>call:get_time{tz:<|\"|>CET"
		"<|\"|>,n:[1,2.5,true,null]}<tool_call|>";
	expect_parse(&s, &any, two, "", "weather first", 2, weather);
	expect_parse(
		&s, &any,
		"Checking.<|tool_call>call:f{a:{b:<|\"|>x, y<|\"|>,c:-3},d:[]}<tool_call|>",
		"Checking.", "", 1,
		(const struct want_call[]){{"f", "{\"a\":{\"b\":\"x, y\",\"c\":-3},\"d\":[]}"}});
	const char *unclosed = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}";
	expect_parse(&s, &any, unclosed, unclosed, "", 0, NULL);
	const char *bad_value = "<|tool_call>call:get_weather{city:Paris}<tool_call|>";
	expect_parse(&s, &any, bad_value, bad_value, "", 0, NULL);
	const char *dup = "<|tool_call>call:f{a:1,a:2}<tool_call|>";
	expect_parse(&s, &any, dup, dup, "", 0, NULL);
	expect_prefixes(&s, &any, two);
}

Test(tool_call, deepseek)
{
	struct tool_syntax s = {TOOL_FMT_DEEPSEEK, "<think>", "</think>", true, false};
	const char *two =
		"plan</think>Calling.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
		"<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>"
		"get_time<｜tool▁sep｜>{\"tz\": \"CET\", \"n\": [1, 2.5, true, null]}"
		"<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
	expect_parse(&s, &any, two, "Calling.", "plan", 2, weather);
	s.think_open_at_start = false;
	const char *bad = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
			  "{\"city\"";
	expect_parse(&s, &any, bad, bad, "", 0, NULL);
	const char *empty = "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>";
	expect_parse(&s, &any, empty, empty, "", 0, NULL);
	/* R1's calls: the name after "function", the arguments in a json fence. */
	const char *r1 =
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
		"```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
	expect_parse(&s, &any, r1, "", "", 1, weather);
	const char *r1_open = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
			      "get_weather\n```json\n{\"city\": \"Paris\"}\n<｜tool▁call▁end｜>";
	expect_parse(&s, &any, r1_open, r1_open, "", 0, NULL);
	s.think_open_at_start = true;
	expect_prefixes(&s, &any, two);
}

Test(tool_call, ids)
{
	char a[TOOL_CALL_ID_LEN], b[TOOL_CALL_ID_LEN];
	tool_call_id(a);
	tool_call_id(b);
	cr_expect_eq(strlen(a), 29);
	cr_expect_eq(strncmp(a, "call_", 5), 0);
	cr_expect_eq(
		strspn(a + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
		24);
	cr_expect_str_neq(a, b);
}

/* ------------------------------------------------------------------ grammars */

/* GBNF well-formedness by inspection: each line "name ::= body"; quotes and brackets closed
 * and escapes known; parentheses balanced; every rule used is defined, once; root is. */
static void expect_gbnf(const char *g)
{
	char defined[64][32], used[256][32];
	int nd = 0, nu = 0;
	for (const char *line = g; *line != '\0';) {
		const char *nl = strchr(line, '\n');
		cr_assert_not_null(nl, "the grammar ends with a newline");
		const char *def = strstr(line, " ::= ");
		cr_assert(def != NULL && def < nl, "a rule: %.*s", (int)(nl - line), line);
		cr_assert(def - line < 32 && nd < 64);
		snprintf(defined[nd++], 32, "%.*s", (int)(def - line), line);
		int depth = 0;
		for (const char *p = def + 5; p < nl; p++) {
			if (*p == '"' || *p == '[') {
				char close = *p == '"' ? '"' : ']';
				for (p++; p < nl && *p != close; p++)
					if (*p == '\\') {
						p++;
						cr_assert(strchr("\"\\[]tnrxu", *p) != NULL,
							  "escape \\%c in %.*s", *p,
							  (int)(nl - line), line);
					}
				cr_assert(p < nl, "unclosed %c in %.*s", close, (int)(nl - line),
					  line);
			} else if (*p == '(') {
				depth++;
			} else if (*p == ')') {
				cr_assert(--depth >= 0);
			} else if ((*p >= 'a' && *p <= 'z')) {
				const char *q = p;
				while (q < nl && ((*q >= 'a' && *q <= 'z') || *q == '-' ||
						  (*q >= '0' && *q <= '9')))
					q++;
				cr_assert(nu < 256);
				snprintf(used[nu++], 32, "%.*s", (int)(q - p), p);
				p = q - 1;
			} else if (*p == '{') {
				while (p < nl && *p != '}')
					p++;
			} else {
				cr_assert(strchr(" ?*+|", *p) != NULL, "'%c' in %.*s", *p,
					  (int)(nl - line), line);
			}
		}
		cr_assert_eq(depth, 0, "%.*s", (int)(nl - line), line);
		line = nl + 1;
	}
	for (int i = 0; i < nd; i++)
		for (int j = i + 1; j < nd; j++)
			cr_expect_str_neq(defined[i], defined[j]);
	for (int i = 0; i < nu; i++) {
		bool found = false;
		for (int j = 0; j < nd; j++)
			found |= strcmp(used[i], defined[j]) == 0;
		cr_expect(found, "rule %s is used but not defined in\n%s", used[i], g);
	}
	cr_expect_eq(strcmp(defined[0], "root"), 0);
}

Test(tool_call, grammars)
{
	const char *const names[] = {"get_weather", "get_time"};
	static const struct {
		struct tool_syntax s;
		const char *call; /* what the call rule must spell */
	} cases[] = {
		{{TOOL_FMT_HERMES, "<think>", "</think>", false, false}, "\"<tool_call>\""},
		{{TOOL_FMT_LLAMA3, NULL, NULL, false, false}, "\"\\\"parameters\\\"\""},
		{{TOOL_FMT_MISTRAL, NULL, NULL, false, false}, "\"[TOOL_CALLS]\" \"[\""},
		{{TOOL_FMT_MISTRAL, "[THINK]", "[/THINK]", false, true}, "\"[ARGS]\""},
		{{TOOL_FMT_HARMONY, NULL, NULL, false, false}, "to=functions."},
		{{TOOL_FMT_GEMMA4, "<|channel>thought", "<channel|>", false, false},
		 "\"<|tool_call>call:\""},
		{{TOOL_FMT_DEEPSEEK, "<think>", "</think>", true, false}, "<｜tool▁sep｜>"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (int parallel = 0; parallel < 2; parallel++) {
			struct lm_buf g = {0};
			lm_diag d = {{0}};
			cr_assert_eq(tool_call_grammar(&cases[i].s, names, 2, parallel, &g, &d), 0);
			expect_gbnf(g.p);
			cr_expect(strstr(g.p, cases[i].call) != NULL, "%s", g.p);
			cr_expect(strstr(g.p, "tool-name ::= \"get_weather\" | \"get_time\"\n") !=
					  NULL,
				  "%s", g.p);
			lm_buf_fini(&g);
		}
	/* Hermes, one call or several; reasoning first, optional. */
	struct tool_syntax h = {TOOL_FMT_HERMES, "<think>", "</think>", false, false};
	struct lm_buf g = {0};
	lm_diag d = {{0}};
	cr_assert_eq(tool_call_grammar(&h, names, 1, false, &g, &d), 0);
	cr_expect(strncmp(g.p, "root ::= think? call\n", 21) == 0, "%s", g.p);
	cr_expect(strstr(g.p, "tool-name ::= \"get_weather\"\n") != NULL);
	cr_expect(strstr(g.p, "think-body ::= ( [^<] | \"<\" [^/] | \"</\" [^t] | \"</t\" [^h] | "
			      "\"</th\" [^i] | \"</thi\" [^n] | \"</thin\" [^k] | \"</think\" [^>] "
			      ")* \"</think>\"\n") != NULL,
		  "%s", g.p);
	lm_buf_reset(&g);
	cr_assert_eq(tool_call_grammar(&h, names, 2, true, &g, &d), 0);
	cr_expect(strncmp(g.p, "root ::= think? call ( ws call )*\n", 34) == 0, "%s", g.p);
	lm_buf_reset(&g);
	/* Refused: no syntax, no tools, a name GBNF would need to escape. */
	struct tool_syntax none = {0};
	cr_expect_eq(tool_call_grammar(&none, names, 2, false, &g, &d), LM_EINVAL);
	cr_expect_eq(tool_call_grammar(&h, names, 0, false, &g, &d), LM_EINVAL);
	const char *const odd[] = {"a\"b"};
	cr_expect_eq(tool_call_grammar(&h, odd, 1, false, &g, &d), LM_EINVAL);
	lm_buf_fini(&g);
}

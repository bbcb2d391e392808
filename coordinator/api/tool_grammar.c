/* tool_grammar.c — a GBNF grammar for a template's tool-call syntax (tool_call.h).
 *
 * The grammar is llama.cpp's GBNF: rules "name ::= alternatives", literals in double quotes,
 * character classes in brackets, ( ) groups, ? * + and {m,n} repetition. The arguments are any
 * JSON object (a schema's shape is the structured-output module's to add); the name one of
 * the request's tools. White space between tokens is bounded, so that a sampler that favours it
 * still has to move on. */
#include <stdio.h>
#include <string.h>

#include "coordinator/api/tool_call.h"

static const char tg_json[] =
	"ws ::= [ \\t\\n]{0,8}\n"
	"json-value ::= json-object | json-array | json-string | json-number | \"true\" | "
	"\"false\" | \"null\"\n"
	"json-object ::= \"{\" ws ( json-string ws \":\" ws json-value ws ( \",\" ws json-string "
	"ws \":\" ws json-value ws )* )? \"}\"\n"
	"json-array ::= \"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"\n"
	"json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
	"json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
	"json-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] "
	"[-+]? [0-9]{1,3} )?\n";

static const char tg_gemma4[] =
	"g4-object ::= \"{\" ( g4-key \":\" g4-value ( \",\" g4-key \":\" g4-value )* )? \"}\"\n"
	"g4-key ::= [A-Za-z0-9_]{1,64}\n"
	"g4-value ::= g4-string | g4-object | g4-array | json-number | \"true\" | \"false\" | "
	"\"null\"\n"
	"g4-array ::= \"[\" ( g4-value ( \",\" g4-value )* )? \"]\"\n"
	"g4-string ::= \"<|\\\"|>\" g4-char* \"<|\\\"|>\"\n"
	"g4-char ::= [^<] | \"<\" [^|] | \"<|\" [^\"] | \"<|\\\"\" [^|] | \"<|\\\"|\" [^>]\n";

/* A GBNF literal: the text in double quotes, " and \ escaped. */
static int tg_lit(struct lm_buf *o, const char *s)
{
	int rc = lm_buf_addc(o, '"');
	for (; rc == 0 && *s != '\0'; s++)
		rc = (*s == '"' || *s == '\\' ? lm_buf_addc(o, '\\') : 0) | lm_buf_addc(o, *s);
	return rc | lm_buf_addc(o, '"');
}

/* A character of a class, escaped where GBNF needs it ([ ] \ "). */
static int tg_class_char(struct lm_buf *o, char c)
{
	int rc = c == '[' || c == ']' || c == '\\' || c == '"' ? lm_buf_addc(o, '\\') : 0;
	return rc | lm_buf_addc(o, c);
}

/* rule ::= any text up to and including `close` (ASCII): at each point, the close's first k
 * characters then one that does not continue it. */
static int tg_until(struct lm_buf *o, const char *rule, const char *close)
{
	size_t n = strlen(close);
	int rc = lm_buf_printf(o, "%s ::= ( ", rule);
	for (size_t k = 0; rc == 0 && k < n; k++) {
		char pre[64];
		snprintf(pre, sizeof pre, "%.*s", (int)k, close);
		rc = lm_buf_adds(o, k > 0 ? " | " : "");
		if (rc == 0 && k > 0)
			rc = tg_lit(o, pre) | lm_buf_addc(o, ' ');
		rc |= lm_buf_adds(o, "[^") | tg_class_char(o, close[k]) | lm_buf_addc(o, ']');
	}
	return rc | lm_buf_adds(o, " )* ") | tg_lit(o, close) | lm_buf_addc(o, '\n');
}

/* tool-name ::= "a" | "b" ... (the bare names). */
static int tg_names(struct lm_buf *o, const char *const *names, int n)
{
	int rc = lm_buf_adds(o, "tool-name ::= ");
	for (int i = 0; rc == 0 && i < n; i++)
		rc = lm_buf_adds(o, i > 0 ? " | " : "") | tg_lit(o, names[i]);
	return rc | lm_buf_addc(o, '\n');
}

/* One call's text around its name and arguments: pre NAME mid ARGUMENTS post (GBNF). */
struct tg_call {
	const char *pre, *mid, *post;
};

static const struct tg_call tg_hermes = {
	"\"<tool_call>\" ws \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"\"",
	"\"\\\"\" ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws", "ws \"}\" ws \"</tool_call>\""};
static const struct tg_call tg_llama3 = {"\"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"\"",
					 "\"\\\"\" ws \",\" ws \"\\\"parameters\\\"\" ws \":\" ws",
					 "ws \"}\""};
static const struct tg_call tg_mistral_args = {"\"[TOOL_CALLS]\"", "\"[ARGS]\"", ""};
static const struct tg_call tg_mistral_obj = {
	"\"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"\"",
	"\"\\\"\" ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws", "ws \"}\""};
static const struct tg_call tg_harmony = {"\"<|channel|>commentary to=functions.\"",
					  "\" <|constrain|>json\"? \"<|message|>\"", ""};
static const struct tg_call tg_deepseek = {"\"<｜tool▁call▁begin｜>\"", "\"<｜tool▁sep｜>\"",
					   "\"<｜tool▁call▁end｜>\""};

/* rule ::= one call as c spells it: to tool-name with any JSON object (args NULL), or to each of
 * names[0..n) with its arguments' rule args[i] (NULL: any JSON object). */
static int tg_named(struct lm_buf *o, const char *rule, const struct tg_call *c,
		    const char *const *names, const char *const *args, int n)
{
	int rc = lm_buf_printf(o, "%s ::= %s ", rule, c->pre);
	if (args == NULL)
		rc |= lm_buf_printf(o, "tool-name %s json-object", c->mid);
	for (int i = 0; args != NULL && i < n; i++)
		rc |= lm_buf_adds(o, i == 0 ? "( " : " | ") | tg_lit(o, names[i]) |
		      lm_buf_printf(o, " %s %s", c->mid, args[i] != NULL ? args[i] : "json-object");
	if (args != NULL)
		rc |= lm_buf_adds(o, " )");
	return rc | lm_buf_printf(o, "%s%s\n", c->post[0] != '\0' ? " " : "", c->post);
}

/* call ::= one call in the format's syntax; *sep: what goes between parallel calls. */
static int tg_call(const struct tool_syntax *s, const char *const *names, const char *const *args,
		   int n, struct lm_buf *o, const char **sep)
{
	*sep = "ws";
	switch (s->fmt) {
	case TOOL_FMT_HERMES:
		return tg_named(o, "call", &tg_hermes, names, args, n);
	case TOOL_FMT_LLAMA3:
		*sep = "ws \";\" ws";
		return tg_named(o, "call", &tg_llama3, names, args, n);
	case TOOL_FMT_MISTRAL:
		if (s->mistral_args)
			return tg_named(o, "call", &tg_mistral_args, names, args, n);
		*sep = NULL; /* one [TOOL_CALLS] holds them all */
		return lm_buf_adds(o, "call ::= \"[TOOL_CALLS]\" \"[\" ws call-obj ( ws \",\" ws "
				      "call-obj )* ws \"]\"\n") |
		       tg_named(o, "call-obj", &tg_mistral_obj, names, args, n);
	case TOOL_FMT_HARMONY:
		*sep = NULL; /* a call ends the turn (<|call|>) */
		return tg_named(o, "call", &tg_harmony, names, args, n);
	case TOOL_FMT_GEMMA4: /* its arguments are not JSON: any object of its own syntax */
		return lm_buf_adds(o, "call ::= \"<|tool_call>call:\" tool-name g4-object "
				      "\"<tool_call|>\"\n") |
		       lm_buf_adds(o, tg_gemma4);
	case TOOL_FMT_DEEPSEEK:
		*sep = NULL; /* one section holds them all */
		return tg_named(o, "call", &tg_deepseek, names, args, n);
	default:
		return LM_EINVAL;
	}
}

/* The reasoning that may come first: a rule "think" (or nothing: *has false). */
static int tg_think(const struct tool_syntax *s, struct lm_buf *o, bool *has)
{
	*has = true;
	if (s->fmt == TOOL_FMT_HARMONY)
		return lm_buf_adds(o, "think ::= \"<|channel|>analysis<|message|>\" think-body "
				      "\"<|start|>assistant\"\n") |
		       tg_until(o, "think-body", "<|end|>");
	if (s->think_open == NULL) {
		*has = false;
		return 0;
	}
	int rc = lm_buf_adds(o, "think ::= ");
	if (!s->think_open_at_start)
		rc |= tg_lit(o, s->think_open) | lm_buf_addc(o, ' ');
	return rc | lm_buf_adds(o, "think-body ws\n") | tg_until(o, "think-body", s->think_close);
}

int tool_call_grammar(const struct tool_syntax *s, const char *const *names, int n, bool parallel,
		      struct lm_buf *out, lm_diag *d)
{
	return tool_call_grammar_args(s, names, NULL, n, parallel, out, d);
}

int tool_call_grammar_args(const struct tool_syntax *s, const char *const *names,
			   const char *const *args, int n, bool parallel, struct lm_buf *out,
			   lm_diag *d)
{
	if (n <= 0)
		return lm_fail(d, LM_EINVAL, "a tool-call grammar needs at least one tool");
	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]);
		if (len == 0 || len > 64 ||
		    strspn(names[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
				     "KLMNOPQRSTUVWXYZ0123456789_.-") != len)
			return lm_fail(d, LM_EINVAL,
				       "tool name '%.64s' is not [A-Za-z0-9_.-]{1,64}", names[i]);
	}
	const char *sep;
	bool think;
	struct lm_buf body = {0};
	int rc = tg_call(s, names, args, n, &body, &sep);
	if (rc == LM_EINVAL) {
		lm_buf_fini(&body);
		return lm_fail(d, LM_EINVAL, "the %s format has no tool-call syntax",
			       tool_format_name(s->fmt));
	}
	rc |= tg_think(s, &body, &think) | tg_names(&body, names, n) | lm_buf_adds(&body, tg_json);
	bool ds = s->fmt == TOOL_FMT_DEEPSEEK;
	rc |= lm_buf_printf(out, "root ::= %s%s%s", think ? "think" : "",
			    think && !s->think_open_at_start ? "? "
			    : think                          ? " "
							     : "",
			    ds ? "calls" : "call");
	if (parallel && sep != NULL)
		rc |= lm_buf_printf(out, " ( %s call )*", sep);
	rc |= lm_buf_addc(out, '\n');
	if (ds)
		rc |= lm_buf_printf(out,
				    "calls ::= \"<｜tool▁calls▁"
				    "begin｜>\" call%s \"<｜tool▁"
				    "calls▁end｜>\"\n",
				    parallel ? "+" : "");
	rc |= lm_buf_add(out, body.p, body.len);
	lm_buf_fini(&body);
	return rc != 0 ? lm_fail(d, LM_ENOMEM, "out of memory") : 0;
}

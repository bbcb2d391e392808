/* tool_call.h — a model's tool calls and reasoning, read out of the text it generated.
 *
 * A chat template teaches the model one syntax for calling tools; the chat API recognises it by
 * the markers the template holds (tool_syntax_detect) and parses the generated text into
 * OpenAI's message fields: the content, the reasoning (reasoning_content) and the calls
 * (tool_calls: a function's name and its arguments as JSON text).
 *
 *   format     recognised by             a call, as the model writes it
 *   hermes     <tool_call>               <tool_call>{"name": N, "arguments": {...}}</tool_call>
 *              (Hermes 2/3, Qwen 2.5/3)  (one element per call; text may come before)
 *   llama3     <|start_header_id|> and   [<|python_tag|>]{"name": N, "parameters": {...}}, the
 *              "parameters"              whole answer; several calls separated by ';'
 *   mistral    [TOOL_CALLS]              [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *                                        or, newer, [TOOL_CALLS]N[ARGS]{...} per call
 *   harmony    <|channel|>, <|message|>  <|channel|>commentary to=functions.N [<|constrain|>json]
 *              and <|start|>assistant    <|message|>{...}<|call|> (also " to=functions.N" in
 *              (gpt-oss)                 the role header); text in the final channel
 *   gemma4     <|tool_call>              <|tool_call>call:N{key:value,...}<tool_call|>, strings
 *                                        quoted <|"|>...<|"|>, keys bare
 *   deepseek   <｜tool▁calls▁begin｜>     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>
 *              (DeepSeek V3.1, R1)       {...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>; R1's
 *                                        call: function<｜tool▁sep｜>N\n```json\n{...}\n```
 *
 * A template with <tool_call> whose calls are not JSON inside (Qwen3-Coder's <function=...>,
 * GLM's <arg_key>) is not hermes: its output is content, its calls not parsed.
 *
 * Reasoning: <think>...</think> where the template holds <think> (open already when the prompt
 * ends with <think>, as DeepSeek's and some Qwen templates leave it), [THINK]...[/THINK]
 * (Mistral's reasoning models), harmony's analysis channel, Gemma 4's <|channel>thought...
 * <channel|>. Reasoning that never closes is reasoning (the model ran out of tokens).
 *
 * A call written badly (JSON that does not parse, arguments that are not an object, a name not
 * among the request's tools, a missing closing marker) is never half-parsed: then there are
 * no calls, and the text from the first call's marker on is content, as the model wrote it.
 *
 * Streams. tool_parse with final = false parses a prefix of the output for what can be sent
 * already: the reasoning and the content so far, without a tail that could still become a
 * marker, and nothing from the first call's marker on (calls are sent when the output ends).
 * What it returns is always a prefix of what a later parse returns, final or not, so a stream
 * sends only the new tail of each.
 */
#ifndef LM_TOOL_CALL_H
#define LM_TOOL_CALL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/base/buf.h"
#include "common/base/err.h"

enum tool_format {
	TOOL_FMT_NONE = 0, /* no call syntax known: the output is content (and reasoning) */
	TOOL_FMT_HERMES,
	TOOL_FMT_LLAMA3,
	TOOL_FMT_MISTRAL,
	TOOL_FMT_HARMONY,
	TOOL_FMT_GEMMA4,
	TOOL_FMT_DEEPSEEK,
	TOOL_FMT_COUNT
};

/* How a template's model writes calls and reasoning. */
struct tool_syntax {
	enum tool_format fmt;
	const char *think_open, *think_close; /* reasoning tags, or NULL (static strings) */
	bool think_open_at_start;             /* the prompt ended inside a reasoning block */
	bool mistral_args; /* Mistral's newer N[ARGS]{...} calls (the template has [ARGS]) */
};

/* The syntax a chat template teaches (its markers; NULL or "" template: none). */
struct tool_syntax tool_syntax_detect(const char *tmpl, size_t len);
/* Notes whether the rendered prompt leaves the reasoning block open (ends with the open tag,
 * white space after it aside). */
void tool_syntax_prompt(struct tool_syntax *s, const char *prompt, size_t len);
/* Whether text[0..len) is one of the syntax's markers (a call's, a channel's, a reasoning
 * tag): the chat API keeps the text of such a token where plain text leaves control tokens
 * out. */
bool tool_syntax_marker(const struct tool_syntax *s, const char *text, size_t len);
/* "hermes", "llama3", ...; "none". */
const char *tool_format_name(enum tool_format f);
/* Whether the syntax has anything to parse (calls, or reasoning). */
bool tool_syntax_active(const struct tool_syntax *s);

struct tool_call {
	char *name; /* owned */
	char *args; /* the arguments, JSON object text; owned */
};

struct tool_parsed {
	struct lm_buf content, reasoning;
	struct tool_call *calls; /* [n_calls] owned */
	int n_calls;
};

/* Which calls are accepted: `names` (the request's tools; NULL: any name) and whether calls
 * are looked for at all (tool_choice "none" or no tools: only reasoning is parsed). */
struct tool_want {
	bool calls;
	const char *const *names;
	int n_names;
};

/* Parses text[0..len) (valid UTF-8) into *out (zeroed first; the caller calls
 * tool_parsed_fini). final: the whole output; else a prefix of it (see above). 0, or
 * LM_ENOMEM. */
int tool_parse(const struct tool_syntax *s, const struct tool_want *want, const char *text,
	       size_t len, bool final, struct tool_parsed *out);
void tool_parsed_fini(struct tool_parsed *p);

/* A call id as OpenAI's: "call_" and 24 random letters and digits, NUL-terminated. */
#define TOOL_CALL_ID_LEN 30
void tool_call_id(char out[TOOL_CALL_ID_LEN]);

/* A GBNF grammar (llama.cpp's syntax, root rule "root") that admits only what the syntax's
 * calls look like: one call (or, with parallel, one or more) to one of names[0..n) (named:
 * that one alone), its arguments any JSON object, optionally after reasoning. For
 * tool_choice "required" or a named function. LM_EINVAL when the format has no call syntax,
 * names is empty or a name is not [A-Za-z0-9_.-]; LM_ENOMEM. Appends to out. */
int tool_call_grammar(const struct tool_syntax *s, const char *const *names, int n, bool parallel,
		      struct lm_buf *out, lm_diag *d);
/* The same with each tool's arguments held to a rule of the caller's: args[i] names the GBNF
 * rule of names[i]'s arguments (NULL: any JSON object), which the caller appends to the
 * grammar (json_schema_rules). Gemma 4's arguments are not JSON: any object of its syntax. */
int tool_call_grammar_args(const struct tool_syntax *s, const char *const *names,
			   const char *const *args, int n, bool parallel, struct lm_buf *out,
			   lm_diag *d);

#endif

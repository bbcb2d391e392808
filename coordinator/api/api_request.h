/* api_request.h — completion and chat request bodies, parsed and validated; and the stop-string
 * hold-back of the text going back to the client. Pure functions: no NNG, no scheduler, so the
 * unit tests and the fuzz target (tests/fuzz/fuzz_http.c) call them directly.
 *
 * The body is read by api_json.h (strict JSON: nothing after the value, no key twice, valid
 * UTF-8; strings keep U+0000). Fields of both endpoints (null is the same as absent):
 *     max_tokens        integer in [0, context]; default 16 for completions, the rest of the
 *                       context for chat; lowered so that prompt + max_tokens fits the
 *                       context (the answer then ends with finish_reason "length")
 *     temperature       [0, 100], default 1      top_p   [1e-9, 1], default 1
 *     top_k             integer [0, 1e9], 0 off  min_p   [0, 1], default 0
 *     seed              integer [0, 2^53 - 1]; absent: the API draws one per request and
 *                       reports it (api.h)
 *     presence_penalty, frequency_penalty   [-2, 2], default 0
 *     repeat_penalty    (0, 10], default 1 (llama.cpp's)
 *     repeat_last_n     the penalties' window in tokens, prompt included: integer in
 *                       [0, API_MAX_PENALTY_WINDOW], or -1 for the whole context when it is
 *                       no longer; default 64 (llama-server's)
 *     logit_bias        {"token id": bias in [-100, 100], ...}, at most API_MAX_LOGIT_BIAS
 *     stop              a string or an array of up to API_MAX_STOPS non-empty strings of at
 *                       most API_MAX_STOP_LEN bytes, valid UTF-8, without U+0000
 *     stream            true or false; stream_options {"include_usage": bool} only with it
 *     n                 integer [1, API_MAX_N]: choices, each its own sequence; the prompt is
 *                       computed once and its rows copied (scheduler.h); choice i samples with
 *                       seed + i. At most the mesh's slots (api_call.c refuses more)
 *     user, model       any string (one model)
 *     return_token_ids  true or false
 *     timings_per_token true or false (llama-server's): each chunk of a stream, and its usage
 *                       chunk, carries llama-server's "timings" so far
 * POST /v1/completions also takes:
 *     prompt            a string (tokenized here, with BOS when the vocabulary wants one;
 *                       special-token text stays text) or a non-empty array of token ids
 *     logprobs          integer [0, API_MAX_LOGPROBS]   echo  false only
 *     best_of           integer [n, API_MAX_N], default n: sequences generated, of which the n
 *                       with the highest sum of logprobs are returned; above n not with stream
 *     suffix            null or "" only
 * POST /v1/chat/completions also takes:
 *     messages          a non-empty array of {"role": "system"|"developer"|"user"|"assistant",
 *                       "content": a string, an array of {"type": "text", "text": ...} parts,
 *                       or null (assistant)}; developer is system. Rendered by the model's chat
 *                       template with the generation prompt (the Jinja engine, jinja.h; or the
 *                       format mesh.toml names, chat_template.h), then tokenized
 *                       with special-token parsing (the template's markers become their ids;
 *                       BOS once, where the vocabulary wants it)
 *     max_completion_tokens   as max_tokens (both: they must agree)
 *     logprobs          true or false; top_logprobs [0, API_MAX_LOGPROBS], with logprobs only
 *     chat_template_kwargs  an object: each key a variable of the template's (its knobs:
 *                       enable_thinking, reasoning_effort, ...; chat_jinja.h); only with the
 *                       model's own template
 *     tools             an array of at most API_MAX_TOOLS {"type": "function", "function":
 *                       {"name": [A-Za-z0-9_.-]{1,64}, each once; "description": a string;
 *                       "parameters": an object; "strict": a boolean}}, given to the template
 *                       as `tools` (the model's own template only)
 *     tool_choice       "none" (calls are not looked for in the output), "auto" (the default
 *                       with tools), "required" or {"type": "function", "function": {"name"}}
 *                       naming one of tools (calls to it alone are taken); the last two need
 *                       tools
 *     parallel_tool_calls  true or false (default true)
 *   and messages also take the role "tool" (content, and "tool_call_id": a string), an
 *   assistant's "tool_calls" ([{"id": a string, "type": "function", "function": {"name": a
 *   string, "arguments": JSON object text (or the object)}}], given to the template with the
 *   arguments as an object, as templates expect them) and "reasoning_content" (a string), and
 *   "name" (a string) on any message.
 * The output of a chat request is parsed by the template's syntax (tool_call.h): reasoning and
 * tool calls apart from the content.
 * Structured output, on both endpoints (json_schema.h; docs/constrained-decoding.md): at most
 * one of response_format ({"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"}}), json_schema (a schema) and grammar (GBNF),
 * compiled to the grammar the output is held to; a schema or grammar this server cannot
 * enforce is refused with the reason (line and column for GBNF).
 * Any other field is refused, naming it. A string prompt (or a rendered conversation) longer
 * in bytes than the context could hold in tokens is refused before it is tokenized.
 */
#ifndef LM_API_REQUEST_H
#define LM_API_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/buf.h"
#include "common/model/sampling.h"
#include "common/tok/tokenizer.h"
#include "common/wire/httpd.h"
#include "common/wire/wire.h"
#include "coordinator/api/chat_template.h"
#include "coordinator/api/jinja.h"
#include "coordinator/api/tool_call.h"

#define API_MAX_STOPS          4
#define API_MAX_STOP_LEN       256
#define API_MAX_LOGPROBS       WIRE_MAX_LOGPROBS
#define API_MAX_LOGIT_BIAS     LM_MAX_LOGIT_BIAS
#define API_MAX_PENALTY_WINDOW LM_MAX_PENALTY_WINDOW
#define API_MAX_MESSAGES       1024
#define API_MAX_TEMPLATE_STOPS 4
#define API_MAX_TOOLS          128
#define API_MAX_TOOL_CALLS     128 /* in one history message */
#define API_MAX_N              16  /* n and best_of */

enum api_kind { API_COMPLETION, API_CHAT };

struct api_limits {
	int32_t max_seq; /* the context of one sequence: prompt plus generated tokens */
	/* The most input bytes one token covers (tok_max_piece, and the longest special token's
	 * text): a prompt of more than max_seq times this many bytes cannot fit. 0: no check. */
	size_t max_token_bytes;
	/* Chat: the model's own template parsed by the Jinja engine (borrowed; NULL when the model
	 * has none or mesh.toml names a format), which renders every conversation; the format
	 * (recognised from the template, or named by mesh.toml), which renders them when there is
	 * no template and gives the end-of-turn stops; the vocabulary's texts of BOS and EOS (""
	 * when none). Neither a template nor a format refuses chat requests with chat_why. */
	const jinja_tmpl *jinja;
	enum chat_format chat;
	const char *chat_why;
	const char *bos_text, *eos_text;
	/* How the template's model writes tool calls and reasoning (tool_syntax_detect of its
	 * text; zeroed: none). */
	struct tool_syntax tools;
};

enum api_tool_choice { API_TOOLS_NONE = 0, API_TOOLS_AUTO, API_TOOLS_REQUIRED, API_TOOLS_NAMED };

struct api_request {
	enum api_kind kind;
	int32_t *prompt; /* [n_prompt] token ids, each < the vocabulary's size; owned */
	int32_t n_prompt;
	int32_t max_tokens; /* n_prompt + max_tokens <= max_seq */
	struct lm_sampling sampling;
	bool seed_given; /* else the caller draws sampling.seed */
	struct lm_penalties penalties;
	struct lm_logit_bias *bias; /* [n_bias] owned */
	int32_t n_bias;
	int32_t n_logprobs; /* alternatives per token, 0..API_MAX_LOGPROBS */
	bool logprobs;      /* each token's logprob (completions: n_logprobs > 0) */
	bool stream;        /* server-sent events */
	bool include_usage; /* stream_options.include_usage */
	bool want_ids;      /* return_token_ids */
	bool no_speculate;  /* "speculate": false: no drafts for this request */
	bool no_cache;      /* "cache_prompt": false: reuse no slot's rows (llama-server's field) */
	bool timings_per_token;     /* llama-server's: each streamed chunk carries "timings" */
	int32_t n;                  /* choices returned, 1..API_MAX_N */
	int32_t best_of;            /* sequences generated, n..API_MAX_N (completions; chat: n) */
	char *stops[API_MAX_STOPS]; /* [n_stops] owned, non-empty, NUL-terminated */
	int n_stops;
	size_t max_stop; /* the longest stop string's length; 0 without stops */
	int32_t stop_ids[API_MAX_TEMPLATE_STOPS]; /* chat: the template's end-of-turn ids */
	int32_t n_stop_ids;
	char ignored[256]; /* the fields this server does not know, ignored: "store, user" */
	/* Chat: the tools' names ([n_tools] owned), tool_choice (its function's name, owned, when
	 * named), parallel_tool_calls; and how the output is parsed: the template's syntax with
	 * the rendered prompt's state (parse_output: reasoning or calls to look for). */
	char **tool_names;
	int n_tools;
	enum api_tool_choice tool_choice;
	char *tool_choice_name;
	bool parallel_tool_calls;
	struct tool_syntax syntax;
	bool parse_output;
	/* GBNF the output is held to (constrained decoding), or NULL; owned. */
	char *grammar;
};

/* What the output parse of r looks for (tool_call.h): calls, to its tools (the named one
 * alone), unless tool_choice is "none" or there are no tools. */
struct tool_want api_tool_want(const struct api_request *r);
/* The GBNF grammar (tool_call.h) that forces r's tool_choice "required" or named function in
 * the template's call syntax, appended to out; nothing for the other choices. Each function's
 * arguments are held to its "parameters" in tools (the request's array; NULL: none) where
 * json_schema.h can enforce the schema, else any JSON object. LM_EINVAL when the template has
 * no call syntax (or the grammar would pass GBNF_MAX_TEXT). api_chat_parse puts it in
 * r->grammar, and refuses a forcing tool_choice beside a grammar of the request's own. */
int api_tool_grammar(const struct api_request *r, const cJSON *tools, struct lm_buf *out,
		     lm_diag *d);

/* Why a request was refused: what the HTTP reply says. */
struct api_error {
	uint16_t status;  /* 400 for the client's mistakes, 500 for ours (out of memory) */
	const char *type; /* "invalid_request_error" or "server_error" (static strings) */
	enum lm_http_refusal reason; /* for the refusal counters */
	char *param;                 /* the offending field, or NULL; owned */
	char message[512];
};

/* Parses a /v1/completions body (any bytes). Returns 0 and fills *out (the caller calls
 * api_request_fini), or a negative LM_E* code (LM_EINVAL for a bad request, LM_ENOMEM) with
 * *out zeroed and *err filled (the caller calls api_error_fini). */
int api_request_parse(const char *body, size_t len, const struct api_limits *lim,
		      const tok_vocab *vocab, struct api_request *out, struct api_error *err);
/* The same for /v1/chat/completions. */
int api_chat_parse(const char *body, size_t len, const struct api_limits *lim,
		   const tok_vocab *vocab, struct api_request *out, struct api_error *err);
/* Frees what a parsed request owns and zeroes it; harmless on a zeroed request. */
void api_request_fini(struct api_request *r);
/* Frees the error's param; harmless on a zeroed error. */
void api_error_fini(struct api_error *e);

/* The messages of a chat request as the templates take them (chat_template.h: roles mapped,
 * parts kept for Gemma 4, joined for the rest), pointing into the cJSON tree `messages` (from
 * api_json_parse); *msgs and *parts are malloc'd, the caller frees both. Returns 0, or
 * LM_EINVAL / LM_ENOMEM with *err filled. Shared with `layermesh template`. */
int api_chat_messages(const cJSON *messages, enum chat_format f, struct chat_msg **msgs,
		      int *n_msgs, struct chat_part **parts, struct lm_buf *joined,
		      struct api_error *err);

/* The prompt text of a chat request (`req`, its JSON object from api_json_parse: messages
 * and chat_template_kwargs are read) as the chat API renders it: the messages as
 * api_chat_messages takes them, each {"role", "content"} (the content joined, or Gemma 4's
 * parts), with the generation prompt when `gen` (the API always asks for it), rendered by
 * lim->jinja with chat_jinja_vars' variables and today's date, or by the
 * format lim->chat when there is no template. Appends to text. 0, or LM_EINVAL (400: the
 * template refuses or cannot render the conversation, in the engine's words) / LM_ENOMEM with
 * *err filled. Shared with `layermesh template`. */
int api_chat_prompt(const cJSON *req, const struct api_limits *lim, bool gen, struct lm_buf *text,
		    struct api_error *err);

/* How much of the pending text p[0..len) (decoded, not yet sent) can go to the client.
 * When a stop string of r occurs in it, *hit is set and the result is where the earliest one
 * starts: the text before it goes out, the rest is dropped. Otherwise the result holds back the
 * longest tail that could still begin a stop string (nothing when `final`), so at most
 * r->max_stop - 1 bytes wait. Stop strings that are valid UTF-8 never cut valid UTF-8
 * text inside a character. */
size_t api_stop_cut(const struct api_request *r, const char *p, size_t len, bool final, bool *hit);

#endif

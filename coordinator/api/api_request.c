/* api_request.c — parsing and validating completion and chat requests. See api_request.h.
 *
 * The checks run in a fixed order (the body is an object; the prompt or the messages, the numbers,
 * the flags, stop, the adjustments) so that a request with several mistakes always gets the
 * same answer: the first mistake in that order.
 */
#include "coordinator/api/api_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/err.h"
#include "common/base/utf8.h"
#include "coordinator/api/api_json.h"
#include "coordinator/api/chat_jinja.h"
#include "common/grammar/gbnf.h"
#include "coordinator/api/json_schema.h"

/* Fills err (the message formatted as the HTTP error reply formats it) and returns the code. */
static int api_refuse(struct api_error *err, int code, uint16_t status, const char *type,
		      enum lm_http_refusal reason, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

static int api_refuse(struct api_error *err, int code, uint16_t status, const char *type,
		      enum lm_http_refusal reason, const char *param, const char *fmt, ...)
{
	va_list ap;
	err->status = status;
	err->type = type;
	err->reason = reason;
	err->param = param != NULL ? strdup(param) : NULL;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	return code;
}

#define API_BAD(err, param, ...)                                                           \
	api_refuse((err), LM_EINVAL, 400, "invalid_request_error", LM_HTTP_REFUSE_INVALID, \
		   (param), __VA_ARGS__)
#define API_TOO_LONG(err, ...)                                                             \
	api_refuse((err), LM_EINVAL, 400, "invalid_request_error", LM_HTTP_REFUSE_CONTEXT, \
		   "prompt", __VA_ARGS__)
#define API_NOMEM(err)                                                                   \
	api_refuse((err), LM_ENOMEM, 500, "server_error", LM_HTTP_REFUSE_INTERNAL, NULL, \
		   "out of memory")

/* Reads an optional number field with bounds into *out (left alone when absent or null). */
static int api_number(const cJSON *req, const char *key, double lo, double hi, bool integer,
		      double *out, struct api_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return API_BAD(err, key, "'%s' must be a number", key);
	double x = v->valuedouble;
	if ((integer && x != floor(x)) || x < lo || x > hi)
		return API_BAD(err, key, "'%s' must be %s in [%g, %g], got %g", key,
			       integer ? "an integer" : "a number", lo, hi, x);
	*out = x;
	return 0;
}

/* An optional boolean into *out (left alone when absent or null). */
static int api_bool(const cJSON *req, const char *key, bool *out, struct api_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsBool(v))
		return API_BAD(err, key, "'%s' must be true or false", key);
	*out = cJSON_IsTrue(v);
	return 0;
}

static const char *const api_common_keys[] = {
	"model",
	"max_tokens",
	"temperature",
	"top_p",
	"top_k",
	"min_p",
	"seed",
	"stop",
	"stream",
	"stream_options",
	"return_token_ids",
	"n",
	"user",
	"presence_penalty",
	"frequency_penalty",
	"repeat_penalty",
	"repeat_last_n",
	"logit_bias",
	"logprobs",
	"speculate",
	"cache_prompt",
	"response_format",
	"json_schema",
	"grammar",
	"timings_per_token",
	NULL,
};
static const char *const api_completion_keys[] = {"prompt", "echo", "best_of", "suffix", NULL};
static const char *const api_chat_keys[] = {
	"messages",    "max_completion_tokens", "top_logprobs",         "tools",
	"tool_choice", "parallel_tool_calls",   "chat_template_kwargs", NULL,
};

static bool api_listed(const char *const *list, const char *key)
{
	for (int i = 0; list[i] != NULL; i++)
		if (strcmp(key, list[i]) == 0)
			return true;
	return false;
}

/* Notes a field this server does not know in r->ignored ("store, metadata"; cut with "..."
 * past its size): OpenAI's API grows fields faster than servers do, and clients send them,
 * so an unknown field is ignored and named (a response header, a debug log line), as
 * llama-server and vLLM do. A known field with a bad value stays a 400. */
static void api_ignore(struct api_request *r, const char *prefix, const char *name)
{
	size_t at = strlen(r->ignored), cap = sizeof r->ignored;
	if (at + 4 >= cap)
		return;
	int n = snprintf(r->ignored + at, cap - at, "%s%s%.60s", at > 0 ? ", " : "", prefix, name);
	if (n < 0 || (size_t)n >= cap - at)
		snprintf(r->ignored + cap - 4, 4, "...");
}

static int api_known_fields(const cJSON *req, enum api_kind kind, struct api_request *r,
			    struct api_error *err)
{
	if (!cJSON_IsObject(req))
		return API_BAD(err, NULL, "the request body must be a JSON object");
	const char *const *own = kind == API_CHAT ? api_chat_keys : api_completion_keys;
	for (const cJSON *k = req->child; k != NULL; k = k->next)
		if (!api_listed(api_common_keys, k->string) && !api_listed(own, k->string))
			api_ignore(r, "", k->string);
	return 0;
}

/* A prompt of `bytes` input bytes is at least bytes / max_token_bytes tokens. */
static int api_length_precheck(size_t bytes, const struct api_limits *lim, struct api_error *err)
{
	if (lim->max_token_bytes == 0 || bytes / lim->max_token_bytes < (size_t)lim->max_seq)
		return 0;
	return API_TOO_LONG(err,
			    "the prompt has at least %zu tokens (%zu bytes); the context holds %d",
			    bytes / lim->max_token_bytes, bytes, lim->max_seq);
}

static int api_prompt_fits(const struct api_request *r, const struct api_limits *lim,
			   struct api_error *err)
{
	if (r->n_prompt == 0)
		return API_BAD(err, "prompt", "the prompt has no tokens");
	if (r->n_prompt >= lim->max_seq)
		return API_TOO_LONG(err, "the prompt has %d tokens; the context holds %d",
				    r->n_prompt, lim->max_seq);
	return 0;
}

/* The prompt: a string, or an array of token ids. */
static int api_prompt(const cJSON *req, const struct api_limits *lim, const tok_vocab *vocab,
		      struct api_request *r, struct api_error *err)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
	lm_diag d = {{0}};
	int rc;
	if (cJSON_IsString(p)) {
		size_t n = 0, len = api_json_len(p);
		if ((rc = api_length_precheck(len, lim, err)) != 0)
			return rc;
		rc = tok_encode_alloc(vocab, p->valuestring, len, tok_add_bos(vocab), &r->prompt,
				      &n, &d);
		if (rc != 0)
			return API_BAD(err, "prompt", "%s", lm_diag_str(&d, rc));
		if (n > INT32_MAX)
			return API_TOO_LONG(err, "the prompt has %zu tokens; the context holds %d",
					    n, lim->max_seq);
		r->n_prompt = (int32_t)n;
	} else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 &&
		   cJSON_IsNumber(cJSON_GetArrayItem(p, 0))) {
		int n = cJSON_GetArraySize(p);
		r->prompt = malloc((size_t)n * sizeof *r->prompt);
		if (r->prompt == NULL)
			return API_NOMEM(err);
		int i = 0;
		for (const cJSON *e = p->child; e != NULL; e = e->next, i++) {
			if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
			    e->valuedouble < 0 || e->valuedouble >= tok_n_vocab(vocab))
				return API_BAD(err, "prompt",
					       "prompt[%d] is not a token id of this model", i);
			r->prompt[i] = (int32_t)e->valuedouble;
		}
		r->n_prompt = n;
	} else {
		return API_BAD(err, "prompt",
			       "'prompt' must be a string or an array of token ids (one prompt "
			       "per request)");
	}
	return api_prompt_fits(r, lim, err);
}

/* Stop strings must be valid UTF-8: the text they are matched against always is, and a
 * malformed one (a stray continuation byte) could match inside a character and cut it, sending
 * the client half a character. */
static int api_stops(const cJSON *req, struct api_request *r, struct api_error *err)
{
	const cJSON *stop = cJSON_GetObjectItemCaseSensitive(req, "stop");
	if (cJSON_IsString(stop) || cJSON_IsArray(stop)) {
		const cJSON *e = cJSON_IsString(stop) ? stop : stop->child;
		for (; e != NULL; e = cJSON_IsString(stop) ? NULL : e->next) {
			size_t len = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
			if (!cJSON_IsString(e) || len == 0 || len > API_MAX_STOP_LEN ||
			    r->n_stops == API_MAX_STOPS)
				return API_BAD(err, "stop",
					       "'stop' must be up to %d non-empty strings of at "
					       "most %d bytes",
					       API_MAX_STOPS, API_MAX_STOP_LEN);
			if (len != api_json_len(e))
				return API_BAD(err, "stop", "'stop' strings may not hold U+0000");
			if (!lm_utf8_valid((const uint8_t *)e->valuestring, len))
				return API_BAD(err, "stop", "'stop' strings must be valid UTF-8");
			if ((r->stops[r->n_stops] = strdup(e->valuestring)) == NULL)
				return API_NOMEM(err);
			r->n_stops++;
			if (len > r->max_stop)
				r->max_stop = len;
		}
	} else if (stop != NULL && !cJSON_IsNull(stop)) {
		return API_BAD(err, "stop", "'stop' must be a string or an array of strings");
	}
	return 0;
}

/* logit_bias: {"<token id>": bias, ...}. */
static int api_logit_bias(const cJSON *req, const tok_vocab *vocab, struct api_request *r,
			  struct api_error *err)
{
	const cJSON *lb = cJSON_GetObjectItemCaseSensitive(req, "logit_bias");
	if (lb == NULL || cJSON_IsNull(lb))
		return 0;
	if (!cJSON_IsObject(lb))
		return API_BAD(err, "logit_bias",
			       "'logit_bias' must be an object of token ids to biases");
	int n = cJSON_GetArraySize(lb);
	if (n > API_MAX_LOGIT_BIAS)
		return API_BAD(err, "logit_bias", "'logit_bias' has %d entries, at most %d", n,
			       API_MAX_LOGIT_BIAS);
	if (n == 0)
		return 0;
	if ((r->bias = calloc((size_t)n, sizeof *r->bias)) == NULL)
		return API_NOMEM(err);
	for (const cJSON *e = lb->child; e != NULL; e = e->next) {
		char *end;
		long id = strtol(e->string, &end, 10);
		if (e->string[0] < '0' || e->string[0] > '9' || *end != '\0' || id < 0 ||
		    id >= tok_n_vocab(vocab))
			return API_BAD(err, "logit_bias",
				       "'logit_bias' key '%.40s' is not a token id of this model",
				       e->string);
		if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
			return API_BAD(err, "logit_bias",
				       "'logit_bias' values must be numbers in [-100, 100]");
		r->bias[r->n_bias++] = (struct lm_logit_bias){(int32_t)id, (float)e->valuedouble};
	}
	return 0;
}

/* presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n. */
static int api_penalties(const cJSON *req, const struct api_limits *lim, struct api_request *r,
			 struct api_error *err)
{
	double presence = 0, frequency = 0, repeat = 1, last_n = 64;
	int rc;
	if ((rc = api_number(req, "presence_penalty", -2, 2, false, &presence, err)) != 0 ||
	    (rc = api_number(req, "frequency_penalty", -2, 2, false, &frequency, err)) != 0 ||
	    (rc = api_number(req, "repeat_penalty", 1e-6, 10, false, &repeat, err)) != 0 ||
	    (rc = api_number(req, "repeat_last_n", -1, API_MAX_PENALTY_WINDOW, true, &last_n,
			     err)) != 0)
		return rc;
	if (last_n == -1) {
		if (lim->max_seq > API_MAX_PENALTY_WINDOW)
			return API_BAD(err, "repeat_last_n",
				       "'repeat_last_n' -1 means the whole context, %d tokens; "
				       "at most %d are supported",
				       lim->max_seq, API_MAX_PENALTY_WINDOW);
		last_n = lim->max_seq;
	}
	r->penalties = (struct lm_penalties){.presence = (float)presence,
					     .frequency = (float)frequency,
					     .repeat = (float)repeat,
					     .last_n = (int32_t)last_n};
	return 0;
}

/* stream, stream_options, return_token_ids, n. */
static int api_flags(const cJSON *req, struct api_request *r, struct api_error *err)
{
	double n = 1;
	int rc;
	if ((rc = api_number(req, "n", 1, API_MAX_N, true, &n, err)) != 0 ||
	    (rc = api_bool(req, "stream", &r->stream, err)) != 0 ||
	    (rc = api_bool(req, "return_token_ids", &r->want_ids, err)) != 0)
		return rc;
	r->n = (int32_t)n;
	r->best_of = r->n;
	bool speculate = true;
	if ((rc = api_bool(req, "speculate", &speculate, err)) != 0)
		return rc;
	r->no_speculate = !speculate;
	bool cache = true;
	if ((rc = api_bool(req, "cache_prompt", &cache, err)) != 0)
		return rc;
	r->no_cache = !cache;
	if ((rc = api_bool(req, "timings_per_token", &r->timings_per_token, err)) != 0)
		return rc;
	const cJSON *so = cJSON_GetObjectItemCaseSensitive(req, "stream_options");
	if (so != NULL && !cJSON_IsNull(so)) {
		if (!r->stream)
			return API_BAD(err, "stream_options",
				       "'stream_options' is only allowed with 'stream': true");
		if (!cJSON_IsObject(so))
			return API_BAD(err, "stream_options", "'stream_options' must be an object");
		for (const cJSON *k = so->child; k != NULL; k = k->next)
			if (strcmp(k->string, "include_usage") != 0)
				api_ignore(r, "stream_options.", k->string);
		if ((rc = api_bool(so, "include_usage", &r->include_usage, err)) != 0)
			return rc;
	}
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
	const cJSON *user = cJSON_GetObjectItemCaseSensitive(req, "user");
	if ((model != NULL && !cJSON_IsString(model) && !cJSON_IsNull(model)) ||
	    (user != NULL && !cJSON_IsString(user) && !cJSON_IsNull(user)))
		return API_BAD(err, model != NULL && !cJSON_IsString(model) ? "model" : "user",
			       "must be a string");
	return 0;
}

/* Structured output (json_schema.h): the grammar the last worker holds the output to. */
static int api_grammar(const cJSON *req, struct api_request *r, struct api_error *err)
{
	const char *param = NULL;
	lm_diag d = {{0}};
	int rc = json_schema_request(req, &r->grammar, &param, &d);
	if (rc == LM_ENOMEM)
		return API_NOMEM(err);
	return rc != 0 ? API_BAD(err, param, "%s", d.msg) : 0;
}

/* What both endpoints share, after the prompt: numbers, flags, stops, adjustments. */
static int api_common(const cJSON *req, const struct api_limits *lim, const tok_vocab *vocab,
		      double max_tokens, struct api_request *r, struct api_error *err)
{
	double temp = 1, top_p = 1, top_k = 0, min_p = 0, seed = -1;
	int rc;
	if ((rc = api_number(req, "max_tokens", 0, lim->max_seq, true, &max_tokens, err)) != 0 ||
	    (rc = api_number(req, "temperature", 0, 100, false, &temp, err)) != 0 ||
	    (rc = api_number(req, "top_p", 1e-9, 1, false, &top_p, err)) != 0 ||
	    (rc = api_number(req, "top_k", 0, 1e9, true, &top_k, err)) != 0 ||
	    (rc = api_number(req, "min_p", 0, 1, false, &min_p, err)) != 0 ||
	    (rc = api_number(req, "seed", 0, 9007199254740991.0, true, &seed, err)) != 0)
		return rc;
	if (r->n_prompt + max_tokens > lim->max_seq)
		max_tokens = lim->max_seq - r->n_prompt; /* ends with finish_reason "length" */
	if ((rc = api_flags(req, r, err)) != 0 || (rc = api_stops(req, r, err)) != 0 ||
	    (rc = api_penalties(req, lim, r, err)) != 0 ||
	    (rc = api_logit_bias(req, vocab, r, err)) != 0 || (rc = api_grammar(req, r, err)) != 0)
		return rc;
	r->max_tokens = (int32_t)max_tokens;
	r->seed_given = seed >= 0;
	r->sampling = (struct lm_sampling){.temperature = (float)temp,
					   .top_k = (int32_t)top_k,
					   .top_p = (float)top_p,
					   .min_p = (float)min_p,
					   .seed = seed >= 0 ? (uint64_t)seed : 0};
	return 0;
}

static int api_completion_fields(const cJSON *req, const struct api_limits *lim,
				 const tok_vocab *vocab, struct api_request *r,
				 struct api_error *err)
{
	int rc;
	double lp = 0;
	r->kind = API_COMPLETION;
	if ((rc = api_known_fields(req, API_COMPLETION, r, err)) != 0 ||
	    (rc = api_prompt(req, lim, vocab, r, err)) != 0 ||
	    (rc = api_common(req, lim, vocab, 16, r, err)) != 0 ||
	    (rc = api_number(req, "logprobs", 0, API_MAX_LOGPROBS, true, &lp, err)) != 0)
		return rc;
	double best_of = r->n;
	if ((rc = api_number(req, "best_of", 1, API_MAX_N, true, &best_of, err)) != 0)
		return rc;
	if (best_of < r->n)
		return API_BAD(err, "best_of", "'best_of' (%g) must be at least 'n' (%d)", best_of,
			       (int)r->n);
	if (best_of > r->n && r->stream)
		return API_BAD(err, "best_of",
			       "'best_of' above 'n' cannot be streamed: the best are known only "
			       "at the end");
	r->best_of = (int32_t)best_of;
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "echo")))
		return API_BAD(err, "echo", "echo is not supported");
	const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(req, "suffix");
	if (suffix != NULL && !cJSON_IsNull(suffix) &&
	    !(cJSON_IsString(suffix) && api_json_len(suffix) == 0))
		return API_BAD(err, "suffix",
			       "'suffix' is not supported (this server does no insertion)");
	r->n_logprobs = (int32_t)lp;
	r->logprobs = r->n_logprobs > 0;
	return 0;
}

int api_request_parse(const char *body, size_t len, const struct api_limits *lim,
		      const tok_vocab *vocab, struct api_request *out, struct api_error *err)
{
	memset(out, 0, sizeof *out);
	memset(err, 0, sizeof *err);
	char why[200];
	cJSON *req = api_json_parse(body, len, why, sizeof why);
	if (req == NULL)
		return API_BAD(err, NULL, "the request body is not valid JSON: %s", why);
	int rc = api_completion_fields(req, lim, vocab, out, err);
	cJSON_Delete(req);
	if (rc != 0)
		api_request_fini(out);
	return rc;
}

/* ------------------------------------------------------------------ chat */

/* A message's content: a string, null, or an array of text parts; joined (parts with "\n"
 * between them, none after an empty start, as llama.cpp joins them) into `joined` at *off. */
static int api_content(const cJSON *c, int i, struct chat_part *parts, int *n_parts,
		       struct lm_buf *joined, size_t *off, size_t *len, struct api_error *err)
{
	char param[48];
	snprintf(param, sizeof param, "messages[%d].content", i);
	*off = joined->len;
	if (c == NULL || cJSON_IsNull(c)) {
		*len = 0;
		return 0;
	}
	if (cJSON_IsString(c)) {
		*len = api_json_len(c);
		return lm_buf_add(joined, c->valuestring, *len) == 0 ? 0 : API_NOMEM(err);
	}
	if (!cJSON_IsArray(c))
		return API_BAD(err, param, "'%s' must be a string or an array of text parts",
			       param);
	int k = 0;
	for (const cJSON *p = c->child; p != NULL; p = p->next, k++) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
		if (!cJSON_IsObject(p) || !cJSON_IsString(type) ||
		    strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text) ||
		    cJSON_GetArraySize(p) != 2)
			return API_BAD(err, param,
				       "'%s[%d]' must be {\"type\": \"text\", \"text\": ...}: only "
				       "text content is supported",
				       param, k);
		size_t n = api_json_len(text);
		if (joined->len > *off && lm_buf_addc(joined, '\n') != 0)
			return API_NOMEM(err);
		if (lm_buf_add(joined, text->valuestring, n) != 0)
			return API_NOMEM(err);
		parts[(*n_parts)++] = (struct chat_part){text->valuestring, n};
	}
	*len = joined->len - *off;
	return 0;
}

/* A history message's tool call: {"id", "type": "function", "function": {"name", "arguments":
 * JSON object text or the object}}. */
static int api_history_call(const cJSON *c, const char *param, struct api_error *err)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
	if (!cJSON_IsObject(c) || (id != NULL && !cJSON_IsString(id)) ||
	    (type != NULL &&
	     !(cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0)) ||
	    !cJSON_IsObject(fn) || !cJSON_IsString(name))
		return API_BAD(err, param,
			       "'%s' must be {\"id\": ..., \"type\": \"function\", \"function\": "
			       "{\"name\": ..., \"arguments\": ...}}",
			       param);
	bool ok = cJSON_IsObject(args);
	if (cJSON_IsString(args)) {
		char why[64];
		cJSON *o = api_json_parse(args->valuestring, api_json_len(args), why, sizeof why);
		ok = cJSON_IsObject(o);
		cJSON_Delete(o);
	}
	if (!ok)
		return API_BAD(err, param,
			       "'%s.function.arguments' must be a JSON object (as text)", param);
	return 0;
}

/* An assistant's tool_calls (empty: none). */
static int api_history_calls(const cJSON *m, int i, enum chat_role role, bool *has,
			     struct api_error *err)
{
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
	char param[64];
	snprintf(param, sizeof param, "messages[%d].tool_calls", i);
	*has = false;
	if (tc == NULL || cJSON_IsNull(tc) || (cJSON_IsArray(tc) && cJSON_GetArraySize(tc) == 0))
		return 0;
	if (role != CHAT_ASSISTANT)
		return API_BAD(err, param, "'%s' is only for an assistant's message", param);
	if (!cJSON_IsArray(tc) || cJSON_GetArraySize(tc) > API_MAX_TOOL_CALLS)
		return API_BAD(err, param, "'%s' must be an array of at most %d tool calls", param,
			       API_MAX_TOOL_CALLS);
	int k = 0, rc = 0;
	for (const cJSON *c = tc->child; rc == 0 && c != NULL; c = c->next, k++) {
		char p[80];
		snprintf(p, sizeof p, "%s[%d]", param, k);
		rc = api_history_call(c, p, err);
	}
	*has = rc == 0;
	return rc;
}

/* The fields of a message besides role and content: its tool calls, the id of the call a tool
 * message answers, its reasoning, a name; and those a response the client appends to its
 * history may carry, accepted when empty. */
static int api_message_extras(const cJSON *m, int i, struct chat_msg *out, struct api_error *err)
{
	int rc = api_history_calls(m, i, out->role, &out->tool_calls, err);
	for (const cJSON *k = m->child; rc == 0 && k != NULL; k = k->next) {
		const char *key = k->string;
		bool empty = cJSON_IsNull(k) || (cJSON_IsArray(k) && cJSON_GetArraySize(k) == 0);
		char param[64];
		snprintf(param, sizeof param, "messages[%d].%.40s", i, key);
		if (strcmp(key, "role") == 0 || strcmp(key, "content") == 0 ||
		    strcmp(key, "tool_calls") == 0)
			continue;
		if (strcmp(key, "name") == 0 || strcmp(key, "reasoning_content") == 0 ||
		    (strcmp(key, "tool_call_id") == 0 && out->role == CHAT_TOOL)) {
			if (!cJSON_IsString(k) && !cJSON_IsNull(k))
				return API_BAD(err, param, "'%s' must be a string", param);
			continue;
		}
		if (empty && (strcmp(key, "refusal") == 0 || strcmp(key, "annotations") == 0 ||
			      strcmp(key, "function_call") == 0 || strcmp(key, "audio") == 0))
			continue;
		return API_BAD(err, param, "'%s' is not supported%s", param,
			       strcmp(key, "function_call") == 0
				       ? " (the deprecated function-calling API: use tool_calls)"
			       : strcmp(key, "tool_call_id") == 0 ? " (only on a tool message)"
								  : "");
	}
	return rc;
}

static int api_role(const cJSON *m, int i, enum chat_role *role, struct api_error *err)
{
	char param[48];
	snprintf(param, sizeof param, "messages[%d].role", i);
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
	const char *s = cJSON_IsString(r) ? r->valuestring : "";
	if (strcmp(s, "system") == 0 || strcmp(s, "developer") == 0)
		*role = CHAT_SYSTEM;
	else if (strcmp(s, "user") == 0)
		*role = CHAT_USER;
	else if (strcmp(s, "assistant") == 0)
		*role = CHAT_ASSISTANT;
	else if (strcmp(s, "tool") == 0)
		*role = CHAT_TOOL;
	else if (strcmp(s, "function") == 0)
		return API_BAD(err, param,
			       "role 'function' is not supported (the deprecated function-calling "
			       "API: use role \"tool\")");
	else
		return API_BAD(err, param,
			       "'%s' must be \"system\", \"developer\", \"user\", \"assistant\" or "
			       "\"tool\"",
			       param);
	return 0;
}

int api_chat_messages(const cJSON *messages, enum chat_format f, struct chat_msg **msgs,
		      int *n_msgs, struct chat_part **parts, struct lm_buf *joined,
		      struct api_error *err)
{
	*msgs = NULL;
	*parts = NULL;
	*n_msgs = 0;
	int n = cJSON_IsArray(messages) ? cJSON_GetArraySize(messages) : 0;
	if (n == 0 || n > API_MAX_MESSAGES)
		return API_BAD(err, "messages", "'messages' must be an array of 1 to %d messages",
			       API_MAX_MESSAGES);
	int n_parts_max = 0;
	for (const cJSON *m = messages->child; m != NULL; m = m->next) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
		n_parts_max += cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 0;
	}
	struct chat_msg *out = calloc((size_t)n, sizeof *out);
	struct chat_part *pt = calloc((size_t)n_parts_max + 1, sizeof *pt);
	size_t *off = calloc((size_t)n, sizeof *off);
	int *first_part = calloc((size_t)n + 1, sizeof *first_part);
	int rc = out && pt && off && first_part ? 0 : API_NOMEM(err);
	int i = 0, np = 0;
	for (const cJSON *m = messages->child; rc == 0 && m != NULL; m = m->next, i++) {
		if (!cJSON_IsObject(m)) {
			char param[32];
			snprintf(param, sizeof param, "messages[%d]", i);
			rc = API_BAD(err, param, "'%s' must be an object", param);
			break;
		}
		first_part[i] = np;
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
		if ((rc = api_role(m, i, &out[i].role, err)) != 0 ||
		    (rc = api_message_extras(m, i, &out[i], err)) != 0 ||
		    (rc = api_content(c, i, pt, &np, joined, &off[i], &out[i].len, err)) != 0)
			break;
		/* Gemma 4's template takes the parts of a user or model turn as they are. */
		out[i].n_parts = cJSON_IsArray(c) &&
						 (f == CHAT_GEMMA4 || f == CHAT_GEMMA4_UNMERGED) &&
						 out[i].role != CHAT_SYSTEM
					 ? np - first_part[i]
					 : 0;
	}
	/* The joined texts have their final place now that the buffer is done growing. */
	for (int k = 0; rc == 0 && k < n; k++) {
		out[k].text = joined->p != NULL ? joined->p + off[k] : "";
		out[k].parts = out[k].n_parts > 0 ? pt + first_part[k] : NULL;
	}
	free(off);
	free(first_part);
	if (rc != 0) {
		free(out);
		free(pt);
		return rc;
	}
	*msgs = out;
	*parts = pt;
	*n_msgs = n;
	return 0;
}

/* ------------------------------------------------------------------ tools */

static bool api_tool_name_ok(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 64 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

/* One of tools: {"type": "function", "function": {"name", "description", "parameters",
 * "strict"}}; its name into r->tool_names[i]. A mistake's param is "tools", its message names the
 * exact field. */
static int api_tool(const cJSON *t, int i, struct api_request *r, struct api_error *err)
{
	char param[64];
	snprintf(param, sizeof param, "tools[%d]", i);
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
	if (!cJSON_IsObject(t) || !cJSON_IsString(type) ||
	    strcmp(type->valuestring, "function") != 0 || !cJSON_IsObject(fn))
		return API_BAD(err, "tools",
			       "'%s' must be {\"type\": \"function\", \"function\": {\"name\": "
			       "...}}",
			       param);
	static const struct {
		const char *key, *what;
		cJSON_bool (*is)(const cJSON *);
	} fields[] = {{"description", "a string", cJSON_IsString},
		      {"parameters", "an object (a JSON schema)", cJSON_IsObject},
		      {"strict", "true or false", cJSON_IsBool}};
	for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(fn, fields[k].key);
		snprintf(param, sizeof param, "tools[%d].function.%s", i, fields[k].key);
		if (v != NULL && !cJSON_IsNull(v) && !fields[k].is(v))
			return API_BAD(err, "tools", "'%s' must be %s", param, fields[k].what);
	}
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
	snprintf(param, sizeof param, "tools[%d].function.name", i);
	if (!cJSON_IsString(name) || !api_tool_name_ok(name->valuestring))
		return API_BAD(err, "tools",
			       "'%s' must be 1 to 64 letters, digits, '_', '-' or '.'", param);
	for (int k = 0; k < i; k++)
		if (strcmp(r->tool_names[k], name->valuestring) == 0)
			return API_BAD(err, "tools", "'tools' has the function '%s' twice",
				       name->valuestring);
	if ((r->tool_names[i] = strdup(name->valuestring)) == NULL)
		return API_NOMEM(err);
	r->n_tools = i + 1;
	return 0;
}

/* tool_choice, after tools. */
static int api_tool_choice(const cJSON *req, struct api_request *r, struct api_error *err)
{
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(req, "tool_choice");
	r->tool_choice = r->n_tools > 0 ? API_TOOLS_AUTO : API_TOOLS_NONE;
	if (tc == NULL || cJSON_IsNull(tc))
		return 0;
	const char *s = cJSON_IsString(tc) ? tc->valuestring : "";
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
	if (strcmp(s, "none") == 0)
		r->tool_choice = API_TOOLS_NONE;
	else if (strcmp(s, "auto") == 0)
		r->tool_choice = r->n_tools > 0 ? API_TOOLS_AUTO : API_TOOLS_NONE;
	else if (strcmp(s, "required") == 0)
		r->tool_choice = API_TOOLS_REQUIRED;
	else if (cJSON_IsObject(tc) && cJSON_IsString(type) &&
		 strcmp(type->valuestring, "function") == 0 && cJSON_IsString(name))
		r->tool_choice = API_TOOLS_NAMED;
	else
		return API_BAD(err, "tool_choice",
			       "'tool_choice' must be \"none\", \"auto\", \"required\" or "
			       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
	if (r->n_tools == 0 && r->tool_choice != API_TOOLS_NONE)
		return API_BAD(err, "tool_choice", "'tool_choice' %s needs 'tools'",
			       r->tool_choice == API_TOOLS_REQUIRED ? "\"required\""
								    : "naming a function");
	if (r->tool_choice != API_TOOLS_NAMED)
		return 0;
	for (int i = 0; i < r->n_tools; i++)
		if (strcmp(r->tool_names[i], name->valuestring) == 0)
			return (r->tool_choice_name = strdup(name->valuestring)) != NULL
				       ? 0
				       : API_NOMEM(err);
	return API_BAD(err, "tool_choice",
		       "'tool_choice' names the function '%.64s', which 'tools' does not have",
		       name->valuestring);
}

/* tools, tool_choice, parallel_tool_calls. */
static int api_chat_tools(const cJSON *req, const struct api_limits *lim, struct api_request *r,
			  struct api_error *err)
{
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
	int n = cJSON_GetArraySize(tools), rc = 0;
	if (tools != NULL && !cJSON_IsNull(tools) && (!cJSON_IsArray(tools) || n > API_MAX_TOOLS))
		return API_BAD(err, "tools", "'tools' must be an array of at most %d tools",
			       API_MAX_TOOLS);
	if (n > 0 && (r->tool_names = calloc((size_t)n, sizeof *r->tool_names)) == NULL)
		return API_NOMEM(err);
	int i = 0;
	for (const cJSON *t = n > 0 ? tools->child : NULL; rc == 0 && t != NULL; t = t->next, i++)
		rc = api_tool(t, i, r, err);
	r->parallel_tool_calls = true;
	if (rc != 0 || (rc = api_tool_choice(req, r, err)) != 0 ||
	    (rc = api_bool(req, "parallel_tool_calls", &r->parallel_tool_calls, err)) != 0)
		return rc;
	r->syntax = lim->jinja != NULL ? lim->tools : (struct tool_syntax){0};
	return 0;
}

/* The parameters (a JSON schema) of the function `name` among tools, or NULL. */
static const cJSON *api_tool_params(const cJSON *tools, const char *name)
{
	const cJSON *t;
	if (!cJSON_IsArray(tools))
		return NULL;
	cJSON_ArrayForEach(t, tools)
	{
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
			return cJSON_GetObjectItemCaseSensitive(f, "parameters");
	}
	return NULL;
}

int api_tool_grammar(const struct api_request *r, const cJSON *tools, struct lm_buf *out,
		     lm_diag *d)
{
	if (r->tool_choice != API_TOOLS_REQUIRED && r->tool_choice != API_TOOLS_NAMED)
		return 0;
	struct tool_want w = api_tool_want(r);
	char rule[API_MAX_TOOLS][16];
	const char *args[API_MAX_TOOLS] = {0};
	struct lm_buf rules = {0};
	int next = 0, rc = 0;
	for (int i = 0; i < w.n_names && i < API_MAX_TOOLS && rc == 0; i++) {
		const cJSON *p = api_tool_params(tools, w.names[i]);
		lm_diag ignored = {{0}};
		/* A schema json_schema.h cannot enforce leaves those arguments any object. */
		int root = p != NULL ? json_schema_rules(p, &next, &rules, &ignored) : LM_EINVAL;
		if (root == LM_ENOMEM)
			rc = root;
		if (root >= 0) {
			snprintf(rule[i], sizeof rule[i], "r%d", root);
			args[i] = rule[i];
		}
	}
	if (rc == 0)
		rc = tool_call_grammar_args(&r->syntax, w.names, args, w.n_names,
					    r->parallel_tool_calls, out, d);
	if (rc == 0 && rules.len > 0 &&
	    (lm_buf_add(out, rules.p, rules.len) | lm_buf_adds(out, json_schema_prelude)) != 0)
		rc = LM_ENOMEM;
	lm_buf_fini(&rules);
	if (rc == LM_ENOMEM)
		return lm_fail(d, rc, "out of memory");
	if (rc == 0 && out->len > GBNF_MAX_TEXT)
		return lm_fail(d, LM_EINVAL, "the tools make a grammar of more than %d bytes",
			       GBNF_MAX_TEXT);
	return rc;
}

/* tool_choice "required" or a named function: the output is held to the template's call syntax
 * (api_tool_grammar), which a grammar of the request's own would contradict. */
static int api_tool_force(const cJSON *req, struct api_request *r, struct api_error *err)
{
	if (r->tool_choice != API_TOOLS_REQUIRED && r->tool_choice != API_TOOLS_NAMED)
		return 0;
	if (r->grammar != NULL)
		return API_BAD(err, "tool_choice",
			       "a 'tool_choice' that forces a call (\"required\" or a named "
			       "function) cannot be combined with 'response_format', "
			       "'json_schema' or 'grammar'");
	struct lm_buf g = {0};
	struct gbnf *compiled = NULL;
	lm_diag d = {{0}};
	int rc = api_tool_grammar(r, cJSON_GetObjectItemCaseSensitive(req, "tools"), &g, &d);
	if (rc == 0 && g.p != NULL) /* a grammar of ours that does not compile is a bug: say so */
		rc = gbnf_compile(g.p, g.len, &compiled, &d);
	gbnf_free(compiled);
	if (rc == 0) {
		r->grammar = g.p;
		g = (struct lm_buf){0};
	}
	lm_buf_fini(&g);
	if (rc == LM_ENOMEM)
		return API_NOMEM(err);
	return rc != 0 ? API_BAD(err, "tool_choice", "'tool_choice' cannot force a call: %s", d.msg)
		       : 0;
}

struct tool_want api_tool_want(const struct api_request *r)
{
	if (r->tool_choice == API_TOOLS_NAMED)
		return (struct tool_want){true, (const char *const *)&r->tool_choice_name, 1};
	return (struct tool_want){r->tool_choice != API_TOOLS_NONE && r->n_tools > 0,
				  (const char *const *)r->tool_names, r->n_tools};
}

/* The rendered conversation into ids: special-token text parsed (the template's markers), BOS
 * once: a leading BOS text is the tokenizer's to add when the vocabulary adds one. */
static int api_chat_tokens(const struct lm_buf *text, const struct api_limits *lim,
			   const tok_vocab *vocab, struct api_request *r, struct api_error *err)
{
	const char *p = text->p != NULL ? text->p : "";
	const char *bos_text = lim->bos_text != NULL ? lim->bos_text : "";
	size_t n = text->len, bos = strlen(bos_text);
	unsigned flags = TOK_ENC_PARSE_SPECIAL;
	if (tok_add_bos(vocab)) {
		flags |= TOK_ENC_ADD_BOS;
		if (bos > 0 && n >= bos && memcmp(p, bos_text, bos) == 0) {
			p += bos;
			n -= bos;
		}
	}
	int rc = api_length_precheck(n, lim, err);
	if (rc != 0)
		return rc;
	lm_diag d = {{0}};
	size_t count = 0;
	if ((rc = tok_encode_alloc_ex(vocab, p, n, flags, &r->prompt, &count, &d)) != 0)
		return API_BAD(err, "messages", "%s", lm_diag_str(&d, rc));
	if (count > INT32_MAX)
		return API_TOO_LONG(err, "the prompt has %zu tokens; the context holds %d", count,
				    lim->max_seq);
	r->n_prompt = (int32_t)count;
	return api_prompt_fits(r, lim, err);
}

/* A history message's tool calls for the template: copied, each function's arguments an object
 * (templates iterate them or write them with tojson; validated by api_history_call). */
static cJSON *api_jinja_calls(const cJSON *tc)
{
	cJSON *calls = cJSON_Duplicate(tc, true);
	for (cJSON *c = calls != NULL ? calls->child : NULL; c != NULL; c = c->next) {
		cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
		if (!cJSON_IsString(args))
			continue;
		char why[64];
		cJSON *o = api_json_parse(args->valuestring, api_json_len(args), why, sizeof why);
		if (o == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", o)) {
			cJSON_Delete(o);
			cJSON_Delete(calls);
			return NULL;
		}
	}
	return calls;
}

/* The fields besides role and content that reach the template: an assistant's tool_calls and
 * reasoning_content, a tool message's tool_call_id and name. */
static bool api_jinja_extras(cJSON *o, const struct chat_msg *m, const cJSON *src)
{
	if (m->tool_calls) {
		cJSON *calls = api_jinja_calls(cJSON_GetObjectItemCaseSensitive(src, "tool_calls"));
		if (calls == NULL || !cJSON_AddItemToObject(o, "tool_calls", calls)) {
			cJSON_Delete(calls);
			return false;
		}
	}
	static const char *const keys[] = {"reasoning_content", "tool_call_id", "name"};
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, keys[k]);
		if (!cJSON_IsString(v) || (k > 0 && m->role != CHAT_TOOL))
			continue;
		cJSON *copy = cJSON_Duplicate(v, false);
		if (copy == NULL || !cJSON_AddItemToObject(o, keys[k], copy)) {
			cJSON_Delete(copy);
			return false;
		}
	}
	return true;
}

/* The messages as the Jinja engine takes them: {"role", "content"}, the role as the formats
 * take it (developer is system) and the content as they do (the text, or the parts); then the
 * tool fields of src (the request's messages). */
static cJSON *api_chat_jinja_messages(const struct chat_msg *m, int n, const cJSON *src)
{
	cJSON *arr = cJSON_CreateArray();
	const cJSON *s = src != NULL ? src->child : NULL;
	for (int i = 0; arr != NULL && i < n; i++, s = s != NULL ? s->next : NULL) {
		static const char *const roles[] = {"system", "user", "assistant", "tool"};
		cJSON *o = cJSON_CreateObject(), *content = NULL;
		cJSON_AddItemToArray(arr, o);
		if (o == NULL || cJSON_AddStringToObject(o, "role", roles[m[i].role]) == NULL)
			goto fail;
		if (m[i].parts != NULL) {
			content = cJSON_AddArrayToObject(o, "content");
			for (int k = 0; content != NULL && k < m[i].n_parts; k++) {
				cJSON *p = cJSON_CreateObject();
				char *t = strndup(m[i].parts[k].text, m[i].parts[k].len);
				cJSON_AddItemToArray(content, p);
				if (p == NULL || t == NULL ||
				    cJSON_AddStringToObject(p, "type", "text") == NULL ||
				    cJSON_AddStringToObject(p, "text", t) == NULL) {
					free(t);
					goto fail;
				}
				free(t);
			}
		} else {
			char *t = strndup(m[i].text, m[i].len);
			content = t != NULL ? cJSON_AddStringToObject(o, "content", t) : NULL;
			free(t);
		}
		if (content == NULL || !api_jinja_extras(o, &m[i], s))
			goto fail;
	}
	return arr;
fail:
	cJSON_Delete(arr);
	return NULL;
}

/* Renders with the engine; its refusals are 400s in its words. */
static int api_chat_jinja(const struct api_limits *lim, const struct chat_msg *msgs, int n,
			  const cJSON *req, bool gen, struct lm_buf *text, struct api_error *err)
{
	const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
	/* The engine's strings end at a NUL, which a JSON string may hold. */
	for (int i = 0; i < n; i++)
		if (memchr(msgs[i].text, '\0', msgs[i].len) != NULL) {
			char param[48];
			snprintf(param, sizeof param, "messages[%d].content", i);
			return API_BAD(err, param,
				       "'%s' holds U+0000, which a chat template is not given",
				       param);
		}
	cJSON *messages = api_chat_jinja_messages(
		      msgs, n, cJSON_GetObjectItemCaseSensitive(req, "messages")),
	      *vars = NULL;
	if (messages == NULL)
		return API_NOMEM(err);
	lm_diag d = {{0}};
	/* No tools (or []) is None to the template, as transformers passes it. */
	int rc = chat_jinja_vars(messages, cJSON_GetArraySize(tools) > 0 ? tools : NULL, gen,
				 kwargs, lim->bos_text != NULL ? lim->bos_text : "",
				 lim->eos_text != NULL ? lim->eos_text : "", &vars, &d);
	cJSON_Delete(messages);
	if (rc != 0)
		return rc == LM_ENOMEM ? API_NOMEM(err)
				       : API_BAD(err, "chat_template_kwargs", "%s", d.msg);
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	struct jinja_date date = {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
				  tm.tm_min};
	rc = jinja_render(lim->jinja, vars, &date, NULL, text, &d);
	cJSON_Delete(vars);
	if (rc == 0 || rc == LM_ENOMEM)
		return rc == 0 ? 0 : API_NOMEM(err);
	return api_refuse(err, LM_EINVAL, 400, "invalid_request_error", LM_HTTP_REFUSE_TEMPLATE,
			  "messages", "the chat template %s this conversation: %s",
			  rc == LM_EINVAL ? "refuses" : "cannot render", d.msg);
}

int api_chat_prompt(const cJSON *req, const struct api_limits *lim, bool gen, struct lm_buf *text,
		    struct api_error *err)
{
	if (lim->chat == CHAT_NONE && lim->jinja == NULL)
		return api_refuse(err, LM_EINVAL, 400, "invalid_request_error",
				  LM_HTTP_REFUSE_TEMPLATE, "messages", "%s",
				  lim->chat_why != NULL ? lim->chat_why
							: "this model has no chat template");
	const cJSON *kw = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
	if (kw != NULL && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
		return API_BAD(err, "chat_template_kwargs",
			       "'chat_template_kwargs' must be an object");
	if (lim->jinja == NULL && cJSON_GetArraySize(kw) > 0)
		return API_BAD(
			err, "chat_template_kwargs",
			"'chat_template_kwargs' needs the model's own chat template (mesh.toml "
			"names the format %s)",
			chat_format_name(lim->chat));
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
	if (lim->jinja == NULL && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0)
		return API_BAD(err, "tools",
			       "'tools' needs the model's own chat template (mesh.toml names the "
			       "format %s, which renders no tools)",
			       chat_format_name(lim->chat));
	struct chat_msg *msgs = NULL;
	struct chat_part *parts = NULL;
	struct lm_buf joined = {0};
	int n = 0;
	int rc = api_chat_messages(cJSON_GetObjectItemCaseSensitive(req, "messages"), lim->chat,
				   &msgs, &n, &parts, &joined, err);
	lm_diag d = {{0}};
	if (rc == 0 && lim->jinja != NULL) {
		rc = api_chat_jinja(lim, msgs, n, req, gen, text, err);
	} else if (rc == 0 && (rc = chat_render(lim->chat, lim->bos_text ? lim->bos_text : "",
						lim->eos_text ? lim->eos_text : "", msgs, n, gen,
						text, &d)) != 0) {
		rc = rc == LM_ENOMEM ? API_NOMEM(err)
				     : api_refuse(err, LM_EINVAL, 400, "invalid_request_error",
						  LM_HTTP_REFUSE_TEMPLATE, "messages", "%s", d.msg);
	}
	free(msgs);
	free(parts);
	lm_buf_fini(&joined);
	return rc;
}

/* The template's end-of-turn tokens that the vocabulary has. */
static void api_chat_stops(const struct api_limits *lim, const tok_vocab *vocab,
			   struct api_request *r)
{
	const char *stops[4];
	chat_format_stops(lim->chat, lim->eos_text != NULL ? lim->eos_text : "", stops);
	for (int i = 0; i < 4 && stops[i] != NULL && r->n_stop_ids < API_MAX_TEMPLATE_STOPS; i++) {
		int32_t id = stops[i][0] != '\0' ? tok_find(vocab, stops[i], strlen(stops[i])) : -1;
		if (id >= 0)
			r->stop_ids[r->n_stop_ids++] = id;
	}
}

static int api_chat_fields(const cJSON *req, const struct api_limits *lim, const tok_vocab *vocab,
			   struct api_request *r, struct api_error *err)
{
	int rc;
	r->kind = API_CHAT;
	if ((rc = api_known_fields(req, API_CHAT, r, err)) != 0 ||
	    (rc = api_chat_tools(req, lim, r, err)) != 0)
		return rc;
	struct lm_buf text = {0};
	rc = api_chat_prompt(req, lim, true, &text, err);
	if (rc == 0)
		rc = api_chat_tokens(&text, lim, vocab, r, err);
	tool_syntax_prompt(&r->syntax, text.p, text.len);
	r->parse_output = tool_syntax_active(&r->syntax);
	lm_buf_fini(&text);
	if (rc != 0)
		return rc;

	double mt = -1, mct = -1, top = 0;
	if ((rc = api_number(req, "max_tokens", 0, lim->max_seq, true, &mt, err)) != 0 ||
	    (rc = api_number(req, "max_completion_tokens", 0, lim->max_seq, true, &mct, err)) != 0)
		return rc;
	if (mt >= 0 && mct >= 0 && mt != mct)
		return API_BAD(err, "max_completion_tokens",
			       "'max_tokens' and 'max_completion_tokens' disagree");
	/* api_common reads max_tokens when given; else this is its default. */
	double max_tokens = mct >= 0 ? mct : lim->max_seq - r->n_prompt;
	if ((rc = api_common(req, lim, vocab, max_tokens, r, err)) != 0 ||
	    (rc = api_bool(req, "logprobs", &r->logprobs, err)) != 0 ||
	    (rc = api_number(req, "top_logprobs", 0, API_MAX_LOGPROBS, true, &top, err)) != 0)
		return rc;
	if (top > 0 && !r->logprobs)
		return API_BAD(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	r->n_logprobs = (int32_t)top;
	api_chat_stops(lim, vocab, r);
	return api_tool_force(req, r, err);
}

int api_chat_parse(const char *body, size_t len, const struct api_limits *lim,
		   const tok_vocab *vocab, struct api_request *out, struct api_error *err)
{
	memset(out, 0, sizeof *out);
	memset(err, 0, sizeof *err);
	char why[200];
	cJSON *req = api_json_parse(body, len, why, sizeof why);
	if (req == NULL)
		return API_BAD(err, NULL, "the request body is not valid JSON: %s", why);
	int rc = api_chat_fields(req, lim, vocab, out, err);
	cJSON_Delete(req);
	if (rc != 0)
		api_request_fini(out);
	return rc;
}

/* ------------------------------------------------------------------ both */

void api_request_fini(struct api_request *r)
{
	if (r == NULL)
		return;
	free(r->prompt);
	free(r->bias);
	free(r->grammar);
	for (int i = 0; i < r->n_stops; i++)
		free(r->stops[i]);
	for (int i = 0; i < r->n_tools; i++)
		free(r->tool_names[i]);
	free(r->tool_names);
	free(r->tool_choice_name);
	memset(r, 0, sizeof *r);
}

void api_error_fini(struct api_error *e)
{
	if (e == NULL)
		return;
	free(e->param);
	e->param = NULL;
}

size_t api_stop_cut(const struct api_request *r, const char *p, size_t len, bool final, bool *hit)
{
	size_t cut = len;
	*hit = false;
	for (int i = 0; i < r->n_stops && len > 0; i++) {
		const char *at = memmem(p, len, r->stops[i], strlen(r->stops[i]));
		if (at != NULL && (size_t)(at - p) < cut) {
			cut = (size_t)(at - p);
			*hit = true;
		}
	}
	if (*hit || final || r->max_stop <= 1)
		return cut;
	/* Hold back only what could really start a stop string: the longest tail (shorter than
	 * the longest stop) that is a prefix of one. */
	size_t keep = r->max_stop - 1;
	cut = len > keep ? len - keep : 0;
	for (; cut < len; cut++)
		for (int i = 0; i < r->n_stops; i++) {
			size_t n = len - cut;
			if (n <= strlen(r->stops[i]) && memcmp(p + cut, r->stops[i], n) == 0)
				return cut;
		}
	return cut;
}

/* api_request.c — parsing and validating a completion request. See api_request.h.
 *
 * The checks run in a fixed order (unknown fields, the prompt, the numbers, stream and
 * return_token_ids, echo, stop) so that a request with several mistakes always gets the same
 * answer: the first mistake in that order.
 */
#include "coordinator/api_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/err.h"

/* Fills err (the message formatted as the HTTP error reply formats it) and returns the code. */
static int api_refuse(struct api_error *err, int code, uint16_t status, const char *type,
		      const char *param, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static int api_refuse(struct api_error *err, int code, uint16_t status, const char *type,
		      const char *param, const char *fmt, ...)
{
	va_list ap;
	err->status = status;
	err->type = type;
	err->param = param != NULL ? strdup(param) : NULL;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	return code;
}

#define API_BAD(err, param, ...) \
	api_refuse((err), LM_EINVAL, 400, "invalid_request_error", (param), __VA_ARGS__)
#define API_NOMEM(err) api_refuse((err), LM_ENOMEM, 500, "server_error", NULL, "out of memory")

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

static const char *const api_known_keys[] = {
	"model",
	"prompt",
	"max_tokens",
	"temperature",
	"top_p",
	"top_k",
	"min_p",
	"seed",
	"stop",
	"stream",
	"logprobs",
	"return_token_ids",
	"n",
	"echo",
	"user",
	"presence_penalty",
	"frequency_penalty",
	"best_of",
	"logit_bias",
	"suffix",
	"stream_options",
	"speculate",
	NULL,
};

/* The prompt: a string, or an array of token ids. */
static int api_prompt(const cJSON *req, const struct api_limits *lim, const tok_vocab *vocab,
		      struct api_request *r, struct api_error *err)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
	lm_diag d = {{0}};
	if (cJSON_IsString(p)) {
		size_t n = 0;
		const char *text = p->valuestring;
		int rc = tok_encode_alloc(vocab, text, strlen(text), tok_add_bos(vocab), &r->prompt,
					  &n, &d);
		if (rc != 0)
			return API_BAD(err, "prompt", "%s", lm_diag_str(&d, rc));
		if (n > INT32_MAX)
			return API_BAD(err, "prompt",
				       "the prompt has %zu tokens; the context holds %d", n,
				       lim->max_seq);
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
	if (r->n_prompt == 0)
		return API_BAD(err, "prompt", "the prompt has no tokens");
	if (r->n_prompt >= lim->max_seq)
		return API_BAD(err, "prompt", "the prompt has %d tokens; the context holds %d",
			       r->n_prompt, lim->max_seq);
	return 0;
}

/* Strict UTF-8: no overlong forms, surrogates or values past U+10FFFF. */
static bool api_utf8_valid(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t b = s[i];
		size_t k = b < 0x80                 ? 1
			   : b >= 0xc2 && b <= 0xdf ? 2
			   : b >= 0xe0 && b <= 0xef ? 3
			   : b >= 0xf0 && b <= 0xf4 ? 4
						    : 0;
		if (k == 0 || n - i < k)
			return false;
		uint8_t lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
		uint8_t hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
		if (k > 1 && (s[i + 1] < lo || s[i + 1] > hi))
			return false;
		for (size_t j = 2; j < k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
		i += k;
	}
	return true;
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
			if (!api_utf8_valid((const uint8_t *)e->valuestring, len))
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

static int api_fields(const cJSON *req, const struct api_limits *lim, const tok_vocab *vocab,
		      struct api_request *r, struct api_error *err)
{
	int rc;
	if (!cJSON_IsObject(req))
		return API_BAD(err, NULL, "the request body must be a JSON object");
	for (const cJSON *k = req->child; k != NULL; k = k->next) {
		bool known = false;
		for (int i = 0; api_known_keys[i] != NULL && !known; i++)
			known = strcmp(k->string, api_known_keys[i]) == 0;
		if (!known)
			return API_BAD(err, k->string, "unknown field '%s'", k->string);
	}
	if ((rc = api_prompt(req, lim, vocab, r, err)) != 0)
		return rc;

	double max_tokens = 16, temp = 1, top_p = 1, top_k = 0, min_p = 0, seed = 0, lp = 0, n = 1;
	if ((rc = api_number(req, "max_tokens", 0, lim->max_seq, true, &max_tokens, err)) != 0 ||
	    (rc = api_number(req, "temperature", 0, 100, false, &temp, err)) != 0 ||
	    (rc = api_number(req, "top_p", 1e-9, 1, false, &top_p, err)) != 0 ||
	    (rc = api_number(req, "top_k", 0, 1e9, true, &top_k, err)) != 0 ||
	    (rc = api_number(req, "min_p", 0, 1, false, &min_p, err)) != 0 ||
	    (rc = api_number(req, "seed", 0, 9007199254740991.0, true, &seed, err)) != 0 ||
	    (rc = api_number(req, "logprobs", 0, API_MAX_LOGPROBS, true, &lp, err)) != 0 ||
	    (rc = api_number(req, "n", 1, 1, true, &n, err)) != 0)
		return rc;
	if (r->n_prompt + max_tokens > lim->max_seq)
		max_tokens = lim->max_seq - r->n_prompt; /* ends with finish_reason "length" */

	const cJSON *stream = cJSON_GetObjectItemCaseSensitive(req, "stream");
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(req, "return_token_ids");
	if ((stream && !cJSON_IsBool(stream) && !cJSON_IsNull(stream)) ||
	    (ids && !cJSON_IsBool(ids) && !cJSON_IsNull(ids)))
		return API_BAD(err, stream && !cJSON_IsBool(stream) ? "stream" : "return_token_ids",
			       "must be true or false");
	r->stream = cJSON_IsTrue(stream);
	r->want_ids = cJSON_IsTrue(ids);
	const cJSON *spec = cJSON_GetObjectItemCaseSensitive(req, "speculate");
	if (spec && !cJSON_IsBool(spec) && !cJSON_IsNull(spec))
		return API_BAD(err, "speculate", "must be true or false");
	r->no_speculate = cJSON_IsFalse(spec);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "echo")))
		return API_BAD(err, "echo", "echo is not supported");
	if ((rc = api_stops(req, r, err)) != 0)
		return rc;

	r->max_tokens = (int32_t)max_tokens;
	r->n_logprobs = (int32_t)lp;
	r->sampling = (struct lm_sampling){.temperature = (float)temp,
					   .top_k = (int32_t)top_k,
					   .top_p = (float)top_p,
					   .min_p = (float)min_p,
					   .seed = (uint64_t)seed};
	return 0;
}

int api_request_parse(const char *body, size_t len, const struct api_limits *lim,
		      const tok_vocab *vocab, struct api_request *out, struct api_error *err)
{
	memset(out, 0, sizeof *out);
	memset(err, 0, sizeof *err);
	cJSON *req = cJSON_ParseWithLength(body, len);
	if (req == NULL)
		return API_BAD(err, NULL, "the request body is not valid JSON");
	int rc = api_fields(req, lim, vocab, out, err);
	cJSON_Delete(req);
	if (rc != 0)
		api_request_fini(out);
	return rc;
}

void api_request_fini(struct api_request *r)
{
	if (r == NULL)
		return;
	free(r->prompt);
	for (int i = 0; i < r->n_stops; i++)
		free(r->stops[i]);
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

/* api_request.h — a /v1/completions request body, parsed and validated; and the stop-string
 * hold-back of the text going back to the client. Pure functions: no NNG, no scheduler, so the
 * unit tests and the fuzz target (tests/fuzz/fuzz_http.c) call them directly.
 *
 * The body is OpenAI's completions request:
 *     prompt            a string (tokenized here, with BOS when the vocabulary wants one) or a
 *                       non-empty array of token ids; 1 <= tokens < the context
 *     max_tokens        integer in [0, context], default 16; lowered so that prompt + max_tokens
 *                       fits the context (the answer then ends with finish_reason "length")
 *     temperature       [0, 100], default 1      top_p   [1e-9, 1], default 1
 *     top_k             integer [0, 1e9], 0 off  min_p   [0, 1], default 0
 *     seed              integer [0, 2^53 - 1]    logprobs  integer [0, API_MAX_LOGPROBS]
 *     n                 1 only                   echo      false only
 *     stop              a string or an array of up to API_MAX_STOPS non-empty strings of at
 *                       most API_MAX_STOP_LEN bytes, valid UTF-8
 *     stream, return_token_ids   true or false
 *     model, user, presence_penalty, frequency_penalty, best_of, logit_bias, suffix,
 *     stream_options    accepted and ignored
 * null is the same as an absent field; any other field is refused.
 */
#ifndef LM_API_REQUEST_H
#define LM_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model/sampling.h"
#include "common/tok/tokenizer.h"
#include "common/wire/wire.h"

#define API_MAX_STOPS    4
#define API_MAX_STOP_LEN 256
#define API_MAX_LOGPROBS WIRE_MAX_LOGPROBS

struct api_limits {
	int32_t max_seq; /* the context of one sequence: prompt plus generated tokens */
};

struct api_request {
	int32_t *prompt; /* [n_prompt] token ids, each < the vocabulary's size; owned */
	int32_t n_prompt;
	int32_t max_tokens; /* n_prompt + max_tokens <= max_seq */
	struct lm_sampling sampling;
	int32_t n_logprobs;         /* alternatives per token, 0..API_MAX_LOGPROBS */
	bool stream;                /* server-sent events */
	bool want_ids;              /* return_token_ids */
	bool no_speculate;          /* "speculate": false: no drafts for this request */
	char *stops[API_MAX_STOPS]; /* [n_stops] owned, non-empty, NUL-terminated */
	int n_stops;
	size_t max_stop; /* the longest stop string's length; 0 without stops */
};

/* Why a request was refused: what the HTTP reply says. */
struct api_error {
	uint16_t status;  /* 400 for the client's mistakes, 500 for ours (out of memory) */
	const char *type; /* "invalid_request_error" or "server_error" (static strings) */
	char *param;      /* the offending field, or NULL; owned */
	char message[512];
};

/* Parses body[0..len) (any bytes). Returns 0 and fills *out (the caller calls
 * api_request_fini), or a negative LM_E* code (LM_EINVAL for a bad request, LM_ENOMEM) with *out
 * zeroed and *err filled (the caller calls api_error_fini). */
int api_request_parse(const char *body, size_t len, const struct api_limits *lim,
		      const tok_vocab *vocab, struct api_request *out, struct api_error *err);
/* Frees what a parsed request owns and zeroes it; harmless on a zeroed request. */
void api_request_fini(struct api_request *r);
/* Frees the error's param; harmless on a zeroed error. */
void api_error_fini(struct api_error *e);

/* How much of the pending text p[0..len) (decoded, not yet sent) can go to the client.
 * When a stop string of r occurs in it, *hit is set and the result is where the earliest one
 * starts: the text before it goes out, the rest is dropped. Otherwise the result holds back the
 * longest tail that could still begin a stop string (nothing when `final`), so at most
 * r->max_stop - 1 bytes wait. Stop strings that are valid UTF-8 never cut valid UTF-8
 * text inside a character. */
size_t api_stop_cut(const struct api_request *r, const char *p, size_t len, bool final, bool *hit);

#endif

/* api_native.h — llama-server's native POST /completion, read as a /v1/completions body.
 *
 * The mesh answers llama-server's own endpoint by translating its body into the fields of
 * /v1/completions (api_request.h, which then validates it as usual) and shaping the answer as
 * llama-server does (api_call.c). The translation:
 *     prompt         a string or token ids as /v1/completions takes them, or llama-server's
 *                    JSON prompt {"prompt_string": ...}; one with "multimodal_data" is refused
 *                    (this mesh serves text models), and so is a batch of prompts (an array
 *                    of them: one completion per request)
 *     n_predict      max_tokens; -1, absent, or more than the context: the rest of the context
 *                    (llama-server's default)
 *     n_probs        logprobs: the answer's completion_probabilities, llama-server's shape
 *     return_tokens  the answer's "tokens" (the generated ids); a stream always carries them
 *     response_fields  the answer reduced to these fields ("a/b" reaches into objects, as
 *                    llama-server does)
 *     logit_bias     also llama-server's forms: [[token id or text, bias or false], ...] and
 *                    {"text": bias}; text biases each of its tokens, false is -100
 *     seed           -1 (llama-server's "random") is absent, and draw_seed set: a fresh one
 *                    even where [coordinator] seed is the default of requests without one
 *     n, n_cmpl, best_of   1 or absent, and dropped: one completion per request (the answer
 *                    has one choice's shape; /v1/completions takes n and best_of)
 *     temperature, top_k, top_p, min_p   absent: llama-server's defaults, 0.8, 40, 0.95, 0.05
 * Everything else passes to /v1/completions' parser unchanged (unknown fields are ignored
 * there and named in the X-Layermesh-Ignored-Fields header).
 */
#ifndef LM_API_NATIVE_H
#define LM_API_NATIVE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/api/api_request.h"

/* What the answer's shape needs from the native body. */
struct api_native {
	bool return_tokens;
	int32_t n_probs;        /* 0: no completion_probabilities */
	int32_t n_predict;      /* as asked; -1 for the rest of the context */
	cJSON *response_fields; /* an array of strings, or NULL; owned */
	bool draw_seed;         /* seed -1: a fresh seed, not the server's default */
};

/* Translates a /completion body (any bytes) for a context of max_seq positions and the
 * model's vocabulary (logit_bias' texts) into a
 * /v1/completions body: *out (malloc'd, NUL-terminated; the caller frees it) and *nat (the
 * caller calls api_native_fini). Returns 0, or LM_EINVAL / LM_ENOMEM with *err filled
 * (api_error_fini) and nothing to free. */
int api_native_body(const char *body, size_t len, int32_t max_seq, const tok_vocab *vocab,
		    char **out, struct api_native *nat, struct api_error *err);
void api_native_fini(struct api_native *nat);

/* The answer `full` reduced to `fields` (strings; "a/b" is full["a"]["b"], kept under the key
 * "a/b"; a field that is not there is left out), as llama-server's response_fields. Returns a
 * new object; `full` is left as it was. */
cJSON *api_native_fields(const cJSON *full, const cJSON *fields);

#endif

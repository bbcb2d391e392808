/* api_impl.h — what api.c (the server, its small endpoints) and api_call.c (generation calls)
 * share. Internal to the API. */
#ifndef LM_API_IMPL_H
#define LM_API_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/httpd.h"
#include "coordinator/api/api.h"
#include "coordinator/api/api_request.h"

#define API_MAX_BODY (4u << 20)

struct api {
	struct api_cfg cfg;
	struct lm_httpd httpd;
	struct api_limits lim;
	char bos_text[256], eos_text[256];
	char system_fingerprint[32]; /* "fp_" and the model's fingerprint */
	_Atomic uint64_t next_id;
};

/* POST /v1/completions and /v1/chat/completions: parse, submit, answer (api_call.c). */
void api_generate(nng_aio *aio, struct api *a, enum api_kind kind);
/* POST /completion, llama-server's own: its body translated (api_native.h), its answer in its
 * shape (api_call.c). */
void api_generate_native(nng_aio *aio, struct api *a);

/* A seed for a request that gave none: 53 random bits (JSON numbers hold them exactly). */
uint64_t api_random_seed(void);

/* Replies 401 and returns false unless the request carries the bearer token (when one is set).
 * Every endpoint but /health, /healthz and /readyz (which orchestrators probe without
 * credentials) needs it when mesh.toml sets one. Inline, so that api.c and api_call.c both use
 * it without calling into each other. */
static inline bool api_authorized(nng_aio *aio, const struct api *a)
{
	if (lm_httpd_authorized(aio, a->cfg.auth_token))
		return true;
	lm_httpd_refuse(aio, LM_HTTP_REFUSE_UNAUTHORIZED, 401, "authentication_error", NULL,
			"a bearer token is required (Authorization: Bearer ...)");
	return false;
}

#endif

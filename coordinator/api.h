/* api.h — the coordinator's HTTP API: OpenAI-compatible completions and the mesh's own
 * endpoints.
 *
 *   POST /v1/completions   {prompt, max_tokens, temperature, top_p, top_k, min_p, seed, stop,
 *                           stream, logprobs, return_token_ids}; prompt is a string or an
 *                           array of token ids. stream: server-sent events, then [DONE].
 *   GET  /v1/models        the one model this mesh serves
 *   GET  /healthz          200 while the coordinator runs
 *   GET  /readyz           200 when every worker is ready, else 503 and the reason
 *   GET  /v1/status        every worker's status and the fence (from the mesh)
 *   GET  /metrics          Prometheus text (from the mesh)
 *   POST /v1/admin/redeploy  start a rolling redeploy (see coordinator/rollout.h)
 *   GET  /v1/admin/redeploy  its progress
 *
 * Text exists only here: prompts are tokenized and tokens detokenized in the coordinator. Errors
 * are OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}.
 */
#ifndef LM_API_H
#define LM_API_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "common/wire/httpd.h"
#include "common/tok/tokenizer.h"
#include "coordinator/scheduler.h"

struct api;

struct api_cfg {
	const char *http;       /* host:port */
	const char *model_name; /* shown as "model" */
	const char *auth_token; /* admin endpoints need it when set */
	int32_t max_seq;        /* context length */
	const tok_vocab *vocab; /* borrowed */
	struct sched *sched;    /* borrowed */
	/* Mesh-level endpoints, provided by the mesh (may be NULL). They run on HTTP threads. */
	void *mesh;
	bool (*ready)(void *mesh, char *why, size_t cap);
	cJSON *(*status)(void *mesh);
	char *(*metrics)(void *mesh);
	/* POST /v1/admin/redeploy and GET /v1/admin/redeploy (bearer token when configured). */
	cJSON *(*redeploy)(void *mesh, const char *body, size_t len, int *status);
	cJSON *(*rollout)(void *mesh);
};

int api_start(struct api **out, const struct api_cfg *cfg, lm_diag *d);
/* Stops the HTTP server: no handler runs once it returns. A plain request's handler waits for
 * its call, so the scheduler must still be running (and failing what it holds) meanwhile.
 * Calls still live keep using `a` until their on_done: free it only after sched_stop. */
void api_stop(struct api *a);
/* Stops serving if still serving and frees. NULL is harmless. */
void api_free(struct api *a);

#endif

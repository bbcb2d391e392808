/* api.h — the coordinator's HTTP API: OpenAI-compatible completions and chat, and the mesh's own
 * endpoints.
 *
 *   POST /v1/completions        completions (coordinator/api/api_request.h has every field); stream:
 *                               server-sent events, then [DONE]
 *   POST /v1/chat/completions   chat, rendered by the model's chat template
 *                               (coordinator/api/chat_template.h); responses and chunks in OpenAI's
 *                               shapes (chat.completion, chat.completion.chunk with delta.role,
 *                               then delta.content, finish_reason, and with
 *                               stream_options.include_usage a last chunk of usage)
 *   GET  /v1/models             the one model this mesh serves, with its chat template format
 *   GET  /v1/models/{id}        that model, or 404
 *   POST /tokenize              {content, add_special, parse_special, with_pieces} ->
 *                               {tokens}, as llama-server's
 *   POST /detokenize            {tokens} -> {content}, as llama-server's
 *   GET  /health                {"status": "ok"} when every worker is ready, else 503
 *   GET  /healthz               200 while the coordinator runs
 *   GET  /readyz                200 when every worker is ready, else 503 and the reason
 *   GET  /v1/status             every worker's status and the fence (from the mesh)
 *   GET  /metrics               Prometheus text (from the mesh, and the API's own: responses
 *                               by status, refusals by reason, connections, the queue)
 *   POST /v1/admin/redeploy     start a rolling redeploy (see coordinator/supervise/rollout.h)
 *   GET  /v1/admin/redeploy     its progress
 *   GET  /, /chat, /ui/...      the pages for people, unless [coordinator] ui = false
 *                               (coordinator/api/api_pages.h)
 *
 * Text exists only here: prompts are tokenized and tokens detokenized in the coordinator. Errors
 * are OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}, for every status,
 * the HTTP server's own included (common/wire/httpd.h). Generation requests:
 *   - no seed: [coordinator] seed, or without it a fresh random one per request, reported as
 *     "seed" in the response (and in each chunk), so that any run can be repeated;
 *     system_fingerprint names the model (fp_ and its fingerprint);
 *   - a client that goes away, streaming or not, has its sequence cancelled;
 *   - a full queue ([coordinator] max_queued) is 429 with Retry-After, a mesh not ready 503.
 */
#ifndef LM_API_H
#define LM_API_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "common/wire/httpd.h"
#include "common/tok/tokenizer.h"
#include "coordinator/api/chat_template.h"
#include "coordinator/api/jinja.h"
#include "coordinator/api/tool_call.h"
#include "coordinator/sched/scheduler.h"

struct api;

struct api_cfg {
	const char *http;       /* host:port */
	const char *model_name; /* shown as "model" */
	const char *model_path; /* the GGUF file, shown by /props */
	int32_t slots;          /* sequences served at once, shown by /props */
	const char *auth_token; /* admin endpoints need it when set */
	uint64_t fingerprint;   /* the model's, for system_fingerprint */
	int32_t max_seq;        /* context length */
	int32_t max_queued;     /* shown on /metrics */
	int64_t seed;           /* of a request without one ([coordinator] seed); -1: drawn */
	const tok_vocab *vocab; /* borrowed */
	struct sched *sched;    /* borrowed */
	/* The model's chat template for the Jinja engine (borrowed; NULL: none), and the chat format
	 * (api_request.h's api_limits: with neither, chat requests are refused with chat_why). */
	const jinja_tmpl *jinja;
	enum chat_format chat;
	const char *chat_why;
	struct tool_syntax tools; /* the template's tool-call syntax (tool_call.h) */
	bool ui;                  /* serve the pages for people, / and /chat (api_pages.h) */
	/* The HTTP server's limits and CORS origins (httpd.h); copied. */
	struct lm_httpd_limits http_limits;
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

/* api.c — the coordinator's HTTP API: the server, its routes and the small endpoints. See api.h;
 * generation requests are api_call.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/base/metrics.h"
#include "common/base/utf8.h"
#include "coordinator/api/api_impl.h"
#include "coordinator/api/api_json.h"
#include "coordinator/api/api_pages.h"

static void api_completions(nng_aio *aio)
{
	api_generate(aio, lm_httpd_data(aio), API_COMPLETION);
}

static void api_completion_native(nng_aio *aio)
{
	api_generate_native(aio, lm_httpd_data(aio));
}

static void api_chat(nng_aio *aio)
{
	api_generate(aio, lm_httpd_data(aio), API_CHAT);
}

/* ------------------------------------------------------------------ models */

/* The note a chat format comes with when no template of the model's renders it (the ChatML
 * fallback of a model without one), or NULL. */
static const char *api_chat_warning(const struct api *a)
{
	return a->cfg.jinja == NULL && a->cfg.chat != CHAT_NONE && a->cfg.chat_why != NULL &&
			       a->cfg.chat_why[0] != '\0'
		       ? a->cfg.chat_why
		       : NULL;
}

static cJSON *api_model(const struct api *a)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", a->cfg.model_name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", 0);
	cJSON_AddStringToObject(m, "owned_by", "layermesh");
	cJSON_AddNumberToObject(m, "context_length", a->cfg.max_seq);
	/* A template of no known family is still the model's own, rendered by the engine. */
	if (a->cfg.chat != CHAT_NONE || a->cfg.jinja != NULL) {
		bool fam = a->cfg.chat != CHAT_NONE;
		cJSON_AddStringToObject(m, "chat_template",
					fam ? chat_format_name(a->cfg.chat) : "jinja");
		cJSON_AddStringToObject(m, "chat_template_family",
					fam ? chat_format_family(a->cfg.chat) : "jinja");
		cJSON_AddStringToObject(m, "chat_template_renderer",
					a->cfg.jinja != NULL ? "jinja" : "format");
		if (api_chat_warning(a) != NULL)
			cJSON_AddStringToObject(m, "chat_template_warning", api_chat_warning(a));
	} else {
		cJSON_AddNullToObject(m, "chat_template");
		cJSON_AddNullToObject(m, "chat_template_family");
	}
	return m;
}

static void api_models(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), api_model(a));
	lm_httpd_reply_json(aio, 200, o);
}

/* GET /v1/models/{id}: the id percent-decoded (the SDK escapes a '/' in it). */
static void api_model_one(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	const char *id = lm_httpd_subpath(aio);
	if (id == NULL || strcmp(id, a->cfg.model_name) != 0) {
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_NOT_FOUND, 404, "invalid_request_error",
				"model",
				"the model '%.200s' does not exist (this mesh serves '%s')",
				id != NULL ? id : "", a->cfg.model_name);
		return;
	}
	lm_httpd_reply_json(aio, 200, api_model(a));
}

/* ------------------------------------------------------------------ tokenize, detokenize */

/* A token's text as llama-server's token_to_piece(special = true) gives it: control and
 * unknown tokens as their vocabulary text, the rest as their decoded bytes. */
static const char *api_piece(const struct api *a, int32_t id, size_t *len)
{
	if (tok_attr(a->cfg.vocab, id) & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN | TOK_ATTR_UNUSED))
		return tok_text(a->cfg.vocab, id, len);
	return tok_piece(a->cfg.vocab, id, len);
}

/* Reads an optional boolean field of a tokenize body. */
static bool api_flag(const cJSON *o, const char *key, bool dflt, bool *ok)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (v == NULL || cJSON_IsNull(v))
		return dflt;
	*ok &= cJSON_IsBool(v);
	return cJSON_IsTrue(v);
}

/* An authorized request's body parsed as JSON into *req (NULL when it is not JSON: why says
 * why); false when the request was refused as unauthorized (answered already). */
static bool api_body_json(nng_aio *aio, struct api *a, cJSON **req, char *why, size_t cap)
{
	if (!api_authorized(aio, a))
		return false;
	const char *body;
	size_t len;
	lm_httpd_body(aio, &body, &len);
	*req = api_json_parse(body, len, why, cap);
	return true;
}

/* POST /tokenize {content, add_special (false), parse_special (true), with_pieces (false)}. */
static void api_tokenize(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	char why[200];
	cJSON *req;
	if (!api_body_json(aio, a, &req, why, sizeof why))
		return;
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(req, "content");
	bool ok = cJSON_IsString(content);
	bool add = api_flag(req, "add_special", false, &ok);
	bool special = api_flag(req, "parse_special", true, &ok);
	bool pieces = api_flag(req, "with_pieces", false, &ok);
	if (req == NULL || !ok) {
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INVALID, 400, "invalid_request_error", NULL,
				"%s%s", req == NULL ? "the request body is not valid JSON: " : "",
				req == NULL
					? why
					: "the body must be {\"content\": string, \"add_special\", "
					  "\"parse_special\", \"with_pieces\": booleans}");
		cJSON_Delete(req);
		return;
	}
	unsigned flags = (add && tok_add_bos(a->cfg.vocab) ? TOK_ENC_ADD_BOS : 0) |
			 (special ? TOK_ENC_PARSE_SPECIAL : 0);
	int32_t *ids = NULL;
	size_t n = 0;
	lm_diag d = {{0}};
	int rc = tok_encode_alloc_ex(a->cfg.vocab, content->valuestring, api_json_len(content),
				     flags, &ids, &n, &d);
	cJSON_Delete(req);
	if (rc != 0) {
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INVALID, 400, "invalid_request_error",
				"content", "%s", lm_diag_str(&d, rc));
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
	for (size_t i = 0; i < n; i++) {
		if (!pieces) {
			cJSON_AddItemToArray(toks, cJSON_CreateNumber(ids[i]));
			continue;
		}
		size_t pl = 0;
		const char *p = api_piece(a, ids[i], &pl);
		cJSON *t = cJSON_CreateObject();
		cJSON_AddNumberToObject(t, "id", ids[i]);
		if (p != NULL && lm_utf8_valid(p, pl) && memchr(p, '\0', pl) == NULL) {
			char *s = strndup(p, pl);
			cJSON_AddStringToObject(t, "piece", s != NULL ? s : "");
			free(s);
		} else {
			cJSON *bytes = cJSON_AddArrayToObject(t, "piece");
			for (size_t k = 0; p != NULL && k < pl; k++)
				cJSON_AddItemToArray(bytes, cJSON_CreateNumber((uint8_t)p[k]));
		}
		cJSON_AddItemToArray(toks, t);
	}
	free(ids);
	lm_httpd_reply_json(aio, 200, o);
}

/* POST /detokenize {tokens}: the pieces joined; bytes that do not make UTF-8 become U+FFFD. */
static void api_detokenize(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	char why[200];
	cJSON *req;
	if (!api_body_json(aio, a, &req, why, sizeof why))
		return;
	const cJSON *toks = cJSON_GetObjectItemCaseSensitive(req, "tokens");
	struct lm_buf raw = {0};
	bool ok = cJSON_IsArray(toks);
	for (const cJSON *e = ok ? toks->child : NULL; e != NULL && ok; e = e->next) {
		ok = cJSON_IsNumber(e) && e->valuedouble >= 0 &&
		     e->valuedouble < tok_n_vocab(a->cfg.vocab) &&
		     e->valuedouble == (double)(int32_t)e->valuedouble;
		size_t pl = 0;
		const char *p = ok ? api_piece(a, (int32_t)e->valuedouble, &pl) : NULL;
		if (p != NULL)
			lm_buf_add(&raw, p, pl);
	}
	cJSON_Delete(req);
	if (!ok) {
		lm_buf_fini(&raw);
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INVALID, 400, "invalid_request_error", "tokens",
				"the body must be {\"tokens\": [token ids of this model]}");
		return;
	}
	struct lm_buf text = {0};
	for (size_t i = 0; i < raw.len;) {
		size_t k = 1;
		while (k < 4 && i + k < raw.len && ((uint8_t)raw.p[i + k] >> 6) == 2)
			k++;
		while (k > 1 && !lm_utf8_valid(raw.p + i, k))
			k--;
		/* (A NUL byte cannot travel in the JSON string cJSON writes.) */
		if (lm_utf8_valid(raw.p + i, k) && raw.p[i] != '\0')
			lm_buf_add(&text, raw.p + i, k);
		else
			lm_buf_adds(&text, "\xef\xbf\xbd");
		i += k;
	}
	lm_buf_fini(&raw);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "content", text.p != NULL ? text.p : "");
	lm_buf_fini(&text);
	lm_httpd_reply_json(aio, 200, o);
}

/* ------------------------------------------------------------------ llama-server's extras */

/* GET /props, llama-server's: the model, the slots and the context each has, the defaults a
 * /completion request runs with (api_native.h), the chat template's name. The seed is
 * [coordinator] seed; without one a request without a seed draws its own, and the seed shown
 * is llama-server's mark for that, 4294967295. */
static void api_props(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	cJSON *o = cJSON_CreateObject();
	cJSON *g = cJSON_AddObjectToObject(o, "default_generation_settings");
	cJSON_AddNumberToObject(g, "id", 0);
	cJSON_AddNumberToObject(g, "n_ctx", a->cfg.max_seq);
	cJSON_AddBoolToObject(g, "is_processing", false);
	cJSON *p = cJSON_AddObjectToObject(g, "params");
	cJSON_AddNumberToObject(p, "n_predict", -1);
	cJSON_AddNumberToObject(p, "seed", a->cfg.seed >= 0 ? (double)a->cfg.seed : 4294967295.0);
	cJSON_AddNumberToObject(p, "temperature", 0.8);
	cJSON_AddNumberToObject(p, "top_k", 40);
	cJSON_AddNumberToObject(p, "top_p", 0.95);
	cJSON_AddNumberToObject(p, "min_p", 0.05);
	cJSON_AddNumberToObject(p, "repeat_last_n", 64);
	cJSON_AddNumberToObject(p, "repeat_penalty", 1);
	cJSON_AddNumberToObject(o, "total_slots", a->cfg.slots);
	cJSON_AddStringToObject(o, "model_path", a->cfg.model_path ? a->cfg.model_path : "");
	cJSON_AddStringToObject(o, "model_alias", a->cfg.model_name);
	bool fam = a->cfg.chat != CHAT_NONE;
	if (fam || a->cfg.jinja != NULL)
		cJSON_AddStringToObject(o, "chat_template",
					fam ? chat_format_name(a->cfg.chat) : "jinja");
	else
		cJSON_AddNullToObject(o, "chat_template");
	cJSON *m = cJSON_AddObjectToObject(o, "modalities");
	cJSON_AddBoolToObject(m, "vision", false);
	cJSON_AddBoolToObject(m, "audio", false);
	cJSON_AddStringToObject(o, "bos_token", a->bos_text);
	cJSON_AddStringToObject(o, "eos_token", a->eos_text);
	cJSON_AddBoolToObject(o, "webui", a->cfg.ui);
	lm_httpd_reply_json(aio, 200, o);
}

/* POST /apply-template {messages, chat_template_kwargs}: the prompt the chat API would
 * generate from, {"prompt": text}, as llama-server answers it. */
static void api_apply_template(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	char why[200];
	cJSON *req;
	if (!api_body_json(aio, a, &req, why, sizeof why))
		return;
	if (!cJSON_IsObject(req)) {
		cJSON_Delete(req);
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INVALID, 400, "invalid_request_error", NULL,
				"%s%s", req == NULL ? "the request body is not valid JSON: " : "",
				req == NULL ? why : "the body must be a JSON object");
		return;
	}
	struct lm_buf text = {0};
	struct api_error err = {0};
	int rc = api_chat_prompt(req, &a->lim, true, &text, &err);
	cJSON_Delete(req);
	if (rc != 0) {
		lm_buf_fini(&text);
		lm_httpd_refuse(aio, err.reason, err.status, err.type, err.param, "%s",
				err.message);
		api_error_fini(&err);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	/* (The JSON string cJSON writes stops at a NUL: U+0000 in a message cannot travel.) */
	char *s = strndup(text.p != NULL ? text.p : "", text.len);
	cJSON_AddStringToObject(o, "prompt", s != NULL ? s : "");
	free(s);
	lm_buf_fini(&text);
	lm_httpd_reply_json(aio, 200, o);
}

/* POST /v1/chat/completions/input_tokens (and without /v1), llama-server's: a chat request's
 * prompt tokens, {"input_tokens": n}, counted as the chat endpoint renders and tokenizes it;
 * nothing is generated. A request the chat endpoint refuses is refused alike. */
static void api_chat_tokens(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	const char *body;
	size_t len;
	lm_httpd_body(aio, &body, &len);
	struct api_request req;
	struct api_error err;
	if (api_chat_parse(body, len, &a->lim, a->cfg.vocab, &req, &err) != 0) {
		lm_httpd_refuse(aio, err.reason, err.status, err.type, err.param, "%s",
				err.message);
		api_error_fini(&err);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "input_tokens", req.n_prompt);
	api_request_fini(&req);
	lm_httpd_reply_json(aio, 200, o);
}

/* ------------------------------------------------------------------ health and status */

static void api_healthz(nng_aio *aio)
{
	lm_httpd_reply(aio, 200, "text/plain", "ok\n", 3);
}

/* llama-server's /health: {"status": "ok"}, or 503 with the reason. */
static void api_health(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	char why[512] = "no mesh";
	if (a->cfg.ready != NULL && a->cfg.ready(a->cfg.mesh, why, sizeof why)) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "status", "ok");
		lm_httpd_reply_json(aio, 200, o);
		return;
	}
	lm_httpd_refuse(aio, LM_HTTP_REFUSE_UNAVAILABLE, 503, "server_error", NULL, "not ready: %s",
			why);
}

static void api_readyz(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	char why[512] = "no mesh", body[600];
	if (a->cfg.ready != NULL && (why[0] = '\0', a->cfg.ready(a->cfg.mesh, why, sizeof why))) {
		/* Ready, perhaps with a note the operator should see (no TLS beyond this host). */
		int n = why[0] ? snprintf(body, sizeof body, "ready (%s)\n", why)
			       : snprintf(body, sizeof body, "ready\n");
		lm_httpd_reply(aio, 200, "text/plain", body, (size_t)n);
		return;
	}
	int n = snprintf(body, sizeof body, "not ready: %s\n", why);
	lm_httpd_reply(aio, 503, "text/plain", body, (size_t)n < sizeof body ? (size_t)n : 0);
}

/* GET /slots: every KV slot, as llama-server's /slots shows them (the fields it shares with
 * it, and the prefix cache's): busy or idle, the sequence in it (id_task), the context, the
 * positions held (n_past) and the prompt rows not computed (n_cached). */
static void api_slots(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	struct sched_slot_view v[256];
	int32_t n = sched_slots(a->cfg.sched, v, 256);
	cJSON *o = cJSON_CreateArray();
	for (int32_t i = 0; i < n; i++) {
		cJSON *e = cJSON_CreateObject();
		cJSON_AddNumberToObject(e, "id", i);
		cJSON_AddNumberToObject(e, "id_task", v[i].busy ? (double)v[i].seq_id : -1);
		cJSON_AddNumberToObject(e, "n_ctx", a->cfg.max_seq);
		cJSON_AddBoolToObject(e, "is_processing", v[i].busy);
		cJSON_AddStringToObject(e, "state", v[i].busy ? "processing" : "idle");
		cJSON_AddBoolToObject(e, "reserved", v[i].reserved);
		cJSON_AddNumberToObject(e, "n_past", v[i].n_past);
		cJSON_AddNumberToObject(e, "n_cached", v[i].n_cached);
		cJSON_AddNumberToObject(e, "n_prompt_tokens", v[i].n_prompt);
		cJSON *next = cJSON_AddObjectToObject(e, "next_token");
		cJSON_AddBoolToObject(next, "has_next_token", v[i].busy);
		cJSON_AddNumberToObject(next, "n_decoded", v[i].n_gen);
		cJSON_AddItemToArray(o, e);
	}
	lm_httpd_reply_json(aio, 200, o);
}

static void api_status(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	cJSON *o = a->cfg.status ? a->cfg.status(a->cfg.mesh) : NULL;
	if (o != NULL) {
		cJSON *t = cJSON_AddObjectToObject(o, "chat_template");
		if (a->cfg.chat != CHAT_NONE || a->cfg.jinja != NULL) {
			bool fam = a->cfg.chat != CHAT_NONE;
			cJSON_AddStringToObject(t, "format",
						fam ? chat_format_name(a->cfg.chat) : "jinja");
			cJSON_AddStringToObject(t, "family",
						fam ? chat_format_family(a->cfg.chat) : "jinja");
			cJSON_AddStringToObject(t, "renderer",
						a->cfg.jinja != NULL ? "jinja" : "format");
			if (api_chat_warning(a) != NULL)
				cJSON_AddStringToObject(t, "warning", api_chat_warning(a));
		} else {
			cJSON_AddNullToObject(t, "format");
			cJSON_AddStringToObject(t, "why", a->cfg.chat_why ? a->cfg.chat_why : "");
		}
	}
	lm_httpd_reply_json(aio, 200, o);
}

/* The API's own part of /metrics: responses by status, refusals by reason, connections and
 * the queue. */
static void api_metrics_text(struct api *a, struct lm_mtext *t)
{
	const struct lm_httpd_stats *st = lm_httpd_stats(&a->httpd);
	char label[64];
	lm_mtext_family(t, "layermesh_http_responses_total", "counter",
			"HTTP responses sent, by status code (other: any code not listed).");
	for (int i = 0; i < LM_HTTPD_N_CODES; i++) {
		uint16_t code = lm_httpd_code_at(i);
		char v[8];
		snprintf(v, sizeof v, "%u", code);
		lm_mtext_label(label, sizeof label, "code", code != 0 ? v : "other");
		lm_mtext_sample(t, "layermesh_http_responses_total", label,
				(double)atomic_load(&st->responses[i]));
	}
	lm_mtext_family(t, "layermesh_http_refused_total", "counter",
			"Requests and connections refused, by reason.");
	for (int r = 0; r < LM_HTTP_REFUSE_COUNT; r++) {
		lm_mtext_label(label, sizeof label, "reason", lm_http_refusal_name(r));
		lm_mtext_sample(t, "layermesh_http_refused_total", label,
				(double)atomic_load(&st->refused[r]));
	}
	lm_mtext_gauge(t, "layermesh_http_connections", "HTTP connections open.",
		       (double)atomic_load(&st->connections));
	lm_mtext_counter(t, "layermesh_http_connections_total", "HTTP connections accepted.",
			 atomic_load(&st->connections_total));
	lm_mtext_gauge(t, "layermesh_queue_limit",
		       "Requests that may wait for a slot ([coordinator] max_queued; 0: no limit).",
		       a->cfg.max_queued);
	if (a->cfg.sched != NULL) {
		struct lm_hist_snap s;
		lm_hist_snapshot(&sched_stats(a->cfg.sched)->queue_wait, &s);
		lm_mtext_family(t, "layermesh_queue_wait_seconds", "histogram",
				"From a request's arrival to its taking a KV slot.");
		lm_mtext_hist(t, "layermesh_queue_wait_seconds", NULL, &s);
	}
}

static void api_metrics(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	char *s = a->cfg.metrics ? a->cfg.metrics(a->cfg.mesh) : NULL;
	if (s == NULL) {
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INTERNAL, 500, "server_error", NULL,
				"metrics unavailable");
		return;
	}
	struct lm_mtext t = {0};
	lm_buf_adds(&t.b, s);
	free(s);
	api_metrics_text(a, &t);
	s = lm_mtext_take(&t);
	if (s == NULL) {
		lm_httpd_reply_json(aio, 500, NULL);
		return;
	}
	lm_httpd_reply(aio, 200, "text/plain; version=0.0.4", s, strlen(s));
	free(s);
}

static void api_redeploy(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	if (strcmp(lm_httpd_method(aio), "POST") != 0) {
		cJSON *o = a->cfg.rollout ? a->cfg.rollout(a->cfg.mesh) : NULL;
		if (o == NULL)
			lm_httpd_reply_error(aio, 404, "invalid_request_error", NULL,
					     "no redeploy has run");
		else
			lm_httpd_reply_json(aio, 200, o);
		return;
	}
	if (a->cfg.redeploy == NULL) {
		lm_httpd_reply_error(aio, 503, "server_error", NULL, "redeploys are not available");
		return;
	}
	const char *body;
	size_t len;
	lm_httpd_body(aio, &body, &len);
	int status = 500;
	cJSON *o = a->cfg.redeploy(a->cfg.mesh, body, len, &status);
	lm_httpd_reply_json(aio, (uint16_t)status, o);
}

/* ------------------------------------------------------------------ the server */

/* The limits request parsing needs from the vocabulary: BOS and EOS texts for templates, and
 * the most bytes one token covers (the longest piece or special-token text), for refusing an
 * overlong prompt before tokenizing it. */
static void api_vocab_limits(struct api *a)
{
	const tok_vocab *v = a->cfg.vocab;
	size_t n = 0, longest = tok_max_piece(v);
	for (int32_t id = 0; id < tok_n_vocab(v); id++) {
		size_t len = 0;
		if (tok_text(v, id, &len) != NULL && len > longest)
			longest = len;
	}
	const char *s = tok_bos(v) >= 0 ? tok_text(v, tok_bos(v), &n) : NULL;
	snprintf(a->bos_text, sizeof a->bos_text, "%s", s != NULL ? s : "");
	s = tok_eos(v) >= 0 ? tok_text(v, tok_eos(v), &n) : NULL;
	snprintf(a->eos_text, sizeof a->eos_text, "%s", s != NULL ? s : "");
	a->lim = (struct api_limits){.max_seq = a->cfg.max_seq,
				     .max_token_bytes = longest > 4 ? longest : 4,
				     .jinja = a->cfg.jinja,
				     .chat = a->cfg.chat,
				     .chat_why = a->cfg.chat_why,
				     .bos_text = a->bos_text,
				     .eos_text = a->eos_text,
				     .tools = a->cfg.tools};
}

static int api_routes(struct api *a, lm_diag *d)
{
	const struct lm_httpd_route routes[] = {
		{"POST", "/v1/completions", api_completions, a, API_MAX_BODY, true},
		{"POST", "/v1/chat/completions", api_chat, a, API_MAX_BODY, true},
		{"GET", "/v1/models", api_models, a, 0, false},
		{"GET", "/v1/models/", api_model_one, a, 0, false},
		{"POST", "/completion", api_completion_native, a, API_MAX_BODY, true},
		{"GET", "/props", api_props, a, 0, false},
		{"POST", "/apply-template", api_apply_template, a, API_MAX_BODY, true},
		{"POST", "/v1/chat/completions/input_tokens", api_chat_tokens, a, API_MAX_BODY,
		 true},
		{"POST", "/chat/completions/input_tokens", api_chat_tokens, a, API_MAX_BODY, true},
		{"POST", "/tokenize", api_tokenize, a, API_MAX_BODY, true},
		{"POST", "/detokenize", api_detokenize, a, API_MAX_BODY, true},
		{"GET", "/health", api_health, a, 0, false},
		{"GET", "/v1/health", api_health, a, 0, false},
		{"GET", "/healthz", api_healthz, a, 0, false},
		{"GET", "/readyz", api_readyz, a, 0, false},
		{"GET", "/v1/status", api_status, a, 0, false},
		{"GET", "/slots", api_slots, a, 0, false},
		/* Without /v1, as many clients send them (llama-server answers both). */
		{"POST", "/completions", api_completions, a, API_MAX_BODY, true},
		{"POST", "/chat/completions", api_chat, a, API_MAX_BODY, true},
		{"GET", "/models", api_models, a, 0, false},
		{"GET", "/models/", api_model_one, a, 0, false},
		{"GET", "/metrics", api_metrics, a, 0, false},
		{"POST", "/v1/admin/redeploy", api_redeploy, a, 65536, true},
		{"GET", "/v1/admin/redeploy", api_redeploy, a, 0, false},
	};
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
		int rc = lm_httpd_add(&a->httpd, &routes[i], d);
		if (rc != 0)
			return rc;
	}
	return a->cfg.ui ? api_pages_add(&a->httpd, d) : 0;
}

/* The HTTP server, with the pages' own origins allowed besides cors_origins when they are
 * served (api_pages.h). */
static int api_http_init(struct api *a, lm_diag *d)
{
	struct lm_httpd_limits lim = a->cfg.http_limits;
	char own[API_PAGES_MAX_ORIGINS][API_PAGES_ORIGIN_CAP];
	int n_own = a->cfg.ui ? api_pages_origins(a->cfg.http, own) : 0;
	if (n_own == 0)
		return lm_httpd_init_limits(&a->httpd, a->cfg.http, &lim, d);
	int32_t n = lim.cors_origins != NULL && lim.n_cors > 0 ? lim.n_cors : 0;
	const char **all = calloc((size_t)n + API_PAGES_MAX_ORIGINS, sizeof *all);
	if (all == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	for (int32_t i = 0; i < n; i++)
		all[i] = lim.cors_origins[i];
	for (int i = 0; i < n_own; i++)
		all[n + i] = own[i];
	lim.cors_origins = all;
	lim.n_cors = n + n_own;
	int rc = lm_httpd_init_limits(&a->httpd, a->cfg.http, &lim, d); /* it copies them */
	free(all);
	return rc;
}

int api_start(struct api **out, const struct api_cfg *cfg, lm_diag *d)
{
	struct api *a = calloc(1, sizeof *a);
	int rc;
	*out = NULL;
	if (a == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	a->cfg = *cfg;
	snprintf(a->system_fingerprint, sizeof a->system_fingerprint, "fp_%016" PRIx64,
		 cfg->fingerprint);
	api_vocab_limits(a);
	if ((rc = api_http_init(a, d)) != 0 || (rc = api_routes(a, d)) != 0 ||
	    (rc = lm_httpd_start(&a->httpd, d)) != 0) {
		api_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

void api_stop(struct api *a)
{
	if (a != NULL)
		lm_httpd_fini(&a->httpd); /* harmless twice: it zeroes what it stopped */
}

void api_free(struct api *a)
{
	api_stop(a);
	free(a);
}

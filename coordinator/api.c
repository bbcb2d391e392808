/* api.c — the coordinator's HTTP API. See api.h.
 *
 * A completion is a `struct api_call`. The HTTP handler parses the request (api_request.h:
 * validation and tokenization) and submits it to the scheduler; from then on the scheduler
 * thread drives the call through on_token/on_done, which detokenize (holding back text that
 * could still become a stop string) and either accumulate the answer (plain requests, finished
 * in on_done) or queue server-sent events on the hijacked connection (streams). A stream's writer runs on NNG's
 * threads; the call is freed when both the scheduler and the writer are done with it.
 */
#include "coordinator/api.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/log.h"
#include "coordinator/api_request.h"
#include "common/base/buf.h"
#include "common/base/clock.h"

#define API_MAX_BODY (4u << 20)

struct api {
	struct api_cfg cfg;
	struct lm_httpd httpd;
	_Atomic uint64_t next_id;
};

struct api_call {
	struct api *api;
	char id[48];
	long created;
	uint64_t seq_id;
	struct api_request req; /* the parsed request: prompt, sampling, stops, options */
	/* Generation state: the scheduler thread's alone once submitted. */
	struct tok_stream ts;
	char *piece;           /* [tok_stream_cap(vocab)] one token's decoded text */
	struct lm_buf text;    /* everything emitted (plain requests) */
	struct lm_buf pending; /* detokenized text held back for stop-string matching */
	bool stop_hit;
	int32_t *gen, n_gen, cap_gen;
	cJSON *lp_tokens, *lp_values, *lp_top, *lp_offsets; /* plain requests with logprobs */
	size_t text_offset;
	uint64_t t_submit, t_first, t_done; /* lm_now_ns */
	/* Plain requests: the handler's aio, finished in on_done. */
	nng_aio *aio;
	/* Streams, under mu: queued bytes, the write in flight, and who still holds the call. */
	pthread_mutex_t mu;
	nng_http_conn *conn;
	nng_aio *wr;
	struct lm_buf out, writing;
	bool write_busy, write_failed, sched_done, writer_released;
	int refs;
};

/* ------------------------------------------------------------------ utilities */

static double api_ms(uint64_t a_ns, uint64_t b_ns)
{
	return (double)(b_ns - a_ns) / 1e6;
}

static void api_call_free(struct api_call *c)
{
	api_request_fini(&c->req);
	free(c->piece);
	lm_buf_fini(&c->text);
	lm_buf_fini(&c->pending);
	lm_buf_fini(&c->out);
	lm_buf_fini(&c->writing);
	free(c->gen);
	cJSON_Delete(c->lp_tokens);
	cJSON_Delete(c->lp_values);
	cJSON_Delete(c->lp_top);
	cJSON_Delete(c->lp_offsets);
	/* The last reference may be dropped inside the write aio's own callback, where
	 * nng_aio_free would wait for itself: reap it in the background instead. */
	if (c->wr != NULL)
		nng_aio_reap(c->wr);
	if (c->conn != NULL)
		nng_http_conn_close(c->conn);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* Drops one reference (stream calls have two: the scheduler's and the writer's). */
static void api_call_unref(struct api_call *c)
{
	pthread_mutex_lock(&c->mu);
	int left = --c->refs;
	pthread_mutex_unlock(&c->mu);
	if (left == 0)
		api_call_free(c);
}

/* A token's text as JSON wants it: valid UTF-8 as is, else "bytes:\xNN..." as OpenAI does. */
static cJSON *api_token_string(const struct api *a, int32_t token)
{
	size_t len = 0;
	const char *p = tok_piece(a->cfg.vocab, token, &len);
	char buf[512];
	bool valid = p != NULL;
	for (size_t i = 0; valid && i < len;) {
		uint8_t c = (uint8_t)p[i];
		size_t n = c < 0x80         ? 1
			   : (c >> 5) == 6  ? 2
			   : (c >> 4) == 14 ? 3
			   : (c >> 3) == 30 ? 4
					    : 0;
		if (n == 0 || i + n > len)
			valid = false;
		for (size_t k = 1; valid && k < n; k++)
			valid = ((uint8_t)p[i + k] >> 6) == 2;
		i += n ? n : 1;
	}
	if (p != NULL && valid && len < sizeof buf) {
		memcpy(buf, p, len);
		buf[len] = '\0';
		return cJSON_CreateString(buf);
	}
	size_t at = (size_t)snprintf(buf, sizeof buf, "bytes:");
	for (size_t i = 0; p != NULL && i < len && at + 5 < sizeof buf; i++)
		at += (size_t)snprintf(buf + at, sizeof buf - at, "\\x%02x", (uint8_t)p[i]);
	return cJSON_CreateString(buf);
}

/* ------------------------------------------------------------------ streams */

/* Under c->mu: starts the next write if none is running; returns true when the writer's
 * reference is to be dropped (the scheduler is done and everything is written, or writing
 * failed). The caller drops it after unlocking; until then the writer's reference keeps c. */
static bool api_write_next_locked(struct api_call *c)
{
	if (c->write_busy || c->conn == NULL)
		return false;
	if (!c->write_failed && c->out.len > 0) {
		struct lm_buf t = c->writing;
		c->writing = c->out;
		c->out = t;
		c->out.len = 0;
		nng_iov iov = {.iov_buf = c->writing.p, .iov_len = c->writing.len};
		nng_aio_set_iov(c->wr, 1, &iov);
		c->write_busy = true;
		nng_http_conn_write_all(c->conn, c->wr);
		return false;
	}
	if (c->sched_done && !c->writer_released) {
		c->writer_released = true;
		return true;
	}
	return false;
}

/* The write callback decides what comes next in the same critical section that ends its write:
 * once it unlocks with no write running, the scheduler thread may release the writer's
 * reference and free c, so c must not be touched again unless this thread releases it. */
static void api_write_cb(void *arg)
{
	struct api_call *c = arg;
	int rv = nng_aio_result(c->wr);
	pthread_mutex_lock(&c->mu);
	c->write_busy = false;
	c->writing.len = 0;
	if (rv != 0 && !c->write_failed) {
		/* The client went away: end its sequence everywhere. */
		c->write_failed = true;
		if (!c->sched_done)
			sched_cancel(c->api->cfg.sched, c->seq_id);
	}
	bool release = api_write_next_locked(c);
	pthread_mutex_unlock(&c->mu);
	if (release)
		api_call_unref(c);
}

/* For a thread that holds another reference to c (the scheduler's). */
static void api_write_next(struct api_call *c)
{
	pthread_mutex_lock(&c->mu);
	bool release = api_write_next_locked(c);
	pthread_mutex_unlock(&c->mu);
	if (release)
		api_call_unref(c);
}

static void api_stream_event(struct api_call *c, const char *data)
{
	pthread_mutex_lock(&c->mu);
	if (!c->write_failed) {
		lm_buf_add(&c->out, "data: ", 6);
		lm_buf_add(&c->out, data, strlen(data));
		lm_buf_add(&c->out, "\n\n", 2);
	}
	pthread_mutex_unlock(&c->mu);
	api_write_next(c);
}

static cJSON *api_chunk(struct api_call *c, const char *text, const char *finish)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", c->id);
	cJSON_AddStringToObject(o, "object", "text_completion");
	cJSON_AddNumberToObject(o, "created", (double)c->created);
	cJSON_AddStringToObject(o, "model", c->api->cfg.model_name);
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddItemToArray(choices, ch);
	cJSON_AddStringToObject(ch, "text", text);
	cJSON_AddNumberToObject(ch, "index", 0);
	cJSON_AddNullToObject(ch, "logprobs");
	if (finish != NULL)
		cJSON_AddStringToObject(ch, "finish_reason", finish);
	else
		cJSON_AddNullToObject(ch, "finish_reason");
	return o;
}

/* ------------------------------------------------------------------ generation callbacks */

/* Emits text that can no longer be part of a stop string. */
static void api_emit(struct api_call *c, const char *text, size_t len, int32_t token, float logprob,
		     const int32_t *top_ids, const float *top_lp, int32_t n_top)
{
	if (!c->req.stream) {
		lm_buf_add(&c->text, text, len);
		return;
	}
	char *piece = malloc(len + 1);
	if (piece == NULL)
		return;
	memcpy(piece, text, len);
	piece[len] = '\0';
	cJSON *o = api_chunk(c, piece, NULL);
	free(piece);
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
	if (token >= 0 && c->req.n_logprobs > 0) {
		cJSON *lp = cJSON_CreateObject();
		cJSON *toks = cJSON_AddArrayToObject(lp, "tokens");
		cJSON_AddItemToArray(toks, api_token_string(c->api, token));
		cJSON *vals = cJSON_AddArrayToObject(lp, "token_logprobs");
		cJSON_AddItemToArray(vals, cJSON_CreateNumber(logprob));
		cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs");
		cJSON *top = cJSON_CreateObject();
		for (int32_t i = 0; i < n_top; i++) {
			cJSON *s = api_token_string(c->api, top_ids[i]);
			cJSON_AddNumberToObject(top, cJSON_GetStringValue(s), top_lp[i]);
			cJSON_Delete(s);
		}
		cJSON_AddItemToArray(tops, top);
		cJSON_ReplaceItemInObject(ch, "logprobs", lp);
	}
	if (token >= 0 && c->req.want_ids) {
		cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
		cJSON_AddItemToArray(ids, cJSON_CreateNumber(token));
	}
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (s != NULL) {
		api_stream_event(c, s);
		free(s);
	}
}

/* Moves detokenized text from `pending` out, holding back the longest tail that could still
 * begin a stop string (api_stop_cut); returns true when a stop string was found (text after it
 * is dropped). */
static bool api_release_text(struct api_call *c, bool final, int32_t token, float logprob,
			     const int32_t *top_ids, const float *top_lp, int32_t n_top)
{
	bool hit;
	size_t cut = api_stop_cut(&c->req, c->pending.p, c->pending.len, final, &hit);
	if (cut > 0 || token >= 0)
		api_emit(c, c->pending.p ? c->pending.p : "", cut, token, logprob, top_ids, top_lp,
			 n_top);
	if (cut > 0) /* pending.p is NULL until text arrives */
		memmove(c->pending.p, c->pending.p + cut, c->pending.len - cut);
	c->pending.len -= cut;
	if (hit)
		c->pending.len = 0;
	return hit;
}

static void api_on_token(void *arg, int32_t token, float logprob, const int32_t *top_ids,
			 const float *top_lp, int32_t n_top)
{
	struct api_call *c = arg;
	if (c->n_gen == 0)
		c->t_first = lm_now_ns();
	if (c->n_gen == c->cap_gen) {
		int32_t cap = c->cap_gen ? c->cap_gen * 2 : 64;
		int32_t *g = realloc(c->gen, (size_t)cap * sizeof *g);
		if (g == NULL)
			return;
		c->gen = g;
		c->cap_gen = cap;
	}
	c->gen[c->n_gen++] = token;
	if (c->stop_hit)
		return;
	size_t n = 0;
	if (tok_stream_push(c->api->cfg.vocab, &c->ts, token, c->piece,
			    tok_stream_cap(c->api->cfg.vocab), &n) == 0)
		lm_buf_add(&c->pending, c->piece, n);
	if (!c->req.stream && c->req.n_logprobs > 0) {
		cJSON_AddItemToArray(c->lp_tokens, api_token_string(c->api, token));
		cJSON_AddItemToArray(c->lp_values, cJSON_CreateNumber(logprob));
		cJSON *top = cJSON_CreateObject();
		for (int32_t i = 0; i < n_top; i++) {
			cJSON *s = api_token_string(c->api, top_ids[i]);
			cJSON_AddNumberToObject(top, cJSON_GetStringValue(s), top_lp[i]);
			cJSON_Delete(s);
		}
		cJSON_AddItemToArray(c->lp_top, top);
		cJSON_AddItemToArray(
			c->lp_offsets,
			cJSON_CreateNumber((double)(c->text.len + c->pending.len - n)));
	}
	if (api_release_text(c, false, token, logprob, top_ids, top_lp, n_top)) {
		c->stop_hit = true;
		sched_cancel(c->api->cfg.sched, c->seq_id);
	}
}

static void api_add_usage(struct api_call *c, cJSON *o)
{
	cJSON *u = cJSON_AddObjectToObject(o, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", c->req.n_prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", c->n_gen);
	cJSON_AddNumberToObject(u, "total_tokens", c->req.n_prompt + c->n_gen);
	/* Timings in the manner of llama.cpp's server: prefill is submit to first token. */
	cJSON *t = cJSON_AddObjectToObject(o, "timings");
	double prefill = c->n_gen > 0 ? api_ms(c->t_submit, c->t_first) : 0;
	double decode = c->n_gen > 1 ? api_ms(c->t_first, c->t_done) : 0;
	cJSON_AddNumberToObject(t, "prompt_n", c->req.n_prompt);
	cJSON_AddNumberToObject(t, "prompt_ms", prefill);
	cJSON_AddNumberToObject(t, "predicted_n", c->n_gen);
	cJSON_AddNumberToObject(t, "predicted_ms", decode);
	if (c->req.want_ids) {
		cJSON *p = cJSON_AddArrayToObject(o, "prompt_token_ids");
		for (int32_t i = 0; i < c->req.n_prompt; i++)
			cJSON_AddItemToArray(p, cJSON_CreateNumber(c->req.prompt[i]));
	}
}

static void api_on_done(void *arg, enum sched_finish why, int code, const char *msg)
{
	struct api_call *c = arg;
	c->t_done = lm_now_ns();
	if (!c->stop_hit && why != SCHED_FINISH_ERROR) {
		char tail[8];
		size_t n = tok_stream_flush(&c->ts, tail, sizeof tail);
		lm_buf_add(&c->pending, tail, n);
		if (api_release_text(c, true, -1, 0, NULL, NULL, 0))
			c->stop_hit = true;
	}
	const char *finish = c->stop_hit || why == SCHED_FINISH_STOP ? "stop" : "length";

	if (!c->req.stream) {
		if (why == SCHED_FINISH_ERROR) {
			uint16_t status =
				code == LM_EUNAVAILABLE || code == LM_ETIMEOUT ? 503 : 500;
			lm_httpd_reply_error(c->aio, status, "server_error", NULL, "%s",
					     msg ? msg : lm_strerror(code));
		} else {
			cJSON *o = api_chunk(c, c->text.p ? c->text.p : "", finish);
			if (c->req.n_logprobs > 0) {
				cJSON *ch =
					cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
				cJSON *lp = cJSON_CreateObject();
				cJSON_AddItemToObject(lp, "tokens", c->lp_tokens);
				cJSON_AddItemToObject(lp, "token_logprobs", c->lp_values);
				cJSON_AddItemToObject(lp, "top_logprobs", c->lp_top);
				cJSON_AddItemToObject(lp, "text_offset", c->lp_offsets);
				c->lp_tokens = c->lp_values = c->lp_top = c->lp_offsets = NULL;
				cJSON_ReplaceItemInObject(ch, "logprobs", lp);
			}
			if (c->req.want_ids) {
				cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
				for (int32_t i = 0; i < c->n_gen; i++)
					cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->gen[i]));
			}
			api_add_usage(c, o);
			lm_httpd_reply_json(c->aio, 200, o);
		}
		c->refs = 0;
		api_call_free(c);
		return;
	}

	if (why == SCHED_FINISH_ERROR) {
		char *e = lm_httpd_error_json("server_error", NULL, msg ? msg : lm_strerror(code));
		if (e != NULL) {
			api_stream_event(c, e);
			free(e);
		}
	} else if (why != SCHED_FINISH_CANCEL || c->stop_hit) {
		cJSON *o = api_chunk(c, "", finish);
		api_add_usage(c, o);
		char *s = cJSON_PrintUnformatted(o);
		cJSON_Delete(o);
		if (s != NULL) {
			api_stream_event(c, s);
			free(s);
		}
	}
	api_stream_event(c, "[DONE]");
	pthread_mutex_lock(&c->mu);
	c->sched_done = true;
	pthread_mutex_unlock(&c->mu);
	api_write_next(c);
	api_call_unref(c);
}

/* ------------------------------------------------------------------ completions */

/* Every endpoint but /healthz and /readyz (which orchestrators probe without credentials)
 * needs the bearer token when mesh.toml sets one. Replies 401 and returns false otherwise. */
static bool api_authorized(nng_aio *aio, const struct api *a)
{
	if (lm_httpd_authorized(aio, a->cfg.auth_token))
		return true;
	lm_httpd_reply_error(aio, 401, "authentication_error", NULL,
			     "a bearer token is required (Authorization: Bearer ...)");
	return false;
}

static void api_completions(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	const char *body;
	size_t len;
	if (!api_authorized(aio, a))
		return;
	lm_httpd_body(aio, &body, &len);
	struct api_request req;
	struct api_error err;
	struct api_limits lim = {.max_seq = a->cfg.max_seq};
	if (api_request_parse(body, len, &lim, a->cfg.vocab, &req, &err) != 0) {
		lm_httpd_reply_error(aio, err.status, err.type, err.param, "%s", err.message);
		api_error_fini(&err);
		return;
	}
	struct api_call *c = calloc(1, sizeof *c);
	char *piece = malloc(tok_stream_cap(a->cfg.vocab));
	if (c == NULL || piece == NULL) {
		api_request_fini(&req);
		free(c);
		free(piece);
		lm_httpd_reply_error(aio, 500, "server_error", NULL, "out of memory");
		return;
	}
	pthread_mutex_init(&c->mu, NULL);
	c->req = req;
	c->piece = piece;
	c->api = a;
	c->created = (long)time(NULL);
	snprintf(c->id, sizeof c->id, "cmpl-%llx%06llx", (unsigned long long)c->created,
		 (unsigned long long)atomic_fetch_add(&a->next_id, 1));
	tok_stream_init(&c->ts);
	c->lp_tokens = cJSON_CreateArray();
	c->lp_values = cJSON_CreateArray();
	c->lp_top = cJSON_CreateArray();
	c->lp_offsets = cJSON_CreateArray();
	struct sched_req r = {.prompt = c->req.prompt,
			      .n_prompt = c->req.n_prompt,
			      .max_tokens = c->req.max_tokens,
			      .sampling = c->req.sampling,
			      .n_logprobs = c->req.n_logprobs,
			      .no_speculate = c->req.no_speculate,
			      .on_token = api_on_token,
			      .on_done = api_on_done,
			      .arg = c};

	lm_diag d = {{0}};
	c->t_submit = lm_now_ns();
	if (!c->req.stream) {
		c->aio = aio;
		int rc = sched_submit(a->cfg.sched, &r, &c->seq_id, &d);
		if (rc != 0) {
			lm_httpd_reply_error(aio, rc == LM_EUNAVAILABLE ? 503 : 400,
					     rc == LM_EUNAVAILABLE ? "server_error"
								   : "invalid_request_error",
					     NULL, "%s", lm_diag_str(&d, rc));
			api_call_free(c);
		}
		return; /* on_done finishes the aio */
	}

	/* A stream: the scheduler and the writer each hold a reference. */
	c->refs = 2;
	if (nng_aio_alloc(&c->wr, api_write_cb, c) != 0) {
		lm_httpd_reply_error(aio, 500, "server_error", NULL, "out of memory");
		api_call_free(c);
		return;
	}
	nng_http_conn *conn = nng_aio_get_input(aio, 2);
	int rc = sched_submit(a->cfg.sched, &r, &c->seq_id, &d);
	if (rc != 0) {
		lm_httpd_reply_error(aio, rc == LM_EUNAVAILABLE ? 503 : 400,
				     rc == LM_EUNAVAILABLE ? "server_error"
							   : "invalid_request_error",
				     NULL, "%s", lm_diag_str(&d, rc));
		api_call_free(c);
		return;
	}
	/* Take the connection over and write the response head ourselves: NNG's server only
	 * sends whole responses, and events must go out as tokens arrive. */
	static const char head[] = "HTTP/1.1 200 OK\r\n"
				   "Content-Type: text/event-stream\r\n"
				   "Cache-Control: no-cache\r\n"
				   "Connection: close\r\n\r\n";
	nng_http_hijack(conn);
	nng_http_req_free(lm_httpd_req(aio));
	pthread_mutex_lock(&c->mu);
	struct lm_buf queued = c->out;
	c->out = (struct lm_buf){0};
	lm_buf_add(&c->out, head, sizeof head - 1);
	if (queued.len > 0)
		lm_buf_add(&c->out, queued.p, queued.len);
	lm_buf_fini(&queued);
	pthread_mutex_unlock(&c->mu);
	nng_aio_finish(aio, 0);
	/* This thread is the writer until the first write starts. While conn is NULL nobody can
	 * start one or drop the writer's reference, so c lives until this critical section;
	 * after it, c is touched again only to drop that reference. The last api_call_unref (the
	 * writer's, after everything is written, or the scheduler's) frees the call. */
	pthread_mutex_lock(&c->mu);
	c->conn = conn;
	bool release = api_write_next_locked(c);
	pthread_mutex_unlock(&c->mu);
	if (release)
		api_call_unref(c);
}

/* ------------------------------------------------------------------ small endpoints */

static void api_models(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON *data = cJSON_AddArrayToObject(o, "data");
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", a->cfg.model_name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", 0);
	cJSON_AddStringToObject(m, "owned_by", "layermesh");
	cJSON_AddNumberToObject(m, "context_length", a->cfg.max_seq);
	cJSON_AddItemToArray(data, m);
	lm_httpd_reply_json(aio, 200, o);
}

static void api_healthz(nng_aio *aio)
{
	lm_httpd_reply(aio, 200, "text/plain", "ok\n", 3);
}

static void api_readyz(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	char why[512] = "no mesh";
	if (a->cfg.ready != NULL && a->cfg.ready(a->cfg.mesh, why, sizeof why)) {
		lm_httpd_reply(aio, 200, "text/plain", "ready\n", 6);
		return;
	}
	char body[600];
	int n = snprintf(body, sizeof body, "not ready: %s\n", why);
	lm_httpd_reply(aio, 503, "text/plain", body, (size_t)n);
}

static void api_status(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	lm_httpd_reply_json(aio, 200, a->cfg.status ? a->cfg.status(a->cfg.mesh) : NULL);
}

static void api_metrics(nng_aio *aio)
{
	struct api *a = lm_httpd_data(aio);
	if (!api_authorized(aio, a))
		return;
	char *s = a->cfg.metrics ? a->cfg.metrics(a->cfg.mesh) : NULL;
	if (s == NULL) {
		lm_httpd_reply(aio, 500, "text/plain", "metrics unavailable\n", 20);
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
	const char *method = nng_http_req_get_method(lm_httpd_req(aio));
	if (strcmp(method, "GET") == 0) {
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

int api_start(struct api **out, const struct api_cfg *cfg, lm_diag *d)
{
	struct api *a = calloc(1, sizeof *a);
	int rc;
	*out = NULL;
	if (a == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	a->cfg = *cfg;
	if ((rc = lm_httpd_init(&a->httpd, cfg->http, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "POST", "/v1/completions", api_completions, a,
				 API_MAX_BODY, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "GET", "/v1/models", api_models, a, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "GET", "/healthz", api_healthz, a, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "GET", "/readyz", api_readyz, a, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "GET", "/v1/status", api_status, a, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "GET", "/metrics", api_metrics, a, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "POST", "/v1/admin/redeploy", api_redeploy, a, 65536,
				 d)) != 0 ||
	    (rc = lm_httpd_route(&a->httpd, "GET", "/v1/admin/redeploy", api_redeploy, a, 0, d)) !=
		    0 ||
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

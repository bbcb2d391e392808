/* api_call.c — one completion or chat request, from its body to its last byte. See api.h.
 *
 * A request is a `struct api_call`. The HTTP handler parses it (api_request.h: validation,
 * the chat template, tokenization) and submits it to the scheduler; from then on the scheduler
 * thread drives the call through on_token/on_done, which detokenize (holding back text that
 * could still become a stop string) and either accumulate the answer (plain requests, replied
 * in on_done) or write server-sent events to the request's stream (common/wire/httpd.h). A
 * client that goes away cancels the sequence (lm_httpd_on_gone, and the stream's gone).
 *
 * The handler and the scheduler each hold a reference from the submit on (the scheduler may
 * answer a plain request before the handler has returned); the last to let go frees the call.
 * A stream starts after the submit, so events from the scheduler thread may come first: they
 * wait in `early` until it starts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/base/buf.h"
#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/utf8.h"
#include "coordinator/api/api_impl.h"
#include "coordinator/api/api_json.h"

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
	/* Plain requests with logprobs: completions' four arrays, chat's content entries. */
	cJSON *lp_tokens, *lp_values, *lp_top, *lp_offsets, *lp_content;
	uint64_t t_submit, t_first, t_done; /* lm_now_ns */
	int32_t cached; /* prompt tokens reused from a slot's rows (the scheduler writes it) */
	nng_aio *aio;   /* plain requests: replied in on_done */
	/* Streams, under mu: the stream once started, events queued before it, and whether the
	 * scheduler is done (then whoever comes second frees the call). */
	pthread_mutex_t mu;
	struct lm_http_stream *st;
	struct lm_buf early;
	bool sched_done, started;
	_Atomic bool client_gone;
	_Atomic uint64_t live_id;
	_Atomic int refs;
};

uint64_t api_random_seed(void)
{
	uint64_t x = 0;
	if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
		/* No entropy source: the clock and a counter still differ per request. */
		static _Atomic uint64_t n;
		x = lm_now_ns() * 0x9e3779b97f4a7c15ull ^ atomic_fetch_add(&n, 1);
	}
	return x & ((UINT64_C(1) << 53) - 1);
}

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
	lm_buf_fini(&c->early);
	free(c->gen);
	cJSON_Delete(c->lp_tokens);
	cJSON_Delete(c->lp_values);
	cJSON_Delete(c->lp_top);
	cJSON_Delete(c->lp_offsets);
	cJSON_Delete(c->lp_content);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static void api_call_unref(struct api_call *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		api_call_free(c);
}

/* The client went away: end its sequence everywhere. Runs under the connection's lock. */
static void api_gone(void *arg)
{
	struct api_call *c = arg;
	atomic_store(&c->client_gone, true);
	uint64_t id = atomic_load(&c->live_id);
	if (id != 0)
		sched_cancel(c->api->cfg.sched, id);
}

/* ------------------------------------------------------------------ token texts */

/* A token's text as completions' logprobs show it: valid UTF-8 as is, else "bytes:\xNN...". */
static cJSON *api_token_string(const struct api *a, int32_t token)
{
	size_t len = 0;
	const char *p = tok_piece(a->cfg.vocab, token, &len);
	char buf[512];
	if (p != NULL && lm_utf8_valid(p, len) && len < sizeof buf) {
		memcpy(buf, p, len);
		buf[len] = '\0';
		return cJSON_CreateString(buf);
	}
	size_t at = (size_t)snprintf(buf, sizeof buf, "bytes:");
	for (size_t i = 0; p != NULL && i < len && at + 5 < sizeof buf; i++)
		at += (size_t)snprintf(buf + at, sizeof buf - at, "\\x%02x", (uint8_t)p[i]);
	return cJSON_CreateString(buf);
}

/* Chat's {"token", "logprob", "bytes"}: the token's text (invalid UTF-8 bytes as U+FFFD) and
 * its exact bytes. */
static cJSON *api_token_entry(const struct api *a, int32_t token, float logprob)
{
	size_t len = 0;
	const char *p = tok_piece(a->cfg.vocab, token, &len);
	if (p == NULL)
		len = 0;
	cJSON *o = cJSON_CreateObject();
	struct lm_buf t = {0};
	for (size_t i = 0; i < len; i++) {
		if (lm_utf8_valid(p + i, 1) || ((uint8_t)p[i] >= 0xc0 && i + 1 < len)) {
			size_t n = 1;
			while (i + n < len && ((uint8_t)p[i + n] >> 6) == 2 && n < 4)
				n++;
			if (lm_utf8_valid(p + i, n)) {
				lm_buf_add(&t, p + i, n);
				i += n - 1;
				continue;
			}
		}
		lm_buf_adds(&t, "\xef\xbf\xbd");
	}
	cJSON_AddStringToObject(o, "token", t.p != NULL ? t.p : "");
	lm_buf_fini(&t);
	cJSON_AddNumberToObject(o, "logprob", logprob);
	cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
	for (size_t i = 0; i < len; i++)
		cJSON_AddItemToArray(bytes, cJSON_CreateNumber((uint8_t)p[i]));
	return o;
}

static cJSON *api_top_completion(const struct api *a, const int32_t *ids, const float *lp,
				 int32_t n)
{
	cJSON *top = cJSON_CreateObject();
	for (int32_t i = 0; i < n; i++) {
		cJSON *s = api_token_string(a, ids[i]);
		cJSON_AddNumberToObject(top, cJSON_GetStringValue(s), lp[i]);
		cJSON_Delete(s);
	}
	return top;
}

static cJSON *api_chat_logprob(const struct api *a, int32_t token, float logprob,
			       const int32_t *ids, const float *lp, int32_t n)
{
	cJSON *e = api_token_entry(a, token, logprob);
	cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
	for (int32_t i = 0; i < n; i++)
		cJSON_AddItemToArray(tops, api_token_entry(a, ids[i], lp[i]));
	return e;
}

/* ------------------------------------------------------------------ response shapes */

static cJSON *api_head(const struct api_call *c, const char *object)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", c->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)c->created);
	cJSON_AddStringToObject(o, "model", c->api->cfg.model_name);
	cJSON_AddStringToObject(o, "system_fingerprint", c->api->system_fingerprint);
	api_json_add_u64(o, "seed", c->req.sampling.seed);
	return o;
}

/* A stream's chunk: one choice with text (completions) or a delta (chat); finish NULL while
 * it goes on. */
static cJSON *api_chunk(const struct api_call *c, const char *text, bool role, const char *finish)
{
	bool chat = c->req.kind == API_CHAT;
	cJSON *o = api_head(c, chat ? "chat.completion.chunk" : "text_completion");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
	cJSON_AddNumberToObject(ch, "index", 0);
	if (chat) {
		cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
		if (role)
			cJSON_AddStringToObject(delta, "role", "assistant");
		if (text != NULL)
			cJSON_AddStringToObject(delta, "content", text);
	} else {
		cJSON_AddStringToObject(ch, "text", text != NULL ? text : "");
	}
	cJSON_AddNullToObject(ch, "logprobs");
	if (finish != NULL)
		cJSON_AddStringToObject(ch, "finish_reason", finish);
	else
		cJSON_AddNullToObject(ch, "finish_reason");
	if (c->req.include_usage)
		cJSON_AddNullToObject(o, "usage");
	return o;
}

static void api_add_usage(const struct api_call *c, cJSON *o, bool timings)
{
	cJSON_DeleteItemFromObject(o, "usage");
	cJSON *u = cJSON_AddObjectToObject(o, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", c->req.n_prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", c->n_gen);
	cJSON_AddNumberToObject(u, "total_tokens", c->req.n_prompt + c->n_gen);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"),
				"cached_tokens", c->cached);
	if (!timings)
		return;
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

/* The whole answer of a plain request. */
static cJSON *api_answer(struct api_call *c, const char *finish)
{
	bool chat = c->req.kind == API_CHAT;
	cJSON *o = api_head(c, chat ? "chat.completion" : "text_completion");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
	cJSON_AddNumberToObject(ch, "index", 0);
	const char *text = c->text.p != NULL ? c->text.p : "";
	cJSON *lp = NULL;
	if (chat) {
		cJSON *m = cJSON_AddObjectToObject(ch, "message");
		cJSON_AddStringToObject(m, "role", "assistant");
		cJSON_AddStringToObject(m, "content", text);
		cJSON_AddNullToObject(m, "refusal");
		if (c->req.logprobs) {
			lp = cJSON_CreateObject();
			cJSON_AddItemToObject(lp, "content", c->lp_content);
			c->lp_content = NULL;
		}
	} else {
		cJSON_AddStringToObject(ch, "text", text);
		if (c->req.n_logprobs > 0) {
			lp = cJSON_CreateObject();
			cJSON_AddItemToObject(lp, "tokens", c->lp_tokens);
			cJSON_AddItemToObject(lp, "token_logprobs", c->lp_values);
			cJSON_AddItemToObject(lp, "top_logprobs", c->lp_top);
			cJSON_AddItemToObject(lp, "text_offset", c->lp_offsets);
			c->lp_tokens = c->lp_values = c->lp_top = c->lp_offsets = NULL;
		}
	}
	cJSON_AddItemToObject(ch, "logprobs", lp != NULL ? lp : cJSON_CreateNull());
	cJSON_AddStringToObject(ch, "finish_reason", finish);
	if (c->req.want_ids) {
		cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
		for (int32_t i = 0; i < c->n_gen; i++)
			cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->gen[i]));
	}
	api_add_usage(c, o, true);
	return o;
}

/* ------------------------------------------------------------------ streams */

static void api_stream_raw(struct api_call *c, const char *data)
{
	struct lm_buf ev = {0};
	lm_buf_adds(&ev, "data: ");
	lm_buf_adds(&ev, data);
	lm_buf_adds(&ev, "\n\n");
	pthread_mutex_lock(&c->mu);
	if (c->st != NULL)
		lm_httpd_stream_write(c->st, ev.p, ev.len);
	else if (!c->started)
		lm_buf_add(&c->early, ev.p, ev.len);
	pthread_mutex_unlock(&c->mu);
	lm_buf_fini(&ev);
}

static void api_stream_json(struct api_call *c, cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (s != NULL) {
		api_stream_raw(c, s);
		free(s);
	}
}

/* ------------------------------------------------------------------ generation callbacks */

/* Emits text that can no longer be part of a stop string, with the token that made it. */
static void api_emit(struct api_call *c, const char *text, size_t len, int32_t token, float logprob,
		     const int32_t *top_ids, const float *top_lp, int32_t n_top)
{
	if (!c->req.stream) {
		lm_buf_add(&c->text, text, len);
		return;
	}
	bool chat = c->req.kind == API_CHAT;
	bool with_lp = token >= 0 && c->req.logprobs;
	if (chat && len == 0 && !with_lp && !(token >= 0 && c->req.want_ids))
		return; /* nothing to tell a chat client yet */
	char *piece = malloc(len + 1);
	if (piece == NULL)
		return;
	memcpy(piece, text, len);
	piece[len] = '\0';
	cJSON *o = api_chunk(c, piece, false, NULL);
	free(piece);
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
	if (with_lp && chat) {
		cJSON *lp = cJSON_CreateObject();
		cJSON *content = cJSON_AddArrayToObject(lp, "content");
		cJSON_AddItemToArray(
			content, api_chat_logprob(c->api, token, logprob, top_ids, top_lp, n_top));
		cJSON_ReplaceItemInObject(ch, "logprobs", lp);
	} else if (with_lp) {
		cJSON *lp = cJSON_CreateObject();
		cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "tokens"),
				     api_token_string(c->api, token));
		cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "token_logprobs"),
				     cJSON_CreateNumber(logprob));
		cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "top_logprobs"),
				     api_top_completion(c->api, top_ids, top_lp, n_top));
		cJSON_ReplaceItemInObject(ch, "logprobs", lp);
	}
	if (token >= 0 && c->req.want_ids)
		cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "token_ids"),
				     cJSON_CreateNumber(token));
	api_stream_json(c, o);
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

/* A plain request's logprobs of one token. */
static void api_keep_logprobs(struct api_call *c, int32_t token, float logprob,
			      const int32_t *top_ids, const float *top_lp, int32_t n_top,
			      size_t offset)
{
	if (c->req.kind == API_CHAT) {
		cJSON_AddItemToArray(c->lp_content, api_chat_logprob(c->api, token, logprob,
								     top_ids, top_lp, n_top));
		return;
	}
	cJSON_AddItemToArray(c->lp_tokens, api_token_string(c->api, token));
	cJSON_AddItemToArray(c->lp_values, cJSON_CreateNumber(logprob));
	cJSON_AddItemToArray(c->lp_top, api_top_completion(c->api, top_ids, top_lp, n_top));
	cJSON_AddItemToArray(c->lp_offsets, cJSON_CreateNumber((double)offset));
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
	if (!c->req.stream && c->req.logprobs)
		api_keep_logprobs(c, token, logprob, top_ids, top_lp, n_top,
				  c->text.len + c->pending.len - n);
	if (api_release_text(c, false, token, logprob, top_ids, top_lp, n_top)) {
		c->stop_hit = true;
		sched_cancel(c->api->cfg.sched, c->seq_id);
	}
}

static uint16_t api_status_of(int code)
{
	return code == LM_EUNAVAILABLE || code == LM_ETIMEOUT ? 503 : code == LM_EBUSY ? 429 : 500;
}

/* A stream's end: the last chunk, usage when asked, [DONE]; or the error as an event. */
static void api_stream_done(struct api_call *c, enum sched_finish why, int code, const char *msg,
			    const char *finish)
{
	if (why == SCHED_FINISH_ERROR) {
		char *e = lm_httpd_error_json("server_error", NULL, msg ? msg : lm_strerror(code));
		if (e != NULL) {
			api_stream_raw(c, e);
			free(e);
		}
	} else if (why != SCHED_FINISH_CANCEL || c->stop_hit) {
		cJSON *o = api_chunk(c, c->req.kind == API_CHAT ? NULL : "", false, finish);
		if (c->req.kind == API_COMPLETION)
			api_add_usage(c, o,
				      true); /* as before stream_options: layermesh generate */
		api_stream_json(c, o);
		if (c->req.include_usage) {
			cJSON *u = api_head(c, c->req.kind == API_CHAT ? "chat.completion.chunk"
								       : "text_completion");
			cJSON_AddArrayToObject(u, "choices");
			api_add_usage(c, u, false);
			api_stream_json(c, u);
		}
	}
	api_stream_raw(c, "[DONE]");
	pthread_mutex_lock(&c->mu);
	c->sched_done = true;
	if (c->st != NULL)
		lm_httpd_stream_end(c->st);
	c->st = NULL;
	pthread_mutex_unlock(&c->mu);
	api_call_unref(c);
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
	if (c->req.stream) {
		api_stream_done(c, why, code, msg, finish);
		return;
	}
	if (why == SCHED_FINISH_ERROR)
		lm_httpd_reply_error(c->aio, api_status_of(code), "server_error", NULL, "%s",
				     msg ? msg : lm_strerror(code));
	else
		lm_httpd_reply_json(c->aio, 200, api_answer(c, finish));
	api_call_unref(c);
}

/* ------------------------------------------------------------------ the handler */

static struct api_call *api_call_new(struct api *a, struct api_request *req)
{
	struct api_call *c = calloc(1, sizeof *c);
	char *piece = malloc(tok_stream_cap(a->cfg.vocab));
	if (c == NULL || piece == NULL) {
		free(c);
		free(piece);
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	c->req = *req;
	memset(req, 0, sizeof *req);
	c->piece = piece;
	c->api = a;
	c->created = (long)time(NULL);
	snprintf(c->id, sizeof c->id, "%s-%lx%06llx", c->req.kind == API_CHAT ? "chatcmpl" : "cmpl",
		 (unsigned long)c->created, (unsigned long long)atomic_fetch_add(&a->next_id, 1));
	tok_stream_init(&c->ts);
	if (c->req.kind == API_CHAT) {
		c->lp_content = cJSON_CreateArray();
	} else {
		c->lp_tokens = cJSON_CreateArray();
		c->lp_values = cJSON_CreateArray();
		c->lp_top = cJSON_CreateArray();
		c->lp_offsets = cJSON_CreateArray();
	}
	if (!c->req.seed_given)
		c->req.sampling.seed = api_random_seed();
	return c;
}

/* A submit the scheduler refused: 429 (queue full), 503 (mesh down), 400. */
static void api_refuse_submit(nng_aio *aio, int rc, const lm_diag *d)
{
	if (rc == LM_EBUSY) {
		lm_httpd_add_header(aio, "Retry-After", "1");
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_QUEUE_FULL, 429, "rate_limit_error", NULL, "%s",
				lm_diag_str(d, rc));
	} else if (rc == LM_EUNAVAILABLE) {
		lm_httpd_add_header(aio, "Retry-After", "5");
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_UNAVAILABLE, 503, "server_error", NULL, "%s",
				lm_diag_str(d, rc));
	} else {
		lm_httpd_refuse(aio,
				rc == LM_ENOMEM ? LM_HTTP_REFUSE_INTERNAL : LM_HTTP_REFUSE_INVALID,
				rc == LM_ENOMEM ? 500 : 400,
				rc == LM_ENOMEM ? "server_error" : "invalid_request_error", NULL,
				"%s", lm_diag_str(d, rc));
	}
}

/* Starts the stream of a submitted call and hands it what the scheduler said meanwhile. */
static void api_start_stream(nng_aio *aio, struct api_call *c)
{
	if (c->req.kind == API_CHAT) {
		/* OpenAI's first chunk: the role, before any content. */
		cJSON *o = api_chunk(c, "", true, NULL);
		char *s = cJSON_PrintUnformatted(o);
		cJSON_Delete(o);
		pthread_mutex_lock(&c->mu);
		struct lm_buf first = {0};
		lm_buf_printf(&first, "data: %s\n\n", s != NULL ? s : "{}");
		if (c->early.len > 0)
			lm_buf_add(&first, c->early.p, c->early.len);
		lm_buf_fini(&c->early);
		c->early = first;
		pthread_mutex_unlock(&c->mu);
		free(s);
	}
	struct lm_http_stream *st = lm_httpd_stream(aio, "text/event-stream", api_gone, c);
	pthread_mutex_lock(&c->mu);
	c->st = st;
	c->started = true;
	if (st != NULL && c->early.len > 0)
		lm_httpd_stream_write(st, c->early.p, c->early.len);
	lm_buf_fini(&c->early);
	bool done = c->sched_done;
	if (done && st != NULL)
		lm_httpd_stream_end(st);
	if (done)
		c->st = NULL;
	pthread_mutex_unlock(&c->mu);
	if (st == NULL) {
		sched_cancel(c->api->cfg.sched, atomic_load(&c->live_id));
		lm_httpd_reply_error(aio, 500, "server_error", NULL, "out of memory");
	}
}

void api_generate(nng_aio *aio, struct api *a, enum api_kind kind)
{
	const char *body;
	size_t len;
	if (!api_authorized(aio, a))
		return;
	lm_httpd_body(aio, &body, &len);
	struct api_request req;
	struct api_error err;
	int rc = kind == API_CHAT ? api_chat_parse(body, len, &a->lim, a->cfg.vocab, &req, &err)
				  : api_request_parse(body, len, &a->lim, a->cfg.vocab, &req, &err);
	if (rc != 0) {
		lm_httpd_refuse(aio, err.reason, err.status, err.type, err.param, "%s",
				err.message);
		api_error_fini(&err);
		return;
	}
	if (req.ignored[0] != '\0') {
		lm_httpd_add_header(aio, "X-Layermesh-Ignored-Fields", req.ignored);
		lm_debug("%s: ignored unknown fields: %s",
			 kind == API_CHAT ? "chat completion" : "completion", req.ignored);
	}
	struct api_call *c = api_call_new(a, &req);
	if (c == NULL) {
		api_request_fini(&req);
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INTERNAL, 500, "server_error", NULL,
				"out of memory");
		return;
	}
	struct sched_req r = {.prompt = c->req.prompt,
			      .n_prompt = c->req.n_prompt,
			      .max_tokens = c->req.max_tokens,
			      .sampling = c->req.sampling,
			      .n_logprobs = c->req.n_logprobs,
			      .penalties = c->req.penalties,
			      .bias = c->req.bias,
			      .n_bias = c->req.n_bias,
			      .stop_ids = c->req.stop_ids,
			      .n_stop_ids = c->req.n_stop_ids,
			      .no_speculate = c->req.no_speculate,
			      .grammar = c->req.grammar,
			      .no_cache = c->req.no_cache,
			      .cached = &c->cached,
			      .on_token = api_on_token,
			      .on_done = api_on_done,
			      .arg = c};
	lm_diag d = {{0}};
	c->t_submit = lm_now_ns();
	if (!c->req.stream)
		c->aio = aio;
	atomic_store(&c->refs, 2);
	/* Before the submit: a plain request is answered from the scheduler's thread, after
	 * which the aio is no longer this request's. */
	lm_httpd_on_gone(aio, api_gone, c);
	rc = sched_submit(a->cfg.sched, &r, &c->seq_id, &d);
	if (rc != 0) {
		api_refuse_submit(aio, rc, &d);
		api_call_free(c);
		return;
	}
	/* c->seq_id was set before the scheduler could see the request; the gone callback
	 * reads live_id. */
	atomic_store(&c->live_id, c->seq_id);
	if (atomic_load(&c->client_gone))
		sched_cancel(a->cfg.sched, c->seq_id);
	if (c->req.stream)
		api_start_stream(aio, c);
	api_call_unref(c); /* a plain request: on_done replies */
}

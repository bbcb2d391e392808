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
 *
 * llama-server's POST /completion is a /v1/completions request once its body is translated
 * (api_native.h), of one choice; the call then differs only in the shape of its answer and
 * events (api_native_answer, api_native_emit, api_native_final).
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
#include "coordinator/api/api_native.h"

/* One choice: its own sequence, seed and text. The scheduler's thread alone touches it once
 * submitted. */
struct api_choice {
	struct api_call *call;
	int32_t index; /* the choice's place among those generated (best_of reorders them) */
	uint64_t seed;
	uint64_t seq_id;
	_Atomic uint64_t live_id; /* seq_id once submitted, for a client gone meanwhile */
	struct tok_stream ts;
	char *piece;           /* [tok_stream_cap(vocab)] one token's decoded text */
	struct lm_buf text;    /* everything emitted (plain requests) */
	struct lm_buf pending; /* detokenized text held back for stop-string matching */
	/* Chat whose output is parsed (req.parse_output, tool_call.h): a stream's text so far, and
	 * how much of its content and reasoning has gone out. */
	struct lm_buf raw;
	size_t sent_content, sent_reasoning;
	bool stop_hit;
	bool new_line;                        /* the text so far holds a '\n' */
	char stop_word[API_MAX_STOP_LEN + 1]; /* the stop string that ended it */
	int32_t *gen, n_gen, cap_gen;
	double sum_lp; /* of its tokens' logprobs: best_of ranks by it */
	/* Plain requests with logprobs: completions' four arrays, chat's (and /completion's)
	 * content entries. */
	cJSON *lp_tokens, *lp_values, *lp_top, *lp_offsets, *lp_content;
	uint64_t t_first;   /* lm_now_ns */
	int32_t cached;     /* prompt tokens reused from a slot's rows (the scheduler writes it) */
	const char *finish; /* "stop" or "length" once it ended well */
};

struct api_call {
	struct api *api;
	char id[48];
	long created;
	struct api_request req; /* the parsed request: prompt, sampling, stops, options */
	/* llama-server's /completion (api_native.h): its answer's shape; one choice. */
	bool native;
	struct api_native nat;
	struct api_choice *ch; /* [req.best_of] */
	int32_t n_ch;
	_Atomic int32_t n_done;    /* choices ended: the one that ends last answers */
	uint64_t t_submit, t_done; /* lm_now_ns */
	nng_aio *aio;              /* plain requests: replied once every choice ended */
	/* Under mu: the first error a choice ended with (code 0: none). */
	int err_code;
	char err_msg[512];
	/* Streams, under mu: the stream once started, events queued before it, and whether the
	 * scheduler is done (then whoever comes second frees the call). */
	pthread_mutex_t mu;
	struct lm_http_stream *st;
	struct lm_buf early;
	bool sched_done, started;
	_Atomic bool client_gone;
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

static void api_choice_fini(struct api_choice *h)
{
	free(h->piece);
	lm_buf_fini(&h->text);
	lm_buf_fini(&h->pending);
	lm_buf_fini(&h->raw);
	free(h->gen);
	cJSON_Delete(h->lp_tokens);
	cJSON_Delete(h->lp_values);
	cJSON_Delete(h->lp_top);
	cJSON_Delete(h->lp_offsets);
	cJSON_Delete(h->lp_content);
}

static void api_call_free(struct api_call *c)
{
	for (int32_t i = 0; i < c->n_ch; i++)
		api_choice_fini(&c->ch[i]);
	free(c->ch);
	api_request_fini(&c->req);
	api_native_fini(&c->nat);
	lm_buf_fini(&c->early);
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
	for (int32_t i = 0; i < c->n_ch; i++) {
		uint64_t id = atomic_load(&c->ch[i].live_id);
		if (id != 0)
			sched_cancel(c->api->cfg.sched, id);
	}
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
static cJSON *api_chunk(const struct api_call *c, int32_t index, const char *text, bool role,
			const char *finish)
{
	bool chat = c->req.kind == API_CHAT;
	cJSON *o = api_head(c, chat ? "chat.completion.chunk" : "text_completion");
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
	cJSON_AddNumberToObject(ch, "index", index);
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

/* The tokens every choice generated; *first: when the first of them came (0: none yet). */
static int32_t api_generated(const struct api_call *c, uint64_t *first)
{
	int32_t gen = 0;
	*first = 0;
	for (int32_t i = 0; i < c->n_ch; i++) {
		gen += c->ch[i].n_gen;
		if (c->ch[i].n_gen > 0 && (*first == 0 || c->ch[i].t_first < *first))
			*first = c->ch[i].t_first;
	}
	return gen;
}

/* llama-server's timings up to end_ns of n_gen tokens from n_seq sequences, the first of them
 * at first: prompt (submit to first token) and generation (each sequence's tokens after its
 * first). */
static cJSON *api_llama_timings(const struct api_call *c, int32_t n_gen, int32_t n_seq,
				uint64_t first, int32_t cached, uint64_t end_ns)
{
	cJSON *t = cJSON_CreateObject();
	int32_t n_dec = n_gen > n_seq ? n_gen - n_seq : 0;
	double prefill = n_gen > 0 ? api_ms(c->t_submit, first) : 0;
	double decode = n_dec > 0 ? api_ms(first, end_ns) : 0;
	/* llama-server's prompt_n: the prompt's tokens computed, those not reused (cache_n). */
	int32_t n_new = c->req.n_prompt - cached;
	cJSON_AddNumberToObject(t, "cache_n", cached);
	cJSON_AddNumberToObject(t, "prompt_n", n_new);
	cJSON_AddNumberToObject(t, "prompt_ms", prefill);
	cJSON_AddNumberToObject(t, "prompt_per_token_ms", n_new > 0 ? prefill / n_new : 0);
	cJSON_AddNumberToObject(t, "prompt_per_second", prefill > 0 ? 1e3 * n_new / prefill : 0);
	cJSON_AddNumberToObject(t, "predicted_n", n_gen);
	cJSON_AddNumberToObject(t, "predicted_ms", decode);
	cJSON_AddNumberToObject(t, "predicted_per_token_ms", n_dec > 0 ? decode / n_dec : 0);
	cJSON_AddNumberToObject(t, "predicted_per_second", decode > 0 ? 1e3 * n_dec / decode : 0);
	return t;
}

/* One choice's llama-server timings up to end_ns. */
static cJSON *api_native_timings(const struct api_choice *h, uint64_t end_ns)
{
	return api_llama_timings(h->call, h->n_gen, 1, h->t_first, h->cached, end_ns);
}

/* The whole call's llama-server timings up to end_ns: every choice's tokens. */
static cJSON *api_call_timings(const struct api_call *c, uint64_t end_ns)
{
	uint64_t first;
	int32_t gen = api_generated(c, &first);
	return api_llama_timings(c, gen, c->n_ch, first, c->ch[0].cached, end_ns);
}

/* The request's usage: the prompt counted once, however many choices shared it; every
 * generated token of every choice (best_of's unreturned ones too, as OpenAI counts them). */
static void api_add_usage(const struct api_call *c, cJSON *o, bool timings)
{
	uint64_t first;
	int32_t gen = api_generated(c, &first);
	cJSON_DeleteItemFromObject(o, "usage");
	cJSON *u = cJSON_AddObjectToObject(o, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", c->req.n_prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", gen);
	cJSON_AddNumberToObject(u, "total_tokens", c->req.n_prompt + gen);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"),
				"cached_tokens", c->ch[0].cached);
	if (!timings)
		return;
	/* Timings in the manner of llama.cpp's server: prefill is submit to first token. */
	cJSON *t = cJSON_AddObjectToObject(o, "timings");
	double prefill = gen > 0 ? api_ms(c->t_submit, first) : 0;
	double decode = gen > c->n_ch ? api_ms(first, c->t_done) : 0;
	cJSON_AddNumberToObject(t, "prompt_n", c->req.n_prompt);
	cJSON_AddNumberToObject(t, "prompt_ms", prefill);
	cJSON_AddNumberToObject(t, "predicted_n", gen);
	cJSON_AddNumberToObject(t, "predicted_ms", decode);
	if (c->req.want_ids) {
		cJSON *p = cJSON_AddArrayToObject(o, "prompt_token_ids");
		for (int32_t i = 0; i < c->req.n_prompt; i++)
			cJSON_AddItemToArray(p, cJSON_CreateNumber(c->req.prompt[i]));
	}
}

/* A choice's generated ids. */
static cJSON *api_ids(const struct api_choice *h)
{
	cJSON *ids = cJSON_CreateArray();
	for (int32_t i = 0; i < h->n_gen; i++)
		cJSON_AddItemToArray(ids, cJSON_CreateNumber(h->gen[i]));
	return ids;
}

/* A tool call as OpenAI writes it: {"id", "type": "function", "function": {"name",
 * "arguments"}}; with index in a stream's delta. */
static cJSON *api_tool_call(const struct tool_call *tc, int index)
{
	char id[TOOL_CALL_ID_LEN];
	tool_call_id(id);
	cJSON *o = cJSON_CreateObject();
	if (index >= 0)
		cJSON_AddNumberToObject(o, "index", index);
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddStringToObject(o, "type", "function");
	cJSON *fn = cJSON_AddObjectToObject(o, "function");
	cJSON_AddStringToObject(fn, "name", tc->name);
	cJSON_AddStringToObject(fn, "arguments", tc->args);
	return o;
}

/* A plain answer's message from the parsed output: content (null when there are calls and no
 * text), reasoning_content, tool_calls. Returns whether there were calls. */
static bool api_parsed_message(cJSON *m, const struct tool_parsed *p)
{
	bool blank = true;
	for (size_t i = 0; i < p->content.len && blank; i++)
		blank = p->content.p[i] == ' ' || p->content.p[i] == '\n';
	if (p->n_calls > 0 && blank)
		cJSON_AddNullToObject(m, "content");
	else
		cJSON_AddStringToObject(m, "content", p->content.p != NULL ? p->content.p : "");
	if (p->reasoning.len > 0)
		cJSON_AddStringToObject(m, "reasoning_content", p->reasoning.p);
	if (p->n_calls == 0)
		return false;
	cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
	for (int i = 0; i < p->n_calls; i++)
		cJSON_AddItemToArray(calls, api_tool_call(&p->calls[i], -1));
	return true;
}

/* A chat choice's message: its text, or with a parsed output its content, reasoning and tool
 * calls. Returns the finish reason, "tool_calls" where calls ended it. */
static const char *api_message(struct api_call *c, struct api_choice *h, cJSON *m)
{
	const char *text = h->text.p != NULL ? h->text.p : "";
	const char *finish = h->finish != NULL ? h->finish : "length";
	struct tool_parsed p;
	struct tool_want w = api_tool_want(&c->req);
	if (!c->req.parse_output ||
	    tool_parse(&c->req.syntax, &w, text, h->text.len, true, &p) != 0) {
		cJSON_AddStringToObject(m, "content", text);
		return finish;
	}
	if (api_parsed_message(m, &p) && strcmp(finish, "stop") == 0)
		finish = "tool_calls";
	tool_parsed_fini(&p);
	return finish;
}

/* One choice of a plain answer, at place `index`. */
static cJSON *api_answer_choice(struct api_call *c, struct api_choice *h, int32_t index)
{
	bool chat = c->req.kind == API_CHAT;
	cJSON *ch = cJSON_CreateObject();
	cJSON_AddNumberToObject(ch, "index", index);
	const char *text = h->text.p != NULL ? h->text.p : "";
	const char *finish = h->finish != NULL ? h->finish : "length";
	cJSON *lp = NULL;
	if (chat) {
		cJSON *m = cJSON_AddObjectToObject(ch, "message");
		cJSON_AddStringToObject(m, "role", "assistant");
		finish = api_message(c, h, m);
		cJSON_AddNullToObject(m, "refusal");
		if (c->req.logprobs) {
			lp = cJSON_CreateObject();
			cJSON_AddItemToObject(lp, "content", h->lp_content);
			h->lp_content = NULL;
		}
	} else {
		cJSON_AddStringToObject(ch, "text", text);
		if (c->req.n_logprobs > 0) {
			lp = cJSON_CreateObject();
			cJSON_AddItemToObject(lp, "tokens", h->lp_tokens);
			cJSON_AddItemToObject(lp, "token_logprobs", h->lp_values);
			cJSON_AddItemToObject(lp, "top_logprobs", h->lp_top);
			cJSON_AddItemToObject(lp, "text_offset", h->lp_offsets);
			h->lp_tokens = h->lp_values = h->lp_top = h->lp_offsets = NULL;
		}
	}
	cJSON_AddItemToObject(ch, "logprobs", lp != NULL ? lp : cJSON_CreateNull());
	cJSON_AddStringToObject(ch, "finish_reason", finish);
	if (c->n_ch > 1) {
		api_json_add_u64(ch, "seed", h->seed);
		if (c->req.want_ids)
			cJSON_AddItemToObject(ch, "token_ids", api_ids(h));
	}
	return ch;
}

/* best_of: the order of the choices by their sums of logprobs, highest first (ties: the
 * earlier seed first). */
static void api_rank(const struct api_call *c, int32_t *order)
{
	for (int32_t i = 0; i < c->n_ch; i++) {
		int32_t k = i;
		while (k > 0 && c->ch[order[k - 1]].sum_lp < c->ch[i].sum_lp) {
			order[k] = order[k - 1];
			k--;
		}
		order[k] = i;
	}
}

/* The whole answer of a plain request: its n best choices (all of them without best_of). */
static cJSON *api_answer(struct api_call *c)
{
	bool chat = c->req.kind == API_CHAT;
	cJSON *o = api_head(c, chat ? "chat.completion" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	int32_t order[API_MAX_N];
	api_rank(c, order);
	if (c->req.best_of == c->req.n)
		for (int32_t i = 0; i < c->n_ch; i++)
			order[i] = i;
	for (int32_t i = 0; i < c->req.n; i++)
		cJSON_AddItemToArray(choices, api_answer_choice(c, &c->ch[order[i]], i));
	if (c->req.want_ids && c->n_ch == 1)
		cJSON_AddItemToObject(o, "token_ids", api_ids(&c->ch[0]));
	api_add_usage(c, o, true);
	return o;
}

/* ------------------------------------------------------------------ llama-server's shapes */

/* A token's entry of completion_probabilities: chat's entry with the ids added. */
static cJSON *api_native_logprob(const struct api *a, int32_t token, float logprob,
				 const int32_t *ids, const float *lp, int32_t n)
{
	cJSON *e = api_chat_logprob(a, token, logprob, ids, lp, n);
	cJSON_AddNumberToObject(e, "id", token);
	cJSON *tops = cJSON_GetObjectItem(e, "top_logprobs");
	int32_t i = 0;
	for (cJSON *t = tops != NULL ? tops->child : NULL; t != NULL && i < n; t = t->next, i++)
		cJSON_AddNumberToObject(t, "id", ids[i]);
	return e;
}

/* The settings choice h ran with, in llama-server's names. */
static cJSON *api_native_settings(const struct api_choice *h)
{
	const struct api_call *c = h->call;
	cJSON *g = cJSON_CreateObject();
	cJSON_AddNumberToObject(g, "n_predict", c->nat.n_predict);
	api_json_add_u64(g, "seed", h->seed);
	cJSON_AddNumberToObject(g, "temperature", c->req.sampling.temperature);
	cJSON_AddNumberToObject(g, "top_k", c->req.sampling.top_k);
	cJSON_AddNumberToObject(g, "top_p", c->req.sampling.top_p);
	cJSON_AddNumberToObject(g, "min_p", c->req.sampling.min_p);
	cJSON_AddNumberToObject(g, "n_probs", c->nat.n_probs);
	cJSON_AddBoolToObject(g, "stream", c->req.stream);
	cJSON *stops = cJSON_AddArrayToObject(g, "stop");
	for (int i = 0; i < c->req.n_stops; i++)
		cJSON_AddItemToArray(stops, cJSON_CreateString(c->req.stops[i]));
	return g;
}

/* The prompt as text, control tokens (BOS) as their vocabulary text, as llama-server shows it. */
static void api_native_prompt_text(const struct api_call *c, cJSON *o)
{
	const tok_vocab *v = c->api->cfg.vocab;
	struct lm_buf b = {0};
	for (int32_t i = 0; i < c->req.n_prompt; i++) {
		size_t len = 0;
		int32_t id = c->req.prompt[i];
		const char *p = tok_attr(v, id) & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)
					? tok_text(v, id, &len)
					: tok_piece(v, id, &len);
		if (p != NULL)
			lm_buf_add(&b, p, len);
	}
	char *s = b.len > 0 && lm_utf8_valid(b.p, b.len) && memchr(b.p, '\0', b.len) == NULL
			  ? strndup(b.p, b.len)
			  : NULL;
	cJSON_AddStringToObject(o, "prompt", s != NULL ? s : "");
	free(s);
	lm_buf_fini(&b);
}

/* llama-server's stop_type of an ended choice: a stop string, the end of generation, or
 * the token limit. */
static const char *api_native_stop_type(const struct api_choice *h)
{
	if (h->stop_hit)
		return "word";
	return h->finish != NULL && strcmp(h->finish, "stop") == 0 ? "eos" : "limit";
}

/* A stream's event for one token of choice h, or (final) the whole answer of llama-server's
 * /completion: content, the generated ids, counts, settings, why it stopped, timings. */
static cJSON *api_native_answer(struct api_choice *h, const char *content, int32_t token,
				bool final)
{
	struct api_call *c = h->call;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "index", h->index);
	cJSON_AddStringToObject(o, "content", content);
	cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
	if (!final)
		cJSON_AddItemToArray(toks, cJSON_CreateNumber(token));
	for (int32_t i = 0; final && !c->req.stream && c->nat.return_tokens && i < h->n_gen; i++)
		cJSON_AddItemToArray(toks, cJSON_CreateNumber(h->gen[i]));
	cJSON_AddNumberToObject(o, "id_slot", -1);
	cJSON_AddBoolToObject(o, "stop", final);
	if (final)
		cJSON_AddStringToObject(o, "model", c->api->cfg.model_name);
	cJSON_AddNumberToObject(o, "tokens_predicted", h->n_gen);
	cJSON_AddNumberToObject(o, "tokens_evaluated", c->req.n_prompt);
	if (!final)
		return o;
	cJSON_AddItemToObject(o, "generation_settings", api_native_settings(h));
	api_native_prompt_text(c, o);
	cJSON_AddBoolToObject(o, "has_new_line", h->new_line);
	cJSON_AddBoolToObject(o, "truncated", false); /* a prompt that does not fit is a 400 */
	cJSON_AddStringToObject(o, "stop_type", api_native_stop_type(h));
	cJSON_AddStringToObject(o, "stopping_word", h->stop_word);
	/* The sequence's positions held in the cache at its end. */
	cJSON_AddNumberToObject(o, "tokens_cached", c->req.n_prompt + h->n_gen);
	cJSON_AddItemToObject(o, "timings", api_native_timings(h, c->t_done));
	if (!c->req.stream && c->nat.n_probs > 0) {
		cJSON_AddItemToObject(o, "completion_probabilities", h->lp_content);
		h->lp_content = NULL;
	}
	if (c->nat.response_fields == NULL)
		return o;
	cJSON *few = api_native_fields(o, c->nat.response_fields);
	cJSON_Delete(o);
	return few;
}

/* Choice h's final answer (a stream's last event): its text, or what a stream held back. */
static cJSON *api_native_final(struct api_choice *h)
{
	return api_native_answer(h, h->text.p != NULL ? h->text.p : "", -1, true);
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

/* The logprobs of a stream's chunk of one token, into its choice ch. */
static void api_chunk_logprobs(struct api_choice *h, cJSON *ch, int32_t token, float logprob,
			       const int32_t *top_ids, const float *top_lp, int32_t n_top)
{
	const struct api *a = h->call->api;
	cJSON *lp = cJSON_CreateObject();
	if (h->call->req.kind == API_CHAT) {
		cJSON *content = cJSON_AddArrayToObject(lp, "content");
		cJSON_AddItemToArray(content,
				     api_chat_logprob(a, token, logprob, top_ids, top_lp, n_top));
	} else {
		cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "tokens"),
				     api_token_string(a, token));
		cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "token_logprobs"),
				     cJSON_CreateNumber(logprob));
		cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "top_logprobs"),
				     api_top_completion(a, top_ids, top_lp, n_top));
	}
	cJSON_ReplaceItemInObject(ch, "logprobs", lp);
}

/* What b holds past *sent, into *out (malloc'd; left NULL when nothing is new). */
static void api_take_new(const struct lm_buf *b, size_t *sent, char **out)
{
	if (b->len <= *sent)
		return;
	*out = strndup(b->p + *sent, b->len - *sent);
	*sent = b->len;
}

/* A stream with a parsed output: text joins what came so far, and the new content and
 * reasoning of its partial parse go out (a partial parse is a prefix of any later one). */
static void api_parse_delta(struct api_choice *h, const char *text, size_t len, char **content,
			    char **reasoning)
{
	struct api_call *c = h->call;
	struct tool_parsed p;
	struct tool_want w = api_tool_want(&c->req);
	if (lm_buf_add(&h->raw, text, len) != 0 ||
	    tool_parse(&c->req.syntax, &w, h->raw.p, h->raw.len, false, &p) != 0)
		return;
	api_take_new(&p.content, &h->sent_content, content);
	api_take_new(&p.reasoning, &h->sent_reasoning, reasoning);
	tool_parsed_fini(&p);
}

/* A chat chunk's delta gets reasoning_content (taken). */
static void api_add_reasoning(cJSON *chunk, char *reasoning)
{
	if (reasoning == NULL)
		return;
	cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(chunk, "choices"), 0);
	cJSON_AddStringToObject(cJSON_GetObjectItem(ch, "delta"), "reasoning_content", reasoning);
	free(reasoning);
}

/* A /completion stream's event for one token of choice h; text without a token (the tail
 * released at the end) waits for the last event. */
static void api_native_emit(struct api_choice *h, const char *text, size_t len, int32_t token,
			    float logprob, const int32_t *top_ids, const float *top_lp,
			    int32_t n_top)
{
	struct api_call *c = h->call;
	if (token < 0) {
		lm_buf_add(&h->text, text, len);
		return;
	}
	char *piece = strndup(text, len);
	if (piece == NULL)
		return;
	cJSON *o = api_native_answer(h, piece, token, false);
	free(piece);
	if (c->req.timings_per_token)
		cJSON_AddItemToObject(o, "timings", api_native_timings(h, lm_now_ns()));
	if (c->nat.n_probs > 0)
		cJSON_AddItemToArray(
			cJSON_AddArrayToObject(o, "completion_probabilities"),
			api_native_logprob(c->api, token, logprob, top_ids, top_lp, n_top));
	api_stream_json(c, o);
}

/* Emits text that can no longer be part of a stop string, with the token that made it. */
static void api_emit(struct api_choice *h, const char *text, size_t len, int32_t token,
		     float logprob, const int32_t *top_ids, const float *top_lp, int32_t n_top)
{
	struct api_call *c = h->call;
	if (len > 0 && memchr(text, '\n', len) != NULL)
		h->new_line = true;
	if (!c->req.stream) {
		lm_buf_add(&h->text, text, len);
		return;
	}
	if (c->native) {
		api_native_emit(h, text, len, token, logprob, top_ids, top_lp, n_top);
		return;
	}
	bool chat = c->req.kind == API_CHAT;
	bool with_lp = token >= 0 && c->req.logprobs;
	char *piece = NULL, *reasoning = NULL;
	if (chat && c->req.parse_output)
		api_parse_delta(h, text, len, &piece, &reasoning);
	else if (len > 0 || !chat)
		piece = strndup(text, len);
	if (chat && piece == NULL && reasoning == NULL && !with_lp &&
	    !(token >= 0 && c->req.want_ids))
		return; /* nothing to tell a chat client yet */
	cJSON *o = api_chunk(c, h->index, piece != NULL ? piece : chat ? NULL : "", false, NULL);
	free(piece);
	api_add_reasoning(o, reasoning);
	if (with_lp)
		api_chunk_logprobs(h, cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0),
				   token, logprob, top_ids, top_lp, n_top);
	if (token >= 0 && c->req.want_ids)
		cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "token_ids"),
				     cJSON_CreateNumber(token));
	if (c->req.timings_per_token)
		cJSON_AddItemToObject(o, "timings", api_native_timings(h, lm_now_ns()));
	api_stream_json(c, o);
}

/* Moves detokenized text from `pending` out, holding back the longest tail that could still
 * begin a stop string (api_stop_cut); returns true when a stop string was found (text after it
 * is dropped). */
static bool api_release_text(struct api_choice *h, bool final, int32_t token, float logprob,
			     const int32_t *top_ids, const float *top_lp, int32_t n_top)
{
	const struct api_request *r = &h->call->req;
	bool hit;
	size_t cut = api_stop_cut(r, h->pending.p, h->pending.len, final, &hit);
	for (int i = 0; hit && i < r->n_stops; i++) {
		size_t n = strlen(r->stops[i]);
		if (cut + n <= h->pending.len && memcmp(h->pending.p + cut, r->stops[i], n) == 0) {
			snprintf(h->stop_word, sizeof h->stop_word, "%s", r->stops[i]);
			break;
		}
	}
	if (cut > 0 || token >= 0)
		api_emit(h, h->pending.p ? h->pending.p : "", cut, token, logprob, top_ids, top_lp,
			 n_top);
	if (cut > 0) /* pending.p is NULL until text arrives */
		memmove(h->pending.p, h->pending.p + cut, h->pending.len - cut);
	h->pending.len -= cut;
	if (hit)
		h->pending.len = 0;
	return hit;
}

/* A plain request's logprobs of one token. */
static void api_keep_logprobs(struct api_choice *h, int32_t token, float logprob,
			      const int32_t *top_ids, const float *top_lp, int32_t n_top,
			      size_t offset)
{
	const struct api *a = h->call->api;
	if (h->call->native || h->call->req.kind == API_CHAT) {
		cJSON_AddItemToArray(h->lp_content,
				     (h->call->native ? api_native_logprob : api_chat_logprob)(
					     a, token, logprob, top_ids, top_lp, n_top));
		return;
	}
	cJSON_AddItemToArray(h->lp_tokens, api_token_string(a, token));
	cJSON_AddItemToArray(h->lp_values, cJSON_CreateNumber(logprob));
	cJSON_AddItemToArray(h->lp_top, api_top_completion(a, top_ids, top_lp, n_top));
	cJSON_AddItemToArray(h->lp_offsets, cJSON_CreateNumber((double)offset));
}

/* A token's text into pending; returns its length. A parsed output keeps the text of the
 * control tokens that are its syntax's markers (<|channel|>, <|tool_call>, [TOOL_CALLS], ...),
 * which plain text leaves out, as llama-server keeps its "preserved tokens". */
static size_t api_piece(struct api_choice *h, int32_t token)
{
	const struct api_request *r = &h->call->req;
	const tok_vocab *v = h->call->api->cfg.vocab;
	size_t n = 0, len = 0;
	if (tok_stream_push(v, &h->ts, token, h->piece, tok_stream_cap(v), &n) != 0)
		return 0;
	const char *t = NULL;
	if (n == 0 && r->parse_output && (tok_attr(v, token) & TOK_ATTR_CONTROL) != 0 &&
	    !tok_is_eog(v, token))
		t = tok_text(v, token, &len);
	if (t != NULL && len > 0 && tool_syntax_marker(&r->syntax, t, len)) {
		n = tok_stream_flush(&h->ts, h->piece, tok_stream_cap(v));
		lm_buf_add(&h->pending, h->piece, n);
		lm_buf_add(&h->pending, t, len);
		return n + len;
	}
	lm_buf_add(&h->pending, h->piece, n);
	return n;
}

static void api_on_token(void *arg, int32_t token, float logprob, const int32_t *top_ids,
			 const float *top_lp, int32_t n_top)
{
	struct api_choice *h = arg;
	struct api_call *c = h->call;
	if (h->n_gen == 0)
		h->t_first = lm_now_ns();
	if (h->n_gen == h->cap_gen) {
		int32_t cap = h->cap_gen ? h->cap_gen * 2 : 64;
		int32_t *g = realloc(h->gen, (size_t)cap * sizeof *g);
		if (g == NULL)
			return;
		h->gen = g;
		h->cap_gen = cap;
	}
	h->gen[h->n_gen++] = token;
	if (h->stop_hit)
		return;
	h->sum_lp += logprob;
	size_t n = api_piece(h, token);
	if (!c->req.stream && c->req.logprobs)
		api_keep_logprobs(h, token, logprob, top_ids, top_lp, n_top,
				  h->text.len + h->pending.len - n);
	if (api_release_text(h, false, token, logprob, top_ids, top_lp, n_top)) {
		h->stop_hit = true;
		sched_cancel(c->api->cfg.sched, h->seq_id);
	}
}

static uint16_t api_status_of(int code)
{
	return code == LM_EUNAVAILABLE || code == LM_ETIMEOUT ? 503 : code == LM_EBUSY ? 429 : 500;
}

/* A stream's end, once every choice ended: usage when asked, [DONE] (not /completion's, which
 * llama-server ends without it); an error was sent as an event when it happened. */
static void api_stream_end(struct api_call *c)
{
	if (c->err_code == 0 && c->req.include_usage && !c->native) {
		cJSON *u = api_head(c, c->req.kind == API_CHAT ? "chat.completion.chunk"
							       : "text_completion");
		cJSON_AddArrayToObject(u, "choices");
		api_add_usage(c, u, false);
		if (c->req.timings_per_token)
			cJSON_AddItemToObject(u, "timings", api_call_timings(c, c->t_done));
		api_stream_json(c, u);
	}
	if (!c->native)
		api_stream_raw(c, "[DONE]");
	pthread_mutex_lock(&c->mu);
	c->sched_done = true;
	if (c->st != NULL)
		lm_httpd_stream_end(c->st);
	c->st = NULL;
	pthread_mutex_unlock(&c->mu);
}

/* A stream's parsed output at its end: what the final parse adds to the content and the
 * reasoning, then each call in a chunk of its own (delta.tool_calls with its index, which the
 * SDKs assemble). Returns whether there were calls. */
static bool api_stream_parsed_end(struct api_choice *h)
{
	struct api_call *c = h->call;
	struct tool_parsed p;
	struct tool_want w = api_tool_want(&c->req);
	if (tool_parse(&c->req.syntax, &w, h->raw.p, h->raw.len, true, &p) != 0)
		return false;
	char *content = NULL, *reasoning = NULL;
	api_take_new(&p.content, &h->sent_content, &content);
	api_take_new(&p.reasoning, &h->sent_reasoning, &reasoning);
	if (content != NULL || reasoning != NULL) {
		cJSON *o = api_chunk(c, h->index, content, false, NULL);
		api_add_reasoning(o, reasoning);
		api_stream_json(c, o);
	}
	free(content);
	for (int i = 0; i < p.n_calls; i++) {
		cJSON *o = api_chunk(c, h->index, NULL, false, NULL);
		cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
		cJSON *calls =
			cJSON_AddArrayToObject(cJSON_GetObjectItem(ch, "delta"), "tool_calls");
		cJSON_AddItemToArray(calls, api_tool_call(&p.calls[i], i));
		api_stream_json(c, o);
	}
	bool calls = p.n_calls > 0;
	tool_parsed_fini(&p);
	return calls;
}

/* A stream's choice ended: its last chunk (a completion's last, the last of all, carries the
 * usage, as `layermesh generate` reads it), or the error as an event. */
static void api_stream_choice_done(struct api_choice *h, enum sched_finish why, int code,
				   const char *msg, bool last)
{
	struct api_call *c = h->call;
	if (why == SCHED_FINISH_ERROR) {
		char *e = lm_httpd_error_json("server_error", NULL, msg ? msg : lm_strerror(code));
		if (e != NULL) {
			api_stream_raw(c, e);
			free(e);
		}
	} else if (c->native && (why != SCHED_FINISH_CANCEL || h->stop_hit)) {
		/* /completion's last event: the whole answer, its text the tail held back. */
		api_stream_json(c, api_native_final(h));
	} else if (why != SCHED_FINISH_CANCEL || h->stop_hit) {
		const char *finish = h->finish;
		if (c->req.kind == API_CHAT && c->req.parse_output && api_stream_parsed_end(h) &&
		    strcmp(finish, "stop") == 0)
			finish = "tool_calls";
		cJSON *o =
			api_chunk(c, h->index, c->req.kind == API_CHAT ? NULL : "", false, finish);
		if (c->req.kind == API_COMPLETION && last)
			api_add_usage(c, o, true);
		api_stream_json(c, o);
	}
}

/* The first error of the call is its answer; the other choices are cancelled. */
static void api_call_failed(struct api_call *c, int code, const char *msg)
{
	pthread_mutex_lock(&c->mu);
	bool first = c->err_code == 0;
	if (first) {
		c->err_code = code != 0 ? code : LM_EIO;
		snprintf(c->err_msg, sizeof c->err_msg, "%s", msg ? msg : lm_strerror(code));
	}
	pthread_mutex_unlock(&c->mu);
	for (int32_t i = 0; first && i < c->n_ch; i++) {
		uint64_t id = atomic_load(&c->ch[i].live_id);
		if (id != 0)
			sched_cancel(c->api->cfg.sched, id);
	}
}

/* Choice h ended (from the scheduler, or a submit that failed). The last choice to end
 * answers the call and lets the scheduler's reference go. */
static void api_choice_done(struct api_choice *h, enum sched_finish why, int code, const char *msg)
{
	struct api_call *c = h->call;
	if (!h->stop_hit && why != SCHED_FINISH_ERROR) {
		char tail[8];
		size_t n = tok_stream_flush(&h->ts, tail, sizeof tail);
		lm_buf_add(&h->pending, tail, n);
		if (api_release_text(h, true, -1, 0, NULL, NULL, 0))
			h->stop_hit = true;
	}
	h->finish = h->stop_hit || why == SCHED_FINISH_STOP ? "stop" : "length";
	if (why == SCHED_FINISH_ERROR)
		api_call_failed(c, code, msg);
	bool last = atomic_fetch_add(&c->n_done, 1) + 1 == c->n_ch;
	if (last)
		c->t_done = lm_now_ns();
	if (c->req.stream)
		api_stream_choice_done(h, why, code, msg, last);
	if (!last)
		return;
	if (c->req.stream)
		api_stream_end(c);
	else if (c->err_code != 0)
		lm_httpd_reply_error(c->aio, api_status_of(c->err_code), "server_error", NULL, "%s",
				     c->err_msg);
	else
		lm_httpd_reply_json(c->aio, 200,
				    c->native ? api_native_final(&c->ch[0]) : api_answer(c));
	api_call_unref(c);
}

static void api_on_done(void *arg, enum sched_finish why, int code, const char *msg)
{
	api_choice_done(arg, why, code, msg);
}

/* ------------------------------------------------------------------ the handler */

static int api_choice_init(struct api_call *c, struct api_choice *h, int32_t index)
{
	h->call = c;
	h->index = index;
	/* Each choice draws from its own seed: the request's plus its index. */
	h->seed = c->req.sampling.seed + (uint64_t)index;
	h->piece = malloc(tok_stream_cap(c->api->cfg.vocab));
	tok_stream_init(&h->ts);
	if (c->native || c->req.kind == API_CHAT) {
		h->lp_content = cJSON_CreateArray();
	} else {
		h->lp_tokens = cJSON_CreateArray();
		h->lp_values = cJSON_CreateArray();
		h->lp_top = cJSON_CreateArray();
		h->lp_offsets = cJSON_CreateArray();
	}
	return h->piece != NULL ? 0 : LM_ENOMEM;
}

static struct api_call *api_call_new(struct api *a, struct api_request *req, struct api_native *nat)
{
	struct api_call *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	pthread_mutex_init(&c->mu, NULL);
	c->req = *req;
	memset(req, 0, sizeof *req);
	if (nat != NULL) {
		c->native = true;
		c->nat = *nat;
		memset(nat, 0, sizeof *nat);
	}
	c->api = a;
	c->created = (long)time(NULL);
	snprintf(c->id, sizeof c->id, "%s-%lx%06llx", c->req.kind == API_CHAT ? "chatcmpl" : "cmpl",
		 (unsigned long)c->created, (unsigned long long)atomic_fetch_add(&a->next_id, 1));
	/* Without a seed: the server's ([coordinator] seed), else (or for /completion's seed -1)
	 * a fresh one. */
	if (!c->req.seed_given)
		c->req.sampling.seed = a->cfg.seed >= 0 && !c->nat.draw_seed ? (uint64_t)a->cfg.seed
									     : api_random_seed();
	int32_t n = c->req.best_of > c->req.n ? c->req.best_of : c->req.n;
	c->ch = calloc((size_t)(n > 0 ? n : 1), sizeof *c->ch);
	c->n_ch = c->ch != NULL ? (n > 0 ? n : 1) : 0;
	bool ok = c->ch != NULL;
	for (int32_t i = 0; ok && i < c->n_ch; i++)
		ok = api_choice_init(c, &c->ch[i], i) == 0;
	if (!ok) {
		api_call_free(c);
		return NULL;
	}
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
		/* OpenAI's first chunk of each choice: the role, before any content. */
		struct lm_buf first = {0};
		for (int32_t i = 0; i < c->n_ch; i++) {
			cJSON *o = api_chunk(c, i, "", true, NULL);
			char *s = cJSON_PrintUnformatted(o);
			cJSON_Delete(o);
			lm_buf_printf(&first, "data: %s\n\n", s != NULL ? s : "{}");
			free(s);
		}
		pthread_mutex_lock(&c->mu);
		if (c->early.len > 0)
			lm_buf_add(&first, c->early.p, c->early.len);
		lm_buf_fini(&c->early);
		c->early = first;
		pthread_mutex_unlock(&c->mu);
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
		for (int32_t i = 0; i < c->n_ch; i++)
			sched_cancel(c->api->cfg.sched, atomic_load(&c->ch[i].live_id));
		lm_httpd_reply_error(aio, 500, "server_error", NULL, "out of memory");
	}
}

/* Submits choice i: the first computes the prompt, the others take its rows (scheduler.h). */
static int api_submit_choice(struct api_call *c, int32_t i, lm_diag *d)
{
	struct api_choice *h = &c->ch[i];
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
			      .cached = &h->cached,
			      .share_prompt_of = i > 0 ? c->ch[0].seq_id : 0,
			      .on_token = api_on_token,
			      .on_done = api_on_done,
			      .arg = h};
	r.sampling.seed = h->seed;
	int rc = sched_submit(c->api->cfg.sched, &r, &h->seq_id, d);
	if (rc == 0)
		atomic_store(&h->live_id, h->seq_id);
	return rc;
}

/* More choices than the mesh has slots can never run together: refused (400). */
static bool api_check_choices(nng_aio *aio, const struct api *a, const struct api_request *req)
{
	int32_t n = req->best_of > req->n ? req->best_of : req->n;
	int32_t open = sched_open_slots(a->cfg.sched);
	if (n <= 1 || n <= open)
		return true;
	lm_httpd_refuse(aio, LM_HTTP_REFUSE_INVALID, 400, "invalid_request_error",
			req->best_of > req->n ? "best_of" : "n",
			"%d choices need %d sequences at once; this mesh runs at most %d ([model] "
			"slots)",
			(int)n, (int)n, (int)open);
	return false;
}

/* A parsed request's checks before it runs: its unknown fields named, its choices within the
 * mesh's slots. False: refused, and req finished. */
static bool api_admit(nng_aio *aio, const struct api *a, struct api_request *req)
{
	if (req->ignored[0] != '\0') {
		lm_httpd_add_header(aio, "X-Layermesh-Ignored-Fields", req->ignored);
		lm_debug("%s: ignored unknown fields: %s",
			 req->kind == API_CHAT ? "chat completion" : "completion", req->ignored);
	}
	if (!api_check_choices(aio, a, req)) {
		api_request_fini(req);
		return false;
	}
	return true;
}

/* Submits a parsed request (nat: llama-server's /completion, else NULL) and answers it. */
static void api_run(nng_aio *aio, struct api *a, struct api_request *req, struct api_native *nat)
{
	if (!api_admit(aio, a, req)) {
		if (nat != NULL)
			api_native_fini(nat);
		return;
	}
	struct api_call *c = api_call_new(a, req, nat);
	if (c == NULL) {
		api_request_fini(req);
		if (nat != NULL)
			api_native_fini(nat);
		lm_httpd_refuse(aio, LM_HTTP_REFUSE_INTERNAL, 500, "server_error", NULL,
				"out of memory");
		return;
	}
	lm_diag d = {{0}};
	c->t_submit = lm_now_ns();
	if (!c->req.stream)
		c->aio = aio;
	atomic_store(&c->refs, 2);
	/* Before the submit: a plain request is answered from the scheduler's thread, after
	 * which the aio is no longer this request's. */
	lm_httpd_on_gone(aio, api_gone, c);
	int rc = api_submit_choice(c, 0, &d);
	if (rc != 0) {
		api_refuse_submit(aio, rc, &d);
		api_call_free(c);
		return;
	}
	/* A later choice the scheduler refuses (its queue filled meanwhile) ends the call with
	 * that error, the ones submitted cancelled. */
	for (int32_t i = 1; i < c->n_ch; i++) {
		if (rc == 0)
			rc = api_submit_choice(c, i, &d);
		if (rc != 0)
			api_choice_done(&c->ch[i], SCHED_FINISH_ERROR, rc, lm_diag_str(&d, rc));
	}
	if (atomic_load(&c->client_gone))
		for (int32_t i = 0; i < c->n_ch; i++)
			sched_cancel(a->cfg.sched, atomic_load(&c->ch[i].live_id));
	if (c->req.stream)
		api_start_stream(aio, c);
	api_call_unref(c); /* a plain request: the last choice's end replies */
}

static void api_refuse_parse(nng_aio *aio, struct api_error *err)
{
	lm_httpd_refuse(aio, err->reason, err->status, err->type, err->param, "%s", err->message);
	api_error_fini(err);
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
	if (rc != 0)
		api_refuse_parse(aio, &err);
	else
		api_run(aio, a, &req, NULL);
}

void api_generate_native(nng_aio *aio, struct api *a)
{
	const char *body;
	size_t len;
	if (!api_authorized(aio, a))
		return;
	lm_httpd_body(aio, &body, &len);
	struct api_native nat;
	struct api_request req;
	struct api_error err;
	char *plain = NULL;
	int rc = api_native_body(body, len, a->lim.max_seq, a->cfg.vocab, &plain, &nat, &err);
	if (rc == 0 &&
	    (rc = api_request_parse(plain, strlen(plain), &a->lim, a->cfg.vocab, &req, &err)) != 0)
		api_native_fini(&nat);
	free(plain);
	if (rc != 0)
		api_refuse_parse(aio, &err);
	else
		api_run(aio, a, &req, &nat);
}

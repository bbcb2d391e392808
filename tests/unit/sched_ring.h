/* sched_ring.h — the scheduler's tests' harness: the real scheduler against a real ring.
 *
 * The ring is two real stages (worker/stage.h) of a synthetic f32 llama (common/format/synth.h)
 * on inproc:// sockets: scheduler PUSH -> hop 0 [0, 2) -> hop 1 [2, 4) + head -> scheduler
 * PULL. Each hop is a thread that pulls a message, calls stage_handle and pushes the result on,
 * as worker/worker.c does; a message the stage refuses goes on as an ERROR about it, as there.
 *
 * Expected tokens come from the single-process engine (engine/engine.h, engine/sampler.h) run
 * greedily on the same file, never from the scheduler.
 *
 * Faults are injected at a hop: it can drop every message (a worker gone), refuse the batches
 * that carry one sequence (an ERROR down the ring), or cut short its output for them (a
 * malformed TOKENS message).
 *
 * Included by one test file each (test_scheduler.c, test_sched_samples.c): everything here is
 * static to it.
 */
#ifndef LM_TEST_SCHED_RING_H
#define LM_TEST_SCHED_RING_H

#include <criterion/criterion.h>
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/wire/transport.h"
#include "coordinator/sched/scheduler.h"
#include "common/format/synth.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "worker/stage.h"

#define T_SLOTS     4
#define T_MAX_SEQ   64
#define T_MAX_BATCH 32
#define T_VOCAB     300
#define T_LAYERS    4
#define T_HOPS      2
#define T_WAIT_MS   10000 /* how long a test waits for what must happen well before */
#define T_MAX_DRAFT 4

static char model_path[64];
/* The architecture make_model writes: NULL, llama; "qwen35", the same sizes with a recurrent
 * (gated delta-net) layer in each stage, before an attention one. Set before ring_up. */
static const char *model_arch;

static inline void make_model(void)
{
	if (model_path[0] != '\0')
		return; /* this test's process has it already */
	snprintf(model_path, sizeof model_path, "/tmp/lm_test_sched_XXXXXX");
	int fd = mkstemp(model_path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = model_path;
	o.dim = 64;
	o.layers = T_LAYERS;
	o.heads = 4;
	o.kv_heads = 2;
	o.ffn = 160;
	o.vocab = T_VOCAB;
	o.ctx = 128;
	o.type = LM_F32;
	o.seed = 11;
	if (model_arch != NULL) {
		o.arch = model_arch;
		o.full_attn_every = 2;
	}
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
}

/* ------------------------------------------------------------------ the reference */

/* The whole model in this process, one sequence at a time: what the mesh is held to. */
static struct lm_engine ref_eng;
static struct lm_sampler ref_smp;
static float ref_logits[T_VOCAB];

static bool ref_is_open;

static inline void ref_open(void)
{
	if (ref_is_open)
		return;
	ref_is_open = true;
	struct lm_engine_cfg ec = {.model = model_path,
				   .backend = "cpu",
				   .bo = {.n_threads = 1},
				   .populate = true,
				   .max_seq = T_MAX_SEQ,
				   .slots = 1,
				   .max_batch = T_MAX_SEQ,
				   .kv_types = {{LM_F32, LM_F32}, {LM_F32, LM_F32}}};
	lm_diag d = {{0}};
	cr_assert_eq(lm_engine_open(&ref_eng, &ec, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_sampler_init(&ref_smp, T_VOCAB), 0);
}

static inline void ref_close(void)
{
	lm_sampler_fini(&ref_smp);
	lm_engine_close(&ref_eng);
	ref_is_open = false;
}

/* Greedy generation as the scheduler defines its end: a stop id ends it unseen (STOP), else
 * max_tokens or a full context (LENGTH). out receives the generated tokens. */
static inline enum sched_finish ref_generate(const int32_t *prompt, int32_t n_prompt,
					     int32_t max_tokens, const int32_t *stop,
					     int32_t n_stop, int32_t *out, int32_t *n_out)
{
	struct lm_sampling greedy = {.temperature = 0, .top_p = 1};
	*n_out = 0;
	if (max_tokens == 0)
		return SCHED_FINISH_LENGTH;
	struct lm_tok_loc loc[T_MAX_SEQ];
	lm_diag d = {{0}};
	for (int32_t i = 0; i < n_prompt; i++)
		loc[i] = (struct lm_tok_loc){0, i};
	int32_t last = n_prompt - 1, row = 0;
	struct lm_batch b = {
		.n = n_prompt, .ids = prompt, .loc = loc, .n_out = 1, .out_rows = &last};
	cr_assert_eq(lm_forward_run(&ref_eng.fw, &b, NULL, NULL, ref_logits, &d), 0, "%s", d.msg);
	int32_t n_tok = n_prompt;
	for (;;) {
		int32_t t = lm_sample(&ref_smp, ref_logits, &greedy, (uint64_t)*n_out);
		for (int32_t i = 0; i < n_stop; i++)
			if (stop[i] == t)
				return SCHED_FINISH_STOP;
		out[(*n_out)++] = t;
		n_tok++;
		if (*n_out >= max_tokens || n_tok >= T_MAX_SEQ)
			return SCHED_FINISH_LENGTH;
		struct lm_tok_loc l = {0, n_tok - 1};
		struct lm_batch one = {.n = 1, .ids = &t, .loc = &l, .n_out = 1, .out_rows = &row};
		cr_assert_eq(lm_forward_run(&ref_eng.fw, &one, NULL, NULL, ref_logits, &d), 0, "%s",
			     d.msg);
	}
}

/* A prompt of n ids, different for each k. */
static inline void prompt_of(int32_t k, int32_t n, int32_t *p)
{
	for (int32_t i = 0; i < n; i++)
		p[i] = 3 + (i * 37 + k * 101 + i * i * k) % (T_VOCAB - 3);
}

/* A prompt that repeats a pattern of 3 ids, which n-gram lookup drafts from. */
static inline void prompt_repeating(int32_t k, int32_t n, int32_t *p)
{
	for (int32_t i = 0; i < n; i++)
		p[i] = 3 + ((i % 3) * 53 + k * 17) % (T_VOCAB - 3);
}

/* The model's weights in q8_0: a draft model as `layermesh quantize` would make one. */
static char draft_path[64];

static inline void make_draft_model(void)
{
	snprintf(draft_path, sizeof draft_path, "/tmp/lm_test_sched_draft_XXXXXX");
	int fd = mkstemp(draft_path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = draft_path;
	o.dim = 64;
	o.layers = T_LAYERS;
	o.heads = 4;
	o.kv_heads = 2;
	o.ffn = 160;
	o.vocab = T_VOCAB;
	o.ctx = 128;
	o.type = LM_Q8_0;
	o.seed = 11;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
}

/* A scheduler configuration that speculates with n-gram lookup (model false) or the q8_0 draft
 * model (true). */
static inline struct sched_cfg spec_cfg(struct sched_cfg cfg, bool model)
{
	lm_diag d = {{0}};
	cfg.max_draft = T_MAX_DRAFT;
	if (!model) {
		cr_assert_eq(spec_ngram_init(&cfg.draft, 1, 3, &d), 0, "%s", d.msg);
		return cfg;
	}
	make_draft_model();
	struct spec_draft_cfg dc = {.model = draft_path,
				    .n_vocab = T_VOCAB,
				    .slots = T_SLOTS,
				    .max_seq = T_MAX_SEQ,
				    .max_draft = T_MAX_DRAFT,
				    .threads = 1,
				    .kv = kv_types_uniform(LM_F32, LM_F32)};
	cr_assert_eq(spec_draft_init(&cfg.draft, &dc, &d), 0, "%s", d.msg);
	unlink(draft_path);
	return cfg;
}

/* ------------------------------------------------------------------ the ring */

enum hop_fault {
	HOP_PASS = 0,
	HOP_DROP = 1,         /* every message is lost here */
	HOP_REFUSE = 2,       /* a FORWARD carrying `fault_seq` is refused: ERROR down the ring */
	HOP_GARBLE = 3,       /* the answer to such a FORWARD is cut in half before it goes on */
	HOP_HOLD = 4,         /* nothing is taken: messages wait in the socket (a busy worker) */
	HOP_REFUSE_EVERY = 5, /* every refuse_every-th FORWARD carrying `fault_seq` is refused,
			       * up to refuse_max of them */
};

struct hop {
	struct wire_assign assign;
	struct stage st;
	pthread_mutex_t mu; /* the stage, between the hop's thread and the test */
	nng_socket pull, push;
	pthread_t thread;
	struct wire_buf ebuf;
	struct wire_scratch scratch; /* to look at a FORWARD's sequences */
	_Atomic bool stop;
	_Atomic int fault;
	_Atomic uint64_t fault_seq;
	_Atomic int dropped, refused, garbled, max_seqs; /* max_seqs: most sequences in a FORWARD */
	int refuse_every, refuse_max, carried; /* HOP_REFUSE_EVERY (set before the fault) */
	/* FORWARDs with a draft, and those where a drafting sequence rides beside one that samples
	 * without a draft. */
	_Atomic int drafting, mixed;
};

struct ring {
	struct hop hop[T_HOPS];
	nng_socket push, pull; /* the scheduler's */
	struct lm_link link;   /* push's dial */
	struct sched_cfg cfg;
	struct sched *s;
};

/* Whether a FORWARD carries sequence `seq`; notes its sequence count. */
static inline bool hop_carries(struct hop *h, nng_msg *m, uint64_t seq)
{
	struct wire_head wh;
	struct wire_forward f;
	if (wire_peek(nng_msg_body(m), nng_msg_len(m), &wh, NULL) != 0 || wh.type != WIRE_FORWARD ||
	    wire_decode_forward(nng_msg_body(m), nng_msg_len(m), &h->st.lim, &h->scratch, &f,
				NULL) != 0)
		return false;
	if (f.n_seqs > atomic_load(&h->max_seqs))
		atomic_store(&h->max_seqs, f.n_seqs);
	bool drafts = false, plain = false;
	for (int32_t i = 0; i < f.n_seqs; i++) {
		drafts |= f.seqs[i].n_draft > 0;
		plain |= f.seqs[i].sample && f.seqs[i].n_draft == 0;
	}
	atomic_fetch_add(&h->drafting, drafts);
	atomic_fetch_add(&h->mixed, drafts && plain);
	for (int32_t i = 0; i < f.n_seqs; i++)
		if (f.seqs[i].seq_id == seq)
			return true;
	return false;
}

static inline void *hop_main(void *arg)
{
	struct hop *h = arg;
	while (!atomic_load(&h->stop)) {
		nng_msg *in = NULL, *out = NULL;
		if (atomic_load(&h->fault) == HOP_HOLD) {
			usleep(1000);
			continue;
		}
		int rv = nng_recvmsg(h->pull, &in, 0);
		if (rv == NNG_ETIMEDOUT)
			continue;
		if (rv != 0)
			break;
		int fault = atomic_load(&h->fault);
		if (fault == HOP_DROP) {
			nng_msg_free(in);
			atomic_fetch_add(&h->dropped, 1);
			continue;
		}
		bool hit = hop_carries(h, in, atomic_load(&h->fault_seq)) && fault != HOP_PASS;
		struct wire_head wh = {0};
		wire_peek(nng_msg_body(in), nng_msg_len(in), &wh, NULL);
		lm_diag d = {{0}};
		int rc;
		if (hit && fault == HOP_REFUSE_EVERY)
			hit = ++h->carried % h->refuse_every == 0 &&
			      atomic_load(&h->refused) < h->refuse_max;
		if (hit && (fault == HOP_REFUSE || fault == HOP_REFUSE_EVERY)) {
			rc = lm_fail(&d, LM_EBUSY, "test: this hop refuses sequence %llu",
				     (unsigned long long)atomic_load(&h->fault_seq));
			atomic_fetch_add(&h->refused, 1);
		} else {
			pthread_mutex_lock(&h->mu);
			rc = stage_handle(&h->st, in, &out, &d);
			pthread_mutex_unlock(&h->mu);
		}
		if (rc != 0) {
			/* As worker.c does: the refusal goes down the ring instead of the message. */
			nng_msg_free(in);
			if (stage_error_msg(&h->ebuf, wh.id, wh.type, rc, lm_diag_str(&d, rc),
					    &out) != 0)
				continue;
		} else if (hit && fault == HOP_GARBLE) {
			nng_msg_chop(out, nng_msg_len(out) / 2);
			atomic_fetch_add(&h->garbled, 1);
		}
		if (nng_sendmsg(h->push, out, 0) != 0)
			nng_msg_free(out);
	}
	return NULL;
}

static inline struct wire_assign hop_assign(int32_t i, const char *next)
{
	int32_t per = T_LAYERS / T_HOPS;
	struct wire_assign a = {.id = 1,
				.begin = i * per,
				.end = (i + 1) * per,
				.embedding = i == 0,
				.head = i == T_HOPS - 1,
				.max_seq = T_MAX_SEQ,
				.slots = T_SLOTS,
				.k_type = LM_F32,
				.v_type = LM_F32,
				.wire_dtype = WIRE_DT_F32,
				.max_batch = T_MAX_BATCH,
				.max_draft = T_MAX_DRAFT};
	snprintf(a.model, sizeof a.model, "%s", model_path);
	snprintf(a.next, sizeof a.next, "%s", next);
	return a;
}

static inline void hop_load(struct hop *h)
{
	struct lm_backend_opts bo = {.n_threads = 1};
	lm_diag d = {{0}};
	cr_assert_eq(stage_init(&h->st, &h->assign, "cpu", &bo, &d), 0, "%s", d.msg);
}

/* A worker restarted: the same slice, an empty cache. */
static inline void hop_restart(struct hop *h)
{
	pthread_mutex_lock(&h->mu);
	stage_fini(&h->st);
	hop_load(h);
	for (int32_t i = 0; i < T_SLOTS; i++)
		cr_assert_eq(h->st.eng.kv.len[i], 0);
	pthread_mutex_unlock(&h->mu);
}

/* Sets a hop's fault after a while, from another thread (while the test waits in a call). */
struct hop_later {
	struct hop *h;
	int fault, ms;
	pthread_t thread;
};

static inline void *hop_later_main(void *arg)
{
	struct hop_later *l = arg;
	usleep((useconds_t)l->ms * 1000);
	atomic_store(&l->h->fault, l->fault);
	return NULL;
}

static inline void hop_later(struct hop_later *l, struct hop *h, int fault, int ms)
{
	*l = (struct hop_later){.h = h, .fault = fault, .ms = ms};
	cr_assert_eq(pthread_create(&l->thread, NULL, hop_later_main, l), 0);
}

static inline int32_t hop_kv_len(struct hop *h, int32_t slot)
{
	pthread_mutex_lock(&h->mu);
	int32_t n = h->st.eng.kv.len[slot];
	pthread_mutex_unlock(&h->mu);
	return n;
}

/* The scheduler's defaults here: max_inflight 2 (one batch per stage), prefill in chunks of 8
 * so that long prompts take several batches. */
static inline struct sched_cfg default_cfg(void)
{
	return (struct sched_cfg){.slots = T_SLOTS,
				  .max_seq = T_MAX_SEQ,
				  .max_batch = T_MAX_BATCH,
				  .max_inflight = 2,
				  .prefill_chunk = 8,
				  .n_vocab = T_VOCAB,
				  .max_logprobs = 5,
				  .batch_timeout_ms = 5000};
}

static inline const char *url_of(int32_t i)
{
	static const char *urls[T_HOPS + 1] = {"inproc://sched-hop0", "inproc://sched-hop1",
					       "inproc://sched-in"};
	return urls[i];
}

static inline void ring_up(struct ring *r, const struct sched_cfg *cfg)
{
	memset(r, 0, sizeof *r);
	make_model();
	ref_open();
	cr_assert_eq(nng_pull0_open(&r->pull), 0);
	nng_socket_set_size(r->pull, NNG_OPT_RECVMAXSZ, 0);
	cr_assert_eq(nng_listen(r->pull, url_of(T_HOPS), NULL, 0), 0);
	for (int32_t i = 0; i < T_HOPS; i++) {
		struct hop *h = &r->hop[i];
		h->assign = hop_assign(i, url_of(i + 1));
		hop_load(h);
		pthread_mutex_init(&h->mu, NULL);
		cr_assert_eq(wire_scratch_init_rows(&h->scratch, T_SLOTS, T_MAX_BATCH), 0);
		cr_assert_eq(nng_pull0_open(&h->pull), 0);
		nng_socket_set_size(h->pull, NNG_OPT_RECVMAXSZ, 0);
		nng_socket_set_ms(h->pull, NNG_OPT_RECVTIMEO, 20);
		cr_assert_eq(nng_listen(h->pull, url_of(i), NULL, 0), 0);
	}
	for (int32_t i = 0; i < T_HOPS; i++) {
		struct hop *h = &r->hop[i];
		cr_assert_eq(nng_push0_open(&h->push), 0);
		nng_socket_set_ms(h->push, NNG_OPT_SENDTIMEO, 1000);
		cr_assert_eq(nng_dial(h->push, url_of(i + 1), NULL, 0), 0);
		cr_assert_eq(pthread_create(&h->thread, NULL, hop_main, h), 0);
	}
	cr_assert_eq(nng_push0_open(&r->push), 0);
	nng_socket_set_ms(r->push, NNG_OPT_SENDTIMEO, 1000);
	cr_assert_eq(lm_link_init(&r->link, r->push, NULL, NULL), 0);
	cr_assert_eq(lm_link_dial(&r->link, url_of(0), NULL), 0);

	r->cfg = *cfg;
	r->cfg.fingerprint = r->hop[0].st.eng.model.fingerprint;
	r->cfg.push = &r->link;
	r->cfg.pull = r->pull;
	lm_diag d = {{0}};
	cr_assert_eq(sched_start(&r->s, &r->cfg, &d), 0, "%s", d.msg);
}

static inline void ring_down(struct ring *r)
{
	sched_stop(r->s);
	sched_fini(r->s);
	for (int32_t i = 0; i < T_HOPS; i++) {
		struct hop *h = &r->hop[i];
		atomic_store(&h->stop, true);
		pthread_join(h->thread, NULL);
		lm_close_bounded(h->pull, 2000);
		lm_close_bounded(h->push, 2000);
		stage_fini(&h->st);
		wire_scratch_fini(&h->scratch);
		wire_buf_fini(&h->ebuf);
		pthread_mutex_destroy(&h->mu);
	}
	if (lm_close_bounded(r->push, 2000) == 0)
		lm_link_fini(&r->link);
	lm_close_bounded(r->pull, 2000);
	spec_source_fini(&r->cfg.draft);
	ref_close();
	unlink(model_path);
}

/* ------------------------------------------------------------------ requests */

struct req {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int32_t prompt[T_MAX_SEQ], n_prompt, max_tokens;
	int32_t tok[T_MAX_SEQ], n;
	float lp[T_MAX_SEQ];
	int done_calls;
	enum sched_finish why;
	int code;
	char msg[512];
	uint64_t id;
	bool no_speculate;
	int32_t cached;    /* prompt tokens the prefix cache reused (the scheduler writes it) */
	uint64_t share_of; /* sched_req.share_prompt_of */
	float temperature; /* 0: greedy */
	uint64_t seed;
	const char *grammar; /* sched_req.grammar */
};

/* The most sequences the scheduler held in slots at any token (read on its thread). */
static const struct sched_stats *watched;
static _Atomic int32_t max_active;

/* Holds a hop from the scheduler's thread the moment every listed request has `at` tokens, so
 * that none gets further while the test, which may be descheduled for any time, looks. */
static struct {
	struct hop *hop;
	struct req *reqs[2];
	int n;
	int32_t at;
} hold_rule;

static inline void hold_when(struct hop *h, int32_t at, struct req *a, struct req *b)
{
	hold_rule.hop = h;
	hold_rule.reqs[0] = a;
	hold_rule.reqs[1] = b;
	hold_rule.n = b != NULL ? 2 : 1;
	hold_rule.at = at;
}

/* On the scheduler's thread, the only writer of every request's tokens. */
static inline void hold_check(void)
{
	if (hold_rule.hop == NULL)
		return;
	for (int i = 0; i < hold_rule.n; i++)
		if (hold_rule.reqs[i]->n < hold_rule.at)
			return;
	atomic_store(&hold_rule.hop->fault, HOP_HOLD);
	hold_rule.hop = NULL;
}

static inline void req_on_token(void *arg, int32_t token, float logprob, const int32_t *top_ids,
				const float *top_lp, int32_t n_top)
{
	struct req *q = arg;
	(void)top_ids;
	(void)top_lp;
	(void)n_top;
	if (watched != NULL && atomic_load(&watched->active) > atomic_load(&max_active))
		atomic_store(&max_active, atomic_load(&watched->active));
	pthread_mutex_lock(&q->mu);
	if (q->n < T_MAX_SEQ) {
		q->lp[q->n] = logprob;
		q->tok[q->n++] = token;
	}
	hold_check(); /* before the test can see the token */
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

static inline void req_on_done(void *arg, enum sched_finish why, int code, const char *msg)
{
	struct req *q = arg;
	pthread_mutex_lock(&q->mu);
	q->done_calls++;
	q->why = why;
	q->code = code;
	snprintf(q->msg, sizeof q->msg, "%s", msg != NULL ? msg : "");
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

static inline void req_init(struct req *q, int32_t k, int32_t n_prompt, int32_t max_tokens)
{
	memset(q, 0, sizeof *q);
	pthread_mutex_init(&q->mu, NULL);
	lm_cond_init(&q->cv);
	prompt_of(k, n_prompt, q->prompt);
	q->n_prompt = n_prompt;
	q->max_tokens = max_tokens;
}

static inline int req_submit(struct ring *r, struct req *q, lm_diag *d)
{
	struct sched_req sr = {
		.prompt = q->prompt,
		.n_prompt = q->n_prompt,
		.max_tokens = q->max_tokens,
		.sampling = {.temperature = q->temperature, .top_p = 1, .seed = q->seed},
		.share_prompt_of = q->share_of,
		.n_logprobs = 2,
		.no_speculate = q->no_speculate,
		.grammar = q->grammar,
		.cached = &q->cached,
		.on_token = req_on_token,
		.on_done = req_on_done,
		.arg = q};
	return sched_submit(r->s, &sr, &q->id, d);
}

static inline void req_start(struct ring *r, struct req *q)
{
	lm_diag d = {{0}};
	int rc = req_submit(r, q, &d);
	cr_assert_eq(rc, 0, "%s", lm_diag_str(&d, rc));
}

/* Waits until the request ended (true) or ms passed. */
static inline bool req_wait(struct req *q, int64_t ms)
{
	int64_t until = lm_now_ms() + ms;
	pthread_mutex_lock(&q->mu);
	while (q->done_calls == 0 && lm_cond_wait_until(&q->cv, &q->mu, until))
		;
	bool done = q->done_calls > 0;
	pthread_mutex_unlock(&q->mu);
	return done;
}

/* Waits until the request has at least n tokens. */
static inline bool req_wait_tokens(struct req *q, int32_t n, int64_t ms)
{
	int64_t until = lm_now_ms() + ms;
	pthread_mutex_lock(&q->mu);
	while (q->n < n && q->done_calls == 0 && lm_cond_wait_until(&q->cv, &q->mu, until))
		;
	bool ok = q->n >= n;
	pthread_mutex_unlock(&q->mu);
	return ok;
}

static inline int32_t req_count(struct req *q)
{
	pthread_mutex_lock(&q->mu);
	int32_t n = q->n;
	pthread_mutex_unlock(&q->mu);
	return n;
}

/* The request ended exactly once, as the reference run of its prompt says, with its tokens. */
static inline void expect_like_reference(struct req *q, const int32_t *stop, int32_t n_stop)
{
	int32_t want[T_MAX_SEQ], n_want;
	enum sched_finish why =
		ref_generate(q->prompt, q->n_prompt, q->max_tokens, stop, n_stop, want, &n_want);
	cr_assert(req_wait(q, T_WAIT_MS), "request %llu did not end", (unsigned long long)q->id);
	pthread_mutex_lock(&q->mu);
	cr_expect_eq(q->done_calls, 1);
	cr_expect_eq(q->code, 0, "request %llu failed: %s", (unsigned long long)q->id, q->msg);
	cr_expect_eq(q->why, why, "request %llu ended with %d, the engine with %d",
		     (unsigned long long)q->id, q->why, why);
	cr_expect_eq(q->n, n_want, "request %llu: %d tokens, the engine %d",
		     (unsigned long long)q->id, q->n, n_want);
	for (int32_t i = 0; i < q->n && i < n_want; i++) {
		cr_expect_eq(q->tok[i], want[i], "request %llu, token %d: %d, the engine %d",
			     (unsigned long long)q->id, i, q->tok[i], want[i]);
		cr_expect(isfinite(q->lp[i]) && q->lp[i] <= 0, "logprob %g", (double)q->lp[i]);
	}
	pthread_mutex_unlock(&q->mu);
}

static inline void expect_failed(struct req *q, int code, const char *part)
{
	cr_assert(req_wait(q, T_WAIT_MS), "request %llu did not end", (unsigned long long)q->id);
	pthread_mutex_lock(&q->mu);
	cr_expect_eq(q->done_calls, 1);
	cr_expect_eq(q->why, SCHED_FINISH_ERROR);
	cr_expect_eq(q->code, code, "code %d (%s), want %d", q->code, q->msg, code);
	cr_expect(strstr(q->msg, part) != NULL, "message '%s' lacks '%s'", q->msg, part);
	pthread_mutex_unlock(&q->mu);
}

static inline void req_fini(struct req *q)
{
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
}

/* Waits (bounded) until a counter reaches a value. */
static inline bool wait_atomic_geq(_Atomic int *v, int want)
{
	for (int i = 0; i < T_WAIT_MS / 5; i++) {
		if (atomic_load(v) >= want)
			return true;
		usleep(5000);
	}
	return false;
}

/* Waits (bounded) until the scheduler holds `active` sequences in slots and `queued` more. */
static inline bool wait_slots(struct ring *r, int32_t active, int32_t queued)
{
	const struct sched_stats *st = sched_stats(r->s);
	for (int i = 0; i < T_WAIT_MS / 5; i++) {
		if (atomic_load(&st->active) == active && atomic_load(&st->queued) == queued)
			return true;
		usleep(5000);
	}
	return false;
}

#endif

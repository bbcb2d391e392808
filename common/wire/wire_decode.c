/* wire_decode.c — the message decoders (see wire.h for the layouts and the checks).
 *
 * Each decoder walks the header with wd_walk() (wire_read.c: the bounded reader, the version,
 * type, key and fingerprint checks), then reads and range-checks its own fields against the
 * receiver's limits. FORWARD, TOKENS and RELEASE hand their one big array to the walk, which
 * parses it as it meets it (see wire_read.c on cost).
 */
#include "common/wire/wire_read.h"

#include <stdlib.h>

#include "common/base/buf.h"
#include "common/base/dtype.h"

/* ---------------------------------------------------------------- the decoders */

int wire_peek(const void *buf, size_t len, struct wire_head *h, lm_diag *d)
{
	const struct wd_spec spec = {
		.allowed = WK_BASE, .types = WT_KNOWN, .lenient = true, .inline_key = -1};
	struct wd c;
	struct wd_head w;
	wd_init(&c, buf, len, d, "message");
	int rc = wd_walk(&c, &spec, &w);
	*h = w.h;
	return rc;
}

int wire_decode_simple(const void *buf, size_t len, const struct wire_limits *lim,
		       struct wire_head *h, lm_diag *d)
{
	const struct wd_spec spec = {.allowed = WK_BASE,
				     .types = WT_SIMPLE,
				     .fp = lim != NULL ? lim->fingerprint : 0,
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;
	wd_init(&c, buf, len, d, "header-only message");
	rc = wd_walk(&c, &spec, &w);
	*h = w.h;
	if (rc != 0)
		return rc;
	c.what = wire_type_name(w.h.type);
	if ((rc = wd_require(&c, &w, WK_BASE)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

/* "ts", the ring stamp (wire.h), when present: its value and, in its fixed 9-byte form, the
 * offset of its value bytes in the message (0 otherwise). */
static int wd_stamp(struct wd *c, const struct wd_head *w, const void *buf, uint64_t *ns,
		    size_t *at)
{
	*ns = 0;
	*at = 0;
	if ((w->seen & WK_BIT(WK_TS)) == 0)
		return 0;
	wd_at(c, w, WK_TS);
	const uint8_t *p = c->p;
	int rc = wd_u64(c, ns);
	if (rc == 0 && *p == 0xcf)
		*at = (size_t)(p + 1 - (const uint8_t *)buf);
	return rc;
}

/* ---------------------------------------------------------------- FORWARD */

struct wd_forward {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_forward *f;
	int64_t rows; /* the sum of the sequences' n_tokens */
};

static const char *const wire_seq_elems[13] = {
	"seq_id",      "slot",  "pos",   "n_tokens", "sample", "step",    "n_logprobs",
	"temperature", "top_k", "top_p", "min_p",    "seed",   "n_draft",
};

/* One 13-element sequence entry. */
static int wd_seq(struct wd *c, const struct wire_limits *lim, struct wire_seq *q)
{
	int rc;
	c->elem = NULL;
	q->adjust = NULL;
	q->grammar = NULL;
	if ((rc = wd_tuple(c, 13)) != 0)
		return rc;
	c->elem = wire_seq_elems[0];
	if ((rc = wd_u64(c, &q->seq_id)) != 0)
		return rc;
	c->elem = wire_seq_elems[1];
	if ((rc = wd_i32(c, 0, (int64_t)lim->slots - 1, &q->slot)) != 0)
		return rc;
	c->elem = wire_seq_elems[2];
	if ((rc = wd_i32(c, 0, INT32_MAX, &q->pos)) != 0)
		return rc;
	const uint8_t *pos_at = c->at;
	c->elem = wire_seq_elems[3];
	if ((rc = wd_i32(c, 1, INT32_MAX, &q->n_tokens)) != 0)
		return rc;
	if ((int64_t)q->pos + q->n_tokens > lim->max_seq) {
		c->elem = wire_seq_elems[2];
		c->at = pos_at;
		return wd_fail(c, LM_EPROTO,
			       "positions [%" PRId32 ", %" PRId64 ") run past max_seq %" PRId32,
			       q->pos, (int64_t)q->pos + q->n_tokens, lim->max_seq);
	}
	c->elem = wire_seq_elems[4];
	if ((rc = wd_bool(c, &q->sample)) != 0)
		return rc;
	c->elem = wire_seq_elems[5];
	if ((rc = wd_u64(c, &q->step)) != 0)
		return rc;
	c->elem = wire_seq_elems[6];
	if ((rc = wd_i32(c, 0, lim->max_logprobs, &q->n_logprobs)) != 0)
		return rc;
	c->elem = wire_seq_elems[7];
	if ((rc = wd_f32(c, &q->sampling.temperature)) != 0)
		return rc;
	c->elem = wire_seq_elems[8];
	if ((rc = wd_i32(c, INT32_MIN, INT32_MAX, &q->sampling.top_k)) != 0)
		return rc;
	c->elem = wire_seq_elems[9];
	if ((rc = wd_f32(c, &q->sampling.top_p)) != 0)
		return rc;
	c->elem = wire_seq_elems[10];
	if ((rc = wd_f32(c, &q->sampling.min_p)) != 0)
		return rc;
	c->elem = wire_seq_elems[11];
	if ((rc = wd_u64(c, &q->sampling.seed)) != 0)
		return rc;
	c->elem = wire_seq_elems[12];
	int64_t most = q->n_tokens - 1 < lim->max_draft ? q->n_tokens - 1 : lim->max_draft;
	if ((rc = wd_i32(c, 0, most, &q->n_draft)) != 0)
		return rc;
	if (q->n_draft > 0 && !q->sample)
		return wd_fail(c, LM_EPROTO,
			       "%" PRId32 " drafts of a sequence that does not sample", q->n_draft);
	lm_diag sd;
	if (lm_sampling_check(&q->sampling, &sd) != 0) {
		c->elem = "sampling";
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "%s", sd.msg);
	}
	return 0;
}

/* "seqs": everything that does not depend on the other keys ("n" is checked after). */
static int wd_forward_seqs(struct wd *c, void *ctx)
{
	struct wd_forward *x = ctx;
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 1, x->lim->max_seqs, "max_seqs", x->s->cap)) != 0)
		return rc;
	x->f->n_seqs = (int32_t)n;
	x->f->seqs = x->s->seqs;
	x->rows = 0;
	x->f->n_drafts = 0;
	for (int32_t i = 0; i < x->f->n_seqs; i++) {
		c->idx = i;
		if ((rc = wd_seq(c, x->lim, &x->s->seqs[i])) != 0)
			return rc;
		x->rows += x->s->seqs[i].n_tokens;
		x->f->n_drafts += x->s->seqs[i].n_draft; /* each below n_tokens <= max_seq */
	}
	/* Two entries writing one slot's KV in the same step would race: refuse. n_seqs is
	 * bounded by max_seqs, so the quadratic scan stays small. */
	c->at = NULL;
	for (int32_t i = 1; i < x->f->n_seqs; i++) {
		for (int32_t j = 0; j < i; j++) {
			if (x->s->seqs[i].slot == x->s->seqs[j].slot) {
				c->idx = i;
				c->elem = "slot";
				return wd_fail(c, LM_EPROTO,
					       "slot %" PRId32 " is also sequence %" PRId32 "'s",
					       x->s->seqs[i].slot, j);
			}
		}
	}
	return 0;
}

/* The scratch's "adj" arrays, allocated once at the first message that needs them. */
static int wd_adjust_scratch(struct wd *c, struct wire_scratch *s)
{
	if (s->adj != NULL)
		return 0;
	s->adj = calloc((size_t)s->cap, sizeof *s->adj);
	s->hist = calloc((size_t)s->cap * LM_MAX_PENALTY_WINDOW, sizeof *s->hist);
	s->bias = calloc((size_t)s->cap * LM_MAX_LOGIT_BIAS, sizeof *s->bias);
	if (s->adj != NULL && s->hist != NULL && s->bias != NULL)
		return 0;
	free(s->adj);
	free(s->hist);
	free(s->bias);
	s->adj = NULL;
	s->hist = NULL;
	s->bias = NULL;
	return wd_fail(c, LM_ENOMEM, "out of memory for logit adjustments");
}

/* One "adj" entry: [index, presence, frequency, repeat, [window], [[id, bias]...]]. */
static int wd_adjust_one(struct wd *c, const struct wire_limits *lim, int32_t *index,
			 struct lm_logit_adjust *a, int32_t *hist, struct lm_logit_bias *bias)
{
	int rc;
	uint32_t m;
	c->elem = NULL;
	if ((rc = wd_tuple(c, 6)) != 0)
		return rc;
	c->elem = "index";
	if ((rc = wd_i32(c, 0, INT32_MAX, index)) != 0)
		return rc;
	c->elem = "presence";
	if ((rc = wd_f32(c, &a->presence)) != 0)
		return rc;
	c->elem = "frequency";
	if ((rc = wd_f32(c, &a->frequency)) != 0)
		return rc;
	c->elem = "repeat";
	if ((rc = wd_f32(c, &a->repeat)) != 0)
		return rc;
	c->elem = "window";
	if ((rc = wd_array(c, &m)) != 0)
		return rc;
	if (m > LM_MAX_PENALTY_WINDOW)
		return wd_fail(c, LM_EPROTO, "%u tokens, at most %d", m, LM_MAX_PENALTY_WINDOW);
	for (uint32_t j = 0; j < m; j++)
		if ((rc = wd_i32(c, 0, (int64_t)lim->n_vocab - 1, &hist[j])) != 0)
			return rc;
	a->hist = hist;
	a->n_hist = (int32_t)m;
	c->elem = "bias";
	if ((rc = wd_array(c, &m)) != 0)
		return rc;
	if (m > LM_MAX_LOGIT_BIAS)
		return wd_fail(c, LM_EPROTO, "%u biases, at most %d", m, LM_MAX_LOGIT_BIAS);
	for (uint32_t j = 0; j < m; j++) {
		if ((rc = wd_tuple(c, 2)) != 0 ||
		    (rc = wd_i32(c, 0, (int64_t)lim->n_vocab - 1, &bias[j].id)) != 0 ||
		    (rc = wd_f32(c, &bias[j].bias)) != 0)
			return rc;
	}
	a->bias = bias;
	a->n_bias = (int32_t)m;
	lm_diag ad;
	if (lm_logit_adjust_check(a, lim->n_vocab, &ad) != 0) {
		c->elem = NULL;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "%s", ad.msg);
	}
	return 0;
}

/* "adj": the sequences' logit adjustments, attached to the sequences they name. */
static int wd_forward_adjust(struct wd *c, const struct wd_head *w, const struct wire_limits *lim,
			     struct wire_scratch *s, struct wire_forward *f)
{
	uint32_t n;
	int rc;
	wd_at(c, w, WK_ADJ);
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 0, f->n_seqs, "the batch's sequences", s->cap)) != 0)
		return rc;
	if (n > 0 && (rc = wd_adjust_scratch(c, s)) != 0)
		return rc;
	int32_t prev = -1;
	for (int32_t k = 0; k < (int32_t)n; k++) {
		int32_t index;
		c->idx = k;
		const uint8_t *at = c->p;
		rc = wd_adjust_one(c, lim, &index, &s->adj[k],
				   s->hist + (size_t)k * LM_MAX_PENALTY_WINDOW,
				   s->bias + (size_t)k * LM_MAX_LOGIT_BIAS);
		if (rc != 0)
			return rc;
		if (index <= prev || index >= f->n_seqs) {
			c->elem = "index";
			c->at = at;
			return wd_fail(c, LM_EPROTO,
				       "sequence %" PRId32 " out of order or outside [0, %" PRId32
				       ")",
				       index, f->n_seqs);
		}
		if (s->seqs[index].n_draft > 0) {
			c->elem = "index";
			c->at = at;
			return wd_fail(c, LM_EPROTO,
				       "sequence %" PRId32 " has logit adjustments and drafts: a "
				       "speculative step carries no adjustments",
				       index);
		}
		prev = index;
		s->seqs[index].adjust = &s->adj[k];
	}
	return 0;
}

/* One "gr" entry: [index, text, [ids...]], its ids appended to the scratch at *used. */
static int wd_grammar_one(struct wd *c, const struct wire_limits *lim, struct wire_scratch *s,
			  int32_t n_seqs, int32_t prev, int32_t *index, struct wire_grammar *g,
			  size_t *used)
{
	int rc;
	uint32_t m;
	c->elem = NULL;
	if ((rc = wd_tuple(c, 3)) != 0)
		return rc;
	c->elem = "index";
	if ((rc = wd_i32(c, prev + 1, (int64_t)n_seqs - 1, index)) != 0)
		return rc;
	const struct wire_seq *q = &s->seqs[*index];
	if (!q->sample)
		return wd_fail(c, LM_EPROTO,
			       "sequence %" PRId32 " has a grammar but does not sample", *index);
	c->elem = "text";
	if ((rc = wd_strref(c, &g->text, &g->len, WIRE_MAX_GRAMMAR)) != 0)
		return rc;
	c->elem = "ids";
	if ((rc = wd_array(c, &m)) != 0)
		return rc;
	uint64_t want = g->len > 0 ? q->step : 0;
	if (m != want || m > (uint32_t)lim->max_seq)
		return wd_fail(c, LM_EPROTO, "%" PRIu32 " ids where %" PRIu64 " were expected (%s)",
			       m, want, g->len > 0 ? "the generated tokens" : "none without text");
	size_t cap = s->gr_ids_cap;
	int32_t *ids = lm_grow(s->gr_ids, &cap, *used + m + 1, sizeof *ids, 256);
	if (ids == NULL)
		return wd_fail(c, LM_ENOMEM, "out of memory for grammar replays");
	s->gr_ids = ids;
	s->gr_ids_cap = cap;
	for (uint32_t j = 0; j < m; j++)
		if ((rc = wd_i32(c, 0, (int64_t)lim->n_vocab - 1, &ids[*used + j])) != 0)
			return rc;
	g->n_ids = (int32_t)m;
	g->ids = NULL; /* pointed at once every entry is read: the array may move */
	*used += m;
	return 0;
}

/* "gr": the constrained sequences' grammars, attached to the sequences they name. */
static int wd_forward_grammar(struct wd *c, const struct wd_head *w, const struct wire_limits *lim,
			      struct wire_scratch *s, struct wire_forward *f)
{
	uint32_t n;
	int rc;
	wd_at(c, w, WK_GR);
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 0, f->n_seqs, "the batch's sequences", s->cap)) != 0)
		return rc;
	if (n > 0 && s->gr == NULL && (s->gr = calloc((size_t)s->cap, sizeof *s->gr)) == NULL)
		return wd_fail(c, LM_ENOMEM, "out of memory for grammars");
	int32_t prev = -1;
	size_t used = 0;
	for (int32_t k = 0; k < (int32_t)n; k++) {
		c->idx = k;
		if ((rc = wd_grammar_one(c, lim, s, f->n_seqs, prev, &prev, &s->gr[k], &used)) != 0)
			return rc;
		s->seqs[prev].grammar = &s->gr[k];
	}
	used = 0;
	for (int32_t k = 0; k < (int32_t)n; k++) {
		s->gr[k].ids = s->gr_ids + used;
		used += (size_t)s->gr[k].n_ids;
	}
	c->idx = -1;
	return 0;
}

/* "dr": exactly the sum of the sequences' n_draft ids, each a token. */
static int wd_forward_drafts(struct wd *c, const struct wd_head *w, const struct wire_limits *lim,
			     struct wire_scratch *s, struct wire_forward *f)
{
	f->drafts = s->drafts;
	if ((w->seen & WK_BIT(WK_DR)) == 0) {
		if (f->n_drafts == 0)
			return 0;
		c->key = WK_DR;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing: the sequences draft %" PRId32 " tokens",
			       f->n_drafts);
	}
	wd_at(c, w, WK_DR);
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if (n != (uint32_t)f->n_drafts)
		return wd_fail(c, LM_EPROTO,
			       "%" PRIu32 " ids where the sequences draft %" PRId32 " tokens", n,
			       f->n_drafts);
	if ((rc = wd_count(c, n, 0, lim->max_batch, "max_batch", s->rows)) != 0)
		return rc;
	for (int32_t i = 0; i < f->n_drafts; i++) {
		c->idx = i;
		if ((rc = wd_i32(c, 0, (int64_t)lim->n_vocab - 1, &s->drafts[i])) != 0)
			return rc;
	}
	c->idx = -1;
	return 0;
}

int wire_decode_forward(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_scratch *s, struct wire_forward *f, lm_diag *d)
{
	const uint64_t keys = WK_BASE | WK_BIT(WK_SEQS) | WK_BIT(WK_N) | WK_BIT(WK_DT) |
			      WK_BIT(WK_DIM) | WK_BIT(WK_PL);
	struct wd_forward x = {.lim = lim, .s = s, .f = f};
	const struct wd_spec spec = {.allowed = keys | WK_BIT(WK_ADJ) | WK_BIT(WK_DR) |
						WK_BIT(WK_GR) | WK_BIT(WK_TS),
				     .types = WT_BIT(WIRE_FORWARD),
				     .fp = lim->fingerprint,
				     .inline_key = WK_SEQS,
				     .parse = wd_forward_seqs,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	wd_init(&c, buf, len, d, "FORWARD");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	f->batch_id = w.h.id;
	f->fingerprint = w.h.fingerprint;
	if ((rc = wd_stamp(&c, &w, buf, &f->sent_ns, &f->stamp_at)) != 0)
		return rc;

	wd_at(&c, &w, WK_N);
	if ((rc = wd_i32(&c, 1, lim->max_batch, &f->n_tokens)) != 0)
		return rc;
	wd_at(&c, &w, WK_DT);
	if ((rc = wd_range(&c, WIRE_DT_I32, WIRE_DT_BF16, &v)) != 0)
		return rc;
	f->dtype = (enum wire_dtype)v;
	wd_at(&c, &w, WK_DIM);
	if ((rc = wd_range(&c, 0, INT32_MAX, &v)) != 0)
		return rc;
	int32_t want_dim = f->dtype == WIRE_DT_I32 ? 1 : lim->dim;
	if (v != want_dim)
		return wd_fail(&c, LM_EPROTO, "%" PRId64 " where %" PRId32 " was expected (%s)", v,
			       want_dim,
			       f->dtype == WIRE_DT_I32 ? "token ids" : "the model's hidden width");
	f->dim = want_dim;

	/* The sequences' rows cover [0, n) in order. */
	if (x.rows != f->n_tokens) {
		wd_at(&c, &w, WK_SEQS);
		c.at = NULL;
		if (x.rows < f->n_tokens)
			return wd_fail(&c, LM_EPROTO,
				       "the sequences cover rows [0, %" PRId64
				       ") but \"n\" is %" PRId32,
				       x.rows, f->n_tokens);
		int64_t row = 0;
		int32_t i = 0;
		while (row + s->seqs[i].n_tokens <= f->n_tokens)
			row += s->seqs[i++].n_tokens;
		c.idx = i;
		c.elem = "n_tokens";
		return wd_fail(&c, LM_EPROTO,
			       "rows [%" PRId64 ", %" PRId64 ") run past \"n\" = %" PRId32, row,
			       row + s->seqs[i].n_tokens, f->n_tokens);
	}
	if ((rc = wd_forward_drafts(&c, &w, lim, s, f)) != 0)
		return rc;

	if ((w.seen & WK_BIT(WK_ADJ)) != 0 && (rc = wd_forward_adjust(&c, &w, lim, s, f)) != 0)
		return rc;
	if ((w.seen & WK_BIT(WK_GR)) != 0 && (rc = wd_forward_grammar(&c, &w, lim, s, f)) != 0)
		return rc;

	/* n <= max_batch and dim <= INT32_MAX: the product fits in 64 bits. */
	uint64_t implied = (uint64_t)f->n_tokens * (uint64_t)f->dim * wire_dtype_size(f->dtype);
	if ((rc = wd_payload(&c, &w, len, implied, &f->payload, &f->payload_len)) != 0)
		return rc;
	if (f->dtype == WIRE_DT_I32) {
		const uint8_t *ids = f->payload;
		for (int32_t r = 0; r < f->n_tokens; r++) {
			int32_t id;
			memcpy(&id, ids + 4 * (size_t)r, sizeof id);
			if (id < 0 || id >= lim->n_vocab) {
				c.key = -1;
				c.at = ids + 4 * (size_t)r;
				return wd_fail(&c, LM_EPROTO,
					       "payload row %" PRId32 ": token id %" PRId32
					       " is outside [0, %" PRId32 ")",
					       r, id, lim->n_vocab);
			}
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- TOKENS */

struct wd_tokens {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_tokens *t;
	uint64_t n_top; /* the sum of the tokens' n_top */
};

static int wd_tokens_toks(struct wd *c, void *ctx)
{
	struct wd_tokens *x = ctx;
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 0, x->lim->max_batch, "max_batch", x->s->rows)) != 0)
		return rc;
	x->t->n = (int32_t)n;
	x->t->toks = x->s->toks;
	x->n_top = 0;
	for (int32_t i = 0; i < x->t->n; i++) {
		struct wire_token *k = &x->s->toks[i];
		c->idx = i;
		c->elem = NULL;
		if ((rc = wd_tuple(c, 4)) != 0)
			return rc;
		c->elem = "seq_id";
		if ((rc = wd_u64(c, &k->seq_id)) != 0)
			return rc;
		c->elem = "token";
		if ((rc = wd_i32(c, 0, (int64_t)x->lim->n_vocab - 1, &k->token)) != 0)
			return rc;
		c->elem = "logprob";
		if ((rc = wd_f32(c, &k->logprob)) != 0)
			return rc;
		if (!(k->logprob <= 0))
			return wd_fail(c, LM_EPROTO, "%g is not a log-probability",
				       (double)k->logprob);
		c->elem = "n_top";
		if ((rc = wd_i32(c, 0, x->lim->max_logprobs, &k->n_top)) != 0)
			return rc;
		x->n_top += (uint64_t)k->n_top;
	}
	return 0;
}

int wire_decode_tokens(const void *buf, size_t len, const struct wire_limits *lim,
		       struct wire_scratch *s, struct wire_tokens *t, lm_diag *d)
{
	const uint64_t keys = WK_BASE | WK_BIT(WK_TOKS) | WK_BIT(WK_PL);
	struct wd_tokens x = {.lim = lim, .s = s, .t = t};
	const struct wd_spec spec = {.allowed = keys | WK_BIT(WK_TS),
				     .types = WT_BIT(WIRE_TOKENS),
				     .fp = lim->fingerprint,
				     .inline_key = WK_TOKS,
				     .parse = wd_tokens_toks,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int rc;

	wd_init(&c, buf, len, d, "TOKENS");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	t->batch_id = w.h.id;
	t->fingerprint = w.h.fingerprint;
	size_t at;
	if ((rc = wd_stamp(&c, &w, buf, &t->sent_ns, &at)) != 0)
		return rc;
	if ((rc = wd_payload(&c, &w, len, 8 * x.n_top, &t->payload, &t->payload_len)) != 0)
		return rc;

	/* The top alternatives: per token, n_top ids then n_top logprobs. */
	const uint8_t *p = t->payload;
	c.key = -1;
	for (int32_t i = 0; i < t->n; i++) {
		int32_t m = s->toks[i].n_top;
		for (int32_t j = 0; j < m; j++) {
			int32_t id;
			float lp;
			memcpy(&id, p + 4 * (size_t)j, sizeof id);
			memcpy(&lp, p + 4 * ((size_t)m + (size_t)j), sizeof lp);
			if (id < 0 || id >= lim->n_vocab) {
				c.at = p + 4 * (size_t)j;
				return wd_fail(&c, LM_EPROTO,
					       "payload: token %" PRId32 "'s alternative %" PRId32
					       " has id %" PRId32 ", outside [0, %" PRId32 ")",
					       i, j, id, lim->n_vocab);
			}
			if (!(lp <= 0)) {
				c.at = p + 4 * ((size_t)m + (size_t)j);
				return wd_fail(&c, LM_EPROTO,
					       "payload: token %" PRId32 "'s alternative %" PRId32
					       " has logprob %g, not a log-probability",
					       i, j, (double)lp);
			}
		}
		p += 8 * (size_t)m;
	}
	return 0;
}

/* ---------------------------------------------------------------- RELEASE */

struct wd_release {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_release *r;
};

/* An array of at least `least` slot numbers into the scratch (RELEASE's and COPY's "slots"). */
static int wd_slot_list(struct wd *c, const struct wire_limits *lim, struct wire_scratch *s,
			uint32_t least, int32_t *n_out, int32_t **out)
{
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, least, lim->slots, "slots", s->cap)) != 0)
		return rc;
	*n_out = (int32_t)n;
	*out = s->slots;
	for (int32_t i = 0; i < (int32_t)n; i++) {
		c->idx = i;
		if ((rc = wd_i32(c, 0, (int64_t)lim->slots - 1, &s->slots[i])) != 0)
			return rc;
	}
	return 0;
}

static int wd_release_slots(struct wd *c, void *ctx)
{
	struct wd_release *x = ctx;
	return wd_slot_list(c, x->lim, x->s, 0, &x->r->n, &x->r->slots);
}

int wire_decode_release(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_scratch *s, struct wire_release *r, lm_diag *d)
{
	const uint64_t keys = WK_BASE | WK_BIT(WK_SLOTS);
	struct wd_release x = {.lim = lim, .s = s, .r = r};
	const struct wd_spec spec = {.allowed = keys,
				     .types = WT_BIT(WIRE_RELEASE),
				     .fp = lim->fingerprint,
				     .inline_key = WK_SLOTS,
				     .parse = wd_release_slots,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int rc;

	wd_init(&c, buf, len, d, "RELEASE");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	r->id = w.h.id;
	r->fingerprint = w.h.fingerprint;
	return wd_no_payload(&c, &w, len);
}

/* ---------------------------------------------------------------- COPY */

struct wd_copy {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_copy *k;
};

static int wd_copy_slots(struct wd *c, void *ctx)
{
	struct wd_copy *x = ctx;
	return wd_slot_list(c, x->lim, x->s, 1, &x->k->n, &x->k->dst);
}

int wire_decode_copy(const void *buf, size_t len, const struct wire_limits *lim,
		     struct wire_scratch *s, struct wire_copy *k, lm_diag *d)
{
	const uint64_t keys = WK_BASE | WK_BIT(WK_SLOTS) | WK_BIT(WK_SLOT) | WK_BIT(WK_LEN);
	struct wd_copy x = {.lim = lim, .s = s, .k = k};
	const struct wd_spec spec = {.allowed = keys,
				     .types = WT_BIT(WIRE_COPY),
				     .fp = lim->fingerprint,
				     .inline_key = WK_SLOTS,
				     .parse = wd_copy_slots,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(k, 0, sizeof *k);
	wd_init(&c, buf, len, d, "COPY");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	k->id = w.h.id;
	k->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, WK_SLOT);
	if ((rc = wd_i32(&c, 0, (int64_t)lim->slots - 1, &k->src)) != 0)
		return rc;
	wd_at(&c, &w, WK_LEN);
	if ((rc = wd_i32(&c, 1, lim->max_seq, &k->len)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

/* ---------------------------------------------------------------- control messages */

int wire_decode_hello(const void *buf, size_t len, struct wire_hello *h, lm_diag *d)
{
	const uint64_t reply = WK_BIT(WK_FP) | WK_BIT(WK_NAME) | WK_BIT(WK_BUILD) | WK_BIT(WK_PID);
	const struct wd_spec spec = {.allowed = WK_BIT(WK_V) | WK_BIT(WK_T) | WK_BIT(WK_ID) |
						reply | WK_BIT(WK_SLICE),
				     .types = WT_BIT(WIRE_HELLO),
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(h, 0, sizeof *h);
	wd_init(&c, buf, len, d, "HELLO");
	rc = wd_walk(&c, &spec, &w);
	h->version = w.h.version;
	h->id = w.h.id;
	if (rc != 0)
		return rc;
	if ((w.seen & (reply | WK_BIT(WK_SLICE))) != 0) {
		if ((rc = wd_require(&c, &w, reply)) != 0)
			return rc;
		h->fingerprint = w.h.fingerprint;
		wd_at(&c, &w, WK_NAME);
		if ((rc = wd_str(&c, h->name, sizeof h->name, false)) != 0)
			return rc;
		wd_at(&c, &w, WK_BUILD);
		if ((rc = wd_str(&c, h->build, sizeof h->build, false)) != 0)
			return rc;
		wd_at(&c, &w, WK_PID);
		if ((rc = wd_i32(&c, 1, INT32_MAX, &h->pid)) != 0)
			return rc;
		if ((w.seen & WK_BIT(WK_SLICE)) != 0) {
			wd_at(&c, &w, WK_SLICE);
			if ((rc = wd_slice(&c, &h->begin, &h->end, &h->embedding, &h->head)) != 0)
				return rc;
			h->has_slice = true;
		}
	}
	return wd_no_payload(&c, &w, len);
}

int wire_decode_assign(const void *buf, size_t len, struct wire_assign *a, lm_diag *d)
{
	const uint64_t keys = WK_BIT(WK_V) | WK_BIT(WK_T) | WK_BIT(WK_ID) | WK_BIT(WK_MODEL) |
			      WK_BIT(WK_SLICE) | WK_BIT(WK_SEQ) | WK_BIT(WK_SLOTS) |
			      WK_BIT(WK_KVK) | WK_BIT(WK_KVV) | WK_BIT(WK_KKS) | WK_BIT(WK_KVS) |
			      WK_BIT(WK_WDT) | WK_BIT(WK_BATCH) | WK_BIT(WK_DRF) | WK_BIT(WK_NEXT);
	const struct wd_spec spec = {
		.allowed = keys, .types = WT_BIT(WIRE_ASSIGN), .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	memset(a, 0, sizeof *a);
	wd_init(&c, buf, len, d, "ASSIGN");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	a->id = w.h.id;
	wd_at(&c, &w, WK_MODEL);
	if ((rc = wd_str(&c, a->model, sizeof a->model, true)) != 0)
		return rc;
	wd_at(&c, &w, WK_SLICE);
	if ((rc = wd_slice(&c, &a->begin, &a->end, &a->embedding, &a->head)) != 0)
		return rc;
	wd_at(&c, &w, WK_SEQ);
	if ((rc = wd_i32(&c, 1, INT32_MAX, &a->max_seq)) != 0)
		return rc;
	wd_at(&c, &w, WK_SLOTS);
	if ((rc = wd_i32(&c, 1, INT32_MAX, &a->slots)) != 0)
		return rc;
	const int type_keys[4] = {WK_KVK, WK_KVV, WK_KKS, WK_KVS};
	uint32_t *types[4] = {&a->k_type, &a->v_type, &a->k_type_swa, &a->v_type_swa};
	for (int i = 0; i < 4; i++) {
		wd_at(&c, &w, type_keys[i]);
		if ((rc = wd_u32(&c, types[i])) != 0)
			return rc;
		if (lm_dtype_info(*types[i]) == NULL)
			return wd_fail(&c, LM_EPROTO, "%" PRIu32 " is not a tensor type",
				       *types[i]);
	}
	wd_at(&c, &w, WK_WDT);
	if ((rc = wd_range(&c, WIRE_DT_F32, WIRE_DT_BF16, &v)) != 0)
		return rc;
	a->wire_dtype = (enum wire_dtype)v;
	wd_at(&c, &w, WK_BATCH);
	if ((rc = wd_i32(&c, 1, INT32_MAX, &a->max_batch)) != 0)
		return rc;
	wd_at(&c, &w, WK_DRF);
	if ((rc = wd_i32(&c, 0, (int64_t)a->max_batch - 1, &a->max_draft)) != 0)
		return rc;
	wd_at(&c, &w, WK_NEXT);
	if ((rc = wd_str(&c, a->next, sizeof a->next, true)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_ready(const void *buf, size_t len, struct wire_ready *r, lm_diag *d)
{
	const uint64_t keys =
		WK_BASE | WK_BIT(WK_KVB) | WK_BIT(WK_WB) | WK_BIT(WK_RSS) | WK_BIT(WK_DIG);
	const struct wd_spec spec = {
		.allowed = keys, .types = WT_BIT(WIRE_READY), .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	wd_init(&c, buf, len, d, "READY");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	r->id = w.h.id;
	r->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, WK_KVB);
	if ((rc = wd_u64(&c, &r->kv_bytes)) != 0)
		return rc;
	wd_at(&c, &w, WK_WB);
	if ((rc = wd_u64(&c, &r->weight_bytes)) != 0)
		return rc;
	wd_at(&c, &w, WK_RSS);
	if ((rc = wd_u64(&c, &r->rss_bytes)) != 0)
		return rc;
	wd_at(&c, &w, WK_DIG);
	if ((rc = wd_u64(&c, &r->digest)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_error(const void *buf, size_t len, struct wire_error *e, lm_diag *d)
{
	const uint64_t keys = WK_BIT(WK_V) | WK_BIT(WK_T) | WK_BIT(WK_ID) | WK_BIT(WK_CODE) |
			      WK_BIT(WK_MSG) | WK_BIT(WK_ABOUT);
	const struct wd_spec spec = {
		.allowed = keys, .types = WT_BIT(WIRE_ERROR), .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(e, 0, sizeof *e);
	wd_init(&c, buf, len, d, "ERROR");
	rc = wd_walk(&c, &spec, &w);
	e->id = w.h.id;
	if (rc != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	wd_at(&c, &w, WK_CODE);
	if ((rc = wd_i32(&c, INT32_MIN, -1, &e->code)) != 0)
		return rc;
	wd_at(&c, &w, WK_MSG);
	if ((rc = wd_str(&c, e->msg, sizeof e->msg, false)) != 0)
		return rc;
	wd_at(&c, &w, WK_ABOUT);
	if ((rc = wd_u32(&c, &e->about)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_kv(const void *buf, size_t len, const struct wire_limits *lim, struct wire_kv *k,
		   lm_diag *d)
{
	const uint64_t rows = WK_BIT(WK_LEN) | WK_BIT(WK_DT) | WK_BIT(WK_PL);
	const struct wd_spec spec = {.allowed = WK_BASE | WK_BIT(WK_SLOT) | rows | WK_BIT(WK_HI),
				     .types = WT_BIT(WIRE_KV_EXPORT) | WT_BIT(WIRE_KV_IMPORT) |
					      WT_BIT(WIRE_TRACE),
				     .fp = lim->fingerprint,
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	memset(k, 0, sizeof *k);
	wd_init(&c, buf, len, d, "KV_EXPORT, KV_IMPORT or TRACE");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	c.what = wire_type_name(w.h.type);
	if ((rc = wd_require(&c, &w, WK_BASE | WK_BIT(WK_SLOT))) != 0)
		return rc;
	k->id = w.h.id;
	k->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, WK_SLOT);
	if ((rc = wd_i32(&c, 0, (int64_t)lim->slots - 1, &k->slot)) != 0)
		return rc;
	if ((w.seen & (rows | WK_BIT(WK_HI))) == 0)
		return wd_no_payload(&c, &w, len);
	if ((rc = wd_require(&c, &w, rows)) != 0)
		return rc;
	wd_at(&c, &w, WK_LEN);
	if ((rc = wd_i32(&c, 0, lim->max_seq, &k->len)) != 0)
		return rc;
	k->hi = k->len;
	if ((w.seen & WK_BIT(WK_HI)) != 0) {
		wd_at(&c, &w, WK_HI);
		if ((rc = wd_i32(&c, k->len, lim->max_seq, &k->hi)) != 0)
			return rc;
	}
	wd_at(&c, &w, WK_DT);
	if ((rc = wd_range(&c, WIRE_DT_RAW, WIRE_DT_RAW, &v)) != 0)
		return rc;
	return wd_payload(&c, &w, len, UINT64_MAX, &k->payload, &k->payload_len);
}

int wire_decode_repoint(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_repoint *r, lm_diag *d)
{
	const uint64_t keys = WK_BASE | WK_BIT(WK_NEXT);
	const struct wd_spec spec = {.allowed = keys,
				     .types = WT_BIT(WIRE_REPOINT),
				     .fp = lim->fingerprint,
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(r, 0, sizeof *r);
	wd_init(&c, buf, len, d, "REPOINT");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	r->id = w.h.id;
	r->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, WK_NEXT);
	if ((rc = wd_str(&c, r->next, sizeof r->next, true)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_raw(const void *buf, size_t len, const void **payload, size_t *payload_len,
		    lm_diag *d)
{
	const uint64_t keys = WK_BASE | WK_BIT(WK_DT) | WK_BIT(WK_PL);
	const struct wd_spec spec = {.allowed = keys, .types = WT_KNOWN, .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	wd_init(&c, buf, len, d, "raw message");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	c.what = wire_type_name(w.h.type);
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	wd_at(&c, &w, WK_DT);
	if ((rc = wd_range(&c, WIRE_DT_RAW, WIRE_DT_RAW, &v)) != 0)
		return rc;
	return wd_payload(&c, &w, len, UINT64_MAX, payload, payload_len);
}

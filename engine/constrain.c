/* constrain.c — the last stage's matchers and constrained draws. See constrain.h. */
#include "engine/constrain.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"
#include "common/tok/tokenizer.h"
#include "common/wire/wire.h"

/* What the wire carries is what the compiler takes. */
static_assert(WIRE_MAX_GRAMMAR == GBNF_MAX_TEXT, "the wire's grammar bound is the compiler's");

void lm_constrain_init(struct lm_constrain *c, int32_t n_slots, int32_t n_vocab)
{
	memset(c, 0, sizeof *c);
	c->n_slots = n_slots;
	c->n_vocab = n_vocab;
}

static void cs_gr_free(struct lm_cgrammar *e)
{
	gbnf_masker_free(e->mk);
	gbnf_free(e->g);
	free(e->text);
	memset(e, 0, sizeof *e);
}

/* Lets go of slot k's grammar (the entry stays, unreferenced, for a later sequence). */
static void cs_release(struct lm_constrain *c, struct lm_constraint *k)
{
	if (k->gi >= 0)
		c->gr[k->gi].refs--;
	k->gi = -1;
	k->g = NULL;
	k->mk = NULL;
	k->live = false;
}

void lm_constrain_fini(struct lm_constrain *c)
{
	if (c == NULL)
		return;
	for (int32_t i = 0; c->slots != NULL && i < c->n_slots; i++)
		gbnf_state_fini(&c->slots[i].st);
	for (int32_t i = 0; c->gr != NULL && i < c->n_slots + LM_CONSTRAIN_SPARE; i++)
		cs_gr_free(&c->gr[i]);
	free(c->slots);
	free(c->gr);
	free(c->bits);
	free(c->masked);
	free(c->lit);
	free(c->lit_off);
	free(c->lit_text);
	gbnf_vocab_free(c->vocab);
	memset(c, 0, sizeof *c);
}

static const char *cs_piece(void *ctx, int32_t id, size_t *len)
{
	return tok_piece(ctx, id, len);
}

/* The control tokens a grammar may spell (lm_constrain.lit): not end-of-generation, not
 * unused, with text. */
static int cs_literals(struct lm_constrain *c, const tok_vocab *v)
{
	size_t bytes = 0, len = 0;
	int32_t n = 0;
	free(c->lit);
	free(c->lit_off);
	free(c->lit_text);
	c->lit = NULL;
	c->lit_off = NULL;
	c->lit_text = NULL;
	for (int pass = 0; pass < 2; pass++) {
		n = 0;
		bytes = 0;
		for (int32_t id = 0; id < c->n_vocab; id++) {
			unsigned a = tok_attr(v, id);
			const char *t = tok_text(v, id, &len);
			if (!(a & TOK_ATTR_CONTROL) || (a & TOK_ATTR_UNUSED) || tok_is_eog(v, id) ||
			    t == NULL || len == 0)
				continue;
			if (pass == 1) {
				c->lit[n] = id;
				c->lit_off[n] = (uint32_t)bytes;
				memcpy(c->lit_text + bytes, t, len);
			}
			n++;
			bytes += len;
		}
		if (pass == 0 &&
		    ((c->lit = malloc((size_t)n * sizeof *c->lit + 1)) == NULL ||
		     (c->lit_off = malloc(((size_t)n + 1) * sizeof *c->lit_off)) == NULL ||
		     (c->lit_text = malloc(bytes + 1)) == NULL))
			return LM_ENOMEM;
	}
	c->lit_off[n] = (uint32_t)bytes;
	c->n_lit = n;
	return 0;
}

int lm_constrain_vocab(struct lm_constrain *c, const char *model_path, lm_diag *d)
{
	if (c->vocab != NULL)
		return 0;
	gguf_file *f = NULL;
	tok_vocab *v = NULL;
	int rc = gguf_open(model_path, &f, d);
	if (rc == 0)
		rc = tok_load(f, &v, d);
	if (rc == 0 && tok_n_vocab(v) != c->n_vocab)
		rc = lm_fail(d, LM_EFORMAT, "%s: the vocabulary has %d tokens, the model %d",
			     model_path, tok_n_vocab(v), c->n_vocab);
	if (c->slots == NULL && (c->slots = calloc((size_t)c->n_slots, sizeof *c->slots)) != NULL)
		for (int32_t i = 0; i < c->n_slots; i++)
			c->slots[i].gi = -1;
	c->gr = c->gr != NULL ? c->gr
			      : calloc((size_t)c->n_slots + LM_CONSTRAIN_SPARE, sizeof *c->gr);
	c->bits = c->bits != NULL ? c->bits : malloc(((size_t)c->n_vocab + 31) / 32 * 4);
	c->masked = c->masked != NULL ? c->masked : malloc((size_t)c->n_vocab * sizeof(float));
	if (rc == 0 && (c->slots == NULL || c->gr == NULL || c->bits == NULL || c->masked == NULL))
		rc = lm_fail(d, LM_ENOMEM, "out of memory for grammars");
	if (rc == 0 && cs_literals(c, v) != 0)
		rc = lm_fail(d, LM_ENOMEM, "out of memory for grammars");
	if (rc == 0)
		rc = gbnf_vocab_build(c->n_vocab, cs_piece, v, &c->vocab, d);
	if (rc == 0) {
		size_t n = 0;
		const int32_t *eog = tok_eog_ids(v, &n);
		c->n_eog = 0;
		for (size_t i = 0; i < n && c->n_eog < 32; i++)
			c->eog[c->n_eog++] = eog[i];
	}
	tok_free(v);
	gguf_close(f);
	return rc;
}

uint64_t lm_constrain_bytes(const struct lm_constrain *c)
{
	if (c->vocab == NULL)
		return 0;
	int32_t n_gr = c->n_slots + LM_CONSTRAIN_SPARE;
	uint64_t b = gbnf_vocab_bytes(c->vocab) + ((uint64_t)c->n_vocab + 31) / 32 * 4 +
		     (uint64_t)c->n_lit * (sizeof *c->lit + sizeof *c->lit_off) +
		     c->lit_off[c->n_lit] + (uint64_t)c->n_vocab * sizeof(float) +
		     (uint64_t)c->n_slots * sizeof *c->slots + (uint64_t)n_gr * sizeof *c->gr;
	for (int32_t i = 0; i < c->n_slots; i++)
		b += (uint64_t)c->slots[i].st.cap * sizeof(int32_t);
	for (int32_t i = 0; i < n_gr; i++)
		if (c->gr[i].text != NULL)
			b += c->gr[i].len + (uint64_t)gbnf_size(c->gr[i].g) * 8 +
			     gbnf_masker_bytes(c->gr[i].mk);
	return b;
}

static bool cs_is_eog(const struct lm_constrain *c, int32_t id)
{
	for (int32_t i = 0; i < c->n_eog; i++)
		if (c->eog[i] == id)
			return true;
	return false;
}

/* Token id's place among the control tokens a grammar may spell, or -1. */
static int32_t cs_lit(const struct lm_constrain *c, int32_t id)
{
	int32_t lo = 0, hi = c->n_lit;
	while (lo < hi) {
		int32_t mid = lo + (hi - lo) / 2;
		if (c->lit[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c->n_lit && c->lit[lo] == id ? lo : -1;
}

/* Advances st over token id: a control token by its text, spelled literally; any other by its
 * bytes. */
static int cs_accept(const struct lm_constrain *c, const struct gbnf *g, struct gbnf_state *st,
		     int32_t id, lm_diag *d)
{
	int32_t i = cs_lit(c, id);
	if (i < 0)
		return gbnf_accept_token(g, c->vocab, st, id, d);
	return gbnf_accept_literal(g, st, c->lit_text + c->lit_off[i],
				   c->lit_off[i + 1] - c->lit_off[i], d);
}

/* Whether control token lit[i] may come next. */
static bool cs_lit_ok(const struct lm_constrain *c, const struct lm_constraint *k, int32_t i)
{
	struct gbnf_state t = {0};
	bool ok = gbnf_state_copy(&t, &k->st) == 0 &&
		  gbnf_accept_literal(k->g, &t, c->lit_text + c->lit_off[i],
				      c->lit_off[i + 1] - c->lit_off[i], NULL) == 0;
	gbnf_state_fini(&t);
	return ok;
}

static uint64_t cs_hash(const char *text, uint32_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)text[i]) * 0x100000001b3ull;
	return h;
}

/* Points slot k at the compiled grammar of text: the one already compiled for that text, or a
 * new one in an empty entry or in place of the least recently taken unused one. */
static int cs_take(struct lm_constrain *c, struct lm_constraint *k, const char *text, uint32_t len,
		   lm_diag *d)
{
	int32_t n = c->n_slots + LM_CONSTRAIN_SPARE, pick = -1;
	uint64_t h = cs_hash(text, len);
	cs_release(c, k);
	for (int32_t i = 0; i < n && pick < 0; i++) {
		const struct lm_cgrammar *e = &c->gr[i];
		if (e->text != NULL && e->hash == h && e->len == len &&
		    memcmp(e->text, text, len) == 0)
			pick = i;
	}
	if (pick < 0) {
		/* At most n_slots entries are in use, so an unused one exists: an empty one, or
		 * else the one taken longest ago. */
		for (int32_t i = 0; i < n; i++) {
			const struct lm_cgrammar *e = &c->gr[i];
			if (e->refs > 0)
				continue;
			if (pick < 0 || (c->gr[pick].text != NULL &&
					 (e->text == NULL || e->used < c->gr[pick].used)))
				pick = i;
		}
		struct lm_cgrammar *e = &c->gr[pick];
		cs_gr_free(e);
		int rc = gbnf_compile(text, len, &e->g, d);
		if (rc != 0)
			return rc == LM_ENOMEM ? rc : LM_EINVAL;
		if ((e->text = malloc(len)) == NULL ||
		    gbnf_masker_new(e->g, c->vocab, &e->mk) != 0) {
			cs_gr_free(e);
			return lm_fail(d, LM_ENOMEM, "out of memory for a grammar");
		}
		memcpy(e->text, text, len);
		e->len = len;
		e->hash = h;
	}
	struct lm_cgrammar *e = &c->gr[pick];
	e->refs++;
	e->used = ++c->tick;
	k->gi = pick;
	k->g = e->g;
	k->mk = e->mk;
	return 0;
}

int lm_constrain_begin(struct lm_constrain *c, int32_t slot, uint64_t seq_id, uint64_t step,
		       const char *text, uint32_t len, const int32_t *ids, int32_t n_ids,
		       lm_diag *d)
{
	if (c->vocab == NULL || slot < 0 || slot >= c->n_slots)
		return lm_fail(d, LM_EINVAL, "sequence %" PRIu64 ": no grammar vocabulary", seq_id);
	struct lm_constraint *k = &c->slots[slot];
	if (len == 0) {
		if (k->live && k->seq_id == seq_id && k->step == step)
			return 0;
		return lm_fail(d, LM_EPROTO,
			       "sequence %" PRIu64 ": this stage holds no grammar state for it at "
			       "step %" PRIu64 " (send the grammar again)",
			       seq_id, step);
	}
	k->live = false;
	int rc = cs_take(c, k, text, len, d);
	if (rc != 0) {
		lm_diag_prefix(d, "sequence %" PRIu64, seq_id);
		return rc;
	}
	gbnf_state_fini(&k->st);
	if ((rc = gbnf_state_init(k->g, &k->st, d)) != 0)
		return rc;
	for (int32_t i = 0; i < n_ids; i++) {
		if (cs_is_eog(c, ids[i]))
			continue;
		if ((rc = cs_accept(c, k->g, &k->st, ids[i], d)) != 0) {
			lm_diag_prefix(d, "sequence %" PRIu64 ": its token %d (id %d) replayed",
				       seq_id, i, ids[i]);
			return rc;
		}
	}
	k->seq_id = seq_id;
	k->step = step;
	k->live = true;
	return 0;
}

void lm_constrain_end(struct lm_constrain *c, int32_t slot)
{
	if (c->slots != NULL && slot >= 0 && slot < c->n_slots)
		cs_release(c, &c->slots[slot]);
}

/* Whether the grammar admits token id next. */
static bool cs_admits(const struct lm_constrain *c, const struct lm_constraint *k, int32_t id)
{
	if (cs_is_eog(c, id))
		return gbnf_accepting(&k->st);
	int32_t i = cs_lit(c, id);
	return i >= 0 ? cs_lit_ok(c, k, i) : gbnf_token_ok(k->g, c->vocab, &k->st, id);
}

/* Greedy under the mask: the admitted token (or, when the grammar may end, end-of-generation
 * token) with the largest logit, NaN as -inf, the lowest id on ties, as lm_sample's argmax
 * over the masked row; read from the mask's words, without writing the row. */
static int32_t cs_masked_argmax(const struct lm_constrain *c, const float *logits, bool end)
{
	int32_t best = -1;
	float bv = -INFINITY;
	for (int32_t w = 0; w < (c->n_vocab + 31) / 32; w++)
		for (uint32_t x = c->bits[w]; x != 0; x &= x - 1) {
			int32_t i = w * 32 + __builtin_ctz(x);
			float v = isnan(logits[i]) ? -INFINITY : logits[i];
			if (best < 0 || v > bv) {
				best = i;
				bv = v;
			}
		}
	for (int32_t j = 0; end && j < c->n_eog; j++) {
		int32_t i = c->eog[j];
		float v = i >= 0 && i < c->n_vocab && !isnan(logits[i]) ? logits[i] : -INFINITY;
		if (i >= 0 && i < c->n_vocab && (best < 0 || v > bv || (v == bv && i < best))) {
			best = i;
			bv = v;
		}
	}
	return best;
}

/* The draw from logits with every token the grammar rejects masked. */
static int cs_masked_draw(struct lm_constrain *c, struct lm_sampler *s, struct lm_constraint *k,
			  const float *logits, const struct lm_sampling *p, int32_t *token,
			  lm_diag *d)
{
	int32_t n = gbnf_masker_mask(k->mk, &k->st, c->bits);
	if (n < 0)
		return lm_fail(d, n,
			       "sequence %" PRIu64 ": the grammar's matcher passes its bounds",
			       k->seq_id);
	c->masks++;
	for (int32_t i = 0; i < c->n_lit; i++)
		if (cs_lit_ok(c, k, i)) {
			c->bits[c->lit[i] >> 5] |= 1u << (c->lit[i] & 31);
			n++;
		}
	bool end = gbnf_accepting(&k->st);
	if (!(p->temperature > 0) && (n > 0 || end)) {
		*token = cs_masked_argmax(c, logits, end);
		return 0;
	}
	for (int32_t i = 0; i < c->n_vocab; i++)
		c->masked[i] = (c->bits[i >> 5] >> (i & 31) & 1) != 0 ? logits[i] : -INFINITY;
	for (int32_t i = 0; i < c->n_eog; i++)
		if (end && c->eog[i] >= 0 && c->eog[i] < c->n_vocab)
			c->masked[c->eog[i]] = logits[c->eog[i]];
	if (n == 0 && !end) {
		/* No token of this vocabulary continues the text: the grammar needs characters
		 * no token spells. The sequence ends here rather than leave the grammar. */
		if (c->n_eog == 0)
			return lm_fail(d, LM_EINVAL,
				       "sequence %" PRIu64 ": no token continues the grammar",
				       k->seq_id);
		*token = c->eog[0];
		return 0;
	}
	*token = lm_sample(s, c->masked, p, k->step);
	return 0;
}

int lm_constrain_sample(struct lm_constrain *c, struct lm_sampler *s, int32_t slot,
			const float *logits, const struct lm_sampling *p, int32_t *token,
			lm_diag *d)
{
	struct lm_constraint *k = &c->slots[slot];
	int rc;
	if (!k->live)
		return lm_fail(d, LM_EPROTO, "slot %d has no grammar state", slot);
	c->drawn++;
	int32_t y = lm_sample(s, logits, p, k->step);
	if (cs_admits(c, k, y)) {
		c->fast++;
	} else if ((rc = cs_masked_draw(c, s, k, logits, p, &y, d)) != 0) {
		return rc;
	}
	if (!cs_is_eog(c, y) && (rc = cs_accept(c, k->g, &k->st, y, d)) != 0)
		return lm_fail(d, rc, "sequence %" PRIu64 ": the grammar refused its own draw %d",
			       k->seq_id, y);
	k->step++;
	*token = y;
	return 0;
}

int lm_constrain_verify(struct lm_constrain *c, struct lm_sampler *s, int32_t slot,
			const float *logits, const int32_t *drafts, int32_t k,
			const struct lm_sampling *p, int32_t *out, int32_t *n, lm_diag *d)
{
	for (int32_t i = 0;; i++) {
		int rc = lm_constrain_sample(c, s, slot, logits + (size_t)i * (size_t)c->n_vocab, p,
					     &out[i], d);
		if (rc != 0)
			return rc;
		if (i == k || out[i] != drafts[i] || cs_is_eog(c, out[i])) {
			*n = i + 1;
			return 0;
		}
	}
}

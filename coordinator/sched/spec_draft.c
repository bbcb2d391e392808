/* spec_draft.c — drafts from a small draft model run in the coordinator. See spec.h.
 *
 * The draft model is a whole-model engine (engine/engine.h) with one KV slot per scheduler
 * slot. For each slot it remembers the tokens whose rows its cache holds (`fed`). A call first
 * finds how much of that is still the sequence (the common prefix: what it drafted and the
 * target rejected is not, nor anything before a fault's replay), rolls its cache back there
 * through the forward's implicit truncation, feeds the sequence's new tokens, and then drafts
 * greedily one token at a time: argmax, fed back, up to `max` tokens. The last draft is not fed
 * (the next call feeds whatever the target accepted).
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/tok/tokenizer.h"
#include "coordinator/sched/spec.h"
#include "engine/engine.h"

/* Tokens of one forward when catching up (prompts, replays). */
#define SPEC_DRAFT_CHUNK 64

struct spec_draft {
	struct lm_engine eng;
	int32_t slots, max_seq, n_vocab;
	int32_t *fed;   /* [slots][max_seq]: tokens whose rows the draft cache holds */
	int32_t *n_fed; /* [slots] */
	float *logits;  /* [n_vocab]: after the last token fed */
	struct lm_tok_loc loc[SPEC_DRAFT_CHUNK];
};

static int32_t draft_argmax(const float *x, int32_t n)
{
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* Feeds ids[0..n) at positions pos.. of slot `slot`, the logits of the last into dm->logits. */
static int draft_feed(struct spec_draft *dm, int32_t slot, const int32_t *ids, int32_t pos,
		      int32_t n, lm_diag *d)
{
	for (int32_t at = 0; at < n; at += SPEC_DRAFT_CHUNK) {
		int32_t m = n - at < SPEC_DRAFT_CHUNK ? n - at : SPEC_DRAFT_CHUNK;
		for (int32_t i = 0; i < m; i++)
			dm->loc[i] = (struct lm_tok_loc){slot, pos + at + i};
		int32_t last = m - 1;
		struct lm_batch b = {.n = m,
				     .ids = ids + at,
				     .loc = dm->loc,
				     .n_out = at + m == n ? 1 : 0,
				     .out_rows = &last};
		int rc = lm_forward_run(&dm->eng.fw, &b, NULL, NULL, dm->logits, d);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The draft cache of `slot` made to hold tok[0..n) with the logits after tok[n - 1]. */
static int draft_catch_up(struct spec_draft *dm, int32_t slot, const int32_t *tok, int32_t n,
			  lm_diag *d)
{
	int32_t *fed = dm->fed + (size_t)slot * (size_t)dm->max_seq;
	int32_t p = 0;
	while (p < dm->n_fed[slot] && p < n && fed[p] == tok[p])
		p++;
	/* The logits after tok[n - 1] need that token fed now, even if its row is held. */
	if (p == n)
		p = n - 1;
	int rc = draft_feed(dm, slot, tok + p, p, n - p, d);
	if (rc == LM_ERANGE && p > 0) /* a sliding ring cannot roll back that far: start over */
		rc = draft_feed(dm, slot, tok, 0, n, d);
	if (rc != 0) {
		dm->n_fed[slot] = 0;
		return rc;
	}
	memcpy(fed, tok, (size_t)n * sizeof *tok);
	dm->n_fed[slot] = n;
	return 0;
}

static int32_t draft_propose(void *ctx, int32_t slot, const int32_t *tok, int32_t n, int32_t max,
			     int32_t *out)
{
	struct spec_draft *dm = ctx;
	lm_diag d = {{0}};
	if (slot < 0 || slot >= dm->slots || n < 1 || max < 1 || n + max - 1 > dm->max_seq)
		return 0;
	if (draft_catch_up(dm, slot, tok, n, &d) != 0) {
		lm_debug("draft model: slot %d: %s", slot, d.msg);
		return 0;
	}
	int32_t *fed = dm->fed + (size_t)slot * (size_t)dm->max_seq;
	for (int32_t i = 0; i < max; i++) {
		out[i] = draft_argmax(dm->logits, dm->n_vocab);
		if (i + 1 == max)
			return max;
		if (draft_feed(dm, slot, &out[i], n + i, 1, &d) != 0) {
			lm_debug("draft model: slot %d: %s", slot, d.msg);
			return i + 1;
		}
		fed[n + i] = out[i];
		dm->n_fed[slot] = n + i + 1;
	}
	return max;
}

static void draft_release(void *ctx, int32_t slot)
{
	struct spec_draft *dm = ctx;
	if (slot >= 0 && slot < dm->slots)
		dm->n_fed[slot] = 0;
}

static void draft_fini(void *ctx)
{
	struct spec_draft *dm = ctx;
	if (dm == NULL)
		return;
	lm_engine_close(&dm->eng);
	free(dm->fed);
	free(dm->n_fed);
	free(dm->logits);
	free(dm);
}

static const struct spec_source_i draft_iface = {
	.name = "model",
	.cheap = false,
	.propose = draft_propose,
	.release = draft_release,
	.fini = draft_fini,
};

/* The draft's vocabulary must be the target's, token for token: drafted ids are the target's
 * ids. */
static int draft_check_vocab(struct spec_draft *dm, const struct spec_draft_cfg *cfg, lm_diag *d)
{
	if (dm->n_vocab != cfg->n_vocab)
		return lm_fail(d, LM_EINVAL,
			       "draft model %s: its vocabulary has %d tokens, the model's %d",
			       cfg->model, dm->n_vocab, cfg->n_vocab);
	if (cfg->vocab == NULL)
		return 0;
	tok_vocab *v = NULL;
	int rc = tok_load(dm->eng.model.file, &v, d);
	if (rc != 0) {
		lm_diag_prefix(d, "draft model %s", cfg->model);
		return rc;
	}
	for (int32_t id = 0; rc == 0 && id < dm->n_vocab; id++) {
		size_t la = 0, lb = 0;
		const char *a = tok_text(v, id, &la);
		const char *b = tok_text(cfg->vocab, id, &lb);
		if (la != lb || (la > 0 && memcmp(a, b, la) != 0))
			rc = lm_fail(d, LM_EINVAL,
				     "draft model %s: token %d is '%.*s', the model's '%.*s': not "
				     "the same vocabulary",
				     cfg->model, id, (int)(la < 40 ? la : 40), a,
				     (int)(lb < 40 ? lb : 40), b);
	}
	tok_free(v);
	return rc;
}

int spec_draft_init(struct spec_source *s, const struct spec_draft_cfg *cfg, lm_diag *d)
{
	s->iface = NULL;
	s->ctx = NULL;
	struct spec_draft *dm = calloc(1, sizeof *dm);
	if (dm == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	struct lm_engine_cfg ec = {.model = cfg->model,
				   .backend = "cpu",
				   .bo = {.n_threads = cfg->threads},
				   .populate = true,
				   .max_seq = cfg->max_seq,
				   .slots = cfg->slots,
				   .max_batch = SPEC_DRAFT_CHUNK,
				   .max_draft = 0,
				   .kv_types = cfg->kv};
	int rc = lm_engine_open(&dm->eng, &ec, d);
	if (rc != 0) {
		lm_diag_prefix(d, "draft model");
		free(dm);
		return rc;
	}
	dm->slots = cfg->slots;
	dm->max_seq = dm->eng.kv.max_seq;
	dm->n_vocab = dm->eng.model.hp.n_vocab;
	if ((rc = draft_check_vocab(dm, cfg, d)) != 0)
		goto fail;
	dm->fed = malloc((size_t)dm->slots * (size_t)dm->max_seq * sizeof *dm->fed);
	dm->n_fed = calloc((size_t)dm->slots, sizeof *dm->n_fed);
	dm->logits = malloc((size_t)dm->n_vocab * sizeof *dm->logits);
	if (dm->fed == NULL || dm->n_fed == NULL || dm->logits == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "draft model: out of memory for %d slots", dm->slots);
		goto fail;
	}
	s->iface = &draft_iface;
	s->ctx = dm;
	return 0;
fail:
	draft_fini(dm);
	return rc;
}

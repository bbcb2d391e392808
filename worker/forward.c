/* forward.c — one stage's forward pass. See forward.h for the contract and the math. */
#include "worker/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *fw_alloc(struct lm_backend *be, int32_t rows, int32_t cols)
{
	return be->iface->malloc(be->ctx, (size_t)rows * (size_t)cols * sizeof(float));
}

int lm_forward_init(struct lm_forward *fw, const struct lm_model *m, struct lm_backend *be,
		    struct kv_cache *kv, int32_t max_batch, lm_diag *d)
{
	const struct lm_hparams *hp = &m->hp;

	memset(fw, 0, sizeof *fw);
	if (max_batch <= 0)
		return lm_fail(d, LM_EINVAL, "forward: max_batch must be positive");
	int32_t nl = m->slice.end - m->slice.begin;
	if (nl > 0 && (kv == NULL || kv->base_layer != m->slice.begin || kv->num_layers != nl))
		return lm_fail(
			d, LM_EINVAL,
			"forward: the KV cache covers layers [%d, %d) but the slice is [%d, %d)",
			kv ? kv->base_layer : 0, kv ? kv->base_layer + kv->num_layers : 0,
			m->slice.begin, m->slice.end);
	fw->model = m;
	fw->be = be;
	fw->kv = kv;
	fw->max_batch = max_batch;
	for (int32_t il = m->slice.begin; il < m->slice.end; il++) {
		int32_t q = hp->n_head[il] * hp->head_dim, k = hp->n_head_kv[il] * hp->head_dim;
		if (q > fw->q_dim)
			fw->q_dim = q;
		if (k > fw->kv_dim)
			fw->kv_dim = k;
		if (hp->n_ff[il] > fw->ff_dim)
			fw->ff_dim = hp->n_ff[il];
	}
	int32_t e = hp->n_embd;
	fw->x = fw_alloc(be, max_batch, e);
	fw->h = fw_alloc(be, max_batch, e);
	if (nl > 0) {
		fw->q = fw_alloc(be, max_batch, fw->q_dim);
		fw->k = fw_alloc(be, max_batch, fw->kv_dim);
		fw->v = fw_alloc(be, max_batch, fw->kv_dim);
		fw->att = fw_alloc(be, max_batch, fw->q_dim);
		fw->gate = fw_alloc(be, max_batch, fw->ff_dim);
		fw->up = fw_alloc(be, max_batch, fw->ff_dim);
	}
	if (m->slice.head)
		fw->logits = fw_alloc(be, max_batch, hp->n_vocab);
	if (fw->x == NULL || fw->h == NULL ||
	    (nl > 0 && (fw->q == NULL || fw->k == NULL || fw->v == NULL || fw->att == NULL ||
			fw->gate == NULL || fw->up == NULL)) ||
	    (m->slice.head && fw->logits == NULL)) {
		lm_forward_fini(fw);
		return lm_fail(d, LM_ENOMEM, "forward: out of memory for a batch of %d", max_batch);
	}
	return 0;
}

void lm_forward_fini(struct lm_forward *fw)
{
	if (fw == NULL || fw->be == NULL)
		return;
	float *bufs[] = {fw->x, fw->h, fw->q, fw->k, fw->v, fw->att, fw->gate, fw->up, fw->logits};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		fw->be->iface->mfree(fw->be->ctx, bufs[i]);
	memset(fw, 0, sizeof *fw);
}

/* Every token's slot and position fit the cache, a slot's tokens are consecutive and start at
 * or before the slot's length, ids are in the vocabulary, output rows are in the batch. */
static int fw_check(const struct lm_forward *fw, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_model *m = fw->model;
	int rc;

	if (b->n <= 0 || b->n > fw->max_batch)
		return lm_fail(d, LM_ERANGE, "batch of %d tokens (this stage takes 1 to %d)", b->n,
			       fw->max_batch);
	if (m->slice.embedding && b->ids == NULL)
		return lm_fail(d, LM_EINVAL, "the first stage needs token ids");
	for (int32_t t = 0; t < b->n; t++) {
		const struct lm_tok_loc *l = &b->loc[t];
		if (m->slice.embedding && (b->ids[t] < 0 || b->ids[t] >= m->hp.n_vocab))
			return lm_fail(d, LM_ERANGE,
				       "token %d: id %d is not in the vocabulary of %d", t,
				       b->ids[t], m->hp.n_vocab);
		if (fw->kv == NULL)
			continue;
		if ((rc = kv_cache_check(fw->kv, l->slot, l->pos, 1, d)) != 0) {
			lm_diag_prefix(d, "token %d", t);
			return rc;
		}
		/* The previous token of the same slot in this batch, if any. */
		int32_t prev = -1;
		for (int32_t u = t - 1; u >= 0; u--)
			if (b->loc[u].slot == l->slot) {
				prev = u;
				break;
			}
		if (prev >= 0 ? l->pos != b->loc[prev].pos + 1 : l->pos > fw->kv->len[l->slot])
			return lm_fail(d, LM_ERANGE,
				       "token %d: position %d of slot %d does not follow %s %d", t,
				       l->pos, l->slot,
				       prev >= 0 ? "the batch's previous position"
						 : "the sequence's length",
				       prev >= 0 ? b->loc[prev].pos : fw->kv->len[l->slot]);
	}
	if (m->slice.head) {
		if (b->n_out < 0 || b->n_out > b->n)
			return lm_fail(d, LM_ERANGE, "%d output rows for a batch of %d", b->n_out,
				       b->n);
		for (int32_t i = 0; i < b->n_out; i++)
			if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n)
				return lm_fail(d, LM_ERANGE,
					       "output row %d is not in the batch of %d",
					       b->out_rows[i], b->n);
	}
	return 0;
}

/* Status of a backend op, with the op named for the message. */
#define FW_OP(call, what)                                                           \
	do {                                                                        \
		int rc_ = (call);                                                   \
		if (rc_ != 0)                                                       \
			return lm_fail(d, rc_, "layer %d: %s failed: %s", il, what, \
				       lm_strerror(rc_));                           \
	} while (0)

static int fw_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_backend_i *be = fw->be->iface;
	void *ctx = fw->be->ctx;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	const struct lm_kv_layer *kvl = NULL;
	int32_t n = b->n, e = hp->n_embd, ff = hp->n_ff[il];
	int rc;

	if ((rc = kv_cache_layer(fw->kv, il, &kvl, d)) != 0)
		return rc;
	/* Attention block. */
	float eps = hp->rms_eps;
#ifdef LM_TEST_PERTURB
	/* A test build whose numerics are subtly wrong (tests/integration: a redeploy's smoke test
	 * must catch it): the attention norm's epsilon is a hundred times too large. */
	eps *= 100;
#endif
	FW_OP(be->rmsnorm(ctx, fw->h, fw->x, w->attn_norm.data, e, n, eps), "attn_norm");
	FW_OP(be->matmul(ctx, fw->q, &w->wq, fw->h, n), "attn_q");
	FW_OP(be->matmul(ctx, fw->k, &w->wk, fw->h, n), "attn_k");
	FW_OP(be->matmul(ctx, fw->v, &w->wv, fw->h, n), "attn_v");
	FW_OP(be->rope(ctx, fw->q, hp->n_head[il], hp->head_dim, b->loc, n, &hp->rope), "rope q");
	FW_OP(be->rope(ctx, fw->k, hp->n_head_kv[il], hp->head_dim, b->loc, n, &hp->rope),
	      "rope k");
	FW_OP(be->kv_store(ctx, kvl, fw->k, fw->v, b->loc, n), "kv_store");
	float scale = 1.0f / sqrtf((float)hp->head_dim);
	FW_OP(be->attention(ctx, fw->att, fw->q, kvl, b->loc, n, hp->n_head[il], scale),
	      "attention");
	FW_OP(be->matmul(ctx, fw->h, &w->wo, fw->att, n), "attn_output");
	FW_OP(be->add(ctx, fw->x, fw->h, (size_t)n * (size_t)e), "residual");
	/* Feed-forward block. */
	FW_OP(be->rmsnorm(ctx, fw->h, fw->x, w->ffn_norm.data, e, n, hp->rms_eps), "ffn_norm");
	FW_OP(be->matmul(ctx, fw->gate, &w->w_gate, fw->h, n), "ffn_gate");
	FW_OP(be->matmul(ctx, fw->up, &w->w_up, fw->h, n), "ffn_up");
	FW_OP(be->silu_mul(ctx, fw->gate, fw->gate, fw->up, (size_t)n * (size_t)ff), "silu_mul");
	FW_OP(be->matmul(ctx, fw->h, &w->w_down, fw->gate, n), "ffn_down");
	FW_OP(be->add(ctx, fw->x, fw->h, (size_t)n * (size_t)e), "residual");
	return 0;
}

int lm_forward_run(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
		   float *hidden_out, float *logits, lm_diag *d)
{
	const struct lm_model *m = fw->model;
	const struct lm_hparams *hp = &m->hp;
	const struct lm_backend_i *be = fw->be->iface;
	void *ctx = fw->be->ctx;
	size_t row = (size_t)hp->n_embd * sizeof(float);
	int32_t il = m->slice.begin; /* for FW_OP messages outside layers */
	int rc;

	if ((rc = fw_check(fw, b, d)) != 0)
		return rc;
	if (m->slice.embedding)
		FW_OP(be->get_rows(ctx, fw->x, &m->tok_embd, b->ids, b->n), "token_embd");
	else
		FW_OP(be->upload(ctx, fw->x, hidden_in, (size_t)b->n * row), "upload");

	for (il = m->slice.begin; il < m->slice.end; il++) {
		if ((rc = fw_layer(fw, il, b, d)) != 0)
			return rc;
		if (fw->hook != NULL) {
			FW_OP(lm_backend_sync(fw->be), "sync");
			fw->hook(fw->hook_arg, il, fw->x, b->n);
		}
	}
	/* The cache now holds every token of the batch: each slot's length is past its last one. */
	if (fw->kv != NULL)
		for (int32_t t = 0; t < b->n; t++)
			fw->kv->len[b->loc[t].slot] = b->loc[t].pos + 1;

	if (!m->slice.head) {
		FW_OP(be->download(ctx, hidden_out, fw->x, (size_t)b->n * row), "download");
		return lm_backend_sync(fw->be);
	}
	if (b->n_out == 0) /* a prefill chunk that samples nothing: its KV rows were the point */
		return lm_backend_sync(fw->be);
	/* Only the requested rows go through the final norm and the vocabulary projection: the
	 * norm gathers them into h, so the lm_head reads its weights once for n_out rows. */
	for (int32_t i = 0; i < b->n_out; i++)
		FW_OP(be->rmsnorm(ctx, fw->h + (size_t)i * hp->n_embd,
				  fw->x + (size_t)b->out_rows[i] * hp->n_embd, m->output_norm.data,
				  hp->n_embd, 1, hp->rms_eps),
		      "output_norm");
	FW_OP(be->matmul(ctx, fw->logits, &m->output, fw->h, b->n_out), "output");
	FW_OP(be->download(ctx, logits, fw->logits,
			   (size_t)b->n_out * (size_t)hp->n_vocab * sizeof(float)),
	      "download");
	if (hidden_out != NULL)
		FW_OP(be->download(ctx, hidden_out, fw->x, (size_t)b->n * row), "download");
	return lm_backend_sync(fw->be);
}

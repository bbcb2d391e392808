/* forward.c — one stage's forward pass. See forward.h for the contract and the math. */
#include "engine/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/arch.h"
#include "engine/dnet.h"
#include "engine/kv_cache.h"

static void *fw_alloc(struct lm_forward *fw, int32_t rows, int32_t cols)
{
	size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
	fw->scratch_bytes += bytes;
	return fw->be->iface->malloc(fw->be->ctx, bytes);
}

/* qwen35's buffers (forward.h's dn) for the slice's recurrent and gated attention layers. */
static int fw_dnet_init(struct lm_forward *fw, lm_diag *d)
{
	const struct lm_ssm_params *p = &fw->model->hp.ssm;
	const int32_t n = fw->max_batch, cd = lm_dnet_conv_dim(p), vd = lm_dnet_value_dim(p);
	fw->dn.qkv = fw_alloc(fw, n, cd);
	fw->dn.z = fw_alloc(fw, n, vd);
	fw->dn.o = fw_alloc(fw, n, vd);
	fw->dn.b = fw_alloc(fw, n, p->n_v_heads);
	fw->dn.a = fw_alloc(fw, n, p->n_v_heads);
	fw->dn.host_floats = lm_dnet_host_floats(p, n, fw->q_dim);
	fw->dn.host = malloc(fw->dn.host_floats * sizeof(float));
	fw->scratch_bytes += fw->dn.host_floats * sizeof(float);
	if (fw->dn.qkv == NULL || fw->dn.z == NULL || fw->dn.o == NULL || fw->dn.b == NULL ||
	    fw->dn.a == NULL || fw->dn.host == NULL)
		return lm_fail(d, LM_ENOMEM,
			       "forward: out of memory for the recurrent layers' "
			       "buffers of a batch of %d",
			       n);
	return 0;
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
	struct lm_widths wd = lm_hparams_widths(hp, m->slice.begin, m->slice.end);
	fw->q_dim = wd.q_dim;
	fw->kv_dim = wd.kv_dim;
	fw->ff_dim = wd.ff_dim;
	int32_t e = hp->n_embd;
	fw->x = fw_alloc(fw, max_batch, e);
	fw->h = fw_alloc(fw, max_batch, e);
	if (nl > 0) {
		fw->q = fw_alloc(fw, max_batch, fw->q_dim);
		fw->k = fw_alloc(fw, max_batch, fw->kv_dim);
		fw->v = fw_alloc(fw, max_batch, fw->kv_dim);
		fw->att = fw_alloc(fw, max_batch, fw->q_dim);
		fw->gate = fw_alloc(fw, max_batch, fw->ff_dim);
		fw->up = fw_alloc(fw, max_batch, fw->ff_dim);
	}
	if (m->slice.head)
		fw->logits = fw_alloc(fw, max_batch, hp->n_vocab);
	int rc;
	if (nl > 0 && wd.n_expert > 0) {
		rc = lm_moe_scratch_init(&fw->moe, be, max_batch, e, wd.n_expert, wd.n_expert_used,
					 wd.ff_dim, d);
		if (rc != 0) {
			lm_forward_fini(fw);
			return rc;
		}
		fw->scratch_bytes += fw->moe.bytes;
	}
	if (nl > 0 && hp->ssm.head_dim > 0 && (rc = fw_dnet_init(fw, d)) != 0) {
		lm_forward_fini(fw);
		return rc;
	}
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
	float *bufs[] = {fw->x,  fw->h,      fw->q,      fw->k,    fw->v,    fw->att,  fw->gate,
			 fw->up, fw->logits, fw->dn.qkv, fw->dn.z, fw->dn.o, fw->dn.b, fw->dn.a};
	free(fw->dn.host);
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		fw->be->iface->mfree(fw->be->ctx, bufs[i]);
	lm_moe_scratch_fini(&fw->moe, fw->be);
	memset(fw, 0, sizeof *fw);
}

int32_t lm_batch_slot_last(const struct lm_batch *b, int32_t t)
{
	int32_t last = b->loc[t].pos;
	for (int32_t u = t + 1; u < b->n; u++)
		if (b->loc[u].slot == b->loc[t].slot)
			last = b->loc[u].pos;
	return last;
}

/* Whether token t is its slot's first in the batch. */
static bool fw_first_of_slot(const struct lm_batch *b, int32_t t)
{
	for (int32_t u = t - 1; u >= 0; u--)
		if (b->loc[u].slot == b->loc[t].slot)
			return false;
	return true;
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
		/* A slot's first position below its length rolls it back: every ring must still
		 * hold what the rolled-back sequence reads. */
		if (prev < 0 && l->pos < fw->kv->len[l->slot] &&
		    (rc = kv_cache_can_truncate(fw->kv, l->slot, l->pos, d)) != 0) {
			lm_diag_prefix(d, "token %d", t);
			return rc;
		}
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

/* logits = cap x tanh(logits / cap), in the order GGUF's reference graph scales (x times 1/cap,
 * tanh, times cap), on the host copy: a vocabulary's worth per row, beside a whole lm_head. */
static void fw_softcap(float *logits, size_t n, float cap)
{
	const float inv = 1.0f / cap;
	for (size_t i = 0; i < n; i++)
		logits[i] = tanhf(logits[i] * inv) * cap;
}

/* rc, the failure of backend op `what` outside the layers, with the part of the stage it
 * served ("embedding", "input", "head", "output") and the backend's own message where it has
 * one (a CUDA error). Inside a layer, lm_layer_fail names the layer instead. */
static int fw_fail(const struct lm_forward *fw, int rc, const char *where, const char *what,
		   lm_diag *d)
{
	return lm_fail(d, rc, "%s: %s failed: %s", where, what, lm_backend_strerror(fw->be, rc));
}

/* x = the batch's rows: its tokens' embeddings (scaled where the model scales them) on the
 * first stage, else the previous stage's hidden states. */
static int fw_input(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
		    lm_diag *d)
{
	const struct lm_model *m = fw->model;
	const struct lm_backend *be = fw->be;
	const size_t len = (size_t)b->n * (size_t)m->hp.n_embd;
	int rc;
	if (!m->slice.embedding) {
		if ((rc = be->iface->upload(be->ctx, fw->x, hidden_in, len * sizeof(float))) != 0)
			return fw_fail(fw, rc, "input", "upload", d);
		return 0;
	}
	if ((rc = be->iface->get_rows(be->ctx, fw->x, &m->tok_embd, b->ids, b->n)) != 0)
		return fw_fail(fw, rc, "embedding", "token_embd", d);
	if (m->hp.embd_scale != 1.0f &&
	    (rc = be->iface->scale(be->ctx, fw->x, m->hp.embd_scale, len)) != 0)
		return fw_fail(fw, rc, "embedding", "scale", d);
	return 0;
}

/* The head: logits of the batch's n_out requested rows into the host's `logits`, and every
 * row's hidden state into hidden_out where it is not NULL. */
static int fw_head(struct lm_forward *fw, const struct lm_batch *b, float *hidden_out,
		   float *logits, lm_diag *d)
{
	const struct lm_model *m = fw->model;
	const struct lm_hparams *hp = &m->hp;
	const struct lm_backend_i *be = fw->be->iface;
	void *ctx = fw->be->ctx;
	const size_t n_logits = (size_t)b->n_out * (size_t)hp->n_vocab;
	int rc;
	/* Only the requested rows go through the final norm and the vocabulary projection: the
	 * norm gathers them into h, so the lm_head reads its weights once for n_out rows. */
	for (int32_t i = 0; i < b->n_out; i++)
		if ((rc = be->rmsnorm(ctx, fw->h + (size_t)i * hp->n_embd,
				      fw->x + (size_t)b->out_rows[i] * hp->n_embd,
				      m->output_norm.data, hp->n_embd, 1, hp->rms_eps)) != 0)
			return fw_fail(fw, rc, "head", "output_norm", d);
	if ((rc = be->matmul(ctx, fw->logits, &m->output, fw->h, b->n_out)) != 0)
		return fw_fail(fw, rc, "head", "output", d);
	if ((rc = be->download(ctx, logits, fw->logits, n_logits * sizeof(float))) != 0)
		return fw_fail(fw, rc, "head", "download", d);
	if (hidden_out != NULL &&
	    (rc = be->download(ctx, hidden_out, fw->x,
			       (size_t)b->n * (size_t)hp->n_embd * sizeof(float))) != 0)
		return fw_fail(fw, rc, "output", "download", d);
	if ((rc = lm_backend_sync(fw->be)) != 0)
		return fw_fail(fw, rc, "output", "sync", d);
	if (hp->final_softcap > 0)
		fw_softcap(logits, n_logits, hp->final_softcap);
	return 0;
}

/* The embedding (first stage) and the layers: the part of a forward a backend may run as one
 * step. */
static int fw_body(struct lm_forward *fw, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_model *m = fw->model;
	int rc;
	if (m->slice.embedding && (rc = fw_input(fw, b, NULL, d)) != 0)
		return rc;
	for (int32_t il = m->slice.begin; il < m->slice.end; il++) {
		if ((rc = m->arch->layer(fw, il, b, d)) != 0)
			return rc;
		if (fw->hook != NULL) {
			if ((rc = lm_backend_sync(fw->be)) != 0)
				return lm_layer_fail(fw, rc, il, "sync", d);
			fw->hook(fw->hook_arg, il, fw->x, b->n);
		}
	}
	return 0;
}

/* Whether the forward's body may be offered to the backend as a step (backend.h: step_begin):
 * the backend has steps, and no layer works on the host in the middle (a hook after each layer,
 * the routers of mixture-of-experts layers, the recurrent layers' delta rule), which a step
 * could not hold. Whether the batch suits it (its size) is the backend's to say. */
static bool fw_step_wanted(const struct lm_forward *fw)
{
	const struct lm_backend_i *bi = fw->be->iface;
	return bi->step_begin != NULL && bi->step_end != NULL && fw->hook == NULL &&
	       fw->moe.bytes == 0 && fw->dn.host == NULL;
}

/* Passes of one batch that may be steps: the backend may ask for the ops again twice (to
 * capture them, then to run them without a step); a pass after these is never a step. */
#define FW_STEP_PASSES 3

/* fw_body, as a step of the backend where it takes one. A step the backend gives up ran
 * nothing, and its ops are issued again. */
static int fw_body_steps(struct lm_forward *fw, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_model *m = fw->model;
	const struct lm_backend *be = fw->be;
	const bool want = fw_step_wanted(fw);
	for (int pass = 0;; pass++) {
		bool open = false, again = false;
		int rc = 0;
		if (want && pass < FW_STEP_PASSES &&
		    (rc = be->iface->step_begin(be->ctx, b->loc, m->slice.embedding ? b->ids : NULL,
						b->n, &open)) != 0)
			return fw_fail(fw, rc, "step", "step_begin", d);
		rc = fw_body(fw, b, d);
		if (open) {
			int rs = be->iface->step_end(be->ctx, rc, &again);
			if (!again && rc == 0 && rs != 0)
				rc = fw_fail(fw, rs, "step", "step_end", d);
		}
		if (!again)
			return rc;
	}
}

int lm_forward_run(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
		   float *hidden_out, float *logits, lm_diag *d)
{
	const struct lm_model *m = fw->model;
	struct lm_backend *be = fw->be;
	int rc;

	if ((rc = fw_check(fw, b, d)) != 0)
		return rc;
	/* Rollback is implicit: a slot's first position in the batch is the length its cache must
	 * hold, so the slot is truncated to it before anything is stored (fw_check made sure every
	 * ring can). This is how a rejected speculative draft is undone on every stage. */
	for (int32_t t = 0; fw->kv != NULL && t < b->n; t++) {
		const struct lm_tok_loc *l = &b->loc[t];
		if (l->pos < fw->kv->len[l->slot] && fw_first_of_slot(b, t) &&
		    (rc = kv_cache_truncate(fw->kv, l->slot, l->pos, d)) != 0)
			return rc;
	}
	/* A middle stage's rows come in by upload, which is no part of a step. */
	if (!m->slice.embedding && (rc = fw_input(fw, b, hidden_in, d)) != 0)
		return rc;
	if ((rc = fw_body_steps(fw, b, d)) != 0)
		return rc;
	/* The cache now holds every token of the batch: each slot's length is past its last one,
	 * and its recurrent layers keep the states after the positions before it that a
	 * rollback may ask for (the layers kept them: arch_qwen35.c). */
	for (int32_t t = 0; fw->kv != NULL && t < b->n; t++) {
		const struct lm_tok_loc *l = &b->loc[t];
		if ((rc = kv_cache_set_len(fw->kv, l->slot, l->pos + 1, d)) != 0)
			return rc;
		if (fw->kv->n_recurrent > 0 && fw_first_of_slot(b, t)) {
			int32_t last = lm_batch_slot_last(b, t), keep = fw->kv->rec_keep;
			kv_cache_rec_kept(fw->kv, l->slot,
					  last - keep > l->pos ? last - keep : l->pos, last);
		}
	}

	if (m->slice.head && b->n_out > 0)
		return fw_head(fw, b, hidden_out, logits, d);
	/* A middle stage's rows out; a prefill chunk that samples nothing has only its KV rows. */
	if (!m->slice.head &&
	    (rc = be->iface->download(be->ctx, hidden_out, fw->x,
				      (size_t)b->n * (size_t)m->hp.n_embd * sizeof(float))) != 0)
		return fw_fail(fw, rc, "output", "download", d);
	if ((rc = lm_backend_sync(be)) != 0)
		return fw_fail(fw, rc, "output", "sync", d);
	return 0;
}

/* ------------------------------------------------------------------ non-finite values */

bool lm_all_finite(const float *x, size_t n)
{
	/* x * 0 is 0 for every finite x and NaN for NaN and the infinities: one sum says it, and
	 * the loop vectorises. */
	float acc = 0.0f;
	for (size_t i = 0; i < n; i++)
		acc += x[i] * 0.0f;
	return acc == 0.0f;
}

/* The first row of [n][w] that is not finite, or -1. */
static int32_t fw_bad_row(const float *x, int32_t n, size_t w)
{
	for (int32_t r = 0; r < n; r++)
		if (!lm_all_finite(x + (size_t)r * w, w))
			return r;
	return -1;
}

static const char *fw_bad_kind(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (isnan(x[i]))
			return "NaN";
	return "an infinity";
}

/* The per-layer check of the second run: the first layer whose residual stream is not finite. */
struct fw_locate {
	const struct lm_forward *fw;
	float *host; /* [n][n_embd] */
	int32_t layer, row;
	const char *kind;
};

static void fw_locate_hook(void *arg, int32_t layer, const float *x, int32_t n)
{
	struct fw_locate *l = arg;
	size_t w = (size_t)l->fw->model->hp.n_embd;
	if (l->layer >= 0)
		return;
	l->fw->be->iface->download(l->fw->be->ctx, l->host, x, (size_t)n * w * sizeof(float));
	int32_t r = fw_bad_row(l->host, n, w);
	if (r >= 0) {
		l->layer = layer;
		l->row = r;
		l->kind = fw_bad_kind(l->host + (size_t)r * w, w);
	}
}

/* The output of b was not finite: find where it turned, and say so. */
static int fw_locate(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
		     float *hidden_out, float *logits, int32_t bad_row, const char *bad_kind,
		     lm_diag *d)
{
	size_t w = (size_t)fw->model->hp.n_embd;
	if (hidden_in != NULL) {
		int32_t r = fw_bad_row(hidden_in, b->n, w);
		if (r >= 0)
			return lm_fail(
				d, LM_ENONFINITE,
				"the input rows are not finite: row %d (slot %d, position %d)", r,
				b->loc[r].slot, b->loc[r].pos);
	}
	struct fw_locate l = {.fw = fw, .layer = -1, .row = -1};
	l.host = malloc((size_t)b->n * w * sizeof(float) + 1);
	if (l.host != NULL) {
		lm_forward_hook hook = fw->hook;
		void *hook_arg = fw->hook_arg;
		fw->hook = fw_locate_hook;
		fw->hook_arg = &l;
		lm_diag ignore;
		int rc = lm_forward_run(fw, b, hidden_in, hidden_out, logits, &ignore);
		fw->hook = hook;
		fw->hook_arg = hook_arg;
		free(l.host);
		if (rc != 0)
			l.layer = -1;
	}
	if (l.layer >= 0)
		return lm_fail(d, LM_ENONFINITE,
			       "layer %d made %s in row %d (slot %d, position %d)", l.layer, l.kind,
			       l.row, b->loc[l.row].slot, b->loc[l.row].pos);
	if (fw->model->slice.head && bad_row >= 0 && bad_row < b->n_out) {
		int32_t r = b->out_rows[bad_row];
		return lm_fail(d, LM_ENONFINITE,
			       "the output head made %s logits for row %d (slot %d, position %d)",
			       bad_kind, r, b->loc[r].slot, b->loc[r].pos);
	}
	return lm_fail(d, LM_ENONFINITE, "layers [%d, %d) made %s", fw->model->slice.begin,
		       fw->model->slice.end, bad_kind);
}

int lm_forward_run_checked(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
			   float *hidden_out, float *logits, lm_diag *d)
{
	int rc = lm_forward_run(fw, b, hidden_in, hidden_out, logits, d);
	if (rc != 0)
		return rc;
	const struct lm_model *m = fw->model;
	size_t w = m->slice.head ? (size_t)m->hp.n_vocab : (size_t)m->hp.n_embd;
	const float *out = m->slice.head ? logits : hidden_out;
	int32_t rows = m->slice.head ? b->n_out : b->n;
	if (out == NULL || rows == 0 || lm_all_finite(out, (size_t)rows * w))
		return 0;
	int32_t bad = fw_bad_row(out, rows, w);
	return fw_locate(fw, b, hidden_in, hidden_out, logits, bad,
			 fw_bad_kind(out + (size_t)(bad > 0 ? bad : 0) * w, w), d);
}

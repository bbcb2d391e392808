/* layer.c — the steps the architectures' layers are made of. See arch.h.
 *
 * Each step runs on the batch in fw's scratch: x is the residual stream, h the normed input or a
 * block's output, q/k/v the projections, att the attention output, gate/up the FFN's. A step
 * names its layer and op when the backend refuses it.
 */
#include <math.h>

#include "engine/arch.h"
#include "engine/kv_cache.h"

int lm_layer_fail(const struct lm_forward *fw, int rc, int32_t il, const char *what, lm_diag *d)
{
	return lm_fail(d, rc, "layer %d: %s failed: %s", il, what, lm_backend_strerror(fw->be, rc));
}

int lm_layer_norm(struct lm_forward *fw, float *y, const float *x, const struct lm_weight *w,
		  float eps, int32_t il, int32_t n, const char *what, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	int rc = be->iface->rmsnorm(be->ctx, y, x, w != NULL ? w->data : NULL, fw->model->hp.n_embd,
				    n, eps);
	if (rc != 0)
		return lm_layer_fail(fw, rc, il, what, d);
	return 0;
}

int lm_layer_proj(struct lm_forward *fw, float *y, const struct lm_weight *w,
		  const struct lm_weight *bias, const float *x, int32_t il, int32_t n,
		  const char *what, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	int rc = be->iface->matmul(be->ctx, y, w, x, n);
	if (rc == 0 && bias != NULL && bias->data != NULL)
		rc = be->iface->add_rows(be->ctx, y, bias->data, (int)w->ne1, n);
	if (rc != 0)
		return lm_layer_fail(fw, rc, il, what, d);
	return 0;
}

int lm_layer_head_norm(struct lm_forward *fw, float *x, const struct lm_weight *w, int32_t heads,
		       int32_t il, int32_t n, const char *what, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	const struct lm_layer_hparams *l = &fw->model->hp.layer[il];
	int rc = be->iface->rmsnorm(be->ctx, x, x, w != NULL ? w->data : NULL, l->head_dim,
				    n * heads, fw->model->hp.rms_eps);
	if (rc != 0)
		return lm_layer_fail(fw, rc, il, what, d);
	return 0;
}

int lm_layer_rope(struct lm_forward *fw, float *x, int32_t heads, int32_t il,
		  const struct lm_batch *b, const char *what, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	const struct lm_layer_hparams *l = &fw->model->hp.layer[il];
	struct lm_rope_params rp = l->rope;
	rp.freq_factors = l->rope_factors ? fw->model->rope_freqs.data : NULL;
	int rc = be->iface->rope(be->ctx, x, heads, l->head_dim, b->loc, b->n, &rp);
	if (rc != 0)
		return lm_layer_fail(fw, rc, il, what, d);
	return 0;
}

int lm_layer_attend(struct lm_forward *fw, int32_t il, const struct lm_batch *b, float scale,
		    lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	const struct lm_kv_layer *kvl = NULL;
	int rc;
	if ((rc = kv_cache_layer(fw->kv, il, &kvl, d)) != 0)
		return rc;
	if ((rc = be->iface->kv_store(be->ctx, kvl, fw->k, fw->v, b->loc, b->n)) != 0)
		return lm_layer_fail(fw, rc, il, "kv_store", d);
	struct lm_kv_layer with_sinks = *kvl; /* the layer's sink logits, where it has them */
	with_sinks.sinks = w->attn_sinks.data;
	if ((rc = be->iface->attention(be->ctx, fw->att, fw->q, &with_sinks, b->loc, b->n,
				       fw->model->hp.layer[il].n_head, scale)) != 0)
		return lm_layer_fail(fw, rc, il, "attention", d);
	return lm_layer_proj(fw, fw->h, &w->wo, &w->bo, fw->att, il, b->n, "attn_output", d);
}

int lm_layer_ffn(struct lm_forward *fw, int32_t il, int32_t n, bool gelu, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	size_t len = (size_t)n * (size_t)fw->model->hp.layer[il].n_ff;
	int rc;
	if ((rc = be->iface->matmul(be->ctx, fw->gate, &w->w_gate, fw->h, n)) != 0)
		return lm_layer_fail(fw, rc, il, "ffn_gate", d);
	if ((rc = be->iface->matmul(be->ctx, fw->up, &w->w_up, fw->h, n)) != 0)
		return lm_layer_fail(fw, rc, il, "ffn_up", d);
	if (gelu && (rc = be->iface->gelu_mul(be->ctx, fw->gate, fw->gate, fw->up, len)) != 0)
		return lm_layer_fail(fw, rc, il, "gelu_mul", d);
	if (!gelu && (rc = be->iface->silu_mul(be->ctx, fw->gate, fw->gate, fw->up, len)) != 0)
		return lm_layer_fail(fw, rc, il, "silu_mul", d);
	if ((rc = be->iface->matmul(be->ctx, fw->h, &w->w_down, fw->gate, n)) != 0)
		return lm_layer_fail(fw, rc, il, "ffn_down", d);
	return 0;
}

int lm_layer_moe(struct lm_forward *fw, int32_t il, int32_t n, lm_diag *d)
{
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	/* The layer's shared expert, where its file has one (qwen35moe's, with its gate). */
	const struct lm_moe_shared sh = {.gate = &w->w_gate_shexp,
					 .up = &w->w_up_shexp,
					 .down = &w->w_down_shexp,
					 .gate_inp = &w->gate_inp_shexp};
	const struct lm_moe_layer l = {.router = &w->gate_inp,
				       .router_b = &w->gate_inp_b,
				       .exps = &w->exps,
				       .gate_b = &w->gate_exps_b,
				       .up_b = &w->up_exps_b,
				       .down_b = &w->down_exps_b,
				       .n_used = fw->model->hp.layer[il].n_expert_used,
				       .p = fw->model->hp.moe,
				       .shared = w->w_gate_shexp.data != NULL ? &sh : NULL};
	int rc = lm_moe_run(fw->be, &fw->moe, &l, fw->h, fw->h, n, d);
	if (rc != 0)
		lm_diag_prefix(d, "layer %d", il);
	return rc;
}

int lm_layer_residual(struct lm_forward *fw, int32_t il, int32_t n, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	int rc = be->iface->add(be->ctx, fw->x, fw->h, (size_t)n * (size_t)fw->model->hp.n_embd);
	if (rc != 0)
		return lm_layer_fail(fw, rc, il, "residual", d);
	return 0;
}

int lm_layer_scale(struct lm_forward *fw, float *y, float s, size_t len, int32_t il,
		   const char *what, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	int rc = be->iface->scale(be->ctx, y, s, len);
	if (rc != 0)
		return lm_layer_fail(fw, rc, il, what, d);
	return 0;
}

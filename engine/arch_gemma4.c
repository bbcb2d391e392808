/* arch_gemma4.c — gemma4: sliding layers and global layers of their own geometry (the pattern
 * array; each kind its head size, KV heads, rotated dimensions and rope base), Q and K norms,
 * an unweighted V norm, V = K where a layer has no V projection, post-norms, a scalar on each
 * layer's output, attention scale 1; and the 26B-A4B's mixture-of-experts layers, a shared
 * FFN beside routed experts (llama.cpp release v0.4.0, src/models/gemma4.cpp). Per-layer
 * embeddings and shared-KV layers (E2B/E4B) are refused at load (hparams_arch.c).
 *
 *   x = token_embd[id] x sqrt(n_embd)                     (forward.c: hp.embd_scale)
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q = per-head rmsnorm(h Wq) * q_norm;  rope(q)       (NeoX; the global layers' partial,
 *                                                           "proportional" rope: rope_freqs)
 *     k = h Wk;  v = h Wv, or k itself where Wv is absent (before k's norm)
 *     k = per-head rmsnorm(k) * k_norm;  v = per-head rmsnorm(v) (no weight);  rope(k)
 *     h = attention(q, K, V) Wo                           (scale 1; sliding layers: window)
 *     x += rmsnorm(h) * post_attention_norm
 *     h = rmsnorm(x) * ffn_norm;  h = (gelu(h Wgate) * (h Wup)) Wdown
 *     on a mixture-of-experts layer (the file has ffn_gate_inp), that FFN is the shared one:
 *       h  = rmsnorm(h) * post_ffw_norm_1
 *       r  = rmsnorm(x) * ffn_gate_inp.scale / sqrt(n_embd)      the router's input
 *       he = moe(rmsnorm(x) * pre_ffw_norm_2), routed on r     (softmax, top expert_used_count,
 *            weights normalised; GELU-gated experts, each times ffn_down_exps.scale[e])
 *       h += rmsnorm(he) * post_ffw_norm_2
 *     x += rmsnorm(h) * post_ffw_norm
 *     x = x * layer_output_scale                          (where the file has it)
 *   logits: final softcapping                             (forward.c)
 */
#include <math.h>
#include <string.h>

#include "engine/arch.h"

static const struct lm_tensor_spec gemma4_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE),
	LM_TENSOR(wq, EMBD, Q),
	LM_TENSOR(wk, EMBD, KV),
	LM_TENSOR_OPT(wv, EMBD, KV),
	LM_TENSOR(q_norm, HEAD, ONE),
	LM_TENSOR(k_norm, HEAD, ONE),
	LM_TENSOR(wo, Q, EMBD),
	LM_TENSOR(attn_post_norm, EMBD, ONE),
	LM_TENSOR(ffn_norm, EMBD, ONE),
	LM_TENSOR(w_gate, EMBD, FF),
	LM_TENSOR(w_up, EMBD, FF),
	LM_TENSOR(w_down, FF, EMBD),
	LM_TENSOR(ffn_post_norm, EMBD, ONE),
	LM_TENSOR_OPT(out_scale, ONE, ONE),
	/* the mixture-of-experts layers' */
	LM_TENSOR_MOE(gate_inp, EMBD, EXPERTS),
	LM_TENSOR_MOE(gate_inp_s, EMBD, ONE),
	LM_TENSOR_MOE(ffn_pre_norm_2, EMBD, ONE),
	LM_TENSOR_MOE(ffn_post_norm_1, EMBD, ONE),
	LM_TENSOR_MOE(ffn_post_norm_2, EMBD, ONE),
	LM_TENSOR_EXPS_OPT(gate_up_exps, EMBD, FF_EXP2),
	LM_TENSOR_EXPS_OPT(gate_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS_OPT(up_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(down_exps, FF_EXP, EMBD),
	LM_TENSOR_MOE_OPT(down_exps_s, EXPERTS, ONE),
};

static const struct lm_refusal gemma4_refused[] = {
	{"_shexp", "shared experts (ffn_*_shexp) are not part of gemma4"},
	{"per_layer", "Gemma 4's per-layer embeddings are not supported"},
	{"attn_qkv", "fused QKV projections are not supported (convert with separate Q, K, V)"},
	{NULL, NULL},
};

/* The attention block: h = attention over q, k, v of this layer, times Wo. */
static int gemma4_attention(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_hparams *l = &hp->layer[il];
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	size_t kv_len = (size_t)n * (size_t)l->n_head_kv * (size_t)l->head_dim;
	int rc;
	if ((rc = lm_layer_proj(fw, fw->q, &w->wq, NULL, fw->h, il, n, "attn_q", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->q, &w->q_norm, l->n_head, il, n, "q_norm", d)) ||
	    (rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
	    (rc = lm_layer_proj(fw, fw->k, &w->wk, NULL, fw->h, il, n, "attn_k", d)))
		return rc;
	if (w->wv.data != NULL)
		rc = lm_layer_proj(fw, fw->v, &w->wv, NULL, fw->h, il, n, "attn_v", d);
	else if ((rc = fw->be->iface->copy(fw->be->ctx, fw->v, fw->k, kv_len)) != 0)
		return lm_layer_fail(fw, rc, il, "v = k", d);
	if (rc != 0 ||
	    (rc = lm_layer_head_norm(fw, fw->k, &w->k_norm, l->n_head_kv, il, n, "k_norm", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->v, NULL, l->n_head_kv, il, n, "v_norm", d)) ||
	    (rc = lm_layer_rope(fw, fw->k, l->n_head_kv, il, b, "rope k", d)))
		return rc;
	return lm_layer_attend(fw, il, b, hp->attn_scale, d);
}

/* The router's rows, in llama.cpp's order: rmsnorm(x), times 1/sqrt(n_embd), times
 * ffn_gate_inp.scale. */
static int gemma4_router_input(struct lm_forward *fw, int32_t il, int32_t n, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	float *xr = fw->moe.xr;
	int rc;
	if ((rc = lm_layer_norm(fw, xr, fw->x, NULL, hp->rms_eps, il, n, "ffn_moe router norm",
				d)) ||
	    (rc = lm_layer_scale(fw, xr, 1.0f / sqrtf((float)hp->n_embd),
				 (size_t)n * (size_t)hp->n_embd, il, "ffn_moe router scale", d)))
		return rc;
	if ((rc = fw->be->iface->mul_rows(fw->be->ctx, xr, w->gate_inp_s.data, hp->n_embd, n)) != 0)
		return lm_layer_fail(fw, rc, il, "ffn_gate_inp.scale", d);
	return 0;
}

/* A mixture-of-experts layer's FFN, from x into h: the shared FFN and the experts, each normed
 * on its own, summed. */
static int gemma4_moe(struct lm_forward *fw, int32_t il, int32_t n, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	struct lm_moe_scratch *s = &fw->moe;
	const float eps = hp->rms_eps;
	const struct lm_moe_shared sh = {
		.gate = &w->w_gate, .up = &w->w_up, .down = &w->w_down, .gelu = true};
	const struct lm_moe_layer ml = {.router = &w->gate_inp,
					.exps = &w->exps,
					.n_used = hp->layer[il].n_expert_used,
					.p = hp->moe,
					.gelu = true};
	const size_t len = (size_t)n * (size_t)hp->n_embd;
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->ffn_norm, eps, il, n, "ffn_norm", d)) ||
	    (rc = lm_moe_shared_run(fw->be, s, &sh, fw->h, fw->h, n, d)) ||
	    (rc = lm_layer_norm(fw, fw->h, fw->h, &w->ffn_post_norm_1, eps, il, n,
				"post_ffw_norm_1", d)) ||
	    (rc = lm_layer_norm(fw, s->xe, fw->x, &w->ffn_pre_norm_2, eps, il, n, "pre_ffw_norm_2",
				d)) ||
	    (rc = gemma4_router_input(fw, il, n, d)) ||
	    (rc = lm_moe_run_routed(fw->be, s, &ml, s->xe, s->xe, s->xr, n, d)) ||
	    (rc = lm_layer_norm(fw, s->xe, s->xe, &w->ffn_post_norm_2, eps, il, n,
				"post_ffw_norm_2", d))) {
		if (d != NULL && strncmp(d->msg, "layer ", 6) != 0) /* the mixture names its op */
			lm_diag_prefix(d, "layer %d", il);
		return rc;
	}
	if ((rc = fw->be->iface->add(fw->be->ctx, fw->h, s->xe, len)) != 0)
		return lm_layer_fail(fw, rc, il, "ffn_moe_combined", d);
	return 0;
}

static int gemma4_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	float eps = hp->rms_eps;
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_norm, eps, il, n, "attn_norm", d)) ||
	    (rc = gemma4_attention(fw, il, b, d)) ||
	    (rc = lm_layer_norm(fw, fw->h, fw->h, &w->attn_post_norm, eps, il, n,
				"post_attention_norm", d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	if (hp->layer[il].n_expert > 0)
		rc = gemma4_moe(fw, il, n, d);
	else if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->ffn_norm, eps, il, n, "ffn_norm", d)) ==
		 0)
		rc = lm_layer_ffn(fw, il, n, true, d);
	if (rc != 0 ||
	    (rc = lm_layer_norm(fw, fw->h, fw->h, &w->ffn_post_norm, eps, il, n, "post_ffw_norm",
				d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	if (w->out_scale.data != NULL)
		return lm_layer_scale(fw, fw->x, w->out_scale_value, (size_t)n * (size_t)hp->n_embd,
				      il, "layer_output_scale", d);
	return 0;
}

const struct lm_arch lm_arch_gemma4 = {
	.name = "gemma4",
	.tensors = gemma4_tensors,
	.n_tensors = sizeof gemma4_tensors / sizeof gemma4_tensors[0],
	.refused = gemma4_refused,
	.layer = gemma4_layer,
};

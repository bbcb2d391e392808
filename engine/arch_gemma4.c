/* arch_gemma4.c — gemma4, dense: sliding layers and global layers of their own geometry (the
 * pattern array; each kind its head size, KV heads, rotated dimensions and rope base), Q and K
 * norms, an unweighted V norm, V = K where a layer has no V projection, post-norms, a scalar on
 * each layer's output, attention scale 1. Mixture-of-experts layers, per-layer embeddings and
 * shared-KV layers (E2B/E4B) are refused at load (hparams_arch.c, lm_refused_moe).
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
 *     x += rmsnorm(h) * post_ffw_norm
 *     x = x * layer_output_scale                          (where the file has it)
 *   logits: final softcapping                             (forward.c)
 */
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
};

static const struct lm_refusal gemma4_refused[] = {
	{"_exps", "mixture-of-experts layers are not supported"},
	{"ffn_gate_inp", "mixture-of-experts layers are not supported"},
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
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->ffn_norm, eps, il, n, "ffn_norm", d)) ||
	    (rc = lm_layer_ffn(fw, il, n, true, d)) ||
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

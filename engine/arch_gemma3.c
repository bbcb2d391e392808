/* arch_gemma3.c — gemma3: sliding-window layers (every sixth, or the file's pattern, global) with
 * their own rope base, norms before and after each block, GELU-gated FFN.
 *
 *   x = token_embd[id] x sqrt(n_embd)                     (forward.c: hp.embd_scale)
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq, h Wk, h Wv
 *     q, k = per-head rmsnorm(q) * q_norm, rmsnorm(k) * k_norm;  rope(q), rope(k)  (NeoX)
 *     q = q x attn_scale                                  (1/sqrt(head_dim): hparams_arch.c)
 *     h = attention(q, K, V) Wo                           (sliding layers: their window)
 *     x += rmsnorm(h) * post_attention_norm
 *     h = rmsnorm(x) * ffn_norm;  h = (gelu(h Wgate) * (h Wup)) Wdown
 *     x += rmsnorm(h) * post_ffw_norm
 *   logits: final softcapping where the file sets it      (forward.c)
 * The norm weights in the file already hold Gemma's (1 + w): the converter added the 1.
 */
#include "engine/arch.h"

static const struct lm_tensor_spec gemma3_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE),
	LM_TENSOR(wq, EMBD, Q),
	LM_TENSOR(wk, EMBD, KV),
	LM_TENSOR(wv, EMBD, KV),
	LM_TENSOR(q_norm, HEAD, ONE),
	LM_TENSOR(k_norm, HEAD, ONE),
	LM_TENSOR(wo, Q, EMBD),
	LM_TENSOR(attn_post_norm, EMBD, ONE),
	LM_TENSOR(ffn_norm, EMBD, ONE),
	LM_TENSOR(w_gate, EMBD, FF),
	LM_TENSOR(w_up, EMBD, FF),
	LM_TENSOR(w_down, FF, EMBD),
	LM_TENSOR(ffn_post_norm, EMBD, ONE),
};

static int gemma3_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_hparams *l = &hp->layer[il];
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	float eps = hp->rms_eps;
	size_t q_len = (size_t)n * (size_t)l->n_head * (size_t)l->head_dim;
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_norm, eps, il, n, "attn_norm", d)) ||
	    (rc = lm_layer_proj(fw, fw->q, &w->wq, NULL, fw->h, il, n, "attn_q", d)) ||
	    (rc = lm_layer_proj(fw, fw->k, &w->wk, NULL, fw->h, il, n, "attn_k", d)) ||
	    (rc = lm_layer_proj(fw, fw->v, &w->wv, NULL, fw->h, il, n, "attn_v", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->q, &w->q_norm, l->n_head, il, n, "q_norm", d)) ||
	    (rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->k, &w->k_norm, l->n_head_kv, il, n, "k_norm", d)) ||
	    (rc = lm_layer_rope(fw, fw->k, l->n_head_kv, il, b, "rope k", d)) ||
	    (rc = lm_layer_scale(fw, fw->q, hp->attn_scale, q_len, il, "q scale", d)) ||
	    (rc = lm_layer_attend(fw, il, b, 1.0f, d)) ||
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
	return 0;
}

const struct lm_arch lm_arch_gemma3 = {
	.name = "gemma3",
	.tensors = gemma3_tensors,
	.n_tensors = sizeof gemma3_tensors / sizeof gemma3_tensors[0],
	.refused = lm_refused_moe,
	.layer = gemma3_layer,
};

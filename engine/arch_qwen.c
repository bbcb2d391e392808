/* arch_qwen.c — qwen2 and qwen3: llama's layer with NeoX rope (halves of each head turn), and
 *     qwen2: biases on the Q, K and V projections (and on the output one where present);
 *     qwen3: no biases, every query and key head RMS-normed (q_norm, k_norm) before rope.
 *
 *   per layer (x is the residual stream):
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq + bq, h Wk + bk, h Wv + bv        (qwen2)
 *     q, k, v = h Wq, h Wk, h Wv;  q, k = per-head rmsnorm(q) * q_norm, (k) * k_norm  (qwen3)
 *     rope(q), rope(k);  x += attention(q, K, V) Wo    (scale 1/sqrt(head_dim))
 *     h = rmsnorm(x) * ffn_norm;  x += (silu(h Wgate) * (h Wup)) Wdown
 */
#include "engine/arch.h"

static const struct lm_tensor_spec qwen2_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE), LM_TENSOR(wq, EMBD, Q),      LM_TENSOR_OPT(bq, Q, ONE),
	LM_TENSOR(wk, EMBD, KV),         LM_TENSOR_OPT(bk, KV, ONE),  LM_TENSOR(wv, EMBD, KV),
	LM_TENSOR_OPT(bv, KV, ONE),      LM_TENSOR(wo, Q, EMBD),      LM_TENSOR_OPT(bo, EMBD, ONE),
	LM_TENSOR(ffn_norm, EMBD, ONE),  LM_TENSOR(w_gate, EMBD, FF), LM_TENSOR(w_up, EMBD, FF),
	LM_TENSOR(w_down, FF, EMBD),
};

static const struct lm_tensor_spec qwen3_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE), LM_TENSOR(wq, EMBD, Q),
	LM_TENSOR(wk, EMBD, KV),         LM_TENSOR(wv, EMBD, KV),
	LM_TENSOR(q_norm, HEAD, ONE),    LM_TENSOR(k_norm, HEAD, ONE),
	LM_TENSOR(wo, Q, EMBD),          LM_TENSOR(ffn_norm, EMBD, ONE),
	LM_TENSOR(w_gate, EMBD, FF),     LM_TENSOR(w_up, EMBD, FF),
	LM_TENSOR(w_down, FF, EMBD),
};

/* Both: q_norm and k_norm are bound only by qwen3's table, biases only by qwen2's. */
static int qwen_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_hparams *l = &hp->layer[il];
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_norm, hp->rms_eps, il, n, "attn_norm",
				d)) ||
	    (rc = lm_layer_proj(fw, fw->q, &w->wq, &w->bq, fw->h, il, n, "attn_q", d)) ||
	    (rc = lm_layer_proj(fw, fw->k, &w->wk, &w->bk, fw->h, il, n, "attn_k", d)) ||
	    (rc = lm_layer_proj(fw, fw->v, &w->wv, &w->bv, fw->h, il, n, "attn_v", d)))
		return rc;
	if (w->q_norm.data != NULL &&
	    ((rc = lm_layer_head_norm(fw, fw->q, &w->q_norm, l->n_head, il, n, "q_norm", d)) ||
	     (rc = lm_layer_head_norm(fw, fw->k, &w->k_norm, l->n_head_kv, il, n, "k_norm", d))))
		return rc;
	if ((rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
	    (rc = lm_layer_rope(fw, fw->k, l->n_head_kv, il, b, "rope k", d)) ||
	    (rc = lm_layer_attend(fw, il, b, hp->attn_scale, d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->ffn_norm, hp->rms_eps, il, n, "ffn_norm",
				d)) ||
	    (rc = lm_layer_ffn(fw, il, n, false, d)) || (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	return 0;
}

const struct lm_arch lm_arch_qwen2 = {
	.name = "qwen2",
	.tensors = qwen2_tensors,
	.n_tensors = sizeof qwen2_tensors / sizeof qwen2_tensors[0],
	.refused = lm_refused_moe,
	.layer = qwen_layer,
};

const struct lm_arch lm_arch_qwen3 = {
	.name = "qwen3",
	.tensors = qwen3_tensors,
	.n_tensors = sizeof qwen3_tensors / sizeof qwen3_tensors[0],
	.refused = lm_refused_moe,
	.layer = qwen_layer,
};

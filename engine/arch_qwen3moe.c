/* arch_qwen3moe.c — qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention, and on every
 * layer a mixture of experts in place of the dense FFN (llama.cpp release v0.4.0,
 * src/models/qwen3moe.cpp: no shared expert, no dense layers).
 *
 *   per layer (x is the residual stream):
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq, h Wk, h Wv;  q, k = per-head rmsnorm(q) * q_norm, (k) * k_norm
 *     rope(q), rope(k) (NeoX);  x += attention(q, K, V) Wo    (scale 1/sqrt(head_dim))
 *     h = rmsnorm(x) * ffn_norm;  x += moe(h)
 *   moe(h): softmax router over expert_count experts, the top expert_used_count, their weights
 *   normalised to sum 1, each expert a SiLU-gated FFN of expert_feed_forward_length
 *   (engine/moe.h).
 */
#include "engine/arch.h"

static const struct lm_tensor_spec qwen3moe_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE),
	LM_TENSOR(wq, EMBD, Q),
	LM_TENSOR(wk, EMBD, KV),
	LM_TENSOR(wv, EMBD, KV),
	LM_TENSOR(q_norm, HEAD, ONE),
	LM_TENSOR(k_norm, HEAD, ONE),
	LM_TENSOR(wo, Q, EMBD),
	LM_TENSOR(ffn_norm, EMBD, ONE),
	LM_TENSOR(gate_inp, EMBD, EXPERTS),
	LM_TENSOR_EXPS(gate_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(up_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(down_exps, FF_EXP, EMBD),
};

static const struct lm_refusal qwen3moe_refused[] = {
	{"ffn_gate_up_exps", "fused gate/up expert projections are not supported"},
	{"_shexp", "shared experts are not part of qwen3moe"},
	{"attn_qkv", "fused QKV projections are not supported (convert with separate Q, K, V)"},
	{NULL, NULL},
};

static int qwen3moe_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_hparams *l = &hp->layer[il];
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_norm, hp->rms_eps, il, n, "attn_norm",
				d)) ||
	    (rc = lm_layer_proj(fw, fw->q, &w->wq, NULL, fw->h, il, n, "attn_q", d)) ||
	    (rc = lm_layer_proj(fw, fw->k, &w->wk, NULL, fw->h, il, n, "attn_k", d)) ||
	    (rc = lm_layer_proj(fw, fw->v, &w->wv, NULL, fw->h, il, n, "attn_v", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->q, &w->q_norm, l->n_head, il, n, "q_norm", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->k, &w->k_norm, l->n_head_kv, il, n, "k_norm", d)) ||
	    (rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
	    (rc = lm_layer_rope(fw, fw->k, l->n_head_kv, il, b, "rope k", d)) ||
	    (rc = lm_layer_attend(fw, il, b, hp->attn_scale, d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->ffn_norm, hp->rms_eps, il, n, "ffn_norm",
				d)) ||
	    (rc = lm_layer_moe(fw, il, n, d)) || (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	return 0;
}

const struct lm_arch lm_arch_qwen3moe = {
	.name = "qwen3moe",
	.tensors = qwen3moe_tensors,
	.n_tensors = sizeof qwen3moe_tensors / sizeof qwen3moe_tensors[0],
	.refused = qwen3moe_refused,
	.layer = qwen3moe_layer,
};

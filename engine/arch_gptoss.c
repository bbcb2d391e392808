/* arch_gptoss.c — gpt-oss (gpt-oss-20b, gpt-oss-120b; llama.cpp release v0.4.0's openai-moe,
 * src/models/openai-moe.cpp): attention with biases and per-head sink logits on alternating
 * sliding-window and global layers, and on every layer a mixture of experts with biases,
 * routed by a softmax over the picked experts' logits, with a clamped SwiGLU.
 *
 *   per layer (x is the residual stream):
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq + bq, h Wk + bk, h Wv + bv  (biases where the file has them)
 *     rope(q), rope(k) (NeoX; sliding layers: rope.freq_base_swa where the file sets it)
 *     x += attention(q, K, V; sinks) Wo + bo      (scale 1/sqrt(head_dim); a head's sink logit
 *                                                  joins its softmax's denominator; sliding
 *                                                  layers: their window)
 *     h = rmsnorm(x) * post_attention_norm;  x += moe(h)
 *   moe(h): logits = h Wrouter + brouter; the top expert_used_count logits, their softmax as
 *   the weights; each expert (down(swiglu_oai(gate h + bg, up h + bu)) + bd), swiglu_oai with
 *   alpha 1.702 and limit 7 (engine/moe.h). The experts may be MXFP4, as OpenAI ships them.
 */
#include "engine/arch.h"

static const struct lm_tensor_spec gptoss_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE),
	LM_TENSOR(wq, EMBD, Q),
	LM_TENSOR_OPT(bq, Q, ONE),
	LM_TENSOR(wk, EMBD, KV),
	LM_TENSOR_OPT(bk, KV, ONE),
	LM_TENSOR(wv, EMBD, KV),
	LM_TENSOR_OPT(bv, KV, ONE),
	LM_TENSOR(wo, Q, EMBD),
	LM_TENSOR(bo, EMBD, ONE),
	LM_TENSOR(attn_sinks, HEADS, ONE),
	LM_TENSOR(attn_post_norm, EMBD, ONE),
	LM_TENSOR(gate_inp, EMBD, EXPERTS),
	LM_TENSOR(gate_inp_b, EXPERTS, ONE),
	LM_TENSOR_EXPS(gate_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(up_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(down_exps, FF_EXP, EMBD),
	LM_TENSOR(gate_exps_b, FF_EXP, EXPERTS),
	LM_TENSOR(up_exps_b, FF_EXP, EXPERTS),
	LM_TENSOR(down_exps_b, EMBD, EXPERTS),
};

static const struct lm_refusal gptoss_refused[] = {
	{"ffn_gate_up_exps", "fused gate/up expert projections are not supported"},
	{"attn_qkv", "fused QKV projections are not supported (convert with separate Q, K, V)"},
	{NULL, NULL},
};

static int gptoss_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
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
	    (rc = lm_layer_proj(fw, fw->v, &w->wv, &w->bv, fw->h, il, n, "attn_v", d)) ||
	    (rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
	    (rc = lm_layer_rope(fw, fw->k, l->n_head_kv, il, b, "rope k", d)) ||
	    (rc = lm_layer_attend(fw, il, b, hp->attn_scale, d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_post_norm, hp->rms_eps, il, n,
				"post_attention_norm", d)) ||
	    (rc = lm_layer_moe(fw, il, n, d)) || (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	return 0;
}

const struct lm_arch lm_arch_gptoss = {
	.name = "gpt-oss",
	.tensors = gptoss_tensors,
	.n_tensors = sizeof gptoss_tensors / sizeof gptoss_tensors[0],
	.refused = gptoss_refused,
	.layer = gptoss_layer,
};

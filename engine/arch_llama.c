/* arch_llama.c — llama: LLaMA 1-3, TinyStories, Mistral.
 *
 *   per layer, per token (x is the residual stream, width n_embd):
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq, h Wk, h Wv (+ biases, where the file has them)
 *     rope(q), rope(k)                                 (adjacent pairs; Llama 3: rope_freqs)
 *     x += attention(q, K, V) Wo                       (scale 1/sqrt(head_dim); Mistral: the
 *                                                       file's sliding window, every layer)
 *     h = rmsnorm(x) * ffn_norm
 *     x += (silu(h Wgate) * (h Wup)) Wdown
 */
#include "engine/arch.h"

static const struct lm_tensor_spec llama_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE), /* (n_embd) */
	LM_TENSOR(wq, EMBD, Q),          /* (n_embd, n_head x head_dim) */
	LM_TENSOR_OPT(bq, Q, ONE),       /* optional attention biases, as llama.cpp allows */
	LM_TENSOR(wk, EMBD, KV),         /* (n_embd, n_head_kv x head_dim) */
	LM_TENSOR_OPT(bk, KV, ONE),
	LM_TENSOR(wv, EMBD, KV), /* (n_embd, n_head_kv x head_dim) */
	LM_TENSOR_OPT(bv, KV, ONE),
	LM_TENSOR(wo, Q, EMBD), /* (n_head x head_dim, n_embd) */
	LM_TENSOR_OPT(bo, EMBD, ONE),
	LM_TENSOR(ffn_norm, EMBD, ONE), /* (n_embd) */
	LM_TENSOR(w_gate, EMBD, FF),    /* (n_embd, n_ff) */
	LM_TENSOR(w_up, EMBD, FF),      /* (n_embd, n_ff) */
	LM_TENSOR(w_down, FF, EMBD),    /* (n_ff, n_embd) */
};

const struct lm_refusal lm_refused_moe[] = {
	{"_exps", "mixture-of-experts layers are not supported"},
	{"ffn_gate_inp", "mixture-of-experts layers are not supported"},
	{"attn_qkv", "fused QKV projections are not supported (convert with separate Q, K, V)"},
	{NULL, NULL},
};

static int llama_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_hparams *l = &hp->layer[il];
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	float eps = hp->rms_eps;
#ifdef LM_TEST_PERTURB
	/* A test build whose numerics are subtly wrong (tests/integration: a redeploy's smoke test
	 * must catch it): the attention norm's epsilon is a hundred times too large. */
	eps *= 100;
#endif
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_norm, eps, il, n, "attn_norm", d)) ||
	    (rc = lm_layer_proj(fw, fw->q, &w->wq, &w->bq, fw->h, il, n, "attn_q", d)) ||
	    (rc = lm_layer_proj(fw, fw->k, &w->wk, &w->bk, fw->h, il, n, "attn_k", d)) ||
	    (rc = lm_layer_proj(fw, fw->v, &w->wv, &w->bv, fw->h, il, n, "attn_v", d)) ||
	    (rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
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

const struct lm_arch lm_arch_llama = {
	.name = "llama",
	.tensors = llama_tensors,
	.n_tensors = sizeof llama_tensors / sizeof llama_tensors[0],
	.refused = lm_refused_moe,
	.layer = llama_layer,
};

/* arch_llama.c — the llama architecture (LLaMA 1/2, TinyStories, and what shares their graph).
 *
 *   per layer, per token (x is the residual stream, width n_embd):
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq, h Wk, h Wv;  rope(q), rope(k);  store k, v at (slot, pos)
 *     x += attention(q, K, V) Wo                 (scale 1 / sqrt(head_dim))
 *     h = rmsnorm(x) * ffn_norm
 *     x += (silu(h Wgate) * (h Wup)) Wdown
 */
#include <math.h>

#include "engine/arch.h"
#include "engine/kv_cache.h"

static const struct lm_tensor_spec llama_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE), /* (n_embd) f32 */
	LM_TENSOR(wq, EMBD, Q),          /* (n_embd, n_head * head_dim) */
	LM_TENSOR(wk, EMBD, KV),         /* (n_embd, n_head_kv * head_dim) */
	LM_TENSOR(wv, EMBD, KV),         /* (n_embd, n_head_kv * head_dim) */
	LM_TENSOR(wo, Q, EMBD),          /* (n_head * head_dim, n_embd) */
	LM_TENSOR(ffn_norm, EMBD, ONE),  /* (n_embd) f32 */
	LM_TENSOR(w_gate, EMBD, FF),     /* (n_embd, n_ff) */
	LM_TENSOR(w_up, EMBD, FF),       /* (n_embd, n_ff) */
	LM_TENSOR(w_down, FF, EMBD),     /* (n_ff, n_embd) */
};

/* What a llama file may carry that this graph does not compute. */
static const char *const llama_refused[] = {".bias", "rope_freqs", "ffn_gate_inp", "_exps", NULL};

static int llama_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
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
	LM_FW_OP(be->rmsnorm(ctx, fw->h, fw->x, w->attn_norm.data, e, n, eps), "attn_norm");
	LM_FW_OP(be->matmul(ctx, fw->q, &w->wq, fw->h, n), "attn_q");
	LM_FW_OP(be->matmul(ctx, fw->k, &w->wk, fw->h, n), "attn_k");
	LM_FW_OP(be->matmul(ctx, fw->v, &w->wv, fw->h, n), "attn_v");
	LM_FW_OP(be->rope(ctx, fw->q, hp->n_head[il], hp->head_dim, b->loc, n, &hp->rope),
		 "rope q");
	LM_FW_OP(be->rope(ctx, fw->k, hp->n_head_kv[il], hp->head_dim, b->loc, n, &hp->rope),
		 "rope k");
	LM_FW_OP(be->kv_store(ctx, kvl, fw->k, fw->v, b->loc, n), "kv_store");
	float scale = 1.0f / sqrtf((float)hp->head_dim);
	LM_FW_OP(be->attention(ctx, fw->att, fw->q, kvl, b->loc, n, hp->n_head[il], scale),
		 "attention");
	LM_FW_OP(be->matmul(ctx, fw->h, &w->wo, fw->att, n), "attn_output");
	LM_FW_OP(be->add(ctx, fw->x, fw->h, (size_t)n * (size_t)e), "residual");
	/* Feed-forward block. */
	LM_FW_OP(be->rmsnorm(ctx, fw->h, fw->x, w->ffn_norm.data, e, n, hp->rms_eps), "ffn_norm");
	LM_FW_OP(be->matmul(ctx, fw->gate, &w->w_gate, fw->h, n), "ffn_gate");
	LM_FW_OP(be->matmul(ctx, fw->up, &w->w_up, fw->h, n), "ffn_up");
	LM_FW_OP(be->silu_mul(ctx, fw->gate, fw->gate, fw->up, (size_t)n * (size_t)ff), "silu_mul");
	LM_FW_OP(be->matmul(ctx, fw->h, &w->w_down, fw->gate, n), "ffn_down");
	LM_FW_OP(be->add(ctx, fw->x, fw->h, (size_t)n * (size_t)e), "residual");
	return 0;
}

const struct lm_arch lm_arch_llama = {
	.name = "llama",
	.tensors = llama_tensors,
	.n_tensors = sizeof llama_tensors / sizeof llama_tensors[0],
	.refused = llama_refused,
	.layer = llama_layer,
};

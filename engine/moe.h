/* moe.h — a mixture-of-experts FFN over a batch, on any backend.
 *
 * For each token t of the batch (x[t], the normed residual):
 *     logits = x[t] Wrouter (+ router bias)                  (n_expert)
 *     p      = softmax(logits)  or  sigmoid(logits)          (lm_moe_params.gating)
 *              or the logits themselves (SOFTMAX_WEIGHT)
 *     pick   = the n_used experts of highest p, best first (ties: the lower index)
 *     w[r]   = p[pick[r]] (SOFTMAX_WEIGHT: the softmax of the n_used picked logits), divided
 *              by their sum where the file normalises (the sum clamped to 2^-14 as llama.cpp
 *              does), times the scale
 *     y[t]   = sum over r = 0, 1, ... of w[r] x (s_e x (down_e(act(gate_e x[t] + bg_e,
 *              up_e x[t] + bu_e)) + bd_e)), e = pick[r], added in rank order; act is
 *              silu(g) * u, gelu(g) * u, or gpt-oss's swiglu_oai (kernels/backend.h) where
 *              p.swiglu_oai says; the expert biases b*_e where bound; s_e the expert's output
 *              scale where the file has one (ffn_down_exps.scale), else 1
 *     y[t]  += shared(x[t])                                  where the layer has a shared FFN
 * as llama.cpp (release v0.4.0, build_moe_ffn) computes it. The router may read other rows
 * than the experts (gemma4 routes on its own norm of the residual: lm_moe_run_routed).
 *
 * A shared FFN (lm_moe_shared) runs on every token beside the routed experts:
 *     shared(x) = down(act(gate x) * up x) x sigmoid(x . gate_inp)
 * the sigmoid gate only where the layer has one (qwen35moe's ffn_gate_inp_shexp); gemma4's
 * shared FFN is ungated and normed apart from the experts, so its layer runs it on its own
 * (lm_moe_shared_run). It is per-token arithmetic: batch invariance holds for it as for the
 * dense FFN.
 *
 * Batched: the batch's tokens are grouped by expert, and each picked expert's gate, up and down
 * run once over its group (its weights read once per batch); an expert no token picked is not
 * read at all, so one token's decode reads only its own experts. Batch invariance: a matmul's
 * output row depends on its input row only, and each token's outputs are weighted and added in
 * the token's own rank order, never in the order of the groups, so a token's y is the same bits
 * alone and in any batch.
 */
#ifndef LM_MOE_H
#define LM_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/hparams.h"
#include "engine/weights.h"
#include "kernels/backend.h"

/* A shared FFN (shared expert): every token goes through it. */
struct lm_moe_shared {
	const struct lm_weight *gate, *up; /* (n_embd, n_ff) */
	const struct lm_weight *down;      /* (n_ff, n_embd) */
	const struct lm_weight *gate_inp;  /* (n_embd, 1): the output times sigmoid(x . gate_inp);
					    * NULL or unbound: ungated */
	bool gelu;                         /* GELU-gated, else SiLU-gated */
};

/* One layer's mixture, as the engine binds it. The biases are optional: NULL or unbound
 * (data NULL) means none. */
struct lm_moe_layer {
	const struct lm_weight *router;   /* (n_embd, n_expert) */
	const struct lm_weight *router_b; /* (n_expert) f32 */
	const struct lm_experts *exps;    /* n_expert experts: gate, up (n_embd, n_ff), down, and
					   * down_scale where the file has it */
	/* Expert e's biases are row e: gate_b, up_b (n_ff, n_expert), down_b (n_embd, n_expert),
	 * all f32. */
	const struct lm_weight *gate_b, *up_b, *down_b;
	int32_t n_used; /* experts per token */
	struct lm_moe_params p;
	bool gelu;                          /* the experts are GELU-gated, else SiLU-gated */
	const struct lm_moe_shared *shared; /* added to the experts' sum; NULL: none */
};

/* swiglu_oai's constants, as llama.cpp's build_moe_ffn fixes them for gpt-oss. */
#define LM_MOE_OAI_ALPHA 1.702f
#define LM_MOE_OAI_LIMIT 7.0f

/* The buffers of lm_moe_run, for batches of up to max_batch tokens and layers up to these
 * sizes. */
struct lm_moe_scratch {
	int32_t max_batch, n_embd, n_expert, n_used, n_ff;
	/* backend memory */
	float *logits;    /* [max_batch][n_expert] */
	float *xg;        /* [max_batch][n_embd]: one expert's tokens, gathered */
	float *gate, *up; /* [max_batch][n_ff] */
	float *yg;        /* [max_batch][n_embd]: that expert's outputs */
	float *ys;        /* [n_used][max_batch][n_embd]: token t's r-th expert's weighted output */
	float *ysh;       /* [max_batch][n_embd]: the shared FFN's output */
	float *xe, *xr;   /* [max_batch][n_embd]: the caller's, for the experts' and the router's
			   * inputs where its layer norms them apart from its other rows (gemma4) */
	/* host memory */
	float *logits_host; /* [max_batch][n_expert] */
	int32_t *pick;      /* [max_batch][n_used]: token t's experts, best first */
	float *weight;      /* [max_batch][n_used]: their weights */
	int32_t *group;     /* [max_batch x n_used]: t x n_used + r, grouped by expert */
	int32_t *start;     /* [n_expert + 1]: expert e's group is group[start[e], start[e+1]) */
	uint64_t bytes;     /* backend and host bytes together */
};

/* The bytes lm_moe_scratch_init allocates for these sizes (the planner's price); n_ff is the
 * widest of the experts and the shared FFN. */
uint64_t lm_moe_scratch_bytes(int32_t max_batch, int32_t n_embd, int32_t n_expert, int32_t n_used,
			      int32_t n_ff);
int lm_moe_scratch_init(struct lm_moe_scratch *s, struct lm_backend *be, int32_t max_batch,
			int32_t n_embd, int32_t n_expert, int32_t n_used, int32_t n_ff, lm_diag *d);
/* Harmless on a zeroed scratch. */
void lm_moe_scratch_fini(struct lm_moe_scratch *s, struct lm_backend *be);

/* One token's routing: its n_used experts, best first, and their weights (see above). */
void lm_moe_route(const float *logits, int32_t n_expert, int32_t n_used,
		  const struct lm_moe_params *p, int32_t *pick, float *weight);

/* y = the mixture over x, both backend memory [n][n_embd]; y may equal x. The layer's sizes
 * must fit the scratch (LM_EINVAL otherwise). d names the failing op. */
int lm_moe_run(struct lm_backend *be, struct lm_moe_scratch *s, const struct lm_moe_layer *l,
	       float *y, const float *x, int32_t n, lm_diag *d);
/* The same with the router reading xr ([n][n_embd]) instead of x; y may equal x, not xr. */
int lm_moe_run_routed(struct lm_backend *be, struct lm_moe_scratch *s, const struct lm_moe_layer *l,
		      float *y, const float *x, const float *xr, int32_t n, lm_diag *d);
/* y = shared(x) over n rows ([n][n_embd], backend memory; y may equal x), on the scratch's
 * gate and up buffers. */
int lm_moe_shared_run(struct lm_backend *be, struct lm_moe_scratch *s,
		      const struct lm_moe_shared *sh, float *y, const float *x, int32_t n,
		      lm_diag *d);

#endif

/* arch.h — an architecture as data plus one layer function.
 *
 * Each architecture is one file, engine/arch_<name>.c, that a reader can take in at one sitting:
 * the table of the tensors its layers have (which fields of struct lm_layer_weights, under which
 * GGUF names, in which shapes) and the function that runs one layer over a batch. The forward
 * pass (engine/forward.c) keeps what every architecture shares: the checks, the embedding, the
 * loop over the slice's layers and the head.
 */
#ifndef LM_ARCH_H
#define LM_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "engine/forward.h"
#include "engine/weights.h"

/* A tensor's dimension, in the layer's own hyperparameters. */
enum lm_dim {
	LM_DIM_ONE = 0,  /* 1: a vector */
	LM_DIM_EMBD,     /* n_embd */
	LM_DIM_Q,        /* n_head(il) x head_dim(il) */
	LM_DIM_KV,       /* n_head_kv(il) x head_dim(il) */
	LM_DIM_FF,       /* n_ff(il) */
	LM_DIM_HEAD,     /* head_dim(il) */
	LM_DIM_HEADS,    /* n_head(il): one value per query head */
	LM_DIM_EXPERTS,  /* n_expert(il) */
	LM_DIM_FF_EXP,   /* n_ff_exp(il): one expert's feed-forward width */
	LM_DIM_FF_EXP2,  /* 2 x n_ff_exp(il): an expert's fused gate and up rows */
	LM_DIM_QG,       /* n_head(il) x 2 x head_dim(il): queries and their gates (qwen35) */
	LM_DIM_CONV,     /* the delta-net's conv channels (dnet.h: lm_dnet_conv_dim) */
	LM_DIM_VALUE,    /* the delta-net's value width, n_v_heads x ssm head_dim */
	LM_DIM_VHEADS,   /* the delta-net's value heads */
	LM_DIM_SSM_HEAD, /* the delta-net's head size (ssm.state_size) */
	LM_DIM_CONV_K,   /* the delta-net's conv taps */
	LM_DIM_FF_SHEXP, /* n_ff_shexp(il): the shared expert's width (qwen35moe) */
};

/* Which layers of a model have a tensor (qwen35's attention and recurrent layers differ). */
enum lm_layer_kind {
	LM_KIND_ANY = 0,   /* every layer */
	LM_KIND_ATTN,      /* attention layers only */
	LM_KIND_RECURRENT, /* recurrent layers only */
};

/* One tensor of a layer: which (its field and its name under "blk.N.") and its shape. */
struct lm_tensor_spec {
	enum lm_layer_tensor t;
	enum lm_dim ne0, ne1;
	bool optional;           /* absent in the file: the field stays unbound (data == NULL) */
	enum lm_dim ne2;         /* LM_DIM_EXPERTS: a tensor of experts (struct lm_experts); else
				  * ONE */
	enum lm_layer_kind kind; /* the layers that have it */
	bool moe;                /* bound on the mixture-of-experts layers only, and refused on a
				  * dense layer (hp.layer[il].n_expert == 0) */
};

#define LM_TENSOR_SPEC_(field, ne0_, ne1_, opt, ne2_, kind_, moe_)                              \
	{                                                                                       \
		.t = LM_T_##field, .ne0 = LM_DIM_##ne0_, .ne1 = LM_DIM_##ne1_, .optional = opt, \
		.ne2 = LM_DIM_##ne2_, .kind = LM_KIND_##kind_, .moe = moe_                      \
	}

#define LM_TENSOR(field, ne0, ne1)     LM_TENSOR_SPEC_(field, ne0, ne1, false, ONE, ANY, false)
#define LM_TENSOR_OPT(field, ne0, ne1) LM_TENSOR_SPEC_(field, ne0, ne1, true, ONE, ANY, false)

/* A tensor of the attention layers only, or of the recurrent ones only. */
#define LM_TENSOR_ATTN(field, ne0, ne1) LM_TENSOR_SPEC_(field, ne0, ne1, false, ONE, ATTN, false)
#define LM_TENSOR_REC(field, ne0, ne1) \
	LM_TENSOR_SPEC_(field, ne0, ne1, false, ONE, RECURRENT, false)

/* A tensor of the mixture-of-experts layers only (required there; optional: _OPT). */
#define LM_TENSOR_MOE(field, ne0, ne1)     LM_TENSOR_SPEC_(field, ne0, ne1, false, ONE, ANY, true)
#define LM_TENSOR_MOE_OPT(field, ne0, ne1) LM_TENSOR_SPEC_(field, ne0, ne1, true, ONE, ANY, true)

/* A tensor of experts, (ne0, ne1) each, bound into the layer's struct lm_experts (on the
 * mixture-of-experts layers). A fused gate_up_exps binds each expert's two halves as its gate
 * and up; a layer must end with a gate, an up and a down for every expert. */
#define LM_TENSOR_EXPS(field, ne0, ne1) LM_TENSOR_SPEC_(field, ne0, ne1, false, EXPERTS, ANY, true)
#define LM_TENSOR_EXPS_OPT(field, ne0, ne1) \
	LM_TENSOR_SPEC_(field, ne0, ne1, true, EXPERTS, ANY, true)

/* A tensor (by a part of its name) that layermesh refuses, and why. */
struct lm_refusal {
	const char *part;
	const char *why;
};

struct lm_arch {
	const char *name; /* general.architecture */
	const struct lm_tensor_spec *tensors;
	size_t n_tensors;
	/* Tensors with their own refusal message, ended by {NULL}; any other tensor the table
	 * does not list is refused too (engine/weights.c). */
	const struct lm_refusal *refused;
	/* Runs absolute layer il of the slice over batch b, reading and updating fw->x (the
	 * residual stream, [n][n_embd]) with fw's scratch. */
	int (*layer)(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d);
};

/* ---- the steps of a layer (engine/layer.c), on fw's scratch for the batch's n tokens ---- */

/* rc, the failure of backend op `what` in layer il, with d naming the layer, the op and the
 * backend's own message where it has one (a CUDA error). Every step reports through it:
 *     if ((rc = be->iface->matmul(...)) != 0)
 *             return lm_layer_fail(fw, rc, il, "ffn_up", d);
 */
int lm_layer_fail(const struct lm_forward *fw, int rc, int32_t il, const char *what, lm_diag *d);

/* y = rmsnorm(x) * w over rows of n_embd (w NULL: unweighted). */
int lm_layer_norm(struct lm_forward *fw, float *y, const float *x, const struct lm_weight *w,
		  float eps, int32_t il, int32_t n, const char *what, lm_diag *d);
/* y = W x, plus the bias on every row when `bias` is bound (NULL or unbound: none). */
int lm_layer_proj(struct lm_forward *fw, float *y, const struct lm_weight *w,
		  const struct lm_weight *bias, const float *x, int32_t il, int32_t n,
		  const char *what, lm_diag *d);
/* Every head of x ([n][heads][head_dim]) normed in place, times w ([head_dim]; NULL: none). */
int lm_layer_head_norm(struct lm_forward *fw, float *x, const struct lm_weight *w, int32_t heads,
		       int32_t il, int32_t n, const char *what, lm_diag *d);
/* x's heads turned by layer il's rope (and the model's frequency factors where it uses them). */
int lm_layer_rope(struct lm_forward *fw, float *x, int32_t heads, int32_t il,
		  const struct lm_batch *b, const char *what, lm_diag *d);
/* k and v stored at the batch's places, attention of q over the cache (scores x scale), then
 * h = att Wo (+ bo). */
int lm_layer_attend(struct lm_forward *fw, int32_t il, const struct lm_batch *b, float scale,
		    lm_diag *d);
/* h = (act(h Wgate) * (h Wup)) Wdown, act SiLU or (gelu) GELU. */
int lm_layer_ffn(struct lm_forward *fw, int32_t il, int32_t n, bool gelu, lm_diag *d);
/* h = the mixture of experts of layer il over h (engine/moe.c): the router picks each token's
 * experts, and their outputs are summed by the router's weights; plus the layer's shared
 * expert (ffn_*_shexp, gated by ffn_gate_inp_shexp where bound) where the file has one. */
int lm_layer_moe(struct lm_forward *fw, int32_t il, int32_t n, lm_diag *d);
/* x += h. */
int lm_layer_residual(struct lm_forward *fw, int32_t il, int32_t n, lm_diag *d);
/* y *= s over len floats. */
int lm_layer_scale(struct lm_forward *fw, float *y, float s, size_t len, int32_t il,
		   const char *what, lm_diag *d);

/* The architecture called `name`; NULL when layermesh has none of that name. */
const struct lm_arch *lm_arch_find(const char *name);
/* The names layermesh runs, comma-separated, for messages. */
const char *lm_arch_names(void);

/* The refusals every architecture shares: experts, fused projections. */
extern const struct lm_refusal lm_refused_moe[];

extern const struct lm_arch lm_arch_llama, lm_arch_qwen2, lm_arch_qwen3, lm_arch_qwen3moe,
	lm_arch_gemma3, lm_arch_gemma4, lm_arch_qwen35, lm_arch_qwen35moe, lm_arch_gptoss;

#endif

/* weights.h — a model slice's weights, bound on a backend.
 *
 * Weights are bound by their GGUF names, shapes checked against the hyperparameters. The
 * tensors of a layer are the architecture's (its table in engine/arch_<name>.c says which it
 * uses and their shapes); the stage tensors are every architecture's:
 *     token_embd.weight          (n_embd, n_vocab)            first stage
 *     output_norm.weight         (n_embd)                      last stage, f32
 *     output.weight              (n_embd, n_vocab)             last stage; absent = tied to
 *                                                              token_embd.weight
 * (shapes as GGUF writes them: ne0 first, so (in, out) for matrices)
 *
 * A model is loaded for a slice: layers [begin, end) plus the embedding and/or the head. Only the
 * slice's tensors are mapped (gguf_map), so a worker's resident memory is its slice's bytes.
 */
#ifndef LM_WEIGHTS_H
#define LM_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/format/gguf.h"
#include "common/model/hparams.h"
#include "kernels/backend.h"

struct lm_slice {
	int32_t begin, end; /* layers [begin, end) */
	bool embedding;     /* this stage owns token_embd (the first stage) */
	bool head;          /* this stage owns output_norm and the lm_head (the last stage) */
};

/* Every tensor a layer of any architecture may have: its field and its name under "blk.N.".
 * The struct and the unbinding come from this one list; which tensors an architecture binds,
 * and in which shapes, is its own table (engine/arch.h). */
#define LM_LAYER_TENSORS(X)                                                                       \
	X(attn_norm, "attn_norm.weight")                /* (n_embd) */                            \
	X(wq, "attn_q.weight")                          /* (n_embd, n_head x head_dim) */         \
	X(bq, "attn_q.bias")                            /* (n_head x head_dim) */                 \
	X(wk, "attn_k.weight")                          /* (n_embd, n_head_kv x head_dim) */      \
	X(bk, "attn_k.bias")                            /* (n_head_kv x head_dim) */              \
	X(wv, "attn_v.weight")                          /* (n_embd, n_head_kv x head_dim) */      \
	X(bv, "attn_v.bias")                            /* (n_head_kv x head_dim) */              \
	X(q_norm, "attn_q_norm.weight")                 /* (head_dim): every query head */        \
	X(k_norm, "attn_k_norm.weight")                 /* (head_dim): every key head */          \
	X(wo, "attn_output.weight")                     /* (n_head x head_dim, n_embd) */         \
	X(bo, "attn_output.bias")                       /* (n_embd) */                            \
	X(attn_sinks, "attn_sinks.weight")              /* (n_head): per-head sink logits */      \
	X(attn_post_norm, "post_attention_norm.weight") /* (n_embd) */                            \
	X(ffn_norm, "ffn_norm.weight")                  /* (n_embd) */                            \
	X(w_gate, "ffn_gate.weight")                    /* (n_embd, n_ff) */                      \
	X(w_up, "ffn_up.weight")                        /* (n_embd, n_ff) */                      \
	X(w_down, "ffn_down.weight")                    /* (n_ff, n_embd) */                      \
	X(ffn_post_norm, "post_ffw_norm.weight")        /* (n_embd) */                            \
	X(out_scale, "layer_output_scale.weight")       /* (1): the layer's output is scaled */   \
	X(gate_inp, "ffn_gate_inp.weight")              /* (n_embd, n_expert): the router */      \
	X(gate_inp_b, "ffn_gate_inp.bias")              /* (n_expert): the router's bias */       \
	X(gate_exps_b, "ffn_gate_exps.bias") /* (n_ff_exp, n_expert): row e expert e's */         \
	X(up_exps_b, "ffn_up_exps.bias")     /* (n_ff_exp, n_expert) */                           \
	X(down_exps_b, "ffn_down_exps.bias") /* (n_embd, n_expert) */                             \
	X(gate_exps, "ffn_gate_exps.weight") /* (n_embd, n_ff_exp, n_expert): bound per expert */ \
	X(up_exps, "ffn_up_exps.weight")     /* (n_embd, n_ff_exp, n_expert): bound per expert */ \
	X(down_exps, "ffn_down_exps.weight") /* (n_ff_exp, n_embd, n_expert): bound per expert */ \
	X(gate_up_exps, "ffn_gate_up_exps.weight")   /* (n_embd, 2 n_ff_exp, n_expert): fused */  \
	X(down_exps_s, "ffn_down_exps.scale")        /* (n_expert) f32: the experts' outputs' */  \
	X(gate_inp_s, "ffn_gate_inp.scale")          /* (n_embd) f32: the router input's */       \
	X(ffn_pre_norm_2, "pre_ffw_norm_2.weight")   /* (n_embd): the experts' input (gemma4) */  \
	X(ffn_post_norm_1, "post_ffw_norm_1.weight") /* (n_embd): the shared FFN's output */      \
	X(ffn_post_norm_2, "post_ffw_norm_2.weight") /* (n_embd): the experts' output */          \
	X(wqkv, "attn_qkv.weight")         /* (n_embd, conv_dim): qwen35's mixed Q, K, V */       \
	X(wqkv_gate, "attn_gate.weight")   /* (n_embd, value_dim): the output gate z */           \
	X(ssm_conv1d, "ssm_conv1d.weight") /* (conv_kernel, conv_dim) f32 */                      \
	X(ssm_dt, "ssm_dt.bias")           /* (n_v_heads) */                                      \
	X(ssm_a, "ssm_a")                  /* (n_v_heads): -exp(A_log) */                         \
	X(ssm_beta, "ssm_beta.weight")     /* (n_embd, n_v_heads) */                              \
	X(ssm_alpha, "ssm_alpha.weight")   /* (n_embd, n_v_heads) */                              \
	X(ssm_norm, "ssm_norm.weight")     /* (ssm head_dim) */                                   \
	X(ssm_out, "ssm_out.weight")       /* (value_dim, n_embd) */                              \
	X(gate_inp_shexp, "ffn_gate_inp_shexp.weight") /* (n_embd): the shared expert's gate */   \
	X(w_gate_shexp, "ffn_gate_shexp.weight")       /* (n_embd, n_ff_shexp) */                 \
	X(w_up_shexp, "ffn_up_shexp.weight")           /* (n_embd, n_ff_shexp) */                 \
	X(w_down_shexp, "ffn_down_shexp.weight")       /* (n_ff_shexp, n_embd) */

/* A mixture-of-experts layer's experts. Expert e of a 3-D tensor is the contiguous block of its
 * ne1 rows at e x ne1 x row_bytes: each is bound as a matrix of its own that points into the
 * mapping (never a copy), so a backend takes it like any weight and a token's matmul reads
 * only the experts it uses. */
struct lm_experts {
	int32_t n;                          /* experts; 0 on a dense layer */
	struct lm_weight *gate, *up, *down; /* [n] each; a fused gate_up tensor binds gate and up
					     * to the two halves (gate rows, then up rows) of each
					     * expert's block */
	const float *down_scale;            /* [n] host: expert e's output times down_scale[e]
					     * (ffn_down_exps.scale); NULL: none */
};

struct lm_layer_weights {
#define LM_LAYER_FIELD_(field, name) struct lm_weight field;
	LM_LAYER_TENSORS(LM_LAYER_FIELD_)
#undef LM_LAYER_FIELD_
	float out_scale_value;  /* out_scale's one value, read at binding (1 without it) */
	struct lm_experts exps; /* gate_exps, up_exps (or gate_up_exps) and down_exps, expert
				 * by expert (their fields above stay unbound) */
};

enum lm_layer_tensor {
#define LM_LAYER_ENUM_(field, name) LM_T_##field,
	LM_LAYER_TENSORS(LM_LAYER_ENUM_)
#undef LM_LAYER_ENUM_
		LM_T_COUNT
};

/* "attn_q.weight" for LM_T_wq. */
const char *lm_layer_tensor_name(enum lm_layer_tensor t);
/* The field of l that tensor t binds. */
struct lm_weight *lm_layer_tensor(struct lm_layer_weights *l, enum lm_layer_tensor t);

struct lm_arch;

struct lm_model {
	struct lm_hparams hp;
	const struct lm_arch *arch; /* the architecture's tensors and layer function */
	gguf_file *file;            /* owned */
	struct lm_backend *backend; /* borrowed */
	struct lm_slice slice;
	struct lm_weight tok_embd;       /* (n_embd, n_vocab); bound when slice.embedding */
	struct lm_weight output_norm;    /* (n_embd) f32; bound when slice.head */
	struct lm_weight output;         /* (n_embd, n_vocab); bound when slice.head */
	bool output_shared;              /* output is tok_embd (a tied head on the first stage) */
	struct lm_weight rope_freqs;     /* (n_rot / 2) f32 frequency factors; bound when a layer
					  * of the slice applies them (hp.layer[].rope_factors) */
	struct lm_layer_weights *layers; /* [slice.end - slice.begin] */
	uint64_t weight_bytes;           /* bytes of the bound tensors (each counted once) */
	uint64_t mapped_bytes;           /* bytes mapped, page rounding included */
	uint64_t fingerprint;            /* gguf_fingerprint() of the file */
	uint64_t digest; /* gguf_tensor_digest() of the slice's tensors, as loaded */
};

/* Flags of lm_model_open. */
enum {
	/* Make the weights resident now, in huge pages where the system has them (gguf_map). */
	LM_MODEL_POPULATE = 1u << 0,
	/* Leave the tokenizer's arrays unread (GGUF_OPEN_NO_VOCAB): for a process that never
	 * tokenizes, such as a worker; tok_load() then refuses the file. */
	LM_MODEL_NO_VOCAB = 1u << 1,
};

/* Opens `path`, reads the hyperparameters, maps and binds the slice's weights on `backend`.
 * slice == NULL loads the whole model (every layer, embedding and head). `flags` are
 * LM_MODEL_*. On failure nothing is left open. */
int lm_model_open(struct lm_model *m, const char *path, const struct lm_slice *slice,
		  struct lm_backend *backend, unsigned flags, lm_diag *d);
/* Unbinds and closes; harmless on a zeroed model. */
void lm_model_close(struct lm_model *m);

/* The layer's weights for absolute layer il; NULL when il is outside the slice. */
const struct lm_layer_weights *lm_model_layer(const struct lm_model *m, int32_t il);

/* Binds tensor `name` of m's file to w, checking its shape (ne0, ne1), that its type is one the
 * kernels take and, for vectors and biases ("*.bias", added as floats), that it is f32. LM_ENOTFOUND (with a message) when the file
 * lacks it. For the architectures' bind functions. */
int lm_model_bind(struct lm_model *m, struct lm_weight *w, const char *name, int64_t ne0,
		  int64_t ne1, lm_diag *d);

#endif

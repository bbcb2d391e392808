/* model.h — a llama-architecture model read from GGUF: hyperparameters and bound weights.
 *
 * Hyperparameters come from the GGUF metadata under the architecture's prefix ("llama."), with
 * llama.cpp's defaults where a key is absent:
 *     attention.head_count_kv       -> head_count (no grouped-query attention)
 *     rope.freq_base                -> 10000
 *     rope.dimension_count          -> the head dimension
 *     attention.layer_norm_rms_epsilon -> 1e-5 (llama.cpp requires this key; 1e-5 is the value
 *                                     LLaMA and llama2.c models use)
 *     rope.scaling.factor           -> none (freq_scale 1)
 * head_count, head_count_kv and feed_forward_length may be per-layer arrays, as in GGUF.
 *
 * Weights are bound by their GGUF names, shapes checked against the hyperparameters:
 *     token_embd.weight          (n_embd, n_vocab)            first stage
 *     blk.N.attn_norm.weight     (n_embd)                      f32
 *     blk.N.attn_q.weight        (n_embd, n_head * head_dim)
 *     blk.N.attn_k.weight        (n_embd, n_head_kv * head_dim)
 *     blk.N.attn_v.weight        (n_embd, n_head_kv * head_dim)
 *     blk.N.attn_output.weight   (n_head * head_dim, n_embd)
 *     blk.N.ffn_norm.weight      (n_embd)                      f32
 *     blk.N.ffn_gate.weight      (n_embd, n_ff)
 *     blk.N.ffn_up.weight        (n_embd, n_ff)
 *     blk.N.ffn_down.weight      (n_ff, n_embd)
 *     output_norm.weight         (n_embd)                      last stage, f32
 *     output.weight              (n_embd, n_vocab)             last stage; absent = tied to
 *                                                              token_embd.weight
 * (shapes as GGUF writes them: ne0 first, so (in, out) for matrices)
 *
 * A model is loaded for a slice: layers [begin, end) plus the embedding and/or the head. Only the
 * slice's tensors are mapped (gguf_map), so a worker's resident memory is its slice's bytes.
 */
#ifndef LM_MODEL_H
#define LM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/gguf.h"
#include "common/kv_cache.h"
#include "kernels/backend.h"

#define LM_MAX_LAYERS 1024

struct lm_hparams {
	char arch[32]; /* "llama" */
	int32_t n_layer;
	int32_t n_embd;
	int32_t n_vocab;
	int32_t n_ctx_train; /* context length the model was trained for */
	int32_t head_dim;    /* per attention head; n_embd / n_head unless key_length says */
	float rms_eps;
	struct lm_rope_params rope;
	int32_t n_head[LM_MAX_LAYERS];    /* per layer */
	int32_t n_head_kv[LM_MAX_LAYERS]; /* per layer */
	int32_t n_ff[LM_MAX_LAYERS];      /* per layer */
	bool tied;                        /* no output.weight: the head reuses token_embd.weight */
};

/* Reads and validates the hyperparameters; nothing is mapped. */
int lm_hparams_load(const gguf_file *f, struct lm_hparams *hp, lm_diag *d);
/* The KV geometry of layer il (llama has no sliding-window layers). */
struct kv_geom lm_hparams_kv_geom(const struct lm_hparams *hp, int32_t il);

/* Per-layer costs for the planner. */
struct lm_layer_cost {
	uint64_t weight_bytes; /* bytes of the layer's tensors in the file */
	uint64_t params;       /* parameters (elements) of its matrices */
	uint64_t flops;        /* per token: 2 x matrix parameters (multiply-adds) */
};
struct lm_model_costs {
	struct lm_layer_cost *layer; /* [n_layer], caller-owned array */
	uint64_t embd_bytes;         /* token_embd.weight */
	uint64_t head_bytes;         /* output_norm + output (token_embd again when tied) */
	uint64_t head_flops;         /* per token: the lm_head matmul */
};
/* Fills costs->layer[0..n_layer) and the stage extras from the tensor index. */
int lm_model_costs(const gguf_file *f, const struct lm_hparams *hp, struct lm_model_costs *costs,
		   lm_diag *d);

struct lm_slice {
	int32_t begin, end; /* layers [begin, end) */
	bool embedding;     /* this stage owns token_embd (the first stage) */
	bool head;          /* this stage owns output_norm and the lm_head (the last stage) */
};

struct lm_layer_weights {
	struct lm_weight attn_norm; /* (n_embd) f32 */
	struct lm_weight wq;        /* (n_embd, n_head * head_dim) */
	struct lm_weight wk;        /* (n_embd, n_head_kv * head_dim) */
	struct lm_weight wv;        /* (n_embd, n_head_kv * head_dim) */
	struct lm_weight wo;        /* (n_head * head_dim, n_embd) */
	struct lm_weight ffn_norm;  /* (n_embd) f32 */
	struct lm_weight w_gate;    /* (n_embd, n_ff) */
	struct lm_weight w_up;      /* (n_embd, n_ff) */
	struct lm_weight w_down;    /* (n_ff, n_embd) */
};

struct lm_model {
	struct lm_hparams hp;
	gguf_file *file;            /* owned */
	struct lm_backend *backend; /* borrowed */
	struct lm_slice slice;
	struct lm_weight tok_embd;       /* (n_embd, n_vocab); bound when slice.embedding */
	struct lm_weight output_norm;    /* (n_embd) f32; bound when slice.head */
	struct lm_weight output;         /* (n_embd, n_vocab); bound when slice.head */
	struct lm_layer_weights *layers; /* [slice.end - slice.begin] */
	uint64_t weight_bytes;           /* bytes of the bound tensors (each counted once) */
	uint64_t mapped_bytes;           /* bytes mapped, page rounding included */
	uint64_t fingerprint;            /* gguf_fingerprint() of the file */
};

/* Opens `path`, reads the hyperparameters, maps and binds the slice's weights on `backend`.
 * slice == NULL loads the whole model (every layer, embedding and head). `populate` makes the
 * weights resident now, in huge pages where the system has them (gguf_map). On failure nothing
 * is left open. */
int lm_model_open(struct lm_model *m, const char *path, const struct lm_slice *slice,
		  struct lm_backend *backend, bool populate, lm_diag *d);
/* Unbinds and closes; harmless on a zeroed model. */
void lm_model_close(struct lm_model *m);

/* The layer's weights for absolute layer il; NULL when il is outside the slice. */
const struct lm_layer_weights *lm_model_layer(const struct lm_model *m, int32_t il);

#endif

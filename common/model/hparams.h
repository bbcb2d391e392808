/* hparams.h — a model's hyperparameters and per-layer costs, read from GGUF metadata.
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
 * Nothing here maps a tensor or knows a device: the planner sizes a mesh from these before any
 * worker starts, and the engine (engine/model.h) binds the weights they describe.
 */
#ifndef LM_HPARAMS_H
#define LM_HPARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/format/gguf.h"
#include "common/model/kv_geom.h"
#include "common/model/rope.h"

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

/* The widest of layers [begin, end): what a stage's activation buffers are sized by. */
struct lm_widths {
	int32_t q_dim;    /* n_head x head_dim */
	int32_t kv_dim;   /* n_head_kv x head_dim */
	int32_t ff_dim;   /* n_ff */
	int32_t head_dim; /* per head */
	int32_t group;    /* query heads per KV head */
};
struct lm_widths lm_hparams_widths(const struct lm_hparams *hp, int32_t begin, int32_t end);

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

#endif

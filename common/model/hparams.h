/* hparams.h — a model's hyperparameters and per-layer costs, read from GGUF metadata.
 *
 * Hyperparameters come from the GGUF metadata under the architecture's prefix ("llama.",
 * "gemma4." ...), with llama.cpp's (release v0.4.0) defaults where a key is absent:
 *     attention.head_count_kv          -> head_count (no grouped-query attention)
 *     attention.key_length             -> n_embd / head_count of layer 0 (= value_length)
 *     attention.key_length_swa         -> key_length (sliding layers' heads; Gemma 4)
 *     rope.freq_base                   -> 10000
 *     rope.freq_base_swa               -> 10000 (Gemma's sliding layers)
 *     rope.dimension_count[_swa]       -> the head dimension
 *     attention.layer_norm_rms_epsilon -> 1e-5
 *     rope.scaling.factor              -> none (freq_scale 1)
 * head_count, head_count_kv and feed_forward_length may be per-layer arrays, as in GGUF.
 *
 * Every layer has its own geometry (struct lm_layer_hparams): a model may mix sliding-window
 * layers and global ones of other head counts and head sizes (Gemma 4's 50 sliding layers of 16
 * KV heads x 256 and 10 global layers of 4 x 512). What each architecture reads, and what it
 * refuses (mixture-of-experts, Gemma 4's per-layer embeddings and shared-KV layers), is its
 * entry in hparams_arch.c; its tensors and its layer are in engine/arch_<name>.c.
 *
 * Nothing here maps a tensor or knows a device: the planner sizes a mesh from these before any
 * worker starts, and the engine (engine/weights.h) binds the weights they describe.
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

/* One layer's geometry. */
struct lm_layer_hparams {
	int32_t n_head;    /* query heads */
	int32_t n_head_kv; /* KV heads */
	int32_t head_dim;  /* elements per head, K, V and Q alike */
	int32_t n_ff;      /* feed-forward width */
	int32_t window;    /* a sliding layer attends to its last `window` positions; 0: global */
	bool rope_factors; /* its rope applies rope_freqs.weight's frequency factors */
	struct lm_rope_params rope; /* mode, rotated dimensions, base and scale */
	/* A mixture-of-experts layer (n_expert > 0): its FFN is n_expert experts of width
	 * n_ff_exp, of which each token takes the n_expert_used its router ranks first; n_ff is
	 * then unused. 0, 0, 0 on a dense layer. */
	int32_t n_expert, n_expert_used, n_ff_exp;
	/* A recurrent layer (qwen35's gated delta-net): no attention and no KV rows, a state of
	 * lm_hparams.ssm's shape per sequence instead; n_head, n_head_kv and head_dim then
	 * unused. */
	bool recurrent;
	/* An attention layer whose Q projection carries a gate per head (qwen35): its output is
	 * n_head x 2 x head_dim, each head's queries then its gate, and the attention output is
	 * multiplied by sigmoid(gate) before Wo. */
	bool q_gate;
	/* A mixture-of-experts layer's shared FFN (shared expert) beside its routed experts, run
	 * on every token: its width; 0: none. qwen35moe's ffn_*_shexp, gemma4's own n_ff-wide
	 * FFN (engine/moe.h: struct lm_moe_shared). */
	int32_t n_ff_shexp;
};

/* The shape of the gated delta-net layers (qwen35), from "<arch>.ssm.*": q and k have
 * n_k_heads heads of head_dim, v has n_v_heads heads of head_dim (value head h reads key head
 * h % n_k_heads, as llama.cpp's kernel does); a causal conv1d of conv_kernel taps runs over the
 * conv_dim = 2 x n_k_heads x head_dim + n_v_heads x head_dim channels of the mixed QKV
 * projection. Per sequence a layer keeps (conv_kernel - 1) x conv_dim inputs of its conv and
 * an n_v_heads x head_dim x head_dim state, in f32. All 0 in a model without them. */
struct lm_ssm_params {
	int32_t conv_kernel; /* ssm.conv_kernel */
	int32_t head_dim;    /* ssm.state_size */
	int32_t n_k_heads;   /* ssm.group_count */
	int32_t n_v_heads;   /* ssm.time_step_rank */
};

/* How a router's logits become the weights of the experts it picks. */
enum lm_moe_gating {
	LM_MOE_SOFTMAX = 0,    /* softmax over every expert, then the top n_expert_used */
	LM_MOE_SIGMOID,        /* sigmoid of each logit, then the top n_expert_used */
	LM_MOE_SOFTMAX_WEIGHT, /* the top n_expert_used logits, then a softmax over those only
				* (gpt-oss) */
};

/* The most experts a layer may have (llama.cpp's LLAMA_MAX_EXPERTS). */
#define LM_MAX_EXPERTS 512

struct lm_moe_params {
	enum lm_moe_gating gating;
	bool norm;   /* the picked experts' weights are divided by their sum */
	float scale; /* then multiplied by this (1: none) */
	/* The experts' activation: gpt-oss's clamped SwiGLU (kernels/backend.h's swiglu_oai,
	 * alpha 1.702, limit 7 as llama.cpp fixes them), else silu(gate) * up. */
	bool swiglu_oai;
};

struct lm_hparams {
	char arch[32]; /* general.architecture: "llama", "qwen2", "qwen3", "qwen3moe", "gemma3",
			* "gemma4", "gpt-oss" */
	int32_t n_layer;
	int32_t n_embd;
	int32_t n_vocab;
	int32_t n_ctx_train; /* context length the model was trained for */
	float rms_eps;
	float embd_scale;    /* the token embedding is multiplied by this (Gemma: sqrt(n_embd)) */
	float attn_scale;    /* attention scores are q.k x this */
	float final_softcap; /* logits become cap x tanh(logits / cap); 0: no cap */
	bool tied;           /* no output.weight: the head reuses token_embd.weight */
	bool has_rope_freqs; /* the file has rope_freqs.weight (some layer applies it) */
	struct lm_moe_params moe; /* the routers of the mixture-of-experts layers */
	struct lm_ssm_params ssm; /* the recurrent layers' shape (qwen35) */
	/* Layers past n_layer in the file (<arch>.nextn_predict_layers: qwen35's multi-token
	 * prediction blocks): block_count - n_layer. Not run and not planned: their tensors are
	 * left unmapped (engine/weights.c says so in a log line), their per-layer values skipped. */
	int32_t n_layer_nextn;
	struct lm_layer_hparams layer[LM_MAX_LAYERS];
};

/* Reads and validates the hyperparameters; nothing is mapped. LM_EUNSUPPORTED, naming the
 * architecture or the feature, for what layermesh does not run. */
int lm_hparams_load(const gguf_file *f, struct lm_hparams *hp, lm_diag *d);
/* The KV geometry of layer il (a recurrent layer's: its state, kv_geom.h). */
struct kv_geom lm_hparams_kv_geom(const struct lm_hparams *hp, int32_t il);
/* The architectures lm_hparams_load reads, comma-separated, for messages. */
const char *lm_hparams_archs(void);

/* The widest of layers [begin, end): what a stage's activation buffers are sized by. */
struct lm_widths {
	int32_t q_dim;         /* n_head x head_dim */
	int32_t kv_dim;        /* n_head_kv x head_dim */
	int32_t ff_dim;        /* n_ff, or on a mixture-of-experts layer the wider of an expert's
				* n_ff_exp and its shared FFN's n_ff_shexp */
	int32_t head_dim;      /* per head */
	int32_t group;         /* query heads per KV head */
	int32_t n_heads;       /* query heads */
	int32_t n_expert;      /* experts of a mixture-of-experts layer (0: none in the range) */
	int32_t n_expert_used; /* experts a token takes */
	int32_t n_recurrent;   /* recurrent layers in the range */
};
struct lm_widths lm_hparams_widths(const struct lm_hparams *hp, int32_t begin, int32_t end);

/* Per-layer costs for the planner. */
struct lm_layer_cost {
	uint64_t weight_bytes; /* bytes of the layer's tensors in the file */
	uint64_t params;       /* parameters (elements) of its matrices */
	uint64_t flops;        /* per token: 2 x matrix parameters (multiply-adds); of a
				* mixture-of-experts layer's experts, only the ones a token takes */
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

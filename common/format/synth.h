/* synth.h — deterministic random-weight models of any shape, as GGUF files.
 *
 * The files follow llama.cpp's (release v0.4.0) architectures exactly (tensor names, shapes
 * ne0-first, metadata keys), so llama.cpp loads them and layermesh can be compared with it on
 * shapes no real model has, in every weight type. The llama layout:
 *
 *     token_embd.weight          [dim, vocab]        --type
 *     blk.N.attn_norm.weight     [dim]               f32
 *     blk.N.attn_q.weight        [dim, dim]          --type
 *     blk.N.attn_k.weight        [dim, kv_dim]       --type   kv_dim = kv_heads * dim / heads
 *     blk.N.attn_v.weight        [dim, kv_dim]       --type
 *     blk.N.attn_output.weight   [dim, dim]          --type
 *     blk.N.ffn_norm.weight      [dim]               f32
 *     blk.N.ffn_gate.weight      [dim, ffn]          --type
 *     blk.N.ffn_down.weight      [ffn, dim]          --type
 *     blk.N.ffn_up.weight        [dim, ffn]          --type
 *     output_norm.weight         [dim]               f32
 *     output.weight              [dim, vocab]        --type   (absent with tied embeddings)
 *     rope_freqs.weight          [head_dim / 2]      f32      (--rope-llama3: Llama 3.1's
 *                                                              long-context factors)
 * The other architectures add or change, per layer (f32 vectors unless said):
 *     qwen2    attn_q.bias [q_dim], attn_k.bias and attn_v.bias [kv_dim]
 *     qwen3    attn_q_norm.weight and attn_k_norm.weight [head_dim]
 *     qwen3moe as qwen3, with the FFN a mixture of --experts experts (each token takes
 *              --experts-used): ffn_gate_inp.weight [dim, experts] (f32, as llama.cpp's
 *              quantizer leaves the router), ffn_gate_exps.weight and ffn_up_exps.weight
 *              [dim, ffn_exp, experts], ffn_down_exps.weight [ffn_exp, dim, experts]
 *     gpt-oss  q/k/v/output biases, attn_sinks.weight [heads] (sink logits, noise of std 1),
 *              post_attention_norm [dim] in place of ffn_norm, qwen3moe's experts with biases:
 *              ffn_gate_inp.bias [experts], ffn_gate_exps.bias and ffn_up_exps.bias
 *              [ffn_exp, experts], ffn_down_exps.bias [dim, experts] (f32); the experts in
 *              --experts-type (MXFP4 as OpenAI ships them); every --swa-period-th layer
 *              (default 2: the odd ones) global, the others sliding over --window positions
 *     gemma3   attn_q_norm, attn_k_norm [head_dim], post_attention_norm, post_ffw_norm [dim];
 *              every layer but each --swa-period-th slides over --window positions
 *     qwen35   recurrent layers (all but each --full-attn-every-th): attn_qkv [dim, conv],
 *              attn_gate [dim, v], ssm_conv1d [4, conv] (f32), ssm_dt.bias, ssm_a [v_heads]
 *              (f32, -exp(noise)), ssm_beta and ssm_alpha [dim, v_heads], ssm_norm [state],
 *              ssm_out [v, dim] (conv = (2 k_heads + v_heads) x state, v = v_heads x state);
 *              attention layers: attn_q [dim, 2 q_dim] (queries and gates), attn_k, attn_v,
 *              attn_q_norm, attn_k_norm, attn_output; on both post_attention_norm [dim] in
 *              place of ffn_norm; a quarter of each head turns (rope.dimension_sections)
 *     qwen35moe  qwen35's layers with qwen3moe's experts in place of the FFN, and a shared
 *              expert of --ffn: ffn_gate_inp_shexp.weight [dim] (f32), ffn_{gate,up}_shexp
 *              [dim, ffn], ffn_down_shexp [ffn, dim]
 *     gemma4   as gemma3, with the sliding layers' own head size and KV heads (--head-dim-swa,
 *              --kv-heads-swa), no attn_v on the global layers (V = K), layer_output_scale
 *              [1], and rope_freqs.weight [head_dim / 2] whose last three quarters are 1e30:
 *              the global layers' partial ("proportional") rope; with --experts, every
 *              layer also has 26B-A4B's experts beside its FFN (which becomes the shared
 *              one): post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2 [dim],
 *              ffn_gate_inp.weight [dim, experts] (f32), ffn_gate_inp.scale [dim],
 *              ffn_gate_up_exps.weight [dim, 2 ffn_exp, experts] (gate rows, then up rows),
 *              ffn_down_exps.weight [ffn_exp, dim, experts], ffn_down_exps.scale [experts]
 *              (--dense-layers N: not on the first N layers, which stay dense)
 * and an architecture's keys under its own prefix ("gemma4.attention.sliding_window", ...).
 *
 * Weights. Every tensor has its own PRNG stream (splitmix64 seeded from the seed and the tensor's
 * name), so a tensor's values depend only on the seed, its name and its shape. Values are
 * approximately normal (the Irwin-Hall sum of four uniforms: integer arithmetic and one float
 * multiply, bit-identical on every machine and compiler), scaled like a trained model: matrices
 * std 1/sqrt(fan_in) (ne0), the embedding std 1/sqrt(dim), norm weights 1 + 0.1 x noise. RMSNorm
 * keeps activations O(1) and the logits have std ~1: finite and far from flat. Matrices are
 * converted or quantized row by row with lm_quantize_row (common/format/quant.h), bit-compatible
 * with ggml's reference quantizers; norm vectors stay f32.
 *
 * Vocabulary. By default a SentencePiece-style ("llama") vocabulary: <unk>, <s>, </s>, the 256
 * byte tokens <0x00>..<0xFF> (type 6), then NORMAL pieces with decreasing scores: "\u2581", single
 * characters with and without the "\u2581" prefix, then every lowercase word of 2, 3, ... letters
 * with and without it, until `vocab` tokens. vocab_from instead copies every tokenizer.* key of
 * another GGUF, whose token count must equal `vocab` (0: take it).
 *
 * The same options give the same bytes.
 */
#ifndef LM_SYNTH_H
#define LM_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/base/err.h"

/* Tokens before the first word piece in the default vocabulary: <unk>, <s>, </s>, 256 bytes. */
#define SYNTH_VOCAB_MIN 259

struct synth_opts {
	const char *out;    /* the file to write (replaced atomically) */
	uint32_t dim;       /* embedding length */
	uint32_t layers;    /* block count */
	uint32_t heads;     /* attention heads; dim % heads == 0, head_dim even */
	uint32_t kv_heads;  /* KV heads; heads % kv_heads == 0 */
	uint32_t ffn;       /* feed-forward length */
	uint32_t vocab;     /* tokens; 0 with vocab_from: that file's count */
	uint32_t ctx;       /* llama.context_length */
	enum lm_dtype type; /* every matrix: F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K */
	/* The experts' matrices (3-D tensors): a type of `type`'s list or MXFP4; LM_DTYPE_COUNT
	 * (the default): `type`. */
	enum lm_dtype exps_type;
	uint64_t seed;
	float rope_base;        /* <arch>.rope.freq_base */
	float rms_eps;          /* <arch>.attention.layer_norm_rms_epsilon */
	bool tied;              /* no output.weight: llama.cpp uses token_embd for the head */
	const char *vocab_from; /* GGUF whose tokenizer.* keys are copied, or NULL */
	/* A file whose text becomes tokenizer.chat_template (instead of vocab_from's), or NULL. */
	const char *chat_template_from;
	const char *arch;      /* "llama" (NULL), "qwen2", "qwen3", "qwen3moe", "gemma3", "gemma4",
			   * "gpt-oss" */
	uint32_t head_dim;     /* gemma, gpt-oss: per head (gemma4: global layers'); 0: dim/heads */
	uint32_t window;       /* sliding window; 0: none (llama: Mistral's, every layer) */
	uint32_t swa_period;   /* every swa_period-th layer is global; 0: 6 (gemma), 2 (gpt-oss) */
	uint32_t head_dim_swa; /* gemma4's sliding layers; 0: head_dim */
	uint32_t kv_heads_swa; /* gemma4's sliding layers; 0: kv_heads */
	float rope_base_swa;   /* <arch>.rope.freq_base_swa; 0: not written (llama.cpp: 10000) */
	float softcap;         /* <arch>.final_logit_softcapping; 0: none */
	bool rope_llama3;      /* llama: rope_freqs.weight with Llama 3.1's scaling */
	float rope_yarn;       /* gpt-oss: rope.scaling.type yarn of this factor; 0: none */
	uint32_t rope_yarn_orig; /* its rope.scaling.original_context_length; 0: not written */
	uint32_t experts;        /* qwen3moe, qwen35moe, gemma4, gpt-oss: experts per layer
				* (<arch>.expert_count; gemma4 0: dense) */
	uint32_t experts_used;   /* experts a token takes (expert_used_count) */
	uint32_t ffn_exp;        /* an expert's width; 0: ffn */
	uint32_t dense_layers;   /* gemma4 with experts: the first dense_layers layers have none */
	uint32_t ssm_state;      /* qwen35: the delta-net's head size; 0: dim / heads */
	uint32_t ssm_k_heads;    /* qwen35: its key heads; 0: kv_heads */
	uint32_t ssm_v_heads; /* qwen35: its value heads (a multiple of the key heads); 0: heads */
	uint32_t full_attn_every; /* qwen35: each N-th layer attends, the others are recurrent;
				   * 0: 4 */
	bool sparse;              /* the tensor index and no data: a file with holes */
	uint32_t threads;         /* rows quantized at once (the same bytes for any count); 0: 1 */
};

struct synth_stats {
	uint64_t n_tensors;
	uint64_t n_params;
	uint64_t file_bytes;
	uint32_t vocab; /* the vocabulary size written */
};

/* The options' defaults: arch llama, ctx 2048, type F32, seed 0, rope_base 10000, rms_eps 1e-5,
 * kv_heads 0 (meaning: equal to heads). Shape fields are 0 and must be set. */
void synth_opts_default(struct synth_opts *o);

/* Checks a shape and a type without writing anything: every size in range, the head geometry,
 * and that every matrix's row length is a multiple of the type's block (the message names the
 * first tensor that breaks the rule, and the rule). vocab may be 0 only with vocab_from. */
int synth_check(const struct synth_opts *o, lm_diag *d);

/* Writes the model to o->out (through a temporary file in the same directory, renamed into
 * place on success; removed on failure). st may be NULL. */
int synth_write(const struct synth_opts *o, struct synth_stats *st, lm_diag *d);

#endif

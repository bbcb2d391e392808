/* rope.h — rotary position embedding parameters, as a model's metadata gives them.
 *
 * The planner and the engine both read these (common/model/hparams.h fills them); the backend
 * applies them (kernels/backend.h's rope op), so they live below both.
 */
#ifndef LM_ROPE_H
#define LM_ROPE_H

#include <stdint.h>

enum lm_rope_mode {
	LM_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama, Meta layout */
	LM_ROPE_NEOX = 2, /* rotate halves (x[i], x[i + n_rot/2]): GPT-NeoX, Qwen, Phi-3 */
};

struct lm_rope_params {
	enum lm_rope_mode mode;
	int32_t n_rot;    /* rotated dimensions per head (<= head_dim, even) */
	float freq_base;  /* theta, 10000 for llama */
	float freq_scale; /* 1.0: positions are multiplied by this (linear scaling) */
	/* Frequency factors, [n_rot / 2] f32 in backend memory, or NULL: pair i turns by
	 * pos x freq_scale x base^(-2i / n_rot) / factor[i] (Llama 3's long-context scaling, and
	 * Gemma 4's partial rotation: a huge factor leaves a pair unturned). Filled by the engine
	 * from the model's rope_freqs.weight; always NULL in hparams. */
	const float *freq_factors;
	/* YaRN (gpt-oss; llama.cpp's rope_yarn), where ext_factor != 0: pair i turns by
	 *     theta = interp x (1 - mix) + extrap x mix,  extrap = pos x base^(-2i / n_rot) /
	 *     factor[i],  interp = freq_scale x extrap,
	 *     mix = (1 - min(1, max(0, (i - corr[0]) / max(0.001, corr[1] - corr[0])))) x ext_factor
	 * and its cos and sin are multiplied by mscale. 0 (hparams' default): none of this. */
	float ext_factor;
	float mscale;
	float corr[2]; /* the correction dims, pair indices, as ggml_rope_yarn_corr_dims */
};

#endif

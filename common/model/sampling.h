/* sampling.h — the sampling parameters of a sequence: what a request asks for, what the wire
 * carries to the last stage, and what engine/sampler.h applies (its header says how).
 */
#ifndef LM_SAMPLING_H
#define LM_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"

struct lm_sampling {
	float temperature; /* <= 0: greedy */
	int32_t top_k;     /* <= 0: off */
	float top_p;       /* >= 1: off */
	float min_p;       /* <= 0: off */
	uint64_t seed;
};

/* llama.cpp's command-line defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05. */
#define LM_SAMPLING_DEFAULT    \
	((struct lm_sampling){ \
		.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 0})

/* LM_EINVAL with a message for NaN or out-of-range parameters (temperature > 100, top_p
 * outside (0, 1], min_p outside [0, 1], negative top_k is fine: off). */
int lm_sampling_check(const struct lm_sampling *s, lm_diag *d);

/* ------------------------------------------------------------------ logit adjustments */

/* The most tokens a penalty window holds, and the most logit biases of one request. */
#define LM_MAX_PENALTY_WINDOW 512
#define LM_MAX_LOGIT_BIAS     300

/* Repetition penalties, as llama.cpp's penalties sampler (llama_sampler_init_penalties) applies
 * them over the last `last_n` tokens of the sequence, its prompt included (llama-server feeds
 * the prompt to the sampler): for a token seen c > 0 times there, its logit l becomes
 *     l' = (l <= 0 ? l * repeat : l / repeat) - (c * frequency + presence)
 * presence and frequency are OpenAI's presence_penalty and frequency_penalty. */
struct lm_penalties {
	float presence;  /* [-2, 2], 0: off */
	float frequency; /* [-2, 2], 0: off */
	float repeat;    /* (0, 10], 1: off */
	int32_t last_n;  /* the window in tokens, [0, LM_MAX_PENALTY_WINDOW]; 0: off */
};
/* llama-server's defaults: no penalty, a window of 64. */
#define LM_PENALTIES_DEFAULT \
	((struct lm_penalties){.presence = 0, .frequency = 0, .repeat = 1.0f, .last_n = 64})
/* Whether p changes any logit. */
bool lm_penalties_active(const struct lm_penalties *p);

/* OpenAI's logit_bias: added to token id's logit before anything else. */
struct lm_logit_bias {
	int32_t id;
	float bias; /* [-100, 100] */
};

/* What the last stage does to a sequence's logits before it samples (wire.h carries it): the
 * biases are added, then the penalties are applied with the counts of the tokens in hist (the
 * window: the sequence's last tokens, at most LM_MAX_PENALTY_WINDOW). llama.cpp's sampler
 * chain has the same order: logit bias, then penalties, then top-k and the rest. */
struct lm_logit_adjust {
	float presence, frequency, repeat;
	const int32_t *hist;
	int32_t n_hist;
	const struct lm_logit_bias *bias;
	int32_t n_bias;
};

/* LM_EINVAL with a message for values outside the ranges above (NaN included), a window or a
 * bias list longer than its maximum, or ids outside [0, n_vocab). */
int lm_logit_adjust_check(const struct lm_logit_adjust *a, int32_t n_vocab, lm_diag *d);

#endif

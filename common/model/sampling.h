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

#endif

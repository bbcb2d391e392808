/* sampling.c — checking sampling parameters. See sampling.h. */
#include "common/model/sampling.h"

#include <math.h>

int lm_sampling_check(const struct lm_sampling *s, lm_diag *d)
{
	if (isnan(s->temperature) || s->temperature > 100)
		return lm_fail(d, LM_EINVAL, "temperature must be a number in [0, 100]");
	if (isnan(s->top_p) || s->top_p <= 0 || s->top_p > 1)
		return lm_fail(d, LM_EINVAL, "top_p must be in (0, 1]");
	if (isnan(s->min_p) || s->min_p < 0 || s->min_p > 1)
		return lm_fail(d, LM_EINVAL, "min_p must be in [0, 1]");
	return 0;
}

bool lm_penalties_active(const struct lm_penalties *p)
{
	return p->last_n > 0 && (p->presence != 0 || p->frequency != 0 || p->repeat != 1);
}

static bool in_range(float x, float lo, float hi)
{
	return x >= lo && x <= hi; /* false for NaN */
}

int lm_logit_adjust_check(const struct lm_logit_adjust *a, int32_t n_vocab, lm_diag *d)
{
	if (!in_range(a->presence, -2, 2) || !in_range(a->frequency, -2, 2))
		return lm_fail(d, LM_EINVAL, "presence and frequency penalties must be in [-2, 2]");
	if (!(a->repeat > 0) || a->repeat > 10)
		return lm_fail(d, LM_EINVAL, "the repeat penalty must be in (0, 10]");
	if (a->n_hist < 0 || a->n_hist > LM_MAX_PENALTY_WINDOW)
		return lm_fail(d, LM_EINVAL, "a penalty window of %d tokens (at most %d)",
			       a->n_hist, LM_MAX_PENALTY_WINDOW);
	if (a->n_bias < 0 || a->n_bias > LM_MAX_LOGIT_BIAS)
		return lm_fail(d, LM_EINVAL, "%d logit biases (at most %d)", a->n_bias,
			       LM_MAX_LOGIT_BIAS);
	for (int32_t i = 0; i < a->n_hist; i++)
		if (a->hist[i] < 0 || a->hist[i] >= n_vocab)
			return lm_fail(d, LM_EINVAL, "penalty window token %d is not in [0, %d)",
				       a->hist[i], n_vocab);
	for (int32_t i = 0; i < a->n_bias; i++) {
		if (a->bias[i].id < 0 || a->bias[i].id >= n_vocab)
			return lm_fail(d, LM_EINVAL, "logit bias token %d is not in [0, %d)",
				       a->bias[i].id, n_vocab);
		if (!in_range(a->bias[i].bias, -100, 100))
			return lm_fail(d, LM_EINVAL, "a logit bias must be in [-100, 100]");
	}
	return 0;
}

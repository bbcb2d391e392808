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

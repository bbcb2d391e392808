#include "common/err.h"
#include "kernels/backend.h"

/* Placeholder until the CPU kernels land: the backend reports itself unavailable. */
int lm_backend_cpu_init(struct lm_backend *b, const struct lm_backend_opts *opts)
{
	(void)b;
	(void)opts;
	return LM_EUNSUPPORTED;
}

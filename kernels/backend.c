/* backend.c — backend constructors by name. See backend.h. */
#include "kernels/backend.h"

#include <string.h>

#include "common/base/err.h"

int lm_backend_init(struct lm_backend *b, const char *name, const struct lm_backend_opts *opts)
{
	if (strcmp(name, "cpu") == 0)
		return lm_backend_cpu_init(b, opts);
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_init(b, opts);
	return LM_EINVAL;
}

uint64_t lm_backend_scratch_bound(const char *name, const struct lm_backend_opts *opts,
				  const struct lm_scratch_shape *s)
{
	if (strcmp(name, "cpu") == 0)
		return lm_backend_cpu_scratch_bound(opts, s);
	return 0;
}

#ifndef LM_HAVE_CUDA
int lm_backend_cuda_init(struct lm_backend *b, const struct lm_backend_opts *opts)
{
	(void)b;
	(void)opts;
	return LM_EUNSUPPORTED;
}
#endif

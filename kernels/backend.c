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

#ifndef LM_HAVE_CUDA
int lm_backend_cuda_init(struct lm_backend *b, const struct lm_backend_opts *opts)
{
	(void)b;
	(void)opts;
	return LM_EUNSUPPORTED;
}
#endif

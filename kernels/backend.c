/* backend.c — backend constructors by name, and what the seam supplies for optional slots.
 * See backend.h. */
#include "kernels/backend.h"

#include <stdio.h>
#include <string.h>

#include "common/base/err.h"

int lm_backend_open(struct lm_backend *b, const char *name, const struct lm_backend_opts *opts,
		    lm_diag *d)
{
	if (strcmp(name, "cpu") == 0)
		return lm_backend_cpu_init(b, opts);
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_init(b, opts, d);
	return lm_fail(d, LM_EINVAL, "unknown backend '%s' (cpu or cuda)", name);
}

int lm_backend_init(struct lm_backend *b, const char *name, const struct lm_backend_opts *opts)
{
	return lm_backend_open(b, name, opts, NULL);
}

uint64_t lm_backend_scratch_bound(const char *name, const struct lm_backend_opts *opts,
				  const struct lm_scratch_shape *s)
{
	if (strcmp(name, "cpu") == 0)
		return lm_backend_cpu_scratch_bound(opts, s);
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_scratch_bound(opts, s);
	return 0;
}

const char *lm_backend_strerror(const struct lm_backend *b, int rc)
{
	if (b != NULL && b->iface != NULL && b->iface->last_error != NULL) {
		const char *m = b->iface->last_error(b->ctx);
		if (m != NULL && m[0] != '\0')
			return m;
	}
	return lm_strerror(rc);
}

int lm_backend_query_memory(const char *name, const struct lm_backend_opts *opts,
			    struct lm_backend_mem *m, lm_diag *d)
{
	memset(m, 0, sizeof *m);
	if (strcmp(name, "cpu") == 0)
		return lm_backend_cpu_query_memory(m, d);
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_query_memory(opts != NULL ? opts->device : 0, m, d);
	return lm_fail(d, LM_EINVAL, "unknown backend '%s' (cpu or cuda)", name);
}

bool lm_backend_kv_type_ok(const char *name, enum lm_dtype t)
{
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_kv_type_ok(t);
	return strcmp(name, "cpu") == 0;
}

bool lm_backend_weight_type_ok(const char *name, enum lm_dtype t)
{
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_weight_type_ok(t);
	return strcmp(name, "cpu") == 0;
}

bool lm_backend_feature_ok(const char *name, enum lm_backend_feature f)
{
	if (strcmp(name, "cuda") == 0)
		return lm_backend_cuda_feature_ok(f);
	return strcmp(name, "cpu") == 0;
}

const char *lm_backend_feature_name(enum lm_backend_feature f)
{
	switch (f) {
	case LM_FEATURE_ATTN_SINKS:
		return "attention sink logits (gpt-oss)";
	case LM_FEATURE_ROPE_YARN:
		return "YaRN rope scaling (gpt-oss)";
	case LM_FEATURE_SWIGLU_OAI:
		return "the swiglu_oai activation (gpt-oss's experts)";
	default:
		return "an unknown feature";
	}
}

#ifndef LM_HAVE_CUDA
/* A build without kernels/cuda (no nvcc, or -Dcuda=disabled). */
int lm_backend_cuda_init(struct lm_backend *b, const struct lm_backend_opts *opts, lm_diag *d)
{
	(void)opts;
	b->iface = NULL;
	b->ctx = NULL;
	return lm_fail(d, LM_EUNSUPPORTED, "this build has no kernels for it (built without CUDA)");
}

uint64_t lm_backend_cuda_scratch_bound(const struct lm_backend_opts *opts,
				       const struct lm_scratch_shape *s)
{
	(void)opts;
	(void)s;
	return 0;
}

int lm_backend_cuda_query_memory(int device, struct lm_backend_mem *m, lm_diag *d)
{
	(void)device;
	memset(m, 0, sizeof *m);
	return lm_fail(d, LM_EUNSUPPORTED, "this build has no CUDA backend");
}
#endif

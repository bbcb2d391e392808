/* cpu_backend.h — what the CPU backend offers beyond kernels/backend.h. */
#ifndef LM_CPU_BACKEND_H
#define LM_CPU_BACKEND_H

#include "kernels/backend.h"

/* lm_backend_cpu_init with a chosen kernel set: "generic", "avx2", "avx512", "amx", or NULL/"best" for
 * the best the CPU runs (what lm_backend_cpu_init picks; opts->force_scalar still means
 * "generic"). LM_EUNSUPPORTED when the CPU (or the build) lacks the set, LM_EINVAL for an
 * unknown name. For tests, benchmarks and a `--kernels` switch. */
int lm_backend_cpu_init_kernels(struct lm_backend *b, const struct lm_backend_opts *opts,
				const char *kernels);

/* The kernel set a CPU backend dispatches to: "generic" (scalar reference, also what
 * force_scalar selects), "avx2" (AVX2 + FMA + F16C), "avx512" (AVX-512 F/BW/VL/VNNI on top of
 * avx2) or "amx" (avx512 plus AMX-INT8 tiles for batches of tokens, where the OS allows them).
 * For logs, `/status` and tests. NULL when b is not a CPU backend. */
const char *lm_backend_cpu_kernels(const struct lm_backend *b);
/* Worker threads of a CPU backend, the caller included; 0 when b is not a CPU backend. */
int lm_backend_cpu_threads(const struct lm_backend *b);
/* The smallest batch that a matmul of `type` weights runs through the kernel set's multi-token
 * GEMM (whose outputs equal the generic kernels' bit for bit); 0 when the set has none for the
 * type (or b is not a CPU backend). For tests and benchmarks. */
int lm_backend_cpu_gemm_min_n(const struct lm_backend *b, enum lm_dtype type);

#endif

/* kernels_testutil.h — seeded random data and error measures for the kernel tests. */
#ifndef LM_KERNELS_TESTUTIL_H
#define LM_KERNELS_TESTUTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "kernels/cpu/cpu_backend.h"

/* Every kernel set of the CPU backend; a test runs each one the build and the CPU have. */
static const char *const test_ksets[] = {"generic", "avx2", "avx512", "amx"};
#define TEST_N_KSETS 4

/* A CPU backend with `threads` threads and kernel set `kset`: 0, or LM_EUNSUPPORTED when this
 * CPU or build lacks the set (the caller skips it), or another error. */
static inline int test_backend(struct lm_backend *b, int threads, const char *kset)
{
	struct lm_backend_opts o = {.n_threads = threads};
	return lm_backend_cpu_init_kernels(b, &o, kset);
}

/* splitmix64: a fixed sequence per seed, so every run tests the same inputs. */
struct test_rng {
	uint64_t s;
};

static inline uint64_t test_rng_next(struct test_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float test_rng_uniform(struct test_rng *r)
{
	return (float)((double)(test_rng_next(r) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* Standard normal (Box-Muller). */
static inline float test_rng_gauss(struct test_rng *r)
{
	double u1 = ((double)(test_rng_next(r) >> 11) + 1.0) * 0x1p-53;
	double u2 = (double)(test_rng_next(r) >> 11) * 0x1p-53;
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static inline void test_fill_gauss(struct test_rng *r, float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = test_rng_gauss(r) * scale;
}

/* Normalised mean squared error sum((a - b)^2) / sum(b^2), as ggml's test-backend-ops
 * measures it; b is the reference. */
static inline double test_nmse(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		num += d * d;
		den += (double)b[i] * (double)b[i];
	}
	return den > 0 ? num / den : num;
}

static inline double test_nmse_d(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - b[i];
		num += d * d;
		den += b[i] * b[i];
	}
	return den > 0 ? num / den : num;
}

static inline double test_max_abs_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);
		if (d > m || d != d)
			m = d;
	}
	return m;
}

#endif

/* bench_attention.c — decode attention over the KV cache, per cache type and kernel set.
 *
 *     bench_attention [--ctx N] [--heads H] [--kv-heads K] [--head-dim D] [--secs S]
 *                     [--kernels generic|avx2|avx512] [K:V ...]
 *
 * For each K:V type pair (default: every cache type with itself, and q8_0:q5_1) it stores --ctx
 * positions (default 4096) of random K and V rows of one slot (K heads of head_dim D, default 2
 * of 128, and H query heads, default 8), then runs one decode token's attention over all of
 * them for --secs seconds (default 1) on one thread, and prints the median time per token and
 * the cache bytes read per second (K and V rows of the positions read, in their own types:
 * what attention reads in place, with no f32 copy), by the wall clock and by the thread's CPU
 * time (which a shared machine's other work disturbs less). Timings only: nothing is asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/dtype.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static uint64_t rng = 88172645463325252u;

static float rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

struct bench_cfg {
	int ctx, heads, kv_heads, head_dim;
	double secs;
	const char *kernels;
};

static double bench_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One pair's median seconds per token (wall; *cpu: thread CPU time); -1 when the kernels refuse
 * it. */
static double bench_pair(struct lm_backend *b, const struct bench_cfg *c, enum lm_dtype kt,
			 enum lm_dtype vt, size_t *bytes, double *cpu)
{
	const int width = c->kv_heads * c->head_dim;
	uint64_t kr = 0, vr = 0;
	if (lm_dtype_row_bytes(kt, (uint64_t)width, &kr) != 0 ||
	    lm_dtype_row_bytes(vt, (uint64_t)width, &vr) != 0)
		return -1;
	struct lm_kv_layer kv = {.k_type = kt,
				 .v_type = vt,
				 .n_kv_heads = c->kv_heads,
				 .head_dim = c->head_dim,
				 .ctx = c->ctx,
				 .window = 0,
				 .slots = 1,
				 .k_row_bytes = (size_t)kr,
				 .v_row_bytes = (size_t)vr};
	kv.k = b->iface->malloc(b->ctx, (size_t)kr * (size_t)c->ctx);
	kv.v = b->iface->malloc(b->ctx, (size_t)vr * (size_t)c->ctx);
	float *rows = malloc((size_t)width * 2 * sizeof(float));
	float *q = malloc((size_t)c->heads * (size_t)c->head_dim * sizeof(float));
	float *out = malloc((size_t)c->heads * (size_t)c->head_dim * sizeof(float));
	double t = -1;
	if (kv.k == NULL || kv.v == NULL || rows == NULL || q == NULL || out == NULL)
		goto out;
	for (int p = 0; p < c->ctx; p++) {
		for (int i = 0; i < 2 * width; i++)
			rows[i] = rnd();
		struct lm_tok_loc loc = {0, p};
		if (b->iface->kv_store(b->ctx, &kv, rows, rows + width, &loc, 1) != 0)
			goto out;
	}
	for (int i = 0; i < c->heads * c->head_dim; i++)
		q[i] = rnd();
	struct lm_tok_loc at = {0, c->ctx - 1};
	static double times[4096], cpus[4096];
	int n = 0;
	const double until = lm_now_s() + c->secs;
	do {
		double t0 = lm_now_s(), c0 = bench_cpu_s();
		if (b->iface->attention(b->ctx, out, q, &kv, &at, 1, c->heads, 0.1f) != 0)
			goto out;
		cpus[n] = bench_cpu_s() - c0;
		times[n++] = lm_now_s() - t0;
	} while (n < 4096 && lm_now_s() < until);
	qsort(times, (size_t)n, sizeof times[0], cmp_double);
	qsort(cpus, (size_t)n, sizeof cpus[0], cmp_double);
	t = times[n / 2];
	*cpu = cpus[n / 2];
	*bytes = (size_t)c->ctx * (size_t)(kr + vr);
out:
	b->iface->mfree(b->ctx, kv.k);
	b->iface->mfree(b->ctx, kv.v);
	free(rows);
	free(q);
	free(out);
	return t;
}

static int bench_int(const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || *end != '\0' || v < 1 || v > 1 << 22)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_cfg c = {.ctx = 4096,
			      .heads = 8,
			      .kv_heads = 2,
			      .head_dim = 128,
			      .secs = 1,
			      .kernels = NULL};
	static const char *const all[] = {"f32:f32",   "f16:f16",   "bf16:bf16", "q8_0:q8_0",
					  "q5_1:q5_1", "q4_0:q4_0", "fp8:fp8",   "q8_0:q5_1"};
	const char *pairs[64];
	int n_pairs = 0, rc = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
		if (strcmp(a, "--ctx") == 0)
			rc |= bench_int(v, &c.ctx), i++;
		else if (strcmp(a, "--heads") == 0)
			rc |= bench_int(v, &c.heads), i++;
		else if (strcmp(a, "--kv-heads") == 0)
			rc |= bench_int(v, &c.kv_heads), i++;
		else if (strcmp(a, "--head-dim") == 0)
			rc |= bench_int(v, &c.head_dim), i++;
		else if (strcmp(a, "--secs") == 0)
			c.secs = atof(v), i++;
		else if (strcmp(a, "--kernels") == 0)
			c.kernels = v, i++;
		else if (a[0] != '-' && n_pairs < 64)
			pairs[n_pairs++] = a;
		else
			rc = -1;
	}
	if (rc != 0 || c.heads % c.kv_heads != 0) {
		fprintf(stderr, "usage: bench_attention [--ctx N] [--heads H] [--kv-heads K] "
				"[--head-dim D] [--secs S] [--kernels SET] [K:V ...]\n");
		return 2;
	}
	if (n_pairs == 0)
		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			pairs[n_pairs++] = all[i];
	struct lm_backend b;
	struct lm_backend_opts o = {.n_threads = 1};
	if (lm_backend_cpu_init_kernels(&b, &o, c.kernels) != 0) {
		fprintf(stderr, "bench_attention: no kernel set '%s' here\n", c.kernels);
		return 1;
	}
	printf("kernels %s, 1 thread, %d positions, %d query heads over %d KV heads of %d\n",
	       lm_backend_cpu_kernels(&b), c.ctx, c.heads, c.kv_heads, c.head_dim);
	for (int i = 0; i < n_pairs; i++) {
		char k[16], v[16];
		const char *colon = strchr(pairs[i], ':');
		if (colon == NULL || (size_t)(colon - pairs[i]) >= sizeof k ||
		    strlen(colon + 1) >= sizeof v)
			continue;
		snprintf(k, sizeof k, "%.*s", (int)(colon - pairs[i]), pairs[i]);
		snprintf(v, sizeof v, "%s", colon + 1);
		int kt = lm_dtype_parse(k), vt = lm_dtype_parse(v);
		size_t bytes = 0;
		double cpu = 0;
		double t = kt < 0 || vt < 0 ? -1
					    : bench_pair(&b, &c, (enum lm_dtype)kt,
							 (enum lm_dtype)vt, &bytes, &cpu);
		if (t < 0)
			printf("K %-5s V %-5s  refused\n", k, v);
		else
			printf("K %-5s V %-5s  %8.1f us a token (cpu %8.1f us)  %6.2f GB/s of "
			       "cache "
			       "(cpu %6.2f)  %zu bytes\n",
			       k, v, t * 1e6, cpu * 1e6, (double)bytes / t / 1e9,
			       (double)bytes / cpu / 1e9, bytes);
	}
	lm_backend_fini(&b);
	return 0;
}

/* bench_cuda.c — the CUDA backend's one-token matmul (the decode GEMV) against the device's own
 * copy bandwidth, in one run.
 *
 *   bench_cuda [--device N] [--reps R]
 *
 * Prints, one line each:
 *     gpu name=... sms=N l2_bytes=N memory_bytes=N driver=N runtime=N
 *     copy bytes=N ms=T gbps=G                   cudaMemcpyAsync device to device of 1 GiB;
 *                                                gbps counts the bytes read and written
 *     gemv type=T ne0=N ne1=N weights=W bytes=N us=T gbps=G ratio=R
 * A gemv line times `--reps` back-to-back one-token matmuls through the backend seam, cycling
 * over W distinct weights (together several times the L2, so every call reads its weight from
 * device memory), with one synchronisation at the end; gbps is weight bytes read per second and
 * ratio is gbps over the copy's. Shapes: the lm_head of an 8B llama (4096 x 128256) and its FFN
 * (4096 x 14336 and 14336 x 4096), in q4_K and q8_0. Weights are random blocks with sane scales:
 * their values do not matter to the time.
 *
 * Medians of 5 timings each. Exit status: 0, 1 on a failure, 77 when there is no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/dtype.h"
#include "common/base/err.h"
#include "kernels/backend.h"

#define BENCH_TIMINGS 5

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp);
	return v[n / 2];
}

/* Random bytes with every block's f16 scales set to small values, so no NaN appears. */
static void *bench_weight(enum lm_dtype t, int64_t ne0, int64_t ne1, size_t *bytes)
{
	const struct lm_dtype_info *info = lm_dtype_info(t);
	const size_t blocks = (size_t)(ne0 / info->blck) * (size_t)ne1;
	*bytes = blocks * info->size;
	uint8_t *w = malloc(*bytes);
	if (w == NULL)
		return NULL;
	uint64_t x = 0x9e3779b97f4a7c15u ^ (uint64_t)ne1;
	for (size_t i = 0; i < *bytes; i++) {
		x = x * 6364136223846793005u + 1442695040888963407u;
		w[i] = (uint8_t)(x >> 56);
	}
	const uint16_t d = lm_f32_to_f16(0.001f);
	for (size_t b = 0; b < blocks; b++) {
		uint8_t *blk = w + b * info->size;
		if (t == LM_Q4_K) {
			memcpy(blk, &d, 2);
			memcpy(blk + 2, &d, 2);
		} else {
			memcpy(blk, &d, 2);
		}
	}
	return w;
}

static int bench_copy(double *gbps)
{
	const size_t n = (size_t)1 << 30;
	void *a = NULL, *b = NULL;
	cudaEvent_t e0, e1;
	if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess)
		return LM_ENOMEM;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice); /* warm-up */
	double ms[BENCH_TIMINGS];
	for (int i = 0; i < BENCH_TIMINGS; i++) {
		float t = 0;
		cudaEventRecord(e0, 0);
		cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0);
		cudaEventRecord(e1, 0);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&t, e0, e1);
		ms[i] = t;
	}
	const double m = bench_median(ms, BENCH_TIMINGS);
	*gbps = 2.0 * (double)n / (m * 1e-3) / 1e9;
	printf("copy bytes=%zu ms=%.3f gbps=%.1f\n", n, m, *gbps);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	return cudaGetLastError() == cudaSuccess ? 0 : LM_EDEVICE;
}

static int bench_gemv(struct lm_backend *be, enum lm_dtype t, int64_t ne0, int64_t ne1, int nw,
		      int reps, double copy_gbps)
{
	struct lm_weight w[16] = {{0}};
	void *host[16] = {NULL};
	size_t bytes = 0;
	uint64_t rb = 0;
	lm_dtype_row_bytes(t, (uint64_t)ne0, &rb);
	int rc = 0;
	/* Distinct host buffers, all alive until the end: weight_init shares one upload per host
	 * pointer. */
	for (int i = 0; i < nw && rc == 0; i++) {
		host[i] = bench_weight(t, ne0, ne1, &bytes);
		w[i] = (struct lm_weight){
			.type = t, .ne0 = ne0, .ne1 = ne1, .row_bytes = (size_t)rb};
		rc = host[i] == NULL ? LM_ENOMEM : lm_backend_weight_init(be, &w[i], host[i]);
	}
	float *x = be->iface->malloc(be->ctx, (size_t)ne0 * sizeof(float));
	float *y = be->iface->malloc(be->ctx, (size_t)ne1 * sizeof(float));
	if (rc == 0 && (x == NULL || y == NULL))
		rc = LM_ENOMEM;
	double us[BENCH_TIMINGS];
	for (int k = -1; rc == 0 && k < BENCH_TIMINGS; k++) {
		const int64_t t0 = lm_now_ns();
		for (int r = 0; rc == 0 && r < reps; r++)
			rc = be->iface->matmul(be->ctx, y, &w[r % nw], x, 1);
		if (rc == 0)
			rc = lm_backend_sync(be);
		if (k >= 0)
			us[k] = (double)(lm_now_ns() - t0) / 1e3 / reps;
	}
	if (rc == 0) {
		const double u = bench_median(us, BENCH_TIMINGS);
		const double gbps = (double)bytes / (u * 1e-6) / 1e9;
		printf("gemv type=%s ne0=%lld ne1=%lld weights=%d bytes=%zu us=%.2f gbps=%.1f "
		       "ratio=%.3f\n",
		       lm_dtype_name(t), (long long)ne0, (long long)ne1, nw, bytes, u, gbps,
		       gbps / copy_gbps);
	} else
		fprintf(stderr, "bench_cuda: gemv %s: %s\n", lm_dtype_name(t),
			lm_backend_strerror(be, rc));
	be->iface->mfree(be->ctx, x);
	be->iface->mfree(be->ctx, y);
	for (int i = 0; i < nw; i++) {
		if (w[i].data != NULL)
			lm_backend_weight_fini(be, &w[i]);
		free(host[i]);
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct lm_backend_opts bo = {0};
	int reps = 200;
	for (int c; (c = getopt(argc, argv, "d:r:")) != -1;) {
		if (c == 'd')
			bo.device = atoi(optarg);
		else if (c == 'r')
			reps = atoi(optarg) > 0 ? atoi(optarg) : 200;
		else {
			fprintf(stderr, "usage: bench_cuda [-d DEVICE] [-r REPS]\n");
			return 2;
		}
	}
	struct lm_backend be;
	lm_diag d = {{0}};
	int rc = lm_backend_open(&be, "cuda", &bo, &d);
	if (rc != 0) {
		printf("SKIP: %s\n", lm_diag_str(&d, rc));
		return rc == LM_EUNSUPPORTED || rc == LM_EUNAVAILABLE ? 77 : 1;
	}
	struct cudaDeviceProp p;
	int drv = 0, rt = 0;
	cudaGetDeviceProperties(&p, bo.device);
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	printf("gpu name=\"%s\" sms=%d l2_bytes=%d memory_bytes=%zu driver=%d runtime=%d\n", p.name,
	       p.multiProcessorCount, p.l2CacheSize, p.totalGlobalMem, drv, rt);
	double copy = 0;
	if ((rc = bench_copy(&copy)) != 0) {
		fprintf(stderr, "bench_cuda: copy: %s\n", lm_strerror(rc));
		return 1;
	}
	static const enum lm_dtype types[] = {LM_Q4_K, LM_Q8_0};
	for (int i = 0; i < 2 && rc == 0; i++) {
		rc = bench_gemv(&be, types[i], 4096, 128256, 2, reps / 4, copy);
		if (rc == 0)
			rc = bench_gemv(&be, types[i], 4096, 14336, 8, reps, copy);
		if (rc == 0)
			rc = bench_gemv(&be, types[i], 14336, 4096, 8, reps, copy);
	}
	lm_backend_fini(&be);
	return rc == 0 ? 0 : 1;
}

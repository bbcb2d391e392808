/* bench_cuda.c — the CUDA backend's one-token matmul (the decode GEMV) against the device's own
 * copy bandwidth, its prefill matmuls by batch size, and what kernel launches cost one decode
 * token, in one run.
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
 *     gemm type=T ne0=N ne1=N n=B us=T us_per_token=U tops=P
 * A gemm line times one matmul of a batch of B tokens (prefill): B = 8 and 15 run the GEMV
 * kernel, B >= 16 the tensor-core GEMM (kernels/cuda/matmul.cu), in q8_0, q4_0, q4_K and q6_K;
 * tops counts 2 ne0 ne1 B operations.
 *     step type=T mode=M layers=L seam_ops=S kernels=K enqueue_us=E wall_us=W gpu_us=G
 *          us_per_launch=E/K launch_share=(W-G)/W
 * A step line is one decode token of an 8B-shaped llama through the backend seam, op for op as
 * engine/arch_llama.c and forward.c issue them (embedding lookup, L layers of 16 ops each on
 * one layer's weights, output norm, lm_head, logits download), at position 512 of an f16
 * cache. M is eager (every op launched as it comes) or graph: the embedding and the layers as
 * one step of the backend (backend.h's step_begin/step_end, issued in passes as
 * engine/forward.c does), which the CUDA backend captures once as a CUDA graph and replays
 * (LM_CUDA_GRAPHS, which bench_cuda turns on for itself; kernels/cuda/cuda_graph.h); the
 * timings are of replays, the capture done in a warm-up, and replays=R/N says how many of the
 * line's N tokens a replay served in one pass (all but the first when graphs work; after a
 * failed capture the steps run op by op and the line times that). Both lines of a type run on
 * the same backend, weights and cache, followed by a graph_logits= line: whether the graph
 * gave the eager logits bit for bit (bench_cuda fails when not). K counts its kernel launches
 * from the code: a quantized matmul is 2 (activation quantizer, GEMV), kv_store 2 (K, V),
 * attention 3 (scores, softmax, values), every other op 1. E is the host's time to enqueue
 * the step, W the step's wall time (enqueue to logits on the host), G its time on the GPU with
 * the queue kept full: the step enqueued behind device copies that last longer than E, minus
 * the copies alone. W - G is what launching costs the token, the part a CUDA graph (or fewer,
 * fused kernels) could win back.
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
		} else if (t == LM_Q6_K) { /* its d is last */
			memcpy(blk + 208, &d, 2);
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

/* The median time of one matmul call (of weights w[r % nw] for call r) over BENCH_TIMINGS
 * timings of reps calls each, after one untimed round. */
static int bench_time_matmul(struct lm_backend *be, float *y, const struct lm_weight *w, int nw,
			     const float *x, int n, int reps, double *us_median)
{
	double us[BENCH_TIMINGS];
	int rc = 0;
	for (int k = -1; rc == 0 && k < BENCH_TIMINGS; k++) {
		const int64_t t0 = lm_now_ns();
		for (int r = 0; rc == 0 && r < reps; r++)
			rc = be->iface->matmul(be->ctx, y, &w[r % nw], x, n);
		if (rc == 0)
			rc = lm_backend_sync(be);
		if (k >= 0)
			us[k] = (double)(lm_now_ns() - t0) / 1e3 / reps;
	}
	if (rc == 0)
		*us_median = bench_median(us, BENCH_TIMINGS);
	return rc;
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
	double u = 0;
	if (rc == 0)
		rc = bench_time_matmul(be, y, w, nw, x, 1, reps, &u);
	if (rc == 0) {
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

/* A weight on the backend from bench_weight's bytes in *host, which stays allocated until the
 * weight is released: the backend shares one upload per host pointer, and a freed buffer's
 * address could come back for the next weight. */
static int bench_bind(struct lm_backend *be, struct lm_weight *w, enum lm_dtype t, int64_t ne0,
		      int64_t ne1, void **host)
{
	size_t bytes = 0;
	uint64_t rb = 0;
	lm_dtype_row_bytes(t, (uint64_t)ne0, &rb);
	*host = bench_weight(t, ne0, ne1, &bytes);
	*w = (struct lm_weight){.type = t, .ne0 = ne0, .ne1 = ne1, .row_bytes = (size_t)rb};
	return *host == NULL ? LM_ENOMEM : lm_backend_weight_init(be, w, *host);
}

/* n x len floats of backend memory holding small pseudo-random values. NULL on failure. */
static float *bench_acts(struct lm_backend *be, size_t len)
{
	float *h = malloc(len * sizeof(float));
	float *d = be->iface->malloc(be->ctx, len * sizeof(float));
	uint64_t x = 0x2545f4914f6cdd1du ^ len;
	for (size_t i = 0; h != NULL && i < len; i++) {
		x = x * 6364136223846793005u + 1442695040888963407u;
		h[i] = (float)((int)(x >> 40) % 2001 - 1000) / 1000.0f;
	}
	if (h == NULL || d == NULL || be->iface->upload(be->ctx, d, h, len * sizeof(float)) != 0) {
		if (d != NULL)
			be->iface->mfree(be->ctx, d);
		d = NULL;
	}
	free(h);
	return d;
}

/* One matmul of a batch of n tokens (prefill), per call. */
static int bench_gemm(struct lm_backend *be, enum lm_dtype t, int64_t ne0, int64_t ne1, int n,
		      int reps)
{
	struct lm_weight w;
	void *host = NULL;
	int rc = bench_bind(be, &w, t, ne0, ne1, &host);
	float *x = rc == 0 ? bench_acts(be, (size_t)n * (size_t)ne0) : NULL;
	float *y = be->iface->malloc(be->ctx, (size_t)n * (size_t)ne1 * sizeof(float));
	if (rc == 0 && (x == NULL || y == NULL))
		rc = LM_ENOMEM;
	double u = 0;
	if (rc == 0)
		rc = bench_time_matmul(be, y, &w, 1, x, n, reps, &u);
	if (rc == 0) {
		printf("gemm type=%s ne0=%lld ne1=%lld n=%d us=%.2f us_per_token=%.3f tops=%.2f\n",
		       lm_dtype_name(t), (long long)ne0, (long long)ne1, n, u, u / n,
		       2.0 * (double)ne0 * (double)ne1 * n / (u * 1e-6) / 1e12);
	} else
		fprintf(stderr, "bench_cuda: gemm %s n=%d: %s\n", lm_dtype_name(t), n,
			lm_backend_strerror(be, rc));
	if (x != NULL)
		be->iface->mfree(be->ctx, x);
	if (y != NULL)
		be->iface->mfree(be->ctx, y);
	if (w.data != NULL)
		lm_backend_weight_fini(be, &w);
	free(host);
	return rc;
}

/* ------------------------------------------------------------------ the one-token step */

#define STEP_DIM    4096
#define STEP_HEADS  32
#define STEP_KV     8
#define STEP_HD     128
#define STEP_FFN    14336
#define STEP_VOCAB  128256
#define STEP_CTX    1024
#define STEP_POS    512
#define STEP_LAYERS 32
/* Kernel launches of one layer (the step line's K): rmsnorm 1, q/k/v 3 x 2, rope 2, kv_store
 * 2 (K, V), attention 3, wo 2, add 1, rmsnorm 1, gate/up 2 x 2, silu_mul 1, down 2, add 1;
 * its seam calls (S) are 16: the ropes are two, kv_store and attention one each. */
#define STEP_LAYER_KERNELS 26
#define STEP_LAYER_OPS     16
/* Outside the layers: get_rows 1, output rmsnorm 1, lm_head 2 (copies not counted). */
#define STEP_HEAD_KERNELS 4
#define STEP_HEAD_OPS     4

struct step {
	struct lm_weight w[8]; /* q k v o gate up down, lm_head (also the embedding table) */
	void *host[8];
	float *norm, *x, *h, *q, *k, *v, *att, *gate, *up, *logits, *host_logits;
	void *kc, *vc;
	struct lm_kv_layer kv;
	bool graph;      /* the body as a step of the backend (the graph line) */
	int steps, warm; /* graph tokens run, and those a replay served (one pass) */
};

/* The embedding and the layers of one decode token: what engine/forward.c offers as a step. */
static int step_body(struct lm_backend *be, struct step *s, const struct lm_tok_loc *loc,
		     const int32_t *id)
{
	const struct lm_backend_i *f = be->iface;
	void *c = be->ctx;
	const struct lm_rope_params rp = {
		.mode = LM_ROPE_NORM, .n_rot = STEP_HD, .freq_base = 500000.0f, .freq_scale = 1.0f};
	int rc = f->get_rows(c, s->x, &s->w[7], id, 1);
	for (int l = 0; rc == 0 && l < STEP_LAYERS; l++) {
		if ((rc = f->rmsnorm(c, s->h, s->x, s->norm, STEP_DIM, 1, 1e-5f)) ||
		    (rc = f->matmul(c, s->q, &s->w[0], s->h, 1)) ||
		    (rc = f->matmul(c, s->k, &s->w[1], s->h, 1)) ||
		    (rc = f->matmul(c, s->v, &s->w[2], s->h, 1)) ||
		    (rc = f->rope(c, s->q, STEP_HEADS, STEP_HD, loc, 1, &rp)) ||
		    (rc = f->rope(c, s->k, STEP_KV, STEP_HD, loc, 1, &rp)) ||
		    (rc = f->kv_store(c, &s->kv, s->k, s->v, loc, 1)) ||
		    (rc = f->attention(c, s->att, s->q, &s->kv, loc, 1, STEP_HEADS, 0.088388f)) ||
		    (rc = f->matmul(c, s->h, &s->w[3], s->att, 1)) ||
		    (rc = f->add(c, s->x, s->h, STEP_DIM)) ||
		    (rc = f->rmsnorm(c, s->h, s->x, s->norm, STEP_DIM, 1, 1e-5f)) ||
		    (rc = f->matmul(c, s->gate, &s->w[4], s->h, 1)) ||
		    (rc = f->matmul(c, s->up, &s->w[5], s->h, 1)) ||
		    (rc = f->silu_mul(c, s->gate, s->gate, s->up, STEP_FFN)) ||
		    (rc = f->matmul(c, s->h, &s->w[6], s->gate, 1)))
			break;
		rc = f->add(c, s->x, s->h, STEP_DIM);
	}
	return rc;
}

/* One decode token, enqueued as the engine enqueues it (the body in passes of steps where the
 * step line is a graph's, as engine/forward.c's fw_body_steps); the logits download (where
 * `download`) waits for it. */
static int step_run(struct lm_backend *be, struct step *s, int32_t pos, bool download)
{
	const struct lm_backend_i *f = be->iface;
	void *c = be->ctx;
	const struct lm_tok_loc loc = {.slot = 0, .pos = pos};
	const int32_t id = pos % STEP_VOCAB;
	int rc = 0;
	for (int pass = 0;; pass++) {
		bool open = false, again = false;
		if (s->graph && f->step_begin != NULL && pass < 3 &&
		    (rc = f->step_begin(c, &loc, &id, 1, &open)) != 0)
			return rc;
		rc = step_body(be, s, &loc, &id);
		if (open) {
			int rs = f->step_end(c, rc, &again);
			rc = rc != 0 ? rc : again ? 0 : rs;
		}
		if (!again) {
			s->steps += s->graph;
			s->warm += s->graph && open && pass == 0;
			break;
		}
	}
	if (rc == 0)
		rc = f->rmsnorm(c, s->h, s->x, s->norm, STEP_DIM, 1, 1e-5f);
	if (rc == 0)
		rc = f->matmul(c, s->logits, &s->w[7], s->h, 1);
	if (rc == 0 && download)
		rc = f->download(c, s->host_logits, s->logits, STEP_VOCAB * sizeof(float));
	return rc;
}

static void step_free(struct lm_backend *be, struct step *s)
{
	float **bufs[] = {&s->norm, &s->x,   &s->h,    &s->q,  &s->k,
			  &s->v,    &s->att, &s->gate, &s->up, &s->logits};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		if (*bufs[i] != NULL)
			be->iface->mfree(be->ctx, *bufs[i]);
	if (s->kc != NULL)
		be->iface->mfree(be->ctx, s->kc);
	if (s->vc != NULL)
		be->iface->mfree(be->ctx, s->vc);
	for (int i = 0; i < 8; i++)
		if (s->w[i].data != NULL)
			lm_backend_weight_fini(be, &s->w[i]);
	for (int i = 0; i < 8; i++)
		free(s->host[i]);
	free(s->host_logits);
}

static int step_init(struct lm_backend *be, struct step *s, enum lm_dtype t)
{
	static const int64_t shape[8][2] = {
		{STEP_DIM, STEP_DIM}, {STEP_DIM, STEP_KV * STEP_HD}, {STEP_DIM, STEP_KV * STEP_HD},
		{STEP_DIM, STEP_DIM}, {STEP_DIM, STEP_FFN},          {STEP_DIM, STEP_FFN},
		{STEP_FFN, STEP_DIM}, {STEP_DIM, STEP_VOCAB}};
	memset(s, 0, sizeof *s);
	int rc = 0;
	for (int i = 0; i < 8 && rc == 0; i++)
		rc = bench_bind(be, &s->w[i], t, shape[i][0], shape[i][1], &s->host[i]);
	float **bufs[] = {&s->norm, &s->x,   &s->h,    &s->q,  &s->k,
			  &s->v,    &s->att, &s->gate, &s->up, &s->logits};
	const size_t lens[] = {STEP_DIM,          STEP_DIM, STEP_DIM, STEP_DIM, STEP_KV * STEP_HD,
			       STEP_KV * STEP_HD, STEP_DIM, STEP_FFN, STEP_FFN, STEP_VOCAB};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && rc == 0; i++)
		if ((*bufs[i] = bench_acts(be, lens[i])) == NULL)
			rc = LM_ENOMEM;
	const size_t row = STEP_KV * STEP_HD * 2; /* f16 */
	s->kv = (struct lm_kv_layer){.k_type = LM_F16,
				     .v_type = LM_F16,
				     .n_kv_heads = STEP_KV,
				     .head_dim = STEP_HD,
				     .ctx = STEP_CTX,
				     .slots = 1,
				     .k_row_bytes = row,
				     .v_row_bytes = row};
	if (rc == 0 && ((s->kc = be->iface->malloc(be->ctx, row * STEP_CTX)) == NULL ||
			(s->vc = be->iface->malloc(be->ctx, row * STEP_CTX)) == NULL))
		rc = LM_ENOMEM;
	s->kv.k = s->kc;
	s->kv.v = s->vc;
	if (rc == 0 && (s->host_logits = malloc(STEP_VOCAB * sizeof(float))) == NULL)
		rc = LM_ENOMEM;
	/* The cache's rows before STEP_POS: the values of x, so attention reads numbers. */
	for (int32_t p = 0; rc == 0 && p < STEP_POS; p++) {
		const struct lm_tok_loc loc = {.slot = 0, .pos = p};
		rc = be->iface->kv_store(be->ctx, &s->kv, s->x, s->x, &loc, 1);
	}
	return rc == 0 ? lm_backend_sync(be) : rc;
}

/* Median wall time (us) of `pre` device copies of cp_len floats, then the step if `step`. */
static int step_time(struct lm_backend *be, struct step *s, float *cp, size_t cp_len, int pre,
		     bool step, double *wall_us, double *enq_us)
{
	double w[BENCH_TIMINGS], e[BENCH_TIMINGS];
	int rc = 0;
	for (int k = -1; rc == 0 && k < BENCH_TIMINGS; k++) {
		const int64_t t0 = lm_now_ns();
		for (int i = 0; rc == 0 && i < pre; i++)
			rc = be->iface->copy(be->ctx, cp + cp_len, cp, cp_len);
		const int64_t t1 = lm_now_ns();
		if (rc == 0 && step)
			rc = step_run(be, s, STEP_POS + (k & 1),
				      true); /* places change per token */
		if (rc == 0)
			rc = lm_backend_sync(be);
		if (k >= 0) {
			w[k] = (double)(lm_now_ns() - t0) / 1e3;
			e[k] = (double)(t1 - t0) / 1e3;
		}
	}
	*wall_us = bench_median(w, BENCH_TIMINGS);
	if (enq_us != NULL)
		*enq_us = bench_median(e, BENCH_TIMINGS);
	return rc;
}

/* One step line: s's token eager or as a graph (s->graph). */
static int bench_step_line(struct lm_backend *be, struct step *s, enum lm_dtype t, float *cp,
			   size_t cp_len)
{
	double wall = 0, enq = 0, one_copy = 0, pre_alone = 0, pre_step = 0;
	s->steps = s->warm = 0;
	/* step_time's warm-up (k = -1) captures the graphs of the two positions' bucket. */
	int rc = step_time(be, s, cp, cp_len, 0, true, &wall, NULL);
	/* The host's side: the step's ops up to the lm_head returning (the download waits). */
	double en[BENCH_TIMINGS];
	for (int k = 0; rc == 0 && k < BENCH_TIMINGS; k++) {
		const int64_t t0 = lm_now_ns();
		rc = step_run(be, s, STEP_POS + (k & 1), false);
		en[k] = (double)(lm_now_ns() - t0) / 1e3;
		if (rc == 0)
			rc = lm_backend_sync(be);
	}
	if (rc == 0)
		enq = bench_median(en, BENCH_TIMINGS);
	/* The queue kept full: copies lasting about 3 E, then the step. */
	if (rc == 0)
		rc = step_time(be, s, cp, cp_len, 1, false, &one_copy, NULL);
	const int pre = one_copy > 0 ? (int)(3 * enq / one_copy) + 1 : 1;
	if (rc == 0)
		rc = step_time(be, s, cp, cp_len, pre, false, &pre_alone, NULL);
	if (rc == 0)
		rc = step_time(be, s, cp, cp_len, pre, true, &pre_step, NULL);
	if (rc == 0) {
		const double gpu = pre_step - pre_alone;
		const int kernels = STEP_LAYERS * STEP_LAYER_KERNELS + STEP_HEAD_KERNELS;
		char served[48] = "";
		if (s->graph)
			snprintf(served, sizeof served, " replays=%d/%d", s->warm, s->steps);
		printf("step type=%s mode=%s layers=%d seam_ops=%d kernels=%d enqueue_us=%.1f "
		       "wall_us=%.1f gpu_us=%.1f us_per_launch=%.2f launch_share=%.3f%s (copies "
		       "ahead: %d x %.0f us)\n",
		       lm_dtype_name(t), s->graph ? "graph" : "eager", STEP_LAYERS,
		       STEP_LAYERS * STEP_LAYER_OPS + STEP_HEAD_OPS, kernels, enq, wall, gpu,
		       enq / kernels, (wall - gpu) / wall, served, pre, one_copy);
	} else
		fprintf(stderr, "bench_cuda: step %s %s: %s\n", lm_dtype_name(t),
			s->graph ? "graph" : "eager", lm_backend_strerror(be, rc));
	return rc;
}

/* The eager step line, then the graph's, on the same weights and cache; and whether the two
 * give the same logits bit for bit (a replay against eager launches, at two positions). */
static int bench_step(struct lm_backend *be, enum lm_dtype t)
{
	struct step s;
	int rc = step_init(be, &s, t);
	const size_t cp_len = (size_t)64 << 20; /* 256 MiB each way */
	float *cp = rc == 0 ? be->iface->malloc(be->ctx, 2 * cp_len * sizeof(float)) : NULL;
	if (rc == 0 && cp == NULL)
		rc = LM_ENOMEM;
	float *eager = malloc(2 * STEP_VOCAB * sizeof(float));
	if (rc == 0 && eager == NULL)
		rc = LM_ENOMEM;
	for (int k = 0; rc == 0 && k < 2; k++)
		if ((rc = step_run(be, &s, STEP_POS + k, true)) == 0)
			memcpy(eager + k * STEP_VOCAB, s.host_logits, STEP_VOCAB * sizeof(float));
	if (rc == 0)
		rc = bench_step_line(be, &s, t, cp, cp_len);
	s.graph = true;
	if (rc == 0)
		rc = bench_step_line(be, &s, t, cp, cp_len);
	int same = 1;
	for (int k = 0; rc == 0 && k < 2; k++)
		if ((rc = step_run(be, &s, STEP_POS + k, true)) == 0)
			same &= memcmp(eager + k * STEP_VOCAB, s.host_logits,
				       STEP_VOCAB * sizeof(float)) == 0;
	if (rc == 0) {
		printf("step type=%s graph_logits=%s\n", lm_dtype_name(t),
		       same ? "equal_to_eager" : "DIFFER_FROM_EAGER");
		rc = same ? 0 : LM_EDEVICE;
	}
	free(eager);
	if (cp != NULL)
		be->iface->mfree(be->ctx, cp);
	step_free(be, &s);
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
	/* The step lines time both ways on one backend: graphs on, the eager line opening no step. */
	setenv("LM_CUDA_GRAPHS", "1", 1);
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
	/* Prefill: one FFN-shaped matmul by batch size, on both sides of the GEMM's threshold. */
	static const enum lm_dtype gemm_types[] = {LM_Q8_0, LM_Q4_0, LM_Q4_K, LM_Q6_K};
	static const int batches[] = {8, 15, 16, 64, 512};
	for (int i = 0; i < 4 && rc == 0; i++)
		for (int b = 0; b < 5 && rc == 0; b++)
			rc = bench_gemm(&be, gemm_types[i], 4096, 14336, batches[b],
					batches[b] >= 64 ? 10 : 40);
	/* The one-token step: what launches cost a decode token. */
	for (int i = 0; i < 2 && rc == 0; i++)
		rc = bench_step(&be, types[i]);
	lm_backend_fini(&be);
	return rc == 0 ? 0 : 1;
}

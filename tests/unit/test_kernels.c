/* test_kernels.c — the CPU backend's matmul, element-wise ops and embedding lookup.
 *
 * References: the scalar matmul against a double-precision "dequantize the weights, dot with
 * the activations as converted to the weight type's vec_dot type" computation; the fast kernels
 * against the scalar ones (normalised error, as ggml's test-backend-ops); batching and thread
 * counts against single calls, exactly. Attention, rope and the KV stores are in
 * test_attention.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_impl.h"
#include "common/format/quant.h"
#include "kernels_testutil.h"

TestSuite(kernels, .timeout = 60);

static void be_init(struct lm_backend *b, int threads, int scalar)
{
	struct lm_backend_opts o = {.n_threads = threads, .force_scalar = scalar};
	cr_assert_eq(lm_backend_cpu_init(b, &o), 0);
	cr_assert_eq(lm_backend_cpu_threads(b), threads);
}

/* Kernel set k (an index into test_ksets): true when available. */
static bool kset_init(struct lm_backend *b, int threads, int k)
{
	int rc = test_backend(b, threads, test_ksets[k]);
	if (rc == LM_EUNSUPPORTED)
		return false;
	cr_assert_eq(rc, 0, "%s: %d", test_ksets[k], rc);
	cr_assert_str_eq(lm_backend_cpu_kernels(b), test_ksets[k]);
	return true;
}

/* A weight of `type`, quantized from gaussian values, and its copies bound to backends (bw): a
 * backend may rearrange a weight's bytes at weight_init (the AVX-512 set's panels), so each
 * backend gets its own. */
struct tw {
	struct lm_weight w;
	void *bytes;
	struct {
		void *ctx;
		struct lm_backend *b;
		struct lm_weight w;
		void *bytes;
	} bound[4];
	int n_bound;
};

/* t bound to b (its own copy of the bytes, made at the first call for b). */
static const struct lm_weight *bw(struct lm_backend *b, struct tw *t)
{
	for (int i = 0; i < t->n_bound; i++)
		if (t->bound[i].ctx == b->ctx)
			return &t->bound[i].w;
	cr_assert_lt(t->n_bound, 4);
	const size_t size = t->w.row_bytes * (size_t)t->w.ne1;
	void *copy = malloc(size);
	cr_assert_not_null(copy);
	memcpy(copy, t->bytes, size);
	struct lm_weight w = t->w;
	cr_assert_eq(lm_backend_weight_init(b, &w, copy), 0);
	t->bound[t->n_bound].ctx = b->ctx;
	t->bound[t->n_bound].b = b;
	t->bound[t->n_bound].w = w;
	t->bound[t->n_bound].bytes = copy;
	return &t->bound[t->n_bound++].w;
}

static void tw_init(struct tw *t, enum lm_dtype type, int64_t ne0, int64_t ne1, struct test_rng *r)
{
	uint64_t rb = 0;
	cr_assert_eq(lm_dtype_row_bytes(type, (uint64_t)ne0, &rb), 0);
	t->bytes = malloc(rb * (uint64_t)ne1);
	float *row = malloc((size_t)ne0 * sizeof(float));
	cr_assert(t->bytes && row);
	for (int64_t i = 0; i < ne1; i++) {
		test_fill_gauss(r, row, (size_t)ne0, 0.05f);
		cr_assert_eq(lm_quantize_row(type, row, (uint8_t *)t->bytes + i * rb, ne0), 0);
	}
	free(row);
	t->w = (struct lm_weight){
		.type = type, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb, .data = t->bytes};
	t->n_bound = 0;
}

/* Unbinds t from b (before b goes: a later backend may get b's address). */
static void tw_drop(struct tw *t, struct lm_backend *b)
{
	for (int i = 0; i < t->n_bound; i++)
		if (t->bound[i].ctx == b->ctx) {
			lm_backend_weight_fini(b, &t->bound[i].w);
			free(t->bound[i].bytes);
			t->bound[i] = t->bound[--t->n_bound];
			return;
		}
}

static void tw_fini(struct tw *t)
{
	for (int i = 0; i < t->n_bound; i++) {
		lm_backend_weight_fini(t->bound[i].b, &t->bound[i].w);
		free(t->bound[i].bytes);
	}
	free(t->bytes);
}

static enum lm_dtype vec_dot_type(enum lm_dtype t)
{
	switch (t) {
	case LM_Q8_0:
	case LM_Q4_0:
	case LM_MXFP4:
		return LM_Q8_0;
	case LM_Q4_K:
	case LM_Q6_K:
		return LM_Q8_K;
	default:
		return t;
	}
}

/* y[t][r] = sum_i W[r][i] * X'[t][i] in double, W dequantized, X' = x converted to the
 * vec_dot type and back. */
static void ref_matmul(double *y, const struct lm_weight *w, const float *x, int n)
{
	const enum lm_dtype vdt = vec_dot_type(w->type);
	uint64_t xb = 0;
	cr_assert_eq(lm_dtype_row_bytes(vdt, (uint64_t)w->ne0, &xb), 0);
	void *xq = malloc(xb);
	float *xc = malloc((size_t)w->ne0 * sizeof(float));
	float *wr = malloc((size_t)w->ne0 * sizeof(float));
	for (int t = 0; t < n; t++) {
		cr_assert_eq(lm_quantize_row(vdt, x + t * w->ne0, xq, w->ne0), 0);
		cr_assert_eq(lm_dequantize_row(vdt, xq, xc, w->ne0), 0);
		for (int64_t r = 0; r < w->ne1; r++) {
			cr_assert_eq(lm_dequantize_row(w->type,
						       (const uint8_t *)w->data + r * w->row_bytes,
						       wr, w->ne0),
				     0);
			double s = 0;
			for (int64_t i = 0; i < w->ne0; i++)
				s += (double)wr[i] * (double)xc[i];
			y[t * w->ne1 + r] = s;
		}
	}
	free(xq);
	free(xc);
	free(wr);
}

static const enum lm_dtype mm_types[] = {LM_F32,  LM_F16,  LM_BF16, LM_Q8_0,
					 LM_Q4_0, LM_Q4_K, LM_Q6_K, LM_MXFP4};
#define N_MM_TYPES (sizeof mm_types / sizeof mm_types[0])

/* An input width per type that is a multiple of its block but not of the SIMD widths. */
static int64_t odd_ne0(enum lm_dtype t)
{
	switch (t) {
	case LM_Q8_0:
	case LM_Q4_0:
	case LM_MXFP4:
		return 96 + 32 * 5; /* 8 blocks */
	case LM_Q4_K:
	case LM_Q6_K:
		return 768;
	default:
		return 263;
	}
}

Test(kernels, scalar_matmul_matches_double_reference)
{
	struct lm_backend b;
	be_init(&b, 1, 1);
	struct test_rng r = {11};
	for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
		const enum lm_dtype type = mm_types[ti];
		const int64_t ne0 = odd_ne0(type), ne1 = 45;
		const int n = 3;
		struct tw w;
		tw_init(&w, type, ne0, ne1, &r);
		float *x = malloc((size_t)(n * ne0) * sizeof(float));
		float *y = malloc((size_t)(n * ne1) * sizeof(float));
		double *ref = malloc((size_t)(n * ne1) * sizeof(double));
		test_fill_gauss(&r, x, (size_t)(n * ne0), 1.0f);
		cr_assert_eq(b.iface->matmul(b.ctx, y, bw(&b, &w), x, n), 0);
		ref_matmul(ref, &w.w, x, n);
		/* Only the float accumulation differs from the reference: f32 products and a double
		 * sum for float types, per-block f32 scaling for the quantized ones. */
		const double e = test_nmse_d(y, ref, (size_t)(n * ne1));
		cr_expect_leq(e, 1e-11, "%s: nmse %g", lm_dtype_name(type), e);
		double maxrel = 0;
		for (int i = 0; i < n * ne1; i++)
			maxrel = fmax(maxrel, fabs(y[i] - ref[i]) / (fabs(ref[i]) + 1e-3));
		cr_log_info("scalar matmul %s vs double: nmse %.3g, max relative error %.3g",
			    lm_dtype_name(type), e, maxrel);
		cr_expect_leq(maxrel, 1e-4, "%s: max relative error %g", lm_dtype_name(type),
			      maxrel);
		free(x);
		free(y);
		free(ref);
		tw_fini(&w);
	}
	lm_backend_fini(&b);
}

/* The conversion of activations is part of the numerics: without it the Q8_0 result would be
 * the plain f32 dot product, and this test tells the two apart. */
Test(kernels, matmul_quantizes_activations_first)
{
	struct lm_backend b;
	be_init(&b, 1, 1);
	struct test_rng r = {12};
	struct tw w;
	tw_init(&w, LM_Q8_0, 256, 8, &r);
	float x[256], y[8], wr[256];
	test_fill_gauss(&r, x, 256, 1.0f);
	cr_assert_eq(b.iface->matmul(b.ctx, y, bw(&b, &w), x, 1), 0);
	double ref[8];
	ref_matmul(ref, &w.w, x, 1);
	for (int i = 0; i < 8; i++) {
		lm_dequantize_row(LM_Q8_0, (const uint8_t *)w.bytes + i * w.w.row_bytes, wr, 256);
		double plain = 0;
		for (int j = 0; j < 256; j++)
			plain += (double)wr[j] * x[j];
		cr_expect(fabs(y[i] - ref[i]) < 0.05 * fabs(y[i] - plain) + 1e-6,
			  "row %d: %g is closer to the unquantized %g than to %g", i, y[i], plain,
			  ref[i]);
	}
	tw_fini(&w);
	lm_backend_fini(&b);
}

/* n tokens in one call equal n single-token calls, bit for bit, in every kernel set: a token's
 * result does not depend on the batch it rides in. Where the set has a multi-token GEMM for the
 * type, the batch is compared with the generic kernels instead (which it equals bit for bit, see
 * quantized_matmul_equals_generic_bit_for_bit), since a single token takes the one-token kernel. */
Test(kernels, batched_matmul_equals_single_calls)
{
	struct test_rng r = {13};
	const int ns[] = {1, 3, 16};
	struct lm_backend ref;
	be_init(&ref, 1, 1);
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 2, k))
			continue;
		for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
			const enum lm_dtype type = mm_types[ti];
			const int64_t ne0 = odd_ne0(type), ne1 = 133;
			const int gemm_n = lm_backend_cpu_gemm_min_n(&b, type);
			struct tw w;
			tw_init(&w, type, ne0, ne1, &r);
			float *x = malloc((size_t)(16 * ne0) * sizeof(float));
			float *y = malloc((size_t)(16 * ne1) * sizeof(float));
			float *y1 = malloc((size_t)ne1 * sizeof(float));
			test_fill_gauss(&r, x, (size_t)(16 * ne0), 1.0f);
			for (size_t ni = 0; ni < 3; ni++) {
				const int n = ns[ni];
				const bool gemm = gemm_n > 0 && n >= gemm_n;
				struct lm_backend *single = gemm ? &ref : &b;
				cr_assert_eq(b.iface->matmul(b.ctx, y, bw(&b, &w), x, n), 0);
				for (int t = 0; t < n; t++) {
					cr_assert_eq(single->iface->matmul(single->ctx, y1,
									   bw(single, &w),
									   x + t * ne0, 1),
						     0);
					cr_assert_eq(memcmp(y1, y + t * ne1,
							    (size_t)ne1 * sizeof(float)),
						     0, "%s %s n=%d token %d differs%s",
						     lm_backend_cpu_kernels(&b),
						     lm_dtype_name(type), n, t,
						     gemm ? " from generic" : "");
				}
			}
			free(x);
			free(y);
			free(y1);
			tw_fini(&w);
		}
		lm_backend_fini(&b);
	}
	lm_backend_fini(&ref);
}

/* Random bytes for the quants and sub-block scales of a weight row, with finite block scales of
 * either sign: quants the reference quantizer never writes (-128 in Q8_0, every 6-bit scale and
 * min of Q4_K, a Q6_K scale of -128) are still valid GGUF and must give the generic results. */
static void raw_weight(struct tw *t, enum lm_dtype type, int64_t ne0, int64_t ne1,
		       struct test_rng *r)
{
	uint64_t rb = 0;
	cr_assert_eq(lm_dtype_row_bytes(type, (uint64_t)ne0, &rb), 0);
	uint8_t *buf = malloc(rb * (uint64_t)ne1);
	cr_assert_not_null(buf);
	for (uint64_t i = 0; i < rb * (uint64_t)ne1; i++)
		buf[i] = (uint8_t)test_rng_next(r);
	for (int64_t row = 0; row < ne1; row++) {
		uint8_t *p = buf + (uint64_t)row * rb;
		switch (type) {
		case LM_Q8_0:
		case LM_Q4_0: {
			const size_t bs = type == LM_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
			for (int64_t b = 0; b < ne0 / 32; b++) {
				const uint16_t d = lm_f32_to_f16(test_rng_gauss(r) * 0.01f);
				memcpy(p + (size_t)b * bs, &d, 2);
			}
			break;
		}
		case LM_MXFP4: /* every code, -0 included; scales 2^-9 .. 2^0 */
			for (int64_t b = 0; b < ne0 / 32; b++)
				((block_mxfp4 *)p)[b].e = (uint8_t)(118 + test_rng_next(r) % 10);
			break;
		case LM_Q4_K:
			for (int64_t b = 0; b < ne0 / 256; b++) {
				block_q4_K *blk = (block_q4_K *)p + b;
				blk->d = lm_f32_to_f16(test_rng_gauss(r) * 0.001f);
				blk->dmin = lm_f32_to_f16(test_rng_gauss(r) * 0.001f);
			}
			break;
		case LM_Q6_K: /* every 6-bit quant and int8 scale, -128 included */
			for (int64_t b = 0; b < ne0 / 256; b++) {
				block_q6_K *blk = (block_q6_K *)p + b;
				blk->d = lm_f32_to_f16(test_rng_gauss(r) * 0.001f);
			}
			break;
		default:
			cr_assert_fail("no raw weight for %s", lm_dtype_name(type));
		}
	}
	t->bytes = buf;
	t->w = (struct lm_weight){
		.type = type, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb, .data = buf};
	t->n_bound = 0;
}

/* The quantized matmuls of every kernel set against the generic kernels, bit for bit, for
 * every batch from 1 to 20 tokens and 64, on weights bound to the backend (the avx2 and avx512
 * sets' panels, the amx set's GEMMs): each computes a block's exact integer sum and then the
 * generic kernel's float steps in its order (cpu_impl.h). Row counts that end in a partial
 * group, odd block counts, one and two threads, quantized and raw weights, activations of
 * ordinary and extreme ranges. */
Test(kernels, quantized_matmul_equals_generic_bit_for_bit)
{
	static const enum lm_dtype types[] = {LM_Q8_0, LM_Q4_0, LM_Q4_K, LM_Q6_K, LM_MXFP4};
	static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 20, 64};
	struct test_rng r = {17};
	struct lm_backend ref;
	be_init(&ref, 1, 1);
	for (int k = 1; k < TEST_N_KSETS; k++) {
		for (int threads = 1; threads <= 2; threads++) {
			struct lm_backend b;
			if (!kset_init(&b, threads, k))
				continue;
			for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
				const enum lm_dtype type = types[ti];
				const bool kq = type == LM_Q4_K || type == LM_Q6_K;
				const int64_t shapes[][2] = {
					{kq ? 256 : 32, 19},
					{kq ? 768 : 224, 37},
					{kq ? 512 : 544, 133},
					{kq ? 1280 : 1024, 64},
				};
				for (int sh = 0; sh < 4; sh++) {
					const int64_t ne0 = shapes[sh][0], ne1 = shapes[sh][1];
					struct tw w;
					if (sh % 2 == 0)
						raw_weight(&w, type, ne0, ne1, &r);
					else
						tw_init(&w, type, ne0, ne1, &r);
					float *x = malloc((size_t)(64 * ne0) * sizeof(float));
					float *y0 = malloc((size_t)(64 * ne1) * sizeof(float));
					float *y1 = malloc((size_t)(64 * ne1) * sizeof(float));
					test_fill_gauss(&r, x, (size_t)(64 * ne0),
							sh == 2 ? 1e3f : 1.0f);
					/* Every third token is a weight row itself: block sums near
					 * their largest, where the order of the float steps shows. */
					for (int t = 0; t < 64; t += 3)
						cr_assert_eq(lm_dequantize_row(
								     type,
								     (const uint8_t *)w.bytes +
									     (size_t)(t % ne1) *
										     w.w.row_bytes,
								     x + t * ne0, ne0),
							     0);
					/* A few zero blocks: scales of 0. */
					memset(x + 4 * ne0, 0, 32 * sizeof(float));
					for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
						const int n = ns[ni];
						cr_assert_eq(b.iface->matmul(b.ctx, y0, bw(&b, &w),
									     x, n),
							     0);
						cr_assert_eq(ref.iface->matmul(ref.ctx, y1,
									       bw(&ref, &w), x, n),
							     0);
						for (int64_t i = 0; i < n * ne1; i++)
							cr_assert(memcmp(&y0[i], &y1[i],
									 sizeof(float)) == 0,
								  "%s %s %lldx%lld n=%d (%d "
								  "threads): "
								  "token %lld row %lld: %.9g vs "
								  "generic "
								  "%.9g",
								  lm_backend_cpu_kernels(&b),
								  lm_dtype_name(type),
								  (long long)ne1, (long long)ne0, n,
								  threads, (long long)(i / ne1),
								  (long long)(i % ne1), y0[i],
								  y1[i]);
					}
					free(x);
					free(y0);
					free(y1);
					tw_fini(&w);
				}
			}
			lm_backend_fini(&b);
		}
	}
	lm_backend_fini(&ref);
}

/* Weights whose every quant, scale and min is at its largest (qfill: the quant bytes; the Q6_K
 * scales 127 or -128), against activations of one sign (every quant 127 or -127): each block's
 * integer sums at their bound. A kernel that sums vpmaddubsw pairs in int16 (the avx2 set's
 * one-token K-quant kernel) overflows there if its bound is wrong, and the results would differ
 * from the generic kernels'. */
static void saturated_weight(struct tw *t, enum lm_dtype type, int64_t ne0, int64_t ne1,
			     uint8_t qfill, int8_t q6_scale)
{
	uint64_t rb = 0;
	cr_assert_eq(lm_dtype_row_bytes(type, (uint64_t)ne0, &rb), 0);
	uint8_t *buf = malloc(rb * (uint64_t)ne1);
	cr_assert_not_null(buf);
	const size_t bsize = type == LM_Q4_0   ? sizeof(block_q4_0)
			     : type == LM_Q4_K ? sizeof(block_q4_K)
					       : sizeof(block_q6_K);
	for (size_t i = 0; i < rb * (uint64_t)ne1 / bsize; i++) {
		if (type == LM_Q4_0) {
			block_q4_0 *b = (block_q4_0 *)buf + i;
			b->d = lm_f32_to_f16(0.01f);
			memset(b->qs, qfill, sizeof b->qs);
		} else if (type == LM_Q4_K) {
			block_q4_K *b = (block_q4_K *)buf + i;
			b->d = lm_f32_to_f16(0.001f);
			b->dmin = lm_f32_to_f16(0.002f);
			memset(b->scales, 0xff, sizeof b->scales);
			memset(b->qs, qfill, sizeof b->qs);
		} else {
			block_q6_K *b = (block_q6_K *)buf + i;
			b->d = lm_f32_to_f16(0.001f);
			memset(b->ql, qfill, sizeof b->ql);
			memset(b->qh, qfill, sizeof b->qh);
			memset(b->scales, (uint8_t)q6_scale, sizeof b->scales);
		}
	}
	t->bytes = buf;
	t->w = (struct lm_weight){
		.type = type, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb, .data = buf};
	t->n_bound = 0;
}

Test(kernels, sums_at_their_bound_equal_generic_bit_for_bit)
{
	static const enum lm_dtype types[] = {LM_Q4_0, LM_Q4_K, LM_Q6_K};
	static const int ns[] = {1, 2, 7};
	const int64_t ne0 = 512, ne1 = 48;
	struct lm_backend ref;
	be_init(&ref, 1, 1);
	float *x = malloc((size_t)(8 * ne0) * sizeof(float));
	float *y0 = malloc((size_t)(8 * ne1) * sizeof(float));
	float *y1 = malloc((size_t)(8 * ne1) * sizeof(float));
	for (int t = 0; t < 8; t++)
		for (int64_t i = 0; i < ne0; i++)
			x[t * ne0 + i] = t % 2 ? -1.0f : 1.0f;
	for (int k = 1; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
			for (int v = 0; v < 2; v++) {
				const enum lm_dtype type = types[ti];
				struct tw w;
				saturated_weight(&w, type, ne0, ne1, v ? 0x00 : 0xff,
						 v ? -128 : 127);
				for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
					const int n = ns[ni];
					cr_assert_eq(b.iface->matmul(b.ctx, y0, bw(&b, &w), x, n),
						     0);
					cr_assert_eq(
						ref.iface->matmul(ref.ctx, y1, bw(&ref, &w), x, n),
						0);
					for (int64_t i = 0; i < n * ne1; i++)
						cr_assert(memcmp(&y0[i], &y1[i], sizeof(float)) ==
								  0,
							  "%s %s quants 0x%02x n=%d: token %lld "
							  "row %lld: "
							  "%.9g vs generic %.9g",
							  lm_backend_cpu_kernels(&b),
							  lm_dtype_name(type), v ? 0x00 : 0xff, n,
							  (long long)(i / ne1),
							  (long long)(i % ne1), y0[i], y1[i]);
				}
				tw_fini(&w);
			}
		lm_backend_fini(&b);
	}
	free(x);
	free(y0);
	free(y1);
	lm_backend_fini(&ref);
}

/* A one-token matmul (decode) may run its own kernel, which walks several rows at once and
 * ends each row in a tail of odd blocks: over every block-count remainder and row-group
 * remainder, its result is the token's row of a two-token batch bit for bit, and it matches the
 * scalar kernels (within rounding). Where the set's GEMM takes a two-token batch (amx), the batch is computed by
 * the avx512 set instead: amx is avx512 plus the GEMMs, so its row kernels are the ones the
 * one-token kernel must equal, and the GEMM follows the generic order (see
 * quantized_matmul_equals_generic_bit_for_bit). The weights are allocated to the byte, so a read past the
 * matrix shows under ASan. */
Test(kernels, one_token_matmul_equals_its_row_of_a_batch)
{
	struct test_rng r = {17};
	static const int64_t ne0_32[] = {32, 64, 96, 224, 256, 288, 480, 544, 2048};
	static const int64_t ne0_256[] = {256, 512, 768, 2304};
	static const int64_t ne0_f[] = {8, 263};
	static const int64_t ne1s[] = {1, 2, 3, 4, 5, 7, 9, 16};
	struct lm_backend ref;
	be_init(&ref, 1, 1);
	struct lm_backend rows = {0}; /* the avx512 set, where this CPU has it */
	int k_avx512 = -1;
	for (int k = 0; k < TEST_N_KSETS; k++)
		if (strcmp(test_ksets[k], "avx512") == 0)
			k_avx512 = k;
	cr_assert_geq(k_avx512, 0);
	const bool have_rows = kset_init(&rows, 1, k_avx512);
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
			const enum lm_dtype type = mm_types[ti];
			const int gemm_n = lm_backend_cpu_gemm_min_n(&b, type);
			struct lm_backend *batch = &b;
			if (gemm_n > 0 && gemm_n <= 2) {
				cr_assert(have_rows, "%s has a GEMM but this CPU no avx512 set",
					  test_ksets[k]);
				batch = &rows;
			}
			const int64_t *ne0s = ne0_f;
			size_t n_ne0 = sizeof ne0_f / sizeof ne0_f[0];
			if (type == LM_Q8_0 || type == LM_Q4_0 || type == LM_MXFP4) {
				ne0s = ne0_32;
				n_ne0 = sizeof ne0_32 / sizeof ne0_32[0];
			} else if (type == LM_Q4_K || type == LM_Q6_K) {
				ne0s = ne0_256;
				n_ne0 = sizeof ne0_256 / sizeof ne0_256[0];
			}
			/* The nmse of one shape is a ratio over as few as one output: a sum that
			 * cancels to near zero shows its rounding as a large relative error (an
			 * output of -0.05 off by 6e-7 is 1.6e-10). The 1e-10 bound holds over every
			 * shape of the type; a single shape only has to be far from a wrong result. */
			double worst = 0, err2 = 0, ref2 = 0;
			for (size_t i0 = 0; i0 < n_ne0; i0++) {
				for (size_t i1 = 0; i1 < sizeof ne1s / sizeof ne1s[0]; i1++) {
					const int64_t ne0 = ne0s[i0], ne1 = ne1s[i1];
					struct tw w;
					tw_init(&w, type, ne0, ne1, &r);
					float *x = malloc((size_t)(2 * ne0) * sizeof(float));
					float *y1 = malloc((size_t)ne1 * sizeof(float));
					float *y2 = malloc((size_t)(2 * ne1) * sizeof(float));
					float *y0 = malloc((size_t)ne1 * sizeof(float));
					test_fill_gauss(&r, x, (size_t)(2 * ne0), 1.0f);
					cr_assert_eq(b.iface->matmul(b.ctx, y1, bw(&b, &w), x, 1),
						     0);
					cr_assert_eq(batch->iface->matmul(batch->ctx, y2,
									  bw(batch, &w), x, 2),
						     0);
					cr_assert_eq(
						ref.iface->matmul(ref.ctx, y0, bw(&ref, &w), x, 1),
						0);
					cr_assert_eq(memcmp(y1, y2, (size_t)ne1 * sizeof(float)), 0,
						     "%s %s %lldx%lld: one token differs from its "
						     "row of a%s batch",
						     test_ksets[k], lm_dtype_name(type),
						     (long long)ne1, (long long)ne0,
						     batch == &b ? "" : "n avx512");
					const double e = test_nmse(y1, y0, (size_t)ne1);
					worst = fmax(worst, e);
					cr_expect_leq(e, 1e-6, "%s %s %lldx%lld: nmse %g",
						      test_ksets[k], lm_dtype_name(type),
						      (long long)ne1, (long long)ne0, e);
					for (int64_t i = 0; i < ne1; i++) {
						err2 += ((double)y1[i] - y0[i]) *
							((double)y1[i] - y0[i]);
						ref2 += (double)y0[i] * y0[i];
					}
					free(x);
					free(y0);
					free(y1);
					free(y2);
					tw_fini(&w);
				}
			}
			const double pooled = ref2 > 0 ? err2 / ref2 : err2;
			cr_expect_leq(pooled, 1e-10, "%s %s: nmse %g over every shape",
				      test_ksets[k], lm_dtype_name(type), pooled);
			cr_log_info("one-token matmul %s, %s: nmse against generic %.3g over every "
				    "shape, %.3g at worst",
				    test_ksets[k], lm_dtype_name(type), pooled, worst);
		}
		lm_backend_fini(&b);
	}
	if (have_rows)
		lm_backend_fini(&rows);
	lm_backend_fini(&ref);
}

/* One and two threads give identical results (each output row is computed by one thread), for
 * one token (the decode kernels) and for a batch. */
Test(kernels, thread_counts_agree_exactly)
{
	struct test_rng r = {14};
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b1, b2;
		if (!kset_init(&b1, 1, k))
			continue;
		cr_assert(kset_init(&b2, 2, k));
		for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
			const enum lm_dtype type = mm_types[ti];
			const int64_t ne0 = 512, ne1 = 301;
			for (int n = 1; n <= 5; n += 4) {
				struct tw w;
				tw_init(&w, type, ne0, ne1, &r);
				float *x = malloc((size_t)(n * ne0) * sizeof(float));
				float *y1 = malloc((size_t)(n * ne1) * sizeof(float));
				float *y2 = malloc((size_t)(n * ne1) * sizeof(float));
				test_fill_gauss(&r, x, (size_t)(n * ne0), 1.0f);
				cr_assert_eq(b1.iface->matmul(b1.ctx, y1, bw(&b1, &w), x, n), 0);
				cr_assert_eq(b2.iface->matmul(b2.ctx, y2, bw(&b2, &w), x, n), 0);
				cr_expect_eq(memcmp(y1, y2, (size_t)(n * ne1) * sizeof(float)), 0,
					     "%s %s n=%d differs between 1 and 2 threads",
					     lm_backend_cpu_kernels(&b1), lm_dtype_name(type), n);
				free(x);
				free(y1);
				free(y2);
				tw_fini(&w);
			}
		}
		lm_backend_fini(&b1);
		lm_backend_fini(&b2);
	}
}

/* The fast kernels against the scalar ones on the same inputs. Quantized types compute the same
 * integer block sums and differ only in float summation order; float types differ in f32
 * versus double accumulation. */
Test(kernels, fast_matmul_matches_scalar)
{
	struct test_rng r = {15};
	struct lm_backend fast, ref;
	be_init(&ref, 1, 1);
	const int ns[] = {1, 2, 3, 4, 5, 7, 8, 17};
	for (int k = 1; k < TEST_N_KSETS; k++) {
		if (!kset_init(&fast, 2, k))
			continue;
		for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
			const enum lm_dtype type = mm_types[ti];
			double worst = 0;
			for (int shape = 0; shape < 2; shape++) {
				const int64_t ne0 = shape == 0 ? odd_ne0(type) : 2048;
				const int64_t ne1 = shape == 0 ? 37 : 75;
				struct tw w;
				tw_init(&w, type, ne0, ne1, &r);
				for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
					const int n = ns[ni];
					float *x = malloc((size_t)(n * ne0) * sizeof(float));
					float *y0 = malloc((size_t)(n * ne1) * sizeof(float));
					float *y1 = malloc((size_t)(n * ne1) * sizeof(float));
					test_fill_gauss(&r, x, (size_t)(n * ne0), 1.0f);
					cr_assert_eq(fast.iface->matmul(fast.ctx, y0, bw(&fast, &w),
									x, n),
						     0);
					cr_assert_eq(
						ref.iface->matmul(ref.ctx, y1, bw(&ref, &w), x, n),
						0);
					const double e = test_nmse(y0, y1, (size_t)(n * ne1));
					worst = fmax(worst, e);
					cr_expect_leq(e, 1e-10, "%s %s %lldx%lld n=%d: nmse %g",
						      lm_backend_cpu_kernels(&fast),
						      lm_dtype_name(type), (long long)ne1,
						      (long long)ne0, n, e);
					free(x);
					free(y0);
					free(y1);
				}
				tw_fini(&w);
			}
			cr_log_info("matmul %s vs generic, %s: worst nmse %.3g", test_ksets[k],
				    lm_dtype_name(type), worst);
		}
		lm_backend_fini(&fast);
	}
	lm_backend_fini(&ref);
}

/* An "identity" weight of each type: row j holds a single quant of value 1 at element j (scale
 * 1, every other element 0), so y[j] is the converted activation x'[j] times its block scale,
 * one rounding. Every kernel set must produce exactly the generic results, which checks that
 * their activation conversions are bit-identical to the reference quantizers, ties included. */
static void identity_weight(struct tw *t, enum lm_dtype type, int64_t n)
{
	uint64_t rb = 0;
	cr_assert_eq(lm_dtype_row_bytes(type, (uint64_t)n, &rb), 0);
	uint8_t *buf = calloc((size_t)n, rb);
	cr_assert_not_null(buf);
	for (int64_t j = 0; j < n; j++) {
		uint8_t *row = buf + j * rb;
		const int64_t e = j % 256, sb = e / 32, l = j % 32;
		switch (type) {
		case LM_F32:
			((float *)row)[j] = 1.0f;
			break;
		case LM_F16:
			((uint16_t *)row)[j] = 0x3c00;
			break;
		case LM_BF16:
			((uint16_t *)row)[j] = 0x3f80;
			break;
		case LM_Q8_0: {
			block_q8_0 *b = (block_q8_0 *)row;
			for (int64_t k = 0; k < n / 32; k++)
				b[k].d = 0x3c00;
			b[j / 32].qs[l] = 1;
			break;
		}
		case LM_Q4_0: {
			block_q4_0 *b = (block_q4_0 *)row;
			for (int64_t k = 0; k < n / 32; k++) {
				b[k].d = 0x3c00;
				memset(b[k].qs, 0x88, sizeof b[k].qs); /* every nibble 8: value 0 */
			}
			if (l < 16)
				b[j / 32].qs[l] = 0x89;
			else
				b[j / 32].qs[l - 16] = 0x98;
			break;
		}
		case LM_MXFP4: {
			/* e = 128: the doubled values' scale is 1, so code 1 (0.5 doubled) is 1. */
			block_mxfp4 *b = (block_mxfp4 *)row;
			for (int64_t k = 0; k < n / 32; k++)
				b[k].e = 128;
			if (l < 16)
				b[j / 32].qs[l] = 0x01;
			else
				b[j / 32].qs[l - 16] = 0x10;
			break;
		}
		case LM_Q4_K: {
			block_q4_K *b = (block_q4_K *)row;
			static const uint8_t sc1[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
			for (int64_t k = 0; k < n / 256; k++) {
				b[k].d = 0x3c00; /* dmin 0: every min 0 as well */
				memcpy(b[k].scales, sc1, 12);
			}
			b[j / 256].qs[32 * (sb / 2) + l] = (uint8_t)(sb % 2 ? 0x10 : 0x01);
			break;
		}
		case LM_Q6_K: {
			block_q6_K *b = (block_q6_K *)row;
			for (int64_t k = 0; k < n / 256; k++) {
				b[k].d = 0x3c00;
				memset(b[k].scales, 1, sizeof b[k].scales);
				memset(b[k].qh, 0xaa,
				       sizeof b[k].qh); /* high bits 2: q = 32, value 0 */
			}
			/* q = 33 at element e: the low nibble 1 in its ql half-byte. */
			const int64_t h = e / 128, g = (e % 128) / 32;
			b[j / 256].ql[64 * h + 32 * (g % 2) + l] = (uint8_t)(g < 2 ? 0x01 : 0x10);
			break;
		}
		default:
			cr_assert_fail("no identity for %s", lm_dtype_name(type));
		}
	}
	t->bytes = buf;
	t->w = (struct lm_weight){.type = type, .ne0 = n, .ne1 = n, .row_bytes = rb, .data = buf};
	t->n_bound = 0;
}

Test(kernels, activation_conversion_is_bit_exact_in_every_kernel_set)
{
	const int64_t n = 512;
	float *x = malloc(3 * n * sizeof(float));
	float *y0 = malloc(3 * n * sizeof(float));
	float *y1 = malloc(3 * n * sizeof(float));
	struct test_rng r = {16};
	/* Token 0: every 32-block starts with -127 or 127 (so Q8_0's d is 1 and Q8_K's iscale
	 * is 1) and carries halves (k + 0.5), exact ties for both rounding rules. Token 1:
	 * gaussian. Token 2: a huge range and sub-blocks of zeros. */
	for (int64_t i = 0; i < n; i++) {
		if (i % 32 == 0)
			x[i] = (i / 32) % 2 ? 127.0f : -127.0f;
		else
			x[i] = (float)((int)(test_rng_next(&r) % 250) - 125) + 0.5f;
		x[n + i] = test_rng_gauss(&r);
		x[2 * n + i] =
			(i / 16) % 3 == 1 ? 0.0f : test_rng_gauss(&r) * ((i % 7) ? 1e-3f : 1e3f);
	}
	struct lm_backend ref;
	be_init(&ref, 1, 1);
	for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
		struct tw w;
		identity_weight(&w, mm_types[ti], n);
		cr_assert_eq(ref.iface->matmul(ref.ctx, y0, bw(&ref, &w), x, 3), 0);
		/* The generic result is what the reference conversion says: spot-check one
		 * value by hand (token 0, element 1 is k + 0.5 with d = 1). */
		if (mm_types[ti] == LM_Q8_0)
			cr_expect_eq(y0[1], roundf(x[1]));
		if (mm_types[ti] == LM_Q4_K)
			cr_expect_eq(y0[1], rintf(x[1]));
		for (int k = 1; k < TEST_N_KSETS; k++) {
			struct lm_backend b;
			if (!kset_init(&b, 1, k))
				continue;
			cr_assert_eq(b.iface->matmul(b.ctx, y1, bw(&b, &w), x, 3), 0);
			for (int64_t i = 0; i < 3 * n; i++) {
				/* Q6_K's SIMD kernels take the +32 offset back through block sums
				 * in separate int32 lanes (as GGUF's do), so their float sums
				 * round differently: allow 1e-3 of the token's largest value, an
				 * eighth of the smallest quant step (max / 127). */
				double tol = 0;
				if (mm_types[ti] == LM_Q6_K)
					for (int64_t j = 0; j < n; j++)
						tol = fmax(tol, 1e-3 * fabs(y0[(i / n) * n + j]));
				cr_assert(fabs(y1[i] - y0[i]) <= tol,
					  "%s %s token %lld element %lld: %.9g vs %.9g",
					  test_ksets[k], lm_dtype_name(mm_types[ti]),
					  (long long)(i / n), (long long)(i % n), y1[i], y0[i]);
			}
			tw_drop(&w, &b);
			lm_backend_fini(&b);
		}
		tw_fini(&w);
	}
	lm_backend_fini(&ref);
	free(x);
	free(y0);
	free(y1);
}

Test(kernels, matmul_rejects_unsupported_types)
{
	struct lm_backend b;
	be_init(&b, 1, 0);
	uint8_t buf[176] = {0};
	float x[256] = {0}, y[1];
	struct lm_weight w = {.type = LM_Q5_K, .ne0 = 256, .ne1 = 1, .row_bytes = 176, .data = buf};
	cr_expect_eq(b.iface->matmul(b.ctx, y, &w, x, 1), LM_EUNSUPPORTED);
	w.type = LM_Q8_K;
	w.row_bytes = 292;
	cr_expect_eq(b.iface->matmul(b.ctx, y, &w, x, 1), LM_EUNSUPPORTED);
	lm_backend_fini(&b);
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise ops and get_rows                                                              */

Test(kernels, rmsnorm_matches_double_reference)
{
	struct test_rng r = {21};
	const int dims[] = {1, 7, 64, 263, 2048};
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
			const int dim = dims[di], n = 3;
			float *x = malloc((size_t)(n * dim) * sizeof(float));
			float *w = malloc((size_t)dim * sizeof(float));
			float *y = malloc((size_t)(n * dim) * sizeof(float));
			test_fill_gauss(&r, x, (size_t)(n * dim), 2.0f);
			test_fill_gauss(&r, w, (size_t)dim, 1.0f);
			cr_assert_eq(b.iface->rmsnorm(b.ctx, y, x, w, dim, n, 1e-5f), 0);
			double maxrel = 0;
			for (int t = 0; t < n; t++) {
				double ss = 0;
				for (int i = 0; i < dim; i++)
					ss += (double)x[t * dim + i] * x[t * dim + i];
				const double s = 1.0 / sqrt(ss / dim + 1e-5);
				for (int i = 0; i < dim; i++) {
					const double want = x[t * dim + i] * s * w[i];
					maxrel = fmax(maxrel, fabs(y[t * dim + i] - want) /
								      (fabs(want) + 1e-6));
				}
			}
			cr_log_info("rmsnorm %s dim %d: max relative error %.3g",
				    lm_backend_cpu_kernels(&b), dim, maxrel);
			cr_expect_leq(maxrel, 2e-6, "%s dim %d: max relative error %g",
				      lm_backend_cpu_kernels(&b), dim, maxrel);
			/* In place gives the same floats. */
			cr_assert_eq(b.iface->rmsnorm(b.ctx, x, x, w, dim, n, 1e-5f), 0);
			cr_expect_eq(memcmp(x, y, (size_t)(n * dim) * sizeof(float)), 0);
			free(x);
			free(w);
			free(y);
		}
		lm_backend_fini(&b);
	}
}

Test(kernels, silu_mul_and_add_match_reference)
{
	struct test_rng r = {22};
	const size_t lens[] = {1, 5, 8, 31, 1000};
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
			const size_t len = lens[li];
			float *g = malloc(len * sizeof(float));
			float *u = malloc(len * sizeof(float));
			float *y = malloc(len * sizeof(float));
			test_fill_gauss(&r, g, len, 4.0f);
			test_fill_gauss(&r, u, len, 1.0f);
			g[0] = -90.0f; /* exp overflow side: silu -> -0 */
			if (len > 1)
				g[1] = 90.0f;
			cr_assert_eq(b.iface->silu_mul(b.ctx, y, g, u, len), 0);
			double maxrel = 0;
			for (size_t i = 0; i < len; i++) {
				const double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
				maxrel = fmax(maxrel, fabs(y[i] - want) / (fabs(want) + 1e-30));
			}
			cr_log_info("silu_mul %s len %zu: max relative error %.3g",
				    lm_backend_cpu_kernels(&b), len, maxrel);
			cr_expect_leq(maxrel, 4e-6, "%s silu_mul len %zu: %g",
				      lm_backend_cpu_kernels(&b), len, maxrel);
			/* y may equal gate. */
			cr_assert_eq(b.iface->silu_mul(b.ctx, g, g, u, len), 0);
			cr_expect_eq(memcmp(g, y, len * sizeof(float)), 0);

			float *a = malloc(len * sizeof(float));
			test_fill_gauss(&r, a, len, 1.0f);
			memcpy(y, u, len * sizeof(float));
			cr_assert_eq(b.iface->add(b.ctx, y, a, len), 0);
			for (size_t i = 0; i < len; i++)
				cr_assert_eq(y[i], u[i] + a[i]);
			free(a);
			free(g);
			free(u);
			free(y);
		}
		lm_backend_fini(&b);
	}
}

/* A batch's silu_mul covers all its tokens in one buffer: an element must get the same value
 * wherever it sits (in a vector or in a tail), or chunked prefill would not reproduce one pass. */
Test(kernels, silu_mul_does_not_depend_on_the_split)
{
	struct test_rng r = {24};
	float g[1000], u[1000], whole[1000], parts[1000];
	test_fill_gauss(&r, g, 1000, 4.0f);
	test_fill_gauss(&r, u, 1000, 1.0f);
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		cr_assert_eq(b.iface->silu_mul(b.ctx, whole, g, u, 1000), 0);
		for (size_t at = 0, step = 1; at < 1000; at += step, step = step % 13 + 3) {
			const size_t len = at + step <= 1000 ? step : 1000 - at;
			cr_assert_eq(b.iface->silu_mul(b.ctx, parts + at, g + at, u + at, len), 0);
		}
		cr_expect_eq(memcmp(whole, parts, sizeof whole), 0, "%s", test_ksets[k]);
		lm_backend_fini(&b);
	}
}

Test(kernels, get_rows_dequantizes_every_type)
{
	struct test_rng r = {23};
	struct lm_backend b;
	be_init(&b, 1, 0);
	for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
		const enum lm_dtype type = mm_types[ti];
		const int64_t ne0 = 256, ne1 = 10;
		struct tw w;
		tw_init(&w, type, ne0, ne1, &r);
		const int32_t ids[] = {9, 0, 3, 3};
		float y[4 * 256], want[256];
		cr_assert_eq(b.iface->get_rows(b.ctx, y, bw(&b, &w), ids, 4), 0);
		for (int i = 0; i < 4; i++) {
			/* Hand-decoded for Q8_0, the library's dequantizer for the rest (tested
			 * in test_quant.c and against ggml). */
			const uint8_t *row = (const uint8_t *)w.bytes + ids[i] * w.w.row_bytes;
			if (type == LM_Q8_0) {
				const block_q8_0 *blk = (const block_q8_0 *)row;
				for (int j = 0; j < 256; j++)
					want[j] = blk[j / 32].qs[j % 32] *
						  lm_f16_to_f32(blk[j / 32].d);
			} else {
				lm_dequantize_row(type, row, want, 256);
			}
			cr_expect_eq(memcmp(y + i * 256, want, sizeof want), 0, "%s row %d",
				     lm_dtype_name(type), ids[i]);
		}
		tw_fini(&w);
	}
	lm_backend_fini(&b);
}

Test(kernels, memory_is_zeroed_aligned_and_copies)
{
	struct lm_backend b;
	be_init(&b, 1, 0);
	uint8_t *p = b.iface->malloc(b.ctx, 1000);
	cr_assert_not_null(p);
	cr_expect_eq((uintptr_t)p % 64, 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(p[i], 0);
	uint8_t src[1000], back[1000];
	for (int i = 0; i < 1000; i++)
		src[i] = (uint8_t)(i * 7);
	cr_assert_eq(b.iface->upload(b.ctx, p, src, 1000), 0);
	cr_assert_eq(b.iface->download(b.ctx, back, p, 1000), 0);
	cr_expect_eq(memcmp(src, back, 1000), 0);
	b.iface->mfree(b.ctx, p);
	b.iface->mfree(b.ctx, NULL);
	lm_backend_fini(&b);
	lm_backend_fini(&b); /* harmless twice */
}

/* Every kernel set is batch invariant: each token of a batch of N, for N in {1, 2, 3, 7, 16,
 * 64} (the few-token kernels and the GEMMs, whole and partial tiles), equals that token computed
 * alone, bit for bit, for every weight type. This is what lets the mesh batch sequences and
 * re-prefill them after a fault without changing a greedy token, whichever kernels a worker's
 * CPU picks (the default is the best set the CPU has). */
Test(kernels, every_set_is_batch_invariant)
{
	static const int ns[] = {1, 2, 3, 7, 16, 64};
	struct test_rng r = {23};
	const int64_t ne0 = 512, ne1 = 96, nmax = 64;
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		for (size_t ti = 0; ti < N_MM_TYPES; ti++) {
			const enum lm_dtype type = mm_types[ti];
			struct tw w;
			tw_init(&w, type, ne0, ne1, &r);
			float *x = malloc((size_t)(nmax * ne0) * sizeof(float));
			float *yb = malloc((size_t)(nmax * ne1) * sizeof(float));
			float *y1 = malloc((size_t)(nmax * ne1) * sizeof(float));
			cr_assert(x && yb && y1);
			test_fill_gauss(&r, x, (size_t)(nmax * ne0), 1.0f);
			for (int64_t t = 0; t < nmax; t++)
				cr_assert_eq(b.iface->matmul(b.ctx, y1 + t * ne1, bw(&b, &w),
							     x + t * ne0, 1),
					     0);
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
				const int n = ns[ni];
				cr_assert_eq(b.iface->matmul(b.ctx, yb, bw(&b, &w), x, n), 0);
				for (int64_t t = 0; t < n; t++)
					cr_assert_eq(
						memcmp(y1 + t * ne1, yb + t * ne1,
						       (size_t)ne1 * sizeof(float)),
						0,
						"%s, kernels %s: token %lld alone differs from "
						"its row of a batch of %d",
						lm_dtype_name(type), test_ksets[k], (long long)t,
						n);
			}
			free(x);
			free(yb);
			free(y1);
			tw_fini(&w);
		}
		lm_backend_fini(&b);
	}
}

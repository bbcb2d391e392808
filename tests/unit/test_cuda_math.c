/* test_cuda_math.c — the thread-free arithmetic of the CUDA kernels (kernels/cuda/cuda_math.h),
 * compiled as plain C, against the CPU reference.
 *
 * It runs on every machine, GPU or not: what it holds is the part of the kernels where a layout
 * mistake would hide (which nibble is which element, which scale and bsum go with it), the number
 * conversions and the activation quantizers' steps. The quantizers' reductions are emulated here
 * the way the kernels reduce (per lane, then across lanes with lmc_amax_pick), so a tie-break
 * that differed from the reference's scan would show. The kernels' indexing, reductions and
 * launches are checked on a GPU by tests/gpu/op_matrix.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/format/quant.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cuda/cuda_math.h"
#include "kernels_testutil.h"

TestSuite(cuda_math, .timeout = 60);

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

Test(cuda_math, f16_and_bf16_as_dtype_c)
{
	for (uint32_t h = 0; h < 65536; h++) {
		cr_assert_eq(bits(lmc_f16_to_f32(h)), bits(lm_f16_to_f32((uint16_t)h)), "f16 %#x",
			     h);
		cr_assert_eq(bits(lmc_bf16_to_f32(h)), bits(lm_bf16_to_f32((uint16_t)h)),
			     "bf16 %#x", h);
	}
	/* Every half's neighbourhood (rounding boundaries), then random bit patterns. */
	struct test_rng r = {41};
	for (uint32_t i = 0; i < 4000000; i++) {
		uint32_t u = i < 65536 * 16
				     ? (bits(lm_f16_to_f32((uint16_t)(i >> 4))) + (i & 15) - 8)
				     : (uint32_t)test_rng_next(&r);
		float f;
		memcpy(&f, &u, sizeof f);
		cr_assert_eq(lmc_f32_to_f16(f), lm_f32_to_f16(f), "f16 of %#x", u);
		cr_assert_eq(lmc_f32_to_bf16(f), lm_f32_to_bf16(f), "bf16 of %#x", u);
	}
}

/* Reference-quantized activations in the device layout (struct lmc_xrow). */
struct xact {
	int8_t qs[4096];
	float d[128];
	int32_t bsums[256];
	struct lmc_xrow row;
	uint8_t ref[8192]; /* the GGUF layout, for the CPU's dot product */
};

static void xact_make(struct xact *a, enum lm_dtype vdt, const float *x, int64_t n)
{
	cr_assert_eq(lm_quantize_row(vdt, x, a->ref, n), 0);
	if (vdt == LM_Q8_0) {
		const block_q8_0 *b = (const block_q8_0 *)a->ref;
		for (int64_t i = 0; i < n / QK8_0; i++) {
			a->d[i] = lm_f16_to_f32(b[i].d);
			memcpy(a->qs + i * QK8_0, b[i].qs, QK8_0);
		}
	} else {
		const block_q8_K *b = (const block_q8_K *)a->ref;
		for (int64_t i = 0; i < n / QK_K; i++) {
			a->d[i] = b[i].d;
			memcpy(a->qs + i * QK_K, b[i].qs, QK_K);
			for (int j = 0; j < 16; j++)
				a->bsums[i * 16 + j] = b[i].bsums[j];
		}
	}
	a->row = (struct lmc_xrow){.qs = a->qs, .d = a->d, .bsums = a->bsums};
}

/* The sum of a row's units, in unit order, as one thread of the kernels would sum them. */
static float unit_sum(enum lm_dtype t, const uint8_t *w, int64_t ne0, const struct lmc_xrow *x)
{
	float s = 0;
	switch (t) {
	case LM_Q8_0:
		for (int64_t u = 0; u < ne0 / 32 * LMC_UPB_Q8_0; u++) {
			struct lmc_w_q8_0 wu;
			lmc_load_q8_0(w, u, &wu);
			s += lmc_dot_q8_0(&wu, u, x);
		}
		break;
	case LM_Q4_0:
		for (int64_t u = 0; u < ne0 / 32 * LMC_UPB_Q4_0; u++) {
			struct lmc_w_q4_0 wu;
			lmc_load_q4_0(w, u, &wu);
			s += lmc_dot_q4_0(&wu, u, x);
		}
		break;
	case LM_MXFP4:
		for (int64_t u = 0; u < ne0 / 32 * LMC_UPB_MXFP4; u++) {
			struct lmc_w_mxfp4 wu;
			lmc_load_mxfp4(w, u, &wu);
			s += lmc_dot_mxfp4(&wu, u, x);
		}
		break;
	case LM_Q4_K:
		for (int64_t u = 0; u < ne0 / 256 * LMC_UPB_Q4_K; u++) {
			struct lmc_w_q4_K wu;
			lmc_load_q4_K(w, u, &wu);
			s += lmc_dot_q4_K(&wu, u, x);
		}
		break;
	case LM_Q6_K:
		for (int64_t u = 0; u < ne0 / 256 * LMC_UPB_Q6_K; u++) {
			struct lmc_w_q6_K wu;
			lmc_load_q6_K(w, u, &wu);
			s += lmc_dot_q6_K(&wu, u, x);
		}
		break;
	default:
		cr_assert_fail("type %d", t);
	}
	return s;
}

Test(cuda_math, unit_dots_equal_the_cpu_dot_products)
{
	static const struct {
		enum lm_dtype t, vdt;
		cpu_vec_dot_fn dot;
	} types[] = {
		{LM_Q8_0, LM_Q8_0, cpu_vec_dot_q8_0_generic},
		{LM_Q4_0, LM_Q8_0, cpu_vec_dot_q4_0_generic},
		{LM_MXFP4, LM_Q8_0, cpu_vec_dot_mxfp4_generic},
		{LM_Q4_K, LM_Q8_K, cpu_vec_dot_q4_K_generic},
		{LM_Q6_K, LM_Q8_K, cpu_vec_dot_q6_K_generic},
	};
	struct test_rng r = {42};
	static struct xact a;
	float x[4096], wf[4096];
	uint8_t w[4096 * 2];
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		for (int rep = 0; rep < 200; rep++) {
			const int64_t ne0 = 256 * (1 + rep % 8);
			test_fill_gauss(&r, x, (size_t)ne0, rep % 3 == 0 ? 4.0f : 1.0f);
			test_fill_gauss(&r, wf, (size_t)ne0, 0.05f);
			if (rep % 5 == 0) /* a block of zeros: d = 0 paths */
				memset(wf, 0, 256 * sizeof(float));
			cr_assert_eq(lm_quantize_row(types[ti].t, wf, w, ne0), 0);
			xact_make(&a, types[ti].vdt, x, ne0);
			const float ref = types[ti].dot(ne0, w, a.ref);
			const float got = unit_sum(types[ti].t, w, ne0, &a.row);
			/* Only the order of the f32 additions differs. */
			const double mag = fabs((double)ref) + 1e-3 * sqrt((double)ne0);
			cr_assert(fabs((double)got - ref) <= 2e-5 * mag,
				  "%s ne0 %lld: %.9g vs %.9g", lm_dtype_name(types[ti].t),
				  (long long)ne0, got, ref);
		}
	}
}

Test(cuda_math, dequantizers_as_quant_c)
{
	static const enum lm_dtype types[] = {LM_Q8_0, LM_Q4_0, LM_Q4_K, LM_Q6_K, LM_MXFP4};
	struct test_rng r = {43};
	float x[1024], ref[1024];
	uint8_t w[1024 * 2];
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		test_fill_gauss(&r, x, 1024, 0.3f);
		cr_assert_eq(lm_quantize_row(types[ti], x, w, 1024), 0);
		cr_assert_eq(lm_dequantize_row(types[ti], w, ref, 1024), 0);
		for (int64_t i = 0; i < 1024; i++) {
			float got = types[ti] == LM_Q8_0   ? lmc_deq_q8_0(w, i)
				    : types[ti] == LM_Q4_0 ? lmc_deq_q4_0(w, i)
				    : types[ti] == LM_Q4_K ? lmc_deq_q4_K(w, i)
				    : types[ti] == LM_Q6_K ? lmc_deq_q6_K(w, i)
							   : lmc_deq_mxfp4(w, i);
			cr_assert_eq(bits(got), bits(ref[i]), "%s element %lld: %g vs %g",
				     lm_dtype_name(types[ti]), (long long)i, got, ref[i]);
		}
	}
}

/* The Q8_K quantizer as the kernel runs it: 32 lanes of 8 consecutive values, each lane's
 * first largest magnitude, then a reduction across lanes in butterfly order. */
static void q8_K_as_kernel(const float *x, block_q8_K *y)
{
	float la[32], lv[32];
	int li[32];
	for (int l = 0; l < 32; l++) {
		la[l] = 0.0f;
		lv[l] = 0.0f;
		li[l] = 8 * l;
		for (int i = 0; i < 8; i++) {
			const int e = 8 * l + i;
			if (fabsf(x[e]) > la[l]) {
				la[l] = fabsf(x[e]);
				lv[l] = x[e];
				li[l] = e;
			}
		}
	}
	for (int off = 16; off > 0; off >>= 1) {
		float na[32], nv[32];
		int ni[32];
		for (int l = 0; l < 32; l++) {
			const int o = l ^ off;
			const bool take = lmc_amax_pick(la[l], li[l], la[o], li[o]);
			na[l] = take ? la[o] : la[l];
			nv[l] = take ? lv[o] : lv[l];
			ni[l] = take ? li[o] : li[l];
		}
		memcpy(la, na, sizeof la);
		memcpy(lv, nv, sizeof lv);
		memcpy(li, ni, sizeof li);
	}
	memset(y, 0, sizeof *y);
	if (la[0] == 0.0f)
		return;
	const float iscale = -127.f / lv[0];
	for (int e = 0; e < 256; e++)
		y->qs[e] = lmc_q8_K_q(x[e], iscale);
	for (int j = 0; j < 16; j++) {
		int s = 0;
		for (int i = 0; i < 16; i++)
			s += y->qs[16 * j + i];
		y->bsums[j] = (int16_t)s;
	}
	y->d = 1 / iscale;
}

Test(cuda_math, activation_quantizers_as_the_reference)
{
	struct test_rng r = {44};
	float x[256];
	for (int rep = 0; rep < 3000; rep++) {
		test_fill_gauss(&r, x, 256, rep % 2 ? 1.0f : 50.0f);
		if (rep % 7 == 0) { /* ties of magnitude, of either sign, first one wins */
			x[rep % 256] = 9.0f;
			x[(rep * 7 + 3) % 256] = -9.0f;
		}
		if (rep % 11 == 0)
			memset(x, 0, sizeof x);
		block_q8_K ref, got;
		lm_quantize_q8_K_ref(x, &ref, 256);
		q8_K_as_kernel(x, &got);
		cr_assert_eq(bits(got.d), bits(ref.d), "rep %d: d %g vs %g", rep, got.d, ref.d);
		cr_assert_eq(memcmp(got.qs, ref.qs, sizeof ref.qs), 0, "rep %d: qs", rep);
		cr_assert_eq(memcmp(got.bsums, ref.bsums, sizeof ref.bsums), 0, "rep %d: bsums",
			     rep);

		block_q8_0 r0[8];
		lm_quantize_q8_0_ref(x, r0, 256);
		for (int b = 0; b < 8; b++) {
			float amax = 0.0f; /* max is exact: any order */
			for (int j = 0; j < 32; j++)
				amax = fmaxf(amax, fabsf(x[32 * b + j]));
			const float d = lmc_q8_0_d(amax), id = lmc_q8_0_id(d);
			cr_assert_eq(lmc_f32_to_f16(d), r0[b].d);
			for (int j = 0; j < 32; j++)
				cr_assert_eq(lmc_q8_0_q(x[32 * b + j], id), r0[b].qs[j]);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* KV cache types (attention.cu's kvt specialisations)                                        */

Test(cuda_math, fp8_as_dtype_c)
{
	for (uint32_t c = 0; c < 256; c++)
		cr_assert_eq(bits(lmc_fp8_to_f32(c)), bits(lm_fp8_to_f32((uint8_t)c)), "fp8 %#x",
			     c);
	/* Every code's neighbourhood (the rounding boundaries lie between codes), then random bit
	 * patterns, NaNs and infinities among them. */
	struct test_rng r = {45};
	for (uint32_t i = 0; i < 2000000; i++) {
		uint32_t u;
		if (i < 256 * 4096) {
			const float v = lm_fp8_to_f32((uint8_t)(i >> 12));
			u = isnan(v) ? (uint32_t)test_rng_next(&r) : bits(v) + (i & 4095) - 2048;
		} else {
			u = (uint32_t)test_rng_next(&r);
		}
		float f;
		memcpy(&f, &u, sizeof f);
		cr_assert_eq(lmc_f32_to_fp8(f), lm_f32_to_fp8(f), "fp8 of %#x", u);
	}
}

/* A row of KV values with what the quantizers' scans are sensitive to: ties of magnitude of
 * either sign, signed zeros, constant blocks, zero blocks, wide ranges. */
static void kv_row(struct test_rng *r, float *x, int n, int rep)
{
	test_fill_gauss(r, x, (size_t)n, rep % 3 == 0 ? 30.0f : 1.0f);
	for (int b = 0; b < n / 32; b++) {
		float *blk = x + 32 * b;
		switch ((rep + b) % 9) {
		case 0: /* ties of magnitude: the first one sets the sign of Q4_0's d */
			blk[(rep + 3) % 32] = 5.0f;
			blk[(rep + 17) % 32] = -5.0f;
			break;
		case 1: /* signed zeros only: Q5_1's min and max are the first of equals */
			for (int j = 0; j < 32; j++)
				blk[j] = (j + rep) % 3 == 0 ? -0.0f : 0.0f;
			break;
		case 2: /* a constant block: d = 0 */
			for (int j = 0; j < 32; j++)
				blk[j] = 0.75f;
			break;
		case 3: /* equal minima and maxima of opposite zeros among values */
			blk[rep % 32] = -0.0f;
			blk[(rep + 1) % 32] = 0.0f;
			break;
		default:
			break;
		}
	}
}

Test(cuda_math, kv_stores_write_the_reference_bytes)
{
	struct test_rng r = {46};
	enum { N = 1024 };
	float x[N];
	uint8_t ref[N * 4], got[N * 4];
	for (int rep = 0; rep < 400; rep++) {
		kv_row(&r, x, N, rep);
		lm_quantize_q4_0_ref(x, ref, N);
		for (int b = 0; b < N / 32; b++)
			lmc_store_q4_0(x + 32 * b, got + (size_t)b * LMC_Q4_0_BYTES);
		cr_assert_eq(memcmp(got, ref, N / 32 * sizeof(block_q4_0)), 0, "q4_0 rep %d", rep);
		lm_quantize_q5_1_ref(x, ref, N);
		for (int b = 0; b < N / 32; b++)
			lmc_store_q5_1(x + 32 * b, got + (size_t)b * LMC_Q5_1_BYTES);
		cr_assert_eq(memcmp(got, ref, N / 32 * sizeof(block_q5_1)), 0, "q5_1 rep %d", rep);
		lm_quantize_bf16_ref(x, ref, N);
		lm_quantize_fp8_ref(x, ref + 2 * N, N);
		for (int i = 0; i < N; i++) {
			cr_assert_eq(lmc_f32_to_bf16(x[i]), ((const uint16_t *)ref)[i], "bf16 %d",
				     i);
			cr_assert_eq(lmc_f32_to_fp8(x[i]), ref[2 * N + i], "fp8 %d", i);
		}
	}
}

/* q staged as the scores kernel stages it (attention.cu's stage_q8 and the float stages), from
 * the per-element functions the kernel calls, block max and sum taken in any order (both are
 * exact). */
struct kv_q {
	float f[256];
	int8_t qq[256];
	float qd[16]; /* [8] scales, then [8] Q8_1 sums */
};

static void kv_stage(enum lm_dtype t, const float *q, int hd, struct kv_q *s)
{
	for (int i = 0; i < hd; i++)
		s->f[i] = t == LM_BF16 ? lmc_round_bf16(q[i]) : q[i];
	for (int b = 0; b < hd / 32; b++) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(q[32 * b + j]));
		const float d = lmc_q8_0_d(amax);
		int sum = 0;
		for (int j = 0; j < 32; j++) {
			s->qq[32 * b + j] = lmc_q8_0_q(q[32 * b + j], lmc_q8_0_id(d));
			sum += s->qq[32 * b + j];
		}
		s->qd[b] = lmc_round_f16(d);
		s->qd[hd / 32 + b] = lmc_q8_1_s(sum, d);
	}
}

static float kv_score(enum lm_dtype t, const uint8_t *k, const struct kv_q *s, int hd)
{
	switch (t) {
	case LM_BF16:
		return lmc_kv_dot_bf16(k, s->f, hd);
	case LM_FP8_E4M3:
		return lmc_kv_dot_fp8(k, s->f, hd);
	case LM_Q4_0:
		return lmc_kv_dot_q4_0(k, s->qq, s->qd, hd);
	default:
		return lmc_kv_dot_q5_1(k, s->qq, s->qd, s->qd + hd / 32, hd);
	}
}

static float kv_acc(enum lm_dtype t, float a, float p, const uint8_t *v, int i)
{
	switch (t) {
	case LM_BF16:
		return lmc_kv_acc_bf16(a, p, v, i);
	case LM_FP8_E4M3:
		return lmc_kv_acc_fp8(a, p, v, i);
	case LM_Q4_0:
		return lmc_kv_acc_q4_0(a, p, v, i);
	default:
		return lmc_kv_acc_q5_1(a, p, v, i);
	}
}

/* The Q8_1 staging's sums are the reference quantizer's. */
Test(cuda_math, q8_1_stage_as_the_reference)
{
	struct test_rng r = {47};
	float q[256];
	block_q8_1 ref[8];
	struct kv_q s;
	for (int rep = 0; rep < 2000; rep++) {
		kv_row(&r, q, 256, rep);
		lm_quantize_q8_1_ref(q, ref, 256);
		kv_stage(LM_Q5_1, q, 256, &s);
		for (int b = 0; b < 8; b++) {
			cr_assert_eq(bits(s.qd[b]), bits(lm_f16_to_f32(ref[b].d)), "rep %d d", rep);
			cr_assert_eq(bits(s.qd[8 + b]), bits(lm_f16_to_f32(ref[b].s)), "rep %d s",
				     rep);
			cr_assert_eq(memcmp(s.qq + 32 * b, ref[b].qs, 32), 0, "rep %d qs", rep);
		}
	}
}

/* Scores and values of the new cache types equal the CPU's scalar attention kernels bit for
 * bit: each K row's score with q, and the V rows accumulated in position order into f32. */
Test(cuda_math, kv_reads_equal_the_cpu_attention_kernels)
{
	static const enum lm_dtype types[] = {LM_BF16, LM_FP8_E4M3, LM_Q4_0, LM_Q5_1};
	struct cpu_kernels k = cpu_kernels_generic;
	cpu_attn_generic_fill(&k);
	struct test_rng r = {48};
	enum { ROWS = 24, HDMAX = 256 };
	static float x[ROWS * HDMAX], p[ROWS], ref_out[HDMAX], q[HDMAX];
	static uint8_t cache[ROWS * HDMAX * 4], qconv[HDMAX * 4];
	float ref_scores[ROWS];
	struct kv_q s;
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		const enum lm_dtype t = types[ti];
		const struct cpu_attn_ops *ops = &k.attn[t];
		for (int rep = 0; rep < 60; rep++) {
			const int hd = 64 << (rep % 3);
			uint64_t rb;
			cr_assert_eq(lm_dtype_row_bytes(t, (uint64_t)hd, &rb), 0);
			for (int j = 0; j < ROWS; j++) {
				kv_row(&r, x + j * hd, hd, rep + j);
				ops->store(x + j * hd, cache + (size_t)j * rb, hd);
			}
			test_fill_gauss(&r, q, (size_t)hd, rep % 2 ? 3.0f : 0.5f);
			const uint8_t *qx = (const uint8_t *)q;
			if (ops->q_conv != NULL) {
				ops->q_conv(q, qconv, hd);
				qx = qconv;
			}
			ops->scores(hd, cache, rb, ROWS, qx, 0, 1, ref_scores, 0);
			kv_stage(t, q, hd, &s);
			for (int j = 0; j < ROWS; j++) {
				const float got = kv_score(t, cache + (size_t)j * rb, &s, hd);
				cr_assert_eq(bits(got), bits(ref_scores[j]),
					     "%s hd %d row %d: %.9g vs %.9g", lm_dtype_name(t), hd,
					     j, got, ref_scores[j]);
			}
			float psum = 0.0f;
			for (int j = 0; j < ROWS; j++)
				psum += (p[j] = fabsf(test_rng_gauss(&r)) + 1e-3f);
			for (int j = 0; j < ROWS; j++)
				p[j] /= psum;
			memset(ref_out, 0, sizeof ref_out);
			ops->values(hd, cache, rb, ROWS, p, 0, 1, ref_out);
			for (int i = 0; i < hd; i++) {
				float a = 0.0f;
				for (int j = 0; j < ROWS; j++)
					a = kv_acc(t, a, p[j], cache + (size_t)j * rb, i);
				cr_assert_eq(bits(a), bits(ref_out[i]),
					     "%s hd %d element %d: %.9g vs %.9g", lm_dtype_name(t),
					     hd, i, a, ref_out[i]);
			}
		}
	}
}

/* The elements the V reads take are quant.c's dequantized values (p = 1, nothing accumulated). */
Test(cuda_math, kv_elements_as_quant_c)
{
	static const enum lm_dtype types[] = {LM_BF16, LM_FP8_E4M3, LM_Q4_0, LM_Q5_1};
	struct test_rng r = {49};
	float x[512], ref[512];
	uint8_t row[512 * 2];
	for (size_t ti = 0; ti < 4; ti++)
		for (int rep = 0; rep < 50; rep++) {
			kv_row(&r, x, 512, rep);
			cr_assert_eq(lm_quantize_row(types[ti], x, row, 512), 0);
			cr_assert_eq(lm_dequantize_row(types[ti], row, ref, 512), 0);
			for (int i = 0; i < 512; i++) {
				const float got = kv_acc(types[ti], 0.0f, 1.0f, row, i);
				cr_assert_eq(bits(got),
					     bits(ref[i]) & (ref[i] == 0.0f ? 0x7fffffffu : ~0u),
					     "%s element %d: %g vs %g", lm_dtype_name(types[ti]), i,
					     got, ref[i]);
			}
		}
}

/* ------------------------------------------------------------------------------------------ */
/* gpt-oss's steps: the clamped SwiGLU and YaRN's rope (the host's expf, cosf and sinf here: the
 * device's differ by their last bits, which the op matrix bounds on a GPU)                    */

Test(cuda_math, swiglu_oai_as_the_cpu)
{
	struct test_rng r = {50};
	enum { N = 4096 };
	static float g[N], u[N], ref[N];
	for (int rep = 0; rep < 20; rep++) {
		test_fill_gauss(&r, g, N, rep % 2 ? 10.0f : 2.0f); /* past the limit of 7 too */
		test_fill_gauss(&r, u, N, rep % 2 ? 10.0f : 2.0f);
		cpu_swiglu_oai_generic(ref, g, u, N, 1.702f, 7.0f);
		for (int i = 0; i < N; i++) {
			const float got = lmc_swiglu_oai(g[i], u[i], 1.702f, 7.0f);
			cr_assert_eq(bits(got), bits(ref[i]), "g %g u %g: %.9g vs %.9g", g[i], u[i],
				     got, ref[i]);
		}
	}
}

/* rope.cu's loop over lmc_rope_cs, on the host, against cpu_rope: plain, with frequency
 * factors, and YaRN (gpt-oss's parameters). */
Test(cuda_math, rope_angles_as_the_cpu)
{
	enum { HD = 64, HEADS = 3, T = 40 };
	static float ref[T * HEADS * HD], got[T * HEADS * HD];
	float ff[HD / 2];
	struct lm_tok_loc loc[T];
	struct test_rng r = {51};
	for (int i = 0; i < HD / 2; i++)
		ff[i] = 1.0f + (float)i / 7.0f;
	for (int t = 0; t < T; t++)
		loc[t] = (struct lm_tok_loc){.slot = 0, .pos = t * 997 % 131072};
	for (int c = 0; c < 6; c++) {
		struct lm_rope_params rp = {.mode = c % 2 ? LM_ROPE_NEOX : LM_ROPE_NORM,
					    .n_rot = HD,
					    .freq_base = c < 4 ? 150000.0f : 10000.0f,
					    .freq_scale = c < 4 ? 1.0f / 32.0f : 1.0f,
					    .freq_factors = c >= 4 ? ff : NULL};
		if (c < 4) { /* YaRN as gpt-oss sets it: factor 32, beta_fast 32, beta_slow 1 */
			rp.ext_factor = c < 2 ? 1.0f : 0.5f;
			rp.mscale = 1.0f + 0.1f * logf(32.0f);
			rp.corr[0] = 8.0f;
			rp.corr[1] = 17.5f;
		}
		test_fill_gauss(&r, ref, T * HEADS * HD, 1.0f);
		memcpy(got, ref, sizeof got);
		cpu_rope(ref, HEADS, HD, loc, T, &rp);
		const float theta_scale = powf(rp.freq_base, -2.0f / (float)rp.n_rot);
		const int half = HD / 2;
		for (int t = 0; t < T; t++)
			for (int i = 0; i < half; i++) {
				float theta = (float)loc[t].pos, cs, sn;
				for (int k = 0; k < i; k++)
					theta *= theta_scale;
				lmc_rope_cs(theta, i,
					    rp.freq_factors != NULL ? rp.freq_factors[i] : 1.0f,
					    rp.freq_scale, rp.ext_factor, rp.mscale, rp.corr[0],
					    rp.corr[1], &cs, &sn);
				const int i0 = rp.mode == LM_ROPE_NEOX ? i : 2 * i;
				const int i1 = rp.mode == LM_ROPE_NEOX ? i + half : 2 * i + 1;
				for (int h = 0; h < HEADS; h++) {
					float *v = got + ((size_t)t * HEADS + (size_t)h) * HD;
					const float x0 = v[i0], x1 = v[i1];
					v[i0] = x0 * cs - x1 * sn;
					v[i1] = x0 * sn + x1 * cs;
				}
			}
		cr_assert_eq(memcmp(got, ref, sizeof got), 0, "case %d", c);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The matmul kernels' sum order: the GEMV's and the tensor-core GEMM's (matmul.cu)           */

/* One warp's butterfly as lmc_warp_sum runs it: lane l adds lane l ^ o's value. Lane 0's. */
static float butterfly(const float *v)
{
	float l[32];
	memcpy(l, v, sizeof l);
	for (int o = 16; o > 0; o >>= 1) {
		float nl[32];
		for (int i = 0; i < 32; i++)
			nl[i] = l[i] + l[i ^ o];
		memcpy(l, nl, sizeof l);
	}
	return l[0];
}

/* k_mmv's order over unit values val[units]: thread i sums units i, i + 128, ... from 0.0f, the
 * warps reduce by butterfly, the block adds its warps in order. */
static float gemv_order(const float *val, int64_t units)
{
	float acc[LMC_SUM_THREADS], part[LMC_SUM_WARPS];
	for (int i = 0; i < LMC_SUM_THREADS; i++) {
		acc[i] = 0.0f;
		for (int64_t u = i; u < units; u += LMC_SUM_THREADS)
			acc[i] += val[u];
	}
	for (int w = 0; w < LMC_SUM_WARPS; w++)
		part[w] = butterfly(acc + 32 * w);
	return lmc_sum_warps(part);
}

Test(cuda_math, tree_push_is_the_butterfly)
{
	struct test_rng r = {45};
	for (int rep = 0; rep < 2000; rep++) {
		float v[32], st[5] = {0}, got = 0.0f;
		test_fill_gauss(&r, v, 32, 1.0f);
		for (int i = 0; i < 32; i++) /* magnitudes far apart: any other order rounds */
			v[i] *= ldexpf(1.0f, (int)(test_rng_next(&r) % 48) - 24);
		for (int k = 0; k < 32; k++)
			got = lmc_tree_push(st, k, v[lmc_bitrev5(k)]);
		const float want = butterfly(v);
		cr_assert_eq(bits(got), bits(want), "rep %d: %.9g vs %.9g", rep, got, want);
	}
	for (int k = 0; k < 32; k++)
		cr_assert_eq(lmc_bitrev5(lmc_bitrev5(k)), k);
	/* The C fragment's rows are the A fragment's: one weight scale per A register. */
	for (int lane = 0; lane < 32; lane++)
		for (int e = 0; e < 4; e++)
			cr_assert_eq(lmc_mma_c_row(lane, e), lmc_mma_a_row(lane, e >> 1));
}

/* mma.sync.m16n8k16.row.col.s32.s8.s8.s32 as the PTX ISA lays out its fragments, written out
 * here independently of cuda_math.h's maps: lane 4g + q holds A[g][4q .. 4q + 3] (a0) and
 * A[g + 8][4q .. 4q + 3] (a1), bytes in k order from the lowest; B[4q .. 4q + 3][g] (b0); and
 * D[g][2q], D[g][2q + 1], D[g + 8][2q], D[g + 8][2q + 1] (d0 .. d3). */
static void mma_emulate(int a[32][2], const int b[32], int d[32][4])
{
	int A[16][16], B[16][8];
	for (int lane = 0; lane < 32; lane++) {
		const int g = lane / 4, q = lane % 4;
		for (int by = 0; by < 4; by++) {
			A[g][4 * q + by] = (int8_t)(uint8_t)((uint32_t)a[lane][0] >> (8 * by));
			A[g + 8][4 * q + by] = (int8_t)(uint8_t)((uint32_t)a[lane][1] >> (8 * by));
			B[4 * q + by][g] = (int8_t)(uint8_t)((uint32_t)b[lane] >> (8 * by));
		}
	}
	for (int lane = 0; lane < 32; lane++) {
		const int g = lane / 4, q = lane % 4;
		for (int e = 0; e < 4; e++) {
			const int row = g + 8 * (e / 2), col = 2 * q + e % 2;
			int s = 0;
			for (int k = 0; k < 16; k++)
				s += A[row][k] * B[k][col];
			d[lane][e] = s;
		}
	}
}

/* A Q8_0 / Q4_0 / Q4_K / Q6_K weight and a batch of activations (Q8_0, or Q8_K for the
 * K-quants) in the device layout (struct lmc_act's arrays). */
struct mmq_case {
	enum lm_dtype t;
	int64_t ne0, ne1;
	int n;
	size_t rb;
	int64_t units, nb, blck; /* units per row; activation blocks per token and their size */
	uint8_t *w;
	int8_t *xqs;
	float *xd;
	int32_t *bsums;
	uint8_t *xref; /* the activations' GGUF blocks, for the CPU's dot product */
	size_t xref_row;
};

/* The GEMM's operands of one type, as matmul.cu's mmq_* structs take them from cuda_math.h. */
static int mmq_nk(const struct mmq_case *c)
{
	return c->t == LM_Q6_K ? 4 : c->t == LM_Q4_K ? 2 : 1;
}

static int mmq_kw_w(const struct mmq_case *c, const uint8_t *row, int64_t u, int p, int j)
{
	if (c->t == LM_Q8_0)
		return lmc_kw_w_q8_0(row, u, j);
	if (c->t == LM_Q4_0)
		return lmc_kw_w_q4_0(row, u, j);
	if (c->t == LM_Q4_K)
		return lmc_kw_w_q4_K(row, u, p, j);
	return lmc_kw_part(p, j, lmc_kw_w_q6_K(row, u, j));
}

static int mmq_kw_x(const struct mmq_case *c, const int8_t *xq, int64_t u, int p, int j)
{
	if (c->t == LM_Q8_0)
		return lmc_kw_x_q8_0(xq, u, j);
	if (c->t == LM_Q4_0)
		return lmc_kw_x_q4_0(xq, u, j);
	if (c->t == LM_Q4_K)
		return lmc_kw_x_q4_K(xq, u, p, j);
	return lmc_kw_x_q6_K(xq, u, j);
}

static float mmq_unit(const struct mmq_case *c, const int *s, const uint8_t *row, int64_t u,
		      int tok)
{
	const float *xd = c->xd + (size_t)tok * (size_t)c->nb;
	if (c->t == LM_Q8_0)
		return lmc_unit_q8_0(s[0], lmc_wd_q8_0(row, u), xd[u >> 1]);
	if (c->t == LM_Q4_0)
		return lmc_unit_q4_0(s[0], lmc_wd_q4_0(row, u), xd[u >> 1]);
	if (c->t == LM_Q6_K) {
		struct lmc_q6_K_meta m6;
		lmc_meta_q6_K(row, u, &m6);
		int si = 0;
		for (int g = 0; g < 4; g++)
			si += m6.sc[g] * s[g];
		return lmc_unit_q6_K(si, m6.d, xd[u >> 4]);
	}
	struct lmc_q4_K_meta m;
	lmc_meta_q4_K(row, u, &m);
	const int k = (int)(u & 7);
	const int32_t *bs = c->bsums + (size_t)tok * (size_t)(c->ne0 / 16) + (u >> 3) * 16 +
			    4 * (k >> 1) + (k & 1);
	return lmc_unit_q4_K(s[0], s[1], &m, xd[u >> 3], bs);
}

/* The GEMV's value of unit u of a row for one token (lmc_load_* and lmc_dot_*). */
static float gemv_unit(const struct mmq_case *c, const uint8_t *row, int64_t u,
		       const struct lmc_xrow *x)
{
	if (c->t == LM_Q8_0) {
		struct lmc_w_q8_0 wu;
		lmc_load_q8_0(row, u, &wu);
		return lmc_dot_q8_0(&wu, u, x);
	}
	if (c->t == LM_Q4_0) {
		struct lmc_w_q4_0 wu;
		lmc_load_q4_0(row, u, &wu);
		return lmc_dot_q4_0(&wu, u, x);
	}
	if (c->t == LM_Q6_K) {
		struct lmc_w_q6_K wu;
		lmc_load_q6_K(row, u, &wu);
		return lmc_dot_q6_K(&wu, u, x);
	}
	struct lmc_w_q4_K wu;
	lmc_load_q4_K(row, u, &wu);
	return lmc_dot_q4_K(&wu, u, x);
}

static int mmq_clamp(int64_t v, int64_t hi)
{
	return (int)(v < hi ? v : hi - 1);
}

/* The unit's NK mmas for one warp: d[p][lane][e]. */
static void mmq_unit_mmas(const struct mmq_case *c, int64_t r0, int t0, int64_t u, int d[4][32][4])
{
	for (int p = 0; p < mmq_nk(c); p++) {
		int a[32][2], b[32];
		for (int lane = 0; lane < 32; lane++) {
			for (int i = 0; i < 2; i++) {
				const int row = mmq_clamp(r0 + lmc_mma_a_row(lane, i), c->ne1);
				a[lane][i] =
					mmq_kw_w(c, c->w + (size_t)row * c->rb, u, p, lane & 3);
			}
			const int tok = mmq_clamp(t0 + lmc_mma_b_token(lane), c->n);
			b[lane] =
				mmq_kw_x(c, c->xqs + (size_t)tok * (size_t)c->ne0, u, p, lane & 3);
		}
		mma_emulate(a, b, d[p]);
	}
}

/* One warp of k_mmq: rows r0 .. r0 + 15 by tokens t0 .. t0 + 7, lane by lane, in its order. */
static void mmq_warp(const struct mmq_case *c, int64_t r0, int t0, float *y)
{
	static float st[32][4][5], tot[32][4];
	memset(st, 0, sizeof st);
	memset(tot, 0, sizeof tot);
	for (int vw = 0; vw < LMC_SUM_WARPS; vw++) {
		for (int k = 0; k < 32; k++) {
			float acc[32][4] = {{0}};
			for (int64_t u = 32 * vw + lmc_bitrev5(k); u < c->units;
			     u += LMC_SUM_THREADS) {
				int d[4][32][4];
				mmq_unit_mmas(c, r0, t0, u, d);
				for (int lane = 0; lane < 32; lane++)
					for (int e = 0; e < 4; e++) {
						const int row = mmq_clamp(
							r0 + lmc_mma_c_row(lane, e), c->ne1);
						const int tok = mmq_clamp(
							t0 + lmc_mma_c_token(lane, e), c->n);
						const int s[4] = {d[0][lane][e], d[1][lane][e],
								  d[2][lane][e], d[3][lane][e]};
						acc[lane][e] += mmq_unit(
							c, s, c->w + (size_t)row * c->rb, u, tok);
					}
			}
			for (int lane = 0; lane < 32; lane++)
				for (int e = 0; e < 4; e++) {
					const float v = lmc_tree_push(st[lane][e], k, acc[lane][e]);
					if (k == 31)
						tot[lane][e] =
							lmc_sum_warps_step(tot[lane][e], vw, v);
				}
		}
	}
	for (int lane = 0; lane < 32; lane++)
		for (int e = 0; e < 4; e++) {
			const int64_t r = r0 + lmc_mma_c_row(lane, e);
			const int t = t0 + lmc_mma_c_token(lane, e);
			if (r < c->ne1 && t < c->n)
				y[(size_t)t * (size_t)c->ne1 + (size_t)r] = tot[lane][e];
		}
}

/* Token t's activations: quantized as the reference does, spread into the device layout. */
static void mmq_token(struct mmq_case *c, const float *f, int t)
{
	uint8_t *ref = c->xref + (size_t)t * c->xref_row;
	cr_assert_eq(lm_quantize_row(c->blck == QK_K ? LM_Q8_K : LM_Q8_0, f, ref, c->ne0), 0);
	for (int64_t i = 0; i < c->nb; i++) {
		int8_t *qs = c->xqs + (size_t)t * (size_t)c->ne0 + (size_t)(i * c->blck);
		float *d = c->xd + (size_t)t * (size_t)c->nb + (size_t)i;
		if (c->blck == QK_K) {
			const block_q8_K *b = (const block_q8_K *)ref + i;
			*d = b->d;
			memcpy(qs, b->qs, QK_K);
			for (int j = 0; j < 16; j++)
				c->bsums[(size_t)t * (size_t)(c->ne0 / 16) + (size_t)(i * 16 + j)] =
					b->bsums[j];
		} else {
			const block_q8_0 *b = (const block_q8_0 *)ref + i;
			*d = lm_f16_to_f32(b->d);
			memcpy(qs, b->qs, QK8_0);
		}
	}
}

static void mmq_case_make(struct mmq_case *c, struct test_rng *r)
{
	uint64_t rb = 0;
	cr_assert_eq(lm_dtype_row_bytes(c->t, (uint64_t)c->ne0, &rb), 0);
	c->rb = (size_t)rb;
	const bool kq = c->t == LM_Q4_K || c->t == LM_Q6_K;
	c->blck = kq ? QK_K : QK8_0;
	c->nb = c->ne0 / c->blck;
	c->units = c->nb * (c->t == LM_Q4_K   ? LMC_UPB_Q4_K
			    : c->t == LM_Q6_K ? LMC_UPB_Q6_K
					      : LMC_UPB_Q8_0);
	c->xref_row = (size_t)c->nb * (kq ? sizeof(block_q8_K) : sizeof(block_q8_0));
	c->w = malloc(c->rb * (size_t)c->ne1);
	c->xqs = malloc((size_t)c->ne0 * (size_t)c->n);
	c->xd = malloc((size_t)c->nb * (size_t)c->n * sizeof(float));
	c->bsums = malloc((size_t)(c->ne0 / 16) * (size_t)c->n * sizeof(int32_t));
	c->xref = malloc(c->xref_row * (size_t)c->n);
	float *f = malloc((size_t)c->ne0 * sizeof(float));
	cr_assert(c->w && c->xqs && c->xd && c->bsums && c->xref && f);
	for (int64_t row = 0; row < c->ne1; row++) {
		test_fill_gauss(r, f, (size_t)c->ne0, row % 3 == 0 ? 2.0f : 0.05f);
		if (row == 1) /* a block of zeros: d = 0 */
			memset(f, 0, (size_t)c->blck * sizeof(float));
		cr_assert_eq(lm_quantize_row(c->t, f, c->w + (size_t)row * c->rb, c->ne0), 0);
	}
	for (int t = 0; t < c->n; t++) {
		test_fill_gauss(r, f, (size_t)c->ne0, t % 2 ? 1.0f : 30.0f);
		mmq_token(c, f, t);
	}
	free(f);
}

static void mmq_case_free(struct mmq_case *c)
{
	free(c->w);
	free(c->xqs);
	free(c->xd);
	free(c->bsums);
	free(c->xref);
}

/* Every (row, token) of the emulated GEMM in y against the GEMV's order and the CPU's dot. */
static void mmq_check(const struct mmq_case *c, const float *y)
{
	float *val = malloc((size_t)c->units * sizeof(float));
	cr_assert(val != NULL);
	const cpu_vec_dot_fn dots[] = {cpu_vec_dot_q8_0_generic, cpu_vec_dot_q4_0_generic,
				       cpu_vec_dot_q4_K_generic, cpu_vec_dot_q6_K_generic};
	const cpu_vec_dot_fn dot = dots[c->t == LM_Q8_0   ? 0
					: c->t == LM_Q4_0 ? 1
					: c->t == LM_Q4_K ? 2
							  : 3];
	int order_matters = 0;
	for (int t = 0; t < c->n; t++) {
		const struct lmc_xrow x = {.qs = c->xqs + (size_t)t * (size_t)c->ne0,
					   .d = c->xd + (size_t)t * (size_t)c->nb,
					   .bsums = c->bsums + (size_t)t * (size_t)(c->ne0 / 16)};
		for (int64_t row = 0; row < c->ne1; row++) {
			const uint8_t *wr = c->w + (size_t)row * c->rb;
			float plain = 0.0f;
			double mag = 1e-30; /* the sum's conditioning: the error bound's scale */
			for (int64_t u = 0; u < c->units; u++) {
				val[u] = gemv_unit(c, wr, u, &x);
				plain += val[u];
				mag += fabs((double)val[u]);
			}
			const float want = gemv_order(val, c->units);
			const float got = y[(size_t)t * (size_t)c->ne1 + (size_t)row];
			order_matters += bits(plain) != bits(want);
			cr_assert_eq(bits(got), bits(want),
				     "%s ne0 %lld row %lld token %d: %.9g vs %.9g",
				     lm_dtype_name(c->t), (long long)c->ne0, (long long)row, t, got,
				     want);
			const float ref = dot(c->ne0, wr, c->xref + (size_t)t * c->xref_row);
			cr_assert(fabs((double)got - ref) <= 1e-5 * mag, "%s: %.9g vs cpu %.9g",
				  lm_dtype_name(c->t), got, ref);
		}
	}
	/* The data are such that another order of additions would round differently. */
	if (c->ne0 >= 4096)
		cr_assert(order_matters > 0, "%s ne0 %lld: no output depends on the order",
			  lm_dtype_name(c->t), (long long)c->ne0);
	free(val);
}

/* The tensor-core GEMM, emulated with its fragments and its order, gives every (row, token) the
 * bits of the GEMV (each token alone), and the CPU's dot product within rounding. */
Test(cuda_math, mma_gemm_order_is_the_gemv_order, .timeout = 120)
{
	static const struct {
		enum lm_dtype t;
		int64_t ne0;
	} shapes[] = {{LM_Q8_0, 224},   {LM_Q8_0, 4096}, {LM_Q4_0, 288}, {LM_Q4_0, 4096},
		      {LM_Q4_K, 768},   {LM_Q4_K, 4096}, {LM_Q6_K, 768}, {LM_Q6_K, 4096},
		      {LM_Q8_0, 14336}, {LM_Q4_K, 14336}};
	struct test_rng r = {46};
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		struct mmq_case c = {.t = shapes[si].t, .ne0 = shapes[si].ne0, .ne1 = 21, .n = 19};
		mmq_case_make(&c, &r);
		float *y = malloc((size_t)c.n * (size_t)c.ne1 * sizeof(float));
		cr_assert(y != NULL);
		for (int64_t r0 = 0; r0 < c.ne1; r0 += 16) /* partial tiles of rows and tokens */
			for (int t0 = 0; t0 < c.n; t0 += 8)
				mmq_warp(&c, r0, t0, y);
		mmq_check(&c, y);
		free(y);
		mmq_case_free(&c);
	}
}

/* test_quant.c — common/format/quant.c: dequantization of hand-built blocks, round trips within
 * per-type error bounds, and edge cases. (Bit-exactness against llama.cpp is checked by
 * tests/oracle/test_quant_ggml.c when the oracle is configured.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/format/quant.h"
#include "kernels_testutil.h"

TestSuite(quant, .timeout = 30);

/* ------------------------------------------------------------------------------------------ */
/* Hand-built blocks                                                                          */

Test(quant, f16_and_bf16_known_values)
{
	const uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0x8000};
	const float hv[] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0.333251953125f, -0.0f};
	float y[6];
	cr_assert_eq(lm_dequantize_row(LM_F16, h, y, 6), 0);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(y[i], hv[i], "f16 %04x -> %g, expected %g", h[i], y[i], hv[i]);
	cr_expect(signbit(y[5]));

	const uint16_t b[] = {0x3f80, 0xc0a0, 0x4049, 0x0000};
	const float bv[] = {1.0f, -5.0f, 3.140625f, 0.0f};
	cr_assert_eq(lm_dequantize_row(LM_BF16, b, y, 4), 0);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(y[i], bv[i], "bf16 %04x -> %g, expected %g", b[i], y[i], bv[i]);

	/* And back: 1/3 rounds to the nearest half (0x3555) and bfloat16 (0x3eab). */
	const float third = 1.0f / 3.0f;
	uint16_t o;
	cr_assert_eq(lm_quantize_row(LM_F16, &third, &o, 1), 0);
	cr_expect_eq(o, 0x3555);
	cr_assert_eq(lm_quantize_row(LM_BF16, &third, &o, 1), 0);
	cr_expect_eq(o, 0x3eab);
}

Test(quant, q8_0_known_block)
{
	block_q8_0 blk;
	blk.d = 0x3800; /* 0.5 */
	for (int j = 0; j < 32; j++)
		blk.qs[j] = (int8_t)(j - 16);
	float y[32];
	cr_assert_eq(lm_dequantize_row(LM_Q8_0, &blk, y, 32), 0);
	cr_expect_eq(y[0], -8.0f);
	cr_expect_eq(y[16], 0.0f);
	cr_expect_eq(y[31], 7.5f);
	for (int j = 0; j < 32; j++)
		cr_expect_eq(y[j], (j - 16) * 0.5f);
}

Test(quant, q4_0_known_block)
{
	/* Byte j holds element j in its low nibble and element j + 16 in its high one. */
	block_q4_0 blk;
	blk.d = 0x4000; /* 2.0 */
	for (int j = 0; j < 16; j++)
		blk.qs[j] = (uint8_t)(j | ((15 - j) << 4));
	float y[32];
	cr_assert_eq(lm_dequantize_row(LM_Q4_0, &blk, y, 32), 0);
	cr_expect_eq(y[0], -16.0f);  /* (0 - 8) * 2 */
	cr_expect_eq(y[15], 14.0f);  /* (15 - 8) * 2 */
	cr_expect_eq(y[16], 14.0f);  /* high nibble of byte 0: 15 */
	cr_expect_eq(y[31], -16.0f); /* high nibble of byte 15: 0 */
	for (int j = 0; j < 16; j++) {
		cr_expect_eq(y[j], (j - 8) * 2.0f);
		cr_expect_eq(y[j + 16], (7 - j) * 2.0f);
	}
}

/* Q4_K scales: 6-bit (sc, m) for 8 sub-blocks packed into 12 bytes; sub-blocks 4-7 need the
 * high bits, which the values above 15 exercise. */
static void pack_q4_K_scales(uint8_t s[12], const uint8_t sc[8], const uint8_t m[8])
{
	for (int j = 0; j < 4; j++) {
		s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
		s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
		s[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
	}
}

/* x = j - 16: d = 31 / 31 = 1 and m = -16, so each quant is its index; the fifth bits are those
 * of elements 16..31. */
Test(quant, q5_1_known_block)
{
	float x[32], y[32];
	block_q5_1 blk;
	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16);
	cr_assert_eq(lm_quantize_row(LM_Q5_1, x, &blk, 32), 0);
	cr_expect_eq(blk.d, 0x3c00);
	cr_expect_eq(blk.m, 0xcc00);
	uint32_t qh;
	memcpy(&qh, blk.qh, 4);
	cr_expect_eq(qh, 0xffff0000u);
	for (int j = 0; j < 16; j++)
		cr_expect_eq(blk.qs[j], (uint8_t)(j | (j << 4)), "byte %d", j);
	cr_assert_eq(lm_dequantize_row(LM_Q5_1, &blk, y, 32), 0);
	for (int j = 0; j < 32; j++)
		cr_expect_eq(y[j], x[j], "element %d", j);
}

/* Q8_1 is Q8_0 plus the scaled sum of its quants. */
Test(quant, q8_1_is_q8_0_with_its_sum)
{
	float x[64];
	block_q8_0 a[2];
	block_q8_1 b[2];
	struct test_rng r = {5};
	test_fill_gauss(&r, x, 64, 3.0f);
	cr_assert_eq(lm_quantize_row(LM_Q8_0, x, a, 64), 0);
	cr_assert_eq(lm_quantize_row(LM_Q8_1, x, b, 64), 0);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(a[i].d, b[i].d);
		cr_expect_eq(memcmp(a[i].qs, b[i].qs, 32), 0);
		int sum = 0;
		float amax = 0;
		for (int j = 0; j < 32; j++) {
			sum += b[i].qs[j];
			amax = fmaxf(amax, fabsf(x[32 * i + j]));
		}
		cr_expect_eq(b[i].s, lm_f32_to_f16((float)sum * (amax / 127)));
	}
}

/* Every e4m3 code but the two NaNs decodes to a value that encodes back to it; the decoded
 * values are the format's (bias 7, subnormals below 2^-6, 448 the largest). */
Test(quant, fp8_codes_round_trip)
{
	cr_expect_eq(lm_fp8_to_f32(0x7e), 448.0f);
	cr_expect_eq(lm_fp8_to_f32(0xfe), -448.0f);
	cr_expect_eq(lm_fp8_to_f32(0x08), 0x1p-6f);
	cr_expect_eq(lm_fp8_to_f32(0x01), 0x1p-9f);
	cr_expect_eq(lm_fp8_to_f32(0x38), 1.0f);
	cr_expect_eq(lm_fp8_to_f32(0x3c), 1.5f);
	cr_expect(isnan(lm_fp8_to_f32(0x7f)) && isnan(lm_fp8_to_f32(0xff)));
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7f) == 0x7f)
			continue;
		const float v = lm_fp8_to_f32((uint8_t)c);
		cr_expect_eq(lm_f32_to_fp8(v), c == 0x80 ? 0x80 : c, "code %02x (%g)", c, v);
	}
}

/* The nearest code by brute force, ties to the even code (e4m3's codes of one sign are ordered
 * as their values, so "even" is the code's last bit), saturating at 448. */
static uint8_t fp8_nearest(float x)
{
	const float a = fabsf(x);
	int best = 0;
	for (int c = 1; c <= 0x7e; c++) {
		const float dc = fabsf(lm_fp8_to_f32((uint8_t)c) - a);
		const float db = fabsf(lm_fp8_to_f32((uint8_t)best) - a);
		if (dc < db || (dc == db && (c & 1) == 0))
			best = c;
	}
	return (uint8_t)(best | (signbit(x) ? 0x80 : 0));
}

Test(quant, fp8_rounds_to_nearest_even_and_saturates)
{
	struct test_rng r = {88};
	for (int i = 0; i < 200000; i++) {
		/* Every binade the format has, and past its largest value. */
		const float x =
			test_rng_uniform(&r) * ldexpf(1.0f, (int)(test_rng_next(&r) % 22) - 11);
		cr_assert_eq(lm_f32_to_fp8(x), fp8_nearest(x), "%a", (double)x);
	}
	/* Midpoints: between 1 and 1.125 to 1 (even), between 1.125 and 1.25 to 1.25. */
	cr_expect_eq(lm_f32_to_fp8(1.0625f), 0x38);
	cr_expect_eq(lm_f32_to_fp8(1.1875f), 0x3a);
	cr_expect_eq(lm_f32_to_fp8(0x1p-10f), 0x00);
	cr_expect_eq(lm_f32_to_fp8(3 * 0x1p-10f), 0x02);
	cr_expect_eq(lm_f32_to_fp8(500.0f), 0x7e);
	cr_expect_eq(lm_f32_to_fp8(-INFINITY), 0xfe);
	cr_expect_eq(lm_f32_to_fp8(NAN) & 0x7f, 0x7f);
}

Test(quant, q4_K_known_block)
{
	static const uint8_t sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
	static const uint8_t m[8] = {0, 5, 10, 15, 20, 40, 60, 63};
	block_q4_K blk;
	blk.d = 0x3c00;    /* 1.0 */
	blk.dmin = 0x3800; /* 0.5 */
	pack_q4_K_scales(blk.scales, sc, m);
	/* Chunk c of 32 bytes: low nibbles are sub-block 2c, high nibbles sub-block 2c + 1.
	 * Element l of every sub-block gets q = l % 16 (low) and 15 - l % 16 (high). */
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++)
			blk.qs[32 * c + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
	float y[256];
	cr_assert_eq(lm_dequantize_row(LM_Q4_K, &blk, y, 256), 0);
	/* Hand-computed: x = 1.0 * sc * q - 0.5 * m. */
	cr_expect_eq(y[0], 0.0f);              /* sb 0: 1*0 - 0 */
	cr_expect_eq(y[32 + 0], 30.0f - 2.5f); /* sb 1, q 15: 2*15 - 0.5*5 */
	cr_expect_eq(y[4 * 32 + 5], 75.0f);    /* sb 4, q 5: 17*5 - 0.5*20 */
	cr_expect_eq(y[7 * 32 + 31], -31.5f);  /* sb 7, q 0: 63*0 - 0.5*63 */
	for (int s = 0; s < 8; s++)
		for (int l = 0; l < 32; l++) {
			int q = s % 2 == 0 ? l % 16 : 15 - l % 16;
			float want = (float)sc[s] * (float)q - 0.5f * (float)m[s];
			cr_expect_eq(y[32 * s + l], want, "sub-block %d element %d: %g vs %g", s, l,
				     y[32 * s + l], want);
		}
}

Test(quant, q6_K_known_block)
{
	/* Element e: q = e % 64, scale index e / 16 with scale (e / 16) - 8, d = 0.25. Layout per
	 * half of 128: group g = (e % 128) / 32, l = e % 32; groups 0 and 2 use ql[l] (low, high
	 * nibble), groups 1 and 3 ql[l + 32]; qh[l] bits 2g..2g+1 hold q >> 4. */
	block_q6_K blk;
	memset(&blk, 0, sizeof blk);
	blk.d = 0x3400; /* 0.25 */
	for (int s = 0; s < 16; s++)
		blk.scales[s] = (int8_t)(s - 8);
	for (int e = 0; e < 256; e++) {
		const int h = e / 128, g = (e % 128) / 32, l = e % 32, q = e % 64;
		uint8_t *ql = blk.ql + 64 * h + (g % 2 ? 32 : 0);
		ql[l] |= (uint8_t)(g < 2 ? (q & 0xf) : (q & 0xf) << 4);
		blk.qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
	}
	float y[256];
	cr_assert_eq(lm_dequantize_row(LM_Q6_K, &blk, y, 256), 0);
	cr_expect_eq(y[0], 0.25f * -8 * (0 - 32)); /* 64 */
	cr_expect_eq(y[100], 0.25f * (6 - 8) * (36 - 32));
	cr_expect_eq(y[255], 0.25f * 7 * (63 - 32));
	for (int e = 0; e < 256; e++) {
		float want = 0.25f * (float)(e / 16 - 8) * (float)(e % 64 - 32);
		cr_expect_eq(y[e], want, "element %d: %g vs %g", e, y[e], want);
	}
}

Test(quant, q8_K_known_block_and_bsums)
{
	block_q8_K blk;
	blk.d = 0.125f;
	for (int j = 0; j < 256; j++)
		blk.qs[j] = (int8_t)(j - 128);
	float y[256];
	cr_assert_eq(lm_dequantize_row(LM_Q8_K, &blk, y, 256), 0);
	cr_expect_eq(y[0], -16.0f);
	cr_expect_eq(y[255], 15.875f);

	/* Quantizing integers in [-127, 127]: the first largest magnitude is -127, so
	 * iscale = -127 / -127 = 1, d = 1 and every quant is its value; bsums are the sums of 16
	 * consecutive quants. */
	float x[256];
	for (int j = 0; j < 256; j++)
		x[j] = (float)((j % 255) - 127);
	block_q8_K q;
	cr_assert_eq(lm_quantize_row(LM_Q8_K, x, &q, 256), 0);
	cr_expect_eq(q.d, 1.0f); /* max is the first -127: iscale = -127 / -127 = 1 */
	for (int j = 0; j < 256; j++)
		cr_expect_eq(q.qs[j], (j % 255) - 127);
	for (int b = 0; b < 16; b++) {
		int sum = 0;
		for (int j = 0; j < 16; j++)
			sum += (16 * b + j) % 255 - 127;
		cr_expect_eq(q.bsums[b], sum);
	}
}

/* MXFP4's value of code c at scale byte e, from the OCP microscaling spec (v1.0) rather than
 * ggml's doubled table: E2M1 is a sign bit, 2 exponent bits (bias 1) and a mantissa bit, with
 * exponent 0 subnormal (0 or 0.5); E8M0 is 2^(e - 127). Computed in double, exact. */
static double spec_mxfp4(uint8_t c, uint8_t e)
{
	const int sign = c >> 3, exp = (c >> 1) & 3, man = c & 1;
	const double mag = exp == 0 ? 0.5 * man : ldexp(1.0 + 0.5 * man, exp - 1);
	return (sign ? -mag : mag) * ldexp(1.0, (int)e - 127);
}

Test(quant, mxfp4_dequantizes_every_code_as_the_spec_says)
{
	/* Scales at both ends (subnormal floats for e 0 and 1), around 1, and the largest. */
	static const uint8_t es[] = {0, 1, 2, 3, 100, 126, 127, 128, 129, 200, 253, 254};
	for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) {
		block_mxfp4 b = {.e = es[i]};
		/* Element j holds code j % 16 (low nibble), element j + 16 code 15 - j. */
		for (int j = 0; j < 16; j++)
			b.qs[j] = (uint8_t)(j | (15 - j) << 4);
		float y[32];
		cr_assert_eq(lm_dequantize_row(LM_MXFP4, &b, y, 32), 0);
		for (int j = 0; j < 16; j++) {
			cr_expect_eq(y[j], (float)spec_mxfp4((uint8_t)j, es[i]),
				     "e %d code %d: %g, spec %g", es[i], j, y[j],
				     spec_mxfp4((uint8_t)j, es[i]));
			cr_expect_eq(y[j + 16], (float)spec_mxfp4((uint8_t)(15 - j), es[i]),
				     "e %d code %d: %g", es[i], 15 - j, y[j + 16]);
		}
	}
}

Test(quant, mxfp4_known_block)
{
	/* amax 6: e = floor(log2 6) - 2 + 127 = 127, scale 1, so the 16 E2M1 values are exact and
	 * quantize to their own codes (-0 to code 0, as 0 is the lower code on the tie). */
	float x[32];
	for (int j = 0; j < 16; j++) {
		x[j] = (float)spec_mxfp4((uint8_t)j, 127);
		x[j + 16] = (float)spec_mxfp4((uint8_t)(15 - j), 127);
	}
	block_mxfp4 b;
	cr_assert_eq(lm_quantize_row(LM_MXFP4, x, &b, 32), 0);
	cr_expect_eq(b.e, 127);
	for (int j = 0; j < 16; j++) {
		const uint8_t lo = j == 8 ? 0 : (uint8_t)j, hi = j == 7 ? 0 : (uint8_t)(15 - j);
		cr_expect_eq(b.qs[j], lo | hi << 4, "byte %d: %02x", j, b.qs[j]);
	}
	/* Ties go to the lower code: 5 between 4 (code 6) and 6 (code 7), -5 between -4 (14) and
	 * -6 (15), 2.5 between 2 (4) and 3 (5), 0.25 between 0 (0) and 0.5 (1). Past the grid,
	 * 7 clamps to 6. A scale of 2^3: amax 40 gives e = 5 - 2 + 127 = 130. */
	memset(x, 0, sizeof x);
	x[0] = 5.0f, x[1] = -5.0f, x[2] = 2.5f, x[3] = 0.25f, x[4] = 6.0f, x[5] = 7.0f;
	cr_assert_eq(lm_quantize_row(LM_MXFP4, x, &b, 32), 0);
	cr_expect_eq(b.e, 127);
	const uint8_t want[6] = {6, 14, 4, 0, 7, 7};
	for (int j = 0; j < 6; j++)
		cr_expect_eq(b.qs[j] & 0x0f, want[j], "element %d: code %d", j, b.qs[j] & 0x0f);
	x[5] = 40.0f;
	cr_assert_eq(lm_quantize_row(LM_MXFP4, x, &b, 32), 0);
	cr_expect_eq(b.e, 130);
	float y[32];
	cr_assert_eq(lm_dequantize_row(LM_MXFP4, &b, y, 32), 0);
	cr_expect_eq(y[5], 32.0f); /* a tie of 32 and 48: the lower code */
	cr_expect_eq(y[0], 4.0f);  /* the values are now 0, 4, 8, ... */
	/* All zeros: scale byte 0 and code 0 everywhere. Past the grid: a block of -7 has amax
	 * 7, scale 1, and clamps to -6 (MXFP4 keeps no value between 6 and 8 times its scale). */
	memset(x, 0, sizeof x);
	memset(&b, 0xee, sizeof b);
	cr_assert_eq(lm_quantize_row(LM_MXFP4, x, &b, 32), 0);
	cr_expect_eq(b.e, 0);
	for (int j = 0; j < 16; j++)
		cr_expect_eq(b.qs[j], 0);
	for (int j = 0; j < 32; j++)
		x[j] = -7.0f;
	cr_assert_eq(lm_quantize_row(LM_MXFP4, x, &b, 32), 0);
	cr_assert_eq(lm_dequantize_row(LM_MXFP4, &b, y, 32), 0);
	for (int j = 0; j < 32; j++)
		cr_expect_eq(y[j], -6.0f);
}

/* ------------------------------------------------------------------------------------------ */
/* Round trips                                                                                */

struct rt_bound {
	enum lm_dtype type;
	double nmse; /* bound on the normalised mean squared error over a gaussian row */
};

static size_t rt_row_bytes(enum lm_dtype t, int64_t n)
{
	uint64_t b = 0;
	cr_assert_eq(lm_dtype_row_bytes(t, (uint64_t)n, &b), 0);
	return (size_t)b;
}

/* The largest rounding error of storing d as a half: relative for normal halves, absolute
 * (half the subnormal step) below 2^-14. */
static double f16_err(double d)
{
	return fmax(d * 0x1p-11, 0x1p-25);
}

/* Per-block bounds that follow from each format, checked element by element. */
static void rt_check_block_bounds(enum lm_dtype t, const float *x, const float *y, int64_t n)
{
	const int blk =
		t == LM_Q8_0 || t == LM_Q4_0 || t == LM_Q5_1 || t == LM_Q8_1 || t == LM_MXFP4 ? 32
		: t == LM_Q8_K                                                                ? 256
											      : 1;
	for (int64_t b = 0; b < n; b += blk) {
		float amax = 0, lo = INFINITY, hi = -INFINITY;
		for (int j = 0; j < blk; j++) {
			amax = fmaxf(amax, fabsf(x[b + j]));
			lo = fminf(lo, x[b + j]);
			hi = fmaxf(hi, x[b + j]);
		}
		for (int j = 0; j < blk; j++) {
			const double err = fabs((double)x[b + j] - y[b + j]);
			double bound;
			switch (t) {
			case LM_F16: /* half an ulp of 11 bits */
				bound = fabs(x[b + j]) * 0x1p-11 + 0x1p-25;
				break;
			case LM_BF16:
				bound = fabs(x[b + j]) * 0x1p-8;
				break;
			case LM_Q8_0: /* half a step, plus the f16 rounding of d over 127 steps */
			case LM_Q8_1:
				bound = (amax / 127.0 * 0.5 + 127 * f16_err(amax / 127.0)) * 1.0001;
				break;
			case LM_Q5_1: /* half a step, the f16 roundings of d (over 31 steps) and m */
				bound = ((hi - lo) / 31.0 * 0.5 + 31 * f16_err((hi - lo) / 31.0) +
					 f16_err(fabs(lo))) *
					1.0001;
				break;
			case LM_FP8_E4M3: /* half of 3 mantissa bits, or of the 2^-9 subnormal step */
				bound = fmax(fabs(x[b + j]) * 0x1p-4, 0x1p-10);
				break;
			case LM_Q4_0: /* one step: the extreme opposite to max clamps at +7 */
				bound = (amax / 8.0 + 8 * f16_err(amax / 8.0)) * 1.0001;
				break;
			case LM_MXFP4: /* scale s = 2^(floor(log2 amax) - 2): the widest step
					* (4s to 6s) and the clamp above 6s (amax < 8s) cost 2s */
				bound = amax > 0 ? 2.0 * ldexp(1.0, (int)floor(log2(amax)) - 2) : 0;
				break;
			case LM_Q8_K: /* half a step, d in f32 */
				bound = amax / 127.0 * 0.5 * 1.0001;
				break;
			case LM_F32:
				bound = 0;
				break;
			default: /* Q4_K, Q6_K: fitted scales, no simple element bound */
				return;
			}
			cr_assert_leq(err, bound, "%s element %lld: |%g - %g| > %g",
				      lm_dtype_name(t), (long long)(b + j), x[b + j], y[b + j],
				      bound);
		}
	}
}

Test(quant, round_trips_within_bounds)
{
	/* NMSE bounds for gaussian rows, about 1.5x what the formats achieve here (measured:
	 * f16 4.4e-8, bf16 2.9e-6, q8_0 3.1e-5, q4_0 7.7e-3, q4_K 5.2e-3, q6_K 4.2e-4,
	 * q8_K 5.0e-5, q5_1 1.5e-3, q8_1 2.9e-5, fp8 7.6e-4, mxfp4 1.3e-2). fp8 keeps no scale: a row of 1e-3 lies among its
	 * subnormals (steps of 2^-9), so its nmse bound holds for the rows of unit scale only
	 * (the element bound holds for all). */
	const struct rt_bound bounds[] = {
		{LM_F32, 0.0},     {LM_F16, 7e-8},  {LM_BF16, 4.5e-6},     {LM_Q8_0, 5e-5},
		{LM_Q4_0, 1.2e-2}, {LM_Q4_K, 8e-3}, {LM_Q6_K, 6.5e-4},     {LM_Q8_K, 8e-5},
		{LM_Q5_1, 2.2e-3}, {LM_Q8_1, 5e-5}, {LM_FP8_E4M3, 1.2e-3}, {LM_MXFP4, 2e-2},
	};
	const int64_t n = 4096;
	float *x = malloc((size_t)n * sizeof(float));
	float *y = malloc((size_t)n * sizeof(float));
	void *q = malloc((size_t)n * sizeof(float));
	cr_assert(x && y && q);
	struct test_rng r = {1234};
	for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
		const enum lm_dtype t = bounds[i].type;
		for (int rep = 0; rep < 4; rep++) {
			test_fill_gauss(&r, x, (size_t)n, rep == 3 ? 1e-3f : 1.0f + 10.0f * rep);
			memset(q, 0, rt_row_bytes(t, n));
			cr_assert_eq(lm_quantize_row(t, x, q, n), 0);
			cr_assert_eq(lm_dequantize_row(t, q, y, n), 0);
			const double e = test_nmse(y, x, (size_t)n);
			cr_log_info("%s rep %d: nmse %.3g", lm_dtype_name(t), rep, e);
			if (t != LM_FP8_E4M3 || rep < 3)
				cr_expect_leq(e, bounds[i].nmse, "%s rep %d: nmse %g > %g",
					      lm_dtype_name(t), rep, e, bounds[i].nmse);
			rt_check_block_bounds(t, x, y, n);
			/* Requantizing the dequantized row is stable for the types whose scale
			 * is recomputed from a value the grid holds exactly. */
			if (t == LM_F16 || t == LM_BF16 || t == LM_F32) {
				float *z = malloc((size_t)n * sizeof(float));
				void *q2 = malloc((size_t)n * sizeof(float));
				lm_quantize_row(t, y, q2, n);
				lm_dequantize_row(t, q2, z, n);
				cr_expect_eq(memcmp(y, z, (size_t)n * sizeof(float)), 0);
				free(z);
				free(q2);
			}
		}
	}
	free(x);
	free(y);
	free(q);
}

/* ------------------------------------------------------------------------------------------ */
/* Edge cases                                                                                 */

static const enum lm_dtype all_types[] = {LM_F32,  LM_F16,  LM_BF16, LM_Q8_0, LM_Q4_0,    LM_Q5_1,
					  LM_Q4_K, LM_Q6_K, LM_Q8_K, LM_Q8_1, LM_FP8_E4M3};

Test(quant, all_zeros_dequantize_to_zeros)
{
	static float x[512], y[512];
	static uint8_t q[4096];
	for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
		memset(x, 0, sizeof x);
		memset(q, 0xee, sizeof q);
		for (int j = 0; j < 512; j++)
			y[j] = 1.0f;
		cr_assert_eq(lm_quantize_row(all_types[i], x, q, 512), 0);
		cr_assert_eq(lm_dequantize_row(all_types[i], q, y, 512), 0);
		for (int j = 0; j < 512; j++)
			cr_assert_eq(y[j], 0.0f, "%s: element %d is %g",
				     lm_dtype_name(all_types[i]), j, y[j]);
	}
	/* Q8_K of zeros is all zero bytes, bsums included. */
	block_q8_K z;
	memset(&z, 0x77, sizeof z);
	cr_assert_eq(lm_quantize_row(LM_Q8_K, x, &z, 256), 0);
	const uint8_t *zb = (const uint8_t *)&z;
	for (size_t b = 0; b < sizeof z; b++)
		cr_assert_eq(zb[b], 0);
}

/* One huge value takes its block's scale; the other blocks keep their own precision. */
Test(quant, one_huge_value_stays_in_its_block)
{
	static float x[1024], y[1024];
	static uint8_t q[4096];
	const enum lm_dtype types[] = {LM_Q8_0, LM_Q4_0, LM_Q4_K, LM_Q6_K, LM_Q8_K};
	struct test_rng r = {77};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		const enum lm_dtype t = types[i];
		const int blk = lm_dtype_info(t)->blck;
		test_fill_gauss(&r, x, 1024, 1.0f);
		x[3] = 3.0e4f; /* in the first block */
		cr_assert_eq(lm_quantize_row(t, x, q, 1024), 0);
		cr_assert_eq(lm_dequantize_row(t, q, y, 1024), 0);
		/* The huge value itself survives to within its format's relative precision. */
		cr_expect(fabsf(y[3] - x[3]) <= 3.0e4f * 0.02f, "%s: %g became %g",
			  lm_dtype_name(t), x[3], y[3]);
		/* Blocks after the first are as good as without it. */
		const double e = test_nmse(y + blk, x + blk, (size_t)(1024 - blk));
		cr_expect_leq(e, 1.5e-2, "%s: nmse %g outside the huge value's block",
			      lm_dtype_name(t), e);
	}
}

/* Blocks whose extreme is negative, and blocks of one repeated negative value. */
Test(quant, negative_extremes)
{
	float x[256], y[256];
	uint8_t q[1024];

	/* Q4_0: d = max / -8, so the most negative value is exact, the opposite one clamps. */
	for (int j = 0; j < 32; j++)
		x[j] = (float)(j % 8) - 3.0f;
	x[5] = -100.0f;
	x[9] = 99.0f;
	cr_assert_eq(lm_quantize_row(LM_Q4_0, x, q, 32), 0);
	cr_assert_eq(lm_dequantize_row(LM_Q4_0, q, y, 32), 0);
	cr_expect_eq(y[5], -100.0f);
	cr_expect_eq(y[9], 87.5f); /* 7 * 12.5 */

	/* Q8_0: symmetric, the negative extreme maps to -127. */
	cr_assert_eq(lm_quantize_row(LM_Q8_0, x, q, 32), 0);
	cr_expect_eq(((const block_q8_0 *)q)->qs[5], -127);
	cr_expect_eq(((const block_q8_0 *)q)->qs[9], 126);

	/* A block of one repeated negative value: every type gets close to it. */
	for (int j = 0; j < 256; j++)
		x[j] = -7.0f;
	for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
		cr_assert_eq(lm_quantize_row(all_types[i], x, q, 256), 0);
		cr_assert_eq(lm_dequantize_row(all_types[i], q, y, 256), 0);
		for (int j = 0; j < 256; j++)
			cr_assert(fabsf(y[j] + 7.0f) <= 7.0f * 0x1p-9, "%s: -7 became %g",
				  lm_dtype_name(all_types[i]), y[j]);
	}

	/* Q8_K: iscale = -127 / max for the first value of largest magnitude, so a positive
	 * extreme gets q = -127 and a negative d; the later -10 of equal magnitude gets +127. */
	for (int j = 0; j < 256; j++)
		x[j] = (float)(j % 5);
	x[0] = 10.0f;
	x[1] = -10.0f;
	cr_assert_eq(lm_quantize_row(LM_Q8_K, x, q, 256), 0);
	const block_q8_K *k8 = (const block_q8_K *)q;
	cr_expect_eq(k8->qs[0], -127);
	cr_expect_eq(k8->qs[1], 127);
	cr_expect(k8->d < 0);
}

Test(quant, rejects_bad_lengths_and_types)
{
	float x[256] = {0};
	uint8_t q[1024];
	cr_expect_eq(lm_quantize_row(LM_Q4_K, x, q, 100), LM_EINVAL);
	cr_expect_eq(lm_quantize_row(LM_Q8_0, x, q, 33), LM_EINVAL);
	cr_expect_eq(lm_dequantize_row(LM_Q6_K, q, x, 255), LM_EINVAL);
	cr_expect_eq(lm_quantize_row(LM_Q5_K, x, q, 256), LM_EUNSUPPORTED);
	cr_expect_eq(lm_dequantize_row(LM_IQ2_XS, q, x, 256), LM_EUNSUPPORTED);
	cr_expect_eq(lm_quantize_row((enum lm_dtype)4, x, q, 256), LM_EINVAL);
	cr_expect_eq(lm_quantize_row(LM_F16, x, q, 0), 0);
}

/* quant.c — GGUF row quantizers and dequantizers.
 *
 * The quantizers reproduce GGUF's reference algorithms (ggml's quantize_row_*_ref without an
 * importance matrix) bit for bit, so every float operation below is written in the order the
 * reference evaluates it: reassociating a sum, or letting the compiler contract a * b + c into
 * an FMA, changes the rounding and with it the chosen quants. This file must therefore be built
 * without -mfma (it is, as part of the generic library) and kept free of "equivalent" rewrites.
 * tests/oracle/test_quant_ggml.c compares every type against libggml-base byte for byte.
 */
#include "common/format/quant.h"

#include <math.h>
#include <string.h>

#include "common/base/err.h"

#define GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, through the float adder: adding 1.5 * 2^23 leaves the rounded
 * integer in the low mantissa bits. Exact for |f| < 2^22; the reference assumes that range, and
 * larger inputs (only possible with absurd data) are clamped instead of wrapping. */
static inline int quant_nearest_int(float f)
{
	if (!(f > -4194303.f)) /* also catches nan */
		f = -4194303.f;
	if (f > 4194303.f)
		f = 4194303.f;
	float v = f + 12582912.f;
	int32_t i;
	memcpy(&i, &v, sizeof i);
	return (i & 0x007fffff) - 0x00400000;
}

static inline int quant_min(int a, int b)
{
	return a < b ? a : b;
}

static inline int quant_max(int a, int b)
{
	return a > b ? a : b;
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_0 and Q8_0                                                                              */

void lm_quantize_q4_0_ref(const float *x, void *dst, int64_t n)
{
	block_q4_0 *y = dst;
	for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
		/* The signed value of largest magnitude, first occurrence: its sign sets d's. */
		float amax = 0.0f, max = 0.0f;
		for (int j = 0; j < QK4_0; j++) {
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		const float d = max / -8;
		const float id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = lm_f32_to_f16(d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			/* Truncation after +8.5 is rounding of x*id + 8; x*id lies in [-8, 8]. */
			const float x0 = x[j] * id;
			const float x1 = x[j + QK4_0 / 2] * id;
			const uint8_t q0 = (uint8_t)quant_min(15, (int8_t)(x0 + 8.5f));
			const uint8_t q1 = (uint8_t)quant_min(15, (int8_t)(x1 + 8.5f));
			y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

/* Weights, activations and Q8_0 cache rows alike. This is the arithmetic of llama.cpp's generic
 * x64 CPU build too (its quantize_row_q8_0 falls back on the reference without AVX); its AVX
 * builds take 127 / amax for 1 / d and round half to even, which differs on the rare value
 * within an ulp of a rounding boundary, and such a flip moves a dot product by a whole quantum
 * (and, through the cache, every later token): the "exact or about 1e-2 off" logits seen
 * against those builds. layermesh follows the reference everywhere, so its scalar kernels give
 * the x64 build's logits bit for bit. */
void lm_quantize_q8_0_ref(const float *x, void *dst, int64_t n)
{
	block_q8_0 *y = dst;
	for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
		float amax = 0.0f;
		for (int j = 0; j < QK8_0; j++)
			amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
		const float d = amax / 127;
		const float id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = lm_f32_to_f16(d);
		for (int j = 0; j < QK8_0; j++)
			y[i].qs[j] = (int8_t)roundf(x[j] * id);
	}
}

/* Q8_0's scale and rounding (so its quants are Q8_0's), plus the scaled sum of the quants. */
void lm_quantize_q8_1_ref(const float *x, void *dst, int64_t n)
{
	block_q8_1 *y = dst;
	for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
		float amax = 0.0f;
		for (int j = 0; j < QK8_1; j++)
			amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
		const float d = amax / 127;
		const float id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = lm_f32_to_f16(d);
		int sum = 0;
		for (int j = 0; j < QK8_1; j++) {
			y[i].qs[j] = (int8_t)roundf(x[j] * id);
			sum += y[i].qs[j];
		}
		y[i].s = lm_f32_to_f16((float)sum * d);
	}
}

/* The range of the block in 31 steps from its minimum; (int)(v + 0.5) is the reference's
 * rounding (v is never negative here). */
void lm_quantize_q5_1_ref(const float *x, void *dst, int64_t n)
{
	block_q5_1 *y = dst;
	for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
		float min = 3.402823466e+38f, max = -3.402823466e+38f;
		for (int j = 0; j < QK5_1; j++) {
			min = x[j] < min ? x[j] : min;
			max = x[j] > max ? x[j] : max;
		}
		const float d = (max - min) / 31;
		const float id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = lm_f32_to_f16(d);
		y[i].m = lm_f32_to_f16(min);
		uint32_t qh = 0;
		for (int j = 0; j < QK5_1 / 2; j++) {
			const uint8_t q0 = (uint8_t)((x[j] - min) * id + 0.5f);
			const uint8_t q1 = (uint8_t)((x[j + QK5_1 / 2] - min) * id + 0.5f);
			y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
			qh |= (uint32_t)((q0 >> 4) & 1u) << j;
			qh |= (uint32_t)((q1 >> 4) & 1u) << (j + QK5_1 / 2);
		}
		memcpy(y[i].qh, &qh, sizeof qh);
	}
}

static void quant_dequantize_q5_1(const void *src, float *y, int64_t n)
{
	const block_q5_1 *x = src;
	for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
		const float d = lm_f16_to_f32(x[i].d), m = lm_f16_to_f32(x[i].m);
		uint32_t qh;
		memcpy(&qh, x[i].qh, sizeof qh);
		for (int j = 0; j < QK5_1 / 2; j++) {
			const int q0 = (x[i].qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
			const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
			y[j] = q0 * d + m;
			y[j + QK5_1 / 2] = q1 * d + m;
		}
	}
}

static void quant_dequantize_q8_1(const void *src, float *y, int64_t n)
{
	const block_q8_1 *x = src;
	for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
		const float d = lm_f16_to_f32(x[i].d);
		for (int j = 0; j < QK8_1; j++)
			y[j] = x[i].qs[j] * d;
	}
}

static void quant_dequantize_q4_0(const void *src, float *y, int64_t n)
{
	const block_q4_0 *x = src;
	for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
		const float d = lm_f16_to_f32(x[i].d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			y[j] = ((x[i].qs[j] & 0x0f) - 8) * d;
			y[j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
		}
	}
}

static void quant_dequantize_q8_0(const void *src, float *y, int64_t n)
{
	const block_q8_0 *x = src;
	for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
		const float d = lm_f16_to_f32(x[i].d);
		for (int j = 0; j < QK8_0; j++)
			y[j] = x[i].qs[j] * d;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K                                                                                       */

/* Fits x[i] ~ scale * L[i] - the_min with L in [0, nmax], minimising the weighted squared error:
 * a first guess from the range, then nstep + 1 trial scales around it, each refined by weighted
 * least squares for (scale, min). Returns scale; *the_min receives the (non-negative) min. */
static float quant_make_qkx2(int n, int nmax, const float *x, const float *weights, uint8_t *L,
			     float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
	float min = x[0];
	float max = x[0];
	float sum_w = weights[0];
	float sum_x = sum_w * x[0];
	for (int i = 1; i < n; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		float w = weights[i];
		sum_w += w;
		sum_x += w * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t)n);
		*the_min = -min;
		return 0.f;
	}
	float iscale = nmax / (max - min);
	float scale = 1 / iscale;
	float best_error = 0;
	for (int i = 0; i < n; i++) {
		int l = quant_nearest_int(iscale * (x[i] - min));
		L[i] = (uint8_t)quant_max(0, quant_min(nmax, l));
		float diff = scale * L[i] + min - x[i];
		diff = diff * diff;
		best_error += weights[i] * diff;
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * is + nmax) / (max - min);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = quant_nearest_int(iscale * (x[i] - min));
			l = quant_max(0, quant_min(nmax, l));
			Laux[i] = (uint8_t)l;
			float w = weights[i];
			sum_l += w * l;
			sum_l2 += w * l * l;
			sum_xl += w * l * x[i];
		}
		float D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			if (this_min > 0) {
				this_min = 0;
				this_scale = sum_xl / sum_l2;
			}
			float cur_error = 0;
			for (int i = 0; i < n; i++) {
				float diff = this_scale * Laux[i] + this_min - x[i];
				diff = diff * diff;
				cur_error += weights[i] * diff;
			}
			if (cur_error < best_error) {
				memcpy(L, Laux, (size_t)n);
				best_error = cur_error;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*the_min = -min;
	return scale;
}

void lm_q4_K_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	/* Sub-blocks 0-3 keep 6 bits in scales[j] and scales[j + 4]; 4-7 put their low 4 bits in
	 * scales[j + 4] and borrow the top 2 bits of scales[j - 4] and scales[j]. */
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

static void quant_quantize_q4_K(const float *x, void *dst, int64_t n)
{
	block_q4_K *y = dst;
	uint8_t L[QK_K];
	uint8_t Laux[32];
	float weights[32];
	float mins[QK_K / 32];
	float scales[QK_K / 32];

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float max_scale = 0; /* the min is subtracted, so scales are never negative */
		float max_min = 0;
		for (int j = 0; j < QK_K / 32; j++) {
			/* Weights favour large magnitudes: rms of the sub-block plus |x|. */
			float sum_x2 = 0;
			for (int l = 0; l < 32; l++)
				sum_x2 += x[32 * j + l] * x[32 * j + l];
			float av_x = sqrtf(sum_x2 / 32);
			for (int l = 0; l < 32; l++)
				weights[l] = av_x + fabsf(x[32 * j + l]);
			scales[j] = quant_make_qkx2(32, 15, x + 32 * j, weights, L + 32 * j,
						    &mins[j], Laux, -1.f, 0.1f, 20);
			if (scales[j] > max_scale)
				max_scale = scales[j];
			if (mins[j] > max_min)
				max_min = mins[j];
		}

		float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
		float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
		memset(y[i].scales, 0, sizeof y[i].scales);
		for (int j = 0; j < QK_K / 32; j++) {
			uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
			uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
			ls = (uint8_t)quant_min(63, ls);
			lm = (uint8_t)quant_min(63, lm);
			if (j < 4) {
				y[i].scales[j] = ls;
				y[i].scales[j + 4] = lm;
			} else {
				y[i].scales[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
				y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
				y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
			}
		}
		y[i].d = lm_f32_to_f16(max_scale / 63.f);
		y[i].dmin = lm_f32_to_f16(max_min / 63.f);

		/* Requantize against the stored 6-bit scales. A sub-block whose scale rounded to
		 * zero keeps the quants of the fit (the reference does the same). */
		for (int j = 0; j < QK_K / 32; j++) {
			uint8_t sc, m;
			lm_q4_K_scale_min(j, y[i].scales, &sc, &m);
			const float d = lm_f16_to_f32(y[i].d) * sc;
			if (d == 0.0f)
				continue;
			const float dm = lm_f16_to_f32(y[i].dmin) * m;
			for (int ii = 0; ii < 32; ii++) {
				int l = quant_nearest_int((x[32 * j + ii] + dm) / d);
				L[32 * j + ii] = (uint8_t)quant_max(0, quant_min(15, l));
			}
		}

		uint8_t *q = y[i].qs;
		for (int j = 0; j < QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; l++)
				q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
	}
}

static void quant_dequantize_q4_K(const void *src, float *y, int64_t n)
{
	const block_q4_K *x = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const uint8_t *q = x[i].qs;
		const float d = lm_f16_to_f32(x[i].d);
		const float min = lm_f16_to_f32(x[i].dmin);
		for (int j = 0; j < QK_K / 64; j++, q += 32) {
			uint8_t sc, m;
			lm_q4_K_scale_min(2 * j, x[i].scales, &sc, &m);
			const float d1 = d * sc, m1 = min * m;
			lm_q4_K_scale_min(2 * j + 1, x[i].scales, &sc, &m);
			const float d2 = d * sc, m2 = min * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (q[l] & 0xf) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (q[l] >> 4) - m2;
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Q6_K                                                                                       */

/* Symmetric fit x[i] ~ scale * (L[i] - nmax), L in [0, 2 nmax), weighted by x^2: the scale from
 * the extreme value, then 18 nearby trial scales, each refined by least squares. */
static float quant_make_qx(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0;
	float amax = 0;
	for (int i = 0; i < n; i++) {
		float ax = fabsf(x[i]);
		if (ax > amax) {
			amax = ax;
			max = x[i];
		}
	}
	if (amax < GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	float iscale = -nmax / max;
	float sumlx = 0;
	float suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = quant_nearest_int(iscale * x[i]);
		l = quant_max(-nmax, quant_min(nmax - 1, l));
		L[i] = (int8_t)(l + nmax);
		float w = x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
	float best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = quant_nearest_int(iscale * x[i]);
			l = quant_max(-nmax, quant_min(nmax - 1, l));
			float w = x[i] * x[i];
			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++) {
				int l = quant_nearest_int(iscale * x[i]);
				L[i] = (int8_t)(nmax + quant_max(-nmax, quant_min(nmax - 1, l)));
			}
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

static void quant_quantize_q6_K(const float *x, void *dst, int64_t n)
{
	block_q6_K *y = dst;
	int8_t L[QK_K];
	float scales[QK_K / 16];

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float max_scale = 0;
		float max_abs_scale = 0;
		for (int ib = 0; ib < QK_K / 16; ib++) {
			const float scale = quant_make_qx(16, 32, x + 16 * ib, L + 16 * ib);
			scales[ib] = scale;
			if (fabsf(scale) > max_abs_scale) {
				max_abs_scale = fabsf(scale);
				max_scale = scale;
			}
		}
		if (max_abs_scale < GROUP_MAX_EPS) {
			memset(&y[i], 0, sizeof y[i]);
			continue;
		}

		float iscale = -128.f / max_scale;
		y[i].d = lm_f32_to_f16(1 / iscale);
		for (int ib = 0; ib < QK_K / 16; ib++)
			y[i].scales[ib] =
				(int8_t)quant_min(127, quant_nearest_int(iscale * scales[ib]));

		/* Requantize against the stored 8-bit scales (a zero scale keeps the fit's quants). */
		for (int j = 0; j < QK_K / 16; j++) {
			float d = lm_f16_to_f32(y[i].d) * y[i].scales[j];
			if (d == 0.0f)
				continue;
			for (int ii = 0; ii < 16; ii++) {
				int l = quant_nearest_int(x[16 * j + ii] / d);
				L[16 * j + ii] = (int8_t)(quant_max(-32, quant_min(31, l)) + 32);
			}
		}

		/* 128 quants per half: ql holds low nibbles of (l, l + 64) and (l + 32, l + 96);
		 * qh holds the 2 high bits of l, l + 32, l + 64, l + 96 in one byte. */
		uint8_t *ql = y[i].ql;
		uint8_t *qh = y[i].qh;
		for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
			for (int l = 0; l < 32; l++) {
				const uint8_t *Lu = (const uint8_t *)L + j + l;
				ql[l] = (uint8_t)((Lu[0] & 0xf) | ((Lu[64] & 0xf) << 4));
				ql[l + 32] = (uint8_t)((Lu[32] & 0xf) | ((Lu[96] & 0xf) << 4));
				qh[l] = (uint8_t)((Lu[0] >> 4) | ((Lu[32] >> 4) << 2) |
						  ((Lu[64] >> 4) << 4) | ((Lu[96] >> 4) << 6));
			}
		}
	}
}

static void quant_dequantize_q6_K(const void *src, float *y, int64_t n)
{
	const block_q6_K *x = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = lm_f16_to_f32(x[i].d);
		const uint8_t *ql = x[i].ql;
		const uint8_t *qh = x[i].qh;
		const int8_t *sc = x[i].scales;
		for (int h = 0; h < QK_K; h += 128, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l++) {
				int is = l / 16;
				int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
				int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
				int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[l] = d * sc[is] * q1;
				y[l + 32] = d * sc[is + 2] * q2;
				y[l + 64] = d * sc[is + 4] * q3;
				y[l + 96] = d * sc[is + 6] * q4;
			}
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Q8_K                                                                                       */

void lm_quantize_q8_K_ref(const float *x, void *dst, int64_t n)
{
	block_q8_K *y = dst;
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float max = 0;
		float amax = 0;
		for (int j = 0; j < QK_K; j++) {
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		if (amax == 0.0f) {
			/* The reference leaves bsums unwritten here; they are zero in ours. */
			memset(&y[i], 0, sizeof y[i]);
			continue;
		}
		/* -127 rather than -128 keeps every quant symmetric in [-127, 127]. */
		const float iscale = -127.f / max;
		for (int j = 0; j < QK_K; j++)
			y[i].qs[j] = (int8_t)quant_min(127, quant_nearest_int(iscale * x[j]));
		for (int j = 0; j < QK_K / 16; j++) {
			int sum = 0;
			for (int ii = 0; ii < 16; ii++)
				sum += y[i].qs[j * 16 + ii];
			y[i].bsums[j] = (int16_t)sum;
		}
		y[i].d = 1 / iscale;
	}
}

static void quant_dequantize_q8_K(const void *src, float *y, int64_t n)
{
	const block_q8_K *x = src;
	for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
		for (int j = 0; j < QK_K; j++)
			y[j] = x[i].d * x[i].qs[j];
}

/* ------------------------------------------------------------------------------------------ */
/* MXFP4                                                                                      */

const int8_t lm_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The code whose value times d is nearest x; the lowest code on a tie. v * d is exact (a small
 * integer times a power of two), so the error is one rounding, as in the reference. */
static int quant_mxfp4_nearest(float x, float d)
{
	int best = 0;
	float best_err = fabsf(lm_mxfp4_values[0] * d - x);
	for (int i = 1; i < 16; i++) {
		const float err = fabsf(lm_mxfp4_values[i] * d - x);
		if (err < best_err) {
			best = i;
			best_err = err;
		}
	}
	return best;
}

void lm_quantize_mxfp4_ref(const float *x, void *dst, int64_t n)
{
	block_mxfp4 *y = dst;
	for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
		float amax = 0.0f;
		for (int j = 0; j < QK_MXFP4; j++)
			if (amax < fabsf(x[j]))
				amax = fabsf(x[j]);
		/* floor(log2(amax)) - 2 + 127 in floats, as the reference; below 0 (amax under
		 * 2^-125) or past 255 (an infinity) the reference's conversion is undefined and
		 * layermesh writes 0 or 255. */
		const float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
		const uint8_t e = ef > 0.0f ? (ef < 255.0f ? (uint8_t)ef : 255) : 0;
		const float d = lm_e8m0_half(e);
		y[i].e = e;
		for (int j = 0; j < QK_MXFP4 / 2; j++)
			y[i].qs[j] = (uint8_t)(quant_mxfp4_nearest(x[j], d) |
					       quant_mxfp4_nearest(x[j + QK_MXFP4 / 2], d) << 4);
	}
}

static void quant_dequantize_mxfp4(const void *src, float *y, int64_t n)
{
	const block_mxfp4 *x = src;
	for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
		const float d = lm_e8m0_half(x[i].e);
		for (int j = 0; j < QK_MXFP4 / 2; j++) {
			y[j] = lm_mxfp4_values[x[i].qs[j] & 0x0f] * d;
			y[j + QK_MXFP4 / 2] = lm_mxfp4_values[x[i].qs[j] >> 4] * d;
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Public entry points                                                                        */

static void quant_quantize_f32(const float *x, void *dst, int64_t n)
{
	memcpy(dst, x, (size_t)n * sizeof(float));
}

static void quant_dequantize_f32(const void *src, float *y, int64_t n)
{
	memcpy(y, src, (size_t)n * sizeof(float));
}

/* The per-element types, a value at a time both ways: f16 and bf16 (round to nearest even) and
 * fp8 (e4m3), with dtype.h's scalar conversions. */
#define QUANT_ELEMENTWISE(name, elem_t, from_f32, to_f32)                         \
	void lm_quantize_##name##_ref(const float *x, void *dst, int64_t n)       \
	{                                                                         \
		elem_t *y = dst;                                                  \
		for (int64_t i = 0; i < n; i++)                                   \
			y[i] = from_f32(x[i]);                                    \
	}                                                                         \
	static void quant_dequantize_##name(const void *src, float *y, int64_t n) \
	{                                                                         \
		const elem_t *x = src;                                            \
		for (int64_t i = 0; i < n; i++)                                   \
			y[i] = to_f32(x[i]);                                      \
	}

QUANT_ELEMENTWISE(f16, uint16_t, lm_f32_to_f16, lm_f16_to_f32)
QUANT_ELEMENTWISE(bf16, uint16_t, lm_f32_to_bf16, lm_bf16_to_f32)
QUANT_ELEMENTWISE(fp8, uint8_t, lm_f32_to_fp8, lm_fp8_to_f32)

/* The types lm_quantize_row and lm_dequantize_row convert, and how; a type without an entry is
 * LM_EUNSUPPORTED. Block sizes are dtype.c's table's. */
static const struct {
	lm_quantize_fn quantize;
	void (*dequantize)(const void *src, float *y, int64_t n);
} quant_table[LM_DTYPE_COUNT] = {
	[LM_F32] = {quant_quantize_f32, quant_dequantize_f32},
	[LM_F16] = {lm_quantize_f16_ref, quant_dequantize_f16},
	[LM_BF16] = {lm_quantize_bf16_ref, quant_dequantize_bf16},
	[LM_Q8_0] = {lm_quantize_q8_0_ref, quant_dequantize_q8_0},
	[LM_Q4_0] = {lm_quantize_q4_0_ref, quant_dequantize_q4_0},
	[LM_Q5_1] = {lm_quantize_q5_1_ref, quant_dequantize_q5_1},
	[LM_Q8_1] = {lm_quantize_q8_1_ref, quant_dequantize_q8_1},
	[LM_FP8_E4M3] = {lm_quantize_fp8_ref, quant_dequantize_fp8},
	[LM_Q4_K] = {quant_quantize_q4_K, quant_dequantize_q4_K},
	[LM_Q6_K] = {quant_quantize_q6_K, quant_dequantize_q6_K},
	[LM_Q8_K] = {lm_quantize_q8_K_ref, quant_dequantize_q8_K},
	[LM_MXFP4] = {lm_quantize_mxfp4_ref, quant_dequantize_mxfp4},
};

static int quant_check(enum lm_dtype type, int64_t n)
{
	const struct lm_dtype_info *info = lm_dtype_info(type);
	if (info == NULL || n < 0)
		return LM_EINVAL;
	if (quant_table[type].quantize == NULL)
		return LM_EUNSUPPORTED;
	return n % info->blck == 0 ? 0 : LM_EINVAL;
}

int lm_quantize_row(enum lm_dtype type, const float *src, void *dst, int64_t n)
{
	int rc = quant_check(type, n);
	if (rc < 0)
		return rc;
	quant_table[type].quantize(src, dst, n);
	return 0;
}

int lm_dequantize_row(enum lm_dtype type, const void *src, float *dst, int64_t n)
{
	int rc = quant_check(type, n);
	if (rc < 0)
		return rc;
	quant_table[type].dequantize(src, dst, n);
	return 0;
}

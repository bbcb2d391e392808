/* kernels_avx2.c — AVX2 + FMA + F16C kernels (compiled with those flags only; the backend
 * calls cpu_kernels_avx2_fill after checking the CPU).
 *
 * Matmul walks the weight rows once and, for each row, covers the batch in tiles of up to four
 * tokens: a weight block is loaded and unpacked once per tile and multiplied into one
 * accumulator per token, so a batch costs one pass over the weights and the unpacking work is
 * shared. Quantized dot products compute the same integer block sums as the generic kernels
 * (maddubs of |w| and sign-adjusted x, or of unsigned quants and x, then madd), so they differ
 * from the reference only in the order of the float accumulation. The activation conversions
 * are bit-identical to the reference quantizers (see simd_x86.h for the layouts).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

#define INLINE static inline __attribute__((always_inline))
#define TILE   4 /* tokens per pass over a weight row */

static void avx2_to_act8(const float *x, void *dst, int64_t n)
{
	const int64_t nb = n / 32;
	int8_t *qs = dst;
	float *d = (float *)act8_d(dst, nb);
	int32_t *sum = (int32_t *)act8_sum(dst, nb);
	for (int64_t b = 0; b < nb; b++) {
		const __m256i q = q8_0_block(x + 32 * b, &d[b], NULL, &sum[b]);
		_mm256_store_si256((__m256i *)(qs + 32 * b), q);
	}
}

static void avx2_to_act8k(const float *x, void *dst, int64_t n)
{
	static const int natural[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	simd_q8_K_row(x, dst, n, natural);
}

static size_t avx2_act_f32(int64_t n)
{
	return (size_t)n * sizeof(float);
}

static size_t avx2_act8_bytes(int64_t n)
{
	return act8_bytes(n);
}

static size_t avx2_act8k_bytes(int64_t n)
{
	return act8k_bytes(n);
}

/* x rounded to f16 and back, kept as f32: F16 weights' activations here, the F16 cache's q in
 * attention_avx2.c (cpu_impl.h). */
void cpu_round_f16_avx2(const float *x, void *dst, int64_t n)
{
	float *y = dst;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m128i h =
			_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
	}
	for (; i < n; i++)
		y[i] = lm_f16_to_f32(lm_f32_to_f16(x[i]));
}

/* x rounded to bf16 (nearest even, nans kept quiet) and back, kept as f32. */
static void avx2_to_act_bf16(const float *x, void *dst, int64_t n)
{
	float *y = dst;
	int64_t i = 0;
	const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
	const __m256i inf = _mm256_set1_epi32(0x7f800000);
	for (; i + 8 <= n; i += 8) {
		const __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
		const __m256i odd =
			_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
		const __m256i rounded =
			_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
		const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
		const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
		__m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
		r = _mm256_and_si256(r, _mm256_set1_epi32((int32_t)0xffff0000u));
		_mm256_storeu_si256((__m256i *)(y + i), r);
	}
	for (; i < n; i++)
		y[i] = lm_bf16_to_f32(lm_f32_to_bf16(x[i]));
}

/* ------------------------------------------------------------------------------------------ */
/* Float weights: F32, F16, BF16 (activations f32)                                            */

INLINE __m256 load_w_f32(const void *w, int64_t i)
{
	return _mm256_loadu_ps((const float *)w + i);
}

INLINE __m256 load_w_f16(const void *w, int64_t i)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}

INLINE __m256 load_w_bf16(const void *w, int64_t i)
{
	const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float scalar_w_f32(const void *w, int64_t i)
{
	return ((const float *)w)[i];
}

INLINE float scalar_w_f16(const void *w, int64_t i)
{
	return lm_f16_to_f32(((const uint16_t *)w)[i]);
}

INLINE float scalar_w_bf16(const void *w, int64_t i)
{
	return lm_bf16_to_f32(((const uint16_t *)w)[i]);
}

/* out[t] = w . x[t] for nt <= 2 tokens; four accumulators per token hide the FMA latency. The
 * summation order is the same whatever nt is, so a batch gives exactly the results of single
 * calls. */
#define FLOAT_ROW(name, loadw, scalarw)                                                            \
	INLINE void row_##name(const void *w, const float *const *x, int nt, int64_t n,            \
			       float *out)                                                         \
	{                                                                                          \
		__m256 acc[TILE][4];                                                               \
		for (int t = 0; t < nt; t++)                                                       \
			for (int u = 0; u < 4; u++)                                                \
				acc[t][u] = _mm256_setzero_ps();                                   \
		const int un = 4;                                                                  \
		int64_t i = 0;                                                                     \
		for (; i + 8 * un <= n; i += 8 * un) {                                             \
			for (int u = 0; u < un; u++) {                                             \
				const __m256 wv = loadw(w, i + 8 * u);                             \
				for (int t = 0; t < nt; t++)                                       \
					acc[t][u] = _mm256_fmadd_ps(                               \
						wv, _mm256_loadu_ps(x[t] + i + 8 * u), acc[t][u]); \
			}                                                                          \
		}                                                                                  \
		for (; i + 8 <= n; i += 8) {                                                       \
			const __m256 wv = loadw(w, i);                                             \
			for (int t = 0; t < nt; t++)                                               \
				acc[t][0] =                                                        \
					_mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + i), acc[t][0]); \
		}                                                                                  \
		for (int t = 0; t < nt; t++) {                                                     \
			__m256 s = _mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]),              \
						 _mm256_add_ps(acc[t][2], acc[t][3]));             \
			float r = hsum_ps(s);                                                      \
			for (int64_t j = i; j < n; j++)                                            \
				r += scalarw(w, j) * x[t][j];                                      \
			out[t] = r;                                                                \
		}                                                                                  \
	}

FLOAT_ROW(f32, load_w_f32, scalar_w_f32)
FLOAT_ROW(f16, load_w_f16, scalar_w_f16)
FLOAT_ROW(bf16, load_w_bf16, scalar_w_bf16)

/* ------------------------------------------------------------------------------------------ */
/* Q8_0 and Q4_0 weights (act8 activations)                                                   */

/* sum over 4-byte groups of |w| * sign(x, w): the signed products, in 8 int32 lanes. */
INLINE __m256i dot_i8(__m256i aw, __m256i w, __m256i x)
{
	const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

INLINE __m256i q4_0_unpack(const block_q4_0 *b)
{
	const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
	const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
	return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* One 32-element weight block (Q8_0 or Q4_0) into accumulator u of every token. */
INLINE void q8_step(const uint8_t *w, int is_q4, int64_t b, const uint8_t *const *x,
		    const float *const *xd, int nt, __m256 acc[][2], int u)
{
	__m256i wv;
	float dw;
	if (is_q4) {
		const block_q4_0 *blk = (const block_q4_0 *)w + b;
		wv = q4_0_unpack(blk);
		dw = f16_to_f32(blk->d);
	} else {
		const block_q8_0 *blk = (const block_q8_0 *)w + b;
		wv = _mm256_loadu_si256((const __m256i *)blk->qs);
		dw = f16_to_f32(blk->d);
	}
	const __m256i aw = _mm256_abs_epi8(wv);
	for (int t = 0; t < nt; t++) {
		const __m256i xv = _mm256_load_si256((const __m256i *)(x[t] + 32 * b));
		const __m256 p = _mm256_cvtepi32_ps(dot_i8(aw, wv, xv));
		acc[t][u] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[t][b]), acc[t][u]);
	}
}

/* Weights of 32-element blocks (Q8_0 or Q4_0) against act8 rows. Two blocks per step with
 * separate accumulators, so the FMA chains do not serialise the blocks. */
INLINE void row_q8(const uint8_t *w, int is_q4, const uint8_t *const *x, int nt, int64_t nb,
		   float *out)
{
	__m256 acc[TILE][2];
	const float *xd[TILE];
	for (int t = 0; t < TILE; t++) {
		acc[t][0] = acc[t][1] = _mm256_setzero_ps();
		xd[t] = t < nt ? act8_d(x[t], nb) : NULL;
	}
	int64_t b = 0;
	for (; b + 2 <= nb; b += 2) {
		q8_step(w, is_q4, b, x, xd, nt, acc, 0);
		q8_step(w, is_q4, b + 1, x, xd, nt, acc, 1);
	}
	if (b < nb)
		q8_step(w, is_q4, b, x, xd, nt, acc, 0);
	for (int t = 0; t < nt; t++)
		out[t] = hsum_ps(_mm256_add_ps(acc[t][0], acc[t][1]));
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K weights (act8k activations)                                                           */

/* Byte-shuffle masks that replicate the 16-bit element j (of 8) across a 128-bit lane. */
INLINE __m256i scale_bcast16(__m256i sc16, int j)
{
	const int lo = 2 * (j % 8);
	const __m256i mask = _mm256_set1_epi16((short)(lo | ((lo + 1) << 8)));
	return _mm256_shuffle_epi8(sc16, mask);
}

INLINE void row_q4_K(const block_q4_K *w, const uint8_t *const *x, int nt, int64_t nb, float *out)
{
	__m256 acc[TILE], accm[TILE];
	const int8_t *xq[TILE];
	const float *xd[TILE];
	const int16_t *xs[TILE];
	for (int t = 0; t < TILE; t++) {
		acc[t] = accm[t] = _mm256_setzero_ps();
		xq[t] = t < nt ? (const int8_t *)x[t] : NULL;
		xd[t] = t < nt ? act8k_d(x[t], nb) : NULL;
		xs[t] = t < nt ? act8k_bsums(x[t], nb) : NULL;
	}
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int64_t i = 0; i < nb; i++) {
		uint8_t sc[8], mn[8];
		simd_q4_K_scales(w[i].scales, sc, mn);
		const float d = f16_to_f32(w[i].d), dmin = f16_to_f32(w[i].dmin);
		/* Scales as int16 in both 128-bit lanes; mins duplicated to pair with bsums. */
		const __m128i sc8 = _mm_loadl_epi64((const __m128i *)sc);
		const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
		const __m128i mn8 = _mm_loadl_epi64((const __m128i *)mn);
		const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
		__m256i sumi[TILE];
		for (int t = 0; t < nt; t++)
			sumi[t] = _mm256_setzero_si256();
		for (int j = 0; j < 4; j++) {
			const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
			const __m256i lo = _mm256_and_si256(q, m4);
			const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			const __m256i s0 = scale_bcast16(sc16, 2 * j);
			const __m256i s1 = scale_bcast16(sc16, 2 * j + 1);
			for (int t = 0; t < nt; t++) {
				const int8_t *xb = xq[t] + 256 * i + 64 * j;
				const __m256i x0 = _mm256_load_si256((const __m256i *)xb);
				const __m256i x1 = _mm256_load_si256((const __m256i *)(xb + 32));
				const __m256i p0 =
					_mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0);
				const __m256i p1 =
					_mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s1);
				sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
			}
		}
		for (int t = 0; t < nt; t++) {
			const __m256i bs = _mm256_loadu_si256((const __m256i *)(xs[t] + 16 * i));
			const __m256i mins = _mm256_madd_epi16(bs, mn16);
			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]),
						 _mm256_set1_ps(d * xd[t][i]), acc[t]);
			accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins),
						  _mm256_set1_ps(-dmin * xd[t][i]), accm[t]);
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = hsum_ps(_mm256_add_ps(acc[t], accm[t]));
}

/* ------------------------------------------------------------------------------------------ */
/* Q6_K weights (act8k activations)                                                           */

/* Scales of the 16-element sub-blocks 2k (low lane) and 2k + 1 (high lane) as int16. */
INLINE __m256i q6_scales(__m128i sc8, int k)
{
	const __m128i mask = _mm_set_epi8(
		(char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1),
		(char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1), (char)(2 * k + 1),
		(char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k), (char)(2 * k),
		(char)(2 * k), (char)(2 * k), (char)(2 * k));
	return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, mask));
}

/* Q6_K quants are stored + 32: the kernel multiplies the unsigned stored quants and seeds the
 * accumulator with -32 * sum_s sc_s * bsum_s, as GGUF's reference AVX2 kernel does. */
INLINE void row_q6_K(const block_q6_K *w, const uint8_t *const *x, int nt, int64_t nb, float *out)
{
	__m256 acc[TILE];
	const int8_t *xq[TILE];
	const float *xd[TILE];
	const int16_t *xs[TILE];
	for (int t = 0; t < TILE; t++) {
		acc[t] = _mm256_setzero_ps();
		xq[t] = t < nt ? (const int8_t *)x[t] : NULL;
		xd[t] = t < nt ? act8k_d(x[t], nb) : NULL;
		xs[t] = t < nt ? act8k_bsums(x[t], nb) : NULL;
	}
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const __m256i m2 = _mm256_set1_epi8(0x30);
	for (int64_t i = 0; i < nb; i++) {
		const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
		const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
		__m256i sumi[TILE];
		for (int t = 0; t < nt; t++) {
			const __m256i bs = _mm256_loadu_si256((const __m256i *)(xs[t] + 16 * i));
			sumi[t] =
				_mm256_sub_epi32(_mm256_setzero_si256(),
						 _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
		}
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = w[i].ql + 64 * h;
			const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			const __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
			__m256i q[4];
			q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
					       _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
			q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
					       _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
			q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
					       _mm256_and_si256(qh, m2));
			q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
					       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
			for (int g = 0; g < 4; g++) {
				const __m256i s = q6_scales(sc8, 4 * h + g);
				for (int t = 0; t < nt; t++) {
					const __m256i xv = _mm256_load_si256(
						(const __m256i *)(xq[t] + 256 * i + 128 * h +
								  32 * g));
					const __m256i p = _mm256_madd_epi16(
						_mm256_maddubs_epi16(q[g], xv), s);
					sumi[t] = _mm256_add_epi32(sumi[t], p);
				}
			}
		}
		const float d = f16_to_f32(w[i].d);
		for (int t = 0; t < nt; t++)
			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]),
						 _mm256_set1_ps(d * xd[t][i]), acc[t]);
	}
	for (int t = 0; t < nt; t++)
		out[t] = hsum_ps(acc[t]);
}

/* ------------------------------------------------------------------------------------------ */
/* Matmul drivers                                                                             */

/* The row kernels per weight type, for SIMD_MM_DRIVER (simd_x86.h). Float types tile two tokens
 * (four accumulators each), quantized types four. */
#define CALL_F32(NT)  row_f32(w, (const float *const *)xr, NT, m->ne0, out)
#define CALL_F16(NT)  row_f16(w, (const float *const *)xr, NT, m->ne0, out)
#define CALL_BF16(NT) row_bf16(w, (const float *const *)xr, NT, m->ne0, out)
#define CALL_Q8_0(NT) row_q8(w, 0, xr, NT, m->ne0 / 32, out)
#define CALL_Q4_0(NT) row_q8(w, 1, xr, NT, m->ne0 / 32, out)
#define CALL_Q4_K(NT) row_q4_K((const block_q4_K *)w, xr, NT, m->ne0 / 256, out)
#define CALL_Q6_K(NT) row_q6_K((const block_q6_K *)w, xr, NT, m->ne0 / 256, out)

SIMD_MM_DRIVER(avx2_mm_f32, CALL_F32, 2)
SIMD_MM_DRIVER(avx2_mm_f16, CALL_F16, 2)
SIMD_MM_DRIVER(avx2_mm_bf16, CALL_BF16, 2)
SIMD_MM_DRIVER(avx2_mm_q8_0, CALL_Q8_0, TILE)
SIMD_MM_DRIVER(avx2_mm_q4_0, CALL_Q4_0, TILE)
SIMD_MM_DRIVER(avx2_mm_q4_K, CALL_Q4_K, TILE)
SIMD_MM_DRIVER(avx2_mm_q6_K, CALL_Q6_K, TILE)

/* Single-row dot products (attention's q . K and tests) through the same row kernels. */
static float avx2_dot_f32(int64_t n, const void *w, const void *x)
{
	float out;
	const float *xr = x;
	row_f32(w, &xr, 1, n, &out);
	return out;
}

static float avx2_dot_f16(int64_t n, const void *w, const void *x)
{
	float out;
	const float *xr = x;
	row_f16(w, &xr, 1, n, &out);
	return out;
}

static float avx2_dot_bf16(int64_t n, const void *w, const void *x)
{
	float out;
	const float *xr = x;
	row_bf16(w, &xr, 1, n, &out);
	return out;
}

static float avx2_dot_q8_0(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q8(w, 0, &xr, 1, n / 32, &out);
	return out;
}

static float avx2_dot_q4_0(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q8(w, 1, &xr, 1, n / 32, &out);
	return out;
}

static float avx2_dot_q4_K(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q4_K(w, &xr, 1, n / 256, &out);
	return out;
}

static float avx2_dot_q6_K(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q6_K(w, &xr, 1, n / 256, &out);
	return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise                                                                               */

/* expf for the silu: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, then a degree-7
 * polynomial for e^r (Cephes' expf coefficients), scaled by 2^n through the exponent. Inputs
 * are clamped to [-87.3, 88.7]: the result stays finite and normal, which the silu needs only
 * as "huge" or "tiny". */
INLINE __m256 exp_ps(__m256 x)
{
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
	const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
					 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	/* 2^n with n in [-126, 128]: split so each factor is a normal float. */
	const __m256i ni = _mm256_cvtps_epi32(n);
	const __m256i half = _mm256_srai_epi32(ni, 1);
	const __m256 s1 = _mm256_castsi256_ps(
		_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
	const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
		_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
	return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static double avx2_softmax_exp(float *s, int n, float max)
{
	const __m256 vmax = _mm256_set1_ps(max);
	__m256 sum = _mm256_setzero_ps();
	int j = 0;
	for (; j + 8 <= n; j += 8) {
		const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
		_mm256_storeu_ps(s + j, e);
		sum = _mm256_add_ps(sum, e);
	}
	double total = hsum_ps(sum);
	for (; j < n; j++) {
		s[j] = expf(s[j] - max);
		total += s[j];
	}
	return total;
}

/* Every element goes through the same vector expf, the last partial vector through a padded
 * copy: results then do not depend on where an element sits in the buffer, so a batch of
 * tokens gives exactly what each token gives alone. */
static void avx2_silu_mul(float *y, const float *g, const float *u, size_t len)
{
	size_t i = 0;
	const __m256 one = _mm256_set1_ps(1.0f);
	for (;; i += 8) {
		float gt[8] = {0}, ut[8] = {0}, yt[8];
		const int full = i + 8 <= len;
		if (!full) {
			if (i == len)
				break;
			memcpy(gt, g + i, (len - i) * sizeof(float));
			memcpy(ut, u + i, (len - i) * sizeof(float));
		}
		const __m256 gv = _mm256_loadu_ps(full ? g + i : gt);
		const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv));
		const __m256 sv = _mm256_div_ps(gv, _mm256_add_ps(one, e));
		const __m256 r = _mm256_mul_ps(sv, _mm256_loadu_ps(full ? u + i : ut));
		if (full) {
			_mm256_storeu_ps(y + i, r);
			continue;
		}
		_mm256_storeu_ps(yt, r);
		memcpy(y + i, yt, (len - i) * sizeof(float));
		break;
	}
}

static void avx2_add(float *y, const float *a, size_t len)
{
	size_t i = 0;
	for (; i + 8 <= len; i += 8)
		_mm256_storeu_ps(y + i,
				 _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(a + i)));
	for (; i < len; i++)
		y[i] += a[i];
}

/* The mean of squares summed in double like the reference, 8 lanes at a time. */
static void avx2_rmsnorm(float *y, const float *x, const float *w, int dim, float eps)
{
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
	int i = 0;
	for (; i + 8 <= dim; i += 8) {
		const __m256 v = _mm256_loadu_ps(x + i);
		const __m256 sq = _mm256_mul_ps(v, v);
		s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
		s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
	}
	__m256d s = _mm256_add_pd(s0, s1);
	__m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
	double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
	for (; i < dim; i++)
		sum += (double)(x[i] * x[i]);
	const float mean = (float)(sum / dim);
	const float scale = 1.0f / sqrtf(mean + eps);
	const __m256 vs = _mm256_set1_ps(scale);
	for (i = 0; i + 8 <= dim; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
						      _mm256_loadu_ps(w + i)));
	for (; i < dim; i++)
		y[i] = (x[i] * scale) * w[i];
}

/* ------------------------------------------------------------------------------------------ */

void cpu_kernels_avx2_fill(struct cpu_kernels *k)
{
	struct cpu_type_ops *t = k->type;
	k->name = "avx2";
	t[LM_F32] = (struct cpu_type_ops){
		.act_bytes = avx2_act_f32,
		.vec_dot = avx2_dot_f32,
		.mm = avx2_mm_f32,
	};
	t[LM_F16] = (struct cpu_type_ops){
		.act_bytes = avx2_act_f32,
		.to_act = cpu_round_f16_avx2,
		.vec_dot = avx2_dot_f16,
		.mm = avx2_mm_f16,
	};
	t[LM_BF16] = (struct cpu_type_ops){
		.act_bytes = avx2_act_f32,
		.to_act = avx2_to_act_bf16,
		.vec_dot = avx2_dot_bf16,
		.mm = avx2_mm_bf16,
	};
	t[LM_Q8_0] = (struct cpu_type_ops){
		.act_bytes = avx2_act8_bytes,
		.to_act = avx2_to_act8,
		.vec_dot = avx2_dot_q8_0,
		.mm = avx2_mm_q8_0,
	};
	t[LM_Q4_0] = (struct cpu_type_ops){
		.act_bytes = avx2_act8_bytes,
		.to_act = avx2_to_act8,
		.vec_dot = avx2_dot_q4_0,
		.mm = avx2_mm_q4_0,
	};
	t[LM_Q4_K] = (struct cpu_type_ops){
		.act_bytes = avx2_act8k_bytes,
		.to_act = avx2_to_act8k,
		.vec_dot = avx2_dot_q4_K,
		.mm = avx2_mm_q4_K,
	};
	t[LM_Q6_K] = (struct cpu_type_ops){
		.act_bytes = avx2_act8k_bytes,
		.to_act = avx2_to_act8k,
		.vec_dot = avx2_dot_q6_K,
		.mm = avx2_mm_q6_K,
	};
	k->rmsnorm = avx2_rmsnorm;
	k->silu_mul = avx2_silu_mul;
	k->softmax_exp = avx2_softmax_exp;
	k->add = avx2_add;
	cpu_mxfp4_avx2_fill(k);
	cpu_panel_avx2_fill(k);
}

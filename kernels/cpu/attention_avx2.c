/* attention_avx2.c — the KV cache's types on AVX2 + FMA + F16C: stores, q . K and p x V, reading the
 * cache rows in place (attention_generic.c is the reference they are tested against).
 *
 * q layouts (private to these kernels, like the matmul's activations):
 *   F32, FP8 K     q as f32.
 *   F16, BF16 K    q rounded to f16 (bf16) as the reference rounds it, kept as f32.
 *   Q8_0, Q4_0,    "kq8", nb = head_dim / 32 blocks: int8 qs[nb][32] (the quants of GGUF's
 *   Q5_1 K         reference Q8_0 / Q8_1 quantizer), float d[nb] (their f16 delta as f32), and
 *                  aux[nb]: for Q4_0 the int32 sum of the block's quants (its -8 offset comes
 *                  back exactly through it), for Q5_1 the Q8_1 block's s (f16 d x sum, as f32).
 * Block dot products are exact integer sums (maddubs of |k| and sign-adjusted q, or of the
 * unsigned 4- and 5-bit quants and q, then madd), scaled by d_k x d_q: they differ from the
 * reference only in the order of the float accumulation. FP8 decodes through F16C: an e4m3 byte
 * moved into a half's bits is the same value times 2^-8, subnormals included.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

#define INLINE static inline __attribute__((always_inline))
#define HEADS  4 /* query heads per pass over a K row or a V block */

/* ------------------------------------------------------------------------------------------ */
/* Loading 8 values of a float-like cache type as f32                                         */

INLINE __m256 attn8_f32(const uint8_t *r, int64_t i)
{
	return _mm256_loadu_ps((const float *)r + i);
}

INLINE __m256 attn8_f16(const uint8_t *r, int64_t i)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + i)));
}

INLINE __m256 attn8_bf16(const uint8_t *r, int64_t i)
{
	const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)r + i));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* sign << 8 | (magnitude << 7) is the half whose value is the e4m3 value x 2^-8; the two NaN
 * codes (magnitude 0x7f) would decode as 480 that way and are made NaN, as the table has them. */
INLINE __m256 attn8_fp8(const uint8_t *r, int64_t i)
{
	const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(r + i)));
	const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7f));
	const __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7),
				       _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8));
	const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
	const __m256 nan = _mm256_castsi256_ps(
		_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f))));
	return _mm256_blendv_ps(v, _mm256_set1_ps(NAN), nan);
}

INLINE float attn1_f32(const uint8_t *r, int64_t i)
{
	return ((const float *)r)[i];
}

INLINE float attn1_f16(const uint8_t *r, int64_t i)
{
	return lm_f16_to_f32(((const uint16_t *)r)[i]);
}

INLINE float attn1_bf16(const uint8_t *r, int64_t i)
{
	return lm_bf16_to_f32(((const uint16_t *)r)[i]);
}

INLINE float attn1_fp8(const uint8_t *r, int64_t i)
{
	return lm_fp8_to_f32(r[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* Stores and q conversions                                                                   */

static void attn_store_f16(const float *x, void *dst, int64_t n)
{
	uint16_t *y = dst;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
								     _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		y[i] = lm_f32_to_f16(x[i]);
}

static void attn_store_q8_0(const float *x, void *dst, int64_t n)
{
	block_q8_0 *y = dst;
	for (int64_t b = 0; b < n / 32; b++) {
		const __m256i q = q8_0_block(x + 32 * b, NULL, &y[b].d, NULL);
		_mm256_storeu_si256((__m256i *)y[b].qs, q);
	}
}

static void attn_q_bf16(const float *x, void *dst, int64_t n)
{
	float *y = dst;
	for (int64_t i = 0; i < n; i++)
		y[i] = lm_bf16_to_f32(lm_f32_to_bf16(x[i]));
}

static size_t attn_q_f32_bytes(int64_t n)
{
	return (size_t)n * sizeof(float);
}

static size_t kq8_bytes(int64_t n)
{
	return (size_t)(n / 32) * (32 + 4 + 4);
}

INLINE const float *kq8_d(const uint8_t *q, int64_t nb)
{
	return (const float *)(q + nb * 32);
}

INLINE const void *kq8_aux(const uint8_t *q, int64_t nb)
{
	return q + nb * 36;
}

/* Q8_0 quants of the reference (q8_0_block is bit-identical to it) with their sums. */
static void attn_q_kq8_q8_0(const float *x, void *dst, int64_t n)
{
	const int64_t nb = n / 32;
	uint8_t *q = dst;
	float *d = (float *)kq8_d(q, nb);
	int32_t *sum = (int32_t *)kq8_aux(q, nb);
	for (int64_t b = 0; b < nb; b++)
		_mm256_storeu_si256((__m256i *)(q + 32 * b),
				    q8_0_block(x + 32 * b, &d[b], NULL, &sum[b]));
}

/* Q8_1 quants through the reference quantizer, one block at a time. */
static void attn_q_kq8_q8_1(const float *x, void *dst, int64_t n)
{
	const int64_t nb = n / 32;
	uint8_t *q = dst;
	float *d = (float *)kq8_d(q, nb);
	float *s = (float *)kq8_aux(q, nb);
	for (int64_t b = 0; b < nb; b++) {
		block_q8_1 blk;
		lm_quantize_q8_1_ref(x + 32 * b, &blk, 32);
		memcpy(q + 32 * b, blk.qs, 32);
		d[b] = lm_f16_to_f32(blk.d);
		s[b] = lm_f16_to_f32(blk.s);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Scores, float-like K: up to HEADS query heads per pass over a row                          */

typedef __m256 (*attn_load8_fn)(const uint8_t *r, int64_t i);
typedef float (*attn_load1_fn)(const uint8_t *r, int64_t i);

/* Rows r0 and r1 (nr of them: r1 is r0 again when 1) against nh query heads at q (nh a
 * constant where it is inlined, so the 2 x nh sums stay in registers): each K vector is loaded
 * once for the heads, each q vector once for the two rows. */
INLINE void attn_score_pass(const uint8_t *r0, const uint8_t *r1, int nr, int64_t hd,
			    const uint8_t *q, size_t q_stride, const int nh, float *out,
			    size_t out_stride, attn_load8_fn load8, attn_load1_fn load1)
{
	__m256 acc[2][HEADS];
	for (int h = 0; h < nh; h++)
		acc[0][h] = acc[1][h] = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 8 <= hd; i += 8) {
		const __m256 k0 = load8(r0, i), k1 = load8(r1, i);
		for (int h = 0; h < nh; h++) {
			const __m256 qv =
				_mm256_loadu_ps((const float *)(q + (size_t)h * q_stride) + i);
			acc[0][h] = _mm256_fmadd_ps(k0, qv, acc[0][h]);
			acc[1][h] = _mm256_fmadd_ps(k1, qv, acc[1][h]);
		}
	}
	for (int h = 0; h < nh; h++) {
		const float *qh = (const float *)(q + (size_t)h * q_stride);
		float t0 = 0, t1 = 0;
		for (int64_t e = i; e < hd; e++) {
			t0 += load1(r0, e) * qh[e];
			t1 += load1(r1, e) * qh[e];
		}
		out[(size_t)h * out_stride] = hsum_ps(acc[0][h]) + t0;
		if (nr > 1)
			out[(size_t)h * out_stride + 1] = hsum_ps(acc[1][h]) + t1;
	}
}

/* Two K rows and up to HEADS query heads per pass (8 independent sums in flight). */
#define ATTN_FLOAT_SCORES(name, load8, load1)                                                 \
	static void attn_scores_##name(int64_t hd, const uint8_t *k, size_t stride, int n,    \
				       const uint8_t *q, size_t q_stride, int nq, float *out, \
				       size_t out_stride)                                     \
	{                                                                                     \
		for (int j = 0; j < n; j += 2) {                                              \
			const int nr = n - j < 2 ? n - j : 2;                                 \
			const uint8_t *r0 = k + (size_t)j * stride;                           \
			const uint8_t *r1 = nr > 1 ? r0 + stride : r0;                        \
			for (int h0 = 0; h0 < nq; h0 += HEADS) {                              \
				const uint8_t *qh = q + (size_t)h0 * q_stride;                \
				float *o = out + (size_t)h0 * out_stride + (size_t)j;         \
				switch (nq - h0 < HEADS ? nq - h0 : HEADS) {                  \
				case 4:                                                       \
					attn_score_pass(r0, r1, nr, hd, qh, q_stride, 4, o,   \
							out_stride, load8, load1);            \
					break;                                                \
				case 3:                                                       \
					attn_score_pass(r0, r1, nr, hd, qh, q_stride, 3, o,   \
							out_stride, load8, load1);            \
					break;                                                \
				case 2:                                                       \
					attn_score_pass(r0, r1, nr, hd, qh, q_stride, 2, o,   \
							out_stride, load8, load1);            \
					break;                                                \
				default:                                                      \
					attn_score_pass(r0, r1, nr, hd, qh, q_stride, 1, o,   \
							out_stride, load8, load1);            \
					break;                                                \
				}                                                             \
			}                                                                     \
		}                                                                             \
	}

ATTN_FLOAT_SCORES(f32, attn8_f32, attn1_f32)
ATTN_FLOAT_SCORES(f16, attn8_f16, attn1_f16)
ATTN_FLOAT_SCORES(bf16, attn8_bf16, attn1_bf16)
ATTN_FLOAT_SCORES(fp8, attn8_fp8, attn1_fp8)

/* ------------------------------------------------------------------------------------------ */
/* Scores, block K against kq8 q                                                              */

/* The 32 quants of a K block as bytes in element order, and what its dot with q needs. */
enum attn_block { ATTN_Q8_0, ATTN_Q4_0, ATTN_Q5_1 };

/* byte j = 0x10 where bit j of qh is set. */
INLINE __m256i attn_q5_high(uint32_t qh)
{
	const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2,
						2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int32_t)qh), spread);
	v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
	return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Low nibbles are elements 0..15, high nibbles 16..31. */
INLINE __m256i attn_nibbles(const uint8_t *qs)
{
	const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
				_mm256_set1_epi8(0x0f));
}

/* A K block's 32 quants as bytes in element order, in the form maddubs takes them: Q8_0's
 * magnitudes (its signs go onto q), Q4_0's nibbles, Q5_1's 5-bit values. */
INLINE __m256i attn_block_bytes(const uint8_t *kb, enum attn_block t, __m256i *sign)
{
	if (t == ATTN_Q8_0) {
		*sign = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)kb)->qs);
		return _mm256_sign_epi8(*sign, *sign);
	}
	if (t == ATTN_Q4_0)
		return attn_nibbles(((const block_q4_0 *)kb)->qs);
	const block_q5_1 *b = (const block_q5_1 *)kb;
	uint32_t qh;
	memcpy(&qh, b->qh, 4);
	return _mm256_or_si256(attn_nibbles(b->qs), attn_q5_high(qh));
}

/* One K row against nh kq8 q heads (nh a constant where inlined): each K block is unpacked once
 * for the heads; per head the blocks' exact integer sums times d_k d_q accumulate in 8 lanes,
 * and Q4_0's -8 offset and Q5_1's min term beside them. */
INLINE void attn_block_pass(const uint8_t *kr, enum attn_block t, int64_t nb, const uint8_t *q,
			    size_t q_stride, const int nh, float *out, size_t out_stride)
{
	const size_t bs = t == ATTN_Q8_0   ? sizeof(block_q8_0)
			  : t == ATTN_Q4_0 ? sizeof(block_q4_0)
					   : sizeof(block_q5_1);
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[HEADS];
	float extra[HEADS];
	for (int h = 0; h < nh; h++) {
		acc[h] = _mm256_setzero_ps();
		extra[h] = 0;
	}
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *kb = kr + (size_t)b * bs;
		__m256i sign = _mm256_setzero_si256();
		const __m256i kq = attn_block_bytes(kb, t, &sign);
		uint16_t dk16, m16 = 0;
		memcpy(&dk16, kb, 2);
		if (t == ATTN_Q5_1)
			memcpy(&m16, kb + 2, 2);
		const float dk = f16_to_f32(dk16), mk = f16_to_f32(m16);
		for (int h = 0; h < nh; h++) {
			const uint8_t *qh = q + (size_t)h * q_stride;
			__m256i qq = _mm256_loadu_si256((const __m256i *)(qh + 32 * b));
			if (t == ATTN_Q8_0)
				qq = _mm256_sign_epi8(qq, sign);
			const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(kq, qq), ones);
			const float s = dk * kq8_d(qh, nb)[b];
			acc[h] =
				_mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_set1_ps(s), acc[h]);
			if (t == ATTN_Q4_0)
				extra[h] -= s * (float)(8 * ((const int32_t *)kq8_aux(qh, nb))[b]);
			else if (t == ATTN_Q5_1)
				extra[h] += mk * ((const float *)kq8_aux(qh, nb))[b];
		}
	}
	for (int h = 0; h < nh; h++)
		out[(size_t)h * out_stride] = hsum_ps(acc[h]) + extra[h];
}

#define ATTN_BLOCK_SCORES(name, t)                                                            \
	static void attn_scores_##name(int64_t hd, const uint8_t *k, size_t stride, int n,    \
				       const uint8_t *q, size_t q_stride, int nq, float *out, \
				       size_t out_stride)                                     \
	{                                                                                     \
		for (int j = 0; j < n; j++) {                                                 \
			const uint8_t *kr = k + (size_t)j * stride;                           \
			for (int h0 = 0; h0 < nq; h0 += HEADS) {                              \
				const uint8_t *qh = q + (size_t)h0 * q_stride;                \
				float *o = out + (size_t)h0 * out_stride + (size_t)j;         \
				switch (nq - h0 < HEADS ? nq - h0 : HEADS) {                  \
				case 4:                                                       \
					attn_block_pass(kr, t, hd / 32, qh, q_stride, 4, o,   \
							out_stride);                          \
					break;                                                \
				case 3:                                                       \
					attn_block_pass(kr, t, hd / 32, qh, q_stride, 3, o,   \
							out_stride);                          \
					break;                                                \
				case 2:                                                       \
					attn_block_pass(kr, t, hd / 32, qh, q_stride, 2, o,   \
							out_stride);                          \
					break;                                                \
				default:                                                      \
					attn_block_pass(kr, t, hd / 32, qh, q_stride, 1, o,   \
							out_stride);                          \
					break;                                                \
				}                                                             \
			}                                                                     \
		}                                                                             \
	}

ATTN_BLOCK_SCORES(q8_0, ATTN_Q8_0)
ATTN_BLOCK_SCORES(q4_0, ATTN_Q4_0)
ATTN_BLOCK_SCORES(q5_1, ATTN_Q5_1)

/* ------------------------------------------------------------------------------------------ */
/* Values: acc[h] += sum_j p[h][j] V_j, the sums kept in registers across the rows            */

/* acc[h] += sum_j p[h][j] V_j for nh heads (a constant where inlined), 16 columns at a time:
 * each V row is loaded once for the heads and the sums stay in registers across the rows. */
INLINE void attn_value_pass(int64_t hd, const uint8_t *v, size_t stride, int n, const float *p,
			    size_t p_stride, const int nh, float *acc, attn_load8_fn load8,
			    attn_load1_fn load1)
{
	int64_t i = 0;
	for (; i + 16 <= hd; i += 16) {
		__m256 a[HEADS][2];
		for (int h = 0; h < nh; h++)
			for (int u = 0; u < 2; u++)
				a[h][u] = _mm256_loadu_ps(acc + (size_t)h * (size_t)hd + i + 8 * u);
		for (int j = 0; j < n; j++) {
			const uint8_t *row = v + (size_t)j * stride;
			const __m256 v0 = load8(row, i), v1 = load8(row, i + 8);
			for (int h = 0; h < nh; h++) {
				const __m256 pj =
					_mm256_set1_ps(p[(size_t)h * p_stride + (size_t)j]);
				a[h][0] = _mm256_fmadd_ps(pj, v0, a[h][0]);
				a[h][1] = _mm256_fmadd_ps(pj, v1, a[h][1]);
			}
		}
		for (int h = 0; h < nh; h++)
			for (int u = 0; u < 2; u++)
				_mm256_storeu_ps(acc + (size_t)h * (size_t)hd + i + 8 * u, a[h][u]);
	}
	for (; i < hd; i++)
		for (int h = 0; h < nh; h++)
			for (int j = 0; j < n; j++)
				acc[(size_t)h * (size_t)hd + i] +=
					p[(size_t)h * p_stride + (size_t)j] *
					load1(v + (size_t)j * stride, i);
}

#define ATTN_FLOAT_VALUES(name, load8, load1)                                                 \
	static void attn_values_##name(int64_t hd, const uint8_t *v, size_t stride, int n,    \
				       const float *p, size_t p_stride, int nq, float *acc)   \
	{                                                                                     \
		for (int h0 = 0; h0 < nq; h0 += HEADS) {                                      \
			const float *ph = p + (size_t)h0 * p_stride;                          \
			float *ah = acc + (size_t)h0 * (size_t)hd;                            \
			switch (nq - h0 < HEADS ? nq - h0 : HEADS) {                          \
			case 4:                                                               \
				attn_value_pass(hd, v, stride, n, ph, p_stride, 4, ah, load8, \
						load1);                                       \
				break;                                                        \
			case 3:                                                               \
				attn_value_pass(hd, v, stride, n, ph, p_stride, 3, ah, load8, \
						load1);                                       \
				break;                                                        \
			case 2:                                                               \
				attn_value_pass(hd, v, stride, n, ph, p_stride, 2, ah, load8, \
						load1);                                       \
				break;                                                        \
			default:                                                              \
				attn_value_pass(hd, v, stride, n, ph, p_stride, 1, ah, load8, \
						load1);                                       \
				break;                                                        \
			}                                                                     \
		}                                                                             \
	}

ATTN_FLOAT_VALUES(f32, attn8_f32, attn1_f32)
ATTN_FLOAT_VALUES(f16, attn8_f16, attn1_f16)
ATTN_FLOAT_VALUES(bf16, attn8_bf16, attn1_bf16)
ATTN_FLOAT_VALUES(fp8, attn8_fp8, attn1_fp8)

/* A block's 32 quants as 4 x 8 floats (Q4_0's already less its offset of 8), its delta, and
 * Q5_1's min. */
INLINE void attn_block_values(const uint8_t *vb, enum attn_block t, __m256 q[4], float *d, float *m)
{
	uint16_t d16;
	memcpy(&d16, vb, 2);
	*d = f16_to_f32(d16);
	*m = 0;
	__m256i bytes;
	if (t == ATTN_Q8_0) {
		bytes = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)vb)->qs);
	} else if (t == ATTN_Q4_0) {
		bytes = _mm256_sub_epi8(attn_nibbles(((const block_q4_0 *)vb)->qs),
					_mm256_set1_epi8(8));
	} else {
		const block_q5_1 *b = (const block_q5_1 *)vb;
		uint32_t qh;
		memcpy(&qh, b->qh, 4);
		bytes = _mm256_or_si256(attn_nibbles(b->qs), attn_q5_high(qh));
		*m = f16_to_f32(b->m);
	}
	const __m128i lo = _mm256_castsi256_si128(bytes), hi = _mm256_extracti128_si256(bytes, 1);
	q[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
	q[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
	q[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
	q[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

/* One block (32 columns) and up to 2 heads at a time; a (d q + m) as (a d) q + a m. */
INLINE void attn_values_block(int64_t hd, const uint8_t *v, size_t stride, int n, const float *p,
			      size_t p_stride, int nq, float *acc, enum attn_block t)
{
	const size_t bs = t == ATTN_Q8_0   ? sizeof(block_q8_0)
			  : t == ATTN_Q4_0 ? sizeof(block_q4_0)
					   : sizeof(block_q5_1);
	for (int h0 = 0; h0 < nq; h0 += 2) {
		const int nh = nq - h0 < 2 ? nq - h0 : 2;
		for (int64_t b = 0; b < hd / 32; b++) {
			__m256 a[2][4];
			for (int h = 0; h < nh; h++)
				for (int u = 0; u < 4; u++)
					a[h][u] = _mm256_loadu_ps(acc +
								  (size_t)(h0 + h) * (size_t)hd +
								  32 * b + 8 * u);
			for (int j = 0; j < n; j++) {
				__m256 q[4];
				float d, m;
				attn_block_values(v + (size_t)j * stride + (size_t)b * bs, t, q, &d,
						  &m);
				for (int h = 0; h < nh; h++) {
					const float pj = p[(size_t)(h0 + h) * p_stride + (size_t)j];
					const __m256 s = _mm256_set1_ps(pj * d);
					const __m256 pm = _mm256_set1_ps(pj * m);
					for (int u = 0; u < 4; u++) {
						a[h][u] = _mm256_fmadd_ps(s, q[u], a[h][u]);
						if (t == ATTN_Q5_1)
							a[h][u] = _mm256_add_ps(a[h][u], pm);
					}
				}
			}
			for (int h = 0; h < nh; h++)
				for (int u = 0; u < 4; u++)
					_mm256_storeu_ps(acc + (size_t)(h0 + h) * (size_t)hd +
								 32 * b + 8 * u,
							 a[h][u]);
		}
	}
}

#define ATTN_BLOCK_VALUES(name, t)                                                          \
	static void attn_values_##name(int64_t hd, const uint8_t *v, size_t stride, int n,  \
				       const float *p, size_t p_stride, int nq, float *acc) \
	{                                                                                   \
		attn_values_block(hd, v, stride, n, p, p_stride, nq, acc, t);               \
	}

ATTN_BLOCK_VALUES(q8_0, ATTN_Q8_0)
ATTN_BLOCK_VALUES(q4_0, ATTN_Q4_0)
ATTN_BLOCK_VALUES(q5_1, ATTN_Q5_1)

/* ------------------------------------------------------------------------------------------ */

void cpu_attn_avx2_fill(struct cpu_kernels *k)
{
	struct cpu_attn_ops *t = k->attn;
	t[LM_F32].scores = attn_scores_f32;
	t[LM_F32].values = attn_values_f32;
	t[LM_F16] = (struct cpu_attn_ops){.store = attn_store_f16,
					  .q_bytes = attn_q_f32_bytes,
					  .q_conv = cpu_round_f16_avx2,
					  .scores = attn_scores_f16,
					  .values = attn_values_f16};
	t[LM_BF16] = (struct cpu_attn_ops){.store = t[LM_BF16].store,
					   .q_bytes = attn_q_f32_bytes,
					   .q_conv = attn_q_bf16,
					   .scores = attn_scores_bf16,
					   .values = attn_values_bf16};
	t[LM_FP8_E4M3].scores = attn_scores_fp8;
	t[LM_FP8_E4M3].values = attn_values_fp8;
	t[LM_Q8_0] = (struct cpu_attn_ops){.store = attn_store_q8_0,
					   .q_bytes = kq8_bytes,
					   .q_conv = attn_q_kq8_q8_0,
					   .scores = attn_scores_q8_0,
					   .values = attn_values_q8_0};
	t[LM_Q4_0] = (struct cpu_attn_ops){.store = t[LM_Q4_0].store,
					   .q_bytes = kq8_bytes,
					   .q_conv = attn_q_kq8_q8_0,
					   .scores = attn_scores_q4_0,
					   .values = attn_values_q4_0};
	t[LM_Q5_1] = (struct cpu_attn_ops){.store = t[LM_Q5_1].store,
					   .q_bytes = kq8_bytes,
					   .q_conv = attn_q_kq8_q8_1,
					   .scores = attn_scores_q5_1,
					   .values = attn_values_q5_1};
}

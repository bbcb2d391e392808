/* kernels_avx512.c — AVX-512 (F, BW, VL, VNNI) kernels for the quantized weight types, on top of
 * the AVX2 set (the backend calls cpu_kernels_avx512_fill after cpu_kernels_avx2_fill).
 *
 * What changes against AVX2:
 *   - Q8_0 and Q4_0 take two blocks per 512-bit step and use VNNI's vpdpbusd (unsigned x
 *     signed bytes summed into int32). vpdpbusd needs one unsigned operand, so the weights
 *     become unsigned: Q8_0 quants + 128, Q4_0 nibbles as stored (q rather than q - 8). The
 *     offset is taken back exactly through sums of each 4 activation quants, which the
 *     activation layout keeps as an int32 vector that seeds the accumulator, so every lane
 *     ends with the signed sum of its own 4 products (small, as in the AVX2 kernels):
 *         sum (w + 128) x - 128 sum x = sum w x,     sum q x - 8 sum x = sum (q - 8) x.
 *   - Q4_K and Q6_K take 64 quants per step: maddubs (unsigned quants x signed activations into
 *     int16 pairs) then vpdpwssd with the 16-bit sub-block scales, accumulating int32 (Q6_K's
 *     +32 offset comes back through the activation block sums, as in GGUF's AVX2 kernel). Q4_K's
 *     64 low nibbles of a 64-byte load are two sub-blocks 64 elements apart, so its activation
 *     layout stores each block's 32-element groups in the order 0 2 1 3 4 6 5 7.
 * Every block sum is the exact integer of the generic kernels; only the float accumulation order
 * differs. Activation values are those of the reference quantizers (simd_x86.h helpers).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_x86.h"

#define TILE 4

/* ------------------------------------------------------------------------------------------ */
/* Activation layouts                                                                         */

/* "a8z" (simd_avx512.h) for Q8_0 and Q4_0 weights. */
static void a8z_convert(const float *x, void *dst, int64_t n, int is_q4)
{
	const int64_t nb = n / 32;
	int8_t *qs = dst;
	int32_t *corr = (int32_t *)a8z_corr(dst, nb);
	float *d = (float *)a8z_d(dst, nb);
	d[nb] = 0.0f;
	/* -off * (sum of each 4 consecutive quants), lane by lane: with it each int32 lane of
	 * the unsigned dot product holds exactly the signed sum of its 4 products, as the AVX2
	 * and generic kernels compute them. */
	const __m256i ones8 = _mm256_set1_epi8(1);
	const __m256i ones16 = _mm256_set1_epi16(1);
	for (int64_t b = 0; b < nb; b++) {
		const __m256i q = q8_0_block(x + 32 * b, &d[b], NULL, NULL);
		const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
		if (!is_q4) {
			_mm256_store_si256((__m256i *)(qs + 32 * b), q);
			_mm256_storeu_si256((__m256i *)(corr + 8 * b),
					    _mm256_sub_epi32(_mm256_setzero_si256(),
							     _mm256_slli_epi32(sum4, 7)));
			continue;
		}
		const __m256i c =
			_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum4, 3));
		if (b % 2 == 0 && b + 1 == nb) { /* odd last block: natural order */
			_mm256_store_si256((__m256i *)(qs + 32 * b), q);
			_mm256_storeu_si256((__m256i *)(corr + 8 * b), c);
			continue;
		}
		const int64_t pair = b / 2, half = b % 2;
		int8_t *p = qs + 64 * pair + 16 * half;
		_mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(q));
		_mm_storeu_si128((__m128i *)(p + 32), _mm256_extracti128_si256(q, 1));
		int32_t *cp = corr + 16 * pair + 4 * half;
		_mm_storeu_si128((__m128i *)cp, _mm256_castsi256_si128(c));
		_mm_storeu_si128((__m128i *)(cp + 8), _mm256_extracti128_si256(c, 1));
	}
}

static void avx512_to_a8z_q8(const float *x, void *dst, int64_t n)
{
	a8z_convert(x, dst, n, 0);
}

static void avx512_to_a8z_q4(const float *x, void *dst, int64_t n)
{
	a8z_convert(x, dst, n, 1);
}

static size_t avx512_act8k_bytes(int64_t n)
{
	return act8k_bytes(n);
}

static void avx512_to_act8k_q4_K(const float *x, void *dst, int64_t n)
{
	static const int slots[8] = {0, 2, 1, 3, 4, 6, 5, 7};
	simd_q8_K_row(x, dst, n, slots);
}

static void avx512_to_act8k_q6_K(const float *x, void *dst, int64_t n)
{
	static const int natural[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	simd_q8_K_row(x, dst, n, natural);
}

/* ------------------------------------------------------------------------------------------ */
/* Q8_0 and Q4_0                                                                              */

/* Two weight scales (f16) as f32 in lanes 0 and 1 (for a pair left after the groups of 8). */
static inline __attribute__((always_inline)) __m128 dw_pair(uint16_t a, uint16_t b)
{
	return _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)a | ((uint32_t)b << 16))));
}

/* Weights of a pair of blocks, unsigned: Q8_0 as q + 128 in natural order; Q4_0 as the four
 * nibble runs lo(2p) lo(2p+1) hi(2p) hi(2p+1). */
static inline __attribute__((always_inline)) __m512i w_pair(const uint8_t *w, int64_t b, int is_q4)
{
	if (is_q4) {
		const block_q4_0 *blk = (const block_q4_0 *)w + b;
		const __m256i q = _mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)blk[0].qs)),
			_mm_loadu_si128((const __m128i *)blk[1].qs), 1);
		const __m512i both =
			_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
		return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
	}
	const block_q8_0 *blk = (const block_q8_0 *)w + b;
	const __m512i q = _mm512_inserti64x4(
		_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk[0].qs)),
		_mm256_loadu_si256((const __m256i *)blk[1].qs), 1);
	return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

static inline __attribute__((always_inline)) __m256i w_one(const uint8_t *w, int64_t b, int is_q4)
{
	if (is_q4) {
		const __m128i q = _mm_loadu_si128((const __m128i *)((const block_q4_0 *)w)[b].qs);
		const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
		return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
	}
	const __m256i q = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)w)[b].qs);
	return _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
}

static inline __attribute__((always_inline)) uint16_t w_d(const uint8_t *w, int64_t b, int is_q4)
{
	return is_q4 ? ((const block_q4_0 *)w)[b].d : ((const block_q8_0 *)w)[b].d;
}

/* The int32 lanes a pair's products land in, as indices of its two blocks (0 and 1). */
static inline __attribute__((always_inline)) __m512i pair_spread(int is_q4, int first)
{
	const __m512i q4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
	const __m512i q8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	return _mm512_add_epi32(is_q4 ? q4 : q8, _mm512_set1_epi32(first));
}

/* A pair of blocks (b, b + 1) into accumulator u of every token. dd[t] holds the blocks'
 * d_w * d_x among its low lanes, at lanes `spread` picks for each int32 lane of the product. */
static inline __attribute__((always_inline)) void q8z_pair(const uint8_t *w, int is_q4, int64_t b,
							   const uint8_t *const *x,
							   const int32_t *const *corr,
							   const __m512 *dd, __m512i spread, int nt,
							   __m512 acc[][2], int u)
{
	const __m512i wv = w_pair(w, b, is_q4);
	for (int t = 0; t < nt; t++) {
		const __m512i seed = _mm512_loadu_si512(corr[t] + 8 * b);
		const __m512i xv = _mm512_load_si512(x[t] + 32 * b);
		const __m512i dot = _mm512_dpbusd_epi32(seed, wv, xv);
		const __m512 s = _mm512_permutexvar_ps(spread, dd[t]);
		acc[t][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc[t][u]);
	}
}

/* Eight weight scales (f16, one per block) as eight f32: gathered through two 64-bit words so
 * one conversion serves four pairs. */
static inline __attribute__((always_inline)) __m256 dw_eight(const uint8_t *w, int64_t b, int is_q4)
{
	uint64_t lo = 0, hi = 0;
	for (int k = 0; k < 4; k++) {
		lo |= (uint64_t)w_d(w, b + k, is_q4) << (16 * k);
		hi |= (uint64_t)w_d(w, b + 4 + k, is_q4) << (16 * k);
	}
	return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

static inline __attribute__((always_inline)) void
row_q8z(const uint8_t *w, int is_q4, const uint8_t *const *x, int nt, int64_t nb, float *out)
{
	__m512 acc[TILE][2];
	const int32_t *corr[TILE];
	const float *xd[TILE];
	for (int t = 0; t < TILE; t++) {
		acc[t][0] = acc[t][1] = _mm512_setzero_ps();
		corr[t] = t < nt ? a8z_corr(x[t], nb) : NULL;
		xd[t] = t < nt ? a8z_d(x[t], nb) : NULL;
	}
	const __m512i sp0 = pair_spread(is_q4, 0), sp2 = pair_spread(is_q4, 2);
	const __m512i sp4 = pair_spread(is_q4, 4), sp6 = pair_spread(is_q4, 6);
	__m512 dd[TILE];
	int64_t b = 0;
	for (; b + 8 <= nb; b += 8) {
		const __m256 dw = dw_eight(w, b, is_q4);
		for (int t = 0; t < nt; t++)
			dd[t] = _mm512_castps256_ps512(
				_mm256_mul_ps(dw, _mm256_loadu_ps(xd[t] + b)));
		q8z_pair(w, is_q4, b, x, corr, dd, sp0, nt, acc, 0);
		q8z_pair(w, is_q4, b + 2, x, corr, dd, sp2, nt, acc, 1);
		q8z_pair(w, is_q4, b + 4, x, corr, dd, sp4, nt, acc, 0);
		q8z_pair(w, is_q4, b + 6, x, corr, dd, sp6, nt, acc, 1);
	}
	for (; b + 2 <= nb; b += 2) {
		const __m128 dw = dw_pair(w_d(w, b, is_q4), w_d(w, b + 1, is_q4));
		for (int t = 0; t < nt; t++)
			dd[t] = _mm512_castps128_ps512(_mm_mul_ps(
				dw, _mm_castpd_ps(_mm_load_sd((const double *)(xd[t] + b)))));
		q8z_pair(w, is_q4, b, x, corr, dd, sp0, nt, acc, 0);
	}
	float tail[TILE] = {0};
	if (b < nb) {
		/* The odd last block, natural order in 256 bits. */
		const __m256i wv = w_one(w, b, is_q4);
		const float dw = f16_to_f32(w_d(w, b, is_q4));
		for (int t = 0; t < nt; t++) {
			const __m256i seed = _mm256_loadu_si256((const __m256i *)(corr[t] + 8 * b));
			const __m256i xv = _mm256_load_si256((const __m256i *)(x[t] + 32 * b));
			const __m256i dot = _mm256_dpbusd_epi32(seed, wv, xv);
			tail[t] = hsum_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot),
							_mm256_set1_ps(dw * xd[t][b])));
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = hsum512(_mm512_add_ps(acc[t][0], acc[t][1])) + tail[t];
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K                                                                                       */

static inline __attribute__((always_inline)) void
row_q4_Kz(const block_q4_K *w, const uint8_t *const *x, int nt, int64_t nb, float *out)
{
	__m512 acc[TILE];
	__m256 accm[TILE];
	for (int t = 0; t < TILE; t++) {
		acc[t] = _mm512_setzero_ps();
		accm[t] = _mm256_setzero_ps();
	}
	for (int64_t i = 0; i < nb; i++) {
		struct q4kz u;
		q4kz_unpack(w + i, &u);
		for (int t = 0; t < nt; t++) {
			const uint8_t *xq = x[t] + 256 * i;
			__m512i sumi = _mm512_setzero_si512();
			for (int k = 0; k < 4; k++) {
				const __m512i xv = _mm512_load_si512(xq + 64 * k);
				sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u.wq[k], xv),
							   u.s[k]);
			}
			const __m256i bs = _mm256_loadu_si256(
				(const __m256i *)(act8k_bsums(x[t], nb) + 16 * i));
			/* [d * xd, dmin * xd] */
			const __m128 f = _mm_mul_ps(u.dm, _mm_set1_ps(act8k_d(x[t], nb)[i]));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(f),
						 acc[t]);
			accm[t] =
				_mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, u.mn16)),
						 _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f),
									  _mm256_set1_epi32(1)),
						 accm[t]);
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = hsum512(acc[t]) + hsum_ps(accm[t]);
}

/* ------------------------------------------------------------------------------------------ */
/* Q6_K                                                                                       */

/* The stored (+ 32) quants times x, seeded with -32 * sum_s sc_s * bsum_s (see q6kz_unpack;
 * GGUF's reference AVX2 kernel does the same). */
static inline __attribute__((always_inline)) void
row_q6_Kz(const block_q6_K *w, const uint8_t *const *x, int nt, int64_t nb, float *out)
{
	__m512 acc[TILE];
	for (int t = 0; t < TILE; t++)
		acc[t] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		struct q6kz u;
		q6kz_unpack(w + i, &u);
		for (int t = 0; t < nt; t++) {
			const uint8_t *xq = x[t] + 256 * i;
			const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(
				(const __m256i *)(act8k_bsums(x[t], nb) + 16 * i)));
			__m512i sumi = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs, u.scm32);
			for (int k = 0; k < 4; k++) {
				const __m512i xv = _mm512_load_si512(xq + 64 * k);
				sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u.q[k], xv),
							   u.s[k]);
			}
			acc[t] =
				_mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi),
						_mm512_set1_ps(u.d * act8k_d(x[t], nb)[i]), acc[t]);
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = hsum512(acc[t]);
}

/* ------------------------------------------------------------------------------------------ */
/* Drivers                                                                                    */

#define CALL_Q8_0(NT) row_q8z(w, 0, xr, NT, m->ne0 / 32, out)
#define CALL_Q4_0(NT) row_q8z(w, 1, xr, NT, m->ne0 / 32, out)
#define CALL_Q4_K(NT) row_q4_Kz((const block_q4_K *)w, xr, NT, m->ne0 / 256, out)
#define CALL_Q6_K(NT) row_q6_Kz((const block_q6_K *)w, xr, NT, m->ne0 / 256, out)

SIMD_MM_DRIVER(avx512_mm_q8_0, CALL_Q8_0, TILE)
SIMD_MM_DRIVER(avx512_mm_q4_0, CALL_Q4_0, TILE)
SIMD_MM_DRIVER(avx512_mm_q4_K, CALL_Q4_K, TILE)
SIMD_MM_DRIVER(avx512_mm_q6_K, CALL_Q6_K, TILE)

static float avx512_dot_q8_0(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q8z(w, 0, &xr, 1, n / 32, &out);
	return out;
}

static float avx512_dot_q4_0(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q8z(w, 1, &xr, 1, n / 32, &out);
	return out;
}

static float avx512_dot_q4_K(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q4_Kz(w, &xr, 1, n / 256, &out);
	return out;
}

static float avx512_dot_q6_K(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q6_Kz(w, &xr, 1, n / 256, &out);
	return out;
}

void cpu_kernels_avx512_fill(struct cpu_kernels *k)
{
	k->name = "avx512";
	struct cpu_type_ops *t = k->type;
	t[LM_Q8_0].act_bytes = a8z_bytes;
	t[LM_Q8_0].to_act = avx512_to_a8z_q8;
	t[LM_Q8_0].vec_dot = avx512_dot_q8_0;
	t[LM_Q8_0].mm = avx512_mm_q8_0;
	t[LM_Q4_0].act_bytes = a8z_bytes;
	t[LM_Q4_0].to_act = avx512_to_a8z_q4;
	t[LM_Q4_0].vec_dot = avx512_dot_q4_0;
	t[LM_Q4_0].mm = avx512_mm_q4_0;
	t[LM_Q4_K].act_bytes = avx512_act8k_bytes;
	t[LM_Q4_K].to_act = avx512_to_act8k_q4_K;
	t[LM_Q4_K].vec_dot = avx512_dot_q4_K;
	t[LM_Q4_K].mm = avx512_mm_q4_K;
	t[LM_Q6_K].act_bytes = avx512_act8k_bytes;
	t[LM_Q6_K].to_act = avx512_to_act8k_q6_K;
	t[LM_Q6_K].vec_dot = avx512_dot_q6_K;
	t[LM_Q6_K].mm = avx512_mm_q6_K;
	cpu_matvec_avx512_fill(k, __builtin_cpu_supports("gfni"));
}

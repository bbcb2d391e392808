/* simd_x86.h — the activation layouts the x86 SIMD kernels share (included only by the files
 * compiled with SIMD flags).
 *
 * The values are those of the reference conversions (common/format/quant.c, which the generic
 * kernels take as they are); only the arrangement differs, so loads are aligned and scales need
 * no conversion in the inner loops:
 *
 *   F16 and BF16 weights: x rounded to f16 (bf16) and stored back as f32, n floats.
 *   Q8_0 and Q4_0 weights ("act8"), nb = n / 32 blocks:
 *       int8_t  qs[nb][32]   the quants of quantize_row_q8_0_ref
 *       float   d[nb]        its f16 scale, as f32
 *       int32_t sum[nb]      the sum of each block's quants (for the unsigned-offset dot)
 *   Q4_K and Q6_K weights ("act8k"), nb = n / 256 blocks:
 *       int8_t  qs[nb][256]  the quants of quantize_row_q8_K_ref
 *       float   d[nb]
 *       int16_t bsums[nb][16]
 *   ("gk", the panel matmuls' K-quant activations: act8k in natural order, then
 *       int16_t bs32[nb][8]  the sums of each 32-element sub-block, which Q4_K's mins pair with)
 * A row starts on a 64-byte boundary (the backend rounds the row stride), so qs loads are
 * aligned.
 */
#ifndef LM_SIMD_X86_H
#define LM_SIMD_X86_H

#include <stddef.h>
#include <stdint.h>

static inline size_t act8_bytes(int64_t n)
{
	return (size_t)(n / 32) * (32 + 4 + 4);
}

static inline const float *act8_d(const void *a, int64_t nb)
{
	return (const float *)((const uint8_t *)a + nb * 32);
}

static inline const int32_t *act8_sum(const void *a, int64_t nb)
{
	return (const int32_t *)((const uint8_t *)a + nb * 36);
}

static inline size_t act8k_bytes(int64_t n)
{
	return (size_t)(n / 256) * (256 + 4 + 32);
}

static inline const float *act8k_d(const void *a, int64_t nb)
{
	return (const float *)((const uint8_t *)a + nb * 256);
}

static inline const int16_t *act8k_bsums(const void *a, int64_t nb)
{
	return (const int16_t *)((const uint8_t *)a + nb * 260);
}

static inline size_t gk_bytes(int64_t n)
{
	return act8k_bytes(n) + (size_t)(n / 256) * 16;
}

static inline const int16_t *gk_bs32(const void *a, int64_t nb)
{
	return (const int16_t *)((const uint8_t *)a + act8k_bytes(nb * 256));
}

/* Q4_K's 12 packed bytes to 8 six-bit scales and 8 six-bit mins. Sub-blocks 0-3 keep their
 * 6 bits in bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4 bits in bytes
 * 8-11 (scale low nibble, min high nibble) and their top 2 bits in the top bits of bytes 0-7. */
static inline void simd_q4_K_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8])
{
	uint32_t a, b, c;
	__builtin_memcpy(&a, s, 4);
	__builtin_memcpy(&b, s + 4, 4);
	__builtin_memcpy(&c, s + 8, 4);
	const uint32_t sc_lo = a & 0x3f3f3f3fu;
	const uint32_t sc_hi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
	const uint32_t m_lo = b & 0x3f3f3f3fu;
	const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
	__builtin_memcpy(sc, &sc_lo, 4);
	__builtin_memcpy(sc + 4, &sc_hi, 4);
	__builtin_memcpy(m, &m_lo, 4);
	__builtin_memcpy(m + 4, &m_hi, 4);
}

/* ------------------------------------------------------------------------------------------ */
/* AVX2 helpers shared by the SIMD files (all are built with at least -mavx2 -mfma -mf16c).     */

#ifdef __AVX2__
#include <immintrin.h>
#include <string.h>

#include "common/base/dtype.h"
#include "kernels/cpu/cpu_impl.h"

#define SIMD_INLINE static inline __attribute__((always_inline))

SIMD_INLINE float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

SIMD_INLINE int32_t hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

SIMD_INLINE float hmax_ps(__m256 v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

SIMD_INLINE float f16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}

SIMD_INLINE __m256 abs_ps(__m256 v)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* roundf (half away from zero) for |v| < 2^23: truncate, then step away from zero when the
 * dropped fraction (exact in f32) is at least one half. */
/* Four vectors of 8 int32 in [-128, 127] to 32 int8 in order. */
SIMD_INLINE __m256i pack_i32_i8(__m256i a, __m256i b, __m256i c, __m256i d)
{
	const __m256i ab = _mm256_packs_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
	const __m256i cd = _mm256_packs_epi32(c, d);
	const __m256i abcd = _mm256_packs_epi16(ab, cd); /* a0-3 b0-3 c0-3 d0-3 | a4-7 ... */
	return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* roundf of every lane: half away from zero. The truncation's remainder is exact for the
 * |x| < 2^23 a quantizer sees, so |frac| >= 0.5 decides alone. */
SIMD_INLINE __m256 round_away_ps(__m256 x)
{
	const __m256 t = _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	const __m256 frac = abs_ps(_mm256_sub_ps(x, t));
	const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
	const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f),
					_mm256_and_ps(x, _mm256_set1_ps(-0.0f))); /* +-1 */
	return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* One block of 32 as quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) with 1/d. */
SIMD_INLINE __m256i q8_0_block(const float *x, float *d_out, uint16_t *d16_out, int32_t *sum_out)
{
	__m256 v[4];
	__m256 amax = _mm256_setzero_ps();
	for (int k = 0; k < 4; k++) {
		v[k] = _mm256_loadu_ps(x + 8 * k);
		amax = _mm256_max_ps(amax, abs_ps(v[k]));
	}
	const float am = hmax_ps(amax);
	const float d = am / 127;
	const float id = d != 0.0f ? 1.0f / d : 0.0f; /* lm_quantize_q8_0_ref, bit for bit */
	const uint16_t d16 = lm_f32_to_f16(d);
	if (d_out != NULL)
		*d_out = lm_f16_to_f32(d16);
	if (d16_out != NULL)
		*d16_out = d16;
	const __m256 vid = _mm256_set1_ps(id);
	__m256i q[4];
	for (int k = 0; k < 4; k++)
		q[k] = _mm256_cvtps_epi32(round_away_ps(_mm256_mul_ps(v[k], vid)));
	if (sum_out != NULL)
		*sum_out = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
						       _mm256_add_epi32(q[2], q[3])));
	return pack_i32_i8(q[0], q[1], q[2], q[3]);
}

/* A row as quantize_row_q8_K_ref into the act8k layout: the first value of largest magnitude
 * sets iscale = -127 / max, quants round to nearest even (as the reference's float-adder trick
 * does). Quants of the 32-element group g go to slot[g] of their block (a kernel may want the
 * groups reordered to match its weight layout); bsums stay in natural order. */
SIMD_INLINE void simd_q8_K_row(const float *x, void *dst, int64_t n, const int slot[8])
{
	const int64_t nb = n / 256;
	int8_t *qs = dst;
	float *dd = (float *)act8k_d(dst, nb);
	int16_t *bsums = (int16_t *)act8k_bsums(dst, nb);
	for (int64_t b = 0; b < nb; b++, x += 256) {
		__m256 amax = _mm256_setzero_ps();
		for (int k = 0; k < 32; k++)
			amax = _mm256_max_ps(amax, abs_ps(_mm256_loadu_ps(x + 8 * k)));
		const float am = hmax_ps(amax);
		if (am == 0.0f) {
			memset(qs + 256 * b, 0, 256);
			memset(bsums + 16 * b, 0, 32);
			dd[b] = 0.0f;
			continue;
		}
		const __m256 vam = _mm256_set1_ps(am);
		int first = 0;
		for (int k = 0; k < 32; k++) {
			const int mask = _mm256_movemask_ps(
				_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), vam, _CMP_EQ_OQ));
			if (mask != 0) {
				first = 8 * k + __builtin_ctz((unsigned)mask);
				break;
			}
		}
		const float iscale = -127.f / x[first];
		const __m256 vis = _mm256_set1_ps(iscale);
		const __m256i hi = _mm256_set1_epi32(127);
		for (int g = 0; g < 8; g++) {
			__m256i q[4];
			for (int k = 0; k < 4; k++) {
				const __m256 p =
					_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), vis);
				q[k] = _mm256_min_epi32(
					_mm256_cvtps_epi32(_mm256_round_ps(
						p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
					hi);
			}
			bsums[16 * b + 2 * g] = (int16_t)hsum_epi32(_mm256_add_epi32(q[0], q[1]));
			bsums[16 * b + 2 * g + 1] =
				(int16_t)hsum_epi32(_mm256_add_epi32(q[2], q[3]));
			_mm256_store_si256((__m256i *)(qs + 256 * b + 32 * slot[g]),
					   pack_i32_i8(q[0], q[1], q[2], q[3]));
		}
		dd[b] = 1 / iscale;
	}
}

/* A row into the gk layout (act8k in natural order, then the 32-element sums). */
SIMD_INLINE void simd_gk_row(const float *x, void *dst, int64_t n)
{
	static const int natural[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	const int64_t nb = n / 256;
	simd_q8_K_row(x, dst, n, natural);
	const int16_t *bs = act8k_bsums(dst, nb);
	int16_t *bs32 = (int16_t *)gk_bs32(dst, nb);
	for (int64_t i = 0; i < 8 * nb; i++)
		bs32[i] = (int16_t)(bs[2 * i] + bs[2 * i + 1]);
}

/* ------------------------------------------------------------------------------------------ */
/* The matmul driver shared by the SIMD files                                                 */

/* Each weight row is prefetched into L2 from SIMD_PF_BYTES ahead while the row before it is
 * multiplied. One core has few L1 miss buffers; requests into L2 keep more misses in flight, so
 * a single thread streams weights near the memory's read bandwidth (on a 1 GiB stream here:
 * Q8_0 decode of a 523 MB model went from 20 to 25 tokens/s with L2 prefetches 2 KiB ahead;
 * L1 prefetches or larger distances did no better). */
#define SIMD_PF_BYTES 2048

SIMD_INLINE void simd_prefetch_row(const uint8_t *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch((const char *)p + o, _MM_HINT_T1);
}

/* fn(m, r0, r1): for each weight row, the batch in tiles of up to `tile` (<= 4) tokens, the row
 * kernel `call(NT)` instantiated with a constant token count so its accumulators stay in
 * registers. In scope for call: w (the row), xr (the tile's activation rows), out[4]. */
#define SIMD_MM_DRIVER(fn, call, tile)                                                       \
	static void fn(const struct cpu_mm *m, int64_t r0, int64_t r1)                       \
	{                                                                                    \
		for (int64_t r = r0; r < r1; r++) {                                          \
			const uint8_t *w = m->w + (size_t)r * m->row_bytes;                  \
			if (r + 1 < r1)                                                      \
				simd_prefetch_row(w + SIMD_PF_BYTES, m->row_bytes);          \
			for (int t = 0; t < m->n;) {                                         \
				const uint8_t *xr[4];                                        \
				float out[4];                                                \
				const int left = m->n - t;                                   \
				const int nt = left >= (tile) ? (tile) : left;               \
				for (int k = 0; k < nt; k++)                                 \
					xr[k] = m->x + (size_t)(t + k) * m->x_stride;        \
				switch (nt) {                                                \
				case 4:                                                      \
					call(4);                                             \
					break;                                               \
				case 3:                                                      \
					call(3);                                             \
					break;                                               \
				case 2:                                                      \
					call(2);                                             \
					break;                                               \
				default:                                                     \
					call(1);                                             \
					break;                                               \
				}                                                            \
				for (int k = 0; k < nt; k++)                                 \
					m->y[(size_t)(t + k) * (size_t)m->ne1 + (size_t)r] = \
						out[k];                                      \
				t += nt;                                                     \
			}                                                                    \
		}                                                                            \
	}

#endif /* __AVX2__ */

#endif

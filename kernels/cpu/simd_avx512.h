/* simd_avx512.h — what the AVX-512 kernel files share (included only by files compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512vnni): the activation layout of Q8_0 and Q4_0 weights
 * and the horizontal sum whose order the results depend on.
 *
 * "a8z", for Q8_0 and Q4_0 weights, nb = n / 32 blocks:
 *     int8_t  qs[nb][32]    Q8_0: natural order. Q4_0: each full pair of blocks (2p, 2p+1)
 *                           stored as x_2p[0:16] x_2p+1[0:16] x_2p[16:32] x_2p+1[16:32], the
 *                           order of a 64-byte register of their unpacked nibbles; an odd last
 *                           block stays natural.
 *     int32_t corr[nb][8]   the accumulator seed, lane by lane: -off * the sum of the 4 quants
 *                           that int32 lane multiplies (in the stored order above)
 *     float   d[nb + 1]     the f16 scale as f32 (one spare so pairs load as 64 bits)
 * The weights' quants enter vpdpbusd unsigned (Q8_0 as q + 128, Q4_0 nibbles as stored), and
 * the seed takes the offset back exactly: sum (w + off) x - off sum x = sum w x.
 */
#ifndef LM_SIMD_AVX512_H
#define LM_SIMD_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/simd_x86.h"

static inline size_t a8z_bytes(int64_t n)
{
	const int64_t nb = n / 32;
	return (size_t)nb * (32 + 32 + 4) + 4;
}

static inline const int32_t *a8z_corr(const void *a, int64_t nb)
{
	return (const int32_t *)((const uint8_t *)a + nb * 32);
}

static inline const float *a8z_d(const void *a, int64_t nb)
{
	return (const float *)((const uint8_t *)a + nb * 64);
}

/* The sum of 16 floats: the two 256-bit halves added lane by lane, then hsum_ps. Every kernel
 * reduces a row's accumulators this way, so one-token and batched matmuls agree bit for bit. */
SIMD_INLINE float hsum512(__m512 v)
{
	const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
	return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

#endif

/* simd_avx512.h — what the AVX-512 kernel files share (included only by files compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512vnni): K-quant blocks unpacked for vpdpwssd.
 */
#ifndef LM_SIMD_AVX512_H
#define LM_SIMD_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/format/quant.h"
#include "kernels/cpu/simd_x86.h"

/* Loops over a register's parts, unrolled so their vectors stay in registers. */
#define SIMD_AVX512_UNROLL _Pragma("GCC unroll 16")

/* ------------------------------------------------------------------------------------------ */
/* K-quant blocks unpacked for vpdpwssd against act8k rows (kernels_avx512.c). */

/* int16 scale vector: lanes 0-15 = s[a], lanes 16-31 = s[b] (s in the low 8 int16 of v). */
SIMD_INLINE __m512i q4kz_scale2(__m512i v, int a, int b)
{
	const __m512i idx =
		_mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
	return _mm512_permutexvar_epi16(idx, v);
}

/* A Q4_K block: [d, dmin] as f32, its 8 mins widened to int16 pairs, the nibbles in the act8k
 * group order (x slots [sb0 sb2] [sb1 sb3] [sb4 sb6] [sb5 sb7], 64 bytes each) and the matching
 * int16 scale vectors. */
struct q4kz {
	__m128 dm;
	__m256i mn16;
	__m512i wq[4], s[4];
};

SIMD_INLINE void q4kz_unpack(const block_q4_K *b, struct q4kz *u)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	uint8_t sc[8], mn[8];
	simd_q4_K_scales(b->scales, sc, mn);
	uint32_t ddm; /* d and dmin are adjacent halves: one load, one conversion */
	memcpy(&ddm, &b->d, 4);
	u->dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddm));
	const __m512i sc16 =
		_mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
	const __m128i mn8 = _mm_loadl_epi64((const __m128i *)mn);
	u->mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
	const __m512i q0 = _mm512_loadu_si512(b->qs);
	const __m512i q1 = _mm512_loadu_si512(b->qs + 64);
	u->wq[0] = _mm512_and_si512(q0, m4);
	u->wq[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
	u->wq[2] = _mm512_and_si512(q1, m4);
	u->wq[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
	u->s[0] = q4kz_scale2(sc16, 0, 2);
	u->s[1] = q4kz_scale2(sc16, 1, 3);
	u->s[2] = q4kz_scale2(sc16, 4, 6);
	u->s[3] = q4kz_scale2(sc16, 5, 7);
}

/* int16 scale vector: lanes 8k..8k+7 = s[a + k] for k < 4. */
SIMD_INLINE __m512i q6kz_scale4(__m512i v, int a)
{
	const __m512i idx = _mm512_inserti64x4(
		_mm512_castsi256_si512(
			_mm256_set_m128i(_mm_set1_epi16((short)(a + 1)), _mm_set1_epi16((short)a))),
		_mm256_set_m128i(_mm_set1_epi16((short)(a + 3)), _mm_set1_epi16((short)(a + 2))),
		1);
	return _mm512_permutexvar_epi16(idx, v);
}

/* A Q6_K block: the quants as stored (+ 32, unsigned) in natural order, the int16 scale
 * vectors, -32 x the scales (to seed the accumulator with -32 * sum_s sc_s * bsum_s, which
 * saves unpacking signs) and d. qh is loaded into both halves of a register and shifted per
 * half. */
struct q6kz {
	__m512i scm32;
	__m512i q[4], s[4];
	float d;
};

SIMD_INLINE void q6kz_unpack(const block_q6_K *b, struct q6kz *u)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const __m512i m2 = _mm512_set1_epi8(0x30);
	/* Per 16-bit lane shift counts: low half / high half of the register. */
	const __m512i sh_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i sh_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
	const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
	const __m512i sc16 = _mm512_castsi256_si512(sc16y);
	u->scm32 = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc16y, _mm256_set1_epi16(-32)));
	SIMD_AVX512_UNROLL
	for (int h = 0; h < 2; h++) {
		const __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
		const __m512i qh = _mm512_broadcast_i64x4(
			_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
		/* Groups 0 and 1 take qh bits 0-1 and 2-3 to bits 4-5; groups 2 and 3 bits 4-5
		 * and 6-7. */
		const __m512i ha = _mm512_sllv_epi16(qh, sh_a);
		const __m512i hb = _mm512_srlv_epi16(qh, sh_b);
		u->q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(ha, m2));
		u->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
						  _mm512_and_si512(hb, m2));
	}
	u->s[0] = q6kz_scale4(sc16, 0);
	u->s[1] = q6kz_scale4(sc16, 4);
	u->s[2] = q6kz_scale4(sc16, 8);
	u->s[3] = q6kz_scale4(sc16, 12);
	u->d = f16_to_f32(b->d);
}

#endif

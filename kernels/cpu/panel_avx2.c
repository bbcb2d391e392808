/* panel_avx2.c — the AVX2 set's matmul of Q8_0, Q4_0, Q4_K and Q6_K weights in the panel layout
 * (panel.c), for CPUs without AVX-512 VNNI: panel_tiles.h on 256-bit registers, each group of
 * 16 rows taken as two halves of 8 (a 64-byte panel vector is two 32-byte halves, rows 0-7 and
 * 8-15).
 *
 * Without vpdpbusd, a lane's 4-element dot product is vpmaddubsw (unsigned x signed bytes into
 * int16 pairs) then vpmaddwd with ones (the pairs into int32). vpmaddubsw saturates a pair at
 * 32767: the nibble and 6-bit quants (at most 63 x 127 x 2) never reach it, but Q8_0's stored
 * q + 128 would, so its dot product takes |q| and x with q's sign (at most 128 x 127 x 2 =
 * 32512) and needs no offset back. Every sum is the exact integer of the AVX-512 kernels, and
 * the float steps are the same, so the results are the generic kernels' bit for bit. The rows
 * after a weight's last whole group take the reference-order loops of panel.c.
 *
 * Compiled with -ffp-contract=off: a multiply and an add must round as written.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

#define P_T8      8
#define P_TK      6
#define P_CHUNK   64
#define P_INL     static inline __attribute__((always_inline))

#define PT_W      8
#define PT_HALVES 2
#define PT_Q8_OFF 0
#define PT_INL    P_INL
typedef __m256i pt_vi;
typedef __m256 pt_vf;
#define pt_zero()       _mm256_setzero_si256()
#define pt_zerof()      _mm256_setzero_ps()
#define pt_set1(x)      _mm256_set1_epi32(x)
#define pt_set1_8(x)    _mm256_set1_epi8(x)
#define pt_set1f(x)     _mm256_set1_ps(x)
#define pt_load(p)      _mm256_loadu_si256((const __m256i *)(p))
#define pt_and(a, b)    _mm256_and_si256(a, b)
#define pt_or(a, b)     _mm256_or_si256(a, b)
#define pt_add(a, b)    _mm256_add_epi32(a, b)
#define pt_sub(a, b)    _mm256_sub_epi32(a, b)
#define pt_mullo(a, b)  _mm256_mullo_epi32(a, b)
#define pt_srli16(a, n) _mm256_srli_epi16(a, n)
#define pt_slli16(a, n) _mm256_slli_epi16(a, n)
#define pt_srli32(a, n) _mm256_srli_epi32(a, n)
#define pt_slli32(a, n) _mm256_slli_epi32(a, n)
#define pt_srai32(a, n) _mm256_srai_epi32(a, n)
#define pt_cvt(a)       _mm256_cvtepi32_ps(a)
#define pt_mulf(a, b)   _mm256_mul_ps(a, b)
#define pt_addf(a, b)   _mm256_add_ps(a, b)
#define pt_subf(a, b)   _mm256_sub_ps(a, b)
#define pt_storef(p, v) _mm256_storeu_ps(p, v)
#define pt_halves(p)    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))

P_INL __m256i pt_bcast(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

P_INL __m256 pt_half_lo(__m256i v)
{
	const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
	return _mm256_cvtph_ps(
		_mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)));
}

P_INL __m256i pt_dp(__m256i acc, __m256i w, __m256i x)
{
	const __m256i p16 = _mm256_maddubs_epi16(w, x);
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* Q8_0's stored quants are q + 128: back to q, then |q| times x with q's sign. */
P_INL __m256i pt_dp8(__m256i acc, __m256i w, __m256i x)
{
	const __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
	const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

P_INL __m256i pt_dpw(__m256i acc, __m256i a, __m256i b)
{
	return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#define PT_ROWS(t) cpu_ref_rows_##t
#define PT_FILL    cpu_panel_avx2_fill
#include "kernels/cpu/panel_tiles.h"

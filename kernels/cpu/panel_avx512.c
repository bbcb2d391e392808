/* panel_avx512.c — the AVX-512 set's matmul of Q8_0, Q4_0, Q4_K and Q6_K weights in the panel
 * layout (panel.c), for one token and for a batch alike: one kernel, so a token's result cannot
 * depend on the batch it rides in.
 *
 * A panel vector holds 4 quants of each of 16 rows (lane r = row r). vpdpbusd of it with 4 of a
 * token's activation quants broadcast to every lane adds to each lane the 4-element dot product
 * of its row, so after a block's (or sub-block's) vectors lane r holds row r's exact integer
 * block sum, with no horizontal reduction, and one weight vector serves every token of a tile.
 * The float steps that follow run on 16 rows at once and are the generic kernels', in their
 * order (cpu_impl.h), so every output equals the generic kernel's bit for bit:
 *     Q8_0: acc + (float)sumi * (dw * dx)          Q4_0: acc + ((float)sumi * dw) * dx
 *     Q4_K: acc + ((dw * dx) * (float)sumi - (dmin * dx) * (float)summ)
 *     Q6_K: acc + (dw * dx) * (float)sumi
 * with sumi = sum_j sc_j * dot_j over the K-quants' sub-blocks (vpmulld on the block sums) and
 * summ = sum_j m_j * bsum_j (vpdpwssd on 16-bit pairs). The weights enter vpdpbusd unsigned
 * (Q8_0 stored + 128, the others as they are) and the offset comes back through the activation
 * sums. Rows past the last whole group of 16 go to the set's row kernels (kernels_avx512.c,
 * cpu_avx512_rows_*), which take the same steps.
 *
 * Q8_0 and Q4_0: a tile of up to 8 tokens walks the group's blocks with its accumulators in
 * registers (the group's panel, 16 x row_bytes, stays in L2 across tiles). K-quants: a block's
 * record is first unpacked (nibbles and 6-bit quants to bytes, scales to int32 lanes) into
 * `struct kblk` once for every tile, and the tiles' float accumulators wait in memory between
 * blocks.
 *
 * Compiled with -ffp-contract=off: a multiply and an add must round as written.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

#define P_T8    8  /* tokens per tile, Q8_0 and Q4_0 */
#define P_TK    6  /* tokens per tile, K-quants */
#define P_CHUNK 64 /* tokens whose K-quant accumulators wait in memory at once */

#define P_INL   static inline __attribute__((always_inline))

/* The vector operations panel_tiles.h is written in, on 512-bit registers. */
#define PT_W      16
#define PT_HALVES 1
#define PT_Q8_OFF 128
#define PT_INL    P_INL
typedef __m512i pt_vi;
typedef __m512 pt_vf;
#define pt_zero()       _mm512_setzero_si512()
#define pt_zerof()      _mm512_setzero_ps()
#define pt_set1(x)      _mm512_set1_epi32(x)
#define pt_set1_8(x)    _mm512_set1_epi8(x)
#define pt_set1f(x)     _mm512_set1_ps(x)
#define pt_load(p)      _mm512_loadu_si512(p)
#define pt_and(a, b)    _mm512_and_si512(a, b)
#define pt_or(a, b)     _mm512_or_si512(a, b)
#define pt_add(a, b)    _mm512_add_epi32(a, b)
#define pt_sub(a, b)    _mm512_sub_epi32(a, b)
#define pt_mullo(a, b)  _mm512_mullo_epi32(a, b)
#define pt_srli16(a, n) _mm512_srli_epi16(a, n)
#define pt_slli16(a, n) _mm512_slli_epi16(a, n)
#define pt_srli32(a, n) _mm512_srli_epi32(a, n)
#define pt_slli32(a, n) _mm512_slli_epi32(a, n)
#define pt_srai32(a, n) _mm512_srai_epi32(a, n)
#define pt_cvt(a)       _mm512_cvtepi32_ps(a)
#define pt_mulf(a, b)   _mm512_mul_ps(a, b)
#define pt_addf(a, b)   _mm512_add_ps(a, b)
#define pt_subf(a, b)   _mm512_sub_ps(a, b)
#define pt_storef(p, v) _mm512_storeu_ps(p, v)
#define pt_halves(p)    _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define pt_half_lo(v)   _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v))
#define pt_dp(a, w, x)  _mm512_dpbusd_epi32(a, w, x)
#define pt_dp8(a, w, x) _mm512_dpbusd_epi32(a, w, x)
#define pt_dpw(a, x, y) _mm512_dpwssd_epi32(a, x, y)
#define PT_I16          0

P_INL __m512i pt_bcast(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

#define PT_ROWS(t) cpu_avx512_rows_##t
#define PT_FILL    cpu_panel_avx512_fill
#include "kernels/cpu/panel_tiles.h"

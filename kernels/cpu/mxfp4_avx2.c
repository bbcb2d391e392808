/* mxfp4_avx2.c — the AVX2 set's MXFP4 matmul (built with -ffp-contract=off, like panel_avx2.c).
 *
 * A weight block's 32 codes become their doubled E2M1 values with one byte shuffle of the
 * 16-entry table per nibble half, and multiply a token's Q8_0 activation block (the set's act8
 * layout, simd_x86.h) with maddubs of |w| and the sign-adjusted x, then madd: the exact integer
 * sum of the block. The float step that follows is the generic kernel's, in its order
 * (cpu_impl.h: sum + (float)sumi * (dw * dx)), per token and block, so the result equals
 * cpu_vec_dot_mxfp4_generic bit for bit whatever the batch. A weight block is unpacked once for
 * up to four tokens.
 */
#include <immintrin.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

#define MX_TILE 4

/* The 32 doubled values of block b, element j in byte j (low nibbles, then high). */
SIMD_INLINE __m256i mx_unpack(const block_mxfp4 *b, __m128i table)
{
	const __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
	const __m128i m4 = _mm_set1_epi8(0x0f);
	const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m4));
	const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
	return _mm256_set_m128i(hi, lo);
}

SIMD_INLINE void row_mxfp4(const block_mxfp4 *w, const uint8_t *const *x, int nt, int64_t nb,
			   float *out)
{
	const __m128i table = _mm_loadu_si128((const __m128i *)lm_mxfp4_values);
	const __m256i ones = _mm256_set1_epi16(1);
	float sum[MX_TILE] = {0};
	const float *xd[MX_TILE];
	for (int t = 0; t < nt; t++)
		xd[t] = act8_d(x[t], nb);
	for (int64_t b = 0; b < nb; b++) {
		const __m256i wv = mx_unpack(w + b, table);
		const __m256i aw = _mm256_abs_epi8(wv);
		const float dw = lm_e8m0_half(w[b].e);
		for (int t = 0; t < nt; t++) {
			const __m256i xv = _mm256_load_si256((const __m256i *)(x[t] + 32 * b));
			const __m256i p = _mm256_madd_epi16(
				_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones);
			const int32_t sumi = hsum_epi32(p);
			sum[t] = sum[t] + (float)sumi * (dw * xd[t][b]);
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = sum[t];
}

#define CALL_MXFP4(NT) row_mxfp4((const block_mxfp4 *)w, xr, NT, m->ne0 / QK_MXFP4, out)

SIMD_MM_DRIVER(avx2_mm_mxfp4, CALL_MXFP4, MX_TILE)

static float avx2_dot_mxfp4(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_mxfp4(w, &xr, 1, n / QK_MXFP4, &out);
	return out;
}

void cpu_mxfp4_avx2_fill(struct cpu_kernels *k)
{
	k->type[LM_MXFP4] = (struct cpu_type_ops){
		.act_bytes = k->type[LM_Q8_0].act_bytes,
		.to_act = k->type[LM_Q8_0].to_act,
		.vec_dot = avx2_dot_mxfp4,
		.mm = avx2_mm_mxfp4,
	};
}

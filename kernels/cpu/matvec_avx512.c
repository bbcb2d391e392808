/* matvec_avx512.c — one-token matmul (decode) kernels of the AVX-512 set.
 *
 * Decoding a token multiplies every weight once: the matmul streams the weights from memory,
 * and its speed is how many bytes one core keeps in flight while it computes. These kernels
 * differ from the batched row kernels of kernels_avx512.c in how they walk the weights, never in
 * the arithmetic:
 *   - MV_ROWS rows at a time, each an independent sequential stream: a core's prefetchers follow
 *     several streams at once, so more misses are in flight than one stream draws, and the
 *     activation's loads serve every row of the group.
 *   - Software prefetches into L2 a fixed distance ahead in each stream, carried on into the
 *     next group of rows when a row ends.
 *   - Q4_0 takes its pair of blocks from one 64-byte load and one word permute instead of two
 *     loads and two inserts.
 * Each row goes through exactly the float operations of the batched kernel for one token, in the
 * same order (the same per-block scale products, the same accumulator per block, the same
 * reduction), so a sequence decodes to the same bits alone or in a batch.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_x86.h"

/* Rows multiplied together (the drivers also call the kernels with 1-3 for a remainder). */
#define MV_ROWS 4
/* How far ahead of each stream the L2 prefetches run, in bytes. */
#define MV_PF_BYTES 1024
/* The row and block loops have constant trip counts; unrolled, the accumulators stay in
 * registers (GCC otherwise keeps them on the stack, a store and a load on every block). */
#define MV_UNROLL _Pragma("GCC unroll 8")

/* Prefetches `lines` cache lines of the row starting at `row`, MV_PF_BYTES past offset `off`;
 * past the row's end the same row of the next group (R rows of rb bytes further on). Prefetches
 * never fault, so running past the matrix is harmless. */
SIMD_INLINE void mv_prefetch(const uint8_t *row, size_t off, size_t rb, int R, int lines)
{
	const size_t o = off + MV_PF_BYTES;
	const uint8_t *p = row + o + (o >= rb ? (size_t)(R - 1) * rb : 0);
	for (int l = 0; l < lines; l++)
		_mm_prefetch((const char *)p + 64 * l, _MM_HINT_T1);
}

/* ------------------------------------------------------------------------------------------ */
/* Q8_0 and Q4_0 (a8z activations)                                                            */

SIMD_INLINE uint16_t q8z_d(const uint8_t *w, int64_t b, int is_q4)
{
	uint16_t d;
	memcpy(&d, w + b * (is_q4 ? (int64_t)sizeof(block_q4_0) : (int64_t)sizeof(block_q8_0)), 2);
	return d;
}

/* The scales of blocks b..b+7 as f32, packed into two 64-bit words for one conversion. */
SIMD_INLINE __m256 q8z_dw8(const uint8_t *w, int64_t b, int is_q4)
{
	uint64_t lo = 0, hi = 0;
	for (int k = 0; k < 4; k++) {
		lo |= (uint64_t)q8z_d(w, b + k, is_q4) << (16 * k);
		hi |= (uint64_t)q8z_d(w, b + 4 + k, is_q4) << (16 * k);
	}
	return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* Q4_0 blocks b and b + 1 as unsigned nibbles in a8z order (lo(b) lo(b+1) hi(b) hi(b+1)), from
 * one 64-byte load: the two blocks' quants are words 1-8 and 10-17 of it. The load reads up to
 * 28 bytes past the pair, so the caller keeps it inside the matrix. */
SIMD_INLINE __m512i q4_pair_wide(const uint8_t *w, int64_t b, __m512i idx)
{
	const __m512i raw = _mm512_loadu_si512(w + b * (int64_t)sizeof(block_q4_0));
	const __m512i q = _mm512_permutexvar_epi16(idx, raw);
	const __m512i s = _mm512_mask_srli_epi16(q, (__mmask32)0xffff0000u, q, 4);
	return _mm512_and_si512(s, _mm512_set1_epi8(0x0f));
}

/* The same from two 16-byte loads that stay inside the pair. */
SIMD_INLINE __m512i q4_pair_exact(const uint8_t *w, int64_t b)
{
	const block_q4_0 *blk = (const block_q4_0 *)w + b;
	const __m256i q = _mm256_inserti128_si256(
		_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)blk[0].qs)),
		_mm_loadu_si128((const __m128i *)blk[1].qs), 1);
	const __m512i both =
		_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
	return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
}

/* Q8_0 blocks b and b + 1 as q + 128. */
SIMD_INLINE __m512i q8_pair(const uint8_t *w, int64_t b)
{
	const block_q8_0 *blk = (const block_q8_0 *)w + b;
	const __m512i q = _mm512_inserti64x4(
		_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk[0].qs)),
		_mm256_loadu_si256((const __m256i *)blk[1].qs), 1);
	return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

SIMD_INLINE __m256i q8z_one(const uint8_t *w, int64_t b, int is_q4)
{
	if (is_q4) {
		const __m128i q = _mm_loadu_si128((const __m128i *)((const block_q4_0 *)w)[b].qs);
		const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
		return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
	}
	const __m256i q = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)w)[b].qs);
	return _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
}

/* The int32 lanes of a pair's products as indices of its two blocks among 8 (first, first+1). */
SIMD_INLINE __m512i q8z_spread(int is_q4, int first)
{
	const __m512i q4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
	const __m512i q8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	return _mm512_add_epi32(is_q4 ? q4 : q8, _mm512_set1_epi32(first));
}

/* R consecutive rows of rb bytes at w against one a8z row x; out[r] for each. `exact`: Q4_0
 * pairs loaded without reading past them (the matrix's last row). */
SIMD_INLINE void mv_q8z(const uint8_t *w, size_t rb, const int R, const int is_q4, const int exact,
			const uint8_t *x, int64_t nb, float *out)
{
	static const uint16_t q4_words[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12,
					      13, 14, 15, 16, 17, 1,  2,  3,  4,  5,  6,
					      7,  8,  10, 11, 12, 13, 14, 15, 16, 17};
	const __m512i idx = _mm512_loadu_si512(q4_words);
	const int32_t *corr = a8z_corr(x, nb);
	const float *xd = a8z_d(x, nb);
	const size_t bsz = is_q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
	const int lines = is_q4 ? 3 : 5; /* cache lines of 8 blocks, rounded up */
	const __m512i sp[4] = {q8z_spread(is_q4, 0), q8z_spread(is_q4, 2), q8z_spread(is_q4, 4),
			       q8z_spread(is_q4, 6)};
	__m512 acc[MV_ROWS][2];
	for (int r = 0; r < R; r++)
		acc[r][0] = acc[r][1] = _mm512_setzero_ps();
	int64_t b = 0;
	for (; b + 8 <= nb; b += 8) {
		MV_UNROLL
		for (int r = 0; r < R; r++)
			mv_prefetch(w + (size_t)r * rb, (size_t)b * bsz, rb, R, lines);
		const __m256 xd8 = _mm256_loadu_ps(xd + b);
		MV_UNROLL
		for (int r = 0; r < R; r++) {
			const uint8_t *wr = w + (size_t)r * rb;
			const __m512 dd =
				_mm512_castps256_ps512(_mm256_mul_ps(q8z_dw8(wr, b, is_q4), xd8));
			MV_UNROLL
			for (int p = 0; p < 4; p++) {
				const int64_t bp = b + 2 * p;
				const __m512i wv = !is_q4  ? q8_pair(wr, bp)
						   : exact ? q4_pair_exact(wr, bp)
							   : q4_pair_wide(wr, bp, idx);
				const __m512i dot =
					_mm512_dpbusd_epi32(_mm512_loadu_si512(corr + 8 * bp), wv,
							    _mm512_load_si512(x + 32 * bp));
				acc[r][p & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
								_mm512_permutexvar_ps(sp[p], dd),
								acc[r][p & 1]);
			}
		}
	}
	for (; b + 2 <= nb; b += 2) {
		const __m128 xd2 = _mm_castpd_ps(_mm_load_sd((const double *)(xd + b)));
		for (int r = 0; r < R; r++) {
			const uint8_t *wr = w + (size_t)r * rb;
			const uint32_t d2 = (uint32_t)q8z_d(wr, b, is_q4) |
					    ((uint32_t)q8z_d(wr, b + 1, is_q4) << 16);
			const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128((int)d2));
			const __m512 dd = _mm512_castps128_ps512(_mm_mul_ps(dw, xd2));
			const __m512i wv = is_q4 ? q4_pair_exact(wr, b) : q8_pair(wr, b);
			const __m512i dot = _mm512_dpbusd_epi32(_mm512_loadu_si512(corr + 8 * b),
								wv, _mm512_load_si512(x + 32 * b));
			acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
						    _mm512_permutexvar_ps(sp[0], dd), acc[r][0]);
		}
	}
	for (int r = 0; r < R; r++) {
		const uint8_t *wr = w + (size_t)r * rb;
		float tail = 0.0f;
		if (b < nb) { /* the odd last block, natural order in 256 bits */
			const __m256i dot = _mm256_dpbusd_epi32(
				_mm256_loadu_si256((const __m256i *)(corr + 8 * b)),
				q8z_one(wr, b, is_q4),
				_mm256_load_si256((const __m256i *)(x + 32 * b)));
			const float dw = f16_to_f32(q8z_d(wr, b, is_q4));
			tail = hsum_ps(
				_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xd[b])));
		}
		out[r] = hsum512(_mm512_add_ps(acc[r][0], acc[r][1])) + tail;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K (act8k activations, 32-element groups stored 0 2 1 3 4 6 5 7)                          */

/* int16 scale vector: lanes 0-15 = s[a], lanes 16-31 = s[b] (s in the low 8 int16 of v). */
SIMD_INLINE __m512i q4k_scale2(__m512i v, int a, int b)
{
	const __m512i idx =
		_mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
	return _mm512_permutexvar_epi16(idx, v);
}

/* R consecutive Q4_K rows against one act8k row (the batched kernel's arithmetic per row). */
SIMD_INLINE void mv_q4_K(const uint8_t *w, size_t rb, const int R, const uint8_t *x, int64_t nb,
			 float *out)
{
	const float *xd = act8k_d(x, nb);
	const int16_t *xs = act8k_bsums(x, nb);
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	__m512 acc[MV_ROWS];
	__m256 accm[MV_ROWS];
	for (int r = 0; r < R; r++) {
		acc[r] = _mm512_setzero_ps();
		accm[r] = _mm256_setzero_ps();
	}
	for (int64_t i = 0; i < nb; i++) {
		MV_UNROLL
		for (int r = 0; r < R; r++)
			mv_prefetch(w + (size_t)r * rb, (size_t)i * sizeof(block_q4_K), rb, R, 3);
		const uint8_t *xq = x + 256 * i;
		__m512i xv[4];
		for (int k = 0; k < 4; k++)
			xv[k] = _mm512_load_si512(xq + 64 * k);
		const __m256i bs = _mm256_loadu_si256((const __m256i *)(xs + 16 * i));
		const __m128 vxd = _mm_set1_ps(xd[i]);
		MV_UNROLL
		for (int r = 0; r < R; r++) {
			const block_q4_K *blk = (const block_q4_K *)(w + (size_t)r * rb) + i;
			uint8_t sc[8], mn[8];
			simd_q4_K_scales(blk->scales, sc, mn);
			uint32_t ddm; /* d and dmin, adjacent halves */
			memcpy(&ddm, &blk->d, 4);
			const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddm));
			const __m512i sc16 = _mm512_castsi128_si512(
				_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
			const __m128i mn8 = _mm_loadl_epi64((const __m128i *)mn);
			const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
			const __m512i q0 = _mm512_loadu_si512(blk->qs);
			const __m512i q1 = _mm512_loadu_si512(blk->qs + 64);
			const __m512i wq[4] = {
				_mm512_and_si512(q0, m4),
				_mm512_and_si512(_mm512_srli_epi16(q0, 4), m4),
				_mm512_and_si512(q1, m4),
				_mm512_and_si512(_mm512_srli_epi16(q1, 4), m4),
			};
			const __m512i sv[4] = {q4k_scale2(sc16, 0, 2), q4k_scale2(sc16, 1, 3),
					       q4k_scale2(sc16, 4, 6), q4k_scale2(sc16, 5, 7)};
			__m512i sumi = _mm512_setzero_si512();
			for (int k = 0; k < 4; k++)
				sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(wq[k], xv[k]),
							   sv[k]);
			const __m128 f = _mm_mul_ps(dm, vxd); /* [d * xd, dmin * xd] */
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(f),
						 acc[r]);
			accm[r] =
				_mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mn16)),
						 _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f),
									  _mm256_set1_epi32(1)),
						 accm[r]);
		}
	}
	for (int r = 0; r < R; r++)
		out[r] = hsum512(acc[r]) + hsum_ps(accm[r]);
}

/* ------------------------------------------------------------------------------------------ */
/* Q6_K (act8k activations, natural order)                                                    */

/* int16 scale vector: lanes 8k..8k+7 = s[a + k] for k < 4. */
SIMD_INLINE __m512i q6k_scale4(__m512i v, int a)
{
	const __m512i idx = _mm512_inserti64x4(
		_mm512_castsi256_si512(
			_mm256_set_m128i(_mm_set1_epi16((short)(a + 1)), _mm_set1_epi16((short)a))),
		_mm256_set_m128i(_mm_set1_epi16((short)(a + 3)), _mm_set1_epi16((short)(a + 2))),
		1);
	return _mm512_permutexvar_epi16(idx, v);
}

/* R consecutive Q6_K rows against one act8k row. Quants are stored + 32: the unsigned stored
 * quants are multiplied and the accumulator seeded with -32 * sum_s sc_s * bsum_s. */
SIMD_INLINE void mv_q6_K(const uint8_t *w, size_t rb, const int R, const uint8_t *x, int64_t nb,
			 float *out)
{
	const float *xd = act8k_d(x, nb);
	const int16_t *xs = act8k_bsums(x, nb);
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const __m512i m2 = _mm512_set1_epi8(0x30);
	/* Per 16-bit lane shift counts: low half / high half of the register. */
	const __m512i sh_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i sh_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
	__m512 acc[MV_ROWS];
	for (int r = 0; r < R; r++)
		acc[r] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		MV_UNROLL
		for (int r = 0; r < R; r++)
			mv_prefetch(w + (size_t)r * rb, (size_t)i * sizeof(block_q6_K), rb, R, 4);
		const uint8_t *xq = x + 256 * i;
		__m512i xv[4];
		for (int k = 0; k < 4; k++)
			xv[k] = _mm512_load_si512(xq + 64 * k);
		const __m512i bs =
			_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xs + 16 * i)));
		const float xdi = xd[i];
		MV_UNROLL
		for (int r = 0; r < R; r++) {
			const block_q6_K *blk = (const block_q6_K *)(w + (size_t)r * rb) + i;
			const __m256i sc16y =
				_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
			const __m512i sc16 = _mm512_castsi256_si512(sc16y);
			const __m512i scm32 = _mm512_zextsi256_si512(
				_mm256_mullo_epi16(sc16y, _mm256_set1_epi16(-32)));
			__m512i q[4];
			for (int h = 0; h < 2; h++) {
				const __m512i l = _mm512_loadu_si512(blk->ql + 64 * h);
				const __m512i qh = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h)));
				const __m512i ha = _mm512_sllv_epi16(qh, sh_a);
				const __m512i hb = _mm512_srlv_epi16(qh, sh_b);
				q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4),
							   _mm512_and_si512(ha, m2));
				q[2 * h + 1] = _mm512_or_si512(
					_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
					_mm512_and_si512(hb, m2));
			}
			const __m512i sv[4] = {q6k_scale4(sc16, 0), q6k_scale4(sc16, 4),
					       q6k_scale4(sc16, 8), q6k_scale4(sc16, 12)};
			__m512i sumi = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs, scm32);
			for (int k = 0; k < 4; k++)
				sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[k], xv[k]),
							   sv[k]);
			const float d = f16_to_f32(blk->d);
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d * xdi),
						 acc[r]);
		}
	}
	for (int r = 0; r < R; r++)
		out[r] = hsum512(acc[r]);
}

/* ------------------------------------------------------------------------------------------ */
/* Drivers                                                                                    */

/* Rows [r0, r1) in groups of MV_ROWS, then the rest one group of 1-3. The matrix's last row goes
 * alone through the `exact` variant when the wide loads could read past the matrix. */
#define MV_DRIVER(fn, call, wide)                                         \
	static void fn(const struct cpu_mm *m, int64_t r0, int64_t r1)    \
	{                                                                 \
		const int64_t end = (wide) && r1 == m->ne1 ? r1 - 1 : r1; \
		int64_t r = r0;                                           \
		for (; r + MV_ROWS <= end; r += MV_ROWS)                  \
			call(r, MV_ROWS, 0);                              \
		switch (end - r) {                                        \
		case 3:                                                   \
			call(r, 3, 0);                                    \
			break;                                            \
		case 2:                                                   \
			call(r, 2, 0);                                    \
			break;                                            \
		case 1:                                                   \
			call(r, 1, 0);                                    \
			break;                                            \
		default:                                                  \
			break;                                            \
		}                                                         \
		if (end < r1)                                             \
			call(end, 1, 1);                                  \
	}

#define CALL_Q8_0(r, R, ex)                                                                \
	mv_q8z(m->w + (size_t)(r)*m->row_bytes, m->row_bytes, R, 0, ex, m->x, m->ne0 / 32, \
	       m->y + (r))
#define CALL_Q4_0(r, R, ex)                                                                \
	mv_q8z(m->w + (size_t)(r)*m->row_bytes, m->row_bytes, R, 1, ex, m->x, m->ne0 / 32, \
	       m->y + (r))

#define CALL_Q4_K(r, R, ex) \
	mv_q4_K(m->w + (size_t)(r)*m->row_bytes, m->row_bytes, R, m->x, m->ne0 / 256, m->y + (r))
#define CALL_Q6_K(r, R, ex) \
	mv_q6_K(m->w + (size_t)(r)*m->row_bytes, m->row_bytes, R, m->x, m->ne0 / 256, m->y + (r))

MV_DRIVER(avx512_mv_q8_0, CALL_Q8_0, 0)
MV_DRIVER(avx512_mv_q4_0, CALL_Q4_0, 1)
MV_DRIVER(avx512_mv_q4_K, CALL_Q4_K, 0)
MV_DRIVER(avx512_mv_q6_K, CALL_Q6_K, 0)

void cpu_matvec_avx512_fill(struct cpu_kernels *k)
{
	k->type[LM_Q8_0].mv = avx512_mv_q8_0;
	k->type[LM_Q4_0].mv = avx512_mv_q4_0;
	k->type[LM_Q4_K].mv = avx512_mv_q4_K;
	k->type[LM_Q6_K].mv = avx512_mv_q6_K;
}

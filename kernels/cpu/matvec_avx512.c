/* matvec_avx512.c — one-token matmul (decode) kernels of the AVX-512 set.
 *
 * Decoding a token multiplies every weight once: the matmul streams the weights from memory,
 * and its speed is how many bytes one core keeps in flight while it computes. These kernels
 * differ from the batched row kernels of kernels_avx512.c in how they walk the weights, never in
 * the arithmetic:
 *   - One row at a time, software prefetches into L2 MV_PF_BYTES ahead of the stream (into the
 *     next row, and past the matrix's end into whatever tensor follows). The hardware
 *     prefetchers alone leave a core well short of the memory's read bandwidth; L2 prefetches
 *     keep more misses in flight than the L1's fill buffers allow.
 *   - Q4_0 takes its pair of blocks from one 64-byte load and one word permute instead of two
 *     loads and two inserts.
 * Each row goes through exactly the float operations of the batched kernel for one token, in the
 * same order (the same per-block scale products, the same accumulator per block, the same
 * reduction), so a sequence decodes to the same bits alone or in a batch of the avx512 set (the
 * amx set's GEMM sums batches in the generic order instead; cpu_impl.h, struct cpu_gemm_ops).
 *
 * Measured on the 2-vCPU Sapphire Rapids VM (bench/RESULTS.md, "Decode kernels"): 3 KiB ahead
 * streamed best for every type (2 KiB and 3.5 KiB within a few percent, 4 KiB and 1 KiB 5-15%
 * slower); walking 2 or 4 rows at once as parallel streams sharing the activation loads was
 * 5-15% slower than one row, and prefetching into L1 or with NTA slower than into L2.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_x86.h"

/* How far ahead of the weight stream the L2 prefetches run, in bytes. Not a multiple of 4 KiB:
 * 4 KiB ahead measured 5-10% slower than 3 KiB. */
#define MV_PF_BYTES 3072
/* The block loops have constant trip counts; unrolled, the accumulators stay in registers (GCC
 * otherwise keeps them on the stack, a store and a load on every block). */
#define MV_UNROLL _Pragma("GCC unroll 8")

/* Prefetches `lines` cache lines from MV_PF_BYTES past p. Prefetches never fault, so running
 * past the matrix is harmless. */
SIMD_INLINE void mv_prefetch(const uint8_t *p, int lines)
{
	for (int l = 0; l < lines; l++)
		_mm_prefetch((const char *)p + MV_PF_BYTES + 64 * l, _MM_HINT_T1);
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

/* Q4_0 blocks b and b + 1 as their quants in a8z order, qs(b) qs(b + 1) qs(b) qs(b + 1) by
 * 128-bit lane: one broadcast load of qs(b) into every lane, one masked broadcast of qs(b + 1)
 * over lanes 1 and 3. Plain loads would straddle the 18-byte blocks' scales; these cost a load
 * and a blend, no shuffle. */
SIMD_INLINE __m512i q4_pair_raw(const uint8_t *w, int64_t b)
{
	const block_q4_0 *blk = (const block_q4_0 *)w + b;
	const __m512i q0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)blk[0].qs));
	return _mm512_mask_broadcast_i32x4(q0, (__mmask16)0xf0f0,
					   _mm_loadu_si128((const __m128i *)blk[1].qs));
}

/* The pair as unsigned nibbles, lo(b) lo(b + 1) hi(b) hi(b + 1). */
SIMD_INLINE __m512i q4_pair(const uint8_t *w, int64_t b)
{
	const __m512i q = q4_pair_raw(w, b);
	const __m512i s = _mm512_mask_srli_epi16(q, (__mmask32)0xffff0000u, q, 4);
	return _mm512_and_si512(s, _mm512_set1_epi8(0x0f));
}

/* The same with GFNI: one affine byte transform, a bit matrix per 64-bit lane, takes the low
 * nibble in lanes 0-1 and the high nibble down in lanes 2-3 (one instruction for the shift and
 * the mask; 4% faster streaming). Callers are compiled for GFNI. */
SIMD_INLINE __attribute__((target("gfni"))) __m512i q4_pair_gfni(const uint8_t *w, int64_t b)
{
	const long long lo = 0x0102040800000000ll, hi = 0x1020408000000000ll;
	const __m512i m = _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
	return _mm512_gf2p8affine_epi64_epi8(q4_pair_raw(w, b), m, 0);
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

/* How a kernel unpacks a pair of blocks (q8_pair, q4_pair or q4_pair_gfni). */
typedef __m512i (*mv_pair_fn)(const uint8_t *w, int64_t b);

/* One Q8_0 or Q4_0 row w against one a8z row x, its pairs of blocks unpacked by `pair` (a
 * constant, so the call inlines; a function of its own lets the GFNI one be compiled for GFNI
 * alone). */
SIMD_INLINE float mv_q8z(const uint8_t *w, const int is_q4, const mv_pair_fn pair, const uint8_t *x,
			 int64_t nb)
{
	const int32_t *corr = a8z_corr(x, nb);
	const float *xd = a8z_d(x, nb);
	const size_t bsz = is_q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
	const int lines = is_q4 ? 3 : 5; /* cache lines of 8 blocks, rounded up */
	const __m512i sp[4] = {q8z_spread(is_q4, 0), q8z_spread(is_q4, 2), q8z_spread(is_q4, 4),
			       q8z_spread(is_q4, 6)};
	__m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
	int64_t b = 0;
	for (; b + 8 <= nb; b += 8) {
		mv_prefetch(w + (size_t)b * bsz, lines);
		const __m512 dd = _mm512_castps256_ps512(
			_mm256_mul_ps(q8z_dw8(w, b, is_q4), _mm256_loadu_ps(xd + b)));
		MV_UNROLL
		for (int p = 0; p < 4; p++) {
			const int64_t bp = b + 2 * p;
			const __m512i wv = pair(w, bp);
			const __m512i dot = _mm512_dpbusd_epi32(_mm512_loadu_si512(corr + 8 * bp),
								wv, _mm512_load_si512(x + 32 * bp));
			acc[p & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
						     _mm512_permutexvar_ps(sp[p], dd), acc[p & 1]);
		}
	}
	for (; b + 2 <= nb; b += 2) {
		const uint32_t d2 =
			(uint32_t)q8z_d(w, b, is_q4) | ((uint32_t)q8z_d(w, b + 1, is_q4) << 16);
		const __m128 dw = _mm_cvtph_ps(_mm_cvtsi32_si128((int)d2));
		const __m512 dd = _mm512_castps128_ps512(
			_mm_mul_ps(dw, _mm_castpd_ps(_mm_load_sd((const double *)(xd + b)))));
		const __m512i wv = pair(w, b);
		const __m512i dot = _mm512_dpbusd_epi32(_mm512_loadu_si512(corr + 8 * b), wv,
							_mm512_load_si512(x + 32 * b));
		acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(sp[0], dd),
					 acc[0]);
	}
	float tail = 0.0f;
	if (b < nb) { /* the odd last block, natural order in 256 bits */
		const __m256i dot = _mm256_dpbusd_epi32(
			_mm256_loadu_si256((const __m256i *)(corr + 8 * b)), q8z_one(w, b, is_q4),
			_mm256_load_si256((const __m256i *)(x + 32 * b)));
		const float dw = f16_to_f32(q8z_d(w, b, is_q4));
		tail = hsum_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xd[b])));
	}
	return hsum512(_mm512_add_ps(acc[0], acc[1])) + tail;
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K (act8k activations, 32-element groups stored 0 2 1 3 4 6 5 7)                          */

/* One Q4_K row against one act8k row (the batched kernel's arithmetic). */
SIMD_INLINE float mv_q4_K(const block_q4_K *w, const uint8_t *x, int64_t nb)
{
	const float *xd = act8k_d(x, nb);
	const int16_t *xs = act8k_bsums(x, nb);
	__m512 acc = _mm512_setzero_ps();
	__m256 accm = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		mv_prefetch((const uint8_t *)(w + i), 3);
		struct q4kz u;
		q4kz_unpack(w + i, &u);
		const uint8_t *xq = x + 256 * i;
		__m512i sumi = _mm512_setzero_si512();
		MV_UNROLL
		for (int k = 0; k < 4; k++)
			sumi = _mm512_dpwssd_epi32(
				sumi, _mm512_maddubs_epi16(u.wq[k], _mm512_load_si512(xq + 64 * k)),
				u.s[k]);
		const __m256i bs = _mm256_loadu_si256((const __m256i *)(xs + 16 * i));
		const __m128 f = _mm_mul_ps(u.dm, _mm_set1_ps(xd[i])); /* [d * xd, dmin * xd] */
		acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(f), acc);
		accm = _mm256_fnmadd_ps(
			_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, u.mn16)),
			_mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_set1_epi32(1)),
			accm);
	}
	return hsum512(acc) + hsum_ps(accm);
}

/* ------------------------------------------------------------------------------------------ */
/* Q6_K (act8k activations, natural order)                                                    */

/* One Q6_K row against one act8k row. Quants are stored + 32: the unsigned stored quants are
 * multiplied and the accumulator seeded with -32 * sum_s sc_s * bsum_s. */
SIMD_INLINE float mv_q6_K(const block_q6_K *w, const uint8_t *x, int64_t nb)
{
	const float *xd = act8k_d(x, nb);
	const int16_t *xs = act8k_bsums(x, nb);
	__m512 acc = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		mv_prefetch((const uint8_t *)(w + i), 4);
		struct q6kz u;
		q6kz_unpack(w + i, &u);
		const uint8_t *xq = x + 256 * i;
		const __m512i bs =
			_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xs + 16 * i)));
		__m512i sumi = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs, u.scm32);
		MV_UNROLL
		for (int k = 0; k < 4; k++)
			sumi = _mm512_dpwssd_epi32(
				sumi, _mm512_maddubs_epi16(u.q[k], _mm512_load_si512(xq + 64 * k)),
				u.s[k]);
		acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(u.d * xd[i]), acc);
	}
	return hsum512(acc);
}

/* ------------------------------------------------------------------------------------------ */
/* Drivers                                                                                    */

/* Rows [r0, r1), each y[r] = row r . x; `attr`: the function's target attributes. */
#define MV_DRIVER(fn, attr, dot)                                            \
	static attr void fn(const struct cpu_mm *m, int64_t r0, int64_t r1) \
	{                                                                   \
		for (int64_t r = r0; r < r1; r++) {                         \
			const uint8_t *w = m->w + (size_t)r * m->row_bytes; \
			m->y[r] = dot;                                      \
		}                                                           \
	}

MV_DRIVER(avx512_mv_q8_0, , mv_q8z(w, 0, q8_pair, m->x, m->ne0 / 32))
MV_DRIVER(avx512_mv_q4_0, , mv_q8z(w, 1, q4_pair, m->x, m->ne0 / 32))
MV_DRIVER(avx512_mv_q4_0_gfni, __attribute__((target("gfni"))),
	  mv_q8z(w, 1, q4_pair_gfni, m->x, m->ne0 / 32))
MV_DRIVER(avx512_mv_q4_K, , mv_q4_K((const block_q4_K *)w, m->x, m->ne0 / 256))
MV_DRIVER(avx512_mv_q6_K, , mv_q6_K((const block_q6_K *)w, m->x, m->ne0 / 256))

void cpu_matvec_avx512_fill(struct cpu_kernels *k, bool gfni)
{
	k->type[LM_Q8_0].mv = avx512_mv_q8_0;
	k->type[LM_Q4_0].mv = gfni ? avx512_mv_q4_0_gfni : avx512_mv_q4_0;
	k->type[LM_Q4_K].mv = avx512_mv_q4_K;
	k->type[LM_Q6_K].mv = avx512_mv_q6_K;
}

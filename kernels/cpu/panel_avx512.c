/* panel_avx512.c — the AVX-512 set's matmul of Q8_0, Q4_0, Q4_K and Q6_K weights in the panel
 * layout (panel.c). Every path, one token or a batch, takes the same exact integer sums and then
 * the same float steps in the same order, so a token's result cannot depend on the batch it
 * rides in (the kernels tests hold each batch size to the generic kernels).
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
 * blocks; batches of one tile take the blocks straight from their records (dtile_*), and one
 * token has its own kernels below (one_group), which keep fewer registers live.
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

static void one_group(const struct cpu_mm *m, int64_t g, enum lm_dtype type);

/* Prefetches into L1, 4 KiB ahead of the weight stream: on Zen 5 (EPYC, family 26) one token
 * read 0.91-0.96 of one thread's plain read bandwidth with them against 0.74-0.90 with the
 * panel_tiles.h default (L2, 3 KiB ahead); 128-token batches alike either way. bench_matmul
 * --huge --mib 800, 1 thread: bench/RESULTS.md. */
#define P_PF_BYTES 4096
#define P_PF_HINT  _MM_HINT_T0
#define PT_ONE     one_group
#define PT_ROWS(t) cpu_avx512_rows_##t
#define PT_FILL    cpu_panel_avx512_fill
#include "kernels/cpu/panel_tiles.h"

/* ------------------------------------------------------------------------------------------ */
/* One token (decode)                                                                         */

/* A group's record read once, front to back, with few registers live: the batched tiles'
 * kernels (dtile_q6_K, dtile_q4_K) keep every sub-block's scale vector from the start of a
 * block, which at one token left the compiler spilling them. Here each scale is made from the
 * record's scale vectors as its run ends, and the Q6_K correction (and the Q4_K mins) are summed
 * first. The same exact integer block sums, then panel_tiles.h's float steps in its order. */

/* Bytes b0..b3 of every dword picked from its own dword (-1: zero), by a vpshufb whose mask is
 * the same for every dword but for the dword's offset in its 128-bit lane. */
P_INL __m512i one_pick(__m512i v, int b0, int b1, int b2, int b3)
{
	const __m512i off =
		_mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
	const uint32_t pat = p_pick_pat(b0, b1, b2, b3);
	return _mm512_shuffle_epi8(v, _mm512_add_epi32(off, _mm512_set1_epi32((int)pat)));
}

/* Q6_K block i of a group into acc. */
P_INL void one_q6_K(const uint8_t *rec, const uint8_t *x, int64_t i, int64_t nb, __m512 *acc)
{
	const int16_t *bs = act8k_bsums(x, nb) + 16 * i;
	__m512i s4[4], corr = pt_zero();
	for (int k = 0; k < 4; k++)
		s4[k] = pt_load(rec + 64 * k);
	/* sum_s sc_s * bsum_s, the scales as sign-extended int16 pairs. */
	for (int q = 0; q < 8; q++) {
		const int a = 2 * (q % 2);
		corr = pt_dpw(corr, _mm512_srai_epi16(one_pick(s4[q / 2], -1, a, -1, a + 1), 8),
			      pt_bcast((const uint8_t *)(bs + 2 * q)));
	}
	__m512i isum = pt_sub(pt_zero(), pt_slli32(corr, 5));
	/* Sub-block 8h + 2q + lg takes quarter q's elements 16 lg .. 16 lg + 15 of half h: the 4
	 * triples of (h, lg), one run of 4 vectors per quarter. */
	for (int h = 0; h < 2; h++)
		for (int lg = 0; lg < 2; lg++) {
			__m512i ia[4] = {pt_zero(), pt_zero(), pt_zero(), pt_zero()};
			for (int e = 0; e < 4; e++) {
				const int l = 16 * lg + 4 * e;
				const uint8_t *tr = rec + Q6_TRIPLES + 192 * (8 * h + l / 4);
				const __m512i qa = pt_load(tr), qb = pt_load(tr + 64);
				const __m512i qh = pt_load(tr + 128);
				for (int q = 0; q < 4; q++)
					ia[q] = pt_dp(ia[q], p_q6(qa, qb, qh, q),
						      pt_bcast(x + 256 * i + 128 * h + 32 * q + l));
			}
			for (int q = 0; q < 4; q++) {
				const int s = 8 * h + 2 * q + lg;
				isum = pt_add(isum, pt_mullo(ia[q], p_sbyte(s4[s / 4], s % 4)));
			}
		}
	const __m512 d = pt_mulf(pt_halves(rec + Q6_D), pt_set1f(act8k_d(x, nb)[i]));
	*acc = pt_addf(*acc, pt_mulf(d, pt_cvt(isum)));
}

/* Q4_K block i of a group into acc. */
P_INL void one_q4_K(const uint8_t *rec, const uint8_t *x, int64_t i, int64_t nb, __m512 *acc)
{
	const __m512i m4 = pt_set1_8(0x0f);
	const __m512i dm = pt_load(rec);
	const struct p_q4k_sm s = p_q4k_scales(rec);
	const int16_t *bs = gk_bs32(x, nb) + 8 * i;
	__m512i summ = pt_zero();
	for (int q = 0; q < 2; q++) {
		summ = pt_dpw(summ, one_pick(s.mn[0], 2 * q, -1, 2 * q + 1, -1),
			      pt_bcast((const uint8_t *)(bs + 2 * q)));
		summ = pt_dpw(summ, one_pick(s.mn[1], 2 * q, -1, 2 * q + 1, -1),
			      pt_bcast((const uint8_t *)(bs + 4 + 2 * q)));
	}
	__m512i isum = pt_zero();
	const uint8_t *xq = x + 256 * i;
	for (int j = 0; j < 4; j++) {
		__m512i ia0 = pt_zero(), ia1 = pt_zero();
		for (int cc = 0; cc < 8; cc++) {
			const __m512i raw = pt_load(rec + 256 + 64 * (8 * j + cc));
			ia0 = pt_dp(ia0, pt_and(raw, m4), pt_bcast(xq + 64 * j + 4 * cc));
			ia1 = pt_dp(ia1, pt_and(pt_srli16(raw, 4), m4),
				    pt_bcast(xq + 64 * j + 32 + 4 * cc));
		}
		const __m512i sv = j < 2 ? s.sc[0] : s.sc[1];
		isum = pt_add(isum, pt_mullo(ia0, one_pick(sv, (2 * j) % 4, -1, -1, -1)));
		isum = pt_add(isum, pt_mullo(ia1, one_pick(sv, (2 * j + 1) % 4, -1, -1, -1)));
	}
	const __m512 dx = pt_set1f(act8k_d(x, nb)[i]);
	const __m512 dd = pt_mulf(pt_half_lo(dm), dx);
	const __m512 dmn = pt_mulf(pt_half_lo(pt_srli32(dm, 16)), dx);
	*acc = pt_addf(*acc, pt_subf(pt_mulf(dd, pt_cvt(isum)), pt_mulf(dmn, pt_cvt(summ))));
}

/* One group (16 rows) for the batch's one token. Q8_0 and Q4_0 take the batched tile of one
 * token, which keeps its few registers already. */
static void one_group(const struct cpu_mm *m, int64_t g, enum lm_dtype type)
{
	if (type == LM_Q8_0 || type == LM_Q4_0) {
		group_q8z(m, g, type == LM_Q4_0);
		return;
	}
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	const int64_t nb = m->ne0 / 256;
	__m512 acc = pt_zerof();
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *rec = grp + (size_t)i * (type == LM_Q6_K ? REC_Q6_K : REC_Q4_K);
		p_prefetch(rec, type == LM_Q6_K ? REC_Q6_K : REC_Q4_K);
		if (type == LM_Q6_K)
			one_q6_K(rec, m->x, i, nb, &acc);
		else
			one_q4_K(rec, m->x, i, nb, &acc);
	}
	pt_storef(m->y + (size_t)g, acc);
}

/* panel_avx2.c — the AVX2 set's matmul of Q8_0, Q4_0, Q4_K and Q6_K weights in the panel layout
 * (panel.c), for CPUs without AVX-512 VNNI: panel_tiles.h on 256-bit registers, each group of
 * 16 rows taken as two halves of 8 (a 64-byte panel vector is two 32-byte halves, rows 0-7 and
 * 8-15).
 *
 * Without vpdpbusd, a lane's 4-element dot product is vpmaddubsw (unsigned x signed bytes into
 * int16 pairs) then vpmaddwd with ones (the pairs into int32). vpmaddubsw saturates a pair at
 * 32767: the nibble and 6-bit quants (at most 63 x 127 x 2) never reach it, but Q8_0's stored
 * q + 128 would, so its dot product takes |q| and x with q's sign (at most 128 x 127 x 2 =
 * 32512) and needs no offset back. The nibble and 6-bit quants' products are summed over a run
 * of vectors in int16 and widened once, by a vpmaddwd with the run's scale (panel_tiles.h, "A
 * run"): on Zen 2 the multiply pipe takes one of vpmaddubsw, vpmaddwd or half a vpmulld a cycle,
 * so a Q4_K sub-block's 8 vectors cost 9 of them instead of 18. Q8_0's pairs, up to 32512, leave
 * no room for a run: two multiply instructions per 4-byte dot are its bound here, as they are
 * llama.cpp's. Every sum is the exact integer of the AVX-512 kernels, and
 * the float steps are the same, so the results are the generic kernels' bit for bit. The rows
 * after a weight's last whole group take the reference-order loops of panel.c.
 *
 * Compiled with -ffp-contract=off: a multiply and an add must round as written.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

/* Tokens per Q8_0 / Q4_0 tile: 7, not the AVX-512 set's 8. A tile holds an int32 sum and an f32
 * accumulator per token, and 16 of them fill the 16 ymm registers: at 8 the compiler spilled
 * the sums inside the dot-product loop. bench_matmul, 128 tokens, 5632x2048, 1 thread, Zen 2:
 * Q8_0 0.329 -> 0.362 GB/s of weights (+10%), Q4_0 0.264 -> 0.273 (6: 0.362 and 0.269; with
 * PT_KEEP below, 8: 0.370, 7: 0.372, 6: 0.366). */
#define P_T8      7
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

/* Q8_0's stored quants are q + 128: back to q, then |q| times x with q's sign. */
P_INL __m256i pt_dp8(__m256i acc, __m256i w, __m256i x)
{
	const __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
	const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* After each token's Q8_0 dot product: v is computed, in a register, and no load moves above
 * this point. Without it gcc loaded all 7 tokens' broadcasts first, which with the sums, the
 * weight vector, |q|, the ones and the 0x80 mask needs 18 registers, and kept a sum on the
 * stack (a store and a load per weight vector). The CPU reorders the loads itself. bench_matmul,
 * 128 tokens, 5632x2048, 1 thread, Zen 2: Q8_0 0.363 -> 0.371 GB/s of weights (Q4_0's run
 * loop: no change, so it has none). */
#define PT_KEEP(v) __asm__ volatile("" : "+x"(v)::"memory")

/* After each token's step of a Q4_K run (vpbroadcastd, vpmaddubsw, vpaddw): v is computed, in a
 * register. Without it gcc interleaved the 8 steps of all 6 tokens and kept run sums on the
 * stack: group_k's block loop read the stack 237 times and wrote it 187 times per 168
 * vpmaddubsw (the unpacked quants live there too), against 113 and 38 with it; Zen 2 has two
 * load ports and one store port for a vpmaddubsw a cycle. PT_KEEP's memory clobber would also
 * reload the quants at every step (0.250 GB/s). bench_matmul, 128 tokens, 5632x2048, 1 thread,
 * Zen 2: Q4_K 0.278 -> 0.333 GB/s of weights; the direct tiles of small batches likewise, 6
 * tokens 4.71 -> 5.40, 3 tokens 6.72 -> 7.81. Q6_K's runs of 4 gained nothing at 128 tokens and
 * lost at 2-6 (4.97 -> 3.35 at 6), so they have none. */
#define PT_HOLD(v) __asm__("" : "+x"(v))

P_INL __m256i pt_dpw(__m256i acc, __m256i a, __m256i b)
{
	return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#define PT_I16 1
P_INL __m256i pt_dp16(__m256i acc, __m256i w, __m256i x)
{
	return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
}

P_INL __m256i pt_widen(__m256i a, __m256i s)
{
	return _mm256_madd_epi16(a, s);
}

static void one_group(const struct cpu_mm *m, int64_t g, enum lm_dtype type);

/* No bursts of prefetches: on Zen 2 (EPYC, family 23 model 49) p_prefetch's L2 prefetches of a
 * whole record 3 KiB ahead slowed the weight stream (bench_matmul --huge --mib 256, 1 thread:
 * Q4_K 9.7 -> 12.5 GB/s, Q6_K 8.0 -> 11.8, Q8_0 10.9 -> 12.3, Q4_0 10.6 -> 11.6 without them;
 * bench/RESULTS.md). The one-token kernels below spread their own instead. */
#define P_PF_BYTES 0
#define PT_ONE     one_group
#define PT_ROWS(t) cpu_ref_rows_##t
#define PT_FILL    cpu_panel_avx2_fill
#include "kernels/cpu/panel_tiles.h"

/* ------------------------------------------------------------------------------------------ */
/* One token (decode)                                                                         */

/* A group's record is read once, front to back: each 64-byte panel vector as its two halves
 * (rows 0-7, rows 8-15) side by side, so the token's broadcast quants serve both (the batched
 * tiles walk a group once per half). Q4_0's, Q4_K's and Q6_K's vpmaddubsw pairs are summed as
 * int16 (each kernel bounds the sums) and taken into int32 by one vpmaddwd, with ones or with
 * the sub-block's scale, in place of a vpmaddwd per vector and a vpmulld per sub-block: the
 * same exact integer block sums, then panel_tiles.h's float steps in its order. */

/* Prefetches, spread: one cache line into L1 for each 64 bytes of weights the loop takes, a
 * fixed distance ahead (a record's worth of prefetches at once, as p_prefetch issues them, held
 * the stream back on Zen 2: RESULTS.md). K-quants and Q4_0 1 KiB ahead, Q8_0 512 bytes, the best
 * of 512, 1024 and 2048 there. */
#define ONE_PF_K    1024
#define ONE_PF_Q4_0 1024
#define ONE_PF_Q8_0 512

/* The cache line `ahead` bytes past p, into L1. */
P_INL void one_pf(const uint8_t *p, int ahead)
{
	_mm_prefetch((const char *)p + ahead, _MM_HINT_T0);
}

/* Bytes b0..b3 of every dword picked from its own dword (-1: zero), by a vpshufb whose mask is
 * the same for every dword but for the dword's offset in its 128-bit lane. */
P_INL __m256i one_pick(__m256i v, int b0, int b1, int b2, int b3)
{
	const __m256i off = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404,
					      0x08080808, 0x0c0c0c0c);
	const uint32_t pat = p_pick_pat(b0, b1, b2, b3);
	return _mm256_shuffle_epi8(v, _mm256_add_epi32(off, _mm256_set1_epi32((int)pat)));
}

/* Byte k of every dword in both int16 halves, zero-extended. */
P_INL __m256i one_upair(__m256i v, int k)
{
	return one_pick(v, k, -1, k, -1);
}

/* Bytes a and b of every dword as int16 halves, sign-extended. */
P_INL __m256i one_spair(__m256i v, int a, int b)
{
	return _mm256_srai_epi16(one_pick(v, -1, a, -1, b), 8);
}

/* Q4_K block i, both halves, into acc[0] and acc[1]. A sub-block's int16 pair sums are at most
 * 8 vectors x 2 x 15 x 127 = 30480. */
P_INL void one_q4_K(const uint8_t *rec, const uint8_t *x, int64_t i, int64_t nb, __m256 *acc)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const int16_t *bs = gk_bs32(x, nb) + 8 * i;
	__m256i sp[2][8], isum[2], summ[2];
	__m256 d[2], dmin[2];
	for (int k = 0; k < 4; k++)
		one_pf(rec + 64 * k, ONE_PF_K);
	for (int h = 0; h < 2; h++) {
		const uint8_t *r = rec + 32 * h;
		const __m256i dm = pt_load(r);
		d[h] = pt_half_lo(dm);
		dmin[h] = pt_half_lo(_mm256_srli_epi32(dm, 16));
		const struct p_q4k_sm s = p_q4k_scales(r);
		for (int k = 0; k < 4; k++) {
			sp[h][k] = one_upair(s.sc[0], k);
			sp[h][k + 4] = one_upair(s.sc[1], k);
		}
		summ[h] = pt_zero();
		for (int q = 0; q < 2; q++) {
			summ[h] = pt_dpw(summ[h], one_pick(s.mn[0], 2 * q, -1, 2 * q + 1, -1),
					 pt_bcast((const uint8_t *)(bs + 2 * q)));
			summ[h] = pt_dpw(summ[h], one_pick(s.mn[1], 2 * q, -1, 2 * q + 1, -1),
					 pt_bcast((const uint8_t *)(bs + 4 + 2 * q)));
		}
		isum[h] = pt_zero();
	}
	const uint8_t *xq = x + 256 * i;
	for (int j = 0; j < 4; j++) {
		__m256i p[2][2] = {{pt_zero(), pt_zero()}, {pt_zero(), pt_zero()}};
		for (int c = 0; c < 8; c++) {
			const uint8_t *v = rec + 256 + 64 * (8 * j + c);
			one_pf(v, ONE_PF_K);
			const __m256i xl = pt_bcast(xq + 64 * j + 4 * c);
			const __m256i xh = pt_bcast(xq + 64 * j + 32 + 4 * c);
			for (int h = 0; h < 2; h++) {
				const __m256i raw = pt_load(v + 32 * h);
				p[h][0] = pt_dp16(p[h][0], pt_and(raw, m4), xl);
				p[h][1] = pt_dp16(p[h][1], pt_and(pt_srli16(raw, 4), m4), xh);
			}
		}
		for (int h = 0; h < 2; h++)
			isum[h] = pt_dpw(pt_dpw(isum[h], p[h][0], sp[h][2 * j]), p[h][1],
					 sp[h][2 * j + 1]);
	}
	const __m256 dx = pt_set1f(act8k_d(x, nb)[i]);
	for (int h = 0; h < 2; h++) {
		const __m256 dd = pt_mulf(d[h], dx), dm = pt_mulf(dmin[h], dx);
		acc[h] = pt_addf(acc[h], pt_subf(pt_mulf(dd, pt_cvt(isum[h])),
						 pt_mulf(dm, pt_cvt(summ[h]))));
	}
}

/* Q6_K block i, both halves. The stored quants are q + 32 (at most 63): two vectors' int16 pair
 * sums are at most 2 x 2 x 63 x 127 = 32004; the 32 comes back through the activation sums. */
P_INL void one_q6_K(const uint8_t *rec, const uint8_t *x, int64_t i, int64_t nb, __m256 *acc)
{
	const int16_t *bs = act8k_bsums(x, nb) + 16 * i;
	__m256i sp[2][16], isum[2];
	for (int h = 0; h < 2; h++) {
		__m256i s4[4], corr = pt_zero();
		one_pf(rec + 128 * h, ONE_PF_K);
		one_pf(rec + 128 * h + 64, ONE_PF_K);
		for (int k = 0; k < 4; k++)
			s4[k] = pt_load(rec + 64 * k + 32 * h);
		for (int k = 0; k < 16; k++)
			sp[h][k] = one_spair(s4[k / 4], k % 4, k % 4);
		for (int q = 0; q < 8; q++)
			corr = pt_dpw(corr, one_spair(s4[q / 2], 2 * (q % 2), 2 * (q % 2) + 1),
				      pt_bcast((const uint8_t *)(bs + 2 * q)));
		isum[h] = pt_sub(pt_zero(), pt_slli32(corr, 5));
	}
	/* Elements 128hh + 32q + l (l < 32) of quarter q come from the triple of l / 4 in half
	 * hh and belong to sub-block 8hh + 2q + l / 16 (dtile_q6_K). Two triples at a time, one
	 * 8-row half after the other: few registers live, so nothing spills. */
	for (int hh = 0; hh < 2; hh++)
		for (int l = 0; l < 32; l += 8) {
			const uint8_t *tr = rec + Q6_TRIPLES + 192 * (8 * hh + l / 4);
			const uint8_t *xl = x + 256 * i + 128 * hh + l;
			for (int k = 0; k < 6; k++)
				one_pf(tr + 64 * k, ONE_PF_K);
			for (int h = 0; h < 2; h++) {
				__m256i qa[2], qb[2], qh[2];
				for (int e = 0; e < 2; e++) {
					qa[e] = pt_load(tr + 192 * e + 32 * h);
					qb[e] = pt_load(tr + 192 * e + 64 + 32 * h);
					qh[e] = pt_load(tr + 192 * e + 128 + 32 * h);
				}
				for (int q = 0; q < 4; q++) {
					__m256i p = pt_zero();
					for (int e = 0; e < 2; e++)
						p = pt_dp16(p, p_q6(qa[e], qb[e], qh[e], q),
							    pt_bcast(xl + 32 * q + 4 * e));
					isum[h] =
						pt_dpw(isum[h], p, sp[h][8 * hh + 2 * q + l / 16]);
				}
			}
		}
	one_pf(rec + Q6_D, ONE_PF_K);
	const __m256 dx = pt_set1f(act8k_d(x, nb)[i]);
	for (int h = 0; h < 2; h++) {
		const __m256 dd = pt_mulf(pt_halves(rec + Q6_D + 16 * h), dx);
		acc[h] = pt_addf(acc[h], pt_mulf(dd, pt_cvt(isum[h])));
	}
}

/* Q4_0 block b, both halves: the 8 vectors' int16 pair sums are at most 8 x 2 x 15 x 127 =
 * 30480; -8 comes back through the activation sum (tile_q8z). */
P_INL void one_q4_0(const uint8_t *rec, const uint8_t *xb, float xd, int32_t xs, __m256 *acc)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256i p[2] = {pt_zero(), pt_zero()};
	for (int v = 0; v < 4; v++) {
		const __m256i xl = pt_bcast(xb + 4 * v), xh = pt_bcast(xb + 16 + 4 * v);
		for (int h = 0; h < 2; h++) {
			const __m256i raw = pt_load(rec + 32 + 64 * v + 32 * h);
			p[h] = pt_dp16(p[h], pt_and(raw, m4), xl);
			p[h] = pt_dp16(p[h], pt_and(pt_srli16(raw, 4), m4), xh);
		}
	}
	const __m256 dx = pt_set1f(xd);
	for (int h = 0; h < 2; h++) {
		const __m256i ia = pt_dpw(pt_set1(-8 * xs), p[h], _mm256_set1_epi16(1));
		acc[h] = pt_addf(acc[h], pt_mulf(pt_mulf(pt_cvt(ia), pt_halves(rec + 16 * h)), dx));
	}
}

/* Q8_0 block b, both halves (pt_dp8: |q| and x with q's sign, int32 per vector). */
P_INL void one_q8_0(const uint8_t *rec, const uint8_t *xb, float xd, __m256 *acc)
{
	__m256i ia[2] = {pt_zero(), pt_zero()};
	for (int c = 0; c < 8; c++) {
		const __m256i xv = pt_bcast(xb + 4 * c);
		for (int h = 0; h < 2; h++)
			ia[h] = pt_dp8(ia[h], pt_load(rec + 32 + 64 * c + 32 * h), xv);
	}
	const __m256 dx = pt_set1f(xd);
	for (int h = 0; h < 2; h++)
		acc[h] = pt_addf(acc[h],
				 pt_mulf(pt_cvt(ia[h]), pt_mulf(pt_halves(rec + 16 * h), dx)));
}

/* One group (16 rows) for the batch's one token: each block's record once, front to back. */
static void one_group(const struct cpu_mm *m, int64_t g, enum lm_dtype type)
{
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	__m256 acc[2] = {pt_zerof(), pt_zerof()};
	if (type == LM_Q8_0 || type == LM_Q4_0) {
		const int64_t nb = m->ne0 / 32;
		const float *xd = act8_d(m->x, nb);
		const int32_t *xs = act8_sum(m->x, nb);
		const size_t rb = type == LM_Q4_0 ? REC_Q4_0 : REC_Q8_0;
		const int ahead = type == LM_Q4_0 ? ONE_PF_Q4_0 : ONE_PF_Q8_0;
		for (int64_t b = 0; b < nb; b++) {
			for (size_t o = 0; o < rb; o += 64)
				one_pf(grp + (size_t)b * rb + o, ahead);
			if (type == LM_Q4_0)
				one_q4_0(grp + (size_t)b * REC_Q4_0, m->x + 32 * b, xd[b], xs[b],
					 acc);
			else
				one_q8_0(grp + (size_t)b * REC_Q8_0, m->x + 32 * b, xd[b], acc);
		}
	}
	const int64_t nb = m->ne0 / 256;
	if (type == LM_Q6_K) {
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *rec = grp + (size_t)i * REC_Q6_K;
			one_q6_K(rec, m->x, i, nb, acc);
		}
	} else if (type == LM_Q4_K) {
		for (int64_t i = 0; i < nb; i++) {
			const uint8_t *rec = grp + (size_t)i * REC_Q4_K;
			one_q4_K(rec, m->x, i, nb, acc);
		}
	}
	pt_storef(m->y + (size_t)g, acc[0]);
	pt_storef(m->y + (size_t)g + 8, acc[1]);
}

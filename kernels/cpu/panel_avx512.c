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

/* Record bytes of one block of a group (16 x the GGUF block). */
#define REC_Q8_0 (16 * 34)
#define REC_Q4_0 (16 * 18)
#define REC_Q4_K (16 * 144)
#define REC_Q6_K (16 * 210)
/* Q6_K's record: the scales (4 vectors), 16 triples of quant vectors, d (panel.c). */
#define Q6_TRIPLES 256
#define Q6_D       (256 + 16 * 192)

/* How far ahead of the weight stream the L2 prefetches run: one core has few L1 miss buffers,
 * requests into L2 keep more misses in flight (simd_x86.h, SIMD_PF_BYTES). */
#define P_PF_BYTES 3072

/* Prefetches the cache lines of [p, p + bytes) from P_PF_BYTES ahead. */
P_INL void p_prefetch(const uint8_t *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch((const char *)p + P_PF_BYTES + o, _MM_HINT_T1);
}

P_INL __m512i p_bcast(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

P_INL __m512 p_half_lo(__m512i v) /* the low u16 of every lane, an f16, as f32 */
{
	return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* ------------------------------------------------------------------------------------------ */
/* Activations of K-quants: act8k (natural group order), then bs32[nb][8], the int16 sums of
 * each 32-element sub-block, which Q4_K's mins pair with. The row kernel reads the act8k part. */

static size_t gk_bytes(int64_t ne0)
{
	return act8k_bytes(ne0) + (size_t)(ne0 / 256) * 16;
}

static const int16_t *gk_bs32(const uint8_t *x, int64_t nb)
{
	return (const int16_t *)(x + act8k_bytes(nb * 256));
}

static void gk_convert(const float *x, void *dst, int64_t n)
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
/* Q8_0 and Q4_0                                                                              */

/* A tile of NT act8 tokens against one group's records: acc[t] lane r = row r's output. */
P_INL void tile_q8z(const uint8_t *grp, int64_t nb, const uint8_t *const *x, const int NT,
		    int is_q4, __m512 *acc)
{
	const float *xd[P_T8];
	const int32_t *xs[P_T8];
	for (int t = 0; t < NT; t++) {
		xd[t] = act8_d(x[t], nb);
		xs[t] = act8_sum(x[t], nb);
		acc[t] = _mm512_setzero_ps();
	}
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const int32_t off = is_q4 ? -8 : -128;
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *rec = grp + (size_t)b * (is_q4 ? REC_Q4_0 : REC_Q8_0);
		p_prefetch(rec, is_q4 ? REC_Q4_0 : REC_Q8_0);
		__m512i ia[P_T8];
		for (int t = 0; t < NT; t++)
			ia[t] = _mm512_set1_epi32(off * xs[t][b]);
		if (is_q4) {
			/* Vector v: bytes 4v.. of qs, elements 4v.. (low nibbles), 16 + 4v.. (high). */
			for (int v = 0; v < 4; v++) {
				const __m512i raw = _mm512_loadu_si512(rec + 32 + 64 * v);
				const __m512i lo = _mm512_and_si512(raw, m4);
				const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
				for (int t = 0; t < NT; t++) {
					const uint8_t *xb = x[t] + 32 * b + 4 * v;
					ia[t] = _mm512_dpbusd_epi32(ia[t], lo, p_bcast(xb));
					ia[t] = _mm512_dpbusd_epi32(ia[t], hi, p_bcast(xb + 16));
				}
			}
		} else {
			for (int c = 0; c < 8; c++) {
				const __m512i wv = _mm512_loadu_si512(rec + 32 + 64 * c);
				for (int t = 0; t < NT; t++)
					ia[t] = _mm512_dpbusd_epi32(ia[t], wv,
								    p_bcast(x[t] + 32 * b + 4 * c));
			}
		}
		const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)rec));
		for (int t = 0; t < NT; t++) {
			const __m512 f = _mm512_cvtepi32_ps(ia[t]);
			const __m512 dx = _mm512_set1_ps(xd[t][b]);
			acc[t] = is_q4 ? _mm512_add_ps(acc[t],
						       _mm512_mul_ps(_mm512_mul_ps(f, dw), dx))
				       : _mm512_add_ps(acc[t],
						       _mm512_mul_ps(f, _mm512_mul_ps(dw, dx)));
		}
	}
}

/* The tile for a token count known at run time: each case a constant, so the tile's
 * accumulators stay in registers. */
P_INL void tiles_q8z(const uint8_t *grp, int64_t nb, const uint8_t *const *x, int nt, int is_q4,
		     __m512 *acc)
{
	switch (nt) {
	case 8:
		tile_q8z(grp, nb, x, 8, is_q4, acc);
		break;
	case 7:
		tile_q8z(grp, nb, x, 7, is_q4, acc);
		break;
	case 6:
		tile_q8z(grp, nb, x, 6, is_q4, acc);
		break;
	case 5:
		tile_q8z(grp, nb, x, 5, is_q4, acc);
		break;
	case 4:
		tile_q8z(grp, nb, x, 4, is_q4, acc);
		break;
	case 3:
		tile_q8z(grp, nb, x, 3, is_q4, acc);
		break;
	case 2:
		tile_q8z(grp, nb, x, 2, is_q4, acc);
		break;
	default:
		tile_q8z(grp, nb, x, 1, is_q4, acc);
		break;
	}
}

P_INL void group_q8z(const struct cpu_mm *m, int64_t g, int is_q4)
{
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	for (int t0 = 0; t0 < m->n; t0 += P_T8) {
		const int nt = m->n - t0 < P_T8 ? m->n - t0 : P_T8;
		const uint8_t *x[P_T8];
		__m512 acc[P_T8];
		for (int t = 0; t < nt; t++)
			x[t] = m->x + (size_t)(t0 + t) * m->x_stride;
		tiles_q8z(grp, m->ne0 / 32, x, nt, is_q4, acc);
		for (int t = 0; t < nt; t++)
			_mm512_storeu_ps(m->y + (size_t)(t0 + t) * (size_t)m->ne1 + (size_t)g,
					 acc[t]);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* K-quants                                                                                   */

/* A K-quant block of 16 rows, unpacked: q[k] holds quants 4k..4k+3 of each row as bytes; sc[j]
 * the scale of sub-block j (Q4_K: 8 of 32 elements, Q6_K: 16 of 16) as int32 lanes; mp[q]
 * int16 pairs for vpdpwssd (Q4_K: the mins of sub-blocks 2q, 2q + 1; Q6_K: the scales of
 * sub-blocks 2q, 2q + 1); d and dmin as f32. */
struct kblk {
	__m512i q[64];
	__m512i sc[16];
	__m512i mp[8];
	__m512 d, dmin;
};

P_INL __m512i p_byte(__m512i v, int k) /* byte k of every lane, zero-extended */
{
	return _mm512_and_si512(_mm512_srli_epi32(v, 8 * k), _mm512_set1_epi32(0xff));
}

P_INL __m512i p_sbyte(__m512i v, int k) /* byte k of every lane, sign-extended */
{
	return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * k), 24);
}

P_INL __m512i p_pair16(__m512i lo, __m512i hi)
{
	return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xffff)),
			       _mm512_slli_epi32(hi, 16));
}

static void unpack_q4_K(const uint8_t *rec, struct kblk *u)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m2 = _mm512_set1_epi32(0x03030303);
	const __m512i dm = _mm512_loadu_si512(rec);
	u->d = p_half_lo(dm);
	u->dmin = p_half_lo(_mm512_srli_epi32(dm, 16));
	/* The 6-bit scales and mins, as simd_q4_K_scales takes them, a lane per row. */
	const __m512i a = _mm512_loadu_si512(rec + 64), b = _mm512_loadu_si512(rec + 128);
	const __m512i c = _mm512_loadu_si512(rec + 192);
	const __m512i sc_lo = _mm512_and_si512(a, m6);
	const __m512i sc_hi = _mm512_or_si512(
		_mm512_and_si512(c, m4),
		_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, 6), m2), 4));
	const __m512i mn_lo = _mm512_and_si512(b, m6);
	const __m512i mn_hi = _mm512_or_si512(
		_mm512_and_si512(_mm512_srli_epi32(c, 4), m4),
		_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 6), m2), 4));
	for (int k = 0; k < 4; k++) {
		u->sc[k] = p_byte(sc_lo, k);
		u->sc[k + 4] = p_byte(sc_hi, k);
	}
	for (int q = 0; q < 2; q++) {
		u->mp[q] = p_pair16(p_byte(mn_lo, 2 * q), p_byte(mn_lo, 2 * q + 1));
		u->mp[q + 2] = p_pair16(p_byte(mn_hi, 2 * q), p_byte(mn_hi, 2 * q + 1));
	}
	/* qs dword k: bytes 32j + 4c (j = k / 8, c = k % 8); its low nibbles are quants 4c.. of
	 * sub-block 2j, its high nibbles those of sub-block 2j + 1. */
	for (int k = 0; k < 32; k++) {
		const __m512i raw = _mm512_loadu_si512(rec + 256 + 64 * k);
		const int j = k / 8, cc = k % 8;
		u->q[16 * j + cc] = _mm512_and_si512(raw, m4);
		u->q[16 * j + 8 + cc] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
	}
}

static void unpack_q6_K(const uint8_t *rec, struct kblk *u)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
	/* Half h, element l (of 32) of its four quarters: ql[l] and ql[l + 32] give the low 4
	 * bits (low nibbles for quarters 0 and 1, high for 2 and 3), qh[l] the top 2 bits (bits
	 * 0-1, 2-3, 4-5, 6-7 for the quarters). The stored quants are q + 32, unsigned. */
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 32; l += 4) {
			const uint8_t *tr = rec + Q6_TRIPLES + 192 * (8 * h + l / 4);
			const __m512i qa = _mm512_loadu_si512(tr);
			const __m512i qb = _mm512_loadu_si512(tr + 64);
			const __m512i qh = _mm512_loadu_si512(tr + 128);
			const int k = 32 * h + l / 4;
			u->q[k] = _mm512_or_si512(_mm512_and_si512(qa, m4),
						  _mm512_and_si512(_mm512_slli_epi16(qh, 4), m2));
			u->q[k + 8] =
				_mm512_or_si512(_mm512_and_si512(qb, m4),
						_mm512_and_si512(_mm512_slli_epi16(qh, 2), m2));
			u->q[k + 16] =
				_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qa, 4), m4),
						_mm512_and_si512(qh, m2));
			u->q[k + 24] =
				_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qb, 4), m4),
						_mm512_and_si512(_mm512_srli_epi16(qh, 2), m2));
		}
	__m512i s[4];
	for (int k = 0; k < 4; k++)
		s[k] = _mm512_loadu_si512(rec + 64 * k);
	for (int k = 0; k < 16; k++)
		u->sc[k] = p_sbyte(s[k / 4], k % 4);
	for (int q = 0; q < 8; q++)
		u->mp[q] = p_pair16(p_sbyte(s[q / 2], 2 * (q % 2)),
				    p_sbyte(s[q / 2], 2 * (q % 2) + 1));
	u->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + Q6_D)));
}

/* Block i of a tile of NT tokens (act rows x[t]) into acc[t] (in memory between blocks). */
P_INL void tile_q4_K(const struct kblk *u, int64_t i, int64_t nb, const uint8_t *const *x,
		     const int NT, __m512 *acc)
{
	__m512i isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = _mm512_setzero_si512();
	for (int j = 0; j < 8; j++) {
		__m512i ia[P_TK];
		for (int t = 0; t < NT; t++)
			ia[t] = _mm512_setzero_si512();
		for (int c = 0; c < 8; c++)
			for (int t = 0; t < NT; t++)
				ia[t] = _mm512_dpbusd_epi32(
					ia[t], u->q[8 * j + c],
					p_bcast(x[t] + 256 * i + 32 * j + 4 * c));
		for (int t = 0; t < NT; t++)
			isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(ia[t], u->sc[j]));
	}
	for (int t = 0; t < NT; t++) {
		const int16_t *bs = gk_bs32(x[t], nb) + 8 * i;
		__m512i summ = _mm512_setzero_si512();
		for (int q = 0; q < 4; q++)
			summ = _mm512_dpwssd_epi32(summ, u->mp[q],
						   p_bcast((const uint8_t *)(bs + 2 * q)));
		const __m512 dx = _mm512_set1_ps(act8k_d(x[t], nb)[i]);
		const __m512 d = _mm512_mul_ps(u->d, dx), dm = _mm512_mul_ps(u->dmin, dx);
		acc[t] = _mm512_add_ps(acc[t],
				       _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t])),
						     _mm512_mul_ps(dm, _mm512_cvtepi32_ps(summ))));
	}
}

P_INL void tile_q6_K(const struct kblk *u, int64_t i, int64_t nb, const uint8_t *const *x,
		     const int NT, __m512 *acc)
{
	__m512i isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = _mm512_setzero_si512();
	for (int s = 0; s < 16; s++) {
		__m512i ia[P_TK];
		for (int t = 0; t < NT; t++)
			ia[t] = _mm512_setzero_si512();
		for (int c = 0; c < 4; c++)
			for (int t = 0; t < NT; t++)
				ia[t] = _mm512_dpbusd_epi32(
					ia[t], u->q[4 * s + c],
					p_bcast(x[t] + 256 * i + 16 * s + 4 * c));
		for (int t = 0; t < NT; t++)
			isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(ia[t], u->sc[s]));
	}
	for (int t = 0; t < NT; t++) {
		/* The stored quants are q + 32: take back 32 * sum_s sc_s * bsum_s. */
		const int16_t *bs = act8k_bsums(x[t], nb) + 16 * i;
		__m512i corr = _mm512_setzero_si512();
		for (int q = 0; q < 8; q++)
			corr = _mm512_dpwssd_epi32(corr, u->mp[q],
						   p_bcast((const uint8_t *)(bs + 2 * q)));
		const __m512i si = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(corr, 5));
		const __m512 d = _mm512_mul_ps(u->d, _mm512_set1_ps(act8k_d(x[t], nb)[i]));
		acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(si)));
	}
}

/* The same blocks straight from their records, for batches of one tile: the nibbles and 6-bit
 * quants are unpacked in registers as they are used, shared by the tile's tokens. */
P_INL void dtile_q4_K(const uint8_t *rec, int64_t i, int64_t nb, const uint8_t *const *x,
		      const int NT, __m512 *acc)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	struct kblk_sc {
		__m512i sc[8], mp[4];
		__m512 d, dmin;
	} u;
	{
		const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f),
			      m2 = _mm512_set1_epi32(0x03030303);
		const __m512i dm = _mm512_loadu_si512(rec);
		u.d = p_half_lo(dm);
		u.dmin = p_half_lo(_mm512_srli_epi32(dm, 16));
		const __m512i a = _mm512_loadu_si512(rec + 64), b = _mm512_loadu_si512(rec + 128);
		const __m512i c = _mm512_loadu_si512(rec + 192);
		const __m512i sc_lo = _mm512_and_si512(a, m6);
		const __m512i sc_hi = _mm512_or_si512(
			_mm512_and_si512(c, m4),
			_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, 6), m2), 4));
		const __m512i mn_lo = _mm512_and_si512(b, m6);
		const __m512i mn_hi = _mm512_or_si512(
			_mm512_and_si512(_mm512_srli_epi32(c, 4), m4),
			_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 6), m2), 4));
		for (int k = 0; k < 4; k++) {
			u.sc[k] = p_byte(sc_lo, k);
			u.sc[k + 4] = p_byte(sc_hi, k);
		}
		for (int q = 0; q < 2; q++) {
			u.mp[q] = p_pair16(p_byte(mn_lo, 2 * q), p_byte(mn_lo, 2 * q + 1));
			u.mp[q + 2] = p_pair16(p_byte(mn_hi, 2 * q), p_byte(mn_hi, 2 * q + 1));
		}
	}
	__m512i isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = _mm512_setzero_si512();
	for (int j = 0; j < 4; j++) {
		__m512i ia0[P_TK], ia1[P_TK];
		for (int t = 0; t < NT; t++)
			ia0[t] = ia1[t] = _mm512_setzero_si512();
		for (int c = 0; c < 8; c++) {
			const __m512i raw = _mm512_loadu_si512(rec + 256 + 64 * (8 * j + c));
			const __m512i lo = _mm512_and_si512(raw, m4);
			const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
			for (int t = 0; t < NT; t++) {
				const uint8_t *xq = x[t] + 256 * i + 64 * j + 4 * c;
				ia0[t] = _mm512_dpbusd_epi32(ia0[t], lo, p_bcast(xq));
				ia1[t] = _mm512_dpbusd_epi32(ia1[t], hi, p_bcast(xq + 32));
			}
		}
		for (int t = 0; t < NT; t++)
			isum[t] = _mm512_add_epi32(
				_mm512_add_epi32(isum[t], _mm512_mullo_epi32(ia0[t], u.sc[2 * j])),
				_mm512_mullo_epi32(ia1[t], u.sc[2 * j + 1]));
	}
	for (int t = 0; t < NT; t++) {
		const int16_t *bs = gk_bs32(x[t], nb) + 8 * i;
		__m512i summ = _mm512_setzero_si512();
		for (int q = 0; q < 4; q++)
			summ = _mm512_dpwssd_epi32(summ, u.mp[q],
						   p_bcast((const uint8_t *)(bs + 2 * q)));
		const __m512 dx = _mm512_set1_ps(act8k_d(x[t], nb)[i]);
		const __m512 d = _mm512_mul_ps(u.d, dx), dm = _mm512_mul_ps(u.dmin, dx);
		acc[t] = _mm512_add_ps(acc[t],
				       _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t])),
						     _mm512_mul_ps(dm, _mm512_cvtepi32_ps(summ))));
	}
}

P_INL void dtile_q6_K(const uint8_t *rec, int64_t i, int64_t nb, const uint8_t *const *x,
		      const int NT, __m512 *acc)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
	__m512i sc[16], mp[8];
	{
		__m512i s4[4];
		for (int k = 0; k < 4; k++)
			s4[k] = _mm512_loadu_si512(rec + 64 * k);
		for (int k = 0; k < 16; k++)
			sc[k] = p_sbyte(s4[k / 4], k % 4);
		for (int q = 0; q < 8; q++)
			mp[q] = p_pair16(p_sbyte(s4[q / 2], 2 * (q % 2)),
					 p_sbyte(s4[q / 2], 2 * (q % 2) + 1));
	}
	__m512i isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = _mm512_setzero_si512();
	/* Elements 128h + 32q + l of quarter q (l < 32, from ql[l], ql[l + 32] and qh[l] of half
	 * h) belong to sub-block 8h + 2q + l / 16: four accumulators per token, one per quarter,
	 * over the 16 elements l of one sub-block column lg = l / 16. */
	for (int h = 0; h < 2; h++)
		for (int lg = 0; lg < 2; lg++) {
			__m512i ia[4][P_TK];
			for (int q = 0; q < 4; q++)
				for (int t = 0; t < NT; t++)
					ia[q][t] = _mm512_setzero_si512();
			for (int l4 = 0; l4 < 4; l4++) {
				const int l = 16 * lg + 4 * l4;
				const uint8_t *tr = rec + Q6_TRIPLES + 192 * (8 * h + l / 4);
				const __m512i qa = _mm512_loadu_si512(tr);
				const __m512i qb = _mm512_loadu_si512(tr + 64);
				const __m512i qh = _mm512_loadu_si512(tr + 128);
				const __m512i v[4] = {
					_mm512_or_si512(
						_mm512_and_si512(qa, m4),
						_mm512_and_si512(_mm512_slli_epi16(qh, 4), m2)),
					_mm512_or_si512(
						_mm512_and_si512(qb, m4),
						_mm512_and_si512(_mm512_slli_epi16(qh, 2), m2)),
					_mm512_or_si512(
						_mm512_and_si512(_mm512_srli_epi16(qa, 4), m4),
						_mm512_and_si512(qh, m2)),
					_mm512_or_si512(
						_mm512_and_si512(_mm512_srli_epi16(qb, 4), m4),
						_mm512_and_si512(_mm512_srli_epi16(qh, 2), m2)),
				};
				for (int q = 0; q < 4; q++)
					for (int t = 0; t < NT; t++)
						ia[q][t] = _mm512_dpbusd_epi32(
							ia[q][t], v[q],
							p_bcast(x[t] + 256 * i + 128 * h + 32 * q +
								l));
			}
			for (int q = 0; q < 4; q++)
				for (int t = 0; t < NT; t++)
					isum[t] = _mm512_add_epi32(
						isum[t], _mm512_mullo_epi32(
								 ia[q][t], sc[8 * h + 2 * q + lg]));
		}
	const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + Q6_D)));
	for (int t = 0; t < NT; t++) {
		const int16_t *bs = act8k_bsums(x[t], nb) + 16 * i;
		__m512i corr = _mm512_setzero_si512();
		for (int q = 0; q < 8; q++)
			corr = _mm512_dpwssd_epi32(corr, mp[q],
						   p_bcast((const uint8_t *)(bs + 2 * q)));
		const __m512i si = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(corr, 5));
		const __m512 d = _mm512_mul_ps(dv, _mm512_set1_ps(act8k_d(x[t], nb)[i]));
		acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(si)));
	}
}

P_INL void tile_k(const struct kblk *u, int is_q6, int64_t i, int64_t nb, const uint8_t *const *x,
		  const int NT, __m512 *acc)
{
	if (is_q6)
		tile_q6_K(u, i, nb, x, NT, acc);
	else
		tile_q4_K(u, i, nb, x, NT, acc);
}

P_INL void tiles_k(const struct kblk *u, int is_q6, int64_t i, int64_t nb, const uint8_t *const *x,
		   int nt, __m512 *acc)
{
	switch (nt) {
	case 6:
		tile_k(u, is_q6, i, nb, x, 6, acc);
		break;
	case 5:
		tile_k(u, is_q6, i, nb, x, 5, acc);
		break;
	case 4:
		tile_k(u, is_q6, i, nb, x, 4, acc);
		break;
	case 3:
		tile_k(u, is_q6, i, nb, x, 3, acc);
		break;
	case 2:
		tile_k(u, is_q6, i, nb, x, 2, acc);
		break;
	default:
		tile_k(u, is_q6, i, nb, x, 1, acc);
		break;
	}
}

P_INL void dtile_k(const uint8_t *rec, int is_q6, int64_t i, int64_t nb, const uint8_t *const *x,
		   const int NT, __m512 *acc)
{
	if (is_q6)
		dtile_q6_K(rec, i, nb, x, NT, acc);
	else
		dtile_q4_K(rec, i, nb, x, NT, acc);
}

/* One group for a batch of one tile (up to P_TK tokens): blocks straight from their records. */
static void group_k_direct(const struct cpu_mm *m, int64_t g, int n, int is_q6)
{
	const int64_t nb = m->ne0 / 256;
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	const uint8_t *x[P_TK];
	__m512 acc[P_TK];
	for (int t = 0; t < n; t++) {
		x[t] = m->x + (size_t)t * m->x_stride;
		acc[t] = _mm512_setzero_ps();
	}
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *rec = grp + (size_t)i * (is_q6 ? REC_Q6_K : REC_Q4_K);
		p_prefetch(rec, is_q6 ? REC_Q6_K : REC_Q4_K);
		switch (n) {
		case 6:
			dtile_k(rec, is_q6, i, nb, x, 6, acc);
			break;
		case 5:
			dtile_k(rec, is_q6, i, nb, x, 5, acc);
			break;
		case 4:
			dtile_k(rec, is_q6, i, nb, x, 4, acc);
			break;
		case 3:
			dtile_k(rec, is_q6, i, nb, x, 3, acc);
			break;
		case 2:
			dtile_k(rec, is_q6, i, nb, x, 2, acc);
			break;
		default:
			dtile_k(rec, is_q6, i, nb, x, 1, acc);
			break;
		}
	}
	for (int t = 0; t < n; t++)
		_mm512_storeu_ps(m->y + (size_t)t * (size_t)m->ne1 + (size_t)g, acc[t]);
}

/* One group for up to P_CHUNK tokens from t0: each block unpacked once, then every tile. */
static void group_k(const struct cpu_mm *m, int64_t g, int t0, int n, int is_q6)
{
	const int64_t nb = m->ne0 / 256;
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	struct kblk u;
	__m512 acc[P_CHUNK];
	for (int t = 0; t < n; t++)
		acc[t] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *rec = grp + (size_t)i * (is_q6 ? REC_Q6_K : REC_Q4_K);
		if (is_q6)
			unpack_q6_K(rec, &u);
		else
			unpack_q4_K(rec, &u);
		for (int tt = 0; tt < n; tt += P_TK) {
			const int nt = n - tt < P_TK ? n - tt : P_TK;
			const uint8_t *x[P_TK];
			for (int t = 0; t < nt; t++)
				x[t] = m->x + (size_t)(t0 + tt + t) * m->x_stride;
			tiles_k(&u, is_q6, i, nb, x, nt, acc + tt);
		}
	}
	for (int t = 0; t < n; t++)
		_mm512_storeu_ps(m->y + (size_t)(t0 + t) * (size_t)m->ne1 + (size_t)g, acc[t]);
}

/* ------------------------------------------------------------------------------------------ */
/* Drivers                                                                                    */

/* Rows [r0, r1): whole groups from their panels, the rows after the last whole group by the
 * set's row kernel `tail` (r0 is a multiple of CPU_PANEL_ROWS). */
P_INL void pmm(const struct cpu_mm *m, int64_t r0, int64_t r1, enum lm_dtype type, cpu_mm_fn tail)
{
	const int64_t whole = m->ne1 / CPU_PANEL_ROWS * CPU_PANEL_ROWS;
	const int64_t gend = r1 < whole ? r1 : whole;
	for (int64_t g = r0; g + CPU_PANEL_ROWS <= gend; g += CPU_PANEL_ROWS) {
		if (type == LM_Q8_0 || type == LM_Q4_0) {
			group_q8z(m, g, type == LM_Q4_0);
			continue;
		}
		if (m->n <= P_TK) {
			group_k_direct(m, g, m->n, type == LM_Q6_K);
			continue;
		}
		for (int t0 = 0; t0 < m->n; t0 += P_CHUNK)
			group_k(m, g, t0, m->n - t0 < P_CHUNK ? m->n - t0 : P_CHUNK,
				type == LM_Q6_K);
	}
	if (r1 > whole)
		tail(m, r0 > whole ? r0 : whole, r1);
}

static void pmm_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q8_0, cpu_avx512_rows_q8_0);
}

static void pmm_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q4_0, cpu_avx512_rows_q4_0);
}

static void pmm_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q4_K, cpu_avx512_rows_q4_K);
}

static void pmm_q6_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q6_K, cpu_avx512_rows_q6_K);
}

static size_t gk_act_bytes(int64_t n)
{
	return gk_bytes(n);
}

void cpu_panel_avx512_fill(struct cpu_kernels *k)
{
	struct cpu_type_ops *t = k->type;
	/* Q4_K's row kernel reads the same activations (their act8k part, natural order). */
	t[LM_Q4_K].act_bytes = gk_act_bytes;
	t[LM_Q4_K].to_act = gk_convert;
	t[LM_Q6_K].act_bytes = gk_act_bytes;
	t[LM_Q6_K].to_act = gk_convert;
	t[LM_Q8_0].pmm = pmm_q8_0;
	t[LM_Q4_0].pmm = pmm_q4_0;
	t[LM_Q4_K].pmm = pmm_q4_K;
	t[LM_Q6_K].pmm = pmm_q6_K;
}

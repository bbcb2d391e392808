/* panel_tiles.h — the panel matmul (panel.c's layout), written once for two vector widths and
 * included by panel_avx512.c (16 lanes: a group at once, vpdpbusd) and panel_avx2.c (8 lanes:
 * each group as two halves of 8 rows, vpmaddubsw + vpmaddwd). panel_avx512.c's comment says how
 * the kernels work; the including file defines, before it includes this:
 *
 *   PT_W, PT_HALVES   lanes per vector (16 or 8) and halves per group (1 or 2)
 *   PT_Q8_OFF         the offset the Q8_0 dot product takes back through the activation sums
 *                     (128: the panel's +128 quants as vpdpbusd's unsigned operand; 0: a dot
 *                     product of the signed quants)
 *   pt_vi, pt_vf      integer and float vectors of PT_W lanes
 *   pt_zero, pt_zerof, pt_set1 (int32), pt_set1_8 (int8), pt_set1f, pt_load (a PT_W-lane
 *   vector at a byte address), pt_bcast (the int32 at an address, in every lane), pt_and,
 *   pt_or, pt_add, pt_sub, pt_mullo (int32), pt_srli16, pt_slli16, pt_srli32, pt_slli32,
 *   pt_srai32, pt_cvt, pt_mulf, pt_addf, pt_subf, pt_storef (PT_W floats, unaligned),
 *   pt_halves (PT_W f16 at an address, as f32), pt_half_lo (the low u16 of every lane as an
 *   f16, as f32), and the dot products, each lane's exact int32:
 *   pt_dp(acc, w, x)   acc + the 4 products of unsigned bytes w (at most 63) and signed x
 *                      (needed where PT_I16 is 0; the runs take pt_dp16 otherwise)
 *   pt_dp8(acc, w, x)  the same for Q8_0's stored quants (PT_Q8_OFF says what they hold)
 *   pt_dpw(acc, a, b)  acc + the 2 products of int16 pairs
 *   PT_I16             1 where a run of products is cheaper summed as int16 pairs and widened
 *                      once (AVX2: vpmaddubsw's pairs, then one vpmaddwd with the scale, in
 *                      place of a vpmaddwd per vector and a vpmulld), with
 *   pt_dp16(a, w, x)   a + w x x's int16 pair sums (int16 lanes; the run's bound keeps them
 *                      exact), and pt_widen(a, s) each lane's two int16 of a times the int16
 *                      pair s, added: the run's int32 sum times the scale; 0: runs in int32
 *   PT_KEEP(v)         (optional) a compiler barrier after each token's Q8_0 dot product
 *                      (panel_avx2.c says why); none by default
 *   PT_HOLD(v)         (optional) the same for each token's step of a Q4_K run, one that
 *                      holds v in a register without fencing memory; none by default
 *   PT_ONE(m, g, type) (optional) the set's own kernel of one group for a batch of one token
 *   P_PF_BYTES, P_PF_HINT (optional) how far ahead of the weight stream p_prefetch fetches
 *                      (0: not at all) and into which cache; 3 KiB into L2 by default
 *   PT_ROWS(t)         the set's row kernel of type t (q8_0, q4_0, q4_K, q6_K), which takes the
 *                      rows after a weight's last whole group
 *   PT_FILL            the name of the function that puts these kernels in a set's table
 */
#ifndef LM_PANEL_TILES_H
#define LM_PANEL_TILES_H

#ifndef PT_KEEP
#define PT_KEEP(v) ((void)0)
#endif
#ifndef PT_HOLD
#define PT_HOLD(v) ((void)0)
#endif

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
#ifndef P_PF_BYTES
#define P_PF_BYTES 3072
#endif
#ifndef P_PF_HINT
#define P_PF_HINT _MM_HINT_T1
#endif

/* Prefetches the cache lines of [p, p + bytes) from P_PF_BYTES ahead; none where the including
 * file set P_PF_BYTES to 0. */
PT_INL void p_prefetch(const uint8_t *p, size_t bytes)
{
	if (P_PF_BYTES == 0)
		return;
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch((const char *)p + P_PF_BYTES + o, P_PF_HINT);
}

/* Accumulators of one half's tokens in a single-tile batch (group_k_direct). */
#define PT_TK_STRIDE P_TK

/* A run: the products of a few weight vectors with a token's quants, summed exactly, then
 * multiplied by one scale. Where PT_I16, the run is summed as int16 pairs, each at most
 * 2 x 63 x 128 (6-bit quants) or 2 x 15 x 128 (nibbles), so a run may hold 2 vectors of 6-bit
 * quants (32256) or 8 of nibbles (30720) and stay under 32767. The integer sums are those of
 * int32 runs, so the results are the same bits either way. */
#if PT_I16
#define RUN_MAX_Q6      2
#define run_dp(a, w, x) pt_dp16(a, w, x)
PT_INL pt_vi run_end(pt_vi acc, pt_vi run, pt_vi s) /* s: int32 lanes, |s| < 2^15 */
{
	return pt_add(acc, pt_widen(run, pt_or(pt_and(s, pt_set1(0xffff)), pt_slli32(s, 16))));
}
PT_INL pt_vi run_sum(pt_vi run) /* the run's sum, unscaled, as int32 */
{
	return pt_widen(run, pt_set1(0x00010001));
}
#else
#define RUN_MAX_Q6      4
#define run_dp(a, w, x) pt_dp(a, w, x)
PT_INL pt_vi run_end(pt_vi acc, pt_vi run, pt_vi s)
{
	return pt_add(acc, pt_mullo(run, s));
}
PT_INL pt_vi run_sum(pt_vi run)
{
	return run;
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* Q8_0 and Q4_0                                                                              */

/* A tile of NT act8 tokens against one group's records: acc[t] lane r = row r's output. */
PT_INL void tile_q8z(const uint8_t *grp, int64_t nb, const uint8_t *const *x, const int NT,
		     int is_q4, int half, pt_vf *acc)
{
	const int lo4 = 32 * half, lo2 = 16 * half;
	const float *xd[P_T8];
	const int32_t *xs[P_T8];
	for (int t = 0; t < NT; t++) {
		xd[t] = act8_d(x[t], nb);
		xs[t] = act8_sum(x[t], nb);
		acc[t] = pt_zerof();
	}
	const pt_vi m4 = pt_set1_8(0x0f);
	const int32_t off = is_q4 ? -8 : -PT_Q8_OFF;
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *rec = grp + (size_t)b * (is_q4 ? REC_Q4_0 : REC_Q8_0);
		if (half == 0)
			p_prefetch(rec, is_q4 ? REC_Q4_0 : REC_Q8_0);
		pt_vi ia[P_T8];
		if (is_q4) {
			/* One run of 8 nibble vectors, then the offset. */
			for (int t = 0; t < NT; t++)
				ia[t] = pt_zero();
			/* Vector v: bytes 4v.. of qs, elements 4v.. (low nibbles), 16 + 4v.. (high). */
			for (int v = 0; v < 4; v++) {
				const pt_vi raw = pt_load(rec + lo4 + 32 + 64 * v);
				const pt_vi lo = pt_and(raw, m4);
				const pt_vi hi = pt_and(pt_srli16(raw, 4), m4);
				for (int t = 0; t < NT; t++) {
					const uint8_t *xb = x[t] + 32 * b + 4 * v;
					ia[t] = run_dp(ia[t], lo, pt_bcast(xb));
					ia[t] = run_dp(ia[t], hi, pt_bcast(xb + 16));
				}
			}
			for (int t = 0; t < NT; t++)
				ia[t] = pt_add(run_sum(ia[t]), pt_set1(off * xs[t][b]));
		} else {
			for (int t = 0; t < NT; t++)
				ia[t] = pt_set1(off * xs[t][b]);
			for (int c = 0; c < 8; c++) {
				const pt_vi wv = pt_load(rec + lo4 + 32 + 64 * c);
				for (int t = 0; t < NT; t++) {
					ia[t] = pt_dp8(ia[t], wv, pt_bcast(x[t] + 32 * b + 4 * c));
					PT_KEEP(ia[t]);
				}
			}
		}
		const pt_vf dw = pt_halves(rec + lo2);
		for (int t = 0; t < NT; t++) {
			const pt_vf f = pt_cvt(ia[t]);
			const pt_vf dx = pt_set1f(xd[t][b]);
			acc[t] = is_q4 ? pt_addf(acc[t], pt_mulf(pt_mulf(f, dw), dx))
				       : pt_addf(acc[t], pt_mulf(f, pt_mulf(dw, dx)));
		}
	}
}

/* The tile for a token count known at run time: each case a constant, so the tile's
 * accumulators stay in registers (nt is at most P_T8; the cases above it are never taken, and
 * are capped so that a set with a smaller P_T8 compiles them within its arrays). */
PT_INL void tiles_q8z(const uint8_t *grp, int64_t nb, const uint8_t *const *x, int nt, int is_q4,
		      int half, pt_vf *acc)
{
	switch (nt) {
	case 8:
		tile_q8z(grp, nb, x, 8 < P_T8 ? 8 : P_T8, is_q4, half, acc);
		break;
	case 7:
		tile_q8z(grp, nb, x, 7 < P_T8 ? 7 : P_T8, is_q4, half, acc);
		break;
	case 6:
		tile_q8z(grp, nb, x, 6 < P_T8 ? 6 : P_T8, is_q4, half, acc);
		break;
	case 5:
		tile_q8z(grp, nb, x, 5 < P_T8 ? 5 : P_T8, is_q4, half, acc);
		break;
	case 4:
		tile_q8z(grp, nb, x, 4 < P_T8 ? 4 : P_T8, is_q4, half, acc);
		break;
	case 3:
		tile_q8z(grp, nb, x, 3 < P_T8 ? 3 : P_T8, is_q4, half, acc);
		break;
	case 2:
		tile_q8z(grp, nb, x, 2 < P_T8 ? 2 : P_T8, is_q4, half, acc);
		break;
	default:
		tile_q8z(grp, nb, x, 1, is_q4, half, acc);
		break;
	}
}

PT_INL void group_q8z(const struct cpu_mm *m, int64_t g, int is_q4)
{
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	for (int t0 = 0; t0 < m->n; t0 += P_T8) {
		const int nt = m->n - t0 < P_T8 ? m->n - t0 : P_T8;
		const uint8_t *x[P_T8];
		pt_vf acc[P_T8];
		for (int t = 0; t < nt; t++)
			x[t] = m->x + (size_t)(t0 + t) * m->x_stride;
		for (int h = 0; h < PT_HALVES; h++) {
			tiles_q8z(grp, m->ne0 / 32, x, nt, is_q4, h, acc);
			for (int t = 0; t < nt; t++)
				pt_storef(m->y + (size_t)(t0 + t) * (size_t)m->ne1 + (size_t)g +
						  (size_t)(PT_W * h),
					  acc[t]);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* K-quants                                                                                   */

/* A K-quant block of PT_W rows (16, or a half of a group), unpacked: q[k] holds quants 4k..4k+3 of each row as bytes; sc[j]
 * the scale of sub-block j (Q4_K: 8 of 32 elements, Q6_K: 16 of 16) as int32 lanes; mp[q]
 * int16 pairs for vpdpwssd (Q4_K: the mins of sub-blocks 2q, 2q + 1; Q6_K: the scales of
 * sub-blocks 2q, 2q + 1); d and dmin as f32. */
struct kblk {
	pt_vi q[64];
	pt_vi sc[16];
	pt_vi mp[8];
	pt_vf d, dmin;
};

PT_INL pt_vi p_byte(pt_vi v, int k) /* byte k of every lane, zero-extended */
{
	return pt_and(pt_srli32(v, 8 * k), pt_set1(0xff));
}

PT_INL pt_vi p_sbyte(pt_vi v, int k) /* byte k of every lane, sign-extended */
{
	return pt_srai32(pt_slli32(v, 24 - 8 * k), 24);
}

PT_INL pt_vi p_pair16(pt_vi lo, pt_vi hi)
{
	return pt_or(pt_and(lo, pt_set1(0xffff)), pt_slli32(hi, 16));
}

/* Quarter q's 6-bit quants (stored + 32, unsigned) of a Q6_K triple: the low 4 bits from
 * ql[l] (q = 0, 2) or ql[l + 32] (q = 1, 3), low or high nibble, the top 2 from bits 2q of
 * qh[l] (panel.c's triples). */
PT_INL pt_vi p_q6(pt_vi qa, pt_vi qb, pt_vi qh, int q)
{
	const pt_vi m4 = pt_set1_8(0x0f), m2 = pt_set1_8(0x30);
	switch (q) {
	case 0:
		return pt_or(pt_and(qa, m4), pt_and(pt_slli16(qh, 4), m2));
	case 1:
		return pt_or(pt_and(qb, m4), pt_and(pt_slli16(qh, 2), m2));
	case 2:
		return pt_or(pt_and(pt_srli16(qa, 4), m4), pt_and(qh, m2));
	default:
		return pt_or(pt_and(pt_srli16(qb, 4), m4), pt_and(pt_srli16(qh, 2), m2));
	}
}

/* A Q4_K record's 6-bit scales and mins, a lane per row, as simd_q4_K_scales takes them: byte k
 * of sc[0] (sc[1]) is the scale of sub-block k (4 + k), of mn[] its min. They come from the
 * record's three scale vectors at 64, 128 and 192 (panel.c's layout). */
struct p_q4k_sm {
	pt_vi sc[2], mn[2];
};

PT_INL struct p_q4k_sm p_q4k_scales(const uint8_t *rec)
{
	const pt_vi m4 = pt_set1_8(0x0f);
	const pt_vi m6 = pt_set1(0x3f3f3f3f), m2 = pt_set1(0x03030303);
	const pt_vi a = pt_load(rec + 64), b = pt_load(rec + 128), c = pt_load(rec + 192);
	struct p_q4k_sm s;
	s.sc[0] = pt_and(a, m6);
	s.sc[1] = pt_or(pt_and(c, m4), pt_slli32(pt_and(pt_srli32(a, 6), m2), 4));
	s.mn[0] = pt_and(b, m6);
	s.mn[1] = pt_or(pt_and(pt_srli32(c, 4), m4), pt_slli32(pt_and(pt_srli32(b, 6), m2), 4));
	return s;
}

/* The dword of a vpshufb mask that picks bytes b0..b3 of a dword (-1: zero): each set's
 * one-token kernels add the dword's offset in its 128-bit lane. */
PT_INL uint32_t p_pick_pat(int b0, int b1, int b2, int b3)
{
	return (uint32_t)(b0 < 0 ? 0x80 : b0) | (uint32_t)(b1 < 0 ? 0x80 : b1) << 8 |
	       (uint32_t)(b2 < 0 ? 0x80 : b2) << 16 | (uint32_t)(b3 < 0 ? 0x80 : b3) << 24;
}

static void unpack_q4_K(const uint8_t *rec, struct kblk *u)
{
	const pt_vi m4 = pt_set1_8(0x0f);
	const pt_vi dm = pt_load(rec);
	u->d = pt_half_lo(dm);
	u->dmin = pt_half_lo(pt_srli32(dm, 16));
	const struct p_q4k_sm s = p_q4k_scales(rec);
	for (int k = 0; k < 4; k++) {
		u->sc[k] = p_byte(s.sc[0], k);
		u->sc[k + 4] = p_byte(s.sc[1], k);
	}
	for (int q = 0; q < 2; q++) {
		u->mp[q] = p_pair16(p_byte(s.mn[0], 2 * q), p_byte(s.mn[0], 2 * q + 1));
		u->mp[q + 2] = p_pair16(p_byte(s.mn[1], 2 * q), p_byte(s.mn[1], 2 * q + 1));
	}
	/* qs dword k: bytes 32j + 4c (j = k / 8, c = k % 8); its low nibbles are quants 4c.. of
	 * sub-block 2j, its high nibbles those of sub-block 2j + 1. */
	for (int k = 0; k < 32; k++) {
		const pt_vi raw = pt_load(rec + 256 + 64 * k);
		const int j = k / 8, cc = k % 8;
		u->q[16 * j + cc] = pt_and(raw, m4);
		u->q[16 * j + 8 + cc] = pt_and(pt_srli16(raw, 4), m4);
	}
}

/* rec: the record's first vector of this half; dh: its d (PT_W halves). */
static void unpack_q6_K(const uint8_t *rec, const uint8_t *dh, struct kblk *u)
{
	/* Half h, element l (of 32) of its four quarters: ql[l] and ql[l + 32] give the low 4
	 * bits (low nibbles for quarters 0 and 1, high for 2 and 3), qh[l] the top 2 bits (bits
	 * 0-1, 2-3, 4-5, 6-7 for the quarters). The stored quants are q + 32, unsigned. */
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 32; l += 4) {
			const uint8_t *tr = rec + Q6_TRIPLES + 192 * (8 * h + l / 4);
			const pt_vi qa = pt_load(tr);
			const pt_vi qb = pt_load(tr + 64);
			const pt_vi qh = pt_load(tr + 128);
			const int k = 32 * h + l / 4;
			for (int q = 0; q < 4; q++)
				u->q[k + 8 * q] = p_q6(qa, qb, qh, q);
		}
	pt_vi s[4];
	for (int k = 0; k < 4; k++)
		s[k] = pt_load(rec + 64 * k);
	for (int k = 0; k < 16; k++)
		u->sc[k] = p_sbyte(s[k / 4], k % 4);
	for (int q = 0; q < 8; q++)
		u->mp[q] = p_pair16(p_sbyte(s[q / 2], 2 * (q % 2)),
				    p_sbyte(s[q / 2], 2 * (q % 2) + 1));
	u->d = pt_halves(dh);
}

/* Block i of a tile of NT tokens (act rows x[t]) into acc[t] (in memory between blocks). */
PT_INL void tile_q4_K(const struct kblk *u, int64_t i, int64_t nb, const uint8_t *const *x,
		      const int NT, pt_vf *acc)
{
	pt_vi isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = pt_zero();
	for (int j = 0; j < 8; j++) {
		pt_vi ia[P_TK];
		for (int t = 0; t < NT; t++)
			ia[t] = pt_zero();
		for (int c = 0; c < 8; c++)
			for (int t = 0; t < NT; t++) {
				ia[t] = run_dp(ia[t], u->q[8 * j + c],
					       pt_bcast(x[t] + 256 * i + 32 * j + 4 * c));
				PT_HOLD(ia[t]);
			}
		for (int t = 0; t < NT; t++)
			isum[t] = run_end(isum[t], ia[t], u->sc[j]);
	}
	for (int t = 0; t < NT; t++) {
		const int16_t *bs = gk_bs32(x[t], nb) + 8 * i;
		pt_vi summ = pt_zero();
		for (int q = 0; q < 4; q++)
			summ = pt_dpw(summ, u->mp[q], pt_bcast((const uint8_t *)(bs + 2 * q)));
		const pt_vf dx = pt_set1f(act8k_d(x[t], nb)[i]);
		const pt_vf d = pt_mulf(u->d, dx), dm = pt_mulf(u->dmin, dx);
		acc[t] = pt_addf(acc[t],
				 pt_subf(pt_mulf(d, pt_cvt(isum[t])), pt_mulf(dm, pt_cvt(summ))));
	}
}

PT_INL void tile_q6_K(const struct kblk *u, int64_t i, int64_t nb, const uint8_t *const *x,
		      const int NT, pt_vf *acc)
{
	pt_vi isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = pt_zero();
	for (int s = 0; s < 16; s++)
		for (int c0 = 0; c0 < 4; c0 += RUN_MAX_Q6) {
			pt_vi ia[P_TK];
			for (int t = 0; t < NT; t++)
				ia[t] = pt_zero();
			for (int c = c0; c < c0 + RUN_MAX_Q6; c++)
				for (int t = 0; t < NT; t++)
					ia[t] = run_dp(ia[t], u->q[4 * s + c],
						       pt_bcast(x[t] + 256 * i + 16 * s + 4 * c));
			for (int t = 0; t < NT; t++)
				isum[t] = run_end(isum[t], ia[t], u->sc[s]);
		}
	for (int t = 0; t < NT; t++) {
		/* The stored quants are q + 32: take back 32 * sum_s sc_s * bsum_s. */
		const int16_t *bs = act8k_bsums(x[t], nb) + 16 * i;
		pt_vi corr = pt_zero();
		for (int q = 0; q < 8; q++)
			corr = pt_dpw(corr, u->mp[q], pt_bcast((const uint8_t *)(bs + 2 * q)));
		const pt_vi si = pt_sub(isum[t], pt_slli32(corr, 5));
		const pt_vf d = pt_mulf(u->d, pt_set1f(act8k_d(x[t], nb)[i]));
		acc[t] = pt_addf(acc[t], pt_mulf(d, pt_cvt(si)));
	}
}

/* The same blocks straight from their records, for batches of one tile: the nibbles and 6-bit
 * quants are unpacked in registers as they are used, shared by the tile's tokens. */
PT_INL void dtile_q4_K(const uint8_t *rec, int64_t i, int64_t nb, const uint8_t *const *x,
		       const int NT, pt_vf *acc)
{
	const pt_vi m4 = pt_set1_8(0x0f);
	struct kblk_sc {
		pt_vi sc[8], mp[4];
		pt_vf d, dmin;
	} u;
	{
		const pt_vi dm = pt_load(rec);
		u.d = pt_half_lo(dm);
		u.dmin = pt_half_lo(pt_srli32(dm, 16));
		const struct p_q4k_sm s = p_q4k_scales(rec);
		for (int k = 0; k < 4; k++) {
			u.sc[k] = p_byte(s.sc[0], k);
			u.sc[k + 4] = p_byte(s.sc[1], k);
		}
		for (int q = 0; q < 2; q++) {
			u.mp[q] = p_pair16(p_byte(s.mn[0], 2 * q), p_byte(s.mn[0], 2 * q + 1));
			u.mp[q + 2] = p_pair16(p_byte(s.mn[1], 2 * q), p_byte(s.mn[1], 2 * q + 1));
		}
	}
	pt_vi isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = pt_zero();
	for (int j = 0; j < 4; j++) {
		pt_vi ia0[P_TK], ia1[P_TK];
		for (int t = 0; t < NT; t++)
			ia0[t] = ia1[t] = pt_zero();
		for (int c = 0; c < 8; c++) {
			const pt_vi raw = pt_load(rec + 256 + 64 * (8 * j + c));
			const pt_vi lo = pt_and(raw, m4);
			const pt_vi hi = pt_and(pt_srli16(raw, 4), m4);
			for (int t = 0; t < NT; t++) {
				const uint8_t *xq = x[t] + 256 * i + 64 * j + 4 * c;
				ia0[t] = run_dp(ia0[t], lo, pt_bcast(xq));
				ia1[t] = run_dp(ia1[t], hi, pt_bcast(xq + 32));
				PT_HOLD(ia0[t]);
				PT_HOLD(ia1[t]);
			}
		}
		for (int t = 0; t < NT; t++)
			isum[t] = run_end(run_end(isum[t], ia0[t], u.sc[2 * j]), ia1[t],
					  u.sc[2 * j + 1]);
	}
	for (int t = 0; t < NT; t++) {
		const int16_t *bs = gk_bs32(x[t], nb) + 8 * i;
		pt_vi summ = pt_zero();
		for (int q = 0; q < 4; q++)
			summ = pt_dpw(summ, u.mp[q], pt_bcast((const uint8_t *)(bs + 2 * q)));
		const pt_vf dx = pt_set1f(act8k_d(x[t], nb)[i]);
		const pt_vf d = pt_mulf(u.d, dx), dm = pt_mulf(u.dmin, dx);
		acc[t] = pt_addf(acc[t],
				 pt_subf(pt_mulf(d, pt_cvt(isum[t])), pt_mulf(dm, pt_cvt(summ))));
	}
}

PT_INL void dtile_q6_K(const uint8_t *rec, const uint8_t *dh, int64_t i, int64_t nb,
		       const uint8_t *const *x, const int NT, pt_vf *acc)
{
	pt_vi sc[16], mp[8];
	{
		pt_vi s4[4];
		for (int k = 0; k < 4; k++)
			s4[k] = pt_load(rec + 64 * k);
		for (int k = 0; k < 16; k++)
			sc[k] = p_sbyte(s4[k / 4], k % 4);
		for (int q = 0; q < 8; q++)
			mp[q] = p_pair16(p_sbyte(s4[q / 2], 2 * (q % 2)),
					 p_sbyte(s4[q / 2], 2 * (q % 2) + 1));
	}
	pt_vi isum[P_TK];
	for (int t = 0; t < NT; t++)
		isum[t] = pt_zero();
	/* Elements 128h + 32q + l of quarter q (l < 32, from ql[l], ql[l + 32] and qh[l] of half
	 * h) belong to sub-block 8h + 2q + l / 16: four accumulators per token, one per quarter,
	 * over the 16 elements l of one sub-block column lg = l / 16. */
	for (int h = 0; h < 2; h++)
		for (int lg = 0; lg < 2; lg++)
			for (int l0 = 0; l0 < 4; l0 += RUN_MAX_Q6) {
				pt_vi ia[4][P_TK];
				for (int q = 0; q < 4; q++)
					for (int t = 0; t < NT; t++)
						ia[q][t] = pt_zero();
				for (int l4 = l0; l4 < l0 + RUN_MAX_Q6; l4++) {
					const int l = 16 * lg + 4 * l4;
					const uint8_t *tr =
						rec + Q6_TRIPLES + 192 * (8 * h + l / 4);
					const pt_vi qa = pt_load(tr);
					const pt_vi qb = pt_load(tr + 64);
					const pt_vi qh = pt_load(tr + 128);
					for (int q = 0; q < 4; q++) {
						const pt_vi v = p_q6(qa, qb, qh, q);
						for (int t = 0; t < NT; t++)
							ia[q][t] = run_dp(ia[q][t], v,
									  pt_bcast(x[t] + 256 * i +
										   128 * h +
										   32 * q + l));
					}
				}
				for (int q = 0; q < 4; q++)
					for (int t = 0; t < NT; t++)
						isum[t] = run_end(isum[t], ia[q][t],
								  sc[8 * h + 2 * q + lg]);
			}
	const pt_vf dv = pt_halves(dh);
	for (int t = 0; t < NT; t++) {
		const int16_t *bs = act8k_bsums(x[t], nb) + 16 * i;
		pt_vi corr = pt_zero();
		for (int q = 0; q < 8; q++)
			corr = pt_dpw(corr, mp[q], pt_bcast((const uint8_t *)(bs + 2 * q)));
		const pt_vi si = pt_sub(isum[t], pt_slli32(corr, 5));
		const pt_vf d = pt_mulf(dv, pt_set1f(act8k_d(x[t], nb)[i]));
		acc[t] = pt_addf(acc[t], pt_mulf(d, pt_cvt(si)));
	}
}

PT_INL void tile_k(const struct kblk *u, int is_q6, int64_t i, int64_t nb, const uint8_t *const *x,
		   const int NT, pt_vf *acc)
{
	if (is_q6)
		tile_q6_K(u, i, nb, x, NT, acc);
	else
		tile_q4_K(u, i, nb, x, NT, acc);
}

PT_INL void tiles_k(const struct kblk *u, int is_q6, int64_t i, int64_t nb, const uint8_t *const *x,
		    int nt, pt_vf *acc)
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

/* rec: the record; `half` picks the lanes (the AVX2 set takes a group as two halves of 8). */
PT_INL void dtile_k(const uint8_t *rec, int half, int is_q6, int64_t i, int64_t nb,
		    const uint8_t *const *x, const int NT, pt_vf *acc)
{
	if (is_q6)
		dtile_q6_K(rec + 32 * half, rec + Q6_D + 16 * half, i, nb, x, NT, acc);
	else
		dtile_q4_K(rec + 32 * half, i, nb, x, NT, acc);
}

/* One group for a batch of one tile (up to P_TK tokens): blocks straight from their records. */
static void group_k_direct(const struct cpu_mm *m, int64_t g, int n, int is_q6)
{
	const int64_t nb = m->ne0 / 256;
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	const uint8_t *x[P_TK];
	pt_vf acc[PT_HALVES * PT_TK_STRIDE]; /* half h's tokens from PT_TK_STRIDE * h */
	for (int t = 0; t < PT_HALVES * PT_TK_STRIDE; t++)
		acc[t] = pt_zerof();
	for (int t = 0; t < n; t++)
		x[t] = m->x + (size_t)t * m->x_stride;
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *rec = grp + (size_t)i * (is_q6 ? REC_Q6_K : REC_Q4_K);
		p_prefetch(rec, is_q6 ? REC_Q6_K : REC_Q4_K);
		for (int h = 0; h < PT_HALVES; h++)
			switch (n) {
			case 6:
				dtile_k(rec, h, is_q6, i, nb, x, 6, acc + PT_TK_STRIDE * h);
				break;
			case 5:
				dtile_k(rec, h, is_q6, i, nb, x, 5, acc + PT_TK_STRIDE * h);
				break;
			case 4:
				dtile_k(rec, h, is_q6, i, nb, x, 4, acc + PT_TK_STRIDE * h);
				break;
			case 3:
				dtile_k(rec, h, is_q6, i, nb, x, 3, acc + PT_TK_STRIDE * h);
				break;
			case 2:
				dtile_k(rec, h, is_q6, i, nb, x, 2, acc + PT_TK_STRIDE * h);
				break;
			default:
				dtile_k(rec, h, is_q6, i, nb, x, 1, acc + PT_TK_STRIDE * h);
				break;
			}
	}
	for (int h = 0; h < PT_HALVES; h++)
		for (int t = 0; t < n; t++)
			pt_storef(m->y + (size_t)t * (size_t)m->ne1 + (size_t)g +
					  (size_t)(PT_W * h),
				  acc[PT_TK_STRIDE * h + t]);
}

/* One group for up to P_CHUNK tokens from t0: each block unpacked once, then every tile. */
static void group_k(const struct cpu_mm *m, int64_t g, int t0, int n, int is_q6)
{
	const int64_t nb = m->ne0 / 256;
	const uint8_t *grp = m->w + (size_t)g * m->row_bytes;
	struct kblk u;
	pt_vf acc[PT_HALVES][P_CHUNK];
	for (int h = 0; h < PT_HALVES; h++)
		for (int t = 0; t < n; t++)
			acc[h][t] = pt_zerof();
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *rec = grp + (size_t)i * (is_q6 ? REC_Q6_K : REC_Q4_K);
		for (int h = 0; h < PT_HALVES; h++) {
			if (is_q6)
				unpack_q6_K(rec + 32 * h, rec + Q6_D + 16 * h, &u);
			else
				unpack_q4_K(rec + 32 * h, &u);
			for (int tt = 0; tt < n; tt += P_TK) {
				const int nt = n - tt < P_TK ? n - tt : P_TK;
				const uint8_t *x[P_TK];
				for (int t = 0; t < nt; t++)
					x[t] = m->x + (size_t)(t0 + tt + t) * m->x_stride;
				tiles_k(&u, is_q6, i, nb, x, nt, acc[h] + tt);
			}
		}
	}
	for (int h = 0; h < PT_HALVES; h++)
		for (int t = 0; t < n; t++)
			pt_storef(m->y + (size_t)(t0 + t) * (size_t)m->ne1 + (size_t)g +
					  (size_t)(PT_W * h),
				  acc[h][t]);
}

/* ------------------------------------------------------------------------------------------ */
/* The driver                                                                                    */

/* Rows [r0, r1): whole groups from their panels, the rows after the last whole group by the
 * set's row kernel `tail` (r0 is a multiple of CPU_PANEL_ROWS). */
PT_INL void pmm(const struct cpu_mm *m, int64_t r0, int64_t r1, enum lm_dtype type, cpu_mm_fn tail)
{
	const int64_t whole = m->ne1 / CPU_PANEL_ROWS * CPU_PANEL_ROWS;
	const int64_t gend = r1 < whole ? r1 : whole;
	for (int64_t g = r0; g + CPU_PANEL_ROWS <= gend; g += CPU_PANEL_ROWS) {
#ifdef PT_ONE
		if (m->n == 1) {
			PT_ONE(m, g, type);
			continue;
		}
#endif
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

/* ------------------------------------------------------------------------------------------ */
/* The set's entries                                                                          */

static void pmm_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q8_0, PT_ROWS(q8_0));
}

static void pmm_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q4_0, PT_ROWS(q4_0));
}

static void pmm_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q4_K, PT_ROWS(q4_K));
}

static void pmm_q6_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	pmm(m, r0, r1, LM_Q6_K, PT_ROWS(q6_K));
}

static size_t gk_act_bytes(int64_t n)
{
	return gk_bytes(n);
}

static void gk_convert(const float *x, void *dst, int64_t n)
{
	simd_gk_row(x, dst, n);
}

void PT_FILL(struct cpu_kernels *k)
{
	struct cpu_type_ops *t = k->type;
	/* K-quant activations in the gk layout; the set's row kernels read its act8k part (natural
	 * order), so Q4_K's and Q6_K's single-token paths take the same activations. */
	t[LM_Q4_K].act_bytes = gk_act_bytes;
	t[LM_Q4_K].to_act = gk_convert;
	t[LM_Q6_K].act_bytes = gk_act_bytes;
	t[LM_Q6_K].to_act = gk_convert;
	t[LM_Q8_0].pmm = pmm_q8_0;
	t[LM_Q4_0].pmm = pmm_q4_0;
	t[LM_Q4_K].pmm = pmm_q4_K;
	t[LM_Q6_K].pmm = pmm_q6_K;
}

#endif

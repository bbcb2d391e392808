/* kernels_amx.c — the multi-token matmul (prefill, batched decode) on AMX tiles, for Q8_0, Q4_0
 * and Q4_K weights. The avx512 set serves single tokens; cpu_kernels_amx_fill adds GEMMs that the
 * backend uses for batches (struct cpu_gemm_ops).
 *
 * The shape of the work. A strip of 16 weight rows is the A operand of TDPBSSD/TDPBUSD: 16 rows
 * of one 32-element block (32 bytes each), straight from the GGUF bytes for a full Q8_0 strip
 * (a tile load takes a row stride) and from a per-thread panel of unpacked quants otherwise.
 * The batch's activations are the B operand, quantized once per matmul into groups of 16 tokens
 * in the VNNI layout a B tile wants (each 64-byte tile row holds 4 consecutive quants of each of
 * the 16 tokens). One tile product is then the exact integer dot product of 16 rows x 16 tokens
 * over one block, the `sumi` of the generic kernel for 256 outputs at once; it is stored and
 * scaled in AVX-512 registers whose lanes are the 16 tokens, so each weight scale is a broadcast
 * and each activation scale a vector load. A strip is multiplied by every group of the batch
 * before the next strip, so weights are read from memory once per matmul and from cache once
 * per group.
 *
 * Numerics. Integer block sums are exact whatever computes them; the float steps that follow are
 * those of kernels_generic.c, in its order, operation by operation (this file is compiled with
 * -ffp-contract=off so no multiply and add fuse), so every output equals the generic kernel's
 * bit for bit:
 *     Q8_0: sum = sum + (float)sumi * (dw * dx)          Q4_0: sum = sum + ((float)sumi * dw) * dx
 *     Q4_K: sum = sum + ((dw * dx) * (float)sumi - (dmin * dx) * (float)summ)
 * with sumi = sum_j sc_j * dot_j over the eight sub-blocks (vpmulld on the tile results) and
 * summ = sum_j m_j * bsum_j (vpdpwssd on 16-bit pairs).
 *
 * Tiles are per thread: a GEMM call loads its tile configuration on entry and releases the tile
 * state on return, so the pool's threads carry no tile state between ops.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

#define AMX_G   16  /* tokens per group: the N of a tile product */
#define AMX_M   16  /* weight rows per strip: the M of a tile product */
#define AMX_QB  512 /* bytes of one 32-element block of a group (or of a strip): 16 x 32 */
#define AMX_INL static inline __attribute__((always_inline))

/* Tile numbers (macros: GCC's tile intrinsics paste them into the instruction text). Tiles 0/1
 * (C) and 4/5 (B) serve groups of AMX_G tokens, two blocks in flight; when the batch also has a
 * partial group, tiles 6 (C) and 7 (B) are shaped for it. A batch smaller than a group shapes
 * tiles 0/1 and 4/5 for itself instead. */
#define AMX_C0 0
#define AMX_C1 1
#define AMX_A0 2
#define AMX_A1 3
#define AMX_B0 4
#define AMX_B1 5
#define AMX_CT 6
#define AMX_BT 7

/* The LDTILECFG operand (palette 1). */
struct amx_cfg {
	uint8_t palette, start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};
static_assert(sizeof(struct amx_cfg) == 64, "tile configuration is 64 bytes");

/* How a GEMM call cuts its batch: `full` groups of AMX_G tokens, then `nt` tokens (0..15) in a
 * partial group. A C tile of nt columns is stored densely, 16 rows x nt int32 = nt vectors, and
 * lane i of vector j is row (16j + i) / nt, token (16j + i) % nt: `wi` and `xi` map lanes to the
 * row and token vectors whose elements they need. So the float work of a partial group scales
 * with its tokens, and a single token costs one vector per block of 16 rows. */
struct amx_plan {
	int full, nt;
	int32_t wi[AMX_G][16] __attribute__((aligned(64)));
	int32_t xi[AMX_G][16] __attribute__((aligned(64)));
};

/* C: 16 rows x 16 int32; A: 16 rows x 32 bytes (one block of 16 weight rows); B: 8 rows x 64
 * bytes (one block of 16 tokens, 4 quants per token per row); narrower C and B for the partial
 * group. */
static void amx_plan_init(struct amx_plan *p, int n)
{
	p->full = n / AMX_G;
	p->nt = n % AMX_G;
	for (int j = 0; j < p->nt; j++)
		for (int i = 0; i < 16; i++) {
			p->wi[j][i] = (16 * j + i) / p->nt;
			p->xi[j][i] = (16 * j + i) % p->nt;
		}
	struct amx_cfg cfg __attribute__((aligned(64)));
	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	const int cols = p->full > 0 ? AMX_G : p->nt;
	for (int t = AMX_C0; t <= AMX_C1; t++) {
		cfg.rows[t] = AMX_M;
		cfg.colsb[t] = (uint16_t)(cols * 4);
	}
	for (int t = AMX_A0; t <= AMX_A1; t++) {
		cfg.rows[t] = AMX_M;
		cfg.colsb[t] = 32;
	}
	for (int t = AMX_B0; t <= AMX_B1; t++) {
		cfg.rows[t] = 32 / 4;
		cfg.colsb[t] = (uint16_t)(cols * 4);
	}
	if (p->full > 0 && p->nt > 0) {
		cfg.rows[AMX_CT] = AMX_M;
		cfg.colsb[AMX_CT] = (uint16_t)(p->nt * 4);
		cfg.rows[AMX_BT] = 32 / 4;
		cfg.colsb[AMX_BT] = (uint16_t)(p->nt * 4);
	}
	/* Not _tile_loadconfig: GCC's names only the first 8 bytes as read, so the stores that
	 * fill the rest of cfg may be dropped as dead. */
	__asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

static int amx_groups(int n)
{
	return (n + AMX_G - 1) / AMX_G;
}

/* Scatter offsets of the 8 dwords of a 32-byte block row into a B tile: one 64-byte row each. */
AMX_INL __m256i amx_vnni_index(void)
{
	return _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
}

/* One tile product: C = A . B, stored to c with row stride c_stride. */
#define AMX_PRODUCT(TC, TA, TB, DP, a, a_stride, b, c, c_stride) \
	do {                                                     \
		_tile_zero(TC);                                  \
		_tile_loadd(TA, (a), (long)(a_stride));          \
		_tile_loadd(TB, (b), AMX_G * 4);                 \
		DP(TC, TA, TB);                                  \
		_tile_stored(TC, (c), (long)(c_stride));         \
	} while (0)

/* A whole group's 16 x 16 floats, acc[m] lane t, to y[t][r0 + m] for m < mr. */
AMX_INL void amx_store_full(const __m512 *acc, float *y, int64_t ne1, int64_t r0, int mr)
{
	float tmp[AMX_M][AMX_G] __attribute__((aligned(64)));
	for (int m = 0; m < AMX_M; m++)
		_mm512_store_ps(tmp[m], acc[m]);
	for (int t = 0; t < AMX_G; t++)
		for (int m = 0; m < mr; m++)
			y[(size_t)t * (size_t)ne1 + (size_t)(r0 + m)] = tmp[m][t];
}

/* A partial group's dense results (see struct amx_plan) to y[t][r0 + r] for r < mr. */
AMX_INL void amx_store_dense(const __m512 *acc, int nt, float *y, int64_t ne1, int64_t r0, int mr)
{
	float tmp[AMX_G * 16] __attribute__((aligned(64)));
	for (int j = 0; j < nt; j++)
		_mm512_store_ps(tmp + 16 * j, acc[j]);
	for (int f = 0; f < 16 * nt; f++) {
		const int r = f / nt, t = f % nt;
		if (r < mr)
			y[(size_t)t * (size_t)ne1 + (size_t)(r0 + r)] = tmp[f];
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Q8_0 and Q4_0                                                                              */

/* The batch layout ("amx8"), nb = ne0 / 32 blocks, per group of 16 tokens:
 *     int8_t qv[nb][8][64]   block b as a B tile: byte 64 * k + 4 * t + i is quant 4k + i of
 *                            token t (the quants of the reference activation quantizer)
 *     float  dx[nb][16]      block b's f16 scale as f32, per token
 * Padding tokens of the last group are zeros. */
static size_t amx8_group_bytes(int64_t nb)
{
	return (size_t)nb * (AMX_QB + AMX_G * sizeof(float));
}

static size_t amx8_act_bytes(int64_t ne0, int n)
{
	return (size_t)amx_groups(n) * amx8_group_bytes(ne0 / 32);
}

static void amx8_act(const float *x, int64_t ne0, int n, int t0, int t1, void *dst)
{
	const int64_t nb = ne0 / 32;
	const size_t gs = amx8_group_bytes(nb);
	const __m256i idx = amx_vnni_index();
	const int end = t1 == n ? amx_groups(n) * AMX_G : t1;
	for (int t = t0; t < end; t++) {
		uint8_t *qv = (uint8_t *)dst + (size_t)(t / AMX_G) * gs;
		float *dx = (float *)(qv + nb * AMX_QB);
		const int tt = t % AMX_G;
		for (int64_t b = 0; b < nb; b++) {
			float d = 0.0f;
			__m256i q = _mm256_setzero_si256();
			if (t < n)
				q = q8_0_block(x + (size_t)t * (size_t)ne0 + 32 * b, &d, NULL,
					       NULL);
			_mm256_i32scatter_epi32(qv + b * AMX_QB + 4 * tt, idx, q, 1);
			dx[b * AMX_G + tt] = d;
		}
	}
}

/* Per-thread scratch: a strip's quants as A tiles [nb][16][32] (Q4_0 unpacked to q - 8; Q8_0
 * only for a strip cut short by the end of the matrix) and its scales dw[nb][16] as f32. */
static size_t amx8_scratch(int64_t ne0)
{
	const int64_t nb = ne0 / 32;
	return (size_t)nb * AMX_QB + (size_t)nb * AMX_M * sizeof(float);
}

/* Q4_0 block: the 32 quants q - 8 in element order (low nibbles, then high nibbles). */
AMX_INL __m256i amx_q4_0_unpack(const block_q4_0 *blk)
{
	const __m128i q = _mm_loadu_si128((const __m128i *)blk->qs);
	const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
	return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* The generic kernels' block step: Q8_0 sum + s * (dw * dx), Q4_0 sum + (s * dw) * dx. */
AMX_INL __m512 amx8_term(__m512 s, __m512 dw, __m512 dx, int is_q4)
{
	return is_q4 ? _mm512_mul_ps(_mm512_mul_ps(s, dw), dx)
		     : _mm512_mul_ps(s, _mm512_mul_ps(dw, dx));
}

/* A strip's A operand: where block b of its 16 rows is, and their scales; and the next strip
 * to prefetch while its first group computes (NULL: none). */
struct amx8_strip {
	const uint8_t *a;
	size_t a_stride, a_block;
	const float *dw; /* [nb][16] */
	const uint8_t *next;
	size_t rb, bs; /* row and block bytes of the weights */
};

/* Row offsets of a strip, in bytes, for gathers: r * row_bytes in lane r. */
AMX_INL __m512i amx_row_offsets(size_t row_bytes)
{
	return _mm512_mullo_epi32(
		_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
		_mm512_set1_epi32((int)row_bytes));
}

/* The f16 scales at the start of block b of the 16 rows (gathered) as f32. */
AMX_INL __m512 amx_gather_d(__m512i rows, const uint8_t *block0)
{
	const __m512i d = _mm512_i32gather_epi32(rows, block0, 1);
	return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
}

/* The cache line at byte off of each of 16 rows into L2: the next strip, asked for while this
 * one computes, so that its preparation finds it in cache rather than waiting on memory. Only
 * for batches of one or two groups: a larger batch computes long enough on each strip for the
 * hardware prefetchers, and the extra requests then cost more than they save (measured: q4_0 at
 * 128 tokens 17% slower with them, q8_0 at 16 tokens 20% faster). */
AMX_INL void amx_prefetch16(const uint8_t *next, size_t rb, size_t off)
{
	if (next == NULL)
		return;
	for (int r = 0; r < AMX_M; r++)
		_mm_prefetch((const char *)next + (size_t)r * rb + off, _MM_HINT_T1);
}

/* The lines of block b (bs bytes) of the next strip that block b - 1 did not start. */
AMX_INL void amx_prefetch_block(const uint8_t *next, size_t rb, int64_t b, size_t bs)
{
	const size_t off = (size_t)b * bs;
	if (b == 0 || off / 64 != (off - bs) / 64)
		amx_prefetch16(next, rb, off & ~(size_t)63);
	if ((off + bs - 1) / 64 != off / 64)
		amx_prefetch16(next, rb, (off + bs - 1) & ~(size_t)63);
}

/* Q4_0 block b of rows 4k..4k+3 (base: the strip's first row) as the A tile's 4 rows of
 * q - 8, in element order: each 16-byte qs becomes its low nibbles then its high nibbles. */
AMX_INL void amx_q4_0_rows4(const uint8_t *base, size_t rb, int64_t b, int k, uint8_t *dst)
{
	const uint8_t *q = base + (size_t)(4 * k) * rb + b * (int64_t)sizeof(block_q4_0) +
			   offsetof(block_q4_0, qs);
	__m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)q));
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + rb)), 1);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + 2 * rb)), 2);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + 3 * rb)), 3);
	const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
	const __m512i lo = _mm512_and_si512(v, m4);
	const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
	const __m512i o0 =
		_mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi);
	const __m512i o1 =
		_mm512_permutex2var_epi64(lo, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), hi);
	_mm512_store_si512(dst + 128 * k, _mm512_sub_epi8(o0, eight));
	_mm512_store_si512(dst + 128 * k + 64, _mm512_sub_epi8(o1, eight));
}

/* Loads the strip at row s (mr rows of it in the matrix) into the scratch where needed. Full
 * strips gather each block's 16 scales at once; Q4_0 unpacks four rows per vector. */
AMX_INL void amx8_strip_init(struct amx8_strip *st, const struct cpu_mm *m, int64_t s, int mr,
			     void *scratch, int is_q4)
{
	const int64_t nb = m->ne0 / 32;
	uint8_t *panel = scratch;
	float *dw = (float *)(panel + nb * AMX_QB);
	const uint8_t *base = m->w + (size_t)s * m->row_bytes;
	const size_t bs = is_q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
	st->dw = dw;
	st->rb = m->row_bytes;
	st->bs = bs;
	st->next =
		s + 2 * AMX_M <= m->ne1 && m->n <= 2 * AMX_G ? base + AMX_M * m->row_bytes : NULL;
	if (mr == AMX_M) {
		const __m512i rows = amx_row_offsets(m->row_bytes);
		if (is_q4) {
			for (int64_t b = 0; b < nb; b++)
				for (int k = 0; k < AMX_M / 4; k++)
					amx_q4_0_rows4(base, m->row_bytes, b, k,
						       panel + b * AMX_QB);
			st->a = panel;
			st->a_stride = 32;
			st->a_block = AMX_QB;
		} else {
			/* The quants of block b of the 16 rows, 32 bytes each, row_bytes apart. */
			st->a = base + offsetof(block_q8_0, qs);
			st->a_stride = m->row_bytes;
			st->a_block = sizeof(block_q8_0);
		}
		for (int64_t b = 0; b < nb; b++)
			_mm512_store_ps(dw + AMX_M * b, amx_gather_d(rows, base + b * (int64_t)bs));
		return;
	}
	/* The last strip of a matrix whose rows are not a multiple of 16: zero rows after it. */
	st->a = panel;
	st->a_stride = 32;
	st->a_block = AMX_QB;
	for (int r = 0; r < AMX_M; r++) {
		const uint8_t *row = base + (size_t)r * m->row_bytes;
		for (int64_t b = 0; b < nb; b++) {
			__m256i q = _mm256_setzero_si256();
			float d = 0.0f;
			if (r < mr && is_q4) {
				const block_q4_0 *blk = (const block_q4_0 *)row + b;
				q = amx_q4_0_unpack(blk);
				d = f16_to_f32(blk->d);
			} else if (r < mr) {
				const block_q8_0 *blk = (const block_q8_0 *)row + b;
				q = _mm256_loadu_si256((const __m256i *)blk->qs);
				d = f16_to_f32(blk->d);
			}
			_mm256_store_si256((__m256i *)(panel + b * AMX_QB + 32 * r), q);
			dw[AMX_M * b + r] = d;
		}
	}
}

/* A full group's tile product of block b (at c: [16 rows][16 tokens]) into acc[row]. */
AMX_INL void amx8_full_scale(const int32_t *c, const float *dw, const float *dx, int is_q4,
			     __m512 *acc)
{
	const __m512 x = _mm512_load_ps(dx);
	for (int m = 0; m < AMX_M; m++) {
		const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c + AMX_G * m));
		acc[m] = _mm512_add_ps(acc[m], amx8_term(s, _mm512_set1_ps(dw[m]), x, is_q4));
	}
}

AMX_INL void amx8_full_group(const struct amx8_strip *st, int64_t nb, const uint8_t *xq, int is_q4,
			     const uint8_t *next, __m512 *acc)
{
	const float *dx = (const float *)(xq + nb * AMX_QB);
	int32_t cbuf[2][AMX_M * AMX_G] __attribute__((aligned(64)));
	for (int r = 0; r < AMX_M; r++)
		acc[r] = _mm512_setzero_ps();
	int64_t b = 0;
	for (; b + 2 <= nb; b += 2) {
		amx_prefetch_block(next, st->rb, b, st->bs);
		amx_prefetch_block(next, st->rb, b + 1, st->bs);
		AMX_PRODUCT(AMX_C0, AMX_A0, AMX_B0, _tile_dpbssd, st->a + b * st->a_block,
			    st->a_stride, xq + b * AMX_QB, cbuf[0], AMX_G * 4);
		AMX_PRODUCT(AMX_C1, AMX_A1, AMX_B1, _tile_dpbssd, st->a + (b + 1) * st->a_block,
			    st->a_stride, xq + (b + 1) * AMX_QB, cbuf[1], AMX_G * 4);
		amx8_full_scale(cbuf[0], st->dw + AMX_M * b, dx + AMX_G * b, is_q4, acc);
		amx8_full_scale(cbuf[1], st->dw + AMX_M * (b + 1), dx + AMX_G * (b + 1), is_q4,
				acc);
	}
	if (b < nb) {
		amx_prefetch_block(next, st->rb, b, st->bs);
		AMX_PRODUCT(AMX_C0, AMX_A0, AMX_B0, _tile_dpbssd, st->a + b * st->a_block,
			    st->a_stride, xq + b * AMX_QB, cbuf[0], AMX_G * 4);
		amx8_full_scale(cbuf[0], st->dw + AMX_M * b, dx + AMX_G * b, is_q4, acc);
	}
}

/* A partial group's dense tile product of block b (nt vectors at c) into acc[0..nt). */
AMX_INL void amx8_dense_scale(const int32_t *c, const struct amx_plan *p, const float *dw,
			      const float *dx, int is_q4, __m512 *acc)
{
	const __m512 w = _mm512_load_ps(dw), x = _mm512_load_ps(dx);
	if (p->nt == 1) {
		/* Lanes are the 16 rows of the one token. */
		const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c));
		acc[0] = _mm512_add_ps(acc[0], amx8_term(s, w, _mm512_set1_ps(dx[0]), is_q4));
		return;
	}
	for (int j = 0; j < AMX_G; j++) {
		if (j >= p->nt)
			break;
		const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * j));
		const __m512 we = _mm512_permutexvar_ps(_mm512_load_si512(p->wi[j]), w);
		const __m512 xe = _mm512_permutexvar_ps(_mm512_load_si512(p->xi[j]), x);
		acc[j] = _mm512_add_ps(acc[j], amx8_term(s, we, xe, is_q4));
	}
}

/* The partial group: tiles 0/1 and 4/5 when it is the whole batch (two blocks in flight),
 * tiles 6/7 after full groups. */
AMX_INL void amx8_dense_group(const struct amx8_strip *st, const struct amx_plan *p, int64_t nb,
			      const uint8_t *xq, int is_q4, __m512 *acc)
{
	const float *dx = (const float *)(xq + nb * AMX_QB);
	int32_t cbuf[2][AMX_M * AMX_G] __attribute__((aligned(64)));
	const int cs = p->nt * 4;
	for (int j = 0; j < AMX_G; j++)
		acc[j] = _mm512_setzero_ps();
	int64_t b = 0;
	if (p->full == 0) {
		for (; b + 2 <= nb; b += 2) {
			amx_prefetch_block(st->next, st->rb, b, st->bs);
			amx_prefetch_block(st->next, st->rb, b + 1, st->bs);
			AMX_PRODUCT(AMX_C0, AMX_A0, AMX_B0, _tile_dpbssd, st->a + b * st->a_block,
				    st->a_stride, xq + b * AMX_QB, cbuf[0], cs);
			AMX_PRODUCT(AMX_C1, AMX_A1, AMX_B1, _tile_dpbssd,
				    st->a + (b + 1) * st->a_block, st->a_stride,
				    xq + (b + 1) * AMX_QB, cbuf[1], cs);
			amx8_dense_scale(cbuf[0], p, st->dw + AMX_M * b, dx + AMX_G * b, is_q4,
					 acc);
			amx8_dense_scale(cbuf[1], p, st->dw + AMX_M * (b + 1), dx + AMX_G * (b + 1),
					 is_q4, acc);
		}
		if (b < nb) {
			amx_prefetch_block(st->next, st->rb, b, st->bs);
			AMX_PRODUCT(AMX_C0, AMX_A0, AMX_B0, _tile_dpbssd, st->a + b * st->a_block,
				    st->a_stride, xq + b * AMX_QB, cbuf[0], cs);
			amx8_dense_scale(cbuf[0], p, st->dw + AMX_M * b, dx + AMX_G * b, is_q4,
					 acc);
		}
		return;
	}
	for (; b < nb; b++) {
		AMX_PRODUCT(AMX_CT, AMX_A0, AMX_BT, _tile_dpbssd, st->a + b * st->a_block,
			    st->a_stride, xq + b * AMX_QB, cbuf[0], cs);
		amx8_dense_scale(cbuf[0], p, st->dw + AMX_M * b, dx + AMX_G * b, is_q4, acc);
	}
}

AMX_INL void amx8_gemm(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch, int is_q4)
{
	const int64_t nb = m->ne0 / 32;
	const size_t gs = amx8_group_bytes(nb);
	struct amx_plan plan;
	amx_plan_init(&plan, m->n);
	__m512 acc[AMX_G];
	for (int64_t s = r0; s < r1; s += AMX_M) {
		const int mr = r1 - s < AMX_M ? (int)(r1 - s) : AMX_M;
		struct amx8_strip st;
		amx8_strip_init(&st, m, s, mr, scratch, is_q4);
		for (int g = 0; g < plan.full; g++) {
			amx8_full_group(&st, nb, m->x + (size_t)g * gs, is_q4,
					g == 0 ? st.next : NULL, acc);
			amx_store_full(acc, m->y + (size_t)g * AMX_G * (size_t)m->ne1, m->ne1, s,
				       mr);
		}
		if (plan.nt > 0) {
			const int g = plan.full;
			amx8_dense_group(&st, &plan, nb, m->x + (size_t)g * gs, is_q4, acc);
			amx_store_dense(acc, plan.nt, m->y + (size_t)g * AMX_G * (size_t)m->ne1,
					m->ne1, s, mr);
		}
	}
	_tile_release();
}

static void amx_gemm_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch)
{
	amx8_gemm(m, r0, r1, scratch, 0);
}

static void amx_gemm_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch)
{
	amx8_gemm(m, r0, r1, scratch, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K                                                                                       */

/* The batch layout ("amx8k"), nbk = ne0 / 256 super-blocks, per group of 16 tokens:
 *     int8_t  qv[nbk][8][8][64]  sub-block j (elements 32j..32j+31) of super-block i as a B
 *                                tile, as in amx8 (the quants of the reference Q8_K quantizer)
 *     float   dx[nbk][16]        the Q8_K scale, per token
 *     int32_t sp[nbk][4][16]     per token, the sums of sub-blocks 2k and 2k + 1 as two int16
 *                                (low, high): the pairs vpdpwssd multiplies by the mins
 * Padding tokens of the last group are zeros. */
#define AMXK_SUB 8
static size_t amx8k_group_bytes(int64_t nbk)
{
	return (size_t)nbk * (AMXK_SUB * AMX_QB + AMX_G * sizeof(float) + 4 * AMX_G * 4);
}

static size_t amx8k_act_bytes(int64_t ne0, int n)
{
	return (size_t)amx_groups(n) * amx8k_group_bytes(ne0 / 256);
}

static void amx8k_act(const float *x, int64_t ne0, int n, int t0, int t1, void *dst)
{
	static const int natural[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	const int64_t nbk = ne0 / 256;
	const size_t gs = amx8k_group_bytes(nbk);
	const __m256i idx = amx_vnni_index();
	const int end = t1 == n ? amx_groups(n) * AMX_G : t1;
	/* One super-block in the act8k layout (simd_x86.h). */
	uint8_t blk[(256 + 4 + 32 + 63) / 64 * 64] __attribute__((aligned(64)));
	for (int t = t0; t < end; t++) {
		uint8_t *qv = (uint8_t *)dst + (size_t)(t / AMX_G) * gs;
		float *dx = (float *)(qv + nbk * AMXK_SUB * AMX_QB);
		int32_t *sp = (int32_t *)(dx + nbk * AMX_G);
		const int tt = t % AMX_G;
		for (int64_t i = 0; i < nbk; i++) {
			if (t < n)
				simd_q8_K_row(x + (size_t)t * (size_t)ne0 + 256 * i, blk, 256,
					      natural);
			else
				memset(blk, 0, sizeof blk);
			const int16_t *bs = act8k_bsums(blk, 1);
			for (int j = 0; j < AMXK_SUB; j++) {
				const __m256i q =
					_mm256_load_si256((const __m256i *)(blk + 32 * j));
				_mm256_i32scatter_epi32(qv + (i * AMXK_SUB + j) * AMX_QB + 4 * tt,
							idx, q, 1);
			}
			dx[i * AMX_G + tt] = act8k_d(blk, 1)[0];
			for (int k = 0; k < 4; k++) {
				const int lo = bs[4 * k] + bs[4 * k + 1],
					  hi = bs[4 * k + 2] + bs[4 * k + 3];
				sp[(i * 4 + k) * AMX_G + tt] =
					(int32_t)((uint32_t)(uint16_t)lo |
						  ((uint32_t)(uint16_t)hi << 16));
			}
		}
	}
}

/* Per-thread scratch: a strip's quants as A tiles [nbk][8][16][32] (unsigned nibbles) and per
 * super-block the scales of its 16 rows as vectors: d and dmin as f32, the 8 six-bit scales as
 * int32 and the 8 mins as 4 int16 pairs (sub-blocks 2k, 2k + 1). */
struct amxk_sb {
	float d[AMX_M], dmin[AMX_M];
	int32_t sc[AMXK_SUB][AMX_M];
	int32_t mp[4][AMX_M];
};

static size_t amx8k_scratch(int64_t ne0)
{
	const int64_t nbk = ne0 / 256;
	return (size_t)nbk * (AMXK_SUB * AMX_QB + sizeof(struct amxk_sb));
}

static void amx8k_strip_init(const struct cpu_mm *m, int64_t s, int mr, uint8_t *panel,
			     struct amxk_sb *tab)
{
	const int64_t nbk = m->ne0 / 256;
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	for (int r = 0; r < AMX_M; r++) {
		const block_q4_K *row = (const block_q4_K *)(m->w + (size_t)(s + r) * m->row_bytes);
		for (int64_t i = 0; i < nbk; i++) {
			struct amxk_sb *t = &tab[i];
			uint8_t *p = panel + i * AMXK_SUB * AMX_QB + 32 * r;
			if (r >= mr) {
				t->d[r] = t->dmin[r] = 0.0f;
				for (int j = 0; j < AMXK_SUB; j++) {
					t->sc[j][r] = 0;
					memset(p + j * AMX_QB, 0, 32);
				}
				for (int k = 0; k < 4; k++)
					t->mp[k][r] = 0;
				continue;
			}
			uint8_t sc[8], mn[8];
			simd_q4_K_scales(row[i].scales, sc, mn);
			t->d[r] = f16_to_f32(row[i].d);
			t->dmin[r] = f16_to_f32(row[i].dmin);
			for (int j = 0; j < AMXK_SUB; j++)
				t->sc[j][r] = sc[j];
			for (int k = 0; k < 4; k++)
				t->mp[k][r] = (int32_t)((uint32_t)mn[2 * k] |
							((uint32_t)mn[2 * k + 1] << 16));
			/* 32 bytes hold sub-blocks 2k (low nibbles) and 2k + 1 (high). */
			for (int k = 0; k < 4; k++) {
				const __m256i q =
					_mm256_loadu_si256((const __m256i *)(row[i].qs + 32 * k));
				_mm256_store_si256((__m256i *)(p + 2 * k * AMX_QB),
						   _mm256_and_si256(q, m4));
				_mm256_store_si256((__m256i *)(p + (2 * k + 1) * AMX_QB),
						   _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
			}
		}
	}
}

/* The eight sub-block products of super-block i, stored at cbuf[j] with row stride cs: tiles
 * 0/1 and 4/5, or 6/7 for a partial group after full ones. */
AMX_INL void amx8k_products(const uint8_t *pa, const uint8_t *pb, int single, int cs,
			    int32_t (*cbuf)[AMX_M * AMX_G])
{
	if (single) {
		for (int j = 0; j < AMXK_SUB; j++)
			AMX_PRODUCT(AMX_CT, AMX_A0, AMX_BT, _tile_dpbusd, pa + j * AMX_QB, 32,
				    pb + j * AMX_QB, cbuf[j], cs);
		return;
	}
	for (int j = 0; j < AMXK_SUB; j += 2) {
		AMX_PRODUCT(AMX_C0, AMX_A0, AMX_B0, _tile_dpbusd, pa + j * AMX_QB, 32,
			    pb + j * AMX_QB, cbuf[j], cs);
		AMX_PRODUCT(AMX_C1, AMX_A1, AMX_B1, _tile_dpbusd, pa + (j + 1) * AMX_QB, 32,
			    pb + (j + 1) * AMX_QB, cbuf[j + 1], cs);
	}
}

/* The generic kernel's super-block step for 16 outputs: sumi (exact, from the sub-block
 * products and scales), summ (exact, mins times sub-block sums), then
 *     sum + ((dw * dx) * (float)sumi - (dmin * dx) * (float)summ). */
AMX_INL __m512 amx8k_term(__m512 acc, __m512i si, __m512i sm, __m512 dw, __m512 dmin, __m512 dx)
{
	const __m512 d = _mm512_mul_ps(dw, dx), dm = _mm512_mul_ps(dmin, dx);
	const __m512 v = _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(si)),
				       _mm512_mul_ps(dm, _mm512_cvtepi32_ps(sm)));
	return _mm512_add_ps(acc, v);
}

static void amx_gemm_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch)
{
	const int64_t nbk = m->ne0 / 256;
	const size_t gs = amx8k_group_bytes(nbk);
	uint8_t *panel = scratch;
	struct amxk_sb *tab = (struct amxk_sb *)(panel + nbk * AMXK_SUB * AMX_QB);
	int32_t cbuf[AMXK_SUB][AMX_M * AMX_G] __attribute__((aligned(64)));
	struct amx_plan plan;
	amx_plan_init(&plan, m->n);
	const int ng = amx_groups(m->n);
	for (int64_t s = r0; s < r1; s += AMX_M) {
		const int mr = r1 - s < AMX_M ? (int)(r1 - s) : AMX_M;
		amx8k_strip_init(m, s, mr, panel, tab);
		const uint8_t *next = s + 2 * AMX_M <= m->ne1 && m->n <= 2 * AMX_G
					      ? m->w + (size_t)(s + AMX_M) * m->row_bytes
					      : NULL;
		for (int g = 0; g < ng; g++) {
			const bool dense = g == plan.full;
			const int nt = dense ? plan.nt : AMX_G;
			const uint8_t *xq = m->x + (size_t)g * gs;
			const float *dxp = (const float *)(xq + nbk * AMXK_SUB * AMX_QB);
			const int32_t *spp = (const int32_t *)(dxp + nbk * AMX_G);
			__m512 acc[AMX_G];
			for (int r = 0; r < AMX_G; r++)
				acc[r] = _mm512_setzero_ps();
			for (int64_t i = 0; i < nbk; i++) {
				const struct amxk_sb *t = &tab[i];
				if (g == 0)
					for (size_t o = 0; o < sizeof(block_q4_K); o += 64)
						amx_prefetch16(next, m->row_bytes,
							       (size_t)i * sizeof(block_q4_K) + o);
				amx8k_products(panel + i * AMXK_SUB * AMX_QB,
					       xq + i * AMXK_SUB * AMX_QB, dense && plan.full > 0,
					       nt * 4, cbuf);
				const __m512 dx = _mm512_load_ps(dxp + i * AMX_G);
				__m512i sp[4];
				for (int k = 0; k < 4; k++)
					sp[k] = _mm512_load_si512(spp + (i * 4 + k) * AMX_G);
				if (!dense) {
					/* Lanes are tokens; row r's scales are broadcasts. */
					for (int r = 0; r < AMX_M; r++) {
						__m512i si = _mm512_setzero_si512();
						for (int j = 0; j < AMXK_SUB; j++)
							si = _mm512_add_epi32(
								si, _mm512_mullo_epi32(
									    _mm512_load_si512(
										    cbuf[j] +
										    AMX_G * r),
									    _mm512_set1_epi32(
										    t->sc[j][r])));
						__m512i sm = _mm512_setzero_si512();
						for (int k = 0; k < 4; k++)
							sm = _mm512_dpwssd_epi32(
								sm, sp[k],
								_mm512_set1_epi32(t->mp[k][r]));
						acc[r] = amx8k_term(acc[r], si, sm,
								    _mm512_set1_ps(t->d[r]),
								    _mm512_set1_ps(t->dmin[r]), dx);
					}
					continue;
				}
				/* Dense: lane i of vector j is row wi[j][i], token xi[j][i]. */
				for (int j = 0; j < AMX_G; j++) {
					if (j >= nt)
						break;
					const __m512i wi = _mm512_load_si512(plan.wi[j]);
					const __m512i xi = _mm512_load_si512(plan.xi[j]);
					__m512i si = _mm512_setzero_si512();
					for (int k = 0; k < AMXK_SUB; k++)
						si = _mm512_add_epi32(
							si,
							_mm512_mullo_epi32(
								_mm512_load_si512(cbuf[k] + 16 * j),
								_mm512_permutexvar_epi32(
									wi, _mm512_load_si512(
										    t->sc[k]))));
					__m512i sm = _mm512_setzero_si512();
					for (int k = 0; k < 4; k++)
						sm = _mm512_dpwssd_epi32(
							sm, _mm512_permutexvar_epi32(xi, sp[k]),
							_mm512_permutexvar_epi32(
								wi, _mm512_load_si512(t->mp[k])));
					acc[j] = amx8k_term(
						acc[j], si, sm,
						_mm512_permutexvar_ps(wi, _mm512_load_ps(t->d)),
						_mm512_permutexvar_ps(wi, _mm512_load_ps(t->dmin)),
						_mm512_permutexvar_ps(xi, dx));
				}
			}
			float *y = m->y + (size_t)g * AMX_G * (size_t)m->ne1;
			if (dense)
				amx_store_dense(acc, nt, y, m->ne1, s, mr);
			else
				amx_store_full(acc, y, m->ne1, s, mr);
		}
	}
	_tile_release();
}

/* ------------------------------------------------------------------------------------------ */

void cpu_kernels_amx_fill(struct cpu_kernels *k)
{
	k->name = "amx";
	/* Its GEMMs read the GGUF bytes (a full Q8_0 strip is a tile load with the row stride):
	 * these types stay out of the avx512 set's panels, and its few-token kernels take the
	 * batches below min_n (both sum in the generic order). Q6_K keeps the panels. */
	k->type[LM_Q8_0].pmm = NULL;
	k->type[LM_Q4_0].pmm = NULL;
	k->type[LM_Q4_K].pmm = NULL;
	k->gemm[LM_Q8_0] = (struct cpu_gemm_ops){
		.act_bytes = amx8_act_bytes,
		.act = amx8_act,
		.scratch_bytes = amx8_scratch,
		.gemm = amx_gemm_q8_0,
		.group = AMX_G,
		.rows = AMX_M,
		.min_n = 2,
	};
	k->gemm[LM_Q4_0] = k->gemm[LM_Q8_0];
	k->gemm[LM_Q4_0].gemm = amx_gemm_q4_0;
	k->gemm[LM_Q4_K] = (struct cpu_gemm_ops){
		.act_bytes = amx8k_act_bytes,
		.act = amx8k_act,
		.scratch_bytes = amx8k_scratch,
		.gemm = amx_gemm_q4_K,
		.group = AMX_G,
		.rows = AMX_M,
		.min_n = 2,
	};
}

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

/* Tile numbers (macros: GCC's tile intrinsics paste them into the instruction text). */
#define AMX_C0 0
#define AMX_C1 1
#define AMX_A0 2
#define AMX_A1 3
#define AMX_B0 4
#define AMX_B1 5

/* The LDTILECFG operand (palette 1). */
struct amx_cfg {
	uint8_t palette, start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};
static_assert(sizeof(struct amx_cfg) == 64, "tile configuration is 64 bytes");

/* C: 16 rows x 16 int32; A: 16 rows x 32 bytes (one block of 16 weight rows); B: 8 rows x 64
 * bytes (one block of 16 tokens, 4 quants per token per row). */
static void amx_configure(void)
{
	struct amx_cfg cfg __attribute__((aligned(64)));
	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	for (int t = AMX_C0; t <= AMX_C1; t++) {
		cfg.rows[t] = AMX_M;
		cfg.colsb[t] = AMX_G * 4;
	}
	for (int t = AMX_A0; t <= AMX_A1; t++) {
		cfg.rows[t] = AMX_M;
		cfg.colsb[t] = 32;
	}
	for (int t = AMX_B0; t <= AMX_B1; t++) {
		cfg.rows[t] = 32 / 4;
		cfg.colsb[t] = AMX_G * 4;
	}
	_tile_loadconfig(&cfg);
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

/* 16 x 16 floats, acc[m] lane t, to y[t][r0 + m] for t < nt, m < mr. */
AMX_INL void amx_store_out(const __m512 *acc, float *y, int64_t ne1, int64_t r0, int nt, int mr)
{
	float tmp[AMX_M][AMX_G] __attribute__((aligned(64)));
	for (int m = 0; m < AMX_M; m++)
		_mm512_store_ps(tmp[m], acc[m]);
	for (int t = 0; t < nt; t++)
		for (int m = 0; m < mr; m++)
			y[(size_t)t * (size_t)ne1 + (size_t)(r0 + m)] = tmp[m][t];
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
 * only for a strip cut short by the end of the matrix) and its scales dw[16][nb] as f32. */
static size_t amx8_scratch(int64_t ne0)
{
	const int64_t nb = ne0 / 32;
	return (size_t)nb * AMX_QB + (size_t)AMX_M * (size_t)nb * sizeof(float);
}

/* Q4_0 block: the 32 quants q - 8 in element order (low nibbles, then high nibbles). */
AMX_INL __m256i amx_q4_0_unpack(const block_q4_0 *blk)
{
	const __m128i q = _mm_loadu_si128((const __m128i *)blk->qs);
	const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
	return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* One block's tile product (16 rows x 16 tokens, at c) scaled into the row accumulators. */
AMX_INL void amx8_scale(const int32_t *c, const float *dw, int64_t nb, int64_t b, const float *dxp,
			int is_q4, __m512 *acc)
{
	const __m512 dx = _mm512_load_ps(dxp);
	for (int m = 0; m < AMX_M; m++) {
		const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c + AMX_G * m));
		const __m512 w = _mm512_set1_ps(dw[m * nb + b]);
		const __m512 p = is_q4 ? _mm512_mul_ps(_mm512_mul_ps(s, w), dx)
				       : _mm512_mul_ps(s, _mm512_mul_ps(w, dx));
		acc[m] = _mm512_add_ps(acc[m], p);
	}
}

AMX_INL void amx8_gemm(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch, int is_q4)
{
	const int64_t nb = m->ne0 / 32;
	const size_t gs = amx8_group_bytes(nb);
	const int ng = amx_groups(m->n);
	uint8_t *panel = scratch;
	float *dw = (float *)(panel + nb * AMX_QB);
	int32_t cbuf[2][AMX_M * AMX_G] __attribute__((aligned(64)));
	amx_configure();
	for (int64_t s = r0; s < r1; s += AMX_M) {
		const int mr = r1 - s < AMX_M ? (int)(r1 - s) : AMX_M;
		const uint8_t *a;
		size_t a_stride, a_block;
		if (!is_q4 && mr == AMX_M) {
			/* The quants of block b of the 16 rows, 32 bytes each, row_bytes apart. */
			a = m->w + (size_t)s * m->row_bytes + offsetof(block_q8_0, qs);
			a_stride = m->row_bytes;
			a_block = sizeof(block_q8_0);
		} else {
			a = panel;
			a_stride = 32;
			a_block = AMX_QB;
		}
		for (int r = 0; r < AMX_M; r++) {
			const uint8_t *row = m->w + (size_t)(s + r) * m->row_bytes;
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
				if (a == panel)
					_mm256_store_si256((__m256i *)(panel + b * AMX_QB + 32 * r),
							   q);
				dw[r * nb + b] = d;
			}
		}
		for (int g = 0; g < ng; g++) {
			const uint8_t *xq = m->x + (size_t)g * gs;
			const float *dx = (const float *)(xq + nb * AMX_QB);
			__m512 acc[AMX_M];
			for (int r = 0; r < AMX_M; r++)
				acc[r] = _mm512_setzero_ps();
			int64_t b = 0;
			for (; b + 2 <= nb; b += 2) {
				_tile_zero(AMX_C0);
				_tile_loadd(AMX_A0, a + b * a_block, (long)a_stride);
				_tile_loadd(AMX_B0, xq + b * AMX_QB, AMX_G * 4);
				_tile_dpbssd(AMX_C0, AMX_A0, AMX_B0);
				_tile_zero(AMX_C1);
				_tile_loadd(AMX_A1, a + (b + 1) * a_block, (long)a_stride);
				_tile_loadd(AMX_B1, xq + (b + 1) * AMX_QB, AMX_G * 4);
				_tile_dpbssd(AMX_C1, AMX_A1, AMX_B1);
				_tile_stored(AMX_C0, cbuf[0], AMX_G * 4);
				amx8_scale(cbuf[0], dw, nb, b, dx + b * AMX_G, is_q4, acc);
				_tile_stored(AMX_C1, cbuf[1], AMX_G * 4);
				amx8_scale(cbuf[1], dw, nb, b + 1, dx + (b + 1) * AMX_G, is_q4,
					   acc);
			}
			if (b < nb) {
				_tile_zero(AMX_C0);
				_tile_loadd(AMX_A0, a + b * a_block, (long)a_stride);
				_tile_loadd(AMX_B0, xq + b * AMX_QB, AMX_G * 4);
				_tile_dpbssd(AMX_C0, AMX_A0, AMX_B0);
				_tile_stored(AMX_C0, cbuf[0], AMX_G * 4);
				amx8_scale(cbuf[0], dw, nb, b, dx + b * AMX_G, is_q4, acc);
			}
			const int nt = m->n - g * AMX_G < AMX_G ? m->n - g * AMX_G : AMX_G;
			amx_store_out(acc, m->y + (size_t)g * AMX_G * (size_t)m->ne1, m->ne1, s, nt,
				      mr);
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
 * row and super-block its scales: d and dmin as f32, the 8 six-bit scales as int32 and the 8
 * mins as 4 int16 pairs (sub-blocks 2k, 2k + 1). */
struct amxk_row {
	float d, dmin;
	int32_t sc[8];
	int32_t mp[4];
};

static size_t amx8k_scratch(int64_t ne0)
{
	const int64_t nbk = ne0 / 256;
	return (size_t)nbk * AMXK_SUB * AMX_QB +
	       (size_t)AMX_M * (size_t)nbk * sizeof(struct amxk_row);
}

static void amx_gemm_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch)
{
	const int64_t nbk = m->ne0 / 256;
	const size_t gs = amx8k_group_bytes(nbk);
	const int ng = amx_groups(m->n);
	uint8_t *panel = scratch;
	struct amxk_row *tab = (struct amxk_row *)(panel + nbk * AMXK_SUB * AMX_QB);
	int32_t cbuf[AMXK_SUB][AMX_M * AMX_G] __attribute__((aligned(64)));
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	amx_configure();
	for (int64_t s = r0; s < r1; s += AMX_M) {
		const int mr = r1 - s < AMX_M ? (int)(r1 - s) : AMX_M;
		for (int r = 0; r < AMX_M; r++) {
			const block_q4_K *row =
				(const block_q4_K *)(m->w + (size_t)(s + r) * m->row_bytes);
			for (int64_t i = 0; i < nbk; i++) {
				struct amxk_row *t = &tab[r * nbk + i];
				uint8_t *p = panel + i * AMXK_SUB * AMX_QB + 32 * r;
				if (r >= mr) {
					memset(t, 0, sizeof *t);
					for (int j = 0; j < AMXK_SUB; j++)
						memset(p + j * AMX_QB, 0, 32);
					continue;
				}
				uint8_t sc[8], mn[8];
				simd_q4_K_scales(row[i].scales, sc, mn);
				t->d = f16_to_f32(row[i].d);
				t->dmin = f16_to_f32(row[i].dmin);
				for (int j = 0; j < 8; j++)
					t->sc[j] = sc[j];
				for (int k = 0; k < 4; k++)
					t->mp[k] = (int32_t)((uint32_t)mn[2 * k] |
							     ((uint32_t)mn[2 * k + 1] << 16));
				/* 32 bytes hold sub-blocks 2k (low nibbles) and 2k + 1 (high). */
				for (int k = 0; k < 4; k++) {
					const __m256i q = _mm256_loadu_si256(
						(const __m256i *)(row[i].qs + 32 * k));
					_mm256_store_si256((__m256i *)(p + 2 * k * AMX_QB),
							   _mm256_and_si256(q, m4));
					_mm256_store_si256(
						(__m256i *)(p + (2 * k + 1) * AMX_QB),
						_mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
				}
			}
		}
		for (int g = 0; g < ng; g++) {
			const uint8_t *xq = m->x + (size_t)g * gs;
			const float *dxp = (const float *)(xq + nbk * AMXK_SUB * AMX_QB);
			const int32_t *spp = (const int32_t *)(dxp + nbk * AMX_G);
			__m512 acc[AMX_M];
			for (int r = 0; r < AMX_M; r++)
				acc[r] = _mm512_setzero_ps();
			for (int64_t i = 0; i < nbk; i++) {
				const uint8_t *pa = panel + i * AMXK_SUB * AMX_QB;
				const uint8_t *pb = xq + i * AMXK_SUB * AMX_QB;
				for (int j = 0; j < AMXK_SUB; j += 2) {
					_tile_zero(AMX_C0);
					_tile_loadd(AMX_A0, pa + j * AMX_QB, 32);
					_tile_loadd(AMX_B0, pb + j * AMX_QB, AMX_G * 4);
					_tile_dpbusd(AMX_C0, AMX_A0, AMX_B0);
					_tile_zero(AMX_C1);
					_tile_loadd(AMX_A1, pa + (j + 1) * AMX_QB, 32);
					_tile_loadd(AMX_B1, pb + (j + 1) * AMX_QB, AMX_G * 4);
					_tile_dpbusd(AMX_C1, AMX_A1, AMX_B1);
					_tile_stored(AMX_C0, cbuf[j], AMX_G * 4);
					_tile_stored(AMX_C1, cbuf[j + 1], AMX_G * 4);
				}
				const __m512 dx = _mm512_load_ps(dxp + i * AMX_G);
				__m512i sp[4];
				for (int k = 0; k < 4; k++)
					sp[k] = _mm512_load_si512(spp + (i * 4 + k) * AMX_G);
				for (int r = 0; r < AMX_M; r++) {
					const struct amxk_row *t = &tab[r * nbk + i];
					__m512i si = _mm512_setzero_si512();
					for (int j = 0; j < AMXK_SUB; j++)
						si = _mm512_add_epi32(
							si, _mm512_mullo_epi32(
								    _mm512_load_si512(cbuf[j] +
										      AMX_G * r),
								    _mm512_set1_epi32(t->sc[j])));
					__m512i sm = _mm512_setzero_si512();
					for (int k = 0; k < 4; k++)
						sm = _mm512_dpwssd_epi32(
							sm, sp[k], _mm512_set1_epi32(t->mp[k]));
					const __m512 d = _mm512_mul_ps(_mm512_set1_ps(t->d), dx);
					const __m512 dm =
						_mm512_mul_ps(_mm512_set1_ps(t->dmin), dx);
					const __m512 v = _mm512_sub_ps(
						_mm512_mul_ps(d, _mm512_cvtepi32_ps(si)),
						_mm512_mul_ps(dm, _mm512_cvtepi32_ps(sm)));
					acc[r] = _mm512_add_ps(acc[r], v);
				}
			}
			const int nt = m->n - g * AMX_G < AMX_G ? m->n - g * AMX_G : AMX_G;
			amx_store_out(acc, m->y + (size_t)g * AMX_G * (size_t)m->ne1, m->ne1, s, nt,
				      mr);
		}
	}
	_tile_release();
}

/* ------------------------------------------------------------------------------------------ */

void cpu_kernels_amx_fill(struct cpu_kernels *k)
{
	k->name = "amx";
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

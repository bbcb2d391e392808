/* panel.c — the panel layout of quantized weights, which the AVX-512 set's matmul reads.
 *
 * A panel is the bytes of 16 consecutive weight rows (a group) rearranged so that one 64-byte
 * vector holds the same field of all 16 rows, lane r being row r: 4 quants of each row, or each
 * row's scales. vpdpbusd of such a vector with 4 of a token's activation quants (broadcast to
 * every lane) adds to each lane the 4-element dot product of its own row, so a block's sum for
 * 16 rows needs no horizontal reduction, and each weight vector serves every token of a batch.
 *
 * Each block of the group is stored as a record of its fields, in the order below, every field
 * for the 16 rows in turn (lane r at r x the field's size); a record is exactly the 16 rows'
 * blocks, so a group's panel is exactly its 16 x row_bytes and a weight is rearranged in place:
 *     Q8_0 (34 B):  d (u16) | qs as 8 dwords, each byte + 128 (vpdpbusd's unsigned operand)
 *     Q4_0 (18 B):  d (u16) | qs as 4 dwords (a dword holds 4 low and 4 high nibbles)
 *     Q4_K (144 B): d and dmin (one dword) | the 12 scale bytes as 3 dwords | qs as 32 dwords
 *     Q6_K (210 B): the 16 scales as 4 dwords | for each half h and each l = 0, 4, ..., 28 the
 *                   dwords at ql[64h + l], ql[64h + 32 + l] and qh[32h + l], the three a
 *                   quant's bits come from, side by side | d (u16)
 * Rows past the last whole group keep the GGUF layout, at their own offsets. The fields are in
 * the order the kernels read them, so a block streams from memory front to back.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_x86.h"

/* A field of a GGUF block: `count` consecutive `size`-byte values from byte `off`. */
struct panel_field {
	uint16_t off;
	uint8_t size, count;
};

struct panel_type {
	uint16_t block; /* bytes of a GGUF block */
	uint8_t n_fields;
	uint8_t xor_field; /* 1 + the index of the field whose bytes are stored + 128; 0: none */
	const struct panel_field *f;
};

/* Q6_K's quant triples: ql[64h + l], ql[64h + 32 + l], qh[32h + l]. */
#define Q6_TRIPLE(h, l)                                      \
	{64 * (h) + (l), 4, 1}, {64 * (h) + 32 + (l), 4, 1}, \
	{                                                    \
		128 + 32 * (h) + (l), 4, 1                   \
	}
#define Q6_HALF(h)                                                                             \
	Q6_TRIPLE(h, 0), Q6_TRIPLE(h, 4), Q6_TRIPLE(h, 8), Q6_TRIPLE(h, 12), Q6_TRIPLE(h, 16), \
		Q6_TRIPLE(h, 20), Q6_TRIPLE(h, 24), Q6_TRIPLE(h, 28)

static const struct panel_type *panel_type_of(enum lm_dtype t)
{
	static const struct panel_field f8[] = {{0, 2, 1}, {2, 4, 8}};
	static const struct panel_field f4[] = {{0, 2, 1}, {2, 4, 4}};
	static const struct panel_field fk4[] = {{0, 4, 1}, {4, 4, 3}, {16, 4, 32}};
	static const struct panel_field fk6[] = {{192, 4, 4}, Q6_HALF(0), Q6_HALF(1), {208, 2, 1}};
	static const struct panel_type q8_0 = {34, 2, 2, f8};
	static const struct panel_type q4_0 = {18, 2, 0, f4};
	static const struct panel_type q4_K = {144, 3, 0, fk4};
	static const struct panel_type q6_K = {210, sizeof fk6 / sizeof fk6[0], 0, fk6};
	switch (t) {
	case LM_Q8_0:
		return &q8_0;
	case LM_Q4_0:
		return &q4_0;
	case LM_Q4_K:
		return &q4_K;
	case LM_Q6_K:
		return &q6_K;
	default:
		return NULL;
	}
}

bool cpu_panel_type(enum lm_dtype t)
{
	return panel_type_of(t) != NULL;
}

/* Copies one block between the GGUF layout of row `lane` (at `row`) and a panel record:
 * to_panel, or back. */
static void panel_block(const struct panel_type *pt, uint8_t *row, uint8_t *rec, int lane,
			bool to_panel)
{
	for (int i = 0; i < pt->n_fields; i++) {
		const struct panel_field *f = &pt->f[i];
		const bool flip = pt->xor_field == i + 1;
		for (int k = 0; k < f->count; k++) {
			uint8_t *g = row + f->off + (size_t)k * f->size;
			uint8_t *p = rec + ((size_t)k * CPU_PANEL_ROWS + (size_t)lane) * f->size;
			uint8_t v[4];
			memcpy(v, to_panel ? g : p, f->size);
			if (flip)
				for (int b = 0; b < f->size; b++)
					v[b] ^= 0x80;
			memcpy(to_panel ? p : g, v, f->size);
		}
		rec += (size_t)f->count * CPU_PANEL_ROWS * f->size;
	}
}

int cpu_panel_repack(const struct lm_weight *w, uint8_t *bytes)
{
	const struct panel_type *pt = panel_type_of(w->type);
	if (pt == NULL || w->row_bytes % pt->block != 0)
		return LM_EINVAL;
	const size_t gbytes = CPU_PANEL_ROWS * w->row_bytes;
	const int64_t nb = (int64_t)(w->row_bytes / pt->block);
	uint8_t *tmp = malloc(gbytes);
	if (tmp == NULL)
		return LM_ENOMEM;
	for (int64_t g = 0; g < w->ne1 / CPU_PANEL_ROWS; g++) {
		uint8_t *grp = bytes + (size_t)g * gbytes;
		memcpy(tmp, grp, gbytes);
		for (int64_t b = 0; b < nb; b++)
			for (int r = 0; r < CPU_PANEL_ROWS; r++)
				panel_block(pt,
					    tmp + (size_t)r * w->row_bytes + (size_t)b * pt->block,
					    grp + (size_t)b * CPU_PANEL_ROWS * pt->block, r, true);
	}
	free(tmp);
	return 0;
}

void cpu_panel_row(const struct lm_weight *w, int64_t r, uint8_t *out)
{
	const struct panel_type *pt = panel_type_of(w->type);
	const uint8_t *data = w->data;
	if (r >= w->ne1 / CPU_PANEL_ROWS * CPU_PANEL_ROWS) {
		memcpy(out, data + (size_t)r * w->row_bytes, w->row_bytes);
		return;
	}
	const uint8_t *grp = data + (size_t)(r / CPU_PANEL_ROWS) * CPU_PANEL_ROWS * w->row_bytes;
	const int64_t nb = (int64_t)(w->row_bytes / pt->block);
	for (int64_t b = 0; b < nb; b++)
		panel_block(pt, out + (size_t)b * pt->block,
			    (uint8_t *)grp + (size_t)b * CPU_PANEL_ROWS * pt->block,
			    (int)(r % CPU_PANEL_ROWS), false);
}

/* ------------------------------------------------------------------------------------------ */
/* Rows in the reference order on the SIMD sets' activation layouts (act8, gk), for the rows
 * after a panel weight's last whole group in a set whose own row kernels sum otherwise: plain
 * loops, the generic kernels' float steps (this file is built with -ffp-contract=off). */

static void ref_rows_q8z(const struct cpu_mm *m, int64_t r0, int64_t r1, bool is_q4)
{
	const int64_t nb = m->ne0 / 32;
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *row = m->w + (size_t)r * m->row_bytes;
		for (int t = 0; t < m->n; t++) {
			const int8_t *xq = (const int8_t *)(m->x + (size_t)t * m->x_stride);
			const float *xd = act8_d(xq, nb);
			float sum = 0;
			for (int64_t b = 0; b < nb; b++) {
				int sumi = 0;
				float dw;
				if (is_q4) {
					const block_q4_0 *blk = (const block_q4_0 *)row + b;
					for (int j = 0; j < 16; j++)
						sumi += ((blk->qs[j] & 0x0f) - 8) * xq[32 * b + j] +
							((blk->qs[j] >> 4) - 8) *
								xq[32 * b + 16 + j];
					dw = lm_f16_to_f32(blk->d);
					sum = sum + ((float)sumi * dw) * xd[b];
				} else {
					const block_q8_0 *blk = (const block_q8_0 *)row + b;
					for (int j = 0; j < 32; j++)
						sumi += blk->qs[j] * xq[32 * b + j];
					dw = lm_f16_to_f32(blk->d);
					sum = sum + (float)sumi * (dw * xd[b]);
				}
			}
			m->y[(size_t)t * (size_t)m->ne1 + (size_t)r] = sum;
		}
	}
}

void cpu_ref_rows_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	ref_rows_q8z(m, r0, r1, false);
}

void cpu_ref_rows_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	ref_rows_q8z(m, r0, r1, true);
}

/* One Q4_K block against gk activations (block i). */
static float ref_q4_K_block(const block_q4_K *w, const uint8_t *x, int64_t i, int64_t nb)
{
	const int8_t *q8 = (const int8_t *)x + 256 * i;
	const int16_t *bs32 = gk_bs32(x, nb) + 8 * i;
	int sumi = 0, summ = 0;
	for (int j = 0; j < 8; j++) {
		uint8_t sc, mn;
		lm_q4_K_scale_min(j, w->scales, &sc, &mn);
		int dot = 0;
		for (int l = 0; l < 32; l++) {
			const uint8_t byte = w->qs[32 * (j / 2) + l];
			dot += ((j % 2) ? byte >> 4 : byte & 0x0f) * q8[32 * j + l];
		}
		sumi += sc * dot;
		summ += mn * bs32[j];
	}
	const float dx = act8k_d(x, nb)[i];
	const float d = lm_f16_to_f32(w->d) * dx, dmin = lm_f16_to_f32(w->dmin) * dx;
	return d * (float)sumi - dmin * (float)summ;
}

/* One Q6_K block: sumi = sum_s sc_s * ((q_s - 32) . x_s). */
static int32_t ref_q6_K_sumi(const block_q6_K *w, const int8_t *q8)
{
	int sumi = 0;
	for (int s = 0; s < 16; s++) {
		int dot = 0;
		for (int k = 0; k < 16; k++) {
			const int e = 16 * s + k, h = e / 128, q = (e % 128) / 32, l = e % 32;
			const uint8_t lo = w->ql[64 * h + 32 * (q % 2) + l];
			const int v = ((q < 2 ? lo & 0x0f : lo >> 4) |
				       (((w->qh[32 * h + l] >> (2 * q)) & 3) << 4)) -
				      32;
			dot += v * q8[e];
		}
		sumi += w->scales[s] * dot;
	}
	return sumi;
}

static void ref_rows_k(const struct cpu_mm *m, int64_t r0, int64_t r1, bool is_q6)
{
	const int64_t nb = m->ne0 / 256;
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *row = m->w + (size_t)r * m->row_bytes;
		for (int t = 0; t < m->n; t++) {
			const uint8_t *x = m->x + (size_t)t * m->x_stride;
			float sum = 0;
			for (int64_t i = 0; i < nb; i++) {
				if (is_q6) {
					const block_q6_K *w = (const block_q6_K *)row + i;
					const float d = lm_f16_to_f32(w->d) * act8k_d(x, nb)[i];
					sum = sum + d * (float)ref_q6_K_sumi(w, (const int8_t *)x +
											256 * i);
				} else {
					sum = sum +
					      ref_q4_K_block((const block_q4_K *)row + i, x, i, nb);
				}
			}
			m->y[(size_t)t * (size_t)m->ne1 + (size_t)r] = sum;
		}
	}
}

void cpu_ref_rows_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	ref_rows_k(m, r0, r1, false);
}

void cpu_ref_rows_q6_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	ref_rows_k(m, r0, r1, true);
}

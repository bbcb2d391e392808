/* ops.c — the small ops of the CPU backend: embedding lookup, rope and KV stores. They touch a
 * few rows per token and run on the calling thread. */
#include <math.h>
#include <string.h>

#include "common/base/err.h"
#include "kernels/cpu/cpu_impl.h"

int cpu_get_rows(float *y, const struct lm_weight *table, const int32_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= table->ne1)
			return LM_ERANGE;
		const uint8_t *row =
			(const uint8_t *)table->data + (size_t)ids[i] * table->row_bytes;
		int rc = lm_dequantize_row(table->type, row, y + (size_t)i * (size_t)table->ne0,
					   table->ne0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* As GGUF's reference rope: theta_i = pos * base^(-2i/n_rot) built by repeated multiplication
 * in f32 (so the rounding matches), divided by the pair's frequency factor when there are
 * factors, then scaled by freq_scale (or YaRN's mix of both, rope.h); cos and sin in f32. One (cos, sin) pair serves every head
 * of the token; dimensions past n_rot are left as they are. */
void cpu_rope(float *x, int n_heads, int head_dim, const struct lm_tok_loc *loc, int n,
	      const struct lm_rope_params *rp)
{
	const float theta_scale = powf(rp->freq_base, -2.0f / (float)rp->n_rot);
	const int half = rp->n_rot / 2;
	const bool neox = rp->mode == LM_ROPE_NEOX;
	for (int t = 0; t < n; t++) {
		float *row = x + (size_t)t * (size_t)n_heads * (size_t)head_dim;
		float theta = (float)loc[t].pos;
		for (int i = 0; i < half; i++, theta *= theta_scale) {
			const float ff = rp->freq_factors != NULL ? rp->freq_factors[i] : 1.0f;
			float angle = rp->freq_scale * (theta / ff), c, s;
			if (rp->ext_factor != 0.0f) {
				/* YaRN as GGUF's reference rope_yarn, in its order of float ops. */
				const float extrap = theta / ff;
				const float y = ((float)i - rp->corr[0]) /
						fmaxf(0.001f, rp->corr[1] - rp->corr[0]);
				const float mix = (1 - fminf(1, fmaxf(0, y))) * rp->ext_factor;
				angle = angle * (1 - mix) + extrap * mix;
				c = cosf(angle) * rp->mscale;
				s = sinf(angle) * rp->mscale;
			} else {
				c = cosf(angle);
				s = sinf(angle);
			}
			const int i0 = neox ? i : 2 * i;
			const int i1 = neox ? i + half : 2 * i + 1;
			for (int h = 0; h < n_heads; h++) {
				float *v = row + (size_t)h * (size_t)head_dim;
				const float x0 = v[i0], x1 = v[i1];
				v[i0] = x0 * c - x1 * s;
				v[i1] = x0 * s + x1 * c;
			}
		}
	}
}

int cpu_attn_store(const struct cpu_kernels *k, const struct lm_kv_layer *kv, const float *kx,
		   const float *vx, const struct lm_tok_loc *loc, int n)
{
	const int64_t width = (int64_t)kv->n_kv_heads * kv->head_dim;
	if (kv->n_kv_heads <= 0 || !cpu_attn_type_ok(k, kv->k_type, kv->head_dim) ||
	    !cpu_attn_type_ok(k, kv->v_type, kv->head_dim))
		return LM_EUNSUPPORTED;
	for (int t = 0; t < n; t++) {
		if (loc[t].slot < 0 || loc[t].slot >= kv->slots || loc[t].pos < 0)
			return LM_ERANGE;
	}
	const cpu_from_f32_fn kconv = k->attn[kv->k_type].store;
	const cpu_from_f32_fn vconv = k->attn[kv->v_type].store;
	for (int t = 0; t < n; t++) {
		const size_t row =
			(size_t)loc[t].slot * (size_t)kv->ctx + (size_t)(loc[t].pos % kv->ctx);
		kconv(kx + (size_t)t * (size_t)width, (uint8_t *)kv->k + row * kv->k_row_bytes,
		      width);
		vconv(vx + (size_t)t * (size_t)width, (uint8_t *)kv->v + row * kv->v_row_bytes,
		      width);
	}
	return 0;
}

/* attention.c — causal grouped-query attention over the KV cache, one (token, head) at a time.
 *
 * For query head h of token t at position p, with KV head g = h / (n_heads / n_kv_heads):
 *     s_j = scale * (q . K[j])          for the cached positions j in [lo, p]
 *     out = sum_j softmax(s)_j V[j]     (max subtracted before exp)
 * where lo = 0 for a global layer and max(0, p - window + 1) for a sliding one. Position j of a
 * slot lives in row j % ctx. The dot q . K[j] uses the K type's dot product with q converted to
 * that type's vec_dot type (f16 for an F16 cache, Q8_0 for a Q8_0 cache), as GGUF's reference
 * computes K^T q; V rows accumulate into f32.
 */
#include <math.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/cpu_impl.h"

#define ATTN_ALIGN 64

static size_t attn_round(size_t b)
{
	return (b + ATTN_ALIGN - 1) / ATTN_ALIGN * ATTN_ALIGN;
}

size_t cpu_attn_scratch_bytes(const struct cpu_kernels *k, const struct lm_kv_layer *kv)
{
	/* scores [ctx], acc [head_dim], q in K's activation layout */
	return attn_round((size_t)kv->ctx * sizeof(float)) +
	       attn_round((size_t)kv->head_dim * sizeof(float)) +
	       attn_round(k->type[kv->k_type].act_bytes(kv->head_dim));
}

static bool attn_type_ok(enum lm_dtype t)
{
	return t == LM_F32 || t == LM_F16 || t == LM_Q8_0;
}

int cpu_attn_check(const struct lm_kv_layer *kv, const struct lm_tok_loc *loc, int n, int n_heads)
{
	if (kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads != 0 || kv->head_dim <= 0 ||
	    kv->ctx <= 0)
		return LM_EINVAL;
	if (!attn_type_ok(kv->k_type) || !attn_type_ok(kv->v_type))
		return LM_EUNSUPPORTED;
	/* A Q8_0 block must not straddle two heads. */
	if ((kv->k_type == LM_Q8_0 || kv->v_type == LM_Q8_0) && kv->head_dim % QK8_0 != 0)
		return LM_EUNSUPPORTED;
	for (int t = 0; t < n; t++) {
		const int32_t slot = loc[t].slot, pos = loc[t].pos;
		if (slot < 0 || slot >= kv->slots || pos < 0)
			return LM_ERANGE;
		/* Every position the token reads must still be in the ring after the whole batch
		 * was stored: the latest position of its slot in the batch minus the earliest one
		 * it reads must be below ctx. */
		int32_t hi = pos;
		for (int u = 0; u < n; u++)
			if (loc[u].slot == slot && loc[u].pos > hi)
				hi = loc[u].pos;
		int32_t lo = 0;
		if (kv->window > 0 && pos - kv->window + 1 > 0)
			lo = pos - kv->window + 1;
		if ((int64_t)hi - lo >= kv->ctx)
			return LM_ERANGE;
	}
	return 0;
}

void cpu_attn_items(const struct cpu_attn *a, int64_t i0, int64_t i1, uint8_t *scratch)
{
	const struct lm_kv_layer *kv = a->kv;
	const struct cpu_type_ops *kt = &a->k->type[kv->k_type];
	const struct cpu_type_ops *vt = &a->k->type[kv->v_type];
	const int hd = kv->head_dim;
	const int group = a->n_heads / kv->n_kv_heads;
	const size_t k_head_bytes = kv->k_row_bytes / (size_t)kv->n_kv_heads;
	const size_t v_head_bytes = kv->v_row_bytes / (size_t)kv->n_kv_heads;

	float *scores = (float *)scratch;
	float *acc = (float *)(scratch + attn_round((size_t)kv->ctx * sizeof(float)));
	uint8_t *qconv = (uint8_t *)acc + attn_round((size_t)hd * sizeof(float));

	for (int64_t i = i0; i < i1; i++) {
		const int t = (int)(i / a->n_heads), h = (int)(i % a->n_heads);
		const int g = h / group;
		const int32_t pos = a->loc[t].pos;
		const int32_t lo =
			kv->window > 0 && pos - kv->window + 1 > 0 ? pos - kv->window + 1 : 0;
		const int len = pos - lo + 1;
		const float *q = a->q + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
		const uint8_t *kbase = (const uint8_t *)kv->k +
				       (size_t)a->loc[t].slot * (size_t)kv->ctx * kv->k_row_bytes +
				       (size_t)g * k_head_bytes;
		const uint8_t *vbase = (const uint8_t *)kv->v +
				       (size_t)a->loc[t].slot * (size_t)kv->ctx * kv->v_row_bytes +
				       (size_t)g * v_head_bytes;

		const void *qx = q;
		if (kt->to_act != NULL) {
			kt->to_act(q, qconv, hd);
			qx = qconv;
		}
		float max = -INFINITY;
		for (int j = 0; j < len; j++) {
			const size_t row = (size_t)((lo + j) % kv->ctx);
			scores[j] = kt->vec_dot(hd, kbase + row * kv->k_row_bytes, qx) * a->scale;
			if (scores[j] > max)
				max = scores[j];
		}
		double sum = 0;
		memset(acc, 0, (size_t)hd * sizeof(float));
		for (int j = 0; j < len; j++) {
			const size_t row = (size_t)((lo + j) % kv->ctx);
			const float p = expf(scores[j] - max);
			sum += p;
			vt->axpy(hd, p, vbase + row * kv->v_row_bytes, acc);
		}
		const float inv = (float)(1.0 / sum);
		float *out = a->out + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
		for (int d = 0; d < hd; d++)
			out[d] = acc[d] * inv;
	}
}

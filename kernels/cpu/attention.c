/* attention.c — causal grouped-query attention over the KV cache, one (token, head) at a time.
 *
 * For query head h of token t at position p, with KV head g = h / (n_heads / n_kv_heads):
 *     s_j = scale * (q . K[j])          for the cached positions j in [lo, p]
 *     out = sum_j softmax(s)_j V[j]     (max subtracted before exp)
 * where lo = 0 for a global layer and max(0, p - window + 1) for a sliding one, and a head's
 * sink logit (kv->sinks, gpt-oss) joins the softmax's max and denominator. Position j of a
 * slot lives in row j % ctx. The dot q . K[j] uses the K type's dot product with q converted to
 * that type's vec_dot type (f16 for an F16 cache, Q8_0 for Q8_0 and Q4_0, Q8_1 for Q5_1: see
 * attention_generic.c), as GGUF's reference computes K^T q, reading the cached rows in place; the
 * probabilities are normalised, then V rows accumulate into f32, dequantized block by block
 * inside the kernel. One work item is a token and a KV head with all the query heads that share
 * it, so each cached K and V row is read once per item.
 */
#include <math.h>
#include <string.h>

#include "common/base/err.h"
#include "kernels/cpu/cpu_impl.h"

#define ATTN_ALIGN 64

static size_t attn_round(size_t b)
{
	return (b + ATTN_ALIGN - 1) / ATTN_ALIGN * ATTN_ALIGN;
}

size_t cpu_attn_scratch_bytes(const struct cpu_kernels *k, const struct lm_kv_layer *kv,
			      int n_heads)
{
	/* Per query head of a group: scores [ctx] and q in K's activation layout. */
	const size_t group = (size_t)(n_heads / kv->n_kv_heads);
	return group * (attn_round((size_t)kv->ctx * sizeof(float)) +
			attn_round(k->attn[kv->k_type].q_bytes(kv->head_dim)));
}

/* A cache type these kernels read, whose blocks tile one head (a block may not straddle two
 * heads: each head's dot product starts at a block). */
bool cpu_attn_type_ok(const struct cpu_kernels *k, enum lm_dtype t, int32_t head_dim)
{
	const struct lm_dtype_info *info = lm_dtype_info(t);
	return (unsigned)t < LM_DTYPE_COUNT && k->attn[t].scores != NULL && info != NULL &&
	       head_dim % (int32_t)info->blck == 0;
}

int cpu_attn_check(const struct cpu_kernels *k, const struct lm_kv_layer *kv,
		   const struct lm_tok_loc *loc, int n, int n_heads)
{
	int rc = cpu_attn_check_ranges(kv, loc, n, n_heads);
	if (rc == 0 && (!cpu_attn_type_ok(k, kv->k_type, kv->head_dim) ||
			!cpu_attn_type_ok(k, kv->v_type, kv->head_dim)))
		rc = LM_EUNSUPPORTED;
	return rc;
}

int cpu_attn_check_ranges(const struct lm_kv_layer *kv, const struct lm_tok_loc *loc, int n,
			  int n_heads)
{
	if (kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads != 0 || kv->head_dim <= 0 ||
	    kv->ctx <= 0)
		return LM_EINVAL;
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
	const struct cpu_attn_ops *kt = &a->k->attn[kv->k_type];
	const struct cpu_attn_ops *vt = &a->k->attn[kv->v_type];
	const int hd = kv->head_dim;
	const int group = a->n_heads / kv->n_kv_heads;
	const size_t k_head_bytes = kv->k_row_bytes / (size_t)kv->n_kv_heads;
	const size_t v_head_bytes = kv->v_row_bytes / (size_t)kv->n_kv_heads;
	const size_t s_stride = attn_round((size_t)kv->ctx * sizeof(float)) / sizeof(float);
	const size_t q_stride = attn_round(kt->q_bytes(hd));

	float *scores = (float *)scratch;                                /* [group][s_stride] */
	uint8_t *qconv = (uint8_t *)(scores + (size_t)group * s_stride); /* [group][q_stride] */

	for (int64_t i = i0; i < i1; i++) {
		const int t = (int)(i / kv->n_kv_heads), g = (int)(i % kv->n_kv_heads);
		const int32_t pos = a->loc[t].pos;
		const int32_t lo =
			kv->window > 0 && pos - kv->window + 1 > 0 ? pos - kv->window + 1 : 0;
		const int len = pos - lo + 1;
		/* The group's query heads are consecutive: g * group .. g * group + group - 1. */
		const float *q =
			a->q +
			((size_t)t * (size_t)a->n_heads + (size_t)g * (size_t)group) * (size_t)hd;
		const uint8_t *kbase = (const uint8_t *)kv->k +
				       (size_t)a->loc[t].slot * (size_t)kv->ctx * kv->k_row_bytes +
				       (size_t)g * k_head_bytes;
		const uint8_t *vbase = (const uint8_t *)kv->v +
				       (size_t)a->loc[t].slot * (size_t)kv->ctx * kv->v_row_bytes +
				       (size_t)g * v_head_bytes;

		const uint8_t *qx = (const uint8_t *)q;
		size_t qx_stride = (size_t)hd * sizeof(float);
		if (kt->q_conv != NULL) {
			for (int h = 0; h < group; h++)
				kt->q_conv(q + (size_t)h * (size_t)hd, qconv + (size_t)h * q_stride,
					   hd);
			qx = qconv;
			qx_stride = q_stride;
		}
		/* Positions lo..pos are rows lo % ctx onward, wrapping at most once. */
		const int32_t start = lo % kv->ctx;
		const int n1 = len < kv->ctx - start ? len : kv->ctx - start;
		kt->scores(hd, kbase + (size_t)start * kv->k_row_bytes, kv->k_row_bytes, n1, qx,
			   qx_stride, group, scores, s_stride);
		if (len > n1)
			kt->scores(hd, kbase, kv->k_row_bytes, len - n1, qx, qx_stride, group,
				   scores + n1, s_stride);
		/* Softmax per head, normalised before V as GGUF's reference does; a head's sink
		 * logit takes part in the max and the denominator. */
		for (int h = 0; h < group; h++) {
			float *sc = scores + (size_t)h * s_stride;
			float max = -INFINITY;
			for (int j = 0; j < len; j++) {
				sc[j] *= a->scale;
				if (sc[j] > max)
					max = sc[j];
			}
			const float sink = kv->sinks != NULL ? kv->sinks[g * group + h] : -INFINITY;
			max = sink > max ? sink : max;
			double sum = a->k->softmax_exp(sc, len, max);
			if (kv->sinks != NULL)
				sum += (double)expf(sink - max);
			const float inv = (float)(1.0 / sum);
			for (int j = 0; j < len; j++)
				sc[j] *= inv;
		}
		/* The group's output rows are consecutive too: accumulate V into them. */
		float *out = a->out + ((size_t)t * (size_t)a->n_heads + (size_t)g * (size_t)group) *
					      (size_t)hd;
		memset(out, 0, (size_t)group * (size_t)hd * sizeof(float));
		vt->values(hd, vbase + (size_t)start * kv->v_row_bytes, kv->v_row_bytes, n1, scores,
			   s_stride, group, out);
		if (len > n1)
			vt->values(hd, vbase, kv->v_row_bytes, len - n1, scores + n1, s_stride,
				   group, out);
	}
}

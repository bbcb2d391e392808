/* kv_geom.c — one layer's KV geometry and bytes. See kv_geom.h. */
#include "common/model/kv_geom.h"

#include "common/base/err.h"

int32_t kv_layer_ctx(const struct kv_geom *g, int32_t max_seq, int32_t extra)
{
	if (g->window > 0 && extra >= 0 && (int64_t)g->window + extra < max_seq)
		return g->window + extra;
	return max_seq;
}

bool kv_type_supported(enum lm_dtype t)
{
	return t == LM_F32 || t == LM_F16 || t == LM_Q8_0;
}

int kv_geom_row_bytes(const struct kv_geom *g, enum lm_dtype t, uint64_t *out)
{
	if (g->n_kv_heads <= 0 || g->head_dim <= 0)
		return LM_EINVAL;
	uint64_t n = (uint64_t)g->n_kv_heads * (uint64_t)g->head_dim;
	return lm_dtype_row_bytes(t, n, out);
}

int kv_layer_bytes(const struct kv_geom *g, int32_t max_seq, int32_t extra, int32_t slots,
		   enum lm_dtype k_type, enum lm_dtype v_type, uint64_t *bytes)
{
	uint64_t kr, vr;
	if (!kv_type_supported(k_type) || !kv_type_supported(v_type) || max_seq <= 0 ||
	    slots <= 0 || g->window < 0)
		return LM_EINVAL;
	int rc = kv_geom_row_bytes(g, k_type, &kr);
	if (rc == 0)
		rc = kv_geom_row_bytes(g, v_type, &vr);
	if (rc != 0)
		return rc;
	uint64_t rows = (uint64_t)kv_layer_ctx(g, max_seq, extra) * (uint64_t)slots;
	if (kr + vr < kr || ((kr + vr) != 0 && rows > UINT64_MAX / (kr + vr)))
		return LM_EOVERFLOW;
	*bytes = rows * (kr + vr);
	return 0;
}

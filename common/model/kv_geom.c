/* kv_geom.c — one layer's KV geometry and bytes. See kv_geom.h. */
#include "common/model/kv_geom.h"

#include <stdio.h>

#include "common/base/err.h"

const char *kv_kind_name(enum kv_kind k)
{
	return k == KV_RECURRENT ? "recurrent" : k == KV_SLIDING ? "sliding" : "global";
}

int32_t kv_geom_ctx(const struct kv_geom *g, int32_t max_seq, int32_t extra)
{
	if (g->state > 0)
		return 0;
	if (g->window > 0 && extra >= 0 && (int64_t)g->window + extra < max_seq)
		return g->window + extra;
	return max_seq;
}

bool kv_type_supported(enum lm_dtype t)
{
	switch (t) {
	case LM_F32:
	case LM_F16:
	case LM_BF16:
	case LM_Q8_0:
	case LM_Q5_1:
	case LM_Q4_0:
	case LM_FP8_E4M3:
		return true;
	default:
		return false;
	}
}

const char *kv_type_names(void)
{
	return "f32, f16, bf16, q8_0, q5_1, q4_0 or fp8";
}

int kv_geom_check(const struct kv_geom *g, enum lm_dtype t, char *why, size_t cap)
{
	if (!kv_type_supported(t)) {
		snprintf(why, cap, "%s is not a cache type (%s)", lm_dtype_name(t),
			 kv_type_names());
		return LM_EINVAL;
	}
	if (g->state > 0 || g->conv > 0) {
		if (g->state <= 0 || g->conv <= 0 || g->state > ((int64_t)1 << 40) ||
		    g->conv > ((int64_t)1 << 40)) {
			snprintf(why, cap,
				 "a recurrent state of %lld + %lld values is out of range",
				 (long long)g->conv, (long long)g->state);
			return LM_EINVAL;
		}
		return 0; /* f32 whatever the types: they apply to K and V rows */
	}
	if (g->n_kv_heads <= 0 || g->head_dim <= 0) {
		snprintf(why, cap, "%d KV heads of head_dim %d hold nothing", g->n_kv_heads,
			 g->head_dim);
		return LM_EINVAL;
	}
	const uint32_t blck = lm_dtype_info(t)->blck;
	if ((uint32_t)g->head_dim % blck != 0) {
		snprintf(why, cap,
			 "%s stores blocks of %u values, which do not tile head_dim %d: a block "
			 "may not straddle two heads",
			 lm_dtype_name(t), blck, g->head_dim);
		return LM_EINVAL;
	}
	return 0;
}

int kv_geom_row_bytes(const struct kv_geom *g, enum lm_dtype t, uint64_t *out)
{
	char why[8];
	if (kv_geom_check(g, t, why, sizeof why) != 0)
		return LM_EINVAL;
	uint64_t n = (uint64_t)g->n_kv_heads * (uint64_t)g->head_dim;
	return lm_dtype_row_bytes(t, n, out);
}

int kv_geom_kv_bytes(const struct kv_geom *g, int32_t max_seq, int32_t extra, int32_t slots,
		     enum lm_dtype k_type, enum lm_dtype v_type, uint64_t *k_bytes,
		     uint64_t *v_bytes)
{
	uint64_t kr, vr;
	if (max_seq <= 0 || slots <= 0 || g->window < 0)
		return LM_EINVAL;
	if (g->state > 0) {
		char why[8];
		if (kv_geom_check(g, k_type, why, sizeof why) != 0)
			return LM_EINVAL;
		/* Per slot (and per state kept), not per position. */
		if (g->keep < 0 || g->keep > 4096)
			return LM_EINVAL;
		const uint64_t copies = (uint64_t)slots * (1 + (uint64_t)g->keep);
		if (__builtin_mul_overflow((uint64_t)g->conv * sizeof(float), copies, k_bytes) ||
		    __builtin_mul_overflow((uint64_t)g->state * sizeof(float), copies, v_bytes))
			return LM_EOVERFLOW;
		return 0;
	}
	int rc = kv_geom_row_bytes(g, k_type, &kr);
	if (rc == 0)
		rc = kv_geom_row_bytes(g, v_type, &vr);
	if (rc != 0)
		return rc;
	uint64_t rows = (uint64_t)kv_geom_ctx(g, max_seq, extra) * (uint64_t)slots;
	if (kr + vr < kr || ((kr + vr) != 0 && rows > UINT64_MAX / (kr + vr)))
		return LM_EOVERFLOW;
	*k_bytes = rows * kr;
	*v_bytes = rows * vr;
	return 0;
}

int kv_geom_bytes(const struct kv_geom *g, int32_t max_seq, int32_t extra, int32_t slots,
		  enum lm_dtype k_type, enum lm_dtype v_type, uint64_t *bytes)
{
	uint64_t k, v;
	int rc = kv_geom_kv_bytes(g, max_seq, extra, slots, k_type, v_type, &k, &v);
	if (rc == 0)
		*bytes = k + v;
	return rc;
}

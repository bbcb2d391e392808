/* kv_geom.h — the geometry and the bytes of one layer's KV cache, for the planner and the cache.
 *
 * A layer keeps, per sequence slot, ctx(l) rows of K and of V, each row n_kv_heads(l) x
 * head_dim(l) elements of its cache type: ctx(l) is max_seq for a global layer and its window
 * (plus the rows a batch writes ahead: kv_layer_ctx) for a sliding-window layer. Pure arithmetic: the planner prices a worker with it before any
 * process starts, and engine/kv_cache.c allocates exactly what it says.
 */
#ifndef LM_KV_GEOM_H
#define LM_KV_GEOM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/dtype.h"

/* The shape of one layer's attention cache. */
struct kv_geom {
	int32_t n_kv_heads;
	int32_t head_dim;
	int32_t window; /* 0 for a global layer; else its sliding window in positions */
};

/* Rows per slot for a layer: max_seq for a global layer; for a sliding layer a ring of its
 * window plus `extra` rows, capped at max_seq. The extra rows are those a batch may write past
 * the window before every token of it has read (a slot's chunk of m tokens: m - 1, since the
 * whole batch is stored before any token attends), so no token reads a row its own batch
 * overwrote. */
int32_t kv_layer_ctx(const struct kv_geom *g, int32_t max_seq, int32_t extra);

/* The rows a sliding ring keeps beyond its window for batches of up to max_batch tokens. */
static inline int32_t kv_ring_extra(int32_t max_batch)
{
	return max_batch > 1 ? max_batch - 1 : 0;
}

/* Bytes of one layer's K and V for `slots` sequences. LM_EINVAL for a type that cannot hold the
 * geometry (q8_0 needs n_kv_heads * head_dim to be a multiple of 32), LM_EOVERFLOW on overflow. */
int kv_layer_bytes(const struct kv_geom *g, int32_t max_seq, int32_t extra, int32_t slots,
		   enum lm_dtype k_type, enum lm_dtype v_type, uint64_t *bytes);

/* Bytes of one position's K (or V) row of t for all KV heads: LM_EINVAL when the heads do not
 * tile t's blocks. */
int kv_geom_row_bytes(const struct kv_geom *g, enum lm_dtype t, uint64_t *out);

/* Whether K or V may be stored as t (f32, f16 or q8_0). */
bool kv_type_supported(enum lm_dtype t);

#endif

/* kv_geom.h — the geometry and the bytes of one layer's KV cache, for the planner and the cache.
 *
 * A layer keeps, per sequence slot, ctx(l) rows of K and of V, each row n_kv_heads(l) x
 * head_dim(l) elements of its cache types: ctx(l) is max_seq for a global layer and its window
 * (plus the rows a batch writes ahead: kv_geom_ctx) for a sliding-window layer. Pure
 * arithmetic: the planner prices a worker with it before any process starts, and
 * engine/kv_cache.c allocates exactly what it says.
 *
 * Types. K and V are each stored as f32, f16, bf16, q8_0, q5_1, q4_0 or fp8 (e4m3), chosen
 * separately, and separately again for sliding-window and global layers (struct kv_types):
 * memra-kv's choice is K q8_0 / V q5_1 on the sliding layers and fp8 on Gemma's global ones. A
 * block type (q8_0, q5_1, q4_0: 32 values per block) must tile each head: attention computes one
 * head's dot products block by block, so a block may not straddle two heads, and a head_dim that
 * is not a multiple of 32 is refused for it (kv_geom_check says why).
 *
 * Names. kv_geom_* is a layer's shape and bytes, kv_type* the types it stores. The cache those
 * describe is engine/kv_cache.c (kv_cache_*); the kernels that store into it and attend over it
 * are kernels/cpu/attention*.c (cpu_attn_*).
 */
#ifndef LM_KV_GEOM_H
#define LM_KV_GEOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"

/* The shape of one layer's cache. Its kind comes from the model file: a global layer (rows by
 * position), a sliding one (a ring of its window), or a recurrent one (state > 0: qwen35's
 * gated delta-net), which keeps no rows at all but a fixed-size state per slot, conv f32
 * values of its conv ring and state f32 values of its SSM state, whatever max_seq is, and
 * `keep` more of them per slot for rollback. A
 * recurrent layer's "K" bytes are its conv ring, its "V" bytes its SSM state (the plan's
 * table names them so); cache types do not apply to it. */
struct kv_geom {
	int32_t n_kv_heads;
	int32_t head_dim;
	int32_t window; /* 0 for a global layer; else its sliding window in positions */
	int64_t conv;   /* recurrent: f32 values of the conv ring per slot; else 0 */
	int64_t state;  /* recurrent: f32 values of the SSM state per slot; 0: not recurrent */
	int32_t keep;   /* recurrent: states kept per slot to roll back to (kv_geom_rec_keep) */
};

/* The states a recurrent layer keeps per slot beside its live one so that a sequence can
 * return to the state after any of the positions a speculative draft of up to max_draft tokens
 * may be rolled back to (docs/recurrent-cache.md): max_draft. */
static inline int32_t kv_geom_rec_keep(int32_t max_draft)
{
	return max_draft > 0 ? max_draft : 0;
}

enum kv_kind { KV_GLOBAL = 0, KV_SLIDING, KV_RECURRENT };

static inline enum kv_kind kv_geom_kind(const struct kv_geom *g)
{
	return g->state > 0 ? KV_RECURRENT : g->window > 0 ? KV_SLIDING : KV_GLOBAL;
}

/* "global", "sliding" or "recurrent". */
const char *kv_kind_name(enum kv_kind k);

/* The K and V types of one kind of layer. */
struct kv_pair {
	enum lm_dtype k, v;
};

/* A cache's types: one pair for global layers, one for sliding-window layers. */
struct kv_types {
	struct kv_pair global, swa;
};

/* The same K and V types on every layer. */
static inline struct kv_types kv_types_uniform(enum lm_dtype k, enum lm_dtype v)
{
	return (struct kv_types){{k, v}, {k, v}};
}

/* The pair a layer of geometry g stores. */
static inline struct kv_pair kv_types_for(const struct kv_types *t, const struct kv_geom *g)
{
	return g->window > 0 ? t->swa : t->global;
}

/* Rows per slot for a layer (0 for a recurrent one): max_seq for a global layer; for a sliding layer a ring of its
 * window plus `extra` rows, capped at max_seq. The extra rows are those a batch may write past
 * the window before every token of it has read (a slot's chunk of m tokens: m - 1, since the
 * whole batch is stored before any token attends), so no token reads a row its own batch
 * overwrote; and those a speculative draft of k tokens writes past what is accepted: with
 * extra >= k, the rows a rejected draft overwrote are rows no position the rollback keeps
 * still reads (kv_cache_can_truncate). Never the full max_seq of llama.cpp's --swa-full. */
int32_t kv_geom_ctx(const struct kv_geom *g, int32_t max_seq, int32_t extra);

/* The rows a sliding ring keeps beyond its window for batches of up to max_batch tokens and
 * drafts of up to max_draft tokens (one sequence's draft rides in one batch, so max_draft <
 * max_batch and the batch decides). */
static inline int32_t kv_geom_ring_extra(int32_t max_batch, int32_t max_draft)
{
	int32_t e = max_batch > 1 ? max_batch - 1 : 0;
	return max_draft > e ? max_draft : e;
}

/* Bytes of one layer's K and V for `slots` sequences. LM_EINVAL for a type that cannot hold the
 * geometry (kv_geom_check), LM_EOVERFLOW on overflow. */
int kv_geom_bytes(const struct kv_geom *g, int32_t max_seq, int32_t extra, int32_t slots,
		  enum lm_dtype k_type, enum lm_dtype v_type, uint64_t *bytes);
/* The same, K and V apart. */
int kv_geom_kv_bytes(const struct kv_geom *g, int32_t max_seq, int32_t extra, int32_t slots,
		     enum lm_dtype k_type, enum lm_dtype v_type, uint64_t *k_bytes,
		     uint64_t *v_bytes);

/* Bytes of one position's K (or V) row of t for all KV heads: LM_EINVAL when t cannot hold the
 * geometry (kv_geom_check). */
int kv_geom_row_bytes(const struct kv_geom *g, enum lm_dtype t, uint64_t *out);

/* Whether K or V may be stored as t: f32, f16, bf16, q8_0, q5_1, q4_0 or fp8. */
bool kv_type_supported(enum lm_dtype t);
/* "f32, f16, bf16, q8_0, q5_1, q4_0 or fp8", for messages. */
const char *kv_type_names(void);
/* 0 when a layer of geometry g can store K or V as t; else LM_EINVAL with the reason in `why`
 * ("q8_0 stores blocks of 32 values, which do not tile head_dim 8: a block may not straddle two
 * heads"). */
int kv_geom_check(const struct kv_geom *g, enum lm_dtype t, char *why, size_t cap);

#endif

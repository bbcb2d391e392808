/* kv_cache.h — the KV cache of one worker's layers, and only those.
 *
 * A worker that runs layers [base_layer, base_layer + num_layers) allocates K and V rows for those
 * layers alone: the sum over its own layers of
 *     2 (K and V) x slots x ctx(l) x n_kv_heads(l) x head_dim(l) x sizeof(type)
 * where ctx(l) is max_seq for global layers and the window for sliding-window layers. Allocating
 * for the whole model on every worker is the failure this module exists to make impossible.
 *
 * Layers are addressed by their absolute index in the model. kv_cache_layer() translates it to
 * the local index and checks the range in every build type, returning LM_ERANGE: a release build
 * that silently reads another layer's rows produces plausible garbage, which is worse than a crash.
 *
 * K and V are stored in their own types, per layer kind (kv_geom.h's struct kv_types: sliding
 * layers and global layers may differ); each struct lm_kv_layer says its two.
 *
 * A slot holds one sequence. Each slot remembers its length (positions its sequence holds) and
 * its high-water mark (one past the highest position ever written since the slot was last
 * emptied): truncating a slot rolls the sequence back, which is exact for global layers, and
 * for a sliding layer's ring valid only while the ring still holds the rows the rolled-back
 * sequence reads. A rejected speculative draft wrote rows past the accepted length; those
 * overwrote ring rows of older positions, so the check must count from the high-water mark, not
 * from the length. Rows of one sequence can be exported and imported (migration between worker
 * processes during a redeploy), its length and high-water mark with them.
 */
#ifndef LM_KV_CACHE_H
#define LM_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/model/kv_geom.h"
#include "kernels/backend.h"

struct kv_cache_cfg {
	int32_t base_layer;         /* first absolute layer owned */
	int32_t num_layers;         /* layers owned */
	const struct kv_geom *geom; /* [num_layers], indexed locally */
	int32_t max_seq;            /* positions per sequence */
	int32_t ring_extra;         /* rows a sliding ring keeps beyond its window (kv_geom.h) */
	int32_t slots;              /* concurrent sequences */
	struct kv_types types;      /* K and V types of global and of sliding layers */
	/* Optional: each layer's own ([num_layers], indexed locally), for a process that holds
	 * the layers of several workers of a mesh whose workers differ in their types; NULL:
	 * `types` on every layer. */
	const struct kv_types *layer_types;
};

struct kv_cache {
	int32_t base_layer, num_layers, max_seq, slots;
	struct kv_types types;
	struct lm_backend *backend;
	struct lm_kv_layer *layers; /* [num_layers] */
	int32_t *len;               /* [slots]: positions the sequence holds */
	int32_t *hi;                /* [slots]: one past the highest position written (>= len) */
	uint64_t bytes;             /* total K and V bytes allocated */
};

/* Allocates the cache in the backend's memory. On failure nothing is left allocated. */
int kv_cache_init(struct kv_cache *kv, struct lm_backend *backend, const struct kv_cache_cfg *cfg,
		  lm_diag *d);
/* Frees; harmless on a zeroed or already finished cache. */
void kv_cache_fini(struct kv_cache *kv);

/* The view of absolute layer `layer`; LM_ERANGE (and a message naming the owned range) when the
 * layer is not this cache's. */
int kv_cache_layer(const struct kv_cache *kv, int32_t layer, const struct lm_kv_layer **out,
		   lm_diag *d);

/* Checks that positions [pos, pos + n) fit slot `slot` (LM_ERANGE otherwise). */
int kv_cache_check(const struct kv_cache *kv, int32_t slot, int32_t pos, int32_t n, lm_diag *d);
/* Records that slot `slot` now holds `len` positions, written by a forward (its high-water mark
 * rises to len; len 0 empties the slot). */
int kv_cache_set_len(struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d);
/* Whether slot `slot` can roll back to `len` positions (len <= its length, and every sliding
 * ring still holds the rows the next token reads, counted from the high-water mark): 0 or
 * LM_ERANGE saying which layer. len 0 (start afresh) is always possible. */
int kv_cache_can_truncate(const struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d);
/* Rolls slot `slot` back to `len` positions (as kv_cache_can_truncate allows); 0 empties it. */
int kv_cache_truncate(struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d);

/* Makes slot `dst` hold what slot `src` would hold truncated to `len` positions (1 <= len, as
 * kv_cache_can_truncate allows on src), on every owned layer: a global layer's rows [0, len), a
 * sliding layer's whole ring, and src's high-water mark with them (so a later rollback of dst
 * is judged as src's would be). dst != src. Whatever dst held is gone, also when the copy fails
 * (LM_ERANGE: src holds fewer positions, or its rings no longer hold them). For parallel samples
 * of one prompt, which is computed once (wire.h, COPY). */
int kv_cache_copy(struct kv_cache *kv, int32_t src, int32_t dst, int32_t len, lm_diag *d);

/* Bytes of one slot's rows across all owned layers for its current length (export size). */
uint64_t kv_cache_export_bytes(const struct kv_cache *kv, int32_t slot);
/* Copies slot `slot`'s rows (all owned layers, positions [0, len)) into buf, host memory. */
int kv_cache_export(const struct kv_cache *kv, int32_t slot, void *buf, uint64_t cap, lm_diag *d);
/* The inverse into slot `slot`, setting its length to `len` and its high-water mark to `hi` (the
 * exporter's: len <= hi <= max_seq, else LM_ERANGE); `bytes` must match. */
int kv_cache_import(struct kv_cache *kv, int32_t slot, int32_t len, int32_t hi, const void *buf,
		    uint64_t bytes, lm_diag *d);

#endif

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
 *
 * Recurrent layers (qwen35's gated delta-net; kv_geom.h's kind) keep no rows: each slot has a
 * fixed-size state, a conv ring and an SSM state in f32 (struct kv_rec), allocated only for the
 * worker's own recurrent layers, in host memory (the engine computes the delta rule on the
 * host). Such a state is the sequence after its last position and cannot be truncated. Each
 * recurrent layer therefore keeps, per slot, `keep` more states (kv_geom's keep, the largest
 * speculative draft): a forward copies the state after each of the last `keep` positions of a
 * slot's tokens in its batch but the last (kv_cache_rec_snapshot), and a rollback to one of
 * them restores it. A slot rolls back to 0 (a fresh start, its state zeroed), to where it is,
 * or to a kept state; kv_cache_can_truncate refuses anything else, naming the layer
 * (docs/recurrent-cache.md). The live state travels with the slot's rows in an export; the
 * kept ones do not (an imported slot cannot roll back until its next batch).
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

/* A recurrent layer's state, host memory: per slot conv_n f32 of its conv ring, then state_n
 * f32 of its SSM state. conv == NULL on an attention layer. */
struct kv_rec {
	float *conv;  /* [slots][conv_n] */
	float *state; /* [slots][state_n] */
	int64_t conv_n, state_n;
	float *kept; /* [slots][keep][conv_n + state_n]: the state after position p at p % keep */
};

struct kv_cache {
	int32_t base_layer, num_layers, max_seq, slots;
	struct kv_types types;
	struct lm_backend *backend;
	struct lm_kv_layer *layers; /* [num_layers] */
	struct kv_rec *rec;         /* [num_layers]: a recurrent layer's state, else zeroed */
	int32_t n_recurrent;        /* recurrent layers owned */
	int32_t rec_keep;           /* states each recurrent layer keeps per slot */
	/* [slots]: the kept states are those after positions [rec_lo, rec_hi) (none: equal) */
	int32_t *rec_lo, *rec_hi;
	int32_t *len;   /* [slots]: positions the sequence holds */
	int32_t *hi;    /* [slots]: one past the highest position written (>= len) */
	uint64_t bytes; /* total K and V bytes allocated, recurrent states included */
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

/* The conv ring and SSM state of absolute layer `layer` for slot `slot`: LM_ERANGE when the layer
 * is not this cache's or not recurrent, or the slot is out of range. */
int kv_cache_rec(const struct kv_cache *kv, int32_t layer, int32_t slot, float **conv,
		 float **state, lm_diag *d);
/* Zeroes slot `slot`'s recurrent states: the state before a sequence's first token. */
void kv_cache_rec_reset(struct kv_cache *kv, int32_t slot);
/* Keeps the live state of absolute layer `layer` for slot `slot` as the state after position
 * pos (a forward, after that position's token; layer and slot as kv_cache_rec checked them). */
void kv_cache_rec_snapshot(struct kv_cache *kv, int32_t layer, int32_t slot, int32_t pos);
/* Records that slot `slot`'s kept states are now those after positions [lo, hi) (a forward,
 * after its batch). */
void kv_cache_rec_kept(struct kv_cache *kv, int32_t slot, int32_t lo, int32_t hi);

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

/* Bytes of one slot's rows across all owned layers for its current length, and of its
 * recurrent states when it holds any position (export size). */
uint64_t kv_cache_export_bytes(const struct kv_cache *kv, int32_t slot);
/* Copies slot `slot`'s rows (all owned layers, positions [0, len)) into buf, host memory. */
int kv_cache_export(const struct kv_cache *kv, int32_t slot, void *buf, uint64_t cap, lm_diag *d);
/* The inverse into slot `slot`, setting its length to `len` and its high-water mark to `hi` (the
 * exporter's: len <= hi <= max_seq, else LM_ERANGE); `bytes` must match. */
int kv_cache_import(struct kv_cache *kv, int32_t slot, int32_t len, int32_t hi, const void *buf,
		    uint64_t bytes, lm_diag *d);

#endif

/* prefix.h — the prefix cache's index: what each idle KV slot still holds on every stage.
 *
 * A sequence that ends leaves its rows in its slot on every worker: positions 0 .. n-1 of the
 * tokens it computed. The scheduler keeps those tokens here instead of releasing the slot. A
 * new request that shares a prefix with them takes that slot and starts at the first position
 * that differs: its first FORWARD's position is the length every stage truncates the slot to
 * before it stores (wire.h, "Rollback"), so the rows before it are reused as they are and only
 * the new tokens travel the ring.
 *
 * What may be reused:
 *   - at most the prompt less its last token: the step must compute one row to sample from;
 *   - on a model with sliding-window layers, only a rollback the ring still allows: a ring
 *     written up to position `hi` keeps its window plus ring_extra rows, so a continuation at
 *     p reads what it needs only if hi - p <= `rollback` (kv_geom_ring_extra + 1, engine/kv_cache.c),
 *     or if no ring has wrapped yet (hi <= `ring_ctx`, the smallest ring's rows, when known);
 *     otherwise nothing is reused and the prompt is computed from position 0 (a shorter
 *     prefix would roll back further still);
 *   - on a model with recurrent layers, only a length every stage can return to
 *     (kv_cache_can_truncate's rule, docs/recurrent-cache.md "Prefix reuse"): a recurrent state
 *     is the sequence after its last position, so a stage holds the live state after the
 *     slot's last batch, positions [first, len), and the states after the positions
 *     [max(first, len - 1 - keep), len - 1) it kept for a speculative rollback: it can resume at
 *     len, or at any c with c - 1 among the kept positions. Any other common prefix reuses
 *     nothing (a shorter one is not kept either). A conversation's next turn, whose prompt
 *     extends all the slot held, resumes at len.
 *
 * Never a stale row: the index describes processes that are alive. Any pause of the scheduler
 * (a worker away, a rolling redeploy's switch) forgets every entry (prefix_forget_all), since
 * a restarted or replaced worker holds none of them; a sequence that ended in an error leaves
 * nothing behind (prefix_drop).
 *
 * Eviction: a request takes the free slot with the longest usable prefix; with none usable,
 * an empty slot, else the one used least recently.
 *
 * The scheduler's thread alone uses an index; the tests call it directly.
 */
#ifndef LM_PREFIX_H
#define LM_PREFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"

struct prefix_slot {
	int32_t *tok; /* [max_seq] the tokens whose rows the slot holds; NULL until first kept */
	int32_t n;    /* rows held: tok[0 .. n) (0: nothing) */
	int32_t hi;   /* the highest position written in the slot since it was last emptied */
	/* The slot's last batch wrote positions [first, len): every stage holds len positions, and
	 * a recurrent one the states after [max(first, len - 1 - keep), len - 1) beside its live
	 * one. back: the least length > 0 it returns to (len when it kept none). */
	int32_t len, back;
	uint64_t used; /* when it was kept (the index's clock), for least-recently-used */
};

struct prefix_index {
	struct prefix_slot *slot; /* [slots] */
	int32_t slots, max_seq;
	int32_t rollback; /* rows below hi a sliding ring can roll back; < 0: no sliding layers */
	int32_t ring_ctx; /* rows of the smallest sliding ring (0: not known; set after init) */
	/* States a recurrent stage keeps per slot beside its live one (kv_geom_rec_keep); < 0: the
	 * model has no recurrent layer (prefix_init's; set after init). */
	int32_t rec_keep;
	uint64_t clock;
	int32_t n_held; /* slots whose rows the index vouches for */
};

int prefix_init(struct prefix_index *x, int32_t slots, int32_t max_seq, int32_t rollback,
		lm_diag *d);
void prefix_fini(struct prefix_index *x);

/* Slot `slot` now holds the rows of tok[0 .. n), written up to position hi (>= n); its last
 * batch wrote positions [first, len) (n <= len <= hi). Keeps nothing (the slot is dropped) when
 * n <= 0 or the copy cannot be made. */
void prefix_keep(struct prefix_index *x, int32_t slot, const int32_t *tok, int32_t n, int32_t hi,
		 int32_t first, int32_t len);

/* The slot holds nothing the index vouches for. */
void prefix_drop(struct prefix_index *x, int32_t slot);

/* Every slot: a worker that held the rows may be gone. */
void prefix_forget_all(struct prefix_index *x);

/* The rows of slot `slot` a sequence of tok[0 .. n) (n >= 1) may reuse, by the rules above. */
int32_t prefix_usable(const struct prefix_index *x, int32_t slot, const int32_t *tok, int32_t n);

/* The slot a sequence of tok[0 .. n) should take among those free[i] is true for, and the rows
 * it reuses there (*reuse). -1 when no slot is free. */
int32_t prefix_choose(const struct prefix_index *x, const bool *free, const int32_t *tok, int32_t n,
		      int32_t *reuse);

#endif

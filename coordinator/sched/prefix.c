/* prefix.c — the prefix cache's index. See prefix.h. */
#include "coordinator/sched/prefix.h"

#include <stdlib.h>
#include <string.h>

int prefix_init(struct prefix_index *x, int32_t slots, int32_t max_seq, int32_t rollback,
		lm_diag *d)
{
	memset(x, 0, sizeof *x);
	if (slots <= 0 || max_seq <= 0)
		return lm_fail(d, LM_EINVAL, "prefix index: %d slots of %d positions", slots,
			       max_seq);
	x->slot = calloc((size_t)slots, sizeof *x->slot);
	if (x->slot == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	x->slots = slots;
	x->max_seq = max_seq;
	x->rollback = rollback;
	x->rec_keep = -1;
	return 0;
}

void prefix_fini(struct prefix_index *x)
{
	if (x == NULL || x->slot == NULL)
		return;
	for (int32_t i = 0; i < x->slots; i++)
		free(x->slot[i].tok);
	free(x->slot);
	memset(x, 0, sizeof *x);
}

void prefix_drop(struct prefix_index *x, int32_t slot)
{
	if (slot < 0 || slot >= x->slots)
		return;
	x->n_held -= x->slot[slot].n > 0;
	x->slot[slot].n = 0;
	x->slot[slot].hi = 0;
	x->slot[slot].len = x->slot[slot].back = 0;
}

void prefix_keep(struct prefix_index *x, int32_t slot, const int32_t *tok, int32_t n, int32_t hi,
		 int32_t first, int32_t len)
{
	if (slot < 0 || slot >= x->slots)
		return;
	struct prefix_slot *p = &x->slot[slot];
	if (n <= 0 || n > x->max_seq) {
		prefix_drop(x, slot);
		return;
	}
	if (p->tok == NULL && (p->tok = malloc((size_t)x->max_seq * sizeof *p->tok)) == NULL) {
		prefix_drop(x, slot);
		return;
	}
	memcpy(p->tok, tok, (size_t)n * sizeof *tok);
	x->n_held += p->n == 0;
	p->n = n;
	p->hi = hi > n ? hi : n;
	/* A stage keeps the states after its last batch's positions but its last, at most keep of
	 * them (kv_cache_rec_kept, engine/forward.c). Lengths that do not add up keep no state to
	 * go back to: len < n leaves nothing reusable (prefix_usable). */
	int32_t keep = x->rec_keep > 0 ? x->rec_keep : 0, back = len - keep;
	p->len = len;
	p->back = back > first + 1 ? back : first + 1;
	if (p->back > len || p->back < 1)
		p->back = len;
	p->used = ++x->clock;
}

void prefix_forget_all(struct prefix_index *x)
{
	for (int32_t i = 0; i < x->slots; i++)
		prefix_drop(x, i);
}

int32_t prefix_usable(const struct prefix_index *x, int32_t slot, const int32_t *tok, int32_t n)
{
	if (slot < 0 || slot >= x->slots || n <= 1)
		return 0;
	const struct prefix_slot *p = &x->slot[slot];
	int32_t most = p->n < n - 1 ? p->n : n - 1;
	int32_t c = 0;
	while (c < most && p->tok[c] == tok[c])
		c++;
	if (c > 0 && x->rollback >= 0 && p->hi - c > x->rollback &&
	    !(x->ring_ctx > 0 && p->hi <= x->ring_ctx))
		return 0; /* a sliding ring no longer holds what the continuation reads */
	if (c > 0 && x->rec_keep >= 0 && (p->len < p->n || c < p->back || c > p->len))
		return 0; /* no stage keeps the recurrent state after position c - 1 */
	return c;
}

int32_t prefix_choose(const struct prefix_index *x, const bool *free, const int32_t *tok, int32_t n,
		      int32_t *reuse)
{
	int32_t best = -1, best_reuse = 0, empty = -1, oldest = -1;
	for (int32_t i = 0; i < x->slots; i++) {
		if (!free[i])
			continue;
		int32_t r = prefix_usable(x, i, tok, n);
		if (r > best_reuse) {
			best = i;
			best_reuse = r;
		}
		if (x->slot[i].n == 0) {
			if (empty < 0)
				empty = i;
		} else if (oldest < 0 || x->slot[i].used < x->slot[oldest].used) {
			oldest = i;
		}
	}
	*reuse = best_reuse;
	if (best >= 0)
		return best;
	return empty >= 0 ? empty : oldest;
}

/* sched_draft.c — the drafts a decoding sequence sends beside its token: when its draft source
 * is asked, and for how many. See spec.h and spec_adapt.h. */
#include "coordinator/sched/sched_impl.h"
#include "coordinator/sched/spec.h"

/* Asks the draft source for up to `room` tokens to follow decoding sequence q, into the batch's
 * drafts (not counted in yet); how many. No more than the request may still generate (the
 * last worker's own token comes on top) or the context holds. */
int32_t sched_draft(struct sched *s, struct sched_seq *q, int32_t room, struct sched_batch *b)
{
	/* A request with logit adjustments does not speculate: its penalty window would move
	 * with every accepted draft, and the wire carries one adjustment per sequence. */
	if (s->cfg.draft.iface == NULL || !q->spec || s->cfg.max_draft <= 0 || q->n_bias > 0 ||
	    lm_penalties_active(&q->pen))
		return 0;
	if (s->cfg.spec_max_streams > 0 && atomic_load(&s->stats.active) > s->cfg.spec_max_streams)
		return 0;
	/* A draft model holds what it was fed up to its last proposal for this sequence (and is fed
	 * the prompt when it first drafts); the tokens generated since, while more than
	 * max_streams sequences ran, it must feed before it drafts again. A request with fewer
	 * tokens left than that does not draft again: as a round of streams drains, the last few
	 * would each feed a whole answer to draft its last tokens (measured: bench/RESULTS.md). */
	const struct spec_source_i *src = s->cfg.draft.iface;
	const int32_t fed = q->asked_at > q->n_prompt ? q->asked_at : q->n_prompt;
	if (!src->cheap && q->n_tok - fed > q->max_tokens - q->n_gen)
		return 0;
	int32_t most = s->cfg.max_draft;
	most = room < most ? room : most;
	most = q->max_tokens - q->n_gen - 1 < most ? q->max_tokens - q->n_gen - 1 : most;
	most = s->cfg.max_seq - q->n_tok < most ? s->cfg.max_seq - q->n_tok : most;
	if (most <= 0)
		return 0;
	/* As many as this sequence's drafts have earned; none while they keep failing, but then
	 * a shadow draft, compared with the token the step brings, tells when they would pay
	 * again. */
	int32_t earned = spec_adapt_k(&q->adapt);
	if (earned == 0) {
		int32_t t;
		if (spec_adapt_shadow_due(&q->adapt, src->cheap)) {
			q->asked_at = q->n_tok;
			if (src->propose(s->cfg.draft.ctx, q->slot, q->tok, q->n_tok, 1, &t) == 1) {
				spec_adapt_shadow(&q->adapt, q->n_tok, t);
				atomic_fetch_add(&s->stats.spec_shadowed, 1);
			}
		}
		return 0;
	}
	most = earned < most ? earned : most;
	q->asked_at = q->n_tok;
	int32_t k = src->propose(s->cfg.draft.ctx, q->slot, q->tok, q->n_tok, most,
				 b->drafts + b->n_drafts);
	return k < 0 ? 0 : k > most ? most : k;
}

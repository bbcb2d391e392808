/* spec_adapt.h — how many tokens a sequence drafts next: speculation that never loses.
 *
 * A drafted token costs a verification row at every stage and the scheduler's work to send and
 * check it; it pays only when it is accepted. So each sequence keeps an estimate p of the
 * chance that its source's next drafted token is accepted (an exponential average over the
 * tokens it drafted and the last worker compared), and drafts k tokens next, the largest k up
 * to max_draft whose last token is still likely enough to be accepted: p^k >= SPEC_ADAPT_MIN.
 * A sequence whose drafts keep failing (p < SPEC_ADAPT_MIN) stops drafting.
 *
 * A stopped sequence starts again when its text turns repetitive. It keeps asking its source
 * for one token (a shadow draft, never sent), and compares it with the token the step then
 * brings: the answers move p as real drafts do, at no cost on the ring. A cheap source (n-gram
 * lookup) is asked at every step; a costly one (a draft model) only every `backoff` steps,
 * doubling from SPEC_ADAPT_BACKOFF_MIN to SPEC_ADAPT_BACKOFF_MAX while its shadows fail.
 *
 * A function of its state and the step's outcome, nothing else: the scheduler calls it from its
 * one thread, and the tests call it directly.
 */
#ifndef LM_SPEC_ADAPT_H
#define LM_SPEC_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

/* The chance the last drafted token must keep to be sent. */
#define SPEC_ADAPT_MIN 0.3f
/* The weight of the newest comparison in p. */
#define SPEC_ADAPT_ALPHA 0.25f
/* p at a sequence's start: as if half its drafts were accepted. */
#define SPEC_ADAPT_P0          0.5f
#define SPEC_ADAPT_BACKOFF_MIN 4
#define SPEC_ADAPT_BACKOFF_MAX 64

struct spec_adapt {
	float p;           /* the estimated chance a drafted token is accepted */
	int32_t max_draft; /* the mesh's [speculative] max_draft */
	int32_t wait;      /* stopped: steps until the next shadow draft of a costly source */
	int32_t backoff;   /* what `wait` starts from after a failed shadow */
	int32_t shadow;    /* the shadow draft waiting for its step's token; -1: none */
	int32_t shadow_at; /* the position it is for (the sequence's length when drafted) */
};

void spec_adapt_init(struct spec_adapt *a, int32_t max_draft);

/* How many tokens to draft at this step (0: none). */
int32_t spec_adapt_k(const struct spec_adapt *a);

/* Whether a stopped sequence asks its source for a shadow draft at this step (cheap: the
 * source costs nothing worth counting). Counts the step. */
bool spec_adapt_shadow_due(struct spec_adapt *a, bool cheap);

/* The step verified `drafted` (> 0) tokens and the last worker accepted `accepted` of them. */
void spec_adapt_verified(struct spec_adapt *a, int32_t drafted, int32_t accepted);

/* A shadow draft of `token` for position `at`. */
void spec_adapt_shadow(struct spec_adapt *a, int32_t at, int32_t token);

/* The step brought `token` at position `at`: a shadow draft for it is compared and spent. */
void spec_adapt_token(struct spec_adapt *a, int32_t at, int32_t token);

#endif

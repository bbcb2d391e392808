/* test_spec_adapt.c — how many tokens a sequence drafts next (coordinator/sched/spec_adapt.h).
 *
 * The decisions as functions of the state and the outcomes: drafts that keep failing stop, a
 * stopped sequence's shadow drafts bring it back when its text repeats, the draft length
 * follows the acceptance, and a costly source's shadows back off.
 */
#include <criterion/criterion.h>

#include "coordinator/sched/spec_adapt.h"

TestSuite(spec_adapt, .timeout = 10);

Test(spec_adapt, a_new_sequence_drafts_what_an_even_chance_earns)
{
	struct spec_adapt a;
	spec_adapt_init(&a, 4);
	/* 0.5 and 0.25: only the first draft is likely enough (>= 0.3). */
	cr_expect_eq(spec_adapt_k(&a), 1);
	spec_adapt_init(&a, 0);
	cr_expect_eq(spec_adapt_k(&a), 0, "no [speculative]: nothing, ever");
	cr_expect(!spec_adapt_shadow_due(&a, true));
}

Test(spec_adapt, drafts_that_are_accepted_grow_to_max_draft)
{
	struct spec_adapt a;
	spec_adapt_init(&a, 4);
	int32_t k = spec_adapt_k(&a), last = 0;
	for (int step = 0; step < 20; step++) {
		spec_adapt_verified(&a, k, k);
		last = k;
		k = spec_adapt_k(&a);
		cr_assert_geq(k, last, "step %d: accepted drafts never shorten the next", step);
	}
	cr_expect_eq(k, 4);
	cr_expect_gt(a.p, 0.9f);
}

Test(spec_adapt, drafts_that_fail_stop_within_a_few_steps)
{
	struct spec_adapt a;
	spec_adapt_init(&a, 4);
	int steps = 0;
	while (spec_adapt_k(&a) > 0 && steps < 100) {
		spec_adapt_verified(&a, spec_adapt_k(&a), 0);
		steps++;
	}
	cr_expect_eq(spec_adapt_k(&a), 0);
	cr_expect_leq(steps, 3, "stopped after %d failed steps", steps);
	/* One accepted of four (about the 12% that made a stream slower): it stays stopped. */
	spec_adapt_init(&a, 4);
	for (int step = 0; step < 40; step++)
		if (spec_adapt_k(&a) > 0)
			spec_adapt_verified(&a, spec_adapt_k(&a), step % 8 == 0 ? 1 : 0);
	cr_expect_eq(spec_adapt_k(&a), 0, "p %f", (double)a.p);
}

Test(spec_adapt, only_the_compared_drafts_count)
{
	/* Two of four accepted: three were compared (the third was refused, the fourth never
	 * looked at), so p moves as for two hits and one miss. */
	struct spec_adapt a, b;
	spec_adapt_init(&a, 4);
	spec_adapt_init(&b, 4);
	spec_adapt_verified(&a, 4, 2);
	spec_adapt_verified(&b, 3, 2);
	cr_expect_eq(a.p, b.p);
	/* All accepted: no miss. */
	spec_adapt_init(&a, 4);
	spec_adapt_verified(&a, 2, 2);
	cr_expect_gt(a.p, SPEC_ADAPT_P0);
	/* Nonsense counts are clamped, and nothing drafted moves nothing. */
	spec_adapt_init(&a, 4);
	spec_adapt_verified(&a, 2, 5);
	spec_adapt_init(&b, 4);
	spec_adapt_verified(&b, 2, 2);
	cr_expect_eq(a.p, b.p);
	spec_adapt_init(&a, 4);
	spec_adapt_verified(&a, 0, 0);
	cr_expect_eq(a.p, SPEC_ADAPT_P0);
}

/* Stopped, with a cheap source: a shadow draft at every step; hits bring drafting back, and
 * a shadow for another position than the token's is not compared. */
Test(spec_adapt, shadows_of_a_cheap_source_bring_drafting_back)
{
	struct spec_adapt a;
	spec_adapt_init(&a, 4);
	while (spec_adapt_k(&a) > 0)
		spec_adapt_verified(&a, spec_adapt_k(&a), 0);
	float before = a.p;
	spec_adapt_shadow(&a, 10, 7);
	spec_adapt_token(&a, 11, 7); /* another position: not compared */
	cr_expect_eq(a.p, before);
	spec_adapt_token(&a, 10, 7); /* spent already */
	cr_expect_eq(a.p, before);
	int steps = 0;
	for (int32_t at = 20; spec_adapt_k(&a) == 0 && steps < 50; at++, steps++) {
		cr_assert(spec_adapt_shadow_due(&a, true), "a cheap source shadows every step");
		spec_adapt_shadow(&a, at, 5);
		spec_adapt_token(&a, at, 5);
	}
	cr_expect_gt(spec_adapt_k(&a), 0);
	cr_expect_leq(steps, 6, "drafting came back after %d repeating steps", steps);
	cr_expect(!spec_adapt_shadow_due(&a, true), "drafting: no shadows");
}

/* A costly source (a draft model) shadows every `backoff` steps, doubling while it misses up
 * to SPEC_ADAPT_BACKOFF_MAX, and sooner again after a hit. */
Test(spec_adapt, shadows_of_a_costly_source_back_off)
{
	struct spec_adapt a;
	spec_adapt_init(&a, 4);
	a.p = 0.0f;
	int due = 0;
	for (int32_t step = 0; step < 1000; step++)
		if (spec_adapt_shadow_due(&a, false)) {
			due++;
			spec_adapt_shadow(&a, step, 1);
			spec_adapt_token(&a, step, 2);
		}
	cr_expect_eq(a.backoff, SPEC_ADAPT_BACKOFF_MAX);
	/* 1 + 5 + 9 + 17 + 33 + 65 + ... steps apart: about 1000 / 65 once at the cap. */
	cr_expect_lt(due, 25, "%d shadows in 1000 steps", due);
	cr_expect_gt(due, 10, "%d shadows in 1000 steps", due);
	spec_adapt_shadow(&a, 5000, 3);
	spec_adapt_token(&a, 5000, 3);
	cr_expect_eq(a.backoff, SPEC_ADAPT_BACKOFF_MIN);
}

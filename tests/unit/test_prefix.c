/* test_prefix.c — the prefix cache's index (coordinator/sched/prefix.h): what may be reused of
 * an idle slot's rows, which slot a request takes, and what is forgotten. */
#include <criterion/criterion.h>

#include "coordinator/sched/prefix.h"

TestSuite(prefix, .timeout = 10);

static const int32_t conv[] = {1, 10, 11, 12, 13, 14, 15, 16, 17, 18};

Test(prefix, reuse_is_the_common_prefix_less_the_last_prompt_token)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 4, 64, -1, NULL), 0);
	prefix_keep(&x, 1, conv, 6, 6, 5, 6); /* rows of 1 10 11 12 13 14 */
	/* The next turn: all six rows, and the new tokens after them. */
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 6);
	/* The same prompt again: all but its last token, which must be computed to sample. */
	cr_expect_eq(prefix_usable(&x, 1, conv, 6), 5);
	/* A prompt that leaves it after three tokens: three. */
	const int32_t other[] = {1, 10, 11, 99, 13};
	cr_expect_eq(prefix_usable(&x, 1, other, 5), 3);
	/* Nothing in common, a one-token prompt, an empty slot, a slot out of range. */
	const int32_t none[] = {2, 10, 11};
	cr_expect_eq(prefix_usable(&x, 1, none, 3), 0);
	cr_expect_eq(prefix_usable(&x, 1, conv, 1), 0);
	cr_expect_eq(prefix_usable(&x, 0, conv, 10), 0);
	cr_expect_eq(prefix_usable(&x, 7, conv, 10), 0);
	cr_expect_eq(prefix_usable(&x, -1, conv, 10), 0);
	prefix_fini(&x);
	prefix_fini(&x); /* harmless twice */
}

/* Sliding-window rings: written up to hi, a slot rolls back at most `rollback` rows below it;
 * past that nothing is reused (the prompt is computed from 0). */
Test(prefix, a_sliding_ring_bounds_the_rollback)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 2, 64, 3, NULL), 0);
	prefix_keep(&x, 0, conv, 8, 9, 8, 9); /* a rejected draft wrote position 8 */
	cr_expect_eq(prefix_usable(&x, 0, conv, 10), 8, "9 - 8 = 1 row back: allowed");
	const int32_t turn[] = {1, 10, 11, 12, 13, 14, 50};
	cr_expect_eq(prefix_usable(&x, 0, turn, 7), 6, "9 - 6 = 3 rows back: allowed");
	const int32_t early[] = {1, 10, 11, 12, 13, 77};
	cr_expect_eq(prefix_usable(&x, 0, early, 6), 0, "9 - 5 = 4 rows back: the ring lost them");
	/* Without sliding layers the same rollback is exact. */
	struct prefix_index g;
	cr_assert_eq(prefix_init(&g, 2, 64, -1, NULL), 0);
	prefix_keep(&g, 0, conv, 8, 9, 8, 9);
	cr_expect_eq(prefix_usable(&g, 0, early, 6), 5);
	prefix_fini(&g);
	prefix_fini(&x);
}

/* A ring that has not wrapped (written up to hi <= its rows) still holds every row: any
 * rollback is reused; once it wraps, only the short ones. */
Test(prefix, a_ring_that_has_not_wrapped_rolls_back_anywhere)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 2, 64, 3, NULL), 0);
	x.ring_ctx = 9;
	prefix_keep(&x, 0, conv, 8, 9, 8, 9);
	const int32_t early[] = {1, 10, 11, 12, 13, 77};
	cr_expect_eq(prefix_usable(&x, 0, early, 6), 5, "hi 9 <= 9 rows: nothing was lost");
	prefix_keep(&x, 0, conv, 8, 10, 9, 10);
	cr_expect_eq(prefix_usable(&x, 0, early, 6), 0, "hi 10 > 9 rows: the ring lost row 0");
	prefix_fini(&x);
}

/* A request takes the free slot with the longest usable prefix; with none, an empty slot,
 * else the one kept least recently. */
Test(prefix, the_slot_with_the_most_reuse_then_an_empty_one_then_the_oldest)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 3, 64, -1, NULL), 0);
	bool all[3] = {true, true, true};
	int32_t reuse = -1;
	const int32_t a[] = {1, 10, 11, 12}, b[] = {1, 20, 21, 22}, c[] = {1, 30};
	cr_expect_eq(prefix_choose(&x, all, a, 4, &reuse), 0, "all empty: the first");
	cr_expect_eq(reuse, 0);
	prefix_keep(&x, 0, a, 4, 4, 3, 4);
	prefix_keep(&x, 2, b, 4, 4, 3, 4);
	const int32_t b2[] = {1, 20, 21, 22, 23, 24};
	cr_expect_eq(prefix_choose(&x, all, b2, 6, &reuse), 2);
	cr_expect_eq(reuse, 4);
	/* Nothing shared beyond BOS (1 row): a slot with BOS alone is still a reuse of 1. */
	cr_expect_eq(prefix_choose(&x, all, c, 2, &reuse), 0);
	cr_expect_eq(reuse, 1);
	const int32_t d[] = {5, 6, 7};
	cr_expect_eq(prefix_choose(&x, all, d, 3, &reuse), 1, "no reuse: the empty slot");
	cr_expect_eq(reuse, 0);
	bool busy1[3] = {true, false, true};
	cr_expect_eq(prefix_choose(&x, busy1, d, 3, &reuse), 0, "then the least recently kept");
	prefix_keep(&x, 0, a, 4, 4, 3, 4); /* slot 0 kept again: now slot 2 is the older */
	cr_expect_eq(prefix_choose(&x, busy1, d, 3, &reuse), 2);
	bool none[3] = {false, false, false};
	cr_expect_eq(prefix_choose(&x, none, a, 4, &reuse), -1);
	prefix_fini(&x);
}

/* Forgetting: a dropped slot, and every slot after a pause, vouch for nothing; keeping nothing
 * (or more than max_seq) drops. */
Test(prefix, what_is_forgotten_is_never_reused)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 2, 8, -1, NULL), 0);
	prefix_keep(&x, 0, conv, 6, 6, 5, 6);
	prefix_keep(&x, 1, conv, 6, 6, 5, 6);
	prefix_drop(&x, 0);
	cr_expect_eq(prefix_usable(&x, 0, conv, 10), 0);
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 6);
	prefix_forget_all(&x);
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 0);
	prefix_keep(&x, 1, conv, 6, 6, 5, 6);
	prefix_keep(&x, 1, conv, 0, 0, 0, 0);
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 0);
	prefix_keep(&x, 1, conv, 9, 9, 8, 9); /* past max_seq = 8 */
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 0);
	prefix_fini(&x);
	cr_expect_eq(prefix_init(&x, 0, 8, -1, NULL), LM_EINVAL);
}

/* Recurrent layers: a stage returns only to the live state after the slot's last batch (length
 * len) or to a state it kept, those after the last batch's positions but its last, at most keep
 * of them (kv_cache_can_truncate). Any other common prefix reuses nothing. */
Test(prefix, a_recurrent_slot_resumes_only_where_a_state_is_kept)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 2, 64, -1, NULL), 0);
	cr_expect_eq(x.rec_keep, -1, "no recurrent layer until told");
	x.rec_keep = 4;
	/* A decode step wrote position 9 last: only length 10, the live state, is held. */
	const int32_t turn1[] = {1, 10, 11, 12, 13, 14, 15, 16, 17, 18};
	prefix_keep(&x, 0, turn1, 10, 10, 9, 10);
	const int32_t next[] = {1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 40, 41};
	cr_expect_eq(prefix_usable(&x, 0, next, 12), 10, "the next turn extends all it held");
	cr_expect_eq(prefix_usable(&x, 0, turn1, 10), 0, "9: the state after 8 is not kept");
	const int32_t mid[] = {1, 10, 11, 12, 13, 77, 78};
	cr_expect_eq(prefix_usable(&x, 0, mid, 7), 0, "diverges at 5: not kept");
	/* A verify batch wrote [6, 11) and 2 of its 4 drafts were accepted (n = 9): the states
	 * after 6 .. 9 are kept, so lengths 7 .. 10 and the live 11 are restorable. */
	prefix_keep(&x, 0, turn1, 9, 11, 6, 11);
	cr_expect_eq(prefix_usable(&x, 0, next, 12), 9, "n = 9: the state after 8 is kept");
	const int32_t at7[] = {1, 10, 11, 12, 13, 14, 15, 99, 98};
	cr_expect_eq(prefix_usable(&x, 0, at7, 9), 7, "the state after 6 is kept");
	const int32_t at6[] = {1, 10, 11, 12, 13, 14, 99, 98};
	cr_expect_eq(prefix_usable(&x, 0, at6, 8), 0, "the state after 5 is not");
	/* A prefill chunk of [8, 16) that sampled: states after 11 .. 14 kept (keep 4 bounds
	 * them, not the chunk). */
	const int32_t long1[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
	prefix_keep(&x, 1, long1, 16, 16, 8, 16);
	cr_expect_eq(prefix_usable(&x, 1, long1, 17), 16);
	cr_expect_eq(prefix_usable(&x, 1, long1, 13), 12, "12: after 11, kept");
	cr_expect_eq(prefix_usable(&x, 1, long1, 12), 0, "11: after 10, not kept");
	/* Keeping no state (max_draft 0): the live one alone. */
	x.rec_keep = 0;
	prefix_keep(&x, 1, long1, 16, 16, 8, 16);
	cr_expect_eq(prefix_usable(&x, 1, long1, 17), 16);
	cr_expect_eq(prefix_usable(&x, 1, long1, 16), 0, "15 would need the state after 14");
	/* Lengths that do not add up (n past what the stages hold) reuse nothing. */
	prefix_keep(&x, 1, long1, 16, 16, 8, 12);
	cr_expect_eq(prefix_usable(&x, 1, long1, 17), 0);
	prefix_fini(&x);
}

/* Both rules at once: a reuse must be one a sliding ring still allows and one a recurrent stage
 * can return to. */
Test(prefix, sliding_and_recurrent_rules_compose)
{
	struct prefix_index x;
	cr_assert_eq(prefix_init(&x, 1, 64, 2, NULL), 0);
	x.rec_keep = 4;
	const int32_t t[] = {1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
	prefix_keep(&x, 0, t, 10, 10, 5, 10); /* kept states after 5 .. 8: lengths 6 .. 10 */
	const int32_t at9[] = {1, 10, 11, 12, 13, 14, 15, 16, 17, 99};
	cr_expect_eq(prefix_usable(&x, 0, at9, 10), 9, "1 row back, a kept state");
	const int32_t at7[] = {1, 10, 11, 12, 13, 14, 15, 99};
	cr_expect_eq(prefix_usable(&x, 0, at7, 8), 0, "a kept state, but 3 rows back");
	x.rollback = -1;
	cr_expect_eq(prefix_usable(&x, 0, at7, 8), 7, "without the ring: the kept state");
	prefix_fini(&x);
}

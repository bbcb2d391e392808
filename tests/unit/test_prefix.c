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
	prefix_keep(&x, 1, conv, 6, 6); /* rows of 1 10 11 12 13 14 */
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
	prefix_keep(&x, 0, conv, 8, 9); /* a rejected draft wrote position 8 */
	cr_expect_eq(prefix_usable(&x, 0, conv, 10), 8, "9 - 8 = 1 row back: allowed");
	const int32_t turn[] = {1, 10, 11, 12, 13, 14, 50};
	cr_expect_eq(prefix_usable(&x, 0, turn, 7), 6, "9 - 6 = 3 rows back: allowed");
	const int32_t early[] = {1, 10, 11, 12, 13, 77};
	cr_expect_eq(prefix_usable(&x, 0, early, 6), 0, "9 - 5 = 4 rows back: the ring lost them");
	/* Without sliding layers the same rollback is exact. */
	struct prefix_index g;
	cr_assert_eq(prefix_init(&g, 2, 64, -1, NULL), 0);
	prefix_keep(&g, 0, conv, 8, 9);
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
	prefix_keep(&x, 0, conv, 8, 9);
	const int32_t early[] = {1, 10, 11, 12, 13, 77};
	cr_expect_eq(prefix_usable(&x, 0, early, 6), 5, "hi 9 <= 9 rows: nothing was lost");
	prefix_keep(&x, 0, conv, 8, 10);
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
	prefix_keep(&x, 0, a, 4, 4);
	prefix_keep(&x, 2, b, 4, 4);
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
	prefix_keep(&x, 0, a, 4, 4); /* slot 0 kept again: now slot 2 is the older */
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
	prefix_keep(&x, 0, conv, 6, 6);
	prefix_keep(&x, 1, conv, 6, 6);
	prefix_drop(&x, 0);
	cr_expect_eq(prefix_usable(&x, 0, conv, 10), 0);
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 6);
	prefix_forget_all(&x);
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 0);
	prefix_keep(&x, 1, conv, 6, 6);
	prefix_keep(&x, 1, conv, 0, 0);
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 0);
	prefix_keep(&x, 1, conv, 9, 9); /* past max_seq = 8 */
	cr_expect_eq(prefix_usable(&x, 1, conv, 10), 0);
	prefix_fini(&x);
	cr_expect_eq(prefix_init(&x, 0, 8, -1, NULL), LM_EINVAL);
}

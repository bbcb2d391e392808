/* Tests of coordinator/supervise/keeper_policy: a keeper's choices, event by event, with the
 * figures keeper_policy.h gives (KEEPER_FAIL_STREAK 5, KEEPER_STABLE_MS 1000, backoff 100 ms
 * doubling to 5000 ms, a start bound of 10 worker_timeouts plus 10 s per GiB of weights). Every expected
 * value is written out by hand from those figures. */
#include <criterion/criterion.h>

#include "coordinator/supervise/keeper_policy.h"

static struct keeper_action on(struct keeper_state *s, enum keeper_event_kind kind, bool served)
{
	return keeper_decide(s, &(struct keeper_event){.kind = kind, .served = served});
}

static struct keeper_action lost(struct keeper_state *s, int64_t up_ms)
{
	return keeper_decide(
		s, &(struct keeper_event){.kind = KEEPER_LOST, .up_ms = up_ms, .served = true});
}

Test(keeper, backoff_doubles_to_its_cap)
{
	cr_expect_eq(keeper_backoff(0), 100);
	cr_expect_eq(keeper_backoff(1), 100);
	cr_expect_eq(keeper_backoff(2), 200);
	cr_expect_eq(keeper_backoff(3), 400);
	cr_expect_eq(keeper_backoff(4), 800);
	cr_expect_eq(keeper_backoff(5), 1600);
	cr_expect_eq(keeper_backoff(6), 3200);
	cr_expect_eq(keeper_backoff(7), 5000);
	cr_expect_eq(keeper_backoff(50), 5000);
}

Test(keeper, start_bound_grows_with_the_slice_and_stops_at_the_handshake)
{
	cr_expect_eq(keeper_start_bound_ms(0, 1000, 120000), 10000);
	cr_expect_eq(keeper_start_bound_ms(181760, 1000, 120000), 10000 + 9); /* 1 MiB */
	cr_expect_eq(keeper_start_bound_ms(1ull << 30, 1000, 120000), 20000);
	cr_expect_eq(keeper_start_bound_ms(8ull << 30, 1000, 120000), 90000);
	cr_expect_eq(keeper_start_bound_ms(8ull << 30, 1000, 60000), 60000);
	cr_expect_eq(keeper_start_bound_ms(0, 1000, 3000), 3000);
	cr_expect_eq(keeper_start_bound_ms(0, 1000, 0), 10000, "no handshake bound: the start's");
	/* A slow mesh's longer worker_timeout lengthens the start too. */
	cr_expect_eq(keeper_start_bound_ms(0, 3000, 120000), 30000);
	cr_expect_eq(keeper_start_bound_ms(1ull << 30, 3000, 120000), 40000);
}

Test(keeper, ready_serves_and_keeps_the_streak_until_it_has_served)
{
	struct keeper_state s = {.failed_starts = 2, .streak = 3, .failed = true};
	struct keeper_action a = on(&s, KEEPER_READY, true);
	cr_expect_eq(a.verdict, KEEPER_SERVE);
	cr_expect_eq(a.state, MESH_WORKER_READY);
	cr_expect_eq(a.streak, 3);
	cr_expect_not(a.restarted);
	cr_expect_eq(s.failed_starts, 0);
	cr_expect_not(s.failed);
	a = on(&s, KEEPER_SERVED, true);
	cr_expect_eq(a.verdict, KEEPER_SERVE);
	cr_expect_eq(a.state, MESH_WORKER_READY);
	cr_expect_eq(a.streak, 0, "served for the stable period: the streak is over");
	cr_expect_eq(s.streak, 0);
}

Test(keeper, quick_losses_lengthen_the_backoff)
{
	struct keeper_state s = {0};
	int64_t want[] = {100, 200, 400, 800, 1600, 3200, 5000, 5000};
	for (int i = 0; i < 8; i++) {
		on(&s, KEEPER_READY, true);
		struct keeper_action a = lost(&s, 300);
		cr_expect_eq(a.verdict, KEEPER_RESTART);
		cr_expect_eq(a.state, MESH_WORKER_DOWN, "a loss after ready is never a failure");
		cr_expect_eq(a.streak, i + 1);
		cr_expect(a.restarted);
		cr_expect_eq(a.backoff_ms, want[i], "loss %d", i + 1);
	}
}

Test(keeper, a_loss_after_serving_a_while_starts_a_new_streak)
{
	struct keeper_state s = {.streak = 4};
	on(&s, KEEPER_READY, true);
	struct keeper_action a = lost(&s, 1000);
	cr_expect_eq(a.streak, 1);
	cr_expect_eq(a.backoff_ms, 100);
	/* The same after KEEPER_SERVED was seen, whatever up_ms says. */
	s.streak = 4;
	on(&s, KEEPER_READY, true);
	on(&s, KEEPER_SERVED, true);
	a = lost(&s, 10);
	cr_expect_eq(a.streak, 1);
	cr_expect_eq(a.backoff_ms, 100);
}

Test(keeper, five_failed_starts_mark_it_failed_and_it_keeps_trying_once_the_mesh_served)
{
	struct keeper_state s = {0};
	int64_t want[] = {100, 200, 400, 800};
	for (int i = 0; i < 4; i++) {
		struct keeper_action a = on(&s, KEEPER_START_FAILED, true);
		cr_expect_eq(a.verdict, KEEPER_RESTART);
		cr_expect_eq(a.state, MESH_WORKER_DOWN);
		cr_expect_not(a.newly_failed);
		cr_expect_eq(a.backoff_ms, want[i]);
		cr_expect_eq(a.streak, i + 1);
	}
	struct keeper_action a = on(&s, KEEPER_START_FAILED, true);
	cr_expect_eq(a.verdict, KEEPER_RESTART);
	cr_expect_eq(a.state, MESH_WORKER_FAILED);
	cr_expect(a.newly_failed);
	cr_expect_eq(a.backoff_ms, 5000, "failed: tried at the capped interval at once");
	cr_expect_eq(s.failed_starts, 5);
	a = on(&s, KEEPER_START_FAILED, true);
	cr_expect_eq(a.state, MESH_WORKER_FAILED);
	cr_expect_not(a.newly_failed, "said once");
	cr_expect_eq(a.backoff_ms, 5000);
	cr_expect_eq(a.streak, 6);
	/* Ready again: no longer failed, and a later failed start counts from 1. */
	a = on(&s, KEEPER_READY, true);
	cr_expect_eq(a.state, MESH_WORKER_READY);
	a = on(&s, KEEPER_START_FAILED, true);
	cr_expect_eq(a.state, MESH_WORKER_DOWN);
	cr_expect_eq(s.failed_starts, 1);
}

Test(keeper, before_the_mesh_served_five_failed_starts_give_up)
{
	struct keeper_state s = {0};
	for (int i = 0; i < 4; i++)
		cr_expect_eq(on(&s, KEEPER_START_FAILED, false).verdict, KEEPER_RESTART);
	struct keeper_action a = on(&s, KEEPER_START_FAILED, false);
	cr_expect_eq(a.verdict, KEEPER_GIVE_UP);
	cr_expect_eq(a.state, MESH_WORKER_FAILED);
	cr_expect(a.newly_failed);
}

Test(keeper, a_refusal_fails_at_once)
{
	struct keeper_state s = {0};
	struct keeper_action a = keeper_decide(
		&s, &(struct keeper_event){
			    .kind = KEEPER_START_FAILED, .refused = true, .served = true});
	cr_expect_eq(a.verdict, KEEPER_RESTART);
	cr_expect_eq(a.state, MESH_WORKER_FAILED);
	cr_expect(a.newly_failed);
	cr_expect_eq(a.backoff_ms, 5000);
	s = (struct keeper_state){0};
	a = keeper_decide(&s, &(struct keeper_event){.kind = KEEPER_START_FAILED,
						     .refused = true,
						     .served = false});
	cr_expect_eq(a.verdict, KEEPER_GIVE_UP, "refused before the mesh served");
}

Test(keeper, a_hung_start_is_a_failed_start)
{
	struct keeper_state s = {0};
	struct keeper_action a = on(&s, KEEPER_START_HUNG, true);
	cr_expect_eq(a.verdict, KEEPER_RESTART);
	cr_expect_eq(a.state, MESH_WORKER_DOWN);
	cr_expect(a.restarted);
	cr_expect_eq(a.backoff_ms, 100);
	cr_expect_eq(s.failed_starts, 1);
	for (int i = 0; i < 3; i++)
		on(&s, KEEPER_START_HUNG, true);
	a = on(&s, KEEPER_START_HUNG, true);
	cr_expect_eq(a.state, MESH_WORKER_FAILED, "five hung starts in a row");
	s = (struct keeper_state){0};
	for (int i = 0; i < 4; i++)
		on(&s, KEEPER_START_HUNG, false);
	cr_expect_eq(on(&s, KEEPER_START_HUNG, false).verdict, KEEPER_GIVE_UP);
}

Test(keeper, hung_and_failed_starts_count_in_one_streak)
{
	struct keeper_state s = {0};
	on(&s, KEEPER_START_FAILED, true);
	on(&s, KEEPER_START_HUNG, true);
	on(&s, KEEPER_START_FAILED, true);
	on(&s, KEEPER_START_HUNG, true);
	struct keeper_action a = on(&s, KEEPER_START_FAILED, true);
	cr_expect_eq(a.state, MESH_WORKER_FAILED);
	cr_expect_eq(a.streak, 5);
}

Test(keeper, a_crash_loop_that_ends_shows_no_streak)
{
	/* Twelve quick deaths, then it serves for the stable period: 0, not 12. */
	struct keeper_state s = {0};
	for (int i = 0; i < 12; i++) {
		on(&s, KEEPER_READY, true);
		lost(&s, 50);
	}
	cr_expect_eq(s.streak, 12);
	cr_expect_eq(on(&s, KEEPER_READY, true).streak, 12);
	cr_expect_eq(on(&s, KEEPER_SERVED, true).streak, 0);
}

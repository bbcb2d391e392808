/* Tests of coordinator/supervise/rollout_steps: every transition of a redeploy's batch, and
 * the rollback from each step, as rollout_steps.h lists them. */
#include <criterion/criterion.h>
#include <string.h>

#include "coordinator/supervise/rollout_steps.h"

#define ALL_UNDO (RO_UNDO_UNPOINT | RO_UNDO_RESUME | RO_UNDO_DROP)

static void expect(enum ro_step at, enum ro_outcome o, bool last, enum ro_step step, unsigned undo)
{
	struct ro_next n = rollout_next(at, o, last);
	cr_expect_eq(n.step, step, "from %s, outcome %d: step %d, want %d", rollout_step_name(at),
		     o, n.step, step);
	cr_expect_eq(n.undo, undo, "from %s, outcome %d: undo %u, want %u", rollout_step_name(at),
		     o, n.undo, undo);
}

Test(rollout, each_step_leads_to_the_next)
{
	expect(RO_PREPARE, RO_OK, false, RO_PROBE, 0);
	expect(RO_PROBE, RO_OK, false, RO_SMOKE, 0);
	expect(RO_SMOKE, RO_OK, false, RO_PAUSE, 0);
	expect(RO_PAUSE, RO_OK, false, RO_MOVE, 0);
	expect(RO_MOVE, RO_OK, false, RO_SWITCH, 0);
	expect(RO_SWITCH, RO_OK, false, RO_RETIRE, 0);
}

Test(rollout, retire_leads_to_the_next_batch_or_done)
{
	expect(RO_RETIRE, RO_OK, false, RO_PREPARE, 0);
	expect(RO_RETIRE, RO_OK, true, RO_DONE, 0);
	/* The last batch only decides at its end. */
	expect(RO_PREPARE, RO_OK, true, RO_PROBE, 0);
	expect(RO_SWITCH, RO_OK, true, RO_RETIRE, 0);
}

Test(rollout, a_whole_rollout_of_three_batches)
{
	enum ro_step want[] = {RO_PROBE, RO_SMOKE, RO_PAUSE, RO_MOVE, RO_SWITCH, RO_RETIRE};
	int batches = 0;
	for (int b = 0; b < 3; b++) {
		enum ro_step s = RO_PREPARE;
		for (int i = 0; i < 6; i++) {
			s = rollout_next(s, RO_OK, b == 2).step;
			cr_assert_eq(s, want[i], "batch %d, step %d", b, i);
		}
		s = rollout_next(s, RO_OK, b == 2).step;
		cr_assert_eq(s, b == 2 ? RO_DONE : RO_PREPARE);
		batches++;
	}
	cr_expect_eq(batches, 3);
}

Test(rollout, rollback_from_each_step)
{
	/* Before the pause only the candidates exist; a quiesce that fails resumes by itself. */
	expect(RO_PREPARE, RO_ERROR, false, RO_FAILED, RO_UNDO_DROP);
	expect(RO_PROBE, RO_ERROR, false, RO_FAILED, RO_UNDO_DROP);
	expect(RO_SMOKE, RO_ERROR, false, RO_FAILED, RO_UNDO_DROP);
	expect(RO_PAUSE, RO_ERROR, false, RO_FAILED, RO_UNDO_DROP);
	/* Paused: the scheduler resumes; re-pointed: the predecessors point back. */
	expect(RO_MOVE, RO_ERROR, false, RO_FAILED, RO_UNDO_RESUME | RO_UNDO_DROP);
	expect(RO_SWITCH, RO_ERROR, false, RO_FAILED, ALL_UNDO);
	/* Switched: the new build serves, nothing to undo. */
	expect(RO_RETIRE, RO_ERROR, false, RO_FAILED, 0);
	/* The same in the last batch. */
	expect(RO_SWITCH, RO_ERROR, true, RO_FAILED, ALL_UNDO);
}

Test(rollout, a_keeper_fault_mid_rollout_rolls_back_like_an_error)
{
	enum ro_step steps[] = {RO_PREPARE, RO_PROBE, RO_SMOKE, RO_PAUSE, RO_MOVE, RO_SWITCH};
	for (int i = 0; i < 6; i++)
		for (enum ro_outcome o = RO_FAULT; o <= RO_STOPPING; o++) {
			struct ro_next fault = rollout_next(steps[i], o, false);
			struct ro_next error = rollout_next(steps[i], RO_ERROR, false);
			cr_expect_eq(fault.step, RO_FAILED);
			cr_expect_eq(fault.undo, error.undo, "%s, outcome %d",
				     rollout_step_name(steps[i]), o);
		}
	expect(RO_SMOKE, RO_FAULT, false, RO_FAILED, RO_UNDO_DROP);
	expect(RO_MOVE, RO_FAULT, true, RO_FAILED, RO_UNDO_RESUME | RO_UNDO_DROP);
	expect(RO_SWITCH, RO_STOPPING, false, RO_FAILED, ALL_UNDO);
}

Test(rollout, the_ends_stay)
{
	expect(RO_DONE, RO_OK, true, RO_DONE, 0);
	expect(RO_DONE, RO_ERROR, true, RO_DONE, 0);
	expect(RO_FAILED, RO_OK, false, RO_FAILED, 0);
	expect(RO_FAILED, RO_FAULT, false, RO_FAILED, 0);
}

Test(rollout, steps_are_named_as_the_status_names_them)
{
	cr_expect_str_eq(rollout_step_name(RO_PREPARE), "prepare");
	cr_expect_str_eq(rollout_step_name(RO_PROBE), "probe");
	cr_expect_str_eq(rollout_step_name(RO_SMOKE), "smoke");
	cr_expect_str_eq(rollout_step_name(RO_PAUSE), "switch");
	cr_expect_str_eq(rollout_step_name(RO_MOVE), "switch");
	cr_expect_str_eq(rollout_step_name(RO_SWITCH), "switch");
	cr_expect_str_eq(rollout_step_name(RO_RETIRE), "retire");
	cr_expect_str_eq(rollout_step_name(RO_DONE), "done");
	cr_expect_str_eq(rollout_step_name(RO_FAILED), "failed");
}

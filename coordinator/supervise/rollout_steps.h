/* rollout_steps.h — the steps of one batch of a redeploy (rollout.h), as a function of the step
 * it is at and how that step went (rollout.c runs it; tests/unit/test_rollout.c calls it
 * directly).
 *
 *   prepare -> probe -> smoke -> pause -> move -> switch -> retire -> (the next batch's
 *   prepare, or done)
 *
 * A step that fails (an error, a worker fault a keeper reported, the mesh stopping) ends the
 * rollout, failed, after undoing what the batch changed so far, last change first: the
 * predecessors pointed back at the old processes (after switch's re-pointing), the scheduler
 * resumed (after pause quiesced it), the candidates stopped (after prepare started them). The
 * old build serves on. Once a batch has switched, its new processes serve: retire cannot be
 * undone. */
#ifndef LM_ROLLOUT_STEPS_H
#define LM_ROLLOUT_STEPS_H

#include <stdbool.h>

enum ro_step {
	RO_PREPARE, /* start the candidates, HELLO, ASSIGN (a private sink), READY */
	RO_PROBE,   /* the fixed prompt through the live mesh, every worker tracing it */
	RO_SMOKE,   /* the recorded input into each candidate, its layers against the record */
	RO_PAUSE,   /* quiesce the ring at a step boundary */
	RO_MOVE,    /* every live sequence's KV rows from the old processes to the new */
	RO_SWITCH,  /* re-point the ring through the new processes, commit them, resume */
	RO_RETIRE,  /* stop the old processes */
	RO_DONE,
	RO_FAILED,
};

enum ro_outcome {
	RO_OK,
	RO_ERROR,    /* the step failed */
	RO_FAULT,    /* a worker of the mesh is away (its keeper is bringing it back) */
	RO_STOPPING, /* the mesh is stopping */
};

/* What the rollback must undo (in this order). */
#define RO_UNDO_UNPOINT 1u /* point the batch's predecessors back at the old processes */
#define RO_UNDO_RESUME  2u /* resume the scheduler */
#define RO_UNDO_DROP    4u /* stop the candidates */

struct ro_next {
	enum ro_step step;
	unsigned undo; /* RO_UNDO_* (only with RO_FAILED) */
};

/* The step after `at` ended with outcome o; last: this batch is the rollout's last. */
struct ro_next rollout_next(enum ro_step at, enum ro_outcome o, bool last);
/* The step as GET /v1/admin/redeploy names it (pause, move and switch are one: "switch"). */
const char *rollout_step_name(enum ro_step s);

#endif

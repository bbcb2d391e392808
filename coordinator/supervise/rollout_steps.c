/* rollout_steps.c — the steps of a redeploy's batch. See rollout_steps.h. */
#include "coordinator/supervise/rollout_steps.h"

struct ro_next rollout_next(enum ro_step at, enum ro_outcome o, bool last)
{
	/* What has to be undone when a step fails: everything done before it in the batch. */
	static const unsigned undo[] = {
		[RO_PREPARE] = RO_UNDO_DROP, /* the candidates started so far */
		[RO_PROBE] = RO_UNDO_DROP,
		[RO_SMOKE] = RO_UNDO_DROP,
		[RO_PAUSE] = RO_UNDO_DROP, /* a quiesce that fails resumes by itself */
		[RO_MOVE] = RO_UNDO_RESUME | RO_UNDO_DROP,
		[RO_SWITCH] = RO_UNDO_UNPOINT | RO_UNDO_RESUME | RO_UNDO_DROP,
		[RO_RETIRE] = 0, /* the new processes serve */
	};
	if (at == RO_DONE || at == RO_FAILED)
		return (struct ro_next){at, 0};
	if (o != RO_OK)
		return (struct ro_next){RO_FAILED, undo[at]};
	if (at == RO_RETIRE)
		return (struct ro_next){last ? RO_DONE : RO_PREPARE, 0};
	return (struct ro_next){(enum ro_step)(at + 1), 0};
}

const char *rollout_step_name(enum ro_step s)
{
	static const char *const names[] = {
		[RO_PREPARE] = "prepare", [RO_PROBE] = "probe", [RO_SMOKE] = "smoke",
		[RO_PAUSE] = "switch",    [RO_MOVE] = "switch", [RO_SWITCH] = "switch",
		[RO_RETIRE] = "retire",   [RO_DONE] = "done",   [RO_FAILED] = "failed",
	};
	return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

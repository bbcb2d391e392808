/* keeper_policy.c — a keeper's choices. See keeper_policy.h. */
#include "coordinator/supervise/keeper_policy.h"

int64_t keeper_backoff(int streak)
{
	int64_t b = (int64_t)KEEPER_BACKOFF_MIN_MS << (streak < 1    ? 0
						       : streak < 10 ? streak - 1
								     : 9);
	return b < KEEPER_BACKOFF_MAX_MS ? b : KEEPER_BACKOFF_MAX_MS;
}

int64_t keeper_start_bound_ms(uint64_t weight_bytes, int worker_timeout_ms, int handshake_ms)
{
	/* Per started MiB, so that a slice of a few MiB adds almost nothing. */
	uint64_t mib = (weight_bytes + (1u << 20) - 1) >> 20;
	int64_t bound = (int64_t)KEEPER_START_TIMEOUTS * worker_timeout_ms +
			(int64_t)(mib * KEEPER_START_PER_GIB_MS / 1024);
	return handshake_ms > 0 && handshake_ms < bound ? handshake_ms : bound;
}

/* A restart after a loss or a failed start: failed, or only down. */
static struct keeper_action keeper_restart(struct keeper_state *s, bool fail_now, bool served)
{
	struct keeper_action a = {.verdict = KEEPER_RESTART,
				  .state = MESH_WORKER_DOWN,
				  .streak = s->streak,
				  .restarted = true,
				  .backoff_ms = keeper_backoff(s->streak)};
	if (fail_now || s->failed) {
		a.state = MESH_WORKER_FAILED;
		a.newly_failed = !s->failed;
		s->failed = true;
		/* A failed worker is tried at the capped interval at once, not after the doubling
		 * reaches it: that is the interval the log line promises. */
		a.backoff_ms = KEEPER_BACKOFF_MAX_MS;
		if (!served)
			a.verdict = KEEPER_GIVE_UP;
	}
	return a;
}

struct keeper_action keeper_decide(struct keeper_state *s, const struct keeper_event *e)
{
	switch (e->kind) {
	case KEEPER_READY:
		s->failed_starts = 0;
		s->failed = false;
		return (struct keeper_action){
			.verdict = KEEPER_SERVE, .state = MESH_WORKER_READY, .streak = s->streak};
	case KEEPER_SERVED:
		s->streak = 0;
		return (struct keeper_action){
			.verdict = KEEPER_SERVE, .state = MESH_WORKER_READY, .streak = 0};
	case KEEPER_LOST:
		/* A worker that served for a while starts a new streak (KEEPER_SERVED may not
		 * have been seen: a keeper's thread can be starved). */
		s->streak = (e->up_ms >= KEEPER_STABLE_MS ? 0 : s->streak) + 1;
		return keeper_restart(s, false, e->served);
	case KEEPER_START_FAILED:
	case KEEPER_START_HUNG:
		break;
	}
	s->failed_starts++;
	s->streak++;
	bool refused = e->kind == KEEPER_START_FAILED && e->refused;
	return keeper_restart(s, refused || s->failed_starts >= KEEPER_FAIL_STREAK, e->served);
}

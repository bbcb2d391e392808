/* keeper_policy.h — a keeper's choices, as functions of its state and what just happened
 * (keeper.c runs them; tests/unit/test_keeper.c calls them directly).
 *
 *   restart    a worker lost after it served, or a start that failed, is started again after
 *              a backoff: KEEPER_BACKOFF_MIN_MS doubling to KEEPER_BACKOFF_MAX_MS while it dies
 *              soon after each start, back to the minimum once it served for KEEPER_STABLE_MS
 *   mark hung  a started process that is not ready within keeper_start_bound_ms of its spawn
 *              is a failed start like any other (the keeper kills it with SIGKILL)
 *   give up    KEEPER_FAIL_STREAK starts in a row that never got ready, or one refused for
 *              another slice than the mesh serves (its fingerprint or digest: trying again
 *              soon will not change the file), mark it failed. Before the mesh has served,
 *              that ends `layermesh up` with the reason; afterwards the mesh says why and
 *              fails requests fast, and the keeper goes on trying every
 *              KEEPER_BACKOFF_MAX_MS until it is ready again
 *   streak     `restarts` (workers.h) is the current streak: the restarts since the worker
 *              last served for KEEPER_STABLE_MS; it falls to 0 once it has
 */
#ifndef LM_KEEPER_POLICY_H
#define LM_KEEPER_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/supervise/workers.h"

#define KEEPER_FAIL_STREAK    5
#define KEEPER_STABLE_MS      1000
#define KEEPER_BACKOFF_MIN_MS 100
#define KEEPER_BACKOFF_MAX_MS 5000
/* The start bound: KEEPER_START_TIMEOUTS liveness timeouts ([coordinator] worker_timeout, 1 s
 * by default: 10 s) for the process to start and answer, and time per GiB of its slice's
 * weights to map and read them. Generous (a cold disk, a loaded machine); a mesh whose
 * machines are slow enough to need a longer worker_timeout gets a longer start as well. */
#define KEEPER_START_TIMEOUTS   10
#define KEEPER_START_PER_GIB_MS 10000

enum keeper_event_kind {
	KEEPER_READY,        /* its handshake succeeded: it serves */
	KEEPER_SERVED,       /* it has served for KEEPER_STABLE_MS since it was ready */
	KEEPER_LOST,         /* it was lost after it was ready (exited, silent, stuck) */
	KEEPER_START_FAILED, /* a start failed before ready: ended, refused, timed out */
	KEEPER_START_HUNG,   /* not ready within its start bound */
};

struct keeper_event {
	enum keeper_event_kind kind;
	int64_t up_ms; /* KEEPER_LOST: how long it had been ready */
	bool refused;  /* KEEPER_START_FAILED: another model or slice than the mesh serves */
	bool served;   /* the mesh has served (its bring-up is over) */
};

/* What a keeper carries from one event to the next; zeroed at its start. */
struct keeper_state {
	int failed_starts; /* starts in a row that never got ready */
	int streak;        /* restarts since it last served for KEEPER_STABLE_MS */
	bool failed;       /* reported failed */
};

enum keeper_verdict {
	KEEPER_SERVE,   /* it serves: report `state`, keep watching */
	KEEPER_RESTART, /* kill what is left, report `state`, wait backoff_ms, start again */
	KEEPER_GIVE_UP, /* stop the mesh with the reason: it has never served */
};

struct keeper_action {
	enum keeper_verdict verdict;
	enum mesh_worker_state state; /* what the worker table shows */
	int streak;                   /* the table's `restarts` */
	bool restarted;               /* one more restart (restarts_total) */
	bool newly_failed;            /* it has just been given up on: say so once */
	int64_t backoff_ms;           /* KEEPER_RESTART: the wait before the next start */
};

/* The next state of a keeper in *s, and what it does, after event e. */
struct keeper_action keeper_decide(struct keeper_state *s, const struct keeper_event *e);
/* The wait before restart number `streak` of a streak of quick deaths (1, 2, ...). */
int64_t keeper_backoff(int streak);
/* How long a spawned worker with weight_bytes of weights may take to be ready: the start
 * bound for a mesh of worker_timeout_ms, never past the handshake's own (handshake_ms; 0:
 * none). */
int64_t keeper_start_bound_ms(uint64_t weight_bytes, int worker_timeout_ms, int handshake_ms);

#endif

/* workers.h — the worker table: what the coordinator knows of each worker while the mesh runs
 * (its state, why, its process id, where it listens, the program it runs, its restart streak
 * and counters, its last READY and its slice's digest, its ring progress).
 *
 * A worker is named by its index j in mesh.toml's order, 0 <= j < facts->n_workers. The table
 * is written by the keepers (keeper.c), the process supervision (procs.c) and the rollouts
 * (rollout.c), and read by them and by the status endpoints; every call copies in or out under
 * the table's own mutex, so none hands out a pointer into it.
 *
 * The listener: the module that composes the mesh (mesh.c) registers one function at init,
 * which the table calls after every change of a worker's state, with a summary of all of them,
 * holding the table's mutex (so the summaries it sees are in the order the changes were made).
 * It is a down-call interface that the table owns: the listener may use the scheduler and the
 * API, and must not call back into the table. It answers with the scheduler once the mesh
 * serves, which the table hands to keepers and rollouts (workers_sched).
 *
 * Lock order of the coordinator, stated here and nowhere else (each lock is taken and released
 * in the module that owns it; a module calls only into modules below it in this list while it
 * holds its own):
 *   1. a rollouts' mu (rollout.h)
 *   2. the process supervision's mu (procs.c)
 *   3. this table's mu
 *   4. the mesh's service mu (mesh.c; taken by the listener and by the stop hook)
 *   5. the scheduler's own locks (scheduler.c)
 *   and, alone, the stop request's mu (procs.c), which is taken holding any of the above.
 */
#ifndef LM_WORKERS_H
#define LM_WORKERS_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"
#include "coordinator/supervise/facts.h"

struct sched;

enum mesh_worker_state {
	MESH_WORKER_STARTING = 0, /* first start: spawning or handshaking */
	MESH_WORKER_READY = 1,    /* assigned and serving */
	MESH_WORKER_DOWN = 2,     /* lost; the keeper is bringing it back */
	MESH_WORKER_FAILED = 3,   /* given up on: see why */
};

/* Where one process of a worker listens: the configured addresses, or their alternates (a
 * redeploy moves a worker from one to the other). */
struct mesh_addrs {
	char data[256], control[256], http[256];
};

/* The data ring's progress at a worker, as its STATUS said (the keepers' progress check). */
struct mesh_progress {
	uint64_t in, out; /* ids of the last ring message it took, and passed on */
	int64_t busy_ms;  /* how long the message in hand has been (0: none) */
	int64_t send_ms;  /* of which it has been handing it to its successor */
	int32_t queued;   /* messages waiting */
	int64_t at_ms;    /* when it was read (lm_now_ms); 0: never */
};

/* One worker, as a copy of the table's row. */
struct worker_info {
	enum mesh_worker_state state;
	int pid;      /* of its serving process (spawn mode), or as its HELLO said (0: not yet) */
	int restarts; /* the current streak: restarts since it last served for a while (keeper.c) */
	uint64_t restarts_total; /* every restart since the mesh came up */
	struct wire_ready ready; /* its last READY */
	uint64_t digest;         /* of its slice as the mesh first served it (0: not yet) */
	char why[512];           /* why it is not ready, or how its last process ended */
	struct mesh_addrs at;    /* where its serving process listens */
	char bin[PATH_MAX];      /* the program a (re)start runs (a redeploy changes it) */
	struct mesh_progress progress;
};

/* A change to worker j's row: each field left at its zero value keeps what the row holds. */
struct worker_update {
	bool set_state;
	enum mesh_worker_state state;
	const char *why; /* NULL: keep */
	int pid;         /* 0: keep */
	bool set_restarts;
	int restarts;                   /* the streak */
	bool restarted;                 /* one more restart: restarts_total grows by one */
	const struct wire_ready *ready; /* NULL: keep */
	const struct mesh_progress *progress;
	const struct mesh_addrs *at; /* a redeploy's switch: where it listens now, */
	const char *bin;             /* and the program it runs */
	/* Its serving process ended when nothing expected it (procs.c): why is how; a worker
	 * that was ready is down from now on (logged), one that was starting keeps its state. */
	bool lost;
};

/* What the listener sees after a change. */
struct workers_summary {
	int32_t n;
	const enum mesh_worker_state *state; /* [n] */
	int32_t failed;                      /* the first failed worker, or -1 */
	int32_t away;                        /* the first worker neither ready nor failed, or -1 */
	const char *why_failed, *why_away;   /* their why ("" when none) */
};

struct workers_listener {
	struct sched *(*changed)(void *ctx, const struct workers_summary *s);
	void *ctx;
};

struct worker_row;

struct workers {
	const struct mesh_facts *f;
	struct workers_listener listener;
	pthread_mutex_t mu;
	struct worker_row *rows;     /* [f->n_workers], under mu */
	enum mesh_worker_state *now; /* [f->n_workers], the summary's, under mu */
	struct sched *sched;         /* under mu: set once, when the mesh starts serving */
};

/* On caller-owned memory: every worker starting at its configured addresses, running bin.
 * LM_ENOMEM. */
int workers_init(struct workers *ws, const struct mesh_facts *f, const char *bin,
		 const struct workers_listener *listener, lm_diag *d);
/* Harmless on a zeroed table. */
void workers_fini(struct workers *ws);

/* Applies u to worker j's row; calls the listener when u sets or changes the state. */
void workers_update(struct workers *ws, int32_t j, const struct worker_update *u);
/* Worker j's row; every row at one instant (out holds n_workers entries). */
void workers_get(struct workers *ws, int32_t j, struct worker_info *out);
void workers_get_all(struct workers *ws, struct worker_info *out);
/* Holds worker j's slice to what the mesh first served: the first READY's digest is recorded,
 * every later one (a restart, a redeploy's candidate) must equal it. LM_EFINGERPRINT naming
 * both values when it does not. */
int workers_check_digest(struct workers *ws, int32_t j, uint64_t digest, lm_diag *d);
/* The scheduler once the mesh serves (NULL before). Borrowed: it lives until mesh_up ends,
 * after the keepers and the rollouts are joined. When every is true, only while every worker
 * is ready as well (a redeploy may start). */
struct sched *workers_sched(struct workers *ws, bool every);

#endif

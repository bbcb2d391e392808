/* keeper.h — one thread per worker that brings it up and keeps it up (the steps: keeper.c;
 * its choices: keeper_policy.h).
 *
 * The mesh owns one struct keeper per worker. A keeper reads the mesh's facts, and calls down
 * into the worker table (workers.h), the process supervision (procs.h) and the scheduler;
 * nothing else. */
#ifndef LM_KEEPER_H
#define LM_KEEPER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "coordinator/supervise/ctl.h"
#include "coordinator/supervise/facts.h"

struct procs;
struct workers;

struct keeper {
	const struct mesh_facts *f;
	struct workers *ws;
	struct procs *pr;
	int32_t j; /* the worker it keeps */
	pthread_t thread;
	bool started;
	struct ctl_conn ctl;    /* the keeper thread's alone */
	int64_t start_deadline; /* a starting process must be ready by then (0: no bound) */
};

/* Starts the keeper of worker j on caller-owned memory (zeroed or finished). LM_EOS when no
 * thread could be started. */
int keeper_start(struct keeper *k, const struct mesh_facts *f, struct workers *ws, struct procs *pr,
		 int32_t j);
/* Waits for the thread to end, once the mesh is stopping (its waits return then). Harmless
 * on a keeper never started. */
void keeper_stop(struct keeper *k);
/* Closes its control connection, after keeper_stop. Harmless on NULL or a zeroed keeper. */
void keeper_fini(struct keeper *k);

#endif

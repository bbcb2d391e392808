/* keeper.h — one thread per worker that brings it up and keeps it up (the steps: keeper.c).
 *
 * The mesh owns one struct keeper per worker; the keeper reaches the mesh only through
 * mesh_ops.h. */
#ifndef LM_KEEPER_H
#define LM_KEEPER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "coordinator/supervise/ctl.h"

struct mesh;

struct keeper {
	struct mesh *m;
	int32_t j; /* the worker it keeps */
	pthread_t thread;
	bool started;
	struct ctl_conn ctl; /* the keeper thread's alone */
};

/* Starts the keeper of worker j of m on caller-owned memory (zeroed or finished). LM_EOS when
 * no thread could be started. */
int keeper_start(struct keeper *k, struct mesh *m, int32_t j);
/* Waits for the thread to end, once the mesh is stopping (its waits return then). Harmless
 * on a keeper never started. */
void keeper_stop(struct keeper *k);
/* Closes its control connection, after keeper_stop. Harmless on NULL or a zeroed keeper. */
void keeper_fini(struct keeper *k);

#endif

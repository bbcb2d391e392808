/* rollout_impl.h — what rollout.c (a redeploy's thread and its steps) and rollout_request.c
 * (the requests that start one, and its status) share. Internal to the rollouts. */
#ifndef LM_ROLLOUT_IMPL_H
#define LM_ROLLOUT_IMPL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "coordinator/supervise/rollout.h"
#include "coordinator/supervise/workers.h"

enum ro_worker_state { RW_UNTOUCHED, RW_PENDING, RW_WORKING, RW_DONE, RW_FAILED };

struct ro_worker {
	enum ro_worker_state state;
	char step[32];
	double pause_ms;
	char error[512];
	char from[256], to[256]; /* data addresses before and after */
};

struct rollout {
	struct rollouts *rs; /* whose mu guards the status below */
	pthread_t thread;
	bool joined;  /* by rollout_stop (the mesh's thread alone) */
	bool running; /* under rs->mu */
	char bin[PATH_MAX];
	double tolerance;
	int32_t *order; /* worker indices, canary first */
	int32_t n_order;
	int32_t batch; /* workers per batch after the canary */
	/* Status, under rs->mu. */
	char state[16]; /* "running", then "succeeded" or "failed" (shown once running is false) */
	char failed_step[32];
	char error[600];
	int32_t failed_worker;
	double max_pause_ms;
	int64_t moved_seqs;   /* sequences whose KV rows moved to a new process, and were */
	uint64_t moved_bytes; /* read back from it bit for bit (ro_move_kv), and their bytes */
	int64_t started_ms, finished_ms;
	struct ro_worker *w; /* [mesh_n_workers] */
	char sink[200];      /* where candidates send during their smoke test */
	char dir[128];
};

/* Worker j's name, and where its serving process listens now. */
const char *ro_name(const struct rollouts *rs, int32_t j);
void ro_addrs(struct rollouts *rs, int32_t j, struct mesh_addrs *out);
/* The other address of a worker's pair (rollout.h): primary as configured, current where it
 * listens now. */
int ro_alternate(const char *primary, const char *current, char *out, size_t cap, lm_diag *d);
/* A rollout's thread (arg: its struct rollout). */
void *ro_main(void *arg);

#endif

/* mesh_impl.h — the coordinator's mesh, shared by mesh.c (bring-up, the libuv loop, the
 * endpoints) and keeper.c (one keeper thread per worker: handshake, heartbeat, restart).
 *
 * Locking: `mu` guards every field marked "under mu" in struct mesh_proc and the service flags
 * of struct mesh; `cv` is broadcast on every change to them (a process exit, a spawn result,
 * stopping), so a keeper waits on it instead of polling. Lock order: mesh mu, then the
 * scheduler's own lock (sched_* calls may be made holding mu). */
#ifndef LM_MESH_IMPL_H
#define LM_MESH_IMPL_H

#include <limits.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/fence.h"
#include "common/gguf.h"
#include "common/mesh_config.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "common/wire.h"
#include "coordinator/api.h"
#include "coordinator/mesh.h"
#include "coordinator/scheduler.h"

/* A worker may restart this many times in a row (each start that does not stay up for
 * KEEPER_STABLE_MS counts) before the coordinator gives up on it. */
#define KEEPER_RESTART_BUDGET 5
#define KEEPER_STABLE_MS      10000
#define KEEPER_BACKOFF_MIN_MS 100
#define KEEPER_BACKOFF_MAX_MS 5000
/* Workers the coordinator did not spawn are watched by HELLO heartbeats. */
#define KEEPER_HEARTBEAT_MS     250
#define KEEPER_HEARTBEAT_MISSES 3

enum proc_state {
	PROC_STARTING = 0, /* first start: spawning or handshaking */
	PROC_READY = 1,    /* assigned and serving */
	PROC_DOWN = 2,     /* lost; the keeper is bringing it back */
	PROC_FAILED = 3,   /* given up on: see why */
};

struct mesh;

struct mesh_proc {
	struct mesh *mesh;
	const struct mesh_worker *cfg;
	int32_t index;
	pthread_t keeper;
	bool keeper_started;
	/* Control socket: the keeper thread's alone. */
	nng_socket ctl;
	bool ctl_open;
	/* Under mu. */
	uv_process_t proc;    /* valid while `running` (spawn mode) */
	bool running;         /* the spawned process has not been reaped */
	bool spawn_requested; /* the keeper asks the loop thread to spawn */
	int spawn_rc;         /* the answer (0 or an LM_E* code), valid when !spawn_requested */
	int pid;
	int state;     /* enum proc_state */
	int restarts;  /* starts since the worker last stayed up */
	char why[512]; /* the last failure */
	struct wire_ready ready;
};

struct mesh {
	const struct mesh_opts *o;
	struct mesh_config cfg;
	gguf_file *file; /* the model's metadata: tokenizer and fingerprint */
	struct lm_hparams hp;
	uint64_t fingerprint;
	int32_t max_seq;
	char model_name[128];
	struct fence_plan plan;
	tok_vocab *vocab;
	char worker_bin[PATH_MAX];

	uv_loop_t loop;
	uv_signal_t sig_int, sig_term;
	uv_async_t spawn_async; /* keepers asking the loop thread to spawn */
	uv_async_t stop_async;  /* anyone asking the loop to stop the mesh */
	uv_timer_t stop_timer;
	int32_t alive; /* spawned processes not yet reaped (loop thread) */

	struct mesh_proc *procs;
	int32_t n_procs;
	nng_socket push, pull;
	bool push_open, pull_open;
	struct sched *sched;
	struct api *api;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic bool stopping;
	/* Under mu. */
	bool serving;   /* every worker has been ready at least once */
	bool had_fault; /* a worker went down after serving: KV must be rebuilt */
	bool available; /* the scheduler accepts work (no worker given up on) */
	/* Under stop_mu (taken alone: mesh_request_stop may be called holding mu). */
	pthread_mutex_t stop_mu;
	char stop_why[512];
	int exit_status;
};

/* keeper.c */
int keeper_start(struct mesh *m, struct mesh_proc *p);
/* Waits for the keeper thread (after `stopping` was set and cv broadcast). */
void keeper_join(struct mesh_proc *p);
/* Recomputes what the scheduler and /readyz should see from every worker's state; under mu. */
void mesh_update_service(struct mesh *m);

/* mesh.c */
/* Asks the loop thread to stop the mesh (from any thread). */
void mesh_request_stop(struct mesh *m, const char *why, int exit_status);
/* Starts the data plane, the scheduler and the API when every worker is first ready (from
 * mesh_update_service, under mu, once). */
int mesh_start_serving(struct mesh *m, lm_diag *d);

#endif

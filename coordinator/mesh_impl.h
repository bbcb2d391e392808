/* mesh_impl.h — the coordinator's mesh, shared by mesh.c (bring-up, the libuv loop, the
 * endpoints) and keeper.c (one keeper thread per worker: handshake, heartbeat, restart).
 *
 * Locking: `mu` guards every field marked "under mu" in struct mesh_proc and the service flags
 * of struct mesh; `cv` is broadcast on every change to them (a process exit, a spawn result,
 * stopping), so a keeper waits on it instead of polling. Lock order: the rollouts' mu
 * (rollout.h), then mesh mu, then the scheduler's own lock (sched_* calls may be made holding
 * mu). */
#ifndef LM_MESH_IMPL_H
#define LM_MESH_IMPL_H

#include <limits.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/plan/fence.h"
#include "common/format/gguf.h"
#include "common/format/mesh_config.h"
#include "common/model/hparams.h"
#include "common/tok/tokenizer.h"
#include "common/wire/wire.h"
#include "coordinator/api.h"
#include "coordinator/ctl.h"
#include "coordinator/mesh.h"
#include "coordinator/rollout.h"
#include "coordinator/scheduler.h"

/* Every worker holds one KV slot more than [model] slots: the probe slot, where smoke tests of
 * redeploys run without touching a live sequence. */
#define MESH_PROBE_SLOTS 1

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
struct mesh_proc;

/* One process of a worker: the serving one, or a replacement a rollout is starting beside it.
 * Children are never freed before the mesh is: threads may still look at one after it exited. */
struct mesh_child {
	struct mesh_proc *p; /* the worker it serves or is meant to serve */
	uv_process_t proc;
	/* Under mu. */
	bool running;  /* not yet reaped */
	bool retiring; /* its exit is expected (replaced, or a rolled-back candidate) */
	int pid;
	char why[256];           /* how it ended */
	struct mesh_child *next; /* every child of the mesh */
};

struct mesh_proc {
	struct mesh *mesh;
	const struct mesh_worker *cfg;
	int32_t index;
	pthread_t keeper;
	bool keeper_started;
	struct ctl_conn ctl; /* the keeper thread's alone */
	/* Under mu. */
	struct mesh_child *child; /* the serving process (spawn mode), or NULL */
	char bin[PATH_MAX];       /* the program a (re)start runs: a redeploy changes it */
	char data[256], control[256], http[256]; /* where the serving process listens */
	bool spawn_requested;
	int spawn_rc;
	int pid;
	int state; /* enum proc_state */
	int restarts;
	char why[512];
	struct wire_ready ready;
};

struct mesh {
	const struct mesh_opts *o;
	struct mesh_config cfg;
	struct lm_tls tls; /* the [tls] files, for every tls+tcp:// address */
	gguf_file *file;   /* the model's metadata: tokenizer and fingerprint */
	struct lm_hparams hp;
	uint64_t fingerprint;
	int32_t max_seq;
	char model_name[128];
	struct fence_plan plan;
	tok_vocab *vocab;
	char worker_bin[PATH_MAX];

	uv_loop_t loop;
	uv_signal_t sig_int, sig_term;
	uv_async_t spawn_async; /* keepers and rollouts asking the loop thread to spawn */
	uv_async_t stop_async;  /* anyone asking the loop to stop the mesh */
	uv_timer_t stop_timer;
	struct mesh_child *children; /* under mu */
	/* Spawn requests from other threads, under mu: the loop thread answers them. */
	struct mesh_spawn *spawns;

	struct mesh_proc *procs;
	int32_t n_procs;
	nng_socket push, pull;
	nng_dialer push_dialer; /* to the first worker; a redeploy of it re-points it */
	bool push_open, pull_open;
	struct sched *sched;
	struct api *api;
	struct rollouts ro; /* its own lock */

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

/* A request to start a process, answered by the loop thread. */
struct mesh_spawn {
	struct mesh_proc *p;
	const char *bin, *data, *control, *http;
	bool done;
	int rc;
	char why[512];
	struct mesh_child *child;
	struct mesh_spawn *next;
};

/* mesh.c */
/* Starts a worker process for p (from any thread but the loop's) with the given program and
 * addresses, and waits for the answer. *child is the new process, owned by the mesh. */
int mesh_spawn_child(struct mesh *m, struct mesh_proc *p, const char *bin, const char *data,
		     const char *control, const char *http, struct mesh_child **child, lm_diag *d);
/* Sends sig to a running child (any thread; under mu or not). */
void mesh_kill_child(struct mesh *m, struct mesh_child *c, int sig);
/* Whether a child is still running (takes mu). */
bool mesh_child_running(struct mesh *m, struct mesh_child *c);

/* keeper.c */
/* The ASSIGN worker j gets (its slice, its successor's current address); under mu. */
void mesh_assignment(struct mesh *m, int32_t j, struct wire_assign *a);
int keeper_start(struct mesh *m, struct mesh_proc *p);
/* Waits for the keeper thread (after `stopping` was set and cv broadcast). */
void keeper_join(struct mesh_proc *p);
/* Recomputes what the scheduler and /readyz should see from every worker's state; under mu. */
void mesh_update_service(struct mesh *m);

/* Asks the loop thread to stop the mesh (from any thread). */
void mesh_request_stop(struct mesh *m, const char *why, int exit_status);
/* Starts the data plane, the scheduler and the API when every worker is first ready (from
 * mesh_update_service, under mu, once). */
int mesh_start_serving(struct mesh *m, lm_diag *d);

#endif

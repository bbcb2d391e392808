/* mesh_ops.h — the coordinator's mesh as its helpers see it: the keepers (keeper.c), the
 * rollouts (rollout.c) and the mesh's own endpoints (mesh_status.c). struct mesh is mesh.c's
 * alone; these calls are all the others may do with it.
 *
 * A worker is named by its index j in mesh.toml's order, 0 <= j < mesh_n_workers(m). In spawn
 * mode it has a serving process and, while a rollout replaces it, a candidate beside it: each
 * is a struct mesh_child, owned by the mesh and freed only with it, so a handle stays valid
 * after its process has exited.
 *
 * Threads and locking: every call may be made from any thread but the libuv loop's, and takes
 * the mesh's mutex itself where it touches state that changes while the mesh runs; none is made
 * holding it. Lock order: a rollouts' mu (rollout.h), then the mesh's mu, then the scheduler's
 * own lock (the mesh calls sched_* holding its mu). So a caller may hold its rollouts' mu, but
 * never a lock of the scheduler, while it calls in here.
 */
#ifndef LM_MESH_OPS_H
#define LM_MESH_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/tok/tokenizer.h"
#include "common/wire/wire.h"

struct fence_plan;
struct lm_hparams;
struct lm_tls;
struct mesh_config;
struct mesh_worker;
struct rollouts;
struct sched;

struct mesh;
struct mesh_child;

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

/* ------------------------------------------------------------------ fixed while it runs */

/* mesh.toml as loaded; worker j's entry (its name, configured addresses, backend). */
const struct mesh_config *mesh_cfg(const struct mesh *m);
const struct mesh_worker *mesh_worker_cfg(const struct mesh *m, int32_t j);
int32_t mesh_n_workers(const struct mesh *m);
const struct fence_plan *mesh_plan(const struct mesh *m);
const struct lm_hparams *mesh_hparams(const struct mesh *m);
const tok_vocab *mesh_vocab(const struct mesh *m);
const char *mesh_model_name(const struct mesh *m);
uint64_t mesh_fingerprint(const struct mesh *m);
int32_t mesh_max_seq(const struct mesh *m);
/* The [tls] files, for every tls+tcp:// connection to a worker. */
const struct lm_tls *mesh_tls(const struct mesh *m);
/* "" or, when a plane reaches another host over plain tcp://, a sentence saying so (the
 * startup log and /readyz carry it). */
const char *mesh_plain_note(const struct mesh *m);
/* Whether `layermesh up` starts the workers (false: --no-spawn, they run elsewhere). */
bool mesh_spawns(const struct mesh *m);
/* How long HELLO and READY may take per worker. */
int mesh_handshake_ms(const struct mesh *m);
/* [coordinator] worker_timeout: how long a worker may leave its liveness probe unanswered. */
int mesh_worker_timeout_ms(const struct mesh *m);

/* ------------------------------------------------------------------ the mesh */

/* Whether the mesh is stopping: every wait below ends early once it is. */
bool mesh_stopping(struct mesh *m);
/* Waits ms milliseconds, or until the mesh stops. */
void mesh_sleep(struct mesh *m, int64_t ms);
/* The scheduler, once the mesh serves (NULL before). Borrowed: it lives until mesh_up ends,
 * after the keepers and the rollouts are joined. */
struct sched *mesh_sched(struct mesh *m);
/* Whether a redeploy may start: the mesh serves, and every worker is ready (none away or
 * given up on). */
bool mesh_redeployable(struct mesh *m);
/* The mesh's redeploys, for their status. */
struct rollouts *mesh_rollouts(struct mesh *m);

/* What /v1/status and /metrics show of a worker. */
struct mesh_worker_view {
	enum mesh_worker_state state;
	int pid;      /* of its serving process (spawn mode), or as its HELLO said (0: not yet) */
	int restarts; /* the current streak: restarts since it last stayed up (keeper.c) */
	uint64_t restarts_total; /* every restart since the mesh came up */
	struct wire_ready ready; /* its last READY */
	uint64_t digest;         /* of its slice as the mesh first served it (0: not yet) */
	char why[512];           /* why it is not ready, or how its last process ended */
};
/* Worker j's view; every worker's at one instant (out holds mesh_n_workers(m) entries). */
void mesh_worker_view(struct mesh *m, int32_t j, struct mesh_worker_view *out);
void mesh_workers_view(struct mesh *m, struct mesh_worker_view *out);

/* ------------------------------------------------------------------ one worker */

/* Where worker j's serving process listens now. */
void mesh_worker_addrs(struct mesh *m, int32_t j, struct mesh_addrs *out);
/* The program a (re)start of worker j runs (a redeploy changes it). */
void mesh_worker_bin(struct mesh *m, int32_t j, char *out, size_t cap);
/* The ASSIGN worker j gets: its planned slice, its successor's current data address. */
void mesh_worker_assignment(struct mesh *m, int32_t j, struct wire_assign *a);

/* The keepers' part (keeper.c), in spawn mode. Starts a process for worker j with its current
 * program and addresses, and makes it the serving one; waits for the loop thread's answer. */
int mesh_worker_spawn(struct mesh *m, int32_t j, lm_diag *d);
/* Whether worker j's serving process runs. */
bool mesh_worker_running(struct mesh *m, int32_t j);
/* Whether worker j's serving process has ended, and how (why: "exited with status 3"). */
bool mesh_worker_ended(struct mesh *m, int32_t j, char *why, size_t cap);
/* Waits until worker j's serving process ends (a redeploy may replace it meanwhile: then the
 * wait goes on for the new one), or until the mesh stops. */
void mesh_worker_wait_exit(struct mesh *m, int32_t j);
/* The same for at most ms milliseconds; true when it has ended (or there is none). */
bool mesh_worker_wait_exit_ms(struct mesh *m, int32_t j, int64_t ms);
/* Makes sure worker j's serving process is gone (SIGKILL; waits up to 5 s for its exit) before
 * another starts on the same addresses. Its end is expected from then on: the worker's `why`
 * keeps the reason it was killed for. Does nothing outside spawn mode. */
void mesh_worker_kill(struct mesh *m, int32_t j);

/* The keepers' reports. A state change (why: the reason shown with it; NULL keeps the last)
 * also updates the service: during bring-up the last worker ready starts serving and one given
 * up on ends `layermesh up`; afterwards a worker away pauses the scheduler, one given up on
 * makes the mesh unavailable, and all back resume it (replaying live sequences after a
 * fault). */
void mesh_worker_set_state(struct mesh *m, int32_t j, enum mesh_worker_state state,
			   const char *why);
void mesh_worker_set_why(struct mesh *m, int32_t j, const char *why);
void mesh_worker_why(struct mesh *m, int32_t j, char *out, size_t cap);
/* A restart of worker j: its streak becomes `streak`, its total grows by one. */
void mesh_worker_note_restart(struct mesh *m, int32_t j, int streak);
/* Holds worker j's slice to what the mesh first served: the first READY's digest is recorded,
 * every later one (a restart, a redeploy's candidate) must equal it. LM_EFINGERPRINT naming
 * both values when it does not. */
int mesh_check_digest(struct mesh *m, int32_t j, uint64_t digest, lm_diag *d);

/* The data ring's progress at worker j, as its STATUS said (the keepers' progress check). */
struct mesh_progress {
	uint64_t in, out; /* ids of the last ring message it took, and passed on */
	int64_t busy_ms;  /* how long the message in hand has been (0: none) */
	int64_t send_ms;  /* of which it has been handing it to its successor */
	int32_t queued;   /* messages waiting */
	int64_t at_ms;    /* when it was read (lm_now_ms); 0: never */
};
void mesh_worker_set_progress(struct mesh *m, int32_t j, const struct mesh_progress *pg);
void mesh_worker_progress(struct mesh *m, int32_t j, struct mesh_progress *out);
void mesh_worker_set_pid(struct mesh *m, int32_t j, int pid);
void mesh_worker_set_ready(struct mesh *m, int32_t j, const struct wire_ready *ready);

/* ------------------------------------------------------------------ replacements */

/* The rollouts' part (rollout.c). Starts a candidate for worker j: program bin at addresses
 * at, beside the serving process. *child is the new process (owned by the mesh). */
int mesh_child_spawn(struct mesh *m, int32_t j, const char *bin, const struct mesh_addrs *at,
		     struct mesh_child **child, lm_diag *d);
/* Whether the process runs (it has not been reaped). */
bool mesh_child_running(struct mesh *m, const struct mesh_child *c);
/* Whether it has ended, and how. */
bool mesh_child_ended(struct mesh *m, const struct mesh_child *c, char *why, size_t cap);
/* Sends sig to a process whose exit is expected from now on (a candidate dropped, a process
 * replaced): its end is not a fault. NULL is harmless. */
void mesh_child_retire(struct mesh *m, struct mesh_child *c, int sig);
/* Makes candidate c worker j's serving process: at its addresses at, running bin, with its
 * READY. *was receives the addresses the worker leaves. Returns the process it replaces, its
 * exit expected from now on (the caller retires it), or NULL. */
struct mesh_child *mesh_commit(struct mesh *m, int32_t j, struct mesh_child *c,
			       const struct mesh_addrs *at, const char *bin,
			       const struct wire_ready *ready, struct mesh_addrs *was);
/* Re-points the head of the ring: the coordinator's push socket dials addr (the first worker's
 * data address) instead of where it dialled. On failure it keeps dialling where it did. */
int mesh_repoint_head(struct mesh *m, const char *addr, lm_diag *d);

#endif

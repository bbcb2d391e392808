/* procs.h — the workers' processes: spawned, watched, signalled and reaped on a libuv loop,
 * and the mesh's stop (a signal, or a request from any thread).
 *
 * A worker j (workers.h) has a serving process in spawn mode and, while a rollout replaces it,
 * a candidate beside it: each is a struct proc, owned by the supervision, so a handle stays
 * valid after its process has exited (a keeper's old process is freed once a newer one has
 * taken its place; a rollout's stay until procs_fini).
 *
 * Only the loop thread (the one in procs_run) creates and reaps processes: the others ask it
 * and wait for its answer. A process's end that nothing expected (not retired, not killed by
 * its keeper) is written into the worker table (workers_update's `lost`). Every wait below
 * ends early once the mesh is stopping. Every call but procs_run may be made from any thread
 * but the loop's; the lock order is workers.h's. */
#ifndef LM_PROCS_H
#define LM_PROCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "coordinator/supervise/facts.h"
#include "coordinator/supervise/workers.h"

struct procs;
struct proc;

/* Called on the loop thread once, when the mesh starts to stop (before any process is
 * signalled), so that the composing module makes its service unavailable. Optional. */
struct procs_hooks {
	void (*stopping)(void *ctx);
	void *ctx;
};

/* Opens the loop and its signal handlers (SIGINT, SIGTERM). LM_ENOMEM. */
int procs_open(struct procs **out, const struct mesh_facts *f, struct workers *ws,
	       const struct procs_hooks *hooks, lm_diag *d);
/* Runs the loop on the calling thread until the mesh has stopped and every process is gone.
 * Returns the exit status the stop asked for (0 after a signal). */
int procs_run(struct procs *pr);
/* After every keeper and rollout is joined: closes the loop, frees every process, removes the
 * ipc socket files the workers left behind. Harmless on NULL. */
void procs_fini(struct procs *pr);

/* Asks the loop thread for a process of worker j running bin at addresses at, and waits for
 * it. serving: it becomes the worker's serving process (a keeper's start; its pid goes into
 * the table); else a candidate beside it (a rollout's). *out: the process. */
int procs_spawn(struct procs *pr, int32_t j, const char *bin, const struct mesh_addrs *at,
		bool serving, struct proc **out, lm_diag *d);
/* Whether process c (NULL: worker j's serving one, whichever it is then) has ended, waiting
 * up to ms milliseconds for it (0: just look), and how (why: "exited with status 3"). No
 * process at all counts as ended, with why "". */
bool procs_ended(struct procs *pr, int32_t j, const struct proc *c, int64_t ms, char *why,
		 size_t cap);
/* Makes sure worker j's serving process is gone (SIGKILL; waits up to 5 s for its exit) before
 * another starts on the same addresses. Its end is expected from then on: the worker's `why`
 * keeps the reason it was killed for. Does nothing outside spawn mode. */
void procs_kill(struct procs *pr, int32_t j);
/* Sends sig to a process whose exit is expected from now on (a candidate dropped, a process
 * replaced): its end is not a fault. NULL is harmless. */
void procs_retire(struct procs *pr, struct proc *c, int sig);
/* Makes candidate c worker j's serving process (its pid goes into the table). Returns the
 * process it replaces, its exit expected from now on (the caller retires it), or NULL. */
struct proc *procs_commit(struct procs *pr, int32_t j, struct proc *c);

/* Whether the mesh is stopping. */
bool procs_stopping(struct procs *pr);
/* Waits ms milliseconds, or until the mesh stops. */
void procs_sleep(struct procs *pr, int64_t ms);
/* Stops the mesh (from any thread): the first reason given is logged, as an error when
 * exit_status is not 0, and procs_run returns that status. */
void procs_request_stop(struct procs *pr, const char *why, int exit_status);

#endif

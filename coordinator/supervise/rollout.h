/* rollout.h — rolling redeploys of worker builds, one shard at a time, without failing a
 * request.
 *
 * For each worker, canary first, then the rest in batches:
 *   prepare   start the new build on the same slice beside the old one (surge), on the worker's
 *             alternate addresses; HELLO (a build of another protocol version is refused, both
 *             versions named); ASSIGN with a private sink as successor; READY (a build that
 *             loads another model is refused, both fingerprints named)
 *   probe     run a fixed prompt through the live mesh in the probe slot, every worker
 *             recording its layers' hidden states (TRACE)
 *   smoke     replay the recorded input of the worker's stage into the new build and compare
 *             every layer's hidden state with the old build's record, within a tolerance (and
 *             the last stage's sampled token)
 *   switch    quiesce the ring at a step boundary; move every live sequence's KV rows from the
 *             old process to the new one (KV_EXPORT, KV_IMPORT); re-point the new one at the
 *             real successor and its predecessor at it; resume (the pause is measured)
 *   retire    stop the old process
 * Any failing step stops the new process, keeps the old one, marks the rollout failed with the
 * step and the reason, and leaves the mesh serving. Rollouts need workers that `layermesh up`
 * spawned.
 *
 * Alternate addresses: ipc://PATH <-> ipc://PATH.b, tcp://HOST:PORT <-> tcp://HOST:(PORT+1000)
 * (also tls+tcp://), http HOST:PORT <-> HOST:(PORT+1000); a worker moves back on its next
 * redeploy.
 */
#ifndef LM_ROLLOUT_H
#define LM_ROLLOUT_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "coordinator/supervise/facts.h"

struct lm_link;
struct procs;
struct rollout;
struct workers;

/* A mesh's redeploys: the one running, or the last one, whose status stays on show. A rollout
 * reads the mesh's facts and calls down into the worker table, the process supervision, the
 * scheduler and the head of the data ring; nothing else.
 *
 * Locking: `mu` guards `cur`, `closed` and every rollout's status; its place in the lock order
 * is workers.h's. */
struct rollouts {
	const struct mesh_facts *f;
	struct workers *ws;
	struct procs *pr;
	struct lm_link *head; /* the coordinator's dial to the first worker (a redeploy of it
			       * re-points it); its own lock */
	pthread_mutex_t mu;
	struct rollout *cur; /* the current or last redeploy, or NULL */
	bool closed;         /* rollout_stop ran: no redeploy starts any more */
};

/* On caller-owned memory: the mesh whose workers it redeploys. */
void rollout_init(struct rollouts *rs, const struct mesh_facts *f, struct workers *ws,
		  struct procs *pr, struct lm_link *head);
/* POST /v1/admin/redeploy: {"binary": path, "workers": [names] | "all": true, "batch": n,
 * "canary": name, "dry_run": bool, "tolerance": x}. Starts a rollout (202, its plan) or
 * answers a dry run with the plan (200); 400 for a bad request, 409 while another runs, 503
 * when the mesh cannot be redeployed. Sets *status; the caller frees the document. */
cJSON *rollout_request(struct rollouts *rs, const char *body, size_t len, int *status);
/* The current or last rollout, for GET /v1/admin/redeploy and /v1/status (NULL: none). */
cJSON *rollout_status(struct rollouts *rs);
/* Refuses new redeploys and waits for a running one to end (the mesh is stopping: its steps
 * fail fast). The last one's status stays readable until rollout_fini. */
void rollout_stop(struct rollouts *rs);
/* Stops (if rollout_stop did not) and frees. Harmless on NULL or a zeroed struct. */
void rollout_fini(struct rollouts *rs);

#endif

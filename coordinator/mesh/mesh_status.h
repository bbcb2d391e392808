/* mesh_status.h — the mesh's own endpoints, as the API calls them (api_cfg's ready, status
 * and metrics, with the mesh as their argument): /readyz, /v1/status and /metrics.
 *
 * They run on HTTP threads, with a struct mesh_status_src as their argument: the mesh's facts,
 * its worker table, its process supervision and its rollouts, read through their own calls. */
#ifndef LM_MESH_STATUS_H
#define LM_MESH_STATUS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "coordinator/supervise/facts.h"

struct procs;
struct rollouts;
struct workers;

struct mesh_status_src {
	const struct mesh_facts *f;
	struct workers *ws;
	struct procs *pr;
	struct rollouts *ro;
};

/* /readyz: true when every worker is ready (why is then "", or a note the operator should
 * see: a plane that leaves this host without TLS); else why says which is not and why. */
bool mesh_status_ready(void *mesh, char *why, size_t cap);
/* /v1/status: the model, its fingerprint and plan, every worker (its state, its slice, its
 * bytes, and its own /status, asked in parallel for at most about a second), the scheduler's
 * counters and the current or last rollout. NULL when out of memory; the caller frees it. */
cJSON *mesh_status_json(void *mesh);
/* /metrics: Prometheus text (malloc'd), or NULL before the mesh serves. */
char *mesh_status_metrics(void *mesh);

#endif

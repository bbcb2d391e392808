/* mesh_status.h — the mesh's own endpoints, as the API calls them (api_cfg's ready, status
 * and metrics, with the mesh as their argument): /readyz, /v1/status and /metrics.
 *
 * They run on HTTP threads and read the mesh through mesh_ops.h only. */
#ifndef LM_MESH_STATUS_H
#define LM_MESH_STATUS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

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

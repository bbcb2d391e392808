/* probe.h — the coordinator asking its workers' own health servers (worker/health.h) how they
 * are: GET /status of every worker at once, each bounded by a short timeout, so a worker that
 * does not answer is reported with its error and never holds the caller up for longer. */
#ifndef LM_PROBE_H
#define LM_PROBE_H

#include <cjson/cJSON.h>

/* One answer per address, in order: the worker's status document (a JSON object), or NULL
 * with `error` saying why (cannot connect, timed out, HTTP status, not JSON). Blocks for at
 * most about 2 x timeout_ms (connect, then read), whatever the workers do. addrs[i] is a
 * worker's http address ("host:port"); NULL or "" is reported as not configured. */
struct probe_result {
	cJSON *status; /* owned: cJSON_Delete, or take it */
	char error[256];
};
void probe_status_all(const char *const *addrs, int n, int timeout_ms, struct probe_result *out);

#endif

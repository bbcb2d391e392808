/* probe.c — GET /status from every worker at once. See probe.h. */
#include "coordinator/supervise/probe.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/supervise/http_client.h"

struct probe_job {
	const char *addr;
	int timeout_ms;
	struct probe_result *out;
	pthread_t thread;
	bool started;
};

static void probe_one(struct probe_job *j)
{
	struct probe_result *r = j->out;
	struct lm_http_resp resp = {0};
	lm_diag d = {{0}};
	if (j->addr == NULL || j->addr[0] == '\0') {
		snprintf(r->error, sizeof r->error, "no http address configured");
		return;
	}
	int rc =
		lm_http_request(j->addr, "GET", "/status", NULL, NULL, 0, j->timeout_ms, &resp, &d);
	if (rc != 0) {
		snprintf(r->error, sizeof r->error, "GET http://%s/status: %s", j->addr,
			 lm_diag_str(&d, rc));
	} else if (resp.status != 200) {
		snprintf(r->error, sizeof r->error, "GET http://%s/status answered %d", j->addr,
			 resp.status);
	} else {
		r->status = cJSON_ParseWithLength(resp.body, resp.len);
		if (!cJSON_IsObject(r->status)) {
			cJSON_Delete(r->status);
			r->status = NULL;
			snprintf(r->error, sizeof r->error,
				 "GET http://%s/status did not answer a JSON object", j->addr);
		}
	}
	lm_http_resp_fini(&resp);
}

static void *probe_main(void *arg)
{
	probe_one(arg);
	return NULL;
}

void probe_status_all(const char *const *addrs, int n, int timeout_ms, struct probe_result *out)
{
	struct probe_job *jobs = calloc((size_t)(n > 0 ? n : 1), sizeof *jobs);
	for (int i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof out[i]);
		if (jobs == NULL) {
			snprintf(out[i].error, sizeof out[i].error, "out of memory");
			continue;
		}
		jobs[i] = (struct probe_job){
			.addr = addrs[i], .timeout_ms = timeout_ms, .out = &out[i]};
		/* One thread per worker, so the slowest bounds the wait rather than their sum; without
		 * a thread, ask in line. */
		jobs[i].started = pthread_create(&jobs[i].thread, NULL, probe_main, &jobs[i]) == 0;
		if (!jobs[i].started)
			probe_one(&jobs[i]);
	}
	for (int i = 0; jobs != NULL && i < n; i++)
		if (jobs[i].started)
			pthread_join(jobs[i].thread, NULL);
	free(jobs);
}

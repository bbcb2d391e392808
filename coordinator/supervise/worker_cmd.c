/* worker_cmd.c — a layermesh-worker command line. See worker_cmd.h. */
#include "coordinator/supervise/worker_cmd.h"

#include <stdio.h>
#include <string.h>

static void wc_add(struct worker_argv *o, const char *flag, const char *value)
{
	/* Never past the array: WORKER_CMD_MAX_ARGS covers every flag below with its value. */
	if (o->argc + (value != NULL ? 2 : 1) > WORKER_CMD_MAX_ARGS)
		return;
	o->argv[o->argc++] = (char *)flag;
	if (value != NULL)
		o->argv[o->argc++] = (char *)value;
	o->argv[o->argc] = NULL;
}

void worker_cmd_argv(const struct worker_cmd *c, struct worker_argv *o)
{
	memset(o, 0, sizeof *o);
	o->argv[o->argc++] = (char *)c->bin;
	wc_add(o, "--name", c->name);
	wc_add(o, "--control", c->control);
	wc_add(o, "--data", c->data);
	if (c->http != NULL)
		wc_add(o, "--http", c->http);
	wc_add(o, "--backend", c->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu");
	if (c->backend == MESH_BACKEND_CUDA) {
		snprintf(o->num[2], sizeof o->num[2], "%d", c->device);
		wc_add(o, "--device", o->num[2]);
	}
	if (c->threads > 0) {
		snprintf(o->num[0], sizeof o->num[0], "%d", c->threads);
		wc_add(o, "--threads", o->num[0]);
	}
	wc_add(o, "--kernels", mesh_kernels_name(c->kernels));
	if (c->insecure)
		wc_add(o, "--insecure", NULL);
	if (c->parent_pid > 0) {
		snprintf(o->num[1], sizeof o->num[1], "%d", c->parent_pid);
		wc_add(o, "--parent-pid", o->num[1]);
	}
	if (c->log_level != NULL)
		wc_add(o, "--log-level", c->log_level);
	if (c->memory_limit > 0) {
		snprintf(o->num[3], sizeof o->num[3], "%llu", (unsigned long long)c->memory_limit);
		wc_add(o, "--memory-limit", o->num[3]);
	}
	if (c->tls != NULL && c->tls->ca_file != NULL) {
		wc_add(o, "--tls-ca", c->tls->ca_file);
		wc_add(o, "--tls-cert", c->tls->cert_file);
		wc_add(o, "--tls-key", c->tls->key_file);
	}
}

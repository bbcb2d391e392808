/* mesh.c — `layermesh up`. See mesh.h for the sequence of events. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/wire/transport.h"
#include "coordinator/mesh_impl.h"
#include "coordinator/planner.h"
#include "coordinator/rollout.h"
#include "coordinator/probe.h"
#include "lm_config.h"
#include "coordinator/worker_cmd.h"

/* ------------------------------------------------------------------ helpers */

/* The worker binary: --worker-bin, else next to this program (installed), else the build
 * tree's worker/ directory beside coordinator/. */
static int mesh_find_worker(struct mesh *m, lm_diag *d)
{
	if (m->o->worker_bin != NULL) {
		snprintf(m->worker_bin, sizeof m->worker_bin, "%s", m->o->worker_bin);
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n <= 0)
			return lm_fail(d, LM_EOS, "cannot find this program's path");
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		static const char *const candidates[] = {"/layermesh-worker",
							 "/../worker/layermesh-worker"};
		for (size_t i = 0; i < 2; i++) {
			size_t a = strlen(self), b = strlen(candidates[i]);
			if (a + b >= sizeof m->worker_bin)
				return lm_fail(d, LM_ERANGE, "this program's path is too long");
			memcpy(m->worker_bin, self, a);
			memcpy(m->worker_bin + a, candidates[i], b + 1);
			if (access(m->worker_bin, X_OK) == 0)
				break;
		}
	}
	if (access(m->worker_bin, X_OK) != 0)
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       m->worker_bin);
	return 0;
}

static void mesh_unlink_ipc(const char *addr)
{
	if (addr != NULL && strncmp(addr, "ipc://", 6) == 0)
		unlink(addr + 6);
}

/* ------------------------------------------------------------------ mesh-level endpoints */

static const char *const mesh_state_names[] = {"starting", "ready", "restarting", "failed"};

static bool mesh_ready(void *arg, char *why, size_t cap)
{
	struct mesh *m = arg;
	bool ready = true;
	if (atomic_load(&m->stopping)) {
		snprintf(why, cap, "the coordinator is stopping");
		return false;
	}
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs && ready; i++) {
		const struct mesh_proc *p = &m->procs[i];
		if (p->state != PROC_READY) {
			snprintf(why, cap, "worker %s is %s%s%s%s", p->cfg->name,
				 mesh_state_names[p->state], p->why[0] ? " (" : "", p->why,
				 p->why[0] ? ")" : "");
			ready = false;
		}
	}
	pthread_mutex_unlock(&m->mu);
	return ready;
}

/* How long /v1/status waits for a worker's own /status (connect, then answer). */
#define MESH_PROBE_TIMEOUT_MS 500

static cJSON *mesh_status(void *arg)
{
	struct mesh *m = arg;
	/* Every worker's own view, asked in parallel before anything is built. */
	const char **addrs = calloc((size_t)m->n_procs + 1, sizeof *addrs);
	struct probe_result *probes = calloc((size_t)m->n_procs + 1, sizeof *probes);
	if (addrs == NULL || probes == NULL) {
		free(addrs);
		free(probes);
		return NULL;
	}
	for (int32_t i = 0; i < m->n_procs; i++)
		addrs[i] = m->procs[i].cfg->http;
	probe_status_all(addrs, m->n_procs, MESH_PROBE_TIMEOUT_MS, probes);
	free(addrs);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "model", m->model_name);
	char fp[32];
	snprintf(fp, sizeof fp, "%016llx", (unsigned long long)m->fingerprint);
	cJSON_AddStringToObject(o, "fingerprint", fp);
	cJSON_AddItemToObject(o, "plan", fence_plan_to_json(&m->plan));
	cJSON *ws = cJSON_AddArrayToObject(o, "workers");
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++) {
		struct mesh_proc *p = &m->procs[i];
		cJSON *w = cJSON_CreateObject();
		cJSON_AddStringToObject(w, "name", p->cfg->name);
		cJSON_AddStringToObject(w, "state", mesh_state_names[p->state]);
		cJSON_AddNumberToObject(w, "pid", p->pid);
		cJSON_AddNumberToObject(w, "restarts", p->restarts);
		cJSON_AddNumberToObject(w, "start", m->plan.stages[i].start);
		cJSON_AddNumberToObject(w, "end", m->plan.stages[i].end);
		cJSON_AddNumberToObject(w, "kv_bytes", (double)p->ready.kv_bytes);
		cJSON_AddNumberToObject(w, "weight_bytes", (double)p->ready.weight_bytes);
		cJSON_AddNumberToObject(w, "rss_bytes_at_ready", (double)p->ready.rss_bytes);
		if (p->why[0])
			cJSON_AddStringToObject(w, "why", p->why);
		cJSON_AddStringToObject(w, "http", p->cfg->http);
		if (probes[i].status != NULL)
			cJSON_AddItemToObject(w, "status", probes[i].status);
		else
			cJSON_AddStringToObject(w, "status_error", probes[i].error);
		cJSON_AddItemToArray(ws, w);
	}
	pthread_mutex_unlock(&m->mu);
	free(probes);
	if (m->sched != NULL) {
		const struct sched_stats *s = sched_stats(m->sched);
		cJSON *q = cJSON_AddObjectToObject(o, "scheduler");
		cJSON_AddNumberToObject(q, "requests", (double)atomic_load(&s->requests));
		cJSON_AddNumberToObject(q, "active", atomic_load(&s->active));
		cJSON_AddNumberToObject(q, "queued", atomic_load(&s->queued));
		cJSON_AddNumberToObject(q, "tokens_generated",
					(double)atomic_load(&s->tokens_generated));
		cJSON_AddNumberToObject(q, "batches", (double)atomic_load(&s->batches));
		cJSON_AddNumberToObject(q, "ring_errors", (double)atomic_load(&s->ring_errors));
		cJSON_AddNumberToObject(q, "replays", (double)atomic_load(&s->replays));
		cJSON *ro = rollout_status(m);
		if (ro != NULL)
			cJSON_AddItemToObject(o, "rollout", ro);
		cJSON_AddNumberToObject(q, "batches_forgotten",
					(double)atomic_load(&s->batches_forgotten));
	}
	return o;
}

static void mesh_metrics_hist(struct lm_mtext *t, const char *name, const char *help,
			      const struct lm_hist *h)
{
	struct lm_hist_snap s;
	lm_hist_snapshot(h, &s);
	lm_mtext_family(t, name, "histogram", help);
	lm_mtext_hist(t, name, NULL, &s);
}

static char *mesh_metrics(void *arg)
{
	struct mesh *m = arg;
	if (m->sched == NULL)
		return NULL;
	const struct sched_stats *s = sched_stats(m->sched);
	struct lm_mtext t = {0};
	lm_mtext_counter(&t, "layermesh_requests_total", "Completion requests accepted.",
			 atomic_load(&s->requests));
	lm_mtext_counter(&t, "layermesh_tokens_generated_total", "Tokens sampled by the mesh.",
			 atomic_load(&s->tokens_generated));
	lm_mtext_counter(&t, "layermesh_prompt_tokens_total", "Prompt tokens of accepted requests.",
			 atomic_load(&s->prompt_tokens));
	lm_mtext_counter(&t, "layermesh_batches_total", "FORWARD batches sent into the ring.",
			 atomic_load(&s->batches));
	lm_mtext_counter(&t, "layermesh_ring_errors_total", "Ring messages refused or malformed.",
			 atomic_load(&s->ring_errors));
	lm_mtext_counter(&t, "layermesh_replays_total",
			 "Sequences prefilled again after a worker fault.",
			 atomic_load(&s->replays));
	lm_mtext_counter(&t, "layermesh_batches_forgotten_total",
			 "Batches in flight when a worker went down.",
			 atomic_load(&s->batches_forgotten));
	lm_mtext_gauge(&t, "layermesh_active_sequences", "Sequences holding a KV slot.",
		       atomic_load(&s->active));
	lm_mtext_gauge(&t, "layermesh_queued_sequences", "Sequences waiting for a slot.",
		       atomic_load(&s->queued));
	pthread_mutex_lock(&m->mu);
	int32_t ready = 0;
	for (int32_t i = 0; i < m->n_procs; i++)
		ready += m->procs[i].state == PROC_READY;
	lm_mtext_gauge(&t, "layermesh_workers_ready", "Workers that are ready.", ready);
	lm_mtext_family(&t, "layermesh_worker_up", "gauge",
			"1 while the worker is assigned and serving, 0 while it starts, restarts "
			"or has failed.");
	for (int32_t i = 0; i < m->n_procs; i++) {
		char label[300];
		lm_mtext_label(label, sizeof label, "worker", m->procs[i].cfg->name);
		lm_mtext_sample(&t, "layermesh_worker_up", label,
				m->procs[i].state == PROC_READY ? 1 : 0);
	}
	pthread_mutex_unlock(&m->mu);
	mesh_metrics_hist(&t, "layermesh_time_to_first_token_seconds",
			  "From a request's arrival to its first generated token.", &s->ttft);
	mesh_metrics_hist(&t, "layermesh_token_decode_seconds",
			  "Between consecutive generated tokens of a request.", &s->token);
	mesh_metrics_hist(&t, "layermesh_request_duration_seconds",
			  "From a request's arrival to its end, for any reason.", &s->duration);
	return lm_mtext_take(&t);
}

static cJSON *mesh_redeploy(void *arg, const char *body, size_t len, int *status)
{
	return rollout_request(arg, body, len, status);
}

static cJSON *mesh_rollout(void *arg)
{
	return rollout_status(arg);
}

/* ------------------------------------------------------------------ serving */

int mesh_start_serving(struct mesh *m, lm_diag *d)
{
	int rv, rc;
	if ((rv = nng_push0_open(&m->push)) != 0)
		return lm_fail(d, LM_EIO, "push socket: %s", nng_strerror(rv));
	m->push_open = true;
	nng_socket_set_ms(m->push, NNG_OPT_SENDTIMEO, 1000);
	nng_socket_set_ms(m->push, NNG_OPT_RECONNMINT, 10);
	nng_socket_set_ms(m->push, NNG_OPT_RECONNMAXT, 200);
	if ((rc = lm_dial(m->push, m->procs[0].data, &m->tls, &m->push_dialer, d)) != 0)
		return rc;
	struct sched_cfg sc = {.fingerprint = m->fingerprint,
			       .slots = m->cfg.slots + MESH_PROBE_SLOTS,
			       .reserved_slots = MESH_PROBE_SLOTS,
			       .max_seq = m->max_seq,
			       .max_batch = m->cfg.max_batch,
			       .max_inflight = m->n_procs,
			       .prefill_chunk = m->cfg.max_batch,
			       .n_vocab = m->hp.n_vocab,
			       .max_logprobs = WIRE_MAX_LOGPROBS,
			       .batch_timeout_ms = 30000,
			       .push = m->push,
			       .pull = m->pull};
	int32_t stops[3] = {tok_eos(m->vocab), tok_eot(m->vocab), tok_bos(m->vocab)};
	for (int i = 0; i < 3; i++)
		if (stops[i] >= 0)
			sc.stop_ids[sc.n_stop_ids++] = stops[i];
	if ((rc = sched_start(&m->sched, &sc, d)) != 0)
		return rc;
	struct api_cfg ac = {.http = m->cfg.http,
			     .model_name = m->model_name,
			     .auth_token = m->cfg.auth_token,
			     .max_seq = m->max_seq,
			     .vocab = m->vocab,
			     .sched = m->sched,
			     .mesh = m,
			     .ready = mesh_ready,
			     .status = mesh_status,
			     .metrics = mesh_metrics,
			     .redeploy = mesh_redeploy,
			     .rollout = mesh_rollout};
	if ((rc = api_start(&m->api, &ac, d)) != 0)
		return rc;
	m->serving = true;
	m->available = true;
	char fence[512];
	size_t at = 0;
	for (int32_t i = 0; i <= m->plan.n_workers && at < sizeof fence - 16; i++)
		at += (size_t)snprintf(fence + at, sizeof fence - at, "%s%d", i ? ", " : "",
				       m->plan.cuts[i]);
	lm_info("ready: serving %s on http://%s with %d workers, fence [%s]", m->model_name,
		m->cfg.http, m->n_procs, fence);
	return 0;
}

/* ------------------------------------------------------------------ the loop */

/* Running children, under mu. */
static int32_t mesh_running(struct mesh *m)
{
	int32_t n = 0;
	for (struct mesh_child *c = m->children; c != NULL; c = c->next)
		n += c->running;
	return n;
}

static void mesh_on_exit(uv_process_t *proc, int64_t status, int term_signal)
{
	struct mesh_child *c = proc->data;
	struct mesh_proc *p = c->p;
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	if (term_signal != 0)
		snprintf(c->why, sizeof c->why, "killed by signal %d", term_signal);
	else
		snprintf(c->why, sizeof c->why, "exited with status %lld", (long long)status);
	c->running = false;
	if (c == p->child && !c->retiring) {
		snprintf(p->why, sizeof p->why, "%s", c->why);
		if (p->state == PROC_READY && !atomic_load(&m->stopping)) {
			/* Noticed now, not at the next heartbeat: stop dispatching at once. */
			lm_error("worker %s (pid %d) %s", p->cfg->name, c->pid, c->why);
			p->state = PROC_DOWN;
			mesh_update_service(m);
		}
	}
	pthread_cond_broadcast(&m->cv);
	bool last = atomic_load(&m->stopping) && mesh_running(m) == 0;
	pthread_mutex_unlock(&m->mu);
	uv_close((uv_handle_t *)proc, NULL);
	if (last)
		uv_stop(&m->loop);
}

static void mesh_free_closed_child(uv_handle_t *h)
{
	free(h->data);
}

/* Loop thread, under mu: starts the process of a spawn request. */
static int mesh_spawn(struct mesh *m, struct mesh_spawn *r, lm_diag *d)
{
	struct mesh_proc *p = r->p;
	struct worker_cmd wc = {.bin = r->bin,
				.name = p->cfg->name,
				.control = r->control,
				.data = r->data,
				.http = r->http,
				.backend = p->cfg->backend,
				.threads = p->cfg->threads,
				.kernels = p->cfg->kernels,
				.parent_pid = (int)getpid(),
				.log_level = lm_log_get_level() >= LM_LOG_DEBUG ? "debug" : "info",
				.tls = &m->tls};
	struct worker_argv args;
	worker_cmd_argv(&wc, &args);
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
					 {.flags = UV_INHERIT_FD, .data.fd = 2},
					 {.flags = UV_INHERIT_FD, .data.fd = 2}};
	uv_process_options_t po = {.exit_cb = mesh_on_exit,
				   .file = r->bin,
				   .args = args.argv,
				   .stdio_count = 3,
				   .stdio = stdio};
	if (access(r->bin, X_OK) != 0)
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       r->bin);
	struct mesh_child *c = calloc(1, sizeof *c);
	if (c == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	c->p = p;
	c->proc.data = c;
	/* Stale ipc socket files from a crashed process would make the worker's listen fail. */
	mesh_unlink_ipc(r->control);
	mesh_unlink_ipc(r->data);
	int rv = uv_spawn(&m->loop, &c->proc, &po);
	if (rv != 0) {
		/* The handle joined the loop even so: it must be closed before it is freed. */
		uv_close((uv_handle_t *)&c->proc, mesh_free_closed_child);
		return lm_fail(d, LM_EOS, "cannot start %s for worker %s: %s", r->bin, p->cfg->name,
			       uv_strerror(rv));
	}
	c->running = true;
	c->pid = c->proc.pid;
	c->next = m->children;
	m->children = c;
	r->child = c;
	return 0;
}

/* Keepers and rollouts ask for processes; only the loop thread may create process handles. */
static void mesh_on_spawn_async(uv_async_t *a)
{
	struct mesh *m = a->data;
	pthread_mutex_lock(&m->mu);
	while (m->spawns != NULL) {
		struct mesh_spawn *r = m->spawns;
		m->spawns = r->next;
		lm_diag d = {{0}};
		r->rc = atomic_load(&m->stopping) ? LM_ECANCELED : mesh_spawn(m, r, &d);
		if (r->rc != 0)
			snprintf(r->why, sizeof r->why, "%s", lm_diag_str(&d, r->rc));
		r->done = true;
	}
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

int mesh_spawn_child(struct mesh *m, struct mesh_proc *p, const char *bin, const char *data,
		     const char *control, const char *http, struct mesh_child **child, lm_diag *d)
{
	struct mesh_spawn r = {.p = p, .bin = bin, .data = data, .control = control, .http = http};
	pthread_mutex_lock(&m->mu);
	r.next = m->spawns;
	m->spawns = &r;
	uv_async_send(&m->spawn_async);
	while (!r.done && !atomic_load(&m->stopping)) {
		lm_cond_wait_ms(&m->cv, &m->mu, 1000);
	}
	if (!r.done) { /* stopping: take the request back if the loop has not seen it */
		for (struct mesh_spawn **q = &m->spawns; *q != NULL; q = &(*q)->next)
			if (*q == &r) {
				*q = r.next;
				break;
			}
		r.rc = LM_ECANCELED;
		snprintf(r.why, sizeof r.why, "the mesh is stopping");
	}
	pthread_mutex_unlock(&m->mu);
	if (r.rc != 0)
		return lm_fail(d, r.rc, "%s", r.why);
	*child = r.child;
	return 0;
}

void mesh_kill_child(struct mesh *m, struct mesh_child *c, int sig)
{
	(void)m;
	/* kill(2) on the pid: uv_process_kill is for the loop thread. The child is reaped only
	 * by the loop, under mu, so while `running` is true the pid is still ours. */
	if (c != NULL && c->running && c->pid > 0)
		kill(c->pid, sig);
}

bool mesh_child_running(struct mesh *m, struct mesh_child *c)
{
	pthread_mutex_lock(&m->mu);
	bool r = c != NULL && c->running;
	pthread_mutex_unlock(&m->mu);
	return r;
}

static void mesh_on_stop_timer(uv_timer_t *t)
{
	struct mesh *m = t->data;
	pthread_mutex_lock(&m->mu);
	for (struct mesh_child *c = m->children; c != NULL; c = c->next)
		if (c->running) {
			lm_warn("%s (pid %d) did not stop in time: killing it", c->p->cfg->name,
				c->pid);
			kill(c->pid, SIGKILL);
		}
	pthread_mutex_unlock(&m->mu);
}

/* Loop thread: stop everything. */
static void mesh_begin_stop(struct mesh *m, const char *why)
{
	if (atomic_exchange(&m->stopping, true))
		return;
	lm_info("stopping (%s)", why);
	/* Requests fail now with the reason; the scheduler and the API stay allocated until
	 * the keepers and a rollout, which use them, have been joined (end of mesh_up). Under
	 * mu, so a keeper's service update either ran before this or sees `stopping`. */
	pthread_mutex_lock(&m->mu);
	pthread_cond_broadcast(&m->cv);
	if (m->sched != NULL)
		sched_set_available(m->sched, false, "the coordinator is stopping");
	for (struct mesh_child *c = m->children; c != NULL; c = c->next)
		if (c->running)
			kill(c->pid, SIGTERM);
	bool none = mesh_running(m) == 0;
	pthread_mutex_unlock(&m->mu);
	uv_timer_start(&m->stop_timer, mesh_on_stop_timer, 5000, 0);
	if (none)
		uv_stop(&m->loop);
}

void mesh_request_stop(struct mesh *m, const char *why, int exit_status)
{
	pthread_mutex_lock(&m->stop_mu);
	if (m->stop_why[0] == '\0') {
		snprintf(m->stop_why, sizeof m->stop_why, "%s", why);
		m->exit_status = exit_status;
	}
	pthread_mutex_unlock(&m->stop_mu);
	uv_async_send(&m->stop_async);
}

static void mesh_on_stop_async(uv_async_t *a)
{
	struct mesh *m = a->data;
	char why[512];
	pthread_mutex_lock(&m->stop_mu);
	snprintf(why, sizeof why, "%s", m->stop_why);
	pthread_mutex_unlock(&m->stop_mu);
	if (m->exit_status != 0)
		lm_error("%s", why);
	mesh_begin_stop(m, m->exit_status != 0 ? "the mesh could not start" : why);
}

static void mesh_on_signal(uv_signal_t *s, int signum)
{
	mesh_begin_stop(s->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

static void mesh_close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

int mesh_up(const struct mesh_opts *o)
{
	struct mesh *m = calloc(1, sizeof *m);
	lm_diag d = {{0}};
	int rc, rv;

	if (m == NULL)
		return 1;
	m->o = o;
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->stop_mu, NULL);
	lm_cond_init(&m->cv);
	if ((rc = mesh_config_load(&m->cfg, o->config, &d)) != 0)
		goto early;
	lm_log_init("layermesh", NULL, m->cfg.log_level);
	if ((rc = planner_plan(&m->cfg, &m->plan, NULL, &d)) != 0)
		goto early;
	if ((rc = gguf_open(m->cfg.model_path, &m->file, &d)) != 0 ||
	    (rc = lm_hparams_load(m->file, &m->hp, &d)) != 0 ||
	    (rc = tok_load(m->file, &m->vocab, &d)) != 0) {
		lm_diag_prefix(&d, "%s", m->cfg.model_path);
		goto early;
	}
	m->fingerprint = gguf_fingerprint(m->file);
	m->max_seq = planner_max_seq(&m->cfg, &m->hp);
	const char *base = strrchr(m->cfg.model_path, '/');
	snprintf(m->model_name, sizeof m->model_name, "%s", base ? base + 1 : m->cfg.model_path);
	char *dot = strrchr(m->model_name, '.');
	if (dot != NULL && strcmp(dot, ".gguf") == 0)
		*dot = '\0';
	fence_plan_write_table(&m->plan, stderr);
	if (o->spawn && (rc = mesh_find_worker(m, &d)) != 0)
		goto early;

	m->n_procs = m->cfg.n_workers;
	m->procs = calloc((size_t)m->n_procs, sizeof *m->procs);
	if (m->procs == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto early;
	}
	/* data_in is where the last worker dials; with --listen-any its host may name this process
	 * only through a DNS name or a service that it cannot bind. */
	char data_in[512], why[256];
	if (mesh_listen_address(m->cfg.data_in, false, o->listen_any, data_in, sizeof data_in, why,
				sizeof why) != 0) {
		rc = lm_fail(&d, LM_ECONFIG, "[coordinator] data_in %s: %s", m->cfg.data_in, why);
		goto early;
	}
	mesh_unlink_ipc(data_in);
	if ((rv = nng_pull0_open(&m->pull)) != 0) {
		rc = lm_fail(&d, LM_EIO, "pull socket: %s", nng_strerror(rv));
		goto early;
	}
	m->pull_open = true;
	m->tls = (struct lm_tls){m->cfg.tls_ca_file, m->cfg.tls_cert_file, m->cfg.tls_key_file};
	if ((rc = lm_listen(m->pull, data_in, &m->tls, NULL, &d)) != 0)
		goto early;
	nng_socket_set_size(m->pull, NNG_OPT_RECVMAXSZ, 0);

	uv_loop_init(&m->loop);
	uv_signal_init(&m->loop, &m->sig_int);
	uv_signal_init(&m->loop, &m->sig_term);
	m->sig_int.data = m->sig_term.data = m;
	uv_signal_start(&m->sig_int, mesh_on_signal, SIGINT);
	uv_signal_start(&m->sig_term, mesh_on_signal, SIGTERM);
	uv_async_init(&m->loop, &m->spawn_async, mesh_on_spawn_async);
	uv_async_init(&m->loop, &m->stop_async, mesh_on_stop_async);
	m->spawn_async.data = m->stop_async.data = m;
	uv_timer_init(&m->loop, &m->stop_timer);
	m->stop_timer.data = m;
	signal(SIGPIPE, SIG_IGN);

	for (int32_t i = 0; i < m->n_procs; i++) {
		struct mesh_proc *p = &m->procs[i];
		p->mesh = m;
		p->cfg = &m->cfg.workers[i];
		p->index = i;
		p->state = PROC_STARTING;
		snprintf(p->bin, sizeof p->bin, "%s", m->worker_bin);
		snprintf(p->data, sizeof p->data, "%s", p->cfg->data);
		snprintf(p->control, sizeof p->control, "%s", p->cfg->control);
		snprintf(p->http, sizeof p->http, "%s", p->cfg->http);
	}
	lm_info("starting %d workers", m->n_procs);
	for (int32_t i = 0; i < m->n_procs; i++)
		if (keeper_start(m, &m->procs[i]) != 0) {
			mesh_request_stop(m, "cannot start a keeper thread", 1);
			break;
		}
	uv_run(&m->loop, UV_RUN_DEFAULT);

	/* Stopped: keepers and a rollout see `stopping` at their next wait. */
	atomic_store(&m->stopping, true);
	pthread_mutex_lock(&m->mu);
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	rollout_join(m);
	for (int32_t i = 0; i < m->n_procs; i++)
		keeper_join(&m->procs[i]);
	/* The HTTP server first (its handlers wait for calls the scheduler fails), then the
	 * scheduler (every call's on_done, which may still use the API), then the API's memory. */
	api_stop(m->api);
	sched_stop(m->sched);
	sched_fini(m->sched);
	api_free(m->api);
	uv_walk(&m->loop, mesh_close_walk, NULL);
	uv_run(&m->loop, UV_RUN_DEFAULT);
	uv_loop_close(&m->loop);
	rc = m->exit_status != 0 ? LM_EUNAVAILABLE : 0;
	lm_info("stopped");
early:
	if (rc != 0 && d.msg[0])
		fprintf(stderr, "layermesh up: %s\n", d.msg);
	/* Bounded: a close NNG cannot finish must not keep a stopped coordinator alive. */
	if (m->push_open && lm_close_bounded(m->push, LM_CLOSE_MS) != 0)
		lm_warn("closing the data ring's first socket took over 2 s; exiting anyway");
	if (m->pull_open && lm_close_bounded(m->pull, LM_CLOSE_MS) != 0)
		lm_warn("closing the data ring's last socket took over 2 s; exiting anyway");
	for (int32_t i = 0; m->procs != NULL && i < m->n_procs; i++) {
		if (o->spawn && m->procs[i].cfg != NULL) {
			mesh_unlink_ipc(m->procs[i].cfg->control);
			mesh_unlink_ipc(m->procs[i].cfg->data);
			mesh_unlink_ipc(m->procs[i].control);
			mesh_unlink_ipc(m->procs[i].data);
		}
	}
	while (m->children != NULL) {
		struct mesh_child *c = m->children;
		m->children = c->next;
		free(c);
	}
	mesh_unlink_ipc(m->cfg.data_in);
	free(m->procs);
	tok_free(m->vocab);
	fence_plan_fini(&m->plan);
	gguf_close(m->file);
	mesh_config_fini(&m->cfg);
	int status = rc == 0 && m->exit_status == 0 ? 0 : 1;
	pthread_mutex_destroy(&m->mu);
	pthread_mutex_destroy(&m->stop_mu);
	pthread_cond_destroy(&m->cv);
	free(m);
	return status;
}

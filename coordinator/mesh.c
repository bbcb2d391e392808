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

#include "common/log.h"
#include "coordinator/mesh_impl.h"
#include "coordinator/planner.h"
#include "lm_config.h"

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

static cJSON *mesh_status(void *arg)
{
	struct mesh *m = arg;
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
		cJSON_AddItemToArray(ws, w);
	}
	pthread_mutex_unlock(&m->mu);
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
		cJSON_AddNumberToObject(q, "batches_forgotten",
					(double)atomic_load(&s->batches_forgotten));
	}
	return o;
}

static char *mesh_metrics(void *arg)
{
	struct mesh *m = arg;
	char *buf = malloc(8192);
	if (buf == NULL || m->sched == NULL) {
		free(buf);
		return NULL;
	}
	const struct sched_stats *s = sched_stats(m->sched);
	int32_t ready = 0;
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++)
		ready += m->procs[i].state == PROC_READY;
	pthread_mutex_unlock(&m->mu);
	snprintf(buf, 8192,
		 "# HELP layermesh_requests_total Completion requests accepted.\n"
		 "# TYPE layermesh_requests_total counter\n"
		 "layermesh_requests_total %llu\n"
		 "# HELP layermesh_tokens_generated_total Tokens sampled by the mesh.\n"
		 "# TYPE layermesh_tokens_generated_total counter\n"
		 "layermesh_tokens_generated_total %llu\n"
		 "# HELP layermesh_batches_total FORWARD batches sent into the ring.\n"
		 "# TYPE layermesh_batches_total counter\n"
		 "layermesh_batches_total %llu\n"
		 "# HELP layermesh_ring_errors_total Ring messages refused or malformed.\n"
		 "# TYPE layermesh_ring_errors_total counter\n"
		 "layermesh_ring_errors_total %llu\n"
		 "# HELP layermesh_active_sequences Sequences holding a KV slot.\n"
		 "# TYPE layermesh_active_sequences gauge\n"
		 "layermesh_active_sequences %d\n"
		 "# HELP layermesh_queued_sequences Sequences waiting for a slot.\n"
		 "# TYPE layermesh_queued_sequences gauge\n"
		 "layermesh_queued_sequences %d\n"
		 "# HELP layermesh_workers_ready Workers that are ready.\n"
		 "# TYPE layermesh_workers_ready gauge\n"
		 "layermesh_workers_ready %d\n",
		 (unsigned long long)atomic_load(&s->requests),
		 (unsigned long long)atomic_load(&s->tokens_generated),
		 (unsigned long long)atomic_load(&s->batches),
		 (unsigned long long)atomic_load(&s->ring_errors), atomic_load(&s->active),
		 atomic_load(&s->queued), ready);
	return buf;
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
	if ((rv = nng_dial(m->push, m->procs[0].cfg->data, NULL, NNG_FLAG_NONBLOCK)) != 0)
		return lm_fail(d, LM_EIO, "cannot dial %s: %s", m->procs[0].cfg->data,
			       nng_strerror(rv));
	struct sched_cfg sc = {.fingerprint = m->fingerprint,
			       .slots = m->cfg.slots,
			       .max_seq = m->max_seq,
			       .max_batch = m->cfg.max_batch,
			       .max_inflight = m->n_procs,
			       .prefill_chunk = m->cfg.max_batch,
			       .n_vocab = m->hp.n_vocab,
			       .max_logprobs = 20,
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
			     .metrics = mesh_metrics};
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

static void mesh_on_exit(uv_process_t *proc, int64_t status, int term_signal)
{
	struct mesh_proc *p = proc->data;
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	if (term_signal != 0)
		snprintf(p->why, sizeof p->why, "killed by signal %d", term_signal);
	else
		snprintf(p->why, sizeof p->why, "exited with status %lld", (long long)status);
	p->running = false;
	if (p->state == PROC_READY && !atomic_load(&m->stopping)) {
		/* Noticed now, not at the next heartbeat: stop dispatching at once. */
		lm_error("worker %s (pid %d) %s", p->cfg->name, p->pid, p->why);
		p->state = PROC_DOWN;
		mesh_update_service(m);
	}
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	m->alive--;
	uv_close((uv_handle_t *)proc, NULL);
	if (atomic_load(&m->stopping) && m->alive == 0)
		uv_stop(&m->loop);
}

static int mesh_spawn(struct mesh *m, struct mesh_proc *p, lm_diag *d)
{
	char threads[16], parent[16];
	snprintf(threads, sizeof threads, "%d", p->cfg->threads);
	snprintf(parent, sizeof parent, "%d", (int)getpid());
	const char *level = lm_log_get_level() >= LM_LOG_DEBUG ? "debug" : "info";
	char *args[] = {m->worker_bin,
			"--name",
			p->cfg->name,
			"--control",
			p->cfg->control,
			"--data",
			p->cfg->data,
			"--http",
			p->cfg->http,
			"--backend",
			p->cfg->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu",
			"--threads",
			threads,
			"--parent-pid",
			parent,
			"--log-level",
			(char *)level,
			NULL};
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
					 {.flags = UV_INHERIT_FD, .data.fd = 2},
					 {.flags = UV_INHERIT_FD, .data.fd = 2}};
	uv_process_options_t po = {.exit_cb = mesh_on_exit,
				   .file = m->worker_bin,
				   .args = args,
				   .stdio_count = 3,
				   .stdio = stdio};
	p->proc.data = p;
	/* Stale ipc socket files from a crashed process would make the worker's listen fail. */
	mesh_unlink_ipc(p->cfg->control);
	mesh_unlink_ipc(p->cfg->data);
	if (access(m->worker_bin, X_OK) != 0)
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       m->worker_bin);
	int rv = uv_spawn(&m->loop, &p->proc, &po);
	if (rv != 0)
		return lm_fail(d, LM_EOS, "cannot start %s for worker %s: %s", m->worker_bin,
			       p->cfg->name, uv_strerror(rv));
	p->running = true;
	p->pid = p->proc.pid;
	m->alive++;
	return 0;
}

/* Keepers ask for processes; only the loop thread may create process handles. */
static void mesh_on_spawn_async(uv_async_t *a)
{
	struct mesh *m = a->data;
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++) {
		struct mesh_proc *p = &m->procs[i];
		if (!p->spawn_requested)
			continue;
		lm_diag d = {{0}};
		p->spawn_rc = atomic_load(&m->stopping) ? LM_ECANCELED : mesh_spawn(m, p, &d);
		if (p->spawn_rc != 0)
			snprintf(p->why, sizeof p->why, "%s", lm_diag_str(&d, p->spawn_rc));
		p->spawn_requested = false;
	}
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

static void mesh_on_stop_timer(uv_timer_t *t)
{
	struct mesh *m = t->data;
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++)
		if (m->procs[i].running) {
			lm_warn("%s did not stop in time: killing it", m->procs[i].cfg->name);
			uv_process_kill(&m->procs[i].proc, SIGKILL);
		}
	pthread_mutex_unlock(&m->mu);
}

/* Loop thread: stop everything. */
static void mesh_begin_stop(struct mesh *m, const char *why)
{
	if (atomic_exchange(&m->stopping, true))
		return;
	lm_info("stopping (%s)", why);
	pthread_mutex_lock(&m->mu);
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	api_stop(m->api);
	m->api = NULL;
	sched_stop(m->sched);
	m->sched = NULL;
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++)
		if (m->procs[i].running)
			uv_process_kill(&m->procs[i].proc, SIGTERM);
	pthread_mutex_unlock(&m->mu);
	uv_timer_start(&m->stop_timer, mesh_on_stop_timer, 5000, 0);
	if (m->alive == 0)
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
	pthread_cond_init(&m->cv, NULL);
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
	if ((rv = nng_pull0_open(&m->pull)) != 0 ||
	    (m->pull_open = true, rv = nng_listen(m->pull, data_in, NULL, 0)) != 0) {
		rc = lm_fail(&d, LM_EIO, "cannot listen at %s: %s", data_in, nng_strerror(rv));
		goto early;
	}
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
	}
	lm_info("starting %d workers", m->n_procs);
	for (int32_t i = 0; i < m->n_procs; i++)
		if (keeper_start(m, &m->procs[i]) != 0) {
			mesh_request_stop(m, "cannot start a keeper thread", 1);
			break;
		}
	uv_run(&m->loop, UV_RUN_DEFAULT);

	/* Stopped: keepers see `stopping` at their next wait. */
	atomic_store(&m->stopping, true);
	pthread_mutex_lock(&m->mu);
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++)
		keeper_join(&m->procs[i]);
	api_stop(m->api);
	sched_stop(m->sched);
	uv_walk(&m->loop, mesh_close_walk, NULL);
	uv_run(&m->loop, UV_RUN_DEFAULT);
	uv_loop_close(&m->loop);
	rc = m->exit_status != 0 ? LM_EUNAVAILABLE : 0;
	lm_info("stopped");
early:
	if (rc != 0 && d.msg[0])
		fprintf(stderr, "layermesh up: %s\n", d.msg);
	if (m->push_open)
		nng_close(m->push);
	if (m->pull_open)
		nng_close(m->pull);
	for (int32_t i = 0; m->procs != NULL && i < m->n_procs; i++) {
		if (o->spawn && m->procs[i].cfg != NULL) {
			mesh_unlink_ipc(m->procs[i].cfg->control);
			mesh_unlink_ipc(m->procs[i].cfg->data);
		}
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

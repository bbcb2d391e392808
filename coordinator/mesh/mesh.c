/* mesh.c — `layermesh up`. See mesh.h for the sequence of events.
 *
 * The mesh's state is this file's alone: the keepers (keeper.c), the rollouts (rollout.c) and
 * the endpoints reach it through the calls of mesh_ops.h, which take `mu` themselves.
 *
 * Locking: `mu` guards every field marked "under mu" in struct mesh_proc, struct mesh_child and
 * struct mesh; `cv` is broadcast on every change a waiter may be waiting for (a process exit, a
 * spawn result, stopping), so a keeper waits on it instead of polling. Lock order: a rollouts'
 * mu (rollout.h), then mu, then the scheduler's own lock (sched_* calls are made holding mu).
 */
#include "coordinator/mesh/mesh.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/format/gguf.h"
#include "common/config/mesh_config.h"
#include "common/model/hparams.h"
#include "common/plan/fence.h"
#include "common/tok/tokenizer.h"
#include "common/wire/link.h"
#include "common/wire/transport.h"
#include "coordinator/api/api.h"
#include "coordinator/supervise/keeper.h"
#include "coordinator/supervise/mesh_ops.h"
#include "coordinator/mesh/mesh_status.h"
#include "coordinator/plan/planner.h"
#include "coordinator/supervise/rollout.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/supervise/worker_cmd.h"
#include "lm_config.h"

struct mesh_proc;

/* One process of a worker: the serving one, or a replacement a rollout is starting beside it.
 * A child lives while anything may look at it: a rollout's candidates and the processes they
 * replace stay until the mesh ends. A keeper's process is freed once a newer one has taken its
 * place and its handles are closed (a worker restarted for days must not accumulate them); one
 * that never started is freed as soon as its handles are closed. */
struct mesh_child {
	struct mesh_proc *p; /* the worker it serves or is meant to serve */
	uv_process_t proc;
	/* Its stderr, read by the loop thread: passed through to ours line by line, the last
	 * error line kept, so that how it ended can say why in its own words. */
	uv_pipe_t err;
	char line[512];
	size_t line_len;
	/* Under mu. */
	int open_handles; /* proc and err until their close callbacks ran */
	bool disposable;  /* nothing refers to it any more: free once its handles are closed */
	bool keeper_made; /* started by the worker's keeper (not a rollout's candidate) */
	bool running;     /* not yet reaped */
	bool retiring;    /* its exit is expected (replaced, killed by its keeper, rolled back) */
	int pid;
	char last_error[300];    /* its last "error:" line, without the program's prefix */
	char last_line[300];     /* its last line of any kind */
	struct mesh_addrs at;    /* where it listens */
	char why[512];           /* how it ended */
	struct mesh_child *next; /* every child of the mesh */
};

struct mesh_proc {
	struct mesh *mesh;
	const struct mesh_worker *cfg;
	struct keeper keeper;
	/* Under mu. */
	struct mesh_child *child; /* the serving process (spawn mode), or NULL */
	char bin[PATH_MAX];       /* the program a (re)start runs: a redeploy changes it */
	struct mesh_addrs at;     /* where the serving process listens */
	int pid;
	enum mesh_worker_state state;
	int restarts;            /* the current streak (mesh_ops.h) */
	uint64_t restarts_total; /* every restart since the mesh came up */
	uint64_t digest;         /* of its slice as first served; 0 before its first READY */
	char why[512];
	struct wire_ready ready;
	struct mesh_progress progress;
};

struct mesh {
	const struct mesh_opts *o;
	struct mesh_config cfg;
	struct lm_tls tls; /* the [tls] files, for every tls+tcp:// address */
	gguf_file *file;   /* the model's metadata: tokenizer and fingerprint */
	struct lm_hparams hp;
	uint64_t fingerprint;
	int32_t max_seq;
	char model_name[128];
	jinja_tmpl *jinja;     /* the model's chat template, parsed; NULL: none or mesh.toml's */
	enum chat_format chat; /* recognised or named; with jinja NULL, CHAT_NONE refuses chat */
	char chat_why[400];
	/* Non-empty when a plane leaves this machine in the clear: said at start and on /readyz. */
	char plain_note[512];
	struct fence_plan plan;
	tok_vocab *vocab;
	struct spec_source draft; /* [speculative]'s draft source; iface NULL: none */
	char worker_bin[PATH_MAX];

	uv_loop_t loop;
	uv_signal_t sig_int, sig_term;
	uv_async_t spawn_async; /* keepers and rollouts asking the loop thread to spawn */
	uv_async_t stop_async;  /* anyone asking the loop to stop the mesh */
	uv_timer_t stop_timer;
	struct mesh_child *children; /* under mu */
	/* Spawn requests from other threads, under mu: the loop thread answers them. */
	struct mesh_spawn *spawns;

	struct mesh_proc *procs;
	int32_t n_procs;
	nng_socket push, pull;
	struct lm_link head; /* push's dial to the first worker; a redeploy of it re-points it */
	bool push_open, pull_open;
	bool pull_listening; /* data_in is ours: its socket file may be cleaned up at the end */
	struct sched *sched; /* under mu: set once, when the mesh starts serving */
	struct api *api;
	struct rollouts ro; /* its own lock */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic bool stopping;
	/* Under mu. */
	bool serving;   /* every worker has been ready at least once */
	bool had_fault; /* a worker went down after serving: KV must be rebuilt */
	bool available; /* the scheduler accepts work (no worker given up on) */
	/* Under stop_mu (taken alone: mesh_request_stop may be called holding mu). */
	pthread_mutex_t stop_mu;
	char stop_why[512];
	int exit_status;
};

/* A request to start a process, answered by the loop thread. */
struct mesh_spawn {
	struct mesh_proc *p;
	const char *bin;
	const struct mesh_addrs *at;
	bool done;
	int rc;
	char why[512];
	struct mesh_child *child;
	struct mesh_spawn *next;
};

static void mesh_request_stop(struct mesh *m, const char *why, int exit_status);

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

/* Removes an ipc socket file of ours that nothing listens on any more (a worker that was
 * killed leaves its files behind). A socket a live process listens on is never touched: it may
 * be another mesh's. */
static void mesh_remove_stale_ipc(const char *addr)
{
	bool removed = false;
	if (addr != NULL && lm_ipc_clear_stale(addr, &removed, NULL) == 0 && removed)
		lm_debug("removed the stale ipc socket %s", addr + 6);
}

/* ------------------------------------------------------------------ the redeploy endpoints */

static cJSON *mesh_redeploy(void *arg, const char *body, size_t len, int *status)
{
	struct mesh *m = arg;
	return rollout_request(&m->ro, body, len, status);
}

static cJSON *mesh_rollout(void *arg)
{
	struct mesh *m = arg;
	return rollout_status(&m->ro);
}

/* ------------------------------------------------------------------ serving */

/* How far below its high-water mark a slot's sliding-window rings can roll back (the prefix
 * cache's bound, sched_cfg.ring_rollback); -1 when no layer slides. */
static int32_t mesh_ring_rollback(const struct mesh *m)
{
	for (int32_t l = 0; l < m->hp.n_layer; l++)
		if (m->hp.layer[l].window > 0)
			return kv_geom_ring_extra(m->cfg.max_batch, m->cfg.max_draft) + 1;
	return -1;
}

/* How conversations are rendered: by the model's own template through the Jinja engine, or
 * by the format mesh.toml's [model] chat_template names (for a model without a template). The
 * format recognised in a template gives its end-of-turn stops. */
static int mesh_chat_format(struct mesh *m, lm_diag *d)
{
	int rc = chat_format_resolve(m->cfg.chat_template, m->file, &m->chat, m->chat_why,
				     sizeof m->chat_why, d);
	if (rc != 0) {
		lm_diag_prefix(d, "%s", m->cfg.path);
		return rc;
	}
	const char *t = NULL;
	if (m->cfg.chat_template == NULL && gguf_find(m->file, "tokenizer.chat_template") != NULL &&
	    gguf_get_str(m->file, "tokenizer.chat_template", &t, NULL) == 0) {
		lm_diag jd = {{0}};
		m->jinja = jinja_parse(t, strlen(t), &jd);
		if (m->jinja == NULL && m->chat == CHAT_NONE)
			snprintf(m->chat_why, sizeof m->chat_why,
				 "the model's chat template cannot be parsed (%.200s); set [model] "
				 "chat_template in mesh.toml to one of: %s",
				 jd.msg, chat_format_names());
		else if (m->jinja == NULL)
			lm_warn("the model's chat template cannot be parsed (%s): rendering it as "
				"%s",
				jd.msg, chat_format_name(m->chat));
	}
	if (m->jinja != NULL)
		lm_info("chat template: the model's own, by the Jinja engine (%s)",
			m->chat != CHAT_NONE ? chat_format_name(m->chat) : "no known family");
	else if (m->chat != CHAT_NONE && m->chat_why[0] != '\0')
		lm_warn("chat template: %s: %s", chat_format_name(m->chat), m->chat_why);
	else if (m->chat != CHAT_NONE)
		lm_info("chat template: %s%s", chat_format_name(m->chat),
			m->cfg.chat_template != NULL ? " (mesh.toml)" : "");
	else
		lm_info("no chat: %s", m->chat_why);
	return 0;
}

/* [speculative]'s draft source, before any worker starts (a draft model that cannot be loaded,
 * or whose vocabulary is not the model's, stops `layermesh up` at once). */
static int mesh_open_draft(struct mesh *m, lm_diag *d)
{
	const struct mesh_config *c = &m->cfg;
	int rc = 0;
	if (c->spec == MESH_SPEC_NGRAM) {
		rc = spec_ngram_init(&m->draft, c->ngram_min, c->ngram_max, d);
	} else if (c->spec == MESH_SPEC_MODEL) {
		struct spec_draft_cfg dc = {.model = c->draft_model,
					    .n_vocab = m->hp.n_vocab,
					    .vocab = m->vocab,
					    .slots = c->slots + MESH_PROBE_SLOTS,
					    .max_seq = m->max_seq,
					    .max_draft = c->max_draft,
					    .threads = c->draft_threads,
					    .kv = kv_types_uniform(LM_F32, LM_F32)};
		rc = spec_draft_init(&m->draft, &dc, d);
	}
	if (rc == 0 && m->draft.iface != NULL)
		lm_info("speculative decoding: %s drafts of up to %d tokens%s%s",
			m->draft.iface->name, (int)c->max_draft,
			c->draft_model != NULL ? " from " : "",
			c->draft_model != NULL ? c->draft_model : "");
	return rc;
}

/* Starts the data plane, the scheduler and the API when every worker is first ready (from
 * mesh_update_service, under mu, once). */
static int mesh_start_serving(struct mesh *m, lm_diag *d)
{
	int rv, rc;
	if ((rv = nng_push0_open(&m->push)) != 0)
		return lm_fail(d, LM_EIO, "push socket: %s", nng_strerror(rv));
	m->push_open = true;
	nng_socket_set_ms(m->push, NNG_OPT_SENDTIMEO, 1000);
	if ((rc = lm_link_init(&m->head, m->push, &m->tls, d)) != 0 ||
	    (rc = lm_link_dial(&m->head, m->procs[0].at.data, d)) != 0)
		return rc;
	struct sched_cfg sc = {.fingerprint = m->fingerprint,
			       .max_queued = m->cfg.max_queued,
			       .slots = m->cfg.slots + MESH_PROBE_SLOTS,
			       .reserved_slots = MESH_PROBE_SLOTS,
			       .max_seq = m->max_seq,
			       .max_batch = m->cfg.max_batch,
			       .max_inflight = m->cfg.batches_in_flight > 0
						       ? m->cfg.batches_in_flight
						       : m->n_procs,
			       .prefill_chunk = m->cfg.max_batch,
			       .n_vocab = m->hp.n_vocab,
			       .max_logprobs = WIRE_MAX_LOGPROBS,
			       .batch_timeout_ms = m->cfg.request_timeout_ms,
			       .request_timeout_ms = m->cfg.request_timeout_ms,
			       .n_workers = m->n_procs,
			       .draft = m->draft,
			       .max_draft = m->cfg.max_draft,
			       .prefix_cache = m->cfg.prefix_cache,
			       .ring_rollback = mesh_ring_rollback(m),
			       .push = &m->head,
			       .pull = m->pull};
	/* A sequence ends where `layermesh run` ends it: at any end-of-generation id (EOS, EOT, EOM,
	 * <|im_end|>, <turn|>, ...: the set llama.cpp's vocabulary load builds) or at BOS. */
	size_t n_eog;
	const int32_t *eog = tok_eog_ids(m->vocab, &n_eog);
	const size_t max_stops = sizeof sc.stop_ids / sizeof sc.stop_ids[0];
	if (n_eog + 1 > max_stops)
		return lm_fail(
			d, LM_EUNSUPPORTED,
			"the vocabulary has %zu end-of-generation tokens; the scheduler takes "
			"at most %zu",
			n_eog, max_stops - 1);
	for (size_t i = 0; i < n_eog; i++)
		sc.stop_ids[sc.n_stop_ids++] = eog[i];
	if (tok_bos(m->vocab) >= 0 && !tok_is_eog(m->vocab, tok_bos(m->vocab)))
		sc.stop_ids[sc.n_stop_ids++] = tok_bos(m->vocab);
	if ((rc = sched_start(&m->sched, &sc, d)) != 0)
		return rc;
	struct api_cfg ac = {
		.http = m->cfg.http,
		.model_name = m->model_name,
		.auth_token = m->cfg.auth_token,
		.fingerprint = m->fingerprint,
		.max_seq = m->max_seq,
		.max_queued = m->cfg.max_queued,
		.jinja = m->jinja,
		.chat = m->chat,
		.chat_why = m->chat_why,
		.ui = m->cfg.ui,
		.http_limits = {.read_timeout_ms = (int64_t)(m->cfg.http_read_timeout * 1000),
				.idle_timeout_ms = (int64_t)(m->cfg.http_idle_timeout * 1000),
				.max_conns = m->cfg.max_connections,
				.cors_origins = (const char *const *)m->cfg.cors_origins,
				.n_cors = m->cfg.n_cors},
		.vocab = m->vocab,
		.sched = m->sched,
		.mesh = m,
		.ready = mesh_status_ready,
		.status = mesh_status_json,
		.metrics = mesh_status_metrics,
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

/* Recomputes what the scheduler and /readyz should see from every worker's state; under mu. */
static void mesh_update_service(struct mesh *m)
{
	const struct mesh_proc *failed = NULL, *away = NULL;
	if (atomic_load(&m->stopping))
		return; /* mesh_begin_stop made the service unavailable for good */
	for (int32_t i = 0; i < m->n_procs; i++) {
		const struct mesh_proc *p = &m->procs[i];
		if (p->state == MESH_WORKER_FAILED && failed == NULL)
			failed = p;
		else if (p->state != MESH_WORKER_READY && away == NULL)
			away = p;
	}
	if (!m->serving) {
		/* Bring-up: a worker given up on ends `layermesh up`; the last one ready starts
		 * the service. */
		if (failed != NULL) {
			mesh_request_stop(m, failed->why, 1);
		} else if (away == NULL) {
			lm_diag d = {{0}};
			int rc = mesh_start_serving(m, &d);
			if (rc != 0)
				mesh_request_stop(m, lm_diag_str(&d, rc), 1);
		}
		return;
	}
	char why[700];
	if (failed != NULL) {
		snprintf(why, sizeof why, "%s", failed->why);
		if (m->available)
			sched_set_available(m->sched, false, why);
		for (int32_t i = 0; i < m->n_procs; i++)
			if (m->procs[i].state != MESH_WORKER_READY)
				sched_blame(m->sched, i);
		m->available = false;
		m->had_fault = true;
		return;
	}
	if (away != NULL) {
		snprintf(why, sizeof why, "worker %s is restarting (%s)", away->cfg->name,
			 away->why[0] ? away->why : "starting");
		for (int32_t i = 0; i < m->n_procs; i++)
			if (m->procs[i].state != MESH_WORKER_READY)
				sched_blame(m->sched, i);
		sched_pause(m->sched, why);
		m->had_fault = true;
		return;
	}
	/* Every worker ready. */
	if (!m->available) {
		sched_set_available(m->sched, true, NULL);
		m->available = true;
	}
	if (m->had_fault)
		lm_info("every worker is back: rebuilding the caches of live sequences");
	sched_resume(m->sched, m->had_fault);
	m->had_fault = false;
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

/* Frees c when nothing refers to it and its handles are closed; under mu. */
static void mesh_child_maybe_free(struct mesh *m, struct mesh_child *c)
{
	if (!c->disposable || c->open_handles > 0 || c->running)
		return;
	for (struct mesh_child **q = &m->children; *q != NULL; q = &(*q)->next)
		if (*q == c) {
			*q = c->next;
			break;
		}
	free(c);
}

/* Close callback of a child's handles (loop thread). */
static void mesh_child_closed(uv_handle_t *h)
{
	struct mesh_child *c = h->data;
	struct mesh *m = c->p->mesh;
	pthread_mutex_lock(&m->mu);
	c->open_handles--;
	mesh_child_maybe_free(m, c);
	pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------------ the children's stderr */

/* One line of a child's stderr: passed on to ours; an error line is remembered (under mu). */
static void mesh_child_line(struct mesh_child *c, const char *line, size_t n)
{
	char out[600];
	int k = snprintf(out, sizeof out, "%.*s\n", (int)(n < 590 ? n : 590), line);
	ssize_t w = write(STDERR_FILENO, out, (size_t)k);
	(void)w;
	const char *e = memmem(line, n, " error: ", 8);
	struct mesh *m = c->p->mesh;
	pthread_mutex_lock(&m->mu);
	if (n > 0)
		snprintf(c->last_line, sizeof c->last_line, "%.*s", (int)n, line);
	if (e != NULL) {
		size_t off = (size_t)(e + 8 - line);
		snprintf(c->last_error, sizeof c->last_error, "%.*s", (int)(n - off), line + off);
	}
	pthread_mutex_unlock(&m->mu);
}

static void mesh_child_bytes(struct mesh_child *c, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n' || c->line_len == sizeof c->line) {
			mesh_child_line(c, c->line, c->line_len);
			c->line_len = 0;
			if (p[i] == '\n')
				continue;
		}
		c->line[c->line_len++] = p[i];
	}
}

static void mesh_err_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	static char chunk[4096]; /* the loop thread's alone */
	(void)h;
	(void)hint;
	*buf = uv_buf_init(chunk, sizeof chunk);
}

static void mesh_err_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct mesh_child *c = s->data;
	if (n > 0)
		mesh_child_bytes(c, buf->base, (size_t)n);
	else if (n < 0 && !uv_is_closing((uv_handle_t *)s))
		uv_close((uv_handle_t *)s, mesh_child_closed);
}

/* What is still in the pipe when the exit is reported (the error line a dying process wrote
 * last may not have been read yet). */
static void mesh_err_drain(struct mesh_child *c)
{
	uv_os_fd_t fd;
	char buf[4096];
	if (uv_is_closing((uv_handle_t *)&c->err) || uv_fileno((uv_handle_t *)&c->err, &fd) != 0)
		return;
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		mesh_child_bytes(c, buf, (size_t)n);
	}
}

static void mesh_on_exit(uv_process_t *proc, int64_t status, int term_signal)
{
	struct mesh_child *c = proc->data;
	struct mesh_proc *p = c->p;
	struct mesh *m = p->mesh;
	mesh_err_drain(c);
	/* A process that was killed could not remove its sockets: they are stale now (nothing
	 * listens there until the next process of the worker starts, which waits for this). */
	if (term_signal != 0) {
		mesh_remove_stale_ipc(c->at.control);
		mesh_remove_stale_ipc(c->at.data);
	}
	pthread_mutex_lock(&m->mu);
	if (term_signal != 0)
		snprintf(c->why, sizeof c->why, "killed by signal %d", term_signal);
	else /* its own last words: its last error line, or the last line of a foreign program */
		snprintf(c->why, sizeof c->why, "exited with status %lld%s%s", (long long)status,
			 c->last_error[0] || c->last_line[0] ? ": " : "",
			 c->last_error[0] ? c->last_error : c->last_line);
	c->running = false;
	if (c == p->child && !c->retiring) {
		snprintf(p->why, sizeof p->why, "%s", c->why);
		if (p->state == MESH_WORKER_READY && !atomic_load(&m->stopping)) {
			/* Noticed now, not at the next heartbeat: stop dispatching at once. */
			lm_error("worker %s (pid %d) %s", p->cfg->name, c->pid, c->why);
			p->state = MESH_WORKER_DOWN;
			mesh_update_service(m);
		}
	}
	pthread_cond_broadcast(&m->cv);
	bool last = atomic_load(&m->stopping) && mesh_running(m) == 0;
	pthread_mutex_unlock(&m->mu);
	uv_close((uv_handle_t *)proc, mesh_child_closed);
	if (last)
		uv_stop(&m->loop);
}

/* Loop thread, under mu: starts the process of a spawn request. */
static int mesh_spawn(struct mesh *m, struct mesh_spawn *r, lm_diag *d)
{
	struct mesh_proc *p = r->p;
	struct worker_cmd wc = {.bin = r->bin,
				.name = p->cfg->name,
				.control = r->at->control,
				.data = r->at->data,
				.http = r->at->http,
				.backend = p->cfg->backend,
				.device = p->cfg->device,
				.threads = p->cfg->threads,
				.kernels = p->cfg->kernels,
				.parent_pid = (int)getpid(),
				.log_level = lm_log_get_level() >= LM_LOG_DEBUG ? "debug" : "info",
				.memory_limit = p->cfg->memory_limit,
				.tls = &m->tls,
				.insecure = m->cfg.insecure};
	struct worker_argv args;
	worker_cmd_argv(&wc, &args);
	struct mesh_child *c = calloc(1, sizeof *c);
	if (c == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	c->p = p;
	c->at = *r->at;
	c->proc.data = c;
	c->err.data = c;
	/* Children are freed with the mesh, never before: their handles are closed by then. */
	c->next = m->children;
	m->children = c;
	c->open_handles = 2;
	uv_pipe_init(&m->loop, &c->err, 0);
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
					 {.flags = UV_INHERIT_FD, .data.fd = 2},
					 {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE,
					  .data.stream = (uv_stream_t *)&c->err}};
	uv_process_options_t po = {.exit_cb = mesh_on_exit,
				   .file = r->bin,
				   .args = args.argv,
				   .stdio_count = 3,
				   .stdio = stdio};
	if (access(r->bin, X_OK) != 0) {
		c->open_handles = 1;
		c->disposable = true;
		uv_close((uv_handle_t *)&c->err, mesh_child_closed);
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       r->bin);
	}
	/* (A stale ipc socket a killed process left is the worker's listener's to replace.) */
	int rv = uv_spawn(&m->loop, &c->proc, &po);
	if (rv != 0) {
		/* The handles joined the loop even so: they must be closed (the child itself is
		 * freed with the mesh). */
		c->disposable = true;
		uv_close((uv_handle_t *)&c->proc, mesh_child_closed);
		uv_close((uv_handle_t *)&c->err, mesh_child_closed);
		return lm_fail(d, LM_EOS, "cannot start %s for worker %s: %s", r->bin, p->cfg->name,
			       uv_strerror(rv));
	}
	uv_read_start((uv_stream_t *)&c->err, mesh_err_alloc, mesh_err_read);
	c->running = true;
	c->pid = c->proc.pid;
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

/* Asks the loop thread for a process for p and waits for its answer (any other thread). */
static int mesh_request_spawn(struct mesh *m, struct mesh_proc *p, const char *bin,
			      const struct mesh_addrs *at, struct mesh_child **child, lm_diag *d)
{
	struct mesh_spawn r = {.p = p, .bin = bin, .at = at};
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

/* Sends sig to a child that has not been reaped; under mu. kill(2) on the pid: uv_process_kill
 * is for the loop thread. The child is reaped only by the loop, under mu, so while `running`
 * is true the pid is still ours. */
static void mesh_signal_child(struct mesh_child *c, int sig)
{
	if (c != NULL && c->running && c->pid > 0)
		kill(c->pid, sig);
}

/* Whether c has been reaped, and how it ended; under mu. */
static bool mesh_child_ended_locked(const struct mesh_child *c, char *why, size_t cap)
{
	bool ended = c != NULL && !c->running;
	snprintf(why, cap, "%s", ended ? c->why : "");
	return ended;
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

/* Asks the loop thread to stop the mesh (from any thread, holding mu or not). */
static void mesh_request_stop(struct mesh *m, const char *why, int exit_status)
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

/* ------------------------------------------------------------------ mesh_ops.h: fixed state */

const struct mesh_config *mesh_cfg(const struct mesh *m)
{
	return &m->cfg;
}

const struct mesh_worker *mesh_worker_cfg(const struct mesh *m, int32_t j)
{
	return m->procs[j].cfg;
}

int32_t mesh_n_workers(const struct mesh *m)
{
	return m->n_procs;
}

const struct fence_plan *mesh_plan(const struct mesh *m)
{
	return &m->plan;
}

const struct lm_hparams *mesh_hparams(const struct mesh *m)
{
	return &m->hp;
}

const tok_vocab *mesh_vocab(const struct mesh *m)
{
	return m->vocab;
}

const char *mesh_model_name(const struct mesh *m)
{
	return m->model_name;
}

uint64_t mesh_fingerprint(const struct mesh *m)
{
	return m->fingerprint;
}

int32_t mesh_max_seq(const struct mesh *m)
{
	return m->max_seq;
}

const struct lm_tls *mesh_tls(const struct mesh *m)
{
	return &m->tls;
}

const char *mesh_plain_note(const struct mesh *m)
{
	return m->plain_note;
}

bool mesh_spawns(const struct mesh *m)
{
	return m->o->spawn;
}

int mesh_handshake_ms(const struct mesh *m)
{
	return m->o->handshake_timeout_s * 1000;
}

int mesh_worker_timeout_ms(const struct mesh *m)
{
	return m->cfg.worker_timeout_ms;
}

/* ------------------------------------------------------------------ mesh_ops.h: the mesh */

bool mesh_stopping(struct mesh *m)
{
	return atomic_load(&m->stopping);
}

void mesh_sleep(struct mesh *m, int64_t ms)
{
	pthread_mutex_lock(&m->mu);
	int64_t until = lm_now_ms() + ms;
	while (!atomic_load(&m->stopping) && lm_now_ms() < until)
		lm_cond_wait_ms(&m->cv, &m->mu, until - lm_now_ms());
	pthread_mutex_unlock(&m->mu);
}

struct sched *mesh_sched(struct mesh *m)
{
	pthread_mutex_lock(&m->mu);
	struct sched *s = m->sched;
	pthread_mutex_unlock(&m->mu);
	return s;
}

bool mesh_redeployable(struct mesh *m)
{
	pthread_mutex_lock(&m->mu);
	bool ok = m->serving && m->available && !m->had_fault;
	pthread_mutex_unlock(&m->mu);
	return ok;
}

struct rollouts *mesh_rollouts(struct mesh *m)
{
	return &m->ro;
}

/* Under mu. */
static void mesh_view(const struct mesh_proc *p, struct mesh_worker_view *v)
{
	*v = (struct mesh_worker_view){.state = p->state,
				       .pid = p->pid,
				       .restarts = p->restarts,
				       .restarts_total = p->restarts_total,
				       .ready = p->ready,
				       .digest = p->digest};
	snprintf(v->why, sizeof v->why, "%s", p->why);
}

void mesh_worker_view(struct mesh *m, int32_t j, struct mesh_worker_view *out)
{
	pthread_mutex_lock(&m->mu);
	mesh_view(&m->procs[j], out);
	pthread_mutex_unlock(&m->mu);
}

void mesh_workers_view(struct mesh *m, struct mesh_worker_view *out)
{
	pthread_mutex_lock(&m->mu);
	for (int32_t i = 0; i < m->n_procs; i++)
		mesh_view(&m->procs[i], &out[i]);
	pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------------ mesh_ops.h: one worker */

void mesh_worker_addrs(struct mesh *m, int32_t j, struct mesh_addrs *out)
{
	pthread_mutex_lock(&m->mu);
	*out = m->procs[j].at;
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_bin(struct mesh *m, int32_t j, char *out, size_t cap)
{
	pthread_mutex_lock(&m->mu);
	snprintf(out, cap, "%s", m->procs[j].bin);
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_assignment(struct mesh *m, int32_t j, struct wire_assign *a)
{
	pthread_mutex_lock(&m->mu);
	planner_assignment(&m->cfg, &m->plan, j, m->max_seq, m->cfg.slots + MESH_PROBE_SLOTS,
			   j + 1 < m->n_procs ? m->procs[j + 1].at.data : m->cfg.data_in, a);
	pthread_mutex_unlock(&m->mu);
}

int mesh_worker_spawn(struct mesh *m, int32_t j, lm_diag *d)
{
	struct mesh_proc *p = &m->procs[j];
	char bin[PATH_MAX];
	struct mesh_addrs at;
	pthread_mutex_lock(&m->mu);
	snprintf(bin, sizeof bin, "%s", p->bin);
	at = p->at;
	pthread_mutex_unlock(&m->mu);
	struct mesh_child *c = NULL;
	int rc = mesh_request_spawn(m, p, bin, &at, &c, d);
	if (rc == 0) {
		pthread_mutex_lock(&m->mu);
		struct mesh_child *old = p->child;
		c->keeper_made = true;
		p->child = c;
		p->pid = c->pid;
		if (old != NULL && old->keeper_made) {
			old->disposable = true;
			mesh_child_maybe_free(m, old);
		}
		pthread_mutex_unlock(&m->mu);
	}
	return rc;
}

bool mesh_worker_running(struct mesh *m, int32_t j)
{
	pthread_mutex_lock(&m->mu);
	const struct mesh_child *c = m->procs[j].child;
	bool r = c != NULL && c->running;
	pthread_mutex_unlock(&m->mu);
	return r;
}

bool mesh_worker_ended(struct mesh *m, int32_t j, char *why, size_t cap)
{
	pthread_mutex_lock(&m->mu);
	bool ended = mesh_child_ended_locked(m->procs[j].child, why, cap);
	pthread_mutex_unlock(&m->mu);
	return ended;
}

void mesh_worker_wait_exit(struct mesh *m, int32_t j)
{
	struct mesh_proc *p = &m->procs[j];
	pthread_mutex_lock(&m->mu);
	while (p->child != NULL && p->child->running && !atomic_load(&m->stopping))
		lm_cond_wait_ms(&m->cv, &m->mu, 1000);
	pthread_mutex_unlock(&m->mu);
}

bool mesh_worker_wait_exit_ms(struct mesh *m, int32_t j, int64_t ms)
{
	struct mesh_proc *p = &m->procs[j];
	int64_t until = lm_now_ms() + ms;
	pthread_mutex_lock(&m->mu);
	while (p->child != NULL && p->child->running && !atomic_load(&m->stopping) &&
	       lm_cond_wait_until(&m->cv, &m->mu, until))
		;
	bool ended = p->child == NULL || !p->child->running;
	pthread_mutex_unlock(&m->mu);
	return ended;
}

void mesh_worker_kill(struct mesh *m, int32_t j)
{
	pthread_mutex_lock(&m->mu);
	struct mesh_child *c = m->o->spawn ? m->procs[j].child : NULL;
	if (c != NULL && c->running) {
		/* Expected from now on: its end must not overwrite the reason it is killed for. */
		c->retiring = true;
		mesh_signal_child(c, SIGKILL);
		int64_t until = lm_now_ms() + 5000;
		while (c->running && lm_now_ms() < until)
			lm_cond_wait_ms(&m->cv, &m->mu, 100);
	}
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_set_state(struct mesh *m, int32_t j, enum mesh_worker_state state, const char *why)
{
	struct mesh_proc *p = &m->procs[j];
	pthread_mutex_lock(&m->mu);
	p->state = state;
	if (why != NULL)
		snprintf(p->why, sizeof p->why, "%.*s", (int)sizeof p->why - 1, why);
	mesh_update_service(m);
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_set_why(struct mesh *m, int32_t j, const char *why)
{
	struct mesh_proc *p = &m->procs[j];
	pthread_mutex_lock(&m->mu);
	snprintf(p->why, sizeof p->why, "%s", why);
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_why(struct mesh *m, int32_t j, char *out, size_t cap)
{
	pthread_mutex_lock(&m->mu);
	snprintf(out, cap, "%s", m->procs[j].why);
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_note_restart(struct mesh *m, int32_t j, int streak)
{
	pthread_mutex_lock(&m->mu);
	m->procs[j].restarts = streak;
	m->procs[j].restarts_total++;
	pthread_mutex_unlock(&m->mu);
}

int mesh_check_digest(struct mesh *m, int32_t j, uint64_t digest, lm_diag *d)
{
	struct mesh_proc *p = &m->procs[j];
	int rc = 0;
	pthread_mutex_lock(&m->mu);
	if (p->digest == 0)
		p->digest = digest;
	else if (digest != p->digest)
		rc = lm_fail(d, LM_EFINGERPRINT,
			     "worker %s's slice of %s has changed: its tensors' digest is %016llx; "
			     "the mesh serves %016llx (the model file was replaced under the "
			     "running mesh: put it back, or restart the mesh on the new file)",
			     p->cfg->name, m->cfg.model_path, (unsigned long long)digest,
			     (unsigned long long)p->digest);
	pthread_mutex_unlock(&m->mu);
	return rc;
}

void mesh_worker_set_progress(struct mesh *m, int32_t j, const struct mesh_progress *pg)
{
	pthread_mutex_lock(&m->mu);
	m->procs[j].progress = *pg;
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_progress(struct mesh *m, int32_t j, struct mesh_progress *out)
{
	pthread_mutex_lock(&m->mu);
	*out = m->procs[j].progress;
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_set_pid(struct mesh *m, int32_t j, int pid)
{
	pthread_mutex_lock(&m->mu);
	m->procs[j].pid = pid;
	pthread_mutex_unlock(&m->mu);
}

void mesh_worker_set_ready(struct mesh *m, int32_t j, const struct wire_ready *ready)
{
	pthread_mutex_lock(&m->mu);
	m->procs[j].ready = *ready;
	pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------------ mesh_ops.h: replacements */

int mesh_child_spawn(struct mesh *m, int32_t j, const char *bin, const struct mesh_addrs *at,
		     struct mesh_child **child, lm_diag *d)
{
	return mesh_request_spawn(m, &m->procs[j], bin, at, child, d);
}

bool mesh_child_running(struct mesh *m, const struct mesh_child *c)
{
	pthread_mutex_lock(&m->mu);
	bool r = c != NULL && c->running;
	pthread_mutex_unlock(&m->mu);
	return r;
}

bool mesh_child_ended(struct mesh *m, const struct mesh_child *c, char *why, size_t cap)
{
	pthread_mutex_lock(&m->mu);
	bool ended = mesh_child_ended_locked(c, why, cap);
	pthread_mutex_unlock(&m->mu);
	return ended;
}

void mesh_child_retire(struct mesh *m, struct mesh_child *c, int sig)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&m->mu);
	c->retiring = true;
	mesh_signal_child(c, sig);
	pthread_mutex_unlock(&m->mu);
}

struct mesh_child *mesh_commit(struct mesh *m, int32_t j, struct mesh_child *c,
			       const struct mesh_addrs *at, const char *bin,
			       const struct wire_ready *ready, struct mesh_addrs *was)
{
	struct mesh_proc *p = &m->procs[j];
	pthread_mutex_lock(&m->mu);
	struct mesh_child *old = p->child;
	if (old != NULL)
		old->retiring = true;
	p->child = c;
	p->pid = c->pid;
	p->ready = *ready;
	*was = p->at;
	p->at = *at;
	snprintf(p->bin, sizeof p->bin, "%s", bin);
	pthread_mutex_unlock(&m->mu);
	return old;
}

int mesh_repoint_head(struct mesh *m, const char *addr, lm_diag *d)
{
	return lm_link_dial(&m->head, addr, d);
}

/* ------------------------------------------------------------------ up */

/* The ring's return: PULL at [coordinator] data_in. */
static int mesh_listen_data_in(struct mesh *m, lm_diag *d)
{
	/* data_in is where the last worker dials; with --listen-any its host may name this process
	 * only through a DNS name or a service that it cannot bind. */
	char data_in[512], why[256];
	int rv, rc;
	if (mesh_listen_address(m->cfg.data_in, false, m->o->listen_any, data_in, sizeof data_in,
				why, sizeof why) != 0)
		return lm_fail(d, LM_ECONFIG, "[coordinator] data_in %s: %s", m->cfg.data_in, why);
	if ((rv = nng_pull0_open(&m->pull)) != 0)
		return lm_fail(d, LM_EIO, "pull socket: %s", nng_strerror(rv));
	m->pull_open = true;
	m->tls = (struct lm_tls){m->cfg.tls_ca_file, m->cfg.tls_cert_file, m->cfg.tls_key_file};
	/* A stale data_in socket from a coordinator that was killed is replaced by lm_listen,
	 * which says so; one that a running process listens on is refused, never removed. Not
	 * guarded (listen_guard.h): probing the coordinator's own data_in left NNG's reaper stuck
	 * in a 60-worker mesh under ASan. */
	if ((rc = lm_listen(m->pull, data_in, &m->tls, NULL, d)) != 0)
		return rc;
	m->pull_listening = true;
	/* What comes back is TOKENS, RELEASE and ERROR: bounded by the slots and the logprobs. */
	struct wire_limits back = {.slots = m->cfg.slots + MESH_PROBE_SLOTS,
				   .dim = 1,
				   .max_batch = m->cfg.max_batch,
				   .max_seqs = m->cfg.slots + MESH_PROBE_SLOTS,
				   .max_logprobs = WIRE_MAX_LOGPROBS};
	nng_socket_set_size(m->pull, NNG_OPT_RECVMAXSZ, wire_max_data_message(&back));
	return 0;
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
	int rc;

	if (m == NULL)
		return 1;
	m->o = o;
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->stop_mu, NULL);
	lm_cond_init(&m->cv);
	rollout_init(&m->ro, m);
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
	if ((rc = mesh_chat_format(m, &d)) != 0)
		goto early;
	m->max_seq = planner_max_seq(&m->cfg, &m->hp);
	const char *base = strrchr(m->cfg.model_path, '/');
	snprintf(m->model_name, sizeof m->model_name, "%s", base ? base + 1 : m->cfg.model_path);
	char *dot = strrchr(m->model_name, '.');
	if (dot != NULL && strcmp(dot, ".gguf") == 0)
		*dot = '\0';
	fence_plan_write_table(&m->plan, stderr);
	char hosts[200];
	if (mesh_config_plain_hosts(&m->cfg, hosts, sizeof hosts, NULL) > 0) {
		snprintf(m->plain_note, sizeof m->plain_note,
			 "no TLS (insecure = true): the control and data planes reach %s over "
			 "plain tcp://, where anyone who can reach a worker can read the hidden "
			 "states and forge ring messages (use tls+tcp:// and [tls])",
			 hosts);
		lm_warn("%s", m->plain_note);
	}
	if ((rc = mesh_open_draft(m, &d)) != 0 || (o->spawn && (rc = mesh_find_worker(m, &d)) != 0))
		goto early;

	m->n_procs = m->cfg.n_workers;
	m->procs = calloc((size_t)m->n_procs, sizeof *m->procs);
	if (m->procs == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto early;
	}
	if ((rc = mesh_listen_data_in(m, &d)) != 0)
		goto early;

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
		p->state = MESH_WORKER_STARTING;
		snprintf(p->bin, sizeof p->bin, "%s", m->worker_bin);
		snprintf(p->at.data, sizeof p->at.data, "%s", p->cfg->data);
		snprintf(p->at.control, sizeof p->at.control, "%s", p->cfg->control);
		snprintf(p->at.http, sizeof p->at.http, "%s", p->cfg->http);
	}
	lm_info("starting %d workers", m->n_procs);
	for (int32_t i = 0; i < m->n_procs; i++)
		if (keeper_start(&m->procs[i].keeper, m, i) != 0) {
			mesh_request_stop(m, "cannot start a keeper thread", 1);
			break;
		}
	uv_run(&m->loop, UV_RUN_DEFAULT);

	/* Stopped: keepers and a rollout see `stopping` at their next wait. */
	atomic_store(&m->stopping, true);
	pthread_mutex_lock(&m->mu);
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	rollout_stop(&m->ro);
	for (int32_t i = 0; i < m->n_procs; i++) {
		keeper_stop(&m->procs[i].keeper);
		keeper_fini(&m->procs[i].keeper);
	}
	/* The HTTP server first (its handlers wait for calls the scheduler fails), then the
	 * scheduler (every call's on_done, which may still use the API), then the API's memory. */
	api_stop(m->api);
	sched_stop(m->sched);
	sched_fini(m->sched);
	spec_source_fini(&m->draft); /* the scheduler's, which is gone */
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
	else
		lm_link_fini(&m->head); /* its pipe callbacks are done (not so after a timeout) */
	if (m->pull_open && lm_close_bounded(m->pull, LM_CLOSE_MS) != 0)
		lm_warn("closing the data ring's last socket took over 2 s; exiting anyway");
	/* What the workers left behind (a killed one cannot remove its sockets), and only that:
	 * a socket that a live process still listens on is another's and stays. */
	for (int32_t i = 0; m->procs != NULL && i < m->n_procs; i++) {
		if (o->spawn && m->procs[i].cfg != NULL) {
			mesh_remove_stale_ipc(m->procs[i].cfg->control);
			mesh_remove_stale_ipc(m->procs[i].cfg->data);
			mesh_remove_stale_ipc(m->procs[i].at.control);
			mesh_remove_stale_ipc(m->procs[i].at.data);
		}
	}
	while (m->children != NULL) {
		struct mesh_child *c = m->children;
		m->children = c->next;
		free(c);
	}
	if (m->pull_listening)
		mesh_remove_stale_ipc(m->cfg.data_in);
	free(m->procs);
	spec_source_fini(&m->draft);
	tok_free(m->vocab);
	jinja_free(m->jinja);
	fence_plan_fini(&m->plan);
	gguf_close(m->file);
	mesh_config_fini(&m->cfg);
	rollout_fini(&m->ro);
	int status = rc == 0 && m->exit_status == 0 ? 0 : 1;
	pthread_mutex_destroy(&m->mu);
	pthread_mutex_destroy(&m->stop_mu);
	pthread_cond_destroy(&m->cv);
	free(m);
	return status;
}

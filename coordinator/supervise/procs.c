/* procs.c — the workers' processes on a libuv loop. See procs.h.
 *
 * Locking: `mu` guards every field marked "under mu" in struct proc and struct procs; `cv` is
 * broadcast on every change a waiter may be waiting for (a process exit, a spawn result,
 * stopping), so a keeper waits on it instead of polling. stop_mu guards the stop request
 * alone. The order of both among the coordinator's locks: workers.h. */
#include "coordinator/supervise/procs.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/wire/transport.h"
#include "coordinator/supervise/worker_cmd.h"

/* One process of a worker: the serving one, or a replacement a rollout is starting beside it.
 * A proc lives while anything may look at it: a rollout's candidates and the processes they
 * replace stay until procs_fini. A keeper's process is freed once a newer one has taken its
 * place and its handles are closed (a worker restarted for days must not accumulate them); one
 * that never started is freed as soon as its handles are closed. */
struct proc {
	struct procs *pr;
	int32_t j; /* the worker it serves or is meant to serve */
	uv_process_t uv;
	/* Its stderr, read by the loop thread: passed through to ours line by line, the last
	 * error line kept, so that how it ended can say why in its own words. */
	uv_pipe_t err;
	char line[512];
	size_t line_len;
	/* Under mu. */
	int open_handles; /* uv and err until their close callbacks ran */
	bool disposable;  /* nothing refers to it any more: free once its handles are closed */
	bool keeper_made; /* started by the worker's keeper (not a rollout's candidate) */
	bool running;     /* not yet reaped */
	bool retiring;    /* its exit is expected (replaced, killed by its keeper, rolled back) */
	int pid;
	char last_error[300]; /* its last "error:" line, without the program's prefix */
	char last_line[300];  /* its last line of any kind */
	struct mesh_addrs at; /* where it listens */
	char why[512];        /* how it ended */
	struct proc *next;    /* every process of the mesh */
};

/* A request to start a process, answered by the loop thread. */
struct procs_spawn_req {
	int32_t j;
	const char *bin;
	const struct mesh_addrs *at;
	bool serving; /* it becomes the worker's serving process */
	bool done;
	int rc;
	char why[512];
	struct proc *child;
	struct procs_spawn_req *next;
};

struct procs {
	const struct mesh_facts *f;
	struct workers *ws;
	struct procs_hooks hooks;
	uv_loop_t loop;
	uv_signal_t sig_int, sig_term;
	uv_async_t spawn_async; /* keepers and rollouts asking the loop thread to spawn */
	uv_async_t stop_async;  /* anyone asking the loop to stop the mesh */
	uv_timer_t stop_timer;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic bool stopping;
	/* Under mu. */
	struct proc *all;               /* every process */
	struct proc **serving;          /* [n_workers]: each worker's serving process, or NULL */
	struct procs_spawn_req *spawns; /* requests from other threads: the loop answers them */
	/* Under stop_mu. */
	pthread_mutex_t stop_mu;
	char stop_why[512];
	int exit_status;
};

/* Removes an ipc socket file of ours that nothing listens on any more (a worker that was
 * killed leaves its files behind). A socket a live process listens on is never touched: it may
 * be another mesh's. */
static void procs_remove_stale_ipc(const char *addr)
{
	bool removed = false;
	if (addr != NULL && lm_ipc_clear_stale(addr, &removed, NULL) == 0 && removed)
		lm_debug("removed the stale ipc socket %s", addr + 6);
}

/* Running processes, under mu. */
static int32_t procs_running(struct procs *pr)
{
	int32_t n = 0;
	for (struct proc *c = pr->all; c != NULL; c = c->next)
		n += c->running;
	return n;
}

/* Frees c when nothing refers to it and its handles are closed; under mu. */
static void procs_maybe_free(struct procs *pr, struct proc *c)
{
	if (!c->disposable || c->open_handles > 0 || c->running)
		return;
	for (struct proc **q = &pr->all; *q != NULL; q = &(*q)->next)
		if (*q == c) {
			*q = c->next;
			break;
		}
	free(c);
}

/* Close callback of a process's handles (loop thread). */
static void procs_closed(uv_handle_t *h)
{
	struct proc *c = h->data;
	struct procs *pr = c->pr;
	pthread_mutex_lock(&pr->mu);
	c->open_handles--;
	procs_maybe_free(pr, c);
	pthread_mutex_unlock(&pr->mu);
}

/* ------------------------------------------------------------------ the children's stderr */

/* One line of a child's stderr: passed on to ours; an error line is remembered (under mu). */
static void procs_line(struct proc *c, const char *line, size_t n)
{
	char out[600];
	int k = snprintf(out, sizeof out, "%.*s\n", (int)(n < 590 ? n : 590), line);
	ssize_t w = write(STDERR_FILENO, out, (size_t)k);
	(void)w;
	const char *e = memmem(line, n, " error: ", 8);
	pthread_mutex_lock(&c->pr->mu);
	if (n > 0)
		snprintf(c->last_line, sizeof c->last_line, "%.*s", (int)n, line);
	if (e != NULL) {
		size_t off = (size_t)(e + 8 - line);
		snprintf(c->last_error, sizeof c->last_error, "%.*s", (int)(n - off), line + off);
	}
	pthread_mutex_unlock(&c->pr->mu);
}

static void procs_bytes(struct proc *c, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n' || c->line_len == sizeof c->line) {
			procs_line(c, c->line, c->line_len);
			c->line_len = 0;
			if (p[i] == '\n')
				continue;
		}
		c->line[c->line_len++] = p[i];
	}
}

static void procs_err_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	static char chunk[4096]; /* the loop thread's alone */
	(void)h;
	(void)hint;
	*buf = uv_buf_init(chunk, sizeof chunk);
}

static void procs_err_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct proc *c = s->data;
	if (n > 0)
		procs_bytes(c, buf->base, (size_t)n);
	else if (n < 0 && !uv_is_closing((uv_handle_t *)s))
		uv_close((uv_handle_t *)s, procs_closed);
}

/* What is still in the pipe when the exit is reported (the error line a dying process wrote
 * last may not have been read yet). */
static void procs_err_drain(struct proc *c)
{
	uv_os_fd_t fd;
	char buf[4096];
	if (uv_is_closing((uv_handle_t *)&c->err) || uv_fileno((uv_handle_t *)&c->err, &fd) != 0)
		return;
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		procs_bytes(c, buf, (size_t)n);
	}
}

/* ------------------------------------------------------------------ spawn and exit */

static void procs_on_exit(uv_process_t *uvp, int64_t status, int term_signal)
{
	struct proc *c = uvp->data;
	struct procs *pr = c->pr;
	procs_err_drain(c);
	/* A process that was killed could not remove its sockets: they are stale now (nothing
	 * listens there until the next process of the worker starts, which waits for this). */
	if (term_signal != 0) {
		procs_remove_stale_ipc(c->at.control);
		procs_remove_stale_ipc(c->at.data);
	}
	pthread_mutex_lock(&pr->mu);
	if (term_signal != 0)
		snprintf(c->why, sizeof c->why, "killed by signal %d", term_signal);
	else /* its own last words: its last error line, or the last line of a foreign program */
		snprintf(c->why, sizeof c->why, "exited with status %lld%s%s", (long long)status,
			 c->last_error[0] || c->last_line[0] ? ": " : "",
			 c->last_error[0] ? c->last_error : c->last_line);
	c->running = false;
	if (c == pr->serving[c->j] && !c->retiring)
		workers_update(pr->ws, c->j,
			       &(struct worker_update){.why = c->why,
						       .lost = !atomic_load(&pr->stopping)});
	pthread_cond_broadcast(&pr->cv);
	bool last = atomic_load(&pr->stopping) && procs_running(pr) == 0;
	pthread_mutex_unlock(&pr->mu);
	uv_close((uv_handle_t *)uvp, procs_closed);
	if (last)
		uv_stop(&pr->loop);
}

/* Loop thread, under mu: starts the process of a spawn request. */
static int procs_start(struct procs *pr, struct procs_spawn_req *r, lm_diag *d)
{
	const struct mesh_worker *wc = facts_worker(pr->f, r->j);
	struct worker_cmd cmd = {.bin = r->bin,
				 .name = wc->name,
				 .control = r->at->control,
				 .data = r->at->data,
				 .http = r->at->http,
				 .backend = wc->backend,
				 .device = wc->device,
				 .threads = wc->threads,
				 .kernels = wc->kernels,
				 .parent_pid = (int)getpid(),
				 .log_level = lm_log_get_level() >= LM_LOG_DEBUG ? "debug" : "info",
				 .memory_limit = wc->memory_limit,
				 .tls = pr->f->tls,
				 .insecure = pr->f->cfg->insecure};
	struct worker_argv args;
	worker_cmd_argv(&cmd, &args);
	struct proc *c = calloc(1, sizeof *c);
	if (c == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	c->pr = pr;
	c->j = r->j;
	c->at = *r->at;
	c->uv.data = c;
	c->err.data = c;
	/* Processes are freed with the supervision, never before: their handles are closed by
	 * then. */
	c->next = pr->all;
	pr->all = c;
	c->open_handles = 2;
	uv_pipe_init(&pr->loop, &c->err, 0);
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
					 {.flags = UV_INHERIT_FD, .data.fd = 2},
					 {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE,
					  .data.stream = (uv_stream_t *)&c->err}};
	uv_process_options_t po = {.exit_cb = procs_on_exit,
				   .file = r->bin,
				   .args = args.argv,
				   .stdio_count = 3,
				   .stdio = stdio};
	if (access(r->bin, X_OK) != 0) {
		c->open_handles = 1;
		c->disposable = true;
		uv_close((uv_handle_t *)&c->err, procs_closed);
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       r->bin);
	}
	/* (A stale ipc socket a killed process left is the worker's listener's to replace.) */
	int rv = uv_spawn(&pr->loop, &c->uv, &po);
	if (rv != 0) {
		/* The handles joined the loop even so: they must be closed (the proc itself is
		 * freed once they are). */
		c->disposable = true;
		uv_close((uv_handle_t *)&c->uv, procs_closed);
		uv_close((uv_handle_t *)&c->err, procs_closed);
		return lm_fail(d, LM_EOS, "cannot start %s for worker %s: %s", r->bin, wc->name,
			       uv_strerror(rv));
	}
	uv_read_start((uv_stream_t *)&c->err, procs_err_alloc, procs_err_read);
	c->running = true;
	c->pid = c->uv.pid;
	r->child = c;
	return 0;
}

/* Makes c worker j's serving process in place of a keeper's last one (freed once its handles
 * are closed); under mu, on the loop thread, before c's exit can be reported, so that its end
 * is the worker's. */
static void procs_serve(struct procs *pr, int32_t j, struct proc *c)
{
	struct proc *old = pr->serving[j];
	c->keeper_made = true;
	pr->serving[j] = c;
	if (old != NULL && old->keeper_made) {
		old->disposable = true;
		procs_maybe_free(pr, old);
	}
}

/* Keepers and rollouts ask for processes; only the loop thread may create process handles. */
static void procs_on_spawn_async(uv_async_t *a)
{
	struct procs *pr = a->data;
	pthread_mutex_lock(&pr->mu);
	while (pr->spawns != NULL) {
		struct procs_spawn_req *r = pr->spawns;
		pr->spawns = r->next;
		lm_diag d = {{0}};
		r->rc = atomic_load(&pr->stopping) ? LM_ECANCELED : procs_start(pr, r, &d);
		if (r->rc != 0)
			snprintf(r->why, sizeof r->why, "%s", lm_diag_str(&d, r->rc));
		else if (r->serving)
			procs_serve(pr, r->j, r->child);
		r->done = true;
	}
	pthread_cond_broadcast(&pr->cv);
	pthread_mutex_unlock(&pr->mu);
}

/* Sends sig to a process that has not been reaped; under mu. kill(2) on the pid:
 * uv_process_kill is for the loop thread. A process is reaped only by the loop, under mu, so
 * while `running` is true the pid is still ours. */
static void procs_signal(struct proc *c, int sig)
{
	if (c != NULL && c->running && c->pid > 0)
		kill(c->pid, sig);
}

int procs_spawn(struct procs *pr, int32_t j, const char *bin, const struct mesh_addrs *at,
		bool serving, struct proc **out, lm_diag *d)
{
	struct procs_spawn_req r = {.j = j, .bin = bin, .at = at, .serving = serving};
	pthread_mutex_lock(&pr->mu);
	r.next = pr->spawns;
	pr->spawns = &r;
	uv_async_send(&pr->spawn_async);
	while (!r.done && !atomic_load(&pr->stopping))
		lm_cond_wait_ms(&pr->cv, &pr->mu, 1000);
	if (!r.done) { /* stopping: take the request back if the loop has not seen it */
		for (struct procs_spawn_req **q = &pr->spawns; *q != NULL; q = &(*q)->next)
			if (*q == &r) {
				*q = r.next;
				break;
			}
		r.rc = LM_ECANCELED;
		snprintf(r.why, sizeof r.why, "the mesh is stopping");
	}
	int pid = r.rc == 0 && serving ? r.child->pid : 0;
	pthread_mutex_unlock(&pr->mu);
	if (r.rc != 0)
		return lm_fail(d, r.rc, "%s", r.why);
	if (pid != 0)
		workers_update(pr->ws, j, &(struct worker_update){.pid = pid});
	*out = r.child;
	return 0;
}

bool procs_ended(struct procs *pr, int32_t j, const struct proc *c, int64_t ms, char *why,
		 size_t cap)
{
	int64_t until = lm_now_ms() + ms;
	pthread_mutex_lock(&pr->mu);
	/* Worker j's serving process may be replaced meanwhile (a redeploy): then the wait goes
	 * on for the new one. */
	const struct proc *p = c != NULL ? c : pr->serving[j];
	while (p != NULL && p->running && !atomic_load(&pr->stopping) &&
	       lm_cond_wait_until(&pr->cv, &pr->mu, until))
		p = c != NULL ? c : pr->serving[j];
	p = c != NULL ? c : pr->serving[j];
	bool ended = p == NULL || !p->running;
	snprintf(why, cap, "%s", p != NULL && !p->running ? p->why : "");
	pthread_mutex_unlock(&pr->mu);
	return ended;
}

void procs_kill(struct procs *pr, int32_t j)
{
	pthread_mutex_lock(&pr->mu);
	struct proc *c = pr->f->spawns ? pr->serving[j] : NULL;
	if (c != NULL && c->running) {
		/* Expected from now on: its end must not overwrite the reason it is killed for. */
		c->retiring = true;
		procs_signal(c, SIGKILL);
		int64_t until = lm_now_ms() + 5000;
		while (c->running && lm_now_ms() < until)
			lm_cond_wait_ms(&pr->cv, &pr->mu, 100);
	}
	pthread_mutex_unlock(&pr->mu);
}

void procs_retire(struct procs *pr, struct proc *c, int sig)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&pr->mu);
	c->retiring = true;
	procs_signal(c, sig);
	pthread_mutex_unlock(&pr->mu);
}

struct proc *procs_commit(struct procs *pr, int32_t j, struct proc *c)
{
	pthread_mutex_lock(&pr->mu);
	struct proc *old = pr->serving[j];
	if (old != NULL)
		old->retiring = true;
	pr->serving[j] = c;
	int pid = c->pid;
	pthread_mutex_unlock(&pr->mu);
	workers_update(pr->ws, j, &(struct worker_update){.pid = pid});
	return old;
}

/* ------------------------------------------------------------------ stopping */

bool procs_stopping(struct procs *pr)
{
	return atomic_load(&pr->stopping);
}

void procs_sleep(struct procs *pr, int64_t ms)
{
	pthread_mutex_lock(&pr->mu);
	int64_t until = lm_now_ms() + ms;
	while (!atomic_load(&pr->stopping) && lm_now_ms() < until)
		lm_cond_wait_ms(&pr->cv, &pr->mu, until - lm_now_ms());
	pthread_mutex_unlock(&pr->mu);
}

static void procs_on_stop_timer(uv_timer_t *t)
{
	struct procs *pr = t->data;
	pthread_mutex_lock(&pr->mu);
	for (struct proc *c = pr->all; c != NULL; c = c->next)
		if (c->running) {
			lm_warn("%s (pid %d) did not stop in time: killing it",
				facts_worker(pr->f, c->j)->name, c->pid);
			kill(c->pid, SIGKILL);
		}
	pthread_mutex_unlock(&pr->mu);
}

/* Loop thread: stop everything. */
static void procs_begin_stop(struct procs *pr, const char *why)
{
	if (atomic_exchange(&pr->stopping, true))
		return;
	lm_info("stopping (%s)", why);
	/* Requests fail now with the reason (the hook); the scheduler and the API stay allocated
	 * until the keepers and a rollout, which use them, have been joined. */
	if (pr->hooks.stopping != NULL)
		pr->hooks.stopping(pr->hooks.ctx);
	pthread_mutex_lock(&pr->mu);
	pthread_cond_broadcast(&pr->cv);
	for (struct proc *c = pr->all; c != NULL; c = c->next)
		if (c->running)
			kill(c->pid, SIGTERM);
	bool none = procs_running(pr) == 0;
	pthread_mutex_unlock(&pr->mu);
	uv_timer_start(&pr->stop_timer, procs_on_stop_timer, 5000, 0);
	if (none)
		uv_stop(&pr->loop);
}

void procs_request_stop(struct procs *pr, const char *why, int exit_status)
{
	pthread_mutex_lock(&pr->stop_mu);
	if (pr->stop_why[0] == '\0') {
		snprintf(pr->stop_why, sizeof pr->stop_why, "%s", why);
		pr->exit_status = exit_status;
	}
	pthread_mutex_unlock(&pr->stop_mu);
	uv_async_send(&pr->stop_async);
}

static void procs_on_stop_async(uv_async_t *a)
{
	struct procs *pr = a->data;
	char why[512];
	pthread_mutex_lock(&pr->stop_mu);
	snprintf(why, sizeof why, "%s", pr->stop_why);
	int status = pr->exit_status;
	pthread_mutex_unlock(&pr->stop_mu);
	if (status != 0)
		lm_error("%s", why);
	procs_begin_stop(pr, status != 0 ? "the mesh could not start" : why);
}

static void procs_on_signal(uv_signal_t *s, int signum)
{
	procs_begin_stop(s->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* ------------------------------------------------------------------ lifecycle */

int procs_open(struct procs **out, const struct mesh_facts *f, struct workers *ws,
	       const struct procs_hooks *hooks, lm_diag *d)
{
	struct procs *pr = calloc(1, sizeof *pr);
	if (pr == NULL ||
	    (pr->serving = calloc((size_t)f->n_workers + 1, sizeof *pr->serving)) == NULL) {
		free(pr);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	pr->f = f;
	pr->ws = ws;
	if (hooks != NULL)
		pr->hooks = *hooks;
	pthread_mutex_init(&pr->mu, NULL);
	pthread_mutex_init(&pr->stop_mu, NULL);
	lm_cond_init(&pr->cv);
	uv_loop_init(&pr->loop);
	uv_signal_init(&pr->loop, &pr->sig_int);
	uv_signal_init(&pr->loop, &pr->sig_term);
	pr->sig_int.data = pr->sig_term.data = pr;
	uv_signal_start(&pr->sig_int, procs_on_signal, SIGINT);
	uv_signal_start(&pr->sig_term, procs_on_signal, SIGTERM);
	uv_async_init(&pr->loop, &pr->spawn_async, procs_on_spawn_async);
	uv_async_init(&pr->loop, &pr->stop_async, procs_on_stop_async);
	pr->spawn_async.data = pr->stop_async.data = pr;
	uv_timer_init(&pr->loop, &pr->stop_timer);
	pr->stop_timer.data = pr;
	signal(SIGPIPE, SIG_IGN);
	*out = pr;
	return 0;
}

int procs_run(struct procs *pr)
{
	uv_run(&pr->loop, UV_RUN_DEFAULT);
	/* Stopped: keepers and a rollout see `stopping` at their next wait. */
	atomic_store(&pr->stopping, true);
	pthread_mutex_lock(&pr->mu);
	pthread_cond_broadcast(&pr->cv);
	pthread_mutex_unlock(&pr->mu);
	pthread_mutex_lock(&pr->stop_mu);
	int status = pr->exit_status;
	pthread_mutex_unlock(&pr->stop_mu);
	return status;
}

static void procs_close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void procs_fini(struct procs *pr)
{
	if (pr == NULL)
		return;
	uv_walk(&pr->loop, procs_close_walk, NULL);
	uv_run(&pr->loop, UV_RUN_DEFAULT);
	uv_loop_close(&pr->loop);
	/* What the workers left behind (a killed one cannot remove its sockets), and only that:
	 * a socket that a live process still listens on is another's and stays. */
	for (int32_t i = 0; pr->f->spawns && i < pr->f->n_workers; i++) {
		struct worker_info w;
		workers_get(pr->ws, i, &w);
		procs_remove_stale_ipc(facts_worker(pr->f, i)->control);
		procs_remove_stale_ipc(facts_worker(pr->f, i)->data);
		procs_remove_stale_ipc(w.at.control);
		procs_remove_stale_ipc(w.at.data);
	}
	while (pr->all != NULL) {
		struct proc *c = pr->all;
		pr->all = c->next;
		free(c);
	}
	free(pr->serving);
	pthread_mutex_destroy(&pr->mu);
	pthread_mutex_destroy(&pr->stop_mu);
	pthread_cond_destroy(&pr->cv);
	free(pr);
}

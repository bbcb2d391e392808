/* keeper.c — one thread per worker that brings it up and keeps it up.
 *
 *   start      spawn the process (asking the libuv loop thread, which owns process handles),
 *              or, for a worker started elsewhere, just find it
 *   handshake  HELLO until it answers (protocol version), ASSIGN its slice, wait for READY
 *              (fingerprint, KV and weight bytes); a process that exits meanwhile ends the wait
 *   watch      spawned: wait for the exit callback; not spawned: HELLO heartbeats, and
 *              KEEPER_HEARTBEAT_MISSES missed in a row mean it is gone
 *   restart    kill what is left, back off (KEEPER_BACKOFF_MIN_MS doubling to _MAX_MS), start
 *              again; after KEEPER_RESTART_BUDGET starts in a row that did not stay up, give up
 *              (a worker started elsewhere is then still probed, in case it comes back)
 *
 * Every transition goes through mesh_update_service(), which pauses the scheduler while a
 * worker is away, resumes it (replaying every live sequence into the rebuilt caches) when all
 * are back, and fails requests fast with the reason once a worker is given up on.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "coordinator/mesh_impl.h"
#include "lm_config.h"
#include "coordinator/planner.h"

/* Waits on the mesh's condition variable for at most ms; under mu. */
static bool keeper_stopping(struct mesh *m)
{
	return atomic_load(&m->stopping);
}

/* ------------------------------------------------------------------ bring-up */

/* Whether the worker's process is gone (spawn mode) or the mesh is stopping. */
static bool keeper_alive(void *arg)
{
	struct mesh_proc *p = arg;
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	bool alive =
		!keeper_stopping(m) && (!m->o->spawn || (p->child != NULL && p->child->running));
	pthread_mutex_unlock(&m->mu);
	return alive;
}

/* Adds what the exit callback recorded to a failure caused by the process ending. */
static int keeper_exit_reason(struct mesh_proc *p, int rc, lm_diag *d)
{
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	if (rc == LM_EUNAVAILABLE && p->child != NULL && !p->child->running && p->child->why[0])
		lm_fail(d, rc, "worker %s %s before it was ready", p->cfg->name, p->child->why);
	pthread_mutex_unlock(&m->mu);
	return rc;
}

/* The ASSIGN a worker of this mesh gets: its planned slice, its successor's address. */
void mesh_assignment(struct mesh *m, int32_t j, struct wire_assign *a)
{
	planner_assignment(&m->cfg, &m->plan, j, m->max_seq, m->cfg.slots + MESH_PROBE_SLOTS,
			   j + 1 < m->n_procs ? m->procs[j + 1].data : m->cfg.data_in, a);
}

/* HELLO until the worker answers, then ASSIGN and READY. */
static int keeper_handshake(struct mesh_proc *p, lm_diag *d)
{
	struct mesh *m = p->mesh;
	const struct fence_stage *st = &m->plan.stages[p->index];
	struct wire_hello hello;
	struct wire_assign a;
	struct wire_ready ready;
	int timeout = m->o->handshake_timeout_s * 1000, rc;

	pthread_mutex_lock(&m->mu);
	char control[256];
	snprintf(control, sizeof control, "%s", p->control);
	mesh_assignment(m, p->index, &a);
	pthread_mutex_unlock(&m->mu);
	p->ctl.tls = &m->tls;
	if ((rc = ctl_open(&p->ctl, p->cfg->name, control, d)) != 0)
		return rc;
	rc = ctl_hello_wait(&p->ctl, m->fingerprint, &hello, timeout, keeper_alive, p, d);
	if (rc != 0)
		return keeper_exit_reason(p, rc, d);
	lm_info("%s: pid %d, build %s, loading layers [%d, %d) (%.1f MiB weights, %.1f MiB KV)",
		p->cfg->name, hello.pid, hello.build, st->start, st->end,
		(double)st->weight_bytes / 1048576.0, (double)st->kv_bytes / 1048576.0);
	pthread_mutex_lock(&m->mu);
	if (!m->o->spawn)
		p->pid = hello.pid;
	pthread_mutex_unlock(&m->mu);
	rc = ctl_assign(&p->ctl, &a, m->fingerprint, &ready, timeout, keeper_alive, p, d);
	if (rc != 0)
		return keeper_exit_reason(p, rc, d);
	pthread_mutex_lock(&m->mu);
	p->ready = ready;
	pthread_mutex_unlock(&m->mu);
	lm_info("%s: ready, layers [%d, %d), KV %.2f MiB (%llu bytes), weights %.2f MiB, resident "
		"%.2f MiB",
		p->cfg->name, st->start, st->end, (double)ready.kv_bytes / 1048576.0,
		(unsigned long long)ready.kv_bytes, (double)ready.weight_bytes / 1048576.0,
		(double)ready.rss_bytes / 1048576.0);
	return 0;
}

/* ------------------------------------------------------------------ start, watch, restart */

/* Spawn mode: a new process with the worker's current program and addresses. */
static int keeper_spawn(struct mesh_proc *p, lm_diag *d)
{
	struct mesh *m = p->mesh;
	char bin[PATH_MAX], data[256], control[256], http[256];
	pthread_mutex_lock(&m->mu);
	snprintf(bin, sizeof bin, "%s", p->bin);
	snprintf(data, sizeof data, "%s", p->data);
	snprintf(control, sizeof control, "%s", p->control);
	snprintf(http, sizeof http, "%s", p->http);
	pthread_mutex_unlock(&m->mu);
	struct mesh_child *c = NULL;
	int rc = mesh_spawn_child(m, p, bin, data, control, http, &c, d);
	if (rc == 0) {
		pthread_mutex_lock(&m->mu);
		p->child = c;
		p->pid = c->pid;
		pthread_mutex_unlock(&m->mu);
	}
	return rc;
}

/* Serving: returns when the worker is lost (its process exited, or heartbeats stopped), with
 * the reason in p->why; or when the mesh stops. */
static void keeper_watch(struct mesh_proc *p)
{
	struct mesh *m = p->mesh;
	int misses = 0;
	for (;;) {
		if (m->o->spawn) {
			/* Until the serving process ends; a redeploy may replace it meanwhile. */
			pthread_mutex_lock(&m->mu);
			while (p->child != NULL && p->child->running && !keeper_stopping(m))
				lm_cond_wait_ms(&m->cv, &m->mu, 1000);
			pthread_mutex_unlock(&m->mu);
			return; /* the exit callback wrote why */
		}
		/* A worker started elsewhere: heartbeats. */
		pthread_mutex_lock(&m->mu);
		lm_cond_wait_ms(&m->cv, &m->mu, KEEPER_HEARTBEAT_MS);
		pthread_mutex_unlock(&m->mu);
		if (keeper_stopping(m))
			return;
		struct wire_hello hello;
		lm_diag d = {{0}};
		int rc = ctl_hello(&p->ctl, m->fingerprint, &hello, KEEPER_HEARTBEAT_MS, &d);
		if (rc == 0 && !hello.has_slice)
			rc = lm_fail(&d, LM_EUNAVAILABLE, "worker %s restarted and lost its slice",
				     p->cfg->name);
		if (rc == 0) {
			misses = 0;
			continue;
		}
		if (rc != LM_ETIMEOUT && rc != LM_EIO)
			misses = KEEPER_HEARTBEAT_MISSES; /* it answered wrongly: gone at once */
		if (++misses >= KEEPER_HEARTBEAT_MISSES) {
			pthread_mutex_lock(&m->mu);
			snprintf(p->why, sizeof p->why, "missed %d heartbeats (%s)", misses,
				 lm_diag_str(&d, rc));
			pthread_mutex_unlock(&m->mu);
			return;
		}
	}
}

/* Spawn mode: makes sure the process is gone before starting another on the same addresses. */
static void keeper_kill(struct mesh_proc *p)
{
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	struct mesh_child *c = m->o->spawn ? p->child : NULL;
	if (c != NULL && c->running) {
		mesh_kill_child(m, c, SIGKILL);
		int64_t until = lm_now_ms() + 5000;
		while (c->running && lm_now_ms() < until)
			lm_cond_wait_ms(&m->cv, &m->mu, 100);
	}
	pthread_mutex_unlock(&m->mu);
}

static void keeper_set_state(struct mesh_proc *p, int state, const char *why)
{
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	p->state = state;
	if (why != NULL)
		snprintf(p->why, sizeof p->why, "%.*s", (int)sizeof p->why - 1, why);
	mesh_update_service(m);
	pthread_mutex_unlock(&m->mu);
}

static void *keeper_main(void *arg)
{
	struct mesh_proc *p = arg;
	struct mesh *m = p->mesh;
	int attempt = 0;

	while (!keeper_stopping(m)) {
		lm_diag d = {{0}};
		int rc = 0;
		if (m->o->spawn)
			rc = keeper_spawn(p, &d);
		if (rc == 0)
			rc = keeper_handshake(p, &d);
		if (keeper_stopping(m))
			break;
		if (rc == 0) {
			int64_t since = lm_now_ms();
			keeper_set_state(p, PROC_READY, "");
			keeper_watch(p);
			if (keeper_stopping(m))
				break;
			if (lm_now_ms() - since >= KEEPER_STABLE_MS)
				attempt = 0;
			pthread_mutex_lock(&m->mu);
			lm_error("worker %s is down: %s", p->cfg->name, p->why);
			pthread_mutex_unlock(&m->mu);
		} else {
			lm_error("%s", lm_diag_str(&d, rc));
			pthread_mutex_lock(&m->mu);
			snprintf(p->why, sizeof p->why, "%s", lm_diag_str(&d, rc));
			pthread_mutex_unlock(&m->mu);
		}
		keeper_kill(p);
		attempt++;
		pthread_mutex_lock(&m->mu);
		p->restarts = attempt;
		char why[600];
		snprintf(why, sizeof why, "%s", p->why);
		pthread_mutex_unlock(&m->mu);
		if (attempt > KEEPER_RESTART_BUDGET) {
			char msg[700];
			snprintf(msg, sizeof msg, "worker %s gave up after %d restarts: %s",
				 p->cfg->name, KEEPER_RESTART_BUDGET, why);
			keeper_set_state(p, PROC_FAILED, msg);
			lm_error("%s", msg);
			if (m->o->spawn)
				break;
			attempt =
				KEEPER_RESTART_BUDGET; /* keep probing a worker someone else runs */
		} else {
			keeper_set_state(p, PROC_DOWN, NULL);
		}
		int64_t backoff = KEEPER_BACKOFF_MIN_MS << (attempt < 10 ? attempt - 1 : 9);
		if (backoff > KEEPER_BACKOFF_MAX_MS)
			backoff = KEEPER_BACKOFF_MAX_MS;
		lm_info("%s: starting again in %lld ms (attempt %d of %d)", p->cfg->name,
			(long long)backoff, attempt, KEEPER_RESTART_BUDGET);
		pthread_mutex_lock(&m->mu);
		int64_t until = lm_now_ms() + backoff;
		while (!keeper_stopping(m) && lm_now_ms() < until)
			lm_cond_wait_ms(&m->cv, &m->mu, until - lm_now_ms());
		pthread_mutex_unlock(&m->mu);
	}
	return NULL;
}

int keeper_start(struct mesh *m, struct mesh_proc *p)
{
	(void)m;
	if (pthread_create(&p->keeper, NULL, keeper_main, p) != 0)
		return LM_EOS;
	p->keeper_started = true;
	return 0;
}

void keeper_join(struct mesh_proc *p)
{
	if (p->keeper_started)
		pthread_join(p->keeper, NULL);
	p->keeper_started = false;
	ctl_close(&p->ctl);
}

/* ------------------------------------------------------------------ the service */

void mesh_update_service(struct mesh *m)
{
	const struct mesh_proc *failed = NULL, *away = NULL;
	if (atomic_load(&m->stopping))
		return; /* mesh_begin_stop made the service unavailable for good */
	for (int32_t i = 0; i < m->n_procs; i++) {
		const struct mesh_proc *p = &m->procs[i];
		if (p->state == PROC_FAILED && failed == NULL)
			failed = p;
		else if (p->state != PROC_READY && away == NULL)
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
		m->available = false;
		m->had_fault = true;
		return;
	}
	if (away != NULL) {
		snprintf(why, sizeof why, "worker %s is restarting (%s)", away->cfg->name,
			 away->why[0] ? away->why : "starting");
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

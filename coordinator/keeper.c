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
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordinator/mesh_impl.h"
#include "lm_config.h"

static int64_t keeper_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits on the mesh's condition variable for at most ms; under mu. */
static void keeper_wait(struct mesh *m, int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&m->cv, &m->mu, &ts);
}

static bool keeper_stopping(struct mesh *m)
{
	return atomic_load(&m->stopping);
}

/* ------------------------------------------------------------------ control requests */

/* (Re)opens the worker's control REQ socket and dials it; the dial retries in the background
 * until the worker listens. */
static int keeper_ctl_open(struct mesh_proc *p, lm_diag *d)
{
	int rv;
	if (p->ctl_open) {
		nng_close(p->ctl);
		p->ctl_open = false;
	}
	if ((rv = nng_req0_open(&p->ctl)) != 0)
		return lm_fail(d, LM_EIO, "control socket: %s", nng_strerror(rv));
	p->ctl_open = true;
	/* No automatic resend: every control request has its own deadline here. */
	nng_socket_set_ms(p->ctl, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_ms(p->ctl, NNG_OPT_RECONNMINT, 10);
	nng_socket_set_ms(p->ctl, NNG_OPT_RECONNMAXT, 200);
	if ((rv = nng_dial(p->ctl, p->cfg->control, NULL, NNG_FLAG_NONBLOCK)) != 0)
		return lm_fail(d, LM_EIO, "worker %s: cannot dial %s: %s", p->cfg->name,
			       p->cfg->control, nng_strerror(rv));
	return 0;
}

/* Sends req and waits for the reply (the caller frees it). A failed exchange leaves the REQ
 * socket with a request outstanding, so the caller reopens it before the next one. */
static int keeper_request(struct mesh_proc *p, const struct wire_buf *req, nng_msg **reply,
			  int timeout_ms, lm_diag *d)
{
	nng_msg *msg;
	int rv;
	nng_socket_set_ms(p->ctl, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_ms(p->ctl, NNG_OPT_SENDTIMEO, timeout_ms);
	if (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, req->data, req->len) != 0)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	if ((rv = nng_sendmsg(p->ctl, msg, 0)) != 0) {
		nng_msg_free(msg);
		return lm_fail(d, rv == NNG_ETIMEDOUT ? LM_ETIMEOUT : LM_EIO,
			       "worker %s: sending a control request: %s", p->cfg->name,
			       nng_strerror(rv));
	}
	if ((rv = nng_recvmsg(p->ctl, reply, 0)) != 0)
		return lm_fail(d, rv == NNG_ETIMEDOUT ? LM_ETIMEOUT : LM_EIO,
			       "worker %s: no reply on %s: %s", p->cfg->name, p->cfg->control,
			       nng_strerror(rv));
	return 0;
}

/* An ERROR reply becomes a failure naming the worker. */
static int keeper_check_reply(struct mesh_proc *p, nng_msg *r, uint32_t want, lm_diag *d)
{
	struct wire_head h;
	int rc = wire_peek(nng_msg_body(r), nng_msg_len(r), &h, d);
	if (rc != 0) {
		lm_diag_prefix(d, "worker %s", p->cfg->name);
		return rc;
	}
	if (h.type == WIRE_ERROR) {
		struct wire_error e;
		if (wire_decode_error(nng_msg_body(r), nng_msg_len(r), &e, d) != 0)
			return lm_fail(d, LM_EPROTO, "worker %s: malformed ERROR", p->cfg->name);
		return lm_fail(d, e.code < 0 ? e.code : LM_EPROTO, "worker %s: %s", p->cfg->name,
			       e.msg);
	}
	if (h.type != want)
		return lm_fail(d, LM_EPROTO, "worker %s answered %s to %s", p->cfg->name,
			       wire_type_name(h.type), wire_type_name(want));
	return 0;
}

/* One HELLO exchange: the worker's answer, version and fingerprint checked. */
static int keeper_hello(struct mesh_proc *p, struct wire_hello *hello, int timeout_ms, lm_diag *d)
{
	struct mesh *m = p->mesh;
	struct wire_buf b = {0};
	struct wire_hello me = {.version = WIRE_VERSION, .id = 1};
	nng_msg *r = NULL;
	snprintf(me.name, sizeof me.name, "coordinator");
	snprintf(me.build, sizeof me.build, "%s", LM_VERSION);
	int rc = wire_encode_hello(&b, &me, false);
	if (rc == 0)
		rc = keeper_request(p, &b, &r, timeout_ms, d);
	wire_buf_fini(&b);
	if (rc != 0)
		return rc;
	rc = keeper_check_reply(p, r, WIRE_HELLO, d);
	if (rc == 0)
		rc = wire_decode_hello(nng_msg_body(r), nng_msg_len(r), hello, d);
	nng_msg_free(r);
	if (rc == LM_EVERSION)
		lm_diag_prefix(d, "worker %s", p->cfg->name);
	if (rc != 0)
		return rc;
	if (hello->version != WIRE_VERSION)
		return lm_fail(d, LM_EVERSION,
			       "worker %s speaks protocol version %u; this coordinator speaks %u",
			       p->cfg->name, hello->version, WIRE_VERSION);
	if (hello->has_slice && hello->fingerprint != 0 && hello->fingerprint != m->fingerprint)
		return lm_fail(d, LM_EFINGERPRINT,
			       "worker %s holds a model with fingerprint %016llx; the mesh's model "
			       "%s has %016llx",
			       p->cfg->name, (unsigned long long)hello->fingerprint,
			       m->cfg.model_path, (unsigned long long)m->fingerprint);
	return 0;
}

/* Whether the worker's process is gone (spawn mode) or the mesh is stopping; when gone, fails
 * d with what the exit callback recorded. */
static bool keeper_lost(struct mesh_proc *p, const char *when, lm_diag *d)
{
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	bool lost = (m->o->spawn && !p->running) || keeper_stopping(m);
	if (lost)
		lm_fail(d, LM_EUNAVAILABLE, "worker %s %s %s", p->cfg->name,
			p->why[0] ? p->why : "stopped", when);
	pthread_mutex_unlock(&m->mu);
	return lost;
}

/* HELLO until the worker answers, then ASSIGN and READY. */
static int keeper_handshake(struct mesh_proc *p, lm_diag *d)
{
	struct mesh *m = p->mesh;
	const struct fence_stage *st = &m->plan.stages[p->index];
	struct wire_hello hello;
	int rc;

	int64_t deadline = keeper_now_ms() + (int64_t)m->o->handshake_timeout_s * 1000;
	for (;;) {
		if ((rc = keeper_ctl_open(p, d)) != 0)
			return rc;
		if (keeper_lost(p, "during start-up", d))
			return LM_EUNAVAILABLE;
		rc = keeper_hello(p, &hello, 250, d);
		if (rc == 0)
			break;
		if (rc != LM_ETIMEOUT && rc != LM_EIO)
			return rc; /* it answered, and the answer is wrong: no point retrying */
		if (keeper_now_ms() >= deadline)
			return lm_fail(d, LM_ETIMEOUT, "worker %s did not answer at %s within %d s",
				       p->cfg->name, p->cfg->control, m->o->handshake_timeout_s);
	}
	lm_info("%s: pid %d, build %s, loading layers [%d, %d) (%.1f MiB weights, %.1f MiB KV)",
		p->cfg->name, hello.pid, hello.build, st->start, st->end,
		(double)st->weight_bytes / 1048576.0, (double)st->kv_bytes / 1048576.0);
	pthread_mutex_lock(&m->mu);
	if (!m->o->spawn)
		p->pid = hello.pid;
	pthread_mutex_unlock(&m->mu);

	struct wire_assign a = {.id = 2,
				.begin = st->start,
				.end = st->end,
				.embedding = p->index == 0,
				.head = p->index == m->n_procs - 1,
				.max_seq = m->max_seq,
				.slots = m->cfg.slots,
				.k_type = m->cfg.kv_type_k,
				.v_type = m->cfg.kv_type_v,
				.wire_dtype = m->cfg.wire_dtype == LM_F16    ? WIRE_DT_F16
					      : m->cfg.wire_dtype == LM_BF16 ? WIRE_DT_BF16
									     : WIRE_DT_F32,
				.max_batch = m->cfg.max_batch};
	snprintf(a.model, sizeof a.model, "%s", m->cfg.model_path);
	snprintf(a.next, sizeof a.next, "%s",
		 p->index + 1 < m->n_procs ? m->procs[p->index + 1].cfg->data : m->cfg.data_in);
	struct wire_buf b = {0};
	nng_msg *msg = NULL, *r = NULL;
	rc = wire_encode_assign(&b, &a);
	nng_socket_set_ms(p->ctl, NNG_OPT_SENDTIMEO, 5000);
	if (rc != 0 || nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, b.data, b.len) != 0 ||
	    nng_sendmsg(p->ctl, msg, 0) != 0) {
		if (msg != NULL)
			nng_msg_free(msg);
		wire_buf_fini(&b);
		return lm_fail(d, LM_EIO, "worker %s: cannot send ASSIGN", p->cfg->name);
	}
	wire_buf_fini(&b);
	/* Loading a large slice takes a while: wait in slices of a second, watching the process. */
	nng_socket_set_ms(p->ctl, NNG_OPT_RECVTIMEO, 1000);
	int rv;
	while ((rv = nng_recvmsg(p->ctl, &r, 0)) == NNG_ETIMEDOUT) {
		if (keeper_lost(p, "while loading", d))
			return LM_EUNAVAILABLE;
		if (keeper_now_ms() >= deadline)
			return lm_fail(d, LM_ETIMEOUT, "worker %s was not ready within %d s",
				       p->cfg->name, m->o->handshake_timeout_s);
		lm_info("%s: still loading", p->cfg->name);
	}
	if (rv != 0)
		return lm_fail(d, LM_EIO, "worker %s: %s", p->cfg->name, nng_strerror(rv));
	struct wire_ready ready;
	rc = keeper_check_reply(p, r, WIRE_READY, d);
	if (rc == 0)
		rc = wire_decode_ready(nng_msg_body(r), nng_msg_len(r), &ready, d);
	nng_msg_free(r);
	if (rc != 0)
		return rc;
	if (ready.fingerprint != m->fingerprint)
		return lm_fail(
			d, LM_EFINGERPRINT,
			"worker %s loaded a model with fingerprint %016llx; the mesh's model "
			"has %016llx",
			p->cfg->name, (unsigned long long)ready.fingerprint,
			(unsigned long long)m->fingerprint);
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

/* Spawn mode: asks the loop thread to start the process and waits for the answer. */
static int keeper_spawn(struct mesh_proc *p, lm_diag *d)
{
	struct mesh *m = p->mesh;
	pthread_mutex_lock(&m->mu);
	p->spawn_requested = true;
	uv_async_send(&m->spawn_async);
	while (p->spawn_requested && !keeper_stopping(m))
		keeper_wait(m, 1000);
	int rc = p->spawn_requested ? LM_ECANCELED : p->spawn_rc;
	if (rc != 0 && !p->spawn_requested)
		lm_fail(d, rc, "%s", p->why);
	pthread_mutex_unlock(&m->mu);
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
			pthread_mutex_lock(&m->mu);
			while (p->running && !keeper_stopping(m))
				keeper_wait(m, 1000);
			pthread_mutex_unlock(&m->mu);
			return; /* the exit callback wrote why */
		}
		/* A worker started elsewhere: heartbeats. */
		pthread_mutex_lock(&m->mu);
		keeper_wait(m, KEEPER_HEARTBEAT_MS);
		pthread_mutex_unlock(&m->mu);
		if (keeper_stopping(m))
			return;
		struct wire_hello hello;
		lm_diag d = {{0}};
		int rc = keeper_hello(p, &hello, KEEPER_HEARTBEAT_MS, &d);
		if (rc == 0 && !hello.has_slice)
			rc = lm_fail(&d, LM_EUNAVAILABLE, "worker %s restarted and lost its slice",
				     p->cfg->name);
		if (rc == 0) {
			misses = 0;
			continue;
		}
		keeper_ctl_open(p, NULL); /* drop the outstanding request */
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
	if (m->o->spawn && p->running && p->pid > 0) {
		kill(p->pid, SIGKILL);
		int64_t until = keeper_now_ms() + 5000;
		while (p->running && keeper_now_ms() < until)
			keeper_wait(m, 100);
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
			int64_t since = keeper_now_ms();
			keeper_set_state(p, PROC_READY, "");
			keeper_watch(p);
			if (keeper_stopping(m))
				break;
			if (keeper_now_ms() - since >= KEEPER_STABLE_MS)
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
		int64_t until = keeper_now_ms() + backoff;
		while (!keeper_stopping(m) && keeper_now_ms() < until)
			keeper_wait(m, until - keeper_now_ms());
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
	if (p->ctl_open)
		nng_close(p->ctl);
	p->ctl_open = false;
}

/* ------------------------------------------------------------------ the service */

void mesh_update_service(struct mesh *m)
{
	const struct mesh_proc *failed = NULL, *away = NULL;
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

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
 * Every transition is reported with mesh_worker_set_state(), where the mesh pauses the
 * scheduler while a worker is away, resumes it (replaying every live sequence into the rebuilt
 * caches) when all are back, and fails requests fast with the reason once a worker is given up
 * on. The keeper sees the mesh only through mesh_ops.h.
 */
#include "coordinator/keeper.h"

#include <stdio.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/config/mesh_config.h"
#include "common/plan/fence.h"
#include "coordinator/mesh_ops.h"

/* A worker may restart this many times in a row (each start that does not stay up for
 * KEEPER_STABLE_MS counts) before the coordinator gives up on it. */
#define KEEPER_RESTART_BUDGET 5
#define KEEPER_STABLE_MS      10000
#define KEEPER_BACKOFF_MIN_MS 100
#define KEEPER_BACKOFF_MAX_MS 5000
/* Workers the coordinator did not spawn are watched by HELLO heartbeats. */
#define KEEPER_HEARTBEAT_MS     250
#define KEEPER_HEARTBEAT_MISSES 3

static const char *keeper_name(const struct keeper *k)
{
	return mesh_worker_cfg(k->m, k->j)->name;
}

/* ------------------------------------------------------------------ bring-up */

/* Whether the worker's process is gone (spawn mode) or the mesh is stopping. */
static bool keeper_alive(void *arg)
{
	struct keeper *k = arg;
	return !mesh_stopping(k->m) && (!mesh_spawns(k->m) || mesh_worker_running(k->m, k->j));
}

/* Adds what the exit callback recorded to a failure caused by the process ending. */
static int keeper_exit_reason(struct keeper *k, int rc, lm_diag *d)
{
	char why[256];
	if (rc == LM_EUNAVAILABLE && mesh_worker_ended(k->m, k->j, why, sizeof why) && why[0])
		lm_fail(d, rc, "worker %s %s before it was ready", keeper_name(k), why);
	return rc;
}

/* HELLO until the worker answers, then ASSIGN and READY. */
static int keeper_handshake(struct keeper *k, lm_diag *d)
{
	struct mesh *m = k->m;
	const struct fence_stage *st = &mesh_plan(m)->stages[k->j];
	uint64_t fingerprint = mesh_fingerprint(m);
	struct mesh_addrs at;
	struct wire_hello hello;
	struct wire_assign a;
	struct wire_ready ready;
	int timeout = mesh_handshake_ms(m), rc;

	mesh_worker_addrs(m, k->j, &at);
	mesh_worker_assignment(m, k->j, &a);
	k->ctl.tls = mesh_tls(m);
	if ((rc = ctl_open(&k->ctl, keeper_name(k), at.control, d)) != 0)
		return rc;
	rc = ctl_hello_wait(&k->ctl, fingerprint, &hello, timeout, keeper_alive, k, d);
	if (rc != 0)
		return keeper_exit_reason(k, rc, d);
	lm_info("%s: pid %d, build %s, loading layers [%d, %d) (%.1f MiB weights, %.1f MiB KV)",
		keeper_name(k), hello.pid, hello.build, st->start, st->end,
		(double)st->weight_bytes / 1048576.0, (double)st->kv_bytes / 1048576.0);
	if (!mesh_spawns(m))
		mesh_worker_set_pid(m, k->j, hello.pid);
	rc = ctl_assign(&k->ctl, &a, fingerprint, &ready, timeout, keeper_alive, k, d);
	if (rc != 0)
		return keeper_exit_reason(k, rc, d);
	mesh_worker_set_ready(m, k->j, &ready);
	lm_info("%s: ready, layers [%d, %d), KV %.2f MiB (%llu bytes), weights %.2f MiB, resident "
		"%.2f MiB",
		keeper_name(k), st->start, st->end, (double)ready.kv_bytes / 1048576.0,
		(unsigned long long)ready.kv_bytes, (double)ready.weight_bytes / 1048576.0,
		(double)ready.rss_bytes / 1048576.0);
	return 0;
}

/* ------------------------------------------------------------------ watch, restart */

/* Serving: returns when the worker is lost (its process exited, or heartbeats stopped), with
 * the reason recorded as the worker's why; or when the mesh stops. */
static void keeper_watch(struct keeper *k)
{
	struct mesh *m = k->m;
	int misses = 0;
	if (mesh_spawns(m)) {
		mesh_worker_wait_exit(m, k->j); /* the exit callback wrote why */
		return;
	}
	/* A worker started elsewhere: heartbeats. */
	for (;;) {
		mesh_sleep(m, KEEPER_HEARTBEAT_MS);
		if (mesh_stopping(m))
			return;
		struct wire_hello hello;
		lm_diag d = {{0}};
		int rc = ctl_hello(&k->ctl, mesh_fingerprint(m), &hello, KEEPER_HEARTBEAT_MS, &d);
		if (rc == 0 && !hello.has_slice)
			rc = lm_fail(&d, LM_EUNAVAILABLE, "worker %s restarted and lost its slice",
				     keeper_name(k));
		if (rc == 0) {
			misses = 0;
			continue;
		}
		if (rc != LM_ETIMEOUT && rc != LM_EIO)
			misses = KEEPER_HEARTBEAT_MISSES; /* it answered wrongly: gone at once */
		if (++misses >= KEEPER_HEARTBEAT_MISSES) {
			char why[512];
			snprintf(why, sizeof why, "missed %d heartbeats (%s)", misses,
				 lm_diag_str(&d, rc));
			mesh_worker_set_why(m, k->j, why);
			return;
		}
	}
}

static void *keeper_main(void *arg)
{
	struct keeper *k = arg;
	struct mesh *m = k->m;
	int attempt = 0;

	while (!mesh_stopping(m)) {
		lm_diag d = {{0}};
		int rc = 0;
		if (mesh_spawns(m))
			rc = mesh_worker_spawn(m, k->j, &d);
		if (rc == 0)
			rc = keeper_handshake(k, &d);
		if (mesh_stopping(m))
			break;
		char why[600];
		if (rc == 0) {
			int64_t since = lm_now_ms();
			mesh_worker_set_state(m, k->j, MESH_WORKER_READY, "");
			keeper_watch(k);
			if (mesh_stopping(m))
				break;
			if (lm_now_ms() - since >= KEEPER_STABLE_MS)
				attempt = 0;
			mesh_worker_why(m, k->j, why, sizeof why);
			lm_error("worker %s is down: %s", keeper_name(k), why);
		} else {
			lm_error("%s", lm_diag_str(&d, rc));
			mesh_worker_set_why(m, k->j, lm_diag_str(&d, rc));
		}
		mesh_worker_kill(m, k->j);
		attempt++;
		mesh_worker_set_restarts(m, k->j, attempt);
		mesh_worker_why(m, k->j, why, sizeof why);
		if (attempt > KEEPER_RESTART_BUDGET) {
			char msg[700];
			snprintf(msg, sizeof msg, "worker %s gave up after %d restarts: %s",
				 keeper_name(k), KEEPER_RESTART_BUDGET, why);
			mesh_worker_set_state(m, k->j, MESH_WORKER_FAILED, msg);
			lm_error("%s", msg);
			if (mesh_spawns(m))
				break;
			attempt =
				KEEPER_RESTART_BUDGET; /* keep probing a worker someone else runs */
		} else {
			mesh_worker_set_state(m, k->j, MESH_WORKER_DOWN, NULL);
		}
		int64_t backoff = KEEPER_BACKOFF_MIN_MS << (attempt < 10 ? attempt - 1 : 9);
		if (backoff > KEEPER_BACKOFF_MAX_MS)
			backoff = KEEPER_BACKOFF_MAX_MS;
		lm_info("%s: starting again in %lld ms (attempt %d of %d)", keeper_name(k),
			(long long)backoff, attempt, KEEPER_RESTART_BUDGET);
		mesh_sleep(m, backoff);
	}
	return NULL;
}

/* ------------------------------------------------------------------ lifecycle */

int keeper_start(struct keeper *k, struct mesh *m, int32_t j)
{
	*k = (struct keeper){.m = m, .j = j};
	if (pthread_create(&k->thread, NULL, keeper_main, k) != 0)
		return LM_EOS;
	k->started = true;
	return 0;
}

void keeper_stop(struct keeper *k)
{
	if (k->started)
		pthread_join(k->thread, NULL);
	k->started = false;
}

void keeper_fini(struct keeper *k)
{
	if (k == NULL)
		return;
	ctl_close(&k->ctl);
}

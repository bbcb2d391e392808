/* keeper.c — one thread per worker that brings it up and keeps it up.
 *
 *   start      spawn the process (asking the libuv loop thread, which owns process handles),
 *              or, for a worker started elsewhere, just find it
 *   handshake  HELLO until it answers (protocol version), ASSIGN its slice, wait for READY
 *              (fingerprint, KV and weight bytes, and the slice's digest, held to what the
 *              mesh first served); a process that exits meanwhile ends the wait
 *   watch      every worker, spawned or not: the exit callback (spawned), a liveness probe
 *              on its control plane (HELLO every KEEPER_HEARTBEAT_MS; silence for
 *              [coordinator] worker_timeout means it is gone), and a progress check on the
 *              batches it holds (below)
 *   restart    kill what is left (if it is ours), back off, start again, for as long as the
 *              mesh runs: KEEPER_BACKOFF_MIN_MS doubling to KEEPER_BACKOFF_MAX_MS while it
 *              dies soon after each start, back to the minimum once it stayed up for
 *              KEEPER_STABLE_MS. KEEPER_FAIL_STREAK starts in a row that never got ready (or
 *              one refused for another slice than the mesh serves) mark it failed: the mesh
 *              then says why at once and fails requests fast, and the keeper goes on trying
 *              every KEEPER_BACKOFF_MAX_MS until it is ready again.
 *
 * The progress check: when the scheduler's oldest batch has been travelling for longer than
 * worker_timeout, each keeper asks its worker's STATUS for the ids of the last ring message it
 * took and passed on. A worker whose predecessor passed the batch on, that has not passed it
 * on itself, and that computes nothing and has nothing queued, has lost it; after another
 * worker_timeout like that it is declared down like a silent one. So is one that takes
 * nothing while its predecessor has been trying to hand it a message for 2 x worker_timeout.
 * (One that is still computing is left to finish.)
 *
 * Every transition is reported with mesh_worker_set_state(), where the mesh pauses the
 * scheduler while a worker is away, resumes it (replaying every live sequence into the rebuilt
 * caches) when all are back, and fails requests fast with the reason while one is failed. The
 * keeper sees the mesh only through mesh_ops.h.
 */
#include "coordinator/supervise/keeper.h"

#include <stdio.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/config/mesh_config.h"
#include "common/plan/fence.h"
#include "coordinator/supervise/mesh_ops.h"
#include "coordinator/sched/scheduler.h"

/* Starts in a row that never got ready before the worker is reported failed (it is still
 * started again, every KEEPER_BACKOFF_MAX_MS while it is failed). */
#define KEEPER_FAIL_STREAK 5
/* A worker that was up this long before it died restarts at the minimum backoff. */
#define KEEPER_STABLE_MS      1000
#define KEEPER_BACKOFF_MIN_MS 100
#define KEEPER_BACKOFF_MAX_MS 5000
/* How often the liveness probe asks. */
#define KEEPER_HEARTBEAT_MS 200
/* A wait of the watch that overran its length by more than this was the keeper's own thread
 * starved (an overloaded machine): the overrun does not count as the worker's silence. */
#define KEEPER_SLACK_MS 100

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
	if ((rc = mesh_check_digest(m, k->j, ready.digest, d)) != 0)
		return rc;
	mesh_worker_set_ready(m, k->j, &ready);
	lm_info("%s: ready, layers [%d, %d), KV %.2f MiB (%llu bytes), weights %.2f MiB, resident "
		"%.2f MiB",
		keeper_name(k), st->start, st->end, (double)ready.kv_bytes / 1048576.0,
		(unsigned long long)ready.kv_bytes, (double)ready.weight_bytes / 1048576.0,
		(double)ready.rss_bytes / 1048576.0);
	return 0;
}

/* ------------------------------------------------------------------ watch */

/* A suspicion of the progress check: the batch the worker seems to have lost, and since when
 * (on the watch's clock). */
struct keeper_suspect {
	uint64_t batch;
	int64_t since_ms;
};

/* The watch's clock: real time, less what the keeper's own thread lost to an overloaded
 * machine. Each step advances it by what the step took, but by no more than the step's length
 * plus KEEPER_SLACK_MS: when the keeper itself was not scheduled, the worker (starved as well,
 * on the same CPUs) must not be taken for a hung one. On a quiet machine it is real time. */
struct keeper_clock {
	int64_t real, eff;
};

static int64_t keeper_tick(struct keeper_clock *c, int64_t expected_ms)
{
	int64_t now = lm_now_ms(), dt = now - c->real;
	c->real = now;
	c->eff += dt < expected_ms + KEEPER_SLACK_MS ? dt : expected_ms + KEEPER_SLACK_MS;
	return c->eff;
}

/* The "ring" of a worker's status document (worker/health.h). */
static bool keeper_read_ring(const cJSON *doc, struct mesh_progress *pg)
{
	const cJSON *ring = cJSON_GetObjectItem(doc, "ring");
	const cJSON *in = cJSON_GetObjectItem(ring, "in"), *out = cJSON_GetObjectItem(ring, "out");
	const cJSON *busy = cJSON_GetObjectItem(ring, "busy_ms");
	const cJSON *send = cJSON_GetObjectItem(ring, "send_ms");
	const cJSON *queued = cJSON_GetObjectItem(ring, "queued");
	if (!cJSON_IsNumber(in) || !cJSON_IsNumber(out) || !cJSON_IsNumber(busy) ||
	    !cJSON_IsNumber(queued))
		return false;
	*pg = (struct mesh_progress){.in = (uint64_t)in->valuedouble,
				     .out = (uint64_t)out->valuedouble,
				     .busy_ms = (int64_t)busy->valuedouble,
				     .send_ms =
					     cJSON_IsNumber(send) ? (int64_t)send->valuedouble : 0,
				     .queued = (int32_t)queued->valuedouble,
				     .at_ms = lm_now_ms()};
	return true;
}

/* The progress check (see the top of this file). True, with why, when the worker has held the
 * oldest batch without computing or passing it on for worker_timeout. */
static bool keeper_progress(struct keeper *k, struct keeper_suspect *sus, int64_t eff, char *why,
			    size_t cap)
{
	struct mesh *m = k->m;
	struct sched *s = mesh_sched(m);
	int64_t now = lm_now_ms(), limit = mesh_worker_timeout_ms(m);
	uint64_t batch;
	int64_t sent;
	if (s == NULL || !sched_oldest(s, &batch, &sent) || now - sent < limit) {
		sus->batch = 0;
		return false;
	}
	lm_diag d = {{0}};
	cJSON *doc = ctl_status(&k->ctl, mesh_fingerprint(m), (int)limit, &d);
	struct mesh_progress me, pred = {0};
	bool read = doc != NULL && keeper_read_ring(doc, &me);
	cJSON_Delete(doc);
	if (!read)
		return false; /* silence is the liveness probe's business */
	mesh_worker_set_progress(m, k->j, &me);
	if (k->j > 0)
		mesh_worker_progress(m, k->j - 1, &pred);
	bool passed_to_it = k->j == 0 ||
			    (pred.at_ms != 0 && now - pred.at_ms <= 2 * limit && pred.out >= batch);
	/* Its predecessor has been trying to hand it the batch for a while, and it takes
	 * nothing: its data plane does not accept. */
	bool fresh = k->j > 0 && pred.at_ms != 0 && now - pred.at_ms <= 2 * limit;
	if (fresh && pred.out < batch && pred.send_ms > 2 * limit && me.in < batch &&
	    me.busy_ms == 0 && me.queued == 0) {
		snprintf(why, cap,
			 "takes no data: its predecessor has been trying to hand it a message for "
			 "%.1f s (batch %llu waits)",
			 (double)pred.send_ms / 1000.0, (unsigned long long)batch);
		return true;
	}
	if (!passed_to_it || me.out >= batch || me.busy_ms > 0 || me.queued > 0) {
		sus->batch = 0;
		return false;
	}
	if (sus->batch != batch) {
		*sus = (struct keeper_suspect){batch, eff};
		return false;
	}
	if (eff - sus->since_ms < limit)
		return false;
	snprintf(why, cap,
		 "holds batch %llu but has passed nothing on for %.1f s: it answers its control "
		 "plane, and its data plane makes no progress",
		 (unsigned long long)batch, (double)(now - sent) / 1000.0);
	return true;
}

/* One liveness probe. 1 while the worker answers well, 0 when it is silent, -1 (with why) when
 * its answer shows it is not the worker that was assigned. */
static int keeper_probe(struct keeper *k, int timeout_ms, char *why, size_t cap)
{
	struct wire_hello hello;
	lm_diag d = {{0}};
	int rc = ctl_hello(&k->ctl, mesh_fingerprint(k->m), &hello, timeout_ms, &d);
	if (rc == 0 && !hello.has_slice) {
		snprintf(why, cap, "restarted and lost its slice");
		return -1;
	}
	if (rc == 0)
		return 1;
	if (rc == LM_ETIMEOUT || rc == LM_EIO)
		return 0;
	snprintf(why, cap, "answered its liveness probe wrongly: %s", lm_diag_str(&d, rc));
	return -1;
}

/* Serving: returns when the worker is lost (its process exited, it stopped answering its
 * liveness probe, or its data plane stopped moving), with the reason recorded as the worker's
 * why; or when the mesh stops. */
static void keeper_watch(struct keeper *k)
{
	struct mesh *m = k->m;
	struct keeper_clock clk = {lm_now_ms(), 0};
	int64_t limit = mesh_worker_timeout_ms(m), last_ok = 0;
	struct keeper_suspect sus = {0};
	char why[512];
	for (;;) {
		if (mesh_spawns(m)) {
			if (mesh_worker_wait_exit_ms(m, k->j, KEEPER_HEARTBEAT_MS))
				return; /* the exit callback wrote why */
		} else {
			mesh_sleep(m, KEEPER_HEARTBEAT_MS);
		}
		if (mesh_stopping(m))
			return;
		/* A redeploy moved the worker to another process and address: watch that one. */
		struct mesh_addrs at;
		mesh_worker_addrs(m, k->j, &at);
		if (strcmp(at.control, k->ctl.addr) != 0) {
			lm_diag d = {{0}};
			if (ctl_open(&k->ctl, keeper_name(k), at.control, &d) != 0)
				lm_warn("%s", lm_diag_str(&d, LM_EIO));
			last_ok = keeper_tick(&clk, KEEPER_HEARTBEAT_MS);
			sus.batch = 0;
		}
		int64_t left = limit - (keeper_tick(&clk, KEEPER_HEARTBEAT_MS) - last_ok);
		int64_t timeout = left < 50 ? 50 : left;
		int r = keeper_probe(k, (int)timeout, why, sizeof why);
		if (mesh_spawns(m) && mesh_worker_wait_exit_ms(m, k->j, 0))
			return; /* it died meanwhile: how it ended is the reason, not the silence */
		if (r < 0)
			break;
		int64_t eff = keeper_tick(&clk, timeout);
		if (r > 0)
			last_ok = eff;
		if (eff - last_ok >= limit) {
			snprintf(why, sizeof why,
				 "did not answer its liveness probe on its control plane (%s) for "
				 "%.1f s: stopped, hung or cut off",
				 k->ctl.addr, (double)(eff - last_ok) / 1000.0);
			break;
		}
		if (keeper_progress(k, &sus, eff, why, sizeof why))
			break;
	}
	mesh_worker_set_why(m, k->j, why);
}

/* ------------------------------------------------------------------ restart */

/* The wait before start number `quick` of a streak of quick deaths (1, 2, ...). */
static int64_t keeper_backoff(int quick)
{
	int64_t b = KEEPER_BACKOFF_MIN_MS << (quick < 1 ? 0 : quick < 10 ? quick - 1 : 9);
	return b < KEEPER_BACKOFF_MAX_MS ? b : KEEPER_BACKOFF_MAX_MS;
}

/* After a loss or a failed start: the state the mesh shows, and a log line when the worker
 * becomes failed. It is failed after KEEPER_FAIL_STREAK starts in a row that never got ready,
 * at once when it was refused for holding another slice than the mesh serves (`refused`: its
 * fingerprint or its digest; the file will not change by trying again soon), and it stays
 * failed until it is ready again (`was_failed`). A refusal's message gives no count: one
 * refusal is enough. Returns whether the worker is failed. */
static bool keeper_report(struct keeper *k, int failed_starts, bool refused, bool was_failed,
			  const char *why)
{
	struct mesh *m = k->m;
	if (!refused && !was_failed && failed_starts < KEEPER_FAIL_STREAK) {
		mesh_worker_set_state(m, k->j, MESH_WORKER_DOWN, NULL);
		return false;
	}
	char msg[800];
	if (refused)
		snprintf(msg, sizeof msg, "worker %s cannot serve: %s", keeper_name(k), why);
	else
		snprintf(msg, sizeof msg, "worker %s cannot start (%d tries in a row): %s",
			 keeper_name(k), failed_starts, why);
	mesh_worker_set_state(m, k->j, MESH_WORKER_FAILED, msg);
	if (!was_failed)
		lm_error("%s; trying again every %d s", msg, KEEPER_BACKOFF_MAX_MS / 1000);
	return true;
}

static void *keeper_main(void *arg)
{
	struct keeper *k = arg;
	struct mesh *m = k->m;
	int failed_starts = 0, quick = 0;
	bool failed = false;

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
			failed_starts = 0;
			failed = false;
			mesh_worker_set_state(m, k->j, MESH_WORKER_READY, "");
			keeper_watch(k);
			if (mesh_stopping(m))
				break;
			quick = lm_now_ms() - since >= KEEPER_STABLE_MS ? 1 : quick + 1;
			mesh_worker_why(m, k->j, why, sizeof why);
			lm_error("worker %s is down: %s", keeper_name(k), why);
		} else {
			failed_starts++;
			quick++;
			snprintf(why, sizeof why, "%s", lm_diag_str(&d, rc));
			lm_error("%s", why);
			mesh_worker_set_why(m, k->j, why);
		}
		mesh_worker_kill(m, k->j);
		mesh_worker_note_restart(m, k->j, quick);
		failed = keeper_report(k, failed_starts, rc == LM_EFINGERPRINT, failed, why);
		/* A failed worker is tried at the capped interval at once, not after the doubling
		 * reaches it: that is the interval the log line promises. */
		int64_t backoff = failed ? KEEPER_BACKOFF_MAX_MS : keeper_backoff(quick);
		lm_info("%s: starting again in %lld ms (restart %d of this streak)", keeper_name(k),
			(long long)backoff, quick);
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

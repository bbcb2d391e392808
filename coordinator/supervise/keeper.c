/* keeper.c — one thread per worker that brings it up and keeps it up.
 *
 *   start      spawn the process (procs.h: the loop thread owns process handles), or, for a
 *              worker started elsewhere, just find it; from its spawn on, a process must be
 *              ready within its start bound (keeper_policy.h), or it is killed as hung
 *   handshake  HELLO until it answers (protocol version), ASSIGN its slice, wait for READY
 *              (fingerprint, KV and weight bytes, and the slice's digest, held to what the
 *              mesh first served); a process that exits meanwhile ends the wait
 *   watch      every worker, spawned or not: the exit callback (spawned), a liveness probe
 *              on its control plane (HELLO every KEEPER_HEARTBEAT_MS; silence for
 *              [coordinator] worker_timeout means it is gone), and a progress check on the
 *              batches it holds (below)
 *   restart    kill what is left (if it is ours), back off, start again, or give up: the
 *              choices are keeper_policy.h's
 *
 * The progress check: when the scheduler's oldest batch has been travelling for longer than
 * worker_timeout, each keeper asks its worker's STATUS for the ids of the last ring message it
 * took and passed on. A worker whose predecessor passed the batch on, that has not passed it
 * on itself, and that computes nothing and has nothing queued, has lost it; after another
 * worker_timeout like that it is declared down like a silent one. So is one that takes
 * nothing while its predecessor has been trying to hand it a message for 2 x worker_timeout.
 * (One that is still computing is left to finish.)
 *
 * Every transition is written into the worker table, whose listener (the mesh) pauses the
 * scheduler while a worker is away, resumes it (replaying every live sequence into the rebuilt
 * caches) when all are back, and fails requests fast with the reason while one is failed.
 */
#include "coordinator/supervise/keeper.h"

#include <stdio.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/config/mesh_config.h"
#include "common/plan/fence.h"
#include "coordinator/plan/planner.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/supervise/keeper_policy.h"
#include "coordinator/supervise/procs.h"
#include "coordinator/supervise/workers.h"

/* How often the liveness probe asks. */
#define KEEPER_HEARTBEAT_MS 200
/* A wait of the watch that overran its length by more than this was the keeper's own thread
 * starved (an overloaded machine): the overrun does not count as the worker's silence. */
#define KEEPER_SLACK_MS 100

static const char *keeper_name(const struct keeper *k)
{
	return facts_worker(k->f, k->j)->name;
}

/* Writes u into the worker's row (u's unset fields keep theirs). */
static void keeper_set(struct keeper *k, struct worker_update u)
{
	workers_update(k->ws, k->j, &u);
}

/* ------------------------------------------------------------------ bring-up */

/* Whether the worker's process still runs (spawn mode) within its start bound, and the mesh
 * is not stopping. */
static bool keeper_alive(void *arg)
{
	struct keeper *k = arg;
	char why[8];
	if (procs_stopping(k->pr))
		return false;
	if (!k->f->spawns)
		return true;
	if (procs_ended(k->pr, k->j, NULL, 0, why, sizeof why))
		return false;
	return k->start_deadline == 0 || lm_now_ms() < k->start_deadline;
}

/* Adds what ended the wait to a failure: the process ending (how, as the exit callback
 * recorded it), or its start bound passing (then it is hung: LM_ETIMEOUT). */
static int keeper_start_reason(struct keeper *k, int rc, int64_t bound_ms, lm_diag *d)
{
	char why[256];
	if (rc != LM_EUNAVAILABLE || !k->f->spawns)
		return rc;
	if (procs_ended(k->pr, k->j, NULL, 0, why, sizeof why)) {
		if (why[0])
			lm_fail(d, rc, "worker %s %s before it was ready", keeper_name(k), why);
		return rc;
	}
	if (k->start_deadline != 0 && lm_now_ms() >= k->start_deadline)
		return lm_fail(d, LM_ETIMEOUT,
			       "worker %s hung while starting: not ready %.1f s after it was "
			       "started (the bound for its slice); killed",
			       keeper_name(k), (double)bound_ms / 1000.0);
	return rc;
}

/* HELLO until the worker answers, then ASSIGN and READY. */
static int keeper_handshake(struct keeper *k, int64_t bound_ms, lm_diag *d)
{
	const struct mesh_facts *f = k->f;
	const struct fence_stage *st = &f->plan->stages[k->j];
	struct worker_info self, next;
	struct wire_hello hello;
	struct wire_assign a;
	struct wire_ready ready;
	int rc;

	workers_get(k->ws, k->j, &self);
	if (k->j + 1 < f->n_workers)
		workers_get(k->ws, k->j + 1, &next);
	planner_assignment(f->cfg, f->plan, k->j, f->max_seq, f->cfg->slots + MESH_PROBE_SLOTS,
			   k->j + 1 < f->n_workers ? next.at.data : f->cfg->data_in, &a);
	k->ctl.tls = f->tls;
	if ((rc = ctl_open(&k->ctl, keeper_name(k), self.at.control, d)) != 0)
		return rc;
	rc = ctl_hello_wait(&k->ctl, f->fingerprint, &hello, f->handshake_ms, keeper_alive, k, d);
	if (rc != 0)
		return keeper_start_reason(k, rc, bound_ms, d);
	lm_info("%s: pid %d, build %s, loading layers [%d, %d) (%.1f MiB weights, %.1f MiB KV)",
		keeper_name(k), hello.pid, hello.build, st->start, st->end,
		(double)st->weight_bytes / 1048576.0, (double)st->kv_bytes / 1048576.0);
	if (!f->spawns)
		keeper_set(k, (struct worker_update){.pid = hello.pid});
	rc = ctl_assign(&k->ctl, &a, f->fingerprint, &ready, f->handshake_ms, keeper_alive, k, d);
	if (rc != 0)
		return keeper_start_reason(k, rc, bound_ms, d);
	if ((rc = workers_check_digest(k->ws, k->j, ready.digest, d)) != 0)
		return rc;
	keeper_set(k, (struct worker_update){.ready = &ready});
	lm_info("%s: ready, layers [%d, %d), KV %.2f MiB (%llu bytes), weights %.2f MiB, resident "
		"%.2f MiB",
		keeper_name(k), st->start, st->end, (double)ready.kv_bytes / 1048576.0,
		(unsigned long long)ready.kv_bytes, (double)ready.weight_bytes / 1048576.0,
		(double)ready.rss_bytes / 1048576.0);
	return 0;
}

/* One start: the process (spawn mode), whose reason for not being ready yet is its start from
 * now on (/readyz shows the current reason, and what ended the last one), then the handshake
 * within the start bound. */
static int keeper_start_one(struct keeper *k, lm_diag *d)
{
	const struct mesh_facts *f = k->f;
	int64_t bound = keeper_start_bound_ms(f->plan->stages[k->j].weight_bytes,
					      f->worker_timeout_ms, f->handshake_ms);
	k->start_deadline = 0;
	if (f->spawns) {
		struct worker_info w;
		struct proc *c;
		workers_get(k->ws, k->j, &w);
		int rc = procs_spawn(k->pr, k->j, w.bin, &w.at, true, &c, d);
		if (rc != 0)
			return rc;
		k->start_deadline = lm_now_ms() + bound;
		/* A failed one keeps saying why; one that has already ended (its exit wrote a
		 * fresher why) is not starting any more. */
		struct worker_info now;
		workers_get(k->ws, k->j, &now);
		if (w.state != MESH_WORKER_FAILED && strcmp(now.why, w.why) == 0) {
			char why[700];
			if (w.why[0])
				snprintf(why, sizeof why, "starting pid %d (before it: %s)",
					 now.pid, w.why);
			else
				snprintf(why, sizeof why, "starting pid %d", now.pid);
			keeper_set(k, (struct worker_update){.why = why});
		}
	}
	int rc = keeper_handshake(k, bound, d);
	k->start_deadline = 0;
	return rc;
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
	struct sched *s = workers_sched(k->ws, false);
	int64_t now = lm_now_ms(), limit = k->f->worker_timeout_ms;
	uint64_t batch;
	int64_t sent;
	if (s == NULL || !sched_oldest(s, &batch, &sent) || now - sent < limit) {
		sus->batch = 0;
		return false;
	}
	lm_diag d = {{0}};
	cJSON *doc = ctl_status(&k->ctl, k->f->fingerprint, (int)limit, &d);
	struct mesh_progress me, pred = {0};
	bool read = doc != NULL && keeper_read_ring(doc, &me);
	cJSON_Delete(doc);
	if (!read)
		return false; /* silence is the liveness probe's business */
	keeper_set(k, (struct worker_update){.progress = &me});
	if (k->j > 0) {
		struct worker_info before;
		workers_get(k->ws, k->j - 1, &before);
		pred = before.progress;
	}
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
	int rc = ctl_hello(&k->ctl, k->f->fingerprint, &hello, timeout_ms, &d);
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

/* Once it has served for KEEPER_STABLE_MS, its streak is over (shown as 0 restarts). */
static void keeper_note_served(struct keeper *k, struct keeper_state *st, int64_t ready_at,
			       bool *noted)
{
	if (*noted || lm_now_ms() - ready_at < KEEPER_STABLE_MS)
		return;
	*noted = true;
	struct keeper_action a = keeper_decide(st, &(struct keeper_event){.kind = KEEPER_SERVED});
	keeper_set(k, (struct worker_update){.set_restarts = true, .restarts = a.streak});
}

/* Serving: returns when the worker is lost (its process exited, it stopped answering its
 * liveness probe, or its data plane stopped moving), with the reason recorded as the worker's
 * why; or when the mesh stops. */
static void keeper_watch(struct keeper *k, struct keeper_state *st, int64_t ready_at)
{
	const struct mesh_facts *f = k->f;
	struct keeper_clock clk = {lm_now_ms(), 0};
	int64_t limit = f->worker_timeout_ms, last_ok = 0;
	struct keeper_suspect sus = {0};
	bool noted = false;
	char why[512], ended[8];
	for (;;) {
		if (f->spawns) {
			if (procs_ended(k->pr, k->j, NULL, KEEPER_HEARTBEAT_MS, ended,
					sizeof ended))
				return; /* the exit callback wrote why */
		} else {
			procs_sleep(k->pr, KEEPER_HEARTBEAT_MS);
		}
		if (procs_stopping(k->pr))
			return;
		keeper_note_served(k, st, ready_at, &noted);
		/* A redeploy moved the worker to another process and address: watch that one. */
		struct worker_info w;
		workers_get(k->ws, k->j, &w);
		if (strcmp(w.at.control, k->ctl.addr) != 0) {
			lm_diag d = {{0}};
			if (ctl_open(&k->ctl, keeper_name(k), w.at.control, &d) != 0)
				lm_warn("%s", lm_diag_str(&d, LM_EIO));
			last_ok = keeper_tick(&clk, KEEPER_HEARTBEAT_MS);
			sus.batch = 0;
		}
		int64_t left = limit - (keeper_tick(&clk, KEEPER_HEARTBEAT_MS) - last_ok);
		int64_t timeout = left < 50 ? 50 : left;
		int r = keeper_probe(k, (int)timeout, why, sizeof why);
		if (f->spawns && procs_ended(k->pr, k->j, NULL, 0, ended, sizeof ended))
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
	keeper_set(k, (struct worker_update){.why = why});
}

/* ------------------------------------------------------------------ restart */

/* Applies a restart's action: the worker's state and streak in the table (a failed one with a
 * message that says why), and the log. False when the keeper gives up (the mesh stops). */
static bool keeper_apply(struct keeper *k, const struct keeper_action *a, int failed_starts,
			 bool refused, const char *why)
{
	char msg[800];
	const char *shown = NULL;
	if (a->state == MESH_WORKER_FAILED) {
		/* A refusal's message gives no count: one refusal is enough. */
		if (refused)
			snprintf(msg, sizeof msg, "worker %s cannot serve: %s", keeper_name(k),
				 why);
		else
			snprintf(msg, sizeof msg, "worker %s cannot start (%d tries in a row): %s",
				 keeper_name(k), failed_starts, why);
		shown = msg;
	}
	if (a->verdict == KEEPER_GIVE_UP) {
		keeper_set(k, (struct worker_update){.set_state = true,
						     .state = a->state,
						     .why = shown,
						     .set_restarts = true,
						     .restarts = a->streak,
						     .restarted = true});
		char stop[900];
		snprintf(stop, sizeof stop,
			 "%s; giving up: the mesh has not served yet, so `layermesh up` stops",
			 msg);
		procs_request_stop(k->pr, stop, 1);
		return false;
	}
	keeper_set(k, (struct worker_update){.set_state = true,
					     .state = a->state,
					     .why = shown,
					     .set_restarts = true,
					     .restarts = a->streak,
					     .restarted = true});
	if (a->newly_failed)
		lm_error("%s; trying again every %d s", msg, KEEPER_BACKOFF_MAX_MS / 1000);
	lm_info("%s: starting again in %lld ms (restart %d of this streak)", keeper_name(k),
		(long long)a->backoff_ms, a->streak);
	return true;
}

static void *keeper_main(void *arg)
{
	struct keeper *k = arg;
	struct keeper_state st = {0};

	while (!procs_stopping(k->pr)) {
		lm_diag d = {{0}};
		int rc = keeper_start_one(k, &d);
		if (procs_stopping(k->pr))
			break;
		struct keeper_event ev = {.served = workers_sched(k->ws, false) != NULL};
		struct worker_info w;
		if (rc == 0) {
			int64_t ready_at = lm_now_ms();
			struct keeper_action a =
				keeper_decide(&st, &(struct keeper_event){.kind = KEEPER_READY});
			keeper_set(k, (struct worker_update){.set_state = true,
							     .state = a.state,
							     .why = "",
							     .set_restarts = true,
							     .restarts = a.streak});
			keeper_watch(k, &st, ready_at);
			if (procs_stopping(k->pr))
				break;
			ev.kind = KEEPER_LOST;
			ev.up_ms = lm_now_ms() - ready_at;
			ev.served = workers_sched(k->ws, false) != NULL;
			workers_get(k->ws, k->j, &w);
			lm_error("worker %s is down: %s", keeper_name(k), w.why);
		} else {
			ev.kind = rc == LM_ETIMEOUT && k->f->spawns ? KEEPER_START_HUNG
								    : KEEPER_START_FAILED;
			ev.refused = rc == LM_EFINGERPRINT;
			snprintf(w.why, sizeof w.why, "%s", lm_diag_str(&d, rc));
			lm_error("%s", w.why);
			keeper_set(k, (struct worker_update){.why = w.why});
		}
		procs_kill(k->pr, k->j);
		struct keeper_action a = keeper_decide(&st, &ev);
		if (!keeper_apply(k, &a, st.failed_starts, ev.refused, w.why))
			break;
		procs_sleep(k->pr, a.backoff_ms);
	}
	return NULL;
}

/* ------------------------------------------------------------------ lifecycle */

int keeper_start(struct keeper *k, const struct mesh_facts *f, struct workers *ws, struct procs *pr,
		 int32_t j)
{
	*k = (struct keeper){.f = f, .ws = ws, .pr = pr, .j = j};
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

/* workers.c — the worker table. See workers.h. */
#include "coordinator/supervise/workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

struct worker_row {
	struct worker_info info;
};

int workers_init(struct workers *ws, const struct mesh_facts *f, const char *bin,
		 const struct workers_listener *listener, lm_diag *d)
{
	int32_t n = f->n_workers;
	*ws = (struct workers){.f = f, .listener = *listener};
	ws->rows = calloc((size_t)n + 1, sizeof *ws->rows);
	ws->now = calloc((size_t)n + 1, sizeof *ws->now);
	if (ws->rows == NULL || ws->now == NULL) {
		free(ws->rows);
		free(ws->now);
		*ws = (struct workers){0};
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	pthread_mutex_init(&ws->mu, NULL);
	for (int32_t j = 0; j < n; j++) {
		struct worker_info *w = &ws->rows[j].info;
		const struct mesh_worker *wc = facts_worker(f, j);
		w->state = MESH_WORKER_STARTING;
		snprintf(w->bin, sizeof w->bin, "%s", bin);
		snprintf(w->at.data, sizeof w->at.data, "%s", wc->data);
		snprintf(w->at.control, sizeof w->at.control, "%s", wc->control);
		snprintf(w->at.http, sizeof w->at.http, "%s", wc->http);
	}
	return 0;
}

void workers_fini(struct workers *ws)
{
	if (ws == NULL || ws->rows == NULL)
		return;
	pthread_mutex_destroy(&ws->mu);
	free(ws->rows);
	free(ws->now);
	*ws = (struct workers){0};
}

/* Tells the listener how every worker stands; under mu. */
static void workers_notify(struct workers *ws)
{
	struct workers_summary s = {.n = ws->f->n_workers,
				    .state = ws->now,
				    .failed = -1,
				    .away = -1,
				    .why_failed = "",
				    .why_away = ""};
	for (int32_t i = 0; i < s.n; i++) {
		const struct worker_info *w = &ws->rows[i].info;
		ws->now[i] = w->state;
		if (w->state == MESH_WORKER_FAILED && s.failed < 0) {
			s.failed = i;
			s.why_failed = w->why;
		} else if (w->state != MESH_WORKER_READY && w->state != MESH_WORKER_FAILED &&
			   s.away < 0) {
			s.away = i;
			s.why_away = w->why;
		}
	}
	if (ws->listener.changed == NULL)
		return;
	struct sched *sched = ws->listener.changed(ws->listener.ctx, &s);
	if (sched != NULL)
		ws->sched = sched;
}

void workers_update(struct workers *ws, int32_t j, const struct worker_update *u)
{
	pthread_mutex_lock(&ws->mu);
	struct worker_info *w = &ws->rows[j].info;
	bool notify = false;
	if (u->why != NULL)
		snprintf(w->why, sizeof w->why, "%.*s", (int)sizeof w->why - 1, u->why);
	if (u->pid != 0)
		w->pid = u->pid;
	if (u->set_restarts)
		w->restarts = u->restarts;
	if (u->restarted)
		w->restarts_total++;
	if (u->ready != NULL)
		w->ready = *u->ready;
	if (u->progress != NULL)
		w->progress = *u->progress;
	if (u->at != NULL)
		w->at = *u->at;
	if (u->bin != NULL)
		snprintf(w->bin, sizeof w->bin, "%s", u->bin);
	if (u->set_state) {
		w->state = u->state;
		notify = true;
	}
	if (u->lost && w->state == MESH_WORKER_READY) {
		/* Noticed now, not at the next heartbeat: stop dispatching at once. */
		lm_error("worker %s (pid %d) %s", facts_worker(ws->f, j)->name, w->pid, w->why);
		w->state = MESH_WORKER_DOWN;
		notify = true;
	}
	if (notify)
		workers_notify(ws);
	pthread_mutex_unlock(&ws->mu);
}

void workers_get(struct workers *ws, int32_t j, struct worker_info *out)
{
	pthread_mutex_lock(&ws->mu);
	*out = ws->rows[j].info;
	pthread_mutex_unlock(&ws->mu);
}

void workers_get_all(struct workers *ws, struct worker_info *out)
{
	pthread_mutex_lock(&ws->mu);
	for (int32_t i = 0; i < ws->f->n_workers; i++)
		out[i] = ws->rows[i].info;
	pthread_mutex_unlock(&ws->mu);
}

int workers_check_digest(struct workers *ws, int32_t j, uint64_t digest, lm_diag *d)
{
	int rc = 0;
	pthread_mutex_lock(&ws->mu);
	struct worker_info *w = &ws->rows[j].info;
	if (w->digest == 0)
		w->digest = digest;
	else if (digest != w->digest)
		rc = lm_fail(d, LM_EFINGERPRINT,
			     "worker %s's slice of %s has changed: its tensors' digest is %016llx; "
			     "the mesh serves %016llx (the model file was replaced under the "
			     "running mesh: put it back, or restart the mesh on the new file)",
			     facts_worker(ws->f, j)->name, ws->f->cfg->model_path,
			     (unsigned long long)digest, (unsigned long long)w->digest);
	pthread_mutex_unlock(&ws->mu);
	return rc;
}

struct sched *workers_sched(struct workers *ws, bool every)
{
	pthread_mutex_lock(&ws->mu);
	struct sched *s = ws->sched;
	for (int32_t i = 0; every && s != NULL && i < ws->f->n_workers; i++)
		if (ws->rows[i].info.state != MESH_WORKER_READY)
			s = NULL;
	pthread_mutex_unlock(&ws->mu);
	return s;
}

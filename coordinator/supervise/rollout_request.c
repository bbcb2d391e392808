/* rollout_request.c — the requests that start a redeploy (POST /v1/admin/redeploy), its
 * status, and the rollouts' lifecycle. The redeploy itself runs in rollout.c. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "coordinator/supervise/facts.h"
#include "coordinator/supervise/rollout.h"
#include "coordinator/supervise/rollout_impl.h"
#include "coordinator/supervise/workers.h"

/* By enum ro_worker_state. */
static const char *const ro_state_names[] = {"untouched", "pending", "in progress", "replaced",
					     "failed"};

static void ro_free(struct rollout *r)
{
	if (r == NULL)
		return;
	free(r->order);
	free(r->w);
	free(r);
}

static cJSON *ro_error(int *status, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static cJSON *ro_error(int *status, int code, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	*status = code;
	cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddStringToObject(e, "type",
				code == 409   ? "conflict"
				: code >= 500 ? "server_error"
					      : "invalid_request_error");
	return o;
}

static int32_t ro_worker_index(const struct rollouts *rs, const char *name)
{
	for (int32_t j = 0; j < rs->f->n_workers; j++)
		if (strcmp(ro_name(rs, j), name) == 0)
			return j;
	return -1;
}

static cJSON *ro_plan_json(const struct rollouts *rs, const struct rollout *r)
{
	cJSON *plan = cJSON_CreateArray();
	for (int32_t at = 0; at < r->n_order;) {
		int32_t nc = at == 0 ? 1 : r->batch;
		if (nc > r->n_order - at)
			nc = r->n_order - at;
		cJSON *b = cJSON_CreateArray();
		for (int32_t k = 0; k < nc; k++)
			cJSON_AddItemToArray(b, cJSON_CreateString(ro_name(rs, r->order[at + k])));
		cJSON_AddItemToArray(plan, b);
		at += nc;
	}
	return plan;
}

/* The request's fields, each one this version knows (400 for another). */
static cJSON *ro_check_fields(const cJSON *req, int *status)
{
	static const char *const known[] = {"binary", "workers", "all",       "batch",
					    "canary", "dry_run", "tolerance", NULL};
	for (const cJSON *k = req->child; k != NULL; k = k->next) {
		bool ok = false;
		for (int i = 0; known[i] != NULL && !ok; i++)
			ok = strcmp(k->string, known[i]) == 0;
		if (!ok)
			return ro_error(status, 400, "unknown field '%s'", k->string);
	}
	return NULL;
}

/* A rollout of the mesh's workers with nothing chosen yet; NULL when out of memory. */
static struct rollout *ro_new(struct rollouts *rs)
{
	int32_t W = rs->f->n_workers;
	struct rollout *r = calloc(1, sizeof *r);
	if (r == NULL || (r->order = calloc((size_t)W, sizeof *r->order)) == NULL ||
	    (r->w = calloc((size_t)W, sizeof *r->w)) == NULL) {
		ro_free(r);
		return NULL;
	}
	r->rs = rs;
	r->rs = rs;
	r->failed_worker = -1;
	return r;
}

/* 'binary': the build to roll out, by default the one the first worker runs now. */
static cJSON *ro_parse_binary(struct rollout *r, const cJSON *req, bool dry, int *status)
{
	const cJSON *bin = cJSON_GetObjectItemCaseSensitive(req, "binary");
	if (bin != NULL && !cJSON_IsString(bin))
		return ro_error(status, 400, "'binary' must be a path");
	if (bin != NULL)
		snprintf(r->bin, sizeof r->bin, "%s", bin->valuestring);
	else {
		struct worker_info w;
		workers_get(r->rs->ws, 0, &w);
		snprintf(r->bin, sizeof r->bin, "%s", w.bin);
	}
	if (access(r->bin, X_OK) != 0 && !dry) {
		/* A missing build is a rollout that fails at its first step, not a bad request:
		 * it is reported the same way as a build that exits at start. */
		lm_warn("redeploy: %s is not an executable file", r->bin);
	}
	return NULL;
}

/* 'workers' (names) or 'all', and 'canary' (default: the first chosen): the order, canary
 * first, and every worker's state, pending or untouched. */
static cJSON *ro_parse_workers(struct rollout *r, const cJSON *req, int *status)
{
	struct rollouts *rs = r->rs;
	int32_t W = rs->f->n_workers, canary = -1;
	const cJSON *workers = cJSON_GetObjectItemCaseSensitive(req, "workers");
	const cJSON *all = cJSON_GetObjectItemCaseSensitive(req, "all");
	const cJSON *cn = cJSON_GetObjectItemCaseSensitive(req, "canary");
	cJSON *reply = NULL;
	bool *chosen = calloc((size_t)W, sizeof *chosen);

	if (chosen == NULL)
		return ro_error(status, 500, "out of memory");
	if (cJSON_IsTrue(all) == (workers != NULL)) {
		reply = ro_error(status, 400, "give either 'workers' (names) or 'all': true");
		goto out;
	}
	if (workers != NULL && (!cJSON_IsArray(workers) || cJSON_GetArraySize(workers) == 0)) {
		reply = ro_error(status, 400, "'workers' must be a non-empty array of names");
		goto out;
	}
	for (const cJSON *e = workers != NULL ? workers->child : NULL; e != NULL; e = e->next) {
		int32_t j = cJSON_IsString(e) ? ro_worker_index(rs, e->valuestring) : -1;
		if (j < 0) {
			reply = ro_error(status, 400, "'workers': no worker is called %s",
					 cJSON_IsString(e) ? e->valuestring : "(not a string)");
			goto out;
		}
		chosen[j] = true;
	}
	for (int32_t j = 0; workers == NULL && j < W; j++)
		chosen[j] = true;
	if (cn != NULL) {
		canary = cJSON_IsString(cn) ? ro_worker_index(rs, cn->valuestring) : -1;
		if (canary < 0 || !chosen[canary]) {
			reply = ro_error(status, 400,
					 "'canary' must name one of the workers to redeploy");
			goto out;
		}
	}
	for (int32_t j = 0; j < W; j++)
		if (chosen[j] && canary < 0)
			canary = j;
	r->order[r->n_order++] = canary;
	for (int32_t j = 0; j < W; j++) {
		r->w[j].state = chosen[j] ? RW_PENDING : RW_UNTOUCHED;
		if (chosen[j] && j != canary)
			r->order[r->n_order++] = j;
	}
out:
	free(chosen);
	return reply;
}

/* 'batch' (default 1) and 'tolerance' (default 1e-4). */
static cJSON *ro_parse_limits(struct rollout *r, const cJSON *req, int *status)
{
	const cJSON *batch = cJSON_GetObjectItemCaseSensitive(req, "batch");
	r->batch = 1;
	if (batch != NULL) {
		if (!cJSON_IsNumber(batch) || batch->valuedouble < 1 || batch->valuedouble > 64 ||
		    batch->valuedouble != floor(batch->valuedouble))
			return ro_error(status, 400, "'batch' must be an integer in [1, 64]");
		r->batch = (int32_t)batch->valuedouble;
	}
	const cJSON *tol = cJSON_GetObjectItemCaseSensitive(req, "tolerance");
	r->tolerance = 1e-4;
	if (tol != NULL) {
		if (!cJSON_IsNumber(tol) || !(tol->valuedouble >= 0) || !isfinite(tol->valuedouble))
			return ro_error(status, 400, "'tolerance' must be a non-negative number");
		r->tolerance = tol->valuedouble;
	}
	return NULL;
}

/* A dry run's answer: the build, the batches, the canary and every chosen worker's move. */
static cJSON *ro_dry_run(const struct rollout *r)
{
	struct rollouts *rs = r->rs;
	lm_diag d = {{0}};
	cJSON *reply = cJSON_CreateObject();
	cJSON_AddStringToObject(reply, "binary", r->bin);
	cJSON_AddItemToObject(reply, "plan", ro_plan_json(rs, r));
	cJSON_AddStringToObject(reply, "canary", ro_name(rs, r->order[0]));
	cJSON *moves = cJSON_AddArrayToObject(reply, "moves");
	for (int32_t k = 0; k < r->n_order; k++) {
		int32_t j = r->order[k];
		struct mesh_addrs cur;
		ro_addrs(rs, j, &cur);
		char to[256] = "";
		ro_alternate(facts_worker(rs->f, j)->data, cur.data, to, sizeof to, &d);
		cJSON *mv = cJSON_CreateObject();
		cJSON_AddStringToObject(mv, "worker", ro_name(rs, j));
		cJSON_AddStringToObject(mv, "from", cur.data);
		cJSON_AddStringToObject(mv, "to", to[0] ? to : d.msg);
		cJSON_AddItemToArray(moves, mv);
	}
	return reply;
}

/* Starts *rp's thread unless another rollout runs (409) or the mesh cannot be redeployed
 * (503). On success (202) the rollouts own it and *rp is NULL; the previous one is joined
 * and freed. */
static cJSON *ro_launch(struct rollouts *rs, struct rollout **rp, int *status)
{
	struct rollout *r = *rp, *prev;
	cJSON *reply;

	pthread_mutex_lock(&rs->mu);
	if (rs->cur != NULL && rs->cur->running) {
		reply = ro_error(status, 409, "a redeploy is already running");
		goto unlock;
	}
	if (rs->closed || !(workers_sched(rs->ws, true) != NULL)) {
		reply = ro_error(status, 503,
				 "the mesh is not ready: redeploy once every worker is");
		goto unlock;
	}
	snprintf(r->state, sizeof r->state, "running");
	r->running = true;
	r->started_ms = lm_now_ms();
	snprintf(r->dir, sizeof r->dir, "/tmp/layermesh-redeploy.XXXXXX");
	if (mkdtemp(r->dir) == NULL) {
		reply = ro_error(status, 500, "cannot make a temporary directory: %s",
				 strerror(errno));
		goto unlock;
	}
	snprintf(r->sink, sizeof r->sink, "ipc://%s/sink", r->dir);
	prev = rs->cur;
	rs->cur = r;
	if (pthread_create(&r->thread, NULL, ro_main, r) != 0) {
		reply = ro_error(status, 500, "cannot start the rollout");
		goto uncur;
	}
	/* Built before the lock is let go: from then on a later request may free r once its
	 * thread is done. */
	reply = cJSON_CreateObject();
	cJSON_AddStringToObject(reply, "state", "running");
	cJSON_AddStringToObject(reply, "binary", r->bin);
	cJSON_AddItemToObject(reply, "plan", ro_plan_json(rs, r));
	*status = 202;
	*rp = NULL;
	pthread_mutex_unlock(&rs->mu);
	if (prev != NULL) {
		pthread_join(prev->thread, NULL);
		ro_free(prev);
	}
	return reply;

uncur:
	rs->cur = prev;
	r->running = false;
	pthread_mutex_unlock(&rs->mu);
	rmdir(r->dir);
	return reply;
unlock:
	pthread_mutex_unlock(&rs->mu);
	return reply;
}

cJSON *rollout_request(struct rollouts *rs, const char *body, size_t len, int *status)
{
	cJSON *req = cJSON_ParseWithLength(body, len);
	cJSON *reply = NULL;
	struct rollout *r = NULL;

	if (req == NULL || !cJSON_IsObject(req)) {
		reply = ro_error(status, 400, "the request body must be a JSON object");
		goto out;
	}
	if (!rs->f->spawns) {
		reply = ro_error(status, 503,
				 "this mesh's workers were started elsewhere: redeploy them there "
				 "(systemd, kubectl rollout)");
		goto out;
	}
	if ((reply = ro_check_fields(req, status)) != NULL)
		goto out;
	if ((r = ro_new(rs)) == NULL) {
		reply = ro_error(status, 500, "out of memory");
		goto out;
	}
	bool dry = cJSON_IsTrue(cJSON_GetObjectItem(req, "dry_run"));
	if ((reply = ro_parse_binary(r, req, dry, status)) != NULL ||
	    (reply = ro_parse_workers(r, req, status)) != NULL ||
	    (reply = ro_parse_limits(r, req, status)) != NULL)
		goto out;
	if (dry) {
		reply = ro_dry_run(r);
		*status = 200;
		goto out;
	}
	reply = ro_launch(rs, &r, status);
out:
	ro_free(r);
	cJSON_Delete(req);
	return reply;
}

cJSON *rollout_status(struct rollouts *rs)
{
	pthread_mutex_lock(&rs->mu);
	struct rollout *r = rs->cur;
	if (r == NULL) {
		pthread_mutex_unlock(&rs->mu);
		return NULL;
	}
	cJSON *o = cJSON_CreateObject();
	/* The outcome only once the rollout thread is done cleaning up (stopping a failed
	 * candidate, closing its sockets): until then a new redeploy would be refused. */
	cJSON_AddStringToObject(o, "state", r->running ? "running" : r->state);
	cJSON_AddStringToObject(o, "binary", r->bin);
	cJSON_AddItemToObject(o, "plan", ro_plan_json(rs, r));
	cJSON_AddNumberToObject(o, "max_pause_ms", r->max_pause_ms);
	cJSON_AddNumberToObject(o, "moved_sequences", (double)r->moved_seqs);
	cJSON_AddNumberToObject(o, "moved_kv_bytes", (double)r->moved_bytes);
	int64_t end = r->running ? lm_now_ms() : r->finished_ms;
	cJSON_AddNumberToObject(o, "elapsed_ms", (double)(end - r->started_ms));
	if (r->error[0]) {
		cJSON_AddStringToObject(o, "failed_step", r->failed_step);
		if (r->failed_worker >= 0)
			cJSON_AddStringToObject(o, "failed_worker", ro_name(rs, r->failed_worker));
		cJSON_AddStringToObject(o, "error", r->error);
	}
	cJSON *ws = cJSON_AddArrayToObject(o, "workers");
	for (int32_t j = 0; j < rs->f->n_workers; j++) {
		cJSON *w = cJSON_CreateObject();
		cJSON_AddStringToObject(w, "name", ro_name(rs, j));
		cJSON_AddStringToObject(w, "status", ro_state_names[r->w[j].state]);
		if (r->w[j].step[0])
			cJSON_AddStringToObject(w, "step", r->w[j].step);
		if (r->w[j].state == RW_DONE) {
			cJSON_AddNumberToObject(w, "pause_ms", r->w[j].pause_ms);
			cJSON_AddStringToObject(w, "from", r->w[j].from);
			cJSON_AddStringToObject(w, "to", r->w[j].to);
		}
		if (r->w[j].error[0])
			cJSON_AddStringToObject(w, "error", r->w[j].error);
		cJSON_AddItemToArray(ws, w);
	}
	pthread_mutex_unlock(&rs->mu);
	return o;
}

void rollout_init(struct rollouts *rs, const struct mesh_facts *f, struct workers *ws,
		  struct procs *pr, struct lm_link *head)
{
	*rs = (struct rollouts){.f = f, .ws = ws, .pr = pr, .head = head};
	pthread_mutex_init(&rs->mu, NULL);
}

void rollout_stop(struct rollouts *rs)
{
	pthread_mutex_lock(&rs->mu);
	rs->closed = true;
	struct rollout *r = rs->cur;
	pthread_mutex_unlock(&rs->mu);
	if (r != NULL && !r->joined) {
		pthread_join(r->thread, NULL);
		r->joined = true;
	}
}

void rollout_fini(struct rollouts *rs)
{
	if (rs == NULL || rs == NULL)
		return;
	rollout_stop(rs);
	ro_free(rs->cur);
	pthread_mutex_destroy(&rs->mu);
	*rs = (struct rollouts){0};
}

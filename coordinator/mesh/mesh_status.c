/* mesh_status.c — the mesh's /readyz, /v1/status and /metrics. See mesh_status.h. */
#include "coordinator/mesh/mesh_status.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/base/metrics.h"
#include "common/config/mesh_config.h"
#include "common/model/hparams.h"
#include "common/plan/fence.h"
#include "coordinator/supervise/probe.h"
#include "coordinator/supervise/procs.h"
#include "coordinator/supervise/rollout.h"
#include "coordinator/supervise/workers.h"
#include "coordinator/sched/scheduler.h"

/* How long /v1/status waits for a worker's own /status (connect, then answer). */
#define MESH_STATUS_PROBE_MS 500

/* By enum mesh_worker_state. */
static const char *const mesh_status_state_names[] = {"starting", "ready", "restarting", "failed"};

bool mesh_status_ready(void *arg, char *why, size_t cap)
{
	struct mesh_status_src *src = arg;
	if (procs_stopping(src->pr)) {
		snprintf(why, cap, "the coordinator is stopping");
		return false;
	}
	for (int32_t i = 0; i < src->f->n_workers; i++) {
		struct worker_info v;
		workers_get(src->ws, i, &v);
		if (v.state != MESH_WORKER_READY) {
			snprintf(why, cap, "worker %s is %s%s%s%s", facts_worker(src->f, i)->name,
				 mesh_status_state_names[v.state], v.why[0] ? " (" : "", v.why,
				 v.why[0] ? ")" : "");
			return false;
		}
	}
	snprintf(why, cap, "%s", src->f->plain_note);
	return true;
}

static void mesh_status_scheduler(cJSON *o, struct mesh_status_src *src,
				  const struct sched_stats *s)
{
	cJSON *q = cJSON_AddObjectToObject(o, "scheduler");
	cJSON_AddNumberToObject(q, "requests", (double)atomic_load(&s->requests));
	cJSON_AddNumberToObject(q, "active", atomic_load(&s->active));
	cJSON_AddNumberToObject(q, "queued", atomic_load(&s->queued));
	cJSON_AddNumberToObject(q, "batches_in_flight", s->max_inflight);
	cJSON_AddNumberToObject(q, "tokens_generated", (double)atomic_load(&s->tokens_generated));
	cJSON_AddNumberToObject(q, "batches", (double)atomic_load(&s->batches));
	cJSON_AddNumberToObject(q, "ring_errors", (double)atomic_load(&s->ring_errors));
	cJSON_AddNumberToObject(q, "replays", (double)atomic_load(&s->replays));
	/* The rollout comes in the middle of the scheduler's fields: that is where /v1/status
	 * has always shown it. */
	cJSON *ro = rollout_status(src->ro);
	if (ro != NULL)
		cJSON_AddItemToObject(o, "rollout", ro);
	cJSON_AddNumberToObject(q, "batches_forgotten", (double)atomic_load(&s->batches_forgotten));
	cJSON_AddNumberToObject(q, "spec_drafted", (double)atomic_load(&s->spec_drafted));
	cJSON_AddNumberToObject(q, "spec_accepted", (double)atomic_load(&s->spec_accepted));
	cJSON_AddNumberToObject(q, "spec_steps", (double)atomic_load(&s->spec_steps));
	cJSON_AddNumberToObject(q, "spec_shadowed", (double)atomic_load(&s->spec_shadowed));
	cJSON_AddNumberToObject(q, "prompt_tokens_cached", (double)atomic_load(&s->prompt_cached));
	cJSON_AddNumberToObject(q, "prompt_tokens_shared", (double)atomic_load(&s->prompt_shared));
	cJSON_AddNumberToObject(q, "prompt_tokens_computed",
				(double)atomic_load(&s->prompt_computed));
	cJSON_AddNumberToObject(q, "cached_slots", (double)atomic_load(&s->cached_slots));
}

/* "layer_kinds": what each layer of [start, end) is: "recurrent" (a delta-net layer, its state
 * per slot), else by its attention "global" or "sliding" (a sliding-window layer); a
 * mixture-of-experts layer is one of these. */
static void mesh_status_layer_kinds(cJSON *w, const struct lm_hparams *hp, int32_t start,
				    int32_t end)
{
	cJSON *kinds = cJSON_AddArrayToObject(w, "layer_kinds");
	for (int32_t il = start; kinds != NULL && il < end && il < LM_MAX_LAYERS; il++)
		cJSON_AddItemToArray(kinds,
				     cJSON_CreateString(hp->layer[il].recurrent    ? "recurrent"
							: hp->layer[il].window > 0 ? "sliding"
										   : "global"));
}

cJSON *mesh_status_json(void *arg)
{
	struct mesh_status_src *src = arg;
	int32_t W = src->f->n_workers;
	const struct fence_plan *plan = src->f->plan;
	/* Every worker's own view, asked in parallel before anything is built. */
	/* A worker a redeploy moved serves at its alternate address: ask where it is now. */
	const char **addrs = calloc((size_t)W + 1, sizeof *addrs);
	struct mesh_addrs *cur = calloc((size_t)W + 1, sizeof *cur);
	struct probe_result *probes = calloc((size_t)W + 1, sizeof *probes);
	struct worker_info *views = calloc((size_t)W + 1, sizeof *views);
	if (addrs == NULL || cur == NULL || probes == NULL || views == NULL) {
		free(addrs);
		free(cur);
		free(probes);
		free(views);
		return NULL;
	}
	workers_get_all(src->ws, views);
	for (int32_t i = 0; i < W; i++) {
		cur[i] = views[i].at;
		addrs[i] = cur[i].http;
	}
	probe_status_all(addrs, W, MESH_STATUS_PROBE_MS, probes);
	free(addrs);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "model", src->f->model_name);
	char fp[32];
	snprintf(fp, sizeof fp, "%016llx", (unsigned long long)src->f->fingerprint);
	cJSON_AddStringToObject(o, "fingerprint", fp);
	cJSON_AddItemToObject(o, "plan", fence_plan_to_json(plan));
	cJSON *ws = cJSON_AddArrayToObject(o, "workers");
	workers_get_all(src->ws, views);
	struct sched *sched = workers_sched(src->ws, false);
	const struct sched_stats *stats = sched != NULL ? sched_stats(sched) : NULL;
	for (int32_t i = 0; i < W; i++) {
		const struct worker_info *v = &views[i];
		cJSON *w = cJSON_CreateObject();
		cJSON_AddStringToObject(w, "name", facts_worker(src->f, i)->name);
		cJSON_AddStringToObject(w, "state", mesh_status_state_names[v->state]);
		cJSON_AddNumberToObject(w, "pid", v->pid);
		cJSON_AddNumberToObject(w, "restarts", v->restarts);
		cJSON_AddNumberToObject(w, "restarts_total", (double)v->restarts_total);
		if (stats != NULL)
			cJSON_AddNumberToObject(w, "replays",
						(double)atomic_load(&stats->worker_replays[i]));
		if (v->digest != 0) {
			char dig[32];
			snprintf(dig, sizeof dig, "%016llx", (unsigned long long)v->digest);
			cJSON_AddStringToObject(w, "digest", dig);
		}
		cJSON_AddNumberToObject(w, "start", plan->stages[i].start);
		cJSON_AddNumberToObject(w, "end", plan->stages[i].end);
		mesh_status_layer_kinds(w, src->f->hp, plan->stages[i].start, plan->stages[i].end);
		cJSON_AddNumberToObject(w, "kv_bytes", (double)v->ready.kv_bytes);
		cJSON_AddNumberToObject(w, "weight_bytes", (double)v->ready.weight_bytes);
		cJSON_AddNumberToObject(w, "rss_bytes_at_ready", (double)v->ready.rss_bytes);
		if (v->why[0])
			cJSON_AddStringToObject(w, "why", v->why);
		cJSON_AddStringToObject(w, "http", cur[i].http);
		if (probes[i].status != NULL)
			cJSON_AddItemToObject(w, "status", probes[i].status);
		else
			cJSON_AddStringToObject(w, "status_error", probes[i].error);
		cJSON_AddItemToArray(ws, w);
	}
	free(views);
	free(cur);
	free(probes);
	if (stats != NULL)
		mesh_status_scheduler(o, src, stats);
	return o;
}

static void mesh_status_hist(struct lm_mtext *t, const char *name, const char *help,
			     const struct lm_hist *h)
{
	struct lm_hist_snap s;
	lm_hist_snapshot(h, &s);
	lm_mtext_family(t, name, "histogram", help);
	lm_mtext_hist(t, name, NULL, &s);
}

/* A counter per worker: one family, one sample per worker. */
static void mesh_status_per_worker(struct lm_mtext *t, struct mesh_status_src *src,
				   const char *name, const char *help, const uint64_t *values)
{
	lm_mtext_family(t, name, "counter", help);
	for (int32_t i = 0; i < src->f->n_workers; i++) {
		char label[300];
		lm_mtext_label(label, sizeof label, "worker", facts_worker(src->f, i)->name);
		lm_mtext_sample(t, name, label, (double)values[i]);
	}
}

/* The workers' gauges and counters, from one view of them all so that they agree. */
static void mesh_status_worker_gauges(struct lm_mtext *t, struct mesh_status_src *src,
				      struct worker_info *views, const struct sched_stats *s)
{
	int32_t W = src->f->n_workers;
	workers_get_all(src->ws, views);
	int32_t ready = 0;
	for (int32_t i = 0; i < W; i++)
		ready += views[i].state == MESH_WORKER_READY;
	lm_mtext_gauge(t, "layermesh_workers_ready", "Workers that are ready.", ready);
	lm_mtext_family(t, "layermesh_worker_up", "gauge",
			"1 while the worker is assigned and serving, 0 while it starts, restarts "
			"or has failed.");
	for (int32_t i = 0; i < W; i++) {
		char label[300];
		lm_mtext_label(label, sizeof label, "worker", facts_worker(src->f, i)->name);
		lm_mtext_sample(t, "layermesh_worker_up", label,
				views[i].state == MESH_WORKER_READY ? 1 : 0);
	}
	uint64_t *values = calloc((size_t)W + 1, sizeof *values);
	if (values == NULL)
		return;
	for (int32_t i = 0; i < W; i++)
		values[i] = views[i].restarts_total;
	mesh_status_per_worker(t, src, "layermesh_worker_restarts_total",
			       "Restarts of the worker since the mesh came up.", values);
	for (int32_t i = 0; i < W; i++)
		values[i] = atomic_load(&s->worker_replays[i]);
	mesh_status_per_worker(t, src, "layermesh_worker_replays_total",
			       "Sequences replayed because the worker went down.", values);
	free(values);
}

char *mesh_status_metrics(void *arg)
{
	struct mesh_status_src *src = arg;
	struct sched *sched = workers_sched(src->ws, false);
	if (sched == NULL)
		return NULL;
	struct worker_info *views = calloc((size_t)src->f->n_workers + 1, sizeof *views);
	if (views == NULL)
		return NULL;
	const struct sched_stats *s = sched_stats(sched);
	struct lm_mtext t = {0};
	lm_mtext_counter(&t, "layermesh_requests_total", "Completion requests accepted.",
			 atomic_load(&s->requests));
	lm_mtext_counter(&t, "layermesh_tokens_generated_total", "Tokens sampled by the mesh.",
			 atomic_load(&s->tokens_generated));
	lm_mtext_counter(&t, "layermesh_prompt_tokens_total", "Prompt tokens of accepted requests.",
			 atomic_load(&s->prompt_tokens));
	lm_mtext_counter(
		&t, "layermesh_prompt_tokens_cached_total",
		"Prompt tokens whose KV rows a slot still held (the prefix cache): reused, "
		"not computed.",
		atomic_load(&s->prompt_cached));
	lm_mtext_counter(&t, "layermesh_prompt_tokens_shared_total",
			 "Prompt tokens whose KV rows were copied from a parallel sample's slot "
			 "(n > 1): computed once for all the samples.",
			 atomic_load(&s->prompt_shared));
	lm_mtext_counter(&t, "layermesh_prompt_tokens_computed_total",
			 "Prompt positions sent through the ring to be computed (replays and "
			 "batches sent again included).",
			 atomic_load(&s->prompt_computed));
	lm_mtext_counter(&t, "layermesh_batches_total", "FORWARD batches sent into the ring.",
			 atomic_load(&s->batches));
	lm_mtext_counter(&t, "layermesh_ring_errors_total", "Ring messages refused or malformed.",
			 atomic_load(&s->ring_errors));
	lm_mtext_counter(&t, "layermesh_replays_total",
			 "Sequences prefilled again after a worker fault.",
			 atomic_load(&s->replays));
	lm_mtext_counter(&t, "layermesh_batches_forgotten_total",
			 "Batches in flight when a worker went down.",
			 atomic_load(&s->batches_forgotten));
	lm_mtext_counter(&t, "layermesh_spec_drafted_tokens_total",
			 "Speculative tokens drafted and sent for verification.",
			 atomic_load(&s->spec_drafted));
	lm_mtext_counter(&t, "layermesh_spec_accepted_tokens_total",
			 "Drafted tokens the last worker accepted.",
			 atomic_load(&s->spec_accepted));
	lm_mtext_counter(&t, "layermesh_spec_steps_total", "Sequence steps that carried a draft.",
			 atomic_load(&s->spec_steps));
	lm_mtext_counter(&t, "layermesh_spec_shadow_drafts_total",
			 "Drafts asked for and not sent, by sequences whose drafts stopped paying.",
			 atomic_load(&s->spec_shadowed));
	lm_mtext_gauge(&t, "layermesh_active_sequences", "Sequences holding a KV slot.",
		       atomic_load(&s->active));
	lm_mtext_gauge(&t, "layermesh_queued_sequences", "Sequences waiting for a slot.",
		       atomic_load(&s->queued));
	mesh_status_worker_gauges(&t, src, views, s);
	free(views);
	mesh_status_hist(&t, "layermesh_time_to_first_token_seconds",
			 "From a request's arrival to its first generated token.", &s->ttft);
	mesh_status_hist(&t, "layermesh_token_decode_seconds",
			 "Between consecutive generated tokens of a request.", &s->token);
	mesh_status_hist(&t, "layermesh_request_duration_seconds",
			 "From a request's arrival to its end, for any reason.", &s->duration);
	mesh_status_hist(&t, "layermesh_ring_send_seconds",
			 "The coordinator's hand-off of a ring message to the first worker.",
			 &s->send);
	mesh_status_hist(
		&t, "layermesh_ring_return_seconds",
		"From the last worker's ring stamp (its send) to the TOKENS' arrival at the "
		"coordinator; stamped messages only ([coordinator] ring_stamps).",
		&s->ring_return);
	mesh_status_hist(&t, "layermesh_ring_wake_seconds",
			 "From a ring message's arrival at the coordinator to the scheduler's "
			 "taking it.",
			 &s->wake);
	mesh_status_hist(
		&t, "layermesh_ring_turnaround_seconds",
		"From a TOKENS' arrival at the coordinator to the send of the next FORWARD.",
		&s->turnaround);
	return lm_mtext_take(&t);
}

/* health.c — a worker's health server, status document and metrics. See health.h. */
#include "worker/health.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "lm_config.h"

/* ------------------------------------------------------------------ the successor's pipes */

void health_watch_successor(struct health *h, struct lm_link *next)
{
	pthread_mutex_lock(&h->mu);
	h->next = next;
	pthread_mutex_unlock(&h->mu);
}

static struct lm_link *health_next(struct health *h)
{
	pthread_mutex_lock(&h->mu);
	struct lm_link *next = h->next;
	pthread_mutex_unlock(&h->mu);
	return next;
}

static int health_pipes(struct health *h)
{
	return lm_link_pipes(health_next(h));
}

/* ------------------------------------------------------------------ documents */

static struct health_snapshot *health_take(struct health *h)
{
	struct health_snapshot *s = calloc(1, sizeof *s);
	if (s != NULL)
		h->ops.snapshot(h->ops.arg, s);
	return s;
}

static bool health_ready_of(const struct health_snapshot *s, int pipes, char *why, size_t cap)
{
	const struct wire_assign *a = &s->assign;
	if (s->phase == HEALTH_WAITING) {
		snprintf(why, cap, "no assignment yet: waiting for the coordinator's ASSIGN");
		return false;
	}
	if (s->phase == HEALTH_LOADING) {
		snprintf(why, cap, "loading its slice");
		return false;
	}
	if (s->mapped_bytes == 0) {
		snprintf(why, cap, "the weights of layers [%d, %d) are not mapped", a->begin,
			 a->end);
		return false;
	}
	if (s->kv_num_layers > 0 && s->kv_bytes == 0) {
		snprintf(why, cap, "the KV cache of layers [%d, %d) is not allocated", a->begin,
			 a->end);
		return false;
	}
	if (pipes == 0) {
		snprintf(why, cap, "the successor at %s is not connected", a->next);
		return false;
	}
	return true;
}

bool health_ready(struct health *h, const struct health_snapshot *s, char *why, size_t cap)
{
	return health_ready_of(s, health_pipes(h), why, cap);
}

static const char *const health_phase_names[] = {"waiting", "loading", "assigned"};

static cJSON *health_latency(const struct lm_hist *hist)
{
	struct lm_hist_snap s;
	lm_hist_snapshot(hist, &s);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "count", (double)s.count);
	static const struct {
		const char *key;
		double q;
	} qs[] = {{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}};
	for (size_t i = 0; i < 3; i++) {
		if (s.count == 0)
			cJSON_AddNullToObject(o, qs[i].key);
		else
			cJSON_AddNumberToObject(o, qs[i].key, lm_hist_quantile(&s, qs[i].q) / 1e6);
	}
	if (s.count == 0)
		cJSON_AddNullToObject(o, "mean");
	else
		cJSON_AddNumberToObject(o, "mean", (double)s.sum_ns / (double)s.count / 1e6);
	if (s.count == 0)
		cJSON_AddNullToObject(o, "max");
	else
		cJSON_AddNumberToObject(o, "max", (double)s.max_ns / 1e6);
	return o;
}

static char *health_render_status(struct health *h, const struct health_snapshot *s)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return NULL;
	char why[512] = "";
	int pipes = health_pipes(h);
	bool ready = health_ready_of(s, pipes, why, sizeof why);
	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddStringToObject(o, "build", LM_VERSION);
	cJSON_AddNumberToObject(o, "protocol", WIRE_VERSION);
	cJSON_AddNumberToObject(o, "pid", s->pid);
	cJSON_AddNumberToObject(o, "uptime_s", s->uptime_s);
	cJSON_AddNumberToObject(o, "rss_bytes", (double)s->rss_bytes);
	cJSON_AddStringToObject(o, "phase", health_phase_names[s->phase]);
	cJSON_AddBoolToObject(o, "assigned", s->phase == HEALTH_ASSIGNED);
	cJSON_AddBoolToObject(o, "ready", ready);
	if (!ready)
		cJSON_AddStringToObject(o, "not_ready", why);
	cJSON_AddBoolToObject(o, "successor_connected", pipes > 0);
	cJSON_AddNumberToObject(o, "successor_redials", (double)lm_link_redials(health_next(h)));
	if (s->phase == HEALTH_ASSIGNED) {
		const struct wire_assign *a = &s->assign;
		char fp[32];
		snprintf(fp, sizeof fp, "%016llx", (unsigned long long)s->fingerprint);
		cJSON_AddStringToObject(o, "fingerprint", fp);
		snprintf(fp, sizeof fp, "%016llx", (unsigned long long)s->digest);
		cJSON_AddStringToObject(o, "digest", fp);
		cJSON_AddStringToObject(o, "model", a->model);
		cJSON *slice = cJSON_AddArrayToObject(o, "slice");
		cJSON_AddItemToArray(slice, cJSON_CreateNumber(a->begin));
		cJSON_AddItemToArray(slice, cJSON_CreateNumber(a->end));
		cJSON_AddBoolToObject(o, "embedding", a->embedding);
		cJSON_AddBoolToObject(o, "head", a->head);
		cJSON_AddStringToObject(o, "next", a->next);
		cJSON_AddNumberToObject(o, "max_seq", a->max_seq);
		cJSON_AddNumberToObject(o, "slots", a->slots);
		cJSON_AddNumberToObject(o, "max_batch", a->max_batch);
		cJSON_AddStringToObject(o, "kv_type_k", lm_dtype_name(a->k_type));
		cJSON_AddStringToObject(o, "kv_type_v", lm_dtype_name(a->v_type));
		cJSON_AddStringToObject(o, "kv_type_k_swa", lm_dtype_name(a->k_type_swa));
		cJSON_AddStringToObject(o, "kv_type_v_swa", lm_dtype_name(a->v_type_swa));
		cJSON_AddNumberToObject(o, "max_draft", a->max_draft);
		cJSON_AddStringToObject(o, "wire_dtype", wire_dtype_name(a->wire_dtype));
		cJSON_AddNumberToObject(o, "kv_base", s->kv_base);
		cJSON_AddNumberToObject(o, "kv_num_layers", s->kv_num_layers);
		cJSON_AddNumberToObject(o, "kv_bytes", (double)s->kv_bytes);
		cJSON *per = cJSON_AddArrayToObject(o, "kv_bytes_per_layer");
		for (int32_t i = 0; i < s->kv_num_layers && i < LM_MAX_LAYERS; i++)
			cJSON_AddItemToArray(per, cJSON_CreateNumber((double)s->kv_layer_bytes[i]));
		cJSON_AddNumberToObject(o, "weight_bytes", (double)s->weight_bytes);
		cJSON_AddNumberToObject(o, "mapped_bytes", (double)s->mapped_bytes);
		cJSON_AddNumberToObject(o, "active_sequences", s->active_sequences);
		cJSON_AddNumberToObject(o, "batches", (double)s->batches);
		cJSON_AddNumberToObject(o, "tokens_processed", (double)s->tokens);
		cJSON_AddNumberToObject(o, "ring_errors", (double)s->ring_errors);
		cJSON_AddNumberToObject(o, "releases", (double)s->releases);
		cJSON_AddNumberToObject(o, "copies", (double)s->copies);
		if (s->assign.head) {
			cJSON *gr = cJSON_AddObjectToObject(o, "grammar");
			cJSON_AddNumberToObject(gr, "draws", (double)s->grammar_draws);
			cJSON_AddNumberToObject(gr, "admitted_unmasked", (double)s->grammar_fast);
			cJSON_AddNumberToObject(gr, "masked", (double)s->grammar_masked);
		}
		if (s->backend != NULL)
			cJSON_AddStringToObject(o, "backend", s->backend);
		if (s->mem_total > 0) {
			cJSON *mem = cJSON_AddObjectToObject(o, "backend_memory");
			cJSON_AddStringToObject(mem, "kind", s->mem_device ? "device" : "host");
			cJSON_AddNumberToObject(mem, "total_bytes", (double)s->mem_total);
			cJSON_AddNumberToObject(mem, "free_bytes", (double)s->mem_free);
			cJSON_AddNumberToObject(mem, "used_bytes", (double)s->mem_used);
		}
	}
	cJSON_AddNumberToObject(o, "dropped", (double)s->dropped);
	cJSON *ring = cJSON_AddObjectToObject(o, "ring");
	cJSON_AddNumberToObject(ring, "in", (double)s->ring_in);
	cJSON_AddNumberToObject(ring, "out", (double)s->ring_out);
	cJSON_AddNumberToObject(ring, "busy_ms", (double)s->ring_busy_ms);
	cJSON_AddNumberToObject(ring, "send_ms", (double)s->ring_send_ms);
	cJSON_AddNumberToObject(ring, "queued", s->ring_queued);
	cJSON *lat = cJSON_AddObjectToObject(o, "latency_ms");
	cJSON_AddItemToObject(lat, "receive", health_latency(&h->recv));
	cJSON_AddItemToObject(lat, "compute", health_latency(&h->compute));
	cJSON_AddItemToObject(lat, "send", health_latency(&h->send));
	cJSON_AddItemToObject(lat, "forward", health_latency(&h->forward));
	cJSON_AddItemToObject(lat, "pre_send", health_latency(&h->pre_send));
	cJSON_AddItemToObject(lat, "transit", health_latency(&h->transit));
	char *text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

char *health_status_json(struct health *h)
{
	struct health_snapshot *s = health_take(h);
	if (s == NULL)
		return NULL;
	char *text = health_render_status(h, s);
	free(s);
	return text;
}

static void health_hist(struct lm_mtext *t, const char *name, const char *help,
			const struct lm_hist *hist)
{
	struct lm_hist_snap s;
	lm_hist_snapshot(hist, &s);
	lm_mtext_family(t, name, "histogram", help);
	lm_mtext_hist(t, name, NULL, &s);
}

static char *health_render_metrics(struct health *h, const struct health_snapshot *s)
{
	struct lm_mtext t = {0};
	char why[512];
	bool assigned = s->phase == HEALTH_ASSIGNED;
	char labels[1024], part[300];
	char fp[32];
	snprintf(fp, sizeof fp, "%016llx", assigned ? (unsigned long long)s->fingerprint : 0ull);
	labels[0] = '\0';
	lm_mtext_label(part, sizeof part, "worker", s->name);
	strcat(labels, part);
	snprintf(labels + strlen(labels), sizeof labels - strlen(labels),
		 ",build=\"%s\",protocol=\"%d\",fingerprint=\"%s\"", LM_VERSION, WIRE_VERSION, fp);
	lm_mtext_family(&t, "layermesh_worker_info", "gauge",
			"Always 1; the labels name the worker, its build, protocol version and "
			"model fingerprint.");
	lm_mtext_sample(&t, "layermesh_worker_info", labels, 1);
	lm_mtext_gauge(&t, "layermesh_worker_ready",
		       "1 when the slice is loaded and the successor connected (see /readyz).",
		       health_ready(h, s, why, sizeof why) ? 1 : 0);
	lm_mtext_gauge(&t, "layermesh_worker_uptime_seconds", "Seconds since the worker started.",
		       s->uptime_s);
	lm_mtext_counter(&t, "layermesh_worker_batches_total", "FORWARD batches computed.",
			 s->batches);
	lm_mtext_counter(&t, "layermesh_worker_tokens_total", "Tokens computed.", s->tokens);
	lm_mtext_counter(&t, "layermesh_worker_ring_errors_total",
			 "Ring messages refused (malformed, out of range).", s->ring_errors);
	lm_mtext_counter(&t, "layermesh_worker_dropped_total",
			 "Ring messages that could not be processed or forwarded.", s->dropped);
	lm_mtext_counter(&t, "layermesh_worker_releases_total", "RELEASE messages applied.",
			 s->releases);
	lm_mtext_counter(&t, "layermesh_worker_copies_total",
			 "COPY messages applied (a prompt's rows shared by parallel samples).",
			 s->copies);
	lm_mtext_counter(&t, "layermesh_worker_grammar_draws_total",
			 "Tokens drawn under a grammar (constrained decoding).", s->grammar_draws);
	lm_mtext_counter(
		&t, "layermesh_worker_grammar_masked_total",
		"Grammar draws whose unconstrained token the grammar rejected, drawn again "
		"from a mask.",
		s->grammar_masked);
	lm_mtext_counter(&t, "layermesh_worker_successor_redials_total",
			 "Dials to the successor started afresh after it had no connection for "
			 "a while (link.h).",
			 lm_link_redials(health_next(h)));
	lm_mtext_gauge(&t, "layermesh_worker_active_sequences", "KV slots holding positions.",
		       s->active_sequences);
	lm_mtext_gauge(&t, "layermesh_worker_resident_bytes", "Resident memory of the process.",
		       (double)s->rss_bytes);
	lm_mtext_gauge(&t, "layermesh_worker_kv_bytes", "KV cache bytes of the owned layers.",
		       (double)s->kv_bytes);
	lm_mtext_gauge(&t, "layermesh_worker_weight_bytes", "Weight bytes of the slice.",
		       (double)s->weight_bytes);
	if (assigned && s->mem_total > 0) {
		char ml[64];
		snprintf(ml, sizeof ml, "kind=\"%s\"", s->mem_device ? "device" : "host");
		static const char *const fam[3][2] = {
			{"layermesh_worker_backend_memory_total_bytes",
			 "Memory of the backend's device (kind=device: the GPU) or of the host."},
			{"layermesh_worker_backend_memory_free_bytes",
			 "Free memory of the backend's device, or the host's available memory."},
			{"layermesh_worker_backend_memory_used_bytes",
			 "Bytes the backend holds: weights uploaded, KV cache, buffers, scratch."},
		};
		const uint64_t v[3] = {s->mem_total, s->mem_free, s->mem_used};
		for (int i = 0; i < 3; i++) {
			lm_mtext_family(&t, fam[i][0], "gauge", fam[i][1]);
			lm_mtext_sample(&t, fam[i][0], ml, (double)v[i]);
		}
	}
	health_hist(&t, "layermesh_worker_receive_wait_seconds",
		    "From a ring message's arrival to the start of its compute (queueing).",
		    &h->recv);
	health_hist(&t, "layermesh_worker_compute_seconds",
		    "The stage's handling of a ring message (the forward, for FORWARD).",
		    &h->compute);
	health_hist(&t, "layermesh_worker_send_seconds",
		    "Handing a ring message to the successor (nng_sendmsg, retries included).",
		    &h->send);
	health_hist(&t, "layermesh_worker_forward_seconds",
		    "The forward pass of a FORWARD, within its compute.", &h->forward);
	health_hist(&t, "layermesh_worker_pre_send_seconds",
		    "From the end of a ring message's compute to the start of its send.",
		    &h->pre_send);
	health_hist(&t, "layermesh_worker_transit_seconds",
		    "From the predecessor's ring stamp (its send) to a message's arrival here; "
		    "stamped messages only.",
		    &h->transit);
	return lm_mtext_take(&t);
}

char *health_metrics_text(struct health *h)
{
	struct health_snapshot *s = health_take(h);
	if (s == NULL)
		return NULL;
	char *text = health_render_metrics(h, s);
	free(s);
	return text;
}

/* ------------------------------------------------------------------ the server */

/* A handler runs only while the server is not stopping; health_fini waits for those running. */
static bool health_enter(struct health *h)
{
	pthread_mutex_lock(&h->mu);
	bool ok = !h->stopping;
	if (ok)
		h->busy++;
	pthread_mutex_unlock(&h->mu);
	return ok;
}

static void health_leave(struct health *h)
{
	pthread_mutex_lock(&h->mu);
	if (--h->busy == 0)
		pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->mu);
}

static void health_stopping(nng_aio *aio)
{
	lm_httpd_reply(aio, 503, "text/plain", "stopping\n", 9);
}

static void health_on_healthz(nng_aio *aio)
{
	lm_httpd_reply(aio, 200, "text/plain", "ok\n", 3);
}

static void health_on_readyz(nng_aio *aio)
{
	struct health *h = lm_httpd_data(aio);
	if (!health_enter(h)) {
		health_stopping(aio);
		return;
	}
	struct health_snapshot *s = health_take(h);
	char why[512] = "out of memory", body[600];
	bool ready = s != NULL && health_ready(h, s, why, sizeof why);
	free(s);
	health_leave(h);
	if (ready) {
		lm_httpd_reply(aio, 200, "text/plain", "ready\n", 6);
		return;
	}
	int n = snprintf(body, sizeof body, "not ready: %s\n", why);
	lm_httpd_reply(aio, 503, "text/plain", body, (size_t)n < sizeof body ? (size_t)n : 0);
}

static void health_on_status(nng_aio *aio)
{
	struct health *h = lm_httpd_data(aio);
	if (!health_enter(h)) {
		health_stopping(aio);
		return;
	}
	char *s = health_status_json(h);
	health_leave(h);
	if (s == NULL) {
		lm_httpd_reply(aio, 500, "text/plain", "out of memory\n", 14);
		return;
	}
	lm_httpd_reply(aio, 200, "application/json", s, strlen(s));
	free(s);
}

static void health_on_metrics(nng_aio *aio)
{
	struct health *h = lm_httpd_data(aio);
	if (!health_enter(h)) {
		health_stopping(aio);
		return;
	}
	char *s = health_metrics_text(h);
	health_leave(h);
	if (s == NULL) {
		lm_httpd_reply(aio, 500, "text/plain", "out of memory\n", 14);
		return;
	}
	lm_httpd_reply(aio, 200, "text/plain; version=0.0.4", s, strlen(s));
	free(s);
}

void health_init(struct health *h, const struct health_ops *ops)
{
	memset(h, 0, sizeof *h);
	h->ops = *ops;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->idle, NULL);
	h->inited = true;
}

int health_serve(struct health *h, const char *addr, lm_diag *d)
{
	int rc;
	if ((rc = lm_httpd_init(&h->httpd, addr, d)) != 0 ||
	    (rc = lm_httpd_route(&h->httpd, "GET", "/healthz", health_on_healthz, h, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&h->httpd, "GET", "/readyz", health_on_readyz, h, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&h->httpd, "GET", "/status", health_on_status, h, 0, d)) != 0 ||
	    (rc = lm_httpd_route(&h->httpd, "GET", "/metrics", health_on_metrics, h, 0, d)) != 0 ||
	    (rc = lm_httpd_start(&h->httpd, d)) != 0) {
		lm_httpd_fini(&h->httpd);
		return rc;
	}
	return 0;
}

void health_fini(struct health *h)
{
	if (h == NULL || !h->inited)
		return;
	pthread_mutex_lock(&h->mu);
	h->stopping = true;
	pthread_mutex_unlock(&h->mu);
	lm_httpd_fini(&h->httpd);
	pthread_mutex_lock(&h->mu);
	while (h->busy > 0)
		pthread_cond_wait(&h->idle, &h->mu);
	h->inited = false;
	pthread_mutex_unlock(&h->mu);
	/* The mutex stays usable (glibc's need no destroying) and `stopping` stays set: a request
	 * NNG dispatched just before the stop still finds its way out without the worker. */
}

/* mesh.c — `layermesh up`. See mesh.h for the sequence of events. */
#include "coordinator/mesh.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/log.h"
#include "common/mesh_config.h"
#include "common/tokenizer.h"
#include "common/wire.h"
#include "coordinator/api.h"
#include "common/gguf.h"
#include "common/model.h"
#include "coordinator/planner.h"
#include "coordinator/probe.h"
#include "coordinator/scheduler.h"
#include "lm_config.h"

enum proc_state {
	PROC_STARTING = 0,
	PROC_READY = 1,
	PROC_FAILED = 2, /* the handshake failed: see why */
	PROC_EXITED = 3, /* the process ended */
};

struct mesh_proc {
	struct mesh *mesh;
	const struct mesh_worker *cfg;
	int32_t index;
	uv_process_t proc;
	bool spawned;
	int pid;
	_Atomic int state;
	nng_socket ctl;
	bool ctl_open;
	struct wire_ready ready;
	char why[512];
	pthread_t thread;
};

struct mesh {
	const struct mesh_opts *o;
	struct mesh_config cfg;
	gguf_file *file; /* the model's metadata: tokenizer and fingerprint */
	struct lm_hparams hp;
	uint64_t fingerprint;
	int32_t max_seq;
	char model_name[128];
	struct fence_plan plan;
	tok_vocab *vocab;
	uv_loop_t loop;
	uv_signal_t sig_int, sig_term;
	uv_async_t wake; /* the handshake thread telling the loop it finished */
	uv_timer_t stop_timer;
	struct mesh_proc *procs;
	int32_t n_procs;
	nng_socket push, pull;
	bool push_open, pull_open;
	struct sched *sched;
	struct api *api;
	pthread_t handshake;
	bool handshake_started;
	_Atomic int handshake_rc; /* 1 running, 0 done, < 0 failed */
	_Atomic bool stopping;
	int exit_status;
	int32_t alive; /* spawned processes not yet reaped */
	char worker_bin[PATH_MAX];
};

/* ------------------------------------------------------------------ helpers */

static double mesh_mib(uint64_t b)
{
	return (double)b / 1048576.0;
}

/* The worker binary: --worker-bin, else next to this program (installed), else the build
 * tree's worker/ directory beside coordinator/. */
static int mesh_find_worker(struct mesh *m, lm_diag *d)
{
	if (m->o->worker_bin != NULL) {
		snprintf(m->worker_bin, sizeof m->worker_bin, "%s", m->o->worker_bin);
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n <= 0)
			return lm_fail(d, LM_EOS, "cannot find this program's path");
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		static const char *const candidates[] = {"/layermesh-worker",
							 "/../worker/layermesh-worker"};
		for (size_t i = 0; i < 2; i++) {
			size_t a = strlen(self), b = strlen(candidates[i]);
			if (a + b >= sizeof m->worker_bin)
				return lm_fail(d, LM_ERANGE, "this program's path is too long");
			memcpy(m->worker_bin, self, a);
			memcpy(m->worker_bin + a, candidates[i], b + 1);
			if (access(m->worker_bin, X_OK) == 0)
				break;
		}
	}
	if (access(m->worker_bin, X_OK) != 0)
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       m->worker_bin);
	return 0;
}

static void mesh_unlink_ipc(const char *addr)
{
	if (addr != NULL && strncmp(addr, "ipc://", 6) == 0)
		unlink(addr + 6);
}

/* ------------------------------------------------------------------ control requests */

/* Sends req on a worker's control socket and waits for the reply (the caller frees it). */
static int mesh_request(struct mesh_proc *p, const struct wire_buf *req, nng_msg **reply,
			int timeout_ms, lm_diag *d)
{
	nng_msg *m;
	int rv;
	nng_socket_set_ms(p->ctl, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_ms(p->ctl, NNG_OPT_SENDTIMEO, timeout_ms);
	if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, req->data, req->len) != 0)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	if ((rv = nng_sendmsg(p->ctl, m, 0)) != 0) {
		nng_msg_free(m);
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
static int mesh_check_reply(struct mesh_proc *p, nng_msg *r, uint32_t want, lm_diag *d)
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

static bool mesh_proc_dead(struct mesh_proc *p)
{
	return atomic_load(&p->state) == PROC_EXITED;
}

/* (Re)opens the worker's control REQ socket and dials it; the dial retries in the background
 * until the worker listens. */
static int mesh_ctl_open(struct mesh_proc *p, lm_diag *d)
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

/* HELLO until the worker answers (it may still be starting), then ASSIGN and READY. */
static int mesh_handshake_one(struct mesh_proc *p, lm_diag *d)
{
	struct mesh *m = p->mesh;
	const struct fence_stage *st = &m->plan.stages[p->index];
	struct wire_buf b = {0};
	nng_msg *r = NULL;
	int rc, rv;

	if ((rc = mesh_ctl_open(p, d)) != 0)
		return rc;

	/* HELLO, retried while the process starts; a dead process ends the wait at once. */
	time_t deadline = time(NULL) + m->o->handshake_timeout_s;
	struct wire_hello me = {.version = WIRE_VERSION, .id = 1};
	snprintf(me.name, sizeof me.name, "coordinator");
	snprintf(me.build, sizeof me.build, "%s", LM_VERSION);
	for (;;) {
		if (mesh_proc_dead(p))
			return lm_fail(d, LM_EUNAVAILABLE, "worker %s exited during start-up (%s)",
				       p->cfg->name, p->why[0] ? p->why : "see its log above");
		wire_buf_reset(&b);
		wire_encode_hello(&b, &me, false);
		rc = mesh_request(p, &b, &r, 250, d);
		if (rc == 0)
			break;
		if (time(NULL) >= deadline || atomic_load(&m->stopping)) {
			wire_buf_fini(&b);
			return lm_fail(d, LM_ETIMEOUT, "worker %s did not answer at %s within %d s",
				       p->cfg->name, p->cfg->control, m->o->handshake_timeout_s);
		}
		/* A REQ socket must not have two requests outstanding: reopen for the retry. */
		if ((rc = mesh_ctl_open(p, d)) != 0) {
			wire_buf_fini(&b);
			return rc;
		}
	}
	struct wire_hello hello;
	rc = mesh_check_reply(p, r, WIRE_HELLO, d);
	if (rc == 0)
		rc = wire_decode_hello(nng_msg_body(r), nng_msg_len(r), &hello, d);
	nng_msg_free(r);
	if (rc != 0) {
		wire_buf_fini(&b);
		if (rc == LM_EVERSION)
			lm_diag_prefix(d, "worker %s", p->cfg->name);
		return rc;
	}
	if (hello.version != WIRE_VERSION) {
		wire_buf_fini(&b);
		return lm_fail(d, LM_EVERSION,
			       "worker %s speaks protocol version %u; this coordinator speaks %u",
			       p->cfg->name, hello.version, WIRE_VERSION);
	}
	if (hello.has_slice && hello.fingerprint != 0 && hello.fingerprint != m->fingerprint) {
		wire_buf_fini(&b);
		return lm_fail(d, LM_EFINGERPRINT,
			       "worker %s holds a model with fingerprint %016llx; the mesh's model "
			       "%s has %016llx",
			       p->cfg->name, (unsigned long long)hello.fingerprint,
			       m->cfg.model_path, (unsigned long long)m->fingerprint);
	}
	lm_info("%s: pid %d, build %s, loading layers [%d, %d) (%.1f MiB weights, %.1f MiB KV)",
		p->cfg->name, hello.pid, hello.build, st->start, st->end,
		mesh_mib(st->weight_bytes), mesh_mib(st->kv_bytes));

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
	wire_buf_reset(&b);
	wire_encode_assign(&b, &a);
	/* Loading a large slice takes a while: wait in slices of a second, watching the process. */
	rc = LM_ETIMEOUT;
	nng_msg *m0;
	nng_socket_set_ms(p->ctl, NNG_OPT_SENDTIMEO, 5000);
	if (nng_msg_alloc(&m0, 0) != 0 || nng_msg_append(m0, b.data, b.len) != 0 ||
	    nng_sendmsg(p->ctl, m0, 0) != 0) {
		wire_buf_fini(&b);
		return lm_fail(d, LM_EIO, "worker %s: cannot send ASSIGN", p->cfg->name);
	}
	wire_buf_fini(&b);
	nng_socket_set_ms(p->ctl, NNG_OPT_RECVTIMEO, 1000);
	deadline = time(NULL) + m->o->handshake_timeout_s;
	while ((rv = nng_recvmsg(p->ctl, &r, 0)) == NNG_ETIMEDOUT) {
		if (mesh_proc_dead(p))
			return lm_fail(d, LM_EUNAVAILABLE, "worker %s exited while loading (%s)",
				       p->cfg->name, p->why[0] ? p->why : "see its log above");
		if (time(NULL) >= deadline || atomic_load(&m->stopping))
			return lm_fail(d, LM_ETIMEOUT, "worker %s was not ready within %d s",
				       p->cfg->name, m->o->handshake_timeout_s);
		lm_info("%s: still loading", p->cfg->name);
	}
	if (rv != 0)
		return lm_fail(d, LM_EIO, "worker %s: %s", p->cfg->name, nng_strerror(rv));
	rc = mesh_check_reply(p, r, WIRE_READY, d);
	if (rc == 0)
		rc = wire_decode_ready(nng_msg_body(r), nng_msg_len(r), &p->ready, d);
	nng_msg_free(r);
	if (rc != 0)
		return rc;
	if (p->ready.fingerprint != m->fingerprint)
		return lm_fail(
			d, LM_EFINGERPRINT,
			"worker %s loaded a model with fingerprint %016llx; the mesh's model "
			"has %016llx",
			p->cfg->name, (unsigned long long)p->ready.fingerprint,
			(unsigned long long)m->fingerprint);
	atomic_store(&p->state, PROC_READY);
	lm_info("%s: ready, layers [%d, %d), KV %.2f MiB (%llu bytes), weights %.2f MiB, resident "
		"%.2f MiB",
		p->cfg->name, st->start, st->end, mesh_mib(p->ready.kv_bytes),
		(unsigned long long)p->ready.kv_bytes, mesh_mib(p->ready.weight_bytes),
		mesh_mib(p->ready.rss_bytes));
	return 0;
}

static void *mesh_handshake_one_main(void *arg)
{
	struct mesh_proc *p = arg;
	lm_diag d = {{0}};
	int rc = mesh_handshake_one(p, &d);
	if (rc != 0) {
		snprintf(p->why, sizeof p->why, "%s", lm_diag_str(&d, rc));
		if (atomic_load(&p->state) != PROC_EXITED)
			atomic_store(&p->state, PROC_FAILED);
	}
	return (void *)(intptr_t)rc;
}

/* ------------------------------------------------------------------ mesh-level endpoints */

static bool mesh_ready(void *arg, char *why, size_t cap)
{
	struct mesh *m = arg;
	if (atomic_load(&m->handshake_rc) != 0) {
		snprintf(why, cap, "the mesh is starting");
		return false;
	}
	for (int32_t i = 0; i < m->n_procs; i++) {
		int s = atomic_load(&m->procs[i].state);
		if (s != PROC_READY) {
			snprintf(why, cap, "worker %s is %s", m->procs[i].cfg->name,
				 s == PROC_EXITED   ? "down"
				 : s == PROC_FAILED ? "failed"
						    : "starting");
			return false;
		}
	}
	return true;
}

/* How long /v1/status waits for a worker's own /status (connect, then answer). */
#define MESH_PROBE_TIMEOUT_MS 500

static cJSON *mesh_status(void *arg)
{
	struct mesh *m = arg;
	/* Every worker's own view, asked in parallel before anything is built. */
	const char **addrs = calloc((size_t)m->n_procs + 1, sizeof *addrs);
	struct probe_result *probes = calloc((size_t)m->n_procs + 1, sizeof *probes);
	if (addrs == NULL || probes == NULL) {
		free(addrs);
		free(probes);
		return NULL;
	}
	for (int32_t i = 0; i < m->n_procs; i++)
		addrs[i] = m->procs[i].cfg->http;
	probe_status_all(addrs, m->n_procs, MESH_PROBE_TIMEOUT_MS, probes);
	free(addrs);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "model", m->model_name);
	char fp[32];
	snprintf(fp, sizeof fp, "%016llx", (unsigned long long)m->fingerprint);
	cJSON_AddStringToObject(o, "fingerprint", fp);
	cJSON_AddItemToObject(o, "plan", fence_plan_to_json(&m->plan));
	cJSON *ws = cJSON_AddArrayToObject(o, "workers");
	for (int32_t i = 0; i < m->n_procs; i++) {
		struct mesh_proc *p = &m->procs[i];
		cJSON *w = cJSON_CreateObject();
		static const char *const names[] = {"starting", "ready", "failed", "down"};
		cJSON_AddStringToObject(w, "name", p->cfg->name);
		cJSON_AddStringToObject(w, "state", names[atomic_load(&p->state)]);
		cJSON_AddNumberToObject(w, "pid", p->pid);
		cJSON_AddNumberToObject(w, "start", m->plan.stages[i].start);
		cJSON_AddNumberToObject(w, "end", m->plan.stages[i].end);
		cJSON_AddNumberToObject(w, "kv_bytes", (double)p->ready.kv_bytes);
		cJSON_AddNumberToObject(w, "weight_bytes", (double)p->ready.weight_bytes);
		cJSON_AddNumberToObject(w, "rss_bytes_at_ready", (double)p->ready.rss_bytes);
		if (p->why[0])
			cJSON_AddStringToObject(w, "why", p->why);
		cJSON_AddStringToObject(w, "http", p->cfg->http);
		if (probes[i].status != NULL)
			cJSON_AddItemToObject(w, "status", probes[i].status);
		else
			cJSON_AddStringToObject(w, "status_error", probes[i].error);
		cJSON_AddItemToArray(ws, w);
	}
	free(probes);
	if (m->sched != NULL) {
		const struct sched_stats *s = sched_stats(m->sched);
		cJSON *q = cJSON_AddObjectToObject(o, "scheduler");
		cJSON_AddNumberToObject(q, "requests", (double)atomic_load(&s->requests));
		cJSON_AddNumberToObject(q, "active", atomic_load(&s->active));
		cJSON_AddNumberToObject(q, "queued", atomic_load(&s->queued));
		cJSON_AddNumberToObject(q, "tokens_generated",
					(double)atomic_load(&s->tokens_generated));
		cJSON_AddNumberToObject(q, "batches", (double)atomic_load(&s->batches));
		cJSON_AddNumberToObject(q, "ring_errors", (double)atomic_load(&s->ring_errors));
	}
	return o;
}

static void mesh_metrics_hist(struct lm_mtext *t, const char *name, const char *help,
			      const struct lm_hist *h)
{
	struct lm_hist_snap s;
	lm_hist_snapshot(h, &s);
	lm_mtext_family(t, name, "histogram", help);
	lm_mtext_hist(t, name, NULL, &s);
}

static char *mesh_metrics(void *arg)
{
	struct mesh *m = arg;
	if (m->sched == NULL)
		return NULL;
	const struct sched_stats *s = sched_stats(m->sched);
	struct lm_mtext t = {0};
	int32_t ready = 0;
	for (int32_t i = 0; i < m->n_procs; i++)
		ready += atomic_load(&m->procs[i].state) == PROC_READY;
	lm_mtext_counter(&t, "layermesh_requests_total", "Completion requests accepted.",
			 atomic_load(&s->requests));
	lm_mtext_counter(&t, "layermesh_tokens_generated_total", "Tokens sampled by the mesh.",
			 atomic_load(&s->tokens_generated));
	lm_mtext_counter(&t, "layermesh_prompt_tokens_total", "Prompt tokens of accepted requests.",
			 atomic_load(&s->prompt_tokens));
	lm_mtext_counter(&t, "layermesh_batches_total", "FORWARD batches sent into the ring.",
			 atomic_load(&s->batches));
	lm_mtext_counter(&t, "layermesh_ring_errors_total", "Ring messages refused or malformed.",
			 atomic_load(&s->ring_errors));
	lm_mtext_gauge(&t, "layermesh_active_sequences", "Sequences holding a KV slot.",
		       atomic_load(&s->active));
	lm_mtext_gauge(&t, "layermesh_queued_sequences", "Sequences waiting for a slot.",
		       atomic_load(&s->queued));
	lm_mtext_gauge(&t, "layermesh_workers_ready", "Workers that are ready.", ready);
	lm_mtext_family(&t, "layermesh_worker_up", "gauge",
			"1 while the worker's process runs and its handshake has succeeded.");
	for (int32_t i = 0; i < m->n_procs; i++) {
		char label[300];
		lm_mtext_label(label, sizeof label, "worker", m->procs[i].cfg->name);
		lm_mtext_sample(&t, "layermesh_worker_up", label,
				atomic_load(&m->procs[i].state) == PROC_READY ? 1 : 0);
	}
	mesh_metrics_hist(&t, "layermesh_time_to_first_token_seconds",
			  "From a request's arrival to its first generated token.", &s->ttft);
	mesh_metrics_hist(&t, "layermesh_token_decode_seconds",
			  "Between consecutive generated tokens of a request.", &s->token);
	mesh_metrics_hist(&t, "layermesh_request_duration_seconds",
			  "From a request's arrival to its end, for any reason.", &s->duration);
	return lm_mtext_take(&t);
}

/* ------------------------------------------------------------------ bring-up */

/* Runs on its own thread: every worker's handshake in parallel, then the data plane, the
 * scheduler and the API. Wakes the loop when done. */
static void *mesh_handshake_main(void *arg)
{
	struct mesh *m = arg;
	lm_diag d = {{0}};
	int rc = 0, rv;

	for (int32_t i = 0; i < m->n_procs; i++)
		pthread_create(&m->procs[i].thread, NULL, mesh_handshake_one_main, &m->procs[i]);
	for (int32_t i = 0; i < m->n_procs; i++) {
		void *ret;
		pthread_join(m->procs[i].thread, &ret);
		if ((intptr_t)ret != 0 && rc == 0) {
			rc = (int)(intptr_t)ret;
			lm_error("%s", m->procs[i].why);
		}
	}
	if (rc != 0)
		goto out;

	if ((rv = nng_push0_open(&m->push)) != 0) {
		rc = lm_fail(&d, LM_EIO, "push socket: %s", nng_strerror(rv));
		goto out;
	}
	m->push_open = true;
	nng_socket_set_ms(m->push, NNG_OPT_SENDTIMEO, 1000);
	nng_socket_set_ms(m->push, NNG_OPT_RECONNMINT, 10);
	nng_socket_set_ms(m->push, NNG_OPT_RECONNMAXT, 200);
	if ((rv = nng_dial(m->push, m->procs[0].cfg->data, NULL, NNG_FLAG_NONBLOCK)) != 0) {
		rc = lm_fail(&d, LM_EIO, "cannot dial %s: %s", m->procs[0].cfg->data,
			     nng_strerror(rv));
		goto out;
	}
	struct sched_cfg sc = {.fingerprint = m->fingerprint,
			       .slots = m->cfg.slots,
			       .max_seq = m->max_seq,
			       .max_batch = m->cfg.max_batch,
			       .max_inflight = m->n_procs,
			       .prefill_chunk = m->cfg.max_batch,
			       .n_vocab = m->hp.n_vocab,
			       .max_logprobs = 20,
			       .batch_timeout_ms = 30000,
			       .push = m->push,
			       .pull = m->pull};
	int32_t stops[3] = {tok_eos(m->vocab), tok_eot(m->vocab), tok_bos(m->vocab)};
	for (int i = 0; i < 3; i++)
		if (stops[i] >= 0)
			sc.stop_ids[sc.n_stop_ids++] = stops[i];
	if ((rc = sched_start(&m->sched, &sc, &d)) != 0)
		goto out;
	struct api_cfg ac = {.http = m->cfg.http,
			     .model_name = m->model_name,
			     .auth_token = m->cfg.auth_token,
			     .max_seq = m->max_seq,
			     .vocab = m->vocab,
			     .sched = m->sched,
			     .mesh = m,
			     .ready = mesh_ready,
			     .status = mesh_status,
			     .metrics = mesh_metrics};
	if ((rc = api_start(&m->api, &ac, &d)) != 0)
		goto out;
	char fence[512];
	size_t at = 0;
	for (int32_t i = 0; i <= m->plan.n_workers && at < sizeof fence - 16; i++)
		at += (size_t)snprintf(fence + at, sizeof fence - at, "%s%d", i ? ", " : "",
				       m->plan.cuts[i]);
	lm_info("ready: serving %s on http://%s with %d workers, fence [%s]", m->model_name,
		m->cfg.http, m->n_procs, fence);
out:
	if (rc != 0 && d.msg[0])
		lm_error("%s", d.msg);
	atomic_store(&m->handshake_rc, rc);
	uv_async_send(&m->wake);
	return NULL;
}

/* ------------------------------------------------------------------ the loop */

static void mesh_begin_stop(struct mesh *m, const char *why);

static void mesh_on_exit(uv_process_t *proc, int64_t status, int term_signal)
{
	struct mesh_proc *p = proc->data;
	struct mesh *m = p->mesh;
	if (term_signal != 0)
		snprintf(p->why, sizeof p->why, "killed by signal %d", term_signal);
	else
		snprintf(p->why, sizeof p->why, "exited with status %lld", (long long)status);
	atomic_store(&p->state, PROC_EXITED);
	m->alive--;
	uv_close((uv_handle_t *)proc, NULL);
	if (!atomic_load(&m->stopping)) {
		char why[600];
		snprintf(why, sizeof why, "worker %s %s", p->cfg->name, p->why);
		lm_error("%s", why);
		if (m->sched != NULL)
			sched_set_available(m->sched, false, why);
	}
	if (atomic_load(&m->stopping) && m->alive == 0)
		uv_stop(&m->loop);
}

static int mesh_spawn(struct mesh *m, struct mesh_proc *p, lm_diag *d)
{
	char threads[16], parent[16];
	snprintf(threads, sizeof threads, "%d", p->cfg->threads);
	snprintf(parent, sizeof parent, "%d", (int)getpid());
	const char *level = lm_log_get_level() >= LM_LOG_DEBUG ? "debug" : "info";
	char *args[] = {m->worker_bin,
			"--name",
			p->cfg->name,
			"--control",
			p->cfg->control,
			"--data",
			p->cfg->data,
			"--http",
			p->cfg->http,
			"--backend",
			p->cfg->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu",
			"--threads",
			threads,
			"--parent-pid",
			parent,
			"--log-level",
			(char *)level,
			NULL};
	uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
					 {.flags = UV_INHERIT_FD, .data.fd = 2},
					 {.flags = UV_INHERIT_FD, .data.fd = 2}};
	uv_process_options_t po = {.exit_cb = mesh_on_exit,
				   .file = m->worker_bin,
				   .args = args,
				   .stdio_count = 3,
				   .stdio = stdio};
	p->proc.data = p;
	/* Stale ipc socket files from a crashed run would make the worker's listen fail. */
	mesh_unlink_ipc(p->cfg->control);
	mesh_unlink_ipc(p->cfg->data);
	int rv = uv_spawn(&m->loop, &p->proc, &po);
	if (rv != 0)
		return lm_fail(d, LM_EOS, "cannot start %s for worker %s: %s", m->worker_bin,
			       p->cfg->name, uv_strerror(rv));
	p->spawned = true;
	p->pid = p->proc.pid;
	m->alive++;
	return 0;
}

static void mesh_on_stop_timer(uv_timer_t *t)
{
	struct mesh *m = t->data;
	for (int32_t i = 0; i < m->n_procs; i++)
		if (m->procs[i].spawned && atomic_load(&m->procs[i].state) != PROC_EXITED) {
			lm_warn("%s did not stop in time: killing it", m->procs[i].cfg->name);
			uv_process_kill(&m->procs[i].proc, SIGKILL);
		}
}

static void mesh_begin_stop(struct mesh *m, const char *why)
{
	if (atomic_exchange(&m->stopping, true))
		return;
	lm_info("stopping (%s)", why);
	api_stop(m->api);
	m->api = NULL;
	sched_stop(m->sched);
	m->sched = NULL;
	for (int32_t i = 0; i < m->n_procs; i++)
		if (m->procs[i].spawned && atomic_load(&m->procs[i].state) != PROC_EXITED)
			uv_process_kill(&m->procs[i].proc, SIGTERM);
	uv_timer_start(&m->stop_timer, mesh_on_stop_timer, 5000, 0);
	if (m->alive == 0)
		uv_stop(&m->loop);
}

static void mesh_on_signal(uv_signal_t *s, int signum)
{
	mesh_begin_stop(s->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

static void mesh_on_wake(uv_async_t *a)
{
	struct mesh *m = a->data;
	int rc = atomic_load(&m->handshake_rc);
	if (m->handshake_started) {
		pthread_join(m->handshake, NULL);
		m->handshake_started = false;
	}
	if (rc != 0) {
		m->exit_status = 1;
		mesh_begin_stop(m, "the mesh could not start");
	}
}

static void mesh_close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

int mesh_up(const struct mesh_opts *o)
{
	struct mesh *m = calloc(1, sizeof *m);
	lm_diag d = {{0}};
	int rc, rv;

	if (m == NULL)
		return 1;
	m->o = o;
	atomic_store(&m->handshake_rc, 1);
	if ((rc = mesh_config_load(&m->cfg, o->config, &d)) != 0)
		goto early;
	lm_log_init("layermesh", NULL, m->cfg.log_level);
	if ((rc = planner_plan(&m->cfg, &m->plan, NULL, &d)) != 0)
		goto early;
	if ((rc = gguf_open(m->cfg.model_path, &m->file, &d)) != 0 ||
	    (rc = lm_hparams_load(m->file, &m->hp, &d)) != 0 ||
	    (rc = tok_load(m->file, &m->vocab, &d)) != 0) {
		lm_diag_prefix(&d, "%s", m->cfg.model_path);
		goto early;
	}
	m->fingerprint = gguf_fingerprint(m->file);
	m->max_seq = planner_max_seq(&m->cfg, &m->hp);
	const char *base = strrchr(m->cfg.model_path, '/');
	snprintf(m->model_name, sizeof m->model_name, "%s", base ? base + 1 : m->cfg.model_path);
	char *dot = strrchr(m->model_name, '.');
	if (dot != NULL && strcmp(dot, ".gguf") == 0)
		*dot = '\0';
	fence_plan_write_table(&m->plan, stderr);
	if (o->spawn && (rc = mesh_find_worker(m, &d)) != 0)
		goto early;

	m->n_procs = m->cfg.n_workers;
	m->procs = calloc((size_t)m->n_procs, sizeof *m->procs);
	if (m->procs == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto early;
	}
	mesh_unlink_ipc(m->cfg.data_in);
	if ((rv = nng_pull0_open(&m->pull)) != 0 ||
	    (m->pull_open = true, rv = nng_listen(m->pull, m->cfg.data_in, NULL, 0)) != 0) {
		rc = lm_fail(&d, LM_EIO, "cannot listen at %s: %s", m->cfg.data_in,
			     nng_strerror(rv));
		goto early;
	}
	nng_socket_set_size(m->pull, NNG_OPT_RECVMAXSZ, 0);

	uv_loop_init(&m->loop);
	uv_signal_init(&m->loop, &m->sig_int);
	uv_signal_init(&m->loop, &m->sig_term);
	m->sig_int.data = m->sig_term.data = m;
	uv_signal_start(&m->sig_int, mesh_on_signal, SIGINT);
	uv_signal_start(&m->sig_term, mesh_on_signal, SIGTERM);
	uv_async_init(&m->loop, &m->wake, mesh_on_wake);
	m->wake.data = m;
	uv_timer_init(&m->loop, &m->stop_timer);
	m->stop_timer.data = m;
	signal(SIGPIPE, SIG_IGN);

	for (int32_t i = 0; i < m->n_procs; i++) {
		struct mesh_proc *p = &m->procs[i];
		p->mesh = m;
		p->cfg = &m->cfg.workers[i];
		p->index = i;
		if (o->spawn && (rc = mesh_spawn(m, p, &d)) != 0) {
			lm_error("%s", d.msg);
			m->exit_status = 1;
			mesh_begin_stop(m, "a worker could not be started");
			break;
		}
	}
	if (!atomic_load(&m->stopping)) {
		lm_info("%d workers started; handshaking", m->n_procs);
		if (pthread_create(&m->handshake, NULL, mesh_handshake_main, m) == 0)
			m->handshake_started = true;
		else
			mesh_begin_stop(m, "cannot start the handshake thread");
	}
	uv_run(&m->loop, UV_RUN_DEFAULT);

	/* Stopped: the handshake thread sees `stopping` and returns within its poll interval. */
	atomic_store(&m->stopping, true);
	if (m->handshake_started)
		pthread_join(m->handshake, NULL);
	api_stop(m->api);
	sched_stop(m->sched);
	uv_walk(&m->loop, mesh_close_walk, NULL);
	uv_run(&m->loop, UV_RUN_DEFAULT);
	uv_loop_close(&m->loop);
	rc = m->exit_status != 0 ? LM_EUNAVAILABLE : 0;
	lm_info("stopped");
early:
	if (rc != 0 && d.msg[0])
		fprintf(stderr, "layermesh up: %s\n", d.msg);
	if (m->push_open)
		nng_close(m->push);
	if (m->pull_open)
		nng_close(m->pull);
	for (int32_t i = 0; m->procs != NULL && i < m->n_procs; i++) {
		if (m->procs[i].ctl_open)
			nng_close(m->procs[i].ctl);
		if (o->spawn && m->procs[i].cfg != NULL) {
			mesh_unlink_ipc(m->procs[i].cfg->control);
			mesh_unlink_ipc(m->procs[i].cfg->data);
		}
	}
	mesh_unlink_ipc(m->cfg.data_in);
	free(m->procs);
	tok_free(m->vocab);
	fence_plan_fini(&m->plan);
	gguf_close(m->file);
	mesh_config_fini(&m->cfg);
	int status = rc == 0 && m->exit_status == 0 ? 0 : 1;
	free(m);
	return status;
}

/* worker.c — the layermesh-worker process around one stage. See worker.h. */
#include "worker/worker.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/base/metrics.h"
#include "common/wire/link.h"
#include "common/wire/listen_guard.h"
#include "common/wire/transport.h"
#include "lm_config.h"
#include "worker/health.h"
#include "worker/recvq.h"
#include "worker/stage.h"

/* How often blocked receives wake up to look at the stop flag. */
#define WORKER_POLL_MS 100
/* What a socket may receive before ASSIGN says how large a legal message is: an ASSIGN, a
 * HELLO, a stray small ring message. Bigger frames are refused before they are read. */
#define WORKER_RECV_UNASSIGNED (64 << 10)
/* Refusals of what peers send are logged at most once a second per peer and reason. */
#define WORKER_REFUSAL_LOG_MS 1000

struct worker {
	const struct worker_opts *o;
	pthread_mutex_t mu; /* serialises the stage between the data and control threads */
	bool assigned;      /* under mu */
	struct stage st;    /* under mu */
	nng_socket ctl, pull, push;
	struct lm_listen_guard ctl_guard, pull_guard; /* keep ctl and pull accepting */
	bool push_open;
	struct lm_link next; /* push's dial to the successor; re-pointed by REPOINT */
	pthread_t data_thread;
	bool data_started;
	struct wire_buf cbuf; /* control replies (control thread only) */
	struct wire_buf ebuf; /* ERROR messages (data thread only) */
	uint64_t started_ns;
	_Atomic uint64_t dropped; /* ring messages that could not be processed or forwarded */
	/* The slice as HELLO reports it: written once when the assignment is accepted, then
	 * published, so HELLO (the coordinator's heartbeat) never waits for `mu`, which a long
	 * batch may hold for seconds. */
	struct wire_hello slice_info;
	_Atomic bool slice_published;
	/* For the health endpoints, which must not wait for `mu` either (a load holds it too):
	 * the phase (enum health_phase; HEALTH_ASSIGNED publishes `st`'s fixed fields, as
	 * slice_published does slice_info) and the KV slots in use after the last message. */
	_Atomic int phase;
	_Atomic int32_t active;
	struct recvq rq;      /* the data ring's arrivals, stamped */
	struct health health; /* latencies, the status document, the --http server */
	/* The data ring's progress, for the coordinator's check on the batches a worker holds
	 * (health.h, "ring"): the id of the last message taken, of the last one passed on, and
	 * since when the one in hand has been (0: none). */
	_Atomic uint64_t ring_in, ring_out;
	_Atomic int64_t busy_since_ms, send_since_ms; /* the latter while its push blocks */
	struct lm_log_limit refusals;
	/* The model file, watched from the load on (inotify, IN_MODIFY): a write into the bytes
	 * this worker has mapped changes its weights under it, so it stops before anything it
	 * computed from them goes on (worker_weights_changed). -1: not watched. */
	int model_watch;
	_Atomic bool weights_changed;
	char model_path[sizeof((struct wire_assign *)0)->model];
#ifdef LM_TEST_DROP_DATA
	bool dropping; /* the test build's cue was seen: every data message is dropped */
#endif
};

/* Set from the signal handler; read by both loops. */
static volatile sig_atomic_t worker_stop;

/* Whether the model file has been written since the load. The first time it has, says so and
 * stops the worker: its mapping shows the new bytes at once, so the only way never to serve
 * them is not to serve at all. The keeper restarts it, and the new process's slice digest
 * (READY) tells whether the slice is still the one the mesh serves. One read(2) of a
 * non-blocking descriptor: about a system call's cost per batch. */
static bool worker_weights_changed(struct worker *w)
{
	if (atomic_load(&w->weights_changed))
		return true;
	if (w->model_watch < 0)
		return false;
	char ev[sizeof(struct inotify_event) + NAME_MAX + 1]
		__attribute__((aligned(__alignof__(struct inotify_event))));
	if (read(w->model_watch, ev, sizeof ev) <= 0)
		return false;
	if (!atomic_exchange(&w->weights_changed, true))
		lm_error("the model file %s was written while this worker serves it: stopping, so "
			 "that nothing computed from changed weights goes on (a restart checks "
			 "the slice's digest)",
			 w->model_path);
	worker_stop = 1;
	return true;
}

static void worker_watch_model(struct worker *w, const char *path)
{
	if (w->model_watch >= 0)
		return;
	snprintf(w->model_path, sizeof w->model_path, "%s", path);
	w->model_watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->model_watch >= 0 && inotify_add_watch(w->model_watch, path, IN_MODIFY) >= 0)
		return;
	lm_warn("cannot watch %s for writes (%s): weights written in place under this worker "
		"would go unseen until it restarts",
		path, strerror(errno));
	if (w->model_watch >= 0)
		close(w->model_watch);
	w->model_watch = -1;
}

static void worker_on_signal(int sig)
{
	(void)sig;
	worker_stop = 1;
}

/* ------------------------------------------------------------------ the data ring */

/* Sends on the PUSH socket, retrying while the successor is away (the link redials a dialer
 * that gave up), until sent or stopping. */
static int worker_push(struct worker *w, nng_msg *m)
{
	for (;;) {
		int rv = lm_link_send(&w->next, m);
		if (rv == 0)
			return 0;
		if (rv != NNG_ETIMEDOUT || worker_stop) {
			nng_msg_free(m);
			return rv;
		}
	}
}

/* The peer a message came from, for the log: its address for tcp, its pipe for ipc (every ipc
 * peer has the listener's path). */
static void worker_peer(nng_msg *m, char *out, size_t cap)
{
	nng_pipe p = nng_msg_get_pipe(m);
	nng_sockaddr sa;
	if (nng_pipe_id(p) > 0 && nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) == 0 &&
	    sa.s_family == NNG_AF_INET) {
		const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
		snprintf(out, cap, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3],
			 (unsigned)((sa.s_in.sa_port & 0xff) << 8 | sa.s_in.sa_port >> 8));
	} else {
		snprintf(out, cap, "pipe %d", nng_pipe_id(p));
	}
}

/* One line per peer and reason a second (the counters keep the exact numbers). */
static void worker_log_refusal(struct worker *w, nng_msg *in, const struct wire_head *h, int rc,
			       bool malformed, const lm_diag *d)
{
	char peer[64];
	uint64_t held = 0;
	worker_peer(in, peer, sizeof peer);
	if (!lm_log_limit_pass(&w->refusals, lm_log_key(peer, rc * 64 + (int)h->type), &held))
		return;
	char more[64] = "";
	if (held > 0)
		snprintf(more, sizeof more, " (and %llu more like it since the last line)",
			 (unsigned long long)held);
	lm_warn("%s %s message from %s%s: %s", malformed ? "dropped a malformed" : "refused a",
		wire_type_name(h->type), peer, more, lm_diag_str(d, rc));
}

#ifdef LM_TEST_DROP_DATA
/* The test build that answers its control plane but drops data (tests/integration/
 * test_hung.sh): once a file named after its data address with ".drop" appears, every data
 * message from then on is dropped unseen. */
static bool worker_test_drops(struct worker *w)
{
	char cue[300];
	if (!w->dropping && strncmp(w->o->data, "ipc://", 6) == 0) {
		snprintf(cue, sizeof cue, "%s.drop", w->o->data + 6);
		if (unlink(cue) == 0) {
			w->dropping = true;
			lm_warn("test build: dropping every data message from now on");
		}
	}
	return w->dropping;
}
#endif

/* Handles one ring message under `mu`: *out is what goes on, or NULL; *stamp_at where its
 * ring stamp goes (0: none) and *done when its compute ended. */
static int worker_handle(struct worker *w, nng_msg *in, uint64_t arrived, nng_msg **out,
			 size_t *stamp_at, uint64_t *done, bool *malformed, bool *can_push,
			 lm_diag *d)
{
	pthread_mutex_lock(&w->mu);
	int rc = LM_EUNAVAILABLE;
	*can_push = w->push_open;
	uint64_t t0 = lm_now_ns();
	lm_hist_observe(&w->health.recv, t0 - arrived);
	*malformed = false;
	*stamp_at = 0;
	*done = t0;
	if (w->assigned) {
		rc = stage_handle(&w->st, in, out, d);
		*malformed = rc != 0 && w->st.malformed;
		*done = lm_now_ns();
		lm_hist_observe(&w->health.compute, *done - t0);
		if (rc == 0) {
			/* The stamp comes from another process's reading of the same clock. */
			uint64_t sent = w->st.in_stamp;
			if (sent != 0 && arrived >= sent)
				lm_hist_observe(&w->health.transit, arrived - sent);
			if (w->st.forward_ns != 0)
				lm_hist_observe(&w->health.forward, w->st.forward_ns);
			*stamp_at = w->st.out_stamp_at;
		}
	} else {
		lm_fail(d, rc, "no assignment yet");
	}
	pthread_mutex_unlock(&w->mu);
	return rc;
}

/* What /status shows of the stage after a message: the backend's memory and the KV slots in
 * use. Done once the message has gone on, so that its successor does not wait for it: a
 * sysinfo(2) and a pass over the slots took about 7 of the 15 us between the end of a 0.85B
 * stage's compute and its send (bench/RESULTS.md, the hop). */
static void worker_after_message(struct worker *w)
{
	pthread_mutex_lock(&w->mu);
	if (w->assigned) {
		stage_mem_refresh(&w->st);
		int32_t active = 0;
		for (int32_t q = 0; q < w->st.eng.kv.slots; q++)
			active += w->st.eng.kv.len[q] > 0;
		atomic_store(&w->active, active);
	}
	pthread_mutex_unlock(&w->mu);
}

static void *worker_data_main(void *arg)
{
	struct worker *w = arg;
	lm_diag d;

	while (!worker_stop) {
		nng_msg *in = NULL, *out = NULL;
		uint64_t arrived;
		int rv = recvq_pop(&w->rq, &in, &arrived, WORKER_POLL_MS);
		if (rv == NNG_ETIMEDOUT)
			continue;
		if (rv != 0)
			break; /* socket closed */
#ifdef LM_TEST_DROP_DATA
		if (worker_test_drops(w)) {
			nng_msg_free(in);
			continue;
		}
#endif
		struct wire_head h = {0};
		wire_peek(nng_msg_body(in), nng_msg_len(in), &h, NULL);
		atomic_store(&w->busy_since_ms, lm_now_ms());
		atomic_store(&w->ring_in, h.id);
		d.msg[0] = '\0';
		bool malformed = false, can_push = false;
		size_t stamp_at = 0;
		uint64_t done = 0;
		int rc = worker_handle(w, in, arrived, &out, &stamp_at, &done, &malformed,
				       &can_push, &d);
		if (rc != 0) {
			worker_log_refusal(w, in, &h, rc, malformed, &d);
			nng_msg_free(in);
			/* A message that does not decode names a batch only by a stranger's word: it
			 * is dropped, so that it can never fail a live batch it does not belong to.
			 * A well-formed one that cannot be computed (its cache is gone, its numbers
			 * are not finite) fails its own batch down the ring, naming this worker. */
			char msg[600];
			snprintf(msg, sizeof msg, "worker %s: %s", w->o->name, lm_diag_str(&d, rc));
			if (malformed || !can_push ||
			    stage_error_msg(&w->ebuf, h.id, h.type, rc, msg, &out) != 0) {
				atomic_fetch_add(&w->dropped, 1);
				worker_after_message(w);
				atomic_store(&w->busy_since_ms, 0);
				continue;
			}
		}
		if (worker_weights_changed(w)) {
			nng_msg_free(out);
			atomic_store(&w->busy_since_ms, 0);
			break;
		}
		atomic_store(&w->send_since_ms, lm_now_ms());
		uint64_t t1 = lm_now_ns();
		if (stamp_at != 0 && stamp_at + WIRE_STAMP_LEN <= nng_msg_len(out))
			wire_stamp((uint8_t *)nng_msg_body(out) + stamp_at, t1);
		rv = worker_push(w, out);
		atomic_store(&w->send_since_ms, 0);
		if (rv != 0) {
			atomic_fetch_add(&w->dropped, 1);
		} else {
			lm_hist_observe(&w->health.pre_send, t1 - done);
			lm_hist_observe(&w->health.send, lm_now_ns() - t1);
			atomic_store(&w->ring_out, h.id);
		}
		worker_after_message(w);
		atomic_store(&w->busy_since_ms, 0);
	}
	return NULL;
}

/* ------------------------------------------------------------------ control */

static int worker_reply(struct worker *w, const struct wire_buf *b, const void *payload,
			size_t payload_len)
{
	nng_msg *m;
	if (nng_msg_alloc(&m, 0) != 0)
		return LM_ENOMEM;
	if (nng_msg_append(m, b->data, b->len) != 0 ||
	    (payload_len > 0 && nng_msg_append(m, payload, payload_len) != 0)) {
		nng_msg_free(m);
		return LM_ENOMEM;
	}
	if (nng_sendmsg(w->ctl, m, 0) != 0) {
		nng_msg_free(m);
		return LM_EIO;
	}
	return 0;
}

static int worker_reply_error(struct worker *w, uint64_t id, uint32_t about, int code,
			      const char *msg)
{
	struct wire_error e = {.id = id, .code = code, .about = about};
	snprintf(e.msg, sizeof e.msg, "%s", msg);
	wire_buf_reset(&w->cbuf);
	if (wire_encode_error(&w->cbuf, &e) != 0)
		return LM_EPROTO;
	return worker_reply(w, &w->cbuf, NULL, 0);
}

static void worker_hello_fill(struct worker *w, struct wire_hello *h, uint64_t id)
{
	memset(h, 0, sizeof *h);
	h->version = WIRE_VERSION;
	h->id = id;
	snprintf(h->name, sizeof h->name, "%s", w->o->name);
	snprintf(h->build, sizeof h->build, "%s", LM_VERSION);
	h->pid = (int32_t)getpid();
	if (atomic_load_explicit(&w->slice_published, memory_order_acquire)) {
		h->fingerprint = wire_hello_proof(w->slice_info.fingerprint, id);
		h->has_slice = true;
		h->begin = w->slice_info.begin;
		h->end = w->slice_info.end;
		h->embedding = w->slice_info.embedding;
		h->head = w->slice_info.head;
	}
}

static bool worker_same_assign(const struct wire_assign *a, const struct wire_assign *b)
{
	return a->begin == b->begin && a->end == b->end && a->embedding == b->embedding &&
	       a->head == b->head && a->max_seq == b->max_seq && a->slots == b->slots &&
	       a->k_type == b->k_type && a->v_type == b->v_type && a->k_type_swa == b->k_type_swa &&
	       a->v_type_swa == b->v_type_swa && a->wire_dtype == b->wire_dtype &&
	       a->max_batch == b->max_batch && a->max_draft == b->max_draft;
}

/* Opens the PUSH socket and dials the successor. The dial is asynchronous: NNG keeps retrying
 * until the successor listens, so workers may come up in any order. */
static int worker_connect_next(struct worker *w, const char *next, lm_diag *d)
{
	int rv;
	if (!w->push_open) {
		if ((rv = nng_push0_open(&w->push)) != 0)
			return lm_fail(d, LM_EIO, "push socket: %s", nng_strerror(rv));
		nng_socket_set_ms(w->push, NNG_OPT_SENDTIMEO, 1000);
		w->push_open = true;
		if ((rv = lm_link_init(&w->next, w->push, &w->o->tls, d)) != 0)
			return rv;
		health_watch_successor(&w->health, &w->next);
	}
	if ((rv = lm_link_dial(&w->next, next, d)) != 0) {
		lm_diag_prefix(d, "the successor");
		return rv;
	}
	return 0;
}

/* Whether the worker, its slice loaded, is already resident past its memory_limit. The cgroup
 * or isolate that enforces the limit would kill it at some later allocation, in the middle of
 * a batch, and the plan that sent it this slice under-counted it: it says so now, with both
 * figures, and refuses the slice (no READY), so that the mesh does not start on a promise it
 * cannot keep. A CUDA worker's memory_limit is device memory, not this process's. */
static int worker_check_limit(const struct worker *w, const struct wire_assign *a, lm_diag *d)
{
	uint64_t limit = w->o->memory_limit, rss = stage_rss_bytes();
	if (limit == 0 || strcmp(w->o->backend, "cpu") != 0 || rss <= limit)
		return 0;
	return lm_fail(d, LM_EINFEASIBLE,
		       "worker %s is resident at %llu bytes (%.2f MiB) with layers [%d, %d)%s%s "
		       "loaded, over its memory_limit of %llu bytes (%.2f MiB): it refuses the "
		       "slice rather than serve past its cap; give it a larger memory_limit or "
		       "fewer layers",
		       w->o->name, (unsigned long long)rss, (double)rss / 1048576.0, a->begin,
		       a->end, a->embedding ? " + embedding" : "", a->head ? " + head" : "",
		       (unsigned long long)limit, (double)limit / 1048576.0);
}

static int worker_load(struct worker *w, const struct wire_assign *a, lm_diag *d)
{
	lm_info("loading layers [%d, %d)%s%s of %s", a->begin, a->end,
		a->embedding ? " + embedding" : "", a->head ? " + head" : "", a->model);
	atomic_store(&w->phase, HEALTH_LOADING);
	int rc = stage_init(&w->st, a, w->o->backend, &w->o->backend_opts, d);
	if (rc != 0) {
		atomic_store(&w->phase, HEALTH_WAITING);
		return rc;
	}
	stage_mem_refresh(&w->st);
	if ((rc = worker_check_limit(w, a, d)) != 0 ||
	    (rc = worker_connect_next(w, a->next, d)) != 0) {
		stage_fini(&w->st);
		atomic_store(&w->phase, HEALTH_WAITING);
		return rc;
	}
	w->assigned = true;
	worker_watch_model(w, a->model);
	/* From now on a frame may be as large as a legal message of this slice, and no larger:
	 * a partial or oversized frame costs nothing beyond what a batch can carry. (NNG applies
	 * the limit to the pipes already connected, too.) */
	nng_socket_set_size(w->pull, NNG_OPT_RECVMAXSZ, wire_max_data_message(&w->st.lim));
	size_t kv_rows = 0; /* a KV_IMPORT of one whole slot */
	for (int32_t i = 0; i < w->st.eng.kv.num_layers; i++) {
		const struct lm_kv_layer *l = &w->st.eng.kv.layers[i];
		kv_rows += (size_t)l->ctx * (size_t)(l->k_row_bytes + l->v_row_bytes);
	}
	nng_socket_set_size(w->ctl, NNG_OPT_RECVMAXSZ, WORKER_RECV_UNASSIGNED + kv_rows);
	w->slice_info = (struct wire_hello){.fingerprint = w->st.eng.model.fingerprint,
					    .begin = a->begin,
					    .end = a->end,
					    .embedding = a->embedding,
					    .head = a->head};
	atomic_store_explicit(&w->slice_published, true, memory_order_release);
	atomic_store_explicit(&w->phase, HEALTH_ASSIGNED, memory_order_release);
	lm_info("ready: weights %.2f MiB, KV %.2f MiB (%d layers from %d), resident %.2f MiB",
		(double)w->st.eng.model.weight_bytes / 1048576.0,
		(double)w->st.eng.kv.bytes / 1048576.0, w->st.eng.kv.num_layers,
		w->st.eng.kv.base_layer, (double)stage_rss_bytes() / 1048576.0);
	return 0;
}

static int worker_on_assign(struct worker *w, const void *body, size_t len, uint64_t id)
{
	struct wire_assign a;
	lm_diag d = {{0}};
	int rc = wire_decode_assign(body, len, &a, &d);
	if (rc != 0)
		return worker_reply_error(w, id, WIRE_ASSIGN, rc, lm_diag_str(&d, rc));
	pthread_mutex_lock(&w->mu);
	if (w->assigned && !worker_same_assign(&w->st.assign, &a)) {
		rc = lm_fail(&d, LM_EBUSY,
			     "worker %s already holds layers [%d, %d); asked for [%d, %d)",
			     w->o->name, w->st.assign.begin, w->st.assign.end, a.begin, a.end);
	} else if (!w->assigned) {
		rc = worker_load(w, &a, &d);
	}
	struct wire_ready r = {.id = id};
	if (rc == 0) {
		r.fingerprint = w->st.eng.model.fingerprint;
		r.kv_bytes = w->st.eng.kv.bytes;
		r.weight_bytes = w->st.eng.model.weight_bytes;
		r.rss_bytes = stage_rss_bytes();
		r.digest = w->st.eng.model.digest;
	}
	pthread_mutex_unlock(&w->mu);
	if (rc != 0) {
		uint64_t held = 0;
		if (lm_log_limit_pass(&w->refusals, lm_log_key("assign", rc), &held))
			lm_error("assignment refused: %s", lm_diag_str(&d, rc));
		return worker_reply_error(w, id, WIRE_ASSIGN, rc, lm_diag_str(&d, rc));
	}
	wire_buf_reset(&w->cbuf);
	if ((rc = wire_encode_ready(&w->cbuf, &r)) != 0)
		return rc;
	return worker_reply(w, &w->cbuf, NULL, 0);
}

/* One reading of the worker for /status, STATUS and /metrics (health.h), without `mu`: a load
 * or a long batch holds it for seconds, and a readiness probe must not wait for that. Once the
 * phase is HEALTH_ASSIGNED (a release store after stage_init), the stage's assignment, model
 * and cache geometry never change until the process ends; its counters are atomics; the
 * slots in use are published by the data thread. */
static void worker_snapshot(void *arg, struct health_snapshot *s)
{
	struct worker *w = arg;
	s->name = w->o->name;
	s->pid = (int)getpid();
	s->uptime_s = (double)(lm_now_ns() - w->started_ns) / 1e9;
	s->rss_bytes = stage_rss_bytes();
	s->dropped = atomic_load(&w->dropped);
	s->ring_in = atomic_load(&w->ring_in);
	s->ring_out = atomic_load(&w->ring_out);
	int64_t busy = atomic_load(&w->busy_since_ms), send = atomic_load(&w->send_since_ms);
	s->ring_busy_ms = busy > 0 ? lm_now_ms() - busy : 0;
	s->ring_send_ms = send > 0 ? lm_now_ms() - send : 0;
	s->ring_queued = recvq_len(&w->rq);
	s->phase = (enum health_phase)atomic_load_explicit(&w->phase, memory_order_acquire);
	if (s->phase != HEALTH_ASSIGNED)
		return;
	const struct stage *st = &w->st;
	s->assign = st->assign;
	s->fingerprint = st->eng.model.fingerprint;
	s->digest = st->eng.model.digest;
	s->kv_base = st->eng.kv.base_layer;
	s->kv_num_layers = st->eng.kv.num_layers;
	s->kv_bytes = st->eng.kv.bytes;
	for (int32_t i = 0; i < st->eng.kv.num_layers && i < LM_MAX_LAYERS; i++) {
		const struct lm_kv_layer *l = &st->eng.kv.layers[i];
		s->kv_layer_bytes[i] =
			(uint64_t)l->ctx * (uint64_t)l->slots * (l->k_row_bytes + l->v_row_bytes);
	}
	s->weight_bytes = st->eng.model.weight_bytes;
	s->mapped_bytes = st->eng.model.mapped_bytes;
	s->active_sequences = atomic_load(&w->active);
	s->batches = atomic_load(&st->stats.batches);
	s->tokens = atomic_load(&st->stats.tokens);
	s->ring_errors = atomic_load(&st->stats.errors);
	s->releases = atomic_load(&st->stats.releases);
	s->copies = atomic_load(&st->stats.copies);
	s->grammar_draws = atomic_load(&st->stats.grammar_draws);
	s->grammar_fast = atomic_load(&st->stats.grammar_fast);
	s->grammar_masked = atomic_load(&st->stats.grammar_masked);
	s->backend = w->o->backend;
	s->mem_total = atomic_load(&st->stats.mem_total);
	s->mem_free = atomic_load(&st->stats.mem_free);
	s->mem_used = atomic_load(&st->stats.mem_used);
	s->mem_device = atomic_load(&st->stats.mem_device) != 0;
}

/* The redeploy verbs. The coordinator sends them while the ring is quiet (no batch in flight),
 * and `mu` puts each between two batches anyway. */

/* REPOINT: send the ring's messages to another successor from now on (the old one is being
 * replaced). The old dialer closes; NNG keeps redialling the new address until it listens. */
static int worker_on_repoint(struct worker *w, const void *body, size_t len, uint64_t id)
{
	struct wire_repoint r;
	lm_diag d = {{0}};
	int rc;
	pthread_mutex_lock(&w->mu);
	if (!w->assigned) {
		pthread_mutex_unlock(&w->mu);
		return worker_reply_error(w, id, WIRE_REPOINT, LM_EUNAVAILABLE,
					  "no assignment yet");
	}
	rc = wire_decode_repoint(body, len, &w->st.lim, &r, &d);
	/* On failure the link keeps sending where it did. */
	if (rc == 0 && (rc = worker_connect_next(w, r.next, &d)) == 0) {
		snprintf(w->st.assign.next, sizeof w->st.assign.next, "%s", r.next);
		lm_info("successor is now %s", r.next);
	}
	uint64_t fp = w->assigned ? w->st.eng.model.fingerprint : 0;
	pthread_mutex_unlock(&w->mu);
	if (rc != 0)
		return worker_reply_error(w, id, WIRE_REPOINT, rc, lm_diag_str(&d, rc));
	wire_buf_reset(&w->cbuf);
	if ((rc = wire_encode_simple(&w->cbuf, WIRE_REPOINT, id, fp)) != 0)
		return rc;
	return worker_reply(w, &w->cbuf, NULL, 0);
}

/* KV_EXPORT: one slot's KV rows, for its sequence to move to another process. The rows are
 * written straight into the reply's message, after its header: a slot's rows are megabytes
 * (the plan counts them once per layer, engine/scratch.h), and a copy beside the message
 * would hold them twice. */
static int worker_on_kv_export(struct worker *w, const void *body, size_t len, uint64_t id)
{
	struct wire_kv k;
	lm_diag d = {{0}};
	nng_msg *m = NULL;
	int rc;
	pthread_mutex_lock(&w->mu);
	if (!w->assigned) {
		pthread_mutex_unlock(&w->mu);
		return worker_reply_error(w, id, WIRE_KV_EXPORT, LM_EUNAVAILABLE,
					  "no assignment yet");
	}
	rc = wire_decode_kv(body, len, &w->st.lim, &k, &d);
	if (rc == 0) {
		uint64_t bytes = kv_cache_export_bytes(&w->st.eng.kv, k.slot);
		k = (struct wire_kv){.id = id,
				     .fingerprint = w->st.eng.model.fingerprint,
				     .slot = k.slot,
				     .len = w->st.eng.kv.len[k.slot],
				     .hi = w->st.eng.kv.hi[k.slot],
				     .payload_len = (size_t)bytes};
		wire_buf_reset(&w->cbuf);
		rc = wire_encode_kv(&w->cbuf, WIRE_KV_EXPORT, &k);
		if (rc == 0 && nng_msg_alloc(&m, w->cbuf.len + (size_t)bytes) != 0)
			rc = lm_fail(&d, LM_ENOMEM, "out of memory for %llu bytes of KV",
				     (unsigned long long)bytes);
		if (rc == 0) {
			uint8_t *out = nng_msg_body(m);
			memcpy(out, w->cbuf.data, w->cbuf.len);
			rc = kv_cache_export(&w->st.eng.kv, k.slot, out + w->cbuf.len, bytes, &d);
		}
	}
	pthread_mutex_unlock(&w->mu);
	if (rc != 0) {
		if (m != NULL)
			nng_msg_free(m);
		return worker_reply_error(w, id, WIRE_KV_EXPORT, rc, lm_diag_str(&d, rc));
	}
	if (nng_sendmsg(w->ctl, m, 0) != 0) {
		nng_msg_free(m);
		return LM_EIO;
	}
	return 0;
}

/* KV_IMPORT: rows exported by another process of the same slice, into one slot. */
static int worker_on_kv_import(struct worker *w, const void *body, size_t len, uint64_t id)
{
	struct wire_kv k;
	lm_diag d = {{0}};
	int rc;
	pthread_mutex_lock(&w->mu);
	if (!w->assigned) {
		pthread_mutex_unlock(&w->mu);
		return worker_reply_error(w, id, WIRE_KV_IMPORT, LM_EUNAVAILABLE,
					  "no assignment yet");
	}
	rc = wire_decode_kv(body, len, &w->st.lim, &k, &d);
	if (rc == 0)
		rc = kv_cache_import(&w->st.eng.kv, k.slot, k.len, k.hi, k.payload, k.payload_len,
				     &d);
#ifdef LM_TEST_CORRUPT_IMPORT
	/* A build that flips one bit of every slot it imports (test_redeploy.sh): the rollout
	 * reads the rows back and must refuse the move. */
	if (rc == 0 && k.payload_len > 0) {
		struct lm_kv_layer *l = &w->st.eng.kv.layers[0];
		((uint8_t *)l->k)[(size_t)k.slot * l->ctx * l->k_row_bytes] ^= 1;
	}
#endif
	uint64_t fp = w->st.eng.model.fingerprint;
	pthread_mutex_unlock(&w->mu);
	if (rc != 0)
		return worker_reply_error(w, id, WIRE_KV_IMPORT, rc, lm_diag_str(&d, rc));
	wire_buf_reset(&w->cbuf);
	if ((rc = wire_encode_simple(&w->cbuf, WIRE_KV_IMPORT, id, fp)) != 0)
		return rc;
	return worker_reply(w, &w->cbuf, NULL, 0);
}

/* DRAIN: answered once every message taken so far is done (`mu` is free between batches). */
static int worker_on_drain(struct worker *w, uint64_t id)
{
	pthread_mutex_lock(&w->mu);
	uint64_t fp = w->assigned ? w->st.eng.model.fingerprint : 0;
	pthread_mutex_unlock(&w->mu);
	wire_buf_reset(&w->cbuf);
	int rc = wire_encode_simple(&w->cbuf, WIRE_DRAIN, id, fp);
	return rc != 0 ? rc : worker_reply(w, &w->cbuf, NULL, 0);
}

/* TRACE: what the armed slot recorded, then arm the requested one (layermesh diff). */
static int worker_on_trace(struct worker *w, const void *body, size_t len, uint64_t id)
{
	struct wire_kv k;
	lm_diag d = {{0}};
	void *rows = NULL;
	size_t bytes = 0;
	int rc;
	pthread_mutex_lock(&w->mu);
	if (!w->assigned) {
		pthread_mutex_unlock(&w->mu);
		return worker_reply_error(w, id, WIRE_TRACE, LM_EUNAVAILABLE, "no assignment yet");
	}
	rc = wire_decode_kv(body, len, &w->st.lim, &k, &d);
	if (rc == 0)
		rc = stage_trace(&w->st, k.slot, &k.len, &rows, &bytes, &d);
	uint64_t fp = w->st.eng.model.fingerprint;
	pthread_mutex_unlock(&w->mu);
	if (rc != 0)
		return worker_reply_error(w, id, WIRE_TRACE, rc, lm_diag_str(&d, rc));
	k.id = id;
	k.fingerprint = fp;
	k.payload = NULL;
	k.payload_len = bytes;
	wire_buf_reset(&w->cbuf);
	rc = wire_encode_kv(&w->cbuf, WIRE_TRACE, &k);
	if (rc == 0)
		rc = worker_reply(w, &w->cbuf, rows, bytes);
	free(rows);
	return rc;
}

static int worker_on_control(struct worker *w, nng_msg *m)
{
	const void *body = nng_msg_body(m);
	size_t len = nng_msg_len(m);
	struct wire_head h = {0};
	lm_diag d = {{0}};
	int rc = wire_peek(body, len, &h, &d);
	if (rc != 0)
		return worker_reply_error(w, h.id, h.type, rc, lm_diag_str(&d, rc));
	switch (h.type) {
	case WIRE_HELLO: {
		struct wire_hello hello;
		worker_hello_fill(w, &hello, h.id);
		wire_buf_reset(&w->cbuf);
		if ((rc = wire_encode_hello(&w->cbuf, &hello, true)) != 0)
			return rc;
		return worker_reply(w, &w->cbuf, NULL, 0);
	}
	case WIRE_ASSIGN:
		return worker_on_assign(w, body, len, h.id);
	case WIRE_STATUS: {
		char *json = health_status_json(&w->health);
		if (json == NULL)
			return worker_reply_error(w, h.id, h.type, LM_ENOMEM, "out of memory");
		wire_buf_reset(&w->cbuf);
		rc = wire_encode_raw(&w->cbuf, WIRE_STATUS, h.id, 0, json, strlen(json));
		if (rc == 0)
			rc = worker_reply(w, &w->cbuf, NULL, 0);
		free(json);
		return rc;
	}
	case WIRE_TRACE:
		return worker_on_trace(w, body, len, h.id);
	case WIRE_REPOINT:
		return worker_on_repoint(w, body, len, h.id);
	case WIRE_KV_EXPORT:
		return worker_on_kv_export(w, body, len, h.id);
	case WIRE_KV_IMPORT:
		return worker_on_kv_import(w, body, len, h.id);
	case WIRE_DRAIN:
		return worker_on_drain(w, h.id);
	default:
		return worker_reply_error(w, h.id, h.type, LM_EUNSUPPORTED,
					  "this control message is not supported by this worker");
	}
}

/* ------------------------------------------------------------------ lifecycle */

bool worker_plain_beyond_loopback(const char *addr)
{
	if (strncmp(addr, "tcp://", 6) != 0)
		return false;
	const char *h = addr + 6;
	return strncmp(h, "127.", 4) != 0 && strncmp(h, "localhost:", 10) != 0 &&
	       strncmp(h, "[::1]:", 6) != 0;
}

static int worker_listen(const struct worker_opts *o, struct lm_listen_guard *g, nng_socket s,
			 const char *addr, uint16_t peer_proto, const char *what)
{
	lm_diag d = {{0}};
	int rc = lm_listen_guarded(g, s, addr, &o->tls, peer_proto, what, &d);
	if (rc != 0)
		lm_error("%s: %s", what, lm_diag_str(&d, rc));
	return rc;
}

int worker_run(const struct worker_opts *o)
{
	struct worker w = {.o = o, .started_ns = lm_now_ns(), .model_watch = -1};
	struct health_ops hops = {.arg = &w, .snapshot = worker_snapshot};
	struct sigaction sa = {.sa_handler = worker_on_signal};
	int status = 1;
	lm_diag d = {{0}};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (o->parent_pid > 0) {
		/* Die with the coordinator that spawned us; if it is already gone, stop now. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != o->parent_pid)
			return 1;
	}
	pthread_mutex_init(&w.mu, NULL);
	lm_log_limit_init(&w.refusals, WORKER_REFUSAL_LOG_MS);
	health_init(&w.health, &hops);
	if (nng_rep0_open(&w.ctl) != 0 || nng_pull0_open(&w.pull) != 0) {
		lm_error("cannot open sockets");
		goto out;
	}
	nng_socket_set_ms(w.ctl, NNG_OPT_RECVTIMEO, WORKER_POLL_MS);
	nng_socket_set_size(w.pull, NNG_OPT_RECVMAXSZ, WORKER_RECV_UNASSIGNED);
	nng_socket_set_size(w.ctl, NNG_OPT_RECVMAXSZ, WORKER_RECV_UNASSIGNED);
	if (worker_listen(o, &w.ctl_guard, w.ctl, o->control, LM_SP_REQ0, "control") != 0 ||
	    worker_listen(o, &w.pull_guard, w.pull, o->data, LM_SP_PUSH0, "data") != 0)
		goto out;
	if (recvq_init(&w.rq, w.pull) != 0) {
		lm_error("cannot start receiving on the data socket");
		goto out;
	}
	if (o->http != NULL && health_serve(&w.health, o->http, &d) != 0) {
		lm_error("%s", d.msg);
		goto out;
	}
	if (o->preassigned) {
		pthread_mutex_lock(&w.mu);
		int rc = worker_load(&w, &o->assign, &d);
		pthread_mutex_unlock(&w.mu);
		if (rc != 0) {
			lm_error("%s", lm_diag_str(&d, rc));
			goto out;
		}
	}
	if (pthread_create(&w.data_thread, NULL, worker_data_main, &w) != 0) {
		lm_error("cannot start the data thread");
		goto out;
	}
	w.data_started = true;
	lm_info("listening: control %s, data %s%s%s", o->control, o->data,
		o->http != NULL ? ", http " : "", o->http != NULL ? o->http : "");
	if (worker_plain_beyond_loopback(o->control) || worker_plain_beyond_loopback(o->data))
		lm_warn("no TLS (insecure): control %s and data %s are plain tcp:// beyond "
			"loopback, where anyone who can reach this worker can read the hidden "
			"states and forge ring messages (use tls+tcp:// and [tls])",
			o->control, o->data);

	while (!worker_stop && !worker_weights_changed(&w)) {
		nng_msg *m;
		int rv = nng_recvmsg(w.ctl, &m, 0);
		if (rv == NNG_ETIMEDOUT)
			continue;
		if (rv != 0)
			break;
		worker_on_control(&w, m);
		nng_msg_free(m);
	}
	status = atomic_load(&w.weights_changed) ? WORKER_EXIT_WEIGHTS_CHANGED : 0;
	lm_info("stopping");
out:
	worker_stop = 1;
	lm_listen_guard_stop(&w.ctl_guard);
	lm_listen_guard_stop(&w.pull_guard);
	nng_close(w.ctl);
	nng_close(w.pull);
	if (w.data_started)
		pthread_join(w.data_thread, NULL);
	recvq_fini(&w.rq);
	if (w.push_open)
		nng_close(w.push);
	lm_link_fini(&w.next); /* after the push socket: its pipe callbacks use the link */
	health_fini(&w.health);
	if (w.assigned)
		stage_fini(&w.st);
	wire_buf_fini(&w.cbuf);
	wire_buf_fini(&w.ebuf);
	lm_log_limit_fini(&w.refusals);
	if (w.model_watch >= 0)
		close(w.model_watch);
	pthread_mutex_destroy(&w.mu);
	return status;
}

/* rollout.c — rolling redeploys. See rollout.h for the steps.
 *
 * A batch runs through the steps of rollout_steps.h (ro_batch_run). The rollout reads the
 * mesh's facts and calls down: it starts, commits and retires processes (procs.h), reads and
 * writes worker rows (workers.h), quiesces and resumes the scheduler, and re-points the head of
 * the ring (its struct lm_link); each of those takes its own lock. */
#include "coordinator/supervise/rollout.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/dtype.h"
#include "common/base/log.h"
#include "common/config/mesh_config.h"
#include "common/model/hparams.h"
#include "common/plan/fence.h"
#include "common/tok/tokenizer.h"
#include "common/wire/transport.h"
#include "common/wire/wire.h"
#include "coordinator/supervise/ctl.h"
#include "common/wire/link.h"
#include "coordinator/plan/planner.h"
#include "coordinator/supervise/procs.h"
#include "coordinator/supervise/rollout_impl.h"
#include "coordinator/supervise/rollout_steps.h"
#include "coordinator/supervise/workers.h"
#include "coordinator/sched/scheduler.h"
#include "engine/scratch.h"

#define ROLLOUT_PROBE_TEXT "Once upon a time, there was a little"
#define ROLLOUT_QUIESCE_MS 10000
#define ROLLOUT_CONNECT_MS 5000 /* a live worker answers a HELLO on a new connection */
#define ROLLOUT_SMOKE_MS   30000

/* The recorded probe: the prompt's ids, every layer's hidden state for every token, the token
 * the mesh sampled. */
struct ro_probe {
	int32_t *ids;
	int32_t n;
	float *h; /* [n_layer][n][dim] */
	int32_t token;
};

/* A replacement being brought up. */
struct ro_cand {
	struct rollouts *rs;
	int32_t j;
	struct proc *child;
	struct mesh_addrs at;  /* where it listens: the worker's alternate addresses */
	struct mesh_addrs was; /* where the process it replaced listened, once switched */
	struct ctl_conn ctl;
	struct wire_ready ready;
};

const char *ro_name(const struct rollouts *rs, int32_t j)
{
	return facts_worker(rs->f, j)->name;
}

/* Where worker j's serving process listens now. */
void ro_addrs(struct rollouts *rs, int32_t j, struct mesh_addrs *out)
{
	struct worker_info w;
	workers_get(rs->ws, j, &w);
	*out = w.at;
}

/* ------------------------------------------------------------------ addresses */

/* The other address of a worker's pair: see rollout.h. */
int ro_alternate(const char *primary, const char *current, char *out, size_t cap, lm_diag *d)
{
	if (strcmp(current, primary) != 0) { /* on the alternate: back to the primary */
		snprintf(out, cap, "%s", primary);
		return 0;
	}
	if (strncmp(primary, "ipc://", 6) == 0) {
		if ((size_t)snprintf(out, cap, "%s.b", primary) >= cap)
			return lm_fail(d, LM_ERANGE, "%s is too long for an alternate", primary);
		return 0;
	}
	const char *colon = strrchr(primary, ':');
	char *end;
	long port = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
	if (colon == NULL || *end != '\0' || port < 1 || port + 1000 > 65535 ||
	    strncmp(primary, "inproc://", 9) == 0)
		return lm_fail(d, LM_EUNSUPPORTED, "%s has no alternate address (port + 1000)",
			       primary);
	snprintf(out, cap, "%.*s:%ld", (int)(colon - primary), primary, port + 1000);
	return 0;
}

/* ------------------------------------------------------------------ status */

static void ro_set_step(struct rollout *r, int32_t j, enum ro_worker_state st, const char *step)
{
	pthread_mutex_lock(&r->rs->mu);
	r->w[j].state = st;
	snprintf(r->w[j].step, sizeof r->w[j].step, "%s", step);
	pthread_mutex_unlock(&r->rs->mu);
	lm_info("redeploy: %s: %s", ro_name(r->rs, j), step);
}

static void ro_fail(struct rollout *r, int32_t j, const char *step, const char *msg)
{
	pthread_mutex_lock(&r->rs->mu);
	snprintf(r->state, sizeof r->state, "failed");
	snprintf(r->failed_step, sizeof r->failed_step, "%s", step);
	snprintf(r->error, sizeof r->error, "%s", msg);
	r->failed_worker = j;
	if (j >= 0) {
		r->w[j].state = RW_FAILED;
		snprintf(r->w[j].error, sizeof r->w[j].error, "%s", msg);
	}
	pthread_mutex_unlock(&r->rs->mu);
	lm_error("redeploy failed at %s of %s: %s (the old build keeps serving)", step,
		 j >= 0 ? ro_name(r->rs, j) : "the mesh", msg);
}

/* ------------------------------------------------------------------ candidates */

static bool ro_cand_alive(void *arg)
{
	struct ro_cand *c = arg;
	char why[8];
	return !procs_ended(c->rs->pr, c->j, c->child, 0, why, sizeof why);
}

/* Stops a candidate that will not serve (its exit is expected). */
static void ro_cand_drop(struct rollouts *rs, struct ro_cand *c)
{
	ctl_close(&c->ctl);
	procs_retire(rs->pr, c->child, SIGKILL);
	c->child = NULL;
}

/* prepare: the new build on the alternate addresses, handshaken, assigned, ready. */
static int ro_prepare(struct rollout *r, struct ro_cand *c, lm_diag *d)
{
	struct rollouts *rs = r->rs;
	const struct mesh_worker *wc = facts_worker(rs->f, c->j);
	uint64_t fingerprint = rs->f->fingerprint;
	struct mesh_addrs cur;
	struct wire_assign a;
	struct wire_hello hello;
	int rc;

	ro_addrs(rs, c->j, &cur);
	rc = ro_alternate(wc->data, cur.data, c->at.data, sizeof c->at.data, d);
	if (rc == 0)
		rc = ro_alternate(wc->control, cur.control, c->at.control, sizeof c->at.control, d);
	if (rc == 0)
		rc = ro_alternate(wc->http, cur.http, c->at.http, sizeof c->at.http, d);
	if (rc != 0)
		return rc;
	struct mesh_addrs next;
	if (c->j + 1 < rs->f->n_workers)
		ro_addrs(rs, c->j + 1, &next);
	planner_assignment(rs->f->cfg, rs->f->plan, c->j, rs->f->max_seq,
			   rs->f->cfg->slots + MESH_PROBE_SLOTS,
			   c->j + 1 < rs->f->n_workers ? next.data : rs->f->cfg->data_in, &a);
	snprintf(a.next, sizeof a.next, "%s",
		 r->sink); /* nothing enters the ring before the switch */
	if ((rc = procs_spawn(rs->pr, c->j, r->bin, &c->at, false, &c->child, d)) != 0)
		return rc;
	c->ctl.tls = rs->f->tls;
	if ((rc = ctl_open(&c->ctl, wc->name, c->at.control, d)) != 0)
		return rc;
	int timeout = rs->f->handshake_ms;
	rc = ctl_hello_wait(&c->ctl, fingerprint, &hello, timeout, ro_cand_alive, c, d);
	if (rc == 0)
		rc = ctl_assign(&c->ctl, &a, fingerprint, &c->ready, timeout, ro_cand_alive, c, d);
	/* The new build must load the very slice the mesh serves: a file replaced under the mesh
	 * is refused here, before anything is moved to it. */
	if (rc == 0)
		rc = workers_check_digest(rs->ws, c->j, c->ready.digest, d);
	char why[512];
	if (rc == LM_EUNAVAILABLE && procs_ended(rs->pr, c->j, c->child, 0, why, sizeof why) &&
	    why[0])
		lm_fail(d, rc, "the new build of %s %s before it was ready", wc->name, why);
	return rc;
}

/* ------------------------------------------------------------------ the probe */

struct ro_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int code;
	int32_t token;
	char msg[256];
};

static void ro_probe_token(void *arg, int32_t token, float lp, const int32_t *ti, const float *tl,
			   int32_t n)
{
	struct ro_wait *w = arg;
	(void)lp;
	(void)ti;
	(void)tl;
	(void)n;
	pthread_mutex_lock(&w->mu);
	w->token = token;
	pthread_mutex_unlock(&w->mu);
}

static void ro_probe_done(void *arg, enum sched_finish why, int code, const char *msg)
{
	struct ro_wait *w = arg;
	pthread_mutex_lock(&w->mu);
	w->done = true;
	w->code = why == SCHED_FINISH_ERROR    ? (code != 0 ? code : LM_EPROTO)
		  : why == SCHED_FINISH_CANCEL ? LM_ECANCELED
					       : 0;
	snprintf(w->msg, sizeof w->msg, "%s",
		 msg != NULL                  ? msg
		 : why == SCHED_FINISH_CANCEL ? "the coordinator is stopping"
					      : "");
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static struct wire_limits ro_limits(const struct rollouts *rs)
{
	const struct mesh_config *cfg = rs->f->cfg;
	const struct lm_hparams *hp = rs->f->hp;
	return (struct wire_limits){.fingerprint = rs->f->fingerprint,
				    .slots = cfg->slots + MESH_PROBE_SLOTS,
				    .max_seq = rs->f->max_seq,
				    .dim = hp->n_embd,
				    .n_vocab = hp->n_vocab,
				    .max_batch = cfg->max_batch,
				    .max_seqs = cfg->slots + MESH_PROBE_SLOTS,
				    .max_logprobs = WIRE_MAX_LOGPROBS};
}

/* The probe's prompt through the live mesh in the probe slot, one token sampled (pr->token).
 * The scheduler ends the probe one way or another (its batch timeout included); a coordinator
 * stopping meanwhile, or ROLLOUT_SMOKE_MS passing, cancels it. */
static int ro_probe_run(struct rollouts *rs, struct ro_probe *pr, lm_diag *d)
{
	struct sched *sched = workers_sched(rs->ws, false);
	struct ro_wait w = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct sched_req q = {.prompt = pr->ids,
			      .n_prompt = pr->n,
			      .max_tokens = 1,
			      .sampling = {.temperature = 0, .top_p = 1},
			      .probe = true,
			      .on_token = ro_probe_token,
			      .on_done = ro_probe_done,
			      .arg = &w};
	uint64_t id;
	lm_cond_init(&w.cv); /* before the submit: the scheduler may answer at once */
	int rc = sched_submit(sched, &q, &id, d);
	if (rc != 0) {
		pthread_cond_destroy(&w.cv);
		return rc;
	}
	bool cancelled = false, late = false;
	int64_t deadline = lm_now_ms() + ROLLOUT_SMOKE_MS;
	pthread_mutex_lock(&w.mu);
	while (!w.done) {
		lm_cond_wait_ms(&w.cv, &w.mu, 100);
		late = late || lm_now_ms() > deadline;
		if (!w.done && !cancelled && (procs_stopping(rs->pr) || late)) {
			pthread_mutex_unlock(&w.mu);
			sched_cancel(sched, id);
			cancelled = true;
			pthread_mutex_lock(&w.mu);
		}
	}
	pthread_mutex_unlock(&w.mu);
	pthread_cond_destroy(&w.cv);
	if (late)
		return lm_fail(d, LM_ETIMEOUT, "the probe did not come back within %d ms",
			       ROLLOUT_SMOKE_MS);
	if (w.code != 0)
		return lm_fail(d, w.code, "the probe failed: %s", w.msg);
	pr->token = w.token;
	return 0;
}

/* probe: the fixed prompt through the live mesh, every worker tracing the probe slot. */
static int ro_probe(struct rollout *r, struct ro_probe *pr, lm_diag *d)
{
	struct rollouts *rs = r->rs;
	const struct mesh_config *cfg = rs->f->cfg;
	const struct lm_hparams *hp = rs->f->hp;
	const tok_vocab *vocab = rs->f->vocab;
	uint64_t fingerprint = rs->f->fingerprint;
	struct wire_limits lim = ro_limits(rs);
	int32_t slot = cfg->slots, W = rs->f->n_workers, dim = hp->n_embd;
	struct ctl_conn *live = calloc((size_t)W, sizeof *live);
	size_t n = 0;
	int rc = 0;

	if (live == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	if (pr->ids == NULL) {
		rc = tok_encode_alloc(vocab, ROLLOUT_PROBE_TEXT, strlen(ROLLOUT_PROBE_TEXT),
				      tok_add_bos(vocab), &pr->ids, &n, d);
		pr->n = (int32_t)n;
		if (rc == 0 && (pr->n < 1 || pr->n > cfg->max_batch || pr->n >= rs->f->max_seq ||
				pr->n > LM_PROBE_ROWS))
			rc = lm_fail(d, LM_ERANGE, "the probe prompt has %d tokens", pr->n);
		if (rc == 0 && (pr->h = malloc((size_t)hp->n_layer * (size_t)pr->n * (size_t)dim *
					       sizeof(float))) == NULL)
			rc = lm_fail(d, LM_ENOMEM, "out of memory");
	}
	for (int32_t j = 0; rc == 0 && j < W; j++) {
		struct mesh_addrs at;
		ro_addrs(rs, j, &at);
		int32_t rows;
		void *data = NULL;
		size_t bytes;
		live[j].tls = rs->f->tls;
		rc = ctl_connect(&live[j], ro_name(rs, j), at.control, fingerprint,
				 ROLLOUT_CONNECT_MS, d);
		if (rc == 0) /* arm; what it recorded before does not matter */
			rc = ctl_trace(&live[j], fingerprint, &lim, slot, &rows, &data, &bytes, d);
		free(data);
	}
	if (rc == 0)
		rc = ro_probe_run(rs, pr, d);
	for (int32_t j = 0; rc == 0 && j < W; j++) {
		const struct fence_stage *st = &rs->f->plan->stages[j];
		int32_t rows = 0;
		void *data = NULL;
		size_t bytes = 0;
		size_t per = (size_t)pr->n * (size_t)dim;
		rc = ctl_trace(&live[j], fingerprint, &lim, slot, &rows, &data, &bytes, d);
		if (rc == 0 &&
		    (rows != pr->n || bytes != (size_t)(st->end - st->start) * per * sizeof(float)))
			rc = lm_fail(d, LM_EPROTO, "worker %s recorded %d rows of the probe's %d",
				     ro_name(rs, j), rows, pr->n);
		if (rc == 0)
			memcpy(pr->h + (size_t)st->start * per, data, bytes);
		free(data);
	}
	for (int32_t j = 0; j < W; j++)
		ctl_close(&live[j]);
	free(live);
	return rc;
}

/* ------------------------------------------------------------------ the smoke test */

/* The stage's input as the live mesh recorded it, encoded as a FORWARD into b: the ids for the
 * first stage, the previous stage's last layer otherwise, in the mesh's wire type. */
static int ro_smoke_input(const struct rollouts *rs, const struct ro_cand *c,
			  const struct ro_probe *pr, struct wire_buf *b, lm_diag *d)
{
	const struct fence_stage *st = &rs->f->plan->stages[c->j];
	int32_t dim = rs->f->hp->n_embd, n = pr->n;
	size_t per = (size_t)n * (size_t)dim;
	uint8_t *payload = NULL;
	struct wire_seq seq = {.seq_id = 1,
			       .slot = rs->f->cfg->slots,
			       .pos = 0,
			       .n_tokens = n,
			       .sample = true,
			       .sampling = {.temperature = 0, .top_p = 1}};
	struct wire_forward f = {.batch_id = 1,
				 .fingerprint = rs->f->fingerprint,
				 .n_seqs = 1,
				 .seqs = &seq,
				 .n_tokens = n};
	if (c->j == 0) {
		f.dtype = WIRE_DT_I32;
		f.dim = 1;
		f.payload_len = (size_t)n * sizeof(int32_t);
		payload = malloc(f.payload_len);
		if (payload != NULL)
			memcpy(payload, pr->ids, f.payload_len);
	} else {
		const float *in = pr->h + (size_t)(st->start - 1) * per;
		f.dtype = wire_dtype_of(rs->f->cfg->wire_dtype);
		f.dim = dim;
		f.payload_len = per * wire_dtype_size(f.dtype);
		payload = malloc(f.payload_len);
		for (size_t i = 0; payload != NULL && i < per; i++) {
			if (f.dtype == WIRE_DT_F32) {
				memcpy(payload + 4 * i, &in[i], 4);
			} else {
				uint16_t h = f.dtype == WIRE_DT_F16 ? lm_f32_to_f16(in[i])
								    : lm_f32_to_bf16(in[i]);
				memcpy(payload + 2 * i, &h, 2);
			}
		}
	}
	if (payload == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	f.payload = payload;
	int rc = wire_encode_forward(b, &f);
	free(payload);
	return rc;
}

/* What the candidate sent to the sink: the last stage's token, which must be the one the mesh
 * sampled; any other stage's hidden rows, which must not be an ERROR. */
static int ro_smoke_answer(const struct rollouts *rs, const struct ro_cand *c,
			   const struct ro_probe *pr, nng_msg *msg, lm_diag *d)
{
	struct wire_limits lim = ro_limits(rs);
	int rc;
	if (c->j == rs->f->n_workers - 1) {
		struct wire_scratch s;
		struct wire_tokens t;
		wire_scratch_init(&s, lim.max_seqs);
		rc = wire_decode_tokens(nng_msg_body(msg), nng_msg_len(msg), &lim, &s, &t, d);
		if (rc == 0 && (t.n != 1 || t.toks[0].token != pr->token))
			rc = lm_fail(d, LM_ERANGE,
				     "the new build sampled token %d where the old one sampled %d",
				     t.n == 1 ? t.toks[0].token : -1, pr->token);
		wire_scratch_fini(&s);
		return rc;
	}
	struct wire_head h;
	rc = wire_peek(nng_msg_body(msg), nng_msg_len(msg), &h, d);
	if (rc == 0 && h.type == WIRE_ERROR) {
		struct wire_error e;
		wire_decode_error(nng_msg_body(msg), nng_msg_len(msg), &e, d);
		rc = lm_fail(d, LM_EPROTO, "the new build refused the smoke input: %s", e.msg);
	}
	return rc;
}

/* Every layer of the stage, as the candidate traced it, against the old build's record. */
static int ro_smoke_compare(const struct rollout *r, struct ro_cand *c, const struct ro_probe *pr,
			    lm_diag *d)
{
	const struct rollouts *rs = r->rs;
	const struct fence_stage *st = &rs->f->plan->stages[c->j];
	struct wire_limits lim = ro_limits(rs);
	size_t per = (size_t)pr->n * (size_t)rs->f->hp->n_embd, bytes = 0;
	void *data = NULL;
	int32_t rows = 0;
	int rc = ctl_trace(&c->ctl, rs->f->fingerprint, &lim, rs->f->cfg->slots, &rows, &data,
			   &bytes, d);
	if (rc != 0)
		return rc;
	size_t want = (size_t)(st->end - st->start) * per * sizeof(float);
	if (rows != pr->n || bytes != want) {
		free(data);
		return lm_fail(d, LM_EPROTO, "the new build recorded %d rows of %d", rows, pr->n);
	}
	const float *got = data, *exp = pr->h + (size_t)st->start * per;
	for (int32_t l = 0; l < st->end - st->start; l++) {
		double worst = 0;
		for (size_t i = 0; i < per; i++) {
			double e = fabs((double)got[l * per + i] - (double)exp[l * per + i]);
			worst = isnan(e) ? INFINITY : fmax(worst, e);
		}
		if (!(worst <= r->tolerance)) {
			free(data);
			return lm_fail(
				d, LM_ERANGE,
				"layer %d: the new build's hidden state differs from the old "
				"build's by %.3g (tolerance %.3g)",
				st->start + l, worst, r->tolerance);
		}
	}
	free(data);
	return 0;
}

/* smoke: the recorded input into the candidate, its output and its layers against the
 * record. */
static int ro_smoke(struct rollout *r, struct ro_cand *c, const struct ro_probe *pr,
		    nng_socket sink, lm_diag *d)
{
	struct rollouts *rs = r->rs;
	struct wire_limits lim = ro_limits(rs);
	nng_socket push;
	nng_msg *msg = NULL;
	struct wire_buf b = {0};
	void *data = NULL;
	size_t bytes = 0;
	int32_t rows = 0;
	int rc, rv;

	/* Arm its trace; what it recorded before does not matter. */
	rc = ctl_trace(&c->ctl, rs->f->fingerprint, &lim, rs->f->cfg->slots, &rows, &data, &bytes,
		       d);
	free(data);
	if (rc != 0)
		return rc;
	if ((rv = nng_push0_open(&push)) != 0)
		return lm_fail(d, LM_EIO, "push socket: %s", nng_strerror(rv));
	nng_socket_set_ms(push, NNG_OPT_SENDTIMEO, 5000);
	nng_socket_set_ms(push, NNG_OPT_RECONNMINT, 10);
	if ((rc = lm_dial(push, c->at.data, rs->f->tls, NULL, d)) != 0) {
		lm_close_bounded(push, LM_CLOSE_MS);
		return rc;
	}
	rc = ro_smoke_input(rs, c, pr, &b, d);
	if (rc == 0 && (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, b.data, b.len) != 0 ||
			nng_sendmsg(push, msg, 0) != 0)) {
		if (msg != NULL)
			nng_msg_free(msg);
		rc = lm_fail(d, LM_EIO, "cannot send the recorded input to %s", c->at.data);
	}
	msg = NULL;
	wire_buf_fini(&b);
	/* Its output arrives at the sink: hidden rows, or the last stage's token. The push stays
	 * open until then: a send is done when a pipe has taken the message, not when it is on
	 * the wire, and closing the socket aborts a write still in progress (over tls+tcp, on a
	 * loaded machine, the candidate then never sees the input). */
	if (rc == 0 && (rv = nng_recvmsg(sink, &msg, 0)) != 0)
		rc = lm_fail(d, LM_ETIMEOUT, "the new build did not answer the smoke input: %s",
			     nng_strerror(rv));
	/* Bounded: the candidate may be dying with the message half taken (see transport.h). */
	if (lm_close_bounded(push, LM_CLOSE_MS) != 0)
		lm_warn("redeploy: closing the smoke socket to %s took over %d ms", c->at.data,
			LM_CLOSE_MS);
	if (rc == 0)
		rc = ro_smoke_answer(rs, c, pr, msg, d);
	if (msg != NULL)
		nng_msg_free(msg);
	if (rc != 0)
		return rc;
	return ro_smoke_compare(r, c, pr, d);
}

/* ------------------------------------------------------------------ the switch */

struct ro_undo {
	struct ctl_conn *conn; /* REPOINT it back to `addr`; NULL: the coordinator's push */
	char addr[256];
};

/* The address worker j's successor listens at, given the candidates of this batch. */
static void ro_successor(struct rollouts *rs, const struct ro_cand *cs, int32_t nc, int32_t j,
			 char *out, size_t cap)
{
	for (int32_t k = 0; k < nc; k++)
		if (cs[k].j == j + 1) {
			snprintf(out, cap, "%s", cs[k].at.data);
			return;
		}
	if (j + 1 < rs->f->n_workers) {
		struct mesh_addrs next;
		ro_addrs(rs, j + 1, &next);
		snprintf(out, cap, "%s", next.data);
	} else {
		snprintf(out, cap, "%s", rs->f->cfg->data_in);
	}
}

static bool ro_in_batch(const struct ro_cand *cs, int32_t nc, int32_t j)
{
	for (int32_t k = 0; k < nc; k++)
		if (cs[k].j == j)
			return true;
	return false;
}

/* Takes a moved slot only if the new process holds what the old one gave: its length, its
 * high-water mark and its rows, bit for bit, in the cache's own types. */
static int ro_check_moved(const char *name, int32_t slot, const struct ctl_kv_rows *sent,
			  const struct ctl_kv_rows *back, lm_diag *d)
{
	if (back->len != sent->len || back->hi != sent->hi || back->bytes != sent->bytes)
		return lm_fail(d, LM_EPROTO,
			       "%s: slot %d: the new process holds %d positions written up to %d "
			       "(%zu bytes) after importing %d written up to %d (%zu bytes)",
			       name, slot, back->len, back->hi, back->bytes, sent->len, sent->hi,
			       sent->bytes);
	const uint8_t *a = sent->data, *b = back->data;
	for (size_t i = 0; i < sent->bytes; i++)
		if (a[i] != b[i])
			return lm_fail(d, LM_EPROTO,
				       "%s: slot %d: the new process holds other KV rows than the "
				       "old one exported: byte %zu of %zu differs",
				       name, slot, i, sent->bytes);
	return 0;
}

/* What a switch moved. */
struct ro_moved {
	int32_t seqs;
	uint64_t bytes;
};

/* Every live sequence's rows move from the old processes to the new ones (the ring is
 * quiesced). old[k] is the connection to candidate k's serving process. Each slot is read back
 * from the new process and compared with what was sent (ro_check_moved): a move that would let
 * a sequence go on from other state than it had fails the switch, and the old build serves on.
 * The read-back doubles the bytes moved in the pause; they are a few MiB per sequence on the
 * mission's slices, against a pause that is bounded by a step. */
static int ro_move_kv(struct rollouts *rs, struct ro_cand *cs, int32_t nc, struct ctl_conn *old,
		      const struct sched_slot *live, int32_t n_live, struct ro_moved *moved,
		      lm_diag *d)
{
	uint64_t fingerprint = rs->f->fingerprint;
	struct wire_limits lim = ro_limits(rs);
	int rc = 0;
	for (int32_t k = 0; rc == 0 && k < nc; k++) {
		struct mesh_addrs at;
		ro_addrs(rs, cs[k].j, &at);
		old[k].tls = rs->f->tls;
		rc = ctl_connect(&old[k], ro_name(rs, cs[k].j), at.control, fingerprint,
				 ROLLOUT_CONNECT_MS, d);
		for (int32_t i = 0; rc == 0 && i < n_live; i++) {
			if (live[i].len <= 0)
				continue;
			struct ctl_kv_rows sent = {0}, back = {0};
			rc = ctl_kv_export(&old[k], fingerprint, &lim, live[i].slot, &sent, d);
			if (rc == 0)
				rc = ctl_kv_import(&cs[k].ctl, fingerprint, live[i].slot, &sent, d);
			if (rc == 0)
				rc = ctl_kv_export(&cs[k].ctl, fingerprint, &lim, live[i].slot,
						   &back, d);
			if (rc == 0)
				rc = ro_check_moved(ro_name(rs, cs[k].j), live[i].slot, &sent,
						    &back, d);
			if (rc == 0) {
				moved->seqs++;
				moved->bytes += sent.bytes;
			}
			free(sent.data);
			free(back.data);
		}
	}
	return rc;
}

/* The predecessors of the batch (those outside it) send to the candidates: the worker before
 * by REPOINT over pred[k], the coordinator by re-pointing the head of the ring. Each change is
 * recorded in undo (*n_undo of them) for ro_unpoint. */
static int ro_repoint(struct rollouts *rs, struct ro_cand *cs, int32_t nc, struct ctl_conn *pred,
		      struct ro_undo *undo, int32_t *n_undo, lm_diag *d)
{
	uint64_t fingerprint = rs->f->fingerprint;
	int rc = 0;
	for (int32_t k = 0; k < nc; k++) {
		int32_t j = cs[k].j;
		if (ro_in_batch(cs, nc, j - 1))
			continue;
		struct ro_undo *u = &undo[*n_undo];
		struct mesh_addrs self, before;
		ro_addrs(rs, j, &self);
		snprintf(u->addr, sizeof u->addr, "%s", self.data);
		if (j == 0) {
			if ((rc = lm_link_dial(rs->head, cs[k].at.data, d)) != 0)
				break;
			u->conn = NULL;
		} else {
			ro_addrs(rs, j - 1, &before);
			pred[k].tls = rs->f->tls;
			rc = ctl_connect(&pred[k], ro_name(rs, j - 1), before.control, fingerprint,
					 ROLLOUT_CONNECT_MS, d);
			if (rc == 0)
				rc = ctl_repoint(&pred[k], fingerprint, cs[k].at.data, d);
			if (rc != 0)
				break;
			u->conn = &pred[k];
		}
		(*n_undo)++;
	}
	return rc;
}

/* Puts the predecessors back, last change first; the candidates go away with their sockets. */
static void ro_unpoint(struct rollouts *rs, const struct ro_undo *undo, int32_t n_undo)
{
	for (int32_t i = n_undo - 1; i >= 0; i--) {
		lm_diag ignore = {{0}};
		if (undo[i].conn != NULL)
			ctl_repoint(undo[i].conn, rs->f->fingerprint, undo[i].addr, &ignore);
		else
			lm_link_dial(rs->head, undo[i].addr, &ignore);
	}
}

/* Makes candidate c worker c->j's serving process, at its addresses, running the new build.
 * Returns the process it replaces (the caller retires it), or NULL. */
static struct proc *ro_commit(struct rollout *r, struct ro_cand *c)
{
	struct rollouts *rs = r->rs;
	ro_addrs(rs, c->j, &c->was);
	struct proc *was = procs_commit(rs->pr, c->j, c->child);
	workers_update(rs->ws, c->j,
		       &(struct worker_update){.ready = &c->ready, .at = &c->at, .bin = r->bin});
	return was;
}

/* ------------------------------------------------------------------ one batch */

/* A batch of candidates on their way through the steps (rollout_steps.h), and what the steps
 * changed, for a rollback. */
struct ro_batch {
	struct ro_cand cs[64];
	int32_t nc;
	bool canary;
	int32_t failed;          /* the worker whose step failed, or -1: the batch's first */
	struct sched *sched;     /* borrowed from the worker table */
	struct sched_slot *live; /* [slots]: the live sequences at the pause */
	int32_t n_live;
	struct ctl_conn *old;  /* [nc]: to each candidate's serving process (move) */
	struct ctl_conn *pred; /* [nc]: to its predecessor (switch) */
	struct ro_undo *undo;  /* [nc + 1]: the predecessors re-pointed so far */
	int32_t n_undo;
	struct proc *retired[64]; /* the processes the candidates replaced */
	int32_t n_retired;
	int64_t t0;   /* when the pause began */
	double pause; /* how long the ring was paused (ms) */
};

static void ro_batch_steps(struct rollout *r, struct ro_batch *b, const char *step)
{
	for (int32_t k = 0; k < b->nc; k++)
		ro_set_step(r, b->cs[k].j, RW_WORKING, step);
}

static int ro_step_prepare(struct rollout *r, struct ro_batch *b, lm_diag *d)
{
	int rc = 0;
	for (int32_t k = 0; rc == 0 && k < b->nc; k++) {
		ro_set_step(r, b->cs[k].j, RW_WORKING, b->canary ? "canary: prepare" : "prepare");
		if ((rc = ro_prepare(r, &b->cs[k], d)) != 0)
			b->failed = b->cs[k].j;
	}
	return rc;
}

static int ro_step_smoke(struct rollout *r, struct ro_batch *b, const struct ro_probe *pr,
			 nng_socket sink, lm_diag *d)
{
	int rc = 0;
	for (int32_t k = 0; rc == 0 && k < b->nc; k++) {
		ro_set_step(r, b->cs[k].j, RW_WORKING, "smoke");
		if ((rc = ro_smoke(r, &b->cs[k], pr, sink, d)) != 0)
			b->failed = b->cs[k].j;
	}
	return rc;
}

/* pause: the ring quiesced at a step boundary (the pause is measured from here). */
static int ro_step_pause(struct rollout *r, struct ro_batch *b, lm_diag *d)
{
	int32_t cap = r->rs->f->cfg->slots + MESH_PROBE_SLOTS;
	ro_batch_steps(r, b, "switch");
	b->t0 = lm_now_ms();
	return sched_quiesce(b->sched, ROLLOUT_QUIESCE_MS, b->live, cap, &b->n_live, d);
}

/* switch: the new processes send where the old ones did (or to each other within the batch),
 * their predecessors send to them; then they are the workers, and the ring resumes. */
static int ro_step_switch(struct rollout *r, struct ro_batch *b, lm_diag *d)
{
	struct rollouts *rs = r->rs;
	int rc = 0;
	for (int32_t k = 0; rc == 0 && k < b->nc; k++) {
		char next[256];
		ro_successor(rs, b->cs, b->nc, b->cs[k].j, next, sizeof next);
		rc = ctl_repoint(&b->cs[k].ctl, rs->f->fingerprint, next, d);
	}
	if (rc == 0)
		rc = ro_repoint(rs, b->cs, b->nc, b->pred, b->undo, &b->n_undo, d);
	if (rc != 0)
		return rc;
	for (int32_t k = 0; k < b->nc; k++) {
		struct proc *was = ro_commit(r, &b->cs[k]);
		if (was != NULL && b->n_retired < 64)
			b->retired[b->n_retired++] = was;
		b->cs[k].child = NULL;
	}
	sched_resume(b->sched, false);
	b->pause = (double)(lm_now_ms() - b->t0);
	return 0;
}

/* retire: the old processes stop; the batch's workers are done. */
static void ro_step_retire(struct rollout *r, struct ro_batch *b)
{
	for (int32_t i = 0; i < b->n_retired; i++)
		procs_retire(r->rs->pr, b->retired[i], SIGTERM);
	pthread_mutex_lock(&r->rs->mu);
	for (int32_t k = 0; k < b->nc; k++) {
		struct ro_worker *w = &r->w[b->cs[k].j];
		w->state = RW_DONE;
		w->pause_ms = b->pause;
		snprintf(w->step, sizeof w->step, "done");
		snprintf(w->from, sizeof w->from, "%s", b->cs[k].was.data);
		snprintf(w->to, sizeof w->to, "%s", b->cs[k].at.data);
	}
	if (b->pause > r->max_pause_ms)
		r->max_pause_ms = b->pause;
	pthread_mutex_unlock(&r->rs->mu);
	for (int32_t k = 0; k < b->nc; k++) {
		ctl_close(&b->cs[k].ctl);
		lm_info("redeploy: %s now runs %s at %s (paused %.1f ms)",
			ro_name(r->rs, b->cs[k].j), r->bin, b->cs[k].at.data, b->pause);
	}
}

/* Before a step: a worker of the mesh away (a keeper's fault) or the mesh stopping ends the
 * batch. */
static enum ro_outcome ro_check_mesh(struct rollout *r, lm_diag *d)
{
	struct rollouts *rs = r->rs;
	if (procs_stopping(rs->pr)) {
		lm_fail(d, LM_ECANCELED, "the coordinator is stopping");
		return RO_STOPPING;
	}
	if (workers_sched(rs->ws, true) != NULL)
		return RO_OK;
	for (int32_t j = 0; j < rs->f->n_workers; j++) {
		struct worker_info w;
		workers_get(rs->ws, j, &w);
		if (w.state != MESH_WORKER_READY) {
			lm_fail(d, LM_EUNAVAILABLE, "worker %s went away during the redeploy (%s)",
				ro_name(rs, j), w.why[0] ? w.why : "not ready");
			return RO_FAULT;
		}
	}
	return RO_OK;
}

/* Runs step s of batch b. */
static enum ro_outcome ro_step(struct rollout *r, struct ro_batch *b, enum ro_step s,
			       struct ro_probe *pr, nng_socket sink, lm_diag *d)
{
	enum ro_outcome o = s == RO_PREPARE || s == RO_RETIRE ? RO_OK : ro_check_mesh(r, d);
	if (o != RO_OK)
		return o;
	int rc = 0;
	switch (s) {
	case RO_PREPARE:
		rc = ro_step_prepare(r, b, d);
		break;
	case RO_PROBE:
		ro_set_step(r, b->cs[0].j, RW_WORKING, b->canary ? "canary: probe" : "probe");
		rc = ro_probe(r, pr, d);
		break;
	case RO_SMOKE:
		rc = ro_step_smoke(r, b, pr, sink, d);
		break;
	case RO_PAUSE:
		rc = ro_step_pause(r, b, d);
		break;
	case RO_MOVE: {
		struct ro_moved moved = {0};
		rc = ro_move_kv(r->rs, b->cs, b->nc, b->old, b->live, b->n_live, &moved, d);
		pthread_mutex_lock(&r->rs->mu);
		r->moved_seqs += moved.seqs;
		r->moved_bytes += moved.bytes;
		pthread_mutex_unlock(&r->rs->mu);
		break;
	}
	case RO_SWITCH:
		rc = ro_step_switch(r, b, d);
		break;
	case RO_RETIRE:
		ro_step_retire(r, b);
		break;
	case RO_DONE:
	case RO_FAILED:
		break;
	}
	return rc == 0 ? RO_OK : RO_ERROR;
}

/* Undoes what batch b changed (rollout_next says what), and marks the rollout failed at
 * step s. */
static void ro_rollback(struct rollout *r, struct ro_batch *b, enum ro_step s, unsigned undo,
			const char *why)
{
	if (undo & RO_UNDO_UNPOINT)
		ro_unpoint(r->rs, b->undo, b->n_undo);
	if (undo & RO_UNDO_RESUME)
		sched_resume(b->sched, false);
	if (undo & RO_UNDO_DROP)
		for (int32_t k = 0; k < b->nc; k++)
			ro_cand_drop(r->rs, &b->cs[k]);
	ro_fail(r, b->failed >= 0 ? b->failed : b->cs[0].j, rollout_step_name(s), why);
}

/* The batch of nc workers from order[at] through every step; false when it failed (then
 * rolled back). */
static bool ro_batch_run(struct rollout *r, int32_t at, int32_t nc, struct ro_probe *pr,
			 nng_socket sink)
{
	struct rollouts *rs = r->rs;
	int32_t cap = rs->f->cfg->slots + MESH_PROBE_SLOTS;
	struct ro_batch *b = calloc(1, sizeof *b);
	lm_diag d = {{0}};
	bool ok = false;
	if (b == NULL || (b->live = calloc((size_t)cap, sizeof *b->live)) == NULL ||
	    (b->old = calloc((size_t)nc, sizeof *b->old)) == NULL ||
	    (b->pred = calloc((size_t)nc, sizeof *b->pred)) == NULL ||
	    (b->undo = calloc((size_t)nc + 1, sizeof *b->undo)) == NULL) {
		ro_fail(r, r->order[at], "prepare", "out of memory");
		goto out;
	}
	b->nc = nc;
	b->canary = at == 0;
	b->failed = -1;
	b->sched = workers_sched(rs->ws, false);
	for (int32_t k = 0; k < nc; k++)
		b->cs[k] = (struct ro_cand){.rs = rs, .j = r->order[at + k]};
	bool last = at + nc >= r->n_order;
	for (enum ro_step s = RO_PREPARE; s != RO_DONE;) {
		enum ro_outcome o = ro_step(r, b, s, pr, sink, &d);
		struct ro_next n = rollout_next(s, o, last);
		if (n.step == RO_FAILED) {
			ro_rollback(r, b, s, n.undo, lm_diag_str(&d, LM_EIO));
			goto out;
		}
		if (n.step == RO_PREPARE) /* the next batch's */
			break;
		s = n.step;
	}
	ok = true;
out:
	for (int32_t k = 0; b != NULL && b->old != NULL && b->pred != NULL && k < nc; k++) {
		ctl_close(&b->old[k]);
		ctl_close(&b->pred[k]);
	}
	if (b != NULL) {
		free(b->live);
		free(b->old);
		free(b->pred);
		free(b->undo);
	}
	free(b);
	return ok;
}

/* ------------------------------------------------------------------ the thread */

void *ro_main(void *arg)
{
	struct rollout *r = arg;
	struct ro_probe pr = {0};
	nng_socket sink;
	bool sink_open = false;
	int rv;

	if ((rv = nng_pull0_open(&sink)) != 0 ||
	    (sink_open = true, nng_listen(sink, r->sink, NULL, 0)) != 0) {
		ro_fail(r, -1, "prepare", "cannot open the smoke sink");
		goto out;
	}
	nng_socket_set_ms(sink, NNG_OPT_RECVTIMEO, ROLLOUT_SMOKE_MS);
	nng_socket_set_size(sink, NNG_OPT_RECVMAXSZ, 0);
	for (int32_t at = 0; at < r->n_order;) {
		/* The canary alone, then batches. */
		int32_t nc = at == 0 ? 1 : r->batch;
		if (nc > r->n_order - at)
			nc = r->n_order - at;
		if (!ro_batch_run(r, at, nc, &pr, sink))
			goto out;
		at += nc;
	}
	pthread_mutex_lock(&r->rs->mu);
	snprintf(r->state, sizeof r->state, "succeeded");
	pthread_mutex_unlock(&r->rs->mu);
	lm_info("redeploy succeeded: %d workers, longest pause %.1f ms, %lld sequences' KV moved "
		"(%llu bytes, each read back bit for bit)",
		r->n_order, r->max_pause_ms, (long long)r->moved_seqs,
		(unsigned long long)r->moved_bytes);
out:
	if (sink_open && lm_close_bounded(sink, LM_CLOSE_MS) != 0)
		lm_warn("redeploy: closing the smoke sink took over %d ms", LM_CLOSE_MS);
	if (strncmp(r->sink, "ipc://", 6) == 0)
		unlink(r->sink + 6);
	rmdir(r->dir);
	free(pr.ids);
	free(pr.h);
	pthread_mutex_lock(&r->rs->mu);
	r->running = false;
	r->finished_ms = lm_now_ms();
	pthread_mutex_unlock(&r->rs->mu);
	return NULL;
}

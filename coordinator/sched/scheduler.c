/* scheduler.c — continuous batching over the data ring. See scheduler.h. */
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/sched_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"

/* A warning a peer can make the scheduler repeat: one line a second per kind. */
#define sched_warn_limited(s, kind, code, fmt, ...)                                              \
	do {                                                                                     \
		uint64_t held_ = 0;                                                              \
		if (lm_log_limit_pass(&(s)->log_limit, lm_log_key(kind, code), &held_)) {        \
			if (held_ > 0)                                                           \
				lm_warn(fmt " (and %llu more since the last line)", __VA_ARGS__, \
					(unsigned long long)held_);                              \
			else                                                                     \
				lm_warn(fmt, __VA_ARGS__);                                       \
		}                                                                                \
	} while (0)

void sched_free_seq(struct sched_seq *q)
{
	if (q != NULL) {
		free(q->tok);
		free(q->bias);
		free(q->grammar);
		free(q);
	}
}

/* ------------------------------------------------------------------ the receive side */

static void sched_rx_cb(void *arg)
{
	struct sched *s = arg;
	int rv = nng_aio_result(s->rx_aio);
	if (rv != 0) {
		if (rv != NNG_ECLOSED && rv != NNG_ECANCELED) {
			lm_warn("ring receive failed: %s", nng_strerror(rv));
			nng_recv_aio(s->cfg.pull, s->rx_aio);
		}
		return;
	}
	nng_msg *m = nng_aio_get_msg(s->rx_aio);
	uint64_t at = lm_now_ns();
	pthread_mutex_lock(&s->mu);
	if (s->n_rx == s->cap_rx) {
		int32_t cap = s->cap_rx ? s->cap_rx * 2 : 64;
		struct sched_rx *rx = realloc(s->rx, (size_t)cap * sizeof *rx);
		if (rx == NULL) {
			pthread_mutex_unlock(&s->mu);
			nng_msg_free(m); /* its batch will time out and fail cleanly */
			nng_recv_aio(s->cfg.pull, s->rx_aio);
			return;
		}
		s->rx = rx;
		s->cap_rx = cap;
	}
	s->rx[s->n_rx++] = (struct sched_rx){m, at};
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	nng_recv_aio(s->cfg.pull, s->rx_aio);
}

/* ------------------------------------------------------------------ sequence ends */

/* Slot i's rows are to be emptied on the workers (a RELEASE goes with the next turn). */
static void sched_release_slot(struct sched *s, int32_t i)
{
	for (int32_t k = 0; k < s->n_release; k++)
		if (s->release[k] == i)
			return;
	s->release[s->n_release++] = i;
}

/* The prefix cache forgets every idle slot's rows (a worker that held them may be gone), and
 * the workers empty those slots, so that what they report holding is what the coordinator
 * knows of. */
static void sched_forget_prefix(struct sched *s)
{
	for (int32_t i = 0; i < s->prefix.slots; i++)
		if (s->prefix.slot[i].n > 0 && s->slot_seq[i] == NULL)
			sched_release_slot(s, i);
	prefix_forget_all(&s->prefix);
	atomic_store(&s->stats.cached_slots, 0);
}

/* ------------------------------------------------------------------ parallel samples
 *
 * A request with share_prompt_of waits in its slot until the sequence it names (its leader)
 * holds its prompt's rows but the last, then a COPY (wire.h) makes every worker copy those
 * rows into its slot and it starts at the prompt's last token. The COPY goes before any
 * FORWARD of the same turn, so on every stage it is applied after the leader's rows were
 * written and before the sample's first batch arrives. What can go wrong falls back on what
 * is always valid, computing from position 0: a leader gone before its rows were ready frees
 * its samples to compute their prompts; a pause or a quiesce drops the COPYs not yet sent
 * (and replay rebuilds the sent ones as any sequence's rows); a worker that cannot copy
 * refuses the sample's next batch, which is then sent again from position 0. */

/* The rows of leader l's prompt a sample copies: all but the last, which it computes. */
static int32_t sched_share_len(const struct sched_seq *l)
{
	return l->n_prompt - 1;
}

/* Sample f takes leader l's prompt rows: a COPY is queued, and its first batch starts after
 * them once it is sent. */
static void sched_share_into(struct sched *s, struct sched_seq *l, struct sched_seq *f)
{
	const int32_t p = sched_share_len(l);
	f->leader = 0;
	if (p <= f->n_done || s->n_copies >= s->cfg.slots)
		return; /* it already holds as much from the prefix cache */
	s->copies[s->n_copies++] = (struct sched_copy){
		.src = l->slot, .dst = f->slot, .len = p, .gain = p - f->n_done};
	f->copy_queued = true;
	f->n_done = p;
	f->reused = p;
	f->hi = l->hi > p ? l->hi : p;
	f->last_at = p - 1; /* a copy holds the live state at p and keeps none */
	f->last_end = p;
}

/* Leader l's rows may have become ready (its n_done grew): its waiting samples take them. */
static void sched_share_ready(struct sched *s, struct sched_seq *l)
{
	if (!l->has_followers || l->n_done < sched_share_len(l))
		return;
	for (int32_t i = 0; i < s->cfg.slots; i++) {
		struct sched_seq *f = s->slot_seq[i];
		if (f != NULL && f->leader == l->id)
			sched_share_into(s, l, f);
	}
	l->has_followers = false;
}

/* Sample q, just admitted: waits for its leader's rows, takes them now, or (no such leader
 * in a slot, another prompt) computes its own. */
static void sched_share_admit(struct sched *s, struct sched_seq *q)
{
	struct sched_seq *l = NULL;
	for (int32_t i = 0; i < s->cfg.slots && l == NULL; i++)
		if (s->slot_seq[i] != NULL && s->slot_seq[i]->id == q->leader && i != q->slot)
			l = s->slot_seq[i];
	if (l == NULL || l->n_prompt != q->n_prompt || sched_share_len(l) < 1 ||
	    memcmp(l->tok, q->tok, (size_t)q->n_prompt * sizeof *q->tok) != 0) {
		q->leader = 0;
		return;
	}
	l->has_followers = true;
	sched_share_ready(s, l);
}

/* The COPYs not yet sent are dropped (a worker may be gone, or a redeploy is about to list
 * the slots): their samples compute their prompts from position 0. */
static void sched_drop_copies(struct sched *s)
{
	for (int32_t k = 0; k < s->n_copies; k++) {
		struct sched_seq *f = s->slot_seq[s->copies[k].dst];
		if (f != NULL && f->copy_queued) {
			f->copy_queued = false;
			f->n_done = 0;
		}
	}
	s->n_copies = 0;
}

/* Sample q ends (or its slot is emptied): a COPY into its slot not yet sent is dropped. Its
 * leader's end frees the samples waiting for it. */
static void sched_share_end(struct sched *s, struct sched_seq *q)
{
	if (q->copy_queued) {
		for (int32_t k = 0; k < s->n_copies; k++)
			if (s->copies[k].dst == q->slot) {
				s->copies[k] = s->copies[--s->n_copies];
				break;
			}
		q->copy_queued = false;
		q->n_done = 0;
	}
	if (!q->has_followers)
		return;
	for (int32_t i = 0; i < s->cfg.slots; i++)
		if (s->slot_seq[i] != NULL && s->slot_seq[i]->leader == q->id)
			s->slot_seq[i]->leader = 0;
}

static void sched_finish(struct sched *s, struct sched_seq *q, enum sched_finish why, int code,
			 const char *msg)
{
	if (q->slot >= 0) {
		sched_share_end(s, q);
		if (s->cfg.draft.iface != NULL && s->cfg.draft.iface->release != NULL)
			s->cfg.draft.iface->release(s->cfg.draft.ctx, q->slot);
		s->slot_seq[q->slot] = NULL;
		/* The prefix cache keeps the rows of a sequence that ended well (in its own
		 * slot, not a probe's) for the next request that shares them; any other slot
		 * is emptied on the workers. */
		bool keep = s->cfg.prefix_cache && why != SCHED_FINISH_ERROR &&
			    q->slot < s->cfg.slots - s->cfg.reserved_slots && !q->inflight;
		if (keep) {
			prefix_keep(&s->prefix, q->slot, q->tok, q->n_done, q->hi, q->last_at,
				    q->last_end);
		} else {
			if (s->cfg.prefix_cache)
				prefix_drop(&s->prefix, q->slot);
			sched_release_slot(s, q->slot);
		}
		if (s->cfg.prefix_cache)
			atomic_store(&s->stats.cached_slots, s->prefix.n_held);
		atomic_fetch_sub(&s->stats.active, 1);
	}
	lm_hist_observe(&s->stats.duration, lm_now_ns() - q->t_submit_ns);
	q->on_done(q->arg, why, code, msg);
	sched_free_seq(q);
}

static struct sched_batch *sched_find_batch(struct sched *s, uint64_t id, int32_t *index)
{
	for (int32_t i = 0; i < s->n_inflight; i++)
		if (s->inflight[i].id == id) {
			*index = i;
			return &s->inflight[i];
		}
	return NULL;
}

static void sched_drop_batch(struct sched *s, int32_t i)
{
	struct sched_batch tmp = s->inflight[i];
	memmove(&s->inflight[i], &s->inflight[i + 1],
		(size_t)(s->n_inflight - i - 1) * sizeof s->inflight[0]);
	s->inflight[--s->n_inflight] = tmp; /* keep its arrays for reuse */
}

/* Fails every sequence of batch i with code/msg. */
static void sched_fail_batch(struct sched *s, int32_t i, int code, const char *msg)
{
	struct sched_batch *b = &s->inflight[i];
	for (int32_t k = 0; k < b->n; k++)
		sched_finish(s, b->seqs[k], SCHED_FINISH_ERROR, code, msg);
	sched_drop_batch(s, i);
}

static bool sched_is_stop(const struct sched *s, const struct sched_seq *q, int32_t token)
{
	for (int32_t i = 0; i < s->cfg.n_stop_ids; i++)
		if (s->cfg.stop_ids[i] == token)
			return true;
	for (int32_t i = 0; i < q->n_stop_ids; i++)
		if (q->stop_ids[i] == token)
			return true;
	return false;
}

/* One generated token into sequence q (its alternatives at top, in the TOKENS payload's
 * layout): false when the sequence ended with it (finished and freed). */
static bool sched_take_token(struct sched *s, struct sched_seq *q, const struct wire_token *tk,
			     const uint8_t *top)
{
	int32_t top_ids[64];
	float top_lp[64];
	int32_t n_top = tk->n_top < 64 ? tk->n_top : 64;
	for (int32_t j = 0; j < n_top; j++) {
		memcpy(&top_ids[j], top + 4 * j, 4);
		memcpy(&top_lp[j], top + 4 * (tk->n_top + j), 4);
	}
	if (q->cancel) {
		sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
		return false;
	}
	if (sched_is_stop(s, q, tk->token)) {
		sched_finish(s, q, SCHED_FINISH_STOP, 0, NULL);
		return false;
	}
	q->tok[q->n_tok++] = tk->token;
	q->n_gen++;
	atomic_fetch_add(&s->stats.tokens_generated, 1);
	uint64_t now = lm_now_ns();
	if (q->n_gen == 1)
		lm_hist_observe(&s->stats.ttft, now - q->t_submit_ns);
	else
		lm_hist_observe(&s->stats.token, now - q->t_last_ns);
	q->t_last_ns = now;
	q->on_token(q->arg, tk->token, tk->logprob, top_ids, top_lp, n_top);
	if (q->cancel)
		sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
	else if (q->n_gen >= q->max_tokens || q->n_tok >= s->cfg.max_seq)
		sched_finish(s, q, SCHED_FINISH_LENGTH, 0, NULL);
	else
		return true;
	return false;
}

/* The entries of sequence k of batch b, from t->toks[*ti]: one token, or for a speculating
 * sequence its accepted drafts (which must be the drafts it sent, in order) and the token after
 * them. Its cache then holds its chunk less the rejected drafts: the next batch starts there,
 * which is the rollback. */
static void sched_take_tokens(struct sched *s, struct sched_batch *b, int32_t k,
			      const struct wire_tokens *t, int32_t *ti, const uint8_t **top)
{
	struct sched_seq *q = b->seqs[k];
	const int32_t nd = b->n_draft[k];
	const int32_t *dr = b->drafts + b->draft_at[k];
	int32_t m = 0;
	while (*ti + m < t->n && m <= nd && t->toks[*ti + m].seq_id == q->id)
		m++;
	bool ok = m >= 1;
	for (int32_t j = 0; ok && j + 1 < m; j++)
		ok = t->toks[*ti + j].token == dr[j];
	if (!ok) {
		*ti += m;
		sched_finish(s, q, SCHED_FINISH_ERROR, LM_EPROTO,
			     m == 0 ? "the last worker did not return a token for this sequence"
				    : "the last worker accepted tokens that were not the drafts");
		return;
	}
	q->n_done += b->chunk[k] - (nd - (m - 1));
	sched_share_ready(s, q);
	if (nd > 0) {
		atomic_fetch_add(&s->stats.spec_steps, 1);
		atomic_fetch_add(&s->stats.spec_drafted, (uint64_t)nd);
		atomic_fetch_add(&s->stats.spec_accepted, (uint64_t)(m - 1));
		spec_adapt_verified(&q->adapt, nd, m - 1);
	} else if (b->sample[k]) {
		spec_adapt_token(&q->adapt, q->n_tok, t->toks[*ti].token);
	}
	bool live = true;
	for (int32_t j = 0; j < m; j++) {
		const struct wire_token *tk = &t->toks[*ti + j];
		if (live)
			live = sched_take_token(s, q, tk, *top);
		*top += 8 * (size_t)tk->n_top;
	}
	*ti += m;
}

static void sched_on_tokens(struct sched *s, nng_msg *m, uint64_t at)
{
	struct wire_tokens t;
	lm_diag d = {{0}};
	int rc = wire_decode_tokens(nng_msg_body(m), nng_msg_len(m), &s->lim, &s->scratch, &t, &d);
	if (rc != 0) {
		atomic_fetch_add(&s->stats.ring_errors, 1);
		sched_warn_limited(s, "tokens", rc, "dropped a malformed TOKENS message: %s",
				   lm_diag_str(&d, rc));
		return; /* its batch times out */
	}
	/* The last hop: the last worker's ring stamp, on the same clock, to the arrival here. */
	if (t.sent_ns != 0 && at >= t.sent_ns)
		lm_hist_observe(&s->stats.ring_return, at - t.sent_ns);
	int32_t bi;
	struct sched_batch *b = sched_find_batch(s, t.batch_id, &bi);
	if (b == NULL) {
		lm_debug("TOKENS for batch %llu, which is no longer waited for",
			 (unsigned long long)t.batch_id);
		return;
	}
	const uint8_t *top = t.payload;
	int32_t ti = 0;
	int64_t now_ms = lm_now_ms();
	s->tokens_at = at;
	for (int32_t k = 0; k < b->n; k++) {
		struct sched_seq *q = b->seqs[k];
		q->inflight = false;
		q->progress_ms = now_ms;
		q->retries = 0; /* a batch went through: the retries bound refusals in a row */
		if (!b->sample[k]) {
			q->n_done += b->chunk[k];
			sched_share_ready(s, q);
			if (q->cancel)
				sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
			continue;
		}
		sched_take_tokens(s, b, k, &t, &ti, &top);
	}
	sched_drop_batch(s, bi);
}

/* A worker found a NaN or an infinity in batch bi. Retrying the same numbers is pointless: a
 * sequence that was alone in its batch fails at once with the worker's words (which name it
 * and the layer); the others of a shared batch go again alone, so only the sequence that makes
 * the value fails and the ones that merely shared its batch finish. */
static void sched_on_nonfinite(struct sched *s, int32_t bi, const struct wire_error *e)
{
	struct sched_batch *b = &s->inflight[bi];
	lm_warn("batch %llu: %s", (unsigned long long)e->id, e->msg);
	for (int32_t k = 0; k < b->n; k++) {
		struct sched_seq *q = b->seqs[k];
		q->inflight = false;
		if (q->cancel) {
			sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
		} else if (b->n == 1 || q->solo) {
			sched_finish(s, q, SCHED_FINISH_ERROR, LM_ENONFINITE, e->msg);
		} else {
			q->solo = true;
			q->n_done = 0;
			atomic_fetch_add(&s->stats.replays, 1);
		}
	}
	sched_drop_batch(s, bi);
}

static void sched_on_ring_error(struct sched *s, nng_msg *m)
{
	struct wire_error e;
	lm_diag d = {{0}};
	atomic_fetch_add(&s->stats.ring_errors, 1);
	if (wire_decode_error(nng_msg_body(m), nng_msg_len(m), &e, &d) != 0) {
		sched_warn_limited(s, "error", LM_EPROTO, "dropped a malformed ERROR message: %s",
				   d.msg);
		return;
	}
	int32_t bi;
	if (e.about == WIRE_COPY) /* its samples' next batches are refused and sent again */
		s->copies_out -= s->copies_out > 0;
	if (sched_find_batch(s, e.id, &bi) == NULL) {
		sched_warn_limited(s, "refused", e.code, "a worker refused message %llu (%s): %s",
				   (unsigned long long)e.id, wire_type_name(e.about), e.msg);
		return;
	}
	if (e.code == LM_ENONFINITE) {
		sched_on_nonfinite(s, bi, &e);
		return;
	}
	/* A refused batch means a worker's cache no longer matches the sequence (a worker came back
	 * empty while the batch was on its way, say). Prefilling the sequence again from position 0
	 * is always valid, so each sequence gets two such retries in a row (a batch that goes
	 * through starts the count again: a rolling redeploy of every worker may cost a sequence
	 * one refusal at each switch) before the request fails. */
	struct sched_batch *b = &s->inflight[bi];
	char msg[600];
	snprintf(msg, sizeof msg, "a worker refused the batch: %s", e.msg);
	sched_warn_limited(s, "batch", e.code, "batch %llu refused: %s", (unsigned long long)e.id,
			   e.msg);
	for (int32_t k = 0; k < b->n; k++) {
		struct sched_seq *q = b->seqs[k];
		q->inflight = false;
		if (q->cancel) {
			sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
		} else if (q->retries < 2) {
			q->retries++;
			q->n_done = 0;
			/* A reuse refused before its first token (a stage that could not return to
			 * the prefix's end): the request reports what it computed. After a token,
			 * on_token has published the count, and it stays as it was. */
			if (q->n_gen == 0 && q->cached != NULL)
				*q->cached = 0;
			q->reused = 0;
			atomic_fetch_add(&s->stats.replays, 1);
		} else {
			sched_finish(s, q, SCHED_FINISH_ERROR, e.code < 0 ? e.code : LM_EPROTO,
				     msg);
		}
	}
	sched_drop_batch(s, bi);
}

static void sched_on_msg(struct sched *s, nng_msg *m, uint64_t at)
{
	struct wire_head h;
	lm_diag d = {{0}};
	if (wire_peek(nng_msg_body(m), nng_msg_len(m), &h, &d) != 0) {
		atomic_fetch_add(&s->stats.ring_errors, 1);
		sched_warn_limited(s, "ring", LM_EPROTO, "dropped a ring message: %s", d.msg);
	} else if (h.type == WIRE_TOKENS) {
		sched_on_tokens(s, m, at);
	} else if (h.type == WIRE_ERROR) {
		sched_on_ring_error(s, m);
	} else if (h.type == WIRE_COPY) { /* its acknowledgement, as RELEASE's */
		s->copies_out -= s->copies_out > 0;
	} else if (h.type != WIRE_RELEASE) { /* RELEASE coming home is its acknowledgement */
		atomic_fetch_add(&s->stats.ring_errors, 1);
		sched_warn_limited(s, "unexpected", (int64_t)h.type, "unexpected %s on the ring",
				   wire_type_name(h.type));
	}
	nng_msg_free(m);
}

/* ------------------------------------------------------------------ the send side */

/* A FORWARD (forward true) ends the turnaround since the last TOKENS came back; a header
 * encoded with a ring stamp (wire.h) is stamped now. */
static int sched_send(struct sched *s, const struct wire_buf *hdr, const void *payload, size_t len,
		      bool forward, bool stamped)
{
	nng_msg *m;
	if (nng_msg_alloc(&m, 0) != 0)
		return LM_ENOMEM;
	if (nng_msg_append(m, hdr->data, hdr->len) != 0 ||
	    (len > 0 && nng_msg_append(m, payload, len) != 0)) {
		nng_msg_free(m);
		return LM_ENOMEM;
	}
	uint64_t t0 = lm_now_ns();
	if (stamped)
		wire_stamp((uint8_t *)nng_msg_body(m) + hdr->len - WIRE_STAMP_LEN, t0);
	if (forward && s->tokens_at != 0) {
		lm_hist_observe(&s->stats.turnaround, t0 - s->tokens_at);
		s->tokens_at = 0;
	}
	int rv = lm_link_send(s->cfg.push, m);
	if (rv != 0) {
		nng_msg_free(m);
		return rv == NNG_ETIMEDOUT ? LM_ETIMEOUT : LM_EIO;
	}
	lm_hist_observe(&s->stats.send, lm_now_ns() - t0);
	return 0;
}

static void sched_send_release(struct sched *s)
{
	if (s->n_release == 0)
		return;
	struct wire_release r = {.id = s->next_batch_id++,
				 .fingerprint = s->cfg.fingerprint,
				 .n = s->n_release,
				 .slots = s->release};
	wire_buf_reset(&s->buf);
	if (wire_encode_release(&s->buf, &r) == 0 &&
	    sched_send(s, &s->buf, NULL, 0, false, false) == 0)
		s->n_release = 0;
	/* On failure the slots stay listed and go with the next RELEASE; a new sequence in a
	 * slot starts at position 0 and needs no release to be correct. */
}

/* The queued COPYs, one message per source (its samples' slots together). Sent before the
 * turn's FORWARDs; what cannot be sent waits for the next turn, its samples with it. */
static void sched_send_copies(struct sched *s)
{
	while (s->n_copies > 0) {
		const struct sched_copy c0 = s->copies[0];
		int32_t *dst = s->copy_dst, n = 0;
		for (int32_t k = 0; k < s->n_copies; k++)
			if (s->copies[k].src == c0.src && s->copies[k].len == c0.len)
				dst[n++] = s->copies[k].dst;
		struct wire_copy c = {.id = s->next_batch_id++,
				      .fingerprint = s->cfg.fingerprint,
				      .src = c0.src,
				      .len = c0.len,
				      .n = n,
				      .dst = dst};
		wire_buf_reset(&s->buf);
		if (wire_encode_copy(&s->buf, &c) != 0 ||
		    sched_send(s, &s->buf, NULL, 0, false, false) != 0)
			return;
		s->copies_out++;
		s->copies_sent_ms = lm_now_ms();
		for (int32_t k = 0; k < s->n_copies;) {
			struct sched_copy *e = &s->copies[k];
			if (e->src != c0.src || e->len != c0.len) {
				k++;
				continue;
			}
			if (s->slot_seq[e->dst] != NULL)
				s->slot_seq[e->dst]->copy_queued = false;
			atomic_fetch_add(&s->stats.prompt_shared, (uint64_t)e->gain);
			*e = s->copies[--s->n_copies];
		}
	}
}

/* A constrained sequence's step w: a new sequence, or a replay from position 0, sends its
 * grammar and the tokens generated so far, from which the last worker rebuilds its matcher;
 * else an empty grammar, telling the last worker to use the matcher it holds. */
static void sched_grammar(struct sched_seq *q, struct wire_seq *w)
{
	q->gr_sent = q->gr_sent && w->pos > 0;
	if (!w->sample || q->grammar == NULL)
		return;
	q->wgr = q->gr_sent ? (struct wire_grammar){0}
			    : (struct wire_grammar){q->grammar, (uint32_t)strlen(q->grammar),
						    q->tok + q->n_prompt, q->n_gen};
	w->grammar = &q->wgr;
}

/* Packs the next batch from sequences not in flight. Returns false when there is none. */
static bool sched_build_batch(struct sched *s, struct sched_batch *b, int32_t *n_tokens)
{
	int32_t slots = s->cfg.slots, active = 0, ready = 0;
	for (int32_t i = 0; i < slots; i++)
		if (s->slot_seq[i] != NULL) {
			active++;
			ready += !s->slot_seq[i]->inflight && s->slot_seq[i]->leader == 0 &&
				 !s->slot_seq[i]->copy_queued;
		}
	if (ready == 0)
		return false;
	/* Spread the active sequences over the batches in flight so each stage has work: a
	 * batch takes at most its share of them. */
	int32_t share = (active + s->cfg.max_inflight - 1) / s->cfg.max_inflight;
	int32_t budget = s->cfg.max_batch, n = 0;
	b->n = 0;
	b->n_drafts = 0;
	for (int32_t k = 0; k < slots && b->n < share && budget > 0; k++) {
		struct sched_seq *q = s->slot_seq[(s->rr + k) % slots];
		if (q == NULL || q->inflight || (q->solo && b->n > 0) || q->leader != 0 ||
		    q->copy_queued)
			continue;
		int32_t remaining = q->n_tok - q->n_done;
		int32_t chunk = remaining;
		if (chunk > s->cfg.prefill_chunk)
			chunk = s->cfg.prefill_chunk;
		if (chunk > budget)
			chunk = budget;
		memcpy(s->ids + n, q->tok + q->n_done, (size_t)chunk * sizeof *s->ids);
		/* A decoding sequence's last token may bring a draft after it. */
		const int32_t nd = remaining == 1 ? sched_draft(s, q, budget - 1, b) : 0;
		memcpy(s->ids + n + 1, b->drafts + b->n_drafts, (size_t)nd * sizeof *s->ids);
		chunk += nd;
		if (q->n_done + chunk > q->hi)
			q->hi = q->n_done + chunk;
		struct wire_seq *w = &s->wseqs[b->n];
		*w = (struct wire_seq){.seq_id = q->id,
				       .slot = q->slot,
				       .pos = q->n_done,
				       .n_tokens = chunk,
				       .sample = q->n_done + chunk - nd == q->n_tok,
				       .step = (uint64_t)q->n_gen,
				       .n_logprobs = q->n_logprobs,
				       .sampling = q->sampling,
				       .n_draft = nd};
		if (w->sample && (q->n_bias > 0 || lm_penalties_active(&q->pen))) {
			/* The window: the sequence's last tokens, prompt included, as llama-server
			 * feeds its sampler. */
			int32_t win = lm_penalties_active(&q->pen) ? q->pen.last_n : 0;
			if (win > q->n_tok)
				win = q->n_tok;
			q->adj = (struct lm_logit_adjust){.presence = q->pen.presence,
							  .frequency = q->pen.frequency,
							  .repeat = q->pen.repeat,
							  .hist = q->tok + q->n_tok - win,
							  .n_hist = win,
							  .bias = q->bias,
							  .n_bias = q->n_bias};
			w->adjust = &q->adj;
		}
		sched_grammar(q, w);
		b->seqs[b->n] = q;
		b->chunk[b->n] = chunk;
		b->sample[b->n] = w->sample;
		b->n_draft[b->n] = nd;
		b->draft_at[b->n] = b->n_drafts;
		b->n_drafts += nd;
		b->n++;
		n += chunk;
		budget -= chunk;
		if (q->solo)
			break;
	}
	s->rr = (s->rr + 1) % slots;
	*n_tokens = n;
	return b->n > 0;
}

static void sched_dispatch(struct sched *s)
{
	while (s->n_inflight < s->cfg.max_inflight) {
		struct sched_batch *b = &s->inflight[s->n_inflight];
		int32_t n = 0;
		if (!sched_build_batch(s, b, &n))
			return;
		b->id = s->next_batch_id++;
		struct wire_forward f = {.batch_id = b->id,
					 .fingerprint = s->cfg.fingerprint,
					 .n_seqs = b->n,
					 .seqs = s->wseqs,
					 .n_drafts = b->n_drafts,
					 .drafts = b->drafts,
					 .n_tokens = n,
					 .dtype = WIRE_DT_I32,
					 .dim = 1,
					 .payload = NULL,
					 .payload_len = (size_t)n * sizeof(int32_t),
					 .sent_ns = s->cfg.ring_stamps ? 1
								       : 0}; /* stamped when sent */
		wire_buf_reset(&s->buf);
		int rc = wire_encode_forward(&s->buf, &f);
		if (rc == 0)
			rc = sched_send(s, &s->buf, s->ids, f.payload_len, true,
					s->cfg.ring_stamps);
		if (rc != 0) {
			/* The first worker is not taking messages: try again on the next turn. The
			 * main loop gives up after batch_timeout_ms of this. */
			lm_debug("FORWARD not sent: %s", lm_strerror(rc));
			if (s->send_failing_ms == 0)
				s->send_failing_ms = lm_now_ms();
			return;
		}
		s->send_failing_ms = 0;
		b->sent_ms = lm_now_ms();
		for (int32_t k = 0; k < b->n; k++) {
			struct sched_seq *q = b->seqs[k];
			int32_t end = q->n_done + b->chunk[k];
			q->last_at = q->n_done;
			q->last_end = end;
			if (q->n_done < q->n_prompt)
				atomic_fetch_add(
					&s->stats.prompt_computed,
					(uint64_t)((end < q->n_prompt ? end : q->n_prompt) -
						   q->n_done));
			q->inflight = true;
			q->gr_sent |= b->sample[k];
		}
		s->n_inflight++;
		atomic_fetch_add(&s->stats.batches, 1);
	}
}

/* ------------------------------------------------------------------ the thread */

/* The slot waiting request q takes, or -1 when none is free: with the prefix cache, the one
 * whose rows it can reuse most of (*reuse of them), else the first free one. */
static int32_t sched_pick_slot(struct sched *s, const struct sched_seq *q, int32_t *reuse)
{
	const int32_t open = s->cfg.slots - s->cfg.reserved_slots;
	*reuse = 0;
	if (!s->cfg.prefix_cache) {
		for (int32_t i = 0; i < open; i++)
			if (s->slot_seq[i] == NULL)
				return i;
		return -1;
	}
	for (int32_t i = 0; i < s->cfg.slots; i++)
		s->free_slot[i] = i < open && s->slot_seq[i] == NULL;
	/* A request that reuses nothing takes an empty slot, else the one kept least recently,
	 * and leaves the rows others could reuse where they are. */
	return prefix_choose(&s->prefix, s->free_slot, q->tok, q->no_cache ? 1 : q->n_prompt,
			     reuse);
}

static void sched_admit(struct sched *s)
{
	int32_t reuse, i;
	while (s->wait_head != NULL && (i = sched_pick_slot(s, s->wait_head, &reuse)) >= 0) {
		struct sched_seq *q = s->wait_head;
		s->wait_head = q->next;
		if (s->wait_head == NULL)
			s->wait_tail = NULL;
		q->next = NULL;
		q->slot = i;
		s->slot_seq[i] = q;
		if (s->cfg.prefix_cache) {
			/* Its first FORWARD starts at `reuse`: every stage truncates the slot there
			 * and keeps the rows before it. The rings' high-water mark stays. */
			q->n_done = reuse;
			q->hi = reuse > 0 ? s->prefix.slot[i].hi : 0;
			q->last_at = reuse > 0 ? s->prefix.slot[i].back - 1 : 0;
			q->last_end = reuse > 0 ? s->prefix.slot[i].len : 0;
			prefix_drop(&s->prefix, i);
			atomic_store(&s->stats.cached_slots, s->prefix.n_held);
			atomic_fetch_add(&s->stats.prompt_cached, (uint64_t)reuse);
		}
		q->reused = reuse;
		if (q->cached != NULL)
			*q->cached = reuse;
		if (q->leader != 0)
			sched_share_admit(s, q);
		atomic_fetch_sub(&s->stats.queued, 1);
		atomic_fetch_add(&s->stats.active, 1);
		lm_hist_observe(&s->stats.queue_wait, lm_now_ns() - q->t_submit_ns);
	}
}

static void sched_apply_cancel(struct sched *s, uint64_t id)
{
	for (int32_t i = 0; i < s->cfg.slots; i++) {
		struct sched_seq *q = s->slot_seq[i];
		if (q != NULL && q->id == id) {
			if (q->inflight)
				q->cancel = true; /* ends when its batch comes back */
			else
				sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
			return;
		}
	}
	for (struct sched_seq **p = &s->wait_head; *p != NULL; p = &(*p)->next) {
		if ((*p)->id != id)
			continue;
		struct sched_seq *q = *p;
		*p = q->next;
		if (s->wait_tail == q) {
			s->wait_tail = NULL;
			for (struct sched_seq *t = s->wait_head; t != NULL; t = t->next)
				s->wait_tail = t;
		}
		atomic_fetch_sub(&s->stats.queued, 1);
		sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
		return;
	}
}

static void sched_fail_all(struct sched *s, int code, const char *msg)
{
	while (s->n_inflight > 0)
		sched_fail_batch(s, 0, code, msg);
	for (int32_t i = 0; i < s->cfg.slots; i++)
		if (s->slot_seq[i] != NULL)
			sched_finish(s, s->slot_seq[i], SCHED_FINISH_ERROR, code, msg);
	while (s->wait_head != NULL) {
		struct sched_seq *q = s->wait_head;
		s->wait_head = q->next;
		atomic_fetch_sub(&s->stats.queued, 1);
		sched_finish(s, q, SCHED_FINISH_ERROR, code, msg);
	}
	s->wait_tail = NULL;
}

/* A worker went down: every batch in flight is lost with it (or will be refused by the
 * restarted worker). Its sequences become ready to send again; their KV positions are as the
 * last completed batch left them. */
static void sched_forget_inflight(struct sched *s)
{
	while (s->n_inflight > 0) {
		struct sched_batch *b = &s->inflight[0];
		for (int32_t k = 0; k < b->n; k++) {
			struct sched_seq *q = b->seqs[k];
			q->inflight = false;
			if (q->cancel)
				sched_finish(s, q, SCHED_FINISH_CANCEL, 0, NULL);
		}
		atomic_fetch_add(&s->stats.batches_forgotten, 1);
		sched_drop_batch(s, 0);
	}
}

/* Every live sequence prefills again from position 0: its tokens so far are its history. The
 * workers blamed for the fault (sched_blame, taken with the turn) count them. */
static void sched_replay(struct sched *s, const bool *blamed)
{
	uint64_t n = 0;
	for (int32_t i = 0; i < s->cfg.slots; i++) {
		struct sched_seq *q = s->slot_seq[i];
		if (q != NULL && q->n_done > 0) {
			q->n_done = 0;
			n++;
		}
	}
	atomic_fetch_add(&s->stats.replays, n);
	for (int32_t j = 0; j < s->stats.n_workers; j++)
		if (blamed[j])
			atomic_fetch_add(&s->stats.worker_replays[j], n);
}

/* While dispatch is held, requests that have waited request_timeout without progress fail with
 * the reason the mesh gives (a worker down and why). Counted from the later of the request's
 * last progress and the start of the hold. */
static void sched_check_held(struct sched *s, const char *why)
{
	int64_t now = lm_now_ms(), limit = s->cfg.request_timeout_ms;
	char msg[400];
	snprintf(msg, sizeof msg, "%s; no progress for %.1f s ([coordinator] request_timeout)",
		 why[0] ? why : "the mesh is held", (double)limit / 1000.0);
	for (int32_t i = 0; i < s->cfg.slots; i++) {
		struct sched_seq *q = s->slot_seq[i];
		if (q == NULL || q->inflight)
			continue;
		int64_t since =
			q->progress_ms > s->paused_since_ms ? q->progress_ms : s->paused_since_ms;
		if (now - since > limit)
			sched_finish(s, q, SCHED_FINISH_ERROR, LM_EUNAVAILABLE, msg);
	}
	for (struct sched_seq **p = &s->wait_head; *p != NULL;) {
		struct sched_seq *q = *p;
		int64_t since =
			q->progress_ms > s->paused_since_ms ? q->progress_ms : s->paused_since_ms;
		if (now - since <= limit) {
			p = &q->next;
			continue;
		}
		*p = q->next;
		if (s->wait_tail == q) {
			s->wait_tail = NULL;
			for (struct sched_seq *w = s->wait_head; w != NULL; w = w->next)
				s->wait_tail = w;
		}
		atomic_fetch_sub(&s->stats.queued, 1);
		sched_finish(s, q, SCHED_FINISH_ERROR, LM_EUNAVAILABLE, msg);
	}
}

/* The batch travelling longest, for sched_oldest (the keepers' progress check). */
static void sched_publish_oldest(struct sched *s)
{
	uint64_t id = 0;
	int64_t sent = 0;
	for (int32_t i = 0; i < s->n_inflight; i++)
		if (id == 0 || s->inflight[i].sent_ms < sent) {
			id = s->inflight[i].id;
			sent = s->inflight[i].sent_ms;
		}
	atomic_store(&s->oldest_sent_ms, sent);
	atomic_store(&s->oldest_id, id);
}

/* One turn of the thread, step by step. Each step is a function below, in the order the turn
 * takes them:
 *
 *   take        under mu: what other threads handed over (requests, cancels, ring messages)
 *               and the mesh's state, so the rest of the turn runs without the lock
 *   enqueue     new requests join the wait queue (a probe goes straight to its slot)
 *   receive     ring messages: TOKENS and ERROR answers end the batches they name
 *   cancel      requested cancels
 *   mesh state  down: everything fails; a pause forgets what was in flight; a resume replays
 *   timeouts    batches not back in time fail, and so does a ring that takes nothing
 *   admit       queued requests take free slots
 *   dispatch    RELEASE for ended sequences, then new FORWARD batches up to max_inflight
 *               (while paused only `admit` of these three runs; while quiescing, no FORWARD)
 *   quiesce     once nothing is in flight, the live slots are published to sched_quiesce
 *   wait        under mu: until something arrives, at most SCHED_IDLE_WAIT_MS
 */

/* What one turn took from the other threads, and its buffers (kept across turns). */
struct sched_turn {
	struct sched_seq *in; /* new requests, in submit order */
	uint64_t *cancels;    /* [cap_c] */
	int32_t n_cancels, cap_c;
	struct sched_rx *rx; /* [cap_r] ring messages, in arrival order */
	uint64_t took_ns;    /* when the turn took them */
	int32_t n_rx, cap_r;
	bool up, paused, replay, quiesce, quiesced;
	uint64_t pauses;
	char why[256];
	bool *blamed; /* [n_workers]: causes of this turn's replay */
};

/* A turn buffer of `size`-byte items grown to hold `want` (at *cap); on failure the old one,
 * and the turn takes fewer items (the rest wait for the next turn). */
static void *sched_turn_grow(void *buf, int32_t *cap, int32_t want, size_t size)
{
	if (want <= *cap)
		return buf;
	void *p = realloc(buf, (size_t)want * size);
	if (p == NULL)
		return buf;
	*cap = want;
	return p;
}

/* Under mu: moves what other threads handed over into t, and copies the mesh's state. */
static void sched_take(struct sched *s, struct sched_turn *t)
{
	t->in = s->inbox;
	s->inbox = s->inbox_tail = NULL;
	t->cancels = sched_turn_grow(t->cancels, &t->cap_c, s->n_cancels, sizeof *t->cancels);
	t->rx = sched_turn_grow(t->rx, &t->cap_r, s->n_rx, sizeof *t->rx);
	int32_t nc = s->n_cancels < t->cap_c ? s->n_cancels : t->cap_c;
	int32_t nr = s->n_rx < t->cap_r ? s->n_rx : t->cap_r;
	/* (Empty copies are skipped: the buffers may still be NULL, and memcpy's pointers must be
	 * valid even for zero bytes.) */
	if (nc > 0) {
		memcpy(t->cancels, s->cancels, (size_t)nc * sizeof *t->cancels);
		memmove(s->cancels, s->cancels + nc,
			(size_t)(s->n_cancels - nc) * sizeof *s->cancels);
		s->n_cancels -= nc;
	}
	if (nr > 0) {
		memcpy(t->rx, s->rx, (size_t)nr * sizeof *t->rx);
		memmove(s->rx, s->rx + nr, (size_t)(s->n_rx - nr) * sizeof *s->rx);
		s->n_rx -= nr;
	}
	t->n_cancels = nc;
	t->n_rx = nr;
	t->took_ns = lm_now_ns();
	t->up = s->available;
	t->paused = s->paused;
	t->replay = s->replay_pending;
	t->quiesce = s->quiesce;
	t->quiesced = s->quiesced;
	t->pauses = s->pauses;
	if (t->replay)
		for (int32_t j = 0; j < s->stats.n_workers; j++) {
			t->blamed[j] = s->blamed[j];
			s->blamed[j] = false;
		}
	s->replay_pending = false;
	memcpy(t->why, s->why, sizeof t->why);
}

/* New requests wait for a slot in submit order; a probe takes its reserved slot at once, or
 * fails when another probe holds it. */
static void sched_enqueue(struct sched *s, struct sched_seq *in)
{
	while (in != NULL) {
		struct sched_seq *q = in;
		in = in->next;
		q->next = NULL;
		if (q->slot >= 0) { /* a probe with its own reserved slot */
			if (s->slot_seq[q->slot] != NULL) {
				sched_finish(s, q, SCHED_FINISH_ERROR, LM_EBUSY,
					     "the probe slot is in use");
				continue;
			}
			s->slot_seq[q->slot] = q;
			atomic_fetch_sub(&s->stats.queued, 1);
			atomic_fetch_add(&s->stats.active, 1);
			continue;
		}
		if (s->wait_tail != NULL)
			s->wait_tail->next = q;
		else
			s->wait_head = q;
		s->wait_tail = q;
	}
}

/* Ring messages, in arrival order (each is freed). */
static void sched_receive(struct sched *s, const struct sched_turn *t)
{
	for (int32_t i = 0; i < t->n_rx; i++) {
		lm_hist_observe(&s->stats.wake, t->took_ns - t->rx[i].at);
		sched_on_msg(s, t->rx[i].m, t->rx[i].at);
	}
}

static void sched_apply_cancels(struct sched *s, const struct sched_turn *t)
{
	for (int32_t i = 0; i < t->n_cancels; i++)
		sched_apply_cancel(s, t->cancels[i]);
}

/* The mesh went down (everything live fails with the reason), or a pause or a resume with
 * replay happened since the last turn. */
static void sched_apply_mesh_state(struct sched *s, const struct sched_turn *t)
{
	if (!t->up) {
		sched_fail_all(s, LM_EUNAVAILABLE, t->why);
		return;
	}
	/* Forget what was in flight on every pause, even one already lifted: a worker restarted
	 * meanwhile and those batches will not come back whole. */
	bool paused = t->pauses != s->pauses_seen;
	if (paused) {
		sched_forget_inflight(s);
		s->pauses_seen = t->pauses;
		s->copies_out = 0; /* a worker that held them may be gone */
	}
	if (paused || t->paused || t->quiesce)
		sched_drop_copies(s);
	/* A pause (a worker away) or a quiesce (a redeploy replacing a worker) may leave a
	 * process that holds none of the idle slots' rows: the prefix cache forgets them all. */
	if (s->cfg.prefix_cache && (paused || t->paused || t->quiesce || t->replay))
		sched_forget_prefix(s);
	if (t->replay && !t->paused)
		sched_replay(s, t->blamed);
	if (t->paused && s->paused_since_ms == 0)
		s->paused_since_ms = lm_now_ms();
	else if (!t->paused)
		s->paused_since_ms = 0;
}

/* A batch not back within batch_timeout_ms fails its sequences; so does everything when the
 * first worker has taken no batch for that long. */
static void sched_check_timeouts(struct sched *s)
{
	int64_t now = lm_now_ms();
	for (int32_t i = 0; i < s->n_inflight;) {
		if (now - s->inflight[i].sent_ms > s->cfg.batch_timeout_ms) {
			char msg[160];
			snprintf(msg, sizeof msg,
				 "the mesh did not return batch %llu within %lld ms",
				 (unsigned long long)s->inflight[i].id,
				 (long long)s->cfg.batch_timeout_ms);
			lm_warn("%s", msg);
			sched_fail_batch(s, i, LM_ETIMEOUT, msg);
		} else {
			i++;
		}
	}
	/* A COPY whose acknowledgement never came (a worker lost it) holds a quiesce no longer:
	 * its samples' batches, if the rows are missing, are refused and sent again. */
	if (s->copies_out > 0 && now - s->copies_sent_ms > s->cfg.batch_timeout_ms)
		s->copies_out = 0;
	/* A ring that takes nothing (its first worker gone and not coming back, a transport that
	 * never connects) must not hold requests forever. */
	if (s->send_failing_ms != 0 && now - s->send_failing_ms > s->cfg.batch_timeout_ms) {
		char msg[160];
		snprintf(msg, sizeof msg, "the first worker has taken no batch for %lld ms",
			 (long long)(now - s->send_failing_ms));
		lm_warn("%s", msg);
		sched_fail_all(s, LM_ETIMEOUT, msg);
		s->send_failing_ms = 0;
	}
}

/* Once sched_quiesce asked and nothing is in flight: the live slots and their lengths, for
 * sched_quiesce to return. */
static void sched_publish_quiesced(struct sched *s)
{
	if (s->n_inflight > 0 || s->copies_out > 0)
		return;
	int32_t k = 0;
	for (int32_t i = 0; i < s->cfg.slots; i++)
		if (s->slot_seq[i] != NULL) {
			s->snap[k++] = (struct sched_slot){i, s->slot_seq[i]->n_done};
			/* A redeploy may replace the last worker: its grammars go again. */
			s->slot_seq[i]->gr_sent = false;
		}
	pthread_mutex_lock(&s->mu);
	s->n_snap = k;
	s->quiesced = s->quiesce;
	pthread_cond_broadcast(&s->qcv);
	pthread_mutex_unlock(&s->mu);
}

/* Under mu: the slots as sched_slots shows them. */
static void sched_publish_slots(struct sched *s)
{
	for (int32_t i = 0; i < s->cfg.slots; i++) {
		const struct sched_seq *q = s->slot_seq[i];
		struct sched_slot_view *v = &s->view[i];
		*v = (struct sched_slot_view){.reserved =
						      i >= s->cfg.slots - s->cfg.reserved_slots};
		if (q != NULL) {
			v->busy = true;
			v->seq_id = q->id;
			v->n_prompt = q->n_prompt;
			v->n_gen = q->n_gen;
			v->n_past = q->n_done;
			v->n_cached = q->reused;
		} else if (s->cfg.prefix_cache) {
			v->n_past = v->n_cached = s->prefix.slot[i].n;
		}
	}
}

/* Under mu: sleeps until another thread hands something over (or SCHED_IDLE_WAIT_MS, for the
 * timeouts), unless something already waits. */
static void sched_wait(struct sched *s)
{
	if (s->inbox == NULL && s->n_cancels == 0 && s->n_rx == 0 && !s->stopping)
		lm_cond_wait_ms(&s->cv, &s->mu, SCHED_IDLE_WAIT_MS);
}

static void *sched_main(void *arg)
{
	struct sched *s = arg;
	struct sched_turn t = {.blamed = s->turn_blamed};

	pthread_mutex_lock(&s->mu);
	while (!s->stopping) {
		sched_take(s, &t);
		pthread_mutex_unlock(&s->mu);

		sched_enqueue(s, t.in);
		sched_receive(s, &t);
		sched_apply_cancels(s, &t);
		sched_apply_mesh_state(s, &t);
		if (t.up && t.paused) {
			/* Held: requests take slots, nothing is sent; those held too long fail. */
			sched_admit(s);
			sched_check_held(s, t.why);
			s->send_failing_ms = 0; /* a pause is not the ring failing */
		} else if (t.up) {
			sched_check_timeouts(s);
			sched_admit(s);
			if (!t.quiesce)
				sched_send_copies(s);
			sched_send_release(s);
			if (!t.quiesce)
				sched_dispatch(s);
		}
		if (t.quiesce && !t.quiesced)
			sched_publish_quiesced(s);
		sched_publish_oldest(s);
		/* A turnaround ends with the turn: a FORWARD sent later (a new request's, after
		 * the last one ended) did not wait for those tokens. */
		s->tokens_at = 0;

		pthread_mutex_lock(&s->mu);
		sched_publish_slots(s);
		sched_wait(s);
	}
	pthread_mutex_unlock(&s->mu);
	free(t.cancels);
	free(t.rx);
	return NULL;
}

/* ------------------------------------------------------------------ public */

int sched_start(struct sched **out, const struct sched_cfg *cfg, lm_diag *d)
{
	int rc;
	struct sched *s = calloc(1, sizeof *s);
	*out = NULL;
	if (s == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	s->cfg = *cfg;
	if (s->cfg.max_inflight < 1)
		s->cfg.max_inflight = 1;
	if (s->cfg.max_inflight > SCHED_MAX_INFLIGHT)
		s->cfg.max_inflight = SCHED_MAX_INFLIGHT;
	if (s->cfg.prefill_chunk < 1)
		s->cfg.prefill_chunk = s->cfg.max_batch;
	if (s->cfg.batch_timeout_ms <= 0)
		s->cfg.batch_timeout_ms = 30000;
	if (s->cfg.request_timeout_ms <= 0)
		s->cfg.request_timeout_ms = s->cfg.batch_timeout_ms;
	if (s->cfg.n_workers < 0)
		s->cfg.n_workers = 0;
	s->stats.n_workers = s->cfg.n_workers;
	s->stats.max_inflight = s->cfg.max_inflight;
	if (s->cfg.max_draft >= s->cfg.max_batch)
		s->cfg.max_draft = s->cfg.max_batch - 1;
	s->available = true;
	s->next_seq_id = 1;
	s->next_batch_id = 1;
	s->lim = (struct wire_limits){.fingerprint = cfg->fingerprint,
				      .slots = cfg->slots,
				      .max_seq = cfg->max_seq,
				      .dim = 1,
				      .n_vocab = cfg->n_vocab,
				      .max_batch = cfg->max_batch,
				      .max_seqs = cfg->slots,
				      .max_logprobs = cfg->max_logprobs,
				      .max_draft = cfg->max_draft};
	int32_t slots = cfg->slots;
	s->slot_seq = calloc((size_t)slots, sizeof *s->slot_seq);
	s->snap = calloc((size_t)slots, sizeof *s->snap);
	s->release = calloc((size_t)slots * 2, sizeof *s->release);
	s->copies = calloc((size_t)slots, sizeof *s->copies);
	s->copy_dst = calloc((size_t)slots, sizeof *s->copy_dst);
	s->view = calloc((size_t)slots, sizeof *s->view);
	s->free_slot = calloc((size_t)slots, sizeof *s->free_slot);
	s->wseqs = calloc((size_t)slots, sizeof *s->wseqs);
	s->ids = calloc((size_t)cfg->max_batch, sizeof *s->ids);
	size_t nw = (size_t)s->cfg.n_workers + 1;
	s->blamed = calloc(nw, sizeof *s->blamed);
	s->turn_blamed = calloc(nw, sizeof *s->turn_blamed);
	s->stats.worker_replays = calloc(nw, sizeof *s->stats.worker_replays);
	bool ok = s->slot_seq && s->snap && s->release && s->copies && s->copy_dst && s->view &&
		  s->free_slot && s->wseqs && s->ids && s->blamed && s->turn_blamed &&
		  s->stats.worker_replays &&
		  (!cfg->prefix_cache ||
		   prefix_init(&s->prefix, slots, cfg->max_seq, cfg->ring_rollback, NULL) == 0) &&
		  wire_scratch_init_rows(&s->scratch, slots,
					 cfg->max_batch > slots ? cfg->max_batch : slots) == 0;
	s->prefix.ring_ctx = cfg->prefix_cache ? cfg->ring_ctx : 0;
	s->prefix.rec_keep = cfg->prefix_cache && cfg->recurrent ? cfg->rec_keep : -1;
	for (int32_t i = 0; ok && i < SCHED_MAX_INFLIGHT; i++) {
		struct sched_batch *b = &s->inflight[i];
		b->seqs = calloc((size_t)slots, sizeof *b->seqs);
		b->chunk = calloc((size_t)slots, sizeof *b->chunk);
		b->sample = calloc((size_t)slots, sizeof *b->sample);
		b->n_draft = calloc((size_t)slots, sizeof *b->n_draft);
		b->draft_at = calloc((size_t)slots, sizeof *b->draft_at);
		b->drafts = calloc((size_t)cfg->max_batch, sizeof *b->drafts);
		ok = b->seqs && b->chunk && b->sample && b->n_draft && b->draft_at && b->drafts;
	}
	if (!ok || nng_aio_alloc(&s->rx_aio, sched_rx_cb, s) != 0)
		goto nomem;
	pthread_mutex_init(&s->mu, NULL);
	lm_cond_init(&s->cv);
	lm_cond_init(&s->qcv);
	lm_log_limit_init(&s->log_limit, 1000);
	s->locks_ready = true;
	if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
		rc = lm_fail(d, LM_EOS, "cannot start the scheduler thread");
		goto fail;
	}
	s->running = true;
	nng_recv_aio(cfg->pull, s->rx_aio);
	*out = s;
	return 0;
nomem:
	rc = lm_fail(d, LM_ENOMEM, "out of memory");
fail:
	sched_fini(s); /* not running: frees only what was allocated */
	return rc;
}

void sched_stop(struct sched *s)
{
	if (s == NULL || !s->running)
		return;
	s->running = false;
	/* No receive callback runs after this, so nothing more reaches s->rx. */
	nng_aio_stop(s->rx_aio);
	pthread_mutex_lock(&s->mu);
	s->stopping = true; /* sched_submit refuses from now on */
	pthread_cond_signal(&s->cv);
	struct sched_seq *in = s->inbox;
	s->inbox = s->inbox_tail = NULL;
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	/* Everything still live ends now, on this thread, with its callbacks called. (The inbox
	 * was taken after `stopping` was set, so no request can join it later; the thread, which
	 * takes the inbox only while not stopping, had left it alone.) */
	while (in != NULL) {
		struct sched_seq *q = in;
		in = q->next;
		q->next = NULL;
		q->slot = -1;
		q->on_done(q->arg, SCHED_FINISH_ERROR, LM_ECANCELED, "the coordinator is stopping");
		sched_free_seq(q);
	}
	sched_fail_all(s, LM_ECANCELED, "the coordinator is stopping");
}

void sched_fini(struct sched *s)
{
	if (s == NULL)
		return;
	sched_stop(s);
	if (s->rx_aio != NULL)
		nng_aio_free(s->rx_aio);
	for (int32_t i = 0; i < s->n_rx; i++)
		nng_msg_free(s->rx[i].m);
	if (s->locks_ready) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		pthread_cond_destroy(&s->qcv);
		lm_log_limit_fini(&s->log_limit);
	}
	free(s->blamed);
	free(s->turn_blamed);
	free((void *)s->stats.worker_replays);
	for (int32_t i = 0; i < SCHED_MAX_INFLIGHT; i++) {
		free(s->inflight[i].seqs);
		free(s->inflight[i].chunk);
		free(s->inflight[i].sample);
		free(s->inflight[i].n_draft);
		free(s->inflight[i].draft_at);
		free(s->inflight[i].drafts);
	}
	free(s->slot_seq);
	free(s->snap);
	free(s->release);
	free(s->copies);
	free(s->copy_dst);
	free(s->view);
	free(s->free_slot);
	prefix_fini(&s->prefix);
	free(s->wseqs);
	free(s->ids);
	free(s->cancels);
	free(s->rx);
	wire_scratch_fini(&s->scratch);
	wire_buf_fini(&s->buf);
	free(s);
}

void sched_cancel(struct sched *s, uint64_t seq_id)
{
	pthread_mutex_lock(&s->mu);
	if (s->n_cancels == s->cap_cancels) {
		int32_t cap = s->cap_cancels ? s->cap_cancels * 2 : 16;
		uint64_t *c = realloc(s->cancels, (size_t)cap * sizeof *c);
		if (c == NULL) {
			pthread_mutex_unlock(&s->mu);
			return; /* the request runs to its end instead */
		}
		s->cancels = c;
		s->cap_cancels = cap;
	}
	s->cancels[s->n_cancels++] = seq_id;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void sched_set_available(struct sched *s, bool up, const char *why)
{
	pthread_mutex_lock(&s->mu);
	s->available = up;
	snprintf(s->why, sizeof s->why, "%s", why != NULL ? why : "");
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void sched_pause(struct sched *s, const char *why)
{
	pthread_mutex_lock(&s->mu);
	s->paused = true;
	s->pauses++;
	snprintf(s->why, sizeof s->why, "%s", why != NULL ? why : "");
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int sched_quiesce(struct sched *s, int64_t timeout_ms, struct sched_slot *out, int32_t cap,
		  int32_t *n, lm_diag *d)
{
	int64_t until = lm_now_ms() + timeout_ms;
	pthread_mutex_lock(&s->mu);
	s->quiesce = true;
	s->quiesced = false;
	pthread_cond_signal(&s->cv);
	while (!s->quiesced && lm_cond_wait_until(&s->qcv, &s->mu, until))
		;
	if (!s->quiesced) {
		s->quiesce = false;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		return lm_fail(d, LM_ETIMEOUT, "batches were still in flight after %lld ms",
			       (long long)timeout_ms);
	}
	*n = s->n_snap < cap ? s->n_snap : cap;
	memcpy(out, s->snap, (size_t)*n * sizeof *out);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void sched_resume(struct sched *s, bool replay)
{
	pthread_mutex_lock(&s->mu);
	s->paused = false;
	s->quiesce = false;
	s->quiesced = false;
	s->replay_pending |= replay;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void sched_blame(struct sched *s, int32_t j)
{
	if (j < 0 || j >= s->cfg.n_workers)
		return;
	pthread_mutex_lock(&s->mu);
	s->blamed[j] = true;
	pthread_mutex_unlock(&s->mu);
}

bool sched_oldest(const struct sched *s, uint64_t *batch_id, int64_t *sent_ms)
{
	*sent_ms = atomic_load(&((struct sched *)s)->oldest_sent_ms);
	*batch_id = atomic_load(&((struct sched *)s)->oldest_id);
	return *batch_id != 0;
}

const struct sched_stats *sched_stats(const struct sched *s)
{
	return &s->stats;
}

int32_t sched_slots(struct sched *s, struct sched_slot_view *out, int32_t cap)
{
	int32_t n = s->cfg.slots < cap ? s->cfg.slots : cap;
	pthread_mutex_lock(&s->mu);
	memcpy(out, s->view, (size_t)n * sizeof *out);
	pthread_mutex_unlock(&s->mu);
	return n;
}

int32_t sched_open_slots(const struct sched *s)
{
	return s->cfg.slots - s->cfg.reserved_slots;
}

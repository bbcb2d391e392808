/* sched_submit.c — a request checked and queued for the scheduler's thread. See scheduler.h. */
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "coordinator/sched/sched_impl.h"
#include "coordinator/sched/scheduler.h"

/* The request's penalties, biases and stop ids. */
static int sched_check_adjust(const struct sched *s, const struct sched_req *r,
			      struct lm_penalties *pen, lm_diag *d)
{
	*pen = r->penalties;
	if (pen->repeat == 0)
		pen->repeat = 1; /* a zeroed struct: no penalty */
	const struct lm_penalties *p = pen;
	if (p->last_n < 0 || p->last_n > LM_MAX_PENALTY_WINDOW)
		return lm_fail(d, LM_EINVAL, "a penalty window of %d tokens (at most %d)",
			       p->last_n, LM_MAX_PENALTY_WINDOW);
	if (r->n_bias < 0 || (r->n_bias > 0 && r->bias == NULL) || r->n_stop_ids < 0 ||
	    r->n_stop_ids > SCHED_MAX_REQ_STOPS || (r->n_stop_ids > 0 && r->stop_ids == NULL))
		return lm_fail(d, LM_EINVAL, "malformed biases or stop ids");
	const struct lm_logit_adjust a = {.presence = p->presence,
					  .frequency = p->frequency,
					  .repeat = p->repeat,
					  .bias = r->bias,
					  .n_bias = r->n_bias};
	int rc = lm_logit_adjust_check(&a, s->cfg.n_vocab, d);
	if (rc != 0)
		return rc;
	for (int32_t i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] < 0 || r->stop_ids[i] >= s->cfg.n_vocab)
			return lm_fail(d, LM_EINVAL, "stop id %d is not in the vocabulary",
				       r->stop_ids[i]);
	return 0;
}

/* A request's prompt, limits and sampling against the scheduler's; its penalties into *pen. */
static int sched_check_req(const struct sched *s, const struct sched_req *r,
			   struct lm_penalties *pen, lm_diag *d)
{
	int rc;
	if (r->n_prompt < 1)
		return lm_fail(d, LM_EINVAL, "the prompt has no tokens");
	if (r->n_prompt >= s->cfg.max_seq)
		return lm_fail(
			d, LM_EINVAL,
			"the prompt has %d tokens; the context holds %d (prompt plus at least "
			"one generated token)",
			r->n_prompt, s->cfg.max_seq);
	for (int32_t i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= s->cfg.n_vocab)
			return lm_fail(d, LM_EINVAL,
				       "prompt token %d (id %d) is not in the vocabulary", i,
				       r->prompt[i]);
	if (r->max_tokens < 0)
		return lm_fail(d, LM_EINVAL, "max_tokens must not be negative");
	if (r->n_logprobs < 0 || r->n_logprobs > s->cfg.max_logprobs)
		return lm_fail(d, LM_EINVAL, "logprobs must be in [0, %d]", s->cfg.max_logprobs);
	if ((rc = lm_sampling_check(&r->sampling, d)) != 0)
		return rc;
	if (r->grammar != NULL && (r->grammar[0] == '\0' || strlen(r->grammar) > WIRE_MAX_GRAMMAR))
		return lm_fail(d, LM_EINVAL, "the grammar is empty or longer than %d bytes",
			       WIRE_MAX_GRAMMAR);
	return sched_check_adjust(s, r, pen, d);
}

/* The sequence of a checked request, not yet queued (*out; the caller frees it with
 * sched_free_seq). */
static int sched_new_seq(const struct sched *s, const struct sched_req *r,
			 const struct lm_penalties *pen, struct sched_seq **out, lm_diag *d)
{
	struct sched_seq *q = calloc(1, sizeof *q);
	if (q == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	if (r->n_bias > 0) {
		q->bias = malloc((size_t)r->n_bias * sizeof *q->bias);
		if (q->bias == NULL) {
			free(q);
			return lm_fail(d, LM_ENOMEM, "out of memory");
		}
		memcpy(q->bias, r->bias, (size_t)r->n_bias * sizeof *q->bias);
		q->n_bias = r->n_bias;
	}
	q->pen = *pen;
	q->n_stop_ids = r->n_stop_ids;
	if (r->n_stop_ids > 0) /* stop_ids may be NULL then, which memcpy must not see */
		memcpy(q->stop_ids, r->stop_ids, (size_t)r->n_stop_ids * sizeof *q->stop_ids);
	q->cap = s->cfg.max_seq;
	q->tok = malloc((size_t)q->cap * sizeof *q->tok);
	if (q->tok == NULL || (r->grammar != NULL && (q->grammar = strdup(r->grammar)) == NULL)) {
		sched_free_seq(q);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	memcpy(q->tok, r->prompt, (size_t)r->n_prompt * sizeof *q->tok);
	q->n_tok = q->n_prompt = r->n_prompt;
	q->slot = -1;
	if (r->probe) {
		if (s->cfg.reserved_slots < 1) {
			sched_free_seq(q);
			return lm_fail(d, LM_EINVAL, "this scheduler keeps no slot for probes");
		}
		q->slot = s->cfg.slots - s->cfg.reserved_slots;
	}
	q->max_tokens = r->max_tokens;
	q->spec = !r->no_speculate && !r->probe;
	q->no_cache = r->no_cache || r->probe;
	q->cached = r->cached;
	q->leader = r->probe ? 0 : r->share_prompt_of;
	spec_adapt_init(&q->adapt, s->cfg.max_draft);
	q->n_logprobs = r->n_logprobs;
	q->sampling = r->sampling;
	q->on_token = r->on_token;
	q->on_done = r->on_done;
	q->arg = r->arg;
	q->t_submit_ns = lm_now_ns();
	q->progress_ms = lm_now_ms();
	*out = q;
	return 0;
}

int sched_submit(struct sched *s, const struct sched_req *r, uint64_t *seq_id, lm_diag *d)
{
	struct lm_penalties pen;
	struct sched_seq *q = NULL;
	int rc;
	if ((rc = sched_check_req(s, r, &pen, d)) != 0 ||
	    (rc = sched_new_seq(s, r, &pen, &q, d)) != 0)
		return rc;

	pthread_mutex_lock(&s->mu);
	if (!s->available || s->stopping) {
		rc = lm_fail(d, LM_EUNAVAILABLE, "%s",
			     s->stopping ? "the coordinator is stopping" : s->why);
		pthread_mutex_unlock(&s->mu);
		sched_free_seq(q);
		return rc;
	}
	/* Requests not yet admitted count against the bound only past the free slots they are
	 * about to take. */
	int32_t free_slots = s->cfg.slots - s->cfg.reserved_slots - atomic_load(&s->stats.active);
	if (!r->probe && s->cfg.max_queued > 0 &&
	    atomic_load(&s->stats.queued) - (free_slots > 0 ? free_slots : 0) >=
		    s->cfg.max_queued) {
		rc = lm_fail(d, LM_EBUSY,
			     "%d requests wait for a slot already, the limit ([coordinator] "
			     "max_queued); try again shortly",
			     (int)s->cfg.max_queued);
		pthread_mutex_unlock(&s->mu);
		sched_free_seq(q);
		return rc;
	}
	q->id = s->next_seq_id++;
	*seq_id = q->id;
	if (r->max_tokens == 0) {
		/* Nothing to generate: done without touching the mesh. */
		pthread_mutex_unlock(&s->mu);
		atomic_fetch_add(&s->stats.requests, 1);
		lm_hist_observe(&s->stats.duration, lm_now_ns() - q->t_submit_ns);
		q->on_done(q->arg, SCHED_FINISH_LENGTH, 0, NULL);
		sched_free_seq(q);
		return 0;
	}
	if (s->inbox_tail != NULL)
		s->inbox_tail->next = q;
	else
		s->inbox = q;
	s->inbox_tail = q;
	atomic_fetch_add(&s->stats.requests, 1);
	atomic_fetch_add(&s->stats.queued, 1);
	atomic_fetch_add(&s->stats.prompt_tokens, (uint64_t)r->n_prompt);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

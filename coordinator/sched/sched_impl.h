/* sched_impl.h — what the scheduler's files share: its sequences, batches and state.
 * Internal to coordinator/sched (scheduler.c, sched_submit.c). See scheduler.h. */
#ifndef LM_SCHED_IMPL_H
#define LM_SCHED_IMPL_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/log.h"
#include "coordinator/sched/scheduler.h"

#define SCHED_MAX_INFLIGHT 64 /* a 60-stage ring keeps every stage busy */
#define SCHED_IDLE_WAIT_MS 50

struct sched_seq {
	uint64_t id;
	int32_t slot; /* -1 while queued */
	int32_t *tok; /* [cap]: prompt then generated tokens */
	int32_t n_tok, cap;
	int32_t n_prompt, n_gen;
	int32_t n_done; /* positions whose KV rows the workers hold */
	int32_t max_tokens;
	int32_t n_logprobs;
	struct lm_sampling sampling;
	struct lm_penalties pen;
	struct lm_logit_bias *bias; /* [n_bias] */
	struct lm_logit_adjust adj; /* what the next sampled step sends */
	int32_t stop_ids[SCHED_MAX_REQ_STOPS];
	int32_t n_bias, n_stop_ids;
	char *grammar;           /* sched_req.grammar, or NULL */
	struct wire_grammar wgr; /* what the next sampled step sends of it */
	bool gr_sent; /* the last worker has the grammar (reset when the sequence restarts) */
	void (*on_token)(void *, int32_t, float, const int32_t *, const float *, int32_t);
	void (*on_done)(void *, enum sched_finish, int, const char *);
	void *arg;
	bool inflight;
	bool cancel;
	bool solo; /* a batch with it made a non-finite value: it goes alone, to tell whose */
	bool spec; /* may speculate (the request did not opt out) */
	struct spec_adapt adapt; /* how many tokens it drafts next (spec_adapt.h) */
	int32_t asked_at;        /* n_tok when the draft source was last asked (0: never) */
	bool no_cache;           /* reuses no slot's rows */
	int32_t *cached;         /* sched_req.cached */
	/* Parallel samples (sched_req.share_prompt_of): the sequence whose prompt rows this one
	 * waits for (0: none); its COPY is queued and not yet sent; it has samples waiting. */
	uint64_t leader;
	int32_t reused; /* prompt rows it did not compute: the prefix cache's, or copied */
	bool copy_queued;
	bool has_followers;
	int32_t hi; /* the highest position its batches wrote in its slot */
	/* The positions [last_at, last_end) of the last batch sent for its slot (or of what it
	 * found there): what a recurrent stage keeps states of (prefix.h). */
	int32_t last_at, last_end;
	int64_t progress_ms; /* lm_now_ms at submit and whenever a batch of it came back */
	int32_t retries;     /* batches of this sequence refused since one went through */
	uint64_t t_submit_ns, t_last_ns; /* lm_now_ns at submit and at its last generated token */
	struct sched_seq *next;          /* inbox / wait queue link */
};

struct sched_batch {
	uint64_t id;
	int64_t sent_ms;
	int32_t n;
	struct sched_seq **seqs; /* [slots] */
	int32_t *chunk;          /* [slots] tokens of each sequence in the batch */
	bool *sample;            /* [slots] */
	int32_t *n_draft;        /* [slots] drafted tokens among a sequence's chunk */
	int32_t *draft_at;       /* [slots] where its drafts start in `drafts` */
	int32_t *drafts;         /* [max_batch] every drafted id of the batch, in order */
	int32_t n_drafts;
};

/* A ring message and when it arrived (lm_now_ns, on the receive callback). */
struct sched_rx {
	nng_msg *m;
	uint64_t at;
};

struct sched {
	struct sched_cfg cfg;
	pthread_t thread;
	bool locks_ready; /* mu, cv and qcv are initialised (sched_fini destroys them) */
	bool running;     /* the thread and the receive run (sched_stop ends them) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Shared with other threads, under mu. */
	bool stopping, available;
	bool paused, replay_pending;
	bool quiesce,
		quiesced;   /* sched_quiesce asked / the thread stopped with nothing in flight */
	pthread_cond_t qcv; /* signalled when `quiesced` becomes true */
	struct sched_slot *snap; /* [slots]: the live slots when quiesced */
	int32_t n_snap;
	uint64_t pauses; /* counts sched_pause calls: a pause lifted before the thread woke up
			  * must still make it forget the batches in flight */
	char why[256];
	struct sched_seq *inbox, *inbox_tail;
	uint64_t *cancels;
	int32_t n_cancels, cap_cancels;
	struct sched_rx *rx;
	int32_t n_rx, cap_rx;
	uint64_t next_seq_id;
	/* The scheduler thread's own. */
	struct sched_seq **slot_seq; /* [slots] */
	struct sched_seq *wait_head, *wait_tail;
	struct sched_batch inflight[SCHED_MAX_INFLIGHT];
	int32_t n_inflight;
	int64_t send_failing_ms; /* since when FORWARDs cannot be sent; 0 while they can */
	/* When the last TOKENS that came back arrived, until the turn that handled it sends a
	 * FORWARD (the turnaround histogram) or ends; 0: none. */
	uint64_t tokens_at;
	int32_t rr; /* round-robin start for fairness */
	uint64_t next_batch_id;
	int32_t *release; /* [slots] slots to empty on the workers */
	int32_t n_release;
	struct prefix_index prefix; /* what idle slots hold (cfg.prefix_cache) */
	/* [slots] COPYs to send (a prompt's rows into its samples' slots), before any FORWARD;
	 * COPYs sent and not yet back, and when the last went. */
	struct sched_copy {
		int32_t src, dst, len;
		int32_t gain; /* the prompt rows it spares its sample (counted once it is sent) */
	} * copies;
	int32_t n_copies;
	struct sched_slot_view *view; /* [slots], under mu: what sched_slots shows */
	int32_t *copy_dst;            /* [slots] scratch for one COPY's destinations */
	int32_t copies_out;
	int64_t copies_sent_ms;
	bool *free_slot; /* [slots] scratch for sched_admit */
	nng_aio *rx_aio;
	struct wire_buf buf;
	struct wire_scratch scratch;
	struct wire_limits lim;
	struct wire_seq *wseqs;     /* [slots] */
	int32_t *ids;               /* [max_batch] */
	uint64_t pauses_seen;       /* the thread's copy of `pauses` */
	int64_t paused_since_ms;    /* the thread's: when the current hold began (0: not held) */
	bool *blamed;               /* [n_workers], under mu: causes of the next replay */
	bool *turn_blamed;          /* [n_workers], the thread's copy for one turn */
	_Atomic uint64_t oldest_id; /* the batch travelling longest (0: none) ... */
	_Atomic int64_t oldest_sent_ms; /* ... and when it was sent */
	struct lm_log_limit log_limit;  /* what peers make the scheduler say, once a second */
	struct sched_stats stats;
};

/* Frees a sequence that no longer belongs to anything (scheduler.c). */
void sched_free_seq(struct sched_seq *q);

/* Asks the draft source for up to `room` tokens to follow decoding sequence q, into b's drafts
 * (not counted in yet); how many (sched_draft.c). */
int32_t sched_draft(struct sched *s, struct sched_seq *q, int32_t room, struct sched_batch *b);

#endif

/* scheduler.h — the coordinator's scheduler: sequences, continuous batching and the data ring.
 *
 * One thread owns every sequence. Each step it packs the next token of every decoding sequence
 * and chunks of prefilling ones into one FORWARD batch (continuous batching), sends it into the
 * ring at the first worker, and keeps up to `max_inflight` batches travelling so every stage
 * has work (micro-batch pipelining). The last worker samples and sends TOKENS back; the
 * scheduler appends each token to its sequence and reports it through the request's callbacks.
 *
 * A sequence holds one KV slot, the same slot index on every worker, from admission to its end.
 * The scheduler keeps every sequence's tokens (prompt and generated): that history is what a
 * restarted worker's cache is rebuilt from.
 *
 * Speculation (cfg.draft, coordinator/sched/spec.h). A decoding sequence that may speculate sends its
 * last token and up to max_draft drafted ones in one batch, beside sequences that do not; the
 * last worker returns the drafts it accepted and its own next token, all of which the request
 * receives in order (each through on_token, each checked for a stop). Its next batch starts
 * right after what was accepted, which rolls every worker's cache back past the rejected
 * drafts (wire.h): nothing else is sent. The tokens are the ones plain decoding gives: the last
 * worker draws each from the draw plain decoding would make at that step.
 *
 * Threads. sched_submit and sched_cancel may be called from any thread. Callbacks run on the
 * scheduler thread: they must not block, and may call sched_cancel.
 */
#ifndef LM_SCHEDULER_H
#define LM_SCHEDULER_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/base/metrics.h"
#include "common/model/sampling.h"
#include "common/wire/link.h"
#include "common/wire/wire.h"
#include "coordinator/sched/spec.h"
#include "coordinator/sched/prefix.h"
#include "coordinator/sched/spec_adapt.h"

enum sched_finish {
	SCHED_FINISH_LENGTH = 0, /* max_tokens or the context filled up */
	SCHED_FINISH_STOP = 1,   /* the model ended the text (EOS, EOT or BOS) */
	SCHED_FINISH_CANCEL = 2, /* sched_cancel (client gone, stop string matched) */
	SCHED_FINISH_ERROR = 3,  /* the mesh failed the request: see the message */
};

struct sched_req {
	const int32_t *prompt; /* copied at submit */
	int32_t n_prompt;
	int32_t max_tokens;
	struct lm_sampling sampling;
	int32_t n_logprobs;
	/* Presence, frequency and repeat penalties over the sequence's last penalties.last_n
	 * tokens (zeroed: none; a repeat of 0 is taken as 1), and logit biases (copied; at most
	 * LM_MAX_LOGIT_BIAS): sent to the last worker with every sampled step. */
	struct lm_penalties penalties;
	const struct lm_logit_bias *bias;
	int32_t n_bias;
	/* Token ids that end this sequence besides the scheduler's (a chat template's end of
	 * turn), at most SCHED_MAX_REQ_STOPS; copied. */
	const int32_t *stop_ids;
	int32_t n_stop_ids;
	bool probe; /* run in the reserved slot (smoke tests, diffs); fails with LM_EBUSY if taken */
	bool no_cache; /* compute the whole prompt, reusing no slot's rows (cache_prompt false) */
	/* Where the scheduler writes how many prompt tokens it reused from a slot's rows (the
	 * prefix cache), when the request takes its slot, before any on_token. May be NULL. */
	int32_t *cached;
	bool no_speculate; /* decode one token a step even where the scheduler has drafts */
	/* GBNF the output is held to (constrained decoding), or NULL; copied. The last worker
	 * gets it with the sequence's first sampled step, and again with the tokens generated so
	 * far whenever its matcher may be gone (a replay, a quiesce for a redeploy). */
	const char *grammar;
	/* Parallel samples: the id of a request submitted before this one with the same prompt.
	 * This one waits until that sequence's prompt rows are computed, then every worker copies
	 * them into this one's slot (a COPY, wire.h) and it computes only the prompt's last
	 * token, with its own sampling. If that sequence is gone first (or its prompt differs),
	 * this one computes its prompt itself. 0: none. */
	uint64_t share_prompt_of;
	/* One generated token; top_ids/top_lp hold n_top alternatives. */
	void (*on_token)(void *arg, int32_t token, float logprob, const int32_t *top_ids,
			 const float *top_lp, int32_t n_top);
	/* The end, exactly once. code is 0 or an LM_E* value with `msg`. */
	void (*on_done)(void *arg, enum sched_finish why, int code, const char *msg);
	void *arg;
};

#define SCHED_MAX_REQ_STOPS 4

struct sched_cfg {
	uint64_t fingerprint;
	int32_t max_queued; /* requests waiting for a slot at most (sched_submit: LM_EBUSY); 0: no
			     * bound */
	int32_t slots;      /* KV slots per worker */
	int32_t reserved_slots; /* the last ones, kept for probes, never admitted */
	int32_t max_seq;        /* context per sequence */
	int32_t max_batch;      /* tokens per FORWARD */
	int32_t max_inflight; /* batches travelling at once (>= 1; the stage count is a good value) */
	int32_t prefill_chunk; /* prompt tokens of one sequence per batch */
	int32_t n_vocab;
	int32_t max_logprobs;
	/* Token ids that end a sequence (every end-of-generation id, and BOS), at most 32. */
	int32_t stop_ids[32];
	int32_t n_stop_ids;
	int64_t batch_timeout_ms; /* a batch not back by then fails its sequences */
	/* While dispatch is held (a worker down), a request that has gone this long without
	 * progress fails with LM_EUNAVAILABLE and the reason ([coordinator] request_timeout);
	 * 0: batch_timeout_ms. */
	int64_t request_timeout_ms;
	int32_t n_workers; /* for the replays counted per worker (sched_blame); may be 0 */
	/* Speculative decoding: drafts of up to max_draft tokens (< max_batch, and no more than
	 * the workers were assigned) from `draft`; iface NULL: none. The scheduler uses the
	 * source on its own thread; it stays the caller's. */
	struct spec_source draft;
	int32_t max_draft;
	/* Above this many sequences holding slots, none drafts (0: no bound): a full batch
	 * already shares each weight read among them, and drafts only add rows. */
	int32_t spec_max_streams;
	/* The prefix cache (prefix.h): an ended sequence's rows stay in its slot, and a request
	 * that shares their prefix starts after it. ring_rollback: how many rows below a slot's
	 * high-water mark its sliding-window rings can roll back (kv_geom_ring_extra + 1); < 0 when
	 * the model has no sliding-window layer. */
	bool prefix_cache;
	int32_t ring_rollback;
	int32_t ring_ctx; /* rows of the smallest sliding ring; 0: not known (prefix.h) */
	/* The model has recurrent layers, each keeping rec_keep states per slot beside its live
	 * one (kv_geom_rec_keep): a slot's rows are reused only at a length every stage can
	 * return to (prefix.h). */
	bool recurrent;
	int32_t rec_keep;
	/* Stamp every FORWARD with the time it is sent (wire.h's ring stamp), which the workers
	 * carry on, so that each hop's transit is measured (the workers' transit histograms and
	 * stats.ring_return). Every worker must be of a build that knows the stamp. */
	bool ring_stamps;
	struct lm_link *push; /* to the first worker; opened and dialled by the caller */
	nng_socket pull;      /* from the last worker; opened and listening */
};

struct sched_stats {
	_Atomic uint64_t requests, tokens_generated, prompt_tokens, batches, ring_errors;
	_Atomic uint64_t replays;           /* sequences re-prefilled after a worker fault */
	_Atomic uint64_t batches_forgotten; /* in flight when a worker went down */
	/* Speculation: tokens drafted and sent, drafts the last worker accepted, the
	 * sequence-steps that carried a draft, and the shadow drafts of sequences that had
	 * stopped drafting (spec_adapt.h: asked, never sent). */
	_Atomic uint64_t spec_drafted, spec_accepted, spec_steps, spec_shadowed;
	/* Prompt tokens whose rows a slot still held from an earlier sequence (the prefix cache):
	 * counted in prompt_tokens, never computed. */
	_Atomic uint64_t prompt_cached;
	/* Prompt tokens whose rows were copied from a parallel sample's slot (share_prompt_of):
	 * counted in prompt_tokens, never computed. */
	_Atomic uint64_t prompt_shared;
	/* Prompt positions sent through the ring to be computed: each prompt token a request did
	 * not reuse or copy, and again each one a replay or a refused batch sent again. */
	_Atomic uint64_t prompt_computed;
	_Atomic int32_t cached_slots; /* idle slots whose rows the prefix cache keeps */
	_Atomic int32_t active, queued;
	/* [n_workers]: sequences replayed because that worker went down (sched_blame). A fault
	 * that took several workers down at once counts for each of them. */
	_Atomic uint64_t *worker_replays;
	int32_t n_workers;
	int32_t max_inflight; /* the batches it keeps on the ring (cfg.max_inflight, bounded) */
	/* Per request, in nanoseconds from sched_submit: to its first generated token (ttft), and
	 * to its end for any reason (duration); per generated token after the first, the time
	 * since the one before (token). ttft and token together count tokens_generated. */
	struct lm_hist ttft, token, duration;
	/* Per request, from sched_submit to taking a slot. */
	struct lm_hist queue_wait;
	/* Per ring message, the coordinator's hand-off of it to the first worker (the ring's
	 * first hop, as each worker's send histogram is the next one). */
	struct lm_hist send;
	/* The coordinator's part of the ring, per message: from the last worker's ring stamp to
	 * the arrival here (ring_return; stamped TOKENS only, cfg.ring_stamps); from the arrival
	 * to the scheduler thread's taking it (wake); and from a TOKENS' arrival to the start of
	 * the send of the FORWARD the turn that handled it sent (turnaround: waking, handling
	 * the tokens, the requests' callbacks, building and encoding the batch). */
	struct lm_hist ring_return, wake, turnaround;
};

struct sched;

/* Lifecycle (STYLE.md's verbs): start, then stop (waits), then fini (frees).
 *
 * sched_start allocates the scheduler, starts its thread and posts the first receive on
 * cfg->pull; on failure nothing is left allocated. The sockets stay the caller's. */
int sched_start(struct sched **out, const struct sched_cfg *cfg, lm_diag *d);
/* Stops receiving, joins the thread, then fails every live request (queued, admitted or in
 * flight) with LM_ECANCELED "the coordinator is stopping", calling their on_done on the
 * caller's thread. Frees nothing: after it, sched_submit refuses (LM_EUNAVAILABLE) and the
 * other calls are harmless until sched_fini. Call it from the owner's thread; a second call
 * does nothing. NULL is harmless. */
void sched_stop(struct sched *s);
/* Frees the scheduler (and the ring messages it received but never handled). Stops it first
 * if sched_stop was not called. NULL is harmless. */
void sched_fini(struct sched *s);

/* Queues a request. LM_EINVAL for a bad prompt (empty, too long for the context, ids out of
 * the vocabulary) or sampling parameters with d saying why; LM_EUNAVAILABLE when the mesh is
 * down; LM_EBUSY when max_queued requests wait already. On success the
 * request's on_done will be called exactly once; *seq_id names it for sched_cancel. */
int sched_submit(struct sched *s, const struct sched_req *r, uint64_t *seq_id, lm_diag *d);
/* Ends a request early (its on_done reports SCHED_FINISH_CANCEL). Unknown ids are ignored. */
void sched_cancel(struct sched *s, uint64_t seq_id);

/* Marks the mesh up or down. While down, new requests get LM_EUNAVAILABLE with `why`, and live
 * ones fail with it. */
void sched_set_available(struct sched *s, bool up, const char *why);

/* Holds dispatch while a worker is down or restarting. Batches in flight are forgotten (their
 * sequences are sent again later; a late answer to a forgotten batch is ignored), new requests
 * are accepted and wait. */
void sched_pause(struct sched *s, const char *why);
/* Names worker j (0 <= j < cfg.n_workers) as a cause of the next replay: the sequences it
 * rebuilds count in stats.worker_replays[j]. */
void sched_blame(struct sched *s, int32_t j);
/* The batch that has been travelling longest: its id and when it was sent (lm_now_ms); false
 * when none is in flight. As of the scheduler's last turn; from any thread. */
bool sched_oldest(const struct sched *s, uint64_t *batch_id, int64_t *sent_ms);
/* Dispatches again. With `replay`, every live sequence's KV rows are rebuilt on every worker
 * from the token history the scheduler keeps (a restarted worker lost its cache): each
 * sequence is prefilled again from position 0 and then samples its next token with the same
 * (seed, step), so greedy and seeded requests finish exactly as without the fault. */
void sched_resume(struct sched *s, bool replay);

/* A live sequence's place in the workers' caches, as sched_quiesce reports it. */
struct sched_slot {
	int32_t slot;
	int32_t len; /* positions the workers hold */
};
/* Stops dispatching and waits until no batch is in flight (at most timeout_ms: LM_ETIMEOUT,
 * and dispatch resumes). Then every worker sits between two batches with a consistent cache:
 * *n slots (at most cap) are listed in out with their lengths. sched_resume(s, false) ends it. */
int sched_quiesce(struct sched *s, int64_t timeout_ms, struct sched_slot *out, int32_t cap,
		  int32_t *n, lm_diag *d);

const struct sched_stats *sched_stats(const struct sched *s);

/* One KV slot as sched_slots shows it (llama-server's /slots). */
struct sched_slot_view {
	bool busy;       /* a sequence holds it */
	bool reserved;   /* kept for probes */
	uint64_t seq_id; /* the sequence's (busy) */
	int32_t n_prompt, n_gen;
	int32_t n_past;   /* positions the workers hold for it */
	int32_t n_cached; /* busy: prompt rows it reused or copied; idle: the rows the prefix cache
			   * keeps there */
};
/* Every slot's view as of the scheduler's last turn (at most cap, into out): how many. From any
 * thread. */
int32_t sched_slots(struct sched *s, struct sched_slot_view *out, int32_t cap);

/* The slots requests may take (cfg.slots less the reserved): the most sequences, parallel
 * samples of one request included, that run at once. From any thread. */
int32_t sched_open_slots(const struct sched *s);

#endif

/* stage.h — one worker's pipeline stage: its slice of the model, its KV cache, and the handling
 * of data-ring messages (FORWARD in, FORWARD or TOKENS out; RELEASE and ERROR passed on).
 *
 * The stage knows nothing of sockets: it turns one received message into one message to send
 * (often the same message, computed into in place). worker.c moves messages between sockets.
 *
 * Speculation. A sequence may carry drafted tokens after its last accepted one (wire.h's
 * n_draft): every stage stores their rows like any others, truncating the slot to the
 * sequence's first position first (the implicit rollback of a rejected draft), and the last
 * stage verifies them (lm_sample_verify) and answers with the accepted drafts and the token
 * after them.
 *
 * Memory: everything a message needs is allocated at stage_init for the assignment's limits
 * (max_batch tokens, `slots` sequences); handling a message allocates only the outgoing nng_msg
 * when the payload changes size (the first stage turns 4-byte ids into hidden rows; the last
 * turns hidden rows into TOKENS).
 */
#ifndef LM_STAGE_H
#define LM_STAGE_H

#include <nng/nng.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/scratch.h"
#include "engine/sampler.h"
#include "engine/constrain.h"
#include "common/wire/wire.h"
#include "kernels/backend.h"

/* Running totals, read by STATUS and /metrics from other threads. */
struct stage_stats {
	_Atomic uint64_t batches;    /* FORWARD messages computed */
	_Atomic uint64_t tokens;     /* tokens computed */
	_Atomic uint64_t errors;     /* ring messages refused (malformed, out of range) */
	_Atomic uint64_t releases;   /* RELEASE messages applied */
	_Atomic uint64_t copies;     /* COPY messages applied */
	_Atomic uint64_t compute_ns; /* time inside the forward */
	/* Constrained decoding (engine/constrain.h): tokens drawn under a grammar, those whose
	 * unconstrained draw the grammar admitted, and the draws that needed a mask. */
	_Atomic uint64_t grammar_draws, grammar_fast, grammar_masked;
	/* The backend's memory (lm_backend_mem_info) as the compute thread last read it (after
	 * the load and after each batch), for /status and /metrics, which must not call into the
	 * backend from their own threads. mem_total == 0: the backend does not say. */
	_Atomic uint64_t mem_total, mem_free, mem_used;
	_Atomic int mem_device; /* 1: device memory (CUDA); 0: host memory */
};

struct stage {
	struct wire_assign assign; /* what this stage was given */
	struct lm_engine eng;      /* backend, slice, KV cache, forward */
	struct lm_sampler sampler; /* last stage */
	struct lm_constrain cons;  /* last stage: the slots' grammars (constrain.h) */
	struct wire_limits lim;
	struct wire_scratch scratch;
	struct wire_buf hdr;
	int32_t dim, n_vocab;
	/* Host scratch for one batch. */
	int32_t *ids; /* [max_batch] token ids (first stage; the payload may be unaligned) */
	struct lm_tok_loc *loc;  /* [max_batch] */
	int32_t out_cap;         /* lm_stage_out_rows: rows one batch samples or verifies */
	int32_t *out_rows;       /* [out_cap] rows to sample */
	float *hin, *hout;       /* [max_batch][dim] f32 rows when the payload needs converting */
	float *logits;           /* [out_cap][n_vocab] last stage */
	float *adjusted;         /* [n_vocab] one row with its logit adjustments, last stage */
	struct wire_token *toks; /* [out_cap] */
	int32_t *verified;       /* [out_cap] tokens a verification emits */
	uint8_t *top;            /* top-logprob payload, last stage */
	size_t top_cap;
	struct stage_stats stats;
	/* After a stage_handle that failed: whether the message was malformed (did not decode, or
	 * is not one this stage takes), as opposed to well-formed and refused (its sequence's
	 * cache does not match, its numbers are not finite). A malformed message's batch id is a
	 * stranger's word; only a refusal is answered down the ring. */
	bool malformed;
	/* After a stage_handle that succeeded, for the worker's ring latencies: the ring stamp
	 * of the message handled (wire.h; 0: none), the offset in *out of the 8 bytes the worker
	 * stamps just before sending it on (0: send it unstamped), and the nanoseconds of the
	 * forward itself (0: no forward). */
	uint64_t in_stamp;
	size_t out_stamp_at;
	uint64_t forward_ns;
	size_t host_bytes; /* what stage_init allocated besides the engine */
	/* Tracing for `layermesh diff` (TRACE): the hidden state after each of this stage's layers
	 * for the rows of one armed slot, as they pass. */
	int32_t trace_slot;  /* -1: off */
	int32_t trace_n;     /* rows recorded */
	int32_t trace_cap;   /* rows that fit (grown as they come, at most LM_TRACE_ROWS) */
	float *trace;        /* [trace_cap][layers][dim] */
	int32_t *trace_rows; /* [max_batch] rows of the current batch that are recorded */
	int32_t trace_batch; /* how many of them */
};

/* Loads the slice of the assignment on a backend and allocates its cache and scratch.
 * On failure nothing is left allocated and d says why (naming file, layer or bytes). */
int stage_init(struct stage *st, const struct wire_assign *a, const char *backend,
	       const struct lm_backend_opts *bo, lm_diag *d);
void stage_fini(struct stage *st);
/* Reads the backend's memory into st->stats (the compute thread, between batches). */
void stage_mem_refresh(struct stage *st);

/* Handles one data-ring message. On success *out is the message to send to the successor
 * (possibly `in` itself, modified in place) and `in` belongs to the stage. On failure `in` is
 * still the caller's, *out is NULL, and the caller sends an ERROR down the ring (see
 * stage_error_msg). */
int stage_handle(struct stage *st, nng_msg *in, nng_msg **out, lm_diag *d);

/* Answers a TRACE request: fills *rows and *bytes with what was recorded for the armed slot
 * (payload [layers][rows][dim] f32, in st->trace order, compacted into out, which the caller
 * frees), then arms `slot` afresh. */
int stage_trace(struct stage *st, int32_t slot, int32_t *rows, void **out, size_t *bytes,
		lm_diag *d);

/* Builds an ERROR message about a ring message (its id and type from `head`, if known). */
int stage_error_msg(struct wire_buf *scratch, uint64_t id, uint32_t about, int code,
		    const char *msg, nng_msg **out);

/* The scratch a stage holds now besides its weights and KV cache: the engine's activations,
 * the backend's own scratch, the stage's host buffers and its trace. What engine/scratch.h's
 * estimate (the planner's) must bound; the data-ring messages in flight are not counted. */
uint64_t stage_scratch_held(const struct stage *st);

/* The worker's resident memory in bytes (from /proc/self/statm), 0 if unknown. */
uint64_t stage_rss_bytes(void);

#endif

/* cuda_graph.h — the host-side decisions of the CUDA backend's captured steps (CUDA graphs of a
 * decode token), as pure functions in plain C without the CUDA headers, so that every one of
 * them is tested on machines without a GPU (tests/unit/test_cuda_graph.c).
 *
 * What a step is (kernels/backend.h, step_begin and step_end): the engine opens one around a
 * forward's embedding and layers for a batch, the backend records the step's launches once as a
 * CUDA graph and replays it for later steps of the same key. Opt-in: LM_CUDA_GRAPHS=1 in the
 * environment of the process that opens the backend (lmc_graph_env_on); off, the step slots
 * decline and every op launches as before.
 *
 * A step (of 1 to LMC_GRAPH_MAX_BATCH tokens; larger batches are declined) is run in passes,
 * the engine issuing the same ops in each: at most three, lookup, capture and an eager pass that
 * is no step (lmc_step_open, lmc_step_decide):
 *   LOOKUP   the ops check their arguments, grow the scratch they need and fold what their
 *            launches depend on (every pointer, size, type and scalar: lmc_graph_fold) into the
 *            step's fingerprint, launching nothing. At step_end the key (tokens, position
 *            bucket, fingerprint, scratch generation) finds its graph, which is launched; or
 *            the engine is asked to issue the ops again, to be captured (or, for a key whose
 *            capture failed before, to run eagerly).
 *   CAPTURE  the stream is captured; the graph is instantiated, kept and launched at step_end.
 *            A capture that fails (a launch error, an op that cannot be captured: a download, an
 *            upload, a sync, or a scratch buffer that would have to grow) discards the graph,
 *            remembers the key as failed, logs one line and asks for the ops once more, eagerly.
 *            A failed key costs each later step of it a LOOKUP pass (host work, no launch).
 * Nothing of a LOOKUP or CAPTURE pass runs on the device before step_end launches its graph,
 * so a pass given up leaves nothing half done: the eager pass after it computes the step as if
 * no step had been opened.
 *
 * The token's places and ids reach the graph through pinned host staging, copied by the
 * graph's first nodes into device buffers of their own (never reallocated), so a replay reads
 * the values the host wrote at step_begin. Attention's launches must not depend on the
 * position: in a step they are sized for the bucket's last position (lmc_graph_lmax), and the
 * kernels read each token's real position from the places on the device (the span past it is
 * never written or read), so one graph serves every position of its bucket with the bits of the
 * eager launch. The scratch buffers a graph reads (converted activations, attention
 * probabilities) may be reallocated by a later, larger eager op: every reallocation moves the
 * scratch generation, and a graph of another generation is dropped, never launched.
 */
#ifndef LM_CUDA_GRAPH_H
#define LM_CUDA_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

/* Positions per bucket: a graph serves the positions [hi - LMC_GRAPH_BUCKET, hi). */
#define LMC_GRAPH_BUCKET 256
/* The most tokens a captured step takes (a decode batch of that many sequences). */
#define LMC_GRAPH_MAX_BATCH 8
/* Graphs kept (the oldest is dropped first), and keys remembered as failed. */
#define LMC_GRAPH_CACHE  16
#define LMC_GRAPH_FAILED 16

/* Whether the value of LM_CUDA_GRAPHS turns captured steps on: "1", "on", "yes" or "true".
 * Unset (NULL), "0", "off" or anything else: off. */
static inline bool lmc_graph_env_on(const char *v)
{
	return v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "on") == 0 || strcmp(v, "yes") == 0 ||
			     strcmp(v, "true") == 0);
}

/* Positions per bucket from LM_CUDA_GRAPH_BUCKET's value (tests make it small, so a short
 * prompt crosses buckets): an integer in [1, 65536]; LMC_GRAPH_BUCKET when unset or anything
 * else. */
static inline int32_t lmc_graph_bucket_env(const char *v)
{
	if (v == NULL || *v == '\0')
		return LMC_GRAPH_BUCKET;
	char *end = NULL;
	const long b = strtol(v, &end, 10);
	return *end == '\0' && b >= 1 && b <= 65536 ? (int32_t)b : LMC_GRAPH_BUCKET;
}

/* Whether a step of n tokens may be captured. */
static inline bool lmc_graph_batch_ok(int n)
{
	return n >= 1 && n <= LMC_GRAPH_MAX_BATCH;
}

/* The end of the bucket of a batch's positions: the least multiple of `bucket` above every
 * position (every token's span, pos + 1, is at most this). -1 when a position is negative or
 * the end would not fit an int32. */
static inline int32_t lmc_graph_hi(const struct lm_tok_loc *loc, int n, int32_t bucket)
{
	int64_t top = 0;
	for (int t = 0; t < n; t++) {
		if (loc[t].pos < 0)
			return -1;
		if ((int64_t)loc[t].pos + 1 > top)
			top = (int64_t)loc[t].pos + 1;
	}
	const int64_t hi = (top + bucket - 1) / bucket * bucket;
	return hi > INT32_MAX ? -1 : (int32_t)hi;
}

/* The span attention is launched for in a step of bucket end `hi`, on a layer of `ctx` rows per
 * slot and `window` (0: none): at least every token's span (pos - lo + 1 <= min(pos + 1,
 * window), and pos < ctx on a global layer, whose ctx is the sequence's limit), a function of
 * the key and the layer only. */
static inline int32_t lmc_graph_lmax(int32_t hi, int32_t window, int32_t ctx)
{
	int32_t m = hi;
	if (window > 0 && window < m)
		m = window;
	if (ctx > 0 && ctx < m)
		m = ctx;
	return m;
}

/* Tokens per attention launch when every token is sized for lmax positions: as many as fit
 * `cap` bytes of probabilities ([tokens][n_heads][lmax] floats), one at least, at most n. */
static inline int lmc_graph_attn_chunk(int n, int n_heads, int32_t lmax, size_t cap)
{
	const size_t one = (size_t)n_heads * (size_t)(lmax > 0 ? lmax : 1) * sizeof(float);
	size_t k = cap / one;
	if (k < 1)
		k = 1;
	return k > (size_t)n ? n : (int)k;
}

/* Folds n words into h, the step's fingerprint of its ops and their arguments (a multiply and
 * a shift per word: the fingerprint is taken again on every replay, some 400 ops of 8 words). */
#define LMC_GRAPH_FOLD_SEED 0xcbf29ce484222325ull
static inline uint64_t lmc_graph_fold(uint64_t h, const uint64_t *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h = (h ^ w[i]) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
	}
	return h;
}

/* What a step's launches depend on. */
struct lmc_graph_key {
	int32_t n;    /* tokens */
	int32_t hi;   /* bucket end (lmc_graph_hi) */
	uint64_t ops; /* fingerprint of the ops and their arguments */
	uint64_t gen; /* scratch generation (moves on every scratch reallocation) */
};

static inline bool lmc_graph_key_eq(const struct lmc_graph_key *a, const struct lmc_graph_key *b)
{
	return a->n == b->n && a->hi == b->hi && a->ops == b->ops && a->gen == b->gen;
}

/* Whether a graph of key g may be launched for a step of key k: the same key. A graph of another
 * scratch generation read buffers since freed: it is stale and dropped (lmc_graph_stale). */
static inline bool lmc_graph_stale(const struct lmc_graph_key *g, uint64_t gen)
{
	return g->gen != gen;
}

/* A failed capture is remembered without the generation: what made it fail (an op that cannot
 * be captured) does not depend on where the scratch is. */
static inline bool lmc_graph_same_failure(const struct lmc_graph_key *a,
					  const struct lmc_graph_key *b)
{
	return a->n == b->n && a->hi == b->hi && a->ops == b->ops;
}

/* The pass a step is in (the engine's ops see it through the backend's state). */
enum lmc_step_mode {
	LMC_STEP_OFF,     /* no step open: ops launch as they come */
	LMC_STEP_LOOKUP,  /* ops fold and launch nothing */
	LMC_STEP_CAPTURE, /* ops launch into the stream's capture */
};

/* What step_begin does with the next step. */
enum lmc_step_next {
	LMC_NEXT_LOOKUP,  /* open it in LOOKUP */
	LMC_NEXT_CAPTURE, /* open it in CAPTURE */
	LMC_NEXT_EAGER,   /* decline it (the engine's eager pass), then back to LOOKUP */
};

/* step_begin's decision for a step of n tokens: the pass it opens (LMC_STEP_OFF: declined) and
 * the next step's. The pass a step_end asked for is taken once; an eager pass asked for is one
 * step declined. */
static inline enum lmc_step_mode lmc_step_open(bool enabled, int n, enum lmc_step_next *next)
{
	if (!enabled || !lmc_graph_batch_ok(n))
		return LMC_STEP_OFF;
	const enum lmc_step_next was = *next;
	*next = LMC_NEXT_LOOKUP;
	return was == LMC_NEXT_EAGER     ? LMC_STEP_OFF
	       : was == LMC_NEXT_CAPTURE ? LMC_STEP_CAPTURE
					 : LMC_STEP_LOOKUP;
}

/* How the step's ops went, as step_end classifies them. */
enum lmc_step_ops {
	LMC_OPS_OK,      /* every op returned 0 */
	LMC_OPS_REFUSED, /* an op refused its arguments (a range, a type): the step's own error */
	LMC_OPS_DEVICE,  /* a CUDA call failed */
	LMC_OPS_SPOILED, /* an op could not be part of a step (or its places were not the step's) */
};

/* step_end's decision. */
struct lmc_step_verdict {
	bool launch;   /* launch the key's graph (found, or just instantiated) */
	bool again;    /* nothing ran: the engine issues the ops again */
	bool fail_key; /* remember the key as failed */
	bool keep;     /* CAPTURE: instantiate and keep the graph */
	enum lmc_step_next next;
};

/* step_end's decision from the pass, how its ops went, whether the key has a graph (LOOKUP),
 * whether it failed before, and whether the capture ended well (CAPTURE: end and instantiate).
 * An op's refusal stands as the step's error (an eager pass would refuse the same), nothing
 * launched. */
static inline struct lmc_step_verdict lmc_step_decide(enum lmc_step_mode mode,
						      enum lmc_step_ops ops, bool found,
						      bool failed_before, bool captured_ok)
{
	struct lmc_step_verdict v = {.next = LMC_NEXT_LOOKUP};
	if (ops == LMC_OPS_REFUSED)
		return v;
	if (mode == LMC_STEP_LOOKUP) {
		if (ops != LMC_OPS_OK) {
			v.again = true;
			v.fail_key = ops == LMC_OPS_SPOILED;
			v.next = LMC_NEXT_EAGER;
		} else if (found) {
			v.launch = true;
		} else {
			v.again = true;
			v.next = failed_before ? LMC_NEXT_EAGER : LMC_NEXT_CAPTURE;
		}
		return v;
	}
	if (mode == LMC_STEP_CAPTURE) {
		if (ops == LMC_OPS_OK && captured_ok) {
			v.keep = true;
			v.launch = true;
		} else {
			v.again = true;
			v.fail_key = true;
			v.next = LMC_NEXT_EAGER;
		}
	}
	return v;
}

#endif

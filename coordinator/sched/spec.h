/* spec.h — where speculative drafts come from: the scheduler's draft sources.
 *
 * Speculative decoding through the mesh: for a decoding sequence the scheduler asks its draft
 * source for up to k tokens likely to follow the sequence so far, sends the last accepted token
 * and the k drafts as one FORWARD (k + 1 rows of one slot), and the last stage verifies them
 * (engine/sampler.h: lm_sample_verify) and returns the accepted drafts and its own next token.
 * The next FORWARD's first position rolls every stage back to what was accepted (wire.h). A
 * step then costs one trip around the ring for 1 to k + 1 tokens.
 *
 * Two sources, both deterministic (which the verification's rule relies on):
 *   - n-gram lookup (spec_ngram_init): the longest suffix of the sequence's own prompt and
 *     output, of ngram_max down to ngram_min tokens, that occurred before, and the tokens that
 *     followed its latest earlier occurrence (vLLM's `ngram`, llama.cpp's `lookup`). No model;
 *     it drafts only where the text repeats itself.
 *   - a draft model (spec_draft_init): a small GGUF with the model's vocabulary, run greedily in
 *     the coordinator process with a KV cache of its own per slot, caught up on each call with
 *     the tokens accepted since (what it drafted and was rejected is rolled back by comparing
 *     what it was fed with the sequence).
 *
 * Threads: a source is used by the scheduler thread alone.
 */
#ifndef LM_SPEC_H
#define LM_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/kv_geom.h"
#include "common/tok/tokenizer.h"

struct spec_source_i {
	const char *name; /* "ngram", "model" */
	/* Whether a proposal costs nothing worth counting (a lookup, not a model's forward): the
	 * scheduler may then ask for shadow drafts at every step (spec_adapt.h). */
	bool cheap;
	/* Up to `max` (>= 1) tokens to follow tok[0..n) (n >= 1) of the sequence in `slot`, into
	 * out[0..max); returns how many (0: no draft this time). Must not fail the sequence: a
	 * source that cannot draft returns 0. Required. */
	int32_t (*propose)(void *ctx, int32_t slot, const int32_t *tok, int32_t n, int32_t max,
			   int32_t *out);
	/* The sequence in `slot` ended; what the source kept for it may go. Optional. */
	void (*release)(void *ctx, int32_t slot);
	/* Frees the context. Required. */
	void (*fini)(void *ctx);
};

struct spec_source {
	const struct spec_source_i *iface; /* NULL: no speculation */
	void *ctx;
};

/* N-gram lookup over suffixes of ngram_min..ngram_max tokens (1 <= min <= max <= 8). */
int spec_ngram_init(struct spec_source *s, int32_t ngram_min, int32_t ngram_max, lm_diag *d);

struct spec_draft_cfg {
	const char *model;      /* the draft GGUF */
	int32_t n_vocab;        /* the target model's: the draft's must be the same */
	const tok_vocab *vocab; /* the target's, to compare every token's text; may be NULL */
	int32_t slots;          /* the scheduler's slots */
	int32_t max_seq;        /* positions per sequence */
	int32_t max_draft;      /* tokens drafted per call at most */
	int32_t threads;        /* CPU threads of its backend */
	struct kv_types kv;     /* its cache types */
};
/* A draft model. LM_EINVAL naming both when its vocabulary is not the target's. */
int spec_draft_init(struct spec_source *s, const struct spec_draft_cfg *cfg, lm_diag *d);

/* fini(NULL)-style: harmless on a zeroed source. */
void spec_source_fini(struct spec_source *s);

#endif

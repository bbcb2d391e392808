/* constrain.h — constrained decoding at the sampling stage (docs/constrained-decoding.md).
 *
 * The last stage keeps, per KV slot, the matcher of the sequence in it: its compiled grammar,
 * the state after the tokens it has generated, and how many those are. The coordinator sends a
 * sequence's grammar text once, with the tokens it has generated so far (none at the start;
 * all of them after a replay or when the last stage was replaced), and the stage rebuilds the
 * matcher from them; later steps only name the slot, and the stage checks that the matcher it
 * holds is that sequence's at that step. So the stage holds nothing it cannot rebuild.
 *
 * Sampling a constrained row: the token the row draws unconstrained (lm_sample) is taken when
 * the grammar admits it (the common case for a trained model, and exact for greedy decoding);
 * otherwise every token the grammar rejects is masked to -inf (a mask over the vocabulary's
 * trie, gbnf.h) and the row is drawn again. End-of-generation tokens are admitted exactly when
 * the grammar is in an accepting state; a grammar that is complete admits nothing else, so
 * the next token ends the sequence. A control token, whose text plain output leaves out, is
 * admitted by its text only where the grammar spells that text literally (as a tool call's
 * grammar spells <|channel|> or <|tool_call>), never inside free text. The same function draws every row of a speculative
 * verification, so drafts are checked against the grammar and the first one it rejects ends
 * the acceptance.
 */
#ifndef LM_CONSTRAIN_H
#define LM_CONSTRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/grammar/gbnf.h"
#include "common/model/sampling.h"
#include "engine/sampler.h"

/* Compiled grammars kept beyond one per slot, for the next requests with the same text. */
#define LM_CONSTRAIN_SPARE 4

/* One slot's matcher. */
struct lm_constraint {
	bool live;
	uint64_t seq_id;
	uint64_t step;          /* tokens the state has advanced over */
	int32_t gi;             /* its grammar in lm_constrain.gr, -1: none */
	struct gbnf *g;         /* that grammar's (borrowed) */
	struct gbnf_masker *mk; /* that grammar's masker (borrowed, shared) */
	struct gbnf_state st;
};

/* A compiled grammar, shared by the slots whose sequences send the same text (requests with
 * one schema): one compilation, and one masker whose caches every such sequence warms. */
struct lm_cgrammar {
	char *text; /* NULL: an empty entry */
	uint32_t len;
	uint64_t hash;
	struct gbnf *g;
	struct gbnf_masker *mk;
	int32_t refs;  /* slots using it */
	uint64_t used; /* when a slot last took it (the least recent unused one goes first) */
};

struct lm_constrain {
	int32_t n_vocab, n_slots;
	struct gbnf_vocab *vocab; /* NULL until the first grammar (lm_constrain_vocab) */
	int32_t eog[32];          /* end-of-generation ids */
	int32_t n_eog;
	/* Control tokens (not end-of-generation, not unused): no bytes as text, so never in the
	 * trie; each is admitted where the grammar spells its text literally (a call's markers,
	 * <|channel|>, <|tool_call>: gbnf_accept_literal). lit[i] is an id, ascending, its text
	 * lit_text[lit_off[i], lit_off[i + 1]). */
	int32_t *lit;
	uint32_t *lit_off; /* [n_lit + 1] */
	char *lit_text;
	int32_t n_lit;
	uint32_t *bits;              /* [(n_vocab + 31) / 32] */
	float *masked;               /* [n_vocab] */
	struct lm_constraint *slots; /* [n_slots] */
	struct lm_cgrammar *gr;      /* [n_slots + LM_CONSTRAIN_SPARE] */
	uint64_t tick;
	/* Counters: tokens drawn under a grammar, of which the unconstrained draw was admitted,
	 * and the masks computed (the rest came from the masker's cache). */
	uint64_t drawn, fast, masks;
};

/* Caller-owned memory; nothing allocated until a grammar comes. */
void lm_constrain_init(struct lm_constrain *c, int32_t n_slots, int32_t n_vocab);
void lm_constrain_fini(struct lm_constrain *c);
/* Loads the vocabulary's token bytes and end-of-generation ids from the model file (once; a
 * no-op after). The tokenizer itself is not kept: only each token's bytes and the trie. */
int lm_constrain_vocab(struct lm_constrain *c, const char *model_path, lm_diag *d);
/* Bytes held (vocabulary, trie, masks, the slots' grammars, states and maskers). */
uint64_t lm_constrain_bytes(const struct lm_constrain *c);

/* Makes slot's matcher the one of sequence seq_id at `step` generated tokens. With text
 * (len > 0): compiles it (or keeps the compiled grammar of the same text) and advances a fresh
 * state over ids[n_ids]. Without: the slot must hold seq_id's matcher at exactly `step`, else
 * LM_EPROTO ("send the grammar again"). LM_EINVAL for a grammar that does not compile or ids it
 * rejects; the message names the sequence. */
int lm_constrain_begin(struct lm_constrain *c, int32_t slot, uint64_t seq_id, uint64_t step,
		       const char *text, uint32_t len, const int32_t *ids, int32_t n_ids,
		       lm_diag *d);
/* Drops slot's matcher (its sequence ended). */
void lm_constrain_end(struct lm_constrain *c, int32_t slot);

/* One token for logits [n_vocab] under slot's grammar at the matcher's step, advancing it. */
int lm_constrain_sample(struct lm_constrain *c, struct lm_sampler *s, int32_t slot,
			const float *logits, const struct lm_sampling *p, int32_t *token,
			lm_diag *d);
/* lm_sample_verify under slot's grammar: row i is drawn with lm_constrain_sample (advancing the
 * matcher), and drafts[i] is accepted when it is that token. out[0..a]: the a accepted drafts
 * and the token after them; *n = a + 1. */
int lm_constrain_verify(struct lm_constrain *c, struct lm_sampler *s, int32_t slot,
			const float *logits, const int32_t *drafts, int32_t k,
			const struct lm_sampling *p, int32_t *out, int32_t *n, lm_diag *d);

#endif

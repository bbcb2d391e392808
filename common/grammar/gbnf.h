/* gbnf.h — GBNF grammars (llama.cpp's grammar format) compiled, and matched against text and
 * against a vocabulary's tokens, for constrained decoding (docs/constrained-decoding.md).
 *
 * Syntax, as llama.cpp's grammars/README.md defines it:
 *     name ::= alternative | alternative ...       one rule; the grammar starts at `root`
 *     "literal"  [a-z0-9_] [^"\\]  .               a string, a character class (negated with ^),
 *                                                  any character
 *     ( ... )  x*  x+  x?  x{m}  x{m,}  x{m,n}  x{,n}   grouping and repetition
 *     # comment to the end of the line
 * Escapes in literals and classes: \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH. Rule
 * names are [a-zA-Z0-9-]+. A rule ends at a newline, except inside parentheses or after `|`
 * or `::=`. Characters are Unicode code points; text is matched as UTF-8.
 *
 * Trust. Grammar text comes from HTTP bodies: it is parsed with bounded nesting
 * (GBNF_MAX_DEPTH), the compiled form is bounded in elements and rules (repetitions are
 * expanded, so x{1000}{1000} is refused, not allocated), every rule referenced must be defined,
 * `root` must exist, and left recursion (which would make matching loop) is refused. Errors
 * name the line and column (1-based) and what was expected. Matching is bounded too: a state
 * holds at most GBNF_MAX_STACKS alternatives of at most GBNF_MAX_STACK_DEPTH rules each, one
 * byte costs at most GBNF_MAX_WORK words of stacks copied, hashed and compared and of class
 * members scanned, and one mask at most GBNF_MAX_MASK_WORK; a text that needs more is rejected
 * (LM_ERANGE), never allocated or worked through without bound. (An ambiguous grammar such as
 * `root ::= .+++++++++` makes thousands of stacks a byte that come to the same few.)
 *
 * Matching is llama.cpp's pushdown scheme: a state is a set of stacks of grammar positions, the
 * top of each one a character class; a code point advances every stack whose top admits it and
 * the rules at the new top are expanded. A state is accepting when one of its stacks is empty.
 *
 * Tokens (gbnf_vocab): each token's bytes, and a trie over them, built once per vocabulary.
 * gbnf_masker computes which tokens a state admits by walking the trie with the matcher, so a
 * prefix shared by many tokens is matched once and a rejected prefix prunes its whole subtree;
 * states met during a walk are interned with their transitions, and the mask of a state at a
 * token boundary is cached (a sequence inside a JSON string meets the same state token after
 * token). End-of-generation tokens are the caller's: they are allowed exactly when the state
 * is accepting.
 */
#ifndef LM_GBNF_H
#define LM_GBNF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define GBNF_MAX_TEXT        (256 * 1024) /* bytes of grammar text */
#define GBNF_MAX_ELEMENTS    (1 << 20)    /* compiled elements, repetitions expanded */
#define GBNF_MAX_RULES       (1 << 16)
#define GBNF_MAX_DEPTH       64 /* nested parentheses */
#define GBNF_MAX_STACKS      1024
#define GBNF_MAX_STACK_DEPTH 1024
/* Work bounds, in words (a few ns each): the JSON schemas' grammars need hundreds a byte. */
#define GBNF_MAX_WORK      ((int64_t)1 << 16)
#define GBNF_MAX_MASK_WORK ((int64_t)1 << 26)

struct gbnf;

/* Compiles grammar text (len bytes, not necessarily NUL-terminated). LM_EFORMAT with "line L,
 * column C: ..." for a syntax error, an undefined rule, a missing root or left recursion;
 * LM_ERANGE for a grammar past the bounds above; LM_ENOMEM. */
int gbnf_compile(const char *text, size_t len, struct gbnf **out, lm_diag *d);
void gbnf_free(struct gbnf *g);
/* Elements of the compiled form (the size the bounds count). */
int32_t gbnf_size(const struct gbnf *g);

/* A matcher state: serialized stacks and a pending partial UTF-8 character; owns its buffer.
 * Copy with gbnf_state_copy. Layout (int32): [partial value, bytes remaining, n stacks, then per
 * stack its depth and its positions bottom first]. */
struct gbnf_state {
	int32_t *v;
	int32_t len, cap;
};
/* The start state of g. */
int gbnf_state_init(const struct gbnf *g, struct gbnf_state *s, lm_diag *d);
void gbnf_state_fini(struct gbnf_state *s);
int gbnf_state_copy(struct gbnf_state *dst, const struct gbnf_state *src);
/* Advances s over n bytes of UTF-8. LM_EINVAL when the grammar rejects them (s is then
 * unchanged), LM_ERANGE when matching would pass the bounds, LM_ENOMEM. */
int gbnf_accept(const struct gbnf *g, struct gbnf_state *s, const void *bytes, size_t n,
		lm_diag *d);
/* Advances s over n bytes of UTF-8 spelled literally: each character only where the grammar
 * has that character alone (a literal's, or a one-character class), never through a range, a
 * negated class, `.` or a class of several. How a control token (its text a marker such as
 * <|channel|>) is matched: where the grammar spells its text, not inside free text. As
 * gbnf_accept otherwise; LM_EINVAL also inside a partial character or for empty text. */
int gbnf_accept_literal(const struct gbnf *g, struct gbnf_state *s, const void *bytes, size_t n,
			lm_diag *d);
/* Whether the text so far is a sentence of the grammar (ending here is allowed). */
bool gbnf_accepting(const struct gbnf_state *s);
/* Whether nothing more can follow: accepting, and no stack can take another character. */
bool gbnf_complete(const struct gbnf_state *s);
/* Whether the whole text is a sentence of g (tests, validation). */
bool gbnf_matches(const struct gbnf *g, const char *text, size_t len);

/* ------------------------------------------------------------------ tokens */

struct gbnf_vocab;
/* The vocabulary as each token's bytes (piece(ctx, id, &len); NULL or length 0: a token that
 * never matches text, such as a control token). The bytes are copied. */
int gbnf_vocab_build(int32_t n_vocab, const char *(*piece)(void *ctx, int32_t id, size_t *len),
		     void *ctx, struct gbnf_vocab **out, lm_diag *d);
void gbnf_vocab_free(struct gbnf_vocab *v);
int32_t gbnf_vocab_n(const struct gbnf_vocab *v);
/* Bytes held (tokens and trie). */
size_t gbnf_vocab_bytes(const struct gbnf_vocab *v);
/* Token id's bytes. */
const char *gbnf_vocab_piece(const struct gbnf_vocab *v, int32_t id, size_t *len);

/* Advances s over token id. As gbnf_accept; a token with no bytes is rejected. */
int gbnf_accept_token(const struct gbnf *g, const struct gbnf_vocab *v, struct gbnf_state *s,
		      int32_t id, lm_diag *d);

/* Computes masks for one grammar over one vocabulary; holds the walk's scratch, the interned
 * states and a small cache of masks by state. Not thread-safe: one per user. */
struct gbnf_masker;
int gbnf_masker_new(const struct gbnf *g, const struct gbnf_vocab *v, struct gbnf_masker **out);
void gbnf_masker_free(struct gbnf_masker *m);
/* bits[(n_vocab + 31) / 32]: bit id set when token id's bytes may follow the text of s (tokens
 * with no bytes are never set). Returns how many are set, or a negative error (LM_ERANGE when
 * matching passes the bounds, LM_ENOMEM). The result may come from the cache. */
int32_t gbnf_masker_mask(struct gbnf_masker *m, const struct gbnf_state *s, uint32_t *bits);
/* Whether token id may follow s (one token, without a mask: the sampler's fast path). */
bool gbnf_token_ok(const struct gbnf *g, const struct gbnf_vocab *v, const struct gbnf_state *s,
		   int32_t id);
/* Bytes the masker holds now (its interned states, transitions and cached masks; bounded:
 * past a few MiB of states and transitions they are dropped before the next mask). */
size_t gbnf_masker_bytes(const struct gbnf_masker *m);
/* The masker's counters: masks computed, masks answered from the cache. */
void gbnf_masker_stats(const struct gbnf_masker *m, uint64_t *computed, uint64_t *cached);

#endif

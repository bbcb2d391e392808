/* gbnf_impl.h — the compiled form of a GBNF grammar, shared by the parser and the matcher. */
#ifndef LM_GBNF_IMPL_H
#define LM_GBNF_IMPL_H

#include <stdint.h>

#include "common/grammar/gbnf.h"

/* llama.cpp's element kinds. A rule is its alternatives one after another, each ended by ALT
 * except the last, ended by END. A character class is CHAR (or NOT, or ANY) followed by
 * CHAR_ALT for each further member; RNG_UPPER after a member makes it a range. */
enum gbnf_type {
	GBNF_END = 0,
	GBNF_ALT = 1,
	GBNF_REF = 2,       /* value: rule id */
	GBNF_CHAR = 3,      /* value: code point */
	GBNF_NOT = 4,       /* a negated class's first member */
	GBNF_RNG_UPPER = 5, /* value: the upper end of the range the previous member starts */
	GBNF_CHAR_ALT = 6,  /* a further member of the class */
	GBNF_ANY = 7,       /* any code point (`.`) */
};

struct gbnf_el {
	uint32_t type;
	uint32_t value;
};

struct gbnf {
	struct gbnf_el *el; /* [n_el] every rule's elements */
	int32_t n_el;
	int32_t *rule_at; /* [n_rules] each rule's first element */
	int32_t n_rules;
	int32_t root;
};

static inline bool gbnf_is_end(const struct gbnf_el *e)
{
	return e->type == GBNF_END || e->type == GBNF_ALT;
}

/* Work space of one matching step, reused across steps. */
struct gbnf_scratch {
	int32_t *work; /* stacks waiting to be expanded, each followed by its depth */
	size_t wlen, wcap;
	int32_t *tmp;
	size_t tcap;
	/* The stacks of the state being built, by hash (GBNF_SEEN slots: where each one's depth
	 * word lies in the state's v), so a stack met again is found without a scan; a slot is
	 * in use when its generation is the step's. */
	int32_t *seen_at;
	uint32_t *seen_gen;
	uint32_t gen;
	int64_t work_left; /* words the step may still copy, hash, compare or scan */
	int64_t spent;     /* words of work since the owner last set it to 0 */
};
void gbnf_scratch_fini(struct gbnf_scratch *sc);
/* out := in (a state's v) advanced over byte b. A state with no stack left means b was
 * rejected. Negative only for LM_ERANGE (past GBNF_MAX_STACKS, GBNF_MAX_STACK_DEPTH or the
 * step's work bound) or LM_ENOMEM. */
int gbnf_step_byte(const struct gbnf *g, const int32_t *in, uint8_t b, struct gbnf_state *out,
		   struct gbnf_scratch *sc);

#endif

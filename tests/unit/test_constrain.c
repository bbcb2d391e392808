/* test_constrain.c — the last stage's constrained draws (engine/constrain.h) on stories260K's
 * vocabulary: a draw the grammar rejects is replaced by the best one it admits, end of
 * generation only where the grammar may end, drafts verified under the grammar, and the
 * matcher rebuilt from replayed tokens or refused when it is not the sequence's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain.h"

static struct lm_constrain c;
static struct lm_sampler s;
static float *logits;
static int32_t n_vocab;
static const struct lm_sampling greedy = {.temperature = 0, .top_p = 1};

static void setup(void)
{
	char path[1024];
	const char *shared = getenv("LM_SHARED");
	cr_assert_not_null(shared, "LM_SHARED must name the shared data directory");
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
	n_vocab = 512;
	lm_constrain_init(&c, 4, n_vocab);
	lm_diag d = {{0}};
	cr_assert_eq(lm_constrain_vocab(&c, path, &d), 0, "%s", d.msg);
	cr_assert_gt(c.n_eog, 0);
	cr_assert_eq(lm_sampler_init(&s, n_vocab), 0);
	logits = calloc((size_t)n_vocab * 4, sizeof *logits);
}

static void teardown(void)
{
	free(logits);
	lm_sampler_fini(&s);
	lm_constrain_fini(&c);
}

TestSuite(constrain, .init = setup, .fini = teardown, .timeout = 30);

/* The id whose bytes are exactly text. */
static int32_t tok(const char *text)
{
	for (int32_t i = 0; i < n_vocab; i++) {
		size_t n = 0;
		const char *p = gbnf_vocab_piece(c.vocab, i, &n);
		if (n == strlen(text) && memcmp(p, text, n) == 0)
			return i;
	}
	cr_assert_fail("no token spells '%s'", text);
	return -1;
}

static void begin(const char *g, const int32_t *ids, int32_t n)
{
	lm_diag d = {{0}};
	cr_assert_eq(lm_constrain_begin(&c, 0, 7, (uint64_t)n, g, (uint32_t)strlen(g), ids, n, &d),
		     0, "%s", d.msg);
}

/* Row r of logits: every token at 0 but `best` (the argmax) and `second`. */
static float *row(int r, int32_t best, int32_t second)
{
	float *x = logits + (size_t)r * (size_t)n_vocab;
	for (int32_t i = 0; i < n_vocab; i++)
		x[i] = 0;
	x[best] = 10;
	if (second >= 0)
		x[second] = 5;
	return x;
}

static int32_t draw(const float *x)
{
	int32_t t = -1;
	lm_diag d = {{0}};
	cr_assert_eq(lm_constrain_sample(&c, &s, 0, x, &greedy, &t, &d), 0, "%s", d.msg);
	return t;
}

Test(constrain, a_rejected_draw_becomes_the_best_admitted)
{
	const int32_t a = tok("a"), b = tok("b");
	begin("root ::= \"a\" \"b\"", NULL, 0);
	cr_assert_eq(draw(row(0, b, a)), a, "b is rejected first: a, the next best, is drawn");
	cr_assert_eq(c.fast, 0);
	cr_assert_eq(draw(row(0, b, a)), b, "now b is admitted: the plain draw stands");
	cr_assert_eq(c.fast, 1);
	/* Complete: only end of generation is left, however the row ranks it. */
	int32_t t = draw(row(0, a, b));
	bool eog = false;
	for (int32_t i = 0; i < c.n_eog; i++)
		eog |= c.eog[i] == t;
	cr_assert(eog, "token %d after the grammar completed", t);
}

Test(constrain, end_of_generation_only_where_the_grammar_may_end)
{
	const int32_t a = tok("a");
	begin("root ::= \"a\"+", NULL, 0);
	cr_assert_eq(draw(row(0, c.eog[0], a)), a, "end of generation before any 'a'");
	cr_assert_eq(draw(row(0, c.eog[0], a)), c.eog[0], "after 'a' the grammar may end");
}

Test(constrain, drafts_are_verified_under_the_grammar)
{
	const int32_t a = tok("a"), b = tok("b");
	begin("root ::= \"a\"{3}", NULL, 0);
	/* Every row ranks b first: the grammar only admits a. Drafts a, b, a: the first is
	 * accepted (it is the draw), the second is not (b is never admitted), and the draw after
	 * the accepted one is the correction, a. */
	for (int r = 0; r < 4; r++)
		row(r, b, a);
	const int32_t drafts[3] = {a, b, a};
	int32_t out[4], n = 0;
	lm_diag d = {{0}};
	cr_assert_eq(lm_constrain_verify(&c, &s, 0, logits, drafts, 3, &greedy, out, &n, &d), 0,
		     "%s", d.msg);
	cr_assert_eq(n, 2);
	cr_assert_eq(out[0], a);
	cr_assert_eq(out[1], a);
	cr_assert_eq(c.slots[0].step, 2, "the matcher advanced over both tokens");
}

Test(constrain, the_matcher_is_the_sequences_or_it_is_refused)
{
	const int32_t a = tok("a"), b = tok("b");
	lm_diag d = {{0}};
	/* No state yet: "continue" is refused, asking for the grammar again. */
	cr_assert_eq(lm_constrain_begin(&c, 1, 9, 0, "", 0, NULL, 0, &d), LM_EPROTO);
	cr_assert(strstr(d.msg, "send the grammar again") != NULL, "%s", d.msg);
	begin("root ::= \"a\" \"b\" \"a\"", NULL, 0);
	draw(row(0, a, -1));
	cr_assert_eq(lm_constrain_begin(&c, 0, 7, 1, "", 0, NULL, 0, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_constrain_begin(&c, 0, 7, 2, "", 0, NULL, 0, &d), LM_EPROTO, "step");
	cr_assert_eq(lm_constrain_begin(&c, 0, 8, 1, "", 0, NULL, 0, &d), LM_EPROTO, "sequence");
	/* Rebuilt from the replayed tokens: the next draw is the one the lost matcher gave. */
	const int32_t ids[2] = {a, b};
	begin("root ::= \"a\" \"b\" \"a\"", ids, 2);
	cr_assert_eq(draw(row(0, b, a)), a);
	/* Replayed tokens the grammar rejects: refused, naming the token. */
	const int32_t bad[1] = {b};
	cr_assert_eq(lm_constrain_begin(&c, 0, 7, 1, "root ::= \"a\"", 12, bad, 1, &d), LM_EINVAL);
	cr_assert(strstr(d.msg, "replayed") != NULL, "%s", d.msg);
	/* A grammar that does not compile. */
	cr_assert_eq(lm_constrain_begin(&c, 0, 7, 0, "root ::= x", 10, NULL, 0, &d), LM_EINVAL);
	cr_assert(strstr(d.msg, "sequence 7") != NULL, "%s", d.msg);
}

Test(constrain, slots_share_a_grammar_and_keep_their_own_state)
{
	const int32_t a = tok("a"), b = tok("b");
	const char *g = "root ::= (\"a\" | \"b\") \"a\"";
	lm_diag d = {{0}};
	cr_assert_eq(lm_constrain_begin(&c, 0, 1, 0, g, (uint32_t)strlen(g), NULL, 0, &d), 0);
	cr_assert_eq(lm_constrain_begin(&c, 1, 2, 0, g, (uint32_t)strlen(g), NULL, 0, &d), 0);
	cr_assert_eq(c.slots[0].g, c.slots[1].g, "one compilation for one text");
	cr_assert_eq(c.slots[0].mk, c.slots[1].mk, "and one masker");
	cr_assert_eq(c.gr[c.slots[0].gi].refs, 2);
	int32_t t = -1;
	cr_assert_eq(lm_constrain_sample(&c, &s, 1, row(0, b, a), &greedy, &t, &d), 0);
	cr_assert_eq(t, b);
	/* Slot 0 has drawn nothing: b is still its first token, and after it, b is not. */
	cr_assert_eq(lm_constrain_sample(&c, &s, 0, row(0, b, a), &greedy, &t, &d), 0);
	cr_assert_eq(t, b);
	cr_assert_eq(lm_constrain_sample(&c, &s, 1, row(0, b, a), &greedy, &t, &d), 0);
	cr_assert_eq(t, a);
	/* Many distinct grammars through one slot: unused compilations make room, the shared one
	 * stays while slot 1 holds it. */
	lm_constrain_end(&c, 0);
	for (int i = 0; i < 3 * (c.n_slots + LM_CONSTRAIN_SPARE); i++) {
		char text[64];
		snprintf(text, sizeof text, "root ::= \"a\"{%d}", i + 1);
		cr_assert_eq(lm_constrain_begin(&c, 0, 10 + (uint64_t)i, 0, text,
						(uint32_t)strlen(text), NULL, 0, &d),
			     0, "%s", d.msg);
	}
	cr_assert(c.slots[1].live);
	cr_assert_eq(c.gr[c.slots[1].gi].refs, 1);
	cr_assert_eq(lm_constrain_sample(&c, &s, 1, row(0, b, a), &greedy, &t, &d), 0);
	cr_assert(t != a && t != b, "slot 1's grammar was complete: end of generation, got %d", t);
}

/* A control token (no bytes as text: BOS here, <s>) is drawn where the grammar spells its text
 * as a literal, through the fast path and through a mask, and replayed; where only a class
 * could spell it (free text), it is not. */
Test(constrain, a_control_token_only_where_the_grammar_spells_it)
{
	const int32_t a = tok("a"), b = tok("b");
	cr_assert_geq(c.n_lit, 1, "stories260K's BOS is a control token");
	const int32_t ctl = c.lit[0];
	char text[32], g[128];
	snprintf(text, sizeof text, "%.*s", (int)(c.lit_off[1] - c.lit_off[0]), c.lit_text);
	cr_assert(text[0] != '\0' && strchr(text, '"') == NULL && strchr(text, '\\') == NULL);
	snprintf(g, sizeof g, "root ::= \"b\"? \"%s\" \"a\"", text);
	begin(g, NULL, 0);
	cr_assert_eq(draw(row(0, ctl, a)), ctl, "the literal's control token, as drawn");
	cr_assert_eq(c.fast, 1);
	cr_assert_eq(draw(row(0, ctl, a)), a, "its text is spelled: 'a' next");
	begin(g, NULL, 0);
	cr_assert_eq(draw(row(0, b, a)), b);
	/* The best admitted after "b" is the control token, ranked second: found by the mask. */
	cr_assert_eq(draw(row(0, a, ctl)), ctl, "the mask admits it");
	/* Replayed: the matcher is rebuilt past it. */
	const int32_t ids[2] = {b, ctl};
	begin(g, ids, 2);
	cr_assert_eq(draw(row(0, b, a)), a);
	/* Free text that would spell the same characters does not take the control token. */
	begin("root ::= [^x]{1,20}", NULL, 0);
	cr_assert(draw(row(0, ctl, a)) != ctl, "a control token inside free text");
	snprintf(g, sizeof g, "root ::= [%s]+", text);
	begin(g, NULL, 0);
	cr_assert(draw(row(0, ctl, a)) != ctl, "a class of several characters");
}

/* test_gbnf.c — GBNF parsing (good and bad grammars), matching text, and token masks over a
 * vocabulary, the masks checked against matching each token on its own. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "common/grammar/gbnf_impl.h" /* the step and its work, for the bounds */

static struct gbnf *compile_ok(const char *text)
{
	struct gbnf *g = NULL;
	lm_diag d = {{0}};
	int rc = gbnf_compile(text, strlen(text), &g, &d);
	cr_assert_eq(rc, 0, "%s: %s", text, d.msg);
	return g;
}

static void compile_bad(const char *text, int code, const char *want)
{
	struct gbnf *g = NULL;
	lm_diag d = {{0}};
	int rc = gbnf_compile(text, strlen(text), &g, &d);
	cr_assert_eq(rc, code, "%s: rc %d (%s)", text, rc, d.msg);
	cr_assert_null(g);
	cr_assert(strstr(d.msg, want) != NULL, "%s: message '%s' lacks '%s'", text, d.msg, want);
}

static bool m(const struct gbnf *g, const char *s)
{
	return gbnf_matches(g, s, strlen(s));
}

Test(gbnf, literals_classes_and_alternatives)
{
	struct gbnf *g = compile_ok("root ::= \"yes\" | \"no\" | [0-9]+ \"!\"?\n");
	cr_assert(m(g, "yes"));
	cr_assert(m(g, "no"));
	cr_assert(m(g, "123"));
	cr_assert(m(g, "7!"));
	cr_assert_not(m(g, ""));
	cr_assert_not(m(g, "ye"));
	cr_assert_not(m(g, "yes!"));
	cr_assert_not(m(g, "!"));
	gbnf_free(g);
}

Test(gbnf, negated_classes_any_and_escapes)
{
	struct gbnf *g = compile_ok("root ::= \"\\\"\" [^\"\\\\\\n]* \"\\\"\" . [\\x41-\\u0043]\n");
	cr_assert(m(g, "\"abc\"xA"));
	cr_assert(m(g, "\"\"\xc3\xa9"
		       "C"),
		  "any character, a 2-byte one");
	cr_assert_not(m(g, "\"a\"b\"xA"));
	cr_assert_not(m(g, "\"a\nb\"xA"));
	cr_assert_not(m(g, "\"ab\"xD"));
	gbnf_free(g);
}

Test(gbnf, unicode_classes)
{
	struct gbnf *g = compile_ok("root ::= [α-ω]{2} \"→\"\n");
	cr_assert(m(g, "αβ→"));
	cr_assert_not(m(g, "aβ→"));
	cr_assert_not(m(g, "αβ"));
	/* A character cut in two is no character: the first byte alone leaves no sentence. */
	cr_assert_not(gbnf_matches(g, "\xce\xb1\xce", 3));
	gbnf_free(g);
}

Test(gbnf, only_valid_utf8_is_a_character)
{
	/* Byte tokens can spell anything: an overlong '{', a surrogate, a value past U+10FFFF
	 * would be U+FFFD to a decoder, so they are no character to the grammar either. */
	struct gbnf *g = compile_ok("root ::= \"{\" | [^a]\n");
	cr_assert(gbnf_matches(g, "{", 1));
	cr_assert_not(gbnf_matches(g, "\xF0\x80\x81\xBB", 4));
	cr_assert_not(gbnf_matches(g, "\xC1\xBB", 2));
	cr_assert_not(gbnf_matches(g, "\xE0\x81\xBB", 3));
	cr_assert_not(gbnf_matches(g, "\xED\xA0\x80", 3));
	cr_assert_not(gbnf_matches(g, "\xF4\x90\x80\x80", 4));
	cr_assert(gbnf_matches(g, "\xF4\x8F\xBF\xBF", 4));
	cr_assert(gbnf_matches(g, "\xED\x9F\xBF", 3));
	/* Refused at the byte that makes it impossible, not only at the character's end. */
	struct gbnf_state s;
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept(g, &s, "\xF0", 1, NULL), 0);
	cr_assert_eq(gbnf_accept(g, &s, "\x80", 1, NULL), LM_EINVAL);
	gbnf_state_fini(&s);
	gbnf_free(g);
	/* A first byte whose characters the class cannot hold is refused at once. */
	g = compile_ok("root ::= [{-~]\n");
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept(g, &s, "\xF0", 1, NULL), LM_EINVAL);
	cr_assert_eq(gbnf_accept(g, &s, "\xC2", 1, NULL), LM_EINVAL);
	gbnf_state_fini(&s);
	gbnf_free(g);
}

Test(gbnf, repetitions_and_groups)
{
	struct gbnf *g = compile_ok("root ::= (\"ab\"){2,3} x{,2} y{2,}\n"
				    "x ::= \"x\"\n"
				    "y ::= \"y\"   # a comment\n");
	cr_assert(m(g, "ababyy"));
	cr_assert(m(g, "abababxxyyyy"));
	cr_assert_not(m(g, "abyy"));
	cr_assert_not(m(g, "abababababyy"));
	cr_assert_not(m(g, "ababxxxyy"));
	cr_assert_not(m(g, "ababy"));
	gbnf_free(g);
}

Test(gbnf, multiline_rules_and_recursion)
{
	struct gbnf *g = compile_ok("root ::= list\n"
				    "list ::= \"[\" (\n"
				    "    item (\",\" item)*\n"
				    "  )? \"]\"\n"
				    "item ::= [0-9] | list\n");
	cr_assert(m(g, "[]"));
	cr_assert(m(g, "[1,[2,[]],3]"));
	cr_assert_not(m(g, "[1,]"));
	cr_assert_not(m(g, "[[1]"));
	gbnf_free(g);
}

Test(gbnf, accepting_and_complete)
{
	struct gbnf *g = compile_ok("root ::= \"a\" \"b\"?\n");
	struct gbnf_state s;
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_not(gbnf_accepting(&s));
	cr_assert_eq(gbnf_accept(g, &s, "a", 1, NULL), 0);
	cr_assert(gbnf_accepting(&s));
	cr_assert_not(gbnf_complete(&s), "\"b\" may still come");
	lm_diag d = {{0}};
	cr_assert_eq(gbnf_accept(g, &s, "c", 1, &d), LM_EINVAL);
	cr_assert(gbnf_accepting(&s), "a rejected byte leaves the state as it was");
	cr_assert_eq(gbnf_accept(g, &s, "b", 1, NULL), 0);
	cr_assert(gbnf_complete(&s));
	gbnf_state_fini(&s);
	gbnf_free(g);
}

/* A literal spelling (a control token's text) passes only where each character stands alone:
 * a literal's characters or a one-character class, not a range, a negated class, `.` or a
 * class of several; multi-byte characters too. Refused text leaves the state as it was. */
Test(gbnf, literal_spelling_only_through_lone_characters)
{
	struct gbnf *g = compile_ok("root ::= \"<|c|>\" [a-z]+ | [<] \"é\" \"x\" | .* \"!\"\n");
	struct gbnf_state s;
	lm_diag d = {{0}};
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept_literal(g, &s, "<|c|>", 5, &d), 0, "%s", d.msg);
	cr_assert_eq(gbnf_accept_literal(g, &s, "ab", 2, &d), LM_EINVAL, "[a-z] is a range");
	cr_assert(strstr(d.msg, "literal") != NULL, "%s", d.msg);
	cr_assert_eq(gbnf_accept(g, &s, "ab", 2, NULL), 0, "the state is as it was");
	cr_assert(gbnf_accepting(&s));
	gbnf_state_fini(&s);
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept_literal(g, &s, "<é", 3, &d), 0, "%s", d.msg);
	cr_assert_eq(gbnf_accept_literal(g, &s, "x", 1, &d), 0, "%s", d.msg);
	cr_assert(gbnf_complete(&s));
	gbnf_state_fini(&s);
	/* Only `.` could take "?": refused, where plain text passes. */
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept_literal(g, &s, "?", 1, &d), LM_EINVAL);
	cr_assert_eq(gbnf_accept(g, &s, "?", 1, NULL), 0);
	/* Not UTF-8, empty, or inside a partial character: refused. */
	cr_assert_eq(gbnf_accept_literal(g, &s, "\xff", 1, &d), LM_EINVAL);
	cr_assert_eq(gbnf_accept_literal(g, &s, "", 0, &d), LM_EINVAL);
	cr_assert_eq(gbnf_accept(g, &s, "\xc3", 1, NULL), 0);
	cr_assert_eq(gbnf_accept_literal(g, &s, "!", 1, &d), LM_EINVAL);
	gbnf_state_fini(&s);
	gbnf_free(g);
}

Test(gbnf, bad_grammars_name_line_and_column)
{
	compile_bad("root ::= \"a\"\nfoo ::= bar\n", LM_EFORMAT,
		    "line 2, column 9: rule 'bar' is used but not defined");
	compile_bad("rot ::= \"a\"\n", LM_EFORMAT, "no 'root' rule");
	compile_bad("root ::= \"a\n", LM_EFORMAT, "line 1, column 10: unterminated string");
	compile_bad("root ::= [ab\n", LM_EFORMAT, "unterminated character class");
	compile_bad("root ::= [a-\n", LM_EFORMAT, "reversed");
	compile_bad("root ::= (\"a\"\n", LM_EFORMAT, "expected ')'");
	compile_bad("root ::= \"a\" )\n", LM_EFORMAT, "expected the end of the rule");
	compile_bad("root = \"a\"\n", LM_EFORMAT, "line 1, column 6: expected '::='");
	compile_bad("root ::= * \"a\"\n", LM_EFORMAT, "nothing before '*'");
	compile_bad("root ::= \"a\"{3,1}\n", LM_EFORMAT, "below the minimum");
	compile_bad("root ::= \"\\q\"\n", LM_EFORMAT, "unknown escape");
	compile_bad("root ::= [z-a]\n", LM_EFORMAT, "reversed");
	compile_bad("root ::= \"a\"\nroot ::= \"b\"\n", LM_EFORMAT, "defined twice");
	compile_bad("root ::= root \"a\" | \"b\"\n", LM_EFORMAT, "'root' is left-recursive");
	compile_bad("root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"\n", LM_EFORMAT, "left-recursive");
	compile_bad("root ::= \"a\"{100000}{100000}\n", LM_ERANGE, "expands past");
	compile_bad("", LM_EFORMAT, "no 'root' rule");
}

Test(gbnf, nesting_is_bounded)
{
	char text[512] = "root ::= ";
	for (int i = 0; i < 100; i++)
		strcat(text, "(");
	strcat(text, "\"a\"");
	for (int i = 0; i < 100; i++)
		strcat(text, ")");
	strcat(text, "\n");
	compile_bad(text, LM_ERANGE, "nest deeper than 64");
}

/* ------------------------------------------------------------------ tokens */

static const char *const toy[] = {
	"",    "{",    "}",   "\"", "\"a", "a",    "ab",   "abc",  ":",    ",",    " ",
	"{\"", "\":",  "1",   "12", "123", "true", "tru",  "e",    "\xce", "\xb1", "\xce\xb1",
	"\"}", "null", "x\"", "\\", "\\n", "\n",   "a\"}", "ok\"", " \"",  "\"ok",
};
#define N_TOY ((int32_t)(sizeof toy / sizeof toy[0]))

static const char *toy_piece(void *ctx, int32_t id, size_t *len)
{
	(void)ctx;
	*len = strlen(toy[id]);
	return toy[id];
}

/* The mask of s must be exactly the tokens gbnf_token_ok admits one by one. */
static void check_mask(struct gbnf *g, struct gbnf_vocab *v, struct gbnf_masker *mk,
		       const struct gbnf_state *s)
{
	uint32_t bits[(N_TOY + 31) / 32];
	int32_t n = gbnf_masker_mask(mk, s, bits), want = 0;
	cr_assert_geq(n, 0);
	for (int32_t i = 0; i < N_TOY; i++) {
		bool ok = gbnf_token_ok(g, v, s, i), set = bits[i >> 5] >> (i & 31) & 1;
		cr_assert_eq(set, ok, "token %d '%s': mask %d, alone %d", i, toy[i], set, ok);
		want += ok;
	}
	cr_assert_eq(n, want);
}

Test(gbnf, masks_agree_with_single_tokens)
{
	struct gbnf *g =
		compile_ok("root ::= \"{\" ws (kv (\",\" ws kv)*)? \"}\"\n"
			   "kv ::= str \":\" ws val\n"
			   "val ::= str | [0-9]{1,3} | \"true\" | \"null\"\n"
			   "str ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [n\"\\\\])* \"\\\"\" ws\n"
			   "ws ::= \" \"?\n");
	struct gbnf_vocab *v = NULL;
	cr_assert_eq(gbnf_vocab_build(N_TOY, toy_piece, NULL, &v, NULL), 0);
	struct gbnf_masker *mk = NULL;
	cr_assert_eq(gbnf_masker_new(g, v, &mk), 0);
	const char *text = "{\"ab\\n\xce\xb1\": 12, \"x\":true}";
	struct gbnf_state s;
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	for (size_t i = 0; i <= strlen(text); i++) {
		check_mask(g, v, mk, &s);
		if (i < strlen(text))
			cr_assert_eq(gbnf_accept(g, &s, text + i, 1, NULL), 0, "byte %zu", i);
	}
	cr_assert(gbnf_complete(&s));
	/* At the end nothing may follow: an empty mask. */
	uint32_t bits[(N_TOY + 31) / 32];
	cr_assert_eq(gbnf_masker_mask(mk, &s, bits), 0);
	uint64_t computed, cached;
	gbnf_masker_stats(mk, &computed, &cached);
	cr_assert_gt(cached, 0, "inside the string the state repeats");
	gbnf_state_fini(&s);
	gbnf_masker_free(mk);
	gbnf_vocab_free(v);
	gbnf_free(g);
}

Test(gbnf, tokens_split_inside_a_character)
{
	struct gbnf *g = compile_ok("root ::= \"\\\"\" [α-ω]+ \"\\\"\"\n");
	struct gbnf_vocab *v = NULL;
	cr_assert_eq(gbnf_vocab_build(N_TOY, toy_piece, NULL, &v, NULL), 0);
	struct gbnf_state s;
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept_token(g, v, &s, 3, NULL), 0); /* " */
	cr_assert(gbnf_token_ok(g, v, &s, 19), "the first byte of α");
	cr_assert_not(gbnf_token_ok(g, v, &s, 20), "a continuation byte cannot start");
	cr_assert(gbnf_token_ok(g, v, &s, 21));
	cr_assert_eq(gbnf_accept_token(g, v, &s, 19, NULL), 0);
	cr_assert(gbnf_token_ok(g, v, &s, 20));
	cr_assert_not(gbnf_token_ok(g, v, &s, 3), "a quote inside a character");
	cr_assert_not(gbnf_accepting(&s));
	cr_assert_eq(gbnf_accept_token(g, v, &s, 20, NULL), 0);
	cr_assert_eq(gbnf_accept_token(g, v, &s, 3, NULL), 0);
	cr_assert(gbnf_complete(&s));
	cr_assert_eq(gbnf_accept_token(g, v, &s, 0, NULL), LM_EINVAL, "a token with no text");
	gbnf_state_fini(&s);
	gbnf_vocab_free(v);
	gbnf_free(g);
}

/* `.` under k nested `+`: every character may end or continue any of the k repetitions, so a
 * byte makes thousands of stacks that come to the same few (k = 9 cost seconds a byte before
 * the matcher counted its work). Each step stays inside its bound or is refused with
 * LM_ERANGE; small k still match. */
Test(gbnf, ambiguous_grammars_are_bounded_in_work)
{
	const char *text = "{aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}";
	int refused = 0;
	for (int k = 1; k <= 12; k++) {
		char gram[64];
		snprintf(gram, sizeof gram, "root ::= \"{\" .%.*s \"}\"\n", k, "++++++++++++");
		struct gbnf *g = compile_ok(gram);
		struct gbnf_state s, next = {0};
		cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
		struct gbnf_scratch sc = {0};
		int rc = 0;
		for (size_t i = 0; rc == 0 && text[i] != '\0'; i++) {
			sc.spent = 0;
			rc = gbnf_step_byte(g, s.v, (uint8_t)text[i], &next, &sc);
			if (rc == 0) {
				cr_assert_leq(sc.spent, GBNF_MAX_WORK, "k %d byte %zu", k, i);
				cr_assert_gt(next.v[2], 0, "k %d byte %zu: '.' takes it", k, i);
				struct gbnf_state t = s;
				s = next;
				next = t;
			}
		}
		cr_assert(rc == 0 || rc == LM_ERANGE, "k %d: rc %d", k, rc);
		refused += rc != 0;
		if (k <= 4)
			cr_assert_eq(rc, 0, "k %d", k);
		if (k >= 9)
			cr_assert_eq(rc, LM_ERANGE, "k %d", k);
		/* The public calls say the same. */
		lm_diag d = {{0}};
		struct gbnf_state s2;
		cr_assert_eq(gbnf_state_init(g, &s2, NULL), 0);
		int rc2 = gbnf_accept(g, &s2, text, strlen(text), &d);
		cr_assert_eq(rc2, rc, "k %d", k);
		if (rc2 == 0)
			cr_assert(gbnf_accepting(&s2), "k %d", k);
		else
			cr_assert(strstr(d.msg, "bounds") != NULL, "k %d: %s", k, d.msg);
		gbnf_state_fini(&s2);
		gbnf_scratch_fini(&sc);
		gbnf_state_fini(&next);
		gbnf_state_fini(&s);
		gbnf_free(g);
	}
	cr_assert_geq(refused, 4);
}

/* Stacks met again are kept once (the matcher finds them by hash); distinct ones all stay. */
Test(gbnf, equal_stacks_kept_once_distinct_ones_all)
{
	struct gbnf *g =
		compile_ok("root ::= (\"a\" | \"a\" | \"a\" x | \"a\" x) \"b\"\nx ::= \"\"\n");
	struct gbnf_state s;
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept(g, &s, "a", 1, NULL), 0);
	cr_assert_eq(s.v[2], 1, "after a: one stack, not %d", s.v[2]);
	gbnf_state_fini(&s);
	gbnf_free(g);

	/* An enum of 1000 values: 1000 stacks after the opening quote, each one its value. */
	size_t cap = 20000, len = 0;
	char *text = malloc(cap);
	cr_assert_not_null(text);
	len += (size_t)snprintf(text, cap, "root ::= \"\\\"\" (");
	for (int i = 0; i < 1000; i++)
		len += (size_t)snprintf(text + len, cap - len, "%s\"value-%d\"", i ? " | " : "", i);
	snprintf(text + len, cap - len, ") \"\\\"\"\n");
	g = compile_ok(text);
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_accept(g, &s, "\"", 1, NULL), 0);
	cr_assert_eq(s.v[2], 1000);
	gbnf_state_fini(&s);
	cr_assert(m(g, "\"value-0\""));
	cr_assert(m(g, "\"value-999\""));
	cr_assert(m(g, "\"value-500\""));
	cr_assert_not(m(g, "\"value-1000\""));
	cr_assert_not(m(g, "\"value-\""));
	gbnf_free(g);
	free(text);
}

/* Tokens of one CJK character each, U+4E00 on: every token ends in a step of its own (a
 * (state, byte) pair the masker has not met), 8192 of them. */
#define N_WIDE 8192
static char wide_buf[N_WIDE][4];

static const char *wide_piece(void *ctx, int32_t id, size_t *len)
{
	(void)ctx;
	uint32_t cp = 0x4E00u + (uint32_t)id;
	char *p = wide_buf[id];
	p[0] = (char)(0xE0 | cp >> 12);
	p[1] = (char)(0x80 | (cp >> 6 & 0x3F));
	p[2] = (char)(0x80 | (cp & 0x3F));
	*len = 3;
	return p;
}

/* A mask whose steps each stay inside their bound but which together pass the mask's
 * bound is refused (LM_ERANGE), and the masker works on for a plain grammar afterwards. */
Test(gbnf, a_mask_is_bounded_in_work)
{
	struct gbnf_vocab *v = NULL;
	cr_assert_eq(gbnf_vocab_build(N_WIDE, wide_piece, NULL, &v, NULL), 0);
	uint32_t *bits = calloc((N_WIDE + 31) / 32, sizeof *bits);
	cr_assert_not_null(bits);
	struct gbnf *g = compile_ok("root ::= .++++++++\n");
	struct gbnf_masker *mk = NULL;
	cr_assert_eq(gbnf_masker_new(g, v, &mk), 0);
	struct gbnf_state s;
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	/* Some characters first: the stacks fan out as the repetitions nest. */
	cr_assert_eq(gbnf_accept(g, &s, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 32, NULL), 0);
	cr_assert(gbnf_token_ok(g, v, &s, 0), "one token's steps are inside their bound");
	cr_assert_eq(gbnf_masker_mask(mk, &s, bits), LM_ERANGE);
	gbnf_state_fini(&s);
	gbnf_masker_free(mk);
	gbnf_free(g);

	g = compile_ok("root ::= [\\u4E00-\\u5DFF]+\n");
	cr_assert_eq(gbnf_masker_new(g, v, &mk), 0);
	cr_assert_eq(gbnf_state_init(g, &s, NULL), 0);
	cr_assert_eq(gbnf_masker_mask(mk, &s, bits), 4096);
	gbnf_state_fini(&s);
	gbnf_masker_free(mk);
	gbnf_free(g);
	free(bits);
	gbnf_vocab_free(v);
}

/* tok_pretok.c — the pre-tokenizers of BPE: llama.cpp's regex lists, by hand.
 *
 * llama.cpp splits text with a list of regexes applied in turn: each regex cuts every current
 * piece into its matches and the gaps between them (both kept as pieces). Some regexes it runs as
 * hand-written code: GPT-2's, Llama 3's and its qwen2/qwen35 variants, gemma4's newline split
 * (unicode_regex_split_custom_*), and those are followed here step by step, quirks included. The
 * others it runs through std::regex over a "collapsed" text where every non-ASCII code point is
 * replaced by one byte standing for its class, so \p{L} means "an ASCII letter or a non-ASCII
 * code point of category L that is not white space". Each stage below reproduces one regex's
 * matches under those rules.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/err.h"
#include "common/tok/tok_internal.h"
#include "common/tok/tok_unicode.h"
#include "common/base/buf.h"

int tok_u32v_push(struct tok_u32v *v, uint32_t x)
{
	if (v->n == v->cap) {
		uint32_t *p = lm_grow(v->p, &v->cap, v->n + 1, sizeof *p, 64);
		if (p == NULL)
			return LM_ENOMEM;
		v->p = p;
	}
	v->p[v->n++] = x;
	return 0;
}

void tok_u32v_fini(struct tok_u32v *v)
{
	if (v == NULL)
		return;
	free(v->p);
	v->p = NULL;
	v->n = v->cap = 0;
}

/* Per code point class bits: the category in the low 3 bits, white space above. */
#define CLS_WS 8u

static bool cls_is(uint8_t c, enum tok_ucat cat)
{
	return (c & 7u) == (unsigned)cat;
}

/* The character classes the regexes use. */
enum pt_class {
	PT_L,             /* \p{L} */
	PT_N,             /* \p{N} */
	PT_P,             /* \p{P} */
	PT_DEFAULT_PUNCT, /* [\p{P}\$\+<=>\^~\|] */
	PT_FALCON_PUNCT,  /* [\p{P}\$\+<=>\^~\|`] */
	PT_CJK, /* [一-龥ࠀ-一가-퟿]: U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF */
	PT_ASCII_DIGIT, /* [0-9] */
	PT_CRLF,        /* [\r\n] */
};

static bool pt_in(enum pt_class k, uint32_t cp, uint8_t c)
{
	switch (k) {
	case PT_L:
		return cls_is(c, TOK_UCAT_LETTER);
	case PT_N:
		return cls_is(c, TOK_UCAT_NUMBER);
	case PT_P:
		return cls_is(c, TOK_UCAT_PUNCT);
	case PT_DEFAULT_PUNCT:
	case PT_FALCON_PUNCT:
		return cls_is(c, TOK_UCAT_PUNCT) || cp == '$' || cp == '+' || cp == '<' ||
		       cp == '=' || cp == '>' || cp == '^' || cp == '~' || cp == '|' ||
		       (k == PT_FALCON_PUNCT && cp == '`');
	case PT_CJK:
		/* This regex has no \p{..}, so llama.cpp matches it on the code points themselves,
		 * after replacing non-ASCII white space by U+000B. */
		if (c & CLS_WS)
			return false;
		return (cp >= 0x0800 && cp <= 0x9fa5) || (cp >= 0xac00 && cp <= 0xd7ff);
	case PT_ASCII_DIGIT:
		return cp >= '0' && cp <= '9';
	case PT_CRLF:
		return cp == '\r' || cp == '\n';
	}
	return false;
}

/* The shapes of the regexes, X being a class. */
enum pt_shape {
	PT_ONE,    /* X */
	PT_RUN,    /* X+ */
	PT_SP_RUN, /* \s?X+ */
	PT_THREE,  /* XXX */
	PT_GPT2,   /* the GPT-2 regex, hand-written */
	PT_LLAMA3, /* Llama 3's regex and its relatives, hand-written */
	PT_GPT4O,  /* GPT-4o's regex, hand-written */
	PT_LINES,  /* [^\n]+|[\n]+ */
};

struct pt_stage {
	enum pt_shape shape;
	enum pt_class cls;  /* PT_LLAMA3: cls unused */
	uint8_t max_digits; /* PT_LLAMA3: the longest run of \p{N} in one word (3 or 1) */
	bool marks;         /* PT_LLAMA3: \p{M} joins letters in words ([\p{L}\p{M}]+) */
};

struct pt_text {
	const uint32_t *cp;
	const uint8_t *c;
};

/* If the stage's regex matches at p (inside [p, e)), sets *end and returns true. */
static bool pt_match_at(const struct pt_stage *st, const struct pt_text *t, size_t p, size_t e,
			size_t *end)
{
	size_t q = p;
	switch (st->shape) {
	case PT_ONE:
		if (!pt_in(st->cls, t->cp[p], t->c[p]))
			return false;
		*end = p + 1;
		return true;
	case PT_THREE:
		if (e - p < 3)
			return false;
		for (size_t k = 0; k < 3; k++)
			if (!pt_in(st->cls, t->cp[p + k], t->c[p + k]))
				return false;
		*end = p + 3;
		return true;
	case PT_SP_RUN:
		/* \s? is greedy but gives the space back when no X follows it; a white-space code
		 * point is never in X, so "space then X" or "X here" are the only matches. */
		if ((t->c[p] & CLS_WS) && p + 1 < e && pt_in(st->cls, t->cp[p + 1], t->c[p + 1]))
			q = p + 1;
		__attribute__((fallthrough));
	case PT_RUN:
		if (!pt_in(st->cls, t->cp[q], t->c[q]))
			return false;
		while (q < e && pt_in(st->cls, t->cp[q], t->c[q]))
			q++;
		*end = q;
		return true;
	case PT_GPT2:
	case PT_LLAMA3:
	case PT_GPT4O:
	case PT_LINES:
		break;
	}
	return false;
}

/* One regex over the piece [b, e): matches and the gaps between them become pieces. */
static int pt_split_regex(const struct pt_stage *st, const struct pt_text *t, size_t b, size_t e,
			  struct tok_u32v *out)
{
	size_t pos = b;
	int rc;
	for (size_t p = b; p < e;) {
		size_t end;
		if (!pt_match_at(st, t, p, e, &end)) {
			p++;
			continue;
		}
		if (p > pos && (rc = tok_u32v_push(out, (uint32_t)p)) != 0)
			return rc;
		if ((rc = tok_u32v_push(out, (uint32_t)end)) != 0)
			return rc;
		pos = p = end;
	}
	if (pos < e)
		return tok_u32v_push(out, (uint32_t)e);
	return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over [b, e), with
 * the regex's look-ahead bounded by the piece (what follows it does not count). */
static int pt_split_gpt2(const struct pt_text *t, size_t b, size_t e, struct tok_u32v *out)
{
	const uint32_t *cp = t->cp;
	const uint8_t *c = t->c;
#define IN(i)    ((i) < e)
#define IS_L(i)  (IN(i) && cls_is(c[i], TOK_UCAT_LETTER))
#define IS_N(i)  (IN(i) && cls_is(c[i], TOK_UCAT_NUMBER))
#define IS_WS(i) (IN(i) && (c[i] & CLS_WS))
#define IS_O(i)                                                         \
	(IN(i) && !(c[i] & CLS_WS) && !cls_is(c[i], TOK_UCAT_LETTER) && \
	 !cls_is(c[i], TOK_UCAT_NUMBER))
	size_t pos = b;
	int rc;
	while (pos < e) {
		size_t end = pos + 1;
		if (cp[pos] == '\'' && pos + 1 < e) {
			uint32_t n1 = cp[pos + 1];
			uint32_t n2 = pos + 2 < e ? cp[pos + 2] : 0;
			if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
				end = pos + 2;
				goto emit;
			}
			if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') ||
			    (n1 == 'l' && n2 == 'l')) {
				end = pos + 3;
				goto emit;
			}
		}
		size_t q = cp[pos] == ' ' ? pos + 1 : pos; /* after the optional space */
		if (IS_L(q)) {
			while (IS_L(q))
				q++;
			end = q;
			goto emit;
		}
		if (IS_N(q)) {
			while (IS_N(q))
				q++;
			end = q;
			goto emit;
		}
		if (IS_O(q)) {
			while (IS_O(q))
				q++;
			end = q;
			goto emit;
		}
		size_t nws = 0;
		while (IS_WS(pos + nws))
			nws++;
		if (nws > 1 && pos + nws < e) /* \s+(?!\S): leave the last one to the next word */
			end = pos + nws - 1;
		else if (nws > 0)
			end = pos + nws;
	emit:
		if ((rc = tok_u32v_push(out, (uint32_t)end)) != 0)
			return rc;
		pos = end;
	}
#undef IN
#undef IS_L
#undef IS_N
#undef IS_WS
#undef IS_O
	return 0;
}

static uint32_t pt_ascii_lower(uint32_t cp)
{
	return cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp;
}

/* The length of a contraction at p, (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]),
 * or 0. */
static size_t pt_contraction(const uint32_t *cp, size_t p, size_t e)
{
	if (p + 1 >= e || cp[p] != '\'')
		return 0;
	uint32_t n1 = pt_ascii_lower(cp[p + 1]);
	uint32_t n2 = p + 2 < e ? pt_ascii_lower(cp[p + 2]) : 0;
	if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd')
		return 2;
	if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l'))
		return 3;
	return 0;
}

/* Where \s*[\r\n]+|\s+(?!\S)|\s+ ends a match at p inside [p, e), the white-space tail
 * of Llama 3's and GPT-4o's regexes (the look-ahead bounded by the piece); p if p is not
 * white space. */
static size_t pt_space_end(const struct pt_text *t, size_t p, size_t e)
{
	size_t q = p, last_nl = 0;
	for (; q < e && (t->c[q] & CLS_WS); q++)
		if (t->cp[q] == '\r' || t->cp[q] == '\n')
			last_nl = q + 1;
	if (last_nl > 0) /* \s*[\r\n]+ */
		return last_nl;
	if (q - p > 1 && q < e) /* \s+(?!\S): the last one goes with what follows */
		return q - 1;
	return q; /* \s+, or no white space */
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ over [b, e): Llama 3's regex as llama.cpp runs it
 * (unicode_regex_split_custom_llama3), qwen2's with \p{N} instead of \p{N}{1,3}, and qwen35's with
 * [\p{L}\p{M}] for \p{L} (and \p{M} out of the third branch). As in llama.cpp, what follows the
 * piece does not count for the look-ahead, and only ASCII letters fold case. */
static int pt_split_llama3(const struct pt_stage *st, const struct pt_text *t, size_t b, size_t e,
			   struct tok_u32v *out)
{
	const uint32_t *cp = t->cp;
	const uint8_t *c = t->c;
#define IN(i)   ((i) < e)
#define IS_N(i) (IN(i) && cls_is(c[i], TOK_UCAT_NUMBER))
#define IS_W(i) \
	(IN(i) && (cls_is(c[i], TOK_UCAT_LETTER) || (st->marks && cls_is(c[i], TOK_UCAT_MARK))))
#define IS_O(i) (IN(i) && !(c[i] & CLS_WS) && !IS_W(i) && !cls_is(c[i], TOK_UCAT_NUMBER))
	size_t pos = b;
	int rc;
	while (pos < e) {
		size_t end;
		uint32_t x = cp[pos];
		if ((end = pos + pt_contraction(cp, pos, e)) > pos)
			goto emit;
		/* One character that is not \r, \n or a number may lead a run of letters. */
		if (x != '\r' && x != '\n' && !IS_N(pos) && (IS_W(pos) || IS_W(pos + 1))) {
			end = pos + 1;
			while (IS_W(end))
				end++;
			goto emit;
		}
		if (IS_N(pos)) {
			end = pos + 1;
			while (IS_N(end) && end - pos < st->max_digits)
				end++;
			goto emit;
		}
		/* " ?" then the others: also a space that ends the piece. */
		if (x == ' ' ? !IN(pos + 1) || IS_O(pos + 1) : IS_O(pos)) {
			end = x == ' ' ? pos + 1 : pos;
			while (IS_O(end))
				end++;
			while (IN(end) && (cp[end] == '\r' || cp[end] == '\n'))
				end++;
			goto emit;
		}
		/* White space, or nothing matches: the character alone. */
		if ((end = pt_space_end(t, pos, e)) == pos)
			end = pos + 1;
	emit:
		if ((rc = tok_u32v_push(out, (uint32_t)end)) != 0)
			return rc;
		pos = end;
	}
#undef IN
#undef IS_N
#undef IS_W
#undef IS_O
	return 0;
}

/* GPT-4o's regex (o200k; also llama4's) as llama.cpp runs it: through std::regex over the
 * collapsed text, in the form it rewrites the case classes to,
 *   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(contraction)?|
 *   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(contraction)?|
 *   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * so an "upper" letter is any letter but a-z and a "lower" one any letter but A-Z: a non-ASCII
 * letter (one collapsed byte) is both, and marks are not letters. The alternatives are tried in
 * order and each backtracks as ECMAScript's does; every code point starts some match. */
static int pt_split_gpt4o(const struct pt_text *t, size_t b, size_t e, struct tok_u32v *out)
{
	const uint32_t *cp = t->cp;
	const uint8_t *c = t->c;
#define IN(i)    ((i) < e)
#define IS_L(i)  (IN(i) && cls_is(c[i], TOK_UCAT_LETTER))
#define IS_UP(i) (IS_L(i) && !(cp[i] >= 'a' && cp[i] <= 'z'))
#define IS_LO(i) (IS_L(i) && !(cp[i] >= 'A' && cp[i] <= 'Z'))
#define IS_N(i)  (IN(i) && cls_is(c[i], TOK_UCAT_NUMBER))
#define IS_O(i)  (IN(i) && !(c[i] & CLS_WS) && !IS_L(i) && !IS_N(i))
	size_t pos = b;
	int rc;
	while (pos < e) {
		size_t end = pos + 1, q = pos;
		uint32_t x = cp[pos];
		/* The first two alternatives share the optional leading character. */
		if (x != '\r' && x != '\n' && !IS_L(pos) && !IS_N(pos))
			q = pos + 1;
		size_t u = q;
		while (IS_UP(u))
			u++;
		if (IS_LO(u)) { /* uppers, then lowers */
			end = u;
			while (IS_LO(end))
				end++;
		} else if (u > q) {
			/* No lower after the uppers: the first alternative takes back uppers until
			 * the last one that is also a lower (a non-ASCII letter) ends it; without one,
			 * the second takes all the uppers. */
			end = u;
			for (size_t j = u; j > q; j--)
				if (IS_LO(j - 1)) {
					end = j;
					break;
				}
		} else {
			goto not_a_word;
		}
		end += pt_contraction(cp, end, e);
		goto emit;
	not_a_word:
		if (IS_N(pos)) {
			end = pos + 1;
			while (IS_N(end) && end - pos < 3)
				end++;
			goto emit;
		}
		if (x == ' ' ? IS_O(pos + 1) : IS_O(pos)) {
			end = x == ' ' ? pos + 1 : pos;
			while (IS_O(end))
				end++;
			while (IN(end) && (cp[end] == '\r' || cp[end] == '\n' || cp[end] == '/'))
				end++;
			goto emit;
		}
		if ((end = pt_space_end(t, pos, e)) == pos) /* not reached: every class is above */
			end = pos + 1;
	emit:
		if ((rc = tok_u32v_push(out, (uint32_t)end)) != 0)
			return rc;
		pos = end;
	}
#undef IN
#undef IS_L
#undef IS_UP
#undef IS_LO
#undef IS_N
#undef IS_O
	return 0;
}

/* [^\n]+|[\n]+ over [b, e): runs of newlines and runs of everything else. */
static int pt_split_lines(const struct pt_text *t, size_t b, size_t e, struct tok_u32v *out)
{
	int rc;
	for (size_t pos = b; pos < e;) {
		bool nl = t->cp[pos] == '\n';
		while (pos < e && (t->cp[pos] == '\n') == nl)
			pos++;
		if ((rc = tok_u32v_push(out, (uint32_t)pos)) != 0)
			return rc;
	}
	return 0;
}

/* A regex stage X, and a Llama 3 stage with its options. */
#define ST(shape, cls)               \
	{                            \
		shape, cls, 0, false \
	}
#define ST_LLAMA3(digits, marks)               \
	{                                      \
		PT_LLAMA3, PT_L, digits, marks \
	}

static const struct pt_stage pt_default[] = {
	ST(PT_RUN, PT_DEFAULT_PUNCT),
	ST(PT_GPT2, PT_L),
	ST(PT_RUN, PT_N),
	ST(PT_THREE, PT_ASCII_DIGIT),
};
static const struct pt_stage pt_gpt2[] = {ST(PT_GPT2, PT_L)};
static const struct pt_stage pt_starcoder[] = {ST(PT_ONE, PT_N), ST(PT_GPT2, PT_L)};
static const struct pt_stage pt_deepseek_coder[] = {
	ST(PT_ONE, PT_CRLF), ST(PT_SP_RUN, PT_L), ST(PT_SP_RUN, PT_P),
	ST(PT_RUN, PT_CJK),  ST(PT_ONE, PT_N),
};
static const struct pt_stage pt_falcon[] = {
	ST(PT_RUN, PT_FALCON_PUNCT),
	ST(PT_GPT2, PT_L),
	ST(PT_THREE, PT_ASCII_DIGIT),
};
static const struct pt_stage pt_llama3[] = {ST_LLAMA3(3, false)};
static const struct pt_stage pt_qwen2[] = {ST_LLAMA3(1, false)};
static const struct pt_stage pt_qwen35[] = {ST_LLAMA3(1, true)};
static const struct pt_stage pt_gpt4o[] = {ST(PT_GPT4O, PT_L)};
static const struct pt_stage pt_lines[] = {ST(PT_LINES, PT_L)};

int tok_pretok_split(enum tok_pre pre, const uint32_t *cps, size_t n, struct tok_u32v *ends,
		     struct tok_u32v *scratch)
{
	const struct pt_stage *stages;
	size_t n_stages;
	int rc = 0;

	ends->n = 0;
	if (n == 0)
		return 0;
	if (n > UINT32_MAX)
		return LM_ERANGE;
	switch (pre) {
	case TOK_PRE_DEFAULT:
		stages = pt_default;
		n_stages = sizeof pt_default / sizeof pt_default[0];
		break;
	case TOK_PRE_GPT2:
		stages = pt_gpt2;
		n_stages = 1;
		break;
	case TOK_PRE_STARCODER:
		stages = pt_starcoder;
		n_stages = 2;
		break;
	case TOK_PRE_DEEPSEEK_CODER:
		stages = pt_deepseek_coder;
		n_stages = sizeof pt_deepseek_coder / sizeof pt_deepseek_coder[0];
		break;
	case TOK_PRE_FALCON:
		stages = pt_falcon;
		n_stages = sizeof pt_falcon / sizeof pt_falcon[0];
		break;
	case TOK_PRE_LLAMA3:
		stages = pt_llama3;
		n_stages = 1;
		break;
	case TOK_PRE_QWEN2:
		stages = pt_qwen2;
		n_stages = 1;
		break;
	case TOK_PRE_QWEN35:
		stages = pt_qwen35;
		n_stages = 1;
		break;
	case TOK_PRE_GPT4O:
		stages = pt_gpt4o;
		n_stages = 1;
		break;
	case TOK_PRE_NEWLINES:
		stages = pt_lines;
		n_stages = 1;
		break;
	default:
		return tok_u32v_push(ends, (uint32_t)n);
	}

	uint8_t *c = malloc(n);
	if (c == NULL)
		return LM_ENOMEM;
	for (size_t i = 0; i < n; i++)
		c[i] = (uint8_t)((unsigned)tok_ucat(cps[i]) | (tok_is_space(cps[i]) ? CLS_WS : 0u));
	struct pt_text t = {cps, c};

	if ((rc = tok_u32v_push(ends, (uint32_t)n)) != 0)
		goto out;
	for (size_t s = 0; s < n_stages; s++) {
		scratch->n = 0;
		size_t b = 0;
		for (size_t k = 0; k < ends->n; k++) {
			size_t e = ends->p[k];
			switch (stages[s].shape) {
			case PT_GPT2:
				rc = pt_split_gpt2(&t, b, e, scratch);
				break;
			case PT_LLAMA3:
				rc = pt_split_llama3(&stages[s], &t, b, e, scratch);
				break;
			case PT_GPT4O:
				rc = pt_split_gpt4o(&t, b, e, scratch);
				break;
			case PT_LINES:
				rc = pt_split_lines(&t, b, e, scratch);
				break;
			default:
				rc = pt_split_regex(&stages[s], &t, b, e, scratch);
				break;
			}
			if (rc != 0)
				goto out;
			b = e;
		}
		struct tok_u32v tmp = *ends;
		*ends = *scratch;
		*scratch = tmp;
	}
out:
	free(c);
	return rc;
}

/* gbnf_parse.c — GBNF text to the compiled form (gbnf_impl.h). See gbnf.h.
 *
 * A recursive-descent parser over the text, as llama.cpp's grammar-parser reads it: rules are
 * built as element vectors, groups and repetitions become rules of their own (x* becomes
 * R ::= x R | ), and the vectors are laid end to end at the end. Every element appended is
 * counted against GBNF_MAX_ELEMENTS, so an expansion past it stops early with LM_ERANGE.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/base/utf8.h"
#include "common/grammar/gbnf_impl.h"

struct gp_vec {
	struct gbnf_el *e;
	size_t n, cap;
};

struct gp_rule {
	const char *name; /* into the text; NULL for a rule the parser made */
	size_t name_len;
	bool defined;
	size_t first_use; /* offset of the first reference, for "undefined rule" */
	struct gp_vec body;
};

struct gp {
	const char *src;
	size_t len, pos;
	struct gp_rule *rules;
	size_t n_rules, cap_rules;
	size_t total; /* elements in all rules */
	int depth;
	lm_diag *d;
};

__attribute__((format(printf, 4, 5))) static int gp_fail(struct gp *p, int code, size_t at,
							 const char *fmt, ...)
{
	int line = 1, col = 1;
	for (size_t i = 0; i < at && i < p->len; i++) {
		if (p->src[i] == '\n') {
			line++;
			col = 1;
		} else if (((unsigned char)p->src[i] & 0xC0) != 0x80) {
			col++;
		}
	}
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return lm_fail(p->d, code, "grammar: line %d, column %d: %s", line, col, msg);
}

static int gp_push(struct gp *p, struct gp_vec *v, uint32_t type, uint32_t value)
{
	if (p->total >= GBNF_MAX_ELEMENTS)
		return gp_fail(p, LM_ERANGE, p->pos, "the grammar expands past %d elements",
			       GBNF_MAX_ELEMENTS);
	struct gbnf_el *e = lm_grow(v->e, &v->cap, v->n + 1, sizeof *e, 16);
	if (e == NULL)
		return lm_fail(p->d, LM_ENOMEM, "grammar: out of memory");
	v->e = e;
	v->e[v->n++] = (struct gbnf_el){type, value};
	p->total++;
	return 0;
}

/* A new rule (named when name is not NULL); its id, or a negative error. */
static int32_t gp_new_rule(struct gp *p, const char *name, size_t name_len)
{
	if (p->n_rules >= GBNF_MAX_RULES)
		return gp_fail(p, LM_ERANGE, p->pos, "the grammar has more than %d rules",
			       GBNF_MAX_RULES);
	struct gp_rule *r = lm_grow(p->rules, &p->cap_rules, p->n_rules + 1, sizeof *r, 16);
	if (r == NULL)
		return lm_fail(p->d, LM_ENOMEM, "grammar: out of memory");
	p->rules = r;
	r[p->n_rules] = (struct gp_rule){.name = name, .name_len = name_len, .first_use = p->pos};
	return (int32_t)p->n_rules++;
}

/* The id of the named rule, made (undefined) at its first mention. */
static int32_t gp_symbol(struct gp *p, const char *name, size_t n)
{
	for (size_t i = 0; i < p->n_rules; i++)
		if (p->rules[i].name != NULL && p->rules[i].name_len == n &&
		    memcmp(p->rules[i].name, name, n) == 0)
			return (int32_t)i;
	return gp_new_rule(p, name, n);
}

static bool gp_word_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-';
}

static int gp_peek(const struct gp *p)
{
	return p->pos < p->len ? (unsigned char)p->src[p->pos] : -1;
}

/* Spaces, tabs and comments; newlines too when newline_ok. */
static void gp_space(struct gp *p, bool newline_ok)
{
	while (p->pos < p->len) {
		char c = p->src[p->pos];
		if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
			p->pos++;
		} else if (c == '#') {
			while (p->pos < p->len && p->src[p->pos] != '\n' && p->src[p->pos] != '\r')
				p->pos++;
		} else {
			break;
		}
	}
}

static int gp_hex(struct gp *p, int digits, uint32_t *cp)
{
	uint32_t v = 0;
	for (int i = 0; i < digits; i++) {
		int c = gp_peek(p);
		int x = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (x < 0)
			return gp_fail(p, LM_EFORMAT, p->pos, "expected %d hex digits", digits);
		v = v * 16 + (uint32_t)x;
		p->pos++;
	}
	if (v > 0x10FFFF)
		return gp_fail(p, LM_EFORMAT, p->pos, "code point U+%X is past U+10FFFF", v);
	*cp = v;
	return 0;
}

/* One character of a literal or class: an escape or one UTF-8 code point. */
static int gp_char(struct gp *p, uint32_t *cp)
{
	const uint8_t *s = (const uint8_t *)p->src + p->pos;
	size_t left = p->len - p->pos;
	if (left == 0)
		return gp_fail(p, LM_EFORMAT, p->pos, "unexpected end of the grammar");
	if (s[0] == '\\') {
		if (left < 2)
			return gp_fail(p, LM_EFORMAT, p->pos, "unexpected end after '\\'");
		p->pos += 2;
		switch (s[1]) {
		case 'x':
			return gp_hex(p, 2, cp);
		case 'u':
			return gp_hex(p, 4, cp);
		case 'U':
			return gp_hex(p, 8, cp);
		case 't':
			*cp = '\t';
			return 0;
		case 'r':
			*cp = '\r';
			return 0;
		case 'n':
			*cp = '\n';
			return 0;
		case '\\':
		case '"':
		case '[':
		case ']':
		case '-':
		case '^':
			*cp = s[1];
			return 0;
		default:
			return gp_fail(p, LM_EFORMAT, p->pos - 2, "unknown escape '\\%c'", s[1]);
		}
	}
	size_t n = lm_utf8_len(s, left);
	if (n == 0)
		return gp_fail(p, LM_EFORMAT, p->pos, "invalid UTF-8");
	uint32_t v = n == 1 ? s[0] : n == 2 ? s[0] & 0x1Fu : n == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
	for (size_t i = 1; i < n; i++)
		v = v << 6 | (s[i] & 0x3Fu);
	*cp = v;
	p->pos += n;
	return 0;
}

static int gp_alternates(struct gp *p, struct gp_vec *out, bool nested);

/* S{min,max} (max < 0: unbounded) applied to out->e[start..], llama.cpp's rewrite:
 * S S ... (min times) then S' where S'(k) ::= S S'(k-1) | and S'(1) ::= S | (or S' ::= S S' |
 * when unbounded). */
static int gp_repeat(struct gp *p, struct gp_vec *out, size_t start, long min, long max)
{
	size_t n = out->n - start;
	int rc;
	struct gp_vec sym = {0};
	if (n == 0)
		return gp_fail(p, LM_EFORMAT, p->pos, "nothing before the repetition");
	if ((sym.e = malloc(n * sizeof *sym.e)) == NULL)
		return lm_fail(p->d, LM_ENOMEM, "grammar: out of memory");
	memcpy(sym.e, out->e + start, n * sizeof *sym.e);
	sym.n = sym.cap = n;
	if (min == 0) {
		p->total -= n;
		out->n = start;
	}
	for (long i = 1; i < min; i++)
		for (size_t j = 0; j < n; j++)
			if ((rc = gp_push(p, out, sym.e[j].type, sym.e[j].value)) != 0)
				goto done;
	long n_opt = max < 0 ? 1 : max - min;
	int32_t last = -1;
	for (long i = 0; i < n_opt; i++) {
		int32_t id = gp_new_rule(p, NULL, 0);
		if (id < 0) {
			rc = id;
			goto done;
		}
		struct gp_vec *body = &p->rules[id].body;
		for (size_t j = 0; j < n; j++)
			if ((rc = gp_push(p, body, sym.e[j].type, sym.e[j].value)) != 0)
				goto done;
		if ((i > 0 || max < 0) &&
		    (rc = gp_push(p, body, GBNF_REF, (uint32_t)(max < 0 ? id : last))) != 0)
			goto done;
		if ((rc = gp_push(p, body, GBNF_ALT, 0)) != 0 ||
		    (rc = gp_push(p, body, GBNF_END, 0)) != 0)
			goto done;
		p->rules[id].defined = true;
		last = id;
	}
	rc = n_opt > 0 ? gp_push(p, out, GBNF_REF, (uint32_t)last) : 0;
done:
	free(sym.e);
	return rc;
}

static int gp_count(struct gp *p, long *v)
{
	*v = 0;
	if (gp_peek(p) < '0' || gp_peek(p) > '9')
		return gp_fail(p, LM_EFORMAT, p->pos, "expected a number");
	while (gp_peek(p) >= '0' && gp_peek(p) <= '9') {
		*v = *v * 10 + (gp_peek(p) - '0');
		if (*v > GBNF_MAX_ELEMENTS)
			return gp_fail(p, LM_ERANGE, p->pos, "repetition count too large");
		p->pos++;
	}
	return 0;
}

/* {m}, {m,}, {m,n}, {,n} after the symbol at out->e[start..]. */
static int gp_braces(struct gp *p, struct gp_vec *out, size_t start, bool nested)
{
	size_t at = p->pos;
	long min = 0, max = -1;
	int rc;
	p->pos++;
	gp_space(p, nested);
	if (gp_peek(p) != ',' && (rc = gp_count(p, &min)) != 0)
		return rc;
	gp_space(p, nested);
	if (gp_peek(p) == ',') {
		p->pos++;
		gp_space(p, nested);
		if (gp_peek(p) >= '0' && gp_peek(p) <= '9' && (rc = gp_count(p, &max)) != 0)
			return rc;
		gp_space(p, nested);
	} else {
		max = min;
	}
	if (gp_peek(p) != '}')
		return gp_fail(p, LM_EFORMAT, p->pos, "expected '}'");
	p->pos++;
	if (max >= 0 && max < min)
		return gp_fail(p, LM_EFORMAT, at,
			       "repetition {%ld,%ld}: the maximum is below the "
			       "minimum",
			       min, max);
	return gp_repeat(p, out, start, min, max);
}

static int gp_literal(struct gp *p, struct gp_vec *out)
{
	size_t at = p->pos++;
	int rc;
	while (gp_peek(p) != '"') {
		uint32_t cp;
		if (p->pos >= p->len)
			return gp_fail(p, LM_EFORMAT, at, "unterminated string literal");
		if ((rc = gp_char(p, &cp)) != 0 || (rc = gp_push(p, out, GBNF_CHAR, cp)) != 0)
			return rc;
	}
	p->pos++;
	return 0;
}

static int gp_class(struct gp *p, struct gp_vec *out)
{
	size_t at = p->pos++;
	uint32_t first = GBNF_CHAR;
	int rc;
	if (gp_peek(p) == '^') {
		first = GBNF_NOT;
		p->pos++;
	}
	size_t start = out->n;
	while (gp_peek(p) != ']') {
		uint32_t cp, hi;
		if (p->pos >= p->len)
			return gp_fail(p, LM_EFORMAT, at, "unterminated character class");
		if ((rc = gp_char(p, &cp)) != 0 ||
		    (rc = gp_push(p, out, out->n == start ? first : GBNF_CHAR_ALT, cp)) != 0)
			return rc;
		if (gp_peek(p) == '-' && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
			p->pos++;
			if ((rc = gp_char(p, &hi)) != 0)
				return rc;
			if (hi < cp)
				return gp_fail(p, LM_EFORMAT, p->pos, "range U+%X-U+%X is reversed",
					       cp, hi);
			if ((rc = gp_push(p, out, GBNF_RNG_UPPER, hi)) != 0)
				return rc;
		}
	}
	p->pos++;
	if (out->n == start)
		return gp_fail(p, LM_EFORMAT, at, "empty character class");
	return 0;
}

/* One symbol at p->pos (a literal, a class, `.`, a rule name or a group) into out. */
static int gp_symbol_at(struct gp *p, struct gp_vec *out)
{
	int c = gp_peek(p);
	if (c == '"')
		return gp_literal(p, out);
	if (c == '[')
		return gp_class(p, out);
	if (c == '.') {
		p->pos++;
		return gp_push(p, out, GBNF_ANY, 0);
	}
	if (c >= 0 && gp_word_char((char)c)) {
		size_t at = p->pos;
		while (gp_peek(p) >= 0 && gp_word_char((char)gp_peek(p)))
			p->pos++;
		size_t end = p->pos;
		p->pos = at; /* a rule first mentioned here is reported here */
		int32_t id = gp_symbol(p, p->src + at, end - at);
		p->pos = end;
		return id < 0 ? id : gp_push(p, out, GBNF_REF, (uint32_t)id);
	}
	if (c == '(') {
		size_t at = p->pos++;
		if (++p->depth > GBNF_MAX_DEPTH)
			return gp_fail(p, LM_ERANGE, at, "parentheses nest deeper than %d",
				       GBNF_MAX_DEPTH);
		int32_t id = gp_new_rule(p, NULL, 0);
		if (id < 0)
			return id;
		gp_space(p, true);
		struct gp_vec body = {0};
		int rc = gp_alternates(p, &body, true);
		p->rules[id].body = body; /* the rules array may have moved meanwhile */
		p->rules[id].defined = true;
		p->depth--;
		if (rc != 0)
			return rc;
		if (gp_peek(p) != ')')
			return gp_fail(p, LM_EFORMAT, p->pos,
				       "expected ')' to close the '(' at "
				       "offset %zu",
				       at);
		p->pos++;
		return gp_push(p, out, GBNF_REF, (uint32_t)id);
	}
	return gp_fail(p, LM_EFORMAT, p->pos, "unexpected '%c'", c);
}

static int gp_sequence(struct gp *p, struct gp_vec *out, bool nested)
{
	size_t last = out->n;
	bool have = false;
	int rc;
	for (;;) {
		int c = gp_peek(p);
		if (c < 0 || c == '|' || c == ')' || c == '\n' || c == '\r')
			return 0;
		if (c == '*' || c == '+' || c == '?') {
			if (!have)
				return gp_fail(p, LM_EFORMAT, p->pos, "nothing before '%c'", c);
			p->pos++;
			rc = gp_repeat(p, out, last, c == '+' ? 1 : 0, c == '?' ? 1 : -1);
		} else if (c == '{') {
			if (!have)
				return gp_fail(p, LM_EFORMAT, p->pos, "nothing before '{'");
			rc = gp_braces(p, out, last, nested);
		} else {
			last = out->n;
			have = true;
			rc = gp_symbol_at(p, out);
		}
		if (rc != 0)
			return rc;
		gp_space(p, nested);
	}
}

static int gp_alternates(struct gp *p, struct gp_vec *out, bool nested)
{
	int rc;
	for (;;) {
		if ((rc = gp_sequence(p, out, nested)) != 0)
			return rc;
		if (gp_peek(p) != '|')
			break;
		if ((rc = gp_push(p, out, GBNF_ALT, 0)) != 0)
			return rc;
		p->pos++;
		gp_space(p, true);
	}
	return gp_push(p, out, GBNF_END, 0);
}

static int gp_rule(struct gp *p)
{
	size_t at = p->pos;
	while (gp_peek(p) >= 0 && gp_word_char((char)gp_peek(p)))
		p->pos++;
	if (p->pos == at)
		return gp_fail(p, LM_EFORMAT, at, "expected a rule name");
	int32_t id = gp_symbol(p, p->src + at, p->pos - at);
	if (id < 0)
		return id;
	if (p->rules[id].defined)
		return gp_fail(p, LM_EFORMAT, at, "rule '%.*s' is defined twice",
			       (int)(p->pos - at), p->src + at);
	gp_space(p, false);
	if (p->len - p->pos < 3 || memcmp(p->src + p->pos, "::=", 3) != 0)
		return gp_fail(p, LM_EFORMAT, p->pos, "expected '::=' after '%.*s'",
			       (int)(p->pos - at), p->src + at);
	p->pos += 3;
	gp_space(p, true);
	struct gp_vec body = {0};
	int rc = gp_alternates(p, &body, false);
	p->rules[id].body = body;
	p->rules[id].defined = true;
	if (rc != 0)
		return rc;
	int c = gp_peek(p);
	if (c >= 0 && c != '\n' && c != '\r')
		return gp_fail(p, LM_EFORMAT, p->pos, "expected the end of the rule, got '%c'", c);
	return 0;
}

/* ------------------------------------------------------------------ checks */

/* nullable[r]: rule r matches the empty text (a fixed point, bounded by the rule count). */
static void gp_nullable(const struct gbnf *g, bool *nullable)
{
	for (int32_t round = 0; round <= g->n_rules; round++) {
		bool changed = false;
		for (int32_t r = 0; r < g->n_rules; r++) {
			if (nullable[r])
				continue;
			const struct gbnf_el *e = g->el + g->rule_at[r];
			bool all = true;
			for (;; e++) {
				if (gbnf_is_end(e)) {
					if (all) {
						nullable[r] = changed = true;
						break;
					}
					if (e->type == GBNF_END)
						break;
					all = true;
					continue;
				}
				if (e->type != GBNF_REF || !nullable[e->value])
					all = false;
			}
		}
		if (!changed)
			return;
	}
}

/* Depth-first over "r can start with rule x" edges; a back edge is left recursion. */
static int32_t gp_left_cycle(const struct gbnf *g, const bool *nullable, uint8_t *color, int32_t r,
			     int depth)
{
	if (color[r] == 1)
		return r;
	if (color[r] == 2 || depth > GBNF_MAX_RULES)
		return -1;
	color[r] = 1;
	const struct gbnf_el *e = g->el + g->rule_at[r];
	bool at_start = true;
	for (;; e++) {
		if (gbnf_is_end(e)) {
			if (e->type == GBNF_END)
				break;
			at_start = true;
			continue;
		}
		if (!at_start)
			continue;
		if (e->type == GBNF_REF) {
			int32_t c = gp_left_cycle(g, nullable, color, (int32_t)e->value, depth + 1);
			if (c >= 0)
				return c;
			at_start = nullable[e->value];
		} else {
			at_start = false;
		}
	}
	color[r] = 2;
	return -1;
}

static int gp_check(struct gp *p, struct gbnf *g)
{
	for (size_t i = 0; i < p->n_rules; i++)
		if (!p->rules[i].defined)
			return gp_fail(p, LM_EFORMAT, p->rules[i].first_use,
				       "rule '%.*s' is used but not defined",
				       (int)p->rules[i].name_len, p->rules[i].name);
	bool *nullable = calloc((size_t)g->n_rules, sizeof *nullable);
	uint8_t *color = calloc((size_t)g->n_rules, 1);
	int rc = 0;
	if (nullable == NULL || color == NULL) {
		rc = lm_fail(p->d, LM_ENOMEM, "grammar: out of memory");
		goto out;
	}
	gp_nullable(g, nullable);
	for (int32_t r = 0; r < g->n_rules && rc == 0; r++) {
		int32_t c = gp_left_cycle(g, nullable, color, r, 0);
		if (c < 0)
			continue;
		/* Name the nearest named rule: a group's own rule has no name. */
		const struct gp_rule *nr = &p->rules[c];
		if (nr->name != NULL)
			rc = lm_fail(p->d, LM_EFORMAT, "grammar: rule '%.*s' is left-recursive",
				     (int)nr->name_len, nr->name);
		else
			rc = lm_fail(p->d, LM_EFORMAT,
				     "grammar: a group or repetition is "
				     "left-recursive");
	}
out:
	free(nullable);
	free(color);
	return rc;
}

/* ------------------------------------------------------------------ entry */

static void gp_fini(struct gp *p)
{
	for (size_t i = 0; i < p->n_rules; i++)
		free(p->rules[i].body.e);
	free(p->rules);
}

static int gp_flatten(struct gp *p, struct gbnf *g)
{
	g->n_rules = (int32_t)p->n_rules;
	g->n_el = (int32_t)p->total;
	g->el = malloc((p->total > 0 ? p->total : 1) * sizeof *g->el);
	g->rule_at = malloc((p->n_rules > 0 ? p->n_rules : 1) * sizeof *g->rule_at);
	if (g->el == NULL || g->rule_at == NULL)
		return lm_fail(p->d, LM_ENOMEM, "grammar: out of memory");
	size_t at = 0;
	for (size_t i = 0; i < p->n_rules; i++) {
		g->rule_at[i] = (int32_t)at;
		if (p->rules[i].body.n > 0) /* an undefined rule has none (refused after) */
			memcpy(g->el + at, p->rules[i].body.e, p->rules[i].body.n * sizeof *g->el);
		at += p->rules[i].body.n;
	}
	return 0;
}

int gbnf_compile(const char *text, size_t len, struct gbnf **out, lm_diag *d)
{
	*out = NULL;
	if (len > GBNF_MAX_TEXT)
		return lm_fail(d, LM_ERANGE, "grammar: %zu bytes, more than the %d allowed", len,
			       GBNF_MAX_TEXT);
	struct gp p = {.src = text, .len = len, .d = d};
	struct gbnf *g = calloc(1, sizeof *g);
	int rc = g == NULL ? lm_fail(d, LM_ENOMEM, "grammar: out of memory") : 0;
	gp_space(&p, true);
	while (rc == 0 && p.pos < p.len) {
		rc = gp_rule(&p);
		gp_space(&p, true);
	}
	if (rc == 0) {
		g->root = -1;
		for (size_t i = 0; i < p.n_rules; i++)
			if (p.rules[i].name != NULL && p.rules[i].name_len == 4 &&
			    memcmp(p.rules[i].name, "root", 4) == 0)
				g->root = (int32_t)i;
		if (g->root < 0 || !p.rules[g->root].defined)
			rc = lm_fail(d, LM_EFORMAT, "grammar: no 'root' rule");
	}
	if (rc == 0)
		rc = gp_flatten(&p, g);
	if (rc == 0)
		rc = gp_check(&p, g);
	gp_fini(&p);
	if (rc != 0) {
		gbnf_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

void gbnf_free(struct gbnf *g)
{
	if (g == NULL)
		return;
	free(g->el);
	free(g->rule_at);
	free(g);
}

int32_t gbnf_size(const struct gbnf *g)
{
	return g->n_el;
}

/* jinja_parse.c — a template's text into its AST, as @huggingface/jinja's lexer.ts and
 * parser.ts do it: the same preprocessing (one trailing newline dropped, lstrip_blocks,
 * trim_blocks, the `generation` tag removed), the same tokens (a unary sign glued to the
 * number after it, `}}` inside a dict literal read as two braces) and the same grammar and
 * precedence (filters bind tighter than tests, tests tighter than `**`, `*`, `+`; `not`
 * lower than comparisons; `a if b` without else is undefined when b is false). Each byte of
 * the preprocessed text keeps the line it had in the template, so every token, node and
 * error names its line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api/jinja_impl.h"

#define JP_MAX_DEPTH 200

/* ------------------------------------------------------------------ preprocessing */

/* Text with the template line of each byte. */
struct jpp {
	char *s;
	int *ln;
	size_t n, cap;
};

static void pp_add(struct jctx *c, struct jpp *o, char ch, int line)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 256;
		char *s = jx_alloc(c, cap);
		int *ln = jx_alloc(c, cap * sizeof *ln);
		if (o->n > 0) {
			memcpy(s, o->s, o->n);
			memcpy(ln, o->ln, o->n * sizeof *ln);
		}
		o->s = s;
		o->ln = ln;
		o->cap = cap;
	}
	o->s[o->n] = ch;
	o->ln[o->n++] = line;
}

static bool pp_line_start(const struct jpp *in, size_t i)
{
	if (i == 0)
		return true;
	unsigned char p = (unsigned char)in->s[i - 1];
	/* JavaScript's ^ under the m flag: after \n, \r, U+2028 and U+2029. */
	if (p == '\n' || p == '\r')
		return true;
	return i >= 3 && (unsigned char)in->s[i - 3] == 0xe2 &&
	       (unsigned char)in->s[i - 2] == 0x80 && (p == 0xa8 || p == 0xa9);
}

/* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1". */
static void pp_lstrip(struct jctx *c, const struct jpp *in, struct jpp *o)
{
	for (size_t i = 0; i < in->n;) {
		if (pp_line_start(in, i)) {
			size_t j = i;
			while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t'))
				j++;
			if (j + 1 < in->n && in->s[j] == '{' &&
			    (in->s[j + 1] == '#' || in->s[j + 1] == '%' || in->s[j + 1] == '-'))
				i = j;
		}
		pp_add(c, o, in->s[i], in->ln[i]);
		i++;
	}
}

/* trim_blocks: /([#%-]})\n/g -> "$1". */
static void pp_trim(struct jctx *c, const struct jpp *in, struct jpp *o)
{
	for (size_t i = 0; i < in->n; i++) {
		pp_add(c, o, in->s[i], in->ln[i]);
		if (i + 2 < in->n && (in->s[i] == '#' || in->s[i] == '%' || in->s[i] == '-') &&
		    in->s[i + 1] == '}' && in->s[i + 2] == '\n') {
			pp_add(c, o, in->s[i + 1], in->ln[i + 1]);
			i += 2;
		}
	}
}

static size_t pp_space_at(const struct jpp *in, size_t i)
{
	size_t k;
	if (i >= in->n)
		return 0;
	uint32_t cp = jx_utf8_at(in->s, in->n, i, &k);
	return jx_js_space(cp) ? k : 0;
}

/* The end of a {%-? (end)?generation -?%} tag at i, or 0; *ls, *rs its dashes. */
static size_t pp_generation_tag(const struct jpp *in, size_t i, bool *ls, bool *rs)
{
	const char *s = in->s;
	size_t n = in->n, k;
	if (i + 2 > n || s[i] != '{' || s[i + 1] != '%')
		return 0;
	i += 2;
	*ls = i < n && s[i] == '-';
	i += *ls;
	while ((k = pp_space_at(in, i)) > 0)
		i += k;
	if (i + 3 <= n && memcmp(s + i, "end", 3) == 0 && i + 13 <= n &&
	    memcmp(s + i + 3, "generation", 10) == 0)
		i += 3;
	if (i + 10 > n || memcmp(s + i, "generation", 10) != 0)
		return 0;
	i += 10;
	while ((k = pp_space_at(in, i)) > 0)
		i += k;
	*rs = i < n && s[i] == '-';
	i += *rs;
	if (i + 2 > n || s[i] != '%' || s[i + 1] != '}')
		return 0;
	return i + 2;
}

/* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> the white space around the tag, each
 * side kept unless its dash is there. */
static void pp_generation(struct jctx *c, const struct jpp *in, struct jpp *o)
{
	size_t i = 0, k;
	while (i < in->n) {
		size_t j = i;
		while ((k = pp_space_at(in, j)) > 0)
			j += k;
		bool ls = false, rs = false;
		size_t end = pp_generation_tag(in, j, &ls, &rs);
		if (end == 0) {
			size_t stop = j > i ? j : i + 1;
			for (; i < stop; i++)
				pp_add(c, o, in->s[i], in->ln[i]);
			continue;
		}
		for (; !ls && i < j; i++)
			pp_add(c, o, in->s[i], in->ln[i]);
		i = end;
		while ((k = pp_space_at(in, i)) > 0) {
			for (size_t m = 0; m < k && !rs; m++)
				pp_add(c, o, in->s[i + m], in->ln[i + m]);
			i += k;
		}
	}
}

static void pp_run(struct jctx *c, const char *text, size_t len, struct jpp *out)
{
	struct jpp a = {0}, b = {0};
	int line = 1;
	if (len > 0 && text[len - 1] == '\n')
		len--;
	for (size_t i = 0; i < len; i++) {
		pp_add(c, &a, text[i], line);
		line += text[i] == '\n';
	}
	pp_lstrip(c, &a, &b);
	a.n = 0;
	pp_trim(c, &b, &a);
	pp_generation(c, &a, out);
	pp_add(c, out, '\0', line);
	out->n--;
}

/* ------------------------------------------------------------------ tokens */

enum jtt {
	T_EOF,
	T_TEXT,
	T_NUM,
	T_STR,
	T_IDENT,
	T_EQUALS,
	T_LPAREN,
	T_RPAREN,
	T_OSTMT,
	T_CSTMT,
	T_OEXPR,
	T_CEXPR,
	T_LBRACK,
	T_RBRACK,
	T_LBRACE,
	T_RBRACE,
	T_COMMA,
	T_DOT,
	T_COLON,
	T_PIPE,
	T_ADD,
	T_MUL,
	T_POW,
	T_CMP,
	T_UNARY,
	T_COMMENT
};

static const char *const jtt_names[] = {
	"end of template",
	"Text",
	"NumericLiteral",
	"StringLiteral",
	"Identifier",
	"Equals",
	"OpenParen",
	"CloseParen",
	"OpenStatement",
	"CloseStatement",
	"OpenExpression",
	"CloseExpression",
	"OpenSquareBracket",
	"CloseSquareBracket",
	"OpenCurlyBracket",
	"CloseCurlyBracket",
	"Comma",
	"Dot",
	"Colon",
	"Pipe",
	"AdditiveBinaryOperator",
	"MultiplicativeBinaryOperator",
	"ExponentiationBinaryOperator",
	"ComparisonBinaryOperator",
	"UnaryOperator",
	"Comment",
};

struct jtok {
	enum jtt t;
	int line;
	const struct jstr *v;
};

struct jlex {
	struct jctx *c;
	const struct jpp *src;
	size_t pos;
	struct jtok *tok;
	size_t n, cap;
	int curly;
};

static void lx_push(struct jlex *L, enum jtt t, const struct jstr *v, int line)
{
	if (L->n + 1 >= L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		struct jtok *nt = jx_alloc(L->c, cap * sizeof *nt);
		if (L->n > 0)
			memcpy(nt, L->tok, L->n * sizeof *nt);
		L->tok = nt;
		L->cap = cap;
	}
	L->tok[L->n++] = (struct jtok){t, line, v};
}

static enum jtt lx_last(const struct jlex *L)
{
	return L->n > 0 ? L->tok[L->n - 1].t : T_EOF;
}

static char lx_at(const struct jlex *L, size_t i)
{
	return i < L->src->n ? L->src->s[i] : '\0';
}

static int lx_line(const struct jlex *L)
{
	size_t i = L->pos < L->src->n ? L->pos : L->src->n;
	return i < L->src->n ? L->src->ln[i] : (L->src->n > 0 ? L->src->ln[L->src->n - 1] : 1);
}

static bool lx_is_space(const struct jlex *L, size_t i, size_t *k)
{
	if (i >= L->src->n)
		return false;
	return jx_js_space(jx_utf8_at(L->src->s, L->src->n, i, k));
}

static bool lx_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static bool lx_word(char ch)
{
	return lx_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static void lx_put_cp(struct jctx *c, struct jsb *b, uint32_t cp)
{
	char u[4];
	size_t k;
	if (cp < 0x80) {
		u[0] = (char)cp;
		k = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		k = 2;
	} else {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		k = 3;
	}
	jx_sb_add(c, b, u, k);
}

/* One backslash escape of a string literal at L->pos (past the backslash). */
static void lx_escape(struct jlex *L, struct jsb *b)
{
	struct jctx *c = L->c;
	if (L->pos >= L->src->n)
		jx_fail(c, "Unexpected end of input");
	char e = L->src->s[L->pos++];
	if (e == 'x' || e == 'u') {
		size_t len = e == 'x' ? 2 : 4;
		uint32_t cp = 0;
		for (size_t i = 0; i < len; i++) {
			char h = lx_at(L, L->pos + i);
			int v = lx_digit(h)                          ? h - '0'
				: (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10
								     : -1;
			if (v < 0 || L->pos + i >= L->src->n)
				jx_fail(c, "Invalid hexadecimal escape sequence: \\%c", e);
			cp = cp << 4 | (uint32_t)v;
		}
		L->pos += len;
		lx_put_cp(c, b, cp);
		return;
	}
	static const char from[] = "ntrbfv'\"\\", to[] = "\n\t\r\b\f\v'\"\\";
	const char *p = e != '\0' ? strchr(from, e) : NULL;
	if (p == NULL)
		jx_fail(c, "Unexpected escaped character: %c", e);
	jx_sb_add(c, b, &to[p - from], 1);
}

/* consumeWhile of the reference: a value that reaches the end of the text is an error. */
static const struct jstr *lx_consume(struct jlex *L, int kind, char quote)
{
	struct jsb b = {0};
	for (;;) {
		char ch = lx_at(L, L->pos);
		bool ok = kind == 0 ? lx_digit(ch) : kind == 1 ? lx_word(ch) : ch != quote;
		if (L->pos >= L->src->n || !ok)
			break;
		if (ch == '\\' && kind == 2) {
			L->pos++;
			lx_escape(L, &b);
			continue;
		}
		jx_sb_add(L->c, &b, &ch, 1);
		if (++L->pos >= L->src->n)
			jx_fail(L->c, "Unexpected end of input");
	}
	return jx_sb_str(L->c, &b);
}

static void lx_strip_trailing(struct jlex *L)
{
	if (L->n == 0 || L->tok[L->n - 1].t != T_TEXT)
		return;
	const struct jstr *v = L->tok[L->n - 1].v;
	size_t a, e;
	jx_js_trim(v->p, v->n, false, true, &a, &e);
	if (e == 0)
		L->n--;
	else
		L->tok[L->n - 1].v = jx_str(L->c, v->p, e);
}

static void lx_skip_leading(struct jlex *L)
{
	size_t k;
	while (lx_is_space(L, L->pos, &k))
		L->pos += k;
}

static bool lx_text(struct jlex *L)
{
	const char *s = L->src->s;
	size_t start = L->pos, n = L->src->n;
	while (L->pos < n &&
	       !(s[L->pos] == '{' && L->pos + 1 < n &&
		 (s[L->pos + 1] == '%' || s[L->pos + 1] == '{' || s[L->pos + 1] == '#')))
		L->pos++;
	if (L->pos == start)
		return false;
	lx_push(L, T_TEXT, jx_str(L->c, s + start, L->pos - start), L->src->ln[start]);
	return true;
}

static void lx_comment(struct jlex *L)
{
	int line = lx_line(L);
	L->pos += 2;
	bool before = lx_at(L, L->pos) == '-';
	L->pos += before;
	size_t start = L->pos;
	while (lx_at(L, L->pos) != '#' || lx_at(L, L->pos + 1) != '}') {
		if (L->pos + 2 >= L->src->n)
			jx_fail(L->c, "Missing end of comment tag");
		L->pos++;
	}
	size_t len = L->pos - start;
	bool after = len > 0 && L->src->s[L->pos - 1] == '-';
	if (before)
		lx_strip_trailing(L);
	lx_push(L, T_COMMENT, jx_str(L->c, L->src->s + start, len - after), line);
	L->pos += 2;
	if (after)
		lx_skip_leading(L);
}

/* A sign: part of a binary operator after a value, else a unary one glued to its number. */
static bool lx_sign(struct jlex *L, char ch)
{
	enum jtt last = lx_last(L);
	if (last == T_TEXT || last == T_EOF)
		jx_fail(L->c, "Unexpected character: %c", ch);
	if (last == T_IDENT || last == T_NUM || last == T_STR || last == T_RPAREN ||
	    last == T_RBRACK)
		return false;
	int line = lx_line(L);
	L->pos++;
	struct jsb b = {0};
	jx_sb_add(L->c, &b, &ch, 1);
	const struct jstr *num = lx_consume(L, 0, 0);
	jx_sb_add(L->c, &b, num->p, num->n);
	if (num->n > 0 && lx_at(L, L->pos) == '.' && lx_digit(lx_at(L, L->pos + 1))) {
		L->pos++;
		const struct jstr *frac = lx_consume(L, 0, 0);
		jx_sb_add(L->c, &b, ".", 1);
		jx_sb_add(L->c, &b, frac->p, frac->n);
	}
	lx_push(L, num->n > 0 ? T_NUM : T_UNARY, jx_sb_str(L->c, &b), line);
	return true;
}

static const struct {
	const char *seq;
	enum jtt t;
} lx_table[] = {
	{"{%", T_OSTMT}, {"%}", T_CSTMT}, {"{{", T_OEXPR}, {"}}", T_CEXPR}, {"(", T_LPAREN},
	{")", T_RPAREN}, {"{", T_LBRACE}, {"}", T_RBRACE}, {"[", T_LBRACK}, {"]", T_RBRACK},
	{",", T_COMMA},  {".", T_DOT},    {":", T_COLON},  {"|", T_PIPE},   {"<=", T_CMP},
	{">=", T_CMP},   {"==", T_CMP},   {"!=", T_CMP},   {"<", T_CMP},    {">", T_CMP},
	{"+", T_ADD},    {"-", T_ADD},    {"~", T_ADD},    {"**", T_POW},   {"*", T_MUL},
	{"//", T_MUL},   {"/", T_MUL},    {"%", T_MUL},    {"=", T_EQUALS},
};

static bool lx_table_match(struct jlex *L)
{
	const char *s = L->src->s + L->pos;
	size_t left = L->src->n - L->pos;
	for (size_t i = 0; i < sizeof lx_table / sizeof lx_table[0]; i++) {
		size_t k = strlen(lx_table[i].seq);
		enum jtt t = lx_table[i].t;
		if ((t == T_CEXPR && L->curly > 0) || k > left ||
		    memcmp(s, lx_table[i].seq, k) != 0)
			continue;
		lx_push(L, t, jx_str(L->c, s, k), lx_line(L));
		if (t == T_OEXPR)
			L->curly = 0;
		else if (t == T_LBRACE)
			L->curly++;
		else if (t == T_RBRACE)
			L->curly--;
		L->pos += k;
		return true;
	}
	return false;
}

/* One token (or a stretch of white space) inside a tag. */
static void lx_in_tag(struct jlex *L)
{
	int line = lx_line(L);
	char ch = lx_at(L, L->pos);
	if ((ch == '-' || ch == '+') && lx_sign(L, ch))
		return;
	if (lx_table_match(L))
		return;
	if (ch == '\'' || ch == '"') {
		L->pos++;
		const struct jstr *v = lx_consume(L, 2, ch);
		L->pos++;
		lx_push(L, T_STR, v, line);
	} else if (lx_digit(ch)) {
		struct jsb b = {0};
		const struct jstr *num = lx_consume(L, 0, 0);
		jx_sb_add(L->c, &b, num->p, num->n);
		if (lx_last(L) != T_DOT && lx_at(L, L->pos) == '.' &&
		    lx_digit(lx_at(L, L->pos + 1))) {
			L->pos++;
			const struct jstr *frac = lx_consume(L, 0, 0);
			jx_sb_add(L->c, &b, ".", 1);
			jx_sb_add(L->c, &b, frac->p, frac->n);
		}
		lx_push(L, T_NUM, jx_sb_str(L->c, &b), line);
	} else if (lx_word(ch)) {
		lx_push(L, T_IDENT, lx_consume(L, 1, 0), line);
	} else {
		size_t k;
		jx_utf8_at(L->src->s, L->src->n, L->pos, &k);
		jx_fail(L->c, "Unexpected character: %.*s", (int)k, L->src->s + L->pos);
	}
}

static void lx_run(struct jlex *L)
{
	const struct jpp *src = L->src;
	while (L->pos < src->n) {
		L->c->line = lx_line(L);
		enum jtt last = lx_last(L);
		if ((last == T_EOF || last == T_CSTMT || last == T_CEXPR || last == T_COMMENT) &&
		    lx_text(L))
			continue;
		const char *s = src->s + L->pos;
		size_t left = src->n - L->pos, k;
		if (left >= 2 && s[0] == '{' && s[1] == '#') {
			lx_comment(L);
		} else if (left >= 3 && (memcmp(s, "{%-", 3) == 0 || memcmp(s, "{{-", 3) == 0)) {
			lx_strip_trailing(L);
			lx_push(L, s[1] == '%' ? T_OSTMT : T_OEXPR, jx_str(L->c, s, 2), lx_line(L));
			if (s[1] == '{')
				L->curly = 0;
			L->pos += 3;
		} else {
			while (lx_is_space(L, L->pos, &k)) {
				L->pos += k;
				if (L->pos >= src->n)
					jx_fail(L->c, "Unexpected end of input");
			}
			s = src->s + L->pos;
			left = src->n - L->pos;
			if (left >= 3 && (memcmp(s, "-%}", 3) == 0 || memcmp(s, "-}}", 3) == 0)) {
				lx_push(L, s[1] == '%' ? T_CSTMT : T_CEXPR, jx_str(L->c, s + 1, 2),
					lx_line(L));
				L->pos += 3;
				lx_skip_leading(L);
			} else {
				lx_in_tag(L);
			}
		}
	}
	lx_push(L, T_EOF, jx_str(L->c, "", 0), lx_line(L));
}

/* ------------------------------------------------------------------ the parser */

struct jparser {
	struct jctx *c;
	struct jtok *t;
	size_t n, i;
	int depth;
};

static struct jtok *ps_peek(struct jparser *P, size_t k)
{
	size_t j = P->i + k < P->n ? P->i + k : P->n - 1;
	return &P->t[j];
}

static bool ps_is(struct jparser *P, enum jtt t)
{
	return ps_peek(P, 0)->t == t;
}

static bool ps_is_ident(struct jparser *P, size_t k, const char *name)
{
	struct jtok *t = ps_peek(P, k);
	return t->t == T_IDENT && strcmp(t->v->p, name) == 0;
}

static struct jtok *ps_next(struct jparser *P)
{
	struct jtok *t = ps_peek(P, 0);
	P->c->line = t->line;
	if (t->t == T_EOF)
		jx_fail(P->c, "Unexpected end of template");
	P->i++;
	return t;
}

static struct jtok *ps_expect(struct jparser *P, enum jtt t, const char *what)
{
	struct jtok *k = ps_peek(P, 0);
	P->c->line = k->line;
	if (k->t != t)
		jx_fail(P->c, "Parser Error: %s. %s !== %s.", what, jtt_names[k->t], jtt_names[t]);
	P->i++;
	return k;
}

static void ps_expect_ident(struct jparser *P, const char *name)
{
	if (!ps_is_ident(P, 0, name))
		jx_fail(P->c, "Expected %s", name);
	P->i++;
}

/* {% name %} with name one of the NULL-ended list. */
static bool ps_is_stmt(struct jparser *P, const char *const *names)
{
	if (!ps_is(P, T_OSTMT) || ps_peek(P, 1)->t != T_IDENT)
		return false;
	for (; *names != NULL; names++)
		if (strcmp(ps_peek(P, 1)->v->p, *names) == 0)
			return true;
	return false;
}

static struct jnode *ps_node(struct jparser *P, enum jkind k)
{
	struct jnode *n = jx_alloc(P->c, sizeof *n);
	memset(n, 0, sizeof *n);
	n->k = k;
	n->line = P->c->line;
	return n;
}

static void ps_list_add(struct jparser *P, struct jlist *l, struct jnode *n)
{
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 4;
		struct jnode **v = jx_alloc(P->c, (size_t)cap * sizeof *v);
		if (l->n > 0)
			memcpy(v, l->v, (size_t)l->n * sizeof *v);
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = n;
}

static struct jnode *ps_expression(struct jparser *P);
static struct jnode *ps_any(struct jparser *P);
static struct jnode *ps_primary(struct jparser *P);
static struct jnode *ps_call(struct jparser *P, struct jnode *callee);
static void ps_args(struct jparser *P, struct jlist *out, bool params);

static void ps_body_until(struct jparser *P, struct jlist *body, const char *const *names)
{
	while (!ps_is_stmt(P, names))
		ps_list_add(P, body, ps_any(P));
}

static void ps_end(struct jparser *P, const char *name)
{
	ps_expect(P, T_OSTMT, "Expected {% token");
	ps_expect_ident(P, name);
	ps_expect(P, T_CSTMT, "Expected %} token");
}

static struct jnode *ps_sequence(struct jparser *P, bool primary)
{
	struct jnode *first = primary ? ps_primary(P) : ps_expression(P);
	if (!ps_is(P, T_COMMA))
		return first;
	struct jnode *t = ps_node(P, N_TUPLE);
	ps_list_add(P, &t->l1, first);
	while (ps_is(P, T_COMMA)) {
		P->i++;
		ps_list_add(P, &t->l1, primary ? ps_primary(P) : ps_expression(P));
	}
	return t;
}

static struct jnode *ps_set(struct jparser *P)
{
	static const char *const endset[] = {"endset", NULL};
	struct jnode *n = ps_node(P, N_SET);
	n->a = ps_sequence(P, false);
	if (ps_is(P, T_EQUALS)) {
		P->i++;
		n->b = ps_sequence(P, false);
	} else {
		ps_expect(P, T_CSTMT, "Expected %} token");
		ps_body_until(P, &n->l1, endset);
		ps_expect(P, T_OSTMT, "Expected {% token");
		ps_expect_ident(P, "endset");
	}
	ps_expect(P, T_CSTMT, "Expected closing statement token");
	return n;
}

static struct jnode *ps_if(struct jparser *P)
{
	static const char *const stops[] = {"elif", "else", "endif", NULL};
	static const char *const endif[] = {"endif", NULL};
	struct jnode *n = ps_node(P, N_IF);
	n->a = ps_expression(P);
	ps_expect(P, T_CSTMT, "Expected closing statement token");
	ps_body_until(P, &n->l1, stops);
	if (ps_is_ident(P, 1, "elif")) {
		P->i += 2;
		ps_list_add(P, &n->l2, ps_if(P));
	} else if (ps_is_ident(P, 1, "else")) {
		P->i += 2;
		ps_expect(P, T_CSTMT, "Expected closing statement token");
		ps_body_until(P, &n->l2, endif);
	}
	return n;
}

/* Whether the body reads `kwargs` (1) or `varargs` (2): names in filters and after a dot are
 * not reads. */
static int ps_special(const struct jnode *n)
{
	if (n == NULL)
		return 0;
	switch (n->k) {
	case N_IDENT:
		return strcmp(n->s->p, "kwargs") == 0 ? 1 : strcmp(n->s->p, "varargs") == 0 ? 2 : 0;
	case N_MEMBER:
		return ps_special(n->a) | (n->flag ? ps_special(n->b) : 0);
	case N_FILTER:
	case N_FILTERSTMT: {
		const struct jnode *f = n->k == N_FILTER ? n->b : n->a;
		int r = n->k == N_FILTER ? ps_special(n->a) : 0;
		for (int i = 0; f->k == N_CALL && i < f->l1.n; i++)
			r |= ps_special(f->l1.v[i]);
		for (int i = 0; i < n->l1.n; i++)
			r |= ps_special(n->l1.v[i]);
		return r;
	}
	case N_TEST:
		return ps_special(n->a);
	default:
		break;
	}
	int r = ps_special(n->a) | ps_special(n->b) | ps_special(n->c);
	for (int i = 0; i < n->l1.n; i++)
		r |= ps_special(n->l1.v[i]);
	for (int i = 0; i < n->l2.n; i++)
		r |= ps_special(n->l2.v[i]);
	return r;
}

static struct jnode *ps_macro(struct jparser *P)
{
	static const char *const endmacro[] = {"endmacro", NULL};
	struct jnode *n = ps_node(P, N_MACRO);
	struct jnode *name = ps_primary(P);
	if (name->k != N_IDENT)
		jx_fail(P->c, "Expected identifier following macro statement");
	n->s = name->s;
	ps_args(P, &n->l1, true);
	ps_expect(P, T_CSTMT, "Expected closing statement token");
	ps_body_until(P, &n->l2, endmacro);
	for (int i = 0; i < n->l2.n; i++)
		n->spec |= ps_special(n->l2.v[i]);
	return n;
}

static struct jnode *ps_for(struct jparser *P)
{
	static const char *const stops[] = {"endfor", "else", NULL};
	static const char *const endfor[] = {"endfor", NULL};
	struct jnode *n = ps_node(P, N_FOR);
	n->a = ps_sequence(P, true);
	if (n->a->k != N_IDENT && n->a->k != N_TUPLE)
		jx_fail(P->c, "Expected identifier/tuple for the loop variable");
	if (!ps_is_ident(P, 0, "in"))
		jx_fail(P->c, "Expected `in` keyword following loop variable");
	P->i++;
	n->b = ps_expression(P);
	ps_expect(P, T_CSTMT, "Expected closing statement token");
	ps_body_until(P, &n->l1, stops);
	if (ps_is_ident(P, 1, "else")) {
		P->i += 2;
		ps_expect(P, T_CSTMT, "Expected closing statement token");
		ps_body_until(P, &n->l2, endfor);
	}
	return n;
}

static struct jnode *ps_call_stmt(struct jparser *P)
{
	static const char *const endcall[] = {"endcall", NULL};
	struct jnode *n = ps_node(P, N_CALLSTMT);
	if (ps_is(P, T_LPAREN))
		ps_args(P, &n->l1, true);
	struct jnode *callee = ps_primary(P);
	if (callee->k != N_IDENT)
		jx_fail(P->c, "Expected identifier following call statement");
	n->a = ps_node(P, N_CALL);
	n->a->a = callee;
	ps_args(P, &n->a->l1, false);
	ps_expect(P, T_CSTMT, "Expected closing statement token");
	ps_body_until(P, &n->l2, endcall);
	ps_end(P, "endcall");
	for (int i = 0; i < n->l2.n; i++)
		n->spec |= ps_special(n->l2.v[i]);
	return n;
}

static struct jnode *ps_filter_stmt(struct jparser *P)
{
	static const char *const endfilter[] = {"endfilter", NULL};
	struct jnode *n = ps_node(P, N_FILTERSTMT);
	n->a = ps_primary(P);
	if (n->a->k == N_IDENT && ps_is(P, T_LPAREN))
		n->a = ps_call(P, n->a);
	if (n->a->k != N_IDENT && n->a->k != N_CALL)
		jx_fail(P->c, "Expected identifier or call for the filter");
	ps_expect(P, T_CSTMT, "Expected closing statement token");
	ps_body_until(P, &n->l1, endfilter);
	ps_end(P, "endfilter");
	return n;
}

static struct jnode *ps_statement(struct jparser *P)
{
	ps_expect(P, T_OSTMT, "Expected opening statement token");
	struct jtok *t = ps_peek(P, 0);
	if (t->t != T_IDENT)
		jx_fail(P->c, "Unknown statement, got %s", jtt_names[t->t]);
	const char *name = t->v->p;
	P->i++;
	struct jnode *n;
	if (strcmp(name, "set") == 0) {
		n = ps_set(P);
	} else if (strcmp(name, "if") == 0) {
		n = ps_if(P);
		ps_end(P, "endif");
	} else if (strcmp(name, "macro") == 0) {
		n = ps_macro(P);
		ps_end(P, "endmacro");
	} else if (strcmp(name, "for") == 0) {
		n = ps_for(P);
		ps_end(P, "endfor");
	} else if (strcmp(name, "call") == 0) {
		n = ps_call_stmt(P);
	} else if (strcmp(name, "filter") == 0) {
		n = ps_filter_stmt(P);
	} else if (strcmp(name, "break") == 0 || strcmp(name, "continue") == 0) {
		n = ps_node(P, name[0] == 'b' ? N_BREAK : N_CONTINUE);
		ps_expect(P, T_CSTMT, "Expected closing statement token");
	} else {
		jx_fail(P->c, "Unknown statement type: %s", name);
	}
	return n;
}

static struct jnode *ps_any(struct jparser *P)
{
	struct jtok *t = ps_peek(P, 0);
	P->c->line = t->line;
	if (++P->depth > JP_MAX_DEPTH)
		jx_failc(P->c, LM_ERANGE, "the template nests deeper than %d", JP_MAX_DEPTH);
	struct jnode *n;
	switch (t->t) {
	case T_COMMENT:
		P->i++;
		n = ps_node(P, N_COMMENT);
		break;
	case T_TEXT:
		P->i++;
		n = ps_node(P, N_TEXT);
		n->s = t->v;
		break;
	case T_OSTMT:
		n = ps_statement(P);
		break;
	case T_OEXPR:
		P->i++;
		n = ps_expression(P);
		ps_expect(P, T_CEXPR, "Expected closing expression token");
		break;
	default:
		jx_fail(P->c, "Unexpected token type: %s", jtt_names[t->t]);
	}
	P->depth--;
	return n;
}

/* ------------------------------------------------------------------ expressions */

static struct jnode *ps_binary(struct jparser *P, enum jop op, struct jnode *a, struct jnode *b)
{
	struct jnode *n = ps_node(P, N_BINARY);
	n->op = op;
	n->a = a;
	n->b = b;
	return n;
}

static struct jnode *ps_or(struct jparser *P);

static struct jnode *ps_if_expr(struct jparser *P)
{
	struct jnode *a = ps_or(P);
	if (!ps_is_ident(P, 0, "if"))
		return a;
	P->i++;
	struct jnode *test = ps_or(P);
	if (ps_is_ident(P, 0, "else")) {
		P->i++;
		struct jnode *n = ps_node(P, N_TERNARY);
		n->a = test;
		n->b = a;
		n->c = ps_if_expr(P);
		return n;
	}
	struct jnode *n = ps_node(P, N_SELECT);
	n->a = a;
	n->b = test;
	return n;
}

static struct jnode *ps_expression(struct jparser *P)
{
	if (++P->depth > JP_MAX_DEPTH)
		jx_failc(P->c, LM_ERANGE, "the template nests deeper than %d", JP_MAX_DEPTH);
	struct jnode *n = ps_if_expr(P);
	P->depth--;
	return n;
}

static struct jnode *ps_not(struct jparser *P);
static struct jnode *ps_and(struct jparser *P)
{
	struct jnode *l = ps_not(P);
	while (ps_is_ident(P, 0, "and")) {
		P->i++;
		l = ps_binary(P, OP_AND, l, ps_not(P));
	}
	return l;
}

static struct jnode *ps_or(struct jparser *P)
{
	struct jnode *l = ps_and(P);
	while (ps_is_ident(P, 0, "or")) {
		P->i++;
		l = ps_binary(P, OP_OR, l, ps_and(P));
	}
	return l;
}

static struct jnode *ps_compare(struct jparser *P);
static struct jnode *ps_not(struct jparser *P)
{
	if (!ps_is_ident(P, 0, "not"))
		return ps_compare(P);
	if (++P->depth > JP_MAX_DEPTH)
		jx_failc(P->c, LM_ERANGE, "the template nests deeper than %d", JP_MAX_DEPTH);
	P->i++;
	struct jnode *n = ps_node(P, N_UNARY);
	n->op = OP_NOT;
	n->a = ps_not(P);
	P->depth--;
	return n;
}

static struct jnode *ps_additive(struct jparser *P);
static struct jnode *ps_compare(struct jparser *P)
{
	struct jnode *l = ps_additive(P);
	for (;;) {
		enum jop op;
		if (ps_is_ident(P, 0, "not") && ps_is_ident(P, 1, "in")) {
			op = OP_NOTIN;
			P->i += 2;
		} else if (ps_is_ident(P, 0, "in")) {
			op = OP_IN;
			P->i++;
		} else if (ps_is(P, T_CMP)) {
			const char *v = ps_next(P)->v->p;
			op = v[0] == '='   ? OP_EQ
			     : v[0] == '!' ? OP_NE
			     : v[0] == '<' ? (v[1] == '=' ? OP_LE : OP_LT)
					   : (v[1] == '=' ? OP_GE : OP_GT);
		} else {
			return l;
		}
		l = ps_binary(P, op, l, ps_additive(P));
	}
}

static struct jnode *ps_multiplicative(struct jparser *P);
static struct jnode *ps_additive(struct jparser *P)
{
	struct jnode *l = ps_multiplicative(P);
	while (ps_is(P, T_ADD)) {
		char v = ps_next(P)->v->p[0];
		l = ps_binary(P,
			      v == '+'   ? OP_ADD
			      : v == '-' ? OP_SUB
					 : OP_TILDE,
			      l, ps_multiplicative(P));
	}
	return l;
}

static struct jnode *ps_power(struct jparser *P);
static struct jnode *ps_multiplicative(struct jparser *P)
{
	struct jnode *l = ps_power(P);
	while (ps_is(P, T_MUL)) {
		const char *v = ps_next(P)->v->p;
		enum jop op = v[0] == '*'   ? OP_MUL
			      : v[0] == '%' ? OP_MOD
			      : v[1] == '/' ? OP_FLOORDIV
					    : OP_DIV;
		l = ps_binary(P, op, l, ps_power(P));
	}
	return l;
}

static struct jnode *ps_test(struct jparser *P);
static struct jnode *ps_power(struct jparser *P)
{
	struct jnode *l = ps_test(P);
	while (ps_is(P, T_POW)) {
		P->i++;
		l = ps_binary(P, OP_POW, l, ps_test(P));
	}
	return l;
}

static struct jnode *ps_filter(struct jparser *P);
static struct jnode *ps_test(struct jparser *P)
{
	struct jnode *l = ps_filter(P);
	while (ps_is_ident(P, 0, "is")) {
		P->i++;
		bool neg = ps_is_ident(P, 0, "not");
		P->i += neg;
		struct jnode *name = ps_primary(P);
		if (name->k != N_IDENT)
			jx_fail(P->c, "Expected identifier for the test");
		struct jnode *n = ps_node(P, N_TEST);
		n->a = l;
		n->s = name->s;
		n->flag = neg;
		l = n;
	}
	return l;
}

static struct jnode *ps_sign(struct jparser *P);
static struct jnode *ps_filter(struct jparser *P)
{
	struct jnode *l = ps_sign(P);
	while (ps_is(P, T_PIPE)) {
		P->i++;
		struct jnode *f = ps_primary(P);
		if (f->k != N_IDENT)
			jx_fail(P->c, "Expected identifier for the filter");
		if (ps_is(P, T_LPAREN))
			f = ps_call(P, f);
		struct jnode *n = ps_node(P, N_FILTER);
		n->a = l;
		n->b = f;
		l = n;
	}
	return l;
}

static struct jnode *ps_member(struct jparser *P, struct jnode *obj);
static struct jnode *ps_sign(struct jparser *P)
{
	struct jtok *t = ps_peek(P, 0);
	if ((t->t == T_UNARY || t->t == T_ADD) && (t->v->p[0] == '-' || t->v->p[0] == '+') &&
	    t->v->n == 1) {
		if (++P->depth > JP_MAX_DEPTH)
			jx_failc(P->c, LM_ERANGE, "the template nests deeper than %d",
				 JP_MAX_DEPTH);
		P->i++;
		struct jnode *n = ps_node(P, N_UNARY);
		n->op = t->v->p[0] == '-' ? OP_SUB : OP_ADD;
		n->a = ps_sign(P);
		P->depth--;
		return n;
	}
	struct jnode *m = ps_member(P, ps_primary(P));
	return ps_is(P, T_LPAREN) ? ps_call(P, m) : m;
}

static struct jnode *ps_call(struct jparser *P, struct jnode *callee)
{
	struct jnode *n = ps_node(P, N_CALL);
	n->a = callee;
	ps_args(P, &n->l1, false);
	n = ps_member(P, n);
	return ps_is(P, T_LPAREN) ? ps_call(P, n) : n;
}

static struct jnode *ps_kwarg(struct jparser *P, struct jnode *arg, bool params)
{
	P->i++;
	if (arg->k != N_IDENT)
		jx_fail(P->c, params ? "Expected identifier for parameter declaration"
				     : "Expected identifier for keyword argument");
	struct jnode *k = ps_node(P, N_KWARG);
	k->s = arg->s;
	k->a = ps_expression(P);
	return k;
}

static void ps_args(struct jparser *P, struct jlist *out, bool params)
{
	ps_expect(P, T_LPAREN, "Expected opening parenthesis for arguments list");
	bool saw_kw = false, saw_spread = false;
	while (!ps_is(P, T_RPAREN)) {
		bool kws = ps_is(P, T_POW), spread = ps_is(P, T_MUL) &&
						     ps_peek(P, 0)->v->p[0] == '*' &&
						     ps_peek(P, 0)->v->n == 1;
		if (params && (kws || spread))
			jx_fail(P->c,
				"Argument unpacking is not allowed in parameter declarations");
		struct jnode *arg;
		if (kws || spread) {
			if (spread && saw_spread)
				jx_fail(P->c, "Only one `*` argument unpacking is allowed");
			P->i++;
			arg = ps_node(P, kws ? N_KWSPREAD : N_SPREAD);
			arg->a = ps_expression(P);
			saw_spread |= spread;
		} else {
			arg = ps_expression(P);
			if (ps_is(P, T_EQUALS))
				arg = ps_kwarg(P, arg, params);
			if (params && arg->k != N_IDENT && arg->k != N_KWARG)
				jx_fail(P->c, "Expected identifier for parameter declaration");
			if (arg->k == N_KWARG)
				saw_kw = true;
			else if (saw_kw)
				jx_fail(P->c,
					params ? "Non-default argument follows default argument"
					       : "Positional arguments must come before keyword "
						 "arguments");
		}
		ps_list_add(P, out, arg);
		if (ps_is(P, T_COMMA))
			P->i++;
		if (kws && !ps_is(P, T_RPAREN))
			jx_fail(P->c,
				"Expected closing parenthesis: `**` must be applied to the final "
				"argument");
	}
	ps_expect(P, T_RPAREN, "Expected closing parenthesis for arguments list");
}

static struct jnode *ps_subscript(struct jparser *P)
{
	struct jnode *parts[4] = {0};
	int n = 0;
	bool slice = false;
	while (!ps_is(P, T_RBRACK)) {
		if (n == 4)
			jx_fail(P->c, "Expected 0-3 arguments for slice expression");
		if (ps_is(P, T_COLON)) {
			parts[n++] = NULL;
			P->i++;
			slice = true;
		} else {
			parts[n++] = ps_expression(P);
			if (ps_is(P, T_COLON)) {
				P->i++;
				slice = true;
			}
		}
	}
	if (n == 0)
		jx_fail(P->c, "Expected at least one argument for member/slice expression");
	if (!slice)
		return parts[0];
	if (n > 3)
		jx_fail(P->c, "Expected 0-3 arguments for slice expression");
	struct jnode *s = ps_node(P, N_SLICE);
	s->a = parts[0];
	s->b = parts[1];
	s->c = parts[2];
	return s;
}

static struct jnode *ps_member(struct jparser *P, struct jnode *obj)
{
	while (ps_is(P, T_DOT) || ps_is(P, T_LBRACK)) {
		bool computed = ps_next(P)->t == T_LBRACK;
		struct jnode *n = ps_node(P, N_MEMBER);
		n->a = obj;
		n->flag = computed;
		if (computed) {
			n->b = ps_subscript(P);
			ps_expect(P, T_RBRACK, "Expected closing square bracket");
		} else {
			n->b = ps_primary(P);
			if (n->b->k != N_IDENT && n->b->k != N_INT)
				jx_fail(P->c,
					"Expected identifier or integer following dot operator");
		}
		obj = n;
	}
	return obj;
}

static struct jnode *ps_literal_list(struct jparser *P, bool dict)
{
	struct jnode *n = ps_node(P, dict ? N_OBJECT : N_ARRAY);
	enum jtt close = dict ? T_RBRACE : T_RBRACK;
	while (!ps_is(P, close)) {
		ps_list_add(P, &n->l1, ps_expression(P));
		if (dict) {
			ps_expect(P, T_COLON,
				  "Expected colon between key and value in object literal");
			ps_list_add(P, &n->l2, ps_expression(P));
		}
		if (ps_is(P, T_COMMA))
			P->i++;
	}
	P->i++;
	return n;
}

static struct jnode *ps_primary(struct jparser *P)
{
	struct jtok *t = ps_next(P);
	struct jnode *n;
	switch (t->t) {
	case T_NUM:
		n = ps_node(P, strchr(t->v->p, '.') != NULL ? N_FLOAT : N_INT);
		n->num = strtod(t->v->p, NULL);
		return n;
	case T_STR: {
		struct jsb b = {0};
		jx_sb_add(P->c, &b, t->v->p, t->v->n);
		while (ps_is(P, T_STR)) {
			const struct jstr *v = ps_next(P)->v;
			jx_sb_add(P->c, &b, v->p, v->n);
		}
		n = ps_node(P, N_STR);
		n->s = jx_sb_str(P->c, &b);
		return n;
	}
	case T_IDENT:
		n = ps_node(P, N_IDENT);
		n->s = t->v;
		return n;
	case T_LPAREN:
		n = ps_sequence(P, false);
		/* The reference's message, its unexpanded placeholder included. */
		ps_expect(P, T_RPAREN,
			  "Expected closing parenthesis, got ${tokens[current].type} instead.");
		return n;
	case T_LBRACK:
		return ps_literal_list(P, false);
	case T_LBRACE:
		return ps_literal_list(P, true);
	default:
		jx_fail(P->c, "Unexpected token: %s", jtt_names[t->t]);
	}
}

/* ------------------------------------------------------------------ entry */

/* The parse proper; 1 when it failed out, with the reason in c. */
static int jp_run(struct jctx *c, jinja_tmpl *t, const char *text, size_t len)
{
	if (setjmp(c->jb) != 0)
		return 1;
	struct jpp src = {0};
	pp_run(c, text, len, &src);
	struct jlex L = {.c = c, .src = &src};
	lx_run(&L);
	struct jparser P = {.c = c, .t = L.tok, .n = L.n};
	while (!ps_is(&P, T_EOF))
		ps_list_add(&P, &t->body, ps_any(&P));
	return 0;
}

jinja_tmpl *jinja_parse(const char *text, size_t len, lm_diag *d)
{
	jinja_tmpl *t = calloc(1, sizeof *t);
	struct jctx *c = calloc(1, sizeof *c);
	if (t == NULL || c == NULL) {
		free(t);
		free(c);
		lm_fail(d, LM_ENOMEM, "out of memory");
		return NULL;
	}
	c->ar = &t->ar;
	c->line = 1;
	c->fail_code = LM_EFORMAT;
	c->lim.max_output = len + 1; /* no text of the template is longer than it */
	if (jp_run(c, t, text, len) != 0) {
		lm_fail(d, c->code, "%s", c->msg);
		jinja_free(t);
		t = NULL;
	}
	free(c);
	return t;
}

void jinja_free(jinja_tmpl *t)
{
	if (t == NULL)
		return;
	jx_arena_fini(&t->ar);
	free(t);
}

/* toml.c — the TOML 1.0 reader: lexing, values and the document's tables.
 *
 * The parser is a recursive descent over the whole text held in memory. A first pass checks
 * the encoding (UTF-8, no raw control characters, no bare CR), so the grammar below can treat
 * every byte it meets as either ASCII syntax or part of a valid character. Recursion happens
 * only for arrays and inline tables, whose depth is bounded by TOML_MAX_DEPTH.
 *
 * The table rules of TOML 1.0 are kept with three flags per table:
 *   EXPLICIT  defined by a [header] (or an element of an [[array]]): no second header, and no
 *             dotted keys from another section may add to it;
 *   DOTTED    defined by dotted keys while section `section` was open: only that section may
 *             add to it with more dotted keys, and no header may define it afterwards (headers
 *             may still define tables below it);
 *   INLINE    an inline table: sealed, nothing may be added from outside its braces.
 * A table with none of them was created implicitly as the parent of a header ([a.b] creates
 * a): a later [a] header may define it. Arrays made by [[headers]] carry AOT; any other array
 * is a static value that headers may not extend.
 */
#include "common/format/toml.h"
#include "common/base/buf.h"
#include "common/format/toml_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"

#define TP_PATH_CAP 256
/* How much of an offending token a message quotes. */
#define TP_QUOTE_MAX 40

/* ---- the parser's state, positions and messages ------------------------------------------ */

struct tp {
	struct toml_doc *doc;
	lm_diag *d;
	const char *p, *end;
	int32_t line;           /* of p */
	const char *line_start; /* first byte of p's line */
	const char *col_at;     /* column cache: col_n characters lie in [line_start, col_at) */
	int32_t col_n;
	uint32_t section, n_sections;
	char path[TP_PATH_CAP];
	struct tomli_fix pf;
	struct lm_buf sb; /* scratch: strings, keys, number text */
};

/* The position of `at`, which must lie on the current line. Columns are counted incrementally
 * from the last position asked for, so a long line costs linear time in all. */
static struct tomli_pos tp_pos(struct tp *t, const char *at)
{
	if (t->col_at < t->line_start || t->col_at > at) {
		t->col_at = t->line_start;
		t->col_n = 0;
	}
	for (const char *q = t->col_at; q < at; q++)
		if (((unsigned char)*q & 0xC0) != 0x80)
			t->col_n++;
	t->col_at = at;
	return (struct tomli_pos){t->line, t->col_n + 1};
}

static int tp_fail(struct tp *t, int code, struct tomli_pos pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int tp_fail(struct tp *t, int code, struct tomli_pos pos, const char *fmt, ...)
{
	char msg[360];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (t->pf.len > 0)
		return lm_fail(t->d, code, "%s:%d:%d: %s: %s", t->doc->name, (int)pos.line,
			       (int)pos.col, t->path, msg);
	return lm_fail(t->d, code, "%s:%d:%d: %s", t->doc->name, (int)pos.line, (int)pos.col, msg);
}

#define TP_ERR(t, at, ...) tp_fail((t), LM_EFORMAT, tp_pos((t), (at)), __VA_ARGS__)

static int tp_nomem(struct tp *t)
{
	return tp_fail(t, LM_ENOMEM, tp_pos(t, t->p), "out of memory");
}

/* Names the character at p for a message: "end of file", "newline", "'x'", "U+00E9". */
static const char *tp_desc(const struct tp *t, const char *p, char *buf, size_t cap)
{
	if (p >= t->end)
		return "end of file";
	unsigned char c = (unsigned char)*p;
	if (c == '\n' || c == '\r')
		return "a newline";
	if (c < 0x80) {
		snprintf(buf, cap, "'%c'", c);
		return buf;
	}
	uint32_t cp = 0;
	int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
	cp = c & (0x7F >> n);
	for (int i = 1; i < n && p + i < t->end; i++)
		cp = (cp << 6) | ((unsigned char)p[i] & 0x3F);
	snprintf(buf, cap, "U+%04X", (unsigned)cp);
	return buf;
}

#define TP_DESC(t, p) tp_desc((t), (p), (char[16]){0}, 16)

/* Key path bookkeeping for messages: the section's path plus the keys being defined. */
static size_t tp_path_key(struct tp *t, const char *k, size_t n)
{
	size_t saved = t->pf.len;
	tomli_fix_key(&t->pf, k, n, t->pf.len > 0);
	return saved;
}

static size_t tp_path_index(struct tp *t, size_t i)
{
	size_t saved = t->pf.len;
	tomli_fix_index(&t->pf, i);
	return saved;
}

static void tp_path_pop(struct tp *t, size_t saved)
{
	t->pf.len = saved;
	t->pf.trunc = false;
	t->path[saved] = '\0';
}

static void tp_path_set(struct tp *t, const struct toml_value *v)
{
	toml_path(v, t->path, sizeof t->path);
	t->pf.len = strlen(t->path);
	t->pf.trunc = false;
}

/* ---- the encoding pass -------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is invalid (overlong forms,
 * surrogates and code points past U+10FFFF included). */
static size_t utf8_len(const unsigned char *s, const unsigned char *end)
{
	unsigned char c = s[0];
	size_t n;
	unsigned char lo = 0x80, hi = 0xBF;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4;
	else
		return 0;
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if ((size_t)(end - s) < n)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

/* Where a byte sits, for the one error of the encoding pass (rescanning once is fine). */
static struct tomli_pos tp_pos_slow(const char *start, const char *at)
{
	struct tomli_pos pos = {1, 1};
	for (const char *q = start; q < at; q++) {
		if (*q == '\n') {
			pos.line++;
			pos.col = 1;
		} else if (((unsigned char)*q & 0xC0) != 0x80) {
			pos.col++;
		}
	}
	return pos;
}

static int tp_check_encoding(struct tp *t)
{
	const unsigned char *s = (const unsigned char *)t->p;
	const unsigned char *end = (const unsigned char *)t->end;
	while (s < end) {
		unsigned char c = *s;
		if (c >= 0x80) {
			size_t n = utf8_len(s, end);
			if (n == 0)
				return tp_fail(t, LM_EFORMAT, tp_pos_slow(t->p, (const char *)s),
					       "invalid UTF-8 (byte 0x%02X)", c);
			s += n;
			continue;
		}
		if (c == '\r' && !(s + 1 < end && s[1] == '\n'))
			return tp_fail(t, LM_EFORMAT, tp_pos_slow(t->p, (const char *)s),
				       "carriage return not followed by a line feed");
		if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F)
			return tp_fail(t, LM_EFORMAT, tp_pos_slow(t->p, (const char *)s),
				       "control character U+%04X is not allowed (write it as an "
				       "escape in a basic string)",
				       c);
		s++;
	}
	return 0;
}

/* ---- lexical helpers ---------------------------------------------------------------------- */

static bool tp_eof(const struct tp *t)
{
	return t->p >= t->end;
}

static bool tp_at_newline(const struct tp *t)
{
	return t->p < t->end && (*t->p == '\n' || *t->p == '\r');
}

/* Consumes LF or CRLF (the encoding pass made sure a CR is followed by LF). */
static void tp_eat_newline(struct tp *t)
{
	if (*t->p == '\r')
		t->p++;
	t->p++;
	t->line++;
	t->line_start = t->p;
}

static void tp_skip_ws(struct tp *t)
{
	while (t->p < t->end && (*t->p == ' ' || *t->p == '\t'))
		t->p++;
}

static void tp_skip_comment(struct tp *t)
{
	if (t->p < t->end && *t->p == '#')
		while (t->p < t->end && *t->p != '\n' && *t->p != '\r')
			t->p++;
}

/* Whitespace, comments and newlines: what may separate array elements. */
static void tp_skip_ws_nl(struct tp *t)
{
	for (;;) {
		tp_skip_ws(t);
		tp_skip_comment(t);
		if (!tp_at_newline(t))
			return;
		tp_eat_newline(t);
	}
}

static bool tp_looking_at(const struct tp *t, const char *s)
{
	size_t n = strlen(s);
	return (size_t)(t->end - t->p) >= n && memcmp(t->p, s, n) == 0;
}

static struct toml_value *tp_new(struct tp *t, enum toml_type type, struct tomli_pos pos,
				 int32_t depth)
{
	struct toml_value *v = calloc(1, sizeof *v);
	if (v == NULL)
		return NULL;
	v->type = type;
	v->line = pos.line;
	v->col = pos.col;
	v->depth = depth;
	if (type == TOML_TABLE)
		v->u.tab.seed = t->doc->seed;
	v->next_alloc = t->doc->alloc;
	t->doc->alloc = v;
	return v;
}

/* A new container at `depth`, refused past the nesting limit. */
static int tp_new_container(struct tp *t, enum toml_type type, struct tomli_pos pos, int32_t depth,
			    struct toml_value **out)
{
	if (depth > TOML_MAX_DEPTH)
		return tp_fail(t, LM_EFORMAT, pos, "nesting deeper than %d levels", TOML_MAX_DEPTH);
	*out = tp_new(t, type, pos, depth);
	return *out == NULL ? tp_nomem(t) : 0;
}

/* ---- strings ------------------------------------------------------------------------------ */

static void utf8_put(struct lm_buf *b, uint32_t cp, int *rc)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	if (lm_buf_add(b, u, n) != 0)
		*rc = LM_ENOMEM;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* An escape sequence; t->p is at the backslash. */
static int tp_escape(struct tp *t, struct lm_buf *b)
{
	const char *at = t->p++;
	if (tp_eof(t))
		return TP_ERR(t, at, "unterminated string");
	char c = *t->p++;
	char out;
	switch (c) {
	case 'b':
		out = '\b';
		break;
	case 't':
		out = '\t';
		break;
	case 'n':
		out = '\n';
		break;
	case 'f':
		out = '\f';
		break;
	case 'r':
		out = '\r';
		break;
	case '"':
		out = '"';
		break;
	case '\\':
		out = '\\';
		break;
	case 'u':
	case 'U': {
		int n = c == 'u' ? 4 : 8;
		uint32_t cp = 0;
		for (int i = 0; i < n; i++) {
			int h = t->p + i < t->end ? hexval(t->p[i]) : -1;
			if (h < 0)
				return TP_ERR(t, at, "\\%c needs exactly %d hexadecimal digits", c,
					      n);
			cp = (cp << 4) | (uint32_t)h;
		}
		t->p += n;
		if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return TP_ERR(t, at, "\\%c%0*X is not a Unicode scalar value", c, n,
				      (unsigned)cp);
		int rc = 0;
		utf8_put(b, cp, &rc);
		return rc == 0 ? 0 : tp_nomem(t);
	}
	default:
		if ((unsigned char)c >= 0x21 && (unsigned char)c < 0x7F)
			return TP_ERR(t, at, "invalid escape sequence '\\%c'", c);
		return TP_ERR(t, at, "invalid escape sequence (a backslash followed by %s)",
			      TP_DESC(t, t->p - 1));
	}
	return lm_buf_addc(b, out) == 0 ? 0 : tp_nomem(t);
}

/* "..." or '...' on one line; t->p is at the opening quote. */
static int tp_string_line(struct tp *t, struct lm_buf *b, char q)
{
	const char *open = t->p++;
	for (;;) {
		const char *run = t->p;
		while (t->p < t->end && *t->p != q && *t->p != '\n' && *t->p != '\r' &&
		       !(q == '"' && *t->p == '\\'))
			t->p++;
		if (t->p > run && lm_buf_add(b, run, (size_t)(t->p - run)) != 0)
			return tp_nomem(t);
		if (tp_eof(t) || tp_at_newline(t))
			return TP_ERR(t, open,
				      "unterminated string (a %s string ends on the line it starts;"
				      " use a multi-line string or an escape)",
				      q == '"' ? "basic" : "literal");
		if (*t->p == q) {
			t->p++;
			return 0;
		}
		int rc = tp_escape(t, b);
		if (rc != 0)
			return rc;
	}
}

/* """...""" or '''...'''; t->p is at the opening delimiter. */
static int tp_string_multi(struct tp *t, struct lm_buf *b, char q)
{
	int32_t open_line = t->line;
	t->p += 3;
	if (tp_at_newline(t))
		tp_eat_newline(t);
	for (;;) {
		const char *run = t->p;
		while (t->p < t->end && *t->p != q && *t->p != '\n' && *t->p != '\r' &&
		       !(q == '"' && *t->p == '\\'))
			t->p++;
		if (t->p > run && lm_buf_add(b, run, (size_t)(t->p - run)) != 0)
			return tp_nomem(t);
		if (tp_eof(t))
			return TP_ERR(t, t->p, "unterminated multi-line string (opened on line %d)",
				      (int)open_line);
		if (tp_at_newline(t)) {
			tp_eat_newline(t);
			if (lm_buf_addc(b, '\n') != 0)
				return tp_nomem(t);
			continue;
		}
		if (*t->p == q) {
			const char *at = t->p;
			size_t n = 0;
			while (t->p < t->end && *t->p == q) {
				t->p++;
				n++;
			}
			if (n < 3) {
				if (lm_buf_add(b, at, n) != 0)
					return tp_nomem(t);
				continue;
			}
			if (n > 5)
				return TP_ERR(
					t, at,
					"%zu quotes in a row: a multi-line string may hold at "
					"most two before its closing delimiter",
					n);
			if (n > 3 && lm_buf_add(b, at, n - 3) != 0)
				return tp_nomem(t);
			return 0;
		}
		/* A backslash in a basic string: a line-ending backslash or an escape. */
		const char *bs = t->p;
		const char *s = t->p + 1;
		while (s < t->end && (*s == ' ' || *s == '\t'))
			s++;
		if (s < t->end && (*s == '\n' || *s == '\r')) {
			t->p = s;
			for (;;) {
				tp_skip_ws(t);
				if (!tp_at_newline(t))
					break;
				tp_eat_newline(t);
			}
			continue;
		}
		if (s > bs + 1)
			return TP_ERR(t, bs,
				      "a backslash followed by whitespace must end the line");
		int rc = tp_escape(t, b);
		if (rc != 0)
			return rc;
	}
}

/* Any string at t->p into the scratch buffer; keys refuse the multi-line forms. */
static int tp_string(struct tp *t, bool key)
{
	t->sb.len = 0;
	if (lm_buf_reserve(&t->sb, 1) != 0)
		return tp_nomem(t);
	t->sb.p[0] = '\0';
	char q = *t->p;
	if (tp_looking_at(t, q == '"' ? "\"\"\"" : "'''")) {
		if (key)
			return TP_ERR(t, t->p, "a multi-line string cannot be a key");
		return tp_string_multi(t, &t->sb, q);
	}
	return tp_string_line(t, &t->sb, q);
}

/* ---- keys --------------------------------------------------------------------------------- */

struct tkey {
	char *s;
	size_t len;
	struct tomli_pos pos;
};

struct tkeys {
	struct tkey k[TOML_MAX_DEPTH + 1];
	int n;
};

static void tkeys_fini(struct tkeys *ks)
{
	for (int i = 0; i < ks->n; i++)
		free(ks->k[i].s);
	ks->n = 0;
}

/* A simple or dotted key, whitespace around the dots allowed. On failure ks is empty. */
static int tp_key(struct tp *t, struct tkeys *ks)
{
	ks->n = 0;
	for (;;) {
		tp_skip_ws(t);
		if (ks->n == TOML_MAX_DEPTH + 1) {
			tkeys_fini(ks);
			return TP_ERR(t, t->p, "a key of more than %d parts", TOML_MAX_DEPTH + 1);
		}
		struct tkey *k = &ks->k[ks->n];
		k->pos = tp_pos(t, t->p);
		const char *s;
		size_t n;
		if (!tp_eof(t) && (*t->p == '"' || *t->p == '\'')) {
			int rc = tp_string(t, true);
			if (rc != 0) {
				tkeys_fini(ks);
				return rc;
			}
			s = t->sb.p;
			n = t->sb.len;
		} else {
			s = t->p;
			while (t->p < t->end && tomli_is_bare(*t->p))
				t->p++;
			n = (size_t)(t->p - s);
			if (n == 0) {
				tkeys_fini(ks);
				return TP_ERR(t, t->p, "expected a key, found %s",
					      TP_DESC(t, t->p));
			}
		}
		k->s = malloc(n + 1);
		if (k->s == NULL) {
			tkeys_fini(ks);
			return tp_nomem(t);
		}
		memcpy(k->s, s, n);
		k->s[n] = '\0';
		k->len = n;
		ks->n++;
		tp_skip_ws(t);
		if (tp_eof(t) || *t->p != '.')
			return 0;
		t->p++;
	}
}

/* ---- numbers and other bare values -------------------------------------------------------- */

static bool is_dec(char c)
{
	return c >= '0' && c <= '9';
}

/* Digits of one kind with single underscores between them, from s[*i]. Returns the number
 * of digits; *bad is set when an underscore is not between two digits. */
static size_t scan_digits(const char *s, size_t n, size_t *i, int base, bool *bad)
{
	size_t digits = 0;
	bool prev = false;
	while (*i < n) {
		char c = s[*i];
		int v = hexval(c);
		if (c == '_') {
			if (!prev || *i + 1 >= n || hexval(s[*i + 1]) < 0 ||
			    hexval(s[*i + 1]) >= base)
				*bad = true;
			prev = false;
		} else if (v >= 0 && v < base) {
			prev = true;
			digits++;
		} else {
			break;
		}
		(*i)++;
	}
	return digits;
}

static int tp_bad_number(struct tp *t, struct tomli_pos pos, const char *s, size_t n,
			 const char *kind, const char *why)
{
	int q = n > TP_QUOTE_MAX ? TP_QUOTE_MAX : (int)n;
	return tp_fail(t, LM_EFORMAT, pos, "invalid %s '%.*s%s': %s", kind, q, s,
		       n > TP_QUOTE_MAX ? "..." : "", why);
}

static int tp_integer(struct tp *t, struct tomli_pos pos, const char *s, size_t n, int64_t *out)
{
	size_t i = 0;
	bool neg = false;
	if (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-';
		i = 1;
	}
	int base = 10;
	if (n - i >= 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'o' || s[i + 1] == 'b')) {
		if (i > 0)
			return tp_bad_number(t, pos, s, n, "integer",
					     "hexadecimal, octal and binary integers take no sign");
		base = s[1] == 'x' ? 16 : s[1] == 'o' ? 8 : 2;
		i = 2;
		if (i < n && s[i] == '_')
			return tp_bad_number(t, pos, s, n, "integer",
					     "an underscore must sit between two digits");
	} else if (n - i >= 2 && s[i] == '0') {
		return tp_bad_number(t, pos, s, n, "integer", "leading zeros are not allowed");
	}
	size_t first = i;
	bool bad = false;
	size_t digits = scan_digits(s, n, &i, base, &bad);
	if (i != n || digits == 0)
		return tp_bad_number(t, pos, s, n, "integer",
				     base == 10 ? "not a number" : "not a digit of its base");
	if (bad)
		return tp_bad_number(t, pos, s, n, "integer",
				     "an underscore must sit between two digits");
	uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	uint64_t mag = 0;
	for (size_t j = first; j < n; j++) {
		if (s[j] == '_')
			continue;
		uint64_t d = (uint64_t)hexval(s[j]);
		if (mag > (limit - d) / (uint64_t)base) {
			int q = n > TP_QUOTE_MAX ? TP_QUOTE_MAX : (int)n;
			return tp_fail(
				t, LM_ERANGE, pos,
				"integer '%.*s%s' does not fit in 64 bits (range %lld to %lld)", q,
				s, n > TP_QUOTE_MAX ? "..." : "", (long long)INT64_MIN,
				(long long)INT64_MAX);
		}
		mag = mag * (uint64_t)base + d;
	}
	if (neg)
		*out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
	else
		*out = (int64_t)mag;
	return 0;
}

static int tp_float(struct tp *t, struct tomli_pos pos, const char *s, size_t n, double *out)
{
	size_t i = 0;
	if (s[0] == '+' || s[0] == '-')
		i = 1;
	if (n - i >= 2 && s[i] == '0' && is_dec(s[i + 1]))
		return tp_bad_number(t, pos, s, n, "float", "leading zeros are not allowed");
	if (n - i >= 2 && s[i] == '0' && s[i + 1] == '_')
		return tp_bad_number(t, pos, s, n, "float", "leading zeros are not allowed");
	bool bad = false;
	if (scan_digits(s, n, &i, 10, &bad) == 0)
		return tp_bad_number(t, pos, s, n, "float",
				     "a digit must come before the decimal point or exponent");
	bool frac = false, exp = false;
	if (i < n && s[i] == '.') {
		i++;
		frac = true;
		if (i < n && s[i] == '_')
			bad = true;
		if (scan_digits(s, n, &i, 10, &bad) == 0)
			return tp_bad_number(t, pos, s, n, "float",
					     "a digit must follow the decimal point");
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		exp = true;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i < n && s[i] == '_')
			bad = true;
		if (scan_digits(s, n, &i, 10, &bad) == 0)
			return tp_bad_number(t, pos, s, n, "float", "the exponent has no digits");
	}
	if (i != n || !(frac || exp))
		return tp_bad_number(t, pos, s, n, "float", "not a number");
	if (bad)
		return tp_bad_number(t, pos, s, n, "float",
				     "an underscore must sit between two digits");
	t->sb.len = 0;
	for (size_t j = 0; j < n; j++)
		if (s[j] != '_' && lm_buf_addc(&t->sb, s[j]) != 0)
			return tp_nomem(t);
	/* The text is plain C syntax by now; the process never changes LC_NUMERIC, so strtod
	 * reads '.' as the decimal point. */
	errno = 0;
	char *endp = NULL;
	double v = strtod(t->sb.p, &endp);
	if (endp != t->sb.p + t->sb.len)
		return tp_bad_number(t, pos, s, n, "float", "not a number");
	if (isinf(v)) {
		int q = n > TP_QUOTE_MAX ? TP_QUOTE_MAX : (int)n;
		return tp_fail(t, LM_ERANGE, pos, "float '%.*s%s' is out of the binary64 range", q,
			       s, n > TP_QUOTE_MAX ? "..." : "");
	}
	*out = v;
	return 0;
}

static bool tp_is_token(char c)
{
	return tomli_is_bare(c) || c == '+' || c == '.' || c == ':';
}

/* Dates (1979-05-27...) and times (07:32:00) begin with four digits and a dash or two digits
 * and a colon; nothing else TOML allows does. */
static bool tp_is_datetime(const char *s, size_t n)
{
	if (n >= 5 && is_dec(s[0]) && is_dec(s[1]) && is_dec(s[2]) && is_dec(s[3]) && s[4] == '-')
		return true;
	return n >= 3 && is_dec(s[0]) && is_dec(s[1]) && s[2] == ':';
}

/* true, false, inf, nan, an integer or a float. */
static int tp_bare_value(struct tp *t, struct tomli_pos pos, int32_t depth, struct toml_value **out)
{
	const char *s = t->p;
	while (t->p < t->end && tp_is_token(*t->p))
		t->p++;
	size_t n = (size_t)(t->p - s);
	if (n == 0)
		return TP_ERR(t, s, "expected a value, found %s", TP_DESC(t, s));
	struct toml_value *v = tp_new(t, TOML_BOOL, pos, depth);
	if (v == NULL)
		return tp_nomem(t);
	*out = v;
	if ((n == 4 && memcmp(s, "true", 4) == 0) || (n == 5 && memcmp(s, "false", 5) == 0)) {
		v->u.b = n == 4;
		return 0;
	}
	const char *u = s + (s[0] == '+' || s[0] == '-');
	size_t un = n - (size_t)(u - s);
	v->type = TOML_FLOAT;
	if (un == 3 && (memcmp(u, "inf", 3) == 0 || memcmp(u, "nan", 3) == 0)) {
		double x = u[0] == 'i' ? INFINITY : NAN;
		v->u.f = s[0] == '-' ? -x : x;
		return 0;
	}
	if (tp_is_datetime(s, n))
		return tp_fail(t, LM_EUNSUPPORTED, pos,
			       "date and time values are not supported here (write the value as "
			       "a string)");
	if (un == 0 || !is_dec(u[0])) {
		int q = n > TP_QUOTE_MAX ? TP_QUOTE_MAX : (int)n;
		return tp_fail(t, LM_EFORMAT, pos,
			       "invalid value '%.*s%s' (strings must be quoted; booleans are "
			       "lowercase true and false)",
			       q, s, n > TP_QUOTE_MAX ? "..." : "");
	}
	bool prefixed = un >= 2 && u[0] == '0' && (u[1] == 'x' || u[1] == 'o' || u[1] == 'b');
	if (!prefixed && (memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n)))
		return tp_float(t, pos, s, n, &v->u.f);
	v->type = TOML_INTEGER;
	return tp_integer(t, pos, s, n, &v->u.i);
}

/* ---- values ------------------------------------------------------------------------------- */

static int tp_keyval(struct tp *t, struct toml_value *tab);

static int tp_value(struct tp *t, int32_t depth, struct toml_value **out);

static int tp_array(struct tp *t, struct tomli_pos pos, int32_t depth, struct toml_value **out)
{
	int32_t open_line = t->line;
	struct toml_value *a;
	int rc = tp_new_container(t, TOML_ARRAY, pos, depth, &a);
	if (rc != 0)
		return rc;
	*out = a;
	t->p++;
	for (;;) {
		tp_skip_ws_nl(t);
		if (tp_eof(t))
			return TP_ERR(t, t->p, "unterminated array (opened on line %d)",
				      (int)open_line);
		if (*t->p == ']') {
			t->p++;
			return 0;
		}
		size_t saved = tp_path_index(t, a->u.arr.n);
		struct toml_value *v;
		rc = tp_value(t, depth + 1, &v);
		if (rc != 0)
			return rc;
		if (tomli_arr_push(a, v) != 0)
			return tp_nomem(t);
		tp_path_pop(t, saved);
		tp_skip_ws_nl(t);
		if (!tp_eof(t) && *t->p == ',') {
			t->p++;
			continue;
		}
		if (!tp_eof(t) && *t->p == ']') {
			t->p++;
			return 0;
		}
		if (tp_eof(t))
			return TP_ERR(t, t->p, "unterminated array (opened on line %d)",
				      (int)open_line);
		return TP_ERR(t, t->p, "expected ',' or ']' in an array, found %s",
			      TP_DESC(t, t->p));
	}
}

static int tp_inline_table(struct tp *t, struct tomli_pos pos, int32_t depth,
			   struct toml_value **out)
{
	struct toml_value *tab;
	int rc = tp_new_container(t, TOML_TABLE, pos, depth, &tab);
	if (rc != 0)
		return rc;
	*out = tab;
	uint32_t outer = t->section;
	t->section = ++t->n_sections;
	t->p++;
	tp_skip_ws(t);
	if (!tp_eof(t) && *t->p == '}') {
		t->p++;
		goto sealed;
	}
	for (;;) {
		tp_skip_ws(t);
		if (tp_at_newline(t))
			return TP_ERR(t, t->p, "an inline table must stay on one line");
		rc = tp_keyval(t, tab);
		if (rc != 0)
			return rc;
		tp_skip_ws(t);
		if (!tp_eof(t) && *t->p == ',') {
			t->p++;
			tp_skip_ws(t);
			if (!tp_eof(t) && *t->p == '}')
				return TP_ERR(t, t->p,
					      "a trailing comma is not allowed in an inline table");
			continue;
		}
		if (!tp_eof(t) && *t->p == '}') {
			t->p++;
			break;
		}
		if (tp_eof(t) || tp_at_newline(t))
			return TP_ERR(t, t->p,
				      "unterminated inline table (it must close on the "
				      "line it opens)");
		return TP_ERR(t, t->p, "expected ',' or '}' in an inline table, found %s",
			      TP_DESC(t, t->p));
	}
sealed:
	tab->flags |= TOML_F_INLINE;
	t->section = outer;
	return 0;
}

static int tp_value(struct tp *t, int32_t depth, struct toml_value **out)
{
	if (tp_eof(t) || tp_at_newline(t))
		return TP_ERR(t, t->p, "expected a value, found %s", TP_DESC(t, t->p));
	struct tomli_pos pos = tp_pos(t, t->p);
	char c = *t->p;
	if (c == '[')
		return tp_array(t, pos, depth, out);
	if (c == '{')
		return tp_inline_table(t, pos, depth, out);
	if (c != '"' && c != '\'')
		return tp_bare_value(t, pos, depth, out);
	int rc = tp_string(t, false);
	if (rc != 0)
		return rc;
	struct toml_value *v = tp_new(t, TOML_STRING, pos, depth);
	if (v == NULL)
		return tp_nomem(t);
	v->u.str.s = malloc(t->sb.len + 1);
	if (v->u.str.s == NULL)
		return tp_nomem(t);
	memcpy(v->u.str.s, t->sb.p, t->sb.len + 1);
	v->u.str.len = t->sb.len;
	*out = v;
	return 0;
}

/* ---- key/value pairs and headers ---------------------------------------------------------- */

/* "a string", "an integer", "an inline table", ... for messages about what is in the way. */
static const char *tp_what(const struct toml_value *v)
{
	switch (v->type) {
	case TOML_TABLE:
		return (v->flags & TOML_F_INLINE) ? "an inline table" : "a table";
	case TOML_ARRAY:
		return (v->flags & TOML_F_AOT) ? "an array of tables" : "an array";
	case TOML_STRING:
		return "a string";
	case TOML_INTEGER:
		return "an integer";
	case TOML_FLOAT:
		return "a float";
	case TOML_BOOL:
		return "a boolean";
	}
	return "a value";
}

/* key = value into table `tab` (a section's table or an inline table). */
static int tp_keyval(struct tp *t, struct toml_value *tab)
{
	struct tkeys ks;
	int rc = tp_key(t, &ks);
	if (rc != 0)
		return rc;
	size_t saved = t->pf.len;
	struct toml_value *cur = tab;
	for (int i = 0; i + 1 < ks.n; i++) {
		struct tkey *k = &ks.k[i];
		tp_path_key(t, k->s, k->len);
		struct toml_value *v = tomli_tab_find(cur, k->s, k->len);
		if (v == NULL) {
			rc = tp_new_container(t, TOML_TABLE, k->pos, cur->depth + 1, &v);
			if (rc != 0)
				goto out;
			v->flags = TOML_F_DOTTED;
			v->section = t->section;
			if (tomli_tab_add(cur, k->s, k->len, k->pos, v) != 0) {
				rc = tp_nomem(t);
				goto out;
			}
		} else if (v->type != TOML_TABLE) {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "cannot add keys to %s (defined on line %d)", tp_what(v),
				     (int)v->line);
			goto out;
		} else if (v->flags & TOML_F_INLINE) {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "cannot add keys to an inline table (defined on line %d) "
				     "outside its braces",
				     (int)v->line);
			goto out;
		} else if (v->flags & TOML_F_EXPLICIT) {
			rc = tp_fail(
				t, LM_EFORMAT, k->pos,
				"cannot add keys with a dotted key to the table defined by the "
				"header on line %d",
				(int)v->line);
			goto out;
		} else if ((v->flags & TOML_F_DOTTED) && v->section != t->section) {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "the table defined by dotted keys on line %d cannot be "
				     "extended from another table",
				     (int)v->line);
			goto out;
		} else {
			v->flags |= TOML_F_DOTTED;
			v->section = t->section;
		}
		cur = v;
	}
	struct tkey *last = &ks.k[ks.n - 1];
	tp_path_key(t, last->s, last->len);
	struct toml_value *old = tomli_tab_find(cur, last->s, last->len);
	if (old != NULL) {
		rc = tp_fail(t, LM_EFORMAT, last->pos, "duplicate key (already %s, from line %d)",
			     tp_what(old), (int)old->line);
		goto out;
	}
	tp_skip_ws(t);
	if (tp_eof(t) || *t->p != '=') {
		rc = TP_ERR(t, t->p, "expected '=' after the key, found %s", TP_DESC(t, t->p));
		goto out;
	}
	t->p++;
	tp_skip_ws(t);
	struct toml_value *v;
	rc = tp_value(t, cur->depth + 1, &v);
	if (rc != 0)
		goto out;
	if (tomli_tab_add(cur, last->s, last->len, last->pos, v) != 0)
		rc = tp_nomem(t);
out:
	if (rc == 0)
		tp_path_pop(t, saved);
	tkeys_fini(&ks);
	return rc;
}

/* [a.b.c] or [[a.b.c]]; sets *cur to the table that the following keys go into. */
static int tp_header(struct tp *t, struct toml_value **cur)
{
	const char *open = t->p++;
	bool aot = !tp_eof(t) && *t->p == '[';
	if (aot)
		t->p++;
	tp_path_pop(t, 0);
	struct tkeys ks;
	int rc = tp_key(t, &ks);
	if (rc != 0)
		return rc;
	if (tp_eof(t) || *t->p != ']' || (aot && !tp_looking_at(t, "]]"))) {
		rc = TP_ERR(t, t->p,
			    "expected '%s' to close the header opened at column %d, found %s",
			    aot ? "]]" : "]", (int)tp_pos(t, open).col, TP_DESC(t, t->p));
		goto out;
	}
	t->p += aot ? 2 : 1;
	t->section = ++t->n_sections;

	struct toml_value *tab = t->doc->root;
	for (int i = 0; i + 1 < ks.n; i++) {
		struct tkey *k = &ks.k[i];
		tp_path_key(t, k->s, k->len);
		struct toml_value *v = tomli_tab_find(tab, k->s, k->len);
		if (v == NULL) {
			rc = tp_new_container(t, TOML_TABLE, k->pos, tab->depth + 1, &v);
			if (rc != 0)
				goto out;
			if (tomli_tab_add(tab, k->s, k->len, k->pos, v) != 0) {
				rc = tp_nomem(t);
				goto out;
			}
		} else if (v->type == TOML_ARRAY && (v->flags & TOML_F_AOT)) {
			/* The most recent element of an array of tables. */
			v = v->u.arr.items[v->u.arr.n - 1];
			tp_path_index(t, v->index);
		} else if (v->type != TOML_TABLE || (v->flags & TOML_F_INLINE)) {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "a header cannot extend %s (defined on line %d)", tp_what(v),
				     (int)v->line);
			goto out;
		}
		tab = v;
	}

	struct tkey *k = &ks.k[ks.n - 1];
	tp_path_key(t, k->s, k->len);
	struct toml_value *v = tomli_tab_find(tab, k->s, k->len);
	if (!aot) {
		if (v == NULL) {
			rc = tp_new_container(t, TOML_TABLE, k->pos, tab->depth + 1, &v);
			if (rc != 0)
				goto out;
			if (tomli_tab_add(tab, k->s, k->len, k->pos, v) != 0) {
				rc = tp_nomem(t);
				goto out;
			}
		} else if (v->type == TOML_TABLE &&
			   !(v->flags & (TOML_F_EXPLICIT | TOML_F_DOTTED | TOML_F_INLINE))) {
			/* Created as the parent of an earlier header: defined only now. */
			v->line = k->pos.line;
			v->col = k->pos.col;
		} else if (v->type == TOML_TABLE) {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "table defined twice (first %s on line %d)",
				     (v->flags & TOML_F_EXPLICIT) ? "by a header"
				     : (v->flags & TOML_F_DOTTED) ? "by dotted keys"
								  : "as an inline table",
				     (int)v->line);
			goto out;
		} else if (v->type == TOML_ARRAY && (v->flags & TOML_F_AOT)) {
			rc = tp_fail(
				t, LM_EFORMAT, k->pos,
				"already an array of tables (from line %d): use [[...]] to add "
				"an element",
				(int)v->line);
			goto out;
		} else {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "already defined as %s on line %d, not a table", tp_what(v),
				     (int)v->line);
			goto out;
		}
		v->flags |= TOML_F_EXPLICIT;
		*cur = v;
	} else {
		if (v == NULL) {
			rc = tp_new_container(t, TOML_ARRAY, k->pos, tab->depth + 1, &v);
			if (rc != 0)
				goto out;
			v->flags = TOML_F_AOT;
			if (tomli_tab_add(tab, k->s, k->len, k->pos, v) != 0) {
				rc = tp_nomem(t);
				goto out;
			}
		} else if (v->type != TOML_ARRAY || !(v->flags & TOML_F_AOT)) {
			rc = tp_fail(t, LM_EFORMAT, k->pos,
				     "cannot append a table to %s (defined on line %d)", tp_what(v),
				     (int)v->line);
			goto out;
		}
		struct toml_value *e;
		rc = tp_new_container(t, TOML_TABLE, k->pos, v->depth + 1, &e);
		if (rc != 0)
			goto out;
		e->flags = TOML_F_EXPLICIT;
		if (tomli_arr_push(v, e) != 0) {
			rc = tp_nomem(t);
			goto out;
		}
		*cur = e;
	}
	tp_path_set(t, *cur);
out:
	tkeys_fini(&ks);
	return rc;
}

static int tp_document(struct tp *t)
{
	struct toml_value *cur = t->doc->root;
	size_t section_len = 0;
	for (;;) {
		tp_skip_ws(t);
		if (tp_eof(t))
			return 0;
		const char *what = "line";
		int rc = 0;
		if (*t->p == '[') {
			rc = tp_header(t, &cur);
			section_len = t->pf.len;
			what = "table header";
		} else if (*t->p != '#' && !tp_at_newline(t)) {
			tp_path_pop(t, section_len);
			rc = tp_keyval(t, cur);
			what = "value";
		}
		if (rc != 0)
			return rc;
		tp_skip_ws(t);
		tp_skip_comment(t);
		if (tp_eof(t))
			return 0;
		if (!tp_at_newline(t))
			return TP_ERR(t, t->p, "expected a newline after the %s, found %s", what,
				      TP_DESC(t, t->p));
		tp_eat_newline(t);
	}
}

/* ---- entry points ------------------------------------------------------------------------- */

static uint64_t toml_seed(const void *salt)
{
	uint64_t s = 0;
	if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
		s = lm_now_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)salt;
	}
	return s;
}

int toml_parse(struct toml_doc *doc, const char *name, const char *text, size_t len, lm_diag *d)
{
	memset(doc, 0, sizeof *doc);
	if (name == NULL)
		name = "<toml>";
	if (len > TOML_MAX_INPUT)
		return lm_fail(d, LM_ERANGE,
			       "%s: %zu bytes is more than the %u a TOML document may "
			       "hold",
			       name, len, (unsigned)TOML_MAX_INPUT);
	if (text == NULL)
		text = "";
	doc->name = strdup(name);
	if (doc->name == NULL)
		return lm_fail(d, LM_ENOMEM, "%s: out of memory", name);
	doc->seed = toml_seed(doc);

	struct tp t = {.doc = doc, .d = d, .p = text, .end = text + len, .line = 1};
	t.pf = (struct tomli_fix){.buf = t.path, .cap = sizeof t.path};
	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
		t.p += 3;
	t.line_start = t.p;
	t.col_at = t.p;

	int rc = tp_check_encoding(&t);
	if (rc == 0) {
		doc->root = tp_new(&t, TOML_TABLE, (struct tomli_pos){1, 1}, 0);
		rc = doc->root != NULL ? tp_document(&t) : tp_nomem(&t);
	}
	lm_buf_fini(&t.sb);
	if (rc != 0)
		toml_doc_fini(doc);
	return rc;
}

int toml_parse_file(struct toml_doc *doc, const char *path, lm_diag *d)
{
	memset(doc, 0, sizeof *doc);
	/* Without blocking: a FIFO or a device at the path is refused below, not waited on. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		return lm_fail(d, lm_err_from_errno(e), "%s: %s", path, strerror(e));
	}
	int rc = 0;
	char *buf = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		rc = lm_fail(d, lm_err_from_errno(e), "%s: %s", path, strerror(e));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = lm_fail(d, LM_EINVAL, "%s: not a regular file", path);
		goto out;
	}
	if ((uint64_t)st.st_size > TOML_MAX_INPUT) {
		rc = lm_fail(d, LM_ERANGE,
			     "%s: %lld bytes is more than the %u a TOML document "
			     "may hold",
			     path, (long long)st.st_size, (unsigned)TOML_MAX_INPUT);
		goto out;
	}
	size_t size = (size_t)st.st_size;
	buf = malloc(size + 1);
	if (buf == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	size_t got = 0;
	while (got < size) {
		ssize_t r = read(fd, buf + got, size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			rc = lm_fail(d, lm_err_from_errno(e), "%s: %s", path, strerror(e));
			goto out;
		}
		if (r == 0)
			break; /* the file shrank: parse what was there */
		got += (size_t)r;
	}
	rc = toml_parse(doc, path, buf, got, d);
out:
	free(buf);
	close(fd);
	return rc;
}

/* jinja_value.c — the arena, the error path and the values of the Jinja engine: how each value
 * prints, compares and becomes JSON, as @huggingface/jinja's runtime.ts does it on JavaScript
 * values (numbers are doubles printed by JavaScript's rules; strings are UTF-8 here and UTF-16
 * there, which shows only in `length`, counted here in UTF-16 units as there). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "coordinator/api/jinja_impl.h"

/* ------------------------------------------------------------------ arena and errors */

struct jchunk {
	struct jchunk *next;
	size_t used, cap;
	max_align_t data[];
};

#define JX_CHUNK 65536

void *jx_alloc(struct jctx *c, size_t n)
{
	struct jarena *a = c->ar;
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	if (n == 0)
		n = sizeof(max_align_t);
	struct jchunk *h = a->head;
	if (h == NULL || h->cap - h->used < n) {
		size_t cap = n > JX_CHUNK ? n : JX_CHUNK;
		if (a->max > 0 && a->total + cap > a->max)
			jx_failc(c, LM_ERANGE, "the template needs more than %zu bytes of memory",
				 a->max);
		h = malloc(sizeof *h + cap);
		if (h == NULL)
			jx_failc(c, LM_ENOMEM, "out of memory");
		h->next = a->head;
		h->used = 0;
		h->cap = cap;
		a->head = h;
		a->total += cap;
	}
	void *p = (char *)h->data + h->used;
	h->used += n;
	return p;
}

void jx_arena_fini(struct jarena *a)
{
	while (a->head != NULL) {
		struct jchunk *n = a->head->next;
		free(a->head);
		a->head = n;
	}
	a->total = 0;
}

static _Noreturn void jx_vfail(struct jctx *c, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

static _Noreturn void jx_vfail(struct jctx *c, int code, const char *fmt, va_list ap)
{
	int k = snprintf(c->msg, sizeof c->msg, "line %d: ", c->line);
	vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
	c->code = code;
	longjmp(c->jb, 1);
}

void jx_fail(struct jctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	jx_vfail(c, c->fail_code, fmt, ap);
}

void jx_failc(struct jctx *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	jx_vfail(c, code, fmt, ap);
}

void jx_step(struct jctx *c, uint64_t n)
{
	c->steps += n;
	if (c->lim.max_steps > 0 && c->steps > c->lim.max_steps)
		jx_failc(c, LM_ERANGE, "the template takes more than %llu steps",
			 (unsigned long long)c->lim.max_steps);
}

/* ------------------------------------------------------------------ strings and containers */

const struct jstr *jx_str(struct jctx *c, const char *p, size_t n)
{
	struct jstr *s = jx_alloc(c, sizeof *s + n + 1);
	s->n = n;
	if (n > 0)
		memcpy(s->p, p, n);
	s->p[n] = '\0';
	return s;
}

const struct jstr *jx_cstr(struct jctx *c, const char *s)
{
	return jx_str(c, s, strlen(s));
}

struct jval jv_str(struct jctx *c, const char *p, size_t n)
{
	return (struct jval){.t = J_STR, .s = jx_str(c, p, n)};
}

struct jval jv_strs(const struct jstr *s)
{
	return (struct jval){.t = J_STR, .s = s};
}

struct jval jv_list(struct jctx *c, enum jtype t)
{
	struct jarr *a = jx_alloc(c, sizeof *a);
	memset(a, 0, sizeof *a);
	return (struct jval){.t = t, .a = a};
}

struct jval jv_obj(struct jctx *c, enum jtype t)
{
	struct jobj *o = jx_alloc(c, sizeof *o);
	memset(o, 0, sizeof *o);
	return (struct jval){.t = t, .o = o};
}

void jx_push(struct jctx *c, struct jarr *a, struct jval v)
{
	if (a->n == a->cap) {
		int cap = a->cap ? a->cap * 2 : 4;
		struct jval *nv = jx_alloc(c, (size_t)cap * sizeof *nv);
		if (a->n > 0)
			memcpy(nv, a->v, (size_t)a->n * sizeof *nv);
		a->v = nv;
		a->cap = cap;
	}
	a->v[a->n++] = v;
	jx_step(c, 1);
}

struct jval *jx_get(const struct jobj *o, const char *k, size_t n)
{
	for (int i = 0; i < o->n; i++)
		if (o->k[i]->n == n && memcmp(o->k[i]->p, k, n) == 0)
			return &o->v[i];
	return NULL;
}

void jx_set(struct jctx *c, struct jobj *o, const struct jstr *k, struct jval v)
{
	struct jval *at = jx_get(o, k->p, k->n);
	if (at != NULL) {
		*at = v;
		return;
	}
	if (o->n == o->cap) {
		int cap = o->cap ? o->cap * 2 : 4;
		const struct jstr **nk = jx_alloc(c, (size_t)cap * sizeof *nk);
		struct jval *nv = jx_alloc(c, (size_t)cap * sizeof *nv);
		if (o->n > 0) {
			memcpy(nk, o->k, (size_t)o->n * sizeof *nk);
			memcpy(nv, o->v, (size_t)o->n * sizeof *nv);
		}
		o->k = nk;
		o->v = nv;
		o->cap = cap;
	}
	o->k[o->n] = k;
	o->v[o->n++] = v;
	jx_step(c, 1);
}

void jx_sb_add(struct jctx *c, struct jsb *b, const char *p, size_t n)
{
	size_t max = c->lim.max_output;
	if (max > 0 && b->n + n > max)
		jx_failc(c, LM_ERANGE, "the template's output passes %zu bytes", max);
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *np = jx_alloc(c, cap);
		if (b->n > 0)
			memcpy(np, b->p, b->n);
		b->p = np;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void jx_sb_adds(struct jctx *c, struct jsb *b, const char *s)
{
	jx_sb_add(c, b, s, strlen(s));
}

const struct jstr *jx_sb_str(struct jctx *c, struct jsb *b)
{
	return jx_str(c, b->p != NULL ? b->p : "", b->n);
}

/* ------------------------------------------------------------------ UTF-8 and white space */

uint32_t jx_utf8_at(const char *str, size_t n, size_t i, size_t *len)
{
	const unsigned char *s = (const unsigned char *)str;
	unsigned char b = s[i];
	size_t k = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
	if (i + k > n)
		k = 1;
	uint32_t cp = k == 1 ? b : (uint32_t)(b & (0x7f >> k));
	for (size_t j = 1; j < k; j++)
		cp = cp << 6 | (s[i + j] & 0x3fu);
	*len = k;
	return cp;
}

bool jx_js_space(uint32_t cp)
{
	switch (cp) {
	case 0x09:
	case 0x0a:
	case 0x0b:
	case 0x0c:
	case 0x0d:
	case 0x20:
	case 0xa0:
	case 0x1680:
	case 0x2028:
	case 0x2029:
	case 0x202f:
	case 0x205f:
	case 0x3000:
	case 0xfeff:
		return true;
	default:
		return cp >= 0x2000 && cp <= 0x200a;
	}
}

void jx_js_trim(const char *s, size_t n, bool lead, bool trail, size_t *start, size_t *end)
{
	size_t a = 0, b = n, k;
	while (lead && a < b && jx_js_space(jx_utf8_at(s, n, a, &k)))
		a += k;
	while (trail && b > a) {
		size_t c = b - 1;
		while (c > a && ((unsigned char)s[c] & 0xc0) == 0x80)
			c--;
		if (!jx_js_space(jx_utf8_at(s, n, c, &k)))
			break;
		b = c;
	}
	*start = a;
	*end = b;
}

size_t jx_utf16_len(const char *s, size_t n)
{
	size_t units = 0, k;
	for (size_t i = 0; i < n; i += k)
		units += jx_utf8_at(s, n, i, &k) >= 0x10000 ? 2 : 1;
	return units;
}

static uint32_t jx_case_cp(uint32_t cp, bool upper)
{
	if (cp < 0x80)
		return upper ? (cp >= 'a' && cp <= 'z' ? cp - 32 : cp)
			     : (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
	if (upper) {
		if ((cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) ||
		    (cp >= 0x3b1 && cp <= 0x3c9 && cp != 0x3c2) || (cp >= 0x430 && cp <= 0x44f))
			return cp - 32;
		if (cp >= 0x450 && cp <= 0x45f)
			return cp - 80;
		if (cp >= 0x100 && cp <= 0x17f && (cp & 1) && cp != 0x131 && cp != 0x149)
			return cp - 1;
		return cp;
	}
	if ((cp >= 0xc0 && cp <= 0xde && cp != 0xd7) ||
	    (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) || (cp >= 0x410 && cp <= 0x42f))
		return cp + 32;
	if (cp >= 0x400 && cp <= 0x40f)
		return cp + 80;
	if (cp >= 0x100 && cp <= 0x17f && !(cp & 1) && cp != 0x130 && cp != 0x138)
		return cp + 1;
	return cp;
}

static void jx_put_cp(struct jctx *c, struct jsb *b, uint32_t cp)
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
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		k = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		k = 4;
	}
	jx_sb_add(c, b, u, k);
}

struct jval jx_case(struct jctx *c, const struct jstr *s, bool upper)
{
	struct jsb b = {0};
	size_t k;
	for (size_t i = 0; i < s->n; i += k) {
		uint32_t cp = jx_utf8_at(s->p, s->n, i, &k);
		if (upper && cp == 0xdf) {
			jx_sb_add(c, &b, "SS", 2);
			continue;
		}
		uint32_t to = jx_case_cp(cp, upper);
		if (to == cp)
			jx_sb_add(c, &b, s->p + i, k);
		else
			jx_put_cp(c, &b, to);
	}
	return jv_strs(jx_sb_str(c, &b));
}

/* ------------------------------------------------------------------ numbers */

void jx_num_js(double d, char *buf, size_t cap)
{
	if (isnan(d)) {
		snprintf(buf, cap, "NaN");
		return;
	}
	if (isinf(d)) {
		snprintf(buf, cap, d < 0 ? "-Infinity" : "Infinity");
		return;
	}
	if (d == 0) {
		snprintf(buf, cap, "0");
		return;
	}
	/* The shortest digits that read back as d, and the decimal exponent. */
	char tmp[40];
	int prec;
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
		if (strtod(tmp, NULL) == d)
			break;
	}
	char digits[24];
	int nd = 0;
	const char *p = tmp + (tmp[0] == '-');
	for (; *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	digits[nd] = '\0';
	int n = atoi(p + 1) + 1; /* the point sits after n digits */
	char out[64];
	size_t o = 0;
	if (d < 0)
		out[o++] = '-';
	if (nd <= n && n <= 21) {
		memcpy(out + o, digits, (size_t)nd);
		o += (size_t)nd;
		for (int i = nd; i < n; i++)
			out[o++] = '0';
	} else if (0 < n && n <= 21) {
		memcpy(out + o, digits, (size_t)n);
		o += (size_t)n;
		out[o++] = '.';
		memcpy(out + o, digits + n, (size_t)(nd - n));
		o += (size_t)(nd - n);
	} else if (-6 < n && n <= 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int i = 0; i < -n; i++)
			out[o++] = '0';
		memcpy(out + o, digits, (size_t)nd);
		o += (size_t)nd;
	} else {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, (size_t)(nd - 1));
			o += (size_t)(nd - 1);
		}
		o += (size_t)snprintf(out + o, sizeof out - o, "e%c%d", n - 1 >= 0 ? '+' : '-',
				      abs(n - 1));
	}
	out[o] = '\0';
	snprintf(buf, cap, "%s", out);
}

/* ------------------------------------------------------------------ printing */

const char *jx_type(struct jval v)
{
	static const char *const names[] = {
		"UndefinedValue", "NullValue",
		"BooleanValue",   "IntegerValue",
		"FloatValue",     "StringValue",
		"ArrayValue",     "TupleValue",
		"ObjectValue",    "KeywordArgumentsValue",
		"NamespaceValue", "FunctionValue",
	};
	return names[v.t];
}

bool jx_truthy(struct jval v)
{
	switch (v.t) {
	case J_BOOL:
		return v.b;
	case J_INT:
	case J_FLOAT:
		return v.num != 0 && !isnan(v.num);
	case J_STR:
		return v.s->n > 0;
	case J_ARRAY:
	case J_TUPLE:
		return v.a->n > 0;
	case J_OBJECT:
	case J_KWARGS:
		return v.o->n > 0;
	case J_NS:
	case J_FUNC:
		return true;
	default:
		return false;
	}
}

static void jx_num(struct jctx *c, struct jsb *b, double d)
{
	char buf[64];
	jx_num_js(d, buf, sizeof buf);
	jx_sb_adds(c, b, buf);
}

void jx_raw_string(struct jctx *c, struct jsb *b, struct jval v)
{
	switch (v.t) {
	case J_UNDEF:
		jx_sb_adds(c, b, "undefined");
		break;
	case J_NULL:
		jx_sb_adds(c, b, "null");
		break;
	case J_BOOL:
		jx_sb_adds(c, b, v.b ? "true" : "false");
		break;
	case J_INT:
	case J_FLOAT:
		jx_num(c, b, v.num);
		break;
	case J_STR:
		jx_sb_add(c, b, v.s->p, v.s->n);
		break;
	case J_ARRAY:
	case J_TUPLE:
		/* Array.prototype.toString: each element's toString(), joined by ",". */
		for (int i = 0; i < v.a->n; i++) {
			if (i > 0)
				jx_sb_add(c, b, ",", 1);
			jx_display(c, b, v.a->v[i]);
		}
		break;
	case J_OBJECT:
	case J_KWARGS:
	case J_NS:
		jx_sb_adds(c, b, "[object Map]");
		break;
	case J_FUNC:
		jx_sb_adds(c, b, "function");
		break;
	}
}

void jx_display(struct jctx *c, struct jsb *b, struct jval v)
{
	if (v.t == J_FLOAT && isfinite(v.num) && v.num == floor(v.num)) {
		char buf[64];
		if (v.num == 0 && signbit(v.num))
			snprintf(buf, sizeof buf, "-0.0");
		else if (fabs(v.num) < 1e21)
			snprintf(buf, sizeof buf, "%.1f", v.num);
		else
			jx_num_js(v.num, buf, sizeof buf);
		jx_sb_adds(c, b, buf);
		return;
	}
	if (v.t == J_ARRAY || v.t == J_TUPLE || v.t == J_OBJECT || v.t == J_KWARGS || v.t == J_NS) {
		struct jjson_opts o = {0};
		jx_tojson(c, b, v, &o, 0);
		return;
	}
	jx_raw_string(c, b, v);
}

/* ------------------------------------------------------------------ JSON */

/* JSON.stringify of a string; with ensure_ascii every UTF-16 unit from 0x7f up as \uXXXX. */
static void jx_json_str(struct jctx *c, struct jsb *b, const char *s, size_t n, bool ascii)
{
	jx_sb_add(c, b, "\"", 1);
	size_t k;
	for (size_t i = 0; i < n; i += k) {
		uint32_t cp = jx_utf8_at(s, n, i, &k);
		char esc[16];
		const char *e = NULL;
		switch (cp) {
		case '"':
			e = "\\\"";
			break;
		case '\\':
			e = "\\\\";
			break;
		case '\b':
			e = "\\b";
			break;
		case '\f':
			e = "\\f";
			break;
		case '\n':
			e = "\\n";
			break;
		case '\r':
			e = "\\r";
			break;
		case '\t':
			e = "\\t";
			break;
		default:
			break;
		}
		if (e != NULL) {
			jx_sb_adds(c, b, e);
		} else if (cp < 0x20 || (ascii && cp >= 0x7f && cp < 0x10000)) {
			snprintf(esc, sizeof esc, "\\u%04x", cp);
			jx_sb_adds(c, b, esc);
		} else if (ascii && cp >= 0x10000) {
			uint32_t u = cp - 0x10000;
			snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (u >> 10),
				 0xdc00 + (u & 0x3ff));
			jx_sb_adds(c, b, esc);
		} else {
			jx_sb_add(c, b, s + i, k);
		}
	}
	jx_sb_add(c, b, "\"", 1);
}

static void jx_json_pad(struct jctx *c, struct jsb *b, int indent, int depth)
{
	jx_sb_add(c, b, "\n", 1);
	for (int i = 0; i < indent * depth; i++)
		jx_sb_add(c, b, " ", 1);
}

static int jx_key_cmp(const struct jstr *a, const struct jstr *b)
{
	/* localeCompare, approximated: case-insensitive first, then as stored. */
	int r = strcasecmp(a->p, b->p);
	return r != 0 ? r : strcmp(a->p, b->p);
}

static void jx_json_obj(struct jctx *c, struct jsb *b, const struct jobj *o,
			const struct jjson_opts *opt, int depth, const char *isep, const char *ksep)
{
	int *order = jx_alloc(c, (size_t)(o->n + 1) * sizeof *order);
	for (int i = 0; i < o->n; i++)
		order[i] = i;
	for (int i = 1; opt->sort_keys && i < o->n; i++)
		for (int j = i; j > 0 && jx_key_cmp(o->k[order[j - 1]], o->k[order[j]]) > 0; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	jx_sb_add(c, b, "{", 1);
	for (int i = 0; i < o->n; i++) {
		if (i > 0)
			jx_sb_adds(c, b, isep);
		if (opt->indent > 0)
			jx_json_pad(c, b, opt->indent, depth + 1);
		const struct jstr *k = o->k[order[i]];
		jx_json_str(c, b, k->p, k->n, opt->ensure_ascii);
		jx_sb_adds(c, b, ksep);
		jx_tojson(c, b, o->v[order[i]], opt, depth + 1);
	}
	if (opt->indent > 0 && o->n > 0)
		jx_json_pad(c, b, opt->indent, depth);
	jx_sb_add(c, b, "}", 1);
}

void jx_tojson(struct jctx *c, struct jsb *b, struct jval v, const struct jjson_opts *opt,
	       int depth)
{
	const char *isep = opt->item_sep != NULL ? opt->item_sep : opt->indent > 0 ? "," : ", ";
	const char *ksep = opt->key_sep != NULL ? opt->key_sep : ": ";
	if (depth > 512)
		jx_failc(c, LM_ERANGE, "a value nests deeper than 512");
	switch (v.t) {
	case J_UNDEF:
		jx_sb_adds(c, b, opt->undef_as_null ? "null" : "undefined");
		break;
	case J_NULL:
		jx_sb_adds(c, b, "null");
		break;
	case J_INT:
	case J_FLOAT:
		if (isfinite(v.num))
			jx_num(c, b, v.num);
		else
			jx_sb_adds(c, b, "null");
		break;
	case J_BOOL:
		jx_sb_adds(c, b, v.b ? "true" : "false");
		break;
	case J_STR:
		jx_json_str(c, b, v.s->p, v.s->n, opt->ensure_ascii);
		break;
	case J_ARRAY:
	case J_TUPLE:
		jx_sb_add(c, b, "[", 1);
		for (int i = 0; i < v.a->n; i++) {
			if (i > 0)
				jx_sb_adds(c, b, isep);
			if (opt->indent > 0)
				jx_json_pad(c, b, opt->indent, depth + 1);
			jx_tojson(c, b, v.a->v[i], opt, depth + 1);
		}
		if (opt->indent > 0 && v.a->n > 0)
			jx_json_pad(c, b, opt->indent, depth);
		jx_sb_add(c, b, "]", 1);
		break;
	case J_OBJECT:
	case J_KWARGS:
	case J_NS:
		jx_json_obj(c, b, v.o, opt, depth, isep, ksep);
		break;
	case J_FUNC:
		jx_fail(c, "Cannot convert to JSON: FunctionValue");
	}
}

/* Whether a key is a JavaScript array index ("0", "17"), which an object lists first. */
static bool jx_index_key(const char *k, uint32_t *out)
{
	if (k[0] == '\0' || (k[0] == '0' && k[1] != '\0') || strlen(k) > 10)
		return false;
	uint64_t v = 0;
	for (const char *p = k; *p != '\0'; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v >= 4294967295u)
		return false;
	*out = (uint32_t)v;
	return true;
}

static struct jval jx_from_json_obj(struct jctx *c, const cJSON *j, int depth)
{
	struct jval o = jv_obj(c, J_OBJECT);
	/* Integer keys first, ascending, as JSON.parse's object orders them. */
	for (;;) {
		const cJSON *best = NULL;
		uint32_t bv = 0, v;
		for (const cJSON *e = j->child; e != NULL; e = e->next)
			if (jx_index_key(e->string, &v) &&
			    jx_get(o.o, e->string, strlen(e->string)) == NULL &&
			    (best == NULL || v < bv)) {
				best = e;
				bv = v;
			}
		if (best == NULL)
			break;
		jx_set(c, o.o, jx_cstr(c, best->string), jx_from_json(c, best, depth + 1));
	}
	for (const cJSON *e = j->child; e != NULL; e = e->next) {
		uint32_t v;
		if (!jx_index_key(e->string, &v))
			jx_set(c, o.o, jx_cstr(c, e->string), jx_from_json(c, e, depth + 1));
	}
	return o;
}

struct jval jx_from_json(struct jctx *c, const cJSON *j, int depth)
{
	if (depth > 512)
		jx_failc(c, LM_ERANGE, "an input value nests deeper than 512");
	if (cJSON_IsNull(j))
		return jv_null();
	if (cJSON_IsBool(j))
		return jv_bool(cJSON_IsTrue(j));
	if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		return isfinite(d) && d == floor(d) ? jv_int(d) : jv_float(d);
	}
	if (cJSON_IsString(j))
		return jv_str(c, j->valuestring, strlen(j->valuestring));
	if (cJSON_IsArray(j)) {
		struct jval a = jv_list(c, J_ARRAY);
		for (const cJSON *e = j->child; e != NULL; e = e->next)
			jx_push(c, a.a, jx_from_json(c, e, depth + 1));
		return a;
	}
	if (cJSON_IsObject(j))
		return jx_from_json_obj(c, j, depth);
	return jv_undef();
}

/* ------------------------------------------------------------------ comparing */

/* JavaScript's ToNumber of a string. */
static double jx_str_number(const struct jstr *s)
{
	size_t a, e;
	jx_js_trim(s->p, s->n, true, true, &a, &e);
	if (a == e)
		return 0;
	char buf[64];
	size_t n = e - a;
	if (n >= sizeof buf)
		return NAN;
	memcpy(buf, s->p + a, n);
	buf[n] = '\0';
	const char *p = buf;
	if (n > 2 && p[0] == '0' && (p[1] | 32) == 'x') {
		char *end;
		double v = (double)strtoull(p + 2, &end, 16);
		return *end == '\0' ? v : NAN;
	}
	bool neg = p[0] == '-';
	const char *q = p + (p[0] == '-' || p[0] == '+');
	if (strcmp(q, "Infinity") == 0)
		return neg ? -INFINITY : INFINITY;
	for (const char *r = q; *r != '\0'; r++)
		if (!((*r >= '0' && *r <= '9') || *r == '.' || *r == 'e' || *r == 'E' ||
		      *r == '+' || *r == '-'))
			return NAN;
	char *end;
	double v = strtod(p, &end);
	return *end == '\0' ? v : NAN;
}

static bool jx_is_container(struct jval v)
{
	return v.t == J_ARRAY || v.t == J_TUPLE || v.t == J_OBJECT || v.t == J_KWARGS ||
	       v.t == J_NS || v.t == J_FUNC;
}

static const void *jx_ptr(struct jval v)
{
	return v.t == J_ARRAY || v.t == J_TUPLE ? (const void *)v.a
	       : v.t == J_FUNC                  ? (const void *)v.fn
						: (const void *)v.o;
}

bool jx_strict_eq(struct jval a, struct jval b)
{
	if (jv_is_num(a) && jv_is_num(b))
		return a.num == b.num;
	if (jx_is_container(a) || jx_is_container(b))
		return jx_is_container(a) && jx_is_container(b) && jx_ptr(a) == jx_ptr(b);
	if (a.t != b.t)
		return false;
	switch (a.t) {
	case J_BOOL:
		return a.b == b.b;
	case J_STR:
		return a.s->n == b.s->n && memcmp(a.s->p, b.s->p, a.s->n) == 0;
	default:
		return true; /* null, undefined */
	}
}

bool jx_loose_eq(struct jctx *c, struct jval a, struct jval b)
{
	bool an = a.t == J_NULL || a.t == J_UNDEF, bn = b.t == J_NULL || b.t == J_UNDEF;
	if (an || bn)
		return an && bn;
	bool ac = jx_is_container(a), bc = jx_is_container(b);
	if (ac && bc)
		return jx_strict_eq(a, b);
	if (ac || bc) {
		/* A list or dict against a primitive: ToPrimitive makes it its string (the items'
		 * own strings joined by ",", or "[object Map]"), which compares on. */
		struct jsb s = {0};
		jx_raw_string(c, &s, ac ? a : b);
		struct jval str = jv_strs(jx_sb_str(c, &s));
		return ac ? jx_loose_eq(c, str, b) : jx_loose_eq(c, a, str);
	}
	if (a.t == J_BOOL)
		return jx_loose_eq(c, jv_int(a.b), b);
	if (b.t == J_BOOL)
		return jx_loose_eq(c, a, jv_int(b.b));
	if (a.t == J_STR && b.t == J_STR)
		return jx_strict_eq(a, b);
	double x = a.t == J_STR ? jx_str_number(a.s) : a.num;
	double y = b.t == J_STR ? jx_str_number(b.s) : b.num;
	return x == y;
}

/* JavaScript's < on strings: UTF-16 code unit order (UTF-8 byte order but for the code
 * points past U+FFFF against U+E000-U+FFFF, which templates do not sort). */
static int jx_str_cmp(const struct jstr *a, const struct jstr *b)
{
	size_t n = a->n < b->n ? a->n : b->n;
	int r = memcmp(a->p, b->p, n);
	if (r != 0)
		return r < 0 ? -1 : 1;
	return a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
}

int jx_compare(struct jctx *c, struct jval a, struct jval b, bool cs)
{
	if (a.t == J_NULL && b.t == J_NULL)
		return 0;
	if (a.t == J_NULL || b.t == J_NULL || (a.t == J_UNDEF) != (b.t == J_UNDEF))
		jx_fail(c, "Cannot compare %s with %s", jx_type(a), jx_type(b));
	if (a.t == J_UNDEF)
		return 0;
	bool na = jv_is_num(a) || a.t == J_BOOL, nb = jv_is_num(b) || b.t == J_BOOL;
	if (na && nb) {
		double x = a.t == J_BOOL ? a.b : a.num, y = b.t == J_BOOL ? b.b : b.num;
		return x < y ? -1 : x > y ? 1 : 0;
	}
	if (a.t != b.t)
		jx_fail(c, "Cannot compare different types: %s and %s", jx_type(a), jx_type(b));
	if (a.t != J_STR)
		jx_fail(c, "Cannot compare type: %s", jx_type(a));
	if (cs)
		return jx_str_cmp(a.s, b.s);
	struct jval la = jx_case(c, a.s, false), lb = jx_case(c, b.s, false);
	return jx_str_cmp(la.s, lb.s);
}

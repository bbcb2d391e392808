/* jinja_builtin.c — the filters, tests, methods and global functions of the Jinja engine, each
 * as @huggingface/jinja's runtime.ts defines it (applyFilter, Environment.TESTS, the builtins
 * of StringValue and ObjectValue, setupGlobals), its argument checks and messages included.
 * What the reference does not have is refused as it refuses it ("Unknown StringValue filter:
 * round"), never approximated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api/jinja_impl.h"

struct jval jx_func(struct jctx *c, enum jfkind k, const char *name)
{
	struct jfunc *f = jx_alloc(c, sizeof *f);
	*f = (struct jfunc){.k = k, .name = name};
	return (struct jval){.t = J_FUNC, .fn = f};
}

static struct jval method(struct jctx *c, struct jval self, const char *name)
{
	struct jval f = jx_func(c, F_METHOD, name);
	f.fn->self = self;
	return f;
}

static bool is(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

static const char *const str_methods[] = {"upper",      "lower",  "strip",   "title",
					  "capitalize", "rstrip", "lstrip",  "startswith",
					  "endswith",   "split",  "replace", NULL};
static const char *const obj_methods[] = {"get", "items", "keys", "values", "dictsort", NULL};

static bool in_list(const char *const *l, const char *name)
{
	for (; *l != NULL; l++)
		if (is(*l, name))
			return true;
	return false;
}

struct jval jx_member_builtin(struct jctx *c, struct jval v, const char *name)
{
	if (v.t == J_STR) {
		if (is(name, "length"))
			return jv_int((double)jx_utf16_len(v.s->p, v.s->n));
		if (in_list(str_methods, name))
			return method(c, v, name);
	} else if (jv_is_list(v)) {
		if (is(name, "length"))
			return jv_int(v.a->n);
	} else if (jv_is_obj(v)) {
		if (in_list(obj_methods, name))
			return method(c, v, name);
	}
	return jv_undef();
}

/* ------------------------------------------------------------------ sorting */

typedef int (*jcmp_fn)(struct jctx *c, struct jval a, struct jval b, const void *arg);

/* A stable merge sort (Array.prototype.sort is stable); cmp may fail out of it. */
static void jsort(struct jctx *c, struct jval *v, int n, jcmp_fn cmp, const void *arg)
{
	if (n < 2)
		return;
	struct jval *tmp = jx_alloc(c, (size_t)n * sizeof *tmp);
	for (int w = 1; w < n; w *= 2) {
		for (int lo = 0; lo < n; lo += 2 * w) {
			int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = cmp(c, v[j], v[i], arg) < 0 ? v[j++] : v[i++];
			while (i < mid)
				tmp[k++] = v[i++];
			while (j < hi)
				tmp[k++] = v[j++];
		}
		memcpy(v, tmp, (size_t)n * sizeof *v);
		jx_step(c, (uint64_t)n);
	}
}

struct sort_opts {
	bool reverse, cs;
	const char *attr; /* a dotted path, or NULL */
	int by;           /* dictsort: 0 key, 1 value */
};

/* getAttributeValue: a dotted path through dicts, namespaces and list indices. */
static struct jval attr_path(struct jctx *c, struct jval v, const char *path)
{
	const char *p = path;
	for (;;) {
		const char *dot = strchr(p, '.');
		size_t n = dot != NULL ? (size_t)(dot - p) : strlen(p);
		if (jv_is_obj(v) || v.t == J_NS) {
			struct jval *x = jx_get(v.o, p, n);
			v = x != NULL ? *x : jv_undef();
		} else if (jv_is_list(v)) {
			char buf[32];
			snprintf(buf, sizeof buf, "%.*s", (int)(n < 31 ? n : 31), p);
			char *end;
			long i = strtol(buf, &end, 10);
			if (end == buf || i < 0 || i >= v.a->n)
				return jv_undef();
			v = v.a->v[i];
		} else {
			return jv_undef();
		}
		if (dot == NULL)
			return v;
		p = dot + 1;
	}
	(void)c;
}

static int cmp_sort(struct jctx *c, struct jval a, struct jval b, const void *arg)
{
	const struct sort_opts *o = arg;
	if (o->attr != NULL) {
		a = attr_path(c, a, o->attr);
		b = attr_path(c, b, o->attr);
	}
	int r = jx_compare(c, a, b, o->cs);
	return o->reverse ? -r : r;
}

static int cmp_pair(struct jctx *c, struct jval a, struct jval b, const void *arg)
{
	const struct sort_opts *o = arg;
	int r = jx_compare(c, a.a->v[o->by], b.a->v[o->by], o->cs);
	return o->reverse ? -r : r;
}

static struct jval copy_list(struct jctx *c, const struct jarr *a)
{
	struct jval v = jv_list(c, J_ARRAY);
	for (int i = 0; i < a->n; i++)
		jx_push(c, v.a, a->v[i]);
	return v;
}

/* ------------------------------------------------------------------ arguments */

/* Splits off a trailing keyword-arguments value. */
static const struct jobj *take_kwargs(struct jarr *args)
{
	if (args->n > 0 && args->v[args->n - 1].t == J_KWARGS)
		return args->v[--args->n].o;
	return NULL;
}

/* positional i ?? kwargs[name] ?? def */
static struct jval arg_or(const struct jarr *args, int i, const struct jobj *kw, const char *name,
			  struct jval def)
{
	if (i >= 0 && i < args->n)
		return args->v[i];
	struct jval *v = kw != NULL ? jx_get(kw, name, strlen(name)) : NULL;
	return v != NULL ? *v : def;
}

static bool arg_bool(struct jctx *c, struct jval v, const char *msg)
{
	if (v.t != J_BOOL)
		jx_fail(c, "%s", msg);
	return v.b;
}

/* ------------------------------------------------------------------ string methods */

static bool str_starts(const struct jstr *s, const struct jstr *p, bool end)
{
	if (p->n > s->n)
		return false;
	return memcmp(end ? s->p + s->n - p->n : s->p, p->p, p->n) == 0;
}

static struct jval str_affix(struct jctx *c, const struct jstr *s, struct jarr *args, bool end)
{
	const char *name = end ? "endswith" : "startswith";
	if (args->n == 0)
		jx_fail(c, "%s() requires at least one argument", name);
	struct jval p = args->v[0];
	if (p.t == J_STR)
		return jv_bool(str_starts(s, p.s, end));
	if (!jv_is_list(p))
		jx_fail(c, "%s() argument must be a string or tuple of strings", name);
	for (int i = 0; i < p.a->n; i++) {
		if (p.a->v[i].t != J_STR)
			jx_fail(c, "%s() tuple elements must be strings", name);
		if (str_starts(s, p.a->v[i].s, end))
			return jv_bool(true);
	}
	return jv_bool(false);
}

static struct jval str_split_ws(struct jctx *c, const struct jstr *s, double max)
{
	struct jval out = jv_list(c, J_ARRAY);
	size_t i = 0, n = s->n, k;
	for (;;) {
		while (i < n && jx_js_space(jx_utf8_at(s->p, n, i, &k)))
			i += k;
		if (i >= n)
			break;
		size_t start = i;
		while (i < n && !jx_js_space(jx_utf8_at(s->p, n, i, &k)))
			i += k;
		if (max != -1 && out.a->n >= max) {
			jx_push(c, out.a, jv_str(c, s->p + start, n - start));
			break;
		}
		jx_push(c, out.a, jv_str(c, s->p + start, i - start));
	}
	return out;
}

static struct jval str_split(struct jctx *c, const struct jstr *s, struct jarr *args)
{
	struct jval sep = args->n > 0 ? args->v[0] : jv_null();
	if (sep.t != J_STR && sep.t != J_NULL)
		jx_fail(c, "sep argument must be a string or null");
	struct jval max = args->n > 1 ? args->v[1] : jv_int(-1);
	if (max.t != J_INT)
		jx_fail(c, "maxsplit argument must be a number");
	if (sep.t == J_NULL)
		return str_split_ws(c, s, max.num);
	if (sep.s->n == 0)
		jx_fail(c, "empty separator");
	struct jval out = jv_list(c, J_ARRAY);
	const char *p = s->p, *end = s->p + s->n;
	for (;;) {
		const char *hit = memmem(p, (size_t)(end - p), sep.s->p, sep.s->n);
		if (hit == NULL || (max.num != -1 && out.a->n >= max.num)) {
			jx_push(c, out.a, jv_str(c, p, (size_t)(end - p)));
			break;
		}
		jx_push(c, out.a, jv_str(c, p, (size_t)(hit - p)));
		p = hit + sep.s->n;
	}
	return out;
}

static struct jval str_replace(struct jctx *c, const struct jstr *s, struct jarr *args)
{
	if (args->n < 2)
		jx_fail(c, "replace() requires at least two arguments");
	struct jval from = args->v[0], to = args->v[1], count = jv_null();
	if (from.t != J_STR || to.t != J_STR)
		jx_fail(c, "replace() arguments must be strings");
	if (args->n > 2) {
		count = args->v[2];
		if (count.t == J_KWARGS) {
			struct jval *v = jx_get(count.o, "count", 5);
			count = v != NULL ? *v : jv_null();
		}
	}
	if (count.t != J_INT && count.t != J_NULL)
		jx_fail(c, "replace() count argument must be a number or null");
	if (count.t == J_INT && count.num == 0)
		return jv_strs(s);
	double left = count.t == J_NULL || count.num < 0 ? INFINITY : count.num;
	struct jsb b = {0};
	size_t i = 0, k;
	if (from.s->n == 0) {
		/* An empty pattern matches before every code point and at the end. */
		for (;; i += k) {
			if (left > 0) {
				jx_sb_add(c, &b, to.s->p, to.s->n);
				left--;
			}
			if (i >= s->n)
				break;
			jx_utf8_at(s->p, s->n, i, &k);
			jx_sb_add(c, &b, s->p + i, k);
		}
		return jv_strs(jx_sb_str(c, &b));
	}
	while (i < s->n) {
		const char *hit =
			left > 0 ? memmem(s->p + i, s->n - i, from.s->p, from.s->n) : NULL;
		if (hit == NULL)
			break;
		jx_sb_add(c, &b, s->p + i, (size_t)(hit - s->p) - i);
		jx_sb_add(c, &b, to.s->p, to.s->n);
		i = (size_t)(hit - s->p) + from.s->n;
		left--;
	}
	jx_sb_add(c, &b, s->p + i, s->n - i);
	return jv_strs(jx_sb_str(c, &b));
}

static bool ascii_word(char ch)
{
	return (ch >= '0' && ch <= '9') || ((ch | 32) >= 'a' && (ch | 32) <= 'z') || ch == '_';
}

/* /\b\w/g -> upper case: the first letter of each ASCII word, the rest left as it is. */
static struct jval str_title(struct jctx *c, const struct jstr *s)
{
	char *p = jx_alloc(c, s->n + 1);
	memcpy(p, s->p, s->n + 1);
	for (size_t i = 0; i < s->n; i++)
		if (ascii_word(p[i]) && (i == 0 || !ascii_word(s->p[i - 1])) && p[i] >= 'a' &&
		    p[i] <= 'z')
			p[i] = (char)(p[i] - 32);
	return jv_str(c, p, s->n);
}

static struct jval str_capitalize(struct jctx *c, const struct jstr *s)
{
	if (s->n == 0)
		return jv_strs(s);
	size_t k;
	jx_utf8_at(s->p, s->n, 0, &k);
	struct jval first = jx_case(c, jx_str(c, s->p, k), true);
	struct jsb b = {0};
	jx_sb_add(c, &b, first.s->p, first.s->n);
	jx_sb_add(c, &b, s->p + k, s->n - k);
	return jv_strs(jx_sb_str(c, &b));
}

static struct jval str_trim(struct jctx *c, const struct jstr *s, bool lead, bool trail)
{
	size_t a, e;
	jx_js_trim(s->p, s->n, lead, trail, &a, &e);
	return jv_str(c, s->p + a, e - a);
}

static struct jval str_method(struct jctx *c, const struct jstr *s, const char *m,
			      struct jarr *args)
{
	if (is(m, "upper") || is(m, "lower"))
		return jx_case(c, s, m[0] == 'u');
	if (is(m, "strip"))
		return str_trim(c, s, true, true);
	if (is(m, "lstrip"))
		return str_trim(c, s, true, false);
	if (is(m, "rstrip"))
		return str_trim(c, s, false, true);
	if (is(m, "title"))
		return str_title(c, s);
	if (is(m, "capitalize"))
		return str_capitalize(c, s);
	if (is(m, "startswith") || is(m, "endswith"))
		return str_affix(c, s, args, m[0] == 'e');
	if (is(m, "split"))
		return str_split(c, s, args);
	return str_replace(c, s, args);
}

/* ------------------------------------------------------------------ dict methods */

static struct jval obj_items(struct jctx *c, const struct jobj *o, int what)
{
	struct jval out = jv_list(c, J_ARRAY);
	for (int i = 0; i < o->n; i++) {
		if (what == 0) {
			struct jval pair = jv_list(c, J_ARRAY);
			jx_push(c, pair.a, jv_strs(o->k[i]));
			jx_push(c, pair.a, o->v[i]);
			jx_push(c, out.a, pair);
		} else {
			jx_push(c, out.a, what == 1 ? jv_strs(o->k[i]) : o->v[i]);
		}
	}
	return out;
}

static struct jval obj_dictsort(struct jctx *c, const struct jobj *o, struct jarr *args)
{
	const struct jobj *kw = take_kwargs(args);
	struct sort_opts so = {0};
	so.cs = arg_bool(c, arg_or(args, 0, kw, "case_sensitive", jv_bool(false)),
			 "case_sensitive must be a boolean");
	struct jval by = arg_or(args, 1, kw, "by", jv_str(c, "key", 3));
	if (by.t != J_STR)
		jx_fail(c, "by must be a string");
	if (!is(by.s->p, "key") && !is(by.s->p, "value"))
		jx_fail(c, "by must be either 'key' or 'value'");
	so.by = by.s->p[0] == 'v';
	so.reverse = arg_bool(c, arg_or(args, 2, kw, "reverse", jv_bool(false)),
			      "reverse must be a boolean");
	struct jval items = obj_items(c, o, 0);
	jsort(c, items.a->v, items.a->n, cmp_pair, &so);
	return items;
}

static struct jval obj_method(struct jctx *c, const struct jobj *o, const char *m,
			      struct jarr *args)
{
	if (is(m, "get")) {
		struct jval k = args->n > 0 ? args->v[0] : jv_undef();
		if (k.t != J_STR)
			jx_fail(c, "Object key must be a string: got %s", jx_type(k));
		struct jval *v = jx_get(o, k.s->p, k.s->n);
		return v != NULL ? *v : args->n > 1 ? args->v[1] : jv_null();
	}
	if (is(m, "items"))
		return obj_items(c, o, 0);
	if (is(m, "keys"))
		return obj_items(c, o, 1);
	if (is(m, "values"))
		return obj_items(c, o, 2);
	return obj_dictsort(c, o, args);
}

/* ------------------------------------------------------------------ global functions */

static struct jval fn_range(struct jctx *c, struct jarr *args)
{
	for (int i = 0; i < args->n && i < 3; i++)
		if (!jv_is_num(args->v[i]))
			jx_fail(c, "range() takes numbers, got %s", jx_type(args->v[i]));
	if (args->n == 0)
		jx_fail(c, "range() takes at least one argument");
	double start = 0, stop = args->v[0].num, step = 1;
	if (args->n > 1) {
		start = args->v[0].num;
		stop = args->v[1].num;
	}
	if (args->n > 2)
		step = args->v[2].num;
	if (step == 0)
		jx_fail(c, "range() step must not be zero");
	double count = ceil((stop - start) / step);
	if (count > (double)c->lim.max_steps)
		jx_failc(c, LM_ERANGE, "range() of %.0f items passes the step limit", count);
	struct jval out = jv_list(c, J_ARRAY);
	for (double i = start; step > 0 ? i < stop : i > stop; i += step)
		jx_push(c, out.a, i == floor(i) ? jv_int(i) : jv_float(i));
	return out;
}

static struct jval fn_strftime(struct jctx *c, struct jarr *args)
{
	static const char *const months[] = {"January",   "February", "March",    "April",
					     "May",       "June",     "July",     "August",
					     "September", "October",  "November", "December"};
	if (args->n < 1 || args->v[0].t != J_STR)
		jx_fail(c, "strftime_now() takes a format string");
	const struct jstr *f = args->v[0].s;
	const struct jinja_date *d = &c->date;
	const char *month = months[(d->month >= 1 && d->month <= 12 ? d->month : 1) - 1];
	struct jsb b = {0};
	for (size_t i = 0; i < f->n; i++) {
		char buf[32];
		char k = i + 1 < f->n && f->p[i] == '%' ? f->p[i + 1] : '\0';
		buf[0] = '\0';
		if (k == 'Y')
			snprintf(buf, sizeof buf, "%d", d->year);
		else if (k == 'm' || k == 'd' || k == 'H' || k == 'M')
			snprintf(buf, sizeof buf, "%02d",
				 k == 'm'   ? d->month
				 : k == 'd' ? d->day
				 : k == 'H' ? d->hour
					    : d->minute);
		else if (k == 'b')
			snprintf(buf, sizeof buf, "%.3s", month);
		else if (k == 'B')
			snprintf(buf, sizeof buf, "%s", month);
		else if (k == '%')
			snprintf(buf, sizeof buf, "%%");
		if (buf[0] != '\0') {
			jx_sb_adds(c, &b, buf);
			i++;
		} else {
			jx_sb_add(c, &b, &f->p[i], 1);
		}
	}
	return jv_strs(jx_sb_str(c, &b));
}

static struct jval fn_namespace(struct jctx *c, struct jarr *args)
{
	const struct jobj *kw = take_kwargs(args);
	if (args->n > 1)
		jx_fail(c, "namespace expected at most 1 argument, got %d", args->n);
	struct jval ns = jv_obj(c, J_NS);
	if (args->n == 1) {
		struct jval src = args->v[0];
		if (jv_is_obj(src)) {
			for (int i = 0; i < src.o->n; i++)
				jx_set(c, ns.o, src.o->k[i], src.o->v[i]);
		} else if (jv_is_list(src)) {
			for (int i = 0; i < src.a->n; i++) {
				struct jval p = src.a->v[i];
				if (!jv_is_list(p) || p.a->n != 2)
					jx_fail(c, "namespace expected an object or an iterable of "
						   "[key, value] pairs");
				if (p.a->v[0].t != J_STR)
					jx_fail(c, "namespace keys must be strings");
				jx_set(c, ns.o, p.a->v[0].s, p.a->v[1]);
			}
		} else {
			jx_fail(c, "'%s' object is not iterable", jx_type(src));
		}
	}
	for (int i = 0; kw != NULL && i < kw->n; i++)
		jx_set(c, ns.o, kw->k[i], kw->v[i]);
	return ns;
}

struct jval jx_call_builtin(struct jctx *c, struct jfunc *f, struct jarr *args)
{
	switch (f->k) {
	case F_RAISE: {
		struct jsb b = {0};
		if (args->n > 0 && args->v[0].t != J_UNDEF)
			jx_raw_string(c, &b, args->v[0]);
		jx_failc(c, LM_EINVAL, "%s", b.p != NULL ? b.p : "");
	}
	case F_RANGE:
		return fn_range(c, args);
	case F_STRFTIME:
		return fn_strftime(c, args);
	case F_NAMESPACE:
		return fn_namespace(c, args);
	case F_METHOD:
		if (f->self.t == J_STR)
			return str_method(c, f->self.s, f->name, args);
		return obj_method(c, f->self.o, f->name, args);
	default:
		jx_fail(c, "not a builtin function");
	}
}

/* ------------------------------------------------------------------ tests */

static const char *const test_names[] = {"boolean",  "callable",  "odd",      "even",   "false",
					 "true",     "none",      "string",   "number", "integer",
					 "iterable", "mapping",   "sequence", "lower",  "upper",
					 "defined",  "undefined", "equalto",  "eq",     NULL};

bool jx_has_test(const char *name)
{
	return in_list(test_names, name);
}

bool jx_test(struct jctx *c, const char *t, struct jval v, const struct jval *arg)
{
	if (is(t, "boolean"))
		return v.t == J_BOOL;
	if (is(t, "callable"))
		return v.t == J_FUNC;
	if (is(t, "odd") || is(t, "even")) {
		if (v.t != J_INT)
			jx_fail(c, "cannot %s on %s", t, jx_type(v));
		return (fmod(v.num, 2) != 0) == is(t, "odd");
	}
	if (is(t, "false") || is(t, "true"))
		return v.t == J_BOOL && v.b == is(t, "true");
	if (is(t, "none"))
		return v.t == J_NULL;
	if (is(t, "string"))
		return v.t == J_STR;
	if (is(t, "number"))
		return jv_is_num(v);
	if (is(t, "integer"))
		return v.t == J_INT;
	if (is(t, "iterable"))
		return v.t == J_ARRAY || v.t == J_STR;
	if (is(t, "mapping"))
		return jv_is_obj(v);
	if (is(t, "sequence"))
		return jv_is_list(v) || jv_is_obj(v) || v.t == J_STR;
	if (is(t, "lower") || is(t, "upper")) {
		if (v.t != J_STR)
			return false;
		struct jval x = jx_case(c, v.s, is(t, "upper"));
		return x.s->n == v.s->n && memcmp(x.s->p, v.s->p, v.s->n) == 0;
	}
	if (is(t, "defined"))
		return v.t != J_UNDEF;
	if (is(t, "undefined"))
		return v.t == J_UNDEF;
	if (arg == NULL)
		jx_fail(c, "the %s test needs a value to compare with", t);
	return jx_strict_eq(v, *arg);
}

/* ------------------------------------------------------------------ filters */

static _Noreturn void no_filter(struct jctx *c, const char *kind, const char *name)
{
	jx_fail(c, "Unknown %s filter: %s", kind, name);
}

/* The string JavaScript's join makes of a value (null and undefined as ""). */
static void join_item(struct jctx *c, struct jsb *b, struct jval v)
{
	if (v.t != J_NULL && v.t != J_UNDEF)
		jx_raw_string(c, b, v);
}

static struct jval list_join(struct jctx *c, const struct jarr *a, const struct jstr *sep)
{
	struct jsb b = {0};
	for (int i = 0; i < a->n; i++) {
		if (i > 0 && sep != NULL)
			jx_sb_add(c, &b, sep->p, sep->n);
		join_item(c, &b, a->v[i]);
	}
	return jv_strs(jx_sb_str(c, &b));
}

static struct jval list_unique(struct jctx *c, const struct jarr *a)
{
	struct jval out = jv_list(c, J_ARRAY);
	for (int i = 0; i < a->n; i++) {
		bool seen = false;
		for (int j = 0; j < out.a->n && !seen; j++)
			seen = jx_strict_eq(out.a->v[j], a->v[i]);
		if (!seen)
			jx_push(c, out.a, a->v[i]);
	}
	return out;
}

static struct jval list_filter(struct jctx *c, struct jval v, const char *f)
{
	const struct jarr *a = v.a;
	if (is(f, "list"))
		return v;
	if (is(f, "first") || is(f, "last")) {
		if (a->n == 0)
			jx_fail(c, "the %s item of an empty list", f);
		return a->v[f[0] == 'f' ? 0 : a->n - 1];
	}
	if (is(f, "length"))
		return jv_int(a->n);
	if (is(f, "reverse")) {
		struct jval out = jv_list(c, J_ARRAY);
		for (int i = a->n - 1; i >= 0; i--)
			jx_push(c, out.a, a->v[i]);
		return out;
	}
	if (is(f, "sort")) {
		struct jval out = copy_list(c, a);
		struct sort_opts so = {0};
		jsort(c, out.a->v, out.a->n, cmp_sort, &so);
		return out;
	}
	if (is(f, "join"))
		return list_join(c, a, NULL);
	if (is(f, "string")) {
		struct jsb b = {0};
		struct jjson_opts o = {0};
		jx_tojson(c, &b, v, &o, 0);
		return jv_strs(jx_sb_str(c, &b));
	}
	if (is(f, "unique"))
		return list_unique(c, a);
	no_filter(c, "ArrayValue", f);
}

static struct jval str_indent(struct jctx *c, const struct jstr *s, const char *pad, bool first,
			      bool blank)
{
	struct jsb b = {0};
	const char *p = s->p, *end = s->p + s->n;
	for (int line = 0;; line++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
		if (line > 0)
			jx_sb_add(c, &b, "\n", 1);
		if (!((!first && line == 0) || (!blank && n == 0)))
			jx_sb_adds(c, &b, pad);
		jx_sb_add(c, &b, p, n);
		if (nl == NULL)
			break;
		p = nl + 1;
	}
	return jv_strs(jx_sb_str(c, &b));
}

/* parseInt(s, 10) and parseFloat(s); false when JavaScript gives NaN. */
static bool parse_num(const struct jstr *s, bool integer, double *out)
{
	size_t a, e;
	jx_js_trim(s->p, s->n, true, false, &a, &e);
	const char *p = s->p + a;
	size_t i = 0, n = s->n - a;
	if (i < n && (p[i] == '+' || p[i] == '-'))
		i++;
	size_t digits = i;
	while (i < n && p[i] >= '0' && p[i] <= '9')
		i++;
	if (integer) {
		if (i == digits)
			return false;
		*out = strtod(p, NULL); /* digits only: no point, no exponent */
		char buf[400];
		snprintf(buf, sizeof buf, "%.*s", (int)(i < 399 ? i : 399), p);
		*out = strtod(buf, NULL);
		return true;
	}
	if (n - digits >= 8 && memcmp(p + digits, "Infinity", 8) == 0) {
		*out = p[0] == '-' ? -INFINITY : INFINITY;
		return true;
	}
	size_t int_end = i;
	if (i < n && p[i] == '.') {
		i++;
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
	}
	if (i == digits || (i == digits + 1 && int_end == digits))
		return false;
	if (i < n && (p[i] | 32) == 'e') {
		size_t j = i + 1;
		if (j < n && (p[j] == '+' || p[j] == '-'))
			j++;
		size_t ed = j;
		while (j < n && p[j] >= '0' && p[j] <= '9')
			j++;
		if (j > ed)
			i = j;
	}
	char buf[400];
	snprintf(buf, sizeof buf, "%.*s", (int)(i < 399 ? i : 399), p);
	*out = strtod(buf, NULL);
	return true;
}

static struct jval str_filter(struct jctx *c, struct jval v, const char *f)
{
	const struct jstr *s = v.s;
	if (is(f, "length") || is(f, "upper") || is(f, "lower") || is(f, "title") ||
	    is(f, "capitalize")) {
		if (is(f, "length"))
			return jx_member_builtin(c, v, f);
		return str_method(c, s, f, NULL);
	}
	if (is(f, "trim"))
		return str_trim(c, s, true, true);
	if (is(f, "indent"))
		return str_indent(c, s, "    ", false, false);
	if (is(f, "join") || is(f, "string"))
		return v;
	double d;
	if (is(f, "int"))
		return jv_int(parse_num(s, true, &d) ? d : 0);
	if (is(f, "float"))
		return jv_float(parse_num(s, false, &d) ? d : 0);
	no_filter(c, "StringValue", f);
}

static struct jval scalar_filter(struct jctx *c, struct jval v, const char *f)
{
	if (jv_is_num(v)) {
		if (is(f, "abs"))
			return v.t == J_INT ? jv_int(fabs(v.num)) : jv_float(fabs(v.num));
		if (is(f, "int"))
			return jv_int(floor(v.num));
		if (is(f, "float"))
			return jv_float(v.num);
		if (is(f, "string")) {
			struct jsb b = {0};
			jx_display(c, &b, v);
			return jv_strs(jx_sb_str(c, &b));
		}
		no_filter(c, "NumericValue", f);
	}
	if (is(f, "bool"))
		return v;
	if (is(f, "int"))
		return jv_int(v.b);
	if (is(f, "float"))
		return jv_float(v.b);
	if (is(f, "string"))
		return jv_str(c, v.b ? "true" : "false", v.b ? 4 : 5);
	no_filter(c, "BooleanValue", f);
}

static struct jval filter_name(struct jctx *c, struct jval v, const char *f)
{
	if (is(f, "safe"))
		return v;
	if (is(f, "tojson")) {
		struct jsb b = {0};
		struct jjson_opts o = {.undef_as_null = true};
		jx_tojson(c, &b, v, &o, 0);
		return jv_strs(jx_sb_str(c, &b));
	}
	if (jv_is_list(v))
		return list_filter(c, v, f);
	if (v.t == J_STR)
		return str_filter(c, v, f);
	if (jv_is_num(v) || v.t == J_BOOL)
		return scalar_filter(c, v, f);
	if (jv_is_obj(v)) {
		if (is(f, "items"))
			return obj_items(c, v.o, 0);
		if (is(f, "length"))
			return jv_int(v.o->n);
		if (in_list(obj_methods, f)) {
			struct jarr none = {0};
			return obj_method(c, v.o, f, &none);
		}
		no_filter(c, "ObjectValue", f);
	}
	jx_fail(c, "Cannot apply filter \"%s\" to type: %s", f, jx_type(v));
}

static struct jval filter_tojson(struct jctx *c, struct jval v, const struct jobj *kw)
{
	struct jjson_opts o = {.undef_as_null = true};
	struct jarr none = {0};
	struct jval indent = arg_or(&none, -1, kw, "indent", jv_null());
	if (indent.t != J_INT && indent.t != J_NULL)
		jx_fail(c, "If set, indent must be a number");
	o.indent = indent.t == J_INT && indent.num > 0 ? (int)fmin(indent.num, 64) : 0;
	o.ensure_ascii = arg_bool(c, arg_or(&none, -1, kw, "ensure_ascii", jv_bool(false)),
				  "If set, ensure_ascii must be a boolean");
	o.sort_keys = arg_bool(c, arg_or(&none, -1, kw, "sort_keys", jv_bool(false)),
			       "If set, sort_keys must be a boolean");
	struct jval sep = arg_or(&none, -1, kw, "separators", jv_null());
	if (jv_is_list(sep)) {
		if (sep.a->n != 2 || sep.a->v[0].t != J_STR || sep.a->v[1].t != J_STR)
			jx_fail(c, "separators must be a tuple of two strings");
		o.item_sep = sep.a->v[0].s->p;
		o.key_sep = sep.a->v[1].s->p;
	} else if (sep.t != J_NULL) {
		jx_fail(c, "If set, separators must be a tuple of two strings");
	}
	struct jsb b = {0};
	jx_tojson(c, &b, v, &o, 0);
	return jv_strs(jx_sb_str(c, &b));
}

static struct jval filter_join(struct jctx *c, struct jval v, struct jarr *args,
			       const struct jobj *kw)
{
	struct jval sep = arg_or(args, 0, kw, "separator", jv_str(c, "", 0));
	if (!jv_is_list(v) && v.t != J_STR)
		jx_fail(c, "Cannot apply filter \"join\" to type: %s", jx_type(v));
	if (sep.t != J_STR)
		jx_fail(c, "separator must be a string");
	if (jv_is_list(v))
		return list_join(c, v.a, sep.s);
	struct jsb b = {0};
	size_t k;
	for (size_t i = 0; i < v.s->n; i += k) {
		jx_utf8_at(v.s->p, v.s->n, i, &k);
		if (i > 0)
			jx_sb_add(c, &b, sep.s->p, sep.s->n);
		jx_sb_add(c, &b, v.s->p + i, k);
	}
	return jv_strs(jx_sb_str(c, &b));
}

static struct jval filter_number(struct jctx *c, struct jval v, const char *f, struct jarr *args,
				 const struct jobj *kw)
{
	bool integer = is(f, "int");
	struct jval def = arg_or(args, 0, kw, "default", integer ? jv_int(0) : jv_float(0));
	double d;
	if (v.t == J_STR)
		return parse_num(v.s, integer, &d) ? (integer ? jv_int(d) : jv_float(d)) : def;
	if (jv_is_num(v))
		return v;
	if (v.t == J_BOOL)
		return integer ? jv_int(v.b) : jv_float(v.b);
	jx_fail(c, "Cannot apply filter \"%s\" to type: %s", f, jx_type(v));
}

static struct jval filter_select(struct jctx *c, struct jval v, const struct jnode *call,
				 struct jenv *env, bool select)
{
	const char *f = select ? "selectattr" : "rejectattr";
	for (int i = 0; i < v.a->n; i++)
		if (!jv_is_obj(v.a->v[i]) && v.a->v[i].t != J_NS)
			jx_fail(c, "`%s` can only be applied to array of objects", f);
	for (int i = 0; i < call->l1.n; i++)
		if (call->l1.v[i]->k != N_STR)
			jx_fail(c, "arguments of `%s` must be strings", f);
	if (call->l1.n == 0)
		jx_fail(c, "`%s` needs an attribute", f);
	const struct jstr *attr = call->l1.v[0]->s;
	const char *test = call->l1.n > 1 ? call->l1.v[1]->s->p : NULL;
	struct jval arg = call->l1.n > 2 ? c->eval(c, call->l1.v[2], env) : jv_undef();
	if (test != NULL && !jx_has_test(test))
		jx_fail(c, "Unknown test: %s", test);
	struct jval out = jv_list(c, J_ARRAY);
	for (int i = 0; i < v.a->n; i++) {
		struct jval *a = jx_get(v.a->v[i].o, attr->p, attr->n);
		bool r = a != NULL && (test != NULL ? jx_test(c, test, *a, &arg) : jx_truthy(*a));
		if (r == select)
			jx_push(c, out.a, v.a->v[i]);
	}
	return out;
}

static struct jval filter_map(struct jctx *c, struct jval v, const struct jobj *kw)
{
	struct jval *attr = kw != NULL ? jx_get(kw, "attribute", 9) : NULL;
	if (attr == NULL)
		jx_fail(c,
			"`map` expressions without `attribute` set are not currently supported.");
	if (attr->t != J_STR)
		jx_fail(c, "attribute must be a string");
	struct jval *def = jx_get(kw, "default", 7);
	struct jval out = jv_list(c, J_ARRAY);
	for (int i = 0; i < v.a->n; i++) {
		if (!jv_is_obj(v.a->v[i]) && v.a->v[i].t != J_NS)
			jx_fail(c, "items in map must be an object");
		struct jval x = attr_path(c, v.a->v[i], attr->s->p);
		jx_push(c, out.a, x.t == J_UNDEF && def != NULL ? *def : x);
	}
	return out;
}

static struct jval filter_sort(struct jctx *c, struct jval v, struct jarr *args,
			       const struct jobj *kw)
{
	struct sort_opts so = {0};
	so.reverse = arg_bool(c, arg_or(args, 0, kw, "reverse", jv_bool(false)),
			      "reverse must be a boolean");
	so.cs = arg_bool(c, arg_or(args, 1, kw, "case_sensitive", jv_bool(false)),
			 "case_sensitive must be a boolean");
	struct jval attr = arg_or(args, 2, kw, "attribute", jv_null());
	char num[32];
	if (attr.t == J_STR) {
		so.attr = attr.s->p;
	} else if (attr.t == J_INT) {
		jx_num_js(attr.num, num, sizeof num);
		so.attr = num;
	} else if (attr.t != J_NULL) {
		jx_fail(c, "attribute must be a string, integer, or null");
	}
	struct jval out = copy_list(c, v.a);
	jsort(c, out.a->v, out.a->n, cmp_sort, &so);
	return out;
}

static struct jval filter_call(struct jctx *c, struct jval v, const struct jnode *call,
			       struct jenv *env)
{
	if (call->a->k != N_IDENT)
		jx_fail(c, "Unknown filter: %s",
			call->a->k == N_MEMBER ? "MemberExpression" : "CallExpression");
	const char *f = call->a->s->p;
	struct jarr args = {0};
	struct jobj *kw;
	if (is(f, "selectattr") || is(f, "rejectattr")) {
		if (jv_is_list(v))
			return filter_select(c, v, call, env, f[0] == 's');
		if (v.t != J_STR && !jv_is_obj(v))
			jx_fail(c, "Cannot apply filter \"%s\" to type: %s", f, jx_type(v));
	}
	c->eval_args(c, &call->l1, env, &args, &kw);
	if (is(f, "tojson"))
		return filter_tojson(c, v, kw);
	if (is(f, "join"))
		return filter_join(c, v, &args, kw);
	if (is(f, "int") || is(f, "float"))
		return filter_number(c, v, f, &args, kw);
	if (is(f, "default")) {
		struct jval def = args.n > 0 ? args.v[0] : jv_str(c, "", 0);
		bool boolean = arg_bool(c, arg_or(&args, 1, kw, "boolean", jv_bool(false)),
					"`default` filter flag must be a boolean");
		return v.t == J_UNDEF || (boolean && !jx_truthy(v)) ? def : v;
	}
	if (jv_is_list(v)) {
		if (is(f, "sort"))
			return filter_sort(c, v, &args, kw);
		if (is(f, "map"))
			return filter_map(c, v, kw);
		no_filter(c, "ArrayValue", f);
	}
	if (v.t == J_STR) {
		if (is(f, "indent")) {
			struct jval w = arg_or(&args, 0, kw, "width", jv_int(4));
			if (w.t != J_INT)
				jx_fail(c, "width must be a number");
			char pad[256];
			int n = (int)fmax(0, fmin(w.num, 255));
			memset(pad, ' ', (size_t)n);
			pad[n] = '\0';
			return str_indent(c, v.s, pad,
					  jx_truthy(arg_or(&args, 1, kw, "first", jv_bool(false))),
					  jx_truthy(arg_or(&args, 2, kw, "blank", jv_bool(false))));
		}
		if (is(f, "replace")) {
			if (kw != NULL)
				jx_push(c, &args, (struct jval){.t = J_KWARGS, .o = kw});
			else
				jx_push(c, &args, jv_obj(c, J_KWARGS));
			return str_replace(c, v.s, &args);
		}
		no_filter(c, "StringValue", f);
	}
	if (jv_is_obj(v)) {
		if (!in_list(obj_methods, f))
			no_filter(c, "ObjectValue", f);
		if (kw != NULL && kw->n > 0)
			jx_push(c, &args, (struct jval){.t = J_KWARGS, .o = kw});
		return obj_method(c, v.o, f, &args);
	}
	jx_fail(c, "Cannot apply filter \"%s\" to type: %s", f, jx_type(v));
}

struct jval jx_filter(struct jctx *c, struct jval v, const struct jnode *f, struct jenv *env)
{
	if (f->k == N_IDENT)
		return filter_name(c, v, f->s->p);
	if (f->k != N_CALL)
		jx_fail(c, "Unknown filter: MemberExpression");
	return filter_call(c, v, f, env);
}

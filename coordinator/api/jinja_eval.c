/* jinja_eval.c — rendering a parsed template: statements, expressions, scopes and calls, as
 * @huggingface/jinja's Interpreter does them (runtime.ts). Its scoping is kept: a loop gets
 * one scope for all its iterations (a `set` in the body lives on into the next), an if does
 * not get one, a macro's scope is a child of its caller's (not of where it was defined), a
 * call block's of where it is written. Break and continue unwind to their loop through
 * c->ctrl; the loop drops what the unwound iteration rendered, as the reference's exception
 * does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "coordinator/api/jinja_impl.h"

static struct jenv *env_new(struct jctx *c, struct jenv *parent)
{
	struct jenv *e = jx_alloc(c, sizeof *e);
	memset(e, 0, sizeof *e);
	e->parent = parent;
	return e;
}

static void env_set(struct jctx *c, struct jenv *e, const struct jstr *name, struct jval v)
{
	jx_set(c, &e->vars, name, v);
}

struct jval jx_lookup(struct jctx *c, struct jenv *env, const char *name, size_t n)
{
	/* Every scope of the reference holds its own `namespace`. */
	bool ns = n == 9 && memcmp(name, "namespace", 9) == 0;
	for (struct jenv *e = env; e != NULL; e = e->parent) {
		struct jval *v = jx_get(&e->vars, name, n);
		if (v != NULL)
			return *v;
		if (ns)
			return jx_func(c, F_NAMESPACE, "namespace");
	}
	return jv_undef();
}

static void eval_block(struct jctx *c, const struct jlist *l, struct jenv *env, struct jsb *out);

static const struct jstr *render_block(struct jctx *c, const struct jlist *l, struct jenv *env)
{
	struct jsb b = {0};
	eval_block(c, l, env, &b);
	return jx_sb_str(c, &b);
}

/* ------------------------------------------------------------------ calls */

void jx_eval_args(struct jctx *c, const struct jlist *l, struct jenv *env, struct jarr *args,
		  struct jobj **kw)
{
	*kw = NULL;
	for (int i = 0; i < l->n; i++) {
		const struct jnode *a = l->v[i];
		if (a->k == N_SPREAD) {
			struct jval v = jx_eval(c, a->a, env);
			if (!jv_is_list(v))
				jx_fail(c, "Cannot unpack non-iterable type: %s", jx_type(v));
			for (int j = 0; j < v.a->n; j++)
				jx_push(c, args, v.a->v[j]);
		} else if (a->k != N_KWARG && a->k != N_KWSPREAD) {
			jx_push(c, args, jx_eval(c, a, env));
		}
	}
	for (int i = 0; i < l->n; i++) {
		const struct jnode *a = l->v[i];
		if (a->k != N_KWARG && a->k != N_KWSPREAD)
			continue;
		if (*kw == NULL)
			*kw = jv_obj(c, J_KWARGS).o;
		struct jval v = jx_eval(c, a->a, env);
		if (a->k == N_KWARG) {
			if (jx_get(*kw, a->s->p, a->s->n) != NULL)
				jx_fail(c, "Got multiple values for keyword argument '%s'",
					a->s->p);
			jx_set(c, *kw, a->s, v);
			continue;
		}
		if (!jv_is_obj(v))
			jx_fail(c, "Argument after ** must be a mapping, not %s", jx_type(v));
		for (int j = 0; j < v.o->n; j++) {
			if (jx_get(*kw, v.o->k[j]->p, v.o->k[j]->n) != NULL)
				jx_fail(c, "Got multiple values for keyword argument '%s'",
					v.o->k[j]->p);
			jx_set(c, *kw, v.o->k[j], v.o->v[j]);
		}
	}
}

static void param_of(const struct jnode *p, const struct jstr **name, const struct jnode **def)
{
	*name = p->s;
	*def = p->k == N_KWARG ? p->a : NULL;
}

/* The reference's bindMacroArguments: every parameter is bound before any default is
 * evaluated, so a default never reads an outer variable of a parameter's name. */
static void bind_args(struct jctx *c, const char *who, const struct jlist *params, int spec,
		      struct jarr *args, struct jenv *scope)
{
	int npos = args->n;
	struct jobj kw = {0};
	if (npos > 0 && args->v[npos - 1].t == J_KWARGS) {
		const struct jobj *k = args->v[--npos].o;
		for (int i = 0; i < k->n; i++)
			jx_set(c, &kw, k->k[i], k->v[i]);
	}
	int *pending = jx_alloc(c, (size_t)(params->n + 1) * sizeof *pending), np = 0;
	for (int i = 0; i < params->n; i++) {
		const struct jstr *name;
		const struct jnode *def;
		param_of(params->v[i], &name, &def);
		struct jval v = jv_undef();
		bool have = i < npos;
		if (have) {
			v = args->v[i];
		} else {
			struct jval *k = jx_get(&kw, name->p, name->n);
			if (k != NULL) {
				v = *k;
				have = true;
				*k = (struct jval){.t = J_FUNC, .fn = NULL}; /* taken */
			}
		}
		if (!have && def != NULL)
			pending[np++] = i;
		env_set(c, scope, name, v);
	}
	struct jval rest = jv_obj(c, J_OBJECT);
	for (int i = 0; i < kw.n; i++)
		if (!(kw.v[i].t == J_FUNC && kw.v[i].fn == NULL))
			jx_set(c, rest.o, kw.k[i], kw.v[i]);
	if (spec & 1)
		env_set(c, scope, jx_cstr(c, "kwargs"), rest);
	else if (rest.o->n > 0)
		jx_fail(c, "macro %s takes no keyword argument '%s'", who, rest.o->k[0]->p);
	if (spec & 2) {
		struct jval va = jv_list(c, J_ARRAY);
		for (int i = params->n; i < npos; i++)
			jx_push(c, va.a, args->v[i]);
		env_set(c, scope, jx_cstr(c, "varargs"), va);
	} else if (npos > params->n) {
		jx_fail(c, "macro %s takes not more than %d argument(s)", who, params->n);
	}
	for (int i = 0; i < np; i++) {
		const struct jstr *name;
		const struct jnode *def;
		param_of(params->v[pending[i]], &name, &def);
		env_set(c, scope, name, jx_eval(c, def, scope));
	}
}

struct jval jx_call(struct jctx *c, struct jval fn, struct jarr *args, struct jenv *env)
{
	if (fn.t != J_FUNC)
		jx_fail(c, "Cannot call something that is not a function: got %s", jx_type(fn));
	struct jfunc *f = fn.fn;
	if (f->k != F_MACRO && f->k != F_CALLER)
		return jx_call_builtin(c, f, args);
	if (c->lim.max_depth > 0 && ++c->depth > c->lim.max_depth)
		jx_failc(c, LM_ERANGE, "macro calls nest deeper than %d", c->lim.max_depth);
	int line = c->line;
	struct jenv *scope = env_new(c, f->k == F_MACRO ? env : f->env);
	const struct jnode *n = f->node;
	if (f->k == F_MACRO) {
		char who[160];
		snprintf(who, sizeof who, "'%s'", n->s->p);
		bind_args(c, who, &n->l1, n->spec, args, scope);
	} else {
		bind_args(c, "None", &n->l1, n->spec, args, scope);
	}
	const struct jstr *s = render_block(c, &n->l2, scope);
	c->depth--;
	c->line = line;
	return jv_strs(s);
}

static struct jval eval_call(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	struct jarr args = {0};
	struct jobj *kw;
	jx_eval_args(c, &n->l1, env, &args, &kw);
	if (kw != NULL && kw->n > 0)
		jx_push(c, &args, (struct jval){.t = J_KWARGS, .o = kw});
	struct jval fn = jx_eval(c, n->a, env);
	c->line = n->line;
	return jx_call(c, fn, &args, env);
}

static struct jval eval_call_stmt(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	struct jfunc *caller = jx_alloc(c, sizeof *caller);
	*caller = (struct jfunc){.k = F_CALLER, .node = n, .env = env};
	struct jarr args = {0};
	struct jobj *kw;
	jx_eval_args(c, &n->a->l1, env, &args, &kw);
	jx_push(c, &args,
		(struct jval){.t = J_KWARGS, .o = kw != NULL ? kw : jv_obj(c, J_KWARGS).o});
	struct jval fn = jx_eval(c, n->a->a, env);
	if (fn.t != J_FUNC)
		jx_fail(c, "Cannot call something that is not a function: got %s", jx_type(fn));
	struct jenv *inner = env_new(c, env);
	env_set(c, inner, jx_cstr(c, "caller"), (struct jval){.t = J_FUNC, .fn = caller});
	return jx_call(c, fn, &args, inner);
}

/* ------------------------------------------------------------------ members and slices */

static struct jval eval_slice(struct jctx *c, struct jval obj, const struct jnode *s,
			      struct jenv *env)
{
	if (!jv_is_list(obj) && obj.t != J_STR)
		jx_fail(c, "Slice object must be an array or string");
	const struct jnode *parts[3] = {s->a, s->b, s->c};
	static const char *const what[3] = {"start", "stop", "step"};
	double v[3];
	bool given[3];
	for (int i = 0; i < 3; i++) {
		struct jval x = parts[i] != NULL ? jx_eval(c, parts[i], env) : jv_undef();
		if (x.t != J_INT && x.t != J_UNDEF)
			jx_fail(c, "Slice %s must be numeric or undefined", what[i]);
		given[i] = x.t == J_INT;
		v[i] = x.num;
	}
	/* The code points of a string, the items of a list. */
	size_t len = 0, k;
	size_t *at = NULL;
	if (obj.t == J_STR) {
		at = jx_alloc(c, (obj.s->n + 1) * sizeof *at);
		for (size_t i = 0; i < obj.s->n; i += k) {
			jx_utf8_at(obj.s->p, obj.s->n, i, &k);
			at[len++] = i;
		}
		at[len] = obj.s->n;
	} else {
		len = (size_t)obj.a->n;
	}
	double L = (double)len, step = given[2] ? v[2] : 1, start, stop;
	int dir = step > 0 ? 1 : step < 0 ? -1 : 0;
	if (dir >= 0) {
		start = !given[0] ? 0 : v[0] < 0 ? fmax(L + v[0], 0) : fmin(v[0], L);
		stop = !given[1] ? L : v[1] < 0 ? fmax(L + v[1], 0) : fmin(v[1], L);
	} else {
		start = !given[0] ? L - 1 : v[0] < 0 ? fmax(L + v[0], -1) : fmin(v[0], L - 1);
		stop = !given[1] ? -1 : v[1] < -1 ? fmax(L + v[1], -1) : fmin(v[1], L - 1);
	}
	struct jsb b = {0};
	struct jval out = jv_list(c, J_ARRAY);
	for (double i = start; dir * i < dir * stop; i += step) {
		size_t j = (size_t)i;
		if (obj.t == J_STR)
			jx_sb_add(c, &b, obj.s->p + at[j], at[j + 1] - at[j]);
		else
			jx_push(c, out.a, obj.a->v[j]);
	}
	return obj.t == J_STR ? jv_strs(jx_sb_str(c, &b)) : out;
}

/* s.at(i) of JavaScript: the UTF-16 unit at i (from the end when negative). */
static struct jval str_at(struct jctx *c, const struct jstr *s, double i)
{
	double len = (double)jx_utf16_len(s->p, s->n);
	double idx = i < 0 ? len + trunc(i) : trunc(i);
	if (idx < 0 || idx >= len)
		return jv_undef();
	size_t unit = 0, k;
	for (size_t p = 0; p < s->n; p += k) {
		uint32_t cp = jx_utf8_at(s->p, s->n, p, &k);
		size_t w = cp >= 0x10000 ? 2 : 1;
		if ((double)(unit + w) > idx)
			return jv_str(c, s->p + p, k);
		unit += w;
	}
	return jv_undef();
}

static struct jval member_of(struct jctx *c, struct jval obj, struct jval prop)
{
	if (jv_is_obj(obj) || obj.t == J_NS) {
		if (prop.t != J_STR)
			jx_fail(c, "Cannot access property with non-string: got %s", jx_type(prop));
		struct jval *v = jx_get(obj.o, prop.s->p, prop.s->n);
		if (v != NULL)
			return *v;
		return obj.t == J_NS ? jv_undef() : jx_member_builtin(c, obj, prop.s->p);
	}
	if (jv_is_list(obj) || obj.t == J_STR) {
		if (prop.t == J_INT) {
			if (obj.t == J_STR)
				return str_at(c, obj.s, prop.num);
			double i = prop.num < 0 ? obj.a->n + trunc(prop.num) : trunc(prop.num);
			return i >= 0 && i < obj.a->n ? obj.a->v[(int)i] : jv_undef();
		}
		if (prop.t == J_STR)
			return jx_member_builtin(c, obj, prop.s->p);
		jx_fail(c, "Cannot access property with non-string/non-number: got %s",
			jx_type(prop));
	}
	if (prop.t != J_STR)
		jx_fail(c, "Cannot access property with non-string: got %s", jx_type(prop));
	return jv_undef();
}

static struct jval eval_member(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	struct jval obj = jx_eval(c, n->a, env);
	struct jval prop;
	if (n->flag) {
		if (n->b->k == N_SLICE)
			return eval_slice(c, obj, n->b, env);
		prop = jx_eval(c, n->b, env);
	} else if (n->b->k == N_INT) {
		prop = jv_int(n->b->num);
	} else {
		prop = jv_strs(n->b->s);
	}
	c->line = n->line;
	return member_of(c, obj, prop);
}

/* ------------------------------------------------------------------ operators */

static struct jval concat(struct jctx *c, struct jval a, struct jval b)
{
	struct jsb s = {0};
	jx_raw_string(c, &s, a);
	jx_raw_string(c, &s, b);
	return jv_strs(jx_sb_str(c, &s));
}

static bool contains(const struct jstr *hay, const struct jstr *needle)
{
	return needle->n == 0 || memmem(hay->p, hay->n, needle->p, needle->n) != NULL;
}

static struct jval arith(struct jctx *c, enum jop op, struct jval l, struct jval r, bool *done)
{
	double a = l.num, b = r.num, res;
	bool fl = l.t == J_FLOAT || r.t == J_FLOAT;
	*done = true;
	switch (op) {
	case OP_ADD:
	case OP_SUB:
	case OP_MUL:
		res = op == OP_ADD ? a + b : op == OP_SUB ? a - b : a * b;
		return fl ? jv_float(res) : jv_int(res);
	case OP_DIV:
		return jv_float(a / b);
	case OP_FLOORDIV:
		res = floor(a / b);
		return fl ? jv_float(res) : jv_int(res);
	case OP_MOD:
		res = fmod(a, b);
		return fl ? jv_float(res) : jv_int(res);
	case OP_LT:
		return jv_bool(a < b);
	case OP_GT:
		return jv_bool(a > b);
	case OP_GE:
		return jv_bool(a >= b);
	case OP_LE:
		return jv_bool(a <= b);
	default:
		*done = false;
		return jv_undef();
	}
	(void)c;
}

static struct jval power(struct jctx *c, struct jval l, struct jval r)
{
	double a = l.t == J_BOOL ? l.b : l.num, b = r.t == J_BOOL ? r.b : r.num;
	if (a == 0 && b < 0)
		jx_fail(c, "0.0 cannot be raised to a negative power");
	double res = pow(a, b);
	if (!isfinite(res))
		jx_fail(c, "Exponentiation result is not a finite real number");
	return l.t == J_FLOAT || r.t == J_FLOAT || b < 0 ? jv_float(res) : jv_int(res);
}

static const char *const op_names[] = {
	[OP_OR] = "or",        [OP_AND] = "and", [OP_NOT] = "not", [OP_IN] = "in",
	[OP_NOTIN] = "not in", [OP_EQ] = "==",   [OP_NE] = "!=",   [OP_LT] = "<",
	[OP_GT] = ">",         [OP_LE] = "<=",   [OP_GE] = ">=",   [OP_ADD] = "+",
	[OP_SUB] = "-",        [OP_TILDE] = "~", [OP_MUL] = "*",   [OP_DIV] = "/",
	[OP_FLOORDIV] = "//",  [OP_MOD] = "%",   [OP_POW] = "**",
};

/* The reference's evaluateBinaryExpression past and/or, ==, != and the undefined/null
 * checks, in its order of cases. */
static struct jval binary_values(struct jctx *c, enum jop op, struct jval l, struct jval r)
{
	bool done;
	if (op == OP_TILDE)
		return concat(c, l, r);
	bool ln = jv_is_num(l) || l.t == J_BOOL, rn = jv_is_num(r) || r.t == J_BOOL;
	if (op == OP_POW && ln && rn)
		return power(c, l, r);
	if (jv_is_num(l) && jv_is_num(r)) {
		struct jval v = arith(c, op, l, r, &done);
		if (done)
			return v;
	} else if (jv_is_list(l) && jv_is_list(r)) {
		if (op == OP_ADD) {
			struct jval v = jv_list(c, J_ARRAY);
			for (int i = 0; i < l.a->n; i++)
				jx_push(c, v.a, l.a->v[i]);
			for (int i = 0; i < r.a->n; i++)
				jx_push(c, v.a, r.a->v[i]);
			return v;
		}
	} else if (jv_is_list(r) && (op == OP_IN || op == OP_NOTIN)) {
		bool member = false;
		for (int i = 0; i < r.a->n && !member; i++)
			member = jx_strict_eq(r.a->v[i], l);
		return jv_bool(member == (op == OP_IN));
	}
	if ((l.t == J_STR || r.t == J_STR) && op == OP_ADD)
		return concat(c, l, r);
	if (l.t == J_STR && r.t == J_STR && (op == OP_IN || op == OP_NOTIN))
		return jv_bool(contains(r.s, l.s) == (op == OP_IN));
	if (l.t == J_STR && jv_is_obj(r) && (op == OP_IN || op == OP_NOTIN))
		return jv_bool((jx_get(r.o, l.s->p, l.s->n) != NULL) == (op == OP_IN));
	jx_fail(c, "Unknown operator \"%s\" between %s and %s", op_names[op], jx_type(l),
		jx_type(r));
}

static struct jval eval_binary(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	struct jval l = jx_eval(c, n->a, env);
	if (n->op == OP_AND)
		return jx_truthy(l) ? jx_eval(c, n->b, env) : l;
	if (n->op == OP_OR)
		return jx_truthy(l) ? l : jx_eval(c, n->b, env);
	struct jval r = jx_eval(c, n->b, env);
	c->line = n->line;
	if (n->op == OP_EQ || n->op == OP_NE)
		return jv_bool(jx_loose_eq(c, l, r) == (n->op == OP_EQ));
	if (l.t == J_UNDEF || r.t == J_UNDEF) {
		if (r.t == J_UNDEF && (n->op == OP_IN || n->op == OP_NOTIN))
			return jv_bool(n->op == OP_NOTIN);
		jx_fail(c, "Cannot perform operation %s on undefined values", op_names[n->op]);
	}
	if (l.t == J_NULL || r.t == J_NULL)
		jx_fail(c, "Cannot perform operation on null values");
	return binary_values(c, n->op, l, r);
}

static struct jval eval_unary(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	struct jval v = jx_eval(c, n->a, env);
	if (n->op == OP_NOT)
		return jv_bool(!jx_truthy(v));
	double sign = n->op == OP_SUB ? -1 : 1;
	if (jv_is_num(v) || v.t == J_BOOL) {
		double x = sign * (v.t == J_BOOL ? v.b : v.num);
		return v.t == J_FLOAT ? jv_float(x) : jv_int(x);
	}
	jx_fail(c, "Unknown operator \"%s\" for %s", n->op == OP_SUB ? "-" : "+", jx_type(v));
}

/* ------------------------------------------------------------------ expressions */

static struct jval eval_literal(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	if (n->k == N_ARRAY || n->k == N_TUPLE) {
		struct jval v = jv_list(c, n->k == N_ARRAY ? J_ARRAY : J_TUPLE);
		for (int i = 0; i < n->l1.n; i++)
			jx_push(c, v.a, jx_eval(c, n->l1.v[i], env));
		return v;
	}
	struct jval o = jv_obj(c, J_OBJECT);
	for (int i = 0; i < n->l1.n; i++) {
		struct jval k = jx_eval(c, n->l1.v[i], env);
		if (k.t != J_STR)
			jx_fail(c, "Object keys must be strings: got %s", jx_type(k));
		jx_set(c, o.o, k.s, jx_eval(c, n->l2.v[i], env));
	}
	return o;
}

/* Expressions nest at most 200 deep in the text; calls add to that. */
#define JX_MAX_EVAL_DEPTH 2000

static struct jval eval_node(struct jctx *c, const struct jnode *n, struct jenv *env);

struct jval jx_eval(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	if (++c->edepth > JX_MAX_EVAL_DEPTH)
		jx_failc(c, LM_ERANGE, "expressions nest deeper than %d", JX_MAX_EVAL_DEPTH);
	struct jval v = eval_node(c, n, env);
	c->edepth--;
	return v;
}

static struct jval eval_node(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	c->line = n->line;
	jx_step(c, 1);
	switch (n->k) {
	case N_INT:
		return jv_int(n->num);
	case N_FLOAT:
		return jv_float(n->num);
	case N_STR:
	case N_TEXT:
		return jv_strs(n->s);
	case N_ARRAY:
	case N_TUPLE:
	case N_OBJECT:
		return eval_literal(c, n, env);
	case N_IDENT:
		return jx_lookup(c, env, n->s->p, n->s->n);
	case N_CALL:
		return eval_call(c, n, env);
	case N_MEMBER:
		return eval_member(c, n, env);
	case N_UNARY:
		return eval_unary(c, n, env);
	case N_BINARY:
		return eval_binary(c, n, env);
	case N_FILTER: {
		struct jval v = jx_eval(c, n->a, env);
		c->line = n->line;
		return jx_filter(c, v, n->b, env);
	}
	case N_TEST: {
		struct jval v = jx_eval(c, n->a, env);
		c->line = n->line;
		if (!jx_has_test(n->s->p))
			jx_fail(c, "Unknown test: %s", n->s->p);
		return jv_bool(jx_test(c, n->s->p, v, NULL) != n->flag);
	}
	case N_SELECT:
		return jx_truthy(jx_eval(c, n->b, env)) ? jx_eval(c, n->a, env) : jv_undef();
	case N_TERNARY:
		return jx_eval(c, jx_truthy(jx_eval(c, n->a, env)) ? n->b : n->c, env);
	case N_COMMENT:
		return jv_null();
	default:
		jx_fail(c, "Unknown node type");
	}
}

/* ------------------------------------------------------------------ statements */

static void bind_target(struct jctx *c, const struct jnode *t, struct jval v, struct jenv *env,
			bool in_set)
{
	if (t->k == N_IDENT) {
		env_set(c, env, t->s, v);
		return;
	}
	if (in_set ? !jv_is_list(v) : v.t != J_ARRAY)
		jx_fail(c, "Cannot unpack non-iterable type%s: %s", in_set ? " in set" : "",
			jx_type(v));
	if (t->l1.n != v.a->n)
		jx_fail(c, "Too %s items to unpack%s", t->l1.n > v.a->n ? "few" : "many",
			in_set ? " in set" : "");
	for (int i = 0; i < t->l1.n; i++) {
		if (t->l1.v[i]->k != N_IDENT)
			jx_fail(c, "Cannot unpack non-identifier type");
		env_set(c, env, t->l1.v[i]->s, v.a->v[i]);
	}
}

/* A set's value. `first` or `last` of an empty list is JavaScript's undefined in the reference,
 * which fails whatever uses it but a set, whose variable then reads as undefined. */
static struct jval set_value(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	const struct jnode *v = n->b;
	if (v == NULL)
		return jv_strs(render_block(c, &n->l1, env));
	if (v->k == N_FILTER && v->b->k == N_IDENT &&
	    (strcmp(v->b->s->p, "first") == 0 || strcmp(v->b->s->p, "last") == 0)) {
		struct jval x = jx_eval(c, v->a, env);
		c->line = v->line;
		return jv_is_list(x) && x.a->n == 0 ? jv_undef() : jx_filter(c, x, v->b, env);
	}
	return jx_eval(c, v, env);
}

static void eval_set(struct jctx *c, const struct jnode *n, struct jenv *env)
{
	struct jval rhs = set_value(c, n, env);
	if (c->ctrl != JX_NONE)
		return;
	const struct jnode *t = n->a;
	c->line = n->line;
	if (t->k == N_IDENT || t->k == N_TUPLE) {
		bind_target(c, t, rhs, env, true);
	} else if (t->k == N_MEMBER) {
		struct jval obj = jx_eval(c, t->a, env);
		if (obj.t != J_NS)
			jx_fail(c, "cannot assign attribute on non-namespace object");
		if (t->flag || t->b->k != N_IDENT)
			jx_fail(c, "Cannot assign to member with non-identifier property");
		jx_set(c, obj.o, t->b->s, rhs);
	} else {
		jx_fail(c, "Invalid LHS inside assignment expression");
	}
}

static struct jval loop_object(struct jctx *c, const struct jarr *items, int i)
{
	static const char *const keys[9] = {"index", "index0", "revindex", "revindex0", "first",
					    "last",  "length", "previtem", "nextitem"};
	if (c->loop_keys[0] == NULL)
		for (int k = 0; k < 9; k++)
			c->loop_keys[k] = jx_cstr(c, keys[k]);
	int n = items->n;
	struct jval v[9] = {
		jv_int(i + 1),
		jv_int(i),
		jv_int(n - i),
		jv_int(n - i - 1),
		jv_bool(i == 0),
		jv_bool(i == n - 1),
		jv_int(n),
		i > 0 ? items->v[i - 1] : jv_undef(),
		i < n - 1 ? items->v[i + 1] : jv_undef(),
	};
	/* The dict is built whole: its nine keys are known to be distinct. */
	struct jval o = jv_obj(c, J_OBJECT);
	o.o->k = jx_alloc(c, sizeof keys);
	o.o->v = jx_alloc(c, sizeof v);
	memcpy(o.o->k, c->loop_keys, sizeof c->loop_keys);
	memcpy(o.o->v, v, sizeof v);
	o.o->n = o.o->cap = 9;
	jx_step(c, 9);
	return o;
}

/* The items a loop runs over: its iterable's (a dict's keys), those passing its filter. */
static struct jarr *loop_items(struct jctx *c, const struct jnode *n, struct jenv *scope)
{
	const struct jnode *it = n->b, *test = NULL;
	if (it->k == N_SELECT) {
		test = it->b;
		it = it->a;
	}
	struct jval v = jx_eval(c, it, scope);
	c->line = n->line;
	if (!jv_is_list(v) && !jv_is_obj(v))
		jx_fail(c, "Expected iterable or object type in for loop: got %s", jx_type(v));
	struct jarr *src = v.a;
	if (jv_is_obj(v)) {
		src = jv_list(c, J_ARRAY).a;
		for (int i = 0; i < v.o->n; i++)
			jx_push(c, src, jv_strs(v.o->k[i]));
	}
	struct jarr *items = jv_list(c, J_ARRAY).a;
	for (int i = 0; i < src->n; i++) {
		struct jval cur = src->v[i];
		if (n->a->k == N_TUPLE) {
			if (cur.t != J_ARRAY)
				jx_fail(c, "Cannot unpack non-iterable type: %s", jx_type(cur));
			if (n->a->l1.n != cur.a->n)
				jx_fail(c, "Too %s items to unpack",
					n->a->l1.n > cur.a->n ? "few" : "many");
		}
		if (test != NULL) {
			struct jenv *ls = env_new(c, scope);
			bind_target(c, n->a, cur, ls, false);
			if (!jx_truthy(jx_eval(c, test, ls)))
				continue;
		}
		jx_push(c, items, cur);
	}
	return items;
}

static void eval_for(struct jctx *c, const struct jnode *n, struct jenv *env, struct jsb *out)
{
	struct jenv *scope = env_new(c, env);
	struct jarr *items = loop_items(c, n, scope);
	const struct jstr *loop = jx_cstr(c, "loop");
	bool none = true;
	for (int i = 0; i < items->n; i++) {
		env_set(c, scope, loop, loop_object(c, items, i));
		c->line = n->line;
		bind_target(c, n->a, items->v[i], scope, false);
		size_t mark = out->n;
		eval_block(c, &n->l1, scope, out);
		if (c->ctrl != JX_NONE) {
			int ctrl = c->ctrl;
			c->ctrl = JX_NONE;
			out->n = mark;
			if (out->p != NULL)
				out->p[mark] = '\0';
			if (ctrl == JX_BREAK)
				break;
			continue;
		}
		none = false;
	}
	if (none)
		eval_block(c, &n->l2, scope, out);
}

static void put_value(struct jctx *c, struct jsb *out, struct jval v)
{
	if (v.t != J_NULL && v.t != J_UNDEF)
		jx_display(c, out, v);
}

static void eval_stmt(struct jctx *c, const struct jnode *n, struct jenv *env, struct jsb *out)
{
	c->line = n->line;
	jx_step(c, 1);
	switch (n->k) {
	case N_TEXT:
		jx_sb_add(c, out, n->s->p, n->s->n);
		break;
	case N_COMMENT:
		break;
	case N_IF:
		eval_block(c, jx_truthy(jx_eval(c, n->a, env)) ? &n->l1 : &n->l2, env, out);
		break;
	case N_FOR:
		eval_for(c, n, env, out);
		break;
	case N_SET:
		eval_set(c, n, env);
		break;
	case N_MACRO: {
		struct jfunc *f = jx_alloc(c, sizeof *f);
		*f = (struct jfunc){.k = F_MACRO, .node = n};
		env_set(c, env, n->s, (struct jval){.t = J_FUNC, .fn = f});
		break;
	}
	case N_CALLSTMT:
		put_value(c, out, eval_call_stmt(c, n, env));
		break;
	case N_FILTERSTMT: {
		struct jval body = jv_strs(render_block(c, &n->l1, env));
		c->line = n->line;
		put_value(c, out, jx_filter(c, body, n->a, env));
		break;
	}
	case N_BREAK:
		c->ctrl = JX_BREAK;
		break;
	case N_CONTINUE:
		c->ctrl = JX_CONTINUE;
		break;
	default:
		put_value(c, out, jx_eval(c, n, env));
		break;
	}
}

static void eval_block(struct jctx *c, const struct jlist *l, struct jenv *env, struct jsb *out)
{
	for (int i = 0; i < l->n && c->ctrl == JX_NONE; i++)
		eval_stmt(c, l->v[i], env, out);
}

/* ------------------------------------------------------------------ entry */

static void declare(struct jctx *c, struct jenv *g, const char *name, struct jval v)
{
	if (jx_get(&g->vars, name, strlen(name)) != NULL)
		jx_fail(c, "Variable already declared: %s", name);
	env_set(c, g, jx_cstr(c, name), v);
}

static void render_globals(struct jctx *c, struct jenv *g, const cJSON *vars)
{
	declare(c, g, "false", jv_bool(false));
	declare(c, g, "true", jv_bool(true));
	declare(c, g, "none", jv_null());
	declare(c, g, "raise_exception", jx_func(c, F_RAISE, "raise_exception"));
	declare(c, g, "range", jx_func(c, F_RANGE, "range"));
	declare(c, g, "strftime_now", jx_func(c, F_STRFTIME, "strftime_now"));
	declare(c, g, "True", jv_bool(true));
	declare(c, g, "False", jv_bool(false));
	declare(c, g, "None", jv_null());
	for (const cJSON *e = vars != NULL ? vars->child : NULL; e != NULL; e = e->next)
		declare(c, g, e->string, jx_from_json(c, e, 0));
}

/* The render proper; 1 when it failed out, with the reason in c. */
static int render_run(struct jctx *c, const jinja_tmpl *t, const cJSON *vars, struct jsb *b)
{
	if (setjmp(c->jb) != 0)
		return 1;
	if (vars != NULL && !cJSON_IsObject(vars))
		jx_fail(c, "the variables are not a JSON object");
	struct jenv *g = env_new(c, NULL);
	c->global = g;
	render_globals(c, g, vars);
	eval_block(c, &t->body, g, b);
	if (c->ctrl != JX_NONE)
		jx_fail(c, "%s outside a loop", c->ctrl == JX_BREAK ? "break" : "continue");
	return 0;
}

int jinja_render(const jinja_tmpl *t, const cJSON *vars, const struct jinja_date *date,
		 const struct jinja_limits *lim, struct lm_buf *out, lm_diag *d)
{
	struct jarena ar = {0};
	struct jctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	c->ar = &ar;
	c->line = 1;
	c->fail_code = LM_EUNSUPPORTED;
	c->eval = jx_eval;
	c->eval_args = jx_eval_args;
	if (lim != NULL)
		c->lim = *lim;
	c->lim.max_output = c->lim.max_output ? c->lim.max_output : (size_t)16 << 20;
	c->lim.max_steps = c->lim.max_steps ? c->lim.max_steps : 20000000;
	c->lim.max_depth = c->lim.max_depth ? c->lim.max_depth : 64;
	ar.max = c->lim.max_memory ? c->lim.max_memory : (size_t)256 << 20;
	c->date = date != NULL ? *date : (struct jinja_date){2024, 7, 26, 0, 0};
	struct jsb b = {0};
	int rc = 0;
	if (render_run(c, t, vars, &b) != 0)
		rc = lm_fail(d, c->code, "%s", c->msg);
	else if (b.n > 0 && lm_buf_add(out, b.p, b.n) != 0)
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
	jx_arena_fini(&ar);
	free(c);
	return rc;
}

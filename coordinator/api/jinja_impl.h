/* jinja_impl.h — the inside of the Jinja engine (jinja.h): the AST, the value type, the arena
 * and the error path shared by its four files.
 *
 *   jinja_parse.c    the template's preprocessing, tokens and AST
 *   jinja_value.c    the arena, errors, values, strings, numbers, JSON (both ways)
 *   jinja_eval.c     statements and expressions, scopes, macros, jinja_render
 *   jinja_builtin.c  filters, tests, methods and the global functions
 *
 * Memory: everything a parse or a render makes lives in an arena freed at once at its end, so
 * an error can leave by longjmp from any depth (jx_fail) without leaking; the arena's total is
 * the memory limit. Values are passed by value; lists, dicts and namespaces by reference
 * (only namespaces are ever changed in place, as in the reference). */
#ifndef LM_JINJA_IMPL_H
#define LM_JINJA_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/api/jinja.h"

/* ------------------------------------------------------------------ arena and errors */

struct jchunk;
struct jarena {
	struct jchunk *head;
	size_t total, max; /* bytes held, and the most it may hold (0: no bound) */
};

struct jenv;
struct jnode;
struct jlist;
struct jarr;
struct jobj;
struct jctx {
	struct jarena *ar;
	jmp_buf jb;
	int code;      /* the LM_E* code of the failure */
	int fail_code; /* jx_fail's code: LM_EFORMAT parsing, LM_EUNSUPPORTED rendering */
	char msg[480]; /* "line N: why" */
	int line;      /* the template line being parsed or evaluated */
	uint64_t steps;
	int depth;  /* macro and call-block calls under way */
	int edepth; /* expressions under evaluation */
	int ctrl;   /* JX_BREAK or JX_CONTINUE while one unwinds to its loop */
	struct jinja_limits lim;
	struct jinja_date date;
	struct jenv *global;
	const struct jstr *loop_keys[9]; /* index, index0, ...: made once a render */
	/* The evaluator, as the filters and tests of jinja_builtin.c reach it: a filter whose
	 * arguments are expressions has them evaluated through these, which jinja_render sets
	 * to jx_eval and jx_eval_args. So the builtins depend on the evaluator's interface and
	 * the evaluator calls down into them, never the two files into each other. */
	struct jval (*eval)(struct jctx *c, const struct jnode *n, struct jenv *env);
	void (*eval_args)(struct jctx *c, const struct jlist *l, struct jenv *env,
			  struct jarr *args, struct jobj **kw);
};

enum { JX_NONE, JX_BREAK, JX_CONTINUE };

void *jx_alloc(struct jctx *c, size_t n);
void jx_arena_fini(struct jarena *a);
/* Leaves the parse or render with c->fail_code and "line N: why". */
_Noreturn void jx_fail(struct jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with another code (LM_ERANGE for limits, LM_ENOMEM). */
_Noreturn void jx_failc(struct jctx *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Counts n steps against the limit. */
void jx_step(struct jctx *c, uint64_t n);

/* ------------------------------------------------------------------ values */

enum jtype {
	J_UNDEF,
	J_NULL,
	J_BOOL,
	J_INT,
	J_FLOAT,
	J_STR,
	J_ARRAY,
	J_TUPLE,
	J_OBJECT,
	J_KWARGS,
	J_NS,
	J_FUNC
};

struct jstr {
	size_t n;
	char p[]; /* NUL-terminated */
};

struct jval;
struct jarr {
	int n, cap;
	struct jval *v;
};

struct jobj {
	int n, cap;
	const struct jstr **k;
	struct jval *v;
};

struct jfunc;
/* Integers are JavaScript numbers too (the reference's IntegerValue holds one): the type only
 * decides how they print and combine. */
struct jval {
	enum jtype t;
	union {
		bool b;
		double num;
		const struct jstr *s;
		struct jarr *a;
		struct jobj *o;
		struct jfunc *fn;
	};
};

enum jfkind { F_MACRO, F_CALLER, F_RAISE, F_RANGE, F_STRFTIME, F_NAMESPACE, F_METHOD };

struct jnode;
struct jfunc {
	enum jfkind k;
	const char *name;         /* a method's name */
	struct jval self;         /* a method's object */
	const struct jnode *node; /* a macro or a call block */
	struct jenv *env;         /* a call block's scope */
};

/* A string builder in the arena; every append is checked against max_output. */
struct jsb {
	char *p;
	size_t n, cap;
};

static inline struct jval jv_undef(void)
{
	return (struct jval){.t = J_UNDEF};
}
static inline struct jval jv_null(void)
{
	return (struct jval){.t = J_NULL};
}
static inline struct jval jv_bool(bool b)
{
	return (struct jval){.t = J_BOOL, .b = b};
}
static inline struct jval jv_int(double d)
{
	return (struct jval){.t = J_INT, .num = d};
}
static inline struct jval jv_float(double d)
{
	return (struct jval){.t = J_FLOAT, .num = d};
}
static inline bool jv_is_list(struct jval v)
{
	return v.t == J_ARRAY || v.t == J_TUPLE;
}
static inline bool jv_is_obj(struct jval v)
{
	return v.t == J_OBJECT || v.t == J_KWARGS;
}
static inline bool jv_is_num(struct jval v)
{
	return v.t == J_INT || v.t == J_FLOAT;
}

const struct jstr *jx_str(struct jctx *c, const char *p, size_t n);
const struct jstr *jx_cstr(struct jctx *c, const char *s);
struct jval jv_str(struct jctx *c, const char *p, size_t n);
struct jval jv_strs(const struct jstr *s);
struct jval jv_list(struct jctx *c, enum jtype t);
struct jval jv_obj(struct jctx *c, enum jtype t);
void jx_push(struct jctx *c, struct jarr *a, struct jval v);
/* The value at key, or NULL. */
struct jval *jx_get(const struct jobj *o, const char *k, size_t n);
void jx_set(struct jctx *c, struct jobj *o, const struct jstr *k, struct jval v);

void jx_sb_add(struct jctx *c, struct jsb *b, const char *p, size_t n);
void jx_sb_adds(struct jctx *c, struct jsb *b, const char *s);
const struct jstr *jx_sb_str(struct jctx *c, struct jsb *b);

/* "IntegerValue", ... : the reference's type names, for messages. */
const char *jx_type(struct jval v);
bool jx_truthy(struct jval v);
/* JavaScript's String(v.value) (what `+` and `~` concatenate) and the reference's
 * toString() (what {{ }} prints). */
void jx_raw_string(struct jctx *c, struct jsb *b, struct jval v);
void jx_display(struct jctx *c, struct jsb *b, struct jval v);
/* JavaScript's Number.prototype.toString into buf (at least 32 bytes). */
void jx_num_js(double d, char *buf, size_t cap);

struct jjson_opts {
	int indent; /* 0: none */
	bool ensure_ascii, sort_keys, undef_as_null;
	const char *item_sep, *key_sep; /* NULL: the defaults */
};
void jx_tojson(struct jctx *c, struct jsb *b, struct jval v, const struct jjson_opts *o, int depth);
struct jval jx_from_json(struct jctx *c, const struct cJSON *j, int depth);

/* JavaScript's == and === on the values the reference compares (v.value). */
bool jx_loose_eq(struct jctx *c, struct jval a, struct jval b);
bool jx_strict_eq(struct jval a, struct jval b);
/* The reference's compareRuntimeValues (sort, dictsort): -1, 0, 1 or a failure. */
int jx_compare(struct jctx *c, struct jval a, struct jval b, bool case_sensitive);

/* UTF-8 and JavaScript's white space. */
uint32_t jx_utf8_at(const char *s, size_t n, size_t i, size_t *len);
bool jx_js_space(uint32_t cp);
void jx_js_trim(const char *s, size_t n, bool lead, bool trail, size_t *a, size_t *b);
size_t jx_utf16_len(const char *s, size_t n);
/* JavaScript's toUpperCase/toLowerCase on the scripts templates meet (ASCII, Latin-1,
 * Latin Extended-A, Greek, Cyrillic). */
struct jval jx_case(struct jctx *c, const struct jstr *s, bool upper);

/* ------------------------------------------------------------------ the AST */

enum jkind {
	N_TEXT,
	N_COMMENT,
	N_IF,
	N_FOR,
	N_SET,
	N_MACRO,
	N_CALLSTMT,
	N_FILTERSTMT,
	N_BREAK,
	N_CONTINUE,
	N_IDENT,
	N_INT,
	N_FLOAT,
	N_STR,
	N_ARRAY,
	N_TUPLE,
	N_OBJECT,
	N_BINARY,
	N_UNARY,
	N_MEMBER,
	N_CALL,
	N_FILTER,
	N_TEST,
	N_SELECT,
	N_TERNARY,
	N_SLICE,
	N_KWARG,
	N_SPREAD,
	N_KWSPREAD
};

enum jop {
	OP_OR,
	OP_AND,
	OP_NOT,
	OP_IN,
	OP_NOTIN,
	OP_EQ,
	OP_NE,
	OP_LT,
	OP_GT,
	OP_LE,
	OP_GE,
	OP_ADD,
	OP_SUB,
	OP_TILDE,
	OP_MUL,
	OP_DIV,
	OP_FLOORDIV,
	OP_MOD,
	OP_POW
};

struct jlist {
	struct jnode **v;
	int n, cap;
};

/* Fields by kind:
 *   TEXT, STR, IDENT: s          INT, FLOAT: num
 *   IF: a test, l1 body, l2 else             FOR: a target, b iterable, l1 body, l2 else
 *   SET: a target, b value or NULL and l1 the block
 *   MACRO: s name, l1 parameters, l2 body, spec (1: kwargs, 2: varargs read in the body)
 *   CALLSTMT: a the call, l1 the caller's parameters, l2 body, spec as MACRO's
 *   FILTERSTMT: a the filter (IDENT or CALL), l1 body
 *   ARRAY, TUPLE: l1             OBJECT: l1 keys, l2 values
 *   BINARY: op, a, b             UNARY: op (OP_NOT, OP_ADD, OP_SUB), a
 *   MEMBER: a object, b property, flag computed (else b is an IDENT or INT)
 *   CALL: a callee, l1 arguments FILTER: a operand, b the filter (IDENT or CALL)
 *   TEST: a operand, s name, flag negated     SELECT: a value, b test
 *   TERNARY: a test, b then, c else           SLICE: a start, b stop, c step (each or NULL)
 *   KWARG: s name, a value       SPREAD, KWSPREAD: a */
struct jnode {
	enum jkind k;
	int line;
	enum jop op;
	bool flag;
	int spec;
	const struct jstr *s;
	double num;
	struct jnode *a, *b, *c;
	struct jlist l1, l2;
};

struct jinja_tmpl {
	struct jarena ar;
	struct jlist body;
};

/* ------------------------------------------------------------------ evaluation */

struct jenv {
	struct jenv *parent;
	struct jobj vars;
};

struct jval jx_eval(struct jctx *c, const struct jnode *n, struct jenv *env);
/* A call's arguments: positional ones in args, keyword ones in kw (NULL when none). */
void jx_eval_args(struct jctx *c, const struct jlist *l, struct jenv *env, struct jarr *args,
		  struct jobj **kw);
struct jval jx_call(struct jctx *c, struct jval fn, struct jarr *args, struct jenv *env);
struct jval jx_lookup(struct jctx *c, struct jenv *env, const char *name, size_t n);

/* jinja_builtin.c */
struct jval jx_filter(struct jctx *c, struct jval v, const struct jnode *f, struct jenv *env);
bool jx_test(struct jctx *c, const char *name, struct jval v, const struct jval *arg);
bool jx_has_test(const char *name);
/* A method of a string, list or dict, bound to v, or undefined. */
struct jval jx_member_builtin(struct jctx *c, struct jval v, const char *name);
struct jval jx_call_builtin(struct jctx *c, struct jfunc *f, struct jarr *args);
struct jval jx_func(struct jctx *c, enum jfkind k, const char *name);

#endif

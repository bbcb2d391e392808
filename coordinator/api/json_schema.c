/* json_schema.c — JSON schemas to GBNF, and a request's structured-output fields. See
 * json_schema.h. Every schema node becomes a rule rN; $ref targets are generated once and
 * referenced by rule, so recursive schemas make recursive (never left-recursive: every JSON
 * value starts with a character) grammars.
 */
#include "coordinator/api/json_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/utf8.h"
#include "common/grammar/gbnf.h"

#define JS_MAX_DEPTH 64
#define JS_MAX_REFS  256

/* The primitives every schema grammar shares. White space is bounded (a newline and up to 20
 * indentation characters) and so are numbers' digits: see json_schema.h. */
#define JS_PRELUDE                                                                              \
	"space ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"                                            \
	"char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n" \
	"string ::= \"\\\"\" char* \"\\\"\" space\n"                                            \
	"integer ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) space\n"                                \
	"number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? "                   \
	"([eE] [-+]? [0-9]{1,3})? space\n"                                                      \
	"boolean ::= (\"true\" | \"false\") space\n"                                            \
	"null ::= \"null\" space\n"                                                             \
	"value ::= object | array | string | number | boolean | null\n"                         \
	"object ::= \"{\" space (string \":\" space value (\",\" space string \":\" space "     \
	"value)*)? \"}\" space\n"                                                               \
	"array ::= \"[\" space (value (\",\" space value)*)? \"]\" space\n"

const char json_object_gbnf[] = "root ::= object\n" JS_PRELUDE;

struct js {
	struct lm_buf *out;
	const cJSON *doc; /* the whole schema, for $ref */
	lm_diag *d;
	char path[256];
	struct {
		const char *ref;
		int id;
	} refs[JS_MAX_REFS];
	int n_refs;
	int next_id;
};

/* Keywords that constrain a value and are not enforced: refused by name. */
static const char *const js_refused[] = {
	"pattern",
	"minimum",
	"maximum",
	"exclusiveMinimum",
	"exclusiveMaximum",
	"multipleOf",
	"uniqueItems",
	"allOf",
	"not",
	"if",
	"then",
	"else",
	"patternProperties",
	"propertyNames",
	"minProperties",
	"maxProperties",
	"dependentRequired",
	"dependentSchemas",
	"contains",
	"minContains",
	"maxContains",
	"unevaluatedProperties",
	"unevaluatedItems",
	"contentEncoding",
	NULL,
};

__attribute__((format(printf, 3, 4))) static int js_fail(struct js *j, int code, const char *fmt,
							 ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return lm_fail(j->d, code, "json_schema: %s: %s", j->path[0] ? j->path : "/", msg);
}

static size_t js_push(struct js *j, const char *seg, int index)
{
	size_t at = strlen(j->path);
	if (index >= 0)
		snprintf(j->path + at, sizeof j->path - at, "/%s/%d", seg, index);
	else
		snprintf(j->path + at, sizeof j->path - at, "/%s", seg);
	return at;
}

/* A GBNF string literal that matches exactly the bytes s[0, n). */
static int js_lit(struct lm_buf *b, const char *s, size_t n)
{
	int rc = lm_buf_addc(b, '"');
	for (size_t i = 0; rc == 0 && i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			rc = lm_buf_printf(b, "\\%c", c);
		else if (c < 0x20 || c == 0x7F)
			rc = lm_buf_printf(b, "\\x%02X", c);
		else
			rc = lm_buf_addc(b, (char)c);
	}
	return rc != 0 ? rc : lm_buf_addc(b, '"');
}

/* The literal of a JSON value as cJSON prints it compactly (an enum or const member). */
static int js_value_lit(struct js *j, struct lm_buf *b, const cJSON *v)
{
	char *text = cJSON_PrintUnformatted(v);
	if (text == NULL)
		return lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory");
	if (!lm_utf8_valid(text, strlen(text))) {
		free(text);
		return js_fail(j, LM_EINVAL, "a value that is not valid UTF-8");
	}
	int rc = js_lit(b, text, strlen(text));
	free(text);
	return rc != 0 ? rc : lm_buf_adds(b, " space");
}

static int js_rule(struct js *j, const cJSON *s, int depth);

/* Writes rule `id` with the body. */
static int js_emit(struct js *j, int id, const struct lm_buf *body)
{
	if (lm_buf_printf(j->out, "r%d ::= %s\n", id, body->p != NULL ? body->p : "") != 0)
		return lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory");
	if (j->out->len > GBNF_MAX_TEXT)
		return js_fail(j, LM_EINVAL, "the schema makes a grammar of more than %d bytes",
			       GBNF_MAX_TEXT);
	return 0;
}

static int js_ref(struct js *j, const cJSON *s, int depth)
{
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
	if (!cJSON_IsString(ref))
		return js_fail(j, LM_EINVAL, "'$ref' must be a string");
	for (int i = 0; i < j->n_refs; i++)
		if (strcmp(j->refs[i].ref, ref->valuestring) == 0)
			return j->refs[i].id;
	const char *r = ref->valuestring, *name = NULL, *defs = NULL;
	if (strncmp(r, "#/$defs/", 8) == 0)
		name = r + 8, defs = "$defs";
	else if (strncmp(r, "#/definitions/", 14) == 0)
		name = r + 14, defs = "definitions";
	const cJSON *target = NULL;
	if (name != NULL)
		target = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(j->doc, defs), name);
	if (target == NULL)
		return js_fail(j, LM_EINVAL,
			       "'$ref' \"%.100s\" is not a definition of this schema (\"#/$defs/"
			       "name\" or \"#/definitions/name\")",
			       r);
	if (j->n_refs >= JS_MAX_REFS)
		return js_fail(j, LM_EINVAL, "more than %d distinct '$ref's", JS_MAX_REFS);
	/* The target's rule is named before it is generated, so it may refer to itself. */
	int id = j->next_id++;
	j->refs[j->n_refs].ref = r;
	j->refs[j->n_refs++].id = id;
	char saved[sizeof j->path];
	memcpy(saved, j->path, sizeof saved);
	snprintf(j->path, sizeof j->path, "/%s/%.100s", defs, name);
	int sub = js_rule(j, target, depth + 1);
	memcpy(j->path, saved, sizeof saved);
	if (sub < 0)
		return sub;
	struct lm_buf body = {0};
	int rc = lm_buf_printf(&body, "r%d", sub) != 0
			 ? lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory")
			 : js_emit(j, id, &body);
	lm_buf_fini(&body);
	return rc != 0 ? rc : id;
}

/* The alternatives of an enum, anyOf or oneOf, into body. */
static int js_alternatives(struct js *j, const cJSON *list, const char *key, bool schemas,
			   int depth, struct lm_buf *body)
{
	if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
		return js_fail(j, LM_EINVAL, "'%s' must be a non-empty array", key);
	int i = 0, rc = 0;
	for (const cJSON *v = list->child; v != NULL && rc == 0; v = v->next, i++) {
		if (i > 0 && (rc = lm_buf_adds(body, " | ")) != 0)
			break;
		if (!schemas) {
			rc = js_value_lit(j, body, v);
			continue;
		}
		size_t at = js_push(j, key, i);
		int id = js_rule(j, v, depth + 1);
		j->path[at] = '\0';
		rc = id < 0 ? id : lm_buf_printf(body, "r%d", id);
	}
	return rc;
}

static int js_bound(struct js *j, const cJSON *s, const char *key, long *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
	if (v == NULL)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 ||
	    v->valuedouble != floor(v->valuedouble))
		return js_fail(j, LM_EINVAL, "'%s' must be an integer in [0, 100000]", key);
	*out = (long)v->valuedouble;
	return 0;
}

/* "{m,n}" or "{m,}" for a repetition of min..max (max < 0: unbounded). */
static int js_reps(struct lm_buf *b, long min, long max)
{
	return max < 0 ? lm_buf_printf(b, "{%ld,}", min) : lm_buf_printf(b, "{%ld,%ld}", min, max);
}

static int js_string(struct js *j, const cJSON *s, struct lm_buf *body)
{
	long min = 0, max = -1;
	int rc;
	if ((rc = js_bound(j, s, "minLength", &min)) != 0 ||
	    (rc = js_bound(j, s, "maxLength", &max)) != 0)
		return rc;
	if (max >= 0 && max < min)
		return js_fail(j, LM_EINVAL, "'maxLength' is below 'minLength'");
	if (min == 0 && max < 0)
		return lm_buf_adds(body, "string");
	if ((rc = lm_buf_adds(body, "\"\\\"\" char")) != 0 || (rc = js_reps(body, min, max)) != 0)
		return rc;
	return lm_buf_adds(body, " \"\\\"\" space");
}

static int js_array(struct js *j, const cJSON *s, int depth, struct lm_buf *body)
{
	long min = 0, max = -1;
	int rc, item = -1;
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
	const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
	if ((rc = js_bound(j, s, "minItems", &min)) != 0 ||
	    (rc = js_bound(j, s, "maxItems", &max)) != 0)
		return rc;
	if (max >= 0 && max < min)
		return js_fail(j, LM_EINVAL, "'maxItems' is below 'minItems'");
	if (cJSON_IsArray(items) && prefix == NULL) {
		/* The older drafts' tuple: an array of schemas is prefixItems, as llama.cpp reads it
		 * (exactly those items; their additional items are allowed, not required). */
		prefix = items;
		items = NULL;
	}
	if (items != NULL && !cJSON_IsFalse(items)) {
		size_t at = js_push(j, "items", -1);
		item = js_rule(j, items, depth + 1);
		j->path[at] = '\0';
		if (item < 0)
			return item;
	}
	if ((rc = lm_buf_adds(body, "\"[\" space")) != 0)
		return rc;
	if (prefix != NULL) {
		/* A tuple: exactly these, then `items` (if any) repeated. */
		if (!cJSON_IsArray(prefix) || cJSON_GetArraySize(prefix) == 0)
			return js_fail(j, LM_EINVAL, "'prefixItems' must be a non-empty array");
		int i = 0;
		for (const cJSON *p = prefix->child; p != NULL; p = p->next, i++) {
			size_t at = js_push(j, "prefixItems", i);
			int id = js_rule(j, p, depth + 1);
			j->path[at] = '\0';
			if (id < 0)
				return id;
			if ((rc = lm_buf_printf(body, i > 0 ? " \",\" space r%d" : " r%d", id)) !=
			    0)
				return rc;
		}
		if (item >= 0 && (rc = lm_buf_printf(body, " (\",\" space r%d)*", item)) != 0)
			return rc;
		return lm_buf_adds(body, " \"]\" space");
	}
	if (items != NULL && cJSON_IsFalse(items))
		max = 0;
	char it[32];
	snprintf(it, sizeof it, item >= 0 ? "r%d" : "value", item);
	if (max != 0) {
		rc = lm_buf_printf(body, " %s%s (\",\" space %s)", min == 0 ? "(" : "", it, it);
		if (rc == 0)
			rc = js_reps(body, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
		if (rc == 0 && min == 0)
			rc = lm_buf_adds(body, ")?");
		if (rc != 0)
			return rc;
	}
	return lm_buf_adds(body, " \"]\" space");
}

static bool js_required(const cJSON *req, const char *key)
{
	for (const cJSON *r = req != NULL ? req->child : NULL; r != NULL; r = r->next)
		if (cJSON_IsString(r) && strcmp(r->valuestring, key) == 0)
			return true;
	return false;
}

/* One "key": value pair of property p (its value's rule made here), into b. */
static int js_pair(struct js *j, const cJSON *p, int depth, struct lm_buf *b)
{
	size_t at = js_push(j, "properties", -1);
	size_t at2 = strlen(j->path);
	snprintf(j->path + at2, sizeof j->path - at2, "/%.60s", p->string);
	int id = js_rule(j, p, depth + 1);
	j->path[at] = '\0';
	if (id < 0)
		return id;
	cJSON *key = cJSON_CreateString(p->string);
	char *text = key != NULL ? cJSON_PrintUnformatted(key) : NULL;
	cJSON_Delete(key);
	if (text == NULL)
		return lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory");
	if (!lm_utf8_valid(text, strlen(text))) {
		free(text);
		return js_fail(j, LM_EINVAL, "a property name that is not valid UTF-8");
	}
	int rc = js_lit(b, text, strlen(text));
	free(text);
	return rc != 0 ? rc : lm_buf_printf(b, " space \":\" space r%d", id);
}

/* The optional pairs, as a chain of rules O_i ::= kv_i ("," space O_i+1)? | O_i+1, so that
 * any subset comes out in order with commas only between pairs; `extra` (a rule id, or -1) is
 * the additional pairs' rule, last and repeatable. Returns the chain's first rule or -1. */
static int js_optional(struct js *j, const struct lm_buf *kv, int n, int extra, int *first)
{
	int next = extra, rc;
	for (int i = n - 1; i >= 0; i--) {
		struct lm_buf b = {0};
		int id = j->next_id++;
		if (next >= 0)
			rc = lm_buf_printf(&b, "%s (\",\" space r%d)? | r%d", kv[i].p, next, next);
		else
			rc = lm_buf_adds(&b, kv[i].p);
		rc = rc != 0 ? lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory")
			     : js_emit(j, id, &b);
		lm_buf_fini(&b);
		if (rc != 0)
			return rc;
		next = id;
	}
	*first = next;
	return 0;
}

static int js_extra(struct js *j, const cJSON *s, int depth, int *extra)
{
	const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	*extra = -1;
	if (ap == NULL || cJSON_IsFalse(ap))
		return 0;
	size_t at = js_push(j, "additionalProperties", -1);
	int val = js_rule(j, ap, depth + 1);
	j->path[at] = '\0';
	if (val < 0)
		return val;
	struct lm_buf b = {0};
	*extra = j->next_id++;
	int rc = lm_buf_printf(&b, "string \":\" space r%d (\",\" space r%d)?", val, *extra);
	rc = rc != 0 ? lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory")
		     : js_emit(j, *extra, &b);
	lm_buf_fini(&b);
	return rc;
}

static int js_object(struct js *j, const cJSON *s, int depth, struct lm_buf *body)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
	if (props != NULL && !cJSON_IsObject(props))
		return js_fail(j, LM_EINVAL, "'properties' must be an object");
	if (req != NULL && !cJSON_IsArray(req))
		return js_fail(j, LM_EINVAL, "'required' must be an array of names");
	for (const cJSON *r = req != NULL ? req->child : NULL; r != NULL; r = r->next)
		if (!cJSON_IsString(r) ||
		    cJSON_GetObjectItemCaseSensitive(props, r->valuestring) == NULL)
			return js_fail(j, LM_EINVAL,
				       "'required' names \"%.60s\", which is not "
				       "among 'properties'",
				       cJSON_IsString(r) ? r->valuestring : "?");
	int n = cJSON_GetArraySize(props), n_opt = 0, rc = 0, extra = -1, first = -1;
	struct lm_buf *opt = calloc((size_t)n + 1, sizeof *opt);
	bool any_req = false;
	if (opt == NULL)
		return lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory");
	rc = lm_buf_adds(body, "\"{\" space");
	/* Required pairs first, in the schema's order; the optional ones collected. */
	for (const cJSON *p = props != NULL ? props->child : NULL; p != NULL && rc == 0;
	     p = p->next) {
		if (!js_required(req, p->string)) {
			rc = js_pair(j, p, depth, &opt[n_opt++]);
			continue;
		}
		if ((rc = lm_buf_adds(body, any_req ? " \",\" space " : " ")) == 0)
			rc = js_pair(j, p, depth, body);
		any_req = true;
	}
	if (rc == 0)
		rc = js_extra(j, s, depth, &extra);
	if (rc == 0)
		rc = js_optional(j, opt, n_opt, extra, &first);
	if (rc == 0 && first >= 0)
		rc = any_req ? lm_buf_printf(body, " (\",\" space r%d)?", first)
			     : lm_buf_printf(body, " r%d?", first);
	if (rc == 0)
		rc = lm_buf_adds(body, " \"}\" space");
	for (int i = 0; i < n_opt; i++)
		lm_buf_fini(&opt[i]);
	free(opt);
	return rc;
}

/* The body for one type name. */
static int js_typed(struct js *j, const cJSON *s, const char *type, int depth, struct lm_buf *b)
{
	if (strcmp(type, "object") == 0)
		return js_object(j, s, depth, b);
	if (strcmp(type, "array") == 0)
		return js_array(j, s, depth, b);
	if (strcmp(type, "string") == 0)
		return js_string(j, s, b);
	if (strcmp(type, "number") == 0 || strcmp(type, "integer") == 0 ||
	    strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0)
		return lm_buf_adds(b, type);
	return js_fail(j, LM_EINVAL, "unknown type \"%.40s\"", type);
}

static int js_body(struct js *j, const cJSON *s, int depth, struct lm_buf *b)
{
	const cJSON *v;
	for (int i = 0; js_refused[i] != NULL; i++)
		if (cJSON_GetObjectItemCaseSensitive(s, js_refused[i]) != NULL)
			return js_fail(j, LM_EINVAL, "'%s' is not supported", js_refused[i]);
	if ((v = cJSON_GetObjectItemCaseSensitive(s, "const")) != NULL)
		return js_value_lit(j, b, v);
	if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum")) != NULL)
		return js_alternatives(j, v, "enum", false, depth, b);
	if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) != NULL)
		return js_alternatives(j, v, "anyOf", true, depth, b);
	if ((v = cJSON_GetObjectItemCaseSensitive(s, "oneOf")) != NULL)
		return js_alternatives(j, v, "oneOf", true, depth, b);
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
	if (cJSON_IsString(type))
		return js_typed(j, s, type->valuestring, depth, b);
	if (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0) {
		int rc = 0;
		for (const cJSON *t = type->child; t != NULL && rc == 0; t = t->next) {
			if (!cJSON_IsString(t))
				return js_fail(j, LM_EINVAL, "'type' must name types");
			if (t != type->child && (rc = lm_buf_adds(b, " | ")) != 0)
				break;
			rc = lm_buf_adds(b, "(");
			if (rc == 0)
				rc = js_typed(j, s, t->valuestring, depth, b);
			if (rc == 0)
				rc = lm_buf_adds(b, ")");
		}
		return rc;
	}
	if (type != NULL)
		return js_fail(j, LM_EINVAL, "'type' must be a name or an array of names");
	if (cJSON_GetObjectItemCaseSensitive(s, "properties") != NULL)
		return js_object(j, s, depth, b);
	if (cJSON_GetObjectItemCaseSensitive(s, "items") != NULL ||
	    cJSON_GetObjectItemCaseSensitive(s, "prefixItems") != NULL)
		return js_array(j, s, depth, b);
	return lm_buf_adds(b, "value");
}

/* The rule of schema s: its id, or a negative error. */
static int js_rule(struct js *j, const cJSON *s, int depth)
{
	if (depth > JS_MAX_DEPTH)
		return js_fail(j, LM_EINVAL, "the schema nests deeper than %d", JS_MAX_DEPTH);
	if (cJSON_IsFalse(s))
		return js_fail(j, LM_EINVAL, "the schema false admits no value");
	if (!cJSON_IsTrue(s) && !cJSON_IsObject(s))
		return js_fail(j, LM_EINVAL, "a schema must be an object or a boolean");
	if (cJSON_GetObjectItemCaseSensitive(s, "$ref") != NULL)
		return js_ref(j, s, depth);
	int id = j->next_id++;
	struct lm_buf b = {0};
	int rc = cJSON_IsTrue(s) ? lm_buf_adds(&b, "value") : js_body(j, s, depth, &b);
	if (rc == LM_ENOMEM || (rc == 0 && b.p == NULL))
		rc = lm_fail(j->d, LM_ENOMEM, "json_schema: out of memory");
	if (rc == 0)
		rc = js_emit(j, id, &b);
	lm_buf_fini(&b);
	return rc != 0 ? rc : id;
}

const char json_schema_prelude[] = JS_PRELUDE;

int json_schema_rules(const cJSON *schema, int *next, struct lm_buf *out, lm_diag *d)
{
	struct js j = {.out = out, .doc = schema, .d = d, .next_id = *next};
	size_t start = out->len;
	int root = js_rule(&j, schema, 0);
	if (root < 0) {
		out->len = start;
		if (out->p != NULL)
			out->p[start] = '\0';
		return root;
	}
	*next = j.next_id;
	return root;
}

int json_schema_gbnf(const cJSON *schema, struct lm_buf *out, lm_diag *d)
{
	struct js j = {.out = out, .doc = schema, .d = d};
	size_t start = out->len;
	int root = js_rule(&j, schema, 0);
	int rc = root < 0 ? root : lm_buf_printf(out, "root ::= r%d\n" JS_PRELUDE, root);
	if (rc != 0) {
		out->len = start;
		if (out->p != NULL)
			out->p[start] = '\0';
	}
	return rc;
}

/* ------------------------------------------------------------------ request fields */

/* GBNF for a schema given in a request field: 0 with *out malloc'd. */
static int js_schema_field(const cJSON *schema, char **out, lm_diag *d)
{
	struct lm_buf b = {0};
	int rc = json_schema_gbnf(schema, &b, d);
	if (rc == 0 && b.p == NULL)
		rc = lm_fail(d, LM_ENOMEM, "json_schema: out of memory");
	if (rc != 0) {
		lm_buf_fini(&b);
		return rc;
	}
	*out = b.p;
	return 0;
}

/* response_format: *out stays NULL for {"type": "text"}. */
static int js_response_format(const cJSON *rf, char **out, lm_diag *d)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
	if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
		return lm_fail(d, LM_EINVAL,
			       "'response_format' must be an object with a string "
			       "'type'");
	if (strcmp(type->valuestring, "text") == 0)
		return 0;
	if (strcmp(type->valuestring, "json_object") == 0) {
		/* llama-server also takes a schema here. */
		const cJSON *schema = cJSON_GetObjectItemCaseSensitive(rf, "schema");
		if (schema != NULL && !cJSON_IsNull(schema))
			return js_schema_field(schema, out, d);
		*out = strdup(json_object_gbnf);
		return *out != NULL ? 0 : lm_fail(d, LM_ENOMEM, "out of memory");
	}
	if (strcmp(type->valuestring, "json_schema") == 0) {
		const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
		const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
		if (!cJSON_IsObject(js))
			return lm_fail(d, LM_EINVAL,
				       "'response_format' of type json_schema needs "
				       "a 'json_schema' object");
		const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
		if (strict != NULL && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
			return lm_fail(d, LM_EINVAL,
				       "'response_format.json_schema.strict' must be "
				       "a boolean");
		/* Without a schema: any JSON object, as json_object. */
		if (schema == NULL || cJSON_IsNull(schema)) {
			*out = strdup(json_object_gbnf);
			return *out != NULL ? 0 : lm_fail(d, LM_ENOMEM, "out of memory");
		}
		return js_schema_field(schema, out, d);
	}
	return lm_fail(d, LM_EINVAL,
		       "'response_format' type \"%.40s\" is not supported (text, json_object, "
		       "json_schema)",
		       type->valuestring);
}

int json_schema_request(const cJSON *req, char **grammar, const char **param, lm_diag *d)
{
	const cJSON *rf = cJSON_GetObjectItemCaseSensitive(req, "response_format");
	const cJSON *js = cJSON_GetObjectItemCaseSensitive(req, "json_schema");
	const cJSON *gr = cJSON_GetObjectItemCaseSensitive(req, "grammar");
	int rc = 0, given = 0;
	*grammar = NULL;
	*param = NULL;
	if (rf != NULL && !cJSON_IsNull(rf)) {
		*param = "response_format";
		rc = js_response_format(rf, grammar, d);
		given += *grammar != NULL;
	}
	if (rc == 0 && js != NULL && !cJSON_IsNull(js)) {
		*param = "json_schema";
		rc = given++ > 0 ? 0 : js_schema_field(js, grammar, d);
	}
	if (rc == 0 && gr != NULL && !cJSON_IsNull(gr)) {
		*param = "grammar";
		if (!cJSON_IsString(gr))
			rc = lm_fail(d, LM_EINVAL, "'grammar' must be a string of GBNF");
		else if (given++ == 0 && (*grammar = strdup(gr->valuestring)) == NULL)
			rc = lm_fail(d, LM_ENOMEM, "out of memory");
	}
	if (rc == 0 && given > 1)
		rc = lm_fail(d, LM_EINVAL,
			     "give one of 'response_format' (json_object or "
			     "json_schema), 'json_schema' and 'grammar', not several");
	struct gbnf *g = NULL;
	if (rc == 0 && *grammar != NULL) {
		/* Compiled here to refuse a bad grammar with its reason; the last worker compiles
		 * it again for itself. */
		rc = gbnf_compile(*grammar, strlen(*grammar), &g, d);
		gbnf_free(g);
		if (rc == LM_EFORMAT || rc == LM_ERANGE)
			rc = LM_EINVAL; /* the client's to fix */
	}
	if (rc != 0) {
		free(*grammar);
		*grammar = NULL;
	}
	return rc;
}

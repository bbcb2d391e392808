/* toml_tree.c — the document tree of common/toml: tables with their hash index, arrays, the
 * accessors, key paths, and the messages a schema layer reports with. */
#include "common/format/toml.h"
#include "common/format/toml_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"

/* ---- fixed-size text used for key paths --------------------------------------------------- */

void tomli_fix_putc(struct tomli_fix *f, char c)
{
	if (f->len + 1 < f->cap)
		f->buf[f->len++] = c;
	else
		f->trunc = true;
	if (f->cap > 0)
		f->buf[f->len < f->cap ? f->len : f->cap - 1] = '\0';
}

void tomli_fix_puts(struct tomli_fix *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n && !f->trunc; i++)
		tomli_fix_putc(f, s[i]);
}

void tomli_fix_finish(struct tomli_fix *f)
{
	if (f->cap == 0)
		return;
	if (f->trunc && f->cap >= 4) {
		size_t at = f->cap - 4 < f->len ? f->cap - 4 : f->len;
		memcpy(f->buf + at, "...", 4);
		f->len = at + 3;
	}
	f->buf[f->len < f->cap ? f->len : f->cap - 1] = '\0';
}

bool tomli_is_bare(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

/* Appends one key of a path: bare when it can be, else a basic string. */
void tomli_fix_key(struct tomli_fix *f, const char *k, size_t n, bool dot)
{
	if (dot)
		tomli_fix_putc(f, '.');
	bool bare = n > 0;
	for (size_t i = 0; i < n && bare; i++)
		bare = tomli_is_bare(k[i]);
	if (bare) {
		tomli_fix_puts(f, k, n);
		return;
	}
	tomli_fix_putc(f, '"');
	for (size_t i = 0; i < n && !f->trunc; i++) {
		unsigned char c = (unsigned char)k[i];
		if (c == '"' || c == '\\') {
			tomli_fix_putc(f, '\\');
			tomli_fix_putc(f, (char)c);
		} else if (c < 0x20 || c == 0x7f) {
			char e[8];
			snprintf(e, sizeof e, "\\u%04X", c);
			tomli_fix_puts(f, e, 6);
		} else {
			tomli_fix_putc(f, (char)c);
		}
	}
	tomli_fix_putc(f, '"');
}

void tomli_fix_index(struct tomli_fix *f, size_t i)
{
	char e[32];
	int n = snprintf(e, sizeof e, "[%zu]", i);
	tomli_fix_puts(f, e, (size_t)n);
}

/* ---- the tree ----------------------------------------------------------------------------- */

static uint64_t toml_hash(uint64_t seed, const char *k, size_t n)
{
	/* FNV-1a from a per-document random basis, then a 64-bit finaliser: keys chosen to
	 * collide need the seed, which the input cannot know. */
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)k[i];
		h *= 0x100000001b3ull;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

struct toml_value *tomli_tab_find(const struct toml_value *tab, const char *k, size_t n)
{
	const struct toml_kv *kv = tab->u.tab.kv;
	if (tab->u.tab.icap == 0) {
		for (size_t i = 0; i < tab->u.tab.n; i++)
			if (kv[i].keylen == n && memcmp(kv[i].key, k, n) == 0)
				return kv[i].val;
		return NULL;
	}
	size_t mask = tab->u.tab.icap - 1;
	for (size_t s = toml_hash(tab->u.tab.seed, k, n) & mask;; s = (s + 1) & mask) {
		uint32_t e = tab->u.tab.index[s];
		if (e == 0)
			return NULL;
		const struct toml_kv *c = &kv[e - 1];
		if (c->keylen == n && memcmp(c->key, k, n) == 0)
			return c->val;
	}
}

static void tab_index_put(struct toml_value *tab, size_t i)
{
	const struct toml_kv *kv = &tab->u.tab.kv[i];
	size_t mask = tab->u.tab.icap - 1;
	size_t s = toml_hash(tab->u.tab.seed, kv->key, kv->keylen) & mask;
	while (tab->u.tab.index[s] != 0)
		s = (s + 1) & mask;
	tab->u.tab.index[s] = (uint32_t)(i + 1);
}

/* Adds key k -> v (the caller checked that k is absent). The key is copied. */
int tomli_tab_add(struct toml_value *tab, const char *k, size_t n, struct tomli_pos pos,
		  struct toml_value *v)
{
	if (tab->u.tab.n >= UINT32_MAX - 1)
		return LM_ENOMEM;
	if (tab->u.tab.n == tab->u.tab.cap) {
		struct toml_kv *kv =
			lm_grow(tab->u.tab.kv, &tab->u.tab.cap, tab->u.tab.n + 1, sizeof *kv, 4);
		if (kv == NULL)
			return LM_ENOMEM;
		tab->u.tab.kv = kv;
	}
	char *key = malloc(n + 1);
	if (key == NULL)
		return LM_ENOMEM;
	if (n > 0)
		memcpy(key, k, n);
	key[n] = '\0';
	size_t i = tab->u.tab.n++;
	tab->u.tab.kv[i] = (struct toml_kv){
		.key = key, .keylen = n, .line = pos.line, .col = pos.col, .val = v};
	v->parent = tab;
	v->key = key;
	v->keylen = n;

	if (tab->u.tab.n < TOML_INDEX_MIN)
		return 0;
	if (tab->u.tab.icap >= 2 * tab->u.tab.n) {
		tab_index_put(tab, i);
		return 0;
	}
	size_t icap = tab->u.tab.icap ? tab->u.tab.icap * 2 : 32;
	while (icap < 2 * tab->u.tab.n)
		icap *= 2;
	uint32_t *index = calloc(icap, sizeof *index);
	if (index == NULL)
		return LM_ENOMEM;
	free(tab->u.tab.index);
	tab->u.tab.index = index;
	tab->u.tab.icap = icap;
	for (size_t j = 0; j < tab->u.tab.n; j++)
		tab_index_put(tab, j);
	return 0;
}

int tomli_arr_push(struct toml_value *a, struct toml_value *v)
{
	if (a->u.arr.n == a->u.arr.cap) {
		struct toml_value **items =
			lm_grow(a->u.arr.items, &a->u.arr.cap, a->u.arr.n + 1, sizeof *items, 4);
		if (items == NULL)
			return LM_ENOMEM;
		a->u.arr.items = items;
	}
	v->parent = a;
	v->index = a->u.arr.n;
	a->u.arr.items[a->u.arr.n++] = v;
	return 0;
}

void toml_doc_fini(struct toml_doc *doc)
{
	if (doc == NULL)
		return;
	struct toml_value *v = doc->alloc;
	while (v != NULL) {
		struct toml_value *next = v->next_alloc;
		switch (v->type) {
		case TOML_STRING:
			free(v->u.str.s);
			break;
		case TOML_ARRAY:
			free(v->u.arr.items);
			break;
		case TOML_TABLE:
			for (size_t i = 0; i < v->u.tab.n; i++)
				free(v->u.tab.kv[i].key);
			free(v->u.tab.kv);
			free(v->u.tab.index);
			break;
		default:
			break;
		}
		free(v);
		v = next;
	}
	free(doc->name);
	memset(doc, 0, sizeof *doc);
}

const char *toml_type_name(enum toml_type t)
{
	switch (t) {
	case TOML_TABLE:
		return "table";
	case TOML_ARRAY:
		return "array";
	case TOML_STRING:
		return "string";
	case TOML_INTEGER:
		return "integer";
	case TOML_FLOAT:
		return "float";
	case TOML_BOOL:
		return "boolean";
	}
	return "value";
}

static const char *toml_article(enum toml_type t)
{
	return (t == TOML_ARRAY || t == TOML_INTEGER) ? "an" : "a";
}

const struct toml_value *toml_getn(const struct toml_value *table, const char *key, size_t len)
{
	if (table == NULL || table->type != TOML_TABLE || key == NULL)
		return NULL;
	return tomli_tab_find(table, key, len);
}

const struct toml_value *toml_get(const struct toml_value *table, const char *key)
{
	return key == NULL ? NULL : toml_getn(table, key, strlen(key));
}

size_t toml_len(const struct toml_value *v)
{
	if (v == NULL)
		return 0;
	if (v->type == TOML_TABLE)
		return v->u.tab.n;
	if (v->type == TOML_ARRAY)
		return v->u.arr.n;
	return 0;
}

const struct toml_value *toml_at(const struct toml_value *array, size_t i)
{
	if (array == NULL || array->type != TOML_ARRAY || i >= array->u.arr.n)
		return NULL;
	return array->u.arr.items[i];
}

const struct toml_kv *toml_entry(const struct toml_value *table, size_t i)
{
	if (table == NULL || table->type != TOML_TABLE || i >= table->u.tab.n)
		return NULL;
	return &table->u.tab.kv[i];
}

char *toml_path(const struct toml_value *v, char *buf, size_t cap)
{
	struct tomli_fix f = {.buf = buf, .cap = cap};
	if (cap > 0)
		buf[0] = '\0';
	/* Every value sits at most TOML_MAX_DEPTH + 1 levels below the root. */
	const struct toml_value *chain[TOML_MAX_DEPTH + 2];
	size_t n = 0;
	for (const struct toml_value *c = v; c != NULL && c->parent != NULL; c = c->parent) {
		if (n == sizeof chain / sizeof chain[0]) {
			f.trunc = true;
			break;
		}
		chain[n++] = c;
	}
	bool first = true;
	while (n > 0 && !f.trunc) {
		const struct toml_value *c = chain[--n];
		if (c->parent->type == TOML_ARRAY)
			tomli_fix_index(&f, c->index);
		else
			tomli_fix_key(&f, c->key, c->keylen, !first);
		first = false;
	}
	tomli_fix_finish(&f);
	return buf;
}

int toml_fail_at(lm_diag *d, int code, const struct toml_doc *doc, const struct toml_value *v,
		 const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	const char *name = doc != NULL && doc->name != NULL ? doc->name : "<toml>";
	if (v == NULL)
		return lm_fail(d, code, "%s: %s", name, msg);
	char path[160];
	toml_path(v, path, sizeof path);
	if (path[0] == '\0')
		return lm_fail(d, code, "%s:%d:%d: %s", name, (int)v->line, (int)v->col, msg);
	return lm_fail(d, code, "%s:%d:%d: %s: %s", name, (int)v->line, (int)v->col, path, msg);
}

int toml_fail_key(lm_diag *d, int code, const struct toml_doc *doc, const struct toml_kv *kv,
		  const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	const char *name = doc != NULL && doc->name != NULL ? doc->name : "<toml>";
	char path[160];
	toml_path(kv->val, path, sizeof path);
	return lm_fail(d, code, "%s:%d:%d: %s: %s", name, (int)kv->line, (int)kv->col, path, msg);
}

int toml_expect(const struct toml_doc *doc, const struct toml_value *v, enum toml_type t,
		lm_diag *d)
{
	if (v != NULL && v->type == t)
		return 0;
	if (v == NULL)
		return toml_fail_at(d, LM_ECONFIG, doc, v, "expected %s %s", toml_article(t),
				    toml_type_name(t));
	return toml_fail_at(d, LM_ECONFIG, doc, v, "expected %s %s, found %s", toml_article(t),
			    toml_type_name(t), toml_type_name(v->type));
}

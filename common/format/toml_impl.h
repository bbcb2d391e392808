/* toml_impl.h — what the two halves of common/toml share: the parser (toml.c) builds the tree
 * that toml_tree.c indexes, walks and reports from. Internal to common/toml*: the tomli_ prefix
 * marks symbols that are not part of the toml.h API. */
#ifndef LM_TOML_IMPL_H
#define LM_TOML_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/format/toml.h"

/* The table-definition state kept in toml_value.flags (see toml.c for the rules). */
enum {
	TOML_F_EXPLICIT = 1u << 0, /* table: defined by a [header] or an [[array]] element */
	TOML_F_DOTTED = 1u << 1,   /* table: defined by dotted keys in section `section` */
	TOML_F_INLINE = 1u << 2,   /* table: an inline table, sealed */
	TOML_F_AOT = 1u << 3,      /* array: made by [[headers]]; otherwise a static value */
};

/* Tables with at least this many keys get a hash index; smaller ones are scanned. */
#define TOML_INDEX_MIN 8

struct tomli_pos {
	int32_t line, col;
};

/* Fixed-size text that truncates instead of overflowing (key paths in messages). */
struct tomli_fix {
	char *buf;
	size_t cap, len;
	bool trunc;
};

void tomli_fix_putc(struct tomli_fix *f, char c);
void tomli_fix_puts(struct tomli_fix *f, const char *s, size_t n);
/* Ends the text, replacing its tail with "..." when something did not fit. */
void tomli_fix_finish(struct tomli_fix *f);
/* One key of a path, ".key" after the first when `dot`, quoted when it is not bare. */
void tomli_fix_key(struct tomli_fix *f, const char *k, size_t n, bool dot);
void tomli_fix_index(struct tomli_fix *f, size_t i);

/* A-Za-z0-9_- */
bool tomli_is_bare(char c);

/* The value under key k of a table, or NULL. */
struct toml_value *tomli_tab_find(const struct toml_value *tab, const char *k, size_t n);
/* Adds k -> v (k must be absent; it is copied; pos is the key's). LM_ENOMEM or 0. */
int tomli_tab_add(struct toml_value *tab, const char *k, size_t n, struct tomli_pos pos,
		  struct toml_value *v);
/* Appends v to an array. LM_ENOMEM or 0. */
int tomli_arr_push(struct toml_value *a, struct toml_value *v);

#endif

/* toml.h — a strict TOML 1.0 parser for mesh.toml.
 *
 * Debian 12 packages no C TOML library, so layermesh reads its configuration with this one. It
 * implements TOML 1.0.0 (https://toml.io/en/v1.0.0) except the four date and time types, which
 * mesh.toml has no use for: a date or time value is refused with an LM_EUNSUPPORTED error that
 * says so. Everything else follows the specification and its ABNF:
 *
 *   - comments; bare, quoted ("..." and '...') and dotted keys, with whitespace around the dots;
 *   - [table] and [[array.of.tables]] headers, implicit super-tables, the rules on defining a
 *     table once (by a header, by dotted keys, or inline) and on extending it;
 *   - basic strings with every escape (\b \t \n \f \r \" \\ \uXXXX \UXXXXXXXX; the code point must
 *     be a Unicode scalar value), literal strings, multi-line basic strings (line-ending
 *     backslash; a newline right after the opening delimiter is trimmed; CRLF reads as LF) and
 *     multi-line literal strings;
 *   - integers in decimal (sign, underscores between digits, no leading zeros) and 0x/0o/0b,
 *     checked against the int64 range; floats with fraction and/or exponent, underscores, and
 *     inf/nan with optional sign; a float that overflows binary64 is an error;
 *   - booleans; arrays (mixed types, trailing comma, newlines and comments inside); inline
 *     tables (single line, no trailing comma, sealed once closed).
 *
 * Strictness. The document must be valid UTF-8 (no overlong forms, no surrogates); a leading
 * byte order mark is skipped. Control characters other than tab are refused everywhere outside
 * escapes, including a carriage return not followed by a line feed. A duplicate key, a table
 * defined twice, a value where a table is expected, an integer that does not fit, a leading
 * zero, an unknown escape: each is an error.
 *
 * Errors. Every failure returns a negative LM_E* code (LM_EFORMAT for syntax and structure,
 * LM_ERANGE for out-of-range numbers, LM_EUNSUPPORTED for dates and times, LM_ENOMEM,
 * LM_EIO/LM_ENOENT from toml_parse_file) and fills the lm_diag with
 *     <name>:<line>:<column>: <key path>: <what is wrong>
 * for example `mesh.toml:12:9: worker[1].memory_limit: invalid integer '012': leading zeros are
 * not allowed`. Lines and columns count from 1; a column counts characters (code points), not
 * bytes, so a tab is one column.
 *
 * Untrusted input. Nesting (arrays, inline tables, tables under tables) is limited to
 * TOML_MAX_DEPTH levels, the input to TOML_MAX_INPUT bytes; tables index their keys with a
 * seeded hash and every pass is linear, so no input is quadratic; nothing the input holds can
 * crash the parser. Freeing is iterative.
 *
 * The tree. A document is a root table. Tables keep their keys in the order they were first
 * defined; arrays keep their elements in order. Every value remembers its parent, the key or
 * index it has there, and the line and column where it was written (for a table: its header's
 * key, or the first key that created it), so a schema layer can report positions and key paths
 * (toml_path, toml_fail_at). All memory belongs to the toml_doc and is freed by toml_doc_fini().
 */
#ifndef LM_TOML_H
#define LM_TOML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

/* Containers nested deeper than this are refused ("[a.b.c...]" with more parts, too). */
#define TOML_MAX_DEPTH 64
/* Documents larger than this are refused (mesh.toml is a few KiB). */
#define TOML_MAX_INPUT (16u << 20)

enum toml_type {
	TOML_TABLE = 1,
	TOML_ARRAY,
	TOML_STRING,
	TOML_INTEGER,
	TOML_FLOAT,
	TOML_BOOL,
};

struct toml_value;

/* One key of a table. */
struct toml_kv {
	char *key; /* NUL-terminated; may hold NULs of its own, keylen says */
	size_t keylen;
	int32_t line, col; /* where the key (its last part, when dotted) was written */
	struct toml_value *val;
};

struct toml_value {
	enum toml_type type;
	int32_t line, col; /* 1-based position where the value was written */

	/* Where the value sits: the root has no parent; a table entry has key (owned by the
	 * parent's toml_kv); an array element has index. */
	const struct toml_value *parent;
	const char *key;
	size_t keylen;
	size_t index;

	union {
		struct {
			char *s; /* NUL-terminated; "\u0000" makes len > strlen(s) */
			size_t len;
		} str;
		int64_t i;
		double f;
		bool b;
		struct {
			struct toml_value **items; /* [n] */
			size_t n, cap;
		} arr;
		struct {
			struct toml_kv *kv; /* [n], in definition order */
			size_t n, cap;
			uint32_t *index; /* [icap] hash slots: kv index + 1, 0 empty */
			size_t icap;     /* 0 (no index: small tables are scanned) or 2^k */
			uint64_t seed;   /* of the key hash, the document's */
		} tab;
	} u;

	/* The parser's bookkeeping; read-only to everybody else. */
	uint32_t flags;   /* TOML_F_* in toml.c */
	uint32_t section; /* for tables defined by dotted keys: the section that did it */
	int32_t depth;    /* containers between the root and this value */
	struct toml_value *next_alloc;
};

struct toml_doc {
	char *name;               /* the file name used in messages */
	struct toml_value *root;  /* a TOML_TABLE; NULL before a successful parse */
	struct toml_value *alloc; /* every value, for fini */
	uint64_t seed;            /* of the tables' key hash */
};

/* Parses len bytes of text (which need not be NUL-terminated); `name` prefixes messages. On
 * failure the doc holds nothing and needs no fini (a fini is harmless all the same). */
int toml_parse(struct toml_doc *doc, const char *name, const char *text, size_t len, lm_diag *d);
/* Reads and parses a file; messages are prefixed with `path`. */
int toml_parse_file(struct toml_doc *doc, const char *path, lm_diag *d);
/* Frees everything; harmless on a zeroed or already finished doc. */
void toml_doc_fini(struct toml_doc *doc);

/* "table", "array", "string", "integer", "float", "boolean". */
const char *toml_type_name(enum toml_type t);

/* The value under `key` in a table; NULL when absent or when `table` is not a table. */
const struct toml_value *toml_get(const struct toml_value *table, const char *key);
/* The same with a key of explicit length (keys may contain NUL). */
const struct toml_value *toml_getn(const struct toml_value *table, const char *key, size_t len);
/* Entries of a table, elements of an array, 0 for anything else (and NULL). */
size_t toml_len(const struct toml_value *v);
/* Element i of an array, or NULL. */
const struct toml_value *toml_at(const struct toml_value *array, size_t i);
/* Entry i of a table, in definition order, or NULL. */
const struct toml_kv *toml_entry(const struct toml_value *table, size_t i);

/* Writes the value's key path ("worker[1].memory_limit"; keys that are not bare are quoted,
 * `a."b.c"`; the root is "") into buf, truncating with "..." when it does not fit. Returns buf. */
char *toml_path(const struct toml_value *v, char *buf, size_t cap);

/* Formats "<doc name>:<line>:<col>: <path>: <message>" for value v (the path part is left out
 * for the root) into d and returns code: the one way a schema reports a bad value. */
int toml_fail_at(lm_diag *d, int code, const struct toml_doc *doc, const struct toml_value *v,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The same for a key of a table, at the key's own position: "... : model.slot: unknown key". */
int toml_fail_key(lm_diag *d, int code, const struct toml_doc *doc, const struct toml_kv *kv,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* 0 when v has type t; else LM_ECONFIG and "... : expected a string, found integer". */
int toml_expect(const struct toml_doc *doc, const struct toml_value *v, enum toml_type t,
		lm_diag *d);

#endif

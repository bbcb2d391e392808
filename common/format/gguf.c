/* gguf.c — the GGUF reader. See gguf.h for the format and the trust model.
 *
 * Parsing runs over a bounded cursor on the mapped file (or a caller's buffer). Every read checks
 * the remaining length first; every count is checked against what the remaining bytes could
 * possibly hold before anything is allocated for it, so a hostile 100-byte file cannot make us
 * allocate gigabytes. Strings are copied, NUL-terminated, into an arena owned by the file;
 * fixed-size array elements are left in place in the metadata mapping.
 *
 * After parsing, the part of the mapping past the metadata is unmapped: tensor bytes are mapped
 * only on request (gguf_map), a page-aligned region per run of selected tensors.
 *
 * A file opened without its vocabulary (GGUF_OPEN_NO_VOCAB) is not mapped for its metadata at
 * all: the cursor reads it with pread(2) through a small reused window, copying what it keeps
 * (fixed-size arrays included), and walks over the tokenizer's arrays. A mapped page once
 * touched is part of the resident set for good (VmHWM); bytes read into the window are not.
 */
#include "common/format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/buf.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

/* Nested arrays deeper than this are refused: no real file nests more than twice, and the
 * recursion must be bounded for hostile input. */
#define GGUF_MAX_ARRAY_DEPTH 8
/* A key or tensor name longer than this is refused (llama.cpp caps names at 64; keys are short). */
#define GGUF_MAX_NAME 65536

/* ---------------------------------------------------------------- arena */

struct gguf_arena_block {
	struct gguf_arena_block *next;
	size_t used, cap;
	max_align_t data[];
};

/* Blocks are 1 MiB, but the first of a small file's: every string and array entry the reader
 * copies takes at most 4 times its bytes in the file here (an empty string is 8 bytes there,
 * and a pointer, a length and a 16-byte slot here), so a file of a few KiB is not given a
 * megabyte (which a sanitizer build maps afresh for each), and a large one gets the blocks it
 * always got. */
#define GGUF_ARENA_BLOCK (1u << 20)

static void *gguf_arena_alloc(struct gguf_arena_block **head, size_t n, uint64_t file_size)
{
	struct gguf_arena_block *b = *head;
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (b == NULL || b->cap - b->used < n) {
		size_t cap = GGUF_ARENA_BLOCK;
		if (b == NULL && file_size < GGUF_ARENA_BLOCK / 4)
			cap = (size_t)file_size * 4 + 4096;
		if (cap < n)
			cap = n;
		b = malloc(sizeof *b + cap);
		if (b == NULL)
			return NULL;
		b->next = *head;
		b->used = 0;
		b->cap = cap;
		*head = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	return p;
}

static void gguf_arena_free(struct gguf_arena_block *b)
{
	while (b != NULL) {
		struct gguf_arena_block *next = b->next;
		free(b);
		b = next;
	}
}

/* ---------------------------------------------------------------- the file */

struct gguf_region {
	void *addr;
	size_t len;
};

struct gguf_file {
	char *path;
	int fd;              /* -1 for in-memory files */
	const uint8_t *base; /* metadata: the mapping (or buffer) from offset 0 */
	size_t base_len;     /* bytes of `base` still mapped (file: rounded to pages) */
	bool base_mapped;    /* base is our mmap (else the caller's buffer) */
	uint64_t file_size;
	uint64_t index_end; /* end of the tensor index: the fingerprint covers [0, index_end) */
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;
	uint64_t n_kv, n_tensors;
	struct gguf_kv *kvs;
	struct gguf_tensor *tensors;
	struct gguf_arena_block *arena;
	uint32_t *kv_hash;     /* open addressing: index + 1 into kvs, 0 = empty */
	uint32_t *tensor_hash; /* same for tensors */
	uint64_t hash_mask;    /* table size - 1 (shared by both tables) */
	struct gguf_region *regions;
	size_t n_regions, cap_regions;
	uint64_t mapped_bytes;
};

/* ---------------------------------------------------------------- name lookup
 *
 * Model binding looks up a handful of names per layer; with hostile counts a linear scan per
 * lookup would be quadratic, so keys and tensor names get an open-addressing table each. */

static uint64_t gguf_hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	while (*s != '\0') {
		h ^= (uint8_t)*s++;
		h *= 0x100000001b3ull;
	}
	return h;
}

static int gguf_build_hashes(struct gguf_file *f, lm_diag *d)
{
	uint64_t n = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors, size = 16;
	while (size < 2 * n)
		size *= 2;
	if (size > UINT32_MAX)
		return lm_fail(d, LM_ERANGE, "too many keys or tensors (%llu)",
			       (unsigned long long)n);
	f->kv_hash = calloc(size, sizeof *f->kv_hash);
	f->tensor_hash = calloc(size, sizeof *f->tensor_hash);
	if (f->kv_hash == NULL || f->tensor_hash == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory indexing %llu names",
			       (unsigned long long)n);
	f->hash_mask = size - 1;
	for (uint64_t i = 0; i < f->n_kv; i++) {
		uint64_t h = gguf_hash_str(f->kvs[i].key) & f->hash_mask;
		while (f->kv_hash[h] != 0)
			h = (h + 1) & f->hash_mask;
		f->kv_hash[h] = (uint32_t)(i + 1);
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		uint64_t h = gguf_hash_str(f->tensors[i].name) & f->hash_mask;
		while (f->tensor_hash[h] != 0)
			h = (h + 1) & f->hash_mask;
		f->tensor_hash[h] = (uint32_t)(i + 1);
	}
	return 0;
}

/* ---------------------------------------------------------------- the cursor */

struct gguf_cur {
	const uint8_t *p;
	uint64_t off, len;
	lm_diag *d;
	struct gguf_file *f;
	unsigned flags; /* GGUF_OPEN_* */
	/* The window of skipped arrays: file bytes [win_at, win_at + win_len) (gguf_far_u64). */
	uint8_t *win;
	uint64_t win_at;
	size_t win_len;
};

/* Bytes of the window a skipped array is read through. */
#define GGUF_WIN_BYTES (64u << 10)

static int gguf_need(struct gguf_cur *c, uint64_t n, const char *what)
{
	if (n > c->len - c->off)
		return lm_fail(c->d, LM_EFORMAT,
			       "offset %llu: %s needs %llu bytes but the file has %llu left",
			       (unsigned long long)c->off, what, (unsigned long long)n,
			       (unsigned long long)(c->len - c->off));
	return 0;
}

/* Copies the n bytes at the cursor (gguf_need checked them) to dst, without moving it: from
 * the mapping or buffer, or, when the file is read unmapped (c->p NULL, GGUF_OPEN_NO_VOCAB),
 * through the window, refilled with pread(2) from the cursor on. */
static int gguf_copy(struct gguf_cur *c, void *dst, uint64_t n, const char *what)
{
	if (c->p != NULL) {
		memcpy(dst, c->p + c->off, (size_t)n);
		return 0;
	}
	if (c->win == NULL && (c->win = malloc(GGUF_WIN_BYTES)) == NULL)
		return lm_fail(c->d, LM_ENOMEM, "%s: out of memory for a read window", what);
	uint64_t at = c->off, done = 0;
	while (done < n) { /* each pass copies at least one byte or fails */
		if (at < c->win_at || at >= c->win_at + c->win_len) {
			uint64_t want = c->len - at < GGUF_WIN_BYTES ? c->len - at : GGUF_WIN_BYTES;
			ssize_t r;
			do
				r = pread(c->f->fd, c->win, (size_t)want, (off_t)at);
			while (r < 0 && errno == EINTR);
			if (r <= 0)
				return lm_fail(c->d, r < 0 ? lm_err_from_errno(errno) : LM_EIO,
					       "offset %llu: %s: read: %s", (unsigned long long)at,
					       what,
					       r < 0 ? strerror(errno) : "the file got shorter");
			c->win_at = at;
			c->win_len = (size_t)r;
		}
		uint64_t k = c->win_at + c->win_len - at;
		k = k < n - done ? k : n - done;
		memcpy((uint8_t *)dst + done, c->win + (at - c->win_at), (size_t)k);
		done += k;
		at += k;
	}
	return 0;
}

static int gguf_read(struct gguf_cur *c, void *dst, uint64_t n, const char *what)
{
	int rc = gguf_need(c, n, what);
	if (rc != 0 || (rc = gguf_copy(c, dst, n, what)) != 0)
		return rc;
	c->off += n;
	return 0;
}

static int gguf_read_u32(struct gguf_cur *c, uint32_t *v, const char *what)
{
	return gguf_read(c, v, 4, what);
}

static int gguf_read_u64(struct gguf_cur *c, uint64_t *v, const char *what)
{
	return gguf_read(c, v, 8, what);
}

/* Reads a GGUF string into an arena copy with a terminating NUL. */
static int gguf_read_str(struct gguf_cur *c, const char **out, uint64_t *out_len, uint64_t max,
			 const char *what)
{
	uint64_t at = c->off, len;
	int rc = gguf_read_u64(c, &len, what);
	if (rc != 0)
		return rc;
	if (len > max)
		return lm_fail(c->d, LM_EFORMAT,
			       "offset %llu: %s: length %llu exceeds the limit %llu",
			       (unsigned long long)at, what, (unsigned long long)len,
			       (unsigned long long)max);
	if ((rc = gguf_need(c, len, what)) != 0)
		return rc;
	char *s = gguf_arena_alloc(&c->f->arena, len + 1, c->f->file_size);
	if (s == NULL)
		return lm_fail(c->d, LM_ENOMEM, "offset %llu: %s: out of memory for %llu bytes",
			       (unsigned long long)at, what, (unsigned long long)len);
	if ((rc = gguf_copy(c, s, len, what)) != 0)
		return rc;
	s[len] = '\0';
	c->off += len;
	*out = s;
	if (out_len != NULL)
		*out_len = len;
	return 0;
}

static const char *const gguf_type_names[GGUF_TYPE_COUNT] = {
	"uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
	"bool",  "string", "array",  "uint64", "int64",  "float64",
};

const char *gguf_type_name(uint32_t type)
{
	return type < GGUF_TYPE_COUNT ? gguf_type_names[type] : "?";
}

size_t gguf_value_size(uint32_t type)
{
	switch (type) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_BOOL:
		return 1;
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_INT16:
		return 2;
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_FLOAT32:
		return 4;
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64:
	case GGUF_TYPE_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

static int gguf_read_arr(struct gguf_cur *c, struct gguf_arr *a, int depth, const char *key);

/* A scalar value of `type` into kv (STRING included; ARRAY handled by the caller). */
static int gguf_read_scalar(struct gguf_cur *c, uint32_t type, struct gguf_kv *kv, const char *key)
{
	uint8_t b[8];
	uint64_t at = c->off;
	int rc;

	switch (type) {
	case GGUF_TYPE_UINT8:
		rc = gguf_read(c, b, 1, key);
		kv->v.u64 = b[0];
		return rc;
	case GGUF_TYPE_INT8:
		rc = gguf_read(c, b, 1, key);
		kv->v.i64 = (int8_t)b[0];
		return rc;
	case GGUF_TYPE_UINT16: {
		uint16_t v = 0;
		rc = gguf_read(c, &v, 2, key);
		kv->v.u64 = v;
		return rc;
	}
	case GGUF_TYPE_INT16: {
		int16_t v = 0;
		rc = gguf_read(c, &v, 2, key);
		kv->v.i64 = v;
		return rc;
	}
	case GGUF_TYPE_UINT32: {
		uint32_t v = 0;
		rc = gguf_read(c, &v, 4, key);
		kv->v.u64 = v;
		return rc;
	}
	case GGUF_TYPE_INT32: {
		int32_t v = 0;
		rc = gguf_read(c, &v, 4, key);
		kv->v.i64 = v;
		return rc;
	}
	case GGUF_TYPE_FLOAT32: {
		float v = 0;
		rc = gguf_read(c, &v, 4, key);
		kv->v.f64 = v;
		return rc;
	}
	case GGUF_TYPE_BOOL:
		if ((rc = gguf_read(c, b, 1, key)) != 0)
			return rc;
		if (b[0] > 1)
			return lm_fail(c->d, LM_EFORMAT,
				       "offset %llu: %s: bool value %u is not 0 or 1",
				       (unsigned long long)at, key, b[0]);
		kv->v.b = b[0] != 0;
		return 0;
	case GGUF_TYPE_UINT64:
		return gguf_read(c, &kv->v.u64, 8, key);
	case GGUF_TYPE_INT64:
		return gguf_read(c, &kv->v.i64, 8, key);
	case GGUF_TYPE_FLOAT64:
		return gguf_read(c, &kv->v.f64, 8, key);
	case GGUF_TYPE_STRING:
		return gguf_read_str(c, &kv->v.str.ptr, &kv->v.str.len, UINT64_MAX, key);
	default:
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: %s: unknown value type %u",
			       (unsigned long long)at, key, type);
	}
}

/* An array's head: its element type and count, at most GGUF_MAX_ARRAY_DEPTH deep. */
static int gguf_arr_head(struct gguf_cur *c, int depth, const char *key, uint32_t *type,
			 uint64_t *n)
{
	uint64_t at = c->off;
	int rc;
	if (depth > GGUF_MAX_ARRAY_DEPTH)
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: %s: arrays nested deeper than %d",
			       (unsigned long long)at, key, GGUF_MAX_ARRAY_DEPTH);
	if ((rc = gguf_read_u32(c, type, key)) != 0 || (rc = gguf_read_u64(c, n, key)) != 0)
		return rc;
	if (*type >= GGUF_TYPE_COUNT)
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: %s: unknown array element type %u",
			       (unsigned long long)at, key, *type);
	return 0;
}

/* The body of an array not read (GGUF_OPEN_NO_VOCAB), after its type and count: the same
 * bounds as gguf_read_arr; only the string lengths and nested arrays' heads are read. */
static int gguf_skip_arr(struct gguf_cur *c, uint32_t type, uint64_t n, int depth, const char *key)
{
	uint64_t at = c->off - 12, left = c->len - c->off;
	uint64_t esize = gguf_value_size(type);
	int rc;
	if (esize != 0) {
		if (n > left / esize)
			return lm_fail(c->d, LM_EFORMAT,
				       "offset %llu: %s: array of %llu %s elements runs past the "
				       "end of the file",
				       (unsigned long long)at, key, (unsigned long long)n,
				       gguf_type_name(type));
		c->off += n * esize;
		return 0;
	}
	if (n > left / (type == GGUF_TYPE_STRING ? 8 : 12))
		return lm_fail(c->d, LM_EFORMAT,
			       "offset %llu: %s: array of %llu %s runs past the end of the file",
			       (unsigned long long)at, key, (unsigned long long)n,
			       type == GGUF_TYPE_STRING ? "strings" : "arrays");
	for (uint64_t i = 0; i < n; i++) {
		uint32_t et;
		uint64_t en;
		if (type == GGUF_TYPE_STRING) {
			if ((rc = gguf_read_u64(c, &en, key)) != 0 ||
			    (rc = gguf_need(c, en, key)) != 0)
				return rc;
			c->off += en;
		} else if ((rc = gguf_arr_head(c, depth + 1, key, &et, &en)) != 0 ||
			   (rc = gguf_skip_arr(c, et, en, depth + 1, key)) != 0) {
			return rc;
		}
	}
	return 0;
}

/* Whether the value of `key` is walked over rather than read (GGUF_OPEN_NO_VOCAB). */
static bool gguf_skips(const struct gguf_cur *c, const char *key)
{
	return (c->flags & GGUF_OPEN_NO_VOCAB) != 0 && strncmp(key, "tokenizer.", 10) == 0;
}

/* An array: element type, count, elements. Counts are checked against the bytes left before
 * allocating: a string takes at least 8 bytes, a nested array at least 12. */
static int gguf_read_arr(struct gguf_cur *c, struct gguf_arr *a, int depth, const char *key)
{
	uint64_t at = c->off;
	uint32_t type;
	uint64_t n;
	int rc;

	memset(a, 0, sizeof *a);
	if ((rc = gguf_arr_head(c, depth, key, &type, &n)) != 0)
		return rc;
	a->type = type;
	a->n = n;
	if (depth == 1 && gguf_skips(c, key)) {
		a->skipped = true;
		return gguf_skip_arr(c, type, n, depth, key);
	}
	uint64_t left = c->len - c->off;
	uint64_t esize = gguf_value_size(type);
	if (esize != 0) {
		if (n > left / esize)
			return lm_fail(
				c->d, LM_EFORMAT,
				"offset %llu: %s: array of %llu %s elements runs past the end "
				"of the file",
				(unsigned long long)at, key, (unsigned long long)n,
				gguf_type_name(type));
		if (c->p != NULL) {
			a->data = c->p + c->off;
		} else { /* read unmapped: the elements are copied, as strings are */
			uint8_t *copy = gguf_arena_alloc(&c->f->arena, n * esize, c->f->file_size);
			if (copy == NULL)
				return lm_fail(c->d, LM_ENOMEM,
					       "%s: out of memory for %llu elements", key,
					       (unsigned long long)n);
			if ((rc = gguf_copy(c, copy, n * esize, key)) != 0)
				return rc;
			a->data = copy;
		}
		if (type == GGUF_TYPE_BOOL)
			for (uint64_t i = 0; i < n; i++)
				if (a->data[i] > 1)
					return lm_fail(
						c->d, LM_EFORMAT,
						"offset %llu: %s[%llu]: bool value %u is not 0 "
						"or 1",
						(unsigned long long)(c->off + i), key,
						(unsigned long long)i, a->data[i]);
		c->off += n * esize;
		return 0;
	}
	if (type == GGUF_TYPE_STRING) {
		if (n > left / 8)
			return lm_fail(
				c->d, LM_EFORMAT,
				"offset %llu: %s: array of %llu strings runs past the end of "
				"the file",
				(unsigned long long)at, key, (unsigned long long)n);
		const char **strs =
			gguf_arena_alloc(&c->f->arena, n * sizeof *strs, c->f->file_size);
		uint64_t *lens = gguf_arena_alloc(&c->f->arena, n * sizeof *lens, c->f->file_size);
		if (strs == NULL || lens == NULL)
			return lm_fail(c->d, LM_ENOMEM, "%s: out of memory for %llu strings", key,
				       (unsigned long long)n);
		for (uint64_t i = 0; i < n; i++)
			if ((rc = gguf_read_str(c, &strs[i], &lens[i], UINT64_MAX, key)) != 0)
				return rc;
		a->strs = strs;
		a->str_lens = lens;
		return 0;
	}
	/* GGUF_TYPE_ARRAY */
	if (n > left / 12)
		return lm_fail(
			c->d, LM_EFORMAT,
			"offset %llu: %s: array of %llu arrays runs past the end of the file",
			(unsigned long long)at, key, (unsigned long long)n);
	struct gguf_arr *arrs = gguf_arena_alloc(&c->f->arena, n * sizeof *arrs, c->f->file_size);
	if (arrs == NULL)
		return lm_fail(c->d, LM_ENOMEM, "%s: out of memory for %llu arrays", key,
			       (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++)
		if ((rc = gguf_read_arr(c, &arrs[i], depth + 1, key)) != 0)
			return rc;
	a->arrs = arrs;
	return 0;
}

static int gguf_cmp_kv_key(const void *a, const void *b)
{
	const struct gguf_kv *x = *(const struct gguf_kv *const *)a;
	const struct gguf_kv *y = *(const struct gguf_kv *const *)b;
	return strcmp(x->key, y->key);
}

/* Sorting keeps this O(n log n): a hostile file may hold hundreds of thousands of keys. */
static int gguf_check_unique_keys(lm_diag *d, const struct gguf_kv *kvs, uint64_t n)
{
	int rc = 0;
	if (n < 2)
		return 0;
	const struct gguf_kv **idx = malloc(n * sizeof *idx);
	if (idx == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory checking %llu metadata keys",
			       (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++)
		idx[i] = &kvs[i];
	qsort(idx, n, sizeof *idx, gguf_cmp_kv_key);
	for (uint64_t i = 1; i < n && rc == 0; i++)
		if (strcmp(idx[i - 1]->key, idx[i]->key) == 0)
			rc = lm_fail(d, LM_EFORMAT, "offset %llu: duplicate metadata key '%s'",
				     (unsigned long long)(idx[i - 1]->offset > idx[i]->offset
								  ? idx[i - 1]->offset
								  : idx[i]->offset),
				     idx[i]->key);
	free(idx);
	return rc;
}

static int gguf_parse_kvs(struct gguf_cur *c, struct gguf_file *f)
{
	int rc;

	/* A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes. */
	if (f->n_kv > (c->len - c->off) / 13)
		return lm_fail(c->d, LM_EFORMAT,
			       "offset 16: n_kv %llu is more than the file could hold",
			       (unsigned long long)f->n_kv);
	f->kvs = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kvs);
	if (f->kvs == NULL)
		return lm_fail(c->d, LM_ENOMEM, "out of memory for %llu metadata keys",
			       (unsigned long long)f->n_kv);
	for (uint64_t i = 0; i < f->n_kv; i++) {
		struct gguf_kv *kv = &f->kvs[i];
		uint32_t type;
		kv->offset = c->off;
		if ((rc = gguf_read_str(c, &kv->key, NULL, GGUF_MAX_NAME, "metadata key")) != 0)
			return rc;
		if ((rc = gguf_read_u32(c, &type, kv->key)) != 0)
			return rc;
		if (type >= GGUF_TYPE_COUNT)
			return lm_fail(c->d, LM_EFORMAT, "offset %llu: %s: unknown value type %u",
				       (unsigned long long)(c->off - 4), kv->key, type);
		kv->type = type;
		if (type == GGUF_TYPE_ARRAY)
			rc = gguf_read_arr(c, &kv->v.arr, 1, kv->key);
		else
			rc = gguf_read_scalar(c, type, kv, kv->key);
		if (rc != 0)
			return rc;
	}
	return gguf_check_unique_keys(c->d, f->kvs, f->n_kv);
}

static int32_t gguf_layer_of(const char *name)
{
	if (strncmp(name, "blk.", 4) != 0)
		return -1;
	const char *p = name + 4;
	int32_t v = 0;
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9') {
		if (v > 100000000)
			return -1;
		v = v * 10 + (*p - '0');
		p++;
	}
	return *p == '.' ? v : -1;
}

static int gguf_parse_tensor(struct gguf_cur *c, struct gguf_file *f, struct gguf_tensor *t)
{
	uint64_t at = c->off;
	uint32_t type;
	int rc;

	if ((rc = gguf_read_str(c, &t->name, NULL, GGUF_MAX_NAME, "tensor name")) != 0)
		return rc;
	if ((rc = gguf_read_u32(c, &t->n_dims, t->name)) != 0)
		return rc;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: tensor '%s': n_dims %u not in 1..%d",
			       (unsigned long long)at, t->name, t->n_dims, GGUF_MAX_DIMS);
	uint64_t nelem = 1;
	for (int j = 0; j < GGUF_MAX_DIMS; j++) {
		uint64_t ne = 1;
		if ((uint32_t)j < t->n_dims && (rc = gguf_read_u64(c, &ne, t->name)) != 0)
			return rc;
		if (ne > (uint64_t)INT64_MAX || (ne != 0 && nelem > (uint64_t)INT64_MAX / ne))
			return lm_fail(
				c->d, LM_EFORMAT,
				"offset %llu: tensor '%s': dimension %d (%llu) overflows the "
				"element count",
				(unsigned long long)at, t->name, j, (unsigned long long)ne);
		t->ne[j] = (int64_t)ne;
		nelem *= ne;
	}
	if ((rc = gguf_read_u32(c, &type, t->name)) != 0)
		return rc;
	const struct lm_dtype_info *info = lm_dtype_in_gguf(type) ? lm_dtype_info(type) : NULL;
	if (info == NULL)
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: tensor '%s': unknown type %u",
			       (unsigned long long)at, t->name, type);
	t->type = (enum lm_dtype)type;
	if (t->ne[0] % info->blck != 0)
		return lm_fail(
			c->d, LM_EFORMAT,
			"offset %llu: tensor '%s': row of %lld elements is not a multiple of "
			"the %s block size %u",
			(unsigned long long)at, t->name, (long long)t->ne[0], info->name,
			info->blck);
	uint64_t row;
	if (lm_dtype_row_bytes(type, (uint64_t)t->ne[0], &row) != 0)
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: tensor '%s': row size overflows",
			       (unsigned long long)at, t->name);
	uint64_t rows = t->ne[0] == 0 ? 0 : nelem / (uint64_t)t->ne[0];
	if (rows != 0 && row > UINT64_MAX / rows)
		return lm_fail(c->d, LM_EFORMAT, "offset %llu: tensor '%s': size overflows",
			       (unsigned long long)at, t->name);
	t->size = row * rows;
	if ((rc = gguf_read_u64(c, &t->offset, t->name)) != 0)
		return rc;
	t->layer = gguf_layer_of(t->name);
	(void)f;
	return 0;
}

static int gguf_cmp_off(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int gguf_cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Offsets aligned, data inside the file, no two tensors overlapping, names unique. */
static int gguf_check_tensors(struct gguf_cur *c, struct gguf_file *f)
{
	uint64_t data_size = f->file_size - f->data_offset;
	const struct gguf_tensor **by_off = NULL;
	int rc = 0;

	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		if (t->offset % f->alignment != 0)
			return lm_fail(
				c->d, LM_EFORMAT,
				"tensor '%s': offset %llu is not a multiple of the alignment %u",
				t->name, (unsigned long long)t->offset, f->alignment);
		if (t->offset > data_size || t->size > data_size - t->offset)
			return lm_fail(
				c->d, LM_EFORMAT,
				"tensor '%s': bytes [%llu, %llu) of the data section run past "
				"the end of the file (data section is %llu bytes at offset %llu)",
				t->name, (unsigned long long)t->offset,
				(unsigned long long)t->offset + t->size,
				(unsigned long long)data_size, (unsigned long long)f->data_offset);
	}
	if (f->n_tensors < 2)
		return 0;
	by_off = malloc(f->n_tensors * sizeof *by_off);
	if (by_off == NULL)
		return lm_fail(c->d, LM_ENOMEM, "out of memory checking %llu tensors",
			       (unsigned long long)f->n_tensors);
	for (uint64_t i = 0; i < f->n_tensors; i++)
		by_off[i] = &f->tensors[i];
	qsort(by_off, f->n_tensors, sizeof *by_off, gguf_cmp_off);
	for (uint64_t i = 1; i < f->n_tensors && rc == 0; i++) {
		const struct gguf_tensor *p = by_off[i - 1], *t = by_off[i];
		if (p->size != 0 && t->size != 0 && p->offset + p->size > t->offset)
			rc = lm_fail(c->d, LM_EFORMAT,
				     "tensors '%s' and '%s' overlap at offset %llu", p->name,
				     t->name, (unsigned long long)t->offset);
	}
	free(by_off);
	if (rc != 0)
		return rc;
	/* Duplicate names, by sorting: O(n log n) even for hostile tensor counts. */
	const char **names = malloc(f->n_tensors * sizeof *names);
	if (names == NULL)
		return lm_fail(c->d, LM_ENOMEM, "out of memory checking tensor names");
	for (uint64_t i = 0; i < f->n_tensors; i++)
		names[i] = f->tensors[i].name;
	qsort(names, f->n_tensors, sizeof *names, gguf_cmp_name);
	for (uint64_t i = 1; i < f->n_tensors && rc == 0; i++)
		if (strcmp(names[i - 1], names[i]) == 0)
			rc = lm_fail(c->d, LM_EFORMAT, "duplicate tensor name '%s'", names[i]);
	free(names);
	return rc;
}

static int gguf_parse_cur(struct gguf_file *f, struct gguf_cur *c, lm_diag *d);

static int gguf_parse(struct gguf_file *f, unsigned flags, lm_diag *d)
{
	struct gguf_cur c = {
		.p = f->base, .off = 0, .len = f->file_size, .d = d, .f = f, .flags = flags};
	int rc = gguf_parse_cur(f, &c, d);
	free(c.win);
	return rc;
}

static int gguf_parse_cur(struct gguf_file *f, struct gguf_cur *c, lm_diag *d)
{
	char magic[4];
	int rc;

	if ((rc = gguf_read(c, magic, 4, "magic")) != 0)
		return rc;
	if (memcmp(magic, GGUF_MAGIC, 4) != 0)
		return lm_fail(d, LM_EFORMAT, "offset 0: bad magic (not a GGUF file)");
	if ((rc = gguf_read_u32(c, &f->version, "version")) != 0)
		return rc;
	if (f->version != 2 && f->version != 3)
		return lm_fail(d, LM_EFORMAT, "offset 4: GGUF version %u is not supported (2 or 3)",
			       f->version);
	if ((rc = gguf_read_u64(c, &f->n_tensors, "n_tensors")) != 0 ||
	    (rc = gguf_read_u64(c, &f->n_kv, "n_kv")) != 0)
		return rc;
	if ((rc = gguf_parse_kvs(c, f)) != 0)
		return rc;

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	const struct gguf_kv *al = NULL; /* the hash index is built after parsing */
	for (uint64_t i = 0; i < f->n_kv && al == NULL; i++)
		if (strcmp(f->kvs[i].key, "general.alignment") == 0)
			al = &f->kvs[i];
	if (al != NULL) {
		if (al->type != GGUF_TYPE_UINT32 || al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)))
			return lm_fail(
				d, LM_EFORMAT,
				"offset %llu: general.alignment must be a power-of-two uint32",
				(unsigned long long)al->offset);
		f->alignment = (uint32_t)al->v.u64;
	}

	/* A tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes. */
	if (f->n_tensors > (c->len - c->off) / 32)
		return lm_fail(d, LM_EFORMAT,
			       "offset 8: n_tensors %llu is more than the file could hold",
			       (unsigned long long)f->n_tensors);
	f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
	if (f->tensors == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory for %llu tensors",
			       (unsigned long long)f->n_tensors);
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if ((rc = gguf_parse_tensor(c, f, &f->tensors[i])) != 0)
			return rc;
	f->index_end = c->off;
	uint64_t pad = (f->alignment - c->off % f->alignment) % f->alignment;
	if (f->n_tensors > 0 && pad > c->len - c->off)
		return lm_fail(d, LM_EFORMAT,
			       "offset %llu: the file ends before the aligned data section",
			       (unsigned long long)c->off);
	f->data_offset = c->off + (pad <= c->len - c->off ? pad : c->len - c->off);
	if ((rc = gguf_check_tensors(c, f)) != 0)
		return rc;
	return gguf_build_hashes(f, d);
}

/* ---------------------------------------------------------------- open and close */

static int gguf_new(const char *path, gguf_file **out, lm_diag *d)
{
	gguf_file *f = calloc(1, sizeof *f);
	if (f == NULL || (f->path = strdup(path)) == NULL) {
		free(f);
		return lm_fail(d, LM_ENOMEM, "%s: out of memory", path);
	}
	f->fd = -1;
	*out = f;
	return 0;
}

int gguf_open(const char *path, gguf_file **out, lm_diag *d)
{
	return gguf_open_with(path, 0, out, d);
}

int gguf_open_with(const char *path, unsigned flags, gguf_file **out, lm_diag *d)
{
	gguf_file *f = NULL;
	struct stat st;
	int rc;

	*out = NULL;
	if ((rc = gguf_new(path, &f, d)) != 0)
		return rc;
	/* Without blocking: a FIFO or a device at the path is refused below, not waited on (for
	 * a regular file O_NONBLOCK changes nothing). */
	f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (f->fd < 0) {
		rc = lm_fail(d, lm_err_from_errno(errno), "%s: cannot open: %s", path,
			     strerror(errno));
		goto fail;
	}
	if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = lm_fail(d, LM_EIO, "%s: not a regular file", path);
		goto fail;
	}
	f->file_size = (uint64_t)st.st_size;
	if (f->file_size < 24) {
		rc = lm_fail(d, LM_EFORMAT, "%s: %llu bytes is too small for a GGUF header", path,
			     (unsigned long long)f->file_size);
		goto fail;
	}
	if (f->file_size > SIZE_MAX) {
		rc = lm_fail(d, LM_ERANGE, "%s: too large to map", path);
		goto fail;
	}
	/* Without the vocabulary the metadata is read, not mapped: a first touch of a mapped page
	 * would map the whole 2 MiB folio the page cache may hold it in, and every page touched
	 * stays in the resident set (VmHWM). */
	if ((flags & GGUF_OPEN_NO_VOCAB) == 0) {
		void *m = mmap(NULL, (size_t)f->file_size, PROT_READ, MAP_PRIVATE, f->fd, 0);
		if (m == MAP_FAILED) {
			rc = lm_fail(d, lm_err_from_errno(errno), "%s: mmap: %s", path,
				     strerror(errno));
			goto fail;
		}
		f->base = m;
		f->base_len = (size_t)f->file_size;
		f->base_mapped = true;
	}
	if ((rc = gguf_parse(f, flags, d)) != 0) {
		lm_diag_prefix(d, "%s", path);
		goto fail;
	}
	/* Keep only the metadata pages; tensor bytes are mapped on request. */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t keep = ((size_t)f->index_end + page - 1) / page * page;
	if (f->base_mapped && keep < f->base_len) {
		munmap((uint8_t *)f->base + keep, f->base_len - keep);
		f->base_len = keep;
	}
	*out = f;
	return 0;
fail:
	gguf_close(f);
	return rc;
}

int gguf_open_mem(const void *buf, size_t len, gguf_file **out, lm_diag *d)
{
	gguf_file *f = NULL;
	int rc;

	*out = NULL;
	if ((rc = gguf_new("<memory>", &f, d)) != 0)
		return rc;
	f->base = buf;
	f->base_len = len;
	f->file_size = len;
	if (len < 24) {
		rc = lm_fail(d, LM_EFORMAT, "%zu bytes is too small for a GGUF header", len);
		goto fail;
	}
	if ((rc = gguf_parse(f, 0, d)) != 0)
		goto fail;
	*out = f;
	return 0;
fail:
	gguf_close(f);
	return rc;
}

void gguf_close(gguf_file *f)
{
	if (f == NULL)
		return;
	for (size_t i = 0; i < f->n_regions; i++)
		munmap(f->regions[i].addr, f->regions[i].len);
	free(f->regions);
	if (f->base_mapped)
		munmap((void *)f->base, f->base_len);
	if (f->fd >= 0)
		close(f->fd);
	gguf_arena_free(f->arena);
	free(f->kv_hash);
	free(f->tensor_hash);
	free(f->kvs);
	free(f->tensors);
	free(f->path);
	free(f);
}

uint32_t gguf_version(const gguf_file *f)
{
	return f->version;
}

uint32_t gguf_alignment(const gguf_file *f)
{
	return f->alignment;
}

uint64_t gguf_data_offset(const gguf_file *f)
{
	return f->data_offset;
}

uint64_t gguf_file_size(const gguf_file *f)
{
	return f->file_size;
}

const char *gguf_path(const gguf_file *f)
{
	return f->path;
}

/* ---------------------------------------------------------------- metadata */

uint64_t gguf_n_kv(const gguf_file *f)
{
	return f->n_kv;
}

const struct gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i)
{
	return i < f->n_kv ? &f->kvs[i] : NULL;
}

const struct gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
	for (uint64_t h = gguf_hash_str(key) & f->hash_mask; f->kv_hash[h] != 0;
	     h = (h + 1) & f->hash_mask)
		if (strcmp(f->kvs[f->kv_hash[h] - 1].key, key) == 0)
			return &f->kvs[f->kv_hash[h] - 1];
	return NULL;
}

static bool gguf_is_unsigned(uint32_t t)
{
	return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
	       t == GGUF_TYPE_UINT64;
}

static bool gguf_is_signed(uint32_t t)
{
	return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
	       t == GGUF_TYPE_INT64;
}

static int gguf_wrong_type(const struct gguf_kv *kv, const char *want, lm_diag *d)
{
	return lm_fail(d, LM_EFORMAT, "metadata '%s' (offset %llu) is %s, expected %s", kv->key,
		       (unsigned long long)kv->offset, gguf_type_name(kv->type), want);
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (gguf_is_unsigned(kv->type)) {
		*out = kv->v.u64;
		return 0;
	}
	if (gguf_is_signed(kv->type) && kv->v.i64 >= 0) {
		*out = (uint64_t)kv->v.i64;
		return 0;
	}
	return gguf_wrong_type(kv, "a non-negative integer", d);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, lm_diag *d)
{
	uint64_t v;
	int rc = gguf_get_u64(f, key, &v, d);
	if (rc != 0)
		return rc;
	if (v > UINT32_MAX)
		return lm_fail(d, LM_EFORMAT, "metadata '%s' = %llu does not fit in 32 bits", key,
			       (unsigned long long)v);
	*out = (uint32_t)v;
	return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (gguf_is_signed(kv->type)) {
		*out = kv->v.i64;
		return 0;
	}
	if (gguf_is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX) {
		*out = (int64_t)kv->v.u64;
		return 0;
	}
	return gguf_wrong_type(kv, "an integer", d);
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64)
		*out = (float)kv->v.f64;
	else if (gguf_is_unsigned(kv->type))
		*out = (float)kv->v.u64;
	else if (gguf_is_signed(kv->type))
		*out = (float)kv->v.i64;
	else
		return gguf_wrong_type(kv, "a number", d);
	return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (kv->type != GGUF_TYPE_BOOL)
		return gguf_wrong_type(kv, "bool", d);
	*out = kv->v.b;
	return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, const char **out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (kv->type != GGUF_TYPE_STRING)
		return gguf_wrong_type(kv, "string", d);
	*out = kv->v.str.ptr;
	return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, enum gguf_type elem,
		 const struct gguf_arr **out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (kv->type != GGUF_TYPE_ARRAY)
		return gguf_wrong_type(kv, "array", d);
	if (kv->v.arr.skipped)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "metadata '%s' (offset %llu) was not read: the file was opened "
			       "without its vocabulary",
			       key, (unsigned long long)kv->offset);
	if (elem != GGUF_TYPE_COUNT && kv->v.arr.type != elem)
		return lm_fail(d, LM_EFORMAT,
			       "metadata '%s' (offset %llu) is an array of %s, expected %s", key,
			       (unsigned long long)kv->offset, gguf_type_name(kv->v.arr.type),
			       gguf_type_name(elem));
	*out = &kv->v.arr;
	return 0;
}

/* A float as an integer: truncated toward zero and saturated (NaN gives 0). A plain C
 * conversion of a value out of range is undefined behaviour, and the file chooses the value. */
static int64_t gguf_f64_to_i64(double v)
{
	if (v != v)
		return 0;
	if (v <= -9223372036854775808.0)
		return INT64_MIN;
	if (v >= 9223372036854775808.0)
		return INT64_MAX;
	return (int64_t)v;
}

static uint64_t gguf_f64_to_u64(double v)
{
	if (!(v > 0))
		return 0;
	if (v >= 18446744073709551616.0)
		return UINT64_MAX;
	return (uint64_t)v;
}

int64_t gguf_arr_i64(const struct gguf_arr *a, uint64_t i)
{
	const uint8_t *p = a->data + i * gguf_value_size(a->type);
	switch (a->type) {
	case GGUF_TYPE_INT8:
		return (int8_t)p[0];
	case GGUF_TYPE_INT16: {
		int16_t v;
		memcpy(&v, p, 2);
		return v;
	}
	case GGUF_TYPE_INT32: {
		int32_t v;
		memcpy(&v, p, 4);
		return v;
	}
	case GGUF_TYPE_INT64: {
		int64_t v;
		memcpy(&v, p, 8);
		return v;
	}
	case GGUF_TYPE_FLOAT32:
	case GGUF_TYPE_FLOAT64:
		return gguf_f64_to_i64(gguf_arr_f64(a, i));
	default:
		return (int64_t)gguf_arr_u64(a, i);
	}
}

uint64_t gguf_arr_u64(const struct gguf_arr *a, uint64_t i)
{
	const uint8_t *p = a->data + i * gguf_value_size(a->type);
	switch (a->type) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_BOOL:
		return p[0];
	case GGUF_TYPE_UINT16: {
		uint16_t v;
		memcpy(&v, p, 2);
		return v;
	}
	case GGUF_TYPE_UINT32: {
		uint32_t v;
		memcpy(&v, p, 4);
		return v;
	}
	case GGUF_TYPE_UINT64: {
		uint64_t v;
		memcpy(&v, p, 8);
		return v;
	}
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_INT16:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_INT64:
		return (uint64_t)gguf_arr_i64(a, i);
	case GGUF_TYPE_FLOAT32:
	case GGUF_TYPE_FLOAT64:
		return gguf_f64_to_u64(gguf_arr_f64(a, i));
	default:
		return 0;
	}
}

double gguf_arr_f64(const struct gguf_arr *a, uint64_t i)
{
	const uint8_t *p = a->data + i * gguf_value_size(a->type);
	if (a->type == GGUF_TYPE_FLOAT32) {
		float v;
		memcpy(&v, p, 4);
		return v;
	}
	if (a->type == GGUF_TYPE_FLOAT64) {
		double v;
		memcpy(&v, p, 8);
		return v;
	}
	if (gguf_is_signed(a->type))
		return (double)gguf_arr_i64(a, i);
	return (double)gguf_arr_u64(a, i);
}

/* ---------------------------------------------------------------- tensors */

uint64_t gguf_n_tensors(const gguf_file *f)
{
	return f->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i)
{
	return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
	for (uint64_t h = gguf_hash_str(name) & f->hash_mask; f->tensor_hash[h] != 0;
	     h = (h + 1) & f->hash_mask)
		if (strcmp(f->tensors[f->tensor_hash[h] - 1].name, name) == 0)
			return &f->tensors[f->tensor_hash[h] - 1];
	return NULL;
}

bool gguf_select_fn(const struct gguf_tensor *t, void *arg)
{
	const struct gguf_select *s = arg;
	if (t->layer >= 0)
		return t->layer >= s->layer_begin && t->layer < s->layer_end;
	if (strncmp(t->name, "token_embd.", 11) == 0)
		return s->embedding;
	if (strncmp(t->name, "output_norm.", 12) == 0 || strncmp(t->name, "output.", 7) == 0)
		return s->head;
	return s->other;
}

struct gguf_span {
	uint64_t begin, end; /* file offsets, page-aligned */
};

static int gguf_cmp_span(const void *a, const void *b)
{
	const struct gguf_span *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int gguf_add_region(gguf_file *f, void *addr, size_t len)
{
	if (f->n_regions == f->cap_regions) {
		struct gguf_region *r =
			lm_grow(f->regions, &f->cap_regions, f->n_regions + 1, sizeof *r, 8);
		if (r == NULL)
			return LM_ENOMEM;
		f->regions = r;
	}
	f->regions[f->n_regions++] = (struct gguf_region){addr, len};
	f->mapped_bytes += len;
	return 0;
}

/* The file's bytes [begin, begin + len) (len a multiple of the page size; past the end of the
 * file, zeros as a mapping shows them) read into fresh anonymous memory (writable until
 * gguf_seal).
 * The memory starts on a 2 MiB boundary and is advised for transparent huge pages: a decode
 * step streams every weight once, and with 4 KiB pages each page costs a TLB miss, which under
 * a hypervisor's nested paging is dear (decode measured 25% faster from huge pages on a 2-vCPU
 * VM; bench/RESULTS.md). Resident memory is the same as a prefaulted mapping's: len bytes. */
static int gguf_read_span(gguf_file *f, uint64_t begin, size_t len, void **out, lm_diag *d)
{
	const size_t huge = (size_t)2 << 20;
	if (len > SIZE_MAX - huge)
		return lm_fail(d, LM_ERANGE, "%s: %zu bytes of tensors are too many", f->path, len);
	/* Over-allocate by a huge page, then trim both ends so the region starts aligned. */
	const size_t span = len + huge;
	uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return lm_fail(d, lm_err_from_errno(errno), "%s: cannot allocate %zu bytes: %s",
			       f->path, len, strerror(errno));
	uint8_t *p = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
	if (p > raw)
		munmap(raw, (size_t)(p - raw));
	if (raw + span > p + len)
		munmap(p + len, (size_t)(raw + span - (p + len)));
	/* Best effort: without transparent huge pages the memory simply stays in 4 KiB pages. */
	(void)madvise(p, len, MADV_HUGEPAGE);
	const size_t want = begin + len <= f->file_size ? len : (size_t)(f->file_size - begin);
	size_t done = 0;
	while (done < want) {
		ssize_t n = pread(f->fd, p + done, want - done, (off_t)(begin + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			const int e = errno;
			munmap(p, len);
			return lm_fail(d, n < 0 ? lm_err_from_errno(e) : LM_EIO,
				       "%s: reading %zu bytes at offset %llu: %s", f->path, want,
				       (unsigned long long)begin,
				       n < 0 ? strerror(e) : "the file ended early");
		}
		done += (size_t)n;
	}
	*out = p;
	return 0;
}

int gguf_seal(gguf_file *f, lm_diag *d)
{
	for (size_t i = 0; f->fd >= 0 && i < f->n_regions; i++)
		if (mprotect(f->regions[i].addr, f->regions[i].len, PROT_READ) != 0) {
			const int e = errno;
			return lm_fail(d, lm_err_from_errno(e), "%s: mprotect: %s", f->path,
				       strerror(e));
		}
	return 0;
}

int gguf_map(gguf_file *f, bool (*want)(const struct gguf_tensor *t, void *arg), void *arg,
	     bool populate, uint64_t *mapped_bytes, lm_diag *d)
{
	static const uint8_t empty[1];
	struct gguf_span *spans = NULL;
	size_t n = 0;
	int rc = 0;

	if (f->fd < 0) { /* in memory: the bytes are already there */
		for (uint64_t i = 0; i < f->n_tensors; i++) {
			struct gguf_tensor *t = &f->tensors[i];
			if (want == NULL || want(t, arg))
				t->data = f->base + f->data_offset + t->offset;
		}
		if (mapped_bytes != NULL)
			*mapped_bytes = 0;
		return 0;
	}

	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	spans = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *spans);
	if (spans == NULL)
		return lm_fail(d, LM_ENOMEM, "%s: out of memory mapping tensors", f->path);
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		if (t->data != NULL || (want != NULL && !want(t, arg)))
			continue;
		if (t->size == 0) {
			t->data = empty;
			continue;
		}
		uint64_t b = f->data_offset + t->offset, e = b + t->size;
		spans[n++] = (struct gguf_span){b / page * page, (e + page - 1) / page * page};
	}
	qsort(spans, n, sizeof *spans, gguf_cmp_span);
	/* Merge spans that overlap or touch; each merged span becomes one mapping. */
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (m > 0 && spans[i].begin <= spans[m - 1].end) {
			if (spans[i].end > spans[m - 1].end)
				spans[m - 1].end = spans[i].end;
		} else {
			spans[m++] = spans[i];
		}
	}
	size_t first_region = f->n_regions;
	for (size_t i = 0; i < m; i++) {
		size_t len = (size_t)(spans[i].end - spans[i].begin);
		void *addr = NULL;
		if (populate) {
			if ((rc = gguf_read_span(f, spans[i].begin, len, &addr, d)) != 0)
				break;
		} else {
			addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd,
				    (off_t)spans[i].begin);
			if (addr == MAP_FAILED) {
				rc = lm_fail(d, lm_err_from_errno(errno),
					     "%s: mmap of %zu bytes at %llu: %s", f->path, len,
					     (unsigned long long)spans[i].begin, strerror(errno));
				break;
			}
		}
		if ((rc = gguf_add_region(f, addr, len)) != 0) {
			munmap(addr, len);
			rc = lm_fail(d, rc, "%s: out of memory mapping tensors", f->path);
			break;
		}
	}
	/* Point every selected tensor at its bytes: the span holding it is found by binary search
	 * over the sorted, disjoint spans (the last span beginning at or before the tensor). */
	for (uint64_t j = 0; j < f->n_tensors && rc == 0; j++) {
		struct gguf_tensor *t = &f->tensors[j];
		if (t->data != NULL || (want != NULL && !want(t, arg)))
			continue;
		uint64_t b = f->data_offset + t->offset;
		size_t lo = 0, hi = m;
		while (hi - lo > 1) {
			size_t mid = lo + (hi - lo) / 2;
			if (spans[mid].begin <= b)
				lo = mid;
			else
				hi = mid;
		}
		t->data =
			(const uint8_t *)f->regions[first_region + lo].addr + (b - spans[lo].begin);
	}
	free(spans);
	if (mapped_bytes != NULL)
		*mapped_bytes = f->mapped_bytes;
	return rc;
}

static uint64_t gguf_fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t gguf_fingerprint(const gguf_file *f)
{
	/* FNV-1a over the header, the metadata and the tensor index as stored in the file: read
	 * with pread into a buffer, so that the pages of metadata the parse skipped are not
	 * touched (a read that fails leaves the rest to the mapping, which holds the same bytes). */
	uint64_t h = 0xcbf29ce484222325ull, at = 0;
	uint8_t *buf = f->fd >= 0 ? malloc(GGUF_WIN_BYTES) : NULL;
	while (buf != NULL && at < f->index_end) { /* each pass advances or stops */
		size_t want = f->index_end - at < GGUF_WIN_BYTES ? (size_t)(f->index_end - at)
								 : GGUF_WIN_BYTES;
		ssize_t r = pread(f->fd, buf, want, (off_t)at);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		h = gguf_fnv(h, buf, (size_t)r);
		at += (uint64_t)r;
	}
	free(buf);
	if (f->base != NULL) /* a read failed (or none could be made): the same bytes, mapped */
		h = gguf_fnv(h, f->base + at, (size_t)(f->index_end - at));
	else if (at < f->index_end) /* unmapped and unreadable now: 0, HELLO's "no model" */
		h = 0;
#ifdef LM_TEST_FINGERPRINT_SALT
	/* A test build that sees another model in the same file (tests/integration: a redeploy
	 * of a build for another model must be refused, both fingerprints named). */
	h ^= LM_TEST_FINGERPRINT_SALT;
#endif
	return h;
}

/* ------------------------------------------------------------------ the tensor digest */

static inline uint64_t gguf_dmix(uint64_t h, uint64_t v)
{
	h ^= v * 0x9e3779b97f4a7c15ull;
	h = (h << 31) | (h >> 33);
	return h * 0xc2b2ae3d27d4eb4full;
}

/* n bytes at p into the four lanes (32 bytes a step, then 8, then the tail). */
static void gguf_dbytes(uint64_t lane[4], const uint8_t *p, uint64_t n)
{
	uint64_t w[4];
	while (n >= 32) {
		memcpy(w, p, 32);
		lane[0] = gguf_dmix(lane[0], w[0]);
		lane[1] = gguf_dmix(lane[1], w[1]);
		lane[2] = gguf_dmix(lane[2], w[2]);
		lane[3] = gguf_dmix(lane[3], w[3]);
		p += 32;
		n -= 32;
	}
	while (n >= 8) {
		memcpy(w, p, 8);
		lane[0] = gguf_dmix(lane[0], w[0]);
		p += 8;
		n -= 8;
	}
	uint64_t tail = n;
	for (uint64_t i = 0; i < n; i++)
		tail = (tail << 8) | p[i];
	lane[1] = gguf_dmix(lane[1], tail);
}

uint64_t gguf_tensor_digest(const gguf_file *f)
{
	uint64_t lane[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
			    0x082efa98ec4e6c89ull};
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		if (t->data == NULL)
			continue;
		gguf_dbytes(lane, (const uint8_t *)t->name, strlen(t->name));
		lane[2] = gguf_dmix(lane[2], t->size);
		gguf_dbytes(lane, t->data, t->size);
	}
	uint64_t h = lane[0];
	for (int k = 1; k < 4; k++)
		h = gguf_dmix(h, lane[k]);
	return h ^ (h >> 29);
}

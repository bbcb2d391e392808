/* gguf.h — a GGUF v2/v3 reader over mmap.
 *
 * The format (all integers little-endian):
 *
 *     magic      "GGUF" (4 bytes)
 *     version    u32: 2 or 3 (v1 used 32-bit counts and is refused)
 *     n_tensors  u64
 *     n_kv       u64
 *     kv[n_kv]   key: string; type: u32 (enum gguf_type); value
 *     ti[n_tensors]  name: string; n_dims: u32 (1..4); ne[n_dims]: u64; type: u32 (enum lm_dtype);
 *                offset: u64 (relative to the data section, a multiple of the alignment)
 *     padding    to `general.alignment` (u32 key, default 32, a power of two)
 *     data       tensor bytes
 *
 *     string = u64 length + bytes (not NUL-terminated in the file)
 *     value  = scalar by type, a string, or an array: u32 element type + u64 count + elements
 *              (arrays may nest: an array of arrays of strings is legal)
 *
 * Trust. The file is untrusted input. Every count, length, offset and size is checked against the
 * file size before use, with overflow-safe arithmetic; a truncated, corrupt or hostile file gives
 * LM_EFORMAT (or LM_ENOMEM for absurd but consistent sizes) and an lm_diag naming the field and
 * its byte offset, never a crash.
 *
 * Mapping. gguf_open() reads the header, the metadata and the tensor index; tensor bytes are not
 * mapped. gguf_map() then maps only the tensors a caller selects (by name, by layer range or by a
 * predicate), merging neighbours into as few page-aligned mappings as possible, so a worker that
 * owns layers [8, 11) touches, and keeps resident, only those layers' pages.
 *
 * Strings handed out (keys, string values, tensor names) are NUL-terminated copies owned by the
 * gguf_file; they live until gguf_close().
 *
 * Without the vocabulary. A worker never tokenizes, yet a real vocabulary is most of a GGUF's
 * metadata (Gemma 4's 262,144 tokens: 15 MiB in the file, 25 MiB more as copied strings).
 * gguf_open_with(GGUF_OPEN_NO_VOCAB) does not map the metadata: it reads it with pread(2)
 * through a small window (the file's pages stay in the page cache, out of the process's
 * resident set), copies what it keeps (fixed-size array elements too) and walks over the
 * arrays under "tokenizer." without keeping them. Such an array keeps its element type and
 * count; its elements are not there (gguf_arr.skipped), and gguf_get_arr() refuses it with
 * LM_EUNSUPPORTED.
 */
#ifndef LM_GGUF_H
#define LM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/base/err.h"

#define GGUF_MAGIC             "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS          4

enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
	GGUF_TYPE_COUNT = 13,
};

/* "uint32", "string", "array", ...; "?" for an unknown type. */
const char *gguf_type_name(uint32_t type);
/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and unknown types. */
size_t gguf_value_size(uint32_t type);

typedef struct gguf_file gguf_file;

/* An array value. Fixed-size elements are read in place from the file (`data`, little-endian,
 * possibly unaligned: read them with the gguf_arr_* accessors; a copy when the file was opened
 * with GGUF_OPEN_NO_VOCAB); strings and nested arrays are indexed at open time. */
struct gguf_arr {
	enum gguf_type type;         /* element type */
	uint64_t n;                  /* element count */
	const uint8_t *data;         /* fixed-size elements; NULL for STRING and ARRAY elements */
	const char *const *strs;     /* STRING elements, NUL-terminated copies; NULL otherwise */
	const uint64_t *str_lens;    /* their lengths (a string may contain NUL bytes) */
	const struct gguf_arr *arrs; /* ARRAY elements; NULL otherwise */
	bool skipped;                /* GGUF_OPEN_NO_VOCAB: not read (no elements at all) */
};

struct gguf_kv {
	const char *key;
	enum gguf_type type;
	uint64_t offset; /* byte offset of the key in the file, for messages */
	union {
		uint64_t u64; /* UINT8/16/32/64 */
		int64_t i64;  /* INT8/16/32/64 */
		double f64;   /* FLOAT32/64 */
		bool b;
		struct {
			const char *ptr; /* NUL-terminated copy */
			uint64_t len;
		} str;
		struct gguf_arr arr;
	} v;
};

struct gguf_tensor {
	const char *name;
	enum lm_dtype type;
	uint32_t n_dims;
	int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous dimension; unused dims are 1 */
	uint64_t offset;           /* relative to the data section */
	uint64_t size;             /* bytes */
	int32_t layer;             /* N of "blk.N.*", or -1 */
	const void *data;          /* NULL until mapped by gguf_map() */
};

/* Opens and indexes `path`. On failure *out is NULL and d says what was wrong and where. */
int gguf_open(const char *path, gguf_file **out, lm_diag *d);
/* Flags of gguf_open_with. */
enum {
	/* The arrays under "tokenizer." are walked over, not read (see "Without the vocabulary"
	 * above): for a process that never tokenizes. The file is checked as strictly. */
	GGUF_OPEN_NO_VOCAB = 1u << 0,
};
/* gguf_open with flags (0: gguf_open). */
int gguf_open_with(const char *path, unsigned flags, gguf_file **out, lm_diag *d);
/* Parses an in-memory image (the fuzz target and tests). The buffer must outlive the file;
 * tensors are "mapped" in place by gguf_map(). */
int gguf_open_mem(const void *buf, size_t len, gguf_file **out, lm_diag *d);
/* Unmaps and frees everything. NULL is harmless. */
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);
const char *gguf_path(const gguf_file *f); /* "<memory>" for gguf_open_mem */

/* --- metadata --- */
uint64_t gguf_n_kv(const gguf_file *f);
const struct gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i);
/* NULL when absent. */
const struct gguf_kv *gguf_find(const gguf_file *f, const char *key);

/* Typed getters. Each returns 0, LM_ENOTFOUND when the key is absent (d untouched, so the caller
 * can apply a default), or LM_EFORMAT when present with a type that does not convert exactly
 * (a negative value into an unsigned, a value out of range, a string where a number is expected). */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, lm_diag *d);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, lm_diag *d);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, lm_diag *d);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, lm_diag *d);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, lm_diag *d);
int gguf_get_str(const gguf_file *f, const char *key, const char **out, lm_diag *d);
/* An array of the given element type (GGUF_TYPE_COUNT accepts any). An array the file was
 * opened without (GGUF_OPEN_NO_VOCAB) is LM_EUNSUPPORTED; its count is still gguf_find()'s. */
int gguf_get_arr(const gguf_file *f, const char *key, enum gguf_type elem,
		 const struct gguf_arr **out, lm_diag *d);

/* Element i of a fixed-size numeric array, converted. i < a->n is the caller's duty. Floats
 * become integers truncated toward zero and saturated at the type's limits (NaN gives 0);
 * integers convert as C converts them (a negative one read as u64 wraps). */
int64_t gguf_arr_i64(const struct gguf_arr *a, uint64_t i);
uint64_t gguf_arr_u64(const struct gguf_arr *a, uint64_t i);
double gguf_arr_f64(const struct gguf_arr *a, uint64_t i);

/* --- tensors --- */
uint64_t gguf_n_tensors(const gguf_file *f);
const struct gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
/* NULL when absent. */
const struct gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Maps the tensors for which want(t, arg) returns true (want == NULL selects all) and sets their
 * `data` (read-only). May be called more than once; already mapped tensors stay mapped.
 * `populate` makes them resident now, so the first forward pays no page faults: the bytes are
 * read into anonymous memory advised for transparent huge pages (the same resident size as a
 * prefaulted mapping, and fewer TLB misses when a forward streams them); without it they are a
 * lazy file mapping. *mapped_bytes (may be NULL) receives the total bytes now held for tensor
 * data, page rounding included. */
int gguf_map(gguf_file *f, bool (*want)(const struct gguf_tensor *t, void *arg), void *arg,
	     bool populate, uint64_t *mapped_bytes, lm_diag *d);
/* Mapped tensor bytes are private and writable (the file itself never changes), so that a
 * backend may rearrange a tensor in place as it binds it (kernels/backend.h, weight_init);
 * gguf_seal then makes every mapping read-only. In-memory files (gguf_open_mem) are left as
 * they are. */
int gguf_seal(gguf_file *f, lm_diag *d);

/* Convenience selector for gguf_map(): tensors of layers [first, last) plus, by flag, the
 * embedding ("token_embd.*"), the head ("output_norm.*", "output.*") and everything else. */
struct gguf_select {
	int32_t layer_begin, layer_end;
	bool embedding;
	bool head;
	bool other;
};
bool gguf_select_fn(const struct gguf_tensor *t, void *arg /* struct gguf_select * */);

/* A 64-bit FNV-1a fingerprint of the metadata and the tensor index (names, types, shapes, offsets),
 * not of the tensor bytes: two files with the same model layout and metadata agree. Cheap: no
 * tensor data is read. A file's bytes are read with pread(2), not through the mapping, so the
 * metadata a caller skipped (GGUF_OPEN_NO_VOCAB) does not become resident for the hash. */
uint64_t gguf_fingerprint(const gguf_file *f);

/* A 64-bit digest of the bytes of every mapped tensor (those gguf_map() selected), with their
 * names, in index order: what a worker's slice holds, so that weights replaced under the same
 * layout and metadata (the same fingerprint) are told apart. Reads the mapped bytes once, at
 * about the speed of memory (four independent multiply-rotate lanes over 8-byte words). Not a
 * cryptographic hash: it tells a changed file, not a forged one. */
uint64_t gguf_tensor_digest(const gguf_file *f);

#endif

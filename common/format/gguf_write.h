/* gguf_write.h — a streaming GGUF v3 writer (the format is described in common/format/gguf.h).
 *
 * A file is written in three steps, so that tensors of any size pass through without being held
 * in memory:
 *
 *     1. describe: metadata (gguf_writer_kv_*, arrays with gguf_writer_arr_begin/..._end) and the
 *        tensor index (gguf_writer_add_tensor), in the order they are to appear in the file;
 *     2. gguf_writer_write_header(): magic, version 3, counts, metadata, the tensor index with
 *        each tensor's offset, and zero padding up to the alignment;
 *     3. gguf_writer_write_data(): the tensors' bytes, in index order, in chunks of any size;
 *        the writer inserts the zero padding after each tensor (the last one included) so that
 *        every tensor starts at a multiple of the alignment. gguf_writer_finish() checks that
 *        every byte was given and flushes.
 *
 * Metadata values are encoded as they are added; keys must be unique and non-empty. Arrays may
 * nest (up to GGUF_WRITER_MAX_DEPTH levels, what the reader accepts): gguf_writer_arr_begin(w, key,
 * elem, n) opens a keyed array, then exactly n elements follow, each a fixed-size value
 * (gguf_writer_arr_elems), a string (gguf_writer_arr_str) or, when elem is GGUF_TYPE_ARRAY, a
 * nested array opened with gguf_writer_arr_begin(w, NULL, elem2, n2) and closed with
 * gguf_writer_arr_end; gguf_writer_arr_end closes the keyed array too.
 *
 * Alignment. gguf_writer_init() takes it: 0 means GGUF's default of 32 with no general.alignment
 * key; any other power of two is written as the key general.alignment (uint32), first in the
 * metadata. Setting general.alignment through the kv functions is refused.
 *
 * Errors. Every function returns 0 or a negative LM_E* code and fills the lm_diag (which may be
 * NULL): LM_EINVAL for a call that breaks the contract (a duplicate key or tensor name, a wrong
 * element type or count, a shape the type cannot hold, data past the last tensor, ...), naming
 * the key or tensor; LM_EIO when the stream fails; LM_ENOMEM; LM_EOVERFLOW. After a failure in
 * step 2 or 3 the output is incomplete and the writer only accepts gguf_writer_fini().
 *
 * The writer does not own the FILE: the caller opens it (fdopen() for a descriptor), and closes
 * it after gguf_writer_finish(), checking fclose()'s result.
 */
#ifndef LM_GGUF_WRITE_H
#define LM_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/format/gguf.h"

#define GGUF_WRITER_MAX_DEPTH 8
/* ggml keeps tensor names in 64-byte buffers (NUL included): longer names would not load. */
#define GGUF_WRITER_MAX_TENSOR_NAME 63

struct gguf_writer_tensor {
	char *name;
	enum lm_dtype type;
	uint32_t n_dims;
	int64_t ne[GGUF_MAX_DIMS];
	uint64_t offset; /* relative to the data section */
	uint64_t size;   /* bytes, before padding */
};

/* Caller-owned; the fields are the writer's own. Zero it or gguf_writer_init() it. */
typedef struct gguf_writer {
	uint32_t alignment;
	/* The encoded metadata section, growing as keys are added. */
	uint8_t *kv;
	size_t kv_len, kv_cap;
	uint64_t n_kv;
	char **keys; /* (n_kv) copies, for the duplicate check */
	size_t keys_cap;
	/* The open arrays, outermost first. */
	struct {
		enum gguf_type elem;
		uint64_t left;
	} stack[GGUF_WRITER_MAX_DEPTH];
	int depth;
	/* The tensor index. */
	struct gguf_writer_tensor *tensors;
	uint64_t n_tensors;
	size_t tensors_cap;
	uint64_t data_size; /* bytes of the data section, padding included */
	/* Streaming state. */
	FILE *out;
	int stage;            /* 0 describe, 1 header written, 2 finished, -1 failed */
	uint64_t cur;         /* the tensor being written */
	uint64_t cur_written; /* its bytes written so far */
	uint64_t header_size; /* bytes before the data section */
} gguf_writer;

/* alignment: 0 (default 32, no key) or a power of two up to 2^30. */
int gguf_writer_init(gguf_writer *w, uint32_t alignment, lm_diag *d);
/* Frees what the writer holds (not the FILE). Harmless on a zeroed writer or NULL. */
void gguf_writer_fini(gguf_writer *w);

/* --- metadata: one key with a scalar or string value --- */
int gguf_writer_kv_u8(gguf_writer *w, const char *key, uint8_t v, lm_diag *d);
int gguf_writer_kv_i8(gguf_writer *w, const char *key, int8_t v, lm_diag *d);
int gguf_writer_kv_u16(gguf_writer *w, const char *key, uint16_t v, lm_diag *d);
int gguf_writer_kv_i16(gguf_writer *w, const char *key, int16_t v, lm_diag *d);
int gguf_writer_kv_u32(gguf_writer *w, const char *key, uint32_t v, lm_diag *d);
int gguf_writer_kv_i32(gguf_writer *w, const char *key, int32_t v, lm_diag *d);
int gguf_writer_kv_u64(gguf_writer *w, const char *key, uint64_t v, lm_diag *d);
int gguf_writer_kv_i64(gguf_writer *w, const char *key, int64_t v, lm_diag *d);
int gguf_writer_kv_f32(gguf_writer *w, const char *key, float v, lm_diag *d);
int gguf_writer_kv_f64(gguf_writer *w, const char *key, double v, lm_diag *d);
int gguf_writer_kv_bool(gguf_writer *w, const char *key, bool v, lm_diag *d);
/* A NUL-terminated string. */
int gguf_writer_kv_str(gguf_writer *w, const char *key, const char *v, lm_diag *d);
/* len bytes, which may include NULs. */
int gguf_writer_kv_strn(gguf_writer *w, const char *key, const char *v, uint64_t len, lm_diag *d);

/* --- metadata: arrays --- */
/* Opens an array of n elements of type elem: keyed when key != NULL (no array may be open), or
 * as the next element of the open array of arrays when key == NULL. */
int gguf_writer_arr_begin(gguf_writer *w, const char *key, enum gguf_type elem, uint64_t n,
			  lm_diag *d);
/* Appends n fixed-size elements of the open array's type from a host array of that C type:
 * uint8_t, int8_t, uint16_t, ..., float, double, bool (one byte). */
int gguf_writer_arr_elems(gguf_writer *w, const void *values, uint64_t n, lm_diag *d);
/* Appends one string element of len bytes. */
int gguf_writer_arr_str(gguf_writer *w, const char *s, uint64_t len, lm_diag *d);
/* Closes the innermost open array; it must have received all its elements. */
int gguf_writer_arr_end(gguf_writer *w, lm_diag *d);
/* One-call forms: a keyed array of n fixed-size values, or of n strings (lens == NULL: each string
 * is NUL-terminated). */
int gguf_writer_kv_arr(gguf_writer *w, const char *key, enum gguf_type elem, const void *values,
		       uint64_t n, lm_diag *d);
int gguf_writer_kv_arr_str(gguf_writer *w, const char *key, const char *const *strs,
			   const uint64_t *lens, uint64_t n, lm_diag *d);

/* Copies one key and its value, whatever its type (nested arrays included), from a file the
 * GGUF reader opened. */
int gguf_writer_kv_copy(gguf_writer *w, const struct gguf_kv *kv, lm_diag *d);

/* --- tensors --- */
/* Adds a tensor to the index: n_dims in [1, 4], ne[0] (the contiguous dimension) a multiple of
 * the type's block size, every ne >= 1. The name is copied. *index (may be NULL) receives its
 * position, the order in which its bytes must later be written. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, enum lm_dtype type, uint32_t n_dims,
			   const int64_t *ne, uint64_t *index, lm_diag *d);
uint64_t gguf_writer_n_tensors(const gguf_writer *w);
const struct gguf_writer_tensor *gguf_writer_tensor_at(const gguf_writer *w, uint64_t i);

/* --- output --- */
/* Writes everything before the data section to out. No metadata or tensor may be added after. */
int gguf_writer_write_header(gguf_writer *w, FILE *out, lm_diag *d);
/* Appends n bytes of tensor data: the rest of the current tensor and then the next ones, in
 * index order (a chunk may span tensors). Padding is inserted by the writer. */
int gguf_writer_write_data(gguf_writer *w, const void *buf, size_t n, lm_diag *d);
/* Checks that every tensor's bytes were written, and flushes the FILE. */
int gguf_writer_finish(gguf_writer *w, lm_diag *d);
/* Bytes of the header (the data section's offset) and of the whole file, once the index is
 * complete (valid after gguf_writer_write_header, or computed from the current description). */
uint64_t gguf_writer_header_size(const gguf_writer *w);
uint64_t gguf_writer_file_size(const gguf_writer *w);

#endif

/* gguf_write.c — the streaming GGUF v3 writer. See gguf_write.h for the contract.
 *
 * Metadata is encoded into a growing buffer as it is added, so the header is written with one
 * pass over that buffer and the tensor index; only the tensor bytes stream. Integers are encoded
 * little-endian byte by byte, so the output does not depend on the host's byte order.
 */
#include "common/format/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"

#define GGUF_WRITER_VERSION 3u

/* ---------------------------------------------------------------- encoding */

static int gguf_writer_reserve(gguf_writer *w, size_t more, lm_diag *d)
{
	if (w->kv_cap - w->kv_len >= more)
		return 0;
	if (more > SIZE_MAX / 2 - w->kv_len)
		return lm_fail(d, LM_EOVERFLOW, "gguf writer: metadata larger than memory");
	uint8_t *p = lm_grow(w->kv, &w->kv_cap, w->kv_len + more, 1, 4096);
	if (p == NULL)
		return lm_fail(d, LM_ENOMEM, "gguf writer: out of memory for %zu bytes of metadata",
			       w->kv_len + more);
	w->kv = p;
	return 0;
}

/* Appends v as n little-endian bytes (n <= 8). */
static int gguf_writer_put_le(gguf_writer *w, uint64_t v, size_t n, lm_diag *d)
{
	int rc = gguf_writer_reserve(w, n, d);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		w->kv[w->kv_len++] = (uint8_t)(v >> (8 * i));
	return 0;
}

static int gguf_writer_put_bytes(gguf_writer *w, const void *p, size_t n, lm_diag *d)
{
	int rc = gguf_writer_reserve(w, n, d);
	if (rc != 0)
		return rc;
	if (n != 0)
		memcpy(w->kv + w->kv_len, p, n);
	w->kv_len += n;
	return 0;
}

static int gguf_writer_put_str(gguf_writer *w, const char *s, uint64_t len, lm_diag *d)
{
	if (len > SIZE_MAX)
		return lm_fail(d, LM_EOVERFLOW, "gguf writer: string of %llu bytes",
			       (unsigned long long)len);
	int rc = gguf_writer_put_le(w, len, 8, d);
	return rc != 0 ? rc : gguf_writer_put_bytes(w, s, (size_t)len, d);
}

/* Appends one fixed-size value of type t from its host representation at p. */
static int gguf_writer_put_value(gguf_writer *w, enum gguf_type t, const void *p, lm_diag *d)
{
	uint64_t u = 0;
	switch (gguf_value_size(t)) {
	case 1: {
		uint8_t v;
		memcpy(&v, p, 1);
		if (t == GGUF_TYPE_BOOL)
			v = v != 0;
		u = v;
		return gguf_writer_put_le(w, u, 1, d);
	}
	case 2: {
		uint16_t v;
		memcpy(&v, p, 2);
		return gguf_writer_put_le(w, v, 2, d);
	}
	case 4: {
		uint32_t v;
		memcpy(&v, p, 4);
		return gguf_writer_put_le(w, v, 4, d);
	}
	case 8:
		memcpy(&u, p, 8);
		return gguf_writer_put_le(w, u, 8, d);
	default:
		return lm_fail(d, LM_EINVAL, "gguf writer: %s is not a fixed-size type",
			       gguf_type_name(t));
	}
}

/* ---------------------------------------------------------------- lifecycle */

static int gguf_writer_kv_fixed_raw(gguf_writer *w, const char *key, enum gguf_type t,
				    const void *p, lm_diag *d);

int gguf_writer_init(gguf_writer *w, uint32_t alignment, lm_diag *d)
{
	memset(w, 0, sizeof *w);
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (alignment == 0)
		return 0;
	if ((alignment & (alignment - 1)) != 0 || alignment > (1u << 30))
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: alignment %u is not a power of two up to 2^30",
			       alignment);
	int rc = gguf_writer_kv_fixed_raw(w, "general.alignment", GGUF_TYPE_UINT32, &alignment, d);
	if (rc != 0) {
		gguf_writer_fini(w);
		return rc;
	}
	w->alignment = alignment;
	return 0;
}

void gguf_writer_fini(gguf_writer *w)
{
	if (w == NULL)
		return;
	for (uint64_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	free(w->keys);
	for (uint64_t i = 0; i < w->n_tensors; i++)
		free(w->tensors[i].name);
	free(w->tensors);
	free(w->kv);
	memset(w, 0, sizeof *w);
}

/* ---------------------------------------------------------------- metadata */

static int gguf_writer_describing(const gguf_writer *w, const char *what, lm_diag *d)
{
	if (w->stage != 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: %s after the header was written", what);
	return 0;
}

/* Starts a key: checks it, records it and encodes the key string and the value type. On
 * failure nothing is recorded. */
static int gguf_writer_key(gguf_writer *w, const char *key, enum gguf_type type, lm_diag *d)
{
	int rc = gguf_writer_describing(w, "a metadata key", d);
	if (rc != 0)
		return rc;
	if (key == NULL || key[0] == '\0')
		return lm_fail(d, LM_EINVAL, "gguf writer: empty metadata key");
	if (w->depth != 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s' while an array is still open",
			       key);
	for (uint64_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->keys[i], key) == 0)
			return lm_fail(d, LM_EINVAL, "gguf writer: duplicate metadata key '%s'",
				       key);
	if (w->n_kv == w->keys_cap) {
		char **p = lm_grow(w->keys, &w->keys_cap, w->n_kv + 1, sizeof *p, 64);
		if (p == NULL)
			return lm_fail(d, LM_ENOMEM, "gguf writer: out of memory for keys");
		w->keys = p;
	}
	char *copy = strdup(key);
	if (copy == NULL)
		return lm_fail(d, LM_ENOMEM, "gguf writer: out of memory for key '%s'", key);
	size_t mark = w->kv_len;
	if ((rc = gguf_writer_put_str(w, key, strlen(key), d)) != 0 ||
	    (rc = gguf_writer_put_le(w, (uint64_t)type, 4, d)) != 0) {
		w->kv_len = mark;
		free(copy);
		return rc;
	}
	w->keys[w->n_kv++] = copy;
	return 0;
}

/* Drops the key just started (its value could not be encoded), so a failed call leaves the
 * metadata as it was. */
static void gguf_writer_unkey(gguf_writer *w, size_t mark)
{
	w->kv_len = mark;
	free(w->keys[--w->n_kv]);
}

/* Refuses general.alignment from the public setters: the writer pads by the value it was
 * initialised with, and a second source of truth could only disagree with it. */
static int gguf_writer_not_alignment(const char *key, lm_diag *d)
{
	if (key != NULL && strcmp(key, "general.alignment") == 0)
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: general.alignment is set by gguf_writer_init");
	return 0;
}

static int gguf_writer_kv_fixed_raw(gguf_writer *w, const char *key, enum gguf_type t,
				    const void *p, lm_diag *d)
{
	size_t mark = w->kv_len;
	int rc = gguf_writer_key(w, key, t, d);
	if (rc != 0)
		return rc;
	if ((rc = gguf_writer_put_value(w, t, p, d)) != 0)
		gguf_writer_unkey(w, mark);
	return rc;
}

static int gguf_writer_kv_fixed(gguf_writer *w, const char *key, enum gguf_type t, const void *p,
				lm_diag *d)
{
	int rc = gguf_writer_not_alignment(key, d);
	return rc != 0 ? rc : gguf_writer_kv_fixed_raw(w, key, t, p, d);
}

int gguf_writer_kv_u8(gguf_writer *w, const char *key, uint8_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_UINT8, &v, d);
}

int gguf_writer_kv_i8(gguf_writer *w, const char *key, int8_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_INT8, &v, d);
}

int gguf_writer_kv_u16(gguf_writer *w, const char *key, uint16_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_UINT16, &v, d);
}

int gguf_writer_kv_i16(gguf_writer *w, const char *key, int16_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_INT16, &v, d);
}

int gguf_writer_kv_u32(gguf_writer *w, const char *key, uint32_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_UINT32, &v, d);
}

int gguf_writer_kv_i32(gguf_writer *w, const char *key, int32_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_INT32, &v, d);
}

int gguf_writer_kv_u64(gguf_writer *w, const char *key, uint64_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_UINT64, &v, d);
}

int gguf_writer_kv_i64(gguf_writer *w, const char *key, int64_t v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_INT64, &v, d);
}

int gguf_writer_kv_f32(gguf_writer *w, const char *key, float v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_FLOAT32, &v, d);
}

int gguf_writer_kv_f64(gguf_writer *w, const char *key, double v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_FLOAT64, &v, d);
}

int gguf_writer_kv_bool(gguf_writer *w, const char *key, bool v, lm_diag *d)
{
	return gguf_writer_kv_fixed(w, key, GGUF_TYPE_BOOL, &v, d);
}

int gguf_writer_kv_strn(gguf_writer *w, const char *key, const char *v, uint64_t len, lm_diag *d)
{
	int rc = gguf_writer_not_alignment(key, d);
	if (rc != 0)
		return rc;
	if (v == NULL && len != 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s': NULL string", key);
	size_t mark = w->kv_len;
	if ((rc = gguf_writer_key(w, key, GGUF_TYPE_STRING, d)) != 0)
		return rc;
	if ((rc = gguf_writer_put_str(w, v, len, d)) != 0)
		gguf_writer_unkey(w, mark);
	return rc;
}

int gguf_writer_kv_str(gguf_writer *w, const char *key, const char *v, lm_diag *d)
{
	if (v == NULL)
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s': NULL string",
			       key != NULL ? key : "(null)");
	return gguf_writer_kv_strn(w, key, v, strlen(v), d);
}

/* ---------------------------------------------------------------- arrays */

/* The innermost open array must take one more element of type t. */
static int gguf_writer_take(gguf_writer *w, enum gguf_type t, uint64_t n, lm_diag *d)
{
	int rc = gguf_writer_describing(w, "an array element", d);
	if (rc != 0)
		return rc;
	if (w->depth == 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: array element outside any array");
	enum gguf_type elem = w->stack[w->depth - 1].elem;
	if (elem != t)
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: key '%s': a %s element in an array of %s",
			       w->keys[w->n_kv - 1], gguf_type_name(t), gguf_type_name(elem));
	if (w->stack[w->depth - 1].left < n)
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: key '%s': %llu more elements than the array declared",
			       w->keys[w->n_kv - 1],
			       (unsigned long long)(n - w->stack[w->depth - 1].left));
	return 0;
}

int gguf_writer_arr_begin(gguf_writer *w, const char *key, enum gguf_type elem, uint64_t n,
			  lm_diag *d)
{
	int rc;
	if ((unsigned)elem >= GGUF_TYPE_COUNT)
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: array element type %d is not a GGUF type", (int)elem);
	if (key != NULL) {
		if ((rc = gguf_writer_not_alignment(key, d)) != 0)
			return rc;
		size_t mark = w->kv_len;
		if ((rc = gguf_writer_key(w, key, GGUF_TYPE_ARRAY, d)) != 0)
			return rc;
		if ((rc = gguf_writer_put_le(w, (uint64_t)elem, 4, d)) != 0 ||
		    (rc = gguf_writer_put_le(w, n, 8, d)) != 0) {
			gguf_writer_unkey(w, mark);
			return rc;
		}
	} else {
		if ((rc = gguf_writer_take(w, GGUF_TYPE_ARRAY, 1, d)) != 0)
			return rc;
		if (w->depth == GGUF_WRITER_MAX_DEPTH)
			return lm_fail(d, LM_EINVAL,
				       "gguf writer: key '%s': arrays nested deeper than %d",
				       w->keys[w->n_kv - 1], GGUF_WRITER_MAX_DEPTH);
		if ((rc = gguf_writer_put_le(w, (uint64_t)elem, 4, d)) != 0 ||
		    (rc = gguf_writer_put_le(w, n, 8, d)) != 0)
			return rc;
		w->stack[w->depth - 1].left--;
	}
	w->stack[w->depth].elem = elem;
	w->stack[w->depth].left = n;
	w->depth++;
	return 0;
}

int gguf_writer_arr_elems(gguf_writer *w, const void *values, uint64_t n, lm_diag *d)
{
	if (w->depth == 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: array elements outside any array");
	enum gguf_type t = w->stack[w->depth - 1].elem;
	size_t size = gguf_value_size(t);
	if (size == 0)
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: key '%s': fixed-size elements for an array of %s",
			       w->keys[w->n_kv - 1], gguf_type_name(t));
	int rc = gguf_writer_take(w, t, n, d);
	if (rc != 0)
		return rc;
	if (n > SIZE_MAX / size)
		return lm_fail(d, LM_EOVERFLOW, "gguf writer: %llu array elements",
			       (unsigned long long)n);
	if ((rc = gguf_writer_reserve(w, (size_t)n * size, d)) != 0)
		return rc;
	const uint8_t *p = values;
	for (uint64_t i = 0; i < n; i++)
		if ((rc = gguf_writer_put_value(w, t, p + i * size, d)) != 0)
			return rc;
	w->stack[w->depth - 1].left -= n;
	return 0;
}

int gguf_writer_arr_str(gguf_writer *w, const char *s, uint64_t len, lm_diag *d)
{
	int rc = gguf_writer_take(w, GGUF_TYPE_STRING, 1, d);
	if (rc != 0)
		return rc;
	if (s == NULL && len != 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s': NULL string element",
			       w->keys[w->n_kv - 1]);
	if ((rc = gguf_writer_put_str(w, s, len, d)) != 0)
		return rc;
	w->stack[w->depth - 1].left--;
	return 0;
}

int gguf_writer_arr_end(gguf_writer *w, lm_diag *d)
{
	if (w->depth == 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: array end without an open array");
	if (w->stack[w->depth - 1].left != 0)
		return lm_fail(
			d, LM_EINVAL, "gguf writer: key '%s': array closed %llu elements short",
			w->keys[w->n_kv - 1], (unsigned long long)w->stack[w->depth - 1].left);
	w->depth--;
	return 0;
}

int gguf_writer_kv_arr(gguf_writer *w, const char *key, enum gguf_type elem, const void *values,
		       uint64_t n, lm_diag *d)
{
	if (gguf_value_size(elem) == 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s': %s is not a fixed-size type",
			       key != NULL ? key : "(null)", gguf_type_name(elem));
	if (key == NULL)
		return lm_fail(d, LM_EINVAL, "gguf writer: empty metadata key");
	size_t mark = w->kv_len;
	int rc = gguf_writer_arr_begin(w, key, elem, n, d);
	if (rc != 0)
		return rc;
	if ((rc = gguf_writer_arr_elems(w, values, n, d)) != 0 ||
	    (rc = gguf_writer_arr_end(w, d)) != 0) {
		w->depth = 0;
		gguf_writer_unkey(w, mark);
	}
	return rc;
}

int gguf_writer_kv_arr_str(gguf_writer *w, const char *key, const char *const *strs,
			   const uint64_t *lens, uint64_t n, lm_diag *d)
{
	if (key == NULL)
		return lm_fail(d, LM_EINVAL, "gguf writer: empty metadata key");
	size_t mark = w->kv_len;
	int rc = gguf_writer_arr_begin(w, key, GGUF_TYPE_STRING, n, d);
	if (rc != 0)
		return rc;
	for (uint64_t i = 0; i < n && rc == 0; i++) {
		if (strs[i] == NULL)
			rc = lm_fail(d, LM_EINVAL, "gguf writer: key '%s': string %llu is NULL",
				     key, (unsigned long long)i);
		else
			rc = gguf_writer_arr_str(w, strs[i],
						 lens != NULL ? lens[i] : strlen(strs[i]), d);
	}
	if (rc == 0)
		rc = gguf_writer_arr_end(w, d);
	if (rc != 0) {
		w->depth = 0;
		gguf_writer_unkey(w, mark);
	}
	return rc;
}

/* The elements of a reader's array value, after its header was written. */
static int gguf_writer_copy_elems(gguf_writer *w, const struct gguf_arr *a, lm_diag *d)
{
	int rc = 0;
	if (a->type == GGUF_TYPE_STRING) {
		for (uint64_t i = 0; i < a->n && rc == 0; i++)
			rc = gguf_writer_arr_str(w, a->strs[i], a->str_lens[i], d);
	} else if (a->type == GGUF_TYPE_ARRAY) {
		for (uint64_t i = 0; i < a->n && rc == 0; i++) {
			const struct gguf_arr *sub = &a->arrs[i];
			if ((rc = gguf_writer_arr_begin(w, NULL, sub->type, sub->n, d)) == 0 &&
			    (rc = gguf_writer_copy_elems(w, sub, d)) == 0)
				rc = gguf_writer_arr_end(w, d);
		}
	} else {
		/* The reader leaves fixed-size elements as the file's little-endian bytes. */
		size_t size = gguf_value_size(a->type);
		if ((rc = gguf_writer_take(w, a->type, a->n, d)) != 0)
			return rc;
		if (a->n > SIZE_MAX / size)
			return lm_fail(d, LM_EOVERFLOW, "gguf writer: %llu array elements",
				       (unsigned long long)a->n);
		if ((rc = gguf_writer_put_bytes(w, a->data, (size_t)a->n * size, d)) != 0)
			return rc;
		w->stack[w->depth - 1].left -= a->n;
	}
	return rc;
}

int gguf_writer_kv_copy(gguf_writer *w, const struct gguf_kv *kv, lm_diag *d)
{
	union {
		uint8_t u8;
		uint16_t u16;
		uint32_t u32;
		uint64_t u64;
		float f32;
		double f64;
		bool b;
	} v;
	switch (kv->type) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_INT8:
		v.u8 = (uint8_t)kv->v.u64;
		break;
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_INT16:
		v.u16 = (uint16_t)kv->v.u64;
		break;
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_INT32:
		v.u32 = (uint32_t)kv->v.u64;
		break;
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64:
		v.u64 = kv->v.u64;
		break;
	case GGUF_TYPE_FLOAT32:
		v.f32 = (float)kv->v.f64;
		break;
	case GGUF_TYPE_FLOAT64:
		v.f64 = kv->v.f64;
		break;
	case GGUF_TYPE_BOOL:
		v.b = kv->v.b;
		break;
	case GGUF_TYPE_STRING:
		return gguf_writer_kv_strn(w, kv->key, kv->v.str.ptr, kv->v.str.len, d);
	case GGUF_TYPE_ARRAY: {
		size_t mark = w->kv_len;
		int rc = gguf_writer_arr_begin(w, kv->key, kv->v.arr.type, kv->v.arr.n, d);
		if (rc != 0)
			return rc;
		if ((rc = gguf_writer_copy_elems(w, &kv->v.arr, d)) == 0)
			rc = gguf_writer_arr_end(w, d);
		if (rc != 0) {
			w->depth = 0;
			gguf_writer_unkey(w, mark);
		}
		return rc;
	}
	default:
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s' has unknown type %d", kv->key,
			       (int)kv->type);
	}
	/* Signed values: the reader sign-extended them into i64, whose low bytes are the same two's
	 * complement bits the narrower type stores. */
	return gguf_writer_kv_fixed(w, kv->key, kv->type, &v, d);
}

/* ---------------------------------------------------------------- tensors */

static uint64_t gguf_writer_pad(uint64_t n, uint32_t alignment)
{
	return (alignment - n % alignment) % alignment;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, enum lm_dtype type, uint32_t n_dims,
			   const int64_t *ne, uint64_t *index, lm_diag *d)
{
	int rc = gguf_writer_describing(w, "a tensor", d);
	if (rc != 0)
		return rc;
	if (name == NULL || name[0] == '\0')
		return lm_fail(d, LM_EINVAL, "gguf writer: empty tensor name");
	size_t name_len = strlen(name);
	if (name_len > GGUF_WRITER_MAX_TENSOR_NAME)
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: tensor name '%.40s...' is %zu bytes, over ggml's %d",
			       name, name_len, GGUF_WRITER_MAX_TENSOR_NAME);
	const struct lm_dtype_info *info =
		lm_dtype_in_gguf((uint32_t)type) ? lm_dtype_info((uint32_t)type) : NULL;
	if (info == NULL)
		return lm_fail(d, LM_EINVAL, "gguf writer: tensor '%s': unknown type %d", name,
			       (int)type);
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return lm_fail(d, LM_EINVAL, "gguf writer: tensor '%s': %u dimensions (1..%d)",
			       name, n_dims, GGUF_MAX_DIMS);
	uint64_t elems_per_row = 0, rows = 1, size;
	for (uint32_t i = 0; i < n_dims; i++) {
		if (ne[i] < 1)
			return lm_fail(d, LM_EINVAL, "gguf writer: tensor '%s': ne[%u] = %lld < 1",
				       name, i, (long long)ne[i]);
		if (i == 0) {
			elems_per_row = (uint64_t)ne[0];
		} else {
			if (rows > UINT64_MAX / (uint64_t)ne[i])
				return lm_fail(d, LM_EOVERFLOW,
					       "gguf writer: tensor '%s': shape overflows", name);
			rows *= (uint64_t)ne[i];
		}
	}
	rc = lm_dtype_row_bytes((uint32_t)type, elems_per_row, &size);
	if (rc == LM_EINVAL)
		return lm_fail(
			d, LM_EINVAL,
			"gguf writer: tensor '%s': a %s row holds a multiple of %u elements, "
			"ne[0] is %lld",
			name, info->name, info->blck, (long long)ne[0]);
	if (rc != 0 || (size != 0 && rows > UINT64_MAX / size))
		return lm_fail(d, LM_EOVERFLOW, "gguf writer: tensor '%s': size overflows", name);
	size *= rows;
	uint64_t padded = size + gguf_writer_pad(size, w->alignment);
	if (padded < size || w->data_size > UINT64_MAX - padded)
		return lm_fail(d, LM_EOVERFLOW, "gguf writer: tensor '%s': data section overflows",
			       name);
	for (uint64_t i = 0; i < w->n_tensors; i++)
		if (strcmp(w->tensors[i].name, name) == 0)
			return lm_fail(d, LM_EINVAL, "gguf writer: duplicate tensor name '%s'",
				       name);
	if (w->n_tensors == w->tensors_cap) {
		struct gguf_writer_tensor *p =
			lm_grow(w->tensors, &w->tensors_cap, w->n_tensors + 1, sizeof *p, 64);
		if (p == NULL)
			return lm_fail(d, LM_ENOMEM, "gguf writer: out of memory for tensors");
		w->tensors = p;
	}
	struct gguf_writer_tensor *t = &w->tensors[w->n_tensors];
	memset(t, 0, sizeof *t);
	if ((t->name = strdup(name)) == NULL)
		return lm_fail(d, LM_ENOMEM, "gguf writer: out of memory for tensor '%s'", name);
	t->type = type;
	t->n_dims = n_dims;
	for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++)
		t->ne[i] = i < n_dims ? ne[i] : 1;
	t->offset = w->data_size;
	t->size = size;
	w->data_size += padded;
	if (index != NULL)
		*index = w->n_tensors;
	w->n_tensors++;
	return 0;
}

uint64_t gguf_writer_n_tensors(const gguf_writer *w)
{
	return w->n_tensors;
}

const struct gguf_writer_tensor *gguf_writer_tensor_at(const gguf_writer *w, uint64_t i)
{
	return i < w->n_tensors ? &w->tensors[i] : NULL;
}

/* ---------------------------------------------------------------- output */

static uint64_t gguf_writer_index_size(const gguf_writer *w)
{
	uint64_t n = 4 + 4 + 8 + 8 + w->kv_len;
	for (uint64_t i = 0; i < w->n_tensors; i++)
		n += 8 + strlen(w->tensors[i].name) + 4 + 8 * (uint64_t)w->tensors[i].n_dims + 4 +
		     8;
	return n;
}

uint64_t gguf_writer_header_size(const gguf_writer *w)
{
	uint64_t n = gguf_writer_index_size(w);
	return n + gguf_writer_pad(n, w->alignment);
}

uint64_t gguf_writer_file_size(const gguf_writer *w)
{
	return gguf_writer_header_size(w) + w->data_size;
}

static int gguf_writer_emit(gguf_writer *w, const void *p, size_t n, lm_diag *d)
{
	errno = 0;
	if (n != 0 && fwrite(p, 1, n, w->out) != n) {
		int e = errno;
		w->stage = -1;
		return lm_fail(d, LM_EIO, "gguf writer: write failed: %s",
			       e != 0 ? strerror(e) : "short write");
	}
	return 0;
}

static int gguf_writer_emit_zeros(gguf_writer *w, uint64_t n, lm_diag *d)
{
	static const uint8_t zeros[4096];
	while (n > 0) {
		size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
		int rc = gguf_writer_emit(w, zeros, k, d);
		if (rc != 0)
			return rc;
		n -= k;
	}
	return 0;
}

int gguf_writer_write_header(gguf_writer *w, FILE *out, lm_diag *d)
{
	int rc = gguf_writer_describing(w, "the header", d);
	if (rc != 0)
		return rc;
	if (w->depth != 0)
		return lm_fail(d, LM_EINVAL, "gguf writer: key '%s': array still open",
			       w->keys[w->n_kv - 1]);
	/* The index goes through the metadata buffer's tail, then is dropped again, so the header
	 * is written with one fwrite. */
	size_t kv_len = w->kv_len;
	uint8_t head[24] = {'G', 'G', 'U', 'F'};
	for (int i = 0; i < 4; i++)
		head[4 + i] = (uint8_t)(GGUF_WRITER_VERSION >> (8 * i));
	for (int i = 0; i < 8; i++) {
		head[8 + i] = (uint8_t)(w->n_tensors >> (8 * i));
		head[16 + i] = (uint8_t)(w->n_kv >> (8 * i));
	}
	for (uint64_t i = 0; i < w->n_tensors && rc == 0; i++) {
		const struct gguf_writer_tensor *t = &w->tensors[i];
		rc = gguf_writer_put_str(w, t->name, strlen(t->name), d);
		if (rc == 0)
			rc = gguf_writer_put_le(w, t->n_dims, 4, d);
		for (uint32_t k = 0; k < t->n_dims && rc == 0; k++)
			rc = gguf_writer_put_le(w, (uint64_t)t->ne[k], 8, d);
		if (rc == 0)
			rc = gguf_writer_put_le(w, (uint64_t)t->type, 4, d);
		if (rc == 0)
			rc = gguf_writer_put_le(w, t->offset, 8, d);
	}
	w->out = out;
	if (rc == 0)
		rc = gguf_writer_emit(w, head, sizeof head, d);
	if (rc == 0)
		rc = gguf_writer_emit(w, w->kv, w->kv_len, d);
	w->kv_len = kv_len;
	if (rc == 0)
		rc = gguf_writer_emit_zeros(
			w, gguf_writer_header_size(w) - gguf_writer_index_size(w), d);
	if (rc != 0) {
		w->stage = -1;
		return rc;
	}
	w->header_size = gguf_writer_header_size(w);
	w->stage = 1;
	w->cur = 0;
	w->cur_written = 0;
	return 0;
}

int gguf_writer_write_data(gguf_writer *w, const void *buf, size_t n, lm_diag *d)
{
	if (w->stage != 1)
		return lm_fail(d, LM_EINVAL, "gguf writer: tensor data %s",
			       w->stage == 0 ? "before the header" : "after finish or a failure");
	const uint8_t *p = buf;
	while (n > 0) {
		if (w->cur == w->n_tensors)
			return lm_fail(d, LM_EINVAL,
				       "gguf writer: %zu bytes of tensor data past the last tensor",
				       n);
		const struct gguf_writer_tensor *t = &w->tensors[w->cur];
		uint64_t left = t->size - w->cur_written;
		size_t k = left < n ? (size_t)left : n;
		int rc = gguf_writer_emit(w, p, k, d);
		if (rc != 0)
			return rc;
		p += k;
		n -= k;
		w->cur_written += k;
		if (w->cur_written == t->size) {
			if ((rc = gguf_writer_emit_zeros(w, gguf_writer_pad(t->size, w->alignment),
							 d)) != 0)
				return rc;
			w->cur++;
			w->cur_written = 0;
		}
	}
	return 0;
}

int gguf_writer_finish(gguf_writer *w, lm_diag *d)
{
	if (w->stage != 1)
		return lm_fail(d, LM_EINVAL, "gguf writer: finish %s",
			       w->stage == 0 ? "before the header" : "after finish or a failure");
	if (w->cur != w->n_tensors) {
		w->stage = -1;
		return lm_fail(d, LM_EINVAL,
			       "gguf writer: tensor '%s' got %llu of its %llu bytes; the %llu "
			       "tensors after it got none",
			       w->tensors[w->cur].name, (unsigned long long)w->cur_written,
			       (unsigned long long)w->tensors[w->cur].size,
			       (unsigned long long)(w->n_tensors - w->cur - 1));
	}
	if (fflush(w->out) != 0) {
		int e = errno;
		w->stage = -1;
		return lm_fail(d, LM_EIO, "gguf writer: flush failed: %s", strerror(e));
	}
	w->stage = 2;
	return 0;
}

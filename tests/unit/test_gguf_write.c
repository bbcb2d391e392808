/* The GGUF writer, checked by the independent reader (common/format/gguf.c) and against files written by
 * other implementations: rewriting stories260K.gguf (written by llama.cpp's tools) and the
 * vocabulary-only files through gguf_writer_kv_copy must reproduce them byte for byte. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/format/gguf.h"
#include "common/format/gguf_write.h"

static char *shared_path(const char *rel)
{
	static char buf[4096];
	const char *root = getenv("LM_SHARED");
	snprintf(buf, sizeof buf, "%s/%s", root != NULL ? root : "../shared", rel);
	return buf;
}

static void *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	cr_assert_not_null(fp, "open %s", path);
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	void *buf = malloc((size_t)n);
	cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

/* An in-memory output: the header and data of one writer, ready for gguf_open_mem. */
struct sink {
	char *buf;
	size_t len;
	FILE *fp;
};

static void sink_open(struct sink *s)
{
	memset(s, 0, sizeof *s);
	s->fp = open_memstream(&s->buf, &s->len);
	cr_assert_not_null(s->fp);
}

static void sink_close(struct sink *s)
{
	cr_assert_eq(fclose(s->fp), 0);
	s->fp = NULL;
}

#define OK(call)                                                                      \
	do {                                                                          \
		lm_diag d_ = {{0}};                                                   \
		int rc_ = (call);                                                     \
		cr_assert_eq(rc_, 0, "%s: %s (%s)", #call, d_.msg, lm_err_name(rc_)); \
	} while (0)
/* The call fails with `code` and a message containing `needle`. */
#define FAILS(call, code, needle)                                                                  \
	do {                                                                                       \
		lm_diag d_ = {{0}};                                                                \
		int rc_ = (call);                                                                  \
		cr_assert_eq(rc_, (code), "%s gave %s: %s", #call, lm_err_name(rc_), d_.msg);      \
		cr_assert_not_null(strstr(d_.msg, (needle)), "%s: message '%s' lacks '%s'", #call, \
				   d_.msg, (needle));                                              \
	} while (0)

/* Writes the header, no tensors, and opens the result with the reader. */
static gguf_file *roundtrip(gguf_writer *w, struct sink *s)
{
	sink_open(s);
	OK(gguf_writer_write_header(w, s->fp, &d_));
	OK(gguf_writer_finish(w, &d_));
	sink_close(s);
	cr_assert_eq(s->len, gguf_writer_file_size(w));
	gguf_file *f = NULL;
	OK(gguf_open_mem(s->buf, s->len, &f, &d_));
	return f;
}

Test(gguf_write, every_scalar_type_reads_back)
{
	gguf_writer w;
	struct sink s;
	OK(gguf_writer_init(&w, 0, &d_));
	OK(gguf_writer_kv_u8(&w, "t.u8", 200, &d_));
	OK(gguf_writer_kv_i8(&w, "t.i8", -100, &d_));
	OK(gguf_writer_kv_u16(&w, "t.u16", 65000, &d_));
	OK(gguf_writer_kv_i16(&w, "t.i16", -32000, &d_));
	OK(gguf_writer_kv_u32(&w, "t.u32", 4000000000u, &d_));
	OK(gguf_writer_kv_i32(&w, "t.i32", -2000000000, &d_));
	OK(gguf_writer_kv_u64(&w, "t.u64", 0xfedcba9876543210ull, &d_));
	OK(gguf_writer_kv_i64(&w, "t.i64", -0x123456789abcdefll, &d_));
	OK(gguf_writer_kv_f32(&w, "t.f32", 1.0e-5f, &d_));
	OK(gguf_writer_kv_f64(&w, "t.f64", -3.141592653589793, &d_));
	OK(gguf_writer_kv_bool(&w, "t.true", true, &d_));
	OK(gguf_writer_kv_bool(&w, "t.false", false, &d_));
	OK(gguf_writer_kv_str(&w, "t.str", "h\xc3\xa9llo \xe2\x96\x81world", &d_));
	OK(gguf_writer_kv_str(&w, "t.empty", "", &d_));
	OK(gguf_writer_kv_strn(&w, "t.nul", "a\0b", 3, &d_));
	gguf_file *f = roundtrip(&w, &s);

	cr_expect_eq(gguf_version(f), 3);
	cr_expect_eq(gguf_alignment(f), 32);
	cr_expect_null(gguf_find(f, "general.alignment"), "alignment 0 writes no key");
	cr_expect_eq(gguf_n_kv(f), 15);
	cr_expect_eq(gguf_n_tensors(f), 0);
	const char *order[] = {"t.u8",   "t.i8",    "t.u16", "t.i16",   "t.u32",
			       "t.i32",  "t.u64",   "t.i64", "t.f32",   "t.f64",
			       "t.true", "t.false", "t.str", "t.empty", "t.nul"};
	const enum gguf_type types[] = {GGUF_TYPE_UINT8,   GGUF_TYPE_INT8,   GGUF_TYPE_UINT16,
					GGUF_TYPE_INT16,   GGUF_TYPE_UINT32, GGUF_TYPE_INT32,
					GGUF_TYPE_UINT64,  GGUF_TYPE_INT64,  GGUF_TYPE_FLOAT32,
					GGUF_TYPE_FLOAT64, GGUF_TYPE_BOOL,   GGUF_TYPE_BOOL,
					GGUF_TYPE_STRING,  GGUF_TYPE_STRING, GGUF_TYPE_STRING};
	for (int i = 0; i < 15; i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, (uint64_t)i);
		cr_assert_str_eq(kv->key, order[i], "keys keep their order");
		cr_expect_eq(kv->type, types[i], "%s: type %s", kv->key, gguf_type_name(kv->type));
	}
	cr_expect_eq(gguf_find(f, "t.u8")->v.u64, 200);
	cr_expect_eq(gguf_find(f, "t.i8")->v.i64, -100);
	cr_expect_eq(gguf_find(f, "t.u16")->v.u64, 65000);
	cr_expect_eq(gguf_find(f, "t.i16")->v.i64, -32000);
	cr_expect_eq(gguf_find(f, "t.u32")->v.u64, 4000000000u);
	cr_expect_eq(gguf_find(f, "t.i32")->v.i64, -2000000000);
	cr_expect_eq(gguf_find(f, "t.u64")->v.u64, 0xfedcba9876543210ull);
	cr_expect_eq(gguf_find(f, "t.i64")->v.i64, -0x123456789abcdefll);
	cr_expect_eq((float)gguf_find(f, "t.f32")->v.f64, 1.0e-5f);
	cr_expect_eq(gguf_find(f, "t.f64")->v.f64, -3.141592653589793);
	cr_expect_eq(gguf_find(f, "t.true")->v.b, true);
	cr_expect_eq(gguf_find(f, "t.false")->v.b, false);
	cr_expect_str_eq(gguf_find(f, "t.str")->v.str.ptr, "h\xc3\xa9llo \xe2\x96\x81world");
	cr_expect_eq(gguf_find(f, "t.empty")->v.str.len, 0);
	const struct gguf_kv *nul = gguf_find(f, "t.nul");
	cr_expect_eq(nul->v.str.len, 3);
	cr_expect_eq(memcmp(nul->v.str.ptr, "a\0b", 3), 0);

	/* The exact bytes of one key, by hand: u64 length, key, u32 type, value. */
	const uint8_t want[] = {4, 0, 0, 0, 0, 0, 0, 0, 't', '.', 'u', '8', 0, 0, 0, 0, 200};
	cr_expect_eq(memcmp(s.buf + 24, want, sizeof want), 0, "first key's encoding");

	gguf_close(f);
	free(s.buf);
	gguf_writer_fini(&w);
}

Test(gguf_write, arrays_of_every_type_read_back)
{
	gguf_writer w;
	struct sink s;
	const uint8_t u8[] = {0, 1, 255};
	const int8_t i8[] = {-128, 0, 127};
	const uint16_t u16[] = {0, 65535};
	const int16_t i16[] = {-32768, 32767, -1};
	const uint32_t u32[] = {1, 0xffffffffu};
	const int32_t i32[] = {-7, 0, 2147483647, -2147483647 - 1};
	const uint64_t u64[] = {0xffffffffffffffffull, 3};
	const int64_t i64[] = {INT64_MIN, INT64_MAX, -1};
	const float f32[] = {0.5f, -0.0f, 3.0e38f, 1e-40f};
	const double f64[] = {1e300, -2.5};
	const bool bl[] = {true, false, true};
	const char *strs[] = {"<unk>", "", "\xe2\x96\x81the", "<0x0A>"};

	OK(gguf_writer_init(&w, 0, &d_));
	OK(gguf_writer_kv_arr(&w, "a.u8", GGUF_TYPE_UINT8, u8, 3, &d_));
	OK(gguf_writer_kv_arr(&w, "a.i8", GGUF_TYPE_INT8, i8, 3, &d_));
	OK(gguf_writer_kv_arr(&w, "a.u16", GGUF_TYPE_UINT16, u16, 2, &d_));
	OK(gguf_writer_kv_arr(&w, "a.i16", GGUF_TYPE_INT16, i16, 3, &d_));
	OK(gguf_writer_kv_arr(&w, "a.u32", GGUF_TYPE_UINT32, u32, 2, &d_));
	OK(gguf_writer_kv_arr(&w, "a.i32", GGUF_TYPE_INT32, i32, 4, &d_));
	OK(gguf_writer_kv_arr(&w, "a.u64", GGUF_TYPE_UINT64, u64, 2, &d_));
	OK(gguf_writer_kv_arr(&w, "a.i64", GGUF_TYPE_INT64, i64, 3, &d_));
	OK(gguf_writer_kv_arr(&w, "a.f32", GGUF_TYPE_FLOAT32, f32, 4, &d_));
	OK(gguf_writer_kv_arr(&w, "a.f64", GGUF_TYPE_FLOAT64, f64, 2, &d_));
	OK(gguf_writer_kv_arr(&w, "a.bool", GGUF_TYPE_BOOL, bl, 3, &d_));
	OK(gguf_writer_kv_arr_str(&w, "a.str", strs, NULL, 4, &d_));
	OK(gguf_writer_kv_arr(&w, "a.empty", GGUF_TYPE_INT32, NULL, 0, &d_));
	/* Elements given in pieces through the builder. */
	OK(gguf_writer_arr_begin(&w, "a.pieces", GGUF_TYPE_UINT32, 5, &d_));
	OK(gguf_writer_arr_elems(&w, u32, 2, &d_));
	OK(gguf_writer_arr_elems(&w, u32, 1, &d_));
	OK(gguf_writer_arr_elems(&w, u32 + 1, 1, &d_));
	OK(gguf_writer_arr_elems(&w, u32, 1, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	gguf_file *f = roundtrip(&w, &s);

	const struct gguf_arr *a;
	OK(gguf_get_arr(f, "a.u8", GGUF_TYPE_UINT8, &a, &d_));
	for (int i = 0; i < 3; i++)
		cr_expect_eq(gguf_arr_u64(a, (uint64_t)i), u8[i]);
	OK(gguf_get_arr(f, "a.i8", GGUF_TYPE_INT8, &a, &d_));
	for (int i = 0; i < 3; i++)
		cr_expect_eq(gguf_arr_i64(a, (uint64_t)i), i8[i]);
	OK(gguf_get_arr(f, "a.u16", GGUF_TYPE_UINT16, &a, &d_));
	for (int i = 0; i < 2; i++)
		cr_expect_eq(gguf_arr_u64(a, (uint64_t)i), u16[i]);
	OK(gguf_get_arr(f, "a.i16", GGUF_TYPE_INT16, &a, &d_));
	for (int i = 0; i < 3; i++)
		cr_expect_eq(gguf_arr_i64(a, (uint64_t)i), i16[i]);
	OK(gguf_get_arr(f, "a.u32", GGUF_TYPE_UINT32, &a, &d_));
	for (int i = 0; i < 2; i++)
		cr_expect_eq(gguf_arr_u64(a, (uint64_t)i), u32[i]);
	OK(gguf_get_arr(f, "a.i32", GGUF_TYPE_INT32, &a, &d_));
	for (int i = 0; i < 4; i++)
		cr_expect_eq(gguf_arr_i64(a, (uint64_t)i), i32[i]);
	OK(gguf_get_arr(f, "a.u64", GGUF_TYPE_UINT64, &a, &d_));
	for (int i = 0; i < 2; i++)
		cr_expect_eq(gguf_arr_u64(a, (uint64_t)i), u64[i]);
	OK(gguf_get_arr(f, "a.i64", GGUF_TYPE_INT64, &a, &d_));
	for (int i = 0; i < 3; i++)
		cr_expect_eq(gguf_arr_i64(a, (uint64_t)i), i64[i]);
	OK(gguf_get_arr(f, "a.f32", GGUF_TYPE_FLOAT32, &a, &d_));
	for (int i = 0; i < 4; i++) {
		float got = (float)gguf_arr_f64(a, (uint64_t)i);
		cr_expect_eq(memcmp(&got, &f32[i], 4), 0, "f32[%d] bits", i);
	}
	OK(gguf_get_arr(f, "a.f64", GGUF_TYPE_FLOAT64, &a, &d_));
	for (int i = 0; i < 2; i++)
		cr_expect_eq(gguf_arr_f64(a, (uint64_t)i), f64[i]);
	OK(gguf_get_arr(f, "a.bool", GGUF_TYPE_BOOL, &a, &d_));
	cr_expect_eq(a->n, 3);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(a->data[i], (uint8_t)bl[i]);
	OK(gguf_get_arr(f, "a.str", GGUF_TYPE_STRING, &a, &d_));
	cr_assert_eq(a->n, 4);
	for (int i = 0; i < 4; i++) {
		cr_expect_str_eq(a->strs[i], strs[i]);
		cr_expect_eq(a->str_lens[i], strlen(strs[i]));
	}
	OK(gguf_get_arr(f, "a.empty", GGUF_TYPE_INT32, &a, &d_));
	cr_expect_eq(a->n, 0);
	OK(gguf_get_arr(f, "a.pieces", GGUF_TYPE_UINT32, &a, &d_));
	const uint32_t want[] = {1, 0xffffffffu, 1, 0xffffffffu, 1};
	cr_assert_eq(a->n, 5);
	for (int i = 0; i < 5; i++)
		cr_expect_eq(gguf_arr_u64(a, (uint64_t)i), want[i]);
	gguf_close(f);
	free(s.buf);
	gguf_writer_fini(&w);
}

Test(gguf_write, nested_arrays_read_back)
{
	gguf_writer w;
	struct sink s;
	const int32_t row0[] = {1, 2, 3}, row2[] = {-4};
	OK(gguf_writer_init(&w, 0, &d_));
	/* [[1, 2, 3], [], [-4]] */
	OK(gguf_writer_arr_begin(&w, "n.i32", GGUF_TYPE_ARRAY, 3, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_INT32, 3, &d_));
	OK(gguf_writer_arr_elems(&w, row0, 3, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_INT32, 0, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_INT32, 1, &d_));
	OK(gguf_writer_arr_elems(&w, row2, 1, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	/* [["a", "bc"], [["x"]]]: an array whose elements are arrays of different types. */
	OK(gguf_writer_arr_begin(&w, "n.mixed", GGUF_TYPE_ARRAY, 2, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_STRING, 2, &d_));
	OK(gguf_writer_arr_str(&w, "a", 1, &d_));
	OK(gguf_writer_arr_str(&w, "bc", 2, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_ARRAY, 1, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_STRING, 1, &d_));
	OK(gguf_writer_arr_str(&w, "x", 1, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_arr_end(&w, &d_));
	/* The deepest nesting the writer (and the reader) allows, one u8 at the bottom. */
	OK(gguf_writer_arr_begin(&w, "n.deep", GGUF_TYPE_ARRAY, 1, &d_));
	for (int i = 1; i < GGUF_WRITER_MAX_DEPTH - 1; i++)
		OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_ARRAY, 1, &d_));
	OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_UINT8, 1, &d_));
	const uint8_t seven = 7;
	OK(gguf_writer_arr_elems(&w, &seven, 1, &d_));
	for (int i = 0; i < GGUF_WRITER_MAX_DEPTH; i++)
		OK(gguf_writer_arr_end(&w, &d_));
	OK(gguf_writer_kv_u32(&w, "n.after", 9, &d_));
	gguf_file *f = roundtrip(&w, &s);

	const struct gguf_arr *a;
	OK(gguf_get_arr(f, "n.i32", GGUF_TYPE_ARRAY, &a, &d_));
	cr_assert_eq(a->n, 3);
	cr_assert_eq(a->arrs[0].type, GGUF_TYPE_INT32);
	cr_assert_eq(a->arrs[0].n, 3);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(gguf_arr_i64(&a->arrs[0], (uint64_t)i), row0[i]);
	cr_expect_eq(a->arrs[1].n, 0);
	cr_assert_eq(a->arrs[2].n, 1);
	cr_expect_eq(gguf_arr_i64(&a->arrs[2], 0), -4);
	OK(gguf_get_arr(f, "n.mixed", GGUF_TYPE_ARRAY, &a, &d_));
	cr_assert_eq(a->n, 2);
	cr_assert_eq(a->arrs[0].type, GGUF_TYPE_STRING);
	cr_expect_str_eq(a->arrs[0].strs[1], "bc");
	cr_assert_eq(a->arrs[1].type, GGUF_TYPE_ARRAY);
	cr_expect_str_eq(a->arrs[1].arrs[0].strs[0], "x");
	OK(gguf_get_arr(f, "n.deep", GGUF_TYPE_ARRAY, &a, &d_));
	for (int i = 1; i < GGUF_WRITER_MAX_DEPTH; i++) {
		cr_assert_eq(a->n, 1);
		a = &a->arrs[0];
	}
	cr_assert_eq(a->type, GGUF_TYPE_UINT8);
	cr_expect_eq(gguf_arr_u64(a, 0), 7);
	cr_expect_eq(gguf_find(f, "n.after")->v.u64, 9);
	gguf_close(f);
	free(s.buf);
	gguf_writer_fini(&w);
}

/* Fills a tensor's bytes with a pattern that depends on the tensor and the byte. */
static uint8_t pattern(uint64_t t, uint64_t i)
{
	return (uint8_t)(t * 131 + i * 7 + (i >> 8));
}

/* Tensors of sizes that are rarely a multiple of the alignment, at several alignments, written
 * whole or in chunks that straddle tensors. */
static void check_tensors(uint32_t alignment, size_t chunk)
{
	struct spec {
		const char *name;
		enum lm_dtype type;
		uint32_t n_dims;
		int64_t ne[4];
		uint64_t bytes;
	} specs[] = {
		{"a", LM_F32, 1, {3}, 12},
		{"blk.0.b", LM_I8, 2, {5, 1}, 5},
		{"blk.1.c", LM_Q8_0, 2, {32, 3}, 102},
		{"d", LM_F16, 3, {7, 2, 1}, 28},
		{"e", LM_Q4_K, 1, {256}, 144},
		{"f", LM_BF16, 4, {1, 1, 1, 1}, 2},
		{"g", LM_Q6_K, 2, {512, 2}, 840},
	};
	const int n = sizeof specs / sizeof specs[0];
	gguf_writer w;
	struct sink s;
	OK(gguf_writer_init(&w, alignment, &d_));
	OK(gguf_writer_kv_str(&w, "general.architecture", "test", &d_));
	for (int i = 0; i < n; i++) {
		uint64_t idx = 99;
		OK(gguf_writer_add_tensor(&w, specs[i].name, specs[i].type, specs[i].n_dims,
					  specs[i].ne, &idx, &d_));
		cr_assert_eq(idx, (uint64_t)i);
		cr_assert_eq(gguf_writer_tensor_at(&w, idx)->size, specs[i].bytes, "%s size",
			     specs[i].name);
	}
	uint64_t total = 0;
	for (int i = 0; i < n; i++)
		total += specs[i].bytes;
	uint8_t *all = malloc(total);
	for (int i = 0, k = 0; i < n; i++)
		for (uint64_t j = 0; j < specs[i].bytes; j++)
			all[k++] = pattern((uint64_t)i, j);

	sink_open(&s);
	OK(gguf_writer_write_header(&w, s.fp, &d_));
	cr_assert_eq((uint64_t)ftell(s.fp), gguf_writer_header_size(&w));
	for (uint64_t off = 0; off < total; off += chunk) {
		size_t k = total - off < chunk ? (size_t)(total - off) : chunk;
		OK(gguf_writer_write_data(&w, all + off, k, &d_));
	}
	OK(gguf_writer_finish(&w, &d_));
	sink_close(&s);
	cr_assert_eq(s.len, gguf_writer_file_size(&w));

	uint32_t al = alignment != 0 ? alignment : 32;
	cr_assert_eq(s.len % al, 0, "the file ends padded");
	gguf_file *f = NULL;
	OK(gguf_open_mem(s.buf, s.len, &f, &d_));
	cr_expect_eq(gguf_alignment(f), al);
	cr_expect_eq(gguf_find(f, "general.alignment") != NULL, alignment != 0);
	cr_expect_eq(gguf_data_offset(f), gguf_writer_header_size(&w));
	cr_assert_eq(gguf_n_tensors(f), (uint64_t)n);
	OK(gguf_map(f, NULL, NULL, false, NULL, &d_));
	for (int i = 0; i < n; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, (uint64_t)i);
		cr_assert_str_eq(t->name, specs[i].name);
		cr_expect_eq(t->type, specs[i].type);
		cr_expect_eq(t->n_dims, specs[i].n_dims);
		for (uint32_t k = 0; k < GGUF_MAX_DIMS; k++)
			cr_expect_eq(t->ne[k], k < specs[i].n_dims ? specs[i].ne[k] : 1);
		cr_expect_eq(t->size, specs[i].bytes);
		cr_expect_eq(t->offset % al, 0, "%s offset %llu", t->name,
			     (unsigned long long)t->offset);
		const uint8_t *p = t->data;
		for (uint64_t j = 0; j < t->size; j++)
			cr_assert_eq(p[j], pattern((uint64_t)i, j), "%s byte %llu", t->name,
				     (unsigned long long)j);
		/* Padding after it is zero. */
		uint64_t end = gguf_data_offset(f) + t->offset + t->size;
		for (uint64_t j = end; j % al != 0; j++)
			cr_assert_eq((uint8_t)s.buf[j], 0, "padding byte %llu",
				     (unsigned long long)j);
	}
	cr_expect_eq(gguf_tensor_at(f, 1)->layer, 0);
	cr_expect_eq(gguf_tensor_at(f, 2)->layer, 1);
	gguf_close(f);
	free(all);
	free(s.buf);
	gguf_writer_fini(&w);
}

Test(gguf_write, tensors_at_every_alignment)
{
	const uint32_t aligns[] = {0, 1, 2, 8, 32, 64, 4096};
	const size_t chunks[] = {1, 7, 100, 1 << 20};
	for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
		for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
			check_tensors(aligns[a], chunks[c]);
}

/* Rewrites a file through the writer: every key copied, every tensor re-added and its bytes
 * streamed. Returns the new image. */
static char *rewrite(const char *path, size_t *len)
{
	gguf_file *f = NULL;
	OK(gguf_open(path, &f, &d_));
	OK(gguf_map(f, NULL, NULL, false, NULL, &d_));
	gguf_writer w;
	const struct gguf_kv *al = gguf_find(f, "general.alignment");
	OK(gguf_writer_init(&w, al != NULL ? gguf_alignment(f) : 0, &d_));
	for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);
		if (strcmp(kv->key, "general.alignment") != 0)
			OK(gguf_writer_kv_copy(&w, kv, &d_));
	}
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		OK(gguf_writer_add_tensor(&w, t->name, t->type, t->n_dims, t->ne, NULL, &d_));
	}
	struct sink s;
	sink_open(&s);
	OK(gguf_writer_write_header(&w, s.fp, &d_));
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		OK(gguf_writer_write_data(&w, t->data, (size_t)t->size, &d_));
	}
	OK(gguf_writer_finish(&w, &d_));
	sink_close(&s);
	gguf_writer_fini(&w);
	gguf_close(f);
	*len = s.len;
	return s.buf;
}

Test(gguf_write, rewriting_real_files_reproduces_their_bytes)
{
	const char *files[] = {"models/stories260K.gguf", "tokenizer/ggml-vocab-llama-spm.gguf",
			       "tokenizer/ggml-vocab-gpt-2.gguf"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		size_t want_len, got_len;
		char *want = slurp(shared_path(files[i]), &want_len);
		char *got = rewrite(shared_path(files[i]), &got_len);
		/* The vocabulary files (no tensors) were written by gguf-py, which leaves the header
		 * unpadded when no tensor follows; ggml's writer, like ours, pads it. */
		size_t padded = (want_len + 31) / 32 * 32;
		cr_assert(got_len == want_len || got_len == padded, "%s: %zu bytes, want %zu",
			  files[i], got_len, want_len);
		size_t first = 0;
		while (first < want_len && got[first] == want[first])
			first++;
		cr_expect_eq(first, want_len, "%s: first difference at byte %zu", files[i], first);
		for (size_t k = want_len; k < got_len; k++)
			cr_expect_eq(got[k], 0, "%s: padding byte %zu", files[i], k);
		free(got);
		free(want);
	}
}

Test(gguf_write, misuse_is_refused_with_a_message)
{
	gguf_writer w;
	const int64_t ne[2] = {32, 2};
	const uint32_t one = 1;
	FAILS(gguf_writer_init(&w, 3, &d_), LM_EINVAL, "power of two");
	FAILS(gguf_writer_init(&w, 1u << 31, &d_), LM_EINVAL, "power of two");
	gguf_writer_fini(&w);

	OK(gguf_writer_init(&w, 64, &d_));
	FAILS(gguf_writer_kv_u32(&w, "general.alignment", 32, &d_), LM_EINVAL, "gguf_writer_init");
	FAILS(gguf_writer_kv_str(&w, "general.alignment", "x", &d_), LM_EINVAL, "gguf_writer_init");
	FAILS(gguf_writer_kv_u32(&w, "", 1, &d_), LM_EINVAL, "empty");
	OK(gguf_writer_kv_u32(&w, "k", 1, &d_));
	FAILS(gguf_writer_kv_str(&w, "k", "again", &d_), LM_EINVAL, "duplicate metadata key 'k'");
	FAILS(gguf_writer_kv_arr(&w, "k", GGUF_TYPE_UINT32, &one, 1, &d_), LM_EINVAL, "duplicate");
	FAILS(gguf_writer_kv_arr(&w, "s", GGUF_TYPE_STRING, &one, 1, &d_), LM_EINVAL,
	      "not a fixed-size type");
	FAILS(gguf_writer_arr_elems(&w, &one, 1, &d_), LM_EINVAL, "outside any array");
	FAILS(gguf_writer_arr_end(&w, &d_), LM_EINVAL, "without an open array");
	FAILS(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_UINT32, 1, &d_), LM_EINVAL,
	      "outside any array");
	FAILS(gguf_writer_arr_begin(&w, "bad", (enum gguf_type)13, 1, &d_), LM_EINVAL,
	      "not a GGUF type");

	OK(gguf_writer_arr_begin(&w, "arr", GGUF_TYPE_UINT32, 2, &d_));
	FAILS(gguf_writer_kv_u32(&w, "other", 1, &d_), LM_EINVAL, "array is still open");
	FAILS(gguf_writer_arr_str(&w, "x", 1, &d_), LM_EINVAL,
	      "a string element in an array of uint32");
	FAILS(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_UINT32, 1, &d_), LM_EINVAL,
	      "array of uint32");
	OK(gguf_writer_arr_elems(&w, &one, 1, &d_));
	FAILS(gguf_writer_arr_end(&w, &d_), LM_EINVAL, "1 elements short");
	const uint32_t two[2] = {2, 3};
	FAILS(gguf_writer_arr_elems(&w, two, 2, &d_), LM_EINVAL, "1 more elements");
	struct sink s;
	sink_open(&s);
	FAILS(gguf_writer_write_header(&w, s.fp, &d_), LM_EINVAL, "array still open");
	FAILS(gguf_writer_finish(&w, &d_), LM_EINVAL, "before the header");
	OK(gguf_writer_arr_elems(&w, &one, 1, &d_));
	OK(gguf_writer_arr_end(&w, &d_));

	FAILS(gguf_writer_add_tensor(&w, "t", LM_Q4_K, 2, ne, NULL, &d_), LM_EINVAL,
	      "multiple of 256");
	FAILS(gguf_writer_add_tensor(&w, "t", LM_F32, 5, ne, NULL, &d_), LM_EINVAL, "dimensions");
	FAILS(gguf_writer_add_tensor(&w, "t", LM_F32, 0, ne, NULL, &d_), LM_EINVAL, "dimensions");
	FAILS(gguf_writer_add_tensor(&w, "t", (enum lm_dtype)5, 2, ne, NULL, &d_), LM_EINVAL,
	      "unknown type");
	const int64_t zero[2] = {32, 0};
	FAILS(gguf_writer_add_tensor(&w, "t", LM_F32, 2, zero, NULL, &d_), LM_EINVAL, "ne[1] = 0");
	char longname[80];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	FAILS(gguf_writer_add_tensor(&w, longname, LM_F32, 2, ne, NULL, &d_), LM_EINVAL,
	      "over ggml's 63");
	const int64_t huge[4] = {1 << 30, 1 << 30, 1 << 30, 1 << 30};
	FAILS(gguf_writer_add_tensor(&w, "huge", LM_F32, 4, huge, NULL, &d_), LM_EOVERFLOW,
	      "overflows");
	OK(gguf_writer_add_tensor(&w, "t", LM_Q8_0, 2, ne, NULL, &d_));
	FAILS(gguf_writer_add_tensor(&w, "t", LM_F32, 2, ne, NULL, &d_), LM_EINVAL,
	      "duplicate tensor name 't'");

	uint8_t buf[200] = {0};
	FAILS(gguf_writer_write_data(&w, buf, 1, &d_), LM_EINVAL, "before the header");
	FAILS(gguf_writer_finish(&w, &d_), LM_EINVAL, "before the header");
	OK(gguf_writer_write_header(&w, s.fp, &d_));
	FAILS(gguf_writer_kv_u32(&w, "late", 1, &d_), LM_EINVAL, "after the header");
	FAILS(gguf_writer_add_tensor(&w, "late", LM_F32, 2, ne, NULL, &d_), LM_EINVAL,
	      "after the header");
	FAILS(gguf_writer_write_header(&w, s.fp, &d_), LM_EINVAL, "after the header");
	OK(gguf_writer_write_data(&w, buf, 60, &d_));
	FAILS(gguf_writer_write_data(&w, buf, 10, &d_), LM_EINVAL,
	      "2 bytes of tensor data past the last tensor");
	gguf_writer_fini(&w);
	sink_close(&s);
	free(s.buf);

	/* A tensor short of bytes at finish. */
	OK(gguf_writer_init(&w, 0, &d_));
	OK(gguf_writer_add_tensor(&w, "a", LM_F32, 2, ne, NULL, &d_));
	OK(gguf_writer_add_tensor(&w, "b", LM_F32, 2, ne, NULL, &d_));
	sink_open(&s);
	OK(gguf_writer_write_header(&w, s.fp, &d_));
	OK(gguf_writer_write_data(&w, buf, 100, &d_));
	FAILS(gguf_writer_finish(&w, &d_), LM_EINVAL, "tensor 'a' got 100 of its 256 bytes");
	FAILS(gguf_writer_write_data(&w, buf, 1, &d_), LM_EINVAL, "after finish or a failure");
	gguf_writer_fini(&w);
	gguf_writer_fini(&w); /* harmless twice */
	gguf_writer_fini(NULL);
	sink_close(&s);
	free(s.buf);
}

Test(gguf_write, a_failing_stream_is_reported)
{
	gguf_writer w;
	OK(gguf_writer_init(&w, 0, &d_));
	OK(gguf_writer_kv_str(&w, "general.architecture", "llama", &d_));
	FILE *full = fopen("/dev/full", "wb");
	cr_assert_not_null(full);
	setvbuf(full, NULL, _IONBF, 0);
	FAILS(gguf_writer_write_header(&w, full, &d_), LM_EIO, "write failed");
	FAILS(gguf_writer_finish(&w, &d_), LM_EINVAL, "after finish or a failure");
	fclose(full);
	gguf_writer_fini(&w);
}

Test(gguf_write, a_file_on_disk_opens_with_the_mmap_reader)
{
	char path[] = "/tmp/lm_gguf_write_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *fp = fdopen(fd, "wb");
	gguf_writer w;
	const int64_t ne[2] = {4, 3};
	const float vals[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12};
	OK(gguf_writer_init(&w, 0, &d_));
	OK(gguf_writer_kv_str(&w, "general.architecture", "llama", &d_));
	OK(gguf_writer_add_tensor(&w, "w", LM_F32, 2, ne, NULL, &d_));
	OK(gguf_writer_write_header(&w, fp, &d_));
	OK(gguf_writer_write_data(&w, vals, sizeof vals, &d_));
	OK(gguf_writer_finish(&w, &d_));
	cr_assert_eq(fclose(fp), 0);
	gguf_file *f = NULL;
	int rc = gguf_open(path, &f, NULL);
	unlink(path); /* the open file outlives its name; a failed assert leaves nothing behind */
	cr_assert_eq(rc, 0);
	cr_expect_eq(gguf_file_size(f), gguf_writer_file_size(&w));
	OK(gguf_map(f, NULL, NULL, false, NULL, &d_));
	cr_expect_eq(memcmp(gguf_find_tensor(f, "w")->data, vals, sizeof vals), 0);
	gguf_close(f);
	gguf_writer_fini(&w);
}

Test(gguf_write, nesting_past_the_limit_is_refused)
{
	gguf_writer w;
	OK(gguf_writer_init(&w, 0, &d_));
	OK(gguf_writer_arr_begin(&w, "deep", GGUF_TYPE_ARRAY, 1, &d_));
	for (int i = 1; i < GGUF_WRITER_MAX_DEPTH; i++)
		OK(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_ARRAY, 1, &d_));
	FAILS(gguf_writer_arr_begin(&w, NULL, GGUF_TYPE_UINT8, 0, &d_), LM_EINVAL,
	      "arrays nested deeper than 8");
	gguf_writer_fini(&w);
}

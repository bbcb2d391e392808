/* The GGUF reader against the real stories260K file, the vocabulary-only files, and hand-built
 * hostile images: every malformed input must give LM_EFORMAT (or LM_ENOMEM) and a message, never
 * a crash. Run under ASan to make "never a crash" mean something. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/format/gguf.h"

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

/* ------------------------------------------------------------ a tiny image builder */

struct img {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct img *m, const void *src, size_t n)
{
	if (m->len + n > m->cap) {
		m->cap = (m->len + n) * 2 + 64;
		m->p = realloc(m->p, m->cap);
	}
	memcpy(m->p + m->len, src, n);
	m->len += n;
}
static void put_u32(struct img *m, uint32_t v)
{
	put(m, &v, 4);
}
static void put_u64(struct img *m, uint64_t v)
{
	put(m, &v, 8);
}
static void put_str(struct img *m, const char *s)
{
	put_u64(m, strlen(s));
	put(m, s, strlen(s));
}
static void put_header(struct img *m, uint64_t n_tensors, uint64_t n_kv)
{
	put(m, "GGUF", 4);
	put_u32(m, 3);
	put_u64(m, n_tensors);
	put_u64(m, n_kv);
}
static void put_tensor(struct img *m, const char *name, uint64_t ne0, uint64_t ne1, uint32_t type,
		       uint64_t off)
{
	put_str(m, name);
	put_u32(m, 2);
	put_u64(m, ne0);
	put_u64(m, ne1);
	put_u32(m, type);
	put_u64(m, off);
}
static void pad_to(struct img *m, size_t align)
{
	static const uint8_t z[64];
	while (m->len % align)
		put(m, z, 1);
}

static int open_img(struct img *m, gguf_file **f, lm_diag *d)
{
	return gguf_open_mem(m->p, m->len, f, d);
}

/* ------------------------------------------------------------ the real model */

Test(gguf, reads_stories260k)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	int rc = gguf_open(shared_path("models/stories260K.gguf"), &f, &d);
	cr_assert_eq(rc, 0, "%s", d.msg);
	cr_expect_eq(gguf_version(f), 3);
	cr_expect_eq(gguf_file_size(f), 1185440);

	const char *arch = NULL;
	cr_assert_eq(gguf_get_str(f, "general.architecture", &arch, &d), 0);
	cr_expect_str_eq(arch, "llama");
	uint32_t v = 0;
	cr_assert_eq(gguf_get_u32(f, "llama.block_count", &v, &d), 0);
	cr_expect_eq(v, 5);
	cr_assert_eq(gguf_get_u32(f, "llama.embedding_length", &v, &d), 0);
	cr_expect_eq(v, 64);
	cr_assert_eq(gguf_get_u32(f, "llama.feed_forward_length", &v, &d), 0);
	cr_expect_eq(v, 172);
	cr_assert_eq(gguf_get_u32(f, "llama.attention.head_count", &v, &d), 0);
	cr_expect_eq(v, 8);
	cr_assert_eq(gguf_get_u32(f, "llama.attention.head_count_kv", &v, &d), 0);
	cr_expect_eq(v, 4);
	cr_expect_eq(gguf_get_u32(f, "no.such.key", &v, &d), LM_ENOTFOUND);
	/* A string is not a number: a clear type error naming the key. */
	cr_expect_eq(gguf_get_u32(f, "general.architecture", &v, &d), LM_EFORMAT);
	cr_expect(strstr(d.msg, "general.architecture") != NULL, "%s", d.msg);

	const struct gguf_arr *toks = NULL;
	cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks, &d), 0);
	cr_expect_eq(toks->n, 512);
	cr_expect_str_eq(toks->strs[1], "<s>");
	cr_expect_str_eq(toks->strs[3], "<0x00>");
	const struct gguf_arr *scores = NULL;
	cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores, &d), 0);
	cr_expect_eq(scores->n, 512);

	cr_expect_eq(gguf_n_tensors(f), 48);
	const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
	cr_assert_not_null(t);
	cr_expect_eq(t->ne[0], 64);
	cr_expect_eq(t->ne[1], 512);
	cr_expect_eq(t->type, LM_F32);
	cr_expect_eq(t->size, 64 * 512 * 4);
	cr_expect_eq(t->layer, -1);
	t = gguf_find_tensor(f, "blk.3.ffn_down.weight");
	cr_assert_not_null(t);
	cr_expect_eq(t->ne[0], 172);
	cr_expect_eq(t->ne[1], 64);
	cr_expect_eq(t->layer, 3);
	cr_expect_null(t->data, "nothing is mapped before gguf_map");
	gguf_close(f);
}

/* A worker owning layer 2 maps layer 2's tensors and nothing else. */
Test(gguf, maps_only_the_selected_slice)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open(shared_path("models/stories260K.gguf"), &f, &d), 0, "%s", d.msg);
	struct gguf_select sel = {.layer_begin = 2, .layer_end = 3};
	uint64_t mapped = 0, want = 0;
	cr_assert_eq(gguf_map(f, gguf_select_fn, &sel, false, &mapped, &d), 0, "%s", d.msg);
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		if (t->layer == 2) {
			cr_expect_not_null(t->data, "%s", t->name);
			want += t->size;
		} else {
			cr_expect_null(t->data, "%s mapped but not selected", t->name);
		}
	}
	/* Page rounding adds at most two pages per merged run. */
	cr_expect_geq(mapped, want);
	cr_expect_leq(mapped, want + 2 * 4096 * 9, "mapped %llu for %llu bytes",
		      (unsigned long long)mapped, (unsigned long long)want);
	cr_expect_lt(mapped, gguf_file_size(f) / 4);

	/* The bytes are the file's bytes. */
	size_t len;
	uint8_t *all = slurp(shared_path("models/stories260K.gguf"), &len);
	const struct gguf_tensor *t = gguf_find_tensor(f, "blk.2.attn_q.weight");
	cr_expect_eq(memcmp(t->data, all + gguf_data_offset(f) + t->offset, t->size), 0);

	/* Mapping more later adds the embedding without disturbing the slice. */
	sel = (struct gguf_select){.layer_begin = 0, .layer_end = 0, .embedding = true};
	cr_assert_eq(gguf_map(f, gguf_select_fn, &sel, true, &mapped, &d), 0, "%s", d.msg);
	t = gguf_find_tensor(f, "token_embd.weight");
	cr_expect_eq(memcmp(t->data, all + gguf_data_offset(f) + t->offset, t->size), 0);
	t = gguf_find_tensor(f, "blk.2.attn_q.weight");
	cr_expect_eq(memcmp(t->data, all + gguf_data_offset(f) + t->offset, t->size), 0);
	cr_expect_null(gguf_find_tensor(f, "output.weight")->data);
	free(all);
	gguf_close(f);
}

Test(gguf, fingerprint_is_stable_and_sees_metadata)
{
	size_t len;
	uint8_t *buf = slurp(shared_path("models/stories260K.gguf"), &len);
	gguf_file *a = NULL, *b = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open_mem(buf, len, &a, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_open(shared_path("models/stories260K.gguf"), &b, &d), 0, "%s", d.msg);
	uint64_t fa = gguf_fingerprint(a);
	cr_expect_eq(fa, gguf_fingerprint(b));
	gguf_close(b);
	/* Change one byte of a metadata string in place ("llama" -> "llamb"). */
	const struct gguf_kv *kv = gguf_find(a, "general.architecture");
	size_t at = (size_t)kv->offset;
	gguf_close(a);
	uint8_t *p = memmem(buf + at, 200, "llama", 5);
	cr_assert_not_null(p);
	p[4] = 'b';
	cr_assert_eq(gguf_open_mem(buf, len, &a, &d), 0, "%s", d.msg);
	cr_expect_neq(gguf_fingerprint(a), fa);
	gguf_close(a);
	free(buf);
}

/* The digest of the mapped tensors: the same for the same bytes however they were mapped,
 * another when one byte of a mapped tensor changes, blind to tensors that were not mapped. */
Test(gguf, tensor_digest_sees_the_mapped_bytes)
{
	size_t len;
	uint8_t *buf = slurp(shared_path("models/stories260K.gguf"), &len);
	gguf_file *a = NULL, *b = NULL;
	lm_diag d = {{0}};
	struct gguf_select sel = {.layer_begin = 2, .layer_end = 4};
	cr_assert_eq(gguf_open_mem(buf, len, &a, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_open(shared_path("models/stories260K.gguf"), &b, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_map(a, gguf_select_fn, &sel, false, NULL, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_map(b, gguf_select_fn, &sel, true, NULL, &d), 0, "%s", d.msg);
	uint64_t da = gguf_tensor_digest(a);
	cr_expect_eq(da, gguf_tensor_digest(b), "an in-memory and a populated copy agree");
	uint64_t off = gguf_data_offset(a);
	uint64_t in = off + gguf_find_tensor(a, "blk.3.ffn_up.weight")->offset + 17;
	uint64_t out = off + gguf_find_tensor(a, "blk.0.ffn_up.weight")->offset + 17;
	gguf_close(a);
	gguf_close(b);
	buf[out] ^= 0x40; /* a layer outside the slice */
	cr_assert_eq(gguf_open_mem(buf, len, &a, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_map(a, gguf_select_fn, &sel, false, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(gguf_tensor_digest(a), da);
	gguf_close(a);
	buf[in] ^= 0x01; /* one bit of a layer inside it */
	cr_assert_eq(gguf_open_mem(buf, len, &a, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_map(a, gguf_select_fn, &sel, false, NULL, &d), 0, "%s", d.msg);
	cr_expect_neq(gguf_tensor_digest(a), da);
	cr_expect_eq(gguf_fingerprint(a), gguf_fingerprint(a), "the layout is unchanged");
	gguf_close(a);
	free(buf);
}

Test(gguf, reads_every_vocabulary_file)
{
	static const char *const names[] = {
		"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
		"ggml-vocab-phi-3.gguf",     "ggml-vocab-bert-bge.gguf",
		"ggml-vocab-mpt.gguf",       "ggml-vocab-refact.gguf",
		"ggml-vocab-starcoder.gguf", "ggml-vocab-baichuan.gguf",
		"ggml-vocab-gpt-neox.gguf",  "ggml-vocab-deepseek-coder.gguf",
	};
	char rel[256];
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		gguf_file *f = NULL;
		lm_diag d = {{0}};
		snprintf(rel, sizeof rel, "tokenizer/%s", names[i]);
		cr_assert_eq(gguf_open(shared_path(rel), &f, &d), 0, "%s: %s", names[i], d.msg);
		const struct gguf_arr *toks = NULL;
		cr_expect_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks, &d),
			     0, "%s", names[i]);
		cr_expect_gt(toks->n, 1000);
		gguf_close(f);
	}
}

/* Every truncation of the header and index fails cleanly; the full file parses. */
Test(gguf, every_truncation_fails_cleanly, .timeout = 60)
{
	size_t len;
	uint8_t *buf = slurp(shared_path("models/stories260K.gguf"), &len);
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open_mem(buf, len, &f, &d), 0);
	size_t data_off = (size_t)gguf_data_offset(f);
	gguf_close(f);
	/* Each truncation's n bytes end where one allocation ends, so ASan catches any read past
	 * the end. (One allocation for them all: a fresh one per length costs ASan a mapping and
	 * its page faults each time, and the test minutes on a loaded machine.) */
	uint8_t *room = malloc(data_off);
	cr_assert_not_null(room);
	for (size_t n = 0; n < data_off; n++) {
		uint8_t *cut = room + (data_off - n);
		memcpy(cut, buf, n);
		d.msg[0] = '\0';
		int rc = gguf_open_mem(cut, n, &f, &d);
		cr_assert_neq(rc, 0, "truncated to %zu bytes but parsed", n);
		cr_assert_null(f);
		cr_assert_neq(d.msg[0], '\0', "no message at %zu", n);
	}
	free(room);
	/* Truncating inside the tensor data: the last tensor runs past the end. */
	uint8_t *cut = malloc(len - 1);
	memcpy(cut, buf, len - 1);
	cr_expect_eq(gguf_open_mem(cut, len - 1, &f, &d), LM_EFORMAT);
	cr_expect(strstr(d.msg, "past the end") != NULL, "%s", d.msg);
	free(cut);
	free(buf);
}

/* Random corruption of the header region: parse or fail, never crash (ASan/UBSan watch). */
Test(gguf, random_corruption_never_crashes, .timeout = 60)
{
	size_t len;
	uint8_t *buf = slurp(shared_path("models/stories260K.gguf"), &len);
	gguf_file *f = NULL;
	lm_diag d;
	cr_assert_eq(gguf_open_mem(buf, len, &f, &d), 0);
	size_t hdr = (size_t)gguf_data_offset(f);
	gguf_close(f);
	uint8_t *copy = malloc(len);
	uint64_t s = 0x9e3779b97f4a7c15ull;
	int parsed = 0, failed = 0;
	for (int iter = 0; iter < 3000; iter++) {
		memcpy(copy, buf, len);
		int flips = 1 + iter % 4;
		for (int k = 0; k < flips; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			size_t at = (size_t)((s >> 33) % hdr);
			copy[at] ^= (uint8_t)(1u << ((s >> 20) & 7));
		}
		if (gguf_open_mem(copy, len, &f, &d) == 0) {
			parsed++;
			/* Whatever parsed must be self-consistent enough to walk. */
			for (uint64_t i = 0; i < gguf_n_tensors(f); i++)
				(void)gguf_find_tensor(f, gguf_tensor_at(f, i)->name);
			cr_assert_eq(gguf_map(f, NULL, NULL, false, NULL, &d), 0);
			gguf_close(f);
		} else {
			failed++;
		}
	}
	cr_expect_gt(failed, 100);
	cr_expect_gt(parsed, 100);
	free(copy);
	free(buf);
}

/* ------------------------------------------------------------ hostile images */

static void expect_fail(struct img *m, const char *needle)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	int rc = open_img(m, &f, &d);
	cr_expect_neq(rc, 0, "parsed but should fail with '%s'", needle);
	cr_expect_null(f);
	cr_expect(strstr(d.msg, needle) != NULL, "message '%s' lacks '%s'", d.msg, needle);
	gguf_close(f);
	free(m->p);
	memset(m, 0, sizeof *m);
}

Test(gguf, hostile_headers)
{
	struct img m = {0};
	put(&m, "GGUF", 4);
	put_u32(&m, 1);
	put_u64(&m, 0);
	put_u64(&m, 0);
	expect_fail(&m, "version 1");

	put(&m, "GGML", 4);
	put_u32(&m, 3);
	put_u64(&m, 0);
	put_u64(&m, 0);
	expect_fail(&m, "magic");

	put_header(&m, 0, UINT64_MAX / 2);
	expect_fail(&m, "n_kv");

	put_header(&m, UINT64_MAX, 0);
	expect_fail(&m, "n_tensors");

	/* A key whose length claims 2^63 bytes. */
	put_header(&m, 0, 1);
	put_u64(&m, 1ull << 63);
	put(&m, "abcdefgh", 8);
	expect_fail(&m, "metadata key");

	/* A string value longer than the file. */
	put_header(&m, 0, 1);
	put_str(&m, "k");
	put_u32(&m, GGUF_TYPE_STRING);
	put_u64(&m, 1000);
	put(&m, "short", 5);
	expect_fail(&m, "k needs 1000 bytes");

	/* An array of 2^40 uint32 in a tiny file. */
	put_header(&m, 0, 1);
	put_str(&m, "arr");
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, GGUF_TYPE_UINT32);
	put_u64(&m, 1ull << 40);
	expect_fail(&m, "past the end");

	/* An array of 2^40 strings. */
	put_header(&m, 0, 1);
	put_str(&m, "arr");
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, GGUF_TYPE_STRING);
	put_u64(&m, 1ull << 40);
	put_u64(&m, 0);
	expect_fail(&m, "strings runs past");

	/* Unknown value type; unknown array element type. */
	put_header(&m, 0, 1);
	put_str(&m, "k");
	put_u32(&m, 99);
	put_u64(&m, 0);
	expect_fail(&m, "unknown value type 99");
	put_header(&m, 0, 1);
	put_str(&m, "k");
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, 42);
	put_u64(&m, 0);
	expect_fail(&m, "unknown array element type 42");

	/* Arrays nested 20 deep. */
	put_header(&m, 0, 1);
	put_str(&m, "deep");
	put_u32(&m, GGUF_TYPE_ARRAY);
	for (int i = 0; i < 20; i++) {
		put_u32(&m, GGUF_TYPE_ARRAY);
		put_u64(&m, 1);
	}
	put_u32(&m, GGUF_TYPE_UINT8);
	put_u64(&m, 0);
	expect_fail(&m, "nested deeper");

	/* A bool that is neither 0 nor 1. */
	put_header(&m, 0, 1);
	put_str(&m, "b");
	put_u32(&m, GGUF_TYPE_BOOL);
	put(&m, "\x07", 1);
	expect_fail(&m, "bool value 7");

	/* Duplicate keys. */
	put_header(&m, 0, 2);
	put_str(&m, "dup");
	put_u32(&m, GGUF_TYPE_UINT8);
	put(&m, "\x01", 1);
	put_str(&m, "dup");
	put_u32(&m, GGUF_TYPE_UINT8);
	put(&m, "\x02", 1);
	expect_fail(&m, "duplicate metadata key 'dup'");

	/* general.alignment not a power of two, or of the wrong type. */
	put_header(&m, 0, 1);
	put_str(&m, "general.alignment");
	put_u32(&m, GGUF_TYPE_UINT32);
	put_u32(&m, 48);
	expect_fail(&m, "power-of-two");
	put_header(&m, 0, 1);
	put_str(&m, "general.alignment");
	put_u32(&m, GGUF_TYPE_UINT64);
	put_u64(&m, 32);
	expect_fail(&m, "power-of-two");
}

Test(gguf, hostile_tensor_index)
{
	struct img m = {0};

	/* n_dims out of range. */
	put_header(&m, 1, 0);
	put_str(&m, "t");
	put_u32(&m, 5);
	for (int i = 0; i < 6; i++)
		put_u64(&m, 1);
	expect_fail(&m, "n_dims 5");

	/* Unknown tensor type. */
	put_header(&m, 1, 0);
	put_tensor(&m, "t", 4, 1, 77, 0);
	put(&m, "0123456789abcdef0123456789abcdef", 32);
	expect_fail(&m, "unknown type 77");

	/* Row not a multiple of the block. */
	put_header(&m, 1, 0);
	put_tensor(&m, "t", 33, 1, LM_Q8_0, 0);
	pad_to(&m, 32);
	put(&m, "0123456789abcdef0123456789abcdef0123", 34);
	expect_fail(&m, "not a multiple of the q8_0 block size 32");

	/* Element count overflow. */
	put_header(&m, 1, 0);
	put_tensor(&m, "t", 1ull << 40, 1ull << 40, LM_F32, 0);
	expect_fail(&m, "overflows");

	/* Offset misaligned. */
	put_header(&m, 1, 0);
	put_tensor(&m, "t", 4, 1, LM_F32, 3);
	pad_to(&m, 32);
	put(&m, "0123456789abcdef0123456789abcdef", 32);
	expect_fail(&m, "not a multiple of the alignment");

	/* Data past the end of the file. */
	put_header(&m, 1, 0);
	put_tensor(&m, "t", 1024, 1, LM_F32, 0);
	pad_to(&m, 32);
	put(&m, "0123456789abcdef", 16);
	expect_fail(&m, "past the end of the file");

	/* Overlapping tensors. */
	put_header(&m, 2, 0);
	put_tensor(&m, "a", 16, 1, LM_F32, 0);
	put_tensor(&m, "b", 16, 1, LM_F32, 32);
	pad_to(&m, 32);
	for (int i = 0; i < 4; i++)
		put(&m, "0123456789abcdef0123456789abcdef", 32);
	expect_fail(&m, "overlap");

	/* Duplicate names. */
	put_header(&m, 2, 0);
	put_tensor(&m, "same", 8, 1, LM_F32, 0);
	put_tensor(&m, "same", 8, 1, LM_F32, 32);
	pad_to(&m, 32);
	for (int i = 0; i < 2; i++)
		put(&m, "0123456789abcdef0123456789abcdef", 32);
	expect_fail(&m, "duplicate tensor name 'same'");
}

/* A well-formed hand-built image with nested arrays and every scalar type reads back. */
Test(gguf, every_metadata_type_reads_back)
{
	struct img m = {0};
	put_header(&m, 1, 9);
	put_str(&m, "u8");
	put_u32(&m, GGUF_TYPE_UINT8);
	put(&m, "\xff", 1);
	put_str(&m, "i8");
	put_u32(&m, GGUF_TYPE_INT8);
	put(&m, "\xff", 1);
	put_str(&m, "i32");
	put_u32(&m, GGUF_TYPE_INT32);
	put_u32(&m, (uint32_t)-7);
	put_str(&m, "f32");
	put_u32(&m, GGUF_TYPE_FLOAT32);
	float fv = 0.25f;
	put(&m, &fv, 4);
	put_str(&m, "f64");
	put_u32(&m, GGUF_TYPE_FLOAT64);
	double dv = -1.5;
	put(&m, &dv, 8);
	put_str(&m, "u64");
	put_u32(&m, GGUF_TYPE_UINT64);
	put_u64(&m, 1ull << 40);
	put_str(&m, "s");
	put_u32(&m, GGUF_TYPE_STRING);
	put_str(&m, "hello");
	put_str(&m, "nested"); /* [[1, 2], ["x"]] as array of arrays */
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u64(&m, 2);
	put_u32(&m, GGUF_TYPE_INT16);
	put_u64(&m, 2);
	int16_t a16[2] = {1, -2};
	put(&m, a16, 4);
	put_u32(&m, GGUF_TYPE_STRING);
	put_u64(&m, 1);
	put_str(&m, "x");
	put_str(&m, "general.alignment");
	put_u32(&m, GGUF_TYPE_UINT32);
	put_u32(&m, 64);
	put_tensor(&m, "blk.12.w", 4, 2, LM_F32, 0);
	pad_to(&m, 64);
	float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	put(&m, data, sizeof data);

	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(open_img(&m, &f, &d), 0, "%s", d.msg);
	uint32_t u32;
	uint64_t u64;
	int64_t i64;
	float f32;
	const char *s;
	cr_expect_eq(gguf_get_u32(f, "u8", &u32, &d), 0);
	cr_expect_eq(u32, 255);
	cr_expect_eq(gguf_get_i64(f, "i8", &i64, &d), 0);
	cr_expect_eq(i64, -1);
	cr_expect_eq(gguf_get_u32(f, "i8", &u32, &d), LM_EFORMAT, "negative into unsigned");
	cr_expect_eq(gguf_get_i64(f, "i32", &i64, &d), 0);
	cr_expect_eq(i64, -7);
	cr_expect_eq(gguf_get_f32(f, "f32", &f32, &d), 0);
	cr_expect_eq(f32, 0.25f);
	cr_expect_eq(gguf_get_f32(f, "f64", &f32, &d), 0);
	cr_expect_eq(f32, -1.5f);
	cr_expect_eq(gguf_get_u64(f, "u64", &u64, &d), 0);
	cr_expect_eq(u64, 1ull << 40);
	cr_expect_eq(gguf_get_u32(f, "u64", &u32, &d), LM_EFORMAT, "too big for 32 bits");
	cr_expect_eq(gguf_get_str(f, "s", &s, &d), 0);
	cr_expect_str_eq(s, "hello");
	const struct gguf_arr *a = NULL;
	cr_assert_eq(gguf_get_arr(f, "nested", GGUF_TYPE_ARRAY, &a, &d), 0);
	cr_assert_eq(a->n, 2);
	cr_expect_eq(a->arrs[0].type, GGUF_TYPE_INT16);
	cr_expect_eq(gguf_arr_i64(&a->arrs[0], 1), -2);
	cr_expect_str_eq(a->arrs[1].strs[0], "x");
	cr_expect_eq(gguf_alignment(f), 64);
	cr_expect_eq(gguf_data_offset(f) % 64, 0);
	const struct gguf_tensor *t = gguf_find_tensor(f, "blk.12.w");
	cr_assert_not_null(t);
	cr_expect_eq(t->layer, 12);
	cr_assert_eq(gguf_map(f, NULL, NULL, false, NULL, &d), 0);
	cr_expect_eq(memcmp(t->data, data, sizeof data), 0);
	gguf_close(f);
	free(m.p);
}

/* Float array elements read as integers saturate instead of overflowing (a C conversion of an
 * out-of-range float is undefined; fuzz_gguf found gguf_arr_u64 doing it on -1.5). */
Test(gguf, float_elements_convert_to_integers_safely)
{
	struct img m = {0};
	put_header(&m, 0, 2);
	static const float f32s[4] = {-1.5f, 3.9f, 1e30f, -1e30f};
	put_str(&m, "f32");
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, GGUF_TYPE_FLOAT32);
	put_u64(&m, 4);
	put(&m, f32s, sizeof f32s);
	const double f64s[4] = {NAN, INFINITY, -INFINITY, 18446744073709549568.0};
	put_str(&m, "f64");
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, GGUF_TYPE_FLOAT64);
	put_u64(&m, 4);
	put(&m, f64s, sizeof f64s);
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(open_img(&m, &f, &d), 0, "%s", d.msg);
	const struct gguf_arr *a = NULL, *b = NULL;
	cr_assert_eq(gguf_get_arr(f, "f32", GGUF_TYPE_FLOAT32, &a, &d), 0);
	cr_assert_eq(gguf_get_arr(f, "f64", GGUF_TYPE_FLOAT64, &b, &d), 0);
	/* Truncated toward zero. */
	cr_expect_eq(gguf_arr_i64(a, 0), -1);
	cr_expect_eq(gguf_arr_i64(a, 1), 3);
	cr_expect_eq(gguf_arr_u64(a, 1), 3);
	/* Negative to unsigned: 0. */
	cr_expect_eq(gguf_arr_u64(a, 0), 0);
	cr_expect_eq(gguf_arr_u64(a, 3), 0);
	/* Past the limits: saturated. */
	cr_expect_eq(gguf_arr_i64(a, 2), INT64_MAX);
	cr_expect_eq(gguf_arr_i64(a, 3), INT64_MIN);
	cr_expect_eq(gguf_arr_u64(a, 2), UINT64_MAX);
	cr_expect_eq(gguf_arr_i64(b, 1), INT64_MAX);
	cr_expect_eq(gguf_arr_u64(b, 1), UINT64_MAX);
	cr_expect_eq(gguf_arr_i64(b, 2), INT64_MIN);
	cr_expect_eq(gguf_arr_u64(b, 2), 0);
	/* NaN: 0. The largest double below 2^64 still converts exactly. */
	cr_expect_eq(gguf_arr_i64(b, 0), 0);
	cr_expect_eq(gguf_arr_u64(b, 0), 0);
	cr_expect_eq(gguf_arr_u64(b, 3), 18446744073709549568ull);
	cr_expect_eq(gguf_arr_i64(b, 3), INT64_MAX);
	gguf_close(f);
	free(m.p);
}

Test(gguf, missing_file_names_the_path)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_expect_eq(gguf_open("/nonexistent/model.gguf", &f, &d), LM_ENOENT);
	cr_expect(strstr(d.msg, "/nonexistent/model.gguf") != NULL, "%s", d.msg);
	cr_expect_eq(gguf_open("/tmp", &f, &d), LM_EIO);
}

/* ------------------------------------------------------------ without the vocabulary */

/* Writes the image to a fresh temporary file; the caller unlinks and frees the name. */
static char *img_file(const struct img *m)
{
	char *path = strdup("/tmp/lm-test-gguf-XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, m->p, m->len), (ssize_t)m->len);
	close(fd);
	return path;
}

/* Whether any mapping of this process is of `path` (/proc/self/maps). */
static bool mapped_here(const char *path)
{
	FILE *fp = fopen("/proc/self/maps", "r");
	cr_assert_not_null(fp);
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof line, fp) != NULL)
		found = strstr(line, path) != NULL;
	fclose(fp);
	return found;
}

/* Both opens of one file agree on everything but the tokenizer's arrays, which the second only
 * counts: same keys in the same order, same scalars, strings and array elements, same tensor
 * index and fingerprint. Returns how many arrays were skipped. */
static int expect_same_but_vocab(const gguf_file *a, const gguf_file *b)
{
	int skipped = 0;
	cr_assert_eq(gguf_n_kv(a), gguf_n_kv(b));
	for (uint64_t i = 0; i < gguf_n_kv(a); i++) {
		const struct gguf_kv *x = gguf_kv_at(a, i), *y = gguf_kv_at(b, i);
		cr_assert_str_eq(x->key, y->key);
		cr_assert_eq(x->type, y->type, "%s", x->key);
		cr_expect_eq(x->offset, y->offset, "%s", x->key);
		if (x->type == GGUF_TYPE_STRING) {
			cr_expect_str_eq(x->v.str.ptr, y->v.str.ptr, "%s", x->key);
			continue;
		}
		if (x->type != GGUF_TYPE_ARRAY) {
			cr_expect_eq(x->v.u64, y->v.u64, "%s", x->key);
			continue;
		}
		const struct gguf_arr *p = &x->v.arr, *q = &y->v.arr;
		cr_expect_eq(p->type, q->type, "%s", x->key);
		cr_expect_eq(p->n, q->n, "%s", x->key);
		cr_expect_not(p->skipped, "%s: skipped by a plain open", x->key);
		if (strncmp(x->key, "tokenizer.", 10) == 0) {
			cr_expect(q->skipped, "%s was read", x->key);
			cr_expect(q->data == NULL && q->strs == NULL && q->arrs == NULL, "%s",
				  x->key);
			lm_diag d = {{0}};
			const struct gguf_arr *got = NULL;
			cr_expect_eq(gguf_get_arr(b, x->key, GGUF_TYPE_COUNT, &got, &d),
				     LM_EUNSUPPORTED, "%s", x->key);
			cr_expect(strstr(d.msg, x->key) != NULL && strstr(d.msg, "vocabulary"),
				  "%s", d.msg);
			skipped++;
			continue;
		}
		cr_expect_not(q->skipped, "%s", x->key);
		size_t es = gguf_value_size(p->type);
		if (es != 0)
			cr_expect_eq(memcmp(p->data, q->data, (size_t)p->n * es), 0, "%s", x->key);
		for (uint64_t k = 0; p->type == GGUF_TYPE_STRING && k < p->n; k++)
			cr_expect_str_eq(p->strs[k], q->strs[k], "%s[%llu]", x->key,
					 (unsigned long long)k);
	}
	cr_assert_eq(gguf_n_tensors(a), gguf_n_tensors(b));
	for (uint64_t i = 0; i < gguf_n_tensors(a); i++) {
		const struct gguf_tensor *s = gguf_tensor_at(a, i), *t = gguf_tensor_at(b, i);
		cr_expect_str_eq(s->name, t->name);
		cr_expect(s->type == t->type && s->offset == t->offset && s->size == t->size, "%s",
			  s->name);
	}
	cr_expect_eq(gguf_data_offset(a), gguf_data_offset(b));
	cr_expect_eq(gguf_fingerprint(a), gguf_fingerprint(b));
	return skipped;
}

/* A worker's open (GGUF_OPEN_NO_VOCAB) of real files: Gemma 4's 262,144-token vocabulary and
 * stories260K. The metadata is not mapped at all; the tokenizer's arrays are counted, not read;
 * everything else reads as a plain open reads it, and tensors still map. */
Test(gguf, opens_without_the_vocabulary, .timeout = 60)
{
	const char *const rel[] = {"tokenizer/ggml-vocab-gemma-4.gguf", "models/stories260K.gguf"};
	for (size_t i = 0; i < 2; i++) {
		const char *path = shared_path(rel[i]);
		gguf_file *a = NULL, *b = NULL;
		lm_diag d = {{0}};
		cr_assert_eq(gguf_open(path, &a, &d), 0, "%s", d.msg);
		cr_assert_eq(gguf_open_with(path, GGUF_OPEN_NO_VOCAB, &b, &d), 0, "%s", d.msg);
		gguf_close(a);
		cr_expect_not(mapped_here(path), "%s: the metadata is mapped", rel[i]);
		cr_assert_eq(gguf_open(path, &a, &d), 0, "%s", d.msg);
		cr_expect_geq(expect_same_but_vocab(a, b), 3, "%s", rel[i]);
		const struct gguf_kv *toks = gguf_find(b, "tokenizer.ggml.tokens");
		cr_assert_not_null(toks);
		cr_expect_eq(toks->v.arr.n, i == 0 ? 262144u : 512u);
		cr_assert_eq(gguf_map(b, NULL, NULL, false, NULL, &d), 0, "%s", d.msg);
		for (uint64_t k = 0; k < gguf_n_tensors(b); k++) {
			const struct gguf_tensor *s = gguf_tensor_at(a, k),
						 *t = gguf_tensor_at(b, k);
			cr_assert_eq(gguf_map(a, NULL, NULL, false, NULL, &d), 0, "%s", d.msg);
			cr_expect_eq(memcmp(s->data, t->data, (size_t)s->size), 0, "%s", s->name);
		}
		gguf_close(a);
		gguf_close(b);
	}
}

/* An image whose tokenizer arrays are larger than the 64 KiB window the unmapped reader walks
 * them through: strings of every length from 0 to 40 bytes, a nested array of strings, a
 * float array; then, past them, a string array and an i16 array that are read, and a tensor. */
static void put_vocab_img(struct img *m)
{
	put_header(m, 1, 6);
	put_str(m, "tokenizer.ggml.tokens");
	put_u32(m, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_STRING);
	put_u64(m, 9000);
	char s[64];
	for (int i = 0; i < 9000; i++) {
		int n = i % 41;
		memset(s, 'a' + i % 26, (size_t)n);
		s[n] = '\0';
		put_str(m, s);
	}
	put_str(m, "tokenizer.ggml.scores");
	put_u32(m, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_FLOAT32);
	put_u64(m, 9000);
	for (int i = 0; i < 9000; i++) {
		float v = (float)-i;
		put(m, &v, 4);
	}
	put_str(m, "tokenizer.nested");
	put_u32(m, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_ARRAY);
	put_u64(m, 2);
	put_u32(m, GGUF_TYPE_STRING);
	put_u64(m, 2);
	put_str(m, "x");
	put_str(m, "yz");
	put_u32(m, GGUF_TYPE_INT8);
	put_u64(m, 3);
	put(m, "\1\2\3", 3);
	put_str(m, "general.names"); /* read, across the window's refills */
	put_u32(m, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_STRING);
	put_u64(m, 3000);
	for (int i = 0; i < 3000; i++) {
		snprintf(s, sizeof s, "name-%d-%0*d", i, i % 30, 0);
		put_str(m, s);
	}
	put_str(m, "x.arr");
	put_u32(m, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_INT16);
	put_u64(m, 2);
	int16_t a16[2] = {1, -2};
	put(m, a16, 4);
	put_str(m, "general.alignment");
	put_u32(m, GGUF_TYPE_UINT32);
	put_u32(m, 32);
	put_tensor(m, "blk.0.w", 4, 2, LM_F32, 0);
	pad_to(m, 32);
	float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	put(m, data, sizeof data);
}

Test(gguf, skips_arrays_larger_than_its_window)
{
	struct img m = {0};
	put_vocab_img(&m);
	cr_assert_gt(m.len, 3 * 65536u);
	char *path = img_file(&m);
	gguf_file *a = NULL, *b = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open(path, &a, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_open_with(path, GGUF_OPEN_NO_VOCAB, &b, &d), 0, "%s", d.msg);
	cr_expect_eq(expect_same_but_vocab(a, b), 3);
	const struct gguf_arr *arr = NULL;
	cr_assert_eq(gguf_get_arr(b, "x.arr", GGUF_TYPE_INT16, &arr, &d), 0, "%s", d.msg);
	cr_expect_eq(gguf_arr_i64(arr, 1), -2);
	cr_assert_eq(gguf_get_arr(b, "general.names", GGUF_TYPE_STRING, &arr, &d), 0);
	cr_expect_str_eq(arr->strs[2999], "name-2999-00000000000000000000000000000");
	cr_assert_eq(gguf_map(b, NULL, NULL, false, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(((const float *)gguf_find_tensor(b, "blk.0.w")->data)[7], 8.0f);
	gguf_close(a);
	gguf_close(b);
	unlink(path);
	free(path);
	free(m.p);
}

/* A skipped array is held to the bounds of a read one: a count or a string length past the
 * end of the file, a nesting too deep or an unknown element type fail with the offset and the
 * key, never a read past the end. Every truncation of the file fails too. */
Test(gguf, skipped_arrays_are_checked, .timeout = 60)
{
	struct img m = {0};
	put_header(&m, 0, 1);
	put_str(&m, "tokenizer.t");
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u32(&m, GGUF_TYPE_ARRAY);
	put_u64(&m, 2);
	put_u32(&m, GGUF_TYPE_STRING);
	put_u64(&m, 2);
	put_str(&m, "ab");
	put_str(&m, "c");
	put_u32(&m, GGUF_TYPE_UINT16);
	put_u64(&m, 2);
	put_u32(&m, 0);
	size_t full = m.len;
	char *path = img_file(&m);
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open_with(path, GGUF_OPEN_NO_VOCAB, &f, &d), 0, "%s", d.msg);
	cr_expect_eq(gguf_find(f, "tokenizer.t")->v.arr.n, 2);
	gguf_close(f);
	for (size_t n = full - 1; n >= 24;
	     n--) { /* shorter each time: truncate(2) extends with zeros */
		cr_assert_eq(truncate(path, (off_t)n), 0);
		d.msg[0] = '\0';
		cr_expect_eq(gguf_open_with(path, GGUF_OPEN_NO_VOCAB, &f, &d), LM_EFORMAT,
			     "truncated to %zu bytes", n);
		cr_expect_null(f);
		cr_expect_neq(d.msg[0], '\0', "no message at %zu", n);
	}
	unlink(path);
	free(path);

	/* Hostile values, each at its place in the image: the offset of the nested string
	 * array's count, of its first string's length, and of the u16 array's element type. */
	const size_t count_at = 24 + 8 + 11 + 4 + 4 + 8 + 4, len_at = count_at + 8;
	const size_t type_at = len_at + 10 + 9;
	struct {
		size_t at;
		uint64_t v;
		size_t bytes;
		const char *needle;
	} bad[] = {
		{count_at, 1ull << 60, 8, "runs past the end"},
		{len_at, 1ull << 40, 8, "needs"},
		{type_at, 99, 4, "unknown array element type"},
		{type_at, GGUF_TYPE_ARRAY, 4, "runs past the end"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct img h = {0};
		put(&h, m.p, m.len);
		memcpy(h.p + bad[i].at, &bad[i].v, bad[i].bytes);
		path = img_file(&h);
		cr_expect_eq(gguf_open_with(path, GGUF_OPEN_NO_VOCAB, &f, &d), LM_EFORMAT, "%zu",
			     i);
		cr_expect(strstr(d.msg, bad[i].needle) && strstr(d.msg, "tokenizer.t"),
			  "case %zu: %s", i, d.msg);
		/* A plain open finds the same fault. */
		cr_expect_eq(gguf_open(path, &f, &d), LM_EFORMAT, "%zu", i);
		unlink(path);
		free(path);
		free(h.p);
	}
	/* Arrays nested deeper than the reader allows, under tokenizer.: refused as well. */
	struct img deep = {0};
	put_header(&deep, 0, 1);
	put_str(&deep, "tokenizer.deep");
	put_u32(&deep, GGUF_TYPE_ARRAY);
	for (int k = 0; k < 12; k++) {
		put_u32(&deep, GGUF_TYPE_ARRAY);
		put_u64(&deep, 1);
	}
	put_u32(&deep, GGUF_TYPE_UINT8);
	put_u64(&deep, 0);
	path = img_file(&deep);
	cr_expect_eq(gguf_open_with(path, GGUF_OPEN_NO_VOCAB, &f, &d), LM_EFORMAT);
	cr_expect(strstr(d.msg, "nested deeper") != NULL, "%s", d.msg);
	unlink(path);
	free(path);
	free(deep.p);
	free(m.p);
}

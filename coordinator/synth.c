/* synth.c — random-weight llama GGUF files. See synth.h for the layout and the guarantees. */
#include "coordinator/synth.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/format/gguf.h"
#include "common/format/gguf_write.h"
#include "common/format/quant.h"

/* Bumped whenever the same options would give different bytes. */
#define SYNTH_FORMAT_VERSION 1u
/* std of the Irwin-Hall sum of four uniform 16-bit integers: sqrt(4 * (65536^2 - 1) / 12). */
#define SYNTH_NOISE_STD 37837.22668984041

void synth_opts_default(struct synth_opts *o)
{
	memset(o, 0, sizeof *o);
	o->ctx = 2048;
	o->type = LM_F32;
	o->rope_base = 10000.0f;
	o->rms_eps = 1e-5f;
}

/* ---------------------------------------------------------------- randomness */

static uint64_t synth_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A zero-mean integer with std SYNTH_NOISE_STD, approximately normal (|x| < 3.47 std). */
static int32_t synth_noise(uint64_t *state)
{
	uint64_t r = synth_splitmix64(state);
	return (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
	       (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48) - 131070;
}

/* Each tensor's stream starts from the seed and its name, not from its place in the file. */
static uint64_t synth_stream(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *p = name; *p != '\0'; p++) {
		h ^= (uint8_t)*p;
		h *= 0x100000001b3ull;
	}
	uint64_t s = seed ^ h;
	return synth_splitmix64(&s);
}

/* ---------------------------------------------------------------- the tensor list */

enum synth_kind { SYNTH_MATRIX, SYNTH_NORM };

struct synth_tensor {
	char name[GGUF_WRITER_MAX_TENSOR_NAME + 1];
	enum synth_kind kind;
	int64_t ne0, ne1; /* ne1 = 1 for norm vectors */
	const char *rule; /* what ne0 is, for messages: "dim", "ffn" */
};

static bool synth_type_ok(enum lm_dtype t)
{
	switch (t) {
	case LM_F32:
	case LM_F16:
	case LM_BF16:
	case LM_Q8_0:
	case LM_Q4_0:
	case LM_Q4_K:
	case LM_Q6_K:
		return true;
	default:
		return false;
	}
}

/* Fills `out` (room for 3 + 9 * layers tensors) in file order; returns the count. */
static size_t synth_tensors(const struct synth_opts *o, struct synth_tensor *out)
{
	static const struct {
		const char *suffix;
		enum synth_kind kind;
		int rows; /* 0 dim, 1 kv_dim, 2 ffn */
		bool ffn_cols;
	} per_layer[] = {
		{"attn_norm", SYNTH_NORM, 0, false},     {"attn_q", SYNTH_MATRIX, 0, false},
		{"attn_k", SYNTH_MATRIX, 1, false},      {"attn_v", SYNTH_MATRIX, 1, false},
		{"attn_output", SYNTH_MATRIX, 0, false}, {"ffn_norm", SYNTH_NORM, 0, false},
		{"ffn_gate", SYNTH_MATRIX, 2, false},    {"ffn_down", SYNTH_MATRIX, 0, true},
		{"ffn_up", SYNTH_MATRIX, 2, false},
	};
	int64_t kv_dim = (int64_t)o->kv_heads * (o->dim / o->heads);
	size_t n = 0;

	out[n++] =
		(struct synth_tensor){"token_embd.weight", SYNTH_MATRIX, o->dim, o->vocab, "dim"};
	for (uint32_t l = 0; l < o->layers; l++) {
		for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
			struct synth_tensor *t = &out[n++];
			snprintf(t->name, sizeof t->name, "blk.%u.%s.weight", l,
				 per_layer[i].suffix);
			t->kind = per_layer[i].kind;
			t->ne0 = per_layer[i].ffn_cols ? o->ffn : o->dim;
			t->rule = per_layer[i].ffn_cols ? "ffn" : "dim";
			if (t->kind == SYNTH_NORM)
				t->ne1 = 1;
			else
				t->ne1 = per_layer[i].rows == 1   ? kv_dim
					 : per_layer[i].rows == 2 ? (int64_t)o->ffn
								  : (int64_t)o->dim;
		}
	}
	out[n++] = (struct synth_tensor){"output_norm.weight", SYNTH_NORM, o->dim, 1, "dim"};
	if (!o->tied)
		out[n++] = (struct synth_tensor){"output.weight", SYNTH_MATRIX, o->dim, o->vocab,
						 "dim"};
	return n;
}

int synth_check(const struct synth_opts *o, lm_diag *d)
{
	if (o->out == NULL || o->out[0] == '\0')
		return lm_fail(d, LM_EINVAL, "no output file");
	if (o->dim < 1 || o->dim > 65536)
		return lm_fail(d, LM_ERANGE, "dim %u is not in [1, 65536]", o->dim);
	/* llama.cpp (LLAMA_MAX_LAYERS) refuses more than 512 blocks. */
	if (o->layers < 1 || o->layers > 512)
		return lm_fail(d, LM_ERANGE, "layers %u is not in [1, 512], what llama.cpp loads",
			       o->layers);
	if (o->heads < 1 || o->dim % o->heads != 0)
		return lm_fail(d, LM_EINVAL, "heads %u does not divide dim %u", o->heads, o->dim);
	if ((o->dim / o->heads) % 2 != 0)
		return lm_fail(d, LM_EINVAL,
			       "head size dim / heads = %u is odd; RoPE rotates pairs of elements",
			       o->dim / o->heads);
	if (o->kv_heads < 1 || o->kv_heads > o->heads || o->heads % o->kv_heads != 0)
		return lm_fail(d, LM_EINVAL, "kv-heads %u does not divide heads %u", o->kv_heads,
			       o->heads);
	if (o->ffn < 1 || o->ffn > (1u << 20))
		return lm_fail(d, LM_ERANGE, "ffn %u is not in [1, 1048576]", o->ffn);
	if (o->vocab > (1u << 24))
		return lm_fail(d, LM_ERANGE, "vocab %u is over 16777216", o->vocab);
	if (o->vocab_from == NULL && o->vocab < SYNTH_VOCAB_MIN)
		return lm_fail(
			d, LM_ERANGE,
			"vocab %u is under %d: the default vocabulary starts with <unk>, <s>, "
			"</s> and 256 byte tokens",
			o->vocab, SYNTH_VOCAB_MIN);
	if (o->ctx < 1 || o->ctx > (1u << 24))
		return lm_fail(d, LM_ERANGE, "ctx %u is not in [1, 16777216]", o->ctx);
	if (!(o->rope_base > 0.0f) || !isfinite(o->rope_base))
		return lm_fail(d, LM_ERANGE, "rope-base %g is not a positive number",
			       (double)o->rope_base);
	if (!(o->rms_eps > 0.0f) || !isfinite(o->rms_eps))
		return lm_fail(d, LM_ERANGE, "rms-eps %g is not a positive number",
			       (double)o->rms_eps);
	const struct lm_dtype_info *info = lm_dtype_info((uint32_t)o->type);
	if (info == NULL || !synth_type_ok(o->type))
		return lm_fail(d, LM_EUNSUPPORTED,
			       "type %s: synth writes f32, f16, bf16, q8_0, q4_0, q4_K or q6_K",
			       lm_dtype_name((uint32_t)o->type));
	/* The row-length rule, checked on the matrices in file order so the message names the
	 * first tensor that breaks it. */
	const char *what[] = {"token_embd.weight", "dim", "blk.0.ffn_down.weight", "ffn"};
	const uint32_t len[] = {o->dim, o->ffn};
	for (int i = 0; i < 2; i++)
		if (len[i] % info->blck != 0)
			return lm_fail(d, LM_EINVAL,
				       "%s: a %s row holds a multiple of %u elements, and its rows "
				       "have %s = %u elements",
				       what[2 * i], info->name, info->blck, what[2 * i + 1],
				       len[i]);
	return 0;
}

/* ---------------------------------------------------------------- rows */

/* Encodes n floats as `type`: the quantized types through the CPU kernels' reference
 * quantizers, bit-compatible with ggml's, so llama.cpp reads the same values. */
static int synth_encode_row(enum lm_dtype type, const float *src, void *dst, int64_t n, lm_diag *d)
{
	int rc = lm_quantize_row(type, src, dst, n);
	if (rc != 0)
		return lm_fail(d, rc, "quantizing a row of %lld elements to %s failed",
			       (long long)n, lm_dtype_name((uint32_t)type));
	return 0;
}

/* Generates and writes one tensor, row by row. */
static int synth_write_tensor(gguf_writer *w, const struct synth_opts *o,
			      const struct synth_tensor *t, float *row, uint8_t *enc, lm_diag *d)
{
	uint64_t state = synth_stream(o->seed, t->name);
	enum lm_dtype type = t->kind == SYNTH_NORM ? LM_F32 : o->type;
	uint64_t row_bytes;
	int rc = lm_dtype_row_bytes((uint32_t)type, (uint64_t)t->ne0, &row_bytes);
	if (rc != 0)
		return lm_fail(d, rc, "%s: row of %lld elements", t->name, (long long)t->ne0);
	/* Float arithmetic on exact integers and one rounded scale: the same bits everywhere. */
	float scale, offset;
	if (t->kind == SYNTH_NORM) {
		scale = (float)(0.1 / SYNTH_NOISE_STD);
		offset = 1.0f;
	} else {
		scale = (float)(1.0 / sqrt((double)t->ne0) / SYNTH_NOISE_STD);
		offset = 0.0f;
	}
	for (int64_t r = 0; r < t->ne1; r++) {
		for (int64_t i = 0; i < t->ne0; i++)
			row[i] = offset + (float)synth_noise(&state) * scale;
		if ((rc = synth_encode_row(type, row, enc, t->ne0, d)) != 0)
			return rc;
		if ((rc = gguf_writer_write_data(w, enc, (size_t)row_bytes, d)) != 0)
			return rc;
	}
	return 0;
}

/* ---------------------------------------------------------------- vocabulary */

/* Characters of the single-character pieces, most frequent English letters first. */
static const char synth_chars[] = "etaoinshrdlucmfwypvbgkqjxz"
				  "ETAOINSHRDLUCMFWYPVBGKQJXZ"
				  "0123456789.,!?'\"-:;()";
#define SYNTH_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */

struct synth_vocab {
	char **tokens;
	float *scores;
	int32_t *types;
	uint32_t n;
};

static void synth_vocab_fini(struct synth_vocab *v)
{
	if (v->tokens != NULL)
		for (uint32_t i = 0; i < v->n; i++)
			free(v->tokens[i]);
	free(v->tokens);
	free(v->scores);
	free(v->types);
	memset(v, 0, sizeof *v);
}

static int synth_vocab_add(struct synth_vocab *v, uint32_t cap, const char *text, float score,
			   int32_t type)
{
	if (v->n == cap)
		return 1; /* full: the caller stops */
	if ((v->tokens[v->n] = strdup(text)) == NULL)
		return LM_ENOMEM;
	v->scores[v->n] = score;
	v->types[v->n] = type;
	v->n++;
	return 0;
}

static int synth_vocab_build(struct synth_vocab *v, uint32_t n, lm_diag *d)
{
	char buf[64];
	int rc = 0;

	memset(v, 0, sizeof *v);
	v->tokens = calloc(n, sizeof *v->tokens);
	v->scores = calloc(n, sizeof *v->scores);
	v->types = calloc(n, sizeof *v->types);
	if (v->tokens == NULL || v->scores == NULL || v->types == NULL)
		goto oom;
	/* llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte. */
	if (synth_vocab_add(v, n, "<unk>", 0.0f, 2) != 0 ||
	    synth_vocab_add(v, n, "<s>", 0.0f, 3) != 0 ||
	    synth_vocab_add(v, n, "</s>", 0.0f, 3) != 0)
		goto oom;
	for (int b = 0; b < 256; b++) {
		snprintf(buf, sizeof buf, "<0x%02X>", b);
		if (synth_vocab_add(v, n, buf, 0.0f, 6) != 0)
			goto oom;
	}
	/* Word pieces, each scored below the one before, so SentencePiece merges prefer the
	 * earlier (shorter, more frequent) ones. Every prefix of a piece is itself a piece, so
	 * the merges can reach it. */
	float score = 0.0f;
#define SYNTH_PIECE(text)                                     \
	do {                                                  \
		score -= 1.0f;                                \
		rc = synth_vocab_add(v, n, (text), score, 1); \
		if (rc == 1)                                  \
			return 0;                             \
		if (rc != 0)                                  \
			goto oom;                             \
	} while (0)
	SYNTH_PIECE(SYNTH_SPACE);
	for (const char *c = synth_chars; *c != '\0'; c++) {
		snprintf(buf, sizeof buf, SYNTH_SPACE "%c", *c);
		SYNTH_PIECE(buf);
		snprintf(buf, sizeof buf, "%c", *c);
		SYNTH_PIECE(buf);
	}
	for (int len = 2; len <= 8; len++) {
		uint64_t count = 1;
		for (int i = 0; i < len; i++)
			count *= 26;
		for (uint64_t k = 0; k < count; k++) {
			char word[16];
			uint64_t x = k;
			for (int i = len - 1; i >= 0; i--) {
				word[i] = synth_chars[x % 26];
				x /= 26;
			}
			word[len] = '\0';
			snprintf(buf, sizeof buf, SYNTH_SPACE "%s", word);
			SYNTH_PIECE(buf);
			SYNTH_PIECE(word);
		}
	}
#undef SYNTH_PIECE
	return 0; /* 26^8 pieces are more than any vocab allowed */
oom:
	synth_vocab_fini(v);
	return lm_fail(d, LM_ENOMEM, "out of memory for a %u-token vocabulary", n);
}

static int synth_put_vocab(gguf_writer *w, uint32_t n, lm_diag *d)
{
	struct synth_vocab v;
	int rc = synth_vocab_build(&v, n, d);
	if (rc != 0)
		return rc;
	if ((rc = gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama", d)) != 0 ||
	    (rc = gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
					 NULL, v.n, d)) != 0 ||
	    (rc = gguf_writer_kv_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.scores, v.n,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types, v.n,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0, d)) != 0 ||
	    (rc = gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true, d)) != 0 ||
	    (rc = gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", false, d)) != 0) {
		synth_vocab_fini(&v);
		return rc;
	}
	synth_vocab_fini(&v);
	return 0;
}

/* Opens the GGUF whose vocabulary is to be copied and checks its token count against *vocab
 * (0: take it). */
static int synth_open_vocab(const char *path, uint32_t *vocab, gguf_file **out, lm_diag *d)
{
	gguf_file *f = NULL;
	const struct gguf_arr *tokens;
	int rc = gguf_open(path, &f, d);
	if (rc != 0)
		return rc;
	rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens, d);
	if (rc == LM_ENOTFOUND)
		rc = lm_fail(d, LM_EFORMAT, "%s: no tokenizer.ggml.tokens array", path);
	else if (rc == 0 && *vocab != 0 && tokens->n != *vocab)
		rc = lm_fail(d, LM_EINVAL, "vocab %u, but %s has %llu tokens", *vocab, path,
			     (unsigned long long)tokens->n);
	else if (rc == 0 && (tokens->n < 1 || tokens->n > (1u << 24)))
		rc = lm_fail(d, LM_ERANGE, "%s: %llu tokens, not in [1, 16777216]", path,
			     (unsigned long long)tokens->n);
	if (rc != 0) {
		gguf_close(f);
		return rc;
	}
	*vocab = (uint32_t)tokens->n;
	*out = f;
	return 0;
}

/* Copies every tokenizer.* key, in the file's order. */
static int synth_copy_vocab(gguf_writer *w, const gguf_file *f, lm_diag *d)
{
	int rc = 0;
	for (uint64_t i = 0; i < gguf_n_kv(f) && rc == 0; i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);
		if (strncmp(kv->key, "tokenizer.", 10) == 0)
			rc = gguf_writer_kv_copy(w, kv, d);
	}
	if (rc != 0)
		lm_diag_prefix(d, "copying the vocabulary of %s", gguf_path(f));
	return rc;
}

/* ---------------------------------------------------------------- the file */

/* llama_ftype: what llama.cpp prints as the file's type ("mostly X": the norms stay f32). */
static uint32_t synth_file_type(enum lm_dtype t)
{
	switch (t) {
	case LM_F16:
		return 1;
	case LM_Q4_0:
		return 2;
	case LM_Q8_0:
		return 7;
	case LM_Q4_K:
		return 14; /* Q4_K_S: every matrix q4_K */
	case LM_Q6_K:
		return 18;
	case LM_BF16:
		return 32;
	default:
		return 0;
	}
}

static int synth_put_meta(gguf_writer *w, const struct synth_opts *o, uint32_t vocab, lm_diag *d)
{
	bool quant = o->type != LM_F32 && o->type != LM_F16 && o->type != LM_BF16;
	int rc;
	char name[128];
	snprintf(name, sizeof name, "layermesh synth %s d%u l%u h%u/%u f%u v%u seed %llu",
		 lm_dtype_name((uint32_t)o->type), o->dim, o->layers, o->heads, o->kv_heads, o->ffn,
		 vocab, (unsigned long long)o->seed);
	if ((rc = gguf_writer_kv_str(w, "general.architecture", "llama", d)) != 0 ||
	    (rc = gguf_writer_kv_str(w, "general.name", name, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "general.file_type", synth_file_type(o->type), d)) != 0 ||
	    (quant && (rc = gguf_writer_kv_u32(w, "general.quantization_version", 2, d)) != 0) ||
	    (rc = gguf_writer_kv_u32(w, "llama.vocab_size", vocab, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.context_length", o->ctx, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.embedding_length", o->dim, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.block_count", o->layers, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.feed_forward_length", o->ffn, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.rope.dimension_count", o->dim / o->heads, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.attention.head_count", o->heads, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "llama.attention.head_count_kv", o->kv_heads, d)) != 0 ||
	    (rc = gguf_writer_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", o->rms_eps, d)) !=
		    0 ||
	    (rc = gguf_writer_kv_f32(w, "llama.rope.freq_base", o->rope_base, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "layermesh.synth.version", SYNTH_FORMAT_VERSION, d)) != 0 ||
	    (rc = gguf_writer_kv_u64(w, "layermesh.synth.seed", o->seed, d)) != 0)
		return rc;
	return 0;
}

int synth_write(const struct synth_opts *o_in, struct synth_stats *st, lm_diag *d)
{
	struct synth_opts o = *o_in;
	struct synth_tensor *tensors = NULL;
	float *row = NULL;
	uint8_t *enc = NULL;
	FILE *fp = NULL;
	char *tmp = NULL;
	gguf_writer w = {0};
	gguf_file *vf = NULL;
	int rc;

	if (o.kv_heads == 0)
		o.kv_heads = o.heads;
	if ((rc = synth_check(&o, d)) != 0)
		return rc;
	if ((rc = gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT, d)) != 0)
		return rc;

	/* The vocabulary decides V, which the metadata and two tensors need. */
	if (o.vocab_from != NULL) {
		if ((rc = synth_open_vocab(o.vocab_from, &o.vocab, &vf, d)) != 0)
			goto out;
	}
	if ((rc = synth_put_meta(&w, &o, o.vocab, d)) != 0)
		goto out;
	rc = vf != NULL ? synth_copy_vocab(&w, vf, d) : synth_put_vocab(&w, o.vocab, d);
	if (rc != 0)
		goto out;

	size_t cap = 3 + 9 * (size_t)o.layers, n;
	if ((tensors = calloc(cap, sizeof *tensors)) == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	n = synth_tensors(&o, tensors);
	int64_t max_ne0 = o.dim > o.ffn ? o.dim : o.ffn;
	row = malloc((size_t)max_ne0 * sizeof *row);
	enc = malloc((size_t)max_ne0 * sizeof(float));
	if (row == NULL || enc == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	uint64_t params = 0;
	for (size_t i = 0; i < n; i++) {
		const int64_t ne[2] = {tensors[i].ne0, tensors[i].ne1};
		enum lm_dtype type = tensors[i].kind == SYNTH_NORM ? LM_F32 : o.type;
		if ((rc = gguf_writer_add_tensor(&w, tensors[i].name, type,
						 tensors[i].kind == SYNTH_NORM ? 1 : 2, ne, NULL,
						 d)) != 0)
			goto out;
		params += (uint64_t)ne[0] * (uint64_t)ne[1];
	}

	size_t len = strlen(o.out);
	if ((tmp = malloc(len + 16)) == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(tmp, len + 16, "%s.tmp.XXXXXX", o.out);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		rc = lm_fail(d, lm_err_from_errno(errno), "cannot create a temporary file: %s",
			     strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	/* mkstemp makes the file private; give it the permissions a plain create would. */
	mode_t mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask) != 0 || (fp = fdopen(fd, "wb")) == NULL) {
		rc = lm_fail(d, lm_err_from_errno(errno), "%s: %s", tmp, strerror(errno));
		close(fd);
		goto out;
	}
	setvbuf(fp, NULL, _IOFBF, 1 << 20);
	if ((rc = gguf_writer_write_header(&w, fp, d)) != 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		if ((rc = synth_write_tensor(&w, &o, &tensors[i], row, enc, d)) != 0)
			goto out;
	if ((rc = gguf_writer_finish(&w, d)) != 0)
		goto out;
	FILE *done = fp;
	fp = NULL;
	if (fclose(done) != 0) {
		rc = lm_fail(d, LM_EIO, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (rename(tmp, o.out) != 0) {
		rc = lm_fail(d, lm_err_from_errno(errno), "rename %s to %s: %s", tmp, o.out,
			     strerror(errno));
		goto out;
	}
	free(tmp);
	tmp = NULL;
	if (st != NULL) {
		st->n_tensors = n;
		st->n_params = params;
		st->file_bytes = gguf_writer_file_size(&w);
		st->vocab = o.vocab;
	}
out:
	if (rc != 0)
		lm_diag_prefix(d, "%s", o.out);
	if (fp != NULL)
		fclose(fp);
	if (tmp != NULL) {
		unlink(tmp);
		free(tmp);
	}
	free(enc);
	free(row);
	free(tensors);
	gguf_close(vf);
	gguf_writer_fini(&w);
	return rc;
}

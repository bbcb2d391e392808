/* gguf_samples.h — small GGUF images for the GGUF fuzz target's seed corpus and for the
 * vocabulary the HTTP fuzz target tokenizes with.
 *
 * Every image is written by common/format/gguf_write.h into memory and is deterministic (tensor bytes
 * are a fixed pattern), so the committed corpus can be checked against the generator:
 *   llama        a one-layer llama model that lm_model_open accepts: n_embd 32, two heads of
 *                16, one KV head, FFN 64, tensors in f32, f16, bf16, q8_0 and q4_0, and a
 *                SentencePiece vocabulary of 70 tokens (control, user-defined and byte tokens,
 *                scored pieces); general.alignment left at its default
 *   llama_tied   two layers, per-layer head counts as an int32 array, no output.weight (the
 *                head is tied to the embedding), general.alignment 64, GGUF version 2
 *   gpt2_vocab   a vocabulary-only file (no tensors): byte-level BPE with merges, the gpt-2
 *                pre-tokenizer, a control token and explicit special ids
 *   llama_bpe_vocab  the same pieces under the llama-bpe pre-tokenizer (ignore_merges, BOS by
 *                default), with Llama 3's <|begin_of_text|> and <|eot_id|>
 *   gemma4_vocab a gemma4 vocabulary: merges over U+2581-escaped text, 256 <0xNN> byte tokens,
 *                control and user-defined turn and tool tokens, newline-run tokens
 *   every_type   one key of every metadata type, a string holding NUL bytes, arrays of every
 *                element type (an empty one too), arrays nested three deep, and a tensor of
 *                every type GGUF defines, some with 3 and 4 dimensions
 * and damaged copies of them (gs_damage): cut inside the header, the metadata, the tensor index
 * and the data; a bad magic; version 1; a bool that is not 0 or 1; a misaligned tensor.
 */
#ifndef LM_TESTS_GGUF_SAMPLES_H
#define LM_TESTS_GGUF_SAMPLES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/format/gguf.h"
#include "common/format/gguf_write.h"

enum gs_kind {
	GS_LLAMA,
	GS_LLAMA_TIED,
	GS_GPT2_VOCAB,
	GS_LLAMA_BPE_VOCAB,
	GS_GEMMA4_VOCAB,
	GS_EVERY_TYPE,
	/* Damaged copies. */
	GS_CUT_HEADER,
	GS_CUT_METADATA,
	GS_CUT_INDEX,
	GS_CUT_DATA,
	GS_BAD_MAGIC,
	GS_VERSION_1,
	GS_BAD_BOOL,
	GS_MISALIGNED,
	GS_COUNT
};

static const char *const gs_names[GS_COUNT] = {
	[GS_LLAMA] = "llama",
	[GS_LLAMA_TIED] = "llama_tied",
	[GS_GPT2_VOCAB] = "gpt2_vocab",
	[GS_LLAMA_BPE_VOCAB] = "llama_bpe_vocab",
	[GS_GEMMA4_VOCAB] = "gemma4_vocab",
	[GS_EVERY_TYPE] = "every_type",
	[GS_CUT_HEADER] = "cut_header",
	[GS_CUT_METADATA] = "cut_metadata",
	[GS_CUT_INDEX] = "cut_index",
	[GS_CUT_DATA] = "cut_data",
	[GS_BAD_MAGIC] = "bad_magic",
	[GS_VERSION_1] = "version_1",
	[GS_BAD_BOOL] = "bad_bool",
	[GS_MISALIGNED] = "misaligned",
};

/* Whether gguf_open_mem must accept sample k. */
static inline bool gs_valid(int k)
{
	return k <= GS_EVERY_TYPE;
}

/* ---------------------------------------------------------------- the SPM vocabulary */

#define GS_SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#define GS_G  "\xc4\xa0"     /* U+0120, GPT-2's space */

/* Ids 0..2 are <unk>, <s>, </s>; then byte tokens, a user-defined token, and scored pieces. */
static const char *const gs_spm_tokens[] = {
	"<unk>",
	"<s>",
	"</s>",
	/* Byte tokens: new line, and the bytes of "é", "€", "😀" and of some ill-formed
	 * sequences (an overlong lead, a surrogate lead, 0xFF). */
	"<0x0A>",
	"<0xC3>",
	"<0xA9>",
	"<0xE2>",
	"<0x82>",
	"<0xAC>",
	"<0xF0>",
	"<0x9F>",
	"<0x98>",
	"<0x80>",
	"<0xC0>",
	"<0xED>",
	"<0xA0>",
	"<0xFF>",
	/* A user-defined token (matched in raw text) and a control token. */
	"<user>",
	"<|endoftext|>",
	/* Pieces. */
	GS_SP,
	GS_SP "the",
	GS_SP "a",
	GS_SP "cat",
	GS_SP "sat",
	GS_SP "on",
	GS_SP "mat",
	GS_SP "t",
	GS_SP "c",
	GS_SP "s",
	GS_SP "m",
	GS_SP "o",
	"the",
	"th",
	"he",
	"at",
	"on",
	"ca",
	"sa",
	"ma",
	"a",
	"b",
	"c",
	"d",
	"e",
	"f",
	"g",
	"h",
	"i",
	"k",
	"l",
	"m",
	"n",
	"o",
	"p",
	"r",
	"s",
	"t",
	"u",
	"w",
	"y",
	".",
	",",
	"!",
	"?",
	"'",
	"\xc3\xa9",
	"\xe2\x82\xac",
	"stop",
	"ST",
	"OP",
};
#define GS_SPM_N ((int)(sizeof gs_spm_tokens / sizeof gs_spm_tokens[0]))

/* tokenizer.ggml.token_type of id i: 2 unknown, 3 control, 4 user-defined, 6 byte, 1 normal. */
static inline int32_t gs_spm_type(int i)
{
	const char *s = gs_spm_tokens[i];
	if (i == 0)
		return 2;
	if (i <= 2 || strcmp(s, "<|endoftext|>") == 0)
		return 3;
	if (strcmp(s, "<user>") == 0)
		return 4;
	if (strncmp(s, "<0x", 3) == 0)
		return 6;
	return 1;
}

/* Longer pieces score higher, so "▁the" wins over "▁t" + "he". */
static inline float gs_spm_score(int i)
{
	return gs_spm_type(i) == 1 ? (float)strlen(gs_spm_tokens[i]) - (float)i / 100.0f : 0.0f;
}

/* ---------------------------------------------------------------- writing */

#define GS_TRY(call)                    \
	do {                            \
		if ((rc = (call)) != 0) \
			goto gs_fail_;  \
	} while (0)

/* The deterministic bytes of tensor t: f32 tensors hold 1 + i/1000 (norm-like values), f16
 * and bf16 small values, quantized ones a byte pattern with finite f16 scales left to chance. */
static inline void gs_tensor_bytes(const struct gguf_writer_tensor *t, uint64_t t_index,
				   uint8_t *out)
{
	for (uint64_t i = 0; i < t->size; i++)
		out[i] = (uint8_t)(i * 37u + t_index * 11u + (i >> 8));
	if (t->type == LM_F32)
		for (uint64_t i = 0; i < t->size / 4; i++) {
			float v = 1.0f + (float)i / 1000.0f;
			memcpy(out + 4 * i, &v, 4);
		}
	else if (t->type == LM_F16 || t->type == LM_BF16)
		for (uint64_t i = 0; i < t->size / 2; i++) {
			float v = (float)((int)(i % 17) - 8) / 64.0f;
			uint16_t h = t->type == LM_F16 ? lm_f32_to_f16(v) : lm_f32_to_bf16(v);
			memcpy(out + 2 * i, &h, 2);
		}
}

/* Writes w's header and tensor bytes into a malloc'd image. */
static inline int gs_finish(gguf_writer *w, uint8_t **buf, size_t *len, lm_diag *d)
{
	char *mem = NULL;
	size_t n = 0;
	int rc = 0;
	FILE *fp = open_memstream(&mem, &n);
	if (fp == NULL)
		return lm_fail(d, LM_ENOMEM, "open_memstream failed");
	GS_TRY(gguf_writer_write_header(w, fp, d));
	for (uint64_t i = 0; i < gguf_writer_n_tensors(w); i++) {
		const struct gguf_writer_tensor *t = gguf_writer_tensor_at(w, i);
		uint8_t *bytes = malloc(t->size ? t->size : 1);
		if (bytes == NULL) {
			rc = lm_fail(d, LM_ENOMEM, "out of memory");
			goto gs_fail_;
		}
		gs_tensor_bytes(t, i, bytes);
		rc = gguf_writer_write_data(w, bytes, t->size, d);
		free(bytes);
		if (rc != 0)
			goto gs_fail_;
	}
	GS_TRY(gguf_writer_finish(w, d));
	if (fclose(fp) != 0) {
		free(mem);
		return lm_fail(d, LM_EIO, "fclose of the memory stream failed");
	}
	*buf = (uint8_t *)mem;
	*len = n;
	return 0;
gs_fail_:
	fclose(fp);
	free(mem);
	return rc;
}

static inline int gs_tensor(gguf_writer *w, const char *name, enum lm_dtype type, int64_t ne0,
			    int64_t ne1, lm_diag *d)
{
	int64_t ne[2] = {ne0, ne1};
	return gguf_writer_add_tensor(w, name, type, ne1 == 1 ? 1 : 2, ne, NULL, d);
}

/* The SPM vocabulary's keys. */
static inline int gs_spm_vocab(gguf_writer *w, lm_diag *d)
{
	float scores[GS_SPM_N];
	int32_t types[GS_SPM_N];
	int rc = 0;
	for (int i = 0; i < GS_SPM_N; i++) {
		scores[i] = gs_spm_score(i);
		types[i] = gs_spm_type(i);
	}
	GS_TRY(gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama", d));
	GS_TRY(gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", gs_spm_tokens, NULL, GS_SPM_N,
				      d));
	GS_TRY(gguf_writer_kv_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, GS_SPM_N,
				  d));
	GS_TRY(gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, GS_SPM_N,
				  d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0, d));
	GS_TRY(gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true, d));
	GS_TRY(gguf_writer_kv_bool(w, "tokenizer.ggml.add_space_prefix", true, d));
gs_fail_:
	return rc;
}

/* One llama layer's nine tensors, in the types the kernels take; kv is the K and V width. */
static inline int gs_layer(gguf_writer *w, int il, bool small, int64_t kv, lm_diag *d)
{
	char name[64];
	int rc = 0;
#define GS_LAYER_T(suffix, type, ne0, ne1)                                   \
	do {                                                                 \
		snprintf(name, sizeof name, "blk.%d." suffix ".weight", il); \
		GS_TRY(gs_tensor(w, name, (type), (ne0), (ne1), d));         \
	} while (0)
	GS_LAYER_T("attn_norm", LM_F32, 32, 1);
	GS_LAYER_T("attn_q", small ? LM_Q4_0 : LM_F16, 32, 32);
	GS_LAYER_T("attn_k", LM_Q4_0, 32, kv);
	GS_LAYER_T("attn_v", LM_Q8_0, 32, kv);
	GS_LAYER_T("attn_output", small ? LM_Q4_0 : LM_BF16, 32, 32);
	GS_LAYER_T("ffn_norm", LM_F32, 32, 1);
	GS_LAYER_T("ffn_gate", LM_Q8_0, 32, 64);
	GS_LAYER_T("ffn_up", LM_Q4_0, 32, 64);
	GS_LAYER_T("ffn_down", LM_Q4_0, 64, 32);
#undef GS_LAYER_T
gs_fail_:
	return rc;
}

static inline int gs_llama(gguf_writer *w, bool tied, lm_diag *d)
{
	int rc = 0;
	int n_layer = tied ? 2 : 1;
	GS_TRY(gguf_writer_kv_str(w, "general.architecture", "llama", d));
	GS_TRY(gguf_writer_kv_str(w, "general.name", tied ? "tiny-llama-tied" : "tiny-llama", d));
	GS_TRY(gguf_writer_kv_u32(w, "llama.context_length", 64, d));
	GS_TRY(gguf_writer_kv_u32(w, "llama.embedding_length", 32, d));
	GS_TRY(gguf_writer_kv_u32(w, "llama.block_count", (uint32_t)n_layer, d));
	GS_TRY(gguf_writer_kv_u32(w, "llama.feed_forward_length", 64, d));
	if (tied) {
		static const int32_t heads[2] = {2, 2}, kv_heads[2] = {1, 2};
		GS_TRY(gguf_writer_kv_arr(w, "llama.attention.head_count", GGUF_TYPE_INT32, heads,
					  2, d));
		GS_TRY(gguf_writer_kv_arr(w, "llama.attention.head_count_kv", GGUF_TYPE_INT32,
					  kv_heads, 2, d));
		GS_TRY(gguf_writer_kv_f64(w, "llama.rope.scaling.factor", 2.0, d));
		GS_TRY(gguf_writer_kv_str(w, "llama.rope.scaling.type", "linear", d));
	} else {
		GS_TRY(gguf_writer_kv_u32(w, "llama.attention.head_count", 2, d));
		GS_TRY(gguf_writer_kv_u32(w, "llama.attention.head_count_kv", 1, d));
		GS_TRY(gguf_writer_kv_u32(w, "llama.attention.key_length", 16, d));
		GS_TRY(gguf_writer_kv_u32(w, "llama.attention.value_length", 16, d));
	}
	GS_TRY(gguf_writer_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f, d));
	GS_TRY(gguf_writer_kv_f32(w, "llama.rope.freq_base", 10000.0f, d));
	GS_TRY(gguf_writer_kv_u32(w, "llama.rope.dimension_count", 16, d));
	GS_TRY(gs_spm_vocab(w, d));

	GS_TRY(gs_tensor(w, "token_embd.weight", LM_Q8_0, 32, GS_SPM_N, d));
	for (int il = 0; il < n_layer; il++)
		GS_TRY(gs_layer(w, il, tied, tied && il == 1 ? 32 : 16, d));
	GS_TRY(gs_tensor(w, "output_norm.weight", LM_F32, 32, 1, d));
	if (!tied)
		GS_TRY(gs_tensor(w, "output.weight", LM_Q4_0, 32, GS_SPM_N, d));
gs_fail_:
	return rc;
}

/* A byte-level BPE vocabulary: GPT-2's printable bytes stand for themselves, 'Ġ' (U+0120) is
 * the space and 'Ċ' (U+010A) the new line. llama3: the llama-bpe pre-tokenizer and two more
 * control tokens. */
static inline int gs_gpt2(gguf_writer *w, bool llama3, lm_diag *d)
{
	static const char *const extra[] = {
		GS_G,
		"\xc4\x8a" /* Ċ */,
		GS_G "t",
		"he",
		GS_G "the",
		"in",
		GS_G "a",
		"er",
		"at",
		GS_G "c",
		GS_G "cat",
		"<|endoftext|>",
		"<|begin_of_text|>",
		"<|eot_id|>",
	};
	static const char *const merges[] = {
		GS_G " t", "h e", GS_G "t he", "i n",       GS_G " a",
		"e r",     "a t", GS_G " c",   GS_G "c at", "no-space",
	};
	enum { N_ASCII = 126 - 33 + 1 };
	const int n_extra = (int)(sizeof extra / sizeof extra[0]) - (llama3 ? 0 : 2);
	char ascii[N_ASCII][2];
	const char *toks[N_ASCII + sizeof extra / sizeof extra[0]];
	int32_t types[N_ASCII + sizeof extra / sizeof extra[0]];
	int rc = 0;
	for (int i = 0; i < N_ASCII; i++) {
		ascii[i][0] = (char)(33 + i);
		ascii[i][1] = '\0';
		toks[i] = ascii[i];
		types[i] = 1;
	}
	for (int i = 0; i < n_extra; i++) {
		toks[N_ASCII + i] = extra[i];
		types[N_ASCII + i] = extra[i][0] == '<' ? 3 : 1;
	}
	const uint32_t eot = N_ASCII + 11; /* <|endoftext|> */
	GS_TRY(gguf_writer_kv_str(w, "general.name",
				  llama3 ? "tiny-llama-bpe-vocab" : "tiny-gpt2-vocab", d));
	GS_TRY(gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2", d));
	GS_TRY(gguf_writer_kv_str(w, "tokenizer.ggml.pre", llama3 ? "llama-bpe" : "gpt-2", d));
	GS_TRY(gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, N_ASCII + n_extra,
				      d));
	GS_TRY(gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
				  N_ASCII + n_extra, d));
	GS_TRY(gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, NULL,
				      sizeof merges / sizeof merges[0], d));
	if (llama3) {
		GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", eot + 1, d));
		GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", eot + 2, d));
		return 0;
	}
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", eot, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", eot, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.padding_token_id", eot, d));
	GS_TRY(gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", false, d));
gs_fail_:
	return rc;
}

/* A gemma4 vocabulary: control ids 0..5, a user-defined tool token, byte tokens <0x00>..<0xFF>,
 * then pieces over U+2581-escaped text and newline runs, merged by rank. */
static inline int gs_gemma4(gguf_writer *w, lm_diag *d)
{
	static const char *const head[] = {
		"<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", "<|tool_call>",
	};
	static const char *const tail[] = {
		GS_SP, "a", "b", "c", GS_SP "a", "ab", GS_SP "ab", "\n", "\n\n", "\t",
	};
	static const char *const merges[] = {
		"a b", GS_SP " a", GS_SP "a b", "\n \n", GS_SP "a c",
	};
	enum { N_HEAD = sizeof head / sizeof head[0], N_TAIL = sizeof tail / sizeof tail[0] };
	enum { N = N_HEAD + 256 + N_TAIL };
	char bytes[256][7];
	const char *toks[N];
	int32_t types[N];
	int rc = 0;
	for (int i = 0; i < N_HEAD; i++) {
		toks[i] = head[i];
		types[i] = i == N_HEAD - 1 ? 4 : 3;
	}
	for (int b = 0; b < 256; b++) {
		snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
		toks[N_HEAD + b] = bytes[b];
		types[N_HEAD + b] = 6;
	}
	for (int i = 0; i < N_TAIL; i++) {
		toks[N_HEAD + 256 + i] = tail[i];
		types[N_HEAD + 256 + i] = 1;
	}
	GS_TRY(gguf_writer_kv_str(w, "general.name", "tiny-gemma4-vocab", d));
	GS_TRY(gguf_writer_kv_str(w, "tokenizer.ggml.model", "gemma4", d));
	GS_TRY(gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, N, d));
	GS_TRY(gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, N, d));
	GS_TRY(gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, NULL,
				      sizeof merges / sizeof merges[0], d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 2, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 1, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 3, d));
	GS_TRY(gguf_writer_kv_u32(w, "tokenizer.ggml.padding_token_id", 0, d));
	GS_TRY(gguf_writer_kv_bool(w, "tokenizer.ggml.add_space_prefix", false, d));
gs_fail_:
	return rc;
}

static inline int gs_every_type(gguf_writer *w, lm_diag *d)
{
	static const uint8_t u8s[3] = {0, 1, 255};
	static const int8_t i8s[3] = {-128, 0, 127};
	static const uint16_t u16s[3] = {0, 1, 65535};
	static const int16_t i16s[3] = {-32768, 0, 32767};
	static const uint32_t u32s[3] = {0, 1, UINT32_MAX};
	static const int32_t i32s[3] = {INT32_MIN, -1, INT32_MAX};
	static const float f32s[3] = {-1.5f, 0.0f, 3.4e38f};
	static const bool bools[3] = {true, false, true};
	static const uint64_t u64s[3] = {0, 1, UINT64_MAX};
	static const int64_t i64s[3] = {INT64_MIN, -1, INT64_MAX};
	static const double f64s[3] = {-1e300, 0.5, 1e300};
	static const char *const strs[3] = {"", "two", "\xe2\x96\x81three"};
	int rc = 0;
	GS_TRY(gguf_writer_kv_str(w, "general.architecture", "every-type", d));
	GS_TRY(gguf_writer_kv_u8(w, "t.u8", 200, d));
	GS_TRY(gguf_writer_kv_i8(w, "t.i8", -100, d));
	GS_TRY(gguf_writer_kv_u16(w, "t.u16", 60000, d));
	GS_TRY(gguf_writer_kv_i16(w, "t.i16", -30000, d));
	GS_TRY(gguf_writer_kv_u32(w, "t.u32", 4000000000u, d));
	GS_TRY(gguf_writer_kv_i32(w, "t.i32", -2000000000, d));
	GS_TRY(gguf_writer_kv_f32(w, "t.f32", 0.25f, d));
	GS_TRY(gguf_writer_kv_bool(w, "t.bool", true, d));
	GS_TRY(gguf_writer_kv_str(w, "t.str", "a string", d));
	GS_TRY(gguf_writer_kv_strn(w, "t.str_nul", "a\0b\0", 4, d));
	GS_TRY(gguf_writer_kv_u64(w, "t.u64", UINT64_MAX, d));
	GS_TRY(gguf_writer_kv_i64(w, "t.i64", INT64_MIN, d));
	GS_TRY(gguf_writer_kv_f64(w, "t.f64", -2.5, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.u8", GGUF_TYPE_UINT8, u8s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.i8", GGUF_TYPE_INT8, i8s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.u16", GGUF_TYPE_UINT16, u16s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.i16", GGUF_TYPE_INT16, i16s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.u32", GGUF_TYPE_UINT32, u32s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.i32", GGUF_TYPE_INT32, i32s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f32s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.bool", GGUF_TYPE_BOOL, bools, 3, d));
	GS_TRY(gguf_writer_kv_arr_str(w, "a.str", strs, NULL, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.u64", GGUF_TYPE_UINT64, u64s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.i64", GGUF_TYPE_INT64, i64s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 3, d));
	GS_TRY(gguf_writer_kv_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0, d));
	/* [["x", "yz"], []] and [[[1, 2], [3]], [[]]] */
	GS_TRY(gguf_writer_arr_begin(w, "n.strs", GGUF_TYPE_ARRAY, 2, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_STRING, 2, d));
	GS_TRY(gguf_writer_arr_str(w, "x", 1, d));
	GS_TRY(gguf_writer_arr_str(w, "yz", 2, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_STRING, 0, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_begin(w, "n.deep", GGUF_TYPE_ARRAY, 2, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_ARRAY, 2, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_INT32, 2, d));
	GS_TRY(gguf_writer_arr_elems(w, i32s, 2, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_INT32, 1, d));
	GS_TRY(gguf_writer_arr_elems(w, i32s + 2, 1, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_ARRAY, 1, d));
	GS_TRY(gguf_writer_arr_begin(w, NULL, GGUF_TYPE_FLOAT64, 0, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_end(w, d));
	GS_TRY(gguf_writer_arr_end(w, d));

	/* One tensor of every type, a row of one block each; names as a model's would be. */
	for (uint32_t t = 0; t < LM_DTYPE_GGUF_COUNT; t++) {
		const struct lm_dtype_info *info = lm_dtype_info(t);
		if (info == NULL)
			continue;
		char name[64];
		snprintf(name, sizeof name, "blk.%u.%s.weight", t % 4, info->name);
		int64_t ne[4] = {info->blck, 1 + t % 2, 1 + t % 3, 2};
		uint32_t n_dims = t % 4 == 3 ? 4 : t % 4 == 2 ? 3 : 1;
		GS_TRY(gguf_writer_add_tensor(w, name, (enum lm_dtype)t, n_dims, ne, NULL, d));
	}
	GS_TRY(gs_tensor(w, "token_embd.weight", LM_F16, 8, 4, d));
gs_fail_:
	return rc;
}

/* Finds the first occurrence of `needle` in the image (for placing damage). */
static inline size_t gs_find(const uint8_t *p, size_t n, const void *needle, size_t len)
{
	for (size_t i = 0; i + len <= n; i++)
		if (memcmp(p + i, needle, len) == 0)
			return i;
	return n;
}

/* Damages a copy of a valid image in place (kind >= GS_CUT_HEADER); *len may shrink. */
static inline void gs_damage(int kind, uint8_t *p, size_t *len, uint64_t header_size)
{
	switch (kind) {
	case GS_CUT_HEADER:
		*len = 20;
		break;
	case GS_CUT_METADATA:
		*len = gs_find(p, *len, "tokenizer.ggml.scores", 21) + 40;
		break;
	case GS_CUT_INDEX:
		*len = gs_find(p, *len, "blk.0.ffn_up.weight", 19) + 19;
		break;
	case GS_CUT_DATA:
		*len = (size_t)header_size + 100;
		break;
	case GS_BAD_MAGIC:
		p[3] = 'g';
		break;
	case GS_VERSION_1:
		p[4] = 1;
		break;
	case GS_BAD_BOOL: {
		/* The value byte after "t.bool" and its type (7, as a u32). */
		size_t at = gs_find(p, *len, "t.bool", 6);
		p[at + 6 + 4] = 2;
		break;
	}
	case GS_MISALIGNED: {
		/* The last tensor's offset (the u64 after its name, dims and type) gets +1. */
		size_t at = gs_find(p, *len, "output.weight", 13);
		p[at + 13 + 4 + 16 + 4] += 1;
		break;
	}
	}
}

/* The base image each damaged sample starts from. */
static inline int gs_base(int kind)
{
	switch (kind) {
	case GS_BAD_BOOL:
		return GS_EVERY_TYPE;
	case GS_CUT_HEADER:
	case GS_BAD_MAGIC:
	case GS_VERSION_1:
		return GS_GPT2_VOCAB;
	default:
		return GS_LLAMA;
	}
}

/* Sample k as a malloc'd image the caller frees. */
static inline int gs_make(int k, uint8_t **buf, size_t *len, lm_diag *d)
{
	int base = k <= GS_EVERY_TYPE ? k : gs_base(k);
	gguf_writer w;
	int rc = gguf_writer_init(&w, base == GS_LLAMA_TIED ? 64 : 0, d);
	if (rc != 0)
		return rc;
	switch (base) {
	case GS_LLAMA:
	case GS_LLAMA_TIED:
		rc = gs_llama(&w, base == GS_LLAMA_TIED, d);
		break;
	case GS_GPT2_VOCAB:
	case GS_LLAMA_BPE_VOCAB:
		rc = gs_gpt2(&w, base == GS_LLAMA_BPE_VOCAB, d);
		break;
	case GS_GEMMA4_VOCAB:
		rc = gs_gemma4(&w, d);
		break;
	default:
		rc = gs_every_type(&w, d);
		break;
	}
	if (rc == 0)
		rc = gs_finish(&w, buf, len, d);
	uint64_t header_size = gguf_writer_header_size(&w);
	gguf_writer_fini(&w);
	if (rc != 0)
		return rc;
	if (base == GS_LLAMA_TIED)
		(*buf)[4] = 2; /* version 2: the same layout as 3 */
	if (k > GS_EVERY_TYPE)
		gs_damage(k, *buf, len, header_size);
	return 0;
}

#undef GS_TRY

#endif

/* tok_load.c — reading and checking a vocabulary from GGUF metadata (tokenizer.ggml.*).
 *
 * The order of the steps and the defaults follow llama.cpp's llama_vocab::impl::load(): token
 * attributes come from token_type and are then corrected by name (control-looking tokens become
 * control tokens, end-of-generation names join the EOG set), and each token's decoded piece is
 * computed once here.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tok/tok_internal.h"
#include "common/tok/tok_unicode.h"

/* Bounds on sizes no real vocabulary approaches (the largest have ~262k tokens, pieces of a few
 * hundred bytes); past them the file is refused rather than trusted. */
#define TOK_MAX_TOKENS   (1 << 24)
#define TOK_MAX_MERGES   (1 << 24)
#define TOK_MAX_TEXT_LEN 65535u
#define TOK_MAX_ARENA    (UINT32_MAX - 1)

#define KEY_MODEL        "tokenizer.ggml.model"
#define KEY_PRE          "tokenizer.ggml.pre"
#define KEY_TOKENS       "tokenizer.ggml.tokens"
#define KEY_SCORES       "tokenizer.ggml.scores"
#define KEY_TYPES        "tokenizer.ggml.token_type"
#define KEY_MERGES       "tokenizer.ggml.merges"

/* --- hashing --- */

uint64_t tok_hash_bytes(uint64_t h, const void *p, size_t len)
{
	const uint8_t *s = p;
	for (size_t i = 0; i < len; i++) {
		h ^= s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint32_t tok_hash_cap(size_t n)
{
	uint32_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	return cap;
}

int32_t tok_find_text(const tok_vocab *v, const char *s, size_t len)
{
	uint32_t i = (uint32_t)tok_hash_bytes(TOK_HASH_SEED, s, len) & v->text_hash_mask;
	for (;; i = (i + 1) & v->text_hash_mask) {
		uint32_t slot = v->text_hash[i];
		if (slot == 0)
			return -1;
		const struct tok_token *t = &v->tok[slot - 1];
		if (t->text_len == len && memcmp(v->text + t->text_off, s, len) == 0)
			return (int32_t)(slot - 1);
	}
}

static uint64_t tok_merge_hash(const char *a, size_t alen, const char *b, size_t blen)
{
	uint64_t h = tok_hash_bytes(TOK_HASH_SEED, a, alen);
	h = (h ^ (alen + 0x9e3779b97f4a7c15ull)) * 0x100000001b3ull; /* ("ab","c") != ("a","bc") */
	return tok_hash_bytes(h, b, blen);
}

int32_t tok_find_merge(const tok_vocab *v, const char *a, size_t alen, const char *b, size_t blen)
{
	if (v->merge_hash == NULL)
		return -1;
	uint32_t i = (uint32_t)tok_merge_hash(a, alen, b, blen) & v->merge_hash_mask;
	for (;; i = (i + 1) & v->merge_hash_mask) {
		uint32_t slot = v->merge_hash[i];
		if (slot == 0)
			return -1;
		const struct tok_merge *m = &v->merges[slot - 1];
		const char *mt = v->merge_text + m->off;
		if (m->first_len == alen && m->sec_len == blen && memcmp(mt, a, alen) == 0 &&
		    memcmp(mt + alen, b, blen) == 0)
			return (int32_t)(slot - 1);
	}
}

/* --- checks --- */

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF, no NUL. Returns the
 * offset of the first bad byte, or len. */
static size_t tok_utf8_check(const uint8_t *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		uint8_t b = s[i];
		size_t n;
		uint8_t lo = 0x80, hi = 0xbf;
		if (b == 0)
			return i;
		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xc2 && b <= 0xdf) {
			n = 2;
		} else if (b >= 0xe0 && b <= 0xef) {
			n = 3;
			if (b == 0xe0)
				lo = 0xa0;
			if (b == 0xed)
				hi = 0x9f;
		} else if (b >= 0xf0 && b <= 0xf4) {
			n = 4;
			if (b == 0xf0)
				lo = 0x90;
			if (b == 0xf4)
				hi = 0x8f;
		} else {
			return i;
		}
		if (len - i < n || s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k < n; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		i += n;
	}
	return len;
}

static int tok_get_arr(const gguf_file *f, const char *key, enum gguf_type elem,
		       const struct gguf_arr **out, lm_diag *d)
{
	const struct gguf_kv *kv = gguf_find(f, key);
	*out = NULL;
	if (kv == NULL)
		return LM_ENOTFOUND;
	if (kv->type != GGUF_TYPE_ARRAY)
		return lm_fail(d, LM_EFORMAT, "%s: %s is a %s, not an array", gguf_path(f), key,
			       gguf_type_name(kv->type));
	if (elem != GGUF_TYPE_COUNT && kv->v.arr.type != elem)
		return lm_fail(d, LM_EFORMAT, "%s: %s is an array of %s, not of %s", gguf_path(f),
			       key, gguf_type_name(kv->v.arr.type), gguf_type_name(elem));
	*out = &kv->v.arr;
	return 0;
}

/* An optional boolean key: absent leaves *val alone. */
static int tok_opt_bool(const gguf_file *f, const char *key, bool *val, lm_diag *d)
{
	bool b;
	int rc = gguf_get_bool(f, key, &b, d);
	if (rc == LM_ENOTFOUND)
		return 0;
	if (rc != 0)
		return lm_fail(d, LM_EFORMAT, "%s: %s must be a bool", gguf_path(f), key);
	*val = b;
	return 0;
}

/* An optional token id key: absent leaves *id alone; present must name a token. */
static int tok_opt_id(const gguf_file *f, const char *key, int32_t n, int32_t *id, lm_diag *d)
{
	uint32_t u;
	int rc = gguf_get_u32(f, key, &u, d);
	if (rc == LM_ENOTFOUND)
		return 0;
	if (rc != 0)
		return lm_fail(d, LM_EFORMAT, "%s: %s must be an unsigned 32-bit token id",
			       gguf_path(f), key);
	if (u >= (uint32_t)n)
		return lm_fail(d, LM_EFORMAT,
			       "%s: %s = %u is out of range (the vocabulary has %d tokens)",
			       gguf_path(f), key, u, n);
	*id = (int32_t)u;
	return 0;
}

/* --- loading steps --- */

/* llama.cpp's names for the pre-tokenizers of byte-level BPE (src/llama-vocab.cpp, load()), with
 * what else each name sets there that changes tokenization. Names whose regexes this code does not
 * have (deepseek-llm, gpt-4o, tekken, ...) are refused. */
#define TOK_PRE_F_IGNORE_MERGES 1u /* ignore_merges: a word that is a token stays whole */
#define TOK_PRE_F_ADD_BOS       2u /* add_bos defaults to true */
#define TOK_PRE_F_NO_BOS        4u /* no default BOS id */

static const struct tok_pre_name {
	const char *name;
	enum tok_pre pre;
	unsigned flags;
} tok_pre_names[] = {
	{"default", TOK_PRE_DEFAULT, 0},
	{"gpt-2", TOK_PRE_GPT2, 0},
	{"phi-2", TOK_PRE_GPT2, 0},
	{"jina-es", TOK_PRE_GPT2, 0},
	{"jina-de", TOK_PRE_GPT2, 0},
	{"gigachat", TOK_PRE_GPT2, 0},
	{"jina-v2-es", TOK_PRE_GPT2, 0},
	{"jina-v2-de", TOK_PRE_GPT2, 0},
	{"a.x-4.0", TOK_PRE_GPT2, 0},
	{"mellum", TOK_PRE_GPT2, 0},
	{"modern-bert", TOK_PRE_GPT2, 0},
	{"jina-v1-en", TOK_PRE_GPT2, 0},
	{"jina-v2-code", TOK_PRE_GPT2, 0},
	{"roberta-bpe", TOK_PRE_GPT2, 0},
	{"mpt", TOK_PRE_GPT2, 0},
	{"olmo", TOK_PRE_GPT2, 0},
	{"jais", TOK_PRE_GPT2, 0},
	{"trillion", TOK_PRE_GPT2, 0},
	{"granite-docling", TOK_PRE_GPT2, 0},
	{"exaone4", TOK_PRE_GPT2, 0},
	{"starcoder", TOK_PRE_STARCODER, 0},
	{"refact", TOK_PRE_STARCODER, 0},
	{"command-r", TOK_PRE_STARCODER, 0},
	{"smollm", TOK_PRE_STARCODER, 0},
	{"codeshell", TOK_PRE_STARCODER, 0},
	{"exaone", TOK_PRE_STARCODER, 0},
	{"minerva-7b", TOK_PRE_STARCODER, 0},
	{"mellum2", TOK_PRE_STARCODER, 0},
	{"deepseek-coder", TOK_PRE_DEEPSEEK_CODER, 0},
	{"falcon", TOK_PRE_FALCON, 0},
	{"llama3", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"llama-v3", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"llama-bpe", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"falcon3", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"falcon-h1", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"pixtral", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"midm-2.0", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"lfm2", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"jina-v5-nano", TOK_PRE_LLAMA3, TOK_PRE_F_IGNORE_MERGES | TOK_PRE_F_ADD_BOS},
	{"dbrx", TOK_PRE_LLAMA3, 0},
	{"smaug-bpe", TOK_PRE_LLAMA3, 0},
	{"glm4", TOK_PRE_LLAMA3, TOK_PRE_F_NO_BOS},
	{"chatglm-bpe", TOK_PRE_LLAMA3, TOK_PRE_F_NO_BOS},
	{"qwen2", TOK_PRE_QWEN2, 0},
	{"deepseek-r1-qwen", TOK_PRE_QWEN2, 0},
	{"kormo", TOK_PRE_QWEN2, 0},
	{"f2llmv2", TOK_PRE_QWEN2, 0},
	{"megrez", TOK_PRE_QWEN2, 0},
	{"stablelm2", TOK_PRE_QWEN2, 0},
	{"hunyuan", TOK_PRE_QWEN2, 0},
	{"solar-open", TOK_PRE_QWEN2, 0},
	{"grok-2", TOK_PRE_QWEN2, 0},
	{"qwen35", TOK_PRE_QWEN35, 0},
	{"gpt-4o", TOK_PRE_GPT4O, 0},
	{"llama4", TOK_PRE_GPT4O, 0},
	{"kanana2", TOK_PRE_GPT4O, 0},
	{"talkie", TOK_PRE_GPT4O, 0},
	/* Gemma 4's shape under a "gpt2" model: spaces escaped, raw UTF-8, <0xNN> fallback. */
	{"gemma4", TOK_PRE_NEWLINES, TOK_PRE_F_ADD_BOS},
	{"granite-embed-multi-311m", TOK_PRE_NEWLINES, TOK_PRE_F_ADD_BOS},
};

/* Sets the SPM-like BPE of Gemma 4: llama.cpp forces add_bos for it whatever the file says. */
static void tok_set_gemma4(tok_vocab *v)
{
	v->model = TOK_MODEL_GEMMA4;
	v->pre = TOK_PRE_NEWLINES;
	v->byte_encode = false;
	v->escape_spaces = true;
	v->add_bos = true;
}

static int tok_read_model(const gguf_file *f, tok_vocab *v, lm_diag *d)
{
	const char *model = NULL, *pre = NULL;
	int rc = gguf_get_str(f, KEY_MODEL, &model, d);
	if (rc == LM_ENOTFOUND)
		return lm_fail(d, LM_EFORMAT, "%s: %s is missing: the file has no vocabulary",
			       gguf_path(f), KEY_MODEL);
	if (rc != 0)
		return lm_fail(d, LM_EFORMAT, "%s: %s must be a string", gguf_path(f), KEY_MODEL);
	v->eot = v->eom = v->pad = v->sep = -1;
	if (strcmp(model, "llama") == 0) {
		v->model = TOK_MODEL_SPM;
		v->pre = TOK_PRE_NONE;
		v->add_space_prefix = true;
		v->add_bos = true;
		v->bos = 1, v->eos = 2, v->unk = 0;
		return 0;
	}
	if (strcmp(model, "gemma4") == 0) {
		/* Its pre-tokenizer is implied; tokenizer.ggml.pre is not read. */
		tok_set_gemma4(v);
		v->bos = v->eos = v->unk = -1;
		return 0;
	}
	if (strcmp(model, "gpt2") != 0)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "%s: %s = '%s' is not supported (supported: llama, gpt2, gemma4)",
			       gguf_path(f), KEY_MODEL, model);
	v->model = TOK_MODEL_BPE;
	v->byte_encode = true;
	v->bos = 11, v->eos = 11, v->unk = -1;

	rc = gguf_get_str(f, KEY_PRE, &pre, d);
	if (rc == LM_ENOTFOUND) {
		v->pre = TOK_PRE_DEFAULT;
		return 0;
	}
	if (rc != 0)
		return lm_fail(d, LM_EFORMAT, "%s: %s must be a string", gguf_path(f), KEY_PRE);
	for (size_t i = 0; i < sizeof tok_pre_names / sizeof tok_pre_names[0]; i++) {
		const struct tok_pre_name *p = &tok_pre_names[i];
		if (strcmp(pre, p->name) != 0)
			continue;
		v->pre = p->pre;
		if (p->pre == TOK_PRE_NEWLINES)
			tok_set_gemma4(v);
		v->ignore_merges = (p->flags & TOK_PRE_F_IGNORE_MERGES) != 0;
		if (p->flags & TOK_PRE_F_ADD_BOS)
			v->add_bos = true;
		if (p->flags & TOK_PRE_F_NO_BOS)
			v->bos = -1;
		return 0;
	}
	return lm_fail(d, LM_EUNSUPPORTED,
		       "%s: %s = '%s' is not a supported pre-tokenizer (supported: gpt-2, mpt, "
		       "starcoder, refact, deepseek-coder, falcon, llama-bpe, qwen2, qwen35, "
		       "gpt-4o, gemma4, default and their aliases)",
		       gguf_path(f), KEY_PRE, pre);
}

static int tok_read_tokens(const gguf_file *f, tok_vocab *v, lm_diag *d)
{
	const struct gguf_arr *toks, *scores = NULL, *types = NULL;
	int rc = tok_get_arr(f, KEY_TOKENS, GGUF_TYPE_STRING, &toks, d);
	if (rc == LM_ENOTFOUND)
		return lm_fail(d, LM_EFORMAT, "%s: %s is missing", gguf_path(f), KEY_TOKENS);
	if (rc != 0)
		return rc;
	if (toks->n == 0 || toks->n > TOK_MAX_TOKENS)
		return lm_fail(d, LM_EFORMAT, "%s: %s has %llu tokens (1..%d allowed)",
			       gguf_path(f), KEY_TOKENS, (unsigned long long)toks->n,
			       TOK_MAX_TOKENS);
	int32_t n = (int32_t)toks->n;

	rc = tok_get_arr(f, KEY_SCORES, GGUF_TYPE_COUNT, &scores, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	if (scores != NULL) {
		if (scores->type != GGUF_TYPE_FLOAT32 && scores->type != GGUF_TYPE_INT32)
			return lm_fail(d, LM_EFORMAT,
				       "%s: %s is an array of %s, not of float32 or int32",
				       gguf_path(f), KEY_SCORES, gguf_type_name(scores->type));
		if (scores->n != toks->n)
			return lm_fail(d, LM_EFORMAT, "%s: %s has %llu entries but %s has %d",
				       gguf_path(f), KEY_SCORES, (unsigned long long)scores->n,
				       KEY_TOKENS, n);
	}
	rc = tok_get_arr(f, KEY_TYPES, GGUF_TYPE_INT32, &types, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	if (types != NULL && types->n != toks->n)
		return lm_fail(d, LM_EFORMAT, "%s: %s has %llu entries but %s has %d", gguf_path(f),
			       KEY_TYPES, (unsigned long long)types->n, KEY_TOKENS, n);

	v->n = n;
	v->tok = calloc((size_t)n, sizeof *v->tok);
	if (v->tok == NULL)
		return LM_ENOMEM;
	size_t arena = 0;
	char empty[32];
	for (int32_t i = 0; i < n; i++) {
		size_t len = toks->str_lens[i];
		if (len == 0)
			len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
		if (len > TOK_MAX_TEXT_LEN)
			return lm_fail(d, LM_EFORMAT,
				       "%s: %s[%d] is %zu bytes long (at most %u allowed)",
				       gguf_path(f), KEY_TOKENS, i, len, TOK_MAX_TEXT_LEN);
		arena += len + 1;
	}
	if (arena > TOK_MAX_ARENA)
		return lm_fail(d, LM_EFORMAT, "%s: %s texts total %zu bytes", gguf_path(f),
			       KEY_TOKENS, arena);
	v->text = malloc(arena);
	v->text_hash_mask = tok_hash_cap((size_t)n) - 1;
	v->text_hash = calloc((size_t)v->text_hash_mask + 1, sizeof *v->text_hash);
	if (v->text == NULL || v->text_hash == NULL)
		return LM_ENOMEM;

	static const uint16_t attr_of_type[7] = {
		TOK_ATTR_UNDEFINED,    TOK_ATTR_NORMAL, TOK_ATTR_UNKNOWN, TOK_ATTR_CONTROL,
		TOK_ATTR_USER_DEFINED, TOK_ATTR_UNUSED, TOK_ATTR_BYTE,
	};
	size_t off = 0;
	for (int32_t i = 0; i < n; i++) {
		struct tok_token *t = &v->tok[i];
		const char *s = toks->strs[i];
		size_t len = toks->str_lens[i];
		if (len == 0) {
			len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
			s = empty;
		}
		size_t bad = tok_utf8_check((const uint8_t *)s, len);
		if (bad != len)
			return lm_fail(d, LM_EFORMAT,
				       "%s: %s[%d] is not valid UTF-8 (byte 0x%02x at offset %zu)",
				       gguf_path(f), KEY_TOKENS, i, (uint8_t)s[bad], bad);
		memcpy(v->text + off, s, len);
		v->text[off + len] = '\0';
		t->text_off = (uint32_t)off;
		t->text_len = (uint32_t)len;
		off += len + 1;

		int32_t dup = tok_find_text(v, s, len);
		if (dup >= 0)
			return lm_fail(d, LM_EFORMAT, "%s: %s[%d] and [%d] are both '%.*s'",
				       gguf_path(f), KEY_TOKENS, dup, i, (int)(len > 64 ? 64 : len),
				       s);
		uint32_t h = (uint32_t)tok_hash_bytes(TOK_HASH_SEED, s, len) & v->text_hash_mask;
		while (v->text_hash[h] != 0)
			h = (h + 1) & v->text_hash_mask;
		v->text_hash[h] = (uint32_t)i + 1;

		if (scores != NULL) {
			double sc = scores->type == GGUF_TYPE_FLOAT32
					    ? gguf_arr_f64(scores, (uint64_t)i)
					    : (double)gguf_arr_i64(scores, (uint64_t)i);
			if (isnan(sc))
				return lm_fail(d, LM_EFORMAT, "%s: %s[%d] is NaN", gguf_path(f),
					       KEY_SCORES, i);
			t->score = (float)sc;
		}
		t->attr = TOK_ATTR_NORMAL;
		if (types != NULL) {
			int64_t ty = gguf_arr_i64(types, (uint64_t)i);
			t->attr = ty >= 0 && ty <= 6 ? attr_of_type[ty] : TOK_ATTR_UNDEFINED;
		}
	}
	return 0;
}

static int tok_read_merges(const gguf_file *f, tok_vocab *v, lm_diag *d)
{
	const struct gguf_arr *m;
	int rc = tok_get_arr(f, KEY_MERGES, GGUF_TYPE_STRING, &m, d);
	if (rc == LM_ENOTFOUND)
		return lm_fail(d, LM_EFORMAT, "%s: %s is missing (a %s vocabulary needs it)",
			       gguf_path(f), KEY_MERGES,
			       v->model == TOK_MODEL_GEMMA4 ? "gemma4" : "gpt2");
	if (rc != 0)
		return rc;
	if (m->n > TOK_MAX_MERGES)
		return lm_fail(d, LM_EFORMAT, "%s: %s has %llu entries (at most %d allowed)",
			       gguf_path(f), KEY_MERGES, (unsigned long long)m->n, TOK_MAX_MERGES);
	size_t arena = 0;
	for (uint64_t i = 0; i < m->n; i++) {
		if (m->str_lens[i] > TOK_MAX_TEXT_LEN)
			return lm_fail(d, LM_EFORMAT, "%s: %s[%llu] is %llu bytes long",
				       gguf_path(f), KEY_MERGES, (unsigned long long)i,
				       (unsigned long long)m->str_lens[i]);
		arena += m->str_lens[i];
	}
	if (arena > TOK_MAX_ARENA)
		return lm_fail(d, LM_EFORMAT, "%s: %s total %zu bytes", gguf_path(f), KEY_MERGES,
			       arena);
	v->n_merges = (uint32_t)m->n;
	v->merges = calloc(m->n ? m->n : 1, sizeof *v->merges);
	v->merge_text = malloc(arena ? arena : 1);
	v->merge_hash_mask = tok_hash_cap(m->n) - 1;
	v->merge_hash = calloc((size_t)v->merge_hash_mask + 1, sizeof *v->merge_hash);
	if (v->merges == NULL || v->merge_text == NULL || v->merge_hash == NULL)
		return LM_ENOMEM;
	size_t off = 0;
	for (uint32_t i = 0; i < v->n_merges; i++) {
		/* "first second", split at the first space after the first byte (so a first part
		 * may be a lone space); an entry without one can never match, as in llama.cpp. */
		const char *s = m->strs[i];
		size_t len = m->str_lens[i];
		const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
		if (sp == NULL)
			continue;
		size_t alen = (size_t)(sp - s), blen = len - alen - 1;
		if (tok_find_merge(v, s, alen, sp + 1, blen) >= 0)
			continue; /* a repeated pair keeps its first (best) rank */
		struct tok_merge *e = &v->merges[i];
		memcpy(v->merge_text + off, s, alen);
		memcpy(v->merge_text + off + alen, sp + 1, blen);
		e->off = (uint32_t)off;
		e->first_len = (uint32_t)alen;
		e->sec_len = (uint32_t)blen;
		off += alen + blen;
		uint32_t h = (uint32_t)tok_merge_hash(s, alen, sp + 1, blen) & v->merge_hash_mask;
		while (v->merge_hash[h] != 0)
			h = (h + 1) & v->merge_hash_mask;
		v->merge_hash[h] = i + 1;
	}
	return 0;
}

static int tok_read_special(const gguf_file *f, tok_vocab *v, lm_diag *d)
{
	int32_t n = v->n;
	int32_t *defaults[] = {&v->bos, &v->eos, &v->unk};
	for (size_t i = 0; i < 3; i++)
		if (*defaults[i] >= n)
			*defaults[i] = -1;
	static const struct {
		const char *key;
		size_t field;
	} keys[] = {
		{"tokenizer.ggml.bos_token_id", offsetof(tok_vocab, bos)},
		{"tokenizer.ggml.eos_token_id", offsetof(tok_vocab, eos)},
		{"tokenizer.ggml.eot_token_id", offsetof(tok_vocab, eot)},
		{"tokenizer.ggml.eom_token_id", offsetof(tok_vocab, eom)},
		{"tokenizer.ggml.unknown_token_id", offsetof(tok_vocab, unk)},
		{"tokenizer.ggml.seperator_token_id", offsetof(tok_vocab, sep)}, /* sic */
		{"tokenizer.ggml.padding_token_id", offsetof(tok_vocab, pad)},
	};
	int rc;
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if ((rc = tok_opt_id(f, keys[i].key, n, (int32_t *)((char *)v + keys[i].field),
				     d)) != 0)
			return rc;
	if ((rc = tok_opt_bool(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, d)) !=
		    0 ||
	    (rc = tok_opt_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos, d)) != 0 ||
	    (rc = tok_opt_bool(f, "tokenizer.ggml.add_eos_token", &v->add_eos, d)) != 0)
		return rc;
	if (v->model == TOK_MODEL_GEMMA4)
		v->add_bos = true; /* llama.cpp overrides the file for Gemma 4 */
	return 0;
}

/* --- llama.cpp's corrections by name --- */

static int32_t tok_find_str(const tok_vocab *v, const char *s)
{
	return tok_find_text(v, s, strlen(s));
}

/* The first of `names` present in the vocabulary. */
static int32_t tok_find_any(const tok_vocab *v, const char *const *names)
{
	for (; *names != NULL; names++) {
		int32_t id = tok_find_str(v, *names);
		if (id >= 0)
			return id;
	}
	return -1;
}

static int tok_eog_add(tok_vocab *v, int32_t id)
{
	if (id < 0)
		return 0;
	for (size_t i = 0; i < v->n_eog; i++)
		if (v->eog[i] == id)
			return 0;
	int32_t *p = realloc(v->eog, (v->n_eog + 1) * sizeof *p);
	if (p == NULL)
		return LM_ENOMEM;
	v->eog = p;
	v->eog[v->n_eog++] = id;
	return 0;
}

static void tok_eog_remove(tok_vocab *v, int32_t id)
{
	for (size_t i = 0; i < v->n_eog; i++)
		if (v->eog[i] == id) {
			v->eog[i] = v->eog[--v->n_eog];
			return;
		}
}

static bool tok_eog_has(const tok_vocab *v, const char *name)
{
	int32_t id = tok_find_str(v, name);
	for (size_t i = 0; id >= 0 && i < v->n_eog; i++)
		if (v->eog[i] == id)
			return true;
	return false;
}

static int tok_cmp_id(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return x < y ? -1 : x > y;
}

static int tok_fix_by_name(const gguf_file *f, tok_vocab *v, lm_diag *d)
{
	static const char *const eot_names[] = {
		"<|eot_id|>",
		"<|im_end|>",
		"<|end|>",
		"<end_of_turn>",
		"<|endoftext|>",
		"<|end_of_text|>",
		"<EOT>",
		"_<EOT>",
		"[EOT]",
		"<｜end▁of▁sentence｜>",
		"<end_of_utterance>",
		NULL,
	};
	static const char *const eom_names[] = {"<|eom_id|>", NULL};
	static const char *const fim_pre[] = {
		"<|fim_prefix|>",  "<fim-prefix>", "<fim_prefix>",
		"<｜fim▁begin｜>", "<PRE>",        "▁<PRE>",
		"<|code_prefix|>", "<|prefix|>",   NULL,
	};
	static const char *const fim_suf[] = {
		"<|fim_suffix|>",  "<fim-suffix>", "<fim_suffix>",
		"<｜fim▁hole｜>",  "<SUF>",        "▁<SUF>",
		"<|code_suffix|>", "<|suffix|>",   NULL,
	};
	static const char *const fim_mid[] = {
		"<|fim_middle|>",  "<fim-middle>", "<fim_middle>",
		"<｜fim▁end｜>",   "<MID>",        "▁<MID>",
		"<|code_middle|>", "<|middle|>",   NULL,
	};
	static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
					      "<PAD>",       "[PAD]",     NULL};
	static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
					      "<REPO>",       "<reponame>",    NULL};
	static const char *const fim_sep[] = {"<|file_sep|>", NULL};
	static const char *const eog_names[] = {
		"<|eot_id|>",
		"<|im_end|>",
		"<|end|>",
		"<|return|>",
		"<|call|>",
		"<|flush|>",
		"<|calls|>",
		"<end_of_turn>",
		"<|endoftext|>",
		"</s>",
		"<|eom_id|>",
		"<EOT>",
		"_<EOT>",
		"[EOT]",
		"[EOS]",
		"<|end_of_text|>",
		"<end_of_utterance>",
		"<eos>",
		"<turn|>",
		"<|tool_response>",
		"<｜end▁of▁sentence｜>",
		"[e~[",
	};
	static const char *const user_defined_names[] = {"<|channel|>", "<|message|>", "<|start|>",
							 "<|constrain|>"};
	int rc;

	/* FIM ids: their keys, else their names; those found by name become control tokens. */
	int32_t fim[6] = {-1, -1, -1, -1, -1, -1};
	static const char *const fim_keys[6][2] = {
		{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
		{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
		{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
		{"tokenizer.ggml.fim_pad_token_id", NULL},
		{"tokenizer.ggml.fim_rep_token_id", NULL},
		{"tokenizer.ggml.fim_sep_token_id", NULL},
	};
	for (size_t i = 0; i < 6; i++)
		for (size_t k = 0; k < 2 && fim_keys[i][k] != NULL; k++)
			if ((rc = tok_opt_id(f, fim_keys[i][k], v->n, &fim[i], d)) != 0)
				return rc;

	struct {
		int32_t *id;
		const char *const *names;
	} roles[] = {
		{&v->eot, eot_names}, {&v->eom, eom_names}, {&fim[0], fim_pre}, {&fim[1], fim_suf},
		{&fim[2], fim_mid},   {&fim[3], fim_pad},   {&fim[4], fim_rep}, {&fim[5], fim_sep},
	};
	for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
		if (*roles[i].id >= 0)
			continue;
		int32_t id = tok_find_any(v, roles[i].names);
		if (id >= 0) {
			*roles[i].id = id;
			v->tok[id].attr |= TOK_ATTR_CONTROL;
		}
	}
	for (int32_t i = 0; i < v->n; i++) {
		struct tok_token *t = &v->tok[i];
		if ((t->attr & TOK_ATTR_CONTROL) && strstr(v->text + t->text_off, "unused") != NULL)
			t->attr |= TOK_ATTR_UNUSED;
	}

	for (size_t i = 3; i < 6; i++)
		if ((rc = tok_eog_add(v, fim[i])) != 0)
			return rc;
	for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
		int32_t id = tok_find_str(v, eog_names[i]);
		if (id < 0)
			continue;
		if ((rc = tok_eog_add(v, id)) != 0)
			return rc;
		v->tok[id].attr |= TOK_ATTR_CONTROL;
	}
	for (size_t i = 0; i < sizeof user_defined_names / sizeof user_defined_names[0]; i++) {
		int32_t id = tok_find_str(v, user_defined_names[i]);
		if (id >= 0)
			v->tok[id].attr = TOK_ATTR_USER_DEFINED;
	}
	if ((rc = tok_eog_add(v, v->eos)) != 0 || (rc = tok_eog_add(v, v->eot)) != 0 ||
	    (rc = tok_eog_add(v, v->eom)) != 0)
		return rc;

	/* Chat formats where <|end|> ends a message but not the generation. */
	bool has_return = tok_eog_has(v, "<|return|>");
	bool has_call = tok_eog_has(v, "<|call|>") || tok_eog_has(v, "<|calls|>");
	bool has_flush = tok_eog_has(v, "<|flush|>");
	if (tok_eog_has(v, "<|end|>") && ((has_return && has_call) || (has_call && has_flush))) {
		int32_t id = tok_find_str(v, "<|end|>");
		tok_eog_remove(v, id);
		v->tok[id].attr = TOK_ATTR_USER_DEFINED;
	}
	if (tok_eog_has(v, "<|tool_response>") && tok_eog_has(v, "</s>")) {
		int32_t id = tok_find_str(v, "</s>");
		tok_eog_remove(v, id);
		v->tok[id].attr = TOK_ATTR_NORMAL;
	}
	if (v->n_eog > 1)
		qsort(v->eog, v->n_eog, sizeof *v->eog, tok_cmp_id);
	return 0;
}

static int tok_cmp_len_desc(const void *a, const void *b, void *arg)
{
	const tok_vocab *v = arg;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	uint32_t lx = v->tok[x].text_len, ly = v->tok[y].text_len;
	if (lx != ly)
		return lx > ly ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* The tokens matched in the text before the tokenizer runs (llama.cpp's cache_special_tokens),
 * longest first, and the phi-3 rule that strips white space after special tokens. */
static int tok_specials(const gguf_file *f, tok_vocab *v)
{
	const unsigned special = TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN;
	const char *name = NULL;
	lm_diag ignore;
	bool phi3 = false;
	if (gguf_get_str(f, "general.name", &name, &ignore) == 0) {
		char low[256];
		size_t k = 0;
		for (; name[k] != '\0' && k < sizeof low - 1; k++)
			low[k] = (char)tolower((unsigned char)name[k]);
		low[k] = '\0';
		phi3 = strstr(low, "phi-3") != NULL || strstr(low, "phi3") != NULL;
	}
	size_t count = 0;
	for (int32_t i = 0; i < v->n; i++) {
		struct tok_token *t = &v->tok[i];
		if (!(t->attr & special))
			continue;
		if (phi3)
			t->strip |= TOK_STRIP_RIGHT;
		count++;
	}
	if (phi3) {
		int32_t id = tok_find_str(v, "</s>");
		if (id >= 0)
			v->tok[id].strip |= TOK_STRIP_RIGHT;
		static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
		for (size_t i = 0; i < 3; i++)
			if ((id = tok_find_str(v, keep[i])) >= 0)
				v->tok[id].strip &= (uint8_t)~TOK_STRIP_RIGHT;
	}
	if (count == 0)
		return 0;
	v->special = malloc(count * sizeof *v->special);
	if (v->special == NULL)
		return LM_ENOMEM;
	for (int32_t i = 0; i < v->n; i++)
		if (v->tok[i].attr & special)
			v->special[v->n_special++] = i;
	/* llama.cpp's std::sort leaves the order of equally long texts unspecified; here it is by
	 * id. It matters only where two such texts overlap in the input. */
	qsort_r(v->special, count, sizeof *v->special, tok_cmp_len_desc, v);
	return 0;
}

/* --- pieces --- */

static int tok_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The byte of a "<0xNN>" token, or -1. */
int tok_byte_of_text(const char *s, size_t len)
{
	if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
		return -1;
	int hi = tok_hexval(s[3]), lo = tok_hexval(s[4]);
	return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Writes id's piece at out, or only measures it when out is NULL; returns its length. */
static size_t tok_make_piece(const tok_vocab *v, int32_t id, char *out)
{
	static const char hex[] = "0123456789abcdef";
	const struct tok_token *t = &v->tok[id];
	const char *s = v->text + t->text_off;
	size_t len = t->text_len, n = 0;
#define PUT(c)                           \
	do {                             \
		char put_c_ = (char)(c); \
		if (out != NULL)         \
			out[n] = put_c_; \
		n++;                     \
	} while (0)
	if (t->attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))
		return 0;
	if (t->attr & TOK_ATTR_USER_DEFINED) {
		for (size_t i = 0; i < len; i++)
			PUT(s[i]);
	} else if (t->attr & TOK_ATTR_NORMAL) {
		if (v->model != TOK_MODEL_BPE) { /* SPM and gemma4: U+2581 is a space */
			for (size_t i = 0; i < len;) {
				if (len - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
					PUT(' ');
					i += 3;
				} else {
					PUT(s[i++]);
				}
			}
		} else {
			/* GPT-2's mapping reversed; a character outside it gives llama.cpp's marker
			 * "[UNK_BYTE_0x<its UTF-8 in hex><the whole token text>]". */
			for (size_t off = 0; off < len;) {
				size_t at = off;
				uint32_t cp = 0;
				tok_utf8_decode((const uint8_t *)s, len, &off,
						&cp); /* checked valid */
				int b = tok_gpt2_cp_to_byte(cp);
				if (b >= 0) {
					PUT(b);
					continue;
				}
				for (const char *m = "[UNK_BYTE_0x"; *m != '\0'; m++)
					PUT(*m);
				for (size_t k = at; k < off; k++) {
					PUT(hex[(uint8_t)s[k] >> 4]);
					PUT(hex[(uint8_t)s[k] & 15]);
				}
				for (size_t k = 0; k < len; k++)
					PUT(s[k]);
				PUT(']');
			}
		}
	} else if (t->attr & TOK_ATTR_BYTE) {
		PUT(tok_byte_of_text(s, len));
	}
#undef PUT
	return n;
}

/* A piece longer than this is refused (only a hostile file gets near it). */
#define TOK_MAX_PIECE (1u << 20)

static int tok_build_pieces(const gguf_file *f, tok_vocab *v, lm_diag *d)
{
	size_t total = 0;
	for (int32_t i = 0; i < v->n; i++) {
		struct tok_token *t = &v->tok[i];
		if ((t->attr & TOK_ATTR_BYTE) &&
		    tok_byte_of_text(v->text + t->text_off, t->text_len) < 0)
			return lm_fail(d, LM_EFORMAT,
				       "%s: %s[%d] = '%s' has the byte type but is not <0xNN>",
				       gguf_path(f), KEY_TOKENS, i, v->text + t->text_off);
		size_t n = tok_make_piece(v, i, NULL);
		if (n > TOK_MAX_PIECE)
			return lm_fail(d, LM_EFORMAT, "%s: %s[%d] decodes to %zu bytes",
				       gguf_path(f), KEY_TOKENS, i, n);
		total += n;
	}
	if (total > TOK_MAX_ARENA)
		return lm_fail(d, LM_EFORMAT, "%s: %s decode to %zu bytes in all", gguf_path(f),
			       KEY_TOKENS, total);
	v->pieces = malloc(total ? total : 1);
	if (v->pieces == NULL)
		return LM_ENOMEM;
	size_t off = 0;
	for (int32_t i = 0; i < v->n; i++) {
		size_t n = tok_make_piece(v, i, v->pieces + off);
		v->tok[i].piece_off = (uint32_t)off;
		v->tok[i].piece_len = (uint32_t)n;
		if (n > v->max_piece)
			v->max_piece = n;
		off += n;
	}
	return 0;
}

/* --- public --- */

int tok_load(const gguf_file *f, tok_vocab **out, lm_diag *d)
{
	*out = NULL;
	tok_vocab *v = calloc(1, sizeof *v);
	if (v == NULL)
		return lm_fail(d, LM_ENOMEM, "%s: out of memory loading the vocabulary",
			       gguf_path(f));
	int rc;
	if ((rc = tok_read_model(f, v, d)) != 0 || (rc = tok_read_tokens(f, v, d)) != 0)
		goto fail;
	if (v->model != TOK_MODEL_SPM && (rc = tok_read_merges(f, v, d)) != 0)
		goto fail;
	if ((rc = tok_read_special(f, v, d)) != 0 || (rc = tok_fix_by_name(f, v, d)) != 0 ||
	    (rc = tok_specials(f, v)) != 0 || (rc = tok_build_pieces(f, v, d)) != 0)
		goto fail;
	for (int b = 0; b < 256; b++) {
		char hex[7], raw = (char)b;
		snprintf(hex, sizeof hex, "<0x%02X>", b);
		v->byte_tok[b] = tok_find_text(v, hex, 6);
		if (v->byte_tok[b] < 0 && v->model == TOK_MODEL_SPM)
			v->byte_tok[b] = tok_find_text(v, &raw, 1);
	}
	*out = v;
	return 0;
fail:
	if (rc == LM_ENOMEM)
		lm_fail(d, LM_ENOMEM, "%s: out of memory loading the vocabulary", gguf_path(f));
	tok_free(v);
	return rc;
}

void tok_free(tok_vocab *v)
{
	if (v == NULL)
		return;
	free(v->tok);
	free(v->text);
	free(v->pieces);
	free(v->text_hash);
	free(v->merges);
	free(v->merge_text);
	free(v->merge_hash);
	free(v->special);
	free(v->eog);
	free(v);
}

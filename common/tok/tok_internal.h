/* tok_internal.h — what the tokenizer's source files share: the vocabulary's layout, the
 * pre-tokenizers and a growable array. Not for use outside common/tok*.c and their tests. */
#ifndef LM_TOK_INTERNAL_H
#define LM_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/tok/tokenizer.h"

/* Pre-tokenizers: which of llama.cpp's regex lists splits text before BPE (tokenizer.ggml.pre). */
enum tok_pre {
	TOK_PRE_NONE = 0,       /* SPM: no pre-tokenizer */
	TOK_PRE_DEFAULT,        /* BPE without tokenizer.ggml.pre, or "default" */
	TOK_PRE_GPT2,           /* gpt-2, mpt, olmo, ...: the GPT-2 regex */
	TOK_PRE_STARCODER,      /* starcoder, refact, ...: single digits, then the GPT-2 regex */
	TOK_PRE_DEEPSEEK_CODER, /* deepseek-coder */
	TOK_PRE_FALCON,   /* falcon: the default list with ` as punctuation, no \p{N}+ stage */
	TOK_PRE_LLAMA3,   /* llama-bpe, dbrx, glm4, ...: Llama 3's regex (digits in 1-3s) */
	TOK_PRE_QWEN2,    /* qwen2, stablelm2, ...: Llama 3's regex with single digits */
	TOK_PRE_QWEN35,   /* qwen35: qwen2's with combining marks inside letter runs */
	TOK_PRE_GPT4O,    /* gpt-4o, llama4, ...: words split by case, contractions attached */
	TOK_PRE_NEWLINES, /* gemma4: runs of newlines and runs of everything else */
};

/* One vocabulary entry. Texts and pieces live in the vocabulary's arenas. */
struct tok_token {
	uint32_t text_off, text_len;   /* the vocabulary text (tokenizer.ggml.tokens[id]) */
	uint32_t piece_off, piece_len; /* what the token decodes to (tok_piece) */
	float score;                   /* tokenizer.ggml.scores[id], 0 when absent */
	uint16_t attr;                 /* enum tok_attr bits */
	uint8_t strip;                 /* TOK_STRIP_* for user-defined tokens in text */
};

#define TOK_STRIP_LEFT  1u
#define TOK_STRIP_RIGHT 2u

/* A BPE merge "first second", rank = its index in tokenizer.ggml.merges. */
struct tok_merge {
	uint32_t off;                /* into merge_text */
	uint32_t first_len, sec_len; /* first at off, second at off + first_len */
};

struct tok_vocab {
	enum tok_model model;
	enum tok_pre pre;
	int32_t n;             /* token count */
	struct tok_token *tok; /* (n) */
	char *text;            /* texts, each NUL-terminated */
	char *pieces;          /* pieces, back to back */
	size_t max_piece;      /* longest piece, bytes */
	uint32_t *text_hash;   /* open addressing: id + 1, 0 = empty; (text_hash_mask + 1) */
	uint32_t text_hash_mask;
	struct tok_merge *merges; /* (n_merges) */
	char *merge_text;
	uint32_t n_merges;
	uint32_t *merge_hash; /* rank + 1, 0 = empty; (merge_hash_mask + 1) */
	uint32_t merge_hash_mask;
	/* Tokens matched in the text before the tokenizer runs (llama.cpp's special tokens cache):
	 * control, user-defined and unknown ones, longest text first. Without parse_special only
	 * the user-defined ones that are neither control nor unknown take part. (n_special) */
	int32_t *special;
	size_t n_special;
	int32_t *eog; /* end-of-generation ids, ascending; (n_eog) */
	size_t n_eog;
	/* Byte fallback. SPM: <0xNN>, else the one-byte token, else -1. gemma4: <0xNN> or -1. */
	int32_t byte_tok[256];
	int32_t bos, eos, eot, eom, unk, pad, sep; /* -1: none */
	bool add_bos, add_eos, add_space_prefix;
	bool byte_encode;   /* BPE: words are spelled in GPT-2's byte characters (not gemma4) */
	bool escape_spaces; /* BPE: ' ' becomes U+2581 before splitting (gemma4) */
	bool ignore_merges; /* BPE: a word that is a token is that token, unmerged (llama-bpe) */
};

/* A growable array of uint32 (code points, offsets). */
struct tok_u32v {
	uint32_t *p;
	size_t n, cap;
};
int tok_u32v_push(struct tok_u32v *v, uint32_t x);
void tok_u32v_fini(struct tok_u32v *v);

/* Splits the code points cps[0..n) into pre-tokenizer words, as llama.cpp's unicode_regex_split
 * does for that pre-tokenizer: on return ends->p[0..ends->n) are the words' exclusive end offsets
 * (the last is n; none when n is 0). Appends to `ends` after clearing it; scratch is reused. */
int tok_pretok_split(enum tok_pre pre, const uint32_t *cps, size_t n, struct tok_u32v *ends,
		     struct tok_u32v *scratch);

/* The id whose text is exactly s[0..len), or -1. */
int32_t tok_find_text(const tok_vocab *v, const char *s, size_t len);
/* The rank of merge (a, b), or -1. */
int32_t tok_find_merge(const tok_vocab *v, const char *a, size_t alen, const char *b, size_t blen);

/* The byte of a "<0xNN>" token text, or -1. */
int tok_byte_of_text(const char *s, size_t len);

uint64_t tok_hash_bytes(uint64_t h, const void *p, size_t len);
#define TOK_HASH_SEED 0xcbf29ce484222325ull

#endif

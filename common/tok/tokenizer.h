/* tokenizer.h — text to token ids and back, bit-compatible with llama.cpp (release v0.4.0).
 *
 * The vocabulary comes from a GGUF file's tokenizer.ggml.* metadata (a vocabulary-only file with
 * no tensors will do). Three tokenizers are supported:
 *
 *   tokenizer.ggml.model = "llama"  SentencePiece BPE: merges the adjacent pair whose merged text is
 *        the highest-scoring token first (tokenizer.ggml.scores); spaces become U+2581 and a
 *        dummy space is prefixed (tokenizer.ggml.add_space_prefix, default true); characters
 *        missing from the vocabulary fall back to byte tokens <0xNN>.
 *   tokenizer.ggml.model = "gpt2"   byte-level BPE: text is split by the pre-tokenizer that
 *        tokenizer.ggml.pre names, every byte is mapped to a printable character (GPT-2's
 *        byte-to-unicode table), and merges apply by rank, the order of tokenizer.ggml.merges.
 *        Pre-tokenizers, as llama.cpp names them (aliases in common/tok/tok_load.c):
 *          gpt-2, mpt, olmo, ...   the GPT-2 regex;
 *          starcoder, refact, command-r, ...   single digits, then the GPT-2 regex;
 *          deepseek-coder, falcon, "default" (or absent: llama.cpp's default list);
 *          llama-bpe (Llama 3), dbrx, glm4, ...   case-insensitive contractions, letter runs
 *               with one leading non-letter, digits in groups of 1-3, punctuation runs with
 *               their newlines, white space as \s*[\r\n]+|\s+(?!\S)|\s+; llama-bpe also keeps a
 *               word that is a token whole (ignore_merges) and adds BOS by default;
 *          qwen2, stablelm2, ...   the same with single digits; qwen35 also keeps combining
 *               marks in letter runs.
 *   tokenizer.ggml.model = "gemma4" (or "gpt2" with pre "gemma4")   BPE by merge rank over the
 *        raw UTF-8 of the text with spaces as U+2581 (no dummy space), split only into runs of
 *        newlines and runs of everything else (a newline run that is a token stays whole);
 *        a symbol that is not a token falls back to one <0xNN> token per byte. BOS is always
 *        added (llama.cpp overrides tokenizer.ggml.add_bos_token for it).
 *
 * Special tokens. Before the tokenizer runs, the text is cut around every occurrence of a special
 * token's text, longest first (llama.cpp's tokenizer_st_partition): user-defined tokens
 * (token_type 4) always, control and unknown tokens (<s>, <|im_start|>, <|eot_id|>, <|turn>,
 * ...) only with TOK_ENC_PARSE_SPECIAL (llama.cpp's parse_special = true). Without it, as
 * tok_encode always does, "<s>" in the text is three characters. tok_find looks a token up by its
 * text, for chat templates. End of generation: tok_is_eog, the set llama.cpp's vocab load builds
 * (EOS, EOT, EOM, FIM pad/rep/sep and the names <|eot_id|>, <|im_end|>, <end_of_turn>, <turn|>,
 * <|endoftext|>, ..., minus its exceptions).
 *
 * Text is (pointer, length) throughout: a NUL byte is a character like any other (SPM: <0x00>).
 *
 * Trust. The metadata is untrusted: a missing or mistyped key, arrays of different lengths, an id
 * out of range, duplicate or invalid-UTF-8 token texts, absurd sizes give LM_EFORMAT (LM_EUNSUPPORTED
 * for a tokenizer model or pre-tokenizer this code does not know) with a message naming the key.
 * Where llama.cpp would tolerate a bad special-token id by keeping its default, this code refuses
 * the file.
 *
 * Where this code differs from llama.cpp, it is on input llama.cpp cannot handle: a character an
 * SPM vocabulary has neither a token nor a byte token for becomes the unknown token (llama.cpp
 * throws), and a 4-byte sequence whose value is past U+10FFFF (lead F4 with 90..BF, or F5..F7)
 * becomes U+FFFD per byte for BPE and gemma4 (llama.cpp throws). Two orders llama.cpp leaves to its C++ library are fixed here: special
 * tokens of equal length are tried in id order (std::sort is not stable), and where a vocabulary
 * has several EOT candidates by name (<|eot_id|> and <|end_of_text|>), tok_eot is the first of
 * llama.cpp's list rather than the first in its hash map; both are end-of-generation either way.
 * Decoding is per piece (llama.cpp's token_to_piece), without llama_detokenize's whole-string
 * clean-up of spaces before punctuation.
 *
 * Cost. Encoding is O(n log n) in the text length (priority queues of candidate merges); pieces
 * are precomputed at load, so decoding is a table lookup.
 *
 * A loaded vocabulary is immutable and owns all its memory (the gguf_file may be closed after
 * tok_load); it may be shared by threads.
 */
#ifndef LM_TOKENIZER_H
#define LM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/format/gguf.h"

typedef struct tok_vocab tok_vocab;

enum tok_model {
	TOK_MODEL_SPM = 1,    /* "llama" */
	TOK_MODEL_BPE = 2,    /* "gpt2" */
	TOK_MODEL_GEMMA4 = 3, /* "gemma4": BPE over U+2581-escaped UTF-8 with <0xNN> fallback */
};

/* Token attributes, from tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control,
 * 4 user-defined, 5 unused, 6 byte; anything else undefined) plus llama.cpp's name-based fixes
 * (e.g. "<|endoftext|>" and "<|im_end|>" are control tokens whatever their type says). */
enum tok_attr {
	TOK_ATTR_UNDEFINED = 0,
	TOK_ATTR_NORMAL = 1u << 0,
	TOK_ATTR_UNKNOWN = 1u << 1,
	TOK_ATTR_CONTROL = 1u << 2,
	TOK_ATTR_USER_DEFINED = 1u << 3,
	TOK_ATTR_UNUSED = 1u << 4,
	TOK_ATTR_BYTE = 1u << 5,
};

/* Reads the vocabulary of f. On failure *out is NULL and d names the key that was wrong. */
int tok_load(const gguf_file *f, tok_vocab **out, lm_diag *d);
/* NULL is harmless. */
void tok_free(tok_vocab *v);

enum tok_model tok_model(const tok_vocab *v);
int32_t tok_n_vocab(const tok_vocab *v);
/* Special ids, -1 when the vocabulary has none. Defaults as llama.cpp's: SPM bos 1, eos 2, unk 0;
 * BPE bos 11, eos 11, no unk (a default past the vocabulary is none; glm4 has no default BOS);
 * gemma4 none. */
int32_t tok_bos(const tok_vocab *v);
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v);
int32_t tok_unk(const tok_vocab *v);
/* Whether a prompt should start with BOS: tokenizer.ggml.add_bos_token, default true for SPM and
 * llama-bpe and false for other BPE; always true for gemma4. False when there is no BOS id. */
bool tok_add_bos(const tok_vocab *v);
/* Whether id ends generation (EOS, EOT, EOM and llama.cpp's end-of-generation names). */
bool tok_is_eog(const tok_vocab *v, int32_t id);
/* Every end-of-generation id, ascending; *n receives the count. Owned by the vocabulary. */
const int32_t *tok_eog_ids(const tok_vocab *v, size_t *n);
/* The id whose vocabulary text is exactly text[0..len), or -1. */
int32_t tok_find(const tok_vocab *v, const char *text, size_t len);
/* enum tok_attr bits of id; 0 for an id out of range. */
unsigned tok_attr(const tok_vocab *v, int32_t id);

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is tolerated as llama.cpp tolerates it).
 * add_bos: start with the BOS id (LM_EINVAL if the vocabulary has none); pass tok_add_bos(v) for
 * llama.cpp's add_special = true behaviour (it never adds EOS for these vocabularies unless
 * tokenizer.ggml.add_eos_token says so, which this function ignores).
 * Writes at most cap ids; *n receives the number of ids of the full tokenization. If cap is too
 * small, returns LM_ERANGE with *n the count needed (ids then holds the first cap ids). */
int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_bos, int32_t *ids,
	       size_t cap, size_t *n, lm_diag *d);
/* The same into a malloc'd array the caller frees (*ids is NULL when *n is 0). */
int tok_encode_alloc(const tok_vocab *v, const char *text, size_t len, bool add_bos, int32_t **ids,
		     size_t *n, lm_diag *d);

/* Options of tok_encode_ex. */
enum tok_encode_flags {
	TOK_ENC_ADD_BOS = 1u << 0,       /* start with the BOS id, as tok_encode's add_bos */
	TOK_ENC_PARSE_SPECIAL = 1u << 1, /* control and unknown tokens' texts become their ids */
};
/* tok_encode with flags (enum tok_encode_flags; LM_EINVAL for unknown bits). tok_encode(v, ...,
 * add_bos, ...) is tok_encode_ex(v, ..., add_bos ? TOK_ENC_ADD_BOS : 0, ...). */
int tok_encode_ex(const tok_vocab *v, const char *text, size_t len, unsigned flags, int32_t *ids,
		  size_t cap, size_t *n, lm_diag *d);
int tok_encode_alloc_ex(const tok_vocab *v, const char *text, size_t len, unsigned flags,
			int32_t **ids, size_t *n, lm_diag *d);

/* The vocabulary text of id (NUL-terminated; *len may be NULL), or NULL for an id out of range. */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len);
/* The bytes id decodes to, as llama.cpp's token_to_piece(special = false): U+2581 -> ' ' for SPM
 * and gemma4,
 * byte tokens -> that byte, GPT-2's byte mapping reversed for BPE, user-defined tokens as they
 * are, control/unknown/unused tokens -> nothing. Not NUL-terminated, may be a fragment of a UTF-8
 * character. NULL for an id out of range. */
const char *tok_piece(const tok_vocab *v, int32_t id, size_t *len);
/* The longest piece of the vocabulary, in bytes. */
size_t tok_max_piece(const tok_vocab *v);

/* Streaming decoder: feeds pieces through a UTF-8 validator so output never ends inside a
 * character. An incomplete sequence is held back until it completes; a malformed one becomes
 * U+FFFD (one per maximal ill-formed subpart, as the WHATWG/Unicode decoders do); nothing is
 * dropped silently. Caller-owned; no resources, so no fini. */
struct tok_stream {
	uint8_t pend[4]; /* bytes of an unfinished character */
	uint8_t n_pend;  /* how many */
	uint8_t need;    /* its full length */
};
void tok_stream_init(struct tok_stream *s);
/* Output capacity that always suffices for one tok_stream_push or tok_stream_flush. */
size_t tok_stream_cap(const tok_vocab *v);
/* Appends id's piece. Writes the completed text to out and returns its length in *n_out.
 * LM_ERANGE (nothing consumed) for an id out of range or cap < tok_stream_cap(v). */
int tok_stream_push(const tok_vocab *v, struct tok_stream *s, int32_t id, char *out, size_t cap,
		    size_t *n_out);
/* Ends the stream: an unfinished character becomes U+FFFD. Returns the bytes written (0 or 3);
 * cap must be at least 3. The stream is then empty and may be reused. */
size_t tok_stream_flush(struct tok_stream *s, char *out, size_t cap);

#endif

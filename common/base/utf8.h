/* utf8.h — strict UTF-8, as JSON text and the API's strings must be: no overlong forms, no
 * surrogates, nothing past U+10FFFF. (The tokenizer's lenient decoding, which follows
 * llama.cpp's, is tok_utf8_decode in common/tok/tok_unicode.h.)
 */
#ifndef LM_UTF8_H
#define LM_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length (1 to 4) of the valid sequence that starts at p, of at most n > 0 bytes; 0 when
 * none starts there. */
size_t lm_utf8_len(const uint8_t *p, size_t n);

/* Whether s[0, n) is valid UTF-8 throughout. */
bool lm_utf8_valid(const void *s, size_t n);

#endif

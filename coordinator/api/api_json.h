/* api_json.h — the API's JSON reader: request bodies into cJSON trees, strictly.
 *
 * cJSON's own parser keeps a string only up to its first U+0000 (its strings are
 * NUL-terminated), accepts bytes after the value and duplicate keys, and takes invalid UTF-8.
 * This reader follows RFC 8259 instead, and records each string's length:
 *   - exactly one value, then only white space: anything after it is refused, with its offset;
 *   - a key twice in one object is refused (which one would count is not the client's guess);
 *   - strings must be valid UTF-8; escapes are JSON's, \u surrogates must pair; U+0000 (as
 *     \u0000, or a raw NUL byte) is kept: api_json_len gives a string's length. Other raw
 *     control characters in strings are taken as they are, as most readers do;
 *   - numbers as JSON writes them, finite in a double;
 *   - at most API_JSON_MAX_DEPTH levels of nesting.
 * Keys may not hold U+0000 (cJSON keys are NUL-terminated).
 */
#ifndef LM_API_JSON_H
#define LM_API_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define API_JSON_MAX_DEPTH 64

/* The tree (the caller cJSON_Deletes it), or NULL with the reason and its byte offset in why. */
cJSON *api_json_parse(const char *text, size_t len, char *why, size_t cap);

/* The byte length of a string item this reader made (NUL bytes included); strlen for a string
 * made otherwise is not known here, so only pass items of api_json_parse's trees. 0 for
 * anything but a string. */
size_t api_json_len(const cJSON *item);

/* Adds an unsigned integer to an object exactly, as its decimal digits; the item, or NULL when
 * out of memory. cJSON writes a number with 15 significant digits wherever a relative
 * comparison lets it, which turns a 16-digit seed into another one, and a seed is reported so
 * that it can be sent back. */
cJSON *api_json_add_u64(cJSON *o, const char *name, uint64_t v);

#endif

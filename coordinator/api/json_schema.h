/* json_schema.h — JSON schemas to GBNF grammars, and the structured-output fields of a request
 * (docs/constrained-decoding.md).
 *
 * The schema subset real clients send (OpenAI's strict mode, Pydantic, zod):
 *     type (a name or an array of names): object, array, string, number, integer, boolean, null
 *     object: properties, required, additionalProperties (false or absent: no other key; true
 *             or a schema: further "key": value pairs after the named ones)
 *     array: items, prefixItems, minItems, maxItems (items as an array of schemas, the older
 *            drafts' tuple: as prefixItems, as llama.cpp reads it)
 *     string: minLength, maxLength; format is an annotation and is not enforced
 *     enum, const (any JSON values), anyOf, oneOf, $ref to "#/$defs/..." or
 *     "#/definitions/..." (recursion allowed), and the annotations (title, description,
 *     default, examples, $schema, $id, $comment, strict, format) that constrain nothing
 * A keyword that would constrain the output and is not enforced here (pattern, minimum,
 * maximum, multipleOf, uniqueItems, allOf, not, if, patternProperties, ...) is refused by name
 * rather than ignored: the output must validate against the schema the client sent. An empty
 * schema ({} or true) is any JSON value.
 *
 * Properties come out in the schema's order, required ones first, as llama.cpp's converter
 * orders them. Numbers have at most 16 integer digits, 16 fraction digits and 3 exponent
 * digits, and white space between tokens is bounded, so a model that never stops on its own
 * (a random-weight one) still ends every number and every gap.
 */
#ifndef LM_JSON_SCHEMA_H
#define LM_JSON_SCHEMA_H

#include <cjson/cJSON.h>

#include "common/base/buf.h"
#include "common/base/err.h"

/* The grammar of any JSON object (response_format json_object). */
extern const char json_object_gbnf[];

/* GBNF for schema, appended to out (root ::= the schema). 0, LM_EINVAL with d naming the
 * keyword and its path ("json_schema: /properties/age: 'minimum' is not supported") or
 * LM_ENOMEM. Bounded: nesting deeper than 64, or a grammar past GBNF_MAX_TEXT, is refused. */
int json_schema_gbnf(const cJSON *schema, struct lm_buf *out, lm_diag *d);

/* The rules of several schemas in one grammar (a tool's arguments, tool_call.h): schema's
 * rules appended to out, numbered from *next on (advanced past them), each named "r<n>", and
 * without the rules they share, json_schema_prelude, which the grammar holds once. Returns the
 * number n of the schema's own rule "r<n>", or a negative error as json_schema_gbnf's (out is
 * then as it was). */
int json_schema_rules(const cJSON *schema, int *next, struct lm_buf *out, lm_diag *d);
/* The rules every schema's rules use: space, char, string, integer, number, boolean, null,
 * value, object, array. */
extern const char json_schema_prelude[];

/* The constraint a request body asks for, as grammar text (malloc'd, *grammar; NULL when none):
 *     response_format {"type": "text"}                        none
 *     response_format {"type": "json_object"}                 any JSON object
 *     response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict",
 *                      "description"}}                        that schema
 *     "json_schema": a schema (llama-server's)                that schema
 *     "grammar": GBNF text (llama-server's)                   that grammar
 * At most one of the three. The grammar is compiled here (gbnf_compile), so a bad one is the
 * client's 400 naming the line and column. 0, or LM_EINVAL with *param (the field) and d, or
 * LM_ENOMEM. */
int json_schema_request(const cJSON *req, char **grammar, const char **param, lm_diag *d);

#endif

/* jinja.h — a Jinja engine for chat templates, held to @huggingface/jinja byte for byte.
 *
 * A model publishes its chat format as a Jinja template (GGUF tokenizer.chat_template). This
 * engine renders one the way @huggingface/jinja 0.5.11 (the renderer of transformers.js, and
 * the reference of tests/integration/test_jinja_templates.sh) does, with its settings
 * (trim_blocks and lstrip_blocks on, one trailing newline of the template dropped, the
 * `generation` tag removed) and its semantics where they differ from Python's Jinja: strip()
 * and its kin trim every kind of white space and ignore their argument; a `set` inside a
 * loop body lives on into the next iteration; the output of a loop iteration that ends in
 * `break` or `continue` is dropped; macros see the variables of their caller; `==` is
 * JavaScript's loose equality; integers and floats are JavaScript numbers (a float that holds
 * an integer prints as "1.0", and as 1 inside tojson); tojson separates items with ", " and
 * keys with ": ".
 *
 * The language is the subset that library implements: {{ }}, {% if/elif/else %}, {% for %}
 * (with `loop.*`, a filter `if`, tuple targets, an else block), {% set %} (also of namespace
 * attributes, and as a block), {% macro %}, {% call %}, {% filter %}, break and continue;
 * literals, lists, tuples, dicts, slices, `**`, `//`, `~`, `in`, `is [not]` tests, filters,
 * the string and dict methods, namespace(), range(), raise_exception() and strftime_now().
 *
 * Sandboxed: a template reaches nothing but the values it is given (no files, no
 * environment, no clock but the date it is handed). Bounded: output bytes, evaluation steps
 * (every node evaluated and every item a builtin produces counts), nesting depth of the
 * parse and of the evaluation, and memory; each limit is an error that names it. Every error
 * names the template line where it arose, and raise_exception's message is kept verbatim.
 */
#ifndef LM_JINJA_H
#define LM_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/buf.h"
#include "common/base/err.h"

struct cJSON;

/* A parsed template (immutable; may be rendered from several threads at once). */
typedef struct jinja_tmpl jinja_tmpl;

struct jinja_limits {
	size_t max_output;  /* bytes of rendered text (0: 16 MiB) */
	uint64_t max_steps; /* nodes evaluated plus items built (0: 20 million) */
	int max_depth;      /* nesting of macro and call-block calls (0: 64) */
	size_t max_memory;  /* bytes the render may hold (0: 256 MiB) */
};

/* The date strftime_now() formats: year, month 1-12, day 1-31, hour, minute. */
struct jinja_date {
	int year, month, day, hour, minute;
};

/* Parses text[0..len). On failure NULL, with "line N: why" in d (LM_EFORMAT; LM_ERANGE when
 * it nests too deep; LM_ENOMEM). */
jinja_tmpl *jinja_parse(const char *text, size_t len, lm_diag *d);
void jinja_free(jinja_tmpl *t);

/* Renders t with the variables of `vars` (a JSON object: messages, tools, add_generation_prompt,
 * bos_token, ...; each becomes a global of that name) and appends the text to out. `date`
 * is what strftime_now() sees (NULL: 26 Jul 2024 00:00). On failure "line N: why" in d and
 * LM_EINVAL when the template raises (raise_exception: why is its message), LM_EUNSUPPORTED
 * when it cannot go on (an operation on an undefined value, a filter the reference lacks, ...:
 * the reference's own message), LM_ERANGE when a limit is reached, LM_ENOMEM; out is then left
 * as it was. */
int jinja_render(const jinja_tmpl *t, const struct cJSON *vars, const struct jinja_date *date,
		 const struct jinja_limits *lim, struct lm_buf *out, lm_diag *d);

#endif

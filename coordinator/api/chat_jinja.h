/* chat_jinja.h — what a chat template rendered by the Jinja engine (jinja.h) is given.
 *
 * The variables are those transformers' apply_chat_template hands a template: `messages`,
 * `tools` (None when the request has none, as there), `add_generation_prompt`, `bos_token`,
 * `eos_token`, and each key of the request's `chat_template_kwargs` (`enable_thinking`,
 * `reasoning_effort`, ...: a template's own knobs) as a variable of its own. The order is that
 * one; tests/node/render_jinja.mjs builds the same object for the reference renderer. */
#ifndef LM_CHAT_JINJA_H
#define LM_CHAT_JINJA_H

#include <stdbool.h>

#include "common/base/err.h"

struct cJSON;

/* The variables into *out (the caller's to cJSON_Delete). messages, tools and kwargs are
 * copied (tools and kwargs may be NULL or JSON null; tools is then null). LM_EINVAL when kwargs is not an object or
 * names one of the other variables; LM_ENOMEM. */
int chat_jinja_vars(const struct cJSON *messages, const struct cJSON *tools, bool gen,
		    const struct cJSON *kwargs, const char *bos, const char *eos,
		    struct cJSON **out, lm_diag *d);

#endif

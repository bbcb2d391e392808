/* chat_template.h — the chat template families: recognised, and rendered without Jinja.
 *
 * A model publishes its chat format as a Jinja template (GGUF tokenizer.chat_template), which
 * the chat API renders with the Jinja engine (jinja.h). This module recognises the template's
 * family from marker strings, as llama.cpp's built-in detection does (chat_template_detect),
 * for the family's end-of-turn stop tokens (chat_format_stops); and renders a conversation in
 * a family's format with a formatter of its own when mesh.toml's [model] chat_template names
 * one (a model without a template), written to produce exactly what the family's template
 * produces when rendered by @huggingface/jinja with {messages, add_generation_prompt,
 * bos_token, eos_token} (tests/integration/test_chat_templates.sh holds every formatter to it,
 * byte for byte, on the templates of ../shared/chat-templates/).
 *
 * Within a family only the layouts written out here are recognised: a template with a
 * family's markers but none of its layouts' signatures is refused like an unknown one.
 *
 *   format      recognised by                         renders as
 *   chatml      <|im_start|>, with no default         <|im_start|>role\n...<|im_end|>\n
 *               system message ("You are"), tools or
 *               <think>
 *   qwen2       ... and "You are a helpful assistant" ChatML, that system message when the
 *               as the first turn's default            first is not one (Qwen 1.5 and 2)
 *   qwen2.5     ... and "You are Qwen, created by     ChatML, Qwen 2.5's default system
 *               Alibaba Cloud"                        message, tools left out
 *   qwen3       ... and <think>, last_query_index     ChatML, Qwen 3's thinking blocks on
 *                                                     the turns after the last user turn
 *   llama3      <|start_header_id|> <|end_header_id|> Llama 3: BOS, headers, trimmed content
 *               without tools
 *   llama3.1    ... and "Cutting Knowledge Date",     the 3.1-3.3 system block with its dates
 *               "26 Jul 2024"                         (date_string's default, 26 Jul 2024)
 *   gemma       <start_of_turn> and "System role not  Gemma 2: user/model turns, trimmed; a
 *               supported"                            system message is refused
 *   gemma4      <|turn> <turn|>, strip_thinking and   Gemma 4: an optional system turn, model
 *               continue_same_model_turn              turns without thinking channels,
 *                                                     consecutive model turns merged
 *   gemma4-unmerged  ... without                     the same, each turn its own header (the
 *               continue_same_model_turn              template of ggml-vocab-gemma-4.gguf)
 *   mistral     [INST] with "[INST]" quoted and       Mistral Nemo (tekken): [INST]...[/INST]
 *               [AVAILABLE_TOOLS]                     without spaces, the system message in
 *                                                     the last user turn
 *   phi3        <|assistant|> <|end|>, each user turn Phi-3 mini: BOS, user turns followed by
 *               followed by '<|assistant|>'           <|assistant|>\n, system messages left
 *                                                     out (as its template does)
 *   phi3.5      ... and a <|system|> turn             Phi-3.5: <|role|>\n...<|end|>\n
 *
 * Where the Jinja template raises (Gemma 2 on a system message, Mistral and Gemma on roles that
 * do not alternate), the formatter refuses with the template's own words.
 *
 * Content. A message's content is a string or an array of text parts. For Gemma 4, whose
 * template iterates such arrays itself (trimming each part), the parts reach the formatter as
 * they are, but for a system message; every other format, and Gemma 4's system message, gets
 * the parts joined into one string with "\n" between them (as llama.cpp joins them for
 * string-only templates; an empty string so far takes no newline).
 *
 * Trimming is JavaScript's String.prototype.trim (what @huggingface/jinja's trim, strip,
 * lstrip and rstrip do, arguments ignored: Qwen 3's lstrip('\n') trims every kind of white
 * space there, which Python's Jinja would not).
 */
#ifndef LM_CHAT_TEMPLATE_H
#define LM_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/base/buf.h"
#include "common/base/err.h"

enum chat_format {
	CHAT_NONE = 0,
	CHAT_CHATML,
	CHAT_QWEN25,
	CHAT_QWEN3,
	CHAT_LLAMA3,
	CHAT_LLAMA31,
	CHAT_GEMMA,
	CHAT_GEMMA4,
	CHAT_MISTRAL,
	CHAT_PHI35,
	CHAT_QWEN2,
	CHAT_GEMMA4_UNMERGED,
	CHAT_PHI3,
	CHAT_FORMAT_COUNT
};

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

struct chat_part {
	const char *text;
	size_t len;
};

struct chat_msg {
	enum chat_role role;
	const char *text; /* the content as one string (parts joined) */
	size_t len;
	const struct chat_part *parts; /* the content's parts when it was an array, else NULL */
	int n_parts;
	bool tool_calls; /* an assistant's message with tool calls */
};

/* "chatml", "qwen2.5", ... ; "none" for CHAT_NONE. */
const char *chat_format_name(enum chat_format f);
/* The family a format belongs to, for display: "chatml" (chatml, qwen2, qwen2.5), "qwen3",
 * "llama3" (llama3, llama3.1), "gemma", "gemma4" (gemma4, gemma4-unmerged), "mistral", "phi3"
 * (phi3, phi3.5). */
const char *chat_format_family(enum chat_format f);
/* The format called `name`, or CHAT_NONE. */
enum chat_format chat_format_by_name(const char *name);
/* Every format's name, comma-separated, for messages. */
const char *chat_format_names(void);

/* The format a Jinja template is recognised as, or CHAT_NONE; *why then says what it looked
 * like (for the refusal's message). */
enum chat_format chat_template_detect(const char *tmpl, size_t len, char *why, size_t cap);

/* A model's format: `override` (mesh.toml's [model] chat_template) when given, which must name
 * a format (LM_ECONFIG otherwise), else the one recognised in the GGUF's
 * tokenizer.chat_template. A model without a template falls back to CHAT_CHATML, with a note
 * saying so in why (a warning to show). CHAT_NONE, with the reason in why, when its template is
 * not recognised (the mesh then renders the template with the Jinja engine, and refuses chat
 * only when it has no template the engine can parse). */
struct gguf_file;
int chat_format_resolve(const char *override, const struct gguf_file *f, enum chat_format *out,
			char *why, size_t cap, lm_diag *d);

/* The vocabulary texts of the end-of-turn tokens of a format ("<|im_end|>", ...), NULL-ended.
 * eos is the template's eos_token (Mistral ends turns with it). */
void chat_format_stops(enum chat_format f, const char *eos, const char *out[4]);

/* Renders msgs[0..n) as format f with bos_token and eos_token (vocabulary texts; "" when the
 * model has none) into out (appended). LM_EINVAL with the reason in d when the template would
 * raise (roles, system messages), or for tool messages and tool calls, which the formats do
 * not render; LM_ENOMEM. */
int chat_render(enum chat_format f, const char *bos, const char *eos, const struct chat_msg *msgs,
		int n, bool add_generation_prompt, struct lm_buf *out, lm_diag *d);

/* JavaScript's trim on UTF-8 text: the bounds [*start, *end) of s[0..n) without leading and
 * trailing white space (exposed for tests). */
void chat_js_trim(const char *s, size_t n, bool lead, bool trail, size_t *start, size_t *end);

#endif

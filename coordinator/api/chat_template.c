/* chat_template.c — recognising chat templates and rendering conversations. See
 * chat_template.h; each formatter below says which template it follows, line by line where
 * the template makes choices. */
#include "coordinator/api/chat_template.h"

#include "common/format/gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const chat_names[CHAT_FORMAT_COUNT] = {
	[CHAT_NONE] = "none",        [CHAT_CHATML] = "chatml",
	[CHAT_QWEN2] = "qwen2",      [CHAT_QWEN25] = "qwen2.5",
	[CHAT_QWEN3] = "qwen3",      [CHAT_LLAMA3] = "llama3",
	[CHAT_LLAMA31] = "llama3.1", [CHAT_GEMMA] = "gemma",
	[CHAT_GEMMA4] = "gemma4",    [CHAT_GEMMA4_UNMERGED] = "gemma4-unmerged",
	[CHAT_MISTRAL] = "mistral",  [CHAT_PHI3] = "phi3",
	[CHAT_PHI35] = "phi3.5",
};

const char *chat_format_name(enum chat_format f)
{
	return f >= 0 && f < CHAT_FORMAT_COUNT ? chat_names[f] : "none";
}

const char *chat_format_family(enum chat_format f)
{
	switch (f) {
	case CHAT_QWEN2:
	case CHAT_QWEN25:
		return "chatml";
	case CHAT_LLAMA31:
		return "llama3";
	case CHAT_GEMMA4_UNMERGED:
		return "gemma4";
	case CHAT_PHI35:
		return "phi3";
	default:
		return chat_format_name(f);
	}
}

enum chat_format chat_format_by_name(const char *name)
{
	for (int f = 1; f < CHAT_FORMAT_COUNT; f++)
		if (strcmp(name, chat_names[f]) == 0)
			return (enum chat_format)f;
	return CHAT_NONE;
}

const char *chat_format_names(void)
{
	return "chatml, qwen2, qwen2.5, qwen3, llama3, llama3.1, gemma, gemma4, gemma4-unmerged, "
	       "mistral, phi3, phi3.5";
}

/* ------------------------------------------------------------------ recognising templates */

static bool has(const char *t, size_t n, const char *needle)
{
	return memmem(t, n, needle, strlen(needle)) != NULL;
}

/* Within a family: the layout whose signature the template has, or CHAT_NONE with why. */
static enum chat_format detect_chatml(const char *t, size_t n, char *why, size_t cap)
{
	if (has(t, n, "<think>")) {
		if (has(t, n, "last_query_index"))
			return CHAT_QWEN3;
	} else if (has(t, n,
		       "You are Qwen, created by Alibaba Cloud. You are a helpful "
		       "assistant.")) {
		return CHAT_QWEN25;
	} else if (has(t, n, "You are a helpful assistant<|im_end|>") &&
		   has(t, n, "loop.first and messages[0]['role'] != 'system'")) {
		return CHAT_QWEN2;
	} else if (!has(t, n, "You are") && !has(t, n, "tool")) {
		return CHAT_CHATML;
	}
	snprintf(why, cap,
		 "a ChatML template (<|im_start|>) with a default system message, tools or "
		 "thinking of another layout than Qwen 2, 2.5 or 3's");
	return CHAT_NONE;
}

static enum chat_format detect_headers(const char *t, size_t n, char *why, size_t cap)
{
	if (has(t, n, "Cutting Knowledge Date") && has(t, n, "26 Jul 2024"))
		return CHAT_LLAMA31;
	if (!has(t, n, "Cutting Knowledge Date") && !has(t, n, "tool") && !has(t, n, "ipython"))
		return CHAT_LLAMA3;
	snprintf(why, cap,
		 "a <|start_header_id|> template of another layout than Llama 3.0's "
		 "or 3.1-3.3's");
	return CHAT_NONE;
}

enum chat_format chat_template_detect(const char *t, size_t n, char *why, size_t cap)
{
	why[0] = '\0';
	if (has(t, n, "<|turn>") && has(t, n, "<turn|>")) {
		if (has(t, n, "strip_thinking"))
			return has(t, n, "continue_same_model_turn") ? CHAT_GEMMA4
								     : CHAT_GEMMA4_UNMERGED;
		snprintf(why, cap, "a <|turn> template of another layout than Gemma 4's");
		return CHAT_NONE;
	}
	if (has(t, n, "<|im_start|>"))
		return detect_chatml(t, n, why, cap);
	if ((n >= 7 && memcmp(t, "mistral", 7) == 0) || has(t, n, "[INST]")) {
		if (has(t, n, "\"[INST]\"") && has(t, n, "[AVAILABLE_TOOLS]") &&
		    !has(t, n, "[SYSTEM_PROMPT]"))
			return CHAT_MISTRAL;
		snprintf(why, cap,
			 "an [INST] template of another layout than Mistral Nemo's (spaces around "
			 "[INST], [SYSTEM_PROMPT] or Llama 2's <<SYS>>)");
		return CHAT_NONE;
	}
	if (has(t, n, "<|assistant|>") && has(t, n, "<|end|>")) {
		if (has(t, n, "<|system|>") &&
		    has(t, n, "message['role'] == 'system' and message['content']"))
			return CHAT_PHI35;
		if (has(t, n,
			"'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + "
			"'<|assistant|>' + '\n'"))
			return CHAT_PHI3;
		snprintf(why, cap,
			 "a <|user|> <|assistant|> template of another layout than Phi-3 "
			 "mini's or Phi-3.5's");
		return CHAT_NONE;
	}
	if (has(t, n, "<start_of_turn>")) {
		if (has(t, n, "System role not supported"))
			return CHAT_GEMMA;
		snprintf(
			why, cap,
			"a <start_of_turn> template other than Gemma 2's (Gemma 3's folds a system "
			"message into the first user turn)");
		return CHAT_NONE;
	}
	if (has(t, n, "<|start_header_id|>") && has(t, n, "<|end_header_id|>"))
		return detect_headers(t, n, why, cap);
	snprintf(why, cap, "no marker of a known family");
	return CHAT_NONE;
}

int chat_format_resolve(const char *override, const struct gguf_file *f, enum chat_format *out,
			char *why, size_t cap, lm_diag *d)
{
	why[0] = '\0';
	*out = CHAT_NONE;
	if (override != NULL) {
		*out = chat_format_by_name(override);
		if (*out == CHAT_NONE)
			return lm_fail(d, LM_ECONFIG,
				       "[model] chat_template \"%.60s\" is not a chat format (%s)",
				       override, chat_format_names());
		return 0;
	}
	const char *t = NULL;
	if (gguf_find(f, "tokenizer.chat_template") == NULL ||
	    gguf_get_str(f, "tokenizer.chat_template", &t, NULL) != 0) {
		/* As llama-server does: a model without a template chats in ChatML, and the
		 * note says so wherever the format is shown. */
		*out = CHAT_CHATML;
		snprintf(why, cap,
			 "the model has no chat template (tokenizer.chat_template), so chat falls "
			 "back to ChatML; set [model] chat_template in mesh.toml to one of: %s",
			 chat_format_names());
		return 0;
	}
	char what[200];
	*out = chat_template_detect(t, strlen(t), what, sizeof what);
	if (*out == CHAT_NONE)
		snprintf(why, cap,
			 "the model's chat template is not one this server renders (%s); set "
			 "[model] chat_template in mesh.toml to one of: %s",
			 what, chat_format_names());
	return 0;
}

void chat_format_stops(enum chat_format f, const char *eos, const char *out[4])
{
	out[0] = out[1] = out[2] = out[3] = NULL;
	switch (f) {
	case CHAT_CHATML:
	case CHAT_QWEN2:
	case CHAT_QWEN25:
	case CHAT_QWEN3:
		out[0] = "<|im_end|>";
		break;
	case CHAT_LLAMA3:
	case CHAT_LLAMA31:
		out[0] = "<|eot_id|>";
		out[1] = "<|eom_id|>";
		break;
	case CHAT_GEMMA:
		out[0] = "<end_of_turn>";
		break;
	case CHAT_GEMMA4:
	case CHAT_GEMMA4_UNMERGED:
		out[0] = "<turn|>";
		break;
	case CHAT_MISTRAL:
		out[0] = eos;
		break;
	case CHAT_PHI3:
	case CHAT_PHI35:
		out[0] = "<|end|>";
		out[1] = "<|endoftext|>";
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------ JavaScript's trim */

/* ECMAScript's WhiteSpace and LineTerminator: what String.prototype.trim removes. */
static bool chat_js_space(uint32_t cp)
{
	switch (cp) {
	case 0x09:
	case 0x0a:
	case 0x0b:
	case 0x0c:
	case 0x0d:
	case 0x20:
	case 0xa0:
	case 0x1680:
	case 0x2028:
	case 0x2029:
	case 0x202f:
	case 0x205f:
	case 0x3000:
	case 0xfeff:
		return true;
	default:
		return cp >= 0x2000 && cp <= 0x200a;
	}
}

/* The code point at s[i] (valid UTF-8) and its length. */
static uint32_t chat_cp_at(const unsigned char *s, size_t i, size_t *k)
{
	unsigned char b = s[i];
	if (b < 0x80) {
		*k = 1;
		return b;
	}
	size_t n = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
	uint32_t cp = b & (0x7f >> n);
	for (size_t j = 1; j < n; j++)
		cp = cp << 6 | (s[i + j] & 0x3fu);
	*k = n;
	return cp;
}

void chat_js_trim(const char *str, size_t n, bool lead, bool trail, size_t *start, size_t *end)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t a = 0, b = n, k;
	while (lead && a < b && chat_js_space(chat_cp_at(s, a, &k)))
		a += k;
	while (trail && b > a) {
		size_t c = b - 1;
		while (c > a && (s[c] & 0xc0) == 0x80)
			c--;
		if (!chat_js_space(chat_cp_at(s, c, &k)))
			break;
		b = c;
	}
	*start = a;
	*end = b;
}

/* ------------------------------------------------------------------ rendering helpers */

struct chat_out {
	struct lm_buf *b;
	bool oom;
};

static void put(struct chat_out *o, const char *s, size_t n)
{
	if (n > 0 && lm_buf_add(o->b, s, n) != 0)
		o->oom = true;
}

static void puts_(struct chat_out *o, const char *s)
{
	put(o, s, strlen(s));
}

static void put_trim(struct chat_out *o, const char *s, size_t n, bool lead, bool trail)
{
	size_t a, e;
	chat_js_trim(s, n, lead, trail, &a, &e);
	put(o, s + a, e - a);
}

static const char *role_name(enum chat_role r)
{
	return r == CHAT_SYSTEM ? "system" : r == CHAT_USER ? "user" : "assistant";
}

static int refuse(lm_diag *d, const char *msg)
{
	return lm_fail(d, LM_EINVAL, "the chat template refuses this conversation: %s", msg);
}

/* ------------------------------------------------------------------ the formats */

/* llama.cpp's built-in ChatML. */
static void fmt_chatml(struct chat_out *o, const struct chat_msg *m, int n, bool gen)
{
	for (int i = 0; i < n; i++) {
		puts_(o, "<|im_start|>");
		puts_(o, role_name(m[i].role));
		puts_(o, "\n");
		put(o, m[i].text, m[i].len);
		puts_(o, "<|im_end|>\n");
	}
	if (gen)
		puts_(o, "<|im_start|>assistant\n");
}

/* Qwen 1.5 and 2 (the template of ggml-vocab-qwen2.gguf): ChatML, with a default system message
 * before a first turn that is not one. */
static void fmt_qwen2(struct chat_out *o, const struct chat_msg *m, int n, bool gen)
{
	if (n > 0 && m[0].role != CHAT_SYSTEM)
		puts_(o, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n");
	fmt_chatml(o, m, n, gen);
}

/* Qwen/Qwen2.5-7B-Instruct, without tools. */
static void fmt_qwen25(struct chat_out *o, const struct chat_msg *m, int n, bool gen)
{
	if (n > 0 && m[0].role == CHAT_SYSTEM) {
		puts_(o, "<|im_start|>system\n");
		put(o, m[0].text, m[0].len);
		puts_(o, "<|im_end|>\n");
	} else {
		puts_(o, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
			 "helpful assistant.<|im_end|>\n");
	}
	for (int i = 0; i < n; i++) {
		if (m[i].role == CHAT_SYSTEM && i == 0)
			continue;
		puts_(o, "<|im_start|>");
		puts_(o, role_name(m[i].role));
		puts_(o, "\n");
		put(o, m[i].text, m[i].len);
		puts_(o, "<|im_end|>\n");
	}
	if (gen)
		puts_(o, "<|im_start|>assistant\n");
}

static bool starts_with(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	return n >= k && memcmp(s, p, k) == 0;
}

static bool ends_with(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* The start of the text after the last `sep` in s[0..n) (JavaScript's split(sep)[-1]). */
static size_t after_last(const char *s, size_t n, const char *sep)
{
	size_t k = strlen(sep), at = 0;
	for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), sep, k)) != NULL; p += k)
		at = (size_t)(p - s) + k;
	return at;
}

/* Qwen/Qwen3-0.6B, without tools: an assistant turn after the last user query carries its
 * reasoning in <think> tags when it is the last turn or has reasoning; every turn loses the
 * reasoning its content holds before </think>. */
static void fmt_qwen3_assistant(struct chat_out *o, const struct chat_msg *m, bool after_query,
				bool last)
{
	const char *c = m->text;
	size_t cn = m->len, ca = 0, ra = 0, rn = 0;
	const char *r = "";
	if (memmem(c, cn, "</think>", 8) != NULL) {
		/* content.split('</think>')[-1].lstrip('\n') */
		size_t a = after_last(c, cn, "</think>"), s, e;
		chat_js_trim(c + a, cn - a, true, false, &s, &e);
		ca = a + s;
		/* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
		size_t first = (size_t)((const char *)memmem(c, cn, "</think>", 8) - c);
		chat_js_trim(c, first, false, true, &s, &e);
		size_t b = after_last(c, e, "<think>");
		chat_js_trim(c + b, e - b, true, false, &s, &e);
		r = c + b;
		ra = s;
		rn = e;
	}
	puts_(o, "<|im_start|>assistant\n");
	if (after_query && (last || rn > ra)) {
		puts_(o, "<think>\n");
		put_trim(o, r + ra, rn - ra, true, true);
		puts_(o, "\n</think>\n\n");
		put_trim(o, c + ca, cn - ca, true, false);
	} else {
		put(o, c + ca, cn - ca);
	}
	puts_(o, "<|im_end|>\n");
}

static void fmt_qwen3(struct chat_out *o, const struct chat_msg *m, int n, bool gen)
{
	if (n > 0 && m[0].role == CHAT_SYSTEM) {
		puts_(o, "<|im_start|>system\n");
		put(o, m[0].text, m[0].len);
		puts_(o, "<|im_end|>\n");
	}
	int last_query = n - 1;
	for (int i = n - 1; i >= 0; i--) {
		if (m[i].role == CHAT_USER &&
		    !(starts_with(m[i].text, m[i].len, "<tool_response>") &&
		      ends_with(m[i].text, m[i].len, "</tool_response>"))) {
			last_query = i;
			break;
		}
	}
	for (int i = 0; i < n; i++) {
		if (m[i].role == CHAT_ASSISTANT) {
			fmt_qwen3_assistant(o, &m[i], i > last_query, i == n - 1);
			continue;
		}
		if (m[i].role == CHAT_SYSTEM && i == 0)
			continue;
		puts_(o, "<|im_start|>");
		puts_(o, role_name(m[i].role));
		puts_(o, "\n");
		put(o, m[i].text, m[i].len);
		puts_(o, "<|im_end|>\n");
	}
	if (gen)
		puts_(o, "<|im_start|>assistant\n");
}

/* meta-llama/Llama-3.1-8B-Instruct without tools (3.2 and 3.3 render the same when
 * strftime_now is not given); and, with `dated` false, Llama 3.0's layout. */
static void fmt_llama3(struct chat_out *o, const char *bos, const struct chat_msg *m, int n,
		       bool gen, bool dated)
{
	puts_(o, bos);
	int i = 0;
	if (dated) {
		puts_(o, "<|start_header_id|>system<|end_header_id|>\n\n"
			 "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
		if (n > 0 && m[0].role == CHAT_SYSTEM) {
			put_trim(o, m[0].text, m[0].len, true, true);
			i = 1;
		}
		puts_(o, "<|eot_id|>");
	}
	for (; i < n; i++) {
		puts_(o, "<|start_header_id|>");
		puts_(o, role_name(m[i].role));
		puts_(o, "<|end_header_id|>\n\n");
		put_trim(o, m[i].text, m[i].len, true, true);
		puts_(o, "<|eot_id|>");
	}
	if (gen)
		puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* google/gemma-2-2b-it. */
static int fmt_gemma(struct chat_out *o, const char *bos, const struct chat_msg *m, int n, bool gen,
		     lm_diag *d)
{
	puts_(o, bos);
	if (n > 0 && m[0].role == CHAT_SYSTEM)
		return refuse(d, "System role not supported");
	for (int i = 0; i < n; i++) {
		if ((m[i].role == CHAT_USER) != (i % 2 == 0))
			return refuse(d, "Conversation roles must alternate "
					 "user/assistant/user/assistant/...");
		puts_(o, "<start_of_turn>");
		puts_(o, m[i].role == CHAT_ASSISTANT ? "model" : role_name(m[i].role));
		puts_(o, "\n");
		put_trim(o, m[i].text, m[i].len, true, true);
		puts_(o, "<end_of_turn>\n");
	}
	if (gen)
		puts_(o, "<start_of_turn>model\n");
	return 0;
}

/* Gemma 4's strip_thinking macro: each part between <channel|> markers loses what follows a
 * <|channel> in it; the whole is trimmed. */
static void gemma4_strip_thinking(struct chat_out *o, const char *s, size_t n)
{
	struct lm_buf tmp = {0};
	struct chat_out t = {.b = &tmp};
	size_t at = 0;
	for (;;) {
		const char *end = memmem(s + at, n - at, "<channel|>", 10);
		size_t stop = end != NULL ? (size_t)(end - s) : n;
		const char *ch = memmem(s + at, stop - at, "<|channel>", 10);
		put(&t, s + at, (ch != NULL ? (size_t)(ch - s) : stop) - at);
		if (end == NULL)
			break;
		at = stop + 10;
	}
	o->oom |= t.oom;
	put_trim(o, tmp.p != NULL ? tmp.p : "", tmp.len, true, true);
	lm_buf_fini(&tmp);
}

static void gemma4_text(struct chat_out *o, bool model, const char *s, size_t n)
{
	if (model)
		gemma4_strip_thinking(o, s, n);
	else
		put_trim(o, s, n, true, true);
}

/* google/gemma-4-31B-it, without tools, thinking or media; with `merge` false, the earlier
 * template of ggml-vocab-gemma-4.gguf, which gives every turn its header. */
static void fmt_gemma4(struct chat_out *o, const char *bos, const struct chat_msg *m, int n,
		       bool gen, bool merge)
{
	puts_(o, bos);
	int i = 0;
	if (n > 0 && m[0].role == CHAT_SYSTEM) {
		puts_(o, "<|turn>system\n");
		put_trim(o, m[0].text, m[0].len, true, true);
		puts_(o, "<turn|>\n");
		i = 1;
	}
	for (int first = i; i < n; i++) {
		bool model = m[i].role == CHAT_ASSISTANT;
		/* A model turn right after another one continues it. */
		if (!(merge && model && i > first && m[i - 1].role == CHAT_ASSISTANT)) {
			puts_(o, "<|turn>");
			puts_(o, model ? "model" : role_name(m[i].role));
			puts_(o, "\n");
		}
		if (m[i].parts != NULL) {
			for (int k = 0; k < m[i].n_parts; k++)
				gemma4_text(o, model, m[i].parts[k].text, m[i].parts[k].len);
		} else {
			gemma4_text(o, model, m[i].text, m[i].len);
		}
		puts_(o, "<turn|>\n");
	}
	if (gen)
		puts_(o, "<|turn>model\n<|channel>thought\n<channel|>");
}

/* mistralai/Mistral-Nemo-Instruct-2407, without tools. It has no generation prompt: the text
 * ends after the last turn either way. */
static int fmt_mistral(struct chat_out *o, const char *bos, const char *eos,
		       const struct chat_msg *m, int n, lm_diag *d)
{
	const struct chat_msg *sys = n > 0 && m[0].role == CHAT_SYSTEM ? &m[0] : NULL;
	const struct chat_msg *loop = sys != NULL ? m + 1 : m;
	int ln = sys != NULL ? n - 1 : n;
	for (int i = 0; i < ln; i++)
		if ((loop[i].role == CHAT_USER) != (i % 2 == 0))
			return refuse(d, "After the optional system message, conversation roles "
					 "must alternate user/assistant/user/assistant/...");
	puts_(o, bos);
	for (int i = 0; i < ln; i++) {
		if (loop[i].role == CHAT_USER) {
			puts_(o, "[INST]");
			if (i == ln - 1 && sys != NULL) {
				put(o, sys->text, sys->len);
				puts_(o, "\n\n");
			}
			put(o, loop[i].text, loop[i].len);
			puts_(o, "[/INST]");
		} else if (loop[i].role == CHAT_ASSISTANT) {
			put(o, loop[i].text, loop[i].len);
			puts_(o, eos);
		} else {
			return refuse(d, "Only user and assistant roles are supported, with the "
					 "exception of an initial optional system message!");
		}
	}
	return 0;
}

/* microsoft/Phi-3-mini (the template of ggml-vocab-phi-3.gguf): every user turn opens the
 * assistant's; system messages are not rendered, and there is no generation prompt. */
static void fmt_phi3(struct chat_out *o, const char *bos, const struct chat_msg *m, int n)
{
	puts_(o, bos);
	for (int i = 0; i < n; i++) {
		if (m[i].role == CHAT_USER) {
			puts_(o, "<|user|>\n");
			put(o, m[i].text, m[i].len);
			puts_(o, "<|end|>\n<|assistant|>\n");
		} else if (m[i].role == CHAT_ASSISTANT) {
			put(o, m[i].text, m[i].len);
			puts_(o, "<|end|>\n");
		}
	}
}

/* microsoft/Phi-3.5-mini-instruct: an empty system message is left out. */
static void fmt_phi35(struct chat_out *o, const char *eos, const struct chat_msg *m, int n,
		      bool gen)
{
	for (int i = 0; i < n; i++) {
		if (m[i].role == CHAT_SYSTEM && m[i].len == 0)
			continue;
		puts_(o, "<|");
		puts_(o, role_name(m[i].role));
		puts_(o, "|>\n");
		put(o, m[i].text, m[i].len);
		puts_(o, "<|end|>\n");
	}
	puts_(o, gen ? "<|assistant|>\n" : eos);
}

int chat_render(enum chat_format f, const char *bos, const char *eos, const struct chat_msg *msgs,
		int n, bool gen, struct lm_buf *out, lm_diag *d)
{
	for (int i = 0; i < n; i++)
		if (msgs[i].role == CHAT_TOOL || msgs[i].tool_calls)
			return lm_fail(d, LM_EINVAL,
				       "the %s format renders no tool calls or tool messages (the "
				       "model's own template does: mesh.toml names a format)",
				       chat_format_name(f));
	struct lm_buf b = {0};
	struct chat_out o = {.b = &b};
	int rc = 0;
	switch (f) {
	case CHAT_CHATML:
		fmt_chatml(&o, msgs, n, gen);
		break;
	case CHAT_QWEN2:
		fmt_qwen2(&o, msgs, n, gen);
		break;
	case CHAT_QWEN25:
		fmt_qwen25(&o, msgs, n, gen);
		break;
	case CHAT_QWEN3:
		fmt_qwen3(&o, msgs, n, gen);
		break;
	case CHAT_LLAMA3:
	case CHAT_LLAMA31:
		fmt_llama3(&o, bos, msgs, n, gen, f == CHAT_LLAMA31);
		break;
	case CHAT_GEMMA:
		rc = fmt_gemma(&o, bos, msgs, n, gen, d);
		break;
	case CHAT_GEMMA4:
	case CHAT_GEMMA4_UNMERGED:
		fmt_gemma4(&o, bos, msgs, n, gen, f == CHAT_GEMMA4);
		break;
	case CHAT_MISTRAL:
		rc = fmt_mistral(&o, bos, eos, msgs, n, d);
		break;
	case CHAT_PHI3:
		fmt_phi3(&o, bos, msgs, n);
		break;
	case CHAT_PHI35:
		fmt_phi35(&o, eos, msgs, n, gen);
		break;
	default:
		rc = lm_fail(d, LM_EINVAL, "no chat format");
		break;
	}
	if (rc == 0 && o.oom)
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
	if (rc == 0 && b.len > 0 && lm_buf_add(out, b.p, b.len) != 0)
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
	lm_buf_fini(&b);
	return rc;
}

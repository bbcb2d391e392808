/* coordinator/chat_template: which format each real template is recognised as (the templates
 * of ../shared/chat-templates/ and of the vocabularies that carry one), what is refused, and
 * JavaScript's trim. The renderings themselves are held to each template's own Jinja by
 * tests/integration/test_chat_templates.sh. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/format/gguf.h"
#include "coordinator/api/chat_template.h"

static char *slurp(const char *rel, size_t *n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", getenv("LM_SHARED"), rel);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	struct lm_buf b = {0};
	char buf[4096];
	size_t k;
	while ((k = fread(buf, 1, sizeof buf, f)) > 0)
		lm_buf_add(&b, buf, k);
	fclose(f);
	*n = b.len;
	return b.p;
}

Test(chat_template, the_shared_templates_are_recognised)
{
	static const struct {
		const char *file;
		enum chat_format f;
	} cases[] = {
		{"chat-templates/google-gemma-4-31B-it.jinja", CHAT_GEMMA4},
		{"chat-templates/google-gemma-2-2b-it.jinja", CHAT_GEMMA},
		{"chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja", CHAT_LLAMA31},
		{"chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja", CHAT_QWEN25},
		{"chat-templates/Qwen-Qwen3-0.6B.jinja", CHAT_QWEN3},
		{"chat-templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", CHAT_MISTRAL},
		{"chat-templates/microsoft-Phi-3.5-mini-instruct.jinja", CHAT_PHI35},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n;
		char *t = slurp(cases[i].file, &n);
		char why[200];
		enum chat_format f = chat_template_detect(t, n, why, sizeof why);
		cr_expect_eq(f, cases[i].f, "%s: %s (%s)", cases[i].file, chat_format_name(f), why);
		free(t);
	}
}

Test(chat_template, vocabularies_with_a_template)
{
	static const struct {
		const char *file;
		enum chat_format f;
	} cases[] = {
		{"tokenizer/ggml-vocab-gemma-4.gguf", CHAT_GEMMA4_UNMERGED},
		{"tokenizer/ggml-vocab-phi-3.gguf", CHAT_PHI3},
		{"tokenizer/ggml-vocab-qwen2.gguf", CHAT_QWEN2},
		{"models/stories260K.gguf", CHAT_CHATML}, /* no template: the fallback */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char path[4096], why[400];
		snprintf(path, sizeof path, "%s/%s", getenv("LM_SHARED"), cases[i].file);
		gguf_file *g;
		lm_diag d = {{0}};
		cr_assert_eq(gguf_open(path, &g, &d), 0, "%s", d.msg);
		enum chat_format f;
		cr_assert_eq(chat_format_resolve(NULL, g, &f, why, sizeof why, &d), 0);
		cr_expect_eq(f, cases[i].f, "%s: %s", cases[i].file, chat_format_name(f));
		if (i == 3)
			cr_expect(strstr(why, "no chat template (tokenizer.chat_template), so chat "
					      "falls back to ChatML") != NULL,
				  "%s", why);
		else
			cr_expect_str_eq(why, "", "a recognised template needs no note");
		/* mesh.toml's override wins, and must name a format. */
		cr_assert_eq(chat_format_resolve("chatml", g, &f, why, sizeof why, &d), 0);
		cr_expect_eq(f, CHAT_CHATML);
		cr_expect_eq(chat_format_resolve("jinja", g, &f, why, sizeof why, &d), LM_ECONFIG);
		cr_expect(strstr(d.msg, "chatml, qwen2") != NULL, "%s", d.msg);
		gguf_close(g);
	}
}

/* A family's markers without one of its layouts is refused, saying what it looked like. */
Test(chat_template, other_layouts_are_refused)
{
	static const char *const others[] = {
		"{{ '<|im_start|>system\\nYou are SmolLM.<|im_end|>' }}",
		"{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}",
		"{{ bos_token }}<start_of_turn>{% set first_user_prefix = '' %}",
		"<|start_header_id|>x<|end_header_id|> Environment: ipython {{ tools }}",
		"<|user|>{{ x }}<|end|><|assistant|>",
		"<|turn>user<turn|>",
		"{% for message in messages %}{{ message.content }}{% endfor %}",
	};
	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		char why[200];
		enum chat_format f =
			chat_template_detect(others[i], strlen(others[i]), why, sizeof why);
		cr_expect_eq(f, CHAT_NONE, "%s: %s", others[i], chat_format_name(f));
		cr_expect(why[0] != '\0');
	}
}

Test(chat_template, javascript_trim)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"  a b  ", "a b"},
		{"\t\n\r\v\fa\n", "a"},
		{"\xc2\xa0"
		 "a"
		 "\xef\xbb\xbf",
		 "a"}, /* U+00A0, U+FEFF */
		{"\xe3\x80\x80"
		 "a"
		 "\xe2\x80\xa8",
		 "a"}, /* U+3000, U+2028 */
		{"\xe2\x80\x89"
		 "a"
		 "\xe2\x80\x8a",
		 "a"}, /* U+2009, U+200A */
		{"\xc2\x85"
		 "a"
		 "\x1c",
		 "\xc2\x85"
		 "a"
		 "\x1c"}, /* NEL and U+001C stay */
		{"\xe2\x80\x8b"
		 "a",
		 "\xe2\x80\x8b"
		 "a"}, /* U+200B is not space */
		{"   ", ""},
		{"", ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t a, e, n = strlen(cases[i].in);
		chat_js_trim(cases[i].in, n, true, true, &a, &e);
		cr_expect_eq(e - a, strlen(cases[i].out), "case %zu", i);
		cr_expect(memcmp(cases[i].in + a, cases[i].out, e - a) == 0, "case %zu", i);
	}
}

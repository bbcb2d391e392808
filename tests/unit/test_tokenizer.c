/* The tokenizer against llama.cpp's own test vectors (shared/tokenizer, written by llama.cpp
 * v0.4.0 with add_special = false, parse_special = false), llama.cpp's prompt ids for the
 * stories260K references, hand-computed merges on tiny hand-built vocabularies, and hostile
 * vocabularies that must be refused with a message naming the key. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/format/gguf.h"
#include "common/tok/tok_internal.h"
#include "common/tok/tok_unicode.h"
#include "common/tok/tokenizer.h"
#include "common/base/clock.h"

static char *shared_path(const char *rel)
{
	static char buf[4096];
	const char *root = getenv("LM_SHARED");
	snprintf(buf, sizeof buf, "%s/%s", root != NULL ? root : "../shared", rel);
	return buf;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	cr_assert_not_null(fp, "open %s", path);
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
	buf[n] = '\0';
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

static tok_vocab *load_path(const char *path, gguf_file **fout)
{
	lm_diag d = {{0}};
	gguf_file *f = NULL;
	tok_vocab *v = NULL;
	int rc = gguf_open(path, &f, &d);
	cr_assert_eq(rc, 0, "%s", d.msg);
	rc = tok_load(f, &v, &d);
	cr_assert_eq(rc, 0, "%s", d.msg);
	*fout = f;
	return v;
}

/* ------------------------------------------------------------ llama.cpp's test vectors */

#define N_TEXTS 46

/* Reads X.inp and X.out: texts separated by "\n__ggml_vocab_test__\n" (llama.cpp's
 * test-tokenizer-0 reads text after the last separator as one more text: gemma-4's .inp has no
 * separator after its last one), and one line of ids per text. Returns the number of texts that
 * tokenize exactly as llama.cpp did, and checks that decoding the expected ids gives the text
 * back and that there are N_TEXTS. */
static int run_vectors(const char *vocab_rel, const char *vec_rel)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	char path[512];
	gguf_file *f;
	tok_vocab *v = load_path(shared_path(vocab_rel), &f);
	gguf_close(f); /* the vocabulary owns its memory */

	size_t inp_len, out_len;
	snprintf(path, sizeof path, "%s.inp", vec_rel);
	char *inp = slurp(shared_path(path), &inp_len);
	snprintf(path, sizeof path, "%s.out", vec_rel);
	char *out = slurp(shared_path(path), &out_len);

	int passed = 0, n_texts = 0;
	char *text = inp, *line = out, *end;
	for (; text < inp + inp_len; text = end + (*end != '\0' ? strlen(sep) : 0), n_texts++) {
		if ((end = strstr(text, sep)) == NULL)
			end = inp + inp_len;
		size_t len = (size_t)(end - text);
		char *eol = strchr(line, '\n');
		cr_assert_not_null(eol, "%s: fewer id lines than texts", vec_rel);
		*eol = '\0';
		int32_t want[4096], got[4096];
		size_t n_want = 0, n_got = 0;
		for (char *p = line, *q; (q = NULL, strtol(p, &q, 10), q != p); p = q)
			want[n_want++] = (int32_t)strtol(p, NULL, 10);
		line = eol + 1;

		lm_diag d = {{0}};
		int rc = tok_encode(v, text, len, false, got, 4096, &n_got, &d);
		cr_assert_eq(rc, 0, "%s text %d: %s", vec_rel, n_texts, d.msg);
		bool same = n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0;
		if (same)
			passed++;
		else
			cr_log_error("%s: text %d ('%.*s') tokenizes differently", vec_rel, n_texts,
				     (int)(len > 40 ? 40 : len), text);

		/* The pieces of llama.cpp's ids reproduce the text; SPM adds the dummy space. */
		char dec[16384];
		size_t n_dec = 0;
		for (size_t i = 0; i < n_want; i++) {
			size_t pl;
			const char *p = tok_piece(v, want[i], &pl);
			cr_assert_not_null(p);
			cr_assert_lt(n_dec + pl, sizeof dec);
			memcpy(dec + n_dec, p, pl);
			n_dec += pl;
		}
		const char *dp = dec;
		if (tok_model(v) == TOK_MODEL_SPM && n_dec > 0 && dec[0] == ' ')
			dp++, n_dec--;
		cr_expect(n_dec == len && memcmp(dp, text, len) == 0,
			  "%s: text %d does not decode back: '%.*s'", vec_rel, n_texts, (int)n_dec,
			  dp);
	}
	cr_expect_eq(n_texts, N_TEXTS, "%s: %d texts", vec_rel, n_texts);
	cr_log_info("%s: %d/%d vectors pass", vec_rel, passed, n_texts);
	free(inp);
	free(out);
	tok_free(v);
	return passed;
}

Test(tokenizer, vectors_llama_spm)
{
	const char *x = "tokenizer/ggml-vocab-llama-spm.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_phi_3)
{
	const char *x = "tokenizer/ggml-vocab-phi-3.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_stories260k)
{
	cr_expect_eq(run_vectors("models/stories260K.gguf", "tokenizer/stories260K-tok512"),
		     N_TEXTS);
}

Test(tokenizer, vectors_gpt_2)
{
	const char *x = "tokenizer/ggml-vocab-gpt-2.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_mpt)
{
	const char *x = "tokenizer/ggml-vocab-mpt.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_starcoder)
{
	const char *x = "tokenizer/ggml-vocab-starcoder.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_refact)
{
	const char *x = "tokenizer/ggml-vocab-refact.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_deepseek_coder)
{
	const char *x = "tokenizer/ggml-vocab-deepseek-coder.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_llama_bpe)
{
	const char *x = "tokenizer/ggml-vocab-llama-bpe.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_qwen2)
{
	const char *x = "tokenizer/ggml-vocab-qwen2.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

Test(tokenizer, vectors_gemma_4)
{
	const char *x = "tokenizer/ggml-vocab-gemma-4.gguf";
	cr_expect_eq(run_vectors(x, x), N_TEXTS);
}

/* ------------------------------------------------------------ special tokens, NUL, EOG */

/* Encodes text[0..len) with flags and compares with llama.cpp's ids. */
static void expect_ids_ex(const tok_vocab *v, const char *what, const char *text, size_t len,
			  unsigned flags, const int32_t *want, size_t n_want)
{
	int32_t *got;
	size_t n;
	lm_diag d = {{0}};
	cr_assert_eq(tok_encode_alloc_ex(v, text, len, flags, &got, &n, &d), 0, "%s: %s", what,
		     d.msg);
	char buf[512] = "";
	for (size_t i = 0; i < n; i++)
		snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " %d", got[i]);
	cr_expect(n == n_want && (n == 0 || memcmp(got, want, n * sizeof *got) == 0),
		  "%s (flags %u) gave [%s ]", what, flags, buf);
	free(got);
}

#define TEXT(s) s, sizeof(s) - 1 /* a literal with its length, NULs included */

/* llama-bpe's ignore_merges: a word that is a token is that token, though its merges would not
 * reach it (588 of the vocabulary's words, none in llama.cpp's vectors). Ids from llama.cpp
 * v0.4.0 (lm_oracle --tokenize --no-bos); merging them gives 3355 26298 66 for " việc". */
Test(tokenizer, llama_bpe_keeps_token_words_whole)
{
	static const int32_t vi[] = {127806, 100724, 100769, 100788, 101798, 31074, 100937, 100631};
	static const int32_t mixed[] = {103084, 101503, 124717, 101081};
	gguf_file *f;
	tok_vocab *v = load_path(shared_path("tokenizer/ggml-vocab-llama-bpe.gguf"), &f);
	expect_ids_ex(v, "vi",
		      TEXT("T\xc3\xb4i l\xc3\xa0m vi\xe1\xbb\x87"
			   "c \xe1\xbb\x9f Vi\xe1\xbb\x87t Nam nhi\xe1\xbb\x81u n\xc4\x83m"),
		      0, vi, 8);
	expect_ids_ex(v, "mixed", TEXT("lardan jeho mektedir"), 0, mixed, 4);
	tok_free(v);
	gguf_close(f);
}

/* Special-token text becomes the token only with TOK_ENC_PARSE_SPECIAL; user-defined tokens are
 * matched either way. Expected ids: lm_oracle --tokenize [--special] --no-bos --file, i.e.
 * llama_tokenize(add_special = false, parse_special = false/true) of llama.cpp v0.4.0. */
Test(tokenizer, special_text_is_parsed_only_when_asked)
{
	static const struct {
		const char *vocab, *text;
		int32_t plain[40], special[16];
		size_t n_plain, n_special;
	} cases[] = {
		{"tokenizer/ggml-vocab-qwen2.gguf",
		 "<|im_start|>user\nhi<|im_end|>",
		 {27, 91, 318, 4906, 91, 29, 872, 198, 6023, 27, 91, 318, 6213, 91, 29},
		 {151644, 872, 198, 6023, 151645},
		 15,
		 5},
		{"tokenizer/ggml-vocab-llama-bpe.gguf",
		 "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
		 {27, 91,  7413, 3659, 4424, 91,   1822, 91, 2527, 8932, 851, 91,  29, 882, 27,
		  91, 408, 8932, 851,  91,   1363, 6151, 27, 91,   68,   354, 851, 91, 29},
		 {128000, 128006, 882, 128007, 271, 6151, 128009},
		 29,
		 7},
		{"tokenizer/ggml-vocab-gemma-4.gguf",
		 "<|turn>user\nhi<turn|>",
		 {236820, 236909, 887, 236813, 2364, 107, 2202, 236820, 887, 111038},
		 {105, 2364, 107, 2202, 106},
		 10,
		 5},
		/* <|tool_call> and <|"|> are user-defined: single ids in both modes. */
		{"tokenizer/ggml-vocab-gemma-4.gguf",
		 "<|tool_call>x<|\"|>",
		 {48, 236781, 52},
		 {48, 236781, 52},
		 3,
		 3},
		/* SPM: the text after a special token gets the dummy space again. */
		{"tokenizer/ggml-vocab-llama-spm.gguf",
		 "<s>[INST] hi [/INST]</s>",
		 {529, 29879, 24566, 25580, 29962, 7251, 518, 29914, 25580, 29962, 829, 29879,
		  29958},
		 {1, 518, 25580, 29962, 7251, 518, 29914, 25580, 29962, 2},
		 13,
		 10},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		gguf_file *f;
		tok_vocab *v = load_path(shared_path(cases[c].vocab), &f);
		const char *t = cases[c].text;
		expect_ids_ex(v, cases[c].vocab, t, strlen(t), 0, cases[c].plain, cases[c].n_plain);
		expect_ids_ex(v, cases[c].vocab, t, strlen(t), TOK_ENC_PARSE_SPECIAL,
			      cases[c].special, cases[c].n_special);
		/* tok_encode is the plain form. */
		int32_t ids[64];
		size_t n;
		lm_diag d = {{0}};
		cr_assert_eq(tok_encode(v, t, strlen(t), false, ids, 64, &n, &d), 0, "%s", d.msg);
		cr_expect(n == cases[c].n_plain && memcmp(ids, cases[c].plain, n * 4) == 0);
		/* BOS and parsing together: BOS, then the same ids. */
		if (tok_bos(v) >= 0) {
			cr_assert_eq(tok_encode_ex(v, t, strlen(t),
						   TOK_ENC_ADD_BOS | TOK_ENC_PARSE_SPECIAL, ids, 64,
						   &n, &d),
				     0);
			cr_expect(n == cases[c].n_special + 1 && ids[0] == tok_bos(v) &&
				  memcmp(ids + 1, cases[c].special, (n - 1) * 4) == 0);
		}
		tok_free(v);
		gguf_close(f);
	}

	gguf_file *f;
	tok_vocab *v = load_path(shared_path("tokenizer/ggml-vocab-qwen2.gguf"), &f);
	int32_t ids[4];
	size_t n;
	lm_diag d = {{0}};
	cr_expect_eq(tok_encode_ex(v, "x", 1, 1u << 7, ids, 4, &n, &d), LM_EINVAL);
	cr_expect_not_null(strstr(d.msg, "flags"));
	cr_expect_eq(tok_encode_ex(v, NULL, 3, 0, ids, 4, &n, &d), LM_EINVAL);
	cr_expect_eq(tok_encode_ex(v, NULL, 0, TOK_ENC_PARSE_SPECIAL, ids, 4, &n, &d), 0);
	cr_expect_eq(n, 0);
	tok_free(v);
	gguf_close(f);
}

/* A NUL is a character: the text is not cut there. Expected ids from llama.cpp as above. */
Test(tokenizer, nul_bytes_are_text)
{
	static const struct {
		const char *vocab;
		int32_t a_nul_b[3], nuls[6];
		size_t n_nuls;
	} cases[] = {
		{"tokenizer/ggml-vocab-llama-spm.gguf",
		 {263, 3, 29890},
		 {259, 3, 29871, 3, 3, 29916},
		 6},
		{"tokenizer/ggml-vocab-llama-bpe.gguf",
		 {64, 188, 65},
		 {220, 188, 220, 188, 188, 87},
		 6},
		{"tokenizer/ggml-vocab-qwen2.gguf",
		 {64, 188, 65},
		 {220, 188, 220, 188, 188, 87},
		 6},
		{"tokenizer/ggml-vocab-gpt-2.gguf",
		 {64, 188, 65},
		 {220, 188, 220, 188, 188, 87},
		 6},
		{"tokenizer/ggml-vocab-gemma-4.gguf",
		 {236746, 238, 236763},
		 {236743, 238, 236743, 238, 238, 236781},
		 6},
		{"models/stories260K.gguf", {261, 3, 430}, {0}, 0},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		gguf_file *f;
		tok_vocab *v = load_path(shared_path(cases[c].vocab), &f);
		expect_ids_ex(v, cases[c].vocab, TEXT("a\0b"), 0, cases[c].a_nul_b, 3);
		if (cases[c].n_nuls > 0)
			expect_ids_ex(v, cases[c].vocab, TEXT(" \0 \0\0x"), 0, cases[c].nuls,
				      cases[c].n_nuls);
		tok_free(v);
		gguf_close(f);
	}
}

/* End of generation and ids by text, as llama.cpp's vocabulary load decides them (lm_oracle
 * --vocab-info: llama_vocab_eot, llama_vocab_is_eog over every id). */
Test(tokenizer, eog_ids_and_lookup_match_llama_cpp)
{
	static const struct {
		const char *vocab;
		int32_t eot, eog[4];
		size_t n_eog;
		const char *name;
		int32_t id;
	} cases[] = {
		{"tokenizer/ggml-vocab-gemma-4.gguf", -1, {1, 50, 106}, 3, "<turn|>", 106},
		{"tokenizer/ggml-vocab-llama-bpe.gguf",
		 128009,
		 {128001, 128009},
		 2,
		 "<|start_header_id|>",
		 128006},
		{"tokenizer/ggml-vocab-qwen2.gguf",
		 151645,
		 {128247, 151643, 151645},
		 3,
		 "<|im_start|>",
		 151644},
		{"tokenizer/ggml-vocab-llama-spm.gguf", -1, {2}, 1, "</s>", 2},
		{"tokenizer/ggml-vocab-phi-3.gguf", 32007, {2, 32000, 32007}, 3, "<|end|>", 32007},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		gguf_file *f;
		tok_vocab *v = load_path(shared_path(cases[c].vocab), &f);
		const char *x = cases[c].vocab;
		cr_expect_eq(tok_eot(v), cases[c].eot, "%s", x);
		size_t n;
		const int32_t *eog = tok_eog_ids(v, &n);
		cr_expect(n == cases[c].n_eog && memcmp(eog, cases[c].eog, n * 4) == 0, "%s: %zu",
			  x, n);
		int32_t count = 0;
		for (int32_t id = -1; id <= tok_n_vocab(v); id++)
			count += tok_is_eog(v, id);
		cr_expect_eq(count, (int32_t)cases[c].n_eog, "%s", x);
		for (size_t i = 0; i < cases[c].n_eog; i++)
			cr_expect(tok_is_eog(v, cases[c].eog[i]), "%s: %d", x, cases[c].eog[i]);
		cr_expect_eq(tok_find(v, cases[c].name, strlen(cases[c].name)), cases[c].id, "%s",
			     x);
		cr_expect_eq(tok_find(v, cases[c].name, strlen(cases[c].name) - 1), -1, "%s", x);
		cr_expect_eq(tok_find(v, NULL, 0), -1);
		tok_free(v);
		gguf_close(f);
	}
}

/* ------------------------------------------------------------ stories260K prompts with BOS */

static const char *const prompts[] = {"once_upon_a_time", "the_cat", "lily_wanted", "empty",
				      "tom_apples"};

/* Reads "models/reference/<slug>.<what>" into ids. */
static size_t read_ids(const char *slug, const char *what, int32_t *ids, size_t cap)
{
	char rel[256];
	size_t len, n = 0;
	snprintf(rel, sizeof rel, "models/reference/%s.%s", slug, what);
	char *s = slurp(shared_path(rel), &len);
	for (char *p = s, *q; n < cap && (q = NULL, strtol(p, &q, 10), q != p); p = q)
		ids[n++] = (int32_t)strtol(p, NULL, 10);
	free(s);
	return n;
}

Test(tokenizer, stories260k_prompt_ids_match_llama_cpp)
{
	gguf_file *f;
	tok_vocab *v = load_path(shared_path("models/stories260K.gguf"), &f);
	cr_expect_eq(tok_n_vocab(v), 512);
	cr_expect_eq(tok_bos(v), 1);
	cr_expect_eq(tok_eos(v), 2);
	cr_expect_eq(tok_unk(v), 0);
	cr_expect(tok_add_bos(v));
	cr_expect(tok_is_eog(v, 2));
	cr_expect_not(tok_is_eog(v, 1));
	for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
		char rel[256];
		size_t len, n;
		snprintf(rel, sizeof rel, "models/reference/%s.prompt.txt", prompts[i]);
		char *text = slurp(shared_path(rel), &len);
		int32_t want[256], got[256];
		size_t n_want = read_ids(prompts[i], "llamacpp_prompt_ids.txt", want, 256);
		lm_diag d = {{0}};
		cr_assert_eq(tok_encode(v, text, len, tok_add_bos(v), got, 256, &n, &d), 0, "%s",
			     d.msg);
		cr_expect(n == n_want && memcmp(got, want, n * sizeof *got) == 0, "%s", prompts[i]);
		free(text);
	}
	tok_free(v);
	gguf_close(f);
}

/* Runs the layermesh binary; returns its exit status and its stdout in out. */
static int run_cli(char *const argv[], char *out, size_t cap)
{
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = read(fds[0], out + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = '\0';
	close(fds[0]);
	int status;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(tokenizer, cli_prints_llama_cpp_prompt_ids)
{
	char *exe = getenv("LM_LAYERMESH");
	cr_assert_not_null(exe, "LM_LAYERMESH is not set (tests/unit/meson.build sets it)");
	char model[4096], out[4096];
	snprintf(model, sizeof model, "%s", shared_path("models/stories260K.gguf"));
	for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
		char rel[256], want[4096];
		size_t len, wl;
		snprintf(rel, sizeof rel, "models/reference/%s.prompt.txt", prompts[i]);
		char *text = slurp(shared_path(rel), &len);
		snprintf(rel, sizeof rel, "models/reference/%s.llamacpp_prompt_ids.txt",
			 prompts[i]);
		char *ids = slurp(shared_path(rel), &wl);
		while (wl > 0 && (ids[wl - 1] == '\n' || ids[wl - 1] == ' '))
			ids[--wl] = '\0';
		snprintf(want, sizeof want, "%s\n", ids);
		char *argv[] = {exe, "tokenize", "--model", model, "--", text, NULL};
		cr_expect_eq(run_cli(argv, out, sizeof out), 0, "%s", prompts[i]);
		cr_expect_str_eq(out, want, "%s", prompts[i]);
		free(text);
		free(ids);
	}
	/* --no-bos; a vocabulary-only file; bad usage. */
	char *nobos[] = {exe, "tokenize", "--model", model, "--no-bos", "Once upon a time", NULL};
	cr_expect_eq(run_cli(nobos, out, sizeof out), 0);
	cr_expect_str_eq(out, "403 407 261 378\n");
	char gpt2[4096];
	snprintf(gpt2, sizeof gpt2, "%s", shared_path("tokenizer/ggml-vocab-gpt-2.gguf"));
	char *bpe[] = {exe, "tokenize", "--model", gpt2, "Hello world", NULL};
	cr_expect_eq(run_cli(bpe, out, sizeof out), 0);
	cr_expect_str_eq(out, "15496 995\n"); /* gpt-2 adds no BOS; ids from its .out file */
	char *usage[] = {exe, "tokenize", "Hello", NULL};
	cr_expect_eq(run_cli(usage, out, sizeof out), 2);
	char *help[] = {exe, "tokenize", "--help", NULL};
	cr_expect_eq(run_cli(help, out, sizeof out), 0);
	cr_expect_not_null(strstr(out, "--no-bos"));

	/* --file: one line per text, NULs kept, no separator needed after the last text; with
	 * --special. Ids from llama.cpp (lm_oracle --tokenize --file). */
	char path[] = "/tmp/test_tokenizer_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	static const char texts[] = "a\0b\n__ggml_vocab_test__\n<s>x</s>";
	cr_assert_eq(write(fd, texts, sizeof texts - 1), (ssize_t)(sizeof texts - 1));
	close(fd);
	char *file[] = {exe, "tokenize", "--model", model, "--file", path, NULL};
	cr_expect_eq(run_cli(file, out, sizeof out), 0);
	cr_expect_str_eq(out, "1 261 3 430\n1 410 504 419 505 444 504 492 419 505\n");
	char *special[] = {exe,         "tokenize", "--model", model, "--no-bos",
			   "--special", "--file",   path,      NULL};
	cr_expect_eq(run_cli(special, out, sizeof out), 0);
	cr_expect_str_eq(out, "261 3 430\n1 410 444 2\n");
	unlink(path);
	char *info[] = {exe, "tokenize", "--model", model, "--vocab-info", NULL};
	cr_expect_eq(run_cli(info, out, sizeof out), 0);
	cr_expect_str_eq(out,
			 "n_vocab 512\nbos 1\neos 2\neot -1\nadd_bos 1\neog 2\nspecial 0 1 2\n");
	char *two[] = {exe, "tokenize", "--model", model, "--file", path, "text", NULL};
	cr_expect_eq(run_cli(two, out, sizeof out), 2);
}

/* ------------------------------------------------------------ hand-built vocabularies */

struct img {
	uint8_t *p;
	size_t len, cap;
	uint64_t n_kv;
};

static void put(struct img *m, const void *src, size_t n)
{
	if (m->len + n > m->cap) {
		m->cap = (m->len + n) * 2 + 64;
		m->p = realloc(m->p, m->cap);
	}
	memcpy(m->p + m->len, src, n);
	m->len += n;
}
static void put_u32(struct img *m, uint32_t v)
{
	put(m, &v, 4);
}
static void put_u64(struct img *m, uint64_t v)
{
	put(m, &v, 8);
}
static void put_bytes(struct img *m, const char *s, size_t n)
{
	put_u64(m, n);
	put(m, s, n);
}
static void put_key(struct img *m, const char *key, uint32_t type)
{
	put_bytes(m, key, strlen(key));
	put_u32(m, type);
	m->n_kv++;
}
static void kv_str(struct img *m, const char *key, const char *val)
{
	put_key(m, key, GGUF_TYPE_STRING);
	put_bytes(m, val, strlen(val));
}
static void kv_u32(struct img *m, const char *key, uint32_t val)
{
	put_key(m, key, GGUF_TYPE_UINT32);
	put_u32(m, val);
}
static void kv_bool(struct img *m, const char *key, bool val)
{
	uint8_t b = val;
	put_key(m, key, GGUF_TYPE_BOOL);
	put(m, &b, 1);
}
/* Strings with explicit lengths (lens NULL: strlen). */
static void kv_strs(struct img *m, const char *key, const char *const *s, const size_t *lens,
		    size_t n)
{
	put_key(m, key, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_STRING);
	put_u64(m, n);
	for (size_t i = 0; i < n; i++)
		put_bytes(m, s[i], lens ? lens[i] : strlen(s[i]));
}
static void kv_f32s(struct img *m, const char *key, const float *x, size_t n)
{
	put_key(m, key, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_FLOAT32);
	put_u64(m, n);
	put(m, x, n * 4);
}
static void kv_i32s(struct img *m, const char *key, const int32_t *x, size_t n)
{
	put_key(m, key, GGUF_TYPE_ARRAY);
	put_u32(m, GGUF_TYPE_INT32);
	put_u64(m, n);
	put(m, x, n * 4);
}
/* Header + the key/values written so far + padding: a complete vocabulary-only GGUF image. */
static struct img finish(struct img *kvs)
{
	struct img m = {0};
	put(&m, "GGUF", 4);
	put_u32(&m, 3);
	put_u64(&m, 0);
	put_u64(&m, kvs->n_kv);
	put(&m, kvs->p, kvs->len);
	while (m.len % 32)
		put(&m, "", 1);
	free(kvs->p);
	return m;
}

/* A tiny SentencePiece vocabulary. Scores decide merges: "ba" > "▁a" > "ab". */
enum { U_UNK, U_BOS, U_EOS, U_NL, U_C3, U_A9, U_SP, U_A, U_B, U_AB, U_SPA, U_BA, U_ME, U_N };
static const char *const spm_tokens[U_N] = {
	"<unk>",
	"<s>",
	"</s>",
	"<0x0A>",
	"<0xC3>",
	"<0xA9>",
	"\xe2\x96\x81",
	"a",
	"b",
	"ab",
	("\xe2\x96\x81"
	 "a"), /* parenthesized: one literal split only to end the hex escape */
	"ba",
	"<me>",
};
static const float spm_scores[U_N] = {0, 0, 0, 0, 0, 0, -1, -2, -3, -1.5f, -0.5f, -0.1f, 0};
static const int32_t spm_types[U_N] = {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 4};

/* What to break in the tiny vocabulary (0: nothing). */
enum mutation {
	M_NONE,
	M_NO_MODEL,
	M_MODEL_BERT,
	M_MODEL_U32,
	M_NO_TOKENS,
	M_TOKENS_STRING,
	M_TOKENS_I32,
	M_TOKENS_EMPTY,
	M_SCORES_SHORT,
	M_SCORES_NAN,
	M_TYPES_LONG,
	M_TYPES_F32,
	M_BOS_RANGE,
	M_UNK_STRING,
	M_DUPLICATE,
	M_BAD_UTF8,
	M_NUL_IN_TOKEN,
	M_BYTE_NOT_HEX,
	M_ADD_BOS_U32,
	M_GPT2_NO_MERGES,
	M_GPT2_BAD_PRE,
	M_NO_SPACE_PREFIX,
	M_COUNT,
};

static struct img spm_image(enum mutation mu)
{
	struct img k = {0};
	const char *toks[U_N];
	size_t lens[U_N];
	float scores[U_N];
	int32_t types[U_N];
	for (int i = 0; i < U_N; i++) {
		toks[i] = spm_tokens[i];
		lens[i] = strlen(toks[i]);
		scores[i] = spm_scores[i];
		types[i] = spm_types[i];
	}
	size_t n_scores = U_N, n_types = U_N;
	if (mu == M_MODEL_BERT)
		kv_str(&k, "tokenizer.ggml.model", "bert");
	else if (mu == M_MODEL_U32)
		kv_u32(&k, "tokenizer.ggml.model", 1);
	else if (mu == M_GPT2_NO_MERGES || mu == M_GPT2_BAD_PRE)
		kv_str(&k, "tokenizer.ggml.model", "gpt2");
	else if (mu != M_NO_MODEL)
		kv_str(&k, "tokenizer.ggml.model", "llama");
	if (mu == M_GPT2_BAD_PRE)
		kv_str(&k, "tokenizer.ggml.pre", "no-such-pre");
	if (mu == M_DUPLICATE)
		toks[U_BA] = "ab", lens[U_BA] = 2;
	if (mu == M_BAD_UTF8)
		toks[U_BA] = "b\xff", lens[U_BA] = 2;
	if (mu == M_NUL_IN_TOKEN)
		toks[U_BA] = "b\0a", lens[U_BA] = 3;
	if (mu == M_BYTE_NOT_HEX)
		toks[U_NL] = "<0xZZ>";
	if (mu == M_SCORES_SHORT)
		n_scores--;
	if (mu == M_SCORES_NAN)
		scores[U_AB] = NAN;
	if (mu == M_TYPES_LONG)
		n_types++;
	if (mu == M_TOKENS_STRING)
		kv_str(&k, "tokenizer.ggml.tokens", "a");
	else if (mu == M_TOKENS_I32)
		kv_i32s(&k, "tokenizer.ggml.tokens", types, U_N);
	else if (mu == M_TOKENS_EMPTY)
		kv_strs(&k, "tokenizer.ggml.tokens", toks, lens, 0);
	else if (mu != M_NO_TOKENS)
		kv_strs(&k, "tokenizer.ggml.tokens", toks, lens, U_N);
	kv_f32s(&k, "tokenizer.ggml.scores", scores, n_scores);
	if (mu == M_TYPES_F32) {
		kv_f32s(&k, "tokenizer.ggml.token_type", scores, U_N);
	} else {
		int32_t t2[U_N + 1];
		memcpy(t2, types, sizeof types);
		t2[U_N] = 1;
		kv_i32s(&k, "tokenizer.ggml.token_type", t2, n_types);
	}
	if (mu == M_BOS_RANGE)
		kv_u32(&k, "tokenizer.ggml.bos_token_id", U_N);
	if (mu == M_UNK_STRING)
		kv_str(&k, "tokenizer.ggml.unknown_token_id", "0");
	if (mu == M_ADD_BOS_U32)
		kv_u32(&k, "tokenizer.ggml.add_bos_token", 1);
	if (mu == M_NO_SPACE_PREFIX)
		kv_bool(&k, "tokenizer.ggml.add_space_prefix", false);
	return finish(&k);
}

static tok_vocab *load_img(struct img *m, gguf_file **f)
{
	lm_diag d = {{0}};
	tok_vocab *v = NULL;
	cr_assert_eq(gguf_open_mem(m->p, m->len, f, &d), 0, "%s", d.msg);
	cr_assert_eq(tok_load(*f, &v, &d), 0, "%s", d.msg);
	return v;
}

static void expect_ids(const tok_vocab *v, const char *text, bool bos, const int32_t *want,
		       size_t n_want)
{
	int32_t got[64];
	size_t n = 0;
	lm_diag d = {{0}};
	cr_assert_eq(tok_encode(v, text, strlen(text), bos, got, 64, &n, &d), 0, "%s", d.msg);
	bool same = n == n_want && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
	char buf[256] = "";
	for (size_t i = 0; i < n; i++)
		snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " %d", got[i]);
	cr_expect(same, "'%s' gave [%s ]", text, buf);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / 4

Test(tokenizer, spm_merges_by_score_then_leftmost)
{
	struct img m = spm_image(M_NONE);
	gguf_file *f;
	tok_vocab *v = load_img(&m, &f);
	/* "▁aba": ba (-0.1) merges first, then ▁a (-0.5); "▁aba" is no token. */
	expect_ids(v, "aba", false, IDS(U_SPA, U_BA));
	/* "▁abab": ba at 2, ▁a; the two "ab" pairs are stale by then; b is left over. */
	expect_ids(v, "abab", false, IDS(U_SPA, U_BA, U_B));
	/* Spaces become ▁; the dummy prefix only once. */
	expect_ids(v, "a b", false, IDS(U_SPA, U_SP, U_B));
	/* é is not a token: its bytes; \n neither: <0x0A>. */
	expect_ids(v, "\xc3\xa9\n", false, IDS(U_SP, U_C3, U_A9, U_NL));
	/* No byte token for 'z': the unknown token. */
	expect_ids(v, "z", false, IDS(U_SP, U_UNK));
	/* BOS on request; empty text has no dummy space. */
	expect_ids(v, "", true, IDS(U_BOS));
	expect_ids(v, "", false, NULL, 0);
	expect_ids(v, "ab", true, IDS(U_BOS, U_SPA, U_B));
	/* A user-defined token is matched in the text; the text after it gets a dummy space. */
	expect_ids(v, "a<me>b", false, IDS(U_SPA, U_ME, U_SP, U_B));
	/* Special-token text is not parsed. */
	expect_ids(v, "<s>", false, IDS(U_SP, U_UNK, U_UNK, U_UNK));

	size_t len;
	cr_expect_eq(memcmp(tok_piece(v, U_SPA, &len), " a", 2), 0);
	cr_expect_eq(len, 2);
	tok_piece(v, U_BOS, &len);
	cr_expect_eq(len, 0, "control tokens decode to nothing");
	tok_piece(v, U_UNK, &len);
	cr_expect_eq(len, 0);
	cr_expect_eq(*tok_piece(v, U_C3, &len), '\xc3');
	cr_expect_eq(len, 1);
	cr_expect_null(tok_piece(v, U_N, &len));
	cr_expect_null(tok_piece(v, -1, &len));
	cr_expect_eq(tok_attr(v, U_ME), TOK_ATTR_USER_DEFINED);
	cr_expect_str_eq(tok_text(v, U_SPA, NULL), "\xe2\x96\x81"
						   "a");

	/* Short output buffer: LM_ERANGE and the count needed. */
	int32_t two[2];
	size_t n;
	lm_diag d = {{0}};
	cr_expect_eq(tok_encode(v, "abab", 4, true, two, 2, &n, &d), LM_ERANGE);
	cr_expect_eq(n, 4);
	cr_expect_eq(two[0], U_BOS);
	cr_expect_eq(two[1], U_SPA);
	tok_free(v);
	gguf_close(f);
	free(m.p);

	m = spm_image(M_NO_SPACE_PREFIX);
	v = load_img(&m, &f);
	expect_ids(v, "ab", false, IDS(U_AB));
	/* Text that starts with a space: the first run before it is empty (fuzz_gguf found an
	 * empty copy into the not yet allocated buffer, undefined behaviour under UBSan). */
	expect_ids(v, " ab", false, IDS(U_SPA, U_B));
	expect_ids(v, " ", false, IDS(U_SP));
	tok_free(v);
	gguf_close(f);
	free(m.p);
}

/* A tiny byte-level BPE vocabulary: merge rank, not position, decides. */
Test(tokenizer, bpe_merges_by_rank)
{
	struct img k = {0};
	static const char *const toks[] = {"a",
					   "b",
					   "ab",
					   "\xc4\xa0" /* Ġ: space */,
					   ("\xc4\xa0"
					    "a"),
					   "<|endoftext|>"};
	static const char *const merges[] = {"a b", "\xc4\xa0 a"};
	kv_str(&k, "tokenizer.ggml.model", "gpt2");
	kv_str(&k, "tokenizer.ggml.pre", "gpt-2");
	kv_strs(&k, "tokenizer.ggml.tokens", toks, NULL, 6);
	kv_strs(&k, "tokenizer.ggml.merges", merges, NULL, 2);
	struct img m = finish(&k);
	gguf_file *f;
	tok_vocab *v = load_img(&m, &f);
	cr_expect_eq(tok_bos(v), -1, "the default BOS 11 is past this vocabulary");
	cr_expect_not(tok_add_bos(v));
	/* "Ġab": "a b" (rank 0) beats "Ġ a" (rank 1) though it is further right. */
	expect_ids(v, " ab", false, IDS(3, 2));
	/* Words split first: "ba" and " " are separate words; "b a" is no merge. */
	expect_ids(v, "ba ", false, IDS(1, 0, 3));
	/* A byte with no token is dropped, as llama.cpp drops it. */
	expect_ids(v, "ac", false, IDS(0));
	/* "<|endoftext|>" is a control token by name: no text, and it ends generation. */
	size_t len;
	tok_piece(v, 5, &len);
	cr_expect_eq(len, 0);
	cr_expect(tok_is_eog(v, 5));
	cr_expect_eq(tok_eot(v), 5);
	cr_expect_eq(memcmp(tok_piece(v, 4, &len), " a", 2), 0);
	cr_expect_eq(len, 2);
	tok_free(v);
	gguf_close(f);
	free(m.p);
}

Test(tokenizer, malformed_vocabularies_are_refused)
{
	static const struct {
		enum mutation mu;
		int rc;
		const char *needle;
	} cases[] = {
		{M_NO_MODEL, LM_EFORMAT, "tokenizer.ggml.model"},
		{M_MODEL_BERT, LM_EUNSUPPORTED, "'bert'"},
		{M_MODEL_U32, LM_EFORMAT, "tokenizer.ggml.model"},
		{M_NO_TOKENS, LM_EFORMAT, "tokenizer.ggml.tokens"},
		{M_TOKENS_STRING, LM_EFORMAT, "tokenizer.ggml.tokens"},
		{M_TOKENS_I32, LM_EFORMAT, "tokenizer.ggml.tokens"},
		{M_TOKENS_EMPTY, LM_EFORMAT, "tokenizer.ggml.tokens"},
		{M_SCORES_SHORT, LM_EFORMAT, "tokenizer.ggml.scores"},
		{M_SCORES_NAN, LM_EFORMAT, "tokenizer.ggml.scores"},
		{M_TYPES_LONG, LM_EFORMAT, "tokenizer.ggml.token_type"},
		{M_TYPES_F32, LM_EFORMAT, "tokenizer.ggml.token_type"},
		{M_BOS_RANGE, LM_EFORMAT, "tokenizer.ggml.bos_token_id"},
		{M_UNK_STRING, LM_EFORMAT, "tokenizer.ggml.unknown_token_id"},
		{M_DUPLICATE, LM_EFORMAT, "tokenizer.ggml.tokens"},
		{M_BAD_UTF8, LM_EFORMAT, "UTF-8"},
		{M_NUL_IN_TOKEN, LM_EFORMAT, "tokenizer.ggml.tokens"},
		{M_BYTE_NOT_HEX, LM_EFORMAT, "<0xNN>"},
		{M_ADD_BOS_U32, LM_EFORMAT, "tokenizer.ggml.add_bos_token"},
		{M_GPT2_NO_MERGES, LM_EFORMAT, "tokenizer.ggml.merges"},
		{M_GPT2_BAD_PRE, LM_EUNSUPPORTED, "tokenizer.ggml.pre"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct img m = spm_image(cases[i].mu);
		gguf_file *f = NULL;
		tok_vocab *v = (tok_vocab *)1;
		lm_diag d = {{0}};
		cr_assert_eq(gguf_open_mem(m.p, m.len, &f, &d), 0, "case %zu: %s", i, d.msg);
		int rc = tok_load(f, &v, &d);
		cr_expect_eq(rc, cases[i].rc, "case %zu: %s (%s)", i, lm_err_name(rc), d.msg);
		cr_expect_null(v, "case %zu", i);
		cr_expect_not_null(strstr(d.msg, cases[i].needle), "case %zu: '%s' lacks '%s'", i,
				   d.msg, cases[i].needle);
		gguf_close(f);
		free(m.p);
	}
}

/* Random byte flips in a vocabulary image: the reader or the tokenizer refuses it, or it loads
 * and encodes; nothing crashes (meaningful under ASan). */
Test(tokenizer, corrupted_vocabularies_never_crash, .timeout = 60)
{
	struct img base = spm_image(M_NONE);
	uint64_t s = 12345;
	for (int it = 0; it < 3000; it++) {
		uint8_t *p = malloc(base.len);
		memcpy(p, base.p, base.len);
		for (int k = 0; k < 1 + it % 4; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			p[(s >> 33) % base.len] ^= (uint8_t)(1u << ((s >> 20) & 7));
		}
		gguf_file *f = NULL;
		tok_vocab *v = NULL;
		lm_diag d = {{0}};
		if (gguf_open_mem(p, base.len, &f, &d) == 0 && tok_load(f, &v, &d) == 0) {
			int32_t ids[64];
			size_t n;
			tok_encode(v, "ab a\xc3\xa9 <me>", 11, tok_add_bos(v), ids, 64, &n, &d);
			tok_free(v);
		} else {
			cr_expect_neq(d.msg[0], '\0', "a refusal without a message");
		}
		gguf_close(f);
		free(p);
	}
	free(base.p);
}

/* ------------------------------------------------------------ the streaming decoder */

/* The length of the longest prefix of s that is whole, valid UTF-8. */
static size_t utf8_valid_prefix(const char *s, size_t len)
{
	size_t off = 0;
	while (off < len) {
		size_t at = off;
		uint32_t cp;
		if (!tok_utf8_decode((const uint8_t *)s, len, &off, &cp))
			return at;
		/* Strict: no overlong forms or surrogates either. */
		size_t n = off - at;
		if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp < 0xe000))
			return at;
	}
	return len;
}

static size_t stream_all(const tok_vocab *v, const int32_t *ids, size_t n, char *out,
			 bool check_prefixes)
{
	struct tok_stream s;
	tok_stream_init(&s);
	size_t total = 0, cap = tok_stream_cap(v);
	char *buf = malloc(cap);
	for (size_t i = 0; i < n; i++) {
		size_t k;
		cr_assert_eq(tok_stream_push(v, &s, ids[i], buf, cap, &k), 0);
		memcpy(out + total, buf, k);
		total += k;
		/* Everything emitted so far is whole UTF-8: no character is cut. */
		if (check_prefixes)
			cr_assert_eq(utf8_valid_prefix(out, total), total, "after id %zu", i);
	}
	total += tok_stream_flush(&s, out + total, 3);
	free(buf);
	return total;
}

Test(tokenizer, stream_holds_back_partial_characters)
{
	gguf_file *f;
	tok_vocab *v = load_path(shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), &f);
	/* Multi-byte characters as byte tokens <0xNN>, one byte at a time (how SPM encodes
	 * characters it has no token for), between ordinary tokens. */
	const char *text = "a\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80 z\xf0\x90\x8d\x88";
	int32_t ids[64];
	size_t n = 0;
	for (const char *p = text; *p; p++) {
		char hex[8];
		snprintf(hex, sizeof hex, "<0x%02X>", (uint8_t)*p);
		ids[n] = tok_find_text(v, hex, 6);
		cr_assert_geq(ids[n], 0);
		n++;
	}
	ids[n++] = tok_eos(v); /* control: no text */
	char out[256];
	size_t len = stream_all(v, ids, n, out, true);
	cr_expect_eq(len, strlen(text));
	cr_expect_eq(memcmp(out, text, len), 0);

	/* Each partial push emits nothing until the character completes. */
	struct tok_stream s;
	tok_stream_init(&s);
	size_t cap = tok_stream_cap(v), k;
	char *buf = malloc(cap);
	int32_t e2 = tok_find_text(v, "<0xE2>", 6), x82 = tok_find_text(v, "<0x82>", 6),
		xac = tok_find_text(v, "<0xAC>", 6);
	cr_expect_eq(tok_stream_push(v, &s, e2, buf, cap, &k), 0);
	cr_expect_eq(k, 0);
	cr_expect_eq(tok_stream_push(v, &s, x82, buf, cap, &k), 0);
	cr_expect_eq(k, 0);
	cr_expect_eq(tok_stream_push(v, &s, xac, buf, cap, &k), 0);
	cr_expect_eq(k, 3);
	cr_expect_eq(memcmp(buf, "\xe2\x82\xac", 3), 0);
	/* Out of range ids and short buffers are refused without consuming anything. */
	cr_expect_eq(tok_stream_push(v, &s, tok_n_vocab(v), buf, cap, &k), LM_ERANGE);
	cr_expect_eq(tok_stream_push(v, &s, e2, buf, cap - 1, &k), LM_ERANGE);
	free(buf);
	tok_free(v);
	gguf_close(f);
}

Test(tokenizer, stream_replaces_invalid_sequences)
{
	gguf_file *f;
	tok_vocab *v = load_path(shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), &f);
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"\xe2(", "\xef\xbf\xbd("},               /* truncated, then ASCII */
		{"\x80x", "\xef\xbf\xbdx"},               /* stray continuation byte */
		{"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong: two bad bytes */
		{"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
		{"\xf0\x9f\x98", "\xef\xbf\xbd"},                     /* cut at the end: flush */
		{"\xe2\x82\xe2\x82\xac", "\xef\xbf\xbd\xe2\x82\xac"}, /* restart mid-way */
		{"\xff", "\xef\xbf\xbd"},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int32_t ids[16];
		size_t n = 0;
		for (const char *p = cases[c].in; *p; p++) {
			char hex[8];
			snprintf(hex, sizeof hex, "<0x%02X>", (uint8_t)*p);
			ids[n++] = tok_find_text(v, hex, 6);
		}
		char out[64];
		size_t len = stream_all(v, ids, n, out, true);
		cr_expect(len == strlen(cases[c].want) && memcmp(out, cases[c].want, len) == 0,
			  "case %zu", c);
	}
	tok_free(v);
	gguf_close(f);
}

/* Streaming the ids of every vector text gives the text back (gpt-2: bytes split across
 * tokens for emoji and CJK). */
Test(tokenizer, stream_round_trips_the_vectors)
{
	static const char *const vocabs[] = {"tokenizer/ggml-vocab-gpt-2.gguf",
					     "tokenizer/ggml-vocab-llama-spm.gguf"};
	for (size_t k = 0; k < 2; k++) {
		gguf_file *f;
		tok_vocab *v = load_path(shared_path(vocabs[k]), &f);
		size_t inp_len;
		char *inp = slurp(shared_path("tokenizer/ggml-vocab-gpt-2.gguf.inp"), &inp_len);
		for (char *t = inp, *end; (end = strstr(t, "\n__ggml_vocab_test__\n")) != NULL;
		     t = end + 21) {
			size_t len = (size_t)(end - t), n;
			int32_t *ids;
			lm_diag d = {{0}};
			cr_assert_eq(tok_encode_alloc(v, t, len, false, &ids, &n, &d), 0, "%s",
				     d.msg);
			char *out = malloc(3 * len + 16);
			size_t got = stream_all(v, ids, n, out, true);
			const char *o = out;
			if (tok_model(v) == TOK_MODEL_SPM && got > 0)
				o++, got--; /* the dummy space */
			cr_expect(got == len && memcmp(o, t, len) == 0, "%s: '%.*s'", vocabs[k],
				  (int)len, t);
			free(out);
			free(ids);
		}
		free(inp);
		tok_free(v);
		gguf_close(f);
	}
}

/* ------------------------------------------------------------ pieces of the pipeline */

/* Splits text with pre-tokenizer pre and expects the NULL-terminated words, in order. */
static void expect_split(enum tok_pre pre, size_t c, const char *t, const char *const *words)
{
	struct tok_u32v cps = {0}, ends = {0}, scratch = {0};
	size_t len = strlen(t);
	for (size_t off = 0; off < len;) {
		uint32_t cp;
		cr_assert(tok_utf8_decode((const uint8_t *)t, len, &off, &cp));
		tok_u32v_push(&cps, cp);
	}
	cr_assert_eq(tok_pretok_split(pre, cps.p, cps.n, &ends, &scratch), 0);
	size_t nw = 0;
	while (words[nw] != NULL)
		nw++;
	cr_expect_eq(ends.n, nw, "case %zu: %zu words", c, ends.n);
	/* Compare word by word in code points. */
	size_t b = 0, off = 0;
	for (size_t w = 0; w < nw && w < ends.n; w++) {
		size_t wl = strlen(words[w]), ncp = 0;
		for (size_t o = 0; o < wl;) {
			uint32_t cp;
			tok_utf8_decode((const uint8_t *)words[w], wl, &o, &cp);
			ncp++;
		}
		cr_expect_eq(ends.p[w] - b, ncp, "case %zu word %zu", c, w);
		cr_expect_eq(memcmp(t + off, words[w], wl), 0, "case %zu word %zu", c, w);
		b = ends.p[w];
		off += wl;
	}
	tok_u32v_fini(&cps);
	tok_u32v_fini(&ends);
	tok_u32v_fini(&scratch);
}

Test(tokenizer, gpt2_pretokenizer_splits_like_the_regex)
{
	/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, by hand. */
	static const struct {
		const char *text;
		const char *words[12];
	} cases[] = {
		{"Hello world's  test 123", {"Hello", " world", "'s", " ", " test", " 123"}},
		{"I'll re-do it!!\n\n", {"I", "'ll", " re", "-", "do", " it", "!!", "\n\n"}},
		{"x  \ty", {"x", "  ", "\t", "y"}},
		{"caf\xc3\xa9 \xd9\xa3\xd9\xa4", {"caf\xc3\xa9", " \xd9\xa3\xd9\xa4"}},
		{" \xe4\xb8\x96\xe7\x95\x8c\xe2\x80\xa6",
		 {" \xe4\xb8\x96\xe7\x95\x8c", "\xe2\x80\xa6"}},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		expect_split(TOK_PRE_GPT2, c, cases[c].text, cases[c].words);
}

Test(tokenizer, gpt4o_pretokenizer_splits_like_the_regex)
{
	/* llama.cpp's form of the o200k regex (tok_pretok.c), by hand: an "upper" is a letter
	 * but a-z, a "lower" a letter but A-Z, so a non-ASCII letter is both. The oracle test
	 * (test_oracle_tokenize.sh) holds whole vocabularies to llama.cpp itself. */
	static const struct {
		const char *text;
		const char *words[12];
	} cases[] = {
		/* uppers then lowers; a run of uppers alone; contractions in either case */
		{"XMLHttpRequest iPhone", {"XMLHttp", "Request", " i", "Phone"}},
		{"DON'T we'll HELLO's", {"DON'T", " we'll", " HELLO's"}},
		/* É and ß are both upper and lower */
		{"ÉcoleNormale straßeSTRASSE", {"École", "Normale", " straße", "STRASSE"}},
		/* uppers that end in a non-ASCII letter: it is the one lower the run needs */
		{"ABÉCD!", {"ABÉ", "CD", "!"}},
		/* digits in threes; punctuation takes slashes and newlines after it */
		{"1234567 a/b//c!!/\n\nx",
		 {"123", "456", "7", " a", "/b", "//", "c", "!!/\n\n", "x"}},
		/* white space: the last one goes with the next word (a tab too); newlines end a
		 * run */
		{"x  \ty \n\n z   ", {"x", "  ", "\ty", " \n\n", " z", "   "}},
		/* a leading non-letter joins the word; \r and \n do not */
		{"(Hello)\nWorld", {"(Hello", ")\n", "World"}},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		expect_split(TOK_PRE_GPT4O, c, cases[c].text, cases[c].words);
}

Test(tokenizer, unicode_categories_and_gpt2_bytes)
{
	cr_expect_eq(tok_ucat('A'), TOK_UCAT_LETTER);
	cr_expect_eq(tok_ucat('7'), TOK_UCAT_NUMBER);
	cr_expect_eq(tok_ucat('$'), TOK_UCAT_SYMBOL);
	cr_expect_eq(tok_ucat('_'), TOK_UCAT_PUNCT);
	cr_expect_eq(tok_ucat(' '), TOK_UCAT_SEPARATOR);
	cr_expect_eq(tok_ucat('\n'), TOK_UCAT_CONTROL);
	cr_expect_eq(tok_ucat(0xe9), TOK_UCAT_LETTER);    /* é */
	cr_expect_eq(tok_ucat(0x663), TOK_UCAT_NUMBER);   /* Arabic-Indic three */
	cr_expect_eq(tok_ucat(0x2167), TOK_UCAT_NUMBER);  /* Roman numeral eight (Nl) */
	cr_expect_eq(tok_ucat(0x301), TOK_UCAT_MARK);     /* combining acute */
	cr_expect_eq(tok_ucat(0x1f600), TOK_UCAT_SYMBOL); /* 😀 */
	cr_expect_eq(tok_ucat(0xe000), TOK_UCAT_CONTROL); /* private use */
	cr_expect_eq(tok_ucat(0x378), TOK_UCAT_UNDEF);    /* unassigned */
	cr_expect_eq(tok_ucat(0x2ebf0), TOK_UCAT_LETTER); /* CJK Extension I: Unicode 15.1 */
	cr_expect_eq(tok_ucat(0x10d40), TOK_UCAT_UNDEF);  /* Garay: Unicode 16, not in 15.1 */
	cr_expect_eq(tok_ucat(0x10ffff), TOK_UCAT_UNDEF); /* noncharacter */
	cr_expect_eq(tok_ucat(0x110000), TOK_UCAT_UNDEF);
	cr_expect(tok_is_space(0x3000) && tok_is_space(0x85) && tok_is_space('\v'));
	cr_expect(!tok_is_space(0x200b) && !tok_is_space(0x1c));

	cr_expect_eq(tok_gpt2_byte_to_cp(' '), 0x120);  /* Ġ */
	cr_expect_eq(tok_gpt2_byte_to_cp('\n'), 0x10a); /* Ċ */
	cr_expect_eq(tok_gpt2_byte_to_cp('a'), 'a');
	cr_expect_eq(tok_gpt2_byte_to_cp(0x7f), 0x121);
	cr_expect_eq(tok_gpt2_byte_to_cp(0xad), 0x143);
	for (int b = 0; b < 256; b++)
		cr_expect_eq(tok_gpt2_cp_to_byte(tok_gpt2_byte_to_cp((uint8_t)b)), b);
	cr_expect_eq(tok_gpt2_cp_to_byte(0x20), -1);
	cr_expect_eq(tok_gpt2_cp_to_byte(0x144), -1);
}

/* ------------------------------------------------------------ cost */

/* 100 KB inputs, including one-word and all-space texts that make single huge merge runs, stay
 * far from quadratic. */
Test(tokenizer, long_inputs_are_not_quadratic, .timeout = 60)
{
	static const char *const vocabs[] = {"tokenizer/ggml-vocab-llama-spm.gguf",
					     "tokenizer/ggml-vocab-gpt-2.gguf"};
	const size_t len = 100 * 1024;
	char *texts[3];
	for (int k = 0; k < 3; k++)
		texts[k] = malloc(len);
	for (size_t i = 0; i < len; i++) {
		texts[0][i] = "The quick brown fox jumps over the lazy dog. \n"[i % 46];
		texts[1][i] = 'a';
		texts[2][i] = ' ';
	}
	for (size_t k = 0; k < 2; k++) {
		gguf_file *f;
		tok_vocab *v = load_path(shared_path(vocabs[k]), &f);
		for (int t = 0; t < 3; t++) {
			int32_t *ids;
			size_t n;
			lm_diag d = {{0}};
			double t0 = lm_now_s();
			cr_assert_eq(tok_encode_alloc(v, texts[t], len, false, &ids, &n, &d), 0);
			double dt = lm_now_s() - t0;
			cr_log_info("%s text %d: %zu ids in %.3f s", vocabs[k], t, n, dt);
			cr_expect_lt(dt, 5.0, "%s text %d took %.2f s", vocabs[k], t, dt);
			cr_expect_gt(n, 0);
			free(ids);
		}
		tok_free(v);
		gguf_close(f);
	}
	for (int k = 0; k < 3; k++)
		free(texts[k]);
}

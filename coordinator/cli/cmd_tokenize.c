/* cmd_tokenize.c — `layermesh tokenize`: the token ids of a text, as the coordinator would send
 * them to the first worker; of a file of texts (one line of ids per text, so that a comparison
 * with llama.cpp costs one process per vocabulary, not one per text); or the vocabulary's
 * special ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"
#include "common/format/gguf.h"
#include "common/tok/tokenizer.h"
#include "coordinator/cli/cmds.h"

/* What separates the texts of a --file, as in llama.cpp's test vectors
 * (models/ggml-vocab-*.gguf.inp). As its tests/test-tokenizer-0.cpp reads them, text after the
 * last separator is one more text, so a separator after the last text is optional. */
#define TOKENIZE_SEP "\n__ggml_vocab_test__\n"

/* A --file bigger than this is refused (the tokenizer takes at most 256 MiB per text). */
#define TOKENIZE_MAX_FILE (1ull << 30)

static void tokenize_usage(FILE *out)
{
	fprintf(out,
		"usage: layermesh tokenize --model PATH [--no-bos] [--special] [--] TEXT\n"
		"       layermesh tokenize --model PATH [--no-bos] [--special] --file FILE\n"
		"       layermesh tokenize --model PATH --vocab-info\n"
		"\n"
		"Prints the token ids of TEXT, space-separated, on one line, as llama.cpp "
		"tokenizes\n"
		"it (llama_tokenize with add_special unless --no-bos, and parse_special with "
		"--special).\n"
		"\n"
		"  --model PATH    a GGUF file with a tokenizer.ggml.* vocabulary (\"llama\", "
		"\"gpt2\" or\n"
		"                  \"gemma4\"); a vocabulary-only file without tensors will do\n"
		"  --no-bos        do not start with the BOS token; by default BOS is added when "
		"the\n"
		"                  vocabulary asks for it (tokenizer.ggml.add_bos_token, which "
		"defaults to\n"
		"                  true for llama, llama-bpe and gemma4 vocabularies and false for "
		"other gpt2 ones)\n"
		"  --special       special-token text becomes the token's id (\"<|im_start|>\", "
		"\"<s>\", ...);\n"
		"                  without it such text is tokenized as plain text\n"
		"  --file FILE     tokenize every text of FILE and print one line of ids per text "
		"(an\n"
		"                  empty line for an empty text). FILE holds texts as llama.cpp's "
		"test\n"
		"                  vectors do: any bytes, texts separated by the line "
		"\"__ggml_vocab_test__\"\n"
		"                  between newlines (\"\\n__ggml_vocab_test__\\n\"), which may "
		"also end the file\n"
		"  --vocab-info    print the vocabulary's size, BOS/EOS/EOT ids, whether it adds "
		"BOS, "
		"its\n"
		"                  end-of-generation ids (eog) and the ids --special matches "
		"(special)\n"
		"  -h, --help      this text\n");
}

static int tokenize_print(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	return putchar('\n') == EOF ? LM_EIO : 0;
}

/* Reads all of path into b. */
static int tokenize_slurp(const char *path, struct lm_buf *b, lm_diag *d)
{
	FILE *fp = fopen(path, "rb");
	if (fp == NULL)
		return lm_fail(d, lm_err_from_errno(errno), "%s: cannot open: %s", path,
			       strerror(errno));
	int rc = 0;
	for (;;) {
		if ((rc = lm_buf_reserve(b, 1 << 16)) != 0) {
			rc = lm_fail(d, rc, "%s: out of memory reading it", path);
			break;
		}
		size_t got = fread(b->p + b->len, 1, b->cap - b->len - 1, fp);
		b->len += got;
		b->p[b->len] = '\0';
		if (b->len > TOKENIZE_MAX_FILE) {
			rc = lm_fail(d, LM_ERANGE, "%s: more than %llu bytes", path,
				     (unsigned long long)TOKENIZE_MAX_FILE);
			break;
		}
		if (got == 0) {
			if (ferror(fp))
				rc = lm_fail(d, LM_EIO, "%s: read failed", path);
			break;
		}
	}
	fclose(fp);
	return rc;
}

/* Tokenizes each text of the --file in turn. */
static int tokenize_file(const tok_vocab *v, const char *path, unsigned flags, lm_diag *d)
{
	struct lm_buf b = {0};
	int rc = tokenize_slurp(path, &b, d);
	const size_t sep_len = sizeof TOKENIZE_SEP - 1;
	size_t off = 0;
	while (rc == 0 && off < b.len) {
		const char *end = memmem(b.p + off, b.len - off, TOKENIZE_SEP, sep_len);
		size_t len = end != NULL ? (size_t)(end - (b.p + off)) : b.len - off;
		int32_t *ids = NULL;
		size_t n = 0;
		rc = tok_encode_alloc_ex(v, b.p + off, len, flags, &ids, &n, d);
		if (rc == 0)
			rc = tokenize_print(ids, n);
		free(ids);
		off += len + (end != NULL ? sep_len : 0);
	}
	lm_buf_fini(&b);
	return rc;
}

static void tokenize_vocab_info(const tok_vocab *v)
{
	printf("n_vocab %d\nbos %d\neos %d\neot %d\nadd_bos %d\neog", tok_n_vocab(v), tok_bos(v),
	       tok_eos(v), tok_eot(v), tok_add_bos(v) ? 1 : 0);
	size_t n;
	const int32_t *eog = tok_eog_ids(v, &n);
	for (size_t i = 0; i < n; i++)
		printf(" %d", eog[i]);
	printf("\nspecial");
	const unsigned special = TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN;
	for (int32_t id = 0; id < tok_n_vocab(v); id++)
		if (tok_attr(v, id) & special)
			printf(" %d", id);
	printf("\n");
}

int cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *text = NULL, *file = NULL;
	bool no_bos = false, special = false, info = false, opts = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (opts && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
			tokenize_usage(stdout);
			return 0;
		} else if (opts && strcmp(a, "--") == 0) {
			opts = false;
		} else if (opts && strcmp(a, "--no-bos") == 0) {
			no_bos = true;
		} else if (opts && strcmp(a, "--special") == 0) {
			special = true;
		} else if (opts && strcmp(a, "--vocab-info") == 0) {
			info = true;
		} else if (opts && (strcmp(a, "--model") == 0 || strcmp(a, "--file") == 0)) {
			if (++i == argc) {
				fprintf(stderr, "layermesh tokenize: %s needs a path\n", a);
				return 2;
			}
			*(a[2] == 'm' ? &model : &file) = argv[i];
		} else if (opts && strncmp(a, "--model=", 8) == 0) {
			model = a + 8;
		} else if (opts && strncmp(a, "--file=", 7) == 0) {
			file = a + 7;
		} else if (opts && a[0] == '-' && a[1] != '\0') {
			fprintf(stderr, "layermesh tokenize: unknown option '%s'\n", a);
			tokenize_usage(stderr);
			return 2;
		} else if (text == NULL) {
			text = a;
		} else {
			fprintf(stderr, "layermesh tokenize: one TEXT only (quote it)\n");
			return 2;
		}
	}
	if (model == NULL || (text != NULL) + (file != NULL) + info != 1) {
		fprintf(stderr, "layermesh tokenize: %s\n",
			model == NULL ? "--model is required"
				      : "give exactly one of TEXT, --file and --vocab-info");
		tokenize_usage(stderr);
		return 2;
	}

	lm_diag d = {{0}};
	gguf_file *f = NULL;
	tok_vocab *v = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	int rc, status = 1;
	if ((rc = gguf_open(model, &f, &d)) != 0)
		goto out;
	if ((rc = tok_load(f, &v, &d)) != 0)
		goto out;
	unsigned flags = (tok_add_bos(v) && !no_bos ? TOK_ENC_ADD_BOS : 0) |
			 (special ? TOK_ENC_PARSE_SPECIAL : 0);
	if (info) {
		tokenize_vocab_info(v);
	} else if (file != NULL) {
		if ((rc = tokenize_file(v, file, flags, &d)) != 0)
			goto out;
	} else {
		if ((rc = tok_encode_alloc_ex(v, text, strlen(text), flags, &ids, &n, &d)) != 0 ||
		    (rc = tokenize_print(ids, n)) != 0)
			goto out;
	}
	status = fflush(stdout) == 0 ? 0 : 1;
out:
	if (rc != 0)
		fprintf(stderr, "layermesh tokenize: %s\n", lm_diag_str(&d, rc));
	free(ids);
	tok_free(v);
	gguf_close(f);
	return status;
}

/* cmd_tokenize.c — `layermesh tokenize`: the token ids of a text, as the coordinator would send
 * them to the first worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"
#include "common/tok/tokenizer.h"
#include "coordinator/cmds.h"

static void tokenize_usage(FILE *out)
{
	fprintf(out, "usage: layermesh tokenize --model PATH [--no-bos] [--] TEXT\n"
		     "\n"
		     "Prints the token ids of TEXT, space-separated, on one line, as llama.cpp "
		     "tokenizes\n"
		     "it (special-token text in TEXT is not parsed).\n"
		     "\n"
		     "  --model PATH  a GGUF file with a tokenizer.ggml.* vocabulary (\"llama\" or "
		     "\"gpt2\");\n"
		     "                a vocabulary-only file without tensors will do\n"
		     "  --no-bos      do not start with the BOS token; by default BOS is added "
		     "when the\n"
		     "                vocabulary asks for it (tokenizer.ggml.add_bos_token, which "
		     "defaults to\n"
		     "                true for llama vocabularies and false for gpt2 ones)\n"
		     "  -h, --help    this text\n");
}

int cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *text = NULL;
	bool no_bos = false, opts = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (opts && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
			tokenize_usage(stdout);
			return 0;
		} else if (opts && strcmp(a, "--") == 0) {
			opts = false;
		} else if (opts && strcmp(a, "--no-bos") == 0) {
			no_bos = true;
		} else if (opts && strcmp(a, "--model") == 0) {
			if (++i == argc) {
				fprintf(stderr, "layermesh tokenize: --model needs a path\n");
				return 2;
			}
			model = argv[i];
		} else if (opts && strncmp(a, "--model=", 8) == 0) {
			model = a + 8;
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
	if (model == NULL || text == NULL) {
		fprintf(stderr, "layermesh tokenize: %s is required\n",
			model == NULL ? "--model" : "TEXT");
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
	rc = tok_encode_alloc(v, text, strlen(text), tok_add_bos(v) && !no_bos, &ids, &n, &d);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	printf("\n");
	status = fflush(stdout) == 0 ? 0 : 1;
out:
	if (rc != 0)
		fprintf(stderr, "layermesh tokenize: %s\n", lm_diag_str(&d, rc));
	free(ids);
	tok_free(v);
	gguf_close(f);
	return status;
}

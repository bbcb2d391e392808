/* gen_gguf_corpus.c — the seed corpus of fuzz_gguf: the GGUF images of
 * tests/support/gguf_samples.h, one file each, named after the sample.
 *
 *     gen_gguf_corpus DIR          writes DIR/<sample> for every sample
 *     gen_gguf_corpus --check DIR  checks that DIR/<sample> holds exactly those bytes, that the
 *                                  reader accepts the valid samples and refuses the damaged ones
 *                                  with a message (meson test runs this on the committed corpus)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/corpus_file.h"
#include "tests/support/gguf_samples.h"

#define STALE                                                                        \
	"the samples or the GGUF writer changed, and the corpus needs regenerating " \
	"(gen_gguf_corpus tests/fuzz/corpus/gguf)"

/* The reader accepts valid samples and refuses damaged ones with a message. */
static int check_verdict(int k, const uint8_t *p, size_t n)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	int rc = gguf_open_mem(p, n, &f, &d);
	gguf_close(f);
	if (gs_valid(k) && rc != 0) {
		fprintf(stderr, "gen_gguf_corpus: sample %s is refused: %s\n", gs_names[k], d.msg);
		return 1;
	}
	if (!gs_valid(k) && (rc == 0 || d.msg[0] == '\0')) {
		fprintf(stderr, "gen_gguf_corpus: damaged sample %s is %s\n", gs_names[k],
			rc == 0 ? "accepted" : "refused without a message");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	bool check = argc == 3 && strcmp(argv[1], "--check") == 0;
	if (argc != 2 && !check) {
		fprintf(stderr, "usage: gen_gguf_corpus [--check] DIR\n");
		return 2;
	}
	const char *dir = argv[argc - 1];
	int failed = 0;
	size_t total = 0;
	for (int k = 0; k < GS_COUNT; k++) {
		char path[4096];
		lm_diag d = {{0}};
		uint8_t *img = NULL;
		size_t len = 0;
		if (gs_make(k, &img, &len, &d) != 0) {
			fprintf(stderr, "gen_gguf_corpus: sample %s: %s\n", gs_names[k], d.msg);
			failed = 1;
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dir, gs_names[k]);
		failed |= check_verdict(k, img, len);
		failed |= corpus_file("gen_gguf_corpus", check, path, img, len, STALE);
		total += len;
		free(img);
	}
	if (!failed)
		printf("%s %d samples (%zu bytes) in %s\n", check ? "checked" : "wrote", GS_COUNT,
		       total, dir);
	return failed;
}

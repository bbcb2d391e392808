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

#include "tests/support/gguf_samples.h"

static int write_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "gen_gguf_corpus: cannot write %s\n", path);
		return 1;
	}
	return 0;
}

/* 0 when the file holds exactly p[0..n). */
static int same_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "gen_gguf_corpus: %s is missing\n", path);
		return 1;
	}
	uint8_t *q = malloc(n + 1);
	size_t got = q != NULL ? fread(q, 1, n + 1, f) : 0;
	fclose(f);
	int differs = q == NULL || got != n || memcmp(p, q, n) != 0;
	free(q);
	if (differs)
		fprintf(stderr,
			"gen_gguf_corpus: %s differs from the generator's output: the samples or "
			"the GGUF writer changed, and the corpus needs regenerating "
			"(gen_gguf_corpus tests/fuzz/corpus/gguf)\n",
			path);
	return differs;
}

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
		failed |= check ? same_file(path, img, len) : write_file(path, img, len);
		total += len;
		free(img);
	}
	if (!failed)
		printf("%s %d samples (%zu bytes) in %s\n", check ? "checked" : "wrote", GS_COUNT,
		       total, dir);
	return failed;
}

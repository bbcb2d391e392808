/* corpus_file.h — what the seed-corpus generators (tests/fuzz/gen_<name>_corpus.c) share: write
 * one sample's bytes to its file, or check that the committed file holds exactly those bytes.
 */
#ifndef LM_TESTS_CORPUS_FILE_H
#define LM_TESTS_CORPUS_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes p[0..n) to path, or with `check` compares the file with it. 0 on success; otherwise 1
 * after a message on stderr that starts with prog and, for a file that differs, ends with
 * `stale` (why the corpus is out of date and how to regenerate it). */
static inline int corpus_file(const char *prog, bool check, const char *path, const uint8_t *p,
			      size_t n, const char *stale)
{
	FILE *f = fopen(path, check ? "rb" : "wb");
	if (!check) {
		if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
			fprintf(stderr, "%s: cannot write %s\n", prog, path);
			return 1;
		}
		return 0;
	}
	if (f == NULL) {
		fprintf(stderr, "%s: %s is missing\n", prog, path);
		return 1;
	}
	uint8_t *q = malloc(n + 1);
	size_t got = q != NULL ? fread(q, 1, n + 1, f) : 0;
	fclose(f);
	int differs = q == NULL || got != n || memcmp(p, q, n) != 0;
	free(q);
	if (differs)
		fprintf(stderr, "%s: %s differs from the generator's output: %s\n", prog, path,
			stale);
	return differs;
}

#endif

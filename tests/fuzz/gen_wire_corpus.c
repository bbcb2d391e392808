/* gen_wire_corpus.c — the seed corpus of fuzz_wire: one valid message of every wire type and
 * form (tests/support/wire_samples.h), one file each, named after the sample.
 *
 *     gen_wire_corpus DIR          writes DIR/<sample> for every sample
 *     gen_wire_corpus --check DIR  checks that DIR/<sample> holds exactly those bytes and that
 *                                  each decodes (meson test runs this on the committed corpus)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "tests/support/wire_samples.h"

static int write_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "gen_wire_corpus: cannot write %s\n", path);
		return 1;
	}
	return 0;
}

/* 0 when the file holds exactly p[0..n). */
static int same_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "gen_wire_corpus: %s is missing\n", path);
		return 1;
	}
	uint8_t *q = malloc(n + 1);
	size_t got = q != NULL ? fread(q, 1, n + 1, f) : 0;
	fclose(f);
	int differs = q == NULL || got != n || memcmp(p, q, n) != 0;
	free(q);
	if (differs)
		fprintf(stderr,
			"gen_wire_corpus: %s differs from the encoder's output: the encoding "
			"changed (bump WIRE_VERSION if it is a protocol change) and the corpus "
			"needs regenerating\n",
			path);
	return differs;
}

int main(int argc, char **argv)
{
	bool check = argc == 3 && strcmp(argv[1], "--check") == 0;
	if (argc != 2 && !check) {
		fprintf(stderr, "usage: gen_wire_corpus [--check] DIR\n");
		return 2;
	}
	const char *dir = argv[argc - 1];
	struct wire_buf b = {0};
	struct wire_scratch s;
	int failed = 0;
	if (wire_scratch_init(&s, WS_SCRATCH) != 0)
		return 1;
	for (int k = 0; k < WS_COUNT; k++) {
		char path[4096];
		lm_diag d = {{0}};
		wire_buf_reset(&b);
		if (ws_make(k, &b) != 0 || ws_decode(k, b.data, b.len, &s, &d) != 0) {
			fprintf(stderr, "gen_wire_corpus: sample %s: %s\n", ws_names[k], d.msg);
			failed = 1;
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dir, ws_names[k]);
		failed |= check ? same_file(path, b.data, b.len) : write_file(path, b.data, b.len);
	}
	wire_buf_fini(&b);
	wire_scratch_fini(&s);
	if (!failed)
		printf("%s %d samples in %s\n", check ? "checked" : "wrote", WS_COUNT, dir);
	return failed;
}

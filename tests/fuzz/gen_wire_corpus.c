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

#include "common/wire/wire.h"
#include "tests/support/corpus_file.h"
#include "tests/support/wire_samples.h"

#define STALE                                                                                 \
	"the encoding changed (bump WIRE_VERSION if it is a protocol change) and the corpus " \
	"needs regenerating"

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
	if (wire_scratch_init_rows(&s, WS_SCRATCH, WS_SCRATCH_ROWS) != 0)
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
		failed |= corpus_file("gen_wire_corpus", check, path, b.data, b.len, STALE);
	}
	wire_buf_fini(&b);
	wire_scratch_fini(&s);
	if (!failed)
		printf("%s %d samples in %s\n", check ? "checked" : "wrote", WS_COUNT, dir);
	return failed;
}

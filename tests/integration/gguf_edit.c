/* gguf_edit — copies a GGUF with one f32 tensor changed, for the tests of bad weights:
 *
 *   gguf_edit IN OUT TENSOR nan       element 0 of TENSOR becomes NaN
 *   gguf_edit IN OUT TENSOR inf       element 0 becomes +inf
 *   gguf_edit IN OUT TENSOR perturb   every other element negated, the rest scaled by 1.5:
 *                                     other weights in the same layout and metadata (so the
 *                                     same fingerprint)
 *
 * OUT is written whole and renamed into place, as a deploy would replace a file. Exit status
 * 1 with the reason on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"

static int edit_fail(const char *what)
{
	fprintf(stderr, "gguf_edit: %s\n", what);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 5)
		return edit_fail("usage: gguf_edit IN OUT TENSOR nan|inf|perturb");
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	if (gguf_open(argv[1], &f, &d) != 0)
		return edit_fail(d.msg);
	const struct gguf_tensor *t = gguf_find_tensor(f, argv[3]);
	if (t == NULL || t->type != LM_F32 || t->size < 4) {
		gguf_close(f);
		return edit_fail("no such f32 tensor");
	}
	uint64_t at = gguf_data_offset(f) + t->offset, n = t->size / 4;
	gguf_close(f);

	FILE *in = fopen(argv[1], "rb");
	if (in == NULL || fseek(in, 0, SEEK_END) != 0)
		return edit_fail("cannot read IN");
	long size = ftell(in);
	rewind(in);
	unsigned char *buf = malloc((size_t)size);
	if (buf == NULL || fread(buf, 1, (size_t)size, in) != (size_t)size)
		return edit_fail("cannot read IN");
	fclose(in);
	float *w = (float *)(void *)(buf + at); /* GGUF aligns tensor data to 32 bytes */
	if (strcmp(argv[4], "nan") == 0)
		w[0] = NAN;
	else if (strcmp(argv[4], "inf") == 0)
		w[0] = INFINITY;
	else if (strcmp(argv[4], "perturb") == 0)
		for (uint64_t i = 0; i < n; i++)
			w[i] *= i % 2 ? -1.0f : 1.5f;
	else
		return edit_fail("the edit is nan, inf or perturb");

	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
	FILE *out = fopen(tmp, "wb");
	if (out == NULL || fwrite(buf, 1, (size_t)size, out) != (size_t)size || fclose(out) != 0)
		return edit_fail("cannot write OUT");
	free(buf);
	if (rename(tmp, argv[2]) != 0)
		return edit_fail("cannot rename OUT into place");
	return 0;
}

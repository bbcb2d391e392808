/* cmd_quantize.c — `layermesh quantize`: a copy of a GGUF with its matrices in another type.
 *
 * Every metadata key is copied as it is; every tensor too, except the float matrices (2-D
 * "*.weight" tensors of f32, f16 or bf16 whose rows the type's blocks tile), which are converted
 * row by row with GGUF's reference quantizers (common/format/quant.c), so llama.cpp reads the
 * copy like one it quantized itself without an importance matrix. A quantized copy of a model
 * is a draft model for it (same vocabulary, same shape, cheaper): speculative decoding's bench
 * drafts stories260K with its own q8_0 copy.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"
#include "common/format/gguf_write.h"
#include "common/format/quant.h"
#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"

static const char quantize_usage[] =
	"usage: layermesh quantize --in IN.gguf --out OUT.gguf --type T\n"
	"\n"
	"Writes a copy of IN with its float matrices (2-D *.weight tensors of f32, f16 or\n"
	"bf16 whose rows T's blocks tile) in type T: f32, f16, bf16, q8_0, q4_0, q4_K or\n"
	"q6_K, quantized as GGUF's reference quantizers do. Every other tensor and every\n"
	"metadata key is copied unchanged. OUT is replaced atomically.\n";

/* Whether tensor t becomes type `to`. */
static bool quantize_converts(const struct gguf_tensor *t, enum lm_dtype to)
{
	const struct lm_dtype_info *info = lm_dtype_info(to);
	size_t n = strlen(t->name);
	return t->n_dims == 2 && n > 7 && strcmp(t->name + n - 7, ".weight") == 0 &&
	       (t->type == LM_F32 || t->type == LM_F16 || t->type == LM_BF16) &&
	       t->ne[0] % info->blck == 0;
}

/* The header: every key (alignment aside: the writer writes it) and the converted index. */
static int quantize_describe(gguf_file *in, gguf_writer *w, enum lm_dtype to, lm_diag *d)
{
	int rc = gguf_writer_init(w, gguf_alignment(in) == 32 ? 0 : gguf_alignment(in), d);
	for (uint64_t i = 0; rc == 0 && i < gguf_n_kv(in); i++) {
		const struct gguf_kv *kv = gguf_kv_at(in, i);
		if (strcmp(kv->key, "general.alignment") != 0)
			rc = gguf_writer_kv_copy(w, kv, d);
	}
	for (uint64_t i = 0; rc == 0 && i < gguf_n_tensors(in); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(in, i);
		rc = gguf_writer_add_tensor(w, t->name, quantize_converts(t, to) ? to : t->type,
					    t->n_dims, t->ne, NULL, d);
	}
	return rc;
}

/* Tensor t's bytes in the output: as they are, or each row through f32 into `to`. */
static int quantize_tensor(gguf_writer *w, const struct gguf_tensor *t, enum lm_dtype to,
			   lm_diag *d)
{
	if (!quantize_converts(t, to) || t->type == to)
		return gguf_writer_write_data(w, t->data, (size_t)t->size, d);
	uint64_t in_row = 0, out_row = 0;
	const int64_t ne0 = t->ne[0];
	if (lm_dtype_row_bytes(t->type, (uint64_t)ne0, &in_row) != 0 ||
	    lm_dtype_row_bytes(to, (uint64_t)ne0, &out_row) != 0)
		return lm_fail(d, LM_EINVAL, "tensor %s: rows of %lld", t->name, (long long)ne0);
	float *f = malloc((size_t)ne0 * sizeof *f);
	uint8_t *q = malloc((size_t)out_row);
	int rc = f == NULL || q == NULL ? lm_fail(d, LM_ENOMEM, "out of memory") : 0;
	for (int64_t r = 0; rc == 0 && r < t->ne[1]; r++) {
		const uint8_t *src = (const uint8_t *)t->data + (size_t)r * (size_t)in_row;
		if ((rc = lm_dequantize_row(t->type, src, f, ne0)) == 0 &&
		    (rc = lm_quantize_row(to, f, q, ne0)) == 0)
			rc = gguf_writer_write_data(w, q, (size_t)out_row, d);
		else
			rc = lm_fail(d, rc, "tensor %s: row %lld", t->name, (long long)r);
	}
	free(f);
	free(q);
	return rc;
}

static int quantize_run(const char *in_path, const char *out_path, enum lm_dtype to, lm_diag *d)
{
	gguf_file *in = NULL;
	gguf_writer w = {0};
	char tmp[4096];
	FILE *out = NULL;
	int rc = gguf_open(in_path, &in, d);
	if (rc == 0)
		rc = gguf_map(in, NULL, NULL, false, NULL, d);
	if (rc == 0)
		rc = quantize_describe(in, &w, to, d);
	if (rc == 0 && snprintf(tmp, sizeof tmp, "%s.tmp", out_path) >= (int)sizeof tmp)
		rc = lm_fail(d, LM_EINVAL, "--out: the path is too long");
	if (rc == 0 && (out = fopen(tmp, "wb")) == NULL)
		rc = lm_fail(d, LM_EIO, "cannot write %s", tmp);
	if (rc == 0)
		rc = gguf_writer_write_header(&w, out, d);
	for (uint64_t i = 0; rc == 0 && i < gguf_n_tensors(in); i++)
		rc = quantize_tensor(&w, gguf_tensor_at(in, i), to, d);
	if (rc == 0)
		rc = gguf_writer_finish(&w, d);
	if (out != NULL && fclose(out) != 0 && rc == 0)
		rc = lm_fail(d, LM_EIO, "error writing %s", tmp);
	if (rc == 0 && rename(tmp, out_path) != 0)
		rc = lm_fail(d, LM_EIO, "cannot rename %s to %s", tmp, out_path);
	if (rc != 0 && out != NULL)
		remove(tmp);
	gguf_writer_fini(&w);
	gguf_close(in);
	return rc;
}

int cmd_quantize(int argc, char **argv)
{
	static const struct option opts[] = {
		{"in", required_argument, NULL, 'i'},
		{"out", required_argument, NULL, 'o'},
		{"type", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *in = NULL, *out = NULL;
	int type = -1, c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			in = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 't':
			type = lm_dtype_parse(optarg);
			/* MXFP4 is an experts' format (llama.cpp's MXFP4_MOE), not a whole model's. */
			if (type < 0 || !lm_dtype_info((uint32_t)type)->compute || type == LM_MXFP4)
				return lm_cli_usage_error("quantize",
							  "--type expects f32, f16, bf16, q8_0, "
							  "q4_0, q4_K or q6_K, got '%s'",
							  optarg);
			break;
		case 'h':
			fputs(quantize_usage, stdout);
			return 0;
		default:
			fputs(quantize_usage, stderr);
			return 2;
		}
	}
	if (optind < argc)
		return lm_cli_usage_error("quantize", "unexpected argument '%s'", argv[optind]);
	if (in == NULL || out == NULL || type < 0)
		return lm_cli_usage_error("quantize", "--in, --out and --type are required");
	lm_diag d = {{0}};
	int rc = quantize_run(in, out, (enum lm_dtype)type, &d);
	if (rc != 0) {
		fprintf(stderr, "layermesh quantize: %s\n", lm_diag_str(&d, rc));
		return 1;
	}
	return 0;
}

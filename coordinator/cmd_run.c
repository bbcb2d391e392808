/* layermesh run — generate text with the whole model in this process (no mesh).
 *
 * This is the reference the mesh is held to: `layermesh generate` against a running mesh prints
 * exactly what `layermesh run` prints for the same arguments.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/err.h"
#include "common/base/log.h"
#include "engine/sampler.h"
#include "common/tok/tokenizer.h"
#include "coordinator/cli.h"
#include "coordinator/cmds.h"
#include "engine/engine.h"

static const char run_usage[] =
	"usage: layermesh run --model M.gguf --prompt TEXT [options]\n"
	"\n"
	"Generates a continuation of TEXT with the whole model in this process and prints it\n"
	"(not the prompt) to stdout; one stats line goes to stderr.\n"
	"\n"
	"  --model PATH       GGUF model file (llama architecture)\n"
	"  --prompt TEXT      the prompt (may be empty: generation starts from BOS)\n"
	"  -n, --n-predict N  generate at most N tokens (default 256); generation also stops\n"
	"                     at end-of-sequence, at BOS, or when the context is full\n"
	"  --temp T           temperature; 0 is greedy (default 0.8)\n"
	"  --top-k K          keep the K most likely tokens; 0 is off (default 40)\n"
	"  --top-p P          nucleus sampling; 1 is off (default 0.95)\n"
	"  --min-p P          drop tokens below P x the top probability; 0 is off (default 0.05)\n"
	"  --seed S           sampling seed (default 0); the same seed gives the same text\n"
	"  --threads T        CPU threads (default: the number of online CPUs)\n"
	"  --ctx N            context length in tokens (default: the model's, at most 4096)\n"
	"  --kv-type T        KV cache type: f32, f16 or q8_0 (default f32)\n"
	"  --batch N          prompt tokens per forward pass (default 256)\n"
	"  --backend B        cpu or cuda (default cpu)\n"
	"  --kernels K        auto, scalar or amx (default auto). scalar: the reference\n"
	"                     kernels; amx: adds the AMX GEMMs for batches of 2+ tokens\n"
	"                     where the CPU has them: faster prompts, but a token's\n"
	"                     result then depends on its batch by rounding\n"
	"  --ids              print instead one line: the prompt's ids (with BOS) followed by\n"
	"                     the generated ids, space-separated\n"
	"  --logits FILE      write the logits after the last prompt token, one per line\n"
	"  -h, --help         this text\n";

static int run_write_logits(const char *path, const float *logits, int32_t n, lm_diag *d)
{
	FILE *fp = fopen(path, "w");
	if (fp == NULL)
		return lm_fail(d, LM_EIO, "--logits: cannot write %s", path);
	for (int32_t i = 0; i < n; i++)
		fprintf(fp, "%.9g\n", (double)logits[i]);
	if (fclose(fp) != 0)
		return lm_fail(d, LM_EIO, "--logits: error writing %s", path);
	return 0;
}

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"prompt", required_argument, NULL, 'p'},
		{"n-predict", required_argument, NULL, 'n'},
		{"temp", required_argument, NULL, 't'},
		{"top-k", required_argument, NULL, 'k'},
		{"top-p", required_argument, NULL, 'P'},
		{"min-p", required_argument, NULL, 'M'},
		{"seed", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 'T'},
		{"ctx", required_argument, NULL, 'c'},
		{"kv-type", required_argument, NULL, 'K'},
		{"batch", required_argument, NULL, 'b'},
		{"backend", required_argument, NULL, 'B'},
		{"kernels", required_argument, NULL, 'G'},
		{"ids", no_argument, NULL, 'i'},
		{"logits", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct lm_gen_args g;
	const char *model_path = NULL, *backend_name = "cpu", *logits_path = NULL;
	int32_t batch = 256;
	struct lm_backend_opts kern = {0}; /* --kernels */
	lm_diag d = {{0}};
	int c, rc;

	lm_gen_args_default(&g, "run");
	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			model_path = optarg;
			break;
		case 'B':
			backend_name = optarg;
			break;
		case 'G':
			if (!lm_backend_opts_kernels(&kern, optarg))
				return lm_cli_usage_error("run",
							  "--kernels must be auto, scalar or amx");
			break;
		case 'b':
			if (lm_cli_int(optarg, 1, 65536, &batch) != 0)
				return lm_cli_usage_error(
					"run", "--batch expects an integer in [1, 65536]");
			break;
		case 'L':
			logits_path = optarg;
			break;
		case 'h':
			fputs(run_usage, stdout);
			return 0;
		case '?':
			fputs(run_usage, stderr);
			return 2;
		default:
			if ((rc = lm_gen_args_parse(&g, c, optarg)) != 0)
				return rc;
		}
	}
	if (optind < argc)
		return lm_cli_usage_error("run", "unexpected argument '%s'", argv[optind]);
	if (model_path == NULL || g.prompt == NULL)
		return lm_cli_usage_error("run", "--model and --prompt are required");

	static struct lm_engine eng;
	tok_vocab *vocab = NULL;
	struct lm_sampler sampler = {0};
	int32_t *ids = NULL;
	float *logits = NULL;
	size_t n_prompt = 0;

	struct lm_engine_cfg ec = {.model = model_path,
				   .backend = backend_name,
				   .bo = {.n_threads = g.threads,
					  .force_scalar = kern.force_scalar,
					  .allow_amx = kern.allow_amx},
				   .populate = true,
				   .max_seq = g.ctx,
				   .slots = 1,
				   .max_batch = batch,
				   .k_type = g.kv_type,
				   .v_type = g.kv_type};
	if ((rc = lm_engine_open(&eng, &ec, &d)) != 0)
		goto out;
	const struct lm_model *model = &eng.model;
	if ((rc = tok_load(model->file, &vocab, &d)) != 0) {
		lm_diag_prefix(&d, "%s", model_path);
		goto out;
	}
	int32_t n_ctx = eng.kv.max_seq;
	if ((rc = tok_encode_alloc(vocab, g.prompt, strlen(g.prompt), tok_add_bos(vocab), &ids,
				   &n_prompt, &d)) != 0)
		goto out;
	if (n_prompt == 0) {
		rc = lm_fail(&d, LM_EINVAL, "the prompt is empty and the vocabulary adds no BOS");
		goto out;
	}
	if (n_prompt >= (size_t)n_ctx) {
		rc = lm_fail(&d, LM_ERANGE, "the prompt has %zu tokens; the context holds %d",
			     n_prompt, n_ctx);
		goto out;
	}
	int32_t n_gen_max = g.n_predict;
	if ((size_t)n_gen_max > (size_t)n_ctx - n_prompt)
		n_gen_max = (int32_t)((size_t)n_ctx - n_prompt);
	int32_t *all = realloc(ids, (n_prompt + (size_t)n_gen_max + 1) * sizeof *ids);
	if (all == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto out;
	}
	ids = all;
	if ((rc = lm_sampler_init(&sampler, model->hp.n_vocab)) != 0 ||
	    (logits = malloc((size_t)model->hp.n_vocab * sizeof *logits)) == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto out;
	}

	/* Prefill in chunks of `batch`; only the last chunk asks for logits. */
	struct lm_tok_loc *loc = malloc((size_t)batch * sizeof *loc);
	if (loc == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto out;
	}
	double t0 = lm_now_s();
	for (size_t at = 0; at < n_prompt; at += (size_t)batch) {
		int32_t n =
			(int32_t)(n_prompt - at < (size_t)batch ? n_prompt - at : (size_t)batch);
		for (int32_t i = 0; i < n; i++)
			loc[i] = (struct lm_tok_loc){0, (int32_t)at + i};
		int32_t last = n - 1;
		struct lm_batch b = {
			.n = n, .ids = ids + at, .loc = loc, .n_out = 1, .out_rows = &last};
		if ((rc = lm_forward_run(&eng.fw, &b, NULL, NULL, logits, &d)) != 0)
			break;
	}
	double t1 = lm_now_s();
	if (rc == 0 && logits_path != NULL)
		rc = run_write_logits(logits_path, logits, model->hp.n_vocab, &d);

	/* Decode: sample, print, feed back. */
	struct tok_stream ts;
	size_t cap = tok_stream_cap(vocab), n_text;
	char *text = malloc(cap);
	int32_t n_gen = 0, n_decoded = 0;
	tok_stream_init(&ts);
	while (rc == 0 && text != NULL && n_gen < n_gen_max) {
		int32_t next = lm_sample(&sampler, logits, &g.sampling, (uint64_t)n_gen);
		if (tok_is_eog(vocab, next) || next == tok_bos(vocab))
			break;
		ids[n_prompt + (size_t)n_gen++] = next;
		if (!g.print_ids && tok_stream_push(vocab, &ts, next, text, cap, &n_text) == 0) {
			fwrite(text, 1, n_text, stdout);
			fflush(stdout);
		}
		if (n_gen == n_gen_max)
			break;
		struct lm_tok_loc l = {0, (int32_t)(n_prompt + (size_t)n_gen - 1)};
		int32_t row = 0;
		struct lm_batch b = {.n = 1, .ids = &next, .loc = &l, .n_out = 1, .out_rows = &row};
		rc = lm_forward_run(&eng.fw, &b, NULL, NULL, logits, &d);
		n_decoded++;
	}
	double t2 = lm_now_s();
	if (text == NULL && rc == 0)
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
	if (rc == 0) {
		if (g.print_ids) {
			for (size_t i = 0; i < n_prompt + (size_t)n_gen; i++)
				printf(i ? " %d" : "%d", ids[i]);
			printf("\n");
		} else {
			n_text = tok_stream_flush(&ts, text, cap);
			fwrite(text, 1, n_text, stdout);
			printf("\n");
		}
		fflush(stdout);
		fprintf(stderr,
			"prompt tokens %zu, generated tokens %d, prefill %.1f tok/s, decode %.1f "
			"tok/s\n",
			n_prompt, n_gen, (double)n_prompt / (t1 - t0 > 0 ? t1 - t0 : 1e-9),
			(double)n_decoded / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
	}
	free(text);
	free(loc);
out:
	if (rc != 0)
		fprintf(stderr, "layermesh run: %s\n", lm_diag_str(&d, rc));
	free(logits);
	free(ids);
	lm_sampler_fini(&sampler);
	tok_free(vocab);
	lm_engine_close(&eng);
	return rc == 0 ? 0 : 1;
}

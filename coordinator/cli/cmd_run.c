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
#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"
#include "engine/engine.h"
#include "common/base/buf.h"
#include "common/model/hparams.h"

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
	"  --kv-type T        K and V cache type of every layer: f32, f16, bf16, q8_0, q5_1,\n"
	"                     q4_0 or fp8 (e4m3) (default f32; block types need head_dim a\n"
	"                     multiple of 32)\n"
	"  --ctk T, --ctv T   K (V) cache type alone, as llama.cpp's -ctk/-ctv\n"
	"  --ctk-swa T        K cache type of the sliding-window layers (default: --ctk's)\n"
	"  --ctv-swa T        V cache type of the sliding-window layers (default: --ctv's)\n"
	"  --kv-layers A:B=T  layers A to B-1 in cache types of their own, over the options\n"
	"                     above: T is one type for K and V, K,V for K and V, or\n"
	"                     K,V,K_SWA,V_SWA with the sliding layers' apart (repeatable;\n"
	"                     ranges may not overlap). The per-layer types of a mesh whose\n"
	"                     [[worker]]s set their own kv_type_*, layer ranges as\n"
	"                     `layermesh plan` shows them\n"
	"  --batch N          prompt tokens per forward pass (default 256)\n"
	"  --backend B        cpu or cuda (default cpu)\n"
	"  --kernels K        auto, scalar or amx (default auto). scalar: the reference\n"
	"                     kernels; amx: adds the AMX GEMMs for batches of 2+ tokens\n"
	"                     where the CPU has them: faster prompts, but a token's\n"
	"                     result then depends on its batch by rounding\n"
	"  --ids              print instead one line: the prompt's ids (with BOS) followed by\n"
	"                     the generated ids, space-separated\n"
	"  --logits FILE      write the logits after the last prompt token, one per line\n"
	"  --logits-all FILE  write the logits after every prompt token, one line each\n"
	"  --prompt-ids IDS   the prompt as token ids (\"1 2 3\", used as given, BOS\n"
	"                     included or not) instead of --prompt's text\n"
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

#define RUN_MAX_KV_RANGES 64

/* --kv-layers A:B=TYPES: layers [a, b) in types t. */
struct run_kv_range {
	int32_t a, b;
	struct kv_types t;
};

/* What `run` was asked for, and the state of one generation. */
struct run_ctx {
	struct lm_gen_args g;
	struct run_kv_range kv_ranges[RUN_MAX_KV_RANGES];
	int32_t n_kv_ranges;
	const char *model_path, *backend_name, *logits_path, *prompt_ids, *logits_all;
	int32_t batch;
	struct lm_backend_opts kern; /* --kernels */
	struct lm_engine eng;
	tok_vocab *vocab;
	struct lm_sampler sampler;
	int32_t *ids; /* the prompt, then the generated tokens */
	size_t n_prompt;
	int32_t n_gen_max, n_gen, n_decoded;
	float *logits;
	double t_prefill, t_decode; /* seconds */
};

/* One --kv-layers A:B=T | A:B=K,V | A:B=K,V,K_SWA,V_SWA: 0, or 2 after the usage error. */
static int run_kv_layers(struct run_ctx *r, const char *arg)
{
	static const char usage[] = "--kv-layers expects A:B=T, A:B=K,V or A:B=K,V,K_SWA,V_SWA "
				    "(layers A to B-1, A < B <= %d; types %s), got '%s'";
	char buf[128], *eq, *colon, *save = NULL;
	snprintf(buf, sizeof buf, "%s", arg);
	struct run_kv_range k = {0};
	int n = 0, t[4];
	if (strlen(arg) >= sizeof buf || (eq = strchr(buf, '=')) == NULL ||
	    (colon = strchr(buf, ':')) == NULL || colon > eq)
		return lm_cli_usage_error("run", usage, LM_MAX_LAYERS, kv_type_names(), arg);
	*eq = *colon = '\0';
	if (lm_cli_int(buf, 0, LM_MAX_LAYERS - 1, &k.a) != 0 ||
	    lm_cli_int(colon + 1, 1, LM_MAX_LAYERS, &k.b) != 0 || k.a >= k.b)
		return lm_cli_usage_error("run", usage, LM_MAX_LAYERS, kv_type_names(), arg);
	for (char *tok = strtok_r(eq + 1, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == 4 || (t[n] = lm_dtype_parse(tok)) < 0 ||
		    !kv_type_supported((enum lm_dtype)t[n]))
			return lm_cli_usage_error("run", usage, LM_MAX_LAYERS, kv_type_names(),
						  arg);
		n++;
	}
	if (n != 1 && n != 2 && n != 4)
		return lm_cli_usage_error("run", usage, LM_MAX_LAYERS, kv_type_names(), arg);
	k.t = n == 1 ? kv_types_uniform((enum lm_dtype)t[0], (enum lm_dtype)t[0])
		     : kv_types_uniform((enum lm_dtype)t[0], (enum lm_dtype)t[1]);
	if (n == 4)
		k.t.swa = (struct kv_pair){(enum lm_dtype)t[2], (enum lm_dtype)t[3]};
	for (int32_t i = 0; i < r->n_kv_ranges; i++)
		if (k.a < r->kv_ranges[i].b && r->kv_ranges[i].a < k.b)
			return lm_cli_usage_error("run", "--kv-layers %d:%d overlaps %d:%d",
						  (int)k.a, (int)k.b, (int)r->kv_ranges[i].a,
						  (int)r->kv_ranges[i].b);
	if (r->n_kv_ranges == RUN_MAX_KV_RANGES)
		return lm_cli_usage_error("run", "at most %d --kv-layers", RUN_MAX_KV_RANGES);
	r->kv_ranges[r->n_kv_ranges++] = k;
	return 0;
}

/* The cache types of every layer --kv-layers names, the others' from --kv-type and the rest;
 * NULL (every layer the same) without --kv-layers. */
static int run_layer_kv(const struct run_ctx *r, struct kv_types **out, lm_diag *d)
{
	*out = NULL;
	if (r->n_kv_ranges == 0)
		return 0;
	struct kv_types *t = malloc(LM_MAX_LAYERS * sizeof *t);
	if (t == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	for (int32_t i = 0; i < LM_MAX_LAYERS; i++)
		t[i] = lm_gen_args_kv_types(&r->g);
	for (int32_t k = 0; k < r->n_kv_ranges; k++)
		for (int32_t i = r->kv_ranges[k].a; i < r->kv_ranges[k].b; i++)
			t[i] = r->kv_ranges[k].t;
	*out = t;
	return 0;
}

/* -1 to go on, or the exit status. */
static int run_parse(struct run_ctx *r, int argc, char **argv)
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
		{"ctk", required_argument, NULL, LM_OPT_CTK},
		{"ctv", required_argument, NULL, LM_OPT_CTV},
		{"ctk-swa", required_argument, NULL, LM_OPT_CTK_SWA},
		{"ctv-swa", required_argument, NULL, LM_OPT_CTV_SWA},
		{"kv-layers", required_argument, NULL, 'Y'},
		{"batch", required_argument, NULL, 'b'},
		{"backend", required_argument, NULL, 'B'},
		{"kernels", required_argument, NULL, 'G'},
		{"ids", no_argument, NULL, 'i'},
		{"logits", required_argument, NULL, 'L'},
		{"prompt-ids", required_argument, NULL, 'I'},
		{"logits-all", required_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c, rc;
	lm_gen_args_default(&r->g, "run");
	r->backend_name = "cpu";
	r->batch = 256;
	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			r->model_path = optarg;
			break;
		case 'B':
			r->backend_name = optarg;
			break;
		case 'G':
			if (!lm_backend_opts_kernels(&r->kern, optarg))
				return lm_cli_usage_error("run",
							  "--kernels must be auto, scalar or amx");
			break;
		case 'b':
			if (lm_cli_int(optarg, 1, 65536, &r->batch) != 0)
				return lm_cli_usage_error(
					"run", "--batch expects an integer in [1, 65536]");
			break;
		case 'L':
			r->logits_path = optarg;
			break;
		case 'I':
			r->prompt_ids = optarg;
			break;
		case 'A':
			r->logits_all = optarg;
			break;
		case 'Y':
			if ((rc = run_kv_layers(r, optarg)) != 0)
				return rc;
			break;
		case 'h':
			fputs(run_usage, stdout);
			return 0;
		case '?':
			fputs(run_usage, stderr);
			return 2;
		default:
			if ((rc = lm_gen_args_parse(&r->g, c, optarg)) != 0)
				return rc;
		}
	}
	if (optind < argc)
		return lm_cli_usage_error("run", "unexpected argument '%s'", argv[optind]);
	if (r->model_path == NULL || (r->g.prompt == NULL) == (r->prompt_ids == NULL))
		return lm_cli_usage_error("run", "--model and one of --prompt and --prompt-ids are "
						 "required");
	return -1;
}

/* The engine, the vocabulary and the prompt's ids, checked against the context. */
static int run_open(struct run_ctx *r, lm_diag *d)
{
	struct lm_engine_cfg ec = {.model = r->model_path,
				   .backend = r->backend_name,
				   .bo = {.n_threads = r->g.threads,
					  .force_scalar = r->kern.force_scalar,
					  .allow_amx = r->kern.allow_amx},
				   .populate = true,
				   .max_seq = r->g.ctx,
				   .slots = 1,
				   .max_batch = r->batch,
				   .kv_types = lm_gen_args_kv_types(&r->g)};
	struct kv_types *layer_kv;
	int rc = run_layer_kv(r, &layer_kv, d);
	if (rc != 0)
		return rc;
	ec.layer_kv_types = layer_kv;
	rc = lm_engine_open(&r->eng, &ec, d);
	free(layer_kv);
	if (rc != 0)
		return rc;
	const struct lm_model *model = &r->eng.model;
	for (int32_t k = 0; k < r->n_kv_ranges; k++)
		if (r->kv_ranges[k].b > model->hp.n_layer)
			return lm_fail(d, LM_ERANGE, "--kv-layers %d:%d: %s has %d layers",
				       (int)r->kv_ranges[k].a, (int)r->kv_ranges[k].b,
				       r->model_path, (int)model->hp.n_layer);
	if ((rc = tok_load(model->file, &r->vocab, d)) != 0) {
		lm_diag_prefix(d, "%s", r->model_path);
		return rc;
	}
	int32_t n_ctx = r->eng.kv.max_seq;
	if (r->prompt_ids != NULL)
		rc = lm_cli_ids(r->prompt_ids, model->hp.n_vocab, &r->ids, &r->n_prompt, d);
	else
		rc = tok_encode_alloc(r->vocab, r->g.prompt, strlen(r->g.prompt),
				      tok_add_bos(r->vocab), &r->ids, &r->n_prompt, d);
	if (rc != 0)
		return rc;
	if (r->n_prompt == 0)
		return lm_fail(d, LM_EINVAL, "the prompt is empty and the vocabulary adds no BOS");
	if (r->n_prompt >= (size_t)n_ctx)
		return lm_fail(d, LM_ERANGE, "the prompt has %zu tokens; the context holds %d",
			       r->n_prompt, n_ctx);
	r->n_gen_max = r->g.n_predict;
	if ((size_t)r->n_gen_max > (size_t)n_ctx - r->n_prompt)
		r->n_gen_max = (int32_t)((size_t)n_ctx - r->n_prompt);
	int32_t *all = realloc(r->ids, (r->n_prompt + (size_t)r->n_gen_max + 1) * sizeof *all);
	if (all == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	r->ids = all;
	if (lm_sampler_init(&r->sampler, model->hp.n_vocab) != 0 ||
	    (r->logits = malloc((size_t)model->hp.n_vocab * sizeof *r->logits)) == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	return 0;
}

/* The prompt in chunks of `batch`; only the last chunk asks for logits, unless --logits-all
 * wants every position's (written one line each as the chunks come). */
static int run_prefill(struct run_ctx *r, lm_diag *d)
{
	const int32_t v = r->eng.model.hp.n_vocab;
	struct lm_tok_loc *loc = malloc((size_t)r->batch * sizeof *loc);
	int32_t *rows = malloc((size_t)r->batch * sizeof *rows);
	float *all =
		r->logits_all != NULL ? malloc((size_t)r->batch * (size_t)v * sizeof *all) : NULL;
	FILE *fa = r->logits_all != NULL ? fopen(r->logits_all, "w") : NULL;
	int rc = 0;
	if (loc == NULL || rows == NULL || (r->logits_all != NULL && all == NULL))
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
	else if (r->logits_all != NULL && fa == NULL)
		rc = lm_fail(d, LM_EIO, "--logits-all: cannot write %s", r->logits_all);
	double t0 = lm_now_s();
	for (size_t at = 0; rc == 0 && at < r->n_prompt; at += (size_t)r->batch) {
		size_t left = r->n_prompt - at;
		int32_t n = (int32_t)(left < (size_t)r->batch ? left : (size_t)r->batch);
		for (int32_t i = 0; i < n; i++) {
			loc[i] = (struct lm_tok_loc){0, (int32_t)at + i};
			rows[i] = i;
		}
		int32_t last = n - 1;
		struct lm_batch b = {.n = n,
				     .ids = r->ids + at,
				     .loc = loc,
				     .n_out = all != NULL ? n : 1,
				     .out_rows = all != NULL ? rows : &last};
		rc = lm_forward_run_checked(&r->eng.fw, &b, NULL, NULL,
					    all != NULL ? all : r->logits, d);
		for (int32_t i = 0; rc == 0 && all != NULL && i < n; i++)
			for (int32_t j = 0; j < v; j++)
				fprintf(fa, j + 1 < v ? "%.9g " : "%.9g\n",
					(double)all[(size_t)i * (size_t)v + (size_t)j]);
		if (rc == 0 && all != NULL) /* the last row samples the first token */
			memcpy(r->logits, all + (size_t)last * (size_t)v,
			       (size_t)v * sizeof(float));
	}
	r->t_prefill = lm_now_s() - t0;
	if (fa != NULL && fclose(fa) != 0 && rc == 0)
		rc = lm_fail(d, LM_EIO, "--logits-all: error writing %s", r->logits_all);
	free(all);
	free(rows);
	free(loc);
	if (rc == 0 && r->logits_path != NULL)
		rc = run_write_logits(r->logits_path, r->logits, v, d);
	return rc;
}

/* Sample, print, feed back; the text (or, with --ids, every id) on stdout. */
static int run_decode(struct run_ctx *r, lm_diag *d)
{
	struct tok_stream ts;
	size_t cap = tok_stream_cap(r->vocab), n_text;
	char *text = malloc(cap);
	if (text == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	int rc = 0;
	double t0 = lm_now_s();
	tok_stream_init(&ts);
	while (rc == 0 && r->n_gen < r->n_gen_max) {
		int32_t next =
			lm_sample(&r->sampler, r->logits, &r->g.sampling, (uint64_t)r->n_gen);
		if (tok_is_eog(r->vocab, next) || next == tok_bos(r->vocab))
			break;
		r->ids[r->n_prompt + (size_t)r->n_gen++] = next;
		if (!r->g.print_ids &&
		    tok_stream_push(r->vocab, &ts, next, text, cap, &n_text) == 0) {
			fwrite(text, 1, n_text, stdout);
			fflush(stdout);
		}
		if (r->n_gen == r->n_gen_max)
			break;
		struct lm_tok_loc l = {0, (int32_t)(r->n_prompt + (size_t)r->n_gen - 1)};
		int32_t row = 0;
		struct lm_batch b = {.n = 1, .ids = &next, .loc = &l, .n_out = 1, .out_rows = &row};
		rc = lm_forward_run_checked(&r->eng.fw, &b, NULL, NULL, r->logits, d);
		r->n_decoded++;
	}
	r->t_decode = lm_now_s() - t0;
	if (rc == 0) {
		if (r->g.print_ids) {
			for (size_t i = 0; i < r->n_prompt + (size_t)r->n_gen; i++)
				printf(i ? " %d" : "%d", r->ids[i]);
		} else {
			n_text = tok_stream_flush(&ts, text, cap);
			fwrite(text, 1, n_text, stdout);
		}
		printf("\n");
		fflush(stdout);
	}
	free(text);
	return rc;
}

int cmd_run(int argc, char **argv)
{
	static struct run_ctx r;
	lm_diag d = {{0}};
	memset(&r, 0, sizeof r);
	int rc = run_parse(&r, argc, argv);
	if (rc >= 0)
		return rc;
	if ((rc = run_open(&r, &d)) == 0 && (rc = run_prefill(&r, &d)) == 0 &&
	    (rc = run_decode(&r, &d)) == 0)
		fprintf(stderr,
			"prompt tokens %zu, generated tokens %d, prefill %.1f tok/s, decode %.1f "
			"tok/s\n",
			r.n_prompt, r.n_gen,
			(double)r.n_prompt / (r.t_prefill > 0 ? r.t_prefill : 1e-9),
			(double)r.n_decoded / (r.t_decode > 0 ? r.t_decode : 1e-9));
	if (rc != 0)
		fprintf(stderr, "layermesh run: %s\n", lm_diag_str(&d, rc));
	free(r.logits);
	free(r.ids);
	lm_sampler_fini(&r.sampler);
	tok_free(r.vocab);
	lm_engine_close(&r.eng);
	return rc == 0 ? 0 : 1;
}

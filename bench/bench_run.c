/* bench_run.c — layermesh's single-process prefill and decode speed, measured the way lm_oracle's
 * bench mode measures llama.cpp's.
 *
 *   bench_run --model M.gguf --bench-prefill N --bench-decode M [options]
 *
 * R repetitions of (roll the sequence back to position 0; prefill an N-token prompt in one
 * forward pass, logits of the last token only; greedy-decode M tokens one forward pass each,
 * argmax of the logits with the lowest id winning ties), printing per repetition
 *     prefill rep=I tokens=N ms=T tok_s=S cpu_ms=C
 *     decode rep=I tokens=M ms=T tok_s=S cpu_ms=C read_bytes_tok=B
 * (cpu_ms: the CPU time of all the process's threads over the same interval; with one thread,
 * the time the work took without the waits a loaded machine adds; read_bytes_tok: a counter's,
 * the bytes of every weight matrix the decode's matmuls took, each call counting its matrix
 * once, per token: what the decode read of the weights, the embedding's one row aside).
 * The N prompt ids are BOS (when the vocabulary has one) then the same fixed pseudo-random walk
 * over the vocabulary lm_oracle uses, so both programs see the same tokens. Only the forward
 * passes and the argmax are timed; loading (the whole file mapped and prefaulted) is not. The
 * KV cache is f32 and holds the N + M positions the run writes (its size does not change the
 * work: attention reads the positions written, here as in llama.cpp).
 *
 * Before anything else one line describes what is measured:
 *     info backend=B threads=T kernels=K n_layer=L weight_bytes=W decode_bytes=B
 * K is the CPU backend's kernel set in use (generic, avx2, avx512, amx), or the backend's name.
 * decode_bytes is what one decode step reads of the weights: every layer's tensors (of a
 * mixture-of-experts layer's experts, the expert_used_count a token takes: the active experts'
 * bytes), the output norm and head, and one row of the token embedding.
 *
 *   --reps R           repetitions (default 3)
 *   --threads T        CPU threads (default 1)
 *   --kernels K        auto, scalar or amx (default auto)
 *   --backend B        cpu or cuda (default cpu); --device N: the CUDA device (default 0)
 *   --bench-warmup     before the timed repetitions, one untimed one: prefill the N-token prompt
 *                      and decode one token
 *   --bench-wait       print "ready" once loaded and warmed up, then read one line from stdin
 *                      before each repetition (stop at end of input): bench/run.sh uses this to
 *                      interleave the repetitions of this program and lm_oracle
 *   --print-prompt     print the N prompt ids on one line and exit (for requests to a mesh)
 *
 * Exit status: 0 success, 1 failure (the reason on stderr), 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/err.h"
#include "common/tok/tokenizer.h"
#include "engine/engine.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

struct bench_opts {
	const char *model;
	long prefill;
	long decode;
	long reps;
	int threads;
	struct lm_backend_opts kern; /* --kernels */
	const char *backend;         /* --backend */
	int device;                  /* --device */
	bool warmup;
	bool wait;
	bool print_prompt;
};

static const char bench_usage_text[] =
	"usage: bench_run --model M.gguf --bench-prefill N --bench-decode M [options]\n"
	"\n"
	"  --bench-prefill N   prefill an N-token prompt in one forward pass\n"
	"  --bench-decode M    then greedy-decode M tokens one at a time\n"
	"  --reps R            repetitions (default 3)\n"
	"  --threads T         CPU threads (default 1)\n"
	"  --kernels K         auto, scalar or amx (default auto)\n"
	"  --backend B         cpu or cuda (default cpu)\n"
	"  --device N          the CUDA device (default 0)\n"
	"  --bench-warmup      one untimed prefill and decode step before the repetitions\n"
	"  --bench-wait        print \"ready\", then read a line from stdin before each "
	"repetition\n"
	"  --print-prompt      print the N prompt ids and exit\n";

static int bench_usage_fail(const char *what)
{
	fprintf(stderr, "bench_run: %s (--help lists the options)\n", what);
	return 2;
}

static bool bench_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* 0 to run, 1 after --help, 2 on a usage error. */
static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"bench-prefill", required_argument, NULL, 'p'},
		{"bench-decode", required_argument, NULL, 'd'},
		{"reps", required_argument, NULL, 'r'},
		{"threads", required_argument, NULL, 't'},
		{"kernels", required_argument, NULL, 'k'},
		{"backend", required_argument, NULL, 'B'},
		{"device", required_argument, NULL, 'D'},
		{"bench-warmup", no_argument, NULL, 'W'},
		{"bench-wait", no_argument, NULL, 'w'},
		{"print-prompt", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	long v;
	int c;

	*o = (struct bench_opts){.reps = 3, .threads = 1, .backend = "cpu"};
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o->model = optarg;
			break;
		case 'p':
			if (!bench_parse_long(optarg, 1, 1L << 16, &o->prefill))
				return bench_usage_fail(
					"--bench-prefill expects a count in [1, 65536]");
			break;
		case 'd':
			if (!bench_parse_long(optarg, 0, 1L << 20, &o->decode))
				return bench_usage_fail(
					"--bench-decode expects a count in [0, 1048576]");
			break;
		case 'r':
			if (!bench_parse_long(optarg, 1, 100000, &o->reps))
				return bench_usage_fail("--reps expects a count in [1, 100000]");
			break;
		case 't':
			if (!bench_parse_long(optarg, 1, 1024, &v))
				return bench_usage_fail("--threads expects a count in [1, 1024]");
			o->threads = (int)v;
			break;
		case 'k':
			if (!lm_backend_opts_kernels(&o->kern, optarg))
				return bench_usage_fail("--kernels must be auto, scalar or amx");
			break;
		case 'B':
			o->backend = optarg;
			break;
		case 'D':
			if (!bench_parse_long(optarg, 0, 255, &v))
				return bench_usage_fail("--device expects a number in [0, 255]");
			o->device = (int)v;
			break;
		case 'W':
			o->warmup = true;
			break;
		case 'w':
			o->wait = true;
			break;
		case 'P':
			o->print_prompt = true;
			break;
		case 'h':
			fputs(bench_usage_text, stdout);
			return 1;
		default:
			return bench_usage_fail("unknown option or missing value");
		}
	}
	if (optind < argc)
		return bench_usage_fail("unexpected argument");
	if (o->model == NULL || o->prefill == 0)
		return bench_usage_fail("--model and --bench-prefill are required");
	return 0;
}

/* Index of the largest logit; the lowest index wins ties, like lm_oracle's strict '>' scan. */
static int32_t bench_argmax(const float *logits, int32_t n_vocab)
{
	int32_t best = 0;
	for (int32_t i = 1; i < n_vocab; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* The counter behind read_bytes_tok: the engine's matmul, counting its weights' bytes. */
static const struct lm_backend_i *bench_real_iface;
static struct lm_backend_i bench_counting_iface;
static uint64_t bench_read_bytes;

static int bench_counting_matmul(void *ctx, float *y, const struct lm_weight *w, const float *x,
				 int n)
{
	bench_read_bytes += (uint64_t)w->row_bytes * (uint64_t)w->ne1;
	return bench_real_iface->matmul(ctx, y, w, x, n);
}

static void bench_count_reads(struct lm_backend *be)
{
	bench_real_iface = be->iface;
	bench_counting_iface = *be->iface;
	bench_counting_iface.matmul = bench_counting_matmul;
	be->iface = &bench_counting_iface;
}

/* What a decode step reads of the weights: the layers (of an expert tensor, the experts a token
 * takes), the head, one embedding row. */
static uint64_t bench_decode_bytes(const struct lm_model *model, const struct lm_model_costs *mc)
{
	const struct lm_hparams *hp = &model->hp;
	uint64_t bytes = mc->head_bytes + mc->embd_bytes / (uint64_t)hp->n_vocab;
	for (int32_t il = 0; il < hp->n_layer; il++)
		bytes += mc->layer[il].weight_bytes;
	for (uint64_t i = 0; i < gguf_n_tensors(model->file); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(model->file, i);
		const struct lm_layer_hparams *l = t->layer >= 0 ? &hp->layer[t->layer] : NULL;
		if (l != NULL && l->n_expert > 0 && t->n_dims == 3 && t->ne[2] == l->n_expert)
			bytes -= t->size / (uint64_t)l->n_expert *
				 (uint64_t)(l->n_expert - l->n_expert_used);
	}
	return bytes;
}

struct bench_ctx {
	struct lm_forward *fw;
	const int32_t *ids; /* [n] the prompt */
	int32_t n;
	float *logits; /* [n_vocab] */
	int32_t n_vocab;
	struct lm_tok_loc *loc; /* [n] */
};

/* Prefills the prompt from position 0 (rolling the sequence back); the logits of its last token
 * are left in b->logits. */
static int bench_prefill(struct bench_ctx *b, lm_diag *d)
{
	for (int32_t i = 0; i < b->n; i++)
		b->loc[i] = (struct lm_tok_loc){0, i};
	int32_t last = b->n - 1;
	struct lm_batch batch = {
		.n = b->n, .ids = b->ids, .loc = b->loc, .n_out = 1, .out_rows = &last};
	return lm_forward_run(b->fw, &batch, NULL, NULL, b->logits, d);
}

/* Feeds *tok at position pos; the next token replaces it. */
static int bench_step(struct bench_ctx *b, int32_t *tok, int32_t pos, lm_diag *d)
{
	struct lm_tok_loc l = {0, pos};
	int32_t row = 0;
	struct lm_batch batch = {.n = 1, .ids = tok, .loc = &l, .n_out = 1, .out_rows = &row};
	int rc = lm_forward_run(b->fw, &batch, NULL, NULL, b->logits, d);
	if (rc == 0)
		*tok = bench_argmax(b->logits, b->n_vocab);
	return rc;
}

static int bench_loop(struct bench_ctx *b, const struct bench_opts *o, lm_diag *d)
{
	int32_t tok;
	int rc = 0;

	if (o->warmup) {
		rc = bench_prefill(b, d);
		tok = bench_argmax(b->logits, b->n_vocab);
		if (rc == 0 && o->decode > 0)
			rc = bench_step(b, &tok, b->n, d);
		if (rc != 0)
			return rc;
	}
	if (o->wait) {
		printf("ready\n");
		fflush(stdout);
	}
	char line[256];
	for (long rep = 0; rep < o->reps; rep++) {
		if (o->wait && fgets(line, sizeof line, stdin) == NULL)
			break;
		double t0 = lm_now_s(), c0 = lm_cpu_s();
		if ((rc = bench_prefill(b, d)) != 0)
			return rc;
		double t1 = lm_now_s(), c1 = lm_cpu_s();
		printf("prefill rep=%ld tokens=%d ms=%.3f tok_s=%.2f cpu_ms=%.3f\n", rep, b->n,
		       (t1 - t0) * 1e3, b->n / (t1 - t0), (c1 - c0) * 1e3);
		fflush(stdout);
		if (o->decode == 0)
			continue;
		tok = bench_argmax(b->logits, b->n_vocab);
		bench_read_bytes = 0;
		t0 = lm_now_s();
		c0 = lm_cpu_s();
		for (long k = 0; k < o->decode; k++)
			if ((rc = bench_step(b, &tok, b->n + (int32_t)k, d)) != 0)
				return rc;
		t1 = lm_now_s();
		c1 = lm_cpu_s();
		printf("decode rep=%ld tokens=%ld ms=%.3f tok_s=%.2f cpu_ms=%.3f "
		       "read_bytes_tok=%llu\n",
		       rep, o->decode, (t1 - t0) * 1e3, (double)o->decode / (t1 - t0),
		       (c1 - c0) * 1e3,
		       (unsigned long long)(bench_read_bytes / (uint64_t)o->decode));
		fflush(stdout);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	int rc = bench_parse(argc, argv, &o);
	if (rc != 0)
		return rc == 1 ? 0 : 2;

	static struct lm_engine eng;
	struct lm_layer_cost *costs = NULL;
	tok_vocab *vocab = NULL;
	struct bench_ctx b = {.fw = &eng.fw};
	int32_t *ids = NULL;
	lm_diag d = {{0}};

	struct lm_engine_cfg ec = {.model = o.model,
				   .backend = o.backend,
				   .bo = {.n_threads = o.threads,
					  .device = o.device,
					  .force_scalar = o.kern.force_scalar,
					  .allow_amx = o.kern.allow_amx},
				   .populate = !o.print_prompt,
				   .max_seq = (int32_t)(o.prefill + o.decode + 1),
				   .slots = 1,
				   .max_batch = (int32_t)o.prefill,
				   .kv_types = {{LM_F32, LM_F32}, {LM_F32, LM_F32}}};
	if ((rc = lm_engine_open(&eng, &ec, &d)) != 0)
		goto out;
	const struct lm_model *model = &eng.model;
	if ((rc = tok_load(model->file, &vocab, &d)) != 0) {
		lm_diag_prefix(&d, "%s", o.model);
		goto out;
	}
	const struct lm_hparams *hp = &model->hp;

	costs = calloc((size_t)hp->n_layer, sizeof *costs);
	if (costs == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto out;
	}
	struct lm_model_costs mc = {.layer = costs};
	if ((rc = lm_model_costs(model->file, hp, &mc, &d)) != 0)
		goto out;
	uint64_t decode_bytes = bench_decode_bytes(model, &mc);
	if (!o.print_prompt)
		printf("info backend=%s threads=%d kernels=%s n_layer=%d weight_bytes=%llu "
		       "decode_bytes=%llu\n",
		       o.backend, o.threads,
		       lm_backend_cpu_kernels(&eng.be) != NULL ? lm_backend_cpu_kernels(&eng.be)
							       : o.backend,
		       hp->n_layer, (unsigned long long)model->weight_bytes,
		       (unsigned long long)decode_bytes);
	fflush(stdout);

	/* The same prompt as lm_oracle's bench mode. */
	b.n = (int32_t)o.prefill;
	b.n_vocab = hp->n_vocab;
	ids = malloc((size_t)b.n * sizeof *ids);
	b.loc = malloc((size_t)b.n * sizeof *b.loc);
	b.logits = malloc((size_t)hp->n_vocab * sizeof *b.logits);
	if (ids == NULL || b.loc == NULL || b.logits == NULL) {
		rc = lm_fail(&d, LM_ENOMEM, "out of memory");
		goto out;
	}
	uint64_t x = 0x9e3779b97f4a7c15u;
	for (int32_t i = 0; i < b.n; i++) {
		x = x * 6364136223846793005u + 1442695040888963407u;
		ids[i] = (int32_t)((x >> 33) % (uint64_t)hp->n_vocab);
	}
	if (tok_bos(vocab) >= 0)
		ids[0] = tok_bos(vocab);
	b.ids = ids;
	if (o.print_prompt) {
		for (int32_t i = 0; i < b.n; i++)
			printf(i ? " %d" : "%d", ids[i]);
		printf("\n");
		goto out;
	}

	bench_count_reads(&eng.be);
	rc = bench_loop(&b, &o, &d);
	eng.be.iface = bench_real_iface;
	if (rc == 0 && fflush(stdout) != 0)
		rc = lm_fail(&d, LM_EIO, "writing to stdout failed");
out:
	if (rc != 0)
		fprintf(stderr, "bench_run: %s\n", lm_diag_str(&d, rc));
	free(b.logits);
	free(b.loc);
	free(ids);
	free(costs);
	tok_free(vocab);
	lm_engine_close(&eng);
	return rc == 0 ? 0 : 1;
}

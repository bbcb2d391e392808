/* bench_grammar.c — the sampling stage's cost per token with a grammar and without, on a real
 * vocabulary (docs/constrained-decoding.md).
 *
 *     build/bench/bench_grammar [--vocab GGUF] [--tokens N] [--reps R] [--temp T]
 *
 * Default vocabulary: Gemma 4's 262,144 tokens (shared/tokenizer/ggml-vocab-gemma-4.gguf). The
 * grammar is a JSON schema's (an object of strings, numbers, an enum and an array), compiled
 * by the coordinator's converter and matched by the last stage's code (engine/constrain.h).
 * Each rep generates N tokens from rows of random logits (the draws restart the object when
 * it completes), and times per token:
 *   plain      lm_sample on the row: the sampler without a grammar;
 *   random     lm_constrain_sample on the row: random logits are the worst case, since the
 *              unconstrained draw is rarely admitted and the row must be masked;
 *   guided     the same with one token the grammar admits raised on top of the row, as a model
 *              that has learnt the format ranks it: the unconstrained draw is admitted (the
 *              fast path), the cost of checking one token;
 * and the cost of one mask computed from nothing (a fresh masker) at the start of the object
 * and inside a string. Prints medians over the reps. A measurement, not a test: no bound.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/format/gguf.h"
#include "common/grammar/gbnf.h"
#include "common/tok/tokenizer.h"
#include "coordinator/api/json_schema.h"
#include "engine/constrain.h"

static const char *const bench_schema =
	"{\"type\":\"object\",\"properties\":{"
	"\"name\":{\"type\":\"string\",\"maxLength\":64},"
	"\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},"
	"\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":16},"
	"\"maxItems\":4}},"
	"\"required\":[\"name\",\"age\",\"score\",\"color\",\"tags\"],"
	"\"additionalProperties\":false}";

static uint64_t bench_rng = 0x9e3779b97f4a7c15ull;

static float bench_normal(void)
{
	double uv[2];
	for (int i = 0; i < 2; i++) {
		bench_rng ^= bench_rng << 13;
		bench_rng ^= bench_rng >> 7;
		bench_rng ^= bench_rng << 17;
		uv[i] = ((double)(bench_rng >> 11) + 0.5) * 0x1p-53;
	}
	double u = uv[0], v = uv[1];
	return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Restarts the object in slot 0. */
static int bench_begin(struct lm_constrain *c, const char *g)
{
	lm_diag d = {{0}};
	int rc = lm_constrain_begin(c, 0, 1, 0, g, (uint32_t)strlen(g), NULL, 0, &d);
	if (rc != 0)
		fprintf(stderr, "bench_grammar: %s\n", d.msg);
	return rc;
}

/* One rep of n tokens in `mode` (0 plain, 1 random, 2 guided): ns per token. */
static double bench_rep(struct lm_constrain *c, struct lm_sampler *s, const char *g, float *row,
			int32_t n, int mode, const struct lm_sampling *p, int *restarts)
{
	uint64_t total = 0;
	if (mode > 0 && bench_begin(c, g) != 0)
		return -1;
	for (int32_t t = 0; t < n; t++) {
		for (int32_t i = 0; i < c->n_vocab; i++)
			row[i] = bench_normal();
		if (mode == 2) {
			/* One admitted token on top (found outside the timing, by the mask). */
			struct lm_constraint *k = &c->slots[0];
			int32_t m = gbnf_masker_mask(k->mk, &k->st, c->bits);
			for (int32_t i = (int32_t)(bench_rng % (uint64_t)c->n_vocab), j = 0;
			     m > 0 && j < c->n_vocab; j++, i = (i + 1) % c->n_vocab)
				if (c->bits[i >> 5] >> (i & 31) & 1) {
					row[i] = 20;
					break;
				}
		}
		int32_t tok;
		lm_diag d = {{0}};
		uint64_t t0 = lm_now_ns();
		if (mode == 0)
			tok = lm_sample(s, row, p, (uint64_t)t);
		else if (lm_constrain_sample(c, s, 0, row, p, &tok, &d) != 0) {
			fprintf(stderr, "bench_grammar: %s\n", d.msg);
			return -1;
		}
		total += lm_now_ns() - t0;
		if (mode > 0 && (gbnf_complete(&c->slots[0].st) || tok == c->eog[0])) {
			(*restarts)++;
			if (bench_begin(c, g) != 0)
				return -1;
		}
	}
	return (double)total / n;
}

/* A fresh masker's first mask of the state after `prefix`: ns. */
static double bench_cold_mask(struct lm_constrain *c, const char *g, const char *prefix)
{
	struct gbnf *gr = NULL;
	struct gbnf_masker *mk = NULL;
	struct gbnf_state st = {0};
	double ns = -1;
	if (gbnf_compile(g, strlen(g), &gr, NULL) == 0 && gbnf_masker_new(gr, c->vocab, &mk) == 0 &&
	    gbnf_state_init(gr, &st, NULL) == 0 &&
	    gbnf_accept(gr, &st, prefix, strlen(prefix), NULL) == 0) {
		uint64_t t0 = lm_now_ns();
		int32_t n = gbnf_masker_mask(mk, &st, c->bits);
		ns = (double)(lm_now_ns() - t0);
		printf("  cold mask after %-14s %8.2f ms  (%d tokens admitted)\n", prefix, ns / 1e6,
		       n);
	}
	gbnf_state_fini(&st);
	gbnf_masker_free(mk);
	gbnf_free(gr);
	return ns;
}

int main(int argc, char **argv)
{
	const char *shared = getenv("LM_SHARED") ? getenv("LM_SHARED") : "../shared";
	char path[1024];
	snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-gemma-4.gguf", shared);
	const char *vocab = path;
	int32_t n = 200, reps = 5;
	struct lm_sampling p = {.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0, .seed = 7};
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--vocab") == 0)
			vocab = argv[i + 1];
		else if (strcmp(argv[i], "--tokens") == 0)
			n = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--reps") == 0)
			reps = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--temp") == 0)
			p.temperature = (float)atof(argv[i + 1]);
	}
	if (n < 1 || reps < 1 || reps > 100) {
		fprintf(stderr, "usage: bench_grammar [--vocab GGUF] [--tokens N] [--reps R<=100] "
				"[--temp T]\n");
		return 2;
	}
	lm_diag d = {{0}};
	gguf_file *f = NULL;
	tok_vocab *tv = NULL;
	if (gguf_open(vocab, &f, &d) != 0 || tok_load(f, &tv, &d) != 0) {
		fprintf(stderr, "bench_grammar: %s\n", d.msg);
		return 1;
	}
	int32_t n_vocab = tok_n_vocab(tv);
	tok_free(tv);
	gguf_close(f);

	struct lm_buf g = {0};
	cJSON *schema = cJSON_Parse(bench_schema);
	if (schema == NULL || json_schema_gbnf(schema, &g, &d) != 0) {
		fprintf(stderr, "bench_grammar: %s\n", d.msg);
		return 1;
	}
	cJSON_Delete(schema);
	struct lm_constrain c;
	struct lm_sampler s;
	lm_constrain_init(&c, 1, n_vocab);
	uint64_t t0 = lm_now_ns();
	if (lm_constrain_vocab(&c, vocab, &d) != 0 || lm_sampler_init(&s, n_vocab) != 0) {
		fprintf(stderr, "bench_grammar: %s\n", d.msg);
		return 1;
	}
	printf("vocabulary %s: %d tokens, trie and bytes built in %.0f ms, %.1f MiB held\n", vocab,
	       n_vocab, (double)(lm_now_ns() - t0) / 1e6,
	       (double)lm_constrain_bytes(&c) / (1 << 20));
	printf("grammar: %zu bytes of GBNF; %d tokens x %d reps, temperature %.2f\n", g.len, n,
	       reps, (double)p.temperature);
	float *row = malloc((size_t)n_vocab * sizeof *row);
	double *per[3];
	int restarts[3] = {0};
	for (int m = 0; m < 3; m++)
		per[m] = malloc((size_t)reps * sizeof(double));
	uint64_t masks[3] = {0}, fast[3] = {0}, drawn[3] = {0};
	for (int r = 0; r < reps; r++) /* interleaved, so load swings hit every mode alike */
		for (int m = 0; m < 3; m++) {
			uint64_t m0 = c.masks, f0 = c.fast, d0 = c.drawn;
			per[m][r] = bench_rep(&c, &s, g.p, row, n, m, &p, &restarts[m]);
			if (per[m][r] < 0)
				return 1;
			masks[m] += c.masks - m0;
			fast[m] += c.fast - f0;
			drawn[m] += c.drawn - d0;
		}
	static const char *const names[3] = {"plain", "random", "guided"};
	for (int m = 0; m < 3; m++) {
		printf("  %-7s %10.1f us/token (median of %d reps)", names[m],
		       bench_median(per[m], reps) / 1e3, reps);
		if (m > 0)
			printf("; draws admitted unmasked %.1f%%, masked draws %llu, objects "
			       "completed %d",
			       drawn[m] ? 100.0 * (double)fast[m] / (double)drawn[m] : 0.0,
			       (unsigned long long)masks[m], restarts[m]);
		printf("\n");
		free(per[m]);
	}
	uint64_t computed = 0, cached = 0;
	gbnf_masker_stats(c.slots[0].mk, &computed, &cached);
	printf("  masker: %llu masks computed, %llu from its cache\n", (unsigned long long)computed,
	       (unsigned long long)cached);
	bench_cold_mask(&c, g.p, "{");
	bench_cold_mask(&c, g.p, "{\"name\":\"ab");
	bench_cold_mask(&c, g.p, "{\"name\":\"ab\",\"age\":1");
	free(row);
	lm_buf_fini(&g);
	lm_sampler_fini(&s);
	lm_constrain_fini(&c);
	return 0;
}

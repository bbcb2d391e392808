/* bench_rollback.c — what each way back to an earlier recurrent state costs (docs/recurrent-
 * cache.md): keeping one state per draft position, or one snapshot and a replay.
 *
 *   bench_rollback --model M.gguf [--draft D] [--reps R] [--threads T]
 *
 * On a model with recurrent layers (qwen35), one slot, one thread by default, prints
 *     state bytes=B layers=L         one slot's live recurrent state, all layers
 *     keep draft=D bytes=B           the D states kept per slot beside it
 *     copy ms=T                      one snapshot: copying one slot's state of every layer
 *     forward tokens=K ms=T          a forward of K tokens (K = 1 .. D + 1) after a prompt
 * each the median of R repetitions. Keeping a state per position costs D copies per verify
 * batch of D + 1 tokens; a snapshot and replay costs one copy per batch and, on a rejection,
 * a forward of up to D tokens.
 *
 * Exit status: 0 success, 1 failure (the reason on stderr), 2 usage error.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* A forward of n tokens of slot 0 from position pos (logits of the last). */
static int run(struct lm_engine *e, int32_t pos, int32_t n, float *logits, lm_diag *d)
{
	struct lm_tok_loc loc[64];
	int32_t ids[64], row = n - 1;
	for (int32_t i = 0; i < n; i++) {
		loc[i] = (struct lm_tok_loc){0, pos + i};
		ids[i] = (pos + i) * 7 % e->model.hp.n_vocab;
	}
	struct lm_batch b = {.n = n, .ids = ids, .loc = loc, .n_out = 1, .out_rows = &row};
	return lm_forward_run(&e->fw, &b, NULL, NULL, logits, d);
}

int main(int argc, char **argv)
{
	const char *model = NULL;
	int draft = 4, reps = 9, threads = 1;
	static const struct option longs[] = {{"model", required_argument, NULL, 'm'},
					      {"draft", required_argument, NULL, 'd'},
					      {"reps", required_argument, NULL, 'r'},
					      {"threads", required_argument, NULL, 't'},
					      {NULL, 0, NULL, 0}};
	for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
		if (c == 'm')
			model = optarg;
		else if (c == 'd')
			draft = atoi(optarg);
		else if (c == 'r')
			reps = atoi(optarg);
		else if (c == 't')
			threads = atoi(optarg);
		else
			return 2;
	}
	if (model == NULL || draft < 1 || draft > 32 || reps < 1 || reps > 1000) {
		fprintf(stderr,
			"usage: bench_rollback --model M.gguf [--draft 1..32] [--reps R]\n");
		return 2;
	}
	lm_diag d = {{0}};
	struct lm_engine e;
	struct lm_engine_cfg cfg = {.model = model,
				    .bo = {.n_threads = threads},
				    .populate = true,
				    .max_seq = 256,
				    .slots = 1,
				    .max_batch = 64,
				    .max_draft = draft,
				    .kv_types = kv_types_uniform(LM_F32, LM_F32)};
	if (lm_engine_open(&e, &cfg, &d) != 0) {
		fprintf(stderr, "bench_rollback: %s\n", d.msg);
		return 1;
	}
	uint64_t live = 0;
	for (int32_t i = 0; i < e.kv.num_layers; i++)
		live += (uint64_t)(e.kv.rec[i].conv_n + e.kv.rec[i].state_n) * sizeof(float);
	printf("state bytes=%llu layers=%d\n", (unsigned long long)live, e.kv.n_recurrent);
	printf("keep draft=%d bytes=%llu\n", draft, (unsigned long long)live * (uint64_t)draft);
	double *t = calloc((size_t)reps, sizeof *t);
	float *logits = malloc((size_t)e.model.hp.n_vocab * sizeof(float));
	int rc = t == NULL || logits == NULL ? 1 : 0;
	for (int r = 0; rc == 0 && r < reps; r++) {
		double t0 = lm_now_s();
		for (int32_t il = 0; il < e.kv.num_layers; il++)
			if (e.kv.rec[il].conv != NULL)
				kv_cache_rec_snapshot(&e.kv, e.kv.base_layer + il, 0, r);
		t[r] = (lm_now_s() - t0) * 1e3;
	}
	qsort(t, (size_t)reps, sizeof *t, cmp_double);
	printf("copy ms=%.3f\n", t[reps / 2]);
	for (int32_t k = 1; rc == 0 && k <= draft + 1; k++) {
		for (int r = 0; rc == 0 && r < reps; r++) {
			rc = run(&e, 0, 16, logits, &d);
			double t0 = lm_now_s();
			if (rc == 0)
				rc = run(&e, 16, k, logits, &d);
			t[r] = (lm_now_s() - t0) * 1e3;
		}
		qsort(t, (size_t)reps, sizeof *t, cmp_double);
		if (rc == 0)
			printf("forward tokens=%d ms=%.3f\n", k, t[reps / 2]);
	}
	if (rc != 0)
		fprintf(stderr, "bench_rollback: %s\n", d.msg[0] ? d.msg : "out of memory");
	free(t);
	free(logits);
	lm_engine_close(&e);
	return rc == 0 ? 0 : 1;
}

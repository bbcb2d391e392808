/* test_cuda_graph.c — the host-side decisions of the CUDA backend's captured steps
 * (kernels/cuda/cuda_graph.h), compiled as plain C: they run on every machine, GPU or not.
 *
 * What would make a replayed graph wrong is a launch that depends on something outside its key:
 * here, that a bucket's attention span covers every position of the bucket and every window,
 * that chunking depends on the key alone, that the fingerprint sees every word and its order,
 * and that the passes of a step (lookup, capture, eager) always end with the step run exactly
 * once, whatever fails. The launches themselves are checked on a GPU by
 * tests/gpu/run_gpu_checks.sh (graphs on against graphs off, bit for bit).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/cuda_graph.h"

TestSuite(cuda_graph, .timeout = 60);

Test(cuda_graph, environment)
{
	cr_expect(lmc_graph_env_on("1"));
	cr_expect(lmc_graph_env_on("on"));
	cr_expect(lmc_graph_env_on("yes"));
	cr_expect(lmc_graph_env_on("true"));
	cr_expect(!lmc_graph_env_on(NULL));
	cr_expect(!lmc_graph_env_on(""));
	cr_expect(!lmc_graph_env_on("0"));
	cr_expect(!lmc_graph_env_on("off"));
	cr_expect(!lmc_graph_env_on("2"));
	cr_expect(!lmc_graph_env_on("1 "));
	cr_expect_eq(lmc_graph_bucket_env(NULL), 256);
	cr_expect_eq(lmc_graph_bucket_env(""), 256);
	cr_expect_eq(lmc_graph_bucket_env("8"), 8);
	cr_expect_eq(lmc_graph_bucket_env("1"), 1);
	cr_expect_eq(lmc_graph_bucket_env("65536"), 65536);
	cr_expect_eq(lmc_graph_bucket_env("65537"), 256);
	cr_expect_eq(lmc_graph_bucket_env("0"), 256);
	cr_expect_eq(lmc_graph_bucket_env("-8"), 256);
	cr_expect_eq(lmc_graph_bucket_env("8x"), 256);
	cr_expect_eq(lmc_graph_bucket_env("x"), 256);
}

Test(cuda_graph, batch_sizes)
{
	cr_expect(!lmc_graph_batch_ok(0));
	cr_expect(!lmc_graph_batch_ok(-1));
	cr_expect(lmc_graph_batch_ok(1));
	cr_expect(lmc_graph_batch_ok(8));
	cr_expect(!lmc_graph_batch_ok(9));
	cr_expect(!lmc_graph_batch_ok(512));
}

/* Every position of a bucket has the bucket's end, which is above it and at most a bucket
 * above it; the end of a batch is its latest position's. */
Test(cuda_graph, buckets)
{
	const int32_t buckets[] = {1, 8, 256};
	for (int b = 0; b < 3; b++) {
		const int32_t bk = buckets[b];
		for (int32_t pos = 0; pos < 3000; pos++) {
			const struct lm_tok_loc l = {.slot = 0, .pos = pos};
			const int32_t hi = lmc_graph_hi(&l, 1, bk);
			cr_assert(hi > pos && hi - bk <= pos && hi % bk == 0,
				  "pos %d bucket %d: %d", pos, bk, hi);
			const struct lm_tok_loc first = {.slot = 0, .pos = hi - bk};
			cr_assert_eq(lmc_graph_hi(&first, 1, bk), hi);
		}
	}
	const struct lm_tok_loc two[3] = {{0, 700}, {1, 3}, {2, 255}};
	cr_expect_eq(lmc_graph_hi(two, 3, 256), 768);
	cr_expect_eq(lmc_graph_hi(two + 1, 2, 256), 256);
	cr_expect_eq(lmc_graph_hi(two + 1, 1, 8), 8);
	const struct lm_tok_loc bad[2] = {{0, 5}, {0, -1}};
	cr_expect_eq(lmc_graph_hi(bad, 2, 256), -1);
	const struct lm_tok_loc top = {0, INT32_MAX - 1};
	cr_expect_eq(lmc_graph_hi(&top, 1, 256), -1);
	cr_expect_eq(lmc_graph_hi(&top, 1, 1), INT32_MAX);
}

/* The span a token reads, as attention.cu's att_lo gives it. */
static int32_t span(int32_t pos, int32_t window)
{
	const int32_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
	return pos - lo + 1;
}

/* A step's attention span covers every token of its bucket on every layer whose ranges pass
 * (cpu_attn_check_ranges: span <= ctx), is never wider than ctx (the planner's bound), and is
 * the same for every position of the bucket. */
Test(cuda_graph, attention_span_covers_the_bucket)
{
	const int32_t windows[] = {0, 1, 8, 100, 256, 4096};
	const int32_t ctxs[] = {8, 100, 263, 1024, 8192};
	const int32_t buckets[] = {8, 256};
	for (int b = 0; b < 2; b++)
		for (int w = 0; w < 6; w++)
			for (int k = 0; k < 5; k++) {
				const int32_t win = windows[w], ctx = ctxs[k];
				if (win > ctx)
					continue; /* a ring holds its window */
				for (int32_t pos = 0; pos < 2 * ctx + 300; pos++) {
					if (win == 0 && pos >= ctx)
						break; /* a global layer: pos < ctx */
					const struct lm_tok_loc l = {0, pos};
					const int32_t hi = lmc_graph_hi(&l, 1, buckets[b]);
					const int32_t m = lmc_graph_lmax(hi, win, ctx);
					cr_assert_geq(m, span(pos, win), "pos %d window %d ctx %d",
						      pos, win, ctx);
					cr_assert_leq(m, ctx);
					const struct lm_tok_loc f = {0, hi - buckets[b]};
					cr_assert_eq(lmc_graph_lmax(lmc_graph_hi(&f, 1, buckets[b]),
								    win, ctx),
						     m);
				}
			}
	cr_expect_eq(lmc_graph_lmax(256, 0, 4096), 256);
	cr_expect_eq(lmc_graph_lmax(256, 8, 4096), 8);
	cr_expect_eq(lmc_graph_lmax(512, 0, 300), 300);
}

/* Chunks fill the cap, one token at least, the batch at most. */
Test(cuda_graph, attention_chunks)
{
	const size_t cap = (size_t)64 << 20;
	cr_expect_eq(lmc_graph_attn_chunk(1, 32, 512, cap), 1);
	cr_expect_eq(lmc_graph_attn_chunk(8, 32, 512, cap), 8);
	cr_expect_eq(lmc_graph_attn_chunk(8, 64, 1 << 20, cap), 1); /* one token is over the cap */
	cr_expect_eq(lmc_graph_attn_chunk(8, 64, 65536, cap), 4);   /* 16 MiB a token */
	for (int heads = 1; heads <= 128; heads *= 2)
		for (int32_t lmax = 1; lmax <= (1 << 20); lmax *= 3) {
			const int k = lmc_graph_attn_chunk(8, heads, lmax, cap);
			const size_t one = (size_t)heads * (size_t)lmax * sizeof(float);
			cr_assert(k >= 1 && k <= 8);
			cr_assert(k == 1 || (size_t)k * one <= cap);
			cr_assert(k == 8 || (size_t)(k + 1) * one > cap);
		}
}

/* The fingerprint sees every word and the order, and streams: two folds in a row equal one. */
Test(cuda_graph, fingerprint)
{
	const uint64_t a[4] = {1, 2, 3, 4}, b[4] = {2, 1, 3, 4}, z[4] = {0};
	const uint64_t h = lmc_graph_fold(LMC_GRAPH_FOLD_SEED, a, 4);
	cr_expect_eq(h, lmc_graph_fold(lmc_graph_fold(LMC_GRAPH_FOLD_SEED, a, 1), a + 1, 3));
	cr_expect_neq(h, lmc_graph_fold(LMC_GRAPH_FOLD_SEED, b, 4));
	cr_expect_neq(lmc_graph_fold(LMC_GRAPH_FOLD_SEED, z, 3),
		      lmc_graph_fold(LMC_GRAPH_FOLD_SEED, z, 4));
	/* Every single bit of every word moves it. */
	for (int w = 0; w < 4; w++)
		for (int bit = 0; bit < 64; bit++) {
			uint64_t c[4];
			memcpy(c, a, sizeof c);
			c[w] ^= (uint64_t)1 << bit;
			cr_assert_neq(lmc_graph_fold(LMC_GRAPH_FOLD_SEED, c, 4), h,
				      "word %d bit %d", w, bit);
		}
}

Test(cuda_graph, keys)
{
	const struct lmc_graph_key k = {.n = 1, .hi = 256, .ops = 77, .gen = 3};
	struct lmc_graph_key o = k;
	cr_expect(lmc_graph_key_eq(&k, &o));
	cr_expect(!lmc_graph_stale(&o, 3));
	o.gen = 4;
	cr_expect(!lmc_graph_key_eq(&k, &o));
	cr_expect(lmc_graph_stale(&k, 4));
	cr_expect(lmc_graph_same_failure(&k, &o)); /* a failure does not depend on the scratch */
	o = k;
	o.hi = 512;
	cr_expect(!lmc_graph_key_eq(&k, &o));
	cr_expect(!lmc_graph_same_failure(&k, &o));
	o = k;
	o.n = 2;
	cr_expect(!lmc_graph_key_eq(&k, &o));
	o = k;
	o.ops = 78;
	cr_expect(!lmc_graph_key_eq(&k, &o));
	cr_expect(!lmc_graph_same_failure(&k, &o));
}

Test(cuda_graph, decisions)
{
	struct lmc_step_verdict v;
	/* LOOKUP: a graph found is launched; none: capture next (or eager, after a failure). */
	v = lmc_step_decide(LMC_STEP_LOOKUP, LMC_OPS_OK, true, false, false);
	cr_expect(v.launch && !v.again && !v.keep && !v.fail_key && v.next == LMC_NEXT_LOOKUP);
	v = lmc_step_decide(LMC_STEP_LOOKUP, LMC_OPS_OK, false, false, false);
	cr_expect(!v.launch && v.again && !v.fail_key && v.next == LMC_NEXT_CAPTURE);
	v = lmc_step_decide(LMC_STEP_LOOKUP, LMC_OPS_OK, false, true, false);
	cr_expect(!v.launch && v.again && !v.fail_key && v.next == LMC_NEXT_EAGER);
	v = lmc_step_decide(LMC_STEP_LOOKUP, LMC_OPS_SPOILED, true, false, false);
	cr_expect(!v.launch && v.again && v.fail_key && v.next == LMC_NEXT_EAGER);
	v = lmc_step_decide(LMC_STEP_LOOKUP, LMC_OPS_DEVICE, true, false, false);
	cr_expect(!v.launch && v.again && !v.fail_key && v.next == LMC_NEXT_EAGER);
	/* A refusal is the step's own error, in every pass: nothing launched, nothing again. */
	v = lmc_step_decide(LMC_STEP_LOOKUP, LMC_OPS_REFUSED, true, false, false);
	cr_expect(!v.launch && !v.again && !v.keep && v.next == LMC_NEXT_LOOKUP);
	v = lmc_step_decide(LMC_STEP_CAPTURE, LMC_OPS_REFUSED, false, false, false);
	cr_expect(!v.launch && !v.again && !v.keep && !v.fail_key);
	/* CAPTURE: kept and launched, or failed and eager. */
	v = lmc_step_decide(LMC_STEP_CAPTURE, LMC_OPS_OK, false, false, true);
	cr_expect(v.launch && v.keep && !v.again && !v.fail_key && v.next == LMC_NEXT_LOOKUP);
	v = lmc_step_decide(LMC_STEP_CAPTURE, LMC_OPS_OK, false, false, false);
	cr_expect(!v.launch && !v.keep && v.again && v.fail_key && v.next == LMC_NEXT_EAGER);
	v = lmc_step_decide(LMC_STEP_CAPTURE, LMC_OPS_SPOILED, false, false, true);
	cr_expect(!v.launch && !v.keep && v.again && v.fail_key && v.next == LMC_NEXT_EAGER);
	v = lmc_step_decide(LMC_STEP_CAPTURE, LMC_OPS_DEVICE, false, false, true);
	cr_expect(!v.launch && !v.keep && v.again && v.fail_key && v.next == LMC_NEXT_EAGER);
}

Test(cuda_graph, opening)
{
	enum lmc_step_next next = LMC_NEXT_LOOKUP;
	cr_expect_eq(lmc_step_open(false, 1, &next), LMC_STEP_OFF);
	cr_expect_eq(lmc_step_open(true, 9, &next), LMC_STEP_OFF);
	cr_expect_eq(lmc_step_open(true, 1, &next), LMC_STEP_LOOKUP);
	next = LMC_NEXT_CAPTURE;
	cr_expect_eq(lmc_step_open(false, 1, &next), LMC_STEP_OFF);
	cr_expect_eq(next, LMC_NEXT_CAPTURE); /* a step declined for its size takes nothing */
	cr_expect_eq(lmc_step_open(true, 1, &next), LMC_STEP_CAPTURE);
	cr_expect_eq(next, LMC_NEXT_LOOKUP);
	next = LMC_NEXT_EAGER;
	cr_expect_eq(lmc_step_open(true, 1, &next), LMC_STEP_OFF);
	cr_expect_eq(lmc_step_open(true, 1, &next), LMC_STEP_LOOKUP);
}

/* The backend's passes against the engine's loop (engine/forward.c: steps in up to three passes,
 * then none), for a run of tokens of one key: however captures go, each token runs exactly
 * once (a launch, or an eager pass), in at most three passes, and a key whose capture failed
 * is never captured again. */
struct sim {
	enum lmc_step_next next;
	bool have_graph, failed;
	bool capture_works; /* what the device would say */
	int captures;
};

/* One token; returns its passes, *runs the times it ran. */
static int sim_token(struct sim *s, int *runs)
{
	*runs = 0;
	for (int pass = 0;; pass++) {
		const enum lmc_step_mode mode =
			pass < 3 ? lmc_step_open(true, 1, &s->next) : LMC_STEP_OFF;
		if (mode == LMC_STEP_OFF) {
			++*runs;
			return pass + 1;
		}
		const bool ok = mode == LMC_STEP_CAPTURE && s->capture_works;
		s->captures += mode == LMC_STEP_CAPTURE;
		const struct lmc_step_verdict v =
			lmc_step_decide(mode, LMC_OPS_OK, s->have_graph, s->failed, ok);
		s->next = v.next;
		s->failed |= v.fail_key;
		s->have_graph |= v.keep;
		*runs += v.launch;
		if (!v.again)
			return pass + 1;
	}
}

Test(cuda_graph, passes_end_with_the_step_run_once)
{
	for (int works = 0; works < 2; works++) {
		struct sim s = {.capture_works = works};
		for (int t = 0; t < 20; t++) {
			int runs;
			const int passes = sim_token(&s, &runs);
			cr_assert_eq(runs, 1, "token %d", t);
			cr_assert_leq(passes, 3, "token %d", t);
			if (works)
				cr_assert_eq(passes, t == 0 ? 2 : 1, "token %d", t);
			else
				/* A failed key costs a lookup (host work, no launch) per token. */
				cr_assert_eq(passes, t == 0 ? 3 : 2, "token %d: %d", t, passes);
		}
		cr_expect_eq(s.captures, 1);
	}
}

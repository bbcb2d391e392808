/* test_spec.c — the draft sources of speculative decoding (coordinator/sched/spec.h).
 *
 * N-gram lookup against hand-made sequences; the draft model against the single-process engine
 * run greedily on the same file (its drafts must be the model's own greedy continuation, also
 * after it was rolled back by a rejection or a sequence replaced by another).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/sched/spec.h"
#include "common/format/synth.h"
#include "engine/engine.h"
#include "engine/sampler.h"

TestSuite(spec, .timeout = 60);

static int32_t ngram(int32_t min, int32_t max_m, const int32_t *tok, int32_t n, int32_t max,
		     int32_t *out)
{
	struct spec_source s;
	lm_diag d = {{0}};
	cr_assert_eq(spec_ngram_init(&s, min, max_m, &d), 0, "%s", d.msg);
	int32_t k = s.iface->propose(s.ctx, 0, tok, n, max, out);
	spec_source_fini(&s);
	return k;
}

Test(spec, ngram_drafts_what_followed_the_latest_earlier_suffix)
{
	int32_t out[8];
	/* [1 2] occurred at 0: what followed it, up to 3 tokens. */
	const int32_t a[] = {1, 2, 3, 9, 1, 2};
	cr_assert_eq(ngram(1, 3, a, 6, 3, out), 3);
	cr_expect(out[0] == 3 && out[1] == 9 && out[2] == 1);
	/* Two earlier occurrences of [1 2]: the latest (followed by 9) wins. */
	const int32_t b[] = {1, 2, 8, 1, 2, 9, 1, 2};
	cr_assert_eq(ngram(1, 3, b, 8, 2, out), 2);
	cr_expect(out[0] == 9 && out[1] == 1);
	/* The longest suffix first: [7 1 2] occurred, followed by 4, though [1 2] also did later
	 * (followed by 5). */
	const int32_t c[] = {7, 1, 2, 4, 1, 2, 5, 7, 1, 2};
	cr_assert_eq(ngram(1, 3, c, 10, 1, out), 1);
	cr_expect_eq(out[0], 4);
	/* A draft stops where the sequence ends. */
	const int32_t e[] = {6, 6};
	cr_assert_eq(ngram(1, 3, e, 2, 5, out), 1);
	cr_expect_eq(out[0], 6);
	/* Nothing repeats, or only shorter than ngram_min: no draft. */
	const int32_t f[] = {1, 2, 3, 4, 5};
	cr_expect_eq(ngram(1, 3, f, 5, 4, out), 0);
	const int32_t g[] = {1, 2, 3, 1, 4, 1};
	cr_expect_eq(ngram(2, 3, g, 6, 4, out), 0);
	cr_expect_eq(ngram(1, 3, g, 6, 4, out), 2); /* [1] at 3, followed by [4 1] */
	cr_expect(out[0] == 4 && out[1] == 1);
	struct spec_source s;
	lm_diag d = {{0}};
	cr_expect_eq(spec_ngram_init(&s, 0, 3, &d), LM_EINVAL);
	cr_expect_eq(spec_ngram_init(&s, 4, 3, &d), LM_EINVAL);
	cr_expect_eq(spec_ngram_init(&s, 1, 9, &d), LM_EINVAL);
}

#define T_VOCAB 300

static void write_model(char *path, size_t cap, int32_t vocab)
{
	snprintf(path, cap, "/tmp/lm_test_spec_XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.dim = 64;
	o.layers = 2;
	o.heads = 4;
	o.kv_heads = 2;
	o.ffn = 128;
	o.vocab = vocab;
	o.ctx = 128;
	o.type = LM_F32;
	o.seed = 5;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
}

/* The model's greedy continuation of tok[0..n), k tokens, by the engine. */
static void greedy(struct lm_engine *e, const int32_t *tok, int32_t n, int32_t k, int32_t *out)
{
	static float logits[T_VOCAB];
	struct lm_sampler smp;
	cr_assert_eq(lm_sampler_init(&smp, T_VOCAB), 0);
	struct lm_sampling p = {.temperature = 0};
	struct lm_tok_loc loc[64];
	for (int32_t i = 0; i < n; i++)
		loc[i] = (struct lm_tok_loc){0, i};
	int32_t last = n - 1, row = 0;
	struct lm_batch b = {.n = n, .ids = tok, .loc = loc, .n_out = 1, .out_rows = &last};
	lm_diag d = {{0}};
	cr_assert_eq(lm_forward_run(&e->fw, &b, NULL, NULL, logits, &d), 0, "%s", d.msg);
	for (int32_t i = 0; i < k; i++) {
		out[i] = lm_sample(&smp, logits, &p, 0);
		struct lm_tok_loc l = {0, n + i};
		struct lm_batch one = {
			.n = 1, .ids = &out[i], .loc = &l, .n_out = 1, .out_rows = &row};
		cr_assert_eq(lm_forward_run(&e->fw, &one, NULL, NULL, logits, &d), 0, "%s", d.msg);
	}
	lm_sampler_fini(&smp);
}

Test(spec, a_draft_model_drafts_its_greedy_continuation_and_rolls_back)
{
	char path[64];
	write_model(path, sizeof path, T_VOCAB);
	struct lm_engine ref;
	struct lm_engine_cfg ec = {.model = path,
				   .bo = {.n_threads = 1},
				   .populate = true,
				   .max_seq = 64,
				   .slots = 1,
				   .max_batch = 64,
				   .kv_types = kv_types_uniform(LM_F32, LM_F32)};
	lm_diag d = {{0}};
	cr_assert_eq(lm_engine_open(&ref, &ec, &d), 0, "%s", d.msg);

	struct spec_source s;
	struct spec_draft_cfg dc = {.model = path,
				    .n_vocab = T_VOCAB,
				    .slots = 3,
				    .max_seq = 64,
				    .max_draft = 4,
				    .threads = 1,
				    .kv = kv_types_uniform(LM_F32, LM_F32)};
	cr_assert_eq(spec_draft_init(&s, &dc, &d), 0, "%s", d.msg);
	int32_t seq[64] = {1, 17, 42, 99, 5, 250, 7}, n = 7, got[4], want[4];
	for (int step = 0; step < 6; step++) {
		cr_assert_eq(s.iface->propose(s.ctx, 2, seq, n, 4, got), 4);
		greedy(&ref, seq, n, 4, want);
		cr_expect_eq(memcmp(got, want, sizeof got), 0, "step %d", step);
		/* The target accepts a different number each step, and corrects the next token:
		 * the draft cache holds rows of tokens that are no longer the sequence's. */
		int32_t acc = step % 3;
		memcpy(seq + n, got, (size_t)acc * sizeof *got);
		n += acc;
		seq[n++] = (got[acc] + 1 + step) % T_VOCAB;
	}
	/* Another sequence in the same slot after a release, and one beside it. */
	s.iface->release(s.ctx, 2);
	const int32_t other[3] = {3, 4, 5};
	cr_assert_eq(s.iface->propose(s.ctx, 2, other, 3, 2, got), 2);
	greedy(&ref, other, 3, 2, want);
	cr_expect(got[0] == want[0] && got[1] == want[1]);
	cr_assert_eq(s.iface->propose(s.ctx, 0, seq, n, 1, got), 1);
	greedy(&ref, seq, n, 1, want);
	cr_expect_eq(got[0], want[0]);
	/* Nothing that would run past the context. */
	cr_expect_eq(s.iface->propose(s.ctx, 1, seq, 62, 4, got), 0);
	spec_source_fini(&s);
	lm_engine_close(&ref);

	/* A draft model of another vocabulary is refused, naming both sizes. */
	char other_path[64];
	write_model(other_path, sizeof other_path, T_VOCAB + 1);
	dc.model = other_path;
	cr_expect_eq(spec_draft_init(&s, &dc, &d), LM_EINVAL);
	cr_expect(strstr(d.msg, "301 tokens, the model's 300") != NULL, "%s", d.msg);
	unlink(other_path);
	unlink(path);
}

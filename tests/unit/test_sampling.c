/* Samplers against the distributions they promise: counts over many seeded draws are compared
 * with softmax computed independently in double precision. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/sampler.h"

#define V 8
static const float logits[V] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, -5.0f, 1.5f};

static void softmax(const float *x, int n, double t, double *p)
{
	double m = -INFINITY, s = 0;
	for (int i = 0; i < n; i++)
		m = fmax(m, x[i]);
	for (int i = 0; i < n; i++)
		s += (p[i] = exp((x[i] - m) / t));
	for (int i = 0; i < n; i++)
		p[i] /= s;
}

static void histogram(struct lm_sampler *s, const struct lm_sampling *p, int draws, int *count)
{
	memset(count, 0, V * sizeof *count);
	for (int i = 0; i < draws; i++)
		count[lm_sample(s, logits, p, (uint64_t)i)]++;
}

Test(sampling, greedy_is_argmax_with_lowest_id_on_ties)
{
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, V), 0);
	struct lm_sampling p = {.temperature = 0};
	cr_expect_eq(lm_sample(&s, logits, &p, 0), 1);
	float tie[V] = {0, 7, 1, 7, NAN, 0, 0, 0};
	cr_expect_eq(lm_sample(&s, tie, &p, 0), 1);
	float nan_first[V] = {NAN, 1, 2, 3, 4, 5, 6, -1};
	cr_expect_eq(lm_sample(&s, nan_first, &p, 0), 6);
	/* top_k = 1 is greedy at any temperature. */
	p = (struct lm_sampling){.temperature = 5, .top_k = 1, .top_p = 1, .seed = 3};
	for (int i = 0; i < 100; i++)
		cr_expect_eq(lm_sample(&s, logits, &p, (uint64_t)i), 1);
	lm_sampler_fini(&s);
}

Test(sampling, temperature_draws_follow_softmax)
{
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, V), 0);
	const int n = 200000;
	int count[V];
	double want[V];
	for (int ti = 0; ti < 2; ti++) {
		double t = ti == 0 ? 1.0 : 0.5;
		struct lm_sampling p = {.temperature = (float)t, .top_p = 1, .seed = 42};
		histogram(&s, &p, n, count);
		softmax(logits, V, t, want);
		for (int i = 0; i < V; i++) {
			double sd = sqrt(n * want[i] * (1 - want[i])) + 1;
			cr_expect(fabs(count[i] - n * want[i]) < 5 * sd,
				  "T=%g token %d: %d vs %.0f", t, i, count[i], n * want[i]);
		}
	}
	lm_sampler_fini(&s);
}

Test(sampling, filters_remove_exactly_what_they_promise)
{
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, V), 0);
	int count[V];
	/* top-k 3 keeps ids 1 (3.0), 5 (2.9), 2 (2.5), in softmax proportions among themselves. */
	struct lm_sampling p = {.temperature = 1, .top_k = 3, .top_p = 1, .seed = 7};
	histogram(&s, &p, 60000, count);
	for (int i = 0; i < V; i++)
		if (i != 1 && i != 5 && i != 2)
			cr_expect_eq(count[i], 0, "top-k let %d through", i);
	float three[3] = {3.0f, 2.9f, 2.5f};
	double w3[3];
	softmax(three, 3, 1, w3);
	cr_expect(fabs(count[1] / 60000.0 - w3[0]) < 0.01);
	cr_expect(fabs(count[2] / 60000.0 - w3[2]) < 0.01);

	/* top-p: the smallest prefix reaching p. */
	double pr[V];
	softmax(logits, V, 1, pr);
	double p12 = pr[1] + pr[5]; /* the two most likely */
	p = (struct lm_sampling){.temperature = 1, .top_p = (float)(p12 - 1e-4), .seed = 9};
	histogram(&s, &p, 20000, count);
	for (int i = 0; i < V; i++)
		if (i != 1 && i != 5)
			cr_expect_eq(count[i], 0, "top-p let %d through", i);
	cr_expect_gt(count[5], 0);

	/* min-p: keep p_i >= min_p * p_max; 0.5 keeps ids 1, 5 and 2 (e^-0.5 = 0.61). */
	p = (struct lm_sampling){.temperature = 1, .top_p = 1, .min_p = 0.5f, .seed = 11};
	histogram(&s, &p, 20000, count);
	for (int i = 0; i < V; i++)
		cr_expect_eq(count[i] > 0, i == 1 || i == 5 || i == 2, "min-p on %d: %d", i,
			     count[i]);
	lm_sampler_fini(&s);
}

Test(sampling, same_seed_same_tokens)
{
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, V), 0);
	struct lm_sampling a = {.temperature = 1.5f, .top_p = 1, .seed = 1234};
	struct lm_sampling b = a;
	b.seed = 1235;
	int same = 0;
	for (uint64_t i = 0; i < 500; i++) {
		int32_t x = lm_sample(&s, logits, &a, i);
		cr_assert_eq(x, lm_sample(&s, logits, &a, i));
		same += x == lm_sample(&s, logits, &b, i);
	}
	cr_expect_lt(same, 400, "another seed should give other draws");
	/* Uniforms are in [0, 1) and not constant. */
	double lo = 1, hi = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		double u = lm_sample_uniform(5, i);
		cr_assert(u >= 0 && u < 1);
		lo = fmin(lo, u);
		hi = fmax(hi, u);
	}
	cr_expect(lo < 0.01 && hi > 0.99);
	lm_sampler_fini(&s);
}

Test(sampling, checks_and_logprob)
{
	lm_diag d;
	struct lm_sampling p = LM_SAMPLING_DEFAULT;
	cr_expect_eq(lm_sampling_check(&p, &d), 0);
	p.top_p = 0;
	cr_expect_eq(lm_sampling_check(&p, &d), LM_EINVAL);
	p = LM_SAMPLING_DEFAULT;
	p.temperature = NAN;
	cr_expect_eq(lm_sampling_check(&p, &d), LM_EINVAL);
	p = LM_SAMPLING_DEFAULT;
	p.min_p = 2;
	cr_expect_eq(lm_sampling_check(&p, &d), LM_EINVAL);
	double pr[V];
	softmax(logits, V, 1, pr);
	for (int i = 0; i < V; i++)
		cr_expect(fabs(lm_logprob(logits, V, i) - log(pr[i])) < 1e-5);
}

/* One row's norm serves every token of it (the worker's top logprobs), and a NaN logit counts
 * as -inf: a probability of 0 that leaves the others as the softmax of the rest. */
Test(sampling, logprob_from_one_norm)
{
	float row[V + 1];
	memcpy(row, logits, sizeof logits);
	row[V] = NAN;
	const struct lm_log_norm z = lm_log_norm(row, V + 1);
	cr_expect_eq(z.max, 3.0);
	double pr[V];
	softmax(logits, V, 1, pr);
	for (int i = 0; i < V; i++) {
		cr_expect(fabs(lm_logprob_of(z, row[i]) - log(pr[i])) < 1e-5, "token %d", i);
		cr_expect_eq(lm_logprob_of(z, row[i]), lm_logprob(row, V + 1, i));
	}
	cr_expect(isinf(lm_logprob_of(z, row[V])) && lm_logprob_of(z, row[V]) < 0);
}

/* Verification of a draft: greedy, the longest prefix of the draft that is the argmax of its
 * row, then the row's own argmax. */
Test(sampling, verify_greedy_takes_the_matching_prefix_and_the_next_token)
{
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, V), 0);
	struct lm_sampling p = {.temperature = 0};
	/* Row r's argmax is r + 1. */
	float rows[4][V];
	for (int r = 0; r < 4; r++)
		for (int i = 0; i < V; i++)
			rows[r][i] = i == r + 1 ? 5.0f : (float)i * 0.1f;
	int32_t out[4];
	const int32_t all[3] = {1, 2, 3}, two[3] = {1, 2, 7}, none[3] = {6, 2, 3};
	cr_expect_eq(lm_sample_verify(&s, rows[0], V, all, 3, &p, 0, out), 4);
	cr_expect(out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 4);
	cr_expect_eq(lm_sample_verify(&s, rows[0], V, two, 3, &p, 0, out), 3);
	cr_expect(out[0] == 1 && out[1] == 2 && out[2] == 3, "the correction is row 2's argmax");
	cr_expect_eq(lm_sample_verify(&s, rows[0], V, none, 3, &p, 0, out), 1);
	cr_expect_eq(out[0], 1);
	lm_sampler_fini(&s);
}

/* Sampled: every emitted token is the draw plain decoding makes at that step, so the output is
 * the same with and without speculation; and a fixed draft d is accepted with probability p(d)
 * (the rejection rule for a deterministic draft), the rejected draws spread as p without d. */
Test(sampling, verify_sampled_draws_what_plain_decoding_draws)
{
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, V), 0);
	struct lm_sampling p = {.temperature = 0.9f, .top_k = 0, .top_p = 1, .min_p = 0, .seed = 9};
	float rows[3][V];
	for (int r = 0; r < 3; r++)
		memcpy(rows[r], logits, sizeof logits);
	const int draws = 200000;
	int accepted = 0, after[V] = {0};
	for (int i = 0; i < draws; i++) {
		p.seed = (uint64_t)i;
		int32_t d[2] = {5, 2}, out[3];
		int32_t n = lm_sample_verify(&s, rows[0], V, d, 2, &p, 40, out);
		for (int32_t j = 0; j < n; j++)
			cr_assert_eq(out[j], lm_sample(&s, logits, &p, 40 + (uint64_t)j));
		if (out[0] == 5)
			accepted++;
		else
			after[out[0]]++;
	}
	double prob[V];
	softmax(logits, V, 0.9, prob);
	const double rate = (double)accepted / draws;
	cr_expect(fabs(rate - prob[5]) < 4 * sqrt(prob[5] * (1 - prob[5]) / draws),
		  "draft 5 accepted %.4f of the time, p = %.4f", rate, prob[5]);
	for (int i = 0; i < V; i++) {
		if (i == 5)
			continue;
		const double want = prob[i] / (1 - prob[5]),
			     got = (double)after[i] / (draws - accepted);
		cr_expect(fabs(got - want) < 0.01, "after a rejection, %d: %.4f, want %.4f", i, got,
			  want);
	}
	lm_sampler_fini(&s);
}

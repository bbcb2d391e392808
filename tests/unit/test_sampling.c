/* Samplers against the distributions they promise: counts over many seeded draws are compared
 * with softmax computed independently in double precision. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
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

/* The sampler as sampler.h defines it, written plainly: every candidate sorted with qsort
 * (descending logit, ascending id on ties), then the filters and the draw. lm_sample takes
 * faster ways to the same order (a heap for top-k, a radix sort otherwise) and must draw the
 * same token every time. */
struct ref_cand {
	float logit;
	int32_t id;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

static int32_t ref_sample(const float *row, int32_t n, const struct lm_sampling *p, uint64_t step,
			  struct ref_cand *c)
{
	for (int32_t i = 0; i < n; i++)
		c[i] = (struct ref_cand){isnan(row[i]) ? -INFINITY : row[i], i};
	qsort(c, (size_t)n, sizeof *c, ref_cmp);
	if (!(p->temperature > 0) || c[0].logit == -INFINITY)
		return c[0].id;
	if (p->top_k > 0 && p->top_k < n)
		n = p->top_k;
	double max = c[0].logit;
	if (p->top_p < 1) {
		double sum = 0, cum = 0;
		for (int32_t i = 0; i < n; i++)
			sum += exp((double)c[i].logit - max);
		for (int32_t i = 0; i < n; i++) {
			cum += exp((double)c[i].logit - max) / sum;
			if (cum >= p->top_p) {
				n = i + 1;
				break;
			}
		}
	}
	if (p->min_p > 0) {
		int32_t keep = 1;
		while (keep < n && (double)c[keep].logit >= max + log((double)p->min_p))
			keep++;
		n = keep;
	}
	double total = 0, acc = 0;
	for (int32_t i = 0; i < n; i++)
		total += exp(((double)c[i].logit - max) / p->temperature);
	const double u = lm_sample_uniform(p->seed, step) * total;
	for (int32_t i = 0; i < n; i++) {
		acc += exp(((double)c[i].logit - max) / p->temperature);
		if (u < acc)
			return c[i].id;
	}
	return c[n - 1].id;
}

/* Rows of every kind the order has to get right: spread values, many ties, signed zeros (equal
 * to sample_cmp), -inf, NaN (as -inf), huge magnitudes, and all -inf. */
static void ref_row(float *l, int32_t n, int kind, unsigned *seed)
{
	for (int32_t i = 0; i < n; i++) {
		const float g = ((float)rand_r(seed) / (float)RAND_MAX - 0.5f) * 8;
		const int r = rand_r(seed);
		switch (kind) {
		case 1:
			l[i] = (float)(r % 5);
			break;
		case 2:
			l[i] = r % 3 == 0 ? -0.0f : r % 3 == 1 ? 0.0f : g;
			break;
		case 3:
			l[i] = r % 4 == 0 ? -INFINITY : g;
			break;
		case 4:
			l[i] = r % 7 == 0 ? NAN : g;
			break;
		case 5:
			l[i] = r % 2 ? -1e30f : 1e-30f * (float)(r % 3);
			break;
		case 6:
			l[i] = -INFINITY;
			break;
		default:
			l[i] = g;
		}
	}
}

Test(sampling, draws_what_the_plain_sampler_draws)
{
	static const int32_t sizes[] = {1, 2, 3, 7, 64, 257, 1000, 4096};
	static const float temps[] = {0.0f, 0.3f, 0.8f, 1.5f};
	static const float top_p[] = {1.0f, 0.9f, 0.5f}, min_p[] = {0.0f, 0.05f, 0.5f};
	unsigned seed = 7;
	long n_cases = 0;
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		const int32_t n = sizes[si];
		const int32_t top_k[] = {0, 1, 5, 40, n, n + 3};
		float *l = malloc((size_t)n * sizeof *l);
		struct ref_cand *c = malloc((size_t)n * sizeof *c);
		struct lm_sampler s;
		cr_assert(l != NULL && c != NULL && lm_sampler_init(&s, n) == 0);
		for (int kind = 0; kind < 7; kind++) {
			ref_row(l, n, kind, &seed);
			for (int a = 0; a < 4; a++)
				for (int b = 0; b < 6; b++)
					for (int t = 0; t < 3; t++) {
						struct lm_sampling p = LM_SAMPLING_DEFAULT;
						p.temperature = temps[a];
						p.top_k = top_k[b];
						p.top_p = top_p[t];
						p.min_p = min_p[(a + b + t) % 3];
						p.seed = (uint64_t)rand_r(&seed);
						const uint64_t step =
							(uint64_t)(a * 18 + b * 3 + t);
						cr_expect_eq(lm_sample(&s, l, &p, step),
							     ref_sample(l, n, &p, step, c),
							     "n %d, rows of kind %d, T %g, top_k "
							     "%d, top_p "
							     "%g, min_p %g",
							     n, kind, (double)p.temperature,
							     p.top_k, (double)p.top_p,
							     (double)p.min_p);
						n_cases++;
					}
		}
		lm_sampler_fini(&s);
		free(c);
		free(l);
	}
	cr_expect_eq(n_cases, 8 * 7 * 72);
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

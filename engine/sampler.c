/* sampler.c — greedy and filtered temperature sampling. See sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int lm_sampler_init(struct lm_sampler *s, int32_t n_vocab)
{
	s->n_vocab = n_vocab;
	s->cand = malloc((size_t)(n_vocab > 0 ? n_vocab : 1) * sizeof *s->cand);
	s->tmp = malloc((size_t)(n_vocab > 0 ? n_vocab : 1) * sizeof *s->tmp);
	s->hist = malloc(LM_MAX_PENALTY_WINDOW * sizeof *s->hist);
	if (s->cand == NULL || s->tmp == NULL || s->hist == NULL) {
		lm_sampler_fini(s);
		return LM_ENOMEM;
	}
	return 0;
}

void lm_sampler_fini(struct lm_sampler *s)
{
	if (s == NULL)
		return;
	free(s->cand);
	free(s->tmp);
	free(s->hist);
	s->cand = NULL;
	s->tmp = NULL;
	s->hist = NULL;
}

static int sample_id_cmp(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

void lm_adjust_logits(struct lm_sampler *s, float *logits, const struct lm_logit_adjust *a)
{
	for (int32_t i = 0; i < a->n_bias; i++)
		logits[a->bias[i].id] += a->bias[i].bias;
	bool penalize = a->presence != 0 || a->frequency != 0 || a->repeat != 1;
	if (!penalize || a->n_hist <= 0)
		return;
	int32_t n = a->n_hist < LM_MAX_PENALTY_WINDOW ? a->n_hist : LM_MAX_PENALTY_WINDOW;
	memcpy(s->hist, a->hist, (size_t)n * sizeof *s->hist);
	qsort(s->hist, (size_t)n, sizeof *s->hist, sample_id_cmp);
	for (int32_t i = 0; i < n;) {
		int32_t id = s->hist[i], count = 0;
		while (i < n && s->hist[i] == id) {
			count++;
			i++;
		}
		/* llama_sampler_penalties_apply, operation for operation. */
		float l = logits[id];
		if (l <= 0)
			l *= a->repeat;
		else
			l /= a->repeat;
		l -= (float)count * a->frequency + (float)(count > 0) * a->presence;
		logits[id] = l;
	}
}

static uint64_t sample_mix(uint64_t x)
{
	/* splitmix64's finaliser: a bijective mix with good avalanche. */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

double lm_sample_uniform(uint64_t seed, uint64_t step)
{
	uint64_t x = sample_mix(sample_mix(seed) ^ (step * 0xd1b54a32d192ed03ull + 1));
	return (double)(x >> 11) * 0x1p-53;
}

static float sample_clean(float x)
{
	return isnan(x) ? -INFINITY : x;
}

static int32_t sample_argmax(const float *logits, int32_t n)
{
	int32_t best = 0;
	float bv = sample_clean(logits[0]);
	for (int32_t i = 1; i < n; i++) {
		float v = sample_clean(logits[i]);
		if (v > bv) {
			bv = v;
			best = i;
		}
	}
	return best;
}

/* Descending by logit, ascending id on ties: a total order, so results never depend on qsort. */
static int sample_cmp(const void *a, const void *b)
{
	const struct lm_cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Restores the heap of c[0, n) below i: the worst candidate at the root. */
static void sample_sift(struct lm_cand *c, int32_t n, int32_t i)
{
	for (;;) {
		int32_t w = i, l = 2 * i + 1, r = l + 1;
		if (l < n && sample_cmp(&c[l], &c[w]) > 0)
			w = l;
		if (r < n && sample_cmp(&c[r], &c[w]) > 0)
			w = r;
		if (w == i)
			return;
		const struct lm_cand t = c[i];
		c[i] = c[w];
		c[w] = t;
		i = w;
	}
}

/* The k best candidates of logits (sample_cmp's order), unordered, into c[0, k): a heap of
 * the k best so far with the worst at its root, which most of a vocabulary only has to be
 * compared with. */
static void sample_top_k(struct lm_cand *c, const float *logits, int32_t n, int32_t k)
{
	for (int32_t i = 0; i < k; i++)
		c[i] = (struct lm_cand){sample_clean(logits[i]), i};
	/* Heapify: a parent never comes before (is never better than) its children. */
	for (int32_t i = k / 2 - 1; i >= 0; i--)
		sample_sift(c, k, i);
	for (int32_t i = k; i < n; i++) {
		const struct lm_cand x = {sample_clean(logits[i]), i};
		if (sample_cmp(&x, &c[0]) < 0) {
			c[0] = x;
			sample_sift(c, k, 0);
		}
	}
}

/* A logit as a key that sorts ascending where the logits sort descending (-0 as +0, as
 * sample_cmp compares them). */
static uint32_t sample_key(float f)
{
	uint32_t u;
	if (f == 0)
		f = 0;
	memcpy(&u, &f, sizeof u);
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return ~u;
}

/* The n candidates of logits in sample_cmp's order, into c: a least-significant-digit radix
 * sort of the keys, 8 bits a pass, which is stable, so that equal logits keep their ids'
 * ascending order. Every pass whose digit all keys share is skipped. */
static void sample_sort_all(struct lm_cand *c, struct lm_cand *tmp, const float *logits, int32_t n)
{
	uint32_t count[4][256] = {{0}};
	for (int32_t i = 0; i < n; i++) {
		c[i] = (struct lm_cand){sample_clean(logits[i]), i};
		const uint32_t k = sample_key(c[i].logit);
		for (int d = 0; d < 4; d++)
			count[d][(k >> (8 * d)) & 0xff]++;
	}
	struct lm_cand *from = c, *to = tmp;
	for (int d = 0; d < 4; d++) {
		if (count[d][(sample_key(c[0].logit) >> (8 * d)) & 0xff] == (uint32_t)n)
			continue;
		uint32_t at = 0;
		for (int b = 0; b < 256; b++) {
			const uint32_t m = count[d][b];
			count[d][b] = at;
			at += m;
		}
		for (int32_t i = 0; i < n; i++)
			to[count[d][(sample_key(from[i].logit) >> (8 * d)) & 0xff]++] = from[i];
		struct lm_cand *t = from;
		from = to;
		to = t;
	}
	if (from != c)
		memcpy(c, from, (size_t)n * sizeof *c);
}

int32_t lm_sample(struct lm_sampler *s, const float *logits, const struct lm_sampling *p,
		  uint64_t step)
{
	int32_t n = s->n_vocab;
	if (!(p->temperature > 0))
		return sample_argmax(logits, n);

	/* The survivors of top-k in order: sorting a whole vocabulary with qsort took 3.4 ms of
	 * 32000 logits (Zen 5), the radix sort a tenth of it. */
	struct lm_cand *c = s->cand;
	if (p->top_k > 0 && p->top_k < n) {
		sample_top_k(c, logits, n, p->top_k);
		n = p->top_k;
		qsort(c, (size_t)n, sizeof *c, sample_cmp);
	} else {
		sample_sort_all(c, s->tmp, logits, n);
	}
	if (c[0].logit == -INFINITY)
		return c[0].id;

	/* Probabilities of the survivors (before temperature), for top-p and min-p. */
	double max = c[0].logit;
	if (p->top_p < 1) {
		double sum = 0;
		for (int32_t i = 0; i < n; i++)
			sum += exp((double)c[i].logit - max);
		double cum = 0;
		for (int32_t i = 0; i < n; i++) {
			cum += exp((double)c[i].logit - max) / sum;
			if (cum >= p->top_p) {
				n = i + 1;
				break;
			}
		}
	}
	if (p->min_p > 0) {
		/* p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p) */
		double floor = max + log((double)p->min_p);
		int32_t keep = 1;
		while (keep < n && (double)c[keep].logit >= floor)
			keep++;
		n = keep;
	}

	double total = 0;
	for (int32_t i = 0; i < n; i++)
		total += exp(((double)c[i].logit - max) / p->temperature);
	double u = lm_sample_uniform(p->seed, step) * total, acc = 0;
	for (int32_t i = 0; i < n; i++) {
		acc += exp(((double)c[i].logit - max) / p->temperature);
		if (u < acc)
			return c[i].id;
	}
	return c[n - 1].id;
}

struct lm_log_norm lm_log_norm(const float *logits, int32_t n_vocab)
{
	double max = -INFINITY, sum = 0;
	for (int32_t i = 0; i < n_vocab; i++)
		if (sample_clean(logits[i]) > max)
			max = sample_clean(logits[i]);
	for (int32_t i = 0; i < n_vocab; i++)
		sum += exp((double)sample_clean(logits[i]) - max);
	return (struct lm_log_norm){.max = max, .log_sum = log(sum)};
}

float lm_logprob_of(struct lm_log_norm z, float logit)
{
	return (float)((double)sample_clean(logit) - z.max - z.log_sum);
}

float lm_logprob(const float *logits, int32_t n_vocab, int32_t id)
{
	return lm_logprob_of(lm_log_norm(logits, n_vocab), logits[id]);
}

int32_t lm_sample_verify(struct lm_sampler *s, const float *logits, int32_t n_vocab,
			 const int32_t *drafts, int32_t k, const struct lm_sampling *p,
			 uint64_t step, int32_t *out)
{
	for (int32_t i = 0;; i++) {
		out[i] = lm_sample(s, logits + (size_t)i * (size_t)n_vocab, p, step + (uint64_t)i);
		if (i == k || out[i] != drafts[i])
			return i + 1;
	}
}

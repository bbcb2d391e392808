/* sampler.h — choosing the next token from logits, by the parameters of common/model/sampling.h.
 *
 * temperature <= 0 is greedy (argmax; ties go to the lowest id). Otherwise the candidates are
 * filtered in this order, as llama.cpp's default sampler chain does:
 *     top-k (k > 0)  -> keep the k largest logits
 *     top-p (p < 1)  -> keep the smallest prefix whose probability reaches p
 *     min-p (p > 0)  -> keep tokens with probability >= min_p x the largest probability
 *     temperature    -> softmax(logits / T) over the survivors, then one draw
 * top-p and min-p are computed on softmax(logits) of the candidates left at that point.
 *
 * The draw is stateless: its uniform number is a hash of (seed, step), where step counts the
 * tokens this sequence has generated. The same seed gives the same text whether a sequence runs
 * alone or batched with others, and after its KV was rebuilt on a restarted worker.
 */
#ifndef LM_SAMPLER_H
#define LM_SAMPLER_H

#include <stdint.h>

#include "common/base/err.h"
#include "common/model/sampling.h"

/* Scratch for one sampler call; sized for a vocabulary, reused across calls. */
struct lm_sampler {
	int32_t n_vocab;
	struct lm_cand {
		float logit;
		int32_t id;
	} * cand;            /* [n_vocab] */
	struct lm_cand *tmp; /* [n_vocab] the radix sort's other half */
	int32_t *hist;       /* [LM_MAX_PENALTY_WINDOW] a sorted copy of a penalty window */
};
/* Bytes of a sampler's scratch for a vocabulary (the memory plan counts them). */
#define LM_SAMPLER_BYTES(n_vocab) (2 * sizeof(struct lm_cand) * (uint64_t)(n_vocab))
int lm_sampler_init(struct lm_sampler *s, int32_t n_vocab);
void lm_sampler_fini(struct lm_sampler *s);

/* The token for `logits` [n_vocab] at generation step `step`. Never fails for finite logits;
 * NaN logits are treated as -inf. */
int32_t lm_sample(struct lm_sampler *s, const float *logits, const struct lm_sampling *p,
		  uint64_t step);

/* Applies a (checked: lm_logit_adjust_check) to logits [n_vocab] in place, as sampling.h
 * says: biases added, then llama.cpp's penalty arithmetic, in float and in its order, for
 * every token of the window (each once, with its count). */
void lm_adjust_logits(struct lm_sampler *s, float *logits, const struct lm_logit_adjust *a);

/* Verification of a speculative draft (the last stage's, for a FORWARD that carried the
 * sequence's last accepted token and k drafted ones d_1..d_k). logits holds k + 1 rows: row i
 * follows the token at row i, so it predicts the position of d_{i+1} (row k, the one after the
 * last draft). Each row draws the token the sequence would have drawn there without
 * speculation, y_i = lm_sample(row i, step + i); d_{i+1} is accepted when y_i == d_{i+1}, and
 * the first rejection (or row k) ends the run. out[0..a] receives y_0..y_a: the a accepted
 * drafts and then the sampled token after them; returns a + 1.
 *
 * Greedy, this is the longest prefix of the draft that matches the argmax, plus the model's own
 * next token. Sampled, it is the standard rejection rule (accept d with probability
 * min(1, p(d) / q(d)); on rejection draw from the normalised max(0, p - q)) for drafts that are
 * deterministic, q = 1 at d (both draft sources are: n-gram lookup and a greedy draft model):
 * the draw y ~ p accepts d with probability p(d), and a rejected y is distributed as p without
 * d, renormalised, which is max(0, p - q). So the output distribution is the model's, and since
 * y_i is the very draw of (seed, step + i) that plain decoding makes, a seeded request produces
 * the same tokens with speculation on or off. */
int32_t lm_sample_verify(struct lm_sampler *s, const float *logits, int32_t n_vocab,
			 const int32_t *drafts, int32_t k, const struct lm_sampling *p,
			 uint64_t step, int32_t *out);

/* log softmax(logits)[id], the log-probability of a token under the model (for logprobs). */
float lm_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* A row's softmax denominator as lm_logprob takes it: its largest logit and the log of
 * sum exp(logit - max) (NaN logits count as -inf). One pass over the vocabulary: a caller that
 * wants several tokens' logprobs from one row makes it once (a row's exps are most of the
 * cost: 32000 take about 0.1 ms). */
struct lm_log_norm {
	double max, log_sum;
};
struct lm_log_norm lm_log_norm(const float *logits, int32_t n_vocab);

/* log softmax(row)[id] from the row's norm: the same value lm_logprob gives. */
float lm_logprob_of(struct lm_log_norm z, float logit);

/* The uniform number in [0, 1) used for (seed, step): exposed for tests. */
double lm_sample_uniform(uint64_t seed, uint64_t step);

#endif

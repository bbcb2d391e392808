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
	} * cand;      /* [n_vocab] */
	int32_t *hist; /* [LM_MAX_PENALTY_WINDOW] a sorted copy of a penalty window */
};
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

/* log softmax(logits)[id], the log-probability of a token under the model (for logprobs). */
float lm_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* The uniform number in [0, 1) used for (seed, step): exposed for tests. */
double lm_sample_uniform(uint64_t seed, uint64_t step);

#endif

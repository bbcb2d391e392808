/* The logit adjustments of engine/sampler.h (lm_adjust_logits: OpenAI's logit_bias, then
 * presence, frequency and repeat penalties) against llama.cpp's own samplers, bit for bit:
 * llama_sampler_init_logit_bias, then llama_sampler_init_penalties fed the window with
 * llama_sampler_accept, applied to the same logits. The libraries are the prebuilt ones of
 * npm node-llama-cpp@3.21.1 (llama.cpp v0.4.0), built with -Dllama_oracle. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#include "common/model/sampling.h"
#include "engine/sampler.h"

#define N_VOCAB 1000

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float next_logit(void)
{
	return ((float)(next_u32() % 20001) - 10000.0f) / 1000.0f; /* [-10, 10], both signs */
}

/* One case: logits, a window with repeats, biases; both implementations; every logit equal. */
static void one_case(float presence, float frequency, float repeat, int32_t n_hist, int32_t n_bias)
{
	static float logits[N_VOCAB], ours[N_VOCAB];
	static int32_t hist[LM_MAX_PENALTY_WINDOW];
	static struct lm_logit_bias bias[LM_MAX_LOGIT_BIAS];
	static llama_logit_bias lbias[LM_MAX_LOGIT_BIAS];
	static llama_token_data data[N_VOCAB];
	for (int i = 0; i < N_VOCAB; i++)
		logits[i] = next_logit();
	logits[7] = 0.0f;                    /* the l <= 0 branch at exactly zero */
	for (int32_t i = 0; i < n_hist; i++) /* a small range, so tokens repeat */
		hist[i] = (int32_t)(next_u32() % 64) * (i % 3 == 0 ? 1 : 7) % N_VOCAB;
	for (int32_t i = 0; i < n_bias; i++) {
		bias[i] = (struct lm_logit_bias){(int32_t)(i * 3 + 1) % N_VOCAB,
						 ((float)(next_u32() % 2001) - 1000.0f) / 10.0f};
		lbias[i] = (llama_logit_bias){bias[i].id, bias[i].bias};
	}
	const struct lm_logit_adjust a = {.presence = presence,
					  .frequency = frequency,
					  .repeat = repeat,
					  .hist = hist,
					  .n_hist = n_hist,
					  .bias = bias,
					  .n_bias = n_bias};
	lm_diag d = {{0}};
	cr_assert_eq(lm_logit_adjust_check(&a, N_VOCAB, &d), 0, "%s", d.msg);
	struct lm_sampler s;
	cr_assert_eq(lm_sampler_init(&s, N_VOCAB), 0);
	memcpy(ours, logits, sizeof ours);
	lm_adjust_logits(&s, ours, &a);
	lm_sampler_fini(&s);

	struct llama_sampler *lb = llama_sampler_init_logit_bias(N_VOCAB, n_bias, lbias);
	struct llama_sampler *pen =
		llama_sampler_init_penalties(N_VOCAB, n_hist, repeat, frequency, presence);
	for (int32_t i = 0; i < n_hist; i++)
		llama_sampler_accept(pen, hist[i]);
	for (int i = 0; i < N_VOCAB; i++)
		data[i] = (llama_token_data){.id = i, .logit = logits[i], .p = 0};
	llama_token_data_array arr = {
		.data = data, .size = N_VOCAB, .selected = -1, .sorted = false};
	llama_sampler_apply(lb, &arr);
	llama_sampler_apply(pen, &arr);
	cr_assert_eq(arr.size, N_VOCAB);
	for (size_t i = 0; i < arr.size; i++) {
		int32_t id = arr.data[i].id;
		cr_assert(memcmp(&arr.data[i].logit, &ours[id], sizeof(float)) == 0,
			  "token %d: llama.cpp %.9g, layermesh %.9g (presence %g, frequency %g, "
			  "repeat "
			  "%g, window %d, biases %d)",
			  id, (double)arr.data[i].logit, (double)ours[id], (double)presence,
			  (double)frequency, (double)repeat, n_hist, n_bias);
	}
	llama_sampler_free(lb);
	llama_sampler_free(pen);
}

Test(penalties_llama, bit_for_bit)
{
	static const float presence[] = {0.0f, 0.5f, -1.5f, 2.0f};
	static const float frequency[] = {0.0f, 0.3f, -0.7f, 2.0f};
	static const float repeat[] = {1.0f, 1.1f, 0.8f, 10.0f};
	static const int32_t windows[] = {1, 64, 333, LM_MAX_PENALTY_WINDOW};
	int cases = 0;
	for (int p = 0; p < 4; p++)
		for (int f = 0; f < 4; f++)
			for (int r = 0; r < 4; r++)
				for (int w = 0; w < 4; w++) {
					one_case(presence[p], frequency[f], repeat[r], windows[w],
						 (p + f + r + w) % 3 == 0 ? 0 : 50 * (w + 1));
					cases++;
				}
	one_case(0, 0, 1, 0, LM_MAX_LOGIT_BIAS); /* biases alone */
	cr_log_info("%d cases, %d logits each, equal bit for bit", cases + 1, N_VOCAB);
}

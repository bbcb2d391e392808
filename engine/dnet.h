/* dnet.h — the gated delta-net of qwen35's linear-attention layers, one token at a time.
 *
 * As llama.cpp (release v0.4.0: src/models/qwen35.cpp, delta-net-base.cpp and ggml's
 * gated_delta_net CPU op) computes it, for one token of a sequence whose layer state is a conv
 * ring R ((conv_kernel - 1) inputs of conv_dim channels, oldest first) and an SSM state S (per
 * value head, head_dim x head_dim):
 *
 *     c        = silu(conv1d([R; qkv]))              each channel c: sum over the K taps j of
 *                                                    w[c][j] x input[j][c], j = 0 first;
 *                                                    R then drops its oldest input for qkv
 *     q, k, v  = c's first n_k_heads x head_dim, next n_k_heads x head_dim, last
 *                n_v_heads x head_dim values; q, k L2-normed per head (x / max(|x|, eps))
 *     beta     = sigmoid(b),  g = softplus(a + dt_bias) x ssm_a        (per value head)
 *     per value head h, reading key head h % n_k_heads:
 *         S       = S x exp(g)
 *         delta_j = (v_j - sum_i S[i][j] k_i) x beta
 *         S[i][j] += k_i delta_j
 *         o_j     = sum_i S[i][j] q_i / sqrt(head_dim)
 *     out      = rmsnorm(o per head) x ssm_norm x silu(z)
 *
 * S is stored as ggml stores it, transposed (M[j][i] = S[i][j], so a row of M is contiguous),
 * and every sum runs in ggml's order. A batch is processed token by token in its order, so a
 * token's result is the same bits alone and in any batch: the prefill of a prompt equals its
 * decode token by token (the chunked form of llama.cpp is not used).
 */
#ifndef LM_DNET_H
#define LM_DNET_H

#include <stddef.h>
#include <stdint.h>

#include "common/model/hparams.h"

/* One layer's small tensors, host copies in f32. */
struct lm_dnet_weights {
	const float *conv;    /* [conv_dim][conv_kernel]: ssm_conv1d.weight */
	const float *dt_bias; /* [n_v_heads]: ssm_dt.bias */
	const float *a;       /* [n_v_heads]: ssm_a (-exp(A_log)) */
	const float *norm;    /* [head_dim]: ssm_norm.weight */
};

/* Channels of the conv: 2 x n_k_heads x head_dim + n_v_heads x head_dim. */
static inline int32_t lm_dnet_conv_dim(const struct lm_ssm_params *p)
{
	return (2 * p->n_k_heads + p->n_v_heads) * p->head_dim;
}

/* Width of a value (the layer's output before ssm_out): n_v_heads x head_dim. */
static inline int32_t lm_dnet_value_dim(const struct lm_ssm_params *p)
{
	return p->n_v_heads * p->head_dim;
}

/* Host floats of a stage's qwen35 buffers (forward.h's dn.host) for batches of max_batch and
 * attention layers up to q_dim (queries and gates); the backend ones are max_batch x
 * lm_dnet_batch_floats. */
size_t lm_dnet_host_floats(const struct lm_ssm_params *p, int32_t max_batch, int32_t q_dim);
size_t lm_dnet_batch_floats(const struct lm_ssm_params *p);

/* Host floats lm_dnet_token needs as its work area. */
size_t lm_dnet_work_floats(const struct lm_ssm_params *p);

/* One token: qkv [conv_dim], z [value_dim], b and a [n_v_heads] (the projections of the
 * token's normed input) into out [value_dim], updating ring ([conv_kernel - 1][conv_dim]) and
 * state ([n_v_heads][head_dim][head_dim]) in place. work has lm_dnet_work_floats floats. */
void lm_dnet_token(const struct lm_ssm_params *p, const struct lm_dnet_weights *w, float eps,
		   float *ring, float *state, const float *qkv, const float *z, const float *b,
		   const float *a, float *out, float *work);

#endif

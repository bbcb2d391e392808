/* cuda_impl.h — the interface between the CUDA backend object (cuda_backend.c, plain C) and the
 * kernels (one .cu file per op family). Not a public interface.
 *
 * Every launcher enqueues its kernels on the stream it is given and returns at once with the
 * launch's status (cudaGetLastError); errors of the kernels themselves surface at the next
 * synchronisation (the backend's sync, upload or download). Pointers are device memory unless
 * said otherwise; shapes were checked by the caller (cuda_backend.c) against the seam's
 * contracts, so the launchers only compute grids.
 *
 *   matmul.cu      the activation converters and the matmul (one kernel for one token and for
 *                  batches: see there)
 *   norm.cu        rmsnorm
 *   rope.cu        rope (normal, NeoX, frequency factors, YaRN)
 *   attention.cu   KV stores and attention, per KV type (LMC_KV_TYPES, cuda_caps.h)
 *   elementwise.cu get_rows, silu_mul, swiglu_oai, gelu_mul, add, add_rows, mul_rows,
 *                  scale, copy
 */
#ifndef LM_CUDA_IMPL_H
#define LM_CUDA_IMPL_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/model/rope.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_caps.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activations converted for one matmul, carved from the backend's scratch (lmc_act_carve). */
struct lmc_act {
	enum lm_dtype type; /* the weight's vec_dot type: LM_F32 (x as is), LM_F16, LM_BF16,
			     * LM_Q8_0 or LM_Q8_K */
	const float *x;     /* LM_F32: the input itself, [n][ne0] */
	uint16_t *x16;      /* LM_F16 / LM_BF16: [n][ne0] */
	int8_t *qs;         /* LM_Q8_0 / LM_Q8_K: [n][ne0] */
	float *d;           /* [n][ne0 / 32] (Q8_0) or [n][ne0 / 256] (Q8_K) */
	int32_t *bsums;     /* LM_Q8_K: [n][ne0 / 16] */
	int64_t ne0;
};

/* The vec_dot type of a weight type (backend.h's matmul contract); LM_DTYPE_COUNT for a type
 * the kernels lack. */
enum lm_dtype lmc_vec_dot_type(enum lm_dtype w);
/* Scratch bytes for n rows of ne0 activations in type vdt. */
size_t lmc_act_bytes(enum lm_dtype vdt, int64_t ne0, int n);
/* Lays a's arrays out in buf (lmc_act_bytes of it, 256-byte aligned). */
void lmc_act_carve(struct lmc_act *a, enum lm_dtype vdt, void *buf, const float *x, int64_t ne0,
		   int n);
/* Converts x ([n][ne0] f32) into a. */
cudaError_t lmc_act_convert(cudaStream_t s, const struct lmc_act *a, const float *x, int n);
/* y[t][r] = W[r] . a[t]. */
cudaError_t lmc_matmul(cudaStream_t s, const struct lm_weight *w, const struct lmc_act *a, float *y,
		       int n);

cudaError_t lmc_rmsnorm(cudaStream_t s, float *y, const float *x, const float *w, int dim, int n,
			float eps);
/* theta_scale = powf(freq_base, -2 / n_rot), computed by the caller on the host as the CPU
 * reference does. */
cudaError_t lmc_rope(cudaStream_t s, float *x, int n_heads, int head_dim,
		     const struct lm_tok_loc *loc, int n, const struct lm_rope_params *rp,
		     float theta_scale);

cudaError_t lmc_kv_store(cudaStream_t s, const struct lm_kv_layer *kv, const float *k,
			 const float *v, const struct lm_tok_loc *loc, int n);
/* Attention for tokens [t0, t0 + nt) of the batch, with S ([nt][n_heads][lmax] floats) as the
 * probabilities' scratch; lmax is at least every one of those tokens' span. */
cudaError_t lmc_attention(cudaStream_t s, float *out, const float *q, const struct lm_kv_layer *kv,
			  const struct lm_tok_loc *loc, int t0, int nt, int n_heads, float scale,
			  float *S, int lmax);

cudaError_t lmc_get_rows(cudaStream_t s, float *y, const struct lm_weight *table,
			 const int32_t *ids, int n);
cudaError_t lmc_silu_mul(cudaStream_t s, float *y, const float *g, const float *u, size_t len);
/* table: the f16 GELU table of the CPU reference (65536 halves), in device memory. */
cudaError_t lmc_swiglu_oai(cudaStream_t s, float *y, const float *g, const float *u, size_t len,
			   float alpha, float limit);
cudaError_t lmc_gelu_mul(cudaStream_t s, float *y, const float *g, const float *u, size_t len,
			 const uint16_t *table);
cudaError_t lmc_add(cudaStream_t s, float *y, const float *a, size_t len);
cudaError_t lmc_add_rows(cudaStream_t s, float *y, const float *b, int width, int n);
cudaError_t lmc_mul_rows(cudaStream_t s, float *y, const float *b, int width, int n);
cudaError_t lmc_scale(cudaStream_t s, float *y, float f, size_t len);
cudaError_t lmc_copy(cudaStream_t s, float *y, const float *x, size_t len);

#ifdef __cplusplus
}
#endif

#endif

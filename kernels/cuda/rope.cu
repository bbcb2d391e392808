/* rope.cu — rotary embedding in place, as the CPU reference turns it (kernels/cpu/ops.c):
 * theta_i = pos x theta_scale^i by repeated f32 multiplication (each thread repeats the chain
 * up to its pair, so the rounding is the reference's), divided by the pair's frequency factor,
 * times freq_scale, or YaRN's mix (rope.h; cuda_math.h's lmc_rope_cs); one angle per (token,
 * pair) serves every head. Pairs are adjacent (normal) or n_rot / 2 apart (NeoX); dimensions
 * past n_rot stay. */
#include "kernels/cuda/cuda_common.cuh"

#define ROPE_THREADS 128

/* The rope parameters a thread needs, by value. */
struct rope_args {
	int n_rot, neox;
	float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
	const float *ff;
};

__global__ void __launch_bounds__(ROPE_THREADS)
	k_rope(float *x, int n_heads, int head_dim, const struct lm_tok_loc *__restrict__ loc,
	       struct rope_args a)
{
	const int t = blockIdx.x;
	float *row = x + (size_t)t * (size_t)n_heads * (size_t)head_dim;
	const int half = a.n_rot / 2;
	for (int i = threadIdx.x; i < half; i += ROPE_THREADS) {
		float theta = (float)loc[t].pos;
		for (int k = 0; k < i; k++)
			theta *= a.theta_scale;
		float c, sn;
		lmc_rope_cs(theta, i, a.ff != NULL ? a.ff[i] : 1.0f, a.freq_scale, a.ext_factor,
			    a.mscale, a.corr0, a.corr1, &c, &sn);
		const int i0 = a.neox ? i : 2 * i;
		const int i1 = a.neox ? i + half : 2 * i + 1;
		for (int h = 0; h < n_heads; h++) {
			float *v = row + (size_t)h * (size_t)head_dim;
			const float x0 = v[i0], x1 = v[i1];
			v[i0] = x0 * c - x1 * sn;
			v[i1] = x0 * sn + x1 * c;
		}
	}
}

extern "C" cudaError_t lmc_rope(cudaStream_t s, float *x, int n_heads, int head_dim,
				const struct lm_tok_loc *loc, int n,
				const struct lm_rope_params *rp, float theta_scale)
{
	if (n <= 0 || rp->n_rot == 0)
		return cudaSuccess;
	const struct rope_args a = {.n_rot = rp->n_rot,
				    .neox = rp->mode == LM_ROPE_NEOX,
				    .theta_scale = theta_scale,
				    .freq_scale = rp->freq_scale,
				    .ext_factor = rp->ext_factor,
				    .mscale = rp->mscale,
				    .corr0 = rp->corr[0],
				    .corr1 = rp->corr[1],
				    .ff = rp->freq_factors};
	k_rope<<<(unsigned)n, ROPE_THREADS, 0, s>>>(x, n_heads, head_dim, loc, a);
	return cudaGetLastError();
}

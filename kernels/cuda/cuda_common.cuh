/* cuda_common.cuh — what every .cu file of kernels/cuda shares: the project's C headers, the
 * thread-free arithmetic (cuda_math.h) and the warp and block reductions.
 *
 * Reductions are butterflies (__shfl_xor_sync) whose result is read from lane 0, and blocks
 * combine their warps in warp order, so a kernel's result never depends on timing: the same
 * inputs give the same bits on every run.
 */
#ifndef LM_CUDA_COMMON_CUH
#define LM_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/cuda/cuda_impl.h"
}
#include "kernels/cuda/cuda_math.h"

#define LMC_FULL_MASK 0xffffffffu

static __device__ __forceinline__ float lmc_warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(LMC_FULL_MASK, v, o);
	return v;
}

static __device__ __forceinline__ double lmc_warp_sum_d(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(LMC_FULL_MASK, v, o);
	return v;
}

static __device__ __forceinline__ float lmc_warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(LMC_FULL_MASK, v, o));
	return v;
}

/* The sum over a block of `nw` warps (blockDim.x == 32 * nw); every thread gets lane 0 of
 * warp 0's total. `sh` holds nw doubles. Ends with the block synchronised. */
static __device__ __forceinline__ double lmc_block_sum_d(double v, double *sh, int nw)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = lmc_warp_sum_d(v);
	__syncthreads();
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	double s = sh[0];
	for (int w = 1; w < nw; w++)
		s += sh[w];
	__syncthreads();
	return s;
}

static __device__ __forceinline__ float lmc_block_max(float v, float *sh, int nw)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = lmc_warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	float m = sh[0];
	for (int w = 1; w < nw; w++)
		m = fmaxf(m, sh[w]);
	__syncthreads();
	return m;
}

/* Blocks for a grid-stride loop over len elements with `threads` per block. */
static inline unsigned lmc_blocks(size_t len, unsigned threads)
{
	size_t b = (len + threads - 1) / threads;
	if (b == 0)
		b = 1;
	return b > (1u << 20) ? (1u << 20) : (unsigned)b;
}

#endif

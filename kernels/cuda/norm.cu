/* norm.cu — rmsnorm: one block per row, the mean of squares summed in double as the CPU
 * reference sums it (kernels_generic.c), then y = (x * scale) * w. */
#include "kernels/cuda/cuda_common.cuh"

#define NORM_THREADS 256

__global__ void __launch_bounds__(NORM_THREADS)
	k_rmsnorm(float *y, const float *x, const float *__restrict__ w, int dim, float eps)
{
	__shared__ double sh[NORM_THREADS / 32];
	const float *xr = x + (size_t)blockIdx.x * (size_t)dim;
	float *yr = y + (size_t)blockIdx.x * (size_t)dim;
	double s = 0;
	for (int i = threadIdx.x; i < dim; i += NORM_THREADS) {
		const float v = xr[i];
		s += (double)(v * v);
	}
	s = lmc_block_sum_d(s, sh, NORM_THREADS / 32);
	const float mean = (float)(s / dim);
	const float scale = 1.0f / sqrtf(mean + eps);
	/* Each element is read and written by the same thread: y may equal x. */
	for (int i = threadIdx.x; i < dim; i += NORM_THREADS) {
		const float v = xr[i] * scale;
		yr[i] = w != NULL ? v * w[i] : v;
	}
}

extern "C" cudaError_t lmc_rmsnorm(cudaStream_t s, float *y, const float *x, const float *w,
				   int dim, int n, float eps)
{
	if (n <= 0)
		return cudaSuccess;
	k_rmsnorm<<<(unsigned)n, NORM_THREADS, 0, s>>>(y, x, w, dim, eps);
	return cudaGetLastError();
}

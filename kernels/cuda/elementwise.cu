/* elementwise.cu — the embedding lookup and the element-wise ops, each exact as the CPU
 * reference computes it (kernels_generic.c, ops.c) but for silu's and swiglu_oai's expf, which
 * is the device's. */
#include "kernels/cuda/cuda_common.cuh"

#define EW_THREADS 256

#define EW_LOOP(i, len)                                                           \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (len); \
	     i += (size_t)gridDim.x * blockDim.x)

/* Row ids[t] of the table, dequantized as quant.c does. */
template <int TY>
__global__ void k_get_rows(float *__restrict__ y, const uint8_t *__restrict__ table,
			   size_t row_bytes, int64_t ne0, const int32_t *__restrict__ ids)
{
	const int t = blockIdx.x;
	const uint8_t *row = table + (size_t)ids[t] * row_bytes;
	float *yr = y + (size_t)t * (size_t)ne0;
	for (int64_t i = threadIdx.x; i < ne0; i += EW_THREADS) {
		float v;
		switch (TY) {
		case LM_F32:
			v = ((const float *)row)[i];
			break;
		case LM_F16:
			v = lmc_f16_to_f32(((const uint16_t *)row)[i]);
			break;
		case LM_BF16:
			v = lmc_bf16_to_f32(((const uint16_t *)row)[i]);
			break;
		case LM_Q8_0:
			v = lmc_deq_q8_0(row, i);
			break;
		case LM_Q4_0:
			v = lmc_deq_q4_0(row, i);
			break;
		case LM_MXFP4:
			v = lmc_deq_mxfp4(row, i);
			break;
		case LM_Q4_K:
			v = lmc_deq_q4_K(row, i);
			break;
		case LM_Q6_K:
			v = lmc_deq_q6_K(row, i);
			break;
		default: /* a type of LMC_WEIGHT_TYPES without its case here: NaN rows */
			v = lmc_bits_f32(0x7fc00000u);
			break;
		}
		yr[i] = v;
	}
}

extern "C" cudaError_t lmc_get_rows(cudaStream_t s, float *y, const struct lm_weight *t,
				    const int32_t *ids, int n)
{
	if (n <= 0)
		return cudaSuccess;
	const uint8_t *d = (const uint8_t *)t->data;
#define EW_ROWS(TY)                                                                           \
	case TY:                                                                              \
		k_get_rows<TY>                                                                \
			<<<(unsigned)n, EW_THREADS, 0, s>>>(y, d, t->row_bytes, t->ne0, ids); \
		break;
#define EW_ROWS_W(TY, VDT) EW_ROWS(TY)
	switch (t->type) {
		LMC_WEIGHT_TYPES(EW_ROWS_W)
	default:
		return cudaErrorInvalidValue;
	}
#undef EW_ROWS_W
#undef EW_ROWS
	return cudaGetLastError();
}

__global__ void k_silu_mul(float *y, const float *g, const float *__restrict__ u, size_t len)
{
	EW_LOOP(i, len)
	{
		const float x = g[i];
		y[i] = x / (1.0f + expf(-x)) * u[i];
	}
}

__global__ void k_swiglu_oai(float *y, const float *g, const float *__restrict__ u, size_t len,
			     float alpha, float limit)
{
	EW_LOOP(i, len)
	y[i] = lmc_swiglu_oai(g[i], u[i], alpha, limit);
}

__global__ void k_gelu_mul(float *y, const float *g, const float *__restrict__ u, size_t len,
			   const uint16_t *__restrict__ table)
{
	EW_LOOP(i, len)
	{
		const float x = g[i];
		if (x <= -10.0f)
			y[i] = 0.0f;
		else if (x >= 10.0f)
			y[i] = x * u[i];
		else
			y[i] = lmc_f16_to_f32(table[lmc_f32_to_f16(x)]) * u[i];
	}
}

__global__ void k_add(float *y, const float *__restrict__ a, size_t len)
{
	EW_LOOP(i, len)
	y[i] += a[i];
}

__global__ void k_add_rows(float *y, const float *__restrict__ b, int width, size_t len)
{
	EW_LOOP(i, len)
	y[i] += b[i % (size_t)width];
}

__global__ void k_mul_rows(float *y, const float *__restrict__ b, int width, size_t len)
{
	EW_LOOP(i, len)
	y[i] *= b[i % (size_t)width];
}

__global__ void k_scale(float *y, float f, size_t len)
{
	EW_LOOP(i, len)
	y[i] *= f;
}

__global__ void k_copy(float *__restrict__ y, const float *__restrict__ x, size_t len)
{
	EW_LOOP(i, len)
	y[i] = x[i];
}

extern "C" cudaError_t lmc_silu_mul(cudaStream_t s, float *y, const float *g, const float *u,
				    size_t len)
{
	if (len == 0)
		return cudaSuccess;
	k_silu_mul<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, g, u, len);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_swiglu_oai(cudaStream_t s, float *y, const float *g, const float *u,
				      size_t len, float alpha, float limit)
{
	if (len == 0)
		return cudaSuccess;
	k_swiglu_oai<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, g, u, len, alpha, limit);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_gelu_mul(cudaStream_t s, float *y, const float *g, const float *u,
				    size_t len, const uint16_t *table)
{
	if (len == 0)
		return cudaSuccess;
	k_gelu_mul<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, g, u, len, table);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_add(cudaStream_t s, float *y, const float *a, size_t len)
{
	if (len == 0)
		return cudaSuccess;
	k_add<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, a, len);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_add_rows(cudaStream_t s, float *y, const float *b, int width, int n)
{
	const size_t len = (size_t)width * (size_t)(n > 0 ? n : 0);
	if (len == 0)
		return cudaSuccess;
	k_add_rows<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, b, width, len);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_mul_rows(cudaStream_t s, float *y, const float *b, int width, int n)
{
	const size_t len = (size_t)width * (size_t)(n > 0 ? n : 0);
	if (len == 0)
		return cudaSuccess;
	k_mul_rows<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, b, width, len);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_scale(cudaStream_t s, float *y, float f, size_t len)
{
	if (len == 0)
		return cudaSuccess;
	k_scale<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, f, len);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_copy(cudaStream_t s, float *y, const float *x, size_t len)
{
	if (len == 0)
		return cudaSuccess;
	k_copy<<<lmc_blocks(len, EW_THREADS), EW_THREADS, 0, s>>>(y, x, len);
	return cudaGetLastError();
}

/* attention.cu — KV stores and causal grouped-query attention over the cache, with sliding
 * windows, for every KV type of LMC_KV_TYPES (cuda_caps.h).
 *
 * Rows are in their GGUF layout (an f16 row is halves, a Q8_0 row is block_q8_0s), the same bytes
 * the CPU backend writes, so a sequence's exported rows move between a CPU and a CUDA worker.
 *
 * Attention runs in three kernels per chunk of tokens, as the CPU reference computes it
 * (kernels/cpu/attention.c), into a scratch of probabilities S[token][head][position]:
 *   scores   one thread per (token, query head, position): the K row's dot product with q
 *            converted to K's vec_dot type (f16 for F16, bf16 for BF16, Q8_0 for Q8_0 and Q4_0,
 *            Q8_1 for Q5_1, f32 for F32 and FP8), in the reference's order (f32 products
 *            summed in double; integer block sums scaled in f32),
 *            times the scale;
 *   softmax  one block per (token, head): max, expf(s - max), the sum in double, times 1 / sum
 *            (a head's sink logit, gpt-oss's, in the max and the sum);
 *   values   one thread per (token, head, element): sum_j p_j V_j[i] in position order, in f32.
 * Position p of a slot is row p % ctx; a token at position pos reads [lo, pos], lo = 0 on a
 * global layer and max(0, pos - window + 1) on a sliding one. The caller checked the ring
 * (cpu_attn_check's contract) and sized S.
 *
 * A KV type is a specialisation of struct kvt: how a row is stored from f32, how q is staged
 * for its dot product and how that product and a V element are read; the per-element and
 * per-block arithmetic of each is in cuda_math.h, where tests/unit/test_cuda_math.c checks it
 * against the CPU's on any machine. The block types' stores follow the reference quantizers bit
 * for bit: Q8_0 by one warp per block (a max is exact in any order), Q4_0 and Q5_1 by one
 * thread per block, scanning it in the reference's order (their first-of-equals picks and
 * their min would otherwise depend on the reduction). A new type is one specialisation here and
 * one entry of LMC_KV_TYPES (cuda_caps.h).
 */
#include "kernels/cuda/cuda_common.cuh"

#define ATT_THREADS   128
#define STORE_THREADS 256

/* Lo and the span of a token: (pos, window) -> [lo, pos]. */
static __device__ __forceinline__ int att_lo(int pos, int window)
{
	return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

template <int TY> struct kvt;

template <> struct kvt<LM_F32> {
	/* q as is: hd floats. */
	static constexpr size_t q_bytes(int hd)
	{
		return (size_t)hd * sizeof(float);
	}
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		for (int i = threadIdx.x; i < width; i += blockDim.x)
			((float *)row)[i] = x[i];
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		for (int i = threadIdx.x; i < hd; i += blockDim.x)
			((float *)sh)[i] = q[i];
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		const float *kf = (const float *)k, *qf = (const float *)sh;
		double s = 0;
		for (int i = 0; i < hd; i++)
			s += (double)(kf[i] * qf[i]);
		return (float)s;
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		return a + p * ((const float *)v)[i];
	}
};

template <> struct kvt<LM_F16> {
	/* q rounded to f16, kept as the f32 values of those halves. */
	static constexpr size_t q_bytes(int hd)
	{
		return (size_t)hd * sizeof(float);
	}
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		for (int i = threadIdx.x; i < width; i += blockDim.x)
			((uint16_t *)row)[i] = lmc_f32_to_f16(x[i]);
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		for (int i = threadIdx.x; i < hd; i += blockDim.x)
			((float *)sh)[i] = lmc_round_f16(q[i]);
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		const uint16_t *kh = (const uint16_t *)k;
		const float *qf = (const float *)sh;
		double s = 0;
		for (int i = 0; i < hd; i++)
			s += (double)(lmc_f16_to_f32(kh[i]) * qf[i]);
		return (float)s;
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		return a + p * lmc_f16_to_f32(((const uint16_t *)v)[i]);
	}
};

/* q quantized to Q8_0 by one warp per block of 32, as the activations' quantizer (matmul.cu):
 * hd int8, then hd / 32 scales (the f32 values of the f16 scales). With sums (Q8_1, for Q5_1
 * caches), hd / 32 more floats after the scales: each block's s. */
template <bool SUMS> static __device__ void stage_q8(uint8_t *sh, const float *q, int hd)
{
	const int lane = threadIdx.x & 31;
	int8_t *qq = (int8_t *)sh;
	float *qd = (float *)(sh + hd);
	for (int b = threadIdx.x >> 5; b < hd / LMC_QK; b += blockDim.x >> 5) {
		const float v = q[b * LMC_QK + lane];
		const float d = lmc_q8_0_d(lmc_warp_max(fabsf(v)));
		const int8_t qv = lmc_q8_0_q(v, lmc_q8_0_id(d));
		qq[b * LMC_QK + lane] = qv;
		const int sum = SUMS ? __reduce_add_sync(LMC_FULL_MASK, (int)qv) : 0;
		if (lane == 0) {
			qd[b] = lmc_round_f16(d);
			if (SUMS)
				qd[hd / LMC_QK + b] = lmc_q8_1_s(sum, d);
		}
	}
}

template <> struct kvt<LM_Q8_0> {
	static constexpr size_t q_bytes(int hd)
	{
		return (size_t)hd + (size_t)hd / LMC_QK * sizeof(float);
	}
	/* One warp per block of 32, as the activations' quantizer (matmul.cu). */
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		const int lane = threadIdx.x & 31;
		for (int b = threadIdx.x >> 5; b < width / LMC_QK; b += blockDim.x >> 5) {
			const float v = x[b * LMC_QK + lane];
			const float d = lmc_q8_0_d(lmc_warp_max(fabsf(v)));
			uint8_t *blk = row + (size_t)b * LMC_Q8_0_BYTES;
			blk[2 + lane] = (uint8_t)lmc_q8_0_q(v, lmc_q8_0_id(d));
			if (lane == 0)
				*(uint16_t *)blk = lmc_f32_to_f16(d);
		}
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		stage_q8<false>(sh, q, hd);
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		const int8_t *qq = (const int8_t *)sh;
		const float *qd = (const float *)(sh + hd);
		float s = 0.0f;
		for (int b = 0; b < hd / LMC_QK; b++) {
			const uint8_t *blk = k + (size_t)b * LMC_Q8_0_BYTES;
			int si = 0;
			for (int i = 0; i < 8; i++)
				si = lmc_dp4a(lmc_ld_i32_a2(blk + 2 + 4 * i),
					      lmc_ld_i32(qq + b * LMC_QK + 4 * i), si);
			s += (float)si * (lmc_f16_to_f32(lmc_ld_u16(blk)) * qd[b]);
		}
		return s;
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		const uint8_t *blk = v + (size_t)(i / LMC_QK) * LMC_Q8_0_BYTES;
		const float d = p * lmc_f16_to_f32(lmc_ld_u16(blk));
		return a + d * (float)(int8_t)blk[2 + i % LMC_QK];
	}
};

template <> struct kvt<LM_BF16> {
	/* q rounded to bf16, kept as the f32 values of those halves. */
	static constexpr size_t q_bytes(int hd)
	{
		return (size_t)hd * sizeof(float);
	}
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		for (int i = threadIdx.x; i < width; i += blockDim.x)
			((uint16_t *)row)[i] = lmc_f32_to_bf16(x[i]);
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		for (int i = threadIdx.x; i < hd; i += blockDim.x)
			((float *)sh)[i] = lmc_round_bf16(q[i]);
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		return lmc_kv_dot_bf16(k, (const float *)sh, hd);
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		return lmc_kv_acc_bf16(a, p, v, i);
	}
};

template <> struct kvt<LM_FP8_E4M3> {
	/* q as is (fp8 meets q in f32, summed in double). */
	static constexpr size_t q_bytes(int hd)
	{
		return (size_t)hd * sizeof(float);
	}
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		for (int i = threadIdx.x; i < width; i += blockDim.x)
			row[i] = lmc_f32_to_fp8(x[i]);
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		for (int i = threadIdx.x; i < hd; i += blockDim.x)
			((float *)sh)[i] = q[i];
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		return lmc_kv_dot_fp8(k, (const float *)sh, hd);
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		return lmc_kv_acc_fp8(a, p, v, i);
	}
};

template <> struct kvt<LM_Q4_0> {
	/* q quantized to Q8_0, as for a Q8_0 cache. */
	static constexpr size_t q_bytes(int hd)
	{
		return kvt<LM_Q8_0>::q_bytes(hd);
	}
	/* One thread per block of 32, scanning it in the reference's order. */
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		for (int b = threadIdx.x; b < width / LMC_QK; b += blockDim.x)
			lmc_store_q4_0(x + (size_t)b * LMC_QK, row + (size_t)b * LMC_Q4_0_BYTES);
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		stage_q8<false>(sh, q, hd);
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		return lmc_kv_dot_q4_0(k, (const int8_t *)sh, (const float *)(sh + hd), hd);
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		return lmc_kv_acc_q4_0(a, p, v, i);
	}
};

template <> struct kvt<LM_Q5_1> {
	/* q quantized to Q8_1: Q8_0's quants and scales, then the blocks' sums s. */
	static constexpr size_t q_bytes(int hd)
	{
		return (size_t)hd + 2 * ((size_t)hd / LMC_QK) * sizeof(float);
	}
	static __device__ void store(uint8_t *row, const float *x, int width)
	{
		for (int b = threadIdx.x; b < width / LMC_QK; b += blockDim.x)
			lmc_store_q5_1(x + (size_t)b * LMC_QK, row + (size_t)b * LMC_Q5_1_BYTES);
	}
	static __device__ void stage(uint8_t *sh, const float *q, int hd)
	{
		stage_q8<true>(sh, q, hd);
	}
	static __device__ float score(const uint8_t *k, const uint8_t *sh, int hd)
	{
		const float *qd = (const float *)(sh + hd);
		return lmc_kv_dot_q5_1(k, (const int8_t *)sh, qd, qd + hd / LMC_QK, hd);
	}
	static __device__ __forceinline__ float acc(float a, float p, const uint8_t *v, int i)
	{
		return lmc_kv_acc_q5_1(a, p, v, i);
	}
};

/* ------------------------------------------------------------------------------------------ */
/* KV store                                                                                   */

template <int TY>
__global__ void __launch_bounds__(STORE_THREADS)
	k_kv_store(uint8_t *cache, size_t row_bytes, int ctx, const float *__restrict__ x,
		   int width, const struct lm_tok_loc *__restrict__ loc)
{
	const int t = blockIdx.x;
	const size_t r = (size_t)loc[t].slot * (size_t)ctx + (size_t)(loc[t].pos % ctx);
	kvt<TY>::store(cache + r * row_bytes, x + (size_t)t * (size_t)width, width);
}

template <int TY>
static cudaError_t kv_store_one(cudaStream_t s, void *cache, size_t row_bytes, int ctx,
				const float *x, int width, const struct lm_tok_loc *loc, int n)
{
	k_kv_store<TY><<<(unsigned)n, STORE_THREADS, 0, s>>>((uint8_t *)cache, row_bytes, ctx, x,
							     width, loc);
	return cudaGetLastError();
}

static cudaError_t kv_store_typed(cudaStream_t s, enum lm_dtype ty, void *cache, size_t row_bytes,
				  int ctx, const float *x, int width, const struct lm_tok_loc *loc,
				  int n)
{
	switch (ty) {
#define KV_STORE_CASE(TY) \
	case TY:          \
		return kv_store_one<TY>(s, cache, row_bytes, ctx, x, width, loc, n);
		LMC_KV_TYPES(KV_STORE_CASE)
#undef KV_STORE_CASE
	default:
		return cudaErrorInvalidValue;
	}
}

extern "C" cudaError_t lmc_kv_store(cudaStream_t s, const struct lm_kv_layer *kv, const float *k,
				    const float *v, const struct lm_tok_loc *loc, int n)
{
	if (n <= 0)
		return cudaSuccess;
	const int width = kv->n_kv_heads * kv->head_dim;
	cudaError_t e =
		kv_store_typed(s, kv->k_type, kv->k, kv->k_row_bytes, kv->ctx, k, width, loc, n);
	if (e != cudaSuccess)
		return e;
	return kv_store_typed(s, kv->v_type, kv->v, kv->v_row_bytes, kv->ctx, v, width, loc, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Attention                                                                                  */

struct att_args {
	const float *q;
	float *out;
	const uint8_t *k, *v;
	size_t k_row_bytes, v_row_bytes;
	int ctx, window, n_kv_heads, head_dim;
	const struct lm_tok_loc *loc;
	int t0, n_heads;
	float scale;
	float *S;
	int lmax;
	const float *sinks; /* [n_heads] sink logits, or NULL */
};

/* blockIdx.x: (token of the chunk, query head); blockIdx.y: a run of ATT_THREADS positions. */
template <int KT> __global__ void __launch_bounds__(ATT_THREADS) k_att_scores(struct att_args a)
{
	extern __shared__ __align__(16) uint8_t att_sh[];
	const int tl = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads, t = a.t0 + tl;
	const int g = h / (a.n_heads / a.n_kv_heads);
	const int pos = a.loc[t].pos, slot = a.loc[t].slot;
	const int lo = att_lo(pos, a.window), len = pos - lo + 1;
	kvt<KT>::stage(att_sh, a.q + ((size_t)t * (size_t)a.n_heads + (size_t)h) * a.head_dim,
		       a.head_dim);
	__syncthreads();
	const int jj = blockIdx.y * ATT_THREADS + threadIdx.x;
	if (jj >= len)
		return;
	const int j = lo + jj;
	const uint8_t *krow = a.k +
			      ((size_t)slot * (size_t)a.ctx + (size_t)(j % a.ctx)) * a.k_row_bytes +
			      (size_t)g * (a.k_row_bytes / (size_t)a.n_kv_heads);
	const float sc = kvt<KT>::score(krow, att_sh, a.head_dim);
	a.S[((size_t)tl * (size_t)a.n_heads + (size_t)h) * (size_t)a.lmax + (size_t)jj] =
		sc * a.scale;
}

__global__ void __launch_bounds__(ATT_THREADS) k_att_softmax(struct att_args a)
{
	__shared__ float shm[ATT_THREADS / 32];
	__shared__ double shs[ATT_THREADS / 32];
	const int tl = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads, t = a.t0 + tl;
	const int pos = a.loc[t].pos;
	const int len = pos - att_lo(pos, a.window) + 1;
	float *s = a.S + ((size_t)tl * (size_t)a.n_heads + (size_t)h) * (size_t)a.lmax;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < len; j += ATT_THREADS)
		m = fmaxf(m, s[j]);
	m = lmc_block_max(m, shm, ATT_THREADS / 32);
	/* A sink logit joins the max and the denominator, with no value row (backend.h). */
	const float sink = a.sinks != NULL ? a.sinks[h] : -INFINITY;
	m = sink > m ? sink : m;
	double sum = 0;
	for (int j = threadIdx.x; j < len; j += ATT_THREADS) {
		const float e = expf(s[j] - m);
		s[j] = e;
		sum += e;
	}
	sum = lmc_block_sum_d(sum, shs, ATT_THREADS / 32);
	if (a.sinks != NULL)
		sum += (double)expf(sink - m);
	const float inv = (float)(1.0 / sum);
	for (int j = threadIdx.x; j < len; j += ATT_THREADS)
		s[j] *= inv;
}

/* blockIdx.x: (token of the chunk, query head); blockIdx.y: a run of elements of the head. */
template <int VT> __global__ void __launch_bounds__(ATT_THREADS) k_att_values(struct att_args a)
{
	const int tl = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads, t = a.t0 + tl;
	const int i = blockIdx.y * ATT_THREADS + threadIdx.x;
	if (i >= a.head_dim)
		return;
	const int g = h / (a.n_heads / a.n_kv_heads);
	const int pos = a.loc[t].pos, slot = a.loc[t].slot;
	const int lo = att_lo(pos, a.window), len = pos - lo + 1;
	const float *p = a.S + ((size_t)tl * (size_t)a.n_heads + (size_t)h) * (size_t)a.lmax;
	const uint8_t *base = a.v + (size_t)slot * (size_t)a.ctx * a.v_row_bytes +
			      (size_t)g * (a.v_row_bytes / (size_t)a.n_kv_heads);
	float acc = 0.0f;
#pragma unroll 4
	for (int jj = 0; jj < len; jj++) {
		const int j = lo + jj;
		acc = kvt<VT>::acc(acc, p[jj], base + (size_t)(j % a.ctx) * a.v_row_bytes, i);
	}
	a.out[((size_t)t * (size_t)a.n_heads + (size_t)h) * (size_t)a.head_dim + (size_t)i] = acc;
}

template <int KT> static cudaError_t att_scores(cudaStream_t s, const struct att_args *a, int nt)
{
	const dim3 grid((unsigned)(nt * a->n_heads),
			(unsigned)((a->lmax + ATT_THREADS - 1) / ATT_THREADS));
	k_att_scores<KT><<<grid, ATT_THREADS, kvt<KT>::q_bytes(a->head_dim), s>>>(*a);
	return cudaGetLastError();
}

template <int VT> static cudaError_t att_values(cudaStream_t s, const struct att_args *a, int nt)
{
	const dim3 grid((unsigned)(nt * a->n_heads),
			(unsigned)((a->head_dim + ATT_THREADS - 1) / ATT_THREADS));
	k_att_values<VT><<<grid, ATT_THREADS, 0, s>>>(*a);
	return cudaGetLastError();
}

extern "C" cudaError_t lmc_attention(cudaStream_t s, float *out, const float *q,
				     const struct lm_kv_layer *kv, const struct lm_tok_loc *loc,
				     int t0, int nt, int n_heads, float scale, float *S, int lmax)
{
	if (nt <= 0)
		return cudaSuccess;
	const struct att_args a = {
		.q = q,
		.out = out,
		.k = (const uint8_t *)kv->k,
		.v = (const uint8_t *)kv->v,
		.k_row_bytes = kv->k_row_bytes,
		.v_row_bytes = kv->v_row_bytes,
		.ctx = kv->ctx,
		.window = kv->window,
		.n_kv_heads = kv->n_kv_heads,
		.head_dim = kv->head_dim,
		.loc = loc,
		.t0 = t0,
		.n_heads = n_heads,
		.scale = scale,
		.S = S,
		.lmax = lmax,
		.sinks = kv->sinks,
	};
	cudaError_t e;
	switch (kv->k_type) {
#define ATT_K_CASE(TY)                         \
	case TY:                               \
		e = att_scores<TY>(s, &a, nt); \
		break;
		LMC_KV_TYPES(ATT_K_CASE)
#undef ATT_K_CASE
	default:
		return cudaErrorInvalidValue;
	}
	if (e != cudaSuccess)
		return e;
	k_att_softmax<<<(unsigned)(nt * n_heads), ATT_THREADS, 0, s>>>(a);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return e;
	switch (kv->v_type) {
#define ATT_V_CASE(TY)                         \
	case TY:                               \
		e = att_values<TY>(s, &a, nt); \
		break;
		LMC_KV_TYPES(ATT_V_CASE)
#undef ATT_V_CASE
	default:
		return cudaErrorInvalidValue;
	}
	return e;
}

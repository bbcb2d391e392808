/* matmul.cu — y = W x for every weight type, reading the GGUF blocks as they are in device
 * memory (never expanded to f16 or f32).
 *
 * The GEMV, k_mmv, serves one token (decode) and batches below MMQ_MIN_TOKENS, and every batch
 * of f32, f16, bf16 and MXFP4 weights: a block of 128 threads owns one weight row and a tile of
 * T tokens (T = 1, 2, 4 or 8, by the batch's size). Its threads take the row's units
 * (cuda_math.h) in turn, thread i units i, i + 128, ...; each unit is decoded once into
 * registers and dotted with the tile's T activation rows. Each thread sums its units in
 * order per token, the warps reduce by butterfly and the block adds its four warps in order.
 * None of that depends on T or on the other tokens, so a token's result is the same bits alone
 * or in a batch of any size: the CPU backend's batch invariance (README, "Kernels are batch
 * invariant"), which lets the mesh batch and re-prefill without moving a greedy token.
 *
 * Blocks are numbered token tile fastest, so the tiles of one row run side by side and a row is
 * read from device memory about once per batch, the other tiles finding it in L2. The one-token
 * case is the memory-bound GEMV of decode: 16-byte loads where the layout allows (Q4_K's qs,
 * f32/f16/bf16 rows whose length is a multiple of 16 bytes), 16-bit loads for the 2-byte
 * aligned blocks of Q8_0, Q4_0 and Q6_K, bytes for MXFP4's 17-byte blocks, and enough rows in
 * flight per multiprocessor.
 *
 * Activations are converted first, as GGUF's reference does (backend.h): to f16 or bf16 for
 * those weights, to Q8_0 or Q8_K blocks for the quantized ones, bit for bit as the CPU's
 * reference quantizers (see the converters below and tests/unit/test_cuda_math.c).
 *
 * Prefill on tensor cores. Batches of MMQ_MIN_TOKENS tokens or more of Q8_0, Q4_0, Q4_K and
 * Q6_K weights take k_mmq, an int8 mma.sync (m16n8k16, s8 x s8 -> s32) GEMM that gives every
 * token the bits k_mmv gives it, so a token prefilled in a batch equals the same token decoded
 * alone. Its k dimension is 16 elements of one unit, in an order of the type's choosing
 * (lmc_kw_*): one mma per unit for Q8_0 and Q4_0, two for Q4_K (its low and its high nibbles,
 * which have their own scales), four for Q6_K (a scale per 4 elements: mma p keeps only k-word
 * p, the rest zero, so a quarter of its k is work). The mmas yield, for 16 rows by 8 tokens,
 * the exact integer dots k_mmv's dp4a computes. The float part is k_mmv's to the operation:
 * the unit's value by the same helper (lmc_unit_q8_0, _q4_0, _q4_K, _q6_K) and the same sum
 * order (cuda_math.h, "The sum order"): a warp owns 16 rows by 16 tokens and walks the 128
 * virtual threads of that order, warp by warp and, inside one, in the butterfly's leaf order
 * (lmc_bitrev5); for virtual thread i it adds the values of units i, i + 128, ... in order
 * from 0.0f, pushes the sum into the butterfly's tree (lmc_tree_push) and, at the warp's last
 * leaf, adds the warp total after the previous ones (lmc_sum_warps_step).
 * tests/unit/test_cuda_math.c emulates both kernels' orders and the mma's fragments on the
 * host and requires the same bits; tests/gpu/op_matrix.c checks it on the GPU for batches on
 * both sides of the threshold. The float work, four operations or so per (row, token, unit),
 * is what the invariance costs: the integer dots are nearly free on the tensor cores, the
 * scaling and the ordered sums are not. Operands are read straight from global memory (rows
 * through L1, a token tile's activations shared by the block's four warps); a shared-memory
 * staging of the tiles is the next step if the device run shows the loads bound. MXFP4
 * (gpt-oss's experts) stays on k_mmv at every batch size.
 *
 * Launches of a decode token (the question of CUDA graphs). Counted from the code for an
 * 8B-shaped llama (32 layers, quantized weights, no biases): a layer is 15 seam calls and 26
 * kernels (rmsnorm 1; q, k, v 2 each: quantizer and GEMV; rope 2; kv_store 2: K and V;
 * attention 3: scores, softmax, values; wo 2; add 1; rmsnorm 1; gate, up 2 each; silu_mul 1;
 * down 2; add 1), so a token is 32 x 26 + 4 (embedding, output norm, lm_head 2) = 836 kernels,
 * plus the copies of its id and its places in and of its logits out. Its weights are about
 * 4.5 GB in q4_K: about 1.7 ms at 80% of an H100's 3.35 TB/s. At the 2 to 3 us a launch
 * usually costs the host, 836 launches are 1.7 to 2.5 ms, as long as the reads; and 19 of a
 * layer's 26 kernels are not GEMVs but small ones (norms, rope, stores, adds, the quantizers,
 * attention at short contexts) whose minimum time on the GPU adds more. So launches are
 * likely a bound of decode here. These are estimates, not measurements:
 * bench_cuda's step lines measure it (host enqueue time, wall time, GPU time with the queue
 * kept full; launch_share = (wall - GPU) / wall), and the device run decides. If launch_share
 * is above about 0.1, the one-token step wants a CUDA graph. A graph is not a local change:
 * the seam has no step boundary (the engine issues ops one by one), the token's places and id
 * are copied from pageable host memory (not capturable), and attention's grid depends on the
 * position, so a captured step needs pinned staging for the places, attention sized from
 * device-side positions, and begin/end slots in the seam; fusing the small kernels (norm with
 * the quantizer, rope with kv_store, the residual add into the GEMV's store) is the other way
 * to fewer launches, and works without a graph.
 */
#include "kernels/cuda/cuda_common.cuh"

#define MMV_THREADS LMC_SUM_THREADS /* one real thread per virtual thread of the sum order */
#define MMV_WARPS   LMC_SUM_WARPS
/* Tokens per launch: keeps the grid (rows x tiles) inside its 2^31 - 1 blocks. */
#define MMV_TOKENS_PER_LAUNCH 512

/* ------------------------------------------------------------------------------------------ */
/* Activation converters                                                                      */

/* Q8_0: one warp per block of 32, one value per lane. */
__global__ void k_act_q8_0(const float *__restrict__ x, int8_t *__restrict__ qs,
			   float *__restrict__ d, int64_t ne0, int64_t blocks)
{
	const int64_t gw = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
	if (gw >= blocks)
		return;
	const int lane = threadIdx.x & 31;
	const int64_t e = gw * LMC_QK + lane; /* rows are whole blocks: [n][ne0] is flat */
	const float v = x[e];
	const float amax = lmc_warp_max(fabsf(v));
	const float dd = lmc_q8_0_d(amax), id = lmc_q8_0_id(dd);
	qs[e] = lmc_q8_0_q(v, id);
	if (lane == 0)
		d[gw] = lmc_round_f16(dd);
	(void)ne0;
}

/* Q8_K: one warp per block of 256, eight consecutive values per lane. The value of largest
 * magnitude, the first on a tie, as lm_quantize_q8_K_ref scans for it. */
__global__ void k_act_q8_K(const float *__restrict__ x, int8_t *__restrict__ qs,
			   float *__restrict__ d, int32_t *__restrict__ bsums, int64_t blocks)
{
	const int64_t gw = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
	if (gw >= blocks)
		return;
	const int lane = threadIdx.x & 31;
	const float *xb = x + gw * LMC_QKK + 8 * lane;
	float v[8];
	float a = 0.0f, m = 0.0f;
	int idx = 8 * lane;
	for (int i = 0; i < 8; i++) {
		v[i] = xb[i];
		if (fabsf(v[i]) > a) {
			a = fabsf(v[i]);
			m = v[i];
			idx = 8 * lane + i;
		}
	}
	for (int o = 16; o > 0; o >>= 1) {
		const float oa = __shfl_xor_sync(LMC_FULL_MASK, a, o);
		const float om = __shfl_xor_sync(LMC_FULL_MASK, m, o);
		const int oi = __shfl_xor_sync(LMC_FULL_MASK, idx, o);
		if (lmc_amax_pick(a, idx, oa, oi)) {
			a = oa;
			m = om;
			idx = oi;
		}
	}
	/* Every lane holds the same (a, m): the pick is exact and symmetric. */
	int8_t q[8];
	int sum = 0;
	const float iscale = a != 0.0f ? -127.f / m : 0.0f;
	for (int i = 0; i < 8; i++) {
		q[i] = a != 0.0f ? lmc_q8_K_q(v[i], iscale) : 0;
		sum += q[i];
	}
	int2 packed;
	memcpy(&packed, q, sizeof packed);
	*(int2 *)(qs + gw * LMC_QKK + 8 * lane) = packed;
	const int pair = sum + __shfl_down_sync(LMC_FULL_MASK, sum, 1);
	if ((lane & 1) == 0)
		bsums[gw * 16 + lane / 2] = pair;
	if (lane == 0)
		d[gw] = a != 0.0f ? 1 / iscale : 0.0f;
}

template <bool BF>
__global__ void k_act_h16(const float *__restrict__ x, uint16_t *__restrict__ y, size_t len)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = BF ? lmc_f32_to_bf16(x[i]) : lmc_f32_to_f16(x[i]);
}

/* ------------------------------------------------------------------------------------------ */
/* Weight types: how a unit is loaded and dotted with one token's activations                 */

template <class WU, void (*LOAD)(const uint8_t *, int64_t, WU *),
	  float (*DOT)(const WU *, int64_t, const struct lmc_xrow *), int BLCK>
struct op_quant {
	typedef WU W;
	typedef struct lmc_xrow X;
	static __device__ __forceinline__ X xrow(const struct lmc_act &a, int t)
	{
		X r;
		r.qs = a.qs + (size_t)t * (size_t)a.ne0;
		r.d = a.d + (size_t)t * (size_t)(a.ne0 / BLCK);
		r.bsums = a.bsums != NULL ? a.bsums + (size_t)t * (size_t)(a.ne0 / 16) : NULL;
		return r;
	}
	static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, W &w)
	{
		LOAD(row, u, &w);
	}
	static __device__ __forceinline__ float dot(const W &w, int64_t u, const X &x)
	{
		return DOT(&w, u, &x);
	}
};

typedef op_quant<lmc_w_q8_0, lmc_load_q8_0, lmc_dot_q8_0, LMC_QK> op_q8_0;
typedef op_quant<lmc_w_q4_0, lmc_load_q4_0, lmc_dot_q4_0, LMC_QK> op_q4_0;
typedef op_quant<lmc_w_mxfp4, lmc_load_mxfp4, lmc_dot_mxfp4, LMC_QK> op_mxfp4;
typedef op_quant<lmc_w_q4_K, lmc_load_q4_K, lmc_dot_q4_K, LMC_QKK> op_q4_K;
typedef op_quant<lmc_w_q6_K, lmc_load_q6_K, lmc_dot_q6_K, LMC_QKK> op_q6_K;

/* f32 weights, V elements per unit (4: one 16-byte load; 1 where rows are not 16-byte
 * multiples). Products in f32. */
template <int V> struct op_f32 {
	struct W {
		float v[V];
	};
	typedef const float *X;
	static __device__ __forceinline__ X xrow(const struct lmc_act &a, int t)
	{
		return a.x + (size_t)t * (size_t)a.ne0;
	}
	static __device__ __forceinline__ void ld(const float *p, float *v)
	{
		if (V == 4) {
			const float4 q = *(const float4 *)p;
			v[0] = q.x;
			v[1] = q.y;
			v[2] = q.z;
			v[3] = q.w;
		} else {
			v[0] = p[0];
		}
	}
	static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, W &w)
	{
		ld((const float *)row + u * V, w.v);
	}
	static __device__ __forceinline__ float dot(const W &w, int64_t u, const X &x)
	{
		float xv[V];
		ld(x + u * V, xv);
		float s = 0.0f;
#pragma unroll
		for (int i = 0; i < V; i++)
			s += w.v[i] * xv[i];
		return s;
	}
};

/* f16 (BF false) and bf16 (BF true) weights against activations rounded to the same type. */
template <int V, bool BF> struct op_h16 {
	struct W {
		float v[V];
	};
	typedef const uint16_t *X;
	static __device__ __forceinline__ float cvt(uint32_t h)
	{
		return BF ? lmc_bf16_to_f32(h) : __half2float(__ushort_as_half((unsigned short)h));
	}
	static __device__ __forceinline__ void ld(const uint16_t *p, float *v)
	{
		if (V == 8) {
			const uint4 q = *(const uint4 *)p;
			const uint32_t w4[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
			for (int i = 0; i < 4; i++) {
				v[2 * i] = cvt(w4[i] & 0xffffu);
				v[2 * i + 1] = cvt(w4[i] >> 16);
			}
		} else {
			v[0] = cvt(p[0]);
		}
	}
	static __device__ __forceinline__ X xrow(const struct lmc_act &a, int t)
	{
		return a.x16 + (size_t)t * (size_t)a.ne0;
	}
	static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, W &w)
	{
		ld((const uint16_t *)row + u * V, w.v);
	}
	static __device__ __forceinline__ float dot(const W &w, int64_t u, const X &x)
	{
		float xv[V];
		ld(x + u * V, xv);
		float s = 0.0f;
#pragma unroll
		for (int i = 0; i < V; i++)
			s += w.v[i] * xv[i];
		return s;
	}
};

/* ------------------------------------------------------------------------------------------ */
/* The kernel                                                                                 */

template <class Op, int T>
__global__ void __launch_bounds__(MMV_THREADS)
	k_mmv(const uint8_t *__restrict__ w, size_t row_bytes, int64_t units, struct lmc_act a,
	      float *__restrict__ y, int64_t ne1, int t_base, int n, int ntiles)
{
	const int64_t b = blockIdx.x;
	const int tile = (int)(b % ntiles);
	const int64_t r = b / ntiles;
	const int t0 = t_base + tile * T;
	const int nt = min(T, n - t0);
	const uint8_t *row = w + (size_t)r * row_bytes;

	typename Op::X xr[T];
	float acc[T];
#pragma unroll
	for (int t = 0; t < T; t++) {
		xr[t] = Op::xrow(a, t0 + (t < nt ? t : 0));
		acc[t] = 0.0f;
	}
#pragma unroll 2
	for (int64_t u = threadIdx.x; u < units; u += MMV_THREADS) {
		typename Op::W wu;
		Op::load(row, u, wu);
#pragma unroll
		for (int t = 0; t < T; t++)
			if (t < nt)
				acc[t] += Op::dot(wu, u, xr[t]);
	}

	__shared__ float part[T][MMV_WARPS];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
	for (int t = 0; t < T; t++) {
		const float v = lmc_warp_sum(acc[t]);
		if (lane == 0)
			part[t][warp] = v;
	}
	__syncthreads();
	if ((int)threadIdx.x < nt) {
		const int t = threadIdx.x;
		y[(size_t)(t0 + t) * (size_t)ne1 + (size_t)r] = lmc_sum_warps(part[t]);
	}
}

template <class Op, int T>
static cudaError_t mmv_launch(cudaStream_t s, const struct lm_weight *w, const struct lmc_act *a,
			      float *y, int n, int64_t units)
{
	for (int tb = 0; tb < n; tb += MMV_TOKENS_PER_LAUNCH) {
		const int nn = n - tb < MMV_TOKENS_PER_LAUNCH ? n - tb : MMV_TOKENS_PER_LAUNCH;
		const int ntiles = (nn + T - 1) / T;
		const uint64_t blocks = (uint64_t)w->ne1 * (uint64_t)ntiles;
		if (blocks > 0x7fffffffu)
			return cudaErrorInvalidConfiguration;
		k_mmv<Op, T><<<(unsigned)blocks, MMV_THREADS, 0, s>>>((const uint8_t *)w->data,
								      w->row_bytes, units, *a, y,
								      w->ne1, tb, tb + nn, ntiles);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

/* T by the batch: the result does not depend on it, only the work per block does. */
template <class Op>
static cudaError_t mmv_dispatch(cudaStream_t s, const struct lm_weight *w, const struct lmc_act *a,
				float *y, int n, int64_t units)
{
	if (n == 1)
		return mmv_launch<Op, 1>(s, w, a, y, n, units);
	if (n == 2)
		return mmv_launch<Op, 2>(s, w, a, y, n, units);
	if (n <= 4)
		return mmv_launch<Op, 4>(s, w, a, y, n, units);
	return mmv_launch<Op, 8>(s, w, a, y, n, units);
}

/* ------------------------------------------------------------------------------------------ */
/* The tensor-core GEMM (prefill batches of Q8_0 and Q4_0 weights)                            */

#define MMQ_MIN_TOKENS 16 /* batches from this many tokens take the GEMM */
#define MMQ_WARPS      4
#define MMQ_ROWS       (16 * MMQ_WARPS) /* a block's rows: 16 per warp */
#define MMQ_NT         2                /* mma tiles of 8 tokens per warp */
#define MMQ_TOKENS     (8 * MMQ_NT)     /* a block's tokens */

/* A weight type's operands for the GEMM (cuda_math.h): NK mmas of 16 k per unit, a lane's
 * k-word j of weights and activations for each of them, a row's scales for a unit (M), a
 * token's scales (X) and the unit's value from its NK integer dots. */
struct mmq_q8_0 {
	static const int NK = 1;
	typedef float M;
	typedef const float *X;
	static __device__ __forceinline__ void kw_w(const uint8_t *row, int64_t u, int j, int *o)
	{
		o[0] = lmc_kw_w_q8_0(row, u, j);
	}
	static __device__ __forceinline__ void kw_x(const int8_t *xq, int64_t u, int j, int *o)
	{
		o[0] = lmc_kw_x_q8_0(xq, u, j);
	}
	static __device__ __forceinline__ void meta(const uint8_t *row, int64_t u, M &m)
	{
		m = lmc_wd_q8_0(row, u);
	}
	static __device__ __forceinline__ X xs(const struct lmc_act &a, int t)
	{
		return a.d + (size_t)t * (size_t)(a.ne0 / LMC_QK);
	}
	static __device__ __forceinline__ float unit(const int *s, const M &m, const X &x,
						     int64_t u)
	{
		return lmc_unit_q8_0(s[0], m, x[u >> 1]);
	}
};

struct mmq_q4_0 : mmq_q8_0 {
	static __device__ __forceinline__ void kw_w(const uint8_t *row, int64_t u, int j, int *o)
	{
		o[0] = lmc_kw_w_q4_0(row, u, j);
	}
	static __device__ __forceinline__ void kw_x(const int8_t *xq, int64_t u, int j, int *o)
	{
		o[0] = lmc_kw_x_q4_0(xq, u, j);
	}
	static __device__ __forceinline__ void meta(const uint8_t *row, int64_t u, M &m)
	{
		m = lmc_wd_q4_0(row, u);
	}
	static __device__ __forceinline__ float unit(const int *s, const M &m, const X &x,
						     int64_t u)
	{
		return lmc_unit_q4_0(s[0], m, x[u >> 1]);
	}
};

struct mmq_q4_K {
	static const int NK = 2;
	typedef struct lmc_q4_K_meta M;
	struct X {
		const float *d;
		const int32_t *bsums;
	};
	static __device__ __forceinline__ void kw_w(const uint8_t *row, int64_t u, int j, int *o)
	{
		o[0] = lmc_kw_w_q4_K(row, u, 0, j);
		o[1] = lmc_kw_w_q4_K(row, u, 1, j);
	}
	static __device__ __forceinline__ void kw_x(const int8_t *xq, int64_t u, int j, int *o)
	{
		o[0] = lmc_kw_x_q4_K(xq, u, 0, j);
		o[1] = lmc_kw_x_q4_K(xq, u, 1, j);
	}
	static __device__ __forceinline__ void meta(const uint8_t *row, int64_t u, M &m)
	{
		lmc_meta_q4_K(row, u, &m);
	}
	static __device__ __forceinline__ X xs(const struct lmc_act &a, int t)
	{
		return X{a.d + (size_t)t * (size_t)(a.ne0 / LMC_QKK),
			 a.bsums + (size_t)t * (size_t)(a.ne0 / 16)};
	}
	static __device__ __forceinline__ float unit(const int *s, const M &m, const X &x,
						     int64_t u)
	{
		const int64_t blk = u >> 3;
		const int k = (int)(u & 7);
		return lmc_unit_q4_K(s[0], s[1], &m, x.d[blk],
				     x.bsums + blk * 16 + 4 * (k >> 1) + (k & 1));
	}
};

struct mmq_q6_K {
	static const int NK = 4;
	typedef struct lmc_q6_K_meta M;
	typedef const float *X;
	static __device__ __forceinline__ void kw_w(const uint8_t *row, int64_t u, int j, int *o)
	{
		const int w = lmc_kw_w_q6_K(row, u, j);
#pragma unroll
		for (int p = 0; p < NK; p++)
			o[p] = lmc_kw_part(p, j, w);
	}
	static __device__ __forceinline__ void kw_x(const int8_t *xq, int64_t u, int j, int *o)
	{
		const int x = lmc_kw_x_q6_K(xq, u, j);
#pragma unroll
		for (int p = 0; p < NK; p++)
			o[p] = x;
	}
	static __device__ __forceinline__ void meta(const uint8_t *row, int64_t u, M &m)
	{
		lmc_meta_q6_K(row, u, &m);
	}
	static __device__ __forceinline__ X xs(const struct lmc_act &a, int t)
	{
		return a.d + (size_t)t * (size_t)(a.ne0 / LMC_QKK);
	}
	static __device__ __forceinline__ float unit(const int *s, const M &m, const X &x,
						     int64_t u)
	{
		int si = 0;
#pragma unroll
		for (int g = 0; g < 4; g++)
			si += m.sc[g] * s[g];
		return lmc_unit_q6_K(si, m.d, x[u >> 4]);
	}
};

/* c = a b over 16 k: 16 rows by 8 tokens (fragments in cuda_math.h). */
static __device__ __forceinline__ void mma_s8_16816(int c[4], int a0, int a1, int b)
{
	asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
	    "{%7, %7, %7, %7};"
	    : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
	    : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

/* One block: MMQ_ROWS rows by MMQ_TOKENS tokens (from t_base), each warp 16 rows by all the
 * tokens. A warp walks the virtual threads of the sum order (cuda_math.h) warp by warp and,
 * inside one, in the butterfly's leaf order; for virtual thread i it runs units i, i + 128, ...
 * through the mma and adds their values in order, as GEMV thread i does, then pushes the sum
 * into the tree. */
template <class Q>
__global__ void __launch_bounds__(32 * MMQ_WARPS)
	k_mmq(const uint8_t *__restrict__ w, size_t row_bytes, int64_t units, int64_t ne1,
	      struct lmc_act a, float *__restrict__ y, int t_base, int n, int ntiles)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, q = lane & 3;
	const int t0 = t_base + (int)(blockIdx.x % ntiles) * MMQ_TOKENS;
	const int64_t r0 = (int64_t)(blockIdx.x / ntiles) * MMQ_ROWS + 16 * warp;
	/* Rows and tokens past the edges read the last ones; their results are not stored. */
	const uint8_t *wr[2];
	const int8_t *xb[MMQ_NT];
	typename Q::X xs[MMQ_NT][2];
#pragma unroll
	for (int i = 0; i < 2; i++)
		wr[i] = w + (size_t)min(r0 + lmc_mma_a_row(lane, i), ne1 - 1) * row_bytes;
#pragma unroll
	for (int j = 0; j < MMQ_NT; j++) {
		const int tb = min(t0 + 8 * j + lmc_mma_b_token(lane), n - 1);
		xb[j] = a.qs + (size_t)tb * (size_t)a.ne0;
#pragma unroll
		for (int c = 0; c < 2; c++)
			xs[j][c] = Q::xs(a, min(t0 + 8 * j + lmc_mma_c_token(lane, c), n - 1));
	}
	float st[MMQ_NT][4][5] = {}, tot[MMQ_NT][4] = {};
	for (int vw = 0; vw < LMC_SUM_WARPS; vw++) {
#pragma unroll
		for (int k = 0; k < 32; k++) {
			float acc[MMQ_NT][4] = {};
			for (int64_t u = 32 * vw + lmc_bitrev5(k); u < units;
			     u += LMC_SUM_THREADS) {
				int aw[2][Q::NK];
				typename Q::M m[2];
#pragma unroll
				for (int i = 0; i < 2; i++) {
					Q::kw_w(wr[i], u, q, aw[i]);
					Q::meta(wr[i], u, m[i]);
				}
#pragma unroll
				for (int j = 0; j < MMQ_NT; j++) {
					int c[Q::NK][4], bx[Q::NK];
					Q::kw_x(xb[j], u, q, bx);
#pragma unroll
					for (int p = 0; p < Q::NK; p++)
						mma_s8_16816(c[p], aw[0][p], aw[1][p], bx[p]);
#pragma unroll
					for (int e = 0; e < 4; e++) {
						int s[Q::NK];
#pragma unroll
						for (int p = 0; p < Q::NK; p++)
							s[p] = c[p][e];
						acc[j][e] += Q::unit(s, m[e >> 1], xs[j][e & 1], u);
					}
				}
			}
#pragma unroll
			for (int j = 0; j < MMQ_NT; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const float v = lmc_tree_push(st[j][e], k, acc[j][e]);
					if (k == 31)
						tot[j][e] = lmc_sum_warps_step(tot[j][e], vw, v);
				}
		}
	}
#pragma unroll
	for (int j = 0; j < MMQ_NT; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int64_t r = r0 + lmc_mma_c_row(lane, e);
			const int t = t0 + 8 * j + lmc_mma_c_token(lane, e);
			if (r < ne1 && t < n)
				y[(size_t)t * (size_t)ne1 + (size_t)r] = tot[j][e];
		}
}

template <class Q>
static cudaError_t mmq_launch(cudaStream_t s, const struct lm_weight *w, const struct lmc_act *a,
			      float *y, int n, int64_t units)
{
	const int64_t rtiles = (w->ne1 + MMQ_ROWS - 1) / MMQ_ROWS;
	for (int tb = 0; tb < n; tb += MMV_TOKENS_PER_LAUNCH) {
		const int nn = n - tb < MMV_TOKENS_PER_LAUNCH ? n - tb : MMV_TOKENS_PER_LAUNCH;
		const int ntiles = (nn + MMQ_TOKENS - 1) / MMQ_TOKENS;
		const uint64_t blocks = (uint64_t)rtiles * (uint64_t)ntiles;
		if (blocks > 0x7fffffffu)
			return cudaErrorInvalidConfiguration;
		k_mmq<Q><<<(unsigned)blocks, 32 * MMQ_WARPS, 0, s>>>((const uint8_t *)w->data,
								     w->row_bytes, units, w->ne1,
								     *a, y, tb, tb + nn, ntiles);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

/* Whether rows of w start and end on 16 bytes (the vector paths of the float types). */
static bool mmv_rows_16(const struct lm_weight *w)
{
	return w->row_bytes % 16 == 0 && ((uintptr_t)w->data & 15) == 0;
}

extern "C" cudaError_t lmc_matmul(cudaStream_t s, const struct lm_weight *w,
				  const struct lmc_act *a, float *y, int n)
{
	const int64_t ne0 = w->ne0;
	switch (w->type) {
	case LM_F32: /* the activations are x itself: their rows must be 16-byte aligned too */
		return mmv_rows_16(w) && ((uintptr_t)a->x & 15) == 0
			       ? mmv_dispatch<op_f32<4>>(s, w, a, y, n, ne0 / 4)
			       : mmv_dispatch<op_f32<1>>(s, w, a, y, n, ne0);
	case LM_F16:
		return mmv_rows_16(w) ? mmv_dispatch<op_h16<8, false>>(s, w, a, y, n, ne0 / 8)
				      : mmv_dispatch<op_h16<1, false>>(s, w, a, y, n, ne0);
	case LM_BF16:
		return mmv_rows_16(w) ? mmv_dispatch<op_h16<8, true>>(s, w, a, y, n, ne0 / 8)
				      : mmv_dispatch<op_h16<1, true>>(s, w, a, y, n, ne0);
	case LM_Q8_0:
		return n >= MMQ_MIN_TOKENS
			       ? mmq_launch<mmq_q8_0>(s, w, a, y, n, ne0 / LMC_QK * LMC_UPB_Q8_0)
			       : mmv_dispatch<op_q8_0>(s, w, a, y, n, ne0 / LMC_QK * LMC_UPB_Q8_0);
	case LM_Q4_0:
		return n >= MMQ_MIN_TOKENS
			       ? mmq_launch<mmq_q4_0>(s, w, a, y, n, ne0 / LMC_QK * LMC_UPB_Q4_0)
			       : mmv_dispatch<op_q4_0>(s, w, a, y, n, ne0 / LMC_QK * LMC_UPB_Q4_0);
	case LM_MXFP4:
		return mmv_dispatch<op_mxfp4>(s, w, a, y, n, ne0 / LMC_QK * LMC_UPB_MXFP4);
	case LM_Q4_K:
		return n >= MMQ_MIN_TOKENS
			       ? mmq_launch<mmq_q4_K>(s, w, a, y, n, ne0 / LMC_QKK * LMC_UPB_Q4_K)
			       : mmv_dispatch<op_q4_K>(s, w, a, y, n, ne0 / LMC_QKK * LMC_UPB_Q4_K);
	case LM_Q6_K:
		return n >= MMQ_MIN_TOKENS
			       ? mmq_launch<mmq_q6_K>(s, w, a, y, n, ne0 / LMC_QKK * LMC_UPB_Q6_K)
			       : mmv_dispatch<op_q6_K>(s, w, a, y, n, ne0 / LMC_QKK * LMC_UPB_Q6_K);
	default:
		return cudaErrorInvalidValue;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Activation layout                                                                          */

extern "C" enum lm_dtype lmc_vec_dot_type(enum lm_dtype w)
{
	switch (w) {
#define MM_VDT_CASE(TY, VDT) \
	case TY:             \
		return VDT;
		LMC_WEIGHT_TYPES(MM_VDT_CASE)
#undef MM_VDT_CASE
	default:
		return LM_DTYPE_COUNT;
	}
}

static size_t act_round(size_t b)
{
	return (b + 255) / 256 * 256;
}

extern "C" size_t lmc_act_bytes(enum lm_dtype vdt, int64_t ne0, int n)
{
	const size_t e = (size_t)ne0 * (size_t)n;
	switch (vdt) {
	case LM_F16:
	case LM_BF16:
		return act_round(e * 2);
	case LM_Q8_0:
		return act_round(e) + act_round(e / LMC_QK * sizeof(float));
	case LM_Q8_K:
		return act_round(e) + act_round(e / LMC_QKK * sizeof(float)) +
		       act_round(e / 16 * sizeof(int32_t));
	default:
		return 0;
	}
}

extern "C" void lmc_act_carve(struct lmc_act *a, enum lm_dtype vdt, void *buf, const float *x,
			      int64_t ne0, int n)
{
	const size_t e = (size_t)ne0 * (size_t)n;
	uint8_t *p = (uint8_t *)buf;
	memset(a, 0, sizeof *a);
	a->type = vdt;
	a->x = x;
	a->ne0 = ne0;
	if (vdt == LM_F16 || vdt == LM_BF16) {
		a->x16 = (uint16_t *)p;
	} else if (vdt == LM_Q8_0 || vdt == LM_Q8_K) {
		const size_t blck = vdt == LM_Q8_0 ? LMC_QK : LMC_QKK;
		a->qs = (int8_t *)p;
		a->d = (float *)(p + act_round(e));
		if (vdt == LM_Q8_K)
			a->bsums =
				(int32_t *)(p + act_round(e) + act_round(e / blck * sizeof(float)));
	}
}

extern "C" cudaError_t lmc_act_convert(cudaStream_t s, const struct lmc_act *a, const float *x,
				       int n)
{
	const size_t e = (size_t)a->ne0 * (size_t)n;
	switch (a->type) {
	case LM_F32:
		return cudaSuccess;
	case LM_F16:
		k_act_h16<false><<<lmc_blocks(e, 256), 256, 0, s>>>(x, a->x16, e);
		break;
	case LM_BF16:
		k_act_h16<true><<<lmc_blocks(e, 256), 256, 0, s>>>(x, a->x16, e);
		break;
	case LM_Q8_0: {
		const int64_t blocks = (int64_t)(e / LMC_QK);
		k_act_q8_0<<<(unsigned)((blocks + 7) / 8), 256, 0, s>>>(x, a->qs, a->d, a->ne0,
									blocks);
		break;
	}
	case LM_Q8_K: {
		const int64_t blocks = (int64_t)(e / LMC_QKK);
		k_act_q8_K<<<(unsigned)((blocks + 7) / 8), 256, 0, s>>>(x, a->qs, a->d, a->bsums,
									blocks);
		break;
	}
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* attention_generic.c — the scalar reference of the KV cache's types: how a K or V row is stored, how q
 * meets a K row, how probabilities meet V rows.
 *
 * Every cache type is read in place, block by block, inside the dot product and the V
 * accumulation: nothing is dequantized into an f32 copy of the cache. The K side follows GGUF's
 * reference CPU kernels (ggml's vec_dot_*_generic): q is first converted to the K type's "vec_dot
 * type" (f16 for F16, bf16 for BF16, Q8_0 for Q8_0 and Q4_0, Q8_1 for Q5_1), float products sum
 * in double, block products sum as integers and are scaled by the blocks' deltas in f32. FP8,
 * which GGUF does not have, meets q in f32, summed in double like F32. The V side adds p x V_j
 * into f32 accumulators, a block's delta folded into p.
 *
 * Stores are GGUF's reference quantizers (common/format/quant.c), so a row's bytes are those
 * llama.cpp's generic build writes for the same K or V values.
 */
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

/* ------------------------------------------------------------------------------------------ */
/* Stores: f32 row -> the cache's bytes                                                       */

/* The other types store through GGUF's reference quantizers (common/format/quant.c), the same
 * functions the matmul's activations convert with. */
static void attn_store_f32(const float *x, void *dst, int64_t n)
{
	memcpy(dst, x, (size_t)n * sizeof(float));
}

/* ------------------------------------------------------------------------------------------ */
/* Dot products: one K row (head_dim values) with q in the K type's vec_dot layout             */

/* e4m3's 256 values, built once (a lookup is the reference's decoding; the SIMD sets decode
 * through f16 and must agree with it). */
static float attn_fp8_table[256];
static pthread_once_t attn_fp8_once = PTHREAD_ONCE_INIT;

static void attn_fp8_build(void)
{
	for (int c = 0; c < 256; c++)
		attn_fp8_table[c] = lm_fp8_to_f32((uint8_t)c);
}

const float *cpu_fp8_table(void)
{
	pthread_once(&attn_fp8_once, attn_fp8_build);
	return attn_fp8_table;
}

static float attn_dot_fp8(int64_t n, const void *k, const void *q)
{
	const float *t = cpu_fp8_table();
	const uint8_t *a = k;
	const float *b = q;
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += (double)(t[a[i]] * b[i]);
	return (float)sum;
}

/* Q5_1 . Q8_1: x = d_x q + m_x, so a block contributes d_x d_y sum(q y) + m_x (d_y sum(y)), the
 * last factor being the activation block's s. */
static float attn_dot_q5_1(int64_t n, const void *k, const void *q)
{
	const block_q5_1 *a = k;
	const block_q8_1 *b = q;
	float sum = 0;
	for (int64_t i = 0; i < n / QK5_1; i++) {
		uint32_t qh;
		memcpy(&qh, a[i].qh, sizeof qh);
		int sumi0 = 0, sumi1 = 0;
		for (int j = 0; j < QK5_1 / 2; j++) {
			const int x0 = (a[i].qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
			const int x1 = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
			sumi0 += x0 * b[i].qs[j];
			sumi1 += x1 * b[i].qs[j + QK5_1 / 2];
		}
		const int sumi = sumi0 + sumi1;
		sum += (lm_f16_to_f32(a[i].d) * lm_f16_to_f32(b[i].d)) * (float)sumi +
		       lm_f16_to_f32(a[i].m) * lm_f16_to_f32(b[i].s);
	}
	return sum;
}

#define ATTN_SCORES(name, dot)                                                                     \
	static void attn_scores_##name(int64_t hd, const uint8_t *k, size_t stride, int n,         \
				       const uint8_t *q, size_t q_stride, int nq, float *out,      \
				       size_t out_stride)                                          \
	{                                                                                          \
		for (int h = 0; h < nq; h++)                                                       \
			for (int j = 0; j < n; j++)                                                \
				out[(size_t)h * out_stride + (size_t)j] =                          \
					dot(hd, k + (size_t)j * stride, q + (size_t)h * q_stride); \
	}

ATTN_SCORES(f32, cpu_vec_dot_f32_generic)
ATTN_SCORES(f16, cpu_vec_dot_f16_generic)
ATTN_SCORES(bf16, cpu_vec_dot_bf16_generic)
ATTN_SCORES(q8_0, cpu_vec_dot_q8_0_generic)
ATTN_SCORES(q4_0, cpu_vec_dot_q4_0_generic)
ATTN_SCORES(q5_1, attn_dot_q5_1)
ATTN_SCORES(fp8, attn_dot_fp8)

/* ------------------------------------------------------------------------------------------ */
/* V accumulation: acc += a x V_j for one row                                                  */

static void attn_axpy_f32(int64_t n, float a, const void *v, float *acc)
{
	const float *x = v;
	for (int64_t i = 0; i < n; i++)
		acc[i] += a * x[i];
}

static void attn_axpy_f16(int64_t n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;
	for (int64_t i = 0; i < n; i++)
		acc[i] += a * lm_f16_to_f32(x[i]);
}

static void attn_axpy_bf16(int64_t n, float a, const void *v, float *acc)
{
	const uint16_t *x = v;
	for (int64_t i = 0; i < n; i++)
		acc[i] += a * lm_bf16_to_f32(x[i]);
}

static void attn_axpy_fp8(int64_t n, float a, const void *v, float *acc)
{
	const float *t = cpu_fp8_table();
	const uint8_t *x = v;
	for (int64_t i = 0; i < n; i++)
		acc[i] += a * t[x[i]];
}

static void attn_axpy_q8_0(int64_t n, float a, const void *v, float *acc)
{
	const block_q8_0 *x = v;
	for (int64_t i = 0; i < n / QK8_0; i++, acc += QK8_0) {
		const float d = a * lm_f16_to_f32(x[i].d);
		for (int j = 0; j < QK8_0; j++)
			acc[j] += d * (float)x[i].qs[j];
	}
}

static void attn_axpy_q4_0(int64_t n, float a, const void *v, float *acc)
{
	const block_q4_0 *x = v;
	for (int64_t i = 0; i < n / QK4_0; i++, acc += QK4_0) {
		const float d = a * lm_f16_to_f32(x[i].d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			acc[j] += d * (float)((x[i].qs[j] & 0x0f) - 8);
			acc[j + QK4_0 / 2] += d * (float)((x[i].qs[j] >> 4) - 8);
		}
	}
}

/* a (d q + m) = (a d) q + a m. */
static void attn_axpy_q5_1(int64_t n, float a, const void *v, float *acc)
{
	const block_q5_1 *x = v;
	for (int64_t i = 0; i < n / QK5_1; i++, acc += QK5_1) {
		const float d = a * lm_f16_to_f32(x[i].d), m = a * lm_f16_to_f32(x[i].m);
		uint32_t qh;
		memcpy(&qh, x[i].qh, sizeof qh);
		for (int j = 0; j < QK5_1 / 2; j++) {
			const int q0 = (x[i].qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
			const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
			acc[j] += d * (float)q0 + m;
			acc[j + QK5_1 / 2] += d * (float)q1 + m;
		}
	}
}

#define ATTN_VALUES(name, axpy)                                                             \
	static void attn_values_##name(int64_t hd, const uint8_t *v, size_t stride, int n,  \
				       const float *p, size_t p_stride, int nq, float *acc) \
	{                                                                                   \
		for (int h = 0; h < nq; h++)                                                \
			for (int j = 0; j < n; j++)                                         \
				axpy(hd, p[(size_t)h * p_stride + (size_t)j],               \
				     v + (size_t)j * stride, acc + (size_t)h * (size_t)hd); \
	}

ATTN_VALUES(f32, attn_axpy_f32)
ATTN_VALUES(f16, attn_axpy_f16)
ATTN_VALUES(bf16, attn_axpy_bf16)
ATTN_VALUES(q8_0, attn_axpy_q8_0)
ATTN_VALUES(q4_0, attn_axpy_q4_0)
ATTN_VALUES(q5_1, attn_axpy_q5_1)
ATTN_VALUES(fp8, attn_axpy_fp8)

/* ------------------------------------------------------------------------------------------ */
/* The table                                                                                  */

static size_t attn_q_f32(int64_t n)
{
	return (size_t)n * sizeof(float);
}

static size_t attn_q_16(int64_t n)
{
	return (size_t)n * sizeof(uint16_t);
}

static size_t attn_q_q8_0(int64_t n)
{
	return (size_t)(n / QK8_0) * sizeof(block_q8_0);
}

static size_t attn_q_q8_1(int64_t n)
{
	return (size_t)(n / QK8_1) * sizeof(block_q8_1);
}

void cpu_attn_generic_fill(struct cpu_kernels *k)
{
	struct cpu_attn_ops *t = k->attn;
	t[LM_F32] = (struct cpu_attn_ops){.store = attn_store_f32,
					  .q_bytes = attn_q_f32,
					  .scores = attn_scores_f32,
					  .values = attn_values_f32};
	t[LM_F16] = (struct cpu_attn_ops){.store = lm_quantize_f16_ref,
					  .q_bytes = attn_q_16,
					  .q_conv = lm_quantize_f16_ref,
					  .scores = attn_scores_f16,
					  .values = attn_values_f16};
	t[LM_BF16] = (struct cpu_attn_ops){.store = lm_quantize_bf16_ref,
					   .q_bytes = attn_q_16,
					   .q_conv = lm_quantize_bf16_ref,
					   .scores = attn_scores_bf16,
					   .values = attn_values_bf16};
	t[LM_Q8_0] = (struct cpu_attn_ops){.store = lm_quantize_q8_0_ref,
					   .q_bytes = attn_q_q8_0,
					   .q_conv = lm_quantize_q8_0_ref,
					   .scores = attn_scores_q8_0,
					   .values = attn_values_q8_0};
	t[LM_Q4_0] = (struct cpu_attn_ops){.store = lm_quantize_q4_0_ref,
					   .q_bytes = attn_q_q8_0,
					   .q_conv = lm_quantize_q8_0_ref,
					   .scores = attn_scores_q4_0,
					   .values = attn_values_q4_0};
	t[LM_Q5_1] = (struct cpu_attn_ops){.store = lm_quantize_q5_1_ref,
					   .q_bytes = attn_q_q8_1,
					   .q_conv = lm_quantize_q8_1_ref,
					   .scores = attn_scores_q5_1,
					   .values = attn_values_q5_1};
	t[LM_FP8_E4M3] = (struct cpu_attn_ops){.store = lm_quantize_fp8_ref,
					       .q_bytes = attn_q_f32,
					       .scores = attn_scores_fp8,
					       .values = attn_values_fp8};
}

/* kernels_generic.c — the scalar reference kernels of the CPU backend.
 *
 * These define the numerics every faster path is tested against. The dot products follow GGUF's
 * reference CPU kernels (ggml's ggml_vec_dot_*_generic): float vectors multiply in f32 and sum in
 * double; quantized blocks sum integer products and scale each block's sum by d_w * d_x in f32.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

/* ------------------------------------------------------------------------------------------ */
/* Dot products                                                                               */

float cpu_vec_dot_f32_generic(int64_t n, const void *w, const void *x)
{
	const float *a = w, *b = x;
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += (double)(a[i] * b[i]);
	return (float)sum;
}

float cpu_vec_dot_f16_generic(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += (double)(lm_f16_to_f32(a[i]) * lm_f16_to_f32(b[i]));
	return (float)sum;
}

float cpu_vec_dot_bf16_generic(int64_t n, const void *w, const void *x)
{
	const uint16_t *a = w, *b = x;
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += (double)(lm_bf16_to_f32(a[i]) * lm_bf16_to_f32(b[i]));
	return (float)sum;
}

float cpu_vec_dot_q8_0_generic(int64_t n, const void *w, const void *x)
{
	const block_q8_0 *a = w;
	const block_q8_0 *b = x;
	float sum = 0;
	for (int64_t i = 0; i < n / QK8_0; i++) {
		int sumi = 0;
		for (int j = 0; j < QK8_0; j++)
			sumi += a[i].qs[j] * b[i].qs[j];
		sum += sumi * (lm_f16_to_f32(a[i].d) * lm_f16_to_f32(b[i].d));
	}
	return sum;
}

float cpu_vec_dot_q4_0_generic(int64_t n, const void *w, const void *x)
{
	const block_q4_0 *a = w;
	const block_q8_0 *b = x;
	float sum = 0;
	for (int64_t i = 0; i < n / QK4_0; i++) {
		int sumi = 0;
		for (int j = 0; j < QK4_0 / 2; j++) {
			sumi += ((a[i].qs[j] & 0x0f) - 8) * b[i].qs[j];
			sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + QK4_0 / 2];
		}
		sum += sumi * lm_f16_to_f32(a[i].d) * lm_f16_to_f32(b[i].d);
	}
	return sum;
}

/* MXFP4 . Q8_0 as ggml's ggml_vec_dot_mxfp4_q8_0: per block the integer sum of the doubled
 * E2M1 values times the activation quants, then Q8_0's float step
 *     sum = sum + (float)sumi * (dw * dx),   dw = lm_e8m0_half(e) */
float cpu_vec_dot_mxfp4_generic(int64_t n, const void *w, const void *x)
{
	const block_mxfp4 *a = w;
	const block_q8_0 *b = x;
	float sum = 0;
	for (int64_t i = 0; i < n / QK_MXFP4; i++) {
		int sumi = 0;
		for (int j = 0; j < QK_MXFP4 / 2; j++) {
			sumi += lm_mxfp4_values[a[i].qs[j] & 0x0f] * b[i].qs[j];
			sumi += lm_mxfp4_values[a[i].qs[j] >> 4] * b[i].qs[j + QK_MXFP4 / 2];
		}
		sum += sumi * (lm_e8m0_half(a[i].e) * lm_f16_to_f32(b[i].d));
	}
	return sum;
}

/* Q4_K . Q8_K: x = d * sc * q - dmin * m per sub-block of 32, so a block contributes
 *     d * dx * sum_j sc_j * (q_j . x_j)  -  dmin * dx * sum_j m_j * sum(x_j)
 * and sum(x_j) comes from the activation block's bsums (two per sub-block). Both sums are exact
 * integers; the float steps per block are one accumulator's, in this order (cpu_impl.h:
 * every kernel set computes them so):
 *     sum = sum + ((dw * dx) * (float)sumi - (dmin * dx) * (float)summ) */
float cpu_vec_dot_q4_K_generic(int64_t n, const void *w, const void *x)
{
	const block_q4_K *a = w;
	const block_q8_K *b = x;
	float sum = 0;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const uint8_t *q4 = a[i].qs;
		const int8_t *q8 = b[i].qs;
		int sumi = 0, summ = 0;
		for (int j = 0; j < QK_K / 64; j++, q4 += 32, q8 += 64) {
			uint8_t sc0, m0, sc1, m1;
			lm_q4_K_scale_min(2 * j, a[i].scales, &sc0, &m0);
			lm_q4_K_scale_min(2 * j + 1, a[i].scales, &sc1, &m1);
			int dot0 = 0, dot1 = 0;
			for (int l = 0; l < 32; l++) {
				dot0 += (q4[l] & 0xf) * q8[l];
				dot1 += (q4[l] >> 4) * q8[l + 32];
			}
			sumi += sc0 * dot0 + sc1 * dot1;
			summ += m0 * (b[i].bsums[4 * j] + b[i].bsums[4 * j + 1]) +
				m1 * (b[i].bsums[4 * j + 2] + b[i].bsums[4 * j + 3]);
		}
		const float d = lm_f16_to_f32(a[i].d) * b[i].d;
		const float dmin = lm_f16_to_f32(a[i].dmin) * b[i].d;
		sum += d * sumi - dmin * summ;
	}
	return sum;
}

/* Q6_K . Q8_K: 16 sub-blocks of 16, x = d * sc * (q - 32); per block
 *     sum = sum + (dw * dx) * (float)sumi,   sumi = sum_s sc_s * ((q_s - 32) . x_s) */
float cpu_vec_dot_q6_K_generic(int64_t n, const void *w, const void *x)
{
	const block_q6_K *a = w;
	const block_q8_K *b = x;
	float sum = 0;
	for (int64_t i = 0; i < n / QK_K; i++) {
		int8_t q[QK_K];
		const uint8_t *ql = a[i].ql;
		const uint8_t *qh = a[i].qh;
		for (int h = 0; h < QK_K; h += 128, ql += 64, qh += 32) {
			for (int l = 0; l < 32; l++) {
				q[h + l] = (int8_t)(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
				q[h + l + 32] =
					(int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) -
						 32);
				q[h + l + 64] =
					(int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
				q[h + l + 96] =
					(int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) -
						 32);
			}
		}
		int sumi = 0;
		for (int s = 0; s < QK_K / 16; s++) {
			int dot = 0;
			for (int l = 0; l < 16; l++)
				dot += q[16 * s + l] * b[i].qs[16 * s + l];
			sumi += a[i].scales[s] * dot;
		}
		sum += lm_f16_to_f32(a[i].d) * b[i].d * sumi;
	}
	return sum;
}

/* ------------------------------------------------------------------------------------------ */
/* Matmul                                                                                     */

/* Rows outermost: each weight row is read once per batch and stays in L1 while every token's
 * activations pass over it. */
#define GEN_MM(name, dot)                                                                \
	static void gen_mm_##name(const struct cpu_mm *m, int64_t r0, int64_t r1)        \
	{                                                                                \
		for (int64_t r = r0; r < r1; r++) {                                      \
			const uint8_t *wr = m->w + (size_t)r * m->row_bytes;             \
			for (int t = 0; t < m->n; t++)                                   \
				m->y[(size_t)t * (size_t)m->ne1 + (size_t)r] =           \
					dot(m->ne0, wr, m->x + (size_t)t * m->x_stride); \
		}                                                                        \
	}

GEN_MM(f32, cpu_vec_dot_f32_generic)
GEN_MM(f16, cpu_vec_dot_f16_generic)
GEN_MM(bf16, cpu_vec_dot_bf16_generic)
GEN_MM(q8_0, cpu_vec_dot_q8_0_generic)
GEN_MM(q4_0, cpu_vec_dot_q4_0_generic)
GEN_MM(mxfp4, cpu_vec_dot_mxfp4_generic)
GEN_MM(q4_K, cpu_vec_dot_q4_K_generic)
GEN_MM(q6_K, cpu_vec_dot_q6_K_generic)

/* ------------------------------------------------------------------------------------------ */
/* Attention's softmax (the cache types' kernels are in attention_generic.c)                          */

double cpu_softmax_exp_generic(float *s, int n, float max)
{
	double sum = 0;
	for (int j = 0; j < n; j++) {
		s[j] = expf(s[j] - max);
		sum += s[j];
	}
	return sum;
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise                                                                               */

/* As GGUF's reference: the mean of squares summed in double, then x * scale, then * w. */
void cpu_rmsnorm_generic(float *y, const float *x, const float *w, int dim, float eps)
{
	double sum = 0;
	for (int i = 0; i < dim; i++)
		sum += (double)(x[i] * x[i]);
	const float mean = (float)(sum / dim);
	const float scale = 1.0f / sqrtf(mean + eps);
	for (int i = 0; i < dim; i++)
		y[i] = (x[i] * scale) * w[i];
}

void cpu_silu_mul_generic(float *y, const float *g, const float *u, size_t len)
{
	for (size_t i = 0; i < len; i++)
		y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* As GGUF's reference swiglu_oai: the gate clamped above, the up clamped both ways, in this
 * order of float operations. One scalar loop for every kernel set: an element's result does
 * not depend on its place in the buffer. */
void cpu_swiglu_oai_generic(float *y, const float *g, const float *u, size_t len, float alpha,
			    float limit)
{
	for (size_t i = 0; i < len; i++) {
		const float x = g[i] < limit ? g[i] : limit;
		const float v = u[i] < -limit ? -limit : (u[i] > limit ? limit : u[i]);
		const float glu = x / (1.0f + expf(alpha * (-x)));
		y[i] = glu * (v + 1.0f);
	}
}

/* GELU's tanh form as GGUF's reference CPU implementation evaluates it: on the f16 value of the
 * input, the result rounded to f16 (a table of all 65536 halves, built once). */
static uint16_t gen_gelu_table[1 << 16];
static pthread_once_t gen_gelu_once = PTHREAD_ONCE_INIT;

static void gen_gelu_build(void)
{
	const float a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
	for (uint32_t h = 0; h < (1u << 16); h++) {
		const float x = lm_f16_to_f32((uint16_t)h);
		const float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + a * x * x)));
		gen_gelu_table[h] = lm_f32_to_f16(g);
	}
}

const uint16_t *cpu_gelu_table(void)
{
	pthread_once(&gen_gelu_once, gen_gelu_build);
	return gen_gelu_table;
}

void cpu_gelu_mul_generic(float *y, const float *g, const float *u, size_t len)
{
	const uint16_t *table = cpu_gelu_table();
	for (size_t i = 0; i < len; i++) {
		if (g[i] <= -10.0f)
			y[i] = 0.0f;
		else if (g[i] >= 10.0f)
			y[i] = g[i] * u[i];
		else
			y[i] = lm_f16_to_f32(table[lm_f32_to_f16(g[i])]) * u[i];
	}
}

void cpu_add_generic(float *y, const float *a, size_t len)
{
	for (size_t i = 0; i < len; i++)
		y[i] += a[i];
}

/* ------------------------------------------------------------------------------------------ */
/* The table                                                                                  */

static size_t gen_act_f32(int64_t n)
{
	return (size_t)n * sizeof(float);
}

static size_t gen_act_16(int64_t n)
{
	return (size_t)n * sizeof(uint16_t);
}

static size_t gen_act_q8_0(int64_t n)
{
	return (size_t)(n / QK8_0) * sizeof(block_q8_0);
}

static size_t gen_act_q8_K(int64_t n)
{
	return (size_t)(n / QK_K) * sizeof(block_q8_K);
}

const struct cpu_kernels cpu_kernels_generic = {
	.name = "generic",
	.type =
		{
			[LM_F32] =
				{
					.act_bytes = gen_act_f32,
					.vec_dot = cpu_vec_dot_f32_generic,
					.mm = gen_mm_f32,
				},
			[LM_F16] =
				{
					.act_bytes = gen_act_16,
					.to_act = lm_quantize_f16_ref,
					.vec_dot = cpu_vec_dot_f16_generic,
					.mm = gen_mm_f16,
				},
			[LM_BF16] =
				{
					.act_bytes = gen_act_16,
					.to_act = lm_quantize_bf16_ref,
					.vec_dot = cpu_vec_dot_bf16_generic,
					.mm = gen_mm_bf16,
				},
			[LM_Q8_0] =
				{
					.act_bytes = gen_act_q8_0,
					.to_act = lm_quantize_q8_0_ref,
					.vec_dot = cpu_vec_dot_q8_0_generic,
					.mm = gen_mm_q8_0,
				},
			[LM_Q4_0] =
				{
					.act_bytes = gen_act_q8_0,
					.to_act = lm_quantize_q8_0_ref,
					.vec_dot = cpu_vec_dot_q4_0_generic,
					.mm = gen_mm_q4_0,
				},
			[LM_MXFP4] =
				{
					.act_bytes = gen_act_q8_0,
					.to_act = lm_quantize_q8_0_ref,
					.vec_dot = cpu_vec_dot_mxfp4_generic,
					.mm = gen_mm_mxfp4,
				},
			[LM_Q4_K] =
				{
					.act_bytes = gen_act_q8_K,
					.to_act = lm_quantize_q8_K_ref,
					.vec_dot = cpu_vec_dot_q4_K_generic,
					.mm = gen_mm_q4_K,
				},
			[LM_Q6_K] =
				{
					.act_bytes = gen_act_q8_K,
					.to_act = lm_quantize_q8_K_ref,
					.vec_dot = cpu_vec_dot_q6_K_generic,
					.mm = gen_mm_q6_K,
				},
		},
	.rmsnorm = cpu_rmsnorm_generic,
	.silu_mul = cpu_silu_mul_generic,
	.gelu_mul = cpu_gelu_mul_generic,
	.softmax_exp = cpu_softmax_exp_generic,
	.add = cpu_add_generic,
};

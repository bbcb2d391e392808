/* quant.h — GGUF block layouts and the row quantizers/dequantizers.
 *
 * The block structs are bit-compatible with GGUF files (ggml's ggml-common.h layouts); the
 * static_asserts pin their sizes so a padding change cannot slip through. Values are stored
 * little-endian; `d` fields are IEEE half precision (use lm_f16_to_f32).
 *
 *   Q4_0  32 elements: x[j] = (nibble - 8) * d; byte j holds element j (low) and j + 16 (high)
 *   Q5_1  32 elements: x[j] = q * d + m, q 5 bits: the low 4 as Q4_0's nibbles, the fifth of
 *         element j in bit j of qh (little-endian)
 *   Q8_0  32 elements: x[j] = qs[j] * d
 *   Q8_1  32 elements: Q8_0 plus s = d * sum(qs): the activation type Q5_1 dot products
 *         quantize to (never stored in files by layermesh)
 *   Q4_K  256 elements in 8 sub-blocks of 32: x = d * sc * q - dmin * m, with 6-bit sc and m
 *         packed in scales[12]; 4-bit q in qs[128], 64 elements per 32 bytes (low then high)
 *   Q6_K  256 elements in 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q 6 bits split as
 *         4 low bits in ql[128] and 2 high bits in qh[64]
 *   Q8_K  256 elements, f32 d, and bsums (sums of 16 consecutive qs): the activation type that
 *         Q4_K and Q6_K dot products quantize to (never stored in files)
 *   MXFP4 32 elements (OCP microscaling, gpt-oss's experts): an E8M0 scale byte e (2^(e - 127))
 *         and 4-bit E2M1 codes, byte j holding element j (low) and j + 16 (high) as Q4_0 does.
 *         A code c is the float (-1)^(c >> 3) * {0, 0.5, 1, 1.5, 2, 3, 4, 6}[c & 7]; ggml keeps
 *         the doubled values as integers (lm_mxfp4_values) and halves the scale instead
 *         (lm_e8m0_half), so x[j] = lm_mxfp4_values[c] * lm_e8m0_half(e), exact either way.
 *         Dot products quantize activations to Q8_0, as ggml's CPU path does.
 */
#ifndef LM_QUANT_H
#define LM_QUANT_H

#include <assert.h>
#include <stdint.h>

#include "common/base/dtype.h"

#define QK4_0        32
#define QK5_1        32
#define QK8_0        32
#define QK8_1        32
#define QK_K         256
#define K_SCALE_SIZE 12
#define QK_MXFP4     32

typedef struct {
	uint16_t d;
	uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

typedef struct {
	uint16_t d; /* delta */
	uint16_t m; /* min */
	uint8_t qh[4];
	uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

typedef struct {
	uint16_t d;
	int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

typedef struct {
	uint16_t d; /* delta */
	uint16_t s; /* d * sum(qs) */
	int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

typedef struct {
	uint16_t d;    /* super-block scale for the quantized scales */
	uint16_t dmin; /* super-block scale for the quantized mins */
	uint8_t scales[K_SCALE_SIZE];
	uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

typedef struct {
	uint8_t ql[QK_K / 2];
	uint8_t qh[QK_K / 4];
	int8_t scales[QK_K / 16];
	uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

typedef struct {
	float d;
	int8_t qs[QK_K];
	int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

typedef struct {
	uint8_t e; /* E8M0 scale: 2^(e - 127) */
	uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

/* The E2M1 codes' values, doubled (so they are integers): code c is lm_mxfp4_values[c] / 2. */
extern const int8_t lm_mxfp4_values[16];

/* Half of E8M0's 2^(e - 127), the scale of the doubled values: 2^(e - 128), a subnormal float
 * for e < 2 (0x00200000 << e), as ggml's ggml_e8m0_to_fp32_half. e = 255 gives +inf (E8M0's NaN
 * is not special-cased, as in ggml). */
static inline float lm_e8m0_half(uint8_t e)
{
	const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
	float f;
	__builtin_memcpy(&f, &bits, sizeof f);
	return f;
}

/* Quantizes n floats (a multiple of the type's block size) into dst, bit-for-bit as GGUF's
 * reference quantizers do (ggml's quantize_row_*_ref, without importance matrices), so files
 * written by layermesh's tools read the same in llama.cpp. Types: F32, F16, BF16, Q8_0, Q4_0,
 * Q5_1, Q4_K, Q6_K, Q8_K, Q8_1, MXFP4, and layermesh's FP8_E4M3 (lm_f32_to_fp8 per element). Returns 0,
 * or LM_EUNSUPPORTED / LM_EINVAL. */
int lm_quantize_row(enum lm_dtype type, const float *src, void *dst, int64_t n);
/* The inverse: n elements of `type` at src to floats. Same types. */
int lm_dequantize_row(enum lm_dtype type, const void *src, float *dst, int64_t n);

/* The reference quantizers of single types: lm_quantize_row's for that type, under the one
 * signature the kernels' tables take, so the CPU kernels point at these (their weight
 * activations and cache stores) rather than convert a second time. dst holds the type's blocks
 * (block_q8_0 ... for the block types, uint16_t for F16 and BF16, a byte per value for FP8). */
typedef void (*lm_quantize_fn)(const float *x, void *dst, int64_t n);
void lm_quantize_f16_ref(const float *x, void *dst, int64_t n);
void lm_quantize_bf16_ref(const float *x, void *dst, int64_t n);
void lm_quantize_fp8_ref(const float *x, void *dst, int64_t n);
void lm_quantize_q4_0_ref(const float *x, void *dst, int64_t n);
/* Q8_0 as GGUF's reference: d = amax / 127, q = roundf(x / d) with 1 / d (half away from zero).
 * Also the activations' and the Q8_0 cache's quantizer (see quant.c for why). */
void lm_quantize_q8_0_ref(const float *x, void *dst, int64_t n);
void lm_quantize_q8_K_ref(const float *x, void *dst, int64_t n);
/* Q5_1 as GGUF's reference: d = (max - min) / 31, m = min, q = (int)((x - min) / d + 0.5). */
void lm_quantize_q5_1_ref(const float *x, void *dst, int64_t n);
/* Q8_1 as GGUF's reference: Q8_0's d and quants, and s = f16(d * sum(qs)). */
void lm_quantize_q8_1_ref(const float *x, void *dst, int64_t n);
/* MXFP4 as GGUF's reference: e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block, and
 * for amax below 2^-125, where ggml's float-to-byte conversion is undefined), then each
 * element the code of the nearest value lm_mxfp4_values[c] * lm_e8m0_half(e), the lowest code
 * on a tie (so 0 is +0, never -0). */
void lm_quantize_mxfp4_ref(const float *x, void *dst, int64_t n);
/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K block's packed scales[12]. */
void lm_q4_K_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

#endif

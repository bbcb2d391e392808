/* dtype.h — tensor element types, numbered exactly as GGUF (ggml's enum ggml_type) numbers them.
 *
 * A quantized type stores `blck` elements in `type_size` bytes; a row of n elements (n a multiple
 * of blck) takes n / blck * type_size bytes. The table knows the sizes of every type a GGUF file
 * may carry, so the reader can check any file's tensor sizes; `compute` says which ones layermesh's
 * kernels can multiply by.
 *
 * One type is layermesh's own and never appears in a file: LM_FP8_E4M3, OCP's 8-bit float with 4
 * exponent and 3 mantissa bits (bias 7, no infinities, 0x7f and 0xff are NaN, largest finite
 * 448), a KV cache type only. It is numbered past GGUF's types (lm_dtype_in_gguf says which are
 * GGUF's) so that a number GGUF assigns later cannot collide with it inside a file.
 */
#ifndef LM_DTYPE_H
#define LM_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lm_dtype {
	LM_F32 = 0,
	LM_F16 = 1,
	LM_Q4_0 = 2,
	LM_Q4_1 = 3,
	LM_Q5_0 = 6,
	LM_Q5_1 = 7,
	LM_Q8_0 = 8,
	LM_Q8_1 = 9,
	LM_Q2_K = 10,
	LM_Q3_K = 11,
	LM_Q4_K = 12,
	LM_Q5_K = 13,
	LM_Q6_K = 14,
	LM_Q8_K = 15,
	LM_IQ2_XXS = 16,
	LM_IQ2_XS = 17,
	LM_IQ3_XXS = 18,
	LM_IQ1_S = 19,
	LM_IQ4_NL = 20,
	LM_IQ3_S = 21,
	LM_IQ2_S = 22,
	LM_IQ4_XS = 23,
	LM_I8 = 24,
	LM_I16 = 25,
	LM_I32 = 26,
	LM_I64 = 27,
	LM_F64 = 28,
	LM_IQ1_M = 29,
	LM_BF16 = 30,
	LM_TQ1_0 = 34,
	LM_TQ2_0 = 35,
	LM_MXFP4 = 39,
	LM_DTYPE_GGUF_COUNT = 40, /* the numbers GGUF files may use are below this */
	LM_FP8_E4M3 = 40,         /* layermesh's own: KV cache rows only, never in a file */
	LM_DTYPE_COUNT = 41,
};

struct lm_dtype_info {
	const char *name; /* "q4_K"; NULL for a number GGUF does not use */
	uint32_t blck;    /* elements per block */
	uint32_t size;    /* bytes per block */
	bool compute;     /* layermesh's kernels take it as a weight type */
};

/* NULL when t is neither a type GGUF defines nor layermesh's own (LM_FP8_E4M3). */
const struct lm_dtype_info *lm_dtype_info(uint32_t t);
/* Whether a GGUF file may hold a tensor of type t (a type GGUF defines). */
bool lm_dtype_in_gguf(uint32_t t);
/* "q8_0", or "type#N" for an unknown number (in a static buffer per call site: for messages only). */
const char *lm_dtype_name(uint32_t t);
/* Parses "f32", "F16", "q4_k", "Q4_K", ...; returns -1 when unknown. */
int lm_dtype_parse(const char *s);
/* Bytes of a row of n elements. Returns 0 on success, LM_EINVAL when n is not a multiple of the
 * block or t is unknown, LM_EOVERFLOW when the size does not fit in 64 bits. */
int lm_dtype_row_bytes(uint32_t t, uint64_t n, uint64_t *bytes);

/* IEEE half and bfloat16 conversions, round-to-nearest-even like ggml's (F16C-free scalar code). */
float lm_f16_to_f32(uint16_t h);
uint16_t lm_f32_to_f16(float f);
float lm_bf16_to_f32(uint16_t h);
uint16_t lm_f32_to_bf16(float f);
/* e4m3 (LM_FP8_E4M3): to f32 exactly (0x7f and 0xff to NaN); from f32 rounded to nearest, ties to
 * even, saturating at +-448 (infinities included; NaN becomes 0x7f with its sign). */
float lm_fp8_to_f32(uint8_t v);
uint8_t lm_f32_to_fp8(float f);

#endif

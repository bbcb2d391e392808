#include "common/base/dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "common/base/err.h"

static const struct lm_dtype_info dtype_table[LM_DTYPE_COUNT] = {
	[LM_F32] = {"f32", 1, 4, true},
	[LM_F16] = {"f16", 1, 2, true},
	[LM_Q4_0] = {"q4_0", 32, 18, true},
	[LM_Q4_1] = {"q4_1", 32, 20, false},
	[LM_Q5_0] = {"q5_0", 32, 22, false},
	[LM_Q5_1] = {"q5_1", 32, 24, false},
	[LM_Q8_0] = {"q8_0", 32, 34, true},
	[LM_Q8_1] = {"q8_1", 32, 36, false},
	[LM_Q2_K] = {"q2_K", 256, 84, false},
	[LM_Q3_K] = {"q3_K", 256, 110, false},
	[LM_Q4_K] = {"q4_K", 256, 144, true},
	[LM_Q5_K] = {"q5_K", 256, 176, false},
	[LM_Q6_K] = {"q6_K", 256, 210, true},
	[LM_Q8_K] = {"q8_K", 256, 292, false},
	[LM_IQ2_XXS] = {"iq2_xxs", 256, 66, false},
	[LM_IQ2_XS] = {"iq2_xs", 256, 74, false},
	[LM_IQ3_XXS] = {"iq3_xxs", 256, 98, false},
	[LM_IQ1_S] = {"iq1_s", 256, 50, false},
	[LM_IQ4_NL] = {"iq4_nl", 32, 18, false},
	[LM_IQ3_S] = {"iq3_s", 256, 110, false},
	[LM_IQ2_S] = {"iq2_s", 256, 82, false},
	[LM_IQ4_XS] = {"iq4_xs", 256, 136, false},
	[LM_I8] = {"i8", 1, 1, false},
	[LM_I16] = {"i16", 1, 2, false},
	[LM_I32] = {"i32", 1, 4, false},
	[LM_I64] = {"i64", 1, 8, false},
	[LM_F64] = {"f64", 1, 8, false},
	[LM_IQ1_M] = {"iq1_m", 256, 56, false},
	[LM_BF16] = {"bf16", 1, 2, true},
	[LM_TQ1_0] = {"tq1_0", 256, 54, false},
	[LM_TQ2_0] = {"tq2_0", 256, 66, false},
	[LM_MXFP4] = {"mxfp4", 32, 17, true},
	[LM_FP8_E4M3] = {"fp8", 1, 1, false},
};

const struct lm_dtype_info *lm_dtype_info(uint32_t t)
{
	if (t >= LM_DTYPE_COUNT || dtype_table[t].name == NULL)
		return NULL;
	return &dtype_table[t];
}

bool lm_dtype_in_gguf(uint32_t t)
{
	return t < LM_DTYPE_GGUF_COUNT && lm_dtype_info(t) != NULL;
}

const char *lm_dtype_name(uint32_t t)
{
	const struct lm_dtype_info *info = lm_dtype_info(t);
	return info != NULL ? info->name : "unknown-type";
}

int lm_dtype_parse(const char *s)
{
	for (uint32_t t = 0; t < LM_DTYPE_COUNT; t++)
		if (dtype_table[t].name != NULL && strcasecmp(dtype_table[t].name, s) == 0)
			return (int)t;
	return -1;
}

int lm_dtype_row_bytes(uint32_t t, uint64_t n, uint64_t *bytes)
{
	const struct lm_dtype_info *info = lm_dtype_info(t);
	if (info == NULL || n % info->blck != 0)
		return LM_EINVAL;
	uint64_t blocks = n / info->blck;
	if (blocks > UINT64_MAX / info->size)
		return LM_EOVERFLOW;
	*bytes = blocks * info->size;
	return 0;
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

float lm_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0x1f) /* inf or nan */
		return bits_f32(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		if (mant == 0)
			return bits_f32(sign);
		/* subnormal: value = mant * 2^-24 */
		float v = (float)mant * 0x1p-24f;
		return sign ? -v : v;
	}
	return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t lm_f32_to_f16(float f)
{
	uint32_t x = f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;

	if (ax >= 0x7f800000u) /* inf or nan: keep a quiet nan a nan */
		return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
	if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
		/* Add 0.5 in the half-subnormal unit; float addition rounds to nearest even. */
		float v = bits_f32(ax) + 0.5f;
		return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
	}
	uint32_t mant_odd = (ax >> 13) & 1u;
	ax += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
	return (uint16_t)(sign | (ax >> 13));
}

float lm_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t lm_f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);
	if ((x & 0x7fffffffu) > 0x7f800000u) /* nan: force quiet */
		return (uint16_t)((x >> 16) | 64u);
	return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/* e4m3: value = (-1)^s x 2^(e - 7) x (1 + m / 8) for e in 1..15, (-1)^s x 2^-6 x m / 8 for e = 0. */
float lm_fp8_to_f32(uint8_t v)
{
	const uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
	float a;
	if ((v & 0x7fu) == 0x7fu)
		a = NAN;
	else if (e == 0)
		a = (float)m * 0x1p-9f;
	else
		a = bits_f32(((e + 120u) << 23) | (m << 20));
	return (v & 0x80u) ? -a : a;
}

uint8_t lm_f32_to_fp8(float f)
{
	const uint32_t x = f32_bits(f);
	const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
	const uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) /* nan */
		return (uint8_t)(sign | 0x7fu);
	if (ax >= 0x43e00000u) /* >= 448, infinities too: the largest finite value */
		return (uint8_t)(sign | 0x7eu);
	if (ax < 0x3c800000u) { /* below 2^-6, the smallest normal: multiples of 2^-9 */
		/* a x 2^9 is exact; the float adder rounds it to an integer, ties to even. */
		const float q = bits_f32(ax) * 512.0f + 8388608.0f;
		return (uint8_t)(sign | (f32_bits(q) - 0x4b000000u));
	}
	/* Keep 3 mantissa bits, rounding the 20 dropped ones to nearest even; a carry moves into
	 * the exponent, which is what the encoding wants (448 is the most it can reach here). */
	const uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);
	return (uint8_t)(sign | ((r >> 20) - (120u << 3)));
}

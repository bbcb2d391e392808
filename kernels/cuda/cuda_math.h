/* cuda_math.h — the arithmetic of the CUDA kernels that does not depend on threads: number
 * conversions, the decoding of one "unit" of a GGUF weight block and its dot product with
 * quantized activations, the activation quantizers' per-element steps, and the dequantizers of
 * the embedding lookup.
 *
 * The same source compiles as CUDA device code (the .cu files of kernels/cuda) and as plain C on the host
 * (tests/unit/test_cuda_math.c), so the part of the kernels where layout mistakes hide (which
 * nibble is which element, which scale and which bsum go with them) is checked against the CPU
 * reference on machines without a GPU. What the host test cannot see is the threading around
 * these functions: the indexing of units by threads, the reductions and the launches.
 *
 * Matmul by units. A weight row is cut into units of consecutive elements inside one block:
 *     type   block            unit                          units per block (LMC_UPB_*)
 *     Q8_0   34 B, 32 values  16 values (half a block)      2
 *     Q4_0   18 B, 32 values  8 bytes: 16 values            2
 *     Q4_K   144 B, 256       16 bytes of qs: 32 values     8
 *     Q6_K   210 B, 256       4 columns of each quarter: 16 16
 *     MXFP4  17 B, 32 values   8 bytes: 16 values            2
 * A unit's contribution to y = W x is an integer dot product (dp4a over signed bytes) scaled by
 * the weight's and the activation's block scales in f32; the activations are quantized as GGUF's
 * reference does (Q8_0 for Q8_0/Q4_0/MXFP4, Q8_K for Q4_K/Q6_K) into a device layout of separate
 * arrays: qs (int8, [n][ne0]), d (f32, one per block: the value of the f16 scale for Q8_0) and,
 * for Q8_K, bsums (int32, one per 16 values). Sums over units are f32; the CPU reference sums
 * the same integer products per block, so the two differ by the order of float additions only.
 *
 * The order in which the matmul kernels add those f32 values is defined here too ("The sum
 * order"), with the tensor-core GEMM's operand maps, so the GEMV and the GEMM share one
 * definition and the host test can check that the GEMM's schedule gives the GEMV's bits.
 *
 * Number conversions follow common/base/dtype.c bit for bit (the kernels are built with
 * -fmad=false, so no multiply-add is contracted where the reference rounds twice).
 */
#ifndef LM_CUDA_MATH_H
#define LM_CUDA_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define LMC_HD static __host__ __device__ __forceinline__
#else
#define LMC_HD static inline
#endif

/* Weight block sizes in bytes and elements, as common/format/quant.h lays them out. */
#define LMC_Q8_0_BYTES  34
#define LMC_Q4_0_BYTES  18
#define LMC_Q4_K_BYTES  144
#define LMC_Q6_K_BYTES  210
#define LMC_Q5_1_BYTES  24 /* KV cache rows only */
#define LMC_MXFP4_BYTES 17
#define LMC_QK          32  /* elements of a Q8_0 / Q4_0 block */
#define LMC_QKK         256 /* elements of a K-quant block */
#define LMC_UPB_Q8_0    2
#define LMC_UPB_Q4_0    2
#define LMC_UPB_Q4_K    8
#define LMC_UPB_Q6_K    16
#define LMC_UPB_MXFP4   2

/* ------------------------------------------------------------------------------------------ */
/* Loads and byte arithmetic                                                                  */

LMC_HD uint32_t lmc_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
#endif
}

LMC_HD float lmc_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
#endif
}

/* 2 bytes at a 2-byte aligned address, little-endian. */
LMC_HD uint32_t lmc_ld_u16(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return *(const uint16_t *)p;
#else
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
#endif
}

/* 4 bytes at a 2-byte aligned address (GGUF blocks of 34, 18 and 210 bytes): two 16-bit loads. */
LMC_HD int lmc_ld_i32_a2(const uint8_t *p)
{
	return (int)(lmc_ld_u16(p) | (lmc_ld_u16(p + 2) << 16));
}

/* 4 bytes at a 4-byte aligned address. */
LMC_HD int lmc_ld_i32(const void *p)
{
#ifdef __CUDA_ARCH__
	return *(const int *)p;
#else
	int v;
	memcpy(&v, p, sizeof v);
	return v;
#endif
}

/* 16 bytes at a 16-byte aligned address, as four ints (one 128-bit load on the device). */
LMC_HD void lmc_ld_i32x4(const void *p, int v[4])
{
#ifdef __CUDA_ARCH__
	const int4 x = *(const int4 *)p;
	v[0] = x.x;
	v[1] = x.y;
	v[2] = x.z;
	v[3] = x.w;
#else
	memcpy(v, p, 4 * sizeof(int));
#endif
}

/* c + the dot product of the four signed bytes of a with those of b. */
LMC_HD int lmc_dp4a(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
	return __dp4a(a, b, c);
#else
	for (int i = 0; i < 4; i++)
		c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) *
		     (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
	return c;
#endif
}

/* Per-byte a - b, modulo 256 (no borrow between bytes). */
LMC_HD int lmc_vsub4(int a, int b)
{
#ifdef __CUDA_ARCH__
	return (int)__vsub4((unsigned)a, (unsigned)b);
#else
	uint32_t r = 0;
	for (int i = 0; i < 4; i++) {
		uint32_t x = ((uint32_t)a >> (8 * i)) & 0xffu, y = ((uint32_t)b >> (8 * i)) & 0xffu;
		r |= ((x - y) & 0xffu) << (8 * i);
	}
	return (int)r;
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Number conversions (as common/base/dtype.c)                                                */

LMC_HD float lmc_f16_to_f32(uint32_t h)
{
	uint32_t sign = (h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;
	if (exp == 0x1f)
		return lmc_bits_f32(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		if (mant == 0)
			return lmc_bits_f32(sign);
		float v = (float)mant * 0x1p-24f;
		return sign ? -v : v;
	}
	return lmc_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

LMC_HD uint16_t lmc_f32_to_f16(float f)
{
	uint32_t x = lmc_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;
	if (ax >= 0x7f800000u)
		return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
	if (ax >= 0x477ff000u)
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) {
		float v = lmc_bits_f32(ax) + 0.5f;
		return (uint16_t)(sign | (lmc_f32_bits(v) - 0x3f000000u));
	}
	uint32_t mant_odd = (ax >> 13) & 1u;
	ax += 0xc8000fffu + mant_odd;
	return (uint16_t)(sign | (ax >> 13));
}

LMC_HD float lmc_bf16_to_f32(uint32_t h)
{
	return lmc_bits_f32((h & 0xffffu) << 16);
}

LMC_HD uint16_t lmc_f32_to_bf16(float f)
{
	uint32_t x = lmc_f32_bits(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 64u);
	return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/* e4m3 (LM_FP8_E4M3, the KV cache's fp8): lm_fp8_to_f32 and lm_f32_to_fp8. */
LMC_HD float lmc_fp8_to_f32(uint32_t v)
{
	const uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
	float a;
	if ((v & 0x7fu) == 0x7fu)
		a = lmc_bits_f32(0x7fc00000u);
	else if (e == 0)
		a = (float)m * 0x1p-9f;
	else
		a = lmc_bits_f32(((e + 120u) << 23) | (m << 20));
	return (v & 0x80u) ? -a : a;
}

LMC_HD uint8_t lmc_f32_to_fp8(float f)
{
	const uint32_t x = lmc_f32_bits(f);
	const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
	const uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u)
		return (uint8_t)(sign | 0x7fu);
	if (ax >= 0x43e00000u)
		return (uint8_t)(sign | 0x7eu);
	if (ax < 0x3c800000u) {
		const float q = lmc_bits_f32(ax) * 512.0f + 8388608.0f;
		return (uint8_t)(sign | (lmc_f32_bits(q) - 0x4b000000u));
	}
	const uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);
	return (uint8_t)(sign | ((r >> 20) - (120u << 3)));
}

/* The f32 value of x rounded to f16 (the F16 weights' activations, an F16 cache's q). */
LMC_HD float lmc_round_f16(float x)
{
	return lmc_f16_to_f32(lmc_f32_to_f16(x));
}

LMC_HD float lmc_round_bf16(float x)
{
	return lmc_bf16_to_f32(lmc_f32_to_bf16(x));
}

/* ------------------------------------------------------------------------------------------ */
/* Activation quantizers, per element (the reductions around them are the kernels')          */

/* Q8_0 (quant.c's lm_quantize_q8_0_ref): from a block's amax, its scale and 1 / scale. */
LMC_HD float lmc_q8_0_d(float amax)
{
	return amax / 127;
}

LMC_HD float lmc_q8_0_id(float d)
{
	return d != 0.0f ? 1.0f / d : 0.0f;
}

LMC_HD int8_t lmc_q8_0_q(float x, float id)
{
	return (int8_t)roundf(x * id);
}

/* Round to nearest, ties to even, clamped as quant.c's quant_nearest_int. */
LMC_HD int lmc_nearest_int(float f)
{
	if (!(f > -4194303.f))
		f = -4194303.f;
	if (f > 4194303.f)
		f = 4194303.f;
	float v = f + 12582912.f;
	return (int)(lmc_f32_bits(v) & 0x007fffffu) - 0x00400000;
}

/* Q8_K (lm_quantize_q8_K_ref): `max` is the block's value of largest magnitude, the first one
 * where several tie; iscale = -127 / max; d = 1 / iscale. */
LMC_HD int8_t lmc_q8_K_q(float x, float iscale)
{
	int q = lmc_nearest_int(iscale * x);
	return (int8_t)(q < 127 ? q : 127);
}

/* The choice of the Q8_K reduction: (a, i) or (b, j), whichever has the larger magnitude, the
 * lower index on a tie; exact, so any reduction order picks what the reference's scan picks. */
LMC_HD int lmc_amax_pick(float a, int i, float b, int j)
{
	return b > a || (b == a && j < i);
}

/* ------------------------------------------------------------------------------------------ */
/* One token's activations as the matmul units read them                                      */

struct lmc_xrow {
	const int8_t *qs;     /* [ne0] */
	const float *d;       /* [ne0 / 32] (Q8_0) or [ne0 / 256] (Q8_K) */
	const int32_t *bsums; /* [ne0 / 16], Q8_K only */
};

/* A unit's value from its integer dot s, the weight block's scale wd and the activation block's
 * xd: the only float arithmetic of a Q8_0 or Q4_0 unit, one definition for the GEMV (the dots
 * below) and the tensor-core GEMM (matmul.cu), so both round the same products. */
LMC_HD float lmc_unit_q8_0(int s, float wd, float xd)
{
	return (float)s * (wd * xd);
}

LMC_HD float lmc_unit_q4_0(int s, float wd, float xd)
{
	return (float)s * wd * xd;
}

/* Q8_0 weights: unit u is half h = u % 2 of block u / 2. */
struct lmc_w_q8_0 {
	int q[4];
	float d;
};

LMC_HD void lmc_load_q8_0(const uint8_t *row, int64_t u, struct lmc_w_q8_0 *w)
{
	const uint8_t *b = row + (u >> 1) * LMC_Q8_0_BYTES;
	const uint8_t *q = b + 2 + 16 * (int)(u & 1);
	w->d = lmc_f16_to_f32(lmc_ld_u16(b));
	for (int i = 0; i < 4; i++)
		w->q[i] = lmc_ld_i32_a2(q + 4 * i);
}

LMC_HD float lmc_dot_q8_0(const struct lmc_w_q8_0 *w, int64_t u, const struct lmc_xrow *x)
{
	int xv[4];
	lmc_ld_i32x4(x->qs + u * 16, xv);
	int s = 0;
	for (int i = 0; i < 4; i++)
		s = lmc_dp4a(w->q[i], xv[i], s);
	return lmc_unit_q8_0(s, w->d, x->d[u >> 1]);
}

/* Q4_0 weights: unit u is bytes [8h, 8h + 8) of block u / 2's qs, h = u % 2: elements
 * 8h .. 8h + 7 (low nibbles) and 16 + 8h .. 16 + 8h + 7 (high nibbles), minus 8. */
struct lmc_w_q4_0 {
	int lo[2], hi[2];
	float d;
};

LMC_HD void lmc_load_q4_0(const uint8_t *row, int64_t u, struct lmc_w_q4_0 *w)
{
	const uint8_t *b = row + (u >> 1) * LMC_Q4_0_BYTES;
	const uint8_t *q = b + 2 + 8 * (int)(u & 1);
	w->d = lmc_f16_to_f32(lmc_ld_u16(b));
	for (int i = 0; i < 2; i++) {
		int v = lmc_ld_i32_a2(q + 4 * i);
		w->lo[i] = lmc_vsub4(v & 0x0f0f0f0f, 0x08080808);
		w->hi[i] = lmc_vsub4((int)(((uint32_t)v >> 4) & 0x0f0f0f0fu), 0x08080808);
	}
}

LMC_HD float lmc_dot_q4_0(const struct lmc_w_q4_0 *w, int64_t u, const struct lmc_xrow *x)
{
	const int64_t blk = u >> 1;
	const int h = (int)(u & 1);
	const int8_t *xq = x->qs + blk * LMC_QK;
	int s = 0;
	for (int i = 0; i < 2; i++) {
		s = lmc_dp4a(w->lo[i], lmc_ld_i32(xq + 8 * h + 4 * i), s);
		s = lmc_dp4a(w->hi[i], lmc_ld_i32(xq + 16 + 8 * h + 4 * i), s);
	}
	return lmc_unit_q4_0(s, w->d, x->d[blk]);
}

/* MXFP4's E2M1 code c as quant.c's lm_mxfp4_values (the doubled value, an integer), and its
 * block's scale as lm_e8m0_half. */
LMC_HD int lmc_mxfp4_value(uint32_t c)
{
	const int m = (int)((0xc8643210u >> (4 * (c & 7u))) & 0xfu);
	return (c & 8u) ? -m : m;
}

LMC_HD float lmc_e8m0_half(uint32_t e)
{
	return lmc_bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* Four codes (a byte's nibbles, low or high, of 4 bytes) as four signed bytes. */
LMC_HD int lmc_mxfp4_pack(const uint8_t *q, int shift)
{
	uint32_t r = 0;
	for (int i = 0; i < 4; i++)
		r |= ((uint32_t)lmc_mxfp4_value((uint32_t)(q[i] >> shift) & 0xfu) & 0xffu)
		     << (8 * i);
	return (int)r;
}

/* MXFP4 weights: unit u is bytes [8h, 8h + 8) of block u / 2's qs, h = u % 2, as Q4_0's; the
 * blocks are 17 bytes, so everything is read a byte at a time. */
struct lmc_w_mxfp4 {
	int lo[2], hi[2];
	float d;
};

LMC_HD void lmc_load_mxfp4(const uint8_t *row, int64_t u, struct lmc_w_mxfp4 *w)
{
	const uint8_t *b = row + (u >> 1) * LMC_MXFP4_BYTES;
	const uint8_t *q = b + 1 + 8 * (int)(u & 1);
	w->d = lmc_e8m0_half(b[0]);
	for (int i = 0; i < 2; i++) {
		w->lo[i] = lmc_mxfp4_pack(q + 4 * i, 0);
		w->hi[i] = lmc_mxfp4_pack(q + 4 * i, 4);
	}
}

/* As cpu_vec_dot_mxfp4_generic: the integer sum, then sumi * (dw * dx). */
LMC_HD float lmc_dot_mxfp4(const struct lmc_w_mxfp4 *w, int64_t u, const struct lmc_xrow *x)
{
	const int64_t blk = u >> 1;
	const int h = (int)(u & 1);
	const int8_t *xq = x->qs + blk * LMC_QK;
	int s = 0;
	for (int i = 0; i < 2; i++) {
		s = lmc_dp4a(w->lo[i], lmc_ld_i32(xq + 8 * h + 4 * i), s);
		s = lmc_dp4a(w->hi[i], lmc_ld_i32(xq + 16 + 8 * h + 4 * i), s);
	}
	return (float)s * (w->d * x->d[blk]);
}

/* The 6-bit scale and min of sub-block j of a Q4_K block's scales[12] (quant.c). */
LMC_HD void lmc_q4_K_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* Q4_K weights: unit u of block u / 8 is k = u % 8: chunk c = k / 2 of 32 qs bytes (sub-blocks
 * 2c in the low nibbles, 2c + 1 in the high ones), its half h = k % 2: bytes 16h .. 16h + 15,
 * elements 64c + 16h + i (low) and 64c + 32 + 16h + i (high) for i < 16. */
/* A Q4_K unit's scales: those of its two sub-blocks and the block's d and dmin. */
struct lmc_q4_K_meta {
	int sc0, m0, sc1, m1;
	float d, dmin;
};

struct lmc_w_q4_K {
	int lo[4], hi[4];
	struct lmc_q4_K_meta m;
};

LMC_HD void lmc_meta_q4_K(const uint8_t *row, int64_t u, struct lmc_q4_K_meta *m)
{
	const uint8_t *b = row + (u >> 3) * LMC_Q4_K_BYTES;
	const int c = (int)(u & 7) >> 1;
	m->d = lmc_f16_to_f32(lmc_ld_u16(b));
	m->dmin = lmc_f16_to_f32(lmc_ld_u16(b + 2));
	/* lmc_q4_K_scale_min on the 12 bytes as three words, by shifts (no array to index: on the
	 * device that would live in local memory). */
	uint32_t v[3];
	for (int i = 0; i < 3; i++)
		v[i] = (uint32_t)lmc_ld_i32(b + 4 + 4 * i);
	int sc[2], mn[2];
	for (int h = 0; h < 2; h++) {
		const int j = 2 * c + h, sh = 8 * (j & 3);
		const uint32_t q0 = (v[0] >> sh) & 0xffu, q1 = (v[1] >> sh) & 0xffu;
		const uint32_t q2 = (v[2] >> sh) & 0xffu;
		sc[h] = j < 4 ? (int)(q0 & 63) : (int)((q2 & 0xf) | ((q0 >> 6) << 4));
		mn[h] = j < 4 ? (int)(q1 & 63) : (int)((q2 >> 4) | ((q1 >> 6) << 4));
	}
	m->sc0 = sc[0];
	m->m0 = mn[0];
	m->sc1 = sc[1];
	m->m1 = mn[1];
}

LMC_HD void lmc_load_q4_K(const uint8_t *row, int64_t u, struct lmc_w_q4_K *w)
{
	const uint8_t *b = row + (u >> 3) * LMC_Q4_K_BYTES;
	const int k = (int)(u & 7), c = k >> 1, h = k & 1;
	lmc_meta_q4_K(row, u, &w->m);
	int v[4];
	lmc_ld_i32x4(b + 16 + 32 * c + 16 * h, v);
	for (int i = 0; i < 4; i++) {
		w->lo[i] = v[i] & 0x0f0f0f0f;
		w->hi[i] = (int)(((uint32_t)v[i] >> 4) & 0x0f0f0f0fu);
	}
}

/* A Q4_K unit's value from its integer dots over the low (slo) and high (shi) nibbles, the
 * activation block's dx and the unit's bsums bs[0] (low) and bs[2] (high): the float part of
 * the GEMV's dot and the GEMM's, one definition. */
LMC_HD float lmc_unit_q4_K(int slo, int shi, const struct lmc_q4_K_meta *m, float dx,
			   const int32_t *bs)
{
	const float sum = dx * (m->d * (float)(m->sc0 * slo + m->sc1 * shi));
	const float mins = dx * (m->dmin * (float)(m->m0 * bs[0] + m->m1 * bs[2]));
	return sum - mins;
}

LMC_HD float lmc_dot_q4_K(const struct lmc_w_q4_K *w, int64_t u, const struct lmc_xrow *x)
{
	const int64_t blk = u >> 3;
	const int k = (int)(u & 7), c = k >> 1, h = k & 1;
	const int8_t *xq = x->qs + blk * LMC_QKK + 64 * c + 16 * h;
	int xl[4], xh[4];
	lmc_ld_i32x4(xq, xl);
	lmc_ld_i32x4(xq + 32, xh);
	int slo = 0, shi = 0;
	for (int i = 0; i < 4; i++) {
		slo = lmc_dp4a(w->lo[i], xl[i], slo);
		shi = lmc_dp4a(w->hi[i], xh[i], shi);
	}
	return lmc_unit_q4_K(slo, shi, &w->m, x->d[blk], x->bsums + blk * 16 + 4 * c + h);
}

/* Q6_K weights: unit u of block u / 16 is k = u % 16: half hh = k / 8 (128 values) and columns
 * l0 = 4 (k % 8) .. l0 + 3 of it, which hold elements 128 hh + 32 g + l0 + i for g, i < 4 (4 low
 * bits from ql, 2 high bits from qh, minus 32), with scale scales[8 hh + l0 / 16 + 2 g]. */
/* A Q6_K unit's scales: one per group of 4 elements, and the block's d. */
struct lmc_q6_K_meta {
	int sc[4];
	float d;
};

struct lmc_w_q6_K {
	int q[4];
	struct lmc_q6_K_meta m;
};

LMC_HD void lmc_meta_q6_K(const uint8_t *row, int64_t u, struct lmc_q6_K_meta *m)
{
	const uint8_t *b = row + (u >> 4) * LMC_Q6_K_BYTES;
	const int k = (int)(u & 15), hh = k >> 3, l0 = 4 * (k & 7);
	for (int g = 0; g < 4; g++)
		m->sc[g] = (int)(int8_t)b[192 + 8 * hh + l0 / 16 + 2 * g];
	m->d = lmc_f16_to_f32(lmc_ld_u16(b + 208));
}

/* A Q6_K unit's value from its scaled integer dot s: the float part of the GEMV's dot and the
 * GEMM's, one definition. */
LMC_HD float lmc_unit_q6_K(int s, float d, float dx)
{
	return (float)s * (d * dx);
}

LMC_HD void lmc_load_q6_K(const uint8_t *row, int64_t u, struct lmc_w_q6_K *w)
{
	const uint8_t *b = row + (u >> 4) * LMC_Q6_K_BYTES;
	const int k = (int)(u & 15), hh = k >> 3, l0 = 4 * (k & 7);
	const uint8_t *ql = b + 64 * hh, *qh = b + 128 + 32 * hh;
	const uint32_t a = (uint32_t)lmc_ld_i32_a2(ql + l0);
	const uint32_t c = (uint32_t)lmc_ld_i32_a2(ql + 32 + l0);
	const uint32_t h = (uint32_t)lmc_ld_i32_a2(qh + l0);
	const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
	w->q[0] = lmc_vsub4((int)((a & m4) | ((h & m2) << 4)), 0x20202020);
	w->q[1] = lmc_vsub4((int)((c & m4) | (((h >> 2) & m2) << 4)), 0x20202020);
	w->q[2] = lmc_vsub4((int)(((a >> 4) & m4) | (((h >> 4) & m2) << 4)), 0x20202020);
	w->q[3] = lmc_vsub4((int)(((c >> 4) & m4) | (((h >> 6) & m2) << 4)), 0x20202020);
	lmc_meta_q6_K(row, u, &w->m);
}

LMC_HD float lmc_dot_q6_K(const struct lmc_w_q6_K *w, int64_t u, const struct lmc_xrow *x)
{
	const int64_t blk = u >> 4;
	const int k = (int)(u & 15), hh = k >> 3, l0 = 4 * (k & 7);
	const int8_t *xq = x->qs + blk * LMC_QKK + 128 * hh + l0;
	int s = 0;
	for (int g = 0; g < 4; g++)
		s += w->m.sc[g] * lmc_dp4a(w->q[g], lmc_ld_i32(xq + 32 * g), 0);
	return lmc_unit_q6_K(s, w->m.d, x->d[blk]);
}

/* ------------------------------------------------------------------------------------------ */
/* The sum order of every matmul kernel                                                       */

/* A row's units are dealt to LMC_SUM_THREADS virtual threads: thread i takes units i, i + 128,
 * ... and sums their values in that order, from 0.0f. The threads form LMC_SUM_WARPS warps of
 * 32, each reduced by a butterfly (lane l adds lane l ^ o's value for o = 16, 8, 4, 2, 1; float
 * addition commutes, so every lane ends with the same tree), and the warp totals are added in
 * warp order. The GEMV runs exactly that with 128 real threads (lmc_warp_sum, lmc_sum_warps);
 * the tensor-core GEMM computes the same tree in another schedule (lmc_tree_push), so a token's
 * result is the same bits on either path. */
#define LMC_SUM_THREADS 128
#define LMC_SUM_WARPS   4

/* The warp totals in warp order: tot = v for warp 0, tot + v after it. */
LMC_HD float lmc_sum_warps_step(float tot, int warp, float v)
{
	return warp == 0 ? v : tot + v;
}

LMC_HD float lmc_sum_warps(const float part[LMC_SUM_WARPS])
{
	float s = 0.0f;
	for (int w = 0; w < LMC_SUM_WARPS; w++)
		s = lmc_sum_warps_step(s, w, part[w]);
	return s;
}

/* k's 5 bits reversed: the lane whose value is the butterfly tree's k-th leaf from the left. */
LMC_HD int lmc_bitrev5(int k)
{
	return ((k & 1) << 4) | ((k & 2) << 2) | (k & 4) | ((k & 8) >> 2) | ((k & 16) >> 4);
}

/* The butterfly's tree built leaf by leaf: leaf k (k = 0 .. 31) is the value of lane
 * lmc_bitrev5(k). The butterfly's first step pairs lanes l and l ^ 16, leaves 2m and 2m + 1 in
 * this order; each later step pairs neighbouring subtrees the same way, so the tree is a
 * left-to-right pairing that st[] holds as a binary counter: st[L] is a pending subtree of 2^L
 * leaves. Returns the subtree the leaf completes, the warp's total when k == 31. */
LMC_HD float lmc_tree_push(float st[5], int k, float v)
{
	int l = 0;
	while (l < 5 && ((k >> l) & 1)) {
		v = st[l] + v;
		l++;
	}
	if (l < 5)
		st[l] = v;
	return v;
}

/* ------------------------------------------------------------------------------------------ */
/* The tensor-core GEMM's operands (mma.sync m16n8k16, s8 x s8 -> s32)                         */

/* Fragments of a warp's mma, lane = 4 g + q (PTX ISA, "Matrix fragments for mma.m16n8k16"
 * with .s8): A is 16 weight rows by 16 k, lane register i (0, 1) holding row g + 8 i, k 4q ..
 * 4q + 3; B is 16 k by 8 tokens, one register: token g, k 4q .. 4q + 3; C is 16 rows by 8
 * tokens of int32, register i (0 .. 3) holding row g + 8 (i / 2), token 2q + i % 2. The k of
 * one mma are one unit's 16 elements, as four words (k-word q = lane % 4) in an order of the
 * unit's choosing, the same for the weights and the activations: the integer dot is exact, so
 * it equals the GEMV's dp4a sum of the unit. */
LMC_HD int lmc_mma_a_row(int lane, int i)
{
	return (lane >> 2) + 8 * i;
}

LMC_HD int lmc_mma_b_token(int lane)
{
	return lane >> 2;
}

LMC_HD int lmc_mma_c_row(int lane, int i)
{
	return (lane >> 2) + 8 * (i >> 1);
}

LMC_HD int lmc_mma_c_token(int lane, int i)
{
	return 2 * (lane & 3) + (i & 1);
}

/* Q8_0: k-word j of unit u is bytes 4j .. 4j + 3 of the unit (lmc_load_q8_0's q[j]). */
LMC_HD int lmc_kw_w_q8_0(const uint8_t *row, int64_t u, int j)
{
	return lmc_ld_i32_a2(row + (u >> 1) * LMC_Q8_0_BYTES + 2 + 16 * (int)(u & 1) + 4 * j);
}

LMC_HD float lmc_wd_q8_0(const uint8_t *row, int64_t u)
{
	return lmc_f16_to_f32(lmc_ld_u16(row + (u >> 1) * LMC_Q8_0_BYTES));
}

LMC_HD int lmc_kw_x_q8_0(const int8_t *xqs, int64_t u, int j)
{
	return lmc_ld_i32(xqs + 16 * u + 4 * j);
}

/* Q4_0: k-words 0, 1 are the low nibbles of the unit's bytes 0 .. 3 and 4 .. 7 (lmc_load_q4_0's
 * lo[]), 2, 3 their high nibbles (hi[]), each minus 8; the activations' words match them. */
LMC_HD int lmc_kw_w_q4_0(const uint8_t *row, int64_t u, int j)
{
	const int v =
		lmc_ld_i32_a2(row + (u >> 1) * LMC_Q4_0_BYTES + 2 + 8 * (int)(u & 1) + 4 * (j & 1));
	const uint32_t n = j < 2 ? (uint32_t)v : (uint32_t)v >> 4;
	return lmc_vsub4((int)(n & 0x0f0f0f0fu), 0x08080808);
}

LMC_HD float lmc_wd_q4_0(const uint8_t *row, int64_t u)
{
	return lmc_f16_to_f32(lmc_ld_u16(row + (u >> 1) * LMC_Q4_0_BYTES));
}

LMC_HD int lmc_kw_x_q4_0(const int8_t *xqs, int64_t u, int j)
{
	return lmc_ld_i32(xqs + (u >> 1) * LMC_QK + 8 * (int)(u & 1) + 4 * (j & 1) + 16 * (j >> 1));
}

/* Q4_K: two mmas a unit, part p = 0 over its low nibbles (lmc_load_q4_K's lo[]), p = 1 over its
 * high ones (hi[]); k-word j is bytes 4j .. 4j + 3 of the unit's 16 qs bytes, and the
 * activations' words are the elements that go with them (lmc_dot_q4_K's xl[], xh[]). */
LMC_HD int lmc_kw_w_q4_K(const uint8_t *row, int64_t u, int p, int j)
{
	const int k = (int)(u & 7);
	const uint32_t v = (uint32_t)lmc_ld_i32(row + (u >> 3) * LMC_Q4_K_BYTES + 16 +
						32 * (k >> 1) + 16 * (k & 1) + 4 * j);
	return (int)((p ? v >> 4 : v) & 0x0f0f0f0fu);
}

LMC_HD int lmc_kw_x_q4_K(const int8_t *xqs, int64_t u, int p, int j)
{
	const int k = (int)(u & 7);
	return lmc_ld_i32(xqs + (u >> 3) * LMC_QKK + 64 * (k >> 1) + 16 * (k & 1) + 32 * p + 4 * j);
}

/* Q6_K: four mmas a unit, as each group of 4 elements (k-word g) has its own scale: mma p takes
 * group p's weights from the lanes of k-word p and zero from the others (lmc_kw_part), so it
 * yields group p's dot alone. k-word g is lmc_load_q6_K's q[g]. */
LMC_HD int lmc_kw_w_q6_K(const uint8_t *row, int64_t u, int j)
{
	const uint8_t *b = row + (u >> 4) * LMC_Q6_K_BYTES;
	const int k = (int)(u & 15), hh = k >> 3, l0 = 4 * (k & 7);
	const uint32_t lo =
		(uint32_t)lmc_ld_i32_a2(b + 64 * hh + 32 * (j & 1) + l0) >> (4 * (j >> 1));
	const uint32_t hi = (uint32_t)lmc_ld_i32_a2(b + 128 + 32 * hh + l0) >> (2 * j);
	return lmc_vsub4((int)((lo & 0x0f0f0f0fu) | ((hi & 0x03030303u) << 4)), 0x20202020);
}

LMC_HD int lmc_kw_part(int p, int j, int w)
{
	return p == j ? w : 0;
}

LMC_HD int lmc_kw_x_q6_K(const int8_t *xqs, int64_t u, int j)
{
	const int k = (int)(u & 15);
	return lmc_ld_i32(xqs + (u >> 4) * LMC_QKK + 128 * (k >> 3) + 4 * (k & 7) + 32 * j);
}

/* ------------------------------------------------------------------------------------------ */
/* Dequantizers (the embedding lookup), element i of a row, as quant.c computes it            */

LMC_HD float lmc_deq_q8_0(const uint8_t *row, int64_t i)
{
	const uint8_t *b = row + (i / LMC_QK) * LMC_Q8_0_BYTES;
	return (float)(int8_t)b[2 + i % LMC_QK] * lmc_f16_to_f32(lmc_ld_u16(b));
}

LMC_HD float lmc_deq_q4_0(const uint8_t *row, int64_t i)
{
	const uint8_t *b = row + (i / LMC_QK) * LMC_Q4_0_BYTES;
	const int j = (int)(i % LMC_QK);
	const int q = j < 16 ? (b[2 + j] & 0x0f) : (b[2 + j - 16] >> 4);
	return (float)(q - 8) * lmc_f16_to_f32(lmc_ld_u16(b));
}

LMC_HD float lmc_deq_mxfp4(const uint8_t *row, int64_t i)
{
	const uint8_t *b = row + (i / LMC_QK) * LMC_MXFP4_BYTES;
	const int j = (int)(i % LMC_QK);
	const uint32_t c = j < 16 ? (b[1 + j] & 0x0fu) : (uint32_t)(b[1 + j - 16] >> 4);
	return (float)lmc_mxfp4_value(c) * lmc_e8m0_half(b[0]);
}

LMC_HD float lmc_deq_q4_K(const uint8_t *row, int64_t i)
{
	const uint8_t *b = row + (i / LMC_QKK) * LMC_Q4_K_BYTES;
	const int e = (int)(i % LMC_QKK), c = e / 64, hi = (e % 64) >= 32, l = e % 32;
	int sc, m;
	lmc_q4_K_scale_min(2 * c + hi, b + 4, &sc, &m);
	const uint8_t byte = b[16 + 32 * c + l];
	const int q = hi ? byte >> 4 : byte & 0xf;
	const float d1 = lmc_f16_to_f32(lmc_ld_u16(b)) * (float)sc;
	const float m1 = lmc_f16_to_f32(lmc_ld_u16(b + 2)) * (float)m;
	return d1 * (float)q - m1;
}

LMC_HD float lmc_deq_q6_K(const uint8_t *row, int64_t i)
{
	const uint8_t *b = row + (i / LMC_QKK) * LMC_Q6_K_BYTES;
	const int e = (int)(i % LMC_QKK), hh = e / 128, r = e % 128, g = r / 32, l = r % 32;
	const uint8_t *ql = b + 64 * hh, *qh = b + 128 + 32 * hh;
	const int lowq = g == 0   ? ql[l] & 0xf
			 : g == 1 ? ql[l + 32] & 0xf
			 : g == 2 ? ql[l] >> 4
				  : ql[l + 32] >> 4;
	const int q = (lowq | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
	const int sc = (int)(int8_t)b[192 + 8 * hh + l / 16 + 2 * g];
	return lmc_f16_to_f32(lmc_ld_u16(b + 208)) * (float)sc * (float)q;
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise steps with the reference's own order of float operations                      */

/* gpt-oss's clamped SwiGLU (cpu_swiglu_oai_generic); expf is the device's on the device. */
LMC_HD float lmc_swiglu_oai(float g, float u, float alpha, float limit)
{
	const float x = g < limit ? g : limit;
	const float v = u < -limit ? -limit : (u > limit ? limit : u);
	const float glu = x / (1.0f + expf(alpha * (-x)));
	return glu * (v + 1.0f);
}

/* Rope's rotation of pair i, whose running theta is `theta` (pos x theta_scale^i) and frequency
 * factor ff, as cpu_rope: plain (freq_scale x theta / ff), or YaRN's mix of the interpolated and
 * extrapolated angles with cos and sin times mscale. cosf and sinf are the device's there. */
LMC_HD void lmc_rope_cs(float theta, int i, float ff, float freq_scale, float ext_factor,
			float mscale, float corr0, float corr1, float *c, float *s)
{
	float angle = freq_scale * (theta / ff);
	if (ext_factor != 0.0f) {
		const float extrap = theta / ff;
		const float y = ((float)i - corr0) / fmaxf(0.001f, corr1 - corr0);
		const float mix = (1 - fminf(1, fmaxf(0, y))) * ext_factor;
		angle = angle * (1 - mix) + extrap * mix;
		*c = cosf(angle) * mscale;
		*s = sinf(angle) * mscale;
	} else {
		*c = cosf(angle);
		*s = sinf(angle);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* KV cache blocks: stores and reads of the block types (attention.cu), as quant.c and        */
/* kernels/cpu/attention_generic.c compute them                                               */

LMC_HD void lmc_st_u16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v & 0xffu);
	p[1] = (uint8_t)((v >> 8) & 0xffu);
}

/* One Q4_0 block of 32 values at x into b (lm_quantize_q4_0_ref): the value of largest
 * magnitude, the first one on a tie, sets d = max / -8; q = min(15, (int8_t)(x / d + 8.5)). One
 * thread stores a block, scanning in the reference's order. */
LMC_HD void lmc_store_q4_0(const float *x, uint8_t *b)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < LMC_QK; j++) {
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	const float d = max / -8;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	lmc_st_u16(b, lmc_f32_to_f16(d));
	for (int j = 0; j < LMC_QK / 2; j++) {
		const int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + 16] * id + 8.5f);
		b[2 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | ((q1 < 15 ? q1 : 15) << 4));
	}
}

/* One Q5_1 block (lm_quantize_q5_1_ref): d = (max - min) / 31, m = min (each the first of equal
 * values, as the reference's scan keeps it), q = (uint8_t)((x - min) / d + 0.5); the low 4 bits
 * as Q4_0's nibbles, the fifth of element j in bit j of qh. */
LMC_HD void lmc_store_q5_1(const float *x, uint8_t *b)
{
	float min = 3.402823466e+38f, max = -3.402823466e+38f;
	for (int j = 0; j < LMC_QK; j++) {
		min = x[j] < min ? x[j] : min;
		max = x[j] > max ? x[j] : max;
	}
	const float d = (max - min) / 31;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	lmc_st_u16(b, lmc_f32_to_f16(d));
	lmc_st_u16(b + 2, lmc_f32_to_f16(min));
	uint32_t qh = 0;
	for (int j = 0; j < LMC_QK / 2; j++) {
		const uint32_t q0 = (uint8_t)((x[j] - min) * id + 0.5f);
		const uint32_t q1 = (uint8_t)((x[j + 16] - min) * id + 0.5f);
		b[8 + j] = (uint8_t)((q0 & 0x0fu) | ((q1 & 0x0fu) << 4));
		qh |= ((q0 >> 4) & 1u) << j;
		qh |= ((q1 >> 4) & 1u) << (j + 16);
	}
	for (int i = 0; i < 4; i++)
		b[4 + i] = (uint8_t)(qh >> (8 * i));
}

/* Element j (0..31) of a Q4_0 block: its nibble minus 8. */
LMC_HD int lmc_q4_0_elem(const uint8_t *b, int j)
{
	return (j < 16 ? (b[2 + j] & 0x0f) : (b[2 + j - 16] >> 4)) - 8;
}

/* Element j of a Q5_1 block: its 5-bit q (the value is q d + m). */
LMC_HD int lmc_q5_1_elem(const uint8_t *b, int j)
{
	const uint32_t qh = lmc_ld_u16(b + 4) | (lmc_ld_u16(b + 6) << 16);
	const int lo = j < 16 ? (b[8 + j] & 0x0f) : (b[8 + j - 16] >> 4);
	return lo | (int)(((qh >> j) & 1u) << 4);
}

/* Q8_1's s for a block of quants summing to `sum` with scale d (lm_quantize_q8_1_ref), as the
 * f32 value of the half the reference stores. Its quants and d are Q8_0's. */
LMC_HD float lmc_q8_1_s(int sum, float d)
{
	return lmc_round_f16((float)sum * d);
}

/* The scores: one K row of hd values with q in K's vec_dot layout, in the order of the CPU's
 * generic dot products (kernels_generic.c, attention_generic.c). q is staged as floats (the
 * f32 values of bf16-rounded q for BF16, q itself for FP8), or as Q8_0 / Q8_1 quants qq with
 * the f32 values of their f16 scales qd (and, for Q8_1, sums qs). */
LMC_HD float lmc_kv_dot_bf16(const uint8_t *k, const float *q, int hd)
{
	double s = 0;
	for (int i = 0; i < hd; i++)
		s += (double)(lmc_bf16_to_f32(lmc_ld_u16(k + 2 * i)) * q[i]);
	return (float)s;
}

LMC_HD float lmc_kv_dot_fp8(const uint8_t *k, const float *q, int hd)
{
	double s = 0;
	for (int i = 0; i < hd; i++)
		s += (double)(lmc_fp8_to_f32(k[i]) * q[i]);
	return (float)s;
}

/* Q4_0 . Q8_0 (cpu_vec_dot_q4_0_generic): per block the integer sum, then sumi * d_k * d_q. */
LMC_HD float lmc_kv_dot_q4_0(const uint8_t *k, const int8_t *qq, const float *qd, int hd)
{
	float s = 0.0f;
	for (int b = 0; b < hd / LMC_QK; b++) {
		const uint8_t *blk = k + (size_t)b * LMC_Q4_0_BYTES;
		int si = 0;
		for (int i = 0; i < 4; i++) {
			const int v = lmc_ld_i32_a2(blk + 2 + 4 * i);
			si = lmc_dp4a(lmc_vsub4(v & 0x0f0f0f0f, 0x08080808),
				      lmc_ld_i32(qq + b * LMC_QK + 4 * i), si);
			si = lmc_dp4a(
				lmc_vsub4((int)(((uint32_t)v >> 4) & 0x0f0f0f0fu), 0x08080808),
				lmc_ld_i32(qq + b * LMC_QK + 16 + 4 * i), si);
		}
		s += (float)si * lmc_f16_to_f32(lmc_ld_u16(blk)) * qd[b];
	}
	return s;
}

/* Q5_1 . Q8_1 (attention_generic.c's attn_dot_q5_1): (d_k d_q) sumi + m_k s_q per block. */
LMC_HD float lmc_kv_dot_q5_1(const uint8_t *k, const int8_t *qq, const float *qd, const float *qs,
			     int hd)
{
	float s = 0.0f;
	for (int b = 0; b < hd / LMC_QK; b++) {
		const uint8_t *blk = k + (size_t)b * LMC_Q5_1_BYTES;
		const uint32_t qh = lmc_ld_u16(blk + 4) | (lmc_ld_u16(blk + 6) << 16);
		int si = 0;
		for (int i = 0; i < 4; i++) {
			const uint32_t v = (uint32_t)lmc_ld_i32(blk + 8 + 4 * i);
			uint32_t lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
			for (int e = 0; e < 4; e++) {
				lo |= ((qh >> (4 * i + e)) & 1u) << (8 * e + 4);
				hi |= ((qh >> (16 + 4 * i + e)) & 1u) << (8 * e + 4);
			}
			si = lmc_dp4a((int)lo, lmc_ld_i32(qq + b * LMC_QK + 4 * i), si);
			si = lmc_dp4a((int)hi, lmc_ld_i32(qq + b * LMC_QK + 16 + 4 * i), si);
		}
		s += (lmc_f16_to_f32(lmc_ld_u16(blk)) * qd[b]) * (float)si +
		     lmc_f16_to_f32(lmc_ld_u16(blk + 2)) * qs[b];
	}
	return s;
}

/* The values: acc + p V[i] for element i of a V row, the block's scales folded into p first as
 * the CPU's axpy does (attention_generic.c): (p d) q, and for Q5_1 (p d) q + p m. */
LMC_HD float lmc_kv_acc_bf16(float acc, float p, const uint8_t *v, int i)
{
	return acc + p * lmc_bf16_to_f32(lmc_ld_u16(v + 2 * i));
}

LMC_HD float lmc_kv_acc_fp8(float acc, float p, const uint8_t *v, int i)
{
	return acc + p * lmc_fp8_to_f32(v[i]);
}

LMC_HD float lmc_kv_acc_q4_0(float acc, float p, const uint8_t *v, int i)
{
	const uint8_t *blk = v + (size_t)(i / LMC_QK) * LMC_Q4_0_BYTES;
	const float d = p * lmc_f16_to_f32(lmc_ld_u16(blk));
	return acc + d * (float)lmc_q4_0_elem(blk, i % LMC_QK);
}

LMC_HD float lmc_kv_acc_q5_1(float acc, float p, const uint8_t *v, int i)
{
	const uint8_t *blk = v + (size_t)(i / LMC_QK) * LMC_Q5_1_BYTES;
	const float d = p * lmc_f16_to_f32(lmc_ld_u16(blk));
	const float m = p * lmc_f16_to_f32(lmc_ld_u16(blk + 2));
	return acc + (d * (float)lmc_q5_1_elem(blk, i % LMC_QK) + m);
}

#endif

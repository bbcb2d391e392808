/* kernels_avx512.c — AVX-512 (F, BW, VL, VNNI) kernels for the quantized weight types, on top of
 * the AVX2 set (the backend calls cpu_kernels_avx512_fill after cpu_kernels_avx2_fill). This
 * file holds the few-token kernels (decode, small batches); gemm_avx512.c the GEMMs that take
 * larger batches. Both give the generic kernels' results bit for bit (cpu_impl.h): each block's
 * integer dot product is exact, and the float steps that follow are the generic kernel's, one
 * accumulator per output, block after block. So a token's result does not depend on the batch
 * it rides in, nor on which of the two paths served it.
 *
 * Q8_0 and Q4_0, 16 rows at a time. A block's dot product is 32 byte products summed into the
 * eight int32 lanes of vpdpbusd (unsigned x signed bytes; the weights enter unsigned, Q8_0 as
 * q + 128 and Q4_0 nibbles as stored, and the offset comes back exactly through the block's
 * activation sum: sum (w + 128) x - 128 sum x = sum w x, sum q x - 8 sum x = sum (q - 8) x).
 * Two blocks of one row fill a 512-bit register; the 16 rows' registers are then reduced
 * together (reduce16x2: three rounds of unpack-and-add and two of 128-bit shuffles) into one
 * register per block whose lane r is row r's block sum. The float steps run on those registers,
 * 16 outputs per instruction, and each row's scale reaches its lane by a gather.
 *
 * Q4_K and Q6_K, a row at a time: a 256-element block's sum of scale x sub-block dot products is
 * formed in int32 lanes (maddubs, then vpdpwssd with the 16-bit scales), reduced to one exact
 * integer, and the block's float steps are scalar. A block is 144 (210) bytes, so a reduction
 * per block costs little; the activation side (act8k) stores Q4_K's 32-element groups in the
 * order 0 2 1 3 4 6 5 7, the order of a 64-byte register of its unpacked nibbles.
 *
 * This file is compiled with -ffp-contract=off: a multiply and an add must round as written for
 * the results to be the generic kernels'.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_x86.h"

#define TILE 4

/* How far ahead of a row's stream the L2 prefetches run, in bytes. */
#define Q8_PF_BYTES 3072

/* ------------------------------------------------------------------------------------------ */
/* Q8_0 and Q4_0                                                                              */

/* Blocks b, b + 1 of a Q8_0 row as q + 128. */
SIMD_INLINE __m512i q8_pair(const uint8_t *row, int64_t b)
{
	const block_q8_0 *blk = (const block_q8_0 *)row + b;
	const __m512i q = _mm512_inserti64x4(
		_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk[0].qs)),
		_mm256_loadu_si256((const __m256i *)blk[1].qs), 1);
	return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

/* Blocks b, b + 1 of a Q4_0 row as nibbles, in the paired order lo(b) lo(b+1) hi(b) hi(b+1)
 * (16 bytes each): one masked 36-byte load (never past the pair), one word permute, one
 * variable shift. */
SIMD_INLINE __m512i q4_pair(const uint8_t *row, int64_t b)
{
	const __m512i raw = _mm512_maskz_loadu_epi8((__mmask64)0xfffffffffULL, row + 18 * b);
	static const uint16_t words[32] __attribute__((aligned(64))) = {
		1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17,
		1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17};
	const __m512i idx = _mm512_load_si512(words);
	const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
	const __m512i q = _mm512_srlv_epi16(_mm512_permutexvar_epi16(idx, raw), sh);
	return _mm512_and_si512(q, _mm512_set1_epi8(0x0f));
}

/* The last block of a row with an odd block count, natural order, upper half zero. */
SIMD_INLINE __m512i q8z_last(const uint8_t *row, int64_t b, int is_q4)
{
	if (is_q4) {
		const __m128i q = _mm_loadu_si128((const __m128i *)((const block_q4_0 *)row)[b].qs);
		const __m256i both = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q),
						      _mm256_set1_epi8(0x0f));
		return _mm512_zextsi256_si512(both);
	}
	const __m256i q = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)row)[b].qs);
	return _mm512_zextsi256_si512(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)));
}

/* Eight pairs of blocks of one row (16 blocks), p[k] holding blocks 2k and 2k + 1 in its
 * quarters (natural: 0, 1 | 2, 3; `paired`: 0, 2 | 1, 3): the 16 exact block sums, lane i =
 * block i. Integer adds are exact, so the order of the rounds does not matter. */
SIMD_INLINE __m512i reduce8x2(const __m512i p[8], int paired)
{
	__m512i u[4], v[2];
	for (int i = 0; i < 4; i++)
		u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]),
					_mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
	/* v[j], quarter q: the sums of quarter q of p[4j..4j+3]. */
	for (int j = 0; j < 2; j++)
		v[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * j], u[2 * j + 1]),
					_mm512_unpackhi_epi64(u[2 * j], u[2 * j + 1]));
	__m512i s; /* lanes: blocks 0 2 4 6, 1 3 5 7, 8 10 12 14, 9 11 13 15 */
	if (paired)
		s = _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0)),
				     _mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2)));
	else
		s = _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
				     _mm512_shuffle_i32x4(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
	return _mm512_permutexvar_epi32(
		_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), s);
}

/* One row times NT act8 tokens. Sixteen blocks at a time: their exact sums in one register (a
 * lane per block), their float products (float)sumi * (dw * dx) (Q4_0: ((float)sumi * dw) * dx)
 * in one register too, and then the sum over blocks in block order, one scalar add after
 * another, as the generic kernel adds them. The row streams from memory once whatever NT is,
 * with L2 prefetches Q8_PF_BYTES ahead. */
SIMD_INLINE void row_q8z(const uint8_t *row, const uint8_t *const *x, const int NT, int64_t nb,
			 int is_q4, float *out)
{
	const size_t bsize = is_q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
	const __m512i didx = _mm512_mullo_epi32(
		_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
		_mm512_set1_epi32((int)bsize));
	float acc[TILE];
	for (int t = 0; t < NT; t++)
		acc[t] = 0.0f;
	int64_t b0 = 0;
	for (; b0 + 16 <= nb; b0 += 16) {
		const uint8_t *blk = row + (size_t)b0 * bsize;
		for (int l = 0; l < 16 * (int)bsize; l += 64)
			_mm_prefetch((const char *)blk + Q8_PF_BYTES + l, _MM_HINT_T1);
		__m512i wv[8];
		SIMD_AVX512_UNROLL
		for (int k = 0; k < 8; k++)
			wv[k] = is_q4 ? q4_pair(row, b0 + 2 * k) : q8_pair(row, b0 + 2 * k);
		const __m512i dgw = _mm512_i32gather_epi32(didx, blk, 1);
		const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dgw));
		for (int t = 0; t < NT; t++) {
			__m512i p[8];
			SIMD_AVX512_UNROLL
			for (int k = 0; k < 8; k++) {
				__m512i xv = _mm512_load_si512(x[t] + 32 * (b0 + 2 * k));
				if (is_q4) /* x(b)[0:16] x(b+1)[0:16] x(b)[16:32] x(b+1)[16:32] */
					xv = _mm512_shuffle_i64x2(xv, xv, _MM_SHUFFLE(3, 1, 2, 0));
				p[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[k], xv);
			}
			const __m512i xs = _mm512_loadu_si512(act8_sum(x[t], nb) + b0);
			const __m512i sumi = _mm512_sub_epi32(reduce8x2(p, is_q4),
							      _mm512_slli_epi32(xs, is_q4 ? 3 : 7));
			const __m512 f = _mm512_cvtepi32_ps(sumi);
			const __m512 dx = _mm512_loadu_ps(act8_d(x[t], nb) + b0);
			float prod[16];
			_mm512_storeu_ps(prod, is_q4 ? _mm512_mul_ps(_mm512_mul_ps(f, dw), dx)
						     : _mm512_mul_ps(f, _mm512_mul_ps(dw, dx)));
			float a = acc[t];
			for (int i = 0; i < 16; i++)
				a = a + prod[i];
			acc[t] = a;
		}
	}
	for (; b0 < nb; b0++) {
		const __m256i wv = _mm512_castsi512_si256(q8z_last(row, b0, is_q4));
		const float dw = f16_to_f32(is_q4 ? ((const block_q4_0 *)row)[b0].d
						  : ((const block_q8_0 *)row)[b0].d);
		for (int t = 0; t < NT; t++) {
			const __m256i xv = _mm256_load_si256((const __m256i *)(x[t] + 32 * b0));
			const int32_t sumi =
				hsum_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wv, xv)) +
				(is_q4 ? -8 : -128) * act8_sum(x[t], nb)[b0];
			const float dx = act8_d(x[t], nb)[b0];
			if (is_q4)
				acc[t] = acc[t] + ((float)sumi * dw) * dx;
			else
				acc[t] = acc[t] + (float)sumi * (dw * dx);
		}
	}
	for (int t = 0; t < NT; t++)
		out[t] = acc[t];
}

#define CALL_Q8_0(NT) row_q8z(w, xr, NT, m->ne0 / 32, 0, out)
#define CALL_Q4_0(NT) row_q8z(w, xr, NT, m->ne0 / 32, 1, out)

SIMD_MM_DRIVER(avx512_mm_q8_0, CALL_Q8_0, TILE)
SIMD_MM_DRIVER(avx512_mm_q4_0, CALL_Q4_0, TILE)

void cpu_avx512_rows_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	avx512_mm_q8_0(m, r0, r1);
}

void cpu_avx512_rows_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	avx512_mm_q4_0(m, r0, r1);
}

/* One row: each block's exact sum from one 256-bit dot product, then the generic float step. */
SIMD_INLINE float dot_q8z(const uint8_t *row, const uint8_t *x, int64_t nb, int is_q4)
{
	const float *xd = act8_d(x, nb);
	const int32_t *xs = act8_sum(x, nb);
	float sum = 0;
	for (int64_t b = 0; b < nb; b++) {
		const __m256i wv = _mm512_castsi512_si256(q8z_last(row, b, is_q4));
		const __m256i xv = _mm256_load_si256((const __m256i *)(x + 32 * b));
		const int32_t sumi =
			hsum_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wv, xv)) +
			(is_q4 ? -8 : -128) * xs[b];
		const float dw = f16_to_f32(is_q4 ? ((const block_q4_0 *)row)[b].d
						  : ((const block_q8_0 *)row)[b].d);
		if (is_q4)
			sum = sum + ((float)sumi * dw) * xd[b];
		else
			sum = sum + (float)sumi * (dw * xd[b]);
	}
	return sum;
}

static float avx512_dot_q8_0(int64_t n, const void *w, const void *x)
{
	return dot_q8z(w, x, n / 32, 0);
}

static float avx512_dot_q4_0(int64_t n, const void *w, const void *x)
{
	return dot_q8z(w, x, n / 32, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Q4_K and Q6_K                                                                              */

/* The sum of a vector's 16 int32 lanes, exact. */
SIMD_INLINE int32_t hsum512_epi32(__m512i v)
{
	return hsum_epi32(
		_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

/* A Q4_K block for natural-order activations: [d, dmin] as f32, its 8 mins widened to int16
 * pairs, and per 64-element group j the nibbles of qs[32j..32j+32) as bytes, low ones (sub-block
 * 2j) then high ones (2j + 1), with the matching int16 scale vectors. */
struct q4kn {
	__m128 dm;
	__m256i mn16;
	__m512i wq[4], s[4];
};

SIMD_INLINE void q4kn_unpack(const block_q4_K *b, struct q4kn *u)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	uint8_t sc[8], mn[8];
	simd_q4_K_scales(b->scales, sc, mn);
	uint32_t ddm; /* d and dmin are adjacent halves: one load, one conversion */
	memcpy(&ddm, &b->d, 4);
	u->dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddm));
	const __m512i sc16 =
		_mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
	const __m128i mn8 = _mm_loadl_epi64((const __m128i *)mn);
	u->mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
	for (int j = 0; j < 4; j++) {
		const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
		u->wq[j] = _mm512_and_si512(
			_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
			m4);
		u->s[j] = q4kz_scale2(sc16, 2 * j, 2 * j + 1);
	}
}

/* Per block: sumi = sum_j sc_j * dot_j and summ = sum_j m_j * bsum_j, both exact, then
 *     acc + ((dw * dx) * (float)sumi - (dmin * dx) * (float)summ). */
SIMD_INLINE void row_q4_Kz(const block_q4_K *w, const uint8_t *const *x, int nt, int64_t nb,
			   float *out)
{
	float acc[TILE] = {0};
	for (int64_t i = 0; i < nb; i++) {
		struct q4kn u;
		q4kn_unpack(w + i, &u);
		const float dw = _mm_cvtss_f32(u.dm);
		const float dmin = _mm_cvtss_f32(_mm_movehdup_ps(u.dm));
		for (int t = 0; t < nt; t++) {
			const uint8_t *xq = x[t] + 256 * i;
			__m512i sumi = _mm512_setzero_si512();
			for (int k = 0; k < 4; k++) {
				const __m512i xv = _mm512_load_si512(xq + 64 * k);
				sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u.wq[k], xv),
							   u.s[k]);
			}
			const __m256i bs = _mm256_loadu_si256(
				(const __m256i *)(act8k_bsums(x[t], nb) + 16 * i));
			const int32_t si = hsum512_epi32(sumi);
			const int32_t sm = hsum_epi32(_mm256_madd_epi16(bs, u.mn16));
			const float dx = act8k_d(x[t], nb)[i];
			acc[t] = acc[t] + ((dw * dx) * (float)si - (dmin * dx) * (float)sm);
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = acc[t];
}

/* The stored (+ 32) quants times x, seeded with -32 * sum_s sc_s * bsum_s (see q6kz_unpack),
 * is the exact sumi; then acc + (dw * dx) * (float)sumi. */
SIMD_INLINE void row_q6_Kz(const block_q6_K *w, const uint8_t *const *x, int nt, int64_t nb,
			   float *out)
{
	float acc[TILE] = {0};
	for (int64_t i = 0; i < nb; i++) {
		struct q6kz u;
		q6kz_unpack(w + i, &u);
		for (int t = 0; t < nt; t++) {
			const uint8_t *xq = x[t] + 256 * i;
			const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(
				(const __m256i *)(act8k_bsums(x[t], nb) + 16 * i)));
			__m512i sumi = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs, u.scm32);
			for (int k = 0; k < 4; k++) {
				const __m512i xv = _mm512_load_si512(xq + 64 * k);
				sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u.q[k], xv),
							   u.s[k]);
			}
			acc[t] = acc[t] + (u.d * act8k_d(x[t], nb)[i]) * (float)hsum512_epi32(sumi);
		}
	}
	for (int t = 0; t < nt; t++)
		out[t] = acc[t];
}

#define CALL_Q4_K(NT) row_q4_Kz((const block_q4_K *)w, xr, NT, m->ne0 / 256, out)
#define CALL_Q6_K(NT) row_q6_Kz((const block_q6_K *)w, xr, NT, m->ne0 / 256, out)

SIMD_MM_DRIVER(avx512_mm_q4_K, CALL_Q4_K, TILE)
SIMD_MM_DRIVER(avx512_mm_q6_K, CALL_Q6_K, TILE)

void cpu_avx512_rows_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	avx512_mm_q4_K(m, r0, r1);
}

void cpu_avx512_rows_q6_K(const struct cpu_mm *m, int64_t r0, int64_t r1)
{
	avx512_mm_q6_K(m, r0, r1);
}

static float avx512_dot_q4_K(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q4_Kz(w, &xr, 1, n / 256, &out);
	return out;
}

static float avx512_dot_q6_K(int64_t n, const void *w, const void *x)
{
	float out;
	const uint8_t *xr = x;
	row_q6_Kz(w, &xr, 1, n / 256, &out);
	return out;
}

void cpu_kernels_avx512_fill(struct cpu_kernels *k)
{
	k->name = "avx512";
	struct cpu_type_ops *t = k->type;
	/* Q8_0 and Q4_0 keep the AVX2 set's act8 activations. */
	t[LM_Q8_0].vec_dot = avx512_dot_q8_0;
	t[LM_Q8_0].mm = avx512_mm_q8_0;
	t[LM_Q8_0].mv = NULL;
	t[LM_Q4_0].vec_dot = avx512_dot_q4_0;
	t[LM_Q4_0].mm = avx512_mm_q4_0;
	t[LM_Q4_0].mv = NULL;
	t[LM_Q4_K].vec_dot = avx512_dot_q4_K;
	t[LM_Q4_K].mm = avx512_mm_q4_K;
	t[LM_Q4_K].mv = NULL;
	t[LM_Q6_K].vec_dot = avx512_dot_q6_K;
	t[LM_Q6_K].mm = avx512_mm_q6_K;
	t[LM_Q6_K].mv = NULL;
	cpu_panel_avx512_fill(k);
}

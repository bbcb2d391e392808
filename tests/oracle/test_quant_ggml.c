/* test_quant_ggml.c — layermesh's quantizers and dequantizers against llama.cpp's own.
 *
 * dlopen()s the libggml-base.so of a node-llama-cpp@3.21.1 install (the path comes from the meson
 * option llama_oracle, through LM_GGML_BASE) and checks, over seeded random rows of several
 * distributions and magnitudes:
 *   - lm_quantize_row writes exactly the bytes of ggml_quantize_chunk (no importance matrix);
 *     Q8_K, which ggml_quantize_chunk does not take, against quantize_row_q8_K_ref;
 *   - lm_dequantize_row returns exactly the floats of ggml's to_float (dequantize_row_q8_K), on quantizer output and
 *     on random block bytes (with finite scales);
 *   - the f16 conversions agree on every half value and on random f32 bit patterns.
 * The few ggml declarations needed are written out here (ggml.h of that release).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "kernels/cpu/cpu_impl.h"
#include "common/format/quant.h"

typedef void (*ggml_to_float_t)(const void *x, float *y, int64_t k);
typedef void (*ggml_from_float_t)(const float *x, void *y, int64_t k);

struct ggml_type_traits {
	const char *type_name;
	int64_t blck_size;
	int64_t blck_size_interleave;
	size_t type_size;
	bool is_quantized;
	ggml_to_float_t to_float;
	ggml_from_float_t from_float_ref;
};

static const struct ggml_type_traits *(*ggml_get_type_traits)(int type);
static size_t (*ggml_quantize_chunk)(int type, const float *src, void *dst, int64_t start,
				     int64_t nrows, int64_t n_per_row, const float *imatrix);
static void (*quantize_row_q8_K_ref)(const float *x, void *y, int64_t k);
static void (*quantize_row_q8_1_ref)(const float *x, void *y, int64_t k);
static void (*dequantize_row_q8_K)(const void *x, float *y, int64_t k);
static void *ggml_lib;

static void oracle_open(void)
{
	const char *path = getenv("LM_GGML_BASE");
	cr_assert_not_null(path, "LM_GGML_BASE is not set (meson sets it from -Dllama_oracle)");
	ggml_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	cr_assert_not_null(ggml_lib, "dlopen %s: %s", path, dlerror());
	*(void **)&ggml_get_type_traits = dlsym(ggml_lib, "ggml_get_type_traits");
	*(void **)&ggml_quantize_chunk = dlsym(ggml_lib, "ggml_quantize_chunk");
	/* Q8_K has no entry in ggml's type traits: its row functions are looked up by name. */
	*(void **)&quantize_row_q8_K_ref = dlsym(ggml_lib, "quantize_row_q8_K_ref");
	*(void **)&dequantize_row_q8_K = dlsym(ggml_lib, "dequantize_row_q8_K");
	/* Q8_1 (what a Q5_1 cache's dot products quantize q to) is not a ggml_quantize_chunk
	 * type either. */
	*(void **)&quantize_row_q8_1_ref = dlsym(ggml_lib, "quantize_row_q8_1_ref");
	cr_assert_not_null(ggml_get_type_traits);
	cr_assert_not_null(ggml_quantize_chunk);
	cr_assert_not_null(quantize_row_q8_K_ref);
	cr_assert_not_null(dequantize_row_q8_K);
	cr_assert_not_null(quantize_row_q8_1_ref);
}

static void oracle_close(void)
{
	if (ggml_lib != NULL)
		dlclose(ggml_lib);
	ggml_lib = NULL;
}

TestSuite(quant_ggml, .init = oracle_open, .fini = oracle_close, .timeout = 60);

/* splitmix64: seeded, the same sequence on every run. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static float rng_uniform(void) /* [-1, 1) */
{
	return (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static float rng_gauss(void)
{
	double u1 = ((double)(rng_next() >> 11) + 1.0) * 0x1p-53;
	double u2 = (double)(rng_next() >> 11) * 0x1p-53;
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Row generators: the shapes real weights and activations take, and the awkward ones. */
static void fill_row(float *x, int64_t n, int kind)
{
	const float scales[] = {1.0f, 1e-3f, 37.5f, 1e-6f, 3e4f};
	const float s = scales[rng_next() % 5];
	for (int64_t i = 0; i < n; i++) {
		switch (kind) {
		case 0:
			x[i] = rng_uniform() * s;
			break;
		case 1:
			x[i] = rng_gauss() * s;
			break;
		case 2: /* mostly small with rare large outliers */
			x[i] = rng_gauss() * s * ((rng_next() % 97) == 0 ? 40.0f : 1.0f);
			break;
		case 3: /* one-signed blocks (Q4_K's min is then zero or the whole range) */
			x[i] = fabsf(rng_gauss()) * s * ((i / 32) % 2 ? 1.0f : -1.0f);
			break;
		case 4: /* small integers: ties in every rounding step */
			x[i] = (float)((int)(rng_next() % 17) - 8) * s;
			break;
		default: /* sparse: whole sub-blocks of zeros */
			x[i] = (i / 16) % 3 == 0 ? 0.0f : rng_gauss() * s;
			break;
		}
	}
}

#define N_KINDS 6

static const enum lm_dtype stored_types[] = {LM_F32,  LM_F16,  LM_BF16, LM_Q8_0, LM_Q4_0,
					     LM_Q5_1, LM_Q4_K, LM_Q6_K, LM_MXFP4};

static size_t row_bytes(enum lm_dtype t, int64_t n)
{
	uint64_t b = 0;
	cr_assert_eq(lm_dtype_row_bytes(t, (uint64_t)n, &b), 0);
	return (size_t)b;
}

Test(quant_ggml, quantizers_write_the_bytes_of_ggml_quantize_chunk)
{
	const int64_t n = 4096;
	float *x = malloc((size_t)n * sizeof(float));
	uint8_t *ours = malloc(row_bytes(LM_F32, n));
	uint8_t *theirs = malloc(row_bytes(LM_F32, n));
	float *y0 = malloc((size_t)n * sizeof(float));
	float *y1 = malloc((size_t)n * sizeof(float));
	cr_assert(x && ours && theirs && y0 && y1);
	rng_state = 42;
	for (size_t ti = 0; ti < sizeof stored_types / sizeof stored_types[0]; ti++) {
		const enum lm_dtype t = stored_types[ti];
		const size_t rb = row_bytes(t, n);
		const struct ggml_type_traits *tr = ggml_get_type_traits((int)t);
		/* f32 has no to_float in ggml: its "dequantization" is the identity. */
		cr_assert(t == LM_F32 || tr->to_float != NULL, "%s has no to_float",
			  lm_dtype_name(t));
		for (int rep = 0; rep < 24; rep++) {
			fill_row(x, n, rep % N_KINDS);
			memset(ours, 0xa5, rb);
			memset(theirs, 0x5a, rb);
			cr_assert_eq(lm_quantize_row(t, x, ours, n), 0);
			size_t got = ggml_quantize_chunk((int)t, x, theirs, 0, 1, n, NULL);
			cr_assert_eq(got, rb);
			for (size_t b = 0; b < rb; b++)
				cr_assert_eq(ours[b], theirs[b],
					     "%s rep %d: byte %zu differs (ours %02x, ggml %02x)",
					     lm_dtype_name(t), rep, b, ours[b], theirs[b]);
			cr_assert_eq(lm_dequantize_row(t, ours, y0, n), 0);
			if (t == LM_F32)
				memcpy(y1, x, (size_t)n * sizeof(float));
			else
				tr->to_float(ours, y1, n);
			cr_assert_eq(memcmp(y0, y1, (size_t)n * sizeof(float)), 0,
				     "%s rep %d: dequantized floats differ", lm_dtype_name(t), rep);
		}
	}
	free(x);
	free(ours);
	free(theirs);
	free(y0);
	free(y1);
}

Test(quant_ggml, q8_1_matches_quantize_row_q8_1_ref)
{
	const int64_t n = 2048;
	static float x[2048];
	static block_q8_1 ours[64], theirs[64];
	rng_state = 8;
	for (int rep = 0; rep < 24; rep++) {
		fill_row(x, n, rep % N_KINDS);
		memset(ours, 0xa5, sizeof ours);
		memset(theirs, 0x5a, sizeof theirs);
		cr_assert_eq(lm_quantize_row(LM_Q8_1, x, ours, n), 0);
		quantize_row_q8_1_ref(x, theirs, n);
		cr_assert_eq(memcmp(ours, theirs, sizeof ours), 0, "rep %d: q8_1 bytes differ",
			     rep);
	}
}

Test(quant_ggml, q8_K_matches_quantize_row_q8_K_ref)
{
	const int64_t n = 2048;
	static float x[2048];
	static block_q8_K ours[8], theirs[8];
	static float y0[2048], y1[2048];
	rng_state = 7;
	for (int rep = 0; rep < 24; rep++) {
		fill_row(x, n, rep % N_KINDS);
		/* ggml leaves bsums unwritten for an all-zero block: start both equal. */
		memset(ours, 0, sizeof ours);
		memset(theirs, 0, sizeof theirs);
		cr_assert_eq(lm_quantize_row(LM_Q8_K, x, ours, n), 0);
		quantize_row_q8_K_ref(x, theirs, n);
		cr_assert_eq(memcmp(ours, theirs, sizeof ours), 0, "rep %d: q8_K bytes differ",
			     rep);
		cr_assert_eq(lm_dequantize_row(LM_Q8_K, ours, y0, n), 0);
		dequantize_row_q8_K(ours, y1, n);
		cr_assert_eq(memcmp(y0, y1, sizeof y0), 0);
	}
}

/* Random block bytes reach states no quantizer writes (every scale and nibble pattern). */
Test(quant_ggml, dequantizers_match_to_float_on_random_blocks)
{
	const int64_t n = 1024;
	static uint8_t buf[4096];
	static float y0[1024], y1[1024];
	const enum lm_dtype types[] = {LM_Q8_0, LM_Q4_0, LM_Q5_1, LM_Q4_K,
				       LM_Q6_K, LM_BF16, LM_MXFP4};
	rng_state = 99;
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		const enum lm_dtype t = types[ti];
		const struct lm_dtype_info *info = lm_dtype_info(t);
		const size_t rb = row_bytes(t, n);
		const struct ggml_type_traits *tr = ggml_get_type_traits((int)t);
		for (int rep = 0; rep < 50; rep++) {
			for (size_t b = 0; b < rb; b++)
				buf[b] = (uint8_t)rng_next();
			/* Finite half scales: clear the top exponent bit of every f16 field. */
			for (size_t blk = 0; blk < rb / info->size; blk++) {
				uint8_t *p = buf + blk * info->size;
				switch (t) {
				case LM_Q8_0:
				case LM_Q4_0:
					p[1] &= 0xbf;
					break;
				case LM_Q4_K:
				case LM_Q5_1:
					p[1] &= 0xbf;
					p[3] &= 0xbf;
					break;
				case LM_Q6_K:
					p[209] &= 0xbf;
					break;
				case LM_MXFP4: /* every scale but 255 (E8M0's NaN) */
					p[0] = p[0] == 255 ? 254 : p[0];
					break;
				default: /* bf16: keep the exponent below all-ones */
					p[1] &= 0xbf;
					break;
				}
			}
			cr_assert_eq(lm_dequantize_row(t, buf, y0, n), 0);
			tr->to_float(buf, y1, n);
			cr_assert_eq(memcmp(y0, y1, sizeof y0), 0, "%s rep %d differs",
				     lm_dtype_name(t), rep);
		}
	}
}

Test(quant_ggml, f16_conversions_match)
{
	const struct ggml_type_traits *tr = ggml_get_type_traits(LM_F16);
	static uint16_t h[65536];
	static float ours[65536], theirs[65536];
	for (uint32_t i = 0; i < 65536; i++) {
		h[i] = (uint16_t)i;
		ours[i] = lm_f16_to_f32((uint16_t)i);
	}
	tr->to_float(h, theirs, 65536);
	for (uint32_t i = 0; i < 65536; i++) {
		uint32_t a, b;
		memcpy(&a, &ours[i], 4);
		memcpy(&b, &theirs[i], 4);
		/* A signalling nan comes back quiet from ggml and unchanged from ours: both nan. */
		if (isnan(ours[i]) && isnan(theirs[i]))
			continue;
		cr_assert_eq(a, b, "half %04x: ours %08x, ggml %08x", i, a, b);
	}
	/* Random f32 bit patterns (every exponent, nans included) and the rounding boundaries. */
	static float x[65536];
	static uint16_t q0[65536], q1[65536];
	rng_state = 5;
	for (int i = 0; i < 65536; i++) {
		uint32_t u = (uint32_t)rng_next();
		if (i % 4 == 1) /* near the half range, where rounding and overflow happen */
			u = (u & 0x80000000u) | (0x33000000u + (u % 0x14800000u));
		if (i % 4 == 2) /* exactly halfway between two halves */
			u = (u & 0xffffe000u) | 0x1000u;
		memcpy(&x[i], &u, 4);
	}
	cr_assert_eq(lm_quantize_row(LM_F16, x, q0, 65536), 0);
	cr_assert_eq(ggml_quantize_chunk(LM_F16, x, q1, 0, 1, 65536, NULL), sizeof q1);
	for (int i = 0; i < 65536; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		cr_assert_eq(q0[i], q1[i], "f32 %08x: ours %04x, ggml %04x", u, q0[i], q1[i]);
	}
}

/* The activation quantizer against ggml's x86 CPU builds' own (from_float of Q8_0): llama.cpp's
 * x64 and sse42 builds quantize with the reference (1 / d, round half away from zero) and give
 * layermesh's bytes, including on values exactly on or within an ulp of a rounding boundary;
 * its AVX builds (haswell, zen4) take 127 / amax and round half to even, and those boundary
 * values tell them apart: the rule quant.c names for the "exact or 1e-2 off" logits. */
struct ggml_type_traits_cpu {
	ggml_from_float_t from_float;
	void *vec_dot;
	int vec_dot_type;
	int64_t nrows;
};

Test(quant_ggml, q8_0_activations_match_the_reference_builds)
{
	static const char *const variants[] = {"libggml-cpu-x64.so", "libggml-cpu-sse42.so",
					       "libggml-cpu-haswell.so", "libggml-cpu-zen4.so"};
	static const bool same[] = {true, true, false, false};
	/* What each build needs to run at all (a zen4 build on a CPU without AVX-512 dies of
	 * SIGILL): the builds this CPU cannot run are not compared. */
	const bool runs[] = {true, __builtin_cpu_supports("sse4.2"),
			     __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
			     __builtin_cpu_supports("avx512f") &&
				     __builtin_cpu_supports("avx512bw")};
	const char *base = getenv("LM_GGML_BASE");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", base);
	*strrchr(dir, '/') = '\0';
	for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
		if (!runs[v]) {
			cr_log_info("%s: this CPU cannot run it; not compared", variants[v]);
			continue;
		}
		char path[4200];
		snprintf(path, sizeof path, "%s/%s", dir, variants[v]);
		void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		cr_assert_not_null(lib, "dlopen %s: %s", path, dlerror());
		const struct ggml_type_traits_cpu *(*traits)(int) = NULL;
		void (*cpu_init)(void) = NULL;
		*(void **)&traits = dlsym(lib, "ggml_get_type_traits_cpu");
		*(void **)&cpu_init = dlsym(lib, "ggml_cpu_init");
		cr_assert_not_null(traits);
		if (cpu_init != NULL)
			cpu_init();
		ggml_from_float_t theirs = traits(LM_Q8_0)->from_float;
		cr_assert_not_null(theirs);
		enum { N = 4096 };
		static float x[N];
		static block_q8_0 a[N / 32], b[N / 32];
		rng_state = 1234 + v;
		int differ = 0;
		for (int round = 0; round < 200; round++) {
			for (int i = 0; i < N; i++) {
				double u = (double)(rng_next() >> 11) * 0x1p-53 - 0.5;
				x[i] = (float)(u * (1 + round % 7) * 3);
			}
			/* Boundaries: values at exactly k + 0.5 quanta of their block, and next to. */
			for (int blk = 0; blk < N / 32; blk += 3) {
				float amax = 0;
				for (int j = 0; j < 32; j++)
					amax = fmaxf(amax, fabsf(x[blk * 32 + j]));
				for (int j = 1; j < 32; j += 5) {
					float t = ((float)(j % 100) + 0.5f) * amax / 127.0f;
					x[blk * 32 + j] = nextafterf(t, (j & 2) ? 0.0f : 1e9f);
				}
			}
			lm_quantize_q8_0_ref(x, a, N);
			theirs(x, b, N);
			differ += memcmp(a, b, sizeof a) != 0;
			if (same[v])
				cr_assert_eq(memcmp(a, b, sizeof a), 0, "%s: round %d differs",
					     variants[v], round);
		}
		if (!same[v])
			cr_expect_gt(differ, 0, "%s quantizes the boundary values as the reference",
				     variants[v]);
		cr_log_info("%s: %d of 200 rounds differ from the reference", variants[v], differ);
		dlclose(lib);
	}
}

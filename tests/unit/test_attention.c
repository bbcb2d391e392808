/* test_attention.c — the CPU backend's rope, KV stores and attention.
 *
 * rope against the direct formula theta_i = pos * freq_scale * base^(-2i/n_rot) in double;
 * kv_store against the quantizer's bytes at the documented row; attention against a naive
 * double-precision softmax attention over the same K/V values (kept by the test in f32 and
 * passed through the cache type's quantizer), with GQA, sliding windows and every KV type.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "common/format/quant.h"
#include "kernels_testutil.h"

TestSuite(attention, .timeout = 60);

static void be_init(struct lm_backend *b, int threads, int scalar)
{
	struct lm_backend_opts o = {.n_threads = threads, .force_scalar = scalar};
	cr_assert_eq(lm_backend_cpu_init(b, &o), 0);
}

/* Kernel set k (an index into test_ksets): true when available. */
static bool kset_init(struct lm_backend *b, int threads, int k)
{
	int rc = test_backend(b, threads, test_ksets[k]);
	if (rc == LM_EUNSUPPORTED)
		return false;
	cr_assert_eq(rc, 0, "%s: %d", test_ksets[k], rc);
	return true;
}

/* ------------------------------------------------------------------------------------------ */
/* rope                                                                                       */

Test(attention, rope_matches_the_formula)
{
	struct test_rng r = {31};
	const int n_heads = 3, head_dim = 64;
	const int32_t positions[] = {0, 1, 7, 100, 1000, 4000};
	const int n = 6;
	struct lm_tok_loc loc[6];
	for (int t = 0; t < n; t++)
		loc[t] = (struct lm_tok_loc){.slot = 0, .pos = positions[t]};
	/* Frequency factors as Llama 3 writes them (1 to 8) and as Gemma 4's partial rope does
	 * (1e30: a pair that does not turn). */
	static float factors[32];
	for (int i = 0; i < 32; i++)
		factors[i] = i < 8 ? 1.0f : i < 24 ? 1.0f + (float)i / 3.0f : 1e30f;
	const struct lm_rope_params cases[] = {
		{LM_ROPE_NORM, 64, 10000.0f, 1.0f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NEOX, 64, 10000.0f, 1.0f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NORM, 32, 1000000.0f, 1.0f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NEOX, 32, 1000000.0f, 0.25f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NEOX, 16, 10000.0f, 1.0f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NORM, 0, 10000.0f, 1.0f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NORM, 64, 500000.0f, 1.0f, factors, 0.0f, 0.0f, {0.0f, 0.0f}},
		{LM_ROPE_NEOX, 64, 10000.0f, 1.0f, factors, 0.0f, 0.0f, {0.0f, 0.0f}},
		/* YaRN (gpt-oss): pairs below 4 extrapolate, past 20 interpolate, a ramp between;
		 * cos and sin scaled. */
		{LM_ROPE_NEOX, 64, 150000.0f, 0.25f, NULL, 1.0f, 1.3f, {4.0f, 20.0f}},
		{LM_ROPE_NORM, 64, 10000.0f, 0.125f, factors, 1.0f, 1.2f, {0.0f, 31.0f}},
	};
	float x[6 * 3 * 64], y[6 * 3 * 64];
	for (int k = 0; k < TEST_N_KSETS; k++) {
		double worst_near = 0, worst_far = 0;
		struct lm_backend b;
		if (!kset_init(&b, 1, k))
			continue;
		for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
			const struct lm_rope_params *rp = &cases[c];
			test_fill_gauss(&r, x, sizeof x / sizeof x[0], 1.0f);
			memcpy(y, x, sizeof x);
			cr_assert_eq(b.iface->rope(b.ctx, y, n_heads, head_dim, loc, n, rp), 0);
			const int half = rp->n_rot / 2;
			for (int t = 0; t < n; t++) {
				for (int h = 0; h < n_heads; h++) {
					const float *xi = x + (t * n_heads + h) * head_dim;
					const float *yi = y + (t * n_heads + h) * head_dim;
					for (int i = 0; i < half; i++) {
						const double ff = rp->freq_factors != NULL
									  ? rp->freq_factors[i]
									  : 1.0;
						const double extrap =
							positions[t] *
							pow(rp->freq_base, -2.0 * i / rp->n_rot) /
							ff;
						double theta = extrap * rp->freq_scale, m = 1;
						if (rp->ext_factor != 0) { /* YaRN: rope.h */
							const double ramp =
								(i - rp->corr[0]) /
								fmax(0.001,
								     rp->corr[1] - rp->corr[0]);
							const double mix =
								(1 - fmin(1, fmax(0, ramp))) *
								rp->ext_factor;
							theta = theta * (1 - mix) + extrap * mix;
							m = rp->mscale;
						}
						const int i0 = rp->mode == LM_ROPE_NEOX ? i : 2 * i;
						const int i1 = rp->mode == LM_ROPE_NEOX ? i + half
											: 2 * i + 1;
						const double a = xi[i0], bb = xi[i1];
						const double w0 =
							m * (a * cos(theta) - bb * sin(theta));
						const double w1 =
							m * (a * sin(theta) + bb * cos(theta));
						/* theta is built in f32 by repeated products, as
						 * GGUF's reference does: its error grows with pos. */
						const double tol = (fabs(a) + fabs(bb)) *
								   (positions[t] * 6e-7 + 2e-6);
						const double err =
							fmax(fabs(yi[i0] - w0), fabs(yi[i1] - w1)) /
							(fabs(a) + fabs(bb));
						if (positions[t] <= 100)
							worst_near = fmax(worst_near, err);
						else
							worst_far = fmax(worst_far, err);
						cr_assert(
							fabs(yi[i0] - w0) <= tol &&
								fabs(yi[i1] - w1) <= tol,
							"mode %d n_rot %d pos %d head %d pair %d: "
							"(%g, %g) vs (%g, %g)",
							rp->mode, rp->n_rot, positions[t], h, i,
							yi[i0], yi[i1], w0, w1);
					}
					/* Dimensions past n_rot are untouched. */
					for (int d = rp->n_rot; d < head_dim; d++)
						cr_assert_eq(yi[d], xi[d]);
				}
			}
		}
		cr_log_info("rope %s: worst error / (|x0| + |x1|): %.3g for pos <= 100, %.3g "
			    "for pos 1000-4000",
			    test_ksets[k], worst_near, worst_far);
		struct lm_rope_params bad = {LM_ROPE_NORM, 65,   10000.0f, 1.0f,
					     NULL,         0.0f, 0.0f,     {0.0f, 0.0f}};
		cr_expect_eq(b.iface->rope(b.ctx, y, n_heads, head_dim, loc, n, &bad), LM_EINVAL);
		bad = (struct lm_rope_params){
			(enum lm_rope_mode)1, 64, 10000.0f, 1.0f, NULL, 0.0f, 0.0f, {0.0f, 0.0f}};
		cr_expect_eq(b.iface->rope(b.ctx, y, n_heads, head_dim, loc, n, &bad), LM_EINVAL);
		lm_backend_fini(&b);
	}
}

/* Position 0 is the identity and a rotation keeps each pair's length. */
Test(attention, rope_position_zero_is_identity)
{
	struct lm_backend b;
	be_init(&b, 1, 0);
	float x[128], y[128];
	struct test_rng r = {32};
	test_fill_gauss(&r, x, 128, 1.0f);
	memcpy(y, x, sizeof x);
	struct lm_tok_loc loc = {0, 0};
	struct lm_rope_params rp = {LM_ROPE_NEOX, 128,  10000.0f, 1.0f,
				    NULL,         0.0f, 0.0f,     {0.0f, 0.0f}};
	cr_assert_eq(b.iface->rope(b.ctx, y, 1, 128, &loc, 1, &rp), 0);
	cr_expect_eq(memcmp(x, y, sizeof x), 0);
	lm_backend_fini(&b);
}

/* ------------------------------------------------------------------------------------------ */
/* KV cache fixtures                                                                          */

struct tkv {
	struct lm_kv_layer kv;
	struct lm_backend *b;
	/* The f32 K and V the test stored, per slot and absolute position (the reference). */
	float *kf, *vf; /* [slots][max_pos][width] */
	int32_t max_pos;
	int width;
};

static size_t tkv_row_bytes(enum lm_dtype t, int width)
{
	uint64_t rb = 0;
	cr_assert_eq(lm_dtype_row_bytes(t, (uint64_t)width, &rb), 0);
	return (size_t)rb;
}

static void tkv_init(struct tkv *c, struct lm_backend *b, enum lm_dtype kt, enum lm_dtype vt,
		     int n_kv_heads, int head_dim, int32_t ctx, int32_t window, int32_t slots,
		     int32_t max_pos)
{
	memset(c, 0, sizeof *c);
	c->b = b;
	c->width = n_kv_heads * head_dim;
	c->max_pos = max_pos;
	c->kv = (struct lm_kv_layer){
		.k_type = kt,
		.v_type = vt,
		.n_kv_heads = n_kv_heads,
		.head_dim = head_dim,
		.ctx = ctx,
		.window = window,
		.slots = slots,
		.k_row_bytes = tkv_row_bytes(kt, c->width),
		.v_row_bytes = tkv_row_bytes(vt, c->width),
	};
	c->kv.k = b->iface->malloc(b->ctx, c->kv.k_row_bytes * (size_t)ctx * (size_t)slots);
	c->kv.v = b->iface->malloc(b->ctx, c->kv.v_row_bytes * (size_t)ctx * (size_t)slots);
	c->kf = calloc((size_t)slots * (size_t)max_pos * (size_t)c->width, sizeof(float));
	c->vf = calloc((size_t)slots * (size_t)max_pos * (size_t)c->width, sizeof(float));
	cr_assert(c->kv.k && c->kv.v && c->kf && c->vf);
}

static void tkv_fini(struct tkv *c)
{
	c->b->iface->mfree(c->b->ctx, c->kv.k);
	c->b->iface->mfree(c->b->ctx, c->kv.v);
	free(c->kf);
	free(c->vf);
}

/* Stores n tokens (random K and V) at loc, remembering the f32 values. */
static void tkv_store(struct tkv *c, struct test_rng *r, const struct lm_tok_loc *loc, int n)
{
	float *k = malloc((size_t)(n * c->width) * sizeof(float));
	float *v = malloc((size_t)(n * c->width) * sizeof(float));
	test_fill_gauss(r, k, (size_t)(n * c->width), 1.0f);
	test_fill_gauss(r, v, (size_t)(n * c->width), 1.0f);
	cr_assert_eq(c->b->iface->kv_store(c->b->ctx, &c->kv, k, v, loc, n), 0);
	for (int t = 0; t < n; t++) {
		const size_t at = ((size_t)loc[t].slot * (size_t)c->max_pos + (size_t)loc[t].pos) *
				  (size_t)c->width;
		memcpy(c->kf + at, k + t * c->width, (size_t)c->width * sizeof(float));
		memcpy(c->vf + at, v + t * c->width, (size_t)c->width * sizeof(float));
	}
	free(k);
	free(v);
}

/* x through type t and back (what the cache holds, or what q becomes before the dot). */
static void through(enum lm_dtype t, const float *x, float *y, int n)
{
	uint8_t buf[4096];
	cr_assert_eq(lm_quantize_row(t, x, buf, n), 0);
	cr_assert_eq(lm_dequantize_row(t, buf, y, n), 0);
}

/* The type q is converted to before its dot product with K of type kt (GGUF's vec_dot type;
 * fp8 meets q in f32). */
static enum lm_dtype q_type(enum lm_dtype kt)
{
	switch (kt) {
	case LM_Q4_0:
		return LM_Q8_0;
	case LM_Q5_1:
		return LM_Q8_1;
	case LM_FP8_E4M3:
		return LM_F32;
	default:
		return kt;
	}
}

/* q . K in double over what the cache and the converted q hold. Q5_1 against Q8_1 takes the
 * activation block's s, d x sum(q) rounded to f16 as the format keeps it, for the min's term. */
static double ref_dot(enum lm_dtype kt, const float *q, const float *k, int hd)
{
	float qc[256], kr[256];
	through(q_type(kt), q, qc, hd);
	through(kt, k, kr, hd);
	if (kt != LM_Q5_1) {
		double d = 0;
		for (int i = 0; i < hd; i++)
			d += (double)qc[i] * kr[i];
		return d;
	}
	block_q5_1 kb[8];
	block_q8_1 qb[8];
	cr_assert_eq(lm_quantize_row(LM_Q5_1, k, kb, hd), 0);
	cr_assert_eq(lm_quantize_row(LM_Q8_1, q, qb, hd), 0);
	double d = 0;
	for (int b = 0; b < hd / 32; b++) {
		const double m = lm_f16_to_f32(kb[b].m);
		for (int i = 0; i < 32; i++)
			d += ((double)kr[32 * b + i] - m) * qc[32 * b + i];
		d += m * lm_f16_to_f32(qb[b].s);
	}
	return d;
}

/* Naive softmax attention in double over the test's own record of K and V. */
static void ref_attention(double *out, const struct tkv *c, const float *q,
			  const struct lm_tok_loc *loc, int n, int n_heads, float scale)
{
	const int hd = c->kv.head_dim, group = n_heads / c->kv.n_kv_heads;
	float vr[256];
	for (int t = 0; t < n; t++) {
		for (int h = 0; h < n_heads; h++) {
			const int g = h / group;
			const int32_t pos = loc[t].pos;
			const int32_t lo = c->kv.window > 0 && pos - c->kv.window + 1 > 0
						   ? pos - c->kv.window + 1
						   : 0;
			double *o = out + (t * n_heads + h) * hd;
			double *s = malloc((size_t)(pos - lo + 1) * sizeof(double));
			double max = -INFINITY, sum = 0;
			for (int32_t p = lo; p <= pos; p++) {
				const size_t at =
					((size_t)loc[t].slot * (size_t)c->max_pos + (size_t)p) *
						(size_t)c->width +
					(size_t)(g * hd);
				const double d = ref_dot(c->kv.k_type, q + (t * n_heads + h) * hd,
							 c->kf + at, hd);
				s[p - lo] = d * scale;
				max = fmax(max, s[p - lo]);
			}
			/* A sink logit joins the max and the denominator, with no value. */
			if (c->kv.sinks != NULL) {
				max = fmax(max, c->kv.sinks[h]);
				sum += exp(c->kv.sinks[h] - max);
			}
			for (int i = 0; i < hd; i++)
				o[i] = 0;
			for (int32_t p = lo; p <= pos; p++) {
				const size_t at =
					((size_t)loc[t].slot * (size_t)c->max_pos + (size_t)p) *
						(size_t)c->width +
					(size_t)(g * hd);
				through(c->kv.v_type, c->vf + at, vr, hd);
				const double w = exp(s[p - lo] - max);
				sum += w;
				for (int i = 0; i < hd; i++)
					o[i] += w * vr[i];
			}
			for (int i = 0; i < hd; i++)
				o[i] /= sum;
			free(s);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* kv_store                                                                                   */

static const enum lm_dtype kv_types[] = {LM_F32,  LM_F16,  LM_BF16,    LM_Q8_0,
					 LM_Q4_0, LM_Q5_1, LM_FP8_E4M3};
#define N_KV_TYPES 7

Test(attention, kv_store_writes_the_quantized_row_at_pos_mod_ctx)
{
	struct test_rng r = {41};
	struct lm_backend b;
	for (int k = 0; k < TEST_N_KSETS; k++) {
		if (!kset_init(&b, 1, k))
			continue;
		for (int ti = 0; ti < N_KV_TYPES; ti++) {
			struct tkv c;
			tkv_init(&c, &b, kv_types[ti], kv_types[(ti + 1) % N_KV_TYPES], 2, 32, 8, 8,
				 3, 32);
			const struct lm_tok_loc loc[] = {{1, 0}, {1, 1}, {2, 13}, {0, 7}};
			tkv_store(&c, &r, loc, 4);
			uint8_t want[1024];
			for (int t = 0; t < 4; t++) {
				const size_t row =
					(size_t)loc[t].slot * 8 + (size_t)(loc[t].pos % 8);
				const size_t at =
					((size_t)loc[t].slot * 32 + (size_t)loc[t].pos) * 64;
				lm_quantize_row(c.kv.k_type, c.kf + at, want, 64);
				cr_expect_eq(memcmp((uint8_t *)c.kv.k + row * c.kv.k_row_bytes,
						    want, c.kv.k_row_bytes),
					     0, "K token %d", t);
				lm_quantize_row(c.kv.v_type, c.vf + at, want, 64);
				cr_expect_eq(memcmp((uint8_t *)c.kv.v + row * c.kv.v_row_bytes,
						    want, c.kv.v_row_bytes),
					     0, "V token %d", t);
			}
			/* A row nobody wrote stays zero. */
			const uint8_t *untouched =
				(const uint8_t *)c.kv.k + (0 * 8 + 3) * c.kv.k_row_bytes;
			for (size_t i = 0; i < c.kv.k_row_bytes; i++)
				cr_assert_eq(untouched[i], 0);
			/* Out-of-range slots and negative positions are refused before anything is
		 * written. */
			float z[64] = {0};
			const struct lm_tok_loc bad_slot = {3, 0}, bad_pos = {0, -1};
			cr_expect_eq(b.iface->kv_store(b.ctx, &c.kv, z, z, &bad_slot, 1),
				     LM_ERANGE);
			cr_expect_eq(b.iface->kv_store(b.ctx, &c.kv, z, z, &bad_pos, 1), LM_ERANGE);
			tkv_fini(&c);
		}
		lm_backend_fini(&b);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* attention                                                                                  */

struct attn_case {
	enum lm_dtype kt, vt;
	int n_heads, n_kv_heads, head_dim;
	int32_t window;
	const float *sinks; /* per query head, or NULL */
};

/* History of `hist` positions in slots 0 and 1 (stored in chunks of 4), then one batch: a
 * 4-token prefill chunk of slot 0 and a single decode token of slot 1. Returns the NMSE against
 * the double reference and writes the output to out. */
static double run_attention_case(struct lm_backend *b, const struct attn_case *ac, int32_t hist,
				 float *out_keep, uint64_t seed)
{
	struct test_rng r = {seed};
	const int chunk = 4;
	/* A sliding layer's ring holds window + chunk - 1 rows: enough for a chunk's earliest
	 * token to still see its whole window after the chunk is stored. */
	const int32_t ctx = ac->window > 0 ? ac->window + chunk - 1 : hist + chunk + 1;
	struct tkv c;
	tkv_init(&c, b, ac->kt, ac->vt, ac->n_kv_heads, ac->head_dim, ctx, ac->window, 2,
		 hist + chunk + 1);
	c.kv.sinks = ac->sinks;
	struct lm_tok_loc loc[8];
	for (int32_t p = 0; p < hist; p += chunk) {
		int m = 0;
		for (int32_t s = 0; s < 2; s++)
			for (int32_t q = p; q < p + chunk && q < hist; q++)
				loc[m++] = (struct lm_tok_loc){s, q};
		tkv_store(&c, &r, loc, m);
	}
	const int n = chunk + 1;
	for (int t = 0; t < chunk; t++)
		loc[t] = (struct lm_tok_loc){0, hist + t};
	loc[chunk] = (struct lm_tok_loc){1, hist};
	tkv_store(&c, &r, loc, n);

	const int qw = ac->n_heads * ac->head_dim;
	float *q = malloc((size_t)(n * qw) * sizeof(float));
	float *out = malloc((size_t)(n * qw) * sizeof(float));
	double *ref = malloc((size_t)(n * qw) * sizeof(double));
	test_fill_gauss(&r, q, (size_t)(n * qw), 1.0f);
	const float scale = 1.0f / sqrtf((float)ac->head_dim);
	cr_assert_eq(b->iface->attention(b->ctx, out, q, &c.kv, loc, n, ac->n_heads, scale), 0);
	ref_attention(ref, &c, q, loc, n, ac->n_heads, scale);
	const double e = test_nmse_d(out, ref, (size_t)(n * qw));
	if (out_keep != NULL)
		memcpy(out_keep, out, (size_t)(n * qw) * sizeof(float));
	free(q);
	free(out);
	free(ref);
	tkv_fini(&c);
	return e;
}

Test(attention, matches_naive_softmax_attention)
{
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 2, k))
			continue;
		double worst = 0;
		for (int ki = 0; ki < N_KV_TYPES; ki++)
			for (int vi = 0; vi < N_KV_TYPES; vi++)
				for (int gqa = 1; gqa <= 4; gqa *= 2)
					for (int win = 0; win <= 1; win++) {
						struct attn_case ac = {
							kv_types[ki], kv_types[vi], 2 * gqa, 2,
							64,           win ? 6 : 0,  NULL};
						double e = run_attention_case(&b, &ac, 13, NULL,
									      100 + ki * 9 + vi);
						cr_expect_leq(e, 1e-11,
							      "%s k %s v %s gqa %d window %d: "
							      "nmse %g",
							      lm_backend_cpu_kernels(&b),
							      lm_dtype_name(ac.kt),
							      lm_dtype_name(ac.vt), gqa, ac.window,
							      e);
						worst = fmax(worst, e);
					}
		cr_log_info("attention %s: worst nmse %g", lm_backend_cpu_kernels(&b), worst);
		lm_backend_fini(&b);
	}
}

/* gpt-oss's sinks: a per-head logit in each softmax's max and denominator. Sinks well above
 * the scores (3, 6: most of the weight goes to the sink) and below them, in every kernel set,
 * on global and sliding layers; the output with sinks differs from the one without. */
Test(attention, sinks_join_each_heads_softmax)
{
	static const float sinks[8] = {3.0f, -2.0f, 0.5f, 6.0f, -30.0f, 1.0f, 0.0f, 2.5f};
	static float with[5 * 8 * 64], without[5 * 8 * 64];
	for (int k = 0; k < TEST_N_KSETS; k++) {
		struct lm_backend b;
		if (!kset_init(&b, 2, k))
			continue;
		for (int ti = 0; ti < 2; ti++)
			for (int win = 0; win <= 1; win++) {
				const enum lm_dtype t = ti == 0 ? LM_F32 : LM_Q8_0;
				struct attn_case ac = {t, t, 8, 2, 64, win ? 6 : 0, sinks};
				double e = run_attention_case(&b, &ac, 13, with, 300 + ti);
				cr_expect_leq(e, 1e-11, "%s %s window %d: nmse %g with sinks",
					      lm_backend_cpu_kernels(&b), lm_dtype_name(t),
					      ac.window, e);
				ac.sinks = NULL;
				run_attention_case(&b, &ac, 13, without, 300 + ti);
				/* Head 3's sink of 6 takes most of its weight: its output shrinks. */
				double n_with = 0, n_without = 0;
				for (int i = 0; i < 64; i++) {
					n_with += fabs(with[3 * 64 + i]);
					n_without += fabs(without[3 * 64 + i]);
				}
				cr_expect_lt(n_with, 0.5 * n_without, "%s: head 3 %g vs %g",
					     lm_backend_cpu_kernels(&b), n_with, n_without);
			}
		lm_backend_fini(&b);
	}
}

Test(attention, fast_matches_scalar_and_threads_agree)
{
	struct lm_backend fast1, fast2, ref;
	be_init(&ref, 1, 1);
	static float o1[5 * 8 * 128], o2[5 * 8 * 128], o3[5 * 8 * 128];
	for (int k = 1; k < TEST_N_KSETS; k++) {
		if (!kset_init(&fast1, 1, k))
			continue;
		cr_assert(kset_init(&fast2, 2, k));
		for (int ki = 0; ki < N_KV_TYPES; ki++)
			for (int vi = 0; vi < N_KV_TYPES; vi++) {
				struct attn_case ac = {kv_types[ki], kv_types[vi],     8,   2,
						       128,          ki == vi ? 9 : 0, NULL};
				const size_t len = (size_t)5 * 8 * 128;
				run_attention_case(&fast1, &ac, 40, o1, 7);
				run_attention_case(&fast2, &ac, 40, o2, 7);
				run_attention_case(&ref, &ac, 40, o3, 7);
				cr_expect_eq(memcmp(o1, o2, len * sizeof(float)), 0,
					     "k %s v %s: 1 and 2 threads differ",
					     lm_dtype_name(ac.kt), lm_dtype_name(ac.vt));
				const double e = test_nmse(o1, o3, len);
				cr_log_info("attention %s k %s v %s vs generic: nmse %.3g",
					    test_ksets[k], lm_dtype_name(ac.kt),
					    lm_dtype_name(ac.vt), e);
				cr_expect_leq(e, 1e-11, "%s k %s v %s: fast vs scalar nmse %g",
					      test_ksets[k], lm_dtype_name(ac.kt),
					      lm_dtype_name(ac.vt), e);
			}
		lm_backend_fini(&fast1);
		lm_backend_fini(&fast2);
	}
	lm_backend_fini(&ref);
}

/* A batch whose tokens would need rows the same batch already overwrote in a sliding layer's
 * ring, positions past a global layer's rows, and bad slots are refused. */
Test(attention, refuses_what_the_cache_cannot_hold)
{
	struct lm_backend b;
	be_init(&b, 1, 0);
	struct tkv c;
	tkv_init(&c, &b, LM_F16, LM_F16, 1, 32, 9, 6, 2, 64);
	float q[5 * 32] = {0}, out[5 * 32];
	struct lm_tok_loc loc[5];
	for (int t = 0; t < 5; t++)
		loc[t] = (struct lm_tok_loc){0, 20 + t};
	/* 4 tokens: the first reads 15..20, the last stored is 23: 23 - 15 = 8 < 9 rows. */
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 4, 1, 1.0f), 0);
	/* 5 tokens: 24 - 15 = 9 rows: position 15's row was overwritten by 24. */
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 5, 1, 1.0f), LM_ERANGE);
	loc[0] = (struct lm_tok_loc){2, 0};
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 1, 1.0f), LM_ERANGE);
	loc[0] = (struct lm_tok_loc){0, -1};
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 1, 1.0f), LM_ERANGE);
	tkv_fini(&c);

	tkv_init(&c, &b, LM_F32, LM_F32, 1, 32, 16, 0, 1, 64);
	loc[0] = (struct lm_tok_loc){0, 15};
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 1, 1.0f), 0);
	loc[0] = (struct lm_tok_loc){0, 16};
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 1, 1.0f), LM_ERANGE);
	tkv_fini(&c);

	/* A block cache needs whole blocks per head (two heads of 16 make a row of 32, which is
	 * not enough); fp8 and the float types take any head_dim. */
	const enum lm_dtype blocky[] = {LM_Q8_0, LM_Q4_0, LM_Q5_1};
	for (int i = 0; i < 3; i++) {
		tkv_init(&c, &b, blocky[i], LM_F16, 2, 16, 16, 0, 1, 64);
		loc[0] = (struct lm_tok_loc){0, 0};
		cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 2, 1.0f),
			     LM_EUNSUPPORTED, "K %s", lm_dtype_name(blocky[i]));
		cr_expect_eq(b.iface->kv_store(b.ctx, &c.kv, q, q, loc, 1), LM_EUNSUPPORTED);
		tkv_fini(&c);
		tkv_init(&c, &b, LM_F16, blocky[i], 2, 16, 16, 0, 1, 64);
		cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 2, 1.0f),
			     LM_EUNSUPPORTED, "V %s", lm_dtype_name(blocky[i]));
		tkv_fini(&c);
	}
	tkv_init(&c, &b, LM_FP8_E4M3, LM_BF16, 2, 8, 16, 0, 1, 64);
	cr_expect_eq(b.iface->kv_store(b.ctx, &c.kv, q, q, loc, 1), 0);
	cr_expect_eq(b.iface->attention(b.ctx, out, q, &c.kv, loc, 1, 4, 1.0f), 0);
	tkv_fini(&c);
	lm_backend_fini(&b);
}

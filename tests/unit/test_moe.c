/* test_moe.c — the mixture-of-experts FFN (engine/moe.c) against a scalar reference written
 * here, its batch invariance, and what it reads: only the experts a batch picked, each once. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/quant.h"
#include "engine/moe.h"
#include "kernels_testutil.h"

#define EMBD  256 /* a q4_K row is 256 elements */
#define FF    256
#define NEXP  8
#define NUSED 3
#define BATCH 9

/* A layer's weights in one type: the router (f32) and the experts' three 3-D tensors, each
 * NEXP contiguous blocks as GGUF stores them, bound expert by expert into the blocks. */
struct fixture {
	struct lm_backend be;
	enum lm_dtype type;
	float router_f[NEXP * EMBD];
	float *gate_f, *up_f, *down_f;   /* the values before encoding, [NEXP][rows][cols] */
	uint8_t *gate_q, *up_q, *down_q; /* the encoded blocks, bound (a kernel set may turn
					  * them into panels in place) */
	uint8_t *gate_r, *up_r, *down_r; /* a copy as encoded, for the reference */
	size_t rb_gu, rb_d;              /* their row bytes */
	struct lm_weight router, gate[NEXP], up[NEXP], down[NEXP];
	/* gpt-oss's form (oss): biases on the router and the experts, the softmax over the
	 * picked logits, the clamped SwiGLU. */
	bool oss;
	float router_bf[NEXP], gate_bf[NEXP * FF], up_bf[NEXP * FF], down_bf[NEXP * EMBD];
	struct lm_weight router_b, gate_b, up_b, down_b;
	struct lm_experts exps;
	struct lm_moe_layer layer;
	struct lm_moe_scratch s;
};

static uint8_t *encode(enum lm_dtype t, const float *src, int64_t rows, int64_t cols,
		       size_t *row_bytes)
{
	uint64_t rb;
	cr_assert_eq(lm_dtype_row_bytes((uint32_t)t, (uint64_t)cols, &rb), 0);
	uint8_t *q = malloc((size_t)rb * (size_t)rows);
	cr_assert_not_null(q);
	for (int64_t r = 0; r < rows; r++)
		cr_assert_eq(lm_quantize_row(t, src + r * cols, q + (size_t)r * rb, cols), 0);
	*row_bytes = (size_t)rb;
	return q;
}

static void bind_experts(struct fixture *f, struct lm_weight *w, uint8_t *blocks, int64_t ne0,
			 int64_t ne1, size_t row_bytes)
{
	for (int e = 0; e < NEXP; e++) {
		w[e] = (struct lm_weight){
			.type = f->type, .ne0 = ne0, .ne1 = ne1, .row_bytes = row_bytes};
		cr_assert_eq(lm_backend_weight_init(&f->be, &w[e],
						    blocks + (size_t)e * (size_t)ne1 * row_bytes),
			     0);
	}
}

static struct lm_weight f32_rows(float *data, int64_t ne0, int64_t ne1)
{
	return (struct lm_weight){.type = LM_F32,
				  .ne0 = ne0,
				  .ne1 = ne1,
				  .row_bytes = (size_t)ne0 * sizeof(float),
				  .data = data};
}

static void fixture_init_as(struct fixture *f, enum lm_dtype type, const char *kset, uint64_t seed,
			    bool oss)
{
	memset(f, 0, sizeof *f);
	f->type = type;
	f->oss = oss;
	cr_assert_eq(test_backend(&f->be, 2, kset), 0);
	struct test_rng r = {seed};
	/* Router logits of std ~1.5: distinct picks, far from ties. */
	test_fill_gauss(&r, f->router_f, NEXP * EMBD, 1.5f / sqrtf(EMBD));
	size_t n = (size_t)NEXP * FF * EMBD;
	f->gate_f = malloc(n * sizeof(float));
	f->up_f = malloc(n * sizeof(float));
	f->down_f = malloc(n * sizeof(float));
	test_fill_gauss(&r, f->gate_f, n, 1.0f / sqrtf(EMBD));
	test_fill_gauss(&r, f->up_f, n, 1.0f / sqrtf(EMBD));
	test_fill_gauss(&r, f->down_f, n, 1.0f / sqrtf(FF));
	size_t rb_gu, rb_d;
	f->gate_q = encode(type, f->gate_f, NEXP * FF, EMBD, &rb_gu);
	f->up_q = encode(type, f->up_f, NEXP * FF, EMBD, &rb_gu);
	f->down_q = encode(type, f->down_f, NEXP * EMBD, FF, &rb_d);
	f->gate_r = encode(type, f->gate_f, NEXP * FF, EMBD, &f->rb_gu);
	f->up_r = encode(type, f->up_f, NEXP * FF, EMBD, &f->rb_gu);
	f->down_r = encode(type, f->down_f, NEXP * EMBD, FF, &f->rb_d);
	f->router = (struct lm_weight){.type = LM_F32,
				       .ne0 = EMBD,
				       .ne1 = NEXP,
				       .row_bytes = EMBD * sizeof(float),
				       .data = f->router_f};
	bind_experts(f, f->gate, f->gate_q, EMBD, FF, rb_gu);
	bind_experts(f, f->up, f->up_q, EMBD, FF, rb_gu);
	bind_experts(f, f->down, f->down_q, FF, EMBD, rb_d);
	f->exps = (struct lm_experts){.n = NEXP, .gate = f->gate, .up = f->up, .down = f->down};
	f->layer =
		(struct lm_moe_layer){.router = &f->router,
				      .exps = &f->exps,
				      .n_used = NUSED,
				      .p = {.gating = LM_MOE_SOFTMAX, .norm = true, .scale = 1.0f}};
	if (oss) {
		/* Gate biases of std 4: some gates pass the clamp at 7, some ups too. */
		test_fill_gauss(&r, f->router_bf, NEXP, 1.0f);
		test_fill_gauss(&r, f->gate_bf, NEXP * FF, 4.0f);
		test_fill_gauss(&r, f->up_bf, NEXP * FF, 4.0f);
		test_fill_gauss(&r, f->down_bf, NEXP * EMBD, 0.5f);
		f->router_b = f32_rows(f->router_bf, NEXP, 1);
		f->gate_b = f32_rows(f->gate_bf, FF, NEXP);
		f->up_b = f32_rows(f->up_bf, FF, NEXP);
		f->down_b = f32_rows(f->down_bf, EMBD, NEXP);
		f->layer.router_b = &f->router_b;
		f->layer.gate_b = &f->gate_b;
		f->layer.up_b = &f->up_b;
		f->layer.down_b = &f->down_b;
		f->layer.p = (struct lm_moe_params){.gating = LM_MOE_SOFTMAX_WEIGHT,
						    .norm = false,
						    .scale = 1.0f,
						    .swiglu_oai = true};
	}
	lm_diag d;
	cr_assert_eq(lm_moe_scratch_init(&f->s, &f->be, BATCH, EMBD, NEXP, NUSED, FF, &d), 0, "%s",
		     d.msg);
}

static void fixture_init(struct fixture *f, enum lm_dtype type, const char *kset, uint64_t seed)
{
	fixture_init_as(f, type, kset, seed, false);
}

static void fixture_fini(struct fixture *f)
{
	lm_moe_scratch_fini(&f->s, &f->be);
	lm_backend_fini(&f->be);
	free(f->gate_f), free(f->up_f), free(f->down_f);
	free(f->gate_q), free(f->up_q), free(f->down_q);
	free(f->gate_r), free(f->up_r), free(f->down_r);
}

static void run(struct fixture *f, float *y, const float *x, int n)
{
	lm_diag d;
	cr_assert_eq(lm_moe_run(&f->be, &f->s, &f->layer, y, x, n, &d), 0, "%s", d.msg);
}

/* gpt-oss's activation from its definition: the gate clamped above at 7, the up to [-7, 7],
 * gate x sigmoid(1.702 gate) x (up + 1). */
static double oss_act(double a, double b)
{
	a = fmin(a, 7.0);
	b = fmax(-7.0, fmin(b, 7.0));
	return a / (1 + exp(-1.702 * a)) * (b + 1);
}

/* An FFN's activation: silu(gate) * up, gelu(gate) * up, or gpt-oss's oss_act. */
enum ref_act { REF_SILU, REF_GELU, REF_OSS };

static double ref_act_of(enum ref_act act, double a, double c)
{
	if (act == REF_OSS)
		return oss_act(a, c);
	if (act == REF_GELU)
		return 0.5 * a * (1 + tanh(sqrt(2 / M_PI) * (a + 0.044715 * a * a * a))) * c;
	return a / (1 + exp(-a)) * c;
}

/* One expert's biases (gpt-oss's): its rows of the gate, up and down biases. */
struct ref_bias {
	const float *g, *u, *d;
};

/* One expert (or shared FFN) as stored, in double: out = down(act(gate x + bg, up x + bu)) + bd,
 * the biases where b is given. */
static void ffn_ref(enum lm_dtype type, const uint8_t *g, const uint8_t *u, const uint8_t *dn,
		    size_t rb_gu, size_t rb_d, const float *x, enum ref_act act,
		    const struct ref_bias *b, double *out)
{
	float row[EMBD > FF ? EMBD : FF];
	double h[FF];
	for (int j = 0; j < FF; j++) {
		double a = b != NULL ? b->g[j] : 0, c = b != NULL ? b->u[j] : 0;
		lm_dequantize_row(type, g + j * rb_gu, row, EMBD);
		for (int i = 0; i < EMBD; i++)
			a += (double)row[i] * x[i];
		lm_dequantize_row(type, u + j * rb_gu, row, EMBD);
		for (int i = 0; i < EMBD; i++)
			c += (double)row[i] * x[i];
		h[j] = ref_act_of(act, a, c);
	}
	for (int o = 0; o < EMBD; o++) {
		double a = b != NULL ? b->d[o] : 0;
		lm_dequantize_row(type, dn + o * rb_d, row, FF);
		for (int j = 0; j < FF; j++)
			a += (double)row[j] * h[j];
		out[o] = a;
	}
}

/* The reference, in double over the weights as stored (decoded back to floats): softmax over
 * all experts of the router over xr, the top NUSED, weights normalised to sum 1, each expert
 * a SiLU- (or GELU-) gated FFN of x times its output scale where the layer has one. In the oss
 * form: the biased logits' top NUSED, weights the softmax of those logits, each expert
 * (down(oss_act(gate x + bg, up x + bu)) + bd). */
static void reference_routed(const struct fixture *f, const float *x, const float *xr, double *y,
			     int32_t *pick)
{
	double logit[NEXP], p[NEXP], sum = 0, max = -INFINITY;
	for (int e = 0; e < NEXP; e++) {
		logit[e] = f->oss ? f->router_bf[e] : 0;
		for (int i = 0; i < EMBD; i++)
			logit[e] += (double)f->router_f[e * EMBD + i] * xr[i];
		max = logit[e] > max ? logit[e] : max;
	}
	for (int e = 0; e < NEXP; e++)
		sum += (p[e] = f->oss ? logit[e] : exp(logit[e] - max));
	bool used[NEXP] = {false};
	double w[NUSED], wsum = 0;
	for (int r = 0; r < NUSED; r++) {
		int best = -1;
		for (int e = 0; e < NEXP; e++)
			if (!used[e] && (best < 0 || p[e] > p[best]))
				best = e;
		used[best] = true;
		pick[r] = best;
		wsum += (w[r] = f->oss ? exp(logit[best] - max) : p[best] / sum);
	}
	memset(y, 0, EMBD * sizeof *y);
	for (int r = 0; r < NUSED; r++) {
		const size_t e = (size_t)pick[r];
		double out[EMBD];
		const struct ref_bias b = {f->gate_bf + e * FF, f->up_bf + e * FF,
					   f->down_bf + e * EMBD};
		const enum ref_act act = f->oss ? REF_OSS : f->layer.gelu ? REF_GELU : REF_SILU;
		ffn_ref(f->type, f->gate_r + e * FF * f->rb_gu, f->up_r + e * FF * f->rb_gu,
			f->down_r + e * EMBD * f->rb_d, f->rb_gu, f->rb_d, x, act,
			f->oss ? &b : NULL, out);
		const double s = f->exps.down_scale != NULL ? f->exps.down_scale[e] : 1.0;
		for (int o = 0; o < EMBD; o++)
			y[o] += w[r] / wsum * s * out[o];
	}
}

static void reference(const struct fixture *f, const float *x, double *y, int32_t *pick)
{
	reference_routed(f, x, x, y, pick);
}

static void fill_x(float *x, int n, uint64_t seed)
{
	struct test_rng r = {seed};
	test_fill_gauss(&r, x, (size_t)n * EMBD, 1.0f);
}

static const enum lm_dtype types[] = {LM_F32, LM_F16, LM_Q8_0, LM_Q4_K, LM_MXFP4};
/* Activations are rounded to the weight type's vec_dot type (f16, Q8_0, Q8_K) before the
 * dot products: the error that leaves, as a normalised mean squared error. */
static const double tolerance[] = {1e-12, 1e-6, 1e-3, 2e-3, 1e-3};

/* Both forms, qwen3moe's and gpt-oss's, in every weight type and kernel set. */
static void check_reference(bool oss)
{
	for (int ks = 0; ks < TEST_N_KSETS; ks++) {
		struct lm_backend probe;
		if (test_backend(&probe, 1, test_ksets[ks]) != 0)
			continue;
		lm_backend_fini(&probe);
		for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
			struct fixture f;
			fixture_init_as(&f, types[ti], test_ksets[ks], 7 + ti, oss);
			float x[BATCH * EMBD], y[BATCH * EMBD];
			fill_x(x, BATCH, 99);
			run(&f, y, x, BATCH);
			for (int t = 0; t < BATCH; t++) {
				double ref[EMBD];
				int32_t pick[NUSED];
				reference(&f, x + t * EMBD, ref, pick);
				for (int r = 0; r < NUSED; r++)
					cr_assert_eq(
						f.s.pick[t * NUSED + r], pick[r],
						"%s %s token %d rank %d: expert %d, reference %d",
						test_ksets[ks], lm_dtype_name(types[ti]), t, r,
						f.s.pick[t * NUSED + r], pick[r]);
				double e = test_nmse_d(y + t * EMBD, ref, EMBD);
				cr_assert(e < tolerance[ti], "%s %s%s token %d: nmse %g over %g",
					  test_ksets[ks], lm_dtype_name(types[ti]),
					  oss ? " (gpt-oss)" : "", t, e, tolerance[ti]);
			}
			fixture_fini(&f);
		}
	}
}

Test(moe, matches_a_scalar_reference, .timeout = 60)
{
	check_reference(false);
}

/* gpt-oss: biased router, softmax over the picked logits, biased experts, clamped SwiGLU (the
 * gate biases of std 4 push some gates and ups past the clamp). */
Test(moe, gptoss_form_matches_a_scalar_reference, .timeout = 60)
{
	check_reference(true);
}

/* A token's output is the same bits alone, in a batch, and in the batch reversed, whatever
 * groups the other tokens make. */
Test(moe, a_token_is_the_same_bits_alone_and_in_any_batch, .timeout = 60)
{
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		struct fixture f;
		fixture_init(&f, types[ti], "best", 11);
		float x[BATCH * EMBD], y[BATCH * EMBD], xr[BATCH * EMBD], yr[BATCH * EMBD];
		fill_x(x, BATCH, 5);
		memcpy(x + 4 * EMBD, x + 1 * EMBD, EMBD * sizeof(float)); /* a repeated token */
		for (int t = 0; t < BATCH; t++)
			memcpy(xr + t * EMBD, x + (BATCH - 1 - t) * EMBD, EMBD * sizeof(float));
		run(&f, y, x, BATCH);
		run(&f, yr, xr, BATCH);
		for (int t = 0; t < BATCH; t++) {
			float one[EMBD];
			run(&f, one, x + t * EMBD, 1);
			cr_assert(memcmp(one, y + t * EMBD, sizeof one) == 0,
				  "%s: token %d differs alone and in the batch",
				  lm_dtype_name(types[ti]), t);
			cr_assert(memcmp(one, yr + (BATCH - 1 - t) * EMBD, sizeof one) == 0,
				  "%s: token %d differs in the reversed batch",
				  lm_dtype_name(types[ti]), t);
		}
		/* In place (y = x), as the engine runs it. */
		float inplace[BATCH * EMBD];
		memcpy(inplace, x, sizeof inplace);
		run(&f, inplace, inplace, BATCH);
		cr_assert(memcmp(inplace, y, sizeof inplace) == 0);
		fixture_fini(&f);
	}
}

/* What the matmuls read: a backend that counts the calls per weight. */
static struct lm_backend_i counting_iface;
static const struct lm_backend_i *real_iface;
static const void *seen[64];
static int seen_calls[64], seen_rows[64], n_seen;

static int counting_matmul(void *ctx, float *y, const struct lm_weight *w, const float *x, int n)
{
	int i = 0;
	while (i < n_seen && seen[i] != w->data)
		i++;
	if (i == n_seen)
		seen[n_seen++] = w->data;
	seen_calls[i]++;
	seen_rows[i] += n;
	return real_iface->matmul(ctx, y, w, x, n);
}

static int calls_of(const void *data, int *rows)
{
	for (int i = 0; i < n_seen; i++)
		if (seen[i] == data) {
			*rows = seen_rows[i];
			return seen_calls[i];
		}
	*rows = 0;
	return 0;
}

Test(moe, a_batch_reads_each_picked_expert_once_and_no_other)
{
	struct fixture f;
	fixture_init(&f, LM_Q8_0, "best", 3);
	real_iface = f.be.iface;
	counting_iface = *f.be.iface;
	counting_iface.matmul = counting_matmul;
	f.be.iface = &counting_iface;
	float x[BATCH * EMBD], y[BATCH * EMBD];
	fill_x(x, BATCH, 17);
	for (int n = 1; n <= BATCH; n += BATCH - 1) {
		n_seen = 0;
		memset(seen_calls, 0, sizeof seen_calls);
		memset(seen_rows, 0, sizeof seen_rows);
		run(&f, y, x, n);
		int rows, tokens[NEXP] = {0};
		for (int t = 0; t < n; t++)
			for (int r = 0; r < NUSED; r++)
				tokens[f.s.pick[t * NUSED + r]]++;
		cr_assert_eq(calls_of(f.router.data, &rows), 1);
		cr_assert_eq(rows, n);
		int used = 0;
		for (int e = 0; e < NEXP; e++) {
			used += tokens[e] > 0;
			const void *w3[] = {f.gate[e].data, f.up[e].data, f.down[e].data};
			for (int j = 0; j < 3; j++) {
				cr_assert_eq(calls_of(w3[j], &rows), tokens[e] > 0 ? 1 : 0,
					     "batch of %d: expert %d's matrix %d", n, e, j);
				cr_assert_eq(rows, tokens[e]);
			}
		}
		if (n == 1)
			cr_assert_eq(used, NUSED, "one token reads exactly its %d experts", NUSED);
		cr_assert_eq(n_seen, 1 + 3 * used);
	}
	f.be.iface = real_iface;
	fixture_fini(&f);
}

Test(moe, routing_picks_the_best_and_weighs_as_the_file_says)
{
	const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
	int32_t pick[3];
	float w[3];
	struct lm_moe_params p = {.gating = LM_MOE_SOFTMAX, .norm = true, .scale = 1.0f};
	lm_moe_route(logits, 6, 3, &p, pick, w);
	cr_assert(pick[0] == 1 && pick[1] == 3 && pick[2] == 4, "ties go to the lower index");
	cr_assert_float_eq(w[0] + w[1] + w[2], 1.0f, 1e-6);
	cr_assert_eq(w[0], w[1]);
	/* Unnormalised softmax: the probabilities themselves; then scaled. */
	p.norm = false;
	p.scale = 2.5f;
	lm_moe_route(logits, 6, 3, &p, pick, w);
	double sum = 0;
	for (int i = 0; i < 6; i++)
		sum += exp(logits[i] - 2.0);
	cr_assert_float_eq(w[2], 2.5 * exp(1.0 - 2.0) / sum, 1e-6);
	/* Sigmoid gating: each logit on its own. */
	p = (struct lm_moe_params){.gating = LM_MOE_SIGMOID, .norm = false, .scale = 1.0f};
	lm_moe_route(logits, 6, 2, &p, pick, w);
	cr_assert_float_eq(w[0], 1.0 / (1.0 + exp(-2.0)), 1e-6);
	/* gpt-oss: the top 3 logits (2, 2, 1), then the softmax over those three only. */
	p = (struct lm_moe_params){.gating = LM_MOE_SOFTMAX_WEIGHT, .norm = false, .scale = 1.0f};
	lm_moe_route(logits, 6, 3, &p, pick, w);
	cr_assert(pick[0] == 1 && pick[1] == 3 && pick[2] == 4);
	const double z = 2 * exp(0.0) + exp(-1.0);
	cr_assert_float_eq(w[0], 1.0 / z, 1e-6);
	cr_assert_float_eq(w[2], exp(-1.0) / z, 1e-6);
}

/* ---- shared experts ---- */

/* A shared FFN of the fixture's type beside its experts: gate, up, down as bound (a kernel
 * set may repack them in place) and as encoded (for the reference), and an f32 gate vector. */
struct shared_fixture {
	uint8_t *gate_q, *up_q, *down_q, *gate_r, *up_r, *down_r;
	float gate_inp_f[EMBD];
	float down_scale[NEXP];
	struct lm_weight gate, up, down, gate_inp;
	struct lm_moe_shared sh;
};

static void shared_init(struct shared_fixture *sf, struct fixture *f, bool gelu, bool gated,
			uint64_t seed)
{
	memset(sf, 0, sizeof *sf);
	struct test_rng r = {seed};
	size_t n = (size_t)FF * EMBD, rb_gu, rb_d;
	float *g = malloc(n * sizeof(float)), *u = malloc(n * sizeof(float));
	float *dn = malloc(n * sizeof(float));
	test_fill_gauss(&r, g, n, 1.0f / sqrtf(EMBD));
	test_fill_gauss(&r, u, n, 1.0f / sqrtf(EMBD));
	test_fill_gauss(&r, dn, n, 1.0f / sqrtf(FF));
	test_fill_gauss(&r, sf->gate_inp_f, EMBD, 1.0f / sqrtf(EMBD));
	for (int e = 0; e < NEXP; e++)
		sf->down_scale[e] = 0.5f + 0.25f * (float)e;
	sf->gate_q = encode(f->type, g, FF, EMBD, &rb_gu);
	sf->up_q = encode(f->type, u, FF, EMBD, &rb_gu);
	sf->down_q = encode(f->type, dn, EMBD, FF, &rb_d);
	sf->gate_r = encode(f->type, g, FF, EMBD, &rb_gu);
	sf->up_r = encode(f->type, u, FF, EMBD, &rb_gu);
	sf->down_r = encode(f->type, dn, EMBD, FF, &rb_d);
	free(g), free(u), free(dn);
	struct lm_weight *w[] = {&sf->gate, &sf->up, &sf->down};
	uint8_t *q[] = {sf->gate_q, sf->up_q, sf->down_q};
	for (int i = 0; i < 3; i++) {
		*w[i] = (struct lm_weight){.type = f->type,
					   .ne0 = i < 2 ? EMBD : FF,
					   .ne1 = i < 2 ? FF : EMBD,
					   .row_bytes = i < 2 ? rb_gu : rb_d};
		cr_assert_eq(lm_backend_weight_init(&f->be, w[i], q[i]), 0);
	}
	sf->gate_inp = (struct lm_weight){.type = LM_F32,
					  .ne0 = EMBD,
					  .ne1 = 1,
					  .row_bytes = EMBD * sizeof(float),
					  .data = sf->gate_inp_f};
	sf->sh = (struct lm_moe_shared){.gate = &sf->gate,
					.up = &sf->up,
					.down = &sf->down,
					.gate_inp = gated ? &sf->gate_inp : NULL,
					.gelu = gelu};
}

static void shared_fini(struct shared_fixture *sf)
{
	free(sf->gate_q), free(sf->up_q), free(sf->down_q);
	free(sf->gate_r), free(sf->up_r), free(sf->down_r);
}

/* The shared FFN of x in double: its FFN, times sigmoid(x . gate_inp) where gated. */
static void shared_reference(const struct fixture *f, const struct shared_fixture *sf,
			     const float *x, double *y)
{
	size_t rb_gu = f->rb_gu, rb_d = f->rb_d; /* the same shapes as an expert's */
	ffn_ref(f->type, sf->gate_r, sf->up_r, sf->down_r, rb_gu, rb_d, x,
		sf->sh.gelu ? REF_GELU : REF_SILU, NULL, y);
	if (sf->sh.gate_inp == NULL)
		return;
	double g = 0;
	for (int i = 0; i < EMBD; i++)
		g += (double)sf->gate_inp_f[i] * x[i];
	g = 1.0 / (1.0 + exp(-g));
	for (int o = 0; o < EMBD; o++)
		y[o] *= g;
}

/* GELU goes through an f16 table, as in GGUF's reference CPU op: its rounding is the floor. */
static double shared_tolerance(size_t ti, bool gelu)
{
	return gelu && tolerance[ti] < 1e-5 ? 1e-5 : tolerance[ti];
}

Test(moe, a_shared_ffn_matches_a_scalar_reference, .timeout = 60)
{
	const enum lm_dtype st[] = {LM_F32, LM_Q8_0};
	const size_t sti[] = {0, 2};
	for (size_t i = 0; i < 2; i++)
		for (int gelu = 0; gelu < 2; gelu++) {
			struct fixture f;
			struct shared_fixture sf;
			fixture_init(&f, st[i], "best", 21 + i);
			/* qwen35moe's kind (SiLU, sigmoid-gated) and gemma4's (GELU, ungated) */
			shared_init(&sf, &f, gelu, !gelu, 31 + i);
			float x[BATCH * EMBD], y[BATCH * EMBD];
			fill_x(x, BATCH, 41);
			lm_diag d;
			cr_assert_eq(lm_moe_shared_run(&f.be, &f.s, &sf.sh, y, x, BATCH, &d), 0,
				     "%s", d.msg);
			for (int t = 0; t < BATCH; t++) {
				double ref[EMBD];
				shared_reference(&f, &sf, x + t * EMBD, ref);
				double e = test_nmse_d(y + t * EMBD, ref, EMBD);
				cr_assert(e < shared_tolerance(sti[i], gelu),
					  "%s gelu %d token %d: nmse %g", lm_dtype_name(st[i]),
					  gelu, t, e);
			}
			/* In place, y = x. */
			float in[BATCH * EMBD];
			memcpy(in, x, sizeof in);
			cr_assert_eq(lm_moe_shared_run(&f.be, &f.s, &sf.sh, in, in, BATCH, &d), 0);
			cr_assert(memcmp(in, y, sizeof in) == 0);
			shared_fini(&sf);
			fixture_fini(&f);
		}
}

/* A layer with everything the files may add: a sigmoid-gated shared expert summed with the
 * routed experts, GELU experts, per-expert output scales, a router reading its own rows. */
Test(moe, shared_experts_scales_and_a_separate_router_input_match_the_reference, .timeout = 60)
{
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		struct fixture f;
		struct shared_fixture sf;
		fixture_init(&f, types[ti], "best", 51 + ti);
		shared_init(&sf, &f, false, true, 61 + ti);
		f.exps.down_scale = sf.down_scale;
		f.layer.gelu = true;
		f.layer.shared = &sf.sh;
		float x[BATCH * EMBD], xr[BATCH * EMBD], y[BATCH * EMBD];
		fill_x(x, BATCH, 71);
		fill_x(xr, BATCH, 72);
		lm_diag d;
		cr_assert_eq(lm_moe_run_routed(&f.be, &f.s, &f.layer, y, x, xr, BATCH, &d), 0, "%s",
			     d.msg);
		for (int t = 0; t < BATCH; t++) {
			double ref[EMBD], sh[EMBD];
			int32_t pick[NUSED];
			reference_routed(&f, x + t * EMBD, xr + t * EMBD, ref, pick);
			shared_reference(&f, &sf, x + t * EMBD, sh);
			for (int o = 0; o < EMBD; o++)
				ref[o] += sh[o];
			for (int r = 0; r < NUSED; r++)
				cr_assert_eq(f.s.pick[t * NUSED + r], pick[r],
					     "%s token %d rank %d: routed on the wrong rows",
					     lm_dtype_name(types[ti]), t, r);
			double e = test_nmse_d(y + t * EMBD, ref, EMBD);
			cr_assert(e < shared_tolerance(ti, true), "%s token %d: nmse %g",
				  lm_dtype_name(types[ti]), t, e);
		}
		/* Batch invariance with all of it: each token alone, and the batch reversed. */
		float xv[BATCH * EMBD], xrv[BATCH * EMBD], yv[BATCH * EMBD];
		for (int t = 0; t < BATCH; t++) {
			memcpy(xv + t * EMBD, x + (BATCH - 1 - t) * EMBD, EMBD * sizeof(float));
			memcpy(xrv + t * EMBD, xr + (BATCH - 1 - t) * EMBD, EMBD * sizeof(float));
		}
		cr_assert_eq(lm_moe_run_routed(&f.be, &f.s, &f.layer, yv, xv, xrv, BATCH, &d), 0);
		for (int t = 0; t < BATCH; t++) {
			float one[EMBD];
			cr_assert_eq(lm_moe_run_routed(&f.be, &f.s, &f.layer, one, x + t * EMBD,
						       xr + t * EMBD, 1, &d),
				     0);
			cr_assert(memcmp(one, y + t * EMBD, sizeof one) == 0,
				  "%s: token %d differs alone and in the batch",
				  lm_dtype_name(types[ti]), t);
			cr_assert(memcmp(one, yv + (BATCH - 1 - t) * EMBD, sizeof one) == 0,
				  "%s: token %d differs in the reversed batch",
				  lm_dtype_name(types[ti]), t);
		}
		shared_fini(&sf);
		fixture_fini(&f);
	}
}

/* op_matrix.c — every op of the backend seam, over types and shapes, on one backend against the
 * CPU backend's scalar reference kernels (test-backend-ops style).
 *
 *   op_matrix --backend cuda [--device N]     the CUDA backend (on a GPU: tests/gpu/)
 *   op_matrix --backend cpu                   the CPU backend's fastest kernels (CI, every build)
 *
 * Each case runs the op on the backend under test (its memory, its uploads and downloads, its
 * weight_init) and on a scalar CPU backend with the same inputs, and compares the outputs by
 * normalised mean squared error, sum((a - b)^2) / sum(b^2), against the case's bound. The matrix:
 *   matmul      f32 f16 bf16 q8_0 q4_0 mxfp4 q4_K q6_K, odd shapes, batches of 1, 2, 7, 15,
 *               16, 17 and 64 (both sides of the CUDA tensor-core GEMM's threshold of 16), and
 *               every token of each batch bit for bit equal to the same token computed alone;
 *   get_rows    every weight type (exact);
 *   rmsnorm     weighted and not, in place, odd widths;
 *   rope        normal and NeoX, partial rotation, frequency factors, scaled positions, YaRN;
 *   kv_store    every K and V cache type: f32, f16, bf16, q8_0, q4_0, q5_1 and fp8, each as
 *               K and V and beside f16 (the cache bytes exact), then
 *   attention   global and sliding layers (a ring of window + batch - 1 rows, wrapped), GQA,
 *               several slots, batches of 1, 2, 7, 16 and 64, and with sink logits;
 *   silu_mul, swiglu_oai, gelu_mul, add, add_rows, mul_rows, scale, copy.
 * It prints one line per case and ends with "N passed, N failed"; exit 0 when all pass, 1 when
 * any fails, 77 (skipped) with the reason when the backend cannot start here (no GPU, or a build
 * without CUDA), so a machine without a GPU never reports the CUDA matrix as passed.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/format/quant.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels_testutil.h"

struct om {
	struct lm_backend ref, be; /* the scalar reference; the backend under test */
	const char *name;
	struct test_rng rng;
	int passed, failed;
	bool verbose;
};

/* ---------------------------------------------------------------------------- bookkeeping */

static void om_result(struct om *m, bool ok, const char *what, double err, double bound)
{
	if (ok)
		m->passed++;
	else
		m->failed++;
	if (!ok || m->verbose)
		printf("%s %s: nmse %.3g (bound %.1g)\n", ok ? "PASS" : "FAIL", what, err, bound);
}

static void om_fail(struct om *m, const char *what, int rc)
{
	m->failed++;
	printf("FAIL %s: %s\n", what, lm_backend_strerror(&m->be, rc));
}

/* n floats of the backend under test holding x (or zeros). NULL on failure. */
static float *om_put(struct om *m, const float *x, size_t n)
{
	float *p = m->be.iface->malloc(m->be.ctx, n * sizeof(float) + 64);
	if (p != NULL && x != NULL &&
	    m->be.iface->upload(m->be.ctx, p, x, n * sizeof(float)) != 0) {
		m->be.iface->mfree(m->be.ctx, p);
		return NULL;
	}
	return p;
}

static int om_get(struct om *m, float *host, const float *dev, size_t n)
{
	int rc = lm_backend_sync(&m->be);
	return rc != 0 ? rc : m->be.iface->download(m->be.ctx, host, dev, n * sizeof(float));
}

static void om_free(struct om *m, void *p)
{
	m->be.iface->mfree(m->be.ctx, p);
}

static float *om_gauss(struct om *m, size_t n, float scale)
{
	float *x = malloc(n * sizeof(float) + 64);
	if (x != NULL)
		test_fill_gauss(&m->rng, x, n, scale);
	return x;
}

/* ---------------------------------------------------------------------------- matmul */

static const enum lm_dtype om_types[] = {LM_F32,  LM_F16,   LM_BF16, LM_Q8_0,
					 LM_Q4_0, LM_MXFP4, LM_Q4_K, LM_Q6_K};
#define OM_N_TYPES (sizeof om_types / sizeof om_types[0])
static const int om_batches[] = {1, 2, 7, 16, 64};
#define OM_N_BATCHES 5
/* matmul's: the CUDA backend's quantized types take the tensor-core GEMM from 16 tokens. */
static const int om_mm_batches[] = {1, 2, 7, 15, 16, 17, 64};
#define OM_N_MM_BATCHES 7

/* Input widths per type: odd block counts, and a wide one (the decode GEMV's loop). */
static void om_widths(enum lm_dtype t, int64_t ne0[3])
{
	const int64_t blck = lm_dtype_info(t)->blck;
	if (blck == 1) {
		ne0[0] = 263, ne0[1] = 264, ne0[2] = 4096;
	} else if (blck == 32) {
		ne0[0] = 224, ne0[1] = 32 * 9, ne0[2] = 4096;
	} else {
		ne0[0] = 768, ne0[1] = 256, ne0[2] = 4096;
	}
}

/* A weight of ne1 rows quantized from gaussian values, in host memory. */
static void *om_weight(struct om *m, enum lm_dtype t, int64_t ne0, int64_t ne1, size_t *rb)
{
	uint64_t row = 0;
	lm_dtype_row_bytes(t, (uint64_t)ne0, &row);
	uint8_t *w = malloc(row * (uint64_t)ne1);
	float *f = om_gauss(m, (size_t)ne0, 0.05f);
	for (int64_t r = 0; w != NULL && f != NULL && r < ne1; r++) {
		test_fill_gauss(&m->rng, f, (size_t)ne0, 0.05f);
		lm_quantize_row(t, f, w + (size_t)r * row, ne0);
	}
	free(f);
	*rb = (size_t)row;
	return w;
}

/* wb bound to the backend on its own copy of the bytes: weight_init may rearrange them in place
 * (the CPU backend's panels), and the reference reads the GGUF blocks. NULL on failure. */
static void *om_bind(struct om *m, struct lm_weight *wb, const void *host, size_t bytes, int *rc)
{
	void *copy = malloc(bytes);
	if (copy == NULL) {
		*rc = LM_ENOMEM;
		return NULL;
	}
	memcpy(copy, host, bytes);
	if ((*rc = lm_backend_weight_init(&m->be, wb, copy)) != 0) {
		free(copy);
		return NULL;
	}
	return copy;
}

/* Each token of x computed alone: yalone[t][ne1]. */
static int om_matmul_alone(struct om *m, const struct lm_weight *wb, const float *dx, int64_t ne0,
			   int n, float *dy1, float *yalone)
{
	for (int t = 0; t < n; t++) {
		int rc = m->be.iface->matmul(m->be.ctx, dy1, wb, dx + (size_t)t * (size_t)ne0, 1);
		if (rc == 0)
			rc = om_get(m, yalone + (size_t)t * (size_t)wb->ne1, dy1, (size_t)wb->ne1);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* One weight, every batch: against the reference, and each token of the batch against the same
 * token computed alone (the backend's batch invariance, bit for bit). */
static void om_matmul_one(struct om *m, enum lm_dtype t, int64_t ne0, int64_t ne1)
{
	char what[128];
	size_t rb;
	void *host = om_weight(m, t, ne0, ne1, &rb);
	struct lm_weight wr = {.type = t, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb, .data = host};
	struct lm_weight wb = wr;
	int rc;
	void *bound = om_bind(m, &wb, host, rb * (size_t)ne1, &rc);
	if (bound == NULL) {
		snprintf(what, sizeof what, "matmul %s weight_init", lm_dtype_name(t));
		om_fail(m, what, rc);
		free(host);
		return;
	}
	const int nmax = om_mm_batches[OM_N_MM_BATCHES - 1];
	float *x = om_gauss(m, (size_t)(nmax * ne0), 1.0f);
	float *yr = malloc((size_t)(nmax * ne1) * sizeof(float));
	float *yb = malloc((size_t)(nmax * ne1) * sizeof(float));
	float *y1 = malloc((size_t)(nmax * ne1) * sizeof(float));
	float *dx = om_put(m, x, (size_t)(nmax * ne0)), *dy = om_put(m, NULL, (size_t)(nmax * ne1));
	float *dy1 = om_put(m, NULL, (size_t)ne1);
	snprintf(what, sizeof what, "matmul %s %lldx%lld: tokens alone", lm_dtype_name(t),
		 (long long)ne0, (long long)ne1);
	if ((rc = om_matmul_alone(m, &wb, dx, ne0, nmax, dy1, y1)) != 0)
		om_fail(m, what, rc);
	for (int bi = 0; rc == 0 && bi < OM_N_MM_BATCHES; bi++) {
		const int n = om_mm_batches[bi];
		snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d", lm_dtype_name(t),
			 (long long)ne0, (long long)ne1, n);
		if ((rc = m->ref.iface->matmul(m->ref.ctx, yr, &wr, x, n)) != 0 ||
		    (rc = m->be.iface->matmul(m->be.ctx, dy, &wb, dx, n)) != 0 ||
		    (rc = om_get(m, yb, dy, (size_t)(n * ne1))) != 0) {
			om_fail(m, what, rc);
			continue;
		}
		const double e = test_nmse(yb, yr, (size_t)(n * ne1));
		om_result(m, e <= 5e-6, what, e, 5e-6);
		snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d: every token as alone",
			 lm_dtype_name(t), (long long)ne0, (long long)ne1, n);
		const bool same = memcmp(y1, yb, (size_t)(n * ne1) * sizeof(float)) == 0;
		om_result(m, same, what, test_nmse(yb, y1, (size_t)(n * ne1)), 0);
	}
	om_free(m, dx);
	om_free(m, dy);
	om_free(m, dy1);
	lm_backend_weight_fini(&m->be, &wb);
	free(bound);
	free(x);
	free(yr);
	free(yb);
	free(y1);
	free(host);
}

static void om_matmul(struct om *m)
{
	for (size_t ti = 0; ti < OM_N_TYPES; ti++) {
		int64_t ne0[3];
		om_widths(om_types[ti], ne0);
		om_matmul_one(m, om_types[ti], ne0[0], 45);
		om_matmul_one(m, om_types[ti], ne0[1], 129);
		om_matmul_one(m, om_types[ti], ne0[2], 67);
	}
}

/* ---------------------------------------------------------------------------- get_rows */

static void om_get_rows(struct om *m)
{
	static const int32_t ids[] = {0, 44, 3, 3, 17, 1, 43};
	const int n = (int)(sizeof ids / sizeof ids[0]);
	for (size_t ti = 0; ti < OM_N_TYPES; ti++) {
		const enum lm_dtype t = om_types[ti];
		int64_t ne0[3];
		om_widths(t, ne0);
		char what[96];
		snprintf(what, sizeof what, "get_rows %s %lld", lm_dtype_name(t),
			 (long long)ne0[0]);
		size_t rb;
		void *host = om_weight(m, t, ne0[0], 45, &rb);
		struct lm_weight wr = {
			.type = t, .ne0 = ne0[0], .ne1 = 45, .row_bytes = rb, .data = host};
		struct lm_weight wb = wr;
		float *yr = malloc((size_t)(n * ne0[0]) * sizeof(float));
		float *yb = malloc((size_t)(n * ne0[0]) * sizeof(float));
		float *dy = om_put(m, NULL, (size_t)(n * ne0[0]));
		int rc;
		void *bound = om_bind(m, &wb, host, rb * 45, &rc);
		if (bound == NULL ||
		    (rc = m->ref.iface->get_rows(m->ref.ctx, yr, &wr, ids, n)) != 0 ||
		    (rc = m->be.iface->get_rows(m->be.ctx, dy, &wb, ids, n)) != 0 ||
		    (rc = om_get(m, yb, dy, (size_t)(n * ne0[0]))) != 0)
			om_fail(m, what, rc);
		else
			om_result(m, memcmp(yr, yb, (size_t)(n * ne0[0]) * sizeof(float)) == 0,
				  what, test_nmse(yb, yr, (size_t)(n * ne0[0])), 0);
		if (bound != NULL)
			lm_backend_weight_fini(&m->be, &wb);
		free(bound);
		om_free(m, dy);
		free(yr);
		free(yb);
		free(host);
	}
}

/* ---------------------------------------------------------------------------- rmsnorm, rope */

static void om_rmsnorm(struct om *m)
{
	static const int dims[] = {64, 263, 2560};
	for (int di = 0; di < 3; di++)
		for (int bi = 0; bi < OM_N_BATCHES; bi += 2)
			for (int weighted = 0; weighted < 2; weighted++) {
				const int dim = dims[di], n = om_batches[bi];
				const size_t len = (size_t)dim * (size_t)n;
				char what[96];
				snprintf(what, sizeof what, "rmsnorm %d n=%d%s, in place", dim, n,
					 weighted ? " weighted" : "");
				float *x = om_gauss(m, len, 2.0f),
				      *w = om_gauss(m, (size_t)dim, 1.0f);
				float *yr = malloc(len * sizeof(float)),
				      *yb = malloc(len * sizeof(float));
				float *dx = om_put(m, x, len), *dw = om_put(m, w, (size_t)dim);
				memcpy(yr, x, len * sizeof(float));
				int rc;
				if ((rc = m->ref.iface->rmsnorm(m->ref.ctx, yr, yr,
								weighted ? w : NULL, dim, n,
								1e-6f)) != 0 ||
				    (rc = m->be.iface->rmsnorm(m->be.ctx, dx, dx,
							       weighted ? dw : NULL, dim, n,
							       1e-6f)) != 0 ||
				    (rc = om_get(m, yb, dx, len)) != 0)
					om_fail(m, what, rc);
				else {
					const double e = test_nmse(yb, yr, len);
					om_result(m, e <= 1e-10, what, e, 1e-10);
				}
				om_free(m, dx);
				om_free(m, dw);
				free(x);
				free(w);
				free(yr);
				free(yb);
			}
}

static void om_rope_one(struct om *m, enum lm_rope_mode mode, int head_dim, int n_rot, bool factors,
			float freq_scale, bool yarn, int n)
{
	const int heads = 4;
	const size_t len = (size_t)n * (size_t)heads * (size_t)head_dim;
	char what[128];
	snprintf(what, sizeof what, "rope %s hd=%d n_rot=%d%s scale=%g%s n=%d",
		 mode == LM_ROPE_NEOX ? "neox" : "norm", head_dim, n_rot,
		 factors ? " freq_factors" : "", freq_scale, yarn ? " yarn" : "", n);
	struct lm_tok_loc loc[64];
	for (int t = 0; t < n; t++)
		loc[t] = (struct lm_tok_loc){.slot = 0, .pos = t * 97 + (t % 3) * 1500};
	float ff[256];
	for (int i = 0; i < n_rot / 2; i++)
		ff[i] = i % 5 == 4 ? 1e30f : 1.0f + 0.25f * (float)(i % 7);
	float *x = om_gauss(m, len, 1.0f), *yr = malloc(len * sizeof(float));
	float *yb = malloc(len * sizeof(float));
	float *dx = om_put(m, x, len), *dff = om_put(m, ff, 256);
	memcpy(yr, x, len * sizeof(float));
	struct lm_rope_params rp = {.mode = mode,
				    .n_rot = n_rot,
				    .freq_base = 10000.0f,
				    .freq_scale = freq_scale,
				    .freq_factors = factors ? ff : NULL};
	if (yarn) { /* gpt-oss's: factor 32, correction dims from beta_fast 32 and beta_slow 1 */
		rp.freq_base = 150000.0f;
		rp.ext_factor = 1.0f;
		rp.mscale = 1.0f + 0.1f * logf(1.0f / freq_scale);
		rp.corr[0] = 8.0f;
		rp.corr[1] = 17.5f;
	}
	struct lm_rope_params rb = rp;
	rb.freq_factors = factors ? dff : NULL;
	int rc;
	if ((rc = m->ref.iface->rope(m->ref.ctx, yr, heads, head_dim, loc, n, &rp)) != 0 ||
	    (rc = m->be.iface->rope(m->be.ctx, dx, heads, head_dim, loc, n, &rb)) != 0 ||
	    (rc = om_get(m, yb, dx, len)) != 0)
		om_fail(m, what, rc);
	else {
		const double e = test_nmse(yb, yr, len);
		om_result(m, e <= 1e-10, what, e, 1e-10);
	}
	om_free(m, dx);
	om_free(m, dff);
	free(x);
	free(yr);
	free(yb);
}

static void om_rope(struct om *m)
{
	for (int mode = 0; mode < 2; mode++)
		for (int hd = 64; hd <= 256; hd *= 2)
			for (int part = 0; part < 2; part++)
				for (int bi = 0; bi < OM_N_BATCHES; bi += 2)
					om_rope_one(m, mode ? LM_ROPE_NEOX : LM_ROPE_NORM, hd,
						    part ? hd / 4 : hd, part != 0,
						    bi == 2 ? 0.25f : 1.0f, false, om_batches[bi]);
	/* YaRN (gpt-oss): NeoX over whole heads of 64, scale 1/32. */
	for (int bi = 0; bi < OM_N_BATCHES; bi++)
		om_rope_one(m, LM_ROPE_NEOX, 64, 64, false, 1.0f / 32.0f, true, om_batches[bi]);
}

/* ---------------------------------------------------------------------------- attention */

struct om_attn {
	enum lm_dtype kt, vt;
	int head_dim, n_heads, n_kv_heads, window, slots, history, n;
	bool sinks; /* a sink logit per query head (gpt-oss) */
};

/* The case's cache in host memory, zeroed: a ring of window + the batch's positions per slot
 * less one on a sliding layer, history + those positions on a global one. */
static struct lm_kv_layer om_attn_layer(const struct om_attn *c, size_t *kbytes, size_t *vbytes)
{
	const int width = c->n_kv_heads * c->head_dim, per = (c->n + c->slots - 1) / c->slots;
	const int ctx = c->window > 0 ? c->window + per - 1 : c->history + per;
	uint64_t kr, vr;
	lm_dtype_row_bytes(c->kt, (uint64_t)width, &kr);
	lm_dtype_row_bytes(c->vt, (uint64_t)width, &vr);
	*kbytes = (size_t)kr * (size_t)ctx * (size_t)c->slots;
	*vbytes = (size_t)vr * (size_t)ctx * (size_t)c->slots;
	return (struct lm_kv_layer){.k = calloc(1, *kbytes),
				    .v = calloc(1, *vbytes),
				    .k_type = c->kt,
				    .v_type = c->vt,
				    .n_kv_heads = c->n_kv_heads,
				    .head_dim = c->head_dim,
				    .ctx = ctx,
				    .window = c->window,
				    .slots = c->slots,
				    .k_row_bytes = (size_t)kr,
				    .v_row_bytes = (size_t)vr};
}

/* A cache of the case's geometry on both backends: history positions stored first, then the
 * batch (tokens round-robin over the slots, consecutive positions per slot), then attention. */
static void om_attn_one(struct om *m, const struct om_attn *c)
{
	char what[160];
	snprintf(what, sizeof what,
		 "attention K %s V %s hd=%d heads %d/%d window %d slots %d n=%d%s",
		 lm_dtype_name(c->kt), lm_dtype_name(c->vt), c->head_dim, c->n_heads, c->n_kv_heads,
		 c->window, c->slots, c->n, c->sinks ? " sinks" : "");
	const int width = c->n_kv_heads * c->head_dim;
	size_t kbytes, vbytes;
	struct lm_kv_layer ref = om_attn_layer(c, &kbytes, &vbytes);
	struct lm_kv_layer dev = ref;
	dev.k = m->be.iface->malloc(m->be.ctx, kbytes);
	dev.v = m->be.iface->malloc(m->be.ctx, vbytes);
	float *sinks = c->sinks ? om_gauss(m, (size_t)c->n_heads, 2.0f) : NULL;
	float *dsinks = c->sinks ? om_put(m, sinks, (size_t)c->n_heads) : NULL;
	ref.sinks = sinks;
	dev.sinks = dsinks;
	const int rows = c->history > c->n ? c->history : c->n;
	struct lm_tok_loc *loc = malloc((size_t)rows * sizeof *loc);
	float *k = om_gauss(m, (size_t)rows * width, 1.0f),
	      *v = om_gauss(m, (size_t)rows * width, 1.0f);
	float *dk = om_put(m, NULL, (size_t)rows * width),
	      *dv = om_put(m, NULL, (size_t)rows * width);
	const size_t qlen = (size_t)c->n * (size_t)c->n_heads * (size_t)c->head_dim;
	float *q = om_gauss(m, qlen, 1.0f), *yr = malloc(qlen * sizeof(float));
	float *yb = malloc(qlen * sizeof(float)), *dq = om_put(m, q, qlen),
	      *dy = om_put(m, NULL, qlen);
	uint8_t *kb = malloc(kbytes), *vb = malloc(vbytes);
	int rc = 0;
	/* History: every slot's first `history` positions, one store per slot. */
	for (int s = 0; rc == 0 && s < c->slots && c->history > 0; s++) {
		for (int p = 0; p < c->history; p++)
			loc[p] = (struct lm_tok_loc){.slot = s, .pos = p};
		test_fill_gauss(&m->rng, k, (size_t)c->history * width, 1.0f);
		test_fill_gauss(&m->rng, v, (size_t)c->history * width, 1.0f);
		if ((rc = m->ref.iface->kv_store(m->ref.ctx, &ref, k, v, loc, c->history)) == 0 &&
		    (rc = m->be.iface->upload(m->be.ctx, dk, k, (size_t)c->history * width * 4)) ==
			    0 &&
		    (rc = m->be.iface->upload(m->be.ctx, dv, v, (size_t)c->history * width * 4)) ==
			    0)
			rc = m->be.iface->kv_store(m->be.ctx, &dev, dk, dv, loc, c->history);
	}
	for (int t = 0; t < c->n; t++)
		loc[t] =
			(struct lm_tok_loc){.slot = t % c->slots, .pos = c->history + t / c->slots};
	test_fill_gauss(&m->rng, k, (size_t)c->n * width, 1.0f);
	test_fill_gauss(&m->rng, v, (size_t)c->n * width, 1.0f);
	if (rc != 0 || (rc = m->ref.iface->kv_store(m->ref.ctx, &ref, k, v, loc, c->n)) != 0 ||
	    (rc = m->ref.iface->attention(m->ref.ctx, yr, q, &ref, loc, c->n, c->n_heads,
					  1.0f / sqrtf((float)c->head_dim))) != 0 ||
	    (rc = m->be.iface->upload(m->be.ctx, dk, k, (size_t)c->n * width * 4)) != 0 ||
	    (rc = m->be.iface->upload(m->be.ctx, dv, v, (size_t)c->n * width * 4)) != 0 ||
	    (rc = m->be.iface->kv_store(m->be.ctx, &dev, dk, dv, loc, c->n)) != 0 ||
	    (rc = m->be.iface->attention(m->be.ctx, dy, dq, &dev, loc, c->n, c->n_heads,
					 1.0f / sqrtf((float)c->head_dim))) != 0 ||
	    (rc = om_get(m, yb, dy, qlen)) != 0 ||
	    (rc = m->be.iface->download(m->be.ctx, kb, dev.k, kbytes)) != 0 ||
	    (rc = m->be.iface->download(m->be.ctx, vb, dev.v, vbytes)) != 0) {
		om_fail(m, what, rc);
	} else {
		char sw[192];
		snprintf(sw, sizeof sw, "kv_store K %s V %s width %d (cache bytes)",
			 lm_dtype_name(c->kt), lm_dtype_name(c->vt), width);
		const bool same = memcmp(kb, ref.k, kbytes) == 0 && memcmp(vb, ref.v, vbytes) == 0;
		om_result(m, same, sw, same ? 0.0 : 1.0, 0);
		const double e = test_nmse(yb, yr, qlen);
		om_result(m, e <= 1e-8, what, e, 1e-8);
	}
	m->be.iface->mfree(m->be.ctx, dev.k);
	m->be.iface->mfree(m->be.ctx, dev.v);
	if (dsinks != NULL)
		om_free(m, dsinks);
	free(sinks);
	om_free(m, dk);
	om_free(m, dv);
	om_free(m, dq);
	om_free(m, dy);
	free(ref.k);
	free(ref.v);
	free(loc);
	free(k);
	free(v);
	free(q);
	free(yr);
	free(yb);
	free(kb);
	free(vb);
}

/* The K and V type pairs: every pair of f32, f16 and q8_0, then each other cache type as K and V,
 * and beside f16 either way (a cache may mix types). */
static const struct {
	enum lm_dtype k, v;
} om_kv_pairs[] = {
	{LM_F32, LM_F32},           {LM_F32, LM_F16},      {LM_F32, LM_Q8_0},
	{LM_F16, LM_F32},           {LM_F16, LM_F16},      {LM_F16, LM_Q8_0},
	{LM_Q8_0, LM_F32},          {LM_Q8_0, LM_F16},     {LM_Q8_0, LM_Q8_0},
	{LM_BF16, LM_BF16},         {LM_BF16, LM_F16},     {LM_F16, LM_BF16},
	{LM_Q4_0, LM_Q4_0},         {LM_Q4_0, LM_F16},     {LM_F16, LM_Q4_0},
	{LM_Q5_1, LM_Q5_1},         {LM_Q5_1, LM_F16},     {LM_F16, LM_Q5_1},
	{LM_FP8_E4M3, LM_FP8_E4M3}, {LM_FP8_E4M3, LM_F16}, {LM_F16, LM_FP8_E4M3},
	{LM_Q8_0, LM_Q4_0},         {LM_Q8_0, LM_Q5_1},
};

static void om_attention(struct om *m)
{
	static const struct {
		int head_dim, n_heads, n_kv_heads, window, history;
	} geo[] = {
		{64, 8, 2, 0, 37},   /* global, GQA 4 */
		{128, 4, 4, 0, 5},   /* global, one query head per KV head */
		{64, 8, 2, 8, 29},   /* sliding: a ring of window + batch - 1 rows, wrapped */
		{256, 16, 8, 16, 3}, /* sliding, wide heads */
	};
	for (size_t pi = 0; pi < sizeof om_kv_pairs / sizeof om_kv_pairs[0]; pi++)
		for (size_t gi = 0; gi < sizeof geo / sizeof geo[0]; gi++)
			for (int bi = 0; bi <= OM_N_BATCHES; bi++) {
				/* The batches, then a batch of 7 with sink logits. */
				const int n = om_batches[bi < OM_N_BATCHES ? bi : 2];
				struct om_attn c = {.kt = om_kv_pairs[pi].k,
						    .vt = om_kv_pairs[pi].v,
						    .head_dim = geo[gi].head_dim,
						    .n_heads = geo[gi].n_heads,
						    .n_kv_heads = geo[gi].n_kv_heads,
						    .window = geo[gi].window,
						    .slots = n >= 7 ? 3 : 1,
						    .history = geo[gi].history,
						    .n = n,
						    .sinks = bi == OM_N_BATCHES};
				om_attn_one(m, &c);
			}
}

/* ---------------------------------------------------------------------------- element-wise */

enum om_ew { OM_SILU, OM_SWIGLU_OAI, OM_GELU, OM_ADD, OM_ADD_ROWS, OM_MUL_ROWS, OM_SCALE, OM_COPY };

static int om_ew_run(const struct lm_backend *b, enum om_ew op, float *y, const float *a,
		     const float *c, size_t len)
{
	switch (op) {
	case OM_SILU:
		return b->iface->silu_mul(b->ctx, y, y, a, len);
	case OM_SWIGLU_OAI:
		if (b->iface->swiglu_oai == NULL)
			return LM_EUNSUPPORTED;
		return b->iface->swiglu_oai(b->ctx, y, y, a, len, 1.702f, 7.0f);
	case OM_GELU:
		return b->iface->gelu_mul(b->ctx, y, y, a, len);
	case OM_ADD:
		return b->iface->add(b->ctx, y, a, len);
	case OM_ADD_ROWS:
		return b->iface->add_rows(b->ctx, y, c, 37, (int)(len / 37));
	case OM_MUL_ROWS:
		return b->iface->mul_rows(b->ctx, y, c, 37, (int)(len / 37));
	case OM_SCALE:
		return b->iface->scale(b->ctx, y, 0.7071f, len);
	case OM_COPY:
		return b->iface->copy(b->ctx, y, a, len);
	}
	return LM_EINVAL;
}

static void om_elementwise(struct om *m)
{
	static const char *const names[] = {"silu_mul", "swiglu_oai", "gelu_mul", "add",
					    "add_rows", "mul_rows",   "scale",    "copy"};
	static const size_t lens[] = {37, 37 * 29, 37 * 2713};
	for (int op = OM_SILU; op <= OM_COPY; op++)
		for (int li = 0; li < 3; li++) {
			const size_t len = lens[li];
			char what[64];
			snprintf(what, sizeof what, "%s %zu", names[op], len);
			float *y = om_gauss(m, len, 5.0f), *a = om_gauss(m, len, 1.0f);
			float *c = om_gauss(m, 37, 1.0f), *yr = malloc(len * sizeof(float));
			float *yb = malloc(len * sizeof(float));
			y[0] = -11.0f; /* the GELU's saturated ends */
			y[len - 1] = 12.0f;
			float *dy = om_put(m, y, len), *da = om_put(m, a, len),
			      *dc = om_put(m, c, 37);
			memcpy(yr, y, len * sizeof(float));
			int rc;
			if ((rc = om_ew_run(&m->ref, (enum om_ew)op, yr, a, c, len)) != 0 ||
			    (rc = om_ew_run(&m->be, (enum om_ew)op, dy, da, dc, len)) != 0 ||
			    (rc = om_get(m, yb, dy, len)) != 0)
				om_fail(m, what, rc);
			else {
				/* Exact but for silu's and swiglu_oai's exp, which is the
				 * device's. */
				const double bound =
					op == OM_SILU || op == OM_SWIGLU_OAI ? 1e-12 : 0;
				const double e = test_nmse(yb, yr, len);
				om_result(m,
					  bound > 0 ? e <= bound
						    : memcmp(yb, yr, len * sizeof(float)) == 0,
					  what, e, bound);
			}
			om_free(m, dy);
			om_free(m, da);
			om_free(m, dc);
			free(y);
			free(a);
			free(c);
			free(yr);
			free(yb);
		}
}

/* ---------------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	struct om m = {.name = "cuda", .rng = {20261201}};
	struct lm_backend_opts bo = {.n_threads = 2};
	static const struct option longopts[] = {{"backend", required_argument, NULL, 'b'},
						 {"device", required_argument, NULL, 'd'},
						 {"verbose", no_argument, NULL, 'v'},
						 {NULL, 0, NULL, 0}};
	for (int ch; (ch = getopt_long(argc, argv, "b:d:v", longopts, NULL)) != -1;) {
		if (ch == 'b')
			m.name = optarg;
		else if (ch == 'd')
			bo.device = atoi(optarg);
		else if (ch == 'v')
			m.verbose = true;
		else {
			fprintf(stderr, "usage: op_matrix [--backend cpu|cuda] [--device N] "
					"[--verbose]\n");
			return 2;
		}
	}
	lm_diag d = {{0}};
	int rc = lm_backend_open(&m.be, m.name, &bo, &d);
	if (rc == LM_EUNSUPPORTED || rc == LM_EUNAVAILABLE) {
		printf("SKIP: backend %s cannot run here: %s\n", m.name, lm_diag_str(&d, rc));
		return 77;
	}
	if (rc != 0) {
		printf("FAIL: backend %s: %s\n", m.name, lm_diag_str(&d, rc));
		return 1;
	}
	struct lm_backend_opts ro = {.n_threads = 2, .force_scalar = 1};
	if ((rc = lm_backend_cpu_init(&m.ref, &ro)) != 0) {
		printf("FAIL: the scalar CPU reference: %s\n", lm_strerror(rc));
		return 1;
	}
	printf("op matrix: backend %s%s%s against the scalar CPU reference\n", m.name,
	       lm_backend_cpu_kernels(&m.be) ? ", kernels " : "",
	       lm_backend_cpu_kernels(&m.be) ? lm_backend_cpu_kernels(&m.be) : "");
	om_matmul(&m);
	om_get_rows(&m);
	om_rmsnorm(&m);
	om_rope(&m);
	om_attention(&m);
	om_elementwise(&m);
	lm_backend_fini(&m.ref);
	lm_backend_fini(&m.be);
	printf("op_matrix: %d passed, %d failed\n", m.passed, m.failed);
	return m.failed == 0 ? 0 : 1;
}

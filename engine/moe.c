/* moe.c — a mixture-of-experts FFN over a batch. See moe.h for the math and the guarantees. */
#include "engine/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The sizes of the scratch's buffers, in floats (backend) and bytes (host). */
static uint64_t moe_dev_floats(int32_t b, int32_t e, int32_t ne, int32_t k, int32_t ff)
{
	uint64_t B = (uint64_t)b;
	return B * (uint64_t)ne + B * 5 * (uint64_t)e + B * 2 * (uint64_t)ff +
	       (uint64_t)k * B * (uint64_t)e;
}

static uint64_t moe_host_bytes(int32_t b, int32_t ne, int32_t k)
{
	uint64_t B = (uint64_t)b, K = (uint64_t)k;
	return B * (uint64_t)ne * sizeof(float) + B * K * (sizeof(int32_t) * 2 + sizeof(float)) +
	       ((uint64_t)ne + 1) * sizeof(int32_t);
}

uint64_t lm_moe_scratch_bytes(int32_t max_batch, int32_t n_embd, int32_t n_expert, int32_t n_used,
			      int32_t n_ff)
{
	/* logits [b][ne]; xg, yg, ysh, xe, xr [b][e]; gate, up [b][ff]; ys [k][b][e] */
	return moe_dev_floats(max_batch, n_embd, n_expert, n_used, n_ff) * sizeof(float) +
	       moe_host_bytes(max_batch, n_expert, n_used);
}

int lm_moe_scratch_init(struct lm_moe_scratch *s, struct lm_backend *be, int32_t max_batch,
			int32_t n_embd, int32_t n_expert, int32_t n_used, int32_t n_ff, lm_diag *d)
{
	memset(s, 0, sizeof *s);
	if (max_batch <= 0 || n_embd <= 0 || n_expert <= 0 || n_used <= 0 || n_used > n_expert ||
	    n_ff <= 0)
		return lm_fail(d, LM_EINVAL, "moe: scratch of %d tokens, %d of %d experts",
			       max_batch, n_used, n_expert);
	*s = (struct lm_moe_scratch){.max_batch = max_batch,
				     .n_embd = n_embd,
				     .n_expert = n_expert,
				     .n_used = n_used,
				     .n_ff = n_ff};
	const size_t B = (size_t)max_batch, E = (size_t)n_embd, K = (size_t)n_used;
	void *ctx = be->ctx;
	s->logits = be->iface->malloc(ctx, B * (size_t)n_expert * sizeof(float));
	s->xg = be->iface->malloc(ctx, B * E * sizeof(float));
	s->gate = be->iface->malloc(ctx, B * (size_t)n_ff * sizeof(float));
	s->up = be->iface->malloc(ctx, B * (size_t)n_ff * sizeof(float));
	s->yg = be->iface->malloc(ctx, B * E * sizeof(float));
	s->ys = be->iface->malloc(ctx, K * B * E * sizeof(float));
	s->ysh = be->iface->malloc(ctx, B * E * sizeof(float));
	s->xe = be->iface->malloc(ctx, B * E * sizeof(float));
	s->xr = be->iface->malloc(ctx, B * E * sizeof(float));
	s->logits_host = malloc(B * (size_t)n_expert * sizeof(float));
	s->pick = malloc(B * K * sizeof(int32_t));
	s->weight = malloc(B * K * sizeof(float));
	s->group = malloc(B * K * sizeof(int32_t));
	s->start = malloc(((size_t)n_expert + 1) * sizeof(int32_t));
	s->bytes = lm_moe_scratch_bytes(max_batch, n_embd, n_expert, n_used, n_ff);
	if (s->logits == NULL || s->xg == NULL || s->gate == NULL || s->up == NULL ||
	    s->yg == NULL || s->ys == NULL || s->ysh == NULL || s->xe == NULL || s->xr == NULL ||
	    s->logits_host == NULL || s->pick == NULL || s->weight == NULL || s->group == NULL ||
	    s->start == NULL) {
		lm_moe_scratch_fini(s, be);
		return lm_fail(d, LM_ENOMEM, "moe: out of memory for a batch of %d", max_batch);
	}
	return 0;
}

void lm_moe_scratch_fini(struct lm_moe_scratch *s, struct lm_backend *be)
{
	if (s == NULL)
		return;
	float *dev[] = {s->logits, s->xg, s->gate, s->up, s->yg, s->ys, s->ysh, s->xe, s->xr};
	for (size_t i = 0; be != NULL && i < sizeof dev / sizeof dev[0]; i++)
		be->iface->mfree(be->ctx, dev[i]);
	free(s->logits_host);
	free(s->pick);
	free(s->weight);
	free(s->group);
	free(s->start);
	memset(s, 0, sizeof *s);
}

/* p = softmax(logits) as GGUF's reference CPU op computes it: exp(l - max), summed in double,
 * scaled by the float of 1 / sum. */
static void moe_softmax(const float *logits, int32_t n, float *p)
{
	float max = -INFINITY;
	for (int32_t i = 0; i < n; i++)
		max = logits[i] > max ? logits[i] : max;
	double sum = 0.0;
	for (int32_t i = 0; i < n; i++) {
		p[i] = expf(logits[i] - max);
		sum += (double)p[i];
	}
	const float inv = (float)(1.0 / sum);
	for (int32_t i = 0; i < n; i++)
		p[i] *= inv;
}

void lm_moe_route(const float *logits, int32_t n_expert, int32_t n_used,
		  const struct lm_moe_params *p, int32_t *pick, float *weight)
{
	float prob[LM_MAX_EXPERTS];
	if (p->gating == LM_MOE_SIGMOID)
		for (int32_t i = 0; i < n_expert; i++)
			prob[i] = 1.0f / (1.0f + expf(-logits[i]));
	else if (p->gating == LM_MOE_SOFTMAX_WEIGHT)
		memcpy(prob, logits, (size_t)n_expert * sizeof(float));
	else
		moe_softmax(logits, n_expert, prob);
	/* The top n_used, best first; a NaN is never picked over a number. */
	bool taken[LM_MAX_EXPERTS] = {false};
	for (int32_t r = 0; r < n_used; r++) {
		int32_t best = -1;
		for (int32_t i = 0; i < n_expert; i++)
			if (!taken[i] && (best < 0 || prob[i] > prob[best] ||
					  (isnan(prob[best]) && !isnan(prob[i]))))
				best = i;
		taken[best] = true;
		pick[r] = best;
		weight[r] = prob[best];
	}
	if (p->gating == LM_MOE_SOFTMAX_WEIGHT) {
		float w[LM_MAX_EXPERTS];
		moe_softmax(weight, n_used, w);
		memcpy(weight, w, (size_t)n_used * sizeof(float));
	}
	if (p->norm) {
		double sum = 0.0;
		for (int32_t r = 0; r < n_used; r++)
			sum += (double)weight[r];
		float s = (float)sum;
		s = s < 6.103515625e-5f ? 6.103515625e-5f : s;
		for (int32_t r = 0; r < n_used; r++)
			weight[r] /= s;
	}
	if (p->scale != 0.0f && p->scale != 1.0f)
		for (int32_t r = 0; r < n_used; r++)
			weight[r] *= p->scale;
}

static int moe_fail(const struct lm_backend *be, int rc, const char *what, lm_diag *d)
{
	return lm_fail(d, rc, "%s failed: %s", what, lm_backend_strerror(be, rc));
}

/* y[i] += row e of bias b (when bound) for m rows of `width`. */
static int moe_bias(struct lm_backend *be, float *y, const struct lm_weight *b, int32_t e,
		    int64_t width, int32_t m)
{
	if (b == NULL || b->data == NULL)
		return 0;
	const float *row = (const float *)((const uint8_t *)b->data + (size_t)e * b->row_bytes);
	return be->iface->add_rows(be->ctx, y, row, (int)width, m);
}

/* gate = act(gate, up) over len values: silu(gate) * up, gelu(gate) * up, or the clamped
 * SwiGLU of gpt-oss. */
static int moe_act(struct lm_backend *be, const struct lm_moe_layer *l, float *gate,
		   const float *up, size_t len)
{
	if (l->p.swiglu_oai) {
		if (be->iface->swiglu_oai == NULL)
			return LM_EUNSUPPORTED;
		return be->iface->swiglu_oai(be->ctx, gate, gate, up, len, LM_MOE_OAI_ALPHA,
					     LM_MOE_OAI_LIMIT);
	}
	return l->gelu ? be->iface->gelu_mul(be->ctx, gate, gate, up, len)
		       : be->iface->silu_mul(be->ctx, gate, gate, up, len);
}

/* moe_act's op, for messages. */
static const char *moe_act_name(const struct lm_moe_layer *l)
{
	return l->p.swiglu_oai ? "ffn_moe swiglu_oai"
	       : l->gelu       ? "ffn_moe gelu_mul"
			       : "ffn_moe silu_mul";
}

/* Routes the batch: every token's picks and weights, then the (token, rank) pairs grouped by
 * expert, in batch order within a group. */
static int moe_route_batch(struct lm_backend *be, struct lm_moe_scratch *s,
			   const struct lm_moe_layer *l, const float *x, int32_t n, lm_diag *d)
{
	const struct lm_backend_i *bi = be->iface;
	const int32_t ne = (int32_t)l->router->ne1, k = l->n_used;
	int rc;
	if ((rc = bi->matmul(be->ctx, s->logits, l->router, x, n)) != 0)
		return moe_fail(be, rc, "ffn_gate_inp", d);
	if (l->router_b != NULL && l->router_b->data != NULL &&
	    (rc = bi->add_rows(be->ctx, s->logits, l->router_b->data, ne, n)) != 0)
		return moe_fail(be, rc, "ffn_gate_inp bias", d);
	if ((rc = bi->download(be->ctx, s->logits_host, s->logits,
			       (size_t)n * (size_t)ne * sizeof(float))) != 0 ||
	    (rc = lm_backend_sync(be)) != 0)
		return moe_fail(be, rc, "router download", d);
	memset(s->start, 0, ((size_t)ne + 1) * sizeof(int32_t));
	for (int32_t t = 0; t < n; t++) {
		lm_moe_route(s->logits_host + (size_t)t * (size_t)ne, ne, k, &l->p,
			     s->pick + (size_t)t * (size_t)k, s->weight + (size_t)t * (size_t)k);
		for (int32_t r = 0; r < k; r++)
			s->start[s->pick[t * k + r] + 1]++;
	}
	for (int32_t e = 0; e < ne; e++)
		s->start[e + 1] += s->start[e];
	/* A counting sort: the pairs of expert e at group[start[e] ...), batch order kept. */
	int32_t fill[LM_MAX_EXPERTS];
	memcpy(fill, s->start, (size_t)ne * sizeof(int32_t));
	for (int32_t t = 0; t < n; t++)
		for (int32_t r = 0; r < k; r++)
			s->group[fill[s->pick[t * k + r]]++] = t * k + r;
	return 0;
}

/* Expert e over its group: gathered rows in, each output weighted into its (rank, token) row
 * of ys. */
static int moe_expert(struct lm_backend *be, struct lm_moe_scratch *s, const struct lm_moe_layer *l,
		      int32_t e, const float *x, int32_t n, lm_diag *d)
{
	const struct lm_backend_i *bi = be->iface;
	void *ctx = be->ctx;
	const size_t E = (size_t)s->n_embd;
	const int32_t k = l->n_used, m = s->start[e + 1] - s->start[e];
	const int32_t *g = s->group + s->start[e];
	const int64_t ff = l->exps->gate[e].ne1;
	int rc;
	for (int32_t i = 0; i < m; i++)
		if ((rc = bi->copy(ctx, s->xg + (size_t)i * E, x + (size_t)(g[i] / k) * E, E)) != 0)
			return moe_fail(be, rc, "ffn_moe gather", d);
	if ((rc = bi->matmul(ctx, s->gate, &l->exps->gate[e], s->xg, m)) != 0 ||
	    (rc = moe_bias(be, s->gate, l->gate_b, e, ff, m)) != 0)
		return moe_fail(be, rc, "ffn_gate_exps", d);
	if ((rc = bi->matmul(ctx, s->up, &l->exps->up[e], s->xg, m)) != 0 ||
	    (rc = moe_bias(be, s->up, l->up_b, e, ff, m)) != 0)
		return moe_fail(be, rc, "ffn_up_exps", d);
	if ((rc = moe_act(be, l, s->gate, s->up, (size_t)m * (size_t)ff)) != 0)
		return moe_fail(be, rc, moe_act_name(l), d);
	if ((rc = bi->matmul(ctx, s->yg, &l->exps->down[e], s->gate, m)) != 0 ||
	    (rc = moe_bias(be, s->yg, l->down_b, e, s->n_embd, m)) != 0)
		return moe_fail(be, rc, "ffn_down_exps", d);
	/* The expert's output scale, then the router's weight (llama.cpp's order). */
	if (l->exps->down_scale != NULL &&
	    (rc = bi->scale(ctx, s->yg, l->exps->down_scale[e], (size_t)m * E)) != 0)
		return moe_fail(be, rc, "ffn_down_exps scale", d);
	for (int32_t i = 0; i < m; i++) {
		const int32_t t = g[i] / k, r = g[i] % k;
		float *dst = s->ys + ((size_t)r * (size_t)s->max_batch + (size_t)t) * E;
		if ((rc = bi->copy(ctx, dst, s->yg + (size_t)i * E, E)) != 0 ||
		    (rc = bi->scale(ctx, dst, s->weight[g[i]], E)) != 0)
			return moe_fail(be, rc, "ffn_moe weights", d);
	}
	return 0;
}

int lm_moe_shared_run(struct lm_backend *be, struct lm_moe_scratch *s,
		      const struct lm_moe_shared *sh, float *y, const float *x, int32_t n,
		      lm_diag *d)
{
	const struct lm_backend_i *bi = be->iface;
	void *ctx = be->ctx;
	const int64_t ff = sh->gate->ne1;
	const bool gated = sh->gate_inp != NULL && sh->gate_inp->data != NULL;
	if (n <= 0 || n > s->max_batch || sh->gate->ne0 != s->n_embd || ff > s->n_ff ||
	    sh->up->ne1 != ff || sh->down->ne0 != ff || sh->down->ne1 != s->n_embd ||
	    (gated && (sh->gate_inp->ne0 != s->n_embd || sh->gate_inp->ne1 != 1)))
		return lm_fail(d, LM_EINVAL,
			       "moe: a shared FFN of %lld over %d tokens does not fit the scratch "
			       "(%d wide, %d tokens)",
			       (long long)ff, n, s->n_ff, s->max_batch);
	const size_t len = (size_t)n * (size_t)ff, E = (size_t)s->n_embd;
	int rc;
	/* Everything that reads x first: y may be x. */
	if ((rc = bi->matmul(ctx, s->gate, sh->gate, x, n)) != 0)
		return moe_fail(be, rc, "ffn_gate_shexp", d);
	if ((rc = bi->matmul(ctx, s->up, sh->up, x, n)) != 0)
		return moe_fail(be, rc, "ffn_up_shexp", d);
	if (gated &&
	    ((rc = bi->matmul(ctx, s->logits, sh->gate_inp, x, n)) != 0 ||
	     (rc = bi->download(ctx, s->logits_host, s->logits, (size_t)n * sizeof(float))) != 0))
		return moe_fail(be, rc, "ffn_gate_inp_shexp", d);
	rc = sh->gelu ? bi->gelu_mul(ctx, s->gate, s->gate, s->up, len)
		      : bi->silu_mul(ctx, s->gate, s->gate, s->up, len);
	if (rc != 0)
		return moe_fail(be, rc, sh->gelu ? "ffn_shexp gelu_mul" : "ffn_shexp silu_mul", d);
	if ((rc = bi->matmul(ctx, y, sh->down, s->gate, n)) != 0)
		return moe_fail(be, rc, "ffn_down_shexp", d);
	if (!gated)
		return 0;
	if ((rc = lm_backend_sync(be)) != 0)
		return moe_fail(be, rc, "ffn_gate_inp_shexp download", d);
	for (int32_t t = 0; t < n; t++) {
		const float g = 1.0f / (1.0f + expf(-s->logits_host[t]));
		if ((rc = bi->scale(ctx, y + (size_t)t * E, g, E)) != 0)
			return moe_fail(be, rc, "ffn_shexp gate", d);
	}
	return 0;
}

int lm_moe_run(struct lm_backend *be, struct lm_moe_scratch *s, const struct lm_moe_layer *l,
	       float *y, const float *x, int32_t n, lm_diag *d)
{
	return lm_moe_run_routed(be, s, l, y, x, x, n, d);
}

int lm_moe_run_routed(struct lm_backend *be, struct lm_moe_scratch *s, const struct lm_moe_layer *l,
		      float *y, const float *x, const float *xr, int32_t n, lm_diag *d)
{
	const int32_t ne = (int32_t)l->router->ne1, k = l->n_used;
	if (n <= 0 || n > s->max_batch || l->router->ne0 != s->n_embd || ne != l->exps->n ||
	    ne > s->n_expert || k <= 0 || k > s->n_used || l->exps->gate[0].ne1 > s->n_ff)
		return lm_fail(
			d, LM_EINVAL,
			"moe: %d tokens, %d of %d experts do not fit the scratch (%d tokens, "
			"%d of %d experts)",
			n, k, ne, s->max_batch, s->n_used, s->n_expert);
	int rc = 0;
	if (l->shared != NULL && (rc = lm_moe_shared_run(be, s, l->shared, s->ysh, x, n, d)) != 0)
		return rc;
	rc = moe_route_batch(be, s, l, xr, n, d);
	for (int32_t e = 0; rc == 0 && e < ne; e++)
		if (s->start[e + 1] > s->start[e])
			rc = moe_expert(be, s, l, e, x, n, d);
	if (rc != 0)
		return rc;
	/* Each token's outputs summed in its rank order: ranks 0 and 1, then 2, ... */
	const size_t len = (size_t)n * (size_t)s->n_embd;
	const size_t plane = (size_t)s->max_batch * (size_t)s->n_embd;
	if ((rc = be->iface->copy(be->ctx, y, s->ys, len)) != 0)
		return moe_fail(be, rc, "ffn_moe sum", d);
	for (int32_t r = 1; r < k; r++)
		if ((rc = be->iface->add(be->ctx, y, s->ys + (size_t)r * plane, len)) != 0)
			return moe_fail(be, rc, "ffn_moe sum", d);
	if (l->shared != NULL && (rc = be->iface->add(be->ctx, y, s->ysh, len)) != 0)
		return moe_fail(be, rc, "ffn_shexp add", d);
	return 0;
}

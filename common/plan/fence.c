/* fence.c — the planner's three strategies, and the messages that explain an impossible plan.
 *
 * Costs of a slice come from prefix sums over the layers, so any stage costs O(1) to evaluate.
 * Sums saturate at UINT64_MAX instead of wrapping: a saturated stage is over any real limit,
 * which is the right answer for it.
 */
#include "common/plan/fence.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *fence_strategy_name(enum fence_strategy s)
{
	switch (s) {
	case FENCE_UNIFORM:
		return "uniform";
	case FENCE_BALANCED:
		return "balanced";
	case FENCE_PINNED:
		return "pinned";
	}
	return "?";
}

int fence_strategy_parse(const char *s)
{
	if (s == NULL)
		return -1;
	if (strcmp(s, "uniform") == 0)
		return FENCE_UNIFORM;
	if (strcmp(s, "balanced") == 0)
		return FENCE_BALANCED;
	if (strcmp(s, "pinned") == 0)
		return FENCE_PINNED;
	return -1;
}

const char *fence_fmt_bytes(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (bytes < 1024) {
		snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	double v = (double)bytes / 1024.0;
	size_t u = 0;
	while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, cap, "%.2f %s", v, units[u]);
	return buf;
}

#define FMT_B(x) fence_fmt_bytes((x), (char[32]){0}, 32)

int fence_kv_costs(struct fence_layer *layers, int32_t n_layers, const struct kv_geom *geom,
		   int32_t max_seq, int32_t extra, int32_t slots, const struct kv_types *types,
		   lm_diag *d)
{
	for (int32_t i = 0; i < n_layers; i++) {
		const struct kv_geom *g = &geom[i];
		const struct kv_pair t = kv_types_for(types, g);
		const char *kind = kv_kind_name(kv_geom_kind(g));
		char why[160];
		if (kv_geom_check(g, t.k, why, sizeof why) != 0 ||
		    kv_geom_check(g, t.v, why, sizeof why) != 0)
			return lm_fail(d, LM_EINVAL,
				       "layer %d (%s, %d KV heads x head_dim %d): no %s K / %s V "
				       "cache: %s",
				       (int)i, kind, (int)g->n_kv_heads, (int)g->head_dim,
				       lm_dtype_name(t.k), lm_dtype_name(t.v), why);
		uint64_t k = 0, v = 0, f = 0;
		int rc = kv_geom_kv_bytes(g, max_seq, extra, slots, t.k, t.v, &k, &v);
		if (rc == 0)
			rc = kv_geom_bytes(g, max_seq, extra, slots, LM_F32, LM_F32, &f);
		if (rc == LM_EOVERFLOW)
			return lm_fail(
				d, rc,
				"layer %d: the KV cache of %d slots x %d positions does not fit "
				"in 64 bits",
				(int)i, (int)slots, (int)max_seq);
		if (rc != 0)
			return lm_fail(d, rc,
				       "layer %d (%s): no KV cache for window %d, %d slots x %d "
				       "positions",
				       (int)i, kind, (int)g->window, (int)slots, (int)max_seq);
		layers[i].kv_bytes = k + v;
		layers[i].kv_k_bytes = k;
		layers[i].kv_v_bytes = v;
		layers[i].kv_f32_bytes = f;
		layers[i].sliding = kv_geom_kind(g) == KV_SLIDING;
		layers[i].recurrent = kv_geom_kind(g) == KV_RECURRENT;
	}
	return 0;
}

/* ---- stage costs -------------------------------------------------------------------------- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

struct fence_ctx {
	const struct fence_input *in;
	int32_t L, W;
	uint64_t *pw, *pk, *pf; /* [L + 1] prefix sums of weight bytes, KV bytes and flops */
	uint64_t *ps;           /* [L + 1] prefix sums of the layers' scratch */
	/* [W]: worker j's prefix sums of KV bytes, pk or those of its own kv_layers (one array
	 * per distinct kv_layers, in own). */
	const uint64_t **pkw;
	uint64_t *own;
};

/* KV bytes of worker j running layers [a, b). */
static uint64_t stage_kv(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	return c->pkw[j][b] - c->pkw[j][a];
}

static uint64_t stage_extra_bytes(const struct fence_ctx *c, int32_t j)
{
	return sat_add(j == 0 ? c->in->first_bytes : 0, j == c->W - 1 ? c->in->last_bytes : 0);
}

/* Scratch of worker j running layers [a, b): its own and its layers'. */
static uint64_t stage_scratch(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	return sat_add(c->in->workers[j].scratch_bytes, c->ps[b] - c->ps[a]);
}

/* Bytes of worker j running layers [a, b). */
static uint64_t stage_bytes(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	uint64_t layers = sat_add(c->pw[b] - c->pw[a], stage_kv(c, j, a, b));
	return sat_add(sat_add(layers, stage_scratch(c, j, a, b)), stage_extra_bytes(c, j));
}

static uint64_t stage_flops(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	uint64_t f = c->pf[b] - c->pf[a];
	if (j == 0)
		f = sat_add(f, c->in->first_flops);
	if (j == c->W - 1)
		f = sat_add(f, c->in->last_flops);
	return f;
}

/* Every comparison of times goes through this one expression, so equal stages compare equal. */
static double stage_time(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	return (double)stage_flops(c, j, a, b) / c->in->workers[j].speed;
}

static bool stage_fits(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	return stage_bytes(c, j, a, b) <= c->in->workers[j].memory_limit;
}

static const char *worker_name(const struct fence_input *in, int32_t j, char *buf, size_t cap)
{
	if (in->workers[j].name != NULL)
		return in->workers[j].name;
	snprintf(buf, cap, "w%d", (int)j);
	return buf;
}

#define WNAME(c, j) worker_name((c)->in, (j), (char[16]){0}, 16)

static const char *extra_label(const struct fence_ctx *c, int32_t j)
{
	if (c->W == 1)
		return "embedding and head";
	return j == 0 ? "embedding" : "head";
}

/* "worker 'w1' (layers [4, 8)) needs 1.20 GiB (weights ... + KV ... + scratch ... + head ...)
 * against its memory_limit of 1.00 GiB" */
static int fail_stage(const struct fence_ctx *c, lm_diag *d, int32_t j, int32_t a, int32_t b,
		      const char *lead)
{
	char extra[64] = "";
	uint64_t e = stage_extra_bytes(c, j);
	if (e > 0)
		snprintf(extra, sizeof extra, " + %s %s", extra_label(c, j), FMT_B(e));
	uint64_t total = stage_bytes(c, j, a, b);
	return lm_fail(
		d, LM_EINFEASIBLE,
		"%sworker '%s' (layers [%d, %d)) needs %s = %llu bytes (weights %s + KV %s + "
		"scratch %s%s) against its memory_limit of %s = %llu bytes",
		lead, WNAME(c, j), (int)a, (int)b, FMT_B(total), (unsigned long long)total,
		FMT_B(c->pw[b] - c->pw[a]), FMT_B(stage_kv(c, j, a, b)),
		FMT_B(stage_scratch(c, j, a, b)), extra, FMT_B(c->in->workers[j].memory_limit),
		(unsigned long long)c->in->workers[j].memory_limit);
}

/* ---- the three strategies ----------------------------------------------------------------- */

/* Checks every stage of a fixed fence against its limit; names the first that does not fit. */
static int check_caps(const struct fence_ctx *c, const int32_t *cuts, lm_diag *d)
{
	int32_t bad = -1, n_bad = 0;
	for (int32_t j = 0; j < c->W; j++) {
		if (!stage_fits(c, j, cuts[j], cuts[j + 1])) {
			if (bad < 0)
				bad = j;
			n_bad++;
		}
	}
	if (bad < 0)
		return 0;
	int rc = fail_stage(c, d, bad, cuts[bad], cuts[bad + 1], "");
	if (n_bad > 1 && d != NULL) {
		size_t n = strlen(d->msg);
		snprintf(d->msg + n, sizeof d->msg - n, "; %d more worker%s", (int)(n_bad - 1),
			 n_bad > 2 ? "s are over their limits" : " is over its limit");
	}
	return rc;
}

static int plan_uniform(const struct fence_ctx *c, int32_t *cuts, lm_diag *d)
{
	int32_t base = c->L / c->W, rem = c->L % c->W;
	cuts[0] = 0;
	for (int32_t j = 0; j < c->W; j++)
		cuts[j + 1] = cuts[j] + base + (j < rem ? 1 : 0);
	return check_caps(c, cuts, d);
}

static int plan_pinned(const struct fence_ctx *c, int32_t *cuts, lm_diag *d)
{
	cuts[0] = 0;
	for (int32_t j = 0; j < c->W; j++) {
		const struct fence_worker *w = &c->in->workers[j];
		int32_t a = w->pin_start, b = w->pin_end;
		if (a >= b)
			return lm_fail(
				d, LM_EINFEASIBLE,
				"worker '%s' pins layers [%d, %d): a worker needs at least one "
				"layer",
				WNAME(c, j), (int)a, (int)b);
		if (a != cuts[j])
			return lm_fail(
				d, LM_EINFEASIBLE,
				"worker '%s' pins layers [%d, %d), but must start at layer "
				"%d%s%s%s: "
				"pinned ranges go in worker order and leave no gap or overlap",
				WNAME(c, j), (int)a, (int)b, (int)cuts[j],
				j == 0 ? " (the first worker starts the model)"
				       : ", where worker '",
				j == 0 ? "" : WNAME(c, j - 1), j == 0 ? "" : "' stops");
		if (b > c->L)
			return lm_fail(
				d, LM_EINFEASIBLE,
				"worker '%s' pins layers [%d, %d), but the model has %d layers",
				WNAME(c, j), (int)a, (int)b, (int)c->L);
		cuts[j + 1] = b;
	}
	if (cuts[c->W] != c->L)
		return lm_fail(d, LM_EINFEASIBLE,
			       "the pinned ranges end at layer %d (worker '%s'), but the model has "
			       "%d layers: layers [%d, %d) belong to no worker",
			       (int)cuts[c->W], WNAME(c, c->W - 1), (int)c->L, (int)cuts[c->W],
			       (int)c->L);
	return check_caps(c, cuts, d);
}

/* Why no fence fits the memory limits, in the most specific words available. */
static int explain_balanced(const struct fence_ctx *c, lm_diag *d)
{
	/* A worker that cannot hold even one layer of those it could be given. */
	for (int32_t j = 0; j < c->W; j++) {
		int32_t best = -1;
		for (int32_t l = j; l <= c->L - (c->W - j); l++)
			if (best < 0 ||
			    stage_bytes(c, j, l, l + 1) < stage_bytes(c, j, best, best + 1))
				best = l;
		if (!stage_fits(c, j, best, best + 1))
			return fail_stage(c, d, j, best, best + 1,
					  "no fence fits: the smallest single-layer slice of ");
	}
	/* The limits together are smaller than the model. A layer costs at least its cheapest
	 * worker's KV (the model's KV when every worker has the same types). */
	uint64_t kv = 0;
	for (int32_t i = 0; i < c->L; i++) {
		uint64_t least = UINT64_MAX;
		for (int32_t j = 0; j < c->W; j++)
			if (stage_kv(c, j, i, i + 1) < least)
				least = stage_kv(c, j, i, i + 1);
		kv = sat_add(kv, least);
	}
	uint64_t need = sat_add(sat_add(c->pw[c->L], kv), c->ps[c->L]), have = 0;
	need = sat_add(need, sat_add(c->in->first_bytes, c->in->last_bytes));
	for (int32_t j = 0; j < c->W; j++) {
		need = sat_add(need, c->in->workers[j].scratch_bytes);
		have = sat_add(have, c->in->workers[j].memory_limit);
	}
	if (need > have)
		return lm_fail(
			d, LM_EINFEASIBLE,
			"no fence fits: the model needs %s = %llu bytes in all (weights %s + "
			"KV %s + embedding %s + head %s + scratch), but the workers' "
			"memory_limits add up to %s = %llu bytes",
			FMT_B(need), (unsigned long long)need, FMT_B(c->pw[c->L]), FMT_B(kv),
			FMT_B(c->in->first_bytes), FMT_B(c->in->last_bytes), FMT_B(have),
			(unsigned long long)have);
	/* Otherwise the layers do not pack: fill the workers in order, each taking as many
	 * layers as fit, and say where that stops. */
	char msg[sizeof d->msg];
	size_t n = (size_t)snprintf(msg, sizeof msg,
				    "no fence fits every worker's memory_limit with at least one "
				    "layer each; filling workers in order:");
	int32_t a = 0;
	for (int32_t j = 0; j < c->W && n < sizeof msg; j++) {
		int32_t b = a;
		while (b < c->L && stage_fits(c, j, a, b + 1))
			b++;
		n += (size_t)snprintf(msg + n, sizeof msg - n, " '%s' [%d, %d)", WNAME(c, j),
				      (int)a, (int)b);
		a = b;
	}
	if (n < sizeof msg && a < c->L)
		snprintf(msg + n, sizeof msg - n, ", which leaves layers [%d, %d) without a worker",
			 (int)a, (int)c->L);
	else if (n < sizeof msg)
		snprintf(msg + n, sizeof msg - n, ", which leaves a worker without a layer");
	return lm_fail(d, LM_EINFEASIBLE, "%s", msg);
}

/* How full a stage is: bytes of limit. Fullness compares exactly, by cross-multiplying in 128
 * bits, so two stages that are equally full compare equal whatever their limits. */
struct fence_use {
	uint64_t bytes, limit;
};

static struct fence_use stage_use(const struct fence_ctx *c, int32_t j, int32_t a, int32_t b)
{
	uint64_t limit = c->in->workers[j].memory_limit;
	/* A limit of 0 holds nothing; were it to hold a stage of 0 bytes, that stage is empty. */
	return (struct fence_use){stage_bytes(c, j, a, b), limit != 0 ? limit : 1};
}

/* a is fuller than b. */
static bool use_above(struct fence_use a, struct fence_use b)
{
	return (unsigned __int128)a.bytes * b.limit > (unsigned __int128)b.bytes * a.limit;
}

/* The fuller of a and b. */
static struct fence_use use_max(struct fence_use a, struct fence_use b)
{
	return use_above(a, b) ? a : b;
}

/* best[j][x]: the smallest slowest-stage time with which workers 0..j-1 can run layers [0, x),
 * each within its limit and with at least one layer; reach says whether any fence does it at
 * all. */
/* The cell (j, x) of the balanced programme's (W + 1) x (L + 1) tables, L in scope. */
#define AT(j, x) ((size_t)(j) * (size_t)(L + 1) + (size_t)(x))

static void balanced_times(const struct fence_ctx *c, double *best, unsigned char *reach)
{
	int32_t L = c->L, W = c->W;
	reach[AT(0, 0)] = 1;
	best[AT(0, 0)] = 0.0;
	for (int32_t j = 1; j <= W; j++) {
		for (int32_t x = j; x <= L - (W - j); x++) {
			/* Worker j-1 runs [a, x). Fewer layers never need more bytes, so walking a
			 * down from x-1 can stop at the first slice over the limit. */
			for (int32_t a = x - 1; a >= j - 1; a--) {
				if (!stage_fits(c, j - 1, a, x))
					break;
				if (!reach[AT(j - 1, a)])
					continue;
				double t = stage_time(c, j - 1, a, x);
				if (best[AT(j - 1, a)] > t)
					t = best[AT(j - 1, a)];
				if (!reach[AT(j, x)] || t < best[AT(j, x)]) {
					best[AT(j, x)] = t;
					reach[AT(j, x)] = 1;
				}
			}
		}
	}
}

/* use[j][x]: the least fullness of the fullest worker with which workers j..W-1 can run
 * [x, L), every stage within its limit and no slower than opt; ok says whether any can. */
static void balanced_headroom(const struct fence_ctx *c, double opt, struct fence_use *use,
			      unsigned char *ok)
{
	int32_t L = c->L, W = c->W;
	ok[AT(W, L)] = 1;
	use[AT(W, L)] = (struct fence_use){0, 1};
	for (int32_t j = W - 1; j >= 0; j--) {
		for (int32_t x = j; x <= L - (W - j); x++) {
			for (int32_t b = x + 1; b <= L - (W - j - 1); b++) {
				if (!stage_fits(c, j, x, b))
					break;
				if (!ok[AT(j + 1, b)] || stage_time(c, j, x, b) > opt)
					continue;
				struct fence_use u =
					use_max(stage_use(c, j, x, b), use[AT(j + 1, b)]);
				if (!ok[AT(j, x)] || use_above(use[AT(j, x)], u)) {
					use[AT(j, x)] = u;
					ok[AT(j, x)] = 1;
				}
			}
		}
	}
}

static int plan_balanced(const struct fence_ctx *c, int32_t *cuts, lm_diag *d)
{
	int32_t L = c->L, W = c->W;
	size_t cells = (size_t)(W + 1) * (size_t)(L + 1);
	double *best = malloc(cells * sizeof *best);
	struct fence_use *use = malloc(cells * sizeof *use);
	unsigned char *reach = calloc(cells, 1);
	unsigned char *ok = calloc(cells, 1);
	int rc = 0;
	if (best == NULL || use == NULL || reach == NULL || ok == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "planning %d layers over %d workers: out of memory",
			     (int)L, (int)W);
		goto out;
	}
	balanced_times(c, best, reach);
	if (!reach[AT(W, L)]) {
		rc = explain_balanced(c, d);
		goto out;
	}
	double opt = best[AT(W, L)];
	balanced_headroom(c, opt, use, ok);
	const struct fence_use top = use[AT(0, 0)];

	/* The lexicographically smallest fence that reaches both optima, built greedily: each cut
	 * as early as the rest still allows. */
	cuts[0] = 0;
	for (int32_t j = 0; j < W; j++) {
		int32_t b = cuts[j] + 1;
		while (b <= L - (W - j - 1) && !(ok[AT(j + 1, b)] && stage_fits(c, j, cuts[j], b) &&
						 stage_time(c, j, cuts[j], b) <= opt &&
						 !use_above(stage_use(c, j, cuts[j], b), top) &&
						 !use_above(use[AT(j + 1, b)], top)))
			b++;
		if (b > L - (W - j - 1)) {
			/* Cannot happen: the optimal fence satisfies every test above. */
			rc = lm_fail(d, LM_EINVAL, "planner: no cut for worker %d", (int)j);
			goto out;
		}
		cuts[j + 1] = b;
	}
#undef AT
out:
	free(best);
	free(use);
	free(reach);
	free(ok);
	return rc;
}

/* ---- the plan ----------------------------------------------------------------------------- */

void fence_plan_fini(struct fence_plan *plan)
{
	if (plan == NULL)
		return;
	if (plan->stages != NULL)
		for (int32_t j = 0; j < plan->n_workers; j++)
			free(plan->stages[j].name);
	free(plan->stages);
	free(plan->cuts);
	memset(plan, 0, sizeof *plan);
}

static int check_input(const struct fence_input *in, lm_diag *d)
{
	if (in->n_layers <= 0 || in->n_layers > FENCE_MAX_LAYERS || in->layers == NULL)
		return lm_fail(d, LM_EINVAL, "a plan needs 1 to %d layers, not %d",
			       FENCE_MAX_LAYERS, (int)in->n_layers);
	if (in->n_workers <= 0 || in->n_workers > FENCE_MAX_WORKERS || in->workers == NULL)
		return lm_fail(d, LM_EINVAL, "a plan needs 1 to %d workers, not %d",
			       FENCE_MAX_WORKERS, (int)in->n_workers);
	if (in->strategy != FENCE_UNIFORM && in->strategy != FENCE_BALANCED &&
	    in->strategy != FENCE_PINNED)
		return lm_fail(d, LM_EINVAL, "unknown plan strategy %d", (int)in->strategy);
	for (int32_t j = 0; j < in->n_workers; j++) {
		double s = in->workers[j].speed;
		if (!(s > 0.0) || !isfinite(s))
			return lm_fail(d, LM_EINVAL,
				       "worker '%s': speed %g is not a positive finite number",
				       worker_name(in, j, (char[16]){0}, 16), s);
	}
	if (in->n_layers < in->n_workers && in->strategy != FENCE_PINNED)
		return lm_fail(
			d, LM_EINFEASIBLE,
			"the model has %d layers and the mesh %d workers: every worker needs "
			"at least one layer",
			(int)in->n_layers, (int)in->n_workers);
	return 0;
}

/* Prefix sums of KV bytes of a worker's own costs into pk; LM_EOVERFLOW as prefix_sums. */
static int prefix_kv(const struct fence_layer *kv, int32_t L, uint64_t *pk, lm_diag *d)
{
	pk[0] = 0;
	for (int32_t i = 0; i < L; i++) {
		if (pk[i] > UINT64_MAX - kv[i].kv_bytes)
			return lm_fail(
				d, LM_EOVERFLOW,
				"layer %d: a worker's KV bytes up to it do not fit in 64 bits",
				(int)i);
		pk[i + 1] = pk[i] + kv[i].kv_bytes;
	}
	return 0;
}

/* Each worker's KV prefix sums: the layers' own, or one array per distinct kv_layers. */
static int prefix_workers(struct fence_ctx *c, lm_diag *d)
{
	size_t n = (size_t)c->L + 1, n_own = 0, n_with = 0;
	for (int32_t j = 0; j < c->W; j++)
		n_with += c->in->workers[j].kv_layers != NULL;
	for (int32_t j = 0; j < c->W; j++) {
		const struct fence_layer *kv = c->in->workers[j].kv_layers;
		c->pkw[j] = c->pk;
		if (kv == NULL)
			continue;
		int32_t k = 0;
		while (k < j && c->in->workers[k].kv_layers != kv)
			k++;
		if (k < j) {
			c->pkw[j] = c->pkw[k];
			continue;
		}
		if (c->own == NULL && (c->own = malloc(n_with * n * sizeof *c->own)) == NULL)
			return lm_fail(d, LM_ENOMEM, "planning: out of memory");
		uint64_t *pk = c->own + n_own++ * n;
		int rc = prefix_kv(kv, c->L, pk, d);
		if (rc != 0)
			return rc;
		c->pkw[j] = pk;
	}
	return 0;
}

/* Prefix sums; LM_EOVERFLOW when a model-wide total does not fit in 64 bits. */
static int prefix_sums(struct fence_ctx *c, lm_diag *d)
{
	c->pw[0] = c->pk[0] = c->pf[0] = c->ps[0] = 0;
	for (int32_t i = 0; i < c->L; i++) {
		const struct fence_layer *l = &c->in->layers[i];
		if (c->pw[i] > UINT64_MAX - l->weight_bytes ||
		    c->pk[i] > UINT64_MAX - l->kv_bytes || c->pf[i] > UINT64_MAX - l->flops ||
		    c->ps[i] > UINT64_MAX - l->scratch_bytes)
			return lm_fail(
				d, LM_EOVERFLOW,
				"layer %d: the model's bytes or flops up to it do not fit in "
				"64 bits",
				(int)i);
		c->pw[i + 1] = c->pw[i] + l->weight_bytes;
		c->pk[i + 1] = c->pk[i] + l->kv_bytes;
		c->pf[i + 1] = c->pf[i] + l->flops;
		c->ps[i + 1] = c->ps[i] + l->scratch_bytes;
	}
	return prefix_workers(c, d);
}

int fence_plan_make(struct fence_plan *plan, const struct fence_input *in, lm_diag *d)
{
	memset(plan, 0, sizeof *plan);
	int rc = check_input(in, d);
	if (rc != 0)
		return rc;
	struct fence_ctx c = {.in = in, .L = in->n_layers, .W = in->n_workers};
	size_t n = (size_t)c.L + 1;
	c.pw = malloc(4 * n * sizeof *c.pw);
	c.pkw = calloc((size_t)c.W, sizeof *c.pkw);
	plan->cuts = calloc((size_t)c.W + 1, sizeof *plan->cuts);
	plan->stages = calloc((size_t)c.W, sizeof *plan->stages);
	if (c.pw == NULL || c.pkw == NULL || plan->cuts == NULL || plan->stages == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "planning: out of memory");
		goto fail;
	}
	plan->n_workers = c.W; /* so that fini frees the names on any failure below */
	c.pk = c.pw + n;
	c.pf = c.pk + n;
	c.ps = c.pf + n;
	rc = prefix_sums(&c, d);
	if (rc != 0)
		goto fail;

	switch (in->strategy) {
	case FENCE_UNIFORM:
		rc = plan_uniform(&c, plan->cuts, d);
		break;
	case FENCE_BALANCED:
		rc = plan_balanced(&c, plan->cuts, d);
		break;
	case FENCE_PINNED:
		rc = plan_pinned(&c, plan->cuts, d);
		break;
	}
	if (rc != 0)
		goto fail;

	plan->strategy = in->strategy;
	plan->n_layers = c.L;
	plan->kv_types = in->kv_types;
	for (int32_t i = 0; i < c.L; i++) {
		plan->has_sliding |= in->layers[i].sliding;
		plan->has_recurrent |= in->layers[i].recurrent;
	}
	for (int32_t j = 0; j < c.W; j++) {
		struct fence_stage *s = &plan->stages[j];
		int32_t a = plan->cuts[j], b = plan->cuts[j + 1];
		const char *name = WNAME(&c, j);
		s->name = strdup(name);
		if (s->name == NULL) {
			rc = lm_fail(d, LM_ENOMEM, "planning: out of memory");
			goto fail;
		}
		s->start = a;
		s->end = b;
		s->weight_bytes = c.pw[b] - c.pw[a];
		s->kv_bytes = stage_kv(&c, j, a, b);
		const struct fence_layer *kv =
			in->workers[j].kv_layers != NULL ? in->workers[j].kv_layers : in->layers;
		s->kv_types =
			in->workers[j].kv_layers != NULL ? in->workers[j].kv_types : in->kv_types;
		plan->mixed_kv |= memcmp(&s->kv_types, &in->kv_types, sizeof s->kv_types) != 0;
		for (int32_t i = a; i < b; i++) {
			const struct fence_layer *l = &kv[i];
			const int kind = l->recurrent ? FENCE_KV_RECURRENT
					 : l->sliding ? FENCE_KV_SLIDING
						      : FENCE_KV_GLOBAL;
			s->kv_kind[kind][0] = sat_add(s->kv_kind[kind][0], l->kv_k_bytes);
			s->kv_kind[kind][1] = sat_add(s->kv_kind[kind][1], l->kv_v_bytes);
			s->kv_f32_bytes = sat_add(s->kv_f32_bytes, l->kv_f32_bytes);
		}
		s->scratch_bytes = stage_scratch(&c, j, a, b);
		s->extra_bytes = stage_extra_bytes(&c, j);
		s->total_bytes = stage_bytes(&c, j, a, b);
		s->memory_limit = in->workers[j].memory_limit;
		s->flops = stage_flops(&c, j, a, b);
		s->speed = in->workers[j].speed;
		s->time = stage_time(&c, j, a, b);
		plan->total_flops = sat_add(plan->total_flops, s->flops);
		if (s->time > plan->max_time)
			plan->max_time = s->time;
	}
	free(c.pw);
	free(c.pkw);
	free(c.own);
	return 0;
fail:
	free(c.pw);
	free(c.pkw);
	free(c.own);
	fence_plan_fini(plan);
	return rc;
}

/* backend_check.c — refuses a mesh whose worker's backend lacks what its layers need, before
 * anything starts: a cuda worker given a cache type, a weight type or a feature the CUDA
 * backend does not have would otherwise load, or even run, until its first batch failed.
 *
 * What a backend has is the backend's own answer (kernels/backend.h: lm_backend_kv_type_ok,
 * lm_backend_weight_type_ok, lm_backend_feature_ok), from the lists its kernels dispatch on, and
 * it is answered without a device and in builds without CUDA. A worker is checked over every
 * layer it may hold: its pinned layers, else all of them (the fence may give it any), plus the
 * token embedding on the first worker and the head on the last.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/plan/planner.h"

/* The problems found for one worker, as one message. */
struct bc_report {
	char text[320];
	size_t len;
	int n;
	bool weight_seen[LM_DTYPE_COUNT], kv_seen[LM_DTYPE_COUNT];
	bool feature_seen[LM_FEATURE_COUNT];
};

__attribute__((format(printf, 2, 3))) static void bc_add(struct bc_report *r, const char *fmt, ...)
{
	if (r->len >= sizeof r->text - 1)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = snprintf(r->text + r->len, sizeof r->text - r->len, "%s", r->n > 0 ? "; " : "");
	if (k > 0)
		r->len += (size_t)k;
	if (r->len < sizeof r->text - 1) {
		k = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
		if (k > 0)
			r->len += (size_t)k;
	}
	va_end(ap);
	if (r->len > sizeof r->text - 1)
		r->len = sizeof r->text - 1;
	r->n++;
}

static void bc_weight(struct bc_report *r, const char *be, const struct gguf_tensor *t)
{
	if ((unsigned)t->type >= LM_DTYPE_COUNT || lm_backend_weight_type_ok(be, t->type) ||
	    r->weight_seen[t->type])
		return;
	r->weight_seen[t->type] = true;
	bc_add(r, "weights of type %s (%s)", lm_dtype_name(t->type), t->name);
}

static void bc_kv(struct bc_report *r, const char *be, enum lm_dtype t, const char *which)
{
	if ((unsigned)t >= LM_DTYPE_COUNT || lm_backend_kv_type_ok(be, t) || r->kv_seen[t])
		return;
	r->kv_seen[t] = true;
	bc_add(r, "KV cache type %s (%s)", lm_dtype_name(t), which);
}

static void bc_feature(struct bc_report *r, const char *be, enum lm_backend_feature f)
{
	if (lm_backend_feature_ok(be, f) || r->feature_seen[f])
		return;
	r->feature_seen[f] = true;
	bc_add(r, "%s", lm_backend_feature_name(f));
}

/* The layers [lo, hi) of worker j's reach: what they need of its backend. */
static void bc_layers(struct bc_report *r, const char *be, const struct mesh_worker *mw,
		      const gguf_file *f, const struct lm_hparams *hp, int32_t lo, int32_t hi)
{
	for (int32_t i = lo; i < hi; i++) {
		const struct lm_layer_hparams *l = &hp->layer[i];
		if (!l->recurrent) {
			const struct kv_pair *kv = l->window > 0 ? &mw->kv.swa : &mw->kv.global;
			const char *which = l->window > 0 ? "sliding layers" : "global layers";
			bc_kv(r, be, kv->k, which);
			bc_kv(r, be, kv->v, which);
		}
		if (l->rope.ext_factor != 0.0f)
			bc_feature(r, be, LM_FEATURE_ROPE_YARN);
		if (l->n_expert > 0 && hp->moe.swiglu_oai)
			bc_feature(r, be, LM_FEATURE_SWIGLU_OAI);
		char name[64];
		snprintf(name, sizeof name, "blk.%d.attn_sinks.weight", (int)i);
		if (gguf_find_tensor(f, name) != NULL)
			bc_feature(r, be, LM_FEATURE_ATTN_SINKS);
	}
	for (uint64_t k = 0; k < gguf_n_tensors(f); k++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, k);
		if (t->layer >= lo && t->layer < hi)
			bc_weight(r, be, t);
	}
}

/* What backend `be` has, for the message: its cache and weight types. */
static void bc_offer(const char *be, char *buf, size_t cap)
{
	size_t len = (size_t)snprintf(buf, cap, "it runs caches");
	for (int pass = 0; pass < 2 && len < cap; pass++) {
		if (pass == 1)
			len += (size_t)snprintf(buf + len, cap - len, ", weights");
		const char *sep = " ";
		for (int t = 0; t < LM_DTYPE_COUNT && len < cap; t++) {
			const bool ok = pass == 0 ? lm_backend_kv_type_ok(be, (enum lm_dtype)t)
						  : lm_backend_weight_type_ok(be, (enum lm_dtype)t);
			if (!ok || lm_dtype_name((enum lm_dtype)t) == NULL)
				continue;
			len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep,
						lm_dtype_name((enum lm_dtype)t));
			sep = " ";
		}
	}
}

int planner_check_backends(const struct mesh_config *cfg, const gguf_file *f,
			   const struct lm_hparams *hp, lm_diag *d)
{
	const int32_t L = hp->n_layer, W = cfg->n_workers;
	for (int32_t j = 0; j < W; j++) {
		const struct mesh_worker *mw = &cfg->workers[j];
		const char *be = mw->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu";
		int32_t lo = 0, hi = L;
		if (mw->pinned) {
			lo = mw->layer_start < 0 ? 0 : mw->layer_start;
			hi = mw->layer_end > L ? L : mw->layer_end;
		}
		struct bc_report r = {.len = 0};
		bc_layers(&r, be, mw, f, hp, lo, hi);
		if (j == 0 || j == W - 1) {
			const struct gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
			const struct gguf_tensor *out = gguf_find_tensor(f, "output.weight");
			if (embd != NULL && (j == 0 || out == NULL))
				bc_weight(&r, be, embd);
			if (out != NULL && j == W - 1)
				bc_weight(&r, be, out);
		}
		if (r.n == 0)
			continue;
		char offer[224];
		bc_offer(be, offer, sizeof offer);
		char reach[64];
		if (mw->pinned)
			snprintf(reach, sizeof reach, "holds layers [%d, %d)", (int)lo, (int)hi);
		else
			snprintf(reach, sizeof reach,
				 "may hold any of layers [%d, %d) (not pinned)", (int)lo, (int)hi);
		return lm_fail(d, LM_EUNSUPPORTED,
			       "worker %s (line %d, backend %s) %s, which need what the %s backend "
			       "lacks: %s (%s); pin its layers to ones it runs, or make it a cpu "
			       "worker",
			       mw->name, (int)mw->line, be, reach, be, r.text, offer);
	}
	return 0;
}

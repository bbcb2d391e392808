/* hparams.c — hyperparameters and per-layer costs from GGUF metadata. See hparams.h. */
#include "common/model/hparams.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads "<arch>.<suffix>" as a positive int32; LM_ENOTFOUND passes through for defaults. */
static int model_get_i32(const gguf_file *f, const char *arch, const char *suffix, int32_t *out,
			 lm_diag *d)
{
	char key[128];
	uint32_t v;
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	int rc = gguf_get_u32(f, key, &v, d);
	if (rc != 0)
		return rc;
	if (v == 0 || v > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "metadata '%s' = %u is out of range", key, v);
	*out = (int32_t)v;
	return 0;
}

static int model_get_f32(const gguf_file *f, const char *arch, const char *suffix, float *out,
			 lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	int rc = gguf_get_f32(f, key, out, d);
	if (rc == 0 && !isfinite(*out))
		return lm_fail(d, LM_EFORMAT, "metadata '%s' is not finite", key);
	return rc;
}

/* A per-layer value: a scalar applied to every layer, or an array of n_layer values. */
static int model_get_per_layer(const gguf_file *f, const char *arch, const char *suffix,
			       int32_t n_layer, int32_t *out, bool required, lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL) {
		if (required)
			return lm_fail(d, LM_EFORMAT, "metadata '%s' is missing", key);
		return LM_ENOTFOUND;
	}
	if (kv->type == GGUF_TYPE_ARRAY) {
		const struct gguf_arr *a = &kv->v.arr;
		if (a->data == NULL || a->type == GGUF_TYPE_FLOAT32 ||
		    a->type == GGUF_TYPE_FLOAT64 || a->type == GGUF_TYPE_BOOL)
			return lm_fail(d, LM_EFORMAT, "metadata '%s' must be an integer array",
				       key);
		if (a->n != (uint64_t)n_layer)
			return lm_fail(d, LM_EFORMAT,
				       "metadata '%s' has %llu entries for %d layers", key,
				       (unsigned long long)a->n, n_layer);
		for (int32_t i = 0; i < n_layer; i++) {
			int64_t v = gguf_arr_i64(a, (uint64_t)i);
			if (v <= 0 || v > INT32_MAX)
				return lm_fail(d, LM_EFORMAT,
					       "metadata '%s'[%d] = %lld is out of range", key, i,
					       (long long)v);
			out[i] = (int32_t)v;
		}
		return 0;
	}
	int32_t v;
	int rc = model_get_i32(f, arch, suffix, &v, d);
	if (rc != 0)
		return rc;
	for (int32_t i = 0; i < n_layer; i++)
		out[i] = v;
	return 0;
}

#define MODEL_TRY(expr)                              \
	do {                                         \
		int rc_ = (expr);                    \
		if (rc_ != 0 && rc_ != LM_ENOTFOUND) \
			return rc_;                  \
	} while (0)

int lm_hparams_load(const gguf_file *f, struct lm_hparams *hp, lm_diag *d)
{
	const char *arch = NULL;
	int rc;

	memset(hp, 0, sizeof *hp);
	if ((rc = gguf_get_str(f, "general.architecture", &arch, d)) != 0)
		return rc == LM_ENOTFOUND ? lm_fail(d, LM_EFORMAT,
						    "metadata 'general.architecture' is missing")
					  : rc;
	if (strcmp(arch, "llama") != 0)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "architecture '%s' is not supported (layermesh runs 'llama')", arch);
	snprintf(hp->arch, sizeof hp->arch, "%s", arch);

	if ((rc = model_get_i32(f, arch, "block_count", &hp->n_layer, d)) != 0 ||
	    (rc = model_get_i32(f, arch, "embedding_length", &hp->n_embd, d)) != 0)
		return rc == LM_ENOTFOUND ? lm_fail(d, LM_EFORMAT,
						    "metadata '%s.block_count' or "
						    "'%s.embedding_length' is missing",
						    arch, arch)
					  : rc;
	if (hp->n_layer > LM_MAX_LAYERS)
		return lm_fail(d, LM_EUNSUPPORTED, "%d layers exceed the supported %d", hp->n_layer,
			       LM_MAX_LAYERS);
	if ((rc = model_get_per_layer(f, arch, "attention.head_count", hp->n_layer, hp->n_head,
				      true, d)) != 0 ||
	    (rc = model_get_per_layer(f, arch, "feed_forward_length", hp->n_layer, hp->n_ff, true,
				      d)) != 0)
		return rc;
	rc = model_get_per_layer(f, arch, "attention.head_count_kv", hp->n_layer, hp->n_head_kv,
				 false, d);
	if (rc == LM_ENOTFOUND)
		memcpy(hp->n_head_kv, hp->n_head, sizeof hp->n_head_kv);
	else if (rc != 0)
		return rc;

	hp->n_ctx_train = 2048;
	MODEL_TRY(model_get_i32(f, arch, "context_length", &hp->n_ctx_train, d));

	/* The head dimension comes from layer 0's head count; llama.cpp does the same. */
	if (hp->n_embd % hp->n_head[0] != 0)
		return lm_fail(d, LM_EFORMAT, "embedding length %d is not a multiple of %d heads",
			       hp->n_embd, hp->n_head[0]);
	hp->head_dim = hp->n_embd / hp->n_head[0];
	int32_t kl = hp->head_dim, vl = hp->head_dim;
	MODEL_TRY(model_get_i32(f, arch, "attention.key_length", &kl, d));
	MODEL_TRY(model_get_i32(f, arch, "attention.value_length", &vl, d));
	if (kl != vl)
		return lm_fail(d, LM_EUNSUPPORTED, "key length %d differs from value length %d", kl,
			       vl);
	hp->head_dim = kl;
	for (int32_t i = 0; i < hp->n_layer; i++) {
		if (hp->n_head_kv[i] > hp->n_head[i] || hp->n_head[i] % hp->n_head_kv[i] != 0)
			return lm_fail(d, LM_EFORMAT,
				       "layer %d: %d heads are not a multiple of %d KV heads", i,
				       hp->n_head[i], hp->n_head_kv[i]);
		if ((int64_t)hp->n_head[i] * hp->head_dim > (int64_t)1 << 24 ||
		    hp->n_ff[i] > (1 << 24))
			return lm_fail(d, LM_EFORMAT,
				       "layer %d: attention or FFN width out of range", i);
	}

	hp->rms_eps = 1e-5f;
	MODEL_TRY(model_get_f32(f, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, d));
	if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
		return lm_fail(d, LM_EFORMAT, "rms epsilon %g is out of range",
			       (double)hp->rms_eps);

	hp->rope.mode =
		LM_ROPE_NORM; /* llama: adjacent pairs, as llama.cpp's LLAMA_ROPE_TYPE_NORM */
	hp->rope.freq_base = 10000.0f;
	hp->rope.freq_scale = 1.0f;
	hp->rope.n_rot = hp->head_dim;
	MODEL_TRY(model_get_f32(f, arch, "rope.freq_base", &hp->rope.freq_base, d));
	MODEL_TRY(model_get_i32(f, arch, "rope.dimension_count", &hp->rope.n_rot, d));
	if (hp->rope.n_rot != hp->head_dim)
		return lm_fail(d, LM_EFORMAT, "rope dimension count %d differs from head dim %d",
			       hp->rope.n_rot, hp->head_dim);
	if (!(hp->rope.freq_base > 0))
		return lm_fail(d, LM_EFORMAT, "rope freq base %g is out of range",
			       (double)hp->rope.freq_base);
	float factor = 0;
	rc = model_get_f32(f, arch, "rope.scaling.factor", &factor, d);
	if (rc == LM_ENOTFOUND)
		rc = model_get_f32(f, arch, "rope.scale_linear", &factor, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	const char *scaling = NULL;
	if (gguf_get_str(f, "llama.rope.scaling.type", &scaling, d) == 0 &&
	    strcmp(scaling, "linear") != 0 && strcmp(scaling, "none") != 0)
		return lm_fail(d, LM_EUNSUPPORTED, "rope scaling '%s' is not supported", scaling);
	/* A tiny positive factor (a float denormal) would make freq_scale = 1/factor infinite. */
	if (factor < 0 || !isfinite(factor) || (factor > 0 && !isfinite(1.0f / factor)))
		return lm_fail(d, LM_EFORMAT, "rope scaling factor %g is out of range",
			       (double)factor);
	hp->rope.freq_scale = factor == 0 ? 1.0f : 1.0f / factor;

	const struct gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
	if (embd == NULL)
		return lm_fail(d, LM_EFORMAT, "tensor 'token_embd.weight' is missing");
	if (embd->ne[1] <= 0 || embd->ne[1] > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "token_embd.weight has %lld rows",
			       (long long)embd->ne[1]);
	hp->n_vocab = (int32_t)embd->ne[1];
	const struct gguf_arr *toks = NULL;
	if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks, NULL) == 0 &&
	    toks->n != (uint64_t)hp->n_vocab)
		return lm_fail(d, LM_EFORMAT,
			       "the vocabulary has %llu tokens but token_embd has %d",
			       (unsigned long long)toks->n, hp->n_vocab);
	hp->tied = gguf_find_tensor(f, "output.weight") == NULL;
	return 0;
}

struct kv_geom lm_hparams_kv_geom(const struct lm_hparams *hp, int32_t il)
{
	return (struct kv_geom){
		.n_kv_heads = hp->n_head_kv[il], .head_dim = hp->head_dim, .window = 0};
}

struct lm_widths lm_hparams_widths(const struct lm_hparams *hp, int32_t begin, int32_t end)
{
	struct lm_widths w = {0};
	for (int32_t il = begin; il < end; il++) {
		int32_t q = hp->n_head[il] * hp->head_dim, k = hp->n_head_kv[il] * hp->head_dim;
		int32_t g = hp->n_head[il] / hp->n_head_kv[il];
		w.q_dim = q > w.q_dim ? q : w.q_dim;
		w.kv_dim = k > w.kv_dim ? k : w.kv_dim;
		w.ff_dim = hp->n_ff[il] > w.ff_dim ? hp->n_ff[il] : w.ff_dim;
		w.head_dim = hp->head_dim > w.head_dim ? hp->head_dim : w.head_dim;
		w.group = g > w.group ? g : w.group;
	}
	return w;
}

/* ------------------------------------------------------------------ costs */

static uint64_t model_elems(const struct gguf_tensor *t)
{
	uint64_t n = 1;
	for (int j = 0; j < GGUF_MAX_DIMS; j++)
		n *= (uint64_t)t->ne[j];
	return n;
}

int lm_model_costs(const gguf_file *f, const struct lm_hparams *hp, struct lm_model_costs *costs,
		   lm_diag *d)
{
	memset(costs->layer, 0, (size_t)hp->n_layer * sizeof *costs->layer);
	costs->embd_bytes = costs->head_bytes = costs->head_flops = 0;
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		if (t->layer >= 0) {
			if (t->layer >= hp->n_layer)
				return lm_fail(
					d, LM_EFORMAT,
					"tensor '%s' belongs to layer %d of a %d-layer model",
					t->name, t->layer, hp->n_layer);
			struct lm_layer_cost *c = &costs->layer[t->layer];
			c->weight_bytes += t->size;
			if (t->n_dims >= 2) {
				c->params += model_elems(t);
				c->flops += 2 * model_elems(t);
			}
		} else if (strcmp(t->name, "token_embd.weight") == 0) {
			costs->embd_bytes += t->size;
			if (hp->tied) {
				costs->head_bytes += t->size;
				costs->head_flops += 2 * model_elems(t);
			}
		} else if (strcmp(t->name, "output.weight") == 0) {
			costs->head_bytes += t->size;
			costs->head_flops += 2 * model_elems(t);
		} else if (strcmp(t->name, "output_norm.weight") == 0) {
			costs->head_bytes += t->size;
		}
	}
	return 0;
}

/* hparams.c — hyperparameters and per-layer costs from GGUF metadata. See hparams.h. */
#include "common/model/hparams.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/hparams_impl.h"

/* ------------------------------------------------------------------ keys */

int hp_get_i32(const gguf_file *f, const char *arch, const char *suffix, int32_t *out, lm_diag *d)
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

int hp_get_u32_zero(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out,
		    lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	return gguf_get_u32(f, key, out, d);
}

int hp_get_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	int rc = gguf_get_f32(f, key, out, d);
	if (rc == 0 && !isfinite(*out))
		return lm_fail(d, LM_EFORMAT, "metadata '%s' is not finite", key);
	return rc;
}

/* A per-layer value: a scalar applied to every layer, or an array of n_layer values. The
 * values land in field `off` of every hp->layer[]. */
int hp_get_per_layer(const gguf_file *f, const char *arch, const char *suffix,
		     struct lm_hparams *hp, size_t off, bool required, lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	const struct gguf_kv *kv = gguf_find(f, key);
#define HP_FIELD(i) (*(int32_t *)((char *)&hp->layer[i] + off))
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
		/* n_layer values, or one more for each prediction layer (which are ignored). */
		if (a->n != (uint64_t)hp->n_layer &&
		    a->n != (uint64_t)hp->n_layer + (uint64_t)hp->n_layer_nextn)
			return lm_fail(d, LM_EFORMAT,
				       "metadata '%s' has %llu entries for %d layers", key,
				       (unsigned long long)a->n, hp->n_layer);
		for (int32_t i = 0; i < hp->n_layer; i++) {
			int64_t v = gguf_arr_i64(a, (uint64_t)i);
			if (v <= 0 || v > INT32_MAX)
				return lm_fail(d, LM_EFORMAT,
					       "metadata '%s'[%d] = %lld is out of range", key, i,
					       (long long)v);
			HP_FIELD(i) = (int32_t)v;
		}
		return 0;
	}
	int32_t v;
	int rc = hp_get_i32(f, arch, suffix, &v, d);
	if (rc != 0)
		return rc;
	for (int32_t i = 0; i < hp->n_layer; i++)
		HP_FIELD(i) = v;
	return 0;
#undef HP_FIELD
}

#define HP_TRY(expr)                                 \
	do {                                         \
		int rc_ = (expr);                    \
		if (rc_ != 0 && rc_ != LM_ENOTFOUND) \
			return rc_;                  \
	} while (0)

/* ------------------------------------------------------------------ loading */

/* Multi-token prediction layers (qwen35's) are the last of block_count: the model's layers are
 * those before them. */
static int hp_nextn(const gguf_file *f, const char *arch, struct lm_hparams *hp, lm_diag *d)
{
	uint32_t nextn = 0;
	if (hp_get_u32_zero(f, arch, "nextn_predict_layers", &nextn, NULL) != 0 || nextn == 0)
		return 0;
	if (nextn >= (uint32_t)hp->n_layer)
		return lm_fail(d, LM_EFORMAT,
			       "metadata '%s.nextn_predict_layers' = %u leaves no layer of %d",
			       arch, nextn, hp->n_layer);
	hp->n_layer_nextn = (int32_t)nextn;
	hp->n_layer -= (int32_t)nextn;
	return 0;
}

/* The keys every architecture reads the same way, into hp and r. */
static int hp_load_common(const gguf_file *f, const char *arch, struct lm_hparams *hp,
			  struct hp_read *r, lm_diag *d)
{
	int rc;
	if ((rc = hp_get_i32(f, arch, "block_count", &hp->n_layer, d)) != 0 ||
	    (rc = hp_get_i32(f, arch, "embedding_length", &hp->n_embd, d)) != 0)
		return rc == LM_ENOTFOUND ? lm_fail(d, LM_EFORMAT,
						    "metadata '%s.block_count' or "
						    "'%s.embedding_length' is missing",
						    arch, arch)
					  : rc;
	if (hp->n_layer > LM_MAX_LAYERS)
		return lm_fail(d, LM_EUNSUPPORTED, "%d layers exceed the supported %d", hp->n_layer,
			       LM_MAX_LAYERS);
	if ((rc = hp_nextn(f, arch, hp, d)) != 0)
		return rc;
	const size_t o_head = offsetof(struct lm_layer_hparams, n_head);
	const size_t o_kv = offsetof(struct lm_layer_hparams, n_head_kv);
	if ((rc = hp_get_per_layer(f, arch, "attention.head_count", hp, o_head, true, d)) != 0 ||
	    (rc = hp_get_per_layer(f, arch, "feed_forward_length", hp,
				   offsetof(struct lm_layer_hparams, n_ff), true, d)) != 0)
		return rc;
	rc = hp_get_per_layer(f, arch, "attention.head_count_kv", hp, o_kv, false, d);
	if (rc == LM_ENOTFOUND)
		for (int32_t i = 0; i < hp->n_layer; i++)
			hp->layer[i].n_head_kv = hp->layer[i].n_head;
	else if (rc != 0)
		return rc;

	hp->n_ctx_train = 2048;
	HP_TRY(hp_get_i32(f, arch, "context_length", &hp->n_ctx_train, d));

	/* The head dimension comes from layer 0's head count; llama.cpp does the same. */
	if (hp->n_embd % hp->layer[0].n_head != 0)
		return lm_fail(d, LM_EFORMAT, "embedding length %d is not a multiple of %d heads",
			       hp->n_embd, hp->layer[0].n_head);
	int32_t kl = hp->n_embd / hp->layer[0].n_head, vl = kl;
	HP_TRY(hp_get_i32(f, arch, "attention.key_length", &kl, d));
	HP_TRY(hp_get_i32(f, arch, "attention.value_length", &vl, d));
	if (kl != vl)
		return lm_fail(d, LM_EUNSUPPORTED, "key length %d differs from value length %d", kl,
			       vl);
	r->head_dim = r->head_dim_swa = kl;
	int32_t kls = kl, vls = vl;
	HP_TRY(hp_get_i32(f, arch, "attention.key_length_swa", &kls, d));
	HP_TRY(hp_get_i32(f, arch, "attention.value_length_swa", &vls, d));
	if (kls != vls)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "sliding layers' key length %d differs from their value length %d",
			       kls, vls);
	r->head_dim_swa = kls;

	hp->rms_eps = 1e-5f;
	HP_TRY(hp_get_f32(f, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, d));
	if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
		return lm_fail(d, LM_EFORMAT, "rms epsilon %g is out of range",
			       (double)hp->rms_eps);

	r->base = 10000.0f;
	r->base_swa = 10000.0f; /* llama.cpp's default for sliding layers, whatever the global */
	r->n_rot = r->head_dim;
	HP_TRY(hp_get_f32(f, arch, "rope.freq_base", &r->base, d));
	HP_TRY(hp_get_f32(f, arch, "rope.freq_base_swa", &r->base_swa, d));
	HP_TRY(hp_get_i32(f, arch, "rope.dimension_count", &r->n_rot, d));
	r->n_rot_swa = r->n_rot;
	HP_TRY(hp_get_i32(f, arch, "rope.dimension_count_swa", &r->n_rot_swa, d));
	if (!(r->base > 0) || !(r->base_swa > 0))
		return lm_fail(d, LM_EFORMAT, "rope freq base %g is out of range",
			       (double)(r->base > 0 ? r->base_swa : r->base));
	float factor = 0;
	rc = hp_get_f32(f, arch, "rope.scaling.factor", &factor, d);
	if (rc == LM_ENOTFOUND)
		rc = hp_get_f32(f, arch, "rope.scale_linear", &factor, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	char key[128];
	const char *scaling = NULL;
	snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
	/* YaRN is read where llama.cpp's graph applies it as layermesh does: gpt-oss. */
	r->yarn = gguf_get_str(f, key, &scaling, d) == 0 && strcmp(scaling, "yarn") == 0 &&
		  strcmp(arch, "gpt-oss") == 0;
	if (scaling != NULL && strcmp(scaling, "linear") != 0 && strcmp(scaling, "none") != 0 &&
	    !r->yarn)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "%s = '%s': rope scaling '%s' is not supported (layermesh applies "
			       "none and linear, and yarn for gpt-oss)",
			       key, scaling, scaling);
	/* A tiny positive factor (a float denormal) would make freq_scale = 1/factor infinite. */
	if (factor < 0 || !isfinite(factor) || (factor > 0 && !isfinite(1.0f / factor)))
		return lm_fail(d, LM_EFORMAT, "rope scaling factor %g is out of range",
			       (double)factor);
	r->scale = factor == 0 ? 1.0f : 1.0f / factor;

	/* Mixture-of-experts layers: the architectures that have them read the rest of their
	 * keys; any other refuses the file (lm_hparams_load). */
	r->n_expert = 0;
	if (hp_get_u32_zero(f, arch, "expert_count", &r->n_expert, NULL) != 0)
		r->n_expert = 0;
	return 0;
}

/* Every layer, once the architecture has set it: geometry in range, rope within the head. */
static int hp_check_layers(const struct lm_hparams *hp, lm_diag *d)
{
	for (int32_t i = 0; i < hp->n_layer; i++) {
		const struct lm_layer_hparams *l = &hp->layer[i];
		if (l->n_head_kv > l->n_head || l->n_head % l->n_head_kv != 0)
			return lm_fail(d, LM_EFORMAT,
				       "layer %d: %d heads are not a multiple of %d KV heads", i,
				       l->n_head, l->n_head_kv);
		if (l->head_dim <= 0 || (int64_t)l->n_head * l->head_dim > (int64_t)1 << 24 ||
		    l->n_ff > (1 << 24))
			return lm_fail(d, LM_EFORMAT,
				       "layer %d: attention or FFN width out of range", i);
		if (l->rope.n_rot <= 0 || l->rope.n_rot > l->head_dim || l->rope.n_rot % 2 != 0)
			return lm_fail(d, LM_EFORMAT,
				       "layer %d: rope dimension count %d does not fit head dim %d",
				       i, l->rope.n_rot, l->head_dim);
		if (l->window < 0)
			return lm_fail(d, LM_EFORMAT, "layer %d: sliding window %d", i, l->window);
		if (l->n_expert > 0 &&
		    (l->n_expert > LM_MAX_EXPERTS || l->n_expert_used <= 0 ||
		     l->n_expert_used > l->n_expert || l->n_ff_exp <= 0 || l->n_ff_exp > (1 << 24)))
			return lm_fail(
				d, LM_EFORMAT,
				"layer %d: %d experts (at most %d), %d used, %d wide are out "
				"of range",
				i, l->n_expert, LM_MAX_EXPERTS, l->n_expert_used, l->n_ff_exp);
	}
	return 0;
}

int lm_hparams_load(const gguf_file *f, struct lm_hparams *hp, lm_diag *d)
{
	const char *arch = NULL;
	int rc;

	memset(hp, 0, sizeof *hp);
	if ((rc = gguf_get_str(f, "general.architecture", &arch, d)) != 0)
		return rc == LM_ENOTFOUND ? lm_fail(d, LM_EFORMAT,
						    "metadata 'general.architecture' is missing")
					  : rc;
	const struct hp_arch *ha = hp_arch_find(arch);
	if (ha == NULL)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "architecture '%s' is not supported (layermesh runs %s)", arch,
			       lm_hparams_archs());
	snprintf(hp->arch, sizeof hp->arch, "%s", arch);

	struct hp_read r = {0};
	if ((rc = hp_load_common(f, arch, hp, &r, d)) != 0)
		return rc;
	/* The defaults of a global layer; the architecture adjusts its sliding ones. */
	for (int32_t i = 0; i < hp->n_layer; i++) {
		struct lm_layer_hparams *l = &hp->layer[i];
		l->head_dim = r.head_dim;
		l->rope = (struct lm_rope_params){.mode = ha->rope,
						  .n_rot = r.n_rot,
						  .freq_base = r.base,
						  .freq_scale = r.scale};
	}
	hp->embd_scale = 1.0f;
	hp->attn_scale = 1.0f / sqrtf((float)r.head_dim);
	hp->has_rope_freqs = gguf_find_tensor(f, "rope_freqs.weight") != NULL;
	hp->moe = (struct lm_moe_params){.gating = LM_MOE_SOFTMAX, .norm = false, .scale = 1.0f};
	if ((rc = ha->load(f, hp, &r, d)) != 0)
		return rc;
	/* Route each token through experts only where the architecture reads how. */
	bool any_moe = false;
	for (int32_t i = 0; i < hp->n_layer; i++)
		any_moe = any_moe || hp->layer[i].n_expert > 0;
	if (r.n_expert > 0 && !any_moe)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "%s: mixture-of-experts layers (%s.expert_count = %u) are not "
			       "supported for this architecture (layermesh runs them for qwen3moe, "
			       "qwen35moe, gemma4 and gpt-oss)",
			       arch, arch, r.n_expert);
	if ((rc = hp_check_layers(hp, d)) != 0)
		return rc;

	const struct gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
	if (embd == NULL)
		return lm_fail(d, LM_EFORMAT, "tensor 'token_embd.weight' is missing");
	if (embd->ne[1] <= 0 || embd->ne[1] > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "token_embd.weight has %lld rows",
			       (long long)embd->ne[1]);
	hp->n_vocab = (int32_t)embd->ne[1];
	/* The count only: a worker opens the file without the vocabulary's strings (gguf.h). */
	const struct gguf_kv *toks = gguf_find(f, "tokenizer.ggml.tokens");
	if (toks != NULL && toks->type == GGUF_TYPE_ARRAY && toks->v.arr.type == GGUF_TYPE_STRING &&
	    toks->v.arr.n != (uint64_t)hp->n_vocab)
		return lm_fail(d, LM_EFORMAT,
			       "the vocabulary has %llu tokens but token_embd has %d",
			       (unsigned long long)toks->v.arr.n, hp->n_vocab);
	hp->tied = gguf_find_tensor(f, "output.weight") == NULL;
	return 0;
}

struct kv_geom lm_hparams_kv_geom(const struct lm_hparams *hp, int32_t il)
{
	const struct lm_layer_hparams *l = &hp->layer[il];
	if (l->recurrent) {
		const struct lm_ssm_params *s = &hp->ssm;
		int64_t conv_dim = (int64_t)(2 * s->n_k_heads + s->n_v_heads) * s->head_dim;
		return (struct kv_geom){.conv = (int64_t)(s->conv_kernel - 1) * conv_dim,
					.state = (int64_t)s->n_v_heads * s->head_dim * s->head_dim};
	}
	return (struct kv_geom){
		.n_kv_heads = l->n_head_kv, .head_dim = l->head_dim, .window = l->window};
}

struct lm_widths lm_hparams_widths(const struct lm_hparams *hp, int32_t begin, int32_t end)
{
	struct lm_widths w = {0};
	for (int32_t il = begin; il < end; il++) {
		const struct lm_layer_hparams *l = &hp->layer[il];
		int32_t ff = l->n_expert > 0 ? l->n_ff_exp : l->n_ff;
		ff = l->n_ff_shexp > ff ? l->n_ff_shexp : ff;
		w.ff_dim = ff > w.ff_dim ? ff : w.ff_dim;
		w.n_expert = l->n_expert > w.n_expert ? l->n_expert : w.n_expert;
		w.n_expert_used =
			l->n_expert_used > w.n_expert_used ? l->n_expert_used : w.n_expert_used;
		if (l->recurrent) {
			w.n_recurrent++;
			continue;
		}
		int32_t q = l->n_head * l->head_dim * (l->q_gate ? 2 : 1);
		int32_t k = l->n_head_kv * l->head_dim;
		int32_t g = l->n_head / l->n_head_kv;
		w.q_dim = q > w.q_dim ? q : w.q_dim;
		w.kv_dim = k > w.kv_dim ? k : w.kv_dim;
		w.head_dim = l->head_dim > w.head_dim ? l->head_dim : w.head_dim;
		w.group = g > w.group ? g : w.group;
		w.n_heads = l->n_head > w.n_heads ? l->n_head : w.n_heads;
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
		if (t->layer >= hp->n_layer && t->layer < hp->n_layer + hp->n_layer_nextn)
			continue; /* a prediction layer: not run, not planned */
		if (t->layer >= 0) {
			if (t->layer >= hp->n_layer)
				return lm_fail(
					d, LM_EFORMAT,
					"tensor '%s' belongs to layer %d of a %d-layer model",
					t->name, t->layer, hp->n_layer);
			struct lm_layer_cost *c = &costs->layer[t->layer];
			const struct lm_layer_hparams *l = &hp->layer[t->layer];
			c->weight_bytes += t->size;
			/* A bias (gpt-oss's experts' are 2-D, a row per expert) is added, not
			 * multiplied: bytes only. */
			const size_t len = strlen(t->name);
			const bool bias = len > 5 && strcmp(t->name + len - 5, ".bias") == 0;
			if (t->n_dims >= 2 && !bias) {
				c->params += model_elems(t);
				c->flops += 2 * model_elems(t);
			}
			/* An expert tensor ([.., .., n_expert]): a token reads n_expert_used of
			 * its n_expert blocks. */
			if (t->n_dims == 3 && l->n_expert > 0 && t->ne[2] == l->n_expert)
				c->flops -= 2 * model_elems(t) / (uint64_t)l->n_expert *
					    (uint64_t)(l->n_expert - l->n_expert_used);
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

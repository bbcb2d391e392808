/* weights.c — weight binding for a slice. See weights.h. */
#include "engine/weights.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "engine/arch.h"
#include "engine/dnet.h"

/* ------------------------------------------------------------------ binding */

static const struct {
	const char *name;
	size_t offset;
} model_layer_tensors[LM_T_COUNT] = {
#define MODEL_TENSOR_(field, name) \
	[LM_T_##field] = {name, offsetof(struct lm_layer_weights, field)},
	LM_LAYER_TENSORS(MODEL_TENSOR_)
#undef MODEL_TENSOR_
};

const char *lm_layer_tensor_name(enum lm_layer_tensor t)
{
	return model_layer_tensors[t].name;
}

struct lm_weight *lm_layer_tensor(struct lm_layer_weights *l, enum lm_layer_tensor t)
{
	return (struct lm_weight *)((char *)l + model_layer_tensors[t].offset);
}

int lm_model_bind(struct lm_model *m, struct lm_weight *w, const char *name, int64_t ne0,
		  int64_t ne1, lm_diag *d)
{
	const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
	if (t == NULL)
		return lm_fail(d, LM_ENOTFOUND, "tensor '%s' is missing", name);
	if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
		return lm_fail(
			d, LM_EFORMAT,
			"tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
			name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
			(long long)t->ne[3], (long long)ne0, (long long)ne1);
	const struct lm_dtype_info *info = lm_dtype_info(t->type);
	if (ne1 == 1 && t->type != LM_F32)
		return lm_fail(d, LM_EUNSUPPORTED, "tensor '%s' is %s; norm weights must be f32",
			       name, info->name);
	const size_t len = strlen(name);
	if (len > 5 && strcmp(name + len - 5, ".bias") == 0 && t->type != LM_F32)
		return lm_fail(d, LM_EUNSUPPORTED, "tensor '%s' is %s; biases must be f32", name,
			       info->name);
	if (!info->compute)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "tensor '%s' has type %s, which layermesh's kernels do not support "
			       "(f32, f16, bf16, q8_0, q4_0, q4_K, q6_K, mxfp4)",
			       name, info->name);
	if (t->data == NULL)
		return lm_fail(d, LM_EINVAL, "tensor '%s' was not mapped", name);
	uint64_t row;
	lm_dtype_row_bytes(t->type, (uint64_t)ne0, &row);
	*w = (struct lm_weight){.type = t->type, .ne0 = ne0, .ne1 = ne1, .row_bytes = (size_t)row};
	int rc = lm_backend_weight_init(m->backend, w, t->data);
	if (rc != 0)
		return lm_fail(d, rc, "tensor '%s': the %s backend cannot take it: %s", name,
			       m->backend != NULL ? m->backend->iface->name : "host",
			       lm_strerror(rc));
	m->weight_bytes += t->size;
	return 0;
}

static void model_unbind(struct lm_model *m, struct lm_weight *w)
{
	if (w->data != NULL)
		lm_backend_weight_fini(m->backend, w);
}

/* Whether a layer of the slice applies the rope frequency factors (rope_freqs.weight). */
static bool model_uses_rope_freqs(const struct lm_model *m)
{
	for (int32_t il = m->slice.begin; il < m->slice.end; il++)
		if (m->hp.layer[il].rope_factors)
			return true;
	return false;
}

/* Tensors this slice needs: its layers, the embedding on the first stage, the head (and the
 * embedding again when tied) on the last, the rope factors where its layers use them. */
static bool model_want(const struct gguf_tensor *t, void *arg)
{
	const struct lm_model *m = arg;
	if (t->layer >= 0)
		return t->layer >= m->slice.begin && t->layer < m->slice.end;
	if (strcmp(t->name, "token_embd.weight") == 0)
		return m->slice.embedding || (m->slice.head && m->hp.tied);
	if (strcmp(t->name, "output_norm.weight") == 0 || strcmp(t->name, "output.weight") == 0)
		return m->slice.head;
	if (strcmp(t->name, "rope_freqs.weight") == 0)
		return model_uses_rope_freqs(m);
	return false;
}

/* Whether `suffix` (after "blk.N.") is a tensor of the architecture's layers. */
static bool model_arch_has(const struct lm_arch *a, const char *suffix)
{
	for (size_t i = 0; i < a->n_tensors; i++)
		if (strcmp(lm_layer_tensor_name(a->tensors[i].t), suffix) == 0)
			return true;
	return false;
}

/* Every tensor of the file must be one the architecture's graph computes with: a tensor
 * layermesh does not implement (experts, biases llama has no use for, fused projections) is
 * refused with its name rather than silently left out of the computation. */
static int model_check_unsupported(const struct lm_model *m, lm_diag *d)
{
	for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(m->file, i);
		if (t->layer >= m->hp.n_layer && t->layer < m->hp.n_layer + m->hp.n_layer_nextn)
			continue; /* a multi-token prediction layer: ignored (lm_model_open) */
		for (const struct lm_refusal *r = m->arch->refused; r != NULL && r->part != NULL;
		     r++)
			if (strstr(t->name, r->part) != NULL)
				return lm_fail(d, LM_EUNSUPPORTED, "tensor '%s': %s", t->name,
					       r->why);
		const char *dot = t->layer >= 0 ? strchr(t->name + 4, '.') : NULL;
		bool known = dot != NULL ? model_arch_has(m->arch, dot + 1)
					 : strcmp(t->name, "token_embd.weight") == 0 ||
						   strcmp(t->name, "output_norm.weight") == 0 ||
						   strcmp(t->name, "output.weight") == 0 ||
						   (strcmp(t->name, "rope_freqs.weight") == 0 &&
						    m->hp.has_rope_freqs);
		if (!known)
			return lm_fail(d, LM_EUNSUPPORTED,
				       "tensor '%s' is not one layermesh's %s computes with: "
				       "refusing the file rather than leaving it out",
				       t->name, m->arch->name);
	}
	return 0;
}

/* The size of dimension `dim` of a tensor of layer il. */
static int64_t model_dim(const struct lm_hparams *hp, int32_t il, enum lm_dim dim)
{
	switch (dim) {
	case LM_DIM_EMBD:
		return hp->n_embd;
	case LM_DIM_Q:
		return (int64_t)hp->layer[il].n_head * hp->layer[il].head_dim;
	case LM_DIM_KV:
		return (int64_t)hp->layer[il].n_head_kv * hp->layer[il].head_dim;
	case LM_DIM_FF:
		return hp->layer[il].n_ff;
	case LM_DIM_HEAD:
		return hp->layer[il].head_dim;
	case LM_DIM_HEADS:
		return hp->layer[il].n_head;
	case LM_DIM_EXPERTS:
		return hp->layer[il].n_expert;
	case LM_DIM_FF_EXP:
		return hp->layer[il].n_ff_exp;
	case LM_DIM_FF_EXP2:
		return 2 * (int64_t)hp->layer[il].n_ff_exp;
	case LM_DIM_QG:
		return (int64_t)hp->layer[il].n_head * 2 * hp->layer[il].head_dim;
	case LM_DIM_CONV:
		return lm_dnet_conv_dim(&hp->ssm);
	case LM_DIM_VALUE:
		return lm_dnet_value_dim(&hp->ssm);
	case LM_DIM_VHEADS:
		return hp->ssm.n_v_heads;
	case LM_DIM_SSM_HEAD:
		return hp->ssm.head_dim;
	case LM_DIM_CONV_K:
		return hp->ssm.conv_kernel;
	case LM_DIM_FF_SHEXP:
		return hp->layer[il].n_ff_shexp;
	case LM_DIM_ONE:
		break;
	}
	return 1;
}

/* The experts' array of layer l that tensor t fills (a fused gate_up: the gate's, and the up's
 * beside it). */
static struct lm_weight **model_exps_of(struct lm_layer_weights *l, enum lm_layer_tensor t)
{
	return t == LM_T_gate_exps || t == LM_T_gate_up_exps ? &l->exps.gate
	       : t == LM_T_up_exps                           ? &l->exps.up
							     : &l->exps.down;
}

/* Binds the 3-D tensor `name` of layer il, (ne0, ne1, n_expert), expert by expert: each a
 * matrix of ne1 rows pointing at its own block of the mapping. */
static int model_bind_experts(struct lm_model *m, struct lm_layer_weights *l, int32_t il,
			      enum lm_layer_tensor which, const char *name, int64_t ne0,
			      int64_t ne1, lm_diag *d)
{
	const int32_t n = m->hp.layer[il].n_expert;
	const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
	if (t == NULL)
		return lm_fail(d, LM_ENOTFOUND, "tensor '%s' is missing", name);
	if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != n || t->ne[3] != 1)
		return lm_fail(d, LM_EFORMAT,
			       "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, "
			       "%lld, %d]",
			       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
			       (long long)t->ne[3], (long long)ne0, (long long)ne1, n);
	const struct lm_dtype_info *info = lm_dtype_info(t->type);
	if (!info->compute)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "tensor '%s' has type %s, which layermesh's kernels do not support "
			       "(f32, f16, bf16, q8_0, q4_0, q4_K, q6_K, mxfp4)",
			       name, info->name);
	if (t->data == NULL)
		return lm_fail(d, LM_EINVAL, "tensor '%s' was not mapped", name);
	const bool fused = which == LM_T_gate_up_exps;
	struct lm_weight **exps = model_exps_of(l, which);
	if (*exps != NULL || (fused && l->exps.up != NULL))
		return lm_fail(d, LM_EFORMAT,
			       "tensor '%s': layer %d has both fused and separate gate/up experts",
			       name, il);
	if ((*exps = calloc((size_t)n, sizeof **exps)) == NULL ||
	    (fused && (l->exps.up = calloc((size_t)n, sizeof *l->exps.up)) == NULL))
		return lm_fail(d, LM_ENOMEM, "out of memory");
	l->exps.n = n;
	uint64_t row;
	lm_dtype_row_bytes(t->type, (uint64_t)ne0, &row);
	const size_t block = (size_t)row * (size_t)ne1;
	/* Fused: the gate's rows, then the up's, in each expert's block. */
	const int64_t rows = fused ? ne1 / 2 : ne1;
	for (int32_t e = 0; e < n * (fused ? 2 : 1); e++) {
		const int32_t x = fused ? e / 2 : e;
		struct lm_weight *w = fused && e % 2 == 1 ? &l->exps.up[x] : &(*exps)[x];
		*w = (struct lm_weight){
			.type = t->type, .ne0 = ne0, .ne1 = rows, .row_bytes = (size_t)row};
		const size_t at = (size_t)x * block + (size_t)(e % 2 * fused) * (size_t)rows * row;
		int rc = lm_backend_weight_init(m->backend, w, (const uint8_t *)t->data + at);
		if (rc != 0)
			return lm_fail(d, rc,
				       "tensor '%s', expert %d: the %s backend cannot take "
				       "it: %s",
				       name, x,
				       m->backend != NULL ? m->backend->iface->name : "host",
				       lm_strerror(rc));
	}
	m->weight_bytes += t->size;
	return 0;
}

/* Unbinds and frees a layer's experts. */
static void model_unbind_experts(struct lm_model *m, struct lm_layer_weights *l)
{
	struct lm_weight *all[] = {l->exps.gate, l->exps.up, l->exps.down};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		for (int32_t e = 0; all[i] != NULL && e < l->exps.n; e++)
			if (all[i][e].data != NULL)
				lm_backend_weight_fini(m->backend, &all[i][e]);
		free(all[i]);
	}
	memset(&l->exps, 0, sizeof l->exps);
}

/* A mixture-of-experts layer's experts complete, and their output scales (host floats, read
 * in place from the mapping) finite. */
static int model_check_experts(struct lm_model *m, struct lm_layer_weights *l, int32_t il,
			       lm_diag *d)
{
	if (l->exps.gate == NULL || l->exps.up == NULL || l->exps.down == NULL)
		return lm_fail(d, LM_EFORMAT,
			       "layer %d: its experts need ffn_down_exps and either "
			       "ffn_gate_up_exps or ffn_gate_exps and ffn_up_exps",
			       il);
	if (l->down_exps_s.data == NULL)
		return 0;
	char name[96];
	snprintf(name, sizeof name, "blk.%d.%s", il, lm_layer_tensor_name(LM_T_down_exps_s));
	const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
	const float *s = t->data;
	for (int32_t e = 0; e < l->exps.n; e++)
		if (!isfinite(s[e]))
			return lm_fail(d, LM_EFORMAT,
				       "tensor '%s': expert %d's scale is not finite", name, e);
	l->exps.down_scale = s;
	return 0;
}

/* Binds layer il's tensors as the architecture's table lists them. */
static int model_bind_layer(struct lm_model *m, int32_t il, lm_diag *d)
{
	struct lm_layer_weights *l = &m->layers[il - m->slice.begin];
	const bool moe = m->hp.layer[il].n_expert > 0;
	char name[96];
	for (size_t i = 0; i < m->arch->n_tensors; i++) {
		const struct lm_tensor_spec *ts = &m->arch->tensors[i];
		if (ts->kind != LM_KIND_ANY &&
		    (ts->kind == LM_KIND_RECURRENT) != m->hp.layer[il].recurrent)
			continue;
		snprintf(name, sizeof name, "blk.%d.%s", il, lm_layer_tensor_name(ts->t));
		if (ts->moe && !moe) {
			if (gguf_find_tensor(m->file, name) != NULL)
				return lm_fail(d, LM_EFORMAT,
					       "tensor '%s': layer %d has no experts by the "
					       "metadata (%s.expert_count, ffn_gate_inp)",
					       name, il, m->hp.arch);
			continue;
		}
		int rc = ts->ne2 == LM_DIM_EXPERTS
				 ? model_bind_experts(m, l, il, ts->t, name,
						      model_dim(&m->hp, il, ts->ne0),
						      model_dim(&m->hp, il, ts->ne1), d)
				 : lm_model_bind(m, lm_layer_tensor(l, ts->t), name,
						 model_dim(&m->hp, il, ts->ne0),
						 model_dim(&m->hp, il, ts->ne1), d);
		if (rc == LM_ENOTFOUND && ts->optional)
			continue;
		if (rc != 0)
			return rc == LM_ENOTFOUND ? LM_EFORMAT : rc;
	}
	int rc;
	if (moe && (rc = model_check_experts(m, l, il, d)) != 0)
		return rc;
	/* The output scale is one number: read from the file (host memory) now. */
	l->out_scale_value = 1.0f;
	if (l->out_scale.data != NULL) {
		snprintf(name, sizeof name, "blk.%d.%s", il, lm_layer_tensor_name(LM_T_out_scale));
		const struct gguf_tensor *t = gguf_find_tensor(m->file, name);
		memcpy(&l->out_scale_value, t->data, sizeof(float));
		if (!isfinite(l->out_scale_value))
			return lm_fail(d, LM_EFORMAT, "tensor '%s' is not finite", name);
	}
	return 0;
}

/* rope_freqs.weight, shared by every layer that applies it: they must rotate alike. */
static int model_bind_rope_freqs(struct lm_model *m, lm_diag *d)
{
	int32_t n_rot = 0;
	for (int32_t il = m->slice.begin; il < m->slice.end; il++) {
		const struct lm_layer_hparams *l = &m->hp.layer[il];
		if (!l->rope_factors)
			continue;
		if (n_rot != 0 && l->rope.n_rot != n_rot)
			return lm_fail(
				d, LM_EFORMAT,
				"layers rotating %d and %d dimensions share rope_freqs.weight",
				n_rot, l->rope.n_rot);
		n_rot = l->rope.n_rot;
	}
	if (n_rot == 0)
		return 0;
	return lm_model_bind(m, &m->rope_freqs, "rope_freqs.weight", n_rot / 2, 1, d);
}

int lm_model_open(struct lm_model *m, const char *path, const struct lm_slice *slice,
		  struct lm_backend *backend, unsigned flags, lm_diag *d)
{
	int rc;

	memset(m, 0, sizeof *m);
	m->backend = backend;
	unsigned open_flags = (flags & LM_MODEL_NO_VOCAB) != 0 ? GGUF_OPEN_NO_VOCAB : 0;
	if ((rc = gguf_open_with(path, open_flags, &m->file, d)) != 0)
		return rc;
	if ((rc = lm_hparams_load(m->file, &m->hp, d)) != 0)
		goto fail;
	if ((m->arch = lm_arch_find(m->hp.arch)) == NULL) {
		rc = lm_fail(d, LM_EUNSUPPORTED,
			     "architecture '%s' is not supported (layermesh runs %s)", m->hp.arch,
			     lm_arch_names());
		goto fail;
	}
	if (m->hp.n_layer_nextn > 0)
		lm_info("%s: %d multi-token prediction layer%s (blk.%d and on) ignored: layermesh "
			"runs the model's %d layers",
			path, m->hp.n_layer_nextn, m->hp.n_layer_nextn == 1 ? "" : "s",
			m->hp.n_layer, m->hp.n_layer);
	if ((rc = model_check_unsupported(m, d)) != 0)
		goto fail;
	m->slice = slice != NULL ? *slice : (struct lm_slice){0, m->hp.n_layer, true, true};
	if (m->slice.begin < 0 || m->slice.begin > m->slice.end || m->slice.end > m->hp.n_layer) {
		rc = lm_fail(d, LM_ERANGE, "slice [%d, %d) is not within the model's %d layers",
			     m->slice.begin, m->slice.end, m->hp.n_layer);
		goto fail;
	}
	m->fingerprint = gguf_fingerprint(m->file);
	if ((rc = gguf_map(m->file, model_want, m, (flags & LM_MODEL_POPULATE) != 0,
			   &m->mapped_bytes, d)) != 0)
		goto fail;
	m->digest = gguf_tensor_digest(m->file);
	m->layers = calloc((size_t)(m->slice.end - m->slice.begin) + 1, sizeof *m->layers);
	if (m->layers == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto fail;
	}
	for (int32_t il = m->slice.begin; il < m->slice.end; il++)
		if ((rc = model_bind_layer(m, il, d)) != 0)
			goto fail;
	if ((rc = model_bind_rope_freqs(m, d)) != 0)
		goto fail;
	int64_t e = m->hp.n_embd, v = m->hp.n_vocab;
	if (m->slice.embedding &&
	    (rc = lm_model_bind(m, &m->tok_embd, "token_embd.weight", e, v, d)) != 0)
		goto fail;
	if (m->slice.head) {
		if ((rc = lm_model_bind(m, &m->output_norm, "output_norm.weight", e, 1, d)) != 0)
			goto fail;
		/* A tied head on the first stage is the embedding's weight itself: a tensor is
		 * bound once, since a backend may rearrange its bytes as it binds it. */
		if (m->hp.tied && m->slice.embedding) {
			m->output = m->tok_embd;
			m->output_shared = true;
		} else if ((rc = lm_model_bind(m, &m->output,
					       m->hp.tied ? "token_embd.weight" : "output.weight",
					       e, v, d)) != 0) {
			goto fail;
		}
	}
	if ((rc = gguf_seal(m->file, d)) != 0)
		goto fail;
	return 0;
fail:
	if (rc == LM_ENOTFOUND) /* a tensor the model needs is missing */
		rc = LM_EFORMAT;
	lm_diag_prefix(d, "%s", path);
	lm_model_close(m);
	return rc;
}

void lm_model_close(struct lm_model *m)
{
	if (m == NULL)
		return;
	if (m->layers != NULL)
		for (int32_t i = 0; i < m->slice.end - m->slice.begin; i++) {
			for (int t = 0; t < LM_T_COUNT; t++)
				model_unbind(
					m, lm_layer_tensor(&m->layers[i], (enum lm_layer_tensor)t));
			model_unbind_experts(m, &m->layers[i]);
		}
	model_unbind(m, &m->tok_embd);
	model_unbind(m, &m->output_norm);
	if (!m->output_shared)
		model_unbind(m, &m->output);
	model_unbind(m, &m->rope_freqs);
	free(m->layers);
	gguf_close(m->file);
	memset(m, 0, sizeof *m);
}

const struct lm_layer_weights *lm_model_layer(const struct lm_model *m, int32_t il)
{
	if (il < m->slice.begin || il >= m->slice.end)
		return NULL;
	return &m->layers[il - m->slice.begin];
}

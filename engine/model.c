/* model.c — weight binding for a slice. See model.h. */
#include "engine/model.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/arch.h"

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
	if (!info->compute)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "tensor '%s' has type %s, which layermesh's kernels do not support "
			       "(f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)",
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

/* Tensors this slice needs: its layers, the embedding on the first stage, the head (and the
 * embedding again when tied) on the last. */
static bool model_want(const struct gguf_tensor *t, void *arg)
{
	const struct lm_model *m = arg;
	if (t->layer >= 0)
		return t->layer >= m->slice.begin && t->layer < m->slice.end;
	if (strcmp(t->name, "token_embd.weight") == 0)
		return m->slice.embedding || (m->slice.head && m->hp.tied);
	if (strcmp(t->name, "output_norm.weight") == 0 || strcmp(t->name, "output.weight") == 0)
		return m->slice.head;
	return false;
}

/* Tensors the architecture's graph would use that layermesh does not implement: refuse rather
 * than silently compute something else. */
static int model_check_unsupported(const struct lm_model *m, lm_diag *d)
{
	for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) {
		const char *name = gguf_tensor_at(m->file, i)->name;
		for (const char *const *r = m->arch->refused; r != NULL && *r != NULL; r++)
			if (strstr(name, *r) != NULL)
				return lm_fail(d, LM_EUNSUPPORTED,
					       "tensor '%s': layermesh's %s does not implement "
					       "it (biases, rope frequency factors and "
					       "mixture-of-experts are not supported)",
					       name, m->arch->name);
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
		return (int64_t)hp->n_head[il] * hp->head_dim;
	case LM_DIM_KV:
		return (int64_t)hp->n_head_kv[il] * hp->head_dim;
	case LM_DIM_FF:
		return hp->n_ff[il];
	case LM_DIM_ONE:
		break;
	}
	return 1;
}

/* Binds layer il's tensors as the architecture's table lists them. */
static int model_bind_layer(struct lm_model *m, int32_t il, lm_diag *d)
{
	struct lm_layer_weights *l = &m->layers[il - m->slice.begin];
	char name[96];
	for (size_t i = 0; i < m->arch->n_tensors; i++) {
		const struct lm_tensor_spec *ts = &m->arch->tensors[i];
		snprintf(name, sizeof name, "blk.%d.%s", il, lm_layer_tensor_name(ts->t));
		int rc = lm_model_bind(m, lm_layer_tensor(l, ts->t), name,
				       model_dim(&m->hp, il, ts->ne0),
				       model_dim(&m->hp, il, ts->ne1), d);
		if (rc == LM_ENOTFOUND && ts->optional)
			continue;
		if (rc != 0)
			return rc == LM_ENOTFOUND ? LM_EFORMAT : rc;
	}
	return 0;
}

int lm_model_open(struct lm_model *m, const char *path, const struct lm_slice *slice,
		  struct lm_backend *backend, bool populate, lm_diag *d)
{
	int rc;

	memset(m, 0, sizeof *m);
	m->backend = backend;
	if ((rc = gguf_open(path, &m->file, d)) != 0)
		return rc;
	if ((rc = lm_hparams_load(m->file, &m->hp, d)) != 0)
		goto fail;
	if ((m->arch = lm_arch_find(m->hp.arch)) == NULL) {
		rc = lm_fail(d, LM_EUNSUPPORTED,
			     "architecture '%s' is not supported (layermesh runs %s)", m->hp.arch,
			     lm_arch_names());
		goto fail;
	}
	if ((rc = model_check_unsupported(m, d)) != 0)
		goto fail;
	m->slice = slice != NULL ? *slice : (struct lm_slice){0, m->hp.n_layer, true, true};
	if (m->slice.begin < 0 || m->slice.begin > m->slice.end || m->slice.end > m->hp.n_layer) {
		rc = lm_fail(d, LM_ERANGE, "slice [%d, %d) is not within the model's %d layers",
			     m->slice.begin, m->slice.end, m->hp.n_layer);
		goto fail;
	}
	m->fingerprint = gguf_fingerprint(m->file);
	if ((rc = gguf_map(m->file, model_want, m, populate, &m->mapped_bytes, d)) != 0)
		goto fail;
	m->layers = calloc((size_t)(m->slice.end - m->slice.begin) + 1, sizeof *m->layers);
	if (m->layers == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto fail;
	}
	for (int32_t il = m->slice.begin; il < m->slice.end; il++)
		if ((rc = model_bind_layer(m, il, d)) != 0)
			goto fail;
	int64_t e = m->hp.n_embd, v = m->hp.n_vocab;
	if (m->slice.embedding &&
	    (rc = lm_model_bind(m, &m->tok_embd, "token_embd.weight", e, v, d)) != 0)
		goto fail;
	if (m->slice.head) {
		if ((rc = lm_model_bind(m, &m->output_norm, "output_norm.weight", e, 1, d)) != 0)
			goto fail;
		const char *out = m->hp.tied ? "token_embd.weight" : "output.weight";
		/* A tied head on the first stage shares the embedding's bytes: count them once. */
		uint64_t before = m->weight_bytes;
		if ((rc = lm_model_bind(m, &m->output, out, e, v, d)) != 0)
			goto fail;
		if (m->hp.tied && m->slice.embedding)
			m->weight_bytes = before;
	}
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
		}
	model_unbind(m, &m->tok_embd);
	model_unbind(m, &m->output_norm);
	model_unbind(m, &m->output);
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

/* arch_qwen35.c — qwen35 (Qwen 3.5 dense: 0.8B to 27B) and qwen35moe (35B-A3B to 397B-A17B): gated delta-net (linear attention)
 * layers and, every full_attention_interval-th layer, gated full attention (llama.cpp release
 * v0.4.0, src/models/qwen35.cpp). Which layer is which comes from the file (hparams_arch.c).
 *
 *   per layer (x is the residual stream):
 *     h = rmsnorm(x) * attn_norm
 *     recurrent layer:
 *       qkv, z, b, a = h Wqkv, h Wgate, h Wbeta, h Walpha
 *       o = the gated delta-net of the token over its slot's state (engine/dnet.h)
 *       x += o Wssm_out
 *     attention layer:
 *       qg = h Wq: per head, head_dim queries then head_dim gates
 *       q, k = per-head rmsnorm(q) * q_norm, (h Wk) * k_norm;  v = h Wv
 *       rope(q), rope(k): NeoX over rope.dimension_count of each head (the multi-section
 *       rope of a text token, hparams_arch.c)
 *       x += (attention(q, K, V) * sigmoid(gate)) Wo          (scale 1/sqrt(head_dim))
 *     h = rmsnorm(x) * post_attention_norm;  x += (silu(h Wgate) * (h Wup)) Wdown
 *   qwen35moe: the FFN is qwen3moe's mixture of experts plus a gated shared expert, both in
 *   engine/moe.h (struct lm_moe_shared),
 *       x += moe(h) + sigmoid(h . gate_inp_shexp) * (silu(h Wg_sh) * (h Wu_sh)) Wd_sh
 *   (llama.cpp, src/models/qwen35moe.cpp)
 *
 * The delta rule and the attention gate run on the host, on copies of the projections (a
 * download and an upload per layer: memcpy on the CPU backend).
 */
#include <math.h>
#include <string.h>

#include "engine/arch.h"
#include "engine/dnet.h"
#include "engine/kv_cache.h"

static const struct lm_tensor_spec qwen35_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE),
	LM_TENSOR(attn_post_norm, EMBD, ONE),
	LM_TENSOR_ATTN(wq, EMBD, QG),
	LM_TENSOR_ATTN(wk, EMBD, KV),
	LM_TENSOR_ATTN(wv, EMBD, KV),
	LM_TENSOR_ATTN(q_norm, HEAD, ONE),
	LM_TENSOR_ATTN(k_norm, HEAD, ONE),
	LM_TENSOR_ATTN(wo, Q, EMBD),
	LM_TENSOR_REC(wqkv, EMBD, CONV),
	LM_TENSOR_REC(wqkv_gate, EMBD, VALUE),
	LM_TENSOR_REC(ssm_conv1d, CONV_K, CONV),
	LM_TENSOR_REC(ssm_dt, VHEADS, ONE),
	LM_TENSOR_REC(ssm_a, VHEADS, ONE),
	LM_TENSOR_REC(ssm_beta, EMBD, VHEADS),
	LM_TENSOR_REC(ssm_alpha, EMBD, VHEADS),
	LM_TENSOR_REC(ssm_norm, SSM_HEAD, ONE),
	LM_TENSOR_REC(ssm_out, VALUE, EMBD),
	LM_TENSOR(w_gate, EMBD, FF),
	LM_TENSOR(w_up, EMBD, FF),
	LM_TENSOR(w_down, FF, EMBD),
};

static const struct lm_refusal qwen35_refused[] = {
	{"_exps", "experts are qwen35moe's, not qwen35's"},
	{"ffn_gate_inp", "experts are qwen35moe's, not qwen35's"},
	{NULL, NULL},
};

/* Host copy of n floats of backend memory. */
static int q35_down(struct lm_forward *fw, float *dst, const void *src, size_t n, int32_t il,
		    const char *what, lm_diag *d)
{
	int rc = fw->be->iface->download(fw->be->ctx, dst, src, n * sizeof(float));
	return rc != 0 ? lm_layer_fail(fw, rc, il, what, d) : 0;
}

/* The delta-net over the batch, token by token in batch order: o from qkv, z, b, a. */
static int q35_delta(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_ssm_params *p = &fw->model->hp.ssm;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	const size_t n = (size_t)b->n, cd = (size_t)lm_dnet_conv_dim(p);
	const size_t vd = (size_t)lm_dnet_value_dim(p), nv = (size_t)p->n_v_heads;
	if (w->ssm_conv1d.type != LM_F32)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "tensor 'blk.%d.ssm_conv1d.weight' is %s; "
			       "layermesh reads it as f32",
			       il, lm_dtype_name(w->ssm_conv1d.type));
	float *qkv = fw->dn.host, *z = qkv + n * cd, *bb = z + n * vd, *aa = bb + n * nv;
	float *o = aa + n * nv, *conv = o + n * vd, *dt = conv + cd * (size_t)p->conv_kernel;
	float *ssm_a = dt + nv, *norm = ssm_a + nv, *work = norm + p->head_dim;
	int rc;
	if ((rc = q35_down(fw, qkv, fw->dn.qkv, n * cd, il, "download qkv", d)) ||
	    (rc = q35_down(fw, z, fw->dn.z, n * vd, il, "download z", d)) ||
	    (rc = q35_down(fw, bb, fw->dn.b, n * nv, il, "download beta", d)) ||
	    (rc = q35_down(fw, aa, fw->dn.a, n * nv, il, "download alpha", d)) ||
	    (rc = q35_down(fw, conv, w->ssm_conv1d.data, cd * (size_t)p->conv_kernel, il,
			   "download ssm_conv1d", d)) ||
	    (rc = q35_down(fw, dt, w->ssm_dt.data, nv, il, "download ssm_dt", d)) ||
	    (rc = q35_down(fw, ssm_a, w->ssm_a.data, nv, il, "download ssm_a", d)) ||
	    (rc = q35_down(fw, norm, w->ssm_norm.data, (size_t)p->head_dim, il, "download ssm_norm",
			   d)))
		return rc;
	if ((rc = lm_backend_sync(fw->be)) != 0)
		return lm_layer_fail(fw, rc, il, "sync", d);
	const struct lm_dnet_weights dw = {.conv = conv, .dt_bias = dt, .a = ssm_a, .norm = norm};
	for (size_t t = 0; t < n; t++) {
		float *ring, *state;
		if ((rc = kv_cache_rec(fw->kv, il, b->loc[t].slot, &ring, &state, d)) != 0)
			return rc;
		lm_dnet_token(p, &dw, fw->model->hp.rms_eps, ring, state, qkv + t * cd, z + t * vd,
			      bb + t * nv, aa + t * nv, o + t * vd, work);
		/* The states after the last `keep` positions of the slot's tokens but its last:
		 * those a rejected draft rolls back to (kv_cache.h). */
		const int32_t pos = b->loc[t].pos, last = lm_batch_slot_last(b, (int32_t)t);
		if (pos < last && pos >= last - fw->kv->rec_keep)
			kv_cache_rec_snapshot(fw->kv, il, b->loc[t].slot, pos);
	}
	if ((rc = fw->be->iface->upload(fw->be->ctx, fw->dn.o, o, n * vd * sizeof(float))) != 0)
		return lm_layer_fail(fw, rc, il, "upload o", d);
	return 0;
}

static int q35_recurrent(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	int rc;
	if ((rc = lm_layer_proj(fw, fw->dn.qkv, &w->wqkv, NULL, fw->h, il, n, "attn_qkv", d)) ||
	    (rc = lm_layer_proj(fw, fw->dn.z, &w->wqkv_gate, NULL, fw->h, il, n, "attn_gate", d)) ||
	    (rc = lm_layer_proj(fw, fw->dn.b, &w->ssm_beta, NULL, fw->h, il, n, "ssm_beta", d)) ||
	    (rc = lm_layer_proj(fw, fw->dn.a, &w->ssm_alpha, NULL, fw->h, il, n, "ssm_alpha", d)) ||
	    (rc = q35_delta(fw, il, b, d)))
		return rc;
	return lm_layer_proj(fw, fw->h, &w->ssm_out, NULL, fw->dn.o, il, n, "ssm_out", d);
}

/* fw->q holds [n][heads][queries, gate] of head_dim each: the queries go back packed
 * ([n][heads][head_dim]) and the gates stay on the host, in gate. */
static int q35_split_gate(struct lm_forward *fw, int32_t il, int32_t n, float *gate, lm_diag *d)
{
	const struct lm_layer_hparams *l = &fw->model->hp.layer[il];
	const size_t hd = (size_t)l->head_dim, heads = (size_t)l->n_head;
	const size_t qd = heads * hd;
	float *qg = gate + (size_t)n * qd; /* the host area holds n x 3 x qd floats */
	int rc;
	if ((rc = q35_down(fw, qg, fw->q, (size_t)n * 2 * qd, il, "download q", d)) != 0)
		return rc;
	if ((rc = lm_backend_sync(fw->be)) != 0)
		return lm_layer_fail(fw, rc, il, "sync", d);
	for (size_t t = 0; t < (size_t)n; t++)
		for (size_t h = 0; h < heads; h++) {
			const float *src = qg + (t * heads + h) * 2 * hd;
			memmove(qg + (t * heads + h) * hd, src, hd * sizeof(float));
			memcpy(gate + (t * heads + h) * hd, src + hd, hd * sizeof(float));
		}
	if ((rc = fw->be->iface->upload(fw->be->ctx, fw->q, qg, (size_t)n * qd * sizeof(float))) !=
	    0)
		return lm_layer_fail(fw, rc, il, "upload q", d);
	return 0;
}

/* fw->att *= sigmoid(gate), on the host. */
static int q35_apply_gate(struct lm_forward *fw, int32_t il, int32_t n, const float *gate,
			  lm_diag *d)
{
	const struct lm_layer_hparams *l = &fw->model->hp.layer[il];
	const size_t len = (size_t)n * (size_t)l->n_head * (size_t)l->head_dim;
	float *att = fw->dn.host + len * 2;
	int rc;
	if ((rc = q35_down(fw, att, fw->att, len, il, "download attention", d)) != 0)
		return rc;
	if ((rc = lm_backend_sync(fw->be)) != 0)
		return lm_layer_fail(fw, rc, il, "sync", d);
	for (size_t i = 0; i < len; i++)
		att[i] *= 1.0f / (1.0f + expf(-gate[i]));
	if ((rc = fw->be->iface->upload(fw->be->ctx, fw->att, att, len * sizeof(float))) != 0)
		return lm_layer_fail(fw, rc, il, "upload attention", d);
	return 0;
}

static int q35_attention(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_backend *be = fw->be;
	const struct lm_layer_hparams *l = &fw->model->hp.layer[il];
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	const struct lm_kv_layer *kvl = NULL;
	float *gate = fw->dn.host;
	int32_t n = b->n;
	int rc;
	if ((rc = lm_layer_proj(fw, fw->q, &w->wq, NULL, fw->h, il, n, "attn_q", d)) ||
	    (rc = q35_split_gate(fw, il, n, gate, d)) ||
	    (rc = lm_layer_proj(fw, fw->k, &w->wk, NULL, fw->h, il, n, "attn_k", d)) ||
	    (rc = lm_layer_proj(fw, fw->v, &w->wv, NULL, fw->h, il, n, "attn_v", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->q, &w->q_norm, l->n_head, il, n, "q_norm", d)) ||
	    (rc = lm_layer_head_norm(fw, fw->k, &w->k_norm, l->n_head_kv, il, n, "k_norm", d)) ||
	    (rc = lm_layer_rope(fw, fw->q, l->n_head, il, b, "rope q", d)) ||
	    (rc = lm_layer_rope(fw, fw->k, l->n_head_kv, il, b, "rope k", d)) ||
	    (rc = kv_cache_layer(fw->kv, il, &kvl, d)))
		return rc;
	if ((rc = be->iface->kv_store(be->ctx, kvl, fw->k, fw->v, b->loc, n)) != 0)
		return lm_layer_fail(fw, rc, il, "kv_store", d);
	if ((rc = be->iface->attention(be->ctx, fw->att, fw->q, kvl, b->loc, n, l->n_head,
				       fw->model->hp.attn_scale)) != 0)
		return lm_layer_fail(fw, rc, il, "attention", d);
	if ((rc = q35_apply_gate(fw, il, n, gate, d)) != 0)
		return rc;
	return lm_layer_proj(fw, fw->h, &w->wo, NULL, fw->att, il, n, "attn_output", d);
}

static int qwen35_layer(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d)
{
	const struct lm_hparams *hp = &fw->model->hp;
	const struct lm_layer_weights *w = lm_model_layer(fw->model, il);
	int32_t n = b->n;
	int rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_norm, hp->rms_eps, il, n, "attn_norm",
				d)) ||
	    (rc = hp->layer[il].recurrent ? q35_recurrent(fw, il, b, d)
					  : q35_attention(fw, il, b, d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	if ((rc = lm_layer_norm(fw, fw->h, fw->x, &w->attn_post_norm, hp->rms_eps, il, n,
				"post_attention_norm", d)) ||
	    (rc = hp->layer[il].n_expert > 0 ? lm_layer_moe(fw, il, n, d)
					     : lm_layer_ffn(fw, il, n, false, d)) ||
	    (rc = lm_layer_residual(fw, il, n, d)))
		return rc;
	return 0;
}

const struct lm_arch lm_arch_qwen35 = {
	.name = "qwen35",
	.tensors = qwen35_tensors,
	.n_tensors = sizeof qwen35_tensors / sizeof qwen35_tensors[0],
	.refused = qwen35_refused,
	.layer = qwen35_layer,
};

/* qwen35moe: qwen35's layers, the FFN a mixture of experts beside a gated shared expert. */
static const struct lm_tensor_spec qwen35moe_tensors[] = {
	LM_TENSOR(attn_norm, EMBD, ONE),
	LM_TENSOR(attn_post_norm, EMBD, ONE),
	LM_TENSOR_ATTN(wq, EMBD, QG),
	LM_TENSOR_ATTN(wk, EMBD, KV),
	LM_TENSOR_ATTN(wv, EMBD, KV),
	LM_TENSOR_ATTN(q_norm, HEAD, ONE),
	LM_TENSOR_ATTN(k_norm, HEAD, ONE),
	LM_TENSOR_ATTN(wo, Q, EMBD),
	LM_TENSOR_REC(wqkv, EMBD, CONV),
	LM_TENSOR_REC(wqkv_gate, EMBD, VALUE),
	LM_TENSOR_REC(ssm_conv1d, CONV_K, CONV),
	LM_TENSOR_REC(ssm_dt, VHEADS, ONE),
	LM_TENSOR_REC(ssm_a, VHEADS, ONE),
	LM_TENSOR_REC(ssm_beta, EMBD, VHEADS),
	LM_TENSOR_REC(ssm_alpha, EMBD, VHEADS),
	LM_TENSOR_REC(ssm_norm, SSM_HEAD, ONE),
	LM_TENSOR_REC(ssm_out, VALUE, EMBD),
	LM_TENSOR(gate_inp, EMBD, EXPERTS),
	LM_TENSOR_EXPS(gate_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(up_exps, EMBD, FF_EXP),
	LM_TENSOR_EXPS(down_exps, FF_EXP, EMBD),
	LM_TENSOR(gate_inp_shexp, EMBD, ONE),
	LM_TENSOR(w_gate_shexp, EMBD, FF_SHEXP),
	LM_TENSOR(w_up_shexp, EMBD, FF_SHEXP),
	LM_TENSOR(w_down_shexp, FF_SHEXP, EMBD),
};

static const struct lm_refusal qwen35moe_refused[] = {
	{"ffn_gate_up_exps", "fused gate/up expert projections are not supported"},
	{NULL, NULL},
};

const struct lm_arch lm_arch_qwen35moe = {
	.name = "qwen35moe",
	.tensors = qwen35moe_tensors,
	.n_tensors = sizeof qwen35moe_tensors / sizeof qwen35moe_tensors[0],
	.refused = qwen35moe_refused,
	.layer = qwen35_layer,
};

/* hparams_arch.c — what each architecture reads beyond the keys every one shares, after
 * llama.cpp (release v0.4.0): src/models/<arch>.cpp's load_arch_hparams and the converters'
 * keys. Their tensors and layers are in engine/arch_<name>.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/model/hparams_impl.h"

/* The sliding/global pattern, "<arch>.attention.sliding_window_pattern": a period p (layer il
 * slides unless il % p == p - 1; p = 0: every layer slides), one bool for every layer, or an
 * array of n_layer bools. `period` is used when the key is absent (0: the key is required).
 * swa[il] receives the pattern. */
static int hp_swa_pattern(const gguf_file *f, const struct lm_hparams *hp, uint32_t period,
			  bool *swa, lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL && period == 0)
		return lm_fail(d, LM_EFORMAT, "metadata '%s' is missing", key);
	if (kv != NULL && kv->type == GGUF_TYPE_ARRAY) {
		const struct gguf_arr *a = &kv->v.arr;
		if (a->data == NULL || a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64)
			return lm_fail(d, LM_EFORMAT, "metadata '%s' must be an array of bools",
				       key);
		if (a->n != (uint64_t)hp->n_layer)
			return lm_fail(d, LM_EFORMAT,
				       "metadata '%s' has %llu entries for %d layers", key,
				       (unsigned long long)a->n, hp->n_layer);
		for (int32_t il = 0; il < hp->n_layer; il++)
			swa[il] = gguf_arr_u64(a, (uint64_t)il) != 0;
		return 0;
	}
	if (kv != NULL && kv->type == GGUF_TYPE_BOOL) {
		for (int32_t il = 0; il < hp->n_layer; il++)
			swa[il] = kv->v.b;
		return 0;
	}
	if (kv != NULL &&
	    hp_get_u32_zero(f, hp->arch, "attention.sliding_window_pattern", &period, d) != 0)
		return lm_fail(d, LM_EFORMAT, "metadata '%s' must be a period or bools", key);
	for (int32_t il = 0; il < hp->n_layer; il++)
		swa[il] = period == 0 || (uint32_t)il % period < period - 1;
	return 0;
}

/* Makes the layers of `swa` sliding ones of `window` positions with the _swa rope values and
 * head size of r. */
static void hp_set_sliding(struct lm_hparams *hp, const struct hp_read *r, const bool *swa,
			   int32_t window)
{
	for (int32_t il = 0; il < hp->n_layer; il++) {
		struct lm_layer_hparams *l = &hp->layer[il];
		if (!swa[il])
			continue;
		l->window = window;
		l->head_dim = r->head_dim_swa;
		l->rope.n_rot = r->n_rot_swa;
		l->rope.freq_base = r->base_swa;
		l->rope.freq_scale = 1.0f; /* sliding layers are never scaled (llama.cpp) */
	}
}

/* Every layer rotates its whole head (llama.cpp's llama, qwen2 and qwen3 graphs). */
static int hp_full_rope(const struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	if (r->n_rot != r->head_dim)
		return lm_fail(d, LM_EFORMAT, "rope dimension count %d differs from head dim %d",
			       r->n_rot, r->head_dim);
	(void)hp;
	return 0;
}

static int hp_no_rope_freqs(const struct lm_hparams *hp, lm_diag *d)
{
	if (hp->has_rope_freqs)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "tensor 'rope_freqs.weight': rope frequency factors are not used "
			       "by %s",
			       hp->arch);
	return 0;
}

/* <arch>.final_logit_softcapping over a default (llama.cpp's: 30 for gemma4, none for
 * gemma3, which clears it before reading). */
static int hp_final_softcap(const gguf_file *f, struct lm_hparams *hp, float def, lm_diag *d)
{
	hp->final_softcap = def;
	int rc = hp_get_f32(f, hp->arch, "final_logit_softcapping", &hp->final_softcap, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	if (hp->final_softcap < 0)
		return lm_fail(d, LM_EFORMAT, "final logit softcapping %g is out of range",
			       (double)hp->final_softcap);
	return 0;
}

/* llama (LLaMA 1-3, TinyStories, Mistral): Llama 3's long-context rope is rope_freqs.weight,
 * frequency factors of every layer. A Mistral file may declare a sliding window, which then
 * applies to every layer as in Mistral's own implementation (llama.cpp's llama graph ignores
 * it: the two agree on sequences within the window). */
static int hp_llama(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	int rc = hp_full_rope(hp, r, d);
	if (rc != 0)
		return rc;
	uint32_t window = 0;
	rc = hp_get_u32_zero(f, hp->arch, "attention.sliding_window", &window, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	if (window > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "sliding window %u is out of range", window);
	for (int32_t il = 0; il < hp->n_layer; il++) {
		hp->layer[il].window = (int32_t)window;
		hp->layer[il].rope_factors = hp->has_rope_freqs;
	}
	return 0;
}

/* qwen2 (Q/K/V biases) and qwen3 (per-head Q and K norms): NeoX rope over the whole head. */
static int hp_qwen(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	(void)f;
	int rc = hp_full_rope(hp, r, d);
	return rc != 0 ? rc : hp_no_rope_freqs(hp, d);
}

/* The mixture of experts of qwen3moe and qwen35moe: on every layer expert_count experts of which
 * each token takes expert_used_count (a scalar or per-layer array), expert_feed_forward_length
 * wide (per layer; absent: feed_forward_length / expert_used_count, as llama.cpp). llama.cpp's
 * graph routes by a softmax over all experts and always normalises the picked weights. Expert
 * groups (DeepSeek's) are refused with their key. */
static int hp_experts(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r,
		      lm_diag *d)
{
	int rc;
	if (r->n_expert == 0)
		return lm_fail(d, LM_EFORMAT, "metadata '%s.expert_count' is missing or 0",
			       hp->arch);
	if (r->n_expert > LM_MAX_EXPERTS)
		return lm_fail(d, LM_EFORMAT, "%s.expert_count = %u is over %d", hp->arch,
			       r->n_expert, LM_MAX_EXPERTS);
	uint32_t groups = 0;
	if (hp_get_u32_zero(f, hp->arch, "expert_group_count", &groups, NULL) == 0 && groups > 1)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "%s: expert groups (%s.expert_group_count = %u) are "
			       "not supported",
			       hp->arch, hp->arch, groups);
	if ((rc = hp_get_per_layer(f, hp->arch, "expert_used_count", hp,
				   offsetof(struct lm_layer_hparams, n_expert_used), true, d)) != 0)
		return rc;
	rc = hp_get_per_layer(f, hp->arch, "expert_feed_forward_length", hp,
			      offsetof(struct lm_layer_hparams, n_ff_exp), false, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	for (int32_t il = 0; il < hp->n_layer; il++) {
		struct lm_layer_hparams *l = &hp->layer[il];
		l->n_expert = (int32_t)r->n_expert;
		if (rc == LM_ENOTFOUND)
			l->n_ff_exp = l->n_ff / l->n_expert_used;
	}
	hp->moe = (struct lm_moe_params){.gating = LM_MOE_SOFTMAX, .norm = true, .scale = 1.0f};
	return 0;
}

static int hp_qwen3moe(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r,
		       lm_diag *d)
{
	int rc = hp_qwen(f, hp, r, d);
	return rc != 0 ? rc : hp_experts(f, hp, r, d);
}

/* llama.cpp's ggml_rope_yarn_corr_dim: the pair index whose wavelength spans the original context
 * `beta` times, in its float steps. */
static float hp_yarn_corr_dim(int n_dims, int n_ctx_orig, float beta, float base)
{
	return n_dims * logf(n_ctx_orig / (beta * 2 * (float)M_PI)) / (2 * logf(base));
}

/* YaRN on every layer, as llama.cpp (release v0.4.0) sets it up for a file of rope.scaling.type
 * "yarn" whose architecture reads no yarn keys of its own (gpt-oss): ext_factor 1, betas 32 and
 * 1, the original context rope.scaling.original_context_length (default context_length),
 * llama_context's attention factor get_mscale(factor) / (1 + 0.1 ln factor) x
 * rope.scaling.attn_factor, then rope_yarn's own (1 + 0.1 ln(1 / freq_scale)), all in floats in
 * llama.cpp's order. */
static int hp_yarn(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	int32_t n_orig = hp->n_ctx_train;
	int rc = hp_get_i32(f, hp->arch, "rope.scaling.original_context_length", &n_orig, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	float attn_factor = 1.0f;
	rc = hp_get_f32(f, hp->arch, "rope.scaling.attn_factor", &attn_factor, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	const float factor = 1.0f / r->scale;
	float a = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
	a *= 1.0f / (1.0f + 0.1f * logf(factor));
	a *= attn_factor;
	for (int32_t il = 0; il < hp->n_layer; il++) {
		struct lm_rope_params *rp = &hp->layer[il].rope;
		const float lo = floorf(hp_yarn_corr_dim(rp->n_rot, n_orig, 32.0f, rp->freq_base));
		const float hi = ceilf(hp_yarn_corr_dim(rp->n_rot, n_orig, 1.0f, rp->freq_base));
		rp->ext_factor = 1.0f;
		rp->mscale = a * (1.0f + 0.1f * logf(1.0f / rp->freq_scale));
		rp->corr[0] = lo > 0 ? lo : 0;
		rp->corr[1] = hi < (float)(rp->n_rot - 1) ? hi : (float)(rp->n_rot - 1);
	}
	return 0;
}

/* gpt-oss (llama.cpp's openai-moe): NeoX rope over the whole head; sliding-window layers on the
 * attention.sliding_window_pattern period (default 2: even layers slide, odd ones are global),
 * whose rope base is rope.freq_base_swa or else the global one, and whose rope scale is the
 * global one (llama.cpp keeps both for gpt-oss), YaRN on every layer where the file says
 * (hp_yarn); on every layer a mixture of expert_count
 * experts, expert_used_count per token, expert_feed_forward_length wide, routed by a softmax
 * over the picked experts' logits only. Attention scale 1/sqrt(head_dim). */
static int hp_gptoss(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	int rc = hp_qwen(f, hp, r, d);
	if (rc != 0)
		return rc;
	if (r->n_expert == 0)
		return lm_fail(d, LM_EFORMAT, "metadata 'gpt-oss.expert_count' is missing or 0");
	if (r->n_expert > LM_MAX_EXPERTS)
		return lm_fail(d, LM_EFORMAT, "gpt-oss.expert_count = %u is over %d", r->n_expert,
			       LM_MAX_EXPERTS);
	if ((rc = hp_get_per_layer(f, hp->arch, "expert_used_count", hp,
				   offsetof(struct lm_layer_hparams, n_expert_used), true, d)) !=
		    0 ||
	    (rc = hp_get_per_layer(f, hp->arch, "expert_feed_forward_length", hp,
				   offsetof(struct lm_layer_hparams, n_ff_exp), true, d)) != 0)
		return rc;
	for (int32_t il = 0; il < hp->n_layer; il++)
		hp->layer[il].n_expert = (int32_t)r->n_expert;
	hp->moe = (struct lm_moe_params){
		.gating = LM_MOE_SOFTMAX_WEIGHT, .norm = false, .scale = 1.0f, .swiglu_oai = true};
	hp->attn_scale = 1.0f / sqrtf((float)r->n_rot);
	uint32_t window = 0;
	rc = hp_get_u32_zero(f, hp->arch, "attention.sliding_window", &window, d);
	if (rc == LM_ENOTFOUND)
		return lm_fail(d, LM_EFORMAT,
			       "metadata 'gpt-oss.attention.sliding_window' is missing");
	if (rc != 0)
		return rc;
	if (window == 0 || window > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "sliding window %u is out of range", window);
	float base_swa = r->base;
	rc = hp_get_f32(f, hp->arch, "rope.freq_base_swa", &base_swa, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	static bool swa[LM_MAX_LAYERS];
	if ((rc = hp_swa_pattern(f, hp, 2, swa, d)) != 0)
		return rc;
	hp_set_sliding(hp, r, swa, (int32_t)window);
	for (int32_t il = 0; il < hp->n_layer; il++)
		if (swa[il]) {
			hp->layer[il].rope.freq_base = base_swa;
			hp->layer[il].rope.freq_scale = r->scale;
		}
	return r->yarn ? hp_yarn(f, hp, r, d) : 0;
}

/* gemma3: a sliding window on every layer but each sixth (or the pattern's), those layers'
 * own rope base; the embedding scaled by sqrt(n_embd); queries scaled by 1/sqrt(head_dim), or
 * by 1/sqrt(n_embd / n_head) for the 62-layer (27B) model, as llama.cpp decides it. */
static int hp_gemma3(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	int rc = hp_no_rope_freqs(hp, d);
	if (rc == 0)
		rc = hp_final_softcap(f, hp, 0.0f, d);
	if (rc != 0)
		return rc;
	hp->embd_scale = sqrtf((float)hp->n_embd);
	hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->layer[0].n_head))
					   : 1.0f / sqrtf((float)r->head_dim);
	uint32_t window = 0;
	rc = hp_get_u32_zero(f, hp->arch, "attention.sliding_window", &window, d);
	if (rc == LM_ENOTFOUND || window == 0)
		return 0;
	if (rc != 0)
		return rc;
	if (window > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "sliding window %u is out of range", window);
	static bool swa[LM_MAX_LAYERS];
	if ((rc = hp_swa_pattern(f, hp, 6, swa, d)) != 0)
		return rc;
	hp_set_sliding(hp, r, swa, (int32_t)window);
	return 0;
}

/* gemma4 with experts (26B-A4B): a layer whose file has blk.N.ffn_gate_inp.weight is a
 * mixture of expert_count experts, expert_used_count of them per token, each
 * expert_feed_forward_length wide, beside its dense FFN, which then runs as a shared one
 * (n_ff_shexp = n_ff); llama.cpp's graph routes by a softmax and normalises the picked
 * weights. Other layers stay dense. */
static int hp_gemma4_experts(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r,
			     lm_diag *d)
{
	if (r->n_expert > LM_MAX_EXPERTS)
		return lm_fail(d, LM_EFORMAT, "gemma4.expert_count = %u is over %d", r->n_expert,
			       LM_MAX_EXPERTS);
	int rc;
	if ((rc = hp_get_per_layer(f, hp->arch, "expert_used_count", hp,
				   offsetof(struct lm_layer_hparams, n_expert_used), true, d)) !=
		    0 ||
	    (rc = hp_get_per_layer(f, hp->arch, "expert_feed_forward_length", hp,
				   offsetof(struct lm_layer_hparams, n_ff_exp), true, d)) != 0)
		return rc;
	for (int32_t il = 0; il < hp->n_layer; il++) {
		struct lm_layer_hparams *l = &hp->layer[il];
		char name[64];
		snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
		if (gguf_find_tensor(f, name) != NULL) {
			l->n_expert = (int32_t)r->n_expert;
			l->n_ff_shexp = l->n_ff;
		} else {
			l->n_expert_used = l->n_ff_exp = 0;
		}
	}
	hp->moe = (struct lm_moe_params){.gating = LM_MOE_SOFTMAX, .norm = true, .scale = 1.0f};
	return 0;
}

/* gemma4: the pattern array of sliding and global layers, each kind with its own head
 * size, KV heads (per-layer head_count_kv), rotated dimensions and rope base; the global
 * layers' proportional rope through rope_freqs.weight; attention scale 1. The per-layer
 * embeddings and shared-KV layers of the E2B/E4B models need a design across stages (a
 * shared-KV layer's source may sit on another worker): refused. Experts: above. */
static int hp_gemma4(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	uint32_t v = 0;
	int rc = hp_get_u32_zero(f, hp->arch, "attention.shared_kv_layers", &v, NULL);
	if (rc == 0 && v > 0)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "gemma4: %u shared-KV layers (gemma4.attention.shared_kv_layers): "
			       "layers that reuse another layer's cache are not supported",
			       v);
	v = 0;
	rc = hp_get_u32_zero(f, hp->arch, "embedding_length_per_layer_input", &v, NULL);
	if (rc == 0 && v > 0)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "gemma4: per-layer embeddings "
			       "(gemma4.embedding_length_per_layer_input = %u) are not supported",
			       v);
	if ((rc = hp_final_softcap(f, hp, 30.0f, d)) != 0)
		return rc;
	hp->embd_scale = sqrtf((float)hp->n_embd);
	hp->attn_scale = 1.0f;
	uint32_t window = 0;
	rc = hp_get_u32_zero(f, hp->arch, "attention.sliding_window", &window, d);
	if (rc == LM_ENOTFOUND)
		return lm_fail(d, LM_EFORMAT,
			       "metadata 'gemma4.attention.sliding_window' is missing");
	if (rc != 0)
		return rc;
	if (window == 0 || window > INT32_MAX)
		return lm_fail(d, LM_EFORMAT, "sliding window %u is out of range", window);
	static bool swa[LM_MAX_LAYERS];
	if ((rc = hp_swa_pattern(f, hp, 0, swa, d)) != 0)
		return rc;
	hp_set_sliding(hp, r, swa, (int32_t)window);
	for (int32_t il = 0; il < hp->n_layer; il++)
		hp->layer[il].rope_factors = !swa[il] && hp->has_rope_freqs;
	return r->n_expert > 0 ? hp_gemma4_experts(f, hp, r, d) : 0;
}

/* qwen35's layer pattern: "qwen35.attention.recurrent_layers" (one bool a layer), else each
 * full_attention_interval-th layer (default 4) attends and the others are recurrent. */
static int hp_recurrent_pattern(const gguf_file *f, struct lm_hparams *hp, lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.attention.recurrent_layers", hp->arch);
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv != NULL) {
		const struct gguf_arr *a = &kv->v.arr;
		if (kv->type != GGUF_TYPE_ARRAY || a->data == NULL ||
		    a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64 ||
		    a->type == GGUF_TYPE_STRING)
			return lm_fail(d, LM_EFORMAT, "metadata '%s' must be an array of bools",
				       key);
		if (a->n != (uint64_t)hp->n_layer &&
		    a->n != (uint64_t)hp->n_layer + (uint64_t)hp->n_layer_nextn)
			return lm_fail(d, LM_EFORMAT,
				       "metadata '%s' has %llu entries for %d layers", key,
				       (unsigned long long)a->n, hp->n_layer);
		for (int32_t il = 0; il < hp->n_layer; il++)
			hp->layer[il].recurrent = gguf_arr_u64(a, (uint64_t)il) != 0;
		return 0;
	}
	uint32_t interval = 4;
	int rc = hp_get_u32_zero(f, hp->arch, "full_attention_interval", &interval, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	if (interval == 0 || interval > LM_MAX_LAYERS)
		return lm_fail(d, LM_EFORMAT, "%s.full_attention_interval = %u is out of range",
			       hp->arch, interval);
	for (int32_t il = 0; il < hp->n_layer; il++)
		hp->layer[il].recurrent = ((uint32_t)il + 1) % interval != 0;
	return 0;
}

/* qwen35's rope: multi-section ("rope.dimension_sections", 4 counts of rotated pairs) and
 * interleaved, as Qwen3-VL's. For text every section's position is the token's but the fourth
 * one's, which is 0: pair i (i < n_rot / 2) turns as NeoX's unless it falls in the fourth
 * section, where it does not turn at all. layermesh runs the sections that cover every pair
 * (Qwen 3.5's [11, 11, 10, 0] of 32 pairs) and refuses the others with the key. */
static int hp_rope_sections(const gguf_file *f, const struct lm_hparams *hp, int32_t n_rot,
			    lm_diag *d)
{
	char key[128];
	snprintf(key, sizeof key, "%s.rope.dimension_sections", hp->arch);
	const struct gguf_kv *kv = gguf_find(f, key);
	if (kv == NULL)
		return 0; /* no sections: plain NeoX */
	const struct gguf_arr *a = &kv->v.arr;
	if (kv->type != GGUF_TYPE_ARRAY || a->data == NULL || a->n > 4 ||
	    a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64 ||
	    a->type == GGUF_TYPE_STRING)
		return lm_fail(d, LM_EFORMAT, "metadata '%s' must be up to 4 integers", key);
	int64_t s[4] = {0, 0, 0, 0}, total = 0;
	for (uint64_t i = 0; i < a->n; i++) {
		s[i] = gguf_arr_i64(a, i);
		if (s[i] < 0 || s[i] > (1 << 16))
			return lm_fail(d, LM_EFORMAT, "metadata '%s'[%llu] = %lld is out of range",
				       key, (unsigned long long)i, (long long)s[i]);
		total += s[i];
	}
	if (total <= 0)
		return lm_fail(d, LM_EFORMAT, "metadata '%s' has no sections", key);
	/* ggml's interleaved multi-section rope: pair i is in section (i mod total) and takes
	 * the t, h or w position by (i mod total) mod 3 within 3 x that section's count, else
	 * the fourth (e) one. */
	for (int32_t i = 0; i < n_rot / 2; i++) {
		int64_t sec = i % total;
		bool txt = (sec % 3 == 0 && sec < 3 * s[0]) || (sec % 3 == 1 && sec < 3 * s[1]) ||
			   (sec % 3 == 2 && sec < 3 * s[2]);
		if (!txt)
			return lm_fail(
				d, LM_EUNSUPPORTED,
				"metadata '%s' = [%lld, %lld, %lld, %lld]: rotated pair %d "
				"takes the fourth section's position; only sections that "
				"cover every pair of the %d rotated dimensions are supported",
				key, (long long)s[0], (long long)s[1], (long long)s[2],
				(long long)s[3], i, n_rot);
	}
	return 0;
}

/* qwen35 (Qwen 3.5 dense): gated delta-net layers and, each full_attention_interval-th
 * (or as "attention.recurrent_layers" says), gated full-attention ones with per-head Q/K norms
 * and partial multi-section rope (rope.dimension_count of the head). The ssm.* keys give the
 * delta-net's shape. Its multi-token prediction layers (nextn_predict_layers, the last of
 * block_count) are read past by hparams.c and ignored. */
static int hp_qwen35(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d)
{
	int rc = hp_no_rope_freqs(hp, d);
	if (rc == 0)
		rc = hp_rope_sections(f, hp, r->n_rot, d);
	if (rc != 0)
		return rc;
	struct lm_ssm_params *s = &hp->ssm;
	int32_t inner = 0;
	const char *keys[] = {"ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
			      "ssm.time_step_rank", "ssm.inner_size"};
	int32_t *vals[] = {&s->conv_kernel, &s->head_dim, &s->n_k_heads, &s->n_v_heads, &inner};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if ((rc = hp_get_i32(f, hp->arch, keys[i], vals[i], d)) != 0)
			return rc == LM_ENOTFOUND
				       ? lm_fail(d, LM_EFORMAT, "metadata '%s.%s' is missing",
						 hp->arch, keys[i])
				       : rc;
	if (s->conv_kernel < 2 || s->conv_kernel > 64 || s->head_dim > 4096 ||
	    s->n_k_heads > 4096 || s->n_v_heads > 4096 || s->n_v_heads % s->n_k_heads != 0 ||
	    (int64_t)inner != (int64_t)s->head_dim * s->n_v_heads)
		return lm_fail(d, LM_EFORMAT,
			       "%s.ssm: conv kernel %d (2 to 64), %d key heads and %d value heads "
			       "(a multiple of them) of %d, inner size %d (value heads x state "
			       "size) are out of range",
			       hp->arch, s->conv_kernel, s->n_k_heads, s->n_v_heads, s->head_dim,
			       inner);
	if ((rc = hp_recurrent_pattern(f, hp, d)) != 0)
		return rc;
	for (int32_t il = 0; il < hp->n_layer; il++)
		hp->layer[il].q_gate = !hp->layer[il].recurrent;
	return 0;
}

/* qwen35moe (Qwen 3.5 35B-A3B to 397B-A17B): qwen35's layers with qwen3moe's mixture of experts
 * in place of the FFN, beside a shared expert of expert_shared_feed_forward_length (default
 * feed_forward_length) whose output is scaled by a sigmoid gate of its own. */
static int hp_qwen35moe(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r,
			lm_diag *d)
{
	int rc = hp_qwen35(f, hp, r, d);
	if (rc == 0)
		rc = hp_experts(f, hp, r, d);
	if (rc != 0)
		return rc;
	int32_t shexp = hp->layer[0].n_ff;
	rc = hp_get_i32(f, hp->arch, "expert_shared_feed_forward_length", &shexp, d);
	if (rc != 0 && rc != LM_ENOTFOUND)
		return rc;
	if (shexp > (1 << 24))
		return lm_fail(d, LM_EFORMAT, "%s.expert_shared_feed_forward_length %d is too wide",
			       hp->arch, shexp);
	for (int32_t il = 0; il < hp->n_layer; il++)
		hp->layer[il].n_ff_shexp = shexp;
	return 0;
}

static const struct hp_arch hp_archs[] = {
	{"llama", LM_ROPE_NORM, hp_llama},    {"qwen2", LM_ROPE_NEOX, hp_qwen},
	{"qwen3", LM_ROPE_NEOX, hp_qwen},     {"qwen3moe", LM_ROPE_NEOX, hp_qwen3moe},
	{"gemma3", LM_ROPE_NEOX, hp_gemma3},  {"gemma4", LM_ROPE_NEOX, hp_gemma4},
	{"qwen35", LM_ROPE_NEOX, hp_qwen35},  {"qwen35moe", LM_ROPE_NEOX, hp_qwen35moe},
	{"gpt-oss", LM_ROPE_NEOX, hp_gptoss},
};

const struct hp_arch *hp_arch_find(const char *name)
{
	for (size_t i = 0; i < sizeof hp_archs / sizeof hp_archs[0]; i++)
		if (strcmp(hp_archs[i].name, name) == 0)
			return &hp_archs[i];
	return NULL;
}

const char *lm_hparams_archs(void)
{
	return "llama, qwen2, qwen3, qwen3moe, gemma3, gemma4, qwen35, qwen35moe and gpt-oss";
}

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

/* qwen3moe: qwen3's attention, and on every layer a mixture of expert_count experts of which
 * each token takes expert_used_count (a scalar or per-layer array), expert_feed_forward_length
 * wide (per layer; absent: feed_forward_length / expert_used_count, as llama.cpp). llama.cpp's
 * graph routes by a softmax over all experts and always normalises the picked weights. Expert
 * groups (DeepSeek's) are refused with their key. */
static int hp_qwen3moe(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r,
		       lm_diag *d)
{
	int rc = hp_qwen(f, hp, r, d);
	if (rc != 0)
		return rc;
	if (r->n_expert == 0)
		return lm_fail(d, LM_EFORMAT, "metadata 'qwen3moe.expert_count' is missing or 0");
	if (r->n_expert > LM_MAX_EXPERTS)
		return lm_fail(d, LM_EFORMAT, "qwen3moe.expert_count = %u is over %d", r->n_expert,
			       LM_MAX_EXPERTS);
	uint32_t groups = 0;
	if (hp_get_u32_zero(f, hp->arch, "expert_group_count", &groups, NULL) == 0 && groups > 1)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "qwen3moe: expert groups (qwen3moe.expert_group_count = %u) are "
			       "not supported",
			       groups);
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
 * (n_ff_shared = n_ff); llama.cpp's graph routes by a softmax and normalises the picked
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
			l->n_ff_shared = l->n_ff;
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

static const struct hp_arch hp_archs[] = {
	{"llama", LM_ROPE_NORM, hp_llama},   {"qwen2", LM_ROPE_NEOX, hp_qwen},
	{"qwen3", LM_ROPE_NEOX, hp_qwen},    {"qwen3moe", LM_ROPE_NEOX, hp_qwen3moe},
	{"gemma3", LM_ROPE_NEOX, hp_gemma3}, {"gemma4", LM_ROPE_NEOX, hp_gemma4},
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
	return "llama, qwen2, qwen3, qwen3moe, gemma3 and gemma4";
}

/* Hyperparameters and slice binding against the real stories260K file. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weights.h"
#include "tests/support/gguf_samples.h"

static const char *model_path(void)
{
	static char buf[4096];
	const char *root = getenv("LM_SHARED");
	snprintf(buf, sizeof buf, "%s/models/stories260K.gguf", root != NULL ? root : "../shared");
	return buf;
}

Test(model, stories260k_hparams)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open(model_path(), &f, &d), 0, "%s", d.msg);
	static struct lm_hparams hp;
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	cr_expect_str_eq(hp.arch, "llama");
	cr_expect_eq(hp.n_layer, 5);
	cr_expect_eq(hp.n_embd, 64);
	cr_expect_eq(hp.n_vocab, 512);
	cr_expect_eq(hp.n_ctx_train, 512);
	for (int i = 0; i < 5; i++) {
		const struct lm_layer_hparams *l = &hp.layer[i];
		cr_expect_eq(l->head_dim, 8);
		cr_expect_eq(l->n_head, 8);
		cr_expect_eq(l->n_head_kv, 4);
		cr_expect_eq(l->n_ff, 172);
		cr_expect_eq(l->window, 0);
		cr_expect_eq(l->rope.mode, LM_ROPE_NORM);
		cr_expect_eq(l->rope.n_rot, 8);
		cr_expect_float_eq(l->rope.freq_base, 10000.0f, 1e-3);
		cr_expect_float_eq(l->rope.freq_scale, 1.0f, 1e-9);
		cr_expect_not(l->rope_factors);
	}
	cr_expect_float_eq(hp.rms_eps, 1e-5f, 1e-12);
	cr_expect_eq(hp.embd_scale, 1.0f);
	cr_expect_float_eq(hp.attn_scale, 1.0f / sqrtf(8.0f), 1e-9);
	cr_expect_eq(hp.final_softcap, 0.0f);
	cr_expect_not(hp.tied, "stories260K carries its own output.weight");
	struct kv_geom g = lm_hparams_kv_geom(&hp, 2);
	cr_expect_eq(g.n_kv_heads, 4);
	cr_expect_eq(g.head_dim, 8);

	struct lm_layer_cost costs[5];
	struct lm_model_costs mc = {.layer = costs};
	cr_assert_eq(lm_model_costs(f, &hp, &mc, &d), 0, "%s", d.msg);
	/* Per layer: norms 2x64, q 64x64, k and v 64x32, o 64x64, gate/up/down 3x64x172 (f32). */
	uint64_t params = 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 172;
	for (int i = 0; i < 5; i++) {
		cr_expect_eq(costs[i].params, params);
		cr_expect_eq(costs[i].weight_bytes, (params + 128) * 4);
		cr_expect_eq(costs[i].flops, 2 * params);
	}
	cr_expect_eq(mc.embd_bytes, 64 * 512 * 4);
	cr_expect_eq(mc.head_bytes, 64 * 512 * 4 + 64 * 4);
	gguf_close(f);
}

/* A middle slice binds its layers only; the others stay unmapped. */
Test(model, slice_binds_only_its_layers)
{
	static struct lm_model m;
	lm_diag d = {{0}};
	struct lm_slice s = {.begin = 1, .end = 3};
	cr_assert_eq(lm_model_open(&m, model_path(), &s, NULL, false, &d), 0, "%s", d.msg);
	cr_expect_null(lm_model_layer(&m, 0));
	cr_expect_not_null(lm_model_layer(&m, 1));
	cr_expect_not_null(lm_model_layer(&m, 2));
	cr_expect_null(lm_model_layer(&m, 3));
	cr_expect_null(m.tok_embd.data);
	cr_expect_null(m.output.data);
	const struct lm_layer_weights *l = lm_model_layer(&m, 2);
	cr_expect_eq(l->wq.ne0, 64);
	cr_expect_eq(l->wq.ne1, 64);
	cr_expect_eq(l->wk.ne1, 32);
	cr_expect_eq(l->w_down.ne0, 172);
	cr_expect_eq(l->w_down.row_bytes, 172 * 4);
	uint64_t layer_bytes = (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 172 + 128) * 4;
	cr_expect_eq(m.weight_bytes, 2 * layer_bytes);
	cr_expect_lt(m.mapped_bytes, 2 * layer_bytes + 4 * 4096);
	/* The embedding lives only with the first stage. */
	for (uint64_t i = 0; i < gguf_n_tensors(m.file); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(m.file, i);
		if (t->layer == 1 || t->layer == 2)
			cr_expect_not_null(t->data, "%s", t->name);
		else
			cr_expect_null(t->data, "%s", t->name);
	}
	lm_model_close(&m);
	lm_model_close(&m);
}

Test(model, whole_model_and_bad_slices)
{
	static struct lm_model m;
	lm_diag d = {{0}};
	cr_assert_eq(lm_model_open(&m, model_path(), NULL, NULL, false, &d), 0, "%s", d.msg);
	cr_expect_not_null(m.tok_embd.data);
	cr_expect_not_null(m.output.data);
	cr_expect_not_null(m.output_norm.data);
	cr_expect_gt(m.weight_bytes, 1000000);
	uint64_t fp = m.fingerprint;
	lm_model_close(&m);

	struct lm_slice s = {.begin = 3, .end = 7};
	cr_expect_eq(lm_model_open(&m, model_path(), &s, NULL, false, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "[3, 7)") != NULL, "%s", d.msg);
	s = (struct lm_slice){.begin = 4, .end = 5, .head = true};
	cr_assert_eq(lm_model_open(&m, model_path(), &s, NULL, false, &d), 0, "%s", d.msg);
	cr_expect_eq(m.fingerprint, fp);
	cr_expect_not_null(m.output.data);
	cr_expect_null(m.tok_embd.data);
	lm_model_close(&m);

	cr_expect_neq(lm_model_open(&m, "/nonexistent.gguf", NULL, NULL, false, &d), 0);
	cr_expect(strstr(d.msg, "/nonexistent.gguf") != NULL, "%s", d.msg);
}

/* A vocabulary-only file is not a model: a clear error, not a crash. */
Test(model, vocab_only_file_is_refused)
{
	static struct lm_model m;
	lm_diag d = {{0}};
	char path[4096];
	const char *root = getenv("LM_SHARED");
	snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-llama-spm.gguf",
		 root != NULL ? root : "../shared");
	cr_expect_neq(lm_model_open(&m, path, NULL, NULL, false, &d), 0);
	cr_expect(strstr(d.msg, "block_count") != NULL || strstr(d.msg, "missing") != NULL, "%s",
		  d.msg);
}

/* The two-layer sample of tests/support/gguf_samples.h: per-layer head counts, linear rope
 * scaling and a tied head, as the sample writes them. */
Test(model, per_layer_heads_scaling_and_tied_head)
{
	uint8_t *img = NULL;
	size_t len = 0;
	lm_diag d = {{0}};
	cr_assert_eq(gs_make(GS_LLAMA_TIED, &img, &len, &d), 0, "%s", d.msg);
	gguf_file *f = NULL;
	cr_assert_eq(gguf_open_mem(img, len, &f, &d), 0, "%s", d.msg);
	static struct lm_hparams hp;
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	cr_expect_eq(hp.n_layer, 2);
	cr_expect_eq(hp.layer[0].n_head, 2);
	cr_expect_eq(hp.layer[1].n_head, 2);
	cr_expect_eq(hp.layer[0].n_head_kv, 1);
	cr_expect_eq(hp.layer[1].n_head_kv, 2);
	cr_expect_eq(hp.layer[0].head_dim, 16);
	cr_expect_eq(hp.layer[1].head_dim, 16);
	cr_expect_eq(hp.layer[1].rope.freq_scale, 0.5f, "factor 2 halves the frequencies");
	cr_expect(hp.tied);
	cr_expect_eq(hp.n_vocab, GS_SPM_N);
	gguf_close(f);
	free(img);
}

/* A scaling factor whose inverse overflows a float (1e-40, a float denormal) is refused rather
 * than giving an infinite freq_scale (found by fuzz_gguf). */
Test(model, tiny_rope_scaling_factor_is_refused)
{
	uint8_t *img = NULL;
	size_t len = 0;
	lm_diag d = {{0}};
	cr_assert_eq(gs_make(GS_LLAMA_TIED, &img, &len, &d), 0, "%s", d.msg);
	static const char key[] = "llama.rope.scaling.factor";
	size_t at = gs_find(img, len, key, sizeof key - 1) + sizeof key - 1;
	cr_assert_lt(at + 12, len);
	uint32_t type;
	memcpy(&type, img + at, 4);
	cr_assert_eq(type, GGUF_TYPE_FLOAT64);
	double tiny = 1e-40;
	memcpy(img + at + 4, &tiny, 8);
	gguf_file *f = NULL;
	cr_assert_eq(gguf_open_mem(img, len, &f, &d), 0, "%s", d.msg);
	static struct lm_hparams hp;
	cr_expect_eq(lm_hparams_load(f, &hp, &d), LM_EFORMAT);
	cr_expect(strstr(d.msg, "rope scaling factor") != NULL, "%s", d.msg);
	gguf_close(f);
	free(img);
}

/* YaRN rope scaling (the published gpt-oss files declare it) is refused with its key. */
Test(model, yarn_rope_scaling_is_refused_with_the_key)
{
	gguf_writer w;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_writer_init(&w, 0, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_writer_kv_str(&w, "llama.rope.scaling.type", "yarn", &d), 0, "%s", d.msg);
	cr_assert_eq(gs_llama(&w, false, &d), 0, "%s", d.msg);
	uint8_t *img = NULL;
	size_t len = 0;
	cr_assert_eq(gs_finish(&w, &img, &len, &d), 0, "%s", d.msg);
	gguf_writer_fini(&w);
	gguf_file *f = NULL;
	cr_assert_eq(gguf_open_mem(img, len, &f, &d), 0, "%s", d.msg);
	static struct lm_hparams hp;
	cr_expect_eq(lm_hparams_load(f, &hp, &d), LM_EUNSUPPORTED);
	cr_expect(strstr(d.msg, "llama.rope.scaling.type = 'yarn'") != NULL, "%s", d.msg);
	gguf_close(f);
	free(img);
}

/* Mixture-of-experts layers are run for qwen3moe, qwen35moe, gemma4 and gpt-oss only: any other
 * architecture with <arch>.expert_count is refused at load with the key. */
Test(model, experts_of_another_architecture_are_refused_with_the_key)
{
	gguf_writer w;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_writer_init(&w, 0, &d), 0, "%s", d.msg);
	cr_assert_eq(gguf_writer_kv_u32(&w, "llama.expert_count", 8, &d), 0, "%s", d.msg);
	cr_assert_eq(gs_llama(&w, false, &d), 0, "%s", d.msg);
	uint8_t *img = NULL;
	size_t len = 0;
	cr_assert_eq(gs_finish(&w, &img, &len, &d), 0, "%s", d.msg);
	gguf_writer_fini(&w);
	gguf_file *f = NULL;
	cr_assert_eq(gguf_open_mem(img, len, &f, &d), 0, "%s", d.msg);
	static struct lm_hparams hp;
	cr_expect_eq(lm_hparams_load(f, &hp, &d), LM_EUNSUPPORTED);
	cr_expect(strstr(d.msg, "llama.expert_count = 8") != NULL, "%s", d.msg);
	gguf_close(f);
	free(img);
}

/* The keys of a 2-layer gemma4 with 4 experts (2 per token, 32 wide) beside a 128-wide FFN,
 * plus `extra` (a key set to 2, or NULL), and token_embd; the router only on the layers of
 * `moe_layers` (a bit each). Returns the hparams_load result. */
static int gemma4_experts_load(const char *extra, unsigned moe_layers, struct lm_hparams *hp,
			       lm_diag *d)
{
	gguf_writer w;
	cr_assert_eq(gguf_writer_init(&w, 0, d), 0, "%s", d->msg);
	static const bool swa[2] = {true, false};
	cr_assert_eq(gguf_writer_kv_str(&w, "general.architecture", "gemma4", d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.block_count", 2, d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.embedding_length", 64, d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.attention.head_count", 4, d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.feed_forward_length", 128, d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.attention.sliding_window", 8, d), 0);
	cr_assert_eq(gguf_writer_kv_arr(&w, "gemma4.attention.sliding_window_pattern",
					GGUF_TYPE_BOOL, swa, 2, d),
		     0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.expert_count", 4, d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.expert_used_count", 2, d), 0);
	cr_assert_eq(gguf_writer_kv_u32(&w, "gemma4.expert_feed_forward_length", 32, d), 0);
	if (extra != NULL)
		cr_assert_eq(gguf_writer_kv_u32(&w, extra, 2, d), 0);
	cr_assert_eq(gs_tensor(&w, "token_embd.weight", LM_F32, 64, 16, d), 0);
	for (int il = 0; il < 2; il++) {
		char name[64];
		snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
		if (moe_layers & (1u << il))
			cr_assert_eq(gs_tensor(&w, name, LM_F32, 64, 4, d), 0);
	}
	uint8_t *img = NULL;
	size_t len = 0;
	cr_assert_eq(gs_finish(&w, &img, &len, d), 0, "%s", d->msg);
	gguf_writer_fini(&w);
	gguf_file *f = NULL;
	cr_assert_eq(gguf_open_mem(img, len, &f, d), 0, "%s", d->msg);
	int rc = lm_hparams_load(f, hp, d);
	gguf_close(f);
	free(img);
	return rc;
}

/* Gemma 4 26B-A4B: a layer with a router is a mixture of experts beside its FFN, which it keeps
 * as a shared one; a layer without stays dense. */
Test(model, gemma4_layers_with_a_router_have_experts_beside_their_ffn)
{
	static struct lm_hparams hp;
	lm_diag d = {{0}};
	cr_assert_eq(gemma4_experts_load(NULL, 1u, &hp, &d), 0, "%s", d.msg);
	const struct lm_layer_hparams *m = &hp.layer[0], *dn = &hp.layer[1];
	cr_expect(m->n_expert == 4 && m->n_expert_used == 2 && m->n_ff_exp == 32);
	cr_expect_eq(m->n_ff_shexp, 128);
	cr_expect(dn->n_expert == 0 && dn->n_expert_used == 0 && dn->n_ff_exp == 0 &&
		  dn->n_ff_shexp == 0 && dn->n_ff == 128);
	cr_expect(hp.moe.gating == LM_MOE_SOFTMAX && hp.moe.norm && hp.moe.scale == 1.0f);
	/* A stage's FFN buffers hold the wider of the experts and the shared FFN. */
	cr_expect_eq(lm_hparams_widths(&hp, 0, 1).ff_dim, 128);
	cr_expect_eq(lm_hparams_widths(&hp, 0, 1).n_expert, 4);
	/* expert_count with no router on any layer: nothing routes, refused with the key. */
	cr_expect_eq(gemma4_experts_load(NULL, 0u, &hp, &d), LM_EUNSUPPORTED);
	cr_expect(strstr(d.msg, "gemma4.expert_count = 4") != NULL, "%s", d.msg);
}

/* E2B/E4B's per-layer embeddings and shared-KV layers stay refused, experts or not, with the
 * key that names them. */
Test(model, gemma4_per_layer_embeddings_and_shared_kv_are_refused_with_the_key)
{
	static struct lm_hparams hp;
	lm_diag d = {{0}};
	cr_expect_eq(gemma4_experts_load("gemma4.embedding_length_per_layer_input", 3u, &hp, &d),
		     LM_EUNSUPPORTED);
	cr_expect(strstr(d.msg, "gemma4.embedding_length_per_layer_input") != NULL, "%s", d.msg);
	cr_expect_eq(gemma4_experts_load("gemma4.attention.shared_kv_layers", 3u, &hp, &d),
		     LM_EUNSUPPORTED);
	cr_expect(strstr(d.msg, "gemma4.attention.shared_kv_layers") != NULL, "%s", d.msg);
}

#define Q35_TRY(expr)                   \
	do {                            \
		if ((rc = (expr)) != 0) \
			goto q35_fail_; \
	} while (0)

/* qwen35's metadata, 4 layers, in a variant: 0 as Qwen 3.5 writes it, 1 the per-layer pattern
 * array, 2 rope sections that miss a pair, 3 without ssm.inner_size, 4 with an MTP layer. */
static int q35_meta(gguf_writer *w, int variant, lm_diag *d)
{
	int rc = 0;
	Q35_TRY(gguf_writer_kv_str(w, "general.architecture", "qwen35", d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.context_length", 64, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.embedding_length", 64, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.block_count", 4, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.feed_forward_length", 64, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.attention.head_count", 2, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.attention.head_count_kv", 1, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.attention.key_length", 32, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.attention.value_length", 32, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.rope.dimension_count", 8, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.ssm.conv_kernel", 4, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.ssm.state_size", 16, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.ssm.group_count", 2, d));
	Q35_TRY(gguf_writer_kv_u32(w, "qwen35.ssm.time_step_rank", 4, d));
	if (variant != 3)
		Q35_TRY(gguf_writer_kv_u32(w, "qwen35.ssm.inner_size", 64, d));
	/* 4 pairs: sections [2, 1, 1] cover them; [4, 0, 0] leaves pair 1 to the fourth. */
	static const int32_t good[4] = {2, 1, 1, 0}, bad[4] = {4, 0, 0, 0};
	Q35_TRY(gguf_writer_kv_arr(w, "qwen35.rope.dimension_sections", GGUF_TYPE_INT32,
				   variant == 2 ? bad : good, 4, d));
	if (variant == 1) {
		static const bool recurrent[4] = {false, true, true, false};
		Q35_TRY(gguf_writer_kv_arr(w, "qwen35.attention.recurrent_layers", GGUF_TYPE_BOOL,
					   recurrent, 4, d));
	}
	if (variant == 4)
		Q35_TRY(gguf_writer_kv_u32(w, "qwen35.nextn_predict_layers", 1, d));
	Q35_TRY(gs_tensor(w, "token_embd.weight", LM_F32, 64, 8, d));
	if (variant == 4)
		Q35_TRY(gs_tensor(w, "blk.3.nextn.eh_proj.weight", LM_F32, 128, 64, d));
q35_fail_:
	return rc;
}

static int q35_load(int variant, struct lm_hparams *hp, lm_diag *d)
{
	gguf_writer w;
	cr_assert_eq(gguf_writer_init(&w, 0, d), 0, "%s", d->msg);
	cr_assert_eq(q35_meta(&w, variant, d), 0, "%s", d->msg);
	uint8_t *img = NULL;
	size_t len = 0;
	cr_assert_eq(gs_finish(&w, &img, &len, d), 0, "%s", d->msg);
	gguf_writer_fini(&w);
	gguf_file *f = NULL;
	cr_assert_eq(gguf_open_mem(img, len, &f, d), 0, "%s", d->msg);
	int rc = lm_hparams_load(f, hp, d);
	struct lm_layer_cost lc[4];
	struct lm_model_costs costs = {.layer = lc};
	if (rc == 0)
		rc = lm_model_costs(f, hp, &costs, d);
	gguf_close(f);
	free(img);
	return rc;
}

/* qwen35: the layer pattern from full_attention_interval (default 4) or the per-layer array,
 * the delta-net's shape from the ssm keys and the recurrent layers' state geometry; a missing
 * ssm key and rope sections that leave a pair to the non-text section are refused with their
 * keys; a multi-token prediction layer is left out of the model (and of its costs). */
Test(model, qwen35_layer_pattern_state_geometry_and_refusals)
{
	static struct lm_hparams hp;
	lm_diag d = {{0}};
	cr_assert_eq(q35_load(0, &hp, &d), 0, "%s", d.msg);
	cr_expect(hp.layer[0].recurrent && hp.layer[1].recurrent && hp.layer[2].recurrent &&
		  !hp.layer[3].recurrent);
	cr_expect(hp.layer[3].q_gate && !hp.layer[0].q_gate);
	cr_expect_eq(hp.layer[3].rope.n_rot, 8);
	struct kv_geom g = lm_hparams_kv_geom(&hp, 0), a = lm_hparams_kv_geom(&hp, 3);
	cr_expect_eq(g.conv, 3 * (2 * 2 + 4) * 16);
	cr_expect_eq(g.state, 4 * 16 * 16);
	cr_expect(kv_geom_kind(&g) == KV_RECURRENT && kv_geom_kind(&a) == KV_GLOBAL);
	cr_expect(a.n_kv_heads == 1 && a.head_dim == 32 && a.state == 0);
	struct lm_widths w = lm_hparams_widths(&hp, 0, 4);
	cr_expect_eq(w.n_recurrent, 3);
	cr_expect_eq(w.q_dim, 2 * 2 * 32, "queries and their gates");

	cr_assert_eq(q35_load(1, &hp, &d), 0, "%s", d.msg);
	cr_expect(!hp.layer[0].recurrent && hp.layer[1].recurrent && hp.layer[2].recurrent &&
		  !hp.layer[3].recurrent);
	cr_expect_eq(q35_load(2, &hp, &d), LM_EUNSUPPORTED);
	cr_expect(strstr(d.msg, "qwen35.rope.dimension_sections") != NULL, "%s", d.msg);
	cr_expect_eq(q35_load(3, &hp, &d), LM_EFORMAT);
	cr_expect(strstr(d.msg, "qwen35.ssm.inner_size") != NULL, "%s", d.msg);
	cr_assert_eq(q35_load(4, &hp, &d), 0, "%s", d.msg);
	cr_expect_eq(hp.n_layer, 3);
	cr_expect_eq(hp.n_layer_nextn, 1);
	cr_expect(hp.layer[0].recurrent && hp.layer[1].recurrent && hp.layer[2].recurrent);
}

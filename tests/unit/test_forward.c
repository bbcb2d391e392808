/* The forward pass against llama.cpp's own outputs for stories260K (tests/../shared/models/
 * reference, made with llama.cpp v0.4.0 and an f32 KV cache), and against itself: a model split
 * into stages, batches mixing sequences and chunked prefill must all give the same logits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/weights.h"
#include "engine/forward.h"
#include "engine/scratch.h"
#include "common/format/synth.h"

static const char *shared(const char *rel)
{
	static char buf[4][4096];
	static int k;
	const char *root = getenv("LM_SHARED");
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", root != NULL ? root : "../shared", rel);
	return buf[k];
}

/* Reads whitespace-separated numbers after an optional "label:" prefix on a line. */
static int read_numbers(const char *path, const char *label, double *out, int cap)
{
	FILE *fp = fopen(path, "r");
	cr_assert_not_null(fp, "%s", path);
	char line[1 << 16];
	int n = 0;
	while (fgets(line, sizeof line, fp) != NULL) {
		char *p = line;
		if (label != NULL) {
			size_t l = strlen(label);
			if (strncmp(line, label, l) != 0)
				continue;
			p += l;
		}
		char *end;
		for (double v = strtod(p, &end); end != p && n < cap; v = strtod(p, &end)) {
			out[n++] = v;
			p = end;
		}
		if (label != NULL)
			break;
	}
	fclose(fp);
	return n;
}

struct rig {
	struct lm_backend be;
	struct lm_model m;
	struct kv_cache kv;
	struct lm_forward fw;
};

/* States a recurrent layer keeps for rollback in the rigs opened next (kv_geom's keep). */
static int32_t rig_keep;

static void rig_open(struct rig *r, const char *path, const struct lm_slice *s, int slots,
		     int max_batch, bool scalar)
{
	lm_diag d = {{0}};
	struct lm_backend_opts bo = {.n_threads = 1, .force_scalar = scalar};
	memset(r, 0, sizeof *r);
	cr_assert_eq(lm_backend_cpu_init(&r->be, &bo), 0);
	cr_assert_eq(lm_model_open(&r->m, path, s, &r->be, false, &d), 0, "%s", d.msg);
	struct kv_geom g[LM_MAX_LAYERS];
	for (int i = r->m.slice.begin; i < r->m.slice.end; i++) {
		g[i - r->m.slice.begin] = lm_hparams_kv_geom(&r->m.hp, i);
		if (r->m.hp.layer[i].recurrent)
			g[i - r->m.slice.begin].keep = rig_keep;
	}
	struct kv_cache_cfg kc = {.base_layer = r->m.slice.begin,
				  .num_layers = r->m.slice.end - r->m.slice.begin,
				  .geom = g,
				  .max_seq = 128,
				  .ring_extra = kv_geom_ring_extra(max_batch, 0),
				  .slots = slots,
				  .types = {{LM_F32, LM_F32}, {LM_F32, LM_F32}}};
	cr_assert_eq(kv_cache_init(&r->kv, &r->be, &kc, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_forward_init(&r->fw, &r->m, &r->be, &r->kv, max_batch, &d), 0, "%s", d.msg);
}

static void rig_close(struct rig *r)
{
	lm_forward_fini(&r->fw);
	kv_cache_fini(&r->kv);
	lm_model_close(&r->m);
	lm_backend_fini(&r->be);
}

/* Runs ids[0..n) of one sequence (slot) from position pos; logits of every row into out. */
static void run_rows(struct rig *r, int slot, int pos, const int32_t *ids, int n, float *out)
{
	struct lm_tok_loc loc[128];
	int32_t rows[128];
	for (int i = 0; i < n; i++) {
		loc[i] = (struct lm_tok_loc){slot, pos + i};
		rows[i] = i;
	}
	struct lm_batch b = {.n = n, .ids = ids, .loc = loc, .n_out = n, .out_rows = rows};
	lm_diag d = {{0}};
	cr_assert_eq(lm_forward_run(&r->fw, &b, NULL, NULL, out, &d), 0, "%s", d.msg);
}

static int argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

static const char *const slugs[] = {"once_upon_a_time", "the_cat", "lily_wanted", "empty",
				    "tom_apples"};

Test(forward, stories260k_matches_llamacpp, .timeout = 60)
{
	for (int kernels = 0; kernels < 2; kernels++) {
		struct rig r;
		rig_open(&r, shared("models/stories260K.gguf"), NULL, 1, 128, kernels == 0);
		for (size_t s = 0; s < sizeof slugs / sizeof slugs[0]; s++) {
			char rel[256];
			double want_ids[128], want_logits[512];
			snprintf(rel, sizeof rel, "models/reference/%s.llamacpp_generate.txt",
				 slugs[s]);
			int n_prompt = read_numbers(shared(rel), "prompt_ids:", want_ids, 128);
			int n_all = read_numbers(shared(rel), "ids:", want_ids + 0, 128);
			double prompt[128];
			read_numbers(shared(rel), "prompt_ids:", prompt, 128);
			snprintf(rel, sizeof rel, "models/reference/%s.llamacpp_last_logits.txt",
				 slugs[s]);
			cr_assert_eq(read_numbers(shared(rel), NULL, want_logits, 512), 512);

			int32_t ids[128];
			for (int i = 0; i < n_all; i++)
				ids[i] = (int32_t)want_ids[i];
			static float logits[128 * 512];
			r.kv.len[0] = 0;
			run_rows(&r, 0, 0, ids, n_prompt, logits);
			const float *last = logits + (size_t)(n_prompt - 1) * 512;
			double maxerr = 0;
			for (int i = 0; i < 512; i++)
				maxerr = fmax(maxerr, fabs(last[i] - want_logits[i]));
			cr_expect_lt(maxerr, 1e-4, "%s (%s kernels): last logits max |diff| %g",
				     slugs[s], kernels ? "auto" : "scalar", maxerr);
			/* Greedy decode, one token at a time, must follow llama.cpp's ids. */
			int32_t tok = argmax(last, 512);
			for (int p = n_prompt; p < n_all; p++) {
				cr_assert_eq(tok, ids[p], "%s: position %d: %d, llama.cpp %d",
					     slugs[s], p, tok, ids[p]);
				run_rows(&r, 0, p, &tok, 1, logits);
				tok = argmax(logits, 512);
			}
		}
		rig_close(&r);
	}
}

/* Every position's logits of the 65-token greedy sequence, from one batched pass and from
 * chunked passes, against llama.cpp's. */
Test(forward, all_positions_batched_and_chunked, .timeout = 60)
{
	static double want[65 * 512];
	double idsd[128];
	int32_t ids[65];
	int n = read_numbers(shared("models/reference/once_upon_a_time.llamacpp_generate.txt"),
			     "ids:", idsd, 128);
	cr_assert_eq(n, 65);
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)idsd[i];
	cr_assert_eq(
		read_numbers(
			shared("models/reference/once_upon_a_time.llamacpp_all_logits_seq.txt"),
			NULL, want, 65 * 512),
		65 * 512);
	static float got[65 * 512], chunked[65 * 512];
	struct rig r;
	rig_open(&r, shared("models/stories260K.gguf"), NULL, 2, 128, false);
	run_rows(&r, 0, 0, ids, 65, got);
	double maxerr = 0;
	for (int i = 0; i < 65 * 512; i++)
		maxerr = fmax(maxerr, fabs(got[i] - want[i]));
	cr_expect_lt(maxerr, 1e-4, "all positions: max |diff| %g", maxerr);
	/* Chunks of 7 in slot 1 give the same logits as one pass. */
	for (int at = 0; at < 65; at += 7)
		run_rows(&r, 1, at, ids + at, at + 7 <= 65 ? 7 : 65 - at, chunked + at * 512);
	maxerr = 0;
	for (int i = 0; i < 65 * 512; i++)
		maxerr = fmax(maxerr, fabs(got[i] - chunked[i]));
	cr_expect_lt(maxerr, 1e-5, "chunked prefill differs by %g", maxerr);
	rig_close(&r);
}

/* Two sequences in one batch get exactly the logits each gets alone. */
Test(forward, mixed_batch_equals_solo_runs)
{
	struct rig r;
	rig_open(&r, shared("models/stories260K.gguf"), NULL, 2, 128, false);
	int32_t a[5] = {1, 403, 407, 261, 378}, b[4] = {1, 291, 280, 294};
	static float la[5 * 512], lb[4 * 512], mixed[9 * 512];
	run_rows(&r, 0, 0, a, 5, la);
	run_rows(&r, 1, 0, b, 4, lb);
	/* Interleaved in one batch: a0 b0 a1 b1 ... */
	struct lm_tok_loc loc[9];
	int32_t ids[9], rows[9];
	int k = 0;
	for (int i = 0; i < 5; i++) {
		loc[k] = (struct lm_tok_loc){0, i};
		ids[k++] = a[i];
		if (i < 4) {
			loc[k] = (struct lm_tok_loc){1, i};
			ids[k++] = b[i];
		}
	}
	for (int i = 0; i < 9; i++)
		rows[i] = i;
	struct lm_batch bt = {.n = 9, .ids = ids, .loc = loc, .n_out = 9, .out_rows = rows};
	lm_diag d = {{0}};
	cr_assert_eq(lm_forward_run(&r.fw, &bt, NULL, NULL, mixed, &d), 0, "%s", d.msg);
	for (int i = 0, ia = 0, ib = 0; i < 9; i++) {
		const float *want = loc[i].slot == 0 ? la + 512 * ia++ : lb + 512 * ib++;
		cr_expect_eq(memcmp(mixed + 512 * i, want, 512 * sizeof(float)), 0, "row %d", i);
	}
	rig_close(&r);
}

/* The model cut into three stages, hidden states handed on by the host, equals the whole. */
Test(forward, stages_compose_to_the_whole_model)
{
	struct rig whole, s0, s1, s2;
	rig_open(&whole, shared("models/stories260K.gguf"), NULL, 1, 128, false);
	struct lm_slice a = {0, 2, true, false}, b = {2, 3, false, false}, c = {3, 5, false, true};
	rig_open(&s0, shared("models/stories260K.gguf"), &a, 1, 128, false);
	rig_open(&s1, shared("models/stories260K.gguf"), &b, 1, 128, false);
	rig_open(&s2, shared("models/stories260K.gguf"), &c, 1, 128, false);
	int32_t ids[5] = {1, 403, 407, 261, 378};
	static float want[5 * 512], got[5 * 512], h0[5 * 64], h1[5 * 64];
	run_rows(&whole, 0, 0, ids, 5, want);
	struct lm_tok_loc loc[5];
	int32_t rows[5];
	for (int i = 0; i < 5; i++) {
		loc[i] = (struct lm_tok_loc){0, i};
		rows[i] = i;
	}
	lm_diag d = {{0}};
	struct lm_batch bt = {.n = 5, .ids = ids, .loc = loc, .n_out = 5, .out_rows = rows};
	cr_assert_eq(lm_forward_run(&s0.fw, &bt, NULL, h0, NULL, &d), 0, "%s", d.msg);
	bt.ids = NULL;
	cr_assert_eq(lm_forward_run(&s1.fw, &bt, h0, h1, NULL, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_forward_run(&s2.fw, &bt, h1, NULL, got, &d), 0, "%s", d.msg);
	cr_expect_eq(memcmp(got, want, sizeof want), 0, "three stages differ from the whole");
	/* Each stage allocated KV for its own layers only. */
	cr_expect_eq(s0.kv.num_layers, 2);
	cr_expect_eq(s1.kv.base_layer, 2);
	cr_expect_eq(s2.kv.num_layers, 2);
	cr_expect_eq(s0.kv.bytes + s1.kv.bytes + s2.kv.bytes, whole.kv.bytes);
	rig_close(&whole);
	rig_close(&s0);
	rig_close(&s1);
	rig_close(&s2);
}

/* A model of sliding and global layers of their own geometry (gemma4: window 4, layers 2 and 5
 * global, with another head size and KV head count) cut into two stages at every layer: the
 * stages' logits equal the whole model's bit for bit over 20 positions (5x the window), a
 * 12-token prefill then one token at a time, so every ring wraps and every slice starts and
 * ends on every kind of layer. */
Test(forward, sliding_and_global_slices_at_every_cut, .timeout = 60)
{
	char path[] = "/tmp/lm_test_forward_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "gemma4";
	o.dim = 128;
	o.layers = 7;
	o.heads = 4;
	o.kv_heads = 1;
	o.kv_heads_swa = 2;
	o.head_dim = 64;
	o.head_dim_swa = 32;
	o.ffn = 192;
	o.vocab = 300;
	o.window = 4;
	o.swa_period = 3;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	enum { N = 20, P = 12, V = 300 };
	int32_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = (int32_t)((i * 37 + 5) % V);
	static float want[N][V], got[N][V];
	struct rig whole;
	rig_open(&whole, path, NULL, 1, 16, false);
	cr_expect_eq(whole.kv.layers[0].ctx, 4 + 15, "a sliding ring: window + batch - 1");
	cr_expect_eq(whole.kv.layers[2].ctx, 128, "a global layer: every position");
	cr_expect_eq(whole.kv.layers[2].head_dim, 64);
	cr_expect_eq(whole.kv.layers[1].n_kv_heads, 2);
	run_rows(&whole, 0, 0, ids, P, &want[0][0]);
	for (int i = P; i < N; i++)
		run_rows(&whole, 0, i, ids + i, 1, want[i]);
	for (int32_t cut = 1; cut < 7; cut++) {
		struct rig a, b;
		struct lm_slice sa = {0, cut, true, false}, sb = {cut, 7, false, true};
		rig_open(&a, path, &sa, 1, 16, false);
		rig_open(&b, path, &sb, 1, 16, false);
		static float h[N * 128];
		struct lm_tok_loc loc[N];
		int32_t rows[N];
		for (int at = 0; at < N; at = at < P ? P : at + 1) {
			int n = at < P ? P : 1;
			for (int i = 0; i < n; i++) {
				loc[i] = (struct lm_tok_loc){0, at + i};
				rows[i] = i;
			}
			struct lm_batch bt = {
				.n = n, .ids = ids + at, .loc = loc, .n_out = n, .out_rows = rows};
			cr_assert_eq(lm_forward_run(&a.fw, &bt, NULL, h, NULL, &d), 0, "%s", d.msg);
			bt.ids = NULL;
			cr_assert_eq(lm_forward_run(&b.fw, &bt, h, NULL, got[at], &d), 0, "%s",
				     d.msg);
		}
		cr_expect_eq(memcmp(got, want, sizeof want), 0, "cut at layer %d differs", cut);
		cr_expect_eq(a.kv.bytes + b.kv.bytes, whole.kv.bytes, "cut at layer %d", cut);
		rig_close(&a);
		rig_close(&b);
	}
	rig_close(&whole);
	unlink(path);
}

/* A 128-wide, 300-token model at `path` (open in `whole`, two slots): two sequences
 * interleaved in one batch give each row the same bits as the sequences run alone, and the
 * model cut into two stages at layer `cut` equals the whole. */
static void moe_batches_and_stages(struct rig *whole, const char *path, int32_t cut,
				   int32_t n_layer)
{
	enum { V = 300 };
	lm_diag d = {{0}};
	int32_t a[5] = {17, 203, 44, 261, 78}, b[4] = {3, 291, 280, 94};
	static float la[5 * V], lb[4 * V], mixed[9 * V];
	run_rows(whole, 0, 0, a, 5, la);
	run_rows(whole, 1, 0, b, 4, lb);
	struct lm_tok_loc loc[9];
	int32_t ids[9], rows[9];
	int k = 0;
	for (int i = 0; i < 5; i++) {
		loc[k] = (struct lm_tok_loc){0, 5 + i};
		ids[k++] = a[4 - i];
		if (i < 4) {
			loc[k] = (struct lm_tok_loc){1, 4 + i};
			ids[k++] = b[3 - i];
		}
	}
	for (int i = 0; i < 9; i++)
		rows[i] = i;
	/* Continue both sequences with their tokens reversed, first in one batch ... */
	struct lm_batch bt = {.n = 9, .ids = ids, .loc = loc, .n_out = 9, .out_rows = rows};
	cr_assert_eq(lm_forward_run(&whole->fw, &bt, NULL, NULL, mixed, &d), 0, "%s", d.msg);
	/* ... then each alone, token by token, from the same cache state. */
	struct rig solo;
	rig_open(&solo, path, NULL, 2, 16, false);
	run_rows(&solo, 0, 0, a, 5, la);
	run_rows(&solo, 1, 0, b, 4, lb);
	for (int i = 0; i < 9; i++) {
		float one[V];
		run_rows(&solo, loc[i].slot, loc[i].pos, &ids[i], 1, one);
		cr_expect_eq(memcmp(one, mixed + (size_t)i * V, sizeof one), 0,
			     "row %d differs alone and in the batch", i);
	}
	rig_close(&solo);

	/* Two stages cut inside the run of MoE layers. */
	static float want[5 * V], got[5 * V], h[5 * 128];
	struct rig w1;
	rig_open(&w1, path, NULL, 1, 16, false);
	run_rows(&w1, 0, 0, a, 5, want);
	rig_close(&w1);
	struct rig s0, s1;
	struct lm_slice sa = {0, cut, true, false}, sb = {cut, n_layer, false, true};
	rig_open(&s0, path, &sa, 1, 16, false);
	rig_open(&s1, path, &sb, 1, 16, false);
	for (int i = 0; i < 5; i++) {
		loc[i] = (struct lm_tok_loc){0, i};
		rows[i] = i;
	}
	struct lm_batch bs = {.n = 5, .ids = a, .loc = loc, .n_out = 5, .out_rows = rows};
	cr_assert_eq(lm_forward_run(&s0.fw, &bs, NULL, h, NULL, &d), 0, "%s", d.msg);
	bs.ids = NULL;
	cr_assert_eq(lm_forward_run(&s1.fw, &bs, h, NULL, got, &d), 0, "%s", d.msg);
	cr_expect_eq(memcmp(got, want, sizeof want), 0, "two stages differ from the whole");
	rig_close(&s0);
	rig_close(&s1);
}

/* qwen3moe (8 experts, 2 per token): each expert is bound as a matrix pointing at its own block
 * of the mapped 3-D tensor; two sequences interleaved in one batch give each row the same bits
 * as the sequences run alone; and the model cut into two stages inside its MoE layers equals
 * the whole. */
Test(forward, qwen3moe_experts_in_place_batches_and_stages, .timeout = 60)
{
	char path[] = "/tmp/lm_test_forward_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "qwen3moe";
	o.dim = 128;
	o.layers = 3;
	o.heads = 4;
	o.kv_heads = 2;
	o.ffn = 192;
	o.ffn_exp = 64;
	o.experts = 8;
	o.experts_used = 2;
	o.vocab = 300;
	o.type = LM_Q8_0;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	enum { V = 300 };
	struct rig whole;
	rig_open(&whole, path, NULL, 2, 16, false);
	const struct lm_layer_hparams *l = &whole.m.hp.layer[1];
	cr_expect(l->n_expert == 8 && l->n_expert_used == 2 && l->n_ff_exp == 64);
	cr_expect(whole.m.hp.moe.norm && whole.m.hp.moe.gating == LM_MOE_SOFTMAX);
	const struct gguf_tensor *t = gguf_find_tensor(whole.m.file, "blk.1.ffn_down_exps.weight");
	cr_assert_not_null(t);
	const struct lm_experts *x = &lm_model_layer(&whole.m, 1)->exps;
	cr_assert_eq(x->n, 8);
	for (int e = 0; e < 8; e++)
		cr_expect_eq(x->down[e].data,
			     (const uint8_t *)t->data + (size_t)e * 128 * (64 / 32 * 34),
			     "expert %d points into the mapping", e);

	moe_batches_and_stages(&whole, path, 2, 3);
	rig_close(&whole);
	unlink(path);
}

/* gpt-oss (8 experts, 2 per token, MXFP4 experts, q8_0 elsewhere): even layers slide over 4
 * positions, odd ones are global; the sinks and biases are bound; each MXFP4 expert points
 * into the mapping; and, as for qwen3moe, batches and a cut inside the MoE layers change no
 * bit. */
Test(forward, gptoss_mxfp4_experts_in_place_batches_and_stages, .timeout = 60)
{
	char path[] = "/tmp/lm_test_forward_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "gpt-oss";
	o.dim = 128;
	o.layers = 3;
	o.heads = 4;
	o.kv_heads = 2;
	o.ffn = 192;
	o.ffn_exp = 64;
	o.experts = 8;
	o.experts_used = 2;
	o.window = 4;
	o.vocab = 300;
	o.type = LM_Q8_0;
	o.exps_type = LM_MXFP4;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	struct rig whole;
	rig_open(&whole, path, NULL, 2, 16, false);
	const struct lm_hparams *hp = &whole.m.hp;
	cr_expect(hp->layer[0].window == 4 && hp->layer[1].window == 0 && hp->layer[2].window == 4);
	cr_expect(hp->moe.gating == LM_MOE_SOFTMAX_WEIGHT && !hp->moe.norm && hp->moe.swiglu_oai);
	const struct lm_layer_weights *w = lm_model_layer(&whole.m, 1);
	cr_expect(w->attn_sinks.data != NULL && w->attn_sinks.ne0 == 4);
	cr_expect(w->bq.data != NULL && w->bo.data != NULL && w->gate_inp_b.data != NULL);
	cr_expect(w->down_exps_b.ne0 == 128 && w->down_exps_b.ne1 == 8);
	const struct gguf_tensor *t = gguf_find_tensor(whole.m.file, "blk.1.ffn_down_exps.weight");
	cr_assert_not_null(t);
	cr_expect_eq(t->type, LM_MXFP4);
	for (int e = 0; e < 8; e++)
		cr_expect_eq(w->exps.down[e].data,
			     (const uint8_t *)t->data + (size_t)e * 128 * (64 / 32 * 17),
			     "expert %d points into the mapping", e);
	moe_batches_and_stages(&whole, path, 2, 3);
	rig_close(&whole);
	unlink(path);
}

static int refuse_download(void *ctx, void *dst, const void *src, size_t n)
{
	return LM_EDEVICE;
}

static int refuse_mul_rows(void *ctx, float *y, const float *b, int width, int n)
{
	return LM_EDEVICE;
}

/* gemma4 with experts (26B-A4B's layout: 8 experts, 2 per token, beside the FFN of every layer
 * but the first, which stays dense): the
 * fused gate/up tensor is bound expert by expert as two matrices pointing at the two halves of
 * the expert's block, and the per-expert scales are read in place; batches and a cut inside the
 * MoE layers as for qwen3moe. */
Test(forward, gemma4_experts_in_place_batches_and_stages, .timeout = 60)
{
	char path[] = "/tmp/lm_test_forward_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "gemma4";
	o.dim = 128;
	o.layers = 4;
	o.heads = 4;
	o.kv_heads = 2;
	o.head_dim = 64;
	o.head_dim_swa = 32;
	o.kv_heads_swa = 4;
	o.window = 4;
	o.swa_period = 2;
	o.ffn = 192;
	o.ffn_exp = 64;
	o.experts = 8;
	o.experts_used = 2;
	o.dense_layers = 1;
	o.vocab = 300;
	o.type = LM_Q8_0;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	struct rig whole;
	rig_open(&whole, path, NULL, 2, 16, false);
	const struct lm_layer_hparams *l = &whole.m.hp.layer[1];
	cr_expect(l->n_expert == 8 && l->n_expert_used == 2 && l->n_ff_exp == 64 &&
		  l->n_ff_shexp == 192);
	cr_expect(whole.m.hp.layer[0].n_expert == 0 && lm_model_layer(&whole.m, 0)->exps.n == 0,
		  "layer 0 stays dense");
	const struct gguf_tensor *t =
		gguf_find_tensor(whole.m.file, "blk.1.ffn_gate_up_exps.weight");
	const struct gguf_tensor *sc = gguf_find_tensor(whole.m.file, "blk.1.ffn_down_exps.scale");
	cr_assert(t != NULL && sc != NULL);
	const struct lm_experts *x = &lm_model_layer(&whole.m, 1)->exps;
	cr_assert_eq(x->n, 8);
	const size_t row = 128 / 32 * 34; /* a q8_0 row of 128 */
	for (int e = 0; e < 8; e++) {
		const uint8_t *block = (const uint8_t *)t->data + (size_t)e * 128 * row;
		cr_expect_eq(x->gate[e].data, block, "expert %d's gate points into the mapping", e);
		cr_expect_eq(x->up[e].data, block + 64 * row, "expert %d's up is its second half",
			     e);
		cr_expect(x->gate[e].ne1 == 64 && x->up[e].ne1 == 64);
	}
	cr_expect_eq((const void *)x->down_scale, sc->data);
	moe_batches_and_stages(&whole, path, 2, 4); /* [0, 2): a dense layer and a MoE one */

	/* A failure inside the mixture names its layer and its op. */
	struct lm_backend_i iface = *whole.be.iface;
	struct lm_backend refusing = {&iface, whole.be.ctx};
	whole.fw.be = &refusing;
	int32_t ids[2] = {1, 2}, rows[1] = {1};
	struct lm_tok_loc loc[2] = {{0, 0}, {0, 1}};
	struct lm_batch b = {.n = 2, .ids = ids, .loc = loc, .n_out = 1, .out_rows = rows};
	static float out[300];
	iface.download = refuse_download; /* the first: layer 1's router logits to the host */
	cr_expect_eq(lm_forward_run(&whole.fw, &b, NULL, NULL, out, &d), LM_EDEVICE);
	cr_expect_str_eq(d.msg, "layer 1: router download failed: device error");
	iface.download = whole.be.iface->download;
	iface.mul_rows = refuse_mul_rows;
	cr_expect_eq(lm_forward_run(&whole.fw, &b, NULL, NULL, out, &d), LM_EDEVICE);
	cr_expect_str_eq(d.msg, "layer 1: ffn_gate_inp.scale failed: device error");
	whole.fw.be = &whole.be;
	rig_close(&whole);
	unlink(path);
}

/* qwen35 (4 layers: recurrent, attention, recurrent, attention; 2 key and 4 value heads in the
 * delta-net): a prefill equals the same tokens token by token bit for bit (the delta rule runs
 * token by token in any batch); two sequences interleaved in one batch equal each alone; stages
 * cut between a recurrent and an attention layer, either way, equal the whole; a rollback the
 * recurrent state cannot make is refused naming the layer, and a restart from 0 starts from a
 * zeroed state. */
Test(forward, qwen35_recurrent_batches_stages_and_rollback, .timeout = 60)
{
	char path[] = "/tmp/lm_test_forward_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "qwen35";
	o.dim = 128;
	o.layers = 4;
	o.heads = 4;
	o.kv_heads = 2;
	o.ssm_v_heads = 4;
	o.full_attn_every = 2;
	o.ffn = 192;
	o.vocab = 300;
	o.type = LM_Q8_0;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	enum { V = 300 };
	struct rig whole;
	rig_open(&whole, path, NULL, 2, 16, false);
	const struct lm_hparams *hp = &whole.m.hp;
	cr_expect(hp->layer[0].recurrent && !hp->layer[1].recurrent && hp->layer[2].recurrent &&
		  !hp->layer[3].recurrent);
	cr_expect(hp->ssm.conv_kernel == 4 && hp->ssm.head_dim == 32 && hp->ssm.n_k_heads == 2 &&
		  hp->ssm.n_v_heads == 4);
	/* Per slot: conv ring 3 x (2 x 2 + 4) x 32 f32, state 4 x 32 x 32 f32, on the two
	 * recurrent layers; the attention layers' 128 rows of 2 x 32 K and V f32. */
	cr_expect_eq(whole.kv.bytes,
		     2 * 2 * (3 * 8 * 32 + 4 * 32 * 32) * 4 + 2 * 2 * 128 * 2 * 64 * 4);
	/* The planner prices the scratch the stage allocates, the delta-net's included. */
	cr_expect_eq(whole.fw.scratch_bytes, lm_forward_scratch_bytes(hp, 0, 4, true, 16));

	int32_t a[6] = {17, 203, 44, 261, 78, 5}, b[4] = {3, 291, 280, 94};
	static float la[6 * V], lone[6 * V], lb[4 * V], mixed[8 * V];
	run_rows(&whole, 0, 0, a, 6, la);
	struct rig tok;
	rig_open(&tok, path, NULL, 2, 16, false);
	for (int i = 0; i < 6; i++)
		run_rows(&tok, 0, i, &a[i], 1, lone + (size_t)i * V);
	cr_expect_eq(memcmp(la, lone, sizeof la), 0, "a prefill differs from token by token");
	/* A restart from 0 on the same slot zeroes the state: the same logits again. */
	run_rows(&tok, 0, 0, a, 6, lone);
	cr_expect_eq(memcmp(la, lone, sizeof la), 0, "a restart from 0 kept an old state");
	rig_close(&tok);

	/* Rolling slot 0 back to 3 of its 6 positions cannot restore the delta-net's state. */
	struct lm_tok_loc loc[8];
	int32_t ids[8], rows[8];
	loc[0] = (struct lm_tok_loc){0, 3};
	rows[0] = 0;
	struct lm_batch bad = {.n = 1, .ids = a, .loc = loc, .n_out = 1, .out_rows = rows};
	cr_expect_eq(lm_forward_run(&whole.fw, &bad, NULL, NULL, mixed, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "layer 0 is recurrent") != NULL, "%s", d.msg);

	run_rows(&whole, 1, 0, b, 4, lb);
	for (int i = 0, k = 0; i < 4; i++) {
		loc[k] = (struct lm_tok_loc){0, 6 + i};
		ids[k++] = a[5 - i];
		loc[k] = (struct lm_tok_loc){1, 4 + i};
		ids[k++] = b[3 - i];
	}
	for (int i = 0; i < 8; i++)
		rows[i] = i;
	struct lm_batch bt = {.n = 8, .ids = ids, .loc = loc, .n_out = 8, .out_rows = rows};
	cr_assert_eq(lm_forward_run(&whole.fw, &bt, NULL, NULL, mixed, &d), 0, "%s", d.msg);
	struct rig solo;
	rig_open(&solo, path, NULL, 2, 16, false);
	run_rows(&solo, 0, 0, a, 6, la);
	run_rows(&solo, 1, 0, b, 4, lb);
	for (int i = 0; i < 8; i++) {
		float one[V];
		run_rows(&solo, loc[i].slot, loc[i].pos, &ids[i], 1, one);
		cr_expect_eq(memcmp(one, mixed + (size_t)i * V, sizeof one), 0,
			     "row %d differs alone and in the batch", i);
	}
	rig_close(&solo);
	rig_close(&whole);

	/* Stages cut after layer 0 (recurrent | attention) and after layer 1 (attention |
	 * recurrent) equal the whole. */
	static float want[6 * V], got[6 * V], h[6 * 128];
	struct rig w1;
	rig_open(&w1, path, NULL, 1, 16, false);
	run_rows(&w1, 0, 0, a, 6, want);
	rig_close(&w1);
	for (int cut = 1; cut <= 2; cut++) {
		struct rig s0, s1;
		struct lm_slice sa = {0, cut, true, false}, sb = {cut, 4, false, true};
		rig_open(&s0, path, &sa, 1, 16, false);
		rig_open(&s1, path, &sb, 1, 16, false);
		for (int i = 0; i < 6; i++) {
			loc[i] = (struct lm_tok_loc){0, i};
			rows[i] = i;
		}
		struct lm_batch bs = {.n = 6, .ids = a, .loc = loc, .n_out = 6, .out_rows = rows};
		cr_assert_eq(lm_forward_run(&s0.fw, &bs, NULL, h, NULL, &d), 0, "%s", d.msg);
		bs.ids = NULL;
		cr_assert_eq(lm_forward_run(&s1.fw, &bs, h, NULL, got, &d), 0, "%s", d.msg);
		cr_expect_eq(memcmp(got, want, sizeof want), 0, "cut at %d differs from the whole",
			     cut);
		rig_close(&s0);
		rig_close(&s1);
	}
	unlink(path);
}

/* qwen35 with 3 states kept (drafts of up to 3 tokens): a verify batch of 4 tokens keeps the
 * states after its first three positions; rolled back to any of them, the next token's logits
 * are those of the accepted sequence run from scratch, bit for bit. The state before the batch
 * is not kept: rolling back to it is refused. */
Test(forward, qwen35_rollback_to_a_kept_state, .timeout = 60)
{
	char path[] = "/tmp/lm_test_forward_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "qwen35";
	o.dim = 128;
	o.layers = 3;
	o.heads = 4;
	o.kv_heads = 2;
	o.full_attn_every = 2;
	o.ffn = 192;
	o.vocab = 300;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	enum { V = 300 };
	int32_t prompt[4] = {17, 203, 44, 261}, draft[4] = {78, 5, 99, 123}, next = 250;
	static float logits[8 * V], want[V];
	rig_keep = 3;
	struct rig r;
	rig_open(&r, path, NULL, 1, 16, false);
	rig_keep = 0;
	cr_expect_eq(r.kv.rec_keep, 3);
	for (int back = 1; back <= 3; back++) {
		/* The prompt, the verify batch at [4, 8), then the sequence back to 4 + back
		 * positions and on with another token. */
		run_rows(&r, 0, 0, prompt, 4, logits);
		run_rows(&r, 0, 4, draft, 4, logits);
		cr_expect(r.kv.rec_lo[0] == 4 && r.kv.rec_hi[0] == 7, "kept [%d, %d)",
			  r.kv.rec_lo[0], r.kv.rec_hi[0]);
		float got[V];
		run_rows(&r, 0, 4 + back, &next, 1, got);
		struct rig fresh;
		rig_open(&fresh, path, NULL, 1, 16, false);
		int32_t seq[9];
		memcpy(seq, prompt, sizeof prompt);
		memcpy(seq + 4, draft, (size_t)back * sizeof(int32_t));
		seq[4 + back] = next;
		for (int i = 0; i <= 4 + back; i++)
			run_rows(&fresh, 0, i, &seq[i], 1, want);
		rig_close(&fresh);
		cr_expect_eq(memcmp(got, want, sizeof want), 0,
			     "rolled back to %d positions, the logits differ from a fresh run",
			     4 + back);
	}
	/* Back to 4: the state before the verify batch was not kept. */
	run_rows(&r, 0, 0, prompt, 4, logits);
	run_rows(&r, 0, 4, draft, 4, logits);
	struct lm_tok_loc loc = {0, 4};
	int32_t row = 0;
	struct lm_batch b = {.n = 1, .ids = &next, .loc = &loc, .n_out = 1, .out_rows = &row};
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, logits, &d), LM_ERANGE);
	cr_expect(
		strstr(d.msg, "keeps those after positions [4, 7), not the one after position 3") !=
			NULL,
		"%s", d.msg);
	rig_close(&r);
	unlink(path);
}

Test(forward, bad_batches_are_refused)
{
	struct rig r;
	rig_open(&r, shared("models/stories260K.gguf"), NULL, 2, 8, false);
	static float out[16 * 512];
	lm_diag d = {{0}};
	int32_t ids[3] = {1, 2, 3}, rows[1] = {0};
	struct lm_tok_loc loc[3] = {{0, 0}, {0, 1}, {0, 2}};
	struct lm_batch b = {.n = 3, .ids = ids, .loc = loc, .n_out = 1, .out_rows = rows};
	ids[1] = 512;
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "vocabulary") != NULL, "%s", d.msg);
	ids[1] = 2;
	loc[2].pos = 5; /* a gap */
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_ERANGE);
	loc[2] = (struct lm_tok_loc){2, 2}; /* no such slot */
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_ERANGE);
	loc[0].pos = 4; /* starts past the slot's length */
	loc[2] = (struct lm_tok_loc){0, 2};
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_ERANGE);
	loc[0].pos = 0;
	b.n = 9; /* over max_batch */
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_ERANGE);
	b.n = 3;
	rows[0] = 3;
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_ERANGE);
	rig_close(&r);
}

/* A device that refuses one op: the embedding's row gather, or the residual add every layer
 * ends its blocks with. */
static int refuse_get_rows(void *ctx, float *y, const struct lm_weight *table, const int32_t *ids,
			   int n)
{
	return LM_EDEVICE;
}

static int refuse_add(void *ctx, float *y, const float *a, size_t len)
{
	return LM_EDEVICE;
}

/* A failure is reported where it happened: the embedding is not a layer, and a layer's op names
 * the layer it ran in. */
Test(forward, backend_failures_name_the_embedding_or_the_layer)
{
	struct rig r;
	rig_open(&r, shared("models/stories260K.gguf"), NULL, 1, 4, false);
	struct lm_backend_i iface = *r.be.iface;
	struct lm_backend refusing = {&iface, r.be.ctx};
	r.fw.be = &refusing;
	static float out[2 * 512];
	int32_t ids[2] = {1, 2}, rows[1] = {1};
	struct lm_tok_loc loc[2] = {{0, 0}, {0, 1}};
	struct lm_batch b = {.n = 2, .ids = ids, .loc = loc, .n_out = 1, .out_rows = rows};
	lm_diag d = {{0}};

	iface.get_rows = refuse_get_rows;
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_EDEVICE);
	cr_expect_str_eq(d.msg, "embedding: token_embd failed: device error");

	iface.get_rows = r.be.iface->get_rows;
	iface.add = refuse_add;
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), LM_EDEVICE);
	cr_expect_str_eq(d.msg, "layer 0: residual failed: device error");

	iface.add = r.be.iface->add;
	cr_expect_eq(lm_forward_run(&r.fw, &b, NULL, NULL, out, &d), 0, "%s", d.msg);
	r.fw.be = &r.be;
	rig_close(&r);
}

/* ------------------------------------------------------------------ steps (backend.h) */

/* A backend with steps over the CPU's, scripted: each step_begin takes the next entry of the
 * script. DEFER opens a step whose ops run nothing (a CUDA backend's lookup or capture pass) and
 * whose step_end asks for them again; RUN opens one whose ops run at once and whose step_end
 * says they are issued (a replay); DECLINE does not open. */
enum step_act { STEP_DEFER, STEP_RUN, STEP_DECLINE };
static struct {
	const struct lm_backend_i *cpu;
	const enum step_act *script;
	int script_n, at;
	bool open, deferring;
	int begins, deferred_ops, eager_ops;
	bool ids_given; /* the last step_begin's ids were not NULL */
	int32_t n;      /* the last step_begin's batch */
	struct lm_tok_loc loc0;
} stp;

static int step_begin_scripted(void *ctx, const struct lm_tok_loc *loc, const int32_t *ids, int n,
			       bool *open)
{
	const enum step_act a = stp.at < stp.script_n ? stp.script[stp.at] : STEP_DEFER;
	stp.at++;
	stp.begins++;
	stp.ids_given = ids != NULL;
	stp.n = n;
	stp.loc0 = loc[0];
	stp.open = *open = a != STEP_DECLINE;
	stp.deferring = a == STEP_DEFER;
	return 0;
}

static int step_end_scripted(void *ctx, int rc, bool *again)
{
	*again = stp.deferring;
	stp.open = stp.deferring = false;
	return *again ? 0 : rc;
}

/* Every op the llama layers issue: counted, and run only outside a deferred step. */
#define STEP_OP(name, params, args)         \
	static int step_##name params       \
	{                                   \
		if (stp.deferring) {        \
			stp.deferred_ops++; \
			return 0;           \
		}                           \
		stp.eager_ops += !stp.open; \
		return stp.cpu->name args;  \
	}
STEP_OP(get_rows, (void *c, float *y, const struct lm_weight *t, const int32_t *ids, int n),
	(c, y, t, ids, n))
STEP_OP(matmul, (void *c, float *y, const struct lm_weight *w, const float *x, int n),
	(c, y, w, x, n))
STEP_OP(rmsnorm, (void *c, float *y, const float *x, const float *w, int dim, int n, float eps),
	(c, y, x, w, dim, n, eps))
STEP_OP(rope,
	(void *c, float *x, int h, int hd, const struct lm_tok_loc *loc, int n,
	 const struct lm_rope_params *rp),
	(c, x, h, hd, loc, n, rp))
STEP_OP(kv_store,
	(void *c, const struct lm_kv_layer *kv, const float *k, const float *v,
	 const struct lm_tok_loc *loc, int n),
	(c, kv, k, v, loc, n))
STEP_OP(attention,
	(void *c, float *out, const float *q, const struct lm_kv_layer *kv,
	 const struct lm_tok_loc *loc, int n, int h, float scale),
	(c, out, q, kv, loc, n, h, scale))
STEP_OP(silu_mul, (void *c, float *y, const float *g, const float *u, size_t len),
	(c, y, g, u, len))
STEP_OP(add, (void *c, float *y, const float *a, size_t len), (c, y, a, len))
#undef STEP_OP

static void step_iface(struct lm_backend_i *i, const struct lm_backend_i *cpu)
{
	*i = *cpu;
	memset(&stp, 0, sizeof stp);
	stp.cpu = cpu;
	i->get_rows = step_get_rows;
	i->matmul = step_matmul;
	i->rmsnorm = step_rmsnorm;
	i->rope = step_rope;
	i->kv_store = step_kv_store;
	i->attention = step_attention;
	i->silu_mul = step_silu_mul;
	i->add = step_add;
	i->step_begin = step_begin_scripted;
	i->step_end = step_end_scripted;
}

/* Whatever the backend's steps do (run at once, ask for the ops again once or twice, decline,
 * or ask again forever), a forward's logits are the CPU's bit for bit, over a prompt and a
 * decode; a step gets the batch's places and, on the first stage, its ids; each deferred pass
 * issued the whole body; a backend asking again and again gets at most three steps per batch,
 * then the ops without one. */
Test(forward, steps_give_the_ops_again_until_they_ran, .timeout = 60)
{
	static const int32_t ids[12] = {1, 403, 407, 261, 378, 291, 280, 294, 300, 310, 320, 330};
	static float want[12 * 512], got[4 * 512];
	struct rig plain, r;
	rig_open(&plain, shared("models/stories260K.gguf"), NULL, 1, 16, false);
	for (int i = 0; i < 12; i++)
		run_rows(&plain, 0, i, ids + i, 1, want + 512 * i);
	static const enum step_act hit[] = {STEP_RUN};
	static const enum step_act miss_capture[] = {STEP_DEFER, STEP_RUN};
	static const enum step_act miss_fail[] = {STEP_DEFER, STEP_DEFER, STEP_DECLINE};
	static const enum step_act declined[] = {STEP_DECLINE};
	static const enum step_act forever[] = {STEP_DEFER, STEP_DEFER, STEP_DEFER};
	const struct {
		const enum step_act *s;
		int n, begins, defers; /* script; step_begins and deferred passes per batch */
	} cases[] = {{hit, 1, 1, 0},
		     {miss_capture, 2, 2, 1},
		     {miss_fail, 3, 3, 2},
		     {declined, 1, 1, 0},
		     {forever, 3, 3, 3}};
	/* The body's ops: the embedding and 5 llama layers of 16 (arch_llama.c: norm, q, k, v, 2
	 * ropes, kv_store, attention, wo, add, norm, gate, up, silu_mul, down, add). */
	const int body = 1 + 5 * 16;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		rig_open(&r, shared("models/stories260K.gguf"), NULL, 1, 16, false);
		struct lm_backend_i iface;
		step_iface(&iface, r.be.iface);
		struct lm_backend stepped = {&iface, r.be.ctx};
		r.fw.be = &stepped;
		/* The prompt's first 4 tokens in one batch, then one token at a time. */
		stp.script = declined;
		stp.script_n = 1;
		run_rows(&r, 0, 0, ids, 4, got);
		cr_expect_eq(memcmp(got + 3 * 512, want + 3 * 512, 512 * sizeof(float)), 0,
			     "case %zu", k);
		for (int i = 4; i < 12; i++) {
			stp.script = cases[k].s;
			stp.script_n = cases[k].n;
			stp.at = stp.begins = stp.deferred_ops = stp.eager_ops = 0;
			run_rows(&r, 0, i, ids + i, 1, got);
			cr_expect_eq(memcmp(got, want + 512 * i, 512 * sizeof(float)), 0,
				     "case %zu, position %d", k, i);
			cr_expect_eq(stp.begins, cases[k].begins, "case %zu", k);
			cr_expect(stp.ids_given && stp.n == 1 && stp.loc0.pos == i, "case %zu", k);
			cr_expect_eq(stp.deferred_ops, cases[k].defers * body, "case %zu: %d ops",
				     k, stp.deferred_ops);
		}
		r.fw.be = &r.be;
		rig_close(&r);
	}
	rig_close(&plain);
}

static void count_layers(void *arg, int32_t layer, const float *x, int32_t n)
{
	(*(int *)arg)++;
}

/* A middle stage offers its layers without ids (its rows come by upload, before the step), and
 * a forward with a hook after each layer (`layermesh diff`, the non-finite locator) offers no
 * step. */
Test(forward, steps_of_a_middle_stage_and_none_under_a_hook)
{
	struct rig whole, s0, s1;
	rig_open(&whole, shared("models/stories260K.gguf"), NULL, 1, 8, false);
	struct lm_slice a = {0, 2, true, false}, b = {2, 5, false, true};
	rig_open(&s0, shared("models/stories260K.gguf"), &a, 1, 8, false);
	rig_open(&s1, shared("models/stories260K.gguf"), &b, 1, 8, false);
	int32_t ids[4] = {1, 403, 407, 261}, rows[1] = {0};
	static float want[4 * 512], got[512], h[64];
	run_rows(&whole, 0, 0, ids, 4, want);
	struct lm_backend_i iface;
	step_iface(&iface, s1.be.iface);
	struct lm_backend stepped = {&iface, s1.be.ctx};
	s1.fw.be = &stepped;
	static const enum step_act miss_capture[] = {STEP_DEFER, STEP_RUN};
	lm_diag d = {{0}};
	for (int i = 0; i < 4; i++) {
		struct lm_tok_loc loc = {0, i};
		struct lm_batch bt = {
			.n = 1, .ids = ids + i, .loc = &loc, .n_out = 1, .out_rows = rows};
		cr_assert_eq(lm_forward_run(&s0.fw, &bt, NULL, h, NULL, &d), 0, "%s", d.msg);
		bt.ids = NULL;
		stp.script = miss_capture;
		stp.script_n = 2;
		stp.at = stp.begins = 0;
		if (i == 3) { /* the last position under a hook */
			int layers = 0;
			s1.fw.hook = count_layers;
			s1.fw.hook_arg = &layers;
			cr_assert_eq(lm_forward_run(&s1.fw, &bt, h, NULL, got, &d), 0, "%s", d.msg);
			cr_expect_eq(layers, 3);
			cr_expect_eq(stp.begins, 0);
			s1.fw.hook = NULL;
		} else {
			cr_assert_eq(lm_forward_run(&s1.fw, &bt, h, NULL, got, &d), 0, "%s", d.msg);
			cr_expect_eq(stp.begins, 2);
			cr_expect(!stp.ids_given);
		}
		cr_expect_eq(memcmp(got, want + 512 * i, sizeof got), 0, "position %d", i);
	}
	s1.fw.be = &s1.be;
	rig_close(&whole);
	rig_close(&s0);
	rig_close(&s1);
}

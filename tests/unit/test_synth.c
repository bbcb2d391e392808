/* layermesh synth: files read back by the GGUF reader have llama.cpp's llama layout, the same
 * options give the same bytes, the weights have the intended statistics, and shapes a type
 * cannot hold are refused with a message naming the tensor. (That llama.cpp itself loads them
 * and gives sane logits is tests/oracle's job.) */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/format/gguf.h"
#include "common/format/synth.h"
#include "common/format/quant.h"
#include "common/model/hparams.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/lm_synth_XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	DIR *dir = opendir(tmpdir);
	if (dir == NULL)
		return;
	struct dirent *e;
	char path[512];
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
		unlink(path);
	}
	closedir(dir);
	rmdir(tmpdir);
}

TestSuite(synth, .init = make_tmpdir, .fini = remove_tmpdir);

static const char *tmp_path(const char *name)
{
	static char buf[4][512];
	static int next;
	char *p = buf[next++ % 4];
	snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
	return p;
}

static char *shared_path(const char *rel)
{
	static char buf[4096];
	const char *root = getenv("LM_SHARED");
	snprintf(buf, sizeof buf, "%s/%s", root != NULL ? root : "../shared", rel);
	return buf;
}

static void *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	cr_assert_not_null(fp, "open %s", path);
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	void *buf = malloc((size_t)n);
	cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

/* dim 256, 2 layers, 8 heads / 4 KV heads, ffn 512, vocab 300: a shape every type allows. */
static struct synth_opts small(const char *name, enum lm_dtype type)
{
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = tmp_path(name);
	o.dim = 256;
	o.layers = 2;
	o.heads = 8;
	o.kv_heads = 4;
	o.ffn = 512;
	o.vocab = 300;
	o.ctx = 128;
	o.type = type;
	o.seed = 42;
	return o;
}

static void write_ok(const struct synth_opts *o, struct synth_stats *st)
{
	lm_diag d = {{0}};
	int rc = synth_write(o, st, &d);
	cr_assert_eq(rc, 0, "synth_write: %s", lm_diag_str(&d, rc));
}

static gguf_file *open_ok(const char *path)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	int rc = gguf_open(path, &f, &d);
	cr_assert_eq(rc, 0, "gguf_open: %s", lm_diag_str(&d, rc));
	rc = gguf_map(f, NULL, NULL, false, NULL, &d);
	cr_assert_eq(rc, 0, "gguf_map: %s", lm_diag_str(&d, rc));
	return f;
}

static uint32_t get_u32(gguf_file *f, const char *key)
{
	uint32_t v = 0;
	lm_diag d = {{0}};
	int rc = gguf_get_u32(f, key, &v, &d);
	cr_assert_eq(rc, 0, "%s: %s", key, lm_diag_str(&d, rc));
	return v;
}

Test(synth, layout_is_llama_cpp_s)
{
	struct synth_opts o = small("layout.gguf", LM_F16);
	struct synth_stats st;
	write_ok(&o, &st);
	gguf_file *f = open_ok(o.out);

	const char *arch = NULL;
	cr_assert_eq(gguf_get_str(f, "general.architecture", &arch, NULL), 0);
	cr_expect_str_eq(arch, "llama");
	cr_expect_eq(gguf_alignment(f), 32);
	cr_expect_not_null(gguf_find(f, "general.alignment"));
	cr_expect_eq(get_u32(f, "general.file_type"), 1);
	cr_expect_eq(get_u32(f, "llama.embedding_length"), 256);
	cr_expect_eq(get_u32(f, "llama.block_count"), 2);
	cr_expect_eq(get_u32(f, "llama.feed_forward_length"), 512);
	cr_expect_eq(get_u32(f, "llama.attention.head_count"), 8);
	cr_expect_eq(get_u32(f, "llama.attention.head_count_kv"), 4);
	cr_expect_eq(get_u32(f, "llama.rope.dimension_count"), 32);
	cr_expect_eq(get_u32(f, "llama.context_length"), 128);
	cr_expect_eq(get_u32(f, "llama.vocab_size"), 300);
	float eps = 0, base = 0;
	cr_assert_eq(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, NULL), 0);
	cr_assert_eq(gguf_get_f32(f, "llama.rope.freq_base", &base, NULL), 0);
	cr_expect_eq(eps, 1e-5f);
	cr_expect_eq(base, 10000.0f);

	/* Tensors, in file order, ne0 first. */
	struct {
		const char *name;
		enum lm_dtype type;
		uint32_t n_dims;
		int64_t ne0, ne1;
	} want[] = {
		{"token_embd.weight", LM_F16, 2, 256, 300},
		{"blk.0.attn_norm.weight", LM_F32, 1, 256, 1},
		{"blk.0.attn_q.weight", LM_F16, 2, 256, 256},
		{"blk.0.attn_k.weight", LM_F16, 2, 256, 128},
		{"blk.0.attn_v.weight", LM_F16, 2, 256, 128},
		{"blk.0.attn_output.weight", LM_F16, 2, 256, 256},
		{"blk.0.ffn_norm.weight", LM_F32, 1, 256, 1},
		{"blk.0.ffn_gate.weight", LM_F16, 2, 256, 512},
		{"blk.0.ffn_down.weight", LM_F16, 2, 512, 256},
		{"blk.0.ffn_up.weight", LM_F16, 2, 256, 512},
	};
	cr_assert_eq(gguf_n_tensors(f), 1 + 2 * 9 + 2);
	cr_expect_eq(st.n_tensors, 21);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		cr_expect_str_eq(t->name, want[i].name);
		cr_expect_eq(t->type, want[i].type, "%s type", t->name);
		cr_expect_eq(t->n_dims, want[i].n_dims, "%s dims", t->name);
		cr_expect_eq(t->ne[0], want[i].ne0, "%s ne0", t->name);
		cr_expect_eq(t->ne[1], want[i].ne1, "%s ne1", t->name);
	}
	cr_expect_str_eq(gguf_tensor_at(f, 10)->name, "blk.1.attn_norm.weight");
	cr_expect_eq(gguf_tensor_at(f, 10)->layer, 1);
	cr_expect_str_eq(gguf_tensor_at(f, 19)->name, "output_norm.weight");
	const struct gguf_tensor *out = gguf_tensor_at(f, 20);
	cr_expect_str_eq(out->name, "output.weight");
	cr_expect_eq(out->ne[0], 256);
	cr_expect_eq(out->ne[1], 300);
	cr_expect_eq(st.n_params,
		     256ull * 300 * 2 +
			     2 * (256 * 2 + 256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3) + 256);
	cr_expect_eq(st.file_bytes, gguf_file_size(f));
	gguf_close(f);
}

Test(synth, default_vocabulary_is_sentencepiece_style)
{
	struct synth_opts o = small("vocab.gguf", LM_F32);
	o.vocab = 1000;
	write_ok(&o, NULL);
	gguf_file *f = open_ok(o.out);
	const char *model = NULL;
	cr_assert_eq(gguf_get_str(f, "tokenizer.ggml.model", &model, NULL), 0);
	cr_expect_str_eq(model, "llama");
	const struct gguf_arr *tok, *score, *type;
	cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok, NULL), 0);
	cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &score, NULL), 0);
	cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &type, NULL), 0);
	cr_assert_eq(tok->n, 1000);
	cr_assert_eq(score->n, 1000);
	cr_assert_eq(type->n, 1000);
	cr_expect_str_eq(tok->strs[0], "<unk>");
	cr_expect_str_eq(tok->strs[1], "<s>");
	cr_expect_str_eq(tok->strs[2], "</s>");
	cr_expect_eq(gguf_arr_i64(type, 0), 2);
	cr_expect_eq(gguf_arr_i64(type, 1), 3);
	cr_expect_eq(gguf_arr_i64(type, 2), 3);
	char buf[16];
	for (int b = 0; b < 256; b++) {
		snprintf(buf, sizeof buf, "<0x%02X>", b);
		cr_expect_str_eq(tok->strs[3 + b], buf);
		cr_expect_eq(gguf_arr_i64(type, (uint64_t)(3 + b)), 6, "byte token %d", b);
	}
	cr_expect_str_eq(tok->strs[259], "\xe2\x96\x81");
	cr_expect_str_eq(tok->strs[260], "\xe2\x96\x81"
					 "e");
	cr_expect_str_eq(tok->strs[261], "e");
	for (uint64_t i = 259; i < 1000; i++) {
		cr_expect_eq(gguf_arr_i64(type, i), 1);
		if (i > 259)
			cr_expect_lt(gguf_arr_f64(score, i), gguf_arr_f64(score, i - 1),
				     "scores decrease at %llu", (unsigned long long)i);
	}
	/* Every token is distinct (llama.cpp maps text to id). */
	for (uint64_t i = 0; i < 1000; i++)
		for (uint64_t j = i + 1; j < 1000; j++)
			cr_assert(strcmp(tok->strs[i], tok->strs[j]) != 0, "tokens %llu and %llu",
				  (unsigned long long)i, (unsigned long long)j);
	cr_expect_eq(get_u32(f, "tokenizer.ggml.bos_token_id"), 1);
	cr_expect_eq(get_u32(f, "tokenizer.ggml.eos_token_id"), 2);
	cr_expect_eq(get_u32(f, "tokenizer.ggml.unknown_token_id"), 0);
	bool add_bos = false;
	cr_assert_eq(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, NULL), 0);
	cr_expect(add_bos);
	gguf_close(f);
}

Test(synth, same_options_same_bytes)
{
	struct synth_opts a = small("a.gguf", LM_BF16), b = small("b.gguf", LM_BF16);
	write_ok(&a, NULL);
	write_ok(&b, NULL);
	size_t la, lb;
	char *pa = slurp(a.out, &la), *pb = slurp(b.out, &lb);
	cr_assert_eq(la, lb);
	cr_expect_eq(memcmp(pa, pb, la), 0, "two runs, different bytes");
	free(pb);
	/* Another seed changes the weights but not the header. */
	struct synth_opts c = small("c.gguf", LM_BF16);
	c.seed = 43;
	write_ok(&c, NULL);
	size_t lc;
	char *pc = slurp(c.out, &lc);
	cr_assert_eq(lc, la);
	gguf_file *f = open_ok(a.out);
	uint64_t data = gguf_data_offset(f);
	gguf_close(f);
	cr_expect_neq(memcmp(pa + data, pc + data, la - data), 0, "the seed changed nothing");
	free(pa);
	free(pc);
}

/* A tensor's values depend on the seed, its name and its shape only: the f16 and bf16 files hold
 * the f32 file's values rounded, and a model with more layers shares the first layers' bytes. */
Test(synth, values_depend_on_seed_name_and_shape_only)
{
	struct synth_opts o32 = small("f32.gguf", LM_F32), o16 = small("f16.gguf", LM_F16),
			  ob16 = small("bf16.gguf", LM_BF16), odeep = small("deep.gguf", LM_F32);
	odeep.layers = 3;
	write_ok(&o32, NULL);
	write_ok(&o16, NULL);
	write_ok(&ob16, NULL);
	write_ok(&odeep, NULL);
	gguf_file *f32 = open_ok(o32.out), *f16 = open_ok(o16.out), *fb16 = open_ok(ob16.out),
		  *fdeep = open_ok(odeep.out);
	for (uint64_t i = 0; i < gguf_n_tensors(f32); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f32, i);
		const struct gguf_tensor *h = gguf_find_tensor(f16, t->name);
		const struct gguf_tensor *b = gguf_find_tensor(fb16, t->name);
		const struct gguf_tensor *e = gguf_find_tensor(fdeep, t->name);
		cr_assert(h != NULL && b != NULL && e != NULL, "%s", t->name);
		cr_assert_eq(t->size, e->size);
		cr_expect_eq(memcmp(t->data, e->data, t->size), 0, "%s differs with 3 layers",
			     t->name);
		const float *x = t->data;
		uint64_t n = t->size / 4;
		if (t->n_dims == 1) {
			cr_expect_eq(h->type, LM_F32);
			cr_expect_eq(memcmp(t->data, h->data, t->size), 0, "%s", t->name);
			continue;
		}
		const uint16_t *xh = h->data, *xb = b->data;
		for (uint64_t k = 0; k < n; k++) {
			cr_assert_eq(xh[k], lm_f32_to_f16(x[k]), "%s[%llu]", t->name,
				     (unsigned long long)k);
			cr_assert_eq(xb[k], lm_f32_to_bf16(x[k]), "%s[%llu]", t->name,
				     (unsigned long long)k);
		}
	}
	gguf_close(f32);
	gguf_close(f16);
	gguf_close(fb16);
	gguf_close(fdeep);
}

/* Weights look like a trained model's: matrices zero-mean with std 1/sqrt(ne0), norms near 1. */
Test(synth, weight_statistics)
{
	struct synth_opts o = small("stats.gguf", LM_F32);
	write_ok(&o, NULL);
	gguf_file *f = open_ok(o.out);
	for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		const float *x = t->data;
		uint64_t n = t->size / 4;
		double s = 0, q = 0, mx = 0;
		for (uint64_t k = 0; k < n; k++) {
			cr_assert(isfinite(x[k]));
			s += x[k];
			q += (double)x[k] * x[k];
		}
		double mean = s / (double)n, sd = sqrt(q / (double)n - mean * mean);
		for (uint64_t k = 0; k < n; k++)
			mx = fmax(mx, fabs(x[k] - mean));
		if (t->n_dims == 1) {
			cr_expect(fabs(mean - 1.0) < 0.03, "%s mean %g", t->name, mean);
			cr_expect(fabs(sd - 0.1) < 0.02, "%s std %g", t->name, sd);
		} else {
			double want = 1.0 / sqrt((double)t->ne[0]);
			cr_expect(fabs(mean) < 0.05 * want, "%s mean %g", t->name, mean);
			cr_expect(fabs(sd / want - 1.0) < 0.03, "%s std %g, want %g", t->name, sd,
				  want);
			/* Bounded noise: no value past 3.47 std. */
			cr_expect(mx < 3.47 * want, "%s max |x| %g", t->name, mx);
		}
	}
	gguf_close(f);
}

Test(synth, tied_has_no_output_weight)
{
	struct synth_opts o = small("tied.gguf", LM_F32);
	o.tied = true;
	o.kv_heads = 0; /* defaults to heads */
	write_ok(&o, NULL);
	gguf_file *f = open_ok(o.out);
	cr_expect_null(gguf_find_tensor(f, "output.weight"));
	cr_expect_not_null(gguf_find_tensor(f, "output_norm.weight"));
	cr_expect_eq(gguf_n_tensors(f), 20);
	cr_expect_eq(get_u32(f, "llama.attention.head_count_kv"), 8);
	cr_expect_eq(gguf_find_tensor(f, "blk.0.attn_k.weight")->ne[1], 256);
	gguf_close(f);
}

/* qwen3moe: the router f32 whatever the type, the experts as 3-D tensors in the file's type,
 * the expert keys llama.cpp reads; options of the mixture are refused for other archs. */
Test(synth, qwen3moe_has_a_router_and_3d_experts)
{
	struct synth_opts o = small("moe.gguf", LM_Q8_0);
	o.arch = "qwen3moe";
	o.experts = 4;
	o.experts_used = 2;
	o.ffn_exp = 64;
	write_ok(&o, NULL);
	gguf_file *f = open_ok(o.out);
	cr_expect_eq(get_u32(f, "qwen3moe.expert_count"), 4);
	cr_expect_eq(get_u32(f, "qwen3moe.expert_used_count"), 2);
	cr_expect_eq(get_u32(f, "qwen3moe.expert_feed_forward_length"), 64);
	const struct gguf_tensor *r = gguf_find_tensor(f, "blk.1.ffn_gate_inp.weight");
	cr_assert_not_null(r);
	cr_expect(r->type == LM_F32 && r->ne[0] == o.dim && r->ne[1] == 4);
	const struct gguf_tensor *dn = gguf_find_tensor(f, "blk.1.ffn_down_exps.weight");
	cr_assert_not_null(dn);
	cr_expect(dn->type == LM_Q8_0 && dn->n_dims == 3 && dn->ne[0] == 64 && dn->ne[1] == o.dim &&
		  dn->ne[2] == 4);
	cr_expect_null(gguf_find_tensor(f, "blk.1.ffn_down.weight"));
	cr_expect_not_null(gguf_find_tensor(f, "blk.1.attn_q_norm.weight"));
	gguf_close(f);
	struct synth_opts bad = small("bad.gguf", LM_F32);
	bad.experts = 4;
	lm_diag d = {{0}};
	cr_expect_eq(synth_write(&bad, NULL, &d), LM_EINVAL);
	bad.arch = "qwen3moe";
	bad.experts_used = 5;
	cr_expect_eq(synth_write(&bad, NULL, &d), LM_EINVAL);
}

/* gpt-oss: biases (2-D for the experts: a row per expert), sinks, the post-attention norm in
 * place of ffn_norm, the experts in their own type (MXFP4) while the rest keeps --type, the
 * window and llama.cpp's file type for MXFP4 experts. */
Test(synth, gptoss_has_biases_sinks_and_mxfp4_experts)
{
	struct synth_opts o = small("oss.gguf", LM_Q8_0);
	o.arch = "gpt-oss";
	o.experts = 4;
	o.experts_used = 2;
	o.ffn_exp = 64;
	o.window = 8;
	o.exps_type = LM_MXFP4;
	write_ok(&o, NULL);
	gguf_file *f = open_ok(o.out);
	cr_expect_eq(get_u32(f, "gpt-oss.expert_count"), 4);
	cr_expect_eq(get_u32(f, "gpt-oss.attention.sliding_window"), 8);
	cr_expect_eq(get_u32(f, "general.file_type"), 38);
	const struct gguf_tensor *t = gguf_find_tensor(f, "blk.1.ffn_up_exps.weight");
	cr_assert_not_null(t);
	cr_expect(t->type == LM_MXFP4 && t->n_dims == 3 && t->ne[2] == 4);
	t = gguf_find_tensor(f, "blk.1.ffn_up_exps.bias");
	cr_assert_not_null(t);
	cr_expect(t->type == LM_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 4);
	t = gguf_find_tensor(f, "blk.1.attn_sinks.weight");
	cr_assert_not_null(t);
	cr_expect(t->type == LM_F32 && t->n_dims == 1 && t->ne[0] == o.heads);
	t = gguf_find_tensor(f, "blk.1.attn_q.weight");
	cr_expect(t != NULL && t->type == LM_Q8_0);
	cr_expect_not_null(gguf_find_tensor(f, "blk.1.attn_output.bias"));
	cr_expect_not_null(gguf_find_tensor(f, "blk.1.post_attention_norm.weight"));
	cr_expect_null(gguf_find_tensor(f, "blk.1.ffn_norm.weight"));
	gguf_close(f);
	/* YaRN as the published files have it (factor 32, base 150000), over an original context
	 * of 64: its keys, and the rope llama.cpp derives from them on every layer. Head size 32:
	 * corr = floor(32 ln(64 / (32 x 2 pi)) / (2 ln 150000)) = floor(-1.54) -> 0 and
	 * ceil(32 ln(64 / (2 pi)) / (2 ln 150000)) = ceil(3.12) = 4; mscale (1 + 0.1 ln 32) = 1.3466
	 * (llama.cpp's attention factor cancels its own). */
	o.rope_yarn = 32.0f;
	o.rope_yarn_orig = 64;
	o.rope_base = 150000.0f;
	write_ok(&o, NULL);
	f = open_ok(o.out);
	const char *st = NULL;
	lm_diag dy = {{0}};
	cr_assert_eq(gguf_get_str(f, "gpt-oss.rope.scaling.type", &st, &dy), 0);
	cr_expect_str_eq(st, "yarn");
	cr_expect_eq(get_u32(f, "gpt-oss.rope.scaling.original_context_length"), 64);
	static struct lm_hparams hp;
	cr_assert_eq(lm_hparams_load(f, &hp, &dy), 0, "%s", dy.msg);
	for (int il = 0; il < 2; il++) {
		const struct lm_rope_params *rp = &hp.layer[il].rope;
		cr_expect(rp->ext_factor == 1.0f && rp->freq_scale == 1.0f / 32, "layer %d", il);
		cr_expect(rp->corr[0] == 0.0f && rp->corr[1] == 4.0f, "layer %d: corr %g %g", il,
			  (double)rp->corr[0], (double)rp->corr[1]);
		cr_expect_float_eq(rp->mscale, 1.0 + 0.1 * log(32.0), 1e-6, "layer %d: %g", il,
				   (double)rp->mscale);
	}
	gguf_close(f);
	o.rope_yarn = 0;
	o.rope_yarn_orig = 0;
	o.rope_base = 10000.0f;
	/* MXFP4 experts need an expert width of whole blocks; experts types are the mixtures'. */
	lm_diag d = {{0}};
	o.ffn_exp = 48;
	cr_expect_eq(synth_write(&o, NULL, &d), LM_EINVAL);
	cr_expect(strstr(d.msg, "mxfp4") != NULL, "%s", d.msg);
	struct synth_opts bad = small("bad.gguf", LM_F32);
	bad.exps_type = LM_MXFP4;
	cr_expect_eq(synth_write(&bad, NULL, &d), LM_EINVAL);
	bad.arch = "gpt-oss";
	bad.experts = 4;
	bad.experts_used = 2;
	cr_expect_eq(synth_write(&bad, NULL, &d), LM_EINVAL); /* no --window */
	cr_expect(strstr(d.msg, "window") != NULL, "%s", d.msg);
	bad.arch = NULL;
	bad.experts = bad.experts_used = 0;
	bad.exps_type = LM_DTYPE_COUNT;
	bad.rope_yarn = 4;
	cr_expect_eq(synth_write(&bad, NULL, &d), LM_EINVAL); /* yarn is gpt-oss's */
}

/* gemma4 --experts: 26B-A4B's layout, the dense FFN kept beside the router, its input scale,
 * the fused gate/up experts, their down and per-expert scales, and the branches' norms. */
Test(synth, gemma4_experts_have_26b_a4b_s_layout)
{
	struct synth_opts o = small("g4moe.gguf", LM_Q8_0);
	o.arch = "gemma4";
	o.window = 8;
	o.experts = 4;
	o.experts_used = 2;
	o.ffn_exp = 64;
	write_ok(&o, NULL);
	gguf_file *f = open_ok(o.out);
	cr_expect_eq(get_u32(f, "gemma4.expert_count"), 4);
	cr_expect_eq(get_u32(f, "gemma4.expert_used_count"), 2);
	cr_expect_eq(get_u32(f, "gemma4.expert_feed_forward_length"), 64);
	const struct gguf_tensor *gu = gguf_find_tensor(f, "blk.1.ffn_gate_up_exps.weight");
	cr_assert_not_null(gu);
	cr_expect(gu->type == LM_Q8_0 && gu->n_dims == 3 && gu->ne[0] == o.dim &&
		  gu->ne[1] == 128 && gu->ne[2] == 4);
	const struct gguf_tensor *dn = gguf_find_tensor(f, "blk.1.ffn_down_exps.weight");
	cr_assert_not_null(dn);
	cr_expect(dn->ne[0] == 64 && dn->ne[1] == o.dim && dn->ne[2] == 4);
	const struct gguf_tensor *sc = gguf_find_tensor(f, "blk.1.ffn_down_exps.scale");
	cr_assert_not_null(sc);
	cr_expect(sc->type == LM_F32 && sc->n_dims == 1 && sc->ne[0] == 4);
	const struct gguf_tensor *r = gguf_find_tensor(f, "blk.1.ffn_gate_inp.weight");
	cr_assert_not_null(r);
	cr_expect(r->type == LM_F32 && r->ne[0] == o.dim && r->ne[1] == 4);
	static const char *const vectors[] = {"ffn_gate_inp.scale", "pre_ffw_norm_2.weight",
					      "post_ffw_norm_1.weight", "post_ffw_norm_2.weight",
					      "post_ffw_norm.weight"};
	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		char name[64];
		snprintf(name, sizeof name, "blk.0.%s", vectors[i]);
		const struct gguf_tensor *v = gguf_find_tensor(f, name);
		cr_assert_not_null(v, "%s", name);
		cr_expect(v->type == LM_F32 && v->ne[0] == o.dim, "%s", name);
	}
	cr_expect_not_null(gguf_find_tensor(f, "blk.1.ffn_down.weight"), "the shared FFN stays");
	cr_expect_null(gguf_find_tensor(f, "blk.1.ffn_gate_exps.weight"));
	gguf_close(f);
	/* --dense-layers 1: the first layer has no experts, the second has. */
	o.dense_layers = 1;
	o.out = tmp_path("g4d.gguf");
	write_ok(&o, NULL);
	f = open_ok(o.out);
	cr_expect_null(gguf_find_tensor(f, "blk.0.ffn_gate_inp.weight"));
	cr_expect_null(gguf_find_tensor(f, "blk.0.post_ffw_norm_1.weight"));
	cr_expect_not_null(gguf_find_tensor(f, "blk.1.ffn_gate_up_exps.weight"));
	gguf_close(f);
	o.dense_layers = 2; /* not fewer than the layers */
	lm_diag d = {{0}};
	cr_expect_eq(synth_write(&o, NULL, &d), LM_EINVAL);
	o.dense_layers = 0;
	/* Without --experts, gemma4 stays dense. */
	o.experts = o.experts_used = o.ffn_exp = 0;
	o.out = tmp_path("g4.gguf");
	write_ok(&o, NULL);
	f = open_ok(o.out);
	cr_expect_null(gguf_find_tensor(f, "blk.1.ffn_gate_inp.weight"));
	gguf_close(f);
}

Test(synth, vocab_from_copies_every_tokenizer_key)
{
	const char *src_path = shared_path("models/stories260K.gguf");
	struct synth_opts o = small("from.gguf", LM_F32);
	o.vocab = 0;
	o.vocab_from = src_path;
	struct synth_stats st;
	write_ok(&o, &st);
	cr_expect_eq(st.vocab, 512);
	gguf_file *src = open_ok(src_path), *f = open_ok(o.out);
	uint64_t copied = 0;
	for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
		const struct gguf_kv *a = gguf_kv_at(src, i);
		if (strncmp(a->key, "tokenizer.", 10) != 0)
			continue;
		copied++;
		const struct gguf_kv *b = gguf_find(f, a->key);
		cr_assert_not_null(b, "%s missing", a->key);
		cr_assert_eq(a->type, b->type, "%s", a->key);
		if (a->type == GGUF_TYPE_ARRAY) {
			cr_assert_eq(a->v.arr.type, b->v.arr.type);
			cr_assert_eq(a->v.arr.n, b->v.arr.n);
			for (uint64_t k = 0; k < a->v.arr.n; k++) {
				if (a->v.arr.type == GGUF_TYPE_STRING)
					cr_assert_str_eq(a->v.arr.strs[k], b->v.arr.strs[k]);
				else
					cr_assert_eq(gguf_arr_f64(&a->v.arr, k),
						     gguf_arr_f64(&b->v.arr, k));
			}
		} else if (a->type == GGUF_TYPE_STRING) {
			cr_assert_str_eq(a->v.str.ptr, b->v.str.ptr);
		} else if (a->type == GGUF_TYPE_BOOL) {
			cr_assert_eq(a->v.b, b->v.b, "%s", a->key);
		} else if (a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64) {
			cr_assert_eq(a->v.f64, b->v.f64, "%s", a->key);
		} else {
			cr_assert_eq(a->v.u64, b->v.u64, "%s", a->key);
		}
	}
	cr_expect_geq(copied, 5);
	cr_expect_eq(get_u32(f, "llama.vocab_size"), 512);
	cr_expect_eq(gguf_find_tensor(f, "token_embd.weight")->ne[1], 512);
	gguf_close(src);
	gguf_close(f);

	o.vocab = 511;
	lm_diag d = {{0}};
	cr_expect_eq(synth_write(&o, NULL, &d), LM_EINVAL);
	cr_expect_not_null(strstr(d.msg, "vocab 511, but"), "%s", d.msg);
	cr_expect_not_null(strstr(d.msg, "has 512 tokens"), "%s", d.msg);
}

/* Expects synth_write to fail with `code` and a message containing `needle`, leaving no file. */
static void refused(struct synth_opts o, int code, const char *needle)
{
	lm_diag d = {{0}};
	int rc = synth_write(&o, NULL, &d);
	cr_expect_eq(rc, code, "%s: %s", needle, d.msg);
	cr_expect_not_null(strstr(d.msg, needle), "message '%s' lacks '%s'", d.msg, needle);
	cr_expect_neq(access(o.out, F_OK), 0, "%s exists after a failure", o.out);
}

Test(synth, shapes_a_type_cannot_hold_are_refused)
{
	struct synth_opts o = small("bad.gguf", LM_Q4_K);
	o.ffn = 700;
	refused(o, LM_EINVAL, "blk.0.ffn_down.weight: a q4_K row holds a multiple of 256");
	o = small("bad.gguf", LM_Q6_K);
	o.dim = 384;
	o.heads = 6;
	o.kv_heads = 2;
	refused(o, LM_EINVAL,
		"token_embd.weight: a q6_K row holds a multiple of 256 elements, "
		"and its rows have dim = 384");
	o = small("bad.gguf", LM_Q8_0);
	o.dim = 240;
	refused(o, LM_EINVAL, "token_embd.weight: a q8_0 row holds a multiple of 32");
	o = small("bad.gguf", LM_Q4_0);
	o.ffn = 520;
	refused(o, LM_EINVAL, "blk.0.ffn_down.weight: a q4_0 row");
	o = small("bad.gguf", LM_Q5_K);
	refused(o, LM_EUNSUPPORTED, "synth writes f32, f16, bf16");
	o = small("bad.gguf", LM_F32);
	o.heads = 7;
	refused(o, LM_EINVAL, "heads 7 does not divide dim 256");
	o = small("bad.gguf", LM_F32);
	o.dim = 48;
	o.heads = 16;
	o.kv_heads = 16;
	refused(o, LM_EINVAL, "head size dim / heads = 3 is odd");
	o = small("bad.gguf", LM_F32);
	o.kv_heads = 3;
	refused(o, LM_EINVAL, "kv-heads 3 does not divide heads 8");
	o = small("bad.gguf", LM_F32);
	o.vocab = 258;
	refused(o, LM_ERANGE, "vocab 258 is under 259");
	o = small("bad.gguf", LM_F32);
	o.layers = 0;
	refused(o, LM_ERANGE, "layers 0");
	o = small("bad.gguf", LM_F32);
	o.rms_eps = 0;
	refused(o, LM_ERANGE, "rms-eps");
	o = small("bad.gguf", LM_F32);
	o.vocab_from = tmp_path("missing.gguf");
	refused(o, LM_ENOENT, "missing.gguf");
	o = small("bad.gguf", LM_F32);
	o.out = "/nonexistent-dir/x.gguf";
	refused(o, LM_ENOENT, "cannot create a temporary file");
	/* Nothing was left behind: the temporary files are gone too. */
	DIR *dir = opendir(tmpdir);
	struct dirent *e;
	while ((e = readdir(dir)) != NULL)
		cr_expect(e->d_name[0] == '.', "left behind: %s", e->d_name);
	closedir(dir);
}

/* Quantized files hold exactly what the reference quantizers make of the f32 file's values. */
Test(synth, quantized_files_hold_the_quantized_f32_values)
{
	const enum lm_dtype types[] = {LM_Q8_0, LM_Q4_0, LM_Q4_K, LM_Q6_K};
	struct synth_opts o32 = small("q_f32.gguf", LM_F32);
	write_ok(&o32, NULL);
	gguf_file *f32 = open_ok(o32.out);
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		struct synth_opts oq = small("q.gguf", types[k]);
		write_ok(&oq, NULL);
		gguf_file *fq = open_ok(oq.out);
		for (uint64_t i = 0; i < gguf_n_tensors(f32); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(f32, i);
			const struct gguf_tensor *q = gguf_find_tensor(fq, t->name);
			cr_assert_not_null(q);
			if (t->n_dims == 1) {
				cr_expect_eq(q->type, LM_F32, "%s", q->name);
				continue;
			}
			cr_assert_eq(q->type, types[k], "%s", q->name);
			uint64_t row_bytes;
			cr_assert_eq(lm_dtype_row_bytes(types[k], (uint64_t)t->ne[0], &row_bytes),
				     0);
			cr_assert_eq(q->size, row_bytes * (uint64_t)t->ne[1]);
			uint8_t *want = malloc(q->size);
			for (int64_t r = 0; r < t->ne[1]; r++)
				cr_assert_eq(lm_quantize_row(types[k],
							     (const float *)t->data + r * t->ne[0],
							     want + r * row_bytes, t->ne[0]),
					     0);
			cr_expect_eq(memcmp(want, q->data, q->size), 0, "%s %s",
				     lm_dtype_name(types[k]), q->name);
			free(want);
		}
		gguf_close(fq);
	}
	gguf_close(f32);
}

/* Rows quantized on several threads are the same bytes as on one, for every type. */
Test(synth, threads_same_bytes)
{
	static const enum lm_dtype types[] = {LM_Q4_K, LM_Q6_K, LM_Q8_0, LM_F16};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		struct synth_opts a = small("t1.gguf", types[i]), b = small("t3.gguf", types[i]);
		b.threads = 3;
		a.dim = b.dim = 256;
		write_ok(&a, NULL);
		write_ok(&b, NULL);
		size_t la, lb;
		char *pa = slurp(a.out, &la), *pb = slurp(b.out, &lb);
		cr_assert_eq(la, lb);
		cr_expect_eq(memcmp(pa, pb, la), 0, "%s: 3 threads wrote other bytes",
			     lm_dtype_name(types[i]));
		free(pa);
		free(pb);
	}
}

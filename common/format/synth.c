/* synth.c — random-weight llama GGUF files. See synth.h for the layout and the guarantees. */
#include "common/format/synth.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/buf.h"
#include "common/format/gguf.h"
#include "common/format/gguf_write.h"
#include "common/format/quant.h"

/* Bumped whenever the same options would give different bytes. */
#define SYNTH_FORMAT_VERSION 1u
/* std of the Irwin-Hall sum of four uniform 16-bit integers: sqrt(4 * (65536^2 - 1) / 12). */
#define SYNTH_NOISE_STD 37837.22668984041

void synth_opts_default(struct synth_opts *o)
{
	memset(o, 0, sizeof *o);
	o->ctx = 2048;
	o->type = LM_F32;
	o->exps_type = LM_DTYPE_COUNT;
	o->rope_base = 10000.0f;
	o->rms_eps = 1e-5f;
}

/* ---------------------------------------------------------------- randomness */

static uint64_t synth_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A zero-mean integer with std SYNTH_NOISE_STD, approximately normal (|x| < 3.47 std). */
static int32_t synth_noise(uint64_t *state)
{
	uint64_t r = synth_splitmix64(state);
	return (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
	       (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48) - 131070;
}

/* Each tensor's stream starts from the seed and its name, not from its place in the file. */
static uint64_t synth_stream(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *p = name; *p != '\0'; p++) {
		h ^= (uint8_t)*p;
		h *= 0x100000001b3ull;
	}
	uint64_t s = seed ^ h;
	return synth_splitmix64(&s);
}

/* ---------------------------------------------------------------- the tensor list */

enum synth_kind {
	SYNTH_MATRIX, /* noise / sqrt(ne0), in the file's type */
	SYNTH_NORM,   /* 1 + 0.1 noise, f32 */
	SYNTH_BIAS,   /* 0.1 noise, f32 */
	SYNTH_SCALE,  /* 0.75 + 0.05 noise, f32: a layer's output scale */
	SYNTH_FREQS,  /* rope frequency factors, f32, computed (not noise) */
	SYNTH_ROUTER, /* noise / sqrt(ne0), f32: a mixture's router (and qwen35's conv1d) */
	SYNTH_SINK,   /* noise, f32: attention sink logits */
	SYNTH_DECAY,  /* -exp(0.5 noise), f32: qwen35's ssm_a (-exp(A_log)) */
};

struct synth_tensor {
	char name[GGUF_WRITER_MAX_TENSOR_NAME + 1];
	enum synth_kind kind;
	int64_t ne0, ne1; /* ne1 = 1 for vectors */
	int64_t ne2;      /* experts of a 3-D tensor; 1 otherwise */
};

enum synth_arch {
	SYNTH_LLAMA,
	SYNTH_QWEN2,
	SYNTH_QWEN3,
	SYNTH_GEMMA3,
	SYNTH_GEMMA4,
	SYNTH_QWEN3MOE,
	SYNTH_GPTOSS,
	SYNTH_QWEN35,
	SYNTH_QWEN35MOE,
	SYNTH_N_ARCH
};

static const char *const synth_arch_names[] = {"llama",   "qwen2",  "qwen3",
					       "gemma3",  "gemma4", "qwen3moe",
					       "gpt-oss", "qwen35", "qwen35moe"};

static int synth_arch_of(const struct synth_opts *o)
{
	if (o->arch == NULL)
		return SYNTH_LLAMA;
	for (int i = 0; i < SYNTH_N_ARCH; i++)
		if (strcmp(o->arch, synth_arch_names[i]) == 0)
			return i;
	return -1;
}

/* qwen35 and qwen35moe: delta-net and gated attention layers. */
static bool synth_q35(const struct synth_opts *o)
{
	int a = synth_arch_of(o);
	return a == SYNTH_QWEN35 || a == SYNTH_QWEN35MOE;
}

/* qwen3moe, qwen35moe and gpt-oss: a mixture of experts on every layer. */
static bool synth_moe(const struct synth_opts *o)
{
	int a = synth_arch_of(o);
	return a == SYNTH_QWEN3MOE || a == SYNTH_QWEN35MOE || a == SYNTH_GPTOSS;
}

static bool synth_gemma(const struct synth_opts *o)
{
	int a = synth_arch_of(o);
	return a == SYNTH_GEMMA3 || a == SYNTH_GEMMA4;
}

/* Whether layer il slides: gemma's pattern (each swa_period-th global), Mistral's window on
 * every llama layer. */
static bool synth_swa(const struct synth_opts *o, uint32_t il)
{
	if (o->window == 0)
		return false;
	const bool gptoss = synth_arch_of(o) == SYNTH_GPTOSS;
	if (!synth_gemma(o) && !gptoss)
		return true;
	uint32_t p = o->swa_period != 0 ? o->swa_period : gptoss ? 2 : 6;
	return il % p < p - 1;
}

/* Layer il's geometry. */
static void synth_layer_geom(const struct synth_opts *o, uint32_t il, int64_t *head_dim,
			     int64_t *kv_heads)
{
	*head_dim = o->head_dim != 0 ? o->head_dim : o->dim / o->heads;
	*kv_heads = o->kv_heads;
	if (synth_arch_of(o) == SYNTH_GEMMA4 && synth_swa(o, il)) {
		if (o->head_dim_swa != 0)
			*head_dim = o->head_dim_swa;
		if (o->kv_heads_swa != 0)
			*kv_heads = o->kv_heads_swa;
	}
}

static void synth_add(struct synth_tensor *t, size_t *n, enum synth_kind kind, int64_t ne0,
		      int64_t ne1, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void synth_add(struct synth_tensor *t, size_t *n, enum synth_kind kind, int64_t ne0,
		      int64_t ne1, const char *fmt, ...)
{
	struct synth_tensor *x = &t[(*n)++];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->name, sizeof x->name, fmt, ap);
	va_end(ap);
	x->kind = kind;
	x->ne0 = ne0;
	x->ne1 = ne1;
	x->ne2 = 1;
}

/* The mixture's width per expert. */
static int64_t synth_ffn_exp(const struct synth_opts *o)
{
	return o->ffn_exp != 0 ? o->ffn_exp : o->ffn;
}

/* Gemma 4 26B-A4B's experts beside the dense FFN (which becomes the shared one): the norms
 * of the two branches, the router with its input scale, the experts' fused gate and up (as
 * the converter writes them), their down and its per-expert output scale. */
static void synth_add_gemma4_experts(const struct synth_opts *o, uint32_t l,
				     struct synth_tensor *out, size_t *n)
{
	const int64_t dim = o->dim, fe = synth_ffn_exp(o), ne = o->experts;
	synth_add(out, n, SYNTH_NORM, dim, 1, "blk.%u.post_ffw_norm_1.weight", l);
	synth_add(out, n, SYNTH_NORM, dim, 1, "blk.%u.pre_ffw_norm_2.weight", l);
	synth_add(out, n, SYNTH_NORM, dim, 1, "blk.%u.post_ffw_norm_2.weight", l);
	synth_add(out, n, SYNTH_ROUTER, dim, ne, "blk.%u.ffn_gate_inp.weight", l);
	synth_add(out, n, SYNTH_NORM, dim, 1, "blk.%u.ffn_gate_inp.scale", l);
	synth_add(out, n, SYNTH_MATRIX, dim, 2 * fe, "blk.%u.ffn_gate_up_exps.weight", l);
	out[*n - 1].ne2 = ne;
	synth_add(out, n, SYNTH_MATRIX, fe, dim, "blk.%u.ffn_down_exps.weight", l);
	out[*n - 1].ne2 = ne;
	synth_add(out, n, SYNTH_SCALE, ne, 1, "blk.%u.ffn_down_exps.scale", l);
}

/* Layer l's FFN: dense, or the router and experts of qwen3moe, qwen35moe (and its shared
 * expert) and gpt-oss (with biases), or gemma4's dense FFN and experts. */
static void synth_add_ffn(const struct synth_opts *o, uint32_t l, struct synth_tensor *out,
			  size_t *n)
{
	const int64_t dim = o->dim, ffn = o->ffn;
	const int arch = synth_arch_of(o);
	if (!synth_moe(o)) {
		synth_add(out, n, SYNTH_MATRIX, dim, ffn, "blk.%u.ffn_gate.weight", l);
		synth_add(out, n, SYNTH_MATRIX, ffn, dim, "blk.%u.ffn_down.weight", l);
		synth_add(out, n, SYNTH_MATRIX, dim, ffn, "blk.%u.ffn_up.weight", l);
		if (o->experts != 0 && l >= o->dense_layers)
			synth_add_gemma4_experts(o, l, out, n);
		return;
	}
	const int64_t fe = synth_ffn_exp(o), ne = o->experts;
	const bool b = arch == SYNTH_GPTOSS;
	synth_add(out, n, SYNTH_ROUTER, dim, ne, "blk.%u.ffn_gate_inp.weight", l);
	if (b)
		synth_add(out, n, SYNTH_BIAS, ne, 1, "blk.%u.ffn_gate_inp.bias", l);
	synth_add(out, n, SYNTH_MATRIX, dim, fe, "blk.%u.ffn_gate_exps.weight", l);
	out[*n - 1].ne2 = ne;
	if (b)
		synth_add(out, n, SYNTH_BIAS, fe, ne, "blk.%u.ffn_gate_exps.bias", l);
	synth_add(out, n, SYNTH_MATRIX, fe, dim, "blk.%u.ffn_down_exps.weight", l);
	out[*n - 1].ne2 = ne;
	if (b)
		synth_add(out, n, SYNTH_BIAS, dim, ne, "blk.%u.ffn_down_exps.bias", l);
	synth_add(out, n, SYNTH_MATRIX, dim, fe, "blk.%u.ffn_up_exps.weight", l);
	out[*n - 1].ne2 = ne;
	if (b)
		synth_add(out, n, SYNTH_BIAS, fe, ne, "blk.%u.ffn_up_exps.bias", l);
	if (arch != SYNTH_QWEN35MOE)
		return;
	/* qwen35moe's shared expert, --ffn wide, and its gate (one value per token). */
	synth_add(out, n, SYNTH_BIAS, dim, 1, "blk.%u.ffn_gate_inp_shexp.weight", l);
	synth_add(out, n, SYNTH_MATRIX, dim, ffn, "blk.%u.ffn_gate_shexp.weight", l);
	synth_add(out, n, SYNTH_MATRIX, dim, ffn, "blk.%u.ffn_up_shexp.weight", l);
	synth_add(out, n, SYNTH_MATRIX, ffn, dim, "blk.%u.ffn_down_shexp.weight", l);
}

/* qwen35's delta-net shape: head size, key heads, value heads; its attention interval. */
static uint32_t synth_ssm_state(const struct synth_opts *o)
{
	return o->ssm_state != 0 ? o->ssm_state : o->dim / o->heads;
}
static uint32_t synth_ssm_k_heads(const struct synth_opts *o)
{
	return o->ssm_k_heads != 0 ? o->ssm_k_heads : o->kv_heads;
}
static uint32_t synth_ssm_v_heads(const struct synth_opts *o)
{
	return o->ssm_v_heads != 0 ? o->ssm_v_heads : o->heads;
}
static bool synth_recurrent(const struct synth_opts *o, uint32_t il)
{
	uint32_t every = o->full_attn_every != 0 ? o->full_attn_every : 4;
	return synth_q35(o) && (il + 1) % every != 0;
}

/* qwen35's layer l before its FFN: the gated delta-net, or gated attention. */
static void synth_add_qwen35(const struct synth_opts *o, uint32_t l, struct synth_tensor *out,
			     size_t *n)
{
	const int64_t dim = o->dim, hd = o->dim / o->heads, q = (int64_t)o->heads * hd;
	const int64_t kv = (int64_t)o->kv_heads * hd, S = synth_ssm_state(o);
	const int64_t nk = synth_ssm_k_heads(o), nv = synth_ssm_v_heads(o);
	const int64_t conv = (2 * nk + nv) * S, vd = nv * S;
	synth_add(out, n, SYNTH_NORM, dim, 1, "blk.%u.attn_norm.weight", l);
	if (synth_recurrent(o, l)) {
		synth_add(out, n, SYNTH_MATRIX, dim, conv, "blk.%u.attn_qkv.weight", l);
		synth_add(out, n, SYNTH_MATRIX, dim, vd, "blk.%u.attn_gate.weight", l);
		synth_add(out, n, SYNTH_ROUTER, 4, conv, "blk.%u.ssm_conv1d.weight", l);
		synth_add(out, n, SYNTH_BIAS, nv, 1, "blk.%u.ssm_dt.bias", l);
		synth_add(out, n, SYNTH_DECAY, nv, 1, "blk.%u.ssm_a", l);
		synth_add(out, n, SYNTH_MATRIX, dim, nv, "blk.%u.ssm_beta.weight", l);
		synth_add(out, n, SYNTH_MATRIX, dim, nv, "blk.%u.ssm_alpha.weight", l);
		synth_add(out, n, SYNTH_NORM, S, 1, "blk.%u.ssm_norm.weight", l);
		synth_add(out, n, SYNTH_MATRIX, vd, dim, "blk.%u.ssm_out.weight", l);
	} else {
		synth_add(out, n, SYNTH_MATRIX, dim, 2 * q, "blk.%u.attn_q.weight", l);
		synth_add(out, n, SYNTH_MATRIX, dim, kv, "blk.%u.attn_k.weight", l);
		synth_add(out, n, SYNTH_MATRIX, dim, kv, "blk.%u.attn_v.weight", l);
		synth_add(out, n, SYNTH_NORM, hd, 1, "blk.%u.attn_q_norm.weight", l);
		synth_add(out, n, SYNTH_NORM, hd, 1, "blk.%u.attn_k_norm.weight", l);
		synth_add(out, n, SYNTH_MATRIX, q, dim, "blk.%u.attn_output.weight", l);
	}
	synth_add(out, n, SYNTH_NORM, dim, 1, "blk.%u.post_attention_norm.weight", l);
}

/* Room for the tensors synth_tensors lists. */
static size_t synth_tensors_cap(const struct synth_opts *o)
{
	return 4 + 24 * (size_t)o->layers;
}

/* Fills `out` in file order (the order llama.cpp's converters write); returns the count. */
static size_t synth_tensors(const struct synth_opts *o, struct synth_tensor *out)
{
	const int arch = synth_arch_of(o);
	const int64_t dim = o->dim;
	size_t n = 0;

	synth_add(out, &n, SYNTH_MATRIX, dim, o->vocab, "token_embd.weight");
	for (uint32_t l = 0; synth_q35(o) && l < o->layers; l++) {
		synth_add_qwen35(o, l, out, &n);
		synth_add_ffn(o, l, out, &n);
	}
	for (uint32_t l = 0; !synth_q35(o) && l < o->layers; l++) {
		int64_t hd, kvh;
		synth_layer_geom(o, l, &hd, &kvh);
		const int64_t q = (int64_t)o->heads * hd, kv = kvh * hd;
		synth_add(out, &n, SYNTH_NORM, dim, 1, "blk.%u.attn_norm.weight", l);
		const bool qkv_b = arch == SYNTH_QWEN2 || arch == SYNTH_GPTOSS;
		synth_add(out, &n, SYNTH_MATRIX, dim, q, "blk.%u.attn_q.weight", l);
		if (qkv_b)
			synth_add(out, &n, SYNTH_BIAS, q, 1, "blk.%u.attn_q.bias", l);
		synth_add(out, &n, SYNTH_MATRIX, dim, kv, "blk.%u.attn_k.weight", l);
		if (qkv_b)
			synth_add(out, &n, SYNTH_BIAS, kv, 1, "blk.%u.attn_k.bias", l);
		/* Gemma 4's global layers have no V projection: V is K. */
		if (arch != SYNTH_GEMMA4 || synth_swa(o, l))
			synth_add(out, &n, SYNTH_MATRIX, dim, kv, "blk.%u.attn_v.weight", l);
		if (qkv_b)
			synth_add(out, &n, SYNTH_BIAS, kv, 1, "blk.%u.attn_v.bias", l);
		if (arch == SYNTH_QWEN3 || arch == SYNTH_QWEN3MOE || synth_gemma(o)) {
			synth_add(out, &n, SYNTH_NORM, hd, 1, "blk.%u.attn_q_norm.weight", l);
			synth_add(out, &n, SYNTH_NORM, hd, 1, "blk.%u.attn_k_norm.weight", l);
		}
		synth_add(out, &n, SYNTH_MATRIX, q, dim, "blk.%u.attn_output.weight", l);
		if (arch == SYNTH_GPTOSS) {
			synth_add(out, &n, SYNTH_BIAS, dim, 1, "blk.%u.attn_output.bias", l);
			synth_add(out, &n, SYNTH_SINK, o->heads, 1, "blk.%u.attn_sinks.weight", l);
		}
		if (synth_gemma(o) || arch == SYNTH_GPTOSS)
			synth_add(out, &n, SYNTH_NORM, dim, 1, "blk.%u.post_attention_norm.weight",
				  l);
		if (arch != SYNTH_GPTOSS) /* its post-attention norm is the FFN's */
			synth_add(out, &n, SYNTH_NORM, dim, 1, "blk.%u.ffn_norm.weight", l);
		synth_add_ffn(o, l, out, &n);
		if (synth_gemma(o))
			synth_add(out, &n, SYNTH_NORM, dim, 1, "blk.%u.post_ffw_norm.weight", l);
		if (arch == SYNTH_GEMMA4)
			synth_add(out, &n, SYNTH_SCALE, 1, 1, "blk.%u.layer_output_scale.weight",
				  l);
	}
	synth_add(out, &n, SYNTH_NORM, dim, 1, "output_norm.weight");
	if (!o->tied)
		synth_add(out, &n, SYNTH_MATRIX, dim, o->vocab, "output.weight");
	if ((arch == SYNTH_LLAMA && o->rope_llama3) || arch == SYNTH_GEMMA4) {
		int64_t hd = o->head_dim != 0 ? o->head_dim : o->dim / o->heads;
		synth_add(out, &n, SYNTH_FREQS, hd / 2, 1, "rope_freqs.weight");
	}
	return n;
}

/* The experts' type. */
static enum lm_dtype synth_exps_type(const struct synth_opts *o)
{
	return o->exps_type != LM_DTYPE_COUNT ? o->exps_type : o->type;
}

/* A tensor's type: matrices in the file's (experts in theirs), vectors f32. */
static enum lm_dtype synth_type(const struct synth_opts *o, const struct synth_tensor *t)
{
	if (t->kind != SYNTH_MATRIX)
		return LM_F32;
	return t->ne2 > 1 ? synth_exps_type(o) : o->type;
}

/* A tensor's dimensions in the file: vectors 1, matrices (and an expert bias, one row per
 * expert) 2, experts 3. */
static uint32_t synth_dims(const struct synth_tensor *t)
{
	return t->ne2 > 1                                                         ? 3
	       : t->kind == SYNTH_MATRIX || t->kind == SYNTH_ROUTER || t->ne1 > 1 ? 2
										  : 1;
}

static bool synth_type_ok(enum lm_dtype t)
{
	switch (t) {
	case LM_F32:
	case LM_F16:
	case LM_BF16:
	case LM_Q8_0:
	case LM_Q4_0:
	case LM_Q4_K:
	case LM_Q6_K:
		return true;
	default:
		return false;
	}
}

/* The architecture's own rules on the options. */
static int synth_check_arch(const struct synth_opts *o, lm_diag *d)
{
	const int arch = synth_arch_of(o);
	if (arch < 0)
		return lm_fail(d, LM_EINVAL,
			       "arch '%s': synth writes llama, qwen2, qwen3, qwen3moe, gemma3, "
			       "gemma4, gpt-oss, qwen35 or qwen35moe",
			       o->arch);
	if ((synth_moe(o) || (arch == SYNTH_GEMMA4 && o->experts != 0)) &&
	    (o->experts < 1 || o->experts > 512 || o->experts_used < 1 ||
	     o->experts_used > o->experts || o->ffn_exp > (1u << 20)))
		return lm_fail(d, LM_EINVAL,
			       "%s needs --experts in [1, 512] and --experts-used in [1, "
			       "--experts] (and --ffn-exp up to 1048576)",
			       o->arch);
	if (!synth_moe(o) && arch != SYNTH_GEMMA4 &&
	    (o->experts != 0 || o->experts_used != 0 || o->ffn_exp != 0))
		return lm_fail(d, LM_EINVAL,
			       "--experts, --experts-used and --ffn-exp are qwen3moe's, "
			       "qwen35moe's, gemma4's and gpt-oss's");
	if (o->exps_type != LM_DTYPE_COUNT && o->experts == 0)
		return lm_fail(d, LM_EINVAL, "--experts-type is the experts' (it needs --experts)");
	if (o->dense_layers != 0 &&
	    (arch != SYNTH_GEMMA4 || o->experts == 0 || o->dense_layers >= o->layers))
		return lm_fail(d, LM_EINVAL,
			       "--dense-layers is gemma4's with --experts, fewer than --layers");
	if (!synth_q35(o) && (o->ssm_state != 0 || o->ssm_k_heads != 0 || o->ssm_v_heads != 0 ||
			      o->full_attn_every != 0))
		return lm_fail(d, LM_EINVAL,
			       "--ssm-state, --ssm-k-heads, --ssm-v-heads and --full-attn-every "
			       "are qwen35's");
	if (synth_q35(o)) {
		uint32_t S = synth_ssm_state(o), nk = synth_ssm_k_heads(o);
		uint32_t nv = synth_ssm_v_heads(o), hd = o->dim / o->heads;
		if (S < 1 || S > 1024 || nk < 1 || nv < nk || nv > 1024 || nv % nk != 0 ||
		    o->full_attn_every > 512)
			return lm_fail(
				d, LM_EINVAL,
				"qwen35: --ssm-state %u (1 to 1024), --ssm-k-heads %u and "
				"--ssm-v-heads %u (a multiple of them, up to 1024) are out of "
				"range",
				S, nk, nv);
		if (hd % 8 != 0)
			return lm_fail(
				d, LM_EINVAL,
				"qwen35's head size %u: its rope turns a quarter of each head "
				"in pairs, so it must be a multiple of 8",
				hd);
		if (o->window != 0)
			return lm_fail(d, LM_EINVAL, "qwen35 has no sliding window");
	}
	if ((arch == SYNTH_GEMMA4 || arch == SYNTH_GPTOSS) && o->window == 0)
		return lm_fail(d, LM_EINVAL, "%s needs --window (its sliding layers)", o->arch);
	if ((arch == SYNTH_QWEN2 || arch == SYNTH_QWEN3 || arch == SYNTH_QWEN3MOE) &&
	    o->window != 0)
		return lm_fail(d, LM_EINVAL, "%s has no sliding window in llama.cpp", o->arch);
	if (arch != SYNTH_GEMMA4 && (o->head_dim_swa != 0 || o->kv_heads_swa != 0))
		return lm_fail(d, LM_EINVAL,
			       "--head-dim-swa and --kv-heads-swa are gemma4's (sliding layers "
			       "of their own geometry)");
	if (o->rope_llama3 && arch != SYNTH_LLAMA)
		return lm_fail(d, LM_EINVAL, "--rope-llama3 is llama's");
	if ((o->rope_yarn != 0 || o->rope_yarn_orig != 0) && arch != SYNTH_GPTOSS)
		return lm_fail(d, LM_EINVAL, "--rope-yarn and --rope-yarn-orig are gpt-oss's");
	if (!(o->rope_yarn >= 0.0f) || !isfinite(o->rope_yarn) ||
	    (o->rope_yarn_orig != 0 && o->rope_yarn == 0))
		return lm_fail(d, LM_EINVAL,
			       "--rope-yarn takes a positive factor (and is needed "
			       "by --rope-yarn-orig)");
	if (o->swa_period != 0 && !synth_gemma(o) && arch != SYNTH_GPTOSS)
		return lm_fail(d, LM_EINVAL, "--swa-period is gemma's and gpt-oss's");
	if (o->head_dim != 0 && !synth_gemma(o) && arch != SYNTH_GPTOSS)
		return lm_fail(d, LM_EINVAL,
			       "--head-dim is gemma's and gpt-oss's (others use dim / heads)");
	if (o->kv_heads_swa != 0 && o->heads % o->kv_heads_swa != 0)
		return lm_fail(d, LM_EINVAL, "kv-heads-swa %u does not divide heads %u",
			       o->kv_heads_swa, o->heads);
	uint32_t hd = o->head_dim != 0 ? o->head_dim : o->dim / o->heads;
	if (hd % 2 != 0 || (o->head_dim_swa % 2) != 0)
		return lm_fail(d, LM_EINVAL, "head size %u is odd; RoPE rotates pairs of elements",
			       hd % 2 != 0 ? hd : o->head_dim_swa);
	if (arch == SYNTH_GEMMA4 && hd % 8 != 0)
		return lm_fail(
			d, LM_EINVAL,
			"gemma4's global head size %u: its proportional rope turns a quarter "
			"of the pairs, so it must be a multiple of 8",
			hd);
	if (!(o->softcap >= 0.0f) || !isfinite(o->softcap) || !(o->rope_base_swa >= 0.0f) ||
	    !isfinite(o->rope_base_swa))
		return lm_fail(d, LM_ERANGE, "softcap and rope-base-swa must be non-negative");
	return 0;
}

int synth_check(const struct synth_opts *o, lm_diag *d)
{
	if (o->out == NULL || o->out[0] == '\0')
		return lm_fail(d, LM_EINVAL, "no output file");
	if (o->dim < 1 || o->dim > 65536)
		return lm_fail(d, LM_ERANGE, "dim %u is not in [1, 65536]", o->dim);
	/* llama.cpp (LLAMA_MAX_LAYERS) refuses more than 512 blocks. */
	if (o->layers < 1 || o->layers > 512)
		return lm_fail(d, LM_ERANGE, "layers %u is not in [1, 512], what llama.cpp loads",
			       o->layers);
	if (o->heads < 1 || (o->head_dim == 0 && o->dim % o->heads != 0))
		return lm_fail(d, LM_EINVAL, "heads %u does not divide dim %u", o->heads, o->dim);
	if (o->head_dim == 0 && (o->dim / o->heads) % 2 != 0)
		return lm_fail(d, LM_EINVAL,
			       "head size dim / heads = %u is odd; RoPE rotates pairs of elements",
			       o->dim / o->heads);
	if (o->kv_heads < 1 || o->kv_heads > o->heads || o->heads % o->kv_heads != 0)
		return lm_fail(d, LM_EINVAL, "kv-heads %u does not divide heads %u", o->kv_heads,
			       o->heads);
	if (o->ffn < 1 || o->ffn > (1u << 20))
		return lm_fail(d, LM_ERANGE, "ffn %u is not in [1, 1048576]", o->ffn);
	if (o->vocab > (1u << 24))
		return lm_fail(d, LM_ERANGE, "vocab %u is over 16777216", o->vocab);
	if (o->vocab_from == NULL && o->vocab < SYNTH_VOCAB_MIN)
		return lm_fail(
			d, LM_ERANGE,
			"vocab %u is under %d: the default vocabulary starts with <unk>, <s>, "
			"</s> and 256 byte tokens",
			o->vocab, SYNTH_VOCAB_MIN);
	if (o->ctx < 1 || o->ctx > (1u << 24))
		return lm_fail(d, LM_ERANGE, "ctx %u is not in [1, 16777216]", o->ctx);
	if (!(o->rope_base > 0.0f) || !isfinite(o->rope_base))
		return lm_fail(d, LM_ERANGE, "rope-base %g is not a positive number",
			       (double)o->rope_base);
	if (!(o->rms_eps > 0.0f) || !isfinite(o->rms_eps))
		return lm_fail(d, LM_ERANGE, "rms-eps %g is not a positive number",
			       (double)o->rms_eps);
	int rc = synth_check_arch(o, d);
	if (rc != 0)
		return rc;
	const struct lm_dtype_info *info = lm_dtype_info((uint32_t)o->type);
	if (info == NULL || !synth_type_ok(o->type))
		return lm_fail(d, LM_EUNSUPPORTED,
			       "type %s: synth writes f32, f16, bf16, q8_0, q4_0, q4_K or q6_K",
			       lm_dtype_name((uint32_t)o->type));
	const enum lm_dtype et = synth_exps_type(o);
	if (!synth_type_ok(et) && et != LM_MXFP4)
		return lm_fail(d, LM_EUNSUPPORTED,
			       "experts type %s: synth writes f32, f16, bf16, q8_0, q4_0, q4_K, "
			       "q6_K or mxfp4",
			       lm_dtype_name((uint32_t)et));
	/* The row-length rule, checked on the matrices in file order so the message names the
	 * first tensor that breaks it. */
	struct synth_tensor *t = calloc(synth_tensors_cap(o), sizeof *t);
	if (t == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	size_t n = synth_tensors(o, t);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct lm_dtype_info *ti = lm_dtype_info((uint32_t)synth_type(o, &t[i]));
		if (t[i].kind == SYNTH_MATRIX && t[i].ne0 % ti->blck != 0)
			rc = lm_fail(d, LM_EINVAL,
				     "%s: a %s row holds a multiple of %u elements, and its rows "
				     "have %s = %lld elements",
				     t[i].name, ti->name, ti->blck,
				     t[i].ne0 == o->dim   ? "dim"
				     : t[i].ne0 == o->ffn ? "ffn"
				     : t[i].ne2 > 1       ? "ffn-exp"
							  : "heads x head_dim",
				     (long long)t[i].ne0);
	}
	free(t);
	return rc;
}

/* Llama 3.1's long-context rope as its converter computes the factors: pairs of wavelength
 * above 8192 / 1 positions turn 8 times slower, below 8192 / 4 as before, between smoothly. */
static float synth_llama3_factor(const struct synth_opts *o, int64_t i, int64_t head_dim)
{
	const double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
	double freq = 1.0 / pow((double)o->rope_base, (double)(2 * i) / (double)head_dim);
	double wavelen = 2.0 * M_PI / freq;
	if (wavelen < old_ctx / high)
		return 1.0f;
	if (wavelen > old_ctx / low)
		return (float)factor;
	double smooth = (old_ctx / wavelen - low) / (high - low);
	return (float)(1.0 / ((1.0 - smooth) / factor + smooth));
}

/* ---------------------------------------------------------------- rows */

/* Encodes n floats as `type`: the quantized types through the CPU kernels' reference
 * quantizers, bit-compatible with ggml's, so llama.cpp reads the same values. */
static int synth_encode_row(enum lm_dtype type, const float *src, void *dst, int64_t n, lm_diag *d)
{
	int rc = lm_quantize_row(type, src, dst, n);
	if (rc != 0)
		return lm_fail(d, rc, "quantizing a row of %lld elements to %s failed",
			       (long long)n, lm_dtype_name((uint32_t)type));
	return 0;
}

/* Rows quantized at once: generated in order (one noise stream per tensor), quantized on
 * several threads, written in order. */
#define SYNTH_ROWS_AT_ONCE 64

struct synth_quant_job {
	enum lm_dtype type;
	const float *rows;
	uint8_t *enc;
	int64_t ne0, n;
	size_t row_bytes;
	int part, parts;
	int rc;
};

static void *synth_quant_part(void *arg)
{
	struct synth_quant_job *j = arg;
	for (int64_t r = j->part; r < j->n && j->rc == 0; r += j->parts)
		j->rc = lm_quantize_row(j->type, j->rows + r * j->ne0,
					j->enc + (size_t)r * j->row_bytes, j->ne0);
	return NULL;
}

/* Quantizes n rows into enc, on up to `threads` threads (a part whose thread cannot start runs
 * on the caller). */
static int synth_encode_rows(enum lm_dtype type, const float *rows, uint8_t *enc, int64_t ne0,
			     int64_t n, size_t row_bytes, uint32_t threads, lm_diag *d)
{
	struct synth_quant_job jobs[SYNTH_ROWS_AT_ONCE];
	pthread_t tids[SYNTH_ROWS_AT_ONCE];
	bool started[SYNTH_ROWS_AT_ONCE] = {false};
	const int parts = threads > (uint32_t)n ? (int)n : (int)threads;
	for (int p = 0; p < parts; p++) {
		jobs[p] = (struct synth_quant_job){.type = type,
						   .rows = rows,
						   .enc = enc,
						   .ne0 = ne0,
						   .n = n,
						   .row_bytes = row_bytes,
						   .part = p,
						   .parts = parts};
		started[p] =
			p > 0 && pthread_create(&tids[p], NULL, synth_quant_part, &jobs[p]) == 0;
	}
	int rc = 0;
	for (int p = 0; p < parts; p++) {
		if (started[p])
			pthread_join(tids[p], NULL);
		else
			synth_quant_part(&jobs[p]);
		if (rc == 0)
			rc = jobs[p].rc;
	}
	if (rc != 0)
		return lm_fail(d, rc, "quantizing rows of %lld elements to %s failed",
			       (long long)ne0, lm_dtype_name((uint32_t)type));
	return 0;
}

/* Generates and writes one tensor, SYNTH_ROWS_AT_ONCE rows at a time. */
static int synth_write_tensor(gguf_writer *w, const struct synth_opts *o,
			      const struct synth_tensor *t, float *row, uint8_t *enc, lm_diag *d)
{
	uint64_t state = synth_stream(o->seed, t->name);
	enum lm_dtype type = synth_type(o, t);
	uint64_t row_bytes;
	int rc = lm_dtype_row_bytes((uint32_t)type, (uint64_t)t->ne0, &row_bytes);
	if (rc != 0)
		return lm_fail(d, rc, "%s: row of %lld elements", t->name, (long long)t->ne0);
	/* Float arithmetic on exact integers and one rounded scale: the same bits everywhere. */
	float scale, offset;
	switch (t->kind) {
	case SYNTH_NORM:
		scale = (float)(0.1 / SYNTH_NOISE_STD);
		offset = 1.0f;
		break;
	case SYNTH_BIAS:
		scale = (float)(0.1 / SYNTH_NOISE_STD);
		offset = 0.0f;
		break;
	case SYNTH_SCALE:
		scale = (float)(0.05 / SYNTH_NOISE_STD);
		offset = 0.75f;
		break;
	case SYNTH_SINK:
		scale = (float)(1.0 / SYNTH_NOISE_STD);
		offset = 0.0f;
		break;
	case SYNTH_DECAY:
		scale = (float)(0.5 / SYNTH_NOISE_STD);
		offset = 0.0f;
		break;
	default:
		scale = (float)(1.0 / sqrt((double)t->ne0) / SYNTH_NOISE_STD);
		offset = 0.0f;
	}
	const int64_t rows = t->ne1 * t->ne2; /* an expert tensor: every expert's, in turn */
	for (int64_t r0 = 0; r0 < rows; r0 += SYNTH_ROWS_AT_ONCE) {
		const int64_t n = rows - r0 < SYNTH_ROWS_AT_ONCE ? rows - r0 : SYNTH_ROWS_AT_ONCE;
		for (int64_t r = 0; r < n; r++) {
			float *x = row + r * t->ne0;
			for (int64_t i = 0; i < t->ne0; i++)
				x[i] = offset + (float)synth_noise(&state) * scale;
			for (int64_t i = 0; t->kind == SYNTH_DECAY && i < t->ne0; i++)
				x[i] = -expf(x[i]);
			if (t->kind ==
			    SYNTH_FREQS) /* Llama 3.1's factors, or Gemma 4's proportional rope */
				for (int64_t i = 0; i < t->ne0; i++)
					x[i] = synth_arch_of(o) == SYNTH_LLAMA
						       ? synth_llama3_factor(o, i, 2 * t->ne0)
					       : i < t->ne0 / 4 ? 1.0f
								: 1e30f;
		}
		if (o->threads > 1 && n > 1)
			rc = synth_encode_rows(type, row, enc, t->ne0, n, (size_t)row_bytes,
					       o->threads, d);
		else
			for (int64_t r = 0; r < n && rc == 0; r++)
				rc = synth_encode_row(type, row + r * t->ne0,
						      enc + (size_t)r * row_bytes, t->ne0, d);
		if (rc != 0 ||
		    (rc = gguf_writer_write_data(w, enc, (size_t)(n * (int64_t)row_bytes), d)) != 0)
			return rc;
	}
	return 0;
}

/* ---------------------------------------------------------------- vocabulary */

/* Characters of the single-character pieces, most frequent English letters first. */
static const char synth_chars[] = "etaoinshrdlucmfwypvbgkqjxz"
				  "ETAOINSHRDLUCMFWYPVBGKQJXZ"
				  "0123456789.,!?'\"-:;()";
#define SYNTH_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */

struct synth_vocab {
	char **tokens;
	float *scores;
	int32_t *types;
	uint32_t n;
};

static void synth_vocab_fini(struct synth_vocab *v)
{
	if (v->tokens != NULL)
		for (uint32_t i = 0; i < v->n; i++)
			free(v->tokens[i]);
	free(v->tokens);
	free(v->scores);
	free(v->types);
	memset(v, 0, sizeof *v);
}

static int synth_vocab_add(struct synth_vocab *v, uint32_t cap, const char *text, float score,
			   int32_t type)
{
	if (v->n == cap)
		return 1; /* full: the caller stops */
	if ((v->tokens[v->n] = strdup(text)) == NULL)
		return LM_ENOMEM;
	v->scores[v->n] = score;
	v->types[v->n] = type;
	v->n++;
	return 0;
}

static int synth_vocab_build(struct synth_vocab *v, uint32_t n, lm_diag *d)
{
	char buf[64];
	int rc = 0;

	memset(v, 0, sizeof *v);
	v->tokens = calloc(n, sizeof *v->tokens);
	v->scores = calloc(n, sizeof *v->scores);
	v->types = calloc(n, sizeof *v->types);
	if (v->tokens == NULL || v->scores == NULL || v->types == NULL)
		goto oom;
	/* llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte. */
	if (synth_vocab_add(v, n, "<unk>", 0.0f, 2) != 0 ||
	    synth_vocab_add(v, n, "<s>", 0.0f, 3) != 0 ||
	    synth_vocab_add(v, n, "</s>", 0.0f, 3) != 0)
		goto oom;
	for (int b = 0; b < 256; b++) {
		snprintf(buf, sizeof buf, "<0x%02X>", b);
		if (synth_vocab_add(v, n, buf, 0.0f, 6) != 0)
			goto oom;
	}
	/* Word pieces, each scored below the one before, so SentencePiece merges prefer the
	 * earlier (shorter, more frequent) ones. Every prefix of a piece is itself a piece, so
	 * the merges can reach it. */
	float score = 0.0f;
#define SYNTH_PIECE(text)                                     \
	do {                                                  \
		score -= 1.0f;                                \
		rc = synth_vocab_add(v, n, (text), score, 1); \
		if (rc == 1)                                  \
			return 0;                             \
		if (rc != 0)                                  \
			goto oom;                             \
	} while (0)
	SYNTH_PIECE(SYNTH_SPACE);
	for (const char *c = synth_chars; *c != '\0'; c++) {
		snprintf(buf, sizeof buf, SYNTH_SPACE "%c", *c);
		SYNTH_PIECE(buf);
		snprintf(buf, sizeof buf, "%c", *c);
		SYNTH_PIECE(buf);
	}
	for (int len = 2; len <= 8; len++) {
		uint64_t count = 1;
		for (int i = 0; i < len; i++)
			count *= 26;
		for (uint64_t k = 0; k < count; k++) {
			char word[16];
			uint64_t x = k;
			for (int i = len - 1; i >= 0; i--) {
				word[i] = synth_chars[x % 26];
				x /= 26;
			}
			word[len] = '\0';
			snprintf(buf, sizeof buf, SYNTH_SPACE "%s", word);
			SYNTH_PIECE(buf);
			SYNTH_PIECE(word);
		}
	}
#undef SYNTH_PIECE
	return 0; /* 26^8 pieces are more than any vocab allowed */
oom:
	synth_vocab_fini(v);
	return lm_fail(d, LM_ENOMEM, "out of memory for a %u-token vocabulary", n);
}

static int synth_put_vocab(gguf_writer *w, uint32_t n, lm_diag *d)
{
	struct synth_vocab v;
	int rc = synth_vocab_build(&v, n, d);
	if (rc != 0)
		return rc;
	if ((rc = gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama", d)) != 0 ||
	    (rc = gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
					 NULL, v.n, d)) != 0 ||
	    (rc = gguf_writer_kv_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.scores, v.n,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types, v.n,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0, d)) != 0 ||
	    (rc = gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true, d)) != 0 ||
	    (rc = gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", false, d)) != 0) {
		synth_vocab_fini(&v);
		return rc;
	}
	synth_vocab_fini(&v);
	return 0;
}

/* Opens the GGUF whose vocabulary is to be copied and checks its token count against *vocab
 * (0: take it). */
static int synth_open_vocab(const char *path, uint32_t *vocab, gguf_file **out, lm_diag *d)
{
	gguf_file *f = NULL;
	const struct gguf_arr *tokens;
	int rc = gguf_open(path, &f, d);
	if (rc != 0)
		return rc;
	rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens, d);
	if (rc == LM_ENOTFOUND)
		rc = lm_fail(d, LM_EFORMAT, "%s: no tokenizer.ggml.tokens array", path);
	else if (rc == 0 && *vocab != 0 && tokens->n != *vocab)
		rc = lm_fail(d, LM_EINVAL, "vocab %u, but %s has %llu tokens", *vocab, path,
			     (unsigned long long)tokens->n);
	else if (rc == 0 && (tokens->n < 1 || tokens->n > (1u << 24)))
		rc = lm_fail(d, LM_ERANGE, "%s: %llu tokens, not in [1, 16777216]", path,
			     (unsigned long long)tokens->n);
	if (rc != 0) {
		gguf_close(f);
		return rc;
	}
	*vocab = (uint32_t)tokens->n;
	*out = f;
	return 0;
}

/* Copies every tokenizer.* key, in the file's order (but the chat template, when another is
 * given). */
static int synth_copy_vocab(gguf_writer *w, const gguf_file *f, bool own_template, lm_diag *d)
{
	int rc = 0;
	for (uint64_t i = 0; i < gguf_n_kv(f) && rc == 0; i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);
		if (strncmp(kv->key, "tokenizer.", 10) == 0 &&
		    !(own_template && strcmp(kv->key, "tokenizer.chat_template") == 0))
			rc = gguf_writer_kv_copy(w, kv, d);
	}
	if (rc != 0)
		lm_diag_prefix(d, "copying the vocabulary of %s", gguf_path(f));
	return rc;
}

/* tokenizer.chat_template from a file's text. */
static int synth_put_template(gguf_writer *w, const char *path, lm_diag *d)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return lm_fail(d, lm_err_from_errno(errno), "%s: cannot open it", path);
	char *text = NULL;
	size_t len = 0, cap = 0, n;
	int rc = 0;
	char buf[4096];
	while (rc == 0 && (n = fread(buf, 1, sizeof buf, f)) > 0) {
		char *p = lm_grow(text, &cap, len + n + 1, 1, 4096);
		if (p == NULL) {
			rc = lm_fail(d, LM_ENOMEM, "out of memory");
			break;
		}
		text = p;
		memcpy(text + len, buf, n);
		len += n;
	}
	fclose(f);
	if (rc == 0 && (text == NULL || memchr(text, '\0', len) != NULL))
		rc = lm_fail(d, LM_EINVAL, "%s: empty, or holds a NUL byte", path);
	if (rc == 0) {
		text[len] = '\0';
		rc = gguf_writer_kv_str(w, "tokenizer.chat_template", text, d);
	}
	free(text);
	return rc;
}

/* ---------------------------------------------------------------- the file */

/* llama_ftype: what llama.cpp prints as the file's type ("mostly X": the norms stay f32); MXFP4
 * experts are 38, LLAMA_FTYPE_MOSTLY_MXFP4_MOE, whatever the rest. */
static uint32_t synth_file_type(enum lm_dtype t)
{
	switch (t) {
	case LM_F16:
		return 1;
	case LM_Q4_0:
		return 2;
	case LM_Q8_0:
		return 7;
	case LM_Q4_K:
		return 14; /* Q4_K_S: every matrix q4_K */
	case LM_Q6_K:
		return 18;
	case LM_BF16:
		return 32;
	default:
		return 0;
	}
}

/* "<arch>.<suffix>", for the architecture's keys. */
static const char *synth_key(const struct synth_opts *o, const char *suffix, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s.%s", synth_arch_names[synth_arch_of(o)], suffix);
	return buf;
}

/* Gemma's keys (and gpt-oss's, which has the same): the window and its pattern, head sizes,
 * rope of both kinds, softcapping. */
static int synth_put_gemma(gguf_writer *w, const struct synth_opts *o, lm_diag *d)
{
	char k[96];
	int rc = 0;
	const bool g4 = synth_arch_of(o) == SYNTH_GEMMA4;
	uint32_t hd = o->head_dim != 0 ? o->head_dim : o->dim / o->heads;
	uint32_t hds = g4 && o->head_dim_swa != 0 ? o->head_dim_swa : hd;
	if (o->window != 0) {
		rc = gguf_writer_kv_u32(w, synth_key(o, "attention.sliding_window", k, sizeof k),
					o->window, d);
		if (rc == 0 && g4) {
			bool *swa = calloc(o->layers, sizeof *swa);
			if (swa == NULL)
				return lm_fail(d, LM_ENOMEM, "out of memory");
			for (uint32_t il = 0; il < o->layers; il++)
				swa[il] = synth_swa(o, il);
			rc = gguf_writer_kv_arr(
				w, synth_key(o, "attention.sliding_window_pattern", k, sizeof k),
				GGUF_TYPE_BOOL, swa, o->layers, d);
			free(swa);
		} else if (rc == 0 && o->swa_period != 0) {
			rc = gguf_writer_kv_u32(
				w, synth_key(o, "attention.sliding_window_pattern", k, sizeof k),
				o->swa_period, d);
		}
	}
	if (rc == 0)
		rc = gguf_writer_kv_u32(w, synth_key(o, "attention.key_length", k, sizeof k), hd,
					d);
	if (rc == 0)
		rc = gguf_writer_kv_u32(w, synth_key(o, "attention.value_length", k, sizeof k), hd,
					d);
	if (rc == 0 && o->rope_base_swa > 0)
		rc = gguf_writer_kv_f32(w, synth_key(o, "rope.freq_base_swa", k, sizeof k),
					o->rope_base_swa, d);
	if (rc == 0 && o->rope_yarn > 0 &&
	    ((rc = gguf_writer_kv_str(w, synth_key(o, "rope.scaling.type", k, sizeof k), "yarn",
				      d)) != 0 ||
	     (rc = gguf_writer_kv_f32(w, synth_key(o, "rope.scaling.factor", k, sizeof k),
				      o->rope_yarn, d)) != 0))
		return rc;
	if (rc == 0 && o->rope_yarn_orig != 0)
		rc = gguf_writer_kv_u32(
			w, synth_key(o, "rope.scaling.original_context_length", k, sizeof k),
			o->rope_yarn_orig, d);
	if (rc == 0 && o->softcap > 0)
		rc = gguf_writer_kv_f32(w, synth_key(o, "final_logit_softcapping", k, sizeof k),
					o->softcap, d);
	if (rc != 0 || !g4)
		return rc;
	/* Gemma 4: the sliding layers' heads, the per-layer embeddings and shared-KV layers it
	 * does not have (llama.cpp requires the keys), the KV heads of each layer. */
	int32_t *kv = calloc(o->layers, sizeof *kv);
	if (kv == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	for (uint32_t il = 0; il < o->layers; il++) {
		int64_t h, n;
		synth_layer_geom(o, il, &h, &n);
		kv[il] = (int32_t)n;
	}
	if ((rc = gguf_writer_kv_u32(w, synth_key(o, "attention.key_length_swa", k, sizeof k), hds,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "attention.value_length_swa", k, sizeof k),
				     hds, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "rope.dimension_count_swa", k, sizeof k), hds,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w,
				     synth_key(o, "embedding_length_per_layer_input", k, sizeof k),
				     0, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "attention.shared_kv_layers", k, sizeof k), 0,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_arr(w, synth_key(o, "attention.head_count_kv", k, sizeof k),
				     GGUF_TYPE_INT32, kv, o->layers, d)) != 0) {
		free(kv);
		return rc;
	}
	free(kv);
	return 0;
}

/* qwen35's keys: the delta-net's shape, the attention interval, the head size (key_length) and
 * its partial multi-section rope: a quarter of each head turns, its pairs in three interleaved
 * sections (Qwen 3.5's [11, 11, 10, 0] of 32). */
static int synth_put_qwen35(gguf_writer *w, const struct synth_opts *o, lm_diag *d)
{
	char k[96];
	const uint32_t hd = o->dim / o->heads, S = synth_ssm_state(o), pairs = hd / 8;
	/* Interleaved sections: pair i takes section i mod 3, so section r has the pairs
	 * i = r, r + 3, ... below `pairs`. */
	const int32_t sections[4] = {(int32_t)(pairs + 2) / 3, (int32_t)(pairs + 1) / 3,
				     (int32_t)pairs / 3, 0};
	int rc;
	if ((rc = gguf_writer_kv_u32(w, synth_key(o, "ssm.conv_kernel", k, sizeof k), 4, d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "ssm.state_size", k, sizeof k), S, d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "ssm.group_count", k, sizeof k),
				     synth_ssm_k_heads(o), d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "ssm.time_step_rank", k, sizeof k),
				     synth_ssm_v_heads(o), d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "ssm.inner_size", k, sizeof k),
				     S * synth_ssm_v_heads(o), d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "full_attention_interval", k, sizeof k),
				     o->full_attn_every != 0 ? o->full_attn_every : 4, d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "attention.key_length", k, sizeof k), hd,
				     d)) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "attention.value_length", k, sizeof k), hd,
				     d)) ||
	    (rc = gguf_writer_kv_arr(w, synth_key(o, "rope.dimension_sections", k, sizeof k),
				     GGUF_TYPE_INT32, sections, 4, d)))
		return rc;
	return 0;
}

/* The mixtures' keys (qwen3moe's, qwen35moe's, gemma4's and gpt-oss's): the experts, how many
 * a token takes, their width. */
static int synth_put_experts(gguf_writer *w, const struct synth_opts *o, lm_diag *d)
{
	char k[96];
	int rc;
	if ((rc = gguf_writer_kv_u32(w, synth_key(o, "expert_count", k, sizeof k), o->experts,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "expert_used_count", k, sizeof k),
				     o->experts_used, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "expert_feed_forward_length", k, sizeof k),
				     (uint32_t)synth_ffn_exp(o), d)) != 0 ||
	    (synth_arch_of(o) == SYNTH_QWEN35MOE &&
	     (rc = gguf_writer_kv_u32(
		      w, synth_key(o, "expert_shared_feed_forward_length", k, sizeof k), o->ffn,
		      d)) != 0))
		return rc;
	return 0;
}

static int synth_put_meta(gguf_writer *w, const struct synth_opts *o, uint32_t vocab, lm_diag *d)
{
	bool quant = o->type != LM_F32 && o->type != LM_F16 && o->type != LM_BF16;
	const int arch = synth_arch_of(o);
	int rc;
	char name[160], k[96];
	snprintf(name, sizeof name, "layermesh synth %s%s%s d%u l%u h%u/%u f%u v%u seed %llu",
		 arch == SYNTH_LLAMA ? "" : synth_arch_names[arch], arch == SYNTH_LLAMA ? "" : " ",
		 lm_dtype_name((uint32_t)o->type), o->dim, o->layers, o->heads, o->kv_heads, o->ffn,
		 vocab, (unsigned long long)o->seed);
	uint32_t hd = o->head_dim != 0 ? o->head_dim : o->dim / o->heads;
	if ((rc = gguf_writer_kv_str(w, "general.architecture", synth_arch_names[arch], d)) != 0 ||
	    (rc = gguf_writer_kv_str(w, "general.name", name, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, "general.file_type",
				     synth_exps_type(o) == LM_MXFP4 ? 38 : synth_file_type(o->type),
				     d)) != 0 ||
	    (quant && (rc = gguf_writer_kv_u32(w, "general.quantization_version", 2, d)) != 0) ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "vocab_size", k, sizeof k), vocab, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "context_length", k, sizeof k), o->ctx, d)) !=
		    0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "embedding_length", k, sizeof k), o->dim,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "block_count", k, sizeof k), o->layers, d)) !=
		    0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "feed_forward_length", k, sizeof k), o->ffn,
				     d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "rope.dimension_count", k, sizeof k),
				     synth_q35(o) ? hd / 4 : hd, d)) != 0 ||
	    (rc = gguf_writer_kv_u32(w, synth_key(o, "attention.head_count", k, sizeof k), o->heads,
				     d)) != 0 ||
	    (arch != SYNTH_GEMMA4 &&
	     (rc = gguf_writer_kv_u32(w, synth_key(o, "attention.head_count_kv", k, sizeof k),
				      o->kv_heads, d)) != 0) ||
	    (rc = gguf_writer_kv_f32(w,
				     synth_key(o, "attention.layer_norm_rms_epsilon", k, sizeof k),
				     o->rms_eps, d)) != 0 ||
	    (rc = gguf_writer_kv_f32(w, synth_key(o, "rope.freq_base", k, sizeof k), o->rope_base,
				     d)) != 0 ||
	    (arch == SYNTH_LLAMA && o->window != 0 &&
	     (rc = gguf_writer_kv_u32(w, "llama.attention.sliding_window", o->window, d)) != 0) ||
	    ((synth_gemma(o) || arch == SYNTH_GPTOSS) && (rc = synth_put_gemma(w, o, d)) != 0) ||
	    (o->experts != 0 && (rc = synth_put_experts(w, o, d)) != 0) ||
	    (synth_q35(o) && (rc = synth_put_qwen35(w, o, d)) != 0) ||
	    (rc = gguf_writer_kv_u32(w, "layermesh.synth.version", SYNTH_FORMAT_VERSION, d)) != 0 ||
	    (rc = gguf_writer_kv_u64(w, "layermesh.synth.seed", o->seed, d)) != 0)
		return rc;
	return 0;
}

int synth_write(const struct synth_opts *o_in, struct synth_stats *st, lm_diag *d)
{
	struct synth_opts o = *o_in;
	struct synth_tensor *tensors = NULL;
	float *row = NULL;
	uint8_t *enc = NULL;
	FILE *fp = NULL;
	char *tmp = NULL;
	gguf_writer w = {0};
	gguf_file *vf = NULL;
	int rc;

	if (o.kv_heads == 0)
		o.kv_heads = o.heads;
	if ((rc = synth_check(&o, d)) != 0)
		return rc;
	if ((rc = gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT, d)) != 0)
		return rc;

	/* The vocabulary decides V, which the metadata and two tensors need. */
	if (o.vocab_from != NULL) {
		if ((rc = synth_open_vocab(o.vocab_from, &o.vocab, &vf, d)) != 0)
			goto out;
	}
	if ((rc = synth_put_meta(&w, &o, o.vocab, d)) != 0)
		goto out;
	rc = vf != NULL ? synth_copy_vocab(&w, vf, o.chat_template_from != NULL, d)
			: synth_put_vocab(&w, o.vocab, d);
	if (rc == 0 && o.chat_template_from != NULL)
		rc = synth_put_template(&w, o.chat_template_from, d);
	if (rc != 0)
		goto out;

	size_t cap = synth_tensors_cap(&o), n;
	if ((tensors = calloc(cap, sizeof *tensors)) == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	n = synth_tensors(&o, tensors);
	int64_t max_ne0 = 1;
	for (size_t i = 0; i < n; i++)
		max_ne0 = tensors[i].ne0 > max_ne0 ? tensors[i].ne0 : max_ne0;
	row = malloc((size_t)max_ne0 * SYNTH_ROWS_AT_ONCE * sizeof *row);
	enc = malloc((size_t)max_ne0 * SYNTH_ROWS_AT_ONCE * sizeof(float));
	if (row == NULL || enc == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	uint64_t params = 0;
	for (size_t i = 0; i < n; i++) {
		const int64_t ne[3] = {tensors[i].ne0, tensors[i].ne1, tensors[i].ne2};
		if ((rc = gguf_writer_add_tensor(&w, tensors[i].name, synth_type(&o, &tensors[i]),
						 synth_dims(&tensors[i]), ne, NULL, d)) != 0)
			goto out;
		params += (uint64_t)ne[0] * (uint64_t)ne[1] * (uint64_t)ne[2];
	}

	size_t len = strlen(o.out);
	if ((tmp = malloc(len + 16)) == NULL) {
		rc = lm_fail(d, LM_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(tmp, len + 16, "%s.tmp.XXXXXX", o.out);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		rc = lm_fail(d, lm_err_from_errno(errno), "cannot create a temporary file: %s",
			     strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	/* mkstemp makes the file private; give it the permissions a plain create would. */
	mode_t mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask) != 0 || (fp = fdopen(fd, "wb")) == NULL) {
		rc = lm_fail(d, lm_err_from_errno(errno), "%s: %s", tmp, strerror(errno));
		close(fd);
		goto out;
	}
	setvbuf(fp, NULL, _IOFBF, 1 << 20);
	if ((rc = gguf_writer_write_header(&w, fp, d)) != 0)
		goto out;
	if (o.sparse) {
		/* The index and no data: the file is extended with a hole to its full size, so
		 * the planner can price a real geometry without writing its bytes. */
		if (fflush(fp) != 0 ||
		    ftruncate(fileno(fp), (off_t)gguf_writer_file_size(&w)) != 0) {
			rc = lm_fail(d, LM_EIO, "%s: %s", tmp, strerror(errno));
			goto out;
		}
	} else {
		for (size_t i = 0; i < n; i++)
			if ((rc = synth_write_tensor(&w, &o, &tensors[i], row, enc, d)) != 0)
				goto out;
		if ((rc = gguf_writer_finish(&w, d)) != 0)
			goto out;
	}
	FILE *done = fp;
	fp = NULL;
	if (fclose(done) != 0) {
		rc = lm_fail(d, LM_EIO, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (rename(tmp, o.out) != 0) {
		rc = lm_fail(d, lm_err_from_errno(errno), "rename %s to %s: %s", tmp, o.out,
			     strerror(errno));
		goto out;
	}
	free(tmp);
	tmp = NULL;
	if (st != NULL) {
		st->n_tensors = n;
		st->n_params = params;
		st->file_bytes = gguf_writer_file_size(&w);
		st->vocab = o.vocab;
	}
out:
	if (rc != 0)
		lm_diag_prefix(d, "%s", o.out);
	if (fp != NULL)
		fclose(fp);
	if (tmp != NULL) {
		unlink(tmp);
		free(tmp);
	}
	free(enc);
	free(row);
	free(tensors);
	gguf_close(vf);
	gguf_writer_fini(&w);
	return rc;
}

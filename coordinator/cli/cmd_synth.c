/* cmd_synth.c — `layermesh synth`: write a random-weight GGUF of any shape and architecture
 * (synth.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cli/cmds.h"
#include "common/format/synth.h"

static void synth_usage(FILE *out)
{
	fputs("usage: layermesh synth --out FILE --dim D --layers L --heads H --ffn F --vocab V\n"
	      "                       [options]\n"
	      "\n"
	      "Writes a GGUF with deterministic random weights: the same options give the same\n"
	      "bytes. llama.cpp (release v0.4.0) loads it like any model of its architecture.\n"
	      "\n"
	      "  --out FILE        the GGUF to write (replaced atomically)\n"
	      "  --arch A          llama (default), qwen2 (Q/K/V biases), qwen3 (Q/K norms),\n"
	      "                    qwen3moe (qwen3 with a mixture of experts on every layer),\n"
	      "                    qwen35 (gated delta-net layers, gated full attention),\n"
	      "                    qwen35moe (qwen35 with experts and a shared expert),\n"
	      "                    gemma3 or gemma4 (sliding and global layers, post-norms,\n"
	      "                    GELU FFN; gemma4: no V on global layers, output scales),\n"
	      "                    gpt-oss (biases, attention sinks, sliding and global layers,\n"
	      "                    experts with biases and a clamped SwiGLU)\n"
	      "  --experts N       qwen3moe, qwen35moe, gemma4, gpt-oss: experts per layer\n"
	      "                    (<arch>.expert_count), up to 512; gemma4 with experts is the\n"
	      "                    26B-A4B layout (--ffn is the shared FFN's width)\n"
	      "  --experts-used K  experts each token takes, up to N\n"
	      "  --ffn-exp F       an expert's width (default --ffn)\n"
	      "  --experts-type T  the experts' weight type, --type's or mxfp4 (default --type);\n"
	      "                    F must be a multiple of its block\n"
	      "  --dense-layers N  gemma4 with experts: the first N layers stay dense (no router)\n"
	      "  --ssm-state S     qwen35 (gated delta-net layers and gated attention): the\n"
	      "                    delta-net's head size (default dim / heads)\n"
	      "  --ssm-k-heads K   qwen35: its key heads (default --kv-heads)\n"
	      "  --ssm-v-heads V   qwen35: its value heads, a multiple of K (default --heads)\n"
	      "  --full-attn-every N  qwen35: each N-th layer attends (default 4)\n"
	      "  --dim D           embedding length (<arch>.embedding_length), up to 65536\n"
	      "  --layers L        transformer blocks (<arch>.block_count), up to 512\n"
	      "  --heads H         attention heads; D must be a multiple of H, and D/H even\n"
	      "                    (unless --head-dim sets the head size)\n"
	      "  --head-dim N      gemma, gpt-oss: elements per head (gemma4: of the global\n"
	      "                    layers)\n"
	      "  --window W        the sliding layers' window (gemma, gpt-oss: each\n"
	      "                    --swa-period-th layer is global; llama: Mistral's window on\n"
	      "                    every layer)\n"
	      "  --swa-period P    gemma, gpt-oss: every P-th layer is global (default 6 for\n"
	      "                    gemma, 2 for gpt-oss)\n"
	      "  --head-dim-swa N  gemma4: the sliding layers' head size (default --head-dim)\n"
	      "  --kv-heads-swa K  gemma4: the sliding layers' KV heads (default --kv-heads)\n"
	      "  --rope-base-swa B gemma: the sliding layers' rope base (default: not written,\n"
	      "                    which llama.cpp reads as 10000)\n"
	      "  --softcap C       gemma: final logit softcapping (default none)\n"
	      "  --rope-llama3     llama: Llama 3.1's long-context rope (rope_freqs.weight)\n"
	      "  --rope-yarn F     gpt-oss: YaRN rope scaling by factor F (rope.scaling.type)\n"
	      "  --rope-yarn-orig N  gpt-oss: YaRN's original context length\n"
	      "  --sparse          the metadata and tensor index with no data: a file with holes\n"
	      "                    of the full size, for planning real geometries\n"
	      "  --kv-heads KH     key/value heads (grouped-query attention); divides H\n"
	      "                    (default: H)\n"
	      "  --ffn F           feed-forward length (llama.feed_forward_length), up to\n"
	      "                    1048576\n"
	      "  --vocab V         vocabulary size, up to 16777216; at least 259 for the\n"
	      "                    built-in vocabulary\n"
	      "                    (optional with --vocab-from, which then decides it)\n"
	      "  --ctx C           llama.context_length, up to 16777216 (default 2048)\n"
	      "  --type T          weight type of every matrix, the token embedding included:\n"
	      "                    f32, f16, bf16, q8_0, q4_0, q4_K or q6_K (default f32);\n"
	      "                    norm vectors stay f32. D (and F, the row length of ffn_down)\n"
	      "                    must be a multiple of 32 for q8_0/q4_0 and of 256 for\n"
	      "                    q4_K/q6_K\n"
	      "  --seed S          PRNG seed, an unsigned 64-bit integer (default 0)\n"
	      "  --rope-base B     llama.rope.freq_base (default 10000)\n"
	      "  --rms-eps E       llama.attention.layer_norm_rms_epsilon (default 1e-5)\n"
	      "  --tied            no output.weight: the head reuses token_embd.weight\n"
	      "  --vocab-from GGUF copy every tokenizer.* key of GGUF instead of the built-in\n"
	      "                    vocabulary; --vocab, when given, must equal its token count\n"
	      "  --chat-template FILE  the file's text as tokenizer.chat_template (instead of\n"
	      "                    --vocab-from's)\n"
	      "  --threads N       quantize rows on N threads (default 1); the file is the same\n"
	      "                    bytes whatever N\n"
	      "  --help            this text\n"
	      "\n"
	      "Weights are approximately normal with std 1/sqrt(row length) (the embedding:\n"
	      "1/sqrt(D)); norm weights are 1 + 0.1 x noise. The built-in vocabulary is\n"
	      "SentencePiece-style (tokenizer.ggml.model \"llama\"): <unk>, <s>, </s>, the 256\n"
	      "byte tokens <0x00>..<0xFF>, then word pieces with decreasing scores.\n",
	      out);
}

static int synth_bad(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, "layermesh synth: %s '%s': %s (--help lists the options)\n", opt, val,
		want);
	return 2;
}

static bool synth_parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	if (s[0] == '-')
		return false;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

static bool synth_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (s[0] == '-')
		return false;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		return false;
	*out = v;
	return true;
}

static bool synth_parse_pos_float(const char *s, float *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v > 0.0) || !isfinite((float)v))
		return false;
	*out = (float)v;
	return true;
}

/* One row per option: where its value goes in struct synth_opts and how it is read. */
enum synth_kind { SK_U32, SK_U64, SK_FLOAT, SK_STR, SK_FLAG, SK_TYPE };

struct synth_opt {
	const char *name;
	enum synth_kind kind;
	size_t off;
};

#define SO(name, kind, field)                                  \
	{                                                      \
		name, kind, offsetof(struct synth_opts, field) \
	}
static const struct synth_opt synth_table[] = {
	SO("out", SK_STR, out),
	SO("dim", SK_U32, dim),
	SO("layers", SK_U32, layers),
	SO("heads", SK_U32, heads),
	SO("kv-heads", SK_U32, kv_heads),
	SO("ffn", SK_U32, ffn),
	SO("vocab", SK_U32, vocab),
	SO("ctx", SK_U32, ctx),
	SO("type", SK_TYPE, type),
	SO("seed", SK_U64, seed),
	SO("rope-base", SK_FLOAT, rope_base),
	SO("rms-eps", SK_FLOAT, rms_eps),
	SO("tied", SK_FLAG, tied),
	SO("vocab-from", SK_STR, vocab_from),
	SO("chat-template", SK_STR, chat_template_from),
	SO("arch", SK_STR, arch),
	SO("head-dim", SK_U32, head_dim),
	SO("window", SK_U32, window),
	SO("swa-period", SK_U32, swa_period),
	SO("head-dim-swa", SK_U32, head_dim_swa),
	SO("kv-heads-swa", SK_U32, kv_heads_swa),
	SO("rope-base-swa", SK_FLOAT, rope_base_swa),
	SO("softcap", SK_FLOAT, softcap),
	SO("rope-llama3", SK_FLAG, rope_llama3),
	SO("rope-yarn", SK_FLOAT, rope_yarn),
	SO("rope-yarn-orig", SK_U32, rope_yarn_orig),
	SO("experts", SK_U32, experts),
	SO("experts-used", SK_U32, experts_used),
	SO("ffn-exp", SK_U32, ffn_exp),
	SO("experts-type", SK_TYPE, exps_type),
	SO("dense-layers", SK_U32, dense_layers),
	SO("ssm-state", SK_U32, ssm_state),
	SO("ssm-k-heads", SK_U32, ssm_k_heads),
	SO("ssm-v-heads", SK_U32, ssm_v_heads),
	SO("full-attn-every", SK_U32, full_attn_every),
	SO("sparse", SK_FLAG, sparse),
	SO("threads", SK_U32, threads),
};
#undef SO
#define SYNTH_NOPTS (sizeof synth_table / sizeof synth_table[0])

/* Stores one option's value; returns 0, or 2 after saying what is wrong with it. */
static int synth_set(struct synth_opts *o, const struct synth_opt *t, const char *val)
{
	char *field = (char *)o + t->off;
	char opt[32];
	snprintf(opt, sizeof opt, "--%s", t->name);
	switch (t->kind) {
	case SK_U32: {
		uint32_t *u = (uint32_t *)(void *)field;
		if (!synth_parse_u32(val, u) || *u == 0)
			return synth_bad(opt, val, "not a positive 32-bit integer");
		return 0;
	}
	case SK_U64:
		if (!synth_parse_u64(val, (uint64_t *)(void *)field))
			return synth_bad(opt, val, "not an unsigned 64-bit integer");
		return 0;
	case SK_FLOAT:
		if (!synth_parse_pos_float(val, (float *)(void *)field))
			return synth_bad(opt, val, "not a positive number");
		return 0;
	case SK_STR:
		*(const char **)(void *)field = val;
		return 0;
	case SK_FLAG:
		*(bool *)(void *)field = true;
		return 0;
	case SK_TYPE: {
		int ty = lm_dtype_parse(val);
		if (ty < 0)
			return synth_bad(opt, val, "not f32, f16, bf16, q8_0, q4_0, q4_K or q6_K");
		*(enum lm_dtype *)(void *)field = (enum lm_dtype)ty;
		return 0;
	}
	}
	return 2;
}

static int synth_parse(int argc, char **argv, struct synth_opts *o)
{
	struct option longopts[SYNTH_NOPTS + 2];
	for (size_t k = 0; k < SYNTH_NOPTS; k++) {
		longopts[k] = (struct option){synth_table[k].name,
					      synth_table[k].kind == SK_FLAG ? no_argument
									     : required_argument,
					      NULL, 256 + (int)k};
	}
	longopts[SYNTH_NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
	longopts[SYNTH_NOPTS + 1] = (struct option){NULL, 0, NULL, 0};

	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			synth_usage(stdout);
			return -1;
		}
		if (c < 256 || c >= 256 + (int)SYNTH_NOPTS) {
			fprintf(stderr,
				"layermesh synth: unknown option or missing value: %s (--help "
				"lists "
				"the options)\n",
				argv[optind - 1]);
			return 2;
		}
		int rc = synth_set(o, &synth_table[c - 256], optarg);
		if (rc != 0)
			return rc;
	}
	if (optind < argc) {
		fprintf(stderr, "layermesh synth: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	const char *missing = o->out == NULL                           ? "--out"
			      : o->dim == 0                            ? "--dim"
			      : o->layers == 0                         ? "--layers"
			      : o->heads == 0                          ? "--heads"
			      : o->ffn == 0                            ? "--ffn"
			      : o->vocab == 0 && o->vocab_from == NULL ? "--vocab (or --vocab-from)"
								       : NULL;
	if (missing != NULL) {
		fprintf(stderr, "layermesh synth: %s is required (--help lists the options)\n",
			missing);
		return 2;
	}

	return 0;
}

int cmd_synth(int argc, char **argv)
{
	struct synth_opts o;
	synth_opts_default(&o);
	int prc = synth_parse(argc, argv, &o);
	if (prc != 0)
		return prc < 0 ? 0 : prc;

	struct synth_stats st;
	lm_diag d = {{0}};
	int rc = synth_write(&o, &st, &d);
	if (rc != 0) {
		fprintf(stderr, "layermesh synth: %s\n", lm_diag_str(&d, rc));
		return rc == LM_EINVAL || rc == LM_ERANGE || rc == LM_EUNSUPPORTED ? 2 : 1;
	}
	printf("%s: %s, %s, dim %u, %u layers, %u/%u heads, ffn %u, vocab %u%s: %llu tensors, "
	       "%llu parameters, %llu bytes%s\n",
	       o.out, o.arch != NULL ? o.arch : "llama", lm_dtype_name((uint32_t)o.type), o.dim,
	       o.layers, o.heads, o.kv_heads != 0 ? o.kv_heads : o.heads, o.ffn, st.vocab,
	       o.tied ? ", tied" : "", (unsigned long long)st.n_tensors,
	       (unsigned long long)st.n_params, (unsigned long long)st.file_bytes,
	       o.sparse ? " (sparse: no data)" : "");
	return 0;
}

/* cmd_synth.c — `layermesh synth`: write a random-weight GGUF of any shape and architecture
 * (synth.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cmds.h"
#include "coordinator/synth.h"

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
	      "                    gemma3 or gemma4 (sliding and global layers, post-norms,\n"
	      "                    GELU FFN; gemma4: no V on global layers, output scales)\n"
	      "  --dim D           embedding length (<arch>.embedding_length), up to 65536\n"
	      "  --layers L        transformer blocks (<arch>.block_count), up to 512\n"
	      "  --heads H         attention heads; D must be a multiple of H, and D/H even\n"
	      "                    (unless --head-dim sets the head size)\n"
	      "  --head-dim N      gemma: elements per head (gemma4: of the global layers)\n"
	      "  --window W        the sliding layers' window (gemma: each --swa-period-th\n"
	      "                    layer is global; llama: Mistral's window on every layer)\n"
	      "  --swa-period P    gemma: every P-th layer is global (default 6)\n"
	      "  --head-dim-swa N  gemma4: the sliding layers' head size (default --head-dim)\n"
	      "  --kv-heads-swa K  gemma4: the sliding layers' KV heads (default --kv-heads)\n"
	      "  --rope-base-swa B gemma: the sliding layers' rope base (default: not written,\n"
	      "                    which llama.cpp reads as 10000)\n"
	      "  --softcap C       gemma: final logit softcapping (default none)\n"
	      "  --rope-llama3     llama: Llama 3.1's long-context rope (rope_freqs.weight)\n"
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

int cmd_synth(int argc, char **argv)
{
	enum {
		OPT_OUT = 256,
		OPT_DIM,
		OPT_LAYERS,
		OPT_HEADS,
		OPT_KV_HEADS,
		OPT_FFN,
		OPT_VOCAB,
		OPT_CTX,
		OPT_TYPE,
		OPT_SEED,
		OPT_ROPE_BASE,
		OPT_RMS_EPS,
		OPT_TIED,
		OPT_VOCAB_FROM,
		OPT_ARCH,
		OPT_HEAD_DIM,
		OPT_WINDOW,
		OPT_SWA_PERIOD,
		OPT_HEAD_DIM_SWA,
		OPT_KV_HEADS_SWA,
		OPT_ROPE_BASE_SWA,
		OPT_SOFTCAP,
		OPT_ROPE_LLAMA3,
		OPT_SPARSE,
		OPT_HELP,
	};
	static const struct option longopts[] = {
		{"out", required_argument, NULL, OPT_OUT},
		{"dim", required_argument, NULL, OPT_DIM},
		{"layers", required_argument, NULL, OPT_LAYERS},
		{"heads", required_argument, NULL, OPT_HEADS},
		{"kv-heads", required_argument, NULL, OPT_KV_HEADS},
		{"ffn", required_argument, NULL, OPT_FFN},
		{"vocab", required_argument, NULL, OPT_VOCAB},
		{"ctx", required_argument, NULL, OPT_CTX},
		{"type", required_argument, NULL, OPT_TYPE},
		{"seed", required_argument, NULL, OPT_SEED},
		{"rope-base", required_argument, NULL, OPT_ROPE_BASE},
		{"rms-eps", required_argument, NULL, OPT_RMS_EPS},
		{"tied", no_argument, NULL, OPT_TIED},
		{"vocab-from", required_argument, NULL, OPT_VOCAB_FROM},
		{"arch", required_argument, NULL, OPT_ARCH},
		{"head-dim", required_argument, NULL, OPT_HEAD_DIM},
		{"window", required_argument, NULL, OPT_WINDOW},
		{"swa-period", required_argument, NULL, OPT_SWA_PERIOD},
		{"head-dim-swa", required_argument, NULL, OPT_HEAD_DIM_SWA},
		{"kv-heads-swa", required_argument, NULL, OPT_KV_HEADS_SWA},
		{"rope-base-swa", required_argument, NULL, OPT_ROPE_BASE_SWA},
		{"softcap", required_argument, NULL, OPT_SOFTCAP},
		{"rope-llama3", no_argument, NULL, OPT_ROPE_LLAMA3},
		{"sparse", no_argument, NULL, OPT_SPARSE},
		{"help", no_argument, NULL, OPT_HELP},
		{NULL, 0, NULL, 0},
	};
	struct synth_opts o;
	int c;

	synth_opts_default(&o);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		const char *name = c >= OPT_OUT && c < OPT_HELP ? longopts[c - OPT_OUT].name : "";
		uint32_t *u32 = NULL;
		switch (c) {
		case OPT_OUT:
			o.out = optarg;
			break;
		case OPT_DIM:
			u32 = &o.dim;
			break;
		case OPT_LAYERS:
			u32 = &o.layers;
			break;
		case OPT_HEADS:
			u32 = &o.heads;
			break;
		case OPT_KV_HEADS:
			u32 = &o.kv_heads;
			break;
		case OPT_FFN:
			u32 = &o.ffn;
			break;
		case OPT_VOCAB:
			u32 = &o.vocab;
			break;
		case OPT_CTX:
			u32 = &o.ctx;
			break;
		case OPT_TYPE: {
			int t = lm_dtype_parse(optarg);
			if (t < 0)
				return synth_bad("--type", optarg,
						 "not f32, f16, bf16, q8_0, q4_0, q4_K or q6_K");
			o.type = (enum lm_dtype)t;
			break;
		}
		case OPT_SEED:
			if (!synth_parse_u64(optarg, &o.seed))
				return synth_bad("--seed", optarg,
						 "not an unsigned 64-bit integer");
			break;
		case OPT_ROPE_BASE:
			if (!synth_parse_pos_float(optarg, &o.rope_base))
				return synth_bad("--rope-base", optarg, "not a positive number");
			break;
		case OPT_RMS_EPS:
			if (!synth_parse_pos_float(optarg, &o.rms_eps))
				return synth_bad("--rms-eps", optarg, "not a positive number");
			break;
		case OPT_TIED:
			o.tied = true;
			break;
		case OPT_VOCAB_FROM:
			o.vocab_from = optarg;
			break;
		case OPT_ARCH:
			o.arch = optarg;
			break;
		case OPT_HEAD_DIM:
			u32 = &o.head_dim;
			break;
		case OPT_WINDOW:
			u32 = &o.window;
			break;
		case OPT_SWA_PERIOD:
			u32 = &o.swa_period;
			break;
		case OPT_HEAD_DIM_SWA:
			u32 = &o.head_dim_swa;
			break;
		case OPT_KV_HEADS_SWA:
			u32 = &o.kv_heads_swa;
			break;
		case OPT_ROPE_BASE_SWA:
			if (!synth_parse_pos_float(optarg, &o.rope_base_swa))
				return synth_bad("--rope-base-swa", optarg,
						 "not a positive number");
			break;
		case OPT_SOFTCAP:
			if (!synth_parse_pos_float(optarg, &o.softcap))
				return synth_bad("--softcap", optarg, "not a positive number");
			break;
		case OPT_ROPE_LLAMA3:
			o.rope_llama3 = true;
			break;
		case OPT_SPARSE:
			o.sparse = true;
			break;
		case 'h':
		case OPT_HELP:
			synth_usage(stdout);
			return 0;
		default:
			fprintf(stderr,
				"layermesh synth: unknown option or missing value: %s (--help "
				"lists "
				"the options)\n",
				argv[optind - 1]);
			return 2;
		}
		if (u32 != NULL && (!synth_parse_u32(optarg, u32) || *u32 == 0)) {
			char opt[32];
			snprintf(opt, sizeof opt, "--%s", name);
			return synth_bad(opt, optarg, "not a positive 32-bit integer");
		}
	}
	if (optind < argc) {
		fprintf(stderr, "layermesh synth: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	const char *missing = o.out == NULL                          ? "--out"
			      : o.dim == 0                           ? "--dim"
			      : o.layers == 0                        ? "--layers"
			      : o.heads == 0                         ? "--heads"
			      : o.ffn == 0                           ? "--ffn"
			      : o.vocab == 0 && o.vocab_from == NULL ? "--vocab (or --vocab-from)"
								     : NULL;
	if (missing != NULL) {
		fprintf(stderr, "layermesh synth: %s is required (--help lists the options)\n",
			missing);
		return 2;
	}

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

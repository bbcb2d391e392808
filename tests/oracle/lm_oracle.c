/* lm_oracle — llama.cpp as the reference layermesh's forward pass is checked against.
 *
 * A thin CLI over the C API of llama.cpp release v0.4.0 (the prebuilt libllama of the npm package
 * node-llama-cpp@3.21.1, installed by deploy/oracle-setup.sh). It runs on the CPU with an F32 KV
 * cache and flash attention off, the settings under which llama.cpp's logits match llama2.c's
 * within ~1e-5 (an F16 cache costs 1e-3..1e-2), so layermesh can be held to a tight bound.
 *
 *   lm_oracle --model M.gguf (--prompt TEXT | --ids "1 2 3") [options]
 *   lm_oracle --model M.gguf --tokenize --file FILE [--no-bos] [--special]
 *   lm_oracle --model M.gguf --vocab-info
 *
 *   --prompt TEXT      tokenized by llama.cpp (llama_tokenize with parse_special false unless
 *                      --special), BOS added when the vocabulary asks for it
 *                      (tokenizer.ggml.add_bos_token) unless --no-bos
 *   --ids "1 2 3"      the prompt as token ids, used verbatim (no BOS added)
 *   --no-bos           do not add BOS to --prompt or --file's texts
 *   --special          parse special-token text ("<|im_start|>") as the token (parse_special)
 *   --tokenize         print the prompt's ids on one line and exit (loads the vocabulary only)
 *   --file FILE        with --tokenize: every text of FILE, one line of ids per text. FILE holds
 *                      texts as llama.cpp's test vectors do (models/ggml-vocab-*.gguf.inp): any
 *                      bytes, texts separated by "\n__ggml_vocab_test__\n", which may also
 *                      follow the last one (read as tests/test-tokenizer-0.cpp reads them)
 *   --vocab-info       print n_vocab, bos, eos, eot, add_bos, the end-of-generation ids (eog:
 *                      llama_vocab_is_eog) and the ids --special matches (special: control,
 *                      user-defined or unknown attributes), one "name values" line each
 *   -n N               greedy-generate N tokens (argmax of the raw logits, lowest id on ties);
 *                      prints one line: the prompt ids then the generated ids, space separated
 *   --stop-eog         stop early after an end-of-generation token (EOS, EOT, ...)
 *   --threads T        CPU threads (default 1)
 *   --kv f32|f16       KV cache type of K and V (default f32)
 *   --ctk T, --ctv T   the K (V) cache type alone, as llama.cpp's -ctk/-ctv: f32, f16, bf16,
 *                      q8_0, q5_1 or q4_0 (llama.cpp requires flash attention for a quantized V)
 *   --flash-attn on|off|auto
 *                      flash attention (default off: the reference numerics; a quantized V
 *                      needs on)
 *   --swa-full         full-size caches on sliding-window layers too (llama.cpp's --swa-full,
 *                      which it needs to roll a sliding layer back for speculation); with
 *                      --verbose its log states the caches' sizes
 *   --ctx C            context size (default: the model's training context, or more if needed)
 *   --logits-last FILE the logits after the last prompt token, one value per line (%.9g)
 *   --logits-all FILE  the logits after every prompt position, one line per position, values
 *                      separated by single spaces (%.9g)
 *                      The prompt is always decoded in one batch with logits requested at every
 *                      position, as the shared references were made: llama.cpp's last-position
 *                      logits differ by a few ulps when only the last one is requested.
 *   --dump-layers DIR  the hidden state after every layer for the prompt (see below)
 *   --dump-all         with --dump-layers: every prompt position, not only the last
 *   --bench-prefill N --bench-decode M --reps R
 *                      benchmark: R repetitions of (clear the cache; prefill an N-token prompt;
 *                      greedy-decode M tokens one at a time), printing per repetition
 *                          prefill rep=I tokens=N ms=T tok_s=S cpu_ms=C
 *                          decode rep=I tokens=M ms=T tok_s=S cpu_ms=C
 *                      (cpu_ms: CPU time of all the process's threads over the same interval)
 *                      No prompt is needed: the N prompt ids are BOS then a fixed pseudo-random
 *                      walk over the vocabulary. Only the llama_decode calls and the argmax are
 *                      timed; loading is not.
 *   --bench-warmup     before the timed repetitions, one untimed one: prefill the N-token prompt
 *                      and decode one token (first-touch costs: compute buffers, thread start)
 *   --bench-wait       read one line from stdin before each repetition (stop at end of input),
 *                      and print "ready" once the model is loaded and warmed up, so that a driver
 *                      can interleave the repetitions of two programs (bench/run.sh)
 *   --cpu-variant NAME load only ggml's CPU backend libggml-cpu-NAME.so (x64, haswell, zen4,
 *                      sapphirerapids, ...) instead of the best one for this CPU; results can
 *                      differ by an ulp or so between variants (AVX2 against AVX-512 paths)
 *   --ubatch N         llama.cpp's micro-batch size (default: the whole prompt at once). 1 runs
 *                      every matrix product one token at a time through ggml's vec_dot
 *                      kernels, the reference semantics; larger batches may take other paths
 *                      (llamafile's tinyBLAS, AMX) that round differently
 *   --no-repack        keep weights in their file layout (model param use_extra_bufts off):
 *                      without it llama.cpp may repack quantized matrices for AMX or for its
 *                      interleaved AVX kernels, and then its logits on q8_0/q4_0 files depend
 *                      on the CPU (by ~5e-3 on small synth models); with it they did not
 *                      differ between the sapphirerapids, zen4 and haswell variants
 *   --verbose          let llama.cpp log to stderr (errors are always shown)
 *
 * Layer dumps. For every layer N in [0, n_layer) the file DIR/layer_N.f32 holds llama.cpp's
 * "l_out-N" tensor: the residual stream after layer N (after the FFN's residual add), which is the
 * hidden state layer N + 1 receives. Raw little-endian float32, row-major [rows][n_embd]: rows is 1
 * (the last prompt position) by default, or n_prompt in position order with --dump-all. DIR/meta.txt
 * says "n_layer L\nn_embd D\nrows R\nn_prompt P\n". DIR is created if missing. Captured from the
 * prompt's llama_decode only (the whole prompt is one micro-batch), never from generation steps.
 *
 * Exit status: 0 success, 1 failure (a message on stderr says what failed), 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#ifndef LM_ORACLE_LIBDIR
#error "LM_ORACLE_LIBDIR must name the directory of libllama and the ggml CPU backends"
#endif

struct oracle_opts {
	const char *model;
	const char *prompt;
	const char *ids;
	bool no_bos;
	bool special;
	bool tokenize;
	const char *file;
	bool vocab_info;
	long n_gen;
	bool stop_eog;
	int threads;
	enum ggml_type type_k, type_v;
	enum llama_flash_attn_type flash_attn;
	bool swa_full;
	long ctx;
	const char *logits_last;
	const char *logits_all;
	const char *dump_dir;
	bool dump_all;
	long bench_prefill;
	long bench_decode;
	long reps;
	bool bench_warmup;
	bool bench_wait;
	const char *cpu_variant;
	bool no_repack;
	long ubatch;
	bool verbose;
};

/* What the eval callback captures: one buffer of [rows][n_embd] per layer. */
struct oracle_dump {
	bool active;
	bool all;
	int n_layer;
	int n_embd;
	int n_tokens;
	float **rows; /* (n_layer) x (rows x n_embd) */
	bool *seen;   /* (n_layer) */
	char err[256];
};

static bool oracle_verbose;

static void oracle_log(enum ggml_log_level level, const char *text, void *user_data)
{
	(void)user_data;
	static enum ggml_log_level last = GGML_LOG_LEVEL_NONE;
	if (level != GGML_LOG_LEVEL_CONT)
		last = level;
	if (oracle_verbose || last == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int oracle_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int oracle_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("lm_oracle: error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* A usage error: the message, then exit status 2. */
static int oracle_usage_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int oracle_usage_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("lm_oracle: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs(" (--help lists the options)\n", stderr);
	va_end(ap);
	return 2;
}

static void oracle_usage(FILE *out)
{
	fputs("usage: lm_oracle --model M.gguf (--prompt TEXT | --ids \"1 2 3\") [options]\n"
	      "       lm_oracle --model M.gguf --tokenize --file FILE [--no-bos] [--special]\n"
	      "       lm_oracle --model M.gguf --vocab-info\n"
	      "       lm_oracle --model M.gguf --bench-prefill N --bench-decode M --reps R "
	      "[options]\n"
	      "\n"
	      "  --prompt TEXT       prompt text (BOS added when the vocabulary asks, unless "
	      "--no-bos)\n"
	      "  --ids \"1 2 3\"       prompt token ids, used verbatim\n"
	      "  --no-bos            do not add BOS to --prompt or --file's texts\n"
	      "  --special           parse special-token text in the prompt (parse_special)\n"
	      "  --tokenize          print the prompt ids and exit\n"
	      "  --file FILE         with --tokenize: one line of ids per text of FILE (texts\n"
	      "                      separated by \"\\n__ggml_vocab_test__\\n\")\n"
	      "  --vocab-info        print the vocabulary's special and end-of-generation ids\n"
	      "  -n N                greedy-generate N tokens; prints prompt ids then generated "
	      "ids\n"
	      "  --stop-eog          stop after an end-of-generation token\n"
	      "  --threads T         CPU threads (default 1)\n"
	      "  --kv f32|f16        KV cache type of K and V (default f32)\n"
	      "  --ctk T, --ctv T    K (V) cache type: f32, f16, bf16, q8_0, q5_1 or q4_0\n"
	      "  --flash-attn M      on, off (default) or auto\n"
	      "  --swa-full          full-size caches on sliding-window layers\n"
	      "  --ctx C             context size (default: the model's, or more if needed)\n"
	      "  --logits-last FILE  logits after the last prompt token, one per line\n"
	      "  --logits-all FILE   logits after every prompt position, one line per position\n"
	      "  --dump-layers DIR   hidden state after each layer: DIR/layer_N.f32 (raw f32)\n"
	      "  --dump-all          dump every prompt position, not only the last\n"
	      "  --bench-prefill N   benchmark prefill of an N-token prompt\n"
	      "  --bench-decode M    benchmark greedy decode of M tokens after it\n"
	      "  --reps R            benchmark repetitions (default 3)\n"
	      "  --bench-warmup      one untimed prefill and decode step before the repetitions\n"
	      "  --bench-wait        print \"ready\", then read a line from stdin before each "
	      "repetition\n"
	      "  --cpu-variant NAME  use ggml's libggml-cpu-NAME.so (default: the best for this "
	      "CPU)\n"
	      "  --no-repack         no AMX/interleaved repacking of quantized weights\n"
	      "  --ubatch N          llama.cpp micro-batch size (1: one token at a time)\n"
	      "  --verbose           show llama.cpp's log\n",
	      out);
}

/* Parses a whole decimal number in [lo, hi]. */
static bool oracle_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* A cache type by name, of those llama.cpp's CPU backend stores. */
static bool oracle_cache_type(const char *name, enum ggml_type *out)
{
	static const struct {
		const char *name;
		enum ggml_type t;
	} types[] = {{"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
		     {"q8_0", GGML_TYPE_Q8_0}, {"q5_1", GGML_TYPE_Q5_1}, {"q4_0", GGML_TYPE_Q4_0}};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strcmp(name, types[i].name) == 0) {
			*out = types[i].t;
			return true;
		}
	return false;
}

/* One case per flag, past the ~150-line guide: the harness's options read best side by side. */
static int oracle_parse_args(int argc, char **argv, struct oracle_opts *o)
{
	enum {
		OPT_MODEL = 256,
		OPT_PROMPT,
		OPT_IDS,
		OPT_NO_BOS,
		OPT_TOKENIZE,
		OPT_SPECIAL,
		OPT_FILE,
		OPT_VOCAB_INFO,
		OPT_STOP_EOG,
		OPT_THREADS,
		OPT_KV,
		OPT_CTK,
		OPT_CTV,
		OPT_FLASH_ATTN,
		OPT_SWA_FULL,
		OPT_CTX,
		OPT_LOGITS_LAST,
		OPT_LOGITS_ALL,
		OPT_DUMP_LAYERS,
		OPT_DUMP_ALL,
		OPT_BENCH_PREFILL,
		OPT_BENCH_DECODE,
		OPT_REPS,
		OPT_BENCH_WARMUP,
		OPT_BENCH_WAIT,
		OPT_CPU_VARIANT,
		OPT_NO_REPACK,
		OPT_UBATCH,
		OPT_VERBOSE,
		OPT_HELP,
	};
	static const struct option longopts[] = {
		{"model", required_argument, NULL, OPT_MODEL},
		{"prompt", required_argument, NULL, OPT_PROMPT},
		{"ids", required_argument, NULL, OPT_IDS},
		{"no-bos", no_argument, NULL, OPT_NO_BOS},
		{"tokenize", no_argument, NULL, OPT_TOKENIZE},
		{"special", no_argument, NULL, OPT_SPECIAL},
		{"file", required_argument, NULL, OPT_FILE},
		{"vocab-info", no_argument, NULL, OPT_VOCAB_INFO},
		{"stop-eog", no_argument, NULL, OPT_STOP_EOG},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"kv", required_argument, NULL, OPT_KV},
		{"ctk", required_argument, NULL, OPT_CTK},
		{"ctv", required_argument, NULL, OPT_CTV},
		{"flash-attn", required_argument, NULL, OPT_FLASH_ATTN},
		{"swa-full", no_argument, NULL, OPT_SWA_FULL},
		{"ctx", required_argument, NULL, OPT_CTX},
		{"logits-last", required_argument, NULL, OPT_LOGITS_LAST},
		{"logits-all", required_argument, NULL, OPT_LOGITS_ALL},
		{"dump-layers", required_argument, NULL, OPT_DUMP_LAYERS},
		{"dump-all", no_argument, NULL, OPT_DUMP_ALL},
		{"bench-prefill", required_argument, NULL, OPT_BENCH_PREFILL},
		{"bench-decode", required_argument, NULL, OPT_BENCH_DECODE},
		{"reps", required_argument, NULL, OPT_REPS},
		{"bench-warmup", no_argument, NULL, OPT_BENCH_WARMUP},
		{"bench-wait", no_argument, NULL, OPT_BENCH_WAIT},
		{"cpu-variant", required_argument, NULL, OPT_CPU_VARIANT},
		{"no-repack", no_argument, NULL, OPT_NO_REPACK},
		{"ubatch", required_argument, NULL, OPT_UBATCH},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"help", no_argument, NULL, OPT_HELP},
		{NULL, 0, NULL, 0},
	};
	long v;
	int c;

	*o = (struct oracle_opts){.threads = 1,
				  .type_k = GGML_TYPE_F32,
				  .type_v = GGML_TYPE_F32,
				  .flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED,
				  .reps = 3};
	opterr = 0;
	while ((c = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_MODEL:
			o->model = optarg;
			break;
		case OPT_PROMPT:
			o->prompt = optarg;
			break;
		case OPT_IDS:
			o->ids = optarg;
			break;
		case OPT_NO_BOS:
			o->no_bos = true;
			break;
		case OPT_TOKENIZE:
			o->tokenize = true;
			break;
		case OPT_SPECIAL:
			o->special = true;
			break;
		case OPT_FILE:
			o->file = optarg;
			break;
		case OPT_VOCAB_INFO:
			o->vocab_info = true;
			break;
		case 'n':
			if (!oracle_parse_long(optarg, 0, 1L << 24, &o->n_gen))
				return oracle_usage_fail("-n: '%s' is not a count in [0, 16777216]",
							 optarg);
			break;
		case OPT_STOP_EOG:
			o->stop_eog = true;
			break;
		case OPT_THREADS:
			if (!oracle_parse_long(optarg, 1, 1024, &v))
				return oracle_usage_fail("--threads: '%s' is not in [1, 1024]",
							 optarg);
			o->threads = (int)v;
			break;
		case OPT_KV:
			if (strcmp(optarg, "f32") == 0)
				o->type_k = o->type_v = GGML_TYPE_F32;
			else if (strcmp(optarg, "f16") == 0)
				o->type_k = o->type_v = GGML_TYPE_F16;
			else
				return oracle_usage_fail("--kv: '%s' is not f32 or f16", optarg);
			break;
		case OPT_CTK:
		case OPT_CTV:
			if (!oracle_cache_type(optarg, c == OPT_CTK ? &o->type_k : &o->type_v))
				return oracle_usage_fail(
					"%s: '%s' is not f32, f16, bf16, q8_0, q5_1 "
					"or q4_0",
					c == OPT_CTK ? "--ctk" : "--ctv", optarg);
			break;
		case OPT_FLASH_ATTN:
			if (strcmp(optarg, "on") == 0)
				o->flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
			else if (strcmp(optarg, "off") == 0)
				o->flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
			else if (strcmp(optarg, "auto") == 0)
				o->flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
			else
				return oracle_usage_fail(
					"--flash-attn: '%s' is not on, off or auto", optarg);
			break;
		case OPT_SWA_FULL:
			o->swa_full = true;
			break;
		case OPT_CTX:
			if (!oracle_parse_long(optarg, 1, 1L << 24, &o->ctx))
				return oracle_usage_fail("--ctx: '%s' is not in [1, 16777216]",
							 optarg);
			break;
		case OPT_LOGITS_LAST:
			o->logits_last = optarg;
			break;
		case OPT_LOGITS_ALL:
			o->logits_all = optarg;
			break;
		case OPT_DUMP_LAYERS:
			o->dump_dir = optarg;
			break;
		case OPT_DUMP_ALL:
			o->dump_all = true;
			break;
		case OPT_BENCH_PREFILL:
			if (!oracle_parse_long(optarg, 1, 1L << 20, &o->bench_prefill))
				return oracle_usage_fail(
					"--bench-prefill: '%s' is not in [1, 1048576]", optarg);
			break;
		case OPT_BENCH_DECODE:
			if (!oracle_parse_long(optarg, 0, 1L << 20, &o->bench_decode))
				return oracle_usage_fail(
					"--bench-decode: '%s' is not in [0, 1048576]", optarg);
			break;
		case OPT_REPS:
			if (!oracle_parse_long(optarg, 1, 100000, &o->reps))
				return oracle_usage_fail("--reps: '%s' is not in [1, 100000]",
							 optarg);
			break;
		case OPT_BENCH_WARMUP:
			o->bench_warmup = true;
			break;
		case OPT_BENCH_WAIT:
			o->bench_wait = true;
			break;
		case OPT_CPU_VARIANT:
			if (strpbrk(optarg, "/.") != NULL || optarg[0] == '\0')
				return oracle_usage_fail(
					"--cpu-variant: '%s' is not a variant name", optarg);
			o->cpu_variant = optarg;
			break;
		case OPT_NO_REPACK:
			o->no_repack = true;
			break;
		case OPT_UBATCH:
			if (!oracle_parse_long(optarg, 1, 1 << 20, &v))
				return oracle_usage_fail("--ubatch: '%s' is not a positive number",
							 optarg);
			o->ubatch = v;
			break;
		case OPT_VERBOSE:
			o->verbose = true;
			break;
		case 'h':
		case OPT_HELP:
			oracle_usage(stdout);
			return -1;
		default:
			if (optopt != 0 && optopt < 256)
				return oracle_usage_fail("unknown option or missing value: -%c",
							 optopt);
			return oracle_usage_fail("unknown option or missing value: %s",
						 argv[optind - 1]);
		}
	}
	if (optind < argc)
		return oracle_usage_fail("unexpected argument '%s'", argv[optind]);
	if (o->model == NULL)
		return oracle_usage_fail("--model is required");
	bool bench = o->bench_prefill > 0 || o->bench_decode > 0;
	if ((o->bench_warmup || o->bench_wait) && !bench)
		return oracle_usage_fail("--bench-warmup and --bench-wait need --bench-prefill");
	if (bench) {
		if (o->bench_prefill == 0)
			return oracle_usage_fail("--bench-decode needs --bench-prefill");
		if (o->prompt != NULL || o->ids != NULL || o->tokenize || o->logits_last != NULL ||
		    o->logits_all != NULL || o->dump_dir != NULL || o->n_gen > 0)
			return oracle_usage_fail(
				"--bench-* takes no prompt, -n, logits or dump options");
		return 0;
	}
	if (o->vocab_info) {
		if (o->prompt != NULL || o->ids != NULL || o->tokenize || o->file != NULL)
			return oracle_usage_fail("--vocab-info takes no prompt and no --tokenize");
		return 0;
	}
	if (o->file != NULL) {
		if (!o->tokenize || o->prompt != NULL || o->ids != NULL)
			return oracle_usage_fail(
				"--file needs --tokenize and no --prompt or --ids");
		return 0;
	}
	if ((o->prompt != NULL) == (o->ids != NULL))
		return oracle_usage_fail("give exactly one of --prompt and --ids");
	if ((o->no_bos || o->special) && o->prompt == NULL)
		return oracle_usage_fail(
			"--no-bos and --special apply to --prompt only (--ids are used verbatim)");
	if (o->dump_all && o->dump_dir == NULL)
		return oracle_usage_fail("--dump-all needs --dump-layers DIR");
	return 0;
}

/* Parses "1 2 3" (spaces, tabs or commas between ids) into a fresh array. */
static int oracle_parse_ids(const char *s, int32_t n_vocab, llama_token **out, int *n_out)
{
	size_t cap = strlen(s) / 2 + 1, n = 0;
	llama_token *ids = malloc(cap * sizeof *ids);
	if (ids == NULL)
		return oracle_fail("out of memory");
	const char *p = s;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\n')
			p++;
		if (*p == '\0')
			break;
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno != 0 || v < 0 || v >= n_vocab) {
			free(ids);
			return oracle_fail(
				"--ids: '%.20s' at offset %zu is not a token id in [0, %d)", p,
				(size_t)(p - s), n_vocab);
		}
		ids[n++] = (llama_token)v;
		p = end;
	}
	if (n > INT_MAX) {
		free(ids);
		return oracle_fail("--ids: too many ids");
	}
	*out = ids;
	*n_out = (int)n;
	return 0;
}

/* text[0..len) through llama_tokenize (a NUL is a character like any other). */
static int oracle_tokenize(const struct llama_vocab *vocab, const char *text, size_t len,
			   bool add_bos, bool special, llama_token **out, int *n_out)
{
	if (len > INT32_MAX / 2)
		return oracle_fail("text too long to tokenize (%zu bytes)", len);
	int32_t cap = (int32_t)len + 8;
	llama_token *ids = malloc((size_t)cap * sizeof *ids);
	if (ids == NULL)
		return oracle_fail("out of memory");
	int32_t n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_bos, special);
	if (n < 0) {
		cap = -n;
		llama_token *grown = realloc(ids, (size_t)cap * sizeof *ids);
		if (grown == NULL) {
			free(ids);
			return oracle_fail("out of memory");
		}
		ids = grown;
		n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_bos, special);
	}
	if (n < 0) {
		free(ids);
		return oracle_fail("llama_tokenize failed (%d)", n);
	}
	*out = ids;
	*n_out = n;
	return 0;
}

static void oracle_print_ids(FILE *out, const llama_token *ids, int n, bool newline)
{
	for (int i = 0; i < n; i++)
		fprintf(out, i == 0 ? "%d" : " %d", ids[i]);
	if (newline)
		fputc('\n', out);
}

/* --tokenize --file: each text of the file on its own line of ids. */
static int oracle_tokenize_file(const struct llama_vocab *vocab, const struct oracle_opts *o)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	FILE *f = fopen(o->file, "rb");
	if (f == NULL)
		return oracle_fail("%s: cannot open: %s", o->file, strerror(errno));
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	size_t got;
	while (buf != NULL && (got = fread(buf + len, 1, cap - len, f)) > 0) {
		len += got;
		if (len == cap) {
			char *grown = cap < (1u << 30) ? realloc(buf, cap *= 2) : NULL;
			if (grown == NULL)
				free(buf);
			buf = grown;
		}
	}
	bool bad = ferror(f) != 0;
	fclose(f);
	if (buf == NULL)
		return oracle_fail("%s: out of memory (or over 1 GiB)", o->file);
	if (bad) {
		free(buf);
		return oracle_fail("%s: read failed", o->file);
	}
	int rc = 0;
	for (size_t off = 0; rc == 0 && off < len;) {
		const char *end = memmem(buf + off, len - off, sep, sizeof sep - 1);
		llama_token *ids = NULL;
		int n = 0;
		size_t n_text = end != NULL ? (size_t)(end - (buf + off)) : len - off;
		rc = oracle_tokenize(vocab, buf + off, n_text, !o->no_bos, o->special, &ids, &n);
		if (rc == 0)
			oracle_print_ids(stdout, ids, n, true);
		free(ids);
		off += n_text + (end != NULL ? sizeof sep - 1 : 0);
	}
	free(buf);
	return rc;
}

/* --vocab-info: what llama.cpp's vocabulary load decided. */
static void oracle_vocab_info(const struct llama_vocab *vocab)
{
	int32_t n = llama_vocab_n_tokens(vocab);
	printf("n_vocab %d\nbos %d\neos %d\neot %d\nadd_bos %d\neog", n, llama_vocab_bos(vocab),
	       llama_vocab_eos(vocab), llama_vocab_eot(vocab),
	       llama_vocab_get_add_bos(vocab) && llama_vocab_bos(vocab) >= 0 ? 1 : 0);
	for (llama_token id = 0; id < n; id++)
		if (llama_vocab_is_eog(vocab, id))
			printf(" %d", id);
	printf("\nspecial");
	const int special =
		LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN;
	for (llama_token id = 0; id < n; id++)
		if (llama_vocab_get_attr(vocab, id) & special)
			printf(" %d", id);
	printf("\n");
}

/* Index of the largest logit; the lowest index wins ties, like a strict '>' scan. */
static llama_token oracle_argmax(const float *logits, int32_t n_vocab)
{
	llama_token best = 0;
	for (int32_t i = 1; i < n_vocab; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* "l_out-12" -> 12. */
static bool oracle_layer_of(const char *name, int *layer)
{
	static const char prefix[] = "l_out-";
	if (strncmp(name, prefix, sizeof prefix - 1) != 0)
		return false;
	long v;
	if (!oracle_parse_long(name + sizeof prefix - 1, 0, INT_MAX, &v))
		return false;
	*layer = (int)v;
	return true;
}

/* The scheduler asks (ask == true) whether we want to see each graph node, then calls again
 * (ask == false) once a wanted node is computed. Returning false from the second call would abort
 * the graph, so errors are recorded and reported after llama_decode returns. */
static bool oracle_eval_cb(struct ggml_tensor *t, bool ask, void *user_data)
{
	struct oracle_dump *s = user_data;
	int layer;

	if (s == NULL || !s->active || !oracle_layer_of(t->name, &layer))
		return ask ? false : true;
	if (ask)
		return true;
	if (layer >= s->n_layer) {
		snprintf(s->err, sizeof s->err, "%s: layer index past n_layer %d", t->name,
			 s->n_layer);
		return true;
	}
	if (t->type != GGML_TYPE_F32 || t->ne[0] != s->n_embd || t->ne[2] != 1 || t->ne[3] != 1 ||
	    t->nb[0] != sizeof(float)) {
		snprintf(s->err, sizeof s->err,
			 "%s: expected contiguous f32 [%d, tokens], got type %d ne [%lld, %lld, "
			 "%lld, %lld]",
			 t->name, s->n_embd, (int)t->type, (long long)t->ne[0], (long long)t->ne[1],
			 (long long)t->ne[2], (long long)t->ne[3]);
		return true;
	}
	int64_t rows = t->ne[1];
	size_t row_bytes = (size_t)s->n_embd * sizeof(float);
	if (s->all) {
		if (rows != s->n_tokens) {
			snprintf(s->err, sizeof s->err,
				 "%s: %lld rows, expected %d (one per token)", t->name,
				 (long long)rows, s->n_tokens);
			return true;
		}
		for (int64_t r = 0; r < rows; r++)
			ggml_backend_tensor_get(t, s->rows[layer] + r * s->n_embd,
						(size_t)r * t->nb[1], row_bytes);
	} else {
		/* Earlier layers carry every token; the last one only the output rows. Either way
		 * the last row is the last prompt position. */
		ggml_backend_tensor_get(t, s->rows[layer], (size_t)(rows - 1) * t->nb[1],
					row_bytes);
	}
	s->seen[layer] = true;
	return true;
}

static void oracle_dump_fini(struct oracle_dump *s)
{
	if (s->rows != NULL)
		for (int i = 0; i < s->n_layer; i++)
			free(s->rows[i]);
	free(s->rows);
	free(s->seen);
	memset(s, 0, sizeof *s);
}

static int oracle_dump_init(struct oracle_dump *s, int n_layer, int n_embd, int n_tokens, bool all)
{
	memset(s, 0, sizeof *s);
	s->n_layer = n_layer;
	s->n_embd = n_embd;
	s->n_tokens = n_tokens;
	s->all = all;
	s->rows = calloc((size_t)n_layer, sizeof *s->rows);
	s->seen = calloc((size_t)n_layer, sizeof *s->seen);
	if (s->rows == NULL || s->seen == NULL)
		goto oom;
	size_t n = (size_t)(all ? n_tokens : 1) * (size_t)n_embd;
	for (int i = 0; i < n_layer; i++)
		if ((s->rows[i] = calloc(n, sizeof(float))) == NULL)
			goto oom;
	return 0;
oom:
	oracle_dump_fini(s);
	return oracle_fail("out of memory for layer dumps");
}

static int oracle_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (f == NULL)
		return oracle_fail("%s: cannot create: %s", path, strerror(errno));
	size_t w = fwrite(data, 1, len, f);
	if (fclose(f) != 0 || w != len)
		return oracle_fail("%s: write failed: %s", path, strerror(errno));
	return 0;
}

static int oracle_dump_write(const struct oracle_dump *s, const char *dir, int n_prompt)
{
	char path[4096];
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return oracle_fail("%s: cannot create directory: %s", dir, strerror(errno));
	if (s->err[0] != '\0')
		return oracle_fail("--dump-layers: %s", s->err);
	int rows = s->all ? s->n_tokens : 1;
	for (int i = 0; i < s->n_layer; i++) {
		if (!s->seen[i])
			return oracle_fail("--dump-layers: llama.cpp computed no l_out-%d tensor",
					   i);
		snprintf(path, sizeof path, "%s/layer_%d.f32", dir, i);
		/* The host is little-endian (x86-64), so the floats are written as they are. */
		if (oracle_write_file(path, s->rows[i],
				      (size_t)rows * (size_t)s->n_embd * sizeof(float)) != 0)
			return 1;
	}
	char meta[256];
	int len = snprintf(meta, sizeof meta, "n_layer %d\nn_embd %d\nrows %d\nn_prompt %d\n",
			   s->n_layer, s->n_embd, rows, n_prompt);
	snprintf(path, sizeof path, "%s/meta.txt", dir);
	return oracle_write_file(path, meta, (size_t)len);
}

static int oracle_write_logits(const char *path, const float *const *rows, int n_rows,
			       int32_t n_vocab, bool one_per_line)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return oracle_fail("%s: cannot create: %s", path, strerror(errno));
	for (int r = 0; r < n_rows; r++)
		for (int32_t i = 0; i < n_vocab; i++)
			fprintf(f, "%.9g%c", (double)rows[r][i],
				one_per_line || i == n_vocab - 1 ? '\n' : ' ');
	if (ferror(f) != 0 || fclose(f) != 0)
		return oracle_fail("%s: write failed", path);
	return 0;
}

/* Decodes ids[0..n) at positions pos0.. in one batch, asking for logits where `all` says, or at
 * the last token only. */
static int oracle_decode(struct llama_context *ctx, const llama_token *ids, int n, int pos0,
			 bool all)
{
	struct llama_batch b = llama_batch_init(n, 0, 1);
	for (int i = 0; i < n; i++) {
		b.token[i] = ids[i];
		b.pos[i] = pos0 + i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = (int8_t)(all || i == n - 1);
	}
	b.n_tokens = n;
	int32_t rc = llama_decode(ctx, b);
	llama_batch_free(b);
	if (rc != 0)
		return oracle_fail("llama_decode of %d tokens at position %d failed (%d)", n, pos0,
				   rc);
	return 0;
}

static double oracle_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of every thread of the process: with one thread, the time the work took without
 * the waits a loaded machine adds. */
static double oracle_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int oracle_bench(struct llama_context *ctx, const struct llama_vocab *vocab,
			const struct oracle_opts *o)
{
	int32_t n_vocab = llama_vocab_n_tokens(vocab);
	int n = (int)o->bench_prefill;
	llama_token *ids = malloc((size_t)n * sizeof *ids);
	if (ids == NULL)
		return oracle_fail("out of memory");
	llama_token bos = llama_vocab_bos(vocab);
	uint64_t x = 0x9e3779b97f4a7c15u;
	for (int i = 0; i < n; i++) {
		x = x * 6364136223846793005u + 1442695040888963407u;
		ids[i] = (llama_token)((x >> 33) % (uint64_t)n_vocab);
	}
	if (bos >= 0)
		ids[0] = bos;

	int rc = 0;
	if (o->bench_warmup) {
		llama_memory_clear(llama_get_memory(ctx), true);
		rc = oracle_decode(ctx, ids, n, 0, false);
		if (rc == 0 && o->bench_decode > 0) {
			llama_token tok = oracle_argmax(llama_get_logits_ith(ctx, -1), n_vocab);
			rc = oracle_decode(ctx, &tok, 1, n, false);
		}
	}
	if (rc == 0 && o->bench_wait) {
		printf("ready\n");
		fflush(stdout);
	}
	char line[256];
	for (long rep = 0; rep < o->reps && rc == 0; rep++) {
		if (o->bench_wait && fgets(line, sizeof line, stdin) == NULL)
			break;
		llama_memory_clear(llama_get_memory(ctx), true);
		double t0 = oracle_now(), c0 = oracle_cpu();
		if ((rc = oracle_decode(ctx, ids, n, 0, false)) != 0)
			break;
		double t1 = oracle_now(), c1 = oracle_cpu();
		printf("prefill rep=%ld tokens=%d ms=%.3f tok_s=%.2f cpu_ms=%.3f\n", rep, n,
		       (t1 - t0) * 1e3, n / (t1 - t0), (c1 - c0) * 1e3);
		fflush(stdout);
		if (o->bench_decode == 0)
			continue;
		llama_token tok = oracle_argmax(llama_get_logits_ith(ctx, -1), n_vocab);
		t0 = oracle_now();
		c0 = oracle_cpu();
		for (long k = 0; k < o->bench_decode && rc == 0; k++) {
			rc = oracle_decode(ctx, &tok, 1, n + (int)k, false);
			if (rc == 0)
				tok = oracle_argmax(llama_get_logits_ith(ctx, -1), n_vocab);
		}
		t1 = oracle_now();
		c1 = oracle_cpu();
		if (rc == 0)
			printf("decode rep=%ld tokens=%ld ms=%.3f tok_s=%.2f cpu_ms=%.3f\n", rep,
			       o->bench_decode, (t1 - t0) * 1e3,
			       (double)o->bench_decode / (t1 - t0), (c1 - c0) * 1e3);
		fflush(stdout);
	}
	free(ids);
	return rc;
}

/* Prompt, logits, layer dumps and greedy generation. */
static int oracle_run(struct llama_context *ctx, const struct llama_vocab *vocab,
		      struct oracle_dump *dump, const struct oracle_opts *o, llama_token *ids,
		      int n_prompt, int n_layer)
{
	int32_t n_vocab = llama_vocab_n_tokens(vocab);
	int rc;

	if (n_prompt == 0)
		return oracle_fail("the prompt has no tokens (an empty --prompt with --no-bos, or "
				   "empty --ids): there is nothing to evaluate");
	if (o->dump_dir != NULL) {
		if ((rc = oracle_dump_init(dump, n_layer, llama_model_n_embd(llama_get_model(ctx)),
					   n_prompt, o->dump_all)) != 0)
			return rc;
		dump->active = true;
	}
	/* Logits at every prompt position, always: llama.cpp's last-position logits move by a few
	 * ulps with the number of outputs asked for (the output matmuls take another kernel path),
	 * and the shared references were made asking for all of them. */
	rc = oracle_decode(ctx, ids, n_prompt, 0, true);
	dump->active = false;
	if (rc != 0)
		return rc;
	if (o->dump_dir != NULL && (rc = oracle_dump_write(dump, o->dump_dir, n_prompt)) != 0)
		return rc;

	const float *last = llama_get_logits_ith(ctx, n_prompt - 1);
	if (last == NULL)
		return oracle_fail("llama.cpp returned no logits for the last prompt token");
	if (o->logits_last != NULL &&
	    (rc = oracle_write_logits(o->logits_last, &last, 1, n_vocab, true)) != 0)
		return rc;
	if (o->logits_all != NULL) {
		const float **rows = malloc((size_t)n_prompt * sizeof *rows);
		if (rows == NULL)
			return oracle_fail("out of memory");
		for (int i = 0; i < n_prompt; i++)
			if ((rows[i] = llama_get_logits_ith(ctx, i)) == NULL) {
				free(rows);
				return oracle_fail("llama.cpp returned no logits for position %d",
						   i);
			}
		rc = oracle_write_logits(o->logits_all, rows, n_prompt, n_vocab, false);
		free(rows);
		if (rc != 0)
			return rc;
	}

	oracle_print_ids(stdout, ids, n_prompt, false);
	llama_token tok = oracle_argmax(last, n_vocab);
	for (long k = 0; k < o->n_gen; k++) {
		printf(n_prompt + k == 0 ? "%d" : " %d", tok);
		if (o->stop_eog && llama_vocab_is_eog(vocab, tok))
			break;
		if (k + 1 == o->n_gen)
			break;
		if ((rc = oracle_decode(ctx, &tok, 1, n_prompt + (int)k, false)) != 0) {
			fputc('\n', stdout);
			return rc;
		}
		tok = oracle_argmax(llama_get_logits_ith(ctx, -1), n_vocab);
	}
	fputc('\n', stdout);
	return 0;
}

int main(int argc, char **argv)
{
	struct oracle_opts o;
	struct oracle_dump dump = {0};
	struct llama_model *model = NULL;
	struct llama_context *ctx = NULL;
	llama_token *ids = NULL;
	int n_prompt = 0, rc;

	rc = oracle_parse_args(argc, argv, &o);
	if (rc != 0)
		return rc < 0 ? 0 : 2;
	oracle_verbose = o.verbose;
	llama_log_set(oracle_log, NULL);

	/* The CPU backend is a set of per-microarchitecture libraries beside libllama; load the
	 * best one for this CPU from the pinned install, not from the executable's directory. */
	if (o.cpu_variant != NULL) {
		char path[4096];
		snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", LM_ORACLE_LIBDIR,
			 o.cpu_variant);
		if (ggml_backend_load(path) == NULL)
			return oracle_fail("--cpu-variant %s: %s is missing or needs CPU features "
					   "this machine lacks",
					   o.cpu_variant, path);
	} else {
		ggml_backend_load_all_from_path(LM_ORACLE_LIBDIR);
	}
	if (ggml_backend_dev_count() == 0) {
		return oracle_fail("no ggml backend could be loaded from %s (run "
				   "deploy/oracle-setup.sh)",
				   LM_ORACLE_LIBDIR);
	}
	llama_backend_init();

	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	mp.vocab_only = o.tokenize || o.vocab_info;
	mp.use_extra_bufts = !o.no_repack;
	model = llama_model_load_from_file(o.model, mp);
	if (model == NULL) {
		rc = oracle_fail("%s: llama.cpp could not load the model (run with --verbose for "
				 "its log)",
				 o.model);
		goto out;
	}
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	int32_t n_vocab = llama_vocab_n_tokens(vocab);

	if (o.vocab_info) {
		oracle_vocab_info(vocab);
		goto out;
	}
	if (o.file != NULL) {
		rc = oracle_tokenize_file(vocab, &o);
		goto out;
	}
	if (o.prompt != NULL)
		rc = oracle_tokenize(vocab, o.prompt, strlen(o.prompt), !o.no_bos, o.special, &ids,
				     &n_prompt);
	else if (o.ids != NULL)
		rc = oracle_parse_ids(o.ids, n_vocab, &ids, &n_prompt);
	if (rc != 0)
		goto out;
	if (o.tokenize) {
		oracle_print_ids(stdout, ids, n_prompt, true);
		goto out;
	}

	long need = o.bench_prefill > 0 ? o.bench_prefill + o.bench_decode : n_prompt + o.n_gen;
	long n_ctx = o.ctx > 0 ? o.ctx : llama_model_n_ctx_train(model);
	if (n_ctx < need) {
		if (o.ctx > 0) {
			rc = oracle_fail("--ctx %ld is smaller than the %ld positions needed",
					 o.ctx, need);
			goto out;
		}
		n_ctx = need;
	}
	long n_batch = o.bench_prefill > 0 ? o.bench_prefill : n_prompt;
	if (n_batch < 512)
		n_batch = 512;

	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)n_ctx;
	/* The whole prompt is one micro-batch, so a layer dump sees every position at once. */
	cp.n_batch = (uint32_t)n_batch;
	cp.n_ubatch = (uint32_t)n_batch;
	if (o.ubatch > 0) {
		if (o.dump_dir != NULL) {
			rc = oracle_usage_fail("--ubatch cannot be combined with --dump-layers");
			goto out;
		}
		cp.n_ubatch = (uint32_t)o.ubatch;
	}
	cp.n_seq_max = 1;
	cp.n_threads = o.threads;
	cp.n_threads_batch = o.threads;
	cp.flash_attn_type = o.flash_attn;
	cp.type_k = o.type_k;
	cp.type_v = o.type_v;
	cp.swa_full = o.swa_full;
	cp.no_perf = true;
	if (o.dump_dir != NULL) {
		cp.cb_eval = oracle_eval_cb;
		cp.cb_eval_user_data = &dump;
	}
	ctx = llama_init_from_model(model, cp);
	if (ctx == NULL) {
		rc = oracle_fail("%s: llama.cpp could not create a context of %ld positions",
				 o.model, n_ctx);
		goto out;
	}

	if (o.bench_prefill > 0)
		rc = oracle_bench(ctx, vocab, &o);
	else
		rc = oracle_run(ctx, vocab, &dump, &o, ids, n_prompt, llama_model_n_layer(model));
	if (fflush(stdout) != 0 && rc == 0)
		rc = oracle_fail("writing to stdout failed");
out:
	oracle_dump_fini(&dump);
	free(ids);
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	return rc == 0 ? 0 : 1;
}

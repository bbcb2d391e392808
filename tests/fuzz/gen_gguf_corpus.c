/* gen_gguf_corpus.c — the seed corpus of fuzz_gguf: the GGUF images of
 * tests/support/gguf_samples.h, one file each, named after the sample, and a tiny model of
 * every architecture beside llama, written by the synth writer (arch_<name>), so that the
 * fuzzer starts inside each kind of layer: sliding and global, recurrent, gated attention,
 * experts with and without a shared FFN, biases and sinks.
 *
 *     gen_gguf_corpus DIR          writes DIR/<sample> for every sample
 *     gen_gguf_corpus --check DIR  checks that DIR/<sample> holds exactly those bytes, that the
 *                                  reader accepts the valid samples and refuses the damaged ones
 *                                  with a message (meson test runs this on the committed corpus)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "common/format/synth.h"
#include "tests/support/corpus_file.h"
#include "tests/support/gguf_samples.h"

#define STALE                                                                        \
	"the samples or the GGUF writer changed, and the corpus needs regenerating " \
	"(gen_gguf_corpus tests/fuzz/corpus/gguf)"

/* The reader accepts valid samples and refuses damaged ones with a message. */
static int check_verdict(int k, const uint8_t *p, size_t n)
{
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	int rc = gguf_open_mem(p, n, &f, &d);
	gguf_close(f);
	if (gs_valid(k) && rc != 0) {
		fprintf(stderr, "gen_gguf_corpus: sample %s is refused: %s\n", gs_names[k], d.msg);
		return 1;
	}
	if (!gs_valid(k) && (rc == 0 || d.msg[0] == '\0')) {
		fprintf(stderr, "gen_gguf_corpus: damaged sample %s is %s\n", gs_names[k],
			rc == 0 ? "accepted" : "refused without a message");
		return 1;
	}
	return 0;
}

/* Two layers of dim 16 in f16 with a tied head: some 20 KB each. Every other layer of gemma,
 * gpt-oss and qwen35 is global (attends), so each seed has both kinds. */
static const struct arch_seed {
	const char *name, *arch;
	uint32_t experts, window;
} arch_seeds[] = {
	{"arch_qwen2", "qwen2", 0, 0},       {"arch_qwen3", "qwen3", 0, 0},
	{"arch_qwen3moe", "qwen3moe", 4, 0}, {"arch_gemma3", "gemma3", 0, 8},
	{"arch_gemma4", "gemma4", 0, 8},     {"arch_gemma4moe", "gemma4", 4, 8},
	{"arch_qwen35", "qwen35", 0, 0},     {"arch_qwen35moe", "qwen35moe", 4, 0},
	{"arch_gptoss", "gpt-oss", 4, 8},
};
#define N_ARCH_SEEDS (int)(sizeof arch_seeds / sizeof arch_seeds[0])

/* The bytes of arch seed k: synth_write to a temporary file, read back. */
static int arch_seed_make(int k, uint8_t **img, size_t *len, lm_diag *d)
{
	const struct arch_seed *a = &arch_seeds[k];
	const char *tmp = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof path, "%s/gen_gguf_corpus.%d.%s", tmp != NULL ? tmp : "/tmp",
		 (int)getpid(), a->name);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = a->arch;
	o.dim = 16;
	o.layers = 2;
	o.heads = 2;
	o.kv_heads = 1;
	o.ffn = 16;
	o.vocab = SYNTH_VOCAB_MIN;
	o.ctx = 64;
	o.type = LM_F16;
	o.tied = true;
	o.experts = a->experts;
	o.experts_used = a->experts / 2;
	o.window = a->window;
	if (a->window > 0)
		o.swa_period = 2;
	if (strncmp(a->arch, "qwen35", 6) == 0)
		o.full_attn_every = 2;
	int rc = synth_write(&o, NULL, d);
	if (rc != 0)
		return rc;
	FILE *f = fopen(path, "rb");
	rc = LM_EIO;
	if (f != NULL && fseek(f, 0, SEEK_END) == 0) {
		long n = ftell(f);
		*img = n > 0 ? malloc((size_t)n) : NULL;
		if (*img != NULL && fseek(f, 0, SEEK_SET) == 0 &&
		    fread(*img, 1, (size_t)n, f) == (size_t)n) {
			*len = (size_t)n;
			rc = 0;
		}
	}
	if (f != NULL)
		fclose(f);
	unlink(path);
	if (rc != 0) {
		free(*img);
		*img = NULL;
		return lm_fail(d, rc, "cannot read back %s", path);
	}
	return 0;
}

int main(int argc, char **argv)
{
	bool check = argc == 3 && strcmp(argv[1], "--check") == 0;
	if (argc != 2 && !check) {
		fprintf(stderr, "usage: gen_gguf_corpus [--check] DIR\n");
		return 2;
	}
	const char *dir = argv[argc - 1];
	int failed = 0;
	size_t total = 0;
	for (int k = 0; k < GS_COUNT + N_ARCH_SEEDS; k++) {
		bool arch = k >= GS_COUNT;
		const char *name = arch ? arch_seeds[k - GS_COUNT].name : gs_names[k];
		char path[4096];
		lm_diag d = {{0}};
		uint8_t *img = NULL;
		size_t len = 0;
		if ((arch ? arch_seed_make(k - GS_COUNT, &img, &len, &d)
			  : gs_make(k, &img, &len, &d)) != 0) {
			fprintf(stderr, "gen_gguf_corpus: sample %s: %s\n", name, d.msg);
			failed = 1;
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dir, name);
		if (!arch)
			failed |= check_verdict(k, img, len);
		failed |= corpus_file("gen_gguf_corpus", check, path, img, len, STALE);
		total += len;
		free(img);
	}
	if (!failed)
		printf("%s %d samples (%zu bytes) in %s\n", check ? "checked" : "wrote",
		       GS_COUNT + N_ARCH_SEEDS, total, dir);
	return failed;
}

/* bench_matmul.c — weight bandwidth of the CPU backend's matmul, per weight type.
 *
 *     bench_matmul [--threads N] [--tokens N] [--rows R] [--cols C] [--mib M] [--secs S]
 *                  [--huge] [--scalar | --kernels generic|avx2|avx512|amx] [type ...]
 *
 * For each type (default: f32 f16 bf16 q8_0 q4_0 q4_K q6_K) it builds a 2048 x 5632 weight (an
 * FFN up projection of a 1B model; --cols sets the input width, --rows the output width) and
 * enough copies of it to cover --mib MiB (default 1024,
 * well past most last-level caches), then multiplies a batch of --tokens activations by each
 * copy in turn for --secs seconds, and prints the weight bytes streamed per second. A plain read
 * of the same bytes (AVX2 loads where the CPU has them) gives the machine's read bandwidth for
 * comparison. --rows 256 --mib 0 keeps one small weight in L2 to see the kernels' compute speed
 * apart from memory. Read and matmul passes alternate and both are summarised by median and
 * best, since on a shared machine single timings swing. --huge puts the weights in memory
 * advised for transparent huge pages (MADV_HUGEPAGE), as the model loader does; without it they
 * are in 4 KiB pages. Timings only: nothing is asserted.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/dtype.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "common/format/quant.h"

#define MAX_PASSES 256

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	double s[MAX_PASSES];
	memcpy(s, v, (size_t)n * sizeof *v);
	qsort(s, (size_t)n, sizeof *s, cmp_double);
	return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double best(const double *v, int n)
{
	double m = 0;
	for (int i = 0; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

static uint64_t rng = 88172645463325252u;

static float rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
	return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		return read_avx2(p, n);
#endif
	uint64_t acc = 0;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		acc ^= v;
	}
	return acc;
}

/* One weight type: the copies built, bound and measured. 0, or 1 when out of memory. */
static int bench_type(struct lm_backend *b, const char *name, int NE0, int NE1, double mib,
		      int huge, double secs, const float *x, float *y, float *row, int tokens)
{
	int t = lm_dtype_parse(name);
	uint64_t rb = 0;
	if (t < 0 || lm_dtype_row_bytes((uint32_t)t, NE0, &rb) < 0) {
		fprintf(stderr, "unknown type %s\n", name);
		return 0;
	}
	const size_t mat = (size_t)rb * NE1;
	size_t copies = (size_t)(mib * 1048576.0 / (double)mat);
	if (copies < 1)
		copies = 1;
	/* Huge pages need 2 MiB alignment. */
	const size_t align = huge ? (size_t)2 << 20 : 64;
	const size_t alloc = (mat * copies + align - 1) / align * align;
	uint8_t *buf = aligned_alloc(align, alloc);
	if (buf == NULL) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	if (huge && madvise(buf, alloc, MADV_HUGEPAGE) != 0)
		fprintf(stderr, "madvise(MADV_HUGEPAGE) failed: 4 KiB pages\n");
	for (int r = 0; r < NE1; r++) {
		for (int i = 0; i < NE0; i++)
			row[i] = rnd() * 0.05f;
		lm_quantize_row((enum lm_dtype)t, row, buf + (size_t)r * rb, NE0);
	}
	for (size_t c = 1; c < copies; c++)
		memcpy(buf + c * mat, buf, mat);

	/* Each copy bound to the backend as the model loader binds a weight (the AVX-512
	 * set rearranges quantized weights into its panels in place). */
	struct lm_weight *ws = calloc(copies, sizeof *ws);
	if (ws == NULL) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	int rc = 0;
	for (size_t c = 0; c < copies && rc == 0; c++) {
		ws[c] = (struct lm_weight){
			.type = (enum lm_dtype)t, .ne0 = NE0, .ne1 = NE1, .row_bytes = rb};
		rc = lm_backend_weight_init(b, &ws[c], buf + c * mat);
	}
	/* Interleaved passes of a plain read and of the matmul over the same bytes; each
	 * pass sweeps every copy (repeated to at least 2 ms), and the medians and bests
	 * are reported: the machine is shared, so single timings swing. */
	double rd[MAX_PASSES], mm[MAX_PASSES], mc[MAX_PASSES];
	int passes = 0;
	uint64_t sink = 0;
	const double start = lm_now_s();
	while (rc == 0 && passes < MAX_PASSES && (passes < 5 || lm_now_s() - start < secs)) {
		double bytes = 0, t0 = lm_now_s();
		while (lm_now_s() - t0 < 0.002 || bytes == 0) {
			sink ^= read_plain(buf, mat * copies);
			bytes += (double)(mat * copies);
		}
		rd[passes] = bytes / (lm_now_s() - t0) / 1e9;
		bytes = 0;
		t0 = lm_now_s();
		const double c0 = lm_cpu_s();
		while (rc == 0 && (lm_now_s() - t0 < 0.002 || bytes == 0)) {
			for (size_t c = 0; c < copies && rc == 0; c++)
				rc = b->iface->matmul(b->ctx, y, &ws[c], x, tokens);
			bytes += (double)(mat * copies);
		}
		mm[passes] = bytes / (lm_now_s() - t0) / 1e9;
		/* Per second of CPU time the threads actually got. */
		mc[passes++] = bytes / ((lm_cpu_s() - c0) / lm_backend_cpu_threads(b)) / 1e9;
	}
	if (rc < 0) {
		printf("%-5s unsupported (%d)\n", name, rc);
	} else {
		const double mm_med = median(mm, passes), rd_med = median(rd, passes);
		printf("%-5s matmul %6.3f GB/s median, %6.3f best (%6.3f per CPU s)   "
		       "read %6.2f median, %6.2f best   matmul/read %3.0f%% of medians, "
		       "%3.0f%% of bests  (%d passes)%s\n",
		       name, mm_med, best(mm, passes), median(mc, passes), rd_med, best(rd, passes),
		       100 * mm_med / rd_med, 100 * best(mm, passes) / best(rd, passes), passes,
		       (sink & 1) && y[0] != y[0] ? " nan" : "");
	}
	for (size_t c = 0; c < copies; c++)
		lm_backend_weight_fini(b, &ws[c]);
	free(ws);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int threads = 1, tokens = 1, scalar = 0, NE1 = 5632, NE0 = 2048, huge = 0;
	const char *kernels = NULL;
	double mib = 1024, secs = 2.0;
	const char *types[16];
	int n_types = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
			tokens = atoi(argv[++i]);
		else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
			NE1 = atoi(argv[++i]);
		else if (strcmp(argv[i], "--cols") == 0 && i + 1 < argc)
			NE0 = atoi(argv[++i]);
		else if (strcmp(argv[i], "--huge") == 0)
			huge = 1;
		else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
			mib = atof(argv[++i]);
		else if (strcmp(argv[i], "--secs") == 0 && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (strcmp(argv[i], "--scalar") == 0)
			scalar = 1;
		else if (strcmp(argv[i], "--kernels") == 0 && i + 1 < argc)
			kernels = argv[++i];
		else if (argv[i][0] != '-' && n_types < 16)
			types[n_types++] = argv[i];
		else {
			fprintf(stderr,
				"usage: %s [--threads N] [--tokens N] [--rows R] [--cols C] "
				"[--mib M] [--secs S] [--huge] [--scalar | --kernels "
				"generic|avx2|avx512|amx] [type ...]\n",
				argv[0]);
			return 2;
		}
	}
	if (n_types == 0) {
		static const char *def[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q6_K"};
		for (int i = 0; i < 7; i++)
			types[n_types++] = def[i];
	}

	struct lm_backend b;
	struct lm_backend_opts o = {.n_threads = threads, .force_scalar = scalar};
	if (lm_backend_cpu_init_kernels(&b, &o, kernels) < 0) {
		fprintf(stderr, "cpu backend init failed\n");
		return 1;
	}
	if (NE0 <= 0 || NE0 % 256 != 0 || NE1 <= 0) {
		fprintf(stderr, "--cols must be a positive multiple of 256, --rows positive\n");
		return 2;
	}
	printf("kernels %s, %d thread(s), %d token(s), %dx%d weights, %.0f MiB streamed, %s "
	       "pages\n",
	       lm_backend_cpu_kernels(&b), lm_backend_cpu_threads(&b), tokens, NE1, NE0, mib,
	       huge ? "huge" : "4 KiB");

	float *x = malloc((size_t)tokens * NE0 * sizeof(float));
	float *y = malloc((size_t)tokens * NE1 * sizeof(float));
	float *row = malloc((size_t)NE0 * sizeof(float));
	for (size_t i = 0; i < (size_t)tokens * NE0; i++)
		x[i] = rnd();

	for (int ti = 0; ti < n_types; ti++)
		if (bench_type(&b, types[ti], NE0, NE1, mib, huge, secs, x, y, row, tokens) != 0)
			return 1;
	free(x);
	free(y);
	free(row);
	lm_backend_fini(&b);
	return 0;
}

/* bench_membw.c — the machine's memory read bandwidth, the bound on decode speed.
 *
 *   bench_membw [--mib M] [--reps R] [--threads "1 2"] [--pages huge|4k] [--bench-wait]
 *
 * Allocates an M MiB buffer (default 1024), writes it once (so every page is resident), then
 * R times (default 7) for each thread count in turn (interleaved: 1, 2, 1, 2, ...) reads the
 * whole buffer with that many threads, each streaming its own contiguous share with the widest
 * loads the CPU has (64-byte vectors: AVX-512, AVX2 or SSE2 picked at run time on x86-64, as the
 * matmul kernels pick theirs) into independent accumulators. The buffer is anonymous memory
 * advised for transparent huge pages (--pages huge, the default), as a model's weights are once
 * loaded (gguf_map reads them into such memory), or in 4 KiB pages (--pages 4k), as a lazily
 * mapped file is; where the system has no huge pages both are 4 KiB pages. On a VM the two
 * differ (a 2-vCPU Sapphire Rapids VM: about 16 against 14.5 GB/s at 1 thread), so the decode
 * efficiency compares weights with the memory they live in. A repetition's time runs from the
 * release of the threads to the last one finishing. Prints one line per repetition
 *     read threads=T rep=I gb_s=G
 * and one summary line per thread count
 *     median threads=T gb_s=G min=G max=G
 * GB/s is 1e9 bytes per second.
 *
 * --bench-wait prints "ready" once the buffer is resident, then reads one line from stdin before
 * each repetition (stopping at end of input) and ends each repetition with "end rep=I": bench/
 * run.sh measures the bandwidth this way between the repetitions of the programs it compares,
 * under the same load.
 *
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/base/clock.h"

#define MEMBW_MAX_THREADS 64

/* 64 bytes as one value; the compiler splits it into what the target's registers hold. */
typedef uint64_t membw_v8 __attribute__((vector_size(64)));

/* One clone per instruction set, chosen when the program loads (GCC's target_clones). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MEMBW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MEMBW_CLONES
#endif

struct membw_thread {
	pthread_t thread;
	const membw_v8 *data;
	size_t n; /* vectors in this thread's share */
	pthread_barrier_t *start;
	uint64_t sum; /* keeps the loads from being optimized away */
};

static int membw_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Four independent accumulators keep enough loads in flight to saturate the memory bus. The
 * sum is reduced here, so no vector crosses a function boundary (whose ABI differs by clone). */
MEMBW_CLONES static uint64_t membw_read(const membw_v8 *p, size_t n)
{
	membw_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		a0 += p[i];
		a1 += p[i + 1];
		a2 += p[i + 2];
		a3 += p[i + 3];
	}
	for (; i < n; i++)
		a0 += p[i];
	a0 += a1 + a2 + a3;
	uint64_t s = 0;
	for (int k = 0; k < 8; k++)
		s += a0[k];
	return s;
}

static void *membw_main(void *arg)
{
	struct membw_thread *t = arg;
	pthread_barrier_wait(t->start);
	t->sum = membw_read(t->data, t->n);
	return NULL;
}

/* Reads the buffer once with n_threads threads (the caller is one of them); seconds taken. */
static int membw_pass(const membw_v8 *buf, size_t n_vec, int n_threads, double *secs,
		      uint64_t *sink)
{
	struct membw_thread t[MEMBW_MAX_THREADS];
	pthread_barrier_t start;
	if (pthread_barrier_init(&start, NULL, (unsigned)n_threads) != 0)
		return -1;
	size_t share = n_vec / (size_t)n_threads;
	for (int i = 0; i < n_threads; i++) {
		t[i] = (struct membw_thread){
			.data = buf + (size_t)i * share,
			.n = i == n_threads - 1 ? n_vec - (size_t)i * share : share,
			.start = &start,
		};
	}
	int started = 1;
	for (; started < n_threads; started++)
		if (pthread_create(&t[started].thread, NULL, membw_main, &t[started]) != 0)
			break;
	if (started < n_threads)
		return -1; /* the started threads wait on the barrier until the process ends */
	/* The clock starts before the caller enters the barrier, which is the moment the last
	 * thread arrives: a thread's start cost is counted, never hidden. */
	double t0 = lm_now_s();
	membw_main(&t[0]);
	for (int i = 1; i < n_threads; i++)
		pthread_join(t[i].thread, NULL);
	*secs = lm_now_s() - t0;
	for (int i = 0; i < n_threads; i++)
		*sink += t[i].sum;
	pthread_barrier_destroy(&start);
	return 0;
}

static bool membw_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static int membw_usage(void)
{
	fputs("usage: bench_membw [--mib M] [--reps R] [--threads \"1 2\"] [--pages huge|4k] "
	      "[--bench-wait]\n",
	      stderr);
	return 2;
}

int main(int argc, char **argv)
{
	long mib = 1024, reps = 7;
	int threads[8] = {1, 2};
	int n_counts = 2;
	bool wait = false, huge = true;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--bench-wait") == 0) {
			wait = true;
			continue;
		}
		if (i + 1 >= argc)
			return membw_usage();
		const char *v = argv[++i];
		if (strcmp(argv[i - 1], "--mib") == 0) {
			if (!membw_parse_long(v, 1, 1L << 20, &mib))
				return membw_usage();
		} else if (strcmp(argv[i - 1], "--reps") == 0) {
			if (!membw_parse_long(v, 1, 10000, &reps))
				return membw_usage();
		} else if (strcmp(argv[i - 1], "--pages") == 0) {
			if (strcmp(v, "huge") == 0)
				huge = true;
			else if (strcmp(v, "4k") == 0)
				huge = false;
			else
				return membw_usage();
		} else if (strcmp(argv[i - 1], "--threads") == 0) {
			char *copy = strdup(v), *save = NULL;
			n_counts = 0;
			for (char *tok = strtok_r(copy, " ,", &save); tok != NULL;
			     tok = strtok_r(NULL, " ,", &save)) {
				long t;
				if (n_counts == 8 ||
				    !membw_parse_long(tok, 1, MEMBW_MAX_THREADS, &t)) {
					free(copy);
					return membw_usage();
				}
				threads[n_counts++] = (int)t;
			}
			free(copy);
			if (n_counts == 0)
				return membw_usage();
		} else {
			return membw_usage();
		}
	}

	size_t bytes = (size_t)mib << 20;
	/* 2 MiB alignment lets every page of the buffer be huge; the advice comes before the first
	 * write, which is when the pages are allocated. */
	membw_v8 *buf = aligned_alloc((size_t)2 << 20, bytes);
	if (buf != NULL)
		(void)madvise(buf, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	double *gbs = malloc((size_t)(n_counts * reps) * sizeof *gbs);
	if (buf == NULL || gbs == NULL) {
		fprintf(stderr, "bench_membw: cannot allocate %ld MiB\n", mib);
		return 1;
	}
	/* Distinct values, so no page is shared or compressible. */
	uint64_t *w = (uint64_t *)buf;
	for (size_t i = 0; i < bytes / sizeof *w; i++)
		w[i] = i * 0x9e3779b97f4a7c15u;

	uint64_t sink = 0;
	size_t n_vec = bytes / sizeof *buf;
	char line[256];
	if (wait) {
		printf("ready\n");
		fflush(stdout);
	}
	long done = 0;
	for (long r = 0; r < reps; r++, done++) {
		if (wait && fgets(line, sizeof line, stdin) == NULL)
			break;
		for (int c = 0; c < n_counts; c++) {
			double secs;
			if (membw_pass(buf, n_vec, threads[c], &secs, &sink) != 0) {
				fprintf(stderr, "bench_membw: cannot start %d threads\n",
					threads[c]);
				return 1;
			}
			gbs[c * reps + r] = (double)bytes / secs * 1e-9;
			printf("read threads=%d rep=%ld gb_s=%.2f\n", threads[c], r,
			       gbs[c * reps + r]);
			fflush(stdout);
		}
		if (wait) {
			printf("end rep=%ld\n", r);
			fflush(stdout);
		}
	}
	for (int c = 0; c < n_counts && done > 0; c++) {
		double *g = gbs + c * reps;
		qsort(g, (size_t)done, sizeof *g, membw_cmp);
		double med = done % 2 ? g[done / 2] : (g[done / 2 - 1] + g[done / 2]) / 2;
		printf("median threads=%d gb_s=%.2f min=%.2f max=%.2f\n", threads[c], med, g[0],
		       g[done - 1]);
	}
	/* The sum is printed to stderr only so the compiler cannot drop the reads. */
	if (sink == 42)
		fprintf(stderr, "(sink)\n");
	free(gbs);
	free(buf);
	return 0;
}

/* bench_pipes.c — how many of the int8 dot-product instructions one x86-64 core issues a
 * nanosecond: the bound under the avx2 set's GEMM (kernels/cpu/panel_avx2.c).
 *
 *   bench_pipes [--iters N]
 *
 * Times N loops (default 100M) of 8 independent instructions on register operands, for each
 * mix below, and prints one line per mix with the nanoseconds per loop. Independent: no
 * instruction waits on another, so the time is the throughput of the pipes they share, not a
 * latency. The vpmaddubsw / vpmaddwd / vpmulld lines tell whether those share one multiply
 * pipe (then 8 of any mix take the time of 8 of one); vpsignb and vpaddd are the others'; the
 * vmulps lines, whether f32 multiplies could run beside them on pipes of their own. On a
 * CPU without AVX2 it says so and exits 77.
 *
 * Exit status: 0 success, 2 usage error, 77 no AVX2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
#define I2(op, d) op " %%ymm14, %%ymm15, %%ymm" #d "\n"
#define CLOBBERS  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm14", "xmm15"
#define MIX(name, body)                                                                       \
	do {                                                                                  \
		const double t0 = now_s();                                                    \
		for (long n = 0; n < iters; n++)                                              \
			__asm__ volatile(body ::: CLOBBERS);                                  \
		printf("%-34s %.3f ns a loop\n", name, (now_s() - t0) / (double)iters * 1e9); \
	} while (0)
#define EIGHT(op) I2(op, 0) I2(op, 1) I2(op, 2) I2(op, 3) I2(op, 4) I2(op, 5) I2(op, 6) I2(op, 7)

static void run(long iters)
{
	MIX("8 vpmaddubsw", EIGHT("vpmaddubsw"));
	MIX("8 vpmaddwd", EIGHT("vpmaddwd"));
	MIX("8 vpmulld", EIGHT("vpmulld"));
	MIX("4 vpmaddubsw + 4 vpmaddwd",
	    I2("vpmaddubsw", 0) I2("vpmaddwd", 1) I2("vpmaddubsw", 2) I2("vpmaddwd", 3)
		    I2("vpmaddubsw", 4) I2("vpmaddwd", 5) I2("vpmaddubsw", 6) I2("vpmaddwd", 7));
	MIX("4 vpmaddubsw + 4 vpaddd",
	    I2("vpmaddubsw", 0) I2("vpaddd", 1) I2("vpmaddubsw", 2) I2("vpaddd", 3)
		    I2("vpmaddubsw", 4) I2("vpaddd", 5) I2("vpmaddubsw", 6) I2("vpaddd", 7));
	MIX("4 vpsignb + 4 vpaddd",
	    I2("vpsignb", 0) I2("vpaddd", 1) I2("vpsignb", 2) I2("vpaddd", 3) I2("vpsignb", 4)
		    I2("vpaddd", 5) I2("vpsignb", 6) I2("vpaddd", 7));
	/* Where f32 multiplies go: if vmulps had pipes of its own, 8 vpmaddubsw and 16 vmulps
	 * would take the time of either alone. */
	MIX("16 vmulps", EIGHT("vmulps") EIGHT("vmulps"));
	MIX("8 vpmaddubsw + 16 vmulps", EIGHT("vpmaddubsw") EIGHT("vmulps") EIGHT("vmulps"));
}
#endif

int main(int argc, char **argv)
{
	long iters = 100000000;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc && atol(argv[i + 1]) > 0) {
			iters = atol(argv[++i]);
		} else {
			fprintf(stderr, "usage: bench_pipes [--iters N]\n");
			return 2;
		}
	}
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2")) {
		run(iters);
		return 0;
	}
#endif
	(void)now_s;
	(void)iters;
	printf("bench_pipes: this CPU has no AVX2\n");
	return 77;
}

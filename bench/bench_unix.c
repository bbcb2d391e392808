/* bench_unix.c — the floor under a mesh hop: raw unix-socket round trips and rings.
 *
 *   bench_unix [--sizes "256 16384"] [--iters N] [--ring K]
 *
 * For each message size S:
 *   rtt   two processes over a socketpair (AF_UNIX, SOCK_STREAM, the kind of socket NNG's ipc://
 *         transport uses): the parent writes S bytes, the child reads them and writes S bytes
 *         back, the parent reads them. Each round trip is timed on its own.
 *   ring  K processes (default 4: the coordinator and three workers) in a ring of socketpairs,
 *         one S-byte message in flight: the parent sends, each process forwards what it reads
 *         to the next, the parent reads it back. Each lap is timed on its own; a hop is a lap
 *         over K.
 * Blocking reads and writes, no framing, no polling: nothing a real transport can undercut.
 * After 200 untimed warm-up iterations, N (default 5000) are timed. Prints
 *     rtt size=S median_us=X min_us=X p90_us=X
 *     ring procs=K size=S lap_median_us=X hop_median_us=X lap_min_us=X
 *
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"

#define UNIX_WARMUP   200
#define UNIX_MAX_RING 16

static int unix_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Reads or writes exactly n bytes; false on end of stream or error. */
static bool unix_read_all(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

static bool unix_write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n > 0) {
		ssize_t r = write(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

/* A child's life: forward every message from `in` to `out` until `in` ends. */
static void unix_forward(int in, int out, uint8_t *buf, size_t size)
{
	while (unix_read_all(in, buf, size) && unix_write_all(out, buf, size))
		;
	_exit(0);
}

/* Median, minimum and 90th percentile of t[0..n) (sorted in place). */
static void unix_stats(double *t, long n, double *med, double *min, double *p90)
{
	qsort(t, (size_t)n, sizeof *t, unix_cmp);
	*med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
	*min = t[0];
	*p90 = t[(n * 9) / 10];
}

/* Sends a message round a ring of k processes (k == 2 is a round trip) iters times. */
static int unix_ring(int k, size_t size, long iters, double *t)
{
	int sv[UNIX_MAX_RING][2]; /* sv[i]: from process i to process (i + 1) % k */
	pid_t pid[UNIX_MAX_RING] = {0};
	uint8_t *buf = malloc(size);
	int rc = 1, made = 0;
	if (buf == NULL)
		return 1;
	memset(buf, 0x5a, size);
	for (int j = 0; j < UNIX_MAX_RING; j++)
		sv[j][0] = sv[j][1] = -1;
	for (; made < k; made++)
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[made]) != 0)
			goto out;
	for (int i = 1; i < k; i++) {
		pid[i] = fork();
		if (pid[i] < 0)
			goto out;
		if (pid[i] == 0) {
			/* Process i reads the pair from i - 1 and writes the pair to i + 1. */
			int in = sv[i - 1][1], out = sv[i][0];
			for (int j = 0; j < k; j++) {
				if (sv[j][0] != out)
					close(sv[j][0]);
				if (sv[j][1] != in)
					close(sv[j][1]);
			}
			unix_forward(in, out, buf, size);
		}
	}
	int out = sv[0][0], in = sv[k - 1][1];
	for (long it = -UNIX_WARMUP; it < iters; it++) {
		double t0 = ((double)lm_now_ns() * 1e-3);
		if (!unix_write_all(out, buf, size) || !unix_read_all(in, buf, size))
			goto out;
		if (it >= 0)
			t[it] = ((double)lm_now_ns() * 1e-3) - t0;
	}
	rc = 0;
out:
	if (rc != 0)
		fprintf(stderr, "bench_unix: ring of %d: %s\n", k, strerror(errno));
	/* Closing our ends ends every child's read loop in turn. */
	for (int j = 0; j < made; j++) {
		close(sv[j][0]);
		close(sv[j][1]);
	}
	for (int i = 1; i < k; i++)
		if (pid[i] > 0)
			waitpid(pid[i], NULL, 0);
	free(buf);
	return rc;
}

static bool unix_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static int unix_usage(void)
{
	fputs("usage: bench_unix [--sizes \"256 16384\"] [--iters N] [--ring K]\n", stderr);
	return 2;
}

int main(int argc, char **argv)
{
	long sizes[16] = {256, 16384}, iters = 5000, ring = 4;
	int n_sizes = 2;

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			return unix_usage();
		const char *v = argv[++i];
		if (strcmp(argv[i - 1], "--iters") == 0) {
			if (!unix_parse_long(v, 1, 10000000, &iters))
				return unix_usage();
		} else if (strcmp(argv[i - 1], "--ring") == 0) {
			if (!unix_parse_long(v, 2, UNIX_MAX_RING, &ring))
				return unix_usage();
		} else if (strcmp(argv[i - 1], "--sizes") == 0) {
			char *copy = strdup(v), *save = NULL;
			n_sizes = 0;
			for (char *tok = strtok_r(copy, " ,", &save); tok != NULL;
			     tok = strtok_r(NULL, " ,", &save)) {
				if (n_sizes == 16 ||
				    !unix_parse_long(tok, 1, 64L << 20, &sizes[n_sizes])) {
					free(copy);
					return unix_usage();
				}
				n_sizes++;
			}
			free(copy);
			if (n_sizes == 0)
				return unix_usage();
		} else {
			return unix_usage();
		}
	}
	/* A child that dies must not kill us with SIGPIPE: the write fails instead. */
	signal(SIGPIPE, SIG_IGN);

	double *t = malloc((size_t)iters * sizeof *t);
	if (t == NULL)
		return 1;
	for (int s = 0; s < n_sizes; s++) {
		double med, min, p90;
		if (unix_ring(2, (size_t)sizes[s], iters, t) != 0)
			return 1;
		unix_stats(t, iters, &med, &min, &p90);
		printf("rtt size=%ld median_us=%.2f min_us=%.2f p90_us=%.2f\n", sizes[s], med, min,
		       p90);
		fflush(stdout);
		if (unix_ring((int)ring, (size_t)sizes[s], iters, t) != 0)
			return 1;
		unix_stats(t, iters, &med, &min, &p90);
		printf("ring procs=%ld size=%ld lap_median_us=%.2f hop_median_us=%.2f "
		       "lap_min_us=%.2f\n",
		       ring, sizes[s], med, med / (double)ring, min);
		fflush(stdout);
	}
	free(t);
	return 0;
}

/* bench_nng.c — NNG's own floor under a mesh hop: push/pull rings between processes, with no
 * layermesh code between the sockets.
 *
 *   bench_nng [--sizes "256 8192 16384"] [--iters N] [--ring K] [--dir DIR] [--work-us W]
 *
 * For each message size S, K processes (default 4: the coordinator and three workers) in a ring
 * of NNG push/pull sockets over ipc:// (the transport and pattern of the mesh's data plane),
 * process i pulling from its own address and pushing to process i + 1's, one S-byte message in
 * flight: the parent sends, each process receives an nng_msg and sends that same message on
 * (nng_recvmsg / nng_sendmsg: no copy, the cheapest forward NNG allows), the parent receives it
 * back. Each lap is timed on its own; a hop is a lap over K. After 200 untimed warm-up laps, N
 * (default 5000) are timed. Prints, in bench_unix's shape:
 *     nng_ring procs=K size=S lap_median_us=X hop_median_us=X lap_min_us=X hop_p90_us=X
 *
 * --work-us W: each forwarding process, between its receive and its send, reads through a
 * 64 MiB buffer for W microseconds, as a mesh stage streams its weights, so the processes take
 * turns as the mesh's do: each sleeps in its receive while the others work, and its caches are
 * cold when the message comes. The time of the K - 1 works is taken off each lap before it is
 * divided into hops (a lap's works are timed by the forwarders' own clock reads, which are
 * W each within a few microseconds; the printed figures assume exactly W). Fewer warm-up laps
 * (10) are run then.
 *
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/clock.h"

#define NNG_WARMUP      200
#define NNG_WARMUP_WORK 10
#define NNG_MAX_RING    16
#define NNG_WORK_BYTES  (64u << 20)

/* Reads through buf until us microseconds have passed (a stage's forward, roughly). */
static uint64_t nng_work(const uint64_t *buf, long us)
{
	const uint64_t until = lm_now_ns() + (uint64_t)us * 1000u;
	static size_t at;
	uint64_t sum = 0;
	while (lm_now_ns() < until)
		for (int i = 0; i < 4096; i++, at = (at + 8) % (NNG_WORK_BYTES / 8))
			sum += buf[at];
	return sum;
}

static int nng_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void ring_addr(char *out, size_t len, const char *dir, int i)
{
	snprintf(out, len, "ipc://%s/ring%d", dir, i);
}

/* Process i's sockets: pull listening on its own address, push dialing the next one's. */
static int ring_open(const char *dir, int i, int k, nng_socket *pull, nng_socket *push)
{
	char addr[512];
	int rv;
	if ((rv = nng_pull0_open(pull)) != 0 || (rv = nng_push0_open(push)) != 0)
		return rv;
	ring_addr(addr, sizeof addr, dir, i);
	if ((rv = nng_listen(*pull, addr, NULL, 0)) != 0)
		return rv;
	ring_addr(addr, sizeof addr, dir, (i + 1) % k);
	/* Non-blocking dial: the next process may not listen yet; NNG redials until it does. */
	return nng_dial(*push, addr, NULL, NNG_FLAG_NONBLOCK);
}

/* A child's life: forward every message until the parent's socket goes away (a receive that
 * times out after the parent stopped) or a send fails. */
static void ring_forward(nng_socket pull, nng_socket push, long work_us)
{
	uint64_t *buf = work_us > 0 ? calloc(1, NNG_WORK_BYTES) : NULL;
	nng_setopt_ms(pull, NNG_OPT_RECVTIMEO, 5000);
	for (;;) {
		nng_msg *m;
		if (nng_recvmsg(pull, &m, 0) != 0)
			break;
		if (buf != NULL) {
			/* The sum is the reads' only consumer: an empty asm that takes it keeps them. */
			const uint64_t sum = nng_work(buf, work_us);
			__asm__ volatile("" : : "r"(sum));
		}
		if (nng_sendmsg(push, m, 0) != 0) {
			nng_msg_free(m);
			break;
		}
	}
	_exit(0);
}

static int ring_run(const char *dir, int k, size_t size, long iters, long work_us, double *t)
{
	pid_t pid[NNG_MAX_RING] = {0};
	nng_socket pull, push;
	int rc = 1;
	for (int i = 1; i < k; i++) {
		pid[i] = fork();
		if (pid[i] < 0)
			goto out;
		if (pid[i] == 0) {
			if (ring_open(dir, i, k, &pull, &push) != 0)
				_exit(1);
			ring_forward(pull, push, work_us);
		}
	}
	int rv = ring_open(dir, 0, k, &pull, &push);
	if (rv != 0) {
		fprintf(stderr, "bench_nng: %s\n", nng_strerror(rv));
		goto out;
	}
	nng_setopt_ms(pull, NNG_OPT_RECVTIMEO, 10000);
	for (long it = work_us > 0 ? -NNG_WARMUP_WORK : -NNG_WARMUP; it < iters; it++) {
		nng_msg *m;
		if ((rv = nng_msg_alloc(&m, size)) != 0)
			goto fail;
		memset(nng_msg_body(m), 0x5a, size);
		const double t0 = (double)lm_now_ns() * 1e-3;
		if ((rv = nng_sendmsg(push, m, 0)) != 0) {
			nng_msg_free(m);
			goto fail;
		}
		if ((rv = nng_recvmsg(pull, &m, 0)) != 0)
			goto fail;
		if (it >= 0)
			t[it] = (double)lm_now_ns() * 1e-3 - t0 - (double)((k - 1) * work_us);
		nng_msg_free(m);
	}
	rc = 0;
fail:
	if (rc != 0)
		fprintf(stderr, "bench_nng: ring of %d, %zu bytes: %s\n", k, size,
			nng_strerror(rv));
	nng_close(push);
	nng_close(pull);
out:
	for (int i = 1; i < k; i++)
		if (pid[i] > 0) {
			kill(pid[i], SIGTERM);
			waitpid(pid[i], NULL, 0);
		}
	return rc;
}

int main(int argc, char **argv)
{
	const char *sizes = "256 8192 16384";
	long iters = 5000, work_us = 0;
	int k = 4;
	char dir[256] = "";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
			sizes = argv[++i];
		else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
			iters = atol(argv[++i]);
		else if (strcmp(argv[i], "--ring") == 0 && i + 1 < argc)
			k = atoi(argv[++i]);
		else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
			snprintf(dir, sizeof dir, "%s", argv[++i]);
		else if (strcmp(argv[i], "--work-us") == 0 && i + 1 < argc)
			work_us = atol(argv[++i]);
		else {
			fprintf(stderr,
				"usage: %s [--sizes \"256 8192 16384\"] [--iters N] [--ring K] "
				"[--dir DIR] [--work-us W]\n",
				argv[0]);
			return 2;
		}
	}
	if (iters < 10 || k < 2 || k > NNG_MAX_RING || work_us < 0 || work_us > 10000000) {
		fprintf(stderr,
			"bench_nng: --iters must be >= 10, --ring 2..%d and --work-us "
			"0..10000000\n",
			NNG_MAX_RING);
		return 2;
	}
	char tmpl[] = "/tmp/bench_nng.XXXXXX";
	if (dir[0] == '\0') {
		if (mkdtemp(tmpl) == NULL) {
			perror("bench_nng: mkdtemp");
			return 1;
		}
		snprintf(dir, sizeof dir, "%s", tmpl);
	}
	double *t = malloc((size_t)iters * sizeof *t);
	if (t == NULL)
		return 1;
	int rc = 0;
	for (const char *p = sizes; *p != '\0';) {
		char *end;
		long size = strtol(p, &end, 10);
		if (end == p)
			break;
		p = end;
		if (size <= 0) {
			fprintf(stderr, "bench_nng: bad size %ld\n", size);
			rc = 2;
			break;
		}
		/* Each size in a process of its own that forks its ring before it opens a socket:
		 * a process whose NNG threads run must not fork children that use NNG. */
		fflush(stdout);
		const pid_t drv = fork();
		if (drv < 0) {
			rc = 1;
			break;
		}
		if (drv == 0) {
			if (ring_run(dir, k, (size_t)size, iters, work_us, t) != 0)
				_exit(1);
			qsort(t, (size_t)iters, sizeof *t, nng_cmp);
			const double med =
				iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
			printf("nng_ring procs=%d size=%ld lap_median_us=%.2f hop_median_us=%.2f "
			       "lap_min_us=%.2f hop_p90_us=%.2f work_us=%ld\n",
			       k, size, med, med / k, t[0], t[(iters * 9) / 10] / k, work_us);
			fflush(stdout);
			_exit(0);
		}
		int st = 0;
		if (waitpid(drv, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			rc = 1;
			break;
		}
	}
	free(t);
	if (tmpl[0] != '\0' && strcmp(dir, tmpl) == 0) {
		char path[512];
		for (int i = 0; i < k; i++) {
			snprintf(path, sizeof path, "%s/ring%d", dir, i);
			unlink(path);
		}
		rmdir(dir);
	}
	return rc;
}

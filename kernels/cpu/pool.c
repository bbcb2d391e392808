#include "kernels/cpu/pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/err.h"

/* How long a worker spins for the next job before sleeping, and how many polls between clock
 * reads. 200 us covers the gap between two ops of a forward (rmsnorm, rope, residual adds). */
#define POOL_SPIN_NS    200000
#define POOL_SPIN_POLLS 64

static inline void pool_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void pool_futex_wait(_Atomic uint32_t *addr, uint32_t expected)
{
	/* Returns at once when *addr != expected, so a bump between the caller's check and this
	 * call is not lost. Spurious wakeups are handled by the caller's loop. */
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void pool_futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until gen moves past `seen`; returns the new generation. */
static uint32_t pool_wait_job(struct cpu_pool *p, uint32_t seen)
{
	uint64_t start = 0;
	for (unsigned polls = 1;; polls++) {
		uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
		if (g != seen)
			return g;
		pool_relax();
		if (polls % POOL_SPIN_POLLS != 0)
			continue;
		uint64_t now = lm_now_ns();
		if (start == 0) {
			start = now;
			continue;
		}
		if (now - start < POOL_SPIN_NS)
			continue;
		/* Announce the sleep before re-checking gen: the caller bumps gen and then reads
		 * sleepers (both sequentially consistent), so either it sees us and wakes us, or
		 * we see its bump in the futex's own comparison. */
		atomic_fetch_add(&p->sleepers, 1);
		while (atomic_load(&p->gen) == seen)
			pool_futex_wait(&p->gen, seen);
		atomic_fetch_sub(&p->sleepers, 1);
		start = 0;
	}
}

static void *pool_main(void *arg)
{
	struct cpu_pool_worker *w = arg;
	struct cpu_pool *p = w->pool;
	/* gen is 0 when the thread is created, whenever the thread itself starts running. */
	uint32_t seen = 0;
	for (;;) {
		seen = pool_wait_job(p, seen);
		if (atomic_load_explicit(&p->stop, memory_order_acquire))
			break;
		if (w->ith < p->nth)
			p->fn(p->arg, w->ith, p->nth);
		atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
	}
	return NULL;
}

static void pool_bump(struct cpu_pool *p)
{
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->sleepers) > 0)
		pool_futex_wake_all(&p->gen);
}

int cpu_pool_init(struct cpu_pool *p, int n_threads)
{
	*p = (struct cpu_pool){0};
	if (n_threads < 1)
		n_threads = 1;
	p->n_threads = n_threads;
	atomic_init(&p->gen, 0);
	atomic_init(&p->pending, 0);
	atomic_init(&p->sleepers, 0);
	atomic_init(&p->stop, 0);
	if (n_threads == 1)
		return 0;
	p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
	if (p->workers == NULL)
		return LM_ENOMEM;
	for (int i = 0; i < n_threads - 1; i++) {
		p->workers[i].pool = p;
		p->workers[i].ith = i + 1;
		int rc = pthread_create(&p->workers[i].thread, NULL, pool_main, &p->workers[i]);
		if (rc != 0) {
			cpu_pool_fini(p);
			return rc == ENOMEM || rc == EAGAIN ? LM_ENOMEM : LM_EOS;
		}
		p->started++;
	}
	return 0;
}

void cpu_pool_fini(struct cpu_pool *p)
{
	if (p == NULL)
		return;
	if (p->started > 0) {
		atomic_store(&p->stop, 1);
		pool_bump(p);
		for (int i = 0; i < p->started; i++)
			pthread_join(p->workers[i].thread, NULL);
	}
	free(p->workers);
	*p = (struct cpu_pool){0};
}

void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn fn, void *arg, int nth)
{
	if (nth > p->n_threads)
		nth = p->n_threads;
	if (nth <= 1 || p->started == 0) {
		fn(arg, 0, 1);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	p->nth = nth;
	atomic_store_explicit(&p->pending, p->started, memory_order_relaxed);
	pool_bump(p);
	fn(arg, 0, nth);
	/* The parts are balanced, so this wait is short unless a worker lost its core; yield then
	 * rather than burn the core it needs. */
	for (unsigned spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0;
	     spins++) {
		if (spins < 4096)
			pool_relax();
		else
			sched_yield();
	}
}

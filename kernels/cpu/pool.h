/* pool.h — the CPU backend's persistent thread pool.
 *
 * Threads are created once by cpu_pool_init and live until cpu_pool_fini; an op wakes them with
 * cpu_pool_run, which also runs part 0 of the job on the calling thread and returns when every
 * part has finished. Between jobs a worker spins for a short while (ops of one forward follow each
 * other within microseconds) and then sleeps on a futex, so an idle backend costs no CPU.
 *
 * One thread at a time may call cpu_pool_run (the backend's contract: one caller at a time).
 */
#ifndef LM_CPU_POOL_H
#define LM_CPU_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Part ith of nth of a job. */
typedef void (*cpu_pool_fn)(void *arg, int ith, int nth);

struct cpu_pool_worker {
	struct cpu_pool *pool;
	pthread_t thread;
	int ith;
};

struct cpu_pool {
	int n_threads;                   /* including the caller */
	struct cpu_pool_worker *workers; /* [n_threads - 1] */
	int started;                     /* workers whose thread was created */

	/* The current job; written by the caller before gen is bumped. */
	cpu_pool_fn fn;
	void *arg;
	int nth;

	_Atomic uint32_t gen; /* job generation: workers wait for it to change */
	_Atomic int pending;  /* workers that have not finished the current job */
	_Atomic int sleepers; /* workers blocked (or about to block) in futex wait */
	_Atomic int stop;     /* set by fini */
};

/* Starts n_threads - 1 workers (n_threads >= 1). 0, LM_ENOMEM or LM_EOS; on failure nothing is
 * left running. */
int cpu_pool_init(struct cpu_pool *p, int n_threads);
/* Stops and joins the workers and frees; harmless on a zeroed pool. */
void cpu_pool_fini(struct cpu_pool *p);
/* Runs fn(arg, ith, nth) for ith in [0, nth) (1 <= nth <= n_threads), part 0 on the caller, and
 * waits for all parts. */
void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn fn, void *arg, int nth);

#endif

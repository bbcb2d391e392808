/* clock.h — the one clock every duration and deadline of layermesh is measured on.
 *
 * CLOCK_MONOTONIC throughout: a wall-clock step (NTP, an operator's `date`) must never make a
 * timeout fire early or a wait last for ever. Condition variables that are waited on with a
 * deadline are made with lm_cond_init, which sets them to the same clock, and waited on with
 * lm_cond_wait_until / lm_cond_wait_ms.
 */
#ifndef LM_CLOCK_H
#define LM_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Now, in nanoseconds, milliseconds and seconds. */
uint64_t lm_now_ns(void);
int64_t lm_now_ms(void);
double lm_now_s(void);
/* CPU seconds of every thread of the process (CLOCK_PROCESS_CPUTIME_ID): at one thread, the
 * time a piece of work took without the waits a loaded machine adds. */
double lm_cpu_s(void);

/* The instant `ms` milliseconds from now (ms may be negative), as a timespec on the same clock. */
struct timespec lm_deadline(int64_t ms);

/* pthread_cond_init with the monotonic clock. Returns pthread's code (0 on success). */
int lm_cond_init(pthread_cond_t *cv);
/* Waits on cv (mu held) until signalled or until `until` (lm_now_ms() time) has passed; false
 * when the deadline passed. Spurious wake-ups return true: callers re-check their condition. */
bool lm_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_ms);
/* The same for at most `ms` milliseconds from now. */
bool lm_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

#endif

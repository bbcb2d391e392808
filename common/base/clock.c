/* clock.c — monotonic time and deadlines. See clock.h. */
#include "common/base/clock.h"

#include <errno.h>

uint64_t lm_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t lm_now_ms(void)
{
	return (int64_t)(lm_now_ns() / 1000000ull);
}

double lm_now_s(void)
{
	return (double)lm_now_ns() * 1e-9;
}

double lm_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec lm_deadline(int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t ns = (int64_t)ts.tv_nsec + (ms % 1000) * 1000000;
	ts.tv_sec += (time_t)(ms / 1000 + (ns >= 1000000000 ? 1 : ns < 0 ? -1 : 0));
	ts.tv_nsec = (long)(ns >= 1000000000 ? ns - 1000000000 : ns < 0 ? ns + 1000000000 : ns);
	return ts;
}

int lm_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	int rv = pthread_condattr_init(&ca);
	if (rv != 0)
		return rv;
	rv = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rv == 0)
		rv = pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
	return rv;
}

bool lm_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_ms)
{
	struct timespec ts = lm_deadline(until_ms - lm_now_ms());
	return pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT;
}

bool lm_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	struct timespec ts = lm_deadline(ms);
	return pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT;
}

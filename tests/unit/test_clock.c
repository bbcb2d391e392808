/* test_clock.c — monotonic time and deadlines (common/base/clock.h). */
#include <criterion/criterion.h>
#include <pthread.h>

#include "common/base/clock.h"

static int64_t ts_ns(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

Test(clock, deadlines_normalise)
{
	for (int64_t ms = -2500; ms <= 2500; ms += 250) {
		int64_t before = (int64_t)lm_now_ns();
		struct timespec t = lm_deadline(ms);
		int64_t after = (int64_t)lm_now_ns();
		cr_expect(t.tv_nsec >= 0 && t.tv_nsec < 1000000000, "%lld ms: tv_nsec %ld",
			  (long long)ms, t.tv_nsec);
		cr_expect_geq(ts_ns(t), before + ms * 1000000);
		cr_expect_leq(ts_ns(t), after + ms * 1000000);
	}
}

Test(clock, clocks_agree)
{
	int64_t ms = lm_now_ms();
	double s = lm_now_s();
	cr_expect_leq(ms, (int64_t)(s * 1e3) + 1);
	cr_expect_geq(lm_cpu_s(), 0.0);
}

/* A wait on a monotonic condition variable ends at its deadline, not before, and a passed
 * deadline ends it at once. */
Test(clock, waits_time_out)
{
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv;
	cr_assert_eq(lm_cond_init(&cv), 0);
	pthread_mutex_lock(&mu);
	int64_t t0 = lm_now_ms();
	bool woke = true;
	while (woke && lm_now_ms() < t0 + 30)
		woke = lm_cond_wait_ms(&cv, &mu, 30);
	cr_expect_geq(lm_now_ms() - t0, 30);
	cr_expect_not(lm_cond_wait_until(&cv, &mu, lm_now_ms() - 5));
	pthread_mutex_unlock(&mu);
	pthread_cond_destroy(&cv);
}

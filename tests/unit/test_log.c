/* test_log.c — the rate limit of repeated log lines (common/base/log.h). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <unistd.h>

#include "common/base/log.h"

/* One line per key per interval; the next says how many were held back; keys apart. */
Test(log, limit_passes_one_line_per_key_and_counts_the_rest, .timeout = 10)
{
	struct lm_log_limit l;
	uint64_t held = 99;
	lm_log_limit_init(&l, 200);
	uint64_t a = lm_log_key("pipe 7", -8), b = lm_log_key("pipe 8", -8);
	cr_expect_neq(a, b);
	cr_expect_neq(a, lm_log_key("pipe 7", -10));
	cr_expect(lm_log_limit_pass(&l, a, &held));
	cr_expect_eq(held, 0);
	for (int i = 0; i < 20000; i++)
		cr_assert(!lm_log_limit_pass(&l, a, &held));
	cr_expect(lm_log_limit_pass(&l, b, &held), "another key is not held back");
	cr_expect_eq(held, 0);
	usleep(250000);
	cr_expect(lm_log_limit_pass(&l, a, &held));
	cr_expect_eq(held, 20000);
	cr_expect(!lm_log_limit_pass(&l, a, &held));
	lm_log_limit_fini(&l);
}

/* More keys than the table holds: a new key takes the place of the one logged longest ago, so
 * a flood of distinct keys still passes each once and never fails. */
Test(log, limit_reuses_the_oldest_slot, .timeout = 10)
{
	struct lm_log_limit l;
	uint64_t held;
	lm_log_limit_init(&l, 60000);
	for (int64_t k = 0; k < 3 * LM_LOG_LIMIT_KEYS; k++)
		cr_expect(lm_log_limit_pass(&l, lm_log_key("peer", k), &held), "key %lld",
			  (long long)k);
	/* The most recent keys are still held back. */
	cr_expect(!lm_log_limit_pass(&l, lm_log_key("peer", 3 * LM_LOG_LIMIT_KEYS - 1), &held));
	lm_log_limit_fini(&l);
}

struct flood {
	struct lm_log_limit *l;
	int passed;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	uint64_t held;
	for (int i = 0; i < 50000; i++)
		f->passed += lm_log_limit_pass(f->l, lm_log_key("shared", 1), &held);
	return NULL;
}

/* From several threads at once, one line passes in an interval. */
Test(log, limit_is_safe_from_threads, .timeout = 10)
{
	struct lm_log_limit l;
	lm_log_limit_init(&l, 60000);
	struct flood f[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		f[i] = (struct flood){&l, 0};
		cr_assert_eq(pthread_create(&t[i], NULL, flood_main, &f[i]), 0);
	}
	int passed = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		passed += f[i].passed;
	}
	cr_expect_eq(passed, 1);
	lm_log_limit_fini(&l);
}

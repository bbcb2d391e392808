/* metrics.h — latency histograms, percentiles estimated from them, and the Prometheus text
 * exposition format (version 0.0.4) they are published in.
 *
 * Histograms. Every histogram has the same fixed, log-spaced buckets: upper bounds of 1, 2 and
 * 5 times each power of ten from 1 us to 100 s (25 bounds; LM_HIST_BOUNDS_NS), then +Inf. A
 * value lands in the first bucket whose bound is >= the value, as Prometheus's `le` ("less or
 * equal") says. Fixed bounds keep histograms of different processes and builds comparable and
 * let a scrape sum them. An estimated percentile lies in the same bucket as the true one, so
 * above 1 us it is within a factor of 2.5 of it (the widest step); the 1-2-5 steps also keep
 * the `le` labels readable.
 *
 * Threads. lm_hist_observe is lock-free (relaxed atomic adds, and compare-and-swap for the
 * extremes): any number of threads may observe and take snapshots at once. A zeroed struct is
 * an empty histogram; nothing needs initialising or freeing. A snapshot reads one counter at a
 * time, so an observation that races with it may show in the snapshot's sum and not yet in its
 * buckets; the count is the sum of the snapshot's buckets, so `_count` always equals the +Inf
 * bucket.
 *
 * Percentiles (lm_hist_quantile) are estimated from the buckets as Prometheus's
 * histogram_quantile does: the rank r = q x count; the first bucket whose cumulative count
 * reaches r holds the value; within it the value is interpolated linearly between the bucket's
 * lower bound (the previous bound, 0 for the first bucket) and its upper bound, as if the
 * bucket's observations were spread evenly. Unlike Prometheus, the estimate is then clamped to
 * the smallest and largest values observed (kept exactly), so a histogram whose values are all
 * equal reports that value, and a rank in the +Inf bucket reports the largest value instead of
 * the last finite bound.
 */
#ifndef LM_METRICS_H
#define LM_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/buf.h"
#include "common/base/clock.h" /* lm_now_ns: the clock of every duration here */

#define LM_HIST_NBOUNDS  25                    /* finite bucket bounds */
#define LM_HIST_NBUCKETS (LM_HIST_NBOUNDS + 1) /* and the +Inf bucket */

/* The finite upper bounds, in nanoseconds, ascending. */
extern const uint64_t LM_HIST_BOUNDS_NS[LM_HIST_NBOUNDS];

struct lm_hist {
	_Atomic uint64_t bucket[LM_HIST_NBUCKETS]; /* non-cumulative counts */
	_Atomic uint64_t sum_ns;
	_Atomic uint64_t max_ns;
	_Atomic uint64_t inv_min_ns; /* ~min, so that a zeroed struct holds "no minimum yet" */
};

/* A consistent copy to read from. */
struct lm_hist_snap {
	uint64_t bucket[LM_HIST_NBUCKETS]; /* non-cumulative */
	uint64_t count;                    /* the sum of bucket[] */
	uint64_t sum_ns;
	uint64_t min_ns, max_ns; /* 0 when count is 0 */
};

/* The bucket a value of ns nanoseconds falls in (LM_HIST_NBOUNDS for +Inf). */
int lm_hist_bucket_of(uint64_t ns);
void lm_hist_observe(struct lm_hist *h, uint64_t ns);
void lm_hist_snapshot(const struct lm_hist *h, struct lm_hist_snap *s);
/* The q-quantile (0 <= q <= 1) in nanoseconds, estimated as described above; 0 when empty. */
double lm_hist_quantile(const struct lm_hist_snap *s, double q);

/* ------------------------------------------------------------------ exposition text */

/* A growing text buffer for one /metrics page. Appending never fails visibly: an allocation
 * failure is remembered and lm_mtext_take returns NULL. A zeroed struct is empty. */
struct lm_mtext {
	struct lm_buf b;
	bool oom;
};

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram, untyped). Call
 * once per metric family, before its samples. */
void lm_mtext_family(struct lm_mtext *t, const char *name, const char *type, const char *help);
/* One sample line. labels: NULL, or the inside of the braces, already escaped
 * (`worker="w0"`, see lm_mtext_label). Integral values print without a fraction. */
void lm_mtext_sample(struct lm_mtext *t, const char *name, const char *labels, double value);
/* A family of one sample: the two header lines and the value. */
void lm_mtext_counter(struct lm_mtext *t, const char *name, const char *help, uint64_t value);
void lm_mtext_gauge(struct lm_mtext *t, const char *name, const char *help, double value);
/* A histogram's samples, in seconds: name_bucket{le="..."} cumulative for every bound and +Inf,
 * name_sum and name_count. labels as for lm_mtext_sample (le is added to them). */
void lm_mtext_hist(struct lm_mtext *t, const char *name, const char *labels,
		   const struct lm_hist_snap *s);
/* Writes `key="value"` with value escaped (backslash, double quote, newline) into dst, which
 * is always terminated; returns false when it did not fit. */
bool lm_mtext_label(char *dst, size_t cap, const char *key, const char *value);
/* The text (the caller frees it), or NULL after an allocation failure; t is emptied. */
char *lm_mtext_take(struct lm_mtext *t);
void lm_mtext_fini(struct lm_mtext *t);

#endif

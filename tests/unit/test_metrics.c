/* Histograms, percentiles and the exposition text (common/base/metrics.h), against values worked out
 * by hand from the bucket bounds, and the text against an independent reader of the format
 * (tests/support/prom_parse.h). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/metrics.h"
#include "tests/support/prom_parse.h"

static void observe_n(struct lm_hist *h, uint64_t ns, int n)
{
	for (int i = 0; i < n; i++)
		lm_hist_observe(h, ns);
}

Test(metrics, values_land_in_the_bucket_whose_bound_is_at_least_the_value)
{
	/* Bounds: 1000, 2000, 5000, 10000 ns ...; le is "less or equal". */
	cr_expect_eq(lm_hist_bucket_of(0), 0);
	cr_expect_eq(lm_hist_bucket_of(1000), 0);
	cr_expect_eq(lm_hist_bucket_of(1001), 1);
	cr_expect_eq(lm_hist_bucket_of(2000), 1);
	cr_expect_eq(lm_hist_bucket_of(2001), 2);
	cr_expect_eq(lm_hist_bucket_of(5000), 2);
	cr_expect_eq(lm_hist_bucket_of(5001), 3);
	cr_expect_eq(lm_hist_bucket_of(999999), 9);  /* (500 us, 1 ms] */
	cr_expect_eq(lm_hist_bucket_of(1000000), 9); /* 1 ms */
	cr_expect_eq(lm_hist_bucket_of(100000000000ull), 24);
	cr_expect_eq(lm_hist_bucket_of(100000000001ull), 25); /* +Inf */
	cr_expect_eq(lm_hist_bucket_of(UINT64_MAX), 25);
	for (int i = 1; i < LM_HIST_NBOUNDS; i++)
		cr_expect_gt(LM_HIST_BOUNDS_NS[i], LM_HIST_BOUNDS_NS[i - 1]);
}

Test(metrics, an_empty_histogram_is_a_zeroed_struct)
{
	struct lm_hist h = {0};
	struct lm_hist_snap s;
	lm_hist_snapshot(&h, &s);
	cr_expect_eq(s.count, 0);
	cr_expect_eq(s.sum_ns, 0);
	cr_expect_eq(s.min_ns, 0);
	cr_expect_eq(s.max_ns, 0);
	cr_expect_eq(lm_hist_quantile(&s, 0.5), 0.0);
}

/* 4 x 1100 ns and 4 x 1900 ns, all in (1000, 2000]: rank q x 8 interpolated over the bucket. */
Test(metrics, quantiles_interpolate_within_a_bucket)
{
	struct lm_hist h = {0};
	struct lm_hist_snap s;
	observe_n(&h, 1100, 4);
	observe_n(&h, 1900, 4);
	lm_hist_snapshot(&h, &s);
	cr_expect_eq(s.count, 8);
	cr_expect_eq(s.bucket[1], 8);
	cr_expect_eq(s.sum_ns, 12000);
	cr_expect_eq(s.min_ns, 1100);
	cr_expect_eq(s.max_ns, 1900);
	cr_expect_float_eq(lm_hist_quantile(&s, 0.5), 1500.0, 1e-9);  /* 1000 + 1000 x 4/8 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.25), 1250.0, 1e-9); /* 1000 + 1000 x 2/8 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.1), 1100.0, 1e-9);  /* 1000 + 1000 x 0.8/8 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.9), 1900.0, 1e-9);  /* 1900, also the max */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.99), 1900.0, 1e-9); /* 1990 clamped to 1900 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.0), 1100.0, 1e-9);  /* 1000 clamped to 1100 */
}

/* 2 x 3 us in (2, 5] us, 6 x 15 us in (10, 20] us, 2 x 700 us in (500, 1000] us. */
Test(metrics, quantiles_walk_the_cumulative_counts)
{
	struct lm_hist h = {0};
	struct lm_hist_snap s;
	observe_n(&h, 3000, 2);
	observe_n(&h, 15000, 6);
	observe_n(&h, 700000, 2);
	lm_hist_snapshot(&h, &s);
	cr_expect_eq(s.count, 10);
	cr_expect_eq(s.bucket[2], 2);
	cr_expect_eq(s.bucket[4], 6);
	cr_expect_eq(s.bucket[9], 2);
	cr_expect_eq(s.sum_ns, 2 * 3000 + 6 * 15000 + 2 * 700000);
	/* rank 1: 2000 + 3000 x 1/2 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.1), 3500.0, 1e-9);
	/* rank 2: the whole first bucket, its upper bound */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.2), 5000.0, 1e-9);
	/* rank 5: 10000 + 10000 x (5 - 2)/6 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.5), 15000.0, 1e-9);
	/* rank 8.5: 500000 + 500000 x 0.5/2 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.85), 625000.0, 1e-9);
	/* rank 9: 750000, above the largest value, clamped to it */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.9), 700000.0, 1e-9);
	cr_expect_float_eq(lm_hist_quantile(&s, 1.0), 700000.0, 1e-9);
	/* rank 0: the first bucket's lower bound, clamped to the smallest value */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.0), 3000.0, 1e-9);
}

Test(metrics, a_rank_in_the_inf_bucket_is_the_largest_value)
{
	struct lm_hist h = {0};
	struct lm_hist_snap s;
	lm_hist_observe(&h, 1000);
	lm_hist_observe(&h, 200000000000ull); /* 200 s, past the last bound */
	lm_hist_snapshot(&h, &s);
	cr_expect_eq(s.bucket[0], 1);
	cr_expect_eq(s.bucket[LM_HIST_NBOUNDS], 1);
	cr_expect_float_eq(lm_hist_quantile(&s, 0.5), 1000.0, 1e-9); /* rank 1: 0 + 1000 x 1/1 */
	cr_expect_float_eq(lm_hist_quantile(&s, 0.99), 200e9, 1e-3);
}

struct observer_arg {
	struct lm_hist *h;
	uint64_t base;
};

static void *observer_main(void *arg)
{
	struct observer_arg *a = arg;
	for (uint64_t i = 0; i < 50000; i++)
		lm_hist_observe(a->h, a->base + (i % 7) * 1000);
	return NULL;
}

/* Four threads at once lose nothing: counts, sum and extremes are exact. */
Test(metrics, concurrent_observations_are_all_counted)
{
	struct lm_hist h = {0};
	pthread_t t[4];
	struct observer_arg a[4];
	for (int i = 0; i < 4; i++) {
		a[i] = (struct observer_arg){&h, 1000 + (uint64_t)i};
		pthread_create(&t[i], NULL, observer_main, &a[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	struct lm_hist_snap s;
	lm_hist_snapshot(&h, &s);
	cr_expect_eq(s.count, 200000);
	/* Each thread: 50000 x base + 1000 x (sum of i % 7 over 50000 values). 50000 = 7 x 7142 + 6,
	 * so the residues sum to 7142 x 21 + (0 + 1 + ... + 5) = 149982 + 15 = 149997. */
	uint64_t want = 0;
	for (int i = 0; i < 4; i++)
		want += 50000 * (1000 + (uint64_t)i) + 1000 * 149997ull;
	cr_expect_eq(s.sum_ns, want);
	cr_expect_eq(s.min_ns, 1000);
	cr_expect_eq(s.max_ns, 1003 + 6000);
}

/* ------------------------------------------------------------------ the exposition text */

Test(metrics, counters_gauges_and_labels_are_written_exactly)
{
	struct lm_mtext t = {0};
	lm_mtext_counter(&t, "x_total", "Things.\nSecond \\ line", 42);
	lm_mtext_gauge(&t, "g", "A gauge.", 0.25);
	lm_mtext_family(&t, "up", "gauge", "Up or not.");
	char lb[64];
	cr_assert(lm_mtext_label(lb, sizeof lb, "worker", "w\"0\\\n"));
	cr_expect_str_eq(lb, "worker=\"w\\\"0\\\\\\n\"");
	lm_mtext_sample(&t, "up", lb, 1);
	lm_mtext_sample(&t, "up", "worker=\"w1\"", 0);
	char *s = lm_mtext_take(&t);
	cr_assert_not_null(s);
	cr_expect_str_eq(s, "# HELP x_total Things.\\nSecond \\\\ line\n"
			    "# TYPE x_total counter\n"
			    "x_total 42\n"
			    "# HELP g A gauge.\n"
			    "# TYPE g gauge\n"
			    "g 0.25\n"
			    "# HELP up Up or not.\n"
			    "# TYPE up gauge\n"
			    "up{worker=\"w\\\"0\\\\\\n\"} 1\n"
			    "up{worker=\"w1\"} 0\n");
	struct prom_doc d;
	char err[256] = "";
	cr_expect_eq(prom_parse(s, &d, err, sizeof err), 0, "%s", err);
	cr_expect_eq(d.n, 4);
	prom_doc_free(&d);
	free(s);
	/* A label that does not fit is refused, and the buffer left empty. */
	cr_expect_not(lm_mtext_label(lb, 12, "worker", "a-long-name"));
	cr_expect_str_eq(lb, "");
}

/* 2 x 1.5 us and 1 x 3 s: every bound from 1 us to 100 s, cumulative, in seconds. */
Test(metrics, a_histogram_is_written_cumulative_in_seconds)
{
	struct lm_hist h = {0};
	struct lm_hist_snap snap;
	observe_n(&h, 1500, 2);
	lm_hist_observe(&h, 3000000000ull);
	lm_hist_snapshot(&h, &snap);
	struct lm_mtext t = {0};
	lm_mtext_family(&t, "lat_seconds", "histogram", "Latency.");
	lm_mtext_hist(&t, "lat_seconds", "stage=\"a\"", &snap);
	char *s = lm_mtext_take(&t);
	cr_assert_not_null(s);
	static const char *const le[] = {
		"0.000001", "0.000002", "0.000005", "0.00001", "0.00002", "0.00005", "0.0001",
		"0.0002",   "0.0005",   "0.001",    "0.002",   "0.005",   "0.01",    "0.02",
		"0.05",     "0.1",      "0.2",      "0.5",     "1",       "2",       "5",
		"10",       "20",       "50",       "100",     "+Inf"};
	char want[4096];
	size_t at = (size_t)snprintf(want, sizeof want,
				     "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n");
	for (int i = 0; i < 26; i++) {
		/* 0 up to 1 us, 2 from 2 us, 3 from 5 s on. */
		int cum = i == 0 ? 0 : i < 20 ? 2 : 3;
		at += (size_t)snprintf(want + at, sizeof want - at,
				       "lat_seconds_bucket{stage=\"a\",le=\"%s\"} %d\n", le[i],
				       cum);
	}
	snprintf(want + at, sizeof want - at,
		 "lat_seconds_sum{stage=\"a\"} 3.000003\nlat_seconds_count{stage=\"a\"} 3\n");
	cr_expect_str_eq(s, want);

	struct prom_doc d;
	char err[256] = "";
	cr_assert_eq(prom_parse(s, &d, err, sizeof err), 0, "%s", err);
	const struct prom_sample *c = prom_find(&d, "lat_seconds_count", "stage=\"a\"");
	const struct prom_sample *inf =
		prom_find(&d, "lat_seconds_bucket", "stage=\"a\",le=\"+Inf\"");
	cr_assert(c != NULL && inf != NULL);
	cr_expect_eq(c->value, 3.0);
	cr_expect_eq(inf->value, 3.0);
	prom_doc_free(&d);
	free(s);
}

Test(metrics, a_histogram_without_labels)
{
	struct lm_hist h = {0};
	struct lm_hist_snap snap;
	lm_hist_snapshot(&h, &snap);
	struct lm_mtext t = {0};
	lm_mtext_family(&t, "empty_seconds", "histogram", "Nothing yet.");
	lm_mtext_hist(&t, "empty_seconds", NULL, &snap);
	char *s = lm_mtext_take(&t);
	cr_assert_not_null(s);
	cr_expect_not_null(strstr(s, "\nempty_seconds_bucket{le=\"0.000001\"} 0\n"));
	cr_expect_not_null(strstr(s, "\nempty_seconds_bucket{le=\"+Inf\"} 0\n"));
	cr_expect_not_null(strstr(s, "\nempty_seconds_sum 0\nempty_seconds_count 0\n"));
	struct prom_doc d;
	char err[256] = "";
	cr_expect_eq(prom_parse(s, &d, err, sizeof err), 0, "%s", err);
	prom_doc_free(&d);
	free(s);
}

/* The reader the integration tests rely on refuses what the format or the project forbids. */
Test(metrics, the_reader_refuses_broken_pages)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"# TYPE a counter\na 1", "newline"},
		{"a 1\n", "no TYPE"},
		{"# TYPE a counter\na -1\n", "is -1"},
		{"# TYPE a counter\n# TYPE a counter\na 1\n", "second TYPE"},
		{"# TYPE a counter\na 1\n# TYPE a gauge\n", "second TYPE"},
		{"# TYPE a gauge\na 1\na 2\n", "twice"},
		{"# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 2\n", "one group"},
		{"# TYPE a gauge\na{x=\"\\q\"} 1\n", "bad escape"},
		{"# TYPE a gauge\na{x=1} 1\n", "not quoted"},
		{"# TYPE a gauge\na one\n", "bad value"},
		{"# TYPE a gauge\n1a 1\n", "bad metric name"},
		{"# TYPE a nonsense\n", "unknown type"},
		{"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"
		 "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
		 "not cumulative"},
		{"# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
		 "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
		 "does not increase"},
		{"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
		{"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "_count 3"},
		{"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n", "_sum"},
		{"# TYPE h histogram\nh_bucket 2\nh_sum 1\nh_count 2\n", "valid le"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct prom_doc d;
		char err[256] = "";
		cr_expect_eq(prom_parse(bad[i].text, &d, err, sizeof err), -1, "accepted: %s",
			     bad[i].text);
		cr_expect_not_null(strstr(err, bad[i].why), "page %zu: '%s' does not say '%s'", i,
				   err, bad[i].why);
		prom_doc_free(&d);
	}
	/* And accepts what the format allows: comments, blank lines, timestamps, escapes. */
	struct prom_doc d;
	char err[256] = "";
	cr_expect_eq(prom_parse("# a comment\n\n# HELP a Help.\n# TYPE a gauge\n"
				"a{x=\"q\\\"\\\\\\n\"} +Inf 1700000000\n",
				&d, err, sizeof err),
		     0, "%s", err);
	prom_doc_free(&d);
}

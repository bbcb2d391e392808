/* metrics.c — histograms and the Prometheus text format. See metrics.h. */
#include "common/base/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const uint64_t LM_HIST_BOUNDS_NS[LM_HIST_NBOUNDS] = {
	1000ull,         2000ull,        5000ull,        /* 1, 2, 5 us */
	10000ull,        20000ull,       50000ull,       /* 10 us */
	100000ull,       200000ull,      500000ull,      /* 100 us */
	1000000ull,      2000000ull,     5000000ull,     /* 1 ms */
	10000000ull,     20000000ull,    50000000ull,    /* 10 ms */
	100000000ull,    200000000ull,   500000000ull,   /* 100 ms */
	1000000000ull,   2000000000ull,  5000000000ull,  /* 1 s */
	10000000000ull,  20000000000ull, 50000000000ull, /* 10 s */
	100000000000ull,                                 /* 100 s */
};

/* ------------------------------------------------------------------ histograms */

int lm_hist_bucket_of(uint64_t ns)
{
	int lo = 0, hi = LM_HIST_NBOUNDS; /* the answer is in [lo, hi] */
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (ns <= LM_HIST_BOUNDS_NS[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static void hist_raise(_Atomic uint64_t *at, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(at, memory_order_relaxed);
	while (v > cur && !atomic_compare_exchange_weak_explicit(at, &cur, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

void lm_hist_observe(struct lm_hist *h, uint64_t ns)
{
	/* The sum first: a snapshot reads the buckets before the sum, so whatever it counts is in
	 * its sum. */
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_release);
	hist_raise(&h->max_ns, ns);
	hist_raise(&h->inv_min_ns, ~ns);
	atomic_fetch_add_explicit(&h->bucket[lm_hist_bucket_of(ns)], 1, memory_order_release);
}

void lm_hist_snapshot(const struct lm_hist *h, struct lm_hist_snap *s)
{
	/* C11's atomic_load takes a pointer to non-const; reading does not modify. */
	struct lm_hist *m = (struct lm_hist *)h;
	memset(s, 0, sizeof *s);
	for (int i = 0; i < LM_HIST_NBUCKETS; i++) {
		s->bucket[i] = atomic_load_explicit(&m->bucket[i], memory_order_acquire);
		s->count += s->bucket[i];
	}
	s->sum_ns = atomic_load_explicit(&m->sum_ns, memory_order_acquire);
	if (s->count > 0) {
		s->max_ns = atomic_load_explicit(&m->max_ns, memory_order_relaxed);
		s->min_ns = ~atomic_load_explicit(&m->inv_min_ns, memory_order_relaxed);
		if (s->min_ns > s->max_ns) /* a racing first observation: not both seen yet */
			s->min_ns = s->max_ns;
	}
}

double lm_hist_quantile(const struct lm_hist_snap *s, double q)
{
	if (s->count == 0)
		return 0;
	q = q < 0 ? 0 : q > 1 ? 1 : q;
	double rank = q * (double)s->count;
	uint64_t below = 0; /* observations in the buckets before i */
	double est = (double)s->max_ns;
	for (int i = 0; i < LM_HIST_NBUCKETS; i++) {
		uint64_t n = s->bucket[i];
		if (n == 0 || (double)(below + n) < rank) {
			below += n;
			continue;
		}
		if (i == LM_HIST_NBOUNDS)
			break; /* the +Inf bucket: the largest value observed */
		double lo = i == 0 ? 0.0 : (double)LM_HIST_BOUNDS_NS[i - 1];
		double hi = (double)LM_HIST_BOUNDS_NS[i];
		est = lo + (hi - lo) * ((rank - (double)below) / (double)n);
		break;
	}
	if (est < (double)s->min_ns)
		est = (double)s->min_ns;
	if (est > (double)s->max_ns)
		est = (double)s->max_ns;
	return est;
}

/* ------------------------------------------------------------------ exposition text */

static void mtext_printf(struct lm_mtext *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void mtext_printf(struct lm_mtext *t, const char *fmt, ...)
{
	if (t->oom)
		return;
	va_list ap;
	va_start(ap, fmt);
	t->oom = lm_buf_vprintf(&t->b, fmt, ap) != 0;
	va_end(ap);
}

/* A number as Prometheus reads it: integers without a fraction, others with 15 significant
 * digits (every decimal of up to 15 digits prints as written). */
static void mtext_number(char *buf, size_t cap, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "NaN");
	else if (isinf(v))
		snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) < 9007199254740992.0)
		snprintf(buf, cap, "%.0f", v);
	else
		snprintf(buf, cap, "%.15g", v);
}

/* Nanoseconds as decimal seconds, without trailing zeros: 1000 -> "0.000001", 2e9 -> "2". */
static void mtext_seconds(char *buf, size_t cap, uint64_t ns)
{
	int n = snprintf(buf, cap, "%llu.%09llu", (unsigned long long)(ns / 1000000000ull),
			 (unsigned long long)(ns % 1000000000ull));
	if (n <= 0 || (size_t)n >= cap)
		return;
	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && buf[n - 1] == '.')
		buf[--n] = '\0';
}

void lm_mtext_family(struct lm_mtext *t, const char *name, const char *type, const char *help)
{
	/* HELP text escapes backslash and newline (the format's only two). */
	mtext_printf(t, "# HELP %s ", name);
	for (const char *c = help; *c; c++) {
		if (*c == '\\')
			mtext_printf(t, "\\\\");
		else if (*c == '\n')
			mtext_printf(t, "\\n");
		else
			mtext_printf(t, "%c", *c);
	}
	mtext_printf(t, "\n# TYPE %s %s\n", name, type);
}

void lm_mtext_sample(struct lm_mtext *t, const char *name, const char *labels, double value)
{
	char num[64];
	mtext_number(num, sizeof num, value);
	if (labels != NULL && labels[0] != '\0')
		mtext_printf(t, "%s{%s} %s\n", name, labels, num);
	else
		mtext_printf(t, "%s %s\n", name, num);
}

void lm_mtext_counter(struct lm_mtext *t, const char *name, const char *help, uint64_t value)
{
	lm_mtext_family(t, name, "counter", help);
	mtext_printf(t, "%s %llu\n", name, (unsigned long long)value);
}

void lm_mtext_gauge(struct lm_mtext *t, const char *name, const char *help, double value)
{
	lm_mtext_family(t, name, "gauge", help);
	lm_mtext_sample(t, name, NULL, value);
}

void lm_mtext_hist(struct lm_mtext *t, const char *name, const char *labels,
		   const struct lm_hist_snap *s)
{
	const char *sep = labels != NULL && labels[0] != '\0' ? "," : "";
	const char *lb = labels != NULL ? labels : "";
	uint64_t cum = 0;
	char le[32];
	for (int i = 0; i < LM_HIST_NBOUNDS; i++) {
		cum += s->bucket[i];
		mtext_seconds(le, sizeof le, LM_HIST_BOUNDS_NS[i]);
		mtext_printf(t, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, lb, sep, le,
			     (unsigned long long)cum);
	}
	cum += s->bucket[LM_HIST_NBOUNDS];
	mtext_printf(t, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lb, sep,
		     (unsigned long long)cum);
	mtext_seconds(le, sizeof le, s->sum_ns);
	if (lb[0] != '\0') {
		mtext_printf(t, "%s_sum{%s} %s\n", name, lb, le);
		mtext_printf(t, "%s_count{%s} %llu\n", name, lb, (unsigned long long)cum);
	} else {
		mtext_printf(t, "%s_sum %s\n", name, le);
		mtext_printf(t, "%s_count %llu\n", name, (unsigned long long)cum);
	}
}

bool lm_mtext_label(char *dst, size_t cap, const char *key, const char *value)
{
	size_t at = 0;
	int n = snprintf(dst, cap, "%s=\"", key);
	if (n < 0 || (size_t)n >= cap) {
		if (cap > 0)
			dst[0] = '\0';
		return false;
	}
	at = (size_t)n;
	for (const char *c = value; *c; c++) {
		const char *esc = *c == '\\'   ? "\\\\"
				  : *c == '"'  ? "\\\""
				  : *c == '\n' ? "\\n"
					       : NULL;
		size_t len = esc ? 2 : 1;
		if (at + len + 2 > cap) {
			dst[0] = '\0';
			return false;
		}
		memcpy(dst + at, esc ? esc : c, len);
		at += len;
	}
	if (at + 2 > cap) {
		dst[0] = '\0';
		return false;
	}
	dst[at++] = '"';
	dst[at] = '\0';
	return true;
}

char *lm_mtext_take(struct lm_mtext *t)
{
	char *p = t->oom ? NULL : t->b.p;
	if (p == NULL && !t->oom)
		p = calloc(1, 1); /* an empty page */
	if (t->oom)
		lm_buf_fini(&t->b);
	memset(t, 0, sizeof *t);
	return p;
}

void lm_mtext_fini(struct lm_mtext *t)
{
	if (t == NULL)
		return;
	lm_buf_fini(&t->b);
	memset(t, 0, sizeof *t);
}

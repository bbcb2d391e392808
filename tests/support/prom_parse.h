/* prom_parse.h — a strict reader of the Prometheus text exposition format 0.0.4, for the tests:
 * the unit test of common/base/metrics.h and the integration tests' check of live /metrics pages
 * (tests/integration/prom_check.c).
 *
 * It is written from the format's specification, independently of the writer it checks, and
 * is stricter than Prometheus where the project promises more:
 *   - the page ends with a newline; every line is a comment, blank, or a sample;
 *   - `# HELP` and `# TYPE` at most once per family, TYPE before the family's first sample, type
 *     one of counter, gauge, histogram, summary, untyped; every sample belongs to a family with
 *     a TYPE (histograms through their _bucket, _sum and _count samples);
 *   - names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*, label values are
 *     quoted with only \\, \" and \n escapes; values are floats, +Inf, -Inf or NaN;
 *   - a family's samples are one contiguous group; no sample (name and labels) appears twice;
 *   - counters are not negative;
 *   - per histogram and label set: `le` on every bucket, bounds strictly increasing and ending
 *     at +Inf, cumulative counts whole and non-decreasing, a _sum, and a _count equal to the
 *     +Inf bucket.
 */
#ifndef LM_TESTS_PROM_PARSE_H
#define LM_TESTS_PROM_PARSE_H

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROM_NAME_MAX  128
#define PROM_LABEL_MAX 512

struct prom_sample {
	char name[PROM_NAME_MAX];
	char labels[PROM_LABEL_MAX]; /* as written inside the braces, "" for none */
	char group[PROM_LABEL_MAX];  /* the labels without le */
	char le[32];                 /* the le label's value, "" when none */
	double value;
	int family; /* index into prom_doc.fam */
	int line;
};

struct prom_family {
	char name[PROM_NAME_MAX];
	char type[16]; /* "" until its TYPE line */
	bool help;
	bool ended; /* its group of samples is over */
	int n_samples;
};

struct prom_doc {
	struct prom_sample *s;
	int n, cap;
	struct prom_family *fam;
	int nf, capf;
};

static inline void prom_doc_free(struct prom_doc *d)
{
	free(d->s);
	free(d->fam);
	memset(d, 0, sizeof *d);
}

static inline int prom_err(char *err, size_t cap, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int prom_err(char *err, size_t cap, int line, const char *fmt, ...)
{
	int n = snprintf(err, cap, "line %d: ", line);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < cap)
		vsnprintf(err + n, cap - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static inline bool prom_name_ok(const char *s, bool label)
{
	if (*s == '\0' || isdigit((unsigned char)*s))
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && (label || *s != ':'))
			return false;
	return true;
}

static inline int prom_family_find(const struct prom_doc *d, const char *name)
{
	for (int i = 0; i < d->nf; i++)
		if (strcmp(d->fam[i].name, name) == 0)
			return i;
	return -1;
}

static inline int prom_family_get(struct prom_doc *d, const char *name)
{
	int i = prom_family_find(d, name);
	if (i >= 0)
		return i;
	if (d->nf == d->capf) {
		int cap = d->capf ? 2 * d->capf : 32;
		struct prom_family *f = realloc(d->fam, (size_t)cap * sizeof *f);
		if (f == NULL)
			return -1;
		d->fam = f;
		d->capf = cap;
	}
	memset(&d->fam[d->nf], 0, sizeof d->fam[0]);
	snprintf(d->fam[d->nf].name, PROM_NAME_MAX, "%s", name);
	return d->nf++;
}

static inline bool prom_value(const char *s, double *out)
{
	if (strcmp(s, "+Inf") == 0 || strcmp(s, "Inf") == 0) {
		*out = INFINITY;
		return true;
	}
	if (strcmp(s, "-Inf") == 0) {
		*out = -INFINITY;
		return true;
	}
	if (strcmp(s, "NaN") == 0) {
		*out = NAN;
		return true;
	}
	char *end;
	if (*s == '\0' || isspace((unsigned char)*s))
		return false;
	*out = strtod(s, &end);
	/* strtod also reads "inf", "nan" and hex floats; the format spells those differently. */
	return *end == '\0' && !isinf(*out) && !isnan(*out) && strpbrk(s, "xXnN") == NULL;
}

/* Parses the labels at *pp (just past '{') up to '}', filling labels/group/le. */
static inline int prom_labels(const char **pp, struct prom_sample *s, char *err, size_t cap,
			      int line)
{
	const char *p = *pp;
	size_t at = 0, gat = 0;
	char names[16][64];
	int n_names = 0;
	while (*p != '}') {
		char lname[64], val[256];
		size_t k = 0, v = 0;
		while (*p != '=' && *p != '\0' && *p != '}' && k + 1 < sizeof lname)
			lname[k++] = *p++;
		lname[k] = '\0';
		if (*p != '=' || !prom_name_ok(lname, true))
			return prom_err(err, cap, line, "bad label name '%s'", lname);
		for (int i = 0; i < n_names; i++)
			if (strcmp(names[i], lname) == 0)
				return prom_err(err, cap, line, "label '%s' twice", lname);
		if (n_names < 16)
			snprintf(names[n_names++], 64, "%s", lname);
		if (*++p != '"')
			return prom_err(err, cap, line, "label '%s': value not quoted", lname);
		const char *start = ++p;
		while (*p != '"') {
			char c = *p;
			if (c == '\0' || c == '\n')
				return prom_err(err, cap, line, "label '%s': unterminated", lname);
			if (c == '\\') {
				c = *++p;
				if (c == 'n')
					c = '\n';
				else if (c != '\\' && c != '"')
					return prom_err(err, cap, line, "label '%s': bad escape",
							lname);
			}
			if (v + 1 < sizeof val)
				val[v++] = c;
			p++;
		}
		val[v] = '\0';
		size_t raw = (size_t)(p - start);
		p++; /* the closing quote */
		int w = snprintf(s->labels + at, sizeof s->labels - at, "%s%s=\"%.*s\"",
				 at ? "," : "", lname, (int)raw, start);
		if (w < 0 || (size_t)w >= sizeof s->labels - at)
			return prom_err(err, cap, line, "labels too long");
		at += (size_t)w;
		if (strcmp(lname, "le") == 0) {
			if (strlen(val) >= sizeof s->le)
				return prom_err(err, cap, line, "le value too long");
			memcpy(s->le, val, strlen(val) + 1);
		} else {
			w = snprintf(s->group + gat, sizeof s->group - gat, "%s%s=\"%.*s\"",
				     gat ? "," : "", lname, (int)raw, start);
			if (w < 0 || (size_t)w >= sizeof s->group - gat)
				return prom_err(err, cap, line, "labels too long");
			gat += (size_t)w;
		}
		if (*p == ',')
			p++;
		else if (*p != '}')
			return prom_err(err, cap, line, "expected ',' or '}' after a label");
	}
	*pp = p + 1;
	return 0;
}

static inline int prom_check_histograms(const struct prom_doc *d, char *err, size_t cap)
{
	for (int f = 0; f < d->nf; f++) {
		const struct prom_family *fam = &d->fam[f];
		if (strcmp(fam->type, "histogram") != 0)
			continue;
		char bname[PROM_NAME_MAX + 8], sname[PROM_NAME_MAX + 8], cname[PROM_NAME_MAX + 8];
		snprintf(bname, sizeof bname, "%s_bucket", fam->name);
		snprintf(sname, sizeof sname, "%s_sum", fam->name);
		snprintf(cname, sizeof cname, "%s_count", fam->name);
		/* Each label group: the buckets in order, then its sum and count. */
		for (int i = 0; i < d->n; i++) {
			const struct prom_sample *g = &d->s[i];
			if (g->family != f)
				continue;
			if (strcmp(g->name, bname) != 0 && strcmp(g->name, sname) != 0 &&
			    strcmp(g->name, cname) != 0)
				return prom_err(err, cap, g->line,
						"'%s' is not a sample of histogram %s", g->name,
						fam->name);
			bool first = true;
			for (int j = 0; j < i; j++)
				first &= !(d->s[j].family == f &&
					   strcmp(d->s[j].group, g->group) == 0);
			if (!first)
				continue;
			double last_le = -INFINITY, last_n = 0, inf_n = -1, count = -1;
			bool sum = false;
			int n_buckets = 0;
			for (int j = i; j < d->n; j++) {
				const struct prom_sample *s = &d->s[j];
				if (s->family != f || strcmp(s->group, g->group) != 0)
					continue;
				if (strcmp(s->name, bname) == 0) {
					double le;
					if (s->le[0] == '\0' || !prom_value(s->le, &le))
						return prom_err(err, cap, s->line,
								"bucket without a valid le");
					if (!(le > last_le))
						return prom_err(err, cap, s->line,
								"le %s does not increase", s->le);
					if (s->value < last_n || s->value != floor(s->value))
						return prom_err(err, cap, s->line,
								"bucket count %g after %g is not "
								"cumulative",
								s->value, last_n);
					last_le = le;
					last_n = s->value;
					n_buckets++;
					if (isinf(le))
						inf_n = s->value;
				} else if (strcmp(s->name, sname) == 0) {
					sum = true;
				} else {
					count = s->value;
				}
			}
			if (n_buckets == 0 || inf_n < 0 || !isinf(last_le))
				return prom_err(err, cap, g->line,
						"histogram %s{%s} has no +Inf bucket", fam->name,
						g->group);
			if (!sum || count < 0)
				return prom_err(err, cap, g->line,
						"histogram %s{%s} lacks its _sum or _count",
						fam->name, g->group);
			if (count != inf_n)
				return prom_err(
					err, cap, g->line,
					"histogram %s{%s}: _count %g but the +Inf bucket %g",
					fam->name, g->group, count, inf_n);
		}
	}
	return 0;
}

/* Parses and checks text; on failure returns -1 with err naming the line. */
static inline int prom_parse(const char *text, struct prom_doc *d, char *err, size_t cap)
{
	memset(d, 0, sizeof *d);
	size_t len = strlen(text);
	if (len > 0 && text[len - 1] != '\n')
		return prom_err(err, cap, 0, "the page does not end with a newline");
	int line = 0, current = -1;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		char buf[2048];
		size_t n = (size_t)(nl - p);
		line++;
		if (n >= sizeof buf)
			return prom_err(err, cap, line, "line too long");
		memcpy(buf, p, n);
		buf[n] = '\0';
		p = nl + 1;
		if (n == 0)
			continue;
		if (buf[0] == '#') {
			char kw[8], name[PROM_NAME_MAX], rest[1024] = "";
			if (sscanf(buf, "# %7s %127s %1023[^\n]", kw, name, rest) < 2 ||
			    (strcmp(kw, "HELP") != 0 && strcmp(kw, "TYPE") != 0))
				continue; /* a plain comment */
			if (!prom_name_ok(name, false))
				return prom_err(err, cap, line, "bad metric name '%s'", name);
			int f = prom_family_get(d, name);
			if (f < 0)
				return prom_err(err, cap, line, "out of memory");
			struct prom_family *fam = &d->fam[f];
			if (strcmp(kw, "HELP") == 0) {
				if (fam->help)
					return prom_err(err, cap, line, "second HELP for %s", name);
				fam->help = true;
				continue;
			}
			if (fam->type[0] != '\0')
				return prom_err(err, cap, line, "second TYPE for %s", name);
			if (fam->n_samples > 0)
				return prom_err(err, cap, line, "TYPE for %s after its samples",
						name);
			static const char *const types[] = {"counter", "gauge", "histogram",
							    "summary", "untyped"};
			bool known = false;
			for (size_t t = 0; t < 5; t++)
				known |= strcmp(rest, types[t]) == 0;
			if (!known)
				return prom_err(err, cap, line, "unknown type '%s'", rest);
			snprintf(fam->type, sizeof fam->type, "%s", rest);
			continue;
		}
		/* A sample: name [{labels}] value [timestamp]. */
		if (d->n == d->cap) {
			int c = d->cap ? 2 * d->cap : 128;
			struct prom_sample *s = realloc(d->s, (size_t)c * sizeof *s);
			if (s == NULL)
				return prom_err(err, cap, line, "out of memory");
			d->s = s;
			d->cap = c;
		}
		struct prom_sample *s = &d->s[d->n];
		memset(s, 0, sizeof *s);
		s->line = line;
		const char *q = buf;
		size_t k = 0;
		while (*q && *q != '{' && *q != ' ' && k + 1 < sizeof s->name)
			s->name[k++] = *q++;
		if (!prom_name_ok(s->name, false))
			return prom_err(err, cap, line, "bad metric name '%s'", s->name);
		if (*q == '{') {
			q++;
			if (prom_labels(&q, s, err, cap, line) != 0)
				return -1;
		}
		if (*q != ' ')
			return prom_err(err, cap, line, "no value after %s", s->name);
		while (*q == ' ')
			q++;
		char val[64] = "", ts[32] = "";
		if (sscanf(q, "%63s %31s", val, ts) < 1 || !prom_value(val, &s->value))
			return prom_err(err, cap, line, "bad value '%s'", q);
		/* Its family: by its own name, or a histogram's (summary's) suffixed sample. */
		int f = prom_family_find(d, s->name);
		if (f < 0 || d->fam[f].type[0] == '\0') {
			static const char *const sfx[] = {"_bucket", "_sum", "_count"};
			for (size_t i = 0; i < 3 && (f < 0 || d->fam[f].type[0] == '\0'); i++) {
				size_t nl2 = strlen(s->name), sl = strlen(sfx[i]);
				if (nl2 <= sl || strcmp(s->name + nl2 - sl, sfx[i]) != 0)
					continue;
				char base[PROM_NAME_MAX];
				snprintf(base, sizeof base, "%.*s", (int)(nl2 - sl), s->name);
				int b = prom_family_find(d, base);
				if (b >= 0 && (strcmp(d->fam[b].type, "histogram") == 0 ||
					       strcmp(d->fam[b].type, "summary") == 0))
					f = b;
			}
		}
		if (f < 0 || d->fam[f].type[0] == '\0')
			return prom_err(err, cap, line, "%s has no TYPE", s->name);
		if (d->fam[f].ended)
			return prom_err(err, cap, line, "samples of %s are not one group",
					d->fam[f].name);
		if (current >= 0 && current != f)
			d->fam[current].ended = true;
		current = f;
		s->family = f;
		d->fam[f].n_samples++;
		if (strcmp(d->fam[f].type, "counter") == 0 && !(s->value >= 0))
			return prom_err(err, cap, line, "counter %s is %g", s->name, s->value);
		for (int i = 0; i < d->n; i++)
			if (strcmp(d->s[i].name, s->name) == 0 &&
			    strcmp(d->s[i].labels, s->labels) == 0)
				return prom_err(err, cap, line, "%s{%s} appears twice", s->name,
						s->labels);
		d->n++;
	}
	return prom_check_histograms(d, err, cap);
}

/* The sample with this name and exactly these labels (as written), or NULL. */
static inline const struct prom_sample *prom_find(const struct prom_doc *d, const char *name,
						  const char *labels)
{
	for (int i = 0; i < d->n; i++)
		if (strcmp(d->s[i].name, name) == 0 &&
		    strcmp(d->s[i].labels, labels ? labels : "") == 0)
			return &d->s[i];
	return NULL;
}

#endif

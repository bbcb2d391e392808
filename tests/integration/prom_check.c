/* prom_check — reads a Prometheus text page (0.0.4) on stdin, checks it with the tests' strict
 * reader (tests/support/prom_parse.h: format, TYPE before samples, cumulative buckets ending at
 * +Inf, _count equal to the +Inf bucket, ...), and prints every sample as one line
 * `name{labels} value` (`name value` without labels) for the shell tests to look values up.
 * Exit status 1, with the line and the reason on stderr, when the page is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/prom_parse.h"

int main(void)
{
	size_t len = 0, cap = 1 << 16;
	char *text = malloc(cap);
	if (text == NULL)
		return 1;
	for (;;) {
		size_t n = fread(text + len, 1, cap - len - 1, stdin);
		len += n;
		if (n == 0)
			break;
		if (len + 1 == cap) {
			char *p = realloc(text, cap * 2);
			if (p == NULL)
				return 1;
			text = p;
			cap *= 2;
		}
	}
	text[len] = '\0';
	if (strlen(text) != len) {
		fprintf(stderr, "prom_check: the page contains a NUL byte\n");
		return 1;
	}
	struct prom_doc d;
	char err[512] = "";
	if (len == 0 || prom_parse(text, &d, err, sizeof err) != 0) {
		fprintf(stderr, "prom_check: %s\n", len == 0 ? "empty page" : err);
		prom_doc_free(&d);
		free(text);
		return 1;
	}
	for (int i = 0; i < d.n; i++) {
		const struct prom_sample *s = &d.s[i];
		if (s->labels[0] != '\0')
			printf("%s{%s} %.17g\n", s->name, s->labels, s->value);
		else
			printf("%s %.17g\n", s->name, s->value);
	}
	prom_doc_free(&d);
	free(text);
	return 0;
}

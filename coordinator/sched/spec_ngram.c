/* spec_ngram.c — drafts by n-gram lookup over a sequence's own tokens. See spec.h.
 *
 * For the sequence tok[0..n): the longest m in [ngram_max, ngram_min] such that the suffix
 * tok[n - m .. n) occurred earlier, ending before n - 1 so that some token followed it; the
 * draft is what followed its latest such occurrence, up to max tokens (which may run into the
 * suffix itself: a repeating pattern continues). The scan is O(n x m) per call on the
 * scheduler's thread: 4096 positions and m = 3 are a few microseconds.
 */
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/spec.h"

struct spec_ngram {
	int32_t min, max;
};

static int32_t ngram_propose(void *ctx, int32_t slot, const int32_t *tok, int32_t n, int32_t max,
			     int32_t *out)
{
	const struct spec_ngram *g = ctx;
	(void)slot;
	for (int32_t m = g->max; m >= g->min; m--) {
		if (n < m + 1)
			continue;
		const int32_t *suffix = tok + n - m;
		/* The latest earlier occurrence first: recent text predicts best. */
		for (int32_t j = n - m - 1; j >= 0; j--) {
			if (memcmp(tok + j, suffix, (size_t)m * sizeof *tok) != 0)
				continue;
			int32_t k = n - (j + m) < max ? n - (j + m) : max;
			memcpy(out, tok + j + m, (size_t)k * sizeof *out);
			return k;
		}
	}
	return 0;
}

static void ngram_fini(void *ctx)
{
	free(ctx);
}

static const struct spec_source_i ngram_iface = {
	.name = "ngram",
	.cheap = true,
	.propose = ngram_propose,
	.release = NULL,
	.fini = ngram_fini,
};

int spec_ngram_init(struct spec_source *s, int32_t ngram_min, int32_t ngram_max, lm_diag *d)
{
	s->iface = NULL;
	s->ctx = NULL;
	if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 8)
		return lm_fail(d, LM_EINVAL,
			       "n-gram lookup needs 1 <= min <= max <= 8 (got %d, %d)", ngram_min,
			       ngram_max);
	struct spec_ngram *g = malloc(sizeof *g);
	if (g == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	g->min = ngram_min;
	g->max = ngram_max;
	s->iface = &ngram_iface;
	s->ctx = g;
	return 0;
}

void spec_source_fini(struct spec_source *s)
{
	if (s != NULL && s->iface != NULL)
		s->iface->fini(s->ctx);
	if (s != NULL) {
		s->iface = NULL;
		s->ctx = NULL;
	}
}

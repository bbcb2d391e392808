#include "coordinator/cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"

void lm_gen_args_default(struct lm_gen_args *g, const char *cmd)
{
	memset(g, 0, sizeof *g);
	g->cmd = cmd;
	g->n_predict = 256;
	g->sampling = LM_SAMPLING_DEFAULT;
	g->ctk = g->ctv = LM_F32;
	g->ctk_swa = g->ctv_swa = -1;
}

struct kv_types lm_gen_args_kv_types(const struct lm_gen_args *g)
{
	struct kv_types t = kv_types_uniform(g->ctk, g->ctv);
	if (g->ctk_swa >= 0)
		t.swa.k = (enum lm_dtype)g->ctk_swa;
	if (g->ctv_swa >= 0)
		t.swa.v = (enum lm_dtype)g->ctv_swa;
	return t;
}

/* A cache type for option `name`: 0, or 2 after the usage error. */
static int cli_kv_type(const struct lm_gen_args *g, const char *name, const char *arg, int *out)
{
	int t = lm_dtype_parse(arg);
	if (t < 0 || !kv_type_supported((enum lm_dtype)t))
		return lm_cli_usage_error(g->cmd, "%s expects %s, got '%s'", name, kv_type_names(),
					  arg);
	*out = t;
	return 0;
}

int lm_cli_int(const char *s, int64_t lo, int64_t hi, int32_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = (int32_t)v;
	return 0;
}

int lm_cli_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (*s == '-' || *s == '\0')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

int lm_cli_float(const char *s, double lo, double hi, float *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi)
		return -1;
	*out = (float)v;
	return 0;
}

int lm_cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "layermesh %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see 'layermesh %s --help')\n", cmd);
	return 2;
}

int lm_gen_args_parse(struct lm_gen_args *g, int opt, const char *arg)
{
	switch (opt) {
	case 'p':
		g->prompt = arg;
		return 0;
	case 'n':
		if (lm_cli_int(arg, 0, 1 << 20, &g->n_predict) != 0)
			return lm_cli_usage_error(
				g->cmd, "-n expects an integer in [0, 1048576], got '%s'", arg);
		return 0;
	case 't':
		if (lm_cli_float(arg, 0, 100, &g->sampling.temperature) != 0)
			return lm_cli_usage_error(
				g->cmd, "--temp expects a number in [0, 100], got '%s'", arg);
		return 0;
	case 'k':
		if (lm_cli_int(arg, 0, 1 << 30, &g->sampling.top_k) != 0)
			return lm_cli_usage_error(
				g->cmd, "--top-k expects a non-negative integer, got '%s'", arg);
		return 0;
	case 'P':
		if (lm_cli_float(arg, 1e-9, 1, &g->sampling.top_p) != 0)
			return lm_cli_usage_error(
				g->cmd, "--top-p expects a number in (0, 1], got '%s'", arg);
		return 0;
	case 'M':
		if (lm_cli_float(arg, 0, 1, &g->sampling.min_p) != 0)
			return lm_cli_usage_error(
				g->cmd, "--min-p expects a number in [0, 1], got '%s'", arg);
		return 0;
	case 's':
		if (lm_cli_u64(arg, &g->sampling.seed) != 0)
			return lm_cli_usage_error(
				g->cmd, "--seed expects a non-negative integer, got '%s'", arg);
		return 0;
	case 'T':
		if (lm_cli_int(arg, 1, 1024, &g->threads) != 0)
			return lm_cli_usage_error(g->cmd,
						  "--threads expects an integer in [1, 1024], got "
						  "'%s'",
						  arg);
		return 0;
	case 'c':
		if (lm_cli_int(arg, 1, 1 << 24, &g->ctx) != 0)
			return lm_cli_usage_error(
				g->cmd, "--ctx expects a positive integer, got '%s'", arg);
		return 0;
	case 'K':
	case LM_OPT_CTK:
	case LM_OPT_CTV:
	case LM_OPT_CTK_SWA:
	case LM_OPT_CTV_SWA: {
		static const char *const names[] = {"--ctk", "--ctv", "--ctk-swa", "--ctv-swa"};
		int t = 0, rc = cli_kv_type(g, opt == 'K' ? "--kv-type" : names[opt - LM_OPT_CTK],
					    arg, &t);
		if (rc != 0)
			return rc;
		if (opt == 'K' || opt == LM_OPT_CTK)
			g->ctk = (enum lm_dtype)t;
		if (opt == 'K' || opt == LM_OPT_CTV)
			g->ctv = (enum lm_dtype)t;
		if (opt == LM_OPT_CTK_SWA)
			g->ctk_swa = t;
		if (opt == LM_OPT_CTV_SWA)
			g->ctv_swa = t;
		return 0;
	}
	case 'i':
		g->print_ids = true;
		return 0;
	default:
		return lm_cli_usage_error(g->cmd, "unhandled option");
	}
}

int lm_cli_ids(const char *s, int32_t n_vocab, int32_t **ids, size_t *n, lm_diag *d)
{
	size_t cap = 0;
	*n = 0;
	*ids = NULL;
	for (const char *p = s;;) {
		while (*p == ' ' || *p == ',')
			p++;
		if (*p == '\0')
			return 0;
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v >= n_vocab)
			return lm_fail(d, LM_EINVAL, "'%.20s' is not an id in [0, %d)", p, n_vocab);
		int32_t *grown = lm_grow(*ids, &cap, *n + 1, sizeof **ids, 64);
		if (grown == NULL)
			return lm_fail(d, LM_ENOMEM, "out of memory");
		*ids = grown;
		(*ids)[(*n)++] = (int32_t)v;
		p = end;
	}
}

/* cli.h — argument parsing shared by the subcommands that generate text (`run`, `generate`),
 * so the two accept the same flags with the same defaults and the same error messages. */
#ifndef LM_CLI_H
#define LM_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/model/kv_geom.h"
#include "common/model/sampling.h"
#include "common/base/err.h"

struct lm_gen_args {
	const char *cmd; /* "run", "generate": for messages */
	const char *prompt;
	int32_t n_predict; /* -n: tokens to generate at most */
	struct lm_sampling sampling;
	int32_t threads; /* <= 0: every online CPU */
	int32_t ctx;     /* <= 0: the model's context length, capped */
	/* --kv-type, --ctk, --ctv (every layer, or the global ones where --ctk-swa / --ctv-swa
	 * give the sliding layers their own); lm_gen_args_kv_types puts them together. */
	enum lm_dtype ctk, ctv;
	int ctk_swa, ctv_swa; /* -1: as ctk, ctv */
	bool print_ids;       /* --ids */
};

/* getopt_long values of the cache-type options past the single letters. */
enum {
	LM_OPT_CTK = 1001,
	LM_OPT_CTV,
	LM_OPT_CTK_SWA,
	LM_OPT_CTV_SWA,
};

void lm_gen_args_default(struct lm_gen_args *g, const char *cmd);
/* Applies one getopt_long result shared by the generating commands: 'p' --prompt, 'n' -n,
 * 't' --temp, 'k' --top-k, 'P' --top-p, 'M' --min-p, 's' --seed, 'T' --threads, 'c' --ctx,
 * 'K' --kv-type, LM_OPT_CTK --ctk, LM_OPT_CTV --ctv, LM_OPT_CTK_SWA --ctk-swa, LM_OPT_CTV_SWA
 * --ctv-swa, 'i' --ids. Returns 0, or 2 after printing a usage error. */
int lm_gen_args_parse(struct lm_gen_args *g, int opt, const char *arg);
/* The cache types the options chose. */
struct kv_types lm_gen_args_kv_types(const struct lm_gen_args *g);

/* Strict number parsing: the whole string, in range. 0 or -1. */
int lm_cli_int(const char *s, int64_t lo, int64_t hi, int32_t *out);
int lm_cli_u64(const char *s, uint64_t *out);
int lm_cli_float(const char *s, double lo, double hi, float *out);
/* Token ids as "1 2 3" (spaces or commas), each in [0, n_vocab): a malloc'd array. */
int lm_cli_ids(const char *s, int32_t n_vocab, int32_t **ids, size_t *n, lm_diag *d);
/* Prints "layermesh CMD: MESSAGE" and a hint to use --help on stderr; returns 2. */
int lm_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

/* log.h — the process logger: one line per event on stderr.
 *
 * The level and the process tag are set once at start (lm_log_init) and read-only afterwards,
 * the one kind of global the project allows. Lines look like
 *     layermesh-worker[w1] info: mapped 3 layers (1.2 MiB)
 * and are written with a single write(2) so lines from concurrent processes never interleave.
 */
#ifndef LM_LOG_H
#define LM_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

enum lm_log_level {
	LM_LOG_ERROR = 0,
	LM_LOG_WARN = 1,
	LM_LOG_INFO = 2,
	LM_LOG_DEBUG = 3,
};

/* tag: shown in brackets after the program name, may be NULL. Call before any thread starts. */
void lm_log_init(const char *program, const char *tag, enum lm_log_level level);
/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int lm_log_level_parse(const char *s);
enum lm_log_level lm_log_get_level(void);

void lm_log(enum lm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ repeated lines
 *
 * A line that a peer can make the process repeat (a refused message, say) is rate-limited: at
 * most one line per key per interval, and the next one says how many were held back, so that
 * 20,000 malformed messages cost a line a second, not 20,000 lines. Counters (/metrics) keep
 * the exact numbers. The key is the caller's: a hash of the peer and the reason
 * (lm_log_key). A fixed table of LM_LOG_LIMIT_KEYS keys; a new key takes the place of the one
 * logged longest ago. Safe from any thread. */
#define LM_LOG_LIMIT_KEYS 32

struct lm_log_limit {
	pthread_mutex_t mu;
	int64_t interval_ms;
	struct {
		uint64_t key;
		int64_t last_ms; /* when its last line was written; 0: free */
		uint64_t held;   /* lines held back since */
	} slot[LM_LOG_LIMIT_KEYS];
};

/* On caller-owned memory; fini is harmless on a zeroed struct. */
void lm_log_limit_init(struct lm_log_limit *l, int64_t interval_ms);
void lm_log_limit_fini(struct lm_log_limit *l);
/* Whether a line for key may be written now. When it may, *held is how many lines of that key
 * were held back since its last one (for the line to say); when not, the line is counted. */
bool lm_log_limit_pass(struct lm_log_limit *l, uint64_t key, uint64_t *held);
/* A key from a string (a peer's address, a reason) and a number (an error code, a type). */
uint64_t lm_log_key(const char *s, int64_t n);

#define lm_error(...) lm_log(LM_LOG_ERROR, __VA_ARGS__)
#define lm_warn(...)  lm_log(LM_LOG_WARN, __VA_ARGS__)
#define lm_info(...)  lm_log(LM_LOG_INFO, __VA_ARGS__)
#define lm_debug(...) lm_log(LM_LOG_DEBUG, __VA_ARGS__)

#endif

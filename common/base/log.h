/* log.h — the process logger: one line per event on stderr.
 *
 * The level and the process tag are set once at start (lm_log_init) and read-only afterwards,
 * the one kind of global the project allows. Lines look like
 *     layermesh-worker[w1] info: mapped 3 layers (1.2 MiB)
 * and are written with a single write(2) so lines from concurrent processes never interleave.
 */
#ifndef LM_LOG_H
#define LM_LOG_H

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

#define lm_error(...) lm_log(LM_LOG_ERROR, __VA_ARGS__)
#define lm_warn(...)  lm_log(LM_LOG_WARN, __VA_ARGS__)
#define lm_info(...)  lm_log(LM_LOG_INFO, __VA_ARGS__)
#define lm_debug(...) lm_log(LM_LOG_DEBUG, __VA_ARGS__)

#endif

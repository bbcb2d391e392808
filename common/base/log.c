#include "common/base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"

/* Written once by lm_log_init() before threads exist; read-only afterwards. */
static struct {
	char program[64];
	char tag[64];
	enum lm_log_level level;
} log_cfg = {"layermesh", "", LM_LOG_INFO};

static const char *const log_level_names[] = {"error", "warn", "info", "debug"};

void lm_log_init(const char *program, const char *tag, enum lm_log_level level)
{
	if (program != NULL)
		snprintf(log_cfg.program, sizeof log_cfg.program, "%s", program);
	snprintf(log_cfg.tag, sizeof log_cfg.tag, "%s", tag != NULL ? tag : "");
	log_cfg.level = level;
}

int lm_log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, log_level_names[i]) == 0)
			return i;
	return -1;
}

enum lm_log_level lm_log_get_level(void)
{
	return log_cfg.level;
}

void lm_log(enum lm_log_level level, const char *fmt, ...)
{
	char line[1024];
	int n;
	va_list ap;

	if (level > log_cfg.level)
		return;
	if (log_cfg.tag[0] != '\0')
		n = snprintf(line, sizeof line, "%s[%s] %s: ", log_cfg.program, log_cfg.tag,
			     log_level_names[level]);
	else
		n = snprintf(line, sizeof line, "%s %s: ", log_cfg.program, log_level_names[level]);
	if (n < 0 || (size_t)n >= sizeof line)
		n = 0;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof line - 2)
		len = sizeof line - 2;
	line[len++] = '\n';
	/* One write(2) per line; a short write to a dying stderr is not worth retrying. */
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

/* ------------------------------------------------------------------ repeated lines */

void lm_log_limit_init(struct lm_log_limit *l, int64_t interval_ms)
{
	memset(l, 0, sizeof *l);
	pthread_mutex_init(&l->mu, NULL);
	l->interval_ms = interval_ms;
}

void lm_log_limit_fini(struct lm_log_limit *l)
{
	if (l != NULL && l->interval_ms > 0)
		pthread_mutex_destroy(&l->mu);
}

bool lm_log_limit_pass(struct lm_log_limit *l, uint64_t key, uint64_t *held)
{
	int64_t now = lm_now_ms();
	bool pass = true;
	pthread_mutex_lock(&l->mu);
	int at = -1, oldest = 0;
	for (int i = 0; i < LM_LOG_LIMIT_KEYS; i++) {
		if (l->slot[i].last_ms != 0 && l->slot[i].key == key) {
			at = i;
			break;
		}
		if (l->slot[i].last_ms < l->slot[oldest].last_ms)
			oldest = i;
	}
	if (at >= 0 && now - l->slot[at].last_ms < l->interval_ms) {
		l->slot[at].held++;
		pass = false;
	} else {
		if (at < 0) {
			at = oldest;
			l->slot[at].key = key;
			l->slot[at].held = 0;
		}
		*held = l->slot[at].held;
		l->slot[at].held = 0;
		l->slot[at].last_ms = now > 0 ? now : 1;
	}
	pthread_mutex_unlock(&l->mu);
	return pass;
}

uint64_t lm_log_key(const char *s, int64_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; s != NULL && *s != '\0'; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	for (int i = 0; i < 8; i++)
		h = (h ^ (uint8_t)((uint64_t)n >> (8 * i))) * 0x100000001b3ull;
	return h;
}

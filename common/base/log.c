#include "common/base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

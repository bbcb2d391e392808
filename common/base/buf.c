/* buf.c — growing memory. See buf.h. */
#include "common/base/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/err.h"

void *lm_grow(void *p, size_t *cap, size_t need, size_t size, size_t min)
{
	if (need <= *cap && p != NULL)
		return p;
	if (size == 0 || need > SIZE_MAX / size)
		return NULL;
	size_t n = *cap > min ? *cap : (min > 0 ? min : 1);
	while (n < need)
		n = n > SIZE_MAX / 2 ? need : n * 2;
	if (n > SIZE_MAX / size)
		n = need;
	void *q = realloc(p, n * size);
	if (q == NULL)
		return NULL;
	*cap = n;
	return q;
}

int lm_buf_reserve(struct lm_buf *b, size_t extra)
{
	if (extra > SIZE_MAX - 1 - b->len)
		return LM_ENOMEM;
	char *p = lm_grow(b->p, &b->cap, b->len + extra + 1, 1, 256);
	if (p == NULL)
		return LM_ENOMEM;
	b->p = p;
	return 0;
}

int lm_buf_add(struct lm_buf *b, const void *src, size_t n)
{
	if (lm_buf_reserve(b, n) != 0)
		return LM_ENOMEM;
	if (n > 0)
		memcpy(b->p + b->len, src, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int lm_buf_adds(struct lm_buf *b, const char *s)
{
	return lm_buf_add(b, s, strlen(s));
}

int lm_buf_addc(struct lm_buf *b, char c)
{
	return lm_buf_add(b, &c, 1);
}

int lm_buf_vprintf(struct lm_buf *b, const char *fmt, va_list ap)
{
	va_list aq;
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0 || lm_buf_reserve(b, (size_t)n) != 0)
		return LM_ENOMEM;
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int lm_buf_printf(struct lm_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = lm_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void lm_buf_reset(struct lm_buf *b)
{
	b->len = 0;
	if (b->p != NULL)
		b->p[0] = '\0';
}

void lm_buf_fini(struct lm_buf *b)
{
	if (b == NULL)
		return;
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

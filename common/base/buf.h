/* buf.h — growing memory: one growth rule, checked for overflow, and a text buffer on top.
 *
 * lm_grow is the rule every growable array and byte buffer of layermesh uses: capacity doubles
 * from a minimum until it holds what is needed, and a size that would not fit in size_t is
 * refused instead of wrapping into a small allocation.
 */
#ifndef LM_BUF_H
#define LM_BUF_H

#include <stdarg.h>
#include <stddef.h>

/* Returns p (of *cap elements of `size` bytes) reallocated to hold at least `need` elements, or
 * p itself when it already does; *cap is updated. NULL, with p and *cap untouched, when out of
 * memory or when need x size overflows. */
void *lm_grow(void *p, size_t *cap, size_t need, size_t size, size_t min);

/* A growable text (or byte) buffer, NUL-terminated once anything was added. Zeroed is empty. */
struct lm_buf {
	char *p;
	size_t len, cap;
};

/* Room for `extra` more bytes and the NUL: 0 or LM_ENOMEM. */
int lm_buf_reserve(struct lm_buf *b, size_t extra);
/* Appends n bytes: 0 or LM_ENOMEM (b unchanged). */
int lm_buf_add(struct lm_buf *b, const void *src, size_t n);
int lm_buf_adds(struct lm_buf *b, const char *s);
int lm_buf_addc(struct lm_buf *b, char c);
int lm_buf_printf(struct lm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lm_buf_vprintf(struct lm_buf *b, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
/* Empties b, keeping its memory. */
void lm_buf_reset(struct lm_buf *b);
/* Frees; harmless on a zeroed or finished buffer. */
void lm_buf_fini(struct lm_buf *b);

#endif

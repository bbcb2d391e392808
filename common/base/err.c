#include "common/base/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *lm_err_name(int code)
{
	switch (code) {
#define LM_ERR_NAME_(name, c, msg) \
	case c:                    \
		return "LM_E" #name;
		LM_ERRNO_MAP(LM_ERR_NAME_)
#undef LM_ERR_NAME_
	}
	return "LM_E?";
}

const char *lm_strerror(int code)
{
	switch (code) {
#define LM_ERR_STR_(name, c, msg) \
	case c:                   \
		return msg;
		LM_ERRNO_MAP(LM_ERR_STR_)
#undef LM_ERR_STR_
	}
	return "unknown error";
}

int lm_err_from_errno(int errnum)
{
	switch (errnum) {
	case 0:
		return LM_EOK;
	case ENOMEM:
		return LM_ENOMEM;
	case EINVAL:
		return LM_EINVAL;
	case ENOENT:
		return LM_ENOENT;
	case EACCES:
	case EPERM:
		return LM_EACCES;
	case EIO:
		return LM_EIO;
	case ERANGE:
	case EFBIG:
		return LM_ERANGE;
	case EOVERFLOW:
		return LM_EOVERFLOW;
	case ETIMEDOUT:
		return LM_ETIMEOUT;
	case EAGAIN:
		return LM_EBUSY;
	case ECANCELED:
		return LM_ECANCELED;
	default:
		return LM_EOS;
	}
}

int lm_vfail(lm_diag *d, int code, const char *fmt, va_list ap)
{
	if (d != NULL)
		vsnprintf(d->msg, sizeof d->msg, fmt, ap);
	return code;
}

int lm_fail(lm_diag *d, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lm_vfail(d, code, fmt, ap);
	va_end(ap);
	return code;
}

void lm_diag_prefix(lm_diag *d, const char *fmt, ...)
{
	char prefix[256], old[sizeof d->msg];
	va_list ap;

	if (d == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, d->msg, sizeof old);
	/* Assemble by hand: truncation is intended, and snprintf("%s: %s") would warn about it. */
	size_t n = strnlen(prefix, sizeof prefix);
	if (n > sizeof d->msg - 3)
		n = sizeof d->msg - 3;
	memcpy(d->msg, prefix, n);
	memcpy(d->msg + n, ": ", 2);
	size_t rest = strnlen(old, sizeof old);
	if (rest > sizeof d->msg - n - 3)
		rest = sizeof d->msg - n - 3;
	memcpy(d->msg + n + 2, old, rest);
	d->msg[n + 2 + rest] = '\0';
}

const char *lm_diag_str(const lm_diag *d, int code)
{
	if (d != NULL && d->msg[0] != '\0')
		return d->msg;
	return lm_strerror(code);
}

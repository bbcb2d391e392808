/* err.h — the one error table of layermesh.
 *
 * Every fallible function returns 0 on success or a negative LM_E* code, and, where details help,
 * fills a caller-owned lm_diag with a sentence that names the file, line, field, worker or layer.
 * The enum, lm_err_name() and lm_strerror() are generated from the single X-macro list below so
 * the three never drift (the libuv/nng pattern). OS errno values are wrapped, never passed raw:
 * lm_err_from_errno() maps the common ones and falls back to LM_EOS.
 */
#ifndef LM_ERR_H
#define LM_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* X(name, code, message). Codes are stable: they cross the wire inside ERROR replies. */
#define LM_ERRNO_MAP(X)                                   \
	X(OK, 0, "success")                               \
	X(NOMEM, -1, "out of memory")                     \
	X(INVAL, -2, "invalid argument")                  \
	X(IO, -3, "input/output error")                   \
	X(FORMAT, -4, "malformed input")                  \
	X(RANGE, -5, "value out of range")                \
	X(UNSUPPORTED, -6, "not supported")               \
	X(NOTFOUND, -7, "not found")                      \
	X(PROTO, -8, "protocol error")                    \
	X(VERSION, -9, "protocol version mismatch")       \
	X(FINGERPRINT, -10, "model fingerprint mismatch") \
	X(TIMEOUT, -11, "timed out")                      \
	X(CLOSED, -12, "closed")                          \
	X(BUSY, -13, "busy")                              \
	X(CONFIG, -14, "invalid configuration")           \
	X(INFEASIBLE, -15, "infeasible plan")             \
	X(OS, -16, "system call failed")                  \
	X(NOENT, -17, "no such file or directory")        \
	X(ACCES, -18, "permission denied")                \
	X(OVERFLOW, -19, "arithmetic overflow")           \
	X(CANCELED, -20, "canceled")                      \
	X(UNAVAILABLE, -21, "unavailable")                \
	X(DEVICE, -22, "device error")                    \
	X(NONFINITE, -23, "non-finite value")

enum lm_err {
#define LM_ERR_ENUM_(name, code, msg) LM_E##name = (code),
	LM_ERRNO_MAP(LM_ERR_ENUM_)
#undef LM_ERR_ENUM_
};

/* "LM_EFORMAT" for LM_EFORMAT; "LM_E?" for a code outside the table. Never NULL. */
const char *lm_err_name(int code);
/* "malformed input" for LM_EFORMAT; "unknown error" outside the table. Never NULL. */
const char *lm_strerror(int code);
/* Maps an errno value (ENOMEM, ENOENT, EACCES, EINVAL, ...) to an LM_E* code. */
int lm_err_from_errno(int errnum);

/* A caller-owned message buffer. Functions that take an lm_diag * accept NULL. */
typedef struct lm_diag {
	char msg[512];
} lm_diag;

/* Formats into d (when d is not NULL) and returns code, so a failure reads
 *     return lm_fail(d, LM_EFORMAT, "%s: tensor '%s' ends past the file", path, name);
 * The message is truncated, never overflowed. */
int lm_fail(lm_diag *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The va_list form; the format attribute moves the format-string check to the callers. */
int lm_vfail(lm_diag *d, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
/* Prepends "prefix: " to an existing message (for adding the file name on the way out). */
void lm_diag_prefix(lm_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message, or the code's lm_strerror() when the buffer is empty or NULL. */
const char *lm_diag_str(const lm_diag *d, int code);

#endif

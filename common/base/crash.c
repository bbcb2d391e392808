/* crash.c — see crash.h. Only async-signal-safe calls once a signal has arrived: write(2),
 * backtrace_symbols_fd (which writes without allocating) and signal re-raising. */
#include "common/base/crash.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define LM_CRASH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LM_CRASH_SANITIZED 1
#endif
#endif

#ifndef LM_CRASH_SANITIZED
static const char *crash_prog = "layermesh";

static void crash_write(const char *s)
{
	ssize_t r = write(STDERR_FILENO, s, strlen(s));
	(void)r;
}

/* A number in hex or decimal without stdio. */
static void crash_write_num(unsigned long v, unsigned base)
{
	char buf[32];
	int i = (int)sizeof buf - 1;
	buf[i] = '\0';
	do {
		buf[--i] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v != 0 && i > 0);
	crash_write(buf + i);
}

static void crash_handler(int sig, siginfo_t *info, void *uctx)
{
	(void)uctx;
	void *frames[64];
	crash_write(crash_prog);
	crash_write(" fatal: signal ");
	crash_write_num((unsigned long)sig, 10);
	crash_write(" at address 0x");
	crash_write_num((unsigned long)(info != NULL ? info->si_addr : NULL), 16);
	crash_write("; stack:\n");
	int n = backtrace(frames, 64);
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	/* The default action now: the same status, a core where cores are enabled. */
	signal(sig, SIG_DFL);
	raise(sig);
}

#endif

void lm_crash_handler_install(const char *prog)
{
#ifndef LM_CRASH_SANITIZED
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	void *warm[1];
	crash_prog = prog;
	backtrace(warm, 1); /* loads libgcc now, not inside the handler */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = crash_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
#else
	(void)prog;
#endif
}

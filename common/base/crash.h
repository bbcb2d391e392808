/* crash.h — a fatal signal leaves its stack in the log.
 *
 * A worker that dies of SIGSEGV under load is otherwise one line in the coordinator's log
 * ("killed by signal 11"). The handler writes the signal, the faulting address and the
 * backtrace to stderr (which the coordinator forwards with the worker's name), then lets the
 * default action run, so the exit status and any core dump are what they would have been.
 * Builds with AddressSanitizer keep its handler, which reports more. */
#ifndef LM_CRASH_H
#define LM_CRASH_H

/* Installs the handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT; prog names the
 * process in the report (kept by pointer: pass a string that lives as long as the process). */
void lm_crash_handler_install(const char *prog);

#endif

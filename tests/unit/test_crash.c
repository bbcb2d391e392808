/* common/crash: a fatal signal writes the process's name, the signal and a stack to stderr, and
 * the process still dies of that signal. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/crash.h"

/* Not static, not inlined: its name must show in the exported symbols of the stack. */
void crash_test_fault(volatile int *p);
__attribute__((noinline)) void crash_test_fault(volatile int *p)
{
	*p = 42;
}

Test(crash, segv_prints_a_stack_and_keeps_the_signal)
{
#if defined(__SANITIZE_ADDRESS__)
	cr_skip_test("AddressSanitizer keeps its own handler for SIGSEGV");
#endif
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		lm_crash_handler_install("crash-test[w9]");
		crash_test_fault((volatile int *)16);
		_exit(0);
	}
	close(fds[1]);
	char out[16384];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof out - 1 && (r = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = '\0';
	close(fds[0]);
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x", status);
	cr_assert(strstr(out, "crash-test[w9] fatal: signal 11 at address 0x10") != NULL, "%s",
		  out);
	cr_assert(strstr(out, "crash_test_fault") != NULL, "no symbol in the stack:\n%s", out);
}

/* Tests of coordinator/supervise/procs: the workers' processes on a libuv loop, with real
 * processes (small shell scripts in the worker's place) and a real worker table. Each test
 * runs the loop on a thread of its own and stops it with procs_request_stop. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config/mesh_config.h"
#include "coordinator/supervise/procs.h"
#include "coordinator/supervise/workers.h"

static char dir[64];
static char data[128], control[128], http[] = "127.0.0.1:1";
static struct mesh_worker cfg_worker = {
	.name = "w0", .data = data, .control = control, .http = http};
static struct mesh_config cfg = {.model_path = "m.gguf", .workers = &cfg_worker, .n_workers = 1};
static struct mesh_facts facts = {.cfg = &cfg, .n_workers = 1, .spawns = true};
static struct workers ws;
static struct procs *pr;
static pthread_t loop;
static int run_status = -1;
static bool joined; /* the test stopped and joined the loop itself */
static char crash[128], sleeper[128];

static void *run_loop(void *arg)
{
	(void)arg;
	run_status = procs_run(pr);
	return NULL;
}

static void script(char *path, size_t cap, const char *name, const char *body)
{
	snprintf(path, cap, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	fclose(f);
	chmod(path, 0700);
}

static void setup(void)
{
	lm_diag d = {{0}};
	snprintf(dir, sizeof dir, "/tmp/lm-test-procs.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(data, sizeof data, "ipc://%s/w0.data", dir);
	snprintf(control, sizeof control, "ipc://%s/w0.ctl", dir);
	script(crash, sizeof crash, "crash", "echo 'layermesh-worker error: it broke' >&2\nexit 3");
	script(sleeper, sizeof sleeper, "sleeper", "exec sleep 30");
	struct workers_listener none = {0};
	cr_assert_eq(workers_init(&ws, &facts, sleeper, &none, &d), 0, "%s", d.msg);
	cr_assert_eq(procs_open(&pr, &facts, &ws, NULL, &d), 0, "%s", d.msg);
	cr_assert_eq(pthread_create(&loop, NULL, run_loop, NULL), 0);
}

static void teardown(void)
{
	if (!joined) {
		procs_request_stop(pr, "the test is over", 0);
		pthread_join(loop, NULL);
	}
	procs_fini(pr);
	workers_fini(&ws);
	unlink(crash);
	unlink(sleeper);
	rmdir(dir);
}

TestSuite(procs, .init = setup, .fini = teardown, .timeout = 30);

static struct proc *spawn(const char *bin, bool serving)
{
	struct mesh_addrs at = {0};
	struct proc *c = NULL;
	lm_diag d = {{0}};
	snprintf(at.data, sizeof at.data, "%s", data);
	snprintf(at.control, sizeof at.control, "%s", control);
	snprintf(at.http, sizeof at.http, "%s", http);
	cr_assert_eq(procs_spawn(pr, 0, bin, &at, serving, &c, &d), 0, "%s", d.msg);
	cr_assert_not_null(c);
	return c;
}

Test(procs, a_crash_ends_with_its_own_words)
{
	spawn(crash, true);
	char why[256];
	cr_assert(procs_ended(pr, 0, NULL, 10000, why, sizeof why));
	cr_expect_str_eq(why, "exited with status 3: it broke");
	struct worker_info w;
	workers_get(&ws, 0, &w);
	cr_expect_gt(w.pid, 0, "a serving process's pid goes into the table");
	cr_expect_str_eq(w.why, "exited with status 3: it broke");
	cr_expect_eq(w.state, MESH_WORKER_STARTING, "a starting worker keeps its state");
}

Test(procs, an_unexpected_death_downs_a_ready_worker)
{
	spawn(sleeper, true);
	char why[256];
	cr_expect_not(procs_ended(pr, 0, NULL, 0, why, sizeof why));
	workers_update(&ws, 0,
		       &(struct worker_update){.set_state = true, .state = MESH_WORKER_READY});
	struct worker_info w;
	workers_get(&ws, 0, &w);
	kill(w.pid, SIGKILL);
	cr_assert(procs_ended(pr, 0, NULL, 10000, why, sizeof why));
	cr_expect_str_eq(why, "killed by signal 9");
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.state, MESH_WORKER_DOWN);
	cr_expect_str_eq(w.why, "killed by signal 9");
}

Test(procs, a_kill_is_expected_and_keeps_the_reason)
{
	spawn(sleeper, true);
	workers_update(&ws, 0,
		       &(struct worker_update){.set_state = true,
					       .state = MESH_WORKER_READY,
					       .why = "did not answer its liveness probe"});
	procs_kill(pr, 0);
	char why[256];
	cr_assert(procs_ended(pr, 0, NULL, 0, why, sizeof why), "procs_kill waits for the exit");
	cr_expect_str_eq(why, "killed by signal 9");
	struct worker_info w;
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.state, MESH_WORKER_READY, "its keeper decides what it is now");
	cr_expect_str_eq(w.why, "did not answer its liveness probe");
}

Test(procs, a_candidate_replaces_the_serving_process)
{
	struct proc *old = spawn(sleeper, true);
	struct worker_info w;
	workers_get(&ws, 0, &w);
	int old_pid = w.pid;
	struct proc *cand = spawn(sleeper, false);
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.pid, old_pid, "a candidate does not serve yet");
	char why[256];
	cr_expect_not(procs_ended(pr, 0, cand, 0, why, sizeof why));
	cr_expect_eq(procs_commit(pr, 0, cand), old);
	workers_get(&ws, 0, &w);
	cr_expect_neq(w.pid, old_pid);
	workers_update(&ws, 0,
		       &(struct worker_update){.set_state = true, .state = MESH_WORKER_READY});
	procs_retire(pr, old, SIGTERM);
	cr_assert(procs_ended(pr, 0, old, 10000, why, sizeof why));
	cr_expect_str_eq(why, "killed by signal 15");
	cr_expect_not(procs_ended(pr, 0, NULL, 0, why, sizeof why), "the candidate serves on");
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.state, MESH_WORKER_READY, "a retired process's end is no fault");
}

Test(procs, a_missing_program_is_refused)
{
	struct mesh_addrs at = {0};
	struct proc *c = NULL;
	lm_diag d = {{0}};
	char missing[128];
	snprintf(missing, sizeof missing, "%s/missing", dir);
	cr_expect_eq(procs_spawn(pr, 0, missing, &at, true, &c, &d), LM_ENOENT);
	cr_expect(strstr(d.msg, "missing or not executable") != NULL, "%s", d.msg);
	char why[8];
	cr_expect(procs_ended(pr, 0, NULL, 0, why, sizeof why), "no process counts as ended");
}

Test(procs, a_stop_ends_the_waits_and_the_processes)
{
	struct proc *c = spawn(sleeper, true);
	procs_request_stop(pr, "a reason", 2);
	pthread_join(loop, NULL);
	joined = true;
	cr_expect_eq(run_status, 2);
	cr_expect(procs_stopping(pr));
	char why[256];
	cr_expect(procs_ended(pr, 0, c, 0, why, sizeof why), "every process is gone");
	procs_sleep(pr, 60000); /* returns at once */
}

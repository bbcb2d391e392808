/* Tests of coordinator/supervise/workers: the worker table's rows, its listener and its
 * scheduler, on a table of three workers (no process, no mesh). */
#include <criterion/criterion.h>
#include <string.h>

#include "common/config/mesh_config.h"
#include "coordinator/supervise/workers.h"

static struct mesh_worker cfg_workers[3] = {
	{.name = "w0", .data = "ipc:///tmp/w0.data", .control = "ipc:///tmp/w0.ctl", .http = "h:1"},
	{.name = "w1", .data = "ipc:///tmp/w1.data", .control = "ipc:///tmp/w1.ctl", .http = "h:2"},
	{.name = "w2", .data = "ipc:///tmp/w2.data", .control = "ipc:///tmp/w2.ctl", .http = "h:3"},
};
static struct mesh_config cfg = {.model_path = "m.gguf", .workers = cfg_workers, .n_workers = 3};
static const struct mesh_facts facts = {.cfg = &cfg, .n_workers = 3};

/* What the listener saw last, and how often it was called. */
struct seen {
	int calls;
	int32_t failed, away;
	char why_failed[600], why_away[600];
	enum mesh_worker_state state[3];
	struct sched *answer; /* what it answers */
};

static struct sched *listen_changed(void *ctx, const struct workers_summary *s)
{
	struct seen *v = ctx;
	v->calls++;
	v->failed = s->failed;
	v->away = s->away;
	snprintf(v->why_failed, sizeof v->why_failed, "%s", s->why_failed);
	snprintf(v->why_away, sizeof v->why_away, "%s", s->why_away);
	memcpy(v->state, s->state, sizeof v->state);
	return v->answer;
}

static void table(struct workers *ws, struct seen *v)
{
	lm_diag d = {{0}};
	struct workers_listener l = {.changed = listen_changed, .ctx = v};
	cr_assert_eq(workers_init(ws, &facts, "/bin/worker", &l, &d), 0, "%s", d.msg);
}

static void set_state(struct workers *ws, int32_t j, enum mesh_worker_state st, const char *why)
{
	workers_update(ws, j, &(struct worker_update){.set_state = true, .state = st, .why = why});
}

Test(workers, rows_start_at_the_configured_addresses)
{
	struct workers ws;
	struct seen v = {0};
	table(&ws, &v);
	struct worker_info w;
	workers_get(&ws, 1, &w);
	cr_expect_eq(w.state, MESH_WORKER_STARTING);
	cr_expect_str_eq(w.at.data, "ipc:///tmp/w1.data");
	cr_expect_str_eq(w.at.control, "ipc:///tmp/w1.ctl");
	cr_expect_str_eq(w.at.http, "h:2");
	cr_expect_str_eq(w.bin, "/bin/worker");
	cr_expect_eq(w.restarts, 0);
	cr_expect_eq(v.calls, 0);
	workers_fini(&ws);
}

Test(workers, an_update_changes_only_what_it_sets)
{
	struct workers ws;
	struct seen v = {0};
	table(&ws, &v);
	struct wire_ready ready = {.kv_bytes = 7};
	workers_update(&ws, 0, &(struct worker_update){.pid = 42, .why = "x", .ready = &ready});
	workers_update(
		&ws, 0,
		&(struct worker_update){.set_restarts = true, .restarts = 3, .restarted = true});
	workers_update(&ws, 0, &(struct worker_update){.restarted = true});
	struct worker_info w;
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.pid, 42);
	cr_expect_str_eq(w.why, "x");
	cr_expect_eq(w.ready.kv_bytes, 7);
	cr_expect_eq(w.restarts, 3);
	cr_expect_eq(w.restarts_total, 2);
	cr_expect_eq(w.state, MESH_WORKER_STARTING);
	cr_expect_eq(v.calls, 0, "no state was set: the listener is not called");
	workers_update(&ws, 0, &(struct worker_update){.set_restarts = true, .restarts = 0});
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.restarts, 0, "the streak falls to 0");
	cr_expect_eq(w.restarts_total, 2);
	workers_fini(&ws);
}

Test(workers, the_listener_sees_every_worker_and_serves_once_all_are_ready)
{
	struct workers ws;
	struct seen v = {0};
	struct sched *fake = (struct sched *)&v; /* never dereferenced */
	table(&ws, &v);
	set_state(&ws, 0, MESH_WORKER_READY, "");
	cr_expect_eq(v.calls, 1);
	cr_expect_eq(v.failed, -1);
	cr_expect_eq(v.away, 1);
	cr_expect_null(workers_sched(&ws, false));
	set_state(&ws, 1, MESH_WORKER_READY, "");
	v.answer = fake;
	set_state(&ws, 2, MESH_WORKER_READY, "");
	cr_expect_eq(v.away, -1);
	cr_expect_eq(workers_sched(&ws, false), fake);
	cr_expect_eq(workers_sched(&ws, true), fake);
	set_state(&ws, 2, MESH_WORKER_DOWN, "killed by signal 9");
	cr_expect_eq(v.away, 2);
	cr_expect_str_eq(v.why_away, "killed by signal 9");
	cr_expect_eq(v.state[2], MESH_WORKER_DOWN);
	cr_expect_eq(workers_sched(&ws, false), fake);
	cr_expect_null(workers_sched(&ws, true), "a worker is away: no redeploy");
	set_state(&ws, 1, MESH_WORKER_FAILED, "cannot start");
	cr_expect_eq(v.failed, 1);
	cr_expect_str_eq(v.why_failed, "cannot start");
	cr_expect_eq(v.away, 2, "the failed one is not counted as away");
	workers_fini(&ws);
}

Test(workers, a_lost_process_downs_a_ready_worker_only)
{
	struct workers ws;
	struct seen v = {0};
	table(&ws, &v);
	workers_update(&ws, 0,
		       &(struct worker_update){.why = "exited with status 1", .lost = true});
	struct worker_info w;
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.state, MESH_WORKER_STARTING, "a starting worker keeps its state");
	cr_expect_str_eq(w.why, "exited with status 1");
	cr_expect_eq(v.calls, 0);
	set_state(&ws, 0, MESH_WORKER_READY, "");
	workers_update(&ws, 0, &(struct worker_update){.why = "killed by signal 9", .lost = true});
	workers_get(&ws, 0, &w);
	cr_expect_eq(w.state, MESH_WORKER_DOWN);
	cr_expect_eq(v.calls, 2);
	cr_expect_eq(v.away, 0);
	workers_fini(&ws);
}

Test(workers, the_digest_is_held_to_the_first)
{
	struct workers ws;
	struct seen v = {0};
	lm_diag d = {{0}};
	table(&ws, &v);
	cr_expect_eq(workers_check_digest(&ws, 2, 0xabcull, &d), 0);
	cr_expect_eq(workers_check_digest(&ws, 2, 0xabcull, &d), 0);
	cr_expect_eq(workers_check_digest(&ws, 2, 0xabdull, &d), LM_EFINGERPRINT);
	cr_expect(strstr(d.msg, "w2") != NULL, "%s", d.msg);
	cr_expect(strstr(d.msg, "0000000000000abd") != NULL, "%s", d.msg);
	cr_expect(strstr(d.msg, "0000000000000abc") != NULL, "%s", d.msg);
	struct worker_info w;
	workers_get(&ws, 2, &w);
	cr_expect_eq(w.digest, 0xabcull);
	workers_fini(&ws);
}

Test(workers, a_redeploy_moves_a_worker)
{
	struct workers ws;
	struct seen v = {0};
	table(&ws, &v);
	struct mesh_addrs at = {"ipc:///tmp/w1.data.b", "ipc:///tmp/w1.ctl.b", "h:1002"};
	workers_update(&ws, 1, &(struct worker_update){.at = &at, .bin = "/bin/new"});
	struct worker_info all[3];
	workers_get_all(&ws, all);
	cr_expect_str_eq(all[1].at.data, "ipc:///tmp/w1.data.b");
	cr_expect_str_eq(all[1].bin, "/bin/new");
	cr_expect_str_eq(all[0].bin, "/bin/worker");
	cr_expect_str_eq(all[2].at.data, "ipc:///tmp/w2.data");
	workers_fini(&ws);
}

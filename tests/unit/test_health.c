/* A worker's status document, readiness and metrics page (worker/health.h), rendered from a
 * snapshot the test controls; the page is read back with the strict reader of the format. The
 * HTTP endpoints themselves are exercised by tests/integration/test_worker_health.sh. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/dtype.h"
#include "lm_config.h"
#include "tests/support/prom_parse.h"
#include "worker/health.h"

/* The state the fake worker reports. */
static struct health_snapshot fake;

static void fake_snapshot(void *arg, struct health_snapshot *s)
{
	(void)arg;
	*s = fake;
}

static void fake_assigned(void)
{
	memset(&fake, 0, sizeof fake);
	fake.name = "w1";
	fake.pid = 4242;
	fake.uptime_s = 12.5;
	fake.rss_bytes = 7 << 20;
	fake.phase = HEALTH_ASSIGNED;
	fake.dropped = 3;
	struct wire_assign *a = &fake.assign;
	snprintf(a->model, sizeof a->model, "models/m.gguf");
	snprintf(a->next, sizeof a->next, "ipc:///tmp/next");
	a->begin = 2;
	a->end = 4;
	a->max_seq = 256;
	a->slots = 16;
	a->k_type = a->v_type = LM_F32;
	a->wire_dtype = WIRE_DT_F16;
	a->max_batch = 64;
	fake.fingerprint = 0x0123456789abcdefull;
	fake.kv_base = 2;
	fake.kv_num_layers = 2;
	fake.kv_layer_bytes[0] = fake.kv_layer_bytes[1] = 262144;
	fake.kv_bytes = 524288;
	fake.weight_bytes = 70000;
	fake.mapped_bytes = 73728;
	fake.active_sequences = 5;
	fake.batches = 11;
	fake.tokens = 97;
	fake.ring_errors = 1;
	fake.releases = 4;
}

static void init(struct health *h)
{
	struct health_ops ops = {.snapshot = fake_snapshot};
	health_init(h, &ops);
}

static bool ready(struct health *h, char *why, size_t cap)
{
	return health_ready(h, &fake, why, cap);
}

Test(health, readiness_names_what_is_missing, .timeout = 10)
{
	struct health h;
	char why[512];
	init(&h);
	memset(&fake, 0, sizeof fake);
	fake.name = "w1";
	cr_expect_not(ready(&h, why, sizeof why));
	cr_expect_not_null(strstr(why, "no assignment yet"), "%s", why);
	fake.phase = HEALTH_LOADING;
	cr_expect_not(ready(&h, why, sizeof why));
	cr_expect_not_null(strstr(why, "loading"), "%s", why);
	fake_assigned();
	fake.mapped_bytes = 0;
	cr_expect_not(ready(&h, why, sizeof why));
	cr_expect_str_eq(why, "the weights of layers [2, 4) are not mapped");
	fake_assigned();
	fake.kv_bytes = 0;
	cr_expect_not(ready(&h, why, sizeof why));
	cr_expect_str_eq(why, "the KV cache of layers [2, 4) is not allocated");
	fake_assigned();
	cr_expect_not(ready(&h, why, sizeof why));
	cr_expect_str_eq(why, "the successor at ipc:///tmp/next is not connected");
	health_fini(&h);
}

/* The successor counts as connected exactly while NNG has a pipe to it. */
Test(health, the_successor_is_connected_while_a_pipe_is_up, .timeout = 10)
{
	struct health h;
	char why[512];
	nng_socket push, pull;
	init(&h);
	fake_assigned();
	struct lm_link next;
	cr_assert_eq(nng_push0_open(&push), 0);
	cr_assert_eq(lm_link_init(&next, push, NULL, NULL), 0);
	health_watch_successor(&h, &next);
	cr_assert_eq(nng_pull0_open(&pull), 0);
	cr_assert_eq(nng_listen(pull, "inproc://health-next", NULL, 0), 0);
	cr_assert_eq(lm_link_dial(&next, "inproc://health-next", NULL), 0);
	bool up = false;
	for (int i = 0; i < 200 && !(up = ready(&h, why, sizeof why)); i++)
		usleep(5000);
	cr_expect(up, "%s", why);
	nng_close(pull); /* the successor goes away */
	for (int i = 0; i < 200 && (up = ready(&h, why, sizeof why)); i++)
		usleep(5000);
	cr_expect_not(up);
	cr_expect_str_eq(why, "the successor at ipc:///tmp/next is not connected");
	nng_close(push);
	lm_link_fini(&next);
	health_fini(&h);
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	cr_assert(cJSON_IsNumber(v), "'%s' is not a number", key);
	return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
	cr_assert_not_null(s, "'%s' is not a string", key);
	return s;
}

Test(health, the_status_document_carries_the_snapshot_and_percentiles, .timeout = 10)
{
	struct health h;
	init(&h);
	fake_assigned();
	/* compute: 4 x 1.1 us and 4 x 1.9 us -> p50 1.5 us, p90 and p99 1.9 us (metrics.h). */
	for (int i = 0; i < 4; i++) {
		lm_hist_observe(&h.compute, 1100);
		lm_hist_observe(&h.compute, 1900);
	}
	char *text = health_status_json(&h);
	cr_assert_not_null(text);
	cJSON *o = cJSON_Parse(text);
	cr_assert_not_null(o, "%s", text);
	cr_expect_str_eq(str(o, "name"), "w1");
	cr_expect_str_eq(str(o, "build"), LM_VERSION);
	cr_expect_eq(num(o, "protocol"), WIRE_VERSION);
	cr_expect_eq(num(o, "pid"), 4242);
	cr_expect_eq(num(o, "uptime_s"), 12.5);
	cr_expect_eq(num(o, "rss_bytes"), 7 << 20);
	cr_expect_str_eq(str(o, "phase"), "assigned");
	cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(o, "ready")));
	cr_expect_str_eq(str(o, "not_ready"), "the successor at ipc:///tmp/next is not connected");
	cr_expect_str_eq(str(o, "fingerprint"), "0123456789abcdef");
	cr_expect_str_eq(str(o, "model"), "models/m.gguf");
	const cJSON *slice = cJSON_GetObjectItem(o, "slice");
	cr_expect_eq(cJSON_GetArraySize(slice), 2);
	cr_expect_eq(cJSON_GetArrayItem(slice, 0)->valuedouble, 2);
	cr_expect_eq(cJSON_GetArrayItem(slice, 1)->valuedouble, 4);
	cr_expect_eq(num(o, "kv_base"), 2);
	cr_expect_eq(num(o, "kv_num_layers"), 2);
	cr_expect_eq(num(o, "kv_bytes"), 524288);
	const cJSON *per = cJSON_GetObjectItem(o, "kv_bytes_per_layer");
	cr_expect_eq(cJSON_GetArraySize(per), 2);
	cr_expect_eq(cJSON_GetArrayItem(per, 1)->valuedouble, 262144);
	cr_expect_eq(num(o, "weight_bytes"), 70000);
	cr_expect_eq(num(o, "mapped_bytes"), 73728);
	cr_expect_eq(num(o, "active_sequences"), 5);
	cr_expect_eq(num(o, "batches"), 11);
	cr_expect_eq(num(o, "tokens_processed"), 97);
	cr_expect_eq(num(o, "ring_errors"), 1);
	cr_expect_eq(num(o, "releases"), 4);
	cr_expect_eq(num(o, "dropped"), 3);
	cr_expect_eq(num(o, "max_seq"), 256);
	cr_expect_eq(num(o, "slots"), 16);
	cr_expect_str_eq(str(o, "kv_type_k"), "f32");
	cr_expect_str_eq(str(o, "wire_dtype"), "f16");
	const cJSON *lat = cJSON_GetObjectItem(o, "latency_ms");
	const cJSON *c = cJSON_GetObjectItem(lat, "compute");
	cr_expect_eq(num(c, "count"), 8);
	cr_expect_float_eq(num(c, "p50"), 0.0015, 1e-12);
	cr_expect_float_eq(num(c, "p90"), 0.0019, 1e-12);
	cr_expect_float_eq(num(c, "p99"), 0.0019, 1e-12);
	cr_expect_float_eq(num(c, "mean"), 0.0015, 1e-12);
	const cJSON *r = cJSON_GetObjectItem(lat, "receive");
	cr_expect_eq(num(r, "count"), 0);
	cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r, "p50")));
	/* The finer parts are there, empty until a message is stamped or computed. */
	const char *const parts[] = {"forward", "pre_send", "transit"};
	for (int i = 0; i < 3; i++) {
		const cJSON *p = cJSON_GetObjectItem(lat, parts[i]);
		cr_assert_not_null(p, "%s", parts[i]);
		cr_expect_eq(num(p, "count"), 0, "%s", parts[i]);
		cr_expect(cJSON_IsNull(cJSON_GetObjectItem(p, "mean")), "%s", parts[i]);
	}
	cJSON_Delete(o);
	free(text);
	health_fini(&h);
}

Test(health, a_waiting_worker_reports_no_slice, .timeout = 10)
{
	struct health h;
	init(&h);
	memset(&fake, 0, sizeof fake);
	fake.name = "solo";
	char *text = health_status_json(&h);
	cJSON *o = cJSON_Parse(text);
	cr_assert_not_null(o);
	cr_expect_str_eq(str(o, "phase"), "waiting");
	cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(o, "assigned")));
	cr_expect_null(cJSON_GetObjectItem(o, "slice"));
	cr_expect_not_null(strstr(str(o, "not_ready"), "no assignment yet"));
	cJSON_Delete(o);
	free(text);
	health_fini(&h);
}

static double sample(const struct prom_doc *d, const char *name, const char *labels)
{
	const struct prom_sample *s = prom_find(d, name, labels);
	cr_assert_not_null(s, "no sample %s{%s}", name, labels ? labels : "");
	return s->value;
}

Test(health, the_metrics_page_parses_and_agrees_with_the_snapshot, .timeout = 10)
{
	struct health h;
	init(&h);
	fake_assigned();
	lm_hist_observe(&h.recv, 500);
	lm_hist_observe(&h.recv, 3000000);
	lm_hist_observe(&h.send, 40000);
	lm_hist_observe(&h.transit, 250000);
	lm_hist_observe(&h.transit, 90000);
	lm_hist_observe(&h.transit, 7000000);
	lm_hist_observe(&h.forward, 1500000);
	lm_hist_observe(&h.pre_send, 1500);
	char *text = health_metrics_text(&h);
	cr_assert_not_null(text);
	struct prom_doc d;
	char err[256] = "";
	cr_assert_eq(prom_parse(text, &d, err, sizeof err), 0, "%s\n%s", err, text);
	cr_expect_eq(sample(&d, "layermesh_worker_batches_total", NULL), 11);
	cr_expect_eq(sample(&d, "layermesh_worker_tokens_total", NULL), 97);
	cr_expect_eq(sample(&d, "layermesh_worker_ring_errors_total", NULL), 1);
	cr_expect_eq(sample(&d, "layermesh_worker_dropped_total", NULL), 3);
	cr_expect_eq(sample(&d, "layermesh_worker_releases_total", NULL), 4);
	cr_expect_eq(sample(&d, "layermesh_worker_active_sequences", NULL), 5);
	cr_expect_eq(sample(&d, "layermesh_worker_resident_bytes", NULL), 7 << 20);
	cr_expect_eq(sample(&d, "layermesh_worker_kv_bytes", NULL), 524288);
	cr_expect_eq(sample(&d, "layermesh_worker_weight_bytes", NULL), 70000);
	cr_expect_eq(sample(&d, "layermesh_worker_ready", NULL), 0);
	cr_expect_eq(sample(&d, "layermesh_worker_uptime_seconds", NULL), 12.5);
	char info[256];
	snprintf(info, sizeof info,
		 "worker=\"w1\",build=\"%s\",protocol=\"%d\",fingerprint=\"0123456789abcdef\"",
		 LM_VERSION, WIRE_VERSION);
	cr_expect_eq(sample(&d, "layermesh_worker_info", info), 1);
	cr_expect_eq(sample(&d, "layermesh_worker_receive_wait_seconds_count", NULL), 2);
	cr_expect_eq(sample(&d, "layermesh_worker_receive_wait_seconds_bucket", "le=\"0.000001\""),
		     1);
	cr_expect_eq(sample(&d, "layermesh_worker_receive_wait_seconds_bucket", "le=\"0.002\""), 1);
	cr_expect_eq(sample(&d, "layermesh_worker_receive_wait_seconds_bucket", "le=\"0.005\""), 2);
	cr_expect_float_eq(sample(&d, "layermesh_worker_receive_wait_seconds_sum", NULL), 0.0030005,
			   1e-15);
	cr_expect_eq(sample(&d, "layermesh_worker_send_seconds_count", NULL), 1);
	cr_expect_eq(sample(&d, "layermesh_worker_compute_seconds_count", NULL), 0);
	/* The ring's finer parts, each its own family. */
	cr_expect_eq(sample(&d, "layermesh_worker_transit_seconds_count", NULL), 3);
	cr_expect_eq(sample(&d, "layermesh_worker_transit_seconds_bucket", "le=\"0.0001\""), 1);
	cr_expect_eq(sample(&d, "layermesh_worker_transit_seconds_bucket", "le=\"0.0005\""), 2);
	cr_expect_eq(sample(&d, "layermesh_worker_transit_seconds_bucket", "le=\"+Inf\""), 3);
	cr_expect_float_eq(sample(&d, "layermesh_worker_transit_seconds_sum", NULL), 0.00734,
			   1e-15);
	cr_expect_eq(sample(&d, "layermesh_worker_forward_seconds_count", NULL), 1);
	cr_expect_float_eq(sample(&d, "layermesh_worker_forward_seconds_sum", NULL), 0.0015, 1e-15);
	cr_expect_eq(sample(&d, "layermesh_worker_pre_send_seconds_count", NULL), 1);
	cr_expect_eq(sample(&d, "layermesh_worker_pre_send_seconds_bucket", "le=\"0.000002\""), 1);
	prom_doc_free(&d);
	free(text);
	health_fini(&h);
}

/* layermesh status — a running mesh at a glance, from the coordinator's GET /v1/status: one row
 * per worker (its state and process, its slice and bytes, and what its own /status says about
 * its load and compute latency), then the fence and the scheduler's counters. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"
#include "coordinator/supervise/http_client.h"

static const char status_usage[] =
	"usage: layermesh status [--url URL] [--json] [--token T]\n"
	"\n"
	"Asks a running mesh (`layermesh up`) for its status and prints one row per worker:\n"
	"its state and pid, its layers [start, end), KV cache, weights and resident memory in\n"
	"MiB, the sequences it holds, the tokens it has computed and the median and 99th\n"
	"percentile of its compute time per message (from the worker's own /status; '-' when\n"
	"the worker did not answer, with the reason below the table). Then the fence and the\n"
	"scheduler's counters.\n"
	"\n"
	"  --url URL      the coordinator's API (default http://127.0.0.1:8080)\n"
	"  --json         print the status document as the coordinator sends it\n"
	"  --token T      bearer token, when the mesh requires one\n"
	"  --timeout S    give up after S seconds without an answer (default 10)\n"
	"  -h, --help     this text\n"
	"\n"
	"Exit status: 0 when the coordinator answered, 1 when it did not.\n";

/* A number field, NAN when absent or not a number (the document comes from another process). */
static double status_num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *status_str(const cJSON *o, const char *key, const char *dflt)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
	return s != NULL ? s : dflt;
}

/* v with `decimals` digits after the point into a cell, or "-" when it is unknown. */
static const char *status_cell(char *buf, size_t cap, int decimals, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%.*f", decimals, v);
	return buf;
}

/* The worker's own view where it answered, else the coordinator's figures from READY. */
static double status_prefer(const cJSON *mine, const char *key, const cJSON *coord,
			    const char *ckey)
{
	double v = status_num(mine, key);
	return isnan(v) ? status_num(coord, ckey) : v;
}

static void status_print(const cJSON *doc)
{
	const cJSON *plan = cJSON_GetObjectItemCaseSensitive(doc, "plan");
	const cJSON *cuts = cJSON_GetObjectItemCaseSensitive(plan, "cuts");
	printf("model %s (fingerprint %s), fence [", status_str(doc, "model", "?"),
	       status_str(doc, "fingerprint", "?"));
	int i = 0;
	for (const cJSON *c = cuts != NULL ? cuts->child : NULL; c != NULL; c = c->next, i++)
		printf("%s%.0f", i ? ", " : "", cJSON_IsNumber(c) ? c->valuedouble : -1.0);
	printf("], strategy %s\n", status_str(plan, "strategy", "?"));
	const cJSON *chat = cJSON_GetObjectItemCaseSensitive(doc, "chat_template");
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(chat, "format")))
		printf("chat template: %s (family %s)\n\n", status_str(chat, "format", "?"),
		       status_str(chat, "family", "?"));
	else
		printf("chat template: none (%s)\n\n", status_str(chat, "why", "not reported"));

	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(doc, "workers");
	int name_w = 6;
	for (const cJSON *w = ws != NULL ? ws->child : NULL; w != NULL; w = w->next) {
		int n = (int)strlen(status_str(w, "name", "?"));
		name_w = n > name_w ? n : name_w;
	}
	printf("%-*s  %-10s  %7s  %-9s  %9s  %8s  %11s  %12s  %6s  %10s  %14s  %14s\n", name_w,
	       "WORKER", "STATE", "PID", "LAYERS", "RESTARTS", "KV MiB", "WEIGHTS MiB",
	       "RESIDENT MiB", "ACTIVE", "TOKENS", "COMPUTE P50 ms", "COMPUTE P99 ms");
	for (const cJSON *w = ws != NULL ? ws->child : NULL; w != NULL; w = w->next) {
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(w, "status");
		const cJSON *comp = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(st, "latency_ms"), "compute");
		char layers[32], restarts[48], c[8][32];
		double start = status_num(w, "start"), end = status_num(w, "end");
		if (isnan(start) || isnan(end))
			snprintf(layers, sizeof layers, "-");
		else
			snprintf(layers, sizeof layers, "[%.0f, %.0f)", start, end);
		/* The current streak, then every restart since the mesh came up. */
		double streak = status_num(w, "restarts"), total = status_num(w, "restarts_total");
		if (isnan(streak) || isnan(total))
			snprintf(restarts, sizeof restarts, "-");
		else
			snprintf(restarts, sizeof restarts, "%.0f/%.0f", streak, total);
		printf("%-*s  %-10s  %7s  %-9s  %9s  %8s  %11s  %12s  %6s  %10s  %14s  %14s\n",
		       name_w, status_str(w, "name", "?"), status_str(w, "state", "?"),
		       status_cell(c[0], sizeof c[0], 0, status_num(w, "pid")), layers, restarts,
		       status_cell(c[1], sizeof c[1], 2,
				   status_prefer(st, "kv_bytes", w, "kv_bytes") / 1048576.0),
		       status_cell(c[2], sizeof c[2], 2,
				   status_prefer(st, "weight_bytes", w, "weight_bytes") /
					   1048576.0),
		       status_cell(c[3], sizeof c[3], 2,
				   status_prefer(st, "rss_bytes", w, "rss_bytes_at_ready") /
					   1048576.0),
		       status_cell(c[4], sizeof c[4], 0, status_num(st, "active_sequences")),
		       status_cell(c[5], sizeof c[5], 0, status_num(st, "tokens_processed")),
		       status_cell(c[6], sizeof c[6], 3, status_num(comp, "p50")),
		       status_cell(c[7], sizeof c[7], 3, status_num(comp, "p99")));
	}
	/* Why a row is incomplete or a worker is not ready. */
	bool blank = false;
	for (const cJSON *w = ws != NULL ? ws->child : NULL; w != NULL; w = w->next) {
		const char *name = status_str(w, "name", "?");
		const char *lines[3] = {status_str(w, "why", NULL),
					status_str(w, "status_error", NULL),
					status_str(cJSON_GetObjectItemCaseSensitive(w, "status"),
						   "not_ready", NULL)};
		for (int k = 0; k < 3; k++) {
			if (lines[k] == NULL)
				continue;
			if (!blank)
				printf("\n");
			blank = true;
			printf("%s: %s\n", name, lines[k]);
		}
	}

	const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc, "scheduler");
	if (s != NULL) {
		static const char *const counters[][2] = {
			{"requests", "requests"},    {"active", "active"},
			{"queued", "queued"},        {"tokens_generated", "tokens generated"},
			{"batches", "batches"},      {"ring_errors", "ring errors"},
			{"replays", "replays"},      {"batches_forgotten", "batches forgotten"},
			{"spec_drafted", "drafted"}, {"spec_accepted", "accepted"},
		};
		printf("\nscheduler:");
		for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
			char cell[32];
			printf("%s %s %s", k ? "," : "",
			       status_cell(cell, sizeof cell, 0, status_num(s, counters[k][0])),
			       counters[k][1]);
		}
		printf("\n");
	}
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{"url", required_argument, NULL, 'u'},   {"json", no_argument, NULL, 'j'},
		{"token", required_argument, NULL, 'a'}, {"timeout", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},        {0},
	};
	const char *url = "http://127.0.0.1:8080", *token = NULL;
	bool json = false;
	int32_t timeout_s = 10;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			url = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'a':
			token = optarg;
			break;
		case 'o':
			if (lm_cli_int(optarg, 1, 86400, &timeout_s) != 0)
				return lm_cli_usage_error(
					"status", "--timeout expects 1..86400, got '%s'", optarg);
			break;
		case 'h':
			fputs(status_usage, stdout);
			return 0;
		default:
			fputs(status_usage, stderr);
			return 2;
		}
	}
	if (optind < argc)
		return lm_cli_usage_error("status", "unexpected argument '%s'", argv[optind]);

	struct lm_http_resp resp = {0};
	lm_diag d = {{0}};
	int rc = lm_http_request(url, "GET", "/v1/status", token, NULL, 0, timeout_s * 1000, &resp,
				 &d);
	if (rc != 0) {
		fprintf(stderr, "layermesh status: %s\n", lm_diag_str(&d, rc));
		return 1;
	}
	if (resp.status != 200) {
		cJSON *e = cJSON_Parse(resp.body);
		const char *msg = status_str(cJSON_GetObjectItemCaseSensitive(e, "error"),
					     "message", resp.body);
		fprintf(stderr, "layermesh status: %s answered %d: %s\n", url, resp.status, msg);
		cJSON_Delete(e);
		lm_http_resp_fini(&resp);
		return 1;
	}
	cJSON *doc = cJSON_ParseWithLength(resp.body, resp.len);
	if (!cJSON_IsObject(doc)) {
		fprintf(stderr, "layermesh status: %s did not answer a JSON document\n", url);
		cJSON_Delete(doc);
		lm_http_resp_fini(&resp);
		return 1;
	}
	if (json)
		printf("%s\n", resp.body);
	else
		status_print(doc);
	cJSON_Delete(doc);
	lm_http_resp_fini(&resp);
	return 0;
}

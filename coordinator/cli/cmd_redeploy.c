/* layermesh redeploy — roll a new worker build out over a running mesh, one shard at a time.
 *
 * Asks the coordinator (POST /v1/admin/redeploy) and follows its progress until the rollout
 * succeeds or fails; see coordinator/supervise/rollout.h for the steps. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"
#include "coordinator/supervise/http_client.h"

static const char redeploy_usage[] =
	"usage: layermesh redeploy [--binary PATH] (--workers w1,w2 | --all) [options]\n"
	"\n"
	"Replaces worker processes of a running mesh with a new build, canary first, then the\n"
	"rest in batches. Per worker: start the new build beside the old one, check its protocol\n"
	"version and model, smoke-test it on a recorded input of its stage, pause the ring at a\n"
	"step boundary, move the live sequences' KV rows to it, re-point its predecessor, resume,\n"
	"stop the old one. A failing step keeps the old build serving and reports the step.\n"
	"\n"
	"  --url URL          the coordinator (default http://127.0.0.1:8080)\n"
	"  --token T          bearer token, when the mesh requires one\n"
	"  --binary PATH      the new layermesh-worker (default: the one running now)\n"
	"  --workers LIST     comma-separated worker names\n"
	"  --all              every worker\n"
	"  --batch N          workers switched together after the canary (default 1)\n"
	"  --canary NAME      the worker replaced first, alone (default: the first chosen)\n"
	"  --tolerance T      smoke test: max-abs difference per layer (default 1e-4)\n"
	"  --dry-run          print the plan and change nothing\n"
	"  --no-wait          start it and return; follow it with `layermesh status`\n"
	"  -h, --help         this text\n"
	"\n"
	"Exit status: 0 when every worker was replaced, 1 when the rollout failed (the mesh keeps\n"
	"serving on the old build), 2 for a usage error.\n";

static const char *redeploy_str(const cJSON *o, const char *k)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
	return s != NULL ? s : "";
}

/* redeploy_parse and redeploy_start return it to mean "go on"; anything else is the exit
 * status. */
#define REDEPLOY_GO_ON (-1)

struct redeploy_args {
	const char *url, *token, *binary, *workers, *canary;
	bool all, dry, wait;
	int32_t batch;
	float tol; /* < 0: the coordinator's default */
};

static int redeploy_parse(int argc, char **argv, struct redeploy_args *a)
{
	static const struct option opts[] = {
		{"url", required_argument, NULL, 'u'},
		{"token", required_argument, NULL, 'a'},
		{"binary", required_argument, NULL, 'b'},
		{"workers", required_argument, NULL, 'w'},
		{"all", no_argument, NULL, 'A'},
		{"batch", required_argument, NULL, 'n'},
		{"canary", required_argument, NULL, 'c'},
		{"tolerance", required_argument, NULL, 't'},
		{"dry-run", no_argument, NULL, 'd'},
		{"no-wait", no_argument, NULL, 'W'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	*a = (struct redeploy_args){
		.url = "http://127.0.0.1:8080", .wait = true, .batch = 1, .tol = -1};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			a->url = optarg;
			break;
		case 'a':
			a->token = optarg;
			break;
		case 'b':
			a->binary = optarg;
			break;
		case 'w':
			a->workers = optarg;
			break;
		case 'A':
			a->all = true;
			break;
		case 'n':
			if (lm_cli_int(optarg, 1, 64, &a->batch) != 0)
				return lm_cli_usage_error("redeploy", "--batch expects 1..64");
			break;
		case 'c':
			a->canary = optarg;
			break;
		case 't':
			if (lm_cli_float(optarg, 0, 1e9, &a->tol) != 0)
				return lm_cli_usage_error("redeploy",
							  "--tolerance expects a number");
			break;
		case 'd':
			a->dry = true;
			break;
		case 'W':
			a->wait = false;
			break;
		case 'h':
			fputs(redeploy_usage, stdout);
			return 0;
		default:
			fputs(redeploy_usage, stderr);
			return 2;
		}
	}
	if (optind < argc)
		return lm_cli_usage_error("redeploy", "unexpected argument '%s'", argv[optind]);
	if (a->all == (a->workers != NULL))
		return lm_cli_usage_error("redeploy", "give --workers LIST or --all");
	return REDEPLOY_GO_ON;
}

/* The POST /v1/admin/redeploy body (malloc'd). */
static char *redeploy_body(const struct redeploy_args *a)
{
	cJSON *req = cJSON_CreateObject();
	char abs[PATH_MAX];
	if (a->binary != NULL) {
		/* The coordinator resolves paths from its own directory: send an absolute one. */
		if (realpath(a->binary, abs) == NULL)
			snprintf(abs, sizeof abs, "%s", a->binary);
		cJSON_AddStringToObject(req, "binary", abs);
	}
	if (a->all) {
		cJSON_AddBoolToObject(req, "all", true);
	} else {
		cJSON *list = cJSON_AddArrayToObject(req, "workers");
		char *copy = strdup(a->workers), *save = NULL;
		for (char *t = copy != NULL ? strtok_r(copy, ",", &save) : NULL; t != NULL;
		     t = strtok_r(NULL, ",", &save))
			cJSON_AddItemToArray(list, cJSON_CreateString(t));
		free(copy);
	}
	cJSON_AddNumberToObject(req, "batch", a->batch);
	if (a->canary != NULL)
		cJSON_AddStringToObject(req, "canary", a->canary);
	if (a->tol >= 0)
		cJSON_AddNumberToObject(req, "tolerance", a->tol);
	if (a->dry)
		cJSON_AddBoolToObject(req, "dry_run", true);
	char *body = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	return body;
}

/* Asks the coordinator to start (or plan) the rollout and prints its plan, and a dry run's
 * moves. */
static int redeploy_start(const struct redeploy_args *a)
{
	char *body = redeploy_body(a);
	struct lm_http_resp resp;
	lm_diag d = {{0}};
	int rc = lm_http_request(a->url, "POST", "/v1/admin/redeploy", a->token, body, strlen(body),
				 30000, &resp, &d);
	free(body);
	if (rc != 0) {
		fprintf(stderr, "layermesh redeploy: %s\n", lm_diag_str(&d, rc));
		return 1;
	}
	cJSON *o = cJSON_Parse(resp.body);
	if (resp.status != 200 && resp.status != 202) {
		const char *msg = redeploy_str(cJSON_GetObjectItem(o, "error"), "message");
		fprintf(stderr, "layermesh redeploy: HTTP %d: %s\n", resp.status,
			msg[0] ? msg : resp.body);
		cJSON_Delete(o);
		lm_http_resp_fini(&resp);
		return 1;
	}
	lm_http_resp_fini(&resp);
	char *plan = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "plan"));
	printf("%s %s: batches %s\n", a->dry ? "plan for" : "redeploying",
	       redeploy_str(o, "binary"), plan != NULL ? plan : "?");
	free(plan);
	if (a->dry) {
		/* The coordinator's answer is not trusted to have every field. */
		const cJSON *moves = cJSON_GetObjectItem(o, "moves");
		for (const cJSON *mv = cJSON_IsArray(moves) ? moves->child : NULL; mv;
		     mv = mv->next)
			printf("  %s: %s -> %s\n", redeploy_str(mv, "worker"),
			       redeploy_str(mv, "from"), redeploy_str(mv, "to"));
		cJSON_Delete(o);
		return 0;
	}
	cJSON_Delete(o);
	return REDEPLOY_GO_ON;
}

/* Prints a line for every worker of a progress document whose status or step is not the one
 * in last[k] (and remembers it there). */
static void redeploy_print_steps(const cJSON *o, char last[64][64])
{
	const cJSON *ws = cJSON_GetObjectItem(o, "workers");
	int k = 0;
	for (const cJSON *w = ws != NULL ? ws->child : NULL; w != NULL && k < 64;
	     w = w->next, k++) {
		char now[64];
		snprintf(now, sizeof now, "%s/%s", redeploy_str(w, "status"),
			 redeploy_str(w, "step"));
		if (strcmp(now, last[k]) == 0 ||
		    strcmp(redeploy_str(w, "status"), "untouched") == 0)
			continue;
		printf("  %s: %s%s%s", redeploy_str(w, "name"), redeploy_str(w, "status"),
		       redeploy_str(w, "step")[0] ? ", " : "", redeploy_str(w, "step"));
		const cJSON *pause = cJSON_GetObjectItem(w, "pause_ms");
		if (pause != NULL)
			printf(" (paused %.1f ms, now at %s)", pause->valuedouble,
			       redeploy_str(w, "to"));
		printf("\n");
		fflush(stdout);
		snprintf(last[k], sizeof last[k], "%s", now);
	}
}

/* Follows the rollout until it ends: one line per worker step as it changes, then the
 * outcome. */
static int redeploy_follow(const char *url, const char *token)
{
	char last[64][64];
	memset(last, 0, sizeof last);
	for (;;) {
		struct timespec ts = {0, 200 * 1000000L};
		nanosleep(&ts, NULL);
		struct lm_http_resp resp;
		lm_diag d = {{0}};
		int rc = lm_http_request(url, "GET", "/v1/admin/redeploy", token, NULL, 0, 30000,
					 &resp, &d);
		if (rc != 0) {
			fprintf(stderr, "layermesh redeploy: %s\n", lm_diag_str(&d, rc));
			return 1;
		}
		cJSON *o = cJSON_Parse(resp.body);
		lm_http_resp_fini(&resp);
		redeploy_print_steps(o, last);
		const char *state = redeploy_str(o, "state");
		if (strcmp(state, "running") != 0) {
			int status = strcmp(state, "succeeded") == 0 ? 0 : 1;
			if (status == 0)
				printf("succeeded; longest pause %.1f ms; %.0f sequences' KV moved "
				       "(%.0f bytes, each read back bit for bit)\n",
				       cJSON_GetNumberValue(cJSON_GetObjectItem(o, "max_pause_ms")),
				       cJSON_GetNumberValue(
					       cJSON_GetObjectItem(o, "moved_sequences")),
				       cJSON_GetNumberValue(
					       cJSON_GetObjectItem(o, "moved_kv_bytes")));
			else
				fprintf(stderr,
					"layermesh redeploy: failed at %s of %s: %s (the old build "
					"keeps serving)\n",
					redeploy_str(o, "failed_step"),
					redeploy_str(o, "failed_worker"), redeploy_str(o, "error"));
			cJSON_Delete(o);
			return status;
		}
		cJSON_Delete(o);
	}
}

int cmd_redeploy(int argc, char **argv)
{
	struct redeploy_args a;
	int rc = redeploy_parse(argc, argv, &a);
	if (rc == REDEPLOY_GO_ON)
		rc = redeploy_start(&a);
	if (rc != REDEPLOY_GO_ON)
		return rc;
	return a.wait ? redeploy_follow(a.url, a.token) : 0;
}

/* layermesh generate — generate text through a running mesh's HTTP API.
 *
 * Prints exactly what `layermesh run` prints for the same arguments: the continuation (streamed
 * as it arrives) and a newline on stdout, or with --ids one line of prompt and generated ids; the
 * same stats line on stderr. It sends every sampling parameter explicitly, with run's defaults,
 * so the two agree whatever the API's own defaults are. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api/api_json.h"
#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"
#include "coordinator/supervise/http_client.h"

static const char generate_usage[] =
	"usage: layermesh generate --prompt TEXT [options]\n"
	"\n"
	"Sends the prompt to a running mesh (`layermesh up`) and prints the continuation, as\n"
	"`layermesh run` would print it.\n"
	"\n"
	"  --url URL          the coordinator's API (default http://127.0.0.1:8080)\n"
	"  --prompt TEXT      the prompt\n"
	"  -n, --n-predict N  generate at most N tokens (default 256)\n"
	"  --temp T           temperature; 0 is greedy (default 0.8)\n"
	"  --top-k K          keep the K most likely tokens; 0 is off (default 40)\n"
	"  --top-p P          nucleus sampling; 1 is off (default 0.95)\n"
	"  --min-p P          drop tokens below P x the top probability; 0 is off (default 0.05)\n"
	"  --seed S           sampling seed (default 0)\n"
	"  --ids              print one line: the prompt's ids (with BOS), then the generated ids\n"
	"  --token T          bearer token, when the mesh requires one\n"
	"  --timeout S        give up after S seconds without an answer (default 300)\n"
	"  -h, --help         this text\n";

struct gen_state {
	cJSON *last; /* the last event with usage */
	char error[512];
};

static void gen_on_line(void *arg, const char *line)
{
	struct gen_state *g = arg;
	if (strncmp(line, "data: ", 6) != 0 || strcmp(line + 6, "[DONE]") == 0)
		return;
	cJSON *o = cJSON_Parse(line + 6);
	if (o == NULL)
		return;
	const cJSON *err = cJSON_GetObjectItem(o, "error");
	if (err != NULL) {
		const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(err, "message"));
		snprintf(g->error, sizeof g->error, "%s",
			 msg ? msg : "the mesh failed the request");
		cJSON_Delete(o);
		return;
	}
	const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
	const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(ch, "text"));
	if (text != NULL && text[0] != '\0') {
		fputs(text, stdout);
		fflush(stdout);
	}
	if (cJSON_GetObjectItem(o, "usage") != NULL) {
		cJSON_Delete(g->last);
		g->last = o;
		return;
	}
	cJSON_Delete(o);
}

static void gen_stats(const cJSON *o)
{
	const cJSON *t = cJSON_GetObjectItem(o, "timings");
	double pn = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "prompt_n"));
	double pms = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "prompt_ms"));
	double gn = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "predicted_n"));
	double gms = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "predicted_ms"));
	fprintf(stderr,
		"prompt tokens %.0f, generated tokens %.0f, prefill %.1f tok/s, decode %.1f "
		"tok/s\n",
		pn, gn, pms > 0 ? pn / (pms / 1e3) : 0.0, gms > 0 ? (gn - 1) / (gms / 1e3) : 0.0);
}

/* The completion request `generate` sends (malloc'd JSON), or NULL. */
static char *gen_body(const struct lm_gen_args *g)
{
	cJSON *req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "prompt", g->prompt);
	cJSON_AddNumberToObject(req, "max_tokens", g->n_predict);
	cJSON_AddNumberToObject(req, "temperature", g->sampling.temperature);
	cJSON_AddNumberToObject(req, "top_k", g->sampling.top_k);
	cJSON_AddNumberToObject(req, "top_p", g->sampling.top_p);
	cJSON_AddNumberToObject(req, "min_p", g->sampling.min_p);
	api_json_add_u64(req, "seed", g->sampling.seed);
	cJSON_AddBoolToObject(req, "stream", !g->print_ids);
	cJSON_AddBoolToObject(req, "return_token_ids", g->print_ids);
	char *body = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	return body;
}

/* What came back: the ids (--ids) or the end of the streamed text, and the statistics; or the
 * error. Returns the exit status. */
static int gen_report(int rc, const struct lm_http_resp *resp, const struct gen_state *st,
		      bool print_ids, const lm_diag *d)
{
	if (rc != 0) {
		fprintf(stderr, "layermesh generate: %s\n", lm_diag_str(d, rc));
		return 1;
	}
	if (resp->status != 200) {
		cJSON *o = cJSON_Parse(resp->body);
		const char *msg = cJSON_GetStringValue(
			cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "message"));
		fprintf(stderr, "layermesh generate: HTTP %d: %s\n", resp->status,
			msg ? msg : resp->body);
		cJSON_Delete(o);
		return 1;
	}
	if (st->error[0] != '\0') {
		fprintf(stderr, "\nlayermesh generate: %s\n", st->error);
		return 1;
	}
	if (print_ids) {
		cJSON *o = cJSON_Parse(resp->body);
		const cJSON *p = cJSON_GetObjectItem(o, "prompt_token_ids");
		const cJSON *t = cJSON_GetObjectItem(o, "token_ids");
		int k = 0;
		for (const cJSON *e = p ? p->child : NULL; e; e = e->next)
			printf(k++ ? " %d" : "%d", (int)e->valuedouble);
		for (const cJSON *e = t ? t->child : NULL; e; e = e->next)
			printf(k++ ? " %d" : "%d", (int)e->valuedouble);
		printf("\n");
		fflush(stdout);
		gen_stats(o);
		cJSON_Delete(o);
	} else {
		printf("\n");
		fflush(stdout);
		if (st->last != NULL)
			gen_stats(st->last);
	}
	return 0;
}

int cmd_generate(int argc, char **argv)
{
	static const struct option opts[] = {
		{"url", required_argument, NULL, 'u'},
		{"prompt", required_argument, NULL, 'p'},
		{"n-predict", required_argument, NULL, 'n'},
		{"temp", required_argument, NULL, 't'},
		{"top-k", required_argument, NULL, 'k'},
		{"top-p", required_argument, NULL, 'P'},
		{"min-p", required_argument, NULL, 'M'},
		{"seed", required_argument, NULL, 's'},
		{"ids", no_argument, NULL, 'i'},
		{"token", required_argument, NULL, 'a'},
		{"timeout", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct lm_gen_args g;
	const char *url = "http://127.0.0.1:8080", *token = NULL;
	int32_t timeout_s = 300;
	int c, rc;

	lm_gen_args_default(&g, "generate");
	optind = 1;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			url = optarg;
			break;
		case 'a':
			token = optarg;
			break;
		case 'o':
			if (lm_cli_int(optarg, 1, 86400, &timeout_s) != 0)
				return lm_cli_usage_error("generate", "--timeout expects seconds");
			break;
		case 'h':
			fputs(generate_usage, stdout);
			return 0;
		case '?':
			fputs(generate_usage, stderr);
			return 2;
		default:
			if ((rc = lm_gen_args_parse(&g, c, optarg)) != 0)
				return rc;
		}
	}
	if (optind < argc)
		return lm_cli_usage_error("generate", "unexpected argument '%s'", argv[optind]);
	if (g.prompt == NULL)
		return lm_cli_usage_error("generate", "--prompt is required");

	char *body = gen_body(&g);
	if (body == NULL)
		return 1;

	struct lm_http_resp resp;
	struct gen_state st = {0};
	lm_diag d = {{0}};
	if (g.print_ids)
		rc = lm_http_request(url, "POST", "/v1/completions", token, body, strlen(body),
				     timeout_s * 1000, &resp, &d);
	else
		rc = lm_http_stream(url, "/v1/completions", token, body, strlen(body),
				    timeout_s * 1000, gen_on_line, &st, &resp, &d);
	free(body);
	int status = gen_report(rc, &resp, &st, g.print_ids, &d);
	fflush(stdout);
	cJSON_Delete(st.last);
	lm_http_resp_fini(&resp);
	return status;
}

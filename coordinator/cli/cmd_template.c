/* cmd_template.c — `layermesh template`: which chat format a template is recognised as, and the
 * prompts it renders conversations into, exactly as POST /v1/chat/completions renders them
 * (the same message handling, and the Jinja engine or a format's formatter:
 * coordinator/api/api_request.h, jinja.h, chat_template.h). The comparisons with
 * @huggingface/jinja (tests/integration/test_chat_templates.sh, test_jinja_templates.sh) run
 * through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/buf.h"
#include "common/format/gguf.h"
#include "common/tok/tokenizer.h"
#include "coordinator/api/api_json.h"
#include "coordinator/api/api_request.h"
#include "coordinator/api/chat_jinja.h"
#include "coordinator/api/chat_template.h"
#include "coordinator/api/jinja.h"
#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"

static const char template_usage[] =
	"usage: layermesh template (--template FILE | --model M.gguf) [--bos TEXT] [--eos TEXT]\n"
	"                          [--format NAME]\n"
	"                          (--detect | --print | --tokens | --conversations FILE |\n"
	"                           --jinja FILE [--date YYYY-MM-DD])\n"
	"\n"
	"Recognises a chat template's format, or renders conversations with it as the chat\n"
	"API does.\n"
	"\n"
	"  --template FILE       a Jinja chat template (tokenizer.chat_template's text)\n"
	"  --model M.gguf        the template, BOS and EOS of a GGUF's vocabulary\n"
	"  --bos, --eos TEXT     the template's bos_token and eos_token (default: the model's,\n"
	"                        or empty)\n"
	"  --format NAME         render with this format's formatter instead of the template\n"
	"                        (as mesh.toml's [model] chat_template does)\n"
	"  --detect              print the recognised format and exit (1 when none)\n"
	"  --print               print the template's text and exit\n"
	"  --tokens              print {\"bos_token\", \"eos_token\"} as used, and exit\n"
	"  --conversations FILE  a JSON array of chat request bodies ({\"messages\": [...],\n"
	"                        \"chat_template_kwargs\": {...}}); prints a JSON array with, for\n"
	"                        each, {\"text\": the prompt the chat API renders (the template "
	"by\n"
	"                        the Jinja engine, or --format's formatter)} or {\"error\": why\n"
	"                        it is refused}\n"
	"  --jinja FILE          a JSON array of {\"messages\", \"tools\", "
	"\"add_generation_prompt\",\n"
	"                        \"chat_template_kwargs\"}, each rendered by the Jinja engine with "
	"the\n"
	"                        messages and tools as they are; prints a JSON array as\n"
	"                        --conversations does (any template, recognised or not)\n"
	"  --date YYYY-MM-DD     the date strftime_now() sees (default: today, local time)\n"
	"  -h, --help            this text\n";

struct tmpl_opts {
	const char *tmpl_path, *model, *bos, *eos, *format, *convs, *jinja, *date;
	bool detect, print, tokens;
};

static int tmpl_read(const char *path, struct lm_buf *out)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "layermesh template: %s: cannot open it\n", path);
		return 1;
	}
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		lm_buf_add(out, buf, n);
	fclose(f);
	return 0;
}

/* One conversation into its result object. */
static cJSON *tmpl_render_one(const cJSON *conv, const struct api_limits *lim)
{
	cJSON *res = cJSON_CreateObject();
	struct api_error err = {0};
	struct lm_buf text = {0};
	bool gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(conv, "add_generation_prompt"));
	if (api_chat_prompt(conv, lim, gen, &text, &err) == 0) {
		char *s = strndup(text.p != NULL ? text.p : "", text.len);
		cJSON_AddStringToObject(res, "text", s != NULL ? s : "");
		free(s);
	} else {
		cJSON_AddStringToObject(res, "error", err.message);
	}
	api_error_fini(&err);
	lm_buf_fini(&text);
	return res;
}

static int tmpl_parse(int argc, char **argv, struct tmpl_opts *o)
{
	memset(o, 0, sizeof *o);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char **dst = strcmp(a, "--template") == 0        ? &o->tmpl_path
				   : strcmp(a, "--model") == 0         ? &o->model
				   : strcmp(a, "--bos") == 0           ? &o->bos
				   : strcmp(a, "--eos") == 0           ? &o->eos
				   : strcmp(a, "--format") == 0        ? &o->format
				   : strcmp(a, "--conversations") == 0 ? &o->convs
				   : strcmp(a, "--jinja") == 0         ? &o->jinja
				   : strcmp(a, "--date") == 0          ? &o->date
								       : NULL;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(template_usage, stdout);
			return -1;
		} else if (strcmp(a, "--detect") == 0) {
			o->detect = true;
		} else if (strcmp(a, "--print") == 0) {
			o->print = true;
		} else if (strcmp(a, "--tokens") == 0) {
			o->tokens = true;
		} else if (dst != NULL && i + 1 < argc) {
			*dst = argv[++i];
		} else {
			return lm_cli_usage_error("template", "unexpected argument '%s'", a);
		}
	}
	if ((o->tmpl_path == NULL) == (o->model == NULL))
		return lm_cli_usage_error("template", "give one of --template and --model");
	if (!o->detect && !o->print && !o->tokens && o->convs == NULL && o->jinja == NULL)
		return lm_cli_usage_error("template", "give --detect, --print, --tokens, "
						      "--conversations or --jinja");
	return 0;
}

/* The template, BOS and EOS of --model or --template. */
static int tmpl_source(const struct tmpl_opts *o, struct lm_buf *tmpl, char *bos, char *eos,
		       size_t cap)
{
	snprintf(bos, cap, "%s", o->bos != NULL ? o->bos : "");
	snprintf(eos, cap, "%s", o->eos != NULL ? o->eos : "");
	if (o->tmpl_path != NULL)
		return tmpl_read(o->tmpl_path, tmpl);
	gguf_file *f = NULL;
	tok_vocab *v = NULL;
	lm_diag d = {{0}};
	const char *t = NULL;
	if (gguf_open(o->model, &f, &d) != 0 || tok_load(f, &v, &d) != 0 ||
	    gguf_get_str(f, "tokenizer.chat_template", &t, &d) != 0) {
		fprintf(stderr, "layermesh template: %s: %s\n", o->model, d.msg);
		tok_free(v);
		gguf_close(f);
		return 1;
	}
	lm_buf_adds(tmpl, t);
	size_t n;
	if (o->bos == NULL && tok_bos(v) >= 0)
		snprintf(bos, cap, "%s", tok_text(v, tok_bos(v), &n));
	if (o->eos == NULL && tok_eos(v) >= 0)
		snprintf(eos, cap, "%s", tok_text(v, tok_eos(v), &n));
	tok_free(v);
	gguf_close(f);
	return 0;
}

/* --date, or today. */
static int tmpl_date(const char *s, struct jinja_date *out)
{
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	*out = (struct jinja_date){tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
				   tm.tm_min};
	if (s == NULL)
		return 0;
	if (sscanf(s, "%d-%d-%d", &out->year, &out->month, &out->day) != 3 || out->month < 1 ||
	    out->month > 12 || out->day < 1 || out->day > 31) {
		fprintf(stderr, "layermesh template: --date %s: not YYYY-MM-DD\n", s);
		return 1;
	}
	out->hour = out->minute = 0;
	return 0;
}

/* One --jinja case into its result object. */
static cJSON *tmpl_jinja_one(const jinja_tmpl *t, const char *parse_err, const cJSON *c,
			     const char *bos, const char *eos, const struct jinja_date *date)
{
	cJSON *res = cJSON_CreateObject(), *vars = NULL;
	lm_diag d = {{0}};
	struct lm_buf text = {0};
	int rc = t == NULL ? lm_fail(&d, LM_EINVAL, "%s", parse_err)
			   : chat_jinja_vars(
				     cJSON_GetObjectItemCaseSensitive(c, "messages"),
				     cJSON_GetObjectItemCaseSensitive(c, "tools"),
				     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
					     c, "add_generation_prompt")),
				     cJSON_GetObjectItemCaseSensitive(c, "chat_template_kwargs"),
				     bos, eos, &vars, &d);
	if (rc == 0)
		rc = jinja_render(t, vars, date, NULL, &text, &d);
	if (rc == 0) {
		char *s = strndup(text.p != NULL ? text.p : "", text.len);
		cJSON_AddStringToObject(res, "text", s != NULL ? s : "");
		free(s);
	} else {
		cJSON_AddStringToObject(res, "error", d.msg);
	}
	cJSON_Delete(vars);
	lm_buf_fini(&text);
	return res;
}

/* --jinja: every case rendered by the engine, as a JSON array on stdout. */
static int tmpl_jinja(const struct tmpl_opts *o, const struct lm_buf *tmpl, const char *bos,
		      const char *eos)
{
	struct jinja_date date;
	struct lm_buf cases = {0};
	char why[300];
	if (tmpl_date(o->date, &date) != 0 || tmpl_read(o->jinja, &cases) != 0)
		return 1;
	cJSON *list = api_json_parse(cases.p, cases.len, why, sizeof why);
	lm_buf_fini(&cases);
	if (!cJSON_IsArray(list)) {
		fprintf(stderr, "layermesh template: %s: %s\n", o->jinja,
			list == NULL ? why : "not a JSON array");
		cJSON_Delete(list);
		return 1;
	}
	lm_diag d = {{0}};
	jinja_tmpl *t = jinja_parse(tmpl->p != NULL ? tmpl->p : "", tmpl->len, &d);
	cJSON *out = cJSON_CreateArray();
	for (const cJSON *c = list->child; c != NULL; c = c->next)
		cJSON_AddItemToArray(out, tmpl_jinja_one(t, d.msg, c, bos, eos, &date));
	jinja_free(t);
	char *s = cJSON_PrintUnformatted(out);
	if (s != NULL)
		printf("%s\n", s);
	free(s);
	cJSON_Delete(out);
	cJSON_Delete(list);
	return s != NULL ? 0 : 1;
}

/* --conversations: each rendered as the chat API renders it: by the template through the
 * Jinja engine, or by --format's formatter (as mesh.toml's [model] chat_template). */
static int tmpl_conversations(const struct tmpl_opts *o, struct lm_buf *tmpl, enum chat_format f,
			      const char *bos, const char *eos)
{
	struct lm_buf convs = {0};
	char why[300];
	lm_diag d = {{0}};
	jinja_tmpl *t = NULL;
	if (o->format == NULL) {
		t = jinja_parse(tmpl->p != NULL ? tmpl->p : "", tmpl->len, &d);
		lm_buf_fini(tmpl);
		if (t == NULL) {
			fprintf(stderr, "layermesh template: the template cannot be parsed: %s\n",
				d.msg);
			return 1;
		}
	}
	const struct api_limits lim = {.jinja = t, .chat = f, .bos_text = bos, .eos_text = eos};
	cJSON *list = NULL;
	if (tmpl_read(o->convs, &convs) == 0)
		list = api_json_parse(convs.p, convs.len, why, sizeof why);
	lm_buf_fini(&convs);
	if (!cJSON_IsArray(list)) {
		fprintf(stderr, "layermesh template: %s: %s\n", o->convs,
			list == NULL ? why : "not a JSON array");
		cJSON_Delete(list);
		jinja_free(t);
		return 1;
	}
	cJSON *out = cJSON_CreateArray();
	for (const cJSON *c = list->child; c != NULL; c = c->next)
		cJSON_AddItemToArray(out, tmpl_render_one(c, &lim));
	char *s = cJSON_PrintUnformatted(out);
	if (s != NULL)
		printf("%s\n", s);
	free(s);
	cJSON_Delete(out);
	cJSON_Delete(list);
	jinja_free(t);
	return s != NULL ? 0 : 1;
}

int cmd_template(int argc, char **argv)
{
	struct tmpl_opts o;
	int rc = tmpl_parse(argc, argv, &o);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	struct lm_buf tmpl = {0};
	char bos[256], eos[256], why[300];
	if (tmpl_source(&o, &tmpl, bos, eos, sizeof bos) != 0)
		return 1;
	if (o.print || o.tokens) {
		if (o.print)
			fwrite(tmpl.p != NULL ? tmpl.p : "", 1, tmpl.len, stdout);
		lm_buf_fini(&tmpl);
		if (o.tokens) {
			cJSON *t = cJSON_CreateObject();
			cJSON_AddStringToObject(t, "bos_token", bos);
			cJSON_AddStringToObject(t, "eos_token", eos);
			char *s = cJSON_PrintUnformatted(t);
			printf("%s\n", s != NULL ? s : "{}");
			free(s);
			cJSON_Delete(t);
		}
		return 0;
	}
	if (o.jinja != NULL) {
		rc = tmpl_jinja(&o, &tmpl, bos, eos);
		lm_buf_fini(&tmpl);
		return rc;
	}
	enum chat_format f = o.format != NULL ? chat_format_by_name(o.format)
					      : chat_template_detect(tmpl.p != NULL ? tmpl.p : "",
								     tmpl.len, why, sizeof why);
	if (o.detect || o.format != NULL) {
		lm_buf_fini(&tmpl);
		if (f == CHAT_NONE) {
			fprintf(stderr, "layermesh template: %s\n",
				o.format != NULL ? "no such format" : why);
			return 1;
		}
		if (o.detect) {
			printf("%s\n", chat_format_name(f));
			return 0;
		}
	}
	return tmpl_conversations(&o, &tmpl, f, bos, eos);
}

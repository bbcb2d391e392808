/* tool_call.c — tool calls and reasoning out of generated text. See tool_call.h.
 *
 * The parse is in two steps: the reasoning block at the start (or harmony's channels, which
 * interleave both), then the body: content up to the first call's marker, the calls, and the
 * text after them. Every loop walks forward through the text it was given. */
#include "coordinator/api/tool_call.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>

#include "common/base/clock.h"

#define TC_MAX_DEPTH 64
#define TC_BAD       1 /* a call written badly (LM_E* codes are negative) */

static const char *const tool_format_names[TOOL_FMT_COUNT] = {
	"none", "hermes", "llama3", "mistral", "harmony", "gemma4", "deepseek",
};

const char *tool_format_name(enum tool_format f)
{
	return (unsigned)f < TOOL_FMT_COUNT ? tool_format_names[f] : "none";
}

static bool has(const char *t, size_t n, const char *lit)
{
	return t != NULL && memmem(t, n, lit, strlen(lit)) != NULL;
}

struct tool_syntax tool_syntax_detect(const char *t, size_t n)
{
	struct tool_syntax s = {0};
	if (has(t, n, "<|channel|>") && has(t, n, "<|message|>") && has(t, n, "<|start|>assistant"))
		s.fmt = TOOL_FMT_HARMONY;
	else if (has(t, n, "<|tool_call>"))
		s.fmt = TOOL_FMT_GEMMA4;
	else if (has(t, n, "<｜tool▁calls▁begin｜>"))
		s.fmt = TOOL_FMT_DEEPSEEK;
	else if (has(t, n, "[TOOL_CALLS]"))
		s.fmt = TOOL_FMT_MISTRAL;
	else if (has(t, n, "<tool_call>") && !has(t, n, "<function=") && !has(t, n, "<arg_key>"))
		s.fmt = TOOL_FMT_HERMES; /* JSON inside: not Qwen3-Coder's or GLM's XML */
	else if (has(t, n, "<|start_header_id|>") && has(t, n, "\"parameters\""))
		s.fmt = TOOL_FMT_LLAMA3;
	s.mistral_args = s.fmt == TOOL_FMT_MISTRAL && has(t, n, "[ARGS]");
	if (s.fmt == TOOL_FMT_GEMMA4 && has(t, n, "<|channel>")) {
		s.think_open = "<|channel>thought";
		s.think_close = "<channel|>";
	} else if (s.fmt != TOOL_FMT_HARMONY && has(t, n, "<think>")) {
		s.think_open = "<think>";
		s.think_close = "</think>";
	} else if (s.fmt != TOOL_FMT_HARMONY && has(t, n, "[THINK]")) {
		s.think_open = "[THINK]";
		s.think_close = "[/THINK]";
	}
	return s;
}

static bool tc_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *skip_ws(const char *p, const char *e)
{
	while (p < e && tc_ws(*p))
		p++;
	return p;
}

void tool_syntax_prompt(struct tool_syntax *s, const char *prompt, size_t len)
{
	s->think_open_at_start = false;
	if (s->think_open == NULL || prompt == NULL)
		return;
	const char *e = prompt + len;
	while (e > prompt && tc_ws(e[-1]))
		e--;
	size_t n = strlen(s->think_open);
	s->think_open_at_start = (size_t)(e - prompt) >= n && memcmp(e - n, s->think_open, n) == 0;
}

bool tool_syntax_active(const struct tool_syntax *s)
{
	return s->fmt != TOOL_FMT_NONE || s->think_open != NULL;
}

/* ------------------------------------------------------------------ text helpers */

static bool starts(const char *p, const char *e, const char *lit)
{
	size_t n = strlen(lit);
	return (size_t)(e - p) >= n && memcmp(p, lit, n) == 0;
}

static const char *find(const char *p, const char *e, const char *lit)
{
	return p < e ? memmem(p, (size_t)(e - p), lit, strlen(lit)) : NULL;
}

/* Where p[0..e) ends once a tail that is a proper prefix of one of lits is held back. */
static const char *hold_back(const char *p, const char *e, const char *const *lits)
{
	const char *cut = e;
	for (int i = 0; lits[i] != NULL; i++) {
		size_t n = strlen(lits[i]);
		size_t k = n - 1 < (size_t)(e - p) ? n - 1 : (size_t)(e - p);
		for (; k > 0; k--)
			if (memcmp(e - k, lits[i], k) == 0)
				break;
		if (e - k < cut)
			cut = e - k;
	}
	return cut;
}

/* The earliest occurrence of any of lits in [p, e), or NULL. */
static const char *find_any(const char *p, const char *e, const char *const *lits)
{
	const char *best = NULL;
	for (int i = 0; lits[i] != NULL; i++) {
		const char *at = find(p, e, lits[i]);
		if (at != NULL && (best == NULL || at < best))
			best = at;
	}
	return best;
}

/* ------------------------------------------------------------------ calls */

static int add_call(struct tool_parsed *out, const char *name, size_t name_len, const cJSON *args)
{
	struct tool_call *c = realloc(out->calls, (size_t)(out->n_calls + 1) * sizeof *c);
	if (c == NULL)
		return LM_ENOMEM;
	out->calls = c;
	c += out->n_calls;
	c->name = strndup(name, name_len);
	c->args = cJSON_PrintUnformatted(args);
	if (c->name == NULL || c->args == NULL) {
		free(c->name);
		free(c->args);
		return LM_ENOMEM;
	}
	out->n_calls++;
	return 0;
}

static bool name_ok(const struct tool_want *w, const char *name, size_t n)
{
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return false;
	}
	if (w->names == NULL)
		return true;
	for (int i = 0; i < w->n_names; i++)
		if (strlen(w->names[i]) == n && memcmp(w->names[i], name, n) == 0)
			return true;
	return false;
}

/* A JSON value at p (white space before it skipped); *end after it. NULL when none parses. */
static cJSON *json_at(const char *p, const char *e, const char **end)
{
	const char *q = NULL;
	cJSON *v = cJSON_ParseWithLengthOpts(p, (size_t)(e - p), &q, false);
	if (v != NULL)
		*end = q;
	return v;
}

/* Arguments as the formats write them: an object, or a string holding one. */
static int call_with_args(struct tool_parsed *out, const struct tool_want *w, const char *name,
			  size_t n, const cJSON *args)
{
	if (!name_ok(w, name, n))
		return TC_BAD;
	if (cJSON_IsObject(args))
		return add_call(out, name, n, args);
	if (!cJSON_IsString(args))
		return TC_BAD;
	const char *s = args->valuestring, *end = s;
	cJSON *obj = json_at(s, s + strlen(s), &end);
	int rc = cJSON_IsObject(obj) && *skip_ws(end, s + strlen(s)) == '\0'
			 ? add_call(out, name, n, obj)
			 : TC_BAD;
	cJSON_Delete(obj);
	return rc;
}

/* {"name": N, "arguments" (or "parameters"): {...}} */
static int call_from_object(struct tool_parsed *out, const struct tool_want *w, const cJSON *o)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
	if (args == NULL)
		args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
	if (!cJSON_IsObject(o) || !cJSON_IsString(name) || args == NULL)
		return TC_BAD;
	return call_with_args(out, w, name->valuestring, strlen(name->valuestring), args);
}

/* A JSON object call at p: parsed and added; *end after it. */
static int json_call_at(struct tool_parsed *out, const struct tool_want *w, const char *p,
			const char *e, const char **end)
{
	cJSON *o = json_at(skip_ws(p, e), e, end);
	int rc = o != NULL ? call_from_object(out, w, o) : TC_BAD;
	cJSON_Delete(o);
	return rc;
}

static int parse_hermes(struct tool_parsed *out, const struct tool_want *w, const char *p,
			const char *e, const char **after)
{
	int rc = 0;
	while (rc == 0 && starts(skip_ws(p, e), e, "<tool_call>")) {
		p = skip_ws(p, e) + strlen("<tool_call>");
		if ((rc = json_call_at(out, w, p, e, &p)) != 0)
			break;
		p = skip_ws(p, e);
		if (!starts(p, e, "</tool_call>"))
			return TC_BAD;
		p += strlen("</tool_call>");
	}
	*after = p;
	return rc;
}

static int parse_llama3(struct tool_parsed *out, const struct tool_want *w, const char *p,
			const char *e, const char **after)
{
	p = skip_ws(p, e);
	if (starts(p, e, "<|python_tag|>"))
		p += strlen("<|python_tag|>");
	int rc = json_call_at(out, w, p, e, &p);
	while (rc == 0) {
		const char *q = skip_ws(p, e);
		if (q == e || *q != ';')
			break;
		q = skip_ws(q + 1, e);
		if (q == e) {
			p = q;
			break;
		}
		rc = json_call_at(out, w, q, e, &p);
	}
	*after = p;
	/* The answer is the calls: text after them means it was not one. */
	return rc == 0 && skip_ws(p, e) != e ? TC_BAD : rc;
}

#define MISTRAL_CALLS "[TOOL_CALLS]"

/* After [TOOL_CALLS]: a JSON array of calls, or N[ARGS]{...} (N[CALL_ID]id[ARGS] too). */
static int mistral_one(struct tool_parsed *out, const struct tool_want *w, const char *p,
		       const char *e, const char **end)
{
	p = skip_ws(p, e);
	if (p < e && *p == '[') {
		cJSON *arr = json_at(p, e, end);
		int rc = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) > 0 ? 0 : TC_BAD;
		for (const cJSON *c = arr != NULL ? arr->child : NULL; rc == 0 && c != NULL;
		     c = c->next)
			rc = call_from_object(out, w, c);
		cJSON_Delete(arr);
		return rc;
	}
	const char *args = find(p, e, "[ARGS]");
	if (args == NULL)
		return TC_BAD;
	const char *name_end = find(p, args, "[CALL_ID]");
	cJSON *o = json_at(args + strlen("[ARGS]"), e, end);
	int rc = cJSON_IsObject(o)
			 ? call_with_args(out, w, p, (size_t)((name_end ? name_end : args) - p), o)
			 : TC_BAD;
	cJSON_Delete(o);
	return rc;
}

static int parse_mistral(struct tool_parsed *out, const struct tool_want *w, const char *p,
			 const char *e, const char **after)
{
	int rc = 0;
	while (rc == 0 && starts(skip_ws(p, e), e, MISTRAL_CALLS))
		rc = mistral_one(out, w, skip_ws(p, e) + strlen(MISTRAL_CALLS), e, &p);
	*after = p;
	return rc;
}

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END   "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN  "<｜tool▁call▁begin｜>"
#define DS_CALL_END    "<｜tool▁call▁end｜>"
#define DS_SEP         "<｜tool▁sep｜>"

/* One call after <｜tool▁call▁begin｜>: N<｜tool▁sep｜>{...}, or R1's
 * function<｜tool▁sep｜>N\n```json\n{...}\n```; *end after it. */
static int ds_call(struct tool_parsed *out, const struct tool_want *w, const char *name,
		   const char *e, const char **end)
{
	const char *sep = find(name, e, DS_SEP);
	if (sep == NULL)
		return TC_BAD;
	const char *args = sep + strlen(DS_SEP), *name_end = sep;
	bool r1 = sep - name == 8 && memcmp(name, "function", 8) == 0;
	if (r1) {
		const char *fence = find(args, e, "\n```json");
		if (fence == NULL)
			return TC_BAD;
		name = args;
		name_end = fence;
		args = fence + strlen("\n```json");
	}
	const char *p = args;
	cJSON *o = json_at(args, e, &p);
	int rc = cJSON_IsObject(o) ? 0 : TC_BAD;
	if (rc == 0 && r1) {
		p = skip_ws(p, e);
		rc = starts(p, e, "```") ? 0 : TC_BAD;
		p += rc == 0 ? 3 : 0;
	}
	if (rc == 0)
		rc = call_with_args(out, w, name, (size_t)(name_end - name), o);
	cJSON_Delete(o);
	*end = p;
	return rc;
}

static int parse_deepseek(struct tool_parsed *out, const struct tool_want *w, const char *p,
			  const char *e, const char **after)
{
	p = skip_ws(p, e);
	if (starts(p, e, DS_CALLS_BEGIN))
		p += strlen(DS_CALLS_BEGIN);
	int rc = 0;
	while (rc == 0 && starts(skip_ws(p, e), e, DS_CALL_BEGIN)) {
		const char *name = skip_ws(p, e) + strlen(DS_CALL_BEGIN);
		rc = ds_call(out, w, name, e, &p);
		if (rc == 0 && !starts(skip_ws(p, e), e, DS_CALL_END))
			return TC_BAD;
		if (rc == 0)
			p = skip_ws(p, e) + strlen(DS_CALL_END);
	}
	if (rc == 0 && starts(skip_ws(p, e), e, DS_CALLS_END))
		p = skip_ws(p, e) + strlen(DS_CALLS_END);
	*after = p;
	return rc;
}

/* Gemma 4's arguments: {key:value,...}, strings between <|"|> marks, keys bare. */
#define G4_QUOTE "<|\"|>"

static cJSON *g4_value(const char **pp, const char *e, int depth);

static cJSON *g4_string(const char **pp, const char *e)
{
	const char *s = *pp + strlen(G4_QUOTE), *q = find(s, e, G4_QUOTE);
	if (q == NULL)
		return NULL;
	char *t = strndup(s, (size_t)(q - s));
	cJSON *v = t != NULL ? cJSON_CreateString(t) : NULL;
	free(t);
	*pp = q + strlen(G4_QUOTE);
	return v;
}

/* Members of a dict ({k:v,...}) or elements of an array ([v,...]) into c. */
static cJSON *g4_container(const char **pp, const char *e, int depth, bool dict)
{
	const char *p = skip_ws(*pp + 1, e);
	cJSON *c = dict ? cJSON_CreateObject() : cJSON_CreateArray();
	char close = dict ? '}' : ']';
	for (int first = 1; c != NULL && p < e && *p != close; first = 0) {
		if (!first && *p != ',')
			goto fail;
		p = skip_ws(p + (first ? 0 : 1), e);
		char *key = NULL;
		if (dict) {
			const char *k = p, *ke;
			if (starts(p, e, G4_QUOTE)) {
				k += strlen(G4_QUOTE);
				if ((ke = find(k, e, G4_QUOTE)) == NULL)
					goto fail;
				p = ke + strlen(G4_QUOTE);
			} else {
				while (p < e && *p != ':' && *p != '}' && *p != ',')
					p++;
				ke = p;
			}
			if (ke == k || p >= e || *p != ':' ||
			    (key = strndup(k, (size_t)(ke - k))) == NULL)
				goto fail;
			p = skip_ws(p + 1, e);
		}
		cJSON *v = g4_value(&p, e, depth + 1);
		if (v == NULL || (dict ? (cJSON_GetObjectItemCaseSensitive(c, key) != NULL ||
					  !cJSON_AddItemToObject(c, key, v))
				       : !cJSON_AddItemToArray(c, v))) {
			cJSON_Delete(v);
			free(key);
			goto fail;
		}
		free(key);
		p = skip_ws(p, e);
	}
	if (c == NULL || p >= e)
		goto fail;
	*pp = p + 1;
	return c;
fail:
	cJSON_Delete(c);
	return NULL;
}

static cJSON *g4_value(const char **pp, const char *e, int depth)
{
	const char *p = skip_ws(*pp, e);
	*pp = p;
	if (depth > TC_MAX_DEPTH || p >= e)
		return NULL;
	if (starts(p, e, G4_QUOTE))
		return g4_string(pp, e);
	if (*p == '{' || *p == '[')
		return g4_container(pp, e, depth, *p == '{');
	const char *end = NULL;
	cJSON *v = json_at(p, e, &end); /* numbers, true, false, null: as JSON writes them */
	if (v == NULL || cJSON_IsObject(v) || cJSON_IsArray(v) || cJSON_IsString(v)) {
		cJSON_Delete(v);
		return NULL;
	}
	*pp = end;
	return v;
}

#define G4_CALL "<|tool_call>call:"
#define G4_END  "<tool_call|>"

static int parse_gemma4(struct tool_parsed *out, const struct tool_want *w, const char *p,
			const char *e, const char **after)
{
	int rc = 0;
	while (rc == 0 && starts(skip_ws(p, e), e, G4_CALL)) {
		const char *name = skip_ws(p, e) + strlen(G4_CALL), *brace = name;
		while (brace < e && *brace != '{')
			brace++;
		p = brace;
		cJSON *o = brace < e ? g4_container(&p, e, 0, true) : NULL;
		rc = o != NULL ? call_with_args(out, w, name, (size_t)(brace - name), o) : TC_BAD;
		cJSON_Delete(o);
		if (rc == 0 && !starts(p, e, G4_END))
			return TC_BAD;
		if (rc == 0)
			p += strlen(G4_END);
	}
	*after = p;
	return rc;
}

/* ------------------------------------------------------------------ harmony */

#define H_CHANNEL "<|channel|>"
#define H_MESSAGE "<|message|>"
#define H_START   "<|start|>"
#define H_TO      "to=functions."

static const char *const h_ends[] = {"<|end|>", "<|call|>", "<|return|>", H_START, NULL};
static const char *const h_marks[] = {H_CHANNEL,  H_START,      H_MESSAGE,       "<|end|>",
				      "<|call|>", "<|return|>", "<|constrain|>", NULL};

/* One message's header [h, msg): its channel word and its recipient's name, if any. */
static void h_header(const char *h, const char *msg, bool *analysis, const char **name,
		     size_t *name_len)
{
	const char *ch = find(h, msg, H_CHANNEL);
	*analysis = ch != NULL && starts(ch + strlen(H_CHANNEL), msg, "analysis");
	const char *to = find(h, msg, H_TO);
	*name = NULL;
	*name_len = 0;
	if (to == NULL)
		return;
	const char *n = to + strlen(H_TO), *q = n;
	while (q < msg && !tc_ws(*q) && *q != '<')
		q++;
	*name = n;
	*name_len = (size_t)(q - n);
}

/* A call's body [b, end): a JSON object and nothing else. */
static int h_call(struct tool_parsed *out, const struct tool_want *w, const char *name, size_t n,
		  const char *b, const char *end)
{
	const char *after = NULL;
	cJSON *o = w->calls ? json_at(b, end, &after) : NULL;
	int rc = cJSON_IsObject(o) && skip_ws(after, end) == end
			 ? call_with_args(out, w, name, n, o)
			 : TC_BAD;
	cJSON_Delete(o);
	return rc;
}

struct h_state {
	const char *first_call; /* the first call's message, for a fallback to text */
	size_t content_at, reasoning_at;
};

/* Appends one message's body [b, end) (the end of the text when it is unfinished). */
static int h_text(struct tool_parsed *out, bool analysis, const char *b, const char *end, bool held)
{
	if (held)
		end = hold_back(b, end, h_ends);
	return lm_buf_add(analysis ? &out->reasoning : &out->content, b, (size_t)(end - b));
}

static int h_fallback(struct tool_parsed *out, const struct h_state *st, const char *e)
{
	for (int i = 0; i < out->n_calls; i++) {
		free(out->calls[i].name);
		free(out->calls[i].args);
	}
	out->n_calls = 0;
	out->content.len = st->content_at;
	out->reasoning.len = st->reasoning_at;
	return lm_buf_add(&out->content, st->first_call, (size_t)(e - st->first_call));
}

static int parse_harmony(const struct tool_want *w, const char *p, const char *e, bool final,
			 struct tool_parsed *out)
{
	struct h_state st = {0};
	int rc = 0;
	while (rc == 0 && p < e) {
		const char *m = p, *msg = find(p, e, H_MESSAGE);
		if (!starts(p, e, H_START) && !starts(p, e, H_CHANNEL)) {
			/* Not a message: text as it is (a prefix of a marker waits). */
			const char *end = final ? e : hold_back(p, e, h_marks);
			return lm_buf_add(&out->content, p, (size_t)(end - p));
		}
		if (msg == NULL)
			return final ? lm_buf_add(&out->content, m, (size_t)(e - m)) : 0;
		bool analysis;
		const char *name, *b = msg + strlen(H_MESSAGE), *end = find_any(b, e, h_ends);
		size_t n;
		h_header(m, msg, &analysis, &name, &n);
		if (name != NULL) {
			if (!final)
				return 0; /* calls go out at the end */
			if (st.first_call == NULL)
				st = (struct h_state){m, out->content.len, out->reasoning.len};
			if (h_call(out, w, name, n, b, end != NULL ? end : e) != 0)
				return h_fallback(out, &st, e);
		} else if ((rc = h_text(out, analysis, b, end != NULL ? end : e,
					end == NULL && !final)) != 0) {
			return rc;
		}
		if (end == NULL)
			break;
		p = end;
		for (int i = 0; h_ends[i] != NULL; i++)
			if (strcmp(h_ends[i], H_START) != 0 && starts(p, e, h_ends[i]))
				p += strlen(h_ends[i]);
	}
	return rc;
}

/* ------------------------------------------------------------------ the parse */

/* The reasoning block at the start of [*pp, e): into out->reasoning, trimmed, *pp after it.
 * Returns true when the text ends inside it (nothing after it yet). A stream holds back a tail
 * that could still become the closing tag, and white space that a later trim could drop. */
static bool parse_think(const struct tool_syntax *s, const char **pp, const char *e, bool final,
			struct tool_parsed *out, int *rc)
{
	const char *p = *pp, *q = skip_ws(p, e), *b;
	if (s->think_open == NULL)
		return false;
	if (s->think_open_at_start)
		b = p;
	else if (starts(q, e, s->think_open))
		b = q + strlen(s->think_open);
	else if (!final && strncmp(s->think_open, q, (size_t)(e - q)) == 0)
		return true; /* the start of the opening tag, or nothing yet */
	else
		return false;
	const char *close = find(b, e, s->think_close), *end = close;
	if (end == NULL) {
		const char *const tags[] = {s->think_close, NULL};
		end = final ? e : hold_back(b, e, tags);
	}
	/* Trimmed; a stream's trailing white space waits, as the end may trim it. */
	b = skip_ws(b, end);
	while (end > b && tc_ws(end[-1]))
		end--;
	*rc = lm_buf_add(&out->reasoning, b, (size_t)(end - b));
	if (close == NULL) {
		*pp = e;
		return true;
	}
	*pp = skip_ws(close + strlen(s->think_close), e);
	if (!final && *pp == e)
		return true;
	return false;
}

static const char *const hermes_marks[] = {"<tool_call>", NULL};
static const char *const mistral_marks[] = {MISTRAL_CALLS, NULL};
static const char *const gemma4_marks[] = {G4_CALL, NULL};
static const char *const deepseek_marks[] = {DS_CALLS_BEGIN, DS_CALL_BEGIN, NULL};
static const char *const llama3_marks[] = {"<|python_tag|>", "{", NULL};

typedef int (*tc_calls_fn)(struct tool_parsed *, const struct tool_want *, const char *,
			   const char *, const char **);

static const char *const *body_marks(enum tool_format f, tc_calls_fn *fn)
{
	switch (f) {
	case TOOL_FMT_HERMES:
		*fn = parse_hermes;
		return hermes_marks;
	case TOOL_FMT_LLAMA3:
		*fn = parse_llama3;
		return llama3_marks;
	case TOOL_FMT_MISTRAL:
		*fn = parse_mistral;
		return mistral_marks;
	case TOOL_FMT_GEMMA4:
		*fn = parse_gemma4;
		return gemma4_marks;
	case TOOL_FMT_DEEPSEEK:
		*fn = parse_deepseek;
		return deepseek_marks;
	default:
		*fn = NULL;
		return NULL;
	}
}

/* Where the calls start in the body [b, e), or NULL. Llama 3's calls are the whole answer. */
static const char *calls_start(enum tool_format f, const char *const *marks, const char *b,
			       const char *e)
{
	if (f != TOOL_FMT_LLAMA3)
		return find_any(b, e, marks);
	const char *q = skip_ws(b, e);
	return q < e && (*q == '{' || starts(q, e, "<|python_tag|>")) ? q : NULL;
}

/* The body after the reasoning: content, the calls, the text after them. */
static int parse_body(const struct tool_syntax *s, const struct tool_want *w, const char *b,
		      const char *e, bool final, struct tool_parsed *out)
{
	tc_calls_fn fn;
	const char *const *marks = w->calls ? body_marks(s->fmt, &fn) : NULL;
	if (marks == NULL)
		return lm_buf_add(&out->content, b, (size_t)(e - b));
	const char *m = calls_start(s->fmt, marks, b, e);
	if (!final) {
		const char *end = m;
		if (end == NULL && s->fmt == TOOL_FMT_LLAMA3)
			end = skip_ws(b, e) == e ? b : hold_back(b, e, llama3_marks);
		else if (end == NULL)
			end = hold_back(b, e, marks);
		return lm_buf_add(&out->content, b, (size_t)(end - b));
	}
	if (m == NULL)
		return lm_buf_add(&out->content, b, (size_t)(e - b));
	int rc = lm_buf_add(&out->content, b, (size_t)(m - b));
	const char *after = e;
	int pc = rc == 0 ? fn(out, w, m, e, &after) : rc;
	if (pc == LM_ENOMEM)
		return pc;
	if (pc == 0 && out->n_calls > 0)
		return lm_buf_add(&out->content, after, (size_t)(e - after));
	/* Written badly: no call at all, the text as the model wrote it. */
	for (int i = 0; i < out->n_calls; i++) {
		free(out->calls[i].name);
		free(out->calls[i].args);
	}
	out->n_calls = 0;
	return lm_buf_add(&out->content, m, (size_t)(e - m));
}

int tool_parse(const struct tool_syntax *s, const struct tool_want *want, const char *text,
	       size_t len, bool final, struct tool_parsed *out)
{
	memset(out, 0, sizeof *out);
	const char *p = text != NULL ? text : "", *e = p + len;
	int rc = 0;
	if (s->fmt == TOOL_FMT_HARMONY)
		rc = parse_harmony(want, p, e, final, out);
	else if (!parse_think(s, &p, e, final, out, &rc) && rc == 0)
		rc = parse_body(s, want, p, e, final, out);
	/* Empty buffers still read as "" to the caller. */
	if (rc == 0)
		rc = lm_buf_add(&out->content, "", 0) | lm_buf_add(&out->reasoning, "", 0);
	if (rc != 0) {
		tool_parsed_fini(out);
		return LM_ENOMEM;
	}
	return 0;
}

bool tool_syntax_marker(const struct tool_syntax *s, const char *text, size_t len)
{
	static const char *const marks[TOOL_FMT_COUNT][8] = {
		[TOOL_FMT_HERMES] = {"<tool_call>", "</tool_call>"},
		[TOOL_FMT_LLAMA3] = {"<|python_tag|>"},
		[TOOL_FMT_MISTRAL] = {MISTRAL_CALLS, "[ARGS]", "[CALL_ID]"},
		[TOOL_FMT_HARMONY] = {H_CHANNEL, H_MESSAGE, H_START, "<|end|>", "<|constrain|>"},
		[TOOL_FMT_GEMMA4] = {"<|tool_call>", G4_END, G4_QUOTE, "<|channel>", "<channel|>"},
		[TOOL_FMT_DEEPSEEK] = {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END,
				       DS_SEP},
	};
	const char *tags[] = {s->think_open, s->think_close};
	for (int i = 0; i < 2; i++)
		if (tags[i] != NULL && strlen(tags[i]) == len && memcmp(tags[i], text, len) == 0)
			return true;
	for (int i = 0; (unsigned)s->fmt < TOOL_FMT_COUNT && i < 8 && marks[s->fmt][i] != NULL; i++)
		if (strlen(marks[s->fmt][i]) == len && memcmp(marks[s->fmt][i], text, len) == 0)
			return true;
	return false;
}

void tool_parsed_fini(struct tool_parsed *p)
{
	if (p == NULL)
		return;
	lm_buf_fini(&p->content);
	lm_buf_fini(&p->reasoning);
	for (int i = 0; i < p->n_calls; i++) {
		free(p->calls[i].name);
		free(p->calls[i].args);
	}
	free(p->calls);
	memset(p, 0, sizeof *p);
}

void tool_call_id(char out[TOOL_CALL_ID_LEN])
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	uint8_t r[24];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
		uint64_t x = lm_now_ns();
		for (size_t i = 0; i < sizeof r;
		     i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
			r[i] = (uint8_t)(x >> 33);
	}
	memcpy(out, "call_", 5);
	for (size_t i = 0; i < sizeof r; i++)
		out[5 + i] = abc[r[i] % (sizeof abc - 1)];
	out[5 + sizeof r] = '\0';
}

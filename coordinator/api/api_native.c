/* api_native.c — llama-server's /completion body, translated. See api_native.h. */
#include "coordinator/api/api_native.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/err.h"
#include "coordinator/api/api_json.h"

static int api_native_bad(struct api_error *err, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int api_native_bad(struct api_error *err, const char *param, const char *fmt, ...)
{
	va_list ap;
	err->status = 400;
	err->type = "invalid_request_error";
	err->reason = LM_HTTP_REFUSE_INVALID;
	err->param = param != NULL ? strdup(param) : NULL;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
	return LM_EINVAL;
}

/* Refuses a string holding U+0000 anywhere in the body: the translated body is written by
 * cJSON, whose strings end at a NUL (/v1/completions takes them). */
static int api_native_no_nul(const cJSON *o, struct api_error *err)
{
	for (const cJSON *e = o->child; e != NULL; e = e->next) {
		if (cJSON_IsString(e) && api_json_len(e) != strlen(e->valuestring))
			return api_native_bad(err, e->string != NULL ? e->string : o->string,
					      "U+0000 in a string is not supported by /completion "
					      "(/v1/completions takes it)");
		if ((cJSON_IsObject(e) || cJSON_IsArray(e)) && api_native_no_nul(e, err) != 0)
			return LM_EINVAL;
	}
	return 0;
}

/* llama-server's JSON prompt {"prompt_string": ...} becomes its string; a batch is refused. */
static int api_native_prompt(cJSON *req, struct api_error *err)
{
	cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
	if (cJSON_IsObject(p)) {
		if (cJSON_GetObjectItemCaseSensitive(p, "multimodal_data") != NULL)
			return api_native_bad(
				err, "prompt",
				"'multimodal_data' is not supported (this mesh serves "
				"text models)");
		cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "prompt_string");
		if (!cJSON_IsString(s))
			return api_native_bad(
				err, "prompt",
				"a JSON 'prompt' must be {\"prompt_string\": string}");
		cJSON *copy = cJSON_Duplicate(s, false);
		if (copy == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(req, "prompt", copy)) {
			cJSON_Delete(copy);
			return LM_ENOMEM;
		}
		return 0;
	}
	for (const cJSON *e = cJSON_IsArray(p) ? p->child : NULL; e != NULL; e = e->next)
		if (!cJSON_IsNumber(e))
			return api_native_bad(
				err, "prompt",
				"'prompt' must be a string, an array of token ids or "
				"{\"prompt_string\": string} (one prompt per request)");
	return 0;
}

/* Adds bias for `key` (a token id, or text of key_len bytes whose tokens each get it) to
 * `out`. */
static int api_native_bias_one(const cJSON *key, size_t key_len, double bias,
			       const tok_vocab *vocab, cJSON *out, struct api_error *err)
{
	char id[24];
	if (cJSON_IsNumber(key)) {
		if (key->valuedouble < 0 || key->valuedouble > 1e9 ||
		    key->valuedouble != (double)(int64_t)key->valuedouble)
			return api_native_bad(
				err, "logit_bias",
				"a 'logit_bias' token id must be an integer in [0, 1e9]");
		snprintf(id, sizeof id, "%.0f", key->valuedouble);
		cJSON_DeleteItemFromObjectCaseSensitive(out, id); /* the last one counts */
		return cJSON_AddNumberToObject(out, id, bias) != NULL ? 0 : LM_ENOMEM;
	}
	if (!cJSON_IsString(key))
		return api_native_bad(err, "logit_bias",
				      "a 'logit_bias' entry must be [token id or text, bias]");
	int32_t *ids = NULL;
	size_t n = 0;
	lm_diag d = {{0}};
	int rc = tok_encode_alloc_ex(vocab, key->valuestring, key_len, 0, &ids, &n, &d);
	if (rc != 0)
		return api_native_bad(err, "logit_bias", "%s", lm_diag_str(&d, rc));
	for (size_t i = 0; i < n && rc == 0; i++) {
		snprintf(id, sizeof id, "%d", ids[i]);
		cJSON_DeleteItemFromObjectCaseSensitive(out, id);
		if (cJSON_AddNumberToObject(out, id, bias) == NULL)
			rc = LM_ENOMEM;
	}
	free(ids);
	return rc;
}

/* llama-server's logit_bias forms, [[token id or text, bias or false], ...] and {"text": bias},
 * become {"token id": bias}; false (never this token) is -100. Text biases each of its tokens. */
static int api_native_bias(cJSON *req, const tok_vocab *vocab, struct api_error *err)
{
	cJSON *lb = cJSON_GetObjectItemCaseSensitive(req, "logit_bias");
	if (!cJSON_IsArray(lb) && !cJSON_IsObject(lb))
		return 0;
	cJSON *out = cJSON_CreateObject();
	int rc = out != NULL ? 0 : LM_ENOMEM;
	for (const cJSON *e = lb->child; e != NULL && rc == 0; e = e->next) {
		const cJSON *key = e, *bias = e;
		cJSON *num = NULL;
		if (cJSON_IsArray(lb)) {
			key = cJSON_GetArrayItem(e, 0);
			bias = cJSON_GetArrayItem(e, 1);
			if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) {
				rc = api_native_bad(err, "logit_bias",
						    "a 'logit_bias' entry must be [token id or "
						    "text, bias]");
				break;
			}
		} else {
			/* An object's key: a token id when it is all digits, else text. */
			const char *k = e->string;
			bool digits = k[0] != '\0' && strspn(k, "0123456789") == strlen(k);
			key = num = digits ? cJSON_CreateNumber(strtod(k, NULL))
					   : cJSON_CreateString(k);
		}
		if (!cJSON_IsNumber(bias) && !cJSON_IsFalse(bias))
			rc = api_native_bad(err, "logit_bias",
					    "a 'logit_bias' bias must be a number or false");
		else
			rc = api_native_bias_one(
				key, num != NULL ? strlen(e->string) : api_json_len(key),
				cJSON_IsFalse(bias) ? -100 : bias->valuedouble, vocab, out, err);
		cJSON_Delete(num);
	}
	if (rc == 0 && !cJSON_ReplaceItemInObjectCaseSensitive(req, "logit_bias", out))
		rc = LM_ENOMEM;
	else if (rc != 0)
		cJSON_Delete(out);
	return rc;
}

/* Sets key to v unless the body has it (not null). */
static bool api_native_default(cJSON *req, const char *key, double v)
{
	const cJSON *have = cJSON_GetObjectItemCaseSensitive(req, key);
	if (have != NULL && !cJSON_IsNull(have))
		return true;
	cJSON_DeleteItemFromObjectCaseSensitive(req, key);
	return cJSON_AddNumberToObject(req, key, v) != NULL;
}

/* Moves an integer field `from` to `to` (or drops it), returning its value through *v. */
static int api_native_int(cJSON *req, const char *from, double lo, double hi, double *v,
			  struct api_error *err)
{
	cJSON *f = cJSON_DetachItemFromObjectCaseSensitive(req, from);
	if (f == NULL || cJSON_IsNull(f)) {
		cJSON_Delete(f);
		return 1; /* absent */
	}
	bool ok = cJSON_IsNumber(f) && f->valuedouble >= lo && f->valuedouble <= hi &&
		  f->valuedouble == (double)(int64_t)f->valuedouble;
	*v = ok ? f->valuedouble : 0;
	cJSON_Delete(f);
	if (!ok)
		return api_native_bad(err, from, "'%s' must be an integer in [%.0f, %.0f]", from,
				      lo, hi);
	return 0;
}

/* /completion answers one completion: n (and llama-server's n_cmpl) and best_of, when given,
 * must be 1, and go (/v1/completions would take more). */
static int api_native_one(cJSON *req, struct api_error *err)
{
	static const char *const keys[] = {"n", "n_cmpl", "best_of"};
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
		cJSON *f = cJSON_DetachItemFromObjectCaseSensitive(req, keys[i]);
		bool ok =
			f == NULL || cJSON_IsNull(f) || (cJSON_IsNumber(f) && f->valuedouble == 1);
		cJSON_Delete(f);
		if (!ok)
			return api_native_bad(err, keys[i],
					      "'%s' must be 1: /completion answers one completion "
					      "(POST /v1/completions takes n and best_of)",
					      keys[i]);
	}
	return 0;
}

static int api_native_fields_in(cJSON *req, const int32_t max_seq, struct api_native *nat,
				struct api_error *err)
{
	double v = 0;
	int rc = api_native_int(req, "n_predict", -1, 1e9, &v, err);
	if (rc < 0)
		return rc;
	nat->n_predict = rc == 0 ? (int32_t)v : -1;
	if (!cJSON_HasObjectItem(req, "max_tokens") &&
	    cJSON_AddNumberToObject(req, "max_tokens",
				    nat->n_predict < 0 || nat->n_predict > max_seq
					    ? max_seq
					    : nat->n_predict) == NULL)
		return LM_ENOMEM;
	if ((rc = api_native_int(req, "n_probs", 0, API_MAX_LOGPROBS, &v, err)) < 0)
		return rc;
	nat->n_probs = rc == 0 ? (int32_t)v : 0;
	if (nat->n_probs > 0) {
		cJSON_DeleteItemFromObjectCaseSensitive(req, "logprobs"); /* n_probs says it */
		if (cJSON_AddNumberToObject(req, "logprobs", nat->n_probs) == NULL)
			return LM_ENOMEM;
	}
	cJSON *rt = cJSON_DetachItemFromObjectCaseSensitive(req, "return_tokens");
	bool rt_ok = rt == NULL || cJSON_IsNull(rt) || cJSON_IsBool(rt);
	nat->return_tokens = cJSON_IsTrue(rt);
	cJSON_Delete(rt);
	if (!rt_ok)
		return api_native_bad(err, "return_tokens", "'return_tokens' must be a boolean");
	cJSON *fields = cJSON_DetachItemFromObjectCaseSensitive(req, "response_fields");
	bool f_ok = fields == NULL || cJSON_IsNull(fields) || cJSON_IsArray(fields);
	for (const cJSON *e = f_ok && fields != NULL ? fields->child : NULL; e != NULL; e = e->next)
		f_ok &= cJSON_IsString(e);
	if (!f_ok) {
		cJSON_Delete(fields);
		return api_native_bad(err, "response_fields",
				      "'response_fields' must be an array of strings");
	}
	if (cJSON_GetArraySize(fields) > 0)
		nat->response_fields = fields;
	else
		cJSON_Delete(fields);
	/* llama-server's seed -1 (or its 32-bit form) is "draw one", whatever the server's
	 * default seed. */
	const cJSON *seed = cJSON_GetObjectItemCaseSensitive(req, "seed");
	nat->draw_seed = cJSON_IsNumber(seed) &&
			 (seed->valuedouble == -1 || seed->valuedouble == 4294967295.0);
	if (nat->draw_seed)
		cJSON_DeleteItemFromObjectCaseSensitive(req, "seed");
	return 0;
}

int api_native_body(const char *body, size_t len, int32_t max_seq, const tok_vocab *vocab,
		    char **out, struct api_native *nat, struct api_error *err)
{
	memset(nat, 0, sizeof *nat);
	memset(err, 0, sizeof *err);
	*out = NULL;
	char why[200];
	cJSON *req = api_json_parse(body, len, why, sizeof why);
	if (req == NULL)
		return api_native_bad(err, NULL, "the request body is not valid JSON: %s", why);
	int rc = cJSON_IsObject(req) ? 0
				     : api_native_bad(err, NULL, "the body must be a JSON object");
	if (rc == 0)
		rc = api_native_no_nul(req, err);
	if (rc == 0)
		rc = api_native_prompt(req, err);
	if (rc == 0)
		rc = api_native_fields_in(req, max_seq, nat, err);
	if (rc == 0)
		rc = api_native_one(req, err);
	if (rc == 0)
		rc = api_native_bias(req, vocab, err);
	if (rc == 0 &&
	    (!api_native_default(req, "temperature", 0.8) ||
	     !api_native_default(req, "top_k", 40) || !api_native_default(req, "top_p", 0.95) ||
	     !api_native_default(req, "min_p", 0.05)))
		rc = LM_ENOMEM;
	if (rc == 0 && (*out = cJSON_PrintUnformatted(req)) == NULL)
		rc = LM_ENOMEM;
	cJSON_Delete(req);
	if (rc == LM_ENOMEM && err->status == 0) {
		err->status = 500;
		err->type = "server_error";
		err->reason = LM_HTTP_REFUSE_INTERNAL;
		snprintf(err->message, sizeof err->message, "out of memory");
	}
	if (rc != 0)
		api_native_fini(nat);
	return rc;
}

void api_native_fini(struct api_native *nat)
{
	cJSON_Delete(nat->response_fields);
	memset(nat, 0, sizeof *nat);
}

cJSON *api_native_fields(const cJSON *full, const cJSON *fields)
{
	cJSON *o = cJSON_CreateObject();
	for (const cJSON *f = fields != NULL ? fields->child : NULL; f != NULL && o != NULL;
	     f = f->next) {
		const char *path = cJSON_GetStringValue(f);
		const cJSON *at = full;
		char key[256];
		for (const char *p = path; p != NULL && at != NULL;) {
			const char *slash = strchr(p, '/');
			size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
			snprintf(key, sizeof key, "%.*s",
				 (int)(n < sizeof key ? n : sizeof key - 1), p);
			at = cJSON_IsObject(at) ? cJSON_GetObjectItemCaseSensitive(at, key) : NULL;
			p = slash != NULL ? slash + 1 : NULL;
		}
		if (at != NULL && path != NULL && !cJSON_HasObjectItem(o, path))
			cJSON_AddItemToObject(o, path, cJSON_Duplicate(at, true));
	}
	return o;
}

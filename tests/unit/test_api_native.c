/* coordinator/api_native: llama-server's /completion bodies translated into /v1/completions
 * ones (field by field, llama-server's defaults, its prompt and logit_bias forms, the refusals
 * with their param), and response_fields' reduction of an answer. Token ids of logit_bias'
 * texts come from the tokenizer (held to llama.cpp in test_tokenizer.c). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"
#include "common/tok/tokenizer.h"
#include "coordinator/api/api_native.h"

static gguf_file *file;
static tok_vocab *vocab;

static void setup(void)
{
	char path[4096];
	const char *root = getenv("LM_SHARED");
	snprintf(path, sizeof path, "%s/models/stories260K.gguf",
		 root != NULL ? root : "../shared");
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open(path, &file, &d), 0, "%s", d.msg);
	cr_assert_eq(tok_load(file, &vocab, &d), 0, "%s", d.msg);
}

static void teardown(void)
{
	tok_free(vocab);
	gguf_close(file);
}

TestSuite(api_native, .init = setup, .fini = teardown);

/* Translates body (context 256) and returns the translated body parsed; nat filled. */
static cJSON *translate(const char *body, struct api_native *nat)
{
	char *out = NULL;
	struct api_error err;
	int rc = api_native_body(body, strlen(body), 256, vocab, &out, nat, &err);
	cr_assert_eq(rc, 0, "%s: %s", body, err.message);
	cJSON *o = cJSON_Parse(out);
	free(out);
	cr_assert_not_null(o);
	return o;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	cr_assert(cJSON_IsNumber(v), "'%s' is not a number", key);
	return v->valuedouble;
}

/* The refusal of body: its status and param. */
static void refused(const char *body, uint16_t status, const char *param)
{
	char *out = (char *)"untouched";
	struct api_native nat;
	struct api_error err;
	int rc = api_native_body(body, strlen(body), 256, vocab, &out, &nat, &err);
	cr_assert_neq(rc, 0, "%s was taken", body);
	cr_expect_null(out);
	cr_expect_eq(err.status, status, "%s: status %u", body, err.status);
	if (param == NULL)
		cr_expect_null(err.param, "%s: param %s", body, err.param);
	else
		cr_expect_str_eq(err.param != NULL ? err.param : "(null)", param, "%s", body);
	cr_expect_null(nat.response_fields);
	api_error_fini(&err);
}

Test(api_native, fields_and_defaults)
{
	struct api_native nat;
	cJSON *o = translate("{\"prompt\": \"Hi\", \"n_predict\": 8, \"n_probs\": 3, "
			     "\"return_tokens\": true, \"seed\": 7}",
			     &nat);
	cr_expect_eq(num(o, "max_tokens"), 8);
	cr_expect_eq(num(o, "logprobs"), 3);
	cr_expect_eq(num(o, "seed"), 7);
	cr_expect_not(nat.draw_seed);
	/* llama-server's sampling defaults where the body has none. */
	cr_expect_float_eq(num(o, "temperature"), 0.8, 1e-9);
	cr_expect_eq(num(o, "top_k"), 40);
	cr_expect_float_eq(num(o, "top_p"), 0.95, 1e-9);
	cr_expect_float_eq(num(o, "min_p"), 0.05, 1e-9);
	cr_expect_null(cJSON_GetObjectItem(o, "n_predict"));
	cr_expect_null(cJSON_GetObjectItem(o, "n_probs"));
	cr_expect_null(cJSON_GetObjectItem(o, "return_tokens"));
	cr_expect(nat.return_tokens);
	cr_expect_eq(nat.n_probs, 3);
	cr_expect_eq(nat.n_predict, 8);
	cJSON_Delete(o);
	api_native_fini(&nat);

	/* n_probs wins over a logprobs of /v1/completions' own, once. */
	o = translate("{\"prompt\": \"Hi\", \"logprobs\": 1, \"n_probs\": 2}", &nat);
	cr_expect_eq(num(o, "logprobs"), 2);
	cJSON_Delete(o);
	api_native_fini(&nat);

	/* Given values stay; unknown fields pass on to /v1/completions' parser. */
	o = translate("{\"prompt\": \"Hi\", \"temperature\": 0, \"top_k\": 0, \"mirostat\": 2}",
		      &nat);
	cr_expect_eq(num(o, "temperature"), 0);
	cr_expect_eq(num(o, "top_k"), 0);
	cr_expect_eq(num(o, "mirostat"), 2);
	cr_expect_not(nat.return_tokens);
	cr_expect_eq(nat.n_probs, 0);
	cJSON_Delete(o);
	api_native_fini(&nat);
}

Test(api_native, n_predict_and_seed)
{
	struct api_native nat;
	/* -1, absent, or past the context: the rest of the context (256 here). */
	const char *bodies[] = {"{\"prompt\": \"Hi\", \"n_predict\": -1}", "{\"prompt\": \"Hi\"}",
				"{\"prompt\": \"Hi\", \"n_predict\": 100000}"};
	for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
		cJSON *o = translate(bodies[i], &nat);
		cr_expect_eq(num(o, "max_tokens"), 256, "%s", bodies[i]);
		cJSON_Delete(o);
		api_native_fini(&nat);
	}
	cJSON *o = translate("{\"prompt\": \"Hi\", \"n_predict\": -1}", &nat);
	cr_expect_eq(nat.n_predict, -1);
	cJSON_Delete(o);
	api_native_fini(&nat);
	/* An explicit max_tokens wins over n_predict. */
	o = translate("{\"prompt\": \"Hi\", \"n_predict\": 9, \"max_tokens\": 4}", &nat);
	cr_expect_eq(num(o, "max_tokens"), 4);
	cJSON_Delete(o);
	api_native_fini(&nat);
	/* seed -1 and its 32-bit form mean "draw one": absent. */
	const char *seeds[] = {"{\"prompt\": \"Hi\", \"seed\": -1}",
			       "{\"prompt\": \"Hi\", \"seed\": 4294967295}"};
	for (size_t i = 0; i < 2; i++) {
		o = translate(seeds[i], &nat);
		cr_expect_null(cJSON_GetObjectItem(o, "seed"), "%s", seeds[i]);
		cr_expect(nat.draw_seed, "%s", seeds[i]);
		cJSON_Delete(o);
		api_native_fini(&nat);
	}
}

Test(api_native, prompts)
{
	struct api_native nat;
	cJSON *o = translate("{\"prompt\": {\"prompt_string\": \"Once\"}}", &nat);
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, "prompt")), "Once");
	cJSON_Delete(o);
	api_native_fini(&nat);
	o = translate("{\"prompt\": [1, 400, 500]}", &nat);
	cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "prompt")), 3);
	cJSON_Delete(o);
	api_native_fini(&nat);
	refused("{\"prompt\": {\"prompt_string\": \"a\", \"multimodal_data\": []}}", 400, "prompt");
	refused("{\"prompt\": {\"text\": \"a\"}}", 400, "prompt");
	refused("{\"prompt\": [[1, 2], [3]]}", 400, "prompt");
	refused("{\"prompt\": [1, \"a\"]}", 400, "prompt");
	refused("{\"prompt\": \"a\\u0000b\"}", 400, "prompt");
	refused("{\"prompt\": \"a\", \"stop\": [\"x\\u0000\"]}", 400, "stop");
}

Test(api_native, refusals)
{
	refused("", 400, NULL);
	refused("[1]", 400, NULL);
	refused("{\"prompt\": \"a\"} x", 400, NULL);
	refused("{\"prompt\": \"a\", \"n_predict\": \"8\"}", 400, "n_predict");
	refused("{\"prompt\": \"a\", \"n_predict\": -2}", 400, "n_predict");
	refused("{\"prompt\": \"a\", \"n_predict\": 1.5}", 400, "n_predict");
	refused("{\"prompt\": \"a\", \"n_probs\": 1000}", 400, "n_probs");
	refused("{\"prompt\": \"a\", \"return_tokens\": 1}", 400, "return_tokens");
	refused("{\"prompt\": \"a\", \"response_fields\": \"content\"}", 400, "response_fields");
	refused("{\"prompt\": \"a\", \"response_fields\": [1]}", 400, "response_fields");
	refused("{\"prompt\": \"a\", \"logit_bias\": [[1]]}", 400, "logit_bias");
	refused("{\"prompt\": \"a\", \"logit_bias\": [[1, \"x\"]]}", 400, "logit_bias");
	refused("{\"prompt\": \"a\", \"logit_bias\": [[null, 1]]}", 400, "logit_bias");
	refused("{\"prompt\": \"a\", \"logit_bias\": [[1.5, 1]]}", 400, "logit_bias");
	refused("{\"prompt\": \"a\", \"logit_bias\": [[-1, 1]]}", 400, "logit_bias");
	refused("{\"prompt\": \"a\", \"n\": 2}", 400, "n");
	refused("{\"prompt\": \"a\", \"n\": \"1\"}", 400, "n");
	refused("{\"prompt\": \"a\", \"n_cmpl\": 2}", 400, "n_cmpl");
	refused("{\"prompt\": \"a\", \"best_of\": 3}", 400, "best_of");
}

/* One completion a request: n, n_cmpl and best_of of 1 (or null) are taken, and dropped. */
Test(api_native, one_completion)
{
	struct api_native nat;
	cJSON *o =
		translate("{\"prompt\": \"a\", \"n\": 1, \"n_cmpl\": null, \"best_of\": 1}", &nat);
	cr_expect_null(cJSON_GetObjectItem(o, "n"));
	cr_expect_null(cJSON_GetObjectItem(o, "n_cmpl"));
	cr_expect_null(cJSON_GetObjectItem(o, "best_of"));
	cJSON_Delete(o);
	api_native_fini(&nat);
}

Test(api_native, logit_bias_forms)
{
	int32_t *ids = NULL;
	size_t n = 0;
	lm_diag d = {{0}};
	cr_assert_eq(tok_encode_alloc_ex(vocab, " the", 4, 0, &ids, &n, &d), 0);
	cr_assert_gt(n, 0);
	struct api_native nat;
	/* Ids, false (-100), text (each of its tokens) and the object form of text. */
	cJSON *o = translate("{\"prompt\": \"a\", \"logit_bias\": [[5, 2.5], [6, false], "
			     "[\" the\", -3]]}",
			     &nat);
	const cJSON *lb = cJSON_GetObjectItem(o, "logit_bias");
	cr_expect_eq(num(lb, "5"), 2.5);
	cr_expect_eq(num(lb, "6"), -100);
	char key[24];
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "%d", ids[i]);
		cr_expect_eq(num(lb, key), -3, "token %d of ' the'", ids[i]);
	}
	cr_expect_eq(cJSON_GetArraySize(lb), (int)(2 + n));
	cJSON_Delete(o);
	api_native_fini(&nat);
	o = translate("{\"prompt\": \"a\", \"logit_bias\": {\" the\": -3, \"7\": 1}}", &nat);
	lb = cJSON_GetObjectItem(o, "logit_bias");
	cr_expect_eq(num(lb, "7"), 1);
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "%d", ids[i]);
		cr_expect_eq(num(lb, key), -3);
	}
	cJSON_Delete(o);
	api_native_fini(&nat);
	/* A token named twice: the last entry counts, once. */
	o = translate("{\"prompt\": \"a\", \"logit_bias\": [[5, 1], [5, -1]]}", &nat);
	lb = cJSON_GetObjectItem(o, "logit_bias");
	cr_expect_eq(cJSON_GetArraySize(lb), 1);
	cr_expect_eq(num(lb, "5"), -1);
	cJSON_Delete(o);
	api_native_fini(&nat);
	free(ids);
}

Test(api_native, response_fields)
{
	struct api_native nat;
	cJSON *o =
		translate("{\"prompt\": \"a\", \"response_fields\": [\"content\", \"a/b\"]}", &nat);
	cr_assert_not_null(nat.response_fields);
	cJSON_Delete(o);
	cJSON *full = cJSON_Parse("{\"content\": \"x\", \"a\": {\"b\": 3, \"c\": 4}, \"d\": 5}");
	cJSON *few = api_native_fields(full, nat.response_fields);
	char *s = cJSON_PrintUnformatted(few);
	cr_expect_str_eq(s, "{\"content\":\"x\",\"a/b\":3}");
	free(s);
	cJSON_Delete(few);
	/* A field that is not there is left out. */
	cJSON *ask = cJSON_Parse("[\"nope\", \"a/nope\", \"content/x\", \"d\"]");
	few = api_native_fields(full, ask);
	s = cJSON_PrintUnformatted(few);
	cr_expect_str_eq(s, "{\"d\":5}");
	free(s);
	cJSON_Delete(few);
	cJSON_Delete(ask);
	cJSON_Delete(full);
	api_native_fini(&nat);
	/* An empty list asks for everything. */
	o = translate("{\"prompt\": \"a\", \"response_fields\": []}", &nat);
	cr_expect_null(nat.response_fields);
	cJSON_Delete(o);
	api_native_fini(&nat);
}

/* coordinator/api_request: completion request bodies parsed against stories260K's vocabulary
 * (context 512), every refusal with its status, type, param and exact message, the OpenAI-style
 * error document built from it, and the stop-string hold-back of api_stop_cut. Expected prompt
 * ids come from the tokenizer (itself held to llama.cpp in test_tokenizer.c) and, for id
 * arrays, from the request itself. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/gguf.h"
#include "common/wire/httpd.h"
#include "common/tok/tokenizer.h"
#include "coordinator/api_request.h"
#include "tests/support/gguf_samples.h"

static gguf_file *file;
static tok_vocab *vocab;
static const struct api_limits lim = {.max_seq = 512};

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

TestSuite(api_request, .init = setup, .fini = teardown);

/* Parses a NUL-terminated body that must be accepted. */
static void parse_ok(const char *body, struct api_request *r)
{
	struct api_error err;
	int rc = api_request_parse(body, strlen(body), &lim, vocab, r, &err);
	cr_assert_eq(rc, 0, "%s: %d %s", body, err.status, err.message);
}

/* The body must be refused with exactly this status, param and message. */
static void refused(const char *body, uint16_t status, const char *param, const char *msg)
{
	struct api_request r;
	struct api_error err;
	int rc = api_request_parse(body, strlen(body), &lim, vocab, &r, &err);
	cr_assert_eq(rc, status == 400 ? LM_EINVAL : LM_ENOMEM, "%s: rc %d", body, rc);
	cr_expect_eq(err.status, status, "%s: status %d", body, err.status);
	cr_expect_str_eq(err.type, status == 400 ? "invalid_request_error" : "server_error");
	if (param == NULL)
		cr_expect_null(err.param, "%s: param %s", body, err.param);
	else
		cr_expect(err.param != NULL && strcmp(err.param, param) == 0,
			  "%s: param %s, expected %s", body, err.param, param);
	cr_expect_str_eq(err.message, msg, "%s", body);
	/* A refused request owns nothing. */
	cr_expect_null(r.prompt);
	cr_expect_eq(r.n_stops, 0);
	api_error_fini(&err);
}

/* ------------------------------------------------------------ valid requests */

Test(api_request, string_prompt_and_defaults)
{
	struct api_request r;
	parse_ok("{\"prompt\": \"Once upon a time\"}", &r);
	int32_t want[64];
	size_t n;
	lm_diag d = {{0}};
	cr_assert_eq(tok_encode(vocab, "Once upon a time", 16, true, want, 64, &n, &d), 0);
	cr_assert_eq(want[0], tok_bos(vocab), "stories260K prompts start with BOS");
	cr_assert_eq(r.n_prompt, (int32_t)n);
	cr_assert_arr_eq(r.prompt, want, n * sizeof want[0]);
	cr_expect_eq(r.max_tokens, 16);
	cr_expect_eq(r.sampling.temperature, 1.0f);
	cr_expect_eq(r.sampling.top_p, 1.0f);
	cr_expect_eq(r.sampling.top_k, 0);
	cr_expect_eq(r.sampling.min_p, 0.0f);
	cr_expect_eq(r.sampling.seed, 0);
	cr_expect_eq(r.n_logprobs, 0);
	cr_expect_not(r.stream);
	cr_expect_not(r.want_ids);
	cr_expect_eq(r.n_stops, 0);
	cr_expect_eq(r.max_stop, 0);
	api_request_fini(&r);
	cr_expect_null(r.prompt);
}

Test(api_request, every_field)
{
	struct api_request r;
	parse_ok("{\"prompt\": [1, 2, 511], \"max_tokens\": 100, \"temperature\": 0.5, "
		 "\"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"seed\": 9007199254740991, "
		 "\"stop\": [\"\\n\", \"The end\"], \"stream\": true, \"logprobs\": 20, "
		 "\"return_token_ids\": true, \"n\": 1, \"echo\": false, \"model\": \"x\", "
		 "\"user\": \"u\", \"presence_penalty\": 0, \"frequency_penalty\": 0, "
		 "\"best_of\": 1, \"logit_bias\": {}, \"suffix\": null, \"stream_options\": {}}",
		 &r);
	static const int32_t ids[3] = {1, 2, 511};
	cr_assert_eq(r.n_prompt, 3);
	cr_assert_arr_eq(r.prompt, ids, sizeof ids);
	cr_expect_eq(r.max_tokens, 100);
	cr_expect_eq(r.sampling.temperature, 0.5f);
	cr_expect_eq(r.sampling.top_p, 0.9f);
	cr_expect_eq(r.sampling.top_k, 40);
	cr_expect_eq(r.sampling.min_p, 0.05f);
	cr_expect_eq(r.sampling.seed, 9007199254740991ull);
	cr_expect_eq(r.n_logprobs, 20);
	cr_expect(r.stream);
	cr_expect(r.want_ids);
	cr_assert_eq(r.n_stops, 2);
	cr_expect_str_eq(r.stops[0], "\n");
	cr_expect_str_eq(r.stops[1], "The end");
	cr_expect_eq(r.max_stop, 7);
	cr_expect_eq(lm_sampling_check(&r.sampling, NULL), 0);
	api_request_fini(&r);
}

Test(api_request, null_is_absent)
{
	struct api_request r;
	parse_ok("{\"prompt\": [5], \"max_tokens\": null, \"temperature\": null, \"stop\": null, "
		 "\"stream\": null, \"return_token_ids\": null, \"logprobs\": null}",
		 &r);
	cr_expect_eq(r.max_tokens, 16);
	cr_expect_eq(r.sampling.temperature, 1.0f);
	cr_expect_eq(r.n_stops, 0);
	cr_expect_not(r.stream);
	api_request_fini(&r);
}

Test(api_request, single_stop_string)
{
	struct api_request r;
	parse_ok("{\"prompt\": [5], \"stop\": \"cat\"}", &r);
	cr_assert_eq(r.n_stops, 1);
	cr_expect_str_eq(r.stops[0], "cat");
	cr_expect_eq(r.max_stop, 3);
	api_request_fini(&r);
}

/* max_tokens is lowered so that prompt + answer fit the context; edges of the context. */
Test(api_request, max_tokens_fits_the_context)
{
	struct api_request r;
	parse_ok("{\"prompt\": [1, 2, 3], \"max_tokens\": 512}", &r);
	cr_expect_eq(r.max_tokens, 512 - 3);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1, 2, 3], \"max_tokens\": 0}", &r);
	cr_expect_eq(r.max_tokens, 0);
	api_request_fini(&r);

	/* 511 prompt tokens is the longest prompt; it leaves room for one. */
	char body[8192];
	size_t at = (size_t)snprintf(body, sizeof body, "{\"prompt\": [");
	for (int i = 0; i < 511; i++)
		at += (size_t)snprintf(body + at, sizeof body - at, "%s7", i ? "," : "");
	snprintf(body + at, sizeof body - at, "], \"max_tokens\": 100}");
	parse_ok(body, &r);
	cr_expect_eq(r.n_prompt, 511);
	cr_expect_eq(r.max_tokens, 1);
	api_request_fini(&r);
}

/* ------------------------------------------------------------ refusals */

#define BAD 400

Test(api_request, invalid_json)
{
	const char *msg = "the request body is not valid JSON";
	refused("", BAD, NULL, msg);
	refused("{", BAD, NULL, msg);
	refused("{\"prompt\": \"a\"", BAD, NULL, msg);
	refused("{\"prompt\": 'a'}", BAD, NULL, msg);
	refused("{\"prompt\": [1,]}", BAD, NULL, msg);
	refused("prompt=a", BAD, NULL, msg);
	/* The length bounds the parse: the NUL-free tail after it is not read. */
	struct api_request r;
	struct api_error err;
	const char *body = "{\"prompt\": [1]}garbage";
	cr_expect_eq(api_request_parse(body, 15, &lim, vocab, &r, &err), 0, "%s", err.message);
	api_request_fini(&r);
}

Test(api_request, not_an_object)
{
	const char *msg = "the request body must be a JSON object";
	refused("[1, 2]", BAD, NULL, msg);
	refused("\"Once upon a time\"", BAD, NULL, msg);
	refused("42", BAD, NULL, msg);
	refused("null", BAD, NULL, msg);
}

Test(api_request, unknown_field)
{
	refused("{\"prompt\": \"a\", \"temprature\": 0}", BAD, "temprature",
		"unknown field 'temprature'");
	refused("{\"Prompt\": \"a\"}", BAD, "Prompt", "unknown field 'Prompt'");
}

Test(api_request, wrong_prompt)
{
	const char *msg = "'prompt' must be a string or an array of token ids (one prompt per "
			  "request)";
	refused("{}", BAD, "prompt", msg);
	refused("{\"prompt\": null}", BAD, "prompt", msg);
	refused("{\"prompt\": 5}", BAD, "prompt", msg);
	refused("{\"prompt\": []}", BAD, "prompt", msg);
	refused("{\"prompt\": [\"a\", \"b\"]}", BAD, "prompt", msg);
	refused("{\"prompt\": {\"text\": \"a\"}}", BAD, "prompt", msg);
	refused("{\"prompt\": true}", BAD, "prompt", msg);
}

Test(api_request, prompt_ids_out_of_range)
{
	refused("{\"prompt\": [1, 512]}", BAD, "prompt",
		"prompt[1] is not a token id of this model");
	refused("{\"prompt\": [-1]}", BAD, "prompt", "prompt[0] is not a token id of this model");
	refused("{\"prompt\": [1, 2, 3.5]}", BAD, "prompt",
		"prompt[2] is not a token id of this model");
	refused("{\"prompt\": [1, \"2\"]}", BAD, "prompt",
		"prompt[1] is not a token id of this model");
	refused("{\"prompt\": [1, 1e300]}", BAD, "prompt",
		"prompt[1] is not a token id of this model");
}

Test(api_request, prompt_longer_than_the_context)
{
	char body[8192];
	size_t at = (size_t)snprintf(body, sizeof body, "{\"prompt\": [");
	for (int i = 0; i < 512; i++)
		at += (size_t)snprintf(body + at, sizeof body - at, "%s7", i ? "," : "");
	snprintf(body + at, sizeof body - at, "]}");
	refused(body, BAD, "prompt", "the prompt has 512 tokens; the context holds 512");

	/* As text: "a a a ..." is one token per word, plus BOS. */
	at = (size_t)snprintf(body, sizeof body, "{\"prompt\": \"");
	for (int i = 0; i < 600; i++)
		at += (size_t)snprintf(body + at, sizeof body - at, " a");
	snprintf(body + at, sizeof body - at, "\"}");
	struct api_request r;
	struct api_error err;
	cr_assert_eq(api_request_parse(body, strlen(body), &lim, vocab, &r, &err), LM_EINVAL);
	cr_expect_eq(err.status, 400);
	cr_expect_str_eq(err.param, "prompt");
	cr_expect(strstr(err.message, "; the context holds 512") != NULL, "%s", err.message);
	api_error_fini(&err);
}

/* A vocabulary without BOS (the gpt2 sample) turns an empty string into no tokens. */
Test(api_request, empty_prompt)
{
	uint8_t *img = NULL;
	size_t len = 0;
	lm_diag d = {{0}};
	cr_assert_eq(gs_make(GS_GPT2_VOCAB, &img, &len, &d), 0, "%s", d.msg);
	gguf_file *f;
	tok_vocab *v;
	cr_assert_eq(gguf_open_mem(img, len, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(tok_load(f, &v, &d), 0, "%s", d.msg);
	cr_assert_not(tok_add_bos(v));
	struct api_request r;
	struct api_error err;
	const char *body = "{\"prompt\": \"\"}";
	cr_assert_eq(api_request_parse(body, strlen(body), &lim, v, &r, &err), LM_EINVAL);
	cr_expect_str_eq(err.message, "the prompt has no tokens");
	cr_expect_str_eq(err.param, "prompt");
	api_error_fini(&err);
	tok_free(v);
	gguf_close(f);
	free(img);
}

Test(api_request, max_tokens)
{
	refused("{\"prompt\": [1], \"max_tokens\": -1}", BAD, "max_tokens",
		"'max_tokens' must be an integer in [0, 512], got -1");
	refused("{\"prompt\": [1], \"max_tokens\": 513}", BAD, "max_tokens",
		"'max_tokens' must be an integer in [0, 512], got 513");
	refused("{\"prompt\": [1], \"max_tokens\": 1e12}", BAD, "max_tokens",
		"'max_tokens' must be an integer in [0, 512], got 1e+12");
	refused("{\"prompt\": [1], \"max_tokens\": 1.5}", BAD, "max_tokens",
		"'max_tokens' must be an integer in [0, 512], got 1.5");
	refused("{\"prompt\": [1], \"max_tokens\": 1e999}", BAD, "max_tokens",
		"'max_tokens' must be a number");
	refused("{\"prompt\": [1], \"max_tokens\": \"16\"}", BAD, "max_tokens",
		"'max_tokens' must be a number");
	refused("{\"prompt\": [1], \"max_tokens\": [16]}", BAD, "max_tokens",
		"'max_tokens' must be a number");
}

Test(api_request, sampling_ranges)
{
	refused("{\"prompt\": [1], \"temperature\": 101}", BAD, "temperature",
		"'temperature' must be a number in [0, 100], got 101");
	refused("{\"prompt\": [1], \"temperature\": -0.5}", BAD, "temperature",
		"'temperature' must be a number in [0, 100], got -0.5");
	refused("{\"prompt\": [1], \"top_p\": 0}", BAD, "top_p",
		"'top_p' must be a number in [1e-09, 1], got 0");
	refused("{\"prompt\": [1], \"top_p\": 1.01}", BAD, "top_p",
		"'top_p' must be a number in [1e-09, 1], got 1.01");
	refused("{\"prompt\": [1], \"top_k\": -1}", BAD, "top_k",
		"'top_k' must be an integer in [0, 1e+09], got -1");
	refused("{\"prompt\": [1], \"top_k\": 2.5}", BAD, "top_k",
		"'top_k' must be an integer in [0, 1e+09], got 2.5");
	refused("{\"prompt\": [1], \"min_p\": 2}", BAD, "min_p",
		"'min_p' must be a number in [0, 1], got 2");
	refused("{\"prompt\": [1], \"seed\": -1}", BAD, "seed",
		"'seed' must be an integer in [0, 9.0072e+15], got -1");
	refused("{\"prompt\": [1], \"seed\": 9007199254740992}", BAD, "seed",
		"'seed' must be an integer in [0, 9.0072e+15], got 9.0072e+15");
	refused("{\"prompt\": [1], \"logprobs\": 21}", BAD, "logprobs",
		"'logprobs' must be an integer in [0, 20], got 21");
	refused("{\"prompt\": [1], \"logprobs\": true}", BAD, "logprobs",
		"'logprobs' must be a number");
	refused("{\"prompt\": [1], \"n\": 2}", BAD, "n", "'n' must be an integer in [1, 1], got 2");
}

Test(api_request, flags)
{
	refused("{\"prompt\": [1], \"stream\": \"yes\"}", BAD, "stream", "must be true or false");
	refused("{\"prompt\": [1], \"stream\": 1}", BAD, "stream", "must be true or false");
	refused("{\"prompt\": [1], \"return_token_ids\": 1}", BAD, "return_token_ids",
		"must be true or false");
	refused("{\"prompt\": [1], \"echo\": true}", BAD, "echo", "echo is not supported");
}

Test(api_request, stops)
{
	const char *msg = "'stop' must be up to 4 non-empty strings of at most 256 bytes";
	refused("{\"prompt\": [1], \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", BAD, "stop",
		msg);
	refused("{\"prompt\": [1], \"stop\": \"\"}", BAD, "stop", msg);
	refused("{\"prompt\": [1], \"stop\": [\"a\", \"\"]}", BAD, "stop", msg);
	refused("{\"prompt\": [1], \"stop\": [\"a\", 1]}", BAD, "stop", msg);
	char body[600];
	snprintf(body, sizeof body, "{\"prompt\": [1], \"stop\": \"%0257d\"}", 0);
	refused(body, BAD, "stop", msg);
	snprintf(body, sizeof body, "{\"prompt\": [1], \"stop\": \"%0256d\"}", 0);
	struct api_request r;
	parse_ok(body, &r);
	cr_expect_eq(r.max_stop, 256);
	api_request_fini(&r);
	refused("{\"prompt\": [1], \"stop\": 5}", BAD, "stop",
		"'stop' must be a string or an array of strings");
	/* Malformed UTF-8 (a raw continuation byte, an overlong '/', a surrogate) could match
	 * inside a character of the always-valid text and cut it (found by fuzz_http). */
	const char *utf8 = "'stop' strings must be valid UTF-8";
	refused("{\"prompt\": [1], \"stop\": \"\xbf\xbd\"}", BAD, "stop", utf8);
	refused("{\"prompt\": [1], \"stop\": [\"ok\", \"\xc0\xaf\"]}", BAD, "stop", utf8);
	refused("{\"prompt\": [1], \"stop\": \"\xed\xa0\x80\"}", BAD, "stop", utf8);
	refused("{\"prompt\": [1], \"stop\": \"caf\xc3\"}", BAD, "stop", utf8);
	parse_ok("{\"prompt\": [1], \"stop\": [\"\xc3\xa9\", \"\\u20ac\", \"\xf0\x9f\x98\x80\"]}",
		 &r);
	cr_expect_eq(r.n_stops, 3);
	api_request_fini(&r);
	refused("{\"prompt\": [1], \"stop\": {\"a\": 1}}", BAD, "stop",
		"'stop' must be a string or an array of strings");
}

/* Several mistakes: the first in the documented order is reported. */
Test(api_request, first_mistake_wins)
{
	refused("{\"prompt\": 5, \"bogus\": 1, \"max_tokens\": -1}", BAD, "bogus",
		"unknown field 'bogus'");
	refused("{\"prompt\": 5, \"max_tokens\": -1}", BAD, "prompt",
		"'prompt' must be a string or an array of token ids (one prompt per request)");
	refused("{\"prompt\": [1], \"stop\": 5, \"n\": 3, \"stream\": 2}", BAD, "n",
		"'n' must be an integer in [1, 1], got 3");
	refused("{\"prompt\": [1], \"stop\": 5, \"stream\": 2}", BAD, "stream",
		"must be true or false");
}

/* The error document the HTTP reply carries: OpenAI's shape. */
Test(api_request, openai_error_document)
{
	struct api_request r;
	struct api_error err;
	const char *body = "{\"prompt\": [1], \"max_tokens\": -5}";
	cr_assert_eq(api_request_parse(body, strlen(body), &lim, vocab, &r, &err), LM_EINVAL);
	char *s = lm_httpd_error_json(err.type, err.param, err.message);
	cJSON *o = cJSON_Parse(s);
	cr_assert_not_null(o, "%s", s);
	cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
	cr_assert(cJSON_IsObject(e), "%s", s);
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "message")),
			 "'max_tokens' must be an integer in [0, 512], got -5");
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")),
			 "invalid_request_error");
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "param")), "max_tokens");
	cr_expect(cJSON_IsNull(cJSON_GetObjectItem(e, "code")));
	cJSON_Delete(o);
	free(s);
	api_error_fini(&err);
}

/* ------------------------------------------------------------ stop strings */

static struct api_request with_stops(const char *const *stops, int n)
{
	struct api_request r = {0};
	for (int i = 0; i < n; i++) {
		r.stops[i] = (char *)stops[i];
		if (strlen(stops[i]) > r.max_stop)
			r.max_stop = strlen(stops[i]);
	}
	r.n_stops = n;
	return r;
}

static size_t cut_of(const struct api_request *r, const char *text, bool final, bool *hit)
{
	return api_stop_cut(r, text, strlen(text), final, hit);
}

Test(api_request, stop_cut_holds_back_prefixes)
{
	static const char *const stops[] = {"The end", "\n\n"};
	struct api_request r = with_stops(stops, 2);
	bool hit;
	/* "Once upon a The" ends with "The", a prefix of "The end": held back. */
	cr_expect_eq(cut_of(&r, "Once upon a The", false, &hit), 12);
	cr_expect_not(hit);
	/* "The e" is a prefix too; "Th x" is not. */
	cr_expect_eq(cut_of(&r, "x The e", false, &hit), 2);
	cr_expect_eq(cut_of(&r, "Th x", false, &hit), 4);
	/* A lone new line could begin "\n\n". */
	cr_expect_eq(cut_of(&r, "line\n", false, &hit), 4);
	/* final: nothing is held back. */
	cr_expect_eq(cut_of(&r, "Once upon a The", true, &hit), 15);
	cr_expect_not(hit);
	cr_expect_eq(cut_of(&r, "", false, &hit), 0);
}

Test(api_request, stop_cut_finds_the_earliest)
{
	static const char *const stops[] = {"end", "cat"};
	struct api_request r = with_stops(stops, 2);
	bool hit;
	cr_expect_eq(cut_of(&r, "the cat and the end", false, &hit), 4);
	cr_expect(hit);
	cr_expect_eq(cut_of(&r, "the end and the cat", true, &hit), 4);
	cr_expect(hit);
	cr_expect_eq(cut_of(&r, "cat", false, &hit), 0);
	cr_expect(hit);
}

Test(api_request, stop_cut_one_byte_stops_hold_nothing)
{
	static const char *const stops[] = {"."};
	struct api_request r = with_stops(stops, 1);
	bool hit;
	cr_expect_eq(cut_of(&r, "no dot", false, &hit), 6);
	cr_expect_not(hit);
	cr_expect_eq(cut_of(&r, "a. b", false, &hit), 1);
	cr_expect(hit);
	struct api_request none = {0};
	cr_expect_eq(cut_of(&none, "anything", false, &hit), 8);
	cr_expect_not(hit);
}

/* A UTF-8 stop string starts at a character boundary of UTF-8 text. */
Test(api_request, stop_cut_respects_characters)
{
	static const char *const stops[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
	struct api_request r = with_stops(stops, 1);
	bool hit;
	/* "caf\xc3\xa9" ends with "é", a prefix of "été": the whole character waits. */
	cr_expect_eq(cut_of(&r, "caf\xc3\xa9", false, &hit), 3);
	cr_expect_eq(cut_of(&r, "un \xc3\xa9t\xc3\xa9", false, &hit), 3);
	cr_expect(hit);
}

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
#include "common/grammar/gbnf.h"
#include "common/wire/httpd.h"
#include "common/tok/tokenizer.h"
#include "coordinator/api/api_json.h"
#include "coordinator/api/api_request.h"
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

/* The body must be refused with this status and param, and a message that starts so. */
static void refused_starting(const char *body, uint16_t status, const char *param,
			     const char *start)
{
	struct api_request r;
	struct api_error err;
	int rc = api_request_parse(body, strlen(body), &lim, vocab, &r, &err);
	cr_assert_neq(rc, 0, "%s: accepted", body);
	cr_expect_eq(err.status, status, "%s: status %d", body, err.status);
	if (param == NULL)
		cr_expect_null(err.param, "%s: param %s", body, err.param);
	else
		cr_expect(err.param != NULL && strcmp(err.param, param) == 0, "%s: param %s", body,
			  err.param);
	cr_expect(strncmp(err.message, start, strlen(start)) == 0, "%s: '%s' does not start '%s'",
		  body, err.message, start);
	cr_expect_null(r.prompt);
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

Test(api_request, structured_output_fields)
{
	struct api_request r;
	parse_ok("{\"prompt\": [5]}", &r);
	cr_expect_null(r.grammar);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [5], \"response_format\": {\"type\": \"json_object\"}}", &r);
	cr_assert_not_null(r.grammar);
	cr_expect(strstr(r.grammar, "root ::= object") != NULL, "%s", r.grammar);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [5], \"json_schema\": {\"enum\": [\"a\", \"b\"]}}", &r);
	cr_assert_not_null(r.grammar);
	cr_expect(strstr(r.grammar, "\"\\\"a\\\"\" space") != NULL, "%s", r.grammar);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [5], \"grammar\": \"root ::= [0-9]+\"}", &r);
	cr_expect_str_eq(r.grammar, "root ::= [0-9]+");
	api_request_fini(&r);
	refused("{\"prompt\": [5], \"grammar\": \"root ::= [0-9\"}", 400, "grammar",
		"grammar: line 1, column 10: unterminated character class");
	refused("{\"prompt\": [5], \"json_schema\": {\"type\": \"integer\", \"minimum\": 1}}", 400,
		"json_schema", "json_schema: /: 'minimum' is not supported");
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
	const char *msg = "the request body is not valid JSON: ";
	refused_starting("", BAD, NULL, msg);
	refused_starting("{", BAD, NULL, msg);
	refused_starting("{\"prompt\": \"a\"", BAD, NULL, msg);
	refused_starting("{\"prompt\": 'a'}", BAD, NULL, msg);
	refused_starting("{\"prompt\": [1,]}", BAD, NULL, msg);
	refused_starting("prompt=a", BAD, NULL, msg);
	/* The length bounds the parse: the NUL-free tail after it is not read. */
	struct api_request r;
	struct api_error err;
	const char *body = "{\"prompt\": [1]}garbage";
	cr_expect_eq(api_request_parse(body, 15, &lim, vocab, &r, &err), 0, "%s", err.message);
	api_request_fini(&r);
	/* Within the length, anything after the value is refused, and where. */
	refused(body, BAD, NULL,
		"the request body is not valid JSON: bytes after the JSON value at byte 15");
	refused("{\"prompt\": [1]} {}", BAD, NULL,
		"the request body is not valid JSON: bytes after the JSON value at byte 16");
	parse_ok("\r\n {\"prompt\": [1]} \t\n", &r);
	api_request_fini(&r);
	/* A key twice, a lone surrogate, invalid UTF-8, a number JSON does not write. */
	refused_starting("{\"prompt\": [1], \"prompt\": [2]}", BAD, NULL,
			 "the request body is not valid JSON: the key 'prompt' twice");
	refused_starting("{\"prompt\": \"\\ud800\"}", BAD, NULL,
			 "the request body is not valid JSON: a high surrogate");
	refused_starting("{\"prompt\": \"\xff\"}", BAD, NULL,
			 "the request body is not valid JSON: a string that is not valid UTF-8");
	refused_starting("{\"prompt\": [01]}", BAD, NULL, msg);
	refused_starting("{\"prompt\": [1], \"max_tokens\": +1}", BAD, NULL, msg);
}

Test(api_request, not_an_object)
{
	const char *msg = "the request body must be a JSON object";
	refused("[1, 2]", BAD, NULL, msg);
	refused("\"Once upon a time\"", BAD, NULL, msg);
	refused("42", BAD, NULL, msg);
	refused("null", BAD, NULL, msg);
}

/* A field this server does not know is ignored and named in r.ignored (the response header
 * X-Layermesh-Ignored-Fields), as llama-server and vLLM ignore them; a known field with a bad
 * value stays a 400. */
Test(api_request, unknown_fields_are_ignored_and_named)
{
	struct api_request r;
	parse_ok("{\"prompt\": \"a\", \"store\": true, \"metadata\": {\"k\": \"v\"}, "
		 "\"service_tier\": \"auto\", \"max_tokens\": 4}",
		 &r);
	cr_expect_str_eq(r.ignored, "store, metadata, service_tier");
	cr_expect_eq(r.max_tokens, 4);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1], \"stream\": true, \"stream_options\": {\"x\": 1, "
		 "\"include_usage\": true}}",
		 &r);
	cr_expect_str_eq(r.ignored, "stream_options.x");
	cr_expect(r.include_usage);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1]}", &r);
	cr_expect_str_eq(r.ignored, "");
	api_request_fini(&r);
	/* Many of them: the list is cut, and says so. */
	char body[4096] = "{\"prompt\": [1]";
	for (int i = 0; i < 60; i++)
		snprintf(body + strlen(body), sizeof body - strlen(body), ", \"unknown_%02d\": 1",
			 i);
	strcat(body, "}");
	parse_ok(body, &r);
	cr_expect(strncmp(r.ignored, "unknown_00, unknown_01", 22) == 0, "%s", r.ignored);
	cr_expect_str_eq(r.ignored + strlen(r.ignored) - 3, "...");
	api_request_fini(&r);
	/* A known field's bad value is still refused; a misspelt one is ignored, and named. */
	refused("{\"prompt\": \"a\", \"temperature\": \"hot\"}", BAD, "temperature",
		"'temperature' must be a number");
	parse_ok("{\"prompt\": \"a\", \"temprature\": 0}", &r);
	cr_expect_str_eq(r.ignored, "temprature");
	api_request_fini(&r);
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
	refused_starting("{\"prompt\": [1], \"max_tokens\": 1e999}", BAD, NULL,
			 "the request body is not valid JSON: a number out of range");
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
	refused("{\"prompt\": [1], \"n\": 17}", BAD, "n",
		"'n' must be an integer in [1, 16], got 17");
	refused("{\"prompt\": [1], \"n\": 0}", BAD, "n",
		"'n' must be an integer in [1, 16], got 0");
}

Test(api_request, flags)
{
	refused("{\"prompt\": [1], \"stream\": \"yes\"}", BAD, "stream",
		"'stream' must be true or false");
	refused("{\"prompt\": [1], \"stream\": 1}", BAD, "stream",
		"'stream' must be true or false");
	refused("{\"prompt\": [1], \"return_token_ids\": 1}", BAD, "return_token_ids",
		"'return_token_ids' must be true or false");
	refused("{\"prompt\": [1], \"echo\": true}", BAD, "echo", "echo is not supported");
}

/* llama-server's timings_per_token: a boolean, off by default. */
Test(api_request, timings_per_token)
{
	struct api_request r;
	parse_ok("{\"prompt\": [1]}", &r);
	cr_expect_not(r.timings_per_token);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1], \"timings_per_token\": true}", &r);
	cr_expect(r.timings_per_token);
	cr_expect_str_eq(r.ignored, "");
	api_request_fini(&r);
	refused("{\"prompt\": [1], \"timings_per_token\": 1}", BAD, "timings_per_token",
		"'timings_per_token' must be true or false");
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
	 * inside a character of the always-valid text and cut it (found by fuzz_http); the
	 * JSON reader refuses it in any string now. U+0000 would end the C string. */
	const char *utf8 = "the request body is not valid JSON: a string that is not valid UTF-8";
	refused_starting("{\"prompt\": [1], \"stop\": \"\xbf\xbd\"}", BAD, NULL, utf8);
	refused_starting("{\"prompt\": [1], \"stop\": [\"ok\", \"\xc0\xaf\"]}", BAD, NULL, utf8);
	refused_starting("{\"prompt\": [1], \"stop\": \"\xed\xa0\x80\"}", BAD, NULL, utf8);
	refused_starting("{\"prompt\": [1], \"stop\": \"caf\xc3\"}", BAD, NULL, utf8);
	refused("{\"prompt\": [1], \"stop\": \"a\\u0000b\"}", BAD, "stop",
		"'stop' strings may not hold U+0000");
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
	refused("{\"prompt\": 5, \"bogus\": 1, \"max_tokens\": -1}", BAD, "prompt",
		"'prompt' must be a string or an array of token ids (one prompt per request)");
	refused("{\"prompt\": 5, \"max_tokens\": -1}", BAD, "prompt",
		"'prompt' must be a string or an array of token ids (one prompt per request)");
	refused("{\"prompt\": [1], \"stop\": 5, \"n\": 1.5, \"stream\": 2}", BAD, "n",
		"'n' must be an integer in [1, 16], got 1.5");
	refused("{\"prompt\": [1], \"stop\": 5, \"stream\": 2}", BAD, "stream",
		"'stream' must be true or false");
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

/* ------------------------------------------------------------ U+0000, sampling extras */

/* A prompt's escaped U+0000 is a character like any other: the prompt is tokenized by its
 * length, not cut at the NUL. A raw one (or any raw control character in a string) is not
 * JSON (RFC 8259, section 7), and is refused naming it. */
Test(api_request, nul_in_a_prompt_is_kept_escaped_and_refused_raw)
{
	int32_t want[16];
	size_t n;
	lm_diag d = {{0}};
	cr_assert_eq(tok_encode(vocab, "ab\0cd", 5, true, want, 16, &n, &d), 0);
	struct api_request r;
	parse_ok("{\"prompt\": \"ab\\u0000cd\"}", &r);
	cr_assert_eq(r.n_prompt, (int32_t)n);
	cr_assert_arr_eq(r.prompt, want, n * sizeof want[0]);
	api_request_fini(&r);
	static const char raw[] = "{\"prompt\": \"ab\0cd\"}";
	struct api_error err;
	cr_assert_neq(api_request_parse(raw, sizeof raw - 1, &lim, vocab, &r, &err), 0);
	cr_expect_eq(err.status, 400);
	cr_expect_str_eq(err.message, "the request body is not valid JSON: a raw control character "
				      "U+0000 in a string (write it as \\u0000) at byte 14");
	static const char *const raws[] = {"{\"prompt\": \"a\nb\"}", "{\"prompt\": \"a\tb\"}",
					   "{\"prompt\": \"a\x1f\"}",
					   "{\"prompt\": [1], \"x\x01\": 1}"};
	for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++) {
		cr_assert_neq(api_request_parse(raws[i], strlen(raws[i]), &lim, vocab, &r, &err), 0,
			      "%s", raws[i]);
		cr_expect_eq(err.status, 400);
		cr_expect(strstr(err.message, "a raw control character U+00") != NULL, "%s",
			  err.message);
	}
	/* The cut prompt would be shorter. */
	size_t cut;
	cr_assert_eq(tok_encode(vocab, "ab", 2, true, want, 16, &cut, &d), 0);
	cr_assert_lt(cut, n);
}

Test(api_request, penalties_bias_and_seed)
{
	struct api_request r;
	parse_ok("{\"prompt\": [1], \"presence_penalty\": -2, \"frequency_penalty\": 1.5, "
		 "\"repeat_penalty\": 1.1, \"repeat_last_n\": 32, \"seed\": 7, "
		 "\"logit_bias\": {\"5\": -100, \"511\": 100, \"0\": 0.5}}",
		 &r);
	cr_expect_eq(r.penalties.presence, -2.0f);
	cr_expect_eq(r.penalties.frequency, 1.5f);
	cr_expect_eq(r.penalties.repeat, 1.1f);
	cr_expect_eq(r.penalties.last_n, 32);
	cr_expect(r.seed_given);
	cr_expect_eq(r.sampling.seed, 7);
	cr_assert_eq(r.n_bias, 3);
	cr_expect(r.bias[0].id == 5 && r.bias[0].bias == -100.0f);
	cr_expect(r.bias[1].id == 511 && r.bias[1].bias == 100.0f);
	cr_expect(r.bias[2].id == 0 && r.bias[2].bias == 0.5f);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1], \"seed\": null, \"repeat_last_n\": -1}", &r);
	cr_expect_not(r.seed_given, "no seed: the API draws one");
	cr_expect_eq(r.penalties.last_n, 512, "-1: the whole context");
	cr_expect_eq(r.penalties.repeat, 1.0f);
	cr_expect_not(lm_penalties_active(&r.penalties));
	api_request_fini(&r);
	refused("{\"prompt\": [1], \"presence_penalty\": 2.5}", BAD, "presence_penalty",
		"'presence_penalty' must be a number in [-2, 2], got 2.5");
	refused("{\"prompt\": [1], \"repeat_penalty\": 0}", BAD, "repeat_penalty",
		"'repeat_penalty' must be a number in [1e-06, 10], got 0");
	refused("{\"prompt\": [1], \"repeat_last_n\": 513}", BAD, "repeat_last_n",
		"'repeat_last_n' must be an integer in [-1, 512], got 513");
	refused("{\"prompt\": [1], \"logit_bias\": {\"x\": 1}}", BAD, "logit_bias",
		"'logit_bias' key 'x' is not a token id of this model");
	refused("{\"prompt\": [1], \"logit_bias\": {\"512\": 1}}", BAD, "logit_bias",
		"'logit_bias' key '512' is not a token id of this model");
	refused("{\"prompt\": [1], \"logit_bias\": {\"-1\": 1}}", BAD, "logit_bias",
		"'logit_bias' key '-1' is not a token id of this model");
	refused("{\"prompt\": [1], \"logit_bias\": {\"1\": 101}}", BAD, "logit_bias",
		"'logit_bias' values must be numbers in [-100, 100]");
	refused("{\"prompt\": [1], \"logit_bias\": [1]}", BAD, "logit_bias",
		"'logit_bias' must be an object of token ids to biases");
	char body[8192] = "{\"prompt\": [1], \"logit_bias\": {";
	for (int i = 0; i < 301; i++)
		snprintf(body + strlen(body), sizeof body - strlen(body), "%s\"%d\": 1",
			 i ? ", " : "", i);
	strcat(body, "}}");
	refused(body, BAD, "logit_bias", "'logit_bias' has 301 entries, at most 300");
}

/* What is not implemented is refused, naming the field; neutral values pass. */
Test(api_request, unsupported_fields)
{
	refused("{\"prompt\": [1], \"suffix\": \"x\"}", BAD, "suffix",
		"'suffix' is not supported (this server does no insertion)");
	refused("{\"prompt\": [1], \"stream_options\": {\"include_usage\": true}}", BAD,
		"stream_options", "'stream_options' is only allowed with 'stream': true");
	refused("{\"prompt\": [1], \"model\": 5}", BAD, "model", "must be a string");
	struct api_request r;
	parse_ok("{\"prompt\": [1], \"best_of\": 1, \"suffix\": \"\", \"n\": 1, \"stream\": true, "
		 "\"stream_options\": {\"include_usage\": true}}",
		 &r);
	cr_expect(r.include_usage);
	api_request_fini(&r);
}

/* n and best_of: choices and the sequences they are drawn from. best_of below n, or above it in
 * a stream (the best are known only at the end), is refused; chat has no best_of. */
Test(api_request, n_and_best_of)
{
	struct api_request r;
	parse_ok("{\"prompt\": [1], \"n\": 3}", &r);
	cr_expect_eq(r.n, 3);
	cr_expect_eq(r.best_of, 3);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1], \"n\": 2, \"best_of\": 5}", &r);
	cr_expect_eq(r.n, 2);
	cr_expect_eq(r.best_of, 5);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1], \"best_of\": 4}", &r);
	cr_expect_eq(r.n, 1);
	cr_expect_eq(r.best_of, 4);
	api_request_fini(&r);
	parse_ok("{\"prompt\": [1], \"n\": 4, \"best_of\": 4, \"stream\": true}", &r);
	cr_expect_eq(r.best_of, 4);
	api_request_fini(&r);
	refused("{\"prompt\": [1], \"n\": 3, \"best_of\": 2}", BAD, "best_of",
		"'best_of' (2) must be at least 'n' (3)");
	refused("{\"prompt\": [1], \"best_of\": 2, \"stream\": true}", BAD, "best_of",
		"'best_of' above 'n' cannot be streamed: the best are known only at the end");
	refused("{\"prompt\": [1], \"best_of\": 17}", BAD, "best_of",
		"'best_of' must be an integer in [1, 16], got 17");
}

/* A prompt that cannot fit is refused before it is tokenized: at most max_token_bytes bytes
 * per token. */
Test(api_request, an_overlong_prompt_is_refused_before_tokenizing)
{
	const struct api_limits small = {.max_seq = 512, .max_token_bytes = 16};
	size_t n = 4u << 20;
	char *body = malloc(n + 32);
	strcpy(body, "{\"prompt\": \"");
	size_t at = strlen(body);
	memset(body + at, 'a', n);
	strcpy(body + at + n, "\"}");
	struct api_request r;
	struct api_error err;
	int rc = api_request_parse(body, strlen(body), &small, vocab, &r, &err);
	cr_assert_eq(rc, LM_EINVAL);
	cr_expect_eq(err.reason, LM_HTTP_REFUSE_CONTEXT);
	cr_expect_str_eq(err.message, "the prompt has at least 262144 tokens (4194304 bytes); the "
				      "context holds 512");
	api_error_fini(&err);
	free(body);
}

/* ------------------------------------------------------------ chat */

static int chat_parse(const struct api_limits *l, const tok_vocab *v, const char *body,
		      struct api_request *r, struct api_error *err)
{
	return api_chat_parse(body, strlen(body), l, v, r, err);
}

static void chat_refused(const struct api_limits *l, const char *body, const char *param,
			 const char *msg, enum lm_http_refusal reason)
{
	struct api_request r;
	struct api_error err;
	cr_assert_eq(chat_parse(l, vocab, body, &r, &err), LM_EINVAL, "%s: accepted", body);
	cr_expect_eq(err.status, 400);
	cr_expect_eq(err.reason, reason, "%s: reason %d", body, err.reason);
	if (param == NULL)
		cr_expect_null(err.param);
	else
		cr_expect(err.param != NULL && strcmp(err.param, param) == 0, "%s: param %s", body,
			  err.param);
	cr_expect_str_eq(err.message, msg, "%s", body);
	api_error_fini(&err);
}

Test(api_request, chat_messages_are_checked)
{
	const struct api_limits l = {.max_seq = 512, .chat = CHAT_CHATML};
	const enum lm_http_refusal bad = LM_HTTP_REFUSE_INVALID;
	chat_refused(&l, "{\"messages\": []}", "messages",
		     "'messages' must be an array of 1 to 1024 messages", bad);
	chat_refused(&l, "{\"messages\": \"hi\"}", "messages",
		     "'messages' must be an array of 1 to 1024 messages", bad);
	chat_refused(&l, "{\"messages\": [5]}", "messages[0]", "'messages[0]' must be an object",
		     bad);
	chat_refused(&l, "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}",
		     "messages[0].role",
		     "'messages[0].role' must be \"system\", \"developer\", \"user\", "
		     "\"assistant\" or \"tool\"",
		     bad);
	/* A format mesh.toml names renders no tool messages; the model's own template does. */
	chat_refused(&l, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "messages",
		     "the chatml format renders no tool calls or tool messages (the model's own "
		     "template does: mesh.toml names a format)",
		     LM_HTTP_REFUSE_TEMPLATE);
	chat_refused(&l,
		     "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", "
		     "\"image_url\": {}}]}]}",
		     "messages[0].content",
		     "'messages[0].content[0]' must be {\"type\": \"text\", \"text\": ...}: only "
		     "text content is supported",
		     bad);
	chat_refused(&l, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
		     "messages[0].content",
		     "'messages[0].content' must be a string or an array of text parts", bad);
	chat_refused(&l,
		     "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
		     "[{}]}]}",
		     "messages[0].tool_calls[0]",
		     "'messages[0].tool_calls[0]' must be {\"id\": ..., \"type\": \"function\", "
		     "\"function\": {\"name\": ..., \"arguments\": ...}}",
		     bad);
	const char *hi = "[{\"role\": \"user\", \"content\": \"hi\"}]";
	char body[512];
	snprintf(body, sizeof body, "{\"messages\": %s, \"top_logprobs\": 2}", hi);
	chat_refused(&l, body, "top_logprobs", "'top_logprobs' needs 'logprobs': true", bad);
	snprintf(body, sizeof body,
		 "{\"messages\": %s, \"max_tokens\": 5, \"max_completion_tokens\": 6}", hi);
	chat_refused(&l, body, "max_completion_tokens",
		     "'max_tokens' and 'max_completion_tokens' disagree", bad);
	snprintf(body, sizeof body,
		 "{\"messages\": %s, \"response_format\": {\"type\": "
		 "\"yaml\"}}",
		 hi);
	chat_refused(&l, body, "response_format",
		     "'response_format' type \"yaml\" is not supported (text, json_object, "
		     "json_schema)",
		     bad);
	snprintf(body, sizeof body, "{\"messages\": %s, \"grammar\": \"root ::= x\"}", hi);
	chat_refused(&l, body, "grammar",
		     "grammar: line 1, column 10: rule 'x' is used but not defined", bad);
	snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": [{\"type\": \"function\"}]}",
		 hi);
	chat_refused(&l, body, "tools",
		     "'tools[0]' must be {\"type\": \"function\", \"function\": {\"name\": "
		     "...}}",
		     bad);
	/* No template: refused with the reason the mesh found. */
	const struct api_limits none = {.max_seq = 512, .chat_why = "no template here"};
	snprintf(body, sizeof body, "{\"messages\": %s}", hi);
	chat_refused(&none, body, "messages", "no template here", LM_HTTP_REFUSE_TEMPLATE);
	/* A template that raises: refused in its words. */
	const struct api_limits gemma = {.max_seq = 512, .chat = CHAT_GEMMA};
	chat_refused(&gemma,
		     "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": "
		     "\"user\", \"content\": \"hi\"}]}",
		     "messages",
		     "the chat template refuses this conversation: System role not supported",
		     LM_HTTP_REFUSE_TEMPLATE);
}

/* A conversation becomes the template's text, tokenized with special tokens parsed and BOS
 * once; the template's end-of-turn tokens stop it; max_tokens defaults to the rest of the
 * context. Phi-3's vocabulary (BOS <s>, <|end|>, <|endoftext|>) with the Phi-3.5 format. */
Test(api_request, chat_renders_tokenizes_and_stops)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-phi-3.gguf", getenv("LM_SHARED"));
	gguf_file *f;
	tok_vocab *v;
	lm_diag d = {{0}};
	cr_assert_eq(gguf_open(path, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(tok_load(f, &v, &d), 0, "%s", d.msg);
	const struct api_limits l = {.max_seq = 512,
				     .max_token_bytes = 64,
				     .chat = CHAT_PHI35,
				     .bos_text = "<s>",
				     .eos_text = "<|endoftext|>"};
	struct api_request r;
	struct api_error err;
	const char *body =
		"{\"messages\": [{\"role\": \"developer\", \"content\": \"Be kind.\"}, "
		"{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
		"\"Hi\"}, {\"type\": \"text\", \"text\": \"there\"}], \"name\": \"a\"}], "
		"\"logprobs\": true, \"top_logprobs\": 3}";
	cr_assert_eq(chat_parse(&l, v, body, &r, &err), 0, "%s", err.message);
	const char *text = "<|system|>\nBe kind.<|end|>\n<|user|>\nHi\nthere<|end|>\n"
			   "<|assistant|>\n";
	int32_t *want;
	size_t n;
	cr_assert_eq(tok_encode_alloc_ex(v, text, strlen(text),
					 TOK_ENC_PARSE_SPECIAL | TOK_ENC_ADD_BOS, &want, &n, &d),
		     0);
	cr_assert_eq(r.n_prompt, (int32_t)n);
	cr_assert_arr_eq(r.prompt, want, n * sizeof want[0]);
	cr_expect_eq(r.prompt[0], tok_bos(v));
	cr_expect_eq(r.prompt[1], tok_find(v, "<|system|>", 10), "the marker is one token");
	cr_expect_eq(r.max_tokens, 512 - r.n_prompt);
	cr_expect(r.logprobs);
	cr_expect_eq(r.n_logprobs, 3);
	cr_assert_eq(r.n_stop_ids, 2);
	cr_expect_eq(r.stop_ids[0], tok_find(v, "<|end|>", 7));
	cr_expect_eq(r.stop_ids[1], tok_find(v, "<|endoftext|>", 13));
	free(want);
	api_request_fini(&r);
	tok_free(v);
	gguf_close(f);
}

/* The end-of-turn tokens a chat stops on, for each family whose vocabulary ../shared carries:
 * each is the vocabulary's own token of that text (checked by its text, not by the lookup
 * that found it), a control token, and one the vocabulary lacks is left out. */
Test(api_request, chat_stops_on_each_familys_end_of_turn_tokens)
{
	static const struct {
		const char *vocab;
		enum chat_format fmt;
		const char *stops[3];
	} cases[] = {
		{"gemma-4", CHAT_GEMMA4, {"<turn|>"}},
		{"qwen2", CHAT_QWEN25, {"<|im_end|>"}},
		/* Llama 3.0's vocabulary has no <|eom_id|> (3.1's tool-call end). */
		{"llama-bpe", CHAT_LLAMA31, {"<|eot_id|>"}},
		{"phi-3", CHAT_PHI3, {"<|end|>", "<|endoftext|>"}},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-%s.gguf", getenv("LM_SHARED"),
			 cases[c].vocab);
		gguf_file *f;
		tok_vocab *v;
		lm_diag d = {{0}};
		cr_assert_eq(gguf_open(path, &f, &d), 0, "%s", d.msg);
		cr_assert_eq(tok_load(f, &v, &d), 0, "%s", d.msg);
		const struct api_limits l = {
			.max_seq = 512, .max_token_bytes = 64, .chat = cases[c].fmt};
		struct api_request r;
		struct api_error err;
		const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";
		cr_assert_eq(chat_parse(&l, v, body, &r, &err), 0, "%s: %s", cases[c].vocab,
			     err.message);
		int want = 0;
		while (want < 3 && cases[c].stops[want] != NULL)
			want++;
		cr_assert_eq(r.n_stop_ids, want, "%s: %d stop ids", cases[c].vocab, r.n_stop_ids);
		for (int i = 0; i < want; i++) {
			size_t n = 0;
			const char *t = tok_text(v, r.stop_ids[i], &n);
			cr_expect(t != NULL && n == strlen(cases[c].stops[i]) &&
					  memcmp(t, cases[c].stops[i], n) == 0,
				  "%s: stop %d is id %d, '%.*s', not %s", cases[c].vocab, i,
				  r.stop_ids[i], (int)n, t != NULL ? t : "", cases[c].stops[i]);
			cr_expect(tok_attr(v, r.stop_ids[i]) & TOK_ATTR_CONTROL,
				  "%s: %s is not a control token", cases[c].vocab,
				  cases[c].stops[i]);
		}
		api_request_fini(&r);
		tok_free(v);
		gguf_close(f);
	}
}

/* A reported seed is written digit for digit, so that sending it back repeats the text: cJSON's
 * own number writer gives 15 significant digits where it can, and 7439697383528243 came out as
 * 7.43969738352824e+15, another seed. */
Test(api_request, seeds_are_written_exactly)
{
	static const uint64_t seeds[] = {0, 1, 7439697383528243ull, 6167191181566931ull,
					 (1ull << 53) - 1};
	for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
		cJSON *o = cJSON_CreateObject();
		cr_assert_not_null(api_json_add_u64(o, "seed", seeds[i]));
		char *text = cJSON_PrintUnformatted(o);
		char want[64];
		snprintf(want, sizeof want, "{\"seed\":%llu}", (unsigned long long)seeds[i]);
		cr_expect_str_eq(text, want);
		/* And the request reader takes it back as the same seed. */
		char why[128];
		cJSON *back = api_json_parse(text, strlen(text), why, sizeof why);
		cr_assert_not_null(back, "%s", why);
		cr_expect_eq((uint64_t)cJSON_GetObjectItem(back, "seed")->valuedouble, seeds[i]);
		cJSON_Delete(back);
		cJSON_free(text);
		cJSON_Delete(o);
	}
}

/* A model's own template is rendered by the Jinja engine, whatever its family: the messages as
 * the formats take them (developer is system, parts joined), the generation prompt, BOS and
 * EOS, and chat_template_kwargs as variables of their own; what the template refuses or cannot
 * render is a 400 in the engine's words, with the line. */
Test(api_request, chat_renders_the_models_own_template_with_the_engine)
{
	const char *src =
		"{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
		"{% if add_generation_prompt %}<gen>{% endif %}{{ bos_token }}{{ eos_token }}"
		"{% if enable_thinking is defined %} think={{ enable_thinking }}{% endif %}"
		"{% if messages|length > 2 %}{{ raise_exception('at most 2') }}{% endif %}"
		"\n{% if messages[0].role == 'assistant' %}{{ nothing + 1 }}{% endif %}";
	lm_diag d = {{0}};
	jinja_tmpl *t = jinja_parse(src, strlen(src), &d);
	cr_assert_not_null(t, "%s", d.msg);
	const struct api_limits l = {
		.max_seq = 512, .jinja = t, .bos_text = "<s>", .eos_text = "</s>"};
	const char *json =
		"{\"messages\": [{\"role\": \"developer\", \"content\": \"Be kind.\"}, {\"role\": "
		"\"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}, {\"type\": "
		"\"text\", "
		"\"text\": \"there\"}]}], \"chat_template_kwargs\": {\"enable_thinking\": false}}";
	char why[200];
	cJSON *req = api_json_parse(json, strlen(json), why, sizeof why);
	cr_assert_not_null(req, "%s", why);
	struct lm_buf text = {0};
	struct api_error err = {0};
	cr_assert_eq(api_chat_prompt(req, &l, true, &text, &err), 0, "%s", err.message);
	cr_expect_str_eq(text.p, "[system:Be kind.][user:Hi\nthere]<gen><s></s> think=false");
	cJSON_Delete(req);
	lm_buf_fini(&text);
	const enum lm_http_refusal tmpl = LM_HTTP_REFUSE_TEMPLATE, bad = LM_HTTP_REFUSE_INVALID;
	chat_refused(
		&l,
		"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
		"\"assistant\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
		"messages", "the chat template refuses this conversation: line 1: at most 2", tmpl);
	chat_refused(&l, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}]}",
		     "messages",
		     "the chat template cannot render this conversation: line 2: Cannot perform "
		     "operation + on undefined values",
		     tmpl);
	const char *hi = "[{\"role\": \"user\", \"content\": \"hi\"}]";
	char body[512];
	snprintf(body, sizeof body, "{\"messages\": %s, \"chat_template_kwargs\": 5}", hi);
	chat_refused(&l, body, "chat_template_kwargs", "'chat_template_kwargs' must be an object",
		     bad);
	snprintf(body, sizeof body,
		 "{\"messages\": %s, \"chat_template_kwargs\": {\"bos_token\": \"x\"}}", hi);
	chat_refused(
		&l, body, "chat_template_kwargs",
		"'chat_template_kwargs.bos_token' would replace the template's own 'bos_token'",
		bad);
	/* A format named in mesh.toml has no variables to set. */
	const struct api_limits fmt = {.max_seq = 512, .chat = CHAT_CHATML};
	snprintf(body, sizeof body,
		 "{\"messages\": %s, \"chat_template_kwargs\": {\"enable_thinking\": true}}", hi);
	chat_refused(&fmt, body, "chat_template_kwargs",
		     "'chat_template_kwargs' needs the model's own chat template (mesh.toml names "
		     "the format chatml)",
		     bad);
	jinja_free(t);
}

/* Tools: checked field by field (a 400 naming the field); given to the model's own template as
 * `tools`, with the history's tool calls (arguments as an object) and tool messages; the
 * output parsed by the template's syntax, for the calls tool_choice allows. */
Test(api_request, chat_takes_tools_and_tool_history)
{
	const char *src =
		"{% if tools %}{% for t in tools %}<tool:{{ t.function.name }}>{% endfor %}{% "
		"endif %}"
		"{% for m in messages %}[{{ m.role }}:{{ m.content }}"
		"{% if m.tool_calls %}{% for c in m.tool_calls %}({{ c.id }} {{ c.function.name }} "
		"{{ c.function.arguments.city }} {{ c.function.arguments|tojson }}){% endfor %}"
		"{% endif %}{% if m.tool_call_id %} for {{ m.tool_call_id }}{% endif %}]{% endfor "
		"%}"
		"{% if add_generation_prompt %}<tool_call><think>{% endif %}";
	lm_diag d = {{0}};
	jinja_tmpl *t = jinja_parse(src, strlen(src), &d);
	cr_assert_not_null(t, "%s", d.msg);
	struct api_limits l = {.max_seq = 512, .jinja = t, .bos_text = "", .eos_text = ""};
	l.tools = tool_syntax_detect(src, strlen(src));
	cr_assert_eq(l.tools.fmt, TOOL_FMT_HERMES);
	const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
			    "\"parameters\": {\"type\": \"object\"}}}, {\"type\": \"function\", "
			    "\"function\": {\"name\": \"get_time\", \"description\": \"Now.\"}}]";
	char json[2048];
	snprintf(
		json, sizeof json,
		"{\"messages\": [{\"role\": \"user\", \"content\": \"Paris?\"}, {\"role\": "
		"\"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": "
		"\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
		"\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": "
		"\"call_1\", \"content\": \"sunny\"}], \"tools\": %s}",
		tools);
	char why[200];
	cJSON *req = api_json_parse(json, strlen(json), why, sizeof why);
	cr_assert_not_null(req, "%s", why);
	struct lm_buf text = {0};
	struct api_error err = {0};
	cr_assert_eq(api_chat_prompt(req, &l, true, &text, &err), 0, "%s", err.message);
	cr_expect_str_eq(text.p, "<tool:get_weather><tool:get_time>[user:Paris?][assistant:"
				 "(call_1 get_weather Paris {\"city\": \"Paris\"})][tool:sunny for "
				 "call_1]<tool_call><think>");
	cJSON_Delete(req);
	lm_buf_fini(&text);

	/* The parsed request: its tools, choice, and the prompt left reasoning open. */
	struct api_request r;
	static const struct {
		const char *extra;
		enum api_tool_choice choice;
		bool parallel, calls;
	} ok[] = {
		{"", API_TOOLS_AUTO, true, true},
		{", \"tool_choice\": \"none\"", API_TOOLS_NONE, true, false},
		{", \"tool_choice\": \"required\", \"parallel_tool_calls\": false",
		 API_TOOLS_REQUIRED, false, true},
		{", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
		 "\"get_time\"}}",
		 API_TOOLS_NAMED, true, true},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		snprintf(json, sizeof json,
			 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": "
			 "%s%s}",
			 tools, ok[i].extra);
		cr_assert_eq(chat_parse(&l, vocab, json, &r, &err), 0, "%s: %s", json, err.message);
		cr_expect_eq(r.n_tools, 2);
		cr_expect_str_eq(r.tool_names[1], "get_time");
		cr_expect_eq(r.tool_choice, ok[i].choice, "%s", json);
		cr_expect_eq(r.parallel_tool_calls, ok[i].parallel, "%s", json);
		cr_expect(r.parse_output && r.syntax.fmt == TOOL_FMT_HERMES &&
			  r.syntax.think_open_at_start);
		struct tool_want w = api_tool_want(&r);
		cr_expect_eq(w.calls, ok[i].calls, "%s", json);
		cr_expect_eq(w.n_names, ok[i].choice == API_TOOLS_NAMED ? 1 : 2);
		/* required and named get the grammar of their calls; the others none. */
		struct lm_buf g = {0};
		cr_expect_eq(api_tool_grammar(&r, NULL, &g, &d), 0, "%s", d.msg);
		bool constrained =
			ok[i].choice == API_TOOLS_REQUIRED || ok[i].choice == API_TOOLS_NAMED;
		cr_expect_eq(g.len > 0, constrained, "%s", json);
		if (ok[i].choice == API_TOOLS_NAMED)
			cr_expect(strstr(g.p, "tool-name ::= \"get_time\"\n") != NULL, "%s", g.p);
		if (ok[i].choice == API_TOOLS_REQUIRED)
			/* The prompt left <think> open: reasoning first, then one call. */
			cr_expect(strncmp(g.p, "root ::= think call\n", 20) == 0 &&
					  strstr(g.p, "\nthink ::= think-body ws\n") != NULL,
				  "%s", g.p);
		lm_buf_fini(&g);
		api_request_fini(&r);
	}

	const enum lm_http_refusal bad = LM_HTTP_REFUSE_INVALID;
	static const struct {
		const char *fields, *param, *msg;
	} refused[] = {
		{"\"tools\": {}", "tools", "'tools' must be an array of at most 128 tools"},
		{"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]",
		 "tools",
		 "'tools[0].function.name' must be 1 to 64 letters, digits, '_', '-' or '.'"},
		{"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
		 "\"parameters\": []}}]",
		 "tools", "'tools[0].function.parameters' must be an object (a JSON schema)"},
		{"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, "
		 "{\"type\": "
		 "\"function\", \"function\": {\"name\": \"f\"}}]",
		 "tools", "'tools' has the function 'f' twice"},
		{"\"tool_choice\": \"always\"", "tool_choice",
		 "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
		 "\"function\", \"function\": {\"name\": ...}}"},
		{"\"tool_choice\": \"required\"", "tool_choice",
		 "'tool_choice' \"required\" needs 'tools'"},
		{"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
		 "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}",
		 "tool_choice",
		 "'tool_choice' names the function 'g', which 'tools' does not have"},
		{"\"parallel_tool_calls\": 1", "parallel_tool_calls",
		 "'parallel_tool_calls' must be true or false"},
	};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		snprintf(json, sizeof json,
			 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], %s}",
			 refused[i].fields);
		chat_refused(&l, json, refused[i].param, refused[i].msg, bad);
	}
	static const struct {
		const char *message, *param, *msg;
	} bad_history[] = {
		{"{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\", \"type\": "
		 "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{oops\"}}]}",
		 "messages[0].tool_calls[0]",
		 "'messages[0].tool_calls[0].function.arguments' must be a JSON object (as text)"},
		{"{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": [{\"function\": "
		 "{\"name\": \"f\", \"arguments\": \"{}\"}}]}",
		 "messages[0].tool_calls",
		 "'messages[0].tool_calls' is only for an assistant's message"},
		{"{\"role\": \"user\", \"content\": \"x\", \"tool_call_id\": \"c\"}",
		 "messages[0].tool_call_id",
		 "'messages[0].tool_call_id' is not supported (only on a tool message)"},
		{"{\"role\": \"tool\", \"content\": \"x\", \"tool_call_id\": 5}",
		 "messages[0].tool_call_id", "'messages[0].tool_call_id' must be a string"},
		{"{\"role\": \"function\", \"content\": \"x\"}", "messages[0].role",
		 "role 'function' is not supported (the deprecated function-calling API: use role "
		 "\"tool\")"},
	};
	for (size_t i = 0; i < sizeof bad_history / sizeof bad_history[0]; i++) {
		snprintf(json, sizeof json, "{\"messages\": [%s]}", bad_history[i].message);
		chat_refused(&l, json, bad_history[i].param, bad_history[i].msg, bad);
	}
	/* A format mesh.toml names renders no tools. */
	const struct api_limits fmt = {.max_seq = 512, .chat = CHAT_CHATML};
	snprintf(json, sizeof json,
		 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s}",
		 tools);
	chat_refused(&fmt, json, "tools",
		     "'tools' needs the model's own chat template (mesh.toml names the format "
		     "chatml, which renders no tools)",
		     bad);
	jinja_free(t);
}

/* Whether r's grammar admits text. */
static bool grammar_admits(const struct api_request *r, const char *text)
{
	struct gbnf *g = NULL;
	lm_diag d = {{0}};
	cr_assert_not_null(r->grammar);
	cr_assert_eq(gbnf_compile(r->grammar, strlen(r->grammar), &g, &d), 0, "%s", d.msg);
	bool ok = gbnf_matches(g, text, strlen(text));
	gbnf_free(g);
	return ok;
}

/* tool_choice "required" or a named function holds the output to the template's call syntax,
 * each function's arguments to its parameters where the schema can be enforced (else any
 * object); "auto" leaves the output free. A forcing choice with a grammar of the request's
 * own, or with a template that has no call syntax, is refused. */
Test(api_request, a_forcing_tool_choice_holds_the_output_to_the_call_syntax)
{
	const char *src = "{% for m in messages %}{{ m.content }}{% endfor %}"
			  "{% if tools %}<tool_call></tool_call>{% endif %}";
	lm_diag d = {{0}};
	jinja_tmpl *t = jinja_parse(src, strlen(src), &d);
	cr_assert_not_null(t, "%s", d.msg);
	struct api_limits l = {.max_seq = 512, .jinja = t, .bos_text = "", .eos_text = ""};
	l.tools = tool_syntax_detect(src, strlen(src));
	cr_assert_eq(l.tools.fmt, TOOL_FMT_HERMES);
	const char *tools =
		"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
		"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
		"\"string\", \"maxLength\": 8}}, \"required\": [\"city\"], "
		"\"additionalProperties\": false}}}, {\"type\": \"function\", \"function\": "
		"{\"name\": \"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": "
		"{\"tz\": {\"type\": \"string\", \"pattern\": \"^[A-Z]\"}}}}}]";
	const char *weather = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
			      "\"Paris\"}}</tool_call>";
	const char *town = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"town\": "
			   "\"Paris\"}}</tool_call>";
	const char *long_city = "<tool_call>{\"name\": \"get_weather\", \"arguments\": "
				"{\"city\": \"Paris, France\"}}</tool_call>";
	const char *time = "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"anything\": "
			   "[1, 2]}}</tool_call>";
	char json[2048];
	struct api_request r;
	struct api_error err;
	snprintf(json, sizeof json,
		 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s, "
		 "\"tool_choice\": \"required\"}",
		 tools);
	cr_assert_eq(chat_parse(&l, vocab, json, &r, &err), 0, "%s", err.message);
	cr_expect(grammar_admits(&r, weather), "%s", r.grammar);
	cr_expect(grammar_admits(&r, time), "%s", r.grammar);
	cr_expect(grammar_admits(&r, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}"
				     "</tool_call>\n<tool_call>{\"name\": \"get_time\", "
				     "\"arguments\": {}}</tool_call>"),
		  "parallel calls: %s", r.grammar);
	cr_expect(!grammar_admits(&r, town), "the schema's required key");
	cr_expect(!grammar_admits(&r, long_city), "the schema's maxLength");
	cr_expect(!grammar_admits(&r, "It is sunny."), "text instead of a call");
	api_request_fini(&r);

	snprintf(json, sizeof json,
		 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s, "
		 "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
		 "\"get_weather\"}}, \"parallel_tool_calls\": false}",
		 tools);
	cr_assert_eq(chat_parse(&l, vocab, json, &r, &err), 0, "%s", err.message);
	cr_expect(grammar_admits(&r, weather), "%s", r.grammar);
	cr_expect(!grammar_admits(&r, time), "a function not named");
	api_request_fini(&r);

	/* auto constrains nothing of its own; a response_format beside it is the request's. */
	snprintf(json, sizeof json,
		 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s, "
		 "\"tool_choice\": \"auto\"}",
		 tools);
	cr_assert_eq(chat_parse(&l, vocab, json, &r, &err), 0, "%s", err.message);
	cr_expect_null(r.grammar);
	api_request_fini(&r);

	const enum lm_http_refusal bad = LM_HTTP_REFUSE_INVALID;
	static const char *const own[] = {"\"response_format\": {\"type\": \"json_object\"}",
					  "\"grammar\": \"root ::= \\\"a\\\"\"",
					  "\"json_schema\": {\"type\": \"string\"}"};
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
		snprintf(json, sizeof json,
			 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": "
			 "%s, \"tool_choice\": \"required\", %s}",
			 tools, own[i]);
		chat_refused(&l, json, "tool_choice",
			     "a 'tool_choice' that forces a call (\"required\" or a named "
			     "function) cannot be combined with 'response_format', 'json_schema' "
			     "or 'grammar'",
			     bad);
	}
	/* A template whose calls this server cannot parse cannot be held to them. */
	const char *plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
	jinja_tmpl *p = jinja_parse(plain, strlen(plain), &d);
	cr_assert_not_null(p, "%s", d.msg);
	struct api_limits lp = {.max_seq = 512, .jinja = p, .bos_text = "", .eos_text = ""};
	lp.tools = tool_syntax_detect(plain, strlen(plain));
	snprintf(json, sizeof json,
		 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s, "
		 "\"tool_choice\": \"required\"}",
		 tools);
	chat_refused(&lp, json, "tool_choice",
		     "'tool_choice' cannot force a call: the none format has no tool-call syntax",
		     bad);
	jinja_free(p);
	jinja_free(t);
}

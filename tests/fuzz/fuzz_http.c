/* fuzz_http.c — libFuzzer target for the HTTP API's request handling: any bytes as a
 * /v1/completions body through api_request_parse (coordinator/api/api_request.h), and, for an
 * accepted request, its stop strings over the text of its own prompt ids as if the model had
 * generated them (tok_stream_push, then api_stop_cut, as api_call.c drives them); the same
 * bytes as a /v1/chat/completions body (api_chat_parse, in a chat format picked by the input's
 * length, so every formatter is reached); and as an HTTP request head and a chunked body
 * (common/wire/http_parse.h), whole and in two pieces; and as llama-server's /completion body
 * (api_native_body, coordinator/api/api_native.h), whose translation must be strict JSON that
 * api_request_parse takes or refuses as it does any body.
 *
 * The vocabulary is the tiny SentencePiece one of tests/support/gguf_samples.h (byte tokens,
 * multi-byte characters, a user-defined token), or the GGUF file LM_FUZZ_VOCAB names. The
 * context is FUZZ_MAX_SEQ tokens, small enough that long prompts are reachable.
 *
 * It traps when a promise is broken:
 *   - a refusal with a code other than LM_EINVAL (400) / LM_ENOMEM (500), without a type or
 *     message, with the request not zeroed, or whose error document does not parse back;
 *   - an accepted request with an empty prompt or one that fills the context, an id outside
 *     the vocabulary, max_tokens < 0 or past the context, sampling that lm_sampling_check
 *     refuses, logprobs or stops out of their bounds;
 *   - streamed text that differs from the decoded text cut at the earliest stop string of the
 *     first step where one appears (or all of it, when none does), that holds back more than
 *     the longest stop string less one byte, or that is not valid UTF-8.
 *
 * Seeds: tests/fuzz/corpus/http; dictionary: tests/fuzz/http.dict.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/http_parse.h"
#include "common/wire/httpd.h"
#include "common/model/sampling.h"
#include "coordinator/api/api_json.h"
#include "coordinator/api/api_native.h"
#include "coordinator/api/api_request.h"
#include "tests/support/gguf_samples.h"

#define CHECK(cond)                       \
	do {                              \
		if (!(cond))              \
			__builtin_trap(); \
	} while (0)

#define FUZZ_MAX_SEQ 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tok_vocab *vocab;

/* Loads the vocabulary once; a setup failure traps (it is not the input's fault, but a run
 * without a vocabulary would test nothing). */
static void load_vocab(void)
{
	static uint8_t *img;
	size_t len = 0;
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	const char *path = getenv("LM_FUZZ_VOCAB");
	if (path != NULL && path[0] != '\0')
		CHECK(gguf_open(path, &f, &d) == 0);
	else
		CHECK(gs_make(GS_LLAMA, &img, &len, &d) == 0 &&
		      gguf_open_mem(img, len, &f, &d) == 0);
	CHECK(tok_load(f, &vocab, &d) == 0);
	gguf_close(f); /* the vocabulary owns its memory; img stays for the process */
}

/* Strict UTF-8 (no overlong forms, surrogates or values past U+10FFFF). */
static bool valid_utf8(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t b = s[i];
		size_t k = b < 0x80                 ? 1
			   : b >= 0xc2 && b <= 0xdf ? 2
			   : b >= 0xe0 && b <= 0xef ? 3
			   : b >= 0xf0 && b <= 0xf4 ? 4
						    : 0;
		if (k == 0 || n - i < k)
			return false;
		uint32_t cp = k == 1 ? b : k == 2 ? b & 0x1fu : k == 3 ? b & 0x0fu : b & 0x07u;
		for (size_t j = 1; j < k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + j] & 0x3fu);
		}
		static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k;
	}
	return true;
}

/* Where the earliest stop string starts in t[0..n), or n. */
static size_t earliest_stop(const struct api_request *r, const char *t, size_t n)
{
	size_t best = n;
	for (int i = 0; i < r->n_stops; i++) {
		size_t m = strlen(r->stops[i]);
		for (size_t at = 0; at + m <= n && at < best; at++)
			if (memcmp(t + at, r->stops[i], m) == 0)
				best = at;
	}
	return best;
}

/* The prompt ids as generated tokens: decoded, held back and cut as api.c does. */
static void check_stream(const struct api_request *r)
{
	size_t cap = tok_stream_cap(vocab);
	size_t total = ((size_t)r->n_prompt + 1) * cap;
	char *piece = malloc(cap), *full = malloc(total), *pend = malloc(total),
	     *emit = malloc(total);
	CHECK(piece && full && pend && emit);
	size_t nf = 0, np = 0, ne = 0;
	struct tok_stream ts;
	tok_stream_init(&ts);
	bool hit = false;
	for (int32_t i = 0; i <= r->n_prompt && !hit; i++) {
		bool final = i == r->n_prompt;
		size_t got = 0;
		if (final)
			got = tok_stream_flush(&ts, piece, cap);
		else
			CHECK(tok_stream_push(vocab, &ts, r->prompt[i], piece, cap, &got) == 0);
		CHECK(got <= cap);
		memcpy(full + nf, piece, got);
		nf += got;
		memcpy(pend + np, piece, got);
		np += got;

		size_t cut = api_stop_cut(r, pend, np, final, &hit);
		CHECK(cut <= np);
		memcpy(emit + ne, pend, cut);
		ne += cut;
		memmove(pend, pend + cut, np - cut);
		np -= cut;

		/* The decoder's text is always valid UTF-8, and so is what goes out. */
		CHECK(valid_utf8((const uint8_t *)full, nf));
		CHECK(valid_utf8((const uint8_t *)emit, ne));
		size_t first = earliest_stop(r, full, nf);
		CHECK(hit == (first < nf));
		if (hit) {
			CHECK(ne == first && memcmp(emit, full, ne) == 0);
			break;
		}
		/* Nothing lost: what went out and what waits make up the text. */
		CHECK(ne + np == nf && memcmp(emit, full, ne) == 0 &&
		      memcmp(pend, full + ne, np) == 0);
		CHECK(final ? np == 0 : np + 1 <= (r->max_stop > 0 ? r->max_stop : 1));
	}
	free(piece);
	free(full);
	free(pend);
	free(emit);
}

static void check_accepted(const struct api_request *r, const struct api_limits *lim)
{
	CHECK(r->n_prompt >= 1 && r->n_prompt < lim->max_seq && r->prompt != NULL);
	for (int32_t i = 0; i < r->n_prompt; i++)
		CHECK(r->prompt[i] >= 0 && r->prompt[i] < tok_n_vocab(vocab));
	CHECK(r->max_tokens >= 0 && (int64_t)r->n_prompt + r->max_tokens <= lim->max_seq);
	CHECK(lm_sampling_check(&r->sampling, NULL) == 0);
	CHECK(r->n_logprobs >= 0 && r->n_logprobs <= API_MAX_LOGPROBS);
	CHECK(r->n_stops >= 0 && r->n_stops <= API_MAX_STOPS);
	size_t longest = 0;
	for (int i = 0; i < r->n_stops; i++) {
		size_t n = strlen(r->stops[i]);
		CHECK(n >= 1 && n <= API_MAX_STOP_LEN);
		if (n > longest)
			longest = n;
	}
	CHECK(r->max_stop == longest);
	check_stream(r);
}

static void check_refused(int rc, const struct api_request *r, const struct api_error *err)
{
	CHECK((rc == LM_EINVAL && err->status == 400 &&
	       strcmp(err->type, "invalid_request_error") == 0) ||
	      (rc == LM_ENOMEM && err->status == 500 && strcmp(err->type, "server_error") == 0));
	CHECK(err->message[0] != '\0');
	CHECK(r->prompt == NULL && r->n_prompt == 0 && r->n_stops == 0);
	/* The reply's error document parses back to the same message and param. */
	char *s = lm_httpd_error_json(err->type, err->param, err->message);
	CHECK(s != NULL);
	cJSON *o = cJSON_Parse(s);
	CHECK(o != NULL);
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
	const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
	CHECK(msg != NULL && strcmp(msg, err->message) == 0);
	const cJSON *param = cJSON_GetObjectItemCaseSensitive(e, "param");
	if (err->param == NULL)
		CHECK(cJSON_IsNull(param));
	else
		CHECK(cJSON_IsString(param) && strcmp(param->valuestring, err->param) == 0);
	cJSON_Delete(o);
	free(s);
}

/* A chat body: accepted within the context with the template's stop ids in the vocabulary, or
 * refused as a completion is. */
static void check_chat(const uint8_t *data, size_t size)
{
	const struct api_limits lim = {
		.max_seq = FUZZ_MAX_SEQ,
		.max_token_bytes = 8,
		.chat = (enum chat_format)(1 + size % (CHAT_FORMAT_COUNT - 1)),
		.bos_text = "<s>",
		.eos_text = "</s>"};
	struct api_request r;
	struct api_error err;
	int rc = api_chat_parse((const char *)data, size, &lim, vocab, &r, &err);
	if (rc == 0) {
		CHECK(r.kind == API_CHAT && r.n_prompt >= 1 && r.n_prompt < lim.max_seq);
		CHECK(r.max_tokens >= 0 && r.n_prompt + r.max_tokens <= lim.max_seq);
		CHECK(r.n_stop_ids >= 0 && r.n_stop_ids <= API_MAX_TEMPLATE_STOPS);
		for (int32_t i = 0; i < r.n_stop_ids; i++)
			CHECK(r.stop_ids[i] >= 0 && r.stop_ids[i] < tok_n_vocab(vocab));
		for (int32_t i = 0; i < r.n_bias; i++)
			CHECK(r.bias[i].id >= 0 && r.bias[i].id < tok_n_vocab(vocab));
	} else {
		check_refused(rc, &r, &err);
	}
	api_request_fini(&r);
	api_error_fini(&err);
}

/* The bytes as a request head and as a chunked body: whatever comes back stays within the
 * input, a refusal has a status and a reason, and feeding a body in two pieces decodes what
 * feeding it whole does. */
static void check_http(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *body = malloc(size + 1), *two = malloc(size + 1);
	CHECK(buf && body && two);
	memcpy(buf, data, size);
	struct lm_http_head h;
	struct lm_http_perr e;
	int rc = lm_http_parse_head(buf, size, 4096, &h, &e);
	CHECK(rc >= -1 && rc <= 1);
	if (rc == 1)
		CHECK(h.head_len <= size && h.head_len <= 4096 && h.method && h.path &&
		      h.path[0] == '/' && h.n_fields <= LM_HTTP_MAX_HEADERS);
	if (rc < 0)
		CHECK(e.status >= 400 && e.status <= 505 && e.msg[0] != '\0');
	memcpy(body, data, size);
	struct lm_http_chunked whole = {0};
	int rw = lm_http_chunked_feed(&whole, body, size, 1024, &e);
	CHECK(rw >= -1 && rw <= 1 && whole.out <= whole.in && whole.in <= size);
	memcpy(two, data, size);
	struct lm_http_chunked half = {0};
	int rh = lm_http_chunked_feed(&half, two, size / 2, 1024, &e);
	if (rh == 0)
		rh = lm_http_chunked_feed(&half, two, size, 1024, &e);
	CHECK(rh >= -1 && rh <= 1);
	if (rw == 1 && rh == 1)
		CHECK(half.in == whole.in && half.out == whole.out &&
		      memcmp(two, body, whole.out) == 0);
	free(buf);
	free(body);
	free(two);
}

/* A /completion body: refused as a completion is (nothing to free), or translated into an
 * object of strict JSON, which is then parsed and held to the same promises. */
static void check_native(const uint8_t *data, size_t size, const struct api_limits *lim)
{
	struct api_native nat;
	struct api_request r = {0};
	struct api_error err;
	char *out = NULL;
	int rc = api_native_body((const char *)data, size, lim->max_seq, vocab, &out, &nat, &err);
	if (rc != 0) {
		CHECK(out == NULL && nat.response_fields == NULL);
		check_refused(rc, &r, &err);
		api_error_fini(&err);
		return;
	}
	CHECK(out != NULL && nat.n_probs >= 0 && nat.n_probs <= API_MAX_LOGPROBS &&
	      nat.n_predict >= -1);
	char why[200];
	cJSON *o = api_json_parse(out, strlen(out), why, sizeof why);
	CHECK(cJSON_IsObject(o));
	cJSON_Delete(o);
	rc = api_request_parse(out, strlen(out), lim, vocab, &r, &err);
	if (rc == 0)
		check_accepted(&r, lim);
	else
		check_refused(rc, &r, &err);
	api_request_fini(&r);
	api_error_fini(&err);
	api_native_fini(&nat);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (vocab == NULL)
		load_vocab();
	const struct api_limits lim = {.max_seq = FUZZ_MAX_SEQ};
	struct api_request r;
	struct api_error err;
	int rc = api_request_parse((const char *)data, size, &lim, vocab, &r, &err);
	if (rc == 0)
		check_accepted(&r, &lim);
	else
		check_refused(rc, &r, &err);
	api_request_fini(&r);
	api_error_fini(&err);
	check_chat(data, size);
	check_http(data, size);
	check_native(data, size, &lim);
	return 0;
}

/* fuzz_gbnf — libFuzzer target: grammars and JSON schemas from any bytes. The input up to its
 * first NUL is a JSON schema when it parses as JSON, else GBNF text; what follows the NUL is a
 * text to match. Every failure must say why; a schema the converter accepts must give a grammar
 * that compiles; matching and masks over a small vocabulary must stay in bounds and agree with
 * each other (a token is in the mask exactly when it may follow, one token at a time). */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "coordinator/api/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fz_pieces[] = {"{",    "}",        "\"", "a",    "ab",   " ",
					"1",    "12",       ",",  ":",    "true", "\xce",
					"\xb1", "\xce\xb1", "\\", "null", "[",    "]"};
#define FZ_N ((int32_t)(sizeof fz_pieces / sizeof fz_pieces[0]))

static const char *fz_piece(void *ctx, int32_t id, size_t *len)
{
	(void)ctx;
	*len = strlen(fz_pieces[id]);
	return fz_pieces[id];
}

/* How much of the text is matched whole, and at how many of its first positions the masks
 * are checked (a mask and every token: some 40 steps). A step costs at most GBNF_MAX_WORK
 * words, about 2 ms under ASan, so an input stays well inside libFuzzer's 10 s. */
#define FZ_MAX_TEXT  1024
#define FZ_MAX_MASKS 32

static void fz_match(const struct gbnf *g, const char *text, size_t n)
{
	(void)gbnf_matches(g, text, n < FZ_MAX_TEXT ? n : FZ_MAX_TEXT);
	struct gbnf_vocab *v = NULL;
	struct gbnf_masker *m = NULL;
	struct gbnf_state s;
	if (gbnf_vocab_build(FZ_N, fz_piece, NULL, &v, NULL) != 0)
		return;
	if (gbnf_masker_new(g, v, &m) == 0 && gbnf_state_init(g, &s, NULL) == 0) {
		uint32_t bits[1];
		for (size_t i = 0; i <= n && i < FZ_MAX_MASKS; i++) {
			int32_t k = gbnf_masker_mask(m, &s, bits);
			for (int32_t t = 0; k >= 0 && t < FZ_N; t++)
				if (((bits[0] >> t) & 1) != gbnf_token_ok(g, v, &s, t))
					abort();
			if (i == n || gbnf_accept(g, &s, text + i, 1, NULL) != 0)
				break;
		}
		gbnf_state_fini(&s);
	}
	gbnf_masker_free(m);
	gbnf_vocab_free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t head = nul != NULL ? (size_t)(nul - data) : size;
	char *text = malloc(head ? head : 1); /* exact size: a read past it is caught */
	if (text == NULL)
		return 0;
	memcpy(text, data, head);
	lm_diag d = {{0}};
	struct gbnf *g = NULL;
	cJSON *schema = cJSON_ParseWithLength(text, head);
	if (schema != NULL) {
		struct lm_buf b = {0};
		int rc = json_schema_gbnf(schema, &b, &d);
		if (rc != 0 && d.msg[0] == '\0')
			abort();
		if (rc == 0 && gbnf_compile(b.p, b.len, &g, &d) != 0)
			abort(); /* the converter's grammars always compile */
		lm_buf_fini(&b);
		cJSON_Delete(schema);
	} else if (gbnf_compile(text, head, &g, &d) != 0 && d.msg[0] == '\0') {
		abort();
	}
	if (g != NULL && nul != NULL)
		fz_match(g, (const char *)nul + 1, size - head - 1);
	gbnf_free(g);
	free(text);
	return 0;
}

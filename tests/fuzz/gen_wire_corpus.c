/* gen_wire_corpus.c — the seed corpus of fuzz_wire: one valid message of every wire type and
 * form (tests/support/wire_samples.h), one file each, named after the sample; forward_adj, a
 * FORWARD whose sequences carry logit adjustments ("adj"); and forward_gr, one whose sequences
 * carry grammars ("gr").
 *
 *     gen_wire_corpus DIR          writes DIR/<sample> for every sample
 *     gen_wire_corpus --check DIR  checks that DIR/<sample> holds exactly those bytes and that
 *                                  each decodes (meson test runs this on the committed corpus)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/wire.h"
#include "tests/support/corpus_file.h"
#include "tests/support/wire_samples.h"

#define STALE                                                                                 \
	"the encoding changed (bump WIRE_VERSION if it is a protocol change) and the corpus " \
	"needs regenerating"

/* FORWARD f encoded, decoded under ws_limits, and written to (or checked against) DIR/name. */
static int forward_file(bool check, const char *dir, const char *name, const struct wire_forward *f,
			struct wire_buf *b, struct wire_scratch *s)
{
	struct wire_forward g;
	lm_diag d = {{0}};
	wire_buf_reset(b);
	if (wire_encode_forward(b, f) != 0 ||
	    wire_decode_forward(b->data, b->len, &ws_limits, s, &g, &d) != 0) {
		fprintf(stderr, "gen_wire_corpus: %s: %s\n", name, d.msg);
		return 1;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return corpus_file("gen_wire_corpus", check, path, b->data, b->len, STALE);
}

/* The I32 sample's batch with a window and biases on two of its sequences. */
static int forward_adj(bool check, const char *dir, struct wire_buf *b, struct wire_scratch *s)
{
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	static const int32_t hist[4] = {5, 999, 5, 0};
	static const struct lm_logit_bias bias[2] = {{0, -100.0f}, {999, 100.0f}};
	const struct lm_logit_adjust a[2] = {
		{.presence = 2.0f,
		 .frequency = -2.0f,
		 .repeat = 10.0f,
		 .hist = hist,
		 .n_hist = 4,
		 .bias = bias,
		 .n_bias = 2},
		{.repeat = 0.5f, .bias = bias + 1, .n_bias = 1},
	};
	struct wire_seq q[3];
	ws_seqs(q);
	q[1].adjust = &a[0];
	q[2].adjust = &a[1];
	struct wire_forward f = {.batch_id = 77,
				 .fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	return forward_file(check, dir, "forward_adj", &f, b, s);
}

/* The I32 sample's batch with grammars on its two sampling sequences: one continues the
 * matcher the last stage holds, the other (at step 3) sends its text and generated ids. */
static int forward_gr(bool check, const char *dir, struct wire_buf *b, struct wire_scratch *s)
{
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	static const int32_t gen[3] = {0, 999, 123};
	static const char text[] = "root ::= \"{\" [a-z]* \"}\" | item+\nitem ::= [0-9]";
	const struct wire_grammar gr[2] = {
		{0}, {.text = text, .len = sizeof text - 1, .ids = gen, .n_ids = 3}};
	struct wire_seq q[3];
	ws_seqs(q);
	q[1].grammar = &gr[0];
	q[2].grammar = &gr[1];
	q[2].step = 3;
	struct wire_forward f = {.batch_id = 78,
				 .fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	return forward_file(check, dir, "forward_gr", &f, b, s);
}

int main(int argc, char **argv)
{
	bool check = argc == 3 && strcmp(argv[1], "--check") == 0;
	if (argc != 2 && !check) {
		fprintf(stderr, "usage: gen_wire_corpus [--check] DIR\n");
		return 2;
	}
	const char *dir = argv[argc - 1];
	struct wire_buf b = {0};
	struct wire_scratch s;
	int failed = 0;
	if (wire_scratch_init_rows(&s, WS_SCRATCH, WS_SCRATCH_ROWS) != 0)
		return 1;
	for (int k = 0; k < WS_COUNT; k++) {
		char path[4096];
		lm_diag d = {{0}};
		wire_buf_reset(&b);
		if (ws_make(k, &b) != 0 || ws_decode(k, b.data, b.len, &s, &d) != 0) {
			fprintf(stderr, "gen_wire_corpus: sample %s: %s\n", ws_names[k], d.msg);
			failed = 1;
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dir, ws_names[k]);
		failed |= corpus_file("gen_wire_corpus", check, path, b.data, b.len, STALE);
	}
	failed |= forward_adj(check, dir, &b, &s);
	failed |= forward_gr(check, dir, &b, &s);
	wire_buf_fini(&b);
	wire_scratch_fini(&s);
	if (!failed)
		printf("%s %d samples in %s\n", check ? "checked" : "wrote", WS_COUNT + 2, dir);
	return failed;
}

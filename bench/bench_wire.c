/* bench_wire.c — the cost of encoding and decoding protocol headers.
 *
 * A 16-sequence FORWARD of f16 hidden states (the header only is encoded: the rows are written
 * in place by the caller; decoding checks the payload's length, not its bytes), a 16-token
 * TOKENS and a RELEASE, each encoded into a reused buffer and decoded with reused scratch. For
 * reference, msgpack-c's msgpack_unpack_next on the same FORWARD header (which builds an object
 * tree in a zone and checks nothing).
 *
 * The machines this runs on are shared and often loaded, so the cases are interleaved in short
 * batches and each case reports the fastest batch (the best estimate of the uncontended cost)
 * and the median batch, in ns per message.
 *
 *     bench_wire [batches, default 2000]
 */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/wire/wire.h"

#define BATCH 100 /* messages per timed batch */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static const struct wire_limits lim = {
	.fingerprint = 0x0123456789abcdefull,
	.slots = 64,
	.max_seq = 4096,
	.dim = 4096,
	.n_vocab = 32000,
	.max_batch = 512,
	.max_seqs = 64,
	.max_logprobs = 20,
};

/* Prevents the compiler from dropping a loop whose results are unused. */
static volatile uint64_t sink;

/* One straight line, past the ~150-line guide: build the messages, time each case, print. Split,
 * it would pass a dozen locals around to no reader's benefit. */
int main(int argc, char **argv)
{
	long batches = argc > 1 ? atol(argv[1]) : 2000;
	if (batches < 1)
		batches = 1;
	struct wire_seq seqs[16];
	for (int i = 0; i < 16; i++) {
		seqs[i] = (struct wire_seq){
			.seq_id = 1000000 + (uint64_t)i,
			.slot = i,
			.pos = 100 + 37 * i,
			.n_tokens = i == 0 ? 17 : 1, /* one prefill chunk, 15 decoding sequences */
			.sample = i != 0,
			.step = 50 + (uint64_t)i,
			.n_logprobs = i % 3,
			.sampling = LM_SAMPLING_DEFAULT,
		};
		seqs[i].sampling.seed = 0xabcdef0123ull * (uint64_t)(i + 1);
	}
	const int32_t n = 32, dim = 4096;
	struct wire_forward f = {.batch_id = 123456789,
				 .fingerprint = lim.fingerprint,
				 .n_seqs = 16,
				 .seqs = seqs,
				 .n_tokens = n,
				 .dtype = WIRE_DT_F16,
				 .dim = dim,
				 .payload = NULL,
				 .payload_len = (size_t)n * (size_t)dim * 2};
	struct wire_token toks[16];
	for (int i = 0; i < 16; i++)
		toks[i] = (struct wire_token){.seq_id = 1000000 + (uint64_t)i,
					      .token = 31000 - i,
					      .logprob = -0.125f * (float)i,
					      .n_top = 0};
	struct wire_tokens tk = {
		.batch_id = 123456789, .fingerprint = lim.fingerprint, .n = 16, .toks = toks};
	int32_t slots[16];
	for (int i = 0; i < 16; i++)
		slots[i] = i;
	struct wire_release rl = {.id = 5, .fingerprint = lim.fingerprint, .n = 16, .slots = slots};

	struct wire_buf b = {0};
	struct wire_scratch s;
	if (wire_scratch_init(&s, 64) != 0)
		return 1;

	/* The full FORWARD message (header + rows) that the decoder reads. */
	if (wire_encode_forward(&b, &f) != 0)
		return 1;
	size_t header_len = b.len;
	size_t msg_len = header_len + f.payload_len;
	uint8_t *msg = calloc(1, msg_len);
	memcpy(msg, b.data, header_len);
	wire_buf_reset(&b);
	wire_encode_tokens(&b, &tk);
	size_t tok_len = b.len;
	uint8_t *tok_msg = malloc(tok_len);
	memcpy(tok_msg, b.data, tok_len);
	wire_buf_reset(&b);
	wire_encode_release(&b, &rl);
	size_t rel_len = b.len;
	uint8_t *rel_msg = malloc(rel_len);
	memcpy(rel_msg, b.data, rel_len);

	struct wire_forward g;
	struct wire_tokens tg;
	struct wire_release rg;
	lm_diag d;
	if (wire_decode_forward(msg, msg_len, &lim, &s, &g, &d) != 0 ||
	    wire_decode_tokens(tok_msg, tok_len, &lim, &s, &tg, &d) != 0 ||
	    wire_decode_release(rel_msg, rel_len, &lim, &s, &rg, &d) != 0) {
		fprintf(stderr, "bench_wire: %s\n", d.msg);
		return 1;
	}

	enum { ENC_FWD, DEC_FWD, ENC_TOK, DEC_TOK, ENC_REL, DEC_REL, PEEK, MSGPACK_C, N_CASES };
	static const char *const names[N_CASES] = {
		"encode FORWARD header (16 seqs)",
		"decode FORWARD (16 seqs)",
		"encode TOKENS (16 tokens)",
		"decode TOKENS (16 tokens)",
		"encode RELEASE (16 slots)",
		"decode RELEASE (16 slots)",
		"wire_peek FORWARD",
		"msgpack_unpack_next FORWARD header",
	};
	double *t[N_CASES];
	for (int c = 0; c < N_CASES; c++)
		t[c] = malloc((size_t)batches * sizeof *t[c]);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	for (long r = 0; r < batches; r++) {
		for (int c = 0; c < N_CASES; c++) {
			double t0 = (double)lm_now_ns();
			for (long i = 0; i < BATCH; i++) {
				switch (c) {
				case ENC_FWD:
					wire_buf_reset(&b);
					wire_encode_forward(&b, &f);
					sink += b.len;
					break;
				case DEC_FWD:
					sink += (uint64_t)wire_decode_forward(msg, msg_len, &lim,
									      &s, &g, &d);
					break;
				case ENC_TOK:
					wire_buf_reset(&b);
					wire_encode_tokens(&b, &tk);
					sink += b.len;
					break;
				case DEC_TOK:
					sink += (uint64_t)wire_decode_tokens(tok_msg, tok_len, &lim,
									     &s, &tg, &d);
					break;
				case ENC_REL:
					wire_buf_reset(&b);
					wire_encode_release(&b, &rl);
					sink += b.len;
					break;
				case DEC_REL:
					sink += (uint64_t)wire_decode_release(rel_msg, rel_len,
									      &lim, &s, &rg, &d);
					break;
				case PEEK: {
					struct wire_head h;
					sink += (uint64_t)wire_peek(msg, msg_len, &h, &d);
					break;
				}
				case MSGPACK_C: {
					size_t off = 0;
					sink += (uint64_t)msgpack_unpack_next(&u, (const char *)msg,
									      header_len, &off);
					break;
				}
				}
			}
			t[c][r] = ((double)lm_now_ns() - t0) / BATCH;
		}
	}
	printf("FORWARD header %zu bytes, TOKENS %zu, RELEASE %zu; %ld batches of %d\n", header_len,
	       tok_len, rel_len, batches, BATCH);
	printf("%-38s %9s %9s\n", "ns per message", "fastest", "median");
	for (int c = 0; c < N_CASES; c++) {
		qsort(t[c], (size_t)batches, sizeof t[c][0], cmp_double);
		printf("%-38s %9.1f %9.1f\n", names[c], t[c][0], t[c][batches / 2]);
		free(t[c]);
	}
	msgpack_unpacked_destroy(&u);
	free(msg);
	free(tok_msg);
	free(rel_msg);
	wire_scratch_fini(&s);
	wire_buf_fini(&b);
	return 0;
}

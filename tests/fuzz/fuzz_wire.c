/* fuzz_wire.c — libFuzzer target for the wire protocol decoders.
 *
 * Every decoder (and wire_peek) runs over the input with the fixed limits of the sample
 * messages (tests/support/wire_samples.h), once checking their fingerprint and once with the
 * check off, so that inputs with a mutated fingerprint still reach the field checks. Beyond
 * "no crash, no sanitizer report", it traps when:
 *   - a decoder returns a code other than 0, LM_EPROTO, LM_EVERSION, LM_EFINGERPRINT, or fails
 *     without a message;
 *   - an accepted message breaks a decoder's promise (counts within limits and scratch, rows
 *     covering [0, n), ids in the vocabulary, the payload inside the input and at its end);
 *   - re-encoding an accepted message and decoding that again does not give the same struct.
 *
 * Seeds: tests/fuzz/corpus/wire (gen_wire_corpus writes them). See tests/fuzz/meson.build.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/wire/wire.h"
#include "tests/support/wire_samples.h"

#define CHECK(cond)                       \
	do {                              \
		if (!(cond))              \
			__builtin_trap(); \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct wire_scratch s1, s2;
static struct wire_buf enc;

static void check_rc(int rc, const lm_diag *d)
{
	CHECK(rc == 0 || rc == LM_EPROTO || rc == LM_EVERSION || rc == LM_EFINGERPRINT);
	if (rc != 0)
		CHECK(d->msg[0] != '\0');
}

/* The payload of an accepted message is the tail of the input. */
static void check_payload(const uint8_t *data, size_t size, const void *p, size_t n)
{
	if (n == 0) {
		CHECK(p == NULL);
		return;
	}
	CHECK(n <= size && (const uint8_t *)p == data + size - n);
}

static bool same_f32(float a, float b)
{
	return memcmp(&a, &b, sizeof a) == 0;
}

/* A decoded sequence's grammar ("gr") as wire.h promises it, and b's the same after a round
 * trip. */
static void check_grammar(const struct wire_seq *a, const struct wire_seq *b,
			  const struct wire_limits *lim)
{
	const struct wire_grammar *x = a->grammar, *y = b->grammar;
	CHECK((x == NULL) == (y == NULL));
	if (x == NULL || y == NULL)
		return;
	CHECK(a->sample && x->len <= WIRE_MAX_GRAMMAR);
	CHECK(x->len == 0 ? x->n_ids == 0 : (uint64_t)x->n_ids == a->step);
	CHECK(x->len == 0 || memchr(x->text, '\0', x->len) == NULL);
	for (int32_t i = 0; i < x->n_ids; i++)
		CHECK(x->ids[i] >= 0 && x->ids[i] < lim->n_vocab);
	CHECK(y->len == x->len && y->n_ids == x->n_ids);
	CHECK(x->len == 0 || memcmp(x->text, y->text, x->len) == 0);
	CHECK(x->n_ids == 0 || memcmp(x->ids, y->ids, (size_t)x->n_ids * sizeof x->ids[0]) == 0);
}

static void check_forward(const uint8_t *data, size_t size, const struct wire_limits *lim)
{
	struct wire_forward f, g;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_decode_forward(data, size, lim, &s1, &f, &d);
	check_rc(rc, &d);
	if (rc != 0)
		return;
	CHECK(f.n_seqs >= 1 && f.n_seqs <= lim->max_seqs && f.n_seqs <= s1.cap);
	CHECK(f.n_tokens >= 1 && f.n_tokens <= lim->max_batch);
	int64_t rows = 0, drafted = 0;
	for (int32_t i = 0; i < f.n_seqs; i++) {
		const struct wire_seq *q = &f.seqs[i];
		CHECK(q->slot >= 0 && q->slot < lim->slots);
		CHECK(q->n_tokens >= 1 && q->pos >= 0 &&
		      (int64_t)q->pos + q->n_tokens <= lim->max_seq);
		CHECK(q->n_logprobs >= 0 && q->n_logprobs <= lim->max_logprobs);
		CHECK(lm_sampling_check(&q->sampling, NULL) == 0);
		CHECK(q->n_draft >= 0 && q->n_draft < q->n_tokens && q->n_draft <= lim->max_draft);
		CHECK(q->n_draft == 0 || q->sample);
		rows += q->n_tokens;
		drafted += q->n_draft;
	}
	CHECK(rows == f.n_tokens);
	CHECK(drafted == f.n_drafts && f.n_drafts <= s1.rows);
	for (int32_t i = 0; i < f.n_drafts; i++)
		CHECK(f.drafts[i] >= 0 && f.drafts[i] < lim->n_vocab);
	CHECK(f.payload_len == (size_t)f.n_tokens * (size_t)f.dim * wire_dtype_size(f.dtype));
	check_payload(data, size, f.payload, f.payload_len);
	if (f.dtype == WIRE_DT_I32) {
		for (int32_t r = 0; r < f.n_tokens; r++) {
			int32_t id;
			memcpy(&id, (const uint8_t *)f.payload + 4 * (size_t)r, 4);
			CHECK(id >= 0 && id < lim->n_vocab);
		}
	}
	/* decode(encode(f)) == f */
	wire_buf_reset(&enc);
	CHECK(wire_encode_forward(&enc, &f) == 0);
	CHECK(wire_decode_forward(enc.data, enc.len, lim, &s2, &g, NULL) == 0);
	CHECK(g.batch_id == f.batch_id && g.fingerprint == f.fingerprint);
	CHECK(g.n_seqs == f.n_seqs && g.n_tokens == f.n_tokens && g.dtype == f.dtype &&
	      g.dim == f.dim && g.payload_len == f.payload_len && g.n_drafts == f.n_drafts);
	CHECK(f.n_drafts == 0 ||
	      memcmp(g.drafts, f.drafts, (size_t)f.n_drafts * sizeof f.drafts[0]) == 0);
	CHECK(f.payload_len == 0 || memcmp(g.payload, f.payload, f.payload_len) == 0);
	for (int32_t i = 0; i < f.n_seqs; i++) {
		const struct wire_seq *a = &f.seqs[i], *b = &g.seqs[i];
		CHECK(a->seq_id == b->seq_id && a->slot == b->slot && a->pos == b->pos &&
		      a->n_tokens == b->n_tokens && a->sample == b->sample && a->step == b->step &&
		      a->n_logprobs == b->n_logprobs && a->n_draft == b->n_draft);
		CHECK(same_f32(a->sampling.temperature, b->sampling.temperature) &&
		      a->sampling.top_k == b->sampling.top_k &&
		      same_f32(a->sampling.top_p, b->sampling.top_p) &&
		      same_f32(a->sampling.min_p, b->sampling.min_p) &&
		      a->sampling.seed == b->sampling.seed);
		check_grammar(a, b, lim);
	}
}

static void check_tokens(const uint8_t *data, size_t size, const struct wire_limits *lim)
{
	struct wire_tokens t, g;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_decode_tokens(data, size, lim, &s1, &t, &d);
	check_rc(rc, &d);
	if (rc != 0)
		return;
	CHECK(t.n >= 0 && t.n <= lim->max_seqs && t.n <= s1.cap);
	size_t tops = 0;
	for (int32_t i = 0; i < t.n; i++) {
		CHECK(t.toks[i].token >= 0 && t.toks[i].token < lim->n_vocab);
		CHECK(t.toks[i].logprob <= 0);
		CHECK(t.toks[i].n_top >= 0 && t.toks[i].n_top <= lim->max_logprobs);
		tops += (size_t)t.toks[i].n_top;
	}
	CHECK(t.payload_len == 8 * tops);
	check_payload(data, size, t.payload, t.payload_len);
	wire_buf_reset(&enc);
	CHECK(wire_encode_tokens(&enc, &t) == 0);
	CHECK(wire_decode_tokens(enc.data, enc.len, lim, &s2, &g, NULL) == 0);
	CHECK(g.batch_id == t.batch_id && g.fingerprint == t.fingerprint && g.n == t.n &&
	      g.payload_len == t.payload_len);
	CHECK(t.payload_len == 0 || memcmp(g.payload, t.payload, t.payload_len) == 0);
	for (int32_t i = 0; i < t.n; i++)
		CHECK(g.toks[i].seq_id == t.toks[i].seq_id && g.toks[i].token == t.toks[i].token &&
		      same_f32(g.toks[i].logprob, t.toks[i].logprob) &&
		      g.toks[i].n_top == t.toks[i].n_top);
}

static void check_release(const uint8_t *data, size_t size, const struct wire_limits *lim)
{
	struct wire_release r, g;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_decode_release(data, size, lim, &s1, &r, &d);
	check_rc(rc, &d);
	if (rc != 0)
		return;
	CHECK(r.n >= 0 && r.n <= lim->slots && r.n <= s1.cap);
	for (int32_t i = 0; i < r.n; i++)
		CHECK(r.slots[i] >= 0 && r.slots[i] < lim->slots);
	wire_buf_reset(&enc);
	CHECK(wire_encode_release(&enc, &r) == 0);
	CHECK(wire_decode_release(enc.data, enc.len, lim, &s2, &g, NULL) == 0);
	CHECK(g.id == r.id && g.fingerprint == r.fingerprint && g.n == r.n);
	CHECK(r.n == 0 || memcmp(g.slots, r.slots, (size_t)r.n * sizeof r.slots[0]) == 0);
}

static void check_copy(const uint8_t *data, size_t size, const struct wire_limits *lim)
{
	struct wire_copy c, g;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_decode_copy(data, size, lim, &s1, &c, &d);
	check_rc(rc, &d);
	if (rc != 0)
		return;
	CHECK(c.n >= 1 && c.n <= lim->slots && c.n <= s1.cap);
	CHECK(c.src >= 0 && c.src < lim->slots && c.len >= 1 && c.len <= lim->max_seq);
	for (int32_t i = 0; i < c.n; i++)
		CHECK(c.dst[i] >= 0 && c.dst[i] < lim->slots);
	wire_buf_reset(&enc);
	CHECK(wire_encode_copy(&enc, &c) == 0);
	CHECK(wire_decode_copy(enc.data, enc.len, lim, &s2, &g, NULL) == 0);
	CHECK(g.id == c.id && g.fingerprint == c.fingerprint && g.n == c.n && g.src == c.src &&
	      g.len == c.len);
	CHECK(memcmp(g.dst, c.dst, (size_t)c.n * sizeof c.dst[0]) == 0);
}

static void check_hello(const uint8_t *data, size_t size)
{
	struct wire_hello h, g;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_decode_hello(data, size, &h, &d);
	check_rc(rc, &d);
	if (rc != 0)
		return;
	bool reply = h.pid != 0;
	CHECK(!h.has_slice || (h.begin >= 0 && h.begin <= h.end));
	wire_buf_reset(&enc);
	CHECK(wire_encode_hello(&enc, &h, reply) == 0);
	CHECK(wire_decode_hello(enc.data, enc.len, &g, NULL) == 0);
	CHECK(memcmp(&g, &h, sizeof g) == 0); /* both memset before decoding */
}

static void check_assign(const uint8_t *data, size_t size)
{
	static struct wire_assign a, g;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_decode_assign(data, size, &a, &d);
	check_rc(rc, &d);
	if (rc != 0)
		return;
	CHECK(a.model[0] != '\0' && a.next[0] != '\0');
	wire_buf_reset(&enc);
	CHECK(wire_encode_assign(&enc, &a) == 0);
	CHECK(wire_decode_assign(enc.data, enc.len, &g, NULL) == 0);
	CHECK(memcmp(&g, &a, sizeof g) == 0);
}

static void check_control(const uint8_t *data, size_t size, const struct wire_limits *lim)
{
	lm_diag d;
	int rc;

	struct wire_ready r, rg;
	d.msg[0] = '\0';
	rc = wire_decode_ready(data, size, &r, &d);
	check_rc(rc, &d);
	if (rc == 0) {
		wire_buf_reset(&enc);
		CHECK(wire_encode_ready(&enc, &r) == 0);
		CHECK(wire_decode_ready(enc.data, enc.len, &rg, NULL) == 0);
		CHECK(rg.id == r.id && rg.fingerprint == r.fingerprint &&
		      rg.kv_bytes == r.kv_bytes && rg.weight_bytes == r.weight_bytes &&
		      rg.rss_bytes == r.rss_bytes);
	}

	static struct wire_error e, eg;
	d.msg[0] = '\0';
	rc = wire_decode_error(data, size, &e, &d);
	check_rc(rc, &d);
	if (rc == 0) {
		CHECK(e.code < 0);
		wire_buf_reset(&enc);
		CHECK(wire_encode_error(&enc, &e) == 0);
		CHECK(wire_decode_error(enc.data, enc.len, &eg, NULL) == 0);
		CHECK(memcmp(&eg, &e, sizeof eg) == 0);
	}

	struct wire_kv k, kg;
	struct wire_head h;
	d.msg[0] = '\0';
	rc = wire_decode_kv(data, size, lim, &k, &d);
	check_rc(rc, &d);
	if (rc == 0) {
		CHECK(k.slot >= 0 && k.slot < lim->slots && k.len >= 0 && k.len <= lim->max_seq);
		CHECK(k.hi == 0 || (k.hi >= k.len && k.hi <= lim->max_seq));
		check_payload(data, size, k.payload, k.payload_len);
		CHECK(wire_peek(data, size, &h, NULL) == 0);
		wire_buf_reset(&enc);
		CHECK(wire_encode_kv(&enc, (enum wire_type)h.type, &k) == 0);
		CHECK(wire_decode_kv(enc.data, enc.len, lim, &kg, NULL) == 0);
		CHECK(kg.id == k.id && kg.fingerprint == k.fingerprint && kg.slot == k.slot &&
		      kg.len == k.len && kg.hi == k.hi && kg.payload_len == k.payload_len);
		CHECK(k.payload_len == 0 || memcmp(kg.payload, k.payload, k.payload_len) == 0);
	}

	static struct wire_repoint p, pg;
	d.msg[0] = '\0';
	rc = wire_decode_repoint(data, size, lim, &p, &d);
	check_rc(rc, &d);
	if (rc == 0) {
		wire_buf_reset(&enc);
		CHECK(wire_encode_repoint(&enc, &p) == 0);
		CHECK(wire_decode_repoint(enc.data, enc.len, lim, &pg, NULL) == 0);
		CHECK(memcmp(&pg, &p, sizeof pg) == 0);
	}

	d.msg[0] = '\0';
	rc = wire_decode_simple(data, size, lim, &h, &d);
	check_rc(rc, &d);
	if (rc == 0) {
		struct wire_head hg;
		CHECK(h.header_len == size);
		wire_buf_reset(&enc);
		CHECK(wire_encode_simple(&enc, (enum wire_type)h.type, h.id, h.fingerprint) == 0);
		CHECK(wire_decode_simple(enc.data, enc.len, lim, &hg, NULL) == 0);
		CHECK(hg.type == h.type && hg.id == h.id && hg.fingerprint == h.fingerprint);
	}

	const void *pl;
	size_t n;
	d.msg[0] = '\0';
	rc = wire_decode_raw(data, size, &pl, &n, &d);
	check_rc(rc, &d);
	if (rc == 0) {
		const void *pl2;
		size_t n2;
		check_payload(data, size, pl, n);
		CHECK(wire_peek(data, size, &h, NULL) == 0);
		wire_buf_reset(&enc);
		CHECK(wire_encode_raw(&enc, (enum wire_type)h.type, h.id, h.fingerprint, pl, n) ==
		      0);
		CHECK(wire_decode_raw(enc.data, enc.len, &pl2, &n2, NULL) == 0);
		CHECK(n2 == n && (n == 0 || memcmp(pl2, pl, n) == 0));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (s1.cap == 0 && (wire_scratch_init_rows(&s1, WS_SCRATCH, WS_SCRATCH_ROWS) != 0 ||
			    wire_scratch_init_rows(&s2, WS_SCRATCH, WS_SCRATCH_ROWS) != 0))
		return 0;
	struct wire_limits open_lim = ws_limits;
	open_lim.fingerprint = 0;

	struct wire_head h;
	lm_diag d;
	d.msg[0] = '\0';
	int rc = wire_peek(data, size, &h, &d);
	CHECK(rc == 0 || rc == LM_EPROTO || rc == LM_EVERSION);
	if (rc != 0)
		CHECK(d.msg[0] != '\0');
	else
		CHECK(h.header_len <= size && h.version == WIRE_VERSION);

	for (int pass = 0; pass < 2; pass++) {
		const struct wire_limits *lim = pass == 0 ? &ws_limits : &open_lim;
		check_forward(data, size, lim);
		check_tokens(data, size, lim);
		check_release(data, size, lim);
		check_copy(data, size, lim);
		check_control(data, size, lim);
	}
	check_hello(data, size);
	check_assign(data, size);
	return 0;
}

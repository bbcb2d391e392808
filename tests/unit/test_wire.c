/* test_wire.c — the wire protocol codec: messages built and read back.
 *
 * References: msgpack-c's own unpacker reads what the encoder wrote (so the bytes are standard
 * msgpack with the keys and values wire.h specifies, independently of this project's decoder),
 * and msgpack-c's packer writes the unusual messages the decoder must accept. Expected values
 * are the structs the messages were built from. What the decoder must refuse is in
 * test_wire_refusals.c; the helpers both use are in wire_surgery.h.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/wire.h"
#include "tests/support/wire_samples.h"
#include "tests/unit/wire_surgery.h"

TestSuite(wire, .init = wire_setup, .fini = wire_teardown, .timeout = 20);

/* ---------------------------------------------------------------- tables */

Test(wire, dtype_sizes_and_type_names)
{
	cr_assert_eq(wire_dtype_size(WIRE_DT_NONE), 0);
	cr_assert_eq(wire_dtype_size(WIRE_DT_I32), 4);
	cr_assert_eq(wire_dtype_size(WIRE_DT_F32), 4);
	cr_assert_eq(wire_dtype_size(WIRE_DT_F16), 2);
	cr_assert_eq(wire_dtype_size(WIRE_DT_BF16), 2);
	cr_assert_eq(wire_dtype_size(WIRE_DT_RAW), 0);
	cr_assert_eq(wire_dtype_size((enum wire_dtype)99), 0);
	cr_assert_str_eq(wire_type_name(WIRE_HELLO), "HELLO");
	cr_assert_str_eq(wire_type_name(WIRE_FORWARD), "FORWARD");
	cr_assert_str_eq(wire_type_name(WIRE_KV_EXPORT), "KV_EXPORT");
	cr_assert_str_eq(wire_type_name(WIRE_REPOINT), "REPOINT");
	cr_assert_str_eq(wire_type_name(0), "UNKNOWN");
	cr_assert_str_eq(wire_type_name(WIRE_TRACE), "TRACE");
	cr_assert_str_eq(wire_type_name(WIRE_COPY), "COPY");
	cr_assert_str_eq(wire_type_name(17), "UNKNOWN");
	cr_assert_str_eq(wire_type_name(UINT32_MAX), "UNKNOWN");
}

Test(wire, scratch_and_buf_lifecycle)
{
	struct wire_scratch s;
	cr_assert_eq(wire_scratch_init(&s, 0), LM_EINVAL);
	wire_scratch_fini(&s); /* zeroed by the failed init */
	cr_assert_eq(wire_scratch_init(&s, -1), LM_EINVAL);
	cr_assert_eq(wire_scratch_init(&s, 1), 0);
	cr_assert_eq(s.cap, 1);
	wire_scratch_fini(&s);
	wire_scratch_fini(&s);
	wire_scratch_fini(NULL);
	struct wire_buf b = {0};
	wire_buf_fini(&b);
	wire_buf_fini(NULL);
}

/* What a stage and the planner count for the decoder's scratch: its four arrays, by their own
 * element sizes, and nothing for the "adj" arrays allocated only at a first adjustment. */
Test(wire, scratch_bytes_counts_the_arrays_init_allocates)
{
	struct wire_scratch s;
	cr_assert_eq(wire_scratch_init_rows(&s, 3, 40), 0);
	cr_expect_eq(wire_scratch_bytes(s.cap, s.rows),
		     3 * (sizeof *s.seqs + sizeof *s.slots) +
			     40 * (sizeof *s.toks + sizeof *s.drafts));
	cr_expect_null(s.adj);
	wire_scratch_fini(&s);
	cr_expect_eq(wire_scratch_bytes(0, 0), 0);
}

/* ---------------------------------------------------------------- round trips */

static void check_seq(const struct wire_seq *a, const struct wire_seq *b, int i)
{
	cr_assert_eq(a->seq_id, b->seq_id, "seq %d", i);
	cr_assert_eq(a->slot, b->slot, "seq %d", i);
	cr_assert_eq(a->pos, b->pos, "seq %d", i);
	cr_assert_eq(a->n_tokens, b->n_tokens, "seq %d", i);
	cr_assert_eq(a->sample, b->sample, "seq %d", i);
	cr_assert_eq(a->step, b->step, "seq %d", i);
	cr_assert_eq(a->n_logprobs, b->n_logprobs, "seq %d", i);
	cr_assert_eq(a->sampling.temperature, b->sampling.temperature, "seq %d", i);
	cr_assert_eq(a->sampling.top_k, b->sampling.top_k, "seq %d", i);
	cr_assert_eq(a->sampling.top_p, b->sampling.top_p, "seq %d", i);
	cr_assert_eq(a->sampling.min_p, b->sampling.min_p, "seq %d", i);
	cr_assert_eq(a->sampling.seed, b->sampling.seed, "seq %d", i);
}

Test(wire, forward_round_trips_every_dtype)
{
	struct wire_seq q[3];
	ws_seqs(q);
	for (int k = WS_FORWARD_F32; k <= WS_FORWARD_F16; k++) {
		make(k);
		struct wire_forward f;
		lm_diag d = {{0}};
		cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, &d), 0,
			     "%s", d.msg);
		cr_assert_eq(f.batch_id, 77);
		cr_assert_eq(f.fingerprint, WS_FP);
		cr_assert_eq(f.n_seqs, 3);
		cr_assert_eq(f.seqs, scr.seqs);
		for (int i = 0; i < 3; i++)
			check_seq(&f.seqs[i], &q[i], i);
		cr_assert_eq(f.n_tokens, 6);
		enum wire_dtype dt = k == WS_FORWARD_F32   ? WIRE_DT_F32
				     : k == WS_FORWARD_I32 ? WIRE_DT_I32
							   : WIRE_DT_F16;
		cr_assert_eq(f.dtype, dt);
		cr_assert_eq(f.dim, dt == WIRE_DT_I32 ? 1 : 16);
		cr_assert_eq(f.payload_len, 6 * (size_t)f.dim * wire_dtype_size(dt));
		/* The payload is the tail of the message, in place. */
		cr_assert_eq((const uint8_t *)f.payload + f.payload_len, buf.data + buf.len);
	}
	/* The rows themselves. */
	make(WS_FORWARD_F32);
	struct wire_forward f;
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, NULL), 0);
	for (int i = 0; i < 6 * 16; i++) {
		float v;
		memcpy(&v, (const uint8_t *)f.payload + 4 * i, 4);
		cr_assert_eq(v, (float)i * 0.25f - 3.0f);
	}
	make(WS_FORWARD_I32);
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, NULL), 0);
	int32_t ids[6];
	memcpy(ids, f.payload, sizeof ids);
	cr_assert_arr_eq(ids, ((int32_t[]){0, 999, 1, 500, 998, 2}), sizeof ids);
}

Test(wire, forward_at_the_limits)
{
	/* max_seqs sequences of max_batch tokens in total, positions ending at max_seq. */
	struct wire_seq q[8];
	for (int i = 0; i < 8; i++) {
		q[i] = (struct wire_seq){.seq_id = (uint64_t)i,
					 .slot = 7 - i,
					 .pos = 248,
					 .n_tokens = 8,
					 .sampling = LM_SAMPLING_DEFAULT};
	}
	static float rows[64 * 16];
	struct wire_forward f = {.n_seqs = 8,
				 .seqs = q,
				 .n_tokens = 64,
				 .dtype = WIRE_DT_BF16,
				 .dim = 16,
				 .payload = rows,
				 .payload_len = 64 * 16 * 2,
				 .fingerprint = WS_FP};
	cr_assert_eq(wire_encode_forward(&buf, &f), 0);
	struct wire_forward g;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(g.n_seqs, 8);
	cr_assert_eq(g.n_tokens, 64);
	cr_assert_eq(g.dtype, WIRE_DT_BF16);
	for (int i = 0; i < 8; i++)
		check_seq(&g.seqs[i], &q[i], i);
}

Test(wire, forward_header_only_then_payload_appended)
{
	/* payload == NULL: the header alone, byte for byte the prefix of the copying encoding. */
	make(WS_FORWARD_F32);
	struct bytes full = {0};
	bytes_write(&full, (const char *)buf.data, buf.len);
	struct wire_forward f;
	cr_assert_eq(wire_decode_forward(full.p, full.len, &ws_limits, &scr, &f, NULL), 0);
	struct wire_forward h = f;
	struct wire_seq q[3];
	memcpy(q, f.seqs, sizeof q);
	h.seqs = q;
	h.payload = NULL;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &h), 0);
	cr_assert_eq(buf.len, full.len - f.payload_len);
	cr_assert_arr_eq(buf.data, full.p, buf.len);
	/* The caller appends the rows: the result decodes. */
	struct bytes msg = {0};
	bytes_write(&msg, (const char *)buf.data, buf.len);
	bytes_write(&msg, (const char *)f.payload, f.payload_len);
	cr_assert_eq(wire_decode_forward(msg.p, msg.len, &ws_limits, &scr, &f, NULL), 0);
	/* Header alone: the payload is missing. */
	lm_diag d;
	expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "\"pl\"");
	bytes_free(&full);
	bytes_free(&msg);
}

Test(wire, tokens_round_trip)
{
	make(WS_TOKENS);
	struct wire_tokens t;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_tokens(buf.data, buf.len, &ws_limits, &scr, &t, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(t.batch_id, 77);
	cr_assert_eq(t.fingerprint, WS_FP);
	cr_assert_eq(t.n, 3);
	cr_assert_eq(t.toks[0].seq_id, 42);
	cr_assert_eq(t.toks[0].token, 999);
	cr_assert_eq(t.toks[0].logprob, 0.0f);
	cr_assert(signbit(t.toks[0].logprob));
	cr_assert_eq(t.toks[0].n_top, 2);
	cr_assert_eq(t.toks[1].seq_id, UINT64_MAX);
	cr_assert_eq(t.toks[1].token, 0);
	cr_assert(isinf(t.toks[1].logprob) && t.toks[1].logprob < 0);
	cr_assert_eq(t.toks[1].n_top, 0);
	cr_assert_eq(t.toks[2].logprob, -3.5f);
	cr_assert_eq(t.payload_len, 24);
	int32_t id;
	float lp;
	memcpy(&id, (const uint8_t *)t.payload + 4, 4);
	memcpy(&lp, (const uint8_t *)t.payload + 12, 4);
	cr_assert_eq(id, 3);
	cr_assert_eq(lp, -1.25f);

	make(WS_TOKENS_EMPTY);
	cr_assert_eq(wire_decode_tokens(buf.data, buf.len, &ws_limits, &scr, &t, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(t.n, 0);
	cr_assert_eq(t.batch_id, 0);
	cr_assert_null(t.payload);
	cr_assert_eq(t.payload_len, 0);
}

Test(wire, release_round_trip)
{
	make(WS_RELEASE);
	struct wire_release r;
	cr_assert_eq(wire_decode_release(buf.data, buf.len, &ws_limits, &scr, &r, NULL), 0);
	cr_assert_eq(r.id, 9);
	cr_assert_eq(r.fingerprint, WS_FP);
	cr_assert_eq(r.n, 8);
	cr_assert_arr_eq(r.slots, ((int32_t[]){7, 0, 1, 2, 3, 4, 5, 6}), 8 * sizeof(int32_t));
	/* Empty. */
	struct wire_release e = {.id = 0, .fingerprint = 0};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_release(&buf, &e), 0);
	struct wire_limits lim = ws_limits;
	lim.fingerprint = 0;
	cr_assert_eq(wire_decode_release(buf.data, buf.len, &lim, &scr, &r, NULL), 0);
	cr_assert_eq(r.n, 0);
	cr_assert_eq(r.fingerprint, 0);
}

Test(wire, copy_round_trip)
{
	make(WS_COPY);
	struct wire_copy c;
	cr_assert_eq(wire_decode_copy(buf.data, buf.len, &ws_limits, &scr, &c, NULL), 0);
	cr_assert_eq(c.id, 10);
	cr_assert_eq(c.fingerprint, WS_FP);
	cr_assert_eq(c.src, 3);
	cr_assert_eq(c.len, 13);
	cr_assert_eq(c.n, 3);
	cr_assert_arr_eq(c.dst, ((int32_t[]){7, 2, 5}), 3 * sizeof(int32_t));
	/* No destination is no copy: the encoder refuses it. */
	struct wire_copy e = {.src = 1, .len = 1};
	cr_assert_eq(wire_encode_copy(&buf, &e), LM_EINVAL);
}

/* A COPY's rows and slots are held to the receiver's cache: a source or a destination past its
 * slots, no positions, more than a sequence holds, or no destination, are refused. */
Test(wire, copy_out_of_range_is_refused)
{
	struct {
		int32_t src, len, n, dst0;
		const char *what;
	} bad[] = {
		{8, 4, 1, 0, "slot"},  {0, 4, 1, 8, "slots"}, {0, 0, 1, 1, "len"},
		{0, 257, 1, 1, "len"}, {-1, 4, 1, 1, "slot"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int32_t dst[1] = {bad[i].dst0};
		struct wire_copy c = {.id = 1,
				      .fingerprint = WS_FP,
				      .src = bad[i].src,
				      .len = bad[i].len,
				      .n = bad[i].n,
				      .dst = dst};
		wire_buf_reset(&buf);
		cr_assert_eq(wire_encode_copy(&buf, &c), 0);
		struct wire_copy g;
		lm_diag d = {{0}};
		cr_expect_eq(wire_decode_copy(buf.data, buf.len, &ws_limits, &scr, &g, &d),
			     LM_EPROTO, "case %zu", i);
		cr_expect(strstr(d.msg, bad[i].what) != NULL, "case %zu: %s", i, d.msg);
	}
}

/* SipHash-2-4 against its authors' published vectors: key 00 01 .. 0f, message 00 01 .. of
 * length 0, 8 and 15 (the last is the paper's worked example, a129ca6149be45e5). */
Test(wire, siphash24_matches_the_reference_vectors)
{
	const uint64_t k0 = 0x0706050403020100ull, k1 = 0x0f0e0d0c0b0a0908ull;
	uint8_t msg[15];
	for (int i = 0; i < 15; i++)
		msg[i] = (uint8_t)i;
	cr_expect_eq(wire_siphash24(k0, k1, msg, 0), 0x726fdb47dd0e0e31ull);
	cr_expect_eq(wire_siphash24(k0, k1, msg, 8), 0x93f5f5799a932462ull);
	cr_expect_eq(wire_siphash24(k0, k1, msg, 15), 0xa129ca6149be45e5ull);
}

Test(wire, hello_round_trips)
{
	struct wire_hello h;
	lm_diag d = {{0}};
	make(WS_HELLO_REQUEST);
	cr_assert_eq(wire_decode_hello(buf.data, buf.len, &h, &d), 0, "%s", d.msg);
	cr_assert_eq(h.version, WIRE_VERSION);
	cr_assert_eq(h.id, 1);
	cr_assert_eq(h.fingerprint, 0);
	cr_assert_str_eq(h.name, "");
	cr_assert_eq(h.pid, 0);
	cr_assert_not(h.has_slice);

	char name[64];
	ws_fill(name, 63, 'n');
	make(WS_HELLO_REPLY);
	cr_assert_eq(wire_decode_hello(buf.data, buf.len, &h, &d), 0, "%s", d.msg);
	cr_assert_eq(h.version, WIRE_VERSION);
	cr_assert_eq(h.fingerprint, WS_FP);
	cr_assert_str_eq(h.name, name);
	cr_assert_str_eq(h.build, "");
	cr_assert_eq(h.pid, INT32_MAX);
	cr_assert(h.has_slice);
	cr_assert_eq(h.begin, 4);
	cr_assert_eq(h.end, 8);
	cr_assert_not(h.embedding);
	cr_assert(h.head);

	make(WS_HELLO_REPLY_NO_SLICE);
	cr_assert_eq(wire_decode_hello(buf.data, buf.len, &h, &d), 0, "%s", d.msg);
	cr_assert_not(h.has_slice);
	cr_assert_str_eq(h.name, name);

	/* A worker before its model is loaded: fingerprint 0. */
	struct wire_hello w = {.id = 5, .pid = 1, .fingerprint = 0};
	strcpy(w.name, "w0");
	strcpy(w.build, "0.1.0 abcdef");
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_hello(&buf, &w, true), 0);
	cr_assert_eq(wire_decode_hello(buf.data, buf.len, &h, &d), 0, "%s", d.msg);
	cr_assert_eq(h.fingerprint, 0);
	cr_assert_str_eq(h.build, "0.1.0 abcdef");
	cr_assert_eq(h.pid, 1);
}

Test(wire, assign_and_ready_round_trip)
{
	static struct wire_assign a;
	char model[1024], next[256];
	ws_fill(model, 1023, 'm');
	ws_fill(next, 255, 'x');
	make(WS_ASSIGN);
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_assign(buf.data, buf.len, &a, &d), 0, "%s", d.msg);
	cr_assert_eq(a.id, 2);
	cr_assert_str_eq(a.model, model);
	cr_assert_eq(a.begin, 0);
	cr_assert_eq(a.end, 0);
	cr_assert(a.embedding);
	cr_assert_not(a.head);
	cr_assert_eq(a.max_seq, 256);
	cr_assert_eq(a.slots, 8);
	cr_assert_eq(a.k_type, 1);
	cr_assert_eq(a.v_type, 8);
	cr_assert_eq(a.wire_dtype, WIRE_DT_BF16);
	cr_assert_eq(a.max_batch, 64);
	cr_assert_str_eq(a.next, next);

	struct wire_ready r;
	make(WS_READY);
	cr_assert_eq(wire_decode_ready(buf.data, buf.len, &r, &d), 0, "%s", d.msg);
	cr_assert_eq(r.id, 2);
	cr_assert_eq(r.fingerprint, WS_FP);
	cr_assert_eq(r.kv_bytes, UINT64_MAX);
	cr_assert_eq(r.weight_bytes, 0);
	cr_assert_eq(r.rss_bytes, 1ull << 40);
	cr_assert_eq(r.digest, 0x0123456789abcdefull);
}

Test(wire, error_round_trip)
{
	static struct wire_error e;
	char msg[512];
	ws_fill(msg, 511, 'e');
	make(WS_ERROR);
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_error(buf.data, buf.len, &e, &d), 0, "%s", d.msg);
	cr_assert_eq(e.id, UINT64_MAX);
	cr_assert_eq(e.code, INT32_MIN);
	cr_assert_eq(e.about, UINT32_MAX);
	cr_assert_str_eq(e.msg, msg);
	struct wire_error s = {.id = 0, .code = LM_EVERSION, .about = 0};
	strcpy(s.msg, "");
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_error(&buf, &s), 0);
	cr_assert_eq(wire_decode_error(buf.data, buf.len, &e, &d), 0, "%s", d.msg);
	cr_assert_eq(e.code, LM_EVERSION);
	cr_assert_eq(e.about, 0);
	cr_assert_str_eq(e.msg, "");
}

Test(wire, kv_round_trips)
{
	struct wire_kv k;
	lm_diag d = {{0}};
	make(WS_KV_EXPORT_REQUEST);
	cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &k, &d), 0, "%s", d.msg);
	cr_assert_eq(k.id, 3);
	cr_assert_eq(k.fingerprint, WS_FP);
	cr_assert_eq(k.slot, 7);
	cr_assert_eq(k.len, 0);
	cr_assert_null(k.payload);
	cr_assert_eq(k.payload_len, 0);
	struct wire_head h;
	cr_assert_eq(wire_peek(buf.data, buf.len, &h, NULL), 0);
	cr_assert_eq(h.type, WIRE_KV_EXPORT);

	for (int s = WS_KV_EXPORT_REPLY; s <= WS_KV_IMPORT; s++) {
		make(s);
		cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &k, &d), 0, "%s", d.msg);
		cr_assert_eq(k.slot, 0);
		cr_assert_eq(k.len, 256);
		cr_assert_eq(k.payload_len, 300);
		for (int i = 0; i < 300; i++)
			cr_assert_eq(((const uint8_t *)k.payload)[i], (uint8_t)(i * 7 + 3));
		cr_assert_eq(wire_peek(buf.data, buf.len, &h, NULL), 0);
		cr_assert_eq(h.type, s == WS_KV_IMPORT ? WIRE_KV_IMPORT : WIRE_KV_EXPORT);
	}
	/* A KV_IMPORT of an empty sequence keeps the long form. */
	struct wire_kv e = {.id = 1, .fingerprint = WS_FP, .slot = 2};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_kv(&buf, WIRE_KV_IMPORT, &e), 0);
	cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &k, &d), 0, "%s", d.msg);
	cr_assert_eq(k.len, 0);
	cr_assert_eq(k.payload_len, 0);
	struct msg m;
	msg_split(&m, buf.data, buf.len);
	cr_assert_geq(msg_find(&m, "pl"), 0);
	msg_free(&m);
}

Test(wire, repoint_simple_and_raw_round_trip)
{
	struct wire_repoint r;
	char next[256];
	ws_fill(next, 255, 'r');
	lm_diag d = {{0}};
	make(WS_REPOINT);
	cr_assert_eq(wire_decode_repoint(buf.data, buf.len, &ws_limits, &r, &d), 0, "%s", d.msg);
	cr_assert_eq(r.id, 4);
	cr_assert_eq(r.fingerprint, WS_FP);
	cr_assert_str_eq(r.next, next);

	const enum wire_type simple[] = {WIRE_DRAIN,  WIRE_STATUS,    WIRE_PAUSE,
					 WIRE_RESUME, WIRE_KV_IMPORT, WIRE_REPOINT};
	for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
		struct wire_head h;
		wire_buf_reset(&buf);
		cr_assert_eq(wire_encode_simple(&buf, simple[i], UINT64_MAX - i, i), 0);
		cr_assert_eq(wire_decode_simple(buf.data, buf.len, NULL, &h, &d), 0, "%s", d.msg);
		cr_assert_eq(h.version, WIRE_VERSION);
		cr_assert_eq(h.type, simple[i]);
		cr_assert_eq(h.id, UINT64_MAX - i);
		cr_assert_eq(h.fingerprint, i);
		cr_assert_eq(h.header_len, buf.len);
	}

	const char *json = "{\"name\":\"w0\",\"slots\":8}";
	const void *p;
	size_t n;
	make(WS_STATUS_REPLY);
	cr_assert_eq(wire_decode_raw(buf.data, buf.len, &p, &n, &d), 0, "%s", d.msg);
	cr_assert_eq(n, strlen(json));
	cr_assert_arr_eq(p, json, n);
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_raw(&buf, WIRE_STATUS, 1, 2, NULL, 0), 0);
	cr_assert_eq(wire_decode_raw(buf.data, buf.len, &p, &n, &d), 0, "%s", d.msg);
	cr_assert_null(p);
	cr_assert_eq(n, 0);
}

Test(wire, peek_reads_every_sample)
{
	for (int k = 0; k < WS_COUNT; k++) {
		make(k);
		struct wire_head h;
		lm_diag d = {{0}};
		cr_assert_eq(wire_peek(buf.data, buf.len, &h, &d), 0, "%s: %s", ws_names[k], d.msg);
		cr_assert_eq(h.version, WIRE_VERSION);
		/* msgpack-c finds the header's end at the same place. */
		struct msg m;
		msg_split(&m, buf.data, buf.len);
		cr_assert_eq(h.header_len, buf.len - m.payload_len, "%s", ws_names[k]);
		int t = msg_find(&m, "t"), id = msg_find(&m, "id"), fp = msg_find(&m, "fp");
		cr_assert_eq(h.type, m.kv[t].val.via.u64);
		cr_assert_eq(h.id, m.kv[id].val.via.u64);
		cr_assert_eq(h.fingerprint, fp >= 0 ? m.kv[fp].val.via.u64 : 0);
		msg_free(&m);
	}
}

/* ---------------------------------------------------------------- the encoding, read by msgpack-c */

static const msgpack_object *val(const struct msg *m, const char *key)
{
	int i = msg_find(m, key);
	cr_assert_geq(i, 0, "key %s", key);
	return &m->kv[i].val;
}

Test(wire, encoding_is_plain_msgpack_with_the_specified_keys)
{
	make(WS_FORWARD_F32);
	struct msg m;
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 9);
	cr_assert_eq(val(&m, "v")->via.u64, WIRE_VERSION);
	cr_assert_eq(val(&m, "t")->via.u64, 4);
	cr_assert_eq(val(&m, "fp")->via.u64, WS_FP);
	cr_assert_eq(val(&m, "id")->via.u64, 77);
	cr_assert_eq(val(&m, "n")->via.u64, 6);
	cr_assert_eq(val(&m, "dt")->via.u64, 2);
	cr_assert_eq(val(&m, "dim")->via.u64, 16);
	cr_assert_eq(val(&m, "pl")->via.u64, 6 * 16 * 4);
	cr_assert_eq(m.payload_len, 6 * 16 * 4);
	const msgpack_object *seqs = val(&m, "seqs");
	cr_assert_eq(seqs->type, MSGPACK_OBJECT_ARRAY);
	cr_assert_eq(seqs->via.array.size, 3);
	/* Sequence 1: [42, 7, 255, 1, true, 2^64-1, 5, 100.0f, INT32_MIN, 0.5f, 1.0f, 2^64-1, 0]. */
	const msgpack_object *s = seqs->via.array.ptr[1].via.array.ptr;
	cr_assert_eq(seqs->via.array.ptr[1].via.array.size, 13);
	cr_assert_eq(s[0].via.u64, 42);
	cr_assert_eq(s[1].via.u64, 7);
	cr_assert_eq(s[2].via.u64, 255);
	cr_assert_eq(s[3].via.u64, 1);
	cr_assert_eq(s[4].type, MSGPACK_OBJECT_BOOLEAN);
	cr_assert(s[4].via.boolean);
	cr_assert_eq(s[5].via.u64, UINT64_MAX);
	cr_assert_eq(s[6].via.u64, 5);
	cr_assert_eq(s[7].type, MSGPACK_OBJECT_FLOAT32);
	cr_assert_eq(s[7].via.f64, 100.0);
	cr_assert_eq(s[8].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
	cr_assert_eq(s[8].via.i64, INT32_MIN);
	cr_assert_eq(s[9].via.f64, 0.5);
	cr_assert_eq(s[10].via.f64, 1.0);
	cr_assert_eq(s[11].via.u64, UINT64_MAX);
	cr_assert_eq(s[12].via.u64, 0);
	cr_assert_lt(msg_find(&m, "dr"), 0); /* no drafts, no key */
	msg_free(&m);

	make(WS_FORWARD_DRAFT);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 10);
	cr_assert_eq(val(&m, "seqs")->via.array.ptr[2].via.array.ptr[12].via.u64, 2);
	const msgpack_object *dr = val(&m, "dr");
	cr_assert_eq(dr->via.array.size, 2);
	cr_assert_eq(dr->via.array.ptr[0].via.u64, 998);
	cr_assert_eq(dr->via.array.ptr[1].via.u64, 2);
	msg_free(&m);

	make(WS_TOKENS);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 6);
	cr_assert_eq(val(&m, "pl")->via.u64, 24);
	const msgpack_object *t = val(&m, "toks")->via.array.ptr[2].via.array.ptr;
	cr_assert_eq(t[0].via.u64, 5);
	cr_assert_eq(t[1].via.u64, 7);
	cr_assert_eq(t[2].via.f64, -3.5);
	cr_assert_eq(t[3].via.u64, 1);
	msg_free(&m);

	make(WS_HELLO_REQUEST);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 3); /* v, t, id: no fingerprint */
	msg_free(&m);

	make(WS_HELLO_REPLY);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 8);
	cr_assert_eq(val(&m, "name")->via.str.size, 63);
	cr_assert_eq(val(&m, "pid")->via.u64, INT32_MAX);
	const msgpack_object *sl = val(&m, "slice")->via.array.ptr;
	cr_assert_eq(sl[0].via.u64, 4);
	cr_assert_eq(sl[1].via.u64, 8);
	cr_assert_not(sl[2].via.boolean);
	cr_assert(sl[3].via.boolean);
	msg_free(&m);

	make(WS_ASSIGN);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 15);
	cr_assert_lt(msg_find(&m, "fp"), 0);
	cr_assert_eq(val(&m, "model")->via.str.size, 1023);
	cr_assert_eq(val(&m, "kvv")->via.u64, 8);
	cr_assert_eq(val(&m, "kks")->via.u64, 8);
	cr_assert_eq(val(&m, "kvs")->via.u64, 7);
	cr_assert_eq(val(&m, "drf")->via.u64, 63);
	cr_assert_eq(val(&m, "wdt")->via.u64, WIRE_DT_BF16);
	cr_assert_eq(val(&m, "next")->via.str.size, 255);
	msg_free(&m);

	make(WS_ERROR);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 6);
	cr_assert_eq(val(&m, "code")->via.i64, INT32_MIN);
	cr_assert_eq(val(&m, "about")->via.u64, UINT32_MAX);
	msg_free(&m);

	make(WS_KV_EXPORT_REPLY);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 8);
	cr_assert_eq(val(&m, "dt")->via.u64, WIRE_DT_RAW);
	cr_assert_eq(val(&m, "len")->via.u64, 256);
	cr_assert_eq(val(&m, "pl")->via.u64, 300);
	cr_assert_lt(msg_find(&m, "hi"), 0); /* hi == len: not written */
	msg_free(&m);

	make(WS_KV_IMPORT_HI);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 9);
	cr_assert_eq(val(&m, "len")->via.u64, 250);
	cr_assert_eq(val(&m, "hi")->via.u64, 256);
	msg_free(&m);

	make(WS_STATUS_REPLY);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 6);
	cr_assert_eq(val(&m, "dt")->via.u64, WIRE_DT_RAW);
	cr_assert_eq(m.payload_len, val(&m, "pl")->via.u64);
	msg_free(&m);
}

/* Another packer's choices: keys in another order, integers in wider encodings, float64. */
Test(wire, decoder_accepts_any_key_order_and_integer_width)
{
	static const float rows[2];
	struct bytes b = {0};
	msgpack_packer pk;
	msgpack_packer_init(&pk, &b, bytes_write);
	msgpack_pack_map(&pk, 9);
	pk_key(&pk, "pl");
	msgpack_pack_fix_uint64(&pk, 8);
	pk_key(&pk, "seqs");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 13);
	msgpack_pack_fix_int64(&pk, 11);  /* seq_id as int64 */
	msgpack_pack_fix_uint32(&pk, 6);  /* slot as uint32 */
	msgpack_pack_fix_int16(&pk, 254); /* pos as int16 */
	msgpack_pack_fix_uint8(&pk, 2);   /* n_tokens as uint8 */
	msgpack_pack_true(&pk);
	msgpack_pack_fix_uint16(&pk, 3);  /* step */
	msgpack_pack_fix_int8(&pk, 0);    /* n_logprobs */
	msgpack_pack_double(&pk, 0.7);    /* temperature as float64 */
	msgpack_pack_fix_int32(&pk, -1);  /* top_k */
	msgpack_pack_double(&pk, 0.9);    /* top_p */
	msgpack_pack_float(&pk, 0.1f);    /* min_p */
	msgpack_pack_fix_uint64(&pk, 99); /* seed */
	msgpack_pack_fix_int16(&pk, 0);   /* n_draft as int16 */
	pk_key(&pk, "dim");
	msgpack_pack_fix_int32(&pk, 1);
	pk_key(&pk, "n");
	msgpack_pack_fix_uint16(&pk, 2);
	pk_key(&pk, "id");
	msgpack_pack_fix_uint64(&pk, 5);
	pk_key(&pk, "dt");
	msgpack_pack_fix_int8(&pk, WIRE_DT_I32);
	pk_key(&pk, "fp");
	msgpack_pack_uint64(&pk, WS_FP);
	pk_key(&pk, "t");
	msgpack_pack_fix_uint32(&pk, WIRE_FORWARD);
	pk_key(&pk, "v");
	msgpack_pack_fix_int64(&pk, WIRE_VERSION);
	bytes_write(&b, (const char *)rows, sizeof rows);

	struct wire_forward f;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_forward(b.p, b.len, &ws_limits, &scr, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(f.n_seqs, 1);
	cr_assert_eq(f.seqs[0].seq_id, 11);
	cr_assert_eq(f.seqs[0].slot, 6);
	cr_assert_eq(f.seqs[0].pos, 254);
	cr_assert_eq(f.seqs[0].n_tokens, 2);
	cr_assert_eq(f.seqs[0].step, 3);
	cr_assert_eq(f.seqs[0].sampling.temperature, 0.7f);
	cr_assert_eq(f.seqs[0].sampling.top_k, -1);
	cr_assert_eq(f.seqs[0].sampling.top_p, 0.9f);
	cr_assert_eq(f.seqs[0].sampling.min_p, 0.1f);
	cr_assert_eq(f.seqs[0].sampling.seed, 99);
	cr_assert_eq(f.batch_id, 5);
	cr_assert_eq(f.dtype, WIRE_DT_I32);
	cr_assert_eq(f.payload_len, 8);
	bytes_free(&b);
}

/* ---------------------------------------------------------------- the encoder's contract */

Test(wire, encoder_refuses_inconsistent_structs_and_leaves_the_buffer)
{
	make(WS_DRAIN);
	size_t len = buf.len;
	struct wire_seq q[3];
	ws_seqs(q);
	struct wire_forward f = {.n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_F32,
				 .dim = 16,
				 .payload_len = 6 * 16 * 4 - 1};
	cr_assert_eq(wire_encode_forward(&buf, &f), LM_EINVAL);
	f.payload_len = 6 * 16 * 4;
	f.seqs = NULL;
	cr_assert_eq(wire_encode_forward(&buf, &f), LM_EINVAL);
	f.seqs = q;
	f.n_seqs = -1;
	cr_assert_eq(wire_encode_forward(&buf, &f), LM_EINVAL);
	f.n_seqs = 3;
	f.n_tokens = INT32_MAX;
	f.dim = INT32_MAX;
	cr_assert_eq(wire_encode_forward(&buf, &f), LM_EINVAL);

	struct wire_token t = {.n_top = 2};
	struct wire_tokens tk = {.n = 1, .toks = &t, .payload_len = 15};
	cr_assert_eq(wire_encode_tokens(&buf, &tk), LM_EINVAL);
	t.n_top = -1;
	tk.payload_len = 0;
	cr_assert_eq(wire_encode_tokens(&buf, &tk), LM_EINVAL);
	struct wire_release r = {.n = 2, .slots = NULL};
	cr_assert_eq(wire_encode_release(&buf, &r), LM_EINVAL);

	struct wire_hello h = {.pid = 1};
	memset(h.name, 'a', sizeof h.name); /* not terminated */
	cr_assert_eq(wire_encode_hello(&buf, &h, true), LM_EINVAL);
	cr_assert_eq(wire_encode_hello(&buf, &h, false), 0); /* a request has no name */
	len = buf.len;
	static struct wire_assign a;
	memset(&a, 'a', sizeof a);
	cr_assert_eq(wire_encode_assign(&buf, &a), LM_EINVAL);
	static struct wire_error e;
	memset(e.msg, 'e', sizeof e.msg);
	cr_assert_eq(wire_encode_error(&buf, &e), LM_EINVAL);
	struct wire_repoint rp;
	memset(rp.next, 'r', sizeof rp.next);
	cr_assert_eq(wire_encode_repoint(&buf, &rp), LM_EINVAL);
	struct wire_kv kv = {0};
	cr_assert_eq(wire_encode_kv(&buf, WIRE_FORWARD, &kv), LM_EINVAL);
	cr_assert_eq(wire_encode_simple(&buf, WIRE_FORWARD, 1, 1), LM_EINVAL);
	cr_assert_eq(wire_encode_simple(&buf, (enum wire_type)0, 1, 1), LM_EINVAL);
	cr_assert_eq(wire_encode_raw(&buf, (enum wire_type)17, 1, 1, NULL, 0), LM_EINVAL);
	cr_assert_eq(buf.len, len);
}

Test(wire, encoders_append_and_stop_allocating)
{
	/* Two messages back to back in one buffer: each decodes from its offset. */
	make(WS_DRAIN);
	size_t first = buf.len;
	cr_assert_eq(ws_make(WS_RELEASE, &buf), 0);
	struct wire_head h;
	cr_assert_eq(wire_decode_simple(buf.data, first, &ws_limits, &h, NULL), 0);
	struct wire_release r;
	cr_assert_eq(
		wire_decode_release(buf.data + first, buf.len - first, &ws_limits, &scr, &r, NULL),
		0);
	/* Reused: the storage stays put once grown. */
	make(WS_ASSIGN);
	make(WS_FORWARD_F32);
	uint8_t *data = buf.data;
	size_t cap = buf.cap;
	for (int i = 0; i < 1000; i++) {
		make(i % WS_COUNT);
		cr_assert_eq(buf.data, data);
		cr_assert_eq(buf.cap, cap);
	}
}

/* TRACE (version 2) travels in the KV_EXPORT layout: a request with a slot, a reply with rows. */
Test(wire, trace_round_trips)
{
	struct wire_kv req = {.id = 9, .fingerprint = ws_limits.fingerprint, .slot = 3};
	cr_assert_eq(wire_encode_kv(&buf, WIRE_TRACE, &req), 0);
	struct wire_kv got;
	lm_diag d = {{0}};
	struct wire_head h;
	cr_assert_eq(wire_peek(buf.data, buf.len, &h, &d), 0, "%s", d.msg);
	cr_assert_eq(h.type, WIRE_TRACE);
	cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &got, &d), 0, "%s", d.msg);
	cr_assert_eq(got.slot, 3);
	cr_assert_eq(got.len, 0);
	cr_assert_eq(got.payload_len, 0);
	float rows[6] = {1, 2, 3, 4, 5, 6};
	struct wire_kv rep = {.id = 9,
			      .fingerprint = ws_limits.fingerprint,
			      .slot = 3,
			      .len = 2,
			      .payload = rows,
			      .payload_len = sizeof rows};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_kv(&buf, WIRE_TRACE, &rep), 0);
	cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &got, &d), 0, "%s", d.msg);
	cr_assert_eq(got.len, 2);
	cr_assert_eq(got.payload_len, sizeof rows);
	cr_assert_eq(memcmp(got.payload, rows, sizeof rows), 0);
}

/* ---------------------------------------------------------------- FORWARD's "adj" (version 3) */

/* Sequences 0 and 2 of the sample batch get logit adjustments. */
static void adjusted_batch(struct wire_seq q[3], struct lm_logit_adjust a[2], int32_t hist[3],
			   struct lm_logit_bias bias[2])
{
	ws_seqs(q);
	hist[0] = 5;
	hist[1] = 999;
	hist[2] = 5;
	bias[0] = (struct lm_logit_bias){0, -100.0f};
	bias[1] = (struct lm_logit_bias){998, 2.5f};
	a[0] = (struct lm_logit_adjust){.presence = 0.5f,
					.frequency = -2.0f,
					.repeat = 1.25f,
					.hist = hist,
					.n_hist = 3,
					.bias = bias,
					.n_bias = 2};
	a[1] = (struct lm_logit_adjust){.repeat = 1.0f, .bias = bias + 1, .n_bias = 1};
	q[0].adjust = &a[0];
	q[2].adjust = &a[1];
}

static void check_adjust(const struct lm_logit_adjust *x, const struct lm_logit_adjust *y)
{
	cr_assert(x != NULL);
	cr_assert_eq(x->presence, y->presence);
	cr_assert_eq(x->frequency, y->frequency);
	cr_assert_eq(x->repeat, y->repeat);
	cr_assert_eq(x->n_hist, y->n_hist);
	cr_assert_eq(x->n_bias, y->n_bias);
	for (int32_t i = 0; i < x->n_hist; i++)
		cr_assert_eq(x->hist[i], y->hist[i]);
	for (int32_t i = 0; i < x->n_bias; i++) {
		cr_assert_eq(x->bias[i].id, y->bias[i].id);
		cr_assert_eq(x->bias[i].bias, y->bias[i].bias);
	}
}

Test(wire, forward_adjust_round_trips)
{
	struct wire_seq q[3];
	struct lm_logit_adjust a[2];
	int32_t hist[3];
	struct lm_logit_bias bias[2];
	adjusted_batch(q, a, hist, bias);
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	struct wire_forward f = {.batch_id = 9,
				 .fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), 0);
	struct wire_forward g;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d), 0, "%s",
		     d.msg);
	check_adjust(g.seqs[0].adjust, &a[0]);
	cr_assert_null(g.seqs[1].adjust);
	check_adjust(g.seqs[2].adjust, &a[1]);
	/* A middle stage re-encodes what it decoded: the adjustments go on unchanged. */
	struct wire_buf again = {0};
	cr_assert_eq(wire_encode_forward(&again, &g), 0);
	cr_assert_eq(again.len, buf.len);
	cr_assert(memcmp(again.data, buf.data, buf.len) == 0);
	wire_buf_fini(&again);
	/* Without adjustments the message has no "adj" key: version 2's layout but for "v". */
	ws_seqs(q);
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), 0);
	cr_assert(memmem(buf.data, buf.len,
			 "\xa3"
			 "adj",
			 4) == NULL);
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_null(g.seqs[i].adjust);
}

Test(wire, forward_adjust_out_of_range)
{
	struct wire_seq q[3];
	struct lm_logit_adjust a[2];
	int32_t hist[3];
	struct lm_logit_bias bias[2];
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	struct wire_forward f = {.fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	static const struct {
		int what;
		const char *needle;
	} cases[] = {
		{0, "window"},          {1, "bias"},     {2, "repeat penalty"}, {3, "presence"},
		{4, "logit bias must"}, {5, "presence"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		adjusted_batch(q, a, hist, bias);
		switch (cases[i].what) {
		case 0:
			hist[1] = 1000; /* past the vocabulary */
			break;
		case 1:
			bias[0].id = 1000;
			break;
		case 2:
			a[0].repeat = 0;
			break;
		case 3:
			a[0].presence = NAN;
			break;
		case 4:
			bias[1].bias = 101;
			break;
		default:
			a[0].frequency = 2.5f;
			break;
		}
		wire_buf_reset(&buf);
		cr_assert_eq(wire_encode_forward(&buf, &f), 0);
		struct wire_forward g;
		lm_diag d = {{0}};
		expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d),
			   LM_EPROTO, &d, cases[i].needle);
		cr_assert(strstr(d.msg, "\"adj\"") != NULL, "%s", d.msg);
	}
	/* A struct the encoder cannot write. */
	adjusted_batch(q, a, hist, bias);
	a[0].hist = NULL;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), LM_EINVAL);
}

/* ---------------------------------------------------------------- FORWARD's "gr" (version 6) */

/* Sequence 1 continues its matcher; sequence 2 (step 17) sends its grammar and 17 ids. */
static void grammar_batch(struct wire_seq q[3], struct wire_grammar g[2], int32_t ids[17])
{
	ws_seqs(q);
	for (int i = 0; i < 17; i++)
		ids[i] = i * 58;
	g[0] = (struct wire_grammar){0};
	g[1] = (struct wire_grammar){.text = "root ::= \"a\"", .len = 12, .ids = ids, .n_ids = 17};
	q[1].grammar = &g[0];
	q[2].grammar = &g[1];
}

Test(wire, forward_grammar_round_trips)
{
	struct wire_seq q[3];
	struct wire_grammar gr[2];
	int32_t gids[17];
	grammar_batch(q, gr, gids);
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	struct wire_forward f = {.batch_id = 9,
				 .fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), 0);
	struct wire_forward g;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d), 0, "%s",
		     d.msg);
	cr_assert_null(g.seqs[0].grammar);
	cr_assert_not_null(g.seqs[1].grammar);
	cr_assert_eq(g.seqs[1].grammar->len, 0);
	cr_assert_eq(g.seqs[1].grammar->n_ids, 0);
	const struct wire_grammar *x = g.seqs[2].grammar;
	cr_assert_not_null(x);
	cr_assert_eq(x->len, 12);
	cr_assert(memcmp(x->text, "root ::= \"a\"", 12) == 0);
	cr_assert_eq(x->n_ids, 17);
	for (int i = 0; i < 17; i++)
		cr_assert_eq(x->ids[i], i * 58);
	/* A middle stage re-encodes what it decoded: the grammars go on unchanged. */
	struct wire_buf again = {0};
	cr_assert_eq(wire_encode_forward(&again, &g), 0);
	cr_assert_eq(again.len, buf.len);
	cr_assert(memcmp(again.data, buf.data, buf.len) == 0);
	wire_buf_fini(&again);
	cr_assert_leq(buf.len, wire_max_data_message(&ws_limits));
}

Test(wire, forward_grammar_refusals)
{
	struct wire_seq q[3];
	struct wire_grammar gr[2];
	int32_t gids[17];
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	struct wire_forward f = {.fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	static const struct {
		int what;
		const char *needle;
	} cases[] = {
		{0, "16 ids where 17 were expected"},
		{1, "has a grammar but does not sample"},
		{2, "NUL"},
		{3, "outside"},
		{4, "1 ids where 0 were expected"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		grammar_batch(q, gr, gids);
		switch (cases[i].what) {
		case 0:
			gr[1].n_ids = 16;
			break;
		case 1:
			q[0].grammar = &gr[1];
			q[0].step = 17;
			break;
		case 2:
			gr[1].text = "root\0::=\"a\"";
			break;
		case 3:
			gids[3] = 1000; /* past the vocabulary */
			break;
		default:
			gr[0].ids = gids;
			gr[0].n_ids = 1;
			break;
		}
		wire_buf_reset(&buf);
		cr_assert_eq(wire_encode_forward(&buf, &f), 0);
		struct wire_forward g;
		lm_diag d = {{0}};
		expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d),
			   LM_EPROTO, &d, cases[i].needle);
		cr_assert(strstr(d.msg, "\"gr\"") != NULL, "%s", d.msg);
	}
	grammar_batch(q, gr, gids);
	gr[1].len = WIRE_MAX_GRAMMAR + 1;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), LM_EINVAL);
}

/* wire_max_data_message bounds the largest legal data-ring message: every field at its widest
 * encoding, every sequence, the whole payload. A receiver caps its sockets at it. */
Test(wire, max_data_message_bounds_the_largest_legal_messages)
{
	const struct wire_limits lim = {.fingerprint = UINT64_MAX,
					.slots = 64,
					.max_seq = INT32_MAX,
					.dim = 512,
					.n_vocab = INT32_MAX,
					.max_batch = 256,
					.max_seqs = 64,
					.max_logprobs = WIRE_MAX_LOGPROBS};
	static struct wire_seq seqs[64];
	static struct wire_token toks[64];
	static float rows[256 * 512];
	static uint8_t top[64 * WIRE_MAX_LOGPROBS * 8];
	static int32_t slots[64];
	for (int i = 0; i < 64; i++) {
		seqs[i] = (struct wire_seq){.seq_id = UINT64_MAX,
					    .slot = INT32_MAX,
					    .pos = INT32_MAX,
					    .n_tokens = i < 63 ? 1 : 256 - 63,
					    .sample = true,
					    .step = UINT64_MAX,
					    .n_logprobs = INT32_MAX,
					    .sampling = {.temperature = 1e30f,
							 .top_k = INT32_MAX,
							 .top_p = 0.123456789f,
							 .min_p = 0.987654321f,
							 .seed = UINT64_MAX}};
		toks[i] = (struct wire_token){UINT64_MAX, INT32_MAX, -1e30f, WIRE_MAX_LOGPROBS};
		slots[i] = INT32_MAX;
	}
	struct wire_buf b = {0};
	struct wire_forward f = {.batch_id = UINT64_MAX,
				 .fingerprint = UINT64_MAX,
				 .n_seqs = 64,
				 .seqs = seqs,
				 .n_tokens = 256,
				 .dtype = WIRE_DT_F32,
				 .dim = 512,
				 .payload = rows,
				 .payload_len = sizeof rows};
	cr_assert_eq(wire_encode_forward(&b, &f), 0);
	cr_assert_leq(b.len, wire_max_data_message(&lim), "FORWARD of %zu bytes", b.len);
	wire_buf_reset(&b);
	struct wire_tokens t = {.batch_id = UINT64_MAX,
				.fingerprint = UINT64_MAX,
				.n = 64,
				.toks = toks,
				.payload = top,
				.payload_len = sizeof top};
	cr_assert_eq(wire_encode_tokens(&b, &t), 0);
	cr_assert_leq(b.len, wire_max_data_message(&lim), "TOKENS of %zu bytes", b.len);
	wire_buf_reset(&b);
	struct wire_release r = {
		.id = UINT64_MAX, .fingerprint = UINT64_MAX, .n = 64, .slots = slots};
	cr_assert_eq(wire_encode_release(&b, &r), 0);
	cr_assert_leq(b.len, wire_max_data_message(&lim));
	wire_buf_fini(&b);
}

/* ---------------------------------------------------------------- the ring stamp */

/* The 8 bytes at p, big-endian: how msgpack writes a uint64. */
static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

Test(wire, ring_stamp_round_trips_and_is_rewritten_in_place)
{
	/* Unstamped: no "ts" key, the same 9 keys as a build without the stamp writes. */
	make(WS_FORWARD_F32);
	struct msg m;
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 9);
	cr_assert_lt(msg_find(&m, "ts"), 0);
	msg_free(&m);
	struct wire_forward f;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(f.sent_ns, 0);
	cr_assert_eq(f.stamp_at, 0);
	struct bytes plain = {0};
	bytes_write(&plain, (const char *)buf.data, buf.len);

	/* Stamped: "ts" is one more key, a fixed-width uint64 whose bytes end the header. */
	struct wire_seq q[3];
	memcpy(q, f.seqs, sizeof q);
	struct wire_forward g = f;
	g.seqs = q;
	g.payload = plain.p + plain.len - f.payload_len; /* f's points into buf */
	g.sent_ns = 0x0102030405060708ull;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &g), 0);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(m.n, 10);
	cr_assert_eq(val(&m, "ts")->via.u64, 0x0102030405060708ull);
	size_t header = buf.len - m.payload_len;
	cr_assert_eq(m.payload_len, f.payload_len);
	cr_assert_arr_eq(m.payload, plain.p + plain.len - f.payload_len, f.payload_len);
	msg_free(&m);
	cr_assert_eq(buf.data[header - 9], 0xcf);
	cr_assert_eq(be64(buf.data + header - 8), 0x0102030405060708ull);

	struct wire_forward h;
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &h, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(h.sent_ns, 0x0102030405060708ull);
	cr_assert_eq(h.stamp_at, header - WIRE_STAMP_LEN);
	cr_assert_eq(h.batch_id, f.batch_id);
	cr_assert_eq(h.n_seqs, 3);
	for (int i = 0; i < 3; i++)
		check_seq(&h.seqs[i], &q[i], i);
	cr_assert_eq(h.payload_len, f.payload_len);

	/* Rewritten in place, as a worker does before it sends the message on: msgpack-c and
	 * the decoder read the new value, and nothing else moved. */
	wire_stamp(buf.data + h.stamp_at, 42);
	msg_split(&m, buf.data, buf.len);
	cr_assert_eq(val(&m, "ts")->via.u64, 42);
	cr_assert_eq(m.payload_len, f.payload_len);
	msg_free(&m);
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &h, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(h.sent_ns, 42);
	cr_assert_eq(h.stamp_at, header - WIRE_STAMP_LEN);

	/* Header alone (the payload appended by the caller): the stamp still ends it. */
	g.payload = NULL;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &g), 0);
	cr_assert_eq(buf.len, header);
	cr_assert_eq(be64(buf.data + buf.len - WIRE_STAMP_LEN), 0x0102030405060708ull);
	bytes_free(&plain);
}

Test(wire, ring_stamp_on_tokens)
{
	make(WS_TOKENS);
	struct wire_tokens t;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_tokens(buf.data, buf.len, &ws_limits, &scr, &t, &d), 0, "%s",
		     d.msg);
	cr_assert_eq(t.sent_ns, 0);
	struct wire_token k[3];
	memcpy(k, t.toks, sizeof k);
	uint8_t top[24];
	memcpy(top, t.payload, sizeof top);
	struct wire_tokens u = t;
	u.toks = k;
	u.payload = NULL; /* appended below, as the last stage does */
	u.sent_ns = 7;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_tokens(&buf, &u), 0);
	size_t header = buf.len;
	wire_stamp(buf.data + header - WIRE_STAMP_LEN, UINT64_MAX - 1);
	struct bytes b = {0};
	bytes_write(&b, (const char *)buf.data, buf.len);
	bytes_write(&b, (const char *)top, sizeof top);
	struct msg m;
	msg_split(&m, b.p, b.len);
	cr_assert_eq(val(&m, "ts")->via.u64, UINT64_MAX - 1);
	msg_free(&m);
	cr_assert_eq(wire_decode_tokens(b.p, b.len, &ws_limits, &scr, &t, &d), 0, "%s", d.msg);
	cr_assert_eq(t.sent_ns, UINT64_MAX - 1);
	cr_assert_eq(t.n, 3);
	cr_assert_eq(t.toks[0].seq_id, 42);
	cr_assert_eq(t.toks[2].logprob, -3.5f);
	cr_assert_arr_eq(t.payload, top, sizeof top);
	bytes_free(&b);
}

/* Another encoder may write "ts" in a short form: its value is read, but it cannot be rewritten
 * in place (stamp_at 0); a stamp that is not an unsigned integer, and "ts" on a message that
 * does not take it, are refused. */
Test(wire, ring_stamp_short_form_and_refusals)
{
	make(WS_FORWARD_F32);
	struct msg m;
	msg_split(&m, buf.data, buf.len);
	struct bytes out = {0};
	msg_add(&m, "ts", obj_int(5));
	msg_join(&m, &out, m.payload_len);
	struct wire_forward f;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_forward(out.p, out.len, &ws_limits, &scr, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(f.sent_ns, 5);
	cr_assert_eq(f.stamp_at, 0);
	m.kv[m.n - 1].val = obj_int(-5);
	msg_join(&m, &out, m.payload_len);
	expect_err(wire_decode_forward(out.p, out.len, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "\"ts\"");
	msg_free(&m);

	make(WS_RELEASE);
	msg_split(&m, buf.data, buf.len);
	msg_add(&m, "ts", obj_int(5));
	msg_join(&m, &out, m.payload_len);
	struct wire_release r;
	expect_err(wire_decode_release(out.p, out.len, &ws_limits, &scr, &r, &d), LM_EPROTO, &d,
		   "unknown key \"ts\"");
	msg_free(&m);
	bytes_free(&out);
}

/* test_ctl.c — coordinator/ctl: the coordinator's control connections to a worker.
 *
 * The worker is a stub: a REP socket on inproc:// served by a test thread that answers each
 * request as the test scripted it, with messages built by the wire encoders (the one answer no
 * encoder can build, another protocol version, is an encoded HELLO with its version byte
 * changed). ctl.c is the real thing, on a real REQ socket.
 *
 * Every test has the same timeout: Criterion's runner (BoxFort's timeout list) loses the
 * entry of a running test when one with an earlier deadline starts, which LeakSanitizer then
 * reports against the runner.
 */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/wire/transport.h"
#include "coordinator/supervise/ctl.h"

#define STUB_URL "inproc://ctl-stub"
#define FP_MESH  0xaaaabbbbccccddddull
#define FP_OTHER 0x1111222233334444ull

enum stub_answer {
	ANSWER_HELLO,       /* a HELLO reply naming slice [0, 2) with fingerprint `fp` */
	ANSWER_HELLO_V99,   /* the same, claiming protocol version 99 */
	ANSWER_ERROR,       /* ERROR LM_EBUSY with `err` */
	ANSWER_READY,       /* READY with fingerprint `fp` (the ASSIGN is kept in `assign`) */
	ANSWER_TRACE,       /* TRACE rows: `rows` rows of `payload` (the slot asked kept) */
	ANSWER_TRACE_HELLO, /* a HELLO reply to anything */
	ANSWER_KV,          /* KV_IMPORT keeps its slot in `kv`; KV_EXPORT gives `kv` back */
};

struct stub {
	nng_socket rep;
	pthread_t thread;
	_Atomic bool stop;
	/* The script: set by the test before the exchange. */
	_Atomic int answer;
	_Atomic int silent; /* requests left to leave unanswered */
	_Atomic int delay_ms;
	uint64_t fp;
	bool raw_fp; /* HELLO tells the fingerprint itself, as protocol version 3 did */
	const char *err;
	float payload[2 * 3 * 4]; /* [layers 2][rows 3][dim 4] */
	int32_t rows;
	/* What came, written by the stub's thread. */
	_Atomic int n_requests;
	_Atomic uint32_t last_type;
	struct wire_assign assign;
	_Atomic int32_t slot_asked;
	struct wire_kv kv; /* ANSWER_KV's one slot: payload points into kv_rows */
	uint8_t kv_rows[64];
	struct wire_buf out;
	char bad[256]; /* what went wrong on the stub's thread (no asserts there), checked at the end */
};

static struct wire_limits stub_limits(void)
{
	return (struct wire_limits){.fingerprint = FP_MESH,
				    .slots = 4,
				    .max_seq = 64,
				    .dim = 4,
				    .n_vocab = 300,
				    .max_batch = 32,
				    .max_seqs = 4,
				    .max_logprobs = 5};
}

static void stub_bad(struct stub *s, const char *what)
{
	if (s->bad[0] == '\0')
		snprintf(s->bad, sizeof s->bad, "%s", what);
}

static void stub_hello(struct stub *s, uint64_t id)
{
	struct wire_hello h = {.id = id,
			       .fingerprint = s->raw_fp ? s->fp : wire_hello_proof(s->fp, id),
			       .pid = 4242,
			       .has_slice = true,
			       .begin = 0,
			       .end = 2,
			       .embedding = true};
	snprintf(h.name, sizeof h.name, "w0");
	snprintf(h.build, sizeof h.build, "stub");
	if (wire_encode_hello(&s->out, &h, true) != 0)
		stub_bad(s, "encoding HELLO");
}

/* The reply to one request into s->out. */
static void stub_build(struct stub *s, const void *body, size_t len, const struct wire_head *h)
{
	wire_buf_reset(&s->out);
	switch (atomic_load(&s->answer)) {
	case ANSWER_HELLO:
	case ANSWER_TRACE_HELLO:
		stub_hello(s, h->id);
		break;
	case ANSWER_HELLO_V99:
		stub_hello(s, h->id);
		/* A map, then "v" (fixstr of 1) and the version as a positive fixint. */
		if (s->out.len > 4 && s->out.data[1] == 0xa1 && s->out.data[2] == 'v' &&
		    s->out.data[3] == WIRE_VERSION)
			s->out.data[3] = 99;
		else
			stub_bad(s, "HELLO does not start with the version as expected");
		break;
	case ANSWER_ERROR: {
		struct wire_error e = {.id = h->id, .code = LM_EBUSY, .about = h->type};
		snprintf(e.msg, sizeof e.msg, "%s", s->err);
		if (wire_encode_error(&s->out, &e) != 0)
			stub_bad(s, "encoding ERROR");
		break;
	}
	case ANSWER_READY: {
		if (wire_decode_assign(body, len, &s->assign, NULL) != 0)
			stub_bad(s, "decoding ASSIGN");
		struct wire_ready r = {.id = h->id,
				       .fingerprint = s->fp,
				       .kv_bytes = 1000,
				       .weight_bytes = 2000,
				       .rss_bytes = 3000};
		if (wire_encode_ready(&s->out, &r) != 0)
			stub_bad(s, "encoding READY");
		break;
	}
	case ANSWER_TRACE: {
		struct wire_limits lim = stub_limits();
		struct wire_kv k = {0};
		if (wire_decode_kv(body, len, &lim, &k, NULL) != 0)
			stub_bad(s, "decoding TRACE");
		atomic_store(&s->slot_asked, k.slot);
		struct wire_kv r = {.id = h->id,
				    .fingerprint = FP_MESH,
				    .slot = k.slot,
				    .len = s->rows,
				    .payload = s->payload,
				    .payload_len = sizeof s->payload};
		if (wire_encode_kv(&s->out, WIRE_TRACE, &r) != 0)
			stub_bad(s, "encoding TRACE");
		break;
	}
	case ANSWER_KV: {
		struct wire_limits lim = stub_limits();
		struct wire_kv k = {0};
		if (wire_decode_kv(body, len, &lim, &k, NULL) != 0) {
			stub_bad(s, "decoding KV");
			break;
		}
		atomic_store(&s->slot_asked, k.slot);
		if (h->type == WIRE_KV_IMPORT) {
			if (k.payload_len > sizeof s->kv_rows) {
				stub_bad(s, "KV_IMPORT past the stub's room");
				break;
			}
			memcpy(s->kv_rows, k.payload, k.payload_len);
			s->kv = k;
			s->kv.payload = s->kv_rows;
			if (wire_encode_simple(&s->out, WIRE_KV_IMPORT, h->id, FP_MESH) != 0)
				stub_bad(s, "encoding the KV_IMPORT ack");
		} else {
			struct wire_kv r = s->kv;
			r.id = h->id;
			r.fingerprint = FP_MESH;
			if (wire_encode_kv(&s->out, WIRE_KV_EXPORT, &r) != 0)
				stub_bad(s, "encoding KV_EXPORT");
		}
		break;
	}
	}
}

static void *stub_main(void *arg)
{
	struct stub *s = arg;
	while (!atomic_load(&s->stop)) {
		nng_msg *m;
		int rv = nng_recvmsg(s->rep, &m, 0);
		if (rv == NNG_ETIMEDOUT)
			continue;
		if (rv != 0)
			break;
		struct wire_head h = {0};
		wire_peek(nng_msg_body(m), nng_msg_len(m), &h, NULL);
		atomic_store(&s->last_type, h.type);
		atomic_fetch_add(&s->n_requests, 1);
		if (atomic_load(&s->silent) > 0) {
			atomic_fetch_sub(&s->silent, 1);
			nng_msg_free(m);
			continue;
		}
		stub_build(s, nng_msg_body(m), nng_msg_len(m), &h);
		nng_msg_free(m);
		if (atomic_load(&s->delay_ms) > 0)
			usleep((useconds_t)atomic_load(&s->delay_ms) * 1000);
		nng_msg *r;
		if (nng_msg_alloc(&r, 0) != 0 || nng_msg_append(r, s->out.data, s->out.len) != 0) {
			stub_bad(s, "out of memory");
			break;
		}
		if (nng_sendmsg(s->rep, r, 0) != 0)
			nng_msg_free(r); /* the asker gave up and reopened */
	}
	return NULL;
}

static void stub_up(struct stub *s, enum stub_answer a)
{
	memset(s, 0, sizeof *s);
	s->answer = a;
	s->fp = FP_MESH;
	s->err = "worker w0 already holds layers [0, 2)";
	cr_assert_eq(nng_rep0_open(&s->rep), 0);
	nng_socket_set_ms(s->rep, NNG_OPT_RECVTIMEO, 20);
	nng_socket_set_ms(s->rep, NNG_OPT_SENDTIMEO, 1000);
	cr_assert_eq(nng_listen(s->rep, STUB_URL, NULL, 0), 0);
	cr_assert_eq(pthread_create(&s->thread, NULL, stub_main, s), 0);
}

static void stub_down(struct stub *s)
{
	atomic_store(&s->stop, true);
	pthread_join(s->thread, NULL);
	cr_expect_str_eq(s->bad, "");
	cr_expect_eq(lm_close_bounded(s->rep, 2000), 0);
	wire_buf_fini(&s->out);
}

static void conn_open(struct ctl_conn *c)
{
	lm_diag d = {{0}};
	memset(c, 0, sizeof *c);
	cr_assert_eq(ctl_open(c, "w0", STUB_URL, &d), 0, "%s", d.msg);
}

static void expect_in(const char *msg, const char *part)
{
	cr_expect(strstr(msg, part) != NULL, "'%s' lacks '%s'", msg, part);
}

Test(ctl, hello_of_another_protocol_version_fails_naming_both, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_HELLO_V99);
	conn_open(&c);
	struct wire_hello h;
	lm_diag d = {{0}};
	cr_expect_eq(ctl_hello(&c, FP_MESH, &h, 2000, &d), LM_EVERSION, "%s", d.msg);
	char mine[32];
	snprintf(mine, sizeof mine, "version %d", WIRE_VERSION);
	expect_in(d.msg, "version 99");
	expect_in(d.msg, mine);
	ctl_close(&c);
	ctl_close(&c); /* harmless twice */
	stub_down(&s);
}

/* A worker that already holds a slice of another model is refused, the mesh's fingerprint
 * named (the worker's HELLO proves which it holds, it does not tell it); one of the same model
 * (or a check asked without a fingerprint) passes with its identity. */
Test(ctl, hello_with_another_models_fingerprint_fails_naming_the_meshs, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_HELLO);
	s.fp = FP_OTHER;
	conn_open(&c);
	struct wire_hello h;
	lm_diag d = {{0}};
	cr_expect_eq(ctl_hello(&c, FP_MESH, &h, 2000, &d), LM_EFINGERPRINT, "%s", d.msg);
	expect_in(d.msg, "aaaabbbbccccdddd");
	expect_in(d.msg, "another fingerprint");
	expect_in(d.msg, "w0");
	cr_expect(strstr(d.msg, "1111222233334444") == NULL, "%s", d.msg);
	cr_expect_eq(ctl_hello(&c, 0, &h, 2000, &d), 0, "%s", d.msg);
	cr_expect_eq(ctl_hello(&c, FP_OTHER, &h, 2000, &d), 0, "%s", d.msg);
	cr_expect_str_eq(h.name, "w0");
	cr_expect_str_eq(h.build, "stub");
	cr_expect_eq(h.pid, 4242);
	cr_expect(h.has_slice && h.begin == 0 && h.end == 2 && h.embedding && !h.head);
	cr_expect_eq(atomic_load(&s.n_requests), 3);
	ctl_close(&c);
	stub_down(&s);
}

/* HELLO proves the fingerprint and never tells it: each exchange asks with a fresh id, the
 * proof of one id is not that of another, and a reply that tells the fingerprint itself (or a
 * proof of another model) is refused. */
Test(ctl, hello_proves_the_fingerprint_without_telling_it, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_HELLO);
	conn_open(&c);
	struct wire_hello h1, h2;
	lm_diag d = {{0}};
	cr_assert_eq(ctl_hello(&c, FP_MESH, &h1, 2000, &d), 0, "%s", d.msg);
	cr_assert_eq(ctl_hello(&c, FP_MESH, &h2, 2000, &d), 0, "%s", d.msg);
	cr_expect_neq(h1.id, h2.id, "two exchanges asked with the same id");
	cr_expect_neq(h1.fingerprint, FP_MESH);
	cr_expect_neq(h1.fingerprint, h2.fingerprint);
	cr_expect_eq(h1.fingerprint, wire_hello_proof(FP_MESH, h1.id));
	cr_expect_neq(wire_hello_proof(FP_MESH, h1.id), wire_hello_proof(FP_OTHER, h1.id));
	cr_expect_eq(wire_hello_proof(0, h1.id), 0, "no model, no proof");
	s.raw_fp = true;
	cr_expect_eq(ctl_hello(&c, FP_MESH, &h1, 2000, &d), LM_EFINGERPRINT, "%s", d.msg);
	ctl_close(&c);
	stub_down(&s);
}

/* An ERROR reply fails the exchange with the worker's code and message, the worker named, on
 * every path: ctl_call's (REPOINT, KV_IMPORT, TRACE) and ctl_assign's own. */
Test(ctl, an_error_reply_becomes_a_failure_with_the_workers_message, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_ERROR);
	conn_open(&c);
	lm_diag d = {{0}};
	cr_expect_eq(ctl_repoint(&c, FP_MESH, "inproc://elsewhere", &d), LM_EBUSY, "%s", d.msg);
	expect_in(d.msg, "worker w0: worker w0 already holds layers [0, 2)");
	cr_expect_eq(atomic_load(&s.last_type), WIRE_REPOINT);

	d.msg[0] = '\0';
	float rows[4] = {1, 2, 3, 4};
	struct ctl_kv_rows kr = {.len = 1, .hi = 1, .data = rows, .bytes = sizeof rows};
	cr_expect_eq(ctl_kv_import(&c, FP_MESH, 1, &kr, &d), LM_EBUSY);
	expect_in(d.msg, "already holds layers [0, 2)");
	cr_expect_eq(atomic_load(&s.last_type), WIRE_KV_IMPORT);

	struct wire_assign a = {.id = 1, .begin = 0, .end = 2, .embedding = true};
	snprintf(a.model, sizeof a.model, "/models/m.gguf");
	snprintf(a.next, sizeof a.next, "inproc://next");
	a.max_seq = a.slots = a.max_batch = 1;
	a.wire_dtype = WIRE_DT_F32;
	struct wire_ready ready;
	d.msg[0] = '\0';
	cr_expect_eq(ctl_assign(&c, &a, FP_MESH, &ready, 2000, NULL, NULL, &d), LM_EBUSY, "%s",
		     d.msg);
	expect_in(d.msg, "worker w0: worker w0 already holds layers [0, 2)");
	cr_expect_eq(atomic_load(&s.last_type), WIRE_ASSIGN);
	ctl_close(&c);
	stub_down(&s);
}

/* A worker that never answers: the exchange times out, and the connection, reopened by ctl,
 * carries the next exchange. ctl_hello_wait keeps asking until the worker answers. */
Test(ctl, a_reply_that_never_comes_times_out_and_the_connection_recovers, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_HELLO);
	atomic_store(&s.silent, 1);
	conn_open(&c);
	struct wire_hello h;
	lm_diag d = {{0}};
	int64_t t0 = lm_now_ms();
	cr_expect_eq(ctl_hello(&c, FP_MESH, &h, 200, &d), LM_ETIMEOUT, "%s", d.msg);
	int64_t took = lm_now_ms() - t0;
	cr_expect_geq(took, 195, "timed out after %lld ms", (long long)took);
	cr_expect_lt(took, 3000, "timed out after %lld ms", (long long)took);
	expect_in(d.msg, "worker w0");
	expect_in(d.msg, STUB_URL);
	cr_expect(c.open, "ctl did not reopen the connection");

	cr_expect_eq(ctl_hello(&c, FP_MESH, &h, 2000, &d), 0, "%s", d.msg);
	cr_expect_str_eq(h.name, "w0");
	cr_expect_eq(atomic_load(&s.n_requests), 2);

	atomic_store(&s.silent, 2);
	cr_expect_eq(ctl_hello_wait(&c, FP_MESH, &h, 5000, NULL, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(atomic_load(&s.n_requests), 5);
	ctl_close(&c);
	stub_down(&s);
}

static bool gone(void *arg)
{
	(void)arg;
	return false;
}

static bool still_here(void *arg)
{
	(void)arg;
	return true;
}

/* ASSIGN then READY: the worker gets the assignment as sent, the coordinator the READY's
 * figures; READY of another model is refused naming both fingerprints; a worker that dies
 * while loading ends the wait, and the connection still works afterwards. */
Test(ctl, assign_then_ready, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_READY);
	conn_open(&c);
	struct wire_assign a = {.id = 7,
				.begin = 2,
				.end = 5,
				.head = true,
				.max_seq = 256,
				.slots = 3,
				.k_type = LM_Q8_0,
				.v_type = LM_F16,
				.wire_dtype = WIRE_DT_F16,
				.max_batch = 64};
	snprintf(a.model, sizeof a.model, "/models/m.gguf");
	snprintf(a.next, sizeof a.next, "ipc:///tmp/coordinator.sock");
	struct wire_ready ready;
	lm_diag d = {{0}};
	cr_assert_eq(ctl_assign(&c, &a, FP_MESH, &ready, 2000, NULL, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(ready.fingerprint, FP_MESH);
	cr_expect_eq(ready.kv_bytes, 1000);
	cr_expect_eq(ready.weight_bytes, 2000);
	cr_expect_eq(ready.rss_bytes, 3000);
	cr_expect_str_eq(s.assign.model, a.model);
	cr_expect_str_eq(s.assign.next, a.next);
	cr_expect(s.assign.begin == 2 && s.assign.end == 5 && !s.assign.embedding && s.assign.head);
	cr_expect(s.assign.max_seq == 256 && s.assign.slots == 3 && s.assign.max_batch == 64);
	cr_expect(s.assign.k_type == LM_Q8_0 && s.assign.v_type == LM_F16 &&
		  s.assign.wire_dtype == WIRE_DT_F16);

	s.fp = FP_OTHER;
	cr_expect_eq(ctl_assign(&c, &a, FP_MESH, &ready, 2000, NULL, NULL, &d), LM_EFINGERPRINT);
	expect_in(d.msg, "1111222233334444");
	expect_in(d.msg, "aaaabbbbccccdddd");

	/* A load that takes longer than a second: the READY that comes at last is taken (a
	 * REQ socket whose receive timed out would have given the request up). */
	s.fp = FP_MESH;
	atomic_store(&s.delay_ms, 1500);
	cr_expect_eq(ctl_assign(&c, &a, FP_MESH, &ready, 10000, still_here, NULL, &d), 0, "%s",
		     d.msg);
	cr_expect_eq(ready.kv_bytes, 1000);

	/* ctl_assign asks `alive` while it waits. */
	int64_t t0 = lm_now_ms();
	cr_expect_eq(ctl_assign(&c, &a, FP_MESH, &ready, 10000, gone, NULL, &d), LM_EUNAVAILABLE);
	cr_expect_lt(lm_now_ms() - t0, 3000);
	expect_in(d.msg, "exited while loading");
	atomic_store(&s.delay_ms, 0); /* its late READY goes to the closed connection */
	cr_expect_eq(ctl_assign(&c, &a, FP_MESH, &ready, 2000, NULL, NULL, &d), 0, "%s", d.msg);
	ctl_close(&c);
	stub_down(&s);
}

/* TRACE: the slot asked reaches the worker; the rows come back as a copy the caller owns. */
Test(ctl, trace_rows_are_copied_out, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_TRACE);
	for (int i = 0; i < 24; i++)
		s.payload[i] = (float)i * 0.25f - 3.0f;
	s.rows = 3;
	conn_open(&c);
	struct wire_limits lim = stub_limits();
	int32_t rows = -1;
	void *data = NULL;
	size_t bytes = 0;
	lm_diag d = {{0}};
	cr_assert_eq(ctl_trace(&c, FP_MESH, &lim, 2, &rows, &data, &bytes, &d), 0, "%s", d.msg);
	cr_expect_eq(atomic_load(&s.slot_asked), 2);
	cr_expect_eq(rows, 3);
	cr_assert_eq(bytes, sizeof s.payload);
	cr_expect_eq(memcmp(data, s.payload, bytes), 0);
	memset(s.payload, 0, sizeof s.payload); /* the copy is the caller's, not the message's */
	cr_expect_eq(((float *)data)[23], 23 * 0.25f - 3.0f);
	free(data);
	/* Arming only (rows NULL): nothing is copied. */
	cr_expect_eq(ctl_trace(&c, FP_MESH, &lim, 1, NULL, NULL, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(atomic_load(&s.slot_asked), 1);
	ctl_close(&c);
	stub_down(&s);
}

/* KV_IMPORT then KV_EXPORT of a slot: the length, the high-water mark (a rejected draft's rows
 * past the length, which a redeploy must carry) and the rows cross both ways unchanged. */
Test(ctl, kv_rows_and_their_high_water_mark_cross_both_ways, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_KV);
	conn_open(&c);
	struct wire_limits lim = stub_limits();
	uint8_t rows[48];
	for (size_t i = 0; i < sizeof rows; i++)
		rows[i] = (uint8_t)(i * 37 + 11);
	struct ctl_kv_rows sent = {.len = 3, .hi = 7, .data = rows, .bytes = sizeof rows};
	lm_diag d = {{0}};
	cr_assert_eq(ctl_kv_import(&c, FP_MESH, 2, &sent, &d), 0, "%s", d.msg);
	cr_expect_eq(atomic_load(&s.slot_asked), 2);
	cr_expect(s.kv.len == 3 && s.kv.hi == 7, "the worker got len %d hi %d", s.kv.len, s.kv.hi);
	struct ctl_kv_rows back;
	cr_assert_eq(ctl_kv_export(&c, FP_MESH, &lim, 2, &back, &d), 0, "%s", d.msg);
	cr_expect(back.len == 3 && back.hi == 7, "exported len %d hi %d", back.len, back.hi);
	cr_assert_eq(back.bytes, sizeof rows);
	cr_expect_eq(memcmp(back.data, rows, sizeof rows), 0);
	free(back.data);
	/* Without rows past the length, hi is the length. */
	sent.hi = 3;
	cr_assert_eq(ctl_kv_import(&c, FP_MESH, 2, &sent, &d), 0, "%s", d.msg);
	cr_assert_eq(ctl_kv_export(&c, FP_MESH, &lim, 2, &back, &d), 0, "%s", d.msg);
	cr_expect(back.len == 3 && back.hi == 3, "exported len %d hi %d", back.len, back.hi);
	free(back.data);
	ctl_close(&c);
	stub_down(&s);
}

/* An answer of another type than the request's is a protocol error naming both. */
Test(ctl, a_reply_of_another_type_is_a_protocol_error, .timeout = 15)
{
	struct stub s;
	struct ctl_conn c;
	stub_up(&s, ANSWER_TRACE_HELLO);
	conn_open(&c);
	struct wire_limits lim = stub_limits();
	int32_t rows;
	void *data = NULL;
	size_t bytes;
	lm_diag d = {{0}};
	cr_expect_eq(ctl_trace(&c, FP_MESH, &lim, 0, &rows, &data, &bytes, &d), LM_EPROTO);
	cr_expect_null(data);
	expect_in(d.msg, "worker w0 answered HELLO to TRACE");
	ctl_close(&c);
	stub_down(&s);
}

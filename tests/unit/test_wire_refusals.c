/* test_wire_refusals.c — the wire protocol codec: what the decoder must refuse, and how.
 *
 * Messages are built by the encoders, then broken with msgpack-c (wire_surgery.h: split a
 * message into its header's keys, swap a value, join it again): every key missing, duplicated
 * and of every wrong type; versions and fingerprints; every field's range; payload lengths;
 * hostile structure (huge counts, deep nesting, truncation, random flips). Each refusal names
 * what was wrong.
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

TestSuite(wire_refusals, .init = wire_setup, .fini = wire_teardown, .timeout = 20);

/* ---------------------------------------------------------------- generic malformations */

/* Every key of every sample: missing, duplicated, of every wrong type; and an unknown key. */
Test(wire_refusals, missing_duplicate_unknown_and_mistyped_keys)
{
	wrong_init();
	struct bytes out = {0};
	for (int k = 0; k < WS_COUNT; k++) {
		make(k);
		struct msg m;
		msg_split(&m, buf.data, buf.len);
		const uint32_t n = m.n;
		msgpack_object_kv saved[32];
		memcpy(saved, m.kv, sizeof saved);
		for (uint32_t i = 0; i < n; i++) {
			char key[16], quoted[20];
			msg_key(&m, i, key, sizeof key);
			snprintf(quoted, sizeof quoted, "\"%s\"", key);
			lm_diag d = {{0}};
			int rc;

			/* Missing: every key is required but HELLO's slice and KV's "hi" (absent:
			 * len). */
			memmove(&m.kv[i], &m.kv[i + 1], (n - i - 1) * sizeof m.kv[0]);
			m.n = n - 1;
			msg_join(&m, &out, m.payload_len);
			rc = ws_decode(k, out.p, out.len, &scr, &d);
			if ((k == WS_HELLO_REPLY && strcmp(key, "slice") == 0) ||
			    (k == WS_KV_IMPORT_HI && strcmp(key, "hi") == 0)) {
				cr_assert_eq(rc, 0, "%s", d.msg);
			} else {
				cr_assert_eq(rc, LM_EPROTO, "%s without %s: %s", ws_names[k], key,
					     d.msg);
				cr_assert(strstr(d.msg, quoted) && strstr(d.msg, "missing"),
					  "%s without %s: %s", ws_names[k], key, d.msg);
			}
			memcpy(m.kv, saved, sizeof saved);
			m.n = n;

			/* Duplicated (right after itself and at the end). */
			for (int where = 0; where < 2; where++) {
				uint32_t at = where == 0 ? i + 1 : n;
				memmove(&m.kv[at + 1], &m.kv[at], (n - at) * sizeof m.kv[0]);
				m.kv[at] = saved[i];
				m.n = n + 1;
				msg_join(&m, &out, m.payload_len);
				rc = ws_decode(k, out.p, out.len, &scr, &d);
				cr_assert_eq(rc, LM_EPROTO, "%s with %s twice: %s", ws_names[k],
					     key, d.msg);
				cr_assert(strstr(d.msg, "duplicate key") && strstr(d.msg, quoted),
					  "%s: %s", ws_names[k], d.msg);
				memcpy(m.kv, saved, sizeof saved);
				m.n = n;
			}

			/* Every value of another kind. */
			for (int w = 0; w < 9; w++) {
				if (kind(&wrong_values[w]) == kind(&saved[i].val))
					continue;
				m.kv[i].val = wrong_values[w];
				msg_join(&m, &out, m.payload_len);
				rc = ws_decode(k, out.p, out.len, &scr, &d);
				cr_assert_eq(rc, LM_EPROTO, "%s with %s = %s: %s", ws_names[k], key,
					     wrong_names[w], d.msg);
				cr_assert(strstr(d.msg, quoted), "%s with %s = %s: %s", ws_names[k],
					  key, wrong_names[w], d.msg);
				m.kv[i].val = saved[i].val;
			}
		}
		/* Unknown keys: a made-up one, another type's, and one that is not a string. */
		const char *unknown[] = {"zz", "toks", "seqs", "vv", ""};
		for (size_t u = 0; u < sizeof unknown / sizeof unknown[0]; u++) {
			if (msg_find(&m, unknown[u]) >= 0)
				continue;
			m.kv[n].key = obj_str(unknown[u]);
			m.kv[n].val = obj_int(1);
			m.n = n + 1;
			msg_join(&m, &out, m.payload_len);
			lm_diag d = {{0}};
			char quoted[20];
			snprintf(quoted, sizeof quoted, "\"%s\"", unknown[u]);
			int rc = ws_decode(k, out.p, out.len, &scr, &d);
			cr_assert_eq(rc, LM_EPROTO, "%s + %s: %s", ws_names[k], unknown[u], d.msg);
			cr_assert(strstr(d.msg, "unknown key") && strstr(d.msg, quoted), "%s: %s",
				  ws_names[k], d.msg);
			m.n = n;
		}
		m.kv[n].key = obj_int(7);
		m.kv[n].val = obj_int(1);
		m.n = n + 1;
		msg_join(&m, &out, m.payload_len);
		lm_diag d = {{0}};
		expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EPROTO, &d, "not a string");
		msg_free(&m);
	}
	bytes_free(&out);
}

/* The entries of arrays-of-arrays and of the slice: wrong types and wrong lengths. */
static const char *const seq_elems[13] = {
	"seq_id",      "slot",  "pos",   "n_tokens", "sample", "step",   "n_logprobs",
	"temperature", "top_k", "top_p", "min_p",    "seed",   "n_draft"};
static const char *const tok_elems[4] = {"seq_id", "token", "logprob", "n_top"};
static const char *const slice_elems[4] = {"begin", "end", "embedding", "head"};

static void nested_cases(int sample, const char *key, int entry, const char *const *names,
			 uint32_t arity)
{
	struct bytes out = {0};
	make(sample);
	struct msg m;
	msg_split(&m, buf.data, buf.len);
	int i = msg_find(&m, key);
	cr_assert_geq(i, 0);
	msgpack_object *arr = &m.kv[i].val; /* the objects live in m.u's zone: editable */
	msgpack_object *tuple = entry >= 0 ? &arr->via.array.ptr[entry] : arr;
	cr_assert_eq(tuple->via.array.size, arity);
	char path[32];
	if (entry >= 0)
		snprintf(path, sizeof path, "\"%s\"[%d]", key, entry);
	else
		snprintf(path, sizeof path, "\"%s\"", key);
	for (uint32_t j = 0; j < arity; j++) {
		msgpack_object saved = tuple->via.array.ptr[j];
		for (int w = 0; w < 9; w++) {
			if (kind(&wrong_values[w]) == kind(&saved))
				continue;
			tuple->via.array.ptr[j] = wrong_values[w];
			msg_join(&m, &out, m.payload_len);
			lm_diag d = {{0}};
			int rc = ws_decode(sample, out.p, out.len, &scr, &d);
			cr_assert_eq(rc, LM_EPROTO, "%s %s = %s: %s", path, names[j],
				     wrong_names[w], d.msg);
			cr_assert(strstr(d.msg, path) && strstr(d.msg, names[j]), "%s", d.msg);
		}
		tuple->via.array.ptr[j] = saved;
	}
	/* One element short. */
	tuple->via.array.size = arity - 1;
	msg_join(&m, &out, m.payload_len);
	lm_diag d = {{0}};
	expect_err(ws_decode(sample, out.p, out.len, &scr, &d), LM_EPROTO, &d, path);
	cr_assert(strstr(d.msg, "elements"), "%s", d.msg);
	/* One element too many. */
	msgpack_object more[16];
	memcpy(more, tuple->via.array.ptr, arity * sizeof more[0]);
	more[arity] = obj_int(0);
	msgpack_object *orig = tuple->via.array.ptr;
	tuple->via.array.ptr = more;
	tuple->via.array.size = arity + 1;
	msg_join(&m, &out, m.payload_len);
	expect_err(ws_decode(sample, out.p, out.len, &scr, &d), LM_EPROTO, &d, path);
	tuple->via.array.ptr = orig;
	tuple->via.array.size = arity;
	/* The entry itself not an array. */
	if (entry >= 0) {
		msgpack_object saved = *tuple;
		*tuple = obj_int(3);
		msg_join(&m, &out, m.payload_len);
		expect_err(ws_decode(sample, out.p, out.len, &scr, &d), LM_EPROTO, &d, path);
		*tuple = saved;
	}
	msg_free(&m);
	bytes_free(&out);
}

Test(wire_refusals, mistyped_array_entries)
{
	wrong_init();
	nested_cases(WS_FORWARD_F32, "seqs", 0, seq_elems, 13);
	nested_cases(WS_FORWARD_F32, "seqs", 2, seq_elems, 13);
	nested_cases(WS_FORWARD_DRAFT, "seqs", 2, seq_elems, 13);
	nested_cases(WS_TOKENS, "toks", 1, tok_elems, 4);
	nested_cases(WS_HELLO_REPLY, "slice", -1, slice_elems, 4);
	nested_cases(WS_ASSIGN, "slice", -1, slice_elems, 4);
	/* RELEASE's slots are plain integers. */
	make(WS_RELEASE);
	struct msg m;
	struct bytes out = {0};
	msg_split(&m, buf.data, buf.len);
	msgpack_object *slots = &m.kv[msg_find(&m, "slots")].val;
	for (int w = 0; w < 9; w++) {
		if (kind(&wrong_values[w]) == 1)
			continue;
		msgpack_object saved = slots->via.array.ptr[3];
		slots->via.array.ptr[3] = wrong_values[w];
		msg_join(&m, &out, 0);
		lm_diag d = {{0}};
		expect_err(ws_decode(WS_RELEASE, out.p, out.len, &scr, &d), LM_EPROTO, &d,
			   "\"slots\"[3]");
		slots->via.array.ptr[3] = saved;
	}
	msg_free(&m);
	bytes_free(&out);
}

/* ---------------------------------------------------------------- version and fingerprint */

Test(wire_refusals, wrong_version_names_both_versions_whatever_else_is_wrong)
{
	struct bytes out = {0};
	for (int k = 0; k < WS_COUNT; k++) {
		make(k);
		struct msg m;
		msg_split(&m, buf.data, buf.len);
		int v = msg_find(&m, "v");
		const int64_t others[] = {WIRE_VERSION + 1, 0, 4000000000};
		for (int j = 0; j < 3; j++) {
			m.kv[v].val = obj_int(others[j]);
			msg_join(&m, &out, m.payload_len);
			lm_diag d = {{0}};
			char want[64];
			snprintf(want, sizeof want, "version %lld", (long long)others[j]);
			expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EVERSION, &d, want);
			cr_assert(strstr(d.msg, WS_SPEAKS_US), "%s", d.msg);
			struct wire_head h;
			expect_err(wire_peek(out.p, out.len, &h, &d), LM_EVERSION, &d, want);
			cr_assert_eq(h.version, (uint32_t)others[j]);
			cr_assert_eq(h.type, m.kv[msg_find(&m, "t")].val.via.u64);
			cr_assert_eq(h.id, m.kv[msg_find(&m, "id")].val.via.u64);
		}
		/* Another version may have other keys, lack ours, carry another type's: still a
		 * version mismatch, not a parse error. */
		m.kv[v].val = obj_int(WIRE_VERSION + 1);
		msg_add(&m, "new_key", wrong_values[8]);
		msg_join(&m, &out, m.payload_len + 3);
		lm_diag d = {{0}};
		expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EVERSION, &d, WS_SPEAKS_US);
		/* A version that is not even a u32. */
		m.kv[v].val = obj_int(-1);
		msg_join(&m, &out, m.payload_len);
		expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EPROTO, &d, "\"v\"");
		m.kv[v].val = obj_int(1LL << 32);
		msg_join(&m, &out, m.payload_len);
		expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EPROTO, &d, "\"v\"");
		msg_free(&m);
	}
	bytes_free(&out);
}

Test(wire_refusals, version_mismatch_on_hello_fills_version_and_id)
{
	/* A newer build's HELLO: the decoder reports both versions and keeps the id to echo. */
	struct bytes b = {0};
	msgpack_packer pk;
	msgpack_packer_init(&pk, &b, bytes_write);
	msgpack_pack_map(&pk, 4);
	pk_key(&pk, "id");
	msgpack_pack_uint64(&pk, 31);
	pk_key(&pk, "caps");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_str_with_body(&pk, "a", 1);
	msgpack_pack_nil(&pk);
	pk_key(&pk, "t");
	msgpack_pack_uint32(&pk, WIRE_HELLO);
	pk_key(&pk, "v");
	msgpack_pack_uint32(&pk, 7);
	struct wire_hello h;
	lm_diag d = {{0}};
	expect_err(wire_decode_hello(b.p, b.len, &h, &d), LM_EVERSION, &d, "version 7");
	cr_assert(strstr(d.msg, WS_SPEAKS_US), "%s", d.msg);
	cr_assert_eq(h.version, 7);
	cr_assert_eq(h.id, 31);
	bytes_free(&b);
}

/* A wrong fingerprint is refused naming the message's in hex, and never this side's: the
 * refusal goes back to whoever sent the message, who may not know the model. */
Test(wire_refusals, wrong_fingerprint_names_the_messages_only)
{
	for (int k = 0; k < WS_COUNT; k++) {
		if (!checks_fp(k))
			continue;
		make(k);
		struct wire_limits lim = ws_limits;
		lim.fingerprint = 0xfeedfacecafebeefull;
		lm_diag d = {{0}};
		int rc;
		switch (k) {
		case WS_FORWARD_F32:
		case WS_FORWARD_I32:
		case WS_FORWARD_F16:
		case WS_FORWARD_DRAFT: {
			struct wire_forward f;
			rc = wire_decode_forward(buf.data, buf.len, &lim, &scr, &f, &d);
			break;
		}
		case WS_TOKENS:
		case WS_TOKENS_EMPTY: {
			struct wire_tokens t;
			rc = wire_decode_tokens(buf.data, buf.len, &lim, &scr, &t, &d);
			break;
		}
		case WS_RELEASE: {
			struct wire_release r;
			rc = wire_decode_release(buf.data, buf.len, &lim, &scr, &r, &d);
			break;
		}
		case WS_COPY: {
			struct wire_copy c;
			rc = wire_decode_copy(buf.data, buf.len, &lim, &scr, &c, &d);
			break;
		}
		case WS_REPOINT: {
			struct wire_repoint r;
			rc = wire_decode_repoint(buf.data, buf.len, &lim, &r, &d);
			break;
		}
		case WS_DRAIN: {
			struct wire_head h;
			rc = wire_decode_simple(buf.data, buf.len, &lim, &h, &d);
			break;
		}
		default: {
			struct wire_kv kv;
			rc = wire_decode_kv(buf.data, buf.len, &lim, &kv, &d);
			break;
		}
		}
		expect_err(rc, LM_EFINGERPRINT, &d, "0x0123456789abcdef");
		cr_assert(strstr(d.msg, "feedfacecafebeef") == NULL, "%s", d.msg);
		/* Fingerprint 0 in the limits: not checked. */
		lim.fingerprint = 0;
		struct wire_head h;
		cr_assert_eq(wire_peek(buf.data, buf.len, &h, NULL), 0);
		cr_assert_eq(h.fingerprint, WS_FP);
	}
	/* The peek does not check fingerprints; an all-zero limits fingerprint accepts any. */
	make(WS_FORWARD_F32);
	struct wire_limits lim = ws_limits;
	lim.fingerprint = 0;
	struct wire_forward f;
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &lim, &scr, &f, NULL), 0);
}

Test(wire_refusals, type_mismatch_is_refused)
{
	lm_diag d = {{0}};
	make(WS_TOKENS);
	struct wire_forward f;
	expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "\"t\"");
	cr_assert(strstr(d.msg, "TOKENS"), "%s", d.msg);
	make(WS_FORWARD_F32);
	struct wire_head h;
	expect_err(wire_decode_simple(buf.data, buf.len, NULL, &h, &d), LM_EPROTO, &d, "\"t\"");
	make(WS_DRAIN);
	struct wire_kv kv;
	expect_err(wire_decode_kv(buf.data, buf.len, &ws_limits, &kv, &d), LM_EPROTO, &d, "DRAIN");
	/* An unknown type number. */
	struct msg m;
	struct bytes out = {0};
	msg_split(&m, buf.data, buf.len);
	m.kv[msg_find(&m, "t")].val = obj_int(WIRE_TYPE_MAX + 1);
	msg_join(&m, &out, 0);
	expect_err(wire_peek(out.p, out.len, &h, &d), LM_EPROTO, &d, "\"t\"");
	cr_assert_eq(h.type, WIRE_TYPE_MAX + 1);
	m.kv[msg_find(&m, "t")].val = obj_int(0);
	msg_join(&m, &out, 0);
	expect_err(wire_peek(out.p, out.len, &h, &d), LM_EPROTO, &d, "\"t\"");
	msg_free(&m);
	bytes_free(&out);
}

/* ---------------------------------------------------------------- ranges */

/* Encodes the FORWARD sample with one change and expects the decoder to name `needle`. */
static void forward_case(void (*edit)(struct wire_forward *f, struct wire_seq *q), int code,
			 const char *needle, const char *needle2)
{
	static const uint8_t zeros[65 * 16 * 4]; /* rows of 0.0f, or token ids 0 */
	struct wire_seq q[9];
	ws_seqs(q);
	for (int i = 3; i < 9; i++)
		q[i] = (struct wire_seq){
			.slot = i - 2, .pos = 0, .n_tokens = 1, .sampling = LM_SAMPLING_DEFAULT};
	struct wire_forward f = {.batch_id = 1,
				 .fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_F32,
				 .dim = 16};
	edit(&f, q);
	f.payload_len = (size_t)f.n_tokens * (size_t)f.dim * wire_dtype_size(f.dtype);
	f.payload = zeros;
	cr_assert_leq(f.payload_len, sizeof zeros);
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), 0);
	struct wire_forward g;
	lm_diag d = {{0}};
	expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d), code, &d,
		   needle);
	if (needle2 != NULL)
		cr_assert(strstr(d.msg, needle2), "'%s' not in: %s", needle2, d.msg);
}

static void e_slot_high(struct wire_forward *f, struct wire_seq *q)
{
	q[1].slot = 8;
}
static void e_slot_neg(struct wire_forward *f, struct wire_seq *q)
{
	q[0].slot = -1;
}
static void e_slot_dup(struct wire_forward *f, struct wire_seq *q)
{
	q[2].slot = 7;
}
static void e_pos_neg(struct wire_forward *f, struct wire_seq *q)
{
	q[2].pos = -1;
}
static void e_pos_past(struct wire_forward *f, struct wire_seq *q)
{
	q[2].pos = 254; /* 254 + 3 > 256 */
}
static void e_pos_huge(struct wire_forward *f, struct wire_seq *q)
{
	q[2].pos = INT32_MAX; /* pos + n_tokens overflows int32 */
}
static void e_ntok_zero(struct wire_forward *f, struct wire_seq *q)
{
	q[0].n_tokens = 0;
	f->n_tokens = 4;
}
static void e_rows_short(struct wire_forward *f, struct wire_seq *q)
{
	f->n_tokens = 7; /* the sequences cover 6 */
}
static void e_rows_past(struct wire_forward *f, struct wire_seq *q)
{
	f->n_tokens = 5; /* the last sequence runs to 6 */
}
static void e_n_zero(struct wire_forward *f, struct wire_seq *q)
{
	f->n_tokens = 0;
}
static void e_n_high(struct wire_forward *f, struct wire_seq *q)
{
	f->n_tokens = 65;
	q[2].n_tokens = 62;
}
static void e_no_seqs(struct wire_forward *f, struct wire_seq *q)
{
	f->n_seqs = 0;
}
static void e_many_seqs(struct wire_forward *f, struct wire_seq *q)
{
	f->n_seqs = 9; /* max_seqs 8 */
	f->n_tokens = 12;
	q[1].pos = 0;
}
static void e_logprobs_high(struct wire_forward *f, struct wire_seq *q)
{
	q[1].n_logprobs = 6;
}
static void e_logprobs_neg(struct wire_forward *f, struct wire_seq *q)
{
	q[0].n_logprobs = -1;
}
static void e_dt_none(struct wire_forward *f, struct wire_seq *q)
{
	f->dtype = WIRE_DT_NONE;
}
static void e_dt_raw(struct wire_forward *f, struct wire_seq *q)
{
	f->dtype = WIRE_DT_RAW;
}
static void e_dt_unknown(struct wire_forward *f, struct wire_seq *q)
{
	f->dtype = (enum wire_dtype)6;
}
static void e_dim_wrong(struct wire_forward *f, struct wire_seq *q)
{
	f->dim = 15;
}
static void e_dim_ids(struct wire_forward *f, struct wire_seq *q)
{
	f->dtype = WIRE_DT_I32;
	f->dim = 16;
}
static void e_top_p_zero(struct wire_forward *f, struct wire_seq *q)
{
	q[1].sampling.top_p = 0;
}
static void e_top_p_high(struct wire_forward *f, struct wire_seq *q)
{
	q[1].sampling.top_p = 1.5f;
}
static void e_min_p_neg(struct wire_forward *f, struct wire_seq *q)
{
	q[2].sampling.min_p = -0.1f;
}
static void e_min_p_high(struct wire_forward *f, struct wire_seq *q)
{
	q[2].sampling.min_p = 2.0f;
}
static void e_temp_nan(struct wire_forward *f, struct wire_seq *q)
{
	q[0].sampling.temperature = NAN;
}
static void e_temp_high(struct wire_forward *f, struct wire_seq *q)
{
	q[0].sampling.temperature = 101.0f;
}
static void e_top_p_nan(struct wire_forward *f, struct wire_seq *q)
{
	q[0].sampling.top_p = NAN;
}

Test(wire_refusals, forward_out_of_range_fields)
{
	forward_case(e_slot_high, LM_EPROTO, "\"seqs\"[1].slot", "8 is outside [0, 7]");
	forward_case(e_slot_neg, LM_EPROTO, "\"seqs\"[0].slot", "-1");
	forward_case(e_slot_dup, LM_EPROTO, "\"seqs\"[2].slot", "also sequence 1");
	forward_case(e_pos_neg, LM_EPROTO, "\"seqs\"[2].pos", "-1");
	forward_case(e_pos_past, LM_EPROTO, "\"seqs\"[2].pos", "max_seq 256");
	forward_case(e_pos_huge, LM_EPROTO, "\"seqs\"[2].pos", "max_seq");
	forward_case(e_ntok_zero, LM_EPROTO, "\"seqs\"[0].n_tokens", "0 is outside");
	forward_case(e_rows_short, LM_EPROTO, "\"seqs\"", "cover rows [0, 6)");
	forward_case(e_rows_past, LM_EPROTO, "\"seqs\"[2].n_tokens", "run past \"n\" = 5");
	forward_case(e_n_zero, LM_EPROTO, "\"n\"", "0 is outside [1, 64]");
	forward_case(e_n_high, LM_EPROTO, "\"n\"", "65 is outside [1, 64]");
	forward_case(e_no_seqs, LM_EPROTO, "\"seqs\"", "at least 1");
	forward_case(e_many_seqs, LM_EPROTO, "\"seqs\"", "max_seqs");
	forward_case(e_logprobs_high, LM_EPROTO, "\"seqs\"[1].n_logprobs", "[0, 5]");
	forward_case(e_logprobs_neg, LM_EPROTO, "\"seqs\"[0].n_logprobs", "-1");
	forward_case(e_dt_none, LM_EPROTO, "\"dt\"", "0 is outside");
	forward_case(e_dt_raw, LM_EPROTO, "\"dt\"", "5 is outside");
	forward_case(e_dt_unknown, LM_EPROTO, "\"dt\"", "6 is outside");
	forward_case(e_dim_wrong, LM_EPROTO, "\"dim\"", "15 where 16");
	forward_case(e_dim_ids, LM_EPROTO, "\"dim\"", "16 where 1");
	forward_case(e_top_p_zero, LM_EPROTO, "\"seqs\"[1].sampling", "top_p");
	forward_case(e_top_p_high, LM_EPROTO, "\"seqs\"[1].sampling", "top_p");
	forward_case(e_top_p_nan, LM_EPROTO, "\"seqs\"[0].sampling", "top_p");
	forward_case(e_min_p_neg, LM_EPROTO, "\"seqs\"[2].sampling", "min_p");
	forward_case(e_min_p_high, LM_EPROTO, "\"seqs\"[2].sampling", "min_p");
	forward_case(e_temp_nan, LM_EPROTO, "\"seqs\"[0].sampling", "temperature");
	forward_case(e_temp_high, LM_EPROTO, "\"seqs\"[0].sampling", "temperature");
}

Test(wire_refusals, forward_token_ids_checked_against_the_vocabulary)
{
	make(WS_FORWARD_I32);
	struct wire_forward f;
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, NULL), 0);
	size_t at = buf.len - f.payload_len;
	const int32_t bad[] = {1000, -1, INT32_MIN, INT32_MAX};
	for (int row = 0; row < 6; row += 5) {
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			make(WS_FORWARD_I32);
			memcpy(buf.data + at + 4 * (size_t)row, &bad[i], 4);
			lm_diag d = {{0}};
			char want[64];
			snprintf(want, sizeof want, "row %d: token id %d", row, bad[i]);
			expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, &d),
				   LM_EPROTO, &d, want);
			cr_assert(strstr(d.msg, "[0, 1000)"), "%s", d.msg);
		}
	}
	/* Hidden states are not ids: any bytes go. */
	make(WS_FORWARD_F32);
	memset(buf.data + buf.len - 16, 0xff, 16);
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, NULL), 0);
}

Test(wire_refusals, counts_above_the_scratch_cap)
{
	struct wire_scratch small;
	cr_assert_eq(wire_scratch_init(&small, 2), 0);
	lm_diag d = {{0}};
	make(WS_FORWARD_F32);
	struct wire_forward f;
	expect_err(wire_decode_forward(buf.data, buf.len, &ws_limits, &small, &f, &d), LM_EPROTO,
		   &d, "scratch");
	make(WS_TOKENS);
	struct wire_tokens t;
	expect_err(wire_decode_tokens(buf.data, buf.len, &ws_limits, &small, &t, &d), LM_EPROTO, &d,
		   "scratch");
	make(WS_RELEASE);
	struct wire_release r;
	expect_err(wire_decode_release(buf.data, buf.len, &ws_limits, &small, &r, &d), LM_EPROTO,
		   &d, "scratch");
	wire_scratch_fini(&small);
}

/* A FORWARD's drafts: n_draft within its tokens and max_draft, on a sampling sequence, and
 * "dr" holding exactly those ids, each a token; the first stage's re-encoding keeps them. */
static void draft_case(void (*edit)(struct wire_seq *q, struct wire_forward *f), const char *needle)
{
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	static int32_t drafts[8] = {998, 2};
	struct wire_seq q[3];
	ws_seqs(q);
	q[2].n_draft = 2;
	drafts[0] = 998, drafts[1] = 2;
	struct wire_forward f = {.batch_id = 1,
				 .fingerprint = WS_FP,
				 .n_seqs = 3,
				 .seqs = q,
				 .n_drafts = 2,
				 .drafts = drafts,
				 .n_tokens = 6,
				 .dtype = WIRE_DT_I32,
				 .dim = 1,
				 .payload = ids,
				 .payload_len = sizeof ids};
	if (edit != NULL)
		edit(q, &f);
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_forward(&buf, &f), 0);
	struct wire_forward g;
	lm_diag d = {{0}};
	int rc = wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &g, &d);
	if (needle == NULL) {
		cr_assert_eq(rc, 0, "%s", d.msg);
		return;
	}
	expect_err(rc, LM_EPROTO, &d, needle);
}

static void draft_over_tokens(struct wire_seq *q, struct wire_forward *f)
{
	q[2].n_draft = 3, f->n_drafts = 3;
}

/* One sequence of 6 tokens drafting 5: more than max_draft (4). */
static void draft_over_max(struct wire_seq *q, struct wire_forward *f)
{
	static int32_t five[5] = {1, 2, 3, 4, 5};
	q[2].pos = 0, q[2].n_tokens = 6, q[2].n_draft = 5;
	f->seqs = &q[2], f->n_seqs = 1, f->n_drafts = 5, f->drafts = five;
}

static void draft_no_sample(struct wire_seq *q, struct wire_forward *f)
{
	(void)f;
	q[2].sample = false;
}

static void draft_bad_id(struct wire_seq *q, struct wire_forward *f)
{
	(void)q;
	((int32_t *)f->drafts)[1] = 1000;
}

Test(wire_refusals, forward_drafts_checked)
{
	draft_case(NULL, NULL);
	make(WS_FORWARD_DRAFT);
	struct wire_forward f;
	cr_assert_eq(wire_decode_forward(buf.data, buf.len, &ws_limits, &scr, &f, NULL), 0);
	cr_assert_eq(f.seqs[2].n_draft, 2);
	cr_assert_eq(f.n_drafts, 2);
	cr_assert(f.drafts[0] == 998 && f.drafts[1] == 2);
	/* The first stage re-encodes the batch as hidden rows: the drafts travel on. */
	static float rows[6 * 16];
	f.dtype = WIRE_DT_F32, f.dim = 16, f.payload = rows, f.payload_len = sizeof rows;
	struct wire_buf again = {0};
	cr_assert_eq(wire_encode_forward(&again, &f), 0);
	struct wire_forward g;
	cr_assert_eq(wire_decode_forward(again.data, again.len, &ws_limits, &scr, &g, NULL), 0);
	cr_assert(g.n_drafts == 2 && g.drafts[0] == 998 && g.drafts[1] == 2);
	wire_buf_fini(&again);

	draft_case(draft_over_tokens, "\"seqs\"[2].n_draft");
	draft_case(draft_over_max, "\"seqs\"[0].n_draft: 5 is outside [0, 4]");
	draft_case(draft_no_sample, "drafts of a sequence that does not sample");
	draft_case(draft_bad_id, "\"dr\"[1]");
	/* "dr" must hold exactly the drafted ids. */
	make(WS_FORWARD_DRAFT);
	struct msg m;
	struct bytes out = {0};
	msg_split(&m, buf.data, buf.len);
	msgpack_object *dr = &m.kv[msg_find(&m, "dr")].val;
	dr->via.array.size = 1;
	msg_join(&m, &out, m.payload_len);
	lm_diag d = {{0}};
	expect_err(wire_decode_forward(out.p, out.len, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "1 ids where the sequences draft 2 tokens");
	/* Missing while some sequence drafts. */
	int i = msg_find(&m, "dr");
	m.kv[i] = m.kv[--m.n];
	msg_join(&m, &out, m.payload_len);
	expect_err(wire_decode_forward(out.p, out.len, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "\"dr\": missing: the sequences draft 2 tokens");
	msg_free(&m);
	bytes_free(&out);
}

/* KV rows carry the high-water mark of their slot: at least len, at most max_seq. */
Test(wire_refusals, kv_high_water_mark)
{
	make(WS_KV_IMPORT_HI);
	struct wire_kv k;
	lm_diag d = {{0}};
	cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &k, &d), 0, "%s", d.msg);
	cr_assert(k.len == 250 && k.hi == 256);
	make(WS_KV_IMPORT);
	cr_assert_eq(wire_decode_kv(buf.data, buf.len, &ws_limits, &k, &d), 0, "%s", d.msg);
	cr_assert(k.len == 256 && k.hi == 256); /* absent: len */
	struct wire_kv bad = {.id = 1, .fingerprint = WS_FP, .slot = 0, .len = 5, .hi = 4};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_kv(&buf, WIRE_KV_IMPORT, &bad), LM_EINVAL);
	make(WS_KV_IMPORT_HI);
	struct msg m;
	struct bytes out = {0};
	msg_split(&m, buf.data, buf.len);
	m.kv[msg_find(&m, "hi")].val = obj_int(249);
	msg_join(&m, &out, m.payload_len);
	expect_err(wire_decode_kv(out.p, out.len, &ws_limits, &k, &d), LM_EPROTO, &d, "\"hi\"");
	m.kv[msg_find(&m, "hi")].val = obj_int(257);
	msg_join(&m, &out, m.payload_len);
	expect_err(wire_decode_kv(out.p, out.len, &ws_limits, &k, &d), LM_EPROTO, &d, "\"hi\"");
	msg_free(&m);
	bytes_free(&out);
}

static void tokens_case(struct wire_token *t, int n, const void *payload, size_t len,
			const char *needle, const char *needle2)
{
	struct wire_tokens m = {.batch_id = 1,
				.fingerprint = WS_FP,
				.n = n,
				.toks = t,
				.payload = payload,
				.payload_len = len};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_tokens(&buf, &m), 0);
	struct wire_tokens g;
	lm_diag d = {{0}};
	expect_err(wire_decode_tokens(buf.data, buf.len, &ws_limits, &scr, &g, &d), LM_EPROTO, &d,
		   needle);
	if (needle2 != NULL)
		cr_assert(strstr(d.msg, needle2), "'%s' not in: %s", needle2, d.msg);
}

Test(wire_refusals, tokens_out_of_range_fields)
{
	struct wire_token t[9];
	for (int i = 0; i < 9; i++)
		t[i] = (struct wire_token){.seq_id = (uint64_t)i, .token = i, .logprob = -1.0f};
	t[1].token = 1000;
	tokens_case(t, 2, NULL, 0, "\"toks\"[1].token", "1000 is outside [0, 999]");
	t[1].token = -1;
	tokens_case(t, 2, NULL, 0, "\"toks\"[1].token", "-1");
	t[1].token = 1;
	t[0].logprob = 0.5f;
	tokens_case(t, 2, NULL, 0, "\"toks\"[0].logprob", "not a log-probability");
	t[0].logprob = NAN;
	tokens_case(t, 2, NULL, 0, "\"toks\"[0].logprob", "not a log-probability");
	t[0].logprob = INFINITY;
	tokens_case(t, 2, NULL, 0, "\"toks\"[0].logprob", NULL);
	t[0].logprob = -1.0f;
	t[1].n_top = 6;
	static uint8_t tops[64];
	tokens_case(t, 2, tops, 48, "\"toks\"[1].n_top", "[0, 5]");
	t[1].n_top = 0;
	/* A speculating sequence gets several entries: up to one per row of the batch. */
	static struct wire_token many[65];
	for (int i = 0; i < 65; i++)
		many[i] = (struct wire_token){.seq_id = 3, .token = i, .logprob = -1.0f};
	struct wire_tokens ok = {.batch_id = 1, .fingerprint = WS_FP, .n = 64, .toks = many};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_tokens(&buf, &ok), 0);
	struct wire_tokens got;
	cr_assert_eq(wire_decode_tokens(buf.data, buf.len, &ws_limits, &scr, &got, NULL), 0);
	cr_assert_eq(got.n, 64);
	tokens_case(many, 65, NULL, 0, "\"toks\"", "max_batch");

	/* Alternatives in the payload: ids in the vocabulary, log-probabilities. */
	t[0].n_top = 2;
	int32_t ids[2] = {5, 1000};
	float lps[2] = {-1.0f, -2.0f};
	memcpy(tops, ids, 8);
	memcpy(tops + 8, lps, 8);
	tokens_case(t, 2, tops, 16, "token 0's alternative 1 has id 1000", NULL);
	ids[1] = 6;
	lps[0] = 0.25f;
	memcpy(tops, ids, 8);
	memcpy(tops + 8, lps, 8);
	tokens_case(t, 2, tops, 16, "token 0's alternative 0 has logprob", NULL);
	lps[0] = NAN;
	memcpy(tops + 8, lps, 8);
	tokens_case(t, 2, tops, 16, "token 0's alternative 0 has logprob", NULL);
}

Test(wire_refusals, release_out_of_range)
{
	lm_diag d = {{0}};
	struct wire_release g;
	int32_t slots[9] = {0, 8, 1, 2, 3, 4, 5, 6, 7};
	struct wire_release r = {.id = 1, .fingerprint = WS_FP, .n = 2, .slots = slots};
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_release(&buf, &r), 0);
	expect_err(wire_decode_release(buf.data, buf.len, &ws_limits, &scr, &g, &d), LM_EPROTO, &d,
		   "\"slots\"[1]");
	slots[1] = -1;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_release(&buf, &r), 0);
	expect_err(wire_decode_release(buf.data, buf.len, &ws_limits, &scr, &g, &d), LM_EPROTO, &d,
		   "\"slots\"[1]");
	slots[1] = 0;
	r.n = 9;
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_release(&buf, &r), 0);
	expect_err(wire_decode_release(buf.data, buf.len, &ws_limits, &scr, &g, &d), LM_EPROTO, &d,
		   "more than slots");
}

/* Encodes a HELLO reply and expects the decoder to name `needle`. */
static void hello_case(struct wire_hello *h, const char *needle, const char *needle2)
{
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_hello(&buf, h, true), 0);
	struct wire_hello g;
	lm_diag d = {{0}};
	expect_err(wire_decode_hello(buf.data, buf.len, &g, &d), LM_EPROTO, &d, needle);
	if (needle2 != NULL)
		cr_assert(strstr(d.msg, needle2), "'%s' not in: %s", needle2, d.msg);
}

Test(wire_refusals, hello_and_assign_out_of_range)
{
	struct wire_hello h = {
		.id = 1, .fingerprint = 1, .pid = 0, .has_slice = true, .begin = 0, .end = 4};
	strcpy(h.name, "w");
	hello_case(&h, "\"pid\"", "0 is outside");
	h.pid = -5;
	hello_case(&h, "\"pid\"", NULL);
	h.pid = 10;
	h.begin = -1;
	hello_case(&h, "\"slice\"[0].begin", NULL);
	h.begin = 5;
	hello_case(&h, "\"slice\"[1].end", "4 is outside [5,");
	h.begin = h.end = 4;
	hello_case(&h, "\"slice\"", "empty slice");
	h.head = true; /* a head-only stage is a slice */
	wire_buf_reset(&buf);
	cr_assert_eq(wire_encode_hello(&buf, &h, true), 0);
	struct wire_hello g;
	cr_assert_eq(wire_decode_hello(buf.data, buf.len, &g, NULL), 0);

	static struct wire_assign a, b;
	make(WS_ASSIGN);
	cr_assert_eq(wire_decode_assign(buf.data, buf.len, &a, NULL), 0);
	lm_diag d = {{0}};
#define ASSIGN_EXPECT(stmt, needle)                                                        \
	do {                                                                               \
		b = a;                                                                     \
		stmt;                                                                      \
		wire_buf_reset(&buf);                                                      \
		cr_assert_eq(wire_encode_assign(&buf, &b), 0);                             \
		static struct wire_assign out;                                             \
		expect_err(wire_decode_assign(buf.data, buf.len, &out, &d), LM_EPROTO, &d, \
			   needle);                                                        \
	} while (0)
	ASSIGN_EXPECT(b.model[0] = '\0', "\"model\": the string is empty");
	ASSIGN_EXPECT(b.next[0] = '\0', "\"next\": the string is empty");
	ASSIGN_EXPECT(b.max_seq = 0, "\"seq\"");
	ASSIGN_EXPECT(b.slots = -1, "\"slots\"");
	ASSIGN_EXPECT(b.max_batch = 0, "\"batch\"");
	ASSIGN_EXPECT(b.k_type = 4, "\"kvk\": 4 is not a tensor type");
	ASSIGN_EXPECT(b.v_type = 1000, "\"kvv\"");
	ASSIGN_EXPECT(b.k_type_swa = 5, "\"kks\": 5 is not a tensor type");
	ASSIGN_EXPECT(b.v_type_swa = 41, "\"kvs\": 41 is not a tensor type");
	ASSIGN_EXPECT(b.max_draft = 64, "\"drf\"");
	ASSIGN_EXPECT(b.max_draft = -1, "\"drf\"");
	ASSIGN_EXPECT(b.wire_dtype = WIRE_DT_I32, "\"wdt\"");
	ASSIGN_EXPECT(b.wire_dtype = WIRE_DT_RAW, "\"wdt\"");
	ASSIGN_EXPECT(b.embedding = false, "\"slice\": an empty slice");
#undef ASSIGN_EXPECT
}

/* Strings: at the bound plus one, with a NUL inside, and bin instead of str. */
Test(wire_refusals, strings_bounded_and_nul_free)
{
	struct bytes out = {0};
	struct {
		int sample;
		const char *key;
		size_t bound;
	} cases[] = {
		{WS_HELLO_REPLY, "name", 63}, {WS_HELLO_REPLY, "build", 63},
		{WS_ASSIGN, "model", 1023},   {WS_ASSIGN, "next", 255},
		{WS_ERROR, "msg", 511},       {WS_REPOINT, "next", 255},
	};
	static char s[2048];
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		make(cases[c].sample);
		struct msg m;
		msg_split(&m, buf.data, buf.len);
		int i = msg_find(&m, cases[c].key);
		char quoted[16];
		snprintf(quoted, sizeof quoted, "\"%s\"", cases[c].key);
		lm_diag d = {{0}};
		/* At the bound: fine. */
		ws_fill(s, cases[c].bound, 'a');
		m.kv[i].val = obj_str(s);
		msg_join(&m, &out, 0);
		cr_assert_eq(ws_decode(cases[c].sample, out.p, out.len, &scr, &d), 0, "%s", d.msg);
		/* One more byte. */
		ws_fill(s, cases[c].bound + 1, 'a');
		m.kv[i].val = obj_str(s);
		msg_join(&m, &out, 0);
		expect_err(ws_decode(cases[c].sample, out.p, out.len, &scr, &d), LM_EPROTO, &d,
			   quoted);
		cr_assert(strstr(d.msg, "longer than"), "%s", d.msg);
		/* A NUL inside. */
		m.kv[i].val.via.str.size = 5;
		s[2] = '\0';
		msg_join(&m, &out, 0);
		expect_err(ws_decode(cases[c].sample, out.p, out.len, &scr, &d), LM_EPROTO, &d,
			   "NUL");
		cr_assert(strstr(d.msg, quoted), "%s", d.msg);
		msg_free(&m);
	}
	bytes_free(&out);
}

Test(wire_refusals, error_kv_repoint_raw_out_of_range)
{
	struct bytes out = {0};
	struct msg m;
	lm_diag d = {{0}};
	/* ERROR's code: negative and within int32. */
	make(WS_ERROR);
	msg_split(&m, buf.data, buf.len);
	int code = msg_find(&m, "code");
	const int64_t bad_codes[] = {0, 5, (int64_t)INT32_MIN - 1};
	for (int i = 0; i < 3; i++) {
		m.kv[code].val = obj_int(bad_codes[i]);
		msg_join(&m, &out, 0);
		expect_err(ws_decode(WS_ERROR, out.p, out.len, &scr, &d), LM_EPROTO, &d,
			   "\"code\"");
	}
	msg_free(&m);

	/* KV: slot, len, dt; and "len", "dt", "pl" all or none. */
	make(WS_KV_EXPORT_REPLY);
	msg_split(&m, buf.data, buf.len);
	struct {
		const char *key;
		int64_t v;
	} kv_cases[] = {{"slot", 8}, {"slot", -1}, {"len", 257}, {"len", -1}, {"dt", 2}, {"dt", 0}};
	for (size_t i = 0; i < sizeof kv_cases / sizeof kv_cases[0]; i++) {
		int j = msg_find(&m, kv_cases[i].key);
		msgpack_object saved = m.kv[j].val;
		m.kv[j].val = obj_int(kv_cases[i].v);
		msg_join(&m, &out, m.payload_len);
		char quoted[16];
		snprintf(quoted, sizeof quoted, "\"%s\"", kv_cases[i].key);
		expect_err(ws_decode(WS_KV_EXPORT_REPLY, out.p, out.len, &scr, &d), LM_EPROTO, &d,
			   quoted);
		m.kv[j].val = saved;
	}
	msg_free(&m);
	/* A KV_EXPORT request with only "len" of the three. */
	make(WS_KV_EXPORT_REQUEST);
	msg_split(&m, buf.data, buf.len);
	msg_add(&m, "len", obj_int(3));
	msg_join(&m, &out, 0);
	expect_err(ws_decode(WS_KV_EXPORT_REQUEST, out.p, out.len, &scr, &d), LM_EPROTO, &d,
		   "\"dt\": missing");
	msg_free(&m);

	/* A raw message must say dt = RAW. */
	make(WS_STATUS_REPLY);
	msg_split(&m, buf.data, buf.len);
	m.kv[msg_find(&m, "dt")].val = obj_int(WIRE_DT_F32);
	msg_join(&m, &out, m.payload_len);
	expect_err(ws_decode(WS_STATUS_REPLY, out.p, out.len, &scr, &d), LM_EPROTO, &d, "\"dt\"");
	msg_free(&m);
	bytes_free(&out);
}

/* ---------------------------------------------------------------- payload lengths */

Test(wire_refusals, payload_length_must_match)
{
	struct bytes out = {0};
	for (int k = 0; k < WS_COUNT; k++) {
		make(k);
		struct msg m;
		msg_split(&m, buf.data, buf.len);
		bool has_pl = msg_find(&m, "pl") >= 0;
		lm_diag d = {{0}};
		/* One byte more, and (when there is one) one byte less. */
		msg_join(&m, &out, m.payload_len + 1);
		expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EPROTO, &d,
			   has_pl ? "\"pl\"" : "follow a header");
		if (has_pl && m.payload_len > 0) {
			msg_join(&m, &out, m.payload_len - 1);
			expect_err(ws_decode(k, out.p, out.len, &scr, &d), LM_EPROTO, &d, "\"pl\"");
		}
		msg_free(&m);
	}
	/* "pl" against what the header implies, with the bytes to match it. */
	const int implied[] = {WS_FORWARD_F32, WS_FORWARD_I32, WS_FORWARD_F16, WS_TOKENS,
			       WS_TOKENS_EMPTY};
	for (size_t i = 0; i < sizeof implied / sizeof implied[0]; i++) {
		make(implied[i]);
		struct msg m;
		msg_split(&m, buf.data, buf.len);
		int pl = msg_find(&m, "pl");
		for (int delta = -4; delta <= 8; delta += 12) {
			if ((int64_t)m.payload_len + delta < 0)
				continue;
			size_t n = (size_t)((int64_t)m.payload_len + delta);
			m.kv[pl].val = obj_int((int64_t)n);
			msg_join(&m, &out, n);
			lm_diag d = {{0}};
			expect_err(ws_decode(implied[i], out.p, out.len, &scr, &d), LM_EPROTO, &d,
				   "where the header implies");
			cr_assert(strstr(d.msg, "\"pl\""), "%s", d.msg);
		}
		msg_free(&m);
	}
	bytes_free(&out);
}

/* ---------------------------------------------------------------- hostile structure */

static int decode_all(const uint8_t *p, size_t n)
{
	int worst = 0;
	for (int k = 0; k < WS_COUNT; k++) {
		lm_diag d;
		d.msg[0] = '\0';
		int rc = ws_decode(k, p, n, &scr, &d);
		cr_assert(rc == 0 || rc == LM_EPROTO || rc == LM_EVERSION || rc == LM_EFINGERPRINT,
			  "%s: %d", ws_names[k], rc);
		if (rc != 0)
			cr_assert_neq(d.msg[0], '\0', "%s failed without a message", ws_names[k]);
		if (rc < worst)
			worst = rc;
	}
	struct wire_head h;
	lm_diag d;
	int rc = wire_peek(p, n, &h, &d);
	cr_assert(rc == 0 || rc == LM_EPROTO || rc == LM_EVERSION);
	return worst;
}

Test(wire_refusals, huge_counts_in_tiny_messages)
{
	/* An array header claiming 2^32 - 1 elements in a 16-byte message. */
	const uint8_t arr[] = {0x82, 0xa1, 'v',  0x01, 0xa4, 's',  'e',  'q',
			       's',  0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0};
	lm_diag d = {{0}};
	struct wire_forward f;
	expect_err(wire_decode_forward(arr, sizeof arr, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   NULL);
	decode_all(arr, sizeof arr);
	/* A map claiming 2^32 - 1 pairs; a string claiming 4 GiB; a bin under a key. */
	const uint8_t map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01, 0xc0, 0xc0};
	expect_err(wire_decode_forward(map, sizeof map, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "map");
	const uint8_t str[] = {0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, 'v', 0x01};
	expect_err(wire_decode_forward(str, sizeof str, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   NULL);
	const uint8_t bin[] = {0x81, 0xa1, 'v', 0xc6, 0x7f, 0xff, 0xff, 0xff, 0x00};
	expect_err(wire_decode_forward(bin, sizeof bin, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   NULL);
	/* The reserved byte 0xc1, as a value and as the header. */
	const uint8_t c1[] = {0x81, 0xa1, 'v', 0xc1};
	expect_err(wire_decode_forward(c1, sizeof c1, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   NULL);
	const uint8_t c1h[] = {0xc1};
	expect_err(wire_decode_forward(c1h, sizeof c1h, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
		   "map");
	/* Empty input, and a header that is not a map. */
	expect_err(wire_decode_forward(arr, 0, &ws_limits, &scr, &f, &d), LM_EPROTO, &d, "map");
	expect_err(wire_decode_forward(NULL, 0, &ws_limits, &scr, &f, &d), LM_EPROTO, &d, "map");
	const uint8_t notmap[] = {0x93, 1, 2, 3};
	expect_err(wire_decode_forward(notmap, sizeof notmap, &ws_limits, &scr, &f, &d), LM_EPROTO,
		   &d, "got an array");
}

Test(wire_refusals, deep_nesting_costs_no_stack)
{
	/* {"v": WIRE_VERSION + 1, "x": [[[[...1e6 levels...]]]]}: skipped without recursion, then refused for
	 * the version; and the same under "seqs" of a current-version message. */
	size_t depth = 1000000;
	struct bytes b = {0};
	const uint8_t head[] = {0x82, 0xa1, 'v', WIRE_VERSION + 1, 0xa1, 'x'};
	bytes_write(&b, (const char *)head, sizeof head);
	for (size_t i = 0; i < depth; i++)
		bytes_write(&b, "\x91", 1);
	bytes_write(&b, "\xc0", 1);
	lm_diag d = {{0}};
	struct wire_forward f;
	char mine[32];
	snprintf(mine, sizeof mine, "version %d", WIRE_VERSION);
	expect_err(wire_decode_forward(b.p, b.len, &ws_limits, &scr, &f, &d), LM_EVERSION, &d,
		   mine);
	b.p[3] = WIRE_VERSION;
	b.p[5] = 'n';
	expect_err(wire_decode_forward(b.p, b.len, &ws_limits, &scr, &f, &d), LM_EPROTO, &d, NULL);
	struct wire_head h;
	cr_assert_eq(wire_peek(b.p, b.len, &h, &d), LM_EPROTO); /* no "t" */
	bytes_free(&b);
}

Test(wire_refusals, every_msgpack_type_is_skipped_under_an_unknown_key)
{
	/* A peer of the next version may send values of any type: the walk must get past each
	 * to read "v". */
	const uint8_t values[][20] = {
		{1, 0xc0},
		{1, 0xc3},
		{2, 0xcc, 1},
		{3, 0xcd, 1, 2},
		{5, 0xce, 1, 2, 3, 4},
		{9, 0xcf, 1, 2, 3, 4, 5, 6, 7, 8},
		{2, 0xd0, 0x80},
		{3, 0xd1, 1, 2},
		{5, 0xd2, 1, 2, 3, 4},
		{9, 0xd3, 1, 2, 3, 4, 5, 6, 7, 8},
		{5, 0xca, 0, 0, 0, 0},
		{9, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
		{1, 0xe5},
		{3, 0xa2, 'h', 'i'},
		{3, 0xd9, 1, 'x'},
		{4, 0xda, 0, 1, 'x'},
		{6, 0xdb, 0, 0, 0, 1, 'x'},
		{3, 0xc4, 1, 0},
		{4, 0xc5, 0, 1, 0},
		{6, 0xc6, 0, 0, 0, 1, 0},
		{4, 0xc7, 1, 5, 0},
		{5, 0xc8, 0, 1, 5, 0},
		{7, 0xc9, 0, 0, 0, 1, 5, 0},
		{3, 0xd4, 5, 0},
		{4, 0xd5, 5, 0, 0},
		{6, 0xd6, 5, 0, 0, 0, 0},
		{10, 0xd7, 5, 0, 0, 0, 0, 0, 0, 0, 0},
		{18, 0xd8, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{3, 0x92, 0x01, 0xc0},
		{5, 0xdc, 0, 2, 0x01, 0xc0},
		{6, 0xdd, 0, 0, 0, 1, 0x01},
		{3, 0x81, 0x01, 0x02},
		{6, 0xde, 0, 1, 0xa1, 'k', 0xc0},
		{7, 0xdf, 0, 0, 0, 1, 0x01, 0x02},
	};
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		struct bytes b = {0};
		const uint8_t head[] = {0x83, 0xa1, 'x'};
		bytes_write(&b, (const char *)head, sizeof head);
		bytes_write(&b, (const char *)values[i] + 1, values[i][0]);
		const uint8_t tail[] = {0xa1, 'v', WIRE_VERSION + 1, 0xa1, 'y', 0x00};
		bytes_write(&b, (const char *)tail, sizeof tail);
		lm_diag d = {{0}};
		struct wire_forward f;
		char mine[32];
		snprintf(mine, sizeof mine, "version %d", WIRE_VERSION);
		expect_err(wire_decode_forward(b.p, b.len, &ws_limits, &scr, &f, &d), LM_EVERSION,
			   &d, mine);
		/* msgpack-c agrees the value is well-formed: it unpacks the whole map. */
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		size_t off = 0;
		cr_assert_eq(msgpack_unpack_next(&u, (const char *)b.p, b.len, &off),
			     MSGPACK_UNPACK_SUCCESS, "value %zu", i);
		cr_assert_eq(off, b.len, "value %zu", i);
		msgpack_unpacked_destroy(&u);
		/* Cut one byte short inside the value: refused, never read past the end. */
		size_t cut = sizeof head + values[i][0] - 1;
		uint8_t *p = malloc(cut);
		memcpy(p, b.p, cut);
		expect_err(wire_decode_forward(p, cut, &ws_limits, &scr, &f, &d), LM_EPROTO, &d,
			   NULL);
		free(p);
		bytes_free(&b);
	}
}

Test(wire_refusals, truncated_at_every_offset)
{
	for (int k = 0; k < WS_COUNT; k++) {
		make(k);
		for (size_t n = 0; n < buf.len; n++) {
			/* An exact-size copy, so ASan sees any read past the end. */
			uint8_t *p = malloc(n ? n : 1);
			memcpy(p, buf.data, n);
			lm_diag d;
			d.msg[0] = '\0';
			int rc = ws_decode(k, p, n, &scr, &d);
			cr_assert_eq(rc, LM_EPROTO, "%s cut at %zu of %zu: %d %s", ws_names[k], n,
				     buf.len, rc, d.msg);
			cr_assert_neq(d.msg[0], '\0');
			decode_all(p, n);
			free(p);
		}
	}
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	/* xorshift64*: deterministic. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

Test(wire_refusals, random_byte_flips_parse_or_fail_cleanly)
{
	int accepted = 0, refused = 0;
	for (int k = 0; k < WS_COUNT; k++) {
		make(k);
		for (int iter = 0; iter < 1500; iter++) {
			uint8_t *p = malloc(buf.len);
			memcpy(p, buf.data, buf.len);
			int flips = 1 + (int)(rng() % 3);
			for (int i = 0; i < flips; i++) {
				size_t at = (size_t)(rng() % buf.len);
				/* Half the time a single bit, half a whole random byte. */
				if (rng() & 1)
					p[at] ^= (uint8_t)(1u << (rng() % 8));
				else
					p[at] = (uint8_t)rng();
			}
			lm_diag d;
			d.msg[0] = '\0';
			int rc = ws_decode(k, p, buf.len, &scr, &d);
			if (rc == 0) {
				accepted++;
			} else {
				refused++;
				cr_assert_neq(d.msg[0], '\0');
			}
			decode_all(p, buf.len);
			free(p);
		}
	}
	/* Both outcomes happen (flips inside payloads and some values are harmless). */
	cr_assert_gt(accepted, 0);
	cr_assert_gt(refused, 0);
}

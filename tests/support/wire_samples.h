/* wire_samples.h — one valid message of every wire type and form, for the unit test, the fuzz
 * target and its seed corpus generator.
 *
 * Each sample is built by the encoder from a struct whose values sit at or near the edges of
 * ws_limits (slot slots - 1, a position run ending at max_seq, ids 0 and n_vocab - 1, u64
 * maxima, strings at their bound), so that mutating any one of them by a little leaves the
 * legal range. Payloads are deterministic.
 */
#ifndef LM_TESTS_WIRE_SAMPLES_H
#define LM_TESTS_WIRE_SAMPLES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/wire/wire.h"

#define WS_FP UINT64_C(0x0123456789abcdef)

/* The limits every sample is legal under. */
static const struct wire_limits ws_limits = {
	.fingerprint = WS_FP,
	.slots = 8,
	.max_seq = 256,
	.dim = 16,
	.n_vocab = 1000,
	.max_batch = 64,
	.max_seqs = 8,
	.max_logprobs = 5,
	.max_draft = 4,
};
#define WS_SCRATCH 8
/* TOKENS entries and drafted ids the scratch holds: one per row of a batch. */
#define WS_SCRATCH_ROWS 64

enum ws_kind {
	WS_FORWARD_F32,
	WS_FORWARD_I32,
	WS_FORWARD_F16,
	WS_FORWARD_DRAFT,
	WS_TOKENS,
	WS_TOKENS_EMPTY,
	WS_RELEASE,
	WS_HELLO_REQUEST,
	WS_HELLO_REPLY,
	WS_HELLO_REPLY_NO_SLICE,
	WS_ASSIGN,
	WS_READY,
	WS_ERROR,
	WS_KV_EXPORT_REQUEST,
	WS_KV_EXPORT_REPLY,
	WS_KV_IMPORT,
	WS_KV_IMPORT_HI,
	WS_REPOINT,
	WS_DRAIN,
	WS_STATUS_REPLY,
	WS_COPY,
	WS_COUNT
};

static const char *const ws_names[WS_COUNT] = {
	[WS_FORWARD_F32] = "forward_f32",
	[WS_FORWARD_I32] = "forward_i32",
	[WS_FORWARD_F16] = "forward_f16",
	[WS_FORWARD_DRAFT] = "forward_draft",
	[WS_TOKENS] = "tokens",
	[WS_TOKENS_EMPTY] = "tokens_empty",
	[WS_RELEASE] = "release",
	[WS_COPY] = "copy",
	[WS_HELLO_REQUEST] = "hello_request",
	[WS_HELLO_REPLY] = "hello_reply",
	[WS_HELLO_REPLY_NO_SLICE] = "hello_reply_no_slice",
	[WS_ASSIGN] = "assign",
	[WS_READY] = "ready",
	[WS_ERROR] = "error",
	[WS_KV_EXPORT_REQUEST] = "kv_export_request",
	[WS_KV_EXPORT_REPLY] = "kv_export_reply",
	[WS_KV_IMPORT] = "kv_import",
	[WS_KV_IMPORT_HI] = "kv_import_hi",
	[WS_REPOINT] = "repoint",
	[WS_DRAIN] = "drain",
	[WS_STATUS_REPLY] = "status_reply",
};

/* Fills s with `n` bytes of the given character and a NUL (a string at its bound when n is the
 * field's size - 1). */
static inline void ws_fill(char *s, size_t n, char ch)
{
	memset(s, ch, n);
	s[n] = '\0';
}

/* The three sequences of the FORWARD samples: 2 + 1 + 3 = 6 rows. */
static inline void ws_seqs(struct wire_seq q[3])
{
	memset(q, 0, 3 * sizeof q[0]);
	q[0] = (struct wire_seq){
		.seq_id = UINT64_MAX,
		.slot = 0,
		.pos = 0,
		.n_tokens = 2,
		.sample = false,
		.step = 0,
		.n_logprobs = 0,
		.sampling =
			{.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0},
	};
	q[1] = (struct wire_seq){
		.seq_id = 42,
		.slot = 7,  /* slots - 1 */
		.pos = 255, /* ends at max_seq */
		.n_tokens = 1,
		.sample = true,
		.step = UINT64_MAX,
		.n_logprobs = 5, /* max_logprobs */
		.sampling = {.temperature = 100.0f,
			     .top_k = INT32_MIN,
			     .top_p = 0.5f,
			     .min_p = 1.0f,
			     .seed = UINT64_MAX},
	};
	q[2] = (struct wire_seq){
		.seq_id = 0,
		.slot = 3,
		.pos = 100,
		.n_tokens = 3,
		.sample = true,
		.step = 17,
		.n_logprobs = 1,
		.sampling = {.temperature = -1.0f,
			     .top_k = INT32_MAX,
			     .top_p = 0.95f,
			     .min_p = 0.05f,
			     .seed = 1234},
	};
}

/* Appends sample k to b. 0 or the encoder's error. */
static inline int ws_make(int k, struct wire_buf *b)
{
	static float rows_f32[6 * 16];
	static uint16_t rows_f16[6 * 16];
	static const int32_t ids[6] = {0, 999, 1, 500, 998, 2};
	static uint8_t tops[8 * 6];
	static char json[] = "{\"name\":\"w0\",\"slots\":8}";
	static uint8_t kv_rows[300];
	struct wire_seq q[3];

	for (int i = 0; i < 6 * 16; i++) {
		rows_f32[i] = (float)i * 0.25f - 3.0f;
		rows_f16[i] = (uint16_t)(0x3c00 + i); /* 1.0 and up */
	}
	for (int i = 0; i < (int)sizeof kv_rows; i++)
		kv_rows[i] = (uint8_t)(i * 7 + 3);
	ws_seqs(q);

	switch ((enum ws_kind)k) {
	case WS_FORWARD_F32:
	case WS_FORWARD_I32:
	case WS_FORWARD_F16:
	case WS_FORWARD_DRAFT: {
		/* The draft sample: sequence 2 verifies its last 2 tokens (ids 998 and 2), the
		 * ids the first stage sees in rows 4 and 5; so does the "dr" key. */
		static const int32_t drafts[2] = {998, 2};
		struct wire_forward f = {
			.batch_id = 77,
			.fingerprint = WS_FP,
			.n_seqs = 3,
			.seqs = q,
			.n_tokens = 6,
		};
		if (k == WS_FORWARD_DRAFT) {
			q[2].n_draft = 2;
			f.n_drafts = 2;
			f.drafts = drafts;
		}
		if (k == WS_FORWARD_F32) {
			f.dtype = WIRE_DT_F32, f.dim = 16, f.payload = rows_f32;
			f.payload_len = sizeof rows_f32;
		} else if (k == WS_FORWARD_I32 || k == WS_FORWARD_DRAFT) {
			f.dtype = WIRE_DT_I32, f.dim = 1, f.payload = ids;
			f.payload_len = sizeof ids;
		} else {
			f.dtype = WIRE_DT_F16, f.dim = 16, f.payload = rows_f16;
			f.payload_len = sizeof rows_f16;
		}
		return wire_encode_forward(b, &f);
	}
	case WS_TOKENS: {
		/* Two tokens with alternatives (2 and 1), one without: 3 ids + 3 logprobs. */
		struct wire_token t[3] = {
			{.seq_id = 42, .token = 999, .logprob = -0.0f, .n_top = 2},
			{.seq_id = UINT64_MAX, .token = 0, .logprob = -INFINITY, .n_top = 0},
			{.seq_id = 5, .token = 7, .logprob = -3.5f, .n_top = 1},
		};
		int32_t top_ids[3] = {999, 3, 7};
		float top_lp[3] = {-0.0f, -1.25f, -3.5f};
		/* Token 0: ids 999, 3 then logprobs; token 2: id 7 then its logprob. */
		memcpy(tops + 0, &top_ids[0], 8);
		memcpy(tops + 8, &top_lp[0], 8);
		memcpy(tops + 16, &top_ids[2], 4);
		memcpy(tops + 20, &top_lp[2], 4);
		struct wire_tokens m = {.batch_id = 77,
					.fingerprint = WS_FP,
					.n = 3,
					.toks = t,
					.payload = tops,
					.payload_len = 24};
		return wire_encode_tokens(b, &m);
	}
	case WS_TOKENS_EMPTY: {
		struct wire_tokens m = {.batch_id = 0, .fingerprint = WS_FP};
		return wire_encode_tokens(b, &m);
	}
	case WS_RELEASE: {
		int32_t slots[8] = {7, 0, 1, 2, 3, 4, 5, 6};
		struct wire_release r = {.id = 9, .fingerprint = WS_FP, .n = 8, .slots = slots};
		return wire_encode_release(b, &r);
	}
	case WS_COPY: {
		int32_t dst[3] = {7, 2, 5};
		struct wire_copy c = {
			.id = 10, .fingerprint = WS_FP, .src = 3, .len = 13, .n = 3, .dst = dst};
		return wire_encode_copy(b, &c);
	}
	case WS_HELLO_REQUEST: {
		struct wire_hello h = {.id = 1};
		return wire_encode_hello(b, &h, false);
	}
	case WS_HELLO_REPLY:
	case WS_HELLO_REPLY_NO_SLICE: {
		struct wire_hello h = {.id = 1, .fingerprint = WS_FP, .pid = INT32_MAX};
		ws_fill(h.name, sizeof h.name - 1, 'n');
		strcpy(h.build, "");
		if (k == WS_HELLO_REPLY) {
			h.has_slice = true;
			h.begin = 4, h.end = 8, h.embedding = false, h.head = true;
		}
		return wire_encode_hello(b, &h, true);
	}
	case WS_ASSIGN: {
		static struct wire_assign a;
		memset(&a, 0, sizeof a);
		a.id = 2;
		ws_fill(a.model, sizeof a.model - 1, 'm');
		a.begin = 0, a.end = 0, a.embedding = true, a.head = false;
		a.max_seq = 256, a.slots = 8;
		a.k_type = 1, a.v_type = 8;         /* F16, Q8_0 */
		a.k_type_swa = 8, a.v_type_swa = 7; /* Q8_0, Q5_1 */
		a.wire_dtype = WIRE_DT_BF16;
		a.max_batch = 64;
		a.max_draft = 63; /* max_batch - 1 */
		ws_fill(a.next, sizeof a.next - 1, 'x');
		return wire_encode_assign(b, &a);
	}
	case WS_READY: {
		struct wire_ready r = {.id = 2,
				       .fingerprint = WS_FP,
				       .kv_bytes = UINT64_MAX,
				       .weight_bytes = 0,
				       .rss_bytes = 1ull << 40,
				       .digest = 0x0123456789abcdefull};
		return wire_encode_ready(b, &r);
	}
	case WS_ERROR: {
		static struct wire_error e;
		memset(&e, 0, sizeof e);
		e.id = UINT64_MAX, e.code = INT32_MIN, e.about = UINT32_MAX;
		ws_fill(e.msg, sizeof e.msg - 1, 'e');
		return wire_encode_error(b, &e);
	}
	case WS_KV_EXPORT_REQUEST: {
		struct wire_kv kv = {.id = 3, .fingerprint = WS_FP, .slot = 7};
		return wire_encode_kv(b, WIRE_KV_EXPORT, &kv);
	}
	case WS_KV_EXPORT_REPLY:
	case WS_KV_IMPORT:
	case WS_KV_IMPORT_HI: {
		struct wire_kv kv = {.id = 3,
				     .fingerprint = WS_FP,
				     .slot = 0,
				     .len = 256,
				     .payload = kv_rows,
				     .payload_len = sizeof kv_rows};
		if (k == WS_KV_IMPORT_HI)
			kv.len = 250, kv.hi = 256; /* a rejected draft wrote up to max_seq */
		return wire_encode_kv(b, k == WS_KV_EXPORT_REPLY ? WIRE_KV_EXPORT : WIRE_KV_IMPORT,
				      &kv);
	}
	case WS_REPOINT: {
		struct wire_repoint r = {.id = 4, .fingerprint = WS_FP};
		ws_fill(r.next, sizeof r.next - 1, 'r');
		return wire_encode_repoint(b, &r);
	}
	case WS_DRAIN:
		return wire_encode_simple(b, WIRE_DRAIN, 5, WS_FP);
	case WS_STATUS_REPLY:
		return wire_encode_raw(b, WIRE_STATUS, 6, WS_FP, json, strlen(json));
	case WS_COUNT:
		break;
	}
	return LM_EINVAL;
}

/* The decoder that takes sample k's kind of message. */
static inline int ws_decode(int k, const void *buf, size_t len, struct wire_scratch *s, lm_diag *d)
{
	const struct wire_limits *lim = &ws_limits;
	switch ((enum ws_kind)k) {
	case WS_FORWARD_F32:
	case WS_FORWARD_I32:
	case WS_FORWARD_F16:
	case WS_FORWARD_DRAFT: {
		struct wire_forward f;
		return wire_decode_forward(buf, len, lim, s, &f, d);
	}
	case WS_TOKENS:
	case WS_TOKENS_EMPTY: {
		struct wire_tokens t;
		return wire_decode_tokens(buf, len, lim, s, &t, d);
	}
	case WS_RELEASE: {
		struct wire_release r;
		return wire_decode_release(buf, len, lim, s, &r, d);
	}
	case WS_COPY: {
		struct wire_copy c;
		return wire_decode_copy(buf, len, lim, s, &c, d);
	}
	case WS_HELLO_REQUEST:
	case WS_HELLO_REPLY:
	case WS_HELLO_REPLY_NO_SLICE: {
		struct wire_hello h;
		return wire_decode_hello(buf, len, &h, d);
	}
	case WS_ASSIGN: {
		static struct wire_assign a;
		return wire_decode_assign(buf, len, &a, d);
	}
	case WS_READY: {
		struct wire_ready r;
		return wire_decode_ready(buf, len, &r, d);
	}
	case WS_ERROR: {
		static struct wire_error e;
		return wire_decode_error(buf, len, &e, d);
	}
	case WS_KV_EXPORT_REQUEST:
	case WS_KV_EXPORT_REPLY:
	case WS_KV_IMPORT:
	case WS_KV_IMPORT_HI: {
		struct wire_kv kv;
		return wire_decode_kv(buf, len, lim, &kv, d);
	}
	case WS_REPOINT: {
		struct wire_repoint r;
		return wire_decode_repoint(buf, len, lim, &r, d);
	}
	case WS_DRAIN: {
		struct wire_head h;
		return wire_decode_simple(buf, len, lim, &h, d);
	}
	case WS_STATUS_REPLY: {
		const void *p;
		size_t n;
		return wire_decode_raw(buf, len, &p, &n, d);
	}
	case WS_COUNT:
		break;
	}
	return LM_EINVAL;
}

#endif

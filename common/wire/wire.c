/* wire.c — the protocol's pinned values, names, decoding scratch and the encode buffer.
 *
 * The codec itself is split by direction: wire_encode.c writes headers with msgpack-c's packer,
 * wire_decode.c reads them with a bounded cursor (its header comment says why not msgpack-c's
 * unpacker). This file holds what both sides share.
 */
#include "common/wire/wire.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* The values below are protocol version 6 (2 added TRACE; 3 FORWARD's "adj" and "dr", READY's
 * "dig", ASSIGN's per-kind cache types and "drf", and the bound on data-ring messages; 4 the
 * HELLO reply's "fp" as a proof, wire_hello_proof, not the fingerprint itself; 5 COPY; 6
 * FORWARD's "gr", the grammars of constrained sequences). Changing any of them (or any header key or payload layout) changes the protocol: bump WIRE_VERSION in
 * wire.h and update this table with it, so two builds that disagree refuse each other at HELLO
 * instead of misreading each other. */
#define WIRE_PIN(name, value)                                               \
	static_assert(WIRE_VERSION_CURRENT == 6 && (name) == (value), #name \
		      " is pinned by protocol version 6: bump WIRE_VERSION and update wire.c")

WIRE_PIN(WIRE_HELLO, 1);
WIRE_PIN(WIRE_ASSIGN, 2);
WIRE_PIN(WIRE_READY, 3);
WIRE_PIN(WIRE_FORWARD, 4);
WIRE_PIN(WIRE_TOKENS, 5);
WIRE_PIN(WIRE_RELEASE, 6);
WIRE_PIN(WIRE_DRAIN, 7);
WIRE_PIN(WIRE_KV_EXPORT, 8);
WIRE_PIN(WIRE_KV_IMPORT, 9);
WIRE_PIN(WIRE_STATUS, 10);
WIRE_PIN(WIRE_ERROR, 11);
WIRE_PIN(WIRE_PAUSE, 12);
WIRE_PIN(WIRE_RESUME, 13);
WIRE_PIN(WIRE_REPOINT, 14);
WIRE_PIN(WIRE_TRACE, 15);
WIRE_PIN(WIRE_COPY, 16);
WIRE_PIN(WIRE_TYPE_MAX, 16);

WIRE_PIN(WIRE_DT_NONE, 0);
WIRE_PIN(WIRE_DT_I32, 1);
WIRE_PIN(WIRE_DT_F32, 2);
WIRE_PIN(WIRE_DT_F16, 3);
WIRE_PIN(WIRE_DT_BF16, 4);
WIRE_PIN(WIRE_DT_RAW, 5);

/* ERROR replies carry LM_E* codes: they are part of the protocol too. */
WIRE_PIN(LM_EPROTO, -8);
WIRE_PIN(LM_EVERSION, -9);
WIRE_PIN(LM_EFINGERPRINT, -10);

/* Payload rows are sent in host byte order and read in place. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire protocol's payloads are little-endian; this host is not"
#endif

/* The one table of wire dtypes: their element type and size. */
static const struct {
	enum lm_dtype elem;
	size_t size;
	const char *name;
} wire_dtypes[] = {
	[WIRE_DT_NONE] = {LM_DTYPE_COUNT, 0, "none"}, [WIRE_DT_I32] = {LM_I32, 4, "i32"},
	[WIRE_DT_F32] = {LM_F32, 4, "f32"},           [WIRE_DT_F16] = {LM_F16, 2, "f16"},
	[WIRE_DT_BF16] = {LM_BF16, 2, "bf16"},        [WIRE_DT_RAW] = {LM_DTYPE_COUNT, 0, "raw"},
};

static bool wire_dtype_known(enum wire_dtype dt)
{
	return (unsigned)dt < sizeof wire_dtypes / sizeof wire_dtypes[0];
}

size_t wire_dtype_size(enum wire_dtype dt)
{
	return wire_dtype_known(dt) ? wire_dtypes[dt].size : 0;
}

const char *wire_dtype_name(enum wire_dtype dt)
{
	return wire_dtype_known(dt) ? wire_dtypes[dt].name : "none";
}

enum wire_dtype wire_dtype_of(enum lm_dtype t)
{
	return t == LM_F32    ? WIRE_DT_F32
	       : t == LM_F16  ? WIRE_DT_F16
	       : t == LM_BF16 ? WIRE_DT_BF16
			      : WIRE_DT_NONE;
}

enum lm_dtype wire_dtype_elem(enum wire_dtype dt)
{
	return wire_dtype_known(dt) ? wire_dtypes[dt].elem : LM_DTYPE_COUNT;
}

const char *wire_type_name(uint32_t t)
{
	static const char *const names[WIRE_TYPE_MAX + 1] = {
		[WIRE_HELLO] = "HELLO",         [WIRE_ASSIGN] = "ASSIGN",
		[WIRE_READY] = "READY",         [WIRE_FORWARD] = "FORWARD",
		[WIRE_TOKENS] = "TOKENS",       [WIRE_RELEASE] = "RELEASE",
		[WIRE_DRAIN] = "DRAIN",         [WIRE_KV_EXPORT] = "KV_EXPORT",
		[WIRE_KV_IMPORT] = "KV_IMPORT", [WIRE_STATUS] = "STATUS",
		[WIRE_ERROR] = "ERROR",         [WIRE_PAUSE] = "PAUSE",
		[WIRE_RESUME] = "RESUME",       [WIRE_REPOINT] = "REPOINT",
		[WIRE_TRACE] = "TRACE",         [WIRE_COPY] = "COPY",
	};
	if (t >= 1 && t <= WIRE_TYPE_MAX)
		return names[t];
	return "UNKNOWN";
}

/* A scratch cap above this is a caller's mistake (no limits allow a million sequences). */
#define WIRE_SCRATCH_MAX (1 << 20)

int wire_scratch_init_rows(struct wire_scratch *s, int32_t cap, int32_t rows)
{
	memset(s, 0, sizeof *s);
	if (cap < 1 || cap > WIRE_SCRATCH_MAX || rows < cap || rows > WIRE_SCRATCH_MAX)
		return LM_EINVAL;
	s->seqs = calloc((size_t)cap, sizeof *s->seqs);
	s->toks = calloc((size_t)rows, sizeof *s->toks);
	s->slots = calloc((size_t)cap, sizeof *s->slots);
	s->drafts = calloc((size_t)rows, sizeof *s->drafts);
	if (s->seqs == NULL || s->toks == NULL || s->slots == NULL || s->drafts == NULL)
		goto fail;
	s->cap = cap;
	s->rows = rows;
	return 0;
fail:
	wire_scratch_fini(s);
	return LM_ENOMEM;
}

uint64_t wire_scratch_bytes(int32_t cap, int32_t rows)
{
	const struct wire_scratch *s = NULL;
	return (uint64_t)cap * (sizeof *s->seqs + sizeof *s->slots) +
	       (uint64_t)rows * (sizeof *s->toks + sizeof *s->drafts);
}

int wire_scratch_init(struct wire_scratch *s, int32_t cap)
{
	return wire_scratch_init_rows(s, cap, cap);
}

void wire_scratch_fini(struct wire_scratch *s)
{
	if (s == NULL)
		return;
	free(s->seqs);
	free(s->toks);
	free(s->slots);
	free(s->adj);
	free(s->hist);
	free(s->bias);
	free(s->drafts);
	free(s->gr);
	free(s->gr_ids);
	memset(s, 0, sizeof *s);
}

void wire_buf_reset(struct wire_buf *b)
{
	b->len = 0;
}

void wire_buf_fini(struct wire_buf *b)
{
	if (b == NULL)
		return;
	free(b->data);
	memset(b, 0, sizeof *b);
}

/* One sequence's array (or one token's) at most as any encoder may write it: the array header
 * and twelve elements in their widest msgpack form (9 bytes each). A change to the arrays must
 * keep this above them. */
#define WIRE_SEQ_MAX_BYTES 128

size_t wire_max_data_message(const struct wire_limits *lim)
{
	/* Header: the map and its fixed keys, every scalar key, one array entry per sequence or
	 * token; then the largest payload any data message may carry. ERROR messages (a 512-byte
	 * message at most) fit in the slack. */
	size_t seqs = (size_t)(lim->max_seqs > lim->slots ? lim->max_seqs : lim->slots);
	size_t head = 1024 + seqs * WIRE_SEQ_MAX_BYTES;
	size_t width = (size_t)(lim->dim > 1 ? lim->dim : 1);
	size_t rows = (size_t)lim->max_batch * width * sizeof(float);
	size_t top = seqs * (size_t)lim->max_logprobs * 8;
	/* "gr": each sequence's grammar text and its generated ids (5 bytes each at most). */
	head += seqs * (WIRE_MAX_GRAMMAR + 32 + 5 * (size_t)(lim->max_seq > 0 ? lim->max_seq : 0));
	return head + (rows > top ? rows : top);
}

/* SipHash-2-4 (Aumasson and Bernstein, 2012) of one 64-bit word: a keyed pseudo-random function,
 * so a proof tells nothing of its key, and a peer that chose the word still cannot work the key
 * back out of the answer. */
#define WIRE_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void wire_sipround(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = WIRE_ROTL(v[1], 13);
	v[1] ^= v[0];
	v[0] = WIRE_ROTL(v[0], 32);
	v[2] += v[3];
	v[3] = WIRE_ROTL(v[3], 16);
	v[3] ^= v[2];
	v[0] += v[3];
	v[3] = WIRE_ROTL(v[3], 21);
	v[3] ^= v[0];
	v[2] += v[1];
	v[1] = WIRE_ROTL(v[1], 17);
	v[1] ^= v[2];
	v[2] = WIRE_ROTL(v[2], 32);
}

uint64_t wire_siphash24(uint64_t k0, uint64_t k1, const void *msg, size_t len)
{
	const uint8_t *in = msg;
	uint64_t v[4] = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
			 k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL};
	size_t whole = len - len % 8;
	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = 0;
		for (int b = 0; b < 8; b++)
			m |= (uint64_t)in[i + (size_t)b] << (8 * b);
		v[3] ^= m;
		wire_sipround(v);
		wire_sipround(v);
		v[0] ^= m;
	}
	uint64_t last = (uint64_t)(len & 0xff) << 56;
	for (size_t b = 0; b < len % 8; b++)
		last |= (uint64_t)in[whole + b] << (8 * b);
	v[3] ^= last;
	wire_sipround(v);
	wire_sipround(v);
	v[0] ^= last;
	v[2] ^= 0xff;
	for (int r = 0; r < 4; r++)
		wire_sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t wire_hello_proof(uint64_t fingerprint, uint64_t id)
{
	if (fingerprint == 0)
		return 0;
	uint8_t word[8];
	for (int b = 0; b < 8; b++)
		word[b] = (uint8_t)(id >> (8 * b));
	/* The second half of the key only keeps these proofs apart from any other use of the
	 * same hash: "lm-hello" in ASCII. */
	uint64_t p = wire_siphash24(fingerprint, 0x6f6c6c65682d6d6cULL, word, sizeof word);
	return p != 0 ? p : 1; /* 0 means "no model yet" */
}

/* wire_read.h — internals of the wire decoder, shared by wire_read.c and wire_decode.c only.
 *
 * wd_ is the prefix of these internals; nothing outside common/wire_*.c may use them. The
 * readers called once per array element are static inline here so that splitting the decoder
 * across two files costs no calls; everything else lives in wire_read.c, whose header comment
 * describes the reader and why it is not msgpack-c's unpacker.
 */
#ifndef LM_WIRE_READ_H
#define LM_WIRE_READ_H

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/base/err.h"
#include "common/wire/wire.h"

/* ---------------------------------------------------------------- keys */

/* Every header key of the protocol. FORWARD's keys come first: lookups scan in this order. */
enum wire_key {
	WK_V,
	WK_T,
	WK_FP,
	WK_ID,
	WK_SEQS,
	WK_N,
	WK_DT,
	WK_DIM,
	WK_PL,
	WK_TOKS,
	WK_SLOTS,
	WK_SLOT,
	WK_LEN,
	WK_NAME,
	WK_BUILD,
	WK_PID,
	WK_SLICE,
	WK_MODEL,
	WK_SEQ,
	WK_KVK,
	WK_KVV,
	WK_WDT,
	WK_BATCH,
	WK_NEXT,
	WK_KVB,
	WK_WB,
	WK_RSS,
	WK_CODE,
	WK_MSG,
	WK_ABOUT,
	WK_ADJ,
	WK_DIG,
	WK_DR,
	WK_KKS,
	WK_KVS,
	WK_DRF,
	WK_HI,
	WK_GR,
	WK_TS,
	WK_COUNT
};

#define WK_BIT(k) (UINT64_C(1) << (k))
#define WK_BASE   (WK_BIT(WK_V) | WK_BIT(WK_T) | WK_BIT(WK_FP) | WK_BIT(WK_ID))
#define WT_BIT(t) (UINT32_C(1) << (t))
#define WT_KNOWN  (((UINT32_C(1) << (WIRE_TYPE_MAX + 1)) - 1) & ~UINT32_C(1))
#define WT_SIMPLE                                                                              \
	(WT_BIT(WIRE_DRAIN) | WT_BIT(WIRE_STATUS) | WT_BIT(WIRE_PAUSE) | WT_BIT(WIRE_RESUME) | \
	 WT_BIT(WIRE_KV_IMPORT) | WT_BIT(WIRE_REPOINT))

/* ---------------------------------------------------------------- the cursor */

/* A bounded cursor over one message, and where it is, for messages. */
struct wd {
	const uint8_t *base, *p, *end;
	const uint8_t *at; /* where the value being read starts, for messages; NULL: none */
	lm_diag *d;
	const char *what; /* the message type, for messages */
	int key;          /* the key whose value is being read; -1: none */
	int32_t idx;      /* the index within that key's array; -1: none */
	const char *elem; /* the element's name within that array entry; NULL: none */
};

/* Low-level readers return 0, WD_TYPE (another msgpack type is there) or WD_SHORT (the message
 * ends inside the value); they leave the cursor where it was when they fail. */
enum { WD_TYPE = 1, WD_SHORT = 2 };

static inline void wd_init(struct wd *c, const void *buf, size_t len, lm_diag *d, const char *what)
{
	/* NULL + 0 is undefined in C: an empty message from NULL gets a real (empty) base. */
	c->base = buf != NULL ? buf : (const uint8_t *)"";
	c->p = c->base;
	c->end = c->base + len;
	c->at = NULL;
	c->d = d;
	c->what = what;
	c->key = -1;
	c->idx = -1;
	c->elem = NULL;
}

/* Fails with a message naming the message type, the key, the array index and element, and the
 * byte offset of the value (c->at) when set; returns code. */
__attribute__((format(printf, 3, 4))) int wd_fail(const struct wd *c, int code, const char *fmt,
						  ...);
/* The failure of a low-level read (WD_TYPE, WD_SHORT) as "expected <want>, got <what is there>". */
int wd_bad(struct wd *c, int why, const char *want);
/* The message for an integer outside [lo, hi] (out of line: wd_range is inlined everywhere). */
int wd_range_fail(struct wd *c, uint64_t u, bool neg, int64_t lo, int64_t hi);

static inline uint16_t wd_be16(const uint8_t *p)
{
	return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t wd_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t wd_be64(const uint8_t *p)
{
	return (uint64_t)wd_be32(p) << 32 | wd_be32(p + 4);
}

static inline size_t wd_left(const struct wd *c)
{
	return (size_t)(c->end - c->p);
}

/* An integer in any msgpack encoding. Non-negative values come back in *u with *neg false;
 * negative ones as (uint64_t)(int64_t)value with *neg true. */
static inline int wd_rd_int(struct wd *c, uint64_t *u, bool *neg)
{
	const uint8_t *p = c->p;
	if (p >= c->end)
		return WD_SHORT;
	uint8_t b = *p;
	if (b <= 0x7f) {
		*u = b;
		*neg = false;
		c->p = p + 1;
		return 0;
	}
	if (b >= 0xe0) {
		*u = (uint64_t)(int64_t)(int8_t)b;
		*neg = true;
		c->p = p + 1;
		return 0;
	}
	if (b < 0xcc || b > 0xd3)
		return WD_TYPE;
	size_t n = (size_t)1 << ((b - 0xcc) & 3); /* cc..cf and d0..d3: 1, 2, 4, 8 bytes */
	if (wd_left(c) - 1 < n)
		return WD_SHORT;
	uint64_t v = n == 1   ? p[1]
		     : n == 2 ? wd_be16(p + 1)
		     : n == 4 ? wd_be32(p + 1)
			      : wd_be64(p + 1);
	if (b >= 0xd0) {
		int64_t s = n == 1   ? (int8_t)v
			    : n == 2 ? (int16_t)v
			    : n == 4 ? (int32_t)v
				     : (int64_t)v;
		*neg = s < 0;
		*u = (uint64_t)s;
	} else {
		*neg = false;
		*u = v;
	}
	c->p = p + 1 + n;
	return 0;
}

/* ---------------------------------------------------------------- typed field readers */

/* An integer in [lo, hi]. */
static inline int wd_range(struct wd *c, int64_t lo, int64_t hi, int64_t *out)
{
	uint64_t u = 0;
	bool neg = false;
	c->at = c->p;
	int rc = wd_rd_int(c, &u, &neg);
	if (rc != 0)
		return wd_bad(c, rc, "an integer");
	bool ok = neg ? (int64_t)u >= lo && (int64_t)u <= hi
		      : hi >= 0 && u <= (uint64_t)hi && (lo <= 0 || u >= (uint64_t)lo);
	if (!ok)
		return wd_range_fail(c, u, neg, lo, hi);
	*out = (int64_t)u;
	return 0;
}

static inline int wd_i32(struct wd *c, int64_t lo, int64_t hi, int32_t *out)
{
	int64_t v = 0;
	int rc = wd_range(c, lo, hi, &v);
	if (rc == 0)
		*out = (int32_t)v;
	return rc;
}

static inline int wd_u32(struct wd *c, uint32_t *out)
{
	int64_t v = 0;
	int rc = wd_range(c, 0, UINT32_MAX, &v);
	if (rc == 0)
		*out = (uint32_t)v;
	return rc;
}

static inline int wd_u64(struct wd *c, uint64_t *out)
{
	uint64_t u = 0;
	bool neg = false;
	c->at = c->p;
	int rc = wd_rd_int(c, &u, &neg);
	if (rc != 0)
		return wd_bad(c, rc, "an unsigned integer");
	if (neg)
		return wd_fail(c, LM_EPROTO, "expected an unsigned integer, got %" PRId64,
			       (int64_t)u);
	*out = u;
	return 0;
}

static inline int wd_f32(struct wd *c, float *out)
{
	const uint8_t *p = c->p;
	c->at = p;
	if (p < c->end && *p == 0xca && wd_left(c) >= 5) {
		uint32_t bits = wd_be32(p + 1);
		memcpy(out, &bits, sizeof *out);
		c->p = p + 5;
		return 0;
	}
	if (p < c->end && *p == 0xcb && wd_left(c) >= 9) {
		uint64_t bits = wd_be64(p + 1);
		double v;
		memcpy(&v, &bits, sizeof v);
		if (isfinite(v) && fabs(v) > FLT_MAX)
			return wd_fail(c, LM_EPROTO, "%g is outside the float32 range", v);
		*out = (float)v;
		c->p = p + 9;
		return 0;
	}
	bool is_float = p < c->end && (*p == 0xca || *p == 0xcb);
	return wd_bad(c, is_float ? WD_SHORT : WD_TYPE, "a float");
}

static inline int wd_bool(struct wd *c, bool *out)
{
	c->at = c->p;
	if (c->p < c->end && (*c->p == 0xc2 || *c->p == 0xc3)) {
		*out = *c->p == 0xc3;
		c->p++;
		return 0;
	}
	return wd_bad(c, WD_TYPE, "a boolean");
}

/* A string into dst[cap]: at most cap - 1 bytes, no NUL, non-empty if asked. */
int wd_str(struct wd *c, char *dst, size_t cap, bool nonempty);
/* A string of at most `most` bytes, left in the message: *s points at its bytes. */
int wd_strref(struct wd *c, const char **s, uint32_t *n, uint32_t most);

/* An array header whose count the bytes left could hold. */
int wd_array(struct wd *c, uint32_t *n);

/* An array of exactly n elements (the per-sequence, per-token and slice entries). */
int wd_tuple(struct wd *c, uint32_t want);

/* ---------------------------------------------------------------- the header walk */

struct wd_head {
	const uint8_t *val[WK_COUNT]; /* where each seen key's value starts */
	uint64_t seen;                /* WK_BIT() of the keys present */
	bool parsed;                  /* the spec's inline key was parsed during the walk */
	size_t header_len;
	struct wire_head h;
};

/* What a decoder expects of the header. */
struct wd_spec {
	uint64_t allowed; /* WK_BIT() of the keys it takes */
	uint32_t types;   /* WT_BIT() of the message types it takes */
	bool lenient;     /* skip keys outside `allowed` instead of refusing them */
	uint64_t fp;      /* the fingerprint to check; 0: none */
	/* The key of the message's one big array, parsed by `parse` (which consumes exactly its
	 * value) as the walk meets it when "v", "t" and "fp" have already checked out, so the
	 * array is read once instead of skipped and then read; else after the walk. -1: none. */
	int inline_key;
	int (*parse)(struct wd *c, void *ctx);
	void *ctx;
};

/* Points the cursor at key k's value. */
static inline void wd_at(struct wd *c, const struct wd_head *w, int k)
{
	c->key = k;
	c->idx = -1;
	c->elem = NULL;
	c->p = w->val[k];
}

/* Walks the top-level map: records the keys in spec->allowed (others are errors unless
 * lenient: then skipped), finds the header's end, and checks "v" (LM_EVERSION), "t" (one of
 * spec->types), key errors, "fp" (LM_EFINGERPRINT) and "id", in that order, then parses the
 * inline key if the walk did not. w->h is filled as far as it got. */
int wd_walk(struct wd *c, const struct wd_spec *spec, struct wd_head *w);

/* Every key of `need` present. */
int wd_require(struct wd *c, const struct wd_head *w, uint64_t need);

/* "pl": equal to `implied` (unless it is UINT64_MAX: anything) and to the bytes after the
 * header. */
int wd_payload(struct wd *c, const struct wd_head *w, size_t len, uint64_t implied,
	       const void **payload, size_t *payload_len);

/* A message without "pl" ends with its header. */
int wd_no_payload(struct wd *c, const struct wd_head *w, size_t len);

/* [begin, end, embedding, head]: layers [begin, end), not empty unless it has the embedding
 * or the head. */
int wd_slice(struct wd *c, int32_t *begin, int32_t *end, bool *embedding, bool *head);

/* A count of array elements against a limit and the scratch's cap. */
int wd_count(struct wd *c, uint32_t n, int64_t lo, int32_t limit, const char *limit_name,
	     int32_t cap);

#endif

/* wire_decode.c — reading protocol messages from untrusted peers (see wire.h).
 *
 * Why not msgpack-c's unpacker. msgpack_unpack_next() (msgpack-c 4.0) allocates the objects of
 * an array or map in its zone as soon as it reads the container's header, sized by the count
 * the header claims, before any element is there: a 10-byte message whose array header claims
 * 2^32-1 elements makes it call malloc(137438953480) (which fails: MSGPACK_UNPACK_NOMEM_ERROR),
 * and a 6-byte one claiming 2^24 elements gets 512 MiB before the unpacker notices the input is
 * short. Guarding that needs a structural pre-scan bounding every count by the bytes left; once
 * that scan exists, building an object tree in a zone and walking it again is a second pass and
 * an allocation per message for nothing. The header uses a small subset of msgpack (a map of
 * short string keys whose values are integers, floats, booleans, strings and small arrays), so
 * this file reads it with a bounded cursor instead:
 *   - every read checks the bytes left first, and every container count is compared with the
 *     bytes left (each element takes at least one) before it is used;
 *   - nothing is allocated: decoded arrays land in the caller's wire_scratch, whose cap bounds
 *     every count;
 *   - values are skipped without recursion (a counter of pending items), so nesting depth
 *     cannot exhaust the stack;
 *   - any msgpack value may be skipped (under an unknown key, say), so a peer speaking another
 *     version still gets its version read and refused with LM_EVERSION rather than a parse error.
 *
 * Decoding runs in two steps. wd_walk() walks the top-level map once, records where each known
 * key's value starts and the end of the header, and checks the version before anything else (so
 * a peer of another version gets LM_EVERSION whatever else differs), then the type, then key
 * errors (unknown, duplicate, non-string), then the fingerprint. Each decoder then reads its
 * fields from the recorded positions, checking each against the limits; errors name the message
 * type, the key, the array index and element, and the byte offset.
 *
 * Cost. Skipping a value is a chain of dependent loads, about as slow per element as reading it,
 * so the one big array of FORWARD, TOKENS and RELEASE is parsed during the walk instead of
 * skipped and read again, once "v", "t" and "fp" have been seen and check out (the encoder writes
 * them first; in any other order the array is parsed after the walk, as the other keys are).
 * bench/bench_wire measures a 16-sequence FORWARD header at about 0.6 us to decode and 0.8 us
 * to encode, and msgpack_unpack_next at about 1.5 us on the same bytes.
 */
#include "common/wire.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"

/* ---------------------------------------------------------------- keys */

/* Every header key of the protocol. FORWARD's keys come first: lookups scan in this order. */
enum wire_key {
	K_V,
	K_T,
	K_FP,
	K_ID,
	K_SEQS,
	K_N,
	K_DT,
	K_DIM,
	K_PL,
	K_TOKS,
	K_SLOTS,
	K_SLOT,
	K_LEN,
	K_NAME,
	K_BUILD,
	K_PID,
	K_SLICE,
	K_MODEL,
	K_SEQ,
	K_KVK,
	K_KVV,
	K_WDT,
	K_BATCH,
	K_NEXT,
	K_KVB,
	K_WB,
	K_RSS,
	K_CODE,
	K_MSG,
	K_ABOUT,
	K_COUNT
};

static const struct {
	const char *name;
	uint32_t len;
} wire_keys[K_COUNT] = {
	[K_V] = {"v", 1},       [K_T] = {"t", 1},         [K_FP] = {"fp", 2},
	[K_ID] = {"id", 2},     [K_SEQS] = {"seqs", 4},   [K_N] = {"n", 1},
	[K_DT] = {"dt", 2},     [K_DIM] = {"dim", 3},     [K_PL] = {"pl", 2},
	[K_TOKS] = {"toks", 4}, [K_SLOTS] = {"slots", 5}, [K_SLOT] = {"slot", 4},
	[K_LEN] = {"len", 3},   [K_NAME] = {"name", 4},   [K_BUILD] = {"build", 5},
	[K_PID] = {"pid", 3},   [K_SLICE] = {"slice", 5}, [K_MODEL] = {"model", 5},
	[K_SEQ] = {"seq", 3},   [K_KVK] = {"kvk", 3},     [K_KVV] = {"kvv", 3},
	[K_WDT] = {"wdt", 3},   [K_BATCH] = {"batch", 5}, [K_NEXT] = {"next", 4},
	[K_KVB] = {"kvb", 3},   [K_WB] = {"wb", 2},       [K_RSS] = {"rss", 3},
	[K_CODE] = {"code", 4}, [K_MSG] = {"msg", 3},     [K_ABOUT] = {"about", 5},
};

#define KB(k)       (UINT64_C(1) << (k))
#define KEYS_BASE   (KB(K_V) | KB(K_T) | KB(K_FP) | KB(K_ID))
#define TB(t)       (UINT32_C(1) << (t))
#define TYPES_KNOWN (((UINT32_C(1) << (WIRE_TYPE_MAX + 1)) - 1) & ~UINT32_C(1))
#define TYPES_SIMPLE                                                           \
	(TB(WIRE_DRAIN) | TB(WIRE_STATUS) | TB(WIRE_PAUSE) | TB(WIRE_RESUME) | \
	 TB(WIRE_KV_IMPORT) | TB(WIRE_REPOINT))

static int wire_key_find(const uint8_t *s, uint32_t n, uint64_t allowed)
{
	for (int k = 0; k < K_COUNT; k++) {
		if ((allowed & KB(k)) != 0 && wire_keys[k].len == n &&
		    (uint8_t)wire_keys[k].name[0] == s[0] && memcmp(wire_keys[k].name, s, n) == 0)
			return k;
	}
	return -1;
}

/* ---------------------------------------------------------------- the cursor */

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

static void wd_init(struct wd *c, const void *buf, size_t len, lm_diag *d, const char *what)
{
	c->base = buf;
	c->p = c->base;
	c->end = c->base + len;
	c->at = NULL;
	c->d = d;
	c->what = what;
	c->key = -1;
	c->idx = -1;
	c->elem = NULL;
}

__attribute__((format(printf, 3, 4))) static int wd_fail(const struct wd *c, int code,
							 const char *fmt, ...)
{
	if (c->d == NULL)
		return code;
	char msg[384], path[64] = "", at[32] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (c->key >= 0) {
		size_t n = (size_t)snprintf(path, sizeof path, " \"%s\"", wire_keys[c->key].name);
		if (c->idx >= 0 && n < sizeof path)
			n += (size_t)snprintf(path + n, sizeof path - n, "[%" PRId32 "]", c->idx);
		if (c->elem != NULL && n < sizeof path)
			snprintf(path + n, sizeof path - n, ".%s", c->elem);
	}
	if (c->at != NULL)
		snprintf(at, sizeof at, " (byte %zu)", (size_t)(c->at - c->base));
	return lm_fail(c->d, code, "%s%s: %s%s", c->what, path, msg, at);
}

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

/* What the value at p is, for "expected X, got Y" messages. */
static const char *wd_type_name(const struct wd *c, const uint8_t *p)
{
	if (p >= c->end)
		return "the end of the message";
	uint8_t b = *p;
	if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3))
		return "an integer";
	if (b <= 0x8f || b == 0xde || b == 0xdf)
		return "a map";
	if (b <= 0x9f || b == 0xdc || b == 0xdd)
		return "an array";
	if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
		return "a string";
	switch (b) {
	case 0xc0:
		return "nil";
	case 0xc2:
	case 0xc3:
		return "a boolean";
	case 0xc4:
	case 0xc5:
	case 0xc6:
		return "binary data";
	case 0xca:
	case 0xcb:
		return "a float";
	case 0xc1:
		return "the reserved byte 0xc1";
	default:
		return "an extension value";
	}
}

/* The failure of a low-level read, as a message naming the field. */
static int wd_bad(struct wd *c, int why, const char *want)
{
	if (why == WD_SHORT)
		return wd_fail(c, LM_EPROTO, "the message ends inside %s", want);
	return wd_fail(c, LM_EPROTO, "expected %s, got %s", want, wd_type_name(c, c->p));
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

static int wd_rd_str(struct wd *c, const uint8_t **s, uint32_t *n)
{
	const uint8_t *p = c->p;
	if (p >= c->end)
		return WD_SHORT;
	uint8_t b = *p;
	size_t h;
	uint32_t len;
	if (b >= 0xa0 && b <= 0xbf) {
		h = 1;
		len = b & 0x1f;
	} else if (b == 0xd9 || b == 0xda || b == 0xdb) {
		h = b == 0xd9 ? 2 : b == 0xda ? 3 : 5;
		if (wd_left(c) < h)
			return WD_SHORT;
		len = b == 0xd9 ? p[1] : b == 0xda ? wd_be16(p + 1) : wd_be32(p + 1);
	} else {
		return WD_TYPE;
	}
	if (wd_left(c) < h || wd_left(c) - h < len)
		return WD_SHORT;
	*s = p + h;
	*n = len;
	c->p = p + h + len;
	return 0;
}

/* An array (map: pairs) header. The count is not checked here; wd_array does. */
static int wd_rd_container(struct wd *c, bool map, uint32_t *n)
{
	const uint8_t *p = c->p;
	if (p >= c->end)
		return WD_SHORT;
	uint8_t b = *p;
	uint8_t fix = map ? 0x80 : 0x90, b16 = map ? 0xde : 0xdc, b32 = map ? 0xdf : 0xdd;
	if (b >= fix && b <= fix + 0x0f) {
		*n = b & 0x0f;
		c->p = p + 1;
		return 0;
	}
	if (b == b16) {
		if (wd_left(c) < 3)
			return WD_SHORT;
		*n = wd_be16(p + 1);
		c->p = p + 3;
		return 0;
	}
	if (b == b32) {
		if (wd_left(c) < 5)
			return WD_SHORT;
		*n = wd_be32(p + 1);
		c->p = p + 5;
		return 0;
	}
	return WD_TYPE;
}

/* What follows each lead byte when its size is fixed: the bytes to skip (fixints, nil, bools,
 * floats, sized ints, fixext). WD_VAR: a container or a length-prefixed value, handled in code;
 * WD_BAD: the reserved byte 0xc1. */
#define WD_VAR 0xfe
#define WD_BAD 0xff
static const uint8_t wd_fixed[256] = {
	[0x80 ... 0xbf] = WD_VAR, /* fixmap, fixarray, fixstr */
	[0xc1] = WD_BAD,
	[0xc4 ... 0xc9] = WD_VAR, /* bin, ext */
	[0xca] = 4,
	[0xcb] = 8,
	[0xcc] = 1,
	[0xcd] = 2,
	[0xce] = 4,
	[0xcf] = 8,
	[0xd0] = 1,
	[0xd1] = 2,
	[0xd2] = 4,
	[0xd3] = 8,
	[0xd4] = 2, /* fixext 1..16: a type byte and the data */
	[0xd5] = 3,
	[0xd6] = 5,
	[0xd7] = 9,
	[0xd8] = 17,
	[0xd9 ... 0xdf] = WD_VAR, /* str 8/16/32, array 16/32, map 16/32 */
};

/* Skips one value of any msgpack type. Iterative: `pending` counts the values still to skip,
 * and is kept no larger than the bytes left (each value takes at least one), so hostile
 * nesting or counts cost neither stack nor more than one step per byte. */
static int wd_skip(struct wd *c)
{
	const uint8_t *p = c->p, *end = c->end;
	uint64_t pending = 1;
	while (pending != 0) {
		if (p >= end)
			return WD_SHORT;
		pending--;
		uint8_t b = *p++;
		uint8_t fixed = wd_fixed[b];
		if (fixed < WD_VAR) {
			if ((size_t)(end - p) < fixed)
				return WD_SHORT;
			p += fixed;
			continue;
		}
		if (fixed == WD_BAD)
			return WD_TYPE;
		uint64_t body = 0, items = 0;
		if (b <= 0x8f) {
			items = 2u * (b & 0x0fu);
		} else if (b <= 0x9f) {
			items = b & 0x0fu;
		} else if (b <= 0xbf) {
			body = b & 0x1fu;
		} else {
			/* The length field: 1, 2 or 4 bytes. */
			size_t h = (b == 0xc4 || b == 0xc7 || b == 0xd9) ? 1
				   : (b == 0xc5 || b == 0xc8 || b == 0xda || b == 0xdc || b == 0xde)
					   ? 2
					   : 4;
			if ((size_t)(end - p) < h)
				return WD_SHORT;
			uint64_t n = h == 1 ? p[0] : h == 2 ? wd_be16(p) : wd_be32(p);
			p += h;
			if (b == 0xdc || b == 0xdd)
				items = n;
			else if (b == 0xde || b == 0xdf)
				items = 2 * n;
			else if (b >= 0xc7 && b <= 0xc9)
				body = n + 1; /* ext: the type byte, then n bytes */
			else
				body = n;
		}
		if ((uint64_t)(end - p) < body)
			return WD_SHORT;
		p += body;
		pending += items;
		if (pending > (uint64_t)(end - p))
			return WD_SHORT;
	}
	c->p = p;
	return 0;
}

/* ---------------------------------------------------------------- typed field readers */

static void wd_fmt_int(char *buf, size_t cap, uint64_t u, bool neg)
{
	if (neg)
		snprintf(buf, cap, "%" PRId64, (int64_t)u);
	else
		snprintf(buf, cap, "%" PRIu64, u);
}

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
	if (!ok) {
		char v[24];
		wd_fmt_int(v, sizeof v, u, neg);
		return wd_fail(c, LM_EPROTO, "%s is outside [%" PRId64 ", %" PRId64 "]", v, lo, hi);
	}
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

static int wd_u32(struct wd *c, uint32_t *out)
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
static int wd_str(struct wd *c, char *dst, size_t cap, bool nonempty)
{
	const uint8_t *s;
	uint32_t n;
	c->at = c->p;
	int rc = wd_rd_str(c, &s, &n);
	if (rc != 0)
		return wd_bad(c, rc, "a string");
	if (n >= cap)
		return wd_fail(c, LM_EPROTO, "a string of %" PRIu32 " bytes, longer than %zu", n,
			       cap - 1);
	if (memchr(s, '\0', n) != NULL)
		return wd_fail(c, LM_EPROTO, "the string contains a NUL byte");
	if (nonempty && n == 0)
		return wd_fail(c, LM_EPROTO, "the string is empty");
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

/* An array header whose count the bytes left could hold. */
static int wd_array(struct wd *c, uint32_t *n)
{
	c->at = c->p;
	int rc = wd_rd_container(c, false, n);
	if (rc != 0)
		return wd_bad(c, rc, "an array");
	if (*n > wd_left(c))
		return wd_fail(c, LM_EPROTO, "an array of %" PRIu32 " elements in %zu bytes", *n,
			       wd_left(c));
	return 0;
}

/* An array of exactly n elements (the per-sequence, per-token and slice entries). */
static int wd_tuple(struct wd *c, uint32_t want)
{
	uint32_t n;
	int rc = wd_array(c, &n);
	if (rc == 0 && n != want)
		return wd_fail(c, LM_EPROTO, "an array of %" PRIu32 " elements, expected %" PRIu32,
			       n, want);
	return rc;
}

/* ---------------------------------------------------------------- the header walk */

struct wd_head {
	const uint8_t *val[K_COUNT]; /* where each seen key's value starts */
	uint64_t seen;               /* KB() of the keys present */
	bool parsed;                 /* the spec's inline key was parsed during the walk */
	size_t header_len;
	struct wire_head h;
};

/* What a decoder expects of the header. */
struct wd_spec {
	uint64_t allowed; /* KB() of the keys it takes */
	uint32_t types;   /* TB() of the message types it takes */
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
static void wd_at(struct wd *c, const struct wd_head *w, int k)
{
	c->key = k;
	c->idx = -1;
	c->elem = NULL;
	c->p = w->val[k];
}

/* A key error is reported only after the version and type checks. */
struct wd_keyerr {
	const char *why; /* NULL: none */
	const uint8_t *at, *key;
	uint32_t key_len;
};

static int wd_keyerr_fail(struct wd *c, const struct wd_keyerr *e)
{
	/* The key as printable ASCII, escaped and cut short: it came from the peer. Each byte
	 * takes at most 4 characters, so 24 + 4 + "..." + NUL fit. */
	char name[40];
	size_t o = 0;
	uint32_t i;
	for (i = 0; i < e->key_len && o < 24; i++) {
		uint8_t ch = e->key[i];
		if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
			name[o++] = (char)ch;
		else
			o += (size_t)snprintf(name + o, sizeof name - o, "\\x%02x", ch);
	}
	if (i < e->key_len) {
		memcpy(name + o, "...", 3);
		o += 3;
	}
	name[o] = '\0';
	c->key = -1;
	c->at = e->at;
	if (e->key == NULL)
		return wd_fail(c, LM_EPROTO, "%s", e->why);
	return wd_fail(c, LM_EPROTO, "%s \"%s\"", e->why, name);
}

/* The value at the cursor as an unsigned integer, without moving it or failing: for deciding
 * early whether "v", "t" and "fp" check out. */
static bool wd_peek_uint(struct wd *c, uint64_t *u)
{
	const uint8_t *p = c->p;
	bool neg = false;
	bool ok = wd_rd_int(c, u, &neg) == 0 && !neg;
	c->p = p;
	return ok;
}

/* Walks the top-level map: records the keys in spec->allowed (others are errors unless
 * lenient: then skipped), finds the header's end, and checks "v" (LM_EVERSION), "t" (one of
 * spec->types), key errors, "fp" (LM_EFINGERPRINT) and "id", in that order, then parses the
 * inline key if the walk did not. w->h is filled as far as it got. */
static int wd_walk(struct wd *c, const struct wd_spec *spec, struct wd_head *w)
{
	struct wd_keyerr kerr = {0};
	uint32_t n;
	int rc;
	/* Whether "v", "t" and "fp" have been seen and check out, so far. */
	bool v_ok = false, t_ok = false, fp_ok = spec->fp == 0;

	memset(&w->h, 0, sizeof w->h);
	w->seen = 0;
	w->parsed = false;
	c->at = c->p;
	rc = wd_rd_container(c, true, &n);
	if (rc != 0)
		return wd_bad(c, rc, "a msgpack map (the header)");
	if (n > wd_left(c) / 2)
		return wd_fail(c, LM_EPROTO, "a map of %" PRIu32 " keys in %zu bytes", n,
			       wd_left(c));
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *s;
		uint32_t len;
		const uint8_t *key_at = c->p;
		c->at = key_at;
		rc = wd_rd_str(c, &s, &len);
		if (rc == WD_TYPE) {
			if (kerr.why == NULL)
				kerr = (struct wd_keyerr){"a key is not a string", key_at, NULL, 0};
			if ((rc = wd_skip(c)) != 0)
				return wd_bad(c, rc, "a key");
		} else if (rc != 0) {
			return wd_bad(c, rc, "a key");
		} else {
			int k = wire_key_find(s, len, spec->allowed);
			if (k < 0) {
				if (!spec->lenient && kerr.why == NULL)
					kerr = (struct wd_keyerr){"unknown key", key_at, s, len};
			} else if ((w->seen & KB(k)) != 0) {
				if (kerr.why == NULL)
					kerr = (struct wd_keyerr){"duplicate key", key_at, s, len};
			} else {
				uint64_t u = 0;
				w->seen |= KB(k);
				w->val[k] = c->p;
				if (k == spec->inline_key && v_ok && t_ok && fp_ok &&
				    kerr.why == NULL) {
					c->key = k;
					c->idx = -1;
					c->elem = NULL;
					if ((rc = spec->parse(c, spec->ctx)) != 0)
						return rc;
					w->parsed = true;
					continue;
				}
				if (k == K_V)
					v_ok = wd_peek_uint(c, &u) && u == WIRE_VERSION;
				else if (k == K_T)
					t_ok = wd_peek_uint(c, &u) && u <= 31 &&
					       (spec->types & TB(u)) != 0;
				else if (k == K_FP)
					fp_ok = wd_peek_uint(c, &u) &&
						(spec->fp == 0 || u == spec->fp);
			}
		}
		c->at = c->p;
		rc = wd_skip(c);
		if (rc != 0)
			return wd_bad(c, rc, "a value");
	}
	w->header_len = (size_t)(c->p - c->base);
	w->h.header_len = w->header_len;

	/* The version first, with what the caller needs to answer (type, id) read on a best-effort
	 * basis: a peer of another version may differ in anything else. */
	if ((w->seen & KB(K_V)) == 0) {
		c->key = K_V;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing key");
	}
	if ((w->seen & KB(K_T)) != 0) {
		uint64_t u = 0;
		c->p = w->val[K_T];
		if (wd_peek_uint(c, &u) && u <= UINT32_MAX)
			w->h.type = (uint32_t)u;
	}
	if ((w->seen & KB(K_ID)) != 0) {
		c->p = w->val[K_ID];
		wd_peek_uint(c, &w->h.id);
	}
	wd_at(c, w, K_V);
	if ((rc = wd_u32(c, &w->h.version)) != 0)
		return rc;
	if (w->h.version != WIRE_VERSION)
		return wd_fail(c, LM_EVERSION,
			       "protocol version mismatch: the message is version %" PRIu32
			       ", this build speaks version %d",
			       w->h.version, WIRE_VERSION);

	if ((w->seen & KB(K_T)) == 0) {
		c->key = K_T;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing key");
	}
	wd_at(c, w, K_T);
	if ((rc = wd_u32(c, &w->h.type)) != 0)
		return rc;
	if (w->h.type > 31 || (spec->types & TB(w->h.type)) == 0)
		return wd_fail(c, LM_EPROTO, "message type %" PRIu32 " (%s) where %s was expected",
			       w->h.type, wire_type_name(w->h.type), c->what);
	if (kerr.why != NULL)
		return wd_keyerr_fail(c, &kerr);
	if ((w->seen & KB(K_FP)) != 0) {
		wd_at(c, w, K_FP);
		if ((rc = wd_u64(c, &w->h.fingerprint)) != 0)
			return rc;
		if (spec->fp != 0 && w->h.fingerprint != spec->fp)
			return wd_fail(c, LM_EFINGERPRINT,
				       "model fingerprint mismatch: the message's is 0x%016" PRIx64
				       ", this side's is 0x%016" PRIx64,
				       w->h.fingerprint, spec->fp);
	}
	if ((w->seen & KB(K_ID)) == 0) {
		c->key = K_ID;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing key");
	}
	wd_at(c, w, K_ID);
	if ((rc = wd_u64(c, &w->h.id)) != 0)
		return rc;
	if (spec->inline_key >= 0 && (w->seen & KB(spec->inline_key)) != 0 && !w->parsed) {
		wd_at(c, w, spec->inline_key);
		return spec->parse(c, spec->ctx);
	}
	return 0;
}

/* Every key of `need` present. */
static int wd_require(struct wd *c, const struct wd_head *w, uint64_t need)
{
	uint64_t missing = need & ~w->seen;
	if (missing == 0)
		return 0;
	c->key = __builtin_ctzll(missing);
	c->idx = -1;
	c->elem = NULL;
	c->at = NULL;
	return wd_fail(c, LM_EPROTO, "missing key");
}

/* "pl": equal to `implied` (unless it is UINT64_MAX: anything) and to the bytes after the
 * header. */
static int wd_payload(struct wd *c, const struct wd_head *w, size_t len, uint64_t implied,
		      const void **payload, size_t *payload_len)
{
	uint64_t pl = 0;
	int rc;
	wd_at(c, w, K_PL);
	if ((rc = wd_u64(c, &pl)) != 0)
		return rc;
	if (implied != UINT64_MAX && pl != implied)
		return wd_fail(c, LM_EPROTO,
			       "%" PRIu64 " payload bytes where the header implies %" PRIu64, pl,
			       implied);
	size_t rest = len - w->header_len;
	if (pl != rest)
		return wd_fail(c, LM_EPROTO, "%" PRIu64 " payload bytes announced, %zu follow", pl,
			       rest);
	*payload = rest != 0 ? c->base + w->header_len : NULL;
	*payload_len = rest;
	return 0;
}

/* A message without "pl" ends with its header. */
static int wd_no_payload(struct wd *c, const struct wd_head *w, size_t len)
{
	if (len == w->header_len)
		return 0;
	c->key = -1;
	c->at = c->base + w->header_len;
	return wd_fail(c, LM_EPROTO, "%zu bytes follow a header that announces no payload",
		       len - w->header_len);
}

/* [begin, end, embedding, head]: layers [begin, end), not empty unless it has the embedding
 * or the head. */
static int wd_slice(struct wd *c, int32_t *begin, int32_t *end, bool *embedding, bool *head)
{
	int rc;
	if ((rc = wd_tuple(c, 4)) != 0)
		return rc;
	c->idx = 0;
	c->elem = "begin";
	if ((rc = wd_i32(c, 0, INT32_MAX, begin)) != 0)
		return rc;
	c->idx = 1;
	c->elem = "end";
	if ((rc = wd_i32(c, *begin, INT32_MAX, end)) != 0)
		return rc;
	c->idx = 2;
	c->elem = "embedding";
	if ((rc = wd_bool(c, embedding)) != 0)
		return rc;
	c->idx = 3;
	c->elem = "head";
	if ((rc = wd_bool(c, head)) != 0)
		return rc;
	if (*begin == *end && !*embedding && !*head) {
		c->idx = -1;
		c->elem = NULL;
		return wd_fail(c, LM_EPROTO, "an empty slice: no layers, no embedding, no head");
	}
	return 0;
}

/* A count of array elements against a limit and the scratch's cap. */
static int wd_count(struct wd *c, uint32_t n, int64_t lo, int32_t limit, const char *limit_name,
		    int32_t cap)
{
	if (n < lo)
		return wd_fail(c, LM_EPROTO, "%" PRIu32 " elements, at least %" PRId64 " needed", n,
			       lo);
	if (n > (uint32_t)(limit > 0 ? limit : 0))
		return wd_fail(c, LM_EPROTO, "%" PRIu32 " elements, more than %s (%" PRId32 ")", n,
			       limit_name, limit);
	if (n > (uint32_t)cap)
		return wd_fail(c, LM_EPROTO,
			       "%" PRIu32
			       " elements, more than the decoding scratch holds (%" PRId32 ")",
			       n, cap);
	return 0;
}

/* ---------------------------------------------------------------- the decoders */

int wire_peek(const void *buf, size_t len, struct wire_head *h, lm_diag *d)
{
	const struct wd_spec spec = {
		.allowed = KEYS_BASE, .types = TYPES_KNOWN, .lenient = true, .inline_key = -1};
	struct wd c;
	struct wd_head w;
	wd_init(&c, buf, len, d, "message");
	int rc = wd_walk(&c, &spec, &w);
	*h = w.h;
	return rc;
}

int wire_decode_simple(const void *buf, size_t len, const struct wire_limits *lim,
		       struct wire_head *h, lm_diag *d)
{
	const struct wd_spec spec = {.allowed = KEYS_BASE,
				     .types = TYPES_SIMPLE,
				     .fp = lim != NULL ? lim->fingerprint : 0,
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;
	wd_init(&c, buf, len, d, "header-only message");
	rc = wd_walk(&c, &spec, &w);
	*h = w.h;
	if (rc != 0)
		return rc;
	c.what = wire_type_name(w.h.type);
	if ((rc = wd_require(&c, &w, KEYS_BASE)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

/* ---------------------------------------------------------------- FORWARD */

struct wd_forward {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_forward *f;
	int64_t rows; /* the sum of the sequences' n_tokens */
};

static const char *const wire_seq_elems[12] = {
	"seq_id",     "slot",        "pos",   "n_tokens", "sample", "step",
	"n_logprobs", "temperature", "top_k", "top_p",    "min_p",  "seed",
};

/* One 12-element sequence entry. */
static int wd_seq(struct wd *c, const struct wire_limits *lim, struct wire_seq *q)
{
	int rc;
	c->elem = NULL;
	if ((rc = wd_tuple(c, 12)) != 0)
		return rc;
	c->elem = wire_seq_elems[0];
	if ((rc = wd_u64(c, &q->seq_id)) != 0)
		return rc;
	c->elem = wire_seq_elems[1];
	if ((rc = wd_i32(c, 0, (int64_t)lim->slots - 1, &q->slot)) != 0)
		return rc;
	c->elem = wire_seq_elems[2];
	if ((rc = wd_i32(c, 0, INT32_MAX, &q->pos)) != 0)
		return rc;
	const uint8_t *pos_at = c->at;
	c->elem = wire_seq_elems[3];
	if ((rc = wd_i32(c, 1, INT32_MAX, &q->n_tokens)) != 0)
		return rc;
	if ((int64_t)q->pos + q->n_tokens > lim->max_seq) {
		c->elem = wire_seq_elems[2];
		c->at = pos_at;
		return wd_fail(c, LM_EPROTO,
			       "positions [%" PRId32 ", %" PRId64 ") run past max_seq %" PRId32,
			       q->pos, (int64_t)q->pos + q->n_tokens, lim->max_seq);
	}
	c->elem = wire_seq_elems[4];
	if ((rc = wd_bool(c, &q->sample)) != 0)
		return rc;
	c->elem = wire_seq_elems[5];
	if ((rc = wd_u64(c, &q->step)) != 0)
		return rc;
	c->elem = wire_seq_elems[6];
	if ((rc = wd_i32(c, 0, lim->max_logprobs, &q->n_logprobs)) != 0)
		return rc;
	c->elem = wire_seq_elems[7];
	if ((rc = wd_f32(c, &q->sampling.temperature)) != 0)
		return rc;
	c->elem = wire_seq_elems[8];
	if ((rc = wd_i32(c, INT32_MIN, INT32_MAX, &q->sampling.top_k)) != 0)
		return rc;
	c->elem = wire_seq_elems[9];
	if ((rc = wd_f32(c, &q->sampling.top_p)) != 0)
		return rc;
	c->elem = wire_seq_elems[10];
	if ((rc = wd_f32(c, &q->sampling.min_p)) != 0)
		return rc;
	c->elem = wire_seq_elems[11];
	if ((rc = wd_u64(c, &q->sampling.seed)) != 0)
		return rc;
	lm_diag sd;
	if (lm_sampling_check(&q->sampling, &sd) != 0) {
		c->elem = "sampling";
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "%s", sd.msg);
	}
	return 0;
}

/* "seqs": everything that does not depend on the other keys ("n" is checked after). */
static int wd_forward_seqs(struct wd *c, void *ctx)
{
	struct wd_forward *x = ctx;
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 1, x->lim->max_seqs, "max_seqs", x->s->cap)) != 0)
		return rc;
	x->f->n_seqs = (int32_t)n;
	x->f->seqs = x->s->seqs;
	x->rows = 0;
	for (int32_t i = 0; i < x->f->n_seqs; i++) {
		c->idx = i;
		if ((rc = wd_seq(c, x->lim, &x->s->seqs[i])) != 0)
			return rc;
		x->rows += x->s->seqs[i].n_tokens;
	}
	/* Two entries writing one slot's KV in the same step would race: refuse. n_seqs is
	 * bounded by max_seqs, so the quadratic scan stays small. */
	c->at = NULL;
	for (int32_t i = 1; i < x->f->n_seqs; i++) {
		for (int32_t j = 0; j < i; j++) {
			if (x->s->seqs[i].slot == x->s->seqs[j].slot) {
				c->idx = i;
				c->elem = "slot";
				return wd_fail(c, LM_EPROTO,
					       "slot %" PRId32 " is also sequence %" PRId32 "'s",
					       x->s->seqs[i].slot, j);
			}
		}
	}
	return 0;
}

int wire_decode_forward(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_scratch *s, struct wire_forward *f, lm_diag *d)
{
	const uint64_t keys = KEYS_BASE | KB(K_SEQS) | KB(K_N) | KB(K_DT) | KB(K_DIM) | KB(K_PL);
	struct wd_forward x = {.lim = lim, .s = s, .f = f};
	const struct wd_spec spec = {.allowed = keys,
				     .types = TB(WIRE_FORWARD),
				     .fp = lim->fingerprint,
				     .inline_key = K_SEQS,
				     .parse = wd_forward_seqs,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	wd_init(&c, buf, len, d, "FORWARD");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	f->batch_id = w.h.id;
	f->fingerprint = w.h.fingerprint;

	wd_at(&c, &w, K_N);
	if ((rc = wd_i32(&c, 1, lim->max_batch, &f->n_tokens)) != 0)
		return rc;
	wd_at(&c, &w, K_DT);
	if ((rc = wd_range(&c, WIRE_DT_I32, WIRE_DT_BF16, &v)) != 0)
		return rc;
	f->dtype = (enum wire_dtype)v;
	wd_at(&c, &w, K_DIM);
	if ((rc = wd_range(&c, 0, INT32_MAX, &v)) != 0)
		return rc;
	int32_t want_dim = f->dtype == WIRE_DT_I32 ? 1 : lim->dim;
	if (v != want_dim)
		return wd_fail(&c, LM_EPROTO, "%" PRId64 " where %" PRId32 " was expected (%s)", v,
			       want_dim,
			       f->dtype == WIRE_DT_I32 ? "token ids" : "the model's hidden width");
	f->dim = want_dim;

	/* The sequences' rows cover [0, n) in order. */
	if (x.rows != f->n_tokens) {
		wd_at(&c, &w, K_SEQS);
		c.at = NULL;
		if (x.rows < f->n_tokens)
			return wd_fail(&c, LM_EPROTO,
				       "the sequences cover rows [0, %" PRId64
				       ") but \"n\" is %" PRId32,
				       x.rows, f->n_tokens);
		int64_t row = 0;
		int32_t i = 0;
		while (row + s->seqs[i].n_tokens <= f->n_tokens)
			row += s->seqs[i++].n_tokens;
		c.idx = i;
		c.elem = "n_tokens";
		return wd_fail(&c, LM_EPROTO,
			       "rows [%" PRId64 ", %" PRId64 ") run past \"n\" = %" PRId32, row,
			       row + s->seqs[i].n_tokens, f->n_tokens);
	}

	/* n <= max_batch and dim <= INT32_MAX: the product fits in 64 bits. */
	uint64_t implied = (uint64_t)f->n_tokens * (uint64_t)f->dim * wire_dtype_size(f->dtype);
	if ((rc = wd_payload(&c, &w, len, implied, &f->payload, &f->payload_len)) != 0)
		return rc;
	if (f->dtype == WIRE_DT_I32) {
		const uint8_t *ids = f->payload;
		for (int32_t r = 0; r < f->n_tokens; r++) {
			int32_t id;
			memcpy(&id, ids + 4 * (size_t)r, sizeof id);
			if (id < 0 || id >= lim->n_vocab) {
				c.key = -1;
				c.at = ids + 4 * (size_t)r;
				return wd_fail(&c, LM_EPROTO,
					       "payload row %" PRId32 ": token id %" PRId32
					       " is outside [0, %" PRId32 ")",
					       r, id, lim->n_vocab);
			}
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- TOKENS */

struct wd_tokens {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_tokens *t;
	uint64_t n_top; /* the sum of the tokens' n_top */
};

static int wd_tokens_toks(struct wd *c, void *ctx)
{
	struct wd_tokens *x = ctx;
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 0, x->lim->max_seqs, "max_seqs", x->s->cap)) != 0)
		return rc;
	x->t->n = (int32_t)n;
	x->t->toks = x->s->toks;
	x->n_top = 0;
	for (int32_t i = 0; i < x->t->n; i++) {
		struct wire_token *k = &x->s->toks[i];
		c->idx = i;
		c->elem = NULL;
		if ((rc = wd_tuple(c, 4)) != 0)
			return rc;
		c->elem = "seq_id";
		if ((rc = wd_u64(c, &k->seq_id)) != 0)
			return rc;
		c->elem = "token";
		if ((rc = wd_i32(c, 0, (int64_t)x->lim->n_vocab - 1, &k->token)) != 0)
			return rc;
		c->elem = "logprob";
		if ((rc = wd_f32(c, &k->logprob)) != 0)
			return rc;
		if (!(k->logprob <= 0))
			return wd_fail(c, LM_EPROTO, "%g is not a log-probability",
				       (double)k->logprob);
		c->elem = "n_top";
		if ((rc = wd_i32(c, 0, x->lim->max_logprobs, &k->n_top)) != 0)
			return rc;
		x->n_top += (uint64_t)k->n_top;
	}
	return 0;
}

int wire_decode_tokens(const void *buf, size_t len, const struct wire_limits *lim,
		       struct wire_scratch *s, struct wire_tokens *t, lm_diag *d)
{
	const uint64_t keys = KEYS_BASE | KB(K_TOKS) | KB(K_PL);
	struct wd_tokens x = {.lim = lim, .s = s, .t = t};
	const struct wd_spec spec = {.allowed = keys,
				     .types = TB(WIRE_TOKENS),
				     .fp = lim->fingerprint,
				     .inline_key = K_TOKS,
				     .parse = wd_tokens_toks,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int rc;

	wd_init(&c, buf, len, d, "TOKENS");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	t->batch_id = w.h.id;
	t->fingerprint = w.h.fingerprint;
	if ((rc = wd_payload(&c, &w, len, 8 * x.n_top, &t->payload, &t->payload_len)) != 0)
		return rc;

	/* The top alternatives: per token, n_top ids then n_top logprobs. */
	const uint8_t *p = t->payload;
	c.key = -1;
	for (int32_t i = 0; i < t->n; i++) {
		int32_t m = s->toks[i].n_top;
		for (int32_t j = 0; j < m; j++) {
			int32_t id;
			float lp;
			memcpy(&id, p + 4 * (size_t)j, sizeof id);
			memcpy(&lp, p + 4 * ((size_t)m + (size_t)j), sizeof lp);
			if (id < 0 || id >= lim->n_vocab) {
				c.at = p + 4 * (size_t)j;
				return wd_fail(&c, LM_EPROTO,
					       "payload: token %" PRId32 "'s alternative %" PRId32
					       " has id %" PRId32 ", outside [0, %" PRId32 ")",
					       i, j, id, lim->n_vocab);
			}
			if (!(lp <= 0)) {
				c.at = p + 4 * ((size_t)m + (size_t)j);
				return wd_fail(&c, LM_EPROTO,
					       "payload: token %" PRId32 "'s alternative %" PRId32
					       " has logprob %g, not a log-probability",
					       i, j, (double)lp);
			}
		}
		p += 8 * (size_t)m;
	}
	return 0;
}

/* ---------------------------------------------------------------- RELEASE */

struct wd_release {
	const struct wire_limits *lim;
	struct wire_scratch *s;
	struct wire_release *r;
};

static int wd_release_slots(struct wd *c, void *ctx)
{
	struct wd_release *x = ctx;
	uint32_t n;
	int rc;
	if ((rc = wd_array(c, &n)) != 0)
		return rc;
	if ((rc = wd_count(c, n, 0, x->lim->slots, "slots", x->s->cap)) != 0)
		return rc;
	x->r->n = (int32_t)n;
	x->r->slots = x->s->slots;
	for (int32_t i = 0; i < x->r->n; i++) {
		c->idx = i;
		if ((rc = wd_i32(c, 0, (int64_t)x->lim->slots - 1, &x->s->slots[i])) != 0)
			return rc;
	}
	return 0;
}

int wire_decode_release(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_scratch *s, struct wire_release *r, lm_diag *d)
{
	const uint64_t keys = KEYS_BASE | KB(K_SLOTS);
	struct wd_release x = {.lim = lim, .s = s, .r = r};
	const struct wd_spec spec = {.allowed = keys,
				     .types = TB(WIRE_RELEASE),
				     .fp = lim->fingerprint,
				     .inline_key = K_SLOTS,
				     .parse = wd_release_slots,
				     .ctx = &x};
	struct wd c;
	struct wd_head w;
	int rc;

	wd_init(&c, buf, len, d, "RELEASE");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	r->id = w.h.id;
	r->fingerprint = w.h.fingerprint;
	return wd_no_payload(&c, &w, len);
}

/* ---------------------------------------------------------------- control messages */

int wire_decode_hello(const void *buf, size_t len, struct wire_hello *h, lm_diag *d)
{
	const uint64_t reply = KB(K_FP) | KB(K_NAME) | KB(K_BUILD) | KB(K_PID);
	const struct wd_spec spec = {.allowed = KB(K_V) | KB(K_T) | KB(K_ID) | reply | KB(K_SLICE),
				     .types = TB(WIRE_HELLO),
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(h, 0, sizeof *h);
	wd_init(&c, buf, len, d, "HELLO");
	rc = wd_walk(&c, &spec, &w);
	h->version = w.h.version;
	h->id = w.h.id;
	if (rc != 0)
		return rc;
	if ((w.seen & (reply | KB(K_SLICE))) != 0) {
		if ((rc = wd_require(&c, &w, reply)) != 0)
			return rc;
		h->fingerprint = w.h.fingerprint;
		wd_at(&c, &w, K_NAME);
		if ((rc = wd_str(&c, h->name, sizeof h->name, false)) != 0)
			return rc;
		wd_at(&c, &w, K_BUILD);
		if ((rc = wd_str(&c, h->build, sizeof h->build, false)) != 0)
			return rc;
		wd_at(&c, &w, K_PID);
		if ((rc = wd_i32(&c, 1, INT32_MAX, &h->pid)) != 0)
			return rc;
		if ((w.seen & KB(K_SLICE)) != 0) {
			wd_at(&c, &w, K_SLICE);
			if ((rc = wd_slice(&c, &h->begin, &h->end, &h->embedding, &h->head)) != 0)
				return rc;
			h->has_slice = true;
		}
	}
	return wd_no_payload(&c, &w, len);
}

int wire_decode_assign(const void *buf, size_t len, struct wire_assign *a, lm_diag *d)
{
	const uint64_t keys = KB(K_V) | KB(K_T) | KB(K_ID) | KB(K_MODEL) | KB(K_SLICE) | KB(K_SEQ) |
			      KB(K_SLOTS) | KB(K_KVK) | KB(K_KVV) | KB(K_WDT) | KB(K_BATCH) |
			      KB(K_NEXT);
	const struct wd_spec spec = {.allowed = keys, .types = TB(WIRE_ASSIGN), .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	memset(a, 0, sizeof *a);
	wd_init(&c, buf, len, d, "ASSIGN");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	a->id = w.h.id;
	wd_at(&c, &w, K_MODEL);
	if ((rc = wd_str(&c, a->model, sizeof a->model, true)) != 0)
		return rc;
	wd_at(&c, &w, K_SLICE);
	if ((rc = wd_slice(&c, &a->begin, &a->end, &a->embedding, &a->head)) != 0)
		return rc;
	wd_at(&c, &w, K_SEQ);
	if ((rc = wd_i32(&c, 1, INT32_MAX, &a->max_seq)) != 0)
		return rc;
	wd_at(&c, &w, K_SLOTS);
	if ((rc = wd_i32(&c, 1, INT32_MAX, &a->slots)) != 0)
		return rc;
	wd_at(&c, &w, K_KVK);
	if ((rc = wd_u32(&c, &a->k_type)) != 0)
		return rc;
	if (lm_dtype_info(a->k_type) == NULL)
		return wd_fail(&c, LM_EPROTO, "%" PRIu32 " is not a GGUF tensor type", a->k_type);
	wd_at(&c, &w, K_KVV);
	if ((rc = wd_u32(&c, &a->v_type)) != 0)
		return rc;
	if (lm_dtype_info(a->v_type) == NULL)
		return wd_fail(&c, LM_EPROTO, "%" PRIu32 " is not a GGUF tensor type", a->v_type);
	wd_at(&c, &w, K_WDT);
	if ((rc = wd_range(&c, WIRE_DT_F32, WIRE_DT_BF16, &v)) != 0)
		return rc;
	a->wire_dtype = (enum wire_dtype)v;
	wd_at(&c, &w, K_BATCH);
	if ((rc = wd_i32(&c, 1, INT32_MAX, &a->max_batch)) != 0)
		return rc;
	wd_at(&c, &w, K_NEXT);
	if ((rc = wd_str(&c, a->next, sizeof a->next, true)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_ready(const void *buf, size_t len, struct wire_ready *r, lm_diag *d)
{
	const uint64_t keys = KEYS_BASE | KB(K_KVB) | KB(K_WB) | KB(K_RSS);
	const struct wd_spec spec = {.allowed = keys, .types = TB(WIRE_READY), .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	wd_init(&c, buf, len, d, "READY");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	r->id = w.h.id;
	r->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, K_KVB);
	if ((rc = wd_u64(&c, &r->kv_bytes)) != 0)
		return rc;
	wd_at(&c, &w, K_WB);
	if ((rc = wd_u64(&c, &r->weight_bytes)) != 0)
		return rc;
	wd_at(&c, &w, K_RSS);
	if ((rc = wd_u64(&c, &r->rss_bytes)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_error(const void *buf, size_t len, struct wire_error *e, lm_diag *d)
{
	const uint64_t keys = KB(K_V) | KB(K_T) | KB(K_ID) | KB(K_CODE) | KB(K_MSG) | KB(K_ABOUT);
	const struct wd_spec spec = {.allowed = keys, .types = TB(WIRE_ERROR), .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(e, 0, sizeof *e);
	wd_init(&c, buf, len, d, "ERROR");
	rc = wd_walk(&c, &spec, &w);
	e->id = w.h.id;
	if (rc != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	wd_at(&c, &w, K_CODE);
	if ((rc = wd_i32(&c, INT32_MIN, -1, &e->code)) != 0)
		return rc;
	wd_at(&c, &w, K_MSG);
	if ((rc = wd_str(&c, e->msg, sizeof e->msg, false)) != 0)
		return rc;
	wd_at(&c, &w, K_ABOUT);
	if ((rc = wd_u32(&c, &e->about)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_kv(const void *buf, size_t len, const struct wire_limits *lim, struct wire_kv *k,
		   lm_diag *d)
{
	const uint64_t rows = KB(K_LEN) | KB(K_DT) | KB(K_PL);
	const struct wd_spec spec = {.allowed = KEYS_BASE | KB(K_SLOT) | rows,
				     .types = TB(WIRE_KV_EXPORT) | TB(WIRE_KV_IMPORT),
				     .fp = lim->fingerprint,
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	memset(k, 0, sizeof *k);
	wd_init(&c, buf, len, d, "KV_EXPORT or KV_IMPORT");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	c.what = wire_type_name(w.h.type);
	if ((rc = wd_require(&c, &w, KEYS_BASE | KB(K_SLOT))) != 0)
		return rc;
	k->id = w.h.id;
	k->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, K_SLOT);
	if ((rc = wd_i32(&c, 0, (int64_t)lim->slots - 1, &k->slot)) != 0)
		return rc;
	if ((w.seen & rows) == 0)
		return wd_no_payload(&c, &w, len);
	if ((rc = wd_require(&c, &w, rows)) != 0)
		return rc;
	wd_at(&c, &w, K_LEN);
	if ((rc = wd_i32(&c, 0, lim->max_seq, &k->len)) != 0)
		return rc;
	wd_at(&c, &w, K_DT);
	if ((rc = wd_range(&c, WIRE_DT_RAW, WIRE_DT_RAW, &v)) != 0)
		return rc;
	return wd_payload(&c, &w, len, UINT64_MAX, &k->payload, &k->payload_len);
}

int wire_decode_repoint(const void *buf, size_t len, const struct wire_limits *lim,
			struct wire_repoint *r, lm_diag *d)
{
	const uint64_t keys = KEYS_BASE | KB(K_NEXT);
	const struct wd_spec spec = {.allowed = keys,
				     .types = TB(WIRE_REPOINT),
				     .fp = lim->fingerprint,
				     .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int rc;

	memset(r, 0, sizeof *r);
	wd_init(&c, buf, len, d, "REPOINT");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	r->id = w.h.id;
	r->fingerprint = w.h.fingerprint;
	wd_at(&c, &w, K_NEXT);
	if ((rc = wd_str(&c, r->next, sizeof r->next, true)) != 0)
		return rc;
	return wd_no_payload(&c, &w, len);
}

int wire_decode_raw(const void *buf, size_t len, const void **payload, size_t *payload_len,
		    lm_diag *d)
{
	const uint64_t keys = KEYS_BASE | KB(K_DT) | KB(K_PL);
	const struct wd_spec spec = {.allowed = keys, .types = TYPES_KNOWN, .inline_key = -1};
	struct wd c;
	struct wd_head w;
	int64_t v = 0;
	int rc;

	wd_init(&c, buf, len, d, "raw message");
	if ((rc = wd_walk(&c, &spec, &w)) != 0)
		return rc;
	c.what = wire_type_name(w.h.type);
	if ((rc = wd_require(&c, &w, keys)) != 0)
		return rc;
	wd_at(&c, &w, K_DT);
	if ((rc = wd_range(&c, WIRE_DT_RAW, WIRE_DT_RAW, &v)) != 0)
		return rc;
	return wd_payload(&c, &w, len, UINT64_MAX, payload, payload_len);
}

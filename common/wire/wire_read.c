/* wire_read.c — the bounded msgpack reader and the header walk of the wire decoder.
 *
 * The message decoders are in wire_decode.c; the internals both share are in wire_read.h.
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
#include "common/wire/wire_read.h"

#include <stdarg.h>
#include <stdio.h>

/* ---------------------------------------------------------------- keys */

static const struct {
	const char *name;
	uint32_t len;
} wire_keys[WK_COUNT] = {
	[WK_V] = {"v", 1},       [WK_T] = {"t", 1},         [WK_FP] = {"fp", 2},
	[WK_ID] = {"id", 2},     [WK_SEQS] = {"seqs", 4},   [WK_N] = {"n", 1},
	[WK_DT] = {"dt", 2},     [WK_DIM] = {"dim", 3},     [WK_PL] = {"pl", 2},
	[WK_TOKS] = {"toks", 4}, [WK_SLOTS] = {"slots", 5}, [WK_SLOT] = {"slot", 4},
	[WK_LEN] = {"len", 3},   [WK_NAME] = {"name", 4},   [WK_BUILD] = {"build", 5},
	[WK_PID] = {"pid", 3},   [WK_SLICE] = {"slice", 5}, [WK_MODEL] = {"model", 5},
	[WK_SEQ] = {"seq", 3},   [WK_KVK] = {"kvk", 3},     [WK_KVV] = {"kvv", 3},
	[WK_WDT] = {"wdt", 3},   [WK_BATCH] = {"batch", 5}, [WK_NEXT] = {"next", 4},
	[WK_KVB] = {"kvb", 3},   [WK_WB] = {"wb", 2},       [WK_RSS] = {"rss", 3},
	[WK_CODE] = {"code", 4}, [WK_MSG] = {"msg", 3},     [WK_ABOUT] = {"about", 5},
	[WK_ADJ] = {"adj", 3},   [WK_DIG] = {"dig", 3},     [WK_DR] = {"dr", 2},
	[WK_KKS] = {"kks", 3},   [WK_KVS] = {"kvs", 3},     [WK_DRF] = {"drf", 3},
	[WK_HI] = {"hi", 2},     [WK_GR] = {"gr", 2},       [WK_TS] = {"ts", 2},
};

static int wire_key_find(const uint8_t *s, uint32_t n, uint64_t allowed)
{
	for (int k = 0; k < WK_COUNT; k++) {
		if ((allowed & WK_BIT(k)) != 0 && wire_keys[k].len == n &&
		    (uint8_t)wire_keys[k].name[0] == s[0] && memcmp(wire_keys[k].name, s, n) == 0)
			return k;
	}
	return -1;
}

/* ---------------------------------------------------------------- the cursor */

int wd_fail(const struct wd *c, int code, const char *fmt, ...)
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
int wd_bad(struct wd *c, int why, const char *want)
{
	if (why == WD_SHORT)
		return wd_fail(c, LM_EPROTO, "the message ends inside %s", want);
	return wd_fail(c, LM_EPROTO, "expected %s, got %s", want, wd_type_name(c, c->p));
}

/* The message for an integer outside [lo, hi] (out of line: wd_range is inlined everywhere). */
int wd_range_fail(struct wd *c, uint64_t u, bool neg, int64_t lo, int64_t hi)
{
	char v[24];
	if (neg)
		snprintf(v, sizeof v, "%" PRId64, (int64_t)u);
	else
		snprintf(v, sizeof v, "%" PRIu64, u);
	return wd_fail(c, LM_EPROTO, "%s is outside [%" PRId64 ", %" PRId64 "]", v, lo, hi);
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

/* A string into dst[cap]: at most cap - 1 bytes, no NUL, non-empty if asked. */
int wd_str(struct wd *c, char *dst, size_t cap, bool nonempty)
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

int wd_strref(struct wd *c, const char **s, uint32_t *n, uint32_t most)
{
	const uint8_t *p;
	c->at = c->p;
	int rc = wd_rd_str(c, &p, n);
	if (rc != 0)
		return wd_bad(c, rc, "a string");
	if (*n > most)
		return wd_fail(c, LM_EPROTO, "a string of %" PRIu32 " bytes, longer than %" PRIu32,
			       *n, most);
	if (memchr(p, '\0', *n) != NULL)
		return wd_fail(c, LM_EPROTO, "the string contains a NUL byte");
	*s = (const char *)p;
	return 0;
}

/* An array header whose count the bytes left could hold. */
int wd_array(struct wd *c, uint32_t *n)
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
int wd_tuple(struct wd *c, uint32_t want)
{
	uint32_t n;
	int rc = wd_array(c, &n);
	if (rc == 0 && n != want)
		return wd_fail(c, LM_EPROTO, "an array of %" PRIu32 " elements, expected %" PRIu32,
			       n, want);
	return rc;
}

/* ---------------------------------------------------------------- the header walk */

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
int wd_walk(struct wd *c, const struct wd_spec *spec, struct wd_head *w)
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
			} else if ((w->seen & WK_BIT(k)) != 0) {
				if (kerr.why == NULL)
					kerr = (struct wd_keyerr){"duplicate key", key_at, s, len};
			} else {
				uint64_t u = 0;
				w->seen |= WK_BIT(k);
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
				if (k == WK_V)
					v_ok = wd_peek_uint(c, &u) && u == WIRE_VERSION;
				else if (k == WK_T)
					t_ok = wd_peek_uint(c, &u) && u <= 31 &&
					       (spec->types & WT_BIT(u)) != 0;
				else if (k == WK_FP)
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
	if ((w->seen & WK_BIT(WK_V)) == 0) {
		c->key = WK_V;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing key");
	}
	if ((w->seen & WK_BIT(WK_T)) != 0) {
		uint64_t u = 0;
		c->p = w->val[WK_T];
		if (wd_peek_uint(c, &u) && u <= UINT32_MAX)
			w->h.type = (uint32_t)u;
	}
	if ((w->seen & WK_BIT(WK_ID)) != 0) {
		c->p = w->val[WK_ID];
		wd_peek_uint(c, &w->h.id);
	}
	wd_at(c, w, WK_V);
	if ((rc = wd_u32(c, &w->h.version)) != 0)
		return rc;
	if (w->h.version != WIRE_VERSION)
		return wd_fail(c, LM_EVERSION,
			       "protocol version mismatch: the message is version %" PRIu32
			       ", this build speaks version %d",
			       w->h.version, WIRE_VERSION);

	if ((w->seen & WK_BIT(WK_T)) == 0) {
		c->key = WK_T;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing key");
	}
	wd_at(c, w, WK_T);
	if ((rc = wd_u32(c, &w->h.type)) != 0)
		return rc;
	if (w->h.type > 31 || (spec->types & WT_BIT(w->h.type)) == 0)
		return wd_fail(c, LM_EPROTO, "message type %" PRIu32 " (%s) where %s was expected",
			       w->h.type, wire_type_name(w->h.type), c->what);
	if (kerr.why != NULL)
		return wd_keyerr_fail(c, &kerr);
	if ((w->seen & WK_BIT(WK_FP)) != 0) {
		wd_at(c, w, WK_FP);
		if ((rc = wd_u64(c, &w->h.fingerprint)) != 0)
			return rc;
		if (spec->fp != 0 && w->h.fingerprint != spec->fp)
			return wd_fail(c, LM_EFINGERPRINT,
				       "model fingerprint mismatch: the message's is 0x%016" PRIx64
				       ", not this side's model",
				       w->h.fingerprint);
	}
	if ((w->seen & WK_BIT(WK_ID)) == 0) {
		c->key = WK_ID;
		c->at = NULL;
		return wd_fail(c, LM_EPROTO, "missing key");
	}
	wd_at(c, w, WK_ID);
	if ((rc = wd_u64(c, &w->h.id)) != 0)
		return rc;
	if (spec->inline_key >= 0 && (w->seen & WK_BIT(spec->inline_key)) != 0 && !w->parsed) {
		wd_at(c, w, spec->inline_key);
		return spec->parse(c, spec->ctx);
	}
	return 0;
}

/* Every key of `need` present. */
int wd_require(struct wd *c, const struct wd_head *w, uint64_t need)
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
int wd_payload(struct wd *c, const struct wd_head *w, size_t len, uint64_t implied,
	       const void **payload, size_t *payload_len)
{
	uint64_t pl = 0;
	int rc;
	wd_at(c, w, WK_PL);
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
int wd_no_payload(struct wd *c, const struct wd_head *w, size_t len)
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
int wd_slice(struct wd *c, int32_t *begin, int32_t *end, bool *embedding, bool *head)
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
int wd_count(struct wd *c, uint32_t n, int64_t lo, int32_t limit, const char *limit_name,
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

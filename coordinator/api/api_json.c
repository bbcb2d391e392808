/* api_json.c — a strict JSON reader building cJSON trees. See api_json.h.
 *
 * String items carry their byte length in `valueint`, which cJSON leaves unused for strings:
 * that is how a string holding U+0000 keeps its length. A recursive descent over a bounded
 * cursor; every failure says what was expected and at which byte.
 */
#include "coordinator/api/api_json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/utf8.h"

struct jr {
	const char *s, *p, *end;
	char *why;
	size_t cap;
	bool failed;
};

static cJSON *jr_fail(struct jr *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static cJSON *jr_fail(struct jr *r, const char *fmt, ...)
{
	if (r->failed)
		return NULL;
	r->failed = true;
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(r->why, r->cap, "%s at byte %zu", msg, (size_t)(r->p - r->s));
	return NULL;
}

static void jr_space(struct jr *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static int jr_hex4(const char *p)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static size_t jr_put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* One \u escape (p at the 'u'), a surrogate pair taken whole; the code point in *cp. */
static bool jr_unicode(struct jr *r, uint32_t *cp)
{
	if (r->end - r->p < 5 || jr_hex4(r->p + 1) < 0) {
		jr_fail(r, "a malformed \\u escape");
		return false;
	}
	uint32_t u = (uint32_t)jr_hex4(r->p + 1);
	r->p += 5;
	if (u >= 0xdc00 && u <= 0xdfff) {
		jr_fail(r, "a lone low surrogate \\u%04x", u);
		return false;
	}
	if (u >= 0xd800 && u <= 0xdbff) {
		int lo = r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u' ? jr_hex4(r->p + 2)
										 : -1;
		if (lo < 0xdc00 || lo > 0xdfff) {
			jr_fail(r, "a high surrogate \\u%04x without its low half", u);
			return false;
		}
		u = 0x10000 + ((u - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
		r->p += 6;
	}
	*cp = u;
	return true;
}

/* A string (r->p at its opening quote) into a malloc'd buffer. */
static char *jr_string_raw(struct jr *r, size_t *len)
{
	const char *start = ++r->p;
	/* The decoded string is never longer than its source. */
	const char *q = start;
	while (q < r->end && *q != '"')
		q += *q == '\\' && q + 1 < r->end ? 2 : 1;
	char *out = malloc((size_t)(q - start) + 1);
	if (out == NULL) {
		jr_fail(r, "out of memory");
		return NULL;
	}
	size_t n = 0;
	for (;;) {
		if (r->p >= r->end) {
			free(out);
			jr_fail(r, "an unterminated string");
			return NULL;
		}
		unsigned char c = (unsigned char)*r->p;
		if (c == '"') {
			r->p++;
			break;
		}
		if (c == '\\') {
			if (r->p + 1 >= r->end) {
				free(out);
				jr_fail(r, "an unterminated string");
				return NULL;
			}
			char e = r->p[1];
			const char *map = strchr("\"\\/bfnrt", e);
			if (e != '\0' && map != NULL) {
				out[n++] = "\"\\/\b\f\n\r\t"[map - "\"\\/bfnrt"];
				r->p += 2;
				continue;
			}
			uint32_t cp;
			r->p++;
			if (e != 'u' || !jr_unicode(r, &cp)) {
				free(out);
				jr_fail(r, "an invalid escape \\%c", e);
				return NULL;
			}
			n += jr_put_utf8(out + n, cp);
			continue;
		}
		if (c < 0x20) { /* RFC 8259, section 7: control characters must be escaped */
			free(out);
			jr_fail(r,
				"a raw control character U+%04X in a string (write it as \\u%04X)",
				c, c);
			return NULL;
		}
		size_t k = lm_utf8_len((const uint8_t *)r->p, (size_t)(r->end - r->p));
		if (k == 0) {
			free(out);
			jr_fail(r, "a string that is not valid UTF-8");
			return NULL;
		}
		memcpy(out + n, r->p, k);
		n += k;
		r->p += k;
	}
	out[n] = '\0';
	*len = n;
	return out;
}

static cJSON *jr_string(struct jr *r)
{
	size_t len = 0;
	char *s = jr_string_raw(r, &len);
	if (s == NULL)
		return NULL;
	if (len > INT32_MAX) {
		free(s);
		return jr_fail(r, "a string too long");
	}
	cJSON *item = cJSON_CreateString("");
	if (item == NULL) {
		free(s);
		return jr_fail(r, "out of memory");
	}
	cJSON_free(item->valuestring);
	item->valuestring = s;
	item->valueint = (int)len;
	return item;
}

static cJSON *jr_number(struct jr *r)
{
	const char *p = r->p, *start = p;
	if (p < r->end && *p == '-')
		p++;
	if (p < r->end && *p == '0') {
		p++;
	} else if (p < r->end && *p >= '1' && *p <= '9') {
		while (p < r->end && *p >= '0' && *p <= '9')
			p++;
	} else {
		return jr_fail(r, "an invalid value");
	}
	if (p < r->end && *p == '.') {
		p++;
		if (p >= r->end || *p < '0' || *p > '9')
			return jr_fail(r, "a number with no digits after its point");
		while (p < r->end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < r->end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < r->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= r->end || *p < '0' || *p > '9')
			return jr_fail(r, "a number with no digits in its exponent");
		while (p < r->end && *p >= '0' && *p <= '9')
			p++;
	}
	char buf[64];
	size_t n = (size_t)(p - start);
	if (n >= sizeof buf)
		return jr_fail(r, "a number of more than %zu characters", sizeof buf - 1);
	memcpy(buf, start, n);
	buf[n] = '\0';
	double v = strtod(buf, NULL);
	if (!isfinite(v))
		return jr_fail(r, "a number out of range");
	r->p = p;
	cJSON *item = cJSON_CreateNumber(v);
	return item != NULL ? item : jr_fail(r, "out of memory");
}

static cJSON *jr_value(struct jr *r, int depth);

static cJSON *jr_array(struct jr *r, int depth)
{
	cJSON *a = cJSON_CreateArray();
	if (a == NULL)
		return jr_fail(r, "out of memory");
	r->p++;
	jr_space(r);
	if (r->p < r->end && *r->p == ']') {
		r->p++;
		return a;
	}
	for (;;) {
		cJSON *v = jr_value(r, depth + 1);
		if (v == NULL) {
			cJSON_Delete(a);
			return NULL;
		}
		cJSON_AddItemToArray(a, v);
		jr_space(r);
		if (r->p < r->end && *r->p == ',') {
			r->p++;
			continue;
		}
		if (r->p < r->end && *r->p == ']') {
			r->p++;
			return a;
		}
		cJSON_Delete(a);
		return jr_fail(r, "expected ',' or ']'");
	}
}

static cJSON *jr_object(struct jr *r, int depth)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return jr_fail(r, "out of memory");
	r->p++;
	jr_space(r);
	if (r->p < r->end && *r->p == '}') {
		r->p++;
		return o;
	}
	for (;;) {
		jr_space(r);
		if (r->p >= r->end || *r->p != '"') {
			cJSON_Delete(o);
			return jr_fail(r, "expected a string key");
		}
		const char *key_at = r->p;
		size_t klen = 0;
		char *key = jr_string_raw(r, &klen);
		if (key == NULL) {
			cJSON_Delete(o);
			return NULL;
		}
		bool bad = strlen(key) != klen || cJSON_GetObjectItemCaseSensitive(o, key) != NULL;
		if (bad) {
			r->p = key_at;
			if (strlen(key) != klen)
				jr_fail(r, "a key holding U+0000");
			else
				jr_fail(r, "the key '%.60s' twice", key);
			free(key);
			cJSON_Delete(o);
			return NULL;
		}
		jr_space(r);
		cJSON *v = NULL;
		if (r->p < r->end && *r->p == ':') {
			r->p++;
			v = jr_value(r, depth + 1);
		} else {
			jr_fail(r, "expected ':'");
		}
		if (v == NULL) {
			free(key);
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddItemToObject(o, key, v);
		free(key);
		jr_space(r);
		if (r->p < r->end && *r->p == ',') {
			r->p++;
			continue;
		}
		if (r->p < r->end && *r->p == '}') {
			r->p++;
			return o;
		}
		cJSON_Delete(o);
		return jr_fail(r, "expected ',' or '}'");
	}
}

static cJSON *jr_literal(struct jr *r, const char *word, cJSON *item)
{
	size_t n = strlen(word);
	if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) {
		cJSON_Delete(item);
		return jr_fail(r, "an invalid value");
	}
	r->p += n;
	return item != NULL ? item : jr_fail(r, "out of memory");
}

static cJSON *jr_value(struct jr *r, int depth)
{
	if (depth > API_JSON_MAX_DEPTH)
		return jr_fail(r, "nesting deeper than %d levels", API_JSON_MAX_DEPTH);
	jr_space(r);
	if (r->p >= r->end)
		return jr_fail(r, "the body ends where a value was expected");
	switch (*r->p) {
	case '{':
		return jr_object(r, depth);
	case '[':
		return jr_array(r, depth);
	case '"':
		return jr_string(r);
	case 't':
		return jr_literal(r, "true", cJSON_CreateTrue());
	case 'f':
		return jr_literal(r, "false", cJSON_CreateFalse());
	case 'n':
		return jr_literal(r, "null", cJSON_CreateNull());
	default:
		return jr_number(r);
	}
}

cJSON *api_json_parse(const char *text, size_t len, char *why, size_t cap)
{
	struct jr r = {.s = text != NULL ? text : "",
		       .p = text != NULL ? text : "",
		       .end = (text != NULL ? text : "") + len,
		       .why = why,
		       .cap = cap};
	if (cap > 0)
		why[0] = '\0';
	cJSON *v = jr_value(&r, 1);
	if (v == NULL)
		return NULL;
	jr_space(&r);
	if (r.p != r.end) {
		cJSON_Delete(v);
		return jr_fail(&r, "bytes after the JSON value");
	}
	return v;
}

size_t api_json_len(const cJSON *item)
{
	return cJSON_IsString(item) && item->valueint > 0 ? (size_t)item->valueint : 0;
}

cJSON *api_json_add_u64(cJSON *o, const char *name, uint64_t v)
{
	char digits[24];
	snprintf(digits, sizeof digits, "%" PRIu64, v);
	return cJSON_AddRawToObject(o, name, digits);
}

/* wire_surgery.h — what the wire codec's tests share (tests/unit/test_wire.c, which builds and
 * reads messages, and test_wire_refusals.c, which breaks them): the scratch and buffer every
 * test starts with, and the message surgery helpers: split a message into its header's keys
 * with msgpack-c, swap a value, join it again. Included by test files only. */
#ifndef LM_TEST_WIRE_SURGERY_H
#define LM_TEST_WIRE_SURGERY_H

#include <criterion/criterion.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/wire.h"
#include "tests/support/wire_samples.h"

/* Each test file's own, set up and torn down around every test. */
static struct wire_scratch scr;
static struct wire_buf buf;

static inline void wire_setup(void)
{
	cr_assert_eq(wire_scratch_init_rows(&scr, WS_SCRATCH, WS_SCRATCH_ROWS), 0);
	memset(&buf, 0, sizeof buf);
}

static inline void wire_teardown(void)
{
	wire_scratch_fini(&scr);
	wire_buf_fini(&buf);
}

/* "speaks version N" of this build, for messages. */
#define WS_STR_(x)   #x
#define WS_STR(x)    WS_STR_(x)
#define WS_SPEAKS_US "speaks version " WS_STR(WIRE_VERSION_CURRENT)

static inline void expect_err(int rc, int code, const lm_diag *d, const char *needle)
{
	cr_assert_eq(rc, code, "expected %s, got %s: %s", lm_err_name(code), lm_err_name(rc),
		     d->msg);
	if (needle != NULL)
		cr_assert(strstr(d->msg, needle) != NULL, "'%s' not in: %s", needle, d->msg);
}

static inline void make(int k)
{
	wire_buf_reset(&buf);
	cr_assert_eq(ws_make(k, &buf), 0, "%s", ws_names[k]);
}

/* A growable byte string for messages built by hand. */
struct bytes {
	uint8_t *p;
	size_t len, cap;
};

static inline int bytes_write(void *data, const char *src, size_t n)
{
	struct bytes *b = data;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		cr_assert_not_null(b->p);
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
	return 0;
}

static inline void bytes_free(struct bytes *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

static inline void pk_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
}

/* A message as msgpack-c sees it: its header map's entries (editable) and the payload after. */
struct msg {
	msgpack_unpacked u; /* owns the objects; strings point into the source buffer */
	msgpack_object_kv kv[32];
	uint32_t n;
	const uint8_t *payload;
	size_t payload_len;
};

static inline void msg_split(struct msg *m, const uint8_t *src, size_t len)
{
	size_t off = 0;
	msgpack_unpacked_init(&m->u);
	cr_assert_eq(msgpack_unpack_next(&m->u, (const char *)src, len, &off),
		     MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(m->u.data.type, MSGPACK_OBJECT_MAP);
	m->n = m->u.data.via.map.size;
	cr_assert_leq(m->n, 30);
	memcpy(m->kv, m->u.data.via.map.ptr, m->n * sizeof m->kv[0]);
	m->payload = src + off;
	m->payload_len = len - off;
}

static inline void msg_free(struct msg *m)
{
	msgpack_unpacked_destroy(&m->u);
}

static inline int msg_find(const struct msg *m, const char *key)
{
	for (uint32_t i = 0; i < m->n; i++) {
		const msgpack_object *k = &m->kv[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
		    memcmp(k->via.str.ptr, key, k->via.str.size) == 0)
			return (int)i;
	}
	return -1;
}

static inline const char *msg_key(const struct msg *m, uint32_t i, char *out, size_t cap)
{
	const msgpack_object *k = &m->kv[i].key;
	size_t n = k->via.str.size < cap - 1 ? k->via.str.size : cap - 1;
	memcpy(out, k->via.str.ptr, n);
	out[n] = '\0';
	return out;
}

/* Packs the entries and appends the payload (payload_len bytes of it, which may differ). */
static inline void msg_join(const struct msg *m, struct bytes *out, size_t payload_len)
{
	msgpack_packer pk;
	out->len = 0;
	msgpack_packer_init(&pk, out, bytes_write);
	msgpack_pack_map(&pk, m->n);
	for (uint32_t i = 0; i < m->n; i++) {
		msgpack_pack_object(&pk, m->kv[i].key);
		msgpack_pack_object(&pk, m->kv[i].val);
	}
	for (size_t i = 0; i < payload_len; i++) {
		uint8_t byte = i < m->payload_len ? m->payload[i] : (uint8_t)i;
		bytes_write(out, (const char *)&byte, 1);
	}
}

static inline msgpack_object obj_int(int64_t v)
{
	msgpack_object o;
	if (v >= 0) {
		o.type = MSGPACK_OBJECT_POSITIVE_INTEGER;
		o.via.u64 = (uint64_t)v;
	} else {
		o.type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
		o.via.i64 = v;
	}
	return o;
}

static inline msgpack_object obj_str(const char *s)
{
	msgpack_object o = {.type = MSGPACK_OBJECT_STR};
	o.via.str.size = (uint32_t)strlen(s);
	o.via.str.ptr = s;
	return o;
}

/* Appends the entry key: val to the header map (msg_join packs it last). */
static inline void msg_add(struct msg *m, const char *key, msgpack_object val)
{
	cr_assert_lt(m->n, sizeof m->kv / sizeof m->kv[0]);
	m->kv[m->n].key = obj_str(key);
	m->kv[m->n].val = val;
	m->n++;
}

/* Values of every msgpack kind, for "wrong type" cases. */
static msgpack_object wrong_values[9] __attribute__((unused));
static const char *const wrong_names[9] __attribute__((unused)) = {
	"nil", "bool", "uint", "negint", "float64", "str", "bin", "array", "map"};
static inline void wrong_init(void)
{
	memset(wrong_values, 0, sizeof wrong_values);
	wrong_values[0].type = MSGPACK_OBJECT_NIL;
	wrong_values[1].type = MSGPACK_OBJECT_BOOLEAN;
	wrong_values[1].via.boolean = true;
	wrong_values[2] = obj_int(1);
	wrong_values[3] = obj_int(-1);
	wrong_values[4].type = MSGPACK_OBJECT_FLOAT64;
	wrong_values[4].via.f64 = 0.5;
	wrong_values[5] = obj_str("x");
	wrong_values[6].type = MSGPACK_OBJECT_BIN;
	wrong_values[6].via.bin.size = 1;
	wrong_values[6].via.bin.ptr = "b";
	wrong_values[7].type = MSGPACK_OBJECT_ARRAY;
	wrong_values[8].type = MSGPACK_OBJECT_MAP;
}

/* The kind of a value, merging what the decoder treats alike. */
static inline int kind(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		return 1;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		return 2;
	default:
		return 10 + (int)o->type;
	}
}

/* The samples that carry a fingerprint, checked against limits. */
static inline bool checks_fp(int k)
{
	switch (k) {
	case WS_HELLO_REQUEST:
	case WS_HELLO_REPLY:
	case WS_HELLO_REPLY_NO_SLICE:
	case WS_ASSIGN:
	case WS_READY:
	case WS_ERROR:
	case WS_STATUS_REPLY:
		return false;
	default:
		return true;
	}
}

#endif

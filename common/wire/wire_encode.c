/* wire_encode.c — writing protocol messages (see wire.h for the layouts).
 *
 * Headers are packed with msgpack-c's packer, whose write callback appends to the caller's
 * struct wire_buf. Each encoder first reserves an upper bound of its header (plus the payload
 * when it copies one), so a buffer reused across messages stops allocating once it has grown
 * to the largest message; the callback still grows it if the bound was ever short.
 *
 * Encoders trust their input's values (the decoder range-checks against the receiver's limits)
 * but not its consistency: a count, a string or a payload length that cannot make a well-formed
 * message is LM_EINVAL, so a sender's bug is caught at the sender.
 */
#include "common/wire/wire.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/buf.h"

/* ---------------------------------------------------------------- the buffer */

static int wire_buf_reserve(struct wire_buf *b, size_t extra)
{
	if (b->cap - b->len >= extra)
		return 0;
	if (extra > SIZE_MAX - b->len)
		return LM_ENOMEM;
	uint8_t *p = lm_grow(b->data, &b->cap, b->len + extra, 1, 256);
	if (p == NULL)
		return LM_ENOMEM;
	b->data = p;
	return 0;
}

/* msgpack-c's write callback: 0 on success, like the packer's own return values. */
static int wire_buf_write(void *data, const char *buf, size_t len)
{
	struct wire_buf *b = data;
	if (b->cap - b->len < len && wire_buf_reserve(b, len) != 0)
		return -1;
	uint8_t *dst = b->data + b->len;
	/* The packer writes one item at a time, 1 to 9 bytes: fixed-size copies compile to a move
	 * or two where a memcpy of a variable length is a library call. */
	switch (len) {
	case 1:
		dst[0] = (uint8_t)buf[0];
		break;
	case 2:
		memcpy(dst, buf, 2);
		break;
	case 3:
		memcpy(dst, buf, 3);
		break;
	case 5:
		memcpy(dst, buf, 5);
		break;
	case 9:
		memcpy(dst, buf, 9);
		break;
	default:
		memcpy(dst, buf, len);
		break;
	}
	b->len += len;
	return 0;
}

/* ---------------------------------------------------------------- the packer */

/* One message being written. Packer failures (only allocation can fail) are or-ed into rc and
 * checked once at the end, where the buffer is rolled back to `start`. */
struct wire_enc {
	msgpack_packer pk;
	struct wire_buf *b;
	size_t start;
	int rc;
};

/* Bytes a header may take beyond its arrays: a map of up to 12 keys of at most 5 bytes, each
 * value at most 9 bytes, plus the string fields, which callers add. */
#define WIRE_HEAD_BOUND 256

static int wire_enc_begin(struct wire_enc *e, struct wire_buf *b, size_t bound)
{
	e->b = b;
	e->start = b->len;
	e->rc = 0;
	msgpack_packer_init(&e->pk, b, wire_buf_write);
	return wire_buf_reserve(b, bound);
}

static int wire_enc_end(struct wire_enc *e)
{
	if (e->rc != 0) {
		e->b->len = e->start;
		return LM_ENOMEM;
	}
	return 0;
}

/* Inlined so that strlen of the literal key folds to a constant. */
static inline __attribute__((always_inline)) void wire_key(struct wire_enc *e, const char *key)
{
	size_t n = strlen(key);
	e->rc |= msgpack_pack_str(&e->pk, n);
	e->rc |= msgpack_pack_str_body(&e->pk, key, n);
}

static void wire_u64(struct wire_enc *e, uint64_t v)
{
	e->rc |= msgpack_pack_uint64(&e->pk, v);
}

static void wire_i64(struct wire_enc *e, int64_t v)
{
	e->rc |= msgpack_pack_int64(&e->pk, v);
}

static void wire_f32(struct wire_enc *e, float v)
{
	e->rc |= msgpack_pack_float(&e->pk, v);
}

static void wire_bool(struct wire_enc *e, bool v)
{
	e->rc |= v ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk);
}

static void wire_str(struct wire_enc *e, const char *s, size_t n)
{
	e->rc |= msgpack_pack_str(&e->pk, n);
	e->rc |= msgpack_pack_str_body(&e->pk, s, n);
}

static void wire_array(struct wire_enc *e, size_t n)
{
	e->rc |= msgpack_pack_array(&e->pk, n);
}

/* The ring stamp (wire.h): "ts" in its fixed 9-byte form, so its value is the header's last 8
 * bytes whatever it is. */
static void wire_ts(struct wire_enc *e, uint64_t ns)
{
	if (ns == 0)
		return;
	wire_key(e, "ts");
	e->rc |= msgpack_pack_fix_uint64(&e->pk, ns);
}

void wire_stamp(void *at, uint64_t ns)
{
	uint8_t *p = at;
	for (int i = 0; i < WIRE_STAMP_LEN; i++)
		p[i] = (uint8_t)(ns >> (8 * (WIRE_STAMP_LEN - 1 - i)));
}

static void wire_raw(struct wire_enc *e, const void *p, size_t n)
{
	if (n != 0)
		e->rc |= wire_buf_write(e->b, p, n);
}

/* The map header and the keys every message has. has_fp: false for HELLO requests, ASSIGN and
 * ERROR, which carry no fingerprint. */
static void wire_head(struct wire_enc *e, size_t n_keys, enum wire_type t, uint64_t id, bool has_fp,
		      uint64_t fp)
{
	e->rc |= msgpack_pack_map(&e->pk, n_keys);
	wire_key(e, "v");
	wire_u64(e, WIRE_VERSION);
	wire_key(e, "t");
	wire_u64(e, (uint64_t)t);
	if (has_fp) {
		wire_key(e, "fp");
		wire_u64(e, fp);
	}
	wire_key(e, "id");
	wire_u64(e, id);
}

/* The length of a string field that must be NUL-terminated within its array; -1 if it is not. */
static ptrdiff_t wire_strfield(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	return n < cap ? (ptrdiff_t)n : -1;
}

static void wire_slice(struct wire_enc *e, int32_t begin, int32_t end, bool embedding, bool head)
{
	wire_array(e, 4);
	wire_i64(e, begin);
	wire_i64(e, end);
	wire_bool(e, embedding);
	wire_bool(e, head);
}

/* ---------------------------------------------------------------- encoders */

/* Bytes of one encoded wire_seq at most: the array header, three u64 (9 each), six i32 (5),
 * a bool and three f32 (5). */
#define WIRE_SEQ_BOUND (1 + 3 * 9 + 6 * 5 + 1 + 3 * 5)
/* One wire_token: the array header, a u64, two i32 and an f32. */
#define WIRE_TOKEN_BOUND (1 + 9 + 5 + 5 + 5)

/* The sequences with logit adjustments and a bound of their "adj" bytes; LM_EINVAL for one
 * that is not self-consistent. */
static int wire_adjust_bound(const struct wire_forward *f, size_t *n, size_t *bound)
{
	for (int32_t i = 0; i < f->n_seqs; i++) {
		const struct lm_logit_adjust *a = f->seqs[i].adjust;
		if (a == NULL)
			continue;
		if (a->n_hist < 0 || a->n_bias < 0 || (a->n_hist > 0 && a->hist == NULL) ||
		    (a->n_bias > 0 && a->bias == NULL))
			return LM_EINVAL;
		(*n)++;
		*bound += 1 + 5 + 3 * 5 + 5 + 5 * (size_t)a->n_hist + 5 + 11 * (size_t)a->n_bias;
	}
	if (*n > 0)
		*bound += 4 + 5;
	return 0;
}

/* "adj": [index, presence, frequency, repeat, [window], [[id, bias]...]] per sequence. */
static void wire_adjust(struct wire_enc *e, const struct wire_forward *f, size_t n)
{
	wire_key(e, "adj");
	wire_array(e, n);
	for (int32_t i = 0; i < f->n_seqs; i++) {
		const struct lm_logit_adjust *a = f->seqs[i].adjust;
		if (a == NULL)
			continue;
		wire_array(e, 6);
		wire_i64(e, i);
		wire_f32(e, a->presence);
		wire_f32(e, a->frequency);
		wire_f32(e, a->repeat);
		wire_array(e, (size_t)a->n_hist);
		for (int32_t j = 0; j < a->n_hist; j++)
			wire_i64(e, a->hist[j]);
		wire_array(e, (size_t)a->n_bias);
		for (int32_t j = 0; j < a->n_bias; j++) {
			wire_array(e, 2);
			wire_i64(e, a->bias[j].id);
			wire_f32(e, a->bias[j].bias);
		}
	}
}

/* The sequences held to a grammar and a bound of their "gr" bytes; LM_EINVAL for one that is
 * not self-consistent. */
static int wire_grammar_bound(const struct wire_forward *f, size_t *n, size_t *bound)
{
	for (int32_t i = 0; i < f->n_seqs; i++) {
		const struct wire_grammar *g = f->seqs[i].grammar;
		if (g == NULL)
			continue;
		if (g->n_ids < 0 || (g->n_ids > 0 && g->ids == NULL) ||
		    (g->len > 0 && g->text == NULL) || g->len > WIRE_MAX_GRAMMAR)
			return LM_EINVAL;
		(*n)++;
		*bound += 1 + 5 + 5 + g->len + 5 + 5 * (size_t)g->n_ids;
	}
	if (*n > 0)
		*bound += 3 + 5;
	return 0;
}

/* "gr": [index, text, [ids...]] per constrained sequence. */
static void wire_grammar(struct wire_enc *e, const struct wire_forward *f, size_t n)
{
	wire_key(e, "gr");
	wire_array(e, n);
	for (int32_t i = 0; i < f->n_seqs; i++) {
		const struct wire_grammar *g = f->seqs[i].grammar;
		if (g == NULL)
			continue;
		wire_array(e, 3);
		wire_i64(e, i);
		wire_str(e, g->len > 0 ? g->text : "", g->len);
		wire_array(e, (size_t)g->n_ids);
		for (int32_t j = 0; j < g->n_ids; j++)
			wire_i64(e, g->ids[j]);
	}
}

int wire_encode_forward(struct wire_buf *b, const struct wire_forward *f)
{
	if (f->n_seqs < 0 || (f->n_seqs > 0 && f->seqs == NULL) || f->n_tokens < 0 || f->dim < 0 ||
	    f->n_drafts < 0 || (f->n_drafts > 0 && f->drafts == NULL))
		return LM_EINVAL;
	int64_t drafted = 0;
	for (int32_t i = 0; i < f->n_seqs; i++) {
		if (f->seqs[i].n_draft < 0)
			return LM_EINVAL;
		drafted += f->seqs[i].n_draft;
	}
	if (drafted != f->n_drafts)
		return LM_EINVAL;
	uint64_t pl;
	if (__builtin_mul_overflow((uint64_t)f->n_tokens, (uint64_t)f->dim, &pl) ||
	    __builtin_mul_overflow(pl, (uint64_t)wire_dtype_size(f->dtype), &pl) ||
	    pl != f->payload_len)
		return LM_EINVAL;
	size_t copy = f->payload != NULL ? f->payload_len : 0;
	size_t n_adj = 0, adj_bound = 0, n_gr = 0;
	if (wire_adjust_bound(f, &n_adj, &adj_bound) != 0 ||
	    wire_grammar_bound(f, &n_gr, &adj_bound) != 0)
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b,
			   WIRE_HEAD_BOUND + (size_t)f->n_seqs * WIRE_SEQ_BOUND + adj_bound +
				   (size_t)f->n_drafts * 5 + 8 + copy))
		return LM_ENOMEM;
	wire_head(&e, 9 + (n_adj > 0) + (n_gr > 0) + (f->n_drafts > 0) + (f->sent_ns != 0),
		  WIRE_FORWARD, f->batch_id, true, f->fingerprint);
	wire_key(&e, "seqs");
	wire_array(&e, (size_t)f->n_seqs);
	for (int32_t i = 0; i < f->n_seqs; i++) {
		const struct wire_seq *s = &f->seqs[i];
		wire_array(&e, 13);
		wire_u64(&e, s->seq_id);
		wire_i64(&e, s->slot);
		wire_i64(&e, s->pos);
		wire_i64(&e, s->n_tokens);
		wire_bool(&e, s->sample);
		wire_u64(&e, s->step);
		wire_i64(&e, s->n_logprobs);
		wire_f32(&e, s->sampling.temperature);
		wire_i64(&e, s->sampling.top_k);
		wire_f32(&e, s->sampling.top_p);
		wire_f32(&e, s->sampling.min_p);
		wire_u64(&e, s->sampling.seed);
		wire_i64(&e, s->n_draft);
	}
	if (f->n_drafts > 0) {
		wire_key(&e, "dr");
		wire_array(&e, (size_t)f->n_drafts);
		for (int32_t i = 0; i < f->n_drafts; i++)
			wire_i64(&e, f->drafts[i]);
	}
	wire_key(&e, "n");
	wire_i64(&e, f->n_tokens);
	wire_key(&e, "dt");
	wire_u64(&e, (uint64_t)f->dtype);
	wire_key(&e, "dim");
	wire_i64(&e, f->dim);
	if (n_adj > 0)
		wire_adjust(&e, f, n_adj);
	if (n_gr > 0)
		wire_grammar(&e, f, n_gr);
	wire_key(&e, "pl");
	wire_u64(&e, f->payload_len);
	wire_ts(&e, f->sent_ns); /* last: see wire.h */
	wire_raw(&e, f->payload, copy);
	return wire_enc_end(&e);
}

int wire_encode_tokens(struct wire_buf *b, const struct wire_tokens *t)
{
	if (t->n < 0 || (t->n > 0 && t->toks == NULL))
		return LM_EINVAL;
	uint64_t n_top = 0;
	for (int32_t i = 0; i < t->n; i++) {
		if (t->toks[i].n_top < 0)
			return LM_EINVAL;
		n_top += (uint64_t)t->toks[i].n_top;
	}
	uint64_t pl;
	if (__builtin_mul_overflow(n_top, 8, &pl) || pl != t->payload_len)
		return LM_EINVAL;
	size_t copy = t->payload != NULL ? t->payload_len : 0;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + (size_t)t->n * WIRE_TOKEN_BOUND + copy))
		return LM_ENOMEM;
	wire_head(&e, 6 + (t->sent_ns != 0), WIRE_TOKENS, t->batch_id, true, t->fingerprint);
	wire_key(&e, "toks");
	wire_array(&e, (size_t)t->n);
	for (int32_t i = 0; i < t->n; i++) {
		const struct wire_token *k = &t->toks[i];
		wire_array(&e, 4);
		wire_u64(&e, k->seq_id);
		wire_i64(&e, k->token);
		wire_f32(&e, k->logprob);
		wire_i64(&e, k->n_top);
	}
	wire_key(&e, "pl");
	wire_u64(&e, t->payload_len);
	wire_ts(&e, t->sent_ns); /* last: see wire.h */
	wire_raw(&e, t->payload, copy);
	return wire_enc_end(&e);
}

int wire_encode_release(struct wire_buf *b, const struct wire_release *r)
{
	if (r->n < 0 || (r->n > 0 && r->slots == NULL))
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + (size_t)r->n * 5))
		return LM_ENOMEM;
	wire_head(&e, 5, WIRE_RELEASE, r->id, true, r->fingerprint);
	wire_key(&e, "slots");
	wire_array(&e, (size_t)r->n);
	for (int32_t i = 0; i < r->n; i++)
		wire_i64(&e, r->slots[i]);
	return wire_enc_end(&e);
}

int wire_encode_copy(struct wire_buf *b, const struct wire_copy *c)
{
	if (c->n < 1 || c->dst == NULL)
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + 20 + (size_t)c->n * 5))
		return LM_ENOMEM;
	wire_head(&e, 7, WIRE_COPY, c->id, true, c->fingerprint);
	wire_key(&e, "slot");
	wire_i64(&e, c->src);
	wire_key(&e, "len");
	wire_i64(&e, c->len);
	wire_key(&e, "slots");
	wire_array(&e, (size_t)c->n);
	for (int32_t i = 0; i < c->n; i++)
		wire_i64(&e, c->dst[i]);
	return wire_enc_end(&e);
}

int wire_encode_hello(struct wire_buf *b, const struct wire_hello *h, bool reply)
{
	struct wire_enc e;
	if (!reply) {
		if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND))
			return LM_ENOMEM;
		wire_head(&e, 3, WIRE_HELLO, h->id, false, 0);
		return wire_enc_end(&e);
	}
	ptrdiff_t name = wire_strfield(h->name, sizeof h->name);
	ptrdiff_t build = wire_strfield(h->build, sizeof h->build);
	if (name < 0 || build < 0)
		return LM_EINVAL;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + sizeof h->name + sizeof h->build))
		return LM_ENOMEM;
	/* The reply's keys come in wire_head's order, then these. */
	wire_head(&e, h->has_slice ? 8 : 7, WIRE_HELLO, h->id, true, h->fingerprint);
	wire_key(&e, "name");
	wire_str(&e, h->name, (size_t)name);
	wire_key(&e, "build");
	wire_str(&e, h->build, (size_t)build);
	wire_key(&e, "pid");
	wire_i64(&e, h->pid);
	if (h->has_slice) {
		wire_key(&e, "slice");
		wire_slice(&e, h->begin, h->end, h->embedding, h->head);
	}
	return wire_enc_end(&e);
}

int wire_encode_assign(struct wire_buf *b, const struct wire_assign *a)
{
	ptrdiff_t model = wire_strfield(a->model, sizeof a->model);
	ptrdiff_t next = wire_strfield(a->next, sizeof a->next);
	if (model < 0 || next < 0)
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + sizeof a->model + sizeof a->next))
		return LM_ENOMEM;
	wire_head(&e, 15, WIRE_ASSIGN, a->id, false, 0);
	wire_key(&e, "model");
	wire_str(&e, a->model, (size_t)model);
	wire_key(&e, "slice");
	wire_slice(&e, a->begin, a->end, a->embedding, a->head);
	wire_key(&e, "seq");
	wire_i64(&e, a->max_seq);
	wire_key(&e, "slots");
	wire_i64(&e, a->slots);
	wire_key(&e, "kvk");
	wire_u64(&e, a->k_type);
	wire_key(&e, "kvv");
	wire_u64(&e, a->v_type);
	wire_key(&e, "kks");
	wire_u64(&e, a->k_type_swa);
	wire_key(&e, "kvs");
	wire_u64(&e, a->v_type_swa);
	wire_key(&e, "wdt");
	wire_u64(&e, (uint64_t)a->wire_dtype);
	wire_key(&e, "batch");
	wire_i64(&e, a->max_batch);
	wire_key(&e, "drf");
	wire_i64(&e, a->max_draft);
	wire_key(&e, "next");
	wire_str(&e, a->next, (size_t)next);
	return wire_enc_end(&e);
}

int wire_encode_ready(struct wire_buf *b, const struct wire_ready *r)
{
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND))
		return LM_ENOMEM;
	wire_head(&e, 8, WIRE_READY, r->id, true, r->fingerprint);
	wire_key(&e, "kvb");
	wire_u64(&e, r->kv_bytes);
	wire_key(&e, "wb");
	wire_u64(&e, r->weight_bytes);
	wire_key(&e, "rss");
	wire_u64(&e, r->rss_bytes);
	wire_key(&e, "dig");
	wire_u64(&e, r->digest);
	return wire_enc_end(&e);
}

int wire_encode_error(struct wire_buf *b, const struct wire_error *er)
{
	ptrdiff_t msg = wire_strfield(er->msg, sizeof er->msg);
	if (msg < 0)
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + sizeof er->msg))
		return LM_ENOMEM;
	wire_head(&e, 6, WIRE_ERROR, er->id, false, 0);
	wire_key(&e, "code");
	wire_i64(&e, er->code);
	wire_key(&e, "msg");
	wire_str(&e, er->msg, (size_t)msg);
	wire_key(&e, "about");
	wire_u64(&e, er->about);
	return wire_enc_end(&e);
}

int wire_encode_kv(struct wire_buf *b, enum wire_type t, const struct wire_kv *k)
{
	if (t != WIRE_KV_EXPORT && t != WIRE_KV_IMPORT && t != WIRE_TRACE)
		return LM_EINVAL;
	bool request = (t == WIRE_KV_EXPORT || t == WIRE_TRACE) && k->len == 0 &&
		       k->payload == NULL && k->payload_len == 0;
	if (k->hi != 0 && k->hi < k->len)
		return LM_EINVAL;
	bool hi = !request && k->hi > k->len;
	size_t copy = k->payload != NULL ? k->payload_len : 0;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + 8 + copy))
		return LM_ENOMEM;
	wire_head(&e, request ? 5 : hi ? 9 : 8, t, k->id, true, k->fingerprint);
	wire_key(&e, "slot");
	wire_i64(&e, k->slot);
	if (!request) {
		wire_key(&e, "len");
		wire_i64(&e, k->len);
		if (hi) {
			wire_key(&e, "hi");
			wire_i64(&e, k->hi);
		}
		wire_key(&e, "dt");
		wire_u64(&e, WIRE_DT_RAW);
		wire_key(&e, "pl");
		wire_u64(&e, k->payload_len);
		wire_raw(&e, k->payload, copy);
	}
	return wire_enc_end(&e);
}

int wire_encode_repoint(struct wire_buf *b, const struct wire_repoint *r)
{
	ptrdiff_t next = wire_strfield(r->next, sizeof r->next);
	if (next < 0)
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + sizeof r->next))
		return LM_ENOMEM;
	wire_head(&e, 5, WIRE_REPOINT, r->id, true, r->fingerprint);
	wire_key(&e, "next");
	wire_str(&e, r->next, (size_t)next);
	return wire_enc_end(&e);
}

/* The types that have a header-only form (see wire_decode_simple). */
static bool wire_simple_type(enum wire_type t)
{
	switch (t) {
	case WIRE_DRAIN:
	case WIRE_STATUS:
	case WIRE_PAUSE:
	case WIRE_RESUME:
	case WIRE_KV_IMPORT:
	case WIRE_REPOINT:
		return true;
	default:
		return false;
	}
}

int wire_encode_simple(struct wire_buf *b, enum wire_type t, uint64_t id, uint64_t fingerprint)
{
	if (!wire_simple_type(t))
		return LM_EINVAL;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND))
		return LM_ENOMEM;
	wire_head(&e, 4, t, id, true, fingerprint);
	return wire_enc_end(&e);
}

int wire_encode_raw(struct wire_buf *b, enum wire_type t, uint64_t id, uint64_t fingerprint,
		    const void *payload, size_t payload_len)
{
	if (t < 1 || t > WIRE_TYPE_MAX)
		return LM_EINVAL;
	size_t copy = payload != NULL ? payload_len : 0;
	struct wire_enc e;
	if (wire_enc_begin(&e, b, WIRE_HEAD_BOUND + copy))
		return LM_ENOMEM;
	wire_head(&e, 6, t, id, true, fingerprint);
	wire_key(&e, "dt");
	wire_u64(&e, WIRE_DT_RAW);
	wire_key(&e, "pl");
	wire_u64(&e, payload_len);
	wire_raw(&e, payload, copy);
	return wire_enc_end(&e);
}

/* ctl.c — the coordinator's control connections to workers. See ctl.h. */
#include "coordinator/supervise/ctl.h"

#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/wire/transport.h"
#include "lm_config.h"

/* Control messages other than KV rows and traces are small; these bound the waits. */
#define CTL_SHORT_MS 5000
#define CTL_DATA_MS  30000
/* How long a reopen waits for the old socket's close (see ctl_reopen). */
#define CTL_REOPEN_CLOSE_MS 100
/* ctl_hello_wait's first try, and its longest. */
#define CTL_HELLO_TRY_MS     250
#define CTL_HELLO_TRY_MAX_MS 4000

int ctl_open(struct ctl_conn *c, const char *name, const char *addr, lm_diag *d)
{
	int rv;
	ctl_close(c);
	if (name != c->name)
		snprintf(c->name, sizeof c->name, "%s", name);
	if (addr != c->addr)
		snprintf(c->addr, sizeof c->addr, "%s", addr);
	if ((rv = nng_req0_open(&c->s)) != 0)
		return lm_fail(d, LM_EIO, "control socket: %s", nng_strerror(rv));
	c->open = true;
	/* No automatic resend: every request has its own deadline here. */
	nng_socket_set_ms(c->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_ms(c->s, NNG_OPT_RECONNMINT, 10);
	nng_socket_set_ms(c->s, NNG_OPT_RECONNMAXT, 200);
	nng_socket_set_size(c->s, NNG_OPT_RECVMAXSZ, 0);
	int rc = lm_dial(c->s, c->addr, c->tls, NULL, d);
	if (rc != 0)
		lm_diag_prefix(d, "worker %s", c->name);
	return rc;
}

/* After a failed exchange the REQ socket may still have its request outstanding: start afresh.
 * When the worker died in the middle of the exchange, NNG 1.5.2 can take long (or for good) to
 * close the old socket; that close goes on in the background after CTL_REOPEN_CLOSE_MS, so a
 * keeper never sits on a dead worker's socket instead of restarting it. */
static void ctl_reopen(struct ctl_conn *c, lm_diag *d)
{
	if (c->open && lm_close_bounded(c->s, CTL_REOPEN_CLOSE_MS) != 0)
		lm_debug("worker %s: the old control socket closes in the background", c->name);
	c->open = false;
	ctl_open(c, c->name, c->addr, d);
}

void ctl_close(struct ctl_conn *c)
{
	if (c != NULL && c->open) {
		if (lm_close_bounded(c->s, LM_CLOSE_MS) != 0)
			lm_warn("worker %s: closing the control connection did not finish in "
				"time; it goes on in the background",
				c->name);
		c->open = false;
	}
}

int ctl_call(struct ctl_conn *c, const struct wire_buf *req, uint32_t want, nng_msg **reply,
	     int timeout_ms, lm_diag *d)
{
	nng_msg *msg = NULL;
	int rv, rc = 0;

	*reply = NULL;
	if (!c->open && (rc = ctl_open(c, c->name, c->addr, d)) != 0)
		return rc;
	nng_socket_set_ms(c->s, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_ms(c->s, NNG_OPT_SENDTIMEO, timeout_ms);
	if (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, req->data, req->len) != 0) {
		if (msg != NULL)
			nng_msg_free(msg);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	if ((rv = nng_sendmsg(c->s, msg, 0)) != 0) {
		nng_msg_free(msg);
		rc = lm_fail(d, rv == NNG_ETIMEDOUT ? LM_ETIMEOUT : LM_EIO,
			     "worker %s: cannot send to %s: %s", c->name, c->addr,
			     nng_strerror(rv));
	} else if ((rv = nng_recvmsg(c->s, reply, 0)) != 0) {
		rc = lm_fail(d, rv == NNG_ETIMEDOUT ? LM_ETIMEOUT : LM_EIO,
			     "worker %s: no reply on %s: %s", c->name, c->addr, nng_strerror(rv));
	}
	if (rc != 0) {
		/* The request may still be outstanding: start afresh for the next one. */
		lm_diag keep = {{0}};
		ctl_reopen(c, &keep);
		return rc;
	}
	struct wire_head h;
	rc = wire_peek(nng_msg_body(*reply), nng_msg_len(*reply), &h, d);
	if (rc != 0) {
		lm_diag_prefix(d, "worker %s", c->name);
	} else if (h.type == WIRE_ERROR) {
		struct wire_error e;
		if (wire_decode_error(nng_msg_body(*reply), nng_msg_len(*reply), &e, d) != 0)
			rc = lm_fail(d, LM_EPROTO, "worker %s: malformed ERROR", c->name);
		else
			rc = lm_fail(d, e.code < 0 ? e.code : LM_EPROTO, "worker %s: %s", c->name,
				     e.msg);
	} else if (h.type != want) {
		rc = lm_fail(d, LM_EPROTO, "worker %s answered %s to %s", c->name,
			     wire_type_name(h.type), wire_type_name(want));
	}
	if (rc != 0) {
		nng_msg_free(*reply);
		*reply = NULL;
	}
	return rc;
}

/* A request id no peer can guess ahead: from the kernel's random source, or, should that
 * fail, the clock and a counter. */
static uint64_t ctl_nonce(void)
{
	static _Atomic uint64_t counter;
	uint64_t n = 0;
	if (getrandom(&n, sizeof n, GRND_NONBLOCK) == (ssize_t)sizeof n && n != 0)
		return n;
	uint64_t k = (uint64_t)lm_now_ns() ^ atomic_fetch_add(&counter, 1);
	return wire_siphash24(k, (uint64_t)getpid(), &k, sizeof k);
}

int ctl_hello(struct ctl_conn *c, uint64_t fingerprint, struct wire_hello *hello, int timeout_ms,
	      lm_diag *d)
{
	struct wire_buf b = {0};
	/* A fresh id each time: the reply's proof of the model holds for this question only. */
	struct wire_hello me = {.version = WIRE_VERSION, .id = ctl_nonce()};
	nng_msg *r = NULL;
	snprintf(me.name, sizeof me.name, "coordinator");
	snprintf(me.build, sizeof me.build, "%s", LM_VERSION);
	int rc = wire_encode_hello(&b, &me, false);
	if (rc == 0)
		rc = ctl_call(c, &b, WIRE_HELLO, &r, timeout_ms, d);
	wire_buf_fini(&b);
	if (rc == 0)
		rc = wire_decode_hello(nng_msg_body(r), nng_msg_len(r), hello, d);
	if (r != NULL)
		nng_msg_free(r);
	if (rc != 0)
		return rc;
	if (hello->version != WIRE_VERSION)
		return lm_fail(d, LM_EVERSION,
			       "worker %s speaks protocol version %u; this coordinator speaks %u",
			       c->name, hello->version, WIRE_VERSION);
	/* The reply proves the fingerprint it holds (wire.h, HELLO) instead of telling it, so
	 * the mismatch names the mesh's side alone; the worker's own is on its /status. */
	if (fingerprint != 0 && hello->has_slice && hello->fingerprint != 0 &&
	    hello->fingerprint != wire_hello_proof(fingerprint, me.id))
		return lm_fail(d, LM_EFINGERPRINT,
			       "worker %s holds a model of another fingerprint than the mesh's "
			       "%016llx (its HELLO does not prove this one)",
			       c->name, (unsigned long long)fingerprint);
	return 0;
}

int ctl_hello_wait(struct ctl_conn *c, uint64_t fingerprint, struct wire_hello *hello,
		   int timeout_ms, bool (*alive)(void *arg), void *arg, lm_diag *d)
{
	int64_t deadline = lm_now_ms() + timeout_ms;
	/* Each try waits twice as long as the last, up to CTL_HELLO_TRY_MAX_MS: a worker that
	 * starts quickly is found within a quarter second, and on a machine so loaded that one
	 * exchange takes longer than that (tens of processes on two CPUs) the tries still get
	 * through, where fixed short tries would each give up before their answer came. */
	int try_ms = CTL_HELLO_TRY_MS, tries = 0;
	for (;;) {
		if (alive != NULL && !alive(arg))
			return lm_fail(d, LM_EUNAVAILABLE, "worker %s exited during start-up",
				       c->name);
		int64_t left = deadline - lm_now_ms();
		int wait = left < try_ms ? (left > CTL_HELLO_TRY_MS ? (int)left : CTL_HELLO_TRY_MS)
					 : try_ms;
		int rc = ctl_hello(c, fingerprint, hello, wait, d);
		tries++;
		/* An answer that is wrong will not get better: only silence is retried. */
		if (rc != LM_ETIMEOUT && rc != LM_EIO)
			return rc;
		if (lm_now_ms() >= deadline) {
			char last[sizeof d->msg];
			memcpy(last, d->msg, sizeof last);
			last[sizeof last - 1] = '\0';
			return lm_fail(d, LM_ETIMEOUT,
				       "worker %s did not answer at %s within %d s (%d tries, the "
				       "last: %s)%s",
				       c->name, c->addr, timeout_ms / 1000, tries, last,
				       lm_url_is_tls(c->addr)
					       ? " (not listening, or one side refused the other's "
						 "certificate)"
					       : "");
		}
		if (try_ms < CTL_HELLO_TRY_MAX_MS)
			try_ms *= 2;
	}
}

int ctl_connect(struct ctl_conn *c, const char *name, const char *addr, uint64_t fingerprint,
		int timeout_ms, lm_diag *d)
{
	struct wire_hello hello;
	int rc = ctl_open(c, name, addr, d);
	if (rc == 0)
		rc = ctl_hello_wait(c, fingerprint, &hello, timeout_ms, NULL, NULL, d);
	return rc;
}

/* The reply to a request that may take long (loading a slice), watching the worker's process
 * meanwhile. One receive with no timeout of its own, polled: a REQ socket whose receive timed
 * out has given the request up, and a second receive would only answer NNG_ESTATE. */
static void ctl_reply_cb(void *arg)
{
	atomic_store((atomic_bool *)arg, true);
}

static int ctl_wait_reply(struct ctl_conn *c, nng_msg **reply, int timeout_ms,
			  bool (*alive)(void *arg), void *arg, lm_diag *d)
{
	atomic_bool done = false;
	nng_aio *aio = NULL;
	if (nng_aio_alloc(&aio, ctl_reply_cb, &done) != 0)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	nng_aio_set_timeout(aio, NNG_DURATION_INFINITE);
	nng_recv_aio(c->s, aio);
	int64_t deadline = lm_now_ms() + timeout_ms;
	int rc = 0;
	const struct timespec poll = {.tv_nsec = 20 * 1000 * 1000};
	while (!atomic_load(&done)) {
		if (alive != NULL && !alive(arg)) {
			rc = lm_fail(d, LM_EUNAVAILABLE, "worker %s exited while loading", c->name);
			break;
		}
		if (lm_now_ms() >= deadline) {
			rc = lm_fail(d, LM_ETIMEOUT, "worker %s was not ready within %d s", c->name,
				     timeout_ms / 1000);
			break;
		}
		nanosleep(&poll, NULL);
	}
	if (rc != 0)
		nng_aio_cancel(aio);
	nng_aio_wait(aio);
	int rv = nng_aio_result(aio);
	if (rc == 0 && rv != 0)
		rc = lm_fail(d, LM_EIO, "worker %s: %s", c->name, nng_strerror(rv));
	if (rv == 0) {
		if (rc == 0)
			*reply = nng_aio_get_msg(aio);
		else
			nng_msg_free(nng_aio_get_msg(aio));
	}
	nng_aio_free(aio);
	return rc;
}

int ctl_assign(struct ctl_conn *c, const struct wire_assign *a, uint64_t fingerprint,
	       struct wire_ready *ready, int timeout_ms, bool (*alive)(void *arg), void *arg,
	       lm_diag *d)
{
	struct wire_buf b = {0};
	nng_msg *msg = NULL, *r = NULL;
	int rc = wire_encode_assign(&b, a);
	if (rc != 0)
		return lm_fail(d, rc, "worker %s: cannot encode ASSIGN", c->name);
	nng_socket_set_ms(c->s, NNG_OPT_SENDTIMEO, CTL_SHORT_MS);
	if (nng_msg_alloc(&msg, 0) != 0 || nng_msg_append(msg, b.data, b.len) != 0 ||
	    nng_sendmsg(c->s, msg, 0) != 0) {
		if (msg != NULL)
			nng_msg_free(msg);
		wire_buf_fini(&b);
		ctl_reopen(c, NULL);
		return lm_fail(d, LM_EIO, "worker %s: cannot send ASSIGN", c->name);
	}
	wire_buf_fini(&b);
	if ((rc = ctl_wait_reply(c, &r, timeout_ms, alive, arg, d)) != 0) {
		ctl_reopen(c, NULL);
		return rc;
	}
	struct wire_head h;
	rc = wire_peek(nng_msg_body(r), nng_msg_len(r), &h, d);
	if (rc == 0 && h.type == WIRE_ERROR) {
		struct wire_error e;
		rc = wire_decode_error(nng_msg_body(r), nng_msg_len(r), &e, d);
		if (rc == 0)
			rc = lm_fail(d, e.code < 0 ? e.code : LM_EPROTO, "worker %s: %s", c->name,
				     e.msg);
	} else if (rc == 0) {
		rc = wire_decode_ready(nng_msg_body(r), nng_msg_len(r), ready, d);
	}
	nng_msg_free(r);
	if (rc != 0)
		return rc;
	if (ready->fingerprint != fingerprint)
		return lm_fail(
			d, LM_EFINGERPRINT,
			"worker %s loaded a model with fingerprint %016llx; the mesh's model "
			"has %016llx",
			c->name, (unsigned long long)ready->fingerprint,
			(unsigned long long)fingerprint);
	return 0;
}

/* A TRACE or KV_EXPORT exchange that brings rows back. */
/* A KV_EXPORT or TRACE exchange: the reply's row count, high-water mark (hi may be NULL) and a
 * copy of its payload. */
static int ctl_rows(struct ctl_conn *c, enum wire_type t, uint64_t fingerprint,
		    const struct wire_limits *lim, int32_t slot, int32_t *len, int32_t *hi,
		    void **data, size_t *bytes, lm_diag *d)
{
	struct wire_buf b = {0};
	struct wire_kv k = {.id = 1, .fingerprint = fingerprint, .slot = slot};
	nng_msg *r = NULL;
	int rc = wire_encode_kv(&b, t, &k);
	if (rc == 0)
		rc = ctl_call(c, &b, t, &r, CTL_DATA_MS, d);
	wire_buf_fini(&b);
	if (rc == 0)
		rc = wire_decode_kv(nng_msg_body(r), nng_msg_len(r), lim, &k, d);
	if (rc == 0 && data != NULL) {
		*data = malloc(k.payload_len + 1);
		if (*data == NULL) {
			rc = lm_fail(d, LM_ENOMEM, "out of memory for %zu bytes", k.payload_len);
		} else {
			if (k.payload_len > 0)
				memcpy(*data, k.payload, k.payload_len);
			*bytes = k.payload_len;
			*len = k.len;
			if (hi != NULL)
				*hi = k.hi;
		}
	}
	if (r != NULL)
		nng_msg_free(r);
	return rc;
}

int ctl_trace(struct ctl_conn *c, uint64_t fingerprint, const struct wire_limits *lim, int32_t slot,
	      int32_t *rows, void **data, size_t *bytes, lm_diag *d)
{
	return ctl_rows(c, WIRE_TRACE, fingerprint, lim, slot, rows, NULL, data, bytes, d);
}

int ctl_kv_export(struct ctl_conn *c, uint64_t fingerprint, const struct wire_limits *lim,
		  int32_t slot, struct ctl_kv_rows *rows, lm_diag *d)
{
	*rows = (struct ctl_kv_rows){0};
	return ctl_rows(c, WIRE_KV_EXPORT, fingerprint, lim, slot, &rows->len, &rows->hi,
			&rows->data, &rows->bytes, d);
}

int ctl_kv_import(struct ctl_conn *c, uint64_t fingerprint, int32_t slot,
		  const struct ctl_kv_rows *rows, lm_diag *d)
{
	struct wire_buf b = {0};
	struct wire_kv k = {.id = 1,
			    .fingerprint = fingerprint,
			    .slot = slot,
			    .len = rows->len,
			    .hi = rows->hi,
			    .payload = rows->data,
			    .payload_len = rows->bytes};
	nng_msg *r = NULL;
	int rc = wire_encode_kv(&b, WIRE_KV_IMPORT, &k);
	if (rc == 0)
		rc = ctl_call(c, &b, WIRE_KV_IMPORT, &r, CTL_DATA_MS, d);
	wire_buf_fini(&b);
	if (r != NULL)
		nng_msg_free(r);
	return rc;
}

int ctl_repoint(struct ctl_conn *c, uint64_t fingerprint, const char *next, lm_diag *d)
{
	struct wire_buf b = {0};
	struct wire_repoint rp = {.id = 1, .fingerprint = fingerprint};
	nng_msg *r = NULL;
	snprintf(rp.next, sizeof rp.next, "%s", next);
	int rc = wire_encode_repoint(&b, &rp);
	if (rc == 0)
		rc = ctl_call(c, &b, WIRE_REPOINT, &r, CTL_SHORT_MS, d);
	wire_buf_fini(&b);
	if (r != NULL)
		nng_msg_free(r);
	return rc;
}

cJSON *ctl_status(struct ctl_conn *c, uint64_t fingerprint, int timeout_ms, lm_diag *d)
{
	struct wire_buf b = {0};
	nng_msg *r = NULL;
	cJSON *doc = NULL;
	int rc = wire_encode_simple(&b, WIRE_STATUS, 1, fingerprint);
	if (rc == 0)
		rc = ctl_call(c, &b, WIRE_STATUS, &r, timeout_ms, d);
	wire_buf_fini(&b);
	const void *json = NULL;
	size_t len = 0;
	if (rc == 0 && (rc = wire_decode_raw(nng_msg_body(r), nng_msg_len(r), &json, &len, d)) == 0)
		doc = cJSON_ParseWithLength(json, len);
	if (rc == 0 && !cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		doc = NULL;
		lm_fail(d, LM_EPROTO, "worker %s: its STATUS is not a JSON object", c->name);
	}
	if (r != NULL)
		nng_msg_free(r);
	return doc;
}

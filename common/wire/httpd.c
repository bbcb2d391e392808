/* httpd.c — the HTTP/1.1 server over NNG byte streams. See httpd.h.
 *
 * A connection is a small state machine driven by three aios, each with at most one operation
 * outstanding: rx (reads), tx (writes) and cb (the handler's, finished by a reply). Their
 * callbacks run on NNG's threads, possibly at once, so everything of a connection is under its
 * mutex, but for the bytes an outstanding read is writing into (buf[len, cap)).
 *
 *   IDLE     waiting for a request's first byte (idle_timeout_ms)
 *   HEAD     reading the head; BODY  reading the body (both by the request's deadline,
 *            read_timeout_ms from its first byte)
 *   HANDLER  the handler has the request; a read stays posted to see the client leave
 *   WRITE    the response is being written; STREAM  a stream's response is
 *
 * A connection is freed once it is closing and no operation, handler or stream holds it. The
 * request head is parsed from a copy (hbuf) so that the receive buffer may grow and move while
 * a chunked body arrives; the body the handler sees stays in place until its reply is written.
 * Locks: the server's mutex may be held while a connection's is taken, never the reverse.
 */
#include "common/wire/httpd.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base/buf.h"
#include "common/base/clock.h"
#include "common/wire/http_parse.h"

#define HTTPD_READ_ROOM 4096

static const char *const httpd_refusal_names[] = {
#define LM_HTTP_REFUSAL_NAME_(name, text) text,
	LM_HTTP_REFUSALS(LM_HTTP_REFUSAL_NAME_)
#undef LM_HTTP_REFUSAL_NAME_
};

static const uint16_t httpd_codes[LM_HTTPD_N_CODES - 1] = LM_HTTPD_CODES;

const char *lm_http_refusal_name(enum lm_http_refusal r)
{
	return r >= 0 && r < LM_HTTP_REFUSE_COUNT ? httpd_refusal_names[r] : "unknown";
}

uint16_t lm_httpd_code_at(int i)
{
	return i >= 0 && i < LM_HTTPD_N_CODES - 1 ? httpd_codes[i] : 0;
}

struct httpd_route {
	char *method; /* NULL: any */
	char *path;
	size_t path_len;
	bool prefix;
	void (*cb)(nng_aio *);
	void *data;
	size_t max_body;
	bool json;
};

struct httpd {
	struct lm_httpd_limits lim;
	char **cors;
	char url[300];
	nng_stream_listener *listener;
	nng_aio *acc, *sweep;
	bool listening, acc_sleeping;
	int port;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping;
	struct httpd_conn *conns; /* every connection not yet freed */
	int32_t n_conns;
	struct httpd_route *routes;
	int32_t n_routes;
	struct lm_httpd_stats stats;
};

enum conn_state { C_IDLE, C_HEAD, C_BODY, C_HANDLER, C_WRITE, C_STREAM };

struct httpd_conn {
	struct httpd *srv;
	struct httpd_conn *prev, *next;
	nng_stream *st;
	nng_aio *rx, *tx, *cb;
	pthread_mutex_t mu;
	enum conn_state state;
	bool rx_busy, tx_busy, cb_busy, app_holds; /* what holds the connection */
	bool closing, freeing, peer_gone;
	/* The receive buffer: the current request starts at `start`. */
	char *buf;
	size_t len, cap, start;
	char *hbuf; /* the head, parsed from a copy */
	size_t hcap;
	struct lm_http_head head;
	int64_t deadline_ms;
	size_t body_start, body_len, req_end;
	bool body_read; /* the request's body is consumed (else the connection closes) */
	struct lm_http_chunked ch;
	uint64_t idle_since_ns; /* when it last became idle */
	/* No request has begun on it yet: its first bytes may be on their way, so it is not idle
	 * (httpd_evict_idle) until fresh_grace_ms have gone by. */
	bool fresh;
	/* Accepted past max_conns with nothing idle to close: its request is read whole, then
	 * answered 503 (reading it first keeps the close from resetting the connection, which
	 * would lose the 503 with the unread request); silent past fresh_grace_ms, it is
	 * answered 503 by the sweep. */
	bool over_cap;
	const struct httpd_route *route;
	char *sub; /* lm_httpd_subpath */
	size_t sub_cap;
	bool sub_bad;
	bool cors_ok, is_head;
	/* The response. */
	bool replied, close_after, streaming, chunked, stream_ended;
	struct lm_buf extra;   /* extra header lines */
	struct lm_buf out, wr; /* queued bytes; the bytes being written */
	size_t wr_off;
	void (*gone)(void *);
	void *gone_arg;
};

static struct httpd_conn *httpd_conn_of(nng_aio *aio)
{
	return nng_aio_get_input(aio, 0);
}

static void httpd_count_status(struct httpd *s, uint16_t status)
{
	int i = 0;
	while (i < LM_HTTPD_N_CODES - 1 && httpd_codes[i] != status)
		i++;
	atomic_fetch_add_explicit(&s->stats.responses[i], 1, memory_order_relaxed);
}

static const char *httpd_error_type(uint16_t status)
{
	return status == 401   ? "authentication_error"
	       : status == 403 ? "permission_error"
	       : status == 429 ? "rate_limit_error"
	       : status >= 500 ? "server_error"
			       : "invalid_request_error";
}

/* ------------------------------------------------------------------ connections: lifetime */

/* Under c->mu: true once, when nothing holds a closing connection any more; the caller then
 * frees it after unlocking. */
static bool conn_dead(struct httpd_conn *c)
{
	if (!c->closing || c->freeing || c->rx_busy || c->tx_busy || c->cb_busy || c->app_holds)
		return false;
	c->freeing = true;
	return true;
}

/* Frees what the connection owns; it is off the server's list already. Safe inside one of its
 * own aio callbacks: the aios are reaped in the background. */
static void conn_destroy(struct httpd_conn *c)
{
	nng_stream_free(c->st);
	nng_aio_reap(c->rx);
	nng_aio_reap(c->tx);
	nng_aio_reap(c->cb);
	free(c->buf);
	free(c->hbuf);
	free(c->sub);
	lm_buf_fini(&c->extra);
	lm_buf_fini(&c->out);
	lm_buf_fini(&c->wr);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* Under s->mu. */
static void conn_unlink(struct httpd *s, struct httpd_conn *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	s->n_conns--;
	pthread_cond_broadcast(&s->cv);
}

static void conn_free(struct httpd_conn *c)
{
	struct httpd *s = c->srv;
	pthread_mutex_lock(&s->mu);
	conn_unlink(s, c);
	pthread_mutex_unlock(&s->mu);
	conn_destroy(c);
}

/* Unlocks c and frees it if it is done. */
static void conn_unlock(struct httpd_conn *c)
{
	bool dead = conn_dead(c);
	pthread_mutex_unlock(&c->mu);
	if (dead)
		conn_free(c);
}

/* Under c->mu: the client is gone as far as the request is concerned. */
static void conn_fire_gone(struct httpd_conn *c)
{
	c->peer_gone = true;
	void (*fn)(void *) = c->gone;
	c->gone = NULL;
	if (fn != NULL)
		fn(c->gone_arg);
}

/* Under c->mu: closes the stream; outstanding operations end with errors and release it. */
static void conn_close(struct httpd_conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	conn_fire_gone(c);
	atomic_fetch_sub_explicit(&c->srv->stats.connections, 1, memory_order_relaxed);
	nng_stream_close(c->st);
}

/* ------------------------------------------------------------------ writing */

static void conn_send(struct httpd_conn *c);
static void conn_read(struct httpd_conn *c, size_t want);

/* Under c->mu: the response is out. The connection closes or waits for the next request. */
static void conn_finish(struct httpd_conn *c)
{
	if (c->close_after || c->closing) {
		conn_close(c);
		return;
	}
	c->start = c->req_end;
	c->state = C_IDLE;
	c->idle_since_ns = lm_now_ns();
	c->replied = c->streaming = c->chunked = c->stream_ended = false;
	c->peer_gone = false;
	c->gone = NULL;
	c->route = NULL;
	lm_buf_reset(&c->extra);
	/* The read posted to watch this request reads the next one. Bytes already here (the next
	 * request, pipelined) are taken up by the read's callback, never from here: a handler
	 * called from here would run while this thread's caller still uses c. A posted read is
	 * cancelled for that; otherwise a zero sleep on the read's aio calls its callback. */
	if (c->len > c->start) {
		if (c->rx_busy) {
			nng_aio_cancel(c->rx);
		} else {
			c->rx_busy = true;
			nng_sleep_aio(0, c->rx);
		}
	} else {
		conn_read(c, HTTPD_READ_ROOM);
	}
}

/* Under c->mu: starts the next write, or finishes the response when everything is out. */
static void conn_send(struct httpd_conn *c)
{
	if (c->tx_busy || c->closing || c->state == C_HANDLER)
		return;
	if (c->wr_off >= c->wr.len) {
		lm_buf_reset(&c->wr);
		c->wr_off = 0;
		if (c->out.len > 0) {
			struct lm_buf t = c->wr;
			c->wr = c->out;
			c->out = t;
		}
	}
	if (c->wr.len > c->wr_off) {
		nng_iov iov = {.iov_buf = c->wr.p + c->wr_off, .iov_len = c->wr.len - c->wr_off};
		nng_aio_set_iov(c->tx, 1, &iov);
		nng_aio_set_timeout(c->tx, LM_HTTPD_WRITE_TIMEOUT_MS);
		c->tx_busy = true;
		nng_stream_send(c->st, c->tx);
		return;
	}
	bool done = c->state == C_WRITE || (c->state == C_STREAM && c->stream_ended);
	if (done)
		conn_finish(c);
}

static void conn_tx_cb(void *arg)
{
	struct httpd_conn *c = arg;
	int rv = nng_aio_result(c->tx);
	pthread_mutex_lock(&c->mu);
	c->tx_busy = false;
	if (rv != 0) {
		conn_close(c);
	} else {
		c->wr_off += nng_aio_count(c->tx);
		conn_send(c);
	}
	conn_unlock(c);
}

/* Under c->mu: appends the status line and headers of a response to c->out. length < 0: a
 * stream (chunked when c->chunked). */
static void conn_head(struct httpd_conn *c, uint16_t status, const char *content_type,
		      int64_t length)
{
	struct lm_buf *o = &c->out;
	if (!c->body_read || c->srv->stopping || c->head.close)
		c->close_after = true;
	lm_buf_printf(o, "HTTP/1.1 %u %s\r\n", status, lm_http_reason(status));
	if (content_type != NULL)
		lm_buf_printf(o, "Content-Type: %s\r\n", content_type);
	if (length >= 0 && status != 204)
		lm_buf_printf(o, "Content-Length: %lld\r\n", (long long)length);
	else if (c->chunked)
		lm_buf_adds(o, "Transfer-Encoding: chunked\r\n");
	if (c->close_after)
		lm_buf_adds(o, "Connection: close\r\n");
	else if (c->head.minor == 0)
		lm_buf_adds(o, "Connection: keep-alive\r\n");
	const char *origin = c->cors_ok ? lm_http_field(&c->head, "Origin") : NULL;
	if (origin != NULL)
		lm_buf_printf(o,
			      "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n"
			      "Access-Control-Expose-Headers: Retry-After\r\n",
			      origin);
	if (c->extra.len > 0)
		lm_buf_add(o, c->extra.p, c->extra.len);
	lm_buf_adds(o, "\r\n");
	httpd_count_status(c->srv, status);
}

/* Under c->mu: a whole response queued. */
static void conn_respond(struct httpd_conn *c, uint16_t status, const char *content_type,
			 const void *body, size_t len)
{
	conn_head(c, status, content_type, (int64_t)len);
	if (len > 0 && !c->is_head)
		lm_buf_add(&c->out, body, len);
	c->replied = true;
}

/* Under c->mu, outside a handler: the server refuses the request with a JSON error and writes
 * it. close: the connection ends after it (the request was not read to its end). */
static void conn_refuse(struct httpd_conn *c, enum lm_http_refusal r, uint16_t status, bool close,
			const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void conn_refuse(struct httpd_conn *c, enum lm_http_refusal r, uint16_t status, bool close,
			const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	atomic_fetch_add_explicit(&c->srv->stats.refused[r], 1, memory_order_relaxed);
	char *body = lm_httpd_error_json(httpd_error_type(status), NULL, msg);
	c->close_after |= close;
	c->state = C_WRITE;
	conn_respond(c, status, "application/json", body, body != NULL ? strlen(body) : 0);
	free(body);
	conn_send(c);
}

/* Under c->mu: the 503 of a connection accepted past max_conns. */
static void conn_refuse_over_cap(struct httpd_conn *c)
{
	c->head.minor = 1;
	conn_refuse(c, LM_HTTP_REFUSE_CONNECTIONS, 503, true,
		    "the server holds %d connections, its limit", (int)c->srv->lim.max_conns);
}

/* ------------------------------------------------------------------ reading */

/* Under c->mu: room for `want` more bytes. The buffer may move only while nothing points into
 * it: not while a read is outstanding or a handler holds the body. */
static bool conn_room(struct httpd_conn *c, size_t want)
{
	if (c->cap - c->len >= want)
		return true;
	if (c->rx_busy || c->state == C_HANDLER || c->state == C_WRITE || c->state == C_STREAM)
		return c->cap > c->len;
	size_t cap = c->cap;
	char *p = lm_grow(c->buf, &cap, c->len + want, 1, HTTPD_READ_ROOM);
	if (p == NULL)
		return c->cap > c->len;
	c->buf = p;
	c->cap = cap;
	return true;
}

/* Under c->mu: posts a read. Reads carry no timeout: the server's sweep enforces the
 * deadlines (see httpd_sweep_cb), so that a read posted to watch a request being answered can
 * go on as the read of the next one. */
static void conn_read(struct httpd_conn *c, size_t want)
{
	if (c->rx_busy || c->closing || !conn_room(c, want))
		return;
	nng_iov iov = {.iov_buf = c->buf + c->len, .iov_len = c->cap - c->len};
	nng_aio_set_iov(c->rx, 1, &iov);
	c->rx_busy = true;
	nng_stream_recv(c->st, c->rx);
}

static enum lm_http_refusal httpd_reason_of(uint16_t status)
{
	switch (status) {
	case 413:
		return LM_HTTP_REFUSE_BODY_TOO_LARGE;
	case 417:
		return LM_HTTP_REFUSE_EXPECTATION;
	case 431:
		return LM_HTTP_REFUSE_HEAD_TOO_LARGE;
	case 501:
		return LM_HTTP_REFUSE_NOT_IMPLEMENTED;
	default:
		return LM_HTTP_REFUSE_MALFORMED;
	}
}

static int httpd_hex(char ch)
{
	return ch >= '0' && ch <= '9'   ? ch - '0'
	       : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
	       : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
					: -1;
}

/* Percent-decodes the rest of the path below a prefix route into c->sub. */
static void conn_subpath(struct httpd_conn *c, const char *rest)
{
	size_t n = strlen(rest), cap = c->sub_cap;
	char *p = lm_grow(c->sub, &cap, n + 1, 1, 64);
	c->sub_bad = p == NULL;
	if (p == NULL)
		return;
	c->sub = p;
	c->sub_cap = cap;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int hi = i + 2 < n + 1 ? httpd_hex(rest[i + 1]) : -1;
		int lo = hi >= 0 ? httpd_hex(rest[i + 2]) : -1;
		if (rest[i] == '%' && lo >= 0) {
			p[k++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			p[k++] = rest[i];
		}
	}
	p[k] = '\0';
	c->sub_bad = strlen(p) != k;
}

static bool httpd_origin_allowed(const struct httpd *s, const char *origin)
{
	for (int32_t i = 0; i < s->lim.n_cors; i++)
		if (strcmp(s->cors[i], origin) == 0)
			return true;
	return false;
}

/* The methods routed at a path, as an Allow value ("GET, HEAD, POST"). */
static void httpd_allow(const struct httpd *s, const char *path, char *out, size_t cap)
{
	size_t at = 0;
	out[0] = '\0';
	bool get = false;
	for (int32_t i = 0; i < s->n_routes; i++) {
		const struct httpd_route *r = &s->routes[i];
		bool match = r->prefix ? strncmp(path, r->path, r->path_len) == 0
				       : strcmp(path, r->path) == 0;
		if (!match || r->method == NULL || strstr(out, r->method) != NULL)
			continue;
		at += (size_t)snprintf(out + at, cap > at ? cap - at : 0, "%s%s", at ? ", " : "",
				       r->method);
		get |= strcmp(r->method, "GET") == 0;
	}
	if (get && at < cap)
		snprintf(out + at, cap - at, ", HEAD");
}

static const struct httpd_route *httpd_find(const struct httpd *s, const char *path,
					    const char *method, bool *path_found)
{
	*path_found = false;
	for (int32_t i = 0; i < s->n_routes; i++) {
		const struct httpd_route *r = &s->routes[i];
		bool match = r->prefix ? strncmp(path, r->path, r->path_len) == 0
				       : strcmp(path, r->path) == 0;
		if (!match)
			continue;
		*path_found = true;
		if (r->method == NULL || strcmp(r->method, method) == 0 ||
		    (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0))
			return r;
	}
	return NULL;
}

/* Under c->mu, the head parsed: origin, route, method, media type and body size. Returns true
 * when the request goes on to its body and handler; otherwise a response is on its way. */
/* The request headers a preflight from an allowed origin may send: the ones it asks for
 * (a browser client sends its own, such as the openai SDK's x-stainless-*), when they are a
 * plain list of header names; else the two the API reads. */
static const char *httpd_allow_headers(const struct lm_http_head *h)
{
	const char *want = lm_http_field(h, "Access-Control-Request-Headers");
	if (want == NULL || want[0] == '\0' || strlen(want) > 1000)
		return "Authorization, Content-Type";
	for (const char *p = want; *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && strchr("-_, \t", *p) == NULL)
			return "Authorization, Content-Type";
	return want;
}

static bool conn_route(struct httpd_conn *c)
{
	struct httpd *s = c->srv;
	const struct lm_http_head *h = &c->head;
	bool has_body = h->chunked || (h->has_length && h->content_length > 0);
	c->body_read = !has_body;
	c->is_head = strcmp(h->method, "HEAD") == 0;
	const char *origin = lm_http_field(h, "Origin");
	c->cors_ok = origin != NULL && httpd_origin_allowed(s, origin);
	if (origin != NULL && !c->cors_ok) {
		conn_refuse(c, LM_HTTP_REFUSE_ORIGIN, 403, has_body,
			    "origin '%.200s' is not allowed to call this API (mesh.toml "
			    "[coordinator] cors_origins)",
			    origin);
		return false;
	}
	bool found;
	const struct httpd_route *r = httpd_find(s, h->path, h->method, &found);
	char allow[200];
	httpd_allow(s, h->path, allow, sizeof allow);
	if (!found) {
		conn_refuse(c, LM_HTTP_REFUSE_NOT_FOUND, 404, has_body,
			    "%.200s is not an endpoint of this server", h->path);
		return false;
	}
	if (r == NULL && strcmp(h->method, "OPTIONS") == 0) {
		if (c->cors_ok && lm_http_field(h, "Access-Control-Request-Method") != NULL)
			lm_buf_printf(&c->extra,
				      "Access-Control-Allow-Methods: %s\r\n"
				      "Access-Control-Allow-Headers: %s\r\n"
				      "Access-Control-Max-Age: 600\r\n",
				      allow, httpd_allow_headers(h));
		lm_buf_printf(&c->extra, "Allow: %s, OPTIONS\r\n", allow);
		c->state = C_WRITE;
		conn_respond(c, 204, NULL, NULL, 0);
		conn_send(c);
		return false;
	}
	if (r == NULL) {
		lm_buf_printf(&c->extra, "Allow: %s, OPTIONS\r\n", allow);
		conn_refuse(c, LM_HTTP_REFUSE_METHOD, 405, has_body,
			    "%.200s does not take %.20s (it takes %s)", h->path, h->method, allow);
		return false;
	}
	if (r->json && strcmp(h->method, "POST") == 0) {
		const char *ct = lm_http_field(h, "Content-Type");
		size_t n = ct != NULL ? strcspn(ct, "; \t") : 0;
		/* The body is parsed as strict JSON whatever it is labelled, so the label is
		 * checked only to keep browsers out: a page may send text/plain or a form without
		 * a CORS preflight, and then the request would run before the browser asked. So
		 * no Content-Type is JSON, and so is curl -d's own
		 * application/x-www-form-urlencoded from a client that sends no Origin (a browser
		 * always sends one with a POST); any other type is a 415. */
		bool form =
			n == 33 && strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0;
		if (ct != NULL && (n != 16 || strncasecmp(ct, "application/json", 16) != 0) &&
		    !(form && lm_http_field(h, "Origin") == NULL)) {
			conn_refuse(c, LM_HTTP_REFUSE_MEDIA_TYPE, 415, has_body,
				    "the body must be JSON: send Content-Type: application/json "
				    "(got %.60s)",
				    ct);
			return false;
		}
	}
	if (has_body && (r->max_body == 0 || (h->has_length && h->content_length > r->max_body))) {
		conn_refuse(c, LM_HTTP_REFUSE_BODY_TOO_LARGE, 413, true,
			    r->max_body == 0 ? "%.200s takes no request body"
					     : "%.200s takes a body of at most %zu bytes",
			    h->path, r->max_body);
		return false;
	}
	c->route = r;
	if (r->prefix)
		conn_subpath(c, h->path + r->path_len);
	return true;
}

/* Under c->mu: the request is whole; the handler gets it. Unlocks c: the handler runs without
 * the lock, and c must not be touched after it is called. */
static void conn_dispatch(struct httpd_conn *c)
{
	if (c->over_cap) {
		conn_refuse_over_cap(c);
		conn_unlock(c);
		return;
	}
	/* Room to watch the connection while the handler runs (the buffer cannot move then). */
	conn_room(c, HTTPD_READ_ROOM);
	c->state = C_HANDLER;
	c->body_read = true;
	c->cb_busy = true;
	const struct httpd_route *r = c->route;
	nng_aio_set_input(c->cb, 0, c);
	nng_aio_set_input(c->cb, 1, (void *)r);
	conn_read(c, 1);
	pthread_mutex_unlock(&c->mu);
	nng_aio_begin(c->cb);
	r->cb(c->cb);
}

/* Under c->mu: a body framed by chunks or Content-Length, as far as it has arrived. Returns
 * true when the handler was called (and c unlocked). */
static bool conn_body(struct httpd_conn *c)
{
	size_t avail = c->len - c->body_start;
	if (c->head.chunked) {
		struct lm_http_perr e;
		int rc = lm_http_chunked_feed(&c->ch, c->buf + c->body_start, avail,
					      c->route->max_body, &e);
		if (rc < 0) {
			conn_refuse(c, httpd_reason_of(e.status), e.status, true, "%s", e.msg);
			return false;
		}
		if (rc == 1) {
			c->body_len = c->ch.out;
			c->req_end = c->body_start + c->ch.in;
			conn_dispatch(c);
			return true;
		}
		/* Keep only the decoded data and the raw tail. */
		size_t tail = avail - c->ch.in;
		memmove(c->buf + c->body_start + c->ch.out, c->buf + c->body_start + c->ch.in,
			tail);
		c->ch.in = c->ch.out;
		c->len = c->body_start + c->ch.out + tail;
		conn_read(c, 16384);
		return false;
	}
	uint64_t want = c->head.content_length;
	if (avail >= want) {
		c->body_len = (size_t)want;
		c->req_end = c->body_start + c->body_len;
		conn_dispatch(c);
		return true;
	}
	conn_read(c, (size_t)(want - avail));
	return false;
}

/* Under c->mu: a request's head as far as it has arrived. Returns 1 to go on with its body,
 * 0 to wait for bytes, -1 when a response or a close is under way. */
static int conn_head_in(struct httpd_conn *c)
{
	struct httpd *s = c->srv;
	size_t avail = c->len - c->start;
	size_t n = avail < s->lim.max_head ? avail : s->lim.max_head;
	if (c->hcap < n + 1) {
		size_t cap = c->hcap;
		char *p = lm_grow(c->hbuf, &cap, n + 1, 1, 1024);
		if (p == NULL) {
			conn_close(c);
			return -1;
		}
		c->hbuf = p;
		c->hcap = cap;
	}
	memcpy(c->hbuf, c->buf + c->start, n);
	c->hbuf[n] = '\0';
	c->cors_ok = c->is_head = false;
	struct lm_http_perr e;
	int rc = lm_http_parse_head(c->hbuf, n, s->lim.max_head, &c->head, &e);
	if (rc == 0) {
		conn_read(c, HTTPD_READ_ROOM);
		return 0;
	}
	if (rc < 0) {
		c->body_read = false;
		conn_refuse(c, httpd_reason_of(e.status), e.status, true, "%s", e.msg);
		return -1;
	}
	c->body_start = c->start + c->head.head_len;
	c->req_end = c->body_start;
	c->body_len = 0;
	memset(&c->ch, 0, sizeof c->ch);
	if (!conn_route(c))
		return -1;
	return 1;
}

/* Under c->mu: moves the connection on from what has arrived. May unlock c (when a handler is
 * called): callers must not touch c after it unless it returned with c locked, which it says
 * by returning true. */
static bool conn_advance(struct httpd_conn *c)
{
	if (c->closing)
		return true;
	if (c->state == C_IDLE) {
		if (!c->rx_busy && c->start > 0) {
			memmove(c->buf, c->buf + c->start, c->len - c->start);
			c->len -= c->start;
			c->start = 0;
		}
		if (c->len == c->start) {
			conn_read(c, HTTPD_READ_ROOM);
			return true;
		}
		c->state = C_HEAD;
		c->fresh = false;
		c->deadline_ms = lm_now_ms() + c->srv->lim.read_timeout_ms;
	}
	if (c->state == C_HEAD) {
		int rc = conn_head_in(c);
		if (rc <= 0)
			return true;
		if (c->head.expect_continue && !c->body_read && c->len == c->body_start) {
			lm_buf_adds(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
			c->state = C_BODY;
			conn_send(c);
		}
		c->state = C_BODY;
		if (c->body_read) {
			conn_dispatch(c);
			return false;
		}
	}
	if (c->state == C_BODY)
		return !conn_body(c);
	return true;
}

static void conn_rx_cb(void *arg)
{
	struct httpd_conn *c = arg;
	int rv = nng_aio_result(c->rx);
	pthread_mutex_lock(&c->mu);
	c->rx_busy = false;
	c->len += nng_aio_count(c->rx);
	if (c->closing || (rv != 0 && rv != NNG_ECANCELED)) {
		if (c->closing) {
			/* closing: nothing more to do */
		} else if (c->state == C_IDLE) {
			conn_close(c);
		} else if (c->state == C_HEAD || c->state == C_BODY) {
			conn_close(c);
		} else {
			/* The client left while its request is handled or answered. */
			conn_fire_gone(c);
			c->close_after = true;
		}
		conn_unlock(c);
		return;
	}
	if (c->state == C_IDLE || c->state == C_HEAD || c->state == C_BODY) {
		if (!conn_advance(c))
			return; /* a handler has it, unlocked */
	} else if (rv == 0) {
		/* Bytes while a request is being answered: the next request, pipelined. */
		conn_read(c, 1);
	}
	conn_unlock(c);
}

/* The handler finished its request (a reply or a stream). */
static void conn_cb_done(void *arg)
{
	struct httpd_conn *c = arg;
	pthread_mutex_lock(&c->mu);
	c->cb_busy = false;
	if (!c->replied) {
		c->close_after = true;
		conn_respond(c, 500, NULL, NULL, 0);
	}
	c->state = c->streaming ? C_STREAM : C_WRITE;
	conn_send(c);
	conn_unlock(c);
}

/* ------------------------------------------------------------------ accepting */

static struct httpd_conn *conn_new(struct httpd *s, nng_stream *st)
{
	struct httpd_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->srv = s;
	c->st = st;
	c->body_read = true;
	c->state = C_IDLE;
	c->idle_since_ns = lm_now_ns();
	c->fresh = true;
	c->cap = HTTPD_READ_ROOM;
	c->buf = malloc(c->cap);
	if (c->buf == NULL || nng_aio_alloc(&c->rx, conn_rx_cb, c) != 0 ||
	    nng_aio_alloc(&c->tx, conn_tx_cb, c) != 0 ||
	    nng_aio_alloc(&c->cb, conn_cb_done, c) != 0) {
		if (c->rx != NULL)
			nng_aio_free(c->rx);
		if (c->tx != NULL)
			nng_aio_free(c->tx);
		free(c->buf);
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

/* Under s->mu: closes the idle connection waiting longest; false when none is idle. A
 * connection that has not begun a request is idle only once it has been open for
 * fresh_grace_ms: a client's first bytes may not have been read yet when the next
 * connection arrives, and closing it then would reset a request that is on its way. */
static bool httpd_evict_idle(struct httpd *s)
{
	struct httpd_conn *oldest = NULL;
	uint64_t since = UINT64_MAX;
	uint64_t grace = lm_now_ns() - (uint64_t)s->lim.fresh_grace_ms * 1000000u;
	for (struct httpd_conn *c = s->conns; c != NULL; c = c->next) {
		pthread_mutex_lock(&c->mu);
		if (!c->closing && !c->over_cap && c->state == C_IDLE && c->len == c->start &&
		    (!c->fresh || c->idle_since_ns < grace) && c->idle_since_ns < since) {
			oldest = c;
			since = c->idle_since_ns;
		}
		pthread_mutex_unlock(&c->mu);
	}
	if (oldest == NULL)
		return false;
	pthread_mutex_lock(&oldest->mu);
	conn_close(oldest);
	pthread_mutex_unlock(&oldest->mu); /* its read's callback frees it */
	return true;
}

static void httpd_accept_cb(void *arg)
{
	struct httpd *s = arg;
	int rv = nng_aio_result(s->acc);
	pthread_mutex_lock(&s->mu);
	if (s->stopping || rv == NNG_ECLOSED) {
		if (rv == 0)
			nng_stream_free(nng_aio_get_output(s->acc, 0));
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (rv != 0 || s->acc_sleeping) {
		/* A failed accept (out of descriptors, say) is tried again after a pause, so that
		 * a persistent failure does not spin. */
		s->acc_sleeping = !s->acc_sleeping && rv != 0;
		if (s->acc_sleeping)
			nng_sleep_aio(50, s->acc);
		else
			nng_stream_listener_accept(s->listener, s->acc);
		pthread_mutex_unlock(&s->mu);
		return;
	}
	nng_stream *st = nng_aio_get_output(s->acc, 0);
	int64_t open = atomic_load(&s->stats.connections);
	bool refuse = open >= s->lim.max_conns && !httpd_evict_idle(s);
	struct httpd_conn *c = NULL;
	/* Past the cap, a connection is still taken to be told 503, up to a quarter more (and 64)
	 * of them; beyond that it is closed unanswered, and counted the same. */
	if (!refuse || s->n_conns < s->lim.max_conns + s->lim.max_conns / 4 + 64)
		c = conn_new(s, st);
	if (c == NULL) {
		nng_stream_free(st);
		atomic_fetch_add(&s->stats.refused[LM_HTTP_REFUSE_CONNECTIONS], 1);
	} else {
		c->next = s->conns;
		if (s->conns != NULL)
			s->conns->prev = c;
		s->conns = c;
		s->n_conns++;
		atomic_fetch_add(&s->stats.connections, 1);
		atomic_fetch_add(&s->stats.connections_total, 1);
	}
	nng_stream_listener_accept(s->listener, s->acc);
	pthread_mutex_unlock(&s->mu);
	if (c == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	c->over_cap = refuse;
	conn_read(c, HTTPD_READ_ROOM);
	conn_unlock(c);
}

/* The deadlines: a request's head and body must arrive by its deadline (408 otherwise), and an
 * idle connection closes after idle_timeout_ms. One timer for the server checks every
 * connection a few times per timeout, which costs nothing per request, unlike a timeout on
 * every read. */
static int64_t httpd_sweep_ms(const struct httpd *s)
{
	int64_t t = s->lim.read_timeout_ms < s->lim.idle_timeout_ms ? s->lim.read_timeout_ms
								    : s->lim.idle_timeout_ms;
	t /= 4;
	return t < 50 ? 50 : t > 1000 ? 1000 : t;
}

static void httpd_sweep_cb(void *arg)
{
	struct httpd *s = arg;
	if (nng_aio_result(s->sweep) == NNG_ECANCELED)
		return;
	int64_t now = lm_now_ms();
	pthread_mutex_lock(&s->mu);
	if (s->stopping) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	for (struct httpd_conn *c = s->conns; c != NULL; c = c->next) {
		pthread_mutex_lock(&c->mu);
		if (c->closing) {
			/* nothing to do */
		} else if ((c->state == C_HEAD || c->state == C_BODY) && now > c->deadline_ms) {
			conn_refuse(c, LM_HTTP_REFUSE_TIMEOUT, 408, true,
				    "the request did not arrive within %lld ms",
				    (long long)s->lim.read_timeout_ms);
		} else if (c->state == C_IDLE && c->over_cap &&
			   (int64_t)((lm_now_ns() - c->idle_since_ns) / 1000000) >
				   s->lim.fresh_grace_ms) {
			/* Past the cap and silent: told 503 now rather than holding its place. */
			conn_refuse_over_cap(c);
		} else if (c->state == C_IDLE && (int64_t)((lm_now_ns() - c->idle_since_ns) /
							   1000000) > s->lim.idle_timeout_ms) {
			conn_close(c);
		}
		pthread_mutex_unlock(&c->mu); /* a closed one is freed by its read's callback */
	}
	nng_sleep_aio((nng_duration)httpd_sweep_ms(s), s->sweep);
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ the server */

int lm_httpd_init(struct lm_httpd *h, const char *addr, lm_diag *d)
{
	return lm_httpd_init_limits(h, addr, NULL, d);
}

static int httpd_set_limits(struct httpd *s, const struct lm_httpd_limits *lim)
{
	if (lim != NULL)
		s->lim = *lim;
	if (s->lim.read_timeout_ms <= 0)
		s->lim.read_timeout_ms = LM_HTTPD_READ_TIMEOUT_MS;
	if (s->lim.idle_timeout_ms <= 0)
		s->lim.idle_timeout_ms = LM_HTTPD_IDLE_TIMEOUT_MS;
	if (s->lim.max_conns <= 0)
		s->lim.max_conns = LM_HTTPD_MAX_CONNS;
	if (s->lim.max_head == 0)
		s->lim.max_head = LM_HTTPD_MAX_HEAD;
	if (s->lim.fresh_grace_ms <= 0)
		s->lim.fresh_grace_ms = LM_HTTPD_FRESH_GRACE_MS;
	s->lim.cors_origins = NULL;
	if (s->lim.n_cors <= 0 || lim == NULL || lim->cors_origins == NULL) {
		s->lim.n_cors = 0;
		return 0;
	}
	s->cors = calloc((size_t)s->lim.n_cors, sizeof *s->cors);
	if (s->cors == NULL)
		return LM_ENOMEM;
	for (int32_t i = 0; i < s->lim.n_cors; i++)
		if ((s->cors[i] = strdup(lim->cors_origins[i])) == NULL)
			return LM_ENOMEM;
	return 0;
}

static void httpd_free(struct httpd *s)
{
	for (int32_t i = 0; i < s->n_routes; i++) {
		free(s->routes[i].method);
		free(s->routes[i].path);
	}
	free(s->routes);
	for (int32_t i = 0; s->cors != NULL && i < s->lim.n_cors; i++)
		free(s->cors[i]);
	free(s->cors);
	if (s->acc != NULL)
		nng_aio_free(s->acc);
	if (s->sweep != NULL)
		nng_aio_free(s->sweep);
	if (s->listener != NULL)
		nng_stream_listener_free(s->listener);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}

int lm_httpd_init_limits(struct lm_httpd *h, const char *addr, const struct lm_httpd_limits *lim,
			 lm_diag *d)
{
	h->srv = NULL;
	const char *hp = addr;
	if (strstr(addr, "://") != NULL) {
		if (strncmp(addr, "http://", 7) != 0)
			return lm_fail(d, LM_ECONFIG, "http address '%s': only http:// is served",
				       addr);
		hp = addr + 7;
	}
	struct httpd *s = calloc(1, sizeof *s);
	if (s == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	int n = snprintf(s->url, sizeof s->url, "tcp://%s", hp);
	if (n < 0 || (size_t)n >= sizeof s->url) {
		httpd_free(s);
		return lm_fail(d, LM_ECONFIG, "http address '%s' is too long", addr);
	}
	if (n > 6 && s->url[n - 1] == '/')
		s->url[n - 1] = '\0';
	int rv;
	if (httpd_set_limits(s, lim) != 0) {
		httpd_free(s);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	if ((rv = nng_stream_listener_alloc(&s->listener, s->url)) != 0) {
		httpd_free(s);
		return lm_fail(d, LM_ECONFIG, "http address '%s': %s", addr, nng_strerror(rv));
	}
	if ((rv = nng_aio_alloc(&s->acc, httpd_accept_cb, s)) != 0 ||
	    (rv = nng_aio_alloc(&s->sweep, httpd_sweep_cb, s)) != 0) {
		httpd_free(s);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	h->srv = s;
	return 0;
}

int lm_httpd_add(struct lm_httpd *h, const struct lm_httpd_route *r, lm_diag *d)
{
	struct httpd *s = h->srv;
	struct httpd_route *rs = realloc(s->routes, (size_t)(s->n_routes + 1) * sizeof *rs);
	if (rs == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	s->routes = rs;
	struct httpd_route *x = &rs[s->n_routes];
	*x = (struct httpd_route){
		.cb = r->cb, .data = r->data, .max_body = r->max_body, .json = r->json};
	x->path = strdup(r->path);
	x->method = r->method != NULL ? strdup(r->method) : NULL;
	if (x->path == NULL || (r->method != NULL && x->method == NULL)) {
		free(x->path);
		free(x->method);
		return lm_fail(d, LM_ENOMEM, "out of memory");
	}
	x->path_len = strlen(x->path);
	x->prefix = x->path_len > 1 && x->path[x->path_len - 1] == '/';
	s->n_routes++;
	return 0;
}

int lm_httpd_route(struct lm_httpd *h, const char *method, const char *path, void (*cb)(nng_aio *),
		   void *data, size_t max_body, lm_diag *d)
{
	const struct lm_httpd_route r = {
		.method = method, .path = path, .cb = cb, .data = data, .max_body = max_body};
	return lm_httpd_add(h, &r, d);
}

int lm_httpd_start(struct lm_httpd *h, lm_diag *d)
{
	struct httpd *s = h->srv;
	int rv = nng_stream_listener_listen(s->listener);
	if (rv != 0)
		return lm_fail(d, LM_EIO, "cannot serve http at %s: %s", s->url + 6,
			       nng_strerror(rv));
	nng_stream_listener_get_int(s->listener, NNG_OPT_TCP_BOUND_PORT, &s->port);
	s->listening = true;
	nng_stream_listener_accept(s->listener, s->acc);
	nng_sleep_aio((nng_duration)httpd_sweep_ms(s), s->sweep);
	return 0;
}

int lm_httpd_port(const struct lm_httpd *h)
{
	return h->srv != NULL ? h->srv->port : 0;
}

void lm_httpd_fini(struct lm_httpd *h)
{
	struct httpd *s = h != NULL ? h->srv : NULL;
	if (s == NULL)
		return;
	h->srv = NULL;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_mutex_unlock(&s->mu);
	nng_stream_listener_close(s->listener);
	nng_aio_stop(s->acc);
	nng_aio_stop(s->sweep);
	/* Every connection closes; each is freed once its operations, its handler and its stream
	 * are done. A connection nothing holds any more is freed here. */
	struct httpd_conn *dead = NULL;
	pthread_mutex_lock(&s->mu);
	for (struct httpd_conn *c = s->conns, *next; c != NULL; c = next) {
		next = c->next;
		pthread_mutex_lock(&c->mu);
		conn_close(c);
		bool done = conn_dead(c);
		pthread_mutex_unlock(&c->mu);
		if (done) {
			conn_unlink(s, c);
			c->next = dead;
			dead = c;
		}
	}
	while (s->n_conns > 0)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	while (dead != NULL) {
		struct httpd_conn *c = dead;
		dead = c->next;
		conn_destroy(c);
	}
	httpd_free(s);
}

const struct lm_httpd_stats *lm_httpd_stats(const struct lm_httpd *h)
{
	return h->srv != NULL ? &h->srv->stats : NULL;
}

void lm_httpd_count_refusal(const struct lm_httpd *h, enum lm_http_refusal r)
{
	if (h->srv != NULL && r >= 0 && r < LM_HTTP_REFUSE_COUNT)
		atomic_fetch_add_explicit(&h->srv->stats.refused[r], 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------ handlers' side */

void *lm_httpd_data(nng_aio *aio)
{
	const struct httpd_route *r = nng_aio_get_input(aio, 1);
	return r->data;
}

const char *lm_httpd_method(nng_aio *aio)
{
	return httpd_conn_of(aio)->head.method;
}

const char *lm_httpd_path(nng_aio *aio)
{
	return httpd_conn_of(aio)->head.path;
}

const char *lm_httpd_query(nng_aio *aio)
{
	return httpd_conn_of(aio)->head.query;
}

const char *lm_httpd_header(nng_aio *aio, const char *name)
{
	return lm_http_field(&httpd_conn_of(aio)->head, name);
}

const char *lm_httpd_subpath(nng_aio *aio)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	return c->route->prefix && !c->sub_bad ? c->sub : NULL;
}

void lm_httpd_body(nng_aio *aio, const char **body, size_t *len)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	*body = c->buf + c->body_start;
	*len = c->body_len;
}

bool lm_httpd_authorized(nng_aio *aio, const char *token)
{
	if (token == NULL || token[0] == '\0')
		return true;
	const char *h = lm_httpd_header(aio, "Authorization");
	if (h == NULL || strncmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	size_t a = strlen(h), b = strlen(token);
	unsigned diff = (unsigned)(a ^ b);
	for (size_t i = 0; i < b; i++)
		diff |= (unsigned)((uint8_t)h[i < a ? i : 0] ^ (uint8_t)token[i]);
	return diff == 0;
}

void lm_httpd_on_gone(nng_aio *aio, void (*fn)(void *arg), void *arg)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	pthread_mutex_lock(&c->mu);
	if (c->replied) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->gone = fn;
	c->gone_arg = arg;
	if (c->peer_gone || c->closing)
		conn_fire_gone(c);
	pthread_mutex_unlock(&c->mu);
}

void lm_httpd_add_header(nng_aio *aio, const char *name, const char *value)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	if (strpbrk(name, "\r\n:") != NULL || strpbrk(value, "\r\n") != NULL)
		return;
	pthread_mutex_lock(&c->mu);
	lm_buf_printf(&c->extra, "%s: %s\r\n", name, value);
	pthread_mutex_unlock(&c->mu);
}

void lm_httpd_reply(nng_aio *aio, uint16_t status, const char *content_type, const void *body,
		    size_t len)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	pthread_mutex_lock(&c->mu);
	if (c->replied) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->gone = NULL;
	conn_respond(c, status, content_type, body, len);
	pthread_mutex_unlock(&c->mu);
	nng_aio_finish(aio, 0);
}

void lm_httpd_reply_json(nng_aio *aio, uint16_t status, cJSON *doc)
{
	char *s = doc != NULL ? cJSON_PrintUnformatted(doc) : NULL;
	cJSON_Delete(doc);
	if (s == NULL) {
		static const char oom[] =
			"{\"error\":{\"message\":\"out of memory\","
			"\"type\":\"server_error\",\"param\":null,\"code\":null}}";
		lm_httpd_reply(aio, 500, "application/json", oom, sizeof oom - 1);
		return;
	}
	lm_httpd_reply(aio, status, "application/json", s, strlen(s));
	free(s);
}

char *lm_httpd_error_json(const char *type, const char *param, const char *message)
{
	cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "message", message);
	cJSON_AddStringToObject(e, "type", type);
	if (param != NULL)
		cJSON_AddStringToObject(e, "param", param);
	else
		cJSON_AddNullToObject(e, "param");
	cJSON_AddNullToObject(e, "code");
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

static void httpd_vreply_error(nng_aio *aio, uint16_t status, const char *type, const char *param,
			       const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void httpd_vreply_error(nng_aio *aio, uint16_t status, const char *type, const char *param,
			       const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	char *s = lm_httpd_error_json(type, param, msg);
	if (s == NULL) {
		lm_httpd_reply_json(aio, 500, NULL);
		return;
	}
	lm_httpd_reply(aio, status, "application/json", s, strlen(s));
	free(s);
}

void lm_httpd_reply_error(nng_aio *aio, uint16_t status, const char *type, const char *param,
			  const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	httpd_vreply_error(aio, status, type, param, fmt, ap);
	va_end(ap);
}

void lm_httpd_refuse(nng_aio *aio, enum lm_http_refusal r, uint16_t status, const char *type,
		     const char *param, const char *fmt, ...)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	if (r >= 0 && r < LM_HTTP_REFUSE_COUNT)
		atomic_fetch_add_explicit(&c->srv->stats.refused[r], 1, memory_order_relaxed);
	va_list ap;
	va_start(ap, fmt);
	httpd_vreply_error(aio, status, type, param, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ streams */

struct lm_http_stream *lm_httpd_stream(nng_aio *aio, const char *content_type,
				       void (*gone)(void *arg), void *arg)
{
	struct httpd_conn *c = httpd_conn_of(aio);
	pthread_mutex_lock(&c->mu);
	if (c->replied) {
		pthread_mutex_unlock(&c->mu);
		return NULL;
	}
	/* Chunked keeps the connection for the next request; a client that will close anyway
	 * (HTTP/1.0, Connection: close) gets the plain bytes, ended by the close. */
	c->chunked = c->head.minor >= 1 && !c->head.close;
	if (!c->chunked)
		c->close_after = true;
	lm_buf_adds(&c->extra, "Cache-Control: no-cache\r\n");
	conn_head(c, 200, content_type, -1);
	c->streaming = true;
	c->replied = true;
	c->app_holds = true;
	c->gone = gone;
	c->gone_arg = arg;
	if (c->peer_gone || c->closing)
		conn_fire_gone(c);
	pthread_mutex_unlock(&c->mu);
	nng_aio_finish(aio, 0);
	return (struct lm_http_stream *)c;
}

bool lm_httpd_stream_write(struct lm_http_stream *st, const void *data, size_t len)
{
	struct httpd_conn *c = (struct httpd_conn *)st;
	pthread_mutex_lock(&c->mu);
	bool ok = !c->closing && !c->peer_gone && !c->stream_ended;
	if (ok && c->out.len + c->wr.len > LM_HTTPD_STREAM_BACKLOG) {
		conn_close(c); /* a client this far behind is not reading */
		ok = false;
	}
	if (ok && len > 0) {
		if (c->chunked)
			lm_buf_printf(&c->out, "%zx\r\n", len);
		lm_buf_add(&c->out, data, len);
		if (c->chunked)
			lm_buf_adds(&c->out, "\r\n");
		if (c->state == C_STREAM)
			conn_send(c);
	}
	pthread_mutex_unlock(&c->mu);
	return ok;
}

void lm_httpd_stream_end(struct lm_http_stream *st)
{
	struct httpd_conn *c = (struct httpd_conn *)st;
	pthread_mutex_lock(&c->mu);
	c->gone = NULL;
	c->stream_ended = true;
	c->app_holds = false;
	if (c->chunked && !c->closing)
		lm_buf_adds(&c->out, "0\r\n\r\n");
	if (c->state == C_STREAM)
		conn_send(c);
	conn_unlock(c);
}

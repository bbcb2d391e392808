/* httpd.h — the HTTP/1.1 server of the coordinator's API and the workers' health endpoints:
 * routing, JSON replies and OpenAI-style JSON errors, streams, CORS, and the limits a server
 * exposed to clients needs.
 *
 * It runs on NNG's byte streams (nng_stream_listener over tcp://) and NNG's aio threads, with
 * its own request parser (http_parse.h) rather than NNG's HTTP server, which answers errors
 * with HTML, reads neither chunked bodies nor Expect: 100-continue, and bounds neither the
 * time a request may take to arrive nor the number of connections.
 *
 * What it does on its own, before any handler runs:
 *   - every status it sends has a JSON body {"error": {"message", "type", "param", "code"}}:
 *     400 (malformed HTTP), 403 (an origin CORS does not allow), 404, 405 (with Allow), 408 (a
 *     request not arrived within read_timeout_ms), 413 (a body over the route's max_body; its
 *     Content-Length is refused before the body is read), 415 (a POST to a JSON route whose
 *     Content-Type is not application/json), 417, 431, 501 (a transfer coding but chunked),
 *     505, 503 (a connection past max_conns, when no idle one can be closed for it);
 *   - bodies framed by Content-Length or chunked; Expect: 100-continue answered with 100
 *     once the request is known to be acceptable;
 *   - keep-alive: a connection waiting for its next request longer than idle_timeout_ms is
 *     closed; a request's head and body must arrive within read_timeout_ms of its first byte
 *     (slow senders cannot hold a connection); at max_conns the idle connection waiting
 *     longest is closed to make room for a new one;
 *   - CORS: off unless cors_origins names origins. A request that carries an Origin header not
 *     in the list is refused (403) and runs nothing; for a listed one every response carries
 *     Access-Control-Allow-Origin, and a preflight (OPTIONS with
 *     Access-Control-Request-Method) is answered 204 with the path's methods and the request
 *     headers Authorization and Content-Type. (No Origin is trusted for being the server's
 *     own host: a page on another host that resolves here, DNS rebinding, sends exactly that.)
 *   - OPTIONS without a preflight: 204 with Allow; HEAD where GET is routed (no body).
 *
 * Handlers are callbacks `void cb(nng_aio *aio)` run on NNG's threads: they must not block, and
 * they finish the request by one of the reply functions (directly, or later from any thread) or
 * by starting a stream. Until then the connection is watched: a client that goes away is
 * reported through lm_httpd_on_gone.
 */
#ifndef LM_HTTPD_H
#define LM_HTTPD_H

#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define LM_HTTPD_READ_TIMEOUT_MS 10000
#define LM_HTTPD_IDLE_TIMEOUT_MS 30000
#define LM_HTTPD_MAX_CONNS       512
#define LM_HTTPD_MAX_HEAD        (16u << 10)
#define LM_HTTPD_FRESH_GRACE_MS  200
/* A write that makes no progress for this long means the client stopped reading. */
#define LM_HTTPD_WRITE_TIMEOUT_MS 30000
/* A stream whose client reads slower than it is written to is dropped past this backlog. */
#define LM_HTTPD_STREAM_BACKLOG (8u << 20)

struct lm_httpd_limits {
	int64_t read_timeout_ms; /* 0: LM_HTTPD_READ_TIMEOUT_MS */
	int64_t idle_timeout_ms; /* 0: LM_HTTPD_IDLE_TIMEOUT_MS */
	int32_t max_conns;       /* 0: LM_HTTPD_MAX_CONNS */
	size_t max_head;         /* 0: LM_HTTPD_MAX_HEAD */
	/* How long a connection that has not begun a request is not taken for idle (its first
	 * bytes may be on their way), and how long one past max_conns may stay silent before it
	 * is told 503. 0: LM_HTTPD_FRESH_GRACE_MS. */
	int64_t fresh_grace_ms;
	/* Origins ("https://app.example:8443", exactly as browsers send them) allowed to call
	 * across origins; copied. NULL or none: no request carrying an Origin is served. */
	const char *const *cors_origins;
	int32_t n_cors;
};

/* Why the server or a handler refused a request, counted for /metrics. */
#define LM_HTTP_REFUSALS(X)                     \
	X(MALFORMED, "malformed_request")       \
	X(HEAD_TOO_LARGE, "head_too_large")     \
	X(BODY_TOO_LARGE, "body_too_large")     \
	X(TIMEOUT, "read_timeout")              \
	X(NOT_FOUND, "not_found")               \
	X(METHOD, "method_not_allowed")         \
	X(MEDIA_TYPE, "unsupported_media_type") \
	X(ORIGIN, "origin_not_allowed")         \
	X(EXPECTATION, "expectation_failed")    \
	X(NOT_IMPLEMENTED, "not_implemented")   \
	X(CONNECTIONS, "too_many_connections")  \
	X(UNAUTHORIZED, "unauthorized")         \
	X(INVALID, "invalid_request")           \
	X(CONTEXT, "context_length_exceeded")   \
	X(TEMPLATE, "chat_template")            \
	X(QUEUE_FULL, "queue_full")             \
	X(UNAVAILABLE, "unavailable")           \
	X(INTERNAL, "internal_error")

enum lm_http_refusal {
#define LM_HTTP_REFUSAL_ENUM_(name, text) LM_HTTP_REFUSE_##name,
	LM_HTTP_REFUSALS(LM_HTTP_REFUSAL_ENUM_)
#undef LM_HTTP_REFUSAL_ENUM_
		LM_HTTP_REFUSE_COUNT
};
/* "queue_full" for LM_HTTP_REFUSE_QUEUE_FULL. */
const char *lm_http_refusal_name(enum lm_http_refusal r);

/* The status codes counted one by one; any other lands in the last slot. */
#define LM_HTTPD_CODES                                                                          \
	{                                                                                       \
		200, 204, 400, 401, 403, 404, 405, 408, 411, 413, 415, 417, 429, 431, 500, 501, \
			503, 505                                                                \
	}
#define LM_HTTPD_N_CODES 19

struct lm_httpd_stats {
	_Atomic uint64_t responses[LM_HTTPD_N_CODES]; /* by LM_HTTPD_CODES, then "other" */
	_Atomic uint64_t refused[LM_HTTP_REFUSE_COUNT];
	_Atomic uint64_t connections_total;
	_Atomic int64_t connections; /* open now */
};
/* The code counted at index i of responses[] (0 for "other"). */
uint16_t lm_httpd_code_at(int i);

struct httpd;
struct lm_httpd {
	struct httpd *srv;
};

/* Holds a server for "host:port" or "http://host:port"; limits NULL: the defaults. */
int lm_httpd_init(struct lm_httpd *h, const char *addr, lm_diag *d);
int lm_httpd_init_limits(struct lm_httpd *h, const char *addr, const struct lm_httpd_limits *lim,
			 lm_diag *d);

/* A route. method NULL accepts any. A path ending in '/' is a prefix: it matches every path
 * below it (lm_httpd_subpath gives the rest). max_body > 0 takes a request body up to that
 * many bytes (413 past it); 0 takes none. json: a POST must say Content-Type:
 * application/json (415 otherwise). */
struct lm_httpd_route {
	const char *method;
	const char *path;
	void (*cb)(nng_aio *aio);
	void *data;
	size_t max_body;
	bool json;
};
int lm_httpd_add(struct lm_httpd *h, const struct lm_httpd_route *r, lm_diag *d);
/* lm_httpd_add without the JSON requirement. */
int lm_httpd_route(struct lm_httpd *h, const char *method, const char *path, void (*cb)(nng_aio *),
		   void *data, size_t max_body, lm_diag *d);
int lm_httpd_start(struct lm_httpd *h, lm_diag *d);
/* The TCP port it listens on (after start): the given one, or the one the system chose for 0. */
int lm_httpd_port(const struct lm_httpd *h);
/* Stops listening, closes every connection (a request in a handler sees lm_httpd_on_gone) and
 * waits until every handler has replied and every stream has ended; then frees. Harmless on a
 * zeroed struct and twice. */
void lm_httpd_fini(struct lm_httpd *h);
/* The server's counters (live; NULL before init). */
const struct lm_httpd_stats *lm_httpd_stats(const struct lm_httpd *h);
/* Counts a refusal a handler decided (lm_httpd_refuse does it for its reply). */
void lm_httpd_count_refusal(const struct lm_httpd *h, enum lm_http_refusal r);

/* ------------------------------------------------------------------ in a handler */

/* The route's data. */
void *lm_httpd_data(nng_aio *aio);
/* The request: method ("GET"; HEAD is "HEAD"), path (without the query), query (after '?',
 * or NULL), a header's value (case-insensitive name; NULL when absent). */
const char *lm_httpd_method(nng_aio *aio);
const char *lm_httpd_path(nng_aio *aio);
const char *lm_httpd_query(nng_aio *aio);
const char *lm_httpd_header(nng_aio *aio, const char *name);
/* For a prefix route: what follows the prefix, percent-decoded; NULL when it holds a NUL (or
 * for another route). Valid until the reply. */
const char *lm_httpd_subpath(nng_aio *aio);
/* The body (decoded from chunks) and its length; any bytes, NUL included, not terminated.
 * Valid until the reply. */
void lm_httpd_body(nng_aio *aio, const char **body, size_t *len);
/* The value of "Authorization: Bearer <token>" equals token (constant-time compare). true
 * when token is NULL or empty (no authentication configured). */
bool lm_httpd_authorized(nng_aio *aio, const char *token);

/* Calls fn(arg) once if the client goes away (the connection reads end of file or fails)
 * before the reply. fn runs under the connection's lock, on an NNG thread or on this one if
 * the client is gone already: it must be quick and must not call into this request; the reply
 * functions wait for it, and it is never called after they return. */
void lm_httpd_on_gone(nng_aio *aio, void (*fn)(void *arg), void *arg);

/* An extra response header (before the reply): "Retry-After", "5". Copied. */
void lm_httpd_add_header(nng_aio *aio, const char *name, const char *value);

/* Replies and finishes the request. Bodies are copied. */
void lm_httpd_reply(nng_aio *aio, uint16_t status, const char *content_type, const void *body,
		    size_t len);
/* Replies with doc as JSON and frees doc (doc NULL means out of memory: 500). */
void lm_httpd_reply_json(nng_aio *aio, uint16_t status, cJSON *doc);
/* {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}: type is
 * "invalid_request_error", "authentication_error", "server_error", ... param may be NULL. */
void lm_httpd_reply_error(nng_aio *aio, uint16_t status, const char *type, const char *param,
			  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* lm_httpd_reply_error, counted as refusal r. */
void lm_httpd_refuse(nng_aio *aio, enum lm_http_refusal r, uint16_t status, const char *type,
		     const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The same error document as a string the caller frees (for streams). */
char *lm_httpd_error_json(const char *type, const char *param, const char *message);

/* A response of unknown length: status 200, content_type, then whatever is written (chunked
 * on HTTP/1.1, so the connection stays usable; ended by the close when the client said
 * Connection: close or speaks HTTP/1.0). Finishes the request
 * like a reply; the stream is the caller's until lm_httpd_stream_end. gone(arg), when not
 * NULL, is called once if the client goes away first, as for lm_httpd_on_gone. NULL when out
 * of memory: then reply with an error instead. */
struct lm_http_stream;
struct lm_http_stream *lm_httpd_stream(nng_aio *aio, const char *content_type,
				       void (*gone)(void *arg), void *arg);
/* Queues a copy of data (any thread, never blocks). false once the client is gone, out of
 * memory, or when the client reads so slowly that LM_HTTPD_STREAM_BACKLOG bytes wait (it is
 * then treated as gone). */
bool lm_httpd_stream_write(struct lm_http_stream *s, const void *data, size_t len);
/* Ends the response after what was queued and gives the stream back; gone is not called once
 * this returns. Exactly once per stream. */
void lm_httpd_stream_end(struct lm_http_stream *s);

#endif

/* The HTTP server (common/wire/httpd.h) and its parser (common/wire/http_parse.h): a real
 * server on 127.0.0.1 and raw TCP clients, so every byte on the wire is the test's own. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/wire/http_parse.h"
#include "common/wire/httpd.h"

/* ------------------------------------------------------------------ the parser */

static int parse(const char *text, struct lm_http_head *h, struct lm_http_perr *e)
{
	static char buf[8192];
	size_t n = strlen(text);
	memcpy(buf, text, n + 1);
	return lm_http_parse_head(buf, n, 4096, h, e);
}

Test(http_parse, request_line_fields_and_framing)
{
	struct lm_http_head h;
	struct lm_http_perr e;
	cr_assert_eq(parse("\r\nPOST /v1/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length:  12 \r\n"
			   "X-A: b c\r\nConnection: keep-alive, close\r\n\r\nBODY",
			   &h, &e),
		     1);
	cr_assert_str_eq(h.method, "POST");
	cr_assert_str_eq(h.path, "/v1/x");
	cr_assert_str_eq(h.query, "a=1");
	cr_assert_eq(h.minor, 1);
	cr_assert(h.has_length && h.content_length == 12);
	cr_assert_str_eq(lm_http_field(&h, "x-a"), "b c");
	cr_assert(h.close);
	cr_assert_eq(h.head_len,
		     strlen("\r\nPOST /v1/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length:  "
			    "12 \r\nX-A: b c\r\nConnection: keep-alive, close\r\n\r\n"));
	/* Bare LF lines; HTTP/1.0 closes unless it asks to keep alive; absolute-form targets. */
	cr_assert_eq(parse("GET http://h:1/p/q HTTP/1.0\n\n", &h, &e), 1);
	cr_assert_str_eq(h.path, "/p/q");
	cr_assert(h.close && h.minor == 0);
	cr_assert_eq(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h, &e), 1);
	cr_assert(!h.close);
	cr_assert_eq(parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
			   "Expect: 100-Continue\r\n\r\n",
			   &h, &e),
		     1);
	cr_assert(h.chunked && h.expect_continue && !h.has_length);
	cr_assert_eq(parse("GET / HTTP/1.1\r\nHost: h\r\n", &h, &e), 0, "incomplete head");
}

Test(http_parse, refusals)
{
	static const struct {
		const char *text;
		uint16_t status;
	} cases[] = {
		{"GET / HTTP/1.1\r\n\r\n", 400}, /* no Host */
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"GET / FTP/1.0\r\n\r\n", 400},
		{"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"GET nopath HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		 400},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
		 400},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: "
		 "3\r\n\r\n",
		 400},
		{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n", 417},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct lm_http_head h;
		struct lm_http_perr e;
		cr_assert_eq(parse(cases[i].text, &h, &e), -1, "case %zu accepted", i);
		cr_assert_eq(e.status, cases[i].status, "case %zu: %u (%s)", i, e.status, e.msg);
		cr_assert(e.msg[0] != '\0');
	}
	/* Too many fields, and a head that does not end within the limit. */
	char big[8192] = "GET / HTTP/1.1\r\nHost: a\r\n";
	for (int i = 0; i < LM_HTTP_MAX_HEADERS; i++)
		strcat(big, "X: y\r\n");
	strcat(big, "\r\n");
	struct lm_http_head h;
	struct lm_http_perr e;
	cr_assert_eq(parse(big, &h, &e), -1);
	cr_assert_eq(e.status, 431);
	char endless[5000];
	memset(endless, 'a', sizeof endless);
	memcpy(endless, "GET /", 5);
	endless[sizeof endless - 1] = '\0';
	cr_assert_eq(parse(endless, &h, &e), -1);
	cr_assert_eq(e.status, 431);
}

/* Feeds a chunked body one byte at a time, as the slowest client would send it. */
static int feed_bytewise(const char *raw, char *out, size_t max_body, size_t *n_out, size_t *used)
{
	size_t n = strlen(raw);
	char *body = malloc(n + 1);
	struct lm_http_chunked c = {0};
	struct lm_http_perr e;
	int rc = 0;
	for (size_t avail = 1; avail <= n && rc == 0; avail++) {
		body[avail - 1] = raw[avail - 1];
		rc = lm_http_chunked_feed(&c, body, avail, max_body, &e);
	}
	if (rc == 1) {
		memcpy(out, body, c.out);
		*n_out = c.out;
		*used = c.in;
	} else if (rc < 0) {
		*n_out = e.status;
	}
	free(body);
	return rc;
}

Test(http_parse, chunked_bodies)
{
	char out[256];
	size_t n = 0, used = 0;
	const char *raw = "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n"
			  "Trailer: x\r\n\r\nNEXT";
	cr_assert_eq(feed_bytewise(raw, out, 100, &n, &used), 1);
	cr_assert_eq(n, 23);
	cr_assert(memcmp(out, "Wikipedia in\r\n\r\nchunks.", 23) == 0);
	cr_assert_eq(used, strlen(raw) - 4, "the bytes after the body are the next request's");
	cr_assert_eq(feed_bytewise("3\nabc\n0\n\n", out, 100, &n, &used), 1, "bare LF lines");
	cr_assert_eq(n, 3);
	cr_assert_eq(feed_bytewise("2\r\nabc\r\n0\r\n\r\n", out, 100, &n, &used), -1,
		     "a long chunk");
	cr_assert_eq(feed_bytewise("zz\r\n", out, 100, &n, &used), -1);
	cr_assert_eq(n, 400);
	cr_assert_eq(feed_bytewise("40\r\n", out, 10, &n, &used), -1, "past max_body");
	cr_assert_eq(n, 413);
	cr_assert_eq(feed_bytewise("8\r\n12345678\r\n8\r\n12345678\r\n", out, 10, &n, &used), -1);
	cr_assert_eq(n, 413);
}

/* ------------------------------------------------------------------ a server and clients */

static struct lm_httpd srv;
static int port;
static pthread_mutex_t tmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tcv; /* on the monotonic clock (lm_cond_init, in start) */
static pthread_once_t tcv_once = PTHREAD_ONCE_INIT;
static nng_aio *held;
static atomic_int gone_calls;

/* How long a test waits for the server to do something before it fails, rather than hanging
 * until the suite's timeout with no word of what it was waiting for. */
#define WAIT_MS 10000

static void tcv_init(void)
{
	lm_cond_init(&tcv);
}

static void h_get(nng_aio *aio)
{
	lm_httpd_add_header(aio, "X-Test", "yes");
	lm_httpd_reply(aio, 200, "text/plain", "ok\n", 3);
}

static void h_echo(nng_aio *aio)
{
	const char *b;
	size_t n;
	lm_httpd_body(aio, &b, &n);
	lm_httpd_reply(aio, 200, "application/octet-stream", b, n);
}

static void h_sub(nng_aio *aio)
{
	const char *s = lm_httpd_subpath(aio);
	lm_httpd_reply(aio, 200, "text/plain", s != NULL ? s : "(null)", s != NULL ? strlen(s) : 6);
}

static void on_gone(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&tmu);
	atomic_fetch_add(&gone_calls, 1);
	pthread_cond_broadcast(&tcv);
	pthread_mutex_unlock(&tmu);
}

/* Keeps the request for the test to answer. */
static void h_hold(nng_aio *aio)
{
	lm_httpd_on_gone(aio, on_gone, NULL);
	pthread_mutex_lock(&tmu);
	held = aio;
	pthread_cond_broadcast(&tcv);
	pthread_mutex_unlock(&tmu);
}

static void h_stream(nng_aio *aio)
{
	struct lm_http_stream *st = lm_httpd_stream(aio, "text/event-stream", NULL, NULL);
	cr_assert(st != NULL);
	cr_assert(lm_httpd_stream_write(st, "a", 1));
	cr_assert(lm_httpd_stream_write(st, "bb", 2));
	cr_assert(lm_httpd_stream_write(st, "ccc", 3));
	lm_httpd_stream_end(st);
}

static void start(const struct lm_httpd_limits *lim)
{
	lm_diag d = {{0}};
	pthread_once(&tcv_once, tcv_init);
	atomic_store(&gone_calls, 0);
	held = NULL;
	cr_assert_eq(lm_httpd_init_limits(&srv, "127.0.0.1:0", lim, &d), 0, "%s", d.msg);
	const struct lm_httpd_route routes[] = {
		{.method = "GET", .path = "/get", .cb = h_get},
		{.method = "POST", .path = "/echo", .cb = h_echo, .max_body = 64},
		{.method = "POST", .path = "/json", .cb = h_echo, .max_body = 64, .json = true},
		{.method = "GET", .path = "/hold", .cb = h_hold},
		{.method = "GET", .path = "/stream", .cb = h_stream},
		{.method = "GET", .path = "/items/", .cb = h_sub},
	};
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		cr_assert_eq(lm_httpd_add(&srv, &routes[i], &d), 0, "%s", d.msg);
	cr_assert_eq(lm_httpd_start(&srv, &d), 0, "%s", d.msg);
	port = lm_httpd_port(&srv);
	cr_assert(port > 0);
}

static int dial(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
		  strerror(errno));
	struct timeval tv = {.tv_sec = 10};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

static void say_n(int fd, const char *s, size_t n)
{
	cr_assert_eq(write(fd, s, n), (ssize_t)n);
}

static void say(int fd, const char *s)
{
	say_n(fd, s, strlen(s));
}

/* A literal that holds NUL bytes, sent whole. */
#define SAY_LIT(fd, lit) say_n((fd), (lit), sizeof(lit) - 1)

struct resp {
	int status;
	char head[4096];
	char body[8192];
	size_t len;
};

/* Reads until `n` bytes or the end; false at end of file or after the 10 s receive timeout. */
static size_t get_bytes(int fd, char *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, p + got, n - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	return got;
}

static bool get_line(int fd, char *p, size_t cap)
{
	size_t i = 0;
	while (i + 1 < cap && get_bytes(fd, p + i, 1) == 1)
		if (p[i++] == '\n')
			break;
	p[i] = '\0';
	return i > 0;
}

/* One response: the head, then a body by Content-Length or chunks (none for HEAD). */
static bool get_resp_ex(int fd, struct resp *r, bool head_only)
{
	memset(r, 0, sizeof *r);
	size_t at = 0;
	char line[1024];
	while (get_line(fd, line, sizeof line)) {
		size_t n = strlen(line);
		if (at + n < sizeof r->head) {
			memcpy(r->head + at, line, n + 1);
			at += n;
		}
		if (strcmp(line, "\r\n") == 0)
			break;
	}
	if (sscanf(r->head, "HTTP/1.1 %d", &r->status) != 1)
		return false;
	const char *cl = strcasestr(r->head, "\r\nContent-Length: ");
	if (head_only) {
		/* no body */
	} else if (cl != NULL) {
		r->len = strtoul(cl + 18, NULL, 10);
		cr_assert(r->len < sizeof r->body);
		cr_assert_eq(get_bytes(fd, r->body, r->len), r->len);
	} else if (strcasestr(r->head, "Transfer-Encoding: chunked") != NULL) {
		for (;;) {
			cr_assert(get_line(fd, line, sizeof line));
			size_t k = strtoul(line, NULL, 16);
			if (k == 0) {
				cr_assert(get_line(fd, line, sizeof line));
				break;
			}
			cr_assert_eq(get_bytes(fd, r->body + r->len, k), k);
			r->len += k;
			cr_assert(get_line(fd, line, sizeof line));
		}
	}
	return true;
}

static bool get_resp(int fd, struct resp *r)
{
	return get_resp_ex(fd, r, false);
}

/* The JSON error body: its message is a non-empty string. */
static void assert_json_error(const struct resp *r)
{
	cr_assert(strcasestr(r->head, "Content-Type: application/json") != NULL, "%s", r->head);
	cJSON *o = cJSON_ParseWithLength(r->body, r->len);
	cr_assert(o != NULL, "not JSON: %.*s", (int)r->len, r->body);
	const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "message");
	cr_assert(cJSON_IsString(m) && m->valuestring[0] != '\0');
	cJSON_Delete(o);
}

static bool at_eof(int fd)
{
	char c;
	return read(fd, &c, 1) == 0;
}

static struct resp roundtrip(const char *req)
{
	struct resp r;
	int fd = dial();
	say(fd, req);
	cr_assert(get_resp(fd, &r));
	close(fd);
	return r;
}

TestSuite(httpd, .timeout = 60);

Test(httpd, keep_alive_pipelining_and_head)
{
	start(NULL);
	int fd = dial();
	struct resp r;
	say(fd, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert_eq(r.status, 200);
	cr_assert(r.len == 3 && memcmp(r.body, "ok\n", 3) == 0);
	cr_assert(strstr(r.head, "X-Test: yes\r\n") != NULL);
	/* Two requests in one write: two responses, in order, on the same connection. */
	SAY_LIT(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nab\0"
		    "GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert(r.status == 200 && r.len == 3 && memcmp(r.body, "ab", 2) == 0);
	cr_assert(get_resp(fd, &r));
	cr_assert(r.status == 200 && r.len == 3);
	say(fd, "HEAD /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert(get_resp_ex(fd, &r, true));
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.head, "Content-Length: 3\r\n") != NULL);
	say(fd, "GET /get HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert(strstr(r.head, "Connection: close\r\n") != NULL);
	cr_assert(at_eof(fd), "the server closes after Connection: close");
	close(fd);
	lm_httpd_fini(&srv);
}

Test(httpd, errors_are_json)
{
	start(NULL);
	struct resp r = roundtrip("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 404);
	assert_json_error(&r);
	r = roundtrip("DELETE /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 405);
	assert_json_error(&r);
	cr_assert(strstr(r.head, "Allow: GET, HEAD, OPTIONS\r\n") != NULL, "%s", r.head);
	r = roundtrip("GET /get HTTP/1.1\r\n\r\n");
	cr_assert_eq(r.status, 400, "no Host");
	assert_json_error(&r);
	r = roundtrip("GET /get HTTP/3\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 505);
	assert_json_error(&r);
	r = roundtrip("POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
	cr_assert_eq(r.status, 200, "a JSON route without Content-Type takes the body as JSON");
	r = roundtrip("POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: "
		      "application/x-www-form-urlencoded\r\nContent-Length: 2\r\n\r\n{}");
	cr_assert_eq(r.status, 200, "curl -d's own type");
	r = roundtrip("POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
		      "Content-Length: 2\r\n\r\n{}");
	cr_assert_eq(r.status, 415, "another type");
	assert_json_error(&r);
	r = roundtrip("POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: Application/JSON; "
		      "charset=utf-8\r\nContent-Length: 2\r\n\r\n{}");
	cr_assert_eq(r.status, 200);
	r = roundtrip("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65\r\n\r\n");
	cr_assert_eq(r.status, 413, "Content-Length past max_body, refused before the body");
	assert_json_error(&r);
	r = roundtrip("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "41\r\n");
	cr_assert_eq(r.status, 413, "a chunk past max_body");
	r = roundtrip("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: deflate\r\n\r\n");
	cr_assert_eq(r.status, 501);
	r = roundtrip("GET /get HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx");
	cr_assert_eq(r.status, 413, "a body where the route takes none");
	const struct lm_httpd_stats *st = lm_httpd_stats(&srv);
	cr_assert(atomic_load(&st->refused[LM_HTTP_REFUSE_NOT_FOUND]) == 1);
	cr_assert(atomic_load(&st->refused[LM_HTTP_REFUSE_MEDIA_TYPE]) == 1);
	lm_httpd_fini(&srv);
}

Test(httpd, chunked_body_and_continue)
{
	start(NULL);
	static const char req[] = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
				  "\r\n3\r\na\0b\r\n2;x=y\r\ncd\r\n0\r\n\r\n";
	struct resp r;
	int fd = dial();
	say_n(fd, req, sizeof req - 1);
	cr_assert(get_resp(fd, &r));
	close(fd);
	cr_assert_eq(r.status, 200);
	cr_assert(r.len == 5 && memcmp(r.body, "a\0bcd", 5) == 0, "the NUL stays in the body");
	/* Expect: 100-continue: the interim answer comes before the body is sent. */
	fd = dial();
	say(fd,
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
	char line[256];
	cr_assert(get_line(fd, line, sizeof line));
	cr_assert_str_eq(line, "HTTP/1.1 100 Continue\r\n");
	cr_assert(get_line(fd, line, sizeof line));
	cr_assert_str_eq(line, "\r\n");
	say(fd, "wxyz");
	cr_assert(get_resp(fd, &r));
	cr_assert(r.status == 200 && r.len == 4 && memcmp(r.body, "wxyz", 4) == 0);
	close(fd);
	lm_httpd_fini(&srv);
}

Test(httpd, slow_and_idle_clients_are_bounded)
{
	const struct lm_httpd_limits lim = {.read_timeout_ms = 300, .idle_timeout_ms = 300};
	start(&lim);
	/* A head that never ends gets 408 and the connection closes. */
	int fd = dial();
	say(fd, "GET /get HTTP/1.1\r\nHo");
	struct resp r;
	cr_assert(get_resp(fd, &r));
	cr_assert_eq(r.status, 408);
	assert_json_error(&r);
	cr_assert(at_eof(fd));
	close(fd);
	/* A body that stops arriving, too. */
	fd = dial();
	say(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
	cr_assert(get_resp(fd, &r));
	cr_assert_eq(r.status, 408);
	close(fd);
	/* A connection that sends nothing is closed without a word. */
	fd = dial();
	cr_assert(at_eof(fd));
	close(fd);
	cr_assert(atomic_load(&lm_httpd_stats(&srv)->refused[LM_HTTP_REFUSE_TIMEOUT]) == 2);
	lm_httpd_fini(&srv);
}

static void *stop_server(void *arg)
{
	lm_httpd_fini(arg);
	return NULL;
}

/* The request the /hold handler keeps, once it has been called. */
static nng_aio *wait_held(void)
{
	int64_t until = lm_now_ms() + WAIT_MS;
	pthread_mutex_lock(&tmu);
	while (held == NULL && lm_now_ms() < until)
		lm_cond_wait_until(&tcv, &tmu, until);
	nng_aio *a = held;
	held = NULL;
	pthread_mutex_unlock(&tmu);
	cr_assert(a != NULL, "the /hold handler was not called within %d ms", WAIT_MS);
	return a;
}

/* Until the on_gone callback has been called more than `calls` times. */
static void wait_gone_past(int calls)
{
	int64_t until = lm_now_ms() + WAIT_MS;
	pthread_mutex_lock(&tmu);
	while (atomic_load(&gone_calls) <= calls && lm_now_ms() < until)
		lm_cond_wait_until(&tcv, &tmu, until);
	pthread_mutex_unlock(&tmu);
	cr_assert(atomic_load(&gone_calls) > calls, "no client-gone call within %d ms", WAIT_MS);
}

/* Until the server counts `n` open connections. A client's close reaches the server's read
 * callback some time after close() returns, later still on a loaded machine. */
static void wait_connections(int64_t n)
{
	int64_t until = lm_now_ms() + WAIT_MS;
	while (atomic_load(&lm_httpd_stats(&srv)->connections) != n && lm_now_ms() < until)
		usleep(1000);
	cr_assert_eq(atomic_load(&lm_httpd_stats(&srv)->connections), n,
		     "the server holds %lld connections, not %lld, after %d ms",
		     (long long)atomic_load(&lm_httpd_stats(&srv)->connections), (long long)n,
		     WAIT_MS);
}

Test(httpd, connection_cap)
{
	const struct lm_httpd_limits lim = {.max_conns = 3};
	start(&lim);
	int idle[3], busy[3];
	struct resp r;
	for (int i = 0; i < 3; i++) {
		idle[i] = dial();
		say(idle[i], "GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
		cr_assert(get_resp(idle[i], &r));
		usleep(2000); /* so that "idle longest" is idle[0] beyond a doubt */
	}
	/* Idle connections (kept alive after a request) make room for new ones, the one idle
	 * longest first. */
	r = roundtrip("GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 200);
	cr_assert(at_eof(idle[0]), "the oldest idle connection was closed for the new one");
	for (int i = 0; i < 3; i++)
		close(idle[i]);
	/* The server must have seen those clients go first: a connection whose last response is
	 * still being written is not idle, and would be counted against the cap below. */
	wait_connections(0);
	/* Connections with a request being answered are not idle: past the cap a new one gets
	 * 503. */
	nng_aio *aios[3];
	for (int i = 0; i < 3; i++) {
		busy[i] = dial();
		say(busy[i], "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
		aios[i] = wait_held();
	}
	r = roundtrip("GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 503);
	assert_json_error(&r);
	cr_assert(atomic_load(&lm_httpd_stats(&srv)->refused[LM_HTTP_REFUSE_CONNECTIONS]) == 1);
	for (int i = 0; i < 3; i++) {
		lm_httpd_reply(aios[i], 200, "text/plain", "ok", 2);
		cr_assert(get_resp(busy[i], &r));
		cr_assert_eq(r.status, 200);
		close(busy[i]);
	}
	lm_httpd_fini(&srv);
}

/* Past the cap, every new connection gets the 503 (JSON, counted), never a reset: a burst of
 * clients that each send their request at once, while the cap's worth are busy. And a client
 * just connected, whose request has not been read yet, is not taken for idle and closed to
 * make room (it was, and its request got a reset). */
Test(httpd, past_the_cap_every_client_is_told_503)
{
	/* A long grace, so that a slow machine cannot age the fresh clients below into idle. */
	const struct lm_httpd_limits lim = {.max_conns = 4, .fresh_grace_ms = 30000};
	start(&lim);
	nng_aio *aios[4];
	int busy[4], over[12];
	for (int i = 0; i < 4; i++) {
		busy[i] = dial();
		say(busy[i], "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
		aios[i] = wait_held();
	}
	for (int i = 0; i < 12; i++) {
		over[i] = dial();
		say(over[i], "GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
	}
	struct resp r;
	for (int i = 0; i < 12; i++) {
		cr_assert(get_resp(over[i], &r), "client %d got no response (reset?)", i);
		cr_assert_eq(r.status, 503);
		assert_json_error(&r);
		cr_assert(at_eof(over[i]), "a refused connection is closed after its 503");
		close(over[i]);
	}
	cr_expect_eq(atomic_load(&lm_httpd_stats(&srv)->refused[LM_HTTP_REFUSE_CONNECTIONS]), 12);
	for (int i = 0; i < 4; i++) {
		lm_httpd_reply(aios[i], 200, "text/plain", "ok", 2);
		cr_assert(get_resp(busy[i], &r));
		cr_assert_eq(r.status, 200);
		close(busy[i]);
	}
	wait_connections(0);
	/* Four clients connect; a fifth comes before any of them has said a word. The four are
	 * not idle yet: the fifth is told 503, and each of the four is then served. */
	int fresh[4];
	for (int i = 0; i < 4; i++)
		fresh[i] = dial();
	wait_connections(4);
	r = roundtrip("GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_expect_eq(r.status, 503);
	for (int i = 0; i < 4; i++) {
		say(fresh[i], "GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
		cr_assert(get_resp(fresh[i], &r), "fresh client %d was closed", i);
		cr_expect_eq(r.status, 200);
		close(fresh[i]);
	}
	lm_httpd_fini(&srv);
}

Test(httpd, a_client_gone_is_reported)
{
	start(NULL);
	int fd = dial();
	say(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
	nng_aio *aio = wait_held();
	close(fd);
	wait_gone_past(0);
	lm_httpd_reply(aio, 200, "text/plain", "late", 4);
	cr_assert_eq(atomic_load(&gone_calls), 1);
	/* Answered before the client leaves: no call. */
	fd = dial();
	say(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
	aio = wait_held();
	lm_httpd_reply(aio, 200, "text/plain", "now", 3);
	struct resp r;
	cr_assert(get_resp(fd, &r));
	cr_assert(r.status == 200 && r.len == 3);
	close(fd);
	/* A request still in its handler when the server stops sees the client gone, and the
	 * server waits for its reply. */
	fd = dial();
	say(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
	aio = wait_held();
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, stop_server, &srv), 0);
	wait_gone_past(1);
	lm_httpd_reply(aio, 200, "text/plain", "bye", 3);
	pthread_join(t, NULL);
	close(fd);
}

Test(httpd, streams_and_subpaths)
{
	start(NULL);
	int fd = dial();
	struct resp r;
	say(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.head, "Transfer-Encoding: chunked\r\n") != NULL);
	cr_assert(r.len == 6 && memcmp(r.body, "abbccc", 6) == 0);
	/* The connection is reusable after a stream. */
	say(fd, "GET /items/a%2Fb%41 HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert(r.len == 4 && memcmp(r.body, "a/bA", 4) == 0);
	say(fd, "GET /items/a%00b HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert(r.len == 6 && memcmp(r.body, "(null)", 6) == 0, "a NUL in a path is refused");
	close(fd);
	/* HTTP/1.0: the stream ends with the connection. */
	fd = dial();
	say(fd, "GET /stream HTTP/1.0\r\n\r\n");
	cr_assert(get_resp(fd, &r));
	cr_assert(strstr(r.head, "Connection: close\r\n") != NULL);
	char rest[16];
	cr_assert_eq(get_bytes(fd, rest, sizeof rest), 6);
	cr_assert(memcmp(rest, "abbccc", 6) == 0);
	close(fd);
	lm_httpd_fini(&srv);
}

Test(httpd, cors)
{
	const char *const origins[] = {"http://allowed.example:8000"};
	const struct lm_httpd_limits lim = {.cors_origins = origins, .n_cors = 1};
	start(&lim);
	struct resp r =
		roundtrip("GET /get HTTP/1.1\r\nHost: x\r\nOrigin: http://allowed.example:8000"
			  "\r\n\r\n");
	cr_assert_eq(r.status, 200);
	cr_assert(strstr(r.head, "Access-Control-Allow-Origin: http://allowed.example:8000\r\n"));
	r = roundtrip("OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://allowed.example:8000\r\n"
		      "Access-Control-Request-Method: POST\r\n"
		      "Access-Control-Request-Headers: content-type\r\n\r\n");
	cr_assert_eq(r.status, 204);
	cr_assert(strstr(r.head, "Access-Control-Allow-Methods: POST\r\n"), "%s", r.head);
	cr_assert(strstr(r.head, "Access-Control-Allow-Headers: content-type\r\n"), "%s", r.head);
	cr_assert(strstr(r.head, "Access-Control-Allow-Origin: http://allowed.example:8000\r\n"));
	cr_assert(strstr(r.head, "Access-Control-Expose-Headers: Retry-After\r\n"));
	/* A browser client's own headers (the openai SDK's) are allowed as asked; a list that is
	 * not one of header names gets the two the API reads. */
	r = roundtrip("OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://allowed.example:8000\r\n"
		      "Access-Control-Request-Method: POST\r\n"
		      "Access-Control-Request-Headers: authorization, content-type, "
		      "x-stainless-arch, x-stainless-lang\r\n\r\n");
	cr_assert_eq(r.status, 204);
	cr_assert(strstr(r.head, "Access-Control-Allow-Headers: authorization, content-type, "
				 "x-stainless-arch, x-stainless-lang\r\n"),
		  "%s", r.head);
	r = roundtrip("OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://allowed.example:8000\r\n"
		      "Access-Control-Request-Method: POST\r\n"
		      "Access-Control-Request-Headers: x-a: b\r\n\r\n");
	cr_assert_eq(r.status, 204);
	cr_assert(strstr(r.head, "Access-Control-Allow-Headers: Authorization, Content-Type\r\n"),
		  "%s", r.head);
	/* Another origin, even one naming this very host, runs nothing. */
	r = roundtrip("POST /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://x\r\n"
		      "Content-Length: 2\r\n\r\nhi");
	cr_assert_eq(r.status, 403);
	assert_json_error(&r);
	cr_assert(strstr(r.head, "Access-Control-Allow-Origin") == NULL);
	r = roundtrip("OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n"
		      "Access-Control-Request-Method: POST\r\n\r\n");
	cr_assert_eq(r.status, 403);
	cr_assert(atomic_load(&lm_httpd_stats(&srv)->refused[LM_HTTP_REFUSE_ORIGIN]) == 2);
	lm_httpd_fini(&srv);
}

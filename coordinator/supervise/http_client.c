#include "coordinator/supervise/http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/base/buf.h"

void lm_http_resp_fini(struct lm_http_resp *r)
{
	if (r != NULL) {
		free(r->body);
		r->body = NULL;
		r->len = 0;
	}
}

/* Connects fd to a within timeout_ms: a blocking connect() to a host that drops packets would
 * wait for the kernel's retries (minutes). 0, or an errno value. */
static int http_connect_within(int fd, const struct addrinfo *a, int timeout_ms)
{
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
		return errno;
	int err = 0;
	if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
		err = errno;
		if (err == EINPROGRESS) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			int rv = poll(&pfd, 1, timeout_ms);
			socklen_t len = sizeof err;
			if (rv == 0)
				err = ETIMEDOUT;
			else if (rv < 0)
				err = errno;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
				err = errno;
		}
	}
	if (err == 0 && fcntl(fd, F_SETFL, flags) != 0)
		err = errno;
	return err;
}

static int http_connect(const char *url, int timeout_ms, char *host, size_t hcap, lm_diag *d)
{
	char port[16] = "80";
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	const char *end = p + strcspn(p, "/");
	const char *colon = NULL;
	if (*p == '[') { /* [v6]:port */
		const char *rb = memchr(p, ']', (size_t)(end - p));
		if (rb == NULL)
			return lm_fail(d, LM_EINVAL, "bad URL '%s'", url);
		snprintf(host, hcap, "%.*s", (int)(rb - p - 1), p + 1);
		colon = rb[1] == ':' ? rb + 1 : NULL;
	} else {
		colon = memchr(p, ':', (size_t)(end - p));
		snprintf(host, hcap, "%.*s", (int)((colon ? colon : end) - p), p);
	}
	if (colon != NULL)
		snprintf(port, sizeof port, "%.*s", (int)(end - colon - 1), colon + 1);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	int rv = getaddrinfo(host, port, &hints, &ai);
	if (rv != 0)
		return lm_fail(d, LM_EINVAL, "%s: %s", url, gai_strerror(rv));
	int fd = -1, err = 0;
	for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			err = errno;
		} else if ((err = http_connect_within(fd, a, timeout_ms)) != 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return lm_fail(d, LM_EUNAVAILABLE, "cannot connect to %s: %s", url, strerror(err));
	return fd;
}

static int http_send_all(int fd, const char *p, size_t n, lm_diag *d)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return lm_fail(d, LM_EIO, "send: %s", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads once with a timeout; 0 at end of stream. */
static ssize_t http_read(int fd, char *buf, size_t cap, int timeout_ms, lm_diag *d)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int rv = poll(&pfd, 1, timeout_ms);
	if (rv == 0)
		return lm_fail(d, LM_ETIMEOUT, "no answer within %d ms", timeout_ms);
	if (rv < 0)
		return lm_fail(d, LM_EIO, "poll: %s", strerror(errno));
	ssize_t n = recv(fd, buf, cap, 0);
	if (n < 0)
		return lm_fail(d, LM_EIO, "recv: %s", strerror(errno));
	return n;
}

static int http_exchange(const char *url, const char *method, const char *path, const char *token,
			 const char *body, size_t len, int timeout_ms,
			 void (*on_line)(void *, const char *), void *arg,
			 struct lm_http_resp *resp, lm_diag *d)
{
	char host[256], head[1024];
	memset(resp, 0, sizeof *resp);
	int fd = http_connect(url, timeout_ms, host, sizeof host, d);
	if (fd < 0)
		return fd;
	int n = snprintf(head, sizeof head,
			 "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n%s%s%s\r\n",
			 method, path, host, len, token ? "Authorization: Bearer " : "",
			 token ? token : "", token ? "\r\n" : "");
	int rc = http_send_all(fd, head, (size_t)n, d);
	if (rc == 0 && len > 0)
		rc = http_send_all(fd, body, len, d);
	struct lm_buf in = {0};
	size_t header_end = 0, content_length = SIZE_MAX, consumed = 0;
	bool chunked = false;
	char buf[16384];
	while (rc == 0) {
		ssize_t r = http_read(fd, buf, sizeof buf, timeout_ms, d);
		if (r < 0) {
			rc = (int)r;
			break;
		}
		if (r == 0)
			break;
		if (lm_buf_add(&in, buf, (size_t)r) != 0) {
			rc = lm_fail(d, LM_ENOMEM, "out of memory");
			break;
		}
		if (header_end == 0) {
			char *e = strstr(in.p, "\r\n\r\n");
			if (e == NULL)
				continue;
			header_end = (size_t)(e - in.p) + 4;
			if (sscanf(in.p, "HTTP/%*s %d", &resp->status) != 1) {
				rc = lm_fail(d, LM_EPROTO, "%s: not an HTTP response", url);
				break;
			}
			for (char *h = strstr(in.p, "\r\n"); h != NULL && h < e;
			     h = strstr(h + 2, "\r\n")) {
				if (strncasecmp(h + 2, "Content-Length:", 15) == 0)
					content_length = strtoull(h + 17, NULL, 10);
				if (strncasecmp(h + 2, "Transfer-Encoding: chunked", 26) == 0)
					chunked = true;
			}
			consumed = header_end;
		}
		if (on_line != NULL && resp->status / 100 == 2 && !chunked) {
			/* Hand over every complete line. */
			for (;;) {
				char *nl = memchr(in.p + consumed, '\n', in.len - consumed);
				if (nl == NULL)
					break;
				*nl = '\0';
				if (nl > in.p + consumed && nl[-1] == '\r')
					nl[-1] = '\0';
				on_line(arg, in.p + consumed);
				consumed = (size_t)(nl - in.p) + 1;
			}
		}
		if (content_length != SIZE_MAX && in.len - header_end >= content_length)
			break;
	}
	close(fd);
	if (rc == 0 && header_end == 0)
		rc = lm_fail(d, LM_EPROTO, "%s closed the connection without an answer", url);
	if (rc == 0) {
		size_t blen = in.len - header_end;
		if (content_length != SIZE_MAX && content_length < blen)
			blen = content_length;
		resp->body = malloc(blen + 1);
		if (resp->body == NULL) {
			rc = lm_fail(d, LM_ENOMEM, "out of memory");
		} else {
			memcpy(resp->body, in.p + header_end, blen);
			resp->body[blen] = '\0';
			resp->len = blen;
		}
	}
	lm_buf_fini(&in);
	return rc;
}

int lm_http_request(const char *url, const char *method, const char *path, const char *token,
		    const char *body, size_t len, int timeout_ms, struct lm_http_resp *resp,
		    lm_diag *d)
{
	return http_exchange(url, method, path, token, body, len, timeout_ms, NULL, NULL, resp, d);
}

int lm_http_stream(const char *url, const char *path, const char *token, const char *body,
		   size_t len, int timeout_ms, void (*on_line)(void *arg, const char *line),
		   void *arg, struct lm_http_resp *resp, lm_diag *d)
{
	return http_exchange(url, "POST", path, token, body, len, timeout_ms, on_line, arg, resp,
			     d);
}

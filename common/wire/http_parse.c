/* http_parse.c — HTTP/1.x request heads and chunked bodies. See http_parse.h. */
#include "common/wire/http_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Longest chunk-size line, extensions included, and trailer section a chunked body may have. */
#define HTTP_CHUNK_LINE_MAX 1024
#define HTTP_TRAILER_MAX    8192

static int http_refuse(struct lm_http_perr *e, uint16_t status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int http_refuse(struct lm_http_perr *e, uint16_t status, const char *fmt, ...)
{
	va_list ap;
	e->status = status;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
}

/* RFC 9110 5.6.2: token characters. */
static bool http_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Where the head ends: the index just past its empty line, or 0 when it has not arrived. */
static size_t http_head_end(const char *buf, size_t from, size_t len)
{
	for (size_t i = from; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* The request line, NUL-terminated in place: method, target, version. */
static int http_request_line(char *line, struct lm_http_head *h, struct lm_http_perr *e)
{
	char *p = line;
	h->method = p;
	while (http_tchar((unsigned char)*p))
		p++;
	if (p == line || *p != ' ')
		return http_refuse(e, 400, "malformed request line");
	*p++ = '\0';
	char *target = p;
	while ((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
		p++;
	if (p == target || *p != ' ')
		return http_refuse(e, 400, "malformed request target");
	*p++ = '\0';
	const char *v = p;
	if (strcmp(v, "HTTP/1.1") == 0) {
		h->minor = 1;
	} else if (strcmp(v, "HTTP/1.0") == 0) {
		h->minor = 0;
	} else if (strncmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' &&
		   (v[6] == '\0' || (v[6] == '.' && v[7] >= '0' && v[7] <= '9' && v[8] == '\0'))) {
		return http_refuse(e, 505, "HTTP version %s is not supported (HTTP/1.1 is)", v);
	} else {
		return http_refuse(e, 400, "malformed HTTP version");
	}

	if (strcmp(target, "*") == 0) {
		h->path = "/";
		h->query = NULL;
		return 0;
	}
	if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
		char *slash = strchr(strchr(target, ':') + 3, '/');
		if (slash == NULL) {
			h->path = "/";
			h->query = NULL;
			return 0;
		}
		target = slash;
	}
	if (target[0] != '/')
		return http_refuse(e, 400, "the request target must be a path");
	char *q = strchr(target, '?');
	if (q != NULL)
		*q++ = '\0';
	h->path = target;
	h->query = q;
	return 0;
}

/* One header field line "name: value", NUL-terminated in place. */
static int http_field_line(char *line, struct lm_http_head *h, struct lm_http_perr *e)
{
	if (line[0] == ' ' || line[0] == '\t')
		return http_refuse(e, 400, "obsolete line folding in the header");
	if (h->n_fields == LM_HTTP_MAX_HEADERS)
		return http_refuse(e, 431, "more than %d header fields", LM_HTTP_MAX_HEADERS);
	char *p = line;
	while (http_tchar((unsigned char)*p))
		p++;
	if (p == line || *p != ':')
		return http_refuse(e, 400, "malformed header field");
	*p++ = '\0';
	while (*p == ' ' || *p == '\t')
		p++;
	char *value = p, *end = p;
	for (; *p != '\0'; p++) {
		unsigned char c = (unsigned char)*p;
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return http_refuse(e, 400, "a control character in header field '%s'",
					   line);
		if (c != ' ' && c != '\t')
			end = p + 1;
	}
	*end = '\0';
	h->fields[h->n_fields++] = (struct lm_http_field){line, value};
	return 0;
}

const char *lm_http_field(const struct lm_http_head *h, const char *name)
{
	for (int i = 0; i < h->n_fields; i++)
		if (strcasecmp(h->fields[i].name, name) == 0)
			return h->fields[i].value;
	return NULL;
}

bool lm_http_has_token(const char *value, const char *token)
{
	size_t n = strlen(token);
	const char *p = value;
	while (*p != '\0') {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		const char *start = p;
		while (*p != '\0' && *p != ',')
			p++;
		const char *end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t)(end - start) == n && strncasecmp(start, token, n) == 0)
			return true;
	}
	return false;
}

static int http_content_length(const char *v, uint64_t *out, struct lm_http_perr *e)
{
	uint64_t n = 0;
	if (*v == '\0')
		return http_refuse(e, 400, "malformed Content-Length");
	for (const char *p = v; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
			return http_refuse(e, 400, "malformed Content-Length '%.40s'", v);
		n = n * 10 + (uint64_t)(*p - '0');
	}
	*out = n;
	return 0;
}

/* The fields that frame the body and the connection: Content-Length, Transfer-Encoding, Host,
 * Expect, Connection. */
static int http_framing(struct lm_http_head *h, struct lm_http_perr *e)
{
	int hosts = 0;
	bool te = false;
	for (int i = 0; i < h->n_fields; i++) {
		const char *name = h->fields[i].name, *v = h->fields[i].value;
		if (strcasecmp(name, "Content-Length") == 0) {
			uint64_t n = 0;
			if (http_content_length(v, &n, e) != 0)
				return -1;
			if (h->has_length && n != h->content_length)
				return http_refuse(e, 400, "Content-Length fields disagree");
			h->has_length = true;
			h->content_length = n;
		} else if (strcasecmp(name, "Transfer-Encoding") == 0) {
			if (te || strcasecmp(v, "chunked") != 0)
				return http_refuse(e, 501,
						   "transfer coding '%.60s' is not supported "
						   "(chunked is)",
						   v);
			te = true;
		} else if (strcasecmp(name, "Host") == 0) {
			hosts++;
		} else if (strcasecmp(name, "Expect") == 0) {
			if (strcasecmp(v, "100-continue") != 0)
				return http_refuse(e, 417, "expectation '%.60s' is not supported",
						   v);
			h->expect_continue = true;
		} else if (strcasecmp(name, "Connection") == 0) {
			if (lm_http_has_token(v, "close"))
				h->close = true;
		}
	}
	if (te && h->has_length)
		return http_refuse(e, 400, "both Content-Length and Transfer-Encoding");
	if (te && h->minor == 0)
		return http_refuse(e, 400, "Transfer-Encoding in an HTTP/1.0 request");
	h->chunked = te;
	if (h->minor == 1 && hosts != 1)
		return http_refuse(e, 400,
				   hosts == 0 ? "the Host header is missing"
					      : "more than one Host header");
	if (h->minor == 0) {
		const char *c = lm_http_field(h, "Connection");
		h->close = c == NULL || !lm_http_has_token(c, "keep-alive") || h->close;
	}
	return 0;
}

int lm_http_parse_head(char *buf, size_t len, size_t max_head, struct lm_http_head *h,
		       struct lm_http_perr *e)
{
	memset(h, 0, sizeof *h);
	size_t start = 0;
	while (start < len && start < max_head && (buf[start] == '\r' || buf[start] == '\n'))
		start++;
	size_t end = http_head_end(buf, start, len);
	if (end == 0 || end > max_head) {
		if (end == 0 && len < max_head)
			return 0;
		return http_refuse(e, 431, "the request head is larger than %zu bytes", max_head);
	}
	h->head_len = end;
	/* Lines of [start, end): the last one is empty. */
	bool first = true;
	for (size_t i = start; i < end;) {
		char *line = buf + i;
		char *nl = memchr(line, '\n', end - i);
		size_t next = (size_t)(nl - buf) + 1;
		if (nl > line && nl[-1] == '\r')
			nl--;
		if (memchr(line, '\r', (size_t)(nl - line)) != NULL ||
		    memchr(line, '\0', (size_t)(nl - line)) != NULL)
			return http_refuse(e, 400, "a stray CR or NUL in the request head");
		bool empty = nl == line;
		*nl = '\0';
		i = next;
		if (empty)
			break;
		int rc = first ? http_request_line(line, h, e) : http_field_line(line, h, e);
		if (rc != 0)
			return -1;
		first = false;
	}
	if (first)
		return http_refuse(e, 400, "no request line");
	if (http_framing(h, e) != 0)
		return -1;
	return 1;
}

/* ------------------------------------------------------------------ chunked bodies */

enum { CH_SIZE = 0, CH_DATA, CH_DATA_END, CH_TRAILER };

/* The chunk-size line body[c->in..nl): hex digits, then optional extensions after ';'. */
static int http_chunk_size(const char *line, size_t n, uint64_t *size, struct lm_http_perr *e)
{
	uint64_t v = 0;
	size_t i = 0;
	for (; i < n; i++) {
		char ch = line[i];
		int d = ch >= '0' && ch <= '9'   ? ch - '0'
			: ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
			: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
						 : -1;
		if (d < 0)
			break;
		if (v >> 56)
			return http_refuse(e, 413,
					   "a chunk larger than any body this server takes");
		v = v * 16 + (uint64_t)d;
	}
	if (i == 0)
		return http_refuse(e, 400, "malformed chunk size");
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (i < n && line[i] != ';')
		return http_refuse(e, 400, "malformed chunk size");
	*size = v;
	return 0;
}

/* The next line of body[c->in..avail): its length without CR LF in *n and the index after it
 * in *next; false when it has not fully arrived. */
static bool http_chunk_line(const char *body, size_t in, size_t avail, size_t *n, size_t *next)
{
	const char *nl = memchr(body + in, '\n', avail - in);
	if (nl == NULL)
		return false;
	*next = (size_t)(nl - body) + 1;
	*n = (size_t)(nl - (body + in));
	if (*n > 0 && nl[-1] == '\r')
		(*n)--;
	return true;
}

int lm_http_chunked_feed(struct lm_http_chunked *c, char *body, size_t avail, size_t max_body,
			 struct lm_http_perr *e)
{
	size_t n, next;
	while (c->in < avail || c->state == CH_DATA_END) {
		switch (c->state) {
		case CH_SIZE: {
			if (!http_chunk_line(body, c->in, avail, &n, &next)) {
				if (avail - c->in > HTTP_CHUNK_LINE_MAX)
					return http_refuse(e, 400, "a chunk size line too long");
				return 0;
			}
			uint64_t size = 0;
			if (http_chunk_size(body + c->in, n, &size, e) != 0)
				return -1;
			c->in = next;
			if (size == 0) {
				c->state = CH_TRAILER;
				break;
			}
			if (size > max_body - c->out)
				return http_refuse(e, 413, "the body is larger than %zu bytes",
						   max_body);
			c->left = size;
			c->state = CH_DATA;
			break;
		}
		case CH_DATA: {
			size_t k = avail - c->in;
			if (k > c->left)
				k = (size_t)c->left;
			memmove(body + c->out, body + c->in, k);
			c->out += k;
			c->in += k;
			c->left -= k;
			if (c->left == 0)
				c->state = CH_DATA_END;
			break;
		}
		case CH_DATA_END:
			if (c->in >= avail)
				return 0;
			if (body[c->in] == '\n') {
				c->in++;
			} else if (body[c->in] == '\r') {
				if (c->in + 1 >= avail)
					return 0;
				if (body[c->in + 1] != '\n')
					return http_refuse(e, 400, "a chunk not followed by CRLF");
				c->in += 2;
			} else {
				return http_refuse(e, 400, "a chunk longer than its size");
			}
			c->state = CH_SIZE;
			break;
		default: /* CH_TRAILER: fields until an empty line */
			if (!http_chunk_line(body, c->in, avail, &n, &next)) {
				if (avail - c->in > HTTP_TRAILER_MAX)
					return http_refuse(e, 400, "the trailer is too large");
				return 0;
			}
			c->in = next;
			if (n == 0)
				return 1;
			c->trailer += n;
			if (c->trailer > HTTP_TRAILER_MAX)
				return http_refuse(e, 400, "the trailer is too large");
			break;
		}
	}
	return 0;
}

const char *lm_http_reason(uint16_t status)
{
	static const struct {
		uint16_t code;
		const char *text;
	} reasons[] = {
		{100, "Continue"},
		{200, "OK"},
		{204, "No Content"},
		{400, "Bad Request"},
		{401, "Unauthorized"},
		{403, "Forbidden"},
		{404, "Not Found"},
		{405, "Method Not Allowed"},
		{408, "Request Timeout"},
		{411, "Length Required"},
		{413, "Content Too Large"},
		{415, "Unsupported Media Type"},
		{417, "Expectation Failed"},
		{429, "Too Many Requests"},
		{431, "Request Header Fields Too Large"},
		{500, "Internal Server Error"},
		{501, "Not Implemented"},
		{503, "Service Unavailable"},
		{505, "HTTP Version Not Supported"},
	};
	for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
		if (reasons[i].code == status)
			return reasons[i].text;
	return "Unknown";
}

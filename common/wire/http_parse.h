/* http_parse.h — HTTP/1.x request heads and chunked request bodies, parsed from bytes (RFC 9112).
 *
 * Pure functions over a caller's buffer: no sockets, no allocation, so the server (httpd.c), the
 * unit tests and the fuzz target (tests/fuzz/fuzz_http.c) call the same code. What they accept:
 *
 *   request-line   METHOD SP target SP HTTP/1.0 or HTTP/1.1, METHOD a token; the target an
 *                  origin-form path ("/v1/models?x"), an absolute-form URL (its path is taken),
 *                  or "*". Another HTTP version is refused with 505. Empty lines before the
 *                  request line are skipped, as RFC 9112 2.2 allows.
 *   lines          end with CRLF or a bare LF.
 *   header fields  name ":" OWS value OWS, the name a token. Obsolete line folding, white space
 *                  before the colon, a NUL or another control byte but tab in a value are
 *                  refused (400); more than LM_HTTP_MAX_HEADERS fields get 431.
 *   Content-Length digits only, at most 2^53 - 1; several must agree.
 *   Transfer-Encoding  "chunked" only (501 for any other coding); with Content-Length as well,
 *                  the request is refused (400): the two framings disagreeing is how requests
 *                  are smuggled past proxies.
 *   Host           exactly one on HTTP/1.1 (400 without).
 *   Expect         "100-continue" (417 for any other expectation).
 *   Connection     "close" ends the connection after the response; HTTP/1.0 closes unless it
 *                  says "keep-alive".
 *
 * The head is parsed in place: names and values are NUL-terminated inside the buffer, so the
 * buffer must stay alive and unmoved while the result is used.
 */
#ifndef LM_HTTP_PARSE_H
#define LM_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LM_HTTP_MAX_HEADERS 64

struct lm_http_field {
	char *name; /* as sent; compare case-insensitively */
	char *value;
};

struct lm_http_head {
	char *method;
	char *target; /* as sent */
	char *path;   /* the target's path: "/" for "*" and for an absolute URL without one */
	char *query;  /* after '?', or NULL */
	int minor;    /* HTTP/1.minor */
	struct lm_http_field fields[LM_HTTP_MAX_HEADERS];
	int n_fields;
	bool has_length;
	uint64_t content_length;
	bool chunked;
	bool expect_continue;
	bool close;      /* the connection ends after this request's response */
	size_t head_len; /* bytes of the head, its final empty line included */
};

/* Why a request was refused: the status to answer and a sentence for the client. */
struct lm_http_perr {
	uint16_t status;
	char msg[200];
};

/* Parses the head at buf[0..len). Returns 1 when a whole head was parsed (h filled; its
 * strings point into buf), 0 when more bytes are needed (never when len >= max_head: then the
 * head is too large, 431), or -1 with *e filled. */
int lm_http_parse_head(char *buf, size_t len, size_t max_head, struct lm_http_head *h,
		       struct lm_http_perr *e);

/* The value of the first field called `name` (case-insensitive), or NULL. */
const char *lm_http_field(const struct lm_http_head *h, const char *name);

/* Whether a comma-separated field value lists `token` (case-insensitive). */
bool lm_http_has_token(const char *value, const char *token);

/* A chunked body decoded in place, resumable: the raw bytes arrive into body[0..avail) and the
 * decoded data is compacted to body[0..out). Zeroed is the start of a body. */
struct lm_http_chunked {
	int state;
	uint64_t left;  /* bytes of the current chunk still to come */
	size_t in;      /* raw bytes consumed */
	size_t out;     /* decoded bytes kept */
	size_t trailer; /* bytes of trailer fields seen */
};

/* Decodes what body[c->in..avail) holds. Returns 1 when the body is complete (c->in is then the
 * raw length, final CRLF and trailers included), 0 when more bytes are needed, -1 with *e
 * filled: 400 for a malformed chunk, 413 when the decoded data would pass max_body. */
int lm_http_chunked_feed(struct lm_http_chunked *c, char *body, size_t avail, size_t max_body,
			 struct lm_http_perr *e);

/* "OK", "Not Found", ... for a status code; "Unknown" for one this file does not name. */
const char *lm_http_reason(uint16_t status);

#endif

/* http_client.h — a small blocking HTTP/1.1 client for the CLI (`generate`, `status`,
 * `redeploy`): one request per connection, Content-Length or read-to-close bodies, and a line
 * callback for server-sent events. Plain TCP to loopback or a configured host; no TLS. */
#ifndef LM_HTTP_CLIENT_H
#define LM_HTTP_CLIENT_H

#include <stddef.h>

#include "common/base/err.h"

struct lm_http_resp {
	int status;
	char *body; /* NUL-terminated, malloc'd */
	size_t len;
};
void lm_http_resp_fini(struct lm_http_resp *r);

/* url: "http://host:port" (the scheme may be omitted). token: a bearer token or NULL.
 * timeout_ms bounds connecting (each address the host resolves to) and each read. */
int lm_http_request(const char *url, const char *method, const char *path, const char *token,
		    const char *body, size_t len, int timeout_ms, struct lm_http_resp *resp,
		    lm_diag *d);

/* Like lm_http_request, but the body is handed to on_line line by line as it arrives (for
 * text/event-stream). A non-2xx response's body is collected into resp instead. */
int lm_http_stream(const char *url, const char *path, const char *token, const char *body,
		   size_t len, int timeout_ms, void (*on_line)(void *arg, const char *line),
		   void *arg, struct lm_http_resp *resp, lm_diag *d);

#endif

/* httpd.h — small helpers over NNG's HTTP server, shared by the coordinator's API and the
 * workers' health endpoints: routing, JSON replies, and OpenAI-style JSON errors.
 *
 * Handlers are NNG HTTP handler callbacks (`void cb(nng_aio *aio)`): they run on NNG's threads,
 * must not block, and finish the aio (directly, or later from another thread for long calls). */
#ifndef LM_HTTPD_H
#define LM_HTTPD_H

#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

struct lm_httpd {
	nng_http_server *srv;
	nng_url *url;
	bool started;
};

/* Holds a server for "http://host:port" (addr may omit the scheme). */
int lm_httpd_init(struct lm_httpd *h, const char *addr, lm_diag *d);
/* Adds a route. method NULL accepts any; max_body > 0 collects a request body up to that many
 * bytes (a larger one gets 413 from NNG). `data` is returned by lm_httpd_data(aio). */
int lm_httpd_route(struct lm_httpd *h, const char *method, const char *path, void (*cb)(nng_aio *),
		   void *data, size_t max_body, lm_diag *d);
int lm_httpd_start(struct lm_httpd *h, lm_diag *d);
/* Stops and releases; harmless on a zeroed struct. */
void lm_httpd_fini(struct lm_httpd *h);

/* In a handler: the route's data, the request, its body. */
void *lm_httpd_data(nng_aio *aio);
nng_http_req *lm_httpd_req(nng_aio *aio);
void lm_httpd_body(nng_aio *aio, const char **body, size_t *len);
/* The value of "Authorization: Bearer <token>" equals token (constant-time compare). true
 * when token is NULL or empty (no authentication configured). */
bool lm_httpd_authorized(nng_aio *aio, const char *token);

/* Replies and finishes the aio. Bodies are copied. */
void lm_httpd_reply(nng_aio *aio, uint16_t status, const char *content_type, const void *body,
		    size_t len);
/* Replies with doc as JSON and frees doc (doc NULL means out of memory: 500). */
void lm_httpd_reply_json(nng_aio *aio, uint16_t status, cJSON *doc);
/* {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}: type is
 * "invalid_request_error", "authentication_error", "server_error", ... param may be NULL. */
void lm_httpd_reply_error(nng_aio *aio, uint16_t status, const char *type, const char *param,
			  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The same error document as a string the caller frees (for streams). */
char *lm_httpd_error_json(const char *type, const char *param, const char *message);

#endif

#include "common/wire/httpd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lm_httpd_init(struct lm_httpd *h, const char *addr, lm_diag *d)
{
	char url[300];
	int rv;
	memset(h, 0, sizeof *h);
	snprintf(url, sizeof url, "%s%s", strstr(addr, "://") ? "" : "http://", addr);
	if ((rv = nng_url_parse(&h->url, url)) != 0)
		return lm_fail(d, LM_ECONFIG, "http address '%s': %s", addr, nng_strerror(rv));
	if ((rv = nng_http_server_hold(&h->srv, h->url)) != 0) {
		nng_url_free(h->url);
		h->url = NULL;
		return lm_fail(d, LM_EIO, "http server at %s: %s", addr, nng_strerror(rv));
	}
	return 0;
}

int lm_httpd_route(struct lm_httpd *h, const char *method, const char *path, void (*cb)(nng_aio *),
		   void *data, size_t max_body, lm_diag *d)
{
	nng_http_handler *hd;
	int rv = nng_http_handler_alloc(&hd, path, cb);
	if (rv == 0 && method != NULL)
		rv = nng_http_handler_set_method(hd, method);
	if (rv == 0 && method == NULL)
		rv = nng_http_handler_set_method(hd, NULL);
	if (rv == 0)
		rv = nng_http_handler_collect_body(hd, max_body > 0, max_body);
	if (rv == 0)
		rv = nng_http_handler_set_data(hd, data, NULL);
	if (rv == 0)
		rv = nng_http_server_add_handler(h->srv, hd);
	if (rv != 0)
		return lm_fail(d, LM_EIO, "http route %s %s: %s", method ? method : "*", path,
			       nng_strerror(rv));
	return 0;
}

int lm_httpd_start(struct lm_httpd *h, lm_diag *d)
{
	int rv = nng_http_server_start(h->srv);
	if (rv != 0)
		return lm_fail(d, LM_EIO, "cannot serve http at %s:%s: %s", h->url->u_hostname,
			       h->url->u_port, nng_strerror(rv));
	h->started = true;
	return 0;
}

void lm_httpd_fini(struct lm_httpd *h)
{
	if (h == NULL)
		return;
	if (h->srv != NULL) {
		if (h->started)
			nng_http_server_stop(h->srv);
		nng_http_server_release(h->srv);
	}
	if (h->url != NULL)
		nng_url_free(h->url);
	memset(h, 0, sizeof *h);
}

void *lm_httpd_data(nng_aio *aio)
{
	return nng_http_handler_get_data(nng_aio_get_input(aio, 1));
}

nng_http_req *lm_httpd_req(nng_aio *aio)
{
	return nng_aio_get_input(aio, 0);
}

void lm_httpd_body(nng_aio *aio, const char **body, size_t *len)
{
	void *p = NULL;
	size_t n = 0;
	nng_http_req_get_data(lm_httpd_req(aio), &p, &n);
	*body = p;
	*len = n;
}

bool lm_httpd_authorized(nng_aio *aio, const char *token)
{
	if (token == NULL || token[0] == '\0')
		return true;
	const char *h = nng_http_req_get_header(lm_httpd_req(aio), "Authorization");
	if (h == NULL || strncmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	size_t a = strlen(h), b = strlen(token);
	unsigned diff = (unsigned)(a ^ b);
	for (size_t i = 0; i < b; i++)
		diff |= (unsigned)((uint8_t)h[i < a ? i : 0] ^ (uint8_t)token[i]);
	return diff == 0;
}

void lm_httpd_reply(nng_aio *aio, uint16_t status, const char *content_type, const void *body,
		    size_t len)
{
	nng_http_res *res;
	int rv = nng_http_res_alloc(&res);
	if (rv == 0)
		rv = nng_http_res_set_status(res, status);
	if (rv == 0 && content_type != NULL)
		rv = nng_http_res_set_header(res, "Content-Type", content_type);
	if (rv == 0 && len > 0)
		rv = nng_http_res_copy_data(res, body, len);
	if (rv != 0) {
		if (res != NULL)
			nng_http_res_free(res);
		nng_aio_finish(aio, rv);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

void lm_httpd_reply_json(nng_aio *aio, uint16_t status, cJSON *doc)
{
	char *s = doc != NULL ? cJSON_PrintUnformatted(doc) : NULL;
	cJSON_Delete(doc);
	if (s == NULL) {
		static const char oom[] = "{\"error\":{\"message\":\"out of memory\","
					  "\"type\":\"server_error\"}}";
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

void lm_httpd_reply_error(nng_aio *aio, uint16_t status, const char *type, const char *param,
			  const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	char *s = lm_httpd_error_json(type, param, msg);
	if (s == NULL) {
		lm_httpd_reply_json(aio, 500, NULL);
		return;
	}
	lm_httpd_reply(aio, status, "application/json", s, strlen(s));
	free(s);
}

/* api_pages.c — the pages for people: each built-in asset on its GET route. See api_pages.h. */
#include "coordinator/api/api_pages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct api_asset *api_pages_find(const char *path)
{
	for (int i = 0; i < api_n_assets; i++)
		if (strcmp(api_assets[i].path, path) == 0)
			return &api_assets[i];
	return NULL;
}

int api_pages_origins(const char *http, char out[][API_PAGES_ORIGIN_CAP])
{
	static const char *const loopback[] = {"127.0.0.1", "localhost", "[::1]"};
	if (strncmp(http, "http://", 7) == 0)
		http += 7;
	const char *colon = strrchr(http, ':');
	if (colon == NULL || colon == http || strlen(colon + 1) == 0 ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) || colon - http > 200 ||
	    strlen(colon) > 6 || atoi(colon + 1) == 0)
		return 0;
	char host[256];
	snprintf(host, sizeof host, "%.*s", (int)(colon - http), http);
	if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0)
		return 0;
	for (int i = 0; i < API_PAGES_MAX_ORIGINS; i++)
		if (strcmp(host, loopback[i]) == 0) {
			for (int k = 0; k < API_PAGES_MAX_ORIGINS; k++)
				snprintf(out[k], API_PAGES_ORIGIN_CAP, "http://%s%.6s", loopback[k],
					 colon);
			return API_PAGES_MAX_ORIGINS;
		}
	snprintf(out[0], API_PAGES_ORIGIN_CAP, "http://%.200s%.6s", host, colon);
	return 1;
}

static void api_pages_serve(nng_aio *aio)
{
	const struct api_asset *a = lm_httpd_data(aio);
	lm_httpd_add_header(aio, "Content-Security-Policy", API_PAGES_CSP);
	/* The type is the one declared (a browser must not guess another), and no other site
	 * may frame the pages or learn where they were opened from. */
	lm_httpd_add_header(aio, "X-Content-Type-Options", "nosniff");
	lm_httpd_add_header(aio, "X-Frame-Options", "DENY");
	lm_httpd_add_header(aio, "Referrer-Policy", "no-referrer");
	lm_httpd_add_header(aio, "Cache-Control", "no-cache");
	lm_httpd_reply(aio, 200, a->type, a->data, a->len);
}

int api_pages_add(struct lm_httpd *h, lm_diag *d)
{
	for (int i = 0; i < api_n_assets; i++) {
		const struct lm_httpd_route r = {
			"GET", api_assets[i].path, api_pages_serve, (void *)&api_assets[i], 0,
			false};
		int rc = lm_httpd_add(h, &r, d);
		if (rc != 0)
			return rc;
	}
	return 0;
}

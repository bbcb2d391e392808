/* api_pages.c — the pages for people: each built-in asset on its GET route. See api_pages.h. */
#include "coordinator/api/api_pages.h"

#include <string.h>

const struct api_asset *api_pages_find(const char *path)
{
	for (int i = 0; i < api_n_assets; i++)
		if (strcmp(api_assets[i].path, path) == 0)
			return &api_assets[i];
	return NULL;
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

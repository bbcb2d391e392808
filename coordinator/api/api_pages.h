/* api_pages.h — the coordinator's two pages for people, built into the binary:
 *
 *   GET /        the mesh, live: the ring of workers with their slices, memory, state and
 *                restarts, each hop's latency, tokens per second, a redeploy's progress
 *   GET /chat    a chat with the model through its chat template
 *   GET /ui/...  the pages' script and style sheet
 *
 * The pages hold no data of the mesh: their scripts read /v1/status, /metrics and the chat
 * endpoint with the bearer token the person types in (when mesh.toml sets one), so a page
 * without it shows nothing of the mesh. Every asset is sent with a Content-Security-Policy that
 * allows scripts, styles and requests from the coordinator itself only (no inline script, no
 * other host), and the scripts insert the model's text and the mesh's reasons as text, never
 * as HTML. [coordinator] ui = false leaves the routes out (404).
 *
 * The assets are the files of coordinator/api/ui/, turned into api_assets[] at build time by
 * tools/embed_assets.py.
 */
#ifndef LM_API_PAGES_H
#define LM_API_PAGES_H

#include <stddef.h>

#include "common/base/err.h"
#include "common/wire/httpd.h"

struct api_asset {
	const char *path;          /* where it is served: "/", "/chat", "/ui/mesh.js" */
	const char *type;          /* its Content-Type */
	const unsigned char *data; /* [len], then a NUL */
	size_t len;
};
extern const struct api_asset api_assets[];
extern const int api_n_assets;

/* The policy every asset is sent with. */
#define API_PAGES_CSP                                                                   \
	"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " \
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* The pages' own origins, which the API must allow: a browser sends Origin with every POST,
 * one to the page's own server included, and the HTTP server refuses any origin it is not
 * told of (httpd.h). For the address the API listens on, "host:port" or "http://host:port":
 * "http://host:port" and, for a loopback host (127.0.0.1, localhost, [::1]), the other two
 * loopback names with the same port. None for a wildcard host (0.0.0.0, [::]) or port 0: the
 * names such an API is reached by are the operator's to list in cors_origins. No other site
 * can send these origins (a page rebinding its own name to this address has its own name as
 * its origin), so they open the API to the pages alone. Returns how many were written, at
 * most API_PAGES_MAX_ORIGINS. */
#define API_PAGES_MAX_ORIGINS 3
#define API_PAGES_ORIGIN_CAP  300
int api_pages_origins(const char *http, char out[][API_PAGES_ORIGIN_CAP]);

/* The asset served at path, or NULL. */
const struct api_asset *api_pages_find(const char *path);
/* Adds a GET route for every asset. */
int api_pages_add(struct lm_httpd *h, lm_diag *d);

#endif

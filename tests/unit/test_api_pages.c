/* coordinator/api_pages: the pages built into the binary are the files of coordinator/api/ui/
 * byte for byte, each where the pages link to it and with its type; the pages hold no inline
 * script, no inline style and no address of another host; the scripts never turn text into
 * HTML; the policy sent with them allows nothing inline and nothing from elsewhere. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api/api_pages.h"

/* The file coordinator/api/ui/<name> of the source tree, NUL-terminated; *len its size. */
static char *read_source(const char *name, size_t *len)
{
	const char *root = getenv("LM_SOURCE_ROOT");
	char path[4096];
	snprintf(path, sizeof path, "%s/coordinator/api/ui/%s", root != NULL ? root : "..", name);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "cannot open %s", path);
	char *p = calloc(1, 1 << 20);
	cr_assert_not_null(p);
	*len = fread(p, 1, (1 << 20) - 1, f);
	fclose(f);
	return p;
}

static const char *const files[][2] = {
	{"mesh.html", "/"},         {"chat.html", "/chat"},
	{"ui.css", "/ui/ui.css"},   {"common.js", "/ui/common.js"},
	{"mesh.js", "/ui/mesh.js"}, {"chat.js", "/ui/chat.js"},
};
#define N_FILES (sizeof files / sizeof files[0])

Test(api_pages, every_file_built_in_as_it_is)
{
	cr_expect_eq(api_n_assets, (int)N_FILES);
	for (size_t i = 0; i < N_FILES; i++) {
		const struct api_asset *a = api_pages_find(files[i][1]);
		cr_assert_not_null(a, "%s is not served at %s", files[i][0], files[i][1]);
		size_t len;
		char *src = read_source(files[i][0], &len);
		cr_expect_eq(a->len, len, "%s: %zu bytes built in, %zu in the file", files[i][0],
			     a->len, len);
		cr_expect(a->len == len && memcmp(a->data, src, len) == 0, "%s differs",
			  files[i][0]);
		cr_expect_eq(a->data[a->len], '\0');
		const char *ext = strrchr(files[i][0], '.');
		const char *type = strcmp(ext, ".html") == 0  ? "text/html; charset=utf-8"
				   : strcmp(ext, ".css") == 0 ? "text/css; charset=utf-8"
							      : "text/javascript; charset=utf-8";
		cr_expect_str_eq(a->type, type, "%s", files[i][0]);
		free(src);
	}
	cr_expect_null(api_pages_find("/ui/"));
	cr_expect_null(api_pages_find("/ui/missing.js"));
	cr_expect_null(api_pages_find("/index.html"));
}

/* Every `attr="..."` value in html after `tag`: each must be an asset served here. */
static void expect_links_served(const char *page, const char *html, const char *attr)
{
	char key[32];
	snprintf(key, sizeof key, "%s=\"", attr);
	int found = 0;
	for (const char *p = strstr(html, key); p != NULL; p = strstr(p + 1, key)) {
		const char *v = p + strlen(key), *end = strchr(v, '"');
		cr_assert_not_null(end);
		char link[256];
		snprintf(link, sizeof link, "%.*s", (int)(end - v), v);
		cr_expect_not_null(api_pages_find(link), "%s links to %s, which is not served",
				   page, link);
		found++;
	}
	cr_expect_gt(found, 0, "%s has no %s", page, attr);
}

/* The first attribute like ` onclick=` (an event handler) in html, or NULL. */
static const char *event_attribute(const char *html)
{
	for (const char *p = strstr(html, " on"); p != NULL; p = strstr(p + 1, " on")) {
		const char *q = p + 3;
		while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z'))
			q++;
		if (q > p + 3 && *q == '=')
			return p;
	}
	return NULL;
}

Test(api_pages, pages_hold_nothing_inline)
{
	const char *pages[] = {"/", "/chat"};
	for (size_t i = 0; i < 2; i++) {
		const char *html = (const char *)api_pages_find(pages[i])->data;
		/* Every script is a file of ours; no event handler, style or other host inline. */
		int scripts = 0;
		for (const char *p = strstr(html, "<script"); p != NULL;
		     p = strstr(p + 1, "<script")) {
			cr_expect(strncmp(p, "<script src=\"/ui/", 17) == 0,
				  "%s: inline script at %.40s", pages[i], p);
			scripts++;
		}
		cr_expect_eq(scripts, 2, "%s: %d scripts", pages[i], scripts);
		expect_links_served(pages[i], html, "src");
		expect_links_served(pages[i], html, "href");
		cr_expect_null(event_attribute(html), "%s: an inline event handler", pages[i]);
		cr_expect_null(strstr(html, "style="), "%s: an inline style", pages[i]);
		cr_expect_null(strstr(html, "<style"), "%s: an inline style sheet", pages[i]);
		cr_expect_null(strstr(html, "//"), "%s: an address of another host", pages[i]);
	}
}

Test(api_pages, scripts_insert_text_only)
{
	static const char *const banned[] = {
		"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
		"Function(", "https://",  "setAttribute(\"on",  "localStorage"};
	const char *scripts[] = {"/ui/common.js", "/ui/mesh.js", "/ui/chat.js"};
	for (size_t i = 0; i < 3; i++) {
		const char *js = (const char *)api_pages_find(scripts[i])->data;
		for (size_t k = 0; k < sizeof banned / sizeof banned[0]; k++)
			cr_expect_null(strstr(js, banned[k]), "%s uses %s", scripts[i], banned[k]);
		/* The one address in them is SVG's namespace, which no request goes to. */
		for (const char *p = strstr(js, "http://"); p != NULL; p = strstr(p + 1, "http://"))
			cr_expect(strncmp(p, "http://www.w3.org/2000/svg\"", 27) == 0,
				  "%s names a host: %.40s", scripts[i], p);
	}
}

Test(api_pages, policy_allows_nothing_inline_nor_elsewhere)
{
	const char *csp = API_PAGES_CSP;
	cr_expect(strncmp(csp, "default-src 'none';", 19) == 0);
	cr_expect_not_null(strstr(csp, "script-src 'self';"));
	cr_expect_not_null(strstr(csp, "connect-src 'self';"));
	cr_expect_not_null(strstr(csp, "frame-ancestors 'none'"));
	cr_expect_null(strstr(csp, "unsafe"));
	cr_expect_null(strstr(csp, "*"));
	cr_expect_null(strstr(csp, "data:"));
}

/* The origins the pages' own POSTs carry, and none a wildcard or unusable address could. */
Test(api_pages, own_origins)
{
	char o[API_PAGES_MAX_ORIGINS][API_PAGES_ORIGIN_CAP];
	cr_assert_eq(api_pages_origins("127.0.0.1:8080", o), 3);
	cr_expect_str_eq(o[0], "http://127.0.0.1:8080");
	cr_expect_str_eq(o[1], "http://localhost:8080");
	cr_expect_str_eq(o[2], "http://[::1]:8080");
	cr_assert_eq(api_pages_origins("http://localhost:9", o), 3);
	cr_expect_str_eq(o[0], "http://127.0.0.1:9");
	cr_assert_eq(api_pages_origins("[::1]:18080", o), 3);
	cr_expect_str_eq(o[2], "http://[::1]:18080");
	cr_assert_eq(api_pages_origins("10.1.2.3:8080", o), 1);
	cr_expect_str_eq(o[0], "http://10.1.2.3:8080");
	cr_assert_eq(api_pages_origins("mesh.example:443", o), 1);
	cr_expect_str_eq(o[0], "http://mesh.example:443");
	const char *none[] = {
		"0.0.0.0:8080", "[::]:8080", "127.0.0.1:0",   "127.0.0.1:00", "127.0.0.1",
		"127.0.0.1:",   ":8080",     "127.0.0.1:80a", "h:1234567"};
	for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
		cr_expect_eq(api_pages_origins(none[i], o), 0, "%s", none[i]);
}

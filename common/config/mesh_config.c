/* mesh_config.c — mesh.toml's schema over the TOML reader. The keys are documented in
 * mesh_config.h; every check here reports through toml_fail_at/toml_fail_key, so a message
 * always carries the file, line, column and key path. */
#include "common/config/mesh_config.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/format/toml.h"

/* ---- sizes and addresses ------------------------------------------------------------------ */

static int why_fail(char *why, size_t cap, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int why_fail(char *why, size_t cap, int code, const char *fmt, ...)
{
	if (why != NULL && cap > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, cap, fmt, ap);
		va_end(ap);
	}
	return code;
}

int mesh_parse_size(const char *s, uint64_t *out, char *why, size_t why_cap)
{
	static const struct {
		const char *name;
		uint64_t mult;
	} units[] = {
		{"B", 1},
		{"KB", 1000ull},
		{"kB", 1000ull},
		{"MB", 1000000ull},
		{"GB", 1000000000ull},
		{"TB", 1000000000000ull},
		{"KiB", 1ull << 10},
		{"MiB", 1ull << 20},
		{"GiB", 1ull << 30},
		{"TiB", 1ull << 40},
	};
	const char *p = s;
	if (!isdigit((unsigned char)*p))
		return why_fail(why, why_cap, LM_EFORMAT, "a size starts with a digit");
	uint64_t whole = 0;
	for (; isdigit((unsigned char)*p); p++) {
		uint64_t dg = (uint64_t)(*p - '0');
		if (whole > (UINT64_MAX - dg) / 10)
			return why_fail(why, why_cap, LM_ERANGE, "more than 2^64 - 1 bytes");
		whole = whole * 10 + dg;
	}
	uint64_t frac = 0, scale = 1;
	bool has_frac = false;
	if (*p == '.') {
		p++;
		has_frac = true;
		if (!isdigit((unsigned char)*p))
			return why_fail(why, why_cap, LM_EFORMAT,
					"a digit must follow the decimal point");
		for (; isdigit((unsigned char)*p); p++) {
			if (scale == 1000000000000000000ull)
				return why_fail(why, why_cap, LM_EFORMAT, "more than 18 decimals");
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
	}
	bool space = *p == ' ';
	if (space)
		p++;
	uint64_t mult = 0;
	if (*p == '\0' && !space)
		mult = 1;
	for (size_t i = 0; i < sizeof units / sizeof units[0] && mult == 0; i++)
		if (strcmp(p, units[i].name) == 0)
			mult = units[i].mult;
	if (mult == 0)
		return why_fail(why, why_cap, LM_EFORMAT,
				"unknown unit '%s' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)",
				p);
	if (has_frac && mult == 1)
		return why_fail(why, why_cap, LM_EFORMAT, "a fraction needs a unit larger than B");
	/* whole * mult + frac * mult / scale, exactly, rounded down. */
	unsigned __int128 v = (unsigned __int128)whole * mult +
			      (unsigned __int128)frac * mult / (unsigned __int128)scale;
	if (v > UINT64_MAX)
		return why_fail(why, why_cap, LM_ERANGE, "more than 2^64 - 1 bytes");
	*out = (uint64_t)v;
	return 0;
}

int mesh_check_hostport(const char *hp, char *why, size_t why_cap)
{
	const char *colon;
	if (hp[0] == '[') {
		const char *close = strchr(hp, ']');
		if (close == NULL)
			return why_fail(why, why_cap, LM_EFORMAT, "'[' without ']'");
		if (close == hp + 1)
			return why_fail(why, why_cap, LM_EFORMAT, "an empty IPv6 host");
		for (const char *q = hp + 1; q < close; q++)
			if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
				return why_fail(why, why_cap, LM_EFORMAT,
						"'%c' cannot appear in an IPv6 address", *q);
		colon = close + 1;
		if (*colon != ':')
			return why_fail(why, why_cap, LM_EFORMAT, "expected ':PORT' after ']'");
	} else {
		colon = strrchr(hp, ':');
		if (colon == NULL)
			return why_fail(why, why_cap, LM_EFORMAT, "no port (write HOST:PORT)");
		if (colon == hp)
			return why_fail(why, why_cap, LM_EFORMAT, "no host (write HOST:PORT)");
		bool star = colon == hp + 1 && hp[0] == '*';
		for (const char *q = hp; q < colon && !star; q++) {
			if (*q == ':')
				return why_fail(why, why_cap, LM_EFORMAT,
						"an IPv6 host goes in brackets: [::1]:PORT");
			if (!isalnum((unsigned char)*q) && *q != '.' && *q != '-')
				return why_fail(why, why_cap, LM_EFORMAT,
						"'%c' cannot appear in a host name", *q);
		}
	}
	const char *port = colon + 1;
	size_t n = strlen(port);
	if (n == 0 || n > 5 || strspn(port, "0123456789") != n)
		return why_fail(why, why_cap, LM_EFORMAT, "the port must be a number");
	long v = strtol(port, NULL, 10);
	if (v < 1 || v > 65535)
		return why_fail(why, why_cap, LM_EFORMAT, "the port must be 1 to 65535, not %ld",
				v);
	return 0;
}

int mesh_check_address(const char *a, char *why, size_t why_cap)
{
	if (strncmp(a, "ipc://", 6) == 0) {
		size_t n = strlen(a + 6);
		if (n == 0)
			return why_fail(why, why_cap, LM_EFORMAT, "an ipc:// address needs a path");
		/* sockaddr_un.sun_path is 108 bytes, NUL included. */
		if (n > 107)
			return why_fail(
				why, why_cap, LM_EFORMAT,
				"the path is %zu bytes; a unix socket path holds at most 107", n);
		return 0;
	}
	if (strncmp(a, "inproc://", 9) == 0)
		return a[9] != '\0' ? 0
				    : why_fail(why, why_cap, LM_EFORMAT,
					       "an inproc:// address needs a name");
	if (strncmp(a, "tcp://", 6) == 0)
		return mesh_check_hostport(a + 6, why, why_cap);
	if (strncmp(a, "tls+tcp://", 10) == 0)
		return mesh_check_hostport(a + 10, why, why_cap);
	return why_fail(why, why_cap, LM_EFORMAT,
			"use ipc://PATH, tcp://HOST:PORT, tls+tcp://HOST:PORT or inproc://NAME");
}

int mesh_listen_address(const char *addr, bool http, bool any, char *out, size_t cap, char *why,
			size_t why_cap)
{
	int rc = http ? mesh_check_hostport(addr, why, why_cap)
		      : mesh_check_address(addr, why, why_cap);
	if (rc != 0)
		return rc;
	const char *scheme_end = http ? addr : strstr(addr, "://") + 3;
	bool tcp = http || strncmp(addr, "tcp://", 6) == 0 || strncmp(addr, "tls+tcp://", 10) == 0;
	int n;
	if (!any || !tcp) {
		n = snprintf(out, cap, "%s", addr);
	} else {
		/* The port follows the last ':' (an IPv6 literal's own colons sit inside []). */
		const char *colon = strrchr(scheme_end, ':');
		n = snprintf(out, cap, "%.*s%s%s", (int)(scheme_end - addr), addr,
			     scheme_end[0] == '[' ? "[::]" : "0.0.0.0", colon);
	}
	if (n < 0 || (size_t)n >= cap)
		return why_fail(why, why_cap, LM_ERANGE, "the listen address of %s is too long",
				addr);
	return 0;
}

/* ---- the schema reader -------------------------------------------------------------------- */

struct mc {
	const struct toml_doc *doc;
	lm_diag *d;
	struct mesh_config *cfg;
	bool k_swa_given, v_swa_given; /* [model] kv_type_k_swa, kv_type_v_swa */
};

#define MC_FAIL(m, v, ...) toml_fail_at((m)->d, LM_ECONFIG, (m)->doc, (v), __VA_ARGS__)

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 32 || lb > 32)
		return 99;
	size_t row[33];
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Every key of `tab` must be one of `known` (NULL-terminated). */
static int mc_keys(struct mc *m, const struct toml_value *tab, const char *section,
		   const char *const *known)
{
	for (size_t i = 0; i < toml_len(tab); i++) {
		const struct toml_kv *kv = toml_entry(tab, i);
		const char *near = NULL;
		bool found = false;
		for (const char *const *k = known; *k != NULL && !found; k++) {
			found = kv->keylen == strlen(*k) && strcmp(kv->key, *k) == 0;
			if (near == NULL && edit_distance(kv->key, *k) <= 2)
				near = *k;
		}
		if (found)
			continue;
		char list[400] = "";
		size_t n = 0;
		for (const char *const *k = known; *k != NULL && n < sizeof list; k++)
			n += (size_t)snprintf(list + n, sizeof list - n, "%s%s",
					      k == known ? "" : ", ", *k);
		if (near != NULL)
			return toml_fail_key(m->d, LM_ECONFIG, m->doc, kv,
					     "unknown key; did you mean '%s'? (%s takes: %s)", near,
					     section, list);
		return toml_fail_key(m->d, LM_ECONFIG, m->doc, kv, "unknown key (%s takes: %s)",
				     section, list);
	}
	return 0;
}

static int mc_missing(struct mc *m, const struct toml_value *tab, const char *key, const char *hint)
{
	return MC_FAIL(m, tab, "missing key '%s' (%s)", key, hint);
}

/* A non-empty string without NULs; *out is left alone when the key is absent and optional. */
static int mc_str(struct mc *m, const struct toml_value *tab, const char *key, const char *hint,
		  char **out)
{
	const struct toml_value *v = toml_get(tab, key);
	if (v == NULL)
		return hint != NULL ? mc_missing(m, tab, key, hint) : 0;
	int rc = toml_expect(m->doc, v, TOML_STRING, m->d);
	if (rc != 0)
		return rc;
	if (v->u.str.len == 0)
		return MC_FAIL(m, v, "must not be empty");
	if (strlen(v->u.str.s) != v->u.str.len)
		return MC_FAIL(m, v, "must not contain a NUL character");
	char *s = strdup(v->u.str.s);
	if (s == NULL)
		return lm_fail(m->d, LM_ENOMEM, "%s: out of memory", m->doc->name);
	free(*out);
	*out = s;
	return 0;
}

static int mc_int(struct mc *m, const struct toml_value *tab, const char *key, int64_t lo,
		  int64_t hi, int32_t *out)
{
	const struct toml_value *v = toml_get(tab, key);
	if (v == NULL)
		return 0;
	int rc = toml_expect(m->doc, v, TOML_INTEGER, m->d);
	if (rc != 0)
		return rc;
	if (v->u.i < lo || v->u.i > hi)
		return MC_FAIL(m, v, "must be %lld to %lld, not %lld", (long long)lo, (long long)hi,
			       (long long)v->u.i);
	*out = (int32_t)v->u.i;
	return 0;
}

static int mc_bool(struct mc *m, const struct toml_value *tab, const char *key, bool *out)
{
	const struct toml_value *v = toml_get(tab, key);
	if (v == NULL)
		return 0;
	int rc = toml_expect(m->doc, v, TOML_BOOL, m->d);
	if (rc == 0)
		*out = v->u.b;
	return rc;
}

/* One of `names` (NULL-terminated); *out is the index. */
static int mc_choice(struct mc *m, const struct toml_value *tab, const char *key,
		     const char *const *names, int *out)
{
	const struct toml_value *v = toml_get(tab, key);
	if (v == NULL)
		return 0;
	int rc = toml_expect(m->doc, v, TOML_STRING, m->d);
	if (rc != 0)
		return rc;
	char list[200] = "";
	size_t n = 0;
	for (int i = 0; names[i] != NULL; i++) {
		if (strcmp(v->u.str.s, names[i]) == 0 && strlen(names[i]) == v->u.str.len) {
			*out = i;
			return 0;
		}
		if (n < sizeof list)
			n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"",
					      i == 0                 ? ""
					      : names[i + 1] == NULL ? " or "
								     : ", ",
					      names[i]);
	}
	return MC_FAIL(m, v, "must be %s, not \"%.40s\"", list, v->u.str.s);
}

/* A type named as lm_dtype_name names it, one of `allowed`; *out is left alone when absent. */
static int mc_dtype(struct mc *m, const struct toml_value *tab, const char *key,
		    const enum lm_dtype *allowed, int n, enum lm_dtype *out)
{
	const char *names[LM_DTYPE_COUNT + 1];
	int k = -1;
	for (int i = 0; i < n; i++)
		names[i] = lm_dtype_name(allowed[i]);
	names[n] = NULL;
	int rc = mc_choice(m, tab, key, names, &k);
	if (rc == 0 && k >= 0)
		*out = allowed[k];
	return rc;
}
#define MC_DTYPE(m, tab, key, allowed, out) \
	mc_dtype(m, tab, key, allowed, (int)(sizeof allowed / sizeof allowed[0]), out)

static int mc_size(struct mc *m, const struct toml_value *tab, const char *key, uint64_t *out,
		   bool *given)
{
	const struct toml_value *v = toml_get(tab, key);
	*given = v != NULL;
	if (v == NULL)
		return 0;
	if (v->type == TOML_INTEGER) {
		if (v->u.i <= 0)
			return MC_FAIL(m, v, "must be a positive number of bytes, not %lld",
				       (long long)v->u.i);
		*out = (uint64_t)v->u.i;
		return 0;
	}
	if (v->type != TOML_STRING)
		return MC_FAIL(m, v,
			       "expected a size (a string such as \"128MiB\", or an integer "
			       "of bytes), found %s",
			       toml_type_name(v->type));
	char why[128];
	uint64_t b = 0;
	if (strlen(v->u.str.s) != v->u.str.len ||
	    mesh_parse_size(v->u.str.s, &b, why, sizeof why) != 0) {
		if (strlen(v->u.str.s) != v->u.str.len)
			snprintf(why, sizeof why, "a NUL character");
		return MC_FAIL(m, v, "invalid size \"%.40s\": %s", v->u.str.s, why);
	}
	if (b == 0)
		return MC_FAIL(m, v, "must be more than 0 bytes");
	*out = b;
	return 0;
}

static int mc_address(struct mc *m, const struct toml_value *tab, const char *key, const char *hint,
		      char **out)
{
	int rc = mc_str(m, tab, key, hint, out);
	if (rc != 0 || *out == NULL)
		return rc;
	char why[128];
	if (mesh_check_address(*out, why, sizeof why) != 0)
		return MC_FAIL(m, toml_get(tab, key), "invalid address \"%.80s\": %s", *out, why);
	return 0;
}

static int mc_hostport(struct mc *m, const struct toml_value *tab, const char *key,
		       const char *hint, char **out)
{
	int rc = mc_str(m, tab, key, hint, out);
	if (rc != 0 || *out == NULL)
		return rc;
	char why[128];
	if (mesh_check_hostport(*out, why, sizeof why) != 0)
		return MC_FAIL(m, toml_get(tab, key), "invalid HTTP endpoint \"%.80s\": %s", *out,
			       why);
	return 0;
}

/* A path, resolved against mesh.toml's directory when relative. */
static int mc_path(struct mc *m, const struct toml_value *tab, const char *key, const char *hint,
		   char **out)
{
	int rc = mc_str(m, tab, key, hint, out);
	if (rc != 0 || *out == NULL || (*out)[0] == '/')
		return rc;
	size_t n = strlen(m->cfg->dir) + 1 + strlen(*out) + 1;
	char *p = malloc(n);
	if (p == NULL)
		return lm_fail(m->d, LM_ENOMEM, "%s: out of memory", m->doc->name);
	snprintf(p, n, "%s/%s", m->cfg->dir, *out);
	free(*out);
	*out = p;
	return 0;
}

/* A table that may be absent (NULL); anything else in its place is an error. */
static int mc_table(struct mc *m, const char *key, const struct toml_value **out)
{
	*out = toml_get(m->doc->root, key);
	return *out == NULL ? 0 : toml_expect(m->doc, *out, TOML_TABLE, m->d);
}

/* ---- sections ----------------------------------------------------------------------------- */

/* The types a cache row may be stored in, and a hidden state may travel in. */
static const enum lm_dtype kv_types[] = {LM_F32,  LM_F16,  LM_BF16,    LM_Q8_0,
					 LM_Q5_1, LM_Q4_0, LM_FP8_E4M3};
static const enum lm_dtype wire_types[] = {LM_F32, LM_F16, LM_BF16};

static int mc_model(struct mc *m)
{
	static const char *const keys[] = {"path",          "max_seq_len",   "slots",
					   "kv_type_k",     "kv_type_v",     "kv_type_k_swa",
					   "kv_type_v_swa", "wire_dtype",    "max_batch",
					   "scratch_bytes", "chat_template", NULL};
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *t;
	int rc = mc_table(m, "model", &t);
	if (rc != 0)
		return rc;
	if (t == NULL)
		return lm_fail(m->d, LM_ECONFIG,
			       "%s: missing table [model] (its key 'path' names the GGUF model)",
			       m->doc->name);
	bool given;
	if ((rc = mc_keys(m, t, "[model]", keys)) != 0 ||
	    (rc = mc_path(m, t, "path", "the GGUF model file", &cfg->model_path)) != 0 ||
	    (rc = mc_int(m, t, "max_seq_len", 1, MESH_MAX_SEQ_LIMIT, &cfg->max_seq_len)) != 0 ||
	    (rc = mc_int(m, t, "slots", 1, 4096, &cfg->slots)) != 0 ||
	    (rc = MC_DTYPE(m, t, "kv_type_k", kv_types, &cfg->kv.global.k)) != 0 ||
	    (rc = MC_DTYPE(m, t, "kv_type_v", kv_types, &cfg->kv.global.v)) != 0 ||
	    (rc = MC_DTYPE(m, t, "wire_dtype", wire_types, &cfg->wire_dtype)) != 0 ||
	    (rc = mc_int(m, t, "max_batch", 1, 65536, &cfg->max_batch)) != 0 ||
	    (rc = mc_size(m, t, "scratch_bytes", &cfg->scratch_bytes, &given)) != 0 ||
	    (rc = mc_str(m, t, "chat_template", NULL, &cfg->chat_template)) != 0)
		return rc;
	/* The sliding layers take the global layers' types unless they have their own. */
	cfg->kv.swa = cfg->kv.global;
	m->k_swa_given = toml_get(t, "kv_type_k_swa") != NULL;
	m->v_swa_given = toml_get(t, "kv_type_v_swa") != NULL;
	if ((rc = MC_DTYPE(m, t, "kv_type_k_swa", kv_types, &cfg->kv.swa.k)) != 0 ||
	    (rc = MC_DTYPE(m, t, "kv_type_v_swa", kv_types, &cfg->kv.swa.v)) != 0)
		return rc;
	return 0;
}

/* A number of seconds in [lo, hi] (integer or float). */
static int mc_seconds(struct mc *m, const struct toml_value *tab, const char *key, double lo,
		      double hi, double *out)
{
	const struct toml_value *v = toml_get(tab, key);
	if (v == NULL)
		return 0;
	if (v->type != TOML_INTEGER && v->type != TOML_FLOAT)
		return MC_FAIL(m, v, "expected a number of seconds, found %s",
			       toml_type_name(v->type));
	double x = v->type == TOML_INTEGER ? (double)v->u.i : v->u.f;
	if (!(x >= lo && x <= hi))
		return MC_FAIL(m, v, "must be %g to %g seconds, not %g", lo, hi, x);
	*out = x;
	return 0;
}

/* A number of seconds in [lo, hi], as milliseconds. */
static int mc_millis(struct mc *m, const struct toml_value *tab, const char *key, double lo,
		     double hi, int32_t *out_ms)
{
	double x = -1;
	int rc = mc_seconds(m, tab, key, lo, hi, &x);
	if (rc == 0 && x >= 0)
		*out_ms = (int32_t)(x * 1000.0 + 0.5);
	return rc;
}

/* cors_origins: an array of origins, each as a browser sends it. */
static int mc_origins(struct mc *m, const struct toml_value *tab)
{
	const struct toml_value *v = toml_get(tab, "cors_origins");
	if (v == NULL)
		return 0;
	if (v->type != TOML_ARRAY)
		return MC_FAIL(m, v, "expected an array of origins, found %s",
			       toml_type_name(v->type));
	size_t n = toml_len(v);
	if (n > 64)
		return MC_FAIL(m, v, "at most 64 origins");
	m->cfg->cors_origins = calloc(n + 1, sizeof *m->cfg->cors_origins);
	if (m->cfg->cors_origins == NULL)
		return lm_fail(m->d, LM_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct toml_value *o = toml_at(v, i);
		if (o->type != TOML_STRING)
			return MC_FAIL(m, o, "an origin must be a string");
		const char *s = o->u.str.s;
		if (strlen(s) != o->u.str.len)
			return MC_FAIL(m, o, "an origin may not hold U+0000");
		bool scheme = strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
		const char *host = scheme ? strstr(s, "://") + 3 : NULL;
		if (strcmp(s, "null") != 0 &&
		    (!scheme || host[0] == '\0' || strchr(host, '/') != NULL ||
		     strpbrk(s, " \t\r\n") != NULL))
			return MC_FAIL(m, o,
				       "\"%.80s\" is not an origin (scheme://host[:port], no path, "
				       "e.g. \"https://app.example:8443\")",
				       s);
		if ((m->cfg->cors_origins[i] = strdup(s)) == NULL)
			return lm_fail(m->d, LM_ENOMEM, "out of memory");
		m->cfg->n_cors++;
	}
	return 0;
}

/* [coordinator] seed: an integer a JSON number holds exactly, as a request's seed. */
static int mc_seed(struct mc *m, const struct toml_value *tab, int64_t *out)
{
	const struct toml_value *v = toml_get(tab, "seed");
	if (v == NULL)
		return 0;
	int rc = toml_expect(m->doc, v, TOML_INTEGER, m->d);
	if (rc != 0)
		return rc;
	if (v->u.i < 0 || v->u.i > 9007199254740991LL)
		return MC_FAIL(m, v, "must be 0 to 9007199254740991 (2^53 - 1), not %lld",
			       (long long)v->u.i);
	*out = v->u.i;
	return 0;
}

static int mc_coordinator(struct mc *m)
{
	static const char *const keys[] = {"http",
					   "data_in",
					   "auth_token",
					   "log_level",
					   "batches_in_flight",
					   "max_queued",
					   "http_read_timeout",
					   "http_idle_timeout",
					   "max_connections",
					   "cors_origins",
					   "request_timeout",
					   "worker_timeout",
					   "insecure",
					   "prefix_cache",
					   "ui",
					   "seed",
					   "ring_stamps",
					   NULL};
	static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *t;
	int rc = mc_table(m, "coordinator", &t);
	if (rc != 0)
		return rc;
	if (t == NULL)
		return lm_fail(m->d, LM_ECONFIG,
			       "%s: missing table [coordinator] (its key 'data_in' is the address "
			       "the last worker sends sampled tokens to)",
			       m->doc->name);
	int level = LM_LOG_INFO;
	if ((rc = mc_keys(m, t, "[coordinator]", keys)) != 0 ||
	    (rc = mc_hostport(m, t, "http", NULL, &cfg->http)) != 0 ||
	    (rc = mc_address(m, t, "data_in",
			     "the address where the coordinator receives sampled tokens, e.g. "
			     "\"ipc:///tmp/layermesh/coordinator.data\"",
			     &cfg->data_in)) != 0 ||
	    (rc = mc_str(m, t, "auth_token", NULL, &cfg->auth_token)) != 0 ||
	    (rc = mc_choice(m, t, "log_level", levels, &level)) != 0 ||
	    (rc = mc_int(m, t, "batches_in_flight", 1, MESH_MAX_BATCHES_IN_FLIGHT,
			 &cfg->batches_in_flight)) != 0 ||
	    (rc = mc_int(m, t, "max_queued", 0, 1000000, &cfg->max_queued)) != 0 ||
	    (rc = mc_seconds(m, t, "http_read_timeout", 0.1, 3600, &cfg->http_read_timeout)) != 0 ||
	    (rc = mc_seconds(m, t, "http_idle_timeout", 0.1, 86400, &cfg->http_idle_timeout)) !=
		    0 ||
	    (rc = mc_int(m, t, "max_connections", 1, 100000, &cfg->max_connections)) != 0 ||
	    (rc = mc_origins(m, t)) != 0 ||
	    (rc = mc_millis(m, t, "request_timeout", 0.1, 86400, &cfg->request_timeout_ms)) != 0 ||
	    (rc = mc_millis(m, t, "worker_timeout", 0.1, 3600, &cfg->worker_timeout_ms)) != 0 ||
	    (rc = mc_bool(m, t, "insecure", &cfg->insecure)) != 0 ||
	    (rc = mc_bool(m, t, "prefix_cache", &cfg->prefix_cache)) != 0 ||
	    (rc = mc_bool(m, t, "ui", &cfg->ui)) != 0 ||
	    (rc = mc_bool(m, t, "ring_stamps", &cfg->ring_stamps)) != 0 ||
	    (rc = mc_seed(m, t, &cfg->seed)) != 0)
		return rc;
	cfg->log_level = (enum lm_log_level)level; /* levels[] is in enum order */
	if (cfg->auth_token != NULL) {
		for (const char *q = cfg->auth_token; *q != '\0'; q++)
			if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7F)
				return MC_FAIL(m, toml_get(t, "auth_token"),
					       "must be printable ASCII without spaces (it is sent "
					       "in an HTTP header)");
	}
	return 0;
}

static int mc_plan(struct mc *m)
{
	static const char *const keys[] = {"strategy", NULL};
	static const char *const names[] = {"uniform", "balanced", "pinned", NULL};
	const struct toml_value *t;
	int rc = mc_table(m, "plan", &t);
	if (rc != 0 || t == NULL)
		return rc;
	int s = FENCE_BALANCED;
	if ((rc = mc_keys(m, t, "[plan]", keys)) != 0 ||
	    (rc = mc_choice(m, t, "strategy", names, &s)) != 0)
		return rc;
	m->cfg->strategy = (enum fence_strategy)s; /* names[] is in enum order */
	return 0;
}

static int mc_speculative(struct mc *m)
{
	static const char *const keys[] = {"source",    "draft_model",   "max_draft",   "ngram_min",
					   "ngram_max", "draft_threads", "max_streams", NULL};
	static const char *const sources[] = {"ngram", "model", NULL};
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *t;
	int rc = mc_table(m, "speculative", &t);
	if (rc != 0 || t == NULL)
		return rc;
	cfg->max_draft = 4;
	cfg->ngram_min = 1;
	cfg->ngram_max = 3;
	cfg->draft_threads = 1;
	cfg->spec_max_streams = 4;
	int source = -1;
	if ((rc = mc_keys(m, t, "[speculative]", keys)) != 0 ||
	    (rc = mc_choice(m, t, "source", sources, &source)) != 0 ||
	    (rc = mc_path(m, t, "draft_model", NULL, &cfg->draft_model)) != 0 ||
	    (rc = mc_int(m, t, "max_draft", 1, MESH_MAX_DRAFT, &cfg->max_draft)) != 0 ||
	    (rc = mc_int(m, t, "ngram_min", 1, 8, &cfg->ngram_min)) != 0 ||
	    (rc = mc_int(m, t, "ngram_max", 1, 8, &cfg->ngram_max)) != 0 ||
	    (rc = mc_int(m, t, "draft_threads", 1, 64, &cfg->draft_threads)) != 0 ||
	    (rc = mc_int(m, t, "max_streams", 0, 4096, &cfg->spec_max_streams)) != 0)
		return rc;
	if (source < 0)
		source = cfg->draft_model != NULL ? 1 : 0;
	cfg->spec = source == 1 ? MESH_SPEC_MODEL : MESH_SPEC_NGRAM;
	if (cfg->spec == MESH_SPEC_MODEL && cfg->draft_model == NULL)
		return MC_FAIL(m, toml_get(t, "source"),
			       "source \"model\" needs draft_model, the draft GGUF");
	if (cfg->spec == MESH_SPEC_NGRAM && cfg->draft_model != NULL)
		return MC_FAIL(m, toml_get(t, "draft_model"),
			       "a draft model is not used with source \"ngram\"");
	if (cfg->ngram_max < cfg->ngram_min)
		return MC_FAIL(m, toml_get(t, "ngram_max"), "must be at least ngram_min (%d)",
			       (int)cfg->ngram_min);
	if (cfg->max_draft >= cfg->max_batch)
		return MC_FAIL(m, toml_get(t, "max_draft") ? toml_get(t, "max_draft") : t,
			       "%d drafted tokens and the step's last token do not fit [model] "
			       "max_batch %d: they ride in one batch",
			       (int)cfg->max_draft, (int)cfg->max_batch);
	return 0;
}

static int mc_tls(struct mc *m)
{
	static const char *const keys[] = {"ca_file", "cert_file", "key_file", NULL};
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *t;
	int rc = mc_table(m, "tls", &t);
	if (rc != 0 || t == NULL)
		return rc;
	if ((rc = mc_keys(m, t, "[tls]", keys)) != 0 ||
	    (rc = mc_path(m, t, "ca_file", "the CA certificate that signs every peer's",
			  &cfg->tls_ca_file)) != 0 ||
	    (rc = mc_path(m, t, "cert_file", "this mesh's certificate, PEM",
			  &cfg->tls_cert_file)) != 0 ||
	    (rc = mc_path(m, t, "key_file", "the certificate's private key, PEM",
			  &cfg->tls_key_file)) != 0)
		return rc;
	return 0;
}

static int mc_layers(struct mc *m, const struct toml_value *v, struct mesh_worker *w)
{
	if (v->type != TOML_ARRAY || toml_len(v) != 2 || toml_at(v, 0)->type != TOML_INTEGER ||
	    toml_at(v, 1)->type != TOML_INTEGER)
		return MC_FAIL(m, v,
			       "expected [start, end]: two integers, the worker running "
			       "layers start to end - 1");
	int64_t a = toml_at(v, 0)->u.i, b = toml_at(v, 1)->u.i;
	if (a < 0 || b > FENCE_MAX_LAYERS || a >= b)
		return MC_FAIL(m, v,
			       "[%lld, %lld] is not a range of layers: it needs 0 <= start < "
			       "end <= %d",
			       (long long)a, (long long)b, FENCE_MAX_LAYERS);
	w->pinned = true;
	w->layer_start = (int32_t)a;
	w->layer_end = (int32_t)b;
	return 0;
}

/* A worker's cache types: its own kv_type_* over [model]'s, key by key. Its sliding layers take
 * its kv_type_k / kv_type_v unless it or [model] names sliding types: the rule of [model], one
 * level down, so a worker that sets only kv_type_k = "q8_0" stores K in q8_0 on every layer. */
static int mc_worker_kv(struct mc *m, const struct toml_value *t, struct mesh_worker *w)
{
	const struct kv_types *model = &m->cfg->kv;
	int rc;
	w->kv.global = model->global;
	if ((rc = MC_DTYPE(m, t, "kv_type_k", kv_types, &w->kv.global.k)) != 0 ||
	    (rc = MC_DTYPE(m, t, "kv_type_v", kv_types, &w->kv.global.v)) != 0)
		return rc;
	w->kv.swa.k = m->k_swa_given ? model->swa.k : w->kv.global.k;
	w->kv.swa.v = m->v_swa_given ? model->swa.v : w->kv.global.v;
	if ((rc = MC_DTYPE(m, t, "kv_type_k_swa", kv_types, &w->kv.swa.k)) != 0 ||
	    (rc = MC_DTYPE(m, t, "kv_type_v_swa", kv_types, &w->kv.swa.v)) != 0)
		return rc;
	w->own_kv = memcmp(&w->kv, model, sizeof w->kv) != 0;
	return 0;
}

static int mc_worker(struct mc *m, const struct toml_value *t, struct mesh_worker *w)
{
	static const char *const keys[] = {
		"name",         "data",          "control",       "http",
		"memory_limit", "speed",         "layers",        "backend",
		"device",       "threads",       "kernels",       "kv_type_k",
		"kv_type_v",    "kv_type_k_swa", "kv_type_v_swa", NULL};
	static const char *const backends[] = {"cpu", "cuda", NULL};
	static const char *const kernel_sets[] = {"auto", "scalar", "amx", NULL};
	int rc = toml_expect(m->doc, t, TOML_TABLE, m->d);
	if (rc != 0)
		return rc;
	w->line = t->line;
	w->speed = 1.0;
	w->threads = 1;
	int backend = MESH_BACKEND_CPU, kernels = MESH_KERNELS_AUTO;
	bool given;
	if ((rc = mc_keys(m, t, "[[worker]]", keys)) != 0 ||
	    (rc = mc_str(m, t, "name", "a unique name, e.g. \"w0\"", &w->name)) != 0 ||
	    (rc = mc_address(m, t, "data",
			     "the worker's data-plane PULL address, e.g. "
			     "\"ipc:///tmp/layermesh/w0.data\"",
			     &w->data)) != 0 ||
	    (rc = mc_address(m, t, "control",
			     "the worker's control-plane REP address, e.g. "
			     "\"ipc:///tmp/layermesh/w0.ctl\"",
			     &w->control)) != 0 ||
	    (rc = mc_hostport(m, t, "http", "the worker's health server, e.g. \"127.0.0.1:9100\"",
			      &w->http)) != 0 ||
	    (rc = mc_size(m, t, "memory_limit", &w->memory_limit, &given)) != 0 ||
	    (rc = mc_choice(m, t, "backend", backends, &backend)) != 0 ||
	    (rc = mc_int(m, t, "device", 0, 255, &w->device)) != 0 ||
	    (rc = mc_int(m, t, "threads", 1, 1024, &w->threads)) != 0 ||
	    (rc = mc_choice(m, t, "kernels", kernel_sets, &kernels)) != 0)
		return rc;
	w->kernels = (enum mesh_kernels)kernels;
	/* A CUDA worker without one gets its device's free memory, found when the plan is made. */
	if (!given && backend != MESH_BACKEND_CUDA)
		return mc_missing(m, t, "memory_limit",
				  "everything the worker may allocate, e.g. \"128MiB\"");
	size_t n = strlen(w->name);
	if (n > MESH_NAME_MAX ||
	    strspn(w->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			    "0123456789._-") != n)
		return MC_FAIL(m, toml_get(t, "name"),
			       "a worker name is 1 to %d of A-Z a-z 0-9 . _ - (it names files and "
			       "log lines)",
			       MESH_NAME_MAX);
	w->backend = (enum mesh_backend)backend;
	if (toml_get(t, "device") != NULL && w->backend != MESH_BACKEND_CUDA)
		return MC_FAIL(m, toml_get(t, "device"), "only for backend = \"cuda\"");
	const struct toml_value *sp = toml_get(t, "speed");
	if (sp != NULL) {
		if (sp->type != TOML_INTEGER && sp->type != TOML_FLOAT)
			return MC_FAIL(m, sp, "expected a number, found %s",
				       toml_type_name(sp->type));
		w->speed = sp->type == TOML_INTEGER ? (double)sp->u.i : sp->u.f;
		if (!(w->speed > 0.0) || !isfinite(w->speed))
			return MC_FAIL(m, sp, "must be a positive finite number, not %g", w->speed);
	}
	const struct toml_value *ly = toml_get(t, "layers");
	if (ly != NULL && (rc = mc_layers(m, ly, w)) != 0)
		return rc;
	return mc_worker_kv(m, t, w);
}

static int mc_workers(struct mc *m)
{
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *a = toml_get(m->doc->root, "worker");
	if (a == NULL)
		return lm_fail(m->d, LM_ECONFIG,
			       "%s: no [[worker]]: a mesh needs at least one worker", m->doc->name);
	if (a->type == TOML_TABLE)
		return MC_FAIL(m, a,
			       "write [[worker]] (an array of tables, one per worker), not "
			       "[worker]");
	int rc = toml_expect(m->doc, a, TOML_ARRAY, m->d);
	if (rc != 0)
		return rc;
	size_t n = toml_len(a);
	if (n == 0)
		return MC_FAIL(m, a, "a mesh needs at least one worker");
	if (n > MESH_MAX_WORKERS)
		return MC_FAIL(m, a, "%zu workers; at most %d", n, MESH_MAX_WORKERS);
	cfg->workers = calloc(n, sizeof *cfg->workers);
	if (cfg->workers == NULL)
		return lm_fail(m->d, LM_ENOMEM, "%s: out of memory", m->doc->name);
	cfg->n_workers = (int32_t)n;
	for (size_t i = 0; i < n; i++)
		if ((rc = mc_worker(m, toml_at(a, i), &cfg->workers[i])) != 0)
			return rc;
	return 0;
}

/* ---- checks across sections --------------------------------------------------------------- */

/* One listening endpoint, reduced to what decides whether two of them collide. */
struct mc_endpoint {
	const struct toml_value *v;
	char kind;        /* 'i' ipc, 'p' inproc, 't' TCP (tcp://, tls+tcp:// and HTTP) */
	const char *host; /* TCP: host part; else the path or name */
	size_t host_len;
	long port;
};

static void mc_endpoint_of(const char *s, bool http, struct mc_endpoint *e)
{
	if (!http && strncmp(s, "ipc://", 6) == 0) {
		e->kind = 'i';
		e->host = s + 6;
		e->host_len = strlen(e->host);
		return;
	}
	if (!http && strncmp(s, "inproc://", 9) == 0) {
		e->kind = 'p';
		e->host = s + 9;
		e->host_len = strlen(e->host);
		return;
	}
	const char *hp = http ? s : strstr(s, "://") + 3;
	const char *colon = strrchr(hp, ':');
	e->kind = 't';
	e->host = hp;
	e->host_len = (size_t)(colon - hp);
	e->port = strtol(colon + 1, NULL, 10);
}

static bool mc_wildcard(const struct mc_endpoint *e)
{
	static const char *const any[] = {"*", "0.0.0.0", "[::]"};
	for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
		if (e->host_len == strlen(any[i]) && memcmp(e->host, any[i], e->host_len) == 0)
			return true;
	return false;
}

static bool mc_collide(const struct mc_endpoint *a, const struct mc_endpoint *b)
{
	if (a->kind != b->kind)
		return false;
	if (a->kind == 't') {
		if (a->port != b->port)
			return false;
		if (mc_wildcard(a) || mc_wildcard(b))
			return true;
	}
	return a->host_len == b->host_len && memcmp(a->host, b->host, a->host_len) == 0;
}

static int mc_check_endpoints(struct mc *m)
{
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *co = toml_get(m->doc->root, "coordinator");
	const struct toml_value *ws = toml_get(m->doc->root, "worker");
	size_t n = 2 + 3 * (size_t)cfg->n_workers, k = 0;
	struct mc_endpoint *e = calloc(n, sizeof *e);
	if (e == NULL)
		return lm_fail(m->d, LM_ENOMEM, "%s: out of memory", m->doc->name);
	/* The coordinator's default HTTP endpoint has no value in the file to point at. */
	if (toml_get(co, "http") != NULL) {
		mc_endpoint_of(cfg->http, true, &e[k]);
		e[k++].v = toml_get(co, "http");
	}
	mc_endpoint_of(cfg->data_in, false, &e[k]);
	e[k++].v = toml_get(co, "data_in");
	for (int32_t j = 0; j < cfg->n_workers; j++) {
		const struct toml_value *t = toml_at(ws, (size_t)j);
		mc_endpoint_of(cfg->workers[j].data, false, &e[k]);
		e[k++].v = toml_get(t, "data");
		mc_endpoint_of(cfg->workers[j].control, false, &e[k]);
		e[k++].v = toml_get(t, "control");
		mc_endpoint_of(cfg->workers[j].http, true, &e[k]);
		e[k++].v = toml_get(t, "http");
	}
	struct mc_endpoint def;
	mc_endpoint_of(cfg->http, true, &def);
	int rc = 0;
	for (size_t i = 0; i < k && rc == 0; i++) {
		if (toml_get(co, "http") == NULL && mc_collide(&def, &e[i]))
			rc = MC_FAIL(
				m, e[i].v,
				"collides with the coordinator's default HTTP endpoint %s (set "
				"[coordinator] http)",
				cfg->http);
		for (size_t j = 0; j < i && rc == 0; j++) {
			if (!mc_collide(&e[i], &e[j]))
				continue;
			char other[128];
			toml_path(e[j].v, other, sizeof other);
			rc = MC_FAIL(m, e[i].v, "the same endpoint as %s (line %d)", other,
				     (int)e[j].v->line);
		}
	}
	free(e);
	return rc;
}

static bool mc_loopback(const char *hp)
{
	return strncmp(hp, "127.", 4) == 0 || strncmp(hp, "localhost:", 10) == 0 ||
	       strncmp(hp, "[::1]:", 6) == 0;
}

static int mc_check(struct mc *m)
{
	struct mesh_config *cfg = m->cfg;
	const struct toml_value *ws = toml_get(m->doc->root, "worker");
	/* Names. */
	for (int32_t i = 0; i < cfg->n_workers; i++)
		for (int32_t j = 0; j < i; j++)
			if (strcmp(cfg->workers[i].name, cfg->workers[j].name) == 0)
				return MC_FAIL(m, toml_get(toml_at(ws, (size_t)i), "name"),
					       "'%s' is already the name of worker[%d] (line %d)",
					       cfg->workers[i].name, (int)j,
					       (int)cfg->workers[j].line);
	/* Pinned layers go with the pinned strategy, on every worker. */
	for (int32_t i = 0; i < cfg->n_workers; i++) {
		const struct toml_value *t = toml_at(ws, (size_t)i);
		if (cfg->strategy == FENCE_PINNED && !cfg->workers[i].pinned)
			return mc_missing(m, t, "layers",
					  "the pinned strategy needs [start, end] on every worker");
		if (cfg->strategy != FENCE_PINNED && cfg->workers[i].pinned)
			return MC_FAIL(
				m, toml_get(t, "layers"),
				"only allowed when [plan] strategy = \"pinned\" (it is \"%s\")",
				fence_strategy_name(cfg->strategy));
	}
	int rc = mc_check_endpoints(m);
	if (rc != 0)
		return rc;
	/* TLS material exactly when some address needs it. */
	const struct toml_value *tls_user = NULL;
	const struct toml_value *co = toml_get(m->doc->root, "coordinator");
	if (strncmp(cfg->data_in, "tls+tcp://", 10) == 0)
		tls_user = toml_get(co, "data_in");
	for (int32_t i = 0; i < cfg->n_workers && tls_user == NULL; i++) {
		const struct toml_value *t = toml_at(ws, (size_t)i);
		if (strncmp(cfg->workers[i].data, "tls+tcp://", 10) == 0)
			tls_user = toml_get(t, "data");
		else if (strncmp(cfg->workers[i].control, "tls+tcp://", 10) == 0)
			tls_user = toml_get(t, "control");
	}
	if (tls_user != NULL && cfg->tls_ca_file == NULL)
		return MC_FAIL(m, tls_user,
			       "uses tls+tcp://, but there is no [tls] table (ca_file, cert_file, "
			       "key_file)");
	if (tls_user == NULL && cfg->tls_ca_file != NULL)
		return MC_FAIL(m, toml_get(m->doc->root, "tls"),
			       "[tls] is set, but no address uses tls+tcp://: traffic would not be "
			       "encrypted");
	/* Secure by default off the host: a plane that leaves loopback in the clear lets anyone
	 * who reaches a worker forge ring messages, so it is asked for in so many words. */
	char hosts[200];
	if (!cfg->insecure && mesh_config_plain_hosts(cfg, hosts, sizeof hosts, NULL) > 0)
		return lm_fail(
			m->d, LM_ECONFIG,
			"%s: the control and data planes reach %s over plain tcp://, where "
			"anyone who can reach a worker can forge ring messages: use "
			"tls+tcp:// with a [tls] table, or set [coordinator] insecure = true "
			"to run in the clear anyway",
			m->doc->name, hosts);
	/* An API reachable from elsewhere must ask for a token. */
	if (!mc_loopback(cfg->http) && cfg->auth_token == NULL)
		return MC_FAIL(
			m, toml_get(co, "http"),
			"the API listens beyond loopback on %s: set [coordinator] auth_token "
			"or bind it to 127.0.0.1",
			cfg->http);
	return 0;
}

/* ---- entry points ------------------------------------------------------------------------- */

static int mc_read(struct mesh_config *cfg, const struct toml_doc *doc, const char *path,
		   lm_diag *d)
{
	cfg->slots = 16;
	cfg->kv = kv_types_uniform(LM_F32, LM_F32);
	cfg->wire_dtype = LM_F32;
	cfg->max_batch = 64;
	cfg->log_level = LM_LOG_INFO;
	cfg->max_queued = 256;
	cfg->http_read_timeout = 10;
	cfg->http_idle_timeout = 30;
	cfg->max_connections = 512;
	cfg->ui = true;
	cfg->request_timeout_ms = MESH_REQUEST_TIMEOUT_MS;
	cfg->worker_timeout_ms = MESH_WORKER_TIMEOUT_MS;
	cfg->prefix_cache = true;
	cfg->seed = -1;
	cfg->strategy = FENCE_BALANCED;
	cfg->path = strdup(path);
	cfg->http = strdup("127.0.0.1:8080");
	const char *slash = strrchr(path, '/');
	cfg->dir = slash == NULL   ? strdup(".")
		   : slash == path ? strdup("/")
				   : strndup(path, (size_t)(slash - path));
	if (cfg->path == NULL || cfg->http == NULL || cfg->dir == NULL)
		return lm_fail(d, LM_ENOMEM, "%s: out of memory", path);
	struct mc m = {.doc = doc, .d = d, .cfg = cfg};
	static const char *const sections[] = {"model", "coordinator", "plan", "speculative",
					       "tls",   "worker",      NULL};
	int rc;
	if ((rc = mc_keys(&m, doc->root, "mesh.toml", sections)) != 0 || (rc = mc_model(&m)) != 0 ||
	    (rc = mc_coordinator(&m)) != 0 || (rc = mc_plan(&m)) != 0 ||
	    (rc = mc_speculative(&m)) != 0 || (rc = mc_tls(&m)) != 0 || (rc = mc_workers(&m)) != 0)
		return rc;
	return mc_check(&m);
}

int mesh_config_parse(struct mesh_config *cfg, const char *path, const char *text, size_t len,
		      lm_diag *d)
{
	memset(cfg, 0, sizeof *cfg);
	struct toml_doc doc;
	int rc = toml_parse(&doc, path, text, len, d);
	if (rc != 0)
		return rc;
	rc = mc_read(cfg, &doc, path, d);
	toml_doc_fini(&doc);
	if (rc != 0)
		mesh_config_fini(cfg);
	return rc;
}

int mesh_config_load(struct mesh_config *cfg, const char *path, lm_diag *d)
{
	memset(cfg, 0, sizeof *cfg);
	struct toml_doc doc;
	int rc = toml_parse_file(&doc, path, d);
	if (rc != 0)
		return rc;
	rc = mc_read(cfg, &doc, path, d);
	toml_doc_fini(&doc);
	if (rc != 0)
		mesh_config_fini(cfg);
	return rc;
}

void mesh_config_fini(struct mesh_config *cfg)
{
	if (cfg == NULL)
		return;
	for (int32_t i = 0; cfg->workers != NULL && i < cfg->n_workers; i++) {
		free(cfg->workers[i].name);
		free(cfg->workers[i].data);
		free(cfg->workers[i].control);
		free(cfg->workers[i].http);
	}
	free(cfg->workers);
	free(cfg->path);
	free(cfg->dir);
	free(cfg->model_path);
	free(cfg->http);
	free(cfg->data_in);
	free(cfg->auth_token);
	free(cfg->chat_template);
	for (int32_t i = 0; cfg->cors_origins != NULL && i < cfg->n_cors; i++)
		free(cfg->cors_origins[i]);
	free(cfg->cors_origins);
	free(cfg->tls_ca_file);
	free(cfg->tls_cert_file);
	free(cfg->tls_key_file);
	free(cfg->draft_model);
	memset(cfg, 0, sizeof *cfg);
}

const struct mesh_worker *mesh_config_worker(const struct mesh_config *cfg, const char *name)
{
	for (int32_t i = 0; i < cfg->n_workers; i++)
		if (strcmp(cfg->workers[i].name, name) == 0)
			return &cfg->workers[i];
	return NULL;
}

const char *mesh_kernels_name(enum mesh_kernels k)
{
	return k == MESH_KERNELS_SCALAR ? "scalar" : k == MESH_KERNELS_AMX ? "amx" : "auto";
}

/* ------------------------------------------------------------------ hosts */

/* The host of a tcp:// or tls+tcp:// address into out ("" for others); true when it is one. */
static bool mc_url_host(const char *url, bool *tls, char *out, size_t cap)
{
	const char *h = NULL;
	*tls = false;
	if (strncmp(url, "tcp://", 6) == 0) {
		h = url + 6;
	} else if (strncmp(url, "tls+tcp://", 10) == 0) {
		h = url + 10;
		*tls = true;
	}
	out[0] = '\0';
	if (h == NULL)
		return false;
	const char *colon = strrchr(h, ':');
	size_t n = colon != NULL ? (size_t)(colon - h) : strlen(h);
	snprintf(out, cap, "%.*s", (int)n, h);
	return true;
}

static bool mc_host_loopback(const char *h)
{
	return strncmp(h, "127.", 4) == 0 || strcmp(h, "localhost") == 0 ||
	       strcmp(h, "[::1]") == 0 || strcmp(h, "::1") == 0;
}

/* Adds h to the set seen[*n] (of up to cap names) unless it is there; true when it was new. */
static bool mc_add_host(char (*seen)[256], int32_t *n, int32_t cap, const char *h)
{
	for (int32_t i = 0; i < *n; i++)
		if (strcmp(seen[i], h) == 0)
			return false;
	if (*n < cap)
		snprintf(seen[(*n)++], 256, "%s", h);
	return true;
}

int32_t mesh_config_plain_hosts(const struct mesh_config *cfg, char *hosts, size_t cap,
				int32_t *worker_hosts)
{
	enum { MAXH = 64 };
	char(*plain)[256] = calloc(2 * MAXH, sizeof *plain), (*all)[256] = plain + MAXH;
	int32_t n_plain = 0, n_all = 0;
	if (plain == NULL)
		return 0;
	char h[256];
	bool tls;
	for (int32_t i = 0; i <= cfg->n_workers; i++) {
		const char *urls[2] = {i < cfg->n_workers ? cfg->workers[i].data : cfg->data_in,
				       i < cfg->n_workers ? cfg->workers[i].control : NULL};
		for (int k = 0; k < 2 && urls[k] != NULL; k++) {
			bool net = mc_url_host(urls[k], &tls, h, sizeof h);
			bool local = !net || mc_host_loopback(h);
			if (i < cfg->n_workers)
				mc_add_host(all, &n_all, MAXH, local ? "" : h);
			if (net && !tls && !local)
				mc_add_host(plain, &n_plain, MAXH, h);
		}
	}
	if (hosts != NULL && cap > 0) {
		size_t at = 0;
		hosts[0] = '\0';
		for (int32_t i = 0; i < n_plain && at + 1 < cap; i++)
			at += (size_t)snprintf(hosts + at, cap - at, "%s%s", i ? ", " : "",
					       plain[i]);
	}
	if (worker_hosts != NULL)
		*worker_hosts = n_all;
	free(plain);
	return n_plain;
}

/* ------------------------------------------------------------------ ephemeral ports */

int mesh_local_port_range(const char *path, int32_t *lo, int32_t *hi)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return LM_ENOENT;
	char line[64];
	bool got = fgets(line, sizeof line, f) != NULL;
	fclose(f);
	long a, b;
	char tail;
	/* Two port numbers, separated by blanks (the kernel writes a tab). */
	if (!got || sscanf(line, "%ld %ld %c", &a, &b, &tail) != 2 || a < 1 || b > 65535 || a > b)
		return LM_EFORMAT;
	*lo = (int32_t)a;
	*hi = (int32_t)b;
	return 0;
}

int32_t mesh_config_ephemeral_ports(const struct mesh_config *cfg, int32_t lo, int32_t hi,
				    char *out, size_t cap)
{
	int32_t n = 0;
	size_t at = 0;
	if (out != NULL && cap > 0)
		out[0] = '\0';
	for (int32_t i = 0; i <= cfg->n_workers; i++) {
		const bool coord = i == cfg->n_workers;
		const struct mesh_worker *w = coord ? NULL : &cfg->workers[i];
		const char *const addrs[3] = {coord ? cfg->data_in : w->data,
					      coord ? cfg->http : w->http,
					      coord ? NULL : w->control};
		static const char *const what[3] = {"data", "http", "control"};
		for (int k = 0; k < 3; k++) {
			struct mc_endpoint e;
			if (addrs[k] == NULL)
				continue;
			mc_endpoint_of(addrs[k], k == 1, &e);
			if (e.kind != 't' || e.port < lo || e.port > hi)
				continue;
			n++;
			if (out != NULL && at < cap)
				at += (size_t)snprintf(
					out + at, cap - at, "%s%s%s %s %s", n > 1 ? ", " : "",
					coord ? "[coordinator]" : "worker ", coord ? "" : w->name,
					coord && k == 0 ? "data_in" : what[k], addrs[k]);
		}
	}
	return n;
}

#include "common/wire/transport.h"

#include <errno.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"

/* Certificates and keys are a few KiB; anything past this is not one. */
#define TRANSPORT_PEM_MAX (1 << 20)

bool lm_url_is_tls(const char *url)
{
	return strncmp(url, "tls+tcp", 7) == 0;
}

/* The whole of a PEM file as a NUL-terminated string; the caller frees it. */
static int transport_read_pem(const char *path, const char *what, char **out, lm_diag *d)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return lm_fail(d, LM_EIO, "TLS %s %s: %s", what, path, strerror(errno));
	char *buf = malloc(TRANSPORT_PEM_MAX + 1);
	size_t n = buf == NULL ? 0 : fread(buf, 1, TRANSPORT_PEM_MAX + 1, f);
	int bad = ferror(f);
	fclose(f);
	if (buf == NULL)
		return lm_fail(d, LM_ENOMEM, "TLS %s %s: out of memory", what, path);
	if (bad || n > TRANSPORT_PEM_MAX || n == 0 || memchr(buf, '\0', n) != NULL) {
		free(buf);
		return lm_fail(d, LM_ECONFIG, "TLS %s %s: %s", what, path,
			       bad ? "read error" : "not a PEM file");
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

/* A TLS configuration of the given mode with the mesh's files; the caller frees it. */
static int transport_tls(const struct lm_tls *tls, nng_tls_mode mode, const char *url,
			 nng_tls_config **out, lm_diag *d)
{
	nng_tls_config *cfg = NULL;
	int rv;
	if (tls == NULL || tls->ca_file == NULL || tls->cert_file == NULL || tls->key_file == NULL)
		return lm_fail(d, LM_ECONFIG,
			       "%s needs TLS certificates ([tls] ca_file, cert_file, key_file)",
			       url);
	if ((rv = nng_tls_config_alloc(&cfg, mode)) != 0)
		return lm_fail(d, LM_EIO, "TLS: %s", nng_strerror(rv));
	if ((rv = nng_tls_config_ca_file(cfg, tls->ca_file)) != 0) {
		nng_tls_config_free(cfg);
		return lm_fail(d, LM_ECONFIG, "TLS CA file %s: %s", tls->ca_file, nng_strerror(rv));
	}
	char *cert = NULL, *key = NULL;
	int rc = transport_read_pem(tls->cert_file, "certificate", &cert, d);
	if (rc == 0)
		rc = transport_read_pem(tls->key_file, "key", &key, d);
	if (rc == 0 && (rv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0)
		rc = lm_fail(d, LM_ECONFIG, "TLS certificate %s with key %s: %s", tls->cert_file,
			     tls->key_file, nng_strerror(rv));
	if (key != NULL)
		memset(key, 0, strlen(key)); /* no copy of the private key lingers in the heap */
	free(key);
	free(cert);
	if (rc != 0) {
		nng_tls_config_free(cfg);
		return rc;
	}
	if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
	    (mode == NNG_TLS_MODE_CLIENT &&
	     (rv = nng_tls_config_server_name(cfg, LM_TLS_SERVER_NAME)) != 0)) {
		nng_tls_config_free(cfg);
		return lm_fail(d, LM_EIO, "TLS: %s", nng_strerror(rv));
	}
	*out = cfg;
	return 0;
}

int lm_listen(nng_socket s, const char *url, const struct lm_tls *tls, nng_listener *out,
	      lm_diag *d)
{
	nng_listener l;
	nng_tls_config *cfg = NULL;
	int rv, rc;
	if ((rv = nng_listener_create(&l, s, url)) != 0)
		return lm_fail(d, LM_EIO, "cannot listen at %s: %s", url, nng_strerror(rv));
	if (lm_url_is_tls(url)) {
		if ((rc = transport_tls(tls, NNG_TLS_MODE_SERVER, url, &cfg, d)) != 0) {
			nng_listener_close(l);
			return rc;
		}
		rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
		nng_tls_config_free(cfg); /* the listener holds its own reference */
		if (rv != 0) {
			nng_listener_close(l);
			return lm_fail(d, LM_EIO, "%s: TLS: %s", url, nng_strerror(rv));
		}
	}
	if ((rv = nng_listener_start(l, 0)) != 0) {
		nng_listener_close(l);
		return lm_fail(d, LM_EIO, "cannot listen at %s: %s", url, nng_strerror(rv));
	}
	if (out != NULL)
		*out = l;
	return 0;
}

int lm_dial(nng_socket s, const char *url, const struct lm_tls *tls, nng_dialer *out, lm_diag *d)
{
	nng_dialer dl;
	nng_tls_config *cfg = NULL;
	int rv, rc;
	if ((rv = nng_dialer_create(&dl, s, url)) != 0)
		return lm_fail(d, LM_EIO, "cannot dial %s: %s", url, nng_strerror(rv));
	if (lm_url_is_tls(url)) {
		if ((rc = transport_tls(tls, NNG_TLS_MODE_CLIENT, url, &cfg, d)) != 0) {
			nng_dialer_close(dl);
			return rc;
		}
		rv = nng_dialer_set_ptr(dl, NNG_OPT_TLS_CONFIG, cfg);
		nng_tls_config_free(cfg);
		if (rv != 0) {
			nng_dialer_close(dl);
			return lm_fail(d, LM_EIO, "%s: TLS: %s", url, nng_strerror(rv));
		}
	}
	if ((rv = nng_dialer_start(dl, NNG_FLAG_NONBLOCK)) != 0) {
		nng_dialer_close(dl);
		return lm_fail(d, LM_EIO, "cannot dial %s: %s", url, nng_strerror(rv));
	}
	if (out != NULL)
		*out = dl;
	return 0;
}

/* One close in flight: whoever of the closing thread and the waiter finishes last frees it. */
struct lm_closer {
	nng_socket s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done, abandoned;
};

static void lm_closer_free(struct lm_closer *c)
{
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
}

static void *lm_closer_main(void *arg)
{
	struct lm_closer *c = arg;
	nng_close(c->s);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	bool last = c->abandoned;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (last)
		lm_closer_free(c);
	return NULL;
}

int lm_close_bounded(nng_socket s, int timeout_ms)
{
	struct lm_closer *c = calloc(1, sizeof *c);
	pthread_t t;
	if (c == NULL) {
		nng_close(s);
		return 0;
	}
	c->s = s;
	pthread_mutex_init(&c->mu, NULL);
	lm_cond_init(&c->cv);
	if (pthread_create(&t, NULL, lm_closer_main, c) != 0) {
		lm_closer_free(c);
		nng_close(s);
		return 0;
	}
	pthread_detach(t);
	struct timespec ts = lm_deadline(timeout_ms);
	int rv = 0;
	pthread_mutex_lock(&c->mu);
	while (!c->done && rv == 0)
		rv = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	bool done = c->done;
	c->abandoned = !done;
	pthread_mutex_unlock(&c->mu);
	if (!done)
		return LM_ETIMEOUT;
	lm_closer_free(c);
	return 0;
}

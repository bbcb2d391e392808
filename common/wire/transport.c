#include "common/wire/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"

/* Certificates and keys are a few KiB; anything past this is not one. */
#define TRANSPORT_PEM_MAX (1 << 20)
/* An ipc:// path fits sockaddr_un's 108 bytes; its directory name fits this. */
#define PATH_MAX_IPC 256
/* How long the stale check waits for a live listener's handshake header (lm_ipc_clear_stale). */
#define TRANSPORT_STALE_WAIT_MS 250

bool lm_url_is_tls(const char *url)
{
	return strncmp(url, "tls+tcp", 7) == 0;
}

/* The whole of a PEM file as a NUL-terminated string; the caller frees it. */
static int transport_read_pem(const char *path, const char *what, char **out, lm_diag *d)
{
	/* Opened without blocking and held to a regular file: a FIFO here must not hang a start. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0)
		return lm_fail(d, LM_EIO, "TLS %s %s: %s", what, path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return lm_fail(d, LM_ECONFIG, "TLS %s %s: not a regular file", what, path);
	}
	FILE *f = fdopen(fd, "rb");
	if (f == NULL) {
		close(fd);
		return lm_fail(d, LM_EIO, "TLS %s %s: %s", what, path, strerror(errno));
	}
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

/* ------------------------------------------------------------------ ipc:// */

int lm_ipc_clear_stale(const char *url, bool *removed, lm_diag *d)
{
	struct stat st;
	*removed = false;
	if (strncmp(url, "ipc://", 6) != 0)
		return 0;
	const char *path = url + 6;
	if (lstat(path, &st) != 0)
		return 0; /* nothing there */
	if (!S_ISSOCK(st.st_mode))
		return lm_fail(d, LM_EIO, "%s exists and is not a socket: not replacing it", path);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return lm_fail(d, LM_ERANGE, "ipc path %s is too long", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return lm_fail(d, LM_EOS, "socket: %s", strerror(errno));
	int r = connect(fd, (struct sockaddr *)&sa, sizeof sa), e = errno;
	if (r == 0) {
		/* Someone listens. Let its SP handshake get as far as its own header before this
		 * end closes: NNG 1.5.2 stops a listener for good whose header write meets a peer
		 * that has gone (listen_guard.h). */
		char head[8];
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, TRANSPORT_STALE_WAIT_MS) == 1)
			(void)!recv(fd, head, sizeof head, MSG_DONTWAIT);
	}
	close(fd);
	if (r == 0 || (e != ECONNREFUSED && e != ENOENT))
		return lm_fail(d, LM_EBUSY,
			       "ipc socket %s is in use by a running process (another mesh?): not "
			       "removing it",
			       path);
	if (e == ECONNREFUSED && unlink(path) == 0)
		*removed = true;
	return 0;
}

/* The directory of an ipc socket: made 0700 when missing; refused when another user owns it
 * (unless it is a sticky system directory such as /tmp); a warning when others may enter. */
static int transport_ipc_dir(const char *path, lm_diag *d)
{
	char dir[PATH_MAX_IPC];
	const char *slash = strrchr(path, '/');
	if (slash == NULL)
		return 0; /* relative to the working directory: whatever it is */
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof dir)
		return lm_fail(d, LM_ERANGE, "ipc path %s is too long", path);
	memcpy(dir, path, n);
	dir[n] = '\0';
	struct stat st;
	if (stat(dir, &st) != 0) {
		if (errno != ENOENT || mkdir(dir, 0700) != 0)
			return lm_fail(d, LM_EIO, "cannot make the ipc directory %s: %s", dir,
				       strerror(errno));
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return lm_fail(d, LM_EIO, "%s, the directory of ipc socket %s, is not a directory",
			       dir, path);
	bool sticky_system = st.st_uid == 0 && (st.st_mode & S_ISVTX);
	if (st.st_uid != geteuid() && !sticky_system)
		return lm_fail(
			d, LM_EACCES,
			"ipc directory %s belongs to uid %u, not this user (%u): another user "
			"could replace the mesh's sockets there",
			dir, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & 077)
		lm_warn("ipc socket %s is in %s, which other users may enter: the socket is "
			"owner-only, but a directory of this user's alone (mode 0700) keeps its "
			"name "
			"safe too",
			path, dir);
	return 0;
}

/* Before listening at an ipc:// url: its directory, and a stale socket left at the path. */
static int transport_ipc_prepare(const char *url, lm_diag *d)
{
	bool removed = false;
	int rc = transport_ipc_dir(url + 6, d);
	if (rc == 0)
		rc = lm_ipc_clear_stale(url, &removed, d);
	if (rc == 0 && removed)
		lm_info("removed the stale ipc socket %s (nothing listened on it)", url + 6);
	return rc;
}

int lm_listen(nng_socket s, const char *url, const struct lm_tls *tls, nng_listener *out,
	      lm_diag *d)
{
	nng_listener l;
	nng_tls_config *cfg = NULL;
	int rv, rc;
	bool ipc = strncmp(url, "ipc://", 6) == 0;
	if (ipc && (rc = transport_ipc_prepare(url, d)) != 0)
		return rc;
	if ((rv = nng_listener_create(&l, s, url)) != 0)
		return lm_fail(d, LM_EIO, "cannot listen at %s: %s", url, nng_strerror(rv));
	/* Owner-only from the moment it exists: NNG chmods the file right after bind(2), and
	 * the directory keeps others out of that moment. */
	if (ipc && (rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) != 0) {
		nng_listener_close(l);
		return lm_fail(d, LM_EIO, "%s: cannot make the socket owner-only: %s", url,
			       nng_strerror(rv));
	}
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

/* Set when a close ran past its bound, cleared when any close finishes. NNG closes sockets
 * through one reaper thread: when a close is stuck there, so is every later one, and a
 * coordinator that closes sixty control sockets one after another would wait the whole bound
 * for each (seen: a stop that took over 20 s under ASan). While it is set, closes wait at most
 * LM_CLOSE_STUCK_MS. */
static atomic_bool transport_close_stuck;

static void *lm_closer_main(void *arg)
{
	struct lm_closer *c = arg;
	nng_close(c->s);
	atomic_store(&transport_close_stuck, false);
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
	if (atomic_load(&transport_close_stuck) && timeout_ms > LM_CLOSE_STUCK_MS)
		timeout_ms = LM_CLOSE_STUCK_MS;
	struct timespec ts = lm_deadline(timeout_ms);
	int rv = 0;
	pthread_mutex_lock(&c->mu);
	while (!c->done && rv == 0)
		rv = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	bool done = c->done;
	c->abandoned = !done;
	pthread_mutex_unlock(&c->mu);
	if (!done) {
		atomic_store(&transport_close_stuck, true);
		return LM_ETIMEOUT;
	}
	lm_closer_free(c);
	return 0;
}

/* transport.h — listening and dialling NNG sockets the mesh's way: ipc://, tcp:// and
 * tls+tcp:// alike, with mutual TLS when the mesh has certificates.
 *
 * For tls+tcp:// both ends present a certificate signed by the mesh's CA and check the other's:
 * a listener requires a client certificate (NNG_TLS_AUTH_MODE_REQUIRED), a dialer checks the
 * server's and the name in it, LM_TLS_SERVER_NAME. So only holders of a key the mesh's CA signed
 * can join the data ring or speak on the control plane. Other schemes ignore `tls`. */
#ifndef LM_TRANSPORT_H
#define LM_TRANSPORT_H

#include <nng/nng.h>
#include <stdbool.h>

#include "common/base/err.h"

/* The name every mesh certificate carries (CN or subjectAltName DNS). */
#define LM_TLS_SERVER_NAME "layermesh"

struct lm_tls {
	const char *ca_file;   /* PEM CA chain that signs every peer; NULL: no TLS configured */
	const char *cert_file; /* this process's certificate (PEM) */
	const char *key_file;  /* its private key (PEM) */
};

/* Whether url needs TLS (tls+tcp://). */
bool lm_url_is_tls(const char *url);

/* Listens at url. LM_ECONFIG when url is tls+tcp:// and tls has no files.
 *
 * ipc:// is made for the mesh's user alone: the socket file is created owner-only (0600, NNG's
 * NNG_OPT_IPC_PERMISSIONS), in a directory the listener creates 0700 when it is missing. A
 * directory that exists is used as it is, with a warning when other users may enter it (the
 * socket stays 0600, but its name can be removed or raced there), and refused when it belongs
 * to another user and is not a sticky system directory such as /tmp. A socket file already at
 * the path is replaced only when it is stale (nothing listens on it: the listener says so in
 * the log); one a live process listens on is LM_EBUSY, and a file that is not a socket is
 * never touched (LM_EIO). */
int lm_listen(nng_socket s, const char *url, const struct lm_tls *tls, nng_listener *out,
	      lm_diag *d);

/* For an ipc:// url: removes its socket file when it is stale, that is when connecting to it
 * is refused (no process listens there any more); a file that a live process listens on, or
 * that is not a socket, is left alone. *removed says whether it did. 0, or LM_EBUSY (in use),
 * LM_EIO (not a socket) with d saying so; other schemes: 0, nothing done. */
int lm_ipc_clear_stale(const char *url, bool *removed, lm_diag *d);
/* Dials url without waiting: NNG keeps retrying until the peer listens. out may be NULL. */
int lm_dial(nng_socket s, const char *url, const struct lm_tls *tls, nng_dialer *out, lm_diag *d);

/* Closes s, waiting at most timeout_ms. NNG 1.5.2 can block in nng_close for good when a pipe
 * is torn down at the wrong moment (a REQ socket whose peer was killed mid-exchange, upstream
 * nanomsg/nng#648 and #1543); then the close goes on in a detached thread, this returns
 * LM_ETIMEOUT and the socket is left to the process's exit. 0 once closed. */
int lm_close_bounded(nng_socket s, int timeout_ms);
/* The bound the mesh's processes give a close. Once a close has run past its bound, NNG's
 * reaper is taken for stuck and later closes wait at most LM_CLOSE_STUCK_MS, until one
 * finishes again. */
#define LM_CLOSE_MS       2000
#define LM_CLOSE_STUCK_MS 100

#endif

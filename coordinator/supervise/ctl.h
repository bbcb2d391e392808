/* ctl.h — the coordinator's side of one worker's control plane: a REQ socket dialled to the
 * worker's REP address, and the exchanges the coordinator makes on it (HELLO, ASSIGN/READY,
 * TRACE, the redeploy verbs). Used by the keepers (one per worker) and by rollouts (which talk
 * to a serving worker and to its replacement at once, each over its own connection).
 *
 * A connection belongs to one thread. A REQ socket keeps at most one request outstanding: an
 * exchange that fails (timeout, closed) leaves it unusable, so every helper here reopens the
 * socket before returning such a failure. Messages name the worker. */
#ifndef LM_CTL_H
#define LM_CTL_H

#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/transport.h"
#include "common/wire/wire.h"

struct ctl_conn {
	const struct lm_tls *tls; /* for tls+tcp:// control addresses; set before ctl_open */
	nng_socket s;
	bool open;
	char name[64];  /* the worker's, for messages */
	char addr[300]; /* its control address */
};

/* (Re)opens the connection to addr; the dial retries in the background until the worker
 * listens. */
int ctl_open(struct ctl_conn *c, const char *name, const char *addr, lm_diag *d);
/* Closes; harmless on a zeroed or closed connection. It blocks: it waits up to LM_CLOSE_MS
 * (common/wire/transport.h) for NNG to finish the close, which then goes on in the background
 * with a warning logged. ctl_open and every failed exchange (which reopen through it) may
 * wait as long. */
void ctl_close(struct ctl_conn *c);

/* Sends req and waits for the reply of type `want` (an ERROR reply becomes a failure with the
 * worker's message and code). The caller frees *reply. */
int ctl_call(struct ctl_conn *c, const struct wire_buf *req, uint32_t want, nng_msg **reply,
	     int timeout_ms, lm_diag *d);

/* HELLO: the worker's identity, its protocol version checked against this build's (LM_EVERSION
 * naming both) and, when it already holds a slice and fingerprint is not 0, its model's
 * fingerprint against the mesh's (LM_EFINGERPRINT naming both). */
int ctl_hello(struct ctl_conn *c, uint64_t fingerprint, struct wire_hello *hello, int timeout_ms,
	      lm_diag *d);
/* HELLO until the worker answers or `alive` (when not NULL) says its process is gone, for at
 * most timeout_ms. */
int ctl_hello_wait(struct ctl_conn *c, uint64_t fingerprint, struct wire_hello *hello,
		   int timeout_ms, bool (*alive)(void *arg), void *arg, lm_diag *d);
/* ctl_open, then HELLO until the worker answers (at most timeout_ms): a control connection
 * to a running worker that has carried one round trip. A fresh tls+tcp:// connection can stall
 * in NNG's TLS layer with the first request swallowed; HELLO is harmless to repeat, and every
 * unanswered one re-dials, so the request that matters goes over a connection known to work. */
int ctl_connect(struct ctl_conn *c, const char *name, const char *addr, uint64_t fingerprint,
		int timeout_ms, lm_diag *d);
/* ASSIGN and wait for READY (loading may take long: `alive` is asked every second); READY's
 * fingerprint is checked against `fingerprint` (LM_EFINGERPRINT naming both). */
int ctl_assign(struct ctl_conn *c, const struct wire_assign *a, uint64_t fingerprint,
	       struct wire_ready *ready, int timeout_ms, bool (*alive)(void *arg), void *arg,
	       lm_diag *d);

/* TRACE of one slot: arm it (and receive what was recorded before, which the caller may
 * ignore: pass rows NULL) or fetch what it recorded since. *rows receives the recorded row
 * count and *data a malloc'd copy of the payload the caller frees. */
int ctl_trace(struct ctl_conn *c, uint64_t fingerprint, const struct wire_limits *lim, int32_t slot,
	      int32_t *rows, void **data, size_t *bytes, lm_diag *d);
/* One slot's rows as KV_EXPORT gives them and KV_IMPORT takes them: `len` positions, written up
 * to `hi` (its high-water mark, >= len: engine/kv_cache.h), and the rows themselves, `bytes`
 * of them in the cache's own types. */
struct ctl_kv_rows {
	int32_t len, hi;
	void *data; /* ctl_kv_export: malloc'd, the caller frees */
	size_t bytes;
};
/* KV_EXPORT of one slot into *rows. */
int ctl_kv_export(struct ctl_conn *c, uint64_t fingerprint, const struct wire_limits *lim,
		  int32_t slot, struct ctl_kv_rows *rows, lm_diag *d);
/* KV_IMPORT of one slot's rows, its high-water mark with them. */
int ctl_kv_import(struct ctl_conn *c, uint64_t fingerprint, int32_t slot,
		  const struct ctl_kv_rows *rows, lm_diag *d);
/* REPOINT: the worker sends the ring's messages to `next` from now on. */
int ctl_repoint(struct ctl_conn *c, uint64_t fingerprint, const char *next, lm_diag *d);
/* STATUS: the worker's status document (worker/health.h), which the caller frees; NULL with d
 * saying why (no answer within timeout_ms, an ERROR, not a JSON object). */
cJSON *ctl_status(struct ctl_conn *c, uint64_t fingerprint, int timeout_ms, lm_diag *d);

#endif

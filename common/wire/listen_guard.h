/* listen_guard.h — a listener that keeps accepting: the listening side of link.h's NNG fault.
 *
 * NNG 1.5.2 can stop a listener for good. When a peer connects and is gone before the listener
 * writes its half of the SP handshake, the write fails with EPIPE, which NNG makes NNG_ECLOSED
 * (posix_debug.c), and the listener takes that for its own close: "no further action"
 * (core/listener.c, listener_accept_cb; fixed upstream by nanomsg/nng#1518 in 1.6.0). From then
 * on the kernel queues every new connection and nobody accepts it. Seen in the mesh as a
 * worker that printed "listening" and then answered no HELLO for 60 s, on a machine loaded so
 * that the coordinator's first short tries gave up (closing their sockets) before the worker
 * had accepted them, and as a running coordinator's data_in stopped by the stale-socket check
 * of a second `up` (lm_ipc_clear_stale connects and closes). Reproduced at will on ipc:// by
 * connecting and closing while the listening process is stopped (SIGSTOP): test_dataplane.sh.
 *
 * A guard watches one listener from a thread of its own. NNG counts a listener's failed accepts
 * ("other" in its statistics: a handshake cut short, or anything unexpected). When that count
 * moves, the guard dials the listener with a socket of the peer's protocol; if no pipe comes up
 * within LM_LISTEN_PROBE_MS, it closes the listener and listens at the same address again,
 * and says so in the log. A replaced listener takes its pipes with it, but a dead one has none
 * worth keeping: its peers redial (NNG's dialers and lm_link do). An address of every interface
 * (0.0.0.0, [::]) is dialled as the local host, as Linux does.
 */
#ifndef LM_LISTEN_GUARD_H
#define LM_LISTEN_GUARD_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/transport.h"

/* How often a guard reads its listener's count of failed accepts. */
#define LM_LISTEN_GUARD_MS 250
/* How long its probe waits for a pipe before the listener is taken for stopped. */
#define LM_LISTEN_PROBE_MS 3000

struct lm_listen_guard {
	nng_socket s;
	struct lm_tls tls;
	int (*peer_open)(nng_socket *); /* opens a socket of the protocol that dials s */
	char url[256];
	char what[32];      /* for the log: "control", "data", "data_in" */
	pthread_mutex_t mu; /* guards what follows */
	pthread_cond_t cv;
	nng_listener l; /* the listener now */
	bool listening; /* l is open */
	bool stop;
	uint64_t failures_seen; /* the listener's failed accepts when last read */
	bool failing;           /* the last attempt to listen again failed */
	pthread_t thread;
	bool running;
	atomic_bool probe_up; /* set by the probe's pipe callback */
};

/* Listens on s at url (lm_listen) and starts watching the listener. peer_open opens a socket
 * that may dial s (nng_req0_open for a REP socket, nng_push0_open for PULL). what names the
 * listener in the log. 0, or lm_listen's error (nothing is left running). */
int lm_listen_guarded(struct lm_listen_guard *g, nng_socket s, const char *url,
		      const struct lm_tls *tls, int (*peer_open)(nng_socket *), const char *what,
		      lm_diag *d);
/* Stops watching (joins the thread); the listener stays open and closes with its socket. Safe
 * on a guard that was zeroed and never started, and twice. */
void lm_listen_guard_stop(struct lm_listen_guard *g);

#endif

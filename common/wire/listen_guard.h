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
 * moves, the guard connects to the listener with a plain socket and speaks the SP handshake as
 * the listener's peers do. NNG's transport goes on with the handshakes of a stopped listener, so
 * the handshake completes either way; if the listener then does not count the connection as
 * accepted within LM_LISTEN_PROBE_MS, the guard closes the listener and listens at the same
 * address again, and says so in the log. A probe that gets no handshake (a loaded machine, a
 * process out of descriptors) decides nothing, and probes are LM_LISTEN_PROBE_GAP_MS apart at
 * least. Workers guard their control and data listeners. The coordinator does not guard its
 * data_in: in a 60-worker mesh under ASan, probing it (with an NNG socket, and with a plain one)
 * left NNG 1.5.2's reaper stuck in the coordinator, and every later close hung; the cause of
 * the one stop seen there, the stale-socket check, no longer cuts a handshake. tls+tcp://
 * listeners are not guarded (the probe would have to speak TLS); the fault was not seen there.
 * A replaced listener takes its pipes with it, but a dead one has none worth keeping: its peers
 * redial (NNG's dialers and lm_link do). An address of every interface (0.0.0.0, [::]) is
 * connected to as the local host, as Linux does.
 */
#ifndef LM_LISTEN_GUARD_H
#define LM_LISTEN_GUARD_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/transport.h"

/* The SP protocol numbers of the sockets that dial the mesh's listeners: REQ (control) and
 * PUSH (data), as their handshakes announce them. */
#define LM_SP_REQ0  0x30
#define LM_SP_PUSH0 0x50

/* How often a guard reads its listener's count of failed accepts. */
#define LM_LISTEN_GUARD_MS 250
/* How long its probe waits for its pipe, and then for the listener to count it. */
#define LM_LISTEN_PROBE_MS 3000
/* How often a probe reads the listener's count of accepted connections (a snapshot of all of
 * NNG's statistics each time). */
#define LM_LISTEN_PROBE_POLL_MS 50
/* The least time between two probes of one listener. */
#define LM_LISTEN_PROBE_GAP_MS 2000

struct lm_listen_guard {
	nng_socket s;
	struct lm_tls tls;
	uint16_t peer_proto; /* the NNG protocol number of the sockets that dial s */
	char url[256];
	char what[32];      /* for the log: "control", "data" */
	pthread_mutex_t mu; /* guards what follows */
	pthread_cond_t cv;
	nng_listener l; /* the listener now */
	bool listening; /* l is open */
	bool stop;
	uint64_t failures_seen; /* the listener's failed accepts when last read */
	bool failing;           /* the last attempt to listen again failed */
	pthread_t thread;
	bool running;
};

/* Listens on s at url (lm_listen) and starts watching the listener. peer_proto is the protocol
 * of the sockets that dial s (LM_SP_REQ0 for a REP socket, LM_SP_PUSH0 for PULL). what names the
 * listener in the log. 0, or lm_listen's error (nothing is left running). */
int lm_listen_guarded(struct lm_listen_guard *g, nng_socket s, const char *url,
		      const struct lm_tls *tls, uint16_t peer_proto, const char *what, lm_diag *d);
/* Stops watching (joins the thread); the listener stays open and closes with its socket. Safe
 * on a guard that was zeroed and never started, and twice. */
void lm_listen_guard_stop(struct lm_listen_guard *g);

#endif

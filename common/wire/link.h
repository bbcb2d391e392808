/* link.h — a PUSH socket's dial to the one peer it sends to, kept alive.
 *
 * NNG 1.5.2 can stop redialling for good. A connection attempt that ends in NNG_ECLOSED is
 * taken for the dialer's own close ("No further action", core/dialer.c, dialer_connect_cb), and
 * NNG_ECLOSED is also what it makes of a transport's EPIPE and EBADF (posix_debug.c): a peer
 * that goes away in the middle of the handshake can leave the dialer with no pipe and no attempt
 * pending, and nothing ever tries again. Seen in the mesh as a worker that, after its successor
 * was killed and restarted, never connected to the new process: no socket towards it, NNG's
 * threads idle, and further restarts of the successor changed nothing (the ring stalled for
 * good behind it).
 *
 * A link counts the socket's pipes. lm_link_send is one nng_sendmsg; when it times out and the
 * socket has had no pipe for LM_LINK_REDIAL_MS, the link closes its dialer and dials afresh. A
 * working dialer reconnects within LM_LINK_RECONN_MAX_MS (200 ms), so this touches only
 * a dialer that is stuck or one whose peer is away, where redialling costs nothing; and with no
 * pipe, nothing in flight is lost.
 *
 * One thread sends; any thread may ask lm_link_pipes or re-point the link (lm_link_dial).
 */
#ifndef LM_LINK_H
#define LM_LINK_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/transport.h"

/* How long a sender waits with no pipe before the dialer is replaced. */
#define LM_LINK_REDIAL_MS 2000
/* NNG's own redial times, which the link sets on its socket: a working dialer tries again
 * within LM_LINK_RECONN_MAX_MS, well inside LM_LINK_REDIAL_MS. */
#define LM_LINK_RECONN_MIN_MS 10
#define LM_LINK_RECONN_MAX_MS 200
/* Pipes tracked at once (one peer: one pipe, and one more while it is replaced). */
#define LM_LINK_MAX_PIPES 16

struct lm_link {
	nng_socket s;
	const struct lm_tls *tls; /* outlives the link */
	pthread_mutex_t mu;
	bool dialed;                       /* under mu: dl is open */
	nng_dialer dl;                     /* under mu */
	char url[256];                     /* under mu: where dl dials */
	uint32_t pipes[LM_LINK_MAX_PIPES]; /* under mu: the ids of the connected pipes */
	int n_pipes;
	int64_t alone_since_ms; /* under mu: since when it has had no pipe (lm_now_ms) */
	uint64_t redials;       /* under mu: dialers replaced */
	uint32_t streak;        /* under mu: of which since the last pipe came up */
	bool inited;
};

/* Watches s (a PUSH socket, open, not yet dialled) for pipes and sets its redial times
 * (LM_LINK_RECONN_*). 0 or LM_EIO. */
int lm_link_init(struct lm_link *l, nng_socket s, const struct lm_tls *tls, lm_diag *d);
/* Dials url, the first time or instead of the address dialled so far (a re-point): the old
 * dialer closes once the new one is started; on failure the old one is kept. */
int lm_link_dial(struct lm_link *l, const char *url, lm_diag *d);
/* One nng_sendmsg on the socket (its NNG_OPT_SENDTIMEO bounds it), healing the dialer as above
 * when it times out. NNG's result: 0 (m is sent), else m is still the caller's. */
int lm_link_send(struct lm_link *l, nng_msg *m);
/* The pipes connected now, and the dialers replaced so far. */
int lm_link_pipes(struct lm_link *l);
uint64_t lm_link_redials(struct lm_link *l);
/* After the socket is closed (its pipe callbacks are done with the link). */
void lm_link_fini(struct lm_link *l);

#endif

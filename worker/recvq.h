/* recvq.h — the worker's data-ring receiver: takes messages off the PULL socket as they arrive,
 * stamps each with its arrival time, and hands them to the data thread in order.
 *
 * Why: a blocking receive on the data thread only takes the next message after the previous
 * one is computed and sent, so the time a message waits behind another (the queueing the
 * `receive` latency reports) would be invisible. An NNG receive aio is kept posted instead; its
 * callback stamps the message and appends it to a small bounded queue. When the queue is full
 * the aio is not re-posted until the data thread takes a message, so backpressure still reaches
 * the predecessor through NNG. Order is kept: there is never more than one receive posted.
 */
#ifndef LM_RECVQ_H
#define LM_RECVQ_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/wire.h"

/* Messages held at most: the ring's figure (common/wire/wire.h), which the planner prices. The
 * ring keeps at most a few batches in flight (one per stage), so this rarely fills; when it
 * does, further messages wait inside NNG unstamped. */
#define RECVQ_CAP WIRE_RING_QUEUED

struct recvq {
	nng_socket sock;
	nng_aio *aio;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	nng_msg *msg[RECVQ_CAP]; /* under mu: a ring of `count` messages from `head` */
	uint64_t at_ns[RECVQ_CAP];
	int head, count;
	bool posted; /* a receive is outstanding (under mu) */
	int err;     /* under mu: the error that ended receiving (NNG_ECLOSED ...), 0 while open */
	bool inited;
};

/* Starts receiving on s (a PULL socket, already listening). */
int recvq_init(struct recvq *q, nng_socket s);
/* The next message and its arrival time (lm_now_ns clock). Waits at most timeout_ms: returns
 * 0, NNG_ETIMEDOUT, or the error that ended receiving (NNG_ECLOSED once the socket is closed). */
int recvq_pop(struct recvq *q, nng_msg **m, uint64_t *arrived_ns, int timeout_ms);
/* Messages waiting to be taken now. */
int recvq_len(struct recvq *q);
/* Stops receiving (waits for the callback) and frees queued messages. Close the socket first or
 * not: either way nothing is left. Harmless on a zeroed struct. */
void recvq_fini(struct recvq *q);

#endif

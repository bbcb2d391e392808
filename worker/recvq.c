/* recvq.c — the stamped receive queue of the data ring. See recvq.h. */
#include "worker/recvq.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/metrics.h"

static void recvq_cb(void *arg)
{
	struct recvq *q = arg;
	int rv = nng_aio_result(q->aio);
	bool repost = false;
	pthread_mutex_lock(&q->mu);
	q->posted = false;
	if (rv == 0) {
		int tail = (q->head + q->count) % RECVQ_CAP;
		q->msg[tail] = nng_aio_get_msg(q->aio);
		q->at_ns[tail] = lm_now_ns();
		q->count++;
	} else if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
		q->err = rv;
	}
	/* Other failures (out of memory on one message) do not end receiving. */
	if (q->err == 0 && q->count < RECVQ_CAP) {
		q->posted = true;
		repost = true;
	}
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	if (repost)
		nng_recv_aio(q->sock, q->aio);
}

int recvq_init(struct recvq *q, nng_socket s)
{
	memset(q, 0, sizeof *q);
	q->sock = s;
	int rv = nng_aio_alloc(&q->aio, recvq_cb, q);
	if (rv != 0)
		return rv;
	lm_cond_init(&q->cv);
	pthread_mutex_init(&q->mu, NULL);
	q->inited = true;
	q->posted = true;
	nng_recv_aio(q->sock, q->aio);
	return 0;
}

int recvq_pop(struct recvq *q, nng_msg **m, uint64_t *arrived_ns, int timeout_ms)
{
	struct timespec until = lm_deadline(timeout_ms);
	int rc = 0;
	bool repost = false;
	pthread_mutex_lock(&q->mu);
	while (q->count == 0 && q->err == 0 && rc == 0)
		if (pthread_cond_timedwait(&q->cv, &q->mu, &until) == ETIMEDOUT)
			rc = NNG_ETIMEDOUT;
	if (q->count > 0) {
		*m = q->msg[q->head];
		*arrived_ns = q->at_ns[q->head];
		q->head = (q->head + 1) % RECVQ_CAP;
		q->count--;
		rc = 0;
		/* The queue was full and the receive not posted: there is room again. */
		if (!q->posted && q->err == 0) {
			q->posted = true;
			repost = true;
		}
	} else if (q->err != 0) {
		rc = q->err;
	}
	pthread_mutex_unlock(&q->mu);
	if (repost)
		nng_recv_aio(q->sock, q->aio);
	return rc;
}

int recvq_len(struct recvq *q)
{
	if (!q->inited)
		return 0;
	pthread_mutex_lock(&q->mu);
	int n = q->count;
	pthread_mutex_unlock(&q->mu);
	return n;
}

void recvq_fini(struct recvq *q)
{
	if (q == NULL || !q->inited)
		return;
	nng_aio_stop(q->aio); /* cancels the receive and waits for the callback */
	nng_aio_free(q->aio);
	for (int i = 0; i < q->count; i++)
		nng_msg_free(q->msg[(q->head + i) % RECVQ_CAP]);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	memset(q, 0, sizeof *q);
}

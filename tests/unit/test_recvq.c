/* The stamped receive queue of the data ring (worker/recvq.h), over inproc:// pairs. */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/base/metrics.h"
#include "worker/recvq.h"

struct pair {
	nng_socket push, pull;
};

static void pair_open(struct pair *p, const char *url)
{
	cr_assert_eq(nng_pull0_open(&p->pull), 0);
	cr_assert_eq(nng_listen(p->pull, url, NULL, 0), 0);
	cr_assert_eq(nng_push0_open(&p->push), 0);
	nng_socket_set_int(p->push, NNG_OPT_SENDBUF, 64);
	nng_socket_set_ms(p->push, NNG_OPT_SENDTIMEO, 1000);
	cr_assert_eq(nng_dial(p->push, url, NULL, 0), 0);
}

static void send_u32(nng_socket s, uint32_t v)
{
	cr_assert_eq(nng_send(s, &v, sizeof v, 0), 0);
}

static uint32_t body_u32(nng_msg *m)
{
	uint32_t v;
	cr_assert_eq(nng_msg_len(m), sizeof v);
	memcpy(&v, nng_msg_body(m), sizeof v);
	return v;
}

/* Messages queued once at least n are, or after 2 s: how many. */
static int wait_queued(struct recvq *q, int n)
{
	int count = 0;
	for (int i = 0; i < 400; i++) {
		pthread_mutex_lock(&q->mu);
		count = q->count;
		pthread_mutex_unlock(&q->mu);
		if (count >= n)
			break;
		usleep(5000);
	}
	return count;
}

Test(recvq, messages_come_out_in_order_with_their_arrival_times, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-order");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	uint64_t before = lm_now_ns();
	for (uint32_t i = 0; i < 5; i++)
		send_u32(p.push, i);
	uint64_t last = before;
	for (uint32_t i = 0; i < 5; i++) {
		nng_msg *m;
		uint64_t at;
		cr_assert_eq(recvq_pop(&q, &m, &at, 2000), 0);
		cr_expect_eq(body_u32(m), i);
		cr_expect_geq(at, last);
		cr_expect_leq(at, lm_now_ns());
		last = at;
		nng_msg_free(m);
	}
	nng_close(p.push);
	nng_close(p.pull);
	recvq_fini(&q);
}

/* A message that waits in the queue keeps the time it arrived, not the time it was taken. */
Test(recvq, the_stamp_is_the_arrival_not_the_pop, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-stamp");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	send_u32(p.push, 7);
	/* Wait until it is queued, then some more. */
	wait_queued(&q, 1);
	usleep(50000);
	nng_msg *m;
	uint64_t at;
	cr_assert_eq(recvq_pop(&q, &m, &at, 2000), 0);
	cr_expect_geq(lm_now_ns() - at, 50000000ull, "waited %llu ns",
		      (unsigned long long)(lm_now_ns() - at));
	nng_msg_free(m);
	nng_close(p.push);
	nng_close(p.pull);
	recvq_fini(&q);
}

Test(recvq, an_empty_queue_times_out, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-timeout");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	nng_msg *m = NULL;
	uint64_t at, t0 = lm_now_ns();
	cr_expect_eq(recvq_pop(&q, &m, &at, 60), NNG_ETIMEDOUT);
	cr_expect_geq(lm_now_ns() - t0, 55000000ull);
	cr_expect_null(m);
	nng_close(p.push);
	nng_close(p.pull);
	recvq_fini(&q);
}

/* A full queue stops taking messages (they wait in NNG: backpressure) and resumes as the data
 * thread takes them; none is lost or reordered. */
Test(recvq, a_full_queue_stops_receiving_until_drained, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-full");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	const uint32_t n = RECVQ_CAP + 6;
	for (uint32_t i = 0; i < n; i++)
		send_u32(p.push, i);
	int count = 0;
	bool posted = true;
	for (int i = 0; i < 400 && (count < RECVQ_CAP || posted); i++) {
		usleep(5000);
		pthread_mutex_lock(&q.mu);
		count = q.count;
		posted = q.posted;
		pthread_mutex_unlock(&q.mu);
	}
	cr_expect_eq(count, RECVQ_CAP);
	cr_expect_not(posted, "a receive is still posted with the queue full");
	for (uint32_t i = 0; i < n; i++) {
		nng_msg *m;
		uint64_t at;
		cr_assert_eq(recvq_pop(&q, &m, &at, 2000), 0, "message %u", i);
		cr_expect_eq(body_u32(m), i);
		nng_msg_free(m);
	}
	nng_close(p.push);
	nng_close(p.pull);
	recvq_fini(&q);
}

/* Closing the socket ends receiving: what was queued still comes out, then NNG_ECLOSED. */
Test(recvq, closing_ends_receiving, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-close");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	send_u32(p.push, 1);
	nng_msg *m;
	uint64_t at;
	cr_assert_eq(recvq_pop(&q, &m, &at, 2000), 0);
	nng_msg_free(m);
	nng_close(p.pull);
	cr_expect_eq(recvq_pop(&q, &m, &at, 2000), NNG_ECLOSED);
	nng_close(p.push);
	recvq_fini(&q);
	recvq_fini(&q); /* harmless twice */
}

/* Messages still queued at the end are freed by fini (ASan's leak check holds it to that). */
Test(recvq, fini_frees_what_is_queued, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-fini");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	for (uint32_t i = 0; i < 3; i++)
		send_u32(p.push, i);
	cr_expect_eq(wait_queued(&q, 3), 3);
	recvq_fini(&q);
	nng_close(p.pull);
	nng_close(p.push);
}

/* A message sent while the data thread waits comes out of that wait, and once it has one (it
 * computes) the receive is posted again, so the next arrival is queued and stamped while
 * nobody pops. */
struct late_send {
	nng_socket s;
	uint32_t v;
	int delay_us;
	int rv; /* the send's result: the thread asserts nothing (Criterion's asserts belong to
		 * the test's own thread) */
};

static void *send_late(void *arg)
{
	struct late_send *l = arg;
	usleep((useconds_t)l->delay_us);
	l->rv = nng_send(l->s, &l->v, sizeof l->v, 0);
	return NULL;
}

Test(recvq, a_waiting_pop_gets_a_late_message_and_receiving_resumes, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-idle");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	struct late_send l = {p.push, 41, 30000, -1};
	pthread_t t;
	pthread_create(&t, NULL, send_late, &l);
	nng_msg *m;
	uint64_t at, t0 = lm_now_ns();
	cr_assert_eq(recvq_pop(&q, &m, &at, 2000), 0);
	cr_expect_eq(body_u32(m), 41);
	cr_expect_geq(at - t0, 25000000ull, "stamped %llu ns after the pop began",
		      (unsigned long long)(at - t0));
	nng_msg_free(m);
	pthread_join(t, NULL);
	cr_expect_eq(l.rv, 0);
	pthread_mutex_lock(&q.mu);
	bool posted = q.posted;
	pthread_mutex_unlock(&q.mu);
	cr_expect(posted, "no receive is posted while the data thread computes");
	send_u32(p.push, 42);
	cr_expect_eq(wait_queued(&q, 1), 1, "the arrival while computing was not queued");
	cr_assert_eq(recvq_pop(&q, &m, &at, 2000), 0);
	cr_expect_eq(body_u32(m), 42);
	nng_msg_free(m);
	nng_close(p.push);
	nng_close(p.pull);
	recvq_fini(&q);
}

/* Arrivals racing the data thread's takes: a sender at uneven intervals, a consumer that
 * sometimes "computes" and sometimes waits at once. Every message comes out once, in order.
 * (Also ran against a variant that cancels the posted receive to receive on the data thread
 * while idle; see bench/RESULTS.md, "The hop".) */
struct burst {
	nng_socket s;
	uint32_t n;
	int rv; /* the first failed send's result, 0 if none */
};

static void *send_bursts(void *arg)
{
	struct burst *b = arg;
	for (uint32_t i = 0; i < b->n && b->rv == 0; i++) {
		b->rv = nng_send(b->s, &i, sizeof i, 0);
		if (i % 7 == 3)
			usleep(200 + (i * 37) % 400);
	}
	return NULL;
}

Test(recvq, racing_arrivals_lose_and_reorder_nothing, .timeout = 10)
{
	struct pair p;
	struct recvq q;
	pair_open(&p, "inproc://recvq-race");
	cr_assert_eq(recvq_init(&q, p.pull), 0);
	struct burst b = {p.push, 3000, 0};
	pthread_t t;
	pthread_create(&t, NULL, send_bursts, &b);
	uint32_t got = 0, wrong = 0;
	int rv = 0;
	while (got < b.n && rv == 0) {
		nng_msg *m;
		uint64_t at;
		if ((rv = recvq_pop(&q, &m, &at, 5000)) != 0)
			break;
		wrong += body_u32(m) != got;
		nng_msg_free(m);
		if (got++ % 5 == 0)
			usleep(100 + (got * 53) % 300);
	}
	cr_expect_eq(rv, 0, "after %u messages", got);
	cr_expect_eq(wrong, 0, "%u of %u out of place", wrong, got);
	pthread_join(t, NULL);
	cr_expect_eq(b.rv, 0);
	nng_msg *m = NULL;
	uint64_t at;
	cr_expect_eq(recvq_pop(&q, &m, &at, 50), NNG_ETIMEDOUT);
	nng_close(p.push);
	nng_close(p.pull);
	recvq_fini(&q);
}

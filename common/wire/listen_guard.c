/* listen_guard.c — a listener that keeps accepting. See listen_guard.h. */
#include "common/wire/listen_guard.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"

/* A scope's child statistic called name, or NULL. */
static nng_stat *guard_stat_child(nng_stat *scope, const char *name)
{
	for (nng_stat *c = nng_stat_child(scope); c != NULL; c = nng_stat_next(c))
		if (strcmp(nng_stat_name(c), name) == 0)
			return c;
	return NULL;
}

/* One of the listener's counters (NNG's statistics: "accept", "other"...); 0 when it cannot
 * be read. NNG 1.5.2's nng_stat_find_listener finds the first listener of the process whatever
 * its id (its scope search recurses without the id), hence the walk here. */
static uint64_t guard_stat(nng_listener l, const char *name)
{
	nng_stat *all = NULL, *id, *st;
	uint64_t n = 0;
	if (nng_stats_get(&all) != 0)
		return 0;
	for (nng_stat *c = nng_stat_child(all); c != NULL; c = nng_stat_next(c)) {
		if (strcmp(nng_stat_name(c), "listener") != 0 ||
		    (id = guard_stat_child(c, "id")) == NULL ||
		    nng_stat_value(id) != (uint64_t)nng_listener_id(l))
			continue;
		if ((st = guard_stat_child(c, name)) != NULL)
			n = nng_stat_value(st);
		break;
	}
	nng_stats_free(all);
	return n;
}

/* A plain stream connection to url (ipc:// or tcp://, whose host may be a name), made within
 * LM_LISTEN_PROBE_MS; -1 when it cannot be made. An address of every interface is the local
 * host to connect(2) on Linux. */
static int guard_connect(const char *url)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	memset(&ss, 0, sizeof ss);
	if (strncmp(url, "ipc://", 6) == 0) {
		struct sockaddr_un *un = (struct sockaddr_un *)&ss;
		if (strlen(url + 6) >= sizeof un->sun_path)
			return -1;
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, url + 6);
		len = sizeof *un;
	} else if (strncmp(url, "tcp://", 6) == 0) {
		char host[256];
		const char *h = url + 6, *colon = strrchr(h, ':');
		if (colon == NULL || (size_t)(colon - h) >= sizeof host)
			return -1;
		if (h[0] == '[' && colon > h + 1 && colon[-1] == ']')
			snprintf(host, sizeof host, "%.*s", (int)(colon - h - 2), h + 1);
		else
			snprintf(host, sizeof host, "%.*s", (int)(colon - h), h);
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
		if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai) != 0 || ai == NULL)
			return -1;
		if (ai->ai_addrlen <= sizeof ss) {
			memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
			len = ai->ai_addrlen;
		}
		freeaddrinfo(ai);
		if (len == 0)
			return -1;
	} else {
		return -1;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int err = 0;
		socklen_t el = sizeof err;
		if (errno != EINPROGRESS || poll(&pfd, 1, LM_LISTEN_PROBE_MS) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

/* Reads or writes all n bytes within LM_LISTEN_PROBE_MS; whether it did. */
static bool guard_io(int fd, void *buf, size_t n, bool out)
{
	int64_t until = lm_now_ms() + LM_LISTEN_PROBE_MS;
	size_t done = 0;
	while (done < n) {
		int64_t left = until - lm_now_ms();
		struct pollfd pfd = {.fd = fd, .events = out ? POLLOUT : POLLIN};
		if (left <= 0 || poll(&pfd, 1, (int)left) != 1)
			return false;
		ssize_t r = out ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
				: recv(fd, (char *)buf + done, n - done, 0);
		if (r <= 0)
			return false;
		done += (size_t)r;
	}
	return true;
}

/* Whether the listener has stopped. A probe connects with a plain socket and speaks the SP
 * handshake as a peer of the listener's socket would (NNG's transport goes on with the
 * handshakes of a stopped listener); then the listener must count one more accepted
 * connection within LM_LISTEN_PROBE_MS. A probe that gets no handshake tells nothing (a loaded
 * machine, a process out of descriptors): the listener is left as it is. The probe is a plain
 * socket, so it adds no NNG socket or dialer to the process it watches. It closes only after
 * both headers have crossed, so it never cuts a handshake short itself. */
static bool guard_stopped(struct lm_listen_guard *g, nng_listener l)
{
	uint64_t accepted = guard_stat(l, "accept");
	int fd = guard_connect(g->url);
	if (fd < 0)
		return false;
	unsigned char theirs[8], mine[8] = {0,
					    'S',
					    'P',
					    0,
					    (unsigned char)(g->peer_proto >> 8),
					    (unsigned char)(g->peer_proto & 0xff),
					    0,
					    0};
	bool stopped = false;
	if (guard_io(fd, theirs, sizeof theirs, false) && guard_io(fd, mine, sizeof mine, true)) {
		int64_t until = lm_now_ms() + LM_LISTEN_PROBE_MS;
		stopped = true;
		pthread_mutex_lock(&g->mu);
		while (!g->stop && lm_now_ms() < until) {
			if (guard_stat(l, "accept") != accepted) {
				stopped = false;
				break;
			}
			lm_cond_wait_ms(&g->cv, &g->mu, LM_LISTEN_PROBE_POLL_MS);
		}
		if (g->stop)
			stopped = false;
		pthread_mutex_unlock(&g->mu);
	}
	close(fd);
	return stopped;
}

/* Closes the stopped listener and listens again; on failure (the address is still held) the
 * next round tries again. */
static void guard_relisten(struct lm_listen_guard *g)
{
	lm_diag d = {{0}};
	nng_listener l;
	pthread_mutex_lock(&g->mu);
	if (g->listening) {
		nng_listener_close(g->l);
		g->listening = false;
	}
	pthread_mutex_unlock(&g->mu);
	int rc = lm_listen(g->s, g->url, &g->tls, &l, &d);
	pthread_mutex_lock(&g->mu);
	bool first_failure = rc != 0 && !g->failing;
	if (rc == 0) {
		g->l = l;
		g->listening = true;
		g->failures_seen = 0;
	}
	g->failing = rc != 0;
	pthread_mutex_unlock(&g->mu);
	if (rc == 0)
		lm_warn("%s listener at %s stopped accepting after a peer left in the middle of "
			"its handshake (an NNG 1.5.2 fault); listening there again",
			g->what, g->url);
	else if (first_failure) /* it tries again every LM_LISTEN_GUARD_MS: say it once */
		lm_warn("%s listener at %s: cannot listen again yet (trying on): %s", g->what,
			g->url, lm_diag_str(&d, rc));
}

static void *guard_main(void *arg)
{
	struct lm_listen_guard *g = arg;
	int64_t next_probe = 0;
	pthread_mutex_lock(&g->mu);
	while (!g->stop) {
		lm_cond_wait_ms(&g->cv, &g->mu, LM_LISTEN_GUARD_MS);
		if (g->stop)
			break;
		bool listening = g->listening;
		nng_listener l = g->l;
		uint64_t seen = g->failures_seen;
		pthread_mutex_unlock(&g->mu);
		uint64_t now = listening ? guard_stat(l, "other") : seen;
		bool probe = listening && now != seen && lm_now_ms() >= next_probe;
		bool stopped = !listening || (probe && guard_stopped(g, l));
		if (probe)
			next_probe = lm_now_ms() + LM_LISTEN_PROBE_GAP_MS;
		if (stopped)
			guard_relisten(g);
		pthread_mutex_lock(&g->mu);
		if (probe && !stopped)
			g->failures_seen = now;
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

int lm_listen_guarded(struct lm_listen_guard *g, nng_socket s, const char *url,
		      const struct lm_tls *tls, uint16_t peer_proto, const char *what, lm_diag *d)
{
	memset(g, 0, sizeof *g);
	g->s = s;
	g->tls = *tls;
	g->peer_proto = peer_proto;
	snprintf(g->what, sizeof g->what, "%s", what);
	if (snprintf(g->url, sizeof g->url, "%s", url) >= (int)sizeof g->url)
		return lm_fail(d, LM_ERANGE, "%s address %s is too long", what, url);
	int rc = lm_listen(s, url, tls, &g->l, d);
	if (rc != 0)
		return rc;
	g->listening = true;
	if (lm_url_is_tls(url))
		return 0; /* its probe would have to speak TLS: unguarded (listen_guard.h) */
	g->failures_seen = guard_stat(g->l, "other");
	pthread_mutex_init(&g->mu, NULL);
	lm_cond_init(&g->cv);
	if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
		/* Listening unguarded beats not listening. */
		lm_warn("%s listener at %s: cannot start its guard; it listens unguarded", what,
			url);
		pthread_mutex_destroy(&g->mu);
		pthread_cond_destroy(&g->cv);
		return 0;
	}
	g->running = true;
	return 0;
}

void lm_listen_guard_stop(struct lm_listen_guard *g)
{
	if (!g->running)
		return;
	pthread_mutex_lock(&g->mu);
	g->stop = true;
	pthread_cond_signal(&g->cv);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->thread, NULL);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	g->running = false;
}

/* listen_guard.c — a listener that keeps accepting. See listen_guard.h. */
#include "common/wire/listen_guard.h"

#include <stdio.h>
#include <string.h>

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

static void guard_probe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	(void)ev;
	atomic_store(&((struct lm_listen_guard *)arg)->probe_up, true);
}

/* Whether the listener still accepts: a probe socket dials it, and once the probe's pipe is up
 * (the transport's handshake is done, which NNG goes on doing for a stopped listener) the
 * listener must count one more accepted connection. The probe closes only once connected, or
 * once given up: one that answers never leaves in the middle of a handshake. */
static bool guard_answers(struct lm_listen_guard *g, nng_listener l)
{
	nng_socket p;
	lm_diag d = {{0}};
	if (g->peer_open(&p) != 0)
		return true; /* cannot tell: leave the listener be */
	uint64_t accepted = guard_stat(l, "accept");
	atomic_store(&g->probe_up, false);
	nng_pipe_notify(p, NNG_PIPE_EV_ADD_POST, guard_probe_cb, g);
	bool up = true;
	if (lm_dial(p, g->url, &g->tls, NULL, &d) == 0) {
		int64_t until = lm_now_ms() + LM_LISTEN_PROBE_MS;
		pthread_mutex_lock(&g->mu);
		for (;;) {
			up = atomic_load(&g->probe_up) && guard_stat(l, "accept") != accepted;
			if (up || g->stop || lm_now_ms() >= until)
				break;
			lm_cond_wait_ms(&g->cv, &g->mu, 10);
		}
		if (g->stop)
			up = true; /* stopping: decide nothing */
		pthread_mutex_unlock(&g->mu);
	}
	nng_pipe_notify(p, NNG_PIPE_EV_ADD_POST, NULL, NULL);
	lm_close_bounded(p, LM_CLOSE_MS);
	return up;
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
		bool stopped = !listening || (now != seen && !guard_answers(g, l));
		if (stopped)
			guard_relisten(g);
		pthread_mutex_lock(&g->mu);
		if (!stopped)
			g->failures_seen = now;
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

int lm_listen_guarded(struct lm_listen_guard *g, nng_socket s, const char *url,
		      const struct lm_tls *tls, int (*peer_open)(nng_socket *), const char *what,
		      lm_diag *d)
{
	memset(g, 0, sizeof *g);
	g->s = s;
	g->tls = *tls;
	g->peer_open = peer_open;
	snprintf(g->what, sizeof g->what, "%s", what);
	if (snprintf(g->url, sizeof g->url, "%s", url) >= (int)sizeof g->url)
		return lm_fail(d, LM_ERANGE, "%s address %s is too long", what, url);
	int rc = lm_listen(s, url, tls, &g->l, d);
	if (rc != 0)
		return rc;
	g->listening = true;
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

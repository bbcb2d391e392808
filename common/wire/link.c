/* link.c — a PUSH socket's dial to its one peer, kept alive. See link.h. */
#include "common/wire/link.h"

#include <stdio.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"

/* NNG calls this on its own threads as pipes come and go. REM_POST also comes for pipes that
 * never reached ADD_POST, hence the set of ids rather than a counter. */
static void link_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct lm_link *l = arg;
	uint32_t id = (uint32_t)nng_pipe_id(p);
	pthread_mutex_lock(&l->mu);
	if (ev == NNG_PIPE_EV_ADD_POST && l->n_pipes < LM_LINK_MAX_PIPES) {
		l->pipes[l->n_pipes++] = id;
		l->streak = 0;
	} else if (ev == NNG_PIPE_EV_REM_POST) {
		for (int i = 0; i < l->n_pipes; i++)
			if (l->pipes[i] == id) {
				l->pipes[i] = l->pipes[--l->n_pipes];
				if (l->n_pipes == 0)
					l->alone_since_ms = lm_now_ms();
				break;
			}
	}
	pthread_mutex_unlock(&l->mu);
}

int lm_link_init(struct lm_link *l, nng_socket s, const struct lm_tls *tls, lm_diag *d)
{
	memset(l, 0, sizeof *l);
	l->s = s;
	l->tls = tls;
	l->alone_since_ms = lm_now_ms();
	pthread_mutex_init(&l->mu, NULL);
	l->inited = true;
	nng_socket_set_ms(s, NNG_OPT_RECONNMINT, LM_LINK_RECONN_MIN_MS);
	nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, LM_LINK_RECONN_MAX_MS);
	int rv = nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, link_pipe_cb, l);
	if (rv == 0)
		rv = nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, link_pipe_cb, l);
	if (rv != 0)
		return lm_fail(d, LM_EIO, "cannot watch the connection: %s", nng_strerror(rv));
	return 0;
}

/* Makes dl the link's dialer, for url, and closes the one it replaces. A redial takes only
 * while the link still dials url (it was not re-pointed meanwhile; else dl is closed) and
 * counts, with *streak the redials since the last pipe. Whether dl took. */
static bool link_install(struct lm_link *l, nng_dialer dl, const char *url, bool redial,
			 uint32_t *streak)
{
	pthread_mutex_lock(&l->mu);
	bool take = !redial || strcmp(url, l->url) == 0;
	bool had = l->dialed;
	nng_dialer old = l->dl;
	if (take) {
		l->dl = dl;
		l->dialed = true;
		snprintf(l->url, sizeof l->url, "%s", url);
		if (redial) {
			l->redials++;
			l->streak++;
			l->alone_since_ms = lm_now_ms();
		}
	}
	if (streak != NULL)
		*streak = l->streak;
	pthread_mutex_unlock(&l->mu);
	if (!take)
		nng_dialer_close(dl);
	else if (had)
		nng_dialer_close(old);
	return take;
}

int lm_link_dial(struct lm_link *l, const char *url, lm_diag *d)
{
	nng_dialer dl;
	int rc = lm_dial(l->s, url, l->tls, &dl, d);
	if (rc == 0)
		link_install(l, dl, url, false, NULL);
	return rc;
}

/* Replaces a dialer that has left the socket without a pipe for LM_LINK_REDIAL_MS. */
static void link_heal(struct lm_link *l)
{
	char url[sizeof l->url];
	pthread_mutex_lock(&l->mu);
	int64_t alone = lm_now_ms() - l->alone_since_ms;
	bool due = l->dialed && l->n_pipes == 0 && alone >= LM_LINK_REDIAL_MS;
	snprintf(url, sizeof url, "%s", l->url);
	pthread_mutex_unlock(&l->mu);
	if (!due)
		return;
	lm_diag d = {{0}};
	nng_dialer dl;
	uint32_t streak;
	if (lm_dial(l->s, url, l->tls, &dl, &d) != 0) {
		lm_warn("no connection to %s for %.1f s, and it cannot be dialled afresh: %s", url,
			(double)alone / 1000.0, d.msg);
		return;
	}
	/* One line per absence: a peer that is away for long (restarting, loading) is redialled
	 * every LM_LINK_REDIAL_MS meanwhile. */
	if (link_install(l, dl, url, true, &streak))
		lm_log(streak == 1 ? LM_LOG_INFO : LM_LOG_DEBUG,
		       "no connection to %s for %.1f s: dialling it afresh (and every %.0f s while "
		       "it stays away)",
		       url, (double)alone / 1000.0, LM_LINK_REDIAL_MS / 1000.0);
}

int lm_link_send(struct lm_link *l, nng_msg *m)
{
	int rv = nng_sendmsg(l->s, m, 0);
	if (rv == NNG_ETIMEDOUT)
		link_heal(l);
	return rv;
}

int lm_link_pipes(struct lm_link *l)
{
	if (l == NULL || !l->inited)
		return 0;
	pthread_mutex_lock(&l->mu);
	int n = l->n_pipes;
	pthread_mutex_unlock(&l->mu);
	return n;
}

uint64_t lm_link_redials(struct lm_link *l)
{
	if (l == NULL || !l->inited)
		return 0;
	pthread_mutex_lock(&l->mu);
	uint64_t n = l->redials;
	pthread_mutex_unlock(&l->mu);
	return n;
}

void lm_link_fini(struct lm_link *l)
{
	if (l == NULL || !l->inited)
		return;
	pthread_mutex_destroy(&l->mu);
	memset(l, 0, sizeof *l);
}

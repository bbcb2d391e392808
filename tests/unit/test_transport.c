/* common/transport: URL schemes, TLS configuration errors, and the bounded socket close. */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/wire/transport.h"

Test(transport, tls_scheme)
{
	cr_assert(lm_url_is_tls("tls+tcp://127.0.0.1:5000"));
	cr_assert_not(lm_url_is_tls("tcp://127.0.0.1:5000"));
	cr_assert_not(lm_url_is_tls("ipc:///tmp/x"));
}

Test(transport, tls_without_files_is_a_config_error)
{
	nng_socket s;
	lm_diag d = {{0}};
	struct lm_tls none = {0};
	cr_assert_eq(nng_rep0_open(&s), 0);
	cr_assert_eq(lm_listen(s, "tls+tcp://127.0.0.1:0", &none, NULL, &d), LM_ECONFIG);
	cr_assert_eq(lm_dial(s, "tls+tcp://127.0.0.1:1", &none, NULL, &d), LM_ECONFIG);
	cr_assert_eq(lm_close_bounded(s, 2000), 0);
}

/* A REQ/REP pair over ipc with one exchange done and one request left unanswered: both close
 * within the bound, and a closed socket refuses to send. */
Test(transport, bounded_close_closes)
{
	char url[128];
	snprintf(url, sizeof url, "ipc:///tmp/lm-transport-test-%d", (int)getpid());
	nng_socket rep, req;
	lm_diag d = {{0}};
	cr_assert_eq(nng_rep0_open(&rep), 0);
	cr_assert_eq(nng_req0_open(&req), 0);
	cr_assert_eq(lm_listen(rep, url, NULL, NULL, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_dial(req, url, NULL, NULL, &d), 0, "%s", d.msg);
	nng_socket_set_ms(req, NNG_OPT_SENDTIMEO, 5000);
	nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, 5000);
	char buf[8] = "ping";
	size_t n = sizeof buf;
	cr_assert_eq(nng_send(req, buf, 5, 0), 0);
	cr_assert_eq(nng_recv(rep, buf, &n, 0), 0);
	cr_assert_eq(nng_send(rep, buf, n, 0), 0);
	n = sizeof buf;
	cr_assert_eq(nng_recv(req, buf, &n, 0), 0);
	cr_assert_str_eq(buf, "ping");
	cr_assert_eq(nng_send(req, buf, 5, 0), 0); /* never answered */
	cr_assert_eq(lm_close_bounded(rep, 2000), 0);
	cr_assert_eq(lm_close_bounded(req, 2000), 0);
	cr_assert_eq(nng_send(req, buf, 5, NNG_FLAG_NONBLOCK), NNG_ECLOSED);
	unlink(url + strlen("ipc://"));
}

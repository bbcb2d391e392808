/* ring_inject — an adversary on a mesh's sockets, for the fault and security tests. It speaks to a
 * worker's data (PULL) or control (REP) address the way a stranger on the same machine could:
 *
 *   ring_inject partial URL CLAIMED SENT HOLD_MS
 *       a raw SP connection (ipc:// or tcp://) that announces one message of CLAIMED bytes, sends
 *       SENT of them and holds the connection HOLD_MS before closing; prints "partial: sent N"
 *       or why the peer closed first
 *   ring_inject malformed URL COUNT MAX_ID
 *       COUNT data-ring messages that fail decoding, in turn: random bytes, a FORWARD header
 *       without its fields, a FORWARD cut short, a FORWARD whose payload length is wrong; each
 *       names a batch id in 1..MAX_ID (the ids a live mesh uses); prints "malformed: sent N"
 *   ring_inject forge DATA_URL CONTROL_URL COUNT DIM
 *       asks the worker's control plane for its fingerprint (HELLO), then sends COUNT well-formed
 *       FORWARDs into its data address: one token each, in slot i % 4 at position 0, as token ids
 *       (DIM 0, the first worker) or f32 rows of width DIM; prints "forge: fingerprint F, sent N"
 *   ring_inject control URL COUNT
 *       COUNT malformed control requests, each waiting for its reply (or 200 ms); prints
 *       "control: sent N, answered M"
 *   ring_inject hello URL
 *       one HELLO; prints the worker's protocol version and fingerprint, exit 1 when none came
 *
 * Exit status 0 when every message went out, 1 when the peer could not be reached (the errno
 * or NNG error on stderr), 2 for bad arguments. Nothing here trusts the peer either. */
#include <errno.h>
#include <msgpack.h>
#include <netdb.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/wire/wire.h"

#define INJECT_SP_PUSH 0x50 /* the SP protocol number of PUSH (5 << 4 | 0) */

static void inject_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int inject_write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A raw stream to url (ipc:///path or tcp://host:port); *ipc says which framing it takes. */
static int inject_connect(const char *url, int *ipc)
{
	int fd = -1;
	if (strncmp(url, "ipc://", 6) == 0) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(url + 6) >= sizeof sa.sun_path)
			return -1;
		strcpy(sa.sun_path, url + 6);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
			fprintf(stderr, "ring_inject: connect %s: %s\n", url, strerror(errno));
			close(fd);
			return -1;
		}
		*ipc = 1;
		return fd;
	}
	if (strncmp(url, "tcp://", 6) != 0)
		return -1;
	char host[256];
	snprintf(host, sizeof host, "%s", url + 6);
	char *colon = strrchr(host, ':');
	if (colon == NULL)
		return -1;
	*colon = '\0';
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || ai == NULL)
		return -1;
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		fprintf(stderr, "ring_inject: connect %s: %s\n", url, strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	*ipc = 0;
	return fd;
}

static int inject_partial(const char *url, uint64_t claimed, uint64_t sent, long hold_ms)
{
	int ipc = 0, fd = inject_connect(url, &ipc);
	if (fd < 0)
		return 1;
	/* The SP connection header: 0, 'S', 'P', 0, the protocol (big-endian), two zeros. */
	uint8_t hdr[8] = {0, 'S', 'P', 0, 0, INJECT_SP_PUSH, 0, 0}, peer[8];
	if (inject_write_all(fd, hdr, sizeof hdr) != 0 || recv(fd, peer, 8, MSG_WAITALL) != 8) {
		fprintf(stderr, "ring_inject: no SP header from %s\n", url);
		close(fd);
		return 1;
	}
	uint8_t frame[9];
	size_t fl = 0;
	if (ipc)
		frame[fl++] = 1; /* ipc frames start with a message-type byte */
	for (int i = 7; i >= 0; i--)
		frame[fl++] = (uint8_t)(claimed >> (8 * i));
	static uint8_t chunk[1 << 16];
	uint64_t done = 0;
	if (inject_write_all(fd, frame, fl) == 0) {
		while (done < sent) {
			size_t n =
				sent - done < sizeof chunk ? (size_t)(sent - done) : sizeof chunk;
			if (inject_write_all(fd, chunk, n) != 0)
				break;
			done += n;
		}
	}
	printf("partial: sent %llu of %llu claimed bytes%s\n", (unsigned long long)done,
	       (unsigned long long)claimed, done < sent ? " (the peer closed the connection)" : "");
	fflush(stdout);
	inject_sleep_ms(hold_ms);
	close(fd);
	return 0;
}

/* A msgpack header map of the fixed keys, and `extra` more key/value pairs to follow. */
static void inject_head(msgpack_packer *pk, uint32_t type, uint64_t id, uint64_t fp, int extra)
{
	msgpack_pack_map(pk, (size_t)(4 + extra));
	msgpack_pack_str_with_body(pk, "v", 1);
	msgpack_pack_uint64(pk, WIRE_VERSION);
	msgpack_pack_str_with_body(pk, "t", 1);
	msgpack_pack_uint64(pk, type);
	msgpack_pack_str_with_body(pk, "fp", 2);
	msgpack_pack_uint64(pk, fp);
	msgpack_pack_str_with_body(pk, "id", 2);
	msgpack_pack_uint64(pk, id);
}

/* Malformed message i (kind i % 4) naming batch id. */
static void inject_malformed_msg(msgpack_sbuffer *sb, uint64_t i, uint64_t id)
{
	msgpack_packer pk;
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	switch (i % 4) {
	case 0: { /* random bytes */
		uint8_t junk[64];
		for (size_t k = 0; k < sizeof junk; k++)
			junk[k] = (uint8_t)rand();
		msgpack_sbuffer_write(sb, (const char *)junk, sizeof junk);
		break;
	}
	case 1: /* a FORWARD header and nothing else */
		inject_head(&pk, WIRE_FORWARD, id, 1, 0);
		break;
	case 2: /* a FORWARD cut in the middle of its map */
		inject_head(&pk, WIRE_FORWARD, id, 1, 3);
		msgpack_pack_str_with_body(&pk, "n", 1);
		break;
	default: /* "pl" says 4096 bytes; none follow */
		inject_head(&pk, WIRE_FORWARD, id, 1, 1);
		msgpack_pack_str_with_body(&pk, "pl", 2);
		msgpack_pack_uint64(&pk, 4096);
		break;
	}
}

static int inject_open(nng_socket *s, int req, const char *url)
{
	int rv = req ? nng_req0_open(s) : nng_push0_open(s);
	if (rv == 0)
		rv = nng_dial(*s, url, NULL, 0);
	if (rv != 0) {
		fprintf(stderr, "ring_inject: %s: %s\n", url, nng_strerror(rv));
		return 1;
	}
	nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, 1000);
	nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, 200);
	return 0;
}

static int inject_send(nng_socket s, const void *p, size_t n)
{
	return nng_send(s, (void *)p, n, 0) == 0 ? 0 : 1;
}

/* Closes a PUSH socket after its last send has had time to reach the wire: NNG's push is done
 * with a message once a pipe has taken it, and closing the socket aborts a write still in
 * progress, which would lose the last message of a count the test checks exactly. */
static void inject_close_push(nng_socket s)
{
	nng_msleep(200);
	nng_close(s);
}

static int inject_malformed(const char *url, long count, long max_id)
{
	nng_socket s;
	if (inject_open(&s, 0, url) != 0)
		return 1;
	long sent = 0;
	for (long i = 0; i < count; i++) {
		/* The last one after a pause past the receiver's log limit (a line a second per
		 * kind), so its line reports how many it held back however fast the rest went. */
		if (i == count - 1 && count > 1)
			nng_msleep(1200);
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		inject_malformed_msg(&sb, (uint64_t)i,
				     1 + (uint64_t)(i % (max_id > 0 ? max_id : 1)));
		sent += inject_send(s, sb.data, sb.size) == 0;
		msgpack_sbuffer_destroy(&sb);
	}
	printf("malformed: sent %ld\n", sent);
	inject_close_push(s);
	return sent == count ? 0 : 1;
}

/* HELLO over a REQ socket: the peer's version and fingerprint. */
static int inject_hello(nng_socket s, struct wire_hello *out)
{
	struct wire_buf b = {0};
	struct wire_hello me = {.id = 7};
	snprintf(me.name, sizeof me.name, "stranger");
	int rc = wire_encode_hello(&b, &me, false);
	void *reply = NULL;
	size_t len = 0;
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 2000);
	if (rc == 0 && inject_send(s, b.data, b.len) == 0 &&
	    nng_recv(s, &reply, &len, NNG_FLAG_ALLOC) == 0) {
		rc = wire_decode_hello(reply, len, out, NULL);
		nng_free(reply, len);
	} else {
		rc = -1;
	}
	wire_buf_fini(&b);
	return rc;
}

static int inject_forge(const char *data, const char *control, long count, int dim)
{
	nng_socket c, s;
	struct wire_hello h;
	if (inject_open(&c, 1, control) != 0)
		return 1;
	int rc = inject_hello(c, &h);
	nng_close(c);
	if (rc != 0) {
		fprintf(stderr, "ring_inject: no HELLO from %s\n", control);
		return 1;
	}
	if (inject_open(&s, 0, data) != 0)
		return 1;
	long sent = 0;
	float row[4096] = {0};
	int32_t id = 1;
	for (long i = 0; i < count; i++) {
		struct wire_seq q = {.seq_id = 1 + (uint64_t)i,
				     .slot = (int32_t)(i % 4),
				     .pos = 0,
				     .n_tokens = 1,
				     .sample = true,
				     .sampling = {.temperature = 0, .top_k = 0, .top_p = 1}};
		struct wire_forward f = {.batch_id = 1 + (uint64_t)i,
					 .fingerprint = h.fingerprint,
					 .n_seqs = 1,
					 .seqs = &q,
					 .n_tokens = 1,
					 .dtype = dim > 0 ? WIRE_DT_F32 : WIRE_DT_I32,
					 .dim = dim > 0 ? dim : 1,
					 .payload = dim > 0 ? (const void *)row : (const void *)&id,
					 .payload_len = dim > 0 ? (size_t)dim * 4 : 4};
		struct wire_buf b = {0};
		if (dim <= 4096 && wire_encode_forward(&b, &f) == 0)
			sent += inject_send(s, b.data, b.len) == 0;
		wire_buf_fini(&b);
	}
	printf("forge: fingerprint %016llx, sent %ld\n", (unsigned long long)h.fingerprint, sent);
	inject_close_push(s);
	return sent == count ? 0 : 1;
}

static int inject_control(const char *url, long count)
{
	nng_socket s;
	if (inject_open(&s, 1, url) != 0)
		return 1;
	long sent = 0, answered = 0;
	for (long i = 0; i < count; i++) {
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		inject_malformed_msg(&sb, (uint64_t)i, 1 + (uint64_t)i);
		if (inject_send(s, sb.data, sb.size) == 0) {
			sent++;
			void *r = NULL;
			size_t len = 0;
			if (nng_recv(s, &r, &len, NNG_FLAG_ALLOC) == 0) {
				answered++;
				nng_free(r, len);
			} else {
				/* A REQ socket with no answer must start afresh. */
				nng_close(s);
				if (inject_open(&s, 1, url) != 0)
					break;
			}
		}
		msgpack_sbuffer_destroy(&sb);
	}
	printf("control: sent %ld, answered %ld\n", sent, answered);
	nng_close(s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 6 && strcmp(argv[1], "partial") == 0)
		return inject_partial(argv[2], strtoull(argv[3], NULL, 10),
				      strtoull(argv[4], NULL, 10), atol(argv[5]));
	if (argc >= 5 && strcmp(argv[1], "malformed") == 0)
		return inject_malformed(argv[2], atol(argv[3]), atol(argv[4]));
	if (argc >= 6 && strcmp(argv[1], "forge") == 0)
		return inject_forge(argv[2], argv[3], atol(argv[4]), atoi(argv[5]));
	if (argc >= 4 && strcmp(argv[1], "control") == 0)
		return inject_control(argv[2], atol(argv[3]));
	if (argc >= 3 && strcmp(argv[1], "hello") == 0) {
		nng_socket s;
		struct wire_hello h;
		if (inject_open(&s, 1, argv[2]) != 0)
			return 1;
		int rc = inject_hello(s, &h);
		nng_close(s);
		if (rc != 0)
			return 1;
		printf("hello: protocol %u, fingerprint %016llx\n", h.version,
		       (unsigned long long)h.fingerprint);
		return 0;
	}
	fprintf(stderr, "usage: ring_inject partial|malformed|forge|control|hello ...\n");
	return 2;
}

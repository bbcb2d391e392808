/* worker.h — the layermesh-worker process: sockets, threads and the control protocol around
 * one pipeline stage.
 *
 *   control thread (the caller of worker_run): REP socket at `control`; answers HELLO, ASSIGN,
 *       STATUS and the redeploy verbs. ASSIGN loads the slice (or checks it against the slice
 *       given by flags) and dials the successor.
 *   data thread: PULL socket listening at `data`, its arrivals stamped by a receive queue
 *       (recvq.h); each ring message goes through the stage (stage.h) and on to the
 *       successor's PULL through a PUSH dialer.
 *   health: /healthz, /readyz, /status and /metrics at `http` on NNG's threads (health.h);
 *       /status is also the STATUS control reply.
 *
 * The stage is touched by the data thread for every message and by the control thread for
 * ASSIGN and the redeploy verbs; `mu` serialises the two, so a control operation always happens
 * between two batches.
 */
#ifndef LM_WORKER_H
#define LM_WORKER_H

#include <stdbool.h>

#include "common/wire/transport.h"
#include "common/wire/wire.h"
#include "kernels/backend.h"

struct worker_opts {
	const char *name;
	const char *control; /* REP listen address */
	const char *data;    /* PULL listen address */
	const char *http;    /* health server address, NULL for none */
	const char *backend; /* "cpu" or "cuda" */
	struct lm_backend_opts backend_opts;
	/* Set when the slice comes from flags (systemd, Kubernetes): loaded at start, and a later
	 * ASSIGN must match it. */
	bool preassigned;
	struct wire_assign assign;
	/* Certificates for tls+tcp:// addresses (all NULL: none). */
	struct lm_tls tls;
	/* The coordinator that spawned us: exit when it dies (no orphans). 0 for none. */
	int parent_pid;
	/* mesh.toml's memory_limit in bytes (--memory-limit, or --config's [[worker]]); 0 for
	 * none. A CPU worker resident past it after loading refuses the slice (worker.c). */
	uint64_t memory_limit;
};

/* The exit status of a worker that stopped because its model file was written while it
 * served (worker.c, worker_weights_changed). */
#define WORKER_EXIT_WEIGHTS_CHANGED 3

/* Runs until SIGTERM or SIGINT, or until the model file is written in place; returns the
 * process exit status. */
int worker_run(const struct worker_opts *o);

/* Whether addr is plain tcp:// to a host other than loopback: refused at start without
 * --insecure (worker/main.c), warned of at every start with it. */
bool worker_plain_beyond_loopback(const char *addr);

#endif

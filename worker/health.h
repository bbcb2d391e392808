/* health.h — what a worker says about itself: its HTTP server (--http), the latency histograms
 * of the data ring, and the status document that both /status and the STATUS control reply are.
 *
 *   GET /healthz  200 "ok" while the process runs
 *   GET /readyz   200 "ready" when the slice is assigned, its weights mapped, its KV cache
 *                 allocated and the successor connected; else 503 "not ready: <reason>"
 *   GET /status   the status document (JSON; health_status_json)
 *   GET /metrics  Prometheus text 0.0.4 (health_metrics_text)
 *
 * Every document is rendered from one health_snapshot the worker fills, so /status, STATUS and
 * /metrics agree with each other.
 *
 * Latencies, per ring message, in nanoseconds (observed by the data thread):
 *   recv     from the message's arrival at the worker (recvq.h) to the start of its compute:
 *            the time it queued behind other messages or a control operation
 *   compute  the stage's handling of it (stage_handle: the forward, for FORWARD)
 *   send     handing it to the successor (nng_sendmsg, retries while the successor is away
 *            included); only messages that were sent
 *   forward  within compute, the forward pass itself (FORWARD only): compute less forward is
 *            the message's decoding, row conversion, sampling and encoding
 *   pre_send from the end of its compute to the start of its send (the bookkeeping between);
 *            only messages that were sent
 *   transit  from the predecessor's ring stamp (wire.h: when it began to send) to the arrival
 *            here: the hop, the predecessor's send included; only stamped messages
 * Per ring message, the worker's part of the ring is transit + recv + compute + pre_send, and
 * its send is the start of the successor's transit.
 *
 * Threads. Handlers run on NNG's threads and call the snapshot callback; health_fini stops the
 * server and waits for handlers still running, so after it the worker's state is never read.
 */
#ifndef LM_HEALTH_H
#define LM_HEALTH_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/base/metrics.h"
#include "common/model/hparams.h"
#include "common/wire/httpd.h"
#include "common/wire/link.h"
#include "common/wire/wire.h"

enum health_phase {
	HEALTH_WAITING = 0,  /* no slice yet: waiting for ASSIGN */
	HEALTH_LOADING = 1,  /* loading a slice (ASSIGN, or the flags' slice at start) */
	HEALTH_ASSIGNED = 2, /* the slice is loaded and its successor dialled */
};

/* One reading of the worker's state. */
struct health_snapshot {
	const char *name;
	int pid;
	double uptime_s;
	uint64_t rss_bytes;
	enum health_phase phase;
	uint64_t dropped; /* ring messages that could not be processed or forwarded */
	/* The data ring's progress: ids of the last message taken and the last passed on, how
	 * long the one in hand has been (0: none), messages waiting. The coordinator's progress
	 * check reads them (STATUS, "ring") when a batch does not come back. */
	uint64_t ring_in, ring_out;
	int64_t ring_busy_ms, ring_send_ms; /* of which handing it to the successor */
	int32_t ring_queued;
	/* The rest is meaningful when phase is HEALTH_ASSIGNED. */
	struct wire_assign assign;
	uint64_t fingerprint;
	uint64_t digest; /* of the slice's tensor bytes as loaded (gguf_tensor_digest) */
	int32_t kv_base, kv_num_layers;
	uint64_t kv_bytes;
	uint64_t kv_layer_bytes[LM_MAX_LAYERS]; /* [kv_num_layers]: K and V of each owned layer */
	uint64_t weight_bytes, mapped_bytes;
	int32_t active_sequences; /* KV slots holding positions */
	uint64_t batches, tokens, ring_errors, releases, copies;
	uint64_t grammar_draws, grammar_fast, grammar_masked; /* the last stage's (constrain.h) */
	/* The backend and its memory: device memory for "cuda", host memory for "cpu" (total
	 * and free: the device's or the host's; used: what the backend holds). mem_total == 0:
	 * not known. */
	const char *backend;
	uint64_t mem_total, mem_free, mem_used;
	bool mem_device;
};

struct health_ops {
	void *arg;
	/* Fills *s (zeroed by the caller). Called from HTTP threads and the control thread; must
	 * not wait for a slice to load. */
	void (*snapshot)(void *arg, struct health_snapshot *s);
};

struct health {
	struct health_ops ops;
	struct lm_hist recv, compute, send;        /* see above */
	struct lm_hist forward, pre_send, transit; /* see above */
	pthread_mutex_t mu;
	pthread_cond_t idle;
	struct lm_link *next; /* under mu: the dial to the successor, once there is one */
	int busy;             /* under mu: handlers running */
	bool stopping;        /* under mu */
	struct lm_httpd httpd;
	bool inited;
};

void health_init(struct health *h, const struct health_ops *ops);
/* Serves the endpoints at addr ("host:port"). */
int health_serve(struct health *h, const char *addr, lm_diag *d);
/* Reports the successor as connected while next has a pipe (and its redials). */
void health_watch_successor(struct health *h, struct lm_link *next);
/* True when ready; otherwise false and why. */
bool health_ready(struct health *h, const struct health_snapshot *s, char *why, size_t cap);
/* The status document: identity, build and protocol versions, slice, KV and weight bytes,
 * memory, counters, readiness and the latency percentiles. The caller frees; NULL when out of
 * memory. */
char *health_status_json(struct health *h);
/* The /metrics page; the caller frees; NULL when out of memory. */
char *health_metrics_text(struct health *h);
/* Stops the server, waits for running handlers, releases. Harmless on a zeroed struct. Close
 * the watched socket first: its pipe callbacks use h. */
void health_fini(struct health *h);

#endif

/* mesh.h — `layermesh up`: bring a mesh up from mesh.toml, serve it, bring it down.
 *
 *   1. read mesh.toml, open the model's metadata, plan the fence (printed before anything
 *      starts; an infeasible plan stops here, naming the worker and its bytes)
 *   2. listen for the ring's return (PULL at [coordinator] data_in)
 *   3. spawn one layermesh-worker per [[worker]] (libuv), or attach to running ones
 *   4. per worker, over its control socket: HELLO (protocol version), ASSIGN (its slice and its
 *      successor's address), READY (fingerprint, KV and weight bytes), with progress lines
 *   5. dial the first worker's data address, start the scheduler and the HTTP API
 *   6. run until SIGINT/SIGTERM; then stop the API, the scheduler and every worker, wait for
 *      them, and remove the ipc socket files
 *
 * Process supervision (spawn, exit, signals, timers) runs on a libuv loop on the calling thread;
 * the handshake runs on its own thread so a worker that dies while loading is noticed at once.
 */
#ifndef LM_MESH_H
#define LM_MESH_H

#include <stdbool.h>

struct mesh_opts {
	const char *config;      /* mesh.toml */
	const char *worker_bin;  /* NULL: layermesh-worker next to this program */
	bool spawn;              /* false: attach to workers started elsewhere (systemd, k8s) */
	bool listen_any;         /* listen for data_in on every interface at its port (k8s) */
	int handshake_timeout_s; /* per worker, for HELLO and READY */
};

/* Returns the process exit status. */
int mesh_up(const struct mesh_opts *o);

#endif

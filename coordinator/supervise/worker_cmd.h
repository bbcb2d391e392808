/* worker_cmd.h — the command line of a layermesh-worker the coordinator starts.
 *
 * `layermesh up` (and a redeploy's replacement) and `layermesh diff` start workers with this
 * one builder, so the flags they pass are the ones worker/main.c parses, written once. A
 * worker started this way listens at its addresses and waits for the coordinator's ASSIGN: the
 * slice, cache and wire settings travel in that message, never on the command line.
 */
#ifndef LM_WORKER_CMD_H
#define LM_WORKER_CMD_H

#include "common/config/mesh_config.h"
#include "common/wire/transport.h"

#define WORKER_CMD_MAX_ARGS 32

struct worker_cmd {
	const char *bin;            /* the program */
	const char *name;           /* --name */
	const char *control, *data; /* --control, --data */
	const char *http;           /* --http; NULL: no health server */
	enum mesh_backend backend;  /* --backend */
	int device;                 /* --device, for backend cuda */
	int threads;                /* --threads; <= 0: left to the worker */
	enum mesh_kernels kernels;  /* --kernels */
	int parent_pid;             /* --parent-pid; 0: none */
	const char *log_level;      /* --log-level; NULL: left to the worker */
	uint64_t memory_limit;      /* --memory-limit in bytes; 0: none */
	const struct lm_tls *tls;   /* --tls-*; NULL (or no CA): none */
	bool insecure;              /* --insecure: mesh.toml allows plain tcp:// off the host */
};

/* The argument vector: argv[0..argc) and a NULL. Pointers into the worker_cmd's strings and the
 * numbers' own storage here, so it lives as long as both. */
struct worker_argv {
	char *argv[WORKER_CMD_MAX_ARGS + 1];
	int argc;
	char num[4][24];
};

void worker_cmd_argv(const struct worker_cmd *c, struct worker_argv *out);

#endif

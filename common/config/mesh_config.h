/* mesh_config.h — mesh.toml: the one configuration of a mesh, read once at start.
 *
 * Every key is listed here; any other key is an error that names the file, line, column and key.
 * Relative paths resolve against the directory holding mesh.toml. Sizes are a string with a
 * unit, "128MiB", "1.5GiB", "512KB", "64 KiB" (B, KB, MB, GB, TB are powers of 1000; KiB, MiB,
 * GiB, TiB powers of 1024; a fraction is rounded down to whole bytes), or a plain integer of
 * bytes. Addresses are NNG URLs: "ipc:///path" (at most 107 bytes of path), "tcp://host:port",
 * "tls+tcp://host:port" or "inproc://name" (one process only: tests). HTTP endpoints are
 * "host:port" (an IPv6 host in brackets: "[::1]:8080").
 *
 *   [model]
 *   path          string, required   the GGUF file
 *   max_seq_len   integer            positions per sequence, 1 to MESH_MAX_SEQ_LIMIT; default:
 *                                    the model's context length, at most MESH_MAX_SEQ_DEFAULT
 *                                    (a larger value must be asked for here)
 *   slots         integer            concurrent sequences per worker (KV slots), 1 to 4096;
 *                                    default 16
 *   kv_type_k     cache type K          K rows of the global layers (of every layer unless
 *                                    kv_type_k_swa says otherwise); default "f32"
 *   kv_type_v     cache type            V rows likewise; default "f32"
 *   kv_type_k_swa cache type            K rows of the sliding-window layers; default kv_type_k
 *   kv_type_v_swa cache type            V rows of the sliding-window layers; default kv_type_v
 *                 A cache type is "f32", "f16", "bf16", "q8_0", "q5_1", "q4_0" or "fp8"
 *                 (e4m3); a block type (q8_0, q5_1, q4_0) needs head_dim to be a multiple of
 *                 32 in the layers it is for, which the planner checks
 *   wire_dtype    "f32"|"f16"|"bf16" hidden states between workers; default "f32"
 *                 (f32 for the cache and the wire by default: the mesh must reproduce the
 *                 single-process forward, and llama.cpp's F32-cache logits within 1.3e-5 on
 *                 stories260K, where an f16 cache moves them by 1e-3 to 1e-2; the smaller
 *                 types are a choice of memory over exactness, whose saving `layermesh plan`
 *                 shows)
 *   max_batch     integer            tokens in one FORWARD batch, 1 to 65536; default 64; sizes
 *                                    the scratch
 *   scratch_bytes size               activation scratch per worker; default: the planner's
 *                                    estimate from the model and max_batch
 *   chat_template string             the chat format to render conversations with instead of
 *                                    the model's tokenizer.chat_template (which the Jinja
 *                                    engine renders when this is left out):
 *                                    "chatml", "qwen2", "qwen2.5", "qwen3", "llama3",
 *                                    "llama3.1", "gemma", "gemma4", "gemma4-unmerged",
 *                                    "mistral", "phi3" or "phi3.5"
 *                                    (coordinator/api/chat_template.h); default: the template
 *
 *   [coordinator]
 *   http          host:port          the API; default "127.0.0.1:8080"
 *   data_in       address, required  where the coordinator PULLs TOKENS from the last worker
 *   auth_token    string             bearer token the API requires; needed when http is not on
 *                                    a loopback address
 *   log_level     "error"|"warn"|"info"|"debug"; default "info"
 *   batches_in_flight integer        FORWARD batches travelling the ring at once, 1 to 64, the
 *                                    decoding sequences shared among them; default (0) one per
 *                                    worker, so every stage has a batch to work on, but no more
 *                                    than this machine's CPUs compute at once where `up` spawns
 *                                    the (CPU) workers (mesh.c; fewer, larger batches read each
 *                                    weight for more sequences at once: bench/RESULTS.md
 *                                    measures the trade)
 *   max_queued    integer            requests that may wait for a KV slot, 0 to 1000000 (0:
 *                                    no limit); past it the API answers 429 with Retry-After;
 *                                    default 256
 *   http_read_timeout  number        seconds within which a request's head and body must
 *                                    arrive from its first byte (408 otherwise), 0.1 to 3600;
 *                                    default 10
 *   http_idle_timeout  number        seconds a keep-alive connection may wait for its next
 *                                    request, 0.1 to 86400; default 30
 *   max_connections    integer       HTTP connections at once, 1 to 100000 (past it the one
 *                                    idle longest is closed, or the new one gets 503);
 *                                    default 512
 *   cors_origins  [string, ...]      origins allowed to call the API from a browser
 *                                    ("https://app.example", as browsers send them, or "null");
 *                                    default none: a request with any Origin header is
 *                                    refused (but for the pages' own origin while ui is on:
 *                                    coordinator/api/api_pages.h)
 *   request_timeout  seconds          how long a request may go without progress (no batch of
 *                                    it coming back) before it fails with 503 and the reason,
 *                                    e.g. while a worker it needs is down and restarting;
 *                                    0.1 to 86400, default 30
 *   worker_timeout   seconds          how long a worker may leave its control plane's
 *                                    liveness probe unanswered before it is declared down
 *                                    (killed if the coordinator started it, its sequences
 *                                    replayed); 0.1 to 3600, default 1
 *   seed          integer            the seed of a generation request that gives none,
 *                                    0 to 2^53 - 1 (llama-server's --seed); default none:
 *                                    each such request draws a fresh one
 *   prefix_cache  boolean            keep an ended sequence's KV rows in its slot, so that a
 *                                    request sharing their prefix computes only the rest
 *                                    (coordinator/sched/prefix.h); default true
 *   insecure      boolean            allow the control and data planes to reach other hosts
 *                                    over plain tcp:// (default false: such a mesh is refused,
 *                                    since anyone who can reach a worker could forge ring
 *                                    messages; when true, every start warns instead)
 *   ui            boolean            serve the pages for people: the mesh, live, at / and a
 *                                    chat at /chat (coordinator/api/api_pages.h); default true
 *   ring_stamps   boolean            stamp every FORWARD with its send time (wire.h's ring
 *                                    stamp) so that each hop's transit is measured (the
 *                                    workers' layermesh_worker_transit_seconds, the
 *                                    coordinator's layermesh_ring_return_seconds); every
 *                                    worker must be of a build that knows the stamp (an
 *                                    older one drops stamped batches as malformed, its log
 *                                    naming the key "ts", and is restarted for making no
 *                                    progress); default false
 *
 *   [plan]
 *   strategy      "uniform"|"balanced"|"pinned"; default "balanced" (see common/plan/fence.h)
 *
 *   [speculative] optional: speculative decoding (absent: off)
 *   source        "ngram"|"model"      where drafts come from: n-gram lookup over each
 *                                      sequence's own prompt and output, or a draft model;
 *                                      default "model" when draft_model is set, else "ngram"
 *   draft_model   path                 a small GGUF with the model's vocabulary, run in the
 *                                      coordinator process (source "model" only, and then
 *                                      required)
 *   max_draft     integer              tokens drafted per step, 1 to MESH_MAX_DRAFT and below
 *                                      [model] max_batch; default 4
 *   ngram_min     integer              the shortest suffix n-gram lookup matches, 1 to 8;
 *                                      default 1
 *   ngram_max     integer              the longest, ngram_min to 8; default 3
 *   draft_threads integer              CPU threads of the draft model, 1 to 64; default 1
 *   max_streams   integer              sequences holding slots at once above which none
 *                                      drafts, 0 to 4096 (0: no bound); default 4: a batch
 *                                      of many sequences already reads each weight for all of
 *                                      them, so drafts add rows it pays for and gain little
 *                                      (bench/RESULTS.md: 16 streams ran at 0.61x to 0.96x
 *                                      with drafts on every step)
 *
 *   [tls]         required when any address is tls+tcp://
 *   ca_file       path, required     CA that signs every peer's certificate
 *   cert_file     path, required     this mesh's certificate (PEM)
 *   key_file      path, required     its private key (PEM)
 *
 *   [[worker]]    one per pipeline stage, in pipeline order; at least one
 *   name          string, required   unique; [A-Za-z0-9._-], 1 to MESH_NAME_MAX characters
 *   data          address, required  the worker's data-plane PULL address
 *   control       address, required  its control-plane REP address
 *   http          host:port, required its health server (/healthz /readyz /status /metrics)
 *   memory_limit  size, required     everything the worker allocates must fit: weights, KV,
 *                                    scratch, embedding/head (the planner enforces it). For
 *                                    backend "cuda" it is device memory, and optional: left
 *                                    out (0), the planner takes the device's free memory
 *                                    (coordinator/plan/planner.h)
 *   speed         number             relative throughput for the balanced plan; default 1.0
 *   layers        [start, end]       pinned strategy only (and then required): the worker runs
 *                                    layers start .. end-1, a half-open range like the fence
 *   backend       "cpu"|"cuda"       default "cpu"
 *   device        integer            CUDA device index, 0 to 255 (backend "cuda" only); default 0
 *   threads       integer            CPU threads, 1 to 1024; default 1
 *   kernels       "auto"|"scalar"|"amx"  CPU kernel set; default "auto" (batch invariant). "amx"
 *                                    adds the AMX GEMMs: faster batches, but a token's result
 *                                    then depends on its batch by rounding, so batching and
 *                                    fault replay reproduce a lone run only up to rounding
 *   kv_type_k, kv_type_v, kv_type_k_swa, kv_type_v_swa   cache types
 *                                    this worker's own cache types (a small worker in a mixed
 *                                    fleet), each over [model]'s key of the same name; its
 *                                    sliding layers take its kv_type_k / kv_type_v unless it
 *                                    or [model] names sliding types. The planner prices the
 *                                    worker's layers in them, its ASSIGN carries them, and
 *                                    `layermesh run --kv-layers A:B=TYPES` gives the single
 *                                    process the same per-layer types
 *
 * Checked beyond types and ranges: worker names unique; no two endpoints the same (a TCP port
 * counts once whether HTTP, tcp:// or tls+tcp://); layers only with the pinned strategy and then
 * on every worker; [tls] present exactly when needed; a non-loopback API only with an
 * auth_token; plain tcp:// beyond loopback only with insecure = true. Errors are LM_ECONFIG (LM_EUNSUPPORTED, LM_ERANGE, ... from the TOML reader,
 * LM_ENOENT/LM_EIO for the file) with messages like
 *     mesh.toml:12:16: worker[1].memory_limit: invalid size "12 XB": unknown unit 'XB' ...
 */
#ifndef LM_MESH_CONFIG_H
#define LM_MESH_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/plan/fence.h"
#include "common/base/log.h"

#define MESH_NAME_MAX    63
#define MESH_MAX_WORKERS FENCE_MAX_WORKERS
/* The default max_seq_len is the model's context length, but no more than this. */
#define MESH_MAX_SEQ_DEFAULT 4096
/* Every worker holds one KV slot more than [model] slots: the probe slot, where smoke tests of
 * redeploys run without touching a live sequence. */
#define MESH_PROBE_SLOTS 1
/* The most batches the scheduler keeps travelling (scheduler.c's SCHED_MAX_INFLIGHT). */
#define MESH_MAX_BATCHES_IN_FLIGHT 64
#define MESH_MAX_SEQ_LIMIT         (1 << 20)
/* [coordinator] request_timeout and worker_timeout by default. */
#define MESH_REQUEST_TIMEOUT_MS 30000
#define MESH_WORKER_TIMEOUT_MS  1000
/* The most tokens a speculative step drafts. */
#define MESH_MAX_DRAFT 32

enum mesh_spec_source {
	MESH_SPEC_OFF = 0,
	MESH_SPEC_NGRAM = 1,
	MESH_SPEC_MODEL = 2,
};

enum mesh_backend {
	MESH_BACKEND_CPU = 0,
	MESH_BACKEND_CUDA = 1,
};

enum mesh_kernels {
	MESH_KERNELS_AUTO = 0,
	MESH_KERNELS_SCALAR = 1,
	MESH_KERNELS_AMX = 2,
};

/* "auto", "scalar" or "amx": the worker's --kernels value. */
const char *mesh_kernels_name(enum mesh_kernels k);

struct mesh_worker {
	char *name;
	char *data;            /* data-plane PULL address */
	char *control;         /* control-plane REP address */
	char *http;            /* health server, host:port */
	uint64_t memory_limit; /* 0: a CUDA worker's device free memory (the planner asks) */
	double speed;
	bool pinned;                    /* layers given (pinned strategy) */
	int32_t layer_start, layer_end; /* [start, end) when pinned */
	enum mesh_backend backend;
	int32_t device;
	int32_t threads;
	enum mesh_kernels kernels;
	struct kv_types kv; /* its cache types: its own kv_type_* over [model]'s */
	bool own_kv;        /* kv differs from [model]'s */
	int32_t line;       /* of its [[worker]] header, for messages */
};

struct mesh_config {
	char *path; /* mesh.toml as given */
	char *dir;  /* its directory: relative paths resolve against it */

	/* [model] */
	char *model_path;    /* resolved */
	int32_t max_seq_len; /* 0: the model's context length, capped at MESH_MAX_SEQ_DEFAULT */
	int32_t slots;
	struct kv_types kv; /* kv_type_k/_v (global) and kv_type_k_swa/_v_swa (sliding) */
	enum lm_dtype wire_dtype;
	int32_t max_batch;
	uint64_t scratch_bytes; /* 0: estimated by the planner */
	char *chat_template;    /* NULL: recognised from the model */

	/* [coordinator] */
	char *http;
	char *data_in;
	char *auth_token; /* NULL when none */
	enum lm_log_level log_level;
	int32_t batches_in_flight; /* 0: one per worker */
	int32_t max_queued;
	double http_read_timeout, http_idle_timeout; /* seconds */
	int32_t max_connections;
	char **cors_origins; /* [n_cors] */
	int32_t n_cors;
	int32_t request_timeout_ms, worker_timeout_ms;
	bool insecure; /* plain tcp:// beyond loopback allowed (a warning at every start) */
	bool prefix_cache;
	int64_t seed;     /* of a request without one; -1: each draws its own */
	bool ui;          /* the pages for people: GET / and /chat */
	bool ring_stamps; /* stamp FORWARDs with their send time (wire.h) */

	/* [plan] */
	enum fence_strategy strategy;

	/* [speculative] */
	enum mesh_spec_source spec;
	char *draft_model; /* resolved; NULL unless spec is MESH_SPEC_MODEL */
	int32_t max_draft; /* 0 when spec is off */
	int32_t ngram_min, ngram_max;
	int32_t draft_threads;
	int32_t spec_max_streams; /* [speculative] max_streams */

	/* [tls]: resolved paths; NULL when the section is absent */
	char *tls_ca_file, *tls_cert_file, *tls_key_file;

	struct mesh_worker *workers; /* [n_workers], in pipeline order */
	int32_t n_workers;
};

/* Reads and checks `path`. On failure nothing is left allocated. */
int mesh_config_load(struct mesh_config *cfg, const char *path, lm_diag *d);
/* The same from text; `path` names it in messages and anchors relative paths. */
int mesh_config_parse(struct mesh_config *cfg, const char *path, const char *text, size_t len,
		      lm_diag *d);
/* Frees; harmless on a zeroed or finished config. */
void mesh_config_fini(struct mesh_config *cfg);

/* Where the mesh's planes go beyond this machine in the clear. Counts the hosts of the plain
 * tcp:// addresses (workers' data and control, data_in) that are not loopback, and writes
 * the first of them to `hosts` ("a, b, c"; may be NULL); *worker_hosts (may be NULL) receives
 * how many distinct hosts the workers' addresses name, loopback and ipc:// counting as this
 * one. tls+tcp:// addresses count for neither. Without [tls], the control plane's HELLO
 * answers anyone who can reach it with the protocol and the fingerprint, and a peer that can
 * reach a worker can forge ring messages: `layermesh plan` warns, `up` says so. */
int32_t mesh_config_plain_hosts(const struct mesh_config *cfg, char *hosts, size_t cap,
				int32_t *worker_hosts);

/* The kernel's range of ephemeral ports: where a machine's outgoing connections take their local
 * port, so a listener configured there may find it taken by a stranger's connection (seen in a
 * measured run). */
#define MESH_PORT_RANGE_FILE "/proc/sys/net/ipv4/ip_local_port_range"
/* Reads such a file ("32768\t60999\n") into [*lo, *hi]: 0, LM_ENOENT when it cannot be read,
 * LM_EFORMAT when it does not hold two ports lo <= hi. */
int mesh_local_port_range(const char *path, int32_t *lo, int32_t *hi);
/* How many of the mesh's TCP listeners (each worker's data, control and http, [coordinator]
 * data_in and http) have a port in [lo, hi], named into `out` ("worker w1 data
 * tcp://127.0.0.1:40000, [coordinator] http 127.0.0.1:50000"; may be NULL). `layermesh plan`
 * warns of them. */
int32_t mesh_config_ephemeral_ports(const struct mesh_config *cfg, int32_t lo, int32_t hi,
				    char *out, size_t cap);

/* The worker called `name`, or NULL. */
const struct mesh_worker *mesh_config_worker(const struct mesh_config *cfg, const char *name);

/* Parses a size ("1.5GiB", "512 KB", "4096"). LM_EFORMAT or LM_ERANGE with the reason in
 * `why` (which may be NULL). */
int mesh_parse_size(const char *s, uint64_t *out, char *why, size_t why_cap);
/* Checks an NNG address (ipc://, tcp://, tls+tcp://, inproc://). LM_EFORMAT with the reason. */
int mesh_check_address(const char *addr, char *why, size_t why_cap);
/* Checks "host:port" (port 1..65535). LM_EFORMAT with the reason. */
int mesh_check_hostport(const char *hp, char *why, size_t why_cap);

/* The address to listen on for `addr`: an NNG address, or an HTTP "host:port" when `http`.
 * Without `any` it is `addr` itself. With `any`, a TCP address (tcp://, tls+tcp://, HTTP) keeps
 * its port and takes the wildcard host, "0.0.0.0", or "[::]" when the host is an IPv6
 * literal; ipc:// and inproc:// are unchanged. mesh.toml's addresses are where peers dial, and
 * a host name there (a Kubernetes pod's DNS name, a service name) may not resolve, or not yet,
 * to an address of the process that listens behind it: that process listens on the wildcard
 * instead (`layermesh-worker --listen-any`, `layermesh up --listen-any`). LM_EFORMAT (with the
 * reason in `why`) for an address mesh_check_address / mesh_check_hostport refuses; LM_ERANGE
 * when `cap` bytes do not hold the result. */
int mesh_listen_address(const char *addr, bool http, bool any, char *out, size_t cap, char *why,
			size_t why_cap);

#endif

/* mesh.c — `layermesh up`. See mesh.h for the sequence of events.
 *
 * The mesh composes the parts below it and owns what they share: the facts of the running mesh
 * (built once, handed down read-only), the worker table, the process supervision, one keeper
 * per worker, the rollouts, the data ring's sockets, the scheduler and the API. Those parts
 * never call up into this file: the worker table tells it of every state change through the
 * listener it registers (mesh_on_workers), and the process supervision of the stop through
 * a hook (mesh_on_stopping).
 *
 * Locking: `svc_mu` guards the service (the fields marked "under svc_mu"); it is taken by the
 * listener, under the worker table's own lock, and by the stop hook. The order of every lock of
 * the coordinator: workers.h.
 */
#include "coordinator/mesh/mesh.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/config/mesh_config.h"
#include "common/format/gguf.h"
#include "common/model/hparams.h"
#include "common/plan/fence.h"
#include "common/tok/tokenizer.h"
#include "common/wire/link.h"
#include "common/wire/transport.h"
#include "coordinator/api/api.h"
#include "coordinator/mesh/mesh_status.h"
#include "coordinator/plan/planner.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/supervise/facts.h"
#include "coordinator/supervise/keeper.h"
#include "coordinator/supervise/procs.h"
#include "coordinator/supervise/rollout.h"
#include "coordinator/supervise/workers.h"
#include "lm_config.h"

struct mesh {
	const struct mesh_opts *o;
	/* What the facts point into: written while the mesh is set up, never after. */
	struct mesh_config cfg;
	struct lm_tls tls; /* the [tls] files, for every tls+tcp:// address */
	gguf_file *file;   /* the model's metadata: tokenizer and fingerprint */
	struct lm_hparams hp;
	char model_name[128];
	jinja_tmpl *jinja;        /* the model's chat template, parsed; NULL: none or mesh.toml's */
	struct tool_syntax tools; /* its tool-call syntax, with jinja */
	enum chat_format chat;    /* recognised or named; with jinja NULL, CHAT_NONE refuses chat */
	char chat_why[400];
	/* Non-empty when a plane leaves this machine in the clear: said at start and on /readyz. */
	char plain_note[512];
	struct fence_plan plan;
	tok_vocab *vocab;
	struct spec_source draft; /* [speculative]'s draft source; iface NULL: none */
	char worker_bin[PATH_MAX];
	struct mesh_facts facts;

	struct workers ws;      /* its own lock */
	struct procs *pr;       /* its own locks */
	struct keeper *keepers; /* [n_workers] */
	struct rollouts ro;     /* its own lock */
	struct mesh_status_src status;
	nng_socket push, pull;
	struct lm_link head; /* push's dial to the first worker; a redeploy of it re-points it */
	bool push_open, pull_open;
	bool pull_listening; /* data_in is ours: its socket file may be cleaned up at the end */
	struct api *api;

	pthread_mutex_t svc_mu;
	/* Under svc_mu. */
	struct sched *sched; /* set once, when the mesh starts serving */
	bool serving;        /* every worker has been ready at least once */
	bool had_fault;      /* a worker went down after serving: KV must be rebuilt */
	bool available;      /* the scheduler accepts work (no worker given up on) */
};

/* ------------------------------------------------------------------ helpers */

/* The worker binary: --worker-bin, else next to this program (installed), else the build
 * tree's worker/ directory beside coordinator/. */
static int mesh_find_worker(struct mesh *m, lm_diag *d)
{
	if (m->o->worker_bin != NULL) {
		snprintf(m->worker_bin, sizeof m->worker_bin, "%s", m->o->worker_bin);
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n <= 0)
			return lm_fail(d, LM_EOS, "cannot find this program's path");
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		static const char *const candidates[] = {"/layermesh-worker",
							 "/../worker/layermesh-worker"};
		for (size_t i = 0; i < 2; i++) {
			size_t a = strlen(self), b = strlen(candidates[i]);
			if (a + b >= sizeof m->worker_bin)
				return lm_fail(d, LM_ERANGE, "this program's path is too long");
			memcpy(m->worker_bin, self, a);
			memcpy(m->worker_bin + a, candidates[i], b + 1);
			if (access(m->worker_bin, X_OK) == 0)
				break;
		}
	}
	if (access(m->worker_bin, X_OK) != 0)
		return lm_fail(d, LM_ENOENT, "worker binary %s is missing or not executable",
			       m->worker_bin);
	return 0;
}

/* Removes an ipc socket file of ours that nothing listens on any more (a worker that was
 * killed leaves its files behind). A socket a live process listens on is never touched: it may
 * be another mesh's. */
static void mesh_remove_stale_ipc(const char *addr)
{
	bool removed = false;
	if (addr != NULL && lm_ipc_clear_stale(addr, &removed, NULL) == 0 && removed)
		lm_debug("removed the stale ipc socket %s", addr + 6);
}

/* ------------------------------------------------------------------ the redeploy endpoints */

static cJSON *mesh_redeploy(void *arg, const char *body, size_t len, int *status)
{
	struct mesh_status_src *src = arg;
	return rollout_request(src->ro, body, len, status);
}

static cJSON *mesh_rollout(void *arg)
{
	struct mesh_status_src *src = arg;
	return rollout_status(src->ro);
}

/* ------------------------------------------------------------------ serving */

/* How far below its high-water mark a slot's sliding-window rings can roll back (the prefix
 * cache's bound, sched_cfg.ring_rollback); -1 when no layer slides. */
static int32_t mesh_ring_rollback(const struct mesh *m)
{
	for (int32_t l = 0; l < m->hp.n_layer; l++)
		if (m->hp.layer[l].window > 0)
			return kv_geom_ring_extra(m->cfg.max_batch, m->cfg.max_draft) + 1;
	return -1;
}

/* The rows of the smallest sliding-window ring a worker keeps (sched_cfg.ring_ctx); 0 when no
 * layer slides. */
static int32_t mesh_ring_ctx(const struct mesh *m)
{
	int32_t extra = kv_geom_ring_extra(m->cfg.max_batch, m->cfg.max_draft), least = 0;
	for (int32_t l = 0; l < m->hp.n_layer; l++) {
		if (m->hp.layer[l].window <= 0)
			continue;
		struct kv_geom g = {.window = m->hp.layer[l].window};
		int32_t ctx = kv_geom_ctx(&g, m->facts.max_seq, extra);
		least = least == 0 || ctx < least ? ctx : least;
	}
	return least;
}

/* Whether the model has recurrent layers (qwen35). A recurrent state is the sequence after its
 * last position and returns only to states a stage kept for rollback (engine/kv_cache.h), not to
 * the end of an arbitrary shared prefix: the prefix cache reuses a slot only at a length every
 * stage can return to (prefix.h; docs/recurrent-cache.md, "Prefix reuse"). */
static bool mesh_recurrent(const struct mesh *m)
{
	for (int32_t l = 0; l < m->hp.n_layer; l++)
		if (m->hp.layer[l].recurrent)
			return true;
	return false;
}

/* How conversations are rendered: by the model's own template through the Jinja engine, or
 * by the format mesh.toml's [model] chat_template names (for a model without a template). The
 * format recognised in a template gives its end-of-turn stops. */
static int mesh_chat_format(struct mesh *m, lm_diag *d)
{
	int rc = chat_format_resolve(m->cfg.chat_template, m->file, &m->chat, m->chat_why,
				     sizeof m->chat_why, d);
	if (rc != 0) {
		lm_diag_prefix(d, "%s", m->cfg.path);
		return rc;
	}
	const char *t = NULL;
	if (m->cfg.chat_template == NULL && gguf_find(m->file, "tokenizer.chat_template") != NULL &&
	    gguf_get_str(m->file, "tokenizer.chat_template", &t, NULL) == 0) {
		lm_diag jd = {{0}};
		m->jinja = jinja_parse(t, strlen(t), &jd);
		m->tools = tool_syntax_detect(t, strlen(t));
		if (m->jinja == NULL && m->chat == CHAT_NONE)
			snprintf(m->chat_why, sizeof m->chat_why,
				 "the model's chat template cannot be parsed (%.200s); set [model] "
				 "chat_template in mesh.toml to one of: %s",
				 jd.msg, chat_format_names());
		else if (m->jinja == NULL)
			lm_warn("the model's chat template cannot be parsed (%s): rendering it as "
				"%s",
				jd.msg, chat_format_name(m->chat));
	}
	if (m->jinja != NULL)
		lm_info("chat template: the model's own, by the Jinja engine (%s; tool calls: "
			"%s%s)",
			m->chat != CHAT_NONE ? chat_format_name(m->chat) : "no known family",
			tool_format_name(m->tools.fmt),
			m->tools.think_open != NULL ? ", reasoning apart" : "");
	else if (m->chat != CHAT_NONE && m->chat_why[0] != '\0')
		lm_warn("chat template: %s: %s", chat_format_name(m->chat), m->chat_why);
	else if (m->chat != CHAT_NONE)
		lm_info("chat template: %s%s", chat_format_name(m->chat),
			m->cfg.chat_template != NULL ? " (mesh.toml)" : "");
	else
		lm_info("no chat: %s", m->chat_why);
	return 0;
}

/* [speculative]'s draft source, before any worker starts (a draft model that cannot be loaded,
 * or whose vocabulary is not the model's, stops `layermesh up` at once). */
static int mesh_open_draft(struct mesh *m, lm_diag *d)
{
	const struct mesh_config *c = &m->cfg;
	int rc = 0;
	if (c->spec == MESH_SPEC_NGRAM) {
		rc = spec_ngram_init(&m->draft, c->ngram_min, c->ngram_max, d);
	} else if (c->spec == MESH_SPEC_MODEL) {
		struct spec_draft_cfg dc = {.model = c->draft_model,
					    .n_vocab = m->hp.n_vocab,
					    .vocab = m->vocab,
					    .slots = c->slots + MESH_PROBE_SLOTS,
					    .max_seq = m->facts.max_seq,
					    .max_draft = c->max_draft,
					    .threads = c->draft_threads,
					    .kv = kv_types_uniform(LM_F32, LM_F32)};
		rc = spec_draft_init(&m->draft, &dc, d);
	}
	if (rc == 0 && m->draft.iface != NULL)
		lm_info("speculative decoding: %s drafts of up to %d tokens%s%s",
			m->draft.iface->name, (int)c->max_draft,
			c->draft_model != NULL ? " from " : "",
			c->draft_model != NULL ? c->draft_model : "");
	return rc;
}

/* FORWARD batches on the ring when [coordinator] batches_in_flight is left out. One per worker
 * keeps every stage busy where each worker has CPUs of its own. Workers this process spawned
 * share this machine's: past as many batches as its CPUs can compute at once, stages only take
 * turns on them, and each turn is a sleep and a wake-up (bench/inflight.sh measures it on
 * meshes of 3, 20 and 60 workers: bench/RESULTS.md). CUDA workers compute on their devices:
 * with any, one per worker. */
static int32_t mesh_batches_in_flight(const struct mesh *m, long *cpus_out)
{
	const int32_t n = m->facts.n_workers;
	*cpus_out = 0;
	if (m->cfg.batches_in_flight > 0)
		return m->cfg.batches_in_flight;
	if (!m->o->spawn)
		return n;
	int32_t threads = 1;
	for (int32_t i = 0; i < m->cfg.n_workers; i++) {
		if (m->cfg.workers[i].backend != MESH_BACKEND_CPU)
			return n;
		if (m->cfg.workers[i].threads > threads)
			threads = m->cfg.workers[i].threads;
	}
	cpu_set_t set;
	long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
								: sysconf(_SC_NPROCESSORS_ONLN);
	*cpus_out = cpus;
	const long k = cpus / threads > 1 ? cpus / threads : 1;
	return k < n ? (int32_t)k : n;
}

/* Starts the data plane, the scheduler and the API when every worker is first ready (from
 * mesh_on_workers, under svc_mu, once). */
static int mesh_start_serving(struct mesh *m, lm_diag *d)
{
	int rv, rc;
	if ((rv = nng_push0_open(&m->push)) != 0)
		return lm_fail(d, LM_EIO, "push socket: %s", nng_strerror(rv));
	m->push_open = true;
	nng_socket_set_ms(m->push, NNG_OPT_SENDTIMEO, 1000);
	long cpus;
	const int32_t inflight = mesh_batches_in_flight(m, &cpus);
	if (inflight < m->facts.n_workers && cpus > 0)
		lm_info("batches in flight: %d, as many as this machine's %ld CPUs compute at once "
			"(its %d workers share them; [coordinator] batches_in_flight sets it)",
			(int)inflight, cpus, (int)m->facts.n_workers);
	if ((rc = lm_link_init(&m->head, m->push, &m->tls, d)) != 0 ||
	    (rc = lm_link_dial(&m->head, m->cfg.workers[0].data, d)) != 0)
		return rc;
	struct sched_cfg sc = {.fingerprint = m->facts.fingerprint,
			       .max_queued = m->cfg.max_queued,
			       .slots = m->cfg.slots + MESH_PROBE_SLOTS,
			       .reserved_slots = MESH_PROBE_SLOTS,
			       .max_seq = m->facts.max_seq,
			       .max_batch = m->cfg.max_batch,
			       .max_inflight = inflight,
			       .prefill_chunk = m->cfg.max_batch,
			       .n_vocab = m->hp.n_vocab,
			       .max_logprobs = WIRE_MAX_LOGPROBS,
			       .batch_timeout_ms = m->cfg.request_timeout_ms,
			       .request_timeout_ms = m->cfg.request_timeout_ms,
			       .n_workers = m->facts.n_workers,
			       .draft = m->draft,
			       .max_draft = m->cfg.max_draft,
			       .spec_max_streams = m->cfg.spec_max_streams,
			       .prefix_cache = m->cfg.prefix_cache,
			       .ring_stamps = m->cfg.ring_stamps,
			       .recurrent = mesh_recurrent(m),
			       .rec_keep = kv_geom_rec_keep(m->cfg.max_draft),
			       .ring_rollback = mesh_ring_rollback(m),
			       .ring_ctx = mesh_ring_ctx(m),
			       .push = &m->head,
			       .pull = m->pull};
	/* A sequence ends where `layermesh run` ends it: at any end-of-generation id (EOS, EOT, EOM,
	 * <|im_end|>, <turn|>, ...: the set llama.cpp's vocabulary load builds) or at BOS. */
	size_t n_eog;
	const int32_t *eog = tok_eog_ids(m->vocab, &n_eog);
	const size_t max_stops = sizeof sc.stop_ids / sizeof sc.stop_ids[0];
	if (n_eog + 1 > max_stops)
		return lm_fail(
			d, LM_EUNSUPPORTED,
			"the vocabulary has %zu end-of-generation tokens; the scheduler takes "
			"at most %zu",
			n_eog, max_stops - 1);
	for (size_t i = 0; i < n_eog; i++)
		sc.stop_ids[sc.n_stop_ids++] = eog[i];
	if (tok_bos(m->vocab) >= 0 && !tok_is_eog(m->vocab, tok_bos(m->vocab)))
		sc.stop_ids[sc.n_stop_ids++] = tok_bos(m->vocab);
	if ((rc = sched_start(&m->sched, &sc, d)) != 0)
		return rc;
	struct api_cfg ac = {
		.http = m->cfg.http,
		.model_name = m->model_name,
		.model_path = m->cfg.model_path,
		.slots = m->cfg.slots,
		.auth_token = m->cfg.auth_token,
		.fingerprint = m->facts.fingerprint,
		.max_seq = m->facts.max_seq,
		.max_queued = m->cfg.max_queued,
		.seed = m->cfg.seed,
		.jinja = m->jinja,
		.chat = m->chat,
		.chat_why = m->chat_why,
		.tools = m->jinja != NULL ? m->tools : (struct tool_syntax){0},
		.ui = m->cfg.ui,
		.http_limits = {.read_timeout_ms = (int64_t)(m->cfg.http_read_timeout * 1000),
				.idle_timeout_ms = (int64_t)(m->cfg.http_idle_timeout * 1000),
				.max_conns = m->cfg.max_connections,
				.cors_origins = (const char *const *)m->cfg.cors_origins,
				.n_cors = m->cfg.n_cors},
		.vocab = m->vocab,
		.sched = m->sched,
		.mesh = &m->status,
		.ready = mesh_status_ready,
		.status = mesh_status_json,
		.metrics = mesh_status_metrics,
		.redeploy = mesh_redeploy,
		.rollout = mesh_rollout};
	if ((rc = api_start(&m->api, &ac, d)) != 0)
		return rc;
	m->serving = true;
	m->available = true;
	char fence[512];
	size_t at = 0;
	for (int32_t i = 0; i <= m->plan.n_workers && at < sizeof fence - 16; i++)
		at += (size_t)snprintf(fence + at, sizeof fence - at, "%s%d", i ? ", " : "",
				       m->plan.cuts[i]);
	lm_info("ready: serving %s on http://%s with %d workers, fence [%s]", m->model_name,
		m->cfg.http, m->facts.n_workers, fence);
	return 0;
}

/* What the workers' states mean for the service; under svc_mu. */
static void mesh_update_service(struct mesh *m, const struct workers_summary *s)
{
	if (!m->serving) {
		if (s->failed < 0 && s->away < 0) {
			lm_diag d = {{0}};
			int rc = mesh_start_serving(m, &d);
			if (rc != 0)
				procs_request_stop(m->pr, lm_diag_str(&d, rc), 1);
		}
		return;
	}
	char why[700];
	if (s->failed >= 0) {
		snprintf(why, sizeof why, "%s", s->why_failed);
		if (m->available)
			sched_set_available(m->sched, false, why);
		for (int32_t i = 0; i < s->n; i++)
			if (s->state[i] != MESH_WORKER_READY)
				sched_blame(m->sched, i);
		m->available = false;
		m->had_fault = true;
		return;
	}
	if (s->away >= 0) {
		snprintf(why, sizeof why, "worker %s is restarting (%s)",
			 facts_worker(&m->facts, s->away)->name,
			 s->why_away[0] ? s->why_away : "starting");
		for (int32_t i = 0; i < s->n; i++)
			if (s->state[i] != MESH_WORKER_READY)
				sched_blame(m->sched, i);
		sched_pause(m->sched, why);
		m->had_fault = true;
		return;
	}
	/* Every worker ready. */
	if (!m->available) {
		sched_set_available(m->sched, true, NULL);
		m->available = true;
	}
	if (m->had_fault)
		lm_info("every worker is back: rebuilding the caches of live sequences");
	sched_resume(m->sched, m->had_fault);
	m->had_fault = false;
}

/* The worker table's listener (workers.h): recomputes what the scheduler and /readyz should
 * see from every worker's state, under the table's lock. During bring-up the last worker ready
 * starts the service (a worker given up on stops the mesh: its keeper asks for that); once it
 * serves, a worker away pauses the scheduler, one given up on makes the mesh unavailable, and
 * all back resume it, replaying live sequences after a fault. Returns the scheduler once the
 * mesh serves. */
static struct sched *mesh_on_workers(void *ctx, const struct workers_summary *s)
{
	struct mesh *m = ctx;
	pthread_mutex_lock(&m->svc_mu);
	if (!procs_stopping(m->pr)) /* else the stop made the service unavailable for good */
		mesh_update_service(m, s);
	struct sched *sched = m->sched;
	pthread_mutex_unlock(&m->svc_mu);
	return sched;
}

/* The process supervision's stop hook: requests fail now with the reason. The scheduler and
 * the API stay allocated until the keepers and a rollout, which use them, have been joined
 * (end of mesh_up). Under svc_mu, so a service update either ran before this or sees the mesh
 * stopping. */
static void mesh_on_stopping(void *ctx)
{
	struct mesh *m = ctx;
	pthread_mutex_lock(&m->svc_mu);
	if (m->sched != NULL)
		sched_set_available(m->sched, false, "the coordinator is stopping");
	pthread_mutex_unlock(&m->svc_mu);
}

/* ------------------------------------------------------------------ up */

/* The ring's return: PULL at [coordinator] data_in. */
static int mesh_listen_data_in(struct mesh *m, lm_diag *d)
{
	/* data_in is where the last worker dials; with --listen-any its host may name this process
	 * only through a DNS name or a service that it cannot bind. */
	char data_in[512], why[256];
	int rv, rc;
	if (mesh_listen_address(m->cfg.data_in, false, m->o->listen_any, data_in, sizeof data_in,
				why, sizeof why) != 0)
		return lm_fail(d, LM_ECONFIG, "[coordinator] data_in %s: %s", m->cfg.data_in, why);
	if ((rv = nng_pull0_open(&m->pull)) != 0)
		return lm_fail(d, LM_EIO, "pull socket: %s", nng_strerror(rv));
	m->pull_open = true;
	/* A stale data_in socket from a coordinator that was killed is replaced by lm_listen,
	 * which says so; one that a running process listens on is refused, never removed. Not
	 * guarded (listen_guard.h): probing the coordinator's own data_in left NNG's reaper stuck
	 * in a 60-worker mesh under ASan. */
	if ((rc = lm_listen(m->pull, data_in, &m->tls, NULL, d)) != 0)
		return rc;
	m->pull_listening = true;
	/* What comes back is TOKENS, RELEASE and ERROR: bounded by the slots and the logprobs. */
	struct wire_limits back = {.slots = m->cfg.slots + MESH_PROBE_SLOTS,
				   .dim = 1,
				   .max_batch = m->cfg.max_batch,
				   .max_seqs = m->cfg.slots + MESH_PROBE_SLOTS,
				   .max_logprobs = WIRE_MAX_LOGPROBS};
	nng_socket_set_size(m->pull, NNG_OPT_RECVMAXSZ, wire_max_data_message(&back));
	return 0;
}

/* Reads mesh.toml and the model's metadata, plans, and builds the facts (nothing runs yet). */
static int mesh_load(struct mesh *m, lm_diag *d)
{
	int rc;
	if ((rc = mesh_config_load(&m->cfg, m->o->config, d)) != 0)
		return rc;
	lm_log_init("layermesh", NULL, m->cfg.log_level);
	if ((rc = planner_plan(&m->cfg, &m->plan, NULL, d)) != 0)
		return rc;
	if ((rc = gguf_open(m->cfg.model_path, &m->file, d)) != 0 ||
	    (rc = lm_hparams_load(m->file, &m->hp, d)) != 0 ||
	    (rc = tok_load(m->file, &m->vocab, d)) != 0) {
		lm_diag_prefix(d, "%s", m->cfg.model_path);
		return rc;
	}
	m->tls = (struct lm_tls){m->cfg.tls_ca_file, m->cfg.tls_cert_file, m->cfg.tls_key_file};
	m->facts = (struct mesh_facts){.cfg = &m->cfg,
				       .n_workers = m->cfg.n_workers,
				       .plan = &m->plan,
				       .hp = &m->hp,
				       .vocab = m->vocab,
				       .model_name = m->model_name,
				       .fingerprint = gguf_fingerprint(m->file),
				       .max_seq = planner_max_seq(&m->cfg, &m->hp),
				       .tls = &m->tls,
				       .plain_note = m->plain_note,
				       .spawns = m->o->spawn,
				       .handshake_ms = m->o->handshake_timeout_s * 1000,
				       .worker_timeout_ms = m->cfg.worker_timeout_ms};
	if ((rc = mesh_chat_format(m, d)) != 0)
		return rc;
	const char *base = strrchr(m->cfg.model_path, '/');
	snprintf(m->model_name, sizeof m->model_name, "%s", base ? base + 1 : m->cfg.model_path);
	char *dot = strrchr(m->model_name, '.');
	if (dot != NULL && strcmp(dot, ".gguf") == 0)
		*dot = '\0';
	fence_plan_write_table(&m->plan, stderr);
	char hosts[200];
	if (mesh_config_plain_hosts(&m->cfg, hosts, sizeof hosts, NULL) > 0) {
		snprintf(m->plain_note, sizeof m->plain_note,
			 "no TLS (insecure = true): the control and data planes reach %s over "
			 "plain tcp://, where anyone who can reach a worker can read the hidden "
			 "states and forge ring messages (use tls+tcp:// and [tls])",
			 hosts);
		lm_warn("%s", m->plain_note);
	}
	if ((rc = mesh_open_draft(m, d)) != 0 ||
	    (m->o->spawn && (rc = mesh_find_worker(m, d)) != 0))
		return rc;
	return 0;
}

/* The worker table, the ring's return, the process supervision and the rollouts. */
static int mesh_open(struct mesh *m, lm_diag *d)
{
	int rc;
	struct workers_listener l = {.changed = mesh_on_workers, .ctx = m};
	struct procs_hooks h = {.stopping = mesh_on_stopping, .ctx = m};
	if ((rc = workers_init(&m->ws, &m->facts, m->worker_bin, &l, d)) != 0)
		return rc;
	m->keepers = calloc((size_t)m->facts.n_workers + 1, sizeof *m->keepers);
	if (m->keepers == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	if ((rc = mesh_listen_data_in(m, d)) != 0 ||
	    (rc = procs_open(&m->pr, &m->facts, &m->ws, &h, d)) != 0)
		return rc;
	rollout_init(&m->ro, &m->facts, &m->ws, m->pr, &m->head);
	m->status =
		(struct mesh_status_src){.f = &m->facts, .ws = &m->ws, .ro = &m->ro, .pr = m->pr};
	return 0;
}

/* Runs the mesh until it stops; returns the exit status the stop asked for. */
static int mesh_run(struct mesh *m)
{
	lm_info("starting %d workers", m->facts.n_workers);
	for (int32_t i = 0; i < m->facts.n_workers; i++)
		if (keeper_start(&m->keepers[i], &m->facts, &m->ws, m->pr, i) != 0) {
			procs_request_stop(m->pr, "cannot start a keeper thread", 1);
			break;
		}
	int status = procs_run(m->pr);
	/* Stopped: keepers and a rollout see it at their next wait. */
	rollout_stop(&m->ro);
	for (int32_t i = 0; i < m->facts.n_workers; i++) {
		keeper_stop(&m->keepers[i]);
		keeper_fini(&m->keepers[i]);
	}
	/* The HTTP server first (its handlers wait for calls the scheduler fails), then the
	 * scheduler (every call's on_done, which may still use the API), then the API's memory. */
	api_stop(m->api);
	sched_stop(m->sched);
	sched_fini(m->sched);
	spec_source_fini(&m->draft); /* the scheduler's, which is gone */
	api_free(m->api);
	procs_fini(m->pr);
	m->pr = NULL;
	lm_info("stopped");
	return status;
}

/* Everything mesh_load and mesh_open made, in reverse. */
static void mesh_free(struct mesh *m)
{
	/* Bounded: a close NNG cannot finish must not keep a stopped coordinator alive. */
	if (m->push_open && lm_close_bounded(m->push, LM_CLOSE_MS) != 0)
		lm_warn("closing the data ring's first socket took over 2 s; exiting anyway");
	else
		lm_link_fini(&m->head); /* its pipe callbacks are done (not so after a timeout) */
	if (m->pull_open && lm_close_bounded(m->pull, LM_CLOSE_MS) != 0)
		lm_warn("closing the data ring's last socket took over 2 s; exiting anyway");
	procs_fini(m->pr); /* when mesh_run did not run */
	if (m->pull_listening)
		mesh_remove_stale_ipc(m->cfg.data_in);
	rollout_fini(&m->ro);
	free(m->keepers);
	workers_fini(&m->ws);
	spec_source_fini(&m->draft);
	tok_free(m->vocab);
	jinja_free(m->jinja);
	fence_plan_fini(&m->plan);
	gguf_close(m->file);
	mesh_config_fini(&m->cfg);
	pthread_mutex_destroy(&m->svc_mu);
	free(m);
}

int mesh_up(const struct mesh_opts *o)
{
	struct mesh *m = calloc(1, sizeof *m);
	lm_diag d = {{0}};
	int rc, status = 0;

	if (m == NULL)
		return 1;
	m->o = o;
	pthread_mutex_init(&m->svc_mu, NULL);
	if ((rc = mesh_load(m, &d)) == 0 && (rc = mesh_open(m, &d)) == 0)
		status = mesh_run(m);
	if (rc != 0 && d.msg[0])
		fprintf(stderr, "layermesh up: %s\n", d.msg);
	mesh_free(m);
	return rc == 0 && status == 0 ? 0 : 1;
}

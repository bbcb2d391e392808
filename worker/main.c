/* layermesh-worker — one pipeline stage of a layermesh mesh.
 *
 * Started by `layermesh up` (which passes --parent-pid and sends the slice in an ASSIGN), or by
 * systemd / Kubernetes: with its [[worker]] entry of mesh.toml (--config with --worker or
 * --index) or its addresses as flags, waiting for the ASSIGN of `layermesh up --no-spawn`, or
 * with the slice given as flags. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/crash.h"
#include "common/base/dtype.h"
#include "common/base/log.h"
#include "common/config/mesh_config.h"
#include "worker/worker.h"
#include "common/model/kv_geom.h"

static const char worker_usage[] =
	"usage: layermesh-worker --name NAME --control ADDR --data ADDR [options]\n"
	"       layermesh-worker --config mesh.toml (--worker NAME | --index N) [options]\n"
	"\n"
	"Serves one pipeline stage: listens for control requests (REQ/REP) at --control and for\n"
	"the data ring (PULL) at --data. Without --model it waits for the coordinator's ASSIGN.\n"
	"\n"
	"  --config PATH        take name, control, data, http, backend, device, threads and the\n"
	"                       [tls] files from a [[worker]] of this mesh.toml; flags given as\n"
	"                       well win\n"
	"  --worker NAME        the [[worker]] called NAME (systemd: layermesh-worker@NAME)\n"
	"  --index N            the N-th [[worker]], from 0 (Kubernetes: the pod's ordinal)\n"
	"  --listen-any         listen on every interface at the ports of the tcp:// and http\n"
	"                       addresses, whose hosts then only say where peers dial\n"
	"  --show-config        print the settings this worker would run with, then exit\n"
	"  --insecure           allow plain tcp:// control and data addresses beyond loopback,\n"
	"                       where anyone who reaches them can forge ring messages (refused\n"
	"                       without it, unless mesh.toml says [coordinator] insecure = true)\n"
	"  --name NAME          worker name (as in mesh.toml)\n"
	"  --control ADDR       control address, e.g. ipc:///tmp/lm-w0.ctl or "
	"tcp://127.0.0.1:7001\n"
	"  --data ADDR          data address the predecessor dials\n"
	"  --http ADDR          health server (host:port): /healthz /readyz /status /metrics\n"
	"  --backend B          cpu or cuda (default cpu)\n"
	"  --device N           the CUDA device of backend cuda (default 0)\n"
	"  --threads N          CPU threads (default 1)\n"
	"  --kernels K          auto, scalar or amx (default auto; see `layermesh run --help`)\n"
	"  --parent-pid PID     exit when process PID (the coordinator) exits\n"
	"  --memory-limit SIZE  mesh.toml's memory_limit (\"256MiB\"); a CPU worker resident past\n"
	"                       it once its slice is loaded refuses the slice, naming both\n"
	"                       figures (--config: the [[worker]]'s)\n"
	"  --log-level L        error, warn, info or debug (default info)\n"
	"\n"
	"The slice by flags (for systemd and Kubernetes; a later ASSIGN must match):\n"
	"  --model PATH         GGUF model file\n"
	"  --layers A:B         layers [A, B)\n"
	"  --embedding          this stage owns the token embedding (the first stage)\n"
	"  --head               this stage owns the output norm and lm_head (the last stage)\n"
	"  --next ADDR          the successor's data address (the coordinator's for the last)\n"
	"  --max-seq N          positions per sequence (default 512)\n"
	"  --slots N            concurrent sequences (default 16)\n"
	"  --kv-type T          K and V of every layer: f32, f16, bf16, q8_0, q5_1, q4_0 or\n"
	"                       fp8 (default f32)\n"
	"  --wire-dtype T       f32, f16 or bf16 hidden states on the wire (default f32)\n"
	"  --max-batch N        tokens per FORWARD (default 256)\n"
	"\n"
	"TLS, for tls+tcp:// addresses (mutual: peers must hold certificates the same CA signed,\n"
	"naming \"layermesh\"):\n"
	"  --tls-ca FILE        the mesh's CA (PEM)\n"
	"  --tls-cert FILE      this worker's certificate (PEM)\n"
	"  --tls-key FILE       its private key (PEM)\n"
	"  -h, --help           this text\n";

static int worker_bad(const char *msg, const char *arg)
{
	fprintf(stderr, "layermesh-worker: %s '%s' (see --help)\n", msg, arg);
	return 2;
}

static int worker_int(const char *s, long lo, long hi, int32_t *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = (int32_t)v;
	return 0;
}

/* Fills what the flags left unset from the [[worker]] of cfg called `name`, or at `index` when
 * name is NULL. The strings stay owned by cfg. */
static int worker_from_config(struct worker_opts *o, const struct mesh_config *cfg,
			      const char *name, int32_t index, bool threads_given,
			      bool backend_given, bool kernels_given, bool device_given,
			      const struct mesh_worker **picked)
{
	const struct mesh_worker *w;
	if (name != NULL) {
		if ((w = mesh_config_worker(cfg, name)) == NULL) {
			fprintf(stderr,
				"layermesh-worker: %s has no worker '%s' (its workers:", cfg->path,
				name);
			for (int32_t i = 0; i < cfg->n_workers; i++)
				fprintf(stderr, "%s %s", i ? "," : "", cfg->workers[i].name);
			fprintf(stderr, ")\n");
			return 2;
		}
	} else if (index >= cfg->n_workers) {
		fprintf(stderr,
			"layermesh-worker: --index %d is out of range: %s has %d workers (0 to "
			"%d)\n",
			index, cfg->path, cfg->n_workers, cfg->n_workers - 1);
		return 2;
	} else {
		w = &cfg->workers[index];
	}
	o->name = o->name ? o->name : w->name;
	o->control = o->control ? o->control : w->control;
	o->data = o->data ? o->data : w->data;
	o->http = o->http ? o->http : w->http;
	if (!backend_given)
		o->backend = w->backend == MESH_BACKEND_CUDA ? "cuda" : "cpu";
	if (!threads_given)
		o->backend_opts.n_threads = w->threads;
	if (!kernels_given)
		lm_backend_opts_kernels(&o->backend_opts, mesh_kernels_name(w->kernels));
	if (!device_given)
		o->backend_opts.device = w->device;
	if (o->memory_limit == 0)
		o->memory_limit = w->memory_limit;
	/* The mesh's [tls] files, unless flags named others (a per-host certificate). */
	if (o->tls.ca_file == NULL)
		o->tls.ca_file = cfg->tls_ca_file;
	if (o->tls.cert_file == NULL)
		o->tls.cert_file = cfg->tls_cert_file;
	if (o->tls.key_file == NULL)
		o->tls.key_file = cfg->tls_key_file;
	*picked = w;
	return 0;
}

/* With --listen-any, the address to listen on for a flag's value; else the value. */
static int worker_listen_at(const char **addr, bool http, bool any, char *buf, size_t cap)
{
	char why[256];
	if (*addr == NULL)
		return 0;
	if (mesh_listen_address(*addr, http, any, buf, cap, why, sizeof why) != 0) {
		fprintf(stderr, "layermesh-worker: %s: %s\n", *addr, why);
		return 2;
	}
	*addr = buf;
	return 0;
}

/* What the command line says, before --config fills the rest. */
struct worker_args {
	struct worker_opts o;
	int level;
	bool any_slice_flag, threads_given, backend_given, kernels_given, device_given;
	bool listen_any, show, insecure;
	const char *config, *pick_name;
	int32_t pick_index;
};

static const struct option worker_flags[] = {
	{"name", required_argument, NULL, 'N'},
	{"control", required_argument, NULL, 'C'},
	{"data", required_argument, NULL, 'D'},
	{"http", required_argument, NULL, 'H'},
	{"backend", required_argument, NULL, 'B'},
	{"threads", required_argument, NULL, 'T'},
	{"kernels", required_argument, NULL, 'G'},
	{"parent-pid", required_argument, NULL, 'P'},
	{"memory-limit", required_argument, NULL, 1005},
	{"log-level", required_argument, NULL, 'l'},
	{"model", required_argument, NULL, 'm'},
	{"layers", required_argument, NULL, 'L'},
	{"embedding", no_argument, NULL, 'e'},
	{"head", no_argument, NULL, 'o'},
	{"next", required_argument, NULL, 'x'},
	{"max-seq", required_argument, NULL, 's'},
	{"slots", required_argument, NULL, 'S'},
	{"kv-type", required_argument, NULL, 'k'},
	{"wire-dtype", required_argument, NULL, 'w'},
	{"max-batch", required_argument, NULL, 'b'},
	{"device", required_argument, NULL, 1004},
	{"tls-ca", required_argument, NULL, 1001},
	{"tls-cert", required_argument, NULL, 1002},
	{"tls-key", required_argument, NULL, 1003},
	{"config", required_argument, NULL, 'c'},
	{"worker", required_argument, NULL, 'W'},
	{"index", required_argument, NULL, 'i'},
	{"listen-any", no_argument, NULL, 'a'},
	{"show-config", no_argument, NULL, 'z'},
	{"insecure", no_argument, NULL, 1006},
	{"help", no_argument, NULL, 'h'},
	{0},
};

/* One flag of the slice (for systemd and Kubernetes): 0, or the exit status of a bad value. */
static int worker_slice_flag(struct worker_args *w, int c)
{
	struct wire_assign *a = &w->o.assign;
	int t;
	w->any_slice_flag |= c == 'm' || c == 'L';
	switch (c) {
	case 'm':
		snprintf(a->model, sizeof a->model, "%s", optarg);
		return 0;
	case 'L': {
		char *colon = strchr(optarg, ':');
		if (colon == NULL)
			return worker_bad("--layers expects A:B, got", optarg);
		*colon = '\0';
		bool ok = worker_int(optarg, 0, 1 << 20, &a->begin) == 0 &&
			  worker_int(colon + 1, 1, 1 << 20, &a->end) == 0 && a->begin < a->end;
		*colon = ':';
		return ok ? 0 : worker_bad("--layers expects A:B with A < B, got", optarg);
	}
	case 'e':
		a->embedding = true;
		return 0;
	case 'o':
		a->head = true;
		return 0;
	case 'x':
		snprintf(a->next, sizeof a->next, "%s", optarg);
		return 0;
	case 's':
		return worker_int(optarg, 1, 1 << 24, &a->max_seq) == 0
			       ? 0
			       : worker_bad("--max-seq expects a positive integer, got", optarg);
	case 'S':
		return worker_int(optarg, 1, 4096, &a->slots) == 0
			       ? 0
			       : worker_bad("--slots expects 1..4096, got", optarg);
	case 'k':
		t = lm_dtype_parse(optarg);
		if (t < 0 || !kv_type_supported((enum lm_dtype)t))
			return worker_bad("--kv-type expects f32, f16, bf16, q8_0, q5_1, q4_0 or "
					  "fp8, got",
					  optarg);
		a->k_type = a->v_type = a->k_type_swa = a->v_type_swa = (uint32_t)t;
		return 0;
	case 'w':
		t = lm_dtype_parse(optarg);
		a->wire_dtype = t < 0 ? WIRE_DT_NONE : wire_dtype_of((enum lm_dtype)t);
		return a->wire_dtype != WIRE_DT_NONE
			       ? 0
			       : worker_bad("--wire-dtype expects f32, f16 or bf16, got", optarg);
	default: /* 'b' */
		return worker_int(optarg, 1, 65536, &a->max_batch) == 0
			       ? 0
			       : worker_bad("--max-batch expects 1..65536, got", optarg);
	}
}

/* A flag about the process (--parent-pid, --log-level, --memory-limit): 0, or the exit status
 * of a bad value. */
static int worker_process_flag(struct worker_args *w, int c)
{
	char why[128];
	switch (c) {
	case 'P':
		return worker_int(optarg, 1, 1 << 30, &w->o.parent_pid) == 0
			       ? 0
			       : worker_bad("--parent-pid expects a process id, got", optarg);
	case 'l':
		return (w->level = lm_log_level_parse(optarg)) >= 0
			       ? 0
			       : worker_bad("--log-level expects error, warn, info or debug, got",
					    optarg);
	default: /* --memory-limit */
		return mesh_parse_size(optarg, &w->o.memory_limit, why, sizeof why) == 0
			       ? 0
			       : worker_bad("--memory-limit expects a size such as 256MiB, got",
					    optarg);
	}
}

/* Parses the command line into w: -1 to go on, or the exit status (0 for --help). */
static int worker_parse(int argc, char **argv, struct worker_args *w)
{
	struct worker_opts *o = &w->o;
	int c;
	while ((c = getopt_long(argc, argv, "h", worker_flags, NULL)) != -1) {
		switch (c) {
		case 'N':
			o->name = optarg;
			break;
		case 'C':
			o->control = optarg;
			break;
		case 'D':
			o->data = optarg;
			break;
		case 'H':
			o->http = optarg;
			break;
		case 'B':
			o->backend = optarg;
			w->backend_given = true;
			break;
		case 'T':
			if (worker_int(optarg, 1, 1024, &o->backend_opts.n_threads) != 0)
				return worker_bad("--threads expects 1..1024, got", optarg);
			w->threads_given = true;
			break;
		case 'c':
			w->config = optarg;
			break;
		case 'W':
			w->pick_name = optarg;
			break;
		case 'i':
			if (worker_int(optarg, 0, MESH_MAX_WORKERS - 1, &w->pick_index) != 0)
				return worker_bad("--index expects a worker's position from 0, got",
						  optarg);
			break;
		case 'a':
			w->listen_any = true;
			break;
		case 'z':
			w->show = true;
			break;
		case 1006:
			w->insecure = true;
			break;
		case 1004:
			if (worker_int(optarg, 0, 255, &o->backend_opts.device) != 0)
				return worker_bad("--device expects a CUDA device 0..255, got",
						  optarg);
			w->device_given = true;
			break;
		case 'G':
			if (!lm_backend_opts_kernels(&o->backend_opts, optarg))
				return worker_bad("--kernels expects auto, scalar or amx, got",
						  optarg);
			w->kernels_given = true;
			break;
		case 'P':
		case 'l':
		case 1005: {
			int rc = worker_process_flag(w, c);
			if (rc != 0)
				return rc;
			break;
		}
		case 'm':
		case 'L':
		case 'e':
		case 'o':
		case 'x':
		case 's':
		case 'S':
		case 'k':
		case 'w':
		case 'b': {
			int rc = worker_slice_flag(w, c);
			if (rc != 0)
				return rc;
			break;
		}
		case 1001:
			o->tls.ca_file = optarg;
			break;
		case 1002:
			o->tls.cert_file = optarg;
			break;
		case 1003:
			o->tls.key_file = optarg;
			break;
		case 'h':
			fputs(worker_usage, stdout);
			return 0;
		default:
			fputs(worker_usage, stderr);
			return 2;
		}
	}
	if (optind < argc)
		return worker_bad("unexpected argument", argv[optind]);
	return -1;
}

/* --show-config: key=value lines for scripts (deploy/systemd/install.sh reads memory_limit):
 * the addresses peers dial, then those this process listens on. */
static void worker_show(const struct worker_opts *o, const char *const dial[3],
			const struct mesh_worker *picked)
{
	printf("name=%s\ncontrol=%s\ndata=%s\nhttp=%s\n", o->name, dial[0], dial[1],
	       dial[2] ? dial[2] : "");
	printf("listen_control=%s\nlisten_data=%s\nlisten_http=%s\n", o->control, o->data,
	       o->http ? o->http : "");
	printf("backend=%s\ndevice=%d\nthreads=%d\nkernels=%s\n", o->backend,
	       o->backend_opts.device, o->backend_opts.n_threads,
	       lm_backend_opts_kernels_name(&o->backend_opts));
	if (picked != NULL)
		printf("memory_limit=%llu\n", (unsigned long long)picked->memory_limit);
	if (o->tls.ca_file != NULL)
		printf("tls_ca=%s\ntls_cert=%s\ntls_key=%s\n", o->tls.ca_file,
		       o->tls.cert_file ? o->tls.cert_file : "",
		       o->tls.key_file ? o->tls.key_file : "");
}

int main(int argc, char **argv)
{
	static struct worker_args w = {.o = {.backend = "cpu", .backend_opts = {.n_threads = 1}},
				       .level = LM_LOG_INFO,
				       .pick_index = -1};
	struct worker_opts *o = &w.o;
	struct wire_assign *a = &o->assign;
	struct mesh_config cfg = {0};
	const struct mesh_worker *picked = NULL;
	static char listen_addr[3][512];
	int rc;

	a->max_seq = 512;
	a->slots = 16;
	a->k_type = a->v_type = a->k_type_swa = a->v_type_swa = LM_F32;
	a->wire_dtype = WIRE_DT_F32;
	a->max_batch = 256;
	a->begin = a->end = -1;
	if ((rc = worker_parse(argc, argv, &w)) >= 0)
		return rc;
	if ((w.pick_name != NULL || w.pick_index >= 0) && w.config == NULL) {
		fprintf(stderr, "layermesh-worker: --worker and --index need --config\n");
		return 2;
	}
	if (w.config != NULL) {
		if ((w.pick_name == NULL) == (w.pick_index < 0)) {
			fprintf(stderr, "layermesh-worker: --config needs one of --worker NAME and "
					"--index N\n");
			return 2;
		}
		lm_diag d = {{0}};
		if ((rc = mesh_config_load(&cfg, w.config, &d)) != 0) {
			fprintf(stderr, "layermesh-worker: %s\n", lm_diag_str(&d, rc));
			return 2;
		}
		if ((rc = worker_from_config(o, &cfg, w.pick_name, w.pick_index, w.threads_given,
					     w.backend_given, w.kernels_given, w.device_given,
					     &picked)) != 0)
			goto done;
	}
	if (o->name == NULL || o->control == NULL || o->data == NULL) {
		fprintf(stderr, "layermesh-worker: --name, --control and --data are required "
				"(or --config with --worker or --index)\n");
		rc = 2;
		goto done;
	}
	const char *const dial[3] = {o->control, o->data, o->http};
	const char **listen[3] = {&o->control, &o->data, &o->http};
	for (int i = 0; i < 3; i++)
		if ((rc = worker_listen_at(listen[i], i == 2, w.listen_any, listen_addr[i],
					   sizeof listen_addr[i])) != 0)
			goto done;
	/* Secure by default off the host, as mesh.toml is (common/config/mesh_config.h). */
	const char *plain = worker_plain_beyond_loopback(dial[0])   ? dial[0]
			    : worker_plain_beyond_loopback(dial[1]) ? dial[1]
			    : worker_plain_beyond_loopback(a->next) ? a->next
								    : NULL;
	if (plain != NULL && !w.insecure && !cfg.insecure) {
		fprintf(stderr,
			"layermesh-worker: %s is plain tcp:// beyond loopback, where anyone who "
			"can reach it can forge ring messages: use tls+tcp:// with --tls-ca, "
			"--tls-cert and --tls-key, or pass --insecure to run in the clear anyway\n",
			plain);
		rc = 2;
		goto done;
	}
	if (w.any_slice_flag) {
		if (a->model[0] == '\0' || a->begin < 0 || a->next[0] == '\0') {
			fprintf(stderr,
				"layermesh-worker: a slice by flags needs --model, --layers "
				"and --next\n");
			rc = 2;
			goto done;
		}
		o->preassigned = true;
	}
	if (w.show) {
		worker_show(o, dial, picked);
		rc = 0;
		goto done;
	}
	lm_log_init("layermesh-worker", o->name, (enum lm_log_level)w.level);
	static char crash_name[96];
	snprintf(crash_name, sizeof crash_name, "layermesh-worker[%s]", o->name);
	lm_crash_handler_install(crash_name);
	rc = worker_run(o);
done:
	mesh_config_fini(&cfg);
	return rc;
}

/* layermesh-worker — one pipeline stage of a layermesh mesh.
 *
 * Started by `layermesh up` (which passes --parent-pid and sends the slice in an ASSIGN), or by
 * systemd / Kubernetes with the slice given as flags. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/log.h"
#include "worker/worker.h"

static const char worker_usage[] =
	"usage: layermesh-worker --name NAME --control ADDR --data ADDR [options]\n"
	"\n"
	"Serves one pipeline stage: listens for control requests (REQ/REP) at --control and for\n"
	"the data ring (PULL) at --data. Without --model it waits for the coordinator's ASSIGN.\n"
	"\n"
	"  --name NAME          worker name (as in mesh.toml)\n"
	"  --control ADDR       control address, e.g. ipc:///tmp/lm-w0.ctl or "
	"tcp://127.0.0.1:7001\n"
	"  --data ADDR          data address the predecessor dials\n"
	"  --http ADDR          health server (host:port): /healthz /readyz /status /metrics\n"
	"  --backend B          cpu or cuda (default cpu)\n"
	"  --threads N          CPU threads (default 1)\n"
	"  --kernels K          auto or scalar (default auto)\n"
	"  --parent-pid PID     exit when process PID (the coordinator) exits\n"
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
	"  --kv-type T          f32, f16 or q8_0 for K and V (default f32)\n"
	"  --wire-dtype T       f32, f16 or bf16 hidden states on the wire (default f32)\n"
	"  --max-batch N        tokens per FORWARD (default 256)\n"
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"name", required_argument, NULL, 'N'},
		{"control", required_argument, NULL, 'C'},
		{"data", required_argument, NULL, 'D'},
		{"http", required_argument, NULL, 'H'},
		{"backend", required_argument, NULL, 'B'},
		{"threads", required_argument, NULL, 'T'},
		{"kernels", required_argument, NULL, 'G'},
		{"parent-pid", required_argument, NULL, 'P'},
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
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct worker_opts o = {.backend = "cpu", .backend_opts = {.n_threads = 1}};
	struct wire_assign *a = &o.assign;
	int level = LM_LOG_INFO, c, t;
	bool any_slice_flag = false;

	a->max_seq = 512;
	a->slots = 16;
	a->k_type = a->v_type = LM_F32;
	a->wire_dtype = WIRE_DT_F32;
	a->max_batch = 256;
	a->begin = a->end = -1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'N':
			o.name = optarg;
			break;
		case 'C':
			o.control = optarg;
			break;
		case 'D':
			o.data = optarg;
			break;
		case 'H':
			o.http = optarg;
			break;
		case 'B':
			o.backend = optarg;
			break;
		case 'T':
			if (worker_int(optarg, 1, 1024, &o.backend_opts.n_threads) != 0)
				return worker_bad("--threads expects 1..1024, got", optarg);
			break;
		case 'G':
			if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "scalar") != 0)
				return worker_bad("--kernels expects auto or scalar, got", optarg);
			o.backend_opts.force_scalar = strcmp(optarg, "scalar") == 0;
			break;
		case 'P':
			if (worker_int(optarg, 1, 1 << 30, &o.parent_pid) != 0)
				return worker_bad("--parent-pid expects a process id, got", optarg);
			break;
		case 'l':
			if ((level = lm_log_level_parse(optarg)) < 0)
				return worker_bad(
					"--log-level expects error, warn, info or debug, got",
					optarg);
			break;
		case 'm':
			any_slice_flag = true;
			snprintf(a->model, sizeof a->model, "%s", optarg);
			break;
		case 'L': {
			any_slice_flag = true;
			char *colon = strchr(optarg, ':');
			if (colon == NULL)
				return worker_bad("--layers expects A:B, got", optarg);
			*colon = '\0';
			if (worker_int(optarg, 0, 1 << 20, &a->begin) != 0 ||
			    worker_int(colon + 1, 1, 1 << 20, &a->end) != 0 || a->begin >= a->end) {
				*colon = ':';
				return worker_bad("--layers expects A:B with A < B, got", optarg);
			}
			*colon = ':';
			break;
		}
		case 'e':
			a->embedding = true;
			break;
		case 'o':
			a->head = true;
			break;
		case 'x':
			snprintf(a->next, sizeof a->next, "%s", optarg);
			break;
		case 's':
			if (worker_int(optarg, 1, 1 << 24, &a->max_seq) != 0)
				return worker_bad("--max-seq expects a positive integer, got",
						  optarg);
			break;
		case 'S':
			if (worker_int(optarg, 1, 4096, &a->slots) != 0)
				return worker_bad("--slots expects 1..4096, got", optarg);
			break;
		case 'k':
			t = lm_dtype_parse(optarg);
			if (t != LM_F32 && t != LM_F16 && t != LM_Q8_0)
				return worker_bad("--kv-type expects f32, f16 or q8_0, got",
						  optarg);
			a->k_type = a->v_type = (uint32_t)t;
			break;
		case 'w':
			if (strcmp(optarg, "f32") == 0)
				a->wire_dtype = WIRE_DT_F32;
			else if (strcmp(optarg, "f16") == 0)
				a->wire_dtype = WIRE_DT_F16;
			else if (strcmp(optarg, "bf16") == 0)
				a->wire_dtype = WIRE_DT_BF16;
			else
				return worker_bad("--wire-dtype expects f32, f16 or bf16, got",
						  optarg);
			break;
		case 'b':
			if (worker_int(optarg, 1, 65536, &a->max_batch) != 0)
				return worker_bad("--max-batch expects 1..65536, got", optarg);
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
	if (o.name == NULL || o.control == NULL || o.data == NULL) {
		fprintf(stderr, "layermesh-worker: --name, --control and --data are required\n");
		return 2;
	}
	if (any_slice_flag) {
		if (a->model[0] == '\0' || a->begin < 0 || a->next[0] == '\0') {
			fprintf(stderr,
				"layermesh-worker: a slice by flags needs --model, --layers "
				"and --next\n");
			return 2;
		}
		o.preassigned = true;
	}
	lm_log_init("layermesh-worker", o.name, (enum lm_log_level)level);
	return worker_run(&o);
}

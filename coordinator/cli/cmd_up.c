/* layermesh up — bring the mesh described by mesh.toml up and serve it until SIGINT/SIGTERM. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "coordinator/cli/cli.h"
#include "coordinator/cli/cmds.h"
#include "coordinator/mesh/mesh.h"

static const char up_usage[] =
	"usage: layermesh up [mesh.toml] [options]\n"
	"\n"
	"Plans the fence, starts one layermesh-worker per [[worker]] of mesh.toml (default:\n"
	"./mesh.toml), hands each its slice, and serves the HTTP API of [coordinator] http\n"
	"(POST /v1/completions, GET /v1/models, /healthz, /readyz, /v1/status, /metrics) until\n"
	"SIGINT or SIGTERM, which stop every worker.\n"
	"\n"
	"  --worker-bin PATH  the worker program (default: layermesh-worker beside layermesh)\n"
	"  --no-spawn         attach to workers already running (systemd, Kubernetes)\n"
	"  --listen-any       listen for [coordinator] data_in on every interface at its port:\n"
	"                     its host then only says where the last worker dials (Kubernetes)\n"
	"  --timeout S        seconds a worker may take to answer and to load (default 120)\n"
	"  -h, --help         this text\n";

int cmd_up(int argc, char **argv)
{
	static const struct option opts[] = {
		{"worker-bin", required_argument, NULL, 'w'},
		{"no-spawn", no_argument, NULL, 'N'},
		{"listen-any", no_argument, NULL, 'a'},
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct mesh_opts o = {.config = "mesh.toml", .spawn = true, .handshake_timeout_s = 120};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			o.worker_bin = optarg;
			break;
		case 'N':
			o.spawn = false;
			break;
		case 'a':
			o.listen_any = true;
			break;
		case 't': {
			int32_t t;
			if (lm_cli_int(optarg, 1, 86400, &t) != 0)
				return lm_cli_usage_error(
					"up", "--timeout expects seconds, got '%s'", optarg);
			o.handshake_timeout_s = t;
			break;
		}
		case 'h':
			fputs(up_usage, stdout);
			return 0;
		default:
			fputs(up_usage, stderr);
			return 2;
		}
	}
	if (optind < argc)
		o.config = argv[optind++];
	if (optind < argc)
		return lm_cli_usage_error("up", "unexpected argument '%s'", argv[optind]);
	lm_log_init("layermesh", NULL, LM_LOG_INFO);
	return mesh_up(&o);
}

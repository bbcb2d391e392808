/* Tests of common/mesh_config: the repository's mesh.toml, defaults, sizes and addresses, and
 * the message of every kind of mistake, with its line, column and key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config/mesh_config.h"

#define MiB (1024ull * 1024ull)

/* A valid mesh with one worker; tests append to it or replace parts of it. */
#define MODEL "[model]\npath = \"m.gguf\"\n"
#define COORD "[coordinator]\ndata_in = \"ipc:///tmp/c.data\"\n"
#define WORKER(n, port)                                                       \
	"[[worker]]\nname = \"" n "\"\ndata = \"ipc:///tmp/" n ".data\"\n"    \
	"control = \"ipc:///tmp/" n ".ctl\"\nhttp = \"127.0.0.1:" port "\"\n" \
	"memory_limit = \"8MiB\"\n"

/* A worker without its memory_limit. */
#define NO_LIMIT                                                   \
	"[[worker]]\nname = \"a\"\ndata = \"ipc:///tmp/a.data\"\n" \
	"control = \"ipc:///tmp/a.ctl\"\nhttp = \"127.0.0.1:9000\"\n"

static int parse(struct mesh_config *cfg, const char *text, lm_diag *d)
{
	return mesh_config_parse(cfg, "/srv/mesh/mesh.toml", text, strlen(text), d);
}

/* The text must be refused with exactly this message. */
static void expect_refused(const char *text, const char *want)
{
	struct mesh_config cfg;
	lm_diag d = {{0}};
	int rc = parse(&cfg, text, &d);
	cr_expect_neq(rc, 0, "accepted:\n%s", text);
	cr_expect(strcmp(d.msg, want) == 0, "document:\n%s\n got: %s\nwant: %s", text, d.msg, want);
	cr_expect_null(cfg.workers);
	cr_expect_null(cfg.path);
}

Test(mesh_config, repository_mesh_toml)
{
	const char *root = getenv("LM_SOURCE_ROOT");
	cr_assert_not_null(root, "LM_SOURCE_ROOT is not set (tests/unit/meson.build sets it)");
	char path[4096];
	snprintf(path, sizeof path, "%s/mesh.toml", root);
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(mesh_config_load(&cfg, path, &d), 0, "%s", d.msg);
	char want[4096];
	snprintf(want, sizeof want, "%s/models/stories260K.gguf", root);
	cr_expect_str_eq(cfg.model_path, want);
	cr_expect_eq(cfg.max_seq_len, 0);
	cr_expect_eq(cfg.slots, 16);
	cr_expect_eq(cfg.kv.global.k, LM_F32);
	cr_expect_eq(cfg.kv.global.v, LM_F32);
	cr_expect_eq(cfg.wire_dtype, LM_F32);
	cr_expect_eq(cfg.max_batch, 64);
	cr_expect_str_eq(cfg.http, "127.0.0.1:8080");
	cr_expect_str_eq(cfg.data_in, "ipc:///tmp/layermesh/coordinator.data");
	cr_expect_null(cfg.auth_token);
	cr_expect_eq(cfg.strategy, FENCE_BALANCED);
	cr_expect_null(cfg.tls_ca_file);
	cr_assert_eq(cfg.n_workers, 3);
	for (int j = 0; j < 3; j++) {
		char n[8];
		snprintf(n, sizeof n, "w%d", j);
		cr_expect_str_eq(cfg.workers[j].name, n);
		cr_expect_eq(cfg.workers[j].memory_limit, 8 * MiB);
		cr_expect_eq(cfg.workers[j].speed, 1.0);
		cr_expect_eq(cfg.workers[j].backend, MESH_BACKEND_CPU);
		cr_expect(!cfg.workers[j].pinned);
	}
	cr_expect_str_eq(cfg.workers[1].data, "ipc:///tmp/layermesh/w1.data");
	cr_expect_eq(mesh_config_worker(&cfg, "w2"), &cfg.workers[2]);
	cr_expect_null(mesh_config_worker(&cfg, "w3"));
	mesh_config_fini(&cfg);
	mesh_config_fini(&cfg);
	mesh_config_fini(NULL);
}

Test(mesh_config, defaults_and_every_key)
{
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(parse(&cfg, MODEL COORD WORKER("a", "9000"), &d), 0, "%s", d.msg);
	cr_expect_str_eq(cfg.model_path, "/srv/mesh/m.gguf");
	cr_expect_str_eq(cfg.dir, "/srv/mesh");
	cr_expect_eq(cfg.slots, 16);
	cr_expect_eq(cfg.max_batch, 64);
	cr_expect_eq(cfg.scratch_bytes, 0);
	cr_expect_eq(cfg.log_level, LM_LOG_INFO);
	cr_expect_eq(cfg.batches_in_flight, 0);
	cr_expect_eq(cfg.request_timeout_ms, 30000);
	cr_expect_eq(cfg.worker_timeout_ms, 1000);
	cr_expect(!cfg.insecure);
	cr_expect(!cfg.ring_stamps);
	cr_expect_eq(cfg.strategy, FENCE_BALANCED);
	cr_expect_eq(cfg.workers[0].threads, 1);
	cr_expect_eq(cfg.workers[0].kernels, MESH_KERNELS_AUTO);
	cr_expect_eq(cfg.workers[0].device, 0);
	cr_expect_eq(cfg.workers[0].line, 5);
	mesh_config_fini(&cfg);

	const char *all =
		"[model]\npath = '/abs/m.gguf'\nmax_seq_len = 2048\nslots = 4\n"
		"kv_type_k = 'q8_0'\nkv_type_v = 'f16'\nwire_dtype = 'bf16'\n"
		"max_batch = 32\nscratch_bytes = '1.5MiB'\n"
		"[coordinator]\nhttp = '0.0.0.0:8081'\ndata_in = 'tls+tcp://10.0.0.1:7000'\n"
		"auth_token = 's3cret-token'\nlog_level = 'debug'\nbatches_in_flight = 1\n"
		"request_timeout = 2.5\nworker_timeout = 3\ninsecure = true\nring_stamps = true\n"
		"[plan]\nstrategy = 'pinned'\n"
		"[tls]\nca_file = 'ca.pem'\ncert_file = 'certs/me.pem'\nkey_file = "
		"'/keys/me.key'\n"
		"[[worker]]\nname = 'gpu.0'\ndata = 'tcp://10.0.0.2:7001'\n"
		"control = 'tcp://10.0.0.2:7002'\nhttp = '10.0.0.2:9100'\n"
		"memory_limit = 25769803776\nspeed = 4\nlayers = [0, 20]\nbackend = 'cuda'\n"
		"device = 1\nthreads = 2\n"
		"[[worker]]\nname = 'cpu-1'\ndata = 'ipc:///tmp/x'\ncontrol = 'inproc://y'\n"
		"http = '[::1]:9101'\nmemory_limit = '512 KB'\nspeed = 0.25\n"
		"layers = [20, 32]\nkernels = 'amx'\n";
	cr_assert_eq(parse(&cfg, all, &d), 0, "%s", d.msg);
	cr_expect_str_eq(cfg.model_path, "/abs/m.gguf");
	cr_expect_eq(cfg.max_seq_len, 2048);
	cr_expect_eq(cfg.slots, 4);
	cr_expect_eq(cfg.kv.global.k, LM_Q8_0);
	cr_expect_eq(cfg.kv.global.v, LM_F16);
	/* The sliding layers take the global layers' types unless told otherwise. */
	cr_expect_eq(cfg.kv.swa.k, LM_Q8_0);
	cr_expect_eq(cfg.kv.swa.v, LM_F16);
	cr_expect_eq(cfg.spec, MESH_SPEC_OFF);
	cr_expect_eq(cfg.max_draft, 0);
	cr_expect_eq(cfg.wire_dtype, LM_BF16);
	cr_expect_eq(cfg.max_batch, 32);
	cr_expect_eq(cfg.scratch_bytes, 1572864);
	cr_expect_str_eq(cfg.http, "0.0.0.0:8081");
	cr_expect_str_eq(cfg.auth_token, "s3cret-token");
	cr_expect_eq(cfg.log_level, LM_LOG_DEBUG);
	cr_expect_eq(cfg.batches_in_flight, 1);
	cr_expect_eq(cfg.request_timeout_ms, 2500);
	cr_expect_eq(cfg.worker_timeout_ms, 3000);
	cr_expect(cfg.insecure);
	cr_expect(cfg.ring_stamps);
	cr_expect_eq(cfg.strategy, FENCE_PINNED);
	cr_expect_str_eq(cfg.tls_ca_file, "/srv/mesh/ca.pem");
	cr_expect_str_eq(cfg.tls_cert_file, "/srv/mesh/certs/me.pem");
	cr_expect_str_eq(cfg.tls_key_file, "/keys/me.key");
	cr_assert_eq(cfg.n_workers, 2);
	const struct mesh_worker *g = &cfg.workers[0], *c = &cfg.workers[1];
	cr_expect_eq(g->memory_limit, 24ull << 30);
	cr_expect_eq(g->speed, 4.0);
	cr_expect(g->pinned);
	cr_expect_eq(g->layer_start, 0);
	cr_expect_eq(g->layer_end, 20);
	cr_expect_eq(g->backend, MESH_BACKEND_CUDA);
	cr_expect_eq(g->device, 1);
	cr_expect_eq(g->threads, 2);
	cr_expect_eq(c->memory_limit, 512000);
	cr_expect_eq(c->speed, 0.25);
	cr_expect_eq(c->layer_start, 20);
	cr_expect_eq(c->layer_end, 32);
	cr_expect_eq(c->kernels, MESH_KERNELS_AMX);
	cr_expect_str_eq(mesh_kernels_name(c->kernels), "amx");
	cr_expect_eq(g->kernels, MESH_KERNELS_AUTO);
	mesh_config_fini(&cfg);

	/* Relative paths resolve against the file's directory, whatever it is. */
	const char *text = MODEL COORD WORKER("a", "9000");
	cr_assert_eq(mesh_config_parse(&cfg, "mesh.toml", text, strlen(text), &d), 0, "%s", d.msg);
	cr_expect_str_eq(cfg.model_path, "./m.gguf");
	mesh_config_fini(&cfg);
	cr_assert_eq(mesh_config_parse(&cfg, "/mesh.toml", text, strlen(text), &d), 0, "%s", d.msg);
	cr_expect_str_eq(cfg.model_path, "//m.gguf");
	mesh_config_fini(&cfg);
}

Test(mesh_config, sizes)
{
	static const struct {
		const char *s;
		uint64_t want;
	} good[] = {
		{"128MiB", 134217728ull},
		{"1.5GiB", 1610612736ull},
		{"512KB", 512000ull},
		{"512kB", 512000ull},
		{"64 KiB", 65536ull},
		{"1024", 1024ull},
		{"7B", 7ull},
		{"2TB", 2000000000000ull},
		{"1TiB", 1099511627776ull},
		{"0.5KB", 500ull},
		/* 1.3 x 2^30 = 1395864371.2: rounded down to whole bytes. */
		{"1.3GiB", 1395864371ull},
		{"0.000000001GB", 1ull},
		{"0.0000000001GB", 0ull},
		{"18446744073709551615", 18446744073709551615ull},
		/* (2^24 - 1) x 2^40 + 0.999999999999 x 2^40 = 2^64 - 1.0995...: rounded down. */
		{"16777215.999999999999TiB", 18446744073709551614ull},
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		uint64_t v = 0;
		char why[128] = "";
		cr_expect_eq(mesh_parse_size(good[i].s, &v, why, sizeof why), 0, "%s: %s",
			     good[i].s, why);
		cr_expect_eq(v, good[i].want, "%s: %llu", good[i].s, (unsigned long long)v);
	}
	static const struct {
		const char *s;
		int code;
		const char *why;
	} bad[] = {
		{"", LM_EFORMAT, "a size starts with a digit"},
		{"MiB", LM_EFORMAT, "a size starts with a digit"},
		{"-1MiB", LM_EFORMAT, "a size starts with a digit"},
		{".5GiB", LM_EFORMAT, "a size starts with a digit"},
		{"1.5", LM_EFORMAT, "a fraction needs a unit larger than B"},
		{"1.5B", LM_EFORMAT, "a fraction needs a unit larger than B"},
		{"1.MiB", LM_EFORMAT, "a digit must follow the decimal point"},
		{"1..5MiB", LM_EFORMAT, "a digit must follow the decimal point"},
		{"12 XB", LM_EFORMAT,
		 "unknown unit 'XB' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"},
		{"1mib", LM_EFORMAT,
		 "unknown unit 'mib' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"},
		{"1Mb", LM_EFORMAT,
		 "unknown unit 'Mb' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"},
		{"1  MiB", LM_EFORMAT,
		 "unknown unit ' MiB' (use B, KB, MB, GB, TB, KiB, MiB, GiB or "
		 "TiB)"},
		{"1MiB ", LM_EFORMAT,
		 "unknown unit 'MiB ' (use B, KB, MB, GB, TB, KiB, MiB, GiB or "
		 "TiB)"},
		{"1 ", LM_EFORMAT, "unknown unit '' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"},
		{"1_000", LM_EFORMAT,
		 "unknown unit '_000' (use B, KB, MB, GB, TB, KiB, MiB, GiB or "
		 "TiB)"},
		{"18446744073709551616", LM_ERANGE, "more than 2^64 - 1 bytes"},
		{"16777216TiB", LM_ERANGE, "more than 2^64 - 1 bytes"},
		{"1.0000000000000000001GiB", LM_EFORMAT, "more than 18 decimals"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 12345;
		char why[128] = "";
		cr_expect_eq(mesh_parse_size(bad[i].s, &v, why, sizeof why), bad[i].code, "'%s'",
			     bad[i].s);
		cr_expect_str_eq(why, bad[i].why, "'%s'", bad[i].s);
		cr_expect_eq(v, 12345, "'%s' wrote its output", bad[i].s);
	}
}

Test(mesh_config, addresses)
{
	static const char *const good[] = {
		"ipc:///tmp/layermesh/w0.data",
		"ipc://relative.sock",
		"inproc://a",
		"tcp://127.0.0.1:5555",
		"tcp://host-1.example:1",
		"tls+tcp://h.example:65535",
		"tcp://[::1]:9000",
		"tcp://*:5555",
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		char why[128] = "";
		cr_expect_eq(mesh_check_address(good[i], why, sizeof why), 0, "%s: %s", good[i],
			     why);
	}
	char long_ipc[200] = "ipc://";
	memset(long_ipc + 6, 'a', 108);
	const struct {
		const char *a, *why;
	} bad[] = {
		{"ipc://", "an ipc:// address needs a path"},
		{"inproc://", "an inproc:// address needs a name"},
		{"tcp://127.0.0.1", "no port (write HOST:PORT)"},
		{"tcp://:80", "no host (write HOST:PORT)"},
		{"tcp://h:0", "the port must be 1 to 65535, not 0"},
		{"tcp://h:65536", "the port must be 1 to 65535, not 65536"},
		{"tcp://h:80x", "the port must be a number"},
		{"tcp://h:", "the port must be a number"},
		{"tcp://::1:80", "an IPv6 host goes in brackets: [::1]:PORT"},
		{"tcp://[::1]80", "expected ':PORT' after ']'"},
		{"tcp://[::1:80", "'[' without ']'"},
		{"tcp://[]:80", "an empty IPv6 host"},
		{"tcp://h_1:80", "'_' cannot appear in a host name"},
		{"udp://h:80",
		 "use ipc://PATH, tcp://HOST:PORT, tls+tcp://HOST:PORT or inproc://NAME"},
		{"127.0.0.1:80",
		 "use ipc://PATH, tcp://HOST:PORT, tls+tcp://HOST:PORT or inproc://NAME"},
		{long_ipc, "the path is 108 bytes; a unix socket path holds at most 107"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char why[128] = "";
		cr_expect_eq(mesh_check_address(bad[i].a, why, sizeof why), LM_EFORMAT, "%s",
			     bad[i].a);
		cr_expect_str_eq(why, bad[i].why, "%s", bad[i].a);
	}
	long_ipc[6 + 107] = '\0';
	cr_expect_eq(mesh_check_address(long_ipc, NULL, 0), 0);
	cr_expect_eq(mesh_check_hostport("localhost:8080", NULL, 0), 0);
	cr_expect_eq(mesh_check_hostport("http://localhost:8080", NULL, 0), LM_EFORMAT);
}

Test(mesh_config, listen_addresses)
{
	const struct {
		const char *addr;
		bool http;
		const char *plain, *any;
	} cases[] = {
		{"tcp://layermesh-worker-0.layermesh-mesh:7001", false,
		 "tcp://layermesh-worker-0.layermesh-mesh:7001", "tcp://0.0.0.0:7001"},
		{"tcp://10.0.0.2:7002", false, "tcp://10.0.0.2:7002", "tcp://0.0.0.0:7002"},
		{"tls+tcp://h.example:443", false, "tls+tcp://h.example:443",
		 "tls+tcp://0.0.0.0:443"},
		{"tcp://[fd00::2]:7001", false, "tcp://[fd00::2]:7001", "tcp://[::]:7001"},
		{"tcp://*:5555", false, "tcp://*:5555", "tcp://0.0.0.0:5555"},
		{"ipc:///tmp/w0.data", false, "ipc:///tmp/w0.data", "ipc:///tmp/w0.data"},
		{"inproc://a", false, "inproc://a", "inproc://a"},
		{"w0.mesh.local:9100", true, "w0.mesh.local:9100", "0.0.0.0:9100"},
		{"[::1]:9100", true, "[::1]:9100", "[::]:9100"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char out[128], why[128] = "";
		cr_expect_eq(mesh_listen_address(cases[i].addr, cases[i].http, false, out,
						 sizeof out, why, sizeof why),
			     0, "%s: %s", cases[i].addr, why);
		cr_expect_str_eq(out, cases[i].plain);
		cr_expect_eq(mesh_listen_address(cases[i].addr, cases[i].http, true, out,
						 sizeof out, why, sizeof why),
			     0, "%s: %s", cases[i].addr, why);
		cr_expect_str_eq(out, cases[i].any);
	}
	char out[20], why[128] = "";
	cr_expect_eq(
		mesh_listen_address("tcp://h_1:80", false, true, out, sizeof out, why, sizeof why),
		LM_EFORMAT);
	cr_expect_str_eq(why, "'_' cannot appear in a host name");
	cr_expect_eq(
		mesh_listen_address("tcp://h:80", true, true, out, sizeof out, why, sizeof why),
		LM_EFORMAT, "an NNG address is not an HTTP endpoint");
	cr_expect_eq(mesh_listen_address("tcp://a-long-host-name:7001", false, false, out,
					 sizeof out, why, sizeof why),
		     LM_ERANGE);
	cr_expect_str_eq(why, "the listen address of tcp://a-long-host-name:7001 is too long");
	cr_expect_eq(mesh_listen_address("tcp://a-long-host-name:7001", false, true, out,
					 sizeof out, why, sizeof why),
		     0, "tcp://0.0.0.0:7001 fits in 20 bytes");
	cr_expect_str_eq(out, "tcp://0.0.0.0:7001");
}

/* memra-kv's types: q8_0 K / q5_1 V on the sliding layers, fp8 on the global ones. */
Test(mesh_config, cache_types_per_layer_kind)
{
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(parse(&cfg,
			   MODEL "kv_type_k = 'fp8'\nkv_type_v = 'fp8'\nkv_type_k_swa = 'q8_0'\n"
				 "kv_type_v_swa = 'q5_1'\n" COORD WORKER("a", "9000"),
			   &d),
		     0, "%s", d.msg);
	cr_expect_eq(cfg.kv.global.k, LM_FP8_E4M3);
	cr_expect_eq(cfg.kv.global.v, LM_FP8_E4M3);
	cr_expect_eq(cfg.kv.swa.k, LM_Q8_0);
	cr_expect_eq(cfg.kv.swa.v, LM_Q5_1);
	mesh_config_fini(&cfg);
	cr_assert_eq(parse(&cfg,
			   MODEL
			   "kv_type_v = 'bf16'\nkv_type_k_swa = 'q4_0'\n" COORD WORKER("a", "9000"),
			   &d),
		     0, "%s", d.msg);
	cr_expect_eq(cfg.kv.global.k, LM_F32);
	cr_expect_eq(cfg.kv.global.v, LM_BF16);
	cr_expect_eq(cfg.kv.swa.k, LM_Q4_0);
	cr_expect_eq(cfg.kv.swa.v, LM_BF16);
	mesh_config_fini(&cfg);
}

/* A worker's own cache types, key by key over [model]'s; its sliding layers follow its own
 * kv_type_k / kv_type_v unless it or [model] names sliding types. */
Test(mesh_config, cache_types_per_worker)
{
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(
		parse(&cfg,
		      MODEL "kv_type_k = 'f16'\nkv_type_v = 'f16'\n" COORD WORKER("a", "9000")
			      WORKER("b", "9001") "kv_type_k = 'q8_0'\nkv_type_v = 'q4_0'\n" WORKER(
				      "x", "9002") "kv_type_v = 'bf16'\nkv_type_k_swa = 'fp8'\n",
		      &d),
		0, "%s", d.msg);
	/* a: [model]'s, as it was. */
	cr_expect(!cfg.workers[0].own_kv);
	cr_expect_eq(cfg.workers[0].kv.global.k, LM_F16);
	cr_expect_eq(cfg.workers[0].kv.swa.v, LM_F16);
	/* b: its own on every layer. */
	cr_expect(cfg.workers[1].own_kv);
	cr_expect_eq(cfg.workers[1].kv.global.k, LM_Q8_0);
	cr_expect_eq(cfg.workers[1].kv.global.v, LM_Q4_0);
	cr_expect_eq(cfg.workers[1].kv.swa.k, LM_Q8_0);
	cr_expect_eq(cfg.workers[1].kv.swa.v, LM_Q4_0);
	/* x: K from [model], V its own; sliding K its own, sliding V its V. */
	cr_expect(cfg.workers[2].own_kv);
	cr_expect_eq(cfg.workers[2].kv.global.k, LM_F16);
	cr_expect_eq(cfg.workers[2].kv.global.v, LM_BF16);
	cr_expect_eq(cfg.workers[2].kv.swa.k, LM_FP8_E4M3);
	cr_expect_eq(cfg.workers[2].kv.swa.v, LM_BF16);
	/* The mesh's own types are untouched. */
	cr_expect_eq(cfg.kv.global.v, LM_F16);
	cr_expect_eq(cfg.kv.swa.k, LM_F16);
	mesh_config_fini(&cfg);

	/* [model] names its sliding types: a worker that sets only kv_type_k keeps them. */
	cr_assert_eq(parse(&cfg,
			   MODEL "kv_type_k_swa = 'q8_0'\n" COORD WORKER(
				   "a", "9000") "kv_type_k = 'f16'\n",
			   &d),
		     0, "%s", d.msg);
	cr_expect_eq(cfg.workers[0].kv.global.k, LM_F16);
	cr_expect_eq(cfg.workers[0].kv.global.v, LM_F32);
	cr_expect_eq(cfg.workers[0].kv.swa.k, LM_Q8_0);
	cr_expect_eq(cfg.workers[0].kv.swa.v, LM_F32);
	mesh_config_fini(&cfg);

	/* Setting [model]'s own type again is no type of its own. */
	cr_assert_eq(parse(&cfg, MODEL COORD WORKER("a", "9000") "kv_type_v = 'f32'\n", &d), 0,
		     "%s", d.msg);
	cr_expect(!cfg.workers[0].own_kv);
	mesh_config_fini(&cfg);

	/* Bad values name the file, line, column and worker. */
	expect_refused(MODEL COORD WORKER("a", "9000") WORKER("b", "9001") "kv_type_k = 'q4_K'\n",
		       "/srv/mesh/mesh.toml:17:13: worker[1].kv_type_k: must be \"f32\", \"f16\", "
		       "\"bf16\", \"q8_0\", \"q5_1\", \"q4_0\" or \"fp8\", not \"q4_K\"");
	expect_refused(MODEL COORD WORKER("a", "9000") "kv_type_v_swa = 8\n",
		       "/srv/mesh/mesh.toml:11:17: worker[0].kv_type_v_swa: expected a string, "
		       "found integer");
}

/* The ports of the mesh's TCP listeners that lie in an ephemeral range, and the range read from
 * a file as the kernel writes it. */
Test(mesh_config, ephemeral_ports)
{
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(parse(&cfg,
			   MODEL "[coordinator]\ndata_in = 'tcp://127.0.0.1:40000'\n"
				 "http = '127.0.0.1:8080'\n"
				 "[[worker]]\nname = 'w0'\ndata = 'tcp://127.0.0.1:32767'\n"
				 "control = 'tls+tcp://127.0.0.1:32768'\nhttp = '127.0.0.1:60999'\n"
				 "memory_limit = '8MiB'\n"
				 "[[worker]]\nname = 'w1'\ndata = 'ipc:///tmp/w1.data'\n"
				 "control = 'tcp://127.0.0.1:61000'\nhttp = '127.0.0.1:9001'\n"
				 "memory_limit = '8MiB'\n"
				 "[tls]\nca_file = 'ca'\ncert_file = 'c'\nkey_file = 'k'\n",
			   &d),
		     0, "%s", d.msg);
	char out[512];
	/* Linux's default range: both ends count, the ports next to them do not. */
	cr_expect_eq(mesh_config_ephemeral_ports(&cfg, 32768, 60999, out, sizeof out), 3);
	cr_expect_str_eq(out, "worker w0 http 127.0.0.1:60999, worker w0 control "
			      "tls+tcp://127.0.0.1:32768, [coordinator] data_in "
			      "tcp://127.0.0.1:40000");
	cr_expect_eq(mesh_config_ephemeral_ports(&cfg, 1024, 65535, NULL, 0), 7);
	cr_expect_eq(mesh_config_ephemeral_ports(&cfg, 61001, 65535, out, sizeof out), 0);
	cr_expect_str_eq(out, "");
	/* A short buffer is cut, never overrun; the count is whole. */
	char small[16];
	cr_expect_eq(mesh_config_ephemeral_ports(&cfg, 32768, 60999, small, sizeof small), 3);
	cr_expect_eq(strlen(small), sizeof small - 1);
	mesh_config_fini(&cfg);

	char path[] = "/tmp/lm_test_port_range_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fputs("32768\t60999\n", f);
	fclose(f);
	int32_t lo = 0, hi = 0;
	cr_expect_eq(mesh_local_port_range(path, &lo, &hi), 0);
	cr_expect_eq(lo, 32768);
	cr_expect_eq(hi, 60999);
	static const char *const bad[] = {"60999\t32768\n", "0 100\n", "1 70000\n", "5\n",
					  "1 2 3\n",        "x y\n",   ""};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		f = fopen(path, "w");
		fputs(bad[i], f);
		fclose(f);
		cr_expect_eq(mesh_local_port_range(path, &lo, &hi), LM_EFORMAT, "'%s'", bad[i]);
	}
	unlink(path);
	cr_expect_eq(mesh_local_port_range("/nonexistent/ip_local_port_range", &lo, &hi),
		     LM_ENOENT);
}

Test(mesh_config, speculative_section)
{
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(parse(&cfg, MODEL COORD "[speculative]\n" WORKER("a", "9000"), &d), 0, "%s",
		     d.msg);
	cr_expect_eq(cfg.spec, MESH_SPEC_NGRAM);
	cr_expect_eq(cfg.max_draft, 4);
	cr_expect_eq(cfg.ngram_min, 1);
	cr_expect_eq(cfg.ngram_max, 3);
	cr_expect_eq(cfg.draft_threads, 1);
	cr_expect_eq(cfg.spec_max_streams, 4);
	cr_expect_null(cfg.draft_model);
	mesh_config_fini(&cfg);
	cr_assert_eq(parse(&cfg,
			   MODEL COORD "[speculative]\ndraft_model = 'd.gguf'\nmax_draft = 6\n"
				       "draft_threads = 2\nmax_streams = 0\n" WORKER("a", "9000"),
			   &d),
		     0, "%s", d.msg);
	cr_expect_eq(cfg.spec_max_streams, 0, "0: no bound");
	cr_expect_eq(cfg.spec, MESH_SPEC_MODEL);
	cr_expect_str_eq(cfg.draft_model, "/srv/mesh/d.gguf");
	cr_expect_eq(cfg.max_draft, 6);
	cr_expect_eq(cfg.draft_threads, 2);
	mesh_config_fini(&cfg);
	expect_refused(MODEL COORD "[speculative]\nsource = 'model'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:6:10: speculative.source: source \"model\" needs "
		       "draft_model, the draft GGUF");
	expect_refused(
		MODEL COORD
		"[speculative]\nsource = 'ngram'\ndraft_model = 'd.gguf'\n" WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:7:15: speculative.draft_model: a draft model is not "
		"used with source \"ngram\"");
	expect_refused(MODEL "max_batch = 4\n" COORD
			     "[speculative]\nmax_draft = 4\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:7:13: speculative.max_draft: 4 drafted tokens and "
		       "the step's last token do not fit [model] max_batch 4: they ride in one "
		       "batch");
	expect_refused(MODEL COORD
		       "[speculative]\nngram_min = 3\nngram_max = 2\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:7:13: speculative.ngram_max: must be at least "
		       "ngram_min (3)");
}

Test(mesh_config, unknown_keys_name_line_column_and_key)
{
	expect_refused(
		"[model]\npath = 'm.gguf'\n  slot = 4\n" COORD WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:3:3: model.slot: unknown key; did you mean 'slots'? "
		"([model] takes: path, max_seq_len, slots, kv_type_k, kv_type_v, kv_type_k_swa, "
		"kv_type_v_swa, wire_dtype, max_batch, scratch_bytes, chat_template)");
	expect_refused(
		MODEL COORD WORKER("a", "9000") "memory_limt = 5\n",
		"/srv/mesh/mesh.toml:11:1: worker[0].memory_limt: unknown key; did you mean "
		"'memory_limit'? ([[worker]] takes: name, data, control, http, memory_limit, "
		"speed, layers, backend, device, threads, kernels, kv_type_k, kv_type_v, "
		"kv_type_k_swa, kv_type_v_swa)");
	expect_refused(MODEL COORD WORKER("a", "9000") "[models]\n",
		       "/srv/mesh/mesh.toml:11:2: models: unknown key; did you mean 'model'? "
		       "(mesh.toml takes: model, coordinator, plan, speculative, tls, worker)");
	expect_refused("version = 2\n" MODEL COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:1:1: version: unknown key (mesh.toml takes: model, "
		       "coordinator, plan, speculative, tls, worker)");
	expect_refused(MODEL "[coordinator]\ndata_in = 'ipc:///tmp/c'\nhttp.port = 5\n" WORKER(
			       "a", "9000"),
		       "/srv/mesh/mesh.toml:5:1: coordinator.http: expected a string, found table");
}

Test(mesh_config, types_ranges_and_required_keys)
{
	expect_refused(COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml: missing table [model] (its key 'path' names the GGUF "
		       "model)");
	expect_refused("[model]\nslots = 2\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:1:2: model: missing key 'path' (the GGUF model file)");
	expect_refused("[model]\npath = 5\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:2:8: model.path: expected a string, found integer");
	expect_refused("[model]\npath = ''\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:2:8: model.path: must not be empty");
	expect_refused("[model]\npath = \"a\\u0000b\"\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:2:8: model.path: must not contain a NUL character");
	expect_refused(MODEL "slots = 0\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:9: model.slots: must be 1 to 4096, not 0");
	expect_refused(MODEL "slots = 2.0\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:9: model.slots: expected an integer, found float");
	expect_refused(MODEL "kv_type_k = 'q4_K'\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:13: model.kv_type_k: must be \"f32\", \"f16\", "
		       "\"bf16\", \"q8_0\", \"q5_1\", \"q4_0\" or \"fp8\", not \"q4_K\"");
	expect_refused(MODEL "kv_type_v_swa = 'q8_1'\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:17: model.kv_type_v_swa: must be \"f32\", \"f16\", "
		       "\"bf16\", \"q8_0\", \"q5_1\", \"q4_0\" or \"fp8\", not \"q8_1\"");
	expect_refused(MODEL "wire_dtype = 'F32'\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:14: model.wire_dtype: must be \"f32\", \"f16\" or "
		       "\"bf16\", not \"F32\"");
	expect_refused(MODEL "scratch_bytes = '1 XB'\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:17: model.scratch_bytes: invalid size \"1 XB\": "
		       "unknown unit 'XB' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
	expect_refused(MODEL "max_seq_len = 2097152\n" COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:15: model.max_seq_len: must be 1 to 1048576, not "
		       "2097152");
	expect_refused(MODEL WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml: missing table [coordinator] (its key 'data_in' is the "
		       "address the last worker sends sampled tokens to)");
	expect_refused(MODEL "[coordinator]\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:3:2: coordinator: missing key 'data_in' (the address "
		       "where the coordinator receives sampled tokens, e.g. "
		       "\"ipc:///tmp/layermesh/coordinator.data\")");
	expect_refused(MODEL COORD "log_level = 'verbose'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:13: coordinator.log_level: must be \"error\", "
		       "\"warn\", \"info\" or \"debug\", not \"verbose\"");
	expect_refused(MODEL COORD "batches_in_flight = 65\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:21: coordinator.batches_in_flight: must be 1 to 64, "
		       "not 65");
	expect_refused(MODEL COORD "request_timeout = '30s'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:19: coordinator.request_timeout: expected a "
		       "number of seconds, found string");
	expect_refused(MODEL COORD "worker_timeout = 0\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:18: coordinator.worker_timeout: must be 0.1 to 3600 "
		       "seconds, not 0");
	expect_refused(MODEL COORD "auth_token = 'two words'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:14: coordinator.auth_token: must be printable ASCII "
		       "without spaces (it is sent in an HTTP header)");
	expect_refused(MODEL COORD "[plan]\nstrategy = 'greedy'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:6:12: plan.strategy: must be \"uniform\", \"balanced\" "
		       "or \"pinned\", not \"greedy\"");
	expect_refused("plan = 'balanced'\n" MODEL COORD WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:1:8: plan: expected a table, found string");
	/* Keys after a header belong to that table. */
	expect_refused(
		MODEL COORD "plan = 'balanced'\n" WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:5:1: coordinator.plan: unknown key ([coordinator] takes: "
		"http, data_in, auth_token, log_level, batches_in_flight, max_queued, "
		"http_read_timeout, http_idle_timeout, max_connections, cors_origins, "
		"request_timeout, worker_timeout, insecure, prefix_cache, ui, seed, ring_stamps)");
}

Test(mesh_config, workers)
{
	expect_refused(MODEL COORD, "/srv/mesh/mesh.toml: no [[worker]]: a mesh needs at least one "
				    "worker");
	expect_refused("worker = []\n" MODEL COORD,
		       "/srv/mesh/mesh.toml:1:10: worker: a mesh needs at least one worker");
	expect_refused(MODEL COORD "[worker]\nname = 'a'\n",
		       "/srv/mesh/mesh.toml:5:2: worker: write [[worker]] (an array of tables, one "
		       "per worker), not [worker]");
	expect_refused("worker = [1]\n" MODEL COORD,
		       "/srv/mesh/mesh.toml:1:11: worker[0]: expected a table, found integer");
	expect_refused("worker = [{name = 'x'}]\n" MODEL COORD,
		       "/srv/mesh/mesh.toml:1:11: worker[0]: missing key 'data' (the worker's "
		       "data-plane PULL address, e.g. \"ipc:///tmp/layermesh/w0.data\")");
	expect_refused(MODEL COORD "[[worker]]\nname = 'a'\n",
		       "/srv/mesh/mesh.toml:5:3: worker[0]: missing key 'data' (the worker's "
		       "data-plane PULL address, e.g. \"ipc:///tmp/layermesh/w0.data\")");
	expect_refused(MODEL COORD "[[worker]]\nname = 'a'\ndata = 'ipc:///tmp/a'\ncontrol = "
				   "'ipc:///tmp/b'\nhttp = '127.0.0.1:1'\n",
		       "/srv/mesh/mesh.toml:5:3: worker[0]: missing key 'memory_limit' (everything "
		       "the worker may allocate, e.g. \"128MiB\")");
	expect_refused(MODEL COORD WORKER("a", "9000") WORKER("a", "9001"),
		       "/srv/mesh/mesh.toml:12:8: worker[1].name: 'a' is already the name of "
		       "worker[0] (line 5)");
	expect_refused(MODEL COORD WORKER("a b", "9000"),
		       "/srv/mesh/mesh.toml:6:8: worker[0].name: a worker name is 1 to 63 of A-Z "
		       "a-z 0-9 . _ - (it names files and log lines)");
	expect_refused(MODEL COORD "[[worker]]\nname = 'a'\ndata = 'ipc://'\n",
		       "/srv/mesh/mesh.toml:7:8: worker[0].data: invalid address \"ipc://\": an "
		       "ipc:// address needs a path");
	expect_refused(MODEL COORD WORKER("a", "9000") "memory_limit = 1\n",
		       "/srv/mesh/mesh.toml:11:1: worker[0].memory_limit: duplicate key (already a "
		       "string, from line 10)");
	expect_refused(
		MODEL COORD NO_LIMIT "memory_limit = 0\n",
		"/srv/mesh/mesh.toml:10:16: worker[0].memory_limit: must be a positive number "
		"of bytes, not 0");
	expect_refused(
		MODEL COORD NO_LIMIT "memory_limit = '0KiB'\n",
		"/srv/mesh/mesh.toml:10:16: worker[0].memory_limit: must be more than 0 bytes");
	expect_refused(
		MODEL COORD NO_LIMIT "memory_limit = true\n",
		"/srv/mesh/mesh.toml:10:16: worker[0].memory_limit: expected a size (a string "
		"such as \"128MiB\", or an integer of bytes), found boolean");
	expect_refused(MODEL COORD WORKER("a", "9000") "speed = 0\n",
		       "/srv/mesh/mesh.toml:11:9: worker[0].speed: must be a positive finite "
		       "number, not 0");
	expect_refused(MODEL COORD WORKER("a", "9000") "speed = inf\n",
		       "/srv/mesh/mesh.toml:11:9: worker[0].speed: must be a positive finite "
		       "number, not inf");
	expect_refused(
		MODEL COORD WORKER("a", "9000") "speed = '2'\n",
		"/srv/mesh/mesh.toml:11:9: worker[0].speed: expected a number, found string");
	expect_refused(MODEL COORD WORKER("a", "9000") "device = 0\n",
		       "/srv/mesh/mesh.toml:11:10: worker[0].device: only for backend = \"cuda\"");
	expect_refused(MODEL COORD WORKER("a", "9000") "backend = 'tpu'\n",
		       "/srv/mesh/mesh.toml:11:11: worker[0].backend: must be \"cpu\" or \"cuda\", "
		       "not \"tpu\"");
	expect_refused(MODEL COORD WORKER("a", "9000") "kernels = 'fast'\n",
		       "/srv/mesh/mesh.toml:11:11: worker[0].kernels: must be \"auto\", \"scalar\" "
		       "or \"amx\", not \"fast\"");
	expect_refused(MODEL COORD WORKER("a", "9000") "threads = 0\n",
		       "/srv/mesh/mesh.toml:11:11: worker[0].threads: must be 1 to 1024, not 0");
}

Test(mesh_config, pinned_layers)
{
	expect_refused(MODEL COORD WORKER("a", "9000") "layers = [0, 5]\n",
		       "/srv/mesh/mesh.toml:11:10: worker[0].layers: only allowed when [plan] "
		       "strategy = \"pinned\" (it is \"balanced\")");
	expect_refused(
		MODEL COORD "[plan]\nstrategy = 'pinned'\n" WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:7:3: worker[0]: missing key 'layers' (the pinned strategy "
		"needs [start, end] on every worker)");
	expect_refused(
		MODEL COORD "[plan]\nstrategy = 'pinned'\n" WORKER("a", "9000") "layers = [3, 3]\n",
		"/srv/mesh/mesh.toml:13:10: worker[0].layers: [3, 3] is not a range of layers: "
		"it needs 0 <= start < end <= 4096");
	expect_refused(MODEL COORD
		       "[plan]\nstrategy = 'pinned'\n" WORKER("a", "9000") "layers = [0, '5']\n",
		       "/srv/mesh/mesh.toml:13:10: worker[0].layers: expected [start, end]: two "
		       "integers, the worker running layers start to end - 1");
	expect_refused(MODEL COORD
		       "[plan]\nstrategy = 'pinned'\n" WORKER("a", "9000") "layers = [0, 1, 2]\n",
		       "/srv/mesh/mesh.toml:13:10: worker[0].layers: expected [start, end]: two "
		       "integers, the worker running layers start to end - 1");
}

Test(mesh_config, endpoints_tls_and_auth)
{
	/* Every endpoint is distinct; a TCP port counts once for HTTP, tcp:// and tls+tcp://. */
	expect_refused(MODEL COORD WORKER("a", "9000") WORKER("b", "9000"),
		       "/srv/mesh/mesh.toml:15:8: worker[1].http: the same endpoint as "
		       "worker[0].http (line 9)");
	expect_refused(MODEL "[coordinator]\ndata_in = 'ipc:///tmp/a.data'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:7:8: worker[0].data: the same endpoint as "
		       "coordinator.data_in (line 4)");
	expect_refused(MODEL
		       "[coordinator]\ndata_in = 'tcp://127.0.0.1:9000'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:9:8: worker[0].http: the same endpoint as "
		       "coordinator.data_in (line 4)");
	expect_refused(MODEL "[coordinator]\ndata_in = 'tcp://*:9000'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:9:8: worker[0].http: the same endpoint as "
		       "coordinator.data_in (line 4)");
	expect_refused(MODEL COORD WORKER("a", "8080"),
		       "/srv/mesh/mesh.toml:9:8: worker[0].http: collides with the coordinator's "
		       "default HTTP endpoint 127.0.0.1:8080 (set [coordinator] http)");
	/* The same port on two hosts is fine. */
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_expect_eq(parse(&cfg,
			   MODEL
			   "[coordinator]\ndata_in = 'tcp://127.0.0.2:9000'\n" WORKER("a", "9000"),
			   &d),
		     0, "%s", d.msg);
	mesh_config_fini(&cfg);
	/* TLS material exactly when some address uses it. */
	expect_refused(
		MODEL "[coordinator]\ndata_in = 'tls+tcp://127.0.0.1:7000'\n" WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:4:11: coordinator.data_in: uses tls+tcp://, but there is "
		"no [tls] table (ca_file, cert_file, key_file)");
	expect_refused(
		MODEL COORD
		"[tls]\nca_file = 'a'\ncert_file = 'b'\nkey_file = 'c'\n" WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:5:2: tls: [tls] is set, but no address uses tls+tcp://: "
		"traffic would not be encrypted");
	expect_refused(MODEL COORD "[tls]\nca_file = 'a'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:2: tls: missing key 'cert_file' (this mesh's "
		       "certificate, PEM)");
	/* An API beyond loopback needs a token. */
	expect_refused(MODEL COORD "http = '0.0.0.0:8080'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:8: coordinator.http: the API listens beyond loopback "
		       "on 0.0.0.0:8080: set [coordinator] auth_token or bind it to 127.0.0.1");
	cr_expect_eq(parse(&cfg, MODEL COORD "http = 'localhost:8080'\n" WORKER("a", "9000"), &d),
		     0, "%s", d.msg);
	mesh_config_fini(&cfg);
}

Test(mesh_config, toml_errors_pass_through)
{
	expect_refused("[model]\npath = \"m.gguf\n",
		       "/srv/mesh/mesh.toml:2:8: model.path: unterminated string (a basic string "
		       "ends on the line it starts; use a multi-line string or an escape)");
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_expect_eq(mesh_config_load(&cfg, "/nonexistent/mesh.toml", &d), LM_ENOENT);
	cr_expect_str_eq(d.msg, "/nonexistent/mesh.toml: No such file or directory");
}

/* The API's keys: the queue bound, the HTTP server's limits, CORS origins, the chat format. */
Test(mesh_config, api_keys)
{
	struct mesh_config c;
	lm_diag d = {{0}};
	const char *text = "[model]\npath = 'm.gguf'\nchat_template = 'chatml'\n"
			   "[coordinator]\ndata_in = 'ipc:///tmp/c'\nmax_queued = 0\n"
			   "http_read_timeout = 2.5\nhttp_idle_timeout = 60\nmax_connections = 9\n"
			   "cors_origins = ['https://app.example:8443', 'null']\nui = false\n"
			   "seed = 9007199254740991\n" WORKER("a", "9000");
	cr_assert_eq(mesh_config_parse(&c, "/srv/mesh/mesh.toml", text, strlen(text), &d), 0, "%s",
		     d.msg);
	cr_expect_str_eq(c.chat_template, "chatml");
	cr_expect_eq(c.max_queued, 0);
	cr_expect_eq(c.http_read_timeout, 2.5);
	cr_expect_eq(c.http_idle_timeout, 60);
	cr_expect_eq(c.max_connections, 9);
	cr_assert_eq(c.n_cors, 2);
	cr_expect_str_eq(c.cors_origins[0], "https://app.example:8443");
	cr_expect_str_eq(c.cors_origins[1], "null");
	cr_expect(!c.ui);
	cr_expect_eq(c.seed, 9007199254740991LL);
	mesh_config_fini(&c);
	/* The defaults. */
	text = MODEL COORD WORKER("a", "9000");
	cr_assert_eq(mesh_config_parse(&c, "/srv/mesh/mesh.toml", text, strlen(text), &d), 0, "%s",
		     d.msg);
	cr_expect_null(c.chat_template);
	cr_expect_eq(c.max_queued, 256);
	cr_expect_eq(c.http_read_timeout, 10);
	cr_expect_eq(c.http_idle_timeout, 30);
	cr_expect_eq(c.max_connections, 512);
	cr_expect_eq(c.n_cors, 0);
	cr_expect(c.ui);
	cr_expect_eq(c.seed, -1);
	mesh_config_fini(&c);
	expect_refused(MODEL COORD "seed = -1\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:8: coordinator.seed: must be 0 to 9007199254740991 "
		       "(2^53 - 1), not -1");
	expect_refused(
		MODEL COORD "seed = 42.0\n" WORKER("a", "9000"),
		"/srv/mesh/mesh.toml:5:8: coordinator.seed: expected an integer, found float");
	expect_refused(MODEL COORD "ui = 'off'\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:6: coordinator.ui: expected a boolean, found string");
	expect_refused(
		MODEL "[coordinator]\ndata_in = 'ipc:///tmp/c'\nhttp_read_timeout = 0\n" WORKER(
			"a", "9000"),
		"/srv/mesh/mesh.toml:5:21: coordinator.http_read_timeout: must be 0.1 to 3600 "
		"seconds, not 0");
	expect_refused(MODEL "[coordinator]\ndata_in = 'ipc:///tmp/c'\n"
			     "cors_origins = ['https://a.example/path']\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml:5:17: coordinator.cors_origins[0]: "
		       "\"https://a.example/path\" "
		       "is not an origin (scheme://host[:port], no path, e.g. "
		       "\"https://app.example:8443\")");
}

/* The hosts that plain tcp:// reaches beyond this one, which `plan` warns about: tls+tcp://,
 * ipc:// and loopback never count as plain; the workers' hosts are counted once each, this one
 * (loopback and ipc://) included. */
Test(mesh_config, plain_hosts_beyond_loopback)
{
	static const char text[] = MODEL
		"[coordinator]\ndata_in = \"tcp://127.0.0.1:7000\"\ninsecure = true\n"
		"[tls]\nca_file = \"ca.pem\"\ncert_file = \"mesh.pem\"\nkey_file = \"mesh.key\"\n"
		"[[worker]]\nname = \"a\"\ndata = \"tcp://10.0.0.1:7001\"\n"
		"control = \"tcp://10.0.0.1:7002\"\nhttp = \"127.0.0.1:9000\"\n"
		"memory_limit = \"8MiB\"\n"
		"[[worker]]\nname = \"b\"\ndata = \"tls+tcp://10.0.0.2:7001\"\n"
		"control = \"tls+tcp://10.0.0.2:7002\"\nhttp = \"127.0.0.1:9001\"\n"
		"memory_limit = \"8MiB\"\n"
		"[[worker]]\nname = \"c\"\ndata = \"ipc:///tmp/c.data\"\n"
		"control = \"tcp://localhost:7003\"\nhttp = \"127.0.0.1:9002\"\n"
		"memory_limit = \"8MiB\"\n"
		"[[worker]]\nname = \"d\"\ndata = \"tcp://10.0.0.3:7001\"\n"
		"control = \"tcp://10.0.0.3:7002\"\nhttp = \"127.0.0.1:9003\"\n"
		"memory_limit = \"8MiB\"\n";
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(parse(&cfg, text, &d), 0, "%s", d.msg);
	char hosts[64];
	int32_t workers = -1;
	cr_expect_eq(mesh_config_plain_hosts(&cfg, hosts, sizeof hosts, &workers), 2);
	cr_expect_str_eq(hosts, "10.0.0.1, 10.0.0.3");
	cr_expect_eq(workers, 4, "10.0.0.1, 10.0.0.2, 10.0.0.3 and this host: %d", workers);
	char small[6];
	cr_expect_eq(mesh_config_plain_hosts(&cfg, small, sizeof small, NULL), 2);
	cr_expect_eq(strlen(small), sizeof small - 1, "cut to fit, terminated: '%s'", small);
	mesh_config_fini(&cfg);

	cr_assert_eq(parse(&cfg, MODEL COORD WORKER("a", "9000") WORKER("b", "9001"), &d), 0, "%s",
		     d.msg);
	cr_expect_eq(mesh_config_plain_hosts(&cfg, hosts, sizeof hosts, &workers), 0);
	cr_expect_str_eq(hosts, "");
	cr_expect_eq(workers, 1);
	mesh_config_fini(&cfg);
}

/* Secure by default off the host: a ring or control plane that reaches another host over plain
 * tcp:// is refused, naming the hosts and both ways out, until insecure = true asks for it;
 * loopback, ipc:// and tls+tcp:// never need it. */
Test(mesh_config, plain_tcp_beyond_loopback_needs_insecure)
{
#define FAR_WORKER                                                   \
	"[[worker]]\nname = \"a\"\ndata = \"tcp://10.9.0.1:7001\"\n" \
	"control = \"tcp://10.9.0.1:7002\"\nhttp = \"127.0.0.1:9000\"\nmemory_limit = \"8MiB\"\n"
	expect_refused(MODEL COORD FAR_WORKER,
		       "/srv/mesh/mesh.toml: the control and data planes reach 10.9.0.1 over "
		       "plain tcp://, where anyone who can reach a worker can forge ring "
		       "messages: use tls+tcp:// with a [tls] table, or set [coordinator] "
		       "insecure = true to run in the clear anyway");
	expect_refused(MODEL
		       "[coordinator]\ndata_in = \"tcp://10.9.0.9:7000\"\n" WORKER("a", "9000"),
		       "/srv/mesh/mesh.toml: the control and data planes reach 10.9.0.9 over "
		       "plain tcp://, where anyone who can reach a worker can forge ring "
		       "messages: use tls+tcp:// with a [tls] table, or set [coordinator] "
		       "insecure = true to run in the clear anyway");
	expect_refused(MODEL COORD "insecure = 'yes'\n" FAR_WORKER,
		       "/srv/mesh/mesh.toml:5:12: coordinator.insecure: expected a boolean, found "
		       "string");
	struct mesh_config cfg;
	lm_diag d = {{0}};
	cr_assert_eq(parse(&cfg, MODEL COORD "insecure = true\n" FAR_WORKER, &d), 0, "%s", d.msg);
	cr_expect(cfg.insecure);
	mesh_config_fini(&cfg);
	cr_assert_eq(parse(&cfg,
			   MODEL "[coordinator]\ndata_in = \"tcp://127.0.0.1:7000\"\n"
				 "[[worker]]\nname = \"a\"\ndata = \"tcp://localhost:7001\"\n"
				 "control = \"ipc:///tmp/a.ctl\"\nhttp = \"127.0.0.1:9000\"\n"
				 "memory_limit = \"8MiB\"\n",
			   &d),
		     0, "%s", d.msg);
	mesh_config_fini(&cfg);
#undef FAR_WORKER
}

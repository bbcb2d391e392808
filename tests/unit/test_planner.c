/* Tests of coordinator/planner: stories260K's costs as the planner derives them from the GGUF,
 * checked against the tensor shapes of shared/models/README.md by hand, and `layermesh plan`.
 *
 * stories260K, per layer (f32): attn_norm 64 + ffn_norm 64 floats, attn_q and attn_output
 * 64x64, attn_k and attn_v 64x32, ffn_gate, ffn_up and ffn_down 64x172:
 *     weights  4 x (128 + 2 x 4096 + 2 x 2048 + 3 x 11008) = 181,760 bytes
 *     flops    2 x (2 x 4096 + 2 x 2048 + 3 x 11008)       =  90,624 per token
 *     KV       2 x 4 KV heads x head_dim 8 x 512 positions x 16 slots x 4 bytes = 2,097,152
 * token_embd 64x512: 131,072 bytes; head: output_norm 256 + output 131,072 = 131,328 bytes and
 * 2 x 32,768 = 65,536 flops.
 * Scratch is the engine's estimate (engine/scratch.h, which tests/unit/test_stage.c holds to
 * what a real stage allocates): per worker for max_batch 64 at the model's widest layer, and per
 * layer the probe's trace, 2 x 64 rows x 64 x 4 = 32,768 bytes. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "coordinator/plan/planner.h"
#include "common/format/synth.h"
#include "engine/scratch.h"

/* The same K and V types on every layer, as fence_kv_costs takes them. */
#define KV_TYPES(k, v) (&(const struct kv_types){{(k), (v)}, {(k), (v)}})

#define LAYER_W        181760ull
#define LAYER_F        90624ull
#define LAYER_KV       2228224ull /* 2 x 4 heads x 8 x 512 positions x 17 slots x 4 bytes */
#define EMBD           131072ull
#define HEAD           131328ull
#define HEAD_F         65536ull
#define TRACE          32768ull
/* What the planner counts per layer besides weights and cache (lm_scratch_layer_bytes): the
 * probe's trace and one of the 17 slots' rows, which a redeploy moves in one message. */
#define LAYER_SCRATCH (TRACE + LAYER_KV / 17)

/* The engine's estimate of worker j's scratch in a mesh of n workers of cfg. */
static uint64_t scratch(const struct mesh_config *cfg, int32_t j)
{
	lm_diag d = {{0}};
	gguf_file *f = NULL;
	struct lm_hparams hp;
	cr_assert_eq(gguf_open(cfg->model_path, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	gguf_close(f);
	struct lm_scratch_cfg sc = {.end = hp.n_layer,
				    .embedding = j == 0,
				    .head = j == cfg->n_workers - 1,
				    .max_batch = cfg->max_batch,
				    .slots = cfg->slots + MESH_PROBE_SLOTS,
				    .max_seq = planner_max_seq(cfg, &hp),
				    .wire_dtype = cfg->wire_dtype,
				    .bo = {.n_threads = cfg->workers[j].threads}};
	struct lm_scratch s;
	lm_scratch_estimate(&hp, &sc, &s);
	cr_assert_gt(s.forward, 0);
	cr_assert_eq(s.trace, 0);
	return s.total;
}

static char mesh_path[64];

/* Writes a mesh of `n` workers of memory_limit `limit` over the shared stories260K, with
 * `extra_model` added to [model] and `extra_plan` as the [plan] table's body. */
static void write_mesh(int n, const char *limit, const char *extra_model, const char *extra_plan,
		       const char *const *layers)
{
	const char *shared = getenv("LM_SHARED");
	cr_assert_not_null(shared, "LM_SHARED is not set");
	snprintf(mesh_path, sizeof mesh_path, "/tmp/lm_test_planner_XXXXXX");
	int fd = mkstemp(mesh_path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fprintf(f, "[model]\npath = \"%s/models/stories260K.gguf\"\n%s\n", shared, extra_model);
	fprintf(f, "[coordinator]\ndata_in = \"ipc:///tmp/lm-test-planner-c\"\n");
	fprintf(f, "[plan]\n%s\n", extra_plan);
	for (int j = 0; j < n; j++) {
		fprintf(f,
			"[[worker]]\nname = \"w%d\"\ndata = \"ipc:///tmp/lm-tp-%d.data\"\n"
			"control = \"ipc:///tmp/lm-tp-%d.ctl\"\nhttp = \"127.0.0.1:%d\"\n"
			"memory_limit = \"%s\"\n",
			j, j, j, 19100 + j, limit);
		if (layers != NULL)
			fprintf(f, "layers = %s\n", layers[j]);
	}
	fclose(f);
}

/* A memory_limit of `mib` MiB for the model's share (weights, cache, scratch) plus the bytes
 * of the worker process itself, which every worker's plan carries (LM_WORKER_BASE_BYTES). */
static const char *limit_mib(double mib)
{
	static char buf[4][32];
	static int k;
	char *b = buf[k++ % 4];
	snprintf(b, sizeof buf[0], "%llu",
		 (unsigned long long)(mib * 1048576.0) + (unsigned long long)LM_WORKER_BASE_BYTES);
	return b;
}

static void load(struct mesh_config *cfg)
{
	lm_diag d = {{0}};
	cr_assert_eq(mesh_config_load(cfg, mesh_path, &d), 0, "%s", d.msg);
	unlink(mesh_path);
}

Test(planner, stories260k_balanced_over_three_workers)
{
	write_mesh(3, limit_mib(8), "", "strategy = \"balanced\"", NULL);
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	struct planner_info info;
	lm_diag d = {{0}};
	cr_assert_eq(planner_plan(&cfg, &p, &info, &d), 0, "%s", d.msg);

	cr_expect_eq(info.n_layers, 5);
	cr_expect_eq(info.max_seq, 512); /* the model's context length */
	cr_expect_eq(info.weight_bytes, 5 * LAYER_W);
	cr_expect_eq(info.kv_bytes, 5 * LAYER_KV);
	cr_expect_eq(info.embd_bytes, EMBD);
	cr_expect_eq(info.head_bytes, HEAD);
	cr_expect(!info.tied);

	/* Stage times 2 x 90,624 | 2 x 90,624 | 90,624 + 65,536: no other cut has a slower stage
	 * below 181,248. */
	cr_assert_eq(p.n_workers, 3);
	cr_expect_eq(p.cuts[1], 2);
	cr_expect_eq(p.cuts[2], 4);
	cr_expect_eq(p.stages[0].weight_bytes, 2 * LAYER_W);
	cr_expect_eq(p.stages[0].kv_bytes, 2 * LAYER_KV);
	uint64_t s0 = scratch(&cfg, 0), s1 = scratch(&cfg, 1), s2 = scratch(&cfg, 2);
	cr_expect_eq(s0, s1, "the first worker's embedding rows take no scratch of their own");
	cr_expect_gt(s2, s1 + 64 * 512 * 4, "the head stage adds a batch of logits and more");
	cr_expect_eq(p.stages[0].scratch_bytes, s0 + 2 * LAYER_SCRATCH);
	cr_expect_eq(p.stages[0].total_bytes,
		     2 * LAYER_W + 2 * LAYER_KV + s0 + 2 * LAYER_SCRATCH + EMBD);
	cr_expect_eq(p.stages[1].total_bytes, 2 * LAYER_W + 2 * LAYER_KV + s1 + 2 * LAYER_SCRATCH);
	cr_expect_eq(p.stages[2].total_bytes, LAYER_W + LAYER_KV + s2 + LAYER_SCRATCH + HEAD);
	cr_expect_eq(p.stages[0].flops, 2 * LAYER_F);
	cr_expect_eq(p.stages[2].flops, LAYER_F + HEAD_F);
	cr_expect_eq(p.stages[2].memory_limit, (8ull << 20) + LM_WORKER_BASE_BYTES);
	cr_expect_str_eq(p.stages[2].name, "w2");
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
}

Test(planner, memory_limits_decide)
{
	/* At 3.5 MiB a worker holds one layer at most (two need 4.9 MiB of f32 cache and weights):
	 * three workers cannot hold five layers, and the model needs its 5 layers, embedding,
	 * head and every worker's scratch in all. */
	write_mesh(3, limit_mib(3.5), "", "", NULL);
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_expect_eq(planner_plan(&cfg, &p, NULL, &d), LM_EINFEASIBLE);
	uint64_t need = 5 * (LAYER_W + LAYER_KV + LAYER_SCRATCH) + EMBD + HEAD + scratch(&cfg, 0) +
			scratch(&cfg, 1) + scratch(&cfg, 2);
	char want[96];
	snprintf(want, sizeof want, "= %llu bytes in all", (unsigned long long)need);
	cr_expect(strstr(d.msg, want) != NULL, "%s (want %s)", d.msg, want);
	uint64_t have = 3 * ((7ull << 19) + LM_WORKER_BASE_BYTES); /* 3 x (3.5 MiB + the base) */
	char sz[32];
	snprintf(want, sizeof want, "memory_limits add up to %s = %llu bytes",
		 fence_fmt_bytes(have, sz, sizeof sz), (unsigned long long)have);
	cr_expect(strstr(d.msg, want) != NULL, "%s (want %s)", d.msg, want);
	mesh_config_fini(&cfg);

	/* An f16 cache halves the KV bytes: two layers fit in 3.5 MiB, and the plan goes through. */
	write_mesh(3, limit_mib(3.5), "kv_type_k = \"f16\"\nkv_type_v = \"f16\"", "", NULL);
	load(&cfg);
	cr_assert_eq(planner_plan(&cfg, &p, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(p.stages[0].kv_bytes, 2 * LAYER_KV / 2);
	cr_expect_eq(p.cuts[1], 2);
	cr_expect_eq(p.cuts[2], 4);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
}

Test(planner, settings_reach_the_costs)
{
	/* max_seq_len and slots size the cache; scratch_bytes replaces the estimate (the per-layer
	 * traces' too); uniform cuts 5 layers 3 + 2. */
	write_mesh(2, "64MiB", "max_seq_len = 128\nslots = 2\nscratch_bytes = \"1MiB\"",
		   "strategy = \"uniform\"", NULL);
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	struct planner_info info;
	lm_diag d = {{0}};
	cr_assert_eq(planner_plan(&cfg, &p, &info, &d), 0, "%s", d.msg);
	cr_expect_eq(info.max_seq, 128);
	/* 2 x 4 x 8 x 128 x (2 + 1 probe slot) x 4 = 98,304 a layer. */
	cr_expect_eq(info.kv_bytes, 5 * 98304ull);
	cr_expect_eq(p.cuts[1], 3);
	cr_expect_eq(p.stages[0].scratch_bytes, 1ull << 20);
	cr_expect_eq(p.stages[1].scratch_bytes, 1ull << 20);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);

	/* Pinned ranges are taken as written, and checked against the model. */
	const char *const pins[] = {"[0, 1]", "[1, 5]"};
	write_mesh(2, "64MiB", "", "strategy = \"pinned\"", pins);
	load(&cfg);
	cr_assert_eq(planner_plan(&cfg, &p, NULL, &d), 0, "%s", d.msg);
	cr_expect_eq(p.cuts[1], 1);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
	const char *const past[] = {"[0, 1]", "[1, 6]"};
	write_mesh(2, "64MiB", "", "strategy = \"pinned\"", past);
	load(&cfg);
	cr_expect_eq(planner_plan(&cfg, &p, NULL, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg, "worker 'w1' pins layers [1, 6), but the model has 5 layers");
	mesh_config_fini(&cfg);

	/* A model that is not there. */
	write_mesh(1, "64MiB", "", "", NULL);
	load(&cfg);
	free(cfg.model_path);
	cfg.model_path = strdup("/nonexistent/model.gguf");
	cr_expect_neq(planner_plan(&cfg, &p, NULL, &d), 0);
	cr_expect(strstr(d.msg, "/nonexistent/model.gguf") != NULL, "%s", d.msg);
	mesh_config_fini(&cfg);
}

Test(planner, plan_command)
{
	write_mesh(3, limit_mib(8), "", "", NULL);
	char *text = NULL, *errs = NULL;
	size_t n = 0, en = 0;
	FILE *out = open_memstream(&text, &n), *err = open_memstream(&errs, &en);
	cr_expect_eq(planner_cmd(mesh_path, false, out, err), 0);
	fclose(out);
	fclose(err);
	cr_expect(strstr(text, "(5 layers, n_embd 64, vocab 512, context 512)") != NULL, "%s",
		  text);
	cr_expect(strstr(text,
			 "cache: 512 positions x 16 slots (+1 kept for probes), K f32, V f32: "
			 "10.62 MiB for all layers in one process") != NULL,
		  "%s", text);
	cr_expect(strstr(text, "plan: balanced, 5 layers over 3 workers") != NULL, "%s", text);
	cr_expect(strstr(text, "\nw2      [4, 5) ") != NULL, "%s", text);
	cr_expect_eq(en, 0, "%s", errs);
	free(text);
	free(errs);

	out = open_memstream(&text, &n);
	err = open_memstream(&errs, &en);
	cr_expect_eq(planner_cmd(mesh_path, true, out, err), 0);
	fclose(out);
	fclose(err);
	cJSON *j = cJSON_Parse(text);
	cr_assert_not_null(j, "%s", text);
	cJSON *cuts = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "plan"), "cuts");
	cr_assert_eq(cJSON_GetArraySize(cuts), 4);
	cr_expect_eq(cJSON_GetArrayItem(cuts, 2)->valuedouble, 4);
	cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "kv_bytes")->valuedouble,
		     5.0 * LAYER_KV);
	cJSON_Delete(j);
	free(text);
	free(errs);
	unlink(mesh_path);

	/* Failures go to err, with the exit status 1. */
	write_mesh(3, limit_mib(3), "", "", NULL);
	out = open_memstream(&text, &n);
	err = open_memstream(&errs, &en);
	cr_expect_eq(planner_cmd(mesh_path, false, out, err), 1);
	fclose(out);
	fclose(err);
	cr_expect_eq(n, 0);
	cr_expect(strncmp(errs, "layermesh plan: ", 16) == 0, "%s", errs);
	cr_expect(strstr(errs, "no fence fits") != NULL, "%s", errs);
	free(text);
	free(errs);
	unlink(mesh_path);

	out = open_memstream(&text, &n);
	err = open_memstream(&errs, &en);
	cr_expect_eq(planner_cmd("/nonexistent/mesh.toml", false, out, err), 1);
	fclose(out);
	fclose(err);
	cr_expect_str_eq(errs,
			 "layermesh plan: /nonexistent/mesh.toml: No such file or directory\n");
	free(text);
	free(errs);
}

/* Writes a balanced mesh of 3 workers over the shared stories260K, each of memory_limit `limit`
 * and worker j's body extended by extra[j], its http port http_base + j. */
static void write_mesh_own(const char *limit, const char *const extra[3], int http_base)
{
	const char *shared = getenv("LM_SHARED");
	cr_assert_not_null(shared, "LM_SHARED is not set");
	snprintf(mesh_path, sizeof mesh_path, "/tmp/lm_test_planner_XXXXXX");
	int fd = mkstemp(mesh_path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fprintf(f, "[model]\npath = \"%s/models/stories260K.gguf\"\n", shared);
	fprintf(f, "[coordinator]\ndata_in = \"ipc:///tmp/lm-test-planner-c\"\n");
	for (int j = 0; j < 3; j++)
		fprintf(f,
			"[[worker]]\nname = \"w%d\"\ndata = \"ipc:///tmp/lm-tp-%d.data\"\n"
			"control = \"ipc:///tmp/lm-tp-%d.ctl\"\nhttp = \"127.0.0.1:%d\"\n"
			"memory_limit = \"%s\"\n%s",
			j, j, j, http_base + j, limit, extra[j]);
	fclose(f);
}

/* Each worker priced in its own cache types. At 3.5 MiB (beyond the process itself) a worker holds one layer of f32 cache
 * and two of f16 (memory_limits_decide): the first two workers in f16 and the last in f32 can
 * hold the 5 layers; the last alone in f16 cannot. The plan, the command's table and each
 * worker's ASSIGN carry the types. */
Test(planner, per_worker_cache_types)
{
	static const char *const small_first[3] = {"kv_type_k = \"f16\"\nkv_type_v = \"f16\"\n",
						   "kv_type_k = \"f16\"\nkv_type_v = \"f16\"\n",
						   ""};
	write_mesh_own(limit_mib(3.5), small_first, 19100);
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	struct planner_info info;
	lm_diag d = {{0}};
	cr_assert_eq(planner_plan(&cfg, &p, &info, &d), 0, "%s", d.msg);
	cr_expect_eq(p.cuts[1], 2);
	cr_expect_eq(p.cuts[2], 4);
	cr_expect(p.mixed_kv);
	cr_expect_eq(p.stages[0].kv_bytes, 2 * LAYER_KV / 2);
	cr_expect_eq(p.stages[1].kv_bytes, 2 * LAYER_KV / 2);
	cr_expect_eq(p.stages[2].kv_bytes, LAYER_KV);
	cr_expect_eq(p.stages[0].kv_types.global.v, LM_F16);
	cr_expect_eq(p.stages[2].kv_types.global.v, LM_F32);
	/* What one process of the whole model holds: [model]'s types. */
	cr_expect_eq(info.kv_bytes, 5 * LAYER_KV);
	struct wire_assign a;
	planner_assignment(&cfg, &p, 0, 512, 17, "ipc:///tmp/next", &a);
	cr_expect_eq(a.k_type, LM_F16);
	cr_expect_eq(a.v_type_swa, LM_F16);
	planner_assignment(&cfg, &p, 2, 512, 17, "ipc:///tmp/next", &a);
	cr_expect_eq(a.k_type, LM_F32);
	cr_expect_eq(a.v_type, LM_F32);
	struct kv_types layer_kv[5];
	planner_layer_kv_types(&cfg, &p, layer_kv);
	for (int i = 0; i < 5; i++)
		cr_expect_eq(layer_kv[i].global.k, i < 4 ? LM_F16 : LM_F32, "layer %d", i);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);

	static const char *const small_last[3] = {"", "",
						  "kv_type_k = \"f16\"\nkv_type_v = \"f16\"\n"};
	write_mesh_own(limit_mib(3.5), small_last, 19100);
	load(&cfg);
	cr_expect_eq(planner_plan(&cfg, &p, NULL, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg, "no fence fits") != NULL, "%s", d.msg);
	mesh_config_fini(&cfg);

	/* A type a worker's layers cannot hold names the file, the worker and its line. */
	static const char *const untileable[3] = {"", "kv_type_k = \"q8_0\"\n", ""};
	write_mesh_own(limit_mib(64), untileable, 19100);
	load(&cfg);
	cr_expect_eq(planner_plan(&cfg, &p, NULL, &d), LM_EINVAL);
	char want[160];
	snprintf(want, sizeof want, "%s: worker w1 (line 11), in its own cache types: layer 0",
		 mesh_path);
	cr_expect(strstr(d.msg, want) != NULL, "%s (want %s)", d.msg, want);
	cr_expect(strstr(d.msg, "no q8_0 K / f32 V cache") != NULL, "%s", d.msg);
	mesh_config_fini(&cfg);

	/* `layermesh plan` says which workers have types of their own, and each worker's cell of
	 * the KV table names its type. */
	write_mesh_own(limit_mib(3.5), small_first, 19100);
	char *text = NULL, *errs = NULL;
	size_t n = 0, en = 0;
	FILE *out = open_memstream(&text, &n), *err = open_memstream(&errs, &en);
	cr_expect_eq(planner_cmd(mesh_path, false, out, err), 0);
	fclose(out);
	fclose(err);
	cr_expect(strstr(text, "cache of worker w0: its own types, K f16, V f16\n") != NULL, "%s",
		  text);
	cr_expect(strstr(text, "cache of worker w1: its own types, K f16, V f16\n") != NULL, "%s",
		  text);
	cr_expect(strstr(text, "cache of worker w2") == NULL, "%s", text);
	/* 2 layers x 1,114,112 bytes of f16 K and V (1.06 MiB each), against 4.25 MiB in f32. */
	cr_expect(strstr(text, "w0       f16        1.06   f16        1.06       2.12        4.25"
			       "   50.0%\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text, "w2       f32        1.06   f32        1.06       2.12        2.12"
			       "    0.0%\n") != NULL,
		  "%s", text);
	free(text);
	free(errs);
	unlink(mesh_path);
}

/* A port in the kernel's ephemeral range draws a warning that names it and the range; the range
 * comes from a file, here a test's. */
Test(planner, ephemeral_ports_warned)
{
	static const char *const none[3] = {"", "", ""};
	write_mesh_own(limit_mib(8), none, 40000);
	struct mesh_config cfg;
	load(&cfg);
	char range[] = "/tmp/lm_test_range_XXXXXX";
	int fd = mkstemp(range);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "32768\t60999\n", 12), 12);
	close(fd);
	char *errs = NULL;
	size_t en = 0;
	FILE *err = open_memstream(&errs, &en);
	cr_expect_eq(planner_warn_ephemeral(&cfg, range, err), 3);
	fclose(err);
	char want[512];
	snprintf(
		want, sizeof want,
		"layermesh plan: warning: %s: 3 ports lie in this machine's ephemeral range "
		"32768-60999 (%s), where the kernel takes local ports for outgoing connections: a "
		"busy machine may hold one when the mesh starts, and the listener fails: worker w0 "
		"http 127.0.0.1:40000, worker w1 http 127.0.0.1:40001, worker w2 http "
		"127.0.0.1:40002; move them below 32768 (or shrink the range)\n",
		mesh_path, range);
	cr_expect_str_eq(errs, want);
	free(errs);
	/* Below the range, and without a range to read: nothing. */
	err = open_memstream(&errs, &en);
	cr_expect_eq(planner_warn_ephemeral(&cfg, "/nonexistent/range", err), 0);
	fd = open(range, O_WRONLY | O_TRUNC);
	cr_assert_eq(write(fd, "40003 60999\n", 12), 12);
	close(fd);
	cr_expect_eq(planner_warn_ephemeral(&cfg, range, err), 0);
	fclose(err);
	cr_expect_eq(en, 0, "%s", errs);
	free(errs);
	unlink(range);
	mesh_config_fini(&cfg);

	/* `layermesh plan` asks this machine's kernel, where it can. */
	int32_t lo, hi;
	if (mesh_local_port_range(MESH_PORT_RANGE_FILE, &lo, &hi) == 0) {
		write_mesh_own(limit_mib(8), none, lo);
		char *text = NULL;
		size_t n = 0;
		FILE *out = open_memstream(&text, &n);
		err = open_memstream(&errs, &en);
		cr_expect_eq(planner_cmd(mesh_path, false, out, err), 0);
		fclose(out);
		fclose(err);
		cr_expect(strstr(errs, "ports lie in this machine's ephemeral range") != NULL, "%s",
			  errs);
		free(text);
		free(errs);
		unlink(mesh_path);
	}
}

/* The mission's model: Gemma 4's 60 layers, 50 sliding (window 1024, 16 KV heads x 256) and 10
 * global (4 x 512, each sixth), n_embd 5376, vocabulary 262144, written sparse (the tensor index
 * of a full-size q4_K file, no data), planned for 128 positions of f32 cache. */
static void gemma4_sparse(const char *path)
{
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = path;
	o.arch = "gemma4";
	o.layers = 60;
	o.dim = 5376;
	o.heads = 32;
	o.kv_heads = 4;
	o.kv_heads_swa = 16;
	o.head_dim = 512;
	o.head_dim_swa = 256;
	o.ffn = 21504;
	o.vocab = 262144;
	o.ctx = 131072;
	o.window = 1024;
	o.swa_period = 6;
	o.type = LM_Q4_K;
	o.tied = true;
	o.sparse = true;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
}

/* Writes a mesh of n workers of `per` pinned layers each over model, [model] extra keys (may
 * be empty) added. */
static void write_pinned_kv(const char *model, int n, int per, const char *limit, const char *extra)
{
	snprintf(mesh_path, sizeof mesh_path, "/tmp/lm_test_planner_XXXXXX");
	int fd = mkstemp(mesh_path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fprintf(f, "[model]\npath = \"%s\"\nmax_seq_len = 128\nslots = 1\n%s", model, extra);
	fprintf(f, "[coordinator]\ndata_in = \"ipc:///tmp/lm-test-planner-c\"\n");
	fprintf(f, "[plan]\nstrategy = \"pinned\"\n");
	for (int j = 0; j < n; j++)
		fprintf(f,
			"[[worker]]\nname = \"w%d\"\ndata = \"ipc:///tmp/lm-tp-%d.data\"\n"
			"control = \"ipc:///tmp/lm-tp-%d.ctl\"\nhttp = \"127.0.0.1:%d\"\n"
			"memory_limit = \"%s\"\nlayers = [%d, %d]\n",
			j, j, j, 20000 + j, limit, j * per, (j + 1) * per);
	fclose(f);
}

static void write_pinned(const char *model, int n, int per, const char *limit)
{
	write_pinned_kv(model, n, per, limit, "");
}

Test(planner, gemma4_mission_geometry, .timeout = 120)
{
	char model[] = "/tmp/lm_test_gemma4_XXXXXX";
	int fd = mkstemp(model);
	cr_assert_geq(fd, 0);
	close(fd);
	gemma4_sparse(model);

	/* The geometry, read back from the file. */
	gguf_file *f = NULL;
	lm_diag d = {{0}};
	static struct lm_hparams hp;
	cr_assert_eq(gguf_open(model, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	gguf_close(f);
	int sliding = 0;
	for (int i = 0; i < 60; i++) {
		const struct lm_layer_hparams *l = &hp.layer[i];
		bool global = i % 6 == 5;
		sliding += !global;
		cr_expect_eq(l->window, global ? 0 : 1024, "layer %d", i);
		cr_expect_eq(l->n_head_kv, global ? 4 : 16, "layer %d", i);
		cr_expect_eq(l->head_dim, global ? 512 : 256, "layer %d", i);
	}
	cr_expect_eq(sliding, 50);

	/* One slot, 128 positions, f32: a sliding layer 2 x 16 x 256 x 128 x 4 = 4 MiB, a global
	 * one 2 x 4 x 512 x 128 x 4 = 2 MiB; 220 MiB for the whole model. The legacy allocation,
	 * every layer at the largest stride (16 heads x 512), was 8 MiB a layer, 503,316,480 B. */
	struct kv_geom geom[60];
	struct fence_layer layers[60];
	memset(layers, 0, sizeof layers);
	uint64_t total = 0;
	for (int i = 0; i < 60; i++)
		geom[i] = lm_hparams_kv_geom(&hp, i);
	cr_assert_eq(fence_kv_costs(layers, 60, geom, 128, kv_geom_ring_extra(64, 0), 1,
				    KV_TYPES(LM_F32, LM_F32), &d),
		     0, "%s", d.msg);
	for (int i = 0; i < 60; i++) {
		cr_expect_eq(layers[i].kv_bytes, i % 6 == 5 ? 2ull << 20 : 4ull << 20, "layer %d",
			     i);
		total += layers[i].kv_bytes;
	}
	cr_expect_eq(total, 220ull << 20);
	struct kv_geom widest = {.n_kv_heads = 16, .head_dim = 512};
	uint64_t legacy;
	cr_assert_eq(kv_geom_bytes(&widest, 128, 0, 1, LM_F32, LM_F32, &legacy), 0);
	cr_expect_eq(60 * legacy, 503316480ull);

	/* The planner over 60 single-layer, 20 three-layer and one 60-layer worker: each holds its
	 * own layers' cache at their own geometry, for [model] slots 1 and the probe slot. */
	const int shapes[][2] = {{60, 1}, {20, 3}, {1, 60}};
	for (int k = 0; k < 3; k++) {
		write_pinned(model, shapes[k][0], shapes[k][1], "64GiB");
		struct mesh_config cfg;
		load(&cfg);
		struct fence_plan p;
		cr_assert_eq(planner_plan(&cfg, &p, NULL, &d), 0, "%s", d.msg);
		for (int j = 0; j < p.n_workers; j++) {
			uint64_t want = 0;
			for (int i = p.cuts[j]; i < p.cuts[j + 1]; i++)
				want += 2 * (i % 6 == 5 ? 2ull << 20 : 4ull << 20);
			cr_expect_eq(p.stages[j].kv_bytes, want, "%d workers: w%d", shapes[k][0],
				     j);
		}
		fence_plan_fini(&p);
		mesh_config_fini(&cfg);
	}

	/* Under a 128 MiB cap no fence fits: one q4_K layer alone is far larger, and the planner
	 * says which worker and by how much. */
	write_pinned(model, 60, 1, "128MiB");
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	cr_expect_eq(planner_plan(&cfg, &p, NULL, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg, "worker 'w0' (layers [0, 1)) needs") != NULL, "%s", d.msg);
	mesh_config_fini(&cfg);
	unlink(model);
}

/* What a device would say: `free` bytes free, or a failure. */
struct fake_device {
	uint64_t free;
	int asked;
};

static int fake_mem(void *arg, const struct mesh_worker *w, struct lm_backend_mem *m, lm_diag *d)
{
	struct fake_device *fd = arg;
	fd->asked++;
	cr_expect_eq(w->backend, MESH_BACKEND_CUDA);
	if (fd->free == 0)
		return lm_fail(d, LM_EUNAVAILABLE, "no CUDA device: a test's");
	*m = (struct lm_backend_mem){.kind = "device", .total = 2 * fd->free, .free = fd->free};
	return 0;
}

static void write_cuda_mesh(void)
{
	const char *shared = getenv("LM_SHARED");
	cr_assert_not_null(shared, "LM_SHARED is not set");
	snprintf(mesh_path, sizeof mesh_path, "/tmp/lm_test_planner_XXXXXX");
	int fd = mkstemp(mesh_path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fprintf(f, "[model]\npath = \"%s/models/stories260K.gguf\"\n", shared);
	fprintf(f, "[coordinator]\ndata_in = \"ipc:///tmp/lm-test-planner-c\"\n");
	fprintf(f, "[[worker]]\nname = \"w0\"\ndata = \"ipc:///tmp/lm-tp-0.data\"\n"
		   "control = \"ipc:///tmp/lm-tp-0.ctl\"\nhttp = \"127.0.0.1:19100\"\n"
		   "memory_limit = \"64MiB\"\n");
	fprintf(f, "[[worker]]\nname = \"g1\"\ndata = \"ipc:///tmp/lm-tp-1.data\"\n"
		   "control = \"ipc:///tmp/lm-tp-1.ctl\"\nhttp = \"127.0.0.1:19101\"\n"
		   "backend = \"cuda\"\ndevice = 0\n");
	fclose(f);
}

/* A cuda worker without memory_limit gets its device's free memory, and its bytes there are the
 * device's: weights, KV, the engine's buffers with the lm_head's logits rows, the CUDA
 * backend's scratch bound; not the host's stage rows and messages. */
Test(planner, cuda_workers_default_to_device_memory)
{
	write_cuda_mesh();
	struct mesh_config cfg;
	load(&cfg);
	cr_expect_eq(cfg.workers[1].memory_limit, 0);
	struct fence_plan p;
	lm_diag d = {{0}};
	struct fake_device dev = {.free = 100ull << 20};
	cr_assert_eq(planner_plan_with(&cfg, &p, NULL, fake_mem, &dev, &d), 0, "%s", d.msg);
	cr_expect_eq(dev.asked, 1, "only the cuda worker without a limit is asked");
	cr_expect_eq(p.stages[1].memory_limit, 100ull << 20);
	cr_expect_eq(p.stages[0].memory_limit, 64ull << 20);

	gguf_file *f = NULL;
	struct lm_hparams hp;
	cr_assert_eq(gguf_open(cfg.model_path, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	gguf_close(f);
	const int32_t max_seq = planner_max_seq(&cfg, &hp);
	struct lm_scratch_cfg sc = {.end = hp.n_layer,
				    .head = true,
				    .max_batch = cfg.max_batch,
				    .slots = cfg.slots + MESH_PROBE_SLOTS,
				    .max_seq = max_seq,
				    .wire_dtype = cfg.wire_dtype,
				    .backend = "cuda",
				    .bo = {.device = 0}};
	struct lm_scratch s;
	lm_scratch_estimate(&hp, &sc, &s);
	const uint64_t logits = (uint64_t)cfg.max_batch * (uint64_t)hp.n_vocab * sizeof(float);
	cr_expect_geq(s.forward, logits, "the lm_head's logits rows are in the engine's buffers");
	/* The CUDA backend's own scratch bound is in it (0 in a build without CUDA). */
	cr_log_info("cuda worker: engine buffers %llu, CUDA scratch bound %llu bytes",
		    (unsigned long long)s.forward, (unsigned long long)s.backend);
	const uint64_t layers = (uint64_t)(p.cuts[2] - p.cuts[1]);
	cr_expect_eq(p.stages[1].scratch_bytes,
		     planner_scratch_bytes(&cfg, &hp, 1, max_seq) + layers * LAYER_SCRATCH);
	cr_expect_eq(planner_scratch_bytes(&cfg, &hp, 1, max_seq), s.forward + s.backend);
	cr_expect_eq(p.stages[1].extra_bytes, HEAD);
	fence_plan_fini(&p);

	/* A device too small for even one layer's share: the plan names the worker. */
	dev.free = 1ull << 20;
	cr_expect_eq(planner_plan_with(&cfg, &p, NULL, fake_mem, &dev, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg, "g1") != NULL, "%s", d.msg);

	/* No device to ask: the worker and the reason. */
	dev.free = 0;
	cr_expect_eq(planner_plan_with(&cfg, &p, NULL, fake_mem, &dev, &d), LM_EUNAVAILABLE);
	cr_expect(strstr(d.msg, "worker g1") != NULL && strstr(d.msg, "no memory_limit") != NULL &&
			  strstr(d.msg, "no CUDA device: a test's") != NULL,
		  "%s", d.msg);

	/* The real question, on this machine (no GPU here, or none in the build): refused with
	 * the reason, never a plan with a made-up limit. */
	int rc = planner_plan(&cfg, &p, NULL, &d);
	if (rc == 0) {
		cr_log_info("this machine has a CUDA device: g1 gets %llu bytes",
			    (unsigned long long)p.stages[1].memory_limit);
		cr_expect_gt(p.stages[1].memory_limit, 0);
		fence_plan_fini(&p);
	} else {
		cr_expect(strstr(d.msg, "worker g1") != NULL, "%s", d.msg);
		cr_log_info("no device here: %s", d.msg);
	}
	mesh_config_fini(&cfg);
}

/* The same geometry priced in memra-kv's types: q8_0 K and q5_1 V on the sliding layers, fp8 on
 * the global ones, for 1 slot and the probe slot of 128 positions. A sliding layer's K row is
 * 16 x 256 / 32 x 34 = 4,352 bytes and its V row 3,072 (f32: 16,384 each); a global layer's
 * rows are 2,048 bytes each in fp8 (f32: 8,192). So a sliding layer takes 1,900,544 bytes
 * (f32: 8 MiB), a global one 1 MiB (f32: 4 MiB). The table shows each worker's bytes by type
 * and what it saves against f32. */
Test(planner, gemma4_plan_by_kv_type, .timeout = 120)
{
	char model[] = "/tmp/lm_test_gemma4_XXXXXX";
	int fd = mkstemp(model);
	cr_assert_geq(fd, 0);
	close(fd);
	gemma4_sparse(model);
	write_pinned_kv(model, 4, 15, "64GiB",
			"kv_type_k = \"fp8\"\nkv_type_v = \"fp8\"\nkv_type_k_swa = \"q8_0\"\n"
			"kv_type_v_swa = \"q5_1\"\n");
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	struct planner_info info;
	lm_diag d = {{0}};
	cr_assert_eq(planner_plan(&cfg, &p, &info, &d), 0, "%s", d.msg);
	const uint64_t swa_k = 2 * 128 * 4352ull, swa_v = 2 * 128 * 3072ull,
		       glob = 2 * 128 * 2048ull;
	uint64_t kv = 0, f32 = 0;
	for (int j = 0; j < 4; j++) {
		const struct fence_stage *s = &p.stages[j];
		/* 15 layers a worker: 12 or 13 sliding, 2 or 3 global (each sixth is global). */
		int g = 0;
		for (int i = s->start; i < s->end; i++)
			g += i % 6 == 5;
		const int w = 15 - g;
		cr_expect_eq(s->kv_kind[FENCE_KV_SLIDING][0], (uint64_t)w * swa_k, "w%d", j);
		cr_expect_eq(s->kv_kind[FENCE_KV_SLIDING][1], (uint64_t)w * swa_v, "w%d", j);
		cr_expect_eq(s->kv_kind[FENCE_KV_GLOBAL][0], (uint64_t)g * glob, "w%d", j);
		cr_expect_eq(s->kv_kind[FENCE_KV_GLOBAL][1], (uint64_t)g * glob, "w%d", j);
		cr_expect_eq(s->kv_bytes, (uint64_t)w * (swa_k + swa_v) + (uint64_t)g * 2 * glob);
		cr_expect_eq(s->kv_f32_bytes,
			     (uint64_t)w * (8ull << 20) + (uint64_t)g * (4ull << 20));
		kv += s->kv_bytes;
		f32 += s->kv_f32_bytes;
	}
	cr_expect_eq(kv, 50 * (swa_k + swa_v) + 10 * 2 * glob);
	cr_expect_eq(f32, 440ull << 20);
	cr_expect_eq(info.kv_bytes, kv);
	cr_expect_eq(info.kv_f32_bytes, f32);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);

	/* layermesh plan prints it. */
	write_pinned_kv(model, 4, 15, "64GiB",
			"kv_type_k = \"fp8\"\nkv_type_v = \"fp8\"\nkv_type_k_swa = \"q8_0\"\n"
			"kv_type_v_swa = \"q5_1\"\n");
	char *text = NULL, *errs = NULL;
	size_t tn = 0, en = 0;
	FILE *out = open_memstream(&text, &tn), *err = open_memstream(&errs, &en);
	cr_assert_eq(planner_cmd(mesh_path, false, out, err), 0);
	fclose(out);
	fclose(err);
	cr_log_info("%s", text);
	cr_expect(strstr(text, "global layers K fp8, V fp8; sliding layers K q8_0, V q5_1") != NULL,
		  "%s", text);
	cr_expect(strstr(text, "worker      global K fp8      global V fp8    sliding K q8_0    "
			       "sliding V q5_1     KV MiB  as f32 MiB   saved\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text, "w1                  1.50              1.50             12.75       "
			       "       9.00      24.75      108.00   77.1%\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text, "total               5.00              5.00             53.12       "
			       "      37.50     100.62      440.00   77.1%\n") != NULL,
		  "%s", text);
	free(text);
	free(errs);
	unlink(mesh_path);
	unlink(model);
}

/* A mixture-of-experts geometry (Qwen3-30B-A3B's FFN: 128 experts of width 768, 8 per token, on
 * 48 layers of dim 2048; q8_0, sparse): a layer weighs every expert's bytes, and costs per token
 * only the 8 experts a token takes; a balanced plan over 4 workers prices both. */
Test(planner, qwen3moe_layers_weigh_all_experts_and_cost_the_active_ones, .timeout = 60)
{
	char model[] = "/tmp/lm_test_qwen3moe_XXXXXX";
	int fd = mkstemp(model);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = model;
	o.arch = "qwen3moe";
	o.layers = 48;
	o.dim = 2048;
	o.heads = 16;
	o.kv_heads = 4;
	o.ffn = 6144;
	o.ffn_exp = 768;
	o.experts = 128;
	o.experts_used = 8;
	o.vocab = 151936;
	o.type = LM_Q8_0;
	o.sparse = true;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);

	gguf_file *f = NULL;
	static struct lm_hparams hp;
	cr_assert_eq(gguf_open(model, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	static struct lm_layer_cost lc[48];
	struct lm_model_costs mc = {.layer = lc};
	cr_assert_eq(lm_model_costs(f, &hp, &mc, &d), 0, "%s", d.msg);
	gguf_close(f);
	/* q8_0: 34 bytes per 32 elements. Attention: q and o 2048 x 2048, k and v 2048 x 512;
	 * router 2048 x 128 f32; experts 3 x 128 x 768 x 2048; norms 2 x 2048 + 2 x 128 f32. */
	const uint64_t attn = 2 * 2048 * 2048 + 2 * 2048 * 512, router = 2048 * 128,
		       expert = 3ull * 768 * 2048;
	const uint64_t bytes = (attn + 128 * expert) / 32 * 34 + router * 4 + (2 * 2048 + 256) * 4;
	for (int i = 0; i < 48; i++) {
		cr_expect_eq(lc[i].weight_bytes, bytes, "layer %d", i);
		cr_expect_eq(lc[i].params, attn + router + 128 * expert, "layer %d", i);
		cr_expect_eq(lc[i].flops, 2 * (attn + router + 8 * expert), "layer %d", i);
	}

	write_pinned(model, 4, 12, "64GiB");
	struct mesh_config cfg;
	load(&cfg);
	cfg.strategy = FENCE_BALANCED;
	struct fence_plan p;
	cr_assert_eq(planner_plan(&cfg, &p, NULL, &d), 0, "%s", d.msg);
	uint64_t flops = 0;
	for (int j = 0; j < p.n_workers; j++) {
		int32_t n = p.stages[j].end - p.stages[j].start;
		cr_expect_eq(p.stages[j].weight_bytes, (uint64_t)n * bytes, "w%d", j);
		flops += p.stages[j].flops;
	}
	cr_expect_eq(flops, 48 * lc[0].flops + mc.head_flops);
	cr_expect_eq(p.total_flops, flops);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
	unlink(model);
}

/* gpt-oss-20b's geometry (24 layers of dim 2880, 64 query heads and 8 KV heads of 64, 32
 * experts of width 2880, 4 per token; MXFP4 experts, q8_0 elsewhere, sparse): a layer weighs
 * its MXFP4 experts at 17 bytes per 32 weights, its biases and sinks as f32, and costs per token
 * only the 4 experts a token takes (the biases are added, not multiplied). */
Test(planner, gptoss_mxfp4_experts_weigh_17_bytes_per_32, .timeout = 60)
{
	char model[] = "/tmp/lm_test_gptoss_XXXXXX";
	int fd = mkstemp(model);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = model;
	o.arch = "gpt-oss";
	o.layers = 24;
	o.dim = 2880;
	o.heads = 64;
	o.kv_heads = 8;
	o.head_dim = 64;
	o.ffn = 2880;
	o.experts = 32;
	o.experts_used = 4;
	o.window = 128;
	o.vocab = 201088;
	o.type = LM_Q8_0;
	o.exps_type = LM_MXFP4;
	o.sparse = true;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	gguf_file *f = NULL;
	static struct lm_hparams hp;
	cr_assert_eq(gguf_open(model, &f, &d), 0, "%s", d.msg);
	cr_assert_eq(lm_hparams_load(f, &hp, &d), 0, "%s", d.msg);
	static struct lm_layer_cost lc[24];
	struct lm_model_costs mc = {.layer = lc};
	cr_assert_eq(lm_model_costs(f, &hp, &mc, &d), 0, "%s", d.msg);
	gguf_close(f);
	/* q and o 2880 x 4096, k and v 2880 x 512 in q8_0 (34 bytes per 32); router 2880 x 32 f32;
	 * experts 3 x 32 x 2880 x 2880 in MXFP4 (17 per 32); f32 vectors: biases of q, k, v, o
	 * (4096 + 2 x 512 + 2880), sinks 64, 2 norms of 2880, router bias 32, experts' biases
	 * 3 x 32 x 2880. */
	const uint64_t attn = 2ull * 2880 * 4096 + 2ull * 2880 * 512, router = 2880 * 32,
		       expert = 3ull * 2880 * 2880;
	const uint64_t vec = 4096 + 2 * 512 + 2880 + 64 + 2 * 2880 + 32 + 3 * 32 * 2880;
	const uint64_t bytes = attn / 32 * 34 + 32 * expert / 32 * 17 + (router + vec) * 4;
	for (int i = 0; i < 24; i++) {
		cr_expect_eq(lc[i].weight_bytes, bytes, "layer %d", i);
		cr_expect_eq(lc[i].params, attn + router + 32 * expert, "layer %d", i);
		cr_expect_eq(lc[i].flops, 2 * (attn + router + 4 * expert), "layer %d", i);
	}
	write_pinned(model, 4, 6, "64GiB");
	struct mesh_config cfg;
	load(&cfg);
	cfg.strategy = FENCE_BALANCED;
	struct fence_plan p;
	cr_assert_eq(planner_plan(&cfg, &p, NULL, &d), 0, "%s", d.msg);
	for (int j = 0; j < p.n_workers; j++) {
		int32_t n = p.stages[j].end - p.stages[j].start;
		cr_expect_eq(p.stages[j].weight_bytes, (uint64_t)n * bytes, "w%d", j);
	}
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
	unlink(model);
}

/* The check of planner_check_backends over one model: cfg's workers against f's layers. */
static int check_backends(const struct mesh_config *cfg, lm_diag *d)
{
	gguf_file *f = NULL;
	static struct lm_hparams hp;
	cr_assert_eq(gguf_open(cfg->model_path, &f, d), 0, "%s", d->msg);
	cr_assert_eq(lm_hparams_load(f, &hp, d), 0, "%s", d->msg);
	int rc = planner_check_backends(cfg, f, &hp, d);
	gguf_close(f);
	return rc;
}

/* A copy of stories260K at `out` whose tensor `name` claims type `type` (i32 has f32's size, so
 * the file still reads): a weight type no backend multiplies. */
static void retype_tensor(const char *out, const char *name, uint32_t type)
{
	char path[512];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", getenv("LM_SHARED"));
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	static uint8_t buf[4 << 20];
	const size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	cr_assert(n > 0 && n < sizeof buf);
	/* A tensor info: u64 name length, the name, u32 n_dims, u64 ne[n_dims], u32 type. */
	const size_t len = strlen(name);
	uint8_t key[80];
	for (int i = 0; i < 8; i++)
		key[i] = (uint8_t)((uint64_t)len >> (8 * i));
	memcpy(key + 8, name, len);
	const uint8_t *at = memmem(buf, n, key, 8 + len);
	cr_assert_not_null(at, "no tensor %s", name);
	const size_t j = (size_t)(at - buf) + 8 + len;
	const uint32_t nd = (uint32_t)buf[j] | (uint32_t)buf[j + 1] << 8;
	for (int i = 0; i < 4; i++)
		buf[j + 4 + 8 * nd + (size_t)i] = (uint8_t)(type >> (8 * i));
	f = fopen(out, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(buf, 1, n, f), n);
	fclose(f);
}

/* The plan asks each worker's backend, not a device, whether it runs what the layers it may hold
 * need. The CUDA backend runs everything the engine reads today: gpt-oss (MXFP4 experts,
 * attention sinks, YaRN, the clamped SwiGLU), qwen35's recurrent layers (their delta rule runs
 * on the host around the seam's ops), every cache type mesh.toml takes. What it lacks is refused
 * before any device is asked, naming the worker, the backend and the type: a weight type (a
 * tensor retyped to i32), a cache type outside its list (which mesh.toml cannot name today). */
Test(planner, cuda_workers_refused_what_their_backend_lacks, .timeout = 60)
{
	char model[] = "/tmp/lm_test_cudacheck_XXXXXX";
	int fd = mkstemp(model);
	cr_assert_geq(fd, 0);
	close(fd);
	struct synth_opts o;
	synth_opts_default(&o);
	o.out = model;
	o.arch = "gpt-oss";
	o.layers = 4;
	o.dim = 256;
	o.heads = 8;
	o.kv_heads = 2;
	o.head_dim = 32;
	o.ffn = 256;
	o.experts = 4;
	o.experts_used = 2;
	o.window = 8;
	o.vocab = 512;
	o.type = LM_Q8_0;
	o.exps_type = LM_MXFP4;
	lm_diag d = {{0}};
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	write_pinned(model, 2, 2, "1GiB");
	struct mesh_config cfg;
	load(&cfg);
	cfg.workers[1].backend = MESH_BACKEND_CUDA;
	cfg.workers[1].memory_limit = 0; /* its device is asked for its memory */
	struct fake_device dev = {.free = 1ull << 30};
	struct fence_plan p;
	cr_expect_eq(planner_plan_with(&cfg, &p, NULL, fake_mem, &dev, &d), 0, "%s", d.msg);
	cr_expect_eq(dev.asked, 1);
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
	unlink(model);

	/* A weight type the CUDA backend lacks, on layer 1 of an unpinned cuda worker. */
	char bad[] = "/tmp/lm_test_cudacheck_i32_XXXXXX";
	fd = mkstemp(bad);
	cr_assert_geq(fd, 0);
	close(fd);
	retype_tensor(bad, "blk.1.attn_norm.weight", LM_I32);
	write_cuda_mesh();
	load(&cfg);
	free(cfg.model_path);
	cfg.model_path = strdup(bad);
	dev.asked = 0;
	cr_expect_eq(planner_plan_with(&cfg, &p, NULL, fake_mem, &dev, &d), LM_EUNSUPPORTED);
	cr_expect_eq(dev.asked, 0, "refused before any device is asked");
	cr_log_info("%s", d.msg);
	static const char *const want[] = {
		"worker g1 (line ",
		"backend cuda",
		"may hold any of layers [0, 5) (not pinned)",
		"weights of type i32 (blk.1.attn_norm.weight)",
		"it runs caches f32 f16 q4_0 q5_1 q8_0 bf16 fp8, weights f32 f16 q4_0 q8_0",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		cr_expect(strstr(d.msg, want[i]) != NULL, "'%s' not in: %s", want[i], d.msg);
	mesh_config_fini(&cfg);
	unlink(bad);

	/* Cache types, over stories260K with g1 unpinned: each type mesh.toml takes passes; one
	 * outside the CUDA backend's list (which mesh.toml cannot name today) is refused. */
	write_cuda_mesh();
	load(&cfg);
	static const enum lm_dtype ok[] = {LM_F32,  LM_F16,  LM_BF16,    LM_Q8_0,
					   LM_Q4_0, LM_Q5_1, LM_FP8_E4M3};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		cr_expect(lm_backend_kv_type_ok("cuda", ok[i]), "%s", lm_dtype_name(ok[i]));
		cfg.workers[1].kv = kv_types_uniform(ok[i], ok[i]);
		cr_expect_eq(check_backends(&cfg, &d), 0, "%s: %s", lm_dtype_name(ok[i]), d.msg);
	}
	cfg.workers[1].kv = kv_types_uniform(LM_F16, LM_Q4_K);
	dev.asked = 0;
	cr_expect_eq(planner_plan_with(&cfg, &p, NULL, fake_mem, &dev, &d), LM_EUNSUPPORTED);
	cr_expect_eq(dev.asked, 0);
	cr_expect(strstr(d.msg, "worker g1") != NULL && strstr(d.msg, "backend cuda") != NULL &&
			  strstr(d.msg, "may hold any of layers [0, 5) (not pinned)") != NULL &&
			  strstr(d.msg, "KV cache type q4_K (global layers)") != NULL,
		  "%s", d.msg);
	/* The same types on a cpu worker: the reference runs them all. */
	cfg.workers[1].backend = MESH_BACKEND_CPU;
	cr_expect_eq(check_backends(&cfg, &d), 0, "%s", d.msg);
	mesh_config_fini(&cfg);

	/* qwen35: recurrent layers on a cuda worker pass. */
	char q35[] = "/tmp/lm_test_cudacheck_q35_XXXXXX";
	fd = mkstemp(q35);
	cr_assert_geq(fd, 0);
	close(fd);
	synth_opts_default(&o);
	o.out = q35;
	o.arch = "qwen35";
	o.layers = 4;
	o.dim = 128;
	o.heads = 4;
	o.kv_heads = 2;
	o.ffn = 256;
	o.vocab = 512;
	o.type = LM_Q8_0;
	cr_assert_eq(synth_write(&o, NULL, &d), 0, "%s", d.msg);
	write_pinned(q35, 2, 2, "1GiB");
	load(&cfg);
	cfg.workers[0].backend = cfg.workers[1].backend = MESH_BACKEND_CUDA;
	cr_expect_eq(check_backends(&cfg, &d), 0, "%s", d.msg);
	mesh_config_fini(&cfg);
	unlink(q35);
}

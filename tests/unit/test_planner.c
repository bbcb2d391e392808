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
#include <unistd.h>

#include "coordinator/planner.h"
#include "engine/scratch.h"

#define LAYER_W  181760ull
#define LAYER_F  90624ull
#define LAYER_KV 2228224ull /* 2 x 4 heads x 8 x 512 positions x 17 slots x 4 bytes */
#define EMBD     131072ull
#define HEAD     131328ull
#define HEAD_F   65536ull
#define TRACE    32768ull

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
				    .k_type = cfg->kv_type_k,
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

static void load(struct mesh_config *cfg)
{
	lm_diag d = {{0}};
	cr_assert_eq(mesh_config_load(cfg, mesh_path, &d), 0, "%s", d.msg);
	unlink(mesh_path);
}

Test(planner, stories260k_balanced_over_three_workers)
{
	write_mesh(3, "8MiB", "", "strategy = \"balanced\"", NULL);
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
	cr_expect_eq(p.stages[0].scratch_bytes, s0 + 2 * TRACE);
	cr_expect_eq(p.stages[0].total_bytes, 2 * LAYER_W + 2 * LAYER_KV + s0 + 2 * TRACE + EMBD);
	cr_expect_eq(p.stages[1].total_bytes, 2 * LAYER_W + 2 * LAYER_KV + s1 + 2 * TRACE);
	cr_expect_eq(p.stages[2].total_bytes, LAYER_W + LAYER_KV + s2 + TRACE + HEAD);
	cr_expect_eq(p.stages[0].flops, 2 * LAYER_F);
	cr_expect_eq(p.stages[2].flops, LAYER_F + HEAD_F);
	cr_expect_eq(p.stages[2].memory_limit, 8ull << 20);
	cr_expect_str_eq(p.stages[2].name, "w2");
	fence_plan_fini(&p);
	mesh_config_fini(&cfg);
}

Test(planner, memory_limits_decide)
{
	/* At 3.5 MiB a worker holds one layer at most (two need 4.9 MiB of f32 cache and weights):
	 * three workers cannot hold five layers, and the model needs its 5 layers, embedding,
	 * head and every worker's scratch in all. */
	write_mesh(3, "3.5MiB", "", "", NULL);
	struct mesh_config cfg;
	load(&cfg);
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_expect_eq(planner_plan(&cfg, &p, NULL, &d), LM_EINFEASIBLE);
	uint64_t need = 5 * (LAYER_W + LAYER_KV + TRACE) + EMBD + HEAD + scratch(&cfg, 0) +
			scratch(&cfg, 1) + scratch(&cfg, 2);
	char want[96];
	snprintf(want, sizeof want, "= %llu bytes in all", (unsigned long long)need);
	cr_expect(strstr(d.msg, want) != NULL, "%s (want %s)", d.msg, want);
	cr_expect(strstr(d.msg, "memory_limits add up to 10.50 MiB = 11010048 bytes") != NULL, "%s",
		  d.msg);
	mesh_config_fini(&cfg);

	/* An f16 cache halves the KV bytes: two layers fit in 3.5 MiB, and the plan goes through. */
	write_mesh(3, "3.5MiB", "kv_type_k = \"f16\"\nkv_type_v = \"f16\"", "", NULL);
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
	write_mesh(3, "8MiB", "", "", NULL);
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
	write_mesh(3, "3MiB", "", "", NULL);
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

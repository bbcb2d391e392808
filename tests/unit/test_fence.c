/* Tests of common/fence: KV sizing per layer (the arithmetic of the incident the project exists
 * to prevent, and a mixed sliding-window/global geometry), the three strategies, the balanced
 * strategy against brute force over every fence, the messages of impossible plans, and the
 * table and JSON renderings. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/plan/fence.h"

/* The same K and V types on every layer, as fence_kv_costs takes them. */
#define KV_TYPES(k, v) (&(const struct kv_types){{(k), (v)}, {(k), (v)}})

#define MiB            (1024ull * 1024ull)
#define GiB            (1024ull * MiB)

/* ---- KV bytes, layer by layer ------------------------------------------------------------- */

/* The incident: a 60-layer model with 16 KV heads of head_dim 512, max_seq 128, f32 K and V,
 * one slot. Per layer 2 x 16 x 512 x 128 x 4 = 8,388,608 bytes; the whole model 60 times that,
 * 503,316,480; a worker running 3 layers needs 25,165,824, not the whole model's cache. */
Test(fence_kv, incident_arithmetic)
{
	struct kv_geom geom[60];
	struct fence_layer layers[60];
	memset(layers, 0, sizeof layers);
	for (int i = 0; i < 60; i++)
		geom[i] = (struct kv_geom){.n_kv_heads = 16, .head_dim = 512, .window = 0};
	lm_diag d = {{0}};
	cr_assert_eq(fence_kv_costs(layers, 60, geom, 128, 0, 1, KV_TYPES(LM_F32, LM_F32), &d), 0,
		     "%s", d.msg);
	uint64_t whole = 0;
	for (int i = 0; i < 60; i++) {
		cr_expect_eq(layers[i].kv_bytes, 8388608ull, "layer %d", i);
		whole += layers[i].kv_bytes;
	}
	cr_expect_eq(whole, 503316480ull);

	/* Twenty workers of three layers each: each holds 3 layers' KV, and a 128 MiB limit,
	 * which the whole model's KV (480 MiB) would break, is enough. */
	struct fence_worker w[20];
	for (int j = 0; j < 20; j++)
		w[j] = (struct fence_worker){.memory_limit = 128 * MiB, .speed = 1.0};
	struct fence_input in = {.strategy = FENCE_UNIFORM,
				 .n_layers = 60,
				 .layers = layers,
				 .n_workers = 20,
				 .workers = w};
	struct fence_plan p;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	for (int j = 0; j < 20; j++) {
		cr_expect_eq(p.stages[j].end - p.stages[j].start, 3);
		cr_expect_eq(p.stages[j].kv_bytes, 25165824ull, "worker %d", j);
	}
	fence_plan_fini(&p);

	/* One worker under the same 128 MiB limit cannot hold the whole model's cache, and the
	 * message says so with the numbers. */
	in.n_workers = 1;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg,
			 "worker 'w0' (layers [0, 60)) needs 480.00 MiB = 503316480 bytes") != NULL,
		  "%s", d.msg);
	cr_expect(strstr(d.msg, "against its memory_limit of 128.00 MiB = 134217728 bytes") != NULL,
		  "%s", d.msg);

	/* A one-layer slice. */
	in.n_layers = 1;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect_eq(p.stages[0].kv_bytes, 8388608ull);
	fence_plan_fini(&p);
}

/* Fifty sliding-window layers and ten global layers with other heads and head size, sized one
 * by one (every sixth layer global):
 *   sliding: 8 KV heads x 256, window 1024, 2 slots, f16: 2 x 8 x 256 x 1024 x 2 x 2 = 16 MiB
 *   global:  4 KV heads x 512, max_seq 8192, 2 slots, f16: 2 x 4 x 512 x 8192 x 2 x 2 = 128 MiB
 *   whole model: 50 x 16 MiB + 10 x 128 MiB = 2080 MiB = 2,181,038,080 bytes. */
Test(fence_kv, mixed_geometry_layer_by_layer)
{
	struct kv_geom geom[60];
	struct fence_layer layers[60];
	memset(layers, 0, sizeof layers);
	for (int i = 0; i < 60; i++)
		geom[i] = i % 6 == 5 ? (struct kv_geom){.n_kv_heads = 4, .head_dim = 512}
				     : (struct kv_geom){
					       .n_kv_heads = 8, .head_dim = 256, .window = 1024};
	lm_diag d = {{0}};
	cr_assert_eq(fence_kv_costs(layers, 60, geom, 8192, 0, 2, KV_TYPES(LM_F16, LM_F16), &d), 0,
		     "%s", d.msg);
	uint64_t whole = 0;
	for (int i = 0; i < 60; i++) {
		cr_expect_eq(layers[i].kv_bytes, i % 6 == 5 ? 134217728ull : 16777216ull,
			     "layer %d", i);
		whole += layers[i].kv_bytes;
	}
	cr_expect_eq(whole, 2181038080ull);

	/* Rings for batches of 64 tokens keep 63 rows more than the window (a chunk of one slot is
	 * stored whole before it reads); global layers are unchanged. */
	struct fence_layer ringed[60];
	memset(ringed, 0, sizeof ringed);
	cr_assert_eq(fence_kv_costs(ringed, 60, geom, 8192, kv_geom_ring_extra(64, 0), 2,
				    KV_TYPES(LM_F16, LM_F16), &d),
		     0, "%s", d.msg);
	cr_expect_eq(ringed[0].kv_bytes, 2ull * 8 * 256 * (1024 + 63) * 2 * 2);
	cr_expect_eq(ringed[5].kv_bytes, 134217728ull);

	/* Pinned slices hold exactly their layers: [3, 9) has one global layer (5): 5 x 16 + 128. */
	struct fence_worker w[3] = {
		{.name = "a", .memory_limit = 4 * GiB, .speed = 1, .pin_start = 0, .pin_end = 3},
		{.name = "b", .memory_limit = 4 * GiB, .speed = 1, .pin_start = 3, .pin_end = 9},
		{.name = "c", .memory_limit = 4 * GiB, .speed = 1, .pin_start = 9, .pin_end = 60},
	};
	struct fence_input in = {.strategy = FENCE_PINNED,
				 .n_layers = 60,
				 .layers = layers,
				 .n_workers = 3,
				 .workers = w};
	struct fence_plan p;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect_eq(p.stages[0].kv_bytes, 3 * 16 * MiB);
	cr_expect_eq(p.stages[1].kv_bytes, 208 * MiB);
	/* [9, 60): 51 layers, globals 11, 17, ..., 59 (9 of them): 42 x 16 + 9 x 128 MiB. */
	cr_expect_eq(p.stages[2].kv_bytes, (42 * 16 + 9 * 128) * MiB);
	fence_plan_fini(&p);

	/* A window wider than max_seq holds max_seq positions; q8_0 rows are 34 bytes per 32. */
	struct kv_geom wide = {.n_kv_heads = 8, .head_dim = 256, .window = 16384};
	struct fence_layer one = {0};
	cr_assert_eq(fence_kv_costs(&one, 1, &wide, 4096, 0, 1, KV_TYPES(LM_Q8_0, LM_F32), &d), 0,
		     "%s", d.msg);
	/* K: 2048 / 32 x 34 = 2176 bytes a position; V: 2048 x 4 = 8192; 4096 positions. */
	cr_expect_eq(one.kv_bytes, (2176ull + 8192ull) * 4096ull);
	/* q8_0 cannot hold heads that are not a multiple of 32 (a block may not straddle two
	 * heads, even where the row of all heads is: 4 x 8 = 32); the message names the layer,
	 * its kind, its geometry and the reason. */
	struct kv_geom odd[2] = {{.n_kv_heads = 1, .head_dim = 64},
				 {.n_kv_heads = 4, .head_dim = 8}};
	struct fence_layer two[2] = {{0}};
	cr_expect_eq(fence_kv_costs(two, 2, odd, 64, 0, 1, KV_TYPES(LM_F32, LM_Q8_0), &d),
		     LM_EINVAL);
	cr_expect_str_eq(d.msg,
			 "layer 1 (global, 4 KV heads x head_dim 8): no f32 K / q8_0 V cache: "
			 "q8_0 stores blocks of 32 values, which do not tile head_dim 8: a "
			 "block may not straddle two heads");
}

/* Recurrent layers (qwen35's delta-nets: conv ring 24576 f32 and state 524288 f32 per slot, 4
 * states kept for rollback) beside global ones: their bytes are per slot whatever max_seq and
 * the cache types, and the plan's table and JSON show them in their own columns. */
Test(fence_kv, recurrent_layers_by_kind)
{
	struct kv_geom geom[4];
	for (int i = 0; i < 4; i++)
		geom[i] = i % 2 == 1 ? (struct kv_geom){.n_kv_heads = 2, .head_dim = 32}
				     : (struct kv_geom){.conv = 24576, .state = 524288, .keep = 4};
	struct fence_layer short_ctx[4], long_ctx[4];
	memset(short_ctx, 0, sizeof short_ctx);
	memset(long_ctx, 0, sizeof long_ctx);
	lm_diag d = {{0}};
	cr_assert_eq(fence_kv_costs(short_ctx, 4, geom, 256, 0, 2, KV_TYPES(LM_Q8_0, LM_Q8_0), &d),
		     0, "%s", d.msg);
	cr_assert_eq(fence_kv_costs(long_ctx, 4, geom, 65536, 0, 2, KV_TYPES(LM_F32, LM_F32), &d),
		     0, "%s", d.msg);
	/* 2 slots x (1 + 4) states x (24576 + 524288) x 4 bytes. */
	cr_expect_eq(short_ctx[0].kv_bytes, 2ull * 5 * (24576 + 524288) * 4);
	cr_expect_eq(long_ctx[0].kv_bytes, short_ctx[0].kv_bytes);
	cr_expect_eq(short_ctx[0].kv_k_bytes, 2ull * 5 * 24576 * 4);
	cr_expect(short_ctx[0].recurrent && !short_ctx[0].sliding && !short_ctx[1].recurrent);
	cr_expect_eq(long_ctx[1].kv_bytes, 2ull * 65536 * 2 * 64 * 4);
	struct fence_worker w[2] = {
		{.name = "a", .memory_limit = 4 * GiB, .speed = 1, .pin_start = 0, .pin_end = 2},
		{.name = "b", .memory_limit = 4 * GiB, .speed = 1, .pin_start = 2, .pin_end = 4},
	};
	struct fence_input in = {.strategy = FENCE_PINNED,
				 .n_layers = 4,
				 .layers = short_ctx,
				 .n_workers = 2,
				 .workers = w,
				 .kv_types = *KV_TYPES(LM_Q8_0, LM_Q8_0)};
	struct fence_plan p;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect(p.has_recurrent);
	cr_expect_eq(p.stages[0].kv_kind[FENCE_KV_RECURRENT][1], 2ull * 5 * 524288 * 4);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert_eq(fence_plan_write_table(&p, f), 0);
	fclose(f);
	cr_expect(strstr(text, "rec. conv f32") != NULL && strstr(text, "rec. state f32") != NULL &&
			  strstr(text, "global K q8_0") != NULL,
		  "%s", text);
	free(text);
	fence_plan_fini(&p);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static struct fence_layer flat_layer(uint64_t weight, uint64_t kv, uint64_t flops)
{
	return (struct fence_layer){.weight_bytes = weight, .kv_bytes = kv, .flops = flops};
}

static void expect_cuts(const struct fence_plan *p, const int32_t *want, int n)
{
	cr_assert_eq(p->n_workers + 1, n);
	for (int i = 0; i < n; i++)
		cr_expect_eq(p->cuts[i], want[i], "cut %d: %d, expected %d", i, p->cuts[i],
			     want[i]);
}

/* A worker with cache types of its own: its layers weigh their KV in its types, its stage says
 * its types, and the table and JSON show each worker's. Four global layers of 2 KV heads x 32,
 * 4096 positions, 1 slot: a row is 256 bytes in f32 and 68 in q8_0 (2 blocks of 34), so a
 * layer takes 2 x 4096 x 256 = 2 MiB in f32 and 2 x 4096 x 68 = 557,056 bytes in q8_0. */
Test(fence_kv, per_worker_types)
{
	struct kv_geom geom[4];
	struct fence_layer layers[4], small[4];
	memset(layers, 0, sizeof layers);
	memset(small, 0, sizeof small);
	for (int i = 0; i < 4; i++)
		geom[i] = (struct kv_geom){.n_kv_heads = 2, .head_dim = 32};
	lm_diag d = {{0}};
	cr_assert_eq(fence_kv_costs(layers, 4, geom, 4096, 0, 1, KV_TYPES(LM_F32, LM_F32), &d), 0,
		     "%s", d.msg);
	cr_assert_eq(fence_kv_costs(small, 4, geom, 4096, 0, 1, KV_TYPES(LM_Q8_0, LM_Q8_0), &d), 0,
		     "%s", d.msg);
	for (int i = 0; i < 4; i++) {
		layers[i].weight_bytes = 1000;
		layers[i].flops = 1;
	}
	struct fence_worker w[2] = {
		{.name = "big", .memory_limit = 64 * MiB, .speed = 1},
		{.name = "small",
		 .memory_limit = 64 * MiB,
		 .speed = 1,
		 .kv_layers = small,
		 .kv_types = *KV_TYPES(LM_Q8_0, LM_Q8_0)},
	};
	struct fence_input in = {.strategy = FENCE_UNIFORM,
				 .n_layers = 4,
				 .layers = layers,
				 .n_workers = 2,
				 .workers = w,
				 .kv_types = *KV_TYPES(LM_F32, LM_F32)};
	struct fence_plan p;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect(p.mixed_kv);
	cr_expect_eq(p.stages[0].kv_bytes, 4 * MiB);
	cr_expect_eq(p.stages[1].kv_bytes, 2 * 557056ull);
	cr_expect_eq(p.stages[1].kv_kind[FENCE_KV_GLOBAL][0], 557056ull);
	cr_expect_eq(p.stages[1].kv_kind[FENCE_KV_GLOBAL][1], 557056ull);
	cr_expect_eq(p.stages[1].kv_f32_bytes, 4 * MiB);
	cr_expect_eq(p.stages[1].total_bytes, 2000 + 2 * 557056ull);
	cr_expect_eq(p.stages[1].kv_types.global.k, LM_Q8_0);
	cr_expect_eq(p.stages[0].kv_types.global.k, LM_F32);

	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert_eq(fence_plan_write_table(&p, f), 0);
	fclose(f);
	cr_expect(strstr(text, "worker          global K          global V     KV MiB  as f32 MiB "
			       "  saved\n") != NULL,
		  "%s", text);
	/* 1,114,112 of 4 MiB: 73.4% saved. */
	cr_expect(strstr(text, "small   q8_0        0.53  q8_0        0.53       1.06        4.00"
			       "   73.4%\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text, "big      f32        2.00   f32        2.00       4.00        4.00"
			       "    0.0%\n") != NULL,
		  "%s", text);
	free(text);
	cJSON *j = fence_plan_to_json(&p);
	cr_assert_not_null(j);
	cJSON *ws = cJSON_GetObjectItem(j, "workers");
	cJSON *gk = cJSON_GetObjectItem(
		cJSON_GetObjectItem(cJSON_GetArrayItem(ws, 1), "kv_by_type"), "global_k");
	cr_expect_str_eq(cJSON_GetObjectItem(gk, "type")->valuestring, "q8_0");
	cr_expect_eq(cJSON_GetObjectItem(gk, "bytes")->valuedouble, 557056);
	gk = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ws, 0), "kv_by_type"),
				 "global_k");
	cr_expect_str_eq(cJSON_GetObjectItem(gk, "type")->valuestring, "f32");
	cJSON_Delete(j);
	fence_plan_fini(&p);

	/* The same types as the input's are no mix: the headers name them. */
	w[1].kv_types = in.kv_types;
	w[1].kv_layers = layers;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect(!p.mixed_kv);
	fence_plan_fini(&p);

	/* The limits decide with each worker's own KV: the small worker, 3 times as fast, would
	 * take 3 layers (3,000 + 3 x 557,056 bytes); one byte less and it takes 2. */
	w[1].kv_types = *KV_TYPES(LM_Q8_0, LM_Q8_0);
	w[1].kv_layers = small;
	w[0].memory_limit = 2000 + 4 * MiB;
	w[1].memory_limit = 3000 + 3 * 557056;
	in.strategy = FENCE_BALANCED;
	in.last_flops = 0;
	w[1].speed = 3;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 1, 4}, 3);
	fence_plan_fini(&p);
	w[1].memory_limit = 3000 + 3 * 557056 - 1;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 2, 4}, 3);
	fence_plan_fini(&p);
}

/* ---- uniform and pinned ------------------------------------------------------------------- */

Test(fence_uniform, equal_counts_remainder_first)
{
	struct fence_layer layers[10];
	for (int i = 0; i < 10; i++)
		layers[i] = flat_layer(100, 10, 1000);
	struct fence_worker w[4];
	for (int j = 0; j < 4; j++)
		w[j] = (struct fence_worker){
			.memory_limit = 1 * MiB, .speed = 1.0, .scratch_bytes = 7};
	struct fence_input in = {.strategy = FENCE_UNIFORM,
				 .n_layers = 10,
				 .layers = layers,
				 .first_bytes = 5000,
				 .last_bytes = 6000,
				 .last_flops = 500,
				 .n_workers = 3,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 4, 7, 10}, 4);
	/* Worker 0: 4 layers x 110 + scratch 7 + embedding 5000. */
	cr_expect_eq(p.stages[0].total_bytes, 4 * 110 + 7 + 5000);
	cr_expect_eq(p.stages[0].extra_bytes, 5000);
	cr_expect_eq(p.stages[1].total_bytes, 3 * 110 + 7);
	cr_expect_eq(p.stages[2].total_bytes, 3 * 110 + 7 + 6000);
	cr_expect_eq(p.stages[2].flops, 3000 + 500);
	cr_expect_eq(p.total_flops, 10500);
	cr_expect_eq(p.max_time, 4000.0);
	cr_expect_str_eq(p.stages[1].name, "w1");
	fence_plan_fini(&p);

	in.n_workers = 4;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 3, 6, 8, 10}, 5);
	fence_plan_fini(&p);

	/* One worker holds everything, the embedding and the head (a tied embedding is counted
	 * in both, as the caller passes it in both). */
	in.n_workers = 1;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect_eq(p.stages[0].total_bytes, 10 * 110 + 7 + 5000 + 6000);
	fence_plan_fini(&p);

	/* More workers than layers. */
	in.n_layers = 3;
	in.n_workers = 4;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg, "the model has 3 layers and the mesh 4 workers: every worker "
				"needs at least one layer");
	cr_expect_null(p.cuts);
}

Test(fence_uniform, over_a_limit_names_worker_layers_and_bytes)
{
	struct fence_layer layers[6];
	for (int i = 0; i < 6; i++)
		layers[i] = flat_layer(1 * MiB, 1 * MiB, 1);
	struct fence_worker w[3] = {
		{.name = "edge-a", .memory_limit = 8 * MiB, .speed = 1},
		{.name = "edge-b",
		 .memory_limit = 3 * MiB,
		 .speed = 1,
		 .scratch_bytes = 512 * 1024},
		{.name = "edge-c", .memory_limit = 3 * MiB, .speed = 1},
	};
	struct fence_input in = {.strategy = FENCE_UNIFORM,
				 .n_layers = 6,
				 .layers = layers,
				 .last_bytes = 1 * MiB,
				 .n_workers = 3,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "worker 'edge-b' (layers [2, 4)) needs 4.50 MiB = 4718592 bytes "
			 "(weights 2.00 MiB + KV 2.00 MiB + scratch 512.00 KiB) against its "
			 "memory_limit of 3.00 MiB = 3145728 bytes; 1 more worker is over its "
			 "limit");
}

Test(fence_pinned, ranges_are_checked)
{
	struct fence_layer layers[8];
	for (int i = 0; i < 8; i++)
		layers[i] = flat_layer(10, 0, 3);
	struct fence_worker w[3] = {
		{.name = "a", .memory_limit = 1000, .speed = 1, .pin_start = 0, .pin_end = 1},
		{.name = "b", .memory_limit = 1000, .speed = 1, .pin_start = 1, .pin_end = 6},
		{.name = "c", .memory_limit = 1000, .speed = 1, .pin_start = 6, .pin_end = 8},
	};
	struct fence_input in = {.strategy = FENCE_PINNED,
				 .n_layers = 8,
				 .layers = layers,
				 .n_workers = 3,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 1, 6, 8}, 4);
	cr_expect_eq(p.stages[1].weight_bytes, 50);
	fence_plan_fini(&p);

	w[1].pin_start = 2; /* a gap */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "worker 'b' pins layers [2, 6), but must start at layer 1, where "
			 "worker 'a' stops: pinned ranges go in worker order and leave no gap "
			 "or overlap");
	w[1].pin_start = 0; /* an overlap */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg, "worker 'b' pins layers [0, 6), but must start at layer 1") !=
		  NULL);
	w[1].pin_start = 1;
	w[0].pin_start = 1; /* the first worker must start at 0 */
	w[0].pin_end = 2;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "worker 'a' pins layers [1, 2), but must start at layer 0 (the first "
			 "worker starts the model): pinned ranges go in worker order and leave "
			 "no gap or overlap");
	w[0].pin_start = 0;
	w[0].pin_end = 1;
	w[2].pin_end = 7; /* short of the model */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "the pinned ranges end at layer 7 (worker 'c'), but the model has 8 "
			 "layers: layers [7, 8) belong to no worker");
	w[2].pin_end = 9; /* past it */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg, "worker 'c' pins layers [6, 9), but the model has 8 layers");
	w[2].pin_end = 6; /* empty */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg, "a worker needs at least one layer") != NULL);
	w[2].pin_end = 8;
	w[1].memory_limit = 49; /* over its limit */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect(strstr(d.msg,
			 "worker 'b' (layers [1, 6)) needs 50 B = 50 bytes (weights 50 B + "
			 "KV 0 B + scratch 0 B) against its memory_limit of 49 B = 49 bytes") ==
			  d.msg,
		  "%s", d.msg);
}

/* ---- balanced ----------------------------------------------------------------------------- */

Test(fence_balanced, speed_weighted)
{
	struct fence_layer layers[10];
	for (int i = 0; i < 10; i++)
		layers[i] = flat_layer(1, 0, 100);
	struct fence_worker w[2] = {
		{.name = "slow", .memory_limit = 1000, .speed = 1.0},
		{.name = "fast", .memory_limit = 1000, .speed = 4.0},
	};
	struct fence_input in = {.strategy = FENCE_BALANCED,
				 .n_layers = 10,
				 .layers = layers,
				 .n_workers = 2,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	/* max(x * 100 / 1, (10 - x) * 100 / 4) is smallest at x = 2: 200 both. */
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 2, 10}, 3);
	cr_expect_eq(p.max_time, 200.0);
	fence_plan_fini(&p);

	/* The head's flops sit on the last worker: with 600 of them the fast worker's 8 layers
	 * would take (800 + 600) / 4 = 350, so it takes 7: max(300, 325) = 325 (6 would give
	 * max(400, 300)). */
	in.last_flops = 600;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 3, 10}, 3);
	cr_expect_eq(p.max_time, 325.0);
	fence_plan_fini(&p);

	/* Memory can force a slower plan: the fast worker holds at most 5 layers. */
	in.last_flops = 0;
	w[1].memory_limit = 5;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 5, 10}, 3);
	cr_expect_eq(p.max_time, 500.0);
	fence_plan_fini(&p);
}

Test(fence_balanced, ties_take_the_most_headroom_then_the_smallest_fence)
{
	/* Six equal layers, three equal workers with a 3-layer limit: the optimum is 2 layers a
	 * worker (time 2); [0, 2, 4, 6] is the only fence that reaches it. With the limit lifted
	 * and a head that costs 1 layer, the optimum 3 is reached by (3,2,1), (2,3,1),
	 * (1,3,2), (2,2,2)...: (2,2,2) leaves the fullest worker the most room. Where every fence
	 * is as full (layers of no bytes), the smallest c1 that still allows it wins. */
	struct fence_layer layers[6];
	for (int i = 0; i < 6; i++)
		layers[i] = flat_layer(1, 0, 1);
	struct fence_worker w[3];
	for (int j = 0; j < 3; j++)
		w[j] = (struct fence_worker){.memory_limit = 3, .speed = 1};
	struct fence_input in = {.strategy = FENCE_BALANCED,
				 .n_layers = 6,
				 .layers = layers,
				 .n_workers = 3,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 2, 4, 6}, 4);
	fence_plan_fini(&p);
	for (int j = 0; j < 3; j++)
		w[j].memory_limit = 100;
	in.last_flops = 1;
	/* Optimum 3 (the last worker has 2 layers + head = 3, or fewer). Of the fences that
	 * reach it, two layers each holds at most 2 bytes of 100 on a worker: [0, 2, 4, 6]. */
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 2, 4, 6}, 4);
	cr_expect_eq(p.max_time, 3.0);
	fence_plan_fini(&p);
	/* Layers of no bytes: every fence is as full, so workers 0 and 1 must cover at least 4
	 * layers with at most 3 each: c1 = 1 leaves 5 for two workers, which the last (at most
	 * 2) and the middle (at most 3) can take: [0, 1, 4, 6]. */
	for (int i = 0; i < 6; i++)
		layers[i] = flat_layer(0, 0, 1);
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 1, 4, 6}, 4);
	cr_expect_eq(p.max_time, 3.0);
	fence_plan_fini(&p);
}

/* Headroom is fullness, bytes of each worker's own limit. Four layers of 1 flop and 2 bytes;
 * worker a at speed 1, worker b at speed 2 with a head of 1 flop. Splits (1, 3) and (2, 2) tie
 * at a slowest stage of 2 ((1, 3): a 1, b (3 + 1) / 2; (2, 2): a 2, b 1.5); (3, 1) takes 3.
 * Limits a 10, b 20: (1, 3) fills a 20% and b 30%; (2, 2) fills a 40%: (1, 3), though its
 * fullest worker holds more bytes (6 against 4). Limits swapped: (1, 3) fills b 60%, (2, 2)
 * a 20% and b 40%: (2, 2), over the lexicographically smaller (1, 3). */
Test(fence_balanced, headroom_is_bytes_of_each_limit)
{
	struct fence_layer layers[4];
	for (int i = 0; i < 4; i++)
		layers[i] = flat_layer(2, 0, 1);
	struct fence_worker w[2] = {{.name = "a", .memory_limit = 10, .speed = 1},
				    {.name = "b", .memory_limit = 20, .speed = 2}};
	struct fence_input in = {.strategy = FENCE_BALANCED,
				 .n_layers = 4,
				 .layers = layers,
				 .last_flops = 1,
				 .n_workers = 2,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 1, 4}, 3);
	cr_expect_eq(p.max_time, 2.0);
	fence_plan_fini(&p);
	w[0].memory_limit = 20;
	w[1].memory_limit = 10;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 2, 4}, 3);
	cr_expect_eq(p.max_time, 2.0);
	fence_plan_fini(&p);
}

/* The reference: every fence, in lexicographic order; among those within every limit, the
 * first with the smallest slowest stage and, of those, the least full fullest worker (bytes of
 * its limit, compared as fractions in long double: the numbers here are small). Costs are
 * summed here independently of the planner, each worker's KV from its own kv_layers. */
struct brute {
	int32_t best[8];
	double best_time;
	long double best_use;
	bool found;
};

static void brute_visit(const struct fence_input *in, int32_t *cuts, int32_t j, struct brute *b)
{
	int32_t L = in->n_layers, W = in->n_workers;
	if (j == W) {
		double worst = 0;
		long double fullest = 0;
		for (int32_t k = 0; k < W; k++) {
			uint64_t bytes = in->workers[k].scratch_bytes, flops = 0;
			const struct fence_layer *kv = in->workers[k].kv_layers != NULL
							       ? in->workers[k].kv_layers
							       : in->layers;
			for (int32_t l = cuts[k]; l < cuts[k + 1]; l++) {
				bytes += in->layers[l].weight_bytes + kv[l].kv_bytes;
				flops += in->layers[l].flops;
			}
			if (k == 0) {
				bytes += in->first_bytes;
				flops += in->first_flops;
			}
			if (k == W - 1) {
				bytes += in->last_bytes;
				flops += in->last_flops;
			}
			if (bytes > in->workers[k].memory_limit)
				return;
			double t = (double)flops / in->workers[k].speed;
			if (t > worst)
				worst = t;
			long double u =
				(long double)bytes / (long double)in->workers[k].memory_limit;
			if (u > fullest)
				fullest = u;
		}
		if (!b->found || worst < b->best_time ||
		    (worst == b->best_time && fullest < b->best_use)) {
			b->found = true;
			b->best_time = worst;
			b->best_use = fullest;
			memcpy(b->best, cuts, (size_t)(W + 1) * sizeof *cuts);
		}
		return;
	}
	/* Worker j runs [cuts[j], c); the last one must end at L. */
	int32_t lo = cuts[j] + 1, hi = j == W - 1 ? L : L - (W - j - 1);
	for (int32_t c = j == W - 1 ? L : lo; c <= hi; c++) {
		cuts[j + 1] = c;
		brute_visit(in, cuts, j + 1, b);
	}
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

Test(fence_balanced, optimal_against_brute_force)
{
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	int feasible = 0, infeasible = 0;
	for (int round = 0; round < 4000; round++) {
		int32_t L = 1 + (int32_t)(rnd(&seed) % 9);
		int32_t W = 1 + (int32_t)(rnd(&seed) % (uint64_t)(L < 5 ? L : 5));
		struct fence_layer layers[9], own[2][9];
		struct fence_worker w[5];
		/* Few distinct values make ties common, which is where tie-breaking is tested. */
		uint64_t spread = round % 2 ? 4 : 1000;
		for (int32_t i = 0; i < L; i++)
			layers[i] = flat_layer(rnd(&seed) % spread, rnd(&seed) % spread,
					       1 + rnd(&seed) % spread);
		uint64_t total = 0;
		for (int32_t i = 0; i < L; i++)
			total += layers[i].weight_bytes + layers[i].kv_bytes;
		/* Half the rounds, workers with cache types of their own: two other sets of
		 * per-layer KV bytes, each worker taking one of the three at random. */
		for (int k = 0; k < 2; k++)
			for (int32_t i = 0; i < L; i++)
				own[k][i] = flat_layer(0, rnd(&seed) % spread, 0);
		for (int32_t j = 0; j < W; j++) {
			static const double speeds[] = {1.0, 0.5, 2.0, 3.0, 1.5};
			uint64_t pick = round % 4 < 2 ? 0 : rnd(&seed) % 3;
			w[j] = (struct fence_worker){
				.memory_limit = rnd(&seed) % (2 * total / (uint64_t)W + spread + 1),
				.speed = speeds[rnd(&seed) % 5],
				.scratch_bytes = rnd(&seed) % 3,
				.kv_layers = pick == 0 ? NULL : own[pick - 1],
			};
		}
		struct fence_input in = {.strategy = FENCE_BALANCED,
					 .n_layers = L,
					 .layers = layers,
					 .first_bytes = rnd(&seed) % 3,
					 .last_bytes = rnd(&seed) % 3,
					 .first_flops = rnd(&seed) % 2,
					 .last_flops = rnd(&seed) % spread,
					 .n_workers = W,
					 .workers = w};
		struct brute b = {.found = false};
		int32_t cuts[8] = {0};
		brute_visit(&in, cuts, 0, &b);

		struct fence_plan p;
		lm_diag d = {{0}};
		int rc = fence_plan_make(&p, &in, &d);
		if (!b.found) {
			cr_expect_eq(rc, LM_EINFEASIBLE, "round %d: L=%d W=%d planned a fence",
				     round, L, W);
			cr_expect(strstr(d.msg, "no fence fits") != NULL, "round %d: %s", round,
				  d.msg);
			infeasible++;
			continue;
		}
		cr_assert_eq(rc, 0, "round %d: %s", round, d.msg);
		feasible++;
		cr_expect_eq(p.max_time, b.best_time, "round %d", round);
		for (int32_t j = 0; j <= W; j++)
			cr_expect_eq(p.cuts[j], b.best[j], "round %d: cut %d is %d, expected %d",
				     round, j, p.cuts[j], b.best[j]);
		fence_plan_fini(&p);
	}
	/* Both kinds of instance were exercised. */
	cr_expect_gt(feasible, 1000);
	cr_expect_gt(infeasible, 300);
}

Test(fence_balanced, infeasible_plans_say_why)
{
	struct fence_layer layers[6];
	for (int i = 0; i < 6; i++)
		layers[i] = flat_layer(10 * MiB, 2 * MiB, 1);
	layers[3].weight_bytes = 40 * MiB;
	struct fence_worker w[3] = {
		{.name = "w0", .memory_limit = 100 * MiB, .speed = 1},
		{.name = "w1", .memory_limit = 100 * MiB, .speed = 1},
		{.name = "w2", .memory_limit = 30 * MiB, .speed = 1, .scratch_bytes = 1 * MiB},
	};
	struct fence_input in = {.strategy = FENCE_BALANCED,
				 .n_layers = 6,
				 .layers = layers,
				 .first_bytes = 4 * MiB,
				 .last_bytes = 20 * MiB,
				 .n_workers = 3,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	/* The last worker holds the head (20 MiB) and scratch (1 MiB): any one layer (12 MiB)
	 * takes it to 33 MiB, over its 30. */
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "no fence fits: the smallest single-layer slice of worker 'w2' "
			 "(layers [2, 3)) needs 33.00 MiB = 34603008 bytes (weights 10.00 MiB + "
			 "KV 2.00 MiB + scratch 1.00 MiB + head 20.00 MiB) against its "
			 "memory_limit of 30.00 MiB = 31457280 bytes");

	/* The limits together are below what the model needs: 5 x 10 + 40 MiB of weights, 12 of
	 * KV, 4 of embedding, 20 of head and 1 of scratch is 127 MiB; the limits are 120. */
	w[0].memory_limit = w[1].memory_limit = w[2].memory_limit = 40 * MiB;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "no fence fits: the model needs 127.00 MiB = 133169152 bytes in all "
			 "(weights 90.00 MiB + KV 12.00 MiB + embedding 4.00 MiB + head 20.00 "
			 "MiB + scratch), but the workers' memory_limits add up to 120.00 MiB = "
			 "125829120 bytes");

	/* Enough memory in all (144 MiB), but the 42 MiB layer cannot be packed: w2 holds one
	 * layer (33 of 44 MiB; two are 45), so w1 would need [3, 5) (54 of 50) or w0 [0, 4)
	 * (82 of 50). */
	w[0].memory_limit = 50 * MiB;
	w[1].memory_limit = 50 * MiB;
	w[2].memory_limit = 44 * MiB;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINFEASIBLE);
	cr_expect_str_eq(d.msg,
			 "no fence fits every worker's memory_limit with at least one layer "
			 "each; filling workers in order: 'w0' [0, 3) 'w1' [3, 4) 'w2' [4, 5), "
			 "which leaves layers [5, 6) without a worker");
	/* With 45 MiB it fits: [0, 3) [3, 4) [4, 6). */
	w[2].memory_limit = 45 * MiB;
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	expect_cuts(&p, (int32_t[]){0, 3, 4, 6}, 4);
	cr_expect_eq(p.stages[2].total_bytes, 45 * MiB);
	fence_plan_fini(&p);

	/* A speed that is not a positive finite number is an input error. */
	w[1].speed = 0;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINVAL);
	cr_expect_str_eq(d.msg, "worker 'w1': speed 0 is not a positive finite number");
}

Test(fence_balanced, large_inputs_and_overflow)
{
	/* 4096 layers over 64 workers without memory pressure: the programme's worst case here
	 * still finishes quickly. */
	static struct fence_layer layers[4096];
	for (int i = 0; i < 4096; i++)
		layers[i] = flat_layer(1, 1, 1 + (uint64_t)(i % 7));
	static struct fence_worker w[64];
	for (int j = 0; j < 64; j++)
		w[j] = (struct fence_worker){.memory_limit = UINT64_MAX, .speed = 1 + j % 3};
	struct fence_input in = {.strategy = FENCE_BALANCED,
				 .n_layers = 1024,
				 .layers = layers,
				 .n_workers = 64,
				 .workers = w};
	struct fence_plan p;
	lm_diag d = {{0}};
	cr_assert_eq(fence_plan_make(&p, &in, &d), 0, "%s", d.msg);
	cr_expect_eq(p.cuts[64], 1024);
	for (int j = 0; j < 64; j++)
		cr_expect_lt(p.cuts[j], p.cuts[j + 1]);
	fence_plan_fini(&p);

	/* Sums past 64 bits are refused, not wrapped. */
	layers[0].weight_bytes = UINT64_MAX;
	in.n_layers = 2;
	in.n_workers = 2;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EOVERFLOW);
	cr_expect_str_eq(d.msg,
			 "layer 1: the model's bytes or flops up to it do not fit in 64 bits");
	in.n_layers = 0;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINVAL);
	in.n_layers = FENCE_MAX_LAYERS + 1;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINVAL);
	in.n_layers = 2;
	in.n_workers = 0;
	cr_expect_eq(fence_plan_make(&p, &in, &d), LM_EINVAL);
	fence_plan_fini(&p);
	fence_plan_fini(NULL);
}

/* ---- renderings --------------------------------------------------------------------------- */

static void small_plan(struct fence_plan *p)
{
	static struct fence_layer layers[5];
	for (int i = 0; i < 5; i++)
		layers[i] = flat_layer(1 * MiB, 512 * 1024, 100);
	static struct fence_worker w[2] = {
		{.name = "alpha", .memory_limit = 8 * MiB, .speed = 1, .scratch_bytes = 256 * 1024},
		{.name = "beta", .memory_limit = 8 * MiB, .speed = 1, .scratch_bytes = 256 * 1024},
	};
	struct fence_input in = {.strategy = FENCE_UNIFORM,
				 .n_layers = 5,
				 .layers = layers,
				 .first_bytes = 1 * MiB,
				 .last_bytes = 2 * MiB,
				 .last_flops = 100,
				 .n_workers = 2,
				 .workers = w};
	lm_diag d = {{0}};
	cr_assert_eq(fence_plan_make(p, &in, &d), 0, "%s", d.msg);
}

Test(fence_render, table)
{
	struct fence_plan p;
	small_plan(&p);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert_eq(fence_plan_write_table(&p, f), 0);
	fclose(f);
	/* alpha: layers [0, 3): 3 MiB weights, 1.5 MiB KV, 0.25 scratch, 1 embedding = 5.75 of 8
	 * (71.9%); flops 300 of 600. beta: [3, 5): 2 + 1 + 0.25 + 2 = 5.25 (65.6%); 300 of 600. */
	cr_expect(strstr(text, "plan: uniform, 5 layers over 2 workers\n") != NULL, "%s", text);
	cr_expect(strstr(text,
			 "alpha   [0, 3)               3.00       1.50         0.25           "
			 "1.00        5.75        8.00  71.9%   50.0%\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text,
			 "beta    [3, 5)               2.00       1.00         0.25           "
			 "2.00        5.25        8.00  65.6%   50.0%\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text,
			 "total                        5.00       2.50         0.50           "
			 "3.00       11.00\n") != NULL,
		  "%s", text);
	cr_expect(strstr(text,
			 "slowest stage: 'alpha', 300 flop per token at speed 1 (600 flop per "
			 "token in all)\n") != NULL,
		  "%s", text);
	free(text);
	fence_plan_fini(&p);
}

Test(fence_render, json)
{
	struct fence_plan p;
	small_plan(&p);
	cJSON *j = fence_plan_to_json(&p);
	cr_assert_not_null(j);
	char *s = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	/* Parsed back, not compared as text: the reader is what a client uses. */
	cJSON *r = cJSON_Parse(s);
	free(s);
	cr_assert_not_null(r);
	cr_expect_str_eq(cJSON_GetObjectItem(r, "strategy")->valuestring, "uniform");
	cr_expect_eq(cJSON_GetObjectItem(r, "layers")->valuedouble, 5);
	cJSON *cuts = cJSON_GetObjectItem(r, "cuts");
	cr_assert_eq(cJSON_GetArraySize(cuts), 3);
	cr_expect_eq(cJSON_GetArrayItem(cuts, 1)->valuedouble, 3);
	cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "workers"), 1);
	cr_expect_str_eq(cJSON_GetObjectItem(w, "name")->valuestring, "beta");
	cr_expect_eq(cJSON_GetObjectItem(w, "start")->valuedouble, 3);
	cr_expect_eq(cJSON_GetObjectItem(w, "end")->valuedouble, 5);
	cr_expect_eq(cJSON_GetObjectItem(w, "total_bytes")->valuedouble, 5.25 * MiB);
	cr_expect_eq(cJSON_GetObjectItem(w, "extra_bytes")->valuedouble, 2.0 * MiB);
	cr_expect_eq(cJSON_GetObjectItem(w, "memory_limit")->valuedouble, 8.0 * MiB);
	cr_expect_eq(cJSON_GetObjectItem(w, "flops")->valuedouble, 300);
	cr_expect_eq(cJSON_GetObjectItem(w, "flops_share")->valuedouble, 0.5);
	cJSON_Delete(r);
	fence_plan_fini(&p);
}

Test(fence_strategy, names)
{
	cr_expect_eq(fence_strategy_parse("balanced"), FENCE_BALANCED);
	cr_expect_eq(fence_strategy_parse("uniform"), FENCE_UNIFORM);
	cr_expect_eq(fence_strategy_parse("pinned"), FENCE_PINNED);
	cr_expect_eq(fence_strategy_parse("Balanced"), -1);
	cr_expect_eq(fence_strategy_parse(NULL), -1);
	cr_expect_str_eq(fence_strategy_name(FENCE_PINNED), "pinned");
	char b[32];
	cr_expect_str_eq(fence_fmt_bytes(1023, b, sizeof b), "1023 B");
	cr_expect_str_eq(fence_fmt_bytes(1536, b, sizeof b), "1.50 KiB");
	cr_expect_str_eq(fence_fmt_bytes(3 * GiB / 2, b, sizeof b), "1.50 GiB");
}

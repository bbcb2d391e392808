/* The KV cache sizes and allocates only the owned layers, and refuses any layer it does not own. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache.h"

/* The incident: 60 layers, 16 KV heads x head_dim 512, max_seq 128, f32 K and V. */
Test(kv_cache, mission_arithmetic)
{
	struct kv_geom g = {.n_kv_heads = 16, .head_dim = 512, .window = 0};
	uint64_t per_layer = 0;
	cr_assert_eq(kv_geom_bytes(&g, 128, 0, 1, LM_F32, LM_F32, &per_layer), 0);
	cr_expect_eq(per_layer, 8388608ull);
	cr_expect_eq(per_layer * 3, 25165824ull);
	cr_expect_eq(per_layer * 60, 503316480ull);
	/* f16 halves it; a window of 64 halves it again; 4 slots multiply by 4. */
	uint64_t b = 0;
	cr_assert_eq(kv_geom_bytes(&g, 128, 0, 1, LM_F16, LM_F16, &b), 0);
	cr_expect_eq(b, per_layer / 2);
	g.window = 64;
	cr_assert_eq(kv_geom_bytes(&g, 128, 0, 4, LM_F16, LM_F16, &b), 0);
	cr_expect_eq(b, per_layer);
	/* A window wider than the context holds only the context. */
	g.window = 4096;
	cr_assert_eq(kv_geom_bytes(&g, 128, 0, 1, LM_F32, LM_F32, &b), 0);
	cr_expect_eq(b, per_layer);
	/* q8_0 rows: 34 bytes per 32 values. */
	g.window = 0;
	cr_assert_eq(kv_geom_bytes(&g, 128, 0, 1, LM_Q8_0, LM_F32, &b), 0);
	cr_expect_eq(b, 128ull * (16 * 512 / 32 * 34 + 16 * 512 * 4));
	/* q8_0 cannot hold heads of 6, nor of 8 though 4 x 8 = 32: a block may not straddle two
	 * heads. */
	struct kv_geom odd = {.n_kv_heads = 4, .head_dim = 8};
	cr_expect_eq(kv_geom_bytes(&odd, 128, 0, 1, LM_Q8_0, LM_F32, &b), LM_EINVAL);
	cr_expect_eq(kv_geom_bytes(&odd, 128, 0, 1, LM_Q4_0, LM_F32, &b), LM_EINVAL);
	cr_expect_eq(kv_geom_bytes(&odd, 0, 0, 1, LM_F32, LM_F32, &b), LM_EINVAL);
	struct kv_geom huge = {.n_kv_heads = 1 << 30, .head_dim = 1 << 30};
	cr_expect_eq(kv_geom_bytes(&huge, 1 << 30, 0, 1 << 30, LM_F32, LM_F32, &b), LM_EOVERFLOW);
}

static struct kv_cache make(int32_t base, int32_t n, struct kv_geom *geom, int32_t slots,
			    enum lm_dtype t)
{
	struct kv_cache kv;
	struct kv_cache_cfg cfg = {.base_layer = base,
				   .num_layers = n,
				   .geom = geom,
				   .max_seq = 32,
				   .slots = slots,
				   .types = kv_types_uniform(t, t)};
	lm_diag d = {{0}};
	cr_assert_eq(kv_cache_init(&kv, NULL, &cfg, &d), 0, "%s", d.msg);
	return kv;
}

/* A worker owning 3 of 60 layers allocates exactly those 3 layers' bytes. */
Test(kv_cache, allocates_only_the_slice)
{
	struct kv_geom g[3];
	for (int i = 0; i < 3; i++)
		g[i] = (struct kv_geom){.n_kv_heads = 4, .head_dim = 8};
	g[1].window = 8; /* a sliding layer among them */
	struct kv_cache kv = make(57, 3, g, 2, LM_F32);
	uint64_t want = 0, b;
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(kv_geom_bytes(&g[i], 32, 0, 2, LM_F32, LM_F32, &b), 0);
		want += b;
	}
	cr_expect_eq(kv.bytes, want);
	cr_expect_eq(want, 2ull * 2 * (32 + 8 + 32) * 4 * 8 * 4);

	const struct lm_kv_layer *l = NULL;
	lm_diag d = {{0}};
	cr_expect_eq(kv_cache_layer(&kv, 57, &l, &d), 0);
	cr_expect_eq(l, &kv.layers[0]);
	cr_expect_eq(kv_cache_layer(&kv, 58, &l, &d), 0);
	cr_expect_eq(l->ctx, 8);
	cr_expect_eq(l->window, 8);
	cr_expect_eq(kv_cache_layer(&kv, 59, &l, &d), 0);
	cr_expect_eq(l->ctx, 32);
	/* Layers outside the slice are errors in every build type, naming the owned range. */
	cr_expect_eq(kv_cache_layer(&kv, 56, &l, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "[57, 60)") != NULL, "%s", d.msg);
	cr_expect_eq(kv_cache_layer(&kv, 60, &l, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_layer(&kv, 0, &l, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_layer(&kv, -1, &l, &d), LM_ERANGE);
	kv_cache_fini(&kv);
	kv_cache_fini(&kv); /* idempotent */
}

Test(kv_cache, positions_and_truncation)
{
	struct kv_geom g[2] = {{.n_kv_heads = 2, .head_dim = 4}, {.n_kv_heads = 2, .head_dim = 4}};
	struct kv_cache kv = make(0, 2, g, 3, LM_F16);
	lm_diag d = {{0}};
	cr_expect_eq(kv_cache_check(&kv, 0, 0, 32, &d), 0);
	cr_expect_eq(kv_cache_check(&kv, 0, 31, 2, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_check(&kv, 3, 0, 1, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_check(&kv, -1, 0, 1, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_check(&kv, 0, -1, 1, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_check(&kv, 0, 0x7fffffff, 1, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_set_len(&kv, 1, 20, &d), 0);
	cr_expect_eq(kv_cache_truncate(&kv, 1, 21, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_truncate(&kv, 1, 5, &d), 0);
	cr_expect_eq(kv.len[1], 5);
	cr_expect_eq(kv.len[0], 0);
	kv_cache_fini(&kv);
}

/* A sliding layer that has wrapped cannot roll back past its last position. */
Test(kv_cache, sliding_truncation_refuses_lost_rows)
{
	struct kv_geom g[1] = {{.n_kv_heads = 1, .head_dim = 4, .window = 8}};
	struct kv_cache kv = make(0, 1, g, 1, LM_F32);
	lm_diag d = {{0}};
	cr_assert_eq(kv_cache_set_len(&kv, 0, 6, &d), 0);
	cr_expect_eq(kv_cache_truncate(&kv, 0, 2, &d), 0, "not wrapped yet: %s", d.msg);
	cr_assert_eq(kv_cache_set_len(&kv, 0, 20, &d), 0);
	cr_expect_eq(kv_cache_truncate(&kv, 0, 19, &d), 0);
	cr_expect_eq(kv_cache_truncate(&kv, 0, 10, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "re-prefill") != NULL, "%s", d.msg);
	cr_expect_eq(kv_cache_truncate(&kv, 0, 0, &d), 0);
	kv_cache_fini(&kv);
}

/* A ring with rows beyond its window (window 4 + 3 rows a batch writes ahead: 7) that has seen
 * 10 positions keeps [3, 10): the next token at len reads [len - 3, len), so a rollback to len
 * holds for len >= 6 and for 0, and is refused for 1 to 5, naming the layer. */
Test(kv_cache, ring_rows_beyond_the_window_allow_short_rollbacks)
{
	struct kv_geom g[1] = {{.n_kv_heads = 1, .head_dim = 4, .window = 4}};
	struct kv_cache kv;
	struct kv_cache_cfg cfg = {.base_layer = 3,
				   .num_layers = 1,
				   .geom = g,
				   .max_seq = 32,
				   .ring_extra = 3,
				   .slots = 1,
				   .types = kv_types_uniform(LM_F32, LM_F32)};
	lm_diag d = {{0}};
	cr_assert_eq(kv_cache_init(&kv, NULL, &cfg, &d), 0, "%s", d.msg);
	cr_expect_eq(kv.layers[0].ctx, 7);
	cr_assert_eq(kv_cache_set_len(&kv, 0, 10, &d), 0);
	for (int32_t len = 0; len <= 10; len++) {
		int rc = kv_cache_can_truncate(&kv, 0, len, &d);
		cr_expect_eq(rc, len == 0 || len >= 6 ? 0 : LM_ERANGE, "len %d: %s", len, d.msg);
	}
	cr_expect(strstr(d.msg, "layer 3") != NULL, "%s", d.msg);

	/* A rejected draft wrote up to 20, then the sequence went on from 17 to 18: the ring
	 * holds [13, 20) whatever the length says, so 16 (reading 13..15) can still be rolled back
	 * to and 15 (reading 12) cannot, though 12 is within 18 - 7. */
	cr_assert_eq(kv_cache_set_len(&kv, 0, 20, &d), 0);
	cr_assert_eq(kv_cache_truncate(&kv, 0, 17, &d), 0);
	cr_assert_eq(kv_cache_set_len(&kv, 0, 18, &d), 0);
	cr_expect_eq(kv.hi[0], 20);
	cr_expect_eq(kv_cache_can_truncate(&kv, 0, 16, &d), 0, "%s", d.msg);
	cr_expect_eq(kv_cache_can_truncate(&kv, 0, 15, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "written up to 20") != NULL, "%s", d.msg);
	/* Emptying the slot forgets the mark. */
	cr_assert_eq(kv_cache_truncate(&kv, 0, 0, &d), 0);
	cr_expect_eq(kv.hi[0], 0);
	kv_cache_fini(&kv);
}

/* Sliding and global layers each take their own pair of types, and their rows' bytes. */
Test(kv_cache, types_per_layer_kind)
{
	struct kv_geom g[3] = {{.n_kv_heads = 2, .head_dim = 64, .window = 8},
			       {.n_kv_heads = 1, .head_dim = 128},
			       {.n_kv_heads = 2, .head_dim = 64, .window = 8}};
	struct kv_cache kv;
	struct kv_cache_cfg cfg = {
		.num_layers = 3,
		.geom = g,
		.max_seq = 32,
		.slots = 2,
		.types = {.global = {LM_FP8_E4M3, LM_FP8_E4M3}, .swa = {LM_Q8_0, LM_Q5_1}}};
	lm_diag d = {{0}};
	cr_assert_eq(kv_cache_init(&kv, NULL, &cfg, &d), 0, "%s", d.msg);
	cr_expect_eq(kv.layers[0].k_type, LM_Q8_0);
	cr_expect_eq(kv.layers[0].v_type, LM_Q5_1);
	cr_expect_eq(kv.layers[0].k_row_bytes, 4 * 34u);
	cr_expect_eq(kv.layers[0].v_row_bytes, 4 * 24u);
	cr_expect_eq(kv.layers[1].k_type, LM_FP8_E4M3);
	cr_expect_eq(kv.layers[1].v_type, LM_FP8_E4M3);
	cr_expect_eq(kv.layers[1].k_row_bytes, 128u);
	cr_expect_eq(kv.bytes, 2ull * (2 * 8 * (136 + 96) + 32 * (128 + 128)));
	kv_cache_fini(&kv);
	/* A block type on a head it cannot tile is refused, naming layer, kind and reason. */
	g[1].head_dim = 48;
	cfg.types.global = (struct kv_pair){LM_Q4_0, LM_F16};
	cr_expect_eq(kv_cache_init(&kv, NULL, &cfg, &d), LM_EINVAL);
	cr_expect_str_eq(d.msg,
			 "kv cache: layer 1 (global, 1 KV heads x head_dim 48): no q4_0 K / f16 "
			 "V cache: q4_0 stores blocks of 32 values, which do not tile head_dim 48: "
			 "a block may not straddle two heads");
}

Test(kv_cache, export_import_round_trip)
{
	struct kv_geom g[2] = {{.n_kv_heads = 2, .head_dim = 32},
			       {.n_kv_heads = 2, .head_dim = 32, .window = 4}};
	struct kv_cache a = make(3, 2, g, 2, LM_Q8_0);
	struct kv_cache b = make(3, 2, g, 2, LM_Q8_0);
	lm_diag d = {{0}};
	/* Fill slot 1 of `a` with a pattern. */
	for (int i = 0; i < 2; i++) {
		struct lm_kv_layer *l = &a.layers[i];
		memset(l->k, 0x11 * (i + 1), (size_t)l->ctx * 2 * l->k_row_bytes);
		memset(l->v, 0x22 * (i + 1), (size_t)l->ctx * 2 * l->v_row_bytes);
	}
	cr_assert_eq(kv_cache_set_len(&a, 1, 10, &d), 0);
	uint64_t n = kv_cache_export_bytes(&a, 1);
	/* Layer 3 holds 10 rows, the sliding layer 4 holds its 4. */
	cr_expect_eq(n, (10 + 4) * 2 * a.layers[0].k_row_bytes);
	uint8_t *buf = malloc(n);
	cr_expect_eq(kv_cache_export(&a, 1, buf, n - 1, &d), LM_ERANGE);
	cr_assert_eq(kv_cache_export(&a, 1, buf, n, &d), 0, "%s", d.msg);
	cr_expect_eq(kv_cache_import(&b, 0, 10, 12, buf, n - 1, &d), LM_EFORMAT);
	cr_expect_eq(b.len[0], 0);
	cr_expect_eq(kv_cache_import(&b, 0, 10, 9, buf, n, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_import(&b, 0, 10, 33, buf, n, &d), LM_ERANGE);
	cr_assert_eq(kv_cache_import(&b, 0, 10, 12, buf, n, &d), 0, "%s", d.msg);
	cr_expect_eq(b.len[0], 10);
	cr_expect_eq(b.hi[0], 12);
	for (int i = 0; i < 2; i++) {
		size_t rows = i == 0 ? 10 : 4;
		cr_expect_eq(
			memcmp(b.layers[i].k,
			       (uint8_t *)a.layers[i].k + a.layers[i].ctx * a.layers[i].k_row_bytes,
			       rows * a.layers[i].k_row_bytes),
			0);
		cr_expect_eq(
			memcmp(b.layers[i].v,
			       (uint8_t *)a.layers[i].v + a.layers[i].ctx * a.layers[i].v_row_bytes,
			       rows * a.layers[i].v_row_bytes),
			0);
	}
	free(buf);
	kv_cache_fini(&a);
	kv_cache_fini(&b);
}

Test(kv_cache, bad_configs_are_errors)
{
	struct kv_cache kv;
	struct kv_geom g[1] = {{.n_kv_heads = 3, .head_dim = 5}};
	struct kv_cache_cfg cfg = {.base_layer = 0,
				   .num_layers = 1,
				   .geom = g,
				   .max_seq = 16,
				   .slots = 1,
				   .types = kv_types_uniform(LM_Q8_0, LM_F32)};
	lm_diag d = {{0}};
	cr_expect_eq(kv_cache_init(&kv, NULL, &cfg, &d), LM_EINVAL);
	cr_expect(strstr(d.msg, "layer 0") != NULL, "%s", d.msg);
	cfg.types = kv_types_uniform(LM_Q4_K, LM_F32);
	cr_expect_eq(kv_cache_init(&kv, NULL, &cfg, &d), LM_EINVAL);
	cfg.types = kv_types_uniform(LM_F32, LM_F32);
	cfg.num_layers = 0;
	cr_expect_eq(kv_cache_init(&kv, NULL, &cfg, &d), LM_EINVAL);
}

/* Fills every K and V byte of slot `slot` with `v` (a global and a sliding layer alike). */
static void fill_slot(struct kv_cache *kv, int32_t slot, uint8_t v)
{
	for (int32_t i = 0; i < kv->num_layers; i++) {
		struct lm_kv_layer *l = &kv->layers[i];
		memset((uint8_t *)l->k + (size_t)slot * l->ctx * l->k_row_bytes, v,
		       (size_t)l->ctx * l->k_row_bytes);
		memset((uint8_t *)l->v + (size_t)slot * l->ctx * l->v_row_bytes, v,
		       (size_t)l->ctx * l->v_row_bytes);
	}
}

/* Byte `row`'s first K and V bytes of slot `slot` in layer i. */
static uint8_t k_at(const struct kv_cache *kv, int32_t i, int32_t slot, int32_t row)
{
	const struct lm_kv_layer *l = &kv->layers[i];
	return ((const uint8_t *)l->k)[((size_t)slot * l->ctx + (size_t)row) * l->k_row_bytes];
}

static uint8_t v_at(const struct kv_cache *kv, int32_t i, int32_t slot, int32_t row)
{
	const struct lm_kv_layer *l = &kv->layers[i];
	return ((const uint8_t *)l->v)[((size_t)slot * l->ctx + (size_t)row) * l->v_row_bytes];
}

/* A copy gives the destination the source's first len rows of a global layer, the whole ring of
 * a sliding one, and the source's high-water mark; the global layer's rows past len, and every
 * other slot, are left alone. */
Test(kv_cache, copy_takes_the_prefix_and_the_ring)
{
	struct kv_geom g[2] = {{.n_kv_heads = 2, .head_dim = 4},
			       {.n_kv_heads = 2, .head_dim = 4, .window = 8}};
	struct kv_cache kv = make(5, 2, g, 3, LM_F32);
	lm_diag d = {{0}};
	fill_slot(&kv, 0, 0xaa);
	fill_slot(&kv, 1, 0x11);
	fill_slot(&kv, 2, 0x22);
	cr_assert_eq(kv_cache_set_len(&kv, 0, 12, &d), 0);
	cr_assert_eq(kv_cache_set_len(&kv, 2, 30, &d), 0);
	cr_assert_eq(kv_cache_copy(&kv, 0, 2, 11, &d), 0, "%s", d.msg);
	cr_expect_eq(kv.len[2], 11);
	cr_expect_eq(kv.hi[2], 12);
	for (int32_t r = 0; r < 32; r++) {
		uint8_t want = r < 11 ? 0xaa : 0x22;
		cr_expect_eq(k_at(&kv, 0, 2, r), want, "global row %d", r);
		cr_expect_eq(v_at(&kv, 0, 2, r), want, "global row %d", r);
	}
	for (int32_t r = 0; r < kv.layers[1].ctx; r++) {
		cr_expect_eq(k_at(&kv, 1, 2, r), 0xaa, "ring row %d", r);
		cr_expect_eq(v_at(&kv, 1, 2, r), 0xaa, "ring row %d", r);
	}
	cr_expect_eq(k_at(&kv, 0, 1, 0), 0x11);
	cr_expect_eq(kv.len[0], 12);
	/* The destination rolls back as the source would. */
	cr_expect_eq(kv_cache_truncate(&kv, 2, 11, &d), 0, "%s", d.msg);
	kv_cache_fini(&kv);
}

/* A copy that cannot be made (more rows than the source holds, rows its ring lost, the source
 * itself, no rows) is refused, and the destination is left empty, never with another
 * sequence's rows a later batch could read. */
Test(kv_cache, copy_refused_leaves_the_destination_empty)
{
	struct kv_geom g[2] = {{.n_kv_heads = 1, .head_dim = 4},
			       {.n_kv_heads = 1, .head_dim = 4, .window = 8}};
	struct kv_cache kv = make(0, 2, g, 3, LM_F32);
	lm_diag d = {{0}};
	cr_assert_eq(kv_cache_set_len(&kv, 0, 6, &d), 0);
	cr_assert_eq(kv_cache_set_len(&kv, 1, 20, &d), 0);
	cr_expect_eq(kv_cache_copy(&kv, 0, 1, 7, &d), LM_ERANGE);
	cr_expect_eq(kv.len[1], 0);
	cr_expect_eq(kv.hi[1], 0);
	/* A ring written to 30 no longer holds what position 10 reads. */
	cr_assert_eq(kv_cache_set_len(&kv, 0, 30, &d), 0);
	cr_assert_eq(kv_cache_set_len(&kv, 1, 20, &d), 0);
	cr_expect_eq(kv_cache_copy(&kv, 0, 1, 10, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "re-prefill") != NULL, "%s", d.msg);
	cr_expect_eq(kv.len[1], 0);
	cr_assert_eq(kv_cache_set_len(&kv, 1, 20, &d), 0);
	cr_expect_eq(kv_cache_copy(&kv, 1, 1, 4, &d), LM_EINVAL);
	cr_expect_eq(kv.len[1], 0);
	cr_expect_eq(kv_cache_copy(&kv, 0, 2, 0, &d), LM_EINVAL);
	cr_expect_eq(kv_cache_copy(&kv, 0, 3, 4, &d), LM_ERANGE);
	cr_expect_eq(kv.len[0], 30, "the source is left as it was");
	kv_cache_fini(&kv);
}

/* A recurrent layer (Qwen3.5-9B's delta-net: conv ring 3 x 8192 f32, state 32 x 128 x 128 f32)
 * costs its state per slot whatever the context; its types are f32 whatever the cache's. */
Test(kv_cache, recurrent_state_is_per_slot_not_per_position)
{
	struct kv_geom g = {.conv = 3 * 8192, .state = 32 * 128 * 128};
	uint64_t k = 0, v = 0, b = 0;
	cr_assert_eq(kv_geom_kv_bytes(&g, 128, 0, 1, LM_Q8_0, LM_Q4_0, &k, &v), 0);
	cr_expect_eq(k, 98304ull);
	cr_expect_eq(v, 2097152ull);
	cr_assert_eq(kv_geom_bytes(&g, 262144, 0, 4, LM_F16, LM_F16, &b), 0);
	cr_expect_eq(b, 4 * (98304ull + 2097152ull));
	cr_expect_eq(kv_geom_kind(&g), KV_RECURRENT);
	cr_expect_eq(kv_geom_ctx(&g, 4096, 8), 0);
	struct kv_geom half = {.conv = 0, .state = 16};
	char why[128];
	cr_expect_eq(kv_geom_check(&half, LM_F32, why, sizeof why), LM_EINVAL);
}

/* Attention, recurrent, attention: the recurrent layer has a state per slot and no rows; it
 * rolls back only to 0 (zeroed) or nowhere; its state travels in an export. */
Test(kv_cache, recurrent_layer_state_rollback_and_export)
{
	struct kv_geom g[3] = {{.n_kv_heads = 2, .head_dim = 32},
			       {.conv = 6, .state = 8},
			       {.n_kv_heads = 2, .head_dim = 32}};
	struct kv_cache kv = make(10, 3, g, 2, LM_F32);
	lm_diag d = {{0}};
	cr_expect_eq(kv.n_recurrent, 1);
	cr_expect_eq(kv.bytes, 2 * (2 * 32 * 2 * 64 * 4) + 2 * (6 + 8) * 4);
	float *conv, *state, *c1, *s1;
	cr_assert_eq(kv_cache_rec(&kv, 11, 0, &conv, &state, &d), 0, "%s", d.msg);
	cr_assert_eq(kv_cache_rec(&kv, 11, 1, &c1, &s1, &d), 0, "%s", d.msg);
	cr_expect(c1 == conv + 6 && s1 == state + 8);
	cr_expect_eq(kv_cache_rec(&kv, 10, 0, &c1, &s1, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "no recurrent state") != NULL, "%s", d.msg);
	cr_expect_eq(kv_cache_rec(&kv, 11, 2, &c1, &s1, &d), LM_ERANGE);
	cr_expect_eq(kv_cache_rec(&kv, 13, 0, &c1, &s1, &d), LM_ERANGE);

	for (int i = 0; i < 6; i++)
		conv[i] = (float)i + 0.5f;
	for (int i = 0; i < 8; i++)
		state[i] = -(float)i;
	cr_assert_eq(kv_cache_set_len(&kv, 0, 5, &d), 0);
	cr_expect_eq(kv_cache_can_truncate(&kv, 0, 5, &d), 0);
	cr_expect_eq(kv_cache_truncate(&kv, 0, 3, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "layer 11 is recurrent") != NULL, "%s", d.msg);
	cr_expect_eq(kv.len[0], 5);

	/* Export: K and V rows of layer 10, the conv ring then the state of layer 11, rows of
	 * layer 12. */
	uint64_t n = kv_cache_export_bytes(&kv, 0);
	cr_expect_eq(n, 2 * 5 * 2 * (2 * 32 * 4) + (6 + 8) * 4);
	uint8_t *buf = malloc(n);
	cr_assert_eq(kv_cache_export(&kv, 0, buf, n, &d), 0, "%s", d.msg);
	const float *rec = (const float *)(buf + 5 * 2 * 32 * 4 * 2);
	cr_expect(rec[0] == 0.5f && rec[5] == 5.5f && rec[6] == 0.0f && rec[13] == -7.0f);
	cr_assert_eq(kv_cache_import(&kv, 1, 5, 5, buf, n, &d), 0, "%s", d.msg);
	cr_expect_eq(memcmp(c1, conv, 6 * sizeof(float)), 0);
	cr_expect_eq(memcmp(s1, state, 8 * sizeof(float)), 0);
	free(buf);

	/* Back to 0: a fresh start, the state zeroed. */
	cr_assert_eq(kv_cache_truncate(&kv, 0, 0, &d), 0, "%s", d.msg);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(conv[i], 0.0f);
	for (int i = 0; i < 8; i++)
		cr_expect_eq(state[i], 0.0f);
	cr_expect_eq(kv_cache_export_bytes(&kv, 0), 0);
	kv_cache_fini(&kv);
}

/* A copy into another slot (parallel samples' COPY) takes a recurrent layer's live state only
 * when the source holds exactly the positions copied; a shorter copy is refused (the sample is
 * then computed from 0), never made with a state that belongs to later positions. */
Test(kv_cache, copy_takes_a_recurrent_state_only_at_the_source_length)
{
	struct kv_geom g[2] = {{.n_kv_heads = 2, .head_dim = 4}, {.conv = 6, .state = 8}};
	struct kv_cache kv = make(0, 2, g, 3, LM_F32);
	lm_diag d = {{0}};
	float *conv, *state, *c2, *s2;
	cr_assert_eq(kv_cache_rec(&kv, 1, 0, &conv, &state, &d), 0, "%s", d.msg);
	cr_assert_eq(kv_cache_rec(&kv, 1, 2, &c2, &s2, &d), 0, "%s", d.msg);
	for (int i = 0; i < 6; i++)
		conv[i] = (float)i + 0.25f;
	for (int i = 0; i < 8; i++)
		state[i] = -(float)i - 1;
	cr_assert_eq(kv_cache_set_len(&kv, 0, 7, &d), 0);
	cr_expect_eq(kv_cache_copy(&kv, 0, 2, 6, &d), LM_ERANGE);
	cr_expect(strstr(d.msg, "recurrent") != NULL, "%s", d.msg);
	cr_expect_eq(kv.len[2], 0);
	cr_assert_eq(kv_cache_copy(&kv, 0, 2, 7, &d), 0, "%s", d.msg);
	cr_expect_eq(kv.len[2], 7);
	cr_expect_eq(memcmp(c2, conv, 6 * sizeof(float)), 0);
	cr_expect_eq(memcmp(s2, state, 8 * sizeof(float)), 0);
	kv_cache_fini(&kv);
}

/* kv_cache.c — per-worker KV cache over the worker's own layers. See kv_cache.h. */
#include "engine/kv_cache.h"

#include <stdlib.h>
#include <string.h>

static void *kv_alloc(struct lm_backend *b, size_t n)
{
	if (b != NULL)
		return b->iface->malloc(b->ctx, n);
	/* No backend: host memory, 64-byte aligned and zeroed like backend memory. */
	void *p = NULL;
	if (posix_memalign(&p, 64, n ? n : 64) != 0)
		return NULL;
	memset(p, 0, n);
	return p;
}

static void kv_free(struct lm_backend *b, void *p)
{
	if (b != NULL)
		b->iface->mfree(b->ctx, p);
	else
		free(p);
}

int kv_cache_init(struct kv_cache *kv, struct lm_backend *backend, const struct kv_cache_cfg *cfg,
		  lm_diag *d)
{
	memset(kv, 0, sizeof *kv);
	if (cfg->num_layers <= 0 || cfg->base_layer < 0 || cfg->slots <= 0 || cfg->max_seq <= 0)
		return lm_fail(
			d, LM_EINVAL,
			"kv cache: need layers > 0 (got %d), slots > 0 (got %d), max_seq > 0 "
			"(got %d)",
			cfg->num_layers, cfg->slots, cfg->max_seq);
	if (!kv_type_supported(cfg->k_type) || !kv_type_supported(cfg->v_type))
		return lm_fail(d, LM_EINVAL,
			       "kv cache: types must be f32, f16 or q8_0 (got %s, %s)",
			       lm_dtype_name(cfg->k_type), lm_dtype_name(cfg->v_type));

	kv->base_layer = cfg->base_layer;
	kv->num_layers = cfg->num_layers;
	kv->max_seq = cfg->max_seq;
	kv->slots = cfg->slots;
	kv->k_type = cfg->k_type;
	kv->v_type = cfg->v_type;
	kv->backend = backend;
	kv->layers = calloc((size_t)cfg->num_layers, sizeof *kv->layers);
	kv->len = calloc((size_t)cfg->slots, sizeof *kv->len);
	if (kv->layers == NULL || kv->len == NULL) {
		kv_cache_fini(kv);
		return lm_fail(d, LM_ENOMEM, "kv cache: out of memory");
	}
	for (int32_t i = 0; i < cfg->num_layers; i++) {
		const struct kv_geom *g = &cfg->geom[i];
		struct lm_kv_layer *l = &kv->layers[i];
		uint64_t kr, vr;
		int32_t layer = cfg->base_layer + i;
		if (kv_geom_row_bytes(g, cfg->k_type, &kr) != 0 ||
		    kv_geom_row_bytes(g, cfg->v_type, &vr) != 0) {
			kv_cache_fini(kv);
			return lm_fail(
				d, LM_EINVAL,
				"kv cache: layer %d: %d KV heads x head_dim %d cannot be stored "
				"as %s/%s (q8_0 needs a multiple of 32 per row)",
				layer, g->n_kv_heads, g->head_dim, lm_dtype_name(cfg->k_type),
				lm_dtype_name(cfg->v_type));
		}
		l->k_type = cfg->k_type;
		l->v_type = cfg->v_type;
		l->n_kv_heads = g->n_kv_heads;
		l->head_dim = g->head_dim;
		l->ctx = kv_layer_ctx(g, cfg->max_seq, cfg->ring_extra);
		l->window = g->window;
		l->slots = cfg->slots;
		l->k_row_bytes = (size_t)kr;
		l->v_row_bytes = (size_t)vr;
		uint64_t rows = (uint64_t)l->ctx * (uint64_t)cfg->slots;
		if (rows > SIZE_MAX / (kr > vr ? kr : vr)) {
			kv_cache_fini(kv);
			return lm_fail(d, LM_EOVERFLOW, "kv cache: layer %d is too large", layer);
		}
		l->k = kv_alloc(backend, (size_t)(rows * kr));
		l->v = kv_alloc(backend, (size_t)(rows * vr));
		if (l->k == NULL || l->v == NULL) {
			uint64_t need = rows * (kr + vr);
			kv_cache_fini(kv);
			return lm_fail(d, LM_ENOMEM,
				       "kv cache: out of memory allocating layer %d (%llu bytes)",
				       layer, (unsigned long long)need);
		}
		kv->bytes += rows * (kr + vr);
	}
	return 0;
}

void kv_cache_fini(struct kv_cache *kv)
{
	if (kv == NULL)
		return;
	if (kv->layers != NULL)
		for (int32_t i = 0; i < kv->num_layers; i++) {
			kv_free(kv->backend, kv->layers[i].k);
			kv_free(kv->backend, kv->layers[i].v);
		}
	free(kv->layers);
	free(kv->len);
	memset(kv, 0, sizeof *kv);
}

int kv_cache_layer(const struct kv_cache *kv, int32_t layer, const struct lm_kv_layer **out,
		   lm_diag *d)
{
	/* Checked in every build type: this is the translation that must never silently alias. */
	if (layer < kv->base_layer || layer - kv->base_layer >= kv->num_layers)
		return lm_fail(d, LM_ERANGE, "layer %d is not in this cache's layers [%d, %d)",
			       layer, kv->base_layer, kv->base_layer + kv->num_layers);
	*out = &kv->layers[layer - kv->base_layer];
	return 0;
}

int kv_cache_check(const struct kv_cache *kv, int32_t slot, int32_t pos, int32_t n, lm_diag *d)
{
	if (slot < 0 || slot >= kv->slots)
		return lm_fail(d, LM_ERANGE, "sequence slot %d is not in [0, %d)", slot, kv->slots);
	if (pos < 0 || n < 0 || pos > kv->max_seq - n)
		return lm_fail(d, LM_ERANGE, "positions [%d, %lld) do not fit the context of %d",
			       pos, (long long)pos + n, kv->max_seq);
	return 0;
}

int kv_cache_set_len(struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d)
{
	int rc = kv_cache_check(kv, slot, 0, len, d);
	if (rc != 0)
		return rc;
	kv->len[slot] = len;
	return 0;
}

int kv_cache_can_truncate(const struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d)
{
	int rc = kv_cache_check(kv, slot, 0, 0, d);
	if (rc != 0)
		return rc;
	const int32_t held = kv->len[slot];
	if (len < 0 || len > held)
		return lm_fail(d, LM_ERANGE, "cannot truncate slot %d of length %d to %d", slot,
			       held, len);
	/* A sliding layer's ring of ctx rows (its window w and the rows a batch writes ahead)
	 * that has seen L > ctx positions keeps only [L - ctx, L). The next token, at position
	 * len, reads [len - w + 1, len): a rollback needs len - w + 1 >= L - ctx, or len == 0 (a
	 * fresh start). Global layers keep every row, so their truncation is always exact. */
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		if (l->window > 0 && held > l->ctx && len > 0 &&
		    (int64_t)len - l->window + 1 < (int64_t)held - l->ctx)
			return lm_fail(d, LM_ERANGE,
				       "layer %d keeps %d positions of its window of %d: slot %d "
				       "of length %d cannot roll back to %d (re-prefill instead)",
				       kv->base_layer + i, l->ctx, l->window, slot, held, len);
	}
	return 0;
}

int kv_cache_truncate(struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d)
{
	int rc = kv_cache_can_truncate(kv, slot, len, d);
	if (rc == 0)
		kv->len[slot] = len;
	return rc;
}

/* Rows of a slot that hold data for its current length, per layer. */
static uint64_t kv_rows_held(const struct lm_kv_layer *l, int32_t len)
{
	return (uint64_t)(len < l->ctx ? len : l->ctx);
}

uint64_t kv_cache_export_bytes(const struct kv_cache *kv, int32_t slot)
{
	uint64_t total = 0;
	if (slot < 0 || slot >= kv->slots)
		return 0;
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		total += kv_rows_held(l, kv->len[slot]) * (l->k_row_bytes + l->v_row_bytes);
	}
	return total;
}

/* The export layout: for each owned layer in order, the slot's K rows [0, held) then its V rows
 * [0, held), raw in the cache types. Both ends have the same slice geometry (checked by the
 * caller through the model fingerprint and slice), so ring order carries over unchanged. */
int kv_cache_export(const struct kv_cache *kv, int32_t slot, void *buf, uint64_t cap, lm_diag *d)
{
	int rc = kv_cache_check(kv, slot, 0, 0, d);
	if (rc != 0)
		return rc;
	uint64_t need = kv_cache_export_bytes(kv, slot);
	if (cap < need)
		return lm_fail(d, LM_ERANGE, "export of slot %d needs %llu bytes, buffer has %llu",
			       slot, (unsigned long long)need, (unsigned long long)cap);
	uint8_t *p = buf;
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		uint64_t rows = kv_rows_held(l, kv->len[slot]);
		const uint8_t *k = (const uint8_t *)l->k + (size_t)slot * l->ctx * l->k_row_bytes;
		const uint8_t *v = (const uint8_t *)l->v + (size_t)slot * l->ctx * l->v_row_bytes;
		size_t kn = (size_t)(rows * l->k_row_bytes), vn = (size_t)(rows * l->v_row_bytes);
		if (kv->backend != NULL) {
			if ((rc = kv->backend->iface->download(kv->backend->ctx, p, k, kn)) != 0 ||
			    (rc = kv->backend->iface->download(kv->backend->ctx, p + kn, v, vn)) !=
				    0)
				return lm_fail(d, rc, "export of slot %d: download failed", slot);
		} else {
			memcpy(p, k, kn);
			memcpy(p + kn, v, vn);
		}
		p += kn + vn;
	}
	return 0;
}

int kv_cache_import(struct kv_cache *kv, int32_t slot, int32_t len, const void *buf, uint64_t bytes,
		    lm_diag *d)
{
	int rc = kv_cache_check(kv, slot, 0, len, d);
	if (rc != 0)
		return rc;
	int32_t old = kv->len[slot];
	kv->len[slot] = len;
	uint64_t need = kv_cache_export_bytes(kv, slot);
	if (bytes != need) {
		kv->len[slot] = old;
		return lm_fail(d, LM_EFORMAT,
			       "import into slot %d: %llu bytes given, %d positions need %llu",
			       slot, (unsigned long long)bytes, len, (unsigned long long)need);
	}
	const uint8_t *p = buf;
	for (int32_t i = 0; i < kv->num_layers; i++) {
		struct lm_kv_layer *l = &kv->layers[i];
		uint64_t rows = kv_rows_held(l, len);
		uint8_t *k = (uint8_t *)l->k + (size_t)slot * l->ctx * l->k_row_bytes;
		uint8_t *v = (uint8_t *)l->v + (size_t)slot * l->ctx * l->v_row_bytes;
		size_t kn = (size_t)(rows * l->k_row_bytes), vn = (size_t)(rows * l->v_row_bytes);
		if (kv->backend != NULL) {
			if ((rc = kv->backend->iface->upload(kv->backend->ctx, k, p, kn)) != 0 ||
			    (rc = kv->backend->iface->upload(kv->backend->ctx, v, p + kn, vn)) !=
				    0) {
				kv->len[slot] = 0;
				return lm_fail(d, rc, "import into slot %d: upload failed", slot);
			}
		} else {
			memcpy(k, p, kn);
			memcpy(v, p + kn, vn);
		}
		p += kn + vn;
	}
	return 0;
}

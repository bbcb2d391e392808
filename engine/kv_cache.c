/* kv_cache.c — per-worker KV cache over the worker's own layers. See kv_cache.h. */
#include "engine/kv_cache.h"

#include <stdlib.h>
#include <string.h>

static void *kv_cache_mem_alloc(struct lm_backend *b, size_t n)
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

static void kv_cache_mem_free(struct lm_backend *b, void *p)
{
	if (b != NULL)
		b->iface->mfree(b->ctx, p);
	else
		free(p);
}

/* Local layer i's recurrent state for every slot, geometry g: host memory, zeroed. */
static int kv_cache_rec_init(struct kv_cache *kv, int32_t i, const struct kv_geom *g, lm_diag *d)
{
	struct kv_rec *r = &kv->rec[i];
	uint64_t cb, sb;
	if (kv_geom_kv_bytes(g, kv->max_seq, 0, kv->slots, LM_F32, LM_F32, &cb, &sb) != 0 ||
	    cb > SIZE_MAX / 2 || sb > SIZE_MAX / 2)
		return lm_fail(d, LM_EINVAL,
			       "kv cache: layer %d: a recurrent state of %lld + %lld "
			       "values per slot is out of range",
			       kv->base_layer + i, (long long)g->conv, (long long)g->state);
	r->conv_n = g->conv;
	r->state_n = g->state;
	/* cb and sb count the live state and the kept ones: (1 + keep) per slot. */
	const size_t live = (size_t)(g->conv + g->state) * sizeof(float) * (size_t)kv->slots;
	r->conv = kv_cache_mem_alloc(NULL, (size_t)g->conv * sizeof(float) * (size_t)kv->slots);
	r->state = kv_cache_mem_alloc(NULL, (size_t)g->state * sizeof(float) * (size_t)kv->slots);
	r->kept = g->keep > 0 ? kv_cache_mem_alloc(NULL, (size_t)(cb + sb) - live) : NULL;
	if (kv->n_recurrent > 0 && g->keep != kv->rec_keep)
		return lm_fail(d, LM_EINVAL,
			       "kv cache: layer %d keeps %d states, another recurrent layer %d",
			       kv->base_layer + i, g->keep, kv->rec_keep);
	kv->rec_keep = g->keep;
	if (r->conv == NULL || r->state == NULL || (g->keep > 0 && r->kept == NULL))
		return lm_fail(d, LM_ENOMEM,
			       "kv cache: out of memory allocating the recurrent state of layer %d "
			       "(%llu bytes)",
			       kv->base_layer + i, (unsigned long long)(cb + sb));
	kv->bytes += cb + sb;
	kv->n_recurrent++;
	return 0;
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

	kv->base_layer = cfg->base_layer;
	kv->num_layers = cfg->num_layers;
	kv->max_seq = cfg->max_seq;
	kv->slots = cfg->slots;
	kv->types = cfg->types;
	kv->backend = backend;
	kv->layers = calloc((size_t)cfg->num_layers, sizeof *kv->layers);
	kv->rec = calloc((size_t)cfg->num_layers, sizeof *kv->rec);
	kv->rec_lo = calloc((size_t)cfg->slots, sizeof *kv->rec_lo);
	kv->rec_hi = calloc((size_t)cfg->slots, sizeof *kv->rec_hi);
	kv->len = calloc((size_t)cfg->slots, sizeof *kv->len);
	kv->hi = calloc((size_t)cfg->slots, sizeof *kv->hi);
	if (kv->layers == NULL || kv->rec == NULL || kv->len == NULL || kv->hi == NULL ||
	    kv->rec_lo == NULL || kv->rec_hi == NULL) {
		kv_cache_fini(kv);
		return lm_fail(d, LM_ENOMEM, "kv cache: out of memory");
	}
	for (int32_t i = 0; i < cfg->num_layers; i++) {
		const struct kv_geom *g = &cfg->geom[i];
		const struct kv_pair t = kv_types_for(
			cfg->layer_types != NULL ? &cfg->layer_types[i] : &cfg->types, g);
		struct lm_kv_layer *l = &kv->layers[i];
		uint64_t kr, vr;
		int32_t layer = cfg->base_layer + i;
		int rc;
		char why[160];
		if (kv_geom_check(g, t.k, why, sizeof why) != 0 ||
		    kv_geom_check(g, t.v, why, sizeof why) != 0 ||
		    kv_geom_row_bytes(g, t.k, &kr) != 0 || kv_geom_row_bytes(g, t.v, &vr) != 0) {
			kv_cache_fini(kv);
			return lm_fail(
				d, LM_EINVAL,
				"kv cache: layer %d (%s, %d KV heads x head_dim %d): no %s K "
				"/ %s V cache: %s",
				layer, kv_kind_name(kv_geom_kind(g)), g->n_kv_heads, g->head_dim,
				lm_dtype_name(t.k), lm_dtype_name(t.v), why);
		}
		if (kv_geom_kind(g) == KV_RECURRENT) {
			if ((rc = kv_cache_rec_init(kv, i, g, d)) != 0) {
				kv_cache_fini(kv);
				return rc;
			}
			continue;
		}
		l->k_type = t.k;
		l->v_type = t.v;
		l->n_kv_heads = g->n_kv_heads;
		l->head_dim = g->head_dim;
		l->ctx = kv_geom_ctx(g, cfg->max_seq, cfg->ring_extra);
		l->window = g->window;
		l->slots = cfg->slots;
		l->k_row_bytes = (size_t)kr;
		l->v_row_bytes = (size_t)vr;
		uint64_t rows = (uint64_t)l->ctx * (uint64_t)cfg->slots;
		if (rows > SIZE_MAX / (kr > vr ? kr : vr)) {
			kv_cache_fini(kv);
			return lm_fail(d, LM_EOVERFLOW, "kv cache: layer %d is too large", layer);
		}
		l->k = kv_cache_mem_alloc(backend, (size_t)(rows * kr));
		l->v = kv_cache_mem_alloc(backend, (size_t)(rows * vr));
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
			kv_cache_mem_free(kv->backend, kv->layers[i].k);
			kv_cache_mem_free(kv->backend, kv->layers[i].v);
		}
	if (kv->rec != NULL)
		for (int32_t i = 0; i < kv->num_layers; i++) {
			kv_cache_mem_free(NULL, kv->rec[i].conv);
			kv_cache_mem_free(NULL, kv->rec[i].state);
			kv_cache_mem_free(NULL, kv->rec[i].kept);
		}
	free(kv->rec);
	free(kv->rec_lo);
	free(kv->rec_hi);
	free(kv->layers);
	free(kv->len);
	free(kv->hi);
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

int kv_cache_rec(const struct kv_cache *kv, int32_t layer, int32_t slot, float **conv,
		 float **state, lm_diag *d)
{
	if (layer < kv->base_layer || layer - kv->base_layer >= kv->num_layers)
		return lm_fail(d, LM_ERANGE, "layer %d is not in this cache's layers [%d, %d)",
			       layer, kv->base_layer, kv->base_layer + kv->num_layers);
	const struct kv_rec *r = &kv->rec[layer - kv->base_layer];
	if (r->conv == NULL)
		return lm_fail(d, LM_ERANGE, "layer %d has no recurrent state", layer);
	if (slot < 0 || slot >= kv->slots)
		return lm_fail(d, LM_ERANGE, "sequence slot %d is not in [0, %d)", slot, kv->slots);
	*conv = r->conv + (size_t)slot * (size_t)r->conv_n;
	*state = r->state + (size_t)slot * (size_t)r->state_n;
	return 0;
}

/* The kept state of local layer i, slot `slot`, after position pos: conv then state. */
static float *kv_rec_kept_at(const struct kv_cache *kv, int32_t i, int32_t slot, int32_t pos)
{
	const struct kv_rec *r = &kv->rec[i];
	const size_t n = (size_t)(r->conv_n + r->state_n);
	return r->kept + ((size_t)slot * (size_t)kv->rec_keep + (size_t)(pos % kv->rec_keep)) * n;
}

void kv_cache_rec_snapshot(struct kv_cache *kv, int32_t layer, int32_t slot, int32_t pos)
{
	const int32_t i = layer - kv->base_layer;
	if (kv->rec_keep <= 0 || i < 0 || i >= kv->num_layers || kv->rec[i].kept == NULL ||
	    slot < 0 || slot >= kv->slots || pos < 0)
		return;
	const struct kv_rec *r = &kv->rec[i];
	float *k = kv_rec_kept_at(kv, i, slot, pos);
	memcpy(k, r->conv + (size_t)slot * (size_t)r->conv_n, (size_t)r->conv_n * sizeof(float));
	memcpy(k + r->conv_n, r->state + (size_t)slot * (size_t)r->state_n,
	       (size_t)r->state_n * sizeof(float));
}

void kv_cache_rec_kept(struct kv_cache *kv, int32_t slot, int32_t lo, int32_t hi)
{
	if (slot < 0 || slot >= kv->slots)
		return;
	kv->rec_lo[slot] = lo < hi ? lo : 0;
	kv->rec_hi[slot] = lo < hi ? hi : 0;
}

/* Every recurrent layer of slot `slot` back to its kept state after position pos. */
static void kv_rec_restore(struct kv_cache *kv, int32_t slot, int32_t pos)
{
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct kv_rec *r = &kv->rec[i];
		if (r->kept == NULL)
			continue;
		const float *k = kv_rec_kept_at(kv, i, slot, pos);
		memcpy(r->conv + (size_t)slot * (size_t)r->conv_n, k,
		       (size_t)r->conv_n * sizeof(float));
		memcpy(r->state + (size_t)slot * (size_t)r->state_n, k + r->conv_n,
		       (size_t)r->state_n * sizeof(float));
	}
}

void kv_cache_rec_reset(struct kv_cache *kv, int32_t slot)
{
	if (slot < 0 || slot >= kv->slots)
		return;
	kv->rec_lo[slot] = kv->rec_hi[slot] = 0;
	for (int32_t i = 0; i < kv->num_layers; i++) {
		struct kv_rec *r = &kv->rec[i];
		if (r->conv == NULL)
			continue;
		memset(r->conv + (size_t)slot * (size_t)r->conv_n, 0,
		       (size_t)r->conv_n * sizeof(float));
		memset(r->state + (size_t)slot * (size_t)r->state_n, 0,
		       (size_t)r->state_n * sizeof(float));
	}
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
	kv->hi[slot] = len == 0 ? 0 : len > kv->hi[slot] ? len : kv->hi[slot];
	if (len == 0)
		kv_cache_rec_reset(kv, slot);
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
	/* A sliding layer's ring of ctx rows (its window w and the rows a batch or a draft writes
	 * ahead) into which positions up to H (the high-water mark, H > ctx) were written keeps
	 * only [H - ctx, H): rows of a rejected draft overwrote older ones. The next token, at
	 * position len, reads [len - w + 1, len): a rollback needs len - w + 1 >= H - ctx, or
	 * len == 0 (a fresh start). With ctx = w + extra that is any rollback of at most extra + 1
	 * positions below H. Global layers keep every row, so their truncation is always exact. */
	/* A recurrent state is the sequence after its last position: it goes back to the start
	 * (zeroed), to a kept state (the one after position len - 1), or nowhere. */
	const bool kept = len - 1 >= kv->rec_lo[slot] && len - 1 < kv->rec_hi[slot];
	for (int32_t i = 0; len > 0 && len < held && !kept && i < kv->num_layers; i++)
		if (kv->rec[i].conv != NULL)
			return lm_fail(d, LM_ERANGE,
				       "layer %d is recurrent: slot %d holds the state after %d "
				       "positions and keeps those after positions [%d, %d), not "
				       "the one after position %d (re-prefill from 0 instead)",
				       kv->base_layer + i, slot, held, kv->rec_lo[slot],
				       kv->rec_hi[slot], len - 1);
	const int32_t high = kv->hi[slot];
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		if (l->window > 0 && high > l->ctx && len > 0 &&
		    (int64_t)len - l->window + 1 < (int64_t)high - l->ctx)
			return lm_fail(d, LM_ERANGE,
				       "layer %d keeps %d positions of its window of %d: slot %d, "
				       "written up to %d, cannot roll back to %d (re-prefill "
				       "instead)",
				       kv->base_layer + i, l->ctx, l->window, slot, high, len);
	}
	return 0;
}

int kv_cache_truncate(struct kv_cache *kv, int32_t slot, int32_t len, lm_diag *d)
{
	int rc = kv_cache_can_truncate(kv, slot, len, d);
	if (rc == 0 && len > 0 && len < kv->len[slot] && kv->n_recurrent > 0) {
		kv_rec_restore(kv, slot, len - 1);
		kv->rec_hi[slot] = len - 1; /* the states before it stay this sequence's */
		if (kv->rec_lo[slot] >= kv->rec_hi[slot])
			kv->rec_lo[slot] = kv->rec_hi[slot] = 0;
	}
	if (rc == 0) {
		kv->len[slot] = len;
		if (len == 0) {
			kv->hi[slot] = 0;
			kv_cache_rec_reset(kv, slot);
		}
	}
	return rc;
}

/* Moves n bytes from one place of the cache's memory to another, through host memory when the
 * cache lives in a backend's (whose interface moves bytes to and from the host only). */
static int kv_cache_move(const struct kv_cache *kv, void *dst, const void *src, size_t n,
			 void *host)
{
	if (kv->backend == NULL) {
		memcpy(dst, src, n);
		return 0;
	}
	const struct lm_backend *b = kv->backend;
	int rc = b->iface->download(b->ctx, host, src, n);
	return rc != 0 ? rc : b->iface->upload(b->ctx, dst, host, n);
}

int kv_cache_copy(struct kv_cache *kv, int32_t src, int32_t dst, int32_t len, lm_diag *d)
{
	int rc;
	if ((rc = kv_cache_check(kv, dst, 0, len, d)) != 0)
		return rc;
	/* Whatever dst held is gone, even when the copy cannot be made: a later FORWARD must
	 * never find another sequence's rows there. */
	kv->len[dst] = kv->hi[dst] = 0;
	kv->rec_lo[dst] = kv->rec_hi[dst] = 0;
	if (src == dst || len < 1)
		return lm_fail(d, LM_EINVAL, "copy of %d positions from slot %d into slot %d", len,
			       src, dst);
	if ((rc = kv_cache_can_truncate(kv, src, len, d)) != 0)
		return rc;
	/* A recurrent state is the sequence after its last position: only the live one copies,
	 * and only when src holds exactly len positions (a kept state stays src's). */
	if (kv->n_recurrent > 0 && len != kv->len[src])
		return lm_fail(d, LM_ERANGE,
			       "copy of %d positions from slot %d, which holds %d: its recurrent "
			       "states are after position %d, not %d",
			       len, src, kv->len[src], kv->len[src] - 1, len - 1);
	size_t most = 0;
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		size_t row = l->k_row_bytes > l->v_row_bytes ? l->k_row_bytes : l->v_row_bytes;
		size_t n = (size_t)l->ctx * row;
		most = n > most ? n : most;
	}
	void *host = kv->backend != NULL ? malloc(most) : NULL;
	if (kv->backend != NULL && host == NULL)
		return lm_fail(d, LM_ENOMEM, "copy into slot %d: out of memory", dst);
	for (int32_t i = 0; i < kv->num_layers && rc == 0; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		const struct kv_rec *r = &kv->rec[i];
		if (r->conv != NULL) {
			memcpy(r->conv + (size_t)dst * (size_t)r->conv_n,
			       r->conv + (size_t)src * (size_t)r->conv_n,
			       (size_t)r->conv_n * sizeof(float));
			memcpy(r->state + (size_t)dst * (size_t)r->state_n,
			       r->state + (size_t)src * (size_t)r->state_n,
			       (size_t)r->state_n * sizeof(float));
			continue;
		}
		/* A ring's rows sit at their position modulo ctx: all of it moves. */
		size_t rows = l->window > 0 ? (size_t)l->ctx : (size_t)len;
		size_t kn = rows * l->k_row_bytes, vn = rows * l->v_row_bytes;
		uint8_t *k = l->k, *v = l->v;
		rc = kv_cache_move(kv, k + (size_t)dst * l->ctx * l->k_row_bytes,
				   k + (size_t)src * l->ctx * l->k_row_bytes, kn, host);
		if (rc == 0)
			rc = kv_cache_move(kv, v + (size_t)dst * l->ctx * l->v_row_bytes,
					   v + (size_t)src * l->ctx * l->v_row_bytes, vn, host);
	}
	free(host);
	if (rc != 0)
		return lm_fail(d, rc, "copy from slot %d into slot %d: the backend failed", src,
			       dst);
	kv->len[dst] = len;
	kv->hi[dst] = kv->hi[src];
	return 0;
}

/* Rows of a slot that hold data for its current length, per layer. */
static uint64_t kv_cache_rows_held(const struct lm_kv_layer *l, int32_t len)
{
	return (uint64_t)(len < l->ctx ? len : l->ctx);
}

/* Bytes of a layer's recurrent state a slot of length len exports: all of it once the slot
 * holds a position, none for an empty slot or an attention layer. */
static uint64_t kv_cache_rec_held(const struct kv_rec *r, int32_t len)
{
	return r->conv != NULL && len > 0 ? (uint64_t)(r->conv_n + r->state_n) * sizeof(float) : 0;
}

/* A recurrent layer's part of an export of a slot of length len, at p: out (export) copies the
 * conv ring then the state to p, else (import) from p. Returns p past it. */
static uint8_t *kv_rec_copy(const struct kv_rec *r, int32_t slot, int32_t len, uint8_t *p, bool out)
{
	if (kv_cache_rec_held(r, len) == 0)
		return p;
	const size_t cn = (size_t)r->conv_n * sizeof(float),
		     sn = (size_t)r->state_n * sizeof(float);
	float *conv = r->conv + (size_t)slot * (size_t)r->conv_n;
	float *state = r->state + (size_t)slot * (size_t)r->state_n;
	if (out) {
		memcpy(p, conv, cn);
		memcpy(p + cn, state, sn);
	} else {
		memcpy(conv, p, cn);
		memcpy(state, p + cn, sn);
	}
	return p + cn + sn;
}

uint64_t kv_cache_export_bytes(const struct kv_cache *kv, int32_t slot)
{
	uint64_t total = 0;
	if (slot < 0 || slot >= kv->slots)
		return 0;
	for (int32_t i = 0; i < kv->num_layers; i++) {
		const struct lm_kv_layer *l = &kv->layers[i];
		total += kv_cache_rows_held(l, kv->len[slot]) * (l->k_row_bytes + l->v_row_bytes);
		total += kv_cache_rec_held(&kv->rec[i], kv->len[slot]);
	}
	return total;
}

/* The export layout: for each owned layer in order, the slot's K rows [0, held) then its V rows
 * [0, held), raw in the cache types, bit for bit. Both ends have the same slice geometry and
 * cache types (checked by the caller through the model fingerprint and the assignment), so ring
 * order carries over unchanged; the high-water mark travels beside the rows. A recurrent
 * layer's part is its conv ring then its SSM state, f32 as held. */
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
		if (kv->rec[i].conv != NULL) {
			p = kv_rec_copy(&kv->rec[i], slot, kv->len[slot], p, true);
			continue;
		}
		uint64_t rows = kv_cache_rows_held(l, kv->len[slot]);
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

int kv_cache_import(struct kv_cache *kv, int32_t slot, int32_t len, int32_t hi, const void *buf,
		    uint64_t bytes, lm_diag *d)
{
	int rc = kv_cache_check(kv, slot, 0, len, d);
	if (rc != 0)
		return rc;
	if (hi < len || hi > kv->max_seq)
		return lm_fail(d, LM_ERANGE,
			       "import into slot %d: written up to %d, below its length %d or past "
			       "the context of %d",
			       slot, hi, len, kv->max_seq);
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
		if (kv->rec[i].conv != NULL) {
			p = kv_rec_copy(&kv->rec[i], slot, len, (uint8_t *)p, false);
			continue;
		}
		uint64_t rows = kv_cache_rows_held(l, len);
		uint8_t *k = (uint8_t *)l->k + (size_t)slot * l->ctx * l->k_row_bytes;
		uint8_t *v = (uint8_t *)l->v + (size_t)slot * l->ctx * l->v_row_bytes;
		size_t kn = (size_t)(rows * l->k_row_bytes), vn = (size_t)(rows * l->v_row_bytes);
		if (kv->backend != NULL) {
			if ((rc = kv->backend->iface->upload(kv->backend->ctx, k, p, kn)) != 0 ||
			    (rc = kv->backend->iface->upload(kv->backend->ctx, v, p + kn, vn)) !=
				    0) {
				kv->len[slot] = kv->hi[slot] = 0;
				return lm_fail(d, rc, "import into slot %d: upload failed", slot);
			}
		} else {
			memcpy(k, p, kn);
			memcpy(v, p + kn, vn);
		}
		p += kn + vn;
	}
	if (len == 0)
		kv_cache_rec_reset(kv, slot);
	kv->rec_lo[slot] = kv->rec_hi[slot] = 0; /* the kept states stayed with the exporter */
	kv->hi[slot] = hi;
	return 0;
}

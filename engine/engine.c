/* engine.c — the engine's setup. See engine.h. */
#include "engine/engine.h"

#include <stdio.h>
#include <string.h>

int lm_engine_backend_error(lm_diag *d, int rc, const char *backend,
			    const struct lm_backend_opts *bo)
{
	if (rc == LM_EUNSUPPORTED && bo != NULL && bo->allow_amx && strcmp(backend, "cpu") == 0)
		return lm_fail(d, rc, "kernels \"amx\": this CPU, build or kernel offers no AMX");
	/* d may already hold the backend's own reason (lm_backend_open). */
	char why[sizeof d->msg];
	snprintf(why, sizeof why, "%s",
		 d != NULL && d->msg[0] != '\0' ? d->msg
		 : rc == LM_EUNSUPPORTED        ? "this build has no kernels for it"
						: lm_strerror(rc));
	return lm_fail(d, rc, "backend '%s' is not available: %s", backend, why);
}

int lm_engine_open(struct lm_engine *e, const struct lm_engine_cfg *cfg, lm_diag *d)
{
	const char *backend = cfg->backend != NULL ? cfg->backend : "cpu";
	int rc;

	memset(e, 0, sizeof *e);
	if (d != NULL)
		d->msg[0] = '\0';
	if ((rc = lm_backend_open(&e->be, backend, &cfg->bo, d)) != 0)
		return lm_engine_backend_error(d, rc, backend, &cfg->bo);
	unsigned flags =
		(cfg->populate ? LM_MODEL_POPULATE : 0u) | (cfg->no_vocab ? LM_MODEL_NO_VOCAB : 0u);
	if ((rc = lm_model_open(&e->model, cfg->model, cfg->slice, &e->be, flags, d)) != 0)
		goto fail;

	const struct lm_hparams *hp = &e->model.hp;
	const struct lm_slice *s = &e->model.slice;
	int32_t max_seq = cfg->max_seq;
	if (max_seq <= 0)
		max_seq = hp->n_ctx_train > 0 && hp->n_ctx_train < LM_ENGINE_MAX_SEQ_DEFAULT
				  ? hp->n_ctx_train
				  : LM_ENGINE_MAX_SEQ_DEFAULT;
	if (s->end > s->begin) {
		struct kv_geom geom[LM_MAX_LAYERS];
		for (int32_t il = s->begin; il < s->end; il++) {
			geom[il - s->begin] = lm_hparams_kv_geom(hp, il);
			if (hp->layer[il].recurrent)
				geom[il - s->begin].keep = kv_geom_rec_keep(cfg->max_draft);
		}
		struct kv_cache_cfg kc = {
			.base_layer = s->begin,
			.num_layers = s->end - s->begin,
			.geom = geom,
			.max_seq = max_seq,
			.ring_extra = kv_geom_ring_extra(cfg->max_batch, cfg->max_draft),
			.slots = cfg->slots > 0 ? cfg->slots : 1,
			.types = cfg->kv_types,
			.layer_types = cfg->layer_kv_types != NULL ? cfg->layer_kv_types + s->begin
								   : NULL};
		if ((rc = kv_cache_init(&e->kv, &e->be, &kc, d)) != 0)
			goto fail;
	}
	if ((rc = lm_forward_init(&e->fw, &e->model, &e->be, s->end > s->begin ? &e->kv : NULL,
				  cfg->max_batch, d)) != 0)
		goto fail;
	return 0;
fail:
	lm_engine_close(e);
	return rc;
}

void lm_engine_close(struct lm_engine *e)
{
	if (e == NULL)
		return;
	lm_forward_fini(&e->fw);
	kv_cache_fini(&e->kv);
	lm_model_close(&e->model);
	lm_backend_fini(&e->be);
}

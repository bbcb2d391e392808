/* engine.h — from a model file to a ready forward pass, in one call.
 *
 * An engine is the backend, the model slice bound on it, the KV cache of the slice's layers and
 * the forward pass over them. `layermesh run` (the whole model), `layermesh diff` (its
 * reference run), the worker's stage (one slice) and bench_run all set it up here, so they
 * compute with the same setup and fail with the same messages.
 *
 * Lifecycle: lm_engine_open fills caller-owned memory and leaves nothing allocated on failure;
 * lm_engine_close frees and is harmless on a zeroed or closed engine.
 */
#ifndef LM_ENGINE_H
#define LM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/weights.h"
#include "kernels/backend.h"

/* Positions per sequence when the caller leaves it to the model: its trained context, at most
 * this many. */
#define LM_ENGINE_MAX_SEQ_DEFAULT 4096

struct lm_engine_cfg {
	const char *model;            /* GGUF path */
	const struct lm_slice *slice; /* NULL: the whole model (every layer, embedding, head) */
	const char *backend;          /* "cpu" or "cuda"; NULL: "cpu" */
	struct lm_backend_opts bo;    /* threads, device, kernels */
	bool populate;                /* make the weights resident now (gguf_map) */
	bool no_vocab;                /* leave the tokenizer unread (LM_MODEL_NO_VOCAB) */
	int32_t max_seq;              /* positions per sequence; <= 0: the model's, capped */
	int32_t slots;                /* sequences; <= 0: 1 */
	int32_t max_batch;            /* tokens per forward */
	int32_t max_draft;            /* speculative tokens a sequence's forward may carry */
	struct kv_types kv_types;     /* K and V types, global and sliding layers */
	/* Optional: every layer's own types, indexed by absolute layer (at least up to the
	 * slice's end), as the workers of a mesh with per-worker types store them; NULL:
	 * kv_types on every layer. */
	const struct kv_types *layer_kv_types;
};

struct lm_engine {
	struct lm_backend be;
	struct lm_model model;
	struct kv_cache kv; /* the slice's layers; empty when it has none */
	struct lm_forward fw;
};

int lm_engine_open(struct lm_engine *e, const struct lm_engine_cfg *cfg, lm_diag *d);
void lm_engine_close(struct lm_engine *e);

/* The message for a backend that lm_backend_init refused with rc, naming the backend and, for
 * kernels "amx" on a CPU without it, why. Into d; returns rc. */
int lm_engine_backend_error(lm_diag *d, int rc, const char *backend,
			    const struct lm_backend_opts *bo);

#endif

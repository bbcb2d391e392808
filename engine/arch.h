/* arch.h — an architecture as data plus one layer function.
 *
 * Each architecture is one file, engine/arch_<name>.c, that a reader can take in at one sitting:
 * the table of the tensors its layers have (which fields of struct lm_layer_weights, under which
 * GGUF names, in which shapes) and the function that runs one layer over a batch. The forward
 * pass (engine/forward.c) keeps what every architecture shares: the checks, the embedding, the
 * loop over the slice's layers and the head.
 */
#ifndef LM_ARCH_H
#define LM_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "engine/forward.h"
#include "engine/model.h"

/* A tensor's dimension, in the layer's own hyperparameters. */
enum lm_dim {
	LM_DIM_ONE = 0, /* 1: a vector */
	LM_DIM_EMBD,    /* n_embd */
	LM_DIM_Q,       /* n_head(il) x head_dim */
	LM_DIM_KV,      /* n_head_kv(il) x head_dim */
	LM_DIM_FF,      /* n_ff(il) */
};

/* One tensor of a layer: which (its field and its name under "blk.N.") and its shape. */
struct lm_tensor_spec {
	enum lm_layer_tensor t;
	enum lm_dim ne0, ne1;
	bool optional; /* absent in the file: the field stays unbound (data == NULL) */
};

#define LM_TENSOR(field, ne0, ne1)                              \
	{                                                       \
		LM_T_##field, LM_DIM_##ne0, LM_DIM_##ne1, false \
	}
#define LM_TENSOR_OPT(field, ne0, ne1)                         \
	{                                                      \
		LM_T_##field, LM_DIM_##ne0, LM_DIM_##ne1, true \
	}

struct lm_arch {
	const char *name; /* general.architecture */
	const struct lm_tensor_spec *tensors;
	size_t n_tensors;
	/* Tensor names (substrings) the architecture would need and layermesh does not implement:
	 * a file that has one is refused rather than computed wrongly. NULL-terminated. */
	const char *const *refused;
	/* Runs absolute layer il of the slice over batch b, reading and updating fw->x (the
	 * residual stream, [n][n_embd]) with fw's scratch. */
	int (*layer)(struct lm_forward *fw, int32_t il, const struct lm_batch *b, lm_diag *d);
};

/* The architecture called `name`; NULL when layermesh has none of that name. */
const struct lm_arch *lm_arch_find(const char *name);
/* The names layermesh runs, comma-separated, for messages. */
const char *lm_arch_names(void);

extern const struct lm_arch lm_arch_llama;

/* The status of a backend op inside a layer function, with the op and the layer named (il must
 * be in scope, and `d`). */
#define LM_FW_OP(call, what)                                                        \
	do {                                                                        \
		int rc_ = (call);                                                   \
		if (rc_ != 0)                                                       \
			return lm_fail(d, rc_, "layer %d: %s failed: %s", il, what, \
				       lm_strerror(rc_));                           \
	} while (0)

#endif

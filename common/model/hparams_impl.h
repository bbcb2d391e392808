/* hparams_impl.h — what hparams.c and hparams_arch.c share (not a public interface). */
#ifndef LM_HPARAMS_IMPL_H
#define LM_HPARAMS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model/hparams.h"

/* The keys every architecture reads, as read: an architecture's load decides which layers take
 * the _swa values. */
struct hp_read {
	int32_t head_dim, head_dim_swa; /* attention.key_length[_swa] */
	int32_t n_rot, n_rot_swa;       /* rope.dimension_count[_swa] */
	float base, base_swa;           /* rope.freq_base[_swa] */
	float scale;                    /* 1 / rope.scaling.factor */
	uint32_t n_expert;              /* expert_count (0: a dense model) */
};

/* An architecture's reading of its metadata. */
struct hp_arch {
	const char *name;
	enum lm_rope_mode rope;
	/* Called with every layer set as a global layer of r's values: sets the sliding layers,
	 * the scales and the refusals. */
	int (*load)(const gguf_file *f, struct lm_hparams *hp, const struct hp_read *r, lm_diag *d);
};

const struct hp_arch *hp_arch_find(const char *name);

/* "<arch>.<suffix>": a positive int32 / any u32 / a finite f32; LM_ENOTFOUND when absent. */
int hp_get_i32(const gguf_file *f, const char *arch, const char *suffix, int32_t *out, lm_diag *d);
int hp_get_u32_zero(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out,
		    lm_diag *d);
int hp_get_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, lm_diag *d);
/* A per-layer int32 (a scalar or an n_layer array) into field `off` of every hp->layer[]. */
int hp_get_per_layer(const gguf_file *f, const char *arch, const char *suffix,
		     struct lm_hparams *hp, size_t off, bool required, lm_diag *d);

#endif

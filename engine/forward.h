/* forward.h — one pipeline stage's forward pass: layers [begin, end) of a model slice over a
 * batch of tokens, on any backend.
 *
 * The same code runs the whole model in one process (`layermesh run`: a slice of every layer
 * with the embedding and the head) and one stage of the mesh (a worker's slice). A stage takes
 * token ids when it owns the embedding, else the previous stage's hidden states; it produces
 * hidden states for the next stage, or logits for the requested rows when it owns the head.
 *
 * A batch may mix sequences (continuous batching): each token names its KV slot and position.
 * Within a batch, a slot's tokens come in consecutive positions, the first at or before the
 * slot's current length (starting earlier rolls the sequence back); after the forward the
 * slot's length is one past its last token. Everything is checked, with errors naming the token.
 *
 * What a layer computes is its architecture's (engine/arch_<name>.c); the head is every
 * architecture's: logits = (rmsnorm(x) * output_norm) Woutput.
 */
#ifndef LM_FORWARD_H
#define LM_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "engine/kv_cache.h"
#include "engine/moe.h"
#include "engine/weights.h"
#include "kernels/backend.h"

struct lm_batch {
	int32_t n;                    /* tokens in the batch */
	const int32_t *ids;           /* [n] token ids: required on the first stage, else NULL */
	const struct lm_tok_loc *loc; /* [n] slot and position of each token */
	int32_t n_out;                /* head only: rows whose logits are wanted (0: none) */
	const int32_t *out_rows; /* [n_out] indices into the batch, e.g. each sequence's last */
};

/* Called after each layer with the residual stream (backend memory, [n][n_embd]); used by
 * `layermesh diff` to capture hidden states. `layer` is the index of the layer just run. */
typedef void (*lm_forward_hook)(void *arg, int32_t layer, const float *x, int32_t n);

struct lm_forward {
	const struct lm_model *model;
	struct lm_backend *be;
	struct kv_cache *kv;
	int32_t max_batch;
	int32_t q_dim, kv_dim, ff_dim; /* widest layer of the slice */
	/* Backend scratch, allocated once for max_batch tokens. */
	float *x;                  /* [max_batch][n_embd] residual stream */
	float *h;                  /* [max_batch][n_embd] normed input / layer output */
	float *q;                  /* [max_batch][q_dim] */
	float *k, *v;              /* [max_batch][kv_dim] */
	float *att;                /* [max_batch][q_dim] */
	float *gate;               /* [max_batch][ff_dim] */
	float *up;                 /* [max_batch][ff_dim] */
	float *logits;             /* [max_batch][n_vocab], head only */
	struct lm_moe_scratch moe; /* the mixture-of-experts layers' buffers, where the slice has
				    * any (moe.bytes 0 otherwise) */
	/* qwen35's buffers (a model with hp.ssm), where the slice has layers: backend qkv
	 * [max_batch][conv_dim], z and o [max_batch][value_dim], b and a [max_batch][n_v_heads];
	 * host: the same for the delta rule, which runs on the host (engine/dnet.h), or an
	 * attention layer's queries and gates [max_batch][q_dim], then one layer's small tensors
	 * and the delta rule's work area. */
	struct {
		float *qkv, *z, *o, *b, *a;
		float *host;
		size_t host_floats;
	} dn;
	size_t scratch_bytes; /* what the buffers above take */
	lm_forward_hook hook;
	void *hook_arg;
};

/* Allocates the scratch for batches of up to max_batch tokens. The model, backend and cache are
 * borrowed and must outlive the forward; the cache must cover exactly the model's slice. */
int lm_forward_init(struct lm_forward *fw, const struct lm_model *m, struct lm_backend *be,
		    struct kv_cache *kv, int32_t max_batch, lm_diag *d);
void lm_forward_fini(struct lm_forward *fw);

/* Runs the stage on b. hidden_in: host [n][n_embd] when the stage has no embedding (else NULL).
 * hidden_out: host [n][n_embd] when the stage has no head (may be NULL otherwise). logits: host
 * [n_out][n_vocab] when the stage has the head. */
int lm_forward_run(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
		   float *hidden_out, float *logits, lm_diag *d);

/* lm_forward_run, then a check that what it returns is finite: every row of hidden_out, or the
 * n_out rows of logits. A NaN or an infinity is never passed on: the batch runs again with a
 * check after every layer (it writes the same KV rows), and the result is LM_ENONFINITE with d
 * naming the first layer whose hidden state was not finite, the row and its slot and position
 * ("layer 3 made NaN in row 2 (slot 5, position 17)"), or the input rows or the output head. The
 * check reads the output once: noise beside the forward that wrote it. */
int lm_forward_run_checked(struct lm_forward *fw, const struct lm_batch *b, const float *hidden_in,
			   float *hidden_out, float *logits, lm_diag *d);

/* Whether all n values are finite. */
bool lm_all_finite(const float *x, size_t n);

/* The position of the last token of token t's slot in batch b. */
int32_t lm_batch_slot_last(const struct lm_batch *b, int32_t t);

#endif

/* scratch.c — a stage's scratch, estimated. See scratch.h. */
#include "engine/scratch.h"

#include "common/wire/wire.h"
#include "engine/dnet.h"
#include "engine/moe.h"
#include "engine/sampler.h"
#include "engine/weights.h"

uint64_t lm_forward_scratch_bytes(const struct lm_hparams *hp, int32_t begin, int32_t end,
				  bool head, int32_t max_batch)
{
	struct lm_widths w = lm_hparams_widths(hp, begin, end);
	uint64_t b = (uint64_t)max_batch, e = (uint64_t)hp->n_embd;
	/* x and h; q, k, v, att, gate and up when the slice has layers; logits on the head. */
	uint64_t floats = b * 2 * e;
	if (end > begin)
		floats += b *
			  (2 * (uint64_t)w.q_dim + 2 * (uint64_t)w.kv_dim + 2 * (uint64_t)w.ff_dim);
	if (head)
		floats += b * (uint64_t)hp->n_vocab;
	uint64_t moe = end > begin && w.n_expert > 0
			       ? lm_moe_scratch_bytes(max_batch, hp->n_embd, w.n_expert,
						      w.n_expert_used, w.ff_dim)
			       : 0;
	/* qwen35's buffers: the delta-net's projections on the backend, and on the host. */
	if (end > begin && hp->ssm.head_dim > 0)
		floats += b * (uint64_t)lm_dnet_batch_floats(&hp->ssm) +
			  (uint64_t)lm_dnet_host_floats(&hp->ssm, max_batch, w.q_dim);
	return floats * sizeof(float) + moe;
}

uint64_t lm_scratch_trace_bytes(const struct lm_hparams *hp, int32_t max_seq)
{
	uint64_t rows = (uint64_t)(max_seq < LM_PROBE_ROWS ? max_seq : LM_PROBE_ROWS);
	/* The trace grows by rows (lm_grow doubles): at most twice the rows recorded. */
	return 2 * rows * (uint64_t)hp->n_embd * sizeof(float);
}

uint64_t lm_scratch_layer_bytes(const struct lm_hparams *hp, int32_t max_seq, uint64_t kv_bytes,
				int32_t slots)
{
	return lm_scratch_trace_bytes(hp, max_seq) + (slots > 0 ? kv_bytes / (uint64_t)slots : 0);
}

void lm_scratch_estimate(const struct lm_hparams *hp, const struct lm_scratch_cfg *c,
			 struct lm_scratch *out)
{
	struct lm_widths w = lm_hparams_widths(hp, c->begin, c->end);
	uint64_t b = (uint64_t)c->max_batch, e = (uint64_t)hp->n_embd, v = (uint64_t)hp->n_vocab;
	uint64_t slots = (uint64_t)c->slots;

	out->forward = lm_forward_scratch_bytes(hp, c->begin, c->end, c->head, c->max_batch);

	int64_t widest = hp->n_embd;
	widest = w.q_dim > widest ? w.q_dim : widest;
	widest = w.ff_dim > widest ? w.ff_dim : widest;
	struct lm_scratch_shape shape = {
		.max_batch = c->max_batch,
		.widest_in = widest,
		.max_ctx = c->max_seq,
		.max_group = w.group,
		.max_head_dim = w.head_dim,
		.max_heads = w.n_heads,
		/* every tensor a layer may have (each expert of a 3-D
					  * one its own), the two ends' four */
		.max_tensors = (c->end - c->begin) * (LM_T_COUNT + 3 * w.n_expert) + 4};
	out->backend =
		lm_backend_scratch_bound(c->backend != NULL ? c->backend : "cpu", &c->bo, &shape);

	/* ids and loc per token; hin and hout rows; the decoder's per-sequence scratch and its
	 * per-row TOKENS entries and drafted ids; the rows to sample and their tokens. */
	const uint64_t n_out = (uint64_t)lm_stage_out_rows(c->max_batch, c->slots, c->max_draft);
	uint64_t stage = b * (sizeof(int32_t) + sizeof(struct lm_tok_loc)) + 2 * b * e * 4;
	stage += wire_scratch_bytes(c->slots, c->max_batch > c->slots ? c->max_batch : c->slots) +
		 n_out * (sizeof(int32_t) + sizeof(struct wire_token) + sizeof(int32_t));
	if (c->head) /* logits of every row sampled, the sampler's candidates, top logprobs */
		stage += n_out * v * 4 + LM_SAMPLER_BYTES(v) + n_out * WIRE_MAX_LOGPROBS * 8;
	out->stage = stage + b * sizeof(int32_t); /* the trace's row indices */
	out->trace = (uint64_t)c->trace_layers * lm_scratch_trace_bytes(hp, c->max_seq);

	/* A full batch of hidden states (or of ids into the first stage), with its header. */
	uint64_t wire = wire_dtype_size(wire_dtype_of(c->wire_dtype));
	uint64_t payload = b * (e * wire > 4 ? e * wire : 4);
	out->messages = WIRE_RING_HELD * (payload + 1024 + slots * 64);

	out->process = LM_WORKER_BASE_BYTES;
	out->total = out->forward + out->backend + out->stage + out->trace + out->messages +
		     out->process;
}

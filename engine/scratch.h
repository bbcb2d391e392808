/* scratch.h — what a stage of the mesh allocates besides its weights and its KV cache.
 *
 * One estimate, used by the planner to price every worker (coordinator/plan/planner.c) and held by
 * tests/unit/test_stage.c to what a real stage allocates. It is the sum of
 *     forward   the engine's activation buffers (engine/forward.c) for max_batch tokens
 *     backend   the backend's own scratch at most (lm_backend_scratch_bound: converted
 *               activations, GEMM panels, attention scores over the longest context)
 *     stage     the worker's host rows in and out, its batch index arrays, and on the last
 *               stage the logits of every row it samples or verifies (lm_stage_out_rows),
 *               the sampler and the top-logprob payload
 *     trace     per layer, the hidden states of a redeploy's probe (at most LM_PROBE_ROWS
 *               rows), recorded while a smoke test runs; the planner prices it per layer
 * and, per layer too (lm_scratch_layer_bytes, not in lm_scratch), one slot's K and V rows: a
 * redeploy moves a sequence in one message (KV_EXPORT from the old process, KV_IMPORT into the
 * new one), which the sender fills in place and the receiver holds while it imports.
 *     messages  WIRE_RING_HELD data-ring messages of a full batch at once (common/wire/wire.h:
 *               the receive queue, the message being computed and the one being sent)
 *     process   the worker process itself, whatever its slice (LM_WORKER_BASE_BYTES)
 * An estimate that must stay an upper bound: a plan that under-counts puts a worker past its
 * memory limit.
 */
#ifndef LM_SCRATCH_H
#define LM_SCRATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "common/model/hparams.h"
#include "kernels/backend.h"

/* Rows a stage's trace records at most (the prompt of a probe or of a diff). */
#define LM_TRACE_ROWS 512
/* Tokens a redeploy's probe prompt may have: what the plan counts a trace for. (A diff traces
 * up to LM_TRACE_ROWS on a private mesh, which no memory limit binds.) */
#define LM_PROBE_ROWS 64
/* What a worker process holds whatever its slice: its program and libraries as they are paged
 * in, its threads' stacks, the allocator's arenas, NNG's sockets and the health server. Measured
 * (Linux x86-64, glibc, Debian 12's NNG): an idle worker is 3.7 MiB resident, 3.2 MiB of it
 * file-backed; a loaded one of the mission's shape (Gemma 4, 262,144-token vocabulary) holds
 * 4.5 to 4.8 MiB beyond its weights, the backend's buffers and the stage's rows, at 1, 2 and 4
 * threads alike (3.7 to 4.0 MiB of it file-backed). */
#define LM_WORKER_BASE_BYTES (6ull << 20)

struct lm_scratch_cfg {
	int32_t begin, end;   /* the layers whose widths count */
	int32_t trace_layers; /* layers whose probe trace is counted here (the planner: 0) */
	bool embedding, head;
	int32_t max_batch, slots, max_seq;
	int32_t max_draft;         /* speculative tokens a sequence's batch may carry */
	enum lm_dtype wire_dtype;  /* hidden states on the wire */
	const char *backend;       /* NULL: "cpu" */
	struct lm_backend_opts bo; /* threads and kernels, as the worker runs */
};

struct lm_scratch {
	uint64_t forward, backend, stage, trace, messages, process;
	uint64_t total;
};

void lm_scratch_estimate(const struct lm_hparams *hp, const struct lm_scratch_cfg *c,
			 struct lm_scratch *out);

/* Rows the last stage takes logits for in one batch, at most: one per sampling sequence, and
 * 1 + n_draft for a speculating one, never more than the batch's tokens. */
static inline int32_t lm_stage_out_rows(int32_t max_batch, int32_t slots, int32_t max_draft)
{
	int64_t rows = (int64_t)slots * (1 + (int64_t)(max_draft > 0 ? max_draft : 0));
	return rows < max_batch ? (int32_t)rows : max_batch;
}

/* The probe trace of one layer. */
uint64_t lm_scratch_trace_bytes(const struct lm_hparams *hp, int32_t max_seq);
/* What the planner counts per layer besides its weights and cache: its probe trace and one of
 * its `slots` slots' rows (kv_bytes / slots) in a moving sequence's message. */
uint64_t lm_scratch_layer_bytes(const struct lm_hparams *hp, int32_t max_seq, uint64_t kv_bytes,
				int32_t slots);

/* The engine's activation buffers alone (what lm_forward_init allocates). */
uint64_t lm_forward_scratch_bytes(const struct lm_hparams *hp, int32_t begin, int32_t end,
				  bool head, int32_t max_batch);

#endif

/* planner.h — from a mesh.toml and its GGUF model to a fence plan.
 *
 * The planner reads the model's tensor index (nothing is mapped), takes each layer's weight
 * bytes and flops from it (lm_model_costs), sizes each layer's KV cache for the mesh's slots and
 * positions from its own geometry (kv_geom_bytes through fence_kv_costs), estimates every
 * worker's activation scratch, and hands the lot to fence_plan_make() with the workers' memory
 * limits and speeds. `layermesh plan` prints the result; `layermesh up` will start the workers
 * on it.
 */
#ifndef LM_PLANNER_H
#define LM_PLANNER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/plan/fence.h"
#include "common/config/mesh_config.h"
#include "common/model/hparams.h"
#include "common/wire/wire.h"
#include "kernels/backend.h"

/* What a plan was made from, for its header and its JSON. */
struct planner_info {
	int32_t n_layers, n_embd, n_vocab, n_ctx_train;
	int32_t max_seq, slots, max_batch;
	struct kv_types kv;
	enum lm_dtype wire_dtype;
	bool has_sliding;      /* some layer slides (the sliding types apply) */
	bool tied;             /* the head reuses the token embedding */
	uint64_t weight_bytes; /* every layer's tensors */
	uint64_t kv_bytes;     /* every layer's cache: what one process of the whole model holds */
	uint64_t kv_f32_bytes; /* the same in f32 */
	uint64_t embd_bytes;   /* token embedding (worker 0) */
	uint64_t head_bytes; /* output norm + lm_head (last worker; the embedding again if tied) */
};

/* Positions per sequence: max_seq_len when set, else the model's context length capped at
 * MESH_MAX_SEQ_DEFAULT. */
int32_t planner_max_seq(const struct mesh_config *cfg, const struct lm_hparams *hp);

/* The scratch of worker j of cfg's mesh (engine/scratch.h), at the model's widest layer
 * whatever slice it gets; its layers' probe traces are priced per layer. */
uint64_t planner_scratch_bytes(const struct mesh_config *cfg, const struct lm_hparams *hp,
			       int32_t j, int32_t max_seq);

/* Plans cfg's mesh over cfg's model. On failure (LM_EINFEASIBLE with the fence's message, or a
 * model that cannot be read) the plan holds nothing. info may be NULL.
 *
 * Device memory. A `cuda` worker's memory_limit is device memory; one that mesh.toml leaves out
 * (0) becomes the free memory of its device, asked through the backend seam
 * (lm_backend_query_memory: a child process with its own context on the device, so the figure
 * leaves out what the worker's context will take). The worker's bytes there count its weights,
 * its KV cache and its device scratch: the engine's activations, the lm_head's logits rows for a
 * whole batch on the last worker ([max_batch][n_vocab] f32: the lm_head's compute buffer; the
 * lm_head itself stays in its file type, never expanded) and the CUDA backend's own scratch
 * bound. The asking happens here, on the coordinator's machine: workers started elsewhere
 * (--no-spawn) on another host need memory_limit in mesh.toml. */
int planner_plan(const struct mesh_config *cfg, struct fence_plan *plan, struct planner_info *info,
		 lm_diag *d);

/* Refuses cfg's mesh when a worker's backend lacks what the layers it may hold need (their
 * cache types in its kv_type_*, their weight types, attention sinks, YaRN rope, swiglu_oai),
 * asking the backend's lists (kernels/backend.h), never a device: LM_EUNSUPPORTED naming the
 * worker, its backend and each thing it lacks. A worker may hold its pinned layers, else any
 * layer, plus the embedding (first worker) and the head (last). planner_plan_with calls it
 * before it asks any device for its memory (coordinator/plan/backend_check.c). */
int planner_check_backends(const struct mesh_config *cfg, const gguf_file *f,
			   const struct lm_hparams *hp, lm_diag *d);

/* How the planner learns a device's memory: lm_backend_query_memory by default; tests give
 * their own. Returns 0 with m filled, or an LM_E* code with the reason in d. */
typedef int (*planner_mem_fn)(void *arg, const struct mesh_worker *w, struct lm_backend_mem *m,
			      lm_diag *d);
int planner_plan_with(const struct mesh_config *cfg, struct fence_plan *plan,
		      struct planner_info *info, planner_mem_fn mem, void *mem_arg, lm_diag *d);

/* The ASSIGN of worker j of a plan: its slice, cfg's cache, wire and batch settings for `slots`
 * sequences of max_seq positions, and `next`, its successor's data address (the coordinator's
 * for the last worker). `layermesh up` and `layermesh diff` assign their workers with it. */
void planner_assignment(const struct mesh_config *cfg, const struct fence_plan *plan, int32_t j,
			int32_t max_seq, int32_t slots, const char *next, struct wire_assign *a);

/* The cache types of every layer of a plan ([plan->n_layers]): those of the worker that holds
 * it. The single process given them (`layermesh diff`) stores each layer as the mesh does. */
void planner_layer_kv_types(const struct mesh_config *cfg, const struct fence_plan *plan,
			    struct kv_types *types);

/* Warns on err of cfg's TCP listeners whose ports lie in the ephemeral range that range_file
 * (MESH_PORT_RANGE_FILE, or a test's) gives; says nothing when it cannot be read. Returns how
 * many. */
int32_t planner_warn_ephemeral(const struct mesh_config *cfg, const char *range_file, FILE *err);

/* `layermesh plan`: loads mesh_path, plans, and writes the table (or JSON) to out; messages go
 * to err. Returns the exit status: 0 planned, 1 failed. */
int planner_cmd(const char *mesh_path, bool json, FILE *out, FILE *err);

#endif

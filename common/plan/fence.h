/* fence.h — the planner: where to cut a model's layers between the workers of a mesh.
 *
 * A plan is a fence [0 = c0 < c1 < ... < cW = L]: worker j runs layers [c_j, c_{j+1}), every
 * worker at least one. Each worker must hold, within its memory_limit,
 *     bytes_j = sum over its layers of (weight bytes + KV bytes + layer scratch)
 *             + scratch_j                         (activation scratch, per worker)
 *             + first_bytes   if j == 0           (the token embedding)
 *             + last_bytes    if j == W - 1       (output norm and lm_head; a tied embedding
 *                                                  is counted here as well as on worker 0)
 * and takes time_j = flops_j / speed_j per token, where flops_j sums its layers' flops plus
 * first_flops / last_flops on the end workers. KV bytes are per layer, so layers of different
 * geometry (sliding-window layers, other KV head counts or head sizes) weigh what they hold:
 * fence_kv_costs() fills them from kv_geom_bytes(). They are per worker too: a worker with
 * cache types of its own (a small worker in a mixed fleet) brings its own KV cost of every
 * layer (fence_worker.kv_layers), and a layer weighs on it what it would hold there. Stage
 * costs were always a function of (worker, first layer, end layer), so every strategy, the
 * balanced programme included, stays exact with them.
 *
 * Strategies:
 *   FENCE_UNIFORM   equal layer counts; the first L mod W workers take one layer more.
 *   FENCE_BALANCED  minimise the slowest stage, max_j time_j, subject to bytes_j <= limit_j for
 *                   every worker: an exact dynamic programme over (worker, layer) in
 *                   O(W L^2). Among the fences that reach the optimum, the one whose fullest
 *                   worker is least full (the smallest max_j bytes_j / limit_j, compared
 *                   exactly) is chosen: equal speed is worth nothing if it leaves a worker
 *                   with no headroom for what the estimate missed. Among those, the
 *                   lexicographically smallest (c1 as small as possible, then c2, ...), so
 *                   equal inputs always give the same plan.
 *   FENCE_PINNED    the ranges given per worker are checked: in worker order, contiguous,
 *                   covering [0, L) exactly, each within its worker's memory limit.
 *
 * A plan that cannot be made returns LM_EINFEASIBLE with a message that names the worker, its
 * layers and its bytes against its limit (or, for balanced, the constraint that makes every
 * fence fail). Bad inputs (no layers, no workers, a speed that is not a positive finite
 * number) return LM_EINVAL; sums that do not fit in 64 bits LM_EOVERFLOW.
 */
#ifndef LM_FENCE_H
#define LM_FENCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/model/kv_geom.h"

/* Layers a plan may have; the dynamic programme's tables are (W + 1) x (L + 1). */
#define FENCE_MAX_LAYERS  4096
#define FENCE_MAX_WORKERS 1024

enum fence_strategy {
	FENCE_UNIFORM = 0,
	FENCE_BALANCED = 1,
	FENCE_PINNED = 2,
};

/* The cost of one layer. */
struct fence_layer {
	uint64_t weight_bytes;  /* its tensors */
	uint64_t kv_bytes;      /* its K and V for the mesh's slots and positions */
	uint64_t scratch_bytes; /* what a worker allocates per layer it runs besides (a trace) */
	uint64_t flops;         /* per token */
	/* For the table only (fence_kv_costs fills them; the plan is made from kv_bytes): */
	uint64_t kv_k_bytes, kv_v_bytes; /* kv_bytes split into K and V */
	uint64_t kv_f32_bytes;           /* what the same K and V would take in f32 */
	bool sliding;                    /* a sliding-window layer (its own cache types) */
	bool recurrent; /* a recurrent layer: K is its conv ring, V its SSM state, f32, per slot */
};

/* KV bytes of a stage by layer kind and tensor: [FENCE_KV_GLOBAL or FENCE_KV_SLIDING][0 K, 1 V]. */
enum { FENCE_KV_GLOBAL = 0, FENCE_KV_SLIDING = 1, FENCE_KV_RECURRENT = 2, FENCE_KV_KINDS = 3 };

/* One worker as the planner sees it. */
struct fence_worker {
	const char *name;       /* for messages and the table; may be NULL ("w<j>") */
	uint64_t memory_limit;  /* bytes: everything the worker allocates must fit */
	double speed;           /* relative throughput, positive and finite */
	uint64_t scratch_bytes; /* activation scratch, whatever its layers */
	int32_t pin_start;      /* FENCE_PINNED: layers [pin_start, pin_end) */
	int32_t pin_end;
	/* Optional: the worker's own KV cost of every layer ([n_layers], the KV fields as
	 * fence_kv_costs fills them in kv_types), for a worker whose cache types are not the
	 * input's; NULL: the layers' own. Workers may share one array. */
	const struct fence_layer *kv_layers;
	struct kv_types kv_types; /* the types kv_layers was priced in; unused when it is NULL */
};

struct fence_input {
	enum fence_strategy strategy;
	int32_t n_layers;
	const struct fence_layer *layers; /* [n_layers] */
	uint64_t first_bytes;             /* on worker 0: the token embedding */
	uint64_t last_bytes;              /* on worker W-1: output norm and lm_head */
	uint64_t first_flops;             /* per token, on worker 0 */
	uint64_t last_flops;              /* per token, on worker W-1: the lm_head */
	int32_t n_workers;
	const struct fence_worker *workers; /* [n_workers] */
	struct kv_types kv_types;           /* the layers' cache types, for the table's columns */
};

/* One worker's share of a plan. */
struct fence_stage {
	char *name;                          /* owned by the plan */
	int32_t start, end;                  /* layers [start, end) */
	uint64_t weight_bytes;               /* of its layers */
	uint64_t kv_bytes;                   /* of its layers */
	uint64_t kv_kind[FENCE_KV_KINDS][2]; /* kv_bytes by layer kind and K/V (FENCE_KV_*) */
	uint64_t kv_f32_bytes;               /* its layers' K and V in f32 */
	struct kv_types kv_types; /* the types its cache is priced in (its own, or the input's) */
	uint64_t scratch_bytes;   /* the worker's and its layers' */
	uint64_t extra_bytes;     /* embedding and/or head */
	uint64_t total_bytes;     /* the four above */
	uint64_t memory_limit;
	uint64_t flops; /* per token, first_flops/last_flops included */
	double speed;
	double time; /* flops / speed */
};

struct fence_plan {
	enum fence_strategy strategy;
	int32_t n_layers, n_workers;
	struct kv_types kv_types;   /* the input's */
	bool mixed_kv;              /* some worker's cache types are not the input's */
	bool has_sliding;           /* some layer slides */
	bool has_recurrent;         /* some layer is recurrent (its state per slot) */
	int32_t *cuts;              /* [n_workers + 1]: c0 = 0 ... cW = n_layers */
	struct fence_stage *stages; /* [n_workers] */
	uint64_t total_flops;       /* per token, all stages */
	double max_time;            /* the slowest stage's time */
};

/* "uniform", "balanced", "pinned". */
const char *fence_strategy_name(enum fence_strategy s);
/* The inverse; -1 for anything else. */
int fence_strategy_parse(const char *s);

/* Sets layers[i].kv_bytes (and its K/V split, its f32 equivalent and its kind), i in
 * [0, n_layers), from kv_geom_kv_bytes() of geom[i] in its own types (types->swa for sliding
 * layers, types->global for the others) for `slots` sequences of `max_seq` positions (sliding
 * rings `extra` rows beyond their window). A type that cannot hold a layer (a block that does
 * not tile its head_dim) is LM_EINVAL naming the layer, its kind, its geometry and why. */
int fence_kv_costs(struct fence_layer *layers, int32_t n_layers, const struct kv_geom *geom,
		   int32_t max_seq, int32_t extra, int32_t slots, const struct kv_types *types,
		   lm_diag *d);

/* Makes the plan. On failure the plan holds nothing (fini is harmless all the same). */
int fence_plan_make(struct fence_plan *plan, const struct fence_input *in, lm_diag *d);
/* Frees; harmless on a zeroed or finished plan. */
void fence_plan_fini(struct fence_plan *plan);

/* Bytes as "1.50 GiB", "512.00 KiB", "17 B" into buf (returned). */
const char *fence_fmt_bytes(uint64_t bytes, char *buf, size_t cap);

/* The plan as a table for people, one row per worker:
 *     worker  layers    weights MiB  KV MiB  scratch MiB  embd/head MiB  total MiB  limit MiB  use  flops
 * and a footer with the totals and the slowest stage; then the KV cache by type, one row per
 * worker and a total:
 *     worker  global K <t>  global V <t>  [sliding K <t>  sliding V <t>]  KV MiB  as f32 MiB  saved
 * where workers differ in their types (mixed_kv), the headers name no type and each worker's
 * cell its own ("q8_0 1.50").
 * Returns 0 or LM_EIO. */
int fence_plan_write_table(const struct fence_plan *plan, FILE *out);
/* The plan as a cJSON object (the caller cJSON_Delete()s it); NULL when out of memory:
 *     {"strategy": "balanced", "layers": L, "cuts": [0, ..., L], "total_flops": f,
 *      "max_time": t, "workers": [{"name", "start", "end", "weight_bytes", "kv_bytes",
 *      "scratch_bytes", "extra_bytes", "total_bytes", "memory_limit", "flops", "flops_share",
 *      "speed", "time"}, ...]}
 * Byte counts and flops are JSON numbers (exact up to 2^53). */
struct cJSON;
struct cJSON *fence_plan_to_json(const struct fence_plan *plan);

#endif

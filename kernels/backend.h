/* backend.h — the device seam.
 *
 * A backend is a table of function pointers (struct lm_backend_i) plus its context, wrapped as
 * struct lm_backend { iface; ctx; }. The worker's slice forward speaks only to this table, so the
 * same forward runs on the CPU (kernels/cpu) and on CUDA (kernels/cuda). The shape follows ggml's
 * ggml-backend-impl.h: a version field, a contract comment on every slot, optional slots marked
 * optional with the dispatcher (lm_backend_* inline helpers below) supplying the default.
 *
 * Memory model. Activations, KV rows and uploaded weights live in "backend memory": host memory for
 * the CPU backend, device memory for CUDA. Pointers to backend memory are opaque to callers: they
 * are passed back into ops, never dereferenced, and moved to or from the host with upload/download.
 * Activations are f32, row-major: a batch of n tokens of width d is n rows of d floats.
 *
 * Threads. A backend is used by one thread at a time (the worker's compute thread); it may use its
 * own threads inside an op. Every op is synchronous unless the backend says otherwise in `sync`.
 *
 * Index arrays (token ids, struct lm_tok_loc) are host memory: a device backend copies them.
 *
 * Errors. Ops that can fail on data (an unsupported weight type, a position outside the cache)
 * return a negative LM_E* code; shape errors are programming errors and are checked by the caller.
 * A device backend maps its own failures to LM_ENOMEM (out of device memory) or LM_EDEVICE and
 * keeps the device's message for `last_error` (lm_backend_strerror); it never aborts.
 */
#ifndef LM_BACKEND_H
#define LM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/err.h"
#include "common/model/rope.h"

#define LM_BACKEND_VERSION 4

/* A weight matrix (or vector when ne1 == 1) in GGUF layout: ne1 rows of ne0 elements, each row
 * `row_bytes` bytes of `type` blocks, rows contiguous. y = W x means y[r] = dot(W[r], x). */
struct lm_weight {
	enum lm_dtype type;
	int64_t ne0;      /* elements per row: the input dimension */
	int64_t ne1;      /* rows: the output dimension */
	size_t row_bytes; /* bytes of one row */
	const void
		*data; /* backend memory; for the CPU backend the mmapped GGUF bytes themselves */
	void *priv;    /* owned by the backend (a repacked copy, a device buffer); NULL if none */
};

/* Where a token of a batch lives: its sequence's cache slot and its absolute position. */
struct lm_tok_loc {
	int32_t slot;
	int32_t pos;
};

/* One layer of the KV cache as the ops see it (engine/kv_cache.c builds these, range-checked).
 * Position p of slot s is row (p % ctx) of that slot; global layers have ctx == max_seq. */
struct lm_kv_layer {
	void *k, *v;                  /* backend memory: [slots][ctx][n_kv_heads * head_dim] */
	enum lm_dtype k_type, v_type; /* each F32, F16, BF16, Q8_0, Q4_0, Q5_1 or FP8_E4M3 */
	int32_t n_kv_heads, head_dim;
	int32_t ctx;    /* rows per slot */
	int32_t window; /* 0: attend to every earlier position; else the last `window` */
	int32_t slots;
	size_t k_row_bytes, v_row_bytes; /* one position, all KV heads */
	/* Per query head, a learned sink logit (gpt-oss's attn_sinks), backend memory [n_heads]
	 * f32, or NULL: none. A sink joins each head's softmax as one more logit with no value
	 * row: max = max(max_j s_j, sink), and exp(sink - max) is added to the denominator. */
	const float *sinks;
};

/* What a backend's memory holds: device memory for CUDA, host memory for the CPU. */
struct lm_backend_mem {
	const char *kind; /* "device" or "host" */
	uint64_t total;   /* bytes the memory has */
	uint64_t free;    /* bytes free now (the device's, or the host's MemAvailable) */
	uint64_t used;    /* bytes this backend holds: malloc'd buffers, weights, its scratch */
};

struct lm_backend_i {
	uint32_t version; /* LM_BACKEND_VERSION */
	const char *name; /* "cpu", "cuda" */

	/* Releases the context and everything the backend allocated. Required. */
	void (*fini)(void *ctx);

	/* --- memory --- */
	/* Backend memory of `bytes`, zero-filled, aligned to 64 bytes. NULL when out of memory.
	 * Required. Freed with mfree (which accepts NULL). */
	void *(*malloc)(void *ctx, size_t bytes);
	void (*mfree)(void *ctx, void *p);
	/* Host to backend and back. Required. Blocking. */
	int (*upload)(void *ctx, void *dst, const void *src, size_t n);
	int (*download)(void *ctx, void *dst, const void *src, size_t n);
	/* Makes a host (mapped) weight usable by this backend: fills w->data (and w->priv).
	 * `host` is writable and this weight's alone (the model binds each tensor once), and the
	 * backend may rearrange its bytes in place into a layout of its own: the CPU backend's
	 * AVX-512 set turns quantized matrices into panels (kernels/cpu/panel.c), keeping
	 * w->data = host. Optional: NULL means w->data = host as it is. Undone by weight_fini
	 * (which leaves rearranged bytes rearranged). */
	int (*weight_init)(void *ctx, struct lm_weight *w, const void *host);
	void (*weight_fini)(void *ctx, struct lm_weight *w);

	/* --- ops. Activations are f32 in backend memory; n is the number of tokens. --- */
	/* y[i] = row ids[i] of `table` converted to f32 (the token embedding lookup). ids are
	 * checked by the caller to be < table->ne1 (the CPU backend still returns LM_ERANGE for
	 * one outside [0, ne1)). Required. */
	int (*get_rows)(void *ctx, float *y, const struct lm_weight *table, const int32_t *ids,
			int n);
	/* y[t] = W x[t] for t < n; x is [n][W->ne0], y is [n][W->ne1], y does not overlap x.
	 * x is first converted to the weight type's "vec_dot type" as GGUF's reference
	 * implementation does: rounded to f16 for F16 and to bf16 for BF16 weights, quantized to
	 * Q8_0 for Q8_0 and Q4_0, to Q8_K for Q4_K and Q6_K. LM_EUNSUPPORTED for a weight type
	 * the backend lacks. Required. */
	int (*matmul)(void *ctx, float *y, const struct lm_weight *w, const float *x, int n);
	/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, rows of `dim`; w NULL: no weight (every
	 * w[i] 1). y may equal x. A per-head norm is `dim` = head_dim over n x heads rows.
	 * Required. */
	int (*rmsnorm)(void *ctx, float *y, const float *x, const float *w, int dim, int n,
		       float eps);
	/* Rotates x in place: x is [n][n_heads * head_dim]; token t at position loc[t].pos; the
	 * first rp->n_rot dimensions of every head turn, by rp's mode, base, scale and frequency
	 * factors (backend memory, or NULL). Required. */
	int (*rope)(void *ctx, float *x, int n_heads, int head_dim, const struct lm_tok_loc *loc,
		    int n, const struct lm_rope_params *rp);
	/* Writes token t's K and V rows ([n][n_kv_heads * head_dim] f32) into the cache at
	 * (loc[t].slot, loc[t].pos), converting to the cache types (the block types as GGUF's
	 * reference quantizers do). LM_ERANGE, before anything is written, when a slot is outside
	 * [0, slots) or a position is negative; LM_EUNSUPPORTED for a type the backend lacks or
	 * whose blocks do not tile head_dim. Required. */
	int (*kv_store)(void *ctx, const struct lm_kv_layer *kv, const float *k, const float *v,
			const struct lm_tok_loc *loc, int n);
	/* Causal grouped-query attention: for token t, out[t] = softmax(q[t] K^T * scale) V over the
	 * cached positions of slot loc[t].slot up to and including loc[t].pos (the last `window`
	 * when the layer slides). q and out are [n][n_heads * head_dim]; query head h reads KV head
	 * h / (n_heads / n_kv_heads). K and V of every token of the batch must be stored first.
	 * Because the whole batch is stored before any token reads, the ring of a slot must still
	 * hold every row a token reads: for each token, the latest position of its slot in the
	 * batch minus the earliest position it reads must be below ctx. A sliding layer with
	 * ctx == window therefore takes one token per slot per batch; a prefill chunk of m tokens
	 * needs ctx >= window + m - 1 (or the caller splits the chunk). A global layer needs
	 * pos < ctx. The cached rows are read in their own types (no f32 copy of the cache).
	 * LM_ERANGE when this or a slot/position range fails; LM_EUNSUPPORTED for a type the
	 * backend lacks or a block type whose block does not divide head_dim (a block may not
	 * straddle heads). Required. */
	int (*attention)(void *ctx, float *out, const float *q, const struct lm_kv_layer *kv,
			 const struct lm_tok_loc *loc, int n, int n_heads, float scale);
	/* y[i] = silu(gate[i]) * up[i] for i < len. y may equal gate. Required. */
	int (*silu_mul)(void *ctx, float *y, const float *gate, const float *up, size_t len);
	/* y[i] = gelu(gate[i]) * up[i] for i < len, GELU's tanh form computed as GGUF's reference
	 * CPU implementation does (gate rounded to f16, the GELU of that read from an f16 table;
	 * gate <= -10 gives 0, gate >= 10 gives gate * up). y may equal gate. Required. */
	int (*gelu_mul)(void *ctx, float *y, const float *gate, const float *up, size_t len);
	/* y[i] += a[i] for i < len. Required. */
	int (*add)(void *ctx, float *y, const float *a, size_t len);
	/* y[t][i] += b[i] for t < n, i < width: a bias on every row. b is backend memory (a bound
	 * weight's data). Required. */
	int (*add_rows)(void *ctx, float *y, const float *b, int width, int n);
	/* y[t][i] *= b[i] for t < n, i < width: a weight vector on every row (gemma4's router
	 * input scale, after its other scale, in llama.cpp's order). b is backend memory. Required. */
	int (*mul_rows)(void *ctx, float *y, const float *b, int width, int n);
	/* y[i] *= s for i < len. Required. */
	int (*scale)(void *ctx, float *y, float s, size_t len);
	/* y[i] = x[i] for i < len; y does not overlap x. Required. */
	int (*copy)(void *ctx, float *y, const float *x, size_t len);

	/* Waits until every op issued so far has finished. Optional: NULL means ops are synchronous. */
	int (*sync)(void *ctx);

	/* Bytes of scratch the backend holds now beyond the buffers malloc returned (what its ops
	 * grew for themselves). Optional: NULL means none. Never blocks; for tests and /status. */
	size_t (*scratch_held)(void *ctx);

	/* --- version 3 --- */
	/* The backend's memory now. Optional: NULL means unknown. Never blocks on ops in flight;
	 * called by the compute thread (the worker caches it for /status and /metrics). */
	int (*mem_info)(void *ctx, struct lm_backend_mem *m);
	/* The message of the backend's last failure ("cudaMalloc of 4096 MiB: out of memory"),
	 * or NULL when it has none. Optional. The string is the backend's, valid until its next
	 * op. */
	const char *(*last_error)(void *ctx);

	/* --- version 4 --- */
	/* y[i] = min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1)
	 * for i < len, g = gate[i], u = up[i], evaluated as GGUF's reference CPU op swiglu_oai:
	 * x / (1 + expf(alpha * -x)) * (y + 1) (gpt-oss's experts: alpha 1.702, limit 7). y may
	 * equal gate. Optional: NULL means the backend lacks it (the engine names the op). */
	int (*swiglu_oai)(void *ctx, float *y, const float *gate, const float *up, size_t len,
			  float alpha, float limit);
};

/* The work a backend's own scratch is sized by: the widest op of a stage. */
struct lm_scratch_shape {
	int32_t max_batch;    /* tokens per op */
	int64_t widest_in;    /* the widest matmul input (ne0), elements */
	int32_t max_ctx;      /* cached positions one attention reads */
	int32_t max_group;    /* query heads per KV head */
	int32_t max_head_dim; /* elements per head */
	int32_t max_heads;    /* query heads of the widest layer */
	int32_t max_tensors;  /* weight tensors a stage may bind (a device's allocation rounding) */
};

struct lm_backend {
	const struct lm_backend_i *iface;
	void *ctx;
};

/* Options common to every backend. */
struct lm_backend_opts {
	int n_threads; /* CPU worker threads including the caller; <= 0 picks the online CPU count */
	int device;    /* CUDA device ordinal */
	int force_scalar; /* CPU: use the scalar reference kernels only (tests, `--kernels scalar`) */
	/* CPU: use the AMX GEMMs where the CPU has them (`--kernels amx`) for batches of Q8_0,
	 * Q4_0 and Q4_K weights. Every kernel set sums each output in the generic kernels' order,
	 * so the results are those of the default set bit for bit; it stays opt-in until it is
	 * measured against the default's AVX-512 panels on an AMX CPU. */
	int allow_amx;
};

/* A --kernels value ("auto", "scalar" or "amx") into o's CPU kernel choice; false, o unchanged,
 * for any other name. */
static inline bool lm_backend_opts_kernels(struct lm_backend_opts *o, const char *name)
{
	if (strcmp(name, "auto") != 0 && strcmp(name, "scalar") != 0 && strcmp(name, "amx") != 0)
		return false;
	o->force_scalar = strcmp(name, "scalar") == 0;
	o->allow_amx = strcmp(name, "amx") == 0;
	return true;
}

/* The --kernels value that o's choice came from. */
static inline const char *lm_backend_opts_kernels_name(const struct lm_backend_opts *o)
{
	return o->force_scalar ? "scalar" : o->allow_amx ? "amx" : "auto";
}

/* Dispatcher helpers supplying defaults for optional slots. */
static inline int lm_backend_weight_init(struct lm_backend *b, struct lm_weight *w,
					 const void *host)
{
	if (b == NULL || b->iface->weight_init == NULL) {
		w->data = host;
		w->priv = NULL;
		return 0;
	}
	return b->iface->weight_init(b->ctx, w, host);
}

static inline void lm_backend_weight_fini(struct lm_backend *b, struct lm_weight *w)
{
	if (b != NULL && b->iface->weight_fini != NULL)
		b->iface->weight_fini(b->ctx, w);
	w->data = NULL;
	w->priv = NULL;
}

static inline int lm_backend_sync(struct lm_backend *b)
{
	return b->iface->sync != NULL ? b->iface->sync(b->ctx) : 0;
}

/* fini(NULL)-style: harmless on a zeroed struct. */
static inline void lm_backend_fini(struct lm_backend *b)
{
	if (b != NULL && b->iface != NULL)
		b->iface->fini(b->ctx);
	if (b != NULL) {
		b->iface = NULL;
		b->ctx = NULL;
	}
}

/* The most scratch a backend of that name, with these options, holds for work of this shape
 * (every weight type counted at its widest); what the planner adds to a worker's bytes for it.
 * 0 for a backend this build lacks. */
uint64_t lm_backend_scratch_bound(const char *name, const struct lm_backend_opts *opts,
				  const struct lm_scratch_shape *s);
uint64_t lm_backend_cpu_scratch_bound(const struct lm_backend_opts *opts,
				      const struct lm_scratch_shape *s);
uint64_t lm_backend_cuda_scratch_bound(const struct lm_backend_opts *opts,
				       const struct lm_scratch_shape *s);

static inline size_t lm_backend_scratch_held(const struct lm_backend *b)
{
	return b->iface->scratch_held != NULL ? b->iface->scratch_held(b->ctx) : 0;
}

/* The backend's memory; LM_EUNSUPPORTED when it does not say. */
static inline int lm_backend_mem_info(const struct lm_backend *b, struct lm_backend_mem *m)
{
	memset(m, 0, sizeof *m);
	if (b == NULL || b->iface == NULL || b->iface->mem_info == NULL)
		return LM_EUNSUPPORTED;
	return b->iface->mem_info(b->ctx, m);
}

/* The backend's own message for its last failure, else lm_strerror(rc). Never NULL. */
const char *lm_backend_strerror(const struct lm_backend *b, int rc);

/* The memory of the device (or host) a backend of that name would use, asked without
 * constructing one: what the planner defaults a worker's memory_limit to. For "cuda" the free
 * memory is read by a short-lived child process after it created its own context on the
 * device, so the figure already leaves out what the worker's context will take, and the
 * asking process holds no device memory afterwards. LM_EUNSUPPORTED (and why, in d) when the
 * build lacks the backend; LM_EUNAVAILABLE when it has no such device. */
int lm_backend_query_memory(const char *name, const struct lm_backend_opts *opts,
			    struct lm_backend_mem *m, lm_diag *d);
int lm_backend_cpu_query_memory(struct lm_backend_mem *m, lm_diag *d);
int lm_backend_cuda_query_memory(int device, struct lm_backend_mem *m, lm_diag *d);

/* Features some backend lacks, beyond the ops every backend has. */
enum lm_backend_feature {
	LM_FEATURE_ATTN_SINKS, /* attention with sink logits (lm_kv_layer.sinks: gpt-oss) */
	LM_FEATURE_ROPE_YARN,  /* rope with YaRN scaling (ext_factor != 0: gpt-oss) */
	LM_FEATURE_SWIGLU_OAI, /* the swiglu_oai op (gpt-oss's experts) */
	LM_FEATURE_COUNT
};

/* What a backend of that name runs, asked without constructing one and answered in every build
 * (a coordinator without nvcc plans cuda workers too): KV cache type t (kv_store and
 * attention), weights of type t (matmul and get_rows), a feature. The backend refuses at run
 * time from the same lists (the CUDA backend's are kernels/cuda/cuda_caps.h), so the planner
 * that asks these refuses what the worker would. The CPU backend is the reference: it runs
 * every type and feature the engine reads. false for an unknown name. */
bool lm_backend_kv_type_ok(const char *name, enum lm_dtype t);
bool lm_backend_weight_type_ok(const char *name, enum lm_dtype t);
bool lm_backend_feature_ok(const char *name, enum lm_backend_feature f);
/* The feature's words, for messages ("attention sink logits (gpt-oss)"). */
const char *lm_backend_feature_name(enum lm_backend_feature f);
bool lm_backend_cuda_kv_type_ok(enum lm_dtype t);
bool lm_backend_cuda_weight_type_ok(enum lm_dtype t);
bool lm_backend_cuda_feature_ok(enum lm_backend_feature f);

/* Backend constructors. `name` is "cpu" or "cuda". LM_EUNSUPPORTED when the backend was not
 * built (cuda without nvcc), LM_EUNAVAILABLE when it has no device (no driver, no GPU, a
 * device number past the count); lm_backend_open says why in d. */
int lm_backend_init(struct lm_backend *b, const char *name, const struct lm_backend_opts *opts);
int lm_backend_open(struct lm_backend *b, const char *name, const struct lm_backend_opts *opts,
		    lm_diag *d);
int lm_backend_cpu_init(struct lm_backend *b, const struct lm_backend_opts *opts);
int lm_backend_cuda_init(struct lm_backend *b, const struct lm_backend_opts *opts, lm_diag *d);

#endif

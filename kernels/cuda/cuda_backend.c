/* cuda_backend.c — the CUDA backend object: the lm_backend_i table over the kernels of
 * kernels/cuda, one stream, device scratch, and the device's errors as LM_E* codes.
 *
 * Memory. Backend memory is device memory (cudaMalloc, zero-filled). Weights are uploaded once,
 * at weight_init, in their GGUF block layout: nothing is expanded to f16 or f32 on the device,
 * and a host tensor bound twice (a tied embedding on a stage with both ends) is uploaded once.
 * Every live allocation is recorded, so mem_info reports what this backend holds.
 *
 * Ordering. Ops enqueue their kernels on the backend's stream and return; `sync` waits, and
 * upload and download wait too (the seam's contract: they are blocking). Index arrays (token
 * ids, struct lm_tok_loc) are host memory: they are copied to the device on the stream with
 * cudaMemcpyAsync from pageable memory, which takes the bytes before it returns, so the caller
 * may reuse them at once; the copy of the last token places is kept, and an op given the same
 * places again (every layer of a forward is) copies nothing.
 *
 * Errors. A CUDA failure becomes LM_ENOMEM (out of device memory) or LM_EDEVICE, its message
 * (cudaGetErrorString, with the op) is kept for last_error, and nothing aborts. A fault inside a
 * kernel is sticky in CUDA: every later op of the process then fails with it, which the worker
 * reports; it does not produce wrong numbers silently.
 *
 * Threads. Ops may come from another thread than the one that made the backend (the worker
 * loads on one and computes on another): each entry makes the backend's device current first.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/err.h"
#include "common/base/log.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cuda/cuda_impl.h"

#define CUDA_ALIGN 256
/* The most bytes of attention probabilities one launch holds: a batch is cut into chunks of
 * tokens below it (one token at least). */
#define CUDA_ATTN_SCRATCH_CAP ((size_t)64 << 20)
/* What this backend rounds one allocation up to, counted per weight tensor. (The driver's own
 * page granularity under cudaMalloc is not counted: tests/gpu/run_gpu_checks.sh prints a CUDA
 * worker's device memory in use beside its plan, to measure it.) */
#define CUDA_ALLOC_ROUNDING ((uint64_t)CUDA_ALIGN)
/* How long the planner's memory query may take (a child process starting a CUDA context). */
#define CUDA_QUERY_TIMEOUT_MS 60000

struct cuda_alloc {
	void *p;
	size_t bytes;
	const void *host; /* a weight's host bytes (weight_init), else NULL */
	int refs;
};

struct cuda_ctx {
	int device;
	cudaStream_t stream;
	char err[384];
	uint8_t *act; /* converted activations (matmul) */
	size_t act_cap;
	float *probs; /* attention probabilities */
	size_t probs_cap;
	struct lm_tok_loc *dloc; /* the last token places copied to the device */
	size_t dloc_cap;
	struct lm_tok_loc *hloc; /* host copy of what dloc holds, hloc_n of them */
	int hloc_n;
	int32_t *dids;
	size_t dids_cap;
	uint16_t *gelu; /* the CPU reference's f16 GELU table, on the device */
	struct cuda_alloc *allocs;
	size_t n_allocs, allocs_cap;
	uint64_t allocated; /* bytes of allocs */
};

static const struct lm_backend_i cuda_iface;

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */

__attribute__((format(printf, 3, 4))) static int cuda_fail(struct cuda_ctx *c, cudaError_t e,
							   const char *fmt, ...)
{
	char what[192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	snprintf(c->err, sizeof c->err, "%s: %s (%s)", what, cudaGetErrorString(e),
		 cudaGetErrorName(e));
	return e == cudaErrorMemoryAllocation ? LM_ENOMEM : LM_EDEVICE;
}

/* An error that is the caller's (a type or a range), with a message all the same. */
__attribute__((format(printf, 3, 4))) static int cuda_refuse(struct cuda_ctx *c, int rc,
							     const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
	return rc;
}

#define CUDA_TRY(c, call, ...)                                  \
	do {                                                    \
		cudaError_t e_ = (call);                        \
		if (e_ != cudaSuccess)                          \
			return cuda_fail((c), e_, __VA_ARGS__); \
	} while (0)

/* Every entry point: the backend's device current on this thread, the last message cleared. */
#define CUDA_ENTER(c)                                                                       \
	do {                                                                                \
		(c)->err[0] = '\0';                                                         \
		CUDA_TRY((c), cudaSetDevice((c)->device), "cudaSetDevice %d", (c)->device); \
	} while (0)

static const char *cuda_last_error(void *vctx)
{
	const struct cuda_ctx *c = vctx;
	return c->err[0] != '\0' ? c->err : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */

static size_t cuda_round(size_t b)
{
	return (b + CUDA_ALIGN - 1) / CUDA_ALIGN * CUDA_ALIGN;
}

static int cuda_record(struct cuda_ctx *c, void *p, size_t bytes, const void *host)
{
	if (c->n_allocs == c->allocs_cap) {
		size_t cap = c->allocs_cap ? 2 * c->allocs_cap : 64;
		struct cuda_alloc *a = realloc(c->allocs, cap * sizeof *a);
		if (a == NULL)
			return LM_ENOMEM;
		c->allocs = a;
		c->allocs_cap = cap;
	}
	c->allocs[c->n_allocs++] =
		(struct cuda_alloc){.p = p, .bytes = bytes, .host = host, .refs = 1};
	c->allocated += bytes;
	return 0;
}

static struct cuda_alloc *cuda_find(struct cuda_ctx *c, const void *p)
{
	for (size_t i = 0; i < c->n_allocs; i++)
		if (c->allocs[i].p == p)
			return &c->allocs[i];
	return NULL;
}

static void cuda_forget(struct cuda_ctx *c, struct cuda_alloc *a)
{
	c->allocated -= a->bytes;
	*a = c->allocs[--c->n_allocs];
}

/* Device memory of `bytes`, zero-filled and recorded, into *out; LM_ENOMEM or LM_EDEVICE (and
 * c->err) on failure. */
static int cuda_alloc_dev(struct cuda_ctx *c, size_t bytes, const void *host, void **out)
{
	const size_t n = cuda_round(bytes > 0 ? bytes : 1);
	void *p = NULL;
	*out = NULL;
	cudaError_t e = cudaMalloc(&p, n);
	if (e != cudaSuccess) {
		int rc = cuda_fail(c, e, "cudaMalloc of %zu bytes", n);
		cudaGetLastError(); /* an allocation failure is not sticky: clear it */
		return rc;
	}
	if ((e = cudaMemsetAsync(p, 0, n, c->stream)) != cudaSuccess) {
		int rc = cuda_fail(c, e, "cudaMemsetAsync of %zu bytes", n);
		cudaFree(p);
		return rc;
	}
	if (cuda_record(c, p, n, host) != 0) {
		cudaFree(p);
		return cuda_refuse(c, LM_ENOMEM, "out of host memory recording an allocation");
	}
	*out = p;
	return 0;
}

static void *cuda_malloc(void *vctx, size_t bytes)
{
	struct cuda_ctx *c = vctx;
	c->err[0] = '\0';
	if (cudaSetDevice(c->device) != cudaSuccess)
		return NULL;
	void *p;
	return cuda_alloc_dev(c, bytes, NULL, &p) == 0 ? p : NULL;
}

static void cuda_mfree(void *vctx, void *p)
{
	struct cuda_ctx *c = vctx;
	if (p == NULL)
		return;
	cudaSetDevice(c->device);
	struct cuda_alloc *a = cuda_find(c, p);
	if (a != NULL)
		cuda_forget(c, a);
	cudaFree(p);
}

static int cuda_upload(void *vctx, void *dst, const void *src, size_t n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	if (n == 0)
		return 0;
	CUDA_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream),
		 "upload of %zu bytes", n);
	CUDA_TRY(c, cudaStreamSynchronize(c->stream), "upload of %zu bytes", n);
	return 0;
}

static int cuda_download(void *vctx, void *dst, const void *src, size_t n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	if (n == 0)
		return 0;
	CUDA_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream),
		 "download of %zu bytes", n);
	CUDA_TRY(c, cudaStreamSynchronize(c->stream), "download of %zu bytes", n);
	return 0;
}

/* The weight's bytes on the device, once per host tensor. */
static int cuda_weight_init(void *vctx, struct lm_weight *w, const void *host)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	if (!lm_backend_cuda_weight_type_ok(w->type))
		return cuda_refuse(c, LM_EUNSUPPORTED, "weights of type %s",
				   lm_dtype_name(w->type));
	const size_t bytes = w->row_bytes * (size_t)w->ne1;
	for (size_t i = 0; i < c->n_allocs; i++)
		if (c->allocs[i].host == host && c->allocs[i].bytes >= bytes) {
			c->allocs[i].refs++;
			w->data = c->allocs[i].p;
			w->priv = NULL;
			return 0;
		}
	void *p;
	int rc = cuda_alloc_dev(c, bytes, host, &p);
	if (rc != 0)
		return rc;
	cudaError_t e = cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, c->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(c->stream);
	if (e != cudaSuccess) {
		rc = cuda_fail(c, e, "upload of a %zu-byte weight", bytes);
		cuda_forget(c, cuda_find(c, p));
		cudaFree(p);
		return rc;
	}
	w->data = p;
	w->priv = NULL;
	return 0;
}

static void cuda_weight_fini(void *vctx, struct lm_weight *w)
{
	struct cuda_ctx *c = vctx;
	if (w->data == NULL)
		return;
	cudaSetDevice(c->device);
	struct cuda_alloc *a = cuda_find(c, w->data);
	if (a != NULL && --a->refs > 0)
		return;
	if (a != NULL)
		cuda_forget(c, a);
	cudaFree((void *)w->data);
}

/* Grows a scratch buffer to at least `bytes` (contents are not kept). Freeing the old one waits
 * for the work that used it (cudaFree synchronises). */
static int cuda_grow(struct cuda_ctx *c, void **buf, size_t *cap, size_t bytes, const char *what)
{
	if (bytes <= *cap)
		return 0;
	const size_t want = cuda_round(bytes + bytes / 4);
	cudaFree(*buf);
	*buf = NULL;
	*cap = 0;
	CUDA_TRY(c, cudaMalloc(buf, want), "cudaMalloc of %zu bytes for %s scratch", want, what);
	*cap = want;
	return 0;
}

/* The token places on the device (dloc), copied only when they changed. */
static int cuda_put_loc(struct cuda_ctx *c, const struct lm_tok_loc *loc, int n)
{
	const size_t bytes = (size_t)n * sizeof *loc;
	if (n == c->hloc_n && c->hloc != NULL && memcmp(c->hloc, loc, bytes) == 0)
		return 0;
	c->hloc_n = 0;
	int rc = cuda_grow(c, (void **)&c->dloc, &c->dloc_cap, bytes, "token places");
	if (rc != 0)
		return rc;
	struct lm_tok_loc *h = realloc(c->hloc, bytes);
	if (h == NULL)
		return LM_ENOMEM;
	c->hloc = h;
	CUDA_TRY(c, cudaMemcpyAsync(c->dloc, loc, bytes, cudaMemcpyHostToDevice, c->stream),
		 "copy of %d token places", n);
	memcpy(c->hloc, loc, bytes);
	c->hloc_n = n;
	return 0;
}

static size_t cuda_scratch_held(void *vctx)
{
	const struct cuda_ctx *c = vctx;
	return c->act_cap + c->probs_cap + c->dloc_cap + c->dids_cap +
	       (c->gelu != NULL ? 65536 * sizeof(uint16_t) : 0);
}

static int cuda_mem_info(void *vctx, struct lm_backend_mem *m)
{
	struct cuda_ctx *c = vctx;
	memset(m, 0, sizeof *m);
	m->kind = "device";
	CUDA_ENTER(c);
	size_t free_b = 0, total_b = 0;
	CUDA_TRY(c, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	m->total = total_b;
	m->free = free_b;
	m->used = c->allocated + cuda_scratch_held(c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Ops                                                                                        */

static int cuda_get_rows(void *vctx, float *y, const struct lm_weight *table, const int32_t *ids,
			 int n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= table->ne1)
			return cuda_refuse(c, LM_ERANGE,
					   "get_rows: id %d of row %d is not in [0, %lld)", ids[i],
					   i, (long long)table->ne1);
	if (n <= 0)
		return 0;
	int rc = cuda_grow(c, (void **)&c->dids, &c->dids_cap, (size_t)n * sizeof *ids, "ids");
	if (rc != 0)
		return rc;
	CUDA_TRY(c,
		 cudaMemcpyAsync(c->dids, ids, (size_t)n * sizeof *ids, cudaMemcpyHostToDevice,
				 c->stream),
		 "copy of %d ids", n);
	CUDA_TRY(c, lmc_get_rows(c->stream, y, table, c->dids, n), "get_rows (%s)",
		 lm_dtype_name(table->type));
	return 0;
}

static int cuda_matmul(void *vctx, float *y, const struct lm_weight *w, const float *x, int n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	const enum lm_dtype vdt =
		(unsigned)w->type < LM_DTYPE_COUNT ? lmc_vec_dot_type(w->type) : LM_DTYPE_COUNT;
	if (vdt == LM_DTYPE_COUNT)
		return cuda_refuse(c, LM_EUNSUPPORTED, "matmul: weights of type %s",
				   lm_dtype_name(w->type));
	if (n <= 0)
		return n == 0 ? 0 : LM_EINVAL;
	uint64_t wbytes;
	if (lm_dtype_row_bytes(w->type, (uint64_t)w->ne0, &wbytes) < 0 || wbytes != w->row_bytes)
		return LM_EINVAL;
	struct lmc_act a;
	const size_t need = lmc_act_bytes(vdt, w->ne0, n);
	if (need > 0) {
		int rc = cuda_grow(c, (void **)&c->act, &c->act_cap, need, "activation");
		if (rc != 0)
			return rc;
	}
	lmc_act_carve(&a, vdt, c->act, x, w->ne0, n);
	CUDA_TRY(c, lmc_act_convert(c->stream, &a, x, n), "matmul: converting %d x %lld to %s", n,
		 (long long)w->ne0, lm_dtype_name(vdt));
	CUDA_TRY(c, lmc_matmul(c->stream, w, &a, y, n), "matmul %s %lld x %lld, %d tokens",
		 lm_dtype_name(w->type), (long long)w->ne0, (long long)w->ne1, n);
	return 0;
}

static int cuda_rmsnorm(void *vctx, float *y, const float *x, const float *w, int dim, int n,
			float eps)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	CUDA_TRY(c, lmc_rmsnorm(c->stream, y, x, w, dim, n, eps), "rmsnorm of %d x %d", n, dim);
	return 0;
}

static int cuda_rope(void *vctx, float *x, int n_heads, int head_dim, const struct lm_tok_loc *loc,
		     int n, const struct lm_rope_params *rp)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	if ((rp->mode != LM_ROPE_NORM && rp->mode != LM_ROPE_NEOX) || rp->n_rot < 0 ||
	    rp->n_rot % 2 != 0 || rp->n_rot > head_dim)
		return LM_EINVAL;
	if (rp->ext_factor != 0.0f && !lm_backend_cuda_feature_ok(LM_FEATURE_ROPE_YARN))
		return cuda_refuse(c, LM_EUNSUPPORTED, "rope: %s is not implemented on CUDA",
				   lm_backend_feature_name(LM_FEATURE_ROPE_YARN));
	if (n <= 0 || rp->n_rot == 0)
		return 0;
	int rc = cuda_put_loc(c, loc, n);
	if (rc != 0)
		return rc;
	/* As the CPU reference: the base's power on the host, in f32. */
	const float theta_scale = powf(rp->freq_base, -2.0f / (float)rp->n_rot);
	CUDA_TRY(c, lmc_rope(c->stream, x, n_heads, head_dim, c->dloc, n, rp, theta_scale),
		 "rope of %d tokens", n);
	return 0;
}

static int cuda_kv_store(void *vctx, const struct lm_kv_layer *kv, const float *k, const float *v,
			 const struct lm_tok_loc *loc, int n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	if (!lm_backend_cuda_kv_type_ok(kv->k_type) || !lm_backend_cuda_kv_type_ok(kv->v_type))
		return cuda_refuse(c, LM_EUNSUPPORTED, "kv_store: cache types %s/%s",
				   lm_dtype_name(kv->k_type), lm_dtype_name(kv->v_type));
	/* A block may not straddle two heads (the seam's contract). */
	if (kv->head_dim % (int32_t)lm_dtype_info(kv->k_type)->blck != 0 ||
	    kv->head_dim % (int32_t)lm_dtype_info(kv->v_type)->blck != 0)
		return cuda_refuse(
			c, LM_EUNSUPPORTED, "kv_store: %s/%s blocks do not tile head_dim %d",
			lm_dtype_name(kv->k_type), lm_dtype_name(kv->v_type), (int)kv->head_dim);
	for (int t = 0; t < n; t++)
		if (loc[t].slot < 0 || loc[t].slot >= kv->slots || loc[t].pos < 0)
			return LM_ERANGE;
	if (n <= 0)
		return 0;
	int rc = cuda_put_loc(c, loc, n);
	if (rc != 0)
		return rc;
	CUDA_TRY(c, lmc_kv_store(c->stream, kv, k, v, c->dloc, n), "kv_store of %d tokens", n);
	return 0;
}

static int cuda_attention(void *vctx, float *out, const float *q, const struct lm_kv_layer *kv,
			  const struct lm_tok_loc *loc, int n, int n_heads, float scale)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	int rc = cpu_attn_check_ranges(kv, loc, n, n_heads); /* the contract's, the CPU's code */
	if (rc != 0 || n == 0)
		return rc;
	if (kv->sinks != NULL && !lm_backend_cuda_feature_ok(LM_FEATURE_ATTN_SINKS))
		return cuda_refuse(c, LM_EUNSUPPORTED, "attention: %s are not implemented on CUDA",
				   lm_backend_feature_name(LM_FEATURE_ATTN_SINKS));
	if (!lm_backend_cuda_kv_type_ok(kv->k_type) || !lm_backend_cuda_kv_type_ok(kv->v_type) ||
	    kv->head_dim % (int32_t)lm_dtype_info(kv->k_type)->blck != 0 ||
	    kv->head_dim % (int32_t)lm_dtype_info(kv->v_type)->blck != 0)
		return cuda_refuse(c, LM_EUNSUPPORTED, "attention: cache types %s/%s",
				   lm_dtype_name(kv->k_type), lm_dtype_name(kv->v_type));
	if ((rc = cuda_put_loc(c, loc, n)) != 0)
		return rc;
	/* Chunks of tokens whose probabilities fit the cap: [nt][n_heads][lmax] floats. */
	for (int t0 = 0; t0 < n;) {
		int nt = 0, lmax = 0;
		while (t0 + nt < n) {
			const int32_t pos = loc[t0 + nt].pos;
			const int32_t lo = kv->window > 0 && pos - kv->window + 1 > 0
						   ? pos - kv->window + 1
						   : 0;
			const int len = pos - lo + 1, m = len > lmax ? len : lmax;
			if (nt > 0 &&
			    (size_t)(nt + 1) * (size_t)n_heads * (size_t)m * sizeof(float) >
				    CUDA_ATTN_SCRATCH_CAP)
				break;
			lmax = m;
			nt++;
		}
		const size_t bytes = (size_t)nt * (size_t)n_heads * (size_t)lmax * sizeof(float);
		if ((rc = cuda_grow(c, (void **)&c->probs, &c->probs_cap, bytes, "attention")) != 0)
			return rc;
		CUDA_TRY(c,
			 lmc_attention(c->stream, out, q, kv, c->dloc, t0, nt, n_heads, scale,
				       c->probs, lmax),
			 "attention (%s/%s cache) over %d positions", lm_dtype_name(kv->k_type),
			 lm_dtype_name(kv->v_type), lmax);
		t0 += nt;
	}
	return 0;
}

#define CUDA_EW(fn, what, ...)                                                   \
	do {                                                                     \
		struct cuda_ctx *c = vctx;                                       \
		CUDA_ENTER(c);                                                   \
		CUDA_TRY(c, fn(c->stream, __VA_ARGS__), "%s of %zu", what, len); \
		return 0;                                                        \
	} while (0)

static int cuda_silu_mul(void *vctx, float *y, const float *gate, const float *up, size_t len)
{
	CUDA_EW(lmc_silu_mul, "silu_mul", y, gate, up, len);
}

static int cuda_swiglu_oai(void *vctx, float *y, const float *gate, const float *up, size_t len,
			   float alpha, float limit)
{
	CUDA_EW(lmc_swiglu_oai, "swiglu_oai", y, gate, up, len, alpha, limit);
}

static int cuda_gelu_mul(void *vctx, float *y, const float *gate, const float *up, size_t len)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	CUDA_TRY(c, lmc_gelu_mul(c->stream, y, gate, up, len, c->gelu), "gelu_mul of %zu", len);
	return 0;
}

static int cuda_add(void *vctx, float *y, const float *a, size_t len)
{
	CUDA_EW(lmc_add, "add", y, a, len);
}

static int cuda_add_rows(void *vctx, float *y, const float *b, int width, int n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	CUDA_TRY(c, lmc_add_rows(c->stream, y, b, width, n), "add_rows of %d x %d", n, width);
	return 0;
}

static int cuda_mul_rows(void *vctx, float *y, const float *b, int width, int n)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	CUDA_TRY(c, lmc_mul_rows(c->stream, y, b, width, n), "mul_rows of %d x %d", n, width);
	return 0;
}

static int cuda_scale(void *vctx, float *y, float s, size_t len)
{
	CUDA_EW(lmc_scale, "scale", y, s, len);
}

static int cuda_copy(void *vctx, float *y, const float *x, size_t len)
{
	CUDA_EW(lmc_copy, "copy", y, x, len);
}

static int cuda_sync(void *vctx)
{
	struct cuda_ctx *c = vctx;
	CUDA_ENTER(c);
	CUDA_TRY(c, cudaStreamSynchronize(c->stream), "the device's ops");
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Construction                                                                               */

static void cuda_fini(void *vctx)
{
	struct cuda_ctx *c = vctx;
	if (c == NULL)
		return;
	cudaSetDevice(c->device);
	if (c->stream != NULL)
		cudaStreamSynchronize(c->stream);
	cudaFree(c->act);
	cudaFree(c->probs);
	cudaFree(c->dloc);
	cudaFree(c->dids);
	cudaFree(c->gelu);
	for (size_t i = 0; i < c->n_allocs; i++) /* what the caller left: freed all the same */
		cudaFree(c->allocs[i].p);
	if (c->stream != NULL)
		cudaStreamDestroy(c->stream);
	free(c->allocs);
	free(c->hloc);
	free(c);
}

static const struct lm_backend_i cuda_iface = {
	.version = LM_BACKEND_VERSION,
	.name = "cuda",
	.fini = cuda_fini,
	.malloc = cuda_malloc,
	.mfree = cuda_mfree,
	.upload = cuda_upload,
	.download = cuda_download,
	.weight_init = cuda_weight_init,
	.weight_fini = cuda_weight_fini,
	.get_rows = cuda_get_rows,
	.matmul = cuda_matmul,
	.rmsnorm = cuda_rmsnorm,
	.rope = cuda_rope,
	.kv_store = cuda_kv_store,
	.attention = cuda_attention,
	.silu_mul = cuda_silu_mul,
	.gelu_mul = cuda_gelu_mul,
	.add = cuda_add,
	.add_rows = cuda_add_rows,
	.mul_rows = cuda_mul_rows,
	.scale = cuda_scale,
	.copy = cuda_copy,
	.sync = cuda_sync,
	.scratch_held = cuda_scratch_held,
	.mem_info = cuda_mem_info,
	.last_error = cuda_last_error,
	.swiglu_oai = LMC_HAS_SWIGLU_OAI ? cuda_swiglu_oai : NULL,
};

/* The device to use, or why there is none. */
static int cuda_pick_device(int dev, lm_diag *d)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess)
		return lm_fail(d, LM_EUNAVAILABLE, "no CUDA device: %s (%s)", cudaGetErrorString(e),
			       cudaGetErrorName(e));
	if (count == 0)
		return lm_fail(d, LM_EUNAVAILABLE, "no CUDA device on this machine");
	if (dev < 0 || dev >= count)
		return lm_fail(d, LM_EUNAVAILABLE, "CUDA device %d: this machine has %d", dev,
			       count);
	struct cudaDeviceProp prop;
	if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
		return lm_fail(d, LM_EUNAVAILABLE, "CUDA device %d: %s", dev,
			       cudaGetErrorString(e));
	/* The kernels are built for sm_90 with compute_90 PTX, which runs on 9.0 and later. */
	if (prop.major < 9)
		return lm_fail(d, LM_EUNAVAILABLE,
			       "CUDA device %d (%s) is sm_%d%d; this build's kernels need sm_90 or "
			       "later",
			       dev, prop.name, prop.major, prop.minor);
	lm_debug("cuda backend: device %d, %s, sm_%d%d, %.1f GiB", dev, prop.name, prop.major,
		 prop.minor, (double)prop.totalGlobalMem / 1073741824.0);
	return 0;
}

int lm_backend_cuda_init(struct lm_backend *b, const struct lm_backend_opts *opts, lm_diag *d)
{
	b->iface = NULL;
	b->ctx = NULL;
	const int dev = opts != NULL ? opts->device : 0;
	int rc = cuda_pick_device(dev, d);
	if (rc != 0)
		return rc;
	struct cuda_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return lm_fail(d, LM_ENOMEM, "out of memory");
	c->device = dev;
	cudaError_t e = cudaSetDevice(dev);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&c->gelu, 65536 * sizeof(uint16_t));
	if (e == cudaSuccess)
		e = cudaMemcpy(c->gelu, cpu_gelu_table(), 65536 * sizeof(uint16_t),
			       cudaMemcpyHostToDevice);
	if (e != cudaSuccess) {
		rc = lm_fail(d, e == cudaErrorMemoryAllocation ? LM_ENOMEM : LM_EDEVICE,
			     "CUDA device %d: %s (%s)", dev, cudaGetErrorString(e),
			     cudaGetErrorName(e));
		cuda_fini(c);
		return rc;
	}
	b->iface = &cuda_iface;
	b->ctx = c;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* For the planner                                                                            */

static uint64_t cuda_grown(uint64_t bytes)
{
	return bytes == 0 ? 0 : cuda_round(bytes + bytes / 4);
}

uint64_t lm_backend_cuda_scratch_bound(const struct lm_backend_opts *opts,
				       const struct lm_scratch_shape *s)
{
	(void)opts;
	const uint64_t n = (uint64_t)s->max_batch;
	/* Converted activations: at most 2 bytes per element (f16/bf16; Q8_0 and Q8_K take
	 * 1 + 4/32 and 1 + 4/256 + 4/16), plus the three arrays' alignment. */
	const uint64_t act = n * (uint64_t)s->widest_in * 2 + 3 * CUDA_ALIGN;
	/* Attention probabilities: a batch's worth up to the cap, one token's at least. */
	const uint64_t one = (uint64_t)s->max_heads * (uint64_t)s->max_ctx * sizeof(float);
	uint64_t probs = n * one;
	if (probs > CUDA_ATTN_SCRATCH_CAP)
		probs = one > CUDA_ATTN_SCRATCH_CAP ? one : CUDA_ATTN_SCRATCH_CAP;
	const uint64_t idx = n * (sizeof(struct lm_tok_loc) + sizeof(int32_t));
	return cuda_grown(act) + cuda_grown(probs) + 2 * cuda_grown(idx) +
	       65536 * sizeof(uint16_t) + (uint64_t)s->max_tensors * CUDA_ALLOC_ROUNDING;
}

struct cuda_query_reply {
	int rc;
	uint64_t free, total;
	char msg[256];
};

/* In the child: a context on the device, then its free memory. Never returns. */
static void cuda_query_child(int device, int fd)
{
	struct cuda_query_reply r = {0};
	size_t free_b = 0, total_b = 0;
	lm_diag d = {{0}};
	r.rc = cuda_pick_device(device, &d);
	if (r.rc == 0) {
		cudaError_t e = cudaSetDevice(device);
		if (e == cudaSuccess)
			e = cudaFree(NULL); /* creates the context, as a worker's would */
		if (e == cudaSuccess)
			e = cudaMemGetInfo(&free_b, &total_b);
		if (e != cudaSuccess) {
			r.rc = LM_EDEVICE;
			snprintf(d.msg, sizeof d.msg, "CUDA device %d: %s", device,
				 cudaGetErrorString(e));
		}
	}
	r.free = free_b;
	r.total = total_b;
	snprintf(r.msg, sizeof r.msg, "%.200s", d.msg);
	ssize_t w = write(fd, &r, sizeof r);
	_exit(w == (ssize_t)sizeof r ? 0 : 1);
}

int lm_backend_cuda_query_memory(int device, struct lm_backend_mem *m, lm_diag *d)
{
	memset(m, 0, sizeof *m);
	m->kind = "device";
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return lm_fail(d, lm_err_from_errno(errno), "pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(fds[0]);
		close(fds[1]);
		return lm_fail(d, lm_err_from_errno(err), "fork: %s", strerror(err));
	}
	if (pid == 0) {
		close(fds[0]);
		cuda_query_child(device, fds[1]);
	}
	close(fds[1]);
	struct cuda_query_reply r;
	size_t got = 0;
	struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
	while (got < sizeof r && poll(&pfd, 1, CUDA_QUERY_TIMEOUT_MS) > 0) {
		ssize_t k = read(fds[0], (char *)&r + got, sizeof r - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fds[0]);
	if (got < sizeof r)
		kill(pid, SIGKILL);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (got < sizeof r)
		return lm_fail(d, LM_EDEVICE,
			       "CUDA device %d: the memory query gave no answer within %d s",
			       device, CUDA_QUERY_TIMEOUT_MS / 1000);
	if (r.rc != 0)
		return lm_fail(d, r.rc, "%s", r.msg);
	m->total = r.total;
	m->free = r.free;
	return 0;
}

/* cpu_backend.c — the CPU backend object: the lm_backend_i table over the kernels of
 * kernels/cpu, a persistent thread pool, and per-backend scratch.
 *
 * Backend memory is host memory. Weights are used in place (the GGUF bytes); where the kernel
 * set has panel matmuls for a quantized type (the AVX-512 set), weight_init rearranges the
 * bytes in place into panels (panel.c), and every matmul of that weight, one token or many,
 * takes the panel kernel. Matmul
 * converts the batch's activations to the weight type's vec_dot type into scratch that grows
 * only when a larger batch than any before arrives, then splits the weight rows across the pool
 * in chunks taken from an atomic counter, so every weight row is read once per batch by one
 * thread. Each output element is computed by exactly one thread with the same kernel, so results
 * do not depend on the thread count. A batch of several tokens goes to the kernel set's GEMM
 * when it has one for the weight type (struct cpu_gemm_ops): its own activation layout, and a
 * per-thread scratch panel for the strip of weight rows it works on, both grown like the rest.
 */
#include "kernels/cpu/cpu_backend.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>
#ifdef LM_CPU_AMX
#include <sys/syscall.h>
#define CPU_ARCH_REQ_XCOMP_PERM 0x1023 /* linux/arch/x86/include/uapi/asm/prctl.h */
#define CPU_XFEATURE_XTILEDATA  18
#endif

#include "common/base/err.h"
#include "common/base/log.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* Below this many weight elements times tokens a matmul runs on the caller alone: waking the
 * pool costs more than it saves. */
#define CPU_MM_MIN_PARALLEL (64 * 1024)
/* Converting activations is split across threads from this many tokens on. */
#define CPU_CONV_MIN_PARALLEL 8
/* Row chunks handed out per thread (more chunks balance better when a core is shared). */
#define CPU_MM_CHUNKS_PER_THREAD 4
#define CPU_ALIGN                64

struct cpu_ctx {
	struct cpu_pool pool;
	struct cpu_kernels k;
	uint8_t *act; /* activations converted for matmul: [n][vec_dot row bytes] */
	size_t act_cap;
	uint8_t *attn; /* attention scratch: [n_threads][stride] */
	size_t attn_cap;
	uint8_t *gemm; /* GEMM weight panels: [n_threads][stride] */
	size_t gemm_cap;
	float *ones; /* [ones_n] 1.0f: the weight of an unweighted rmsnorm */
	size_t ones_n;
	/* Bytes of the buffers malloc returned and mfree has not taken back (their usable
	 * sizes): what mem_info reports as used besides the scratch. */
	_Atomic uint64_t allocated;
};

static const struct lm_backend_i cpu_iface;

static size_t cpu_round(size_t b)
{
	return (b + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
}

/* Grows *buf to at least `bytes` (contents are not kept). */
static int cpu_grow(uint8_t **buf, size_t *cap, size_t bytes)
{
	if (bytes <= *cap)
		return 0;
	size_t want = cpu_round(bytes + bytes / 4);
	uint8_t *p = aligned_alloc(CPU_ALIGN, want);
	if (p == NULL)
		return LM_ENOMEM;
	free(*buf);
	*buf = p;
	*cap = want;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */

static void cpu_fini(void *vctx)
{
	struct cpu_ctx *c = vctx;
	if (c == NULL)
		return;
	cpu_pool_fini(&c->pool);
	free(c->act);
	free(c->attn);
	free(c->gemm);
	free(c->ones);
	free(c);
}

static size_t cpu_scratch_held(void *vctx)
{
	const struct cpu_ctx *c = vctx;
	return c->act_cap + c->attn_cap + c->gemm_cap + c->ones_n * sizeof(float);
}

static void *cpu_malloc(void *vctx, size_t bytes)
{
	struct cpu_ctx *c = vctx;
	size_t n = cpu_round(bytes > 0 ? bytes : 1);
	if (n < bytes)
		return NULL;
	void *p = aligned_alloc(CPU_ALIGN, n);
	if (p != NULL) {
		memset(p, 0, n);
		atomic_fetch_add(&c->allocated, malloc_usable_size(p));
	}
	return p;
}

static void cpu_mfree(void *vctx, void *p)
{
	struct cpu_ctx *c = vctx;
	if (p != NULL)
		atomic_fetch_sub(&c->allocated, malloc_usable_size(p));
	free(p);
}

/* The host's memory by sysinfo(2): its RAM, and free as the RAM neither used nor in buffers
 * (the page cache counts as used). Not /proc/meminfo: the systemd units give workers only their
 * own /proc entries (deploy/systemd, ProcSubset=pid). */
int lm_backend_cpu_query_memory(struct lm_backend_mem *m, lm_diag *d)
{
	memset(m, 0, sizeof *m);
	m->kind = "host";
	struct sysinfo si;
	if (sysinfo(&si) != 0)
		return lm_fail(d, lm_err_from_errno(errno), "sysinfo: %s", strerror(errno));
	const uint64_t unit = si.mem_unit > 0 ? si.mem_unit : 1;
	m->total = (uint64_t)si.totalram * unit;
	m->free = ((uint64_t)si.freeram + (uint64_t)si.bufferram) * unit;
	return 0;
}

static int cpu_mem_info(void *vctx, struct lm_backend_mem *m)
{
	struct cpu_ctx *c = vctx;
	int rc = lm_backend_cpu_query_memory(m, NULL);
	m->used = atomic_load(&c->allocated) + cpu_scratch_held(c);
	return rc;
}

static int cpu_copy(void *vctx, void *dst, const void *src, size_t n)
{
	(void)vctx;
	if (n > 0)
		memmove(dst, src, n);
	return 0;
}

/* Marks a weight whose bytes are panels (w->priv). */
static const char cpu_panel_tag[] = "panels";

static bool cpu_is_panel(const struct lm_weight *w)
{
	return w->priv == (const void *)cpu_panel_tag;
}

/* ------------------------------------------------------------------------------------------ */
/* Matmul                                                                                     */

struct cpu_conv_job {
	cpu_from_f32_fn conv;
	const float *x;
	uint8_t *dst;
	int64_t ne0;
	size_t stride;
	int n;
};

static void cpu_conv_part(void *arg, int ith, int nth)
{
	const struct cpu_conv_job *j = arg;
	const int t0 = (int)((int64_t)j->n * ith / nth),
		  t1 = (int)((int64_t)j->n * (ith + 1) / nth);
	for (int t = t0; t < t1; t++)
		j->conv(j->x + (size_t)t * (size_t)j->ne0, j->dst + (size_t)t * j->stride, j->ne0);
}

struct cpu_mm_job {
	struct cpu_mm m;
	cpu_mm_fn mm;
	int64_t chunk;
	_Atomic int64_t next;
};

static void cpu_mm_part(void *arg, int ith, int nth)
{
	struct cpu_mm_job *j = arg;
	(void)ith;
	(void)nth;
	for (;;) {
		int64_t r0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
		if (r0 >= j->m.ne1)
			break;
		int64_t r1 = r0 + j->chunk < j->m.ne1 ? r0 + j->chunk : j->m.ne1;
		j->mm(&j->m, r0, r1);
	}
}

struct cpu_gact_job {
	cpu_gemm_act_fn act;
	const float *x;
	int64_t ne0;
	int n, group;
	void *dst;
};

/* Whole groups of tokens per thread, so no two threads write the same group. */
static void cpu_gact_part(void *arg, int ith, int nth)
{
	const struct cpu_gact_job *j = arg;
	const int ng = (j->n + j->group - 1) / j->group;
	const int g0 = (int)((int64_t)ng * ith / nth), g1 = (int)((int64_t)ng * (ith + 1) / nth);
	if (g0 == g1)
		return;
	const int t1 = g1 == ng ? j->n : g1 * j->group;
	j->act(j->x, j->ne0, j->n, g0 * j->group, t1, j->dst);
}

struct cpu_gemm_job {
	struct cpu_mm m;
	cpu_gemm_fn gemm;
	uint8_t *scratch; /* [nth][stride] */
	size_t stride;
	int64_t chunk;
	_Atomic int64_t next;
};

static void cpu_gemm_part(void *arg, int ith, int nth)
{
	struct cpu_gemm_job *j = arg;
	(void)nth;
	for (;;) {
		int64_t r0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
		if (r0 >= j->m.ne1)
			break;
		int64_t r1 = r0 + j->chunk < j->m.ne1 ? r0 + j->chunk : j->m.ne1;
		j->gemm(&j->m, r0, r1, j->scratch + (size_t)ith * j->stride);
	}
}

/* A batch through the kernel set's GEMM: the activations into its layout, then row strips
 * across the pool. */
static int cpu_matmul_gemm(struct cpu_ctx *c, const struct cpu_gemm_ops *g, float *y,
			   const struct lm_weight *w, const float *x, int n, int nth)
{
	int rc = cpu_grow(&c->act, &c->act_cap, g->act_bytes(w->ne0, n));
	if (rc < 0)
		return rc;
	const size_t stride = cpu_round(g->scratch_bytes(w->ne0));
	rc = cpu_grow(&c->gemm, &c->gemm_cap, stride * (size_t)nth);
	if (rc < 0)
		return rc;
	struct cpu_gact_job conv = {
		.act = g->act, .x = x, .ne0 = w->ne0, .n = n, .group = g->group, .dst = c->act};
	const int ng = (n + g->group - 1) / g->group;
	cpu_pool_run(&c->pool, cpu_gact_part, &conv, ng < nth ? ng : nth);

	struct cpu_gemm_job job = {
		.m =
			{
				.w = w->data,
				.row_bytes = w->row_bytes,
				.ne0 = w->ne0,
				.ne1 = w->ne1,
				.x = c->act,
				.y = y,
				.n = n,
			},
		.gemm = g->gemm,
		.scratch = c->gemm,
		.stride = stride,
	};
	if (nth == 1) {
		g->gemm(&job.m, 0, w->ne1, c->gemm);
		return 0;
	}
	const int64_t rows = g->rows;
	int64_t chunk = w->ne1 / ((int64_t)nth * CPU_MM_CHUNKS_PER_THREAD);
	chunk = (chunk + rows - 1) / rows * rows;
	job.chunk = chunk > rows ? chunk : rows;
	atomic_init(&job.next, 0);
	cpu_pool_run(&c->pool, cpu_gemm_part, &job, nth);
	return 0;
}

static int cpu_matmul(void *vctx, float *y, const struct lm_weight *w, const float *x, int n)
{
	struct cpu_ctx *c = vctx;
	if ((unsigned)w->type >= LM_DTYPE_COUNT || c->k.type[w->type].mm == NULL)
		return LM_EUNSUPPORTED;
	if (n <= 0)
		return n == 0 ? 0 : LM_EINVAL;
	const struct cpu_type_ops *ops = &c->k.type[w->type];
	uint64_t wbytes;
	if (lm_dtype_row_bytes(w->type, (uint64_t)w->ne0, &wbytes) < 0 || wbytes != w->row_bytes)
		return LM_EINVAL;
	const bool panel = cpu_is_panel(w);
	const struct cpu_gemm_ops *gops = &c->k.gemm[w->type];
	if (!panel && gops->gemm != NULL && n >= gops->min_n) {
		const int64_t gwork = w->ne0 * w->ne1 * n;
		return cpu_matmul_gemm(c, gops, y, w, x, n,
				       gwork < CPU_MM_MIN_PARALLEL ? 1 : c->pool.n_threads);
	}
	/* Activation rows start on cache lines: SIMD kernels load them aligned. */
	const size_t xbytes = cpu_round(ops->act_bytes(w->ne0));

	struct cpu_mm_job job = {
		.m =
			{
				.w = w->data,
				.row_bytes = w->row_bytes,
				.ne0 = w->ne0,
				.ne1 = w->ne1,
				.y = y,
				.n = n,
			},
		.mm = panel                       ? ops->pmm
		      : n == 1 && ops->mv != NULL ? ops->mv
						  : ops->mm,
	};
	const int64_t work = w->ne0 * w->ne1 * n;
	const int nth = work < CPU_MM_MIN_PARALLEL ? 1 : c->pool.n_threads;

	if (ops->to_act == NULL) {
		job.m.x = (const uint8_t *)x;
		job.m.x_stride = (size_t)w->ne0 * sizeof(float);
	} else {
		int rc = cpu_grow(&c->act, &c->act_cap, (size_t)n * xbytes);
		if (rc < 0)
			return rc;
		struct cpu_conv_job conv = {
			.conv = ops->to_act,
			.x = x,
			.dst = c->act,
			.ne0 = w->ne0,
			.stride = xbytes,
			.n = n,
		};
		cpu_pool_run(&c->pool, cpu_conv_part, &conv, n >= CPU_CONV_MIN_PARALLEL ? nth : 1);
		job.m.x = c->act;
		job.m.x_stride = xbytes;
	}

	if (nth == 1) {
		job.mm(&job.m, 0, w->ne1);
		return 0;
	}
	int64_t chunk = w->ne1 / ((int64_t)nth * CPU_MM_CHUNKS_PER_THREAD);
	chunk = (chunk + 15) / 16 * 16;
	job.chunk = chunk > 16 ? chunk : 16;
	atomic_init(&job.next, 0);
	cpu_pool_run(&c->pool, cpu_mm_part, &job, nth);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Attention                                                                                  */

struct cpu_attn_job {
	struct cpu_attn a;
	_Atomic int64_t next;
};

static void cpu_attn_part(void *arg, int ith, int nth)
{
	struct cpu_attn_job *j = arg;
	(void)nth;
	const int64_t items = (int64_t)j->a.n * j->a.kv->n_kv_heads;
	uint8_t *scratch = j->a.scratch + (size_t)ith * j->a.scratch_stride;
	for (;;) {
		int64_t i0 = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (i0 >= items)
			break;
		cpu_attn_items(&j->a, i0, i0 + 1, scratch);
	}
}

static int cpu_attention(void *vctx, float *out, const float *q, const struct lm_kv_layer *kv,
			 const struct lm_tok_loc *loc, int n, int n_heads, float scale)
{
	struct cpu_ctx *c = vctx;
	int rc = cpu_attn_check(&c->k, kv, loc, n, n_heads);
	if (rc < 0 || n == 0)
		return rc;
	const size_t stride = cpu_round(cpu_attn_scratch_bytes(&c->k, kv, n_heads));
	const int64_t items = (int64_t)n * kv->n_kv_heads;
	const int nth = items < c->pool.n_threads ? (int)items : c->pool.n_threads;
	rc = cpu_grow(&c->attn, &c->attn_cap, stride * (size_t)nth);
	if (rc < 0)
		return rc;
	struct cpu_attn_job job = {
		.a =
			{
				.k = &c->k,
				.out = out,
				.q = q,
				.kv = kv,
				.loc = loc,
				.n = n,
				.n_heads = n_heads,
				.scale = scale,
				.scratch = c->attn,
				.scratch_stride = stride,
			},
	};
	if (nth == 1) {
		cpu_attn_items(&job.a, 0, items, c->attn);
		return 0;
	}
	atomic_init(&job.next, 0);
	cpu_pool_run(&c->pool, cpu_attn_part, &job, nth);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The small ops                                                                              */

/* Quantized matrices of at least one whole group of rows become panels where the kernel set
 * reads them; everything else stays as it is. */
static int cpu_weight_init(void *vctx, struct lm_weight *w, const void *host)
{
	struct cpu_ctx *c = vctx;
	w->data = host;
	w->priv = NULL;
	if ((unsigned)w->type >= LM_DTYPE_COUNT || c->k.type[w->type].pmm == NULL ||
	    !cpu_panel_type(w->type) || w->ne1 < CPU_PANEL_ROWS)
		return 0;
	int rc = cpu_panel_repack(w, (uint8_t *)(uintptr_t)host);
	if (rc == 0)
		w->priv = (void *)(uintptr_t)cpu_panel_tag;
	return rc;
}

static void cpu_weight_fini(void *vctx, struct lm_weight *w)
{
	(void)vctx;
	(void)w; /* the bytes are the caller's; nothing was allocated */
}

static int cpu_op_get_rows(void *vctx, float *y, const struct lm_weight *table, const int32_t *ids,
			   int n)
{
	struct cpu_ctx *c = vctx;
	if (!cpu_is_panel(table))
		return cpu_get_rows(y, table, ids, n);
	int rc = cpu_grow(&c->act, &c->act_cap, table->row_bytes);
	if (rc < 0)
		return rc;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= table->ne1)
			return LM_ERANGE;
		cpu_panel_row(table, ids[i], c->act);
		rc = lm_dequantize_row(table->type, c->act, y + (size_t)i * (size_t)table->ne0,
				       table->ne0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int cpu_op_rmsnorm(void *vctx, float *y, const float *x, const float *w, int dim, int n,
			  float eps)
{
	struct cpu_ctx *c = vctx;
	if (w == NULL) { /* no weight: multiplying by 1 leaves x * scale exactly */
		if ((size_t)dim > c->ones_n) {
			float *o = realloc(c->ones, (size_t)dim * sizeof *o);
			if (o == NULL)
				return LM_ENOMEM;
			for (size_t i = 0; i < (size_t)dim; i++)
				o[i] = 1.0f;
			c->ones = o;
			c->ones_n = (size_t)dim;
		}
		w = c->ones;
	}
	for (int t = 0; t < n; t++)
		c->k.rmsnorm(y + (size_t)t * (size_t)dim, x + (size_t)t * (size_t)dim, w, dim, eps);
	return 0;
}

static int cpu_op_rope(void *vctx, float *x, int n_heads, int head_dim,
		       const struct lm_tok_loc *loc, int n, const struct lm_rope_params *rp)
{
	(void)vctx;
	if ((rp->mode != LM_ROPE_NORM && rp->mode != LM_ROPE_NEOX) || rp->n_rot < 0 ||
	    rp->n_rot % 2 != 0 || rp->n_rot > head_dim)
		return LM_EINVAL;
	cpu_rope(x, n_heads, head_dim, loc, n, rp);
	return 0;
}

static int cpu_op_kv_store(void *vctx, const struct lm_kv_layer *kv, const float *k, const float *v,
			   const struct lm_tok_loc *loc, int n)
{
	struct cpu_ctx *c = vctx;
	return cpu_attn_store(&c->k, kv, k, v, loc, n);
}

static int cpu_op_silu_mul(void *vctx, float *y, const float *gate, const float *up, size_t len)
{
	struct cpu_ctx *c = vctx;
	c->k.silu_mul(y, gate, up, len);
	return 0;
}

static int cpu_op_gelu_mul(void *vctx, float *y, const float *gate, const float *up, size_t len)
{
	struct cpu_ctx *c = vctx;
	c->k.gelu_mul(y, gate, up, len);
	return 0;
}

static int cpu_op_swiglu_oai(void *vctx, float *y, const float *gate, const float *up, size_t len,
			     float alpha, float limit)
{
	(void)vctx;
	cpu_swiglu_oai_generic(y, gate, up, len, alpha, limit);
	return 0;
}

static int cpu_op_add(void *vctx, float *y, const float *a, size_t len)
{
	struct cpu_ctx *c = vctx;
	c->k.add(y, a, len);
	return 0;
}

static int cpu_op_add_rows(void *vctx, float *y, const float *b, int width, int n)
{
	struct cpu_ctx *c = vctx;
	for (int t = 0; t < n; t++)
		c->k.add(y + (size_t)t * (size_t)width, b, (size_t)width);
	return 0;
}

static int cpu_op_mul_rows(void *vctx, float *y, const float *b, int width, int n)
{
	(void)vctx;
	for (int t = 0; t < n; t++) {
		float *r = y + (size_t)t * (size_t)width;
		for (int i = 0; i < width; i++)
			r[i] *= b[i];
	}
	return 0;
}

static int cpu_op_scale(void *vctx, float *y, float s, size_t len)
{
	(void)vctx;
	for (size_t i = 0; i < len; i++)
		y[i] *= s;
	return 0;
}

static int cpu_op_copy(void *vctx, float *y, const float *x, size_t len)
{
	(void)vctx;
	memcpy(y, x, len * sizeof(float));
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Construction                                                                               */

static const struct lm_backend_i cpu_iface = {
	.version = LM_BACKEND_VERSION,
	.name = "cpu",
	.fini = cpu_fini,
	.malloc = cpu_malloc,
	.scratch_held = cpu_scratch_held,
	.mfree = cpu_mfree,
	.upload = cpu_copy,
	.download = cpu_copy,
	.weight_init = cpu_weight_init,
	.weight_fini = cpu_weight_fini,
	.get_rows = cpu_op_get_rows,
	.matmul = cpu_matmul,
	.rmsnorm = cpu_op_rmsnorm,
	.rope = cpu_op_rope,
	.kv_store = cpu_op_kv_store,
	.attention = cpu_attention,
	.silu_mul = cpu_op_silu_mul,
	.gelu_mul = cpu_op_gelu_mul,
	.add = cpu_op_add,
	.add_rows = cpu_op_add_rows,
	.mul_rows = cpu_op_mul_rows,
	.scale = cpu_op_scale,
	.copy = cpu_op_copy,
	.sync = NULL,
	.mem_info = cpu_mem_info,
	.last_error = NULL,
	.swiglu_oai = cpu_op_swiglu_oai,
};

enum cpu_level {
	CPU_GENERIC = 0,
	CPU_AVX2 = 1,
	CPU_AVX512 = 2,
	CPU_AMX = 3,
};

#ifdef LM_CPU_AMX
/* AMX needs three things: the CPU's AMX-TILE and AMX-INT8 (CPUID.7.0:EDX bits 24, 25), the OS
 * saving the tile state (XCR0 bits 17 and 18), and on Linux this process's permission to use
 * it, which the kernel grants on request (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+) and
 * which then holds for every thread of the process. A refusal (an older kernel, a seccomp
 * policy, a signal stack too small for the state) leaves the avx512 set. */
static bool cpu_amx_usable(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
		return false;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
		return false;
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & (3u << 17)) != (3u << 17))
		return false;
	return syscall(SYS_arch_prctl, CPU_ARCH_REQ_XCOMP_PERM, CPU_XFEATURE_XTILEDATA) == 0;
}
#endif

/* The best kernel set both this build and the running CPU have (AMX included: callers cap it,
 * see lm_backend_opts.allow_amx). */
static enum cpu_level cpu_best_level(void)
{
	enum cpu_level best = CPU_GENERIC;
#if defined(LM_CPU_SIMD) && (defined(__x86_64__) || defined(__i386__))
	__builtin_cpu_init();
	/* clang 14's __builtin_cpu_supports knows neither "f16c" nor "avx512vnni": their CPUID
	 * bits are read directly (leaf 1 ECX, leaf 7 ECX). The avx2 and avx512f checks of the
	 * builtin also cover the OS saving the AVX and AVX-512 state. */
	unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
	bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
		best = CPU_AVX2;
#ifdef LM_CPU_AVX512
		ecx = 0;
		bool vnni =
			__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & bit_AVX512VNNI);
		if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") && vnni)
			best = CPU_AVX512;
#endif
#ifdef LM_CPU_AMX
		if (best == CPU_AVX512 && cpu_amx_usable())
			best = CPU_AMX;
#endif
	}
#endif
	return best;
}

static void cpu_fill_kernels(struct cpu_kernels *k, enum cpu_level level)
{
	*k = cpu_kernels_generic;
	cpu_attn_generic_fill(k);
#ifdef LM_CPU_SIMD
	if (level >= CPU_AVX2) {
		cpu_kernels_avx2_fill(k);
		cpu_attn_avx2_fill(k);
	}
#endif
#ifdef LM_CPU_AVX512
	if (level >= CPU_AVX512)
		cpu_kernels_avx512_fill(k);
#endif
#ifdef LM_CPU_AMX
	if (level >= CPU_AMX)
		cpu_kernels_amx_fill(k);
#endif
	(void)level;
}

/* The kernel set the options choose on this CPU (before a --kernels name); LM_EUNSUPPORTED for
 * AMX where there is none. */
static int cpu_opts_level(const struct lm_backend_opts *opts, enum cpu_level best,
			  enum cpu_level *level)
{
	/* The default stops below AMX (see allow_amx): its GEMMs give the same bits as the avx512
	 * set, but nobody has yet measured them against the avx512 panels on an AMX CPU. */
	*level = best < CPU_AVX512 ? best : CPU_AVX512;
	if (opts != NULL && opts->allow_amx) {
		if (best < CPU_AMX)
			return LM_EUNSUPPORTED;
		*level = CPU_AMX;
	}
	if (opts != NULL && opts->force_scalar)
		*level = CPU_GENERIC;
	return 0;
}

static int cpu_opts_threads(const struct lm_backend_opts *opts)
{
	int n_threads = opts != NULL ? opts->n_threads : 0;
	if (n_threads <= 0) {
		long online = sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = online > 0 ? (int)online : 1;
	}
	return n_threads;
}

/* What cpu_grow allocates for a request of `bytes`. */
static uint64_t cpu_grown(uint64_t bytes)
{
	return bytes == 0 ? 0 : cpu_round(bytes + bytes / 4);
}

uint64_t lm_backend_cpu_scratch_bound(const struct lm_backend_opts *opts,
				      const struct lm_scratch_shape *s)
{
	enum cpu_level level;
	if (cpu_opts_level(opts, cpu_best_level(), &level) != 0)
		return 0;
	struct cpu_kernels k;
	cpu_fill_kernels(&k, level);
	const uint64_t nth = (uint64_t)cpu_opts_threads(opts), n = (uint64_t)s->max_batch;
	uint64_t act = 0, gemm = 0;
	/* Matmul: the activations of the widest input in any weight type's layout, one-token and
	 * batched paths, and the GEMM's per-thread weight panels. */
	for (int t = 0; t < LM_DTYPE_COUNT; t++) {
		const struct cpu_type_ops *ops = &k.type[t];
		if (ops->act_bytes != NULL && ops->to_act != NULL) {
			uint64_t b = n * cpu_round(ops->act_bytes(s->widest_in));
			act = b > act ? b : act;
		}
		const struct cpu_gemm_ops *g = &k.gemm[t];
		if (g->gemm != NULL) {
			uint64_t b = g->act_bytes(s->widest_in, s->max_batch);
			act = b > act ? b : act;
			uint64_t p = cpu_round(g->scratch_bytes(s->widest_in)) * nth;
			gemm = p > gemm ? p : gemm;
		}
	}
	/* Attention: scores over the longest context and q in K's layout, per thread, for the
	 * K type whose q layout is the widest (a stage's layers may have two K types). */
	uint64_t attn = 0;
	for (int t = 0; s->max_ctx > 0 && s->max_group > 0 && t < LM_DTYPE_COUNT; t++) {
		if (k.attn[t].scores == NULL)
			continue;
		struct lm_kv_layer kv = {.k_type = (enum lm_dtype)t,
					 .n_kv_heads = 1,
					 .head_dim = s->max_head_dim,
					 .ctx = s->max_ctx};
		uint64_t b = cpu_round(cpu_attn_scratch_bytes(&k, &kv, s->max_group)) * nth;
		attn = b > attn ? b : attn;
	}
	return cpu_grown(act) + cpu_grown(attn) + cpu_grown(gemm);
}

int lm_backend_cpu_init_kernels(struct lm_backend *b, const struct lm_backend_opts *opts,
				const char *kernels)
{
	b->iface = NULL;
	b->ctx = NULL;
	const enum cpu_level best = cpu_best_level();
	enum cpu_level level;
	if (cpu_opts_level(opts, best, &level) != 0)
		return LM_EUNSUPPORTED;
	else if (kernels != NULL && strcmp(kernels, "best") != 0) {
		if (strcmp(kernels, "generic") == 0 || strcmp(kernels, "scalar") == 0)
			level = CPU_GENERIC;
		else if (strcmp(kernels, "avx2") == 0)
			level = CPU_AVX2;
		else if (strcmp(kernels, "avx512") == 0)
			level = CPU_AVX512;
		else if (strcmp(kernels, "amx") == 0)
			level = CPU_AMX;
		else
			return LM_EINVAL;
		if (level > best)
			return LM_EUNSUPPORTED;
	}
	struct cpu_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return LM_ENOMEM;
	int n_threads = cpu_opts_threads(opts);
	cpu_fill_kernels(&c->k, level);
	int rc = cpu_pool_init(&c->pool, n_threads);
	if (rc < 0) {
		free(c);
		return rc;
	}
	lm_debug("cpu backend: %d threads, %s kernels", n_threads, c->k.name);
	b->iface = &cpu_iface;
	b->ctx = c;
	return 0;
}

int lm_backend_cpu_init(struct lm_backend *b, const struct lm_backend_opts *opts)
{
	return lm_backend_cpu_init_kernels(b, opts, NULL);
}

const char *lm_backend_cpu_kernels(const struct lm_backend *b)
{
	if (b == NULL || b->iface != &cpu_iface)
		return NULL;
	return ((const struct cpu_ctx *)b->ctx)->k.name;
}

int lm_backend_cpu_threads(const struct lm_backend *b)
{
	if (b == NULL || b->iface != &cpu_iface)
		return 0;
	return ((const struct cpu_ctx *)b->ctx)->pool.n_threads;
}

int lm_backend_cpu_gemm_min_n(const struct lm_backend *b, enum lm_dtype type)
{
	if (b == NULL || b->iface != &cpu_iface || (unsigned)type >= LM_DTYPE_COUNT)
		return 0;
	const struct cpu_gemm_ops *g = &((const struct cpu_ctx *)b->ctx)->k.gemm[type];
	return g->gemm != NULL ? g->min_n : 0;
}

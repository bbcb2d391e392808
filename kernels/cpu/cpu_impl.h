/* cpu_impl.h — internals shared by the files of the CPU backend (not a public interface).
 *
 * Every op has a scalar reference (`*_generic`, in kernels_generic.c) and may have SIMD variants
 * (kernels_avx2.c, kernels_avx512.c) compiled with their own -m flags. A struct cpu_kernels is
 * the table one backend instance dispatches through: the generic table, or a copy of it with the
 * entries the running CPU can accelerate overwritten at init (chosen with
 * __builtin_cpu_supports, so the binary itself runs on any x86-64).
 *
 * Matmul numerics follow GGUF's reference CPU implementation: activations are first converted to
 * the weight type's "vec_dot type" (f32 for F32, f16 for F16, bf16 for BF16, Q8_0 for Q8_0,
 * Q4_0 and MXFP4, Q8_K for Q4_K and Q6_K), then each output is an integer (or f32) dot product per block
 * scaled by d_w * d_x. The SIMD activation quantizers are bit-identical to the reference ones.
 *
 * The reference order. For the quantized types a block's integer sum is exact whatever computes
 * it; what can differ is the float work that follows. The generic kernels (kernels_generic.c)
 * take, per output, one accumulator and these steps block after block:
 *     Q8_0, MXFP4: sum + (float)sumi * (dw * dx)   Q4_0: sum + ((float)sumi * dw) * dx
 *     Q4_K: sum + ((dw * dx) * (float)sumi - (dmin * dx) * (float)summ)
 *     Q6_K: sum + (dw * dx) * (float)sumi
 * The avx512 set (its row kernels, kernels_avx512.c, and its panel matmul, panel_avx512.c), the
 * avx2 set's panel matmul (panel_avx2.c, with panel.c's reference loops for the rows after the
 * last whole group) and the amx set's GEMMs take exactly these steps, so on a bound weight their
 * outputs equal the generic kernels' bit for bit at every batch size: batch invariance by
 * construction, and a token gives the same bits whichever of these sets a worker's CPU has.
 * Their files are compiled with -ffp-contract=off. The avx2 set's row kernels (kernels_avx2.c:
 * weights never bound, fewer than 16 rows, a Q8_0 K cache) keep float lanes of their own; one
 * kernel serves every batch there, which keeps them batch invariant too.
 */
#ifndef LM_CPU_IMPL_H
#define LM_CPU_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/dtype.h"
#include "kernels/backend.h"
#include "common/format/quant.h"

/* One matmul as the kernels see it: y[t][r] = dot(W[r], X[t]) for rows r of a range. */
struct cpu_mm {
	const uint8_t *w; /* [ne1][row_bytes]: the weight rows */
	size_t row_bytes;
	int64_t ne0, ne1;
	const uint8_t *x; /* [n][x_stride]: activations in the weight type's vec_dot type */
	size_t x_stride;
	float *y; /* [n][ne1] */
	int n;
};

/* n elements of f32 to a row of some layout (n a multiple of its block). */
typedef void (*cpu_from_f32_fn)(const float *x, void *dst, int64_t n);
/* Bytes of one activation row of n elements in a kernel set's activation layout. */
typedef size_t (*cpu_act_bytes_fn)(int64_t n);
/* Dot product of one row of a weight type with one activation row (in the layout to_act
 * writes), n elements. */
typedef float (*cpu_vec_dot_fn)(int64_t n, const void *w, const void *x);
/* Rows [r0, r1) of a matmul, for all of its tokens. */
typedef void (*cpu_mm_fn)(const struct cpu_mm *m, int64_t r0, int64_t r1);
/* Attention over a run of cache rows, for the nq query heads that share one KV head (GQA):
 * out[h * out_stride + j] = dot(K_j, q_h) for h < nq, j < n, where K_j is hd elements of the K
 * type at k + j * stride and q_h (in the layout the type's q_conv writes) is at q + h * q_stride.
 * Each K row is read once for all nq heads. */
typedef void (*cpu_scores_fn)(int64_t hd, const uint8_t *k, size_t stride, int n, const uint8_t *q,
			      size_t q_stride, int nq, float *out, size_t out_stride);
/* acc[h * hd + i] += sum_j p[h * p_stride + j] * V_j[i] for h < nq, i < hd, V_j at v + j * stride
 * in the V type; each V row is read once for all nq heads. */
typedef void (*cpu_values_fn)(int64_t hd, const uint8_t *v, size_t stride, int n, const float *p,
			      size_t p_stride, int nq, float *acc);

/* What a kernel set does with one type. The activation side of a dot product is private to the
 * kernel set: the generic kernels use GGUF's layouts (f16, bf16, block_q8_0, block_q8_K), a SIMD
 * set may store the same values differently (f16-rounded values as f32, quants and scales in
 * separate arrays, block sums), as long as the values are those of the reference conversion. */
struct cpu_type_ops {
	cpu_act_bytes_fn act_bytes; /* activation row bytes; NULL: not a weight type */
	cpu_from_f32_fn to_act;     /* f32 -> activation layout; NULL: x is used as is (f32) */
	cpu_vec_dot_fn vec_dot;     /* one weight row . one activation row */
	cpu_mm_fn mm;               /* NULL: not a weight type of these kernels */
	/* Rows [r0, r1) of a one-token matmul (decode), where the weights stream from memory once
	 * and nothing is reused across tokens: a kernel that keeps more of the weight stream in
	 * flight. Its per-row results must equal mm's for n == 1 bit for bit. Optional: NULL
	 * means mm. */
	cpu_mm_fn mv;
	/* Rows [r0, r1) (r0 a multiple of CPU_PANEL_ROWS) of a matmul, any token count, whose
	 * weight is in the panel layout (panel.c: the backend rearranged it at weight_init): whole
	 * groups from their panels, the rows after the last whole group from their GGUF bytes.
	 * Results equal mm's bit for bit. NULL: the set keeps this type in the GGUF layout. */
	cpu_mm_fn pmm;
};

/* The multi-token path of one weight type (optional): a GEMM that keeps the whole batch's
 * activations in its own layout and multiplies a strip of weight rows by every token before it
 * moves on, so each weight byte is loaded once per batch and each loaded weight tile serves many
 * tokens. The backend uses it for batches of at least `min_n` tokens of a weight in the GGUF
 * layout; `mm` serves the others. Contract: every output is bit-identical to the generic
 * kernel's (the reference order above), as the set's mm must be too, so a token's result does
 * not depend on the batch it rides in. The amx set has these. */
typedef size_t (*cpu_gemm_act_bytes_fn)(int64_t ne0, int n);
/* Converts tokens [t0, t1) of x ([n][ne0] f32) into the batch layout at dst (act_bytes(ne0, n)
 * bytes). t0 and t1 are multiples of `group` (or t1 == n); the padding tokens of the last group
 * are written too (as zeros), by the call whose range ends at n. */
typedef void (*cpu_gemm_act_fn)(const float *x, int64_t ne0, int n, int t0, int t1, void *dst);
/* Per-thread scratch bytes for weights of ne0 elements per row. */
typedef size_t (*cpu_gemm_scratch_fn)(int64_t ne0);
/* Rows [r0, r1) (r0 a multiple of `rows`) for every token; m->x is the batch layout. */
typedef void (*cpu_gemm_fn)(const struct cpu_mm *m, int64_t r0, int64_t r1, void *scratch);

struct cpu_gemm_ops {
	cpu_gemm_act_bytes_fn act_bytes;
	cpu_gemm_act_fn act;
	cpu_gemm_scratch_fn scratch_bytes;
	cpu_gemm_fn gemm; /* NULL: no GEMM for this type */
	int group;        /* tokens per activation group */
	int rows;         /* weight rows per strip: row chunks are multiples of it */
	int min_n;        /* smallest batch the GEMM takes */
};

/* What the KV stores and attention do with one cache type. Attention reads the cache only
 * through these: q is converted into the K type's own dot layout (`q_conv`, private to the
 * kernel set, like the matmul's activations), scores read the K rows in place and values the V
 * rows, block by block, so no f32 copy of the cache is ever made. The matmul's layouts are not
 * used here, so the two families of kernels change independently. */
struct cpu_attn_ops {
	cpu_from_f32_fn store;    /* f32 row -> the cache's bytes (GGUF's block layout) */
	cpu_act_bytes_fn q_bytes; /* bytes of one head of q in the layout `scores` reads */
	cpu_from_f32_fn q_conv;   /* f32 -> that layout; NULL: scores read q as f32 */
	cpu_scores_fn scores;     /* NULL: not a cache type */
	cpu_values_fn values;
};

struct cpu_kernels {
	const char *name; /* "generic", "avx2", "avx512", "amx" */
	struct cpu_type_ops type[LM_DTYPE_COUNT];
	struct cpu_attn_ops attn[LM_DTYPE_COUNT]; /* the cache types: f32, f16, bf16, q8_0, q4_0,
					       * q5_1, fp8 */
	struct cpu_gemm_ops gemm[LM_DTYPE_COUNT]; /* zeroed: no multi-token path */
	/* y = x / sqrt(mean(x^2) + eps) * w over one row of dim. y may equal x. */
	void (*rmsnorm)(float *y, const float *x, const float *w, int dim, float eps);
	void (*silu_mul)(float *y, const float *g, const float *u, size_t len);
	/* y = gelu(g) * u as GGUF's reference evaluates it (f16 table, see kernels_generic.c). */
	void (*gelu_mul)(float *y, const float *g, const float *u, size_t len);
	/* s[j] = exp(s[j] - max) for j < n; returns their sum (the softmax denominator). */
	double (*softmax_exp)(float *s, int n, float max);
	void (*add)(float *y, const float *a, size_t len);
};

/* The scalar reference table (kernels_generic.c); its attn[] entries are filled by
 * cpu_attn_generic_fill (attention_generic.c), which every table starts from. */
extern const struct cpu_kernels cpu_kernels_generic;
void cpu_attn_generic_fill(struct cpu_kernels *k);
/* The AVX2 cache kernels (attention_avx2.c), over the generic ones; x86-64 builds only. */
void cpu_attn_avx2_fill(struct cpu_kernels *k);
/* n floats rounded to f16 and back, as f32 into dst (kernels_avx2.c; x86-64 builds only): the
 * F16 weights' activations and the F16 cache's q alike. */
void cpu_round_f16_avx2(const float *x, void *dst, int64_t n);
/* e4m3's 256 values as f32 (the reference decoding of LM_FP8_E4M3). */
const float *cpu_fp8_table(void);

/* The generic kernels by name, for tests and for SIMD files that fall back on a tail. */
float cpu_vec_dot_f32_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_f16_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_bf16_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_q8_0_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_q4_0_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_mxfp4_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_q4_K_generic(int64_t n, const void *w, const void *x);
float cpu_vec_dot_q6_K_generic(int64_t n, const void *w, const void *x);
void cpu_rmsnorm_generic(float *y, const float *x, const float *w, int dim, float eps);
void cpu_silu_mul_generic(float *y, const float *g, const float *u, size_t len);
void cpu_gelu_mul_generic(float *y, const float *g, const float *u, size_t len);
/* gpt-oss's clamped SwiGLU (backend.h's swiglu_oai), the one implementation of every set. */
void cpu_swiglu_oai_generic(float *y, const float *g, const float *u, size_t len, float alpha,
			    float limit);
/* GELU of every f16 value, as f16: the table GGUF's reference CPU implementation reads. */
const uint16_t *cpu_gelu_table(void);
double cpu_softmax_exp_generic(float *s, int n, float max);
void cpu_add_generic(float *y, const float *a, size_t len);

/* SIMD tables: each overwrites the entries it accelerates in *k (a copy of the generic table).
 * Built only on x86-64; the caller checks the CPU first. */
void cpu_kernels_avx2_fill(struct cpu_kernels *k);
void cpu_kernels_avx512_fill(struct cpu_kernels *k);
/* The panel matmuls of the AVX-512 set (panel_avx512.c), called by its fill, and the set's row
 * kernels they hand the rows after the last whole group to (kernels_avx512.c). */
void cpu_panel_avx512_fill(struct cpu_kernels *k);
void cpu_avx512_rows_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1);
void cpu_avx512_rows_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1);
void cpu_avx512_rows_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1);
void cpu_avx512_rows_q6_K(const struct cpu_mm *m, int64_t r0, int64_t r1);

/* --- panel.c: the panel layout of quantized weights (its comment says what it is) --- */
#define CPU_PANEL_ROWS 16
/* Q8_0, Q4_0, Q4_K and Q6_K have a panel layout. */
bool cpu_panel_type(enum lm_dtype t);
/* Rearranges w's whole groups of rows (bytes, w->ne1 rows of w->row_bytes) into panels, in
 * place. 0, LM_EINVAL for a type without panels, LM_ENOMEM. */
int cpu_panel_repack(const struct lm_weight *w, uint8_t *bytes);
/* Row r of a weight in the panel layout, back in the GGUF layout (row_bytes at out). */
void cpu_panel_row(const struct lm_weight *w, int64_t r, uint8_t *out);
/* Rows [r0, r1) in the reference order on the SIMD sets' activation layouts (Q8_0/Q4_0: act8,
 * Q4_K/Q6_K: gk; simd_x86.h), plain loops: the AVX2 set's rows after a panel weight's last
 * whole group. */
void cpu_ref_rows_q8_0(const struct cpu_mm *m, int64_t r0, int64_t r1);
void cpu_ref_rows_q4_0(const struct cpu_mm *m, int64_t r0, int64_t r1);
void cpu_ref_rows_q4_K(const struct cpu_mm *m, int64_t r0, int64_t r1);
void cpu_ref_rows_q6_K(const struct cpu_mm *m, int64_t r0, int64_t r1);
/* The panel matmuls of the AVX2 set (panel_avx2.c), called by its fill. */
void cpu_panel_avx2_fill(struct cpu_kernels *k);
/* The AVX2 set's MXFP4 matmul (mxfp4_avx2.c, -ffp-contract=off): a block's integer sum in
 * vectors, then the generic kernel's float step, so it equals the generic kernel bit for bit at
 * any batch. Takes the set's Q8_0 activations (act8), so it is called after they are set. */
void cpu_mxfp4_avx2_fill(struct cpu_kernels *k);
/* AMX (kernels_amx.c): the multi-token GEMMs on top of the avx512 set. The caller checks that
 * the CPU has AMX-INT8 and that the OS granted this process the tile state (cpu_backend.c). */
void cpu_kernels_amx_fill(struct cpu_kernels *k);

/* --- attention.c --- */

/* One attention call, split into n * n_kv_heads independent items: a token and one KV head with
 * the n_heads / n_kv_heads query heads that read it. */
struct cpu_attn {
	const struct cpu_kernels *k;
	float *out;
	const float *q;
	const struct lm_kv_layer *kv;
	const struct lm_tok_loc *loc;
	int n, n_heads;
	float scale;
	uint8_t *scratch; /* per thread: scratch_stride bytes */
	size_t scratch_stride;
};

/* Bytes of per-thread scratch an attention over kv needs (kv's types checked first). */
size_t cpu_attn_scratch_bytes(const struct cpu_kernels *k, const struct lm_kv_layer *kv,
			      int n_heads);
/* Whether k reads cache type t for heads of head_dim (its blocks tile a head). */
bool cpu_attn_type_ok(const struct cpu_kernels *k, enum lm_dtype t, int32_t head_dim);
/* Checks the batch against the cache (types, slots, positions, ring size); LM_ERANGE or
 * LM_EUNSUPPORTED on failure. */
int cpu_attn_check(const struct cpu_kernels *k, const struct lm_kv_layer *kv,
		   const struct lm_tok_loc *loc, int n, int n_heads);
/* The same without the types (LM_EINVAL, LM_ERANGE): for a backend with types of its own. */
int cpu_attn_check_ranges(const struct lm_kv_layer *kv, const struct lm_tok_loc *loc, int n,
			  int n_heads);
/* Items [i0, i1) of a, each item = token * n_kv_heads + KV head; `scratch` is this thread's. */
void cpu_attn_items(const struct cpu_attn *a, int64_t i0, int64_t i1, uint8_t *scratch);

/* --- ops.c: the small ops, run on the calling thread --- */
int cpu_get_rows(float *y, const struct lm_weight *table, const int32_t *ids, int n);
void cpu_rope(float *x, int n_heads, int head_dim, const struct lm_tok_loc *loc, int n,
	      const struct lm_rope_params *rp);
int cpu_attn_store(const struct cpu_kernels *k, const struct lm_kv_layer *kv, const float *kx,
		   const float *vx, const struct lm_tok_loc *loc, int n);

#endif

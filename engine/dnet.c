/* dnet.c — the gated delta-net, one token at a time. See dnet.h. */
#include "engine/dnet.h"

#include <math.h>
#include <string.h>

size_t lm_dnet_work_floats(const struct lm_ssm_params *p)
{
	return (size_t)lm_dnet_conv_dim(p) + (size_t)p->head_dim;
}

size_t lm_dnet_batch_floats(const struct lm_ssm_params *p)
{
	return (size_t)lm_dnet_conv_dim(p) + 2 * (size_t)lm_dnet_value_dim(p) +
	       2 * (size_t)p->n_v_heads;
}

size_t lm_dnet_host_floats(const struct lm_ssm_params *p, int32_t max_batch, int32_t q_dim)
{
	/* Per token: the delta-net's projections and output, or an attention layer's gates, its
	 * queries and gates, its attention output (q_dim holds queries and gates). */
	size_t per_token = lm_dnet_batch_floats(p);
	if (3 * (size_t)q_dim / 2 > per_token)
		per_token = 3 * (size_t)q_dim / 2;
	return (size_t)max_batch * per_token +
	       (size_t)lm_dnet_conv_dim(p) * (size_t)p->conv_kernel + 2 * (size_t)p->n_v_heads +
	       (size_t)p->head_dim + lm_dnet_work_floats(p);
}

static float dnet_silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* x / max(|x|, eps) over n values, the sum of squares in double as ggml's l2_norm. */
static void dnet_l2_norm(float *x, int32_t n, float eps)
{
	double sum = 0.0;
	for (int32_t i = 0; i < n; i++)
		sum += (double)(x[i] * x[i]);
	const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
	for (int32_t i = 0; i < n; i++)
		x[i] *= scale;
}

/* c = silu(conv1d([ring; qkv])), then the ring drops its oldest input for qkv. */
static void dnet_conv(const struct lm_ssm_params *p, const float *w, float *ring, const float *qkv,
		      float *c)
{
	const int32_t cd = lm_dnet_conv_dim(p), K = p->conv_kernel;
	for (int32_t ch = 0; ch < cd; ch++) {
		const float *wc = w + (size_t)ch * (size_t)K;
		float sum = 0.0f;
		for (int32_t j = 0; j < K - 1; j++)
			sum += ring[(size_t)j * (size_t)cd + (size_t)ch] * wc[j];
		sum += qkv[ch] * wc[K - 1];
		c[ch] = dnet_silu(sum);
	}
	memmove(ring, ring + cd, (size_t)(K - 2) * (size_t)cd * sizeof(float));
	memcpy(ring + (size_t)(K - 2) * (size_t)cd, qkv, (size_t)cd * sizeof(float));
}

/* s[r] = the sum over i of (double)(row r of m at j, times x[i]), in the order of i, for the
 * `nr` (at most 4) rows from row j of m (rows of S floats). ggml_vec_dot_f32's double sum, one
 * chain per row; the rows' chains are interleaved so that the adds of four rows overlap (a
 * chain alone waits on each add's latency), each row's order and so its bits unchanged. */
static void dnet_dots(int32_t S, const float *m, int32_t j, int32_t nr, const float *x, double *s)
{
	const float *r0 = m + (size_t)j * (size_t)S;
	if (nr == 4) {
		const float *r1 = r0 + S, *r2 = r1 + S, *r3 = r2 + S;
		double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
		for (int32_t i = 0; i < S; i++) {
			s0 += (double)(r0[i] * x[i]);
			s1 += (double)(r1[i] * x[i]);
			s2 += (double)(r2[i] * x[i]);
			s3 += (double)(r3[i] * x[i]);
		}
		s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
		return;
	}
	for (int32_t r = 0; r < nr; r++) {
		const float *row = r0 + (size_t)r * (size_t)S;
		double sum = 0.0;
		for (int32_t i = 0; i < S; i++)
			sum += (double)(row[i] * x[i]);
		s[r] = sum;
	}
}

/* x[i] *= f, and y[i] += x[i] * a, elementwise (no sums: every element's bits are the scalar
 * loop's), written in runs of 8 that the compiler's -O2 turns into vector code; a plain loop
 * over a run-time length stays scalar there. */
static void dnet_scale(float *restrict x, size_t n, float f)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (size_t u = 0; u < 8; u++)
			x[i + u] *= f;
	for (; i < n; i++)
		x[i] *= f;
}

static void dnet_axpy(float *restrict y, const float *restrict x, float a, int32_t n)
{
	int32_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int32_t u = 0; u < 8; u++)
			y[i + u] += x[i + u] * a;
	for (; i < n; i++)
		y[i] += x[i] * a;
}

/* One value head: the state m (M[j][i] = S[i][j]) decays, learns v from k, and is read by q. */
static void dnet_head(int32_t S, float *m, const float *q, const float *k, const float *v,
		      float beta, float g, float *o, float *delta)
{
	const float decay = expf(g), scale = 1.0f / sqrtf((float)S);
	double s[4];
	dnet_scale(m, (size_t)S * (size_t)S, decay);
	for (int32_t j = 0; j < S; j += 4) {
		const int32_t nr = S - j < 4 ? S - j : 4;
		dnet_dots(S, m, j, nr, k, s);
		for (int32_t r = 0; r < nr; r++)
			delta[j + r] = (v[j + r] - (float)s[r]) * beta;
	}
	for (int32_t j = 0; j < S; j++)
		dnet_axpy(m + (size_t)j * (size_t)S, k, delta[j], S);
	for (int32_t j = 0; j < S; j += 4) {
		const int32_t nr = S - j < 4 ? S - j : 4;
		dnet_dots(S, m, j, nr, q, s);
		for (int32_t r = 0; r < nr; r++)
			o[j + r] = (float)s[r] * scale;
	}
}

/* o = rmsnorm(o) x norm x silu(z) over one head of S values. */
static void dnet_gated_norm(int32_t S, float *o, const float *norm, const float *z, float eps)
{
	double sum = 0.0;
	for (int32_t i = 0; i < S; i++)
		sum += (double)(o[i] * o[i]);
	const float scale = 1.0f / sqrtf((float)(sum / S) + eps);
	for (int32_t i = 0; i < S; i++)
		o[i] = o[i] * scale * norm[i] * dnet_silu(z[i]);
}

void lm_dnet_token(const struct lm_ssm_params *p, const struct lm_dnet_weights *w, float eps,
		   float *ring, float *state, const float *qkv, const float *z, const float *b,
		   const float *a, float *out, float *work)
{
	const int32_t S = p->head_dim, nk = p->n_k_heads, nv = p->n_v_heads;
	float *c = work, *delta = work + lm_dnet_conv_dim(p);
	dnet_conv(p, w->conv, ring, qkv, c);
	float *q = c, *k = c + (size_t)nk * (size_t)S, *v = c + (size_t)2 * nk * S;
	for (int32_t h = 0; h < nk; h++) {
		dnet_l2_norm(q + (size_t)h * (size_t)S, S, eps);
		dnet_l2_norm(k + (size_t)h * (size_t)S, S, eps);
	}
	for (int32_t h = 0; h < nv; h++) {
		const float beta = 1.0f / (1.0f + expf(-b[h]));
		const float x = a[h] + w->dt_bias[h];
		const float g = (x > 20.0f ? x : logf(1.0f + expf(x))) * w->a[h];
		const size_t kh = (size_t)(h % nk) * (size_t)S;
		float *o = out + (size_t)h * (size_t)S;
		dnet_head(S, state + (size_t)h * (size_t)S * (size_t)S, q + kh, k + kh,
			  v + (size_t)h * (size_t)S, beta, g, o, delta);
		dnet_gated_norm(S, o, w->norm, z + (size_t)h * (size_t)S, eps);
	}
}

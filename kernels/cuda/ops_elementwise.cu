/* Element-wise and row-wise ops: rmsnorm, add_bias, add, swiglu, rope,
 * softmax, gather_rows, scale, softcap, geglu, add_rows_scaled.  The
 * per-element arithmetic comes from kernels/formats/elem_math.h, shared with
 * (and tested through) the CPU side. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/quant_x.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/formats/elem_math.h"

#define ROW_THREADS 256
#define RMS_THREADS 1024
#define EW_THREADS 256

/* ---- rmsnorm ---------------------------------------------------------- */

/* 1 / rms of this block's row of x (row: its first element), every thread
 * of the block getting it. */
static __device__ __forceinline__ float row_rms_inv(const float *x, size_t row, int dim,
						    float eps, float *sh)
{
	float ss = 0.0f;

	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = x[row + i];

		ss += v * v;
	}
	ss = block_sum(ss, sh);
	return exl_rms_inv(ss, dim, eps);
}

static __global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int dim,
				      float eps)
{
	__shared__ float sh[32];
	const size_t row = (size_t)blockIdx.x * (size_t)dim;
	const float inv = row_rms_inv(x, row, dim, eps, sh);

	/* Each thread rewrites only what it read: y may be x. */
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		y[row + i] = x[row + i] * inv * w[i];
}

/* rmsnorm_kernel that also quantizes its output for the decode matmul that
 * reads it next (the q/k/v, gate/up and logits matmuls all follow a norm):
 * a warp writes a whole part of 32 values at each step of the loop, since
 * blockDim and dim are multiples of 32. */
static __global__ void rmsnorm_q8_kernel(float *y, const float *x, const float *w, int dim,
					 float eps, int8_t *xq, float4 *xa)
{
	__shared__ float sh[32];
	const size_t row = (size_t)blockIdx.x * (size_t)dim;
	const float inv = row_rms_inv(x, row, dim, eps, sh);

	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		const float v = x[row + i] * inv * w[i];

		y[row + i] = v;
		quant_part_warp(v, threadIdx.x & 31, &xq[row + i], &xa[(row + i) >> 5]);
	}
}

void cu_op_rmsnorm(struct exl_backend *be, float *y, const float *x, const float *w, int n,
		   int dim, float eps)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb))
		return;
	if (n < 0 || dim <= 0) {
		cu_fail(cb, "rmsnorm: bad shape %d x %d", n, dim);
		return;
	}
	if (!n)
		return;
	/* A decode step normalizes one row: 1024 threads, so that each makes
	 * few loads one after the other. */
	if (n > GEMV_MAX_N || dim % 32) {
		cu_launch(cb, "rmsnorm", rmsnorm_kernel, n, RMS_THREADS, y, x, w, dim, eps);
		return;
	}
	/* Decode-sized: y quantized as quant_x would, and the xq scratch marked
	 * as holding it for the matmul that comes next (ops_matmul.cu). */
	const size_t q_bytes = cu_xq_bytes(n, dim);
	const size_t n_parts = (size_t)n * (size_t)(dim / 32);

	cb->xq_x = NULL;
	if (!cu_scratch(cb, &cb->xq, &cb->xq_cap, q_bytes + n_parts * sizeof(float4), "rmsnorm") ||
	    !cu_launch(cb, "rmsnorm", rmsnorm_q8_kernel, n, RMS_THREADS, y, x, w, dim, eps,
		       (int8_t *)cb->xq, (float4 *)((uint8_t *)cb->xq + q_bytes)))
		return;
	cb->xq_x = y;
	cb->xq_n = n;
	cb->xq_cols = dim;
	cb->xq_seq = cb->op_seq;
}

/* ---- layernorm -------------------------------------------------------- */

/* A block a row: the mean, then the variance about it (two passes over the
 * row, which is in cache: no cancellation of a one-pass sum of squares). */
static __global__ void layernorm_kernel(float *y, const float *x, const float *w, const float *b,
					int dim, float eps)
{
	__shared__ float sh[32];
	const size_t row = (size_t)blockIdx.x * (size_t)dim;
	float s = 0.0f;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		s += x[row + i];
	const float mean = block_sum(s, sh) / (float)dim;
	float v = 0.0f;

	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		const float d = x[row + i] - mean;

		v += d * d;
	}
	const float inv = rsqrtf(block_sum(v, sh) / (float)dim + eps);

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		y[row + i] = (x[row + i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
}

void cu_op_layernorm(struct exl_backend *be, float *y, const float *x, const float *w,
		     const float *b, int n, int dim, float eps)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb))
		return;
	if (n < 0 || dim <= 0 || !(eps >= 0.0f)) {
		cu_fail(cb, "layernorm: bad shape %d x %d or epsilon %g", n, dim, (double)eps);
		return;
	}
	if (n)
		cu_launch(cb, "layernorm", layernorm_kernel, n, RMS_THREADS, y, x, w, b, dim, eps);
}

/* ---- add_bias, add, swiglu -------------------------------------------- */

static __global__ void add_bias_kernel(float *y, const float *b, size_t count, int dim)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		y[k] += b[k % (size_t)dim];
}

void cu_op_add_bias(struct exl_backend *be, float *y, const float *b, int n, int dim)
{
	struct cuda_backend *cb = cuda_of(be);
	size_t count;

	if (!cu_enter(cb))
		return;
	if (n < 0 || dim <= 0) {
		cu_fail(cb, "add_bias: bad shape %d x %d", n, dim);
		return;
	}
	count = (size_t)n * (size_t)dim;
	if (!count)
		return;
	cu_launch(cb, "add_bias", add_bias_kernel, cu_grid(count, EW_THREADS), EW_THREADS, y, b,
			count, dim);
}

static __global__ void add_kernel(float *y, const float *x, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		y[k] += x[k];
}

void cu_op_add(struct exl_backend *be, float *y, const float *x, size_t count)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	cu_launch(cb, "add", add_kernel, cu_grid(count, EW_THREADS), EW_THREADS, y, x, count);
}

static __global__ void swiglu_kernel(float *g, const float *u, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		g[k] = exl_silu(g[k]) * u[k];
}

void cu_op_swiglu(struct exl_backend *be, float *g, const float *u, size_t count)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	cu_launch(cb, "swiglu", swiglu_kernel, cu_grid(count, EW_THREADS), EW_THREADS, g, u, count);
}

/* ---- rope ------------------------------------------------------------- */

/* The batch's angle table: cos and sin of pair i at token t's position, at
 * tab[t * (n_rot / 2) + i], one thread per entry.  exl_rope_cos_sin is the
 * CPU's own function (double, from the formula), and the table is built
 * once per batch, so the double arithmetic costs n_tokens * n_rot / 2
 * evaluations, not one per head and layer. */
static __global__ void rope_table_kernel(float2 *tab, const int32_t *pos, size_t n_entries,
					 int n_rot, float freq_base, float freq_scale,
					 const float *freq_factors, float attn_factor,
					 float ext_factor, float ramp_lo, float ramp_hi,
					 float temp_scale, int temp_floor)
{
	const int half = n_rot / 2;

	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n_entries;
	     k += (size_t)gridDim.x * blockDim.x) {
		const int i = (int)(k % (size_t)half);
		const int32_t p = pos[k / (size_t)half];
		float c, s;

		exl_rope_cos_sin_yarn(p, i, n_rot, freq_base, freq_scale,
				      freq_factors ? freq_factors[i] : 1.0f, ext_factor, ramp_lo,
				      ramp_hi, attn_factor * exl_rope_temp(p, temp_scale, temp_floor),
				      &c, &s);
		tab[k] = make_float2(c, s);
	}
}

/* One thread per rotated pair: (token t, head h, pair i). */
static __global__ void rope_kernel(float *x, const float2 *tab, size_t n_pairs, int n_heads,
				   int head_dim, int n_rot, bool neox)
{
	const int half = n_rot / 2;

	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n_pairs;
	     k += (size_t)gridDim.x * blockDim.x) {
		const int i = (int)(k % (size_t)half);
		const size_t th = k / (size_t)half; /* t * n_heads + h */
		const size_t t = th / (size_t)n_heads;
		const float2 cs = tab[t * (size_t)half + (size_t)i];
		float *head = x + th * (size_t)head_dim;
		int a, b;

		exl_rope_pair(i, n_rot, neox, &a, &b);
		exl_rope_rotate(head, a, b, cs.x, cs.y);
	}
}

static bool rope_table_matches(const struct cuda_rope_table *rt,
			       const struct exl_rope_params *p)
{
	return rt->valid && exl_rope_params_same(&rt->p, p);
}

/* The angle table for this batch and these parameters (q and k of every
 * layer share it): one of the two in place, or the older one rebuilt.
 * NULL with the backend failed. */
static const struct cuda_rope_table *rope_table(struct cuda_backend *cb, int n,
						const struct exl_rope_params *p)
{
	struct cuda_rope_table *rt = &cb->rope[0];
	size_t entries = (size_t)n * (size_t)(p->n_rot / 2);

	if (!rope_table_matches(rt, p) &&
	    (rope_table_matches(&cb->rope[1], p) || cb->rope[1].last_use < rt->last_use))
		rt = &cb->rope[1];
	rt->last_use = ++cb->rope_uses;
	if (rope_table_matches(rt, p))
		return rt;
	rt->valid = false;
	if (!cu_scratch(cb, &rt->tab, &rt->cap, entries * sizeof(float2), "rope"))
		return NULL;
	if (!cu_launch(cb, "rope: angle table", rope_table_kernel, cu_grid(entries, EW_THREADS),
			EW_THREADS, (float2 *)rt->tab, cb->batch.d_pos, entries, p->n_rot,
			p->freq_base, p->freq_scale, p->freq_factors, p->attn_factor,
			p->ext_factor, p->ramp_lo, p->ramp_hi, p->temp_scale, p->temp_floor))
		return NULL;
	rt->valid = true;
	rt->p = *p;
	return rt;
}

void cu_op_rope(struct exl_backend *be, float *x, int n, int n_heads, int head_dim,
		const struct exl_rope_params *p)
{
	struct cuda_backend *cb = cuda_of(be);
	const struct cuda_rope_table *rt;
	size_t n_pairs;

	if (!cu_enter(cb))
		return;
	if (n < 0 || n_heads <= 0 || head_dim <= 0 || !p || p->n_rot <= 0 || p->n_rot % 2 ||
	    p->n_rot > head_dim) {
		cu_fail(cb, "rope: bad shape (%d tokens, %d heads of %d, n_rot %d)", n, n_heads,
			head_dim, p ? p->n_rot : -1);
		return;
	}
	if (!(p->freq_base > 0.0f) || !isfinite(p->freq_base) || !(p->freq_scale > 0.0f) ||
	    !isfinite(p->freq_scale) || !(p->attn_factor > 0.0f) || !isfinite(p->attn_factor)) {
		cu_fail(cb, "rope: frequency base %g, scale %g and attention factor %g must be "
			"positive", (double)p->freq_base, (double)p->freq_scale,
			(double)p->attn_factor);
		return;
	}
	if (!(p->ext_factor >= 0.0f && p->ext_factor <= 1.0f) || !isfinite(p->ramp_lo) ||
	    !isfinite(p->ramp_hi)) {
		cu_fail(cb, "rope: YaRN weight %g (must be 0..1), ramp %g..%g",
			(double)p->ext_factor, (double)p->ramp_lo, (double)p->ramp_hi);
		return;
	}
	if (!isfinite(p->temp_scale) || (p->temp_scale != 0.0f && p->temp_floor < 1)) {
		cu_fail(cb, "rope: attention temperature %g over %d positions",
			(double)p->temp_scale, p->temp_floor);
		return;
	}
	if (!n)
		return;
	if (n != cb->batch.n_tokens) {
		cu_fail(cb, "rope: %d rows but the batch (set_batch) has %d tokens", n,
			cb->batch.n_tokens);
		return;
	}
	rt = rope_table(cb, n, p);
	if (!rt)
		return;
	n_pairs = (size_t)n * (size_t)n_heads * (size_t)(p->n_rot / 2);
	cu_launch(cb, "rope", rope_kernel, cu_grid(n_pairs, EW_THREADS), EW_THREADS, x,
			(const float2 *)rt->tab, n_pairs, n_heads, head_dim, p->n_rot, p->neox);
}

/* ---- softmax ---------------------------------------------------------- */

static __global__ void softmax_kernel(float *x, int dim)
{
	__shared__ float sh[32];
	float *row = x + (size_t)blockIdx.x * (size_t)dim;
	float m = -INFINITY;
	float sum = 0.0f;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		m = fmaxf(m, row[i]);
	m = block_max(m, sh);
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float e = exl_softmax_weight(row[i], m);

		row[i] = e;
		sum += e;
	}
	sum = block_sum(sum, sh);
	/* A row of nothing but -inf has no distribution: it stays all zero. */
	const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		row[i] *= inv;
}

void cu_op_softmax(struct exl_backend *be, float *x, int n, int dim)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb))
		return;
	if (n < 0 || dim <= 0) {
		cu_fail(cb, "softmax: bad shape %d x %d", n, dim);
		return;
	}
	if (!n)
		return;
	cu_launch(cb, "softmax", softmax_kernel, n, ROW_THREADS, x, dim);
}

/* ---- gather_rows ------------------------------------------------------ */

static __global__ void gather_rows_kernel(float *dst, const float *src, const int32_t *rows,
					  size_t count, int dim)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x) {
		const size_t i = k / (size_t)dim;
		const size_t j = k % (size_t)dim;

		dst[k] = src[(size_t)rows[i] * (size_t)dim + j];
	}
}

void cu_op_gather_rows(struct exl_backend *be, float *dst, const float *src,
		       const int32_t *rows, int n, int dim)
{
	struct cuda_backend *cb = cuda_of(be);
	const int32_t *d_rows;
	size_t count;

	if (!cu_enter(cb))
		return;
	if (n < 0 || dim <= 0 || (n && !rows)) {
		cu_fail(cb, "gather_rows: bad shape %d x %d", n, dim);
		return;
	}
	if (!n)
		return;
	for (int i = 0; i < n; i++) {
		if (rows[i] < 0) {
			cu_fail(cb, "gather_rows: row %d is %d", i, rows[i]);
			return;
		}
	}
	d_rows = (const int32_t *)cu_arena_put(cb, rows, (size_t)n * sizeof(int32_t),
					       "gather_rows");
	if (!d_rows)
		return;
	count = (size_t)n * (size_t)dim;
	cu_launch(cb, "gather_rows", gather_rows_kernel, cu_grid(count, EW_THREADS), EW_THREADS,
			dst, src, d_rows, count, dim);
}

/* ---- scale, softcap, geglu -------------------------------------------- */

static __global__ void scale_kernel(float *x, float s, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		x[k] *= s;
}

void cu_op_scale(struct exl_backend *be, float *x, float s, size_t count)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	if (!isfinite(s)) {
		cu_fail(cb, "scale: factor %g", (double)s);
		return;
	}
	cu_launch(cb, "scale", scale_kernel, cu_grid(count, EW_THREADS), EW_THREADS, x, s, count);
}

static __global__ void softcap_kernel(float *x, float cap, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		x[k] = exl_softcap(x[k], cap);
}

void cu_op_softcap(struct exl_backend *be, float *x, float cap, size_t count)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	if (!(cap > 0.0f) || !isfinite(cap)) {
		cu_fail(cb, "softcap: cap %g", (double)cap);
		return;
	}
	cu_launch(cb, "softcap", softcap_kernel, cu_grid(count, EW_THREADS), EW_THREADS, x, cap,
			count);
}

static __global__ void geglu_kernel(float *g, const float *u, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		g[k] = exl_gelu_tanh(g[k]) * u[k];
}

void cu_op_geglu(struct exl_backend *be, float *g, const float *u, size_t count)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	cu_launch(cb, "geglu", geglu_kernel, cu_grid(count, EW_THREADS), EW_THREADS, g, u, count);
}

static __global__ void gelu_kernel(float *x, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		x[k] = exl_gelu_tanh(x[k]);
}

void cu_op_gelu(struct exl_backend *be, float *x, size_t count)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	cu_launch(cb, "gelu", gelu_kernel, cu_grid(count, EW_THREADS), EW_THREADS, x, count);
}

static __global__ void swiglu_oai_kernel(float *g, const float *u, size_t count, float alpha,
					  float limit)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		g[k] = exl_swiglu_oai(g[k], u[k], alpha, limit);
}

void cu_op_swiglu_oai(struct exl_backend *be, float *g, const float *u, size_t count, float alpha,
		      float limit)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !count)
		return;
	if (!isfinite(alpha) || !isfinite(limit)) {
		cu_fail(cb, "swiglu_oai: alpha %g, limit %g", (double)alpha, (double)limit);
		return;
	}
	cu_launch(cb, "swiglu_oai", swiglu_oai_kernel, cu_grid(count, EW_THREADS), EW_THREADS, g,
		  u, count, alpha, limit);
}

/* ---- add_rows_scaled -------------------------------------------------- */

/* No row of y is named twice in one call, so no two threads add into the
 * same element. */
static __global__ void add_rows_scaled_kernel(float *y, const float *x, const int32_t *rows,
					      const float *w, size_t count, int dim)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x) {
		const size_t i = k / (size_t)dim;
		const size_t j = k % (size_t)dim;

		y[(size_t)rows[i] * (size_t)dim + j] += w[i] * x[k];
	}
}

void cu_op_add_rows_scaled(struct exl_backend *be, float *y, const float *x,
			   const int32_t *rows, const float *w, int n, int dim)
{
	struct cuda_backend *cb = cuda_of(be);
	const int32_t *d_rows;
	const float *d_w;
	size_t count, bytes;
	char *h, *d;

	if (!cu_enter(cb))
		return;
	if (n < 0 || dim <= 0 || (n && (!rows || !w))) {
		cu_fail(cb, "add_rows_scaled: bad shape %d x %d", n, dim);
		return;
	}
	if (!n)
		return;
	for (int i = 0; i < n; i++) {
		if (rows[i] < 0) {
			cu_fail(cb, "add_rows_scaled: row %d is %d", i, rows[i]);
			return;
		}
	}
	/* Rows and weights in one piece of the arena: a second put could
	 * start the arena over on top of the first. */
	bytes = (size_t)n * (sizeof(int32_t) + sizeof(float));
	h = (char *)cu_arena_host(cb, bytes, "add_rows_scaled");
	if (!h)
		return;
	memcpy(h, rows, (size_t)n * sizeof(int32_t));
	memcpy(h + (size_t)n * sizeof(int32_t), w, (size_t)n * sizeof(float));
	d = (char *)cb->arena.dev + (h - (char *)cb->arena.host);
	if (!cu_copy(cb, d, h, bytes, cudaMemcpyHostToDevice, "add_rows_scaled"))
		return;
	d_rows = (const int32_t *)d;
	d_w = (const float *)(d + (size_t)n * sizeof(int32_t));
	count = (size_t)n * (size_t)dim;
	cu_launch(cb, "add_rows_scaled", add_rows_scaled_kernel, cu_grid(count, EW_THREADS),
			EW_THREADS, y, x, d_rows, d_w, count, dim);
}

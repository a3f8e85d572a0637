/* Drivers of the row and element-wise ops: rmsnorm, add, add_bias, swiglu,
 * softmax, gather_rows, scale, softcap, geglu, add_rows_scaled.  Small ops (one decode token's vector) run on the
 * calling thread: waking the pool would cost more than the work. */
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/formats/elem_math.h"

/* Floats below which an op is not worth spreading over the pool. */
#define PAR_MIN_FLOATS 32768

static void run(struct exl_pool *pool, exl_pool_fn fn, void *ctx, size_t floats)
{
	if (pool && exl_pool_size(pool) > 1 && floats >= PAR_MIN_FLOATS)
		exl_pool_run(pool, fn, ctx);
	else
		fn(ctx, 0, 1);
}

/* Thread ith's slice of count floats, cut at 64-byte boundaries so no two
 * threads write the same cache line. */
static void split_floats(size_t count, int ith, int nth, size_t *b, size_t *e)
{
	size_t lines = (count + 15) / 16;

	exl_pool_split(lines, ith, nth, b, e);
	*b *= 16;
	*e *= 16;
	if (*b > count)
		*b = count;
	if (*e > count)
		*e = count;
}

/* ---- rmsnorm ---------------------------------------------------------- */

struct rmsnorm_job {
	const struct exl_cpu_ops *k;
	float *y;
	const float *x;
	const float *w;
	int n, dim;
	float eps;
};

static void rmsnorm_fn(void *ctx, int ith, int nth)
{
	const struct rmsnorm_job *j = ctx;
	const size_t dim = (size_t)j->dim;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++) {
		const float *x = j->x + i * dim;
		float inv = exl_rms_inv(j->k->sum_sq(x, j->dim), j->dim, j->eps);

		j->k->scale_mul(j->y + i * dim, x, j->w, inv, j->dim);
	}
}

void exl_cpu_rmsnorm(struct exl_pool *pool, const struct exl_cpu_ops *k, float *y,
		     const float *x, const float *w, int n, int dim, float eps)
{
	struct rmsnorm_job j = { k, y, x, w, n, dim, eps };

	run(pool, rmsnorm_fn, &j, (size_t)n * (size_t)dim);
}

/* ---- layernorm -------------------------------------------------------- */

struct layernorm_job {
	float *y;
	const float *x, *w, *b;
	int n, dim;
	float eps;
};

/* Mean and variance in double: a row's float sums would lose the small
 * variance of values far from zero. */
static void layernorm_fn(void *ctx, int ith, int nth)
{
	const struct layernorm_job *j = ctx;
	const size_t dim = (size_t)j->dim;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++) {
		const float *x = j->x + i * dim;
		float *y = j->y + i * dim;
		double sum = 0.0, sq = 0.0;

		for (size_t d = 0; d < dim; d++)
			sum += x[d];
		const double mean = sum / (double)dim;
		for (size_t d = 0; d < dim; d++)
			sq += ((double)x[d] - mean) * ((double)x[d] - mean);
		const float inv = (float)(1.0 / sqrt(sq / (double)dim + (double)j->eps));
		const float m = (float)mean;

		for (size_t d = 0; d < dim; d++)
			y[d] = (x[d] - m) * inv * j->w[d] + (j->b ? j->b[d] : 0.0f);
	}
}

void exl_cpu_layernorm(struct exl_pool *pool, float *y, const float *x, const float *w,
		       const float *b, int n, int dim, float eps)
{
	struct layernorm_job j = { y, x, w, b, n, dim, eps };

	run(pool, layernorm_fn, &j, (size_t)n * (size_t)dim * 2);
}

/* ---- add, swiglu ------------------------------------------------------ */

struct pair_job {
	const struct exl_cpu_ops *k;
	float *y;
	const float *x;
	size_t count;
};

static void add_fn(void *ctx, int ith, int nth)
{
	const struct pair_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	if (b < e)
		j->k->add(j->y + b, j->x + b, e - b);
}

void exl_cpu_add(struct exl_pool *pool, const struct exl_cpu_ops *k, float *y, const float *x,
		 size_t count)
{
	struct pair_job j = { k, y, x, count };

	run(pool, add_fn, &j, count);
}

static void swiglu_fn(void *ctx, int ith, int nth)
{
	const struct pair_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	if (b < e)
		j->k->swiglu(j->y + b, j->x + b, e - b);
}

void exl_cpu_swiglu(struct exl_pool *pool, const struct exl_cpu_ops *k, float *g,
		    const float *u, size_t count)
{
	struct pair_job j = { k, g, u, count };

	/* an exp and a division per element: worth threads sooner */
	run(pool, swiglu_fn, &j, count * 4);
}

/* ---- add_bias, softmax: per row --------------------------------------- */

struct rows_job {
	const struct exl_cpu_ops *k;
	float *y;
	const float *b;
	int n, dim;
};

static void add_bias_fn(void *ctx, int ith, int nth)
{
	const struct rows_job *j = ctx;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->k->add(j->y + i * (size_t)j->dim, j->b, (size_t)j->dim);
}

void exl_cpu_add_bias(struct exl_pool *pool, const struct exl_cpu_ops *k, float *y,
		      const float *b, int n, int dim)
{
	struct rows_job j = { k, y, b, n, dim };

	run(pool, add_bias_fn, &j, (size_t)n * (size_t)dim);
}

static void softmax_fn(void *ctx, int ith, int nth)
{
	const struct rows_job *j = ctx;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->k->softmax(j->y + i * (size_t)j->dim, j->dim);
}

void exl_cpu_softmax(struct exl_pool *pool, const struct exl_cpu_ops *k, float *x, int n,
		     int dim)
{
	struct rows_job j = { k, x, NULL, n, dim };

	run(pool, softmax_fn, &j, (size_t)n * (size_t)dim * 4);
}

/* ---- gather_rows ------------------------------------------------------ */

struct gather_job {
	float *dst;
	const float *src;
	const int32_t *rows;
	int n, dim;
};

static void gather_fn(void *ctx, int ith, int nth)
{
	const struct gather_job *j = ctx;
	const size_t dim = (size_t)j->dim;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		memmove(j->dst + i * dim, j->src + (size_t)j->rows[i] * dim, dim * sizeof(float));
}

void exl_cpu_gather_rows(struct exl_pool *pool, float *dst, const float *src,
			 const int32_t *rows, int n, int dim)
{
	struct gather_job j = { dst, src, rows, n, dim };

	run(pool, gather_fn, &j, (size_t)n * (size_t)dim);
}

/* ---- scale, softcap, geglu: plain loops ------------------------------- */

struct map_job {
	float *x;
	const float *u;
	float s;
	size_t count;
};

static void scale_fn(void *ctx, int ith, int nth)
{
	const struct map_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->x[i] *= j->s;
}

void exl_cpu_scale(struct exl_pool *pool, float *x, float s, size_t count)
{
	struct map_job j = { x, NULL, s, count };

	run(pool, scale_fn, &j, count);
}

static void softcap_fn(void *ctx, int ith, int nth)
{
	const struct map_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->x[i] = exl_softcap(j->x[i], j->s);
}

void exl_cpu_softcap(struct exl_pool *pool, float *x, float cap, size_t count)
{
	struct map_job j = { x, NULL, cap, count };

	/* a tanh per element */
	run(pool, softcap_fn, &j, count * 4);
}

static void geglu_fn(void *ctx, int ith, int nth)
{
	const struct map_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->x[i] = exl_gelu_tanh(j->x[i]) * j->u[i];
}

void exl_cpu_geglu(struct exl_pool *pool, float *g, const float *u, size_t count)
{
	struct map_job j = { g, u, 0.0f, count };

	run(pool, geglu_fn, &j, count * 4);
}

static void gelu_fn(void *ctx, int ith, int nth)
{
	const struct map_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->x[i] = exl_gelu_tanh(j->x[i]);
}

void exl_cpu_gelu(struct exl_pool *pool, float *x, size_t count)
{
	struct map_job j = { x, NULL, 0.0f, count };

	run(pool, gelu_fn, &j, count * 4);
}

struct oai_job {
	float *g;
	const float *u;
	size_t count;
	float alpha, limit;
};

static void swiglu_oai_fn(void *ctx, int ith, int nth)
{
	const struct oai_job *j = ctx;
	size_t b, e;

	split_floats(j->count, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		j->g[i] = exl_swiglu_oai(j->g[i], j->u[i], j->alpha, j->limit);
}

void exl_cpu_swiglu_oai(struct exl_pool *pool, float *g, const float *u, size_t count,
			float alpha, float limit)
{
	struct oai_job j = { g, u, count, alpha, limit };

	run(pool, swiglu_oai_fn, &j, count * 4);
}

/* ---- add_rows_scaled -------------------------------------------------- */

struct add_rows_job {
	float *y;
	const float *x;
	const int32_t *rows;
	const float *w;
	int n, dim;
};

/* Each row of y is written by the one i that names it (no row twice), so
 * the rows split over threads without locks. */
static void add_rows_fn(void *ctx, int ith, int nth)
{
	const struct add_rows_job *j = ctx;
	const size_t dim = (size_t)j->dim;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++) {
		float *y = j->y + (size_t)j->rows[i] * dim;
		const float *x = j->x + i * dim;
		const float w = j->w[i];

		for (size_t d = 0; d < dim; d++)
			y[d] += w * x[d];
	}
}

void exl_cpu_add_rows_scaled(struct exl_pool *pool, float *y, const float *x,
			     const int32_t *rows, const float *w, int n, int dim)
{
	struct add_rows_job j = { y, x, rows, w, n, dim };

	run(pool, add_rows_fn, &j, (size_t)n * (size_t)dim);
}

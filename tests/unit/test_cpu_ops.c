/* The CPU backend's row and element-wise ops (kernels/cpu/ops.h), in every
 * kernel variant this CPU runs, on the calling thread and on a pool of 3:
 *  - rmsnorm, swiglu, softmax against double-precision formulas, relative
 *    tolerance 1e-5 (rmsnorm, softmax) and 1e-6 (swiglu), with odd sizes
 *    (SIMD tails) and extreme inputs (softmax of -inf / huge values, silu
 *    of +-1000);
 *  - add, add_bias, gather_rows exactly;
 *  - rope, llama adjacent pairs and neox halves, full and partial n_rot,
 *    positions up to 500000, against theta = pos * scale * base^(-2i/n_rot)
 *    and the rotation in double: |error| <= 2e-6 * (|x_a| + |x_b|) per pair
 *    (llama.cpp's 1e-5 relative with margin); unrotated dims bit-exact;
 *  - swiglu of an element bit-identical wherever it falls in the call;
 *  - geglu (tanh GELU), softcap and scale against double formulas (4e-6,
 *    1e-6 relative, exact), add_rows_scaled exactly (one product and sum
 *    each);
 *  - F32 -> F16 bit-identical to elem.h's exl_fp32_to_fp16 (random bit
 *    patterns, NaN, inf, subnormals);
 *  - each SIMD variant against the scalar one: within 1e-6 relative (2e-6
 *    for rmsnorm and softmax, whose sums run in another order). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/formats/elem.h"
#include "tests/common/check.h"

#define EXL_TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "tests/common/rng.h"

static float *rnd_vec(size_t n, float scale)
{
	float *v = malloc(n * sizeof(float) + 1);

	if (!v) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	for (size_t i = 0; i < n; i++)
		v[i] = rnd_uniform() * scale;
	return v;
}

static float *dup_vec(const float *x, size_t n)
{
	float *v = malloc(n * sizeof(float) + 1);

	if (!v) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	memcpy(v, x, n * sizeof(float));
	return v;
}

/* Elements where |got - want| > rel * |want| + abs; prints the first. */
static int count_bad(const char *what, const float *got, const double *want, size_t n,
		     double rel, double abs_tol)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - want[i]);

		if (!(d <= rel * fabs(want[i]) + abs_tol) &&
		    !(isinf(want[i]) && got[i] == want[i])) {
			if (!bad)
				fprintf(stderr, "  %s[%zu]: got %.9g want %.9g\n", what, i,
					(double)got[i], want[i]);
			bad++;
		}
	}
	return bad;
}

static int count_bad_f(const char *what, const float *got, const float *want, size_t n,
		       double rel, double abs_tol)
{
	double *w = malloc(n * sizeof(double) + 1);
	int bad;

	if (!w)
		exit(2);
	for (size_t i = 0; i < n; i++)
		w[i] = want[i];
	bad = count_bad(what, got, w, n, rel, abs_tol);
	free(w);
	return bad;
}

struct ctx {
	const struct exl_cpu_ops *k;
	struct exl_pool *pool;
	const char *pname;
};

/* ---- rmsnorm ---------------------------------------------------------- */

static void test_rmsnorm(const struct ctx *c)
{
	static const int dims[] = { 1, 7, 8, 15, 16, 31, 33, 64, 100, 2048, 4099 };
	static const int ns[] = { 1, 3, 40 };

	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
			const int dim = dims[di], n = ns[ni];
			const size_t cnt = (size_t)n * (size_t)dim;
			const float eps = 1e-5f;
			float *x = rnd_vec(cnt, 3.0f), *w = rnd_vec((size_t)dim, 2.0f);
			float *y = rnd_vec(cnt, 1.0f), *ys = rnd_vec(cnt, 1.0f);
			double *ref = malloc(cnt * sizeof(double));

			if (!ref)
				exit(2);
			for (int i = 0; i < n; i++) {
				double ss = 0.0;

				for (int d = 0; d < dim; d++)
					ss += (double)x[i * dim + d] * x[i * dim + d];
				double inv = 1.0 / sqrt(ss / dim + eps);
				for (int d = 0; d < dim; d++)
					ref[i * dim + d] = x[i * dim + d] * inv * w[d];
			}
			exl_cpu_rmsnorm(c->pool, c->k, y, x, w, n, dim, eps);
			exl_cpu_rmsnorm(NULL, &exl_cpu_ops_scalar, ys, x, w, n, dim, eps);
			CHECK(count_bad("rmsnorm", y, ref, cnt, 1e-5, 1e-30) == 0,
			      "%s/%s: rmsnorm %d x %d", c->k->name, c->pname, n, dim);
			CHECK(count_bad_f("rmsnorm", y, ys, cnt, 2e-6, 1e-30) == 0,
			      "%s/%s: rmsnorm %d x %d vs scalar", c->k->name, c->pname, n, dim);
			/* in place */
			exl_cpu_rmsnorm(c->pool, c->k, x, x, w, n, dim, eps);
			CHECK(count_bad("rmsnorm", x, ref, cnt, 1e-5, 1e-30) == 0,
			      "%s/%s: rmsnorm in place %d x %d", c->k->name, c->pname, n, dim);
			free(x);
			free(w);
			free(y);
			free(ys);
			free(ref);
		}
	}
}

/* ---- add, add_bias, gather_rows: exact -------------------------------- */

static void test_add(const struct ctx *c)
{
	static const size_t counts[] = { 1, 5, 8, 17, 64, 1000, 100003 };

	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		const size_t n = counts[ci];
		float *y = rnd_vec(n, 10.0f), *x = rnd_vec(n, 10.0f);
		float *want = dup_vec(y, n);
		int bad = 0;

		for (size_t i = 0; i < n; i++)
			want[i] += x[i];
		exl_cpu_add(c->pool, c->k, y, x, n);
		for (size_t i = 0; i < n; i++)
			bad += y[i] != want[i];
		CHECK(bad == 0, "%s/%s: add of %zu: %d differ", c->k->name, c->pname, n, bad);
		free(y);
		free(x);
		free(want);
	}
	static const int shapes[][2] = { { 1, 1 }, { 3, 7 }, { 5, 64 }, { 64, 1000 }, { 9, 4099 } };
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const int n = shapes[si][0], dim = shapes[si][1];
		const size_t cnt = (size_t)n * (size_t)dim;
		float *y = rnd_vec(cnt, 4.0f), *b = rnd_vec((size_t)dim, 4.0f);
		float *want = dup_vec(y, cnt);
		int bad = 0;

		for (int i = 0; i < n; i++)
			for (int d = 0; d < dim; d++)
				want[(size_t)i * dim + d] += b[d];
		exl_cpu_add_bias(c->pool, c->k, y, b, n, dim);
		for (size_t i = 0; i < cnt; i++)
			bad += y[i] != want[i];
		CHECK(bad == 0, "%s/%s: add_bias %d x %d: %d differ", c->k->name, c->pname, n, dim,
		      bad);
		free(y);
		free(b);
		free(want);
	}
}

static void test_gather(const struct ctx *c)
{
	const int n_src = 50, dim = 300;
	float *src = rnd_vec((size_t)n_src * dim, 1.0f);
	int32_t rows[200];
	float *dst = rnd_vec(200 * (size_t)dim, 1.0f);

	for (int n = 1; n <= 200; n += 199) {
		int bad = 0;

		for (int i = 0; i < n; i++)
			rows[i] = (int32_t)(rnd_u32() % (uint32_t)n_src);
		exl_cpu_gather_rows(c->pool, dst, src, rows, n, dim);
		for (int i = 0; i < n; i++)
			bad += memcmp(dst + (size_t)i * dim, src + (size_t)rows[i] * dim,
				      (size_t)dim * sizeof(float)) != 0;
		CHECK(bad == 0, "%s/%s: gather_rows of %d: %d rows differ", c->k->name, c->pname,
		      n, bad);
	}
	free(src);
	free(dst);
}

/* ---- swiglu ----------------------------------------------------------- */

static void test_swiglu(const struct ctx *c)
{
	static const size_t counts[] = { 1, 7, 8, 9, 16, 33, 5632, 100003 };
	static const float extreme[] = { 0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f, 87.0f, -87.0f,
					 88.5f, -88.5f, 100.0f, -100.0f, 1000.0f, -1000.0f,
					 1e-20f, -1e-20f, 3.5f, -3.5f };

	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		const size_t n = counts[ci];
		float *g = rnd_vec(n, 8.0f), *u = rnd_vec(n, 3.0f);
		double *ref = malloc(n * sizeof(double));

		if (!ref)
			exit(2);
		for (size_t i = 0; i < n && ci < 6; i++)
			g[i] = extreme[i % (sizeof(extreme) / sizeof(extreme[0]))];
		float *gs = dup_vec(g, n);
		for (size_t i = 0; i < n; i++)
			ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
		exl_cpu_swiglu(c->pool, c->k, g, u, n);
		exl_cpu_swiglu(NULL, &exl_cpu_ops_scalar, gs, u, n);
		CHECK(count_bad("swiglu", g, ref, n, 1e-6, 1e-30) == 0, "%s/%s: swiglu of %zu",
		      c->k->name, c->pname, n);
		CHECK(count_bad_f("swiglu", g, gs, n, 1e-6, 1e-30) == 0,
		      "%s/%s: swiglu of %zu vs scalar", c->k->name, c->pname, n);
		free(g);
		free(gs);
		free(u);
		free(ref);
	}
}

/* ---- geglu, softcap, scale, add_rows_scaled (drivers of plain loops) -- */

static void test_gemma_ops(const struct ctx *c)
{
	static const size_t counts[] = { 1, 7, 33, 5632, 100003 };

	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		const size_t n = counts[ci];
		float *g = rnd_vec(n, 8.0f), *u = rnd_vec(n, 3.0f), *x = rnd_vec(n, 100.0f);
		float *y = dup_vec(x, n);
		double *ref = malloc(n * sizeof(double)), *ref2 = malloc(n * sizeof(double));

		if (!ref || !ref2)
			exit(2);
		g[0] = 1000.0f;
		if (n > 1)
			g[1] = -1000.0f;
		for (size_t i = 0; i < n; i++) {
			double v = g[i];

			/* 0.5 v (1 + tanh z) as v / (1 + exp(-2z)): in double too
			 * the first cancels for very negative v */
			ref[i] = v / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))) *
				 u[i];
			ref2[i] = 30.0 * tanh((double)x[i] / 30.0);
		}
		/* for negative x gelu is x / exp(a), a up to tens, whose float
		 * rounding (ulp(a), 1e-6 at a = 10) is the result's relative
		 * error: 4e-6 down to results of 1e-9, where a passes 20;
		 * smaller ones (inputs are of order 1 to 10) to an absolute
		 * bound */
		exl_cpu_geglu(c->pool, g, u, n);
		CHECK(count_bad("geglu", g, ref, n, 4e-6, 1e-9) == 0, "%s/%s: geglu of %zu",
		      c->k->name, c->pname, n);
		exl_cpu_softcap(c->pool, x, 30.0f, n);
		CHECK(count_bad("softcap", x, ref2, n, 1e-6, 1e-30) == 0, "%s/%s: softcap of %zu",
		      c->k->name, c->pname, n);
		for (size_t i = 0; i < n; i++)
			ref[i] = y[i] * 0.37f; /* a float product, as the op's */
		exl_cpu_scale(c->pool, y, 0.37f, n);
		CHECK(count_bad("scale", y, ref, n, 0.0, 0.0) == 0, "%s/%s: scale of %zu",
		      c->k->name, c->pname, n);
		free(g);
		free(u);
		free(x);
		free(y);
		free(ref);
		free(ref2);
	}

	/* 5 rows of 300 into a 9-row block: the rows named, and no other */
	enum { DIM = 300 };
	const int32_t rows[5] = { 8, 0, 3, 5, 1 };
	const float w[5] = { 0.25f, -1.5f, 0.7f, 1.0f, 0.0f };
	float *yy = rnd_vec(9 * DIM, 1.0f), *xx = rnd_vec(5 * DIM, 1.0f);
	float *want = dup_vec(yy, 9 * DIM);

	for (int i = 0; i < 5; i++)
		for (int d = 0; d < DIM; d++)
			want[rows[i] * DIM + d] += w[i] * xx[i * DIM + d];
	exl_cpu_add_rows_scaled(c->pool, yy, xx, rows, w, 5, DIM);
	CHECK(memcmp(yy, want, sizeof(float) * 9 * DIM) == 0, "%s/%s: add_rows_scaled",
	      c->k->name, c->pname);
	free(yy);
	free(xx);
	free(want);
}

/* An element's swiglu must not depend on where it falls in the call: the
 * model calls it once over a whole batch, so a token's activations would
 * otherwise change with the number of tokens beside it.  Every sub-range
 * (start 0..8, length 1..40) of one array gives the bits of the whole. */
static void test_swiglu_position(const struct ctx *c)
{
	enum { N = 48 };
	float *g = rnd_vec(N, 8.0f), *u = rnd_vec(N, 3.0f);
	float whole[N], part[N];
	int bad = 0;

	memcpy(whole, g, sizeof(whole));
	c->k->swiglu(whole, u, N);
	for (int b = 0; b <= 8; b++) {
		for (int len = 1; b + len <= 40; len++) {
			memcpy(part, g, sizeof(part));
			c->k->swiglu(part + b, u + b, (size_t)len);
			bad += memcmp(part + b, whole + b, (size_t)len * sizeof(float)) != 0;
		}
	}
	CHECK(bad == 0, "%s: swiglu: %d sub-ranges differ from the whole call", c->k->name, bad);
	free(g);
	free(u);
}

/* ---- softmax ---------------------------------------------------------- */

static void softmax_ref(const float *x, double *y, int n)
{
	double m = -INFINITY, sum = 0.0;

	for (int i = 0; i < n; i++)
		m = fmax(m, x[i]);
	for (int i = 0; i < n; i++) {
		y[i] = x[i] == -INFINITY ? 0.0 : exp((double)x[i] - m);
		sum += y[i];
	}
	for (int i = 0; i < n; i++)
		y[i] = sum > 0.0 ? y[i] / sum : 0.0;
}

static void test_softmax(const struct ctx *c)
{
	static const int dims[] = { 1, 2, 7, 8, 17, 32000, 4099 };
	static const int ns[] = { 1, 4, 9 };

	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
			const int dim = dims[di], n = ns[ni];
			const size_t cnt = (size_t)n * (size_t)dim;
			float *x = rnd_vec(cnt, 20.0f);
			double *ref = malloc(cnt * sizeof(double));

			if (!ref)
				exit(2);
			/* row 1: huge logits; row 2: -inf holes; row 3: all -inf */
			for (int d = 0; n > 1 && d < dim; d++)
				x[dim + d] = 1e4f + x[dim + d] * 100.0f;
			for (int d = 0; n > 2 && d < dim; d += 3)
				x[2 * dim + d] = -INFINITY;
			for (int d = 0; n > 3 && d < dim; d++)
				x[3 * dim + d] = -INFINITY;
			for (int i = 0; i < n; i++)
				softmax_ref(x + (size_t)i * dim, ref + (size_t)i * dim, dim);
			float *xs = dup_vec(x, cnt);
			exl_cpu_softmax(c->pool, c->k, x, n, dim);
			exl_cpu_softmax(NULL, &exl_cpu_ops_scalar, xs, n, dim);
			CHECK(count_bad("softmax", x, ref, cnt, 1e-5, 1e-12) == 0,
			      "%s/%s: softmax %d x %d", c->k->name, c->pname, n, dim);
			/* a row's sum of up to 32000 exponentials, in lanes or in
			 * order, moves every value of the row by the same ~1-2e-6 */
			CHECK(count_bad_f("softmax", x, xs, cnt, 4e-6, 1e-12) == 0,
			      "%s/%s: softmax %d x %d vs scalar", c->k->name, c->pname, n, dim);
			free(x);
			free(xs);
			free(ref);
		}
	}
}

/* ---- rope ------------------------------------------------------------- */

static void rope_ref(const float *x, double *y, int n_heads, int head_dim, int pos,
		     const struct exl_rope_params *p)
{
	const int h2 = p->n_rot / 2;

	for (int h = 0; h < n_heads; h++) {
		const float *xh = x + (size_t)h * head_dim;
		double *yh = y + (size_t)h * head_dim;

		for (int d = 0; d < head_dim; d++)
			yh[d] = xh[d];
		for (int i = 0; i < h2; i++) {
			double ext = (double)pos * pow((double)p->freq_base, -2.0 * i / p->n_rot);
			int a = p->neox ? i : 2 * i;
			int b = p->neox ? i + h2 : 2 * i + 1;
			double m = p->attn_factor;

			if (p->temp_scale != 0.0f)
				m *= 1.0 + p->temp_scale * log(floor((double)pos / p->temp_floor) + 1.0);

			if (p->freq_factors)
				ext /= p->freq_factors[i];
			/* YaRN: the unscaled angle below the ramp, the scaled one
			 * past it, linear between */
			double y = (i - (double)p->ramp_lo) / fmax(0.001, (double)p->ramp_hi - p->ramp_lo);
			double mix = p->ext_factor * (1.0 - fmin(1.0, fmax(0.0, y)));
			double theta = ext * p->freq_scale * (1.0 - mix) + ext * mix;
			yh[a] = (xh[a] * cos(theta) - xh[b] * sin(theta)) * m;
			yh[b] = (xh[a] * sin(theta) + xh[b] * cos(theta)) * m;
		}
	}
}

static void test_rope(const struct ctx *c)
{
	struct cfg {
		int n_heads, head_dim, n_rot;
		float base, scale;
		bool factors;      /* llama 3.1 style frequency factors */
		float attn_factor;
		float ext_factor, ramp_lo, ramp_hi; /* YaRN */
		float temp_scale; /* attention temperature, over temp_floor positions */
		int temp_floor;
	};
	static const struct cfg cfgs[] = {
		{ 4, 64, 64, 10000.0f, 1.0f, false, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
		{ 3, 128, 128, 500000.0f, 1.0f, false, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
		{ 2, 64, 32, 10000.0f, 1.0f, false, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },     /* partial rotation */
		{ 5, 80, 80, 1000000.0f, 0.25f, false, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },  /* linear scaling, odd head size */
		{ 2, 16, 6, 10000.0f, 1.0f, false, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },      /* SIMD tails */
		{ 1, 2, 2, 10000.0f, 0.5f, false, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
		{ 3, 128, 128, 500000.0f, 1.0f, true, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },   /* llama 3.1 */
		{ 4, 96, 96, 10000.0f, 1.0f, true, 1.19f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },     /* phi3 128k */
		/* YaRN by 4 over an original 2048: pairs 0-7 unscaled, 8-21 blended */
		{ 4, 64, 64, 10000.0f, 0.25f, false, 1.1386f, 1.0f, 8.0f, 21.0f, 0.0f, 0 },
		{ 2, 128, 128, 1000000.0f, 0.25f, false, 1.1386f, 1.0f, 14.0f, 40.0f, 0.0f, 0 },
		{ 3, 128, 128, 500000.0f, 0.125f, true, 1.2079f, 1.0f, 20.0f, 20.0f, 0.0f, 0 },
		/* mistral3: YaRN and the attention temperature, 1 + 0.1 ln(floor(p / 1000) + 1) */
		{ 4, 128, 128, 1000000.0f, 0.0625f, false, 1.0f, 1.0f, 14.0f, 40.0f, 0.1f, 1000 },
	};
	static float ff[64];

	for (int i = 0; i < 64; i++)
		ff[i] = 1.0f + 7.0f * (float)(i * i) / (63.0f * 63.0f);
	static const int32_t positions[] = { 0, 1, 2, 17, 255, 1000, 4095, 32767, 100000, 500000 };
	const int n = (int)(sizeof(positions) / sizeof(positions[0]));
	struct exl_rope_cache rc = { 0 };
	unsigned id = 1;
	char err[200];

	for (size_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
		for (int neox = 0; neox < 2; neox++) {
			const struct cfg *g = &cfgs[ci];
			const struct exl_rope_params p = { g->n_rot, g->base, g->scale, neox,
							   g->factors ? ff : NULL, g->attn_factor,
							   g->ext_factor, g->ramp_lo, g->ramp_hi,
							   g->temp_scale, g->temp_floor };
			const size_t row = (size_t)g->n_heads * g->head_dim;
			const size_t cnt = (size_t)n * row;
			float *x = rnd_vec(cnt, 2.0f);
			float *x0 = dup_vec(x, cnt);
			double *ref = malloc(cnt * sizeof(double));
			int bad = 0, bad_tail = 0;

			if (!ref)
				exit(2);
			for (int t = 0; t < n; t++)
				rope_ref(x + t * row, ref + t * row, g->n_heads, g->head_dim,
					 positions[t], &p);
			/* twice with one batch id: the second call reuses the tables */
			for (int rep = 0; rep < 2; rep++) {
				memcpy(x, x0, cnt * sizeof(float));
				int r = exl_cpu_rope(c->pool, c->k, &rc, id, positions, x, n,
						     g->n_heads, g->head_dim, &p, err, sizeof(err));
				CHECK(r == 0, "rope: %s", err);
				bad = bad_tail = 0;
				for (int t = 0; t < n; t++) {
					/* the temperature scales the error too */
					double tm = g->temp_scale == 0.0f ? 1.0 : 1.0 + g->temp_scale *
						    log(floor((double)positions[t] / g->temp_floor) + 1.0);

					for (int h = 0; h < g->n_heads; h++) {
						size_t o = t * row + (size_t)h * g->head_dim;

						for (int i = 0; i < g->n_rot / 2; i++) {
							int a = neox ? i : 2 * i;
							int b = neox ? i + g->n_rot / 2 : 2 * i + 1;
							double tol = 2e-6 * g->attn_factor * tm *
								     (fabs(x0[o + a]) + fabs(x0[o + b]));

							if (fabs(x[o + a] - ref[o + a]) > tol ||
							    fabs(x[o + b] - ref[o + b]) > tol) {
								if (!bad)
									fprintf(stderr, "  pos %d pair %d: "
										"%.9g %.9g want %.9g %.9g\n",
										positions[t], i, x[o + a], x[o + b],
										ref[o + a], ref[o + b]);
								bad++;
							}
						}
						for (int d = g->n_rot; d < g->head_dim; d++)
							bad_tail += x[o + d] != x0[o + d];
					}
				}
				CHECK(bad == 0 && bad_tail == 0, "%s/%s: rope %s heads %d x %d rot %d "
				      "base %g scale %g (pass %d): %d pairs off, %d tail dims changed",
				      c->k->name, c->pname, neox ? "neox" : "adjacent", g->n_heads,
				      g->head_dim, g->n_rot, (double)g->base, (double)g->scale, rep,
				      bad, bad_tail);
			}
			id++;
			free(x);
			free(x0);
			free(ref);
		}
	}
	/* new positions under a new batch id rebuild the tables */
	{
		const struct exl_rope_params p = { 64, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 };
		int32_t pos1[2] = { 5, 6 }, pos2[2] = { 700, 9 };
		float x[2 * 64], x0[2 * 64];
		double ref[2 * 64];

		for (int i = 0; i < 128; i++)
			x0[i] = rnd_uniform();
		memcpy(x, x0, sizeof(x));
		exl_cpu_rope(c->pool, c->k, &rc, 1000, pos1, x, 2, 1, 64, &p, err, sizeof(err));
		memcpy(x, x0, sizeof(x));
		exl_cpu_rope(c->pool, c->k, &rc, 1001, pos2, x, 2, 1, 64, &p, err, sizeof(err));
		rope_ref(x0, ref, 1, 64, 700, &p);
		rope_ref(x0 + 64, ref + 64, 1, 64, 9, &p);
		CHECK(count_bad("rope", x, ref, 128, 0, 4e-6) == 0, "%s/%s: rope after a new batch",
		      c->k->name, c->pname);
	}
	/* bad parameters */
	{
		int32_t pos[1] = { 0 };
		float x[64] = { 0 };
		static float bad_ff[32] = { 1.0f, 1.0f, 0.0f };
		struct exl_rope_params bad[] = {
			{ 0, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 65, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 7, 10000.0f, 1.0f, true, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 64, -1.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 64, 10000.0f, 0.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 64, NAN, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 64, 10000.0f, 1.0f, false, NULL, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 64, 10000.0f, 1.0f, false, bad_ff, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 },
			{ 64, 10000.0f, 0.25f, false, NULL, 1.0f, 1.5f, 8.0f, 21.0f, 0.0f, 0 },
			{ 64, 10000.0f, 0.25f, false, NULL, 1.0f, -1.0f, 8.0f, 21.0f, 0.0f, 0 },
			{ 64, 10000.0f, 0.25f, false, NULL, 1.0f, 1.0f, NAN, 21.0f, 0.0f, 0 },
			{ 64, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0 },
			{ 64, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, INFINITY, 100 },
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			err[0] = '\0';
			int r = exl_cpu_rope(c->pool, c->k, &rc, 2000, pos, x, 1, 1, 64, &bad[i], err,
					     sizeof(err));
			CHECK(r == -1 && strstr(err, "rope:"), "bad rope params %zu accepted (%s)", i,
			      err);
		}
	}
	exl_rope_cache_free(&rc);
}

/* ---- F32 -> F16 ------------------------------------------------------- */

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static void test_f16(const struct ctx *c)
{
	enum { N = 100003 };
	float *x = malloc(N * sizeof(float));
	uint16_t *y = malloc(N * sizeof(uint16_t));
	static const uint32_t special[] = {
		0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
		0x7f800001u, 0x7fa5a5a5u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x38800000u,
		0x387fffffu, 0x33000000u, 0x33000001u, 0x337fffffu, 0x00000001u, 0x3f800000u,
		0x3f801000u, 0x3f803000u, 0x3f802fffu, 0xc7800000u,
	};
	int bad = 0;

	if (!x || !y)
		exit(2);
	for (size_t i = 0; i < N; i++) {
		uint32_t u = rnd_u32();

		if (i % 3 == 0) /* around the F16 range */
			u = (u & 0x80ffffffu) | ((0x30u + (u >> 24) % 0x20u) << 24);
		if (i < sizeof(special) / sizeof(special[0]))
			u = special[i];
		x[i] = bits_f32(u);
	}
	c->k->f32_to_f16(y, x, N);
	for (size_t i = 0; i < N; i++) {
		if (y[i] != exl_fp32_to_fp16(x[i])) {
			if (!bad)
				fprintf(stderr, "  f16 of %08x: %04x want %04x\n",
					*(uint32_t *)(void *)&x[i], y[i], exl_fp32_to_fp16(x[i]));
			bad++;
		}
	}
	CHECK(bad == 0, "%s: f32_to_f16: %d of %d differ", c->k->name, bad, N);
	for (int n = 0; n < 40; n++) {
		uint16_t z[48];

		memset(z, 0xab, sizeof(z));
		c->k->f32_to_f16(z, x + 100, n);
		bad = 0;
		for (int i = 0; i < n; i++)
			bad += z[i] != exl_fp32_to_fp16(x[100 + i]);
		for (int i = n; i < 48; i++)
			bad += z[i] != 0xabab; /* nothing written past n */
		CHECK(bad == 0, "%s: f32_to_f16 of %d", c->k->name, n);
	}
	free(x);
	free(y);
}

int main(void)
{
	static const char *const names[] = { "scalar", "avx2", "avx512" };
	char err[200];
	struct exl_pool *pool = exl_pool_create(3, err, sizeof(err));

	if (!pool) {
		fprintf(stderr, "pool: %s\n", err);
		return 1;
	}
	CHECK(exl_cpu_ops_get("nonsense") == NULL, "unknown variant accepted");
	CHECK(exl_cpu_ops_get("scalar") == &exl_cpu_ops_scalar, "scalar variant");
	CHECK(exl_cpu_ops_best() != NULL, "best variant");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct exl_cpu_ops *k = exl_cpu_ops_get(names[i]);

		if (!k) {
			printf("variant %s: not run (this CPU lacks it)\n", names[i]);
			continue;
		}
		printf("variant %s\n", names[i]);
		for (int pi = 0; pi < 2; pi++) {
			struct ctx c = { k, pi ? pool : NULL, pi ? "pool3" : "single" };

			test_rmsnorm(&c);
			test_add(&c);
			test_gather(&c);
			test_swiglu(&c);
			test_softmax(&c);
			test_rope(&c);
			if (!pi) {
				test_f16(&c);
				test_swiglu_position(&c);
			}
			/* last: the random inputs of the tests above stay those
			 * they always had */
			test_gemma_ops(&c);
		}
	}
	exl_pool_destroy(pool);
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

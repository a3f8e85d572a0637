/* Every op of the CUDA backend against the CPU backend's (the reference) on
 * random inputs, and, where the exact value is known, against a
 * double-precision computation on the host.  Tolerances are stated at each
 * check.  Exits 77 ("skipped: no CUDA device: ...", saying what is missing)
 * without a GPU. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

static struct exl_backend *cpu, *gpu;

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory\n");
		abort();
	}
	return p;
}

/* Device copy of host bytes. */
static void *to_gpu(const void *host, size_t bytes)
{
	void *d = gpu->ops->alloc(gpu, bytes);

	CHECK(d != NULL, "alloc %zu: %s", bytes, exl_backend_cuda_error(gpu));
	if (d)
		CHECK(gpu->ops->copy_in(gpu, d, host, bytes) == 0, "copy_in: %s",
		      exl_backend_cuda_error(gpu));
	return d;
}

/* Host copy of device bytes (waits for the queue). */
static bool from_gpu(void *host, const void *dev, size_t bytes)
{
	int rc = gpu->ops->download(gpu, host, dev, bytes);

	CHECK(rc == 0, "download: %s", exl_backend_cuda_error(gpu));
	return rc == 0;
}

static void *cpu_alloc(size_t bytes)
{
	void *p = cpu->ops->alloc(cpu, bytes);

	CHECK(p != NULL, "cpu alloc %zu", bytes);
	return p;
}

static void fill_normal(float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = rnd_normal() * scale;
}

/* Largest |a - b| / (abs_tol + rel_tol * |ref|) over n values: <= 1 passes. */
static double worst(const float *a, const float *b, const float *ref, size_t n, double abs_tol,
		    double rel_tol, size_t *at)
{
	double w = 0.0;

	*at = 0;
	for (size_t i = 0; i < n; i++) {
		if (a[i] == b[i])
			continue; /* also when both tolerances are 0 */
		double e = fabs((double)a[i] - (double)b[i]) /
			   (abs_tol + rel_tol * fabs((double)(ref ? ref[i] : b[i])));
		if (!(e <= w)) { /* NaN counts as worst */
			w = e;
			*at = i;
			if (isnan(e))
				return INFINITY;
		}
	}
	return w;
}

/* ---- matmul ----------------------------------------------------------- */

struct wmat {
	uint32_t type;
	int rows, cols;
	size_t row_bytes;
	unsigned char *q;   /* the weight in its format */
	float *deq;         /* what it dequantizes to */
};

static void make_weight(struct wmat *w, uint32_t type, int rows, int cols)
{
	float *src = xmalloc((size_t)cols * sizeof(float));

	w->type = type;
	w->rows = rows;
	w->cols = cols;
	w->row_bytes = exl_dtype_row_bytes(type, (uint64_t)cols);
	w->q = xmalloc(w->row_bytes * (size_t)rows);
	w->deq = xmalloc((size_t)rows * (size_t)cols * sizeof(float));
	for (int r = 0; r < rows; r++) {
		fill_normal(src, (size_t)cols, 0.05f);
		CHECK(exl_quantize_row(type, src, w->q + (size_t)r * w->row_bytes, cols) ==
		      w->row_bytes, "quantize %s row", exl_dtype_info(type)->name);
		CHECK(exl_dequantize_row(type, w->q + (size_t)r * w->row_bytes,
					 w->deq + (size_t)r * (size_t)cols, cols) == 0,
		      "dequantize %s row", exl_dtype_info(type)->name);
	}
	free(src);
}

static void free_weight(struct wmat *w)
{
	free(w->q);
	free(w->deq);
}

static void test_matmul_one(uint32_t type, int rows, int cols, int n)
{
	const char *name = exl_dtype_info(type)->name;
	struct wmat w;
	size_t nx = (size_t)n * (size_t)cols, ny = (size_t)n * (size_t)rows;
	float *x = xmalloc(nx * sizeof(float));
	float *ref = xmalloc(ny * sizeof(float)), *mag = xmalloc(ny * sizeof(float));
	float *qerr = xmalloc(ny * sizeof(float));
	const bool quant = type != EXL_F32 && type != EXL_F16 && type != EXL_BF16;
	float *y_gpu = xmalloc(ny * sizeof(float)), *y_cpu = cpu_alloc(ny * sizeof(float));
	size_t at = 0;

	make_weight(&w, type, rows, cols);
	fill_normal(x, nx, 1.0f);
	for (int j = 0; j < n; j++) {
		for (int r = 0; r < rows; r++) {
			double s = 0.0, m = 0.0, q = 0.0, step = 0.0;

			for (int k = 0; k < cols; k++) {
				const double wk = (double)w.deq[(size_t)r * cols + k];
				double p = wk * (double)x[(size_t)j * cols + k];

				/* the decode kernel rounds x to steps of its part's
				 * amax / 127: each moves by at most half a step */
				if (quant && k % 32 == 0) {
					double amax = 0.0;

					for (int i = k; i < k + 32 && i < cols; i++)
						amax = fmax(amax, fabs((double)x[(size_t)j * cols + i]));
					step = amax / 127.0;
				}
				s += p;
				m += fabs(p);
				q += fabs(wk) * step / 2.0;
			}
			ref[(size_t)j * rows + r] = (float)s;
			mag[(size_t)j * rows + r] = (float)m;
			qerr[(size_t)j * rows + r] = (float)q;
		}
	}

	struct exl_weight wc = { type, rows, cols, w.row_bytes,
				 cpu->ops->upload(cpu, w.q, w.row_bytes * (size_t)rows), EXL_LAYOUT_ROWS };
	struct exl_weight wg = { type, rows, cols, w.row_bytes,
				 gpu->ops->upload(gpu, w.q, w.row_bytes * (size_t)rows), EXL_LAYOUT_ROWS };
	CHECK(wg.data != NULL, "upload: %s", exl_backend_cuda_error(gpu));
	float *dx = to_gpu(x, nx * sizeof(float));
	float *dy = gpu->ops->alloc(gpu, ny * sizeof(float));
	if (!wg.data || !dx || !dy)
		goto out;
	gpu->ops->matmul(gpu, &wg, dx, dy, n);
	if (!from_gpu(y_gpu, dy, ny * sizeof(float)))
		goto out;
	cpu->ops->matmul(cpu, &wc, x, y_cpu, n);

	/* Against the exact product of the dequantized weight, relative to
	 * sum |w x| (the scale rounding errors live on):
	 *  - n <= 8 (custom kernels): F32/F16/BF16, F32 throughout: 1e-5;
	 *    quantized, x in 8 bits per 32 values: the bound of that rounding
	 *    (qerr, as tests/unit/test_matmul.c's for the CPU's VNNI kernels)
	 *    and 2e-5 for the float steps;
	 *  - cuBLAS: F32 weights (SGEMM) 1e-5; F16 / quantized (x and the
	 *    dequantized tile in F16, 2^-11 relative each) 4e-3; BF16 (x in
	 *    BF16, 2^-8) 1.6e-2. */
	const bool custom = n <= 8;
	double tol = custom && quant ? 2e-5 : 1e-5;
	if (!custom && type != EXL_F32)
		tol = type == EXL_BF16 ? 1.6e-2 : 4e-3;
	double e = 0.0;
	for (size_t i = 0; i < ny; i++) {
		const double q = custom && quant ? qerr[i] * 1.001 : 0.0;
		double d = fabs((double)y_gpu[i] - ref[i]) / (1e-6 + q + tol * mag[i]);
		if (!(d <= e)) {
			e = isnan(d) ? INFINITY : d;
			at = i;
		}
	}
	CHECK(e <= 1.0, "matmul %s %dx%d n=%d vs exact: y[%zu] = %g, want %g (sum|wx| %g)",
	      name, rows, cols, n, at, y_gpu[at], ref[at], mag[at]);
	/* Against the CPU op, which may quantize x to 8 bits per block for
	 * quantized weights: 3e-2 of sum |w x|. */
	e = 0.0;
	for (size_t i = 0; i < ny; i++) {
		double d = fabs((double)y_gpu[i] - y_cpu[i]) / (1e-5 + 3e-2 * mag[i]);
		if (!(d <= e)) {
			e = isnan(d) ? INFINITY : d;
			at = i;
		}
	}
	CHECK(e <= 1.0, "matmul %s %dx%d n=%d vs cpu: y[%zu] = %g, cpu %g (sum|wx| %g)", name,
	      rows, cols, n, at, y_gpu[at], y_cpu[at], mag[at]);
out:
	if (wg.data)
		gpu->ops->unload(gpu, wg.data);
	gpu->ops->free(gpu, dx);
	gpu->ops->free(gpu, dy);
	cpu->ops->free(cpu, y_cpu);
	free_weight(&w);
	free(x);
	free(ref);
	free(mag);
	free(qerr);
	free(y_gpu);
}

static void test_matmul(void)
{
	const uint32_t types[] = { EXL_F32, EXL_F16, EXL_BF16, EXL_Q8_0, EXL_Q4_0, EXL_Q4_1,
				   EXL_Q5_0, EXL_Q5_1, EXL_IQ4_NL, EXL_MXFP4, EXL_Q2_K, EXL_Q3_K,
				   EXL_Q4_K, EXL_Q5_K, EXL_Q6_K, EXL_IQ4_XS };
	const int ns[] = { 1, 2, 5, 8, 9, 17, 64 };

	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
			/* 67 rows: not a multiple of the 4 rows per GEMV block. */
			test_matmul_one(types[t], 67, 512, ns[i]);
			/* Plain types: a width that is no multiple of 32. */
			if (types[t] == EXL_F32 || types[t] == EXL_F16 || types[t] == EXL_BF16)
				test_matmul_one(types[t], 33, 172, ns[i]);
		}
	}
	/* Wide rows, and enough rows that a prefill goes through several
	 * dequantized tiles of cuBLAS. */
	test_matmul_one(EXL_Q4_K, 24, 8192, 3);
	test_matmul_one(EXL_Q8_0, 4100, 4096, 12);
	/* The decode kernel's other row widths: 64 threads a row (2048
	 * columns), and 176 parts over 128 threads (5632, TinyLlama's ff). */
	test_matmul_one(EXL_Q6_K, 37, 2048, 1);
	test_matmul_one(EXL_Q4_0, 130, 5632, 5);
	test_matmul_one(EXL_F16, 40, 2048, 2);
	/* MXFP4's 17-byte blocks, 15 a row: rows at odd addresses */
	test_matmul_one(EXL_MXFP4, 37, 480, 1);
	test_matmul_one(EXL_MXFP4, 37, 480, 9);
}

/* Consecutive matmuls of one x share its 8-bit copy (ops_matmul.cu's
 * quant_x); any other op in between, here new values copied into x, makes
 * the next one quantize again, and a matmul whose y lands on x too. */
static void test_matmul_requantize(void)
{
	const int rows = 64, cols = 256;
	struct wmat w;
	float x1[256], x2[256], ya[64], yb[64], yc[64], yd[64];

	make_weight(&w, EXL_Q8_0, rows, cols);
	fill_normal(x1, 256, 1.0f);
	fill_normal(x2, 256, 1.0f);
	struct exl_weight wg = { EXL_Q8_0, rows, cols, w.row_bytes,
				 gpu->ops->upload(gpu, w.q, w.row_bytes * (size_t)rows), EXL_LAYOUT_ROWS };
	float *dx = to_gpu(x1, sizeof(x1)), *dx2 = to_gpu(x2, sizeof(x2));
	float *dy = gpu->ops->alloc(gpu, 2 * sizeof(ya));

	if (!wg.data || !dx || !dx2 || !dy)
		goto out;
	gpu->ops->matmul(gpu, &wg, dx, dy, 1);
	gpu->ops->matmul(gpu, &wg, dx, dy + rows, 1);
	if (!from_gpu(ya, dy, sizeof(ya)) || !from_gpu(yb, dy + rows, sizeof(yb)))
		goto out;
	CHECK(memcmp(ya, yb, sizeof(ya)) == 0, "matmul of the same x twice differs");
	CHECK(gpu->ops->copy_in(gpu, dx, x2, sizeof(x2)) == 0, "copy_in: %s",
	      exl_backend_cuda_error(gpu));
	gpu->ops->matmul(gpu, &wg, dx, dy, 1);
	gpu->ops->matmul(gpu, &wg, dx2, dy + rows, 1);
	if (!from_gpu(yc, dy, sizeof(yc)) || !from_gpu(yd, dy + rows, sizeof(yd)))
		goto out;
	CHECK(memcmp(yc, yd, sizeof(yc)) == 0, "matmul after new values in x: stale x (%g vs %g)",
	      yc[0], yd[0]);
	CHECK(memcmp(yc, ya, sizeof(yc)) != 0, "matmuls of two different x agree");
out:
	if (wg.data)
		gpu->ops->unload(gpu, wg.data);
	gpu->ops->free(gpu, dx);
	gpu->ops->free(gpu, dx2);
	gpu->ops->free(gpu, dy);
	free_weight(&w);
}

/* ---- embed ------------------------------------------------------------ */

static void test_embed_one(uint32_t type, int rows, int cols)
{
	const char *name = exl_dtype_info(type)->name;
	const int32_t tokens[] = { 0, (int32_t)rows - 1, 7, 7, 23, 1 };
	const int n = (int)(sizeof(tokens) / sizeof(tokens[0]));
	size_t ny = (size_t)n * (size_t)cols;
	struct wmat w;
	float *y_gpu = xmalloc(ny * sizeof(float)), *y_cpu = cpu_alloc(ny * sizeof(float));

	make_weight(&w, type, rows, cols);
	struct exl_weight wc = { type, rows, cols, w.row_bytes,
				 cpu->ops->upload(cpu, w.q, w.row_bytes * (size_t)rows), EXL_LAYOUT_ROWS };
	struct exl_weight wg = { type, rows, cols, w.row_bytes,
				 gpu->ops->upload(gpu, w.q, w.row_bytes * (size_t)rows), EXL_LAYOUT_ROWS };
	float *dy = gpu->ops->alloc(gpu, ny * sizeof(float));

	if (!wg.data || !dy)
		goto out;
	gpu->ops->embed(gpu, &wg, tokens, dy, n);
	if (!from_gpu(y_gpu, dy, ny * sizeof(float)))
		goto out;
	cpu->ops->embed(cpu, &wc, tokens, y_cpu, n);
	/* The same dequantization code runs on both sides (elem.h, no FMA
	 * contraction on the GPU): bit-identical to exl_dequantize_row. */
	for (int i = 0; i < n; i++) {
		const float *want = w.deq + (size_t)tokens[i] * (size_t)cols;
		const float *got = y_gpu + (size_t)i * (size_t)cols;
		int bad = -1;

		for (int k = 0; k < cols && bad < 0; k++)
			if (exl_f32_bits(got[k]) != exl_f32_bits(want[k]))
				bad = k;
		CHECK(bad < 0, "embed %s token %d element %d: %.9g, want %.9g", name, tokens[i],
		      bad, bad < 0 ? 0.0 : got[bad], bad < 0 ? 0.0 : want[bad]);
	}
	size_t at = 0;
	CHECK(worst(y_gpu, y_cpu, NULL, ny, 1e-7, 1e-6, &at) <= 1.0,
	      "embed %s vs cpu at %zu: %g vs %g", name, at, y_gpu[at], y_cpu[at]);
out:
	if (wg.data)
		gpu->ops->unload(gpu, wg.data);
	gpu->ops->free(gpu, dy);
	cpu->ops->free(cpu, y_cpu);
	free_weight(&w);
	free(y_gpu);
}

static void test_embed(void)
{
	const uint32_t types[] = { EXL_F32, EXL_F16, EXL_BF16, EXL_Q8_0, EXL_Q4_0, EXL_Q4_1,
				   EXL_Q5_0, EXL_Q5_1, EXL_IQ4_NL, EXL_MXFP4, EXL_Q2_K, EXL_Q3_K,
				   EXL_Q4_K, EXL_Q5_K, EXL_Q6_K, EXL_IQ4_XS };

	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		test_embed_one(types[t], 50, 512);
	test_embed_one(EXL_F32, 40, 172);
	test_embed_one(EXL_F16, 40, 172);
	test_embed_one(EXL_MXFP4, 40, 480); /* rows at odd addresses */
}

/* ---- element-wise and row ops ----------------------------------------- */

/* Runs the same op on both backends and compares.  `op` gets a backend and
 * its buffers a (in/out, na floats) and b (input, nb floats). */
typedef void (*pair_op)(struct exl_backend *be, float *a, const float *b, void *arg);

static void compare_op(const char *what, pair_op op, void *arg, const float *a0, size_t na,
		       const float *b0, size_t nb, double abs_tol, double rel_tol)
{
	float *ca = cpu_alloc(na * sizeof(float)), *cb = cpu_alloc((nb ? nb : 1) * sizeof(float));
	float *ga = to_gpu(a0, na * sizeof(float));
	float *gb = nb ? to_gpu(b0, nb * sizeof(float)) : NULL;
	float *got = xmalloc(na * sizeof(float));
	size_t at = 0;

	memcpy(ca, a0, na * sizeof(float));
	if (nb)
		memcpy(cb, b0, nb * sizeof(float));
	if (!ga || (nb && !gb))
		goto out;
	/* No b: NULL on both sides (a CPU buffer here would be read as b). */
	op(cpu, ca, nb ? cb : NULL, arg);
	/* A CPU op that failed leaves its output alone and the backend failed
	 * until its sync: say so here, not as a difference later. */
	CHECK(cpu->ops->sync(cpu) == 0, "%s: the CPU backend refused it", what);
	op(gpu, ga, gb, arg);
	if (!from_gpu(got, ga, na * sizeof(float)))
		goto out;
	double e = worst(got, ca, NULL, na, abs_tol, rel_tol, &at);
	CHECK(e <= 1.0, "%s at %zu: cuda %.9g, cpu %.9g", what, at, got[at], ca[at]);
out:
	cpu->ops->free(cpu, ca);
	cpu->ops->free(cpu, cb);
	gpu->ops->free(gpu, ga);
	gpu->ops->free(gpu, gb);
	free(got);
}

struct shape {
	int n, dim;
	float eps;
};

/* a: the output; b: the rows, then the weight. */
static void do_rmsnorm(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	be->ops->rmsnorm(be, a, b, b + (size_t)s->n * (size_t)s->dim, s->n, s->dim, s->eps);
}

static void do_rmsnorm_inplace(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	be->ops->rmsnorm(be, a, a, b, s->n, s->dim, s->eps);
}

static void do_add_bias(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	be->ops->add_bias(be, a, b, s->n, s->dim);
}

static void do_add(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	be->ops->add(be, a, b, (size_t)s->n * (size_t)s->dim);
}

static void do_swiglu(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	be->ops->swiglu(be, a, b, (size_t)s->n * (size_t)s->dim);
}

static void do_softmax(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	(void)b;
	be->ops->softmax(be, a, s->n, s->dim);
}

static void do_scale(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	(void)b;
	be->ops->scale(be, a, 0.37f, (size_t)s->n * (size_t)s->dim);
}

static void do_softcap(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	(void)b;
	be->ops->softcap(be, a, 30.0f, (size_t)s->n * (size_t)s->dim);
}

static void do_geglu(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct shape *s = arg;

	be->ops->geglu(be, a, b, (size_t)s->n * (size_t)s->dim);
}

struct gather {
	const int32_t *rows;
	int n, dim;
	const float *w;
};

static void do_add_rows_scaled(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct gather *g = arg;

	be->ops->add_rows_scaled(be, a, b, g->rows, g->w, g->n, g->dim);
}

static void do_gather(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct gather *g = arg;

	be->ops->gather_rows(be, a, b, g->rows, g->n, g->dim);
}

static void test_rowwise(void)
{
	struct shape s = { 7, 300, 1e-5f };
	size_t n = (size_t)s.n * (size_t)s.dim;
	float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
	float *w = xmalloc((size_t)s.dim * sizeof(float));

	fill_normal(x, n, 3.0f);
	fill_normal(y, n, 1.0f);
	fill_normal(w, (size_t)s.dim, 1.0f);
	/* rmsnorm: sums of squares in a different order: 2e-6 relative. */
	float *xw = xmalloc((n + (size_t)s.dim) * sizeof(float));
	memcpy(xw, x, n * sizeof(float));
	memcpy(xw + n, w, (size_t)s.dim * sizeof(float));
	compare_op("rmsnorm", do_rmsnorm, &s, y, n, xw, n + (size_t)s.dim, 1e-6, 2e-6);
	free(xw);
	compare_op("rmsnorm in place", do_rmsnorm_inplace, &s, x, n, w, (size_t)s.dim, 1e-6, 2e-6);
	/* add, add_bias: one rounding each, identical. */
	compare_op("add_bias", do_add_bias, &s, x, n, w, (size_t)s.dim, 0.0, 1e-7);
	compare_op("add", do_add, &s, x, n, y, n, 0.0, 1e-7);
	/* swiglu: expf on the GPU vs the host's, a couple of ulp: 1e-6. */
	for (size_t i = 0; i < n; i++)
		x[i] = rnd_uniform() * 20.0f;
	compare_op("swiglu", do_swiglu, &s, x, n, y, n, 1e-7, 1e-6);
	/* geglu, softcap: tanhf on both sides, a couple of ulp */
	compare_op("geglu", do_geglu, &s, x, n, y, n, 1e-7, 1e-6);
	for (size_t i = 0; i < n; i++)
		x[i] = rnd_normal() * 40.0f;
	compare_op("softcap", do_softcap, &s, x, n, NULL, 0, 1e-6, 1e-6);
	compare_op("scale", do_scale, &s, x, n, NULL, 0, 0.0, 0.0);
	/* softmax over rows with masked (-inf) entries and a large range. */
	struct shape sm = { 4, 1000, 0.0f };
	float *z = xmalloc(4000 * sizeof(float));
	for (int i = 0; i < 4000; i++)
		z[i] = i % 13 == 4 ? -INFINITY : rnd_normal() * 15.0f;
	compare_op("softmax", do_softmax, &sm, z, 4000, NULL, 0, 1e-8, 1e-5);
	/* gather_rows: copies, exact. */
	const int32_t rows[] = { 6, 0, 3, 3, 5 };
	struct gather g = { rows, 5, s.dim, NULL };
	compare_op("gather_rows", do_gather, &g, y, (size_t)5 * (size_t)s.dim, x, n, 0.0, 0.0);
	/* add_rows_scaled: a product and a sum each, without FMA: identical */
	const int32_t out_rows[] = { 6, 0, 3, 5 };
	const float wts[] = { 0.25f, -1.5f, 0.7f, 1.0f };
	struct gather ga = { out_rows, 4, s.dim, wts };
	compare_op("add_rows_scaled", do_add_rows_scaled, &ga, x, n, y,
		   (size_t)4 * (size_t)s.dim, 0.0, 1e-7);
	free(x);
	free(y);
	free(w);
	free(z);
}

/* ---- rope, kv_store, attention ---------------------------------------- */

/* The batch of one step: tokens of several sequences at given positions,
 * and a page table giving each sequence distinct, shuffled pages. */
struct step {
	int n;
	int32_t pos[1024];
	int32_t seq[1024];
};

static void add_tokens(struct step *s, int seq, int from, int count)
{
	for (int i = 0; i < count; i++) {
		s->pos[s->n] = from + i;
		s->seq[s->n] = seq;
		s->n++;
	}
}

static bool set_batch_both(const struct step *s, int n_seqs, int max_pages,
			   const int32_t *page_table)
{
	struct exl_batch_desc d = { s->n, s->pos, s->seq, n_seqs, max_pages, page_table, 0, NULL };
	int rc_c = cpu->ops->set_batch(cpu, &d);
	int rc_g = gpu->ops->set_batch(gpu, &d);

	CHECK(rc_c == 0 && rc_g == 0, "set_batch: cpu %d, cuda %d (%s)", rc_c, rc_g,
	      exl_backend_cuda_error(gpu) ? exl_backend_cuda_error(gpu) : "");
	return rc_c == 0 && rc_g == 0;
}

struct rope_arg {
	int n, n_heads, head_dim;
	struct exl_rope_params p;
};

/* b: the frequency factors, when given (each backend its own copy) */
static void do_rope(struct exl_backend *be, float *a, const float *b, void *arg)
{
	struct rope_arg *r = arg;
	struct exl_rope_params p = r->p;

	p.freq_factors = b;
	be->ops->rope(be, a, r->n, r->n_heads, r->head_dim, &p);
}

static void test_rope(void)
{
	static struct step s;
	const int32_t table[2] = { 0, 0 };

	/* Positions out to 2^24.  Both sides take the angles from
	 * exl_rope_cos_sin (double, elem_math.h) and rotate without FMA, so
	 * they differ only where the device's double pow/cos/sin (within 2 ulp
	 * of double) round to another float than glibc's: one float ulp of a
	 * coefficient, times |x| < ~5, is < 6e-7. */
	s.n = 0;
	for (int i = 0; i < 40; i++)
		add_tokens(&s, 0, (int)(rnd_u32() % (i < 20 ? 4096u : 1u << 24)), 1);
	if (!set_batch_both(&s, 1, 1, table))
		return;
	/* frequency factors as llama 3.1's: 1 to 8 */
	float ff[32];
	for (int i = 0; i < 32; i++)
		ff[i] = 1.0f + 7.0f * (float)i / 31.0f;
	for (int layout = 0; layout < 2; layout++) {
		/* partial 3: YaRN by 4, pairs 5-15 blended */
		for (int partial = 0; partial < 4; partial++) {
			struct rope_arg r = { s.n, 6, 64,
					      { partial ? 32 : 64, layout ? 1000000.0f : 10000.0f,
						partial ? 0.25f : 1.0f, layout == 1, NULL,
						partial == 2 ? 1.19f : partial == 3 ? 1.1386f : 1.0f,
						partial == 3 ? 1.0f : 0.0f, 5.0f, 15.0f,
						partial == 3 ? 0.1f : 0.0f, 1000 } };
			size_t n = (size_t)s.n * 6 * 64;
			float *x = xmalloc(n * sizeof(float));
			char what[64];

			fill_normal(x, n, 1.0f);
			snprintf(what, sizeof(what), "rope %s n_rot %d%s", layout ? "neox" : "normal",
				 r.p.n_rot, partial == 2 ? " factors" : partial == 3 ? " yarn" : "");
			compare_op(what, do_rope, &r, x, n, partial == 2 ? ff : NULL,
				   partial == 2 ? 16 : 0, 1e-6, 0.0);
			free(x);
		}
	}
}

struct attn_case {
	int n_heads, n_kv_heads, head_dim, page_size;
	int n_seqs;
	int history[4]; /* positions already cached per sequence */
	int fresh[4];   /* tokens per sequence in the tested batch */
	float softcap;
	int window;
};

static void kv_store_both(const struct exl_kv_layer *kc, const struct exl_kv_layer *kg,
			  int n_tokens, int kv_dim)
{
	size_t n = (size_t)n_tokens * (size_t)kv_dim;
	float *k = xmalloc(n * sizeof(float)), *v = xmalloc(n * sizeof(float));

	fill_normal(k, n, 1.0f);
	fill_normal(v, n, 1.0f);
	float *gk = to_gpu(k, n * sizeof(float)), *gv = to_gpu(v, n * sizeof(float));
	if (gk && gv) {
		cpu->ops->kv_store(cpu, kc, k, v);
		gpu->ops->kv_store(gpu, kg, gk, gv);
		CHECK(gpu->ops->sync(gpu) == 0, "kv_store: %s", exl_backend_cuda_error(gpu));
	}
	gpu->ops->free(gpu, gk);
	gpu->ops->free(gpu, gv);
	free(k);
	free(v);
}

static void test_attention_case(const struct attn_case *c)
{
	const int kv_dim = c->n_kv_heads * c->head_dim, q_dim = c->n_heads * c->head_dim;
	int max_len = 0, total_pages = 0, max_pages;

	for (int j = 0; j < c->n_seqs; j++)
		if (c->history[j] + c->fresh[j] > max_len)
			max_len = c->history[j] + c->fresh[j];
	max_pages = (max_len + c->page_size - 1) / c->page_size;
	total_pages = c->n_seqs * max_pages + 3; /* a few pages nobody uses */

	/* Each sequence gets max_pages distinct pages of a shuffled pool. */
	int32_t *perm = xmalloc((size_t)total_pages * sizeof(int32_t));
	int32_t *table = xmalloc((size_t)c->n_seqs * (size_t)max_pages * sizeof(int32_t));
	for (int i = 0; i < total_pages; i++)
		perm[i] = i;
	for (int i = total_pages - 1; i > 0; i--) {
		int j = (int)(rnd_u32() % (uint32_t)(i + 1));
		int32_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int i = 0; i < c->n_seqs * max_pages; i++)
		table[i] = perm[i];

	size_t pool = (size_t)total_pages * (size_t)c->page_size * (size_t)kv_dim * 2;
	struct exl_kv_layer kc = { cpu_alloc(pool), cpu_alloc(pool), c->page_size, c->n_kv_heads,
				   c->head_dim, total_pages, 0 };
	struct exl_kv_layer kg = { gpu->ops->alloc(gpu, pool), gpu->ops->alloc(gpu, pool),
				   c->page_size, c->n_kv_heads, c->head_dim, total_pages, 0 };
	static struct step s;
	float *q = NULL, *gq = NULL, *out_c = NULL, *gout = NULL, *out_g = NULL;
	uint16_t *kpool = xmalloc(pool), *vpool = xmalloc(pool);

	if (!kg.k || !kg.v)
		goto out;

	/* The cached history, stored by an earlier batch. */
	s.n = 0;
	for (int j = 0; j < c->n_seqs; j++)
		add_tokens(&s, j, 0, c->history[j]);
	if (s.n) {
		if (!set_batch_both(&s, c->n_seqs, max_pages, table))
			goto out;
		kv_store_both(&kc, &kg, s.n, kv_dim);
	}

	/* The tested batch: store its K/V, then attend. */
	s.n = 0;
	for (int j = 0; j < c->n_seqs; j++)
		add_tokens(&s, j, c->history[j], c->fresh[j]);
	if (!set_batch_both(&s, c->n_seqs, max_pages, table))
		goto out;
	kv_store_both(&kc, &kg, s.n, kv_dim);

	/* F32 -> F16 rounds to nearest even on both sides: identical pools. */
	if (!from_gpu(kpool, kg.k, pool) || !from_gpu(vpool, kg.v, pool))
		goto out;
	CHECK(memcmp(kpool, kc.k, pool) == 0, "K pools differ");
	CHECK(memcmp(vpool, kc.v, pool) == 0, "V pools differ");

	size_t nq = (size_t)s.n * (size_t)q_dim;
	const float scale = 1.0f / sqrtf((float)c->head_dim);
	q = xmalloc(nq * sizeof(float));
	out_g = xmalloc(nq * sizeof(float));
	out_c = cpu_alloc(nq * sizeof(float));
	fill_normal(q, nq, 1.0f);
	gq = to_gpu(q, nq * sizeof(float));
	gout = gpu->ops->alloc(gpu, nq * sizeof(float));
	if (!gq || !gout)
		goto out;
	const struct exl_attn_params ap = { scale, c->softcap, c->window, NULL, false };

	cpu->ops->attention(cpu, &kc, q, out_c, c->n_heads, &ap);
	gpu->ops->attention(gpu, &kg, gq, gout, c->n_heads, &ap);
	if (!from_gpu(out_g, gout, nq * sizeof(float)))
		goto out;

	/* Reference: double precision over the F16 pool. */
	double e_ref = 0.0, e_cpu = 0.0;
	const int group = c->n_heads / c->n_kv_heads;
	double *sc = xmalloc((size_t)max_len * sizeof(double));
	for (int t = 0; t < s.n; t++) {
		const int32_t *row = table + (size_t)s.seq[t] * (size_t)max_pages;
		int len = s.pos[t] + 1;
		int start = c->window && len > c->window ? len - c->window : 0;

		for (int h = 0; h < c->n_heads; h++) {
			const float *qh = q + ((size_t)t * c->n_heads + h) * c->head_dim;
			int kvh = h / group;
			double m = -INFINITY, l = 0.0;

			for (int p = start; p < len; p++) {
				size_t off = (((size_t)row[p / c->page_size] * c->n_kv_heads + kvh) *
					      c->page_size + p % c->page_size) * c->head_dim;
				double dot = 0.0;

				for (int d = 0; d < c->head_dim; d++)
					dot += (double)qh[d] * exl_fp16_to_fp32(kpool[off + d]);
				sc[p] = dot * scale;
				if (c->softcap > 0)
					sc[p] = c->softcap * tanh(sc[p] / c->softcap);
				m = sc[p] > m ? sc[p] : m;
			}
			for (int p = start; p < len; p++) {
				sc[p] = exp(sc[p] - m);
				l += sc[p];
			}
			for (int d = 0; d < c->head_dim; d++) {
				double o = 0.0;
				size_t i = ((size_t)t * c->n_heads + h) * c->head_dim + d;

				for (int p = start; p < len; p++) {
					size_t off = (((size_t)row[p / c->page_size] * c->n_kv_heads +
						       kvh) * c->page_size + p % c->page_size) *
						     c->head_dim;
					o += sc[p] * exl_fp16_to_fp32(vpool[off + d]);
				}
				o /= l;
				/* Outputs are averages of N(0,1) values: absolute
				 * tolerances, 2e-5 against the exact value and 1e-4
				 * against the CPU op (its own float rounding). */
				double er = fabs(out_g[i] - o) / 2e-5;
				double ec = fabs((double)out_g[i] - out_c[i]) / 1e-4;
				e_ref = er > e_ref || isnan(er) ? er : e_ref;
				e_cpu = ec > e_cpu || isnan(ec) ? ec : e_cpu;
			}
		}
	}
	free(sc);
	CHECK(e_ref <= 1.0, "attention (%d heads, %d kv, dim %d, page %d) vs exact: %g of tol",
	      c->n_heads, c->n_kv_heads, c->head_dim, c->page_size, e_ref);
	CHECK(e_cpu <= 1.0, "attention (%d heads, %d kv, dim %d, page %d) vs cpu: %g of tol",
	      c->n_heads, c->n_kv_heads, c->head_dim, c->page_size, e_cpu);
out:
	gpu->ops->free(gpu, kg.k);
	gpu->ops->free(gpu, kg.v);
	gpu->ops->free(gpu, gq);
	gpu->ops->free(gpu, gout);
	cpu->ops->free(cpu, kc.k);
	cpu->ops->free(cpu, kc.v);
	cpu->ops->free(cpu, out_c);
	free(q);
	free(out_g);
	free(kpool);
	free(vpool);
	free(perm);
	free(table);
}

static void test_attention(void)
{
	const struct attn_case cases[] = {
		/* decode, prefill from 0 and a short continuation, GQA 4:1 */
		{ 8, 2, 64, 16, 3, { 37, 0, 100 }, { 1, 20, 3 }, 0.0f, 0 },
		/* stories260K's shape: head_dim 8, GQA 2:1 */
		{ 8, 4, 8, 16, 2, { 5, 0 }, { 1, 30 }, 0.0f, 0 },
		/* long windows (several tiles of 128 positions), head_dim 128,
		 * one KV head for all */
		{ 4, 1, 128, 32, 2, { 690, 250 }, { 9, 1 }, 0.0f, 0 },
		/* head_dim 256 (two dims per thread), page of 1 position */
		{ 2, 2, 256, 1, 1, { 130 }, { 2 }, 0.0f, 0 },
		/* gemma2's soft-capped scores, a sliding window of 100 over
		 * windows longer and shorter than it */
		{ 8, 2, 64, 16, 3, { 300, 0, 90 }, { 1, 20, 30 }, 5.0f, 100 },
		/* a prefill of blocks enough that windows are not split */
		{ 8, 2, 64, 16, 1, { 0 }, { 150 }, 0.0f, 0 },
		/* 16 query heads a KV head: two blocks of 8 share it */
		{ 32, 2, 64, 16, 2, { 40, 0 }, { 1, 5 }, 0.0f, 0 },
		/* head_dim 80 (lanes past it idle), and the limit, 512 */
		{ 4, 2, 80, 16, 1, { 50 }, { 2 }, 0.0f, 0 },
		{ 2, 1, 512, 16, 1, { 70 }, { 1 }, 0.0f, 0 },
		/* groups of 8 (TinyLlama), 6 and 3 query heads a KV head: the
		 * last two fill blocks of 8 and 4 in part */
		{ 32, 4, 64, 16, 1, { 300 }, { 1 }, 0.0f, 0 },
		{ 24, 4, 64, 16, 1, { 60 }, { 1 }, 0.0f, 0 },
		{ 6, 2, 128, 16, 1, { 33 }, { 2 }, 0.0f, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		test_attention_case(&cases[i]);
}

/* ---- memory accounting, device-to-device copy ------------------------- */

/* mem_info counts what upload and alloc hold, exactly, and reads the
 * device; copy moves bytes on the device, ordered with the ops around it. */
static void test_mem_copy(void)
{
	struct exl_backend_mem m0, m1, m2;
	char err[256];
	enum { N = 3 * 4096 + 5 };
	float *src = xmalloc(N * sizeof(float)), *got = xmalloc(N * sizeof(float));

	fill_normal(src, N, 1.0f);
	CHECK(gpu->ops->mem_info(gpu, &m0, err, sizeof(err)) == 0, "mem_info: %s", err);
	CHECK(!strcmp(m0.device, "cuda:0") && m0.total_bytes > 0 &&
	      m0.free_bytes <= m0.total_bytes, "device %s: %llu free of %llu", m0.device,
	      (unsigned long long)m0.free_bytes, (unsigned long long)m0.total_bytes);
	const void *w = gpu->ops->upload(gpu, src, N * sizeof(float));
	float *a = gpu->ops->alloc(gpu, N * sizeof(float));
	float *b = gpu->ops->alloc(gpu, 2 * N * sizeof(float));
	CHECK(w && a && b, "upload / alloc: %s", exl_backend_cuda_error(gpu));
	if (!w || !a || !b)
		goto out;
	CHECK(gpu->ops->mem_info(gpu, &m1, err, sizeof(err)) == 0, "mem_info: %s", err);
	CHECK(m1.weight_bytes == m0.weight_bytes + N * sizeof(float) &&
	      m1.buffer_bytes == m0.buffer_bytes + 3 * N * sizeof(float),
	      "weights %llu -> %llu, buffers %llu -> %llu", (unsigned long long)m0.weight_bytes,
	      (unsigned long long)m1.weight_bytes, (unsigned long long)m0.buffer_bytes,
	      (unsigned long long)m1.buffer_bytes);
	/* weights to a, a to the middle of b: queued in order, then one wait */
	CHECK(gpu->ops->copy(gpu, a, w, N * sizeof(float)) == 0 &&
	      gpu->ops->copy(gpu, b + N / 2, a, N * sizeof(float)) == 0, "copy: %s",
	      exl_backend_cuda_error(gpu));
	if (from_gpu(got, b + N / 2, N * sizeof(float)))
		CHECK(!memcmp(got, src, N * sizeof(float)), "copied bytes differ");
	gpu->ops->unload(gpu, w);
	gpu->ops->free(gpu, a);
	gpu->ops->free(gpu, b);
	CHECK(gpu->ops->mem_info(gpu, &m2, err, sizeof(err)) == 0 &&
	      m2.weight_bytes == m0.weight_bytes && m2.buffer_bytes == m0.buffer_bytes,
	      "after free: weights %llu, buffers %llu", (unsigned long long)m2.weight_bytes,
	      (unsigned long long)m2.buffer_bytes);
out:
	free(src);
	free(got);
}

/* ---- errors ----------------------------------------------------------- */

static void test_errors(void)
{
	size_t fr = 0, tot = 0;
	char err[256];
	const char *msg;

	CHECK(exl_cuda_mem_info(exl_backend_cuda_device(gpu), &fr, &tot, err, sizeof(err)) == 0 &&
	      tot > 0 && fr <= tot, "mem_info: %s", err);

	/* An upload that cannot fit fails at once, giving both numbers. */
	static const char byte = 1;
	const void *p = gpu->ops->upload(gpu, &byte, tot + ((size_t)1 << 30));
	msg = exl_backend_cuda_error(gpu);
	CHECK(p == NULL && msg && strstr(msg, "do not fit") && strstr(msg, "MiB free"),
	      "oversized upload: %p, %s", p, msg ? msg : "(no message)");

	/* A token outside the table: the pass fails at its download, with a
	 * message, and the backend works again afterwards. */
	float table[4 * 32];
	fill_normal(table, 4 * 32, 1.0f);
	struct exl_weight w = { EXL_F32, 4, 32, 32 * sizeof(float),
				gpu->ops->upload(gpu, table, sizeof(table)), EXL_LAYOUT_ROWS };
	float *dy = gpu->ops->alloc(gpu, 2 * 32 * sizeof(float));
	float y[2 * 32];
	int32_t bad[2] = { 1, 4 }, good[2] = { 3, 0 };

	if (!w.data || !dy)
		return;
	gpu->ops->embed(gpu, &w, bad, dy, 2);
	CHECK(gpu->ops->download(gpu, y, dy, sizeof(y)) == -1, "bad token not reported");
	msg = exl_backend_cuda_error(gpu);
	CHECK(msg && strstr(msg, "outside the vocabulary"), "bad token: %s", msg ? msg : "-");
	gpu->ops->embed(gpu, &w, good, dy, 2);
	CHECK(gpu->ops->download(gpu, y, dy, sizeof(y)) == 0, "after a failure: %s",
	      exl_backend_cuda_error(gpu));
	CHECK(memcmp(y, table + 3 * 32, 32 * sizeof(float)) == 0 &&
	      memcmp(y + 32, table, 32 * sizeof(float)) == 0, "embed after a failure");

	/* An unsupported weight type (IQ2_XXS: no kernel) is refused by name. */
	struct exl_weight iq2 = { EXL_IQ2_XXS, 4, 256, 66, w.data, EXL_LAYOUT_ROWS };
	gpu->ops->matmul(gpu, &iq2, dy, dy, 1);
	CHECK(gpu->ops->sync(gpu) == -1, "iq2_xxs matmul not refused");
	msg = exl_backend_cuda_error(gpu);
	CHECK(msg && strstr(msg, "iq2_xxs"), "iq2_xxs: %s", msg ? msg : "-");

	/* A page table entry outside the pool. */
	struct step s = { 0 };
	add_tokens(&s, 0, 0, 2);
	int32_t pt[1] = { 5 };
	struct exl_batch_desc d = { s.n, s.pos, s.seq, 1, 1, pt, 0, NULL };
	struct exl_kv_layer kv = { dy, dy, 4, 1, 4, 2, 0 };
	CHECK(gpu->ops->set_batch(gpu, &d) == 0, "set_batch");
	gpu->ops->kv_store(gpu, &kv, dy, dy);
	CHECK(gpu->ops->sync(gpu) == -1, "page outside the pool not refused");
	msg = exl_backend_cuda_error(gpu);
	CHECK(msg && strstr(msg, "outside the pool"), "bad page: %s", msg ? msg : "-");

	gpu->ops->unload(gpu, w.data);
	gpu->ops->free(gpu, dy);
}

int main(void)
{
	char err[512], name[256];
	int major, minor;

	/* Line by line, so a crash on the device machine still shows how far
	 * the run got. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!cuda_test_have_device())
		return SKIP_STATUS;
	if (exl_cuda_device_name(0, name, sizeof(name), &major, &minor, err, sizeof(err)) == 0)
		printf("device 0: %s, compute capability %d.%d\n", name, major, minor);
	cpu = exl_backend_cpu_create(1, err, sizeof(err));
	if (!cpu) {
		fprintf(stderr, "cpu backend: %s\n", err);
		return 1;
	}
	gpu = exl_backend_cuda_create(0, err, sizeof(err));
	if (!gpu) {
		fprintf(stderr, "cuda backend: %s\n", err);
		return 1;
	}
	printf("-- matmul\n");
	test_matmul();
	test_matmul_requantize();
	printf("-- embed\n");
	test_embed();
	printf("-- rowwise\n");
	test_rowwise();
	printf("-- rope\n");
	test_rope();
	printf("-- attention\n");
	test_attention();
	printf("-- mem_copy\n");
	test_mem_copy();
	printf("-- errors\n");
	test_errors();
	gpu->ops->destroy(gpu);
	cpu->ops->destroy(cpu);
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

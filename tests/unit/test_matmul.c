/* CPU matmul: for every weight type
 *  - the scalar reference equals a double-precision dot of the dequantized
 *    rows with x, within the error that quantizing x to 8 bits may add
 *    (bounded per element by half a step of its block's scale);
 *  - every SIMD kernel set this CPU runs equals the scalar reference within
 *    a float-rounding bound (|diff| <= 2e-5 * sum_k |w_k| (|x_k| + step_k));
 *    sets the CPU lacks are reported as SKIP;
 *  - running on a pool of 2 or 3 threads gives the same bits as one thread,
 *    and a vector alone the same bits as within a batch of n;
 *  - a set with a layout of its own for the type (a weight repacked at
 *    load, kernels/cpu/repack.h) gives from it the bits it gives from the
 *    GGUF rows, on 1, 2 and 3 threads;
 * over odd shapes (rows 1, 7, 33, 70; n 1, 2, 3, 5, 17; one block of
 * columns, a few, and many).  Bad calls get an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/repack.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

static int skipped;

/* avx2vnni after avx2: it must give avx2's bits (check_problem) */
static const char *const sets[] = { "avx2", "avx2vnni", "avx512", "avx512vnni", "amx" };

static double gauss(void)
{
	double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);

	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Activation block length the quantized types use for x. */
static int act_block(uint32_t t)
{
	switch (t) {
	case EXL_F32:
	case EXL_F16:
	case EXL_BF16:
		return 0;
	default:
		return (int)exl_dtype_info(t)->block_elems;
	}
}

struct problem {
	uint32_t type;
	int64_t rows, cols;
	int n;
	void *wq;
	float *wd;   /* dequantized weights */
	float *x;
	double *ref; /* exact dot of wd and x */
	double *tol_ref;  /* allowed |scalar - ref| */
	double *tol_simd; /* allowed |simd - scalar| */
	struct exl_weight w;
};

static void problem_refs(struct problem *p, double abs_tol, double rel_tol);

static void problem_alloc(struct problem *p, uint32_t type, int64_t rows, int64_t cols, int n)
{
	size_t rb = exl_dtype_row_bytes(type, (uint64_t)cols);

	p->type = type;
	p->rows = rows;
	p->cols = cols;
	p->n = n;
	p->wq = malloc(rb * (size_t)rows);
	p->wd = malloc(sizeof(float) * (size_t)(rows * cols));
	p->x = malloc(sizeof(float) * (size_t)(n * cols));
	p->ref = malloc(sizeof(double) * (size_t)(n * rows));
	p->tol_ref = malloc(sizeof(double) * (size_t)(n * rows));
	p->tol_simd = malloc(sizeof(double) * (size_t)(n * rows));
	p->w = (struct exl_weight){ .type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = p->wq };
}

static void problem_init(struct problem *p, uint32_t type, int64_t rows, int64_t cols, int n)
{
	size_t rb = exl_dtype_row_bytes(type, (uint64_t)cols);

	problem_alloc(p, type, rows, cols, n);
	float *row = malloc(sizeof(float) * (size_t)cols);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t k = 0; k < cols; k++)
			row[k] = (float)(gauss() * 0.05 * (1 + (r + k / 32) % 3));
		/* a negative outlier now and then, to exercise sign handling */
		if (r % 5 == 1)
			row[(r * 7) % cols] = -0.4f;
		exl_quantize_row(type, row, (uint8_t *)p->wq + rb * (size_t)r, cols);
		exl_dequantize_row(type, (uint8_t *)p->wq + rb * (size_t)r, p->wd + r * cols, cols);
	}
	free(row);
	for (int64_t k = 0; k < n * cols; k++)
		p->x[k] = (float)gauss() * (k % 13 == 0 ? 3.0f : 1.0f);
	problem_refs(p, 1e-6, 2e-6);
}

/* p's exact dots of wd and x, and the tolerances: |scalar - ref| within x's
 * rounding to its blocks' steps plus rel_tol * sum |w| (|x| + step) +
 * abs_tol, |simd - scalar| within 2e-5 of that sum + abs_tol. */
static void problem_refs(struct problem *p, double abs_tol, double rel_tol)
{
	const int64_t rows = p->rows, cols = p->cols;
	const int n = p->n, ab = act_block(p->type);

	for (int i = 0; i < n; i++) {
		const float *x = p->x + i * cols;

		for (int64_t r = 0; r < rows; r++) {
			const float *w = p->wd + r * cols;
			double dot = 0, absdot = 0, qerr = 0;

			for (int64_t k = 0; k < cols; k++) {
				double step = 0;

				if (ab) {
					int64_t b0 = k / ab * ab;
					double amax = 0;
					for (int64_t t = b0; t < b0 + ab; t++)
						amax = fmax(amax, fabs(x[t]));
					step = amax / 127;
				}
				dot += (double)w[k] * x[k];
				absdot += fabs(w[k]) * (fabs(x[k]) + step);
				/* rounding x to its block's step moves it by <= step / 2 */
				qerr += fabs(w[k]) * step / 2;
			}
			size_t o = (size_t)i * (size_t)rows + (size_t)r;
			p->ref[o] = dot;
			p->tol_ref[o] = qerr * 1.001 + rel_tol * absdot + abs_tol;
			p->tol_simd[o] = 2e-5 * absdot + abs_tol;
		}
	}
}

static void problem_free(struct problem *p)
{
	free(p->wq);
	free(p->wd);
	free(p->x);
	free(p->ref);
	free(p->tol_ref);
	free(p->tol_simd);
}

static int run(const char *set, struct exl_pool *pool, struct problem *p, float *y,
	       struct exl_matmul_scratch *s)
{
	char err[256];

	if (exl_cpu_kernels_select(set, err, sizeof(err)) < 0) {
		fprintf(stderr, "select %s: %s\n", set, err);
		return -1;
	}
	for (int64_t k = 0; k < p->n * p->rows; k++)
		y[k] = NAN;
	if (exl_cpu_matmul(pool, &p->w, p->x, y, p->n, s, err, sizeof(err)) < 0) {
		fprintf(stderr, "matmul: %s\n", err);
		return -1;
	}
	return 0;
}

/* Runs of the repacked w on no pool and on pools[0..1], and of the last
 * vector alone (decode) as within the batch: the bits yv of the rows. */
static void repacked_runs(struct problem *p, const char *set, const struct exl_weight *w, const float *yv,
			  struct exl_pool *const *pools, struct exl_matmul_scratch *s, const char *what, int d16)
{
	size_t ny = (size_t)p->n * (size_t)p->rows;
	float *yr = malloc(sizeof(float) * ny);
	char err[256];

	CHECK(yr != NULL, "%s: out of memory", what);
	if (!yr)
		return;
	for (int t = 0; t < 3; t++) {
		struct exl_pool *pool = t ? pools[t - 1] : NULL;

		if (t && !pool)
			continue;
		for (size_t o = 0; o < ny; o++)
			yr[o] = NAN;
		CHECK(exl_cpu_matmul(pool, w, p->x, yr, p->n, s, err, sizeof(err)) == 0, "%s: %s: repacked: %s",
		      what, set, err);
		CHECK(memcmp(yr, yv, sizeof(float) * ny) == 0,
		      "%s: %s: repacked differs from the rows (%d threads, decode16 %d)", what, set,
		      pool ? exl_pool_size(pool) : 1, d16);
	}
	if (p->n > 1) {
		CHECK(exl_cpu_matmul(NULL, w, p->x + (size_t)(p->n - 1) * (size_t)p->cols, yr, 1, s, err,
				     sizeof(err)) == 0, "%s", err);
		CHECK(memcmp(yr, yv + (size_t)(p->n - 1) * (size_t)p->rows, sizeof(float) * (size_t)p->rows) == 0,
		      "%s: %s: repacked, the last vector alone differs (decode16 %d)", what, set, d16);
	}
	free(yr);
}

/* p's weight repacked into the layout set reads (the set selected): the
 * bits yv it gave from the GGUF rows, with avx512vnni's decode both ways,
 * 16 rows a vector and avx2vnni's 8 (exl_cpu_set_decode16), whichever
 * this CPU would pick. */
static void check_repacked(struct problem *p, const char *set, uint32_t layout, const float *yv,
			   struct exl_pool *const *pools, struct exl_matmul_scratch *s, const char *what)
{
	size_t bytes = exl_cpu_repack_bytes(p->type, layout, p->rows, p->cols);
	void *pk = bytes ? malloc(bytes) : NULL;

	CHECK(pk && exl_cpu_repack(p->type, layout, p->wq, pk, p->rows, p->cols) == 0,
	      "%s: %s: repack into layout %u", what, set, layout);
	if (!pk)
		return;
	struct exl_weight w = p->w;

	w.data = pk;
	w.layout = layout;
	for (int d16 = 0; d16 < 2; d16++) {
		exl_cpu_set_decode16(d16);
		repacked_runs(p, set, &w, yv, pools, s, what, d16);
	}
	exl_cpu_set_decode16(-1);
	free(pk);
}

static void check_problem(struct problem *p, struct exl_pool *pool2, struct exl_pool *pool3,
			  struct exl_matmul_scratch *s)
{
	size_t ny = (size_t)p->n * (size_t)p->rows;
	float *ys = malloc(sizeof(float) * ny), *yv = malloc(sizeof(float) * ny);
	float *yt = malloc(sizeof(float) * ny), *ya = malloc(sizeof(float) * ny);
	int have_avx2 = 0;
	const char *tn = exl_dtype_info(p->type)->name;
	char what[96];

	snprintf(what, sizeof(what), "%s rows %lld cols %lld n %d", tn, (long long)p->rows,
		 (long long)p->cols, p->n);

	CHECK(run("scalar", NULL, p, ys, s) == 0, "%s: scalar run", what);
	int bad = 0;
	size_t first = 0;
	for (size_t o = 0; o < ny; o++) {
		if (!(fabs(ys[o] - p->ref[o]) <= p->tol_ref[o])) {
			if (!bad++)
				first = o;
		}
	}
	CHECK(bad == 0, "%s: scalar vs float dot: %d outputs off, first [%zu] %.7g vs %.7g (tol %.3g)",
	      what, bad, first, ys[first], p->ref[first], p->tol_ref[first]);

	for (size_t v = 0; v < sizeof(sets) / sizeof(sets[0]); v++) {
		if (!exl_cpu_kernels_available(sets[v]))
			continue;
		CHECK(run(sets[v], NULL, p, yv, s) == 0, "%s: %s run", what, sets[v]);
		bad = 0;
		for (size_t o = 0; o < ny; o++) {
			if (!(fabs(yv[o] - ys[o]) <= p->tol_simd[o])) {
				if (!bad++)
					first = o;
			}
		}
		CHECK(bad == 0, "%s: %s vs scalar: %d outputs off, first [%zu] %.7g vs %.7g (tol %.3g)",
		      what, sets[v], bad, first, yv[first], ys[first], p->tol_simd[first]);
		uint32_t layout = exl_cpu_matmul_layout(p->type);
		if (layout != EXL_LAYOUT_ROWS) {
			struct exl_pool *pools[2] = { pool2, pool3 };

			check_repacked(p, sets[v], layout, yv, pools, s, what);
		}
		/* the VNNI build of the avx2 kernels forms the same int32 sums
		 * and the same float steps */
		if (!strcmp(sets[v], "avx2")) {
			memcpy(ya, yv, sizeof(float) * ny);
			have_avx2 = 1;
		} else if (!strcmp(sets[v], "avx2vnni") && have_avx2) {
			CHECK(memcmp(ya, yv, sizeof(float) * ny) == 0, "%s: avx2vnni differs from avx2", what);
		}

		/* batch invariance: each vector alone gives the same bits as
		 * within the batch (a sequence decodes the same either way) */
		if (p->n > 1) {
			int last = p->n - 1;
			int vecs[2] = { 0, last };
			char err[256];

			for (int t = 0; t < 2; t++) {
				const float *x1 = p->x + (size_t)vecs[t] * (size_t)p->cols;

				CHECK(exl_cpu_matmul(NULL, &p->w, x1, yt, 1, s, err, sizeof(err)) == 0, "%s", err);
				CHECK(memcmp(yt, yv + (size_t)vecs[t] * (size_t)p->rows, sizeof(float) * (size_t)p->rows) == 0,
				      "%s: %s: vector %d alone differs from within the batch", what, sets[v], vecs[t]);
			}
		}

		struct exl_pool *pools[2] = { pool2, pool3 };
		for (int t = 0; t < 2; t++) {
			if (!pools[t])
				continue;
			CHECK(run(sets[v], pools[t], p, yt, s) == 0, "%s: %s threaded run", what, sets[v]);
			CHECK(memcmp(yt, yv, sizeof(float) * ny) == 0, "%s: %s on %d threads differs from 1",
			      what, sets[v], exl_pool_size(pools[t]));
		}
	}
	free(ys);
	free(yv);
	free(yt);
	free(ya);
}

static void test_errors(struct exl_matmul_scratch *s)
{
	char err[256] = "";
	float x[64] = { 0 }, y[4];
	uint8_t wq[64 * 34] = { 0 };
	struct exl_weight w = { .type = EXL_Q8_0, .rows = 2, .cols = 64, .row_bytes = 68, .data = wq };

	CHECK(exl_cpu_matmul(NULL, &w, x, y, 1, s, err, sizeof(err)) == 0, "valid call: %s", err);
	w.cols = 48;
	CHECK(exl_cpu_matmul(NULL, &w, x, y, 1, s, err, sizeof(err)) == -1 && *err, "partial block");
	w.cols = 64;
	w.row_bytes = 70;
	CHECK(exl_cpu_matmul(NULL, &w, x, y, 1, s, err, sizeof(err)) == -1, "wrong row_bytes");
	w.row_bytes = 68;
	CHECK(exl_cpu_matmul(NULL, &w, x, y, -1, s, err, sizeof(err)) == -1, "negative n");
	w.type = EXL_IQ2_XS;
	w.cols = 256;
	w.row_bytes = 74;
	err[0] = 0;
	CHECK(exl_cpu_matmul(NULL, &w, x, y, 1, s, err, sizeof(err)) == -1 && strstr(err, "iq2_xs"),
	      "unsupported type: %s", err);
	CHECK(exl_cpu_kernels_select("avx9000", err, sizeof(err)) == -1 && strstr(err, "avx9000"),
	      "unknown set");

	/* a weight in a layout the set in use does not read is refused,
	 * never read as rows: the scalar set has none, and no set has one
	 * for Q5_0 */
	uint8_t q4[8 * 2 * 18] = { 0 };
	struct exl_weight r8 = { .type = EXL_Q4_0, .rows = 8, .cols = 64, .row_bytes = 36, .data = q4,
				 .layout = EXL_LAYOUT_ROWS8 };
	CHECK(exl_cpu_kernels_select("scalar", err, sizeof(err)) == 0, "%s", err);
	err[0] = 0;
	CHECK(exl_cpu_matmul(NULL, &r8, x, y, 1, s, err, sizeof(err)) == -1 && strstr(err, "layout"),
	      "scalar, Q4_0 in layout ROWS8: %s", err);
	CHECK(exl_cpu_kernels_select(NULL, err, sizeof(err)) == 0, "%s", err);
	w = (struct exl_weight){ .type = EXL_Q5_0, .rows = 2, .cols = 64, .row_bytes = 44, .data = wq,
				 .layout = EXL_LAYOUT_ROWS8 };
	err[0] = 0;
	CHECK(exl_cpu_matmul(NULL, &w, x, y, 1, s, err, sizeof(err)) == -1 && strstr(err, "layout"),
	      "Q5_0 in layout ROWS8: %s", err);
	CHECK(exl_cpu_repack_bytes(EXL_Q5_0, EXL_LAYOUT_ROWS8, 8, 64) == 0 &&
	      exl_cpu_repack(EXL_Q5_0, EXL_LAYOUT_ROWS8, wq, q4, 2, 64) == -1 &&
	      exl_cpu_repack_bytes(EXL_Q4_0, EXL_LAYOUT_ROWS8, 9, 64) == 16 * 36 &&
	      exl_cpu_repack_bytes(EXL_Q8_0, EXL_LAYOUT_ROWS8, 9, 64) == 16 * 68 &&
	      exl_cpu_repack_bytes(EXL_IQ4_NL, EXL_LAYOUT_ROWS8, 9, 64) == 16 * 36 &&
	      exl_cpu_repack_bytes(EXL_Q4_K, EXL_LAYOUT_ROWS8, 1, 256) == 8 * 144 &&
	      exl_cpu_repack_bytes(EXL_Q4_K, EXL_LAYOUT_ROWS8, 8, 100) == 0, "repack sizes");
	CHECK(exl_cpu_kernels_select("scalar", err, sizeof(err)) == 0 &&
	      !strcmp(exl_cpu_kernels_name(), "scalar"), "select scalar");
}

/* MXFP4's scales over their whole range, in every set: rows whose levels
 * are all 0 but one block's, at a place that moves along the rows, its e
 * from 0 and 1 (the subnormal scales 2^-128, 2^-127) to 240, the other
 * blocks' e random (so a scale taken from the wrong block shows).  Each
 * output is then that one block's product isum * (d_w * d_x) in every
 * path of the avx2 family (adding zeros is exact), so those sets (and
 * avx512vnni and amx, which run avx2vnni's) must give the scalar's bits;
 * the avx512 set's tiles scale a block's four int32 partial dots apart
 * (tile_b32), so it is held to check_problem's float bound, as every set
 * is, with the reference's bound tight enough (no absolute 1e-6) that a
 * wrong subnormal scale fails.  cols 256 is
 * decode's whole group of 8 blocks, 288 one more, 96 fewer; rows past 8
 * and not a multiple of it; n 1 (decode) and 5 (8 rows in lanes). */
static void test_mxfp4_scales(struct exl_pool *pool2, struct exl_pool *pool3, struct exl_matmul_scratch *s)
{
	static const uint8_t es[] = { 0, 1, 2, 3, 64, 126, 127, 128, 129, 200, 240 };
	static const int64_t cols_list[] = { 256, 288, 96 };
	static const int ns[] = { 1, 5 };
	const int ne = (int)(sizeof(es) / sizeof(es[0]));
	const int64_t rows = 2 * ne + 3;
	const size_t rb0 = sizeof(block_mxfp4);

	for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(cols_list[0]); ci++) {
		for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
			const int64_t cols = cols_list[ci], nb = cols / 32;
			struct problem p;
			char what[96];

			problem_alloc(&p, EXL_MXFP4, rows, cols, ns[ni]);
			for (int64_t r = 0; r < rows; r++) {
				uint8_t *row = (uint8_t *)p.wq + p.w.row_bytes * (size_t)r;

				for (int64_t b = 0; b < nb; b++) {
					block_mxfp4 *blk = (block_mxfp4 *)(void *)(row + rb0 * (size_t)b);
					int live = b == (r * 3) % nb;

					blk->e = live ? es[r % ne] : (uint8_t)(100 + rand() % 50);
					for (int j = 0; j < 16; j++)
						blk->qs[j] = live ? (uint8_t)rand() : 0;
				}
				exl_dequantize_row(EXL_MXFP4, row, p.wd + r * cols, cols);
			}
			for (int64_t k = 0; k < ns[ni] * cols; k++)
				p.x[k] = (float)gauss();
			problem_refs(&p, 1e-44, 1e-4);
			snprintf(what, sizeof(what), "mxfp4 scales cols %lld n %d", (long long)cols, ns[ni]);
			check_problem(&p, pool2, pool3, s);

			size_t ny = (size_t)p.n * (size_t)rows;
			float *ys = malloc(sizeof(float) * ny), *yv = malloc(sizeof(float) * ny);
			int nonzero = 0;

			CHECK(ys && yv && run("scalar", NULL, &p, ys, s) == 0, "%s: scalar", what);
			for (size_t o = 0; o < ny; o++)
				nonzero += ys[o] != 0;
			CHECK(nonzero == (int)ny, "%s: %d outputs of %zu zero", what, (int)ny - nonzero, ny);
			for (size_t v = 0; v < sizeof(sets) / sizeof(sets[0]); v++) {
				if (!exl_cpu_kernels_available(sets[v]) || !strcmp(sets[v], "avx512"))
					continue;
				CHECK(run(sets[v], NULL, &p, yv, s) == 0, "%s: %s run", what, sets[v]);
				CHECK(memcmp(ys, yv, sizeof(float) * ny) == 0, "%s: %s differs from scalar", what,
				      sets[v]);
			}
			free(ys);
			free(yv);
			problem_free(&p);
		}
	}
}

/* exl_cpu_matmul_n gives, for every weight, the bits of a call of its own:
 * weights of one act (three Q4_0, as q, k and v) in one job, and weights
 * of two (Q4_0 and Q6_K, as q and a Q4_K_M file's v) one call each. */
static void test_multi(struct exl_pool *pool, struct exl_matmul_scratch *s)
{
	static const uint32_t mixes[2][3] = { { EXL_Q4_0, EXL_Q4_0, EXL_Q4_0 }, { EXL_Q4_0, EXL_Q6_K, EXL_Q4_0 } };
	static const int64_t rows[3] = { 70, 7, 33 };
	static const int ns[2] = { 1, 17 };
	static const char *const all[] = { "scalar", "avx2", "avx2vnni", "avx512", "avx512vnni", "amx" };
	char err[256];

	for (int mi = 0; mi < 2; mi++) {
		for (int ni = 0; ni < 2; ni++) {
			struct problem p[3];
			const struct exl_weight *w[3];
			float *y1[3], *yn[3];

			for (int i = 0; i < 3; i++) {
				problem_init(&p[i], mixes[mi][i], rows[i], 512, ns[ni]);
				w[i] = &p[i].w;
				y1[i] = malloc(sizeof(float) * (size_t)(ns[ni] * rows[i]));
				yn[i] = malloc(sizeof(float) * (size_t)(ns[ni] * rows[i]));
			}
			for (size_t v = 0; v < sizeof(all) / sizeof(all[0]); v++) {
				if (!exl_cpu_kernels_available(all[v]))
					continue;
				CHECK(exl_cpu_kernels_select(all[v], err, sizeof(err)) == 0, "%s", err);
				for (int i = 0; i < 3; i++)
					CHECK(exl_cpu_matmul(pool, w[i], p[0].x, y1[i], ns[ni], s, err, sizeof(err)) == 0,
					      "%s", err);
				CHECK(exl_cpu_matmul_n(pool, w, 3, p[0].x, yn, ns[ni], s, err, sizeof(err)) == 0,
				      "matmul_n: %s", err);
				for (int i = 0; i < 3; i++)
					CHECK(memcmp(y1[i], yn[i], sizeof(float) * (size_t)(ns[ni] * rows[i])) == 0,
					      "%s, mix %d, n %d: weight %d of 3 differs from its own call", all[v], mi,
					      ns[ni], i);
			}
			for (int i = 0; i < 3; i++) {
				free(y1[i]);
				free(yn[i]);
				problem_free(&p[i]);
			}
		}
	}
	{
		float x[64] = { 0 }, *y[5];
		float yb[5][4];
		uint8_t wq[64 * 34] = { 0 };
		struct exl_weight w1 = { .type = EXL_Q8_0, .rows = 2, .cols = 64, .row_bytes = 68, .data = wq };
		const struct exl_weight *w5[5] = { &w1, &w1, &w1, &w1, &w1 };

		for (int i = 0; i < 5; i++)
			y[i] = yb[i];
		err[0] = 0;
		CHECK(exl_cpu_matmul_n(NULL, w5, 0, x, y, 1, s, err, sizeof(err)) == -1 && *err, "0 weights");
		err[0] = 0;
		CHECK(exl_cpu_matmul_n(NULL, w5, 5, x, y, 1, s, err, sizeof(err)) == -1 && *err,
		      "5 weights: %s", err);
	}
}

/* test_matmul [TYPE | errors]: one weight type's cases (meson runs one test
 * per type), the argument checks, or with no argument everything. */
int main(int argc, char **argv)
{
	static const uint32_t types[] = { EXL_F32, EXL_F16, EXL_BF16, EXL_Q8_0, EXL_Q4_0, EXL_Q4_1,
					  EXL_Q5_0, EXL_Q5_1, EXL_IQ4_NL, EXL_MXFP4, EXL_Q2_K, EXL_Q3_K,
					  EXL_Q4_K, EXL_Q5_K, EXL_Q6_K, EXL_IQ4_XS };
	const char *only = argc > 1 ? argv[1] : NULL;
	bool known = !only || !strcmp(only, "errors");
	static const int64_t rows_list[] = { 1, 7, 33, 70 };
	static const int ns[] = { 1, 2, 3, 5, 17 };
	struct exl_matmul_scratch s = { 0 };
	char err[256];
	struct exl_pool *pool2 = exl_pool_create(2, err, sizeof(err));
	struct exl_pool *pool3 = exl_pool_create(3, err, sizeof(err));

	CHECK(pool2 && pool3, "pool: %s", err);
	for (size_t v = 0; v < sizeof(sets) / sizeof(sets[0]); v++) {
		if (exl_cpu_kernels_available(sets[v])) {
			printf("kernel set %s: tested\n", sets[v]);
		} else {
			printf("SKIP kernel set %s: this CPU lacks its instructions (or the OS does not enable them)\n", sets[v]);
			skipped++;
		}
	}

	srand(1234);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		uint32_t type = types[t];
		int64_t be = exl_dtype_info(type)->block_elems;

		if (only && strcmp(only, exl_dtype_info(type)->name))
			continue;
		known = true;
		/* one block, a few, and many (kernels step 8 and 4 blocks at a
		 * time: 13 blocks leave 4 + 1 over, 9 super-blocks 8 + 1);
		 * float types odd lengths, and one whose x overflows half the
		 * L1, which decode reads in tiles of rows (EXL_FLOAT_TILE_LOOP) */
		int64_t cols_list[5] = { be == 1 ? 1 : be, be == 1 ? 37 : 3 * be,
					 be == 1 ? 300 : (be == 32 ? 2048 : 1536),
					 be == 1 ? 16 : (be == 32 ? 13 * 32 : 9 * 256),
					 be == 1 ? 4133 : 0 };

		for (int ci = 0; ci < 5; ci++) {
			if (!cols_list[ci])
				continue;
			for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++) {
				for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
					struct problem p;

					/* keep the large-cols cases to a few shapes */
					if (ci == 2 && (ri == 0 || ni == 1 || ni == 3))
						continue;
					/* a whole group of 8 super-blocks: rows 7 and 33, n 1 and 17 */
					if (ci == 3 && be == 256 && (ri == 0 || ri == 3 || (ni != 0 && ni != 4)))
						continue;
					if (ci == 4 && ri < 2)
						continue;
					problem_init(&p, type, rows_list[ri], cols_list[ci], ns[ni]);
					check_problem(&p, pool2, pool3, &s);
					problem_free(&p);
				}
			}
		}
		if (type == EXL_MXFP4)
			test_mxfp4_scales(pool2, pool3, &s);
		printf("type %-5s done\n", exl_dtype_info(type)->name);
	}
	if (!known) {
		fprintf(stderr, "test_matmul: unknown type '%s'\n", only);
		return 2;
	}
	if (!only || !strcmp(only, "errors")) {
		test_multi(pool2, &s);
		test_errors(&s);
	}

	exl_matmul_scratch_free(&s);
	if (pool2)
		exl_pool_destroy(pool2);
	if (pool3)
		exl_pool_destroy(pool3);
	printf("%d passed, %d failed, %d skipped\n", check_count - check_failures, check_failures, skipped);
	return check_failures ? 1 : 0;
}

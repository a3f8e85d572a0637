/* Speed of the CPU backend's non-matmul ops and of the worker pool's
 * dispatch, on a TinyLlama-1.1B layer shape (dim 2048, 32 heads, 4 KV heads
 * of 64, FFN 5632).  A benchmark, not a test: never run by meson test.
 *
 *   bench_cpu_ops [--threads N] [--variant scalar|avx2|avx512] [--ctx N]
 *
 * Prints microseconds per call (median of repeated timings) for a decode
 * step (1 token at position ctx - 1) and for a 128-token prefill chunk
 * ending at ctx, and the pool's dispatch overhead for an empty job.  With
 * --threads 1 the times are the thread's CPU time, so they hold on a busy
 * machine; with more, wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"

#define DIM 2048
#define N_HEAD 32
#define N_KV 4
#define HD 64
#define FF 5632
#define PS 16

/* With one thread, the thread's CPU time: on a shared machine it does not
 * count the time other processes had the core. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_us(void)
{
	struct timespec t;

	clock_gettime(clock_id, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n);

	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return p;
}

static void fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
}

struct env {
	struct exl_pool *pool;
	const struct exl_cpu_ops *k;
	struct exl_cpu_batch batch;
	struct exl_kv_layer kv;
	struct exl_rope_cache rc;
	struct exl_attn_scratch as;
	unsigned id;
	int n;
	float *x, *y, *w, *q, *kk, *v, *out, *g, *u;
};

enum op { OP_RMSNORM, OP_ROPE_Q, OP_ROPE_K, OP_KV_STORE, OP_ATTENTION, OP_SWIGLU, OP_ADD,
	  OP_SOFTMAX, OP_COUNT };
static const char *const op_names[] = { "rmsnorm", "rope q", "rope k", "kv_store",
					"attention", "swiglu", "add", "softmax 32000" };

static void run_op(struct env *e, enum op op)
{
	char err[200];
	struct exl_rope_params rp = { HD, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 };

	switch (op) {
	case OP_RMSNORM:
		exl_cpu_rmsnorm(e->pool, e->k, e->y, e->x, e->w, e->n, DIM, 1e-5f);
		break;
	case OP_ROPE_Q:
		/* a new batch id each time: the tables are rebuilt, as for the
		 * first layer of a pass */
		exl_cpu_rope(e->pool, e->k, &e->rc, ++e->id, e->batch.pos, e->q, e->n, N_HEAD, HD,
			     &rp, err, sizeof(err));
		break;
	case OP_ROPE_K:
		exl_cpu_rope(e->pool, e->k, &e->rc, e->id, e->batch.pos, e->kk, e->n, N_KV, HD, &rp,
			     err, sizeof(err));
		break;
	case OP_KV_STORE:
		exl_cpu_kv_store(e->pool, e->k, &e->batch, &e->kv, e->kk, e->v);
		break;
	case OP_ATTENTION:
		exl_cpu_attention(e->pool, e->k, &e->as, &e->batch, &e->kv, e->q, e->out, N_HEAD,
				  &(struct exl_attn_params){ 0.125f, 0.0f, 0, NULL, false }, err, sizeof(err));
		break;
	case OP_SWIGLU:
		exl_cpu_swiglu(e->pool, e->k, e->g, e->u, (size_t)e->n * FF);
		break;
	case OP_ADD:
		exl_cpu_add(e->pool, e->k, e->x, e->y, (size_t)e->n * DIM);
		break;
	case OP_SOFTMAX:
		exl_cpu_softmax(e->pool, e->k, e->g, 1, 32000);
		break;
	default:
		break;
	}
}

static double time_op(struct env *e, enum op op)
{
	enum { REPS = 31 };
	double t[REPS];
	int inner = e->n == 1 ? 20 : 2;

	run_op(e, op);
	for (int r = 0; r < REPS; r++) {
		double t0 = now_us();

		for (int i = 0; i < inner; i++)
			run_op(e, op);
		t[r] = (now_us() - t0) / inner;
	}
	qsort(t, REPS, sizeof(t[0]), cmp_double);
	return t[REPS / 2];
}

static void empty_fn(void *ctx, int ith, int nth)
{
	(void)ctx;
	(void)ith;
	(void)nth;
}

static void bench(struct env *e, int n, int ctx)
{
	const int n_pages = (ctx + PS - 1) / PS;
	int32_t *table = xmalloc((size_t)n_pages * sizeof(int32_t));
	int32_t *pos = xmalloc((size_t)n * sizeof(int32_t)), *seq = xmalloc((size_t)n * sizeof(int32_t));
	char err[200];

	for (int p = 0; p < n_pages; p++)
		table[p] = n_pages - 1 - p;
	for (int t = 0; t < n; t++)
		pos[t] = ctx - n + t;
	struct exl_batch_desc d = { n, pos, seq, 1, n_pages, table, 0, NULL };
	if (exl_cpu_batch_set(&e->batch, &d, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	e->kv.k = xmalloc((size_t)n_pages * N_KV * PS * HD * 2);
	e->kv.v = xmalloc((size_t)n_pages * N_KV * PS * HD * 2);
	e->kv.page_size = PS;
	e->kv.n_kv_heads = N_KV;
	e->kv.head_dim = HD;
	e->kv.n_pages = n_pages;
	if (exl_cpu_kv_check(&e->batch, &e->kv, 0, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	e->n = n;
	e->x = xmalloc((size_t)n * DIM * 4);
	e->y = xmalloc((size_t)n * DIM * 4);
	e->w = xmalloc(DIM * 4);
	e->q = xmalloc((size_t)n * N_HEAD * HD * 4);
	e->out = xmalloc((size_t)n * N_HEAD * HD * 4);
	e->kk = xmalloc((size_t)n * N_KV * HD * 4);
	e->v = xmalloc((size_t)n * N_KV * HD * 4);
	e->g = xmalloc((size_t)(n * FF > 32000 ? n * FF : 32000) * 4);
	e->u = xmalloc((size_t)n * FF * 4);
	fill(e->x, (size_t)n * DIM);
	fill(e->w, DIM);
	fill(e->q, (size_t)n * N_HEAD * HD);
	fill(e->kk, (size_t)n * N_KV * HD);
	fill(e->v, (size_t)n * N_KV * HD);
	fill(e->g, (size_t)n * FF);
	fill(e->u, (size_t)n * FF);
	/* the whole window written, so attention reads real F16 values */
	for (int p = 0; p < ctx; p += n) {
		for (int t = 0; t < n; t++)
			pos[t] = p + t < ctx ? p + t : ctx - 1;
		exl_cpu_batch_set(&e->batch, &d, err, sizeof(err));
		exl_cpu_kv_store(e->pool, e->k, &e->batch, &e->kv, e->kk, e->v);
	}
	for (int t = 0; t < n; t++)
		pos[t] = ctx - n + t;
	exl_cpu_batch_set(&e->batch, &d, err, sizeof(err));
	exl_cpu_kv_check(&e->batch, &e->kv, 0, err, sizeof(err));

	printf("%s, %d token%s at positions %d..%d:\n", e->k->name, n, n > 1 ? "s" : "",
	       ctx - n, ctx - 1);
	for (int op = 0; op < OP_COUNT; op++)
		printf("  %-14s %10.2f us\n", op_names[op], time_op(e, (enum op)op));
	free(e->kv.k);
	free(e->kv.v);
	free(e->x);
	free(e->y);
	free(e->w);
	free(e->q);
	free(e->out);
	free(e->kk);
	free(e->v);
	free(e->g);
	free(e->u);
	free(table);
	free(pos);
	free(seq);
}

int main(int argc, char **argv)
{
	int threads = 0, ctx = 1024;
	const char *variant = NULL;
	char err[200];
	struct env e;

	memset(&e, 0, sizeof(e));
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--variant") && i + 1 < argc)
			variant = argv[++i];
		else if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
			ctx = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--threads N] [--variant NAME] [--ctx N]\n",
				argv[0]);
			return 2;
		}
	}
	if (ctx < 128 || ctx > 1 << 20) {
		fprintf(stderr, "--ctx must be 128..2^20\n");
		return 2;
	}
	e.k = variant ? exl_cpu_ops_get(variant) : exl_cpu_ops_best();
	if (!e.k) {
		fprintf(stderr, "variant %s: unknown or not supported by this CPU\n", variant);
		return 2;
	}
	e.pool = exl_pool_create(threads, err, sizeof(err));
	if (!e.pool) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (exl_pool_size(e.pool) == 1)
		clock_id = CLOCK_THREAD_CPUTIME_ID;
	printf("%d threads (%s time)\n", exl_pool_size(e.pool),
	       clock_id == CLOCK_MONOTONIC ? "wall" : "CPU");
	{
		enum { R = 20000 };
		double t0 = now_us();

		for (int i = 0; i < R; i++)
			exl_pool_run(e.pool, empty_fn, NULL);
		printf("pool dispatch (empty job, back to back): %.2f us\n", (now_us() - t0) / R);
	}
	bench(&e, 1, ctx);
	bench(&e, 128, ctx);
	exl_rope_cache_free(&e.rc);
	exl_attn_scratch_free(&e.as);
	exl_cpu_batch_free(&e.batch);
	exl_pool_destroy(e.pool);
	return 0;
}

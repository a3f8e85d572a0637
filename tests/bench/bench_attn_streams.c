/* Attention of a batched decode step: S sequences, one new token each, over
 * their own KV pages, for L layers whose pools are separate (so the KV comes
 * from memory, as in the daemon's 16-stream step, not from cache).  A
 * benchmark, not a test: never run by meson test.
 *
 *   bench_attn_streams [--threads N] [--variant NAME] [--streams S]
 *                      [--ctx C] [--layers L] [--heads H] [--kv-heads K]
 *                      [--head-dim D] [--page P]
 *
 * Defaults: the 134M-parameter model of bench_batch.sh (12 layers of 12
 * heads of 64, MHA), 16 streams at 96 positions, pages of 32.  Prints the
 * median time of a step's attention over all layers and the rate at which
 * it reads K and V. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/host_mem.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"

/* With one thread, the thread's CPU time: on a shared machine it does not
 * count the time other processes had the core. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_s(void)
{
	struct timespec t;

	clock_gettime(clock_id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void *xcalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory for %zu bytes\n", n);
		exit(1);
	}
	return p;
}

static void fill(float *x, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(((i + seed) * 2654435761u) % 2001) / 1000.0f - 1.0f;
}

static int arg_int(int argc, char **argv, int *i, const char *name, int *out)
{
	if (strcmp(argv[*i], name) || *i + 1 >= argc)
		return 0;
	*out = atoi(argv[++*i]);
	return 1;
}

int main(int argc, char **argv)
{
	int threads = 0, streams = 16, ctx = 96, layers = 12, heads = 12, kv_heads = 12;
	int hd = 64, ps = 32;
	const char *variant = NULL;
	char err[200];

	for (int i = 1; i < argc; i++) {
		if (arg_int(argc, argv, &i, "--threads", &threads) ||
		    arg_int(argc, argv, &i, "--streams", &streams) ||
		    arg_int(argc, argv, &i, "--ctx", &ctx) ||
		    arg_int(argc, argv, &i, "--layers", &layers) ||
		    arg_int(argc, argv, &i, "--heads", &heads) ||
		    arg_int(argc, argv, &i, "--kv-heads", &kv_heads) ||
		    arg_int(argc, argv, &i, "--head-dim", &hd) ||
		    arg_int(argc, argv, &i, "--page", &ps))
			continue;
		if (!strcmp(argv[i], "--variant") && i + 1 < argc) {
			variant = argv[++i];
			continue;
		}
		fprintf(stderr, "usage: %s [--threads N] [--variant NAME] [--streams S] [--ctx C] "
			"[--layers L] [--heads H] [--kv-heads K] [--head-dim D] [--page P]\n", argv[0]);
		return 2;
	}
	if (streams < 1 || streams > 256 || ctx < 1 || ctx > 1 << 16 || layers < 1 ||
	    layers > 256 || kv_heads < 1 || heads < kv_heads || heads % kv_heads || hd < 16 ||
	    hd > 256 || hd % 16 || ps < 1 || ps > 1024) {
		fprintf(stderr, "bad shape\n");
		return 2;
	}
	const struct exl_cpu_ops *k = variant ? exl_cpu_ops_get(variant) : exl_cpu_ops_best();
	if (!k) {
		fprintf(stderr, "variant %s: unknown or not supported by this CPU\n", variant);
		return 2;
	}
	struct exl_pool *pool = exl_pool_create(threads, err, sizeof(err));
	if (!pool) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (exl_pool_size(pool) == 1)
		clock_id = CLOCK_THREAD_CPUTIME_ID;

	/* every sequence's pages spread over its layer's pool, interleaved
	 * with the others' as a pool that many jobs share ends up */
	const int per_seq = (ctx + ps - 1) / ps, n_pages = per_seq * streams;
	int32_t *table = xcalloc((size_t)n_pages * sizeof(int32_t));
	int32_t *pos = xcalloc((size_t)streams * sizeof(int32_t));
	int32_t *seq = xcalloc((size_t)streams * sizeof(int32_t));

	for (int s = 0; s < streams; s++) {
		pos[s] = ctx - 1 - (s * 7) % (ctx < 8 ? 1 : ctx / 8);
		seq[s] = s;
		for (int p = 0; p < per_seq; p++)
			table[(size_t)s * per_seq + p] = p * streams + s;
	}
	struct exl_batch_desc d = { streams, pos, seq, streams, per_seq, table, 0, NULL };
	struct exl_cpu_batch batch;
	struct exl_attn_scratch as;

	memset(&batch, 0, sizeof(batch));
	memset(&as, 0, sizeof(as));
	if (exl_cpu_batch_set(&batch, &d, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const size_t page_elems = (size_t)kv_heads * ps * hd;
	struct exl_kv_layer *kv = xcalloc((size_t)layers * sizeof(*kv));
	uint64_t kv_bytes = 0;

	for (int l = 0; l < layers; l++) {
		/* as the daemon's pools: backend memory, in huge pages */
		uint16_t *kb = exl_host_alloc((size_t)n_pages * page_elems * 2);
		uint16_t *vb = exl_host_alloc((size_t)n_pages * page_elems * 2);
		float *tmp = xcalloc(page_elems * sizeof(float));

		if (!kb || !vb) {
			fprintf(stderr, "out of memory for the KV of layer %d\n", l);
			return 1;
		}

		fill(tmp, page_elems, (unsigned)l);
		for (int p = 0; p < n_pages; p++) {
			k->f32_to_f16(kb + (size_t)p * page_elems, tmp, (int)page_elems);
			k->f32_to_f16(vb + (size_t)p * page_elems, tmp, (int)page_elems);
		}
		free(tmp);
		kv[l] = (struct exl_kv_layer){ .k = kb, .v = vb, .page_size = ps,
					       .n_kv_heads = kv_heads, .head_dim = hd,
					       .n_pages = n_pages };
		if (exl_cpu_kv_check(&batch, &kv[l], 0, err, sizeof(err))) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
	}
	for (int s = 0; s < streams; s++)
		kv_bytes += (uint64_t)(pos[s] + 1) * kv_heads * hd * 2 * 2 * layers;

	float *q = xcalloc((size_t)streams * heads * hd * sizeof(float));
	float *out = xcalloc((size_t)streams * heads * hd * sizeof(float));
	/* a buffer larger than the caches read between steps, as the step's
	 * weights are */
	const size_t flush_n = getenv("NOFLUSH") ? 64 : (size_t)64 << 20;
	unsigned char *flush = xcalloc(flush_n);
	struct exl_attn_params ap = { 1.0f / 8.0f, 0.0f, 0, NULL, false };
	const int REPS = getenv("REPS") ? atoi(getenv("REPS")) : 15;
	double *t = xcalloc((size_t)REPS * sizeof(double));
	volatile unsigned sink = 0;

	fill(q, (size_t)streams * heads * hd, 99);
	for (int r = 0; r < REPS; r++) {
		for (size_t i = 0; i < flush_n; i += 64)
			sink += flush[i]++;
		double t0 = now_s();

		for (int l = 0; l < layers; l++)
			if (exl_cpu_attention(pool, k, &as, &batch, &kv[l], q, out, heads, &ap, err,
					      sizeof(err))) {
				fprintf(stderr, "%s\n", err);
				return 1;
			}
		t[r] = now_s() - t0;
	}
	qsort(t, REPS, sizeof(t[0]), cmp_double);
	printf("%s, %d threads (%s time): %d streams at about %d positions, %d layers of %d heads (%d KV) "
	       "of %d, pages of %d\n", k->name, exl_pool_size(pool),
	       clock_id == CLOCK_MONOTONIC ? "wall" : "CPU", streams, ctx, layers, heads,
	       kv_heads, hd, ps);
	printf("attention: %.3f ms a step (best %.3f), %.2f MB of K and V: %.1f GB/s (best %.1f)\n",
	       t[REPS / 2] * 1e3, t[0] * 1e3, kv_bytes / 1e6, kv_bytes / t[REPS / 2] / 1e9,
	       kv_bytes / t[0] / 1e9);

	for (int l = 0; l < layers; l++) {
		exl_host_free(kv[l].k, (size_t)n_pages * page_elems * 2);
		exl_host_free(kv[l].v, (size_t)n_pages * page_elems * 2);
	}
	free(kv);
	free(t);
	free(flush);
	free(q);
	free(out);
	free(table);
	free(pos);
	free(seq);
	exl_attn_scratch_free(&as);
	exl_cpu_batch_free(&batch);
	exl_pool_destroy(pool);
	return (int)(sink & 0);
}

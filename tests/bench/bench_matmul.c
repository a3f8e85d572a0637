/* Matmul benchmark (not a test): GFLOP/s and weight GB/s per weight type
 * for decode-shaped (n = 1) and prefill-shaped (n = 128) products at
 * TinyLlama-1.1B sizes, and the matmul time of whole TinyLlama tokens.
 *
 *   bench_matmul [--threads N] [--types q8_0,q4_0,...] [--kernels SET]
 *                [--n LIST] [--seconds S] [--model] [--hot]
 *                [--shapes ROWSxCOLS,...]
 *
 * Decode-shaped runs cycle through enough copies of the matrix to overflow
 * the last-level cache, so GB/s is memory bandwidth, as in a real decode.
 * --model runs the 155 matmuls of one TinyLlama token (22 layers of
 * q, k, v, o, gate, up, down, then the output head) with distinct weights
 * for every layer, for n = 1 (decode tok/s) and n = 128 (prefill tok/s);
 * with --n 1 or --n 128 only that one.
 * --hot runs decode shapes on one copy that stays in cache: the kernels'
 * compute ceiling rather than memory bandwidth.
 * --shapes replaces the four TinyLlama shapes with others (the 134M model
 * of bench_batch.sh: 768x768,2048x768,768x2048,32000x768). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/repack.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t rng = 12345;

static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.1f;
}

/* rows x cols of type t: 64 distinct quantized rows, repeated. */
static void *make_weights(uint32_t t, int64_t rows, int64_t cols, size_t *bytes)
{
	size_t rb = exl_dtype_row_bytes(t, (uint64_t)cols);
	uint8_t *w = malloc(rb * (size_t)rows);
	float *row = malloc(sizeof(float) * (size_t)cols);

	if (!w || !row) {
		fprintf(stderr, "out of memory\n");
		free(w);
		free(row);
		return NULL;
	}
	for (int64_t r = 0; r < rows; r++) {
		if (r < 64) {
			for (int64_t k = 0; k < cols; k++)
				row[k] = frand();
			exl_quantize_row(t, row, w + rb * (size_t)r, cols);
		} else {
			memcpy(w + rb * (size_t)r, w + rb * (size_t)(r % 64), rb);
		}
	}
	free(row);
	*bytes = rb * (size_t)rows;
	/* as the daemon holds it: in the set's own layout where it has one */
	uint32_t layout = exl_cpu_matmul_layout(t);
	if (layout != EXL_LAYOUT_ROWS) {
		size_t pb = exl_cpu_repack_bytes(t, layout, rows, cols);
		uint8_t *p = pb ? malloc(pb) : NULL;

		if (!p || exl_cpu_repack(t, layout, w, p, rows, cols)) {
			fprintf(stderr, "cannot repack type %u\n", t);
			free(p);
			free(w);
			return NULL;
		}
		free(w);
		w = p;
		*bytes = pb;
	}
	return w;
}

struct shape {
	const char *name;
	int64_t rows, cols;
};

static const struct shape tinyllama_shapes[] = {
	{ "attn 2048x2048", 2048, 2048 },
	{ "ffn up 5632x2048", 5632, 2048 },
	{ "ffn down 2048x5632", 2048, 5632 },
	{ "output 32000x2048", 32000, 2048 },
};

#define MAX_SHAPES 16
static struct shape shapes[MAX_SHAPES];
static char shape_names[MAX_SHAPES][32];
static size_t n_shapes;

/* "768x768,32000x768": 0, or -1 with a message. */
static int parse_shapes(const char *list)
{
	const char *p = list;

	n_shapes = 0;
	while (*p) {
		long long rows, cols;
		int used = 0;

		if (n_shapes == MAX_SHAPES || sscanf(p, "%lldx%lld%n", &rows, &cols, &used) != 2 ||
		    rows < 1 || cols < 1 || rows > (1 << 20) || cols > (1 << 20) || (p[used] && p[used] != ',')) {
			fprintf(stderr, "bad --shapes '%s': want up to %d ROWSxCOLS, comma-separated\n", list,
				MAX_SHAPES);
			return -1;
		}
		snprintf(shape_names[n_shapes], sizeof(shape_names[0]), "%lldx%lld", rows, cols);
		shapes[n_shapes] = (struct shape){ shape_names[n_shapes], rows, cols };
		n_shapes++;
		p += used + (p[used] == ',');
	}
	return n_shapes ? 0 : -1;
}

static int hot; /* --hot: decode from cache, to see the compute ceiling */

static int bench_shape(struct exl_pool *pool, uint32_t t, const struct shape *sh, int n, double seconds)
{
	size_t bytes;
	void *w0 = make_weights(t, sh->rows, sh->cols, &bytes);
	char err[256];
	int copies = 1;

	if (!w0)
		return -1;
	if (n == 1 && !hot) {
		/* past the last-level cache: at least 256 MiB in all */
		copies = (int)((256u << 20) / bytes) + 1;
		if (copies > 64)
			copies = 64;
	}
	void **ws = calloc((size_t)copies, sizeof(void *));
	ws[0] = w0;
	for (int i = 1; i < copies; i++) {
		ws[i] = malloc(bytes);
		if (!ws[i]) {
			copies = i;
			break;
		}
		memcpy(ws[i], w0, bytes);
	}
	float *x = malloc(sizeof(float) * (size_t)(n * sh->cols));
	float *y = malloc(sizeof(float) * (size_t)(n * sh->rows));
	for (int64_t k = 0; k < n * sh->cols; k++)
		x[k] = frand() * 10;

	struct exl_matmul_scratch s = { 0 };
	struct exl_weight w = { .type = t, .rows = sh->rows, .cols = sh->cols,
				.row_bytes = exl_dtype_row_bytes(t, (uint64_t)sh->cols),
				.layout = exl_cpu_matmul_layout(t) };
	int iters = 0, rc = 0;
	double t0 = now(), t1;

	do {
		w.data = ws[iters % copies];
		if (exl_cpu_matmul(pool, &w, x, y, n, &s, err, sizeof(err)) < 0) {
			fprintf(stderr, "matmul: %s\n", err);
			rc = -1;
			break;
		}
		iters++;
		t1 = now();
	} while (t1 - t0 < seconds || iters < 3);

	if (!rc) {
		double dt = (t1 - t0) / iters;
		double flops = 2.0 * (double)sh->rows * (double)sh->cols * n;

		printf("%-5s %-20s n=%-4d %9.3f ms  %7.1f GFLOP/s  %6.1f GB/s\n", exl_dtype_info(t)->name,
		       sh->name, n, dt * 1e3, flops / dt * 1e-9, (double)bytes / dt * 1e-9);
	}
	exl_matmul_scratch_free(&s);
	for (int i = 0; i < copies; i++)
		free(ws[i]);
	free(ws);
	free(x);
	free(y);
	return rc;
}

/* One TinyLlama token's matmuls: 22 layers x 7 + output head. */
static int bench_model(struct exl_pool *pool, uint32_t t, double seconds, int do_decode, int do_prefill)
{
	static const int64_t layer_shapes[7][2] = {
		{ 2048, 2048 }, { 256, 2048 }, { 256, 2048 }, { 2048, 2048 },
		{ 5632, 2048 }, { 5632, 2048 }, { 2048, 5632 },
	};
	enum { LAYERS = 22, NW = LAYERS * 7 + 1 };
	struct exl_weight w[NW];
	size_t total = 0;
	char err[256];
	int rc = 0;

	for (int i = 0; i < NW; i++) {
		int64_t rows = i < LAYERS * 7 ? layer_shapes[i % 7][0] : 32000;
		int64_t cols = i < LAYERS * 7 ? layer_shapes[i % 7][1] : 2048;
		size_t bytes;

		w[i] = (struct exl_weight){ .type = t, .rows = rows, .cols = cols,
					    .row_bytes = exl_dtype_row_bytes(t, (uint64_t)cols),
					    .layout = exl_cpu_matmul_layout(t) };
		w[i].data = make_weights(t, rows, cols, &bytes);
		if (!w[i].data) {
			for (int k = 0; k < i; k++)
				free((void *)w[k].data);
			return -1;
		}
		total += bytes;
	}

	static const int ns[2] = { 1, 128 };
	float *x = malloc(sizeof(float) * 128 * 5632);
	float *y = malloc(sizeof(float) * 128 * 32000);
	struct exl_matmul_scratch s = { 0 };

	for (int k = 0; k < 128 * 5632; k++)
		x[k] = frand() * 10;
	for (int ni = 0; ni < 2 && !rc; ni++) {
		int n = ns[ni], tokens = 0;

		if ((n == 1 && !do_decode) || (n > 1 && !do_prefill))
			continue;
		double t0 = now(), t1;

		do {
			for (int i = 0; i < NW && !rc; i++) {
				/* prefill computes logits for the last token only */
				int nn = i == NW - 1 ? 1 : n;
				if (exl_cpu_matmul(pool, &w[i], x, y, nn, &s, err, sizeof(err)) < 0) {
					fprintf(stderr, "matmul: %s\n", err);
					rc = -1;
				}
			}
			tokens += n;
			t1 = now();
		} while (!rc && (t1 - t0 < seconds || tokens < 2 * n));
		if (!rc)
			printf("%-5s model (%.0f MB of weights) n=%-4d %8.1f tok/s (matmuls only)\n",
			       exl_dtype_info(t)->name, (double)total / 1e6, n, tokens / (t1 - t0));
	}
	exl_matmul_scratch_free(&s);
	for (int i = 0; i < NW; i++)
		free((void *)w[i].data);
	free(x);
	free(y);
	return rc;
}

static int type_by_name(const char *name, uint32_t *t)
{
	for (uint32_t i = 0; i < EXL_DTYPE_COUNT; i++) {
		const struct exl_dtype_info *info = exl_dtype_info(i);

		if (info && !strcmp(info->name, name) && exl_dtype_supported(i)) {
			*t = i;
			return 0;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	int threads = 2, model = 0;
	double seconds = 1.0;
	const char *types = "f32,f16,bf16,q8_0,q4_0,q4_k,q6_k";
	const char *kernels = NULL;
	const char *nlist = "1,128";
	char err[256];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--types") && i + 1 < argc)
			types = argv[++i];
		else if (!strcmp(argv[i], "--kernels") && i + 1 < argc)
			kernels = argv[++i];
		else if (!strcmp(argv[i], "--n") && i + 1 < argc)
			nlist = argv[++i];
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--model"))
			model = 1;
		else if (!strcmp(argv[i], "--hot"))
			hot = 1;
		else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
			if (parse_shapes(argv[++i]) < 0)
				return 2;
		} else {
			fprintf(stderr, "usage: %s [--threads N] [--types q8_0,...] [--kernels SET] "
					"[--n 1,128] [--seconds S] [--model] [--hot] [--shapes RxC,...]\n",
				argv[0]);
			return 2;
		}
	}
	if (!n_shapes) {
		memcpy(shapes, tinyllama_shapes, sizeof(tinyllama_shapes));
		n_shapes = sizeof(tinyllama_shapes) / sizeof(tinyllama_shapes[0]);
	}
	if (threads < 1 || threads > 256 || seconds <= 0 || seconds > 600) {
		fprintf(stderr, "bad --threads or --seconds\n");
		return 2;
	}
	if (exl_cpu_kernels_select(kernels, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	struct exl_pool *pool = exl_pool_create(threads, err, sizeof(err));
	if (!pool) {
		fprintf(stderr, "pool: %s\n", err);
		return 1;
	}
	printf("kernels %s, %d threads\n", exl_cpu_kernels_name(), threads);

	char *tl = strdup(types);
	int rc = 0;
	for (char *save = NULL, *tok = strtok_r(tl, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
		uint32_t t;

		if (type_by_name(tok, &t) < 0) {
			fprintf(stderr, "unknown or unsupported type '%s'\n", tok);
			rc = 1;
			break;
		}
		if (model) {
			/* --n 1 or --n 128 picks one of the two runs */
			int dec = !strcmp(nlist, "1") || strcmp(nlist, "128");
			int pre = !strcmp(nlist, "128") || strcmp(nlist, "1");
			rc = bench_model(pool, t, seconds, dec, pre) < 0;
			continue;
		}
		char *nl = strdup(nlist);
		for (char *s2 = NULL, *nt = strtok_r(nl, ",", &s2); nt && !rc; nt = strtok_r(NULL, ",", &s2)) {
			int n = atoi(nt);

			if (n < 1 || n > 4096) {
				fprintf(stderr, "bad n '%s'\n", nt);
				rc = 1;
				break;
			}
			for (size_t i = 0; i < n_shapes && !rc; i++)
				rc = bench_shape(pool, t, &shapes[i], n, seconds) < 0;
		}
		free(nl);
	}
	free(tl);
	exl_pool_destroy(pool);
	return rc;
}

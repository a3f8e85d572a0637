/* Sustained memory read bandwidth: the ceiling a decode step can reach,
 * since decode streams every weight once per token.
 *
 *   bench_membw [--threads N] [--mib M] [--passes P] [--loads auto|sse2|avx2|avx512]
 *
 * It reads the way decode does, so that "decode of ceiling" compares like
 * with like:
 *   - the CPU backend's worker pool (threads started once, not per pass);
 *   - the buffer cut into 16 MiB "matrices" (a TinyLlama FFN weight is 6 to
 *     24 MiB), each one pool run whose threads take contiguous chunks from
 *     an atomic counter, about 8 per thread, as exl_cpu_matmul does;
 *   - the widest loads the CPU has (the kernel set's), a T0 prefetch 8 KiB
 *     ahead, one per line (matmul_x86.h's EXL_PF_BYTES);
 *   - pages touched before timing, then one untimed pass, then P timed
 *     passes over the whole buffer (default 2 GiB, far beyond any cache).
 * Prints the best and the median pass in GB/s (1e9 bytes); bench_model.sh
 * reads read_bandwidth_gb_s, the best.
 *
 * The figure used to come from SSE2 loads, a non-temporal prefetch and
 * threads created per pass: on a Xeon it read 7-12 GB/s where a plain AVX2
 * loop read 13-26, and decode came out at twice "its ceiling".
 * tests/bench/membw_check.sh compares this with such an independent loop.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/pool.h"
#include "membw_read.h"

#define MATRIX_BYTES (16u << 20)
#define PF_BYTES 8192
#define CHUNK_ALIGN 4096

typedef uint64_t (*read_fn)(const uint8_t *p, size_t n, size_t pf);

static uint64_t read_sse2(const uint8_t *p, size_t n, size_t pf)
{
#if defined(__SSE2__)
	__m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;

	for (size_t i = 0; i + 64 <= n; i += 64) {
		_mm_prefetch((const char *)(p + i + pf), _MM_HINT_T0);
		a0 = _mm_add_epi64(a0, _mm_load_si128((const __m128i *)(p + i)));
		a1 = _mm_add_epi64(a1, _mm_load_si128((const __m128i *)(p + i + 16)));
		a2 = _mm_add_epi64(a2, _mm_load_si128((const __m128i *)(p + i + 32)));
		a3 = _mm_add_epi64(a3, _mm_load_si128((const __m128i *)(p + i + 48)));
	}

	uint64_t lanes[2];

	_mm_storeu_si128((__m128i *)lanes, _mm_add_epi64(_mm_add_epi64(a0, a1),
							 _mm_add_epi64(a2, a3)));
	return lanes[0] + lanes[1];
#else
	uint64_t s = 0;

	(void)pf;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v;

		memcpy(&v, p + i, 8);
		s += v;
	}
	return s;
#endif
}

/* One matrix: chunks handed out by an atomic counter. */
struct matrix_job {
	read_fn fn;
	const uint8_t *p;
	size_t chunk;
	size_t n_chunks;
	size_t bytes;
	_Atomic size_t next;
	_Atomic uint64_t sum;
};

static void matrix_fn(void *ctx, int ith, int nth)
{
	struct matrix_job *j = ctx;
	uint64_t s = 0;

	(void)ith;
	(void)nth;
	for (;;) {
		size_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);

		if (c >= j->n_chunks)
			break;
		size_t b = c * j->chunk, e = b + j->chunk < j->bytes ? b + j->chunk : j->bytes;
		s += j->fn(j->p + b, e - b, PF_BYTES);
	}
	atomic_fetch_add_explicit(&j->sum, s, memory_order_relaxed);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One pass over buf, matrix by matrix; returns the seconds it took. */
static double pass(struct exl_pool *pool, read_fn fn, const uint8_t *buf, size_t bytes,
		   uint64_t *check)
{
	int nth = exl_pool_size(pool);
	double t0 = now_s();

	for (size_t off = 0; off < bytes; off += MATRIX_BYTES) {
		struct matrix_job j = { .fn = fn, .p = buf + off };

		j.bytes = bytes - off < MATRIX_BYTES ? bytes - off : MATRIX_BYTES;
		j.chunk = (j.bytes / (8 * (size_t)nth) + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
		j.n_chunks = (j.bytes + j.chunk - 1) / j.chunk;
		atomic_init(&j.next, 0);
		atomic_init(&j.sum, 0);
		exl_pool_run(pool, matrix_fn, &j);
		*check += atomic_load(&j.sum);
	}
	return now_s() - t0;
}

static int arg_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The loads named, or the widest this CPU has for auto. */
static int pick_loads(const char *name, read_fn *fn, const char **used)
{
	const struct exl_cpu_features *f = exl_cpu_features();
	bool avx2 = f->avx2, avx512 = avx2 && f->avx512f;

	if (!strcmp(name, "auto"))
		name = avx512 ? "avx512" : avx2 ? "avx2" : "sse2";
#if defined(__x86_64__)
	if (!strcmp(name, "avx512") && avx512) {
		*fn = membw_read_avx512;
		*used = name;
		return 0;
	}
	if (!strcmp(name, "avx2") && avx2) {
		*fn = membw_read_avx2;
		*used = name;
		return 0;
	}
#endif
	if (!strcmp(name, "sse2")) {
		*fn = read_sse2;
		*used = name;
		return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	int threads = 2, mib = 2048, passes = 5;
	const char *loads = "auto", *used = NULL;
	read_fn fn;
	char err[256];

	for (int i = 1; i < argc; i++) {
		int *dst = NULL, lo = 1, hi = 0;

		if (!strcmp(argv[i], "--loads") && i + 1 < argc) {
			loads = argv[++i];
			continue;
		}
		if (!strcmp(argv[i], "--threads"))
			dst = &threads, hi = 256;
		else if (!strcmp(argv[i], "--mib"))
			dst = &mib, lo = 64, hi = 65536;
		else if (!strcmp(argv[i], "--passes") || !strcmp(argv[i], "--reps"))
			dst = &passes, hi = 1000;
		if (!dst || i + 1 >= argc || arg_int(argv[i + 1], lo, hi, dst)) {
			fprintf(stderr, "usage: bench_membw [--threads N] [--mib M (>= 64)] "
					"[--passes P] [--loads auto|sse2|avx2|avx512]\n");
			return 2;
		}
		i++;
	}
	if (pick_loads(loads, &fn, &used)) {
		fprintf(stderr, "bench_membw: loads '%s': unknown, or this CPU lacks them\n", loads);
		return 2;
	}

	size_t bytes = (size_t)mib << 20;
	uint8_t *buf = aligned_alloc(4096, bytes);
	double *secs = calloc((size_t)passes, sizeof(*secs));
	struct exl_pool *pool = exl_pool_create(threads, err, sizeof(err));
	uint64_t check = 0;

	if (!buf || !secs || !pool) {
		fprintf(stderr, "bench_membw: %s\n", pool ? "out of memory" : err);
		return 1;
	}
	memset(buf, 1, bytes); /* fault every page in */
	pass(pool, fn, buf, bytes, &check); /* and once more as decode reads */
	for (int r = 0; r < passes; r++)
		secs[r] = pass(pool, fn, buf, bytes, &check);
	qsort(secs, (size_t)passes, sizeof(*secs), cmp_double);

	double best = (double)bytes / secs[0] / 1e9;
	double median = (double)bytes / secs[passes / 2] / 1e9;

	printf("read_bandwidth_gb_s=%.2f median=%.2f threads=%d mib=%d passes=%d loads=%s "
	       "(checksum %llu)\n", best, median, threads, mib, passes, used,
	       (unsigned long long)(check & 0xff));
	exl_pool_destroy(pool);
	free(secs);
	free(buf);
	return 0;
}

/* Sustained memory read bandwidth with N threads: the ceiling a decode step
 * can reach, since decode streams every weight once per token.
 *
 *   bench_membw [--threads N] [--mib M] [--reps R]
 *
 * Each thread sums its own slice of a buffer much larger than the last-level
 * cache, with SSE2 loads (the x86-64 baseline; a wider load does not read
 * DRAM faster) and a software prefetch 8 KiB ahead, as the decode kernels do.  Prints the best of R passes in GB/s (1e9 bytes). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

struct slice {
	const uint8_t *p;
	size_t n;
	uint64_t sum;
};

static void *read_slice(void *arg)
{
	struct slice *s = arg;
	uint64_t sum = 0;
#if defined(__SSE2__)
	__m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 64 <= s->n; i += 64) {
		/* Hardware prefetch alone leaves bandwidth unused on some CPUs;
		 * the matmul kernels prefetch ahead too, so the ceiling must. */
		_mm_prefetch((const char *)(s->p + i + 8192), _MM_HINT_NTA);
		a0 = _mm_add_epi64(a0, _mm_load_si128((const __m128i *)(s->p + i)));
		a1 = _mm_add_epi64(a1, _mm_load_si128((const __m128i *)(s->p + i + 16)));
		a2 = _mm_add_epi64(a2, _mm_load_si128((const __m128i *)(s->p + i + 32)));
		a3 = _mm_add_epi64(a3, _mm_load_si128((const __m128i *)(s->p + i + 48)));
	}
	uint64_t lanes[2];
	_mm_storeu_si128((__m128i *)lanes,
			 _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3)));
	sum = lanes[0] + lanes[1];
#else
	const uint64_t *q = (const uint64_t *)s->p;
	for (size_t i = 0; i < s->n / 8; i++)
		sum += q[i];
#endif
	s->sum = sum;
	return NULL;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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

int main(int argc, char **argv)
{
	int threads = 2, mib = 1024, reps = 5;

	for (int i = 1; i < argc; i++) {
		int *dst = NULL, lo = 1, hi = 0;
		if (!strcmp(argv[i], "--threads"))
			dst = &threads, hi = 256;
		else if (!strcmp(argv[i], "--mib"))
			dst = &mib, lo = 64, hi = 65536;
		else if (!strcmp(argv[i], "--reps"))
			dst = &reps, hi = 1000;
		if (!dst || i + 1 >= argc || arg_int(argv[i + 1], lo, hi, dst)) {
			fprintf(stderr, "usage: bench_membw [--threads N] [--mib M (>= 64)] [--reps R]\n");
			return 2;
		}
		i++;
	}

	size_t bytes = (size_t)mib << 20;
	uint8_t *buf = aligned_alloc(64, bytes);
	if (!buf) {
		fprintf(stderr, "bench_membw: cannot allocate %d MiB\n", mib);
		return 1;
	}
	memset(buf, 1, bytes); /* fault every page in before timing */

	struct slice *sl = calloc((size_t)threads, sizeof(*sl));
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	if (!sl || !tid) {
		fprintf(stderr, "bench_membw: out of memory\n");
		return 1;
	}
	size_t per = bytes / (size_t)threads / 64 * 64;
	double best = 0;
	uint64_t check = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		for (int t = 0; t < threads; t++) {
			sl[t] = (struct slice){ buf + per * (size_t)t, per, 0 };
			if (pthread_create(&tid[t], NULL, read_slice, &sl[t])) {
				fprintf(stderr, "bench_membw: cannot start a thread\n");
				return 1;
			}
		}
		for (int t = 0; t < threads; t++) {
			pthread_join(tid[t], NULL);
			check += sl[t].sum;
		}
		double gbs = (double)(per * (size_t)threads) / (now_s() - t0) / 1e9;
		if (gbs > best)
			best = gbs;
	}
	printf("read_bandwidth_gb_s=%.2f threads=%d mib=%d (checksum %llu)\n", best, threads, mib,
	       (unsigned long long)(check & 0xff));
	free(tid);
	free(sl);
	free(buf);
	return 0;
}

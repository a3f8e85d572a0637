/* An independent check of bench_membw: the plainest AVX2 read loop there
 * is.  Each of N threads (created per pass) sums its own contiguous half of
 * a buffer with 8 accumulators of 256 bits, no prefetch, no pool; best of P
 * passes after a warm-up, in GB/s (1e9 bytes).  Shares no code with
 * bench_membw.  Needs AVX2 (compiled with -mavx2 alone; run it only where
 * the CPU has it: membw_check.sh does).
 *
 *   membw_plain [THREADS [MIB [PASSES]]]
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct half {
	const uint8_t *p;
	size_t n;
	uint64_t sum;
};

static void *sum_half(void *arg)
{
	struct half *h = arg;
	__m256i a[8];

	for (int k = 0; k < 8; k++)
		a[k] = _mm256_setzero_si256();
	for (size_t i = 0; i + 256 <= h->n; i += 256)
		for (int k = 0; k < 8; k++)
			a[k] = _mm256_add_epi64(a[k],
						_mm256_load_si256((const __m256i *)(h->p + i) + k));
	for (int k = 1; k < 8; k++)
		a[0] = _mm256_add_epi64(a[0], a[k]);

	uint64_t l[4];

	_mm256_storeu_si256((__m256i *)l, a[0]);
	h->sum = l[0] + l[1] + l[2] + l[3];
	return NULL;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	int mib = argc > 2 ? atoi(argv[2]) : 2048;
	int passes = argc > 3 ? atoi(argv[3]) : 5;

	if (threads < 1 || threads > 256 || mib < 64 || passes < 1) {
		fprintf(stderr, "usage: membw_plain [THREADS [MIB (>= 64) [PASSES]]]\n");
		return 2;
	}

	size_t bytes = (size_t)mib << 20, per = bytes / (size_t)threads / 256 * 256;
	uint8_t *buf = aligned_alloc(4096, bytes);
	struct half *h = calloc((size_t)threads, sizeof(*h));
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	double best = 0;
	uint64_t check = 0;

	if (!buf || !h || !tid) {
		fprintf(stderr, "membw_plain: out of memory\n");
		return 1;
	}
	memset(buf, 1, bytes);
	for (int r = 0; r <= passes; r++) { /* pass 0 warms up */
		double t0 = now_s();

		for (int t = 0; t < threads; t++) {
			h[t] = (struct half){ buf + per * (size_t)t, per, 0 };
			if (pthread_create(&tid[t], NULL, sum_half, &h[t])) {
				fprintf(stderr, "membw_plain: cannot start a thread\n");
				return 1;
			}
		}
		for (int t = 0; t < threads; t++) {
			pthread_join(tid[t], NULL);
			check += h[t].sum;
		}
		double gbs = (double)(per * (size_t)threads) / (now_s() - t0) / 1e9;

		if (r > 0 && gbs > best)
			best = gbs;
	}
	printf("plain_avx2_gb_s=%.2f threads=%d mib=%d (checksum %llu)\n", best, threads, mib,
	       (unsigned long long)(check & 0xff));
	free(tid);
	free(h);
	free(buf);
	return 0;
}

#include <immintrin.h>

#include "membw_read.h"

uint64_t membw_read_avx2(const uint8_t *p, size_t n, size_t pf)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	__m256i a4 = a0, a5 = a0, a6 = a0, a7 = a0;

	for (size_t i = 0; i + 256 <= n; i += 256) {
		const __m256i *q = (const __m256i *)(p + i);

		_mm_prefetch((const char *)(p + i + pf), _MM_HINT_T0);
		_mm_prefetch((const char *)(p + i + pf + 64), _MM_HINT_T0);
		_mm_prefetch((const char *)(p + i + pf + 128), _MM_HINT_T0);
		_mm_prefetch((const char *)(p + i + pf + 192), _MM_HINT_T0);
		a0 = _mm256_add_epi64(a0, _mm256_load_si256(q + 0));
		a1 = _mm256_add_epi64(a1, _mm256_load_si256(q + 1));
		a2 = _mm256_add_epi64(a2, _mm256_load_si256(q + 2));
		a3 = _mm256_add_epi64(a3, _mm256_load_si256(q + 3));
		a4 = _mm256_add_epi64(a4, _mm256_load_si256(q + 4));
		a5 = _mm256_add_epi64(a5, _mm256_load_si256(q + 5));
		a6 = _mm256_add_epi64(a6, _mm256_load_si256(q + 6));
		a7 = _mm256_add_epi64(a7, _mm256_load_si256(q + 7));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	a4 = _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7));
	a0 = _mm256_add_epi64(a0, a4);

	uint64_t lanes[4];

	_mm256_storeu_si256((__m256i *)lanes, a0);
	return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

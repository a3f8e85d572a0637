#include <immintrin.h>

#include "membw_read.h"

uint64_t membw_read_avx512(const uint8_t *p, size_t n, size_t pf)
{
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;

	for (size_t i = 0; i + 256 <= n; i += 256) {
		const __m512i *q = (const __m512i *)(p + i);

		_mm_prefetch((const char *)(p + i + pf), _MM_HINT_T0);
		_mm_prefetch((const char *)(p + i + pf + 64), _MM_HINT_T0);
		_mm_prefetch((const char *)(p + i + pf + 128), _MM_HINT_T0);
		_mm_prefetch((const char *)(p + i + pf + 192), _MM_HINT_T0);
		a0 = _mm512_add_epi64(a0, _mm512_load_si512(q + 0));
		a1 = _mm512_add_epi64(a1, _mm512_load_si512(q + 1));
		a2 = _mm512_add_epi64(a2, _mm512_load_si512(q + 2));
		a3 = _mm512_add_epi64(a3, _mm512_load_si512(q + 3));
	}
	a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
	return (uint64_t)_mm512_reduce_add_epi64(a0);
}

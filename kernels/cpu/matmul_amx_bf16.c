/* The AMX-BF16 kernels' conversions in AVX-512 F/BW and F16C: the same bits
 * as the portable ones of matmul_amx_bf16_split.h, which they fall back to
 * for a last step of fewer than 32 columns.
 *
 * Only intrinsics that SIMDe 0.7 emulates: test_amx_layout compiles this
 * file once more over SIMDe (tests/unit/amx_bf16_simde.c,
 * EXL_AMX_BF16_SIMDE) and checks both builds against the portable code. */
#ifdef EXL_AMX_BF16_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#define exl_amx_stage_f16 exl_amx_stage_f16_simde
#define exl_amx_act_bf16 exl_amx_act_bf16_simde
#endif
#include <immintrin.h>

#include "kernels/cpu/matmul_amx_bf16.h"
#include "kernels/cpu/matmul_amx_bf16_split.h"

/* 16 F16 at p as floats */
static inline __m512 f16x16(const uint8_t *p)
{
#ifdef EXL_AMX_BF16_SIMDE
	/* SIMDe 0.7 has no _mm512_cvtph_ps */
	__m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
	__m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 16)));

	return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)),
						   _mm256_castps_pd(b), 1));
#else
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
#endif
}

/* exl_fp32_to_bf16 of 16 floats, as fp32 bits (the low halves zero) */
static inline __m512i round16(__m512 x)
{
	const __m512i u = _mm512_castps_si512(x);
	const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
					      _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
	const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
						     _mm512_set1_epi32(0x7f800000));
	const __m512i r = _mm512_mask_or_epi32(_mm512_add_epi32(u, bias), nan, u, _mm512_set1_epi32(0x00400000));

	return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
}

/* The top halves of a's and then b's 16 dwords: 32 bf16 in order */
static inline __m512i top_halves(__m512i a, __m512i b)
{
	const __m512i odd = _mm512_setr_epi32(0x00030001, 0x00070005, 0x000b0009, 0x000f000d, 0x00130011,
					      0x00170015, 0x001b0019, 0x001f001d, 0x00230021, 0x00270025,
					      0x002b0029, 0x002f002d, 0x00330031, 0x00370035, 0x003b0039,
					      0x003f003d);

	return _mm512_permutex2var_epi16(a, odd, b);
}

void exl_amx_stage_f16(const uint8_t *w, size_t row_bytes, int nr, int64_t k0, int64_t cols, uint16_t *hi,
		       uint16_t *lo)
{
	if (k0 + EXL_AMX_BF16_K > cols) {
		exl_amx_stage_f16_portable(w, row_bytes, nr, k0, cols, hi, lo);
		return;
	}
	const __m512i top = _mm512_set1_epi32((int)0xffff0000u);

	for (int r = 0; r < EXL_AMX_BF16_R; r++) {
		__m512i h = _mm512_setzero_si512(), l = _mm512_setzero_si512();

		if (r < nr) {
			const uint8_t *p = w + (size_t)r * row_bytes + 2 * (size_t)k0;
			/* 16 rows are 16 short streams, which the hardware
			 * prefetchers pick up late */
			_mm_prefetch((const char *)(p + 512), _MM_HINT_T0);
			const __m512 a = f16x16(p), b = f16x16(p + 32);
			const __m512 la = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), top)));
			const __m512 lb = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), top)));

			h = top_halves(_mm512_castps_si512(a), _mm512_castps_si512(b));
			l = top_halves(_mm512_castps_si512(la), _mm512_castps_si512(lb));
		}
		_mm512_storeu_si512(hi + EXL_AMX_BF16_K * r, h);
		_mm512_storeu_si512(lo + EXL_AMX_BF16_K * r, l);
	}
}

void exl_amx_act_bf16(const float *x, int64_t cols, int n, int i0, int i1, uint8_t *act, size_t act_stride)
{
	const int64_t half = exl_amx_bf16_kp(cols) / 2;
	const int64_t full = cols / EXL_AMX_BF16_K * EXL_AMX_BF16_K;

	for (int i = i0; i < i1; i++) {
		const int g = i / 16, j = i % 16, ng = n - 16 * g < 16 ? n - 16 * g : 16;
		const size_t row = 4 * (size_t)ng;
		uint8_t *hi = act + 16 * (size_t)g * act_stride + 4 * (size_t)j;
		uint8_t *lo = hi + row * (size_t)half;
		const float *xi = x + (size_t)i * (size_t)cols;

		for (int64_t k = 0; k < full; k += EXL_AMX_BF16_K) {
			const __m512 a = _mm512_loadu_ps(xi + k), b = _mm512_loadu_ps(xi + k + 16);
			const __m512i ha = round16(a), hb = round16(b);
			const __m512i la = round16(_mm512_sub_ps(a, _mm512_castsi512_ps(ha)));
			const __m512i lb = round16(_mm512_sub_ps(b, _mm512_castsi512_ps(hb)));
			const __m512i h = top_halves(ha, hb), l = top_halves(la, lb);
			/* pairs k / 2 .. k / 2 + 15, each in its own row of
			 * the group (contiguous when the group is one vector) */
			uint8_t *ph = hi + row * (size_t)(k / 2), *pl = lo + row * (size_t)(k / 2);

			if (ng == 1) {
				_mm512_storeu_si512(ph, h);
				_mm512_storeu_si512(pl, l);
			} else {
				_Alignas(64) uint32_t th[16], tl[16];

				_mm512_store_si512(th, h);
				_mm512_store_si512(tl, l);
				for (int e = 0; e < 16; e++) {
					memcpy(ph + row * (size_t)e, &th[e], 4);
					memcpy(pl + row * (size_t)e, &tl[e], 4);
				}
			}
		}
		if (full < cols) {
			/* the last pairs, as the portable code makes them */
			for (int64_t k = full / 2; k < half; k++) {
				uint16_t h[2], l[2];

				for (int e = 0; e < 2; e++)
					exl_amx_bf16_split(2 * k + e < cols ? xi[2 * k + e] : 0.0f, &h[e], &l[e]);
				memcpy(hi + row * (size_t)k, h, 4);
				memcpy(lo + row * (size_t)k, l, 4);
			}
		}
	}
}

/* The x86 activation quantizers, AVX2 + FMA + F16C (compiled with -mavx2
 * -mfma -mf16c): the same bytes as the scalar ones (matmul_impl.h), for
 * every x86 kernel set.  Apart from the matmul kernels so that the avx2
 * kernel file can be built a second time with other flags (the avx2vnni
 * set) without defining these twice. */
#include <string.h>

#include "kernels/cpu/matmul_x86.h"

EXL_INLINE __m256 abs_ps(__m256 v)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* 32 floats -> 32 int8 (round to even; |v * id| <= 127), and their sum. */
EXL_INLINE int quant32(const float *x, float id, int8_t *q)
{
	__m256 vid = _mm256_set1_ps(id);
	__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 0), vid));
	__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid));
	__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid));
	__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid));
	__m256i lim = _mm256_set1_epi32(127);
	__m256i nlim = _mm256_set1_epi32(-127);

	i0 = _mm256_max_epi32(_mm256_min_epi32(i0, lim), nlim);
	i1 = _mm256_max_epi32(_mm256_min_epi32(i1, lim), nlim);
	i2 = _mm256_max_epi32(_mm256_min_epi32(i2, lim), nlim);
	i3 = _mm256_max_epi32(_mm256_min_epi32(i3, lim), nlim);

	__m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
	__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
	s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
	s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));

	/* packs interleave 128-bit lanes; the permute restores order */
	__m256i p16a = _mm256_packs_epi32(i0, i1);
	__m256i p16b = _mm256_packs_epi32(i2, i3);
	__m256i p8 = _mm256_packs_epi16(p16a, p16b);
	p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)(void *)q, p8);
	return _mm_cvtsi128_si32(s4);
}

EXL_INLINE float amax_n(const float *x, int n)
{
	__m256 mx = _mm256_setzero_ps();

	for (int i = 0; i < n; i += 8)
		mx = _mm256_max_ps(mx, abs_ps(_mm256_loadu_ps(x + i)));
	__m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
	return _mm_cvtss_f32(m4);
}

void exl_act_q8_0_avx2(const float *x, uint8_t *act, int64_t cols)
{
	int8_t *qs = (int8_t *)act;
	float *d = (float *)(void *)(act + cols);
	float *s = d + cols / 32;

	for (int64_t b = 0; b < cols / 32; b++) {
		float amax = amax_n(x + 32 * b, 32);
		float id = amax > 0 ? 127.0f / amax : 0.0f;
		int sum = quant32(x + 32 * b, id, qs + 32 * b);

		d[b] = amax / 127.0f;
		s[b] = d[b] * (float)sum;
	}
}

void exl_act_q8_0_isum_avx2(const float *x, uint8_t *act, int64_t cols)
{
	int8_t *qs = (int8_t *)act;
	float *d = (float *)(void *)(act + cols);
	uint8_t *sx = act + cols + 4 * (size_t)(cols / 32);

	for (int64_t b = 0; b < cols / 32; b++) {
		float amax = amax_n(x + 32 * b, 32);
		float id = amax > 0 ? 127.0f / amax : 0.0f;
		int32_t sum = quant32(x + 32 * b, id, qs + 32 * b);

		d[b] = amax / 127.0f;
		memcpy(sx + 4 * b, &sum, 4);
	}
}

void exl_act_q8_K_avx2(const float *x, uint8_t *act, int64_t cols)
{
	int8_t *qs = (int8_t *)act;
	float *d = (float *)(void *)(act + cols);
	int16_t *bsums = (int16_t *)(void *)(d + cols / 256);

	for (int64_t b = 0; b < cols / 256; b++) {
		const float *xb = x + 256 * b;
		float amax = amax_n(xb, 256);
		float id = amax > 0 ? 127.0f / amax : 0.0f;

		d[b] = amax / 127.0f;
		for (int i = 0; i < 8; i++) {
			int8_t *q = qs + 256 * b + 32 * i;

			quant32(xb + 32 * i, id, q);
			/* group sums of 16 from the stored bytes */
			__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)q);
			__m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
			__m128i lo = _mm256_castsi256_si128(s16), hi = _mm256_extracti128_si256(s16, 1);
			lo = _mm_madd_epi16(lo, _mm_set1_epi16(1));
			hi = _mm_madd_epi16(hi, _mm_set1_epi16(1));
			lo = _mm_hadd_epi32(lo, hi);
			lo = _mm_hadd_epi32(lo, lo);
			bsums[16 * b + 2 * i] = (int16_t)_mm_cvtsi128_si32(lo);
			bsums[16 * b + 2 * i + 1] = (int16_t)_mm_extract_epi32(lo, 1);
		}
	}
}

/* act_q8_K with each super-block's x as sub-blocks [0, 2, 1, 3, 4, 6, 5,
 * 7], Q4_K's nibble order (bsums stay in element order): for the AVX-512
 * and AMX sets, whose Q4_K kernels split 64 bytes of qs into two vectors of
 * levels that then meet 64 contiguous x. */
void exl_act_q4_K_avx2(const float *x, uint8_t *act, int64_t cols)
{
	int8_t tmp[256];
	static const int order[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };

	exl_act_q8_K_avx2(x, act, cols);
	for (int64_t b = 0; b < cols / 256; b++) {
		int8_t *q = (int8_t *)act + 256 * b;

		memcpy(tmp, q, 256);
		for (int k = 0; k < 8; k++)
			memcpy(q + 32 * k, tmp + 32 * order[k], 32);
	}
}

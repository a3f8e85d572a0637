/* Block scales picked out without a scalar step per block: the fp16 scales
 * of blocks b .. b + 7 of a Q4_0 or Q8_0 row as 8 floats (word permutes),
 * and an IQ4_XS block's 8 sub-block scales as int16.  For files compiled
 * with AVX-512 BW and F16C (matmul_avx512.c), after <immintrin.h>. */
#ifndef EXL_CPU_Q0_SCALES_AVX512_H
#define EXL_CPU_Q0_SCALES_AVX512_H

#include "kernels/cpu/matmul_x86.h"

/* 18-byte blocks: d at bytes 0, 18, 36, 54 of each 72-byte half */
EXL_INLINE __m256 exl_q4_0_scales8(const block_q4_0 *w, int64_t b)
{
	const uint8_t *p = (const uint8_t *)(w + b);
	const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					     0, 0, 0, 0, 0, 0, 0, 0, 59, 50, 41, 32, 27, 18, 9, 0);
	__m512i h = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), idx, _mm512_loadu_si512(p + 72));

	return _mm256_cvtph_ps(_mm512_castsi512_si128(h));
}

/* 34-byte blocks: d at bytes 0, 34 | 68, 102 | 136, 170 | 204, 238, i.e.
 * words 0, 17 of each 64-byte quarter shifted by 2 per quarter */
EXL_INLINE __m256 exl_q8_0_scales8(const block_q8_0 *w, int64_t b)
{
	const uint8_t *p = (const uint8_t *)(w + b);
	const __m512i i1 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
	const __m512i i2 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					    0, 0, 0, 0, 0, 0, 0, 0, 55, 38, 21, 4, 0, 0, 0, 0);
	__m512i a = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), i1, _mm512_loadu_si512(p + 64));
	__m512i c = _mm512_permutex2var_epi16(_mm512_loadu_si512(p + 128), i2, _mm512_loadu_si512(p + 192));

	return _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_mask_blend_epi16(0xf0, a, c)));
}

/* The 8 scales (-32..31) of an IQ4_XS block as int16 in the low 128 bits. */
EXL_INLINE __m512i exl_iq4_xs_scales16(const block_iq4_xs *w)
{
	return _mm512_castsi128_si512(_mm_cvtepi8_epi16(exl_iq4_xs_scales8(w)));
}

#endif

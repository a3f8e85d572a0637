/* The "amx" set's decode orientation (n <= EXL_AMX_DECODE_MAX_N vectors)
 * for Q6_K in AVX-512 VNNI: the same outputs, bit for bit, as the tile
 * kernels of matmul_amx_body.h, without tiles.
 *
 * The tile kernels make each output from exact int32 sums per super-block
 * and one or two FMAs per super-block in order; any code that makes the
 * same integers and the same FMAs makes the same bits, so decode need not
 * go through a tile.  On the first AMX machine the tile version of decode
 * (one vector against 16 rows, a tile store and reload per block) decoded
 * Q4_0 at a third of the VNNI kernels' speed (docs/cpu-kernels.md).  Every
 * other type the set has tiles for has since taken the avx2 family's float
 * steps, so this set decodes them with avx2vnni's kernels (matmul_amx.c);
 * avx512vnni's Q6_K keeps its float lanes per super-block, which tiles
 * cannot give.
 *
 * Each row is one stream, as in the other sets' decode (matmul_x86.h,
 * EXL_STREAM_N).
 *
 * Only AVX-512 F/BW/VL/VNNI plus F16C and FMA, and of the 512-bit
 * intrinsics only those SIMDe 0.7 emulates: test_amx_layout compiles this
 * file once more over SIMDe (tests/unit/amx_decode_simde.c,
 * EXL_AMX_DECODE_SIMDE), so it is checked against the emulated tiles on a
 * CPU without AVX-512 too, and natively where the CPU has it. */
#ifdef EXL_AMX_DECODE_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define exl_amx_decode exl_amx_decode_simde
#endif
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/matmul_amx_decode.h"
#include "kernels/cpu/matmul_x86.h"

/* The int32 sum of the lanes (exact) */
EXL_INLINE int32_t hsum256_epi32(__m256i s)
{
	__m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));

	h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
	h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
	return _mm_cvtsi128_si32(h);
}

EXL_INLINE int32_t hsum512_epi32(__m512i v)
{
	return hsum256_epi32(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

/* The nc act rows of a K-quant call: int8 x, the scale d and the int16
 * sums of each 16 */
struct kact {
	const int8_t *q[EXL_AMX_DECODE_MAX_N];
	const float *d[EXL_AMX_DECODE_MAX_N];
	const int16_t *s[EXL_AMX_DECODE_MAX_N];
};

/* int16 lanes 0-7 = g0, 8-15 = g1, 16-23 = g2, 24-31 = g3: the
 * permutexvar_epi16 index that spreads one scale per 16 weights of a
 * maddubs result */
EXL_INLINE __m512i lane_groups(short g0, short g1, short g2, short g3)
{
	return _mm512_set_epi16(g3, g3, g3, g3, g3, g3, g3, g3, g2, g2, g2, g2, g2, g2, g2, g2,
				g1, g1, g1, g1, g1, g1, g1, g1, g0, g0, g0, g0, g0, g0, g0, g0);
}

EXL_INLINE void kact_init(const struct exl_mm_ctx *m, int c0, const int nc, struct kact *x)
{
	for (int j = 0; j < nc; j++) {
		const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;

		x->q[j] = (const int8_t *)a;
		x->d[j] = exl_act_q8_K_d(a, m->cols);
		x->s[j] = exl_act_q8_K_bsums(a, m->cols);
	}
}

EXL_INLINE void kact_store(const struct exl_mm_ctx *m, int c0, const int nc, int64_t r, const float *acc)
{
	for (int j = 0; j < nc; j++)
		*exl_out(m, c0 + j, r) = acc[j];
}

/* ---- Q6_K ----
 *
 * Per super-block the tile kernels make the exact I = sum_G sc_G * D_G over
 * the 16 groups of 16 (D_G with levels q - 32), then y = fmaf((float)I,
 * d_x * d, y).  Here q (0..63) goes unsigned into maddubs (pairs at most
 * 2 * 63 * 127), the int16 pairs are scaled by sc_G in vpdpwssd and summed
 * over the lanes, and 32 * sum_G sc_G * (x's sum over G) comes off. */
EXL_INLINE void row_q6_K(const struct exl_mm_ctx *m, int64_t r, int c0, size_t pf, const int nc)
{
	const block_q6_K *w = (const block_q6_K *)(const void *)exl_row(m, r);
	const int64_t nb = m->cols / 256;
	const __m512i lo4 = _mm512_set1_epi8(0x0f), lo2 = _mm512_set1_epi8(0x03);
	/* int16 lane i of a 64-weight vector covers weights 2i, 2i + 1: group
	 * i / 8 of its four; the vectors are groups 0-3, 4-7, 8-11, 12-15 */
	const __m512i sel[4] = { lane_groups(0, 1, 2, 3), lane_groups(4, 5, 6, 7), lane_groups(8, 9, 10, 11),
				 lane_groups(12, 13, 14, 15) };
	struct kact x;
	float acc[EXL_AMX_DECODE_MAX_N] = { 0 };

	kact_init(m, c0, nc, &x);
	for (int64_t b = 0; b < nb; b++) {
		const block_q6_K *blk = w + b;
		const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)blk->scales));
		const __m512i sc16 = _mm512_castsi256_si512(sc);
		__m512i q[4], scv[4];

		for (int t = 0; t < 210; t += 64)
			_mm_prefetch((const char *)blk + pf + t, _MM_HINT_T0);
		for (int h = 0; h < 2; h++) {
			/* weights 128h + 0..63: low nibbles of ql[64h..64h+63] and
			 * qh bits 0-1 (first 32) / 2-3 (next 32); 128h + 64..127:
			 * the high nibbles and bits 4-5 / 6-7 */
			__m512i ql = _mm512_loadu_si512(blk->ql + 64 * h);
			__m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk->qh + 32 * h));
			__m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);

			q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, lo4),
						   _mm512_slli_epi16(_mm512_and_si512(hb, lo2), 4));
			q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4),
						       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), lo2), 4));
		}
		for (int k = 0; k < 4; k++)
			scv[k] = _mm512_permutexvar_epi16(sel[k], sc16);
		const float d = exl_f16(blk->d);

		for (int j = 0; j < nc; j++) {
			const int8_t *xb = x.q[j] + 256 * b;
			__m512i is = _mm512_setzero_si512();

			for (int k = 0; k < 4; k++)
				is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(xb + 64 * k)),
							 scv[k]);
			__m256i os = _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)(const void *)(x.s[j] + 16 * b)));
			int32_t isum = hsum512_epi32(is) - 32 * hsum256_epi32(os);

			acc[j] = fmaf((float)isum, x.d[j][b] * d, acc[j]);
		}
	}
	kact_store(m, c0, nc, r, acc);
}

#define NC_CASES(CALL)                                                 \
	switch (c1 - c0) {                                             \
	case 1: CALL(1); break;                                        \
	case 2: CALL(2); break;                                        \
	case 3: CALL(3); break;                                        \
	default: CALL(4); break;                                       \
	}
#define ROW_Q6_K(NC) row_q6_K(m, r, c0, pf, NC)

void exl_amx_decode(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int type)
{
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, 1);

	/* nc a constant per call, so the loops over it unroll; Q6_K the one
	 * type left here */
	(void)type;
	for (int64_t r = r0; r < r1; r++)
		NC_CASES(ROW_Q6_K)
}

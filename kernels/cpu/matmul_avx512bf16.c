/* BF16 weights on AVX-512 BF16's vdpbf16ps: 32 weights per instruction,
 * straight from the row, where the avx512 tile widens 16 at a time to
 * fp32 (three operations) before an FMA.  Decode streams the weights, and
 * fewer operations per byte leave the core more room for loads in flight:
 * BF16 decode 13.4 -> 14.1 tok/s on a Zen 4 (docs/cpu-kernels.md, which
 * also has why x's 4 bytes a column keep it just behind llama.cpp's 2).
 * matmul.c puts mm_bf16 and act_bf16 into the avx512vnni set on CPUs with
 * the instruction (Zen 4, Cooper Lake, Sapphire Rapids).
 *
 * Precision: vdpbf16ps multiplies bf16 by bf16, so x is split as the amx
 * set splits it (matmul_amx_bf16_body.h): x = x_hi + x_lo, each the
 * nearest bf16, 16 significant bits of x in all.  A BF16 weight is exact,
 * so w x_hi + w x_lo is within 2^-16 of w x.  The two go to two
 * accumulators, added at the end: two chains of half the latency, so one
 * decode row is not waiting on one.  Every tile shape does the same, so
 * an output has the same bits whatever the number of vectors.
 *
 * vdpbf16ps, per fp32 lane i: acc += a[2i + 1] b[2i + 1]; acc += a[2i] b[2i],
 * each step rounded to nearest even, denormal inputs and outputs zero. */
#include <immintrin.h>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/matmul_x86.h"

/* Columns rounded up to whole vdpbf16ps steps; the act row's padding is
 * zero, so the tail needs only the weights masked. */
static int64_t cols_padded(int64_t cols)
{
	return (cols + 31) / 32 * 32;
}

/* Act row of a vector: x_hi[Kp] then x_lo[Kp] as bf16 (Kp = cols_padded),
 * 4 Kp bytes: exl_act_bf16_pairs_bytes, the size matmul.c reserves. */
static void act_bf16_split(const float *x, int64_t cols, int n, int i0, int i1, uint8_t *act,
			   size_t act_stride)
{
	const int64_t kp = cols_padded(cols);

	(void)n;
	for (int i = i0; i < i1; i++) {
		const float *xi = x + (size_t)i * (size_t)cols;
		uint16_t *hi = (uint16_t *)(void *)(act + (size_t)i * act_stride);
		uint16_t *lo = hi + kp;

		for (int64_t k = 0; k < kp; k += 16) {
			__mmask16 mk = k + 16 <= cols ? (__mmask16)0xffff
				     : k < cols   ? (__mmask16)((1u << (cols - k)) - 1u)
						  : 0;
			__m512 v = _mm512_maskz_loadu_ps(mk, xi + k);
			__m256i h = (__m256i)_mm512_cvtneps_pbh(v);
			/* x_hi back to fp32 is exact: its bits in the top half */
			__m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
			__m256i l = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));

			_mm256_storeu_si256((__m256i *)(void *)(hi + k), h);
			_mm256_storeu_si256((__m256i *)(void *)(lo + k), l);
		}
	}
}

/* Sums 16 lanes in a fixed order, the same for every tile. */
EXL_INLINE float hsum512(__m512 v)
{
	__m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));

	return exl_hsum256(s);
}

/* One step of 32 columns at k: the R rows' weights wv against the C
 * vectors' x_hi and x_lo (the act rows' padding makes their loads whole). */
EXL_INLINE void tile_step(__m512 acc[][4][2], const __m512bh wv[], const uint16_t *const *xh,
			  int64_t kp, int64_t k, const int R, const int C)
{
	__m512bh xhv[4], xlv[4];

	for (int j = 0; j < C; j++) {
		xhv[j] = (__m512bh)_mm512_loadu_si512(xh[j] + k);
		xlv[j] = (__m512bh)_mm512_loadu_si512(xh[j] + kp + k);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++) {
			acc[i][j][0] = _mm512_dpbf16_ps(acc[i][j][0], wv[i], xhv[j]);
			acc[i][j][1] = _mm512_dpbf16_ps(acc[i][j][1], wv[i], xlv[j]);
		}
}

/* R rows x C vectors (R <= 8 for one vector, R <= 4 and C <= 2 for more:
 * EXL_FLOAT_TILE_LOOP): 2 R C accumulators, 16 at most, leaving registers
 * for the 2 C x vectors and the weights. */
EXL_INLINE void tile_bf16(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C)
{
	const int64_t kp = cols_padded(m->cols);
	const int64_t n32 = m->cols & ~(int64_t)31;
	const uint16_t *w[8];
	const uint16_t *xh[4];
	__m512 acc[8][4][2];
	__m512bh wv[8];
	int64_t k = 0;

	for (int i = 0; i < R; i++)
		w[i] = (const uint16_t *)(const void *)exl_row(m, r + i);
	for (int j = 0; j < C; j++)
		xh[j] = (const uint16_t *)(const void *)(m->act + (size_t)(c + j) * m->act_stride);
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j][0] = acc[i][j][1] = _mm512_setzero_ps();
	for (; k < n32; k += 32) {
		for (int i = 0; i < R; i++)
			wv[i] = (__m512bh)_mm512_loadu_si512(w[i] + k);
		tile_step(acc, wv, xh, kp, k, R, C);
	}
	if (k < m->cols) {
		__mmask32 mk = (__mmask32)((1ull << (m->cols - k)) - 1u);

		for (int i = 0; i < R; i++)
			wv[i] = (__m512bh)_mm512_maskz_loadu_epi16(mk, w[i] + k);
		tile_step(acc, wv, xh, kp, k, R, C);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(_mm512_add_ps(acc[i][j][0], acc[i][j][1]));
}

static void mm_bf16(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_FLOAT_TILE_LOOP(tile_bf16, m, r0, r1, c0, c1, 4, 2, 8);
}

/* Only the two slots; matmul.c merges them into avx512vnni. */
const struct exl_cpu_kernels exl_cpu_kernels_avx512bf16_own = {
	.name = "avx512bf16",
	.act_bf16 = act_bf16_split,
	.mm_bf16 = mm_bf16,
};

/* AVX-512 (F/BW/VL) matmul kernels, 512 bits wide.  Built twice: as the
 * "avx512" set, and with -mavx512vnni -DEXL_MM_VNNI=1 as "avx512vnni",
 * where the integer dots use vpdpbusd / vpdpwssd.
 *
 * Q8_0/Q4_0: two 32-element blocks per vector; each lane's int32 dot is
 * scaled by the product of its block's two scales.  K-quants: 64 weights
 * (two or four scale groups) per vector, int32 sums over the super-block,
 * one float FMA per super-block and output.
 */
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_x86.h"
#include "kernels/cpu/q0_scales_avx512.h"

#ifdef EXL_MM_VNNI
#define SET_NAME "avx512vnni"
#define SET_SYMBOL exl_cpu_kernels_avx512vnni_own
#else
#define SET_NAME "avx512"
#define SET_SYMBOL exl_cpu_kernels_avx512
#endif

/* acc + sums of 4 products of u8 a and s8 b per lane.  Without VNNI this
 * goes through int16 pair sums, so it is exact only while 2 * a * b fits
 * (a <= 128, as for 4- and 6-bit weights). */
EXL_INLINE __m512i dot_u8s8(__m512i acc, __m512i a, __m512i b)
{
#ifdef EXL_MM_VNNI
	return _mm512_dpbusd_epi32(acc, a, b);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1)));
#endif
}

/* acc + sums of 2 products of int16 a and b per lane. */
EXL_INLINE __m512i dot_s16(__m512i acc, __m512i a, __m512i b)
{
#ifdef EXL_MM_VNNI
	return _mm512_dpwssd_epi32(acc, a, b);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

EXL_INLINE float hsum512(__m512 v)
{
	return exl_hsum256(_mm256_add_ps(_mm512_castps512_ps256(v),
					 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* [a x8, b x8] */
EXL_INLINE __m512 pair_ps(float a, float b)
{
	__m512 v = _mm512_castps128_ps512(_mm_setr_ps(a, b, 0, 0));

	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), v);
}

/* two consecutive floats p[0], p[1] as [p0 x8, p1 x8] */
EXL_INLINE __m512 pair_ps_load(const float *p)
{
	__m512 v = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(const void *)p)));

	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), v);
}

EXL_INLINE __m512i join256(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* ---- float weights ---- */

EXL_INLINE __m512 load_f32(const void *w, int64_t k, __mmask16 mk)
{
	return _mm512_maskz_loadu_ps(mk, (const float *)w + k);
}

EXL_INLINE __m512 load_f16(const void *w, int64_t k, __mmask16 mk)
{
	return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + k));
}

EXL_INLINE __m512 load_bf16(const void *w, int64_t k, __mmask16 mk)
{
	__m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + k);

	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

EXL_INLINE __m512 loadu_f32(const void *w, int64_t k)
{
	return _mm512_loadu_ps((const float *)w + k);
}

EXL_INLINE __m512 loadu_f16(const void *w, int64_t k)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)w + k)));
}

EXL_INLINE __m512 loadu_bf16(const void *w, int64_t k)
{
	__m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)w + k));

	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define ESIZE_f32 4
#define ESIZE_f16 2
#define ESIZE_bf16 2

/* Accumulators per output.  The same for every tile shape, so an
 * output's value never depends on how many vectors the call has (a
 * sequence decodes the same alone or in a batch).  One is enough here: a
 * one-output decode tile still runs 16 floats per FMA latency, more than
 * one core's share of memory bandwidth, and prefill tiles of 4 x 4 keep
 * all 16 accumulators in registers. */
#define FLOAT_U 1

/* Float tiles fetch no lines ahead: decode reads each row as one stream
 * that the hardware prefetchers follow, and one software prefetch per
 * line on top of it cost a fifth of F16 decode speed on a Zen 4 (11.1 ->
 * 13.1 tok/s without, TinyLlama-shaped F16, exld run, alternating), in
 * both this set and avx2.  The quantized tiles, with 2-4x fewer bytes per
 * FMA, still gain from theirs. */

#define DEFINE_FLOAT_TILE(T)                                                          \
	EXL_INLINE void tile_##T(const struct exl_mm_ctx *m, int64_t r, int c, const int R, \
				 const int C)                                          \
	{                                                                             \
		const uint8_t *w[8];                                                  \
		const float *x[4];                                                    \
		__m512 acc[8][4][FLOAT_U];                                            \
		const int U = FLOAT_U;                                                \
		int64_t k = 0, n16 = m->cols & ~(int64_t)15;                          \
		int64_t nu = m->cols / (16 * U) * (16 * U);                           \
                                                                                      \
		for (int i = 0; i < R; i++)                                           \
			w[i] = exl_row(m, r + i);                                     \
		for (int j = 0; j < C; j++)                                           \
			x[j] = m->x + (size_t)(c + j) * (size_t)m->cols;              \
		for (int i = 0; i < R; i++)                                           \
			for (int j = 0; j < C; j++)                                   \
				for (int u = 0; u < U; u++)                           \
					acc[i][j][u] = _mm512_setzero_ps();           \
		for (; k < nu; k += 16 * U) {                                         \
			for (int u = 0; u < U; u++) {                                 \
				int64_t ku = k + 16 * u;                              \
				__m512 xv[4];                                         \
				for (int j = 0; j < C; j++)                           \
					xv[j] = _mm512_loadu_ps(x[j] + ku);           \
				for (int i = 0; i < R; i++) {                         \
					__m512 wv = loadu_##T(w[i], ku);              \
					for (int j = 0; j < C; j++)                   \
						acc[i][j][u] = _mm512_fmadd_ps(wv, xv[j], acc[i][j][u]); \
				}                                                     \
			}                                                             \
		}                                                                     \
		for (; k < n16; k += 16) {                                            \
			__m512 xv[4];                                                 \
			for (int j = 0; j < C; j++)                                   \
				xv[j] = _mm512_loadu_ps(x[j] + k);                    \
			for (int i = 0; i < R; i++) {                                 \
				__m512 wv = loadu_##T(w[i], k);                       \
				for (int j = 0; j < C; j++)                           \
					acc[i][j][0] = _mm512_fmadd_ps(wv, xv[j], acc[i][j][0]); \
			}                                                             \
		}                                                                     \
		if (k < m->cols) {                                                    \
			__mmask16 mk = (__mmask16)((1u << (m->cols - k)) - 1u);       \
			__m512 xv[4];                                                 \
			for (int j = 0; j < C; j++)                                   \
				xv[j] = _mm512_maskz_loadu_ps(mk, x[j] + k);          \
			for (int i = 0; i < R; i++) {                                 \
				__m512 wv = load_##T(w[i], k, mk);                    \
				for (int j = 0; j < C; j++)                           \
					acc[i][j][0] = _mm512_fmadd_ps(wv, xv[j], acc[i][j][0]); \
			}                                                             \
		}                                                                     \
		for (int i = 0; i < R; i++)                                           \
			for (int j = 0; j < C; j++) {                                 \
				for (int u = 1; u < U; u++)                           \
					acc[i][j][0] = _mm512_add_ps(acc[i][j][0], acc[i][j][u]); \
				*exl_out(m, c + j, r + i) = hsum512(acc[i][j][0]);    \
			}                                                             \
	}                                                                             \
	static void mm_##T(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1) \
	{                                                                             \
		EXL_FLOAT_TILE_LOOP(tile_##T, m, r0, r1, c0, c1, 4, 4, 8);           \
	}

DEFINE_FLOAT_TILE(f32)
DEFINE_FLOAT_TILE(f16)
DEFINE_FLOAT_TILE(bf16)

/* ---- Q8_0 and Q4_0 weights x Q8_0 activations ---- */

/* Weight blocks b and b + 1 of a row as 64 int8 (Q8_0) ... */
EXL_INLINE __m512i q8_0_pair(const block_q8_0 *w, int64_t b, int two)
{
	__m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)w[b].qs);

	if (!two)
		return _mm512_zextsi256_si512(lo);
	return join256(lo, _mm256_loadu_si256((const __m256i *)(const void *)w[b + 1].qs));
}

/* ... or as 64 levels 0..15 (Q4_0), in element order. */
EXL_INLINE __m512i q4_0_pair(const block_q4_0 *w, int64_t b, int two)
{
	__m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)w[b].qs);
	__m128i q1 = two ? _mm_loadu_si128((const __m128i *)(const void *)w[b + 1].qs) : _mm_setzero_si128();
	__m256i q = _mm256_set_m128i(q1, q0);
	__m256i lo4 = _mm256_set1_epi8(0x0f);
	/* [lo0, lo1, hi0, hi1] -> [lo0, hi0, lo1, hi1] */
	__m512i z = join256(_mm256_and_si256(q, lo4), _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4));

	return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

EXL_INLINE __m512i act_pair(const int8_t *xq, int64_t b, int two)
{
	const void *p = xq + 32 * b;

	if (two)
		return _mm512_loadu_si512(p);
	return _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)p));
}

EXL_INLINE __m512 act_scale_pair(const float *xd, int64_t b, int two)
{
	return two ? pair_ps_load(xd + b) : pair_ps(xd[b], 0.0f);
}

/* One step (two blocks, or the last one) of a Q8_0 or Q4_0 tile. */
EXL_INLINE void q0_step(const void *const *w, const int8_t *const *xq, const float *const *xd,
			int64_t b, int two, const int R, const int C, const int q4, size_t pf,
			__m512 acc[4][4])
{
	__m512i xv[4], xo[4];
	__m512 dx[4];

	for (int j = 0; j < C; j++) {
		xv[j] = act_pair(xq[j], b, two);
		dx[j] = act_scale_pair(xd[j], b, two);
		if (q4) {
			/* levels are offset by 8: start each dot at -8 * sum(x) */
			xo[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
						 dot_u8s8(_mm512_setzero_si512(), _mm512_set1_epi8(8), xv[j]));
		} else {
#ifdef EXL_MM_VNNI
			/* weights go unsigned (+128): start at -128 * sum(x) */
			xo[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
						 _mm512_dpbusd_epi32(_mm512_setzero_si512(),
								     _mm512_set1_epi8((char)0x80), xv[j]));
#else
			xo[j] = _mm512_setzero_si512();
#endif
		}
	}
	for (int i = 0; i < R; i++) {
		__m512i wv;
		__m512 dw;

		if (pf) /* decode-shaped: fetch later rows ahead */
			_mm_prefetch((const char *)w[i] + pf + (q4 ? 18 : 34) * b, _MM_HINT_T0);
		if (q4) {
			const block_q4_0 *wb = w[i];
			wv = q4_0_pair(wb, b, two);
			dw = pair_ps(exl_f16(wb[b].d), two ? exl_f16(wb[b + 1].d) : 0.0f);
		} else {
			const block_q8_0 *wb = w[i];
			wv = q8_0_pair(wb, b, two);
			dw = pair_ps(exl_f16(wb[b].d), two ? exl_f16(wb[b + 1].d) : 0.0f);
		}
		if (q4) {
			for (int j = 0; j < C; j++) {
				__m512i p = dot_u8s8(xo[j], wv, xv[j]);
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, dx[j]), acc[i][j]);
			}
		} else {
#ifdef EXL_MM_VNNI
			__m512i wu = _mm512_xor_si512(wv, _mm512_set1_epi8((char)0x80));

			for (int j = 0; j < C; j++) {
				__m512i p = _mm512_dpbusd_epi32(xo[j], wu, xv[j]);
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, dx[j]), acc[i][j]);
			}
#else
			/* |w| * (x with w's sign): u8 x s8 without saturation */
			__m512i aw = _mm512_abs_epi8(wv);
			__mmask64 neg = _mm512_movepi8_mask(wv);

			for (int j = 0; j < C; j++) {
				__m512i sx = _mm512_mask_sub_epi8(xv[j], neg, _mm512_setzero_si512(), xv[j]);
				__m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1));
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, dx[j]), acc[i][j]);
			}
#endif
		}
	}
}

/* [v[2p] x8, v[2p + 1] x8] */
EXL_INLINE __m512 spread_pair(__m256 v, int p)
{
	const __m512i idx = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
					     2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
					     2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p);

	return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}

/* Blocks b .. b + 7 of a Q8_0 or Q4_0 tile: the scales of all eight are
 * gathered once, then four steps of two blocks. */
EXL_INLINE void q0_step8(const void *const *w, const int8_t *const *xq, const float *const *xd,
			 int64_t b, const int R, const int C, const int q4, size_t pf,
			 __m512 acc[4][4])
{
	__m256 dw8[4], dx8[4];

	for (int j = 0; j < C; j++)
		dx8[j] = _mm256_loadu_ps(xd[j] + b);
	for (int i = 0; i < R; i++)
		dw8[i] = q4 ? exl_q4_0_scales8(w[i], b) : exl_q8_0_scales8(w[i], b);

	for (int p = 0; p < 4; p++) {
		int64_t bp = b + 2 * p;
		__m512i xv[4], xo[4];
		__m512 dx[4];

		for (int j = 0; j < C; j++) {
			xv[j] = _mm512_loadu_si512(xq[j] + 32 * bp);
			dx[j] = spread_pair(dx8[j], p);
			if (q4) {
				/* levels are offset by 8: start each dot at -8 * sum(x) */
				xo[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
							 dot_u8s8(_mm512_setzero_si512(), _mm512_set1_epi8(8), xv[j]));
			} else {
#ifdef EXL_MM_VNNI
				/* weights go unsigned (+128): start at -128 * sum(x) */
				xo[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
							 _mm512_dpbusd_epi32(_mm512_setzero_si512(),
									     _mm512_set1_epi8((char)0x80), xv[j]));
#else
				xo[j] = _mm512_setzero_si512();
#endif
			}
		}
		for (int i = 0; i < R; i++) {
			__m512 dw = spread_pair(dw8[i], p);
			__m512i wv;

			if (pf) { /* decode-shaped: fetch later rows ahead (68 bytes) */
				const char *a = (const char *)w[i] + pf + (q4 ? 18 : 34) * bp;
				_mm_prefetch(a, _MM_HINT_T0);
				_mm_prefetch(a + 64, _MM_HINT_T0);
			}
			if (q4)
				wv = q4_0_pair(w[i], bp, 1);
			else
				wv = q8_0_pair(w[i], bp, 1);
			if (q4) {
				for (int j = 0; j < C; j++) {
					__m512i d = dot_u8s8(xo[j], wv, xv[j]);
					acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dx[j]),
								    acc[i][j]);
				}
			} else {
#ifdef EXL_MM_VNNI
				__m512i wu = _mm512_xor_si512(wv, _mm512_set1_epi8((char)0x80));

				for (int j = 0; j < C; j++) {
					__m512i d = _mm512_dpbusd_epi32(xo[j], wu, xv[j]);
					acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dx[j]),
								    acc[i][j]);
				}
#else
				__m512i aw = _mm512_abs_epi8(wv);
				__mmask64 neg = _mm512_movepi8_mask(wv);

				for (int j = 0; j < C; j++) {
					__m512i sx = _mm512_mask_sub_epi8(xv[j], neg, _mm512_setzero_si512(), xv[j]);
					__m512i d = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1));
					acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dx[j]),
								    acc[i][j]);
				}
#endif
			}
		}
	}
}

EXL_INLINE void tile_q0(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C,
			const int q4)
{
	const void *w[4];
	const int8_t *xq[4];
	const float *xd[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 32, b = 0;
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);

	for (int i = 0; i < R; i++)
		w[i] = exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_0_d(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();
	for (; b + 8 <= nb; b += 8)
		q0_step8(w, xq, xd, b, R, C, q4, pf, acc);
	for (; b + 2 <= nb; b += 2)
		q0_step(w, xq, xd, b, 1, R, C, q4, pf, acc);
	if (b < nb)
		q0_step(w, xq, xd, b, 0, R, C, q4, pf, acc);
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

/* ---- Q4_0: four blocks per vector ----
 *
 * Byte j of a Q4_0 block holds weight j (low nibble) and j + 16 (high).
 * Four blocks' 16-byte qs side by side split into a vector of the four low
 * halves and one of the four high halves with one mask and one shift, so
 * this set's act_q4_0 stores each group of four blocks of x in that order:
 * [x0..15 of blocks 0,1,2,3 | x16..31 of blocks 0,1,2,3].  A trailing group
 * of fewer than four blocks stays in element order. */

static void act_q4_0(const float *x, uint8_t *act, int64_t cols)
{
	int8_t tmp[128];

	exl_act_q8_0_avx2(x, act, cols);
	for (int64_t g = 0; g + 4 <= cols / 32; g += 4) {
		int8_t *q = (int8_t *)act + 32 * g;

		memcpy(tmp, q, 128);
		for (int k = 0; k < 4; k++) {
			memcpy(q + 16 * k, tmp + 32 * k, 16);
			memcpy(q + 64 + 16 * k, tmp + 32 * k + 16, 16);
		}
	}
}

/* [v[4g] x4, v[4g+1] x4, v[4g+2] x4, v[4g+3] x4] */
EXL_INLINE __m512 spread_quad(__m512 v, int g)
{
	const __m512i idx = _mm512_set_epi32(4 * g + 3, 4 * g + 3, 4 * g + 3, 4 * g + 3,
					     4 * g + 2, 4 * g + 2, 4 * g + 2, 4 * g + 2,
					     4 * g + 1, 4 * g + 1, 4 * g + 1, 4 * g + 1,
					     4 * g, 4 * g, 4 * g, 4 * g);

	return _mm512_permutexvar_ps(idx, v);
}

/* Blocks b .. b + 3 of a row as [low nibbles of the four], [high ...]. */
EXL_INLINE void q4_0_quad(const block_q4_0 *w, int64_t b, __m512i *lo, __m512i *hi)
{
	__m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)w[b].qs));

	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)w[b + 1].qs), 1);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)w[b + 2].qs), 2);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)w[b + 3].qs), 3);
	*lo = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
	*hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
}

/* One group of four blocks at b; dw4 / dx4 hold the scales of its blocks
 * in quad g. */
EXL_INLINE void q4_0_quad_step(const block_q4_0 *const *w, const int8_t *const *xq, int64_t b,
			       const __m512 *dws, const __m512 *dxs, int g, const int R,
			       const int C, size_t pf, __m512 acc[4][4])
{
	__m512i xl[4], xh[4], xo[4];
	__m512 dx[4];

	for (int j = 0; j < C; j++) {
		xl[j] = _mm512_loadu_si512(xq[j] + 32 * b);
		xh[j] = _mm512_loadu_si512(xq[j] + 32 * b + 64);
		/* levels are offset by 8: start each dot at -8 * sum(x) */
		__m512i e = dot_u8s8(dot_u8s8(_mm512_setzero_si512(), _mm512_set1_epi8(8), xl[j]),
				     _mm512_set1_epi8(8), xh[j]);
		xo[j] = _mm512_sub_epi32(_mm512_setzero_si512(), e);
		dx[j] = spread_quad(dxs[j], g);
	}
	for (int i = 0; i < R; i++) {
		__m512i lo, hi;
		__m512 dw = spread_quad(dws[i], g);

		if (pf) { /* decode-shaped: fetch later rows ahead (72 bytes) */
			_mm_prefetch((const char *)(w[i] + b) + pf, _MM_HINT_T0);
			_mm_prefetch((const char *)(w[i] + b) + pf + 64, _MM_HINT_T0);
		}
		q4_0_quad(w[i], b, &lo, &hi);
		for (int j = 0; j < C; j++) {
			__m512i d = dot_u8s8(dot_u8s8(xo[j], lo, xl[j]), hi, xh[j]);
			acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dx[j]), acc[i][j]);
		}
	}
}

/* Eight blocks at b.  The level offset is taken off in float, per block,
 * as -8 * d_w * (d_x * sum q_x) (the act's s[]), folded into the low lanes
 * of the accumulators first; then two groups of four blocks.  Tiles of
 * few outputs (decode) form the scale products once per eight blocks,
 * larger ones per group from per-row and per-column spreads (fewer live
 * registers): the products are the same floats either way, so an output's
 * value never depends on the tile shape. */
EXL_INLINE void q4_0_oct_step(const block_q4_0 *const *w, const int8_t *const *xq,
			      const float *const *xd, const float *const *xs, int64_t b,
			      const int R, const int C, size_t pf, __m512 acc[4][4])
{
	const int precomp = R * C <= 4;
	__m512 prod[4][4];
	__m256 dx8[4], dw8[4];

	for (int j = 0; j < C; j++)
		dx8[j] = _mm256_loadu_ps(xd[j] + b);
	for (int i = 0; i < R; i++) {
		dw8[i] = exl_q4_0_scales8(w[i], b);
		for (int j = 0; j < C; j++) {
			__m256 sn8 = _mm256_mul_ps(_mm256_loadu_ps(xs[j] + b), _mm256_set1_ps(-8.0f));

			acc[i][j] = _mm512_fmadd_ps(_mm512_zextps256_ps512(dw8[i]), _mm512_zextps256_ps512(sn8),
						    acc[i][j]);
			if (precomp)
				prod[i][j] = _mm512_castps256_ps512(_mm256_mul_ps(dw8[i], dx8[j]));
		}
	}
	for (int g = 0; g < 2; g++) {
		int64_t bg = b + 4 * g;
		__m512i xl[4], xh[4];
		__m512 dxg[4];

		for (int j = 0; j < C; j++) {
			xl[j] = _mm512_loadu_si512(xq[j] + 32 * bg);
			xh[j] = _mm512_loadu_si512(xq[j] + 32 * bg + 64);
			if (!precomp)
				dxg[j] = spread_quad(_mm512_castps256_ps512(dx8[j]), g);
		}
		for (int i = 0; i < R; i++) {
			__m512i lo, hi;
			__m512 dwg = _mm512_setzero_ps();

			if (pf) { /* decode-shaped: fetch later rows ahead (72 bytes) */
				_mm_prefetch((const char *)(w[i] + bg) + pf, _MM_HINT_T0);
				_mm_prefetch((const char *)(w[i] + bg) + pf + 64, _MM_HINT_T0);
			}
			q4_0_quad(w[i], bg, &lo, &hi);
			if (!precomp)
				dwg = spread_quad(_mm512_castps256_ps512(dw8[i]), g);
			for (int j = 0; j < C; j++) {
				__m512i d = dot_u8s8(dot_u8s8(_mm512_setzero_si512(), lo, xl[j]), hi, xh[j]);
				__m512 sc = precomp ? spread_quad(prod[i][j], g) : _mm512_mul_ps(dwg, dxg[j]);

				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc[i][j]);
			}
		}
	}
}

EXL_INLINE void tile_q4_0(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C)
{
	const block_q4_0 *w[4];
	const int8_t *xq[4];
	const float *xd[4], *xs[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 32, b = 0;
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);

	for (int i = 0; i < R; i++)
		w[i] = (const block_q4_0 *)(const void *)exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_0_d(a, m->cols);
		xs[j] = exl_act_q8_0_s(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();

	for (; b + 8 <= nb; b += 8)
		q4_0_oct_step(w, xq, xd, xs, b, R, C, pf, acc);
	if (b + 4 <= nb) {
		__m512 dws[4], dxs[4];

		for (int j = 0; j < C; j++)
			dxs[j] = _mm512_castps128_ps512(_mm_loadu_ps(xd[j] + b));
		for (int i = 0; i < R; i++)
			dws[i] = _mm512_castps128_ps512(_mm_setr_ps(exl_f16(w[i][b].d), exl_f16(w[i][b + 1].d),
								    exl_f16(w[i][b + 2].d), exl_f16(w[i][b + 3].d)));
		q4_0_quad_step(w, xq, b, dws, dxs, 0, R, C, pf, acc);
		b += 4;
	}
	/* the last 1..3 blocks, in element order */
	const void *wv[4];
	for (int i = 0; i < R; i++)
		wv[i] = w[i];
	for (; b + 2 <= nb; b += 2)
		q0_step(wv, xq, xd, b, 1, R, C, 1, pf, acc);
	if (b < nb)
		q0_step(wv, xq, xd, b, 0, R, C, 1, pf, acc);
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

#define TILE_Q8_0(m, r, c, R, C) tile_q0(m, r, c, R, C, 0)

static void mm_q8_0(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q8_0, m, r0, r1, c0, c1, 4, 4);
}

static void mm_q4_0(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(tile_q4_0, m, r0, r1, c0, c1, 4, 4);
}

/* ---- Q4_1, Q5_0, Q5_1, IQ4_NL: the other 32-weight types ----
 *
 * Laid out as Q4_0, so they share this set's act_q4_0 (groups of four
 * blocks of x as [x0..15 of each | x16..31 of each], a trailing group of
 * fewer in element order) and the shape of its steps: four blocks' levels
 * in two vectors, each 128-bit lane one block, int32 dots, one float FMA
 * per four blocks and output.  Fifth bits (Q5_0 / Q5_1) come in through a
 * byte mask from qh; IQ4_NL's levels through a byte shuffle, its signed
 * dot as the Q8_0 kernels do theirs (with VNNI: levels + 128, less
 * 128 * sum(x); without: |w| * (x with w's sign)).  Q5_0's -16 is taken
 * off as 16 * sum(x) at the start of each dot; Q4_1 / Q5_1 add m_w * s_x
 * per block, eight blocks at a time. */

#define B32_FIVE(T) ((T) == EXL_Q5_0 || (T) == EXL_Q5_1)
#define B32_HAS_MIN(T) ((T) == EXL_Q4_1 || (T) == EXL_Q5_1)
/* signed levels by table: IQ4_NL's, and MXFP4's (0, +-1 .. +-12, with
 * IQ4_NL's nibbles and steps, its scale an E8M0 exponent: 17-byte blocks
 * that start at any byte) */
#define B32_TABLE(T) ((T) == EXL_IQ4_NL || (T) == EXL_MXFP4)
/* the fp16 scale d is at offset 0 of every one but MXFP4 (its exponent
 * e there); m at 2 of Q4_1 / Q5_1 */
#define B32_D 0
#define B32_M 2

EXL_INLINE size_t b32_size(const int T)
{
	return T == EXL_Q4_1 ? sizeof(block_q4_1) : T == EXL_Q5_0 ? sizeof(block_q5_0) :
	       T == EXL_Q5_1 ? sizeof(block_q5_1) : T == EXL_MXFP4 ? sizeof(block_mxfp4) : sizeof(block_iq4_nl);
}

EXL_INLINE size_t b32_qs(const int T)
{
	return T == EXL_Q4_1 ? offsetof(block_q4_1, qs) : T == EXL_Q5_0 ? offsetof(block_q5_0, qs) :
	       T == EXL_Q5_1 ? offsetof(block_q5_1, qs) : T == EXL_MXFP4 ? offsetof(block_mxfp4, qs) :
	       offsetof(block_iq4_nl, qs);
}

EXL_INLINE size_t b32_qh(const int T)
{
	return T == EXL_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
}

EXL_INLINE const uint8_t *b32(const uint8_t *row, int64_t b, const int T)
{
	return row + (size_t)b * b32_size(T);
}

EXL_INLINE int b32_u16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

EXL_INLINE uint64_t b32_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

EXL_INLINE float b32_half(const uint8_t *row, int64_t b, const int T, size_t off)
{
	return exl_f16((uint16_t)b32_u16(b32(row, b, T) + off));
}

/* The fp16 field at byte off of blocks b .. b + n - 1 (n <= 8) as floats,
 * zeros after. */
EXL_INLINE __m256 b32_halves(const uint8_t *row, int64_t b, int n, const int T, size_t off)
{
	__m128i h = _mm_setzero_si128();

	h = _mm_insert_epi16(h, b32_u16(b32(row, b, T) + off), 0);
	if (n > 1)
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 1, T) + off), 1);
	if (n > 2)
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 2, T) + off), 2);
	if (n > 3)
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 3, T) + off), 3);
	if (n > 4) {
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 4, T) + off), 4);
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 5, T) + off), 5);
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 6, T) + off), 6);
		h = _mm_insert_epi16(h, b32_u16(b32(row, b + 7, T) + off), 7);
	}
	return _mm256_cvtph_ps(h);
}

/* The scale d_w of block b: the fp16 at offset 0, or MXFP4's 2^(e - 128). */
EXL_INLINE float b32_d(const uint8_t *row, int64_t b, const int T)
{
	if (T == EXL_MXFP4)
		return exl_e8m0_half(*b32(row, b, T));
	return b32_half(row, b, T, B32_D);
}

/* Those of blocks b .. b + n - 1 (n <= 8) as floats, zeros after
 * (b32_halves; MXFP4's exponents through exl_e8m0_half's bits, lanes
 * past n from e = 0 and then zeroed). */
EXL_INLINE __m256 b32_ds(const uint8_t *row, int64_t b, int n, const int T)
{
	if (T != EXL_MXFP4)
		return b32_halves(row, b, n, T, B32_D);
	uint32_t e[8] = { 0 };

	for (int t = 0; t < n; t++)
		e[t] = *b32(row, b + t, T);
	__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)e);
	__m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
	__m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
	__m256i d = _mm256_mask_blend_epi32(_mm256_cmpgt_epi32_mask(v, _mm256_set1_epi32(1)), sub, normal);

	return _mm256_maskz_mov_ps((__mmask8)((1u << n) - 1), _mm256_castsi256_ps(d));
}

/* Levels 0..15 to the type's own: the fifth bits (bit k of fifth for byte
 * k) or IQ4_NL's / MXFP4's table. */
EXL_INLINE __m512i b32_fix(__m512i lev, uint64_t fifth, const int T)
{
	if (B32_FIVE(T))
		lev = _mm512_or_si512(lev, _mm512_maskz_mov_epi8((__mmask64)fifth, _mm512_set1_epi8(0x10)));
	if (T == EXL_IQ4_NL) {
		const __m512i tab = _mm512_broadcast_i32x4(
			_mm_set_epi64x((long long)EXL_IQ4NL_HI, (long long)EXL_IQ4NL_LO));

		lev = _mm512_shuffle_epi8(tab, lev);
	}
	if (T == EXL_MXFP4) {
		const __m512i tab = _mm512_broadcast_i32x4(
			_mm_set_epi64x((long long)EXL_MXFP4_HI, (long long)EXL_MXFP4_LO));

		lev = _mm512_shuffle_epi8(tab, lev);
	}
	return lev;
}

/* Blocks b .. b + 3 as [weights 0..15 of each] and [16..31 of each]. */
EXL_INLINE void b32_quad(const uint8_t *row, int64_t b, const int T, __m512i *lo, __m512i *hi)
{
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	__m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(b32(row, b, T) + b32_qs(T))));
	uint64_t flo = 0, fhi = 0;

	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(b32(row, b + 1, T) + b32_qs(T))), 1);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(b32(row, b + 2, T) + b32_qs(T))), 2);
	v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(b32(row, b + 3, T) + b32_qs(T))), 3);
	if (B32_FIVE(T)) {
		for (int k = 0; k < 4; k++) {
			uint64_t h = b32_u32(b32(row, b + k, T) + b32_qh(T));

			flo |= (h & 0xffffu) << (16 * k);
			fhi |= (h >> 16) << (16 * k);
		}
	}
	*lo = b32_fix(_mm512_and_si512(v, lo4), flo, T);
	*hi = b32_fix(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo4), fhi, T);
}

/* Block b, and b + 1 when two, in element order: [0..31 of b | 0..31 of
 * b + 1] (zero levels, before the type's fix, for a missing second). */
EXL_INLINE __m512i b32_elem(const uint8_t *row, int64_t b, int two, const int T)
{
	const __m512i sh = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
					    0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
	__m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)(b32(row, b, T) + b32_qs(T)));
	__m128i q1 = two ? _mm_loadu_si128((const __m128i *)(const void *)(b32(row, b + 1, T) + b32_qs(T)))
			 : _mm_setzero_si128();
	__m512i v = _mm512_castsi128_si512(q0);
	uint64_t f = 0;

	v = _mm512_inserti32x4(v, q0, 1);
	v = _mm512_inserti32x4(v, q1, 2);
	v = _mm512_inserti32x4(v, q1, 3);
	/* 128-bit lanes 1 and 3 take the high nibbles */
	v = _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0f));
	if (B32_FIVE(T)) {
		f = b32_u32(b32(row, b, T) + b32_qh(T));
		if (two)
			f |= b32_u32(b32(row, b + 1, T) + b32_qh(T)) << 32;
	}
	return b32_fix(v, f, T);
}

/* What each dot starts from for x: Q5_0 -16 * sum(x); IQ4_NL and MXFP4
 * with VNNI -128 * sum(x) (their levels go in + 128); else 0. */
EXL_INLINE __m512i b32_xo(__m512i x, const int T)
{
	if (T == EXL_Q5_0)
		return _mm512_sub_epi32(_mm512_setzero_si512(),
					dot_u8s8(_mm512_setzero_si512(), _mm512_set1_epi8(16), x));
#ifdef EXL_MM_VNNI
	if (B32_TABLE(T))
		return _mm512_sub_epi32(_mm512_setzero_si512(),
					_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), x));
#endif
	return _mm512_setzero_si512();
}

/* acc + the dot of levels and x, four products per int32 lane. */
EXL_INLINE __m512i b32_dot(__m512i acc, __m512i lev, __m512i x, const int T)
{
	if (!B32_TABLE(T)) /* levels 0..31: maddubs pairs fit int16 */
		return dot_u8s8(acc, lev, x);
#ifdef EXL_MM_VNNI
	return _mm512_dpbusd_epi32(acc, _mm512_xor_si512(lev, _mm512_set1_epi8((char)0x80)), x);
#else
	__m512i aw = _mm512_abs_epi8(lev);
	__m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(lev), _mm512_setzero_si512(), x);

	return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1)));
#endif
}

/* Four blocks at b (x in this set's group order); dw4 / dx4 hold their
 * scales in quad g. */
EXL_INLINE void b32_quad_step(const uint8_t *const *w, const int8_t *const *xq, int64_t b,
			      const __m512 *dws, const __m512 *dxs, int g, const int R, const int C,
			      const int T, size_t pf, __m512 acc[4][4])
{
	__m512i xl[4], xh[4], xo[4];
	__m512 dx[4];

	for (int j = 0; j < C; j++) {
		xl[j] = _mm512_loadu_si512(xq[j] + 32 * b);
		xh[j] = _mm512_loadu_si512(xq[j] + 32 * b + 64);
		xo[j] = _mm512_add_epi32(b32_xo(xl[j], T), b32_xo(xh[j], T));
		dx[j] = spread_quad(dxs[j], g);
	}
	for (int i = 0; i < R; i++) {
		__m512i lo, hi;
		__m512 dw = spread_quad(dws[i], g);

		if (pf) { /* decode-shaped: fetch later rows ahead (72-96 bytes) */
			_mm_prefetch((const char *)b32(w[i], b, T) + pf, _MM_HINT_T0);
			_mm_prefetch((const char *)b32(w[i], b, T) + pf + 64, _MM_HINT_T0);
		}
		b32_quad(w[i], b, T, &lo, &hi);
		for (int j = 0; j < C; j++) {
			__m512i d = b32_dot(b32_dot(xo[j], lo, xl[j], T), hi, xh[j], T);

			acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dx[j]), acc[i][j]);
		}
	}
}

/* One or two blocks at b in element order (the last 1..3). */
EXL_INLINE void b32_elem_step(const uint8_t *const *w, const int8_t *const *xq, const float *const *xd,
			      const float *const *xs, int64_t b, int two, const int R, const int C,
			      const int T, __m512 acc[4][4])
{
	__m512i xv[4], xo[4];
	__m512 dx[4];

	for (int j = 0; j < C; j++) {
		xv[j] = act_pair(xq[j], b, two);
		xo[j] = b32_xo(xv[j], T);
		dx[j] = act_scale_pair(xd[j], b, two);
	}
	for (int i = 0; i < R; i++) {
		__m512i v = b32_elem(w[i], b, two, T);
		__m512 dw = pair_ps(b32_d(w[i], b, T), two ? b32_d(w[i], b + 1, T) : 0.0f);

		for (int j = 0; j < C; j++) {
			if (B32_HAS_MIN(T)) {
				__m512 mw = _mm512_zextps128_ps512(_mm_setr_ps(
					b32_half(w[i], b, T, B32_M), two ? b32_half(w[i], b + 1, T, B32_M) : 0.0f,
					0, 0));
				__m512 sx = _mm512_zextps128_ps512(_mm_setr_ps(xs[j][b], two ? xs[j][b + 1] : 0.0f,
									       0, 0));

				acc[i][j] = _mm512_fmadd_ps(mw, sx, acc[i][j]);
			}
			__m512i d = b32_dot(xo[j], v, xv[j], T);

			acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, dx[j]), acc[i][j]);
		}
	}
}

EXL_INLINE void tile_b32(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C,
			 const int T)
{
	const uint8_t *w[4];
	const int8_t *xq[4];
	const float *xd[4], *xs[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 32, b = 0;
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);

	for (int i = 0; i < R; i++)
		w[i] = exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_0_d(a, m->cols);
		xs[j] = exl_act_q8_0_s(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();

	for (; b + 4 <= nb; b += 4 * (b + 8 <= nb ? 2 : 1)) {
		/* eight blocks at a time (two quads), or a last four */
		const int n8 = b + 8 <= nb ? 8 : 4;
		__m512 dws[4], dxs[4];

		for (int j = 0; j < C; j++)
			dxs[j] = n8 == 8 ? _mm512_zextps256_ps512(_mm256_loadu_ps(xd[j] + b))
					 : _mm512_zextps128_ps512(_mm_loadu_ps(xd[j] + b));
		for (int i = 0; i < R; i++) {
			dws[i] = _mm512_zextps256_ps512(b32_ds(w[i], b, n8, T));
			if (B32_HAS_MIN(T)) {
				__m512 mw = _mm512_zextps256_ps512(b32_halves(w[i], b, n8, T, B32_M));

				for (int j = 0; j < C; j++) {
					__m512 sx = n8 == 8 ? _mm512_zextps256_ps512(_mm256_loadu_ps(xs[j] + b))
							    : _mm512_zextps128_ps512(_mm_loadu_ps(xs[j] + b));

					acc[i][j] = _mm512_fmadd_ps(mw, sx, acc[i][j]);
				}
			}
		}
		for (int g = 0; g < n8 / 4; g++)
			b32_quad_step(w, xq, b + 4 * g, dws, dxs, g, R, C, T, pf, acc);
	}
	/* the last 1..3 blocks, in element order */
	for (; b + 2 <= nb; b += 2)
		b32_elem_step(w, xq, xd, xs, b, 1, R, C, T, acc);
	if (b < nb)
		b32_elem_step(w, xq, xd, xs, b, 0, R, C, T, acc);
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

#define TILE_Q4_1(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_Q4_1)
#define TILE_Q5_0(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_Q5_0)
#define TILE_Q5_1(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_Q5_1)
#define TILE_IQ4_NL(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_IQ4_NL)
#define TILE_MXFP4(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_MXFP4)

static void mm_q4_1(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q4_1, m, r0, r1, c0, c1, 4, 4);
}

static void mm_q5_0(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q5_0, m, r0, r1, c0, c1, 4, 4);
}

static void mm_q5_1(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q5_1, m, r0, r1, c0, c1, 4, 4);
}

static void mm_iq4_nl(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_IQ4_NL, m, r0, r1, c0, c1, 4, 4);
}

/* In the avx512vnni set MXFP4 is avx2vnni's, with IQ4_NL's act (matmul.c):
 * this one serves the avx512 set. */
static void mm_mxfp4(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_MXFP4, m, r0, r1, c0, c1, 4, 4);
}

/* ---- K-quants x Q8_K activations ---- */

/* Q4_K: 64 bytes of qs hold sub-blocks 4t, 4t+2 in their low nibbles and
 * 4t+1, 4t+3 in their high ones, so this set's act_q4_K
 * (exl_act_q4_K_avx2) stores each super-block's x as sub-blocks [0, 2, 1,
 * 3, 4, 6, 5, 7]: one mask or one shift then gives vectors that match 64
 * contiguous x. */

/* Q4_K, and Q5_K (five): the same with the fifth bit of each weight from
 * qh (bit j of qh[l] for weight l of sub-block j), brought to bit 4 per
 * 256-bit half by a variable shift; levels 0..31 keep maddubs pairs in
 * int16.  Both blocks start with d, dmin, scales[12]. */
EXL_INLINE void tile_q45_K(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C,
			   const int five)
{
	const size_t bsize = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
	const size_t qs_off = five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
	const uint8_t *w[4];
	const int8_t *xq[4];
	const float *xd[4];
	const int16_t *xs[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 256;
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);
	const __m512i lo4 = _mm512_set1_epi8(0x0f);

	for (int i = 0; i < R; i++)
		w[i] = exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_K_d(a, m->cols);
		xs[j] = exl_act_q8_K_bsums(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();

	for (int64_t b = 0; b < nb; b++) {
		/* few outputs (decode): two dot chains, not one, per output */
		__m512i isum[4][4], isum2[4][4];
		const int dual = R * C <= 2;
		__m512i sc16[4], hb[4];
		__m256i mins[4];

		for (int i = 0; i < R; i++) {
			const block_q4_K *wb = (const block_q4_K *)(const void *)(w[i] + b * bsize);
			uint32_t s[2], n[2];

			if (pf) { /* decode-shaped: fetch later rows ahead */
				const char *p = (const char *)wb + pf;
				_mm_prefetch(p, _MM_HINT_T0);
				_mm_prefetch(p + 64, _MM_HINT_T0);
				_mm_prefetch(p + 128, _MM_HINT_T0);
			}
			if (five)
				hb[i] = _mm512_broadcast_i64x4(_mm256_loadu_si256(
					(const __m256i *)(const void *)((const block_q5_K *)(const void *)wb)->qh));
			exl_q4_K_scales(wb->scales, s, n);
			__m128i s8 = _mm_setr_epi32((int)s[0], (int)s[1], 0, 0);
			__m128i m8 = _mm_setr_epi32((int)n[0], (int)n[1], 0, 0);
			sc16[i] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(s8));
			mins[i] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
			for (int j = 0; j < C; j++)
				isum[i][j] = isum2[i][j] = _mm512_setzero_si512();
		}
		for (int t = 0; t < 2; t++) {
			__m512i xl[4], xh[4];
			/* int16 lanes 0-15: scale of the first sub-block, 16-31:
			 * of the second: 4t, 4t+2 (low) and 4t+1, 4t+3 (high) */
			const int a0 = 4 * t, a1 = 4 * t + 2, b0 = 4 * t + 1, b1 = 4 * t + 3;
			const __m512i il = _mm512_set_epi16(a1, a1, a1, a1, a1, a1, a1, a1, a1, a1, a1, a1, a1, a1, a1, a1,
							    a0, a0, a0, a0, a0, a0, a0, a0, a0, a0, a0, a0, a0, a0, a0, a0);
			const __m512i ih = _mm512_set_epi16(b1, b1, b1, b1, b1, b1, b1, b1, b1, b1, b1, b1, b1, b1, b1, b1,
							    b0, b0, b0, b0, b0, b0, b0, b0, b0, b0, b0, b0, b0, b0, b0, b0);

			for (int j = 0; j < C; j++) {
				xl[j] = _mm512_loadu_si512(xq[j] + 256 * b + 128 * t);
				xh[j] = _mm512_loadu_si512(xq[j] + 256 * b + 128 * t + 64);
			}
			/* fifth bits: sub-blocks 4t, 4t+2 (low) and 4t+1, 4t+3 (high) */
			const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16((short)a0), _mm256_set1_epi16((short)a1), 1);
			const __m512i shh = _mm512_inserti64x4(_mm512_set1_epi16((short)b0), _mm256_set1_epi16((short)b1), 1);

			for (int i = 0; i < R; i++) {
				__m512i q = _mm512_loadu_si512(w[i] + b * bsize + qs_off + 64 * t);
				__m512i ql = _mm512_and_si512(q, lo4);
				__m512i qh = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);

				if (five) {
					const __m512i one = _mm512_set1_epi8(1);

					ql = _mm512_or_si512(ql, _mm512_slli_epi16(
						_mm512_and_si512(_mm512_srlv_epi16(hb[i], shl), one), 4));
					qh = _mm512_or_si512(qh, _mm512_slli_epi16(
						_mm512_and_si512(_mm512_srlv_epi16(hb[i], shh), one), 4));
				}
				__m512i sl = _mm512_permutexvar_epi16(il, sc16[i]);
				__m512i sh = _mm512_permutexvar_epi16(ih, sc16[i]);

				for (int j = 0; j < C; j++) {
					isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(ql, xl[j]), sl);
					if (dual)
						isum2[i][j] = dot_s16(isum2[i][j], _mm512_maddubs_epi16(qh, xh[j]), sh);
					else
						isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(qh, xh[j]), sh);
				}
			}
		}
		for (int i = 0; i < R; i++) {
			const block_q4_K *wb = (const block_q4_K *)(const void *)(w[i] + b * bsize);
			float d = exl_f16(wb->d), dmin = exl_f16(wb->dmin);

			for (int j = 0; j < C; j++) {
				__m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(xs[j] + 16 * b));
				__m512 msum = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins[i], bs)));
				float dx = xd[j][b];

				if (dual)
					isum[i][j] = _mm512_add_epi32(isum[i][j], isum2[i][j]);
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), _mm512_set1_ps(d * dx),
							    acc[i][j]);
				acc[i][j] = _mm512_fnmadd_ps(msum, _mm512_set1_ps(dmin * dx), acc[i][j]);
			}
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

#define TILE_Q4_K(m, r, c, R, C) tile_q45_K(m, r, c, R, C, 0)
#define TILE_Q5_K(m, r, c, R, C) tile_q45_K(m, r, c, R, C, 1)

static void mm_q4_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q4_K, m, r0, r1, c0, c1, 2, 4);
}

static void mm_q5_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q5_K, m, r0, r1, c0, c1, 2, 4);
}

EXL_INLINE void tile_q6_K(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C)
{
	const block_q6_K *w[4];
	const int8_t *xq[4];
	const float *xd[4];
	const int16_t *xs[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 256;
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	const __m512i m3 = _mm512_set1_epi8(3);
	const __m512i sh02 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
	const __m512i sh46 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);

	for (int i = 0; i < R; i++)
		w[i] = (const block_q6_K *)(const void *)exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_K_d(a, m->cols);
		xs[j] = exl_act_q8_K_bsums(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();

	for (int64_t b = 0; b < nb; b++) {
		/* few outputs (decode): two dot chains, not one, per output */
		__m512i isum[4][4], isum2[4][4];
		const int dual = R * C <= 2;
		__m512i sc16[4];

		for (int i = 0; i < R; i++) {
			if (pf) { /* decode-shaped: fetch later rows ahead */
				const char *p = (const char *)(w[i] + b) + pf;
				_mm_prefetch(p, _MM_HINT_T0);
				_mm_prefetch(p + 64, _MM_HINT_T0);
				_mm_prefetch(p + 128, _MM_HINT_T0);
				_mm_prefetch(p + 192, _MM_HINT_T0);
			}
			sc16[i] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(
				_mm_loadu_si128((const __m128i *)(const void *)w[i][b].scales)));
			for (int j = 0; j < C; j++)
				isum[i][j] = isum2[i][j] = _mm512_setzero_si512();
		}
		for (int h = 0; h < 2; h++) {
			__m512i xa[4], xb[4];
			/* int16 lanes in four groups of 8: scales g, g+1, g+2, g+3 */
			const int g = 8 * h;
			const __m512i ia = _mm512_set_epi16(
				g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3,
				g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2,
				g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1,
				g, g, g, g, g, g, g, g);
			const __m512i ib = _mm512_add_epi16(ia, _mm512_set1_epi16(4));

			for (int j = 0; j < C; j++) {
				xa[j] = _mm512_loadu_si512(xq[j] + 256 * b + 128 * h);
				xb[j] = _mm512_loadu_si512(xq[j] + 256 * b + 128 * h + 64);
			}
			for (int i = 0; i < R; i++) {
				__m512i l = _mm512_loadu_si512(w[i][b].ql + 64 * h);
				__m512i hb = _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const __m256i *)(const void *)(w[i][b].qh + 32 * h)));
				/* weights 0..63 of the half, then 64..127 */
				__m512i qa = _mm512_or_si512(_mm512_and_si512(l, lo4),
					_mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh02), m3), 4));
				__m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), lo4),
					_mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh46), m3), 4));
				__m512i sa = _mm512_permutexvar_epi16(ia, sc16[i]);
				__m512i sb = _mm512_permutexvar_epi16(ib, sc16[i]);

				for (int j = 0; j < C; j++) {
					isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(qa, xa[j]), sa);
					if (dual)
						isum2[i][j] = dot_s16(isum2[i][j], _mm512_maddubs_epi16(qb, xb[j]), sb);
					else
						isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(qb, xb[j]), sb);
				}
			}
		}
		for (int i = 0; i < R; i++) {
			__m256i s16 = _mm512_castsi512_si256(sc16[i]);
			float d = exl_f16(w[i][b].d);

			for (int j = 0; j < C; j++) {
				/* the -32 offset: 32 * sum over groups of scale * group sum */
				__m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(xs[j] + 16 * b));
				__m256i off = _mm256_slli_epi32(_mm256_madd_epi16(s16, bs), 5);
				if (dual)
					isum[i][j] = _mm512_add_epi32(isum[i][j], isum2[i][j]);
				__m512i t = _mm512_sub_epi32(isum[i][j], _mm512_zextsi256_si512(off));

				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(d * xd[j][b]),
							    acc[i][j]);
			}
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

static void mm_q6_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(tile_q6_K, m, r0, r1, c0, c1, 2, 4);
}

/* The 16 signed 6-bit scales of a Q3_K block (exl_q3_K_scale) as bytes,
 * with 32-bit operations. */
EXL_INLINE __m128i q3_K_scales(const uint8_t *s12)
{
	uint32_t a0, a1, a2;

	memcpy(&a0, s12, 4);
	memcpy(&a1, s12 + 4, 4);
	memcpy(&a2, s12 + 8, 4);
	__m128i v = _mm_setr_epi32((int)((a0 & 0x0f0f0f0fu) | ((a2 & 0x03030303u) << 4)),
				   (int)((a1 & 0x0f0f0f0fu) | (((a2 >> 2) & 0x03030303u) << 4)),
				   (int)(((a0 >> 4) & 0x0f0f0f0fu) | (((a2 >> 4) & 0x03030303u) << 4)),
				   (int)(((a1 >> 4) & 0x0f0f0f0fu) | (((a2 >> 6) & 0x03030303u) << 4)));

	return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/* int16 lanes in four groups of 8: v[g], v[g+1], v[g+2], v[g+3] of the 16
 * int16 in v's low 256 bits. */
EXL_INLINE __m512i scale_quad16(__m512i v, int g)
{
	const __m512i idx = _mm512_set_epi16(
		g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3,
		g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2, g + 2,
		g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1,
		g, g, g, g, g, g, g, g);

	return _mm512_permutexvar_epi16(idx, v);
}

/* Q2_K and Q3_K (three): 16 groups of 16 with their own scale.  Byte l of
 * each 32 of qs holds weights 32s + l of its half in bits 2s, 2s + 1: the
 * 32 bytes broadcast to both halves of a vector and shifted by 2s and
 * 2s + 2 give sub-blocks c = 4h + s and c + 1, 64 consecutive weights
 * (four groups).  Q3_K adds 4 where bit c of hmask[l] is set (levels 0..7)
 * and takes 4 * the scaled group sums of x off in integers; Q2_K takes its
 * 4-bit mins off in float through the group sums. */
EXL_INLINE void tile_q23_K(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C,
			   const int three)
{
	const uint8_t *w[4];
	const int8_t *xq[4];
	const float *xd[4];
	const int16_t *xs[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 256;
	const size_t bsize = three ? sizeof(block_q3_K) : sizeof(block_q2_K);
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);
	const __m512i m3 = _mm512_set1_epi8(3);

	for (int i = 0; i < R; i++)
		w[i] = exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_K_d(a, m->cols);
		xs[j] = exl_act_q8_K_bsums(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();

	for (int64_t b = 0; b < nb; b++) {
		__m512i isum[4][4], sc16[4], hm[4];
		const uint8_t *qs[4];

		for (int i = 0; i < R; i++) {
			const uint8_t *wb = w[i] + (size_t)b * bsize;
			__m128i s8;

			if (pf) { /* decode-shaped: fetch later rows ahead */
				const char *p = (const char *)wb + pf;
				_mm_prefetch(p, _MM_HINT_T0);
				_mm_prefetch(p + 64, _MM_HINT_T0);
			}
			if (three) {
				const block_q3_K *q3 = (const block_q3_K *)(const void *)wb;

				s8 = q3_K_scales(q3->scales);
				hm[i] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)q3->hmask));
				qs[i] = q3->qs;
			} else {
				const block_q2_K *q2 = (const block_q2_K *)(const void *)wb;

				s8 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)q2->scales),
						   _mm_set1_epi8(0x0f));
				qs[i] = q2->qs;
			}
			sc16[i] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(s8));
			for (int j = 0; j < C; j++)
				isum[i][j] = _mm512_setzero_si512();
		}
		for (int h = 0; h < 2; h++) {
			for (int s2 = 0; s2 < 4; s2 += 2) {
				const int sub = 4 * h + s2;
				const __m512i shq = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * s2)),
								       _mm256_set1_epi16((short)(2 * s2 + 2)), 1);
				/* bit c of hmask[l] to bit 2 of its byte: a rotate of
				 * each dword right by c - 2 (left by 2 - c for c < 2) */
				const __m512i rot = _mm512_inserti64x4(
					_mm512_set1_epi32((sub - 2) & 31),
					_mm256_set1_epi32((sub - 1) & 31), 1);
				__m512i xv[4];

				for (int j = 0; j < C; j++)
					xv[j] = _mm512_loadu_si512(xq[j] + 256 * b + 32 * sub);
				for (int i = 0; i < R; i++) {
					__m512i q32 = _mm512_broadcast_i64x4(
						_mm256_loadu_si256((const __m256i *)(const void *)(qs[i] + 32 * h)));
					__m512i q = _mm512_and_si512(_mm512_srlv_epi16(q32, shq), m3);
					__m512i sv = scale_quad16(sc16[i], 2 * sub);

					/* q | (hbit & 4), in one ternary-logic op */
					if (three)
						q = _mm512_ternarylogic_epi32(q, _mm512_rorv_epi32(hm[i], rot),
									      _mm512_set1_epi8(4), 0xf8);
					for (int j = 0; j < C; j++)
						isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(q, xv[j]), sv);
				}
			}
		}
		for (int i = 0; i < R; i++) {
			const uint8_t *wb = w[i] + (size_t)b * bsize;

			for (int j = 0; j < C; j++) {
				__m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(xs[j] + 16 * b));
				float dx = xd[j][b];

				if (three) {
					const block_q3_K *q3 = (const block_q3_K *)(const void *)wb;
					/* levels are offset by 4: 4 * sum over groups of scale * group sum */
					__m256i off = _mm256_slli_epi32(
						_mm256_madd_epi16(_mm512_castsi512_si256(sc16[i]), bs), 2);
					__m512i t = _mm512_sub_epi32(isum[i][j], _mm512_zextsi256_si512(off));

					acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t),
								    _mm512_set1_ps(exl_f16(q3->d) * dx), acc[i][j]);
				} else {
					const block_q2_K *q2 = (const block_q2_K *)(const void *)wb;
					__m256i mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(
						_mm_andnot_si128(_mm_set1_epi8(0x0f),
								 _mm_loadu_si128((const __m128i *)(const void *)q2->scales)), 4));
					__m512 msum = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bs)));

					acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]),
								    _mm512_set1_ps(exl_f16(q2->d) * dx), acc[i][j]);
					acc[i][j] = _mm512_fnmadd_ps(msum, _mm512_set1_ps(exl_f16(q2->dmin) * dx),
								     acc[i][j]);
				}
			}
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

#define TILE_Q2_K(m, r, c, R, C) tile_q23_K(m, r, c, R, C, 0)
#define TILE_Q3_K(m, r, c, R, C) tile_q23_K(m, r, c, R, C, 1)

static void mm_q2_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q2_K, m, r0, r1, c0, c1, 2, 4);
}

static void mm_q3_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q3_K, m, r0, r1, c0, c1, 2, 4);
}

/* ---- IQ4_XS x Q8_K activations ----
 *
 * Sub-block j's 16 bytes of qs hold its weights l (low nibble) and 16 + l
 * (high), as an IQ4_NL block's: this set's act_iq4_xs stores each group of
 * four sub-blocks of x as act_q4_0 stores four blocks, so a 64-byte load
 * of qs gives the levels of four sub-blocks in x's order, one per 128-bit
 * lane.  Levels through a byte shuffle; signed dots as |w| * (x with w's
 * sign), whose int16 pairs are multiplied by the sub-block's scale into
 * int32 (vpdpwssd with VNNI). */
static void act_iq4_xs(const float *x, uint8_t *act, int64_t cols)
{
	int8_t tmp[128];

	exl_act_q8_K_avx2(x, act, cols);
	for (int64_t g = 0; g + 4 <= cols / 32; g += 4) {
		int8_t *q = (int8_t *)act + 32 * g;

		memcpy(tmp, q, 128);
		for (int k = 0; k < 4; k++) {
			memcpy(q + 16 * k, tmp + 32 * k, 16);
			memcpy(q + 64 + 16 * k, tmp + 32 * k + 16, 16);
		}
	}
}

EXL_INLINE void tile_iq4_xs(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C)
{
	const block_iq4_xs *w[4];
	const int8_t *xq[4];
	const float *xd[4];
	__m512 acc[4][4];
	int64_t nb = m->cols / 256;
	const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, R);
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	const __m512i tab = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)EXL_IQ4NL_HI, (long long)EXL_IQ4NL_LO));

	for (int i = 0; i < R; i++)
		w[i] = (const block_iq4_xs *)(const void *)exl_row(m, r + i);
	for (int j = 0; j < C; j++) {
		const uint8_t *a = m->act + (size_t)(c + j) * m->act_stride;
		xq[j] = (const int8_t *)a;
		xd[j] = exl_act_q8_K_d(a, m->cols);
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();

	for (int64_t b = 0; b < nb; b++) {
		__m512i isum[4][4], sc[4];

		for (int i = 0; i < R; i++) {
			if (pf) { /* decode-shaped: fetch later rows ahead */
				const char *p = (const char *)(w[i] + b) + pf;
				_mm_prefetch(p, _MM_HINT_T0);
				_mm_prefetch(p + 64, _MM_HINT_T0);
				_mm_prefetch(p + 128, _MM_HINT_T0);
			}
			sc[i] = exl_iq4_xs_scales16(&w[i][b]);
			for (int j = 0; j < C; j++)
				isum[i][j] = _mm512_setzero_si512();
		}
		for (int t = 0; t < 2; t++) {
			__m512i xl[4], xh[4];

			for (int j = 0; j < C; j++) {
				xl[j] = _mm512_loadu_si512(xq[j] + 256 * b + 128 * t);
				xh[j] = _mm512_loadu_si512(xq[j] + 256 * b + 128 * t + 64);
			}
			for (int i = 0; i < R; i++) {
				__m512i q = _mm512_loadu_si512(w[i][b].qs + 64 * t);
				__m512i lo = _mm512_shuffle_epi8(tab, _mm512_and_si512(q, lo4));
				__m512i hi = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4));
				__m512i alo = _mm512_abs_epi8(lo), ahi = _mm512_abs_epi8(hi);
				__mmask64 nlo = _mm512_movepi8_mask(lo), nhi = _mm512_movepi8_mask(hi);
				__m512i sv = scale_quad16(sc[i], 4 * t);

				for (int j = 0; j < C; j++) {
					__m512i sl = _mm512_mask_sub_epi8(xl[j], nlo, _mm512_setzero_si512(), xl[j]);
					__m512i sh = _mm512_mask_sub_epi8(xh[j], nhi, _mm512_setzero_si512(), xh[j]);

					isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(alo, sl), sv);
					isum[i][j] = dot_s16(isum[i][j], _mm512_maddubs_epi16(ahi, sh), sv);
				}
			}
		}
		for (int i = 0; i < R; i++) {
			float d = exl_f16(w[i][b].d);

			for (int j = 0; j < C; j++)
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]),
							    _mm512_set1_ps(d * xd[j][b]), acc[i][j]);
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = hsum512(acc[i][j]);
}

static void mm_iq4_xs(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(tile_iq4_xs, m, r0, r1, c0, c1, 2, 4);
}

#ifdef EXL_MM_VNNI
/* ---- Q8_0, Q4_0, IQ4_NL repacked, 16 rows in the lanes of a vector ----
 *
 * avx2vnni's 8-row kernels for batches (matmul_avx2.c, q8_0_rows8_from
 * and its Q4_0 and IQ4_NL twins) with two groups of EXL_LAYOUT_ROWS8 side
 * by side: one 512-bit vpdpbusd against 4 bytes of x broadcast serves 16
 * rows where the 256-bit one served 8, and so does each broadcast and
 * each float step, about half the operations per product.  The arithmetic
 * per output is theirs: the exact int32 dot of the unsigned levels (Q8_0's
 * w + 128, Q4_0's nibbles, IQ4_NL's levels + 128) . x less bias * sum(x),
 * block b into accumulator b mod 8 as fma((float)dot, d_w * d_x, acc), the
 * same tree.  So the outputs are avx2vnni's bit for bit, which test_matmul
 * checks (the set's repacked kernel against its GGUF-row one, avx2vnni's),
 * and the amx set's tiles, which share these steps, stay their equals.
 * The act is avx2vnni's too: Q8_0's x in element order, the others' in
 * pairs of blocks (exl_pairs32_lo). */

enum { R16_Q8_0, R16_Q4_0, R16_IQ4_NL, R16_Q4_K };

/* Block b of the groups at g0, g1 (8 rows each): the 8 operands (group k:
 * 4 weights of the 16 rows as unsigned levels, those x . rows8_xk's bytes
 * k) and the 16 scales. */
EXL_INLINE void r16_block(const int fmt, const uint8_t *g0, const uint8_t *g1, int64_t b, __m512i aw[8],
			  __m512 *dw)
{
	const size_t bs = fmt == R16_Q8_0 ? 272 : 144;
	const uint8_t *p0 = g0 + bs * (size_t)b, *p1 = g1 + bs * (size_t)b;

	for (int k = 0; k < (fmt == R16_Q8_0 ? 8 : 4); k++) {
		const __m512i v = join256(_mm256_loadu_si256((const __m256i *)(const void *)(p0 + 16 + 32 * k)),
					  _mm256_loadu_si256((const __m256i *)(const void *)(p1 + 16 + 32 * k)));
		const __m512i lo4 = _mm512_set1_epi8(0x0f);

		if (fmt == R16_Q8_0) {
			aw[k] = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
			continue;
		}
		aw[k] = _mm512_and_si512(v, lo4);
		aw[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
		if (fmt == R16_IQ4_NL) {
			/* the levels + 128, 1..241 */
			const __m512i tab = _mm512_broadcast_i32x4(
				_mm_xor_si128(_mm_set_epi64x((long long)EXL_IQ4NL_HI, (long long)EXL_IQ4NL_LO),
					      _mm_set1_epi8((char)0x80)));

			aw[k] = _mm512_shuffle_epi8(tab, aw[k]);
			aw[k + 4] = _mm512_shuffle_epi8(tab, aw[k + 4]);
		}
	}
	*dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)p1),
					       _mm_loadu_si128((const __m128i *)(const void *)p0)));
}

/* Block b's int32 dots of two vectors' x (block b's weights 0..15 at
 * x[v], 16..31 hoff on) with the 16 rows, as two chains each (the four
 * interleaved, as rows8_u4_dot_x2's): d[v] continued from where it is, e[v]
 * from zero, over the even and the odd groups of 4 weights. */
EXL_INLINE void r16_chains_x2(__m512i d[2], __m512i e[2], const __m512i aw[8], const int8_t *const x[2],
			      size_t hoff)
{
	e[0] = e[1] = _mm512_setzero_si512();
	for (int k = 0; k < 8; k += 2)
		for (int v = 0; v < 2; v++) {
			const size_t o0 = k < 4 ? 4 * (size_t)k : hoff + 4 * (size_t)(k - 4);
			int32_t x0, x1;

			memcpy(&x0, x[v] + o0, 4);
			memcpy(&x1, x[v] + o0 + 4, 4);
			d[v] = _mm512_dpbusd_epi32(d[v], aw[k], _mm512_set1_epi32(x0));
			e[v] = _mm512_dpbusd_epi32(e[v], aw[k + 1], _mm512_set1_epi32(x1));
		}
}

/* The same for one vector (a decode stream, an odd last vector). */
EXL_INLINE void r16_chains_x1(__m512i *d, __m512i *e, const __m512i aw[8], const int8_t *x, size_t hoff)
{
	*e = _mm512_setzero_si512();
	for (int k = 0; k < 8; k += 2) {
		const size_t o0 = k < 4 ? 4 * (size_t)k : hoff + 4 * (size_t)(k - 4);
		int32_t x0, x1;

		memcpy(&x0, x + o0, 4);
		memcpy(&x1, x + o0 + 4, 4);
		*d = _mm512_dpbusd_epi32(*d, aw[k], _mm512_set1_epi32(x0));
		*e = _mm512_dpbusd_epi32(*e, aw[k + 1], _mm512_set1_epi32(x1));
	}
}

/* The dots whole, each started where d[v] is. */
EXL_INLINE void r16_dot_x2(__m512i d[2], const __m512i aw[8], const int8_t *const x[2], size_t hoff)
{
	__m512i e[2];

	r16_chains_x2(d, e, aw, x, hoff);
	for (int v = 0; v < 2; v++)
		d[v] = _mm512_add_epi32(d[v], e[v]);
}

EXL_INLINE void r16_dot_x1(__m512i *d, const __m512i aw[8], const int8_t *x, size_t hoff)
{
	__m512i e;

	r16_chains_x1(d, &e, aw, x, hoff);
	*d = _mm512_add_epi32(*d, e);
}

EXL_INLINE const int32_t *r16_isum(const uint8_t *act, int64_t cols)
{
	return (const int32_t *)(const void *)exl_act_q8_0_s(act, cols);
}

/* The tree of each vector's 8 accumulators, ((a0 + a1) + (a2 + a3)) +
 * ((a4 + a5) + (a6 + a7)), stored as rows [r, r + nr) of its output. */
EXL_INLINE void r16_store(const struct exl_mm_ctx *m, __m512 (*acc)[8], int nc, int c0, int64_t r, int nr)
{
	for (int j = 0; j < nc; j++) {
		__m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]),
						       _mm512_add_ps(acc[j][2], acc[j][3])),
					 _mm512_add_ps(_mm512_add_ps(acc[j][4], acc[j][5]),
						       _mm512_add_ps(acc[j][6], acc[j][7])));

		_mm512_mask_storeu_ps(exl_out(m, c0 + j, r), (__mmask16)((1u << nr) - 1), t);
	}
}

/* Rows [r, r + nr) (8 < nr <= 16, r a multiple of 8, so the group at
 * r + 8 exists, padded with zero rows) x vectors [c0, c1) (at most
 * COL_CHUNK, 64).  Not always_inline (q4_0_rows8_from's note on the
 * prefetch loop). */
static void r16_rows(const int fmt, const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const uint8_t *g0 = exl_row(m, r), *g1 = exl_row(m, r + 8);
	const int64_t nb = m->cols / 32;
	const int nc = c1 - c0, bias = fmt == R16_Q4_0 ? 8 : 128;
	const uint8_t *a[64];
	__m512 acc[64][8];

	for (int j = 0; j < nc; j++) {
		a[j] = m->act + (size_t)(c0 + j) * m->act_stride;
		for (int k = 0; k < 8; k++)
			acc[j][k] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		size_t hoff = 16, off = 32 * (size_t)b;
		__m512i aw[8];
		__m512 dw;

		if (fmt != R16_Q8_0)
			off = exl_pairs32_lo(b, nb, &hoff);
		exl_prefetch_share(exl_row(m, r + 16), 16 * m->row_bytes, b, nb);
		r16_block(fmt, g0, g1, b, aw, &dw);
		for (int j = 0; j < nc; j += 2) {
			/* an odd last vector alone */
			const int j1 = j + 1 < nc ? j + 1 : j;
			const int8_t *x[2] = { (const int8_t *)a[j] + off, (const int8_t *)a[j1] + off };
			__m512i d[2] = { _mm512_set1_epi32(-bias * r16_isum(a[j], m->cols)[b]),
					 _mm512_set1_epi32(-bias * r16_isum(a[j1], m->cols)[b]) };

			if (j1 != j)
				r16_dot_x2(d, aw, x, hoff);
			else
				r16_dot_x1(&d[0], aw, x[0], hoff);
			acc[j][b & 7] = _mm512_fmadd_ps(
				_mm512_cvtepi32_ps(d[0]),
				_mm512_mul_ps(dw, _mm512_set1_ps(exl_act_q8_0_d(a[j], m->cols)[b])), acc[j][b & 7]);
			if (j1 != j)
				acc[j1][b & 7] = _mm512_fmadd_ps(
					_mm512_cvtepi32_ps(d[1]),
					_mm512_mul_ps(dw, _mm512_set1_ps(exl_act_q8_0_d(a[j1], m->cols)[b])),
					acc[j1][b & 7]);
		}
	}
	r16_store(m, acc, nc, c0, r, nr);
}

/* Q4_K the same way: avx2vnni's q4_K_r8_rows8 over two groups.  Per
 * super-block and row the exact int32 I = sum of scale * (levels . x) and
 * M = sum of min * (sum of x) over the 8 sub-blocks, then
 * acc[b % 8] = fnmadd((float)M, dmin * d_x, fma((float)I, d * d_x, acc)).
 * Its act is act_q8_K's, x in element order. */
static void q4_K_r16_rows(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const uint8_t *g0 = exl_row(m, r), *g1 = exl_row(m, r + 8);
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	const __m512i lo4 = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi32(0x3f3f3f3f);
	const __m512i m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303);
	const uint8_t *a[64];
	__m512 acc[64][8];
	__m512i isum[64];

	for (int j = 0; j < nc; j++) {
		a[j] = m->act + (size_t)(c0 + j) * m->act_stride;
		for (int k = 0; k < 8; k++)
			acc[j][k] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *q0 = g0 + 1152 * (size_t)b, *q1 = g1 + 1152 * (size_t)b;
		__m512i u[3], sc[2], mn[2];

		exl_prefetch_share(exl_row(m, r + 16), 16 * m->row_bytes, b, nb);
		/* each row's 12 bytes of scales and mins as three dwords
		 * (repack.h), unpacked in its lane as exl_q4_K_scales does */
		for (int k = 0; k < 3; k++)
			u[k] = join256(_mm256_loadu_si256((const __m256i *)(const void *)(q0 + 32 + 32 * k)),
				       _mm256_loadu_si256((const __m256i *)(const void *)(q1 + 32 + 32 * k)));
		sc[0] = _mm512_and_si512(u[0], m6);
		mn[0] = _mm512_and_si512(u[1], m6);
		sc[1] = _mm512_or_si512(_mm512_and_si512(u[2], m4),
					_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u[0], 6), m2), 4));
		mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u[2], 4), m4),
					_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u[1], 6), m2), 4));
		for (int j = 0; j < nc; j++)
			isum[j] = _mm512_setzero_si512();
		for (int c = 0; c < 4; c++) {
			__m512i v[8];

			for (int k = 0; k < 8; k++)
				v[k] = join256(
					_mm256_loadu_si256((const __m256i *)(const void *)(q0 + 128 + 256 * c + 32 * k)),
					_mm256_loadu_si256((const __m256i *)(const void *)(q1 + 128 + 256 * c + 32 * k)));
			for (int h = 0; h < 2; h++) {
				const int sb = 2 * c + h;
				/* byte sb % 4 of each lane: the row's scale of sub-block sb */
				const __m512i mul = _mm512_and_si512(_mm512_srli_epi32(sc[sb >> 2], 8 * (sb & 3)),
								     _mm512_set1_epi32(0xff));
				const size_t xo = 256 * (size_t)b + 32 * (size_t)sb;
				__m512i lv[8];

				for (int k = 0; k < 8; k++)
					lv[k] = _mm512_and_si512(h ? _mm512_srli_epi16(v[k], 4) : v[k], lo4);
				for (int j = 0; j < nc; j += 2) {
					const int j1 = j + 1 < nc ? j + 1 : j;
					const int8_t *x[2] = { (const int8_t *)a[j] + xo, (const int8_t *)a[j1] + xo };
					__m512i d[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() }, e[2];

					/* scale * (d + e), exactly, as two int16 x int16
					 * products: each chain sums 16 products of a level
					 * 0..15 and an x of at most 128, under 2^15, and
					 * mul's high half is 0 */
					if (j1 != j)
						r16_chains_x2(d, e, lv, x, 16);
					else
						r16_chains_x1(&d[0], &e[0], lv, x[0], 16);
					isum[j] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[j], d[0], mul), e[0], mul);
					if (j1 != j)
						isum[j1] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[j1], d[1], mul), e[1],
									       mul);
				}
			}
		}
		const __m512 dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)q1),
								   _mm_loadu_si128((const __m128i *)(const void *)q0)));
		const __m512 dm = _mm512_cvtph_ps(
			_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)(q1 + 16)),
					 _mm_loadu_si128((const __m128i *)(const void *)(q0 + 16))));

		/* each row's mins as int16 pairs: (0, 2), (1, 3), (4, 6), (5, 7) */
		const __m512i lo8 = _mm512_set1_epi32(0x00ff00ff);
		const __m512i mp[4] = { _mm512_and_si512(mn[0], lo8),
					_mm512_and_si512(_mm512_srli_epi32(mn[0], 8), lo8),
					_mm512_and_si512(mn[1], lo8),
					_mm512_and_si512(_mm512_srli_epi32(mn[1], 8), lo8) };

		for (int j = 0; j < nc; j++) {
			/* min * (x's sum over each sub-block, the act's two int16
			 * halves: under 2^13), the sums paired as the mins are */
			const int16_t *bs = exl_act_q8_K_bsums(a[j], m->cols) + 16 * b;
			const __m128i ones = _mm_set1_epi16(1);
			const __m128i sums = _mm_packs_epi32(
				_mm_madd_epi16(_mm_loadu_si128((const __m128i *)(const void *)bs), ones),
				_mm_madd_epi16(_mm_loadu_si128((const __m128i *)(const void *)(bs + 8)), ones));
			const __m512 dx = _mm512_set1_ps(exl_act_q8_K_d(a[j], m->cols)[b]);
			__m512i ms = _mm512_setzero_si512();
			int32_t bp[4];

			_mm_storeu_si128((__m128i *)(void *)bp,
					 _mm_shuffle_epi8(sums, _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10,
									      11, 14, 15)));
			for (int k = 0; k < 4; k++)
				ms = _mm512_dpwssd_epi32(ms, mp[k], _mm512_set1_epi32(bp[k]));
			acc[j][b & 7] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dm, dx),
							 _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(dw, dx),
									 acc[j][b & 7]));
		}
	}
	r16_store(m, acc, nc, c0, r, nr);
}

/* 16 rows at a time where two groups are there, a last group alone with
 * avx2vnni's kernel r8.  Decode (a stream per row) too on a CPU with
 * full-width 512-bit units: on the Xeon measured (Emerald Rapids) 16 rows
 * a vector decode Q4_0 10 % and Q4_K 30 % faster than r8, where Zen 4,
 * which splits a 512-bit operation in two, decodes them 12 % and 30 %
 * faster with r8 (docs/cpu-kernels.md). */
EXL_INLINE void r16_mm(const int fmt, exl_mm_fn r8, const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0,
		       int c1)
{
	if (m->n <= EXL_STREAM_N && !exl_cpu_decode16()) {
		r8(m, r0, r1, c0, c1);
		return;
	}
	for (int64_t r = r0; r < r1; r += 16) {
		const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;

		if (nr > 8 && fmt == R16_Q4_K)
			q4_K_r16_rows(m, r, nr, c0, c1);
		else if (nr > 8)
			r16_rows(fmt, m, r, nr, c0, c1);
		else
			r8(m, r, r + nr, c0, c1);
	}
}

static void mm_q8_0_r8(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	r16_mm(R16_Q8_0, exl_cpu_kernels_avx2vnni.mm_q8_0_r8, m, r0, r1, c0, c1);
}

static void mm_q4_0_r8(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	r16_mm(R16_Q4_0, exl_cpu_kernels_avx2vnni.mm_q4_0_r8, m, r0, r1, c0, c1);
}

static void mm_iq4_nl_r8(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	r16_mm(R16_IQ4_NL, exl_cpu_kernels_avx2vnni.mm_iq4_nl_r8, m, r0, r1, c0, c1);
}

static void mm_q4_K_r8(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	r16_mm(R16_Q4_K, exl_cpu_kernels_avx2vnni.mm_q4_K_r8, m, r0, r1, c0, c1);
}
#endif

const struct exl_cpu_kernels SET_SYMBOL = {
	.name = SET_NAME,
	.act_q8_0 = exl_act_q8_0_avx2,
	.act_q4_0 = act_q4_0,
	.act_q4_1 = act_q4_0,
	.act_iq4_nl = act_q4_0,
	.act_q8_K = exl_act_q8_K_avx2,
	.act_q4_K = exl_act_q4_K_avx2,
	.act_iq4_xs = act_iq4_xs,
	.mm_f32 = mm_f32,
	.mm_f16 = mm_f16,
	.mm_bf16 = mm_bf16,
	.mm_q8_0 = mm_q8_0,
	.mm_q4_0 = mm_q4_0,
	.mm_q4_1 = mm_q4_1,
	.mm_q5_0 = mm_q5_0,
	.mm_q5_1 = mm_q5_1,
	.mm_iq4_nl = mm_iq4_nl,
	.mm_mxfp4 = mm_mxfp4,
	.mm_q2_K = mm_q2_K,
	.mm_q3_K = mm_q3_K,
	.mm_q4_K = mm_q4_K,
	.mm_q5_K = mm_q5_K,
	.mm_q6_K = mm_q6_K,
	.mm_iq4_xs = mm_iq4_xs,
#ifdef EXL_MM_VNNI
	.mm_q8_0_r8 = mm_q8_0_r8,
	.mm_q4_0_r8 = mm_q4_0_r8,
	.mm_iq4_nl_r8 = mm_iq4_nl_r8,
	.mm_q4_K_r8 = mm_q4_K_r8,
#endif
};

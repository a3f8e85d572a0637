/* AVX2 + FMA + F16C matmul kernels (compiled with -mavx2 -mfma -mf16c).
 *
 * Quantized types: integer block dots with maddubs/madd, one float FMA per
 * block (or per K-quant super-block) and output.  Tiles of R rows x C input
 * vectors load each weight block once per C vectors; decode (one vector)
 * runs R rows at a time over the stream of weights.  Q8_0, Q4_0 and IQ4_NL
 * instead put 8 rows in the lanes of a vector for prefill and reduce 8
 * blocks into the lanes of one for decode, over the same float steps
 * (docs/cpu-kernels.md, "Determinism").
 */
#include "kernels/cpu/matmul_x86.h"

/* Built twice: as the "avx2" set, and with AVX-512 VL + VNNI and
 * -DEXL_MM_VNNI=1 as "avx2vnni", where the integer dots below take the
 * 256-bit vpdpbusd / vpdpwssd.  Both give the same int32 sums (every
 * caller keeps maddubs' int16 pairs from saturating), so the two sets'
 * outputs are the same bits; the VNNI one does a block in fewer
 * instructions.  The avx512vnni set takes its kernels for the types where
 * they beat its own 512-bit tiles (matmul.c). */
#ifdef EXL_MM_VNNI
#define SET_NAME "avx2vnni"
#define SET_SYMBOL exl_cpu_kernels_avx2vnni
#else
#define SET_NAME "avx2"
#define SET_SYMBOL exl_cpu_kernels_avx2
#endif

/* acc + per int32 lane the sum of 4 products of u8 a and s8 b.  Without
 * VNNI through maddubs' int16 pair sums: exact while each pair sum fits
 * (the callers' levels and signs keep them within 2 * 128 * 127). */
EXL_INLINE __m256i dot4_acc(__m256i acc, __m256i a, __m256i b)
{
#ifdef EXL_MM_VNNI
	return _mm256_dpbusd_epi32(acc, a, b);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
#endif
}

/* acc + madd(a, b): per int32 lane the sum of 2 products of int16. */
EXL_INLINE __m256i madd_acc(__m256i acc, __m256i a, __m256i b)
{
#ifdef EXL_MM_VNNI
	return _mm256_dpwssd_epi32(acc, a, b);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* ---- float weights ---- */

EXL_INLINE __m256 load_f32(const void *w, int64_t k)
{
	return _mm256_loadu_ps((const float *)w + k);
}

EXL_INLINE __m256 load_f16(const void *w, int64_t k)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)w + k)));
}

EXL_INLINE __m256 load_bf16(const void *w, int64_t k)
{
	__m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)w + k));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

EXL_INLINE float one_f32(const void *w, int64_t k)
{
	return ((const float *)w)[k];
}

EXL_INLINE float one_f16(const void *w, int64_t k)
{
	return exl_fp16_to_fp32(((const uint16_t *)w)[k]);
}

EXL_INLINE float one_bf16(const void *w, int64_t k)
{
	return exl_bf16_to_fp32(((const uint16_t *)w)[k]);
}

#define ESIZE_f32 4
#define ESIZE_f16 2
#define ESIZE_bf16 2

/* Two independent accumulators per output, so a tile of one output
 * (decode) does not wait on one FMA chain (8 floats per 4 cycles would
 * halve decode speed).  The same for every tile shape: an output's value
 * never depends on how many vectors the call has (a sequence decodes the
 * same alone or in a batch). */
#define FLOAT_U 2

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
		const uint8_t *w[4];                                                  \
		const float *x[4];                                                    \
		__m256 acc[4][4][FLOAT_U];                                            \
		const int U = FLOAT_U;                                                \
		int64_t k = 0, n8 = m->cols & ~(int64_t)7;                            \
		int64_t nu = m->cols / (8 * U) * (8 * U);                             \
                                                                                      \
		for (int i = 0; i < R; i++)                                           \
			w[i] = exl_row(m, r + i);                                     \
		for (int j = 0; j < C; j++)                                           \
			x[j] = m->x + (size_t)(c + j) * (size_t)m->cols;              \
		for (int i = 0; i < R; i++)                                           \
			for (int j = 0; j < C; j++)                                   \
				for (int u = 0; u < U; u++)                           \
					acc[i][j][u] = _mm256_setzero_ps();           \
		for (; k < nu; k += 8 * U) {                                          \
			for (int u = 0; u < U; u++) {                                 \
				int64_t ku = k + 8 * u;                               \
				__m256 xv[4];                                         \
				for (int j = 0; j < C; j++)                           \
					xv[j] = _mm256_loadu_ps(x[j] + ku);           \
				for (int i = 0; i < R; i++) {                         \
					__m256 wv = load_##T(w[i], ku);               \
					for (int j = 0; j < C; j++)                   \
						acc[i][j][u] = _mm256_fmadd_ps(wv, xv[j], acc[i][j][u]); \
				}                                                     \
			}                                                             \
		}                                                                     \
		for (; k < n8; k += 8) {                                              \
			__m256 xv[4];                                                 \
			for (int j = 0; j < C; j++)                                   \
				xv[j] = _mm256_loadu_ps(x[j] + k);                    \
			for (int i = 0; i < R; i++) {                                 \
				__m256 wv = load_##T(w[i], k);                        \
				for (int j = 0; j < C; j++)                           \
					acc[i][j][0] = _mm256_fmadd_ps(wv, xv[j], acc[i][j][0]); \
			}                                                             \
		}                                                                     \
		for (int i = 0; i < R; i++)                                           \
			for (int j = 0; j < C; j++) {                                 \
				for (int u = 1; u < U; u++)                           \
					acc[i][j][0] = _mm256_add_ps(acc[i][j][0], acc[i][j][u]); \
				float s = exl_hsum256(acc[i][j][0]);                  \
				for (int64_t t = k; t < m->cols; t++)                 \
					s += one_##T(w[i], t) * x[j][t];              \
				*exl_out(m, c + j, r + i) = s;                        \
			}                                                             \
	}                                                                             \
	static void mm_##T(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1) \
	{                                                                             \
		EXL_FLOAT_TILE_LOOP(tile_##T, m, r0, r1, c0, c1, 2, 3, 4);           \
	}

DEFINE_FLOAT_TILE(f32)
DEFINE_FLOAT_TILE(f16)
DEFINE_FLOAT_TILE(bf16)

/* ---- Q8_0 and Q4_0 weights x Q8_0 activations ---- */

/* Q8_0: the float steps and the two paths of Q4_0 below (no offset: dot_b
 * is the signed levels . x, through |w| * (x with w's sign), whose pairs
 * (<= 2 * 127 * 127) go to int32 one by one).  Prefill transposes the 8
 * rows' 32-byte blocks to 8 vectors of 8 rows x 4 bytes. */

/* The int32 sums of x per block that exl_act_q8_0_isum_avx2 keeps where
 * exl_act_q8_0_avx2 keeps s (Q4_0's offset of 8 and, with VNNI, Q8_0's of
 * 128 come off through them). */
EXL_INLINE const int32_t *act_isum(const uint8_t *act, int64_t cols)
{
	return (const int32_t *)(const void *)exl_act_q8_0_s(act, cols);
}

/* Those of blocks b..b+k-1 (k <= 8), lanes k..7 zero. */
EXL_INLINE __m256i group_isum(const uint8_t *act, int64_t cols, int64_t b, int k)
{
	int32_t t8[8] = { 0 };

	if (k == 8)
		return _mm256_loadu_si256((const __m256i *)(const void *)(act_isum(act, cols) + b));
	memcpy(t8, act_isum(act, cols) + b, sizeof(int32_t) * (size_t)k);
	return _mm256_loadu_si256((const __m256i *)(const void *)t8);
}

EXL_INLINE __m256i bcast_i32(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) */
EXL_INLINE float tree8(__m256 v)
{
	__m256 h = _mm256_hadd_ps(v, v);

	h = _mm256_hadd_ps(h, h);
	return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* The same tree over 8 vectors, lane by lane. */
EXL_INLINE __m256 tree8_ps(const __m256 *a)
{
	return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
			     _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
}

/* hsum8x8_epi32 with unpacks and adds, one uop each, where vphaddd is
 * several (2 cycles a piece on Zen 3 against 0.5): the same exact sums. */
EXL_INLINE __m256i hsum8x8_unpack_epi32(const __m256i p[8])
{
	__m256i a[4], c[2];

	for (int i = 0; i < 4; i++) /* per lane: [p0 p1 p0 p1] partial sums of pair i */
		a[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2 * i], p[2 * i + 1]),
					_mm256_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
	for (int i = 0; i < 2; i++) /* per lane: the 4 vectors' sums over it */
		c[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(a[2 * i], a[2 * i + 1]),
					_mm256_unpackhi_epi64(a[2 * i], a[2 * i + 1]));
	return _mm256_add_epi32(_mm256_permute2x128_si256(c[0], c[1], 0x20),
				_mm256_permute2x128_si256(c[0], c[1], 0x31));
}

/* Lane i: the sum of the 8 int32 lanes of p[i] (exact). */
EXL_INLINE __m256i hsum8x8_epi32(const __m256i p[8])
{
	__m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
	__m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
	__m256i g0 = _mm256_hadd_epi32(h01, h23), g1 = _mm256_hadd_epi32(h45, h67);

	return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20),
				_mm256_permute2x128_si256(g0, g1, 0x31));
}

/* The driver of a type with 8-row paths: decode-shaped calls (n <= 4) take
 * one row at a time as one stream, T##_group8 reducing 8 blocks into the
 * lanes of an accumulator per vector (nc a constant per call, so the loops
 * over the vectors unroll); prefill takes 8 rows at a time (T##_rows8).
 * A block is QK weights: 32, or 256 for IQ4_XS's super-blocks. */
#define DEFINE_ROWS8_MM(T, BLOCK) DEFINE_ROWS8_MM_QK(T, BLOCK, 32)
#define DEFINE_ROWS8_MM_QK(T, BLOCK, QK)                                                   \
	EXL_INLINE void T##_row_dots_n(const struct exl_mm_ctx *m, int64_t r, int c0, size_t pf, \
				       const int nc)                                       \
	{                                                                                  \
		const BLOCK *w = (const BLOCK *)(const void *)exl_row(m, r);               \
		const int64_t nb = m->cols / (QK);                                         \
		const uint8_t *a[4];                                                       \
		__m256 acc[4];                                                             \
		int64_t b = 0;                                                             \
                                                                                           \
		for (int j = 0; j < nc; j++) {                                             \
			a[j] = m->act + (size_t)(c0 + j) * m->act_stride;                  \
			acc[j] = _mm256_setzero_ps();                                      \
		}                                                                          \
		for (; b + 8 <= nb; b += 8)                                                \
			T##_group8(w, b, 8, a, nc, m->cols, pf, acc);                      \
		if (b < nb)                                                                \
			T##_group8(w, b, (int)(nb - b), a, nc, m->cols, pf, acc);          \
		for (int j = 0; j < nc; j++)                                               \
			*exl_out(m, c0 + j, r) = tree8(acc[j]);                            \
	}                                                                                  \
	static void mm_##T(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1) \
	{                                                                                  \
		if (m->n > EXL_STREAM_N) {                                                 \
			for (int64_t r = r0; r < r1; r += 8)                               \
				T##_rows8(m, r, r1 - r < 8 ? (int)(r1 - r) : 8, c0, c1);   \
			return;                                                            \
		}                                                                          \
		const size_t pf = exl_prefetch_distance(m->n, m->row_bytes, 1);            \
		for (int64_t r = r0; r < r1; r++) {                                        \
			switch (c1 - c0) {                                                 \
			case 1: T##_row_dots_n(m, r, c0, pf, 1); break;                    \
			case 2: T##_row_dots_n(m, r, c0, pf, 2); break;                    \
			case 3: T##_row_dots_n(m, r, c0, pf, 3); break;                    \
			default: T##_row_dots_n(m, r, c0, pf, 4); break;                   \
			}                                                                  \
		}                                                                          \
	}

/* Row r + i of 8, or row r past the nr that exist: lanes past nr are
 * computed, never stored. */
EXL_INLINE const void *rows8_row(const struct exl_mm_ctx *m, int64_t r, int nr, int i)
{
	return exl_row(m, r + (i < nr ? i : 0));
}

/* The 8 accumulators of each of nc vectors, zeroed; and their trees stored
 * as outputs of rows [r, r + nr). */
EXL_INLINE void rows8_acc_zero(__m256 (*acc)[8], int nc)
{
	for (int j = 0; j < nc; j++)
		for (int k = 0; k < 8; k++)
			acc[j][k] = _mm256_setzero_ps();
}

EXL_INLINE void rows8_store(const struct exl_mm_ctx *m, __m256 (*acc)[8], int nc, int c0, int64_t r, int nr)
{
	for (int j = 0; j < nc; j++) {
		float out[8];

		if (nr == 8) {
			_mm256_storeu_ps(exl_out(m, c0 + j, r), tree8_ps(acc[j]));
			continue;
		}
		_mm256_storeu_ps(out, tree8_ps(acc[j]));
		memcpy(exl_out(m, c0 + j, r), out, sizeof(float) * (size_t)nr);
	}
}

/* The fp16 scales of 8 rows' block b (the field at offset 0 of each). */
EXL_INLINE short half_at(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return (short)h;
}

EXL_INLINE __m256 rows8_d(const uint8_t *const *rb)
{
	return _mm256_cvtph_ps(_mm_setr_epi16(half_at(rb[0]), half_at(rb[1]), half_at(rb[2]), half_at(rb[3]),
					      half_at(rb[4]), half_at(rb[5]), half_at(rb[6]), half_at(rb[7])));
}

/* The fp16 scales (offset 0 of each block) of 8 consecutive blocks of one
 * row, from the group's own bytes: block t's scale lies at byte 18t (Q4_0's
 * 18-byte blocks) or 34t (Q8_0's), which is word t of the 16-byte chunk t
 * (Q4_0) or 2t (Q8_0).  So the 8 scales are the diagonal of 8 chunks, taken
 * with word blends, 5 or 7 vector operations where 8 word inserts take 13;
 * decode is bound by the operations per byte of weight as much as by memory
 * on a core whose vector pipes are shared.  Reads only bytes of the 8
 * blocks. */
EXL_INLINE __m256 group8_d_q4(const void *blocks)
{
	const __m256i *p = (const __m256i *)blocks;
	__m256i y = _mm256_loadu_si256(p);	/* [chunk 0 | chunk 1] */

	y = _mm256_blend_epi16(y, _mm256_loadu_si256(p + 1), 0x0c); /* words 2-3 of chunks 2 | 3 */
	y = _mm256_blend_epi16(y, _mm256_loadu_si256(p + 2), 0x30); /* 4-5 of 4 | 5 */
	y = _mm256_blend_epi16(y, _mm256_loadu_si256(p + 3), 0xc0); /* 6-7 of 6 | 7 */
	return _mm256_cvtph_ps(_mm_blend_epi16(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1), 0xaa));
}

EXL_INLINE __m256 group8_d_q8(const void *blocks)
{
	const __m128i *p = (const __m128i *)blocks; /* chunk 2t at p + 2t */
	__m128i a = _mm_blend_epi16(_mm_loadu_si128(p + 0), _mm_loadu_si128(p + 2), 0x02);
	__m128i b = _mm_blend_epi16(_mm_loadu_si128(p + 4), _mm_loadu_si128(p + 6), 0x08);
	__m128i c = _mm_blend_epi16(_mm_loadu_si128(p + 8), _mm_loadu_si128(p + 10), 0x20);
	__m128i d = _mm_blend_epi16(_mm_loadu_si128(p + 12), _mm_loadu_si128(p + 14), 0x80);

	return _mm256_cvtph_ps(_mm_blend_epi16(_mm_blend_epi16(a, b, 0x0c), _mm_blend_epi16(c, d, 0xc0), 0xf0));
}

/* 8 rows' 32 bytes at q[i] as 8 vectors, g[k] = dword k of rows 0..7
 * (row i at bytes 4i): Q8_0's blocks, and Q4_K's pairs of sub-blocks. */
EXL_INLINE void dwords_rows8(const uint8_t *const *q, __m256i g[8])
{
	__m256i y[8], t[8], u[8];

	for (int i = 0; i < 8; i++)
		y[i] = _mm256_loadu_si256((const __m256i *)(const void *)q[i]);
	for (int i = 0; i < 8; i += 2) {
		t[i] = _mm256_unpacklo_epi32(y[i], y[i + 1]);
		t[i + 1] = _mm256_unpackhi_epi32(y[i], y[i + 1]);
	}
	for (int h = 0; h < 8; h += 4) {
		u[h + 0] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
		u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
		u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
		u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
	}
	for (int k = 0; k < 4; k++) {
		g[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
		g[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
	}
}

/* Block b of 8 rows: g[k] = bytes 4k..4k+3 of rows 0..7 (row i at bytes
 * 4i), a[k] = |g[k]| (with VNNI g[k] + 128, as unsigned bytes), and the
 * rows' scales. */
EXL_INLINE void q8_0_rows8_block(const block_q8_0 *const *rw, int64_t b, __m256i g[8],
				 __m256i a[8], __m256 *dw)
{
	const uint8_t *q[8], *rb[8];

	for (int i = 0; i < 8; i++) {
		q[i] = (const uint8_t *)rw[i][b].qs;
		rb[i] = (const uint8_t *)(rw[i] + b);
	}
	dwords_rows8(q, g);
	for (int k = 0; k < 8; k++)
#ifdef EXL_MM_VNNI
		a[k] = _mm256_xor_si256(g[k], _mm256_set1_epi8((char)0x80));
#else
		a[k] = _mm256_sign_epi8(g[k], g[k]);
#endif
	*dw = rows8_d(rb);
}

/* Group k's 4 bytes of x in the 8-row kernels: x + 4k, k >= 4 at x + hoff
 * + 4(k - 4). */
EXL_INLINE const int8_t *rows8_xk(const int8_t *x, size_t hoff, int k)
{
	return x + (k < 4 ? (size_t)(4 * k) : hoff + (size_t)(4 * (k - 4)));
}

/* ROWS8_CHAINS: the 8 products of a block go into two int32 chains of 4,
 * added at the end.  The sums are exact, so the bits are those of one
 * chain of 8; but one vpdpbusd (or vpdpwssd) waits on the one before, and
 * a chain of 8 made each vector's block step as long as 8 latencies, more
 * than out-of-order execution hid across the vectors (Zen 4, avx2vnni,
 * bench_matmul --model --n 128, 9 alternating runs: Q8_0 112.5 -> 124.1
 * tok/s, Q4_0 111.5 -> 122.2; four chains no better). */

/* Only the signed types without VNNI take these (IQ4_XS the first, Q8_0
 * and IQ4_NL the second): clang flags an unused static function, and with
 * VNNI they would be. */
#ifndef EXL_MM_VNNI
/* The 8 rows' signed levels (g[k]: weights of group k, aw[k] = |g[k]|)
 * . x as int32 lanes, through |w| * (x with w's sign), each pair sum
 * (<= 2 * 128 * 127) times lane i's int16 in both halves of mul (row i's
 * sub-block scale). */
EXL_INLINE __m256i rows8_signed_dot_mul(const __m256i g[8], const __m256i aw[8], const int8_t *x, size_t hoff,
					__m256i mul)
{
	__m256i d[2] = { _mm256_setzero_si256(), _mm256_setzero_si256() };

	/* two chains (ROWS8_CHAINS) */
	for (int k = 0; k < 8; k++)
		d[k & 1] = madd_acc(d[k & 1],
				    _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(bcast_i32(rows8_xk(x, hoff, k)), g[k])),
				    mul);
	return _mm256_add_epi32(d[0], d[1]);
}

/* The 8 rows' signed levels . x as int32 lanes, as rows8_signed_dot_mul
 * gives them times 1 (with VNNI the signed types take w + 128 instead). */
EXL_INLINE __m256i rows8_signed_dot(const __m256i g[8], const __m256i aw[8], const int8_t *x, size_t hoff)
{
	__m256i d[2] = { _mm256_setzero_si256(), _mm256_setzero_si256() };

	/* two chains (ROWS8_CHAINS) */
	for (int k = 0; k < 8; k++)
		d[k & 1] = dot4_acc(d[k & 1], aw[k], _mm256_sign_epi8(bcast_i32(rows8_xk(x, hoff, k)), g[k]));
	return _mm256_add_epi32(d[0], d[1]);
}
#endif

/* acc + the 8 rows' unsigned levels (lv[k]: group k) . x as int32 lanes.
 * Without VNNI the 8 maddubs add in int16, so the levels must be 0..15 (at
 * most 8 * 2 * 15 * 127 = 30480); with it any bytes (Q8_0's w + 128). */
EXL_INLINE __m256i rows8_u4_dot(__m256i acc, const __m256i lv[8], const int8_t *x, size_t hoff)
{
#ifdef EXL_MM_VNNI
	/* two chains (ROWS8_CHAINS) */
	__m256i acc1 = _mm256_setzero_si256();

	for (int k = 0; k < 8; k += 2) {
		acc = _mm256_dpbusd_epi32(acc, lv[k], bcast_i32(rows8_xk(x, hoff, k)));
		acc1 = _mm256_dpbusd_epi32(acc1, lv[k + 1], bcast_i32(rows8_xk(x, hoff, k + 1)));
	}
	return _mm256_add_epi32(acc, acc1);
#else
	__m256i s = _mm256_maddubs_epi16(lv[0], bcast_i32(x));

	for (int k = 1; k < 8; k++)
		s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lv[k], bcast_i32(rows8_xk(x, hoff, k))));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
#endif
}

/* rows8_u4_dot of two vectors at once, acc[v] + lv . x[v]: with VNNI their
 * four chains interleaved, so that independent vpdpbusd sit side by side
 * in program order and the core need not look 30 instructions ahead for
 * them (Zen 4, avx2vnni Q8_0, bench_matmul --model --n 128, 9 alternating
 * runs, twice: 145.1 -> 153.8 and 139.0 -> 148.9 tok/s).  The same bits
 * as two calls. */
EXL_INLINE void rows8_u4_dot_x2(__m256i acc[2], const __m256i lv[8], const int8_t *const x[2], size_t hoff)
{
#ifdef EXL_MM_VNNI
	__m256i e[2] = { _mm256_setzero_si256(), _mm256_setzero_si256() };

	for (int k = 0; k < 8; k += 2)
		for (int v = 0; v < 2; v++) {
			acc[v] = _mm256_dpbusd_epi32(acc[v], lv[k], bcast_i32(rows8_xk(x[v], hoff, k)));
			e[v] = _mm256_dpbusd_epi32(e[v], lv[k + 1], bcast_i32(rows8_xk(x[v], hoff, k + 1)));
		}
	for (int v = 0; v < 2; v++)
		acc[v] = _mm256_add_epi32(acc[v], e[v]);
#else
	for (int v = 0; v < 2; v++)
		acc[v] = rows8_u4_dot(acc[v], lv, x[v], hoff);
#endif
}

/* A block's float step for the 8 rows of one vector: its int32 dots d
 * times the rows' scales dw and x's scale, into accumulator b mod 8. */
EXL_INLINE void rows8_q8x_step(__m256 acc[8], __m256i d, __m256 dw, const uint8_t *a, int64_t cols, int64_t b)
{
	__m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(exl_act_q8_0_d(a, cols)[b]));

	acc[b & 7] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[b & 7]);
}

/* Block b's step for vectors c and c + 1 (accumulators acc[0], acc[1]) of
 * kernels whose levels lv are offset by bias (Q8_0's w + 128, Q4_0's
 * nibbles with their 8): x of block b at off (hoff, rows8_xk), each dot
 * started at -bias * sum(x), then the float step. */
EXL_INLINE void rows8_u4_step_x2(const struct exl_mm_ctx *m, __m256 (*acc)[8], int c, int64_t b,
				 const __m256i lv[8], __m256 dw, size_t off, size_t hoff, int bias)
{
	const uint8_t *a[2];
	const int8_t *x[2];
	__m256i d[2];

	for (int v = 0; v < 2; v++) {
		a[v] = m->act + (size_t)(c + v) * m->act_stride;
		x[v] = (const int8_t *)a[v] + off;
		d[v] = _mm256_set1_epi32(-bias * act_isum(a[v], m->cols)[b]);
	}
	rows8_u4_dot_x2(d, lv, x, hoff);
	for (int v = 0; v < 2; v++)
		rows8_q8x_step(acc[v], d[v], dw, a[v], m->cols, b);
}

/* The same from 0, times lane i's int16 in both halves of mul (row i's
 * sub-block scale, 0..63). */
EXL_INLINE __m256i rows8_u4_dot_mul(const __m256i lv[8], const int8_t *x, size_t hoff, __m256i mul)
{
#ifdef EXL_MM_VNNI
	return _mm256_mullo_epi32(rows8_u4_dot(_mm256_setzero_si256(), lv, x, hoff), _mm256_srli_epi32(mul, 16));
#else
	__m256i s = _mm256_maddubs_epi16(lv[0], bcast_i32(x));

	for (int k = 1; k < 8; k++)
		s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lv[k], bcast_i32(rows8_xk(x, hoff, k))));
	return _mm256_madd_epi16(s, mul);
#endif
}

/* rows8_u4_dot_mul of two vectors at once (rows8_u4_dot_x2). */
EXL_INLINE void rows8_u4_dot_mul_x2(__m256i d[2], const __m256i lv[8], const int8_t *const x[2], size_t hoff,
				    __m256i mul)
{
#ifdef EXL_MM_VNNI
	d[0] = d[1] = _mm256_setzero_si256();
	rows8_u4_dot_x2(d, lv, x, hoff);
	for (int v = 0; v < 2; v++)
		d[v] = _mm256_mullo_epi32(d[v], _mm256_srli_epi32(mul, 16));
#else
	for (int v = 0; v < 2; v++)
		d[v] = rows8_u4_dot_mul(lv, x[v], hoff, mul);
#endif
}

/* Per int32 lane, unsigned levels 0..15: l . xl + h . xh (without VNNI
 * the two maddubs add in int16: at most 2 * 2 * 15 * 127). */
EXL_INLINE __m256i u4_dot2(__m256i l, __m256i xl, __m256i h, __m256i xh)
{
#ifdef EXL_MM_VNNI
	return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), l, xl), h, xh);
#else
	return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(l, xl), _mm256_maddubs_epi16(h, xh)),
				 _mm256_set1_epi16(1));
#endif
}

/* Decode's prefetch of the repacked 4-bit types in the avx2 set: before
 * each block (super-block for Q4_K) of a group, every line of the block PF
 * on.  The hardware prefetchers follow the group's stream, but a 4-bit
 * block costs the set (no VNNI) enough operations that, waiting on them,
 * the stream falls behind the memory: compute and memory times added up
 * (Zen 3, 2 threads: Q4_0 35 GB/s from cache, 18 from memory, 11.9 in
 * decode, 1 / (1/35 + 1/18) = 11.9).  bench_matmul --model --n 1, 2
 * threads, medians of 4-5 alternating rounds on the Zen 3: Q4_0 none
 * 21.5, every line of 8 blocks at once, 16 ahead, 23.5, a block's lines
 * before each block, 16 ahead, 25.6 tok/s (32 ahead 24.7); IQ4_NL the
 * same; Q4_K none 22.0-23.0, 4 super-blocks ahead 24.7-26.3 (8: 24.2), all
 * of 8 super-blocks at once slower than none.  Not a share of the lines:
 * one line in two read 13-16 tok/s.  Q8_0 gains nothing (12.3 none, 12.5
 * and 12.6 at 16 and 32 blocks), and the VNNI sets take none: on the Zen
 * 4 (avx512vnni) one to three lines a block 8 KiB ahead read 28.8-36.3
 * against none's 44.9 tok/s. */
#ifdef EXL_MM_VNNI
#define R8_PF_Q4 0
#define R8_PF_Q4_K 0
#else
#define R8_PF_Q4 16
#define R8_PF_Q4_K 4
#endif

/* Every line of block b of the group at p, sb bytes a block.  Not
 * exl_prefetch_share of the group shifted by PF blocks, which asks for the
 * same lines: its share costs two divisions a call, in a loop of about 20
 * cycles a block. */
EXL_INLINE void r8_prefetch(const uint8_t *p, size_t sb, int64_t b)
{
	const size_t o1 = sb * (size_t)(b + 1);

	for (size_t o = (sb * (size_t)b) & ~(size_t)63; o < o1; o += 64)
		_mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Step t of a group of 8 blocks from b in T##_r8_dots_n, block b + t + PF
 * asked for first. */
#define R8_STEP(T, PF, t)                                                        \
	do {                                                                     \
		if (PF)                                                          \
			r8_prefetch(p, sb, b + (t) + (PF));                      \
		T##_r8_step(m, p, a, nc, b + (t), acc, (t), true);               \
	} while (0)

/* The kernel of a type repacked into groups of 8 rows (repack.h):
 * T##_r8_step(m, p, a, nc, b, acc, t, full) takes block (or super-block) b
 * of the group at p for nc vectors into accumulator t = b mod 8 (full: b
 * in a whole group of 8 blocks of the row), ROWS8 the batched calls.
 * Decode (n <= 4) keeps the accumulators in registers and, PF > 0, asks
 * for each block's lines PF blocks ahead (R8_PF_Q4 says which types and
 * sets).  The 8 steps of a group of blocks are written out: as a loop over
 * t, gcc 12 -O3 turned them inside out, walking the blocks 8 apart (half
 * the decode speed). */
#define DEFINE_R8_MM(T, QK, ROWS8, PF)                                                             \
	EXL_INLINE void T##_r8_dots_n(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, const int nc) \
	{                                                                                          \
		const uint8_t *p = exl_row(m, r);                                                  \
		const int64_t nb = m->cols / (QK);                                                 \
		const size_t sb = 8 * m->row_bytes / (size_t)nb; /* a block of the group */       \
		const uint8_t *a[4];                                                               \
		__m256 acc[4][8];                                                                  \
		int64_t b = 0;                                                                     \
                                                                                                   \
		for (int j = 0; j < nc; j++)                                                       \
			a[j] = m->act + (size_t)(c0 + j) * m->act_stride;                          \
		rows8_acc_zero(acc, nc);                                                           \
		for (; b + 8 <= nb; b += 8) {                                                      \
			R8_STEP(T, PF, 0);                                                         \
			R8_STEP(T, PF, 1);                                                         \
			R8_STEP(T, PF, 2);                                                         \
			R8_STEP(T, PF, 3);                                                         \
			R8_STEP(T, PF, 4);                                                         \
			R8_STEP(T, PF, 5);                                                         \
			R8_STEP(T, PF, 6);                                                         \
			R8_STEP(T, PF, 7);                                                         \
		}                                                                                  \
		for (; b < nb; b++)                                                                \
			T##_r8_step(m, p, a, nc, b, acc, (int)(b & 7), false);                     \
		rows8_store(m, acc, nc, c0, r, nr);                                                \
	}                                                                                          \
	static void mm_##T##_r8(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1) \
	{                                                                                          \
		for (int64_t r = r0; r < r1; r += 8) {                                             \
			const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;                             \
                                                                                                   \
			if (m->n > EXL_STREAM_N) {                                                 \
				ROWS8(m, r, nr, c0, c1);                                           \
				continue;                                                          \
			}                                                                          \
			switch (c1 - c0) {                                                         \
			case 1: T##_r8_dots_n(m, r, nr, c0, 1); break;                             \
			case 2: T##_r8_dots_n(m, r, nr, c0, 2); break;                             \
			case 3: T##_r8_dots_n(m, r, nr, c0, 3); break;                             \
			default: T##_r8_dots_n(m, r, nr, c0, 4); break;                            \
			}                                                                          \
		}                                                                                  \
	}

/* Block b of a group of 8 rows repacked (EXL_LAYOUT_ROWS8 at p, the
 * group's first byte, kernels/cpu/repack.h): what q8_0_rows8_block gives
 * for the rows before repacking, with 8 loads in place of the transpose. */
EXL_INLINE void q8_0_r8_block(const uint8_t *p, int64_t b, __m256i g[8], __m256i a[8], __m256 *dw)
{
	const uint8_t *q = p + 272 * (size_t)b;

	for (int k = 0; k < 8; k++) {
		g[k] = _mm256_loadu_si256((const __m256i *)(const void *)(q + 16 + 32 * k));
#ifdef EXL_MM_VNNI
		a[k] = _mm256_xor_si256(g[k], _mm256_set1_epi8((char)0x80));
#else
		a[k] = _mm256_sign_epi8(g[k], g[k]);
#endif
	}
	*dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)q));
}

/* Rows [r, r + nr) (nr <= 8) x vectors [c0, c1) (at most COL_CHUNK, 64),
 * from GGUF rows or, packed, from a group of EXL_LAYOUT_ROWS8. */
static void q8_0_rows8_from(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1, bool packed)
{
	const block_q8_0 *rw[8];
	const int64_t nb = m->cols / 32;
	const int nc = c1 - c0;
	__m256 acc[64][8];

	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		__m256i g[8], aw[8];
		__m256 dw;

		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		if (packed)
			q8_0_r8_block(exl_row(m, r), b, g, aw, &dw);
		else
			q8_0_rows8_block(rw, b, g, aw, &dw);
		int j = 0;
#ifdef EXL_MM_VNNI
		/* (w + 128) . x less 128 * sum(x): one vpdpbusd per 4 bytes */
		for (; j + 2 <= nc; j += 2)
			rows8_u4_step_x2(m, acc + j, c0 + j, b, aw, dw, 32 * (size_t)b, 16, 128);
#endif
		for (; j < nc; j++) {
			const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;
#ifdef EXL_MM_VNNI
			__m256i d = rows8_u4_dot(_mm256_set1_epi32(-128 * act_isum(a, m->cols)[b]), aw,
						 (const int8_t *)a + 32 * b, 16);
#else
			__m256i d = rows8_signed_dot(g, aw, (const int8_t *)a + 32 * b, 16);
#endif
			rows8_q8x_step(acc[j], d, dw, a, m->cols, b);
		}
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

static void q8_0_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	q8_0_rows8_from(m, r, nr, c0, c1, false);
}

/* Block b of the repacked group at p for nc vectors: into accumulator t
 * (b mod 8), q8_0_rows8_from's steps. */
EXL_INLINE void q8_0_r8_step(const struct exl_mm_ctx *m, const uint8_t *p, const uint8_t *const *a, int nc,
			     int64_t b, __m256 (*acc)[8], int t, bool full)
{
	__m256i g[8], aw[8];
	__m256 dw;

	(void)full;

	q8_0_r8_block(p, b, g, aw, &dw);
	for (int j = 0; j < nc; j++) {
#ifdef EXL_MM_VNNI
		__m256i d = rows8_u4_dot(_mm256_set1_epi32(-128 * act_isum(a[j], m->cols)[b]), aw,
					 (const int8_t *)a[j] + 32 * b, 16);
#else
		__m256i d = rows8_signed_dot(g, aw, (const int8_t *)a[j] + 32 * b, 16);
#endif
		__m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(exl_act_q8_0_d(a[j], m->cols)[b]));

		acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][t]);
	}
}

static void q8_0_r8_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	q8_0_rows8_from(m, r, nr, c0, c1, true);
}

DEFINE_R8_MM(q8_0, 32, q8_0_r8_rows8, 0)

/* The float step of one group: lanes 0..k-1 of acc take fma(p, sc, acc),
 * lanes k..7 stay. */
EXL_INLINE __m256 group_step(__m256i dots, __m256 sc, __m256 acc, int k)
{
	__m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), sc, acc);

	if (k == 8)
		return r;
	__m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));

	return _mm256_blendv_ps(acc, r, _mm256_castsi256_ps(keep));
}

/* group_step for types with a min term: lanes 0..k-1 of acc take
 * fnmadd(m, scm, fma(p, sc, acc)), lanes k..7 stay. */
EXL_INLINE __m256 group_step_min(__m256i dots, __m256 sc, __m256i mins, __m256 scm, __m256 acc, int k)
{
	__m256 r = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), scm,
				    _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), sc, acc));

	if (k == 8)
		return r;
	__m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));

	return _mm256_blendv_ps(acc, r, _mm256_castsi256_ps(keep));
}

/* The scales d_x of blocks b..b+k-1 of a vector, lanes k..7 zero. */
EXL_INLINE __m256 group_dx(const float *xd, int64_t b, int k)
{
	float dx[8] = { 0 };

	if (k == 8)
		return _mm256_loadu_ps(xd + b);
	memcpy(dx, xd + b, sizeof(float) * (size_t)k);
	return _mm256_loadu_ps(dx);
}

/* Blocks b..b+k-1 (k <= 8, b a multiple of 8) of a row x the nc (<= 4)
 * vectors at a[]: lane m of acc[j] is vector j's accumulator (b + m) mod 8.
 * Each weight block is loaded once for the nc vectors. */
EXL_INLINE void q8_0_group8(const block_q8_0 *w, int64_t b, int k, const uint8_t *const *a, int nc,
			    int64_t cols, size_t pf, __m256 *acc)
{
	__m256i p[4][8];
	const uint8_t *rb[8];

	if (pf)
		for (int t = 0; t < 272; t += 64)
			_mm_prefetch((const char *)(w + b) + pf + t, _MM_HINT_T0);
	for (int t = 0; t < 8; t++) {
		rb[t] = (const uint8_t *)(w + b + (t < k ? t : 0));
		if (t >= k) {
			for (int j = 0; j < nc; j++)
				p[j][t] = _mm256_setzero_si256();
			continue;
		}
		__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)w[b + t].qs);
#ifdef EXL_MM_VNNI
		__m256i uv = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)); /* w + 128 */

		for (int j = 0; j < nc; j++)
			p[j][t] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), uv,
				_mm256_loadu_si256((const __m256i *)(const void *)(a[j] + 32 * (b + t))));
#else
		__m256i av = _mm256_sign_epi8(v, v);

		for (int j = 0; j < nc; j++) {
			__m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(a[j] + 32 * (b + t)));

			p[j][t] = dot4_acc(_mm256_setzero_si256(), av, _mm256_sign_epi8(xv, v));
		}
#endif
	}
	__m256 dw = k == 8 ? group8_d_q8(w + b) : rows8_d(rb);

	for (int j = 0; j < nc; j++) {
		__m256i dots = hsum8x8_epi32(p[j]);

#ifdef EXL_MM_VNNI
		dots = _mm256_sub_epi32(dots, _mm256_slli_epi32(group_isum(a[j], cols, b, k), 7));
#endif
		acc[j] = group_step(dots, _mm256_mul_ps(dw, group_dx(exl_act_q8_0_d(a[j], cols), b, k)), acc[j], k);
	}
}

DEFINE_ROWS8_MM(q8_0, block_q8_0)

/* Q4_0.  Byte j of a block holds weight j (low nibble) and j + 16 (high).
 *
 * Every path gives output r, vector c the same float steps: block b goes
 * into accumulator b mod 8, acc[b % 8] = fma((float)(dot_b - 8 sx_b),
 * dw_b * dx_b, acc[b % 8]), blocks in order, and the output is
 * ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7)).
 * dot_b = sum of level * x (exact int32), sx_b = sum of x over block b,
 * which this set's act_q4_0 keeps as an int32 where act_q8_0 keeps s.
 *  - n > 4: 8 rows in the lanes of a vector.  Per block, the 8 rows'
 *    16-byte nibble arrays are transposed in registers to 4 vectors of
 *    8 rows x 4 bytes, so one maddubs against 4 bytes of x broadcast
 *    serves 8 rows; the 8 products of a block are summed in int16 (at
 *    most 8 x 2 x 15 x 127 = 30480) and one int32 step and one float step
 *    per block and vector serve 8 outputs.
 *  - n <= 4 (memory bound): one row at a time as one stream; per 8 blocks
 *    the int32 dots are reduced into the lanes of one vector, lane m being
 *    accumulator m, so one float step serves 8 blocks. */


/* Block blk's 32 nibbles (weights 0..31, low nibbles then high) as bytes. */
EXL_INLINE __m256i q4_levels(const block_q4_0 *blk)
{
	__m128i q = _mm_loadu_si128((const __m128i *)(const void *)blk->qs);

	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* Block b of nb of an act row in act_pairs32's order, in weight order. */
EXL_INLINE __m256i pairs32_block(const uint8_t *a, int64_t b, int64_t nb)
{
	size_t hoff, off = exl_pairs32_lo(b, nb, &hoff);
	const int8_t *x = (const int8_t *)a + off;

	return _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)(x + hoff)),
				_mm_loadu_si128((const __m128i *)(const void *)x));
}

/* Blocks b and b + 1 (one in each lane): *l their weights 0..15, *h
 * 16..31, as nibble values; and the x of the pair in act_pairs32's order,
 * *xl for weights 0..15 of both, *xh 16..31. */
EXL_INLINE void q4_pair_nibbles(const block_q4_0 *w, int64_t b, __m256i *l, __m256i *h)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	__m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)w[b + 1].qs),
				     _mm_loadu_si128((const __m128i *)(const void *)w[b].qs));

	*l = _mm256_and_si256(q, lo4);
	*h = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
}

EXL_INLINE void pairs32_x(const uint8_t *a, int64_t b, __m256i *xl, __m256i *xh)
{
	const int8_t *x = (const int8_t *)a + 32 * (size_t)b;

	*xl = _mm256_loadu_si256((const __m256i *)(const void *)x);
	*xh = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32));
}

/* qs of whole blocks, in element order, to act_pairs32's order. */
static void pairs32_order(int8_t *qs, int64_t cols)
{
	int8_t tmp[64];

	for (int64_t b = 0; b + 2 <= cols / 32; b += 2) {
		int8_t *q = qs + 32 * b;

		memcpy(tmp, q, 64);
		memcpy(q + 16, tmp + 32, 16);
		memcpy(q + 32, tmp + 16, 16);
	}
}

/* Blocks of x in act_pairs32's order (each pair of blocks as [x0..15 of
 * both | x16..31 of both]), with sum of x per block as an int32 in place of
 * act_q8_0's s (Q4_0's offset of 8 is taken off through it). */
static void act_q4_0(const float *x, uint8_t *act, int64_t cols)
{
	exl_act_q8_0_isum_avx2(x, act, cols);
	pairs32_order((int8_t *)act, cols);
}

/* The pairs layout of the other 32-weight types (below): each pair of
 * blocks of x as [x0..15 of both | x16..31 of both], so that two blocks'
 * qs split into their low and high halves with one mask and one shift.
 * A trailing odd block stays in element order. */
static void act_pairs32(const float *x, uint8_t *act, int64_t cols)
{
	exl_act_q8_0_avx2(x, act, cols);
	pairs32_order((int8_t *)act, cols);
}

/* [v[2p] x4, v[2p + 1] x4] */
EXL_INLINE __m256 spread_pair(__m256 v, int p)
{
	return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p,
							     2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1));
}

/* 16 bytes of nibbles at q[i] for each of 8 rows (weight l in the low
 * nibble of byte l, 16 + l in its high one, as a Q4_0 block lays them):
 * lo[g] / hi[g] = weights 4g..4g+3 / 16+4g..16+4g+3 of rows 0..7 (4 bytes
 * each, row i at bytes 4i), as nibble values. */
EXL_INLINE void nib16_rows8(const uint8_t *const *q, __m256i lo[4], __m256i hi[4])
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	__m256i y[4];

	for (int i = 0; i < 4; i++)
		y[i] = _mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)q[i])),
			_mm_loadu_si128((const __m128i *)(const void *)q[i + 4]), 1);
	/* [rows 0..3 | rows 4..7] of dword g, as a 4 x 4 transpose per lane */
	__m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
	__m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
	__m256i g[4] = { _mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
			 _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3) };

	for (int i = 0; i < 4; i++) {
		lo[i] = _mm256_and_si256(g[i], lo4);
		hi[i] = _mm256_and_si256(_mm256_srli_epi16(g[i], 4), lo4);
	}
}

/* Block b of 8 rows: nib16_rows8 of their qs, and the rows' scales. */
EXL_INLINE void q4_0_rows8_block(const block_q4_0 *const *rw, int64_t b, __m256i lo[4],
				 __m256i hi[4], __m256 *dw)
{
	const uint8_t *q[8];

	for (int i = 0; i < 8; i++)
		q[i] = rw[i][b].qs;
	nib16_rows8(q, lo, hi);
	*dw = _mm256_cvtph_ps(_mm_setr_epi16((short)rw[0][b].d, (short)rw[1][b].d, (short)rw[2][b].d,
					     (short)rw[3][b].d, (short)rw[4][b].d, (short)rw[5][b].d,
					     (short)rw[6][b].d, (short)rw[7][b].d));
}

/* Block b of a group of 8 rows repacked (EXL_LAYOUT_ROWS8 at p, the
 * group's first byte, kernels/cpu/repack.h): what q4_0_rows8_block gives
 * for the rows before repacking, with 4 loads in place of the transpose. */
EXL_INLINE void q4_0_r8_block(const uint8_t *p, int64_t b, __m256i lv[8], __m256 *dw)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	const uint8_t *q = p + 144 * (size_t)b;

	for (int k = 0; k < 4; k++) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 16 + 32 * k));

		lv[k] = _mm256_and_si256(v, lo4);
		lv[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
	}
	*dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)q));
}

/* Rows [r, r + nr) (nr <= 8) x vectors [c0, c1) (at most COL_CHUNK, 64),
 * from GGUF rows or, packed, from a group of EXL_LAYOUT_ROWS8 (r a
 * multiple of 8).  Not always_inline: gcc 12 -O3, inlining it into its
 * two callers, dropped exl_prefetch_share's loop from both (no prefetch
 * left in the object; a batched step from memory ran 10-20 % slower). */
static void q4_0_rows8_from(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1, bool packed)
{
	const block_q4_0 *rw[8];
	const int64_t nb = m->cols / 32;
	const int nc = c1 - c0;
	__m256 acc[64][8];

	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		__m256i lv[8];
		__m256 dw;

		/* the next group of 8 rows lies next in both layouts */
		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		if (packed)
			q4_0_r8_block(exl_row(m, r), b, lv, &dw);
		else
			q4_0_rows8_block(rw, b, lv, lv + 4, &dw);
		size_t hoff, off = exl_pairs32_lo(b, nb, &hoff);
		int j = 0;

		for (; j + 2 <= nc; j += 2)
			rows8_u4_step_x2(m, acc + j, c0 + j, b, lv, dw, off, hoff, 8);
		for (; j < nc; j++) {
			const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;
			__m256i d = rows8_u4_dot(_mm256_set1_epi32(-8 * act_isum(a, m->cols)[b]), lv,
						 (const int8_t *)a + off, hoff);

			rows8_q8x_step(acc[j], d, dw, a, m->cols, b);
		}
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

static void q4_0_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	q4_0_rows8_from(m, r, nr, c0, c1, false);
}

/* Decode (nc <= 4 vectors, a constant per call) of the group of 8
 * repacked rows at r: q4_0_rows8_from's steps with the accumulators in
 * registers (the 8 of a group of blocks named, not indexed).  No software
 * prefetch: the group is one stream the hardware prefetchers follow, and
 * T0 prefetches on top of it read slower (a test program, 2 threads, 75 MB
 * of Q4_0: 31.4 -> 28.5 GB/s with one per 64 bytes, 8 KiB ahead). */
/* Block b of the group at p for nc vectors: into accumulator t (b mod 8).
 * x's pairs order (exl_pairs32_lo) in a whole group of 8 is 4 pairs, never the
 * odd last block: offsets known from t there, without exl_pairs32_lo's test. */
EXL_INLINE void q4_0_r8_step(const struct exl_mm_ctx *m, const uint8_t *p, const uint8_t *const *a, int nc,
			     int64_t b, __m256 (*acc)[8], int t, bool full)
{
	size_t hoff = 32, off;
	__m256i lv[8];
	__m256 dw;

	if (full)
		off = 32 * (size_t)(b - t) + 64 * (size_t)(t / 2) + 16 * (size_t)(t & 1);
	else
		off = exl_pairs32_lo(b, m->cols / 32, &hoff);
#ifdef EXL_MM_VNNI
	/* the high nibbles in place, as 16 * level (q & 0xf0), in a chain of
	 * their own whose exact sum is shifted back: 4 shifts a block fewer,
	 * one a vector more (maddubs would overflow on them without VNNI) */
	const uint8_t *q = p + 144 * (size_t)b;

	for (int k = 0; k < 4; k++) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 16 + 32 * k));

		lv[k] = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
		lv[k + 4] = _mm256_and_si256(v, _mm256_set1_epi8((char)0xf0));
	}
	dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)q));
#else
	q4_0_r8_block(p, b, lv, &dw);
#endif
	for (int j = 0; j < nc; j++) {
#ifdef EXL_MM_VNNI
		const int8_t *x = (const int8_t *)a[j] + off;
		__m256i lo = _mm256_set1_epi32(-8 * act_isum(a[j], m->cols)[b]);
		__m256i hi = _mm256_setzero_si256();

		for (int k = 0; k < 4; k++) {
			lo = _mm256_dpbusd_epi32(lo, lv[k], bcast_i32(x + 4 * k));
			hi = _mm256_dpbusd_epi32(hi, lv[k + 4], bcast_i32(x + hoff + 4 * k));
		}
		__m256i d = _mm256_add_epi32(lo, _mm256_srai_epi32(hi, 4));
#else
		__m256i d = rows8_u4_dot(_mm256_set1_epi32(-8 * act_isum(a[j], m->cols)[b]), lv,
					 (const int8_t *)a[j] + off, hoff);
#endif
		__m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(exl_act_q8_0_d(a[j], m->cols)[b]));

		acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][t]);
	}
}

static void q4_0_r8_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	q4_0_rows8_from(m, r, nr, c0, c1, true);
}

DEFINE_R8_MM(q4_0, 32, q4_0_r8_rows8, R8_PF_Q4)

/* The start of a group of k blocks from b of a row of 18-byte blocks
 * (Q4_0, IQ4_NL): the prefetch pf on, and rb[t] = block b + t (block b for
 * t >= k), whose scales rows8_d reads. */
EXL_INLINE void q4_group8_start(const block_q4_0 *w, int64_t b, int k, size_t pf, const uint8_t *rb[8])
{
	if (pf) {
		_mm_prefetch((const char *)(w + b) + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)(w + b) + pf + 64, _MM_HINT_T0);
		_mm_prefetch((const char *)(w + b) + pf + 128, _MM_HINT_T0);
	}
	for (int t = 0; t < 8; t++)
		rb[t] = (const uint8_t *)(w + b + (t < k ? t : 0));
}

/* The int32 dots of 8 blocks in lanes, block order, from 4 pairs' vectors
 * (pp[i]: lanes 0-3 block 2i's partial dots, 4-7 block 2i + 1's). */
EXL_INLINE __m256i pairs_to_lanes(const __m256i pp[4])
{
	/* [b0 b2 b4 b6 | b1 b3 b5 b7], then in block order */
	__m256i g = _mm256_hadd_epi32(_mm256_hadd_epi32(pp[0], pp[1]), _mm256_hadd_epi32(pp[2], pp[3]));

	return _mm256_permutevar8x32_epi32(g, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Blocks b..b+k-1 (k <= 8, b a multiple of 8) of a row x the nc (<= 4)
 * vectors at a[]: lane m of acc[j] is vector j's accumulator (b + m) mod 8.
 * Each block's levels are unpacked once for the nc vectors. */
EXL_INLINE void q4_0_group8(const block_q4_0 *w, int64_t b, int k, const uint8_t *const *a, int nc,
			    int64_t cols, size_t pf, __m256 *acc)
{
	const int64_t nb = cols / 32;
	__m256i g[4];
	const uint8_t *rb[8];

	q4_group8_start(w, b, k, pf, rb);
	if (k == 8) {
		/* 4 pairs of blocks, each pair's x contiguous in act_q4_0's
		 * order: one vector holds both blocks' low (high) nibbles, and
		 * their two maddubs add in int16 (at most 2 x 2 x 15 x 127 =
		 * 7620), so a pair costs one madd; lanes 0-3 hold block
		 * b + 2i's partial dots and 4-7 block b + 2i + 1's */
		__m256i pp[4][4];

		for (int i = 0; i < 4; i++) {
			__m256i l, h, xl, xh;

			q4_pair_nibbles(w, b + 2 * i, &l, &h);
			for (int j = 0; j < nc; j++) {
				pairs32_x(a[j], b + 2 * i, &xl, &xh);
				pp[j][i] = u4_dot2(l, xl, h, xh);
			}
		}
		for (int j = 0; j < nc; j++)
			g[j] = pairs_to_lanes(pp[j]);
	} else {
		__m256i p[4][8];

		for (int t = 0; t < 8; t++) {
			if (t >= k) {
				for (int j = 0; j < nc; j++)
					p[j][t] = _mm256_setzero_si256();
				continue;
			}
			__m256i v = q4_levels(&w[b + t]);

			for (int j = 0; j < nc; j++)
				p[j][t] = dot4_acc(_mm256_setzero_si256(), v, pairs32_block(a[j], b + t, nb));
		}
		for (int j = 0; j < nc; j++)
			g[j] = hsum8x8_epi32(p[j]);
	}
	__m256 dw = k == 8 ? group8_d_q4(w + b) : rows8_d(rb);

	for (int j = 0; j < nc; j++) {
		__m256i s8 = group_isum(a[j], cols, b, k);

		acc[j] = group_step(_mm256_sub_epi32(g[j], _mm256_slli_epi32(s8, 3)),
				    _mm256_mul_ps(dw, group_dx(exl_act_q8_0_d(a[j], cols), b, k)), acc[j], k);
	}
}

DEFINE_ROWS8_MM(q4_0, block_q4_0)

/* ---- Q4_1, Q5_0, Q5_1, IQ4_NL: the other 32-weight types ----
 *
 * Their nibbles are laid out as Q4_0's; they take act_pairs32 (pairs
 * of blocks of x stored as [x0..15 of both | x16..31 of both]).  Q4_1,
 * Q5_0 and Q5_1 keep tiles of 2 rows x 4 vectors and pair steps: levels of
 * two blocks in two vectors, int32 dots, one float FMA per pair of blocks
 * and output.  Q5_0 / Q5_1 OR in their fifth bits (qh bit i -> byte i);
 * IQ4_NL (at the end) takes Q8_0's paths over Q4_0's transpose.
 * Q5_0's -16 is taken off through 16 * x, as Q4_0's -8; Q4_1 / Q5_1 add
 * their offset as m_w * s_x per block (s_x = d_x * sum of x's block). */

#define B32_FIVE(T) ((T) == EXL_Q5_0 || (T) == EXL_Q5_1)
#define B32_HAS_MIN(T) ((T) == EXL_Q4_1 || (T) == EXL_Q5_1)

EXL_INLINE size_t b32_size(const int T)
{
	return T == EXL_Q4_1 ? sizeof(block_q4_1) : T == EXL_Q5_0 ? sizeof(block_q5_0) :
	       sizeof(block_q5_1);
}

EXL_INLINE size_t b32_qs(const int T)
{
	return T == EXL_Q4_1 ? offsetof(block_q4_1, qs) : T == EXL_Q5_0 ? offsetof(block_q5_0, qs) :
	       offsetof(block_q5_1, qs);
}

EXL_INLINE size_t b32_qh(const int T)
{
	return T == EXL_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
}

/* the fp16 scale d is at offset 0 of every one; m at 2 of Q4_1 / Q5_1 */
#define B32_D 0
#define B32_M 2

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

EXL_INLINE uint32_t b32_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Bit i of x as byte i: 0xff when set, else 0. */
EXL_INLINE __m256i bits_to_bytes(uint32_t x)
{
	const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
						2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), spread);

	return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The IQ4 levels as a byte-shuffle table, in both lanes. */
EXL_INLINE __m256i iq4_table(void)
{
	return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)EXL_IQ4NL_HI, (long long)EXL_IQ4NL_LO));
}

/* The fp16 field at byte off of blocks b .. b + 7 as 8 floats. */
EXL_INLINE __m256 b32_half8(const uint8_t *row, int64_t b, const int T, size_t off)
{
	__m128i h = _mm_cvtsi32_si128(b32_u16(b32(row, b, T) + off));

	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 1, T) + off), 1);
	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 2, T) + off), 2);
	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 3, T) + off), 3);
	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 4, T) + off), 4);
	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 5, T) + off), 5);
	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 6, T) + off), 6);
	h = _mm_insert_epi16(h, b32_u16(b32(row, b + 7, T) + off), 7);
	return _mm256_cvtph_ps(h);
}

EXL_INLINE float b32_half(const uint8_t *row, int64_t b, const int T, size_t off)
{
	return exl_f16((uint16_t)b32_u16(b32(row, b, T) + off));
}

/* The levels (0..31 unsigned, or IQ4_NL's signed ones) of blocks b and
 * b + 1 as weights 0..15 of both, then 16..31 of both. */
EXL_INLINE void b32_pair(const uint8_t *row, int64_t b, const int T, __m256i *lo, __m256i *hi)
{
	const uint8_t *p0 = b32(row, b, T), *p1 = b32(row, b + 1, T);
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	__m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)(p1 + b32_qs(T))),
				     _mm_loadu_si128((const __m128i *)(const void *)(p0 + b32_qs(T))));

	*lo = _mm256_and_si256(v, lo4);
	*hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
	if (B32_FIVE(T)) {
		const __m256i m10 = _mm256_set1_epi8(0x10);
		uint32_t h0 = b32_u32(p0 + b32_qh(T)), h1 = b32_u32(p1 + b32_qh(T));

		*lo = _mm256_or_si256(*lo, _mm256_and_si256(bits_to_bytes((h0 & 0xffffu) | h1 << 16), m10));
		*hi = _mm256_or_si256(*hi, _mm256_and_si256(bits_to_bytes(h0 >> 16 | (h1 & 0xffff0000u)), m10));
	}
}

/* The levels of block b in element order (a trailing odd block). */
EXL_INLINE __m256i b32_one(const uint8_t *row, int64_t b, const int T)
{
	const uint8_t *p = b32(row, b, T);
	__m128i q = _mm_loadu_si128((const __m128i *)(const void *)(p + b32_qs(T)));
	__m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));

	if (B32_FIVE(T))
		v = _mm256_or_si256(v, _mm256_and_si256(bits_to_bytes(b32_u32(p + b32_qh(T))),
							_mm256_set1_epi8(0x10)));
	return v;
}

/* levels . x as int32 lanes.  Unsigned levels: maddubs pairs are at most
 * 2 * 31 * 127, two of them fit int16, as do Q5_0's less xo (16 * x). */
EXL_INLINE __m256i b32_dot(__m256i lo, __m256i hi, __m256i xl, __m256i xh, __m256i xo, const int T)
{
	const __m256i ones = _mm256_set1_epi16(1);

	__m256i d = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));

	if (T == EXL_Q5_0)
		d = _mm256_sub_epi16(d, xo);
	return _mm256_madd_epi16(d, ones);
}

/* The same for one block in element order. */
EXL_INLINE __m256i b32_dot_one(__m256i v, __m256i x, const int T)
{
	const __m256i ones = _mm256_set1_epi16(1);

	__m256i d = _mm256_maddubs_epi16(v, x);

	if (T == EXL_Q5_0)
		d = _mm256_sub_epi16(d, _mm256_maddubs_epi16(_mm256_set1_epi8(16), x));
	return _mm256_madd_epi16(d, ones);
}

/* Blocks b, b + 1; their scales are pair p of dws / dxs. */
EXL_INLINE void b32_pair_step(const uint8_t *const *w, const int8_t *const *xq, int64_t b,
			      const __m256 *dws, const __m256 *dxs, int p, const int R, const int C,
			      const int T, size_t pf, __m256 acc[4][4])
{
	__m256i xl[4], xh[4], xo[4];
	__m256 dx[4];

	for (int j = 0; j < C; j++) {
		xl[j] = _mm256_loadu_si256((const __m256i *)(const void *)(xq[j] + 32 * b));
		xh[j] = _mm256_loadu_si256((const __m256i *)(const void *)(xq[j] + 32 * b + 32));
		xo[j] = _mm256_setzero_si256();
		if (T == EXL_Q5_0) /* 16 * x as int16 pair sums */
			xo[j] = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(16), xl[j]),
						 _mm256_maddubs_epi16(_mm256_set1_epi8(16), xh[j]));
		dx[j] = spread_pair(dxs[j], p);
	}
	for (int i = 0; i < R; i++) {
		__m256i lo, hi;
		__m256 dw = spread_pair(dws[i], p);

		if (pf) /* decode-shaped: fetch later rows ahead */
			_mm_prefetch((const char *)b32(w[i], b, T) + pf, _MM_HINT_T0);
		b32_pair(w[i], b, T, &lo, &hi);
		for (int j = 0; j < C; j++) {
			__m256i d = b32_dot(lo, hi, xl[j], xh[j], xo[j], T);

			acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dw, dx[j]), acc[i][j]);
		}
	}
}

EXL_INLINE void tile_b32(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C,
			 const int T)
{
	const uint8_t *w[4];
	const int8_t *xq[4];
	const float *xd[4], *xs[4];
	__m256 acc[4][4];
	int64_t nb = m->cols / 32, b = 0;
	const size_t pf = exl_prefetch_tile(m, R, c);

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
			acc[i][j] = _mm256_setzero_ps();

	for (; b + 8 <= nb; b += 8) {
		__m256 dws[4], dxs[4];

		for (int j = 0; j < C; j++)
			dxs[j] = _mm256_loadu_ps(xd[j] + b);
		for (int i = 0; i < R; i++) {
			dws[i] = b32_half8(w[i], b, T, B32_D);
			if (B32_HAS_MIN(T)) {
				__m256 mw = b32_half8(w[i], b, T, B32_M);

				for (int j = 0; j < C; j++)
					acc[i][j] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xs[j] + b), acc[i][j]);
			}
		}
		for (int p = 0; p < 4; p++)
			b32_pair_step(w, xq, b + 2 * p, dws, dxs, p, R, C, T, pf, acc);
	}
	for (; b + 2 <= nb; b += 2) {
		__m256 dws[4], dxs[4];

		for (int j = 0; j < C; j++)
			dxs[j] = _mm256_setr_ps(xd[j][b], xd[j][b + 1], 0, 0, 0, 0, 0, 0);
		for (int i = 0; i < R; i++) {
			dws[i] = _mm256_setr_ps(b32_half(w[i], b, T, B32_D), b32_half(w[i], b + 1, T, B32_D),
						0, 0, 0, 0, 0, 0);
			if (B32_HAS_MIN(T)) {
				__m256 mw = _mm256_setr_ps(b32_half(w[i], b, T, B32_M),
							   b32_half(w[i], b + 1, T, B32_M), 0, 0, 0, 0, 0, 0);

				for (int j = 0; j < C; j++)
					acc[i][j] = _mm256_fmadd_ps(mw, _mm256_setr_ps(xs[j][b], xs[j][b + 1],
										       0, 0, 0, 0, 0, 0),
								    acc[i][j]);
			}
		}
		b32_pair_step(w, xq, b, dws, dxs, 0, R, C, T, pf, acc);
	}
	if (b < nb) {
		/* the odd last block, in element order */
		for (int i = 0; i < R; i++) {
			__m256i v = b32_one(w[i], b, T);
			float dw = b32_half(w[i], b, T, B32_D);

			for (int j = 0; j < C; j++) {
				__m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq[j] + 32 * b));

				if (B32_HAS_MIN(T))
					acc[i][j] = _mm256_fmadd_ps(
						_mm256_setr_ps(b32_half(w[i], b, T, B32_M), 0, 0, 0, 0, 0, 0, 0),
						_mm256_setr_ps(xs[j][b], 0, 0, 0, 0, 0, 0, 0), acc[i][j]);
				acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(b32_dot_one(v, xv, T)),
							    _mm256_set1_ps(dw * xd[j][b]), acc[i][j]);
			}
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = exl_hsum256(acc[i][j]);
}

#define TILE_Q4_1(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_Q4_1)
#define TILE_Q5_0(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_Q5_0)
#define TILE_Q5_1(m, r, c, R, C) tile_b32(m, r, c, R, C, EXL_Q5_1)

static void mm_q4_1(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q4_1, m, r0, r1, c0, c1, 2, 4);
}

static void mm_q5_0(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q5_0, m, r0, r1, c0, c1, 2, 4);
}

static void mm_q5_1(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(TILE_Q5_1, m, r0, r1, c0, c1, 2, 4);
}

/* IQ4_NL: Q8_0's two paths and float steps over Q4_0's nibble transpose,
 * the levels looked up with a byte shuffle.  x is in act_pairs32's order
 * with sums of x per block as int32 (this set's act_q4_0): block b's
 * weights 0..15 at exl_pairs32_lo(b) and 16..31 16 or 32 bytes on.  With VNNI
 * the 8-row paths multiply the levels + 128 (unsigned, 1..241) and start
 * each dot at -128 * sum(x), as Q8_0's do; without, |level| times x with
 * the level's sign (maddubs would saturate on 241 * 127 * 2).  Either way
 * the int32 dot is exact: the same bits. */

/* The levels of 8 rows' block from their nibbles lv (group k of 4 weights
 * of all 8 rows, q4_0_r8_block's order): g the signed levels, aw what the
 * dot multiplies (see above). */
EXL_INLINE void lut_rows8_levels(__m256i levels, const __m256i lv[8], __m256i g[8], __m256i aw[8])
{
#ifdef EXL_MM_VNNI
	/* the levels + 128 looked up at once; the dot takes no g */
	const __m256i tab = _mm256_xor_si256(levels, _mm256_set1_epi8((char)0x80));

	for (int k = 0; k < 8; k++)
		g[k] = aw[k] = _mm256_shuffle_epi8(tab, lv[k]);
#else
	const __m256i tab = levels;

	for (int k = 0; k < 8; k++) {
		g[k] = _mm256_shuffle_epi8(tab, lv[k]);
		aw[k] = _mm256_sign_epi8(g[k], g[k]);
	}
#endif
}

EXL_INLINE void iq4_nl_rows8_levels(const __m256i lv[8], __m256i g[8], __m256i aw[8])
{
	lut_rows8_levels(iq4_table(), lv, g, aw);
}

/* The 8 rows' levels . x of one block for one vector (iq4_nl_rows8_levels). */
EXL_INLINE __m256i iq4_nl_rows8_dot(const __m256i g[8], const __m256i aw[8], const uint8_t *a, int64_t cols,
				    int64_t b, size_t off, size_t hoff)
{
#ifdef EXL_MM_VNNI
	(void)g;
	return rows8_u4_dot(_mm256_set1_epi32(-128 * act_isum(a, cols)[b]), aw, (const int8_t *)a + off, hoff);
#else
	(void)cols;
	(void)b;
	return rows8_signed_dot(g, aw, (const int8_t *)a + off, hoff);
#endif
}

/* Block b of 8 rows of table levels (IQ4_NL, MXFP4: g and aw from
 * lut_rows8_levels, scales dw) against vectors [c0, c0 + nc): pairs of
 * vectors in one VNNI step where the set has it. */
EXL_INLINE void lut_rows8_cols(const struct exl_mm_ctx *m, __m256 (*acc)[8], int c0, int nc, int64_t b,
			       const __m256i g[8], const __m256i aw[8], __m256 dw, size_t off, size_t hoff)
{
	int j = 0;

#ifdef EXL_MM_VNNI
	for (; j + 2 <= nc; j += 2)
		rows8_u4_step_x2(m, acc + j, c0 + j, b, aw, dw, off, hoff, 128);
#endif
	for (; j < nc; j++) {
		const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;

		rows8_q8x_step(acc[j], iq4_nl_rows8_dot(g, aw, a, m->cols, b, off, hoff), dw, a, m->cols, b);
	}
}

/* Rows [r, r + nr) x vectors [c0, c1) from GGUF rows or, packed, from a
 * group of EXL_LAYOUT_ROWS8 (Q4_0's: repack.h).  Not always_inline
 * (q4_0_rows8_from). */
static void iq4_nl_rows8_from(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1, bool packed)
{
	const block_q4_0 *rw[8]; /* the same bytes as block_iq4_nl */
	const int64_t nb = m->cols / 32;
	const int nc = c1 - c0;
	__m256 acc[64][8];

	_Static_assert(sizeof(block_q4_0) == sizeof(block_iq4_nl), "IQ4_NL blocks are Q4_0's shape");
	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		__m256i lv[8], g[8], aw[8];
		__m256 dw;
		size_t hoff, off = exl_pairs32_lo(b, nb, &hoff);

		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		if (packed)
			q4_0_r8_block(exl_row(m, r), b, lv, &dw);
		else
			q4_0_rows8_block(rw, b, lv, lv + 4, &dw);
		iq4_nl_rows8_levels(lv, g, aw);
		lut_rows8_cols(m, acc, c0, nc, b, g, aw, dw, off, hoff);
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

static void iq4_nl_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	iq4_nl_rows8_from(m, r, nr, c0, c1, false);
}

/* Block b of the repacked group at p for nc vectors into accumulator t
 * (b mod 8): iq4_nl_rows8_from's steps, x's offsets as q4_0_r8_step's. */
EXL_INLINE void iq4_nl_r8_step(const struct exl_mm_ctx *m, const uint8_t *p, const uint8_t *const *a, int nc,
			       int64_t b, __m256 (*acc)[8], int t, bool full)
{
	size_t hoff = 32, off;
	__m256i lv[8], g[8], aw[8];
	__m256 dw;

	if (full)
		off = 32 * (size_t)(b - t) + 64 * (size_t)(t / 2) + 16 * (size_t)(t & 1);
	else
		off = exl_pairs32_lo(b, m->cols / 32, &hoff);
	q4_0_r8_block(p, b, lv, &dw);
	iq4_nl_rows8_levels(lv, g, aw);
	for (int j = 0; j < nc; j++) {
		__m256i d = iq4_nl_rows8_dot(g, aw, a[j], m->cols, b, off, hoff);
		__m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(exl_act_q8_0_d(a[j], m->cols)[b]));

		acc[j][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j][t]);
	}
}

static void iq4_nl_r8_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	iq4_nl_rows8_from(m, r, nr, c0, c1, true);
}

DEFINE_R8_MM(iq4_nl, 32, iq4_nl_r8_rows8, R8_PF_Q4)

/* The signed-level dots of IQ4_NL and MXFP4 (|w| . (x with w's sign)):
 * pp[j][i], the pair of blocks b and b + 1 (levels l and h, nibbles
 * through tab) against vector j's act_pairs32 bytes. */
EXL_INLINE void signed_pair_dots(__m256i tab, __m256i l, __m256i h, const uint8_t *const *a, int nc,
				 int64_t b, __m256i (*pp)[4], int i)
{
	__m256i xl, xh;

	l = _mm256_shuffle_epi8(tab, l);
	h = _mm256_shuffle_epi8(tab, h);
	__m256i al = _mm256_sign_epi8(l, l), ah = _mm256_sign_epi8(h, h);

	for (int j = 0; j < nc; j++) {
		pairs32_x(a[j], b, &xl, &xh);
		pp[j][i] = dot4_acc(dot4_acc(_mm256_setzero_si256(), al, _mm256_sign_epi8(xl, l)),
				    ah, _mm256_sign_epi8(xh, h));
	}
}

/* The same for one block b of levels v (already through the table): p[j][t]. */
EXL_INLINE void signed_block_dots(__m256i v, const uint8_t *const *a, int nc, int64_t b,
				  int64_t nb, __m256i (*p)[8], int t)
{
	__m256i av = _mm256_sign_epi8(v, v);

	for (int j = 0; j < nc; j++)
		p[j][t] = dot4_acc(_mm256_setzero_si256(), av, _mm256_sign_epi8(pairs32_block(a[j], b, nb), v));
}

/* q8_0_group8 for IQ4_NL. */
EXL_INLINE void iq4_nl_group8(const block_iq4_nl *w, int64_t b, int k, const uint8_t *const *a,
			      int nc, int64_t cols, size_t pf, __m256 *acc)
{
	const __m256i tab = iq4_table();
	const block_q4_0 *w4 = (const block_q4_0 *)(const void *)w; /* Q4_0's shape */
	const int64_t nb = cols / 32;
	__m256i p[4][8];
	const uint8_t *rb[8];

	q4_group8_start(w4, b, k, pf, rb);
	if (k == 8) {
		/* 4 pairs of blocks, each pair's x contiguous in act_pairs32's
		 * order: a vector holds both blocks' halves, lanes 0-3 block
		 * b + 2i's partial dots and 4-7 block b + 2i + 1's */
		__m256i pp[4][4];

		for (int i = 0; i < 4; i++) {
			__m256i l, h;

			q4_pair_nibbles(w4, b + 2 * i, &l, &h);
			signed_pair_dots(tab, l, h, a, nc, b + 2 * i, pp, i);
		}
		__m256 dw = group8_d_q4(w4 + b);

		for (int j = 0; j < nc; j++)
			acc[j] = group_step(pairs_to_lanes(pp[j]),
					    _mm256_mul_ps(dw, group_dx(exl_act_q8_0_d(a[j], cols), b, 8)), acc[j], 8);
		return;
	}
	for (int t = 0; t < 8; t++) {
		if (t >= k) {
			for (int j = 0; j < nc; j++)
				p[j][t] = _mm256_setzero_si256();
			continue;
		}
		signed_block_dots(_mm256_shuffle_epi8(tab, q4_levels(&w4[b + t])), a, nc, b + t, nb, p,
				  t);
	}
	__m256 dw = rows8_d(rb);

	for (int j = 0; j < nc; j++)
		acc[j] = group_step(hsum8x8_epi32(p[j]),
				    _mm256_mul_ps(dw, group_dx(exl_act_q8_0_d(a[j], cols), b, k)), acc[j], k);
}

DEFINE_ROWS8_MM(iq4_nl, block_iq4_nl)

/* ---- MXFP4: IQ4_NL's kernels over 17-byte blocks ----
 *
 * The nibbles of IQ4_NL (Q4_0's order) with MXFP4's levels (0, +-1, +-2,
 * +-3, +-4, +-6, +-8, +-12) by the same byte shuffle, so the same act
 * (act_iq4_nl, this set's act_q4_0) and the same two paths and float steps
 * as IQ4_NL's GGUF rows: 8 rows in the lanes of a vector for n > 4, 8
 * blocks of one row reduced into the lanes of a vector for decode.  The
 * scale is 2^(e - 128) (exl_e8m0_half) in place of an fp16 d.  A block is
 * 17 bytes, e then qs[16]: blocks and rows start at any byte, so every
 * load is unaligned and none reads past the bytes of the blocks it takes
 * (a row's last block may end its mapping). */

#define MXFP4_BYTES 17

/* The level table as a byte shuffle, in both lanes. */
EXL_INLINE __m256i mxfp4_table(void)
{
	return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)EXL_MXFP4_HI, (long long)EXL_MXFP4_LO));
}

EXL_INLINE const uint8_t *mxfp4_block(const uint8_t *row, int64_t b)
{
	return row + MXFP4_BYTES * (size_t)b;
}

/* 8 exponents e (int32 lanes, 0..255) as their scales 2^(e - 128), the
 * bits of exl_e8m0_half: e >= 2 the normal with exponent field e - 1, e 0
 * and 1 the subnormals 0x00200000 << e. */
EXL_INLINE __m256 e8m0_half8(__m256i e)
{
	__m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
	__m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);

	return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

/* The exponents of 8 consecutive blocks from p (block t's at byte 17t,
 * byte t of the 16-byte chunk t) as int32 lanes: the diagonal of 8 chunks,
 * in word blends as group8_d_q4 takes its words (low lane: chunks 0, 2, 4,
 * 6, bytes 0, 2, 4, 6; high lane: chunks 1, 3, 5, 7, bytes 1, 3, 5, 7),
 * then even bytes from the low lane and odd ones from the high.  Reads
 * bytes 0..127 of the 8 blocks' 136. */
EXL_INLINE __m256i group8_e_mxfp4(const uint8_t *p)
{
	const __m256i *v = (const __m256i *)(const void *)p;
	__m256i y = _mm256_loadu_si256(v);			     /* word 0 of chunks 0 | 1 */

	y = _mm256_blend_epi16(y, _mm256_loadu_si256(v + 1), 0x02); /* word 1 of chunks 2 | 3 */
	y = _mm256_blend_epi16(y, _mm256_loadu_si256(v + 2), 0x04); /* word 2 of 4 | 5 */
	y = _mm256_blend_epi16(y, _mm256_loadu_si256(v + 3), 0x08); /* word 3 of 6 | 7 */
	return _mm256_cvtepu8_epi32(_mm_blendv_epi8(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1),
						    _mm_set1_epi16((short)0xff00)));
}

/* Those of blocks at rb[0..7] (any 8 blocks). */
EXL_INLINE __m256i rows8_e_mxfp4(const uint8_t *const *rb)
{
	return _mm256_setr_epi32(rb[0][0], rb[1][0], rb[2][0], rb[3][0], rb[4][0], rb[5][0], rb[6][0], rb[7][0]);
}

/* Block b of 8 rows: nib16_rows8 of their qs (Q4_0's order, as
 * q4_0_rows8_block gives them), and the rows' scales. */
EXL_INLINE void mxfp4_rows8_block(const uint8_t *const *rw, int64_t b, __m256i lo[4], __m256i hi[4], __m256 *dw)
{
	const uint8_t *q[8], *rb[8];

	for (int i = 0; i < 8; i++) {
		rb[i] = mxfp4_block(rw[i], b);
		q[i] = rb[i] + 1;
	}
	nib16_rows8(q, lo, hi);
	*dw = e8m0_half8(rows8_e_mxfp4(rb));
}

/* Rows [r, r + nr) (nr <= 8) x vectors [c0, c1) (at most COL_CHUNK, 64):
 * iq4_nl_rows8_from's steps.  Not always_inline (q4_0_rows8_from). */
static void mxfp4_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const uint8_t *rw[8];
	const int64_t nb = m->cols / 32;
	const int nc = c1 - c0;
	__m256 acc[64][8];

	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		__m256i lv[8], g[8], aw[8];
		__m256 dw;
		size_t hoff, off = exl_pairs32_lo(b, nb, &hoff);

		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		mxfp4_rows8_block(rw, b, lv, lv + 4, &dw);
		lut_rows8_levels(mxfp4_table(), lv, g, aw);
		lut_rows8_cols(m, acc, c0, nc, b, g, aw, dw, off, hoff);
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

/* Blocks b and b + 1 of a row (one in each lane): *l their weights 0..15,
 * *h 16..31, as nibble values (q4_pair_nibbles). */
EXL_INLINE void mxfp4_pair_nibbles(const uint8_t *w, int64_t b, __m256i *l, __m256i *h)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	const uint8_t *q = mxfp4_block(w, b) + 1;
	__m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)(q + MXFP4_BYTES)),
				     _mm_loadu_si128((const __m128i *)(const void *)q));

	*l = _mm256_and_si256(v, lo4);
	*h = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
}

/* Block b's 32 nibbles in weight order (q4_levels). */
EXL_INLINE __m256i mxfp4_levels(const uint8_t *w, int64_t b)
{
	__m128i q = _mm_loadu_si128((const __m128i *)(const void *)(mxfp4_block(w, b) + 1));

	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* iq4_nl_group8 for MXFP4: the same dots and float steps. */
EXL_INLINE void mxfp4_group8(const block_mxfp4 *wb, int64_t b, int k, const uint8_t *const *a, int nc,
			     int64_t cols, size_t pf, __m256 *acc)
{
	const __m256i tab = mxfp4_table();
	const uint8_t *w = (const uint8_t *)wb;
	const int64_t nb = cols / 32;
	__m256i p[4][8];

	if (pf) { /* the 136 bytes of 8 blocks: 3 lines, as q4_group8_start's 144 */
		_mm_prefetch((const char *)mxfp4_block(w, b) + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)mxfp4_block(w, b) + pf + 64, _MM_HINT_T0);
		_mm_prefetch((const char *)mxfp4_block(w, b) + pf + 128, _MM_HINT_T0);
	}
	if (k == 8) {
		/* 4 pairs of blocks (iq4_nl_group8) */
		__m256i pp[4][4];

		for (int i = 0; i < 4; i++) {
			__m256i l, h;

			mxfp4_pair_nibbles(w, b + 2 * i, &l, &h);
			signed_pair_dots(tab, l, h, a, nc, b + 2 * i, pp, i);
		}
		__m256 dw = e8m0_half8(group8_e_mxfp4(mxfp4_block(w, b)));

		for (int j = 0; j < nc; j++)
			acc[j] = group_step(pairs_to_lanes(pp[j]),
					    _mm256_mul_ps(dw, group_dx(exl_act_q8_0_d(a[j], cols), b, 8)), acc[j], 8);
		return;
	}
	const uint8_t *rb[8];

	for (int t = 0; t < 8; t++) {
		rb[t] = mxfp4_block(w, b + (t < k ? t : 0));
		if (t >= k) {
			for (int j = 0; j < nc; j++)
				p[j][t] = _mm256_setzero_si256();
			continue;
		}
		signed_block_dots(_mm256_shuffle_epi8(tab, mxfp4_levels(w, b + t)), a, nc, b + t, nb, p,
				  t);
	}
	__m256 dw = e8m0_half8(rows8_e_mxfp4(rb));

	for (int j = 0; j < nc; j++)
		acc[j] = group_step(hsum8x8_epi32(p[j]),
				    _mm256_mul_ps(dw, group_dx(exl_act_q8_0_d(a[j], cols), b, k)), acc[j], k);
}

DEFINE_ROWS8_MM(mxfp4, block_mxfp4)

/* ---- K-quants x Q8_K activations ---- */

/* Q4_K.  Every path gives output r, vector c the same float steps, Q8_0's
 * with super-blocks for blocks and a min term: I_b = sum over sub-blocks of
 * scale * (levels . x) and M_b = sum of min * (sum of x), both exact in
 * int32 (at most 256 * 63 * 15 * 127 and 8 * 63 * 32 * 127),
 * acc[b % 8] = fnmadd((float)M_b, dmin_b * d_x,b, fma((float)I_b,
 * d_b * d_x,b, acc[b % 8])), output the tree of 8.
 *  - n > 4: 8 rows in the lanes of a vector.  Per 64 weights, the 8 rows'
 *    32 bytes of qs go through Q8_0's 8 x 8 dword transpose; masked and
 *    shifted, those are two sub-blocks' levels (0..15) as 8 rows x 4 bytes,
 *    and one maddubs against 4 bytes of x broadcast serves 8 rows.  Levels
 *    are unsigned, so no sign step: a sub-block's 8 maddubs add in int16
 *    (at most 8 * 2 * 15 * 127 = 30480) and one madd applies each row's
 *    scale.
 *  - n <= 4: one row at a time; per super-block the int32 partial sums of
 *    its 4 pairs of sub-blocks and of its mins, 8 super-blocks reduced
 *    into the lanes of one vector each for one float step. */

/* Rows [r, r + nr) (nr <= 8) x vectors [c0, c1) (at most COL_CHUNK, 64). */
static void q4_K_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const block_q4_K *rw[8];
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	__m256 acc[64][8];
	__m256i isum[64];

	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		/* [sub-block][row]: scale and min in both int16 halves */
		uint32_t sv[8][8], mv[8][8];
		const uint8_t *rb[8], *rm[8];

		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		for (int i = 0; i < 8; i++) {
			uint32_t sc[2], mn[2];
			uint8_t s8[8], m8[8];

			rb[i] = (const uint8_t *)(rw[i] + b);
			rm[i] = rb[i] + offsetof(block_q4_K, dmin);
			exl_q4_K_scales(rw[i][b].scales, sc, mn);
			memcpy(s8, sc, 8);
			memcpy(m8, mn, 8);
			for (int sb = 0; sb < 8; sb++) {
				sv[sb][i] = s8[sb] * 0x10001u;
				mv[sb][i] = m8[sb] * 0x10001u;
			}
		}
		for (int j = 0; j < nc; j++)
			isum[j] = _mm256_setzero_si256();
		for (int k = 0; k < 4; k++) {
			__m256i g[8], lv[8];
			const uint8_t *q[8];

			for (int i = 0; i < 8; i++)
				q[i] = rw[i][b].qs + 32 * k;
			dwords_rows8(q, g);
			for (int h = 0; h < 2; h++) {
				const __m256i mul = _mm256_loadu_si256((const __m256i *)(const void *)sv[2 * k + h]);

				for (int t = 0; t < 8; t++)
					lv[t] = _mm256_and_si256(h ? _mm256_srli_epi16(g[t], 4) : g[t], lo4);
				const size_t xo = (size_t)(256 * b + 64 * k + 32 * h);
				int j = 0;

				for (; j + 2 <= nc; j += 2) {
					const int8_t *x[2];
					__m256i d[2];

					for (int v = 0; v < 2; v++)
						x[v] = (const int8_t *)(m->act + (size_t)(c0 + j + v) * m->act_stride) + xo;
					rows8_u4_dot_mul_x2(d, lv, x, 16, mul);
					for (int v = 0; v < 2; v++)
						isum[j + v] = _mm256_add_epi32(isum[j + v], d[v]);
				}
				for (; j < nc; j++) {
					const int8_t *x = (const int8_t *)(m->act + (size_t)(c0 + j) * m->act_stride);

					isum[j] = _mm256_add_epi32(isum[j], rows8_u4_dot_mul(lv, x + xo, 16, mul));
				}
			}
		}
		__m256 dw = rows8_d(rb), dm = rows8_d(rm);

		for (int j = 0; j < nc; j++) {
			const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;
			const int16_t *bs = exl_act_q8_K_bsums(a, m->cols) + 16 * b;
			const float dx = exl_act_q8_K_d(a, m->cols)[b];
			__m256i ms = _mm256_setzero_si256();

			for (int sb = 0; sb < 8; sb++) {
				/* both halves of x's sum over the sub-block, as int16 (<= 4064) */
				const int32_t xs = (int32_t)bs[2 * sb] + bs[2 * sb + 1];

				ms = _mm256_add_epi32(ms, _mm256_madd_epi16(
					_mm256_loadu_si256((const __m256i *)(const void *)mv[sb]),
					_mm256_set1_epi32(xs & 0xffff)));
			}
			acc[j][b & 7] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, _mm256_set1_ps(dx)),
					_mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dw, _mm256_set1_ps(dx)),
							acc[j][b & 7]));
		}
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

/* Super-block blk (Q4_K's, or with q5 Q5_K's) x the nc (<= 4) vectors at
 * a[], its b-th: *s[j] the int32 partial sums of scale * (levels . x),
 * *sm[j] of min * (sum of x).  Q5_K's levels (0..31: its fifth bit, bit 2kk
 * or 2kk + 1 of qh[l], in bit 4) keep each maddubs pair within int16, and
 * every maddubs goes to int32 at once. */
EXL_INLINE void k4_sblock(const uint8_t *bp, const bool q5, int64_t b, const uint8_t *const *a, int nc,
			  int64_t cols, size_t pf, __m256i *s, __m256i *sm)
{
	const block_q4_K *blk = (const block_q4_K *)(const void *)bp; /* d, dmin, scales: Q5_K's too */
	const uint8_t *qs = q5 ? ((const block_q5_K *)(const void *)bp)->qs : blk->qs;
	const __m256i lo4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
	const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(const void *)((const block_q5_K *)(const void *)bp)->qh)
			      : _mm256_setzero_si256();
	uint32_t sc[2], mn[2];

	if (pf)
		for (int o = 0; o < (int)(q5 ? sizeof(block_q5_K) : sizeof(block_q4_K)); o += 64)
			_mm_prefetch((const char *)bp + pf + o, _MM_HINT_T0);
	exl_q4_K_scales(blk->scales, sc, mn);
	/* the 8 scales as int16 in both halves, each broadcast by a shuffle
	 * below (a set1 from a byte took 3 operations) */
	const __m256i s16 = _mm256_broadcastsi128_si256(
		_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc[1], (int)sc[0])));
	/* each min twice, for x's two sums of 16 of its sub-block */
	const __m128i m8 = _mm_set_epi32(0, 0, (int)mn[1], (int)mn[0]);
	const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));

	for (int j = 0; j < nc; j++) {
		const __m256i bs = _mm256_loadu_si256(
			(const __m256i *)(const void *)(exl_act_q8_K_bsums(a[j], cols) + 16 * b));

		sm[j] = _mm256_madd_epi16(mins, bs);
		s[j] = _mm256_setzero_si256();
	}
	for (int kk = 0; kk < 4; kk++) {
		__m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * kk));
		__m256i ql = _mm256_and_si256(q, lo4);
		__m256i qh = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);

		if (q5) { /* bits 2kk and 2kk + 1 of each qh byte to bit 4 */
			const __m256i h = _mm256_srli_epi16(hb, 2 * kk);

			ql = _mm256_or_si256(ql, _mm256_and_si256(_mm256_slli_epi16(h, 4), b4));
			qh = _mm256_or_si256(qh, _mm256_and_si256(_mm256_slli_epi16(h, 3), b4));
		}
		__m256i sl = _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * 2 * kk)));
		__m256i sh = _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * kk + 1))));

		for (int j = 0; j < nc; j++) {
			const int8_t *xb = (const int8_t *)a[j] + 256 * b + 64 * kk;
			__m256i xl = _mm256_loadu_si256((const __m256i *)(const void *)xb);
			__m256i xh = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));

			s[j] = madd_acc(madd_acc(s[j], _mm256_maddubs_epi16(ql, xl), sl), _mm256_maddubs_epi16(qh, xh), sh);
		}
	}
}

/* d and dmin (the dword at offset 0) of 8 consecutive Q4_K (q5: Q5_K)
 * blocks, with one gather: 8 word inserts each took a tenth of the
 * decode's time. */
EXL_INLINE void group8_d_dmin_k(const uint8_t *w, const bool q5, __m256 *d, __m256 *dmin)
{
	const int q = (int)((q5 ? sizeof(block_q5_K) : sizeof(block_q4_K)) / 4);
	const __m256i g = _mm256_i32gather_epi32((const int *)(const void *)w,
						 _mm256_setr_epi32(0, q, 2 * q, 3 * q, 4 * q, 5 * q, 6 * q, 7 * q), 4);
	/* [d0..3 dmin0..3 | d4..7 dmin4..7], then [d0..7 | dmin0..7] */
	const __m256i pk = _mm256_permute4x64_epi64(
		_mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(g, 16)), 0xd8);

	*d = _mm256_cvtph_ps(_mm256_castsi256_si128(pk));
	*dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(pk, 1));
}

/* Super-blocks b..b+k-1 (k <= 8, b a multiple of 8) of a row x the nc
 * (<= 4) vectors at a[]: lane m of acc[j] is vector j's accumulator
 * (b + m) mod 8. */
EXL_INLINE void k4_group8(const uint8_t *w, const bool q5, int64_t b, int k, const uint8_t *const *a, int nc,
			  int64_t cols, size_t pf, __m256 *acc)
{
	const size_t bsize = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);

	__m256i p[4][8], pm[4][8];
	const uint8_t *rb[8], *rm[8];

	for (int t = 0; t < 8; t++) {
		__m256i s[4], sm[4];

		rb[t] = w + bsize * (size_t)(b + (t < k ? t : 0));
		rm[t] = rb[t] + offsetof(block_q4_K, dmin);
		if (t < k) {
			k4_sblock(w + bsize * (size_t)(b + t), q5, b + t, a, nc, cols, pf, s, sm);
		} else {
			for (int j = 0; j < nc; j++)
				s[j] = sm[j] = _mm256_setzero_si256();
		}
		for (int j = 0; j < nc; j++) {
			p[j][t] = s[j];
			pm[j][t] = sm[j];
		}
	}
	__m256 dw, dm;

	if (k == 8) {
		group8_d_dmin_k(w + bsize * (size_t)b, q5, &dw, &dm);
	} else {
		dw = rows8_d(rb);
		dm = rows8_d(rm);
	}

	for (int j = 0; j < nc; j++) {
		__m256 dx = group_dx(exl_act_q8_K_d(a[j], cols), b, k);

		acc[j] = group_step_min(hsum8x8_unpack_epi32(p[j]), _mm256_mul_ps(dw, dx),
					hsum8x8_unpack_epi32(pm[j]), _mm256_mul_ps(dm, dx), acc[j], k);
	}
}

EXL_INLINE void q4_K_group8(const block_q4_K *w, int64_t b, int k, const uint8_t *const *a, int nc,
			    int64_t cols, size_t pf, __m256 *acc)
{
	k4_group8((const uint8_t *)w, false, b, k, a, nc, cols, pf, acc);
}

DEFINE_ROWS8_MM_QK(q4_K, block_q4_K, 256)

/* ---- Q4_K repacked in groups of 8 rows (EXL_LAYOUT_ROWS8, repack.h) ----
 *
 * q4_K_rows8's steps for every n, from a layout where the 8 rows' scales
 * and mins unpack as 8 lanes at once (12 operations a super-block, where
 * q4_K_rows8 takes 8 scalar unpacks and 128 stores) and each 32-byte load
 * is 4 weights of a sub-block of all 8 rows (no transpose).  Decode, one
 * row at a time from GGUF rows, spent most of its operations on the
 * scales and on horizontal sums per super-block. */

/* The shuffle that puts byte j (0..3) of each dword lane, zero-extended,
 * into both int16 halves of the lane: ctl[j]. */
EXL_INLINE void dword_byte_pair_ctl(__m256i ctl[4])
{
	const __m256i at = _mm256_setr_epi32(0, 0x00040004, 0x00080008, 0x000c000c, 0, 0x00040004, 0x00080008,
					     0x000c000c);

	for (int j = 0; j < 4; j++)
		ctl[j] = _mm256_add_epi32(_mm256_set1_epi32((int)(0x80008000u | (uint32_t)j << 16 | (uint32_t)j)), at);
}

/* The scales (sc[0]: sub-blocks 0-3, sc[1]: 4-7; byte s % 4 of lane i is
 * row i's) and mins (mn[]) of the 8 rows: exl_q4_K_scales on 8 lanes. */
EXL_INLINE void q4_K_r8_scales(const uint8_t *u, __m256i sc[2], __m256i mn[2])
{
	const __m256i u0 = _mm256_loadu_si256((const __m256i *)(const void *)u);
	const __m256i u1 = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32));
	const __m256i u2 = _mm256_loadu_si256((const __m256i *)(const void *)(u + 64));
	const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), m4 = _mm256_set1_epi32(0x0f0f0f0f);
	const __m256i m2 = _mm256_set1_epi32(0x03030303);

	sc[0] = _mm256_and_si256(u0, m6);
	mn[0] = _mm256_and_si256(u1, m6);
	sc[1] = _mm256_or_si256(_mm256_and_si256(u2, m4),
				_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), m2), 4));
	mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4),
				_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), m2), 4));
}

/* The start of super-block b of a group laid out at q (Q4_K's repacked
 * groups, Q5_K's stack buffer) for the nc vectors at a[]: the 8 rows'
 * scales (sc[], q4_K_r8_scales) and shuffles (ctl[]), msum[j] the rows'
 * sum of min * (sum of x), isum[j] zeroed. */
EXL_INLINE void k_r8_start(const uint8_t *q, int64_t b, const uint8_t *const *a, int nc, int64_t cols,
			   __m256i sc[2], __m256i ctl[4], __m256i *isum, __m256i *msum)
{
	__m256i mn[2];

	dword_byte_pair_ctl(ctl);
	q4_K_r8_scales(q + 32, sc, mn);
	for (int j = 0; j < nc; j++) {
		/* min * (both halves of x's sum over the sub-block, int16 pairs) */
		const int16_t *bs = exl_act_q8_K_bsums(a[j], cols) + 16 * b;
		__m256i ms = _mm256_setzero_si256();

		for (int sb = 0; sb < 8; sb++)
			ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_shuffle_epi8(mn[sb >> 2], ctl[sb & 3]),
								    bcast_i32((const int8_t *)(const void *)(bs + 2 * sb))));
		msum[j] = ms;
		isum[j] = _mm256_setzero_si256();
	}
}

/* Super-block b of the group (q: its 1152 bytes) x the nc vectors at a[]:
 * isum[j] the 8 rows' sum of scale * (levels . x), msum[j] of min * (sum of
 * x), exact in int32 as in q4_K_rows8. */
EXL_INLINE void q4_K_r8_sblock(const uint8_t *q, int64_t b, const uint8_t *const *a, int nc, int64_t cols,
			       __m256i *isum, __m256i *msum)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	__m256i sc[2], ctl[4];

	k_r8_start(q, b, a, nc, cols, sc, ctl, isum, msum);
	for (int c = 0; c < 4; c++) {
		__m256i v[8];

		for (int k = 0; k < 8; k++)
			v[k] = _mm256_loadu_si256((const __m256i *)(const void *)(q + 128 + 256 * c + 32 * k));
		for (int h = 0; h < 2; h++) {
			const int sb = 2 * c + h;
			const __m256i mul = _mm256_shuffle_epi8(sc[sb >> 2], ctl[sb & 3]);
			const size_t xo = 256 * (size_t)b + 32 * (size_t)sb;
			__m256i lv[8];
			int j = 0;

			for (int k = 0; k < 8; k++)
				lv[k] = _mm256_and_si256(h ? _mm256_srli_epi16(v[k], 4) : v[k], lo4);
			for (; j + 2 <= nc; j += 2) {
				const int8_t *x[2] = { (const int8_t *)a[j] + xo, (const int8_t *)a[j + 1] + xo };
				__m256i d[2];

				rows8_u4_dot_mul_x2(d, lv, x, 16, mul);
				isum[j] = _mm256_add_epi32(isum[j], d[0]);
				isum[j + 1] = _mm256_add_epi32(isum[j + 1], d[1]);
			}
			for (; j < nc; j++)
				isum[j] = _mm256_add_epi32(isum[j], rows8_u4_dot_mul(lv, (const int8_t *)a[j] + xo, 16, mul));
		}
	}
}

/* q4_K_rows8's float step of super-block b (q) for one vector. */
EXL_INLINE __m256 q4_K_r8_fstep(const uint8_t *q, const uint8_t *a, int64_t cols, int64_t b, __m256i is, __m256i ms,
				__m256 acc)
{
	const __m256 dx = _mm256_set1_ps(exl_act_q8_K_d(a, cols)[b]);
	const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)q));
	const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(q + 16)));

	return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, dx),
				_mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, dx), acc));
}

/* Rows [r, r + nr) x vectors [c0, c1) (at most COL_CHUNK), r a multiple of 8. */
static void q4_K_r8_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const uint8_t *p = exl_row(m, r);
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	const uint8_t *a[64];
	__m256 acc[64][8];
	__m256i isum[64], msum[64];

	for (int j = 0; j < nc; j++)
		a[j] = m->act + (size_t)(c0 + j) * m->act_stride;
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *q = p + 1152 * (size_t)b;

		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		q4_K_r8_sblock(q, b, a, nc, m->cols, isum, msum);
		for (int j = 0; j < nc; j++)
			acc[j][b & 7] = q4_K_r8_fstep(q, a[j], m->cols, b, isum[j], msum[j], acc[j][b & 7]);
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

/* Super-block b for nc (<= 4) vectors, into accumulator t (b mod 8). */
EXL_INLINE void q4_K_r8_step(const struct exl_mm_ctx *m, const uint8_t *p, const uint8_t *const *a, int nc,
			     int64_t b, __m256 (*acc)[8], int t, bool full)
{
	const uint8_t *q = p + 1152 * (size_t)b;
	__m256i is[4], ms[4];

	(void)full;

	q4_K_r8_sblock(q, b, a, nc, m->cols, is, ms);
	for (int j = 0; j < nc; j++)
		acc[j][t] = q4_K_r8_fstep(q, a[j], m->cols, b, is[j], ms[j], acc[j][t]);
}

DEFINE_R8_MM(q4_K, 256, q4_K_r8_rows8, R8_PF_Q4_K)

/* ---- Q5_K: Q4_K's steps with a fifth bit ----
 *
 * Every path gives Q4_K's float steps (I_b and M_b exact in int32: levels
 * 0..31, at most 256 * 63 * 31 * 127).  Decode (n <= 4) is Q4_K's, one row
 * at a time (k4_group8).  n > 4 runs 8 rows in the lanes of a vector:
 * each super-block of the 8 rows is first laid out in a buffer on the
 * stack as Q4_K's repacked groups are (repack.h), with the 8 rows' qh, 4
 * bytes at a time, between the scales and qs (Q8_0's dword transpose, once
 * per 64 vectors), and q5_K_rows8_sblock runs Q4_K's repacked steps on it
 * with the fifth bits ORed in: bit s of qh[l] is weight l of sub-block s
 * (s = 2c + h: chunk c's low or high nibbles), and goes to bit 4.
 * Repacking Q5_K at load as Q4_K was tried: decode read no faster than
 * from GGUF rows (Zen 4, exld run, 33.2 and 33.2 tok/s) and prefill the
 * same as from this buffer (136 against 136-140 tok/s), so the weights
 * stay in the file. */

#define Q5_K_GROUP 1408 /* 8 x 176: d[8], dmin[8], scales, qh, qs */

/* The 8 rows' super-block b laid out in buf as above. */
EXL_INLINE void q5_K_rows8_gather(const block_q5_K *const *rw, int64_t b, uint8_t *buf)
{
	const uint8_t *q[8];
	__m256i g[8];

	for (int i = 0; i < 8; i++) {
		const block_q5_K *w = rw[i] + b;

		memcpy(buf + 2 * i, &w->d, 2);
		memcpy(buf + 16 + 2 * i, &w->dmin, 2);
		for (int u = 0; u < 3; u++)
			memcpy(buf + 32 + 32 * u + 4 * i, w->scales + 4 * u, 4);
	}
	for (int c = 0; c < 5; c++) { /* qh, then 4 chunks of qs */
		for (int i = 0; i < 8; i++)
			q[i] = c ? rw[i][b].qs + 32 * (c - 1) : rw[i][b].qh;
		dwords_rows8(q, g);
		for (int k = 0; k < 8; k++)
			_mm256_storeu_si256((__m256i *)(void *)(buf + 128 + 256 * c + 32 * k), g[k]);
	}
}

/* The 8 rows' levels (0..31) . x of one sub-block, times lane i's int16 in
 * both halves of mul.  Without VNNI maddubs pairs reach 2 * 31 * 127, so
 * they go to int32 4 at a time (rows8_u4_dot_mul adds 8 in int16). */
EXL_INLINE __m256i rows8_u5_dot_mul(const __m256i lv[8], const int8_t *x, __m256i mul)
{
#ifdef EXL_MM_VNNI
	return rows8_u4_dot_mul(lv, x, 16, mul);
#else
	__m256i s0 = _mm256_maddubs_epi16(lv[0], bcast_i32(x));
	__m256i s1 = _mm256_maddubs_epi16(lv[4], bcast_i32(x + 16));

	for (int k = 1; k < 4; k++) {
		s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(lv[k], bcast_i32(x + 4 * k)));
		s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(lv[k + 4], bcast_i32(x + 16 + 4 * k)));
	}
	return _mm256_add_epi32(_mm256_madd_epi16(s0, mul), _mm256_madd_epi16(s1, mul));
#endif
}

/* Super-block b of 8 rows laid out at q (q5_K_rows8_gather) x the nc
 * vectors at a[]: isum[j] and msum[j] as q4_K_r8_sblock's. */
EXL_INLINE void q5_K_rows8_sblock(const uint8_t *q, int64_t b, const uint8_t *const *a, int nc, int64_t cols,
			       __m256i *isum, __m256i *msum)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
	__m256i sc[2], ctl[4];

	k_r8_start(q, b, a, nc, cols, sc, ctl, isum, msum);
	for (int c = 0; c < 4; c++) {
		for (int h = 0; h < 2; h++) {
			const int sb = 2 * c + h;
			const __m256i mul = _mm256_shuffle_epi8(sc[sb >> 2], ctl[sb & 3]);
			const size_t xo = 256 * (size_t)b + 32 * (size_t)sb;
			__m256i lv[8];

			for (int k = 0; k < 8; k++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 384 + 256 * c + 32 * k));
				__m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(q + 128 + 32 * k));
				/* bit sb of each qh byte to bit 4 (epi16 shifts: the bits
				 * that cross bytes are masked off) */
				__m256i fifth = sb <= 4 ? _mm256_slli_epi16(hb, 4 - sb) : _mm256_srli_epi16(hb, sb - 4);

				lv[k] = _mm256_or_si256(_mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, lo4),
							_mm256_and_si256(fifth, b4));
			}
			for (int j = 0; j < nc; j++)
				isum[j] = _mm256_add_epi32(isum[j], rows8_u5_dot_mul(lv, (const int8_t *)a[j] + xo, mul));
		}
	}
}

/* Rows [r, r + nr) (nr <= 8) x vectors [c0, c1) (at most COL_CHUNK, 64). */
static void q5_K_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const block_q5_K *rw[8];
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	const uint8_t *a[64];
	_Alignas(64) uint8_t buf[Q5_K_GROUP];
	__m256 acc[64][8];
	__m256i isum[64], msum[64];

	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	for (int j = 0; j < nc; j++)
		a[j] = m->act + (size_t)(c0 + j) * m->act_stride;
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		q5_K_rows8_gather(rw, b, buf);
		q5_K_rows8_sblock(buf, b, a, nc, m->cols, isum, msum);
		for (int j = 0; j < nc; j++)
			acc[j][b & 7] = q4_K_r8_fstep(buf, a[j], m->cols, b, isum[j], msum[j], acc[j][b & 7]);
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

EXL_INLINE void q5_K_group8(const block_q5_K *w, int64_t b, int k, const uint8_t *const *a, int nc,
			    int64_t cols, size_t pf, __m256 *acc)
{
	k4_group8((const uint8_t *)w, true, b, k, a, nc, cols, pf, acc);
}

DEFINE_ROWS8_MM_QK(q5_K, block_q5_K, 256)

EXL_INLINE __m256i scales2(int8_t a, int8_t b)
{
	return _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
}

EXL_INLINE void tile_q6_K(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C)
{
	const block_q6_K *w[2];
	const int8_t *xq[4];
	const float *xd[4];
	const int16_t *xs[4];
	__m256 acc[2][4];
	int64_t nb = m->cols / 256;
	const size_t pf = exl_prefetch_tile(m, R, c);
	const __m256i lo4 = _mm256_set1_epi8(0x0f);
	const __m256i m3 = _mm256_set1_epi8(3);

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
			acc[i][j] = _mm256_setzero_ps();

	for (int64_t b = 0; b < nb; b++) {
		__m256i isum[2][4];

		for (int i = 0; i < R; i++) {
			if (pf) { /* decode-shaped: fetch later rows ahead */
				const char *p = (const char *)(w[i] + b) + pf;
				_mm_prefetch(p, _MM_HINT_T0);
				_mm_prefetch(p + 64, _MM_HINT_T0);
				_mm_prefetch(p + 128, _MM_HINT_T0);
				_mm_prefetch(p + 192, _MM_HINT_T0);
			}
			for (int j = 0; j < C; j++)
				isum[i][j] = _mm256_setzero_si256();
		}
		for (int h = 0; h < 2; h++) {
			__m256i xv[4][4];

			for (int j = 0; j < C; j++)
				for (int t = 0; t < 4; t++)
					xv[j][t] = _mm256_loadu_si256((const __m256i *)(const void *)(
						xq[j] + 256 * b + 128 * h + 32 * t));
			for (int i = 0; i < R; i++) {
				const uint8_t *ql = w[i][b].ql + 64 * h;
				const int8_t *s = w[i][b].scales + 8 * h;
				__m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)ql);
				__m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
				__m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(w[i][b].qh + 32 * h));
				__m256i q[4];

				q[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4),
						       _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
				q[1] = _mm256_or_si256(_mm256_and_si256(l1, lo4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
				q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
				q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
				for (int t = 0; t < 4; t++) {
					__m256i sv = scales2(s[2 * t], s[2 * t + 1]);

					for (int j = 0; j < C; j++)
						isum[i][j] = madd_acc(isum[i][j], _mm256_maddubs_epi16(q[t], xv[j][t]), sv);
				}
			}
		}
		for (int i = 0; i < R; i++) {
			/* the -32 offset: 32 * sum over groups of scale * group sum */
			__m256i sc16 = _mm256_cvtepi8_epi16(
				_mm_loadu_si128((const __m128i *)(const void *)w[i][b].scales));
			float d = exl_f16(w[i][b].d);

			for (int j = 0; j < C; j++) {
				__m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)(xs[j] + 16 * b));
				__m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5);
				__m256i t = _mm256_sub_epi32(isum[i][j], off);

				acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t),
							    _mm256_set1_ps(d * xd[j][b]), acc[i][j]);
			}
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = exl_hsum256(acc[i][j]);
}

static void mm_q6_K(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1)
{
	EXL_TILE_LOOP(tile_q6_K, m, r0, r1, c0, c1, 2, 4);
}

/* [v[2p] x8 | v[2p + 1] x8] from 8 int16 v held in both lanes of v2 */
EXL_INLINE __m256i scale_pair16(__m256i v2, int p)
{
	const __m256i base = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
					      2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);

	return _mm256_shuffle_epi8(v2, _mm256_add_epi8(base, _mm256_set1_epi8((char)(4 * p))));
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

/* Q2_K and Q3_K (three): 16 groups of 16 with their own scale.  Byte l
 * of each 32 of qs holds weights 32s + l of its half in bits 2s, 2s + 1,
 * so a shift and a mask give 32 consecutive weights (sub-block c = 4h + s);
 * Q3_K adds 4 where bit c of hmask[l] is set (levels 0..7) and takes 4 *
 * the scaled group sums of x off in integers, Q2_K takes its 4-bit mins
 * off in float through the group sums.  maddubs pairs are at most
 * 2 * 7 * 127, times a scale of at most 32 in madd. */
EXL_INLINE void tile_q23_K(const struct exl_mm_ctx *m, int64_t r, int c, const int R, const int C,
			   const int three)
{
	const uint8_t *w[2];
	const int8_t *xq[4];
	const float *xd[4];
	const int16_t *xs[4];
	__m256 acc[2][4];
	int64_t nb = m->cols / 256;
	const size_t bsize = three ? sizeof(block_q3_K) : sizeof(block_q2_K);
	const size_t pf = exl_prefetch_tile(m, R, c);
	const __m256i m3 = _mm256_set1_epi8(3);

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
			acc[i][j] = _mm256_setzero_ps();

	for (int64_t b = 0; b < nb; b++) {
		__m256i isum[2][4], sc_lo[2], sc_hi[2], sc16[2], hm[2];
		const uint8_t *qs[2];

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
				hm[i] = _mm256_loadu_si256((const __m256i *)(const void *)q3->hmask);
				qs[i] = q3->qs;
			} else {
				const block_q2_K *q2 = (const block_q2_K *)(const void *)wb;

				s8 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)q2->scales),
						   _mm_set1_epi8(0x0f));
				qs[i] = q2->qs;
			}
			sc16[i] = _mm256_cvtepi8_epi16(s8);
			sc_lo[i] = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16[i]));
			sc_hi[i] = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16[i], 1));
			for (int j = 0; j < C; j++)
				isum[i][j] = _mm256_setzero_si256();
		}
		for (int h = 0; h < 2; h++) {
			__m256i q32[2];

			for (int i = 0; i < R; i++)
				q32[i] = _mm256_loadu_si256((const __m256i *)(const void *)(qs[i] + 32 * h));
			for (int s2 = 0; s2 < 4; s2++) {
				const int sub = 4 * h + s2;
				__m256i xv[4];

				for (int j = 0; j < C; j++)
					xv[j] = _mm256_loadu_si256((const __m256i *)(const void *)(xq[j] + 256 * b + 32 * sub));
				for (int i = 0; i < R; i++) {
					__m256i q = _mm256_and_si256(_mm256_srli_epi16(q32[i], 2 * s2), m3);
					__m256i sv = scale_pair16(h ? sc_hi[i] : sc_lo[i], s2);

					/* bit c of hmask[l] straight to bit 2 of its byte
					 * (no bit crosses a byte: c <= 7) */
					if (three) {
						__m256i hb = sub >= 2 ? _mm256_srli_epi16(hm[i], sub - 2)
								      : _mm256_slli_epi16(hm[i], 2 - sub);

						q = _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
					}
					for (int j = 0; j < C; j++)
						isum[i][j] = madd_acc(isum[i][j], _mm256_maddubs_epi16(q, xv[j]), sv);
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
					__m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16[i], bs), 2);

					acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[i][j], off)),
								    _mm256_set1_ps(exl_f16(q3->d) * dx), acc[i][j]);
				} else {
					const block_q2_K *q2 = (const block_q2_K *)(const void *)wb;
					__m256i mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(
						_mm_andnot_si128(_mm_set1_epi8(0x0f),
								 _mm_loadu_si128((const __m128i *)(const void *)q2->scales)), 4));
					__m256i msum = _mm256_madd_epi16(mins, bs);

					acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][j]),
								    _mm256_set1_ps(exl_f16(q2->d) * dx), acc[i][j]);
					acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),
								     _mm256_set1_ps(exl_f16(q2->dmin) * dx), acc[i][j]);
				}
			}
		}
	}
	for (int i = 0; i < R; i++)
		for (int j = 0; j < C; j++)
			*exl_out(m, c + j, r + i) = exl_hsum256(acc[i][j]);
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
 * (high), as an IQ4_NL block's: this set's act_iq4_xs stores each pair of
 * sub-blocks of x as act_pairs32 stores a pair of blocks, so one 32-byte load
 * of qs gives the levels of two sub-blocks in x's order.  Levels through
 * a byte shuffle; signed dots as |w| * (x with w's sign), whose pairs
 * (<= 2 * 127 * 127) go to int32 one by one, times the sub-block's scale.
 *
 * Every path gives output r, vector c the same float steps, Q8_0's with
 * super-blocks for blocks: I_b = sum over the 8 sub-blocks of (scale - 32)
 * * (levels . x), exact in int32 (at most 256 * 32 * 127 * 127 < 2^31),
 * acc[b % 8] = fma((float)I_b, d_w,b * d_x,b, acc[b % 8]), super-blocks in
 * order, output ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)).
 *  - n > 4: 8 rows in the lanes of a vector, per sub-block Q4_0's nibble
 *    transpose, the levels by shuffle, Q8_0's signed dots, each pair sum
 *    times its row's scale (one madd, as Q8_0's times 1).
 *  - n <= 4: one row at a time; per super-block the int32 partial sums of
 *    4 pairs of sub-blocks, 8 super-blocks reduced into the lanes of one
 *    vector for one float step. */
static void act_iq4_xs(const float *x, uint8_t *act, int64_t cols)
{
	int8_t tmp[64];

	exl_act_q8_K_avx2(x, act, cols);
	for (int64_t b = 0; b + 2 <= cols / 32; b += 2) {
		int8_t *q = (int8_t *)act + 32 * b;

		memcpy(tmp, q, 64);
		memcpy(q + 16, tmp + 32, 16);
		memcpy(q + 32, tmp + 16, 16);
	}
}

/* The 8 scales (-32..31) of an IQ4_XS block as int16, in both lanes. */
EXL_INLINE __m256i iq4_xs_scales(const block_iq4_xs *w)
{
	return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(exl_iq4_xs_scales8(w)));
}

/* Sub-block ib's scale - 32 (-32..31) of an IQ4_XS block. */
EXL_INLINE int iq4_xs_scale(const block_iq4_xs *w, int ib)
{
	int ls = ((w->scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((w->scales_h >> (2 * ib)) & 3) << 4);

	return ls - 32;
}

/* Rows [r, r + nr) (nr <= 8) x vectors [c0, c1) (at most COL_CHUNK, 64). */
static void iq4_xs_rows8(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const block_iq4_xs *rw[8];
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	const __m256i tab = iq4_table();
	__m256 acc[64][8];
	__m256i isum[64];

	for (int i = 0; i < 8; i++)
		rw[i] = rows8_row(m, r, nr, i);
	rows8_acc_zero(acc, nc);
	for (int64_t b = 0; b < nb; b++) {
		/* [sub-block][row]: the scale in both int16 halves, madd's
		 * multiplier for that row's lane */
		uint32_t sv[8][8];
		const uint8_t *rb[8];

		exl_prefetch_share(exl_row(m, r + 8), 8 * m->row_bytes, b, nb);
		for (int i = 0; i < 8; i++) {
			rb[i] = (const uint8_t *)(rw[i] + b);
			for (int ib = 0; ib < 8; ib++)
				sv[ib][i] = (uint32_t)(uint16_t)iq4_xs_scale(&rw[i][b], ib) * 0x10001u;
		}
		for (int j = 0; j < nc; j++)
			isum[j] = _mm256_setzero_si256();
		for (int ib = 0; ib < 8; ib++) {
			const __m256i mul = _mm256_loadu_si256((const __m256i *)(const void *)sv[ib]);
			/* x of sub-block ib in act_iq4_xs's pairs order */
			const size_t xo = 256 * (size_t)b + 64 * (size_t)(ib / 2) + 16 * (size_t)(ib & 1);
			__m256i g[8], aw[8];
			const uint8_t *q[8];

			for (int i = 0; i < 8; i++)
				q[i] = rw[i][b].qs + 16 * ib;
			nib16_rows8(q, g, g + 4);
#ifdef EXL_MM_VNNI
			/* (levels + 128) . x less 128 * sum(x), times the scale:
			 * one vpdpbusd per 4 bytes, the sign step gone */
			const __m256i mul32 = _mm256_srai_epi32(mul, 16);

			for (int k = 0; k < 8; k++)
				aw[k] = _mm256_xor_si256(_mm256_shuffle_epi8(tab, g[k]), _mm256_set1_epi8((char)0x80));
			for (int j = 0; j < nc; j++) {
				const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;
				const int16_t *bs = exl_act_q8_K_bsums(a, m->cols) + 16 * b + 2 * ib;
				__m256i d = rows8_u4_dot(_mm256_set1_epi32(-128 * ((int32_t)bs[0] + bs[1])), aw,
							 (const int8_t *)a + xo, 32);

				isum[j] = _mm256_add_epi32(isum[j], _mm256_mullo_epi32(d, mul32));
			}
#else
			for (int k = 0; k < 8; k++) {
				g[k] = _mm256_shuffle_epi8(tab, g[k]);
				aw[k] = _mm256_sign_epi8(g[k], g[k]);
			}
			for (int j = 0; j < nc; j++) {
				const int8_t *x = (const int8_t *)(m->act + (size_t)(c0 + j) * m->act_stride);

				isum[j] = _mm256_add_epi32(isum[j], rows8_signed_dot_mul(g, aw, x + xo, 32, mul));
			}
#endif
		}
		__m256 dw = rows8_d(rb);

		for (int j = 0; j < nc; j++) {
			const uint8_t *a = m->act + (size_t)(c0 + j) * m->act_stride;
			__m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(exl_act_q8_K_d(a, m->cols)[b]));

			acc[j][b & 7] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), sc, acc[j][b & 7]);
		}
	}
	rows8_store(m, acc, nc, c0, r, nr);
}

/* Super-blocks b..b+k-1 (k <= 8, b a multiple of 8) of a row x the nc
 * (<= 4) vectors at a[]: lane m of acc[j] is vector j's accumulator
 * (b + m) mod 8.  Each pair of sub-blocks' levels is unpacked once for the
 * nc vectors. */
EXL_INLINE void iq4_xs_group8(const block_iq4_xs *w, int64_t b, int k, const uint8_t *const *a, int nc,
			      int64_t cols, size_t pf, __m256 *acc)
{
	const __m256i lo4 = _mm256_set1_epi8(0x0f), tab = iq4_table();
	__m256i p[4][8];
	const uint8_t *rb[8];

	for (int t = 0; t < 8; t++) {
		rb[t] = (const uint8_t *)(w + b + (t < k ? t : 0));
		if (t >= k) {
			for (int j = 0; j < nc; j++)
				p[j][t] = _mm256_setzero_si256();
			continue;
		}
		const block_iq4_xs *blk = w + b + t;

		if (pf)
			for (int o = 0; o < (int)sizeof(*blk); o += 64)
				_mm_prefetch((const char *)blk + pf + o, _MM_HINT_T0);
		const __m256i sc = iq4_xs_scales(blk);

		__m256i s[4];

#ifdef EXL_MM_VNNI
		/* the levels go unsigned (+128): start each vector's sum at
		 * -128 * sum over sub-blocks of scale * (sum of x), from the
		 * scales, each twice, against x's sums of 16 */
		const __m128i s8 = exl_iq4_xs_scales8(blk);
		const __m256i sdup = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8));

		for (int j = 0; j < nc; j++) {
			const __m256i bs = _mm256_loadu_si256(
				(const __m256i *)(const void *)(exl_act_q8_K_bsums(a[j], cols) + 16 * (b + t)));

			s[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sdup, bs), 7));
		}
		for (int kk = 0; kk < 4; kk++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(blk->qs + 32 * kk));
			__m256i ulo = _mm256_xor_si256(_mm256_shuffle_epi8(tab, _mm256_and_si256(q, lo4)),
						       _mm256_set1_epi8((char)0x80));
			__m256i uhi = _mm256_xor_si256(
				_mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4)),
				_mm256_set1_epi8((char)0x80));
			__m256i sv32 = _mm256_srai_epi32(scale_pair16(sc, kk), 16);

			for (int j = 0; j < nc; j++) {
				const int8_t *xb = (const int8_t *)a[j] + 256 * (b + t) + 64 * kk;
				__m256i xl = _mm256_loadu_si256((const __m256i *)(const void *)xb);
				__m256i xh = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));
				__m256i d = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ulo, xl), uhi, xh);

				s[j] = _mm256_add_epi32(s[j], _mm256_mullo_epi32(d, sv32));
			}
		}
#else
		for (int j = 0; j < nc; j++)
			s[j] = _mm256_setzero_si256();
		for (int kk = 0; kk < 4; kk++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(blk->qs + 32 * kk));
			__m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(q, lo4));
			__m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4));
			__m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
			__m256i sv = scale_pair16(sc, kk);

			for (int j = 0; j < nc; j++) {
				const int8_t *xb = (const int8_t *)a[j] + 256 * (b + t) + 64 * kk;
				__m256i xl = _mm256_loadu_si256((const __m256i *)(const void *)xb);
				__m256i xh = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));
				__m256i pl = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(xl, lo));
				__m256i ph = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(xh, hi));

				s[j] = madd_acc(madd_acc(s[j], pl, sv), ph, sv);
			}
		}
#endif
		for (int j = 0; j < nc; j++)
			p[j][t] = s[j];
	}
	__m256 dw = rows8_d(rb);

	for (int j = 0; j < nc; j++)
		acc[j] = group_step(hsum8x8_epi32(p[j]),
				    _mm256_mul_ps(dw, group_dx(exl_act_q8_K_d(a[j], cols), b, k)), acc[j], k);
}

DEFINE_ROWS8_MM_QK(iq4_xs, block_iq4_xs, 256)

const struct exl_cpu_kernels SET_SYMBOL = {
	.name = SET_NAME,
#ifdef EXL_MM_VNNI
	.act_q8_0 = exl_act_q8_0_isum_avx2,
#else
	.act_q8_0 = exl_act_q8_0_avx2,
#endif
	.act_q4_0 = act_q4_0,
	.act_q4_1 = act_pairs32,
	.act_iq4_nl = act_q4_0,
	.act_q8_K = exl_act_q8_K_avx2,
	.act_q4_K = exl_act_q8_K_avx2,
	.act_iq4_xs = act_iq4_xs,
	.mm_f32 = mm_f32,
	.mm_f16 = mm_f16,
	.mm_bf16 = mm_bf16,
	.mm_q8_0 = mm_q8_0,
	.mm_q4_0 = mm_q4_0,
	.mm_q4_0_r8 = mm_q4_0_r8,
	.mm_q8_0_r8 = mm_q8_0_r8,
	.mm_q4_K_r8 = mm_q4_K_r8,
	.mm_q4_1 = mm_q4_1,
	.mm_q5_0 = mm_q5_0,
	.mm_q5_1 = mm_q5_1,
	.mm_iq4_nl = mm_iq4_nl,
	.mm_iq4_nl_r8 = mm_iq4_nl_r8,
	.mm_mxfp4 = mm_mxfp4,
	.mm_q2_K = mm_q2_K,
	.mm_q3_K = mm_q3_K,
	.mm_q4_K = mm_q4_K,
	.mm_q5_K = mm_q5_K,
	.mm_q6_K = mm_q6_K,
	.mm_iq4_xs = mm_iq4_xs,
};

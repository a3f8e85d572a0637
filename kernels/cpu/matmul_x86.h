/* Pieces shared by the x86 SIMD matmul variants (included by
 * matmul_avx2.c and matmul_avx512.c, each compiled with its own -m flags). */
#ifndef EXL_CPU_MATMUL_X86_H
#define EXL_CPU_MATMUL_X86_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"

/* Tiles are written once with the tile shape as arguments; forcing them
 * inline at call sites with constant shapes lets the compiler unroll the
 * shape loops and keep the accumulators in registers. */
#define EXL_INLINE static inline __attribute__((always_inline))

/* Rows [r0, r1) of the CN columns at c: tiles of RT rows, then single rows. */
#define EXL_TILE_ROWS(TILE, m, r0, r1, c, RT, CN)                              \
	do {                                                                   \
		int64_t r_ = (r0);                                             \
		for (; r_ + (RT) <= (r1); r_ += (RT))                          \
			TILE(m, r_, c, RT, CN);                                \
		for (; r_ < (r1); r_++)                                        \
			TILE(m, r_, c, 1, CN);                                 \
	} while (0)

/* Walks [r0, r1) x [c0, c1) in tiles of RT rows x CT columns (CT <= 4);
 * 2 or 3 columns left over get one narrower tile, so small batches still
 * read each weight once per tile.  TILE(m, r, c, R, C). */
#define EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, RT, CT)                      \
	do {                                                                   \
		int c_ = (c0);                                                 \
		for (; c_ + (CT) <= (c1); c_ += (CT))                          \
			EXL_TILE_ROWS(TILE, m, r0, r1, c_, RT, CT);            \
		int left_ = (c1) - c_;                                         \
		if ((CT) > 3 && left_ == 3) {                                  \
			EXL_TILE_ROWS(TILE, m, r0, r1, c_, RT, 3);             \
		} else if ((CT) > 2 && left_ >= 2) {                           \
			EXL_TILE_ROWS(TILE, m, r0, r1, c_, RT, 2);             \
			if (left_ == 3)                                        \
				EXL_TILE_ROWS(TILE, m, r0, r1, c_ + 2, RT, 1); \
		} else {                                                       \
			for (; c_ < (c1); c_++)                                \
				EXL_TILE_ROWS(TILE, m, r0, r1, c_, RT, 1);     \
		}                                                              \
	} while (0)

/* Calls with at most this many input vectors are memory bound: they take
 * one row at a time, so each thread reads the weights as one sequential
 * stream (measured: 20-30 % more bandwidth than 4 interleaved rows). */
#define EXL_STREAM_N 4

#define EXL_TILE_LOOP(TILE, m, r0, r1, c0, c1, RT, CT)                         \
	do {                                                                   \
		if ((m)->n <= EXL_STREAM_N)                                    \
			EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, 1, CT);      \
		else                                                           \
			EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, RT, CT);     \
	} while (0)

/* Float tiles read x as 4 bytes a column (fp32, or BF16's hi and lo
 * halves).  A decode-shaped call taking one row at a time reads all of x
 * again for every row; once x outgrows half the L1 (4096 columns), the
 * streaming weights push it out to L2 between rows and those refills cost
 * more than a tile of interleaved rows, which reads x once per tile: RD
 * rows for one vector, RT for more (Zen 4, F16, 2 threads, 5632 columns:
 * 18-21 GB/s one row at a time, 25-29 four rows, 33 eight; 2048 columns:
 * 31 one row, 26 four or eight). */
#define EXL_FLOAT_X_L1_BYTES 16384
#define EXL_FLOAT_TILE_LOOP(TILE, m, r0, r1, c0, c1, RT, CT, RD)               \
	do {                                                                   \
		if ((m)->n > EXL_STREAM_N)                                     \
			EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, RT, CT);     \
		else if ((size_t)(m)->n * (size_t)(m)->cols * 4 <= EXL_FLOAT_X_L1_BYTES) \
			EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, 1, CT);      \
		else if ((m)->n == 1)                                          \
			EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, RD, 1);      \
		else                                                           \
			EXL_TILE_LOOP_RC(TILE, m, r0, r1, c0, c1, RT, CT);     \
	} while (0)

EXL_INLINE float exl_hsum128(__m128 s)
{
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

EXL_INLINE float exl_hsum256(__m256 v)
{
	return exl_hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

EXL_INLINE float exl_f16(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* How far ahead decode-shaped calls (n <= EXL_STREAM_N, memory bound)
 * prefetch: the same offset in a later tile of R rows, at least
 * EXL_PF_BYTES on; 0 (no prefetch) for compute-bound calls, whose weights
 * stay in cache. */
#ifndef EXL_PF_BYTES
#define EXL_PF_BYTES 8192
#endif
static inline size_t exl_prefetch_distance(int n, size_t row_bytes, int R)
{
	size_t tile = (size_t)R * row_bytes;

	if (n > EXL_STREAM_N)
		return 0;
	return tile * ((EXL_PF_BYTES + tile - 1) / tile);
}

/* The prefetch distance of a tile of R rows at vector c.  Decode-shaped
 * calls: exl_prefetch_distance.  Batched ones (n > EXL_STREAM_N) sweep a
 * unit of 16 rows (matmul.c's ROW_UNIT) with every vector before the next
 * unit; the tiles of vector 0 read the unit from memory, so they fetch the
 * same rows of the next unit as they go (a batched decode step reads every
 * matrix from memory; see exl_prefetch_share), and the others none. */
static inline size_t exl_prefetch_tile(const struct exl_mm_ctx *m, int R, int c)
{
	if (m->n <= EXL_STREAM_N)
		return exl_prefetch_distance(m->n, m->row_bytes, R);
	return c == 0 ? 16 * m->row_bytes : 0;
}

/* Batched calls (n > EXL_STREAM_N) compute a group of rows with every
 * vector before they move on: time enough for the next group's bytes to
 * come from memory, which the hardware prefetchers, following several rows
 * at once, do not fetch in time when the weights are not in cache (a
 * batched decode step reads every matrix once: measured 76 against 137
 * GFLOP/s for an in-cache matrix at n = 16).  Step b of nb fetches its share
 * of the lines of [next, next + bytes); past the matrix's end is harmless,
 * a prefetch never faults. */
static inline void exl_prefetch_share(const uint8_t *next, size_t bytes, int64_t b, int64_t nb)
{
	const size_t lines = (bytes + 63) / 64;
	const size_t l1 = lines * (size_t)(b + 1) / (size_t)nb;

	for (size_t l = lines * (size_t)b / (size_t)nb; l < l1; l++)
		_mm_prefetch((const char *)next + 64 * l, _MM_HINT_T0);
}

/* Offset of x's block b weights 0..15 in the avx2 family's pairs order
 * (act_pairs32: each pair of blocks as [x0..15 of both | x16..31 of
 * both]), and how far on weights 16..31 are. */
static inline size_t exl_pairs32_lo(int64_t b, int64_t nb, size_t *hi)
{
	if ((nb & 1) && b == nb - 1) { /* a trailing odd block: element order */
		*hi = 16;
		return 32 * (size_t)b;
	}
	*hi = 32;
	return 64 * (size_t)(b / 2) + 16 * (size_t)(b & 1);
}

static inline const uint8_t *exl_row(const struct exl_mm_ctx *m, int64_t r)
{
	return m->w + (size_t)r * m->row_bytes;
}

static inline float *exl_out(const struct exl_mm_ctx *m, int c, int64_t r)
{
	return m->y + (size_t)c * (size_t)m->rows + (size_t)r;
}

/* The 8 scales and 8 mins of a Q4_K block as bytes (see
 * exl_get_scale_min_k4), unpacked with 32-bit operations. */
EXL_INLINE void exl_q4_K_scales(const uint8_t *s12, uint32_t sc[2], uint32_t mn[2])
{
	uint32_t u0, u1, u2;

	memcpy(&u0, s12, 4);
	memcpy(&u1, s12 + 4, 4);
	memcpy(&u2, s12 + 8, 4);
	sc[0] = u0 & 0x3f3f3f3fu;
	mn[0] = u1 & 0x3f3f3f3fu;
	sc[1] = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
	mn[1] = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
}

/* The 8 scales (-32..31) of an IQ4_XS block as bytes, sub-block order,
 * unpacked with 64-bit operations. */
EXL_INLINE __m128i exl_iq4_xs_scales8(const block_iq4_xs *w)
{
	uint32_t sl;
	uint64_t lo, hi, h = w->scales_h;

	memcpy(&sl, w->scales_l, 4);
	/* nibbles: even sub-blocks from the low ones, odd from the high */
	lo = sl & 0x0f0f0f0fu;
	hi = (sl >> 4) & 0x0f0f0f0fu;
	lo = (lo | lo << 16) & 0x0000ffff0000ffffull;
	lo = (lo | lo << 8) & 0x00ff00ff00ff00ffull;
	hi = (hi | hi << 16) & 0x0000ffff0000ffffull;
	hi = (hi | hi << 8) & 0x00ff00ff00ff00ffull;
	/* 2-bit fields of scales_h, one a byte */
	h = (h | h << 24) & 0x000000ff000000ffull;
	h = (h | h << 12) & 0x000f000f000f000full;
	h = (h | h << 6) & 0x0303030303030303ull;
	return _mm_sub_epi8(_mm_cvtsi64_si128((long long)(lo | hi << 8 | h << 4)), _mm_set1_epi8(32));
}

/* The AVX2 activation quantizers (act_avx2.c), which every x86 set uses.
 * exl_act_q8_0_isum_avx2 is exl_act_q8_0_avx2 with each block's sum of qs
 * as an int32 where the other keeps s as a float. */
void exl_act_q8_0_avx2(const float *x, uint8_t *act, int64_t cols);
void exl_act_q8_0_isum_avx2(const float *x, uint8_t *act, int64_t cols);
void exl_act_q8_K_avx2(const float *x, uint8_t *act, int64_t cols);
void exl_act_q4_K_avx2(const float *x, uint8_t *act, int64_t cols);

#endif

/* The "amx" set's F16 and BF16 matmul on AMX-BF16 tiles, written once in
 * portable C over the tile operations of matmul_amx_body.h plus
 *
 *   EXL_AMX_DPBF16PS(c, a, b)   tdpbf16ps: C (fp32) += A (bf16 pairs) . B (bf16 pairs)
 *
 * and the hooks EXL_AMX_STAGE_F16 and EXL_AMX_PREFETCH, which matmul_amx.c
 * maps to vector code (matmul_amx_bf16.c) and test_amx_layout to the
 * portable versions here and a scalar tile emulator.
 *
 * tdpbf16ps computes, for a C tile of M rows x N fp32, an A tile of M rows x
 * 2K bf16 and a B tile of K rows x 2N bf16:
 *   C[m][n] += A[m][2k] B[k][2n] + A[m][2k + 1] B[k][2n + 1], k in order,
 * each product exact in fp32 (8 x 8 significant bits), each addition
 * rounded to nearest even, denormals flushed.
 *
 * Orientation: A is 16 weight rows x 32 columns, which is how the weights
 * lie in the file (a BF16 tile loads straight from the rows), and B is the
 * activations in pairs: row k of B holds x[2k], x[2k + 1] of each of 16
 * vectors.  C is then 16 rows x 16 vectors and accumulates over the whole
 * row, so a call does one tile store per 16 x 16 outputs, and decode (one
 * vector, N = 1) runs on the same tiles: the weights stream once, and an
 * output has the same bits whether its vector came alone or with 63
 * others (each C element is its own chain of additions, whatever N is).
 *
 * Precision: bf16 keeps 8 significant bits, so both sides are split.
 * x = x_hi + x_lo, each the nearest bf16 (x_hi of x, x_lo of x - x_hi):
 * 16 bits of x, off by at most 2^-16 of it.  An F16 weight has 11 bits,
 * so w = w_hi + w_lo exactly (w_hi its top 8, w_lo the other 3 at most).
 * Per 32 columns:
 *   F16:  C += w_hi x_hi;  C += w_lo x_hi;  C += w_hi x_lo
 *   BF16: C += w x_hi;     C += w x_lo
 * in that order (w_lo x_lo, under 2^-15 of the product, is left out).
 * Each product is then within 2^-14 of w x at worst, its error of either
 * sign, so a sum of many is far closer than the other sets' tolerance
 * against scalar (2e-5 of sum |w x|, test_matmul); llama.cpp rounds x to
 * F16 (2^-11) or BF16 (2^-8).
 *
 * The activations are packed once per call (exl_amx_act_bf16, the set's
 * act_f16): vectors in groups of 16, group g of ng vectors at byte
 * 16 g act_stride of the act buffer, as two matrices of Kp / 2 rows
 * (Kp = cols rounded up to 32, the pairs past cols zero) of ng dwords:
 *   hi: row k at 4 ng k, dword j = bf16 x_hi of vector 16 g + j at 2k, 2k + 1
 *   lo: the same for x_lo, from 4 ng Kp / 2
 * so B for 32 columns of a group is 16 rows 4 ng bytes apart, and the
 * group takes exactly ng act rows (act_stride = 4 Kp). */
#ifndef EXL_CPU_MATMUL_AMX_BF16_BODY_H
#define EXL_CPU_MATMUL_AMX_BF16_BODY_H

#include <string.h>

#include "kernels/cpu/matmul_amx_bf16_split.h"
#include "kernels/cpu/matmul_amx_body.h"
#include "kernels/cpu/matmul_impl.h"

#ifndef EXL_AMX_STAGE_F16
#define EXL_AMX_STAGE_F16 exl_amx_stage_f16_portable
#endif
#ifndef EXL_AMX_PREFETCH
#define EXL_AMX_PREFETCH(p) ((void)(p))
#endif

/* Tiles 0, 1 = A (w_hi, w_lo), nr rows x 64 bytes; 2, 3 = B (x_hi, x_lo),
 * 16 rows x 4 ng bytes; 4-7 = C, nr rows x ng fp32, one per group. */
static inline void exl_amx_cfg_bf16(struct exl_amx_cfg *cfg, int nr, int ng)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->palette = 1;
	exl_amx_cfg_tile(cfg, 0, nr, 2 * EXL_AMX_BF16_K);
	exl_amx_cfg_tile(cfg, 1, nr, 2 * EXL_AMX_BF16_K);
	exl_amx_cfg_tile(cfg, 2, EXL_AMX_BF16_K / 2, 4 * ng);
	exl_amx_cfg_tile(cfg, 3, EXL_AMX_BF16_K / 2, 4 * ng);
	for (int t = 4; t < 8; t++)
		exl_amx_cfg_tile(cfg, t, nr, 4 * ng);
}

/* One group's products for one step (gt: which of the four, so the tile
 * numbers are literals): B from the group's hi and lo matrices at row
 * 16 s, in the order the header gives. */
#define EXL_AMX_BF16_GROUP(gt, ctile)                                                     \
	do {                                                                              \
		if ((gt) < ngroups) {                                                     \
			const uint8_t *b_ = m->act + 16 * (size_t)(g0 + (gt)) * m->act_stride + bstep; \
			EXL_AMX_LOADD(2, b_, bstride);                                    \
			EXL_AMX_DPBF16PS(ctile, 0, 2);                                    \
			if (f16)                                                          \
				EXL_AMX_DPBF16PS(ctile, 1, 2);                            \
			EXL_AMX_LOADD(3, b_ + lo_off, bstride);                           \
			EXL_AMX_DPBF16PS(ctile, 0, 3);                                    \
		}                                                                         \
	} while (0)

#define EXL_AMX_BF16_ZERO(gt, ctile)        \
	do {                                \
		if ((gt) < ngroups)         \
			EXL_AMX_ZERO(ctile); \
	} while (0)

#define EXL_AMX_BF16_STORE(gt, ctile)                                    \
	do {                                                             \
		if ((gt) < ngroups)                                      \
			EXL_AMX_STORED(ctile, cbuf[gt], sizeof(cbuf[gt][0])); \
	} while (0)

/* Rows [r, r + nr) (nr <= 16) for groups [g0, g0 + ngroups) (at most 4),
 * each of ng vectors.  The tile config is exl_amx_cfg_bf16(nr, ng). */
static inline void exl_amx_rows_bf16(const struct exl_mm_ctx *m, int64_t r, int nr, int g0, int ngroups, int ng,
				     int f16)
{
	const uint8_t *w = m->w + (size_t)r * m->row_bytes;
	const int64_t steps = exl_amx_bf16_kp(m->cols) / EXL_AMX_BF16_K;
	const size_t bstride = 4 * (size_t)ng;
	const size_t lo_off = bstride * (size_t)(steps * EXL_AMX_BF16_K / 2);
	_Alignas(64) uint16_t ahi[EXL_AMX_TR * EXL_AMX_BF16_K];
	_Alignas(64) uint16_t alo[EXL_AMX_TR * EXL_AMX_BF16_K];
	_Alignas(64) float cbuf[EXL_AMX_COL_TILES][EXL_AMX_TR][16];

	EXL_AMX_BF16_ZERO(0, 4);
	EXL_AMX_BF16_ZERO(1, 5);
	EXL_AMX_BF16_ZERO(2, 6);
	EXL_AMX_BF16_ZERO(3, 7);
	for (int64_t s = 0; s < steps; s++) {
		const int64_t k0 = EXL_AMX_BF16_K * s;
		const size_t bstep = bstride * (size_t)(EXL_AMX_BF16_K / 2) * (size_t)s;

		if (f16) {
			EXL_AMX_STAGE_F16(w, m->row_bytes, nr, k0, m->cols, ahi, alo);
			EXL_AMX_LOADD(0, ahi, 2 * EXL_AMX_BF16_K);
			EXL_AMX_LOADD(1, alo, 2 * EXL_AMX_BF16_K);
		} else if (k0 + EXL_AMX_BF16_K <= m->cols) {
			/* the rows' next lines, a few steps ahead: 16 short
			 * streams that the hardware prefetchers pick up late */
			for (int i = 0; i < nr; i++)
				EXL_AMX_PREFETCH(w + (size_t)i * m->row_bytes + 2 * (size_t)k0 + 512);
			EXL_AMX_LOADD(0, w + 2 * (size_t)k0, m->row_bytes);
		} else {
			exl_amx_stage_bf16(w, m->row_bytes, nr, k0, m->cols, ahi);
			EXL_AMX_LOADD(0, ahi, 2 * EXL_AMX_BF16_K);
		}
		EXL_AMX_BF16_GROUP(0, 4);
		EXL_AMX_BF16_GROUP(1, 5);
		EXL_AMX_BF16_GROUP(2, 6);
		EXL_AMX_BF16_GROUP(3, 7);
	}
	EXL_AMX_BF16_STORE(0, 4);
	EXL_AMX_BF16_STORE(1, 5);
	EXL_AMX_BF16_STORE(2, 6);
	EXL_AMX_BF16_STORE(3, 7);
	/* C is rows x vectors, y vectors x rows */
	for (int t = 0; t < ngroups; t++)
		for (int j = 0; j < ng; j++) {
			float *y = m->y + (size_t)(16 * (g0 + t) + j) * (size_t)m->rows + (size_t)r;

			for (int i = 0; i < nr; i++)
				y[i] = cbuf[t][i][j];
		}
}

/* Rows [r0, r1) x vectors [c0, c1) of an F16 (f16 = 1) or BF16 matrix;
 * c0 a multiple of 16 and c1 - c0 <= 64, as matmul.c calls.  The full
 * groups of 16 vectors go first, then a last group of fewer (its own tile
 * shape). */
static inline void exl_amx_mm_bf16(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int f16)
{
	const int nfull = (c1 - c0) / 16, part = (c1 - c0) % 16;
	struct exl_amx_cfg cfg;

	for (int pass = 0; pass < 2; pass++) {
		const int ng = pass ? part : 16;
		const int ngroups = pass ? (part > 0) : nfull;
		const int g0 = c0 / 16 + (pass ? nfull : 0);
		int cur_nr = 0;

		if (!ngroups)
			continue;
		for (int64_t r = r0; r < r1; r += EXL_AMX_TR) {
			const int nr = r1 - r < EXL_AMX_TR ? (int)(r1 - r) : EXL_AMX_TR;

			if (nr != cur_nr) {
				exl_amx_cfg_bf16(&cfg, nr, ng);
				EXL_AMX_LOADCONFIG(&cfg);
				cur_nr = nr;
			}
			exl_amx_rows_bf16(m, r, nr, g0, ngroups, ng, f16);
		}
	}
	EXL_AMX_RELEASE();
}

#endif

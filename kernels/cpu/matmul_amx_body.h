/* The AMX-INT8 Q8_0, Q4_0, IQ4_NL, Q6_K and IQ4_XS matmul kernels, written once in portable C over
 * five tile operations that the includer defines:
 *
 *   EXL_AMX_LOADCONFIG(cfg)        ldtilecfg (a struct exl_amx_cfg *)
 *   EXL_AMX_LOADD(t, base, stride) tileloadd: row i of tile t from base + i * stride
 *   EXL_AMX_STORED(t, base, stride) tilestored
 *   EXL_AMX_ZERO(t)                tilezero
 *   EXL_AMX_DPBSSD(c, a, b)        tdpbssd: C += A (s8) . B (s8, VNNI layout)
 *   EXL_AMX_RELEASE()              tilerelease
 *
 * and may replace the portable helpers below with vector code of the same
 * results (EXL_AMX_UNPACK_Q4, EXL_AMX_PACK_B, EXL_AMX_PACK_R8, EXL_AMX_SCALES,
 * EXL_AMX_POST16, EXL_AMX_IPOST16, EXL_AMX_PACK_Q6_K, EXL_AMX_PACK_IQ4_XS,
 * same arguments as exl_amx_unpack_q4 etc.).
 *
 * matmul_amx.c maps them to the AMX intrinsics (tile numbers are
 * immediates, so every one is a literal here); tests/unit/test_amx_layout.c
 * maps them to a scalar emulator that checks every tile shape against its
 * configuration, so the tile configuration, the packing and the indexing run
 * on any CPU.
 *
 * tdpbssd computes, for a C tile of M rows x N int32, an A tile of M rows x
 * K bytes and a B tile of K/4 rows x 4N bytes:
 *   C[m][n] += sum_{i < K/4} sum_{j < 4} A[m][4i + j] * B[i][4n + j]
 * so B holds its K dimension four bytes per dword ("VNNI layout"): a matrix
 * W[n][k] goes in as B[i][4n + j] = W[n][4i + j].  Both operands signed, so
 * neither the Q8_0 weights (-128..127) nor the activations need an offset.
 *
 * Every type's dots are exact int32 sums of one block (or sub-block, or
 * group), and the scales are applied after them in float, one FMA per
 * block and output: C = 16 vectors x 16 rows, then one post16() call per
 * (vector, 16 rows, block), so an output has the same bits whichever tile
 * or thread made it.  Q8_0, Q4_0, IQ4_NL and IQ4_XS follow the avx2
 * family's float steps (below), so that this set decodes them with
 * avx2vnni's kernels (the repacked groups with avx512vnni's, the same
 * bits); Q6_K has its own, which matmul_amx_decode.c makes without tiles
 * for a few vectors.  Q4_K and Q5_K have no tiles: on the Xeon measured,
 * avx512vnni's kernels multiply them faster than tiles did, whose
 * per-sub-block scales and mins cost more than the tile products save.
 */
#ifndef EXL_CPU_MATMUL_AMX_BODY_H
#define EXL_CPU_MATMUL_AMX_BODY_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/matmul_amx_decode.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/formats/elem.h"

/* ldtilecfg's 64-byte operand, palette 1: colsb[t] bytes per row and
 * rows[t] rows of tile t (at most 64 and 16). */
struct exl_amx_cfg {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};
_Static_assert(sizeof(struct exl_amx_cfg) == 64, "ldtilecfg operand is 64 bytes");

#define EXL_AMX_KB 32         /* K bytes per step: one 32-element block */
#define EXL_AMX_TR 16         /* rows of a full tile */
#define EXL_AMX_COL_TILES 4   /* tiles of 16 vectors per call (64 = COL_CHUNK) */

static inline void exl_amx_cfg_tile(struct exl_amx_cfg *cfg, int t, int rows, int colsb)
{
	cfg->rows[t] = (uint8_t)rows;
	cfg->colsb[t] = (uint16_t)colsb;
}

/* Tile 0 = B, 16 weight rows' block in VNNI layout (8 x 64 bytes);
 * tiles 1, 2 = A, 16 vectors x 32 bytes (alternating); tiles 4-7 = C, 16
 * vectors x 16 rows, one per tile of 16 vectors. */
static inline void exl_amx_cfg_batch(struct exl_amx_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->palette = 1;
	exl_amx_cfg_tile(cfg, 0, EXL_AMX_KB / 4, 64);
	exl_amx_cfg_tile(cfg, 1, EXL_AMX_TR, EXL_AMX_KB);
	exl_amx_cfg_tile(cfg, 2, EXL_AMX_TR, EXL_AMX_KB);
	for (int t = 4; t < 8; t++)
		exl_amx_cfg_tile(cfg, t, EXL_AMX_TR, 64);
}

/* The same with K = 16 (Q6_K's 16-weight groups): B 4 x 64 bytes, A 16
 * vectors x 16 bytes. */
static inline void exl_amx_cfg_batch16(struct exl_amx_cfg *cfg)
{
	exl_amx_cfg_batch(cfg);
	exl_amx_cfg_tile(cfg, 0, 4, 64);
	exl_amx_cfg_tile(cfg, 1, EXL_AMX_TR, 16);
	exl_amx_cfg_tile(cfg, 2, EXL_AMX_TR, 16);
}

/* The 32-weight block formats of the pair tiles (below): Q8_0's int8,
 * Q4_0's nibbles less 8, IQ4_NL's nibbles through its 16 levels (-127..113,
 * int8 too); the last two in blocks of one shape. */
enum { EXL_AMX_FMT_Q8_0, EXL_AMX_FMT_Q4_0, EXL_AMX_FMT_IQ4_NL };

/* A nibble's level in format fmt (Q4_0 or IQ4_NL) */
static inline int8_t exl_amx_nib_level(int fmt, int q)
{
	return (int8_t)(fmt == EXL_AMX_FMT_IQ4_NL ? exl_iq4nl_value(q) : q - 8);
}

/* Q4_0 or IQ4_NL block b of rows w, w + row_bytes, ... (nr of them) as
 * int8 levels in element order: out[32 r + k]; rows nr..15 zero. */
static inline void exl_amx_unpack_q4(const uint8_t *w, size_t row_bytes, int64_t b, int nr, int fmt,
				     int8_t out[EXL_AMX_TR * EXL_AMX_KB])
{
	for (int r = 0; r < EXL_AMX_TR; r++) {
		int8_t *o = out + EXL_AMX_KB * r;

		if (r >= nr) {
			memset(o, 0, EXL_AMX_KB);
			continue;
		}
		const block_q4_0 *blk = (const block_q4_0 *)(const void *)(w + (size_t)r * row_bytes) + b;
		for (int j = 0; j < 16; j++) {
			o[j] = exl_amx_nib_level(fmt, blk->qs[j] & 0x0f);
			o[j + 16] = exl_amx_nib_level(fmt, blk->qs[j] >> 4);
		}
	}
}

/* The VNNI (B operand) layout of the 16 x 32 int8 matrix whose row r is at
 * src + r * stride (rows nr..15 taken as zero), its 8 B rows in two halves
 * (where a pair step wants them, exl_amx_pair_slots): B row i = dwords i
 * of the 16 rows, at lo + 64 i for i < 4 and at hi + 64 (i - 4) after. */
static inline void exl_amx_pack_b(const int8_t *src, size_t stride, int nr, int8_t *lo, int8_t *hi)
{
	for (int i = 0; i < EXL_AMX_KB / 4; i++) {
		int8_t *out = i < 4 ? lo + 64 * i : hi + 64 * (i - 4);

		for (int r = 0; r < EXL_AMX_TR; r++) {
			if (r < nr)
				memcpy(out + 4 * r, src + (size_t)r * stride + 4 * i, 4);
			else
				memset(out + 4 * r, 0, 4);
		}
	}
}

/* Block b of the 16 rows of two groups of EXL_LAYOUT_ROWS8
 * (kernels/cpu/repack.h; g1 NULL past a matrix's last group: its rows
 * zero) in pack_b's layout, and their scales.  Q8_0: B row i is q[i] of g0
 * then q[i] of g1, 32 bytes each, copies.  Q4_0 and IQ4_NL: B row i < 4
 * is the levels of the low nibbles of q[i] of the two, row 4 + i of the
 * high ones. */
static inline void exl_amx_pack_r8(const uint8_t *g0, const uint8_t *g1, int64_t b, int fmt, int8_t *lo,
				   int8_t *hi, float dw[EXL_AMX_TR])
{
	const size_t bs = fmt == EXL_AMX_FMT_Q8_0 ? 272 : 144;

	for (int h = 0; h < 2; h++) {
		const uint8_t *p = h ? g1 : g0;
		const uint8_t *q = p ? p + bs * (size_t)b + 16 : NULL;

		for (int i = 0; i < 8; i++) {
			uint16_t d = 0;

			if (p)
				memcpy(&d, p + bs * (size_t)b + 2 * (size_t)i, 2);
			dw[8 * h + i] = exl_fp16_to_fp32(d);
		}
		for (int i = 0; i < 8; i++) {
			int8_t *out = (i < 4 ? lo + 64 * i : hi + 64 * (i - 4)) + 32 * h;

			for (int e = 0; e < 32; e++) {
				if (!q)
					out[e] = 0;
				else if (fmt == EXL_AMX_FMT_Q8_0)
					out[e] = (int8_t)q[32 * i + e];
				else if (i < 4)
					out[e] = exl_amx_nib_level(fmt, q[32 * i + e] & 15);
				else
					out[e] = exl_amx_nib_level(fmt, q[32 * (i - 4) + e] >> 4);
			}
		}
	}
}

/* The fp16 scales of block b of nr rows (bs bytes per block, d first) as
 * floats; lanes nr..15 zero. */
static inline void exl_amx_scales(const uint8_t *w, size_t row_bytes, size_t bs, int64_t b, int nr,
				  float dw[EXL_AMX_TR])
{
	for (int r = 0; r < EXL_AMX_TR; r++) {
		uint16_t h = 0;

		if (r < nr)
			memcpy(&h, w + (size_t)r * row_bytes + bs * (size_t)b, 2);
		dw[r] = exl_fp16_to_fp32(h);
	}
}

/* acc[l] += dots[l] * (dx * dw[l]) for 16 rows l: the one float step. */
static inline void exl_amx_post16(float acc[EXL_AMX_TR], const int32_t dots[EXL_AMX_TR], float dx,
				  const float dw[EXL_AMX_TR])
{
	for (int l = 0; l < EXL_AMX_TR; l++)
		acc[l] = fmaf((float)dots[l], dx * dw[l], acc[l]);
}

static inline void exl_amx_store_out(const struct exl_mm_ctx *m, int c, int64_t r, int nr,
				     const float acc[EXL_AMX_TR])
{
	memcpy(m->y + (size_t)c * (size_t)m->rows + (size_t)r, acc, sizeof(float) * (size_t)nr);
}

#ifndef EXL_AMX_UNPACK_Q4
#define EXL_AMX_UNPACK_Q4 exl_amx_unpack_q4
#endif
#ifndef EXL_AMX_PACK_B
#define EXL_AMX_PACK_B exl_amx_pack_b
#endif
#ifndef EXL_AMX_PACK_R8
#define EXL_AMX_PACK_R8 exl_amx_pack_r8
#endif
#ifndef EXL_AMX_SCALES
#define EXL_AMX_SCALES exl_amx_scales
#endif
#ifndef EXL_AMX_POST16
#define EXL_AMX_POST16 exl_amx_post16
#endif

/* One tile of 16 vectors (ct: which of the four, so the literal tile
 * numbers can be picked): A (akb bytes per vector) from the act rows in
 * place at byte aoff, or from a zeroed copy when fewer than 16 vectors are
 * left (a tile load would read past them). */
#define EXL_AMX_BATCH_TILE(ct, atile, ctile)                                         \
	do {                                                                         \
		if ((ct) < ntiles) {                                                 \
			int v0_ = c0 + 16 * (ct);                                    \
			int nv_ = c1 - v0_ < 16 ? c1 - v0_ : 16;                     \
			if (nv_ == 16) {                                             \
				EXL_AMX_LOADD(atile, m->act + (size_t)v0_ * m->act_stride + aoff, \
					      m->act_stride);                        \
			} else {                                                     \
				for (int v_ = 0; v_ < 16; v_++) {                    \
					if (v_ < nv_)                                \
						memcpy(apart + akb * v_,             \
						       m->act + (size_t)(v0_ + v_) * m->act_stride + aoff, \
						       akb);                         \
					else                                         \
						memset(apart + akb * v_, 0, akb);    \
				}                                                    \
				EXL_AMX_LOADD(atile, apart, akb);                    \
			}                                                            \
			EXL_AMX_ZERO(ctile);                                         \
			EXL_AMX_DPBSSD(ctile, atile, 0);                             \
			EXL_AMX_STORED(ctile, dots[ct], 64);                         \
		}                                                                    \
	} while (0)

/* ---- Q8_0, Q4_0 and IQ4_NL ----
 *
 * The float steps are the avx2 family's (matmul_avx2.c): block b's exact
 * int32 dot goes into accumulator b mod 8 of its (vector, row),
 *   a[b % 8] = fmaf((float)dot_b, d_w,b * d_x,b, a[b % 8]),
 * and the output is ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)).
 * So the set decodes with avx2vnni's kernels, from the repacked groups in
 * huge pages, and the tiles give their bits for the same input, alone or in
 * a batch.  The act is theirs too: Q8_0's x in element order, Q4_0's and
 * IQ4_NL's in pairs of blocks, [x0..15 of 2p | x0..15 of 2p + 1 | x16..31 of 2p |
 * x16..31 of 2p + 1] (an odd last block in element order).
 *
 * One step is a pair of blocks: A = 16 vectors x the pair's 64 bytes in
 * place, and two B tiles, each one block's 8 dword rows at the K slots
 * where its x lie in A and zero rows at the other block's (a tdpbssd
 * takes as long for K = 32 as for 64, so the zeros cost no time).  Pairs
 * go by residue, p = q, q + 4, ... for q = 0..3: blocks 2p and 2p + 1 feed
 * accumulators 2q and 2q + 1 only, and a[2q] + a[2q + 1] joins the tree as
 * soon as its pairs are done, so 4 sets of sums are live (16 KiB for 64
 * vectors) where 8 would be 32. */

/* B 16 x 64 bytes twice (tiles 0, 3: blocks 2p and 2p + 1); A 16 vectors
 * x 64 bytes (tiles 1, 2, alternating); C 16 x 16 (tiles 4-7). */
static inline void exl_amx_cfg_pairs(struct exl_amx_cfg *cfg)
{
	exl_amx_cfg_batch(cfg);
	exl_amx_cfg_tile(cfg, 0, EXL_AMX_TR, 64);
	exl_amx_cfg_tile(cfg, 3, EXL_AMX_TR, 64);
	exl_amx_cfg_tile(cfg, 1, EXL_AMX_TR, 64);
	exl_amx_cfg_tile(cfg, 2, EXL_AMX_TR, 64);
}

/* Where block h (0: 2p, 1: 2p + 1) of a pair puts its B rows i < 4 (lo)
 * and i >= 4 (hi) in its 16-row B tile bt: at the K slots of its x in A. */
static inline void exl_amx_pair_slots(int8_t *bt, int h, int fmt, int8_t **lo, int8_t **hi)
{
	if (fmt != EXL_AMX_FMT_Q8_0) { /* x0..15 at 16 h, x16..31 at 32 + 16 h */
		*lo = bt + 256 * h;
		*hi = bt + 512 + 256 * h;
	} else { /* x0..31 at 32 h */
		*lo = bt + 512 * h;
		*hi = bt + 512 * h + 256;
	}
}

/* A vector's 64 A bytes of a pair from its act row at src; the last block
 * alone (single) where block 2p + 1's slots are zero. */
static inline void exl_amx_pair_a(int8_t *dst, const uint8_t *src, int single, int fmt)
{
	if (!single) {
		memcpy(dst, src, 64);
		return;
	}
	memset(dst, 0, 64);
	if (fmt != EXL_AMX_FMT_Q8_0) {
		memcpy(dst, src, 16);
		memcpy(dst + 32, src + 16, 16);
	} else {
		memcpy(dst, src, 32);
	}
}

/* One pair step for the tile ct of 16 vectors: A (tile atile) from the act
 * rows in place, or from a copy past the last whole tile or for a last
 * block alone; then C = A . B for each block (tiles ce and co). */
#define EXL_AMX_PAIR_TILE(ct, atile, ce, co)                                                       \
	do {                                                                                       \
		if ((ct) < ntiles) {                                                               \
			int v0_ = c0 + 16 * (ct);                                                  \
			int nv_ = c1 - v0_ < 16 ? c1 - v0_ : 16;                                   \
			if (nv_ == 16 && !single) {                                                \
				EXL_AMX_LOADD(atile, m->act + (size_t)v0_ * m->act_stride + aoff,  \
					      m->act_stride);                                      \
			} else {                                                                   \
				for (int v_ = 0; v_ < 16; v_++) {                                  \
					if (v_ < nv_)                                              \
						exl_amx_pair_a(apart + 64 * v_,                    \
							       m->act + (size_t)(v0_ + v_) * m->act_stride + aoff, \
							       single, fmt);                       \
					else                                                       \
						memset(apart + 64 * v_, 0, 64);                    \
				}                                                                  \
				EXL_AMX_LOADD(atile, apart, 64);                                   \
			}                                                                          \
			EXL_AMX_ZERO(ce);                                                          \
			EXL_AMX_DPBSSD(ce, atile, 0);                                              \
			EXL_AMX_STORED(ce, dots[0][ct], 64);                                       \
			if (!single) {                                                             \
				EXL_AMX_ZERO(co);                                                  \
				EXL_AMX_DPBSSD(co, atile, 3);                                      \
				EXL_AMX_STORED(co, dots[1][ct], 64);                               \
			}                                                                          \
		}                                                                                  \
	} while (0)

/* The whole pair step: B of both blocks (bt[0], bt[1]; the first alone
 * when single) into tiles 0 and 3, then the four tiles of 16 vectors,
 * their A tiles and C tiles alternating. */
#define EXL_AMX_PAIR_TILES()                          \
	do {                                          \
		EXL_AMX_LOADD(0, bt[0], 64);          \
		if (!single)                          \
			EXL_AMX_LOADD(3, bt[1], 64);  \
		EXL_AMX_PAIR_TILE(0, 1, 4, 5);        \
		EXL_AMX_PAIR_TILE(1, 2, 6, 7);        \
		EXL_AMX_PAIR_TILE(2, 1, 4, 5);        \
		EXL_AMX_PAIR_TILE(3, 2, 6, 7);        \
	} while (0)

/* Block b of rows [r, r + nr) into B rows lo, hi and its scales: from GGUF
 * rows, or (r8) from the groups of 8 at r and r + 8. */
static inline void exl_amx_block_b(const struct exl_mm_ctx *m, int64_t r, int nr, int64_t b, int fmt, int r8,
				   int8_t *lo, int8_t *hi, float dw[EXL_AMX_TR], int8_t *wbuf)
{
	const uint8_t *w = m->w + (size_t)r * m->row_bytes;

	if (r8) {
		EXL_AMX_PACK_R8(w, nr > 8 ? w + 8 * m->row_bytes : NULL, b, fmt, lo, hi, dw);
		return;
	}
	_Static_assert(sizeof(block_q4_0) == sizeof(block_iq4_nl), "IQ4_NL blocks are Q4_0's shape");
	EXL_AMX_SCALES(w, m->row_bytes, fmt == EXL_AMX_FMT_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0), b, nr,
		       dw);
	if (fmt != EXL_AMX_FMT_Q8_0) {
		EXL_AMX_UNPACK_Q4(w, m->row_bytes, b, nr, fmt, wbuf);
		EXL_AMX_PACK_B(wbuf, EXL_AMX_KB, EXL_AMX_TR, lo, hi);
	} else {
		EXL_AMX_PACK_B((const int8_t *)((const block_q8_0 *)(const void *)w + b)->qs, m->row_bytes, nr,
			       lo, hi);
	}
}

/* Rows [r, r + nr) (nr <= 16; r a multiple of 8 when r8) of a matrix of
 * format fmt for vectors [c0, c1), c1 - c0 <= 64.  The tile config is
 * exl_amx_cfg_pairs. */
static inline void exl_amx_rows_pairs(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1, int fmt,
				      int r8)
{
	const int64_t nb = m->cols / 32, np = (nb + 1) / 2;
	const int nc = c1 - c0;
	const int ntiles = (nc + 15) / 16;
	const size_t set_bytes = sizeof(float) * EXL_AMX_TR * (size_t)nc;
	float acc[2][16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	float tree[2][16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	_Alignas(64) int32_t dots[2][EXL_AMX_COL_TILES][16][EXL_AMX_TR];
	_Alignas(64) int8_t bt[2][EXL_AMX_TR * 64];
	_Alignas(64) int8_t wbuf[EXL_AMX_TR * EXL_AMX_KB];
	_Alignas(64) int8_t apart[16 * 64];
	float dw[2][EXL_AMX_TR];

	/* each block writes only its own slots: the others stay zero */
	memset(bt, 0, sizeof(bt));
	for (int q = 0; q < 4; q++) {
		memset(acc[0], 0, set_bytes);
		memset(acc[1], 0, set_bytes);
		for (int64_t p = q; p < np; p += 4) {
			const int single = 2 * p + 1 == nb;
			const size_t aoff = 64 * (size_t)p;

			for (int h = 0; h < 2 - single; h++) {
				int8_t *lo, *hi;

				exl_amx_pair_slots(bt[h], h, fmt, &lo, &hi);
				exl_amx_block_b(m, r, nr, 2 * p + h, fmt, r8, lo, hi, dw[h], wbuf);
			}
			EXL_AMX_PAIR_TILES();
			for (int j = 0; j < nc; j++) {
				const float *xd = exl_act_q8_0_d(m->act + (size_t)(c0 + j) * m->act_stride, m->cols);

				EXL_AMX_POST16(acc[0][j], dots[0][j / 16][j % 16], xd[2 * p], dw[0]);
				if (!single)
					EXL_AMX_POST16(acc[1][j], dots[1][j / 16][j % 16], xd[2 * p + 1], dw[1]);
			}
		}
		/* a[2q] + a[2q + 1] into (a0 + a1) + (a2 + a3) or (a4 + a5) + (a6 + a7) */
		for (int j = 0; j < nc; j++)
			for (int l = 0; l < EXL_AMX_TR; l++) {
				float t = acc[0][j][l] + acc[1][j][l];

				tree[q / 2][j][l] = q & 1 ? tree[q / 2][j][l] + t : t;
			}
	}
	for (int j = 0; j < nc; j++) {
		float out[EXL_AMX_TR];

		for (int l = 0; l < EXL_AMX_TR; l++)
			out[l] = tree[0][j][l] + tree[1][j][l];
		exl_amx_store_out(m, c0 + j, r, nr, out);
	}
}

/* isum[l] += dots[l] * sc[l] for 16 rows l */
static inline void exl_amx_ipost16(int32_t isum[EXL_AMX_TR], const int32_t dots[EXL_AMX_TR],
				   const int32_t sc[EXL_AMX_TR])
{
	for (int l = 0; l < EXL_AMX_TR; l++)
		isum[l] += dots[l] * sc[l];
}

#ifndef EXL_AMX_IPOST16
#define EXL_AMX_IPOST16 exl_amx_ipost16
#endif

/* One step of Q6_K's tiles: B (bpack, VNNI layout) against A at byte
 * aoff (akb bytes) of every vector's act row, the dots scaled by each
 * row's sc and added to isum[vector][row] in int32.  The tile config is
 * exl_amx_cfg_batch16 (akb 16). */
static inline void exl_amx_kstep(const struct exl_mm_ctx *m, int c0, int c1, size_t aoff, size_t akb,
				 const int8_t *bpack, const int32_t sc[EXL_AMX_TR], int32_t isum[][EXL_AMX_TR])
{
	const int nc = c1 - c0;
	const int ntiles = (nc + 15) / 16;
	_Alignas(64) int32_t dots[EXL_AMX_COL_TILES][16][EXL_AMX_TR];
	_Alignas(64) int8_t apart[16 * EXL_AMX_KB];

	EXL_AMX_LOADD(0, bpack, 64);
	EXL_AMX_BATCH_TILE(0, 1, 4);
	EXL_AMX_BATCH_TILE(1, 2, 5);
	EXL_AMX_BATCH_TILE(2, 1, 6);
	EXL_AMX_BATCH_TILE(3, 2, 7);
	for (int v = 0; v < nc; v++)
		EXL_AMX_IPOST16(isum[v], dots[v / 16][v % 16], sc);
}

/* ---- Q6_K ----
 *
 * One step is one 16-weight group G (K = 16): C = the exact int32 dots D_G
 * of the levels q - 32 (-32..31, so signed bytes) against the act's int8,
 * then in int32 I += sc_G * D_G; per super-block y = fmaf((float)I,
 * d_x * d, y), super-blocks in order (post16's step).  The act is
 * act_q8_K's, element order. */

/* Level l (0..15) of group gh (0..15) of half h of a Q6_K block, less 32:
 * the group's 16 weights are in ql[64h + 32 (k & 1) + l0 + l] (low nibbles
 * for k < 2, high for k >= 2) and bits 2k, 2k + 1 of qh[32h + l0 + l],
 * with k = gh / 2, l0 = 16 (gh & 1) */
static inline int8_t exl_amx_q6_K_level(const block_q6_K *blk, int h, int gh, int l)
{
	const int k = gh / 2, l0 = 16 * (gh & 1);
	const uint8_t ql = blk->ql[64 * h + 32 * (k & 1) + l0 + l];
	const uint8_t qh = blk->qh[32 * h + l0 + l];

	return (int8_t)((((ql >> (4 * (k >> 1))) & 15) | (((qh >> (2 * k)) & 3) << 4)) - 32);
}

/* The four groups gh = 2k + s (k = 0..3) of half h of super-block b of nr
 * rows, which read the same qh bytes, in VNNI (B) layout:
 * out[k][64 i + 4 r + j] = level 4i + j of row r's group; rows nr..15
 * zero. */
static inline void exl_amx_pack_q6_K(const uint8_t *w, size_t row_bytes, int64_t b, int h, int s, int nr,
				     int8_t out[4][4 * 64])
{
	for (int r = 0; r < EXL_AMX_TR; r++) {
		const block_q6_K *blk = NULL;

		if (r < nr)
			blk = (const block_q6_K *)(const void *)(w + (size_t)r * row_bytes) + b;
		for (int k = 0; k < 4; k++)
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++)
					out[k][64 * i + 4 * r + j] = blk ? exl_amx_q6_K_level(blk, h, 2 * k + s, 4 * i + j) : 0;
	}
}

#ifndef EXL_AMX_PACK_Q6_K
#define EXL_AMX_PACK_Q6_K exl_amx_pack_q6_K
#endif


/* ---- IQ4_XS ----
 *
 * Per super-block the exact I = sum_j s_j * D_j over its 8 sub-blocks (D_j
 * the int32 dot of the levels, IQ4_NL's 16 values -127..113 as signed
 * bytes, against the act's int8; s_j the 6-bit scale less 32), then the
 * avx2 family's float steps, Q8_0's with super-blocks for blocks:
 * a[b % 8] = fmaf((float)I, d_w * d_x, a[b % 8]), and the tree of the 8.
 * So the set decodes it with avx2vnni's kernel.  Its act is theirs too:
 * act_q8_K's with each pair of sub-blocks as Q4_0's pairs of blocks
 * ([x0..15 of 2p | x0..15 of 2p + 1 | x16..31 of 2p | x16..31 of 2p + 1]),
 * so one step is a pair of sub-blocks on the pair tiles above. */

/* Sub-block j of super-block b of nr rows as levels in pack_b's layout:
 * B row i < 4 (to lo) holds elements 4i..4i+3 of each row, from the low
 * nibbles of qs[16j..16j+15], and row 4 + i (to hi) elements 16 + 4i..,
 * from the high ones; rows nr..15 zero. */
static inline void exl_amx_pack_iq4_xs(const uint8_t *w, size_t row_bytes, int64_t b, int j, int nr, int8_t *lo,
				       int8_t *hi)
{
	for (int i = 0; i < EXL_AMX_KB / 4; i++) {
		int8_t *out = i < 4 ? lo + 64 * i : hi + 64 * (i - 4);

		for (int r = 0; r < EXL_AMX_TR; r++)
			for (int k = 0; k < 4; k++) {
				const int e = 4 * i + k;
				int8_t v = 0;

				if (r < nr) {
					const block_iq4_xs *blk =
						(const block_iq4_xs *)(const void *)(w + (size_t)r * row_bytes) + b;
					const uint8_t q = blk->qs[16 * j + e % 16];

					v = (int8_t)exl_iq4nl_value(e < 16 ? q & 15 : q >> 4);
				}
				out[4 * r + k] = v;
			}
	}
}

#ifndef EXL_AMX_PACK_IQ4_XS
#define EXL_AMX_PACK_IQ4_XS exl_amx_pack_iq4_xs
#endif

/* The super-blocks go by residue, as the pairs above do, each residue's
 * sums joining the tree when done: residue k's sums a (k = 0..7, in
 * order; n floats) into ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)),
 * built in t[0..2]; after k = 7, t[0] holds it. */
static inline void exl_amx_tree_add(int k, const float *a, float *const t[3], size_t n)
{
	for (size_t i = 0; i < n; i++) {
		switch (k) {
		case 0: t[0][i] = a[i]; break;
		case 1: t[0][i] = t[0][i] + a[i]; break;
		case 2: t[1][i] = a[i]; break;
		case 3: t[0][i] = t[0][i] + (t[1][i] + a[i]); break;
		case 4: t[1][i] = a[i]; break;
		case 5: t[1][i] = t[1][i] + a[i]; break;
		case 6: t[2][i] = a[i]; break;
		default: t[0][i] = t[0][i] + (t[1][i] + (t[2][i] + a[i])); break;
		}
	}
}

/* Rows [r, r + nr) (nr <= 16) of an IQ4_XS matrix for vectors [c0, c1),
 * c1 - c0 <= 64.  The tile config is exl_amx_cfg_pairs. */
static inline void exl_amx_rows_batch_iq4_xs(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const uint8_t *w = m->w + (size_t)r * m->row_bytes;
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	const int ntiles = (nc + 15) / 16;
	const int single = 0, fmt = EXL_AMX_FMT_IQ4_NL; /* EXL_AMX_PAIR_TILE's: pairs order, never one alone */
	const size_t set_bytes = sizeof(float) * EXL_AMX_TR * (size_t)nc;
	float acc[16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	float tree[3][16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	float *const t3[3] = { tree[0][0], tree[1][0], tree[2][0] };
	int32_t isum[16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	_Alignas(64) int32_t dots[2][EXL_AMX_COL_TILES][16][EXL_AMX_TR];
	_Alignas(64) int8_t bt[2][EXL_AMX_TR * 64];
	_Alignas(64) int8_t apart[16 * 64];
	int32_t sc[8][EXL_AMX_TR];
	float d[EXL_AMX_TR];

	memset(bt, 0, sizeof(bt));
	for (int k = 0; k < 8; k++) {
		memset(acc, 0, set_bytes);
		for (int64_t b = k; b < nb; b += 8) {
			for (int l = 0; l < EXL_AMX_TR; l++) {
				const block_iq4_xs *bx =
					l < nr ? (const block_iq4_xs *)(const void *)(w + (size_t)l * m->row_bytes) + b
					       : NULL;

				d[l] = bx ? exl_fp16_to_fp32(bx->d) : 0.0f;
				for (int g = 0; g < 8; g++)
					sc[g][l] = bx ? exl_iq4_xs_scale(bx, g) : 0;
			}
			memset(isum, 0, sizeof(int32_t) * EXL_AMX_TR * (size_t)nc);
			for (int p = 0; p < 4; p++) {
				const size_t aoff = 256 * (size_t)b + 64 * (size_t)p;

				for (int h = 0; h < 2; h++) {
					int8_t *lo, *hi;

					exl_amx_pair_slots(bt[h], h, fmt, &lo, &hi);
					EXL_AMX_PACK_IQ4_XS(w, m->row_bytes, b, 2 * p + h, nr, lo, hi);
				}
				EXL_AMX_PAIR_TILES();
				for (int v = 0; v < nc; v++) {
					EXL_AMX_IPOST16(isum[v], dots[0][v / 16][v % 16], sc[2 * p]);
					EXL_AMX_IPOST16(isum[v], dots[1][v / 16][v % 16], sc[2 * p + 1]);
				}
			}
			for (int v = 0; v < nc; v++)
				EXL_AMX_POST16(acc[v], isum[v],
					       exl_act_q8_K_d(m->act + (size_t)(c0 + v) * m->act_stride, m->cols)[b], d);
		}
		exl_amx_tree_add(k, acc[0], t3, EXL_AMX_TR * (size_t)nc);
	}
	for (int v = 0; v < nc; v++)
		exl_amx_store_out(m, c0 + v, r, nr, tree[0][v]);
}

/* Rows [r, r + nr) (nr <= 16) of a Q6_K matrix for vectors [c0, c1),
 * c1 - c0 <= 64: an exact I over its 16 groups with an int8 scale each, one
 * FMA per super-block.  The tile config is exl_amx_cfg_batch16. */
static inline void exl_amx_rows_batch_q6_K(const struct exl_mm_ctx *m, int64_t r, int nr, int c0, int c1)
{
	const uint8_t *w = m->w + (size_t)r * m->row_bytes;
	const int64_t nb = m->cols / 256;
	const int nc = c1 - c0;
	float acc[16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	int32_t isum[16 * EXL_AMX_COL_TILES][EXL_AMX_TR];
	/* 4 groups of 4 x 64 bytes */
	_Alignas(64) int8_t bpack[4][4 * 64];
	int32_t sc[16][EXL_AMX_TR];
	float d[EXL_AMX_TR];

	memset(acc, 0, sizeof(float) * EXL_AMX_TR * (size_t)nc);
	for (int64_t b = 0; b < nb; b++) {
		for (int l = 0; l < EXL_AMX_TR; l++) {
			const block_q6_K *b6 =
				l < nr ? (const block_q6_K *)(const void *)(w + (size_t)l * m->row_bytes) + b : NULL;

			d[l] = b6 ? exl_fp16_to_fp32(b6->d) : 0.0f;
			for (int g = 0; g < 16; g++)
				sc[g][l] = b6 ? b6->scales[g] : 0;
		}
		memset(isum, 0, sizeof(int32_t) * EXL_AMX_TR * (size_t)nc);
		for (int h = 0; h < 2; h++)
			for (int s = 0; s < 2; s++) {
				EXL_AMX_PACK_Q6_K(w, m->row_bytes, b, h, s, nr, bpack);
				for (int k = 0; k < 4; k++) {
					const int g = 8 * h + 2 * k + s;

					exl_amx_kstep(m, c0, c1, 256 * (size_t)b + 16 * (size_t)g, 16, bpack[k], sc[g],
						      isum);
				}
			}
		for (int v = 0; v < nc; v++)
			EXL_AMX_POST16(acc[v], isum[v],
				       exl_act_q8_K_d(m->act + (size_t)(c0 + v) * m->act_stride, m->cols)[b], d);
	}
	for (int v = 0; v < nc; v++)
		exl_amx_store_out(m, c0 + v, r, nr, acc[v]);
}

/* Rows [r0, r1) x vectors [c0, c1) (at most 64) of a matrix of one of
 * those types, in groups of 16 rows (r0 a multiple of 8 for the repacked
 * ones, as matmul.c's chunks of 16 rows are). */
static inline void exl_amx_mm(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int type)
{
	struct exl_amx_cfg cfg;

	const int fmt = type == EXL_AMX_Q4_0 || type == EXL_AMX_Q4_0_R8	    ? EXL_AMX_FMT_Q4_0
			: type == EXL_AMX_IQ4_NL || type == EXL_AMX_IQ4_NL_R8 ? EXL_AMX_FMT_IQ4_NL
									      : EXL_AMX_FMT_Q8_0;

	/* Q6_K's 16-weight groups; every other type steps by pairs of blocks */
	if (type == EXL_AMX_Q6_K)
		exl_amx_cfg_batch16(&cfg);
	else
		exl_amx_cfg_pairs(&cfg);
	EXL_AMX_LOADCONFIG(&cfg);
	for (int64_t r = r0; r < r1; r += EXL_AMX_TR) {
		int nr = r1 - r < EXL_AMX_TR ? (int)(r1 - r) : EXL_AMX_TR;

		for (int c = c0; c < c1; c += 16 * EXL_AMX_COL_TILES) {
			int ce = c1 - c < 16 * EXL_AMX_COL_TILES ? c1 : c + 16 * EXL_AMX_COL_TILES;

			if (type == EXL_AMX_Q6_K)
				exl_amx_rows_batch_q6_K(m, r, nr, c, ce);
			else if (type == EXL_AMX_IQ4_XS)
				exl_amx_rows_batch_iq4_xs(m, r, nr, c, ce);
			else
				exl_amx_rows_pairs(m, r, nr, c, ce, fmt,
						   type == EXL_AMX_Q8_0_R8 || type == EXL_AMX_Q4_0_R8 ||
							   type == EXL_AMX_IQ4_NL_R8);
		}
	}
	EXL_AMX_RELEASE();
}

#endif

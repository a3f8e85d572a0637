/* The AMX-BF16 kernels' conversions in portable C: x and F16 weights split
 * into bf16 hi + lo, and the activations packed in pairs for the B tiles
 * (the layout and the arithmetic are in matmul_amx_bf16_body.h).  The
 * reference for matmul_amx_bf16.c's vector versions and their fallback for
 * the last columns. */
#ifndef EXL_CPU_MATMUL_AMX_BF16_SPLIT_H
#define EXL_CPU_MATMUL_AMX_BF16_SPLIT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/formats/elem.h"

/* Rows of a tile */
#define EXL_AMX_BF16_R 16
/* Columns per tile step */
#define EXL_AMX_BF16_K 32

/* x as x_hi + x_lo, each the nearest bf16 (ties to even; a NaN stays one) */
static inline void exl_amx_bf16_split(float x, uint16_t *hi, uint16_t *lo)
{
	*hi = exl_fp32_to_bf16(x);
	*lo = exl_fp32_to_bf16(x - exl_bf16_to_fp32(*hi));
}

/* A for columns [k0, k0 + 32) of nr F16 rows (row_bytes apart) as bf16
 * hi[r][e], lo[r][e]; rows nr..15 and columns past cols zero.  w_hi is the
 * top half of w as fp32 (truncated: 8 of its 11 significant bits, and a
 * NaN stays one) and w_lo = w - w_hi, whose at most 3 bits bf16 holds
 * exactly: w = w_hi + w_lo. */
static inline void exl_amx_stage_f16_portable(const uint8_t *w, size_t row_bytes, int nr, int64_t k0,
					      int64_t cols, uint16_t hi[EXL_AMX_BF16_R * EXL_AMX_BF16_K],
					      uint16_t lo[EXL_AMX_BF16_R * EXL_AMX_BF16_K])
{
	for (int r = 0; r < EXL_AMX_BF16_R; r++)
		for (int e = 0; e < EXL_AMX_BF16_K; e++) {
			float v = 0.0f, l;
			uint32_t u, ul;

			if (r < nr && k0 + e < cols) {
				uint16_t h;

				memcpy(&h, w + (size_t)r * row_bytes + 2 * (size_t)(k0 + e), 2);
				v = exl_fp16_to_fp32(h);
			}
			memcpy(&u, &v, 4);
			l = v - exl_bits_f32(u & 0xffff0000u);
			memcpy(&ul, &l, 4);
			hi[EXL_AMX_BF16_K * r + e] = (uint16_t)(u >> 16);
			lo[EXL_AMX_BF16_K * r + e] = (uint16_t)(ul >> 16);
		}
}

/* The same for BF16 rows where a tile load would read past a row (the last
 * columns when cols is not a multiple of 32): the weights as they are. */
static inline void exl_amx_stage_bf16(const uint8_t *w, size_t row_bytes, int nr, int64_t k0, int64_t cols,
				      uint16_t out[EXL_AMX_BF16_R * EXL_AMX_BF16_K])
{
	for (int r = 0; r < EXL_AMX_BF16_R; r++)
		for (int e = 0; e < EXL_AMX_BF16_K; e++) {
			uint16_t h = 0;

			if (r < nr && k0 + e < cols)
				memcpy(&h, w + (size_t)r * row_bytes + 2 * (size_t)(k0 + e), 2);
			out[EXL_AMX_BF16_K * r + e] = h;
		}
}

static inline int64_t exl_amx_bf16_kp(int64_t cols)
{
	return (cols + EXL_AMX_BF16_K - 1) / EXL_AMX_BF16_K * EXL_AMX_BF16_K;
}

/* Packs vectors [i0, i1) of the n in x ([n][cols]) into the act layout of
 * matmul_amx_bf16_body.h (the set's act_f16; the pool's threads take disjoint ranges). */
static inline void exl_amx_act_bf16_portable(const float *x, int64_t cols, int n, int i0, int i1, uint8_t *act,
					     size_t act_stride)
{
	const int64_t half = exl_amx_bf16_kp(cols) / 2;

	for (int i = i0; i < i1; i++) {
		const int g = i / 16, j = i % 16, ng = n - 16 * g < 16 ? n - 16 * g : 16;
		uint8_t *hi = act + 16 * (size_t)g * act_stride + 4 * (size_t)j;
		uint8_t *lo = hi + 4 * (size_t)ng * (size_t)half;
		const float *xi = x + (size_t)i * (size_t)cols;

		for (int64_t k = 0; k < half; k++) {
			uint16_t h[2], l[2];

			for (int e = 0; e < 2; e++)
				exl_amx_bf16_split(2 * k + e < cols ? xi[2 * k + e] : 0.0f, &h[e], &l[e]);
			memcpy(hi + 4 * (size_t)ng * (size_t)k, h, 4);
			memcpy(lo + 4 * (size_t)ng * (size_t)k, l, 4);
		}
	}
}

#endif

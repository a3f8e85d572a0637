/* Weights into the layouts of kernels/cpu/repack.h.  Run once per weight
 * at load, on the loading thread. */
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/repack.h"
#include "kernels/formats/dtype.h"

size_t exl_cpu_repack_bytes(uint32_t type, uint32_t layout, int64_t rows, int64_t cols)
{
	if ((type != EXL_Q4_0 && type != EXL_IQ4_NL && type != EXL_Q4_K && type != EXL_Q8_0) ||
	    layout != EXL_LAYOUT_ROWS8 ||
	    rows <= 0 || cols <= 0 || cols % (int64_t)exl_dtype_info(type)->block_elems)
		return 0;
	return (size_t)((rows + 7) / 8) * 8 * exl_dtype_row_bytes(type, (uint64_t)cols);
}

/* Q4_0, IQ4_NL and Q8_0: 32-weight blocks of an fp16 d, then dwords 4
 * (Q4_0's and IQ4_NL's 16 bytes of nibbles) or 8 (Q8_0's 32 int8).  A block of a group is the 8
 * rows' d, then dword k of all 8 rows, for each k in turn. */
static void rows8_blocks32(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols, int dwords)
{
	const int64_t nb = cols / 32;
	const size_t blk_bytes = 2 + 4 * (size_t)dwords, out_bytes = 8 * blk_bytes;
	const size_t rb = (size_t)nb * blk_bytes;

	for (int64_t g = 0; g < (rows + 7) / 8; g++) {
		for (int64_t b = 0; b < nb; b++) {
			uint8_t *o = dst + ((size_t)g * (size_t)nb + (size_t)b) * out_bytes;

			memset(o, 0, out_bytes);
			for (int i = 0; i < 8 && 8 * g + i < rows; i++) {
				const uint8_t *blk = src + (size_t)(8 * g + i) * rb + (size_t)b * blk_bytes;

				memcpy(o + 2 * i, blk, 2);
				for (int k = 0; k < dwords; k++)
					memcpy(o + 16 + 32 * k + 4 * i, blk + 2 + 4 * k, 4);
			}
		}
	}
}

#define Q4_K_BLOCK 144 /* fp16 d, dmin, scales[12], qs[128] */
#define ROWS8_Q4_K_BLOCK (8 * Q4_K_BLOCK)

static void rows8_q4_K(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols)
{
	const int64_t nb = cols / 256;
	const size_t rb = (size_t)nb * Q4_K_BLOCK;

	for (int64_t g = 0; g < (rows + 7) / 8; g++) {
		for (int64_t b = 0; b < nb; b++) {
			uint8_t *o = dst + ((size_t)g * (size_t)nb + (size_t)b) * ROWS8_Q4_K_BLOCK;

			memset(o, 0, ROWS8_Q4_K_BLOCK);
			for (int i = 0; i < 8 && 8 * g + i < rows; i++) {
				const uint8_t *blk = src + (size_t)(8 * g + i) * rb + (size_t)b * Q4_K_BLOCK;

				memcpy(o + 2 * i, blk, 2);            /* d */
				memcpy(o + 16 + 2 * i, blk + 2, 2);   /* dmin */
				for (int u = 0; u < 3; u++)           /* scales, 4 bytes at a time */
					memcpy(o + 32 + 32 * u + 4 * i, blk + 4 + 4 * u, 4);
				for (int k = 0; k < 4; k++)
					for (int d = 0; d < 8; d++)
						memcpy(o + 128 + 256 * k + 32 * d + 4 * i, blk + 16 + 32 * k + 4 * d, 4);
			}
		}
	}
}

int exl_cpu_repack(uint32_t type, uint32_t layout, const void *src, void *dst, int64_t rows, int64_t cols)
{
	if (!exl_cpu_repack_bytes(type, layout, rows, cols))
		return -1;
	if (type == EXL_Q4_K)
		rows8_q4_K(src, dst, rows, cols);
	else
		rows8_blocks32(src, dst, rows, cols, type == EXL_Q8_0 ? 8 : 4);
	return 0;
}

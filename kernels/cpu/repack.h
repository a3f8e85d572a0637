/* Weights repacked at load into the layout a kernel set reads fastest
 * (struct exl_weight.layout, kernels/backend.h).
 *
 * EXL_LAYOUT_ROWS8, Q4_0: rows in groups of 8 (the last padded with zero
 * rows), each group block by block.  Block b of a group is 144 bytes:
 *   fp16 d[8]             row i's scale of block b
 *   uint8 q[4][8][4]      q[k][i] = bytes 4k..4k+3 of row i's qs
 * so one 32-byte load gives 4 bytes of nibbles of all 8 rows, the operand
 * of one vpdpbusd (or maddubs) against 4 bytes of x broadcast.  The
 * kernels that read GGUF rows get there with a transpose in registers per
 * block and 8 rows (nib16_rows8), or for one row with horizontal sums per
 * block; decode spends most of its instructions on those.  A group takes
 * 8 * row_bytes, as its rows did.
 *
 * EXL_LAYOUT_ROWS8, IQ4_NL: Q4_0's, its blocks being Q4_0's shape (the
 * nibbles index the IQ4 levels where Q4_0's are levels less 8).
 *
 * EXL_LAYOUT_ROWS8, Q8_0: the same groups; block b of a group is 272
 * bytes, fp16 d[8] then q[8][8][4] (q[k][i] = bytes 4k..4k+3 of row i's
 * 32 int8), one 32-byte load 4 weights of all 8 rows (dwords_rows8's
 * transpose, done once).
 *
 * EXL_LAYOUT_ROWS8, Q4_K: the same groups; super-block b of a group is
 * 1152 bytes:
 *   fp16 d[8], fp16 dmin[8]
 *   uint32 u[3][8]        u[k][i] = bytes 4k..4k+3 of row i's scales[12]
 *   uint8 q[4][8][8][4]   q[c][k][i] = bytes 4k..4k+3 of row i's 32-byte
 *                         chunk c of qs (sub-block 2c in the low nibbles,
 *                         2c + 1 in the high)
 * so the 6-bit scales and mins of 8 rows unpack as 8 lanes at once, and
 * one 32-byte load of q is 4 weights of a sub-block of all 8 rows.
 */
#ifndef EXL_CPU_REPACK_H
#define EXL_CPU_REPACK_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of rows x cols of type in layout, or 0 when it has no such form. */
size_t exl_cpu_repack_bytes(uint32_t type, uint32_t layout, int64_t rows, int64_t cols);

/* dst (exl_cpu_repack_bytes of it) = the rows x cols of type at src (GGUF
 * rows) in layout.  Returns 0, or -1 when the type has no such form. */
int exl_cpu_repack(uint32_t type, uint32_t layout, const void *src, void *dst, int64_t rows, int64_t cols);

#endif

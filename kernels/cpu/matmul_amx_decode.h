/* The "amx" set's Q6_K decode without tiles (matmul_amx_decode.c, AVX-512
 * VNNI): the outputs of the tile kernels, bit for bit.  (Its Q8_0, Q4_0,
 * IQ4_NL and IQ4_XS decode are avx2vnni's kernels, matmul_amx.c; its Q4_K
 * and Q5_K are avx512vnni's for every n.)
 * matmul_amx.c calls it for n <= EXL_AMX_DECODE_MAX_N; test_amx_layout
 * checks it against the emulated tiles. */
#ifndef EXL_CPU_MATMUL_AMX_DECODE_H
#define EXL_CPU_MATMUL_AMX_DECODE_H

#include <stdint.h>

#include "kernels/cpu/matmul_impl.h"

#define EXL_AMX_DECODE_MAX_N 4

/* The types the set runs on tiles (the enum is exl_amx_mm's type); not
 * Q4_K and Q5_K, avx512vnni's kernels being faster than tiles there */
enum {
	EXL_AMX_Q8_0,
	EXL_AMX_Q4_0,
	EXL_AMX_IQ4_NL,
	EXL_AMX_Q8_0_R8, /* repacked, EXL_LAYOUT_ROWS8: tiles only */
	EXL_AMX_Q4_0_R8,
	EXL_AMX_IQ4_NL_R8,
	EXL_AMX_Q6_K,
	EXL_AMX_IQ4_XS,
};

/* y[c][r] for rows [r0, r1) and vectors [c0, c1) (c1 - c0 <=
 * EXL_AMX_DECODE_MAX_N) of a Q6_K matrix (type EXL_AMX_Q6_K); act rows from
 * exl_act_q8_K_*, element order. */
void exl_amx_decode(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int type);

/* The same compiled over SIMDe's emulation of AVX-512 (test builds only,
 * tests/unit/amx_decode_simde.c; AVX2 needed). */
void exl_amx_decode_simde(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int type);

#endif

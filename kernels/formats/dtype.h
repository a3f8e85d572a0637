/* Tensor element types as GGUF numbers them, and their block layout.
 *
 * The numbering is GGML's (and therefore GGUF's on-disk) numbering; it must
 * never be renumbered.  Types the engine cannot compute are still described
 * here so the GGUF reader can validate the data ranges of any file.
 */
#ifndef EXL_DTYPE_H
#define EXL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum exl_dtype {
	EXL_F32 = 0,
	EXL_F16 = 1,
	EXL_Q4_0 = 2,
	EXL_Q4_1 = 3,
	/* 4 and 5 were Q4_2 and Q4_3, removed from GGML */
	EXL_Q5_0 = 6,
	EXL_Q5_1 = 7,
	EXL_Q8_0 = 8,
	EXL_Q8_1 = 9,
	EXL_Q2_K = 10,
	EXL_Q3_K = 11,
	EXL_Q4_K = 12,
	EXL_Q5_K = 13,
	EXL_Q6_K = 14,
	EXL_Q8_K = 15,
	EXL_IQ2_XXS = 16,
	EXL_IQ2_XS = 17,
	EXL_IQ3_XXS = 18,
	EXL_IQ1_S = 19,
	EXL_IQ4_NL = 20,
	EXL_IQ3_S = 21,
	EXL_IQ2_S = 22,
	EXL_IQ4_XS = 23,
	EXL_I8 = 24,
	EXL_I16 = 25,
	EXL_I32 = 26,
	EXL_I64 = 27,
	EXL_F64 = 28,
	EXL_IQ1_M = 29,
	EXL_BF16 = 30,
	/* 31..33 were Q4_0_4_4 and friends, removed */
	EXL_TQ1_0 = 34,
	EXL_TQ2_0 = 35,
	/* 36..38 were IQ4_NL_4_4 and friends, removed */
	EXL_MXFP4 = 39,
	EXL_DTYPE_COUNT = 40,
};

struct exl_dtype_info {
	const char *name;    /* "q8_0"; NULL for an unused number */
	uint32_t block_elems; /* elements per block (1 for plain types) */
	uint32_t block_bytes; /* bytes per block */
};

/* NULL when t is not a known type number. */
const struct exl_dtype_info *exl_dtype_info(uint32_t t);

/* Bytes taken by a row of n elements, or 0 when n is not a whole number of
 * blocks or t is unknown. */
size_t exl_dtype_row_bytes(uint32_t t, uint64_t n);

/* The alignment t's data needs where code reads it in place as elements or
 * block structs: 4 for F32 and I32, 8 for I64 and F64, 1 for I8 and MXFP4
 * (bytes only, 17-byte blocks), 2 for the rest (every other block struct
 * holds 16-bit fields); 1 when t is unknown. */
size_t exl_dtype_align(uint32_t t);

#define QK8_0 32
#define QK4_0 32
#define QK_K 256

#endif

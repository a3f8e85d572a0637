#include "kernels/formats/dtype.h"

static const struct exl_dtype_info dtype_table[EXL_DTYPE_COUNT] = {
	[EXL_F32] = { "f32", 1, 4 },
	[EXL_F16] = { "f16", 1, 2 },
	[EXL_Q4_0] = { "q4_0", 32, 18 },
	[EXL_Q4_1] = { "q4_1", 32, 20 },
	[EXL_Q5_0] = { "q5_0", 32, 22 },
	[EXL_Q5_1] = { "q5_1", 32, 24 },
	[EXL_Q8_0] = { "q8_0", 32, 34 },
	[EXL_Q8_1] = { "q8_1", 32, 36 },
	[EXL_Q2_K] = { "q2_k", 256, 84 },
	[EXL_Q3_K] = { "q3_k", 256, 110 },
	[EXL_Q4_K] = { "q4_k", 256, 144 },
	[EXL_Q5_K] = { "q5_k", 256, 176 },
	[EXL_Q6_K] = { "q6_k", 256, 210 },
	[EXL_Q8_K] = { "q8_k", 256, 292 },
	[EXL_IQ2_XXS] = { "iq2_xxs", 256, 66 },
	[EXL_IQ2_XS] = { "iq2_xs", 256, 74 },
	[EXL_IQ3_XXS] = { "iq3_xxs", 256, 98 },
	[EXL_IQ1_S] = { "iq1_s", 256, 50 },
	[EXL_IQ4_NL] = { "iq4_nl", 32, 18 },
	[EXL_IQ3_S] = { "iq3_s", 256, 110 },
	[EXL_IQ2_S] = { "iq2_s", 256, 82 },
	[EXL_IQ4_XS] = { "iq4_xs", 256, 136 },
	[EXL_I8] = { "i8", 1, 1 },
	[EXL_I16] = { "i16", 1, 2 },
	[EXL_I32] = { "i32", 1, 4 },
	[EXL_I64] = { "i64", 1, 8 },
	[EXL_F64] = { "f64", 1, 8 },
	[EXL_IQ1_M] = { "iq1_m", 256, 56 },
	[EXL_BF16] = { "bf16", 1, 2 },
	[EXL_TQ1_0] = { "tq1_0", 256, 54 },
	[EXL_TQ2_0] = { "tq2_0", 256, 66 },
	[EXL_MXFP4] = { "mxfp4", 32, 17 },
};

const struct exl_dtype_info *exl_dtype_info(uint32_t t)
{
	if (t >= EXL_DTYPE_COUNT || !dtype_table[t].name)
		return NULL;
	return &dtype_table[t];
}

size_t exl_dtype_align(uint32_t t)
{
	switch (t) {
	case EXL_F32: case EXL_I32: return 4;
	case EXL_I64: case EXL_F64: return 8;
	case EXL_I8: case EXL_MXFP4: return 1;
	default: return exl_dtype_info(t) ? 2 : 1;
	}
}

size_t exl_dtype_row_bytes(uint32_t t, uint64_t n)
{
	const struct exl_dtype_info *info = exl_dtype_info(t);

	if (!info || n % info->block_elems)
		return 0;
	uint64_t blocks = n / info->block_elems;
	if (blocks > SIZE_MAX / info->block_bytes)
		return 0;
	return (size_t)(blocks * info->block_bytes);
}

/* Row quantization / dequantization dispatch and the simple formats
 * (F32, F16, BF16, Q8_0, Q4_0, Q8_K).  K-quant searches: quant_k.c. */
#include <math.h>
#include <string.h>

#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/quant.h"
#include "kernels/formats/quant_internal.h"

bool exl_dtype_supported(uint32_t type)
{
	switch (type) {
	case EXL_F32:
	case EXL_F16:
	case EXL_BF16:
	case EXL_Q8_0:
	case EXL_Q4_0:
	case EXL_Q4_K:
	case EXL_Q6_K:
		return true;
	default:
		return false;
	}
}

bool exl_quantize_supported(uint32_t type)
{
	return exl_dtype_supported(type);
}

void exl_quantize_row_q8_0_ref(const float *x, void *dst, int64_t n)
{
	block_q8_0 *y = dst;

	for (int64_t b = 0; b < n / EXL_QK8_0; b++, x += EXL_QK8_0) {
		float amax = 0;

		for (int i = 0; i < EXL_QK8_0; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		float d = amax / 127.0f;
		float id = d > 0 ? 1.0f / d : 0.0f;

		y[b].d = exl_fp32_to_fp16(d);
		for (int i = 0; i < EXL_QK8_0; i++) {
			int q = exl_nearest_int(x[i] * id);
			y[b].qs[i] = (int8_t)(q < -127 ? -127 : q > 127 ? 127 : q);
		}
	}
}

void exl_quantize_row_q8_K_ref(const float *x, void *dst, int64_t n)
{
	block_q8_K *y = dst;

	for (int64_t b = 0; b < n / EXL_QK_K; b++, x += EXL_QK_K) {
		float amax = 0;

		for (int i = 0; i < EXL_QK_K; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		float d = amax / 127.0f;
		float id = d > 0 ? 1.0f / d : 0.0f;

		y[b].d = d;
		for (int g = 0; g < EXL_QK_K / 16; g++) {
			int sum = 0;

			for (int i = 16 * g; i < 16 * g + 16; i++) {
				int q = exl_nearest_int(x[i] * id);
				q = q < -127 ? -127 : q > 127 ? 127 : q;
				y[b].qs[i] = (int8_t)q;
				sum += q;
			}
			y[b].bsums[g] = (int16_t)sum;
		}
	}
}

/* Q4_0: the value of largest magnitude maps to level -8 (so the 16 levels
 * -8..7 cover it exactly whatever its sign). */
static void quantize_row_q4_0(const float *x, block_q4_0 *y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += EXL_QK4_0) {
		float amax = 0, extreme = 0;

		for (int i = 0; i < EXL_QK4_0; i++) {
			if (fabsf(x[i]) > amax) {
				amax = fabsf(x[i]);
				extreme = x[i];
			}
		}
		float d = extreme / -8.0f;
		float id = d != 0 ? 1.0f / d : 0.0f;

		y[b].d = exl_fp32_to_fp16(d);
		for (int j = 0; j < EXL_QK4_0 / 2; j++) {
			int q0 = exl_nearest_int(x[j] * id) + 8;
			int q1 = exl_nearest_int(x[j + EXL_QK4_0 / 2] * id) + 8;

			q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
			q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
			y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

static int64_t whole_blocks(uint32_t type, int64_t n)
{
	const struct exl_dtype_info *info = exl_dtype_info(type);

	if (!info || n <= 0 || n % info->block_elems)
		return -1;
	return n / info->block_elems;
}

size_t exl_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
	int64_t nb = whole_blocks(type, n);

	if (nb < 0 || !exl_quantize_supported(type))
		return 0;

	switch (type) {
	case EXL_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		break;
	case EXL_F16: {
		uint16_t *y = dst;
		for (int64_t i = 0; i < n; i++)
			y[i] = exl_fp32_to_fp16(src[i]);
		break;
	}
	case EXL_BF16: {
		uint16_t *y = dst;
		for (int64_t i = 0; i < n; i++)
			y[i] = exl_fp32_to_bf16(src[i]);
		break;
	}
	case EXL_Q8_0:
		exl_quantize_row_q8_0_ref(src, dst, n);
		break;
	case EXL_Q4_0:
		quantize_row_q4_0(src, dst, nb);
		break;
	case EXL_Q4_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q4_K(src + b * EXL_QK_K, (block_q4_K *)dst + b);
		break;
	case EXL_Q6_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q6_K(src + b * EXL_QK_K, (block_q6_K *)dst + b);
		break;
	default:
		return 0;
	}
	return exl_dtype_row_bytes(type, (uint64_t)n);
}

int exl_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
	int64_t nb = whole_blocks(type, n);

	if (nb < 0)
		return -1;

	switch (type) {
	case EXL_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		return 0;
	case EXL_F16: {
		const uint16_t *x = src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = exl_fp16_to_fp32(x[i]);
		return 0;
	}
	case EXL_BF16: {
		const uint16_t *x = src;
		for (int64_t i = 0; i < n; i++)
			dst[i] = exl_bf16_to_fp32(x[i]);
		return 0;
	}
	case EXL_Q8_0:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q8_0((const block_q8_0 *)src + b, dst + b * EXL_QK8_0);
		return 0;
	case EXL_Q4_0:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q4_0((const block_q4_0 *)src + b, dst + b * EXL_QK4_0);
		return 0;
	case EXL_Q4_K:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q4_K((const block_q4_K *)src + b, dst + b * EXL_QK_K);
		return 0;
	case EXL_Q5_K:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q5_K((const block_q5_K *)src + b, dst + b * EXL_QK_K);
		return 0;
	case EXL_Q6_K:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q6_K((const block_q6_K *)src + b, dst + b * EXL_QK_K);
		return 0;
	case EXL_Q8_K:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q8_K((const block_q8_K *)src + b, dst + b * EXL_QK_K);
		return 0;
	default:
		return -1;
	}
}

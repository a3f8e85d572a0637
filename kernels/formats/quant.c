/* Row quantization / dequantization dispatch and the simple formats
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q8_K).  K-quant and
 * IQ4 scale searches: quant_k.c. */
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
	case EXL_Q4_1:
	case EXL_Q5_0:
	case EXL_Q5_1:
	case EXL_IQ4_NL:
	case EXL_MXFP4:
	case EXL_Q2_K:
	case EXL_Q3_K:
	case EXL_Q4_K:
	case EXL_Q5_K:
	case EXL_Q6_K:
	case EXL_IQ4_XS:
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

/* Q5_0: as Q4_0 with 32 levels, the extreme at -16.  The levels are
 * rounded against the scale as stored (fp16). */
static void quantize_row_q5_0(const float *x, block_q5_0 *y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += EXL_QK4_0) {
		float amax = 0, extreme = 0;
		uint32_t qh = 0;

		for (int i = 0; i < EXL_QK4_0; i++) {
			if (fabsf(x[i]) > amax) {
				amax = fabsf(x[i]);
				extreme = x[i];
			}
		}
		y[b].d = exl_fp32_to_fp16(extreme / -16.0f);
		float d = exl_fp16_to_fp32(y[b].d);
		float id = d != 0 ? 1.0f / d : 0.0f;

		for (int j = 0; j < EXL_QK4_0 / 2; j++) {
			int q0 = exl_nearest_int(x[j] * id) + 16;
			int q1 = exl_nearest_int(x[j + EXL_QK4_0 / 2] * id) + 16;

			q0 = q0 < 0 ? 0 : q0 > 31 ? 31 : q0;
			q1 = q1 < 0 ? 0 : q1 > 31 ? 31 : q1;
			y[b].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
			qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
		}
		for (int k = 0; k < 4; k++)
			y[b].qh[k] = (uint8_t)(qh >> (8 * k));
	}
}

/* Q4_1 / Q5_1: levels 0..nmax spread over [min, max] of the block, the
 * offset the minimum; levels rounded against d and m as stored.  Writes
 * d, m, the levels to L. */
static void fit_block_min(const float *x, int nmax, uint16_t *dh, uint16_t *mh, uint8_t *L)
{
	float lo = x[0], hi = x[0];

	for (int i = 1; i < EXL_QK4_0; i++) {
		lo = fminf(lo, x[i]);
		hi = fmaxf(hi, x[i]);
	}
	*dh = exl_fp32_to_fp16((hi - lo) / (float)nmax);
	*mh = exl_fp32_to_fp16(lo);
	float d = exl_fp16_to_fp32(*dh), m = exl_fp16_to_fp32(*mh);
	float id = d != 0 ? 1.0f / d : 0.0f;

	for (int i = 0; i < EXL_QK4_0; i++) {
		int q = exl_nearest_int((x[i] - m) * id);
		L[i] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
	}
}

static void quantize_row_q4_1(const float *x, block_q4_1 *y, int64_t nb)
{
	uint8_t L[EXL_QK4_0];

	for (int64_t b = 0; b < nb; b++, x += EXL_QK4_0) {
		fit_block_min(x, 15, &y[b].d, &y[b].m, L);
		for (int j = 0; j < EXL_QK4_0 / 2; j++)
			y[b].qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
	}
}

static void quantize_row_q5_1(const float *x, block_q5_1 *y, int64_t nb)
{
	uint8_t L[EXL_QK4_0];

	for (int64_t b = 0; b < nb; b++, x += EXL_QK4_0) {
		uint32_t qh = 0;

		fit_block_min(x, 31, &y[b].d, &y[b].m, L);
		for (int j = 0; j < EXL_QK4_0 / 2; j++) {
			y[b].qs[j] = (uint8_t)((L[j] & 0x0f) | (L[j + 16] & 0x0f) << 4);
			qh |= (uint32_t)(L[j] >> 4) << j | (uint32_t)(L[j + 16] >> 4) << (j + 16);
		}
		for (int k = 0; k < 4; k++)
			y[b].qh[k] = (uint8_t)(qh >> (8 * k));
	}
}

static void quantize_row_iq4_nl(const float *x, block_iq4_nl *y, int64_t nb)
{
	uint8_t L[EXL_QK4_0];

	for (int64_t b = 0; b < nb; b++, x += EXL_QK4_0) {
		float d = exl_fit_iq4(x, L);

		y[b].d = exl_fp32_to_fp16(d);
		exl_round_iq4(x, exl_fp16_to_fp32(y[b].d), L);
		for (int j = 0; j < EXL_QK4_0 / 2; j++)
			y[b].qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
	}
}

/* The index of the level nearest x / d, the first of equals (0 before -0),
 * as GGML's best_index_mxfp4 picks it: the errors |level * d - x| in float. */
static int nearest_mxfp4(float x, float d)
{
	int best = 0;
	float best_err = fabsf((float)exl_mxfp4_value(0) * d - x);

	for (int i = 1; i < 16; i++) {
		float err = fabsf((float)exl_mxfp4_value(i) * d - x);

		if (err < best_err) {
			best = i;
			best_err = err;
		}
	}
	return best;
}

/* MXFP4 as GGML's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127,
 * which puts amax in [4, 8) times 2^(e - 127), i.e. levels 8..12 of the
 * doubled E2M1 scale 2^(e - 128) (log2f as GGML takes it, so the same e
 * where it rounds up just below a power of two); an all-zero block e 0.
 * Clamped to 0..255 where GGML's conversion would leave the uint8_t range
 * (amax under 2^-125 or from 2^131). */
static void quantize_row_mxfp4(const float *x, block_mxfp4 *y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += EXL_QK4_0) {
		float amax = 0;

		for (int i = 0; i < EXL_QK4_0; i++)
			if (amax < fabsf(x[i]))
				amax = fabsf(x[i]);
		uint8_t e = 0;
		if (amax > 0) {
			float t = floorf(log2f(amax)) - 2 + 127;

			e = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
		}
		float d = exl_e8m0_half(e);

		y[b].e = e;
		for (int j = 0; j < EXL_QK4_0 / 2; j++)
			y[b].qs[j] = (uint8_t)(nearest_mxfp4(x[j], d) | nearest_mxfp4(x[j + EXL_QK4_0 / 2], d) << 4);
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
	case EXL_Q4_1:
		quantize_row_q4_1(src, dst, nb);
		break;
	case EXL_Q5_0:
		quantize_row_q5_0(src, dst, nb);
		break;
	case EXL_Q5_1:
		quantize_row_q5_1(src, dst, nb);
		break;
	case EXL_IQ4_NL:
		quantize_row_iq4_nl(src, dst, nb);
		break;
	case EXL_MXFP4:
		quantize_row_mxfp4(src, dst, nb);
		break;
	case EXL_Q2_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q2_K(src + b * EXL_QK_K, (block_q2_K *)dst + b);
		break;
	case EXL_Q3_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q3_K(src + b * EXL_QK_K, (block_q3_K *)dst + b);
		break;
	case EXL_Q4_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q4_K(src + b * EXL_QK_K, (block_q4_K *)dst + b);
		break;
	case EXL_Q5_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q5_K(src + b * EXL_QK_K, (block_q5_K *)dst + b);
		break;
	case EXL_Q6_K:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_q6_K(src + b * EXL_QK_K, (block_q6_K *)dst + b);
		break;
	case EXL_IQ4_XS:
		for (int64_t b = 0; b < nb; b++)
			exl_quantize_block_iq4_xs(src + b * EXL_QK_K, (block_iq4_xs *)dst + b);
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
	case EXL_Q4_1:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q4_1((const block_q4_1 *)src + b, dst + b * EXL_QK4_0);
		return 0;
	case EXL_Q5_0:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q5_0((const block_q5_0 *)src + b, dst + b * EXL_QK4_0);
		return 0;
	case EXL_Q5_1:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q5_1((const block_q5_1 *)src + b, dst + b * EXL_QK4_0);
		return 0;
	case EXL_IQ4_NL:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_iq4_nl((const block_iq4_nl *)src + b, dst + b * EXL_QK4_0);
		return 0;
	case EXL_MXFP4:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_mxfp4((const block_mxfp4 *)src + b, dst + b * EXL_QK4_0);
		return 0;
	case EXL_Q2_K:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q2_K((const block_q2_K *)src + b, dst + b * EXL_QK_K);
		return 0;
	case EXL_Q3_K:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_q3_K((const block_q3_K *)src + b, dst + b * EXL_QK_K);
		return 0;
	case EXL_IQ4_XS:
		for (int64_t b = 0; b < nb; b++)
			exl_dequant_iq4_xs((const block_iq4_xs *)src + b, dst + b * EXL_QK_K);
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

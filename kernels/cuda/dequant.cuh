/* Weight access for the CUDA matmul and embed kernels, by weight type
 * (template parameter, so each kernel is compiled per type).
 *
 * Quantized types are read 32 weights at a time ("parts": part c of a row is
 * weights 32c .. 32c + 31: a whole block of the 32-weight types, a
 * sub-block of the 256-weight ones) with the shared code of
 * kernels/formats/elem.h and kernels/formats/elem_math.h; plain types one
 * element at a time. */
#ifndef EXL_CUDA_DEQUANT_CUH
#define EXL_CUDA_DEQUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/formats/elem_math.h"

extern "C" {
#include "kernels/formats/dtype.h"
}

#define PART 32

template <int T> struct wtype;

template <> struct wtype<EXL_Q8_0> { static const bool quant = true; };
template <> struct wtype<EXL_Q4_0> { static const bool quant = true; };
template <> struct wtype<EXL_Q4_K> { static const bool quant = true; };
template <> struct wtype<EXL_Q6_K> { static const bool quant = true; };
template <> struct wtype<EXL_Q4_1> { static const bool quant = true; };
template <> struct wtype<EXL_Q5_0> { static const bool quant = true; };
template <> struct wtype<EXL_Q5_1> { static const bool quant = true; };
template <> struct wtype<EXL_IQ4_NL> { static const bool quant = true; };
template <> struct wtype<EXL_MXFP4> { static const bool quant = true; };
template <> struct wtype<EXL_Q2_K> { static const bool quant = true; };
template <> struct wtype<EXL_Q3_K> { static const bool quant = true; };
template <> struct wtype<EXL_Q5_K> { static const bool quant = true; };
template <> struct wtype<EXL_IQ4_XS> { static const bool quant = true; };
template <> struct wtype<EXL_F32> { static const bool quant = false; };
template <> struct wtype<EXL_F16> { static const bool quant = false; };
template <> struct wtype<EXL_BF16> { static const bool quant = false; };

/* Part c of a quantized row into y[32]. */
template <int T>
static __device__ __forceinline__ void load_part(const uint8_t *row, int c, float *y)
{
	if constexpr (T == EXL_Q8_0) {
		exl_dequant_q8_0((const block_q8_0 *)row + c, y);
	} else if constexpr (T == EXL_Q4_0) {
		exl_dequant_q4_0((const block_q4_0 *)row + c, y);
	} else if constexpr (T == EXL_Q4_K) {
		exl_dequant_q4_K_part((const block_q4_K *)row + c / 8, c % 8, y);
	} else if constexpr (T == EXL_Q6_K) {
		exl_dequant_q6_K_part((const block_q6_K *)row + c / 8, c % 8, y);
	} else if constexpr (T == EXL_Q4_1) {
		exl_dequant_q4_1((const block_q4_1 *)row + c, y);
	} else if constexpr (T == EXL_Q5_0) {
		exl_dequant_q5_0((const block_q5_0 *)row + c, y);
	} else if constexpr (T == EXL_Q5_1) {
		exl_dequant_q5_1((const block_q5_1 *)row + c, y);
	} else if constexpr (T == EXL_IQ4_NL) {
		exl_dequant_iq4_nl((const block_iq4_nl *)row + c, y);
	} else if constexpr (T == EXL_MXFP4) {
		/* a struct of bytes: any address */
		exl_dequant_mxfp4((const block_mxfp4 *)row + c, y);
	} else if constexpr (T == EXL_Q2_K) {
		exl_dequant_q2_K_part((const block_q2_K *)row + c / 8, c % 8, y);
	} else if constexpr (T == EXL_Q3_K) {
		exl_dequant_q3_K_part((const block_q3_K *)row + c / 8, c % 8, y);
	} else if constexpr (T == EXL_Q5_K) {
		exl_dequant_q5_K_part((const block_q5_K *)row + c / 8, c % 8, y);
	} else if constexpr (T == EXL_IQ4_XS) {
		exl_dequant_iq4_xs_part((const block_iq4_xs *)row + c / 8, c % 8, y);
	}
}

/* Element k of a plain row. */
template <int T>
static __device__ __forceinline__ float load_elem(const uint8_t *row, int k)
{
	if constexpr (T == EXL_F32)
		return ((const float *)row)[k];
	else if constexpr (T == EXL_F16)
		return exl_fp16_to_fp32(((const uint16_t *)row)[k]);
	else
		return exl_bf16_to_fp32(((const uint16_t *)row)[k]);
}

/* Elements k .. k + 7 of a plain row, one 16-byte load: k a multiple of 8
 * and the row 16-byte aligned. */
template <int T>
static __device__ __forceinline__ void load_elem8(const uint8_t *row, int k, float *w)
{
	if constexpr (T == EXL_F32) {
		const float4 *p = (const float4 *)(row + 4 * (size_t)k);
		const float4 a = p[0], b = p[1];

		w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
		w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
	} else {
		const uint4 v = *(const uint4 *)(row + 2 * (size_t)k);
		const uint32_t u[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			if constexpr (T == EXL_F16) {
				w[2 * i] = __half2float(__ushort_as_half((unsigned short)(u[i] & 0xffffu)));
				w[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(u[i] >> 16)));
			} else {
				w[2 * i] = __uint_as_float(u[i] << 16);
				w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
			}
		}
	}
}

/* The weight types the CUDA backend computes. */
static inline bool cuda_wtype_ok(uint32_t t)
{
	return t == EXL_F32 || t == EXL_F16 || t == EXL_BF16 || t == EXL_Q8_0 ||
	       t == EXL_Q4_0 || t == EXL_Q4_1 || t == EXL_Q5_0 || t == EXL_Q5_1 ||
	       t == EXL_IQ4_NL || t == EXL_MXFP4 || t == EXL_Q2_K || t == EXL_Q3_K || t == EXL_Q4_K ||
	       t == EXL_Q5_K || t == EXL_Q6_K || t == EXL_IQ4_XS;
}

#endif

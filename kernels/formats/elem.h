/* Per-element code shared by the CPU and the CUDA backends: the on-disk
 * block layouts of the quantized types (byte for byte as GGML/GGUF store
 * them), bit-exact fp16 / bf16 conversions, and the dequantization of one
 * block of each computed type.
 *
 * Everything here compiles as C11 and as CUDA C++.  Functions are EXL_HD:
 * plain static inline on the host, __host__ __device__ under nvcc, so the
 * CPU unit tests cover the arithmetic the GPU runs.  No SIMD here; the
 * vector kernels live in kernels/cpu/ and kernels/cuda/.
 */
#ifndef EXL_ELEM_H
#define EXL_ELEM_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define EXL_HD __host__ __device__ static inline
#define EXL_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define EXL_HD static inline
#define EXL_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define EXL_QK8_0 32
#define EXL_QK4_0 32
#define EXL_QK_K 256
#define EXL_K_SCALE_SIZE 12

/* Q8_0: 32 weights, w = d * qs[i]. */
typedef struct {
	uint16_t d; /* fp16 scale */
	int8_t qs[EXL_QK8_0];
} block_q8_0;
EXL_STATIC_ASSERT(sizeof(block_q8_0) == 34, "block_q8_0 layout");

/* Q4_0: 32 weights, w = d * (nibble - 8).  Byte j holds weight j in its low
 * nibble and weight j + 16 in its high nibble. */
typedef struct {
	uint16_t d;
	uint8_t qs[EXL_QK4_0 / 2];
} block_q4_0;
EXL_STATIC_ASSERT(sizeof(block_q4_0) == 18, "block_q4_0 layout");

/* Q4_K: 256 weights in 8 sub-blocks of 32, each with a 6-bit scale and a
 * 6-bit min packed into scales[12]: w = d * sc * q - dmin * m.  qs holds 4
 * chunks of 64 weights; in chunk c byte l has weight 64c + l in its low
 * nibble and weight 64c + 32 + l in its high nibble. */
typedef struct {
	uint16_t d;    /* fp16 super-block scale of the scales */
	uint16_t dmin; /* fp16 super-block scale of the mins */
	uint8_t scales[EXL_K_SCALE_SIZE];
	uint8_t qs[EXL_QK_K / 2];
} block_q4_K;
EXL_STATIC_ASSERT(sizeof(block_q4_K) == 144, "block_q4_K layout");

/* Q5_K: as Q4_K with a fifth bit per weight in qh. */
typedef struct {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[EXL_K_SCALE_SIZE];
	uint8_t qh[EXL_QK_K / 8];
	uint8_t qs[EXL_QK_K / 2];
} block_q5_K;
EXL_STATIC_ASSERT(sizeof(block_q5_K) == 176, "block_q5_K layout");

/* Q6_K: 256 weights in 16 sub-blocks of 16 with an int8 scale each:
 * w = d * scales[s] * (q - 32), q six bits: four low bits in ql, two high
 * bits in qh (layout in exl_dequant_q6_K). */
typedef struct {
	uint8_t ql[EXL_QK_K / 2];
	uint8_t qh[EXL_QK_K / 4];
	int8_t scales[EXL_QK_K / 16];
	uint16_t d;
} block_q6_K;
EXL_STATIC_ASSERT(sizeof(block_q6_K) == 210, "block_q6_K layout");

/* Q8_K: the activation format K-quant dot products use: float scale, 256
 * int8 values and the sums of each group of 16. */
typedef struct {
	float d;
	int8_t qs[EXL_QK_K];
	int16_t bsums[EXL_QK_K / 16];
} block_q8_K;
EXL_STATIC_ASSERT(sizeof(block_q8_K) == 292, "block_q8_K layout");

EXL_HD uint32_t exl_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

EXL_HD float exl_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
#endif
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, inf; NaN
 * payloads kept and quieted, as F16C does); integer only, so it does not depend on FTZ/DAZ modes. */
EXL_HD float exl_fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf, or NaN quieted as vcvtph2ps does */
		return exl_bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
	if (exp == 0) {
		if (man == 0)
			return exl_bits_f32(sign);
		/* subnormal: normalize so bit 10 is the implicit one */
		exp = 1;
		while (!(man & 0x400u)) {
			man <<= 1;
			exp--;
		}
		man &= 0x3ffu;
		/* exp may be 0 or negative here; add the rebias first */
		return exl_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
	}
	return exl_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* binary32 -> binary16, round to nearest even, as F16C's vcvtps2ph with
 * rounding mode 0: overflow gives inf, NaN stays NaN (quiet bit set, top
 * payload bits kept). */
EXL_HD uint16_t exl_fp32_to_fp16(float f)
{
	uint32_t x = exl_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;

	if (ax > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
	if (ax >= 0x477ff000u) /* >= 65520 rounds to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) {
		/* result is a half subnormal (or rounds up to the smallest
		 * normal): count units of 2^-24 */
		if (ax <= 0x33000000u) /* <= 2^-25: ties to even give 0 */
			return (uint16_t)sign;
		uint32_t e = ax >> 23;
		uint32_t m = (ax & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126u - e; /* 14 .. 24 */
		uint32_t r = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1u);
		uint32_t half = 1u << (shift - 1u);

		if (rem > half || (rem == half && (r & 1u)))
			r++;
		return (uint16_t)(sign | r);
	}
	uint32_t v = ax - 0x38000000u; /* rebias 127 -> 15 */
	uint32_t r = v >> 13;
	uint32_t rem = v & 0x1fffu;

	if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
		r++; /* a carry into the exponent is the right result */
	return (uint16_t)(sign | r);
}

EXL_HD float exl_bf16_to_fp32(uint16_t h)
{
	return exl_bits_f32((uint32_t)h << 16);
}

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (quieted). */
EXL_HD uint16_t exl_fp32_to_bf16(float f)
{
	uint32_t x = exl_f32_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
 * Bytes 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3;
 * for j >= 4 the low four bits come from byte j + 4 (scale: low nibble,
 * min: high nibble) and the top two from the spare top bits of bytes
 * j - 4 (scale) and j (min). */
EXL_HD void exl_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/* One block into 32 floats. */
EXL_HD void exl_dequant_q8_0(const block_q8_0 *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);

	for (int i = 0; i < EXL_QK8_0; i++)
		y[i] = d * (float)b->qs[i];
}

EXL_HD void exl_dequant_q4_0(const block_q4_0 *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);

	for (int j = 0; j < EXL_QK4_0 / 2; j++) {
		y[j] = d * (float)((int)(b->qs[j] & 0x0f) - 8);
		y[j + EXL_QK4_0 / 2] = d * (float)((int)(b->qs[j] >> 4) - 8);
	}
}

/* One block into 256 floats. */
EXL_HD void exl_dequant_q4_K(const block_q4_K *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float dmin = exl_fp16_to_fp32(b->dmin);
	const uint8_t *q = b->qs;

	for (int c = 0; c < 4; c++) {
		uint8_t sc, m;

		exl_get_scale_min_k4(2 * c, b->scales, &sc, &m);
		float d1 = d * (float)sc, m1 = dmin * (float)m;
		exl_get_scale_min_k4(2 * c + 1, b->scales, &sc, &m);
		float d2 = d * (float)sc, m2 = dmin * (float)m;

		for (int l = 0; l < 32; l++)
			y[64 * c + l] = d1 * (float)(q[l] & 0x0f) - m1;
		for (int l = 0; l < 32; l++)
			y[64 * c + 32 + l] = d2 * (float)(q[l] >> 4) - m2;
		q += 32;
	}
}

EXL_HD void exl_dequant_q5_K(const block_q5_K *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float dmin = exl_fp16_to_fp32(b->dmin);
	const uint8_t *q = b->qs;

	for (int c = 0; c < 4; c++) {
		uint8_t sc, m;
		uint8_t u1 = (uint8_t)(1u << (2 * c));
		uint8_t u2 = (uint8_t)(2u << (2 * c));

		exl_get_scale_min_k4(2 * c, b->scales, &sc, &m);
		float d1 = d * (float)sc, m1 = dmin * (float)m;
		exl_get_scale_min_k4(2 * c + 1, b->scales, &sc, &m);
		float d2 = d * (float)sc, m2 = dmin * (float)m;

		for (int l = 0; l < 32; l++)
			y[64 * c + l] = d1 * (float)((q[l] & 0x0f) + ((b->qh[l] & u1) ? 16 : 0)) - m1;
		for (int l = 0; l < 32; l++)
			y[64 * c + 32 + l] = d2 * (float)((q[l] >> 4) + ((b->qh[l] & u2) ? 16 : 0)) - m2;
		q += 32;
	}
}

/* Q6_K layout: two halves of 128 weights.  In half h (ql + 64h, qh + 32h,
 * scales + 8h), for l < 32:
 *   weight l      : low nibble of ql[l],      qh[l] bits 0-1
 *   weight l + 32 : low nibble of ql[l + 32], qh[l] bits 2-3
 *   weight l + 64 : high nibble of ql[l],     qh[l] bits 4-5
 *   weight l + 96 : high nibble of ql[l + 32], qh[l] bits 6-7
 * and weight k of the half uses scale k / 16. */
EXL_HD void exl_dequant_q6_K(const block_q6_K *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	const uint8_t *ql = b->ql;
	const uint8_t *qh = b->qh;
	const int8_t *sc = b->scales;

	for (int h = 0; h < 2; h++) {
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = (int)((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
			int q2 = (int)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
			int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;

			y[l] = d * (float)sc[is + 0] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
		y += 128;
		ql += 64;
		qh += 32;
		sc += 8;
	}
}

EXL_HD void exl_dequant_q8_K(const block_q8_K *b, float *y)
{
	for (int i = 0; i < EXL_QK_K; i++)
		y[i] = b->d * (float)b->qs[i];
}

#endif

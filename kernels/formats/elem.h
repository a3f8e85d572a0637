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

/* Q4_1: 32 weights, w = d * nibble + m; nibbles as in Q4_0. */
typedef struct {
	uint16_t d; /* fp16 scale */
	uint16_t m; /* fp16 offset (the block's minimum) */
	uint8_t qs[EXL_QK4_0 / 2];
} block_q4_1;
EXL_STATIC_ASSERT(sizeof(block_q4_1) == 20, "block_q4_1 layout");

/* Q5_0: 32 weights, w = d * (q - 16) with q five bits: the low four as in
 * Q4_0's nibbles, the fifth of weight j in bit j of qh read as a
 * little-endian 32-bit word. */
typedef struct {
	uint16_t d;
	uint8_t qh[4];
	uint8_t qs[EXL_QK4_0 / 2];
} block_q5_0;
EXL_STATIC_ASSERT(sizeof(block_q5_0) == 22, "block_q5_0 layout");

/* Q5_1: as Q5_0 with w = d * q + m. */
typedef struct {
	uint16_t d;
	uint16_t m;
	uint8_t qh[4];
	uint8_t qs[EXL_QK4_0 / 2];
} block_q5_1;
EXL_STATIC_ASSERT(sizeof(block_q5_1) == 24, "block_q5_1 layout");

/* IQ4_NL: 32 weights, w = d * exl_iq4nl_value(nibble), nibbles as in Q4_0:
 * 16 non-uniform levels, denser near zero where most weights are. */
typedef struct {
	uint16_t d;
	uint8_t qs[EXL_QK4_0 / 2];
} block_iq4_nl;
EXL_STATIC_ASSERT(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");

/* MXFP4 (OCP microscaling FP4, gpt-oss's expert weights): 32 weights,
 * w = exl_mxfp4_value(nibble) * exl_e8m0_half(e), nibbles as in Q4_0.  The
 * levels are E2M1's values doubled (0 .. 6 as 0 .. 12), the scale the E8M0
 * exponent's 2^(e - 127) halved to match: 2^(e - 128).  17 bytes, no
 * 16-bit field: a block, and a row of an odd number of them, may start at
 * any byte (exl_dtype_align says 1), so code reads its bytes only. */
typedef struct {
	uint8_t e; /* E8M0 exponent */
	uint8_t qs[EXL_QK4_0 / 2];
} block_mxfp4;
EXL_STATIC_ASSERT(sizeof(block_mxfp4) == 17, "block_mxfp4 layout");

/* Q2_K: 256 weights in 16 groups of 16; scales[g] holds group g's 4-bit
 * scale (low nibble) and 4-bit min (high): w = d * sc * q - dmin * m, q two
 * bits.  Weight 128h + 32s + l (h = 0..1, s = 0..3, l = 0..31) is bits
 * 2s, 2s + 1 of qs[32h + l]; group g covers weights 16g .. 16g + 15. */
typedef struct {
	uint8_t scales[EXL_QK_K / 16];
	uint8_t qs[EXL_QK_K / 4];
	uint16_t d;
	uint16_t dmin;
} block_q2_K;
EXL_STATIC_ASSERT(sizeof(block_q2_K) == 84, "block_q2_K layout");

/* Q3_K: 256 weights in 16 groups of 16 with a signed 6-bit scale each
 * (packed in scales[12], see exl_q3_K_scale): w = d * (sc - 32) * q,
 * q = low two bits - (high bit clear ? 4 : 0), so -4..3.  Weight
 * 128h + 32s + l takes its low bits as Q2_K does and its high bit from bit
 * 4h + s of hmask[l]. */
typedef struct {
	uint8_t hmask[EXL_QK_K / 8];
	uint8_t qs[EXL_QK_K / 4];
	uint8_t scales[12];
	uint16_t d;
} block_q3_K;
EXL_STATIC_ASSERT(sizeof(block_q3_K) == 110, "block_q3_K layout");

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

/* IQ4_XS: 256 weights in 8 sub-blocks of 32 with a 6-bit scale each (low
 * four bits: nibble j % 2 of scales_l[j / 2]; high two: bits 2j, 2j + 1 of
 * scales_h): w = d * (sc - 32) * exl_iq4nl_value(nibble).  Sub-block j's
 * nibbles are qs[16j .. 16j + 15], laid out as one IQ4_NL block's. */
typedef struct {
	uint16_t d;
	uint16_t scales_h;
	uint8_t scales_l[EXL_QK_K / 64];
	uint8_t qs[EXL_QK_K / 2];
} block_iq4_xs;
EXL_STATIC_ASSERT(sizeof(block_iq4_xs) == 136, "block_iq4_xs layout");

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

/* The signed 6-bit scale (-32..31) of group g (0..15) of a Q3_K block:
 * low four bits in the low (g < 8) or high nibble of scales[g % 8], high
 * two in bits 2 * (g / 4) of scales[8 + g % 4]. */
EXL_HD int exl_q3_K_scale(const uint8_t *s, int g)
{
	int lo = g < 8 ? s[g] & 0x0f : s[g - 8] >> 4;
	int hi = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;

	return (lo | hi << 4) - 32;
}

/* The signed 6-bit scale (-32..31) of sub-block j (0..7) of an IQ4_XS
 * block. */
EXL_HD int exl_iq4_xs_scale(const block_iq4_xs *b, int j)
{
	int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
	int hi = (b->scales_h >> (2 * j)) & 3;

	return (lo | hi << 4) - 32;
}

/* The 16 levels of IQ4_NL and IQ4_XS, in GGML's order: -127 -104 -83 -65
 * -49 -35 -22 -10 1 13 25 38 53 69 89 113, as two's complement bytes
 * packed little-endian into two words.  Arithmetic, not a table, so the
 * same code runs on the GPU (a host array is not visible there); the SIMD
 * kernels load the words as a byte-shuffle table. */
#define EXL_IQ4NL_LO 0xf6eaddcfbfad9881ull
#define EXL_IQ4NL_HI 0x7159453526190d01ull

EXL_HD int exl_iq4nl_value(int i)
{
	uint64_t w = i < 8 ? EXL_IQ4NL_LO : EXL_IQ4NL_HI;
	int v = (int)((w >> (8 * (i & 7))) & 0xff);

	return v - ((v & 0x80) << 1);
}

/* MXFP4's 16 levels, GGML's kvalues_mxfp4 (E2M1 doubled): 0 1 2 3 4 6 8 12,
 * then the same negated (nibble 8 is -0, read as 0), packed as
 * EXL_IQ4NL_LO / HI are, for the same reasons. */
#define EXL_MXFP4_LO 0x0c08060403020100ull
#define EXL_MXFP4_HI 0xf4f8fafcfdfeff00ull

EXL_HD int exl_mxfp4_value(int i)
{
	uint64_t w = i < 8 ? EXL_MXFP4_LO : EXL_MXFP4_HI;
	int v = (int)((w >> (8 * (i & 7))) & 0xff);

	return v - ((v & 0x80) << 1);
}

/* An MXFP4 block's scale: 2^(e - 128) exactly, as GGML's
 * GGML_E8M0_TO_FP32_HALF has it (E8M0's 2^(e - 127), halved for the
 * doubled levels).  e 0 and 1 are the binary32 subnormals 2^-128 and
 * 2^-127 (bit 21 or 22 of the fraction), 2..255 the normals with exponent
 * field e - 1, so e = 255 is 2^127 (E8M0's NaN code is not special-cased,
 * as in GGML).  Bits, not arithmetic: no FTZ mode can change it. */
EXL_HD uint32_t exl_e8m0_half_bits(uint8_t e)
{
	return e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
}

EXL_HD float exl_e8m0_half(uint8_t e)
{
	return exl_bits_f32(exl_e8m0_half_bits(e));
}

/* The 32-bit word of fifth bits of a Q5_0 / Q5_1 block. */
EXL_HD uint32_t exl_q5_qh(const uint8_t *qh)
{
	return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
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

/* The float steps below are GGML's (q * d + m, d * q), so dequantized
 * values match its dequantize_row_* bit for bit (test_quant's goldens). */
EXL_HD void exl_dequant_q4_1(const block_q4_1 *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float m = exl_fp16_to_fp32(b->m);

	for (int j = 0; j < EXL_QK4_0 / 2; j++) {
		y[j] = (float)(b->qs[j] & 0x0f) * d + m;
		y[j + EXL_QK4_0 / 2] = (float)(b->qs[j] >> 4) * d + m;
	}
}

EXL_HD void exl_dequant_q5_0(const block_q5_0 *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	uint32_t qh = exl_q5_qh(b->qh);

	for (int j = 0; j < EXL_QK4_0 / 2; j++) {
		int q0 = (int)((b->qs[j] & 0x0f) | ((qh >> j) & 1) << 4) - 16;
		int q1 = (int)((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;

		y[j] = (float)q0 * d;
		y[j + EXL_QK4_0 / 2] = (float)q1 * d;
	}
}

EXL_HD void exl_dequant_q5_1(const block_q5_1 *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float m = exl_fp16_to_fp32(b->m);
	uint32_t qh = exl_q5_qh(b->qh);

	for (int j = 0; j < EXL_QK4_0 / 2; j++) {
		int q0 = (int)((b->qs[j] & 0x0f) | ((qh >> j) & 1) << 4);
		int q1 = (int)((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);

		y[j] = (float)q0 * d + m;
		y[j + EXL_QK4_0 / 2] = (float)q1 * d + m;
	}
}

EXL_HD void exl_dequant_iq4_nl(const block_iq4_nl *b, float *y)
{
	float d = exl_fp16_to_fp32(b->d);

	for (int j = 0; j < EXL_QK4_0 / 2; j++) {
		y[j] = d * (float)exl_iq4nl_value(b->qs[j] & 0x0f);
		y[j + EXL_QK4_0 / 2] = d * (float)exl_iq4nl_value(b->qs[j] >> 4);
	}
}

/* As GGML's dequantize_row_mxfp4: the level as a float times the scale
 * (exact: a small integer times a power of two, but for the subnormal and
 * overflowing ends). */
EXL_HD void exl_dequant_mxfp4(const block_mxfp4 *b, float *y)
{
	float d = exl_e8m0_half(b->e);

	for (int j = 0; j < EXL_QK4_0 / 2; j++) {
		y[j] = (float)exl_mxfp4_value(b->qs[j] & 0x0f) * d;
		y[j + EXL_QK4_0 / 2] = (float)exl_mxfp4_value(b->qs[j] >> 4) * d;
	}
}

/* Sub-block c (weights 32c .. 32c + 31) of the 256-weight types whose
 * layout is easiest read that way; the whole-block dequantizers below are
 * these eight times, and the CUDA kernels read rows 32 weights at a time
 * with them (kernels/cuda/dequant.cuh). */
EXL_HD void exl_dequant_q2_K_part(const block_q2_K *b, int c, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float dmin = exl_fp16_to_fp32(b->dmin);
	const uint8_t *q = b->qs + 32 * (c / 4);
	const int shift = 2 * (c % 4);

	for (int half = 0; half < 2; half++) {
		uint8_t sc = b->scales[2 * c + half];
		float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);

		for (int l = 16 * half; l < 16 * half + 16; l++)
			y[l] = dl * (float)((q[l] >> shift) & 3) - ml;
	}
}

EXL_HD void exl_dequant_q3_K_part(const block_q3_K *b, int c, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	const uint8_t *q = b->qs + 32 * (c / 4);
	const int shift = 2 * (c % 4);

	for (int half = 0; half < 2; half++) {
		float dl = d * (float)exl_q3_K_scale(b->scales, 2 * c + half);

		for (int l = 16 * half; l < 16 * half + 16; l++) {
			int v = (int)((q[l] >> shift) & 3) - ((b->hmask[l] >> c) & 1 ? 0 : 4);

			y[l] = dl * (float)v;
		}
	}
}

EXL_HD void exl_dequant_iq4_xs_part(const block_iq4_xs *b, int c, float *y)
{
	float dl = exl_fp16_to_fp32(b->d) * (float)exl_iq4_xs_scale(b, c);
	const uint8_t *q = b->qs + 16 * c;

	for (int j = 0; j < 16; j++) {
		y[j] = dl * (float)exl_iq4nl_value(q[j] & 0x0f);
		y[j + 16] = dl * (float)exl_iq4nl_value(q[j] >> 4);
	}
}

EXL_HD void exl_dequant_q2_K(const block_q2_K *b, float *y)
{
	for (int c = 0; c < 8; c++)
		exl_dequant_q2_K_part(b, c, y + 32 * c);
}

EXL_HD void exl_dequant_q3_K(const block_q3_K *b, float *y)
{
	for (int c = 0; c < 8; c++)
		exl_dequant_q3_K_part(b, c, y + 32 * c);
}

EXL_HD void exl_dequant_iq4_xs(const block_iq4_xs *b, float *y)
{
	for (int c = 0; c < 8; c++)
		exl_dequant_iq4_xs_part(b, c, y + 32 * c);
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

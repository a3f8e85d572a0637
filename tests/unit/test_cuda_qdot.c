/* The CUDA matrix x vector kernel's arithmetic (kernels/cuda/qdot.h), run on
 * the CPU: for every quantized weight type, the sum over a row's parts of
 * exl_qpart_dot with 8-bit activations equals the exact dot product of the
 * dequantized row (kernels/formats/quant.h) with the dequantized
 * activations, to float rounding.  A wrong bit, nibble, shift or scale in
 * any type's decoding moves the sum by a whole weight's worth and fails.
 * Rows: quantized real-looking values with outliers, and random block
 * bytes (every scale and bit pattern) with the fp16 fields kept finite
 * (MXFP4's exponents below overflow), each also at the least aligned
 * address a row of its type may have (MXFP4: any byte). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/qdot.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

#define EXL_TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "tests/common/rng.h"

#define COLS 1024
#define PARTS (COLS / 32)

/* What ops_matmul.cu's quant_x_kernel does with a part, a warp at a time. */
static void quant_part(const float *x, int8_t *q, struct exl_qact *a)
{
	float amax = 0.0f;
	int s0 = 0, s1 = 0;

	for (int i = 0; i < 32; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	const float d = amax / 127.0f;
	const float id = amax > 0.0f ? 127.0f / amax : 0.0f;

	for (int i = 0; i < 32; i++) {
		long v = lrintf(x[i] * id);

		q[i] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
		if (i < 16)
			s0 += q[i];
		else
			s1 += q[i];
	}
	a->d = d;
	a->s0 = d * (float)s0;
	a->s1 = d * (float)s1;
	a->pad = 0.0f;
}

/* Byte offsets of a block's fp16 fields, set to finite values in random
 * rows (a NaN scale would make the exact sum NaN too). */
static void fix_halves(uint32_t type, uint8_t *blk)
{
	int off[2] = { -1, -1 };

	switch (type) {
	case EXL_Q8_0: case EXL_Q4_0: case EXL_Q5_0: case EXL_IQ4_NL: case EXL_IQ4_XS:
		off[0] = 0;
		break;
	case EXL_Q4_1: case EXL_Q5_1: case EXL_Q4_K: case EXL_Q5_K:
		off[0] = 0;
		off[1] = 2;
		break;
	case EXL_Q2_K: off[0] = 80; off[1] = 82; break;
	case EXL_Q3_K: off[0] = 108; break;
	case EXL_Q6_K: off[0] = 208; break;
	case EXL_MXFP4:
		/* e 0..159: the subnormal scales too, none that overflows */
		blk[0] = (uint8_t)(rnd_u32() % 160u);
		return;
	default: break;
	}
	for (int k = 0; k < 2; k++) {
		if (off[k] < 0)
			continue;
		/* exponent 10..19 of 31: 2^-5 .. 2^4, either sign, any mantissa */
		uint16_t h = (uint16_t)((rnd_u32() & 0x83ffu) | (10u + rnd_u32() % 10u) << 10);

		memcpy(blk + off[k], &h, 2);
	}
}

static void check_row(uint32_t type, const uint8_t *row, const float *x, const char *what)
{
	const char *name = exl_dtype_info(type)->name;
	float w[COLS];
	int8_t xq[COLS];
	struct exl_qact xa[PARTS];
	double exact = 0.0, mag = 0.0;
	float got = 0.0f;

	CHECK(exl_dequantize_row(type, row, w, COLS) == 0, "%s: dequantize", name);
	for (int c = 0; c < PARTS; c++)
		quant_part(x + 32 * c, xq + 32 * c, &xa[c]);
	for (int k = 0; k < COLS; k++) {
		double xv = (double)xa[k / 32].d * (double)xq[k];

		exact += (double)w[k] * xv;
		mag += fabs((double)w[k] * xv);
	}
	for (int c = 0; c < PARTS; c++) {
		struct exl_qpart p;
		int32_t xi[8];

		exl_qpart(type, row, c, &p);
		memcpy(xi, xq + 32 * c, 32);
		got += exl_qpart_dot(&p, xi, xa[c]);
	}
	CHECK(fabs((double)got - exact) <= 1e-5 * mag + 1e-6,
	      "%s %s: parts sum %.9g, exact %.9g (sum |w x| %.4g)", name, what, got, exact, mag);
}

static void test_type(uint32_t type)
{
	const size_t rb = exl_dtype_row_bytes(type, COLS);
	const size_t bb = exl_dtype_info(type)->block_bytes;
	uint8_t *row = malloc(rb), *odd = malloc(rb + 8);
	float src[COLS], x[COLS];

	if (!row || !odd) {
		free(row);
		free(odd);
		FAIL("out of memory");
		return;
	}
	for (int trial = 0; trial < 8; trial++) {
		for (int k = 0; k < COLS; k++) {
			src[k] = rnd_normal() * 0.05f * (float)(1 + (k / 32 + trial) % 3);
			x[k] = rnd_normal() * (k % 13 == 0 ? 3.0f : 1.0f);
		}
		src[(trial * 37) % COLS] = -0.4f;
		if (trial == 3)
			memset(x + 64, 0, 32 * sizeof(float)); /* a part of zeros: d = 0 */
		CHECK(exl_quantize_row(type, src, row, COLS) == rb, "quantize %s",
		      exl_dtype_info(type)->name);
		check_row(type, row, x, "quantized row");

		for (size_t k = 0; k < rb; k++)
			row[k] = (uint8_t)rnd_u32();
		for (size_t b = 0; b < rb / bb; b++)
			fix_halves(type, row + b * bb);
		check_row(type, row, x, "random bytes");
		/* the same row at the least aligned address it may have: an odd
		 * one for MXFP4, whose rows start at any byte */
		memcpy(odd + exl_dtype_align(type), row, rb);
		check_row(type, odd + exl_dtype_align(type), x, "random bytes, least aligned");
	}
	free(row);
	free(odd);
}

int main(void)
{
	const uint32_t types[] = { EXL_Q8_0, EXL_Q4_0, EXL_Q4_1, EXL_Q5_0, EXL_Q5_1, EXL_IQ4_NL,
				   EXL_MXFP4, EXL_Q2_K, EXL_Q3_K, EXL_Q4_K, EXL_Q5_K, EXL_Q6_K, EXL_IQ4_XS };

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		test_type(types[i]);
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

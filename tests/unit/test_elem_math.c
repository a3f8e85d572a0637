/* The shared per-element code the CUDA kernels run (kernels/formats/elem.h,
 * kernels/formats/elem_math.h), checked on the CPU:
 *  - dequantization 32 weights at a time, as the CUDA matmul / embed kernels
 *    read rows, is bit-identical to kernels/formats/quant.h's exl_dequantize_row and
 *    to elem.h's whole-block functions, over quantized real-looking rows and
 *    over random block bytes (every scale bit pattern);
 *  - the RoPE, SiLU, RMSNorm and softmax helpers against direct formulas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/elem_math.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

#define EXL_TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "tests/common/rng.h"

/* What the CUDA kernels' load_part<T> (kernels/cuda/dequant.cuh) does:
 * weights 32c .. 32c + 31 of a row. */
static void dequant_part(uint32_t type, const void *row, int c, float *y)
{
	switch (type) {
	case EXL_Q8_0:
		exl_dequant_q8_0((const block_q8_0 *)row + c, y);
		break;
	case EXL_Q4_0:
		exl_dequant_q4_0((const block_q4_0 *)row + c, y);
		break;
	case EXL_Q4_K:
		exl_dequant_q4_K_part((const block_q4_K *)row + c / 8, c % 8, y);
		break;
	case EXL_Q6_K:
		exl_dequant_q6_K_part((const block_q6_K *)row + c / 8, c % 8, y);
		break;
	case EXL_Q4_1:
		exl_dequant_q4_1((const block_q4_1 *)row + c, y);
		break;
	case EXL_Q5_0:
		exl_dequant_q5_0((const block_q5_0 *)row + c, y);
		break;
	case EXL_Q5_1:
		exl_dequant_q5_1((const block_q5_1 *)row + c, y);
		break;
	case EXL_IQ4_NL:
		exl_dequant_iq4_nl((const block_iq4_nl *)row + c, y);
		break;
	case EXL_MXFP4:
		exl_dequant_mxfp4((const block_mxfp4 *)row + c, y);
		break;
	case EXL_Q2_K:
		exl_dequant_q2_K_part((const block_q2_K *)row + c / 8, c % 8, y);
		break;
	case EXL_Q3_K:
		exl_dequant_q3_K_part((const block_q3_K *)row + c / 8, c % 8, y);
		break;
	case EXL_Q5_K:
		exl_dequant_q5_K_part((const block_q5_K *)row + c / 8, c % 8, y);
		break;
	case EXL_IQ4_XS:
		exl_dequant_iq4_xs_part((const block_iq4_xs *)row + c / 8, c % 8, y);
		break;
	}
}

/* Bit equality, so -0.0 vs 0.0 or a different NaN would show. */
static int first_bit_diff(const float *a, const float *b, int n)
{
	for (int i = 0; i < n; i++)
		if (exl_f32_bits(a[i]) != exl_f32_bits(b[i]))
			return i;
	return -1;
}

static void test_parts_vs_quant_row(uint32_t type)
{
	const int n = 1024;
	float src[1024], ref[1024], got[1024];
	unsigned char row[2048];
	const char *name = exl_dtype_info(type)->name;

	for (int trial = 0; trial < 40; trial++) {
		/* Different magnitudes, some rows with outliers, one all-zero. */
		float scale = trial == 0 ? 0.0f : powf(10.0f, (float)(trial % 7) - 4.0f);

		for (int i = 0; i < n; i++) {
			src[i] = scale * rnd_normal();
			if (trial % 5 == 3 && i % 97 == 0)
				src[i] *= 30.0f;
		}
		size_t bytes = exl_quantize_row(type, src, row, n);

		CHECK(bytes == exl_dtype_row_bytes(type, n) && bytes <= sizeof(row),
		      "%s: quantize_row wrote %zu bytes", name, bytes);
		CHECK(exl_dequantize_row(type, row, ref, n) == 0, "%s: dequantize_row", name);
		for (int c = 0; c < n / 32; c++)
			dequant_part(type, row, c, got + 32 * c);
		int d = first_bit_diff(ref, got, n);
		CHECK(d < 0, "%s trial %d: weight %d: row %.9g, parts %.9g", name, trial, d,
		      d < 0 ? 0.0 : ref[d], d < 0 ? 0.0 : got[d]);
	}
}

/* A random fp16 scale in a sane range (random bits would give inf/NaN). */
static uint16_t rnd_scale16(void)
{
	return exl_fp32_to_fp16(rnd_uniform() * 0.05f);
}

static void test_k_parts_random_bytes(void)
{
	for (int trial = 0; trial < 2000; trial++) {
		block_q4_K q4;
		block_q6_K q6;
		block_q5_K q5;
		float ref[256], got[256];
		unsigned char *p;

		p = (unsigned char *)&q4;
		for (size_t i = 0; i < sizeof(q4); i++)
			p[i] = (unsigned char)rnd_u32();
		q4.d = rnd_scale16();
		q4.dmin = rnd_scale16();
		exl_dequant_q4_K(&q4, ref);
		for (int c = 0; c < 8; c++)
			exl_dequant_q4_K_part(&q4, c, got + 32 * c);
		int d = first_bit_diff(ref, got, 256);
		CHECK(d < 0, "q4_K random block %d: weight %d: %.9g vs %.9g", trial, d,
		      d < 0 ? 0.0 : ref[d], d < 0 ? 0.0 : got[d]);

		p = (unsigned char *)&q6;
		for (size_t i = 0; i < sizeof(q6); i++)
			p[i] = (unsigned char)rnd_u32();
		q6.d = rnd_scale16();
		exl_dequant_q6_K(&q6, ref);
		for (int c = 0; c < 8; c++)
			exl_dequant_q6_K_part(&q6, c, got + 32 * c);
		d = first_bit_diff(ref, got, 256);
		CHECK(d < 0, "q6_K random block %d: weight %d: %.9g vs %.9g", trial, d,
		      d < 0 ? 0.0 : ref[d], d < 0 ? 0.0 : got[d]);

		p = (unsigned char *)&q5;
		for (size_t i = 0; i < sizeof(q5); i++)
			p[i] = (unsigned char)rnd_u32();
		q5.d = rnd_scale16();
		q5.dmin = rnd_scale16();
		exl_dequant_q5_K(&q5, ref);
		for (int c = 0; c < 8; c++)
			exl_dequant_q5_K_part(&q5, c, got + 32 * c);
		d = first_bit_diff(ref, got, 256);
		CHECK(d < 0, "q5_K random block %d: weight %d: %.9g vs %.9g", trial, d,
		      d < 0 ? 0.0 : ref[d], d < 0 ? 0.0 : got[d]);
	}
}

/* F16 / BF16 element reads (the CUDA kernels' load_elem) vs the row
 * dequantizer. */
static void test_plain_elems(void)
{
	uint16_t h[512], b[512];
	float src[512], ref[512];

	for (int i = 0; i < 512; i++)
		src[i] = rnd_normal() * 100.0f;
	CHECK(exl_quantize_row(EXL_F16, src, h, 512) == sizeof(h), "f16 row");
	CHECK(exl_quantize_row(EXL_BF16, src, b, 512) == sizeof(b), "bf16 row");
	CHECK(exl_dequantize_row(EXL_F16, h, ref, 512) == 0, "f16 dequantize");
	for (int i = 0; i < 512; i++)
		CHECK(exl_f32_bits(ref[i]) == exl_f32_bits(exl_fp16_to_fp32(h[i])), "f16 %d", i);
	CHECK(exl_dequantize_row(EXL_BF16, b, ref, 512) == 0, "bf16 dequantize");
	for (int i = 0; i < 512; i++)
		CHECK(exl_f32_bits(ref[i]) == exl_f32_bits(exl_bf16_to_fp32(b[i])), "bf16 %d", i);
}

static void test_rope(void)
{
	/* Pairs cover each rotated dimension exactly once, in both layouts. */
	for (int layout = 0; layout < 2; layout++) {
		const int n_rot = 24;
		int seen[24] = { 0 };

		for (int i = 0; i < n_rot / 2; i++) {
			int a, b;

			exl_rope_pair(i, n_rot, layout, &a, &b);
			CHECK(a >= 0 && a < n_rot && b >= 0 && b < n_rot && a != b,
			      "pair %d: %d %d", i, a, b);
			if (a >= 0 && a < n_rot && b >= 0 && b < n_rot) {
				seen[a]++;
				seen[b]++;
			}
			if (layout)
				CHECK(a == i && b == i + n_rot / 2, "neox pair %d: %d %d", i, a, b);
			else
				CHECK(a == 2 * i && b == 2 * i + 1, "normal pair %d: %d %d", i, a, b);
		}
		for (int k = 0; k < n_rot; k++)
			CHECK(seen[k] == 1, "dim %d rotated %d times", k, seen[k]);
	}

	/* Angles and their cos / sin against long double, out to positions of
	 * 2^24: the angle within a few double ulps of the formula, cos and sin
	 * within 2^-24 of the exact value (float rounding, at most 2^-25 for
	 * values below 1, plus the double angle's error, < 1e-8).  A float
	 * angle, as this code had before, is off by 0.06 rad at 10^6. */
	const float bases[] = { 10000.0f, 500000.0f, 1000000.0f };
	const float scales[] = { 1.0f, 0.5f, 0.125f };
	double worst_theta = 0.0, worst_cs = 0.0;
	for (int bi = 0; bi < 3; bi++) {
		for (int k = 0; k < 400; k++) {
			int pos = k < 100 ? k * 37 : (int)(rnd_u32() % (1u << 24));
			float scale = scales[k % 3];

			for (int i = 0; i < 64; i++) {
				long double want = (long double)pos * (long double)scale *
						   powl((long double)bases[bi], -2.0L * i / 128.0L);
				double got = exl_rope_angle(pos, i, 128, bases[bi], scale);
				double de = (double)fabsl((long double)got - want);
				float c, sn;

				if (de > worst_theta)
					worst_theta = de;
				CHECK(de <= 4e-16 * (double)want + 1e-300,
				      "theta pos %d i %d base %g: %.17g vs %.17Lg", pos, i,
				      bases[bi], got, want);
				exl_rope_cos_sin(pos, i, 128, bases[bi], scale, &c, &sn);
				double dc = (double)fabsl((long double)c - cosl(want));
				double ds = (double)fabsl((long double)sn - sinl(want));
				if (dc > worst_cs)
					worst_cs = dc;
				if (ds > worst_cs)
					worst_cs = ds;
				CHECK(dc <= 0x1p-24 && ds <= 0x1p-24,
				      "cos/sin pos %d i %d base %g: (%.9g %.9g) vs (%.9Lg %.9Lg)",
				      pos, i, bases[bi], c, sn, cosl(want), sinl(want));
			}
		}
	}
	printf("rope: worst angle error %g rad, worst cos/sin error %g\n", worst_theta, worst_cs);

	/* A rotation keeps the pair's norm and rotates by theta. */
	for (int t = 0; t < 1000; t++) {
		float x[2] = { rnd_normal(), rnd_normal() };
		float th = rnd_uniform() * 50.0f;
		float c = cosf(th), sn = sinf(th);
		double w0 = (double)x[0] * c - (double)x[1] * sn;
		double w1 = (double)x[1] * c + (double)x[0] * sn;

		exl_rope_rotate(x, 0, 1, c, sn);
		CHECK(fabs(x[0] - w0) <= 1e-6 && fabs(x[1] - w1) <= 1e-6,
		      "rotate by %g: (%g %g) vs (%g %g)", th, x[0], x[1], w0, w1);
	}
}

static void test_silu_rms_softmax(void)
{
	for (int t = 0; t < 2000; t++) {
		float x = rnd_uniform() * 30.0f;
		double want = x / (1.0 + exp(-(double)x));

		CHECK(fabs(exl_silu(x) - want) <= 1e-6 * (1.0 + fabs(want)), "silu(%g) = %g vs %g",
		      x, exl_silu(x), want);
	}
	CHECK(exl_silu(-1000.0f) == 0.0f && !isnan(exl_silu(-1000.0f)), "silu(-1000)");
	CHECK(exl_silu(1000.0f) == 1000.0f, "silu(1000) = %g", exl_silu(1000.0f));

	float row[300];
	double ss = 0.0;
	for (int i = 0; i < 300; i++) {
		row[i] = rnd_normal() * 3.0f;
		ss += (double)row[i] * row[i];
	}
	double want = 1.0 / sqrt(ss / 300.0 + 1e-5);
	float got = exl_rms_inv((float)ss, 300, 1e-5f);
	CHECK(fabs(got - want) <= 1e-6 * want, "rms_inv %g vs %g", got, want);
	CHECK(isfinite(exl_rms_inv(0.0f, 16, 1e-6f)), "rms_inv of a zero row");

	/* Online softmax, tile by tile, equals the two-pass one. */
	float s[1000];
	double m = -INFINITY, sum = 0.0;
	for (int i = 0; i < 1000; i++) {
		s[i] = i % 11 == 5 ? -INFINITY : rnd_normal() * 20.0f;
		if (s[i] > m)
			m = s[i];
	}
	for (int i = 0; i < 1000; i++)
		sum += exp(s[i] - m);
	float om = -INFINITY, ol = 0.0f;
	for (int base = 0; base < 1000; base += 128) {
		float tm = -INFINITY, tl = 0.0f;

		for (int i = base; i < base + 128 && i < 1000; i++)
			tm = fmaxf(tm, s[i]);
		float nm = fmaxf(om, tm);
		for (int i = base; i < base + 128 && i < 1000; i++)
			tl += exl_softmax_weight(s[i], nm);
		ol = ol * exl_softmax_rescale(om, nm) + tl;
		om = nm;
	}
	CHECK(om == (float)m, "online max %g vs %g", om, m);
	CHECK(fabs(ol - sum) <= 1e-5 * sum, "online sum %g vs %g", ol, sum);
	CHECK(exl_softmax_weight(-INFINITY, -INFINITY) == 0.0f, "weight(-inf, -inf)");
	CHECK(exl_softmax_rescale(-INFINITY, -INFINITY) == 0.0f, "rescale(-inf, -inf)");
	CHECK(exl_softmax_rescale(2.0f, 2.0f) == 1.0f, "rescale(m, m)");
}

int main(void)
{
	const uint32_t qtypes[] = { EXL_Q8_0, EXL_Q4_0, EXL_Q4_1, EXL_Q5_0, EXL_Q5_1, EXL_IQ4_NL,
				    EXL_MXFP4, EXL_Q2_K, EXL_Q3_K, EXL_Q4_K, EXL_Q5_K, EXL_Q6_K, EXL_IQ4_XS };

	for (size_t i = 0; i < sizeof(qtypes) / sizeof(qtypes[0]); i++)
		test_parts_vs_quant_row(qtypes[i]);
	test_k_parts_random_bytes();
	test_plain_elems();
	test_rope();
	test_silu_rms_softmax();
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

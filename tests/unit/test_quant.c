/* Quantization formats: fp16/bf16 conversions (exhaustive and known
 * values), block layouts against values GGML's own dequantizers produce for
 * the same bytes, and a quantize -> dequantize round trip per type with
 * error bounds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

/* ---- fp16 / bf16 ---- */

static void test_fp16(void)
{
	int bad = 0;

	/* every half survives half -> float -> half (NaNs stay NaN) */
	for (uint32_t h = 0; h < 65536; h++) {
		float f = exl_fp16_to_fp32((uint16_t)h);
		uint16_t back = exl_fp32_to_fp16(f);
		bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);

		if (nan ? !isnan(f) || (back & 0x7c00) != 0x7c00 || !(back & 0x3ff) : back != h)
			bad++;
	}
	CHECK(bad == 0, "%d halves did not round-trip", bad);

	static const struct { float f; uint16_t h; } known[] = {
		{ 0.0f, 0x0000 }, { -0.0f, 0x8000 }, { 1.0f, 0x3c00 }, { -2.0f, 0xc000 },
		{ 0.1f, 0x2e66 }, { 65504.0f, 0x7bff }, { 65519.0f, 0x7bff }, { 65520.0f, 0x7c00 },
		{ 1e6f, 0x7c00 }, { -INFINITY, 0xfc00 }, { 0x1p-14f, 0x0400 }, { 0x1p-24f, 0x0001 },
		{ 0x1p-25f, 0x0000 }, { 0x1.8p-25f, 0x0001 }, { 0x1.8p-24f, 0x0002 }, /* tie to even */
		{ 0x1.ffcp-15f, 0x0400 }, /* largest subnormal + half ulp rounds up to min normal */
		{ 1.0009765625f, 0x3c01 }, { 1.00048828125f, 0x3c00 }, /* tie to even, down */
		{ 1.00146484375f, 0x3c02 }, /* tie to even, up */
		{ 3.14159265f, 0x4248 },
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		uint16_t h = exl_fp32_to_fp16(known[i].f);
		CHECK(h == known[i].h, "fp16(%a) = 0x%04x, want 0x%04x", known[i].f, h, known[i].h);
	}
	CHECK(exl_fp16_to_fp32(0x0001) == 0x1p-24f, "smallest subnormal");
	CHECK(exl_fp16_to_fp32(0x03ff) == 0x1.ff8p-15f, "largest subnormal");
	CHECK(exl_fp16_to_fp32(0x7bff) == 65504.0f, "max half");
	CHECK(isinf(exl_fp16_to_fp32(0xfc00)) && exl_fp16_to_fp32(0xfc00) < 0, "-inf");
	CHECK(isnan(exl_fp16_to_fp32(0x7e00)), "nan");
	CHECK((exl_fp32_to_fp16(NAN) & 0x7e00) == 0x7e00, "nan stays quiet nan");

	CHECK(exl_fp32_to_bf16(1.0f) == 0x3f80, "bf16 1");
	CHECK(exl_bf16_to_fp32(0xc040) == -3.0f, "bf16 -3");
	/* 0x3f808000 is a tie: even (0x3f80) wins; 0x3f818000 rounds up */
	CHECK(exl_fp32_to_bf16(exl_bits_f32(0x3f808000u)) == 0x3f80, "bf16 tie down");
	CHECK(exl_fp32_to_bf16(exl_bits_f32(0x3f818000u)) == 0x3f82, "bf16 tie up");
	CHECK(exl_fp32_to_bf16(exl_bits_f32(0x3f808001u)) == 0x3f81, "bf16 above tie");
	CHECK(exl_fp32_to_bf16(exl_bits_f32(0x7f7fffffu)) == 0x7f80, "bf16 overflow to inf");
	CHECK((exl_fp32_to_bf16(NAN) & 0x7fc0) == 0x7fc0, "bf16 nan");
	for (uint32_t h = 0; h < 65536; h++) {
		if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
			continue;
		if (exl_fp32_to_bf16(exl_bf16_to_fp32((uint16_t)h)) != h)
			bad++;
	}
	CHECK(bad == 0, "%d bf16 values did not round-trip", bad);
}

/* ---- layouts: bytes from a fixed generator, values from GGML ---- */

static uint32_t lcg;

static void fill(uint8_t *b, int n, uint32_t seed)
{
	lcg = seed;
	for (int i = 0; i < n; i++) {
		lcg = lcg * 1103515245u + 12345u;
		b[i] = (uint8_t)(lcg >> 16);
	}
}

struct golden {
	const char *name;
	uint32_t type;
	int bytes, n;
	uint32_t seed;
	int d_off[2];       /* where the fp16 scales go (-1: none) */
	uint16_t d_val[2];
	double wsum;        /* sum of y[i] * (i % 7 + 1) */
	float at[14];       /* y at the indices below, as far as n reaches */
};

static const int golden_idx[14] = { 0, 1, 15, 16, 17, 31, 32, 63, 64, 100, 127, 128, 200, 255 };

/* Produced by llama.cpp's dequantize_row_* for the same bytes (q4_1 and
 * later: its to_float through ggml_get_type_traits in the peer's prebuilt
 * libggml-base, fill() copied into a 40-line program, fp16 fields set as
 * below; /tmp/peer, ../shared/tools/peer/setup.sh). */
static const struct golden goldens[] = {
	{ "q4_0", EXL_Q4_0, 18, 32, 1, { 0, -1 }, { 0x3c00, 0 }, 57,
	  { -7, 3, 7, 0, -2, 3 } },
	{ "q8_0", EXL_Q8_0, 34, 32, 2, { 0, -1 }, { 0x3000, 0 }, -134.75,
	  { -0.125f, 14.25f, 0.75f, -1.25f, -8.125f, 6.5f } },
	{ "q4_K", EXL_Q4_K, 144, 256, 3, { 0, 2 }, { 0x2e66, 0x3400 }, 21154.7303,
	  { 3.59863281f, 14.7958984f, 4.99829102f, 0.799316406f, 0.799316406f, 16.1955566f,
	    -1.35253906f, 24.6411133f, 8.24523926f, 25.9932861f, 3.99865723f, 22.2434082f,
	    -3.30102539f, 26.2421875f } },
	{ "q5_K", EXL_Q5_K, 176, 256, 4, { 0, 2 }, { 0x2e66, 0x3400 }, 35579.2932,
	  { 84.0793457f, 121.670166f, 107.573608f, 4.19885254f, 46.4885254f, 8.89770508f,
	    11.6464844f, 46.8378906f, 3.7487793f, 25.6402588f, 23.5407715f, 17.1442871f,
	    64.6828613f, 47.9864502f } },
	{ "q6_K", EXL_Q6_K, 210, 256, 5, { 208, -1 }, { 0x2400, 0 }, 1038.42188,
	  { 1.671875f, 38.453125f, 11.703125f, 28.875f, 32.8125f, -40.6875f, 7.34375f,
	    41.796875f, 5.859375f, 3.984375f, 19.296875f, 19.46875f, -37.5f, 39.84375f } },
	{ "q4_1", EXL_Q4_1, 20, 32, 6, { 0, 2 }, { 0x3400, 0xbc00 }, 78.5,
	  { -0.5f, 1.25f, -0.25f, 0.75f, 0.0f, 0.0f, } },
	{ "q5_0", EXL_Q5_0, 22, 32, 7, { 0, -1 }, { 0x3800, 0x0000 }, -77,
	  { -7.0f, -1.0f, 1.5f, 1.0f, 1.0f, -7.0f, } },
	{ "q5_1", EXL_Q5_1, 24, 32, 8, { 0, 2 }, { 0x2e66, 0xc000 }, -77.4406738,
	  { -0.900268555f, -0.700317383f, -1.80004883f, -0.200439453f, 0.69934082f, -1.3001709f, } },
	{ "iq4_nl", EXL_IQ4_NL, 18, 32, 9, { 0, -1 }, { 0x2400, 0x0000 }, 19.390625,
	  { 1.765625f, 1.765625f, -1.015625f, -0.34375f, 0.203125f, 1.765625f, } },
	{ "q2_K", EXL_Q2_K, 84, 256, 10, { 80, 82 }, { 0x2e66, 0x3400 }, -1174.34521,
	  { -1.25036621f, 0.249267578f, -2.75f, 0.449707031f, -0.75f, 0.449707031f, 0.399047852f, -2.5f, -3.0501709f, -2.40014648f, -2.20019531f, 2.74926758f, -3.5f, -2.5f, } },
	{ "q3_K", EXL_Q3_K, 110, 256, 11, { 108, -1 }, { 0x3000, 0x0000 }, 710.625,
	  { -4.5f, 4.5f, -6.75f, -3.5f, -2.625f, -1.75f, 7.0f, 1.75f, -2.125f, -5.5f, 6.0f, 11.0f, 10.125f, 7.5f, } },
	{ "iq4_xs", EXL_IQ4_XS, 136, 256, 12, { 0, -1 }, { 0x2000, 0x0000 }, 160.679688,
	  { 3.5546875f, -4.8671875f, 2.6796875f, 5.6875f, 4.5390625f, -3.7734375f, 1.6171875f, 0.5859375f, 2.0859375f, 9.5234375f, 15.9921875f, -28.7734375f, 3.90625f, 7.0625f, } },
};

static void test_layouts(void)
{
	/* GGML's kvalues_iq4nl */
	static const int iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
				       1, 13, 25, 38, 53, 69, 89, 113 };

	for (int i = 0; i < 16; i++)
		CHECK(exl_iq4nl_value(i) == iq4nl[i], "iq4_nl level %d = %d, want %d", i,
		      exl_iq4nl_value(i), iq4nl[i]);

	for (size_t g = 0; g < sizeof(goldens) / sizeof(goldens[0]); g++) {
		const struct golden *t = &goldens[g];
		uint8_t b[300];
		float y[256];
		double wsum = 0;

		CHECK(exl_dtype_row_bytes(t->type, (uint64_t)t->n) == (size_t)t->bytes, "%s size", t->name);
		fill(b, t->bytes, t->seed);
		for (int k = 0; k < 2; k++) {
			if (t->d_off[k] < 0)
				continue;
			b[t->d_off[k]] = (uint8_t)(t->d_val[k] & 0xff);
			b[t->d_off[k] + 1] = (uint8_t)(t->d_val[k] >> 8);
		}
		CHECK(exl_dequantize_row(t->type, b, y, t->n) == 0, "%s dequantize", t->name);
		for (int i = 0; i < t->n; i++)
			wsum += y[i] * (i % 7 + 1);
		CHECK(fabs(wsum - t->wsum) <= 1e-6 * fabs(t->wsum) + 1e-9, "%s wsum %.9g want %.9g",
		      t->name, wsum, t->wsum);
		for (int k = 0; k < 14 && golden_idx[k] < t->n; k++) {
			/* the golden values are printed to 9 digits: float-exact */
			CHECK(y[golden_idx[k]] == t->at[k], "%s y[%d] = %.9g, want %.9g", t->name,
			      golden_idx[k], y[golden_idx[k]], t->at[k]);
		}
	}
}

/* ---- MXFP4 ---- */

/* A uniform float in [-1, 1) from fill()'s generator. */
static float lcg_unif(void)
{
	lcg = lcg * 1103515245u + 12345u;
	return (float)((lcg >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* The 256 inputs of the quantizer's golden: 8 blocks of 32, each a case
 * of quantize_row_mxfp4_ref's (a small and a large scale, zeros, amax
 * exactly 4 and just under it, exactly representable values, values
 * halfway between two levels, a tiny scale). */
static void mxfp4_golden_input(float *x)
{
	static const int lv[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };
	static const float tie[16] = { 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 3.5f, -3.5f,
				       5, -5, 7, -7, 10, -10, 12, -12 };

	lcg = 99;
	for (int i = 0; i < 32; i++)
		x[i] = lcg_unif() * 0.02f;
	for (int i = 32; i < 64; i++)
		x[i] = lcg_unif() * 1000.0f;
	for (int i = 64; i < 96; i++)
		x[i] = 0.0f;
	for (int i = 96; i < 128; i++)
		x[i] = lcg_unif() * 3.0f;
	x[100] = 4.0f;
	for (int i = 128; i < 160; i++)
		x[i] = lcg_unif() * 3.0f;
	x[150] = -nextafterf(4.0f, 0.0f);
	for (int i = 160; i < 192; i++)
		x[i] = ldexpf((float)lv[(i * 7) % 16], 120 - 128);
	/* amax 48 = 12 d, e 130, d 4: ties between neighbouring levels */
	for (int i = 0; i < 32; i++)
		x[192 + i] = 4.0f * tie[i % 16];
	for (int i = 224; i < 256; i++)
		x[i] = lcg_unif() * 0x1p-120f;
}

/* MXFP4 (GGML type 39): its levels and E8M0 scale, dequantized values
 * against exact products, and both directions against llama.cpp: its
 * to_float and from_float_ref (dequantize_row_mxfp4,
 * quantize_row_mxfp4_ref) in the peer's prebuilt libggml-base, called
 * through ggml_get_type_traits(39) from a program with fill() and the
 * inputs above, as the goldens of test_layouts were made. */
static void test_mxfp4(void)
{
	/* GGML's kvalues_mxfp4 (E2M1 doubled) */
	static const int kv[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };
	/* llama.cpp's dequantized values at golden_idx of fill(b, 136, 13)
	 * with the 8 blocks' e set to these, and its sum y[i] * (i % 7 + 1) */
	static const uint8_t gold_e[8] = { 0, 1, 2, 127, 128, 131, 200, 240 };
	static const float gold_at[14] = { -0x1.8p-126f, 0x1p-125f, 0x1p-128f, 0x1p-128f, 0x1p-125f,
					   -0x1.8p-126f, -0x1.8p-126f, -0x1.8p-126f, -0x1.8p-125f, 0x1p+2f,
					   0x0p+0f, -0x1p+2f, -0x1.8p+75f, 0x1p+112f };
	const double gold_wsum = -3.16730108e+35;
	/* llama.cpp's quantize_row_mxfp4_ref of mxfp4_golden_input, block by
	 * block (e, then the 16 bytes of nibbles) */
	static const char *const gold_q[8] = {
		"7779ce4b462d549c0dd6c265355c6e5edc", "86ecefffaf7f54696dd7cf47fc0b67f767",
		"0000000000000000000000000000000000", "7fcc51cc1bb6a44132bb413a12d23923c0",
		"7ef01b7eee66f2f01d7db7cd4fdca02b3e", "780077ee55cc33aa1100ff66dd44bb2299",
		"820000119922aa33bb44cc55dd66ee77ff", "04ecec57a0be74ff9ff57fbb346b5fa7f0",
	};
	uint8_t b[8 * 17], q[8 * 17];
	float y[256], x[256];
	int bad = 0;

	CHECK(exl_dtype_info(EXL_MXFP4) && !strcmp(exl_dtype_info(EXL_MXFP4)->name, "mxfp4") &&
	      exl_dtype_row_bytes(EXL_MXFP4, 64) == 34 && exl_dtype_align(EXL_MXFP4) == 1 &&
	      exl_dtype_supported(EXL_MXFP4), "mxfp4: type 39, 17-byte blocks of 32, alignment 1");
	for (int i = 0; i < 16; i++)
		CHECK(exl_mxfp4_value(i) == kv[i], "mxfp4 level %d = %d, want %d", i, exl_mxfp4_value(i), kv[i]);

	/* the scale is 2^(e - 128) for every e: subnormal at 0 and 1, 2^127
	 * at 255 (GGML_E8M0_TO_FP32_HALF) */
	for (int e = 0; e < 256; e++)
		bad += exl_f32_bits(exl_e8m0_half((uint8_t)e)) != exl_f32_bits(ldexpf(1.0f, e - 128));
	CHECK(bad == 0, "mxfp4: %d scales are not 2^(e - 128)", bad);
	CHECK(exl_e8m0_half_bits(0) == 0x00200000u && exl_e8m0_half_bits(1) == 0x00400000u &&
	      exl_e8m0_half_bits(2) == 0x00800000u && exl_e8m0_half_bits(128) == 0x3f800000u &&
	      exl_e8m0_half_bits(254) == 0x7e800000u && exl_e8m0_half_bits(255) == 0x7f000000u,
	      "mxfp4: scale bits");

	/* every level under e 0, 1, 2, 127, 128, 254 and 255 (whose levels
	 * past +-1 overflow to inf, as in GGML): exactly level * 2^(e - 128) */
	static const uint8_t es[] = { 0, 1, 2, 127, 128, 254, 255 };
	for (size_t k = 0; k < sizeof(es) / sizeof(es[0]); k++) {
		block_mxfp4 blk = { .e = es[k] };

		for (int j = 0; j < 16; j++)
			blk.qs[j] = (uint8_t)(j | (15 - j) << 4);
		CHECK(exl_dequantize_row(EXL_MXFP4, &blk, y, 32) == 0, "mxfp4 dequantize");
		bad = 0;
		for (int i = 0; i < 32; i++) {
			float want = (float)ldexp((double)kv[i < 16 ? i : 31 - i], es[k] - 128);

			bad += y[i] != want;
		}
		CHECK(bad == 0, "mxfp4 e %d: %d values are not level * 2^(e - 128)", es[k], bad);
	}

	/* exactly representable blocks (amax = 12 * 2^(e - 128)) come back
	 * exactly, with their e */
	static const uint8_t exact_e[] = { 1, 2, 100, 128, 200, 252 };
	for (size_t k = 0; k < sizeof(exact_e) / sizeof(exact_e[0]); k++) {
		block_mxfp4 blk;

		for (int i = 0; i < 32; i++)
			x[i] = ldexpf((float)kv[(5 * i + 7) % 16], exact_e[k] - 128);
		CHECK(exl_quantize_row(EXL_MXFP4, x, &blk, 32) == 17, "mxfp4 quantize");
		exl_dequantize_row(EXL_MXFP4, &blk, y, 32);
		CHECK(blk.e == exact_e[k] && memcmp(x, y, sizeof(float) * 32) == 0,
		      "mxfp4 e %d: exact values did not round-trip (e %d)", exact_e[k], blk.e);
	}

	/* llama.cpp's dequantizer */
	fill(b, (int)sizeof(b), 13);
	for (int k = 0; k < 8; k++)
		b[17 * k] = gold_e[k];
	CHECK(exl_dequantize_row(EXL_MXFP4, b, y, 256) == 0, "mxfp4 dequantize 8 blocks");
	double wsum = 0;
	for (int i = 0; i < 256; i++)
		wsum += y[i] * (i % 7 + 1);
	CHECK(fabs(wsum - gold_wsum) <= 1e-6 * fabs(gold_wsum), "mxfp4 wsum %.9g want %.9g", wsum, gold_wsum);
	for (int k = 0; k < 14; k++)
		CHECK(y[golden_idx[k]] == gold_at[k], "mxfp4 y[%d] = %a, want %a", golden_idx[k],
		      y[golden_idx[k]], gold_at[k]);
	/* and the same bytes one block later: rows at odd addresses */
	{
		uint8_t odd[8 * 17 + 1];
		float y2[256];

		memcpy(odd + 1, b, sizeof(b));
		exl_dequantize_row(EXL_MXFP4, odd + 1, y2, 256);
		CHECK(memcmp(y, y2, sizeof(y)) == 0, "mxfp4 at an odd address");
	}

	/* llama.cpp's quantizer, byte for byte */
	mxfp4_golden_input(x);
	CHECK(exl_quantize_row(EXL_MXFP4, x, q, 256) == sizeof(q), "mxfp4 quantize 8 blocks");
	for (int k = 0; k < 8; k++) {
		char hex[35];

		for (int i = 0; i < 17; i++)
			snprintf(hex + 2 * i, 3, "%02x", q[17 * k + i]);
		CHECK(!strcmp(hex, gold_q[k]), "mxfp4 block %d quantized to %s, llama.cpp's %s", k, hex,
		      gold_q[k]);
	}
}

/* ---- round trips ---- */

static double gauss(void)
{
	double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);

	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

struct rt_case {
	uint32_t type;
	double max_rel_rmse; /* RMS error over RMS of the data */
	double max_abs_frac; /* per block: max |error| / max |x| of the block */
};

static void test_roundtrip(void)
{
	/* Bounds: Q8_0 rounding error <= d/2 = amax/254 plus the fp16 scale's
	 * 2^-11 relative error; Q4_0: the extreme maps to level -8, so a
	 * value of the other sign near it clamps at +7: error <= d = amax/8;
	 * K-quants from measured GGML-equivalent quality with a
	 * margin (GGML's reference quantizers reach 0.071 / 0.018). */
	static const struct rt_case cases[] = {
		{ EXL_F32, 0, 0 },
		{ EXL_F16, 0.0005, 0.0005 },
		{ EXL_BF16, 0.004, 0.004 },
		{ EXL_Q8_0, 0.008, 1.0 / 254 + 1.0 / 1024 },
		{ EXL_Q4_0, 0.11, 1.0 / 8 + 1.0 / 256 },
		{ EXL_Q4_K, 0.08, 0.2 },
		{ EXL_Q6_K, 0.022, 0.05 },
		/* Q4_1 / Q5_1: levels over [min, max] <= 2 max|x|, half a step
		 * off at most; Q5_0: as Q4_0 with 32 levels; IQ4_NL: half the
		 * widest gap between levels (24 at the ends) of a scale at most
		 * max|x| / 103; the rest measured with a margin */
		{ EXL_Q4_1, 0.09, 1.0 / 15 + 1.0 / 256 },
		{ EXL_Q5_0, 0.055, 1.0 / 16 + 1.0 / 256 },
		{ EXL_Q5_1, 0.045, 1.0 / 31 + 1.0 / 256 },
		{ EXL_IQ4_NL, 0.09, 12.0 / 103 + 1.0 / 256 },
		/* MXFP4: amax in [8, 16) steps 2^(e - 128), levels up to 12:
		 * at most 4 steps off (a value past 12 clipped, or half the gap
		 * 8..12) in at least 8 */
		{ EXL_MXFP4, 0.12, 0.25 + 1.0 / 256 },
		{ EXL_Q2_K, 0.40, 0.6 },
		{ EXL_Q3_K, 0.20, 0.4 },
		{ EXL_Q5_K, 0.04, 0.1 },
		{ EXL_IQ4_XS, 0.09, 0.2 },
	};
	const int64_t n = 256 * 64;
	float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
	void *q = malloc((size_t)n * 4);

	srand(7);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(gauss() * (1 + (i / 256) % 4) * 0.02);
	/* a block of zeros and a block with one outlier */
	memset(x + 512, 0, 256 * sizeof(float));
	x[1024 + 5] = 3.0f;

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint32_t t = cases[c].type;
		const char *name = exl_dtype_info(t)->name;
		double se = 0, sx = 0, worst = 0;

		CHECK(exl_quantize_row(t, x, q, n) == exl_dtype_row_bytes(t, (uint64_t)n), "%s size", name);
		CHECK(exl_dequantize_row(t, q, y, n) == 0, "%s dequantize", name);
		for (int64_t b = 0; b < n; b += 256) {
			double amax = 0, emax = 0;

			for (int64_t i = b; i < b + 256; i++) {
				double e = (double)y[i] - x[i];

				se += e * e;
				sx += (double)x[i] * x[i];
				amax = fmax(amax, fabs(x[i]));
				emax = fmax(emax, fabs(e));
			}
			if (amax > 0 && exl_dtype_info(t)->block_elems != 32)
				worst = fmax(worst, emax / amax);
			if (amax == 0)
				CHECK(emax == 0, "%s: zero block not exact", name);
		}
		if (exl_dtype_info(t)->block_elems == 32) {
			/* per 32-element block */
			for (int64_t b = 0; b < n; b += 32) {
				double amax = 0, emax = 0;

				for (int64_t i = b; i < b + 32; i++) {
					amax = fmax(amax, fabs(x[i]));
					emax = fmax(emax, fabs((double)y[i] - x[i]));
				}
				if (amax > 0)
					worst = fmax(worst, emax / amax);
			}
		}
		double rel = sqrt(se / sx);
		printf("roundtrip %-6s rel rmse %.5f, worst block error / max %.5f\n", name, rel, worst);
		if (t == EXL_F32) {
			CHECK(memcmp(x, y, sizeof(float) * n) == 0, "f32 not exact");
			continue;
		}
		CHECK(rel <= cases[c].max_rel_rmse, "%s rel rmse %g > %g", name, rel, cases[c].max_rel_rmse);
		CHECK(worst <= cases[c].max_abs_frac, "%s block error %g > %g", name, worst,
		      cases[c].max_abs_frac);
	}

	/* refused: unknown or unwritable type, partial block, n <= 0 */
	CHECK(exl_quantize_row(EXL_IQ2_XS, x, q, 256) == 0, "iq2_xs is not writable");
	CHECK(exl_quantize_row(EXL_Q8_K, x, q, 256) == 0, "q8_k is not writable");
	CHECK(exl_quantize_row(EXL_Q8_0, x, q, 33) == 0, "partial block");
	CHECK(exl_quantize_row(EXL_Q4_K, x, q, 0) == 0, "n = 0");
	CHECK(exl_quantize_row(99, x, q, 32) == 0, "unknown type");
	CHECK(exl_dequantize_row(EXL_Q6_K, q, y, 100) == -1, "partial K block");
	CHECK(exl_dequantize_row(EXL_IQ2_XS, q, y, 256) == -1, "uncomputed type");
	/* the computed set: every type with a quantizer (Q8_K is the
	 * activation format, the other IQ types have no kernels) */
	for (uint32_t t = 0; t < EXL_DTYPE_COUNT; t++) {
		bool want = t == EXL_F32 || t == EXL_F16 || t == EXL_BF16 || t == EXL_Q8_0 ||
			    t == EXL_Q4_0 || t == EXL_Q4_1 || t == EXL_Q5_0 || t == EXL_Q5_1 ||
			    t == EXL_IQ4_NL || t == EXL_MXFP4 || t == EXL_Q2_K || t == EXL_Q3_K || t == EXL_Q4_K ||
			    t == EXL_Q5_K || t == EXL_Q6_K || t == EXL_IQ4_XS;

		CHECK(exl_dtype_supported(t) == want && exl_quantize_supported(t) == want,
		      "type %u (%s) supported %d, writable %d", t,
		      exl_dtype_info(t) ? exl_dtype_info(t)->name : "-", exl_dtype_supported(t),
		      exl_quantize_supported(t));
	}

	/* Q8_0 known bytes: 0..31 -> d = 31/127, q = round(i * 127 / 31) */
	{
		float v[32];
		block_q8_0 blk;

		for (int i = 0; i < 32; i++)
			v[i] = (float)i;
		exl_quantize_row(EXL_Q8_0, v, &blk, 32);
		CHECK(blk.d == exl_fp32_to_fp16(31.0f / 127.0f), "q8_0 d");
		CHECK(blk.qs[31] == 127 && blk.qs[1] == 4 && blk.qs[16] == 66, "q8_0 q %d %d %d",
		      blk.qs[31], blk.qs[1], blk.qs[16]);
	}
	free(x);
	free(y);
	free(q);
}

int main(void)
{
	test_fp16();
	test_layouts();
	test_mxfp4();
	test_roundtrip();
	printf("%d passed, %d failed\n", check_count - check_failures, check_failures);
	return check_failures ? 1 : 0;
}

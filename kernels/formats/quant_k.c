/* Reference quantizers for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and
 * the IQ4 types (IQ4_NL, IQ4_XS).
 *
 * Each sub-block gets its own scale (and, for Q4_K, min) from a small
 * search: a range of candidate inverse scales around the naive one is tried,
 * each rounding is scored by the weighted squared error of the best
 * least-squares (scale, min) for that rounding, and the best kept.  The
 * sub-block scales are then themselves quantized (6-bit for Q4_K, int8 for
 * Q6_K) under one fp16 super-block scale, and the weights re-rounded
 * against the scales actually stored.
 */
#include <math.h>
#include <string.h>

#include "kernels/formats/elem.h"
#include "kernels/formats/quant_internal.h"

/* Asymmetric fit of n values to levels 0..nmax: x ~ scale * l - min with
 * min >= 0 (x = 0 stays representable).  Writes the levels to L and the min
 * to *min_out, returns the scale. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w,
			   uint8_t *L, float *min_out)
{
	uint8_t trial[32];
	float lo = x[0], hi = x[0];
	float sw = 0, swx = 0;

	for (int i = 0; i < n; i++) {
		lo = fminf(lo, x[i]);
		hi = fmaxf(hi, x[i]);
		sw += w[i];
		swx += w[i] * x[i];
	}
	if (lo > 0)
		lo = 0;
	if (hi == lo) {
		memset(L, 0, (size_t)n);
		*min_out = -lo;
		return 0;
	}

	/* the naive fit: levels spread over [lo, hi] */
	float scale = (hi - lo) / (float)nmax;
	float best_min = lo;
	float best_err = 0;

	for (int i = 0; i < n; i++) {
		int l = exl_nearest_int((x[i] - lo) / scale);
		l = l < 0 ? 0 : l > nmax ? nmax : l;
		L[i] = (uint8_t)l;
		float d = scale * (float)l + lo - x[i];
		best_err += w[i] * d * d;
	}

	for (int step = 0; step <= 20; step++) {
		float iscale = ((float)nmax - 1.0f + 0.1f * (float)step) / (hi - lo);
		float sl = 0, sl2 = 0, sxl = 0;

		for (int i = 0; i < n; i++) {
			/* round against the best offset so far */
			int l = exl_nearest_int(iscale * (x[i] - best_min));
			l = l < 0 ? 0 : l > nmax ? nmax : l;
			trial[i] = (uint8_t)l;
			sl += w[i] * (float)l;
			sl2 += w[i] * (float)l * (float)l;
			sxl += w[i] * (float)l * x[i];
		}
		/* weighted least squares for x ~ a * l + b */
		float det = sw * sl2 - sl * sl;
		if (det <= 0)
			continue;
		float a = (sw * sxl - swx * sl) / det;
		float b = (sl2 * swx - sl * sxl) / det;
		if (b > 0) {
			b = 0;
			a = sxl / sl2;
		}
		float err = 0;
		for (int i = 0; i < n; i++) {
			float d = a * (float)trial[i] + b - x[i];
			err += w[i] * d * d;
		}
		if (err < best_err) {
			memcpy(L, trial, (size_t)n);
			best_err = err;
			scale = a;
			best_min = b;
		}
	}
	*min_out = -best_min;
	return scale;
}

/* Symmetric fit of n values to levels -nmax..nmax-1, weights x^2.  Returns
 * the (signed) scale; levels in L. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L)
{
	float amax = 0, extreme = 0;

	for (int i = 0; i < n; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			extreme = x[i];
		}
	}
	if (amax < 1e-15f) {
		memset(L, 0, (size_t)n);
		return 0;
	}

	float best_scale = 0, best_score = -1;

	/* the extreme value maps to -nmax, where the range is widest */
	for (int step = -9; step <= 9; step++) {
		float iscale = -((float)nmax + 0.1f * (float)step) / extreme;
		float sxl = 0, sl2 = 0;
		int8_t trial[16];

		for (int i = 0; i < n; i++) {
			int l = exl_nearest_int(iscale * x[i]);
			l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
			trial[i] = (int8_t)l;
			float wi = x[i] * x[i];
			sxl += wi * x[i] * (float)l;
			sl2 += wi * (float)l * (float)l;
		}
		/* least-squares scale sxl / sl2 leaves error sum(w x^2) -
		 * sxl^2 / sl2: maximize sxl^2 / sl2 */
		if (sl2 <= 0)
			continue;
		float score = sxl * sxl / sl2;
		if (score > best_score) {
			best_score = score;
			best_scale = sxl / sl2;
			memcpy(L, trial, (size_t)n);
		}
	}
	return best_scale;
}

/* Q4_K / Q5_K: 8 sub-blocks of 32 on levels 0..nmax, each with a 6-bit
 * scale and min under the fp16 d and dmin.  Writes those to y's fields
 * and the levels, re-rounded against the scales as stored, to L. */
static void quantize_k_scale_min(const float *x, int nmax, uint16_t *dh, uint16_t *dminh,
				 uint8_t *packed, uint8_t *L)
{
	float w[32];
	float scales[8], mins[8];
	float max_scale = 0, max_min = 0;

	for (int j = 0; j < 8; j++) {
		const float *xs = x + 32 * j;
		float s2 = 0;

		for (int l = 0; l < 32; l++)
			s2 += xs[l] * xs[l];
		float rms = sqrtf(s2 / 32);
		/* large values matter more, but no value is ignored */
		for (int l = 0; l < 32; l++)
			w[l] = rms + fabsf(xs[l]);
		scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j]);
		max_scale = fmaxf(max_scale, scales[j]);
		max_min = fmaxf(max_min, mins[j]);
	}

	float iscale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
	float imin = max_min > 0 ? 63.0f / max_min : 0.0f;

	memset(packed, 0, EXL_K_SCALE_SIZE);
	for (int j = 0; j < 8; j++) {
		int ls = exl_nearest_int(iscale * scales[j]);
		int lm = exl_nearest_int(imin * mins[j]);

		ls = ls < 0 ? 0 : ls > 63 ? 63 : ls;
		lm = lm < 0 ? 0 : lm > 63 ? 63 : lm;
		if (j < 4) {
			packed[j] |= (uint8_t)ls;
			packed[j + 4] |= (uint8_t)lm;
		} else {
			packed[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
			packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
			packed[j] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	*dh = exl_fp32_to_fp16(max_scale / 63.0f);
	*dminh = exl_fp32_to_fp16(max_min / 63.0f);

	/* re-round against the scales as stored */
	float d = exl_fp16_to_fp32(*dh);
	float dmin = exl_fp16_to_fp32(*dminh);
	for (int j = 0; j < 8; j++) {
		uint8_t sc, m;

		exl_get_scale_min_k4(j, packed, &sc, &m);
		float ds = d * (float)sc;
		float dm = dmin * (float)m;
		if (ds == 0) {
			memset(L + 32 * j, 0, 32);
			continue;
		}
		for (int l = 0; l < 32; l++) {
			int q = exl_nearest_int((x[32 * j + l] + dm) / ds);
			L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
		}
	}
}

void exl_quantize_block_q4_K(const float *x, block_q4_K *y)
{
	uint8_t L[EXL_QK_K];

	quantize_k_scale_min(x, 15, &y->d, &y->dmin, y->scales, L);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++)
			y->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

/* Q5_K: Q4_K's nibbles plus a fifth bit per weight: weight 64c + l (low
 * nibble of qs[32c + l]) has it in bit 2c of qh[l], weight 64c + 32 + l in
 * bit 2c + 1. */
void exl_quantize_block_q5_K(const float *x, block_q5_K *y)
{
	uint8_t L[EXL_QK_K];

	quantize_k_scale_min(x, 31, &y->d, &y->dmin, y->scales, L);
	memset(y->qh, 0, sizeof(y->qh));
	for (int c = 0; c < 4; c++) {
		for (int l = 0; l < 32; l++) {
			uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];

			y->qs[32 * c + l] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
			y->qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
		}
	}
}

/* Q2_K: 16 groups of 16 on levels 0..3, each with a 4-bit scale and min
 * under the fp16 d and dmin. */
void exl_quantize_block_q2_K(const float *x, block_q2_K *y)
{
	uint8_t L[EXL_QK_K];
	float w[16];
	float scales[16], mins[16];
	float max_scale = 0, max_min = 0;

	for (int g = 0; g < 16; g++) {
		const float *xs = x + 16 * g;
		float s2 = 0;

		for (int l = 0; l < 16; l++)
			s2 += xs[l] * xs[l];
		float rms = sqrtf(s2 / 16);
		for (int l = 0; l < 16; l++)
			w[l] = rms + fabsf(xs[l]);
		scales[g] = fit_scale_min(16, 3, xs, w, L + 16 * g, &mins[g]);
		max_scale = fmaxf(max_scale, scales[g]);
		max_min = fmaxf(max_min, mins[g]);
	}

	float iscale = max_scale > 0 ? 15.0f / max_scale : 0.0f;
	float imin = max_min > 0 ? 15.0f / max_min : 0.0f;

	y->d = exl_fp32_to_fp16(max_scale / 15.0f);
	y->dmin = exl_fp32_to_fp16(max_min / 15.0f);
	float d = exl_fp16_to_fp32(y->d);
	float dmin = exl_fp16_to_fp32(y->dmin);

	for (int g = 0; g < 16; g++) {
		int ls = exl_nearest_int(iscale * scales[g]);
		int lm = exl_nearest_int(imin * mins[g]);

		ls = ls < 0 ? 0 : ls > 15 ? 15 : ls;
		lm = lm < 0 ? 0 : lm > 15 ? 15 : lm;
		y->scales[g] = (uint8_t)(ls | lm << 4);

		/* re-round against the scales as stored */
		float ds = d * (float)ls, dm = dmin * (float)lm;
		for (int l = 0; l < 16; l++) {
			int q = ds == 0 ? 0 : exl_nearest_int((x[16 * g + l] + dm) / ds);
			L[16 * g + l] = (uint8_t)(q < 0 ? 0 : q > 3 ? 3 : q);
		}
	}
	memset(y->qs, 0, sizeof(y->qs));
	for (int k = 0; k < EXL_QK_K; k++) {
		int h = k / 128, s = (k / 32) % 4, l = k % 32;

		y->qs[32 * h + l] |= (uint8_t)(L[k] << (2 * s));
	}
}

/* Q3_K: 16 groups of 16 on levels -4..3 with signed 6-bit scales under one
 * fp16 d; the largest scale maps to -32, where the range is widest. */
void exl_quantize_block_q3_K(const float *x, block_q3_K *y)
{
	int8_t L[EXL_QK_K];
	float scales[16];
	float max_scale = 0, max_abs = 0;

	for (int g = 0; g < 16; g++) {
		scales[g] = fit_scale_sym(16, 4, x + 16 * g, L + 16 * g);
		if (fabsf(scales[g]) > max_abs) {
			max_abs = fabsf(scales[g]);
			max_scale = scales[g];
		}
	}
	memset(y, 0, sizeof(*y));
	float iscale = max_abs > 1e-15f ? -32.0f / max_scale : 0.0f;

	y->d = exl_fp32_to_fp16(iscale != 0 ? 1.0f / iscale : 0.0f);
	float d = exl_fp16_to_fp32(y->d);
	for (int g = 0; g < 16; g++) {
		int ls = exl_nearest_int(iscale * scales[g]);

		ls = ls < -32 ? -32 : ls > 31 ? 31 : ls;
		unsigned v = (unsigned)(ls + 32);
		if (g < 8)
			y->scales[g] |= (uint8_t)(v & 0x0f);
		else
			y->scales[g - 8] |= (uint8_t)((v & 0x0f) << 4);
		y->scales[8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));

		float ds = d * (float)ls;
		for (int l = 0; l < 16; l++) {
			int q = ds == 0 ? 0 : exl_nearest_int(x[16 * g + l] / ds);
			L[16 * g + l] = (int8_t)(q < -4 ? -4 : q > 3 ? 3 : q);
		}
	}
	for (int k = 0; k < EXL_QK_K; k++) {
		int h = k / 128, s = (k / 32) % 4, l = k % 32;
		unsigned u = (unsigned)(L[k] + 4);

		y->qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * s));
		if (u & 4)
			y->hmask[l] |= (uint8_t)(1u << (4 * h + s));
	}
}

/* ---- IQ4_NL / IQ4_XS: 16 fixed non-uniform levels ---- */

/* The level nearest v, by the midpoints between neighbours. */
static int iq4_nearest(float v)
{
	int i = 0;

	while (i < 15 && v > 0.5f * (float)(exl_iq4nl_value(i) + exl_iq4nl_value(i + 1)))
		i++;
	return i;
}

void exl_round_iq4(const float *x, float d, uint8_t *L)
{
	float id = d != 0 ? 1.0f / d : 0.0f;

	for (int i = 0; i < 32; i++)
		L[i] = (uint8_t)iq4_nearest(x[i] * id);
}

float exl_fit_iq4(const float *x, uint8_t *L)
{
	float amax = 0, extreme = 0, s2 = 0, w[32];
	float best_d = 0, best_score = -1;
	uint8_t trial[32];

	for (int i = 0; i < 32; i++) {
		s2 += x[i] * x[i];
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			extreme = x[i];
		}
	}
	if (amax < 1e-30f) {
		exl_round_iq4(x, 0, L);
		return 0;
	}
	float rms = sqrtf(s2 / 32);
	for (int i = 0; i < 32; i++)
		w[i] = rms + fabsf(x[i]);

	/* the extreme value near the widest level, -127: the levels are
	 * denser near zero, so a slightly larger scale can serve the rest
	 * better */
	for (int step = -12; step <= 12; step++) {
		float d = extreme / (-127.0f + 2.0f * (float)step);
		float sxv = 0, svv = 0;

		exl_round_iq4(x, d, trial);
		for (int i = 0; i < 32; i++) {
			float v = (float)exl_iq4nl_value(trial[i]);

			sxv += w[i] * x[i] * v;
			svv += w[i] * v * v;
		}
		/* least-squares scale sxv / svv leaves error sum(w x^2) -
		 * sxv^2 / svv: maximize sxv^2 / svv */
		if (svv <= 0)
			continue;
		float score = sxv * sxv / svv;
		if (score > best_score) {
			best_score = score;
			best_d = sxv / svv;
			memcpy(L, trial, 32);
		}
	}
	return best_d;
}

/* IQ4_XS: each sub-block of 32 fitted as IQ4_NL would be, the scales then
 * quantized to signed 6 bits under one fp16 d (the largest to -32) and the
 * levels re-rounded against the scales as stored. */
void exl_quantize_block_iq4_xs(const float *x, block_iq4_xs *y)
{
	uint8_t L[EXL_QK_K];
	float dl[8];
	float max_scale = 0, max_abs = 0;

	for (int j = 0; j < 8; j++) {
		dl[j] = exl_fit_iq4(x + 32 * j, L + 32 * j);
		if (fabsf(dl[j]) > max_abs) {
			max_abs = fabsf(dl[j]);
			max_scale = dl[j];
		}
	}
	memset(y, 0, sizeof(*y));
	float iscale = max_abs > 1e-30f ? -32.0f / max_scale : 0.0f;

	y->d = exl_fp32_to_fp16(iscale != 0 ? 1.0f / iscale : 0.0f);
	float d = exl_fp16_to_fp32(y->d);
	for (int j = 0; j < 8; j++) {
		int ls = exl_nearest_int(iscale * dl[j]);

		ls = ls < -32 ? -32 : ls > 31 ? 31 : ls;
		unsigned v = (unsigned)(ls + 32);
		y->scales_l[j / 2] |= (uint8_t)((v & 0x0f) << (4 * (j % 2)));
		y->scales_h |= (uint16_t)((v >> 4) << (2 * j));
		exl_round_iq4(x + 32 * j, d * (float)ls, L + 32 * j);
		for (int l = 0; l < 16; l++)
			y->qs[16 * j + l] = (uint8_t)(L[32 * j + l] | L[32 * j + 16 + l] << 4);
	}
}

void exl_quantize_block_q6_K(const float *x, block_q6_K *y)
{
	int8_t L[EXL_QK_K];
	float scales[16];
	float max_scale = 0, max_abs = 0;

	for (int s = 0; s < 16; s++) {
		scales[s] = fit_scale_sym(16, 32, x + 16 * s, L + 16 * s);
		if (fabsf(scales[s]) > max_abs) {
			max_abs = fabsf(scales[s]);
			max_scale = scales[s];
		}
	}
	memset(y, 0, sizeof(*y));
	if (max_abs < 1e-15f)
		return;

	/* the largest scale maps to -128 so int8 scales use their full range */
	float iscale = -128.0f / max_scale;
	y->d = exl_fp32_to_fp16(1.0f / iscale);
	for (int s = 0; s < 16; s++) {
		int v = exl_nearest_int(iscale * scales[s]);
		y->scales[s] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
	}

	float d = exl_fp16_to_fp32(y->d);
	for (int s = 0; s < 16; s++) {
		float ds = d * (float)y->scales[s];
		if (ds == 0) {
			memset(L + 16 * s, 0, 16);
			continue;
		}
		for (int l = 0; l < 16; l++) {
			int q = exl_nearest_int(x[16 * s + l] / ds);
			L[16 * s + l] = (int8_t)(q < -32 ? -32 : q > 31 ? 31 : q);
		}
	}
	for (int h = 0; h < 2; h++) {
		const int8_t *Lh = L + 128 * h;
		uint8_t *ql = y->ql + 64 * h;
		uint8_t *qh = y->qh + 32 * h;

		for (int l = 0; l < 32; l++) {
			unsigned q1 = (unsigned)(Lh[l] + 32);
			unsigned q2 = (unsigned)(Lh[l + 32] + 32);
			unsigned q3 = (unsigned)(Lh[l + 64] + 32);
			unsigned q4 = (unsigned)(Lh[l + 96] + 32);

			ql[l] = (uint8_t)((q1 & 0x0f) | ((q3 & 0x0f) << 4));
			ql[l + 32] = (uint8_t)((q2 & 0x0f) | ((q4 & 0x0f) << 4));
			qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
		}
	}
}

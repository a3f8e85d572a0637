/* Per-element math shared by the CPU and the CUDA backends: RoPE angles and
 * rotation, SiLU, the RMSNorm scale, the pieces of a numerically careful
 * (max-subtracted, online) softmax, and the dequantization of 32 weights of
 * a K-quant block at a time (a GPU thread's share of a row).  Every function is EXL_HD (kernels/formats/elem.h):
 * plain static inline C on the host, __host__ __device__ under nvcc, so the
 * CPU unit tests cover the arithmetic the GPU runs.
 *
 * No fast-math: nvcc is not given --use_fast_math, so expf, pow, sin and
 * cos here are the accurate versions on both sides.
 */
#ifndef EXL_ELEM_MATH_H
#define EXL_ELEM_MATH_H

#include <math.h>
#include <stdbool.h>

#include "kernels/formats/elem.h"

/* RoPE.  Pair i (0 <= i < n_rot / 2) of a head at position pos rotates by
 *   theta = pos * freq_scale * freq_base^(-2i / n_rot),
 * computed in double from the formula for each pair (no running product,
 * which would gather rounding error along the head): positions run to
 * millions, where a float angle would be off by a tenth of a radian.  Both
 * backends tabulate cos and sin of it once per batch with exactly this
 * function (the CPU in ops_rope.c, the GPU in a kernel of
 * ops_elementwise.cu), so a table costs n_tokens * n_rot / 2 evaluations,
 * not one per head and layer. */
EXL_HD double exl_rope_angle(int pos, int i, int n_rot, float freq_base, float freq_scale)
{
	double inv_freq = pow((double)freq_base, -2.0 * (double)i / (double)n_rot);

	return (double)pos * (double)freq_scale * inv_freq;
}

/* cos and sin of pair i's angle, rounded once to float. */
EXL_HD void exl_rope_cos_sin(int pos, int i, int n_rot, float freq_base, float freq_scale,
			     float *c, float *s)
{
	double theta = exl_rope_angle(pos, i, n_rot, freq_base, freq_scale);

	*c = (float)cos(theta);
	*s = (float)sin(theta);
}

/* The same with the angle divided by the pair's frequency factor ff and
 * both results multiplied by mscale (struct exl_rope_params' freq_factors
 * and attn_factor); ff = mscale = 1 gives exl_rope_cos_sin's bits. */
EXL_HD void exl_rope_cos_sin_ext(int pos, int i, int n_rot, float freq_base, float freq_scale,
				 float ff, float mscale, float *c, float *s)
{
	double theta = exl_rope_angle(pos, i, n_rot, freq_base, freq_scale) / (double)ff;

	*c = (float)cos(theta) * mscale;
	*s = (float)sin(theta) * mscale;
}

/* YaRN's blend for pair i: 1 below ramp_lo (the angle as trained), 0 past
 * ramp_hi (the angle times freq_scale), linear between.  ramp_lo and
 * ramp_hi are pair indices, from exl_rope_yarn_ramp_dims. */
EXL_HD double exl_rope_yarn_mix(int i, float ramp_lo, float ramp_hi)
{
	double w = (double)ramp_hi - (double)ramp_lo;
	double y = ((double)i - (double)ramp_lo) / (w > 0.001 ? w : 0.001);

	return 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
}

/* The pair at which a rotation makes `turns` turns over the original
 * context: from n_ctx_orig * freq_base^(-2i / n_rot) = turns * 2 pi. */
EXL_HD float exl_rope_yarn_dim(int n_rot, int n_ctx_orig, float turns, float freq_base)
{
	return (float)n_rot * logf((float)n_ctx_orig / (turns * 2.0f * 3.14159265358979f)) /
	       (2.0f * logf(freq_base));
}

/* YaRN's ramp: pairs that turn more than beta_fast times over the original
 * context keep their angle, those that turn less than beta_slow times are
 * interpolated, whole pairs at the ends as the paper's code and llama.cpp
 * round them (floor and ceil, in float). */
EXL_HD void exl_rope_yarn_ramp_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast,
				    float beta_slow, float *lo, float *hi)
{
	float a = floorf(exl_rope_yarn_dim(n_rot, n_ctx_orig, beta_fast, freq_base));
	float b = ceilf(exl_rope_yarn_dim(n_rot, n_ctx_orig, beta_slow, freq_base));

	*lo = a > 0.0f ? a : 0.0f;
	*hi = b < (float)(n_rot - 1) ? b : (float)(n_rot - 1);
}

/* exl_rope_cos_sin_ext with YaRN: the angle blends the trained one
 * (weight mix * ext_factor) with the interpolated one (times freq_scale).
 * ext_factor 0 is exl_rope_cos_sin_ext, bit for bit. */
EXL_HD void exl_rope_cos_sin_yarn(int pos, int i, int n_rot, float freq_base, float freq_scale,
				  float ff, float ext_factor, float ramp_lo, float ramp_hi,
				  float mscale, float *c, float *s)
{
	if (ext_factor == 0.0f) {
		exl_rope_cos_sin_ext(pos, i, n_rot, freq_base, freq_scale, ff, mscale, c, s);
		return;
	}
	double extrap = exl_rope_angle(pos, i, n_rot, freq_base, 1.0f) / (double)ff;
	double mix = exl_rope_yarn_mix(i, ramp_lo, ramp_hi) * (double)ext_factor;
	double theta = extrap * (double)freq_scale * (1.0 - mix) + extrap * mix;

	*c = (float)cos(theta) * mscale;
	*s = (float)sin(theta) * mscale;
}

/* Llama 4's attention temperature at position pos (struct
 * exl_rope_params' temp_scale and temp_floor): 1 when scale is 0. */
EXL_HD float exl_rope_temp(int pos, float scale, int floor_len)
{
	if (scale == 0.0f || floor_len <= 0)
		return 1.0f;
	return (float)(log((double)(pos / floor_len) + 1.0) * (double)scale + 1.0);
}

/* The two offsets within a head that pair i rotates: NeoX halves layout
 * (i, i + n_rot/2), else adjacent elements (2i, 2i + 1).  Dimensions at and
 * past n_rot are not rotated. */
EXL_HD void exl_rope_pair(int i, int n_rot, bool neox, int *a, int *b)
{
	if (neox) {
		*a = i;
		*b = i + n_rot / 2;
	} else {
		*a = 2 * i;
		*b = 2 * i + 1;
	}
}

/* Rotates (x[a], x[b]) by the angle whose cosine and sine are c and s: a
 * product and a sum each, in the order the CPU kernels compute
 * x[a] * c + x[b] * (-s) and x[b] * c + x[a] * s, so without FMA
 * contraction (C11, nvcc --fmad=false) the results are bit-identical. */
EXL_HD void exl_rope_rotate(float *x, int a, int b, float c, float s)
{
	float x0 = x[a];
	float x1 = x[b];

	x[a] = x0 * c - x1 * s;
	x[b] = x1 * c + x0 * s;
}

/* silu(x) = x * sigmoid(x).  For x very negative expf(-x) is +inf and the
 * quotient a signed zero, never NaN. */
EXL_HD float exl_silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* GELU in the tanh form gemma's FFN was trained with:
 * 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), computed as the
 * equal x / (1 + exp(-2z)): 1 + tanh(z) cancels to a few correct bits for
 * x below -3, the exponential keeps float's relative precision.  Very
 * negative x makes exp(-2z) +inf and the result a signed zero, very
 * positive x gives x; never NaN. */
EXL_HD float exl_gelu_tanh(float x)
{
	const float k2 = 1.5957691216057308f; /* 2 sqrt(2 / pi) */

	return x / (1.0f + expf(-k2 * x * (1.0f + 0.044715f * x * x)));
}

/* gpt-oss's gated activation: the gate capped at limit from above, up
 * clamped to [-limit, limit], then g * sigmoid(alpha g) * (u + 1), as
 * ggml's swiglu_oai. */
EXL_HD float exl_swiglu_oai(float g, float u, float alpha, float limit)
{
	const float x = limit < g ? limit : g;
	const float y = u < -limit ? -limit : u > limit ? limit : u;

	return x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
}

/* Soft capping (gemma2's attention scores and final logits): cap * tanh(x /
 * cap), which keeps |x| below cap and is nearly x when |x| << cap. */
EXL_HD float exl_softcap(float x, float cap)
{
	return cap * tanhf(x / cap);
}

/* RMSNorm: the factor each element of a row is multiplied by (before the
 * weight), from the row's sum of squares. */
EXL_HD float exl_rms_inv(float sum_sq, int dim, float eps)
{
	return 1.0f / sqrtf(sum_sq / (float)dim + eps);
}

/* Softmax.  With m the running maximum of the scores seen so far, a score s
 * weighs exp(s - m) <= 1, so nothing overflows.  A score of -inf (masked)
 * weighs 0, also when m is -inf (no NaN from -inf - -inf). */
EXL_HD float exl_softmax_weight(float s, float m)
{
	return s == -INFINITY ? 0.0f : expf(s - m);
}

/* Online softmax: when the running maximum grows from m_old to m_new, sums
 * and accumulators taken under m_old are multiplied by this.  0 when nothing
 * was accumulated yet (m_old == -inf). */
EXL_HD float exl_softmax_rescale(float m_old, float m_new)
{
	return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

/* Dequantization of one sub-block of 32 weights: weights 32c .. 32c + 31
 * (c = 0..7) of a 256-weight block, bit-identical to the matching stretch of
 * exl_dequant_q4_K / q5_K / q6_K (kernels/formats/elem.h): the same operations
 * in the same order.  The 32-weight types are one block a part; Q2_K, Q3_K
 * and IQ4_XS have their parts in elem.h. */
EXL_HD void exl_dequant_q4_K_part(const block_q4_K *b, int c, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float dmin = exl_fp16_to_fp32(b->dmin);
	const uint8_t *q = b->qs + 32 * (c / 2);
	uint8_t sc, m;

	exl_get_scale_min_k4(c, b->scales, &sc, &m);
	float d1 = d * (float)sc, m1 = dmin * (float)m;

	if (c & 1) {
		for (int l = 0; l < 32; l++)
			y[l] = d1 * (float)(q[l] >> 4) - m1;
	} else {
		for (int l = 0; l < 32; l++)
			y[l] = d1 * (float)(q[l] & 0x0f) - m1;
	}
}

EXL_HD void exl_dequant_q5_K_part(const block_q5_K *b, int c, float *y)
{
	float d = exl_fp16_to_fp32(b->d);
	float dmin = exl_fp16_to_fp32(b->dmin);
	const uint8_t *q = b->qs + 32 * (c / 2);
	const uint8_t u = (uint8_t)(1u << c);
	uint8_t sc, m;

	exl_get_scale_min_k4(c, b->scales, &sc, &m);
	float d1 = d * (float)sc, m1 = dmin * (float)m;
	const int shift = 4 * (c & 1);

	for (int l = 0; l < 32; l++)
		y[l] = d1 * (float)(((q[l] >> shift) & 0x0f) + ((b->qh[l] & u) ? 16 : 0)) - m1;
}

EXL_HD void exl_dequant_q6_K_part(const block_q6_K *b, int c, float *y)
{
	const int h = c / 4; /* which half of 128 */
	const int r = c % 4; /* which quarter of it */
	float d = exl_fp16_to_fp32(b->d);
	const uint8_t *ql = b->ql + 64 * h + 32 * (r & 1);
	const uint8_t *qh = b->qh + 32 * h;
	const int8_t *sc = b->scales + 8 * h + 2 * r;
	const int lo_shift = 4 * (r >> 1);
	const int hi_shift = 2 * r;

	for (int l = 0; l < 32; l++) {
		int q = (int)(((ql[l] >> lo_shift) & 0x0f) | (((qh[l] >> hi_shift) & 3) << 4)) - 32;

		y[l] = d * (float)sc[l / 16] * (float)q;
	}
}

#endif

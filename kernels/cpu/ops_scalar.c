/* The portable reference variant of the CPU row kernels (kernels/cpu/ops.h).
 * The per-element math is elem_math.h's, shared with the CUDA backend. */
#include <math.h>

#include "kernels/cpu/ops.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/elem_math.h"

static float sum_sq(const float *x, int n)
{
	double s = 0.0;

	for (int i = 0; i < n; i++)
		s += (double)x[i] * (double)x[i];
	return (float)s;
}

static void scale_mul(float *y, const float *x, const float *w, float s, int n)
{
	for (int i = 0; i < n; i++)
		y[i] = (x[i] * s) * w[i];
}

static void add(float *y, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

static void swiglu(float *g, const float *u, size_t n)
{
	for (size_t i = 0; i < n; i++)
		g[i] = exl_silu(g[i]) * u[i];
}

static void softmax(float *x, int n)
{
	float m = -INFINITY;
	double sum = 0.0;

	for (int i = 0; i < n; i++)
		m = fmaxf(m, x[i]);
	for (int i = 0; i < n; i++) {
		x[i] = exl_softmax_weight(x[i], m);
		sum += x[i];
	}
	/* A row of -inf only: every weight is 0; leave it all zero rather than
	 * dividing by zero. */
	if (sum == 0.0)
		return;
	const float inv = (float)(1.0 / sum);
	for (int i = 0; i < n; i++)
		x[i] *= inv;
}

static void rope_adjacent(float *x, const float *c, const float *s, int n_rot)
{
	for (int j = 0; j + 1 < n_rot; j += 2) {
		float x0 = x[j], x1 = x[j + 1];

		x[j] = x0 * c[j] + x1 * s[j];
		x[j + 1] = x1 * c[j + 1] + x0 * s[j + 1];
	}
}

static void rope_neox(float *x, const float *c, const float *s, int n_rot)
{
	const int h = n_rot / 2;

	for (int j = 0; j < h; j++) {
		float x0 = x[j], x1 = x[j + h];

		x[j] = x0 * c[j] + x1 * s[j];
		x[j + h] = x1 * c[j + h] + x0 * s[j + h];
	}
}

static void f32_to_f16(uint16_t *y, const float *x, int n)
{
	for (int i = 0; i < n; i++)
		y[i] = exl_fp32_to_fp16(x[i]);
}

static void attn_chunk(struct exl_attn_state *st, const uint16_t *const *k,
		       const uint16_t *const *v, int n, int head_dim, float scale)
{
	const size_t hd = (size_t)head_dim;

	for (int g = 0; g < st->g; g++) {
		const float *q = st->q + (size_t)g * hd;
		float *s = st->s + (size_t)g * EXL_ATTN_CHUNK;
		float *acc = st->acc + (size_t)g * hd;
		float m_new = st->m[g];

		for (int j = 0; j < n; j++) {
			float dot = 0.0f;

			for (size_t d = 0; d < hd; d++)
				dot += q[d] * exl_fp16_to_fp32(k[j][d]);
			s[j] = dot * scale;
			if (st->softcap > 0.0f)
				s[j] = exl_softcap(s[j], st->softcap);
			m_new = fmaxf(m_new, s[j]);
		}
		const float corr = exl_softmax_rescale(st->m[g], m_new);
		float l = st->l[g] * corr;

		for (size_t d = 0; d < hd; d++)
			acc[d] *= corr;
		for (int j = 0; j < n; j++) {
			const float w = exl_softmax_weight(s[j], m_new);

			l += w;
			for (size_t d = 0; d < hd; d++)
				acc[d] += w * exl_fp16_to_fp32(v[j][d]);
		}
		st->l[g] = l;
		st->m[g] = m_new;
	}
}

const struct exl_cpu_ops exl_cpu_ops_scalar = {
	.name = "scalar",
	.sum_sq = sum_sq,
	.scale_mul = scale_mul,
	.add = add,
	.swiglu = swiglu,
	.softmax = softmax,
	.rope_adjacent = rope_adjacent,
	.rope_neox = rope_neox,
	.f32_to_f16 = f32_to_f16,
	.attn_chunk = attn_chunk,
};

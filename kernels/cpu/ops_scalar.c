/* The portable reference variant of the CPU row kernels (kernels/cpu/ops.h).
 * The per-element math is elem_math.h's, shared with the CUDA backend. */
#include <math.h>

#include "kernels/cpu/ops.h"
#include "kernels/elem.h"
#include "kernels/elem_math.h"

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

static void attn_span(struct exl_attn_state *st, const float *q, const uint16_t *k,
		      const uint16_t *v, int n, int head_dim, float scale)
{
	float m_new = st->m;
	float *s = st->s;

	for (int j = 0; j < n; j++) {
		const uint16_t *kj = k + (size_t)j * (size_t)head_dim;
		float dot = 0.0f;

		for (int d = 0; d < head_dim; d++)
			dot += q[d] * exl_fp16_to_fp32(kj[d]);
		s[j] = dot * scale;
		m_new = fmaxf(m_new, s[j]);
	}
	const float corr = exl_softmax_rescale(st->m, m_new);
	float l = st->l * corr;

	for (int d = 0; d < head_dim; d++)
		st->acc[d] *= corr;
	for (int j = 0; j < n; j++) {
		const uint16_t *vj = v + (size_t)j * (size_t)head_dim;
		const float w = exl_softmax_weight(s[j], m_new);

		l += w;
		for (int d = 0; d < head_dim; d++)
			st->acc[d] += w * exl_fp16_to_fp32(vj[d]);
	}
	st->l = l;
	st->m = m_new;
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
	.attn_span = attn_span,
};

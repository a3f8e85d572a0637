/* The AVX2 + FMA + F16C variant of the CPU row kernels (kernels/cpu/ops.h).
 * Compiled with -mavx2 -mfma -mf16c; called only after the CPU was found to
 * have all three. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/ops.h"
#include "kernels/elem.h"
#include "kernels/elem_math.h"

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INLINE float hmax(__m256 v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INLINE __m256 load_f16(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* e^x to about 2 ulp (Cody-Waite reduction, Cephes' degree-5 polynomial).
 * Below ln(2^-126) the result is 0 (so -inf gives 0, as
 * exl_softmax_weight wants); above 88 it saturates at e^88; NaN stays NaN. */
INLINE __m256 exp8(__m256 x)
{
	const __m256 lo = _mm256_set1_ps(-87.33654f);
	const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256 fx, r, y;
	__m256i e;

	/* NaN as the second operand of min/max stays NaN */
	x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
	x = _mm256_max_ps(lo, x);
	fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
			     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
	y = _mm256_set1_ps(1.9875691500e-4f);
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
	y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
	y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
	return _mm256_andnot_ps(tiny, y);
}

static float sum_sq(const float *x, int n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	__m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
	int i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
		__m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);

		a0 = _mm256_fmadd_ps(v0, v0, a0);
		a1 = _mm256_fmadd_ps(v1, v1, a1);
		a2 = _mm256_fmadd_ps(v2, v2, a2);
		a3 = _mm256_fmadd_ps(v3, v3, a3);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);

		a0 = _mm256_fmadd_ps(v, v, a0);
	}
	float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	for (; i < n; i++)
		s += x[i] * x[i];
	return s;
}

static void scale_mul(float *y, const float *x, const float *w, float s, int n)
{
	const __m256 vs = _mm256_set1_ps(s);
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
						      _mm256_loadu_ps(w + i)));
	for (; i < n; i++)
		y[i] = (x[i] * s) * w[i];
}

static void add(float *y, const float *x, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
						      _mm256_loadu_ps(x + i)));
	for (; i < n; i++)
		y[i] += x[i];
}

static void swiglu(float *g, const float *u, size_t n)
{
	const __m256 one = _mm256_set1_ps(1.0f);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 vg = _mm256_loadu_ps(g + i);
		__m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), vg));
		__m256 silu = _mm256_div_ps(vg, _mm256_add_ps(one, e));

		_mm256_storeu_ps(g + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
	}
	for (; i < n; i++)
		g[i] = exl_silu(g[i]) * u[i];
}

static void softmax(float *x, int n)
{
	__m256 vm = _mm256_set1_ps(-INFINITY);
	__m256 vs = _mm256_setzero_ps();
	float m, sum;
	int i = 0;

	for (; i + 8 <= n; i += 8)
		vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
	m = hmax(vm);
	for (; i < n; i++)
		m = fmaxf(m, x[i]);
	vm = _mm256_set1_ps(m);
	for (i = 0; i + 8 <= n; i += 8) {
		/* m = -inf (a row of -inf): every weight is 0, not NaN */
		__m256 w = m == -INFINITY ? _mm256_setzero_ps() :
					    exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));

		_mm256_storeu_ps(x + i, w);
		vs = _mm256_add_ps(vs, w);
	}
	sum = hsum(vs);
	for (; i < n; i++) {
		x[i] = exl_softmax_weight(x[i], m);
		sum += x[i];
	}
	if (sum == 0.0f)
		return;
	const __m256 inv = _mm256_set1_ps(1.0f / sum);
	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
	for (; i < n; i++)
		x[i] *= 1.0f / sum;
}

static void rope_adjacent(float *x, const float *c, const float *s, int n_rot)
{
	int j = 0;

	for (; j + 8 <= n_rot; j += 8) {
		__m256 v = _mm256_loadu_ps(x + j);
		__m256 sw = _mm256_permute_ps(v, 0xb1); /* swap each pair */

		_mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_mul_ps(v, _mm256_loadu_ps(c + j)),
						      _mm256_mul_ps(sw, _mm256_loadu_ps(s + j))));
	}
	for (; j + 1 < n_rot; j += 2) {
		float x0 = x[j], x1 = x[j + 1];

		x[j] = x0 * c[j] + x1 * s[j];
		x[j + 1] = x1 * c[j + 1] + x0 * s[j + 1];
	}
}

static void rope_neox(float *x, const float *c, const float *s, int n_rot)
{
	const int h = n_rot / 2;
	int j = 0;

	for (; j + 8 <= h; j += 8) {
		__m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + h);

		_mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_mul_ps(x0, _mm256_loadu_ps(c + j)),
						      _mm256_mul_ps(x1, _mm256_loadu_ps(s + j))));
		_mm256_storeu_ps(x + j + h,
				 _mm256_add_ps(_mm256_mul_ps(x1, _mm256_loadu_ps(c + j + h)),
					       _mm256_mul_ps(x0, _mm256_loadu_ps(s + j + h))));
	}
	for (; j < h; j++) {
		float x0 = x[j], x1 = x[j + h];

		x[j] = x0 * c[j] + x1 * s[j];
		x[j + h] = x1 * c[j + h] + x0 * s[j + h];
	}
}

static void f32_to_f16(uint16_t *y, const float *x, int n)
{
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(void *)(y + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		y[i] = exl_fp32_to_fp16(x[i]);
}

/* Four scores at once: q against K rows k0..k3. */
INLINE __m128 dot4(const float *q, const uint16_t *k, size_t hd)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	__m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
	size_t d = 0;

	for (; d + 8 <= hd; d += 8) {
		__m256 vq = _mm256_loadu_ps(q + d);

		a0 = _mm256_fmadd_ps(vq, load_f16(k + d), a0);
		a1 = _mm256_fmadd_ps(vq, load_f16(k + hd + d), a1);
		a2 = _mm256_fmadd_ps(vq, load_f16(k + 2 * hd + d), a2);
		a3 = _mm256_fmadd_ps(vq, load_f16(k + 3 * hd + d), a3);
	}
	__m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
	__m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));

	if (d < hd) {
		float tail[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

		for (int i = 0; i < 4; i++)
			for (size_t e = d; e < hd; e++)
				tail[i] += q[e] * exl_fp16_to_fp32(k[i * hd + e]);
		r = _mm_add_ps(r, _mm_loadu_ps(tail));
	}
	return r;
}

INLINE float dot1(const float *q, const uint16_t *k, size_t hd)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	size_t d = 0;

	for (; d + 16 <= hd; d += 16) {
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_f16(k + d), a0);
		a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load_f16(k + d + 8), a1);
	}
	for (; d + 8 <= hd; d += 8)
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_f16(k + d), a0);
	float s = hsum(_mm256_add_ps(a0, a1));
	for (; d < hd; d++)
		s += q[d] * exl_fp16_to_fp32(k[d]);
	return s;
}

static void attn_span(struct exl_attn_state *st, const float *q, const uint16_t *k,
		      const uint16_t *v, int n, int head_dim, float scale)
{
	const size_t hd = (size_t)head_dim;
	const __m128 vscale = _mm_set1_ps(scale);
	float *s = st->s;
	float *acc = st->acc;
	int j = 0;

	for (; j + 4 <= n; j += 4)
		_mm_storeu_ps(s + j, _mm_mul_ps(dot4(q, k + (size_t)j * hd, hd), vscale));
	for (; j < n; j++)
		s[j] = dot1(q, k + (size_t)j * hd, hd) * scale;

	float m_new = st->m;
	for (j = 0; j < n; j++)
		m_new = fmaxf(m_new, s[j]);
	const float corr = exl_softmax_rescale(st->m, m_new);
	const __m256 vm = _mm256_set1_ps(m_new);
	__m256 vl = _mm256_setzero_ps();

	/* m_new = -inf: every score is -inf and weighs 0 (exp8 would see
	 * -inf - -inf = NaN) */
	for (j = 0; m_new != -INFINITY && j + 8 <= n; j += 8) {
		__m256 w = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));

		_mm256_storeu_ps(s + j, w);
		vl = _mm256_add_ps(vl, w);
	}
	float l = hsum(vl);
	for (; j < n; j++) {
		s[j] = exl_softmax_weight(s[j], m_new);
		l += s[j];
	}
	st->l = st->l * corr + l;
	st->m = m_new;

	/* acc = acc * corr + sum_j w_j V_j, 32 dimensions at a time so four
	 * independent FMA chains run over the positions. */
	const __m256 vc = _mm256_set1_ps(corr);
	size_t d = 0;
	for (; d + 32 <= hd; d += 32) {
		__m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), vc);
		__m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8), vc);
		__m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 16), vc);
		__m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 24), vc);
		const uint16_t *vj = v + d;

		for (j = 0; j < n; j++, vj += hd) {
			__m256 w = _mm256_broadcast_ss(s + j);

			a0 = _mm256_fmadd_ps(w, load_f16(vj), a0);
			a1 = _mm256_fmadd_ps(w, load_f16(vj + 8), a1);
			a2 = _mm256_fmadd_ps(w, load_f16(vj + 16), a2);
			a3 = _mm256_fmadd_ps(w, load_f16(vj + 24), a3);
		}
		_mm256_storeu_ps(acc + d, a0);
		_mm256_storeu_ps(acc + d + 8, a1);
		_mm256_storeu_ps(acc + d + 16, a2);
		_mm256_storeu_ps(acc + d + 24, a3);
	}
	for (; d + 8 <= hd; d += 8) {
		__m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), vc);
		const uint16_t *vj = v + d;

		for (j = 0; j < n; j++, vj += hd)
			a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(s + j), load_f16(vj), a0);
		_mm256_storeu_ps(acc + d, a0);
	}
	for (; d < hd; d++) {
		float a = acc[d] * corr;

		for (j = 0; j < n; j++)
			a += s[j] * exl_fp16_to_fp32(v[(size_t)j * hd + d]);
		acc[d] = a;
	}
}

const struct exl_cpu_ops exl_cpu_ops_avx2 = {
	.name = "avx2",
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

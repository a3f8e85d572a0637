/* The AVX2 + FMA + F16C variant of the CPU row kernels (kernels/cpu/ops.h).
 * Compiled with -mavx2 -mfma -mf16c; called only after the CPU was found to
 * have all three. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/elem_math.h"

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

INLINE __m256 swiglu8(__m256 vg, __m256 vu)
{
	__m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), vg));

	return _mm256_mul_ps(_mm256_div_ps(vg, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), vu);
}

/* The tail goes through exp8 as well (padded to 8 lanes): an element's value
 * must not depend on where it falls in the call, since the call covers a
 * whole batch (or a thread's share of it), and a token's activations would
 * otherwise change with the number of other tokens beside it. */
static void swiglu(float *g, const float *u, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(g + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
	if (i < n) {
		float tg[8] = { 0 }, tu[8] = { 0 };
		size_t r = n - i;

		memcpy(tg, g + i, r * sizeof(float));
		memcpy(tu, u + i, r * sizeof(float));
		_mm256_storeu_ps(tg, swiglu8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
		memcpy(g + i, tg, r * sizeof(float));
	}
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

/* ---- attention ------------------------------------------------------
 * G heads (1, 2, 4 or 8: compile-time constants after inlining) share each
 * converted K/V row.  With few heads, several positions (scores) or several
 * 8-float blocks (values) go at once, so there are always 8 independent
 * FMA chains: with 4 (one head, as it was) each chain's latency bound the
 * step (bench_attn_streams, 12 heads of 64, 16 streams, Zen 3: 8.1-10.3
 * -> 9.4-11.3 GB/s from memory with the scores' stores below; the same
 * bits). */

/* The sums of a[0..8), in order, as one vector; each sum is the tree
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) of its lanes. */
INLINE __m256 reduce8(const __m256 *a)
{
	__m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
	__m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));

	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* The same tree for a[0..4). */
INLINE __m128 reduce4(const __m256 *a)
{
	__m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));

	return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* The sums of cnt (1, 2, 4 or 8) vectors, in order, into r. */
INLINE void reduce_n(const __m256 *a, int cnt, float *r)
{
	if (cnt == 8) {
		_mm256_storeu_ps(r, reduce8(a));
	} else if (cnt == 4) {
		_mm_storeu_ps(r, reduce4(a));
	} else {
		for (int i = 0; i < cnt; i++)
			r[i] = hsum(a[i]);
	}
}

/* s[g][j0 + p] = lane g * P + p of v (P = 8 / G), straight from the
 * register: through a float array and back, the scalar loads of a vector
 * just stored stalled on the store (a fifth of attn_chunk's time, Zen 3). */
INLINE void store_scores(float *s, int j0, __m256 v, const int G)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);

	if (G == 1) {
		_mm256_storeu_ps(s + j0, v);
	} else if (G == 2) {
		_mm_storeu_ps(s + j0, lo);
		_mm_storeu_ps(s + EXL_ATTN_CHUNK + j0, hi);
	} else if (G == 4) {
		_mm_storel_pi((__m64 *)(void *)(s + j0), lo);
		_mm_storeh_pi((__m64 *)(void *)(s + EXL_ATTN_CHUNK + j0), lo);
		_mm_storel_pi((__m64 *)(void *)(s + 2 * EXL_ATTN_CHUNK + j0), hi);
		_mm_storeh_pi((__m64 *)(void *)(s + 3 * EXL_ATTN_CHUNK + j0), hi);
	} else {
		for (int g = 0; g < 4; g++) {
			_mm_store_ss(s + g * EXL_ATTN_CHUNK + j0, lo);
			_mm_store_ss(s + (g + 4) * EXL_ATTN_CHUNK + j0, hi);
			if (g < 3) {
				/* the next lane down */
				lo = _mm_castsi128_ps(_mm_srli_si128(_mm_castps_si128(lo), 4));
				hi = _mm_castsi128_ps(_mm_srli_si128(_mm_castps_si128(hi), 4));
			}
		}
	}
}

/* s[g][j0 + p] for P positions from j0 and G heads.  Each score is summed
 * in one chain over d and reduced by reduce_n's tree, whatever P is. */
INLINE void scores(const float *q, size_t hd, const uint16_t *const *k, int j0, float *s,
		   float scale, const int G, const int P)
{
	__m256 a[8];
	float r[8];
	size_t d = 0;

	for (int i = 0; i < P * G; i++)
		a[i] = _mm256_setzero_ps();
	for (; d + 8 <= hd; d += 8) {
		__m256 kv[8];

		for (int p = 0; p < P; p++)
			kv[p] = load_f16(k[j0 + p] + d);
		for (int g = 0; g < G; g++) {
			__m256 qv = _mm256_loadu_ps(q + (size_t)g * hd + d);

			for (int p = 0; p < P; p++)
				a[g * P + p] = _mm256_fmadd_ps(qv, kv[p], a[g * P + p]);
		}
	}
	if (P * G == 8 && d == hd) {
		store_scores(s, j0, _mm256_mul_ps(reduce8(a), _mm256_set1_ps(scale)), G);
		return;
	}
	if (G == 1 && P == 4 && d == hd) {
		_mm_storeu_ps(s + j0, _mm_mul_ps(reduce4(a), _mm_set1_ps(scale)));
		return;
	}
	reduce_n(a, P * G, r);
	for (int p = 0; p < P; p++) {
		for (int g = 0; g < G; g++) {
			float t = r[g * P + p];

			for (size_t e = d; e < hd; e++)
				t += q[(size_t)g * hd + e] * exl_fp16_to_fp32(k[j0 + p][e]);
			s[g * EXL_ATTN_CHUNK + j0 + p] = t * scale;
		}
	}
}

/* acc[g][d..] = acc * corr[g] + sum_j w[g][j] V_j[d..], NB blocks of 8 at a
 * time from *dp while they fit. */
INLINE void values(float *acc, size_t hd, const float *w, const float *corr,
		   const uint16_t *const *v, int n, size_t *dp, const int G, const int NB)
{
	size_t d = *dp;

	for (; d + 8 * NB <= hd; d += 8 * NB) {
		__m256 a[8];

		for (int g = 0; g < G; g++) {
			__m256 c = _mm256_set1_ps(corr[g]);

			for (int b = 0; b < NB; b++)
				a[g * NB + b] = _mm256_mul_ps(
					_mm256_loadu_ps(acc + (size_t)g * hd + d + 8 * b), c);
		}
		for (int j = 0; j < n; j++) {
			__m256 vv[8];

			for (int b = 0; b < NB; b++)
				vv[b] = load_f16(v[j] + d + 8 * b);
			for (int g = 0; g < G; g++) {
				__m256 wg = _mm256_broadcast_ss(w + g * EXL_ATTN_CHUNK + j);

				for (int b = 0; b < NB; b++)
					a[g * NB + b] = _mm256_fmadd_ps(wg, vv[b], a[g * NB + b]);
			}
		}
		for (int g = 0; g < G; g++)
			for (int b = 0; b < NB; b++)
				_mm256_storeu_ps(acc + (size_t)g * hd + d + 8 * b, a[g * NB + b]);
	}
	*dp = d;
}

/* max(m, s[0..n)) */
static float row_max(const float *s, int n, float m)
{
	__m256 vm = _mm256_set1_ps(m);
	int j = 0;

	for (; j + 8 <= n; j += 8)
		vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
	m = hmax(vm);
	for (; j < n; j++)
		m = s[j] > m ? s[j] : m;
	return m;
}

/* Turns row s[0..n) into weights exp(s - m_new); returns their sum. */
static float weights(float *s, int n, float m_new)
{
	const __m256 vm = _mm256_set1_ps(m_new);
	__m256 vl = _mm256_setzero_ps();
	int j = 0;

	/* m_new = -inf: every score is -inf and weighs 0 (exp8 would see
	 * -inf - -inf = NaN) */
	for (; m_new != -INFINITY && j + 8 <= n; j += 8) {
		__m256 w = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));

		_mm256_storeu_ps(s + j, w);
		vl = _mm256_add_ps(vl, w);
	}
	float l = hsum(vl);
	for (; j < n; j++) {
		s[j] = exl_softmax_weight(s[j], m_new);
		l += s[j];
	}
	return l;
}

INLINE void chunk(struct exl_attn_state *st, const uint16_t *const *k, const uint16_t *const *v,
		  int n, int head_dim, float scale, const int G)
{
	const int P = G >= 8 ? 1 : 8 / G;
	const int NB = G >= 8 ? 1 : 8 / G;
	const size_t hd = (size_t)head_dim;
	float corr[EXL_ATTN_MAX_GROUP];
	size_t d = 0;
	int j = 0;

	for (; j + P <= n; j += P) {
		exl_attn_prefetch(k, v, j, P, n, hd);
		scores(st->q, hd, k, j, st->s, scale, G, P);
	}
	if (G == 1 && j + 4 <= n) {
		exl_attn_prefetch(k, v, j, 4, n, hd);
		scores(st->q, hd, k, j, st->s, scale, G, 4);
		j += 4;
	}
	for (; j < n; j++)
		scores(st->q, hd, k, j, st->s, scale, G, 1);
	if (st->softcap > 0.0f)
		exl_attn_softcap(st->s, G, n, st->softcap);
	for (int g = 0; g < G; g++) {
		float *s = st->s + g * EXL_ATTN_CHUNK;
		float m_new = st->m[g];

		m_new = row_max(s, n, m_new);
		corr[g] = exl_softmax_rescale(st->m[g], m_new);
		st->l[g] = st->l[g] * corr[g] + weights(s, n, m_new);
		st->m[g] = m_new;
	}
	values(st->acc, hd, st->s, corr, v, n, &d, G, NB);
	if (NB > 1)
		values(st->acc, hd, st->s, corr, v, n, &d, G, 1);
	for (; d < hd; d++) {
		for (int g = 0; g < G; g++) {
			const float *w = st->s + g * EXL_ATTN_CHUNK;
			float a = st->acc[(size_t)g * hd + d] * corr[g];

			for (j = 0; j < n; j++)
				a += w[j] * exl_fp16_to_fp32(v[j][d]);
			st->acc[(size_t)g * hd + d] = a;
		}
	}
}

static void attn_chunk(struct exl_attn_state *st, const uint16_t *const *k,
		       const uint16_t *const *v, int n, int head_dim, float scale)
{
	switch (st->g) {
	case 8:
		chunk(st, k, v, n, head_dim, scale, 8);
		break;
	case 4:
		chunk(st, k, v, n, head_dim, scale, 4);
		break;
	case 2:
		chunk(st, k, v, n, head_dim, scale, 2);
		break;
	default:
		chunk(st, k, v, n, head_dim, scale, 1);
		break;
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
	.attn_chunk = attn_chunk,
};

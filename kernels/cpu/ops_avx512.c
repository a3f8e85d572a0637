/* The AVX-512 variant of the CPU row kernels (kernels/cpu/ops.h): 16 lanes,
 * masked tails.  Compiled with -mavx512f -mavx512bw -mavx512vl (and the AVX2
 * set's -mavx2 -mfma -mf16c); called only on a CPU that has them all. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/ops.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/elem_math.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __mmask16 tail_mask(size_t left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

INLINE __m512 load_f16_mask(const uint16_t *p, __mmask16 m)
{
	return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* e^x as in ops_avx2.c's exp8: about 2 ulp, 0 below ln(2^-126), saturating
 * at e^88, NaN kept. */
INLINE __m512 exp16(__m512 x)
{
	const __m512 lo = _mm512_set1_ps(-87.33654f);
	const __mmask16 ok = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
	__m512 fx, r, y;
	__m512i e;

	x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
	x = _mm512_max_ps(lo, x);
	fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
				  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
	y = _mm512_set1_ps(1.9875691500e-4f);
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
	y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
	return _mm512_maskz_mul_ps(ok, y, _mm512_castsi512_ps(e));
}

static float sum_sq(const float *x, int n)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
	size_t i = 0, len = (size_t)n;

	for (; i + 32 <= len; i += 32) {
		__m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);

		a0 = _mm512_fmadd_ps(v0, v0, a0);
		a1 = _mm512_fmadd_ps(v1, v1, a1);
	}
	for (; i < len; i += 16) {
		__m512 v = _mm512_maskz_loadu_ps(tail_mask(len - i), x + i);

		a0 = _mm512_fmadd_ps(v, v, a0);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void scale_mul(float *y, const float *x, const float *w, float s, int n)
{
	const __m512 vs = _mm512_set1_ps(s);
	size_t len = (size_t)n;

	for (size_t i = 0; i < len; i += 16) {
		__mmask16 m = tail_mask(len - i);
		__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);

		_mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
	}
}

static void add(float *y, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);

		_mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i),
							      _mm512_maskz_loadu_ps(m, x + i)));
	}
}

static void swiglu(float *g, const float *u, size_t n)
{
	const __m512 one = _mm512_set1_ps(1.0f);

	for (size_t i = 0; i < n; i += 16) {
		__mmask16 m = tail_mask(n - i);
		__m512 vg = _mm512_maskz_loadu_ps(m, g + i);
		__m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), vg));
		__m512 silu = _mm512_div_ps(vg, _mm512_add_ps(one, e));

		_mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, u + i)));
	}
}

static void softmax(float *x, int n)
{
	const size_t len = (size_t)n;
	__m512 vm = _mm512_set1_ps(-INFINITY);
	__m512 vs = _mm512_setzero_ps();

	for (size_t i = 0; i < len; i += 16) {
		__mmask16 k = tail_mask(len - i);

		vm = _mm512_mask_max_ps(vm, k, vm, _mm512_maskz_loadu_ps(k, x + i));
	}
	const float m = _mm512_reduce_max_ps(vm);
	vm = _mm512_set1_ps(m);
	for (size_t i = 0; i < len; i += 16) {
		__mmask16 k = tail_mask(len - i);
		/* m = -inf (a row of -inf): every weight is 0, not NaN */
		__m512 w = m == -INFINITY ? _mm512_setzero_ps() :
			   exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));

		w = _mm512_maskz_mov_ps(k, w);
		_mm512_mask_storeu_ps(x + i, k, w);
		vs = _mm512_add_ps(vs, w);
	}
	const float sum = _mm512_reduce_add_ps(vs);
	if (sum == 0.0f)
		return;
	const __m512 inv = _mm512_set1_ps(1.0f / sum);
	for (size_t i = 0; i < len; i += 16) {
		__mmask16 k = tail_mask(len - i);

		_mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
	}
}

static void rope_adjacent(float *x, const float *c, const float *s, int n_rot)
{
	const size_t len = (size_t)n_rot;

	for (size_t j = 0; j < len; j += 16) {
		__mmask16 m = tail_mask(len - j);
		__m512 v = _mm512_maskz_loadu_ps(m, x + j);
		__m512 sw = _mm512_permute_ps(v, 0xb1); /* swap each pair */

		_mm512_mask_storeu_ps(x + j, m,
				      _mm512_add_ps(_mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, c + j)),
						    _mm512_mul_ps(sw, _mm512_maskz_loadu_ps(m, s + j))));
	}
}

static void rope_neox(float *x, const float *c, const float *s, int n_rot)
{
	const size_t h = (size_t)(n_rot / 2);

	for (size_t j = 0; j < h; j += 16) {
		__mmask16 m = tail_mask(h - j);
		__m512 x0 = _mm512_maskz_loadu_ps(m, x + j);
		__m512 x1 = _mm512_maskz_loadu_ps(m, x + j + h);

		_mm512_mask_storeu_ps(x + j, m,
				      _mm512_add_ps(_mm512_mul_ps(x0, _mm512_maskz_loadu_ps(m, c + j)),
						    _mm512_mul_ps(x1, _mm512_maskz_loadu_ps(m, s + j))));
		_mm512_mask_storeu_ps(x + j + h, m,
				      _mm512_add_ps(_mm512_mul_ps(x1, _mm512_maskz_loadu_ps(m, c + j + h)),
						    _mm512_mul_ps(x0, _mm512_maskz_loadu_ps(m, s + j + h))));
	}
}

static void f32_to_f16(uint16_t *y, const float *x, int n)
{
	const size_t len = (size_t)n;

	for (size_t i = 0; i < len; i += 16) {
		__mmask16 m = tail_mask(len - i);
		__m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i),
					    _MM_FROUND_TO_NEAREST_INT);

		_mm256_mask_storeu_epi16(y + i, m, h);
	}
}

/* ---- attention ------------------------------------------------------
 * As in ops_avx2.c: G heads (1, 2, 4 or 8) share each converted K/V row,
 * and with few heads several positions or blocks go at once; 16 lanes,
 * head_dim tails masked. */

/* The sum of the two 8-lane halves (AVX-512F has no 32x8 extract). */
INLINE __m256 fold(__m512 a)
{
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));

	return _mm256_add_ps(_mm512_castps512_ps256(a), hi);
}

INLINE float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* The sums of cnt (1, 2, 4 or 8) vectors, in order, into r. */
INLINE void reduce_n(const __m512 *a, int cnt, float *r)
{
	if (cnt == 8) {
		__m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(fold(a[0]), fold(a[1])),
					   _mm256_hadd_ps(fold(a[2]), fold(a[3])));
		__m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(fold(a[4]), fold(a[5])),
					   _mm256_hadd_ps(fold(a[6]), fold(a[7])));

		_mm256_storeu_ps(r, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
						  _mm256_permute2f128_ps(u0, u1, 0x31)));
	} else if (cnt == 4) {
		__m256 t = _mm256_hadd_ps(_mm256_hadd_ps(fold(a[0]), fold(a[1])),
					  _mm256_hadd_ps(fold(a[2]), fold(a[3])));

		_mm_storeu_ps(r, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
	} else {
		for (int i = 0; i < cnt; i++)
			r[i] = hsum256(fold(a[i]));
	}
}

/* s[g][j0 + p] for P positions from j0 and G heads. */
INLINE void scores(const float *q, size_t hd, const uint16_t *const *k, int j0, float *s,
		   float scale, const int G, const int P)
{
	__m512 a[16];
	float r[16];

	for (int i = 0; i < P * G; i++)
		a[i] = _mm512_setzero_ps();
	for (size_t d = 0; d < hd; d += 16) {
		const __mmask16 m = tail_mask(hd - d);
		__m512 kv[4];

		for (int p = 0; p < P; p++)
			kv[p] = load_f16_mask(k[j0 + p] + d, m);
		for (int g = 0; g < G; g++) {
			__m512 qv = _mm512_maskz_loadu_ps(m, q + (size_t)g * hd + d);

			for (int p = 0; p < P; p++)
				a[p * G + g] = _mm512_fmadd_ps(qv, kv[p], a[p * G + g]);
		}
	}
	if (P * G == 16) {
		reduce_n(a, 8, r);
		reduce_n(a + 8, 8, r + 8);
	} else {
		reduce_n(a, P * G, r);
	}
	for (int p = 0; p < P; p++)
		for (int g = 0; g < G; g++)
			s[g * EXL_ATTN_CHUNK + j0 + p] = r[p * G + g] * scale;
}

/* acc[g][d..] = acc * corr[g] + sum_j w[g][j] V_j[d..], NB blocks of 16 at
 * a time from *dp while they fit; with NB = 1, the masked tail too. */
INLINE void values(float *acc, size_t hd, const float *w, const float *corr,
		   const uint16_t *const *v, int n, size_t *dp, const int G, const int NB)
{
	size_t d = *dp;

	for (; d < hd && (NB == 1 || d + 16 * NB <= hd); d += 16 * NB) {
		const __mmask16 m = NB == 1 ? tail_mask(hd - d) : (__mmask16)0xffff;
		__m512 a[8];

		for (int g = 0; g < G; g++) {
			__m512 c = _mm512_set1_ps(corr[g]);

			for (int b = 0; b < NB; b++)
				a[g * NB + b] = _mm512_mul_ps(
					_mm512_maskz_loadu_ps(m, acc + (size_t)g * hd + d + 16 * b), c);
		}
		for (int j = 0; j < n; j++) {
			__m512 vv[4];

			for (int b = 0; b < NB; b++)
				vv[b] = load_f16_mask(v[j] + d + 16 * b, m);
			for (int g = 0; g < G; g++) {
				__m512 wg = _mm512_set1_ps(w[g * EXL_ATTN_CHUNK + j]);

				for (int b = 0; b < NB; b++)
					a[g * NB + b] = _mm512_fmadd_ps(wg, vv[b], a[g * NB + b]);
			}
		}
		for (int g = 0; g < G; g++)
			for (int b = 0; b < NB; b++)
				_mm512_mask_storeu_ps(acc + (size_t)g * hd + d + 16 * b, m,
						      a[g * NB + b]);
	}
	*dp = d;
}

/* max(m, s[0..n)) */
static float row_max(const float *s, int n, float m)
{
	const size_t len = (size_t)n;
	__m512 vm = _mm512_set1_ps(m);

	for (size_t j = 0; j < len; j += 16) {
		__mmask16 k = tail_mask(len - j);

		vm = _mm512_mask_max_ps(vm, k, vm, _mm512_maskz_loadu_ps(k, s + j));
	}
	return _mm512_reduce_max_ps(vm);
}

/* Turns row s[0..n) into weights exp(s - m_new); returns their sum. */
static float weights(float *s, int n, float m_new)
{
	const size_t len = (size_t)n;
	const __m512 vm = _mm512_set1_ps(m_new);
	__m512 vl = _mm512_setzero_ps();

	for (size_t j = 0; j < len; j += 16) {
		__mmask16 m = tail_mask(len - j);
		/* m_new = -inf: every score is -inf and weighs 0 */
		__m512 w = m_new == -INFINITY ? _mm512_setzero_ps() :
			   exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vm));

		w = _mm512_maskz_mov_ps(m, w);
		_mm512_mask_storeu_ps(s + j, m, w);
		vl = _mm512_add_ps(vl, w);
	}
	return _mm512_reduce_add_ps(vl);
}

INLINE void chunk(struct exl_attn_state *st, const uint16_t *const *k, const uint16_t *const *v,
		  int n, int head_dim, float scale, const int G)
{
	const int P = G == 1 ? 4 : G >= 8 ? 2 : 8 / G;
	const int NB = G >= 4 ? 1 : 4 / G;
	const size_t hd = (size_t)head_dim;
	float corr[EXL_ATTN_MAX_GROUP];
	size_t d = 0;
	int j = 0;

	for (; j + P <= n; j += P) {
		exl_attn_prefetch(k, v, j, P, n, hd);
		scores(st->q, hd, k, j, st->s, scale, G, P);
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

const struct exl_cpu_ops exl_cpu_ops_avx512 = {
	.name = "avx512",
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

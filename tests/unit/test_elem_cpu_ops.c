/* The shared per-element code (kernels/formats/elem_math.h), used the way the CUDA
 * kernels use it, gives the CPU backend's results: RoPE angles and rotation
 * against the CPU rope op, SiLU against swiglu, the RMSNorm scale against
 * rmsnorm, the softmax pieces against softmax, and the CUDA attention
 * kernel's algorithm (tiles of 128 positions folded into an online softmax)
 * replayed on the host against the CPU attention op.  Runs without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/elem_math.h"
#include "tests/common/check.h"

#define EXL_TEST_RNG_SEED 0x853c49e6748fea9bull
#include "tests/common/rng.h"

static struct exl_backend *cpu;
static float *buf(size_t n)
{
	float *p = cpu->ops->alloc(cpu, n * sizeof(float));

	if (!p) {
		fprintf(stderr, "cpu alloc of %zu floats failed\n", n);
		abort();
	}
	return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
	double m = 0.0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);

		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

static void test_rope(void)
{
	enum { N = 24, HEADS = 3, HD = 64 };
	int32_t pos[N], seq[N], table[1] = { 0 };
	const size_t n = (size_t)N * HEADS * HD;
	float *x = buf(n), *ref = malloc(n * sizeof(float));

	/* Short positions and long ones, out to 2^24: a float angle would be
	 * off by tenths of a radian there. */
	for (int i = 0; i < N; i++) {
		pos[i] = i < 4 ? i : i < 12 ? (int32_t)(rnd_u32() % 2048) :
			 (int32_t)(rnd_u32() % (1u << 24));
		seq[i] = 0;
	}
	struct exl_batch_desc d = { N, pos, seq, 1, 1, table, 0, NULL };
	CHECK(cpu->ops->set_batch(cpu, &d) == 0, "set_batch");

	for (int v = 0; v < 16; v++) {
		struct exl_rope_params p = { v & 1 ? 32 : 64, v & 2 ? 1000000.0f : 10000.0f,
					     v & 4 ? 0.25f : 1.0f, (v & 8) != 0, NULL, 1.0f,
					     0.0f, 0.0f, 0.0f, 0.0f, 0 };

		for (size_t i = 0; i < n; i++)
			x[i] = ref[i] = rnd_normal();
		cpu->ops->rope(cpu, x, N, HEADS, HD, &p);
		/* What the CUDA rope kernels do: the angle table, one entry per
		 * (token, pair), then each (token, head, pair) rotated by it. */
		for (int t = 0; t < N; t++)
			for (int i = 0; i < p.n_rot / 2; i++) {
				float c, sn;

				exl_rope_cos_sin(pos[t], i, p.n_rot, p.freq_base, p.freq_scale,
						 &c, &sn);
				for (int h = 0; h < HEADS; h++) {
					int a, b;

					exl_rope_pair(i, p.n_rot, p.neox, &a, &b);
					exl_rope_rotate(ref + ((size_t)t * HEADS + h) * HD, a, b, c,
							sn);
				}
			}
		/* Same angles from the same function, and the rotation's products
		 * and sum in the CPU kernels' order: bit-identical unless a
		 * compiler contracts a * b + c into an FMA (C11 forbids it by
		 * default), which moves a result by at most an ulp (|x| < ~6,
		 * an ulp 4.8e-7). */
		double e = max_abs_diff(x, ref, n);
		printf("rope n_rot %d base %g scale %g %s: max |diff| %g\n", p.n_rot, p.freq_base,
		       p.freq_scale, p.neox ? "neox" : "normal", e);
		CHECK(e <= 1e-6, "rope n_rot %d base %g scale %g %s: max diff %g", p.n_rot,
		      p.freq_base, p.freq_scale, p.neox ? "neox" : "normal", e);
		/* Dimensions past n_rot are untouched. */
		for (int t = 0; t < N && p.n_rot < HD; t++)
			for (int k = p.n_rot; k < HD; k++) {
				size_t i = ((size_t)t * HEADS) * HD + k;

				CHECK(x[i] == ref[i], "rope changed dim %d", k);
			}
	}
	cpu->ops->free(cpu, x);
	free(ref);
}

static void test_swiglu_rms_softmax(void)
{
	enum { N = 5, DIM = 300 };
	const size_t n = (size_t)N * DIM;
	float *g = buf(n), *u = buf(n), *w = buf(DIM), *y = buf(n);
	float *ref = malloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++) {
		g[i] = rnd_normal() * 6.0f;
		u[i] = rnd_normal();
		ref[i] = exl_silu(g[i]) * u[i];
	}
	cpu->ops->swiglu(cpu, g, u, n);
	double e = max_abs_diff(g, ref, n);
	printf("swiglu: max |diff| %g\n", e);
	CHECK(e <= 1e-5, "swiglu: max diff %g", e);

	/* rmsnorm as the CUDA kernel computes it. */
	for (int j = 0; j < DIM; j++)
		w[j] = rnd_normal();
	for (size_t i = 0; i < n; i++)
		g[i] = rnd_normal() * 4.0f;
	for (int r = 0; r < N; r++) {
		float ss = 0.0f;

		for (int j = 0; j < DIM; j++)
			ss += g[r * DIM + j] * g[r * DIM + j];
		float inv = exl_rms_inv(ss, DIM, 1e-5f);
		for (int j = 0; j < DIM; j++)
			ref[r * DIM + j] = g[r * DIM + j] * inv * w[j];
	}
	cpu->ops->rmsnorm(cpu, y, g, w, N, DIM, 1e-5f);
	e = max_abs_diff(y, ref, n);
	printf("rmsnorm: max |diff| %g\n", e);
	CHECK(e <= 1e-4, "rmsnorm: max diff %g", e);

	/* softmax with masked entries, as the CUDA kernel: max, weights, 1/sum. */
	for (size_t i = 0; i < n; i++)
		g[i] = i % 7 == 3 ? -INFINITY : rnd_normal() * 10.0f;
	for (int r = 0; r < N; r++) {
		float m = -INFINITY, sum = 0.0f;

		for (int j = 0; j < DIM; j++)
			m = fmaxf(m, g[r * DIM + j]);
		for (int j = 0; j < DIM; j++) {
			ref[r * DIM + j] = exl_softmax_weight(g[r * DIM + j], m);
			sum += ref[r * DIM + j];
		}
		for (int j = 0; j < DIM; j++)
			ref[r * DIM + j] *= 1.0f / sum;
	}
	cpu->ops->softmax(cpu, g, N, DIM);
	e = max_abs_diff(g, ref, n);
	printf("softmax: max |diff| %g\n", e);
	CHECK(e <= 1e-6, "softmax: max diff %g", e);

	cpu->ops->free(cpu, g);
	cpu->ops->free(cpu, u);
	cpu->ops->free(cpu, w);
	cpu->ops->free(cpu, y);
	free(ref);
}

/* The CUDA attention kernel for one (token, head), replayed: tiles of 128
 * positions, each scored, folded with exl_softmax_weight/rescale. */
#define TILE 128
static void attend_like_cuda(const float *q, const uint16_t *K, const uint16_t *V,
			     const int32_t *row, int len, int kvh, int n_kv_heads, int page_size,
			     int head_dim, float scale, float *out)
{
	float m = -INFINITY, l = 0.0f, w[TILE];
	float *acc = calloc((size_t)head_dim, sizeof(float));

	for (int base = 0; base < len; base += TILE) {
		int n_tile = len - base < TILE ? len - base : TILE;
		float s[TILE], tmax = -INFINITY, tsum = 0.0f;

		for (int j = 0; j < TILE; j++) {
			int p = base + j;

			s[j] = -INFINITY;
			if (p < len) {
				size_t off = (((size_t)row[p / page_size] * n_kv_heads + kvh) *
					      page_size + p % page_size) * head_dim;
				float dot = 0.0f;

				for (int d = 0; d < head_dim; d++)
					dot += q[d] * exl_fp16_to_fp32(K[off + d]);
				s[j] = dot * scale;
			}
			tmax = fmaxf(tmax, s[j]);
		}
		float m_new = fmaxf(m, tmax);
		float corr = exl_softmax_rescale(m, m_new);
		for (int j = 0; j < TILE; j++) {
			w[j] = exl_softmax_weight(s[j], m_new);
			tsum += w[j];
		}
		l = l * corr + tsum;
		for (int d = 0; d < head_dim; d++) {
			float a = acc[d] * corr;

			for (int j = 0; j < n_tile; j++) {
				int p = base + j;
				size_t off = (((size_t)row[p / page_size] * n_kv_heads + kvh) *
					      page_size + p % page_size) * head_dim;

				a += w[j] * exl_fp16_to_fp32(V[off + d]);
			}
			acc[d] = a;
		}
		m = m_new;
	}
	for (int d = 0; d < head_dim; d++)
		out[d] = acc[d] / l;
	free(acc);
}

static void test_attention(void)
{
	enum { HEADS = 4, KVH = 2, HD = 32, PAGE = 16, MAXP = 24, POOL = 2 * MAXP };
	/* Sequence 0: positions 0..299 stored, then 300 and 301 attend (windows
	 * of three tiles); sequence 1: 0..4 in one batch. */
	static int32_t pos[400], seq[400];
	int32_t table[2 * MAXP];
	const size_t pool_elems = (size_t)POOL * PAGE * KVH * HD;
	struct exl_kv_layer kv = { buf(pool_elems / 2), buf(pool_elems / 2), PAGE, KVH, HD, POOL,
				   0 };
	int n = 0;

	for (int i = 0; i < 2 * MAXP; i++)
		table[i] = (i * 7 + 3) % POOL; /* a permutation: 7 is prime to 48 */
	for (int p = 0; p < 300; p++, n++) {
		pos[n] = p;
		seq[n] = 0;
	}
	struct exl_batch_desc d = { n, pos, seq, 2, MAXP, table, 0, NULL };
	float *k = buf((size_t)n * KVH * HD), *v = buf((size_t)n * KVH * HD);
	for (size_t i = 0; i < (size_t)n * KVH * HD; i++) {
		k[i] = rnd_normal();
		v[i] = rnd_normal();
	}
	CHECK(cpu->ops->set_batch(cpu, &d) == 0, "set_batch history");
	cpu->ops->kv_store(cpu, &kv, k, v);

	n = 0;
	for (int p = 300; p < 302; p++, n++) {
		pos[n] = p;
		seq[n] = 0;
	}
	for (int p = 0; p < 5; p++, n++) {
		pos[n] = p;
		seq[n] = 1;
	}
	d.n_tokens = n;
	CHECK(cpu->ops->set_batch(cpu, &d) == 0, "set_batch");
	for (size_t i = 0; i < (size_t)n * KVH * HD; i++) {
		k[i] = rnd_normal();
		v[i] = rnd_normal();
	}
	cpu->ops->kv_store(cpu, &kv, k, v);

	float *q = buf((size_t)n * HEADS * HD), *out = buf((size_t)n * HEADS * HD);
	float ref[HD];
	const float scale = 1.0f / sqrtf((float)HD);
	for (size_t i = 0; i < (size_t)n * HEADS * HD; i++)
		q[i] = rnd_normal();
	const struct exl_attn_params ap = { scale, 0.0f, 0, NULL, false };

	cpu->ops->attention(cpu, &kv, q, out, HEADS, &ap);
	CHECK(cpu->ops->sync(cpu) == 0, "sync");

	double e = 0.0;
	for (int t = 0; t < n; t++)
		for (int h = 0; h < HEADS; h++) {
			size_t o = ((size_t)t * HEADS + h) * HD;

			attend_like_cuda(q + o, kv.k, kv.v, table + (size_t)seq[t] * MAXP,
					 pos[t] + 1, h / (HEADS / KVH), KVH, PAGE, HD, scale, ref);
			double de = max_abs_diff(out + o, ref, HD);
			e = de > e || isnan(de) ? de : e;
		}
	printf("attention: max |diff| %g\n", e);
	/* Averages of N(0,1) values in float, summed in different orders. */
	CHECK(e <= 2e-5, "attention (cuda algorithm vs cpu op): max diff %g", e);
	cpu->ops->free(cpu, k);
	cpu->ops->free(cpu, v);
	cpu->ops->free(cpu, q);
	cpu->ops->free(cpu, out);
	cpu->ops->free(cpu, kv.k);
	cpu->ops->free(cpu, kv.v);
}

int main(void)
{
	char err[256];

	cpu = exl_backend_cpu_create(1, err, sizeof(err));
	if (!cpu) {
		fprintf(stderr, "cpu backend: %s\n", err);
		return 1;
	}
	test_rope();
	test_swiglu_rms_softmax();
	test_attention();
	cpu->ops->destroy(cpu);
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

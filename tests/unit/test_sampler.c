/* Sampler: every step on crafted logits with hand-computed expectations,
 * and every setting through the full pipeline (each check fails if the
 * setting were ignored). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/sampler/sampler.h"
#include "tests/common/check.h"

static bool near(double a, double b, double tol)
{
	return fabs(a - b) <= tol;
}

/* ---- random stream ---- */

static void test_rng(void)
{
	struct exl_rng a, b, c;
	int same = 0;

	exl_rng_seed(&a, 42);
	exl_rng_seed(&b, 42);
	exl_rng_seed(&c, 43);
	for (int i = 0; i < 1000; i++) {
		uint64_t x = exl_rng_next(&a), y = exl_rng_next(&b), z = exl_rng_next(&c);

		CHECK(x == y, "same seed, different stream at %d", i);
		same += x == z;
	}
	CHECK(same == 0, "seeds 42 and 43 share %d values", same);

	double sum = 0.0;

	exl_rng_seed(&a, 7);
	for (int i = 0; i < 100000; i++) {
		double u = exl_rng_uniform(&a);

		CHECK(u >= 0.0 && u < 1.0, "uniform out of range: %g", u);
		sum += u;
	}
	CHECK(near(sum / 100000, 0.5, 0.01), "uniform mean %g", sum / 100000);
}

/* ---- logit steps ---- */

static void test_bias(void)
{
	float l[4] = { 1, 2, 3, 4 };
	struct exl_token_bias b[2] = { { 0, 10.0f }, { 3, -INFINITY } };

	exl_sample_bias(l, 4, b, 2);
	CHECK(l[0] == 11.0f && l[1] == 2.0f && l[2] == 3.0f && isinf(l[3]) && l[3] < 0,
	      "bias gave %g %g %g %g", l[0], l[1], l[2], l[3]);
}

static void test_ngram(void)
{
	float l[6] = { 0, 0, 0, 0, 0, 0 };
	int32_t h[] = { 1, 2, 3, 1, 2 };

	exl_sample_no_repeat_ngram(l, 6, h, 5, 3);
	for (int i = 0; i < 6; i++)
		CHECK(i == 3 ? isinf(l[i]) : l[i] == 0.0f, "3-gram: logit %d = %g", i, l[i]);

	float m[6] = { 0, 0, 0, 0, 0, 0 };

	exl_sample_no_repeat_ngram(m, 6, h, 5, 1);
	for (int i = 0; i < 6; i++)
		CHECK((i >= 1 && i <= 3) ? isinf(m[i]) : m[i] == 0.0f, "1-gram: logit %d = %g", i, m[i]);

	float n[6] = { 0, 0, 0, 0, 0, 0 };
	int32_t h2[] = { 1, 2, 3, 4, 5 };

	exl_sample_no_repeat_ngram(n, 6, h2, 5, 2);
	for (int i = 0; i < 6; i++)
		CHECK(n[i] == 0.0f, "2-gram with no repeat: logit %d = %g", i, n[i]);
}

static void test_penalties(void)
{
	float scratch[16] = { 0 };
	float l[8] = { 2, -2, 2, -2, 2, 1, 1, 1 };
	int32_t h[] = { 0, 1, 2, 3 };

	/* Range 2: only 2 and 3 are penalised. */
	exl_sample_penalties(l, 8, h, 4, 2.0f, 2, 0, 0.0f, 0.0f, scratch);
	CHECK(l[0] == 2.0f && l[1] == -2.0f && l[2] == 1.0f && l[3] == -4.0f && l[4] == 2.0f,
	      "rep pen range 2: %g %g %g %g %g", l[0], l[1], l[2], l[3], l[4]);
	for (int i = 0; i < 16; i++)
		CHECK(scratch[i] == 0.0f, "scratch %d left at %g", i, scratch[i]);

	/* Range -1: all of the history. */
	float m[8] = { 2, -2, 2, -2, 2, 1, 1, 1 };

	exl_sample_penalties(m, 8, h, 4, 2.0f, -1, 0, 0.0f, 0.0f, scratch);
	CHECK(m[0] == 1.0f && m[1] == -4.0f && m[2] == 1.0f && m[3] == -4.0f && m[4] == 2.0f,
	      "rep pen all: %g %g %g %g %g", m[0], m[1], m[2], m[3], m[4]);

	/* Range 1, decay 2: token 3 full, 2 at 2/3, 1 at 1/3, 0 outside. */
	float d[8] = { 3, 3, 3, 3, 3, 3, 3, 3 };

	exl_sample_penalties(d, 8, h, 4, 4.0f, 1, 2, 0.0f, 0.0f, scratch);
	CHECK(d[3] == 0.75f && near(d[2], 1.0, 1e-6) && near(d[1], 1.5, 1e-6) && d[0] == 3.0f,
	      "rep pen decay: %g %g %g %g", d[0], d[1], d[2], d[3]);

	/* Frequency and presence: token 5 three times, 6 once. */
	float f[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	int32_t hf[] = { 5, 6, 5, 5 };

	exl_sample_penalties(f, 8, hf, 4, 1.0f, 64, 0, 0.5f, 0.25f, scratch);
	CHECK(near(f[5], 1.0 - 1.5 - 0.25, 1e-6) && near(f[6], 1.0 - 0.5 - 0.25, 1e-6) &&
	      f[4] == 1.0f, "freq/pres: %g %g %g", f[4], f[5], f[6]);
}

static void test_dry(void)
{
	int32_t scratch[8] = { 0 };
	int32_t h[] = { 5, 6, 7, 4, 5, 6, 7 };
	float l[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };

	/* The tail 5 6 7 repeats (length 3); 4 followed it: penalty 1 * 2^(3-2). */
	exl_sample_dry(l, 8, h, 7, NULL, 1.0f, 2.0f, 2, 0, scratch);
	for (int i = 0; i < 8; i++)
		CHECK(i == 4 ? l[i] == -1.0f : l[i] == 1.0f, "dry: logit %d = %g", i, l[i]);
	for (int i = 0; i < 8; i++)
		CHECK(scratch[i] == 0, "dry scratch %d left at %d", i, scratch[i]);

	/* Token 6 breaks sequences: the match is only "7" (length 1 < 2). */
	uint32_t breaker = 1u << 6;
	float b[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };

	exl_sample_dry(b, 8, h, 7, &breaker, 1.0f, 2.0f, 2, 0, scratch);
	for (int i = 0; i < 8; i++)
		CHECK(b[i] == 1.0f, "dry with breaker: logit %d = %g", i, b[i]);

	/* Allowed length 4: no penalty for a match of 3. */
	float a[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };

	exl_sample_dry(a, 8, h, 7, NULL, 1.0f, 2.0f, 4, 0, scratch);
	CHECK(a[4] == 1.0f, "dry allowed 4: %g", a[4]);

	/* Range 4 hides the first occurrence. */
	float r[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };

	exl_sample_dry(r, 8, h, 7, NULL, 1.0f, 2.0f, 2, 4, scratch);
	CHECK(r[4] == 1.0f, "dry range 4: %g", r[4]);
}

/* ---- candidate steps ---- */

/* p = 0.5 0.3 0.15 0.05 for ids 0..3 */
static struct exl_cand cbuf[16], ctmp[16];

static struct exl_cands four(void)
{
	static const float p[4] = { 0.5f, 0.3f, 0.15f, 0.05f };
	struct exl_cands cs = { cbuf, ctmp, 4, 0, NULL };

	for (int i = 0; i < 4; i++) {
		cbuf[i].id = i;
		cbuf[i].logit = logf(p[i]);
		cbuf[i].p = p[i];
	}
	return cs;
}

static void test_cands(void)
{
	struct exl_cands cs;

	float l[5] = { 0.0f, 2.0f, -INFINITY, 1.0f, 2.0f };

	cs = (struct exl_cands){ cbuf, ctmp, 0, 0, NULL };
	exl_cands_from_logits(&cs, l, 5);
	CHECK(cs.n == 4, "from_logits kept %d", cs.n);
	exl_cands_softmax(&cs);
	CHECK(cs.c[0].id == 1 && cs.c[1].id == 4 && cs.c[2].id == 3 && cs.c[3].id == 0,
	      "softmax order %d %d %d %d", cs.c[0].id, cs.c[1].id, cs.c[2].id, cs.c[3].id);
	double e = exp(2.0) * 2 + exp(1.0) + 1.0;
	CHECK(near(cs.c[0].p, exp(2.0) / e, 1e-6) && near(cs.c[3].p, 1.0 / e, 1e-6),
	      "softmax p %g %g", cs.c[0].p, cs.c[3].p);

	exl_cands_temperature(&cs, 2.0f);
	e = exp(1.0) * 2 + exp(0.5) + 1.0;
	CHECK(near(cs.c[0].p, exp(1.0) / e, 1e-6) && near(cs.c[2].p, exp(0.5) / e, 1e-6),
	      "temperature 2: p %g %g", cs.c[0].p, cs.c[2].p);

	cs = four();
	exl_cands_top_k(&cs, 2);
	CHECK(cs.n == 2 && near(cs.c[0].p, 0.625, 1e-6), "top_k 2: n %d p0 %g", cs.n, cs.c[0].p);

	cs = four();
	exl_cands_top_p(&cs, 0.75f);
	CHECK(cs.n == 2, "top_p 0.75 kept %d", cs.n);
	cs = four();
	exl_cands_top_p(&cs, 0.85f);
	CHECK(cs.n == 3, "top_p 0.85 kept %d", cs.n);
	cs = four();
	exl_cands_top_p(&cs, 0.1f);
	CHECK(cs.n == 1, "top_p 0.1 kept %d", cs.n);

	cs = four();
	exl_cands_min_p(&cs, 0.5f);
	CHECK(cs.n == 2, "min_p 0.5 kept %d", cs.n);
	cs = four();
	exl_cands_min_p(&cs, 0.2f);
	CHECK(cs.n == 3, "min_p 0.2 kept %d", cs.n);

	/* Entropy 1.142 nats; distance of each surprise from it:
	 * id1 0.062, id0 0.449, id2 0.755, id3 1.853. */
	cs = four();
	exl_cands_typical(&cs, 0.2f);
	CHECK(cs.n == 1 && cs.c[0].id == 1, "typical 0.2: n %d id %d", cs.n, cs.c[0].id);
	cs = four();
	exl_cands_typical(&cs, 0.5f);
	CHECK(cs.n == 2 && cs.c[0].id == 0 && cs.c[1].id == 1 && near(cs.c[0].p, 0.625, 1e-6),
	      "typical 0.5: n %d ids %d %d", cs.n, cs.c[0].id, cs.c[1].id);
	cs = four();
	exl_cands_typical(&cs, 0.9f);
	CHECK(cs.n == 3 && cs.c[2].id == 2, "typical 0.9: n %d", cs.n);

	/* Second differences 0.05 0.05: cumulative 0.5 then 1. */
	cs = four();
	exl_cands_tfs(&cs, 0.4f);
	CHECK(cs.n == 1, "tfs 0.4 kept %d", cs.n);
	cs = four();
	exl_cands_tfs(&cs, 0.6f);
	CHECK(cs.n == 2, "tfs 0.6 kept %d", cs.n);

	cs = four();
	exl_cands_top_a(&cs, 0.5f); /* floor 0.125 */
	CHECK(cs.n == 3, "top_a 0.5 kept %d", cs.n);
	cs = four();
	exl_cands_top_a(&cs, 1.0f); /* floor 0.25 */
	CHECK(cs.n == 2, "top_a 1 kept %d", cs.n);

	struct exl_rng rng;

	exl_rng_seed(&rng, 1);
	cs = four();
	exl_cands_xtc(&cs, 1.0f, 0.2f, &rng);
	CHECK(cs.n == 3 && cs.c[0].id == 1 && near(cs.c[0].p, 0.6, 1e-6),
	      "xtc: n %d first %d p %g", cs.n, cs.c[0].id, cs.c[0].p);
	cs = four();
	exl_cands_xtc(&cs, 1.0f, 0.4f, &rng); /* only one above: nothing */
	CHECK(cs.n == 4, "xtc one above: n %d", cs.n);
	cs = four();
	exl_cands_xtc(&cs, 0.0f, 0.2f, &rng);
	CHECK(cs.n == 4, "xtc off: n %d", cs.n);

	/* Draw frequencies follow p. */
	int count[4] = { 0 };

	exl_rng_seed(&rng, 5);
	cs = four();
	for (int i = 0; i < 20000; i++)
		count[cs.c[exl_cands_draw(&cs, &rng)].id]++;
	CHECK(near(count[0] / 20000.0, 0.5, 0.02) && near(count[3] / 20000.0, 0.05, 0.01),
	      "draw counts %d %d %d %d", count[0], count[1], count[2], count[3]);

	/* Mirostat v2: mu 1 keeps p >= 0.5 only; surprise 0 raises mu. */
	float mu = 1.0f;

	cs = four();
	int32_t t = exl_cands_mirostat_v2(&cs, 0.5f, 0.2f, &mu, &rng);
	CHECK(t == 0 && near(mu, 1.1, 1e-6), "mirostat: token %d mu %g", t, mu);
	mu = 10.0f;
	cs = four();
	exl_cands_mirostat_v2(&cs, 0.5f, 0.2f, &mu, &rng);
	CHECK(cs.n == 4 && mu < 10.0f, "mirostat wide: n %d mu %g", cs.n, mu);
}

/* A step that cuts the list after an earlier one sorted past the cut
 * keeps the sorted prefix within the list: top_k sorted 10, top_p kept 2,
 * and XTC then counted "top choices" among 10 stale entries and moved a
 * negative count (found by fuzz_generate: heap corruption). */
static void test_sorted_prefix_cut(void)
{
	struct exl_cand c[12], t[12];
	struct exl_cands cs = { c, t, 0, 0, NULL };
	struct exl_rng rng;
	float l[12];

	for (int i = 0; i < 12; i++)
		l[i] = (float)(12 - i) * 0.5f;
	exl_rng_seed(&rng, 3);
	for (int v = 0; v < 2; v++) {
		exl_cands_from_logits(&cs, l, 12);
		exl_cands_softmax(&cs);
		if (v)
			exl_cands_keep_best(&cs, 10);
		else
			exl_cands_top_k(&cs, 10);
		exl_cands_softmax(&cs);
		CHECK(cs.n == 10 && cs.n_sorted <= cs.n, "cut 10: n %d sorted %d", cs.n, cs.n_sorted);
		exl_cands_top_p(&cs, 0.5f);
		CHECK(cs.n == 2 && cs.n_sorted <= cs.n, "top_p: n %d sorted %d", cs.n, cs.n_sorted);
		exl_cands_xtc(&cs, 1.0f, 0.01f, &rng);
		CHECK(cs.n == 1 && cs.c[0].id == 1 && near(cs.c[0].p, 1.0, 1e-6),
		      "xtc after the cut: n %d id %d p %g", cs.n, cs.c[0].id, cs.c[0].p);
		exl_cands_from_logits(&cs, l, 12);
		exl_cands_softmax(&cs);
		exl_cands_top_k(&cs, 10);
		exl_cands_tfs(&cs, 0.1f);
		exl_cands_typical(&cs, 0.9f);
		CHECK(cs.n_sorted <= cs.n && cs.n >= 1, "tfs, typical: n %d sorted %d", cs.n,
		      cs.n_sorted);
	}
}

/* The linear-time sort of large lists orders exactly like the comparison
 * sort, ties included, and the lazy partial sorts give the same draws. */
static void test_big_sort(void)
{
	enum { N = 20000 };
	struct exl_cand *c1 = malloc(N * sizeof(*c1)), *c2 = malloc(N * sizeof(*c2));
	struct exl_cand *t1 = malloc(N * sizeof(*t1)), *t2 = malloc(N * sizeof(*t2));
	uint64_t *keys = malloc(2 * N * sizeof(*keys));
	float *l = malloc(N * sizeof(*l));
	struct exl_rng rng, r1, r2;

	if (!c1 || !c2 || !t1 || !t2 || !keys || !l) {
		CHECK(0, "oom");
		return;
	}
	exl_rng_seed(&rng, 99);
	for (int i = 0; i < N; i++) {
		/* coarse values (many ties), some negative, a few masked */
		l[i] = (float)((int)(exl_rng_uniform(&rng) * 200) - 100) / 8.0f;
		if (i % 997 == 0)
			l[i] = -INFINITY;
	}
	struct exl_cands a = { c1, t1, 0, 0, NULL }, b = { c2, t2, 0, 0, keys };

	exl_cands_from_logits(&a, l, N);
	exl_cands_from_logits(&b, l, N);
	exl_cands_softmax(&a);
	exl_cands_softmax(&b);
	CHECK(a.n == b.n && a.n_sorted == a.n && b.n_sorted == b.n, "n %d %d", a.n, b.n);
	int diff = 0;

	for (int i = 0; i < a.n; i++)
		diff += a.c[i].id != b.c[i].id || a.c[i].p != b.c[i].p;
	CHECK(diff == 0, "radix and comparison sorts differ at %d places", diff);
	for (int i = 1; i < b.n; i++)
		CHECK(b.c[i - 1].logit > b.c[i].logit ||
		      (b.c[i - 1].logit == b.c[i].logit && b.c[i - 1].id < b.c[i].id),
		      "order broken at %d", i);

	/* Unsorted start: draws and top_p agree with the fully sorted list. */
	for (int t = 0; t < 50; t++) {
		exl_cands_from_logits(&b, l, N);
		exl_cands_probs(&b);
		exl_cands_top_p(&b, 0.5f + 0.01f * (float)t);
		exl_cands_from_logits(&a, l, N);
		exl_cands_softmax(&a);
		exl_cands_top_p(&a, 0.5f + 0.01f * (float)t);
		CHECK(a.n == b.n, "top_p %d: %d vs %d", t, a.n, b.n);
		exl_rng_seed(&r1, (uint64_t)t);
		exl_rng_seed(&r2, (uint64_t)t);
		int i1 = exl_cands_draw(&a, &r1), i2 = exl_cands_draw(&b, &r2);

		CHECK(a.c[i1].id == b.c[i2].id, "draw %d: %d vs %d", t, a.c[i1].id, b.c[i2].id);
	}
	free(c1);
	free(c2);
	free(t1);
	free(t2);
	free(keys);
	free(l);
}

/* exl_cands_best_of_logits against exl_cands_from_logits + keep_best:
 * the same candidates in the same order, bit for bit, or -1 where keep_best
 * would keep all of them.  Coarse values give ties (to the lower id), some
 * NaN and -inf, and lengths that are not whole runs of 16. */
static void test_best_of_logits(void)
{
	enum { N = 5003 };
	static struct exl_cand c1[N], c2[N], t1[N];
	static float l[N];
	static const int ks[] = { 1, 2, 40, 255, 256 };
	static const int ns[] = { 1, 17, 40, 41, 300, N };
	struct exl_rng rng;

	exl_rng_seed(&rng, 7);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < N; i++) {
			l[i] = (float)((int)(exl_rng_uniform(&rng) * (round ? 64 : 4000)) - 32) / 4.0f;
			if (i % 113 == 5)
				l[i] = -INFINITY;
			if (round == 3 && i % 7 == 0)
				l[i] = NAN;
			if (round == 2 && i > N / 2)
				l[i] = (float)(i - N / 2); /* rising: the heap turns over */
		}
		for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
			for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
				int n = ns[ni], k = ks[ki], valid = 0;
				struct exl_cands a = { c1, t1, 0, 0, NULL }, b = { c2, NULL, -1, -1, NULL };

				for (int i = 0; i < n; i++)
					valid += l[i] > -INFINITY;
				exl_cands_from_logits(&a, l, n);
				exl_cands_keep_best(&a, k);
				int rc = exl_cands_best_of_logits(&b, l, n, k);

				if (valid <= k) {
					CHECK(rc == -1 && b.n == -1, "n %d k %d: %d valid, rc %d", n, k, valid, rc);
					continue;
				}
				CHECK(rc == 0 && a.n == b.n && a.n_sorted == b.n_sorted,
				      "round %d n %d k %d: rc %d, n %d/%d sorted %d/%d", round, n, k, rc, a.n, b.n,
				      a.n_sorted, b.n_sorted);
				int diff = 0;

				for (int i = 0; rc == 0 && i < b.n; i++)
					diff += memcmp(&a.c[i], &b.c[i], sizeof(a.c[i])) != 0;
				CHECK(diff == 0, "round %d n %d k %d: %d candidates differ", round, n, k, diff);
			}
		}
	}
	struct exl_cands b = { c2, NULL, 0, 0, NULL };

	CHECK(exl_cands_best_of_logits(&b, l, N, 0) == -1, "k 0 taken");
	CHECK(exl_cands_best_of_logits(&b, l, N, 257) == -1, "k 257 taken");
}

/* ---- the pipeline, setting by setting ---- */

#define NV 8
static const float base_logits[NV] = { 3.0f, 2.5f, 2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -2.0f };

static void neutral(struct exl_sampler_params *p)
{
	exl_sampler_params_init(p);
	p->temperature = 1.0f;
	p->top_k = 0;
	p->top_p = 1.0f;
	p->min_p = 0.0f;
	p->rep_pen = 1.0f;
}

/* Draws n tokens with the given history and returns counts per token. */
static void run(const struct exl_sampler_params *p, const int32_t *hist, int n_hist,
		const uint32_t *breaker, int n, int counts[NV])
{
	char err[256];
	struct exl_sampler *s = exl_sampler_create(p, NV, breaker, err, sizeof(err));
	struct exl_rng rng;

	memset(counts, 0, NV * sizeof(int));
	if (!s) {
		CHECK(0, "sampler_create: %s", err);
		return;
	}
	exl_rng_seed(&rng, 1234);
	for (int i = 0; i < n; i++) {
		float l[NV];

		memcpy(l, base_logits, sizeof(l));
		int32_t t = exl_sampler_sample(s, l, hist, n_hist, &rng);

		if (t < 0 || t >= NV) {
			CHECK(0, "sampled %d", t);
			break;
		}
		counts[t]++;
	}
	exl_sampler_free(s);
}

static int seen(const int counts[NV], int from, int to)
{
	int n = 0;

	for (int i = from; i <= to; i++)
		n += counts[i] > 0;
	return n;
}

static void test_pipeline(void)
{
	struct exl_sampler_params p;
	int c[NV];
	const int N = 3000;

	neutral(&p);
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 7) == 8, "neutral: all 8 tokens expected");
	CHECK(near(c[0] / (double)N, 0.441, 0.03), "neutral: token 0 %d/%d", c[0], N);
	int base0 = c[0];

	neutral(&p);
	p.temperature = 0.0f;
	run(&p, NULL, 0, NULL, 100, c);
	CHECK(c[0] == 100, "greedy: token 0 %d/100", c[0]);

	neutral(&p);
	p.temperature = 0.2f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(c[0] > N * 0.85 && c[1] > 0, "temperature 0.2: %d %d", c[0], c[1]);

	neutral(&p);
	p.top_k = 3;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 2) == 3 && seen(c, 3, 7) == 0, "top_k 3");

	neutral(&p);
	p.top_k = 1;
	run(&p, NULL, 0, NULL, 100, c);
	CHECK(c[0] == 100, "top_k 1 is greedy");

	neutral(&p);
	p.top_p = 0.5f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 1) == 2 && seen(c, 2, 7) == 0, "top_p 0.5");

	neutral(&p);
	p.min_p = 0.3f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 2) == 3 && seen(c, 3, 7) == 0, "min_p 0.3");

	neutral(&p);
	p.typical = 0.3f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(c[0] == 0 && c[1] > 0 && c[2] > 0 && seen(c, 3, 7) == 0,
	      "typical 0.3: %d %d %d", c[0], c[1], c[2]);

	neutral(&p);
	p.tfs = 0.5f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 2) == 3 && seen(c, 3, 7) == 0, "tfs 0.5");

	neutral(&p);
	p.top_a = 0.5f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 2) == 3 && seen(c, 3, 7) == 0, "top_a 0.5");

	neutral(&p);
	p.xtc_prob = 1.0f;
	p.xtc_thresh = 0.2f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(c[0] == 0 && c[1] > N / 3, "xtc: %d %d", c[0], c[1]);
	p.xtc_prob = 0.5f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(c[0] > N / 10 && c[0] < base0 * 3 / 4, "xtc half: %d", c[0]);

	neutral(&p);
	p.mirostat = 2;
	p.mirostat_tau = 0.01f;
	p.mirostat_eta = 0.0f;
	run(&p, NULL, 0, NULL, 200, c);
	CHECK(c[0] == 200, "mirostat tau 0.01: token 0 %d/200", c[0]);
	p.mirostat_tau = 10.0f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 7) == 8, "mirostat tau 10: all tokens");
	/* Mirostat replaces the truncation, top_k included (llama.cpp's
	 * mirostat v2 chain is temperature then mirostat): the same draws. */
	int c_all[NV];

	memcpy(c_all, c, sizeof(c_all));
	p.top_k = 2;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(!memcmp(c, c_all, sizeof(c_all)), "mirostat with top_k 2: %d tokens seen, counts differ",
	      seen(c, 0, 7));
	p.top_k = 0;
	/* eta drives mu down after surprising picks: with tau 1 and eta 1
	 * the kept set stays small, with eta 0 (mu fixed at 2) it is {0, 1}. */
	p.mirostat_tau = 1.0f;
	p.mirostat_eta = 0.0f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 0, 1) == 2 && seen(c, 2, 7) == 0, "mirostat eta 0");
	p.mirostat_eta = 1.0f;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(seen(c, 2, 7) > 0, "mirostat eta 1 should widen the set at times");

	neutral(&p);
	struct exl_token_bias bias = { 7, 10.0f };

	p.bias = &bias;
	p.n_bias = 1;
	run(&p, NULL, 0, NULL, N, c);
	CHECK(c[7] > N * 0.9, "bias: token 7 %d", c[7]);

	int32_t h0[] = { 0 };

	neutral(&p);
	p.rep_pen = 100.0f;
	run(&p, h0, 1, NULL, N, c);
	CHECK(c[0] < N / 10, "rep_pen: token 0 %d", c[0]);

	int32_t h1[] = { 0, 5, 5 };

	p.rep_range = 2;
	run(&p, h1, 3, NULL, N, c);
	CHECK(near(c[0], base0, N / 20.0), "rep_range 2: token 0 %d vs %d", c[0], base0);
	p.rep_range = 1;
	p.rep_decay = 2;
	run(&p, h1, 3, NULL, N, c);
	CHECK(c[0] < N / 10, "rep_decay: token 0 %d", c[0]);

	int32_t h3[] = { 0, 0, 0 };

	neutral(&p);
	p.freq_pen = 2.0f;
	run(&p, h3, 3, NULL, N, c);
	CHECK(c[0] < N / 20, "freq_pen: token 0 %d", c[0]);
	neutral(&p);
	p.pres_pen = 5.0f;
	run(&p, h3, 3, NULL, N, c);
	CHECK(c[0] < N / 20, "pres_pen: token 0 %d", c[0]);

	int32_t hn[] = { 4, 0, 4 };

	neutral(&p);
	p.no_repeat_ngram = 2;
	run(&p, hn, 3, NULL, N, c);
	CHECK(c[0] == 0 && c[1] > 0, "no_repeat_ngram 2: token 0 %d", c[0]);

	int32_t hd[] = { 1, 2, 0, 1, 2 };

	neutral(&p);
	p.dry_mult = 5.0f;
	p.dry_base = 2.0f;
	p.dry_allowed_len = 2;
	run(&p, hd, 5, NULL, N, c);
	CHECK(c[0] < N / 50, "dry: token 0 %d", c[0]);
	p.dry_mult = 1.0f;
	p.dry_allowed_len = 1;
	run(&p, hd, 5, NULL, N, c);
	int dry_b2 = c[0];
	p.dry_base = 8.0f;
	run(&p, hd, 5, NULL, N, c);
	CHECK(c[0] < dry_b2 / 4 && dry_b2 < base0, "dry_base: %d vs %d", c[0], dry_b2);
	p.dry_mult = 5.0f;
	p.dry_base = 2.0f;
	p.dry_allowed_len = 3;
	run(&p, hd, 5, NULL, N, c);
	CHECK(near(c[0], base0, N / 20.0), "dry_allowed_len 3: %d vs %d", c[0], base0);
	p.dry_allowed_len = 2;
	uint32_t br = 1u << 1;
	run(&p, hd, 5, &br, N, c);
	CHECK(near(c[0], base0, N / 20.0), "dry breaker: %d vs %d", c[0], base0);
	p.dry_range = 3;
	run(&p, hd, 5, NULL, N, c);
	CHECK(near(c[0], base0, N / 20.0), "dry_range 3: %d vs %d", c[0], base0);

	/* At temperature 3, min_p 0.2 keeps all four of 2 1 0 -1 when the
	 * temperature comes first, and only two when it comes last. */
	neutral(&p);
	p.temperature = 3.0f;
	p.min_p = 0.2f;
	run(&p, NULL, 0, NULL, N, c);
	int first = seen(c, 0, 7);
	p.temperature_last = true;
	run(&p, NULL, 0, NULL, N, c);
	int last = seen(c, 0, 7);
	CHECK(first >= 6 && last == 3, "temperature_last: %d tokens first, %d last", first, last);
}

static void test_check(void)
{
	struct exl_sampler_params p;
	char err[256];
	struct exl_token_bias bad = { 99, 1.0f };

	exl_sampler_params_init(&p);
	CHECK(exl_sampler_params_check(&p, 8, err, sizeof(err)) == 0, "defaults refused: %s", err);
	CHECK(p.temperature == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f &&
	      p.n_dry_breakers == 4 && !strcmp(p.dry_breakers[0], "\n"), "defaults changed");

#define BAD(field, value, word) do { \
	exl_sampler_params_init(&p); \
	p.field = value; \
	err[0] = 0; \
	CHECK(exl_sampler_params_check(&p, 8, err, sizeof(err)) == -1 && strstr(err, word), \
	      #field " = " #value " accepted or bad message: %s", err); \
} while (0)
	BAD(temperature, -1.0f, "temperature");
	BAD(temperature, NAN, "temperature");
	BAD(top_k, -2, "top_k");
	BAD(top_p, 1.5f, "top_p");
	BAD(min_p, -0.1f, "min_p");
	BAD(typical, 2.0f, "typical");
	BAD(tfs, -1.0f, "tfs");
	BAD(top_a, 3.0f, "top_a");
	BAD(rep_pen, 0.0f, "rep_pen");
	BAD(rep_range, -2, "rep_range");
	BAD(rep_decay, -1, "rep_decay");
	BAD(freq_pen, INFINITY, "freq_pen");
	BAD(pres_pen, NAN, "pres_pen");
	BAD(no_repeat_ngram, -1, "no_repeat_ngram");
	BAD(dry_mult, -1.0f, "dry_mult");
	BAD(dry_base, 0.5f, "dry_base");
	BAD(dry_allowed_len, 0, "dry_allowed_len");
	BAD(dry_range, -1, "dry_range");
	BAD(n_dry_breakers, 99, "breakers");
	BAD(xtc_prob, 1.5f, "xtc_prob");
	BAD(xtc_thresh, -0.5f, "xtc_thresh");
	BAD(mirostat, 1, "mirostat");
	BAD(mirostat_tau, 0.0f, "mirostat_tau");
	BAD(mirostat_eta, -1.0f, "mirostat_eta");
	exl_sampler_params_init(&p);
	p.bias = &bad;
	p.n_bias = 1;
	CHECK(exl_sampler_params_check(&p, 8, err, sizeof(err)) == -1 && strstr(err, "99"),
	      "bias id out of range accepted: %s", err);
	exl_sampler_params_init(&p);
	p.dry_breakers[1][0] = 0;
	CHECK(exl_sampler_params_check(&p, 8, err, sizeof(err)) == -1, "empty breaker accepted");
	CHECK(exl_sampler_create(&p, 8, NULL, err, sizeof(err)) == NULL, "create took bad params");
}

int main(void)
{
	test_rng();
	test_bias();
	test_ngram();
	test_penalties();
	test_dry();
	test_cands();
	test_sorted_prefix_cut();
	test_big_sort();
	test_best_of_logits();
	test_pipeline();
	test_check();
	if (check_failures) {
		fprintf(stderr, "%d check(s) failed\n", check_failures);
		return 1;
	}
	printf("sampler: all checks passed\n");
	return 0;
}

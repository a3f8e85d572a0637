/* Sampling parameters, the per-job random stream, the truncation steps over
 * sorted candidates, and the full sampling pipeline.  Formulas:
 * docs/sampling.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/sampler/sampler.h"

/* ---- random stream ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void exl_rng_seed(struct exl_rng *r, uint64_t seed)
{
	uint64_t x = seed;

	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t exl_rng_next(struct exl_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

double exl_rng_uniform(struct exl_rng *r)
{
	return (double)(exl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- parameters ---- */

void exl_sampler_params_init(struct exl_sampler_params *p)
{
	static const char *const breakers[] = { "\n", ":", "\"", "*" };

	memset(p, 0, sizeof(*p));
	p->temperature = 0.8f;
	p->top_k = 40;
	p->top_p = 0.95f;
	p->min_p = 0.05f;
	p->typical = 1.0f;
	p->tfs = 1.0f;
	p->rep_pen = 1.0f;
	p->rep_range = 64;
	p->dry_base = 1.75f;
	p->dry_allowed_len = 2;
	p->n_dry_breakers = 4;
	for (int i = 0; i < 4; i++)
		strcpy(p->dry_breakers[i], breakers[i]);
	p->xtc_thresh = 0.1f;
	p->mirostat_tau = 5.0f;
	p->mirostat_eta = 0.1f;
}

#define CHECK(cond, ...) do { if (!(cond)) { snprintf(err, errlen, __VA_ARGS__); return -1; } } while (0)

static bool in01(float x)
{
	return x >= 0.0f && x <= 1.0f;
}

int exl_sampler_params_check(const struct exl_sampler_params *p, int n_vocab,
			     char *err, size_t errlen)
{
	CHECK(isfinite(p->temperature) && p->temperature >= 0.0f && p->temperature <= 100.0f,
	      "temperature must be in [0, 100] (got %g)", (double)p->temperature);
	CHECK(p->top_k >= 0, "top_k must be >= 0 (got %d)", p->top_k);
	CHECK(in01(p->top_p), "top_p must be in [0, 1] (got %g)", (double)p->top_p);
	CHECK(in01(p->min_p), "min_p must be in [0, 1] (got %g)", (double)p->min_p);
	CHECK(in01(p->typical), "typical must be in [0, 1] (got %g)", (double)p->typical);
	CHECK(in01(p->tfs), "tfs must be in [0, 1] (got %g)", (double)p->tfs);
	CHECK(in01(p->top_a), "top_a must be in [0, 1] (got %g)", (double)p->top_a);
	CHECK(isfinite(p->rep_pen) && p->rep_pen > 0.0f && p->rep_pen <= 100.0f,
	      "rep_pen must be in (0, 100] (got %g)", (double)p->rep_pen);
	CHECK(p->rep_range >= -1, "rep_range must be >= -1 (got %d)", p->rep_range);
	CHECK(p->rep_decay >= 0 && p->rep_decay <= 1 << 24,
	      "rep_decay must be in [0, 16777216] (got %d)", p->rep_decay);
	CHECK(isfinite(p->freq_pen) && fabsf(p->freq_pen) <= 100.0f,
	      "freq_pen must be in [-100, 100] (got %g)", (double)p->freq_pen);
	CHECK(isfinite(p->pres_pen) && fabsf(p->pres_pen) <= 100.0f,
	      "pres_pen must be in [-100, 100] (got %g)", (double)p->pres_pen);
	CHECK(p->no_repeat_ngram >= 0 && p->no_repeat_ngram <= 64,
	      "no_repeat_ngram must be in [0, 64] (got %d)", p->no_repeat_ngram);
	CHECK(isfinite(p->dry_mult) && p->dry_mult >= 0.0f && p->dry_mult <= 100.0f,
	      "dry_mult must be in [0, 100] (got %g)", (double)p->dry_mult);
	CHECK(isfinite(p->dry_base) && p->dry_base >= 1.0f && p->dry_base <= 100.0f,
	      "dry_base must be in [1, 100] (got %g)", (double)p->dry_base);
	CHECK(p->dry_allowed_len >= 1 && p->dry_allowed_len <= EXL_DRY_MAX_MATCH,
	      "dry_allowed_len must be in [1, %d] (got %d)", EXL_DRY_MAX_MATCH, p->dry_allowed_len);
	CHECK(p->dry_range >= 0, "dry_range must be >= 0 (got %d)", p->dry_range);
	CHECK(p->n_dry_breakers >= 0 && p->n_dry_breakers <= EXL_SAMPLER_MAX_BREAKERS,
	      "at most %d DRY sequence breakers (got %d)", EXL_SAMPLER_MAX_BREAKERS,
	      p->n_dry_breakers);
	for (int i = 0; i < p->n_dry_breakers; i++) {
		size_t n = strnlen(p->dry_breakers[i], EXL_SAMPLER_MAX_BREAKER_LEN);

		CHECK(n > 0 && n < EXL_SAMPLER_MAX_BREAKER_LEN,
		      "DRY sequence breaker %d must be 1 to %d bytes", i,
		      EXL_SAMPLER_MAX_BREAKER_LEN - 1);
	}
	CHECK(in01(p->xtc_prob), "xtc_prob must be in [0, 1] (got %g)", (double)p->xtc_prob);
	CHECK(in01(p->xtc_thresh), "xtc_thresh must be in [0, 1] (got %g)", (double)p->xtc_thresh);
	CHECK(p->mirostat == 0 || p->mirostat == 2,
	      "mirostat must be 0 (off) or 2 (v2; v1 is not supported) (got %d)", p->mirostat);
	CHECK(isfinite(p->mirostat_tau) && p->mirostat_tau > 0.0f && p->mirostat_tau <= 100.0f,
	      "mirostat_tau must be in (0, 100] (got %g)", (double)p->mirostat_tau);
	CHECK(isfinite(p->mirostat_eta) && p->mirostat_eta >= 0.0f && p->mirostat_eta <= 1.0f,
	      "mirostat_eta must be in [0, 1] (got %g)", (double)p->mirostat_eta);
	CHECK(p->n_bias >= 0 && p->n_bias <= 1 << 20, "too many token biases (%d)", p->n_bias);
	CHECK(p->n_bias == 0 || p->bias, "token bias count %d without a list", p->n_bias);
	for (int i = 0; i < p->n_bias; i++) {
		CHECK(p->bias[i].id >= 0 && p->bias[i].id < n_vocab,
		      "token bias id %d out of range (vocabulary has %d tokens)",
		      (int)p->bias[i].id, n_vocab);
		CHECK(!isnan(p->bias[i].bias) && p->bias[i].bias != INFINITY,
		      "token bias for id %d must be a number or -inf", (int)p->bias[i].id);
	}
	return 0;
}

bool exl_sampler_params_greedy(const struct exl_sampler_params *p)
{
	return p->temperature == 0.0f || p->top_k == 1;
}

/* ---- one job's sampler ---- */

struct exl_sampler {
	struct exl_sampler_params p;
	struct exl_token_bias *bias;
	int n_vocab;
	float mu;
	struct exl_cand *cand;
	struct exl_cand *cand_tmp;
	uint64_t *keys;       /* 2 * n_vocab, radix sort scratch */
	float *pen_scratch;   /* 2 * n_vocab, kept zero */
	int32_t *dry_scratch; /* n_vocab, kept zero */
	uint32_t *breaker;    /* bitmap, NULL without breakers */
};

struct exl_sampler *exl_sampler_create(const struct exl_sampler_params *p, int n_vocab,
				       const uint32_t *breaker, char *err, size_t errlen)
{
	struct exl_sampler *s;

	if (n_vocab <= 0) {
		snprintf(err, errlen, "sampler: vocabulary size %d", n_vocab);
		return NULL;
	}
	if (exl_sampler_params_check(p, n_vocab, err, errlen))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		goto oom;
	s->p = *p;
	s->n_vocab = n_vocab;
	s->mu = 2.0f * p->mirostat_tau;
	if (p->n_bias) {
		s->bias = malloc((size_t)p->n_bias * sizeof(*s->bias));
		if (!s->bias)
			goto oom;
		memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof(*s->bias));
	}
	s->p.bias = s->bias;
	s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
	s->cand_tmp = malloc((size_t)n_vocab * sizeof(*s->cand_tmp));
	s->keys = malloc(2 * (size_t)n_vocab * sizeof(*s->keys));
	s->pen_scratch = calloc(2 * (size_t)n_vocab, sizeof(*s->pen_scratch));
	s->dry_scratch = calloc((size_t)n_vocab, sizeof(*s->dry_scratch));
	if (!s->cand || !s->cand_tmp || !s->keys || !s->pen_scratch || !s->dry_scratch)
		goto oom;
	if (breaker && p->dry_mult > 0.0f) {
		size_t words = ((size_t)n_vocab + 31) / 32;

		s->breaker = malloc(words * sizeof(*s->breaker));
		if (!s->breaker)
			goto oom;
		memcpy(s->breaker, breaker, words * sizeof(*s->breaker));
	}
	return s;
oom:
	snprintf(err, errlen, "out of memory for the sampler");
	exl_sampler_free(s);
	return NULL;
}

void exl_sampler_free(struct exl_sampler *s)
{
	if (!s)
		return;
	free(s->bias);
	free(s->cand);
	free(s->cand_tmp);
	free(s->keys);
	free(s->pen_scratch);
	free(s->dry_scratch);
	free(s->breaker);
	free(s);
}

float exl_sampler_mirostat_mu(const struct exl_sampler *s)
{
	return s->mu;
}

void exl_sampler_set_mirostat_mu(struct exl_sampler *s, float mu)
{
	s->mu = mu;
}

static int32_t argmax(const float *logits, int n)
{
	int32_t best = -1;
	float bv = -INFINITY;

	for (int i = 0; i < n; i++) {
		if (logits[i] > bv) {
			bv = logits[i];
			best = i;
		}
	}
	return best;
}

int32_t exl_sampler_sample(struct exl_sampler *s, float *logits, const int32_t *hist,
			   int n_hist, struct exl_rng *rng)
{
	const struct exl_sampler_params *p = &s->p;
	struct exl_cands cs = { s->cand, s->cand_tmp, 0, 0, s->keys };

	exl_sample_bias(logits, s->n_vocab, p->bias, p->n_bias);
	exl_sample_no_repeat_ngram(logits, s->n_vocab, hist, n_hist, p->no_repeat_ngram);
	exl_sample_penalties(logits, s->n_vocab, hist, n_hist, p->rep_pen, p->rep_range,
			     p->rep_decay, p->freq_pen, p->pres_pen, s->pen_scratch);
	exl_sample_dry(logits, s->n_vocab, hist, n_hist, s->breaker, p->dry_mult, p->dry_base,
		       p->dry_allowed_len, p->dry_range, s->dry_scratch);

	if (exl_sampler_params_greedy(p))
		return argmax(logits, s->n_vocab);

	/* top_k first: the k best logits are the same set at any temperature,
	 * and the later steps renormalise over them.  Mirostat does its own
	 * truncation from the full distribution, as llama.cpp's does. */
	if (p->mirostat == 2 || exl_cands_best_of_logits(&cs, logits, s->n_vocab, p->top_k) < 0) {
		exl_cands_from_logits(&cs, logits, s->n_vocab);
		if (cs.n == 0)
			return -1;
		if (p->mirostat != 2)
			exl_cands_keep_best(&cs, p->top_k);
	}
	exl_cands_probs(&cs);
	if (!p->temperature_last)
		exl_cands_temperature(&cs, p->temperature);
	if (p->mirostat == 2) {
		if (p->temperature_last)
			exl_cands_temperature(&cs, p->temperature);
		return exl_cands_mirostat_v2(&cs, p->mirostat_tau, p->mirostat_eta, &s->mu, rng);
	}
	exl_cands_top_p(&cs, p->top_p);
	exl_cands_min_p(&cs, p->min_p);
	exl_cands_typical(&cs, p->typical);
	exl_cands_tfs(&cs, p->tfs);
	exl_cands_top_a(&cs, p->top_a);
	exl_cands_xtc(&cs, p->xtc_prob, p->xtc_thresh, rng);
	if (p->temperature_last)
		exl_cands_temperature(&cs, p->temperature);
	return cs.c[exl_cands_draw(&cs, rng)].id;
}

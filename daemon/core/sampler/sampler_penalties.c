/* The logit-space steps of sampling that look at the token history: token
 * bias, no-repeat n-gram, repetition / frequency / presence penalty, DRY.
 * Formulas: docs/sampling.md. */
#include <math.h>
#include <string.h>

#include "daemon/core/sampler/sampler.h"

/* Keeps a penalised logit finite: -inf means "masked" to the rest of the
 * sampler. */
#define PENALTY_FLOOR (-1e30f)

void exl_sample_bias(float *logits, int n_vocab, const struct exl_token_bias *b, int nb)
{
	for (int i = 0; i < nb; i++)
		if (b[i].id >= 0 && b[i].id < n_vocab)
			logits[b[i].id] += b[i].bias;
}

void exl_sample_no_repeat_ngram(float *logits, int n_vocab, const int32_t *hist, int n_hist, int n)
{
	if (n <= 0 || n_hist < n - 1)
		return;
	/* The candidate would complete hist[n_hist-n+1 .. n_hist) + candidate. */
	const int32_t *tail = hist + n_hist - (n - 1);

	for (int i = 0; i + n <= n_hist; i++) {
		if (memcmp(hist + i, tail, (size_t)(n - 1) * sizeof(*hist)))
			continue;
		int32_t t = hist[i + n - 1];

		if (t >= 0 && t < n_vocab)
			logits[t] = -INFINITY;
	}
}

/* Strength of the penalty for the token k positions back from the newest
 * (k = 0 is the newest): 1 inside the range, fading linearly over decay. */
static float window_weight(int k, int range, int decay)
{
	if (range < 0 || k < range)
		return 1.0f;
	return 1.0f - (float)(k - range + 1) / (float)(decay + 1);
}

void exl_sample_penalties(float *logits, int n_vocab, const int32_t *hist, int n_hist,
			  float rep_pen, int range, int decay, float freq, float pres,
			  float *scratch)
{
	float *wmax = scratch;
	float *wsum = scratch + n_vocab;
	int window;

	if (rep_pen == 1.0f && freq == 0.0f && pres == 0.0f)
		return;
	if (range < 0)
		window = n_hist;
	else
		window = range + decay < n_hist ? range + decay : n_hist;
	if (range == 0 && decay == 0)
		return;

	for (int k = 0; k < window; k++) {
		int32_t t = hist[n_hist - 1 - k];
		float w = window_weight(k, range, decay);

		if (t < 0 || t >= n_vocab)
			continue;
		if (w > wmax[t])
			wmax[t] = w;
		wsum[t] += w;
	}
	for (int k = 0; k < window; k++) {
		int32_t t = hist[n_hist - 1 - k];

		if (t < 0 || t >= n_vocab || wmax[t] == 0.0f)
			continue;
		float l = logits[t];

		if (l != -INFINITY) {
			float p = 1.0f + (rep_pen - 1.0f) * wmax[t];

			l = l > 0.0f ? l / p : l * p;
			l -= freq * wsum[t] + pres * wmax[t];
			logits[t] = l < PENALTY_FLOOR ? PENALTY_FLOOR : l;
		}
		wmax[t] = 0.0f;
		wsum[t] = 0.0f;
	}
}

static bool is_breaker(const uint32_t *breaker, int n_vocab, int32_t t)
{
	if (!breaker || t < 0 || t >= n_vocab)
		return false;
	return (breaker[t >> 5] >> (t & 31)) & 1u;
}

void exl_sample_dry(float *logits, int n_vocab, const int32_t *hist, int n_hist,
		    const uint32_t *breaker, float mult, float base, int allowed_len, int range,
		    int32_t *scratch)
{
	int start = 0;

	if (mult <= 0.0f || n_hist < 2)
		return;
	if (range > 0 && n_hist > range)
		start = n_hist - range;
	int last = n_hist - 1;

	if (is_breaker(breaker, n_vocab, hist[last]))
		return;

	/* Every earlier occurrence of the newest token ends a run that the
	 * context's tail repeats; the token that followed it would extend the
	 * repetition by one. */
	for (int idx = last - 1; idx >= start; idx--) {
		if (hist[idx] != hist[last])
			continue;
		int32_t next = hist[idx + 1];

		if (next < 0 || next >= n_vocab)
			continue;
		int len = 0;

		while (len < EXL_DRY_MAX_MATCH && idx - len >= start) {
			int32_t a = hist[idx - len];

			if (a != hist[last - len] || is_breaker(breaker, n_vocab, a))
				break;
			len++;
		}
		if (len > scratch[next])
			scratch[next] = len;
	}

	for (int idx = last - 1; idx >= start; idx--) {
		if (hist[idx] != hist[last])
			continue;
		int32_t next = hist[idx + 1];

		if (next < 0 || next >= n_vocab || scratch[next] == 0)
			continue;
		int len = scratch[next];

		scratch[next] = 0;
		if (len < allowed_len || logits[next] == -INFINITY)
			continue;
		double pen = (double)mult * pow((double)base, (double)(len - allowed_len));
		double l = (double)logits[next] - pen;

		logits[next] = l < PENALTY_FLOOR ? PENALTY_FLOOR : (float)l;
	}
}

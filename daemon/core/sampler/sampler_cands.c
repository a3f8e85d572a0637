/* The truncation steps over candidate tokens.
 *
 * Candidates are sorted lazily: c[0..n_sorted) holds the best n_sorted
 * (logit descending, ties to the lower id) in order and every one of them
 * ranks above the rest, which stay unsorted.  A step sorts only as far as
 * it looks, so with a large vocabulary a step like top_p or the final draw
 * usually sorts a few dozen tokens, not the whole vocabulary.  The result is
 * the same as with a full sort.  Formulas: docs/sampling.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/sampler/sampler.h"

static inline bool better(const struct exl_cand *a, const struct exl_cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
	const struct exl_cand *a = pa, *b = pb;

	return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Moves the k best of c[0..n) to the front (in any order). */
static void select_best(struct exl_cand *c, int n, int k)
{
	int lo = 0, hi = n - 1;

	while (lo < hi) {
		struct exl_cand pivot = c[lo + (hi - lo) / 2];
		int i = lo, j = hi;

		while (i <= j) {
			while (better(&c[i], &pivot))
				i++;
			while (better(&pivot, &c[j]))
				j--;
			if (i <= j) {
				struct exl_cand t = c[i];

				c[i] = c[j];
				c[j] = t;
				i++;
				j--;
			}
		}
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			break;
	}
}

/* Beyond this many, sorting uses a radix sort of everything unsorted:
 * linear in the vocabulary, where a flat distribution would otherwise make
 * top_p or the draw compare-sort most of it. */
#define RADIX_MIN 2048
#define RADIX_BITS 11

/* Ascending order of the result is descending order of f. */
static uint32_t desc_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return ~u;
}

/* Sorts c[s..n) completely: keys (logit descending, then id) in
 * cs->keys, candidates parked by id in cs->tmp. */
static void radix_sort_rest(struct exl_cands *cs, int s)
{
	int n = cs->n - s;
	uint64_t *a = cs->keys, *b = cs->keys + n;
	struct exl_cand *c = cs->c + s;
	uint32_t count[1u << RADIX_BITS];

	for (int i = 0; i < n; i++) {
		a[i] = ((uint64_t)desc_bits(c[i].logit) << 32) | (uint32_t)c[i].id;
		cs->tmp[c[i].id] = c[i];
	}
	for (int shift = 0; shift < 64; shift += RADIX_BITS) {
		uint64_t mask = (1u << RADIX_BITS) - 1;
		uint32_t sum = 0;
		bool one = false;

		memset(count, 0, sizeof(count));
		for (int i = 0; i < n; i++)
			count[(a[i] >> shift) & mask]++;
		for (size_t d = 0; d <= mask; d++) {
			uint32_t k = count[d];

			if (k == (uint32_t)n)
				one = true;
			count[d] = sum;
			sum += k;
		}
		if (one)
			continue; /* every key has this digit: nothing moves */
		for (int i = 0; i < n; i++)
			b[count[(a[i] >> shift) & mask]++] = a[i];
		uint64_t *t = a;

		a = b;
		b = t;
	}
	for (int i = 0; i < n; i++)
		c[i] = cs->tmp[(uint32_t)a[i]];
}

/* Up to this many best candidates are picked with a heap in one pass. */
#define HEAP_MAX 256

static void heap_down(struct exl_cand *h, int32_t *hi, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, w = i;

		/* the root is the worst kept */
		if (l < n && better(&h[w], &h[l]))
			w = l;
		if (r < n && better(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		struct exl_cand t = h[i];
		int32_t ti = hi[i];

		h[i] = h[w];
		hi[i] = hi[w];
		h[w] = t;
		hi[w] = ti;
		i = w;
	}
}

static int int_cmp(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* Adds x (at index i) to the heap h of the hn (< k) kept so far. */
static void heap_push(struct exl_cand *h, int32_t *hi, int hn, struct exl_cand x, int32_t i)
{
	int j = hn;

	h[j] = x;
	hi[j] = i;
	while (j > 0 && better(&h[(j - 1) / 2], &h[j])) {
		struct exl_cand t = h[j];
		int32_t ti = hi[j];
		int up = (j - 1) / 2;

		h[j] = h[up];
		hi[j] = hi[up];
		h[up] = t;
		hi[up] = ti;
		j = up;
	}
}

/* Makes c[0..k) the best k of c[0..n), in order (k <= HEAP_MAX). */
static void heap_select(struct exl_cand *c, int n, int k)
{
	struct exl_cand h[HEAP_MAX];
	int32_t hi[HEAP_MAX];
	int hn = 0;

	for (int i = 0; i < n; i++) {
		if (hn < k) {
			heap_push(h, hi, hn++, c[i], i);
			continue;
		}
		if (!better(&c[i], &h[0]))
			continue;
		h[0] = c[i];
		hi[0] = i;
		heap_down(h, hi, hn, 0);
	}
	/* Move the others to the back (from the end, so nothing unread is
	 * overwritten), then put the chosen ones, sorted, in front. */
	qsort(hi, (size_t)k, sizeof(*hi), int_cmp);
	int w = n - 1, ci = k - 1;

	for (int i = n - 1; i >= 0; i--) {
		if (ci >= 0 && hi[ci] == i) {
			ci--;
			continue;
		}
		c[w--] = c[i];
	}
	qsort(h, (size_t)k, sizeof(*h), cand_cmp);
	memcpy(c, h, (size_t)k * sizeof(*c));
}

/* Makes c[0..m) the best m, in order. */
static void sort_prefix(struct exl_cands *cs, int m)
{
	int s = cs->n_sorted;

	if (m > cs->n)
		m = cs->n;
	if (m <= s)
		return;
	if (m - s <= HEAP_MAX && m < cs->n) {
		heap_select(cs->c + s, cs->n - s, m - s);
		cs->n_sorted = m;
		return;
	}
	if (cs->keys && m - s > RADIX_MIN) {
		radix_sort_rest(cs, s);
		cs->n_sorted = cs->n;
		return;
	}
	if (m < cs->n)
		select_best(cs->c + s, cs->n - s, m - s);
	qsort(cs->c + s, (size_t)(m - s), sizeof(*cs->c), cand_cmp);
	cs->n_sorted = m;
}

void exl_cands_from_logits(struct exl_cands *cs, const float *logits, int n_vocab)
{
	int n = 0;

	for (int i = 0; i < n_vocab; i++) {
		if (!(logits[i] > -INFINITY))
			continue;
		cs->c[n].id = i;
		cs->c[n].logit = logits[i];
		cs->c[n].p = 0.0f;
		n++;
	}
	cs->n = n;
	cs->n_sorted = 0;
}

/* Logits go through in runs of this many: a run with none above the
 * worst kept (nearly all, once the heap is full) costs one vectorizable
 * pass of compares. */
#define BEST_RUN 16

int exl_cands_best_of_logits(struct exl_cands *cs, const float *logits, int n_vocab, int k)
{
	struct exl_cand h[HEAP_MAX];
	int32_t hi[HEAP_MAX];
	int hn = 0, valid = 0, i = 0;

	if (k <= 0 || k > HEAP_MAX)
		return -1;
	while (i < n_vocab) {
		int end = i + BEST_RUN <= n_vocab ? i + BEST_RUN : n_vocab;

		/* once full, a logit that only ties the worst kept loses to it
		 * (a higher id), so ">" is the whole test */
		if (hn == k && end - i == BEST_RUN) {
			const float thr = h[0].logit;
			int hit = 0, v = 0;

			for (int j = 0; j < BEST_RUN; j++) {
				hit |= logits[i + j] > thr;
				v += logits[i + j] > -INFINITY;
			}
			if (!hit) {
				valid += v;
				i = end;
				continue;
			}
		}
		for (; i < end; i++) {
			struct exl_cand x = { .id = i, .logit = logits[i], .p = 0.0f };

			if (!(x.logit > -INFINITY))
				continue;
			valid++;
			if (hn < k) {
				heap_push(h, hi, hn++, x, i);
			} else if (better(&x, &h[0])) {
				h[0] = x;
				hi[0] = i;
				heap_down(h, hi, hn, 0);
			}
		}
	}
	/* keep_best keeps every candidate, unsorted, when k does not cut */
	if (valid <= k)
		return -1;
	qsort(h, (size_t)k, sizeof(*h), cand_cmp);
	memcpy(cs->c, h, (size_t)k * sizeof(*h));
	cs->n = k;
	cs->n_sorted = k;
	return 0;
}

static void scale(struct exl_cands *cs, double sum)
{
	if (sum <= 0.0)
		return;
	float inv = (float)(1.0 / sum);

	for (int i = 0; i < cs->n; i++)
		cs->c[i].p *= inv;
}

static void normalize(struct exl_cands *cs)
{
	double sum = 0.0;

	for (int i = 0; i < cs->n; i++)
		sum += cs->c[i].p;
	scale(cs, sum);
}

static void probs_from_logits(struct exl_cands *cs)
{
	float max = -INFINITY;

	if (cs->n == 0)
		return;
	if (cs->n_sorted > 0) {
		max = cs->c[0].logit;
	} else {
		for (int i = 0; i < cs->n; i++)
			if (cs->c[i].logit > max)
				max = cs->c[i].logit;
	}
	double sum = 0.0;

	for (int i = 0; i < cs->n; i++) {
		cs->c[i].p = expf(cs->c[i].logit - max);
		sum += cs->c[i].p;
	}
	scale(cs, sum);
}

void exl_cands_probs(struct exl_cands *cs)
{
	probs_from_logits(cs);
}

void exl_cands_softmax(struct exl_cands *cs)
{
	sort_prefix(cs, cs->n);
	probs_from_logits(cs);
}

void exl_cands_temperature(struct exl_cands *cs, float t)
{
	if (t <= 0.0f || t == 1.0f)
		return;
	for (int i = 0; i < cs->n; i++)
		cs->c[i].logit /= t;
	probs_from_logits(cs);
}

/* The first n (< cs->n) candidates, the best n once sorted that far. */
static void cut(struct exl_cands *cs, int n)
{
	sort_prefix(cs, n);
	cs->n = n;
	/* an earlier step may have sorted past the cut */
	if (cs->n_sorted > n)
		cs->n_sorted = n;
}

/* Keeps the best n (at least one). */
static void keep(struct exl_cands *cs, int n)
{
	if (n < 1)
		n = 1;
	if (n >= cs->n)
		return;
	cut(cs, n);
	normalize(cs);
}

/* Keeps the candidates with p >= floor (at least the best one), in order.
 * The ones kept are always the best of the list, so the sorted prefix
 * stays a sorted prefix. */
static void keep_above(struct exl_cands *cs, float floor)
{
	int w = 0, sorted = 0;

	sort_prefix(cs, 1);
	for (int i = 0; i < cs->n; i++) {
		if (i > 0 && cs->c[i].p < floor)
			continue;
		if (i < cs->n_sorted)
			sorted++;
		cs->c[w++] = cs->c[i];
	}
	if (w == cs->n)
		return;
	cs->n = w;
	cs->n_sorted = sorted;
	normalize(cs);
}

void exl_cands_top_k(struct exl_cands *cs, int k)
{
	if (k > 0)
		keep(cs, k);
}

void exl_cands_top_p(struct exl_cands *cs, float p)
{
	double cum = 0.0;
	int i = 0, m = 64;

	if (p >= 1.0f)
		return;
	for (;;) {
		sort_prefix(cs, m);
		for (; i < cs->n_sorted; i++) {
			cum += cs->c[i].p;
			if (cum >= p) {
				keep(cs, i + 1);
				return;
			}
		}
		if (cs->n_sorted >= cs->n)
			return;
		m = cs->n;
	}
}

void exl_cands_min_p(struct exl_cands *cs, float p)
{
	if (p <= 0.0f || cs->n == 0)
		return;
	sort_prefix(cs, 1);
	keep_above(cs, p * cs->c[0].p);
}

static int score_cmp(const void *pa, const void *pb)
{
	const struct exl_cand *a = pa, *b = pb;

	/* tmp entries: logit holds the score, id the index in cs->c */
	if (a->logit != b->logit)
		return a->logit < b->logit ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

void exl_cands_typical(struct exl_cands *cs, float p)
{
	double h = 0.0, cum = 0.0;
	int n, w = 0;

	if (p <= 0.0f || p >= 1.0f || cs->n < 2)
		return;
	sort_prefix(cs, cs->n);
	for (int i = 0; i < cs->n; i++)
		if (cs->c[i].p > 0.0f)
			h -= cs->c[i].p * log(cs->c[i].p);
	/* Rank by how far each token's surprise lies from the entropy. */
	for (int i = 0; i < cs->n; i++) {
		double surprise = cs->c[i].p > 0.0f ? -log(cs->c[i].p) : INFINITY;

		cs->tmp[i].id = i;
		cs->tmp[i].logit = (float)fabs(surprise - h);
		cs->tmp[i].p = cs->c[i].p;
	}
	qsort(cs->tmp, (size_t)cs->n, sizeof(*cs->tmp), score_cmp);
	for (n = 0; n < cs->n; n++) {
		cum += cs->tmp[n].p;
		if (cum >= p)
			break;
	}
	n = n + 1 < cs->n ? n + 1 : cs->n;
	/* Mark the kept ones and compact, keeping the order by p. */
	for (int i = 0; i < n; i++)
		cs->c[cs->tmp[i].id].id = -cs->c[cs->tmp[i].id].id - 1;
	for (int i = 0; i < cs->n; i++) {
		if (cs->c[i].id >= 0)
			continue;
		cs->c[w] = cs->c[i];
		cs->c[w].id = -cs->c[w].id - 1;
		w++;
	}
	cs->n = w;
	cs->n_sorted = w;
	normalize(cs);
}

void exl_cands_tfs(struct exl_cands *cs, float z)
{
	int n = cs->n;

	if (z <= 0.0f || z >= 1.0f || n < 3)
		return;
	sort_prefix(cs, n);
	/* Second differences of the sorted probabilities, normalised; keep
	 * tokens until their cumulative weight passes z. */
	double sum = 0.0;

	for (int i = 0; i + 2 < n; i++) {
		double d1a = cs->c[i].p - cs->c[i + 1].p;
		double d1b = cs->c[i + 1].p - cs->c[i + 2].p;

		sum += fabs(d1a - d1b);
	}
	if (sum <= 0.0)
		return;
	double cum = 0.0;
	int kept = n;

	for (int i = 0; i + 2 < n; i++) {
		double d1a = cs->c[i].p - cs->c[i + 1].p;
		double d1b = cs->c[i + 1].p - cs->c[i + 2].p;

		cum += fabs(d1a - d1b) / sum;
		if (cum > z) {
			kept = i + 1;
			break;
		}
	}
	keep(cs, kept);
}

void exl_cands_top_a(struct exl_cands *cs, float a)
{
	if (a <= 0.0f || cs->n == 0)
		return;
	sort_prefix(cs, 1);
	keep_above(cs, a * cs->c[0].p * cs->c[0].p);
}

void exl_cands_xtc(struct exl_cands *cs, float prob, float thresh, struct exl_rng *rng)
{
	int above = 0;

	if (prob <= 0.0f)
		return;
	/* The draw happens whenever XTC is on, so the random stream does not
	 * depend on the distribution. */
	if (exl_rng_uniform(rng) >= prob)
		return;
	/* At most 1 / thresh tokens can reach thresh. */
	sort_prefix(cs, thresh > 0.0f && thresh * (float)cs->n > 1.0f ? (int)(1.0f / thresh) + 2 : cs->n);
	while (above < cs->n_sorted && cs->c[above].p >= thresh)
		above++;
	if (above < 2)
		return;
	/* Drop every "top choice" but the least likely of them. */
	memmove(cs->c, cs->c + above - 1, (size_t)(cs->n - above + 1) * sizeof(*cs->c));
	cs->n -= above - 1;
	cs->n_sorted -= above - 1;
	normalize(cs);
}

int exl_cands_draw(struct exl_cands *cs, struct exl_rng *rng)
{
	double sum = 0.0, cum = 0.0;
	int i = 0, m = 64;

	for (int k = 0; k < cs->n; k++)
		sum += cs->c[k].p;
	double r = exl_rng_uniform(rng) * sum;

	/* In order of p, sorting only as far as the draw reaches. */
	for (;;) {
		sort_prefix(cs, m);
		for (; i < cs->n_sorted; i++) {
			cum += cs->c[i].p;
			if (r < cum)
				return i;
		}
		if (cs->n_sorted >= cs->n)
			return cs->n - 1;
		m = cs->n;
	}
}

int32_t exl_cands_mirostat_v2(struct exl_cands *cs, float tau, float eta, float *mu,
			      struct exl_rng *rng)
{
	if (cs->n == 0)
		return -1;
	/* Surprise -log2 p <= mu  <=>  p >= 2^-mu */
	keep_above(cs, exp2f(-*mu));
	int i = exl_cands_draw(cs, rng);
	float surprise = -log2f(cs->c[i].p);

	*mu -= eta * (surprise - tau);
	return cs->c[i].id;
}

/* The k best by logit, sorted (top_k without a full sort). */
void exl_cands_keep_best(struct exl_cands *cs, int k)
{
	if (k > 0 && k < cs->n)
		cut(cs, k);
}

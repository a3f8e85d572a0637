/* Beam search over the batched engine.
 *
 * A beam is a token sequence with its summed log-probability and its own
 * KV sequence; beams of one job share their common prefix's pages, the
 * prompt's included (exl_kv_seq_fork: copy on write, so a beam writing
 * into a page its siblings share gets its own copy first).  Each step the
 * engine feeds every live beam's last token in the same pass as the other
 * jobs; here each beam's row becomes the log-softmax of the masked logits
 * (filter, token healing, min_new_tokens, ignore_eos: what a sampled job
 * masks) and its 2 x width best tokens become candidates.  Candidates are
 * taken best first until width of them live on:
 *
 *   - a candidate is judged by the job itself, set to the beam's tokens
 *     and fed the candidate token through accept() (the cursor,
 *     generator_step.c): a banned string makes it rewind, and the
 *     candidate is dropped; a stop token, a stop string, the filter's end
 *     or max_new_tokens ends it, and it becomes a finished hypothesis when
 *     it ranks among the best width candidates of the step (as
 *     transformers' beam search does);
 *   - the search ends when width hypotheses are finished (early stopping)
 *     or no beam lives on; the output is the hypothesis with the best
 *     summed log-probability / length^length_penalty, replayed through
 *     the job so that its text, stop string and reason are exactly what a
 *     sampled job producing those tokens reports.
 *
 * Nothing streams before the end (hold_output): a beam's tokens may still
 * be dropped.  One beam gives greedy's output (argmax each step, ended
 * where greedy ends) but for banned strings, which make a sampled job
 * rewind to where the string began while a beam only drops the token that
 * completes it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/generator_internal.h"

struct beam {
	int32_t *toks;     /* generated tokens */
	int n;
	int cap;
	double score;      /* summed log-probability */
	struct exl_kv_seq kv;
	int row;           /* its logits row in this step's pass */
	int parent;        /* next beams: the live beam it extends */
};

struct hyp {
	int32_t *toks;
	int n;
	double score;
	double rank;       /* score / n^length_penalty */
	enum exl_stop_reason reason;
};

struct cand {
	int beam;
	int32_t tok;
	double score;
};

struct exl_beam_search {
	int width;
	float length_penalty;
	bool started;
	struct beam *live;
	int n_live;
	struct beam *next;
	int n_next;
	struct hyp *done;
	int n_done;
	int cap_done;
	struct cand *cands;
	int n_cands;
	int per_beam;      /* candidates a beam offers: 2 x width */
};

static void beam_free_toks(struct beam *b, int n)
{
	for (int i = 0; i < n; i++) {
		free(b[i].toks);
		free(b[i].kv.pages);
		free(b[i].kv.lpages);
		free(b[i].kv.tokens);
	}
}

void exl_beam_free(struct exl_beam_search *b)
{
	if (!b)
		return;
	beam_free_toks(b->live, b->width);
	beam_free_toks(b->next, b->width);
	for (int i = 0; i < b->n_done; i++)
		free(b->done[i].toks);
	free(b->live);
	free(b->next);
	free(b->done);
	free(b->cands);
	free(b);
}

int exl_beam_create(struct exl_job *job, int width, float length_penalty, char *err,
		    size_t errlen)
{
	struct exl_beam_search *b = calloc(1, sizeof(*b));

	if (!b)
		goto oom;
	b->width = width;
	b->length_penalty = length_penalty;
	b->per_beam = 2 * width;
	b->live = calloc((size_t)width, sizeof(*b->live));
	b->next = calloc((size_t)width, sizeof(*b->next));
	b->cands = malloc((size_t)width * (size_t)b->per_beam * sizeof(*b->cands));
	if (!b->live || !b->next || !b->cands)
		goto oom;
	for (int i = 0; i < width; i++) {
		exl_kv_seq_init(&b->live[i].kv);
		exl_kv_seq_init(&b->next[i].kv);
	}
	job->beam = b;
	job->num_beams = width;
	job->hold_output = true;
	return 0;
oom:
	exl_beam_free(b);
	snprintf(err, errlen, "out of memory for %d beams", width);
	return -1;
}

void exl_beam_release_kv(struct exl_beam_search *b, struct exl_kvcache *kv)
{
	for (int i = 0; i < b->n_live; i++)
		exl_kv_seq_release(kv, &b->live[i].kv);
}

bool exl_beam_started(const struct exl_job *job)
{
	return job->beam && job->beam->started;
}

int exl_beam_n_live(const struct exl_job *job)
{
	return job->beam->n_live;
}

const struct exl_kv_seq *exl_beam_live_kv(const struct exl_job *job, int i)
{
	if (!job->beam || i < 0 || i >= job->beam->n_live)
		return NULL;
	return &job->beam->live[i].kv;
}

int exl_beam_width(const struct exl_job *job)
{
	return job->beam ? job->beam->width : 0;
}

struct exl_kv_seq *exl_beam_kv(struct exl_job *job, int i, int32_t *next)
{
	struct beam *b = &job->beam->live[i];
	const struct exl_gen_seq *q = &job->seq[0];

	*next = b->n ? b->toks[b->n - 1] : q->tokens[q->prompt_len - 1];
	return &b->kv;
}

void exl_beam_set_row(struct exl_job *job, int i, int row)
{
	job->beam->live[i].row = row;
}

static int pages_for(int64_t positions, int page_size)
{
	return (int)((positions + page_size - 1) / page_size);
}

int64_t exl_beam_pages(const struct exl_job *job, int g, int page_size)
{
	/* the prompt's pages, shared, and each beam's own: its tokens' pages
	 * and the prompt's last page, copied when written */
	return pages_for(job->seq[0].prompt_len, page_size) +
	       (int64_t)job->beam->width * (pages_for(g, page_size) + 1);
}

/* Counts p once in scratch. */
static int64_t mark(int32_t *scratch, const struct exl_kv_seq *s)
{
	int64_t n = 0;

	for (int k = s->n_dropped; k < s->n_pages; k++)
		if (!scratch[s->pages[k]]++)
			n++;
	return n;
}

static void unmark(int32_t *scratch, const struct exl_kv_seq *s)
{
	for (int k = s->n_dropped; k < s->n_pages; k++)
		scratch[s->pages[k]] = 0;
}

int64_t exl_beam_outstanding(const struct exl_job *job, const struct exl_kvcache *kv,
			     int gen_limit, int32_t *scratch)
{
	const struct exl_beam_search *b = job->beam;
	int64_t held = mark(scratch, &job->seq[0].kv), bound;

	for (int i = 0; i < b->n_live; i++)
		held += mark(scratch, &b->live[i].kv);
	unmark(scratch, &job->seq[0].kv);
	for (int i = 0; i < b->n_live; i++)
		unmark(scratch, &b->live[i].kv);
	bound = exl_beam_pages(job, gen_limit, exl_kvcache_page_size(kv));
	return bound > held ? bound - held : 0;
}

/* ---- one step ---- */

static int push_tok(struct beam *b, const int32_t *toks, int n, int32_t t)
{
	if (n + 1 > b->cap) {
		int cap = b->cap * 2 > n + 1 ? b->cap * 2 : n + 16;
		int32_t *p = realloc(b->toks, (size_t)cap * sizeof(*p));

		if (!p)
			return -1;
		b->toks = p;
		b->cap = cap;
	}
	if (n && b->toks != toks)
		memcpy(b->toks, toks, (size_t)n * sizeof(*toks));
	b->toks[n] = t;
	b->n = n + 1;
	return 0;
}

static int add_hyp(struct exl_beam_search *bs, const int32_t *toks, int n, int32_t t,
		   double score, enum exl_stop_reason reason)
{
	int len = n + (t >= 0);

	if (bs->n_done == bs->cap_done) {
		int cap = bs->cap_done * 2 + 4;
		struct hyp *d = realloc(bs->done, (size_t)cap * sizeof(*d));

		if (!d)
			return -1;
		bs->done = d;
		bs->cap_done = cap;
	}
	struct hyp *h = &bs->done[bs->n_done];

	h->toks = malloc((size_t)(len ? len : 1) * sizeof(*h->toks));
	if (!h->toks)
		return -1;
	if (n)
		memcpy(h->toks, toks, (size_t)n * sizeof(*toks));
	if (t >= 0)
		h->toks[n] = t;
	h->n = len;
	h->score = score;
	/* an empty hypothesis (the filter complete at once) ranks by its
	 * score alone */
	h->rank = len ? score / pow((double)len, (double)bs->length_penalty) : score;
	h->reason = reason;
	bs->n_done++;
	return 0;
}

/* w (n finite-or--inf values) to log-probabilities in place; false when
 * no value is finite. */
static bool log_softmax(float *w, int n)
{
	float max = -INFINITY;
	double sum = 0.0;

	for (int i = 0; i < n; i++)
		if (w[i] > max)
			max = w[i];
	if (max == -INFINITY)
		return false;
	for (int i = 0; i < n; i++)
		if (w[i] != -INFINITY)
			sum += exp((double)w[i] - max);
	double lse = (double)max + log(sum);

	for (int i = 0; i < n; i++)
		if (w[i] != -INFINITY)
			w[i] = (float)((double)w[i] - lse);
	return true;
}

/* Beam bi's best per_beam tokens of the log-probabilities in w, as
 * candidates.  Ties keep the lower id first. */
static void add_cands(struct exl_beam_search *bs, int bi, const float *w, int n, double base)
{
	struct cand *c = bs->cands + bs->n_cands;
	int k = bs->per_beam, have = 0;

	for (int i = 0; i < n; i++) {
		float v = w[i];

		if (v == -INFINITY || (have == k && !(v > w[c[k - 1].tok])))
			continue;
		int j = have < k ? have++ : k - 1;

		while (j > 0 && v > w[c[j - 1].tok]) {
			c[j] = c[j - 1];
			j--;
		}
		c[j].beam = bi;
		c[j].tok = i;
	}
	for (int j = 0; j < have; j++)
		c[j].score = base + (double)w[c[j].tok];
	bs->n_cands += have;
}

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (x->beam != y->beam)
		return x->beam < y->beam ? -1 : 1;
	return (x->tok > y->tok) - (x->tok < y->tok);
}

static void fail_oom(struct exl_job *job)
{
	exl_job_cursor_truncate(job, job->n_gen);
	exl_job_end(job, EXL_STOP_ERROR, "out of memory for beam search");
}

/* The search is over: the job becomes its best hypothesis. */
static void conclude(struct exl_job *job, struct exl_kvcache *kv)
{
	struct exl_beam_search *bs = job->beam;
	const struct hyp *best = NULL;

	exl_beam_release_kv(bs, kv);
	bs->n_live = 0;
	for (int i = 0; i < bs->n_done; i++)
		if (!best || bs->done[i].rank > best->rank)
			best = &bs->done[i];
	if (!best) {
		exl_job_cursor_truncate(job, 0);
		exl_job_end(job, EXL_STOP_ERROR, "beam search: every beam was dropped (bans, the "
			    "filter and healing exclude every continuation)");
		return;
	}
	if (exl_job_cursor_set(job, best->toks, best->n))
		return; /* failed (and shows nothing): the error says why */
	if (job->reason == EXL_STOP_NONE)
		exl_job_end(job, best->reason, NULL);
	job->beam_score = best->score;
	job->hold_output = false;
	exl_job_cursor_release(job);
}

void exl_beam_step(struct exl_job *job, struct exl_kvcache *kv, const float *logits,
		   int n_vocab, int row0)
{
	struct exl_beam_search *bs = job->beam;
	int width = bs->width;

	if (job->reason != EXL_STOP_NONE)
		return;
	if (job->t_first == 0.0)
		job->t_first = exl_now_s();
	if (!bs->started) {
		/* The prompt's sequence becomes the first beam. */
		struct beam *b = &bs->live[0];

		b->kv = job->seq[0].kv;
		exl_kv_seq_init(&job->seq[0].kv);
		b->n = 0;
		b->score = 0.0;
		b->row = row0;
		bs->n_live = 1;
		bs->started = true;
	}
	/* No token may come at all: the empty hypothesis, as a sampled job
	 * ends before it samples.  (Past the first token, accepting a
	 * candidate ends it on these limits.) */
	if (job->max_new_tokens == 0 || job->gen_limit <= 0) {
		if (add_hyp(bs, NULL, 0, -1, 0.0, job->max_new_tokens == 0 ?
			    EXL_STOP_MAX_NEW_TOKENS : EXL_STOP_MAX_CONTEXT)) {
			fail_oom(job);
			return;
		}
		conclude(job, kv);
		return;
	}
	bs->n_cands = 0;
	for (int i = 0; i < bs->n_live; i++) {
		struct beam *b = &bs->live[i];
		int r;

		if (exl_job_cursor_set(job, b->toks, b->n))
			goto failed;
		r = exl_job_cursor_masked(job, logits + (size_t)b->row * (size_t)n_vocab, NULL);
		if (r < 0)
			goto failed;
		if (r > 0) {
			/* the filter ends this beam where it is */
			if (add_hyp(bs, b->toks, b->n, -1, b->score, job->reason)) {
				fail_oom(job);
				goto failed;
			}
			exl_job_cursor_truncate(job, b->n);
			continue;
		}
		if (log_softmax(job->work, n_vocab))
			add_cands(bs, i, job->work, n_vocab, b->score);
	}
	qsort(bs->cands, (size_t)bs->n_cands, sizeof(*bs->cands), cmp_cand);
	bs->n_next = 0;
	for (int i = 0; i < bs->n_cands && bs->n_next < width; i++) {
		const struct cand *c = &bs->cands[i];
		const struct beam *b = &bs->live[c->beam];

		if (exl_job_cursor_set(job, b->toks, b->n))
			goto failed;
		exl_job_cursor_accept(job, c->tok);
		if (job->reason == EXL_STOP_ERROR)
			goto failed;
		if (job->n_gen != b->n + 1) {
			/* a banned string: this continuation is never output */
		} else if (job->reason != EXL_STOP_NONE) {
			if (i < width && add_hyp(bs, b->toks, b->n, c->tok, c->score, job->reason)) {
				fail_oom(job);
				goto failed;
			}
		} else {
			struct beam *nb = &bs->next[bs->n_next];

			if (push_tok(nb, b->toks, b->n, c->tok)) {
				fail_oom(job);
				goto failed;
			}
			nb->score = c->score;
			nb->parent = c->beam;
			bs->n_next++;
		}
		if (exl_job_cursor_truncate(job, b->n))
			goto failed;
	}
	if (bs->n_done >= width || !bs->n_next) {
		conclude(job, kv);
		return;
	}
	/* The survivors take their parents' pages, shared; then the old
	 * beams let go of theirs. */
	for (int i = 0; i < bs->n_next; i++) {
		struct beam *nb = &bs->next[i];

		exl_kv_seq_release(kv, &nb->kv);
		if (exl_kv_seq_fork(kv, &nb->kv, &bs->live[nb->parent].kv)) {
			for (int k = 0; k < i; k++)
				exl_kv_seq_release(kv, &bs->next[k].kv);
			fail_oom(job);
			goto failed;
		}
	}
	for (int i = 0; i < bs->n_live; i++)
		exl_kv_seq_release(kv, &bs->live[i].kv);
	struct beam *t = bs->live;

	bs->live = bs->next;
	bs->next = t;
	bs->n_live = bs->n_next;
	bs->n_next = 0;
	return;
failed:
	/* The job ended with an error; it shows no hypothesis (hold_output
	 * stays), the error says why. */
	return;
}

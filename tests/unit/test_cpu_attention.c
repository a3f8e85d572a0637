/* The CPU backend's paged KV cache ops and its op table:
 *  - kv_store writes every token's K/V, rounded to F16 exactly as elem.h's
 *    exl_fp32_to_fp16, at ((page * n_kv_heads + h) * page_size + pos %
 *    page_size) * head_dim of page page_table[seq][pos / page_size];
 *  - attention against a naive attention (scores, full softmax and the
 *    weighted sum in double) over a contiguous copy of each sequence's K/V,
 *    |error| <= 2e-5 (values in [-1, 1]): five sequences written over
 *    several passes, a final batch mixing prefill chunks and decode tokens
 *    whose positions cross page boundaries (first and last slot of a page),
 *    a sequence sharing two full pages of another, page_size 16 and 256, GQA
 *    ratios 1, 2, 4, 3, 12, 7 and 5 (the kernels take heads in groups of 8,
 *    4, 2, 1; a rest of 3, 5, 6 or 7 padded with zero queries to 4 or 8),
 *    head_dim 64, 128 and 20 (SIMD tails), in every
 *    kernel variant this CPU runs, on one thread and on a pool of 3, and
 *    each variant against the scalar one (|difference| <= 1e-5);
 *  - decode steps (one token at the end of a window of 700..5000 positions)
 *    with few KV heads, so a pool splits the window into partitions and
 *    merges their softmax states, against the same naive attention; and
 *    the same positions' outputs bit-identical whether each is alone in
 *    its pass, one of 5 rows of its sequence, or beside short windows;
 *  - the op table (exl_backend_cpu_create): memory ops, set_batch/kv_store/
 *    attention/rope through it (bit-identical to the drivers), embed of
 *    F32/F16/BF16/Q8_0/Q4_0 tables (bit-identical to exl_dequantize_row),
 *    an F32 matmul, and bad input: each refused with a message, reported by
 *    the next download or sync, after which the backend works again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/backend_select.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/elem.h"
#include "kernels/formats/quant.h"
#include "tests/common/check.h"

#define EXL_TEST_RNG_SEED 0x853c49e6748fea9bull
#include "tests/common/rng.h"

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

static float f16_round(float x)
{
	return exl_fp16_to_fp32(exl_fp32_to_fp16(x));
}

/* ---- the scenario ----------------------------------------------------- */

#define N_SEQ 5

struct scenario {
	int page_size, n_heads, n_kv_heads, head_dim;
	int n_pages, max_pages;
	int32_t *table;        /* [N_SEQ][max_pages] */
	int len[N_SEQ];        /* positions each sequence has after the final pass */
	int hist[N_SEQ];       /* positions written before the final pass */
	/* the reference: each sequence's K/V as contiguous F16-rounded floats,
	 * [len][n_kv_heads][head_dim] */
	float *ref_k[N_SEQ];
	float *ref_v[N_SEQ];
	uint16_t *K, *V;       /* the paged pool */
	struct exl_kv_layer kv;
};

/* seq 3 shares the first two (full) pages of seq 0 */
#define SHARED_SEQ 3
#define SHARED_PAGES 2

static int pages_for(int len, int ps)
{
	return (len + ps - 1) / ps;
}

static void scenario_init(struct scenario *s, int ps, int n_heads, int n_kv_heads, int head_dim)
{
	memset(s, 0, sizeof(*s));
	s->page_size = ps;
	s->n_heads = n_heads;
	s->n_kv_heads = n_kv_heads;
	s->head_dim = head_dim;
	/* seq 0: 12 tokens crossing the boundary at 3 pages; seq 1: a fresh
	 * 5-token prompt; seq 2: decode into the first slot of page 1; seq 3:
	 * prefix of 2 pages shared with seq 0, then 3 history and 3 new
	 * positions of its own; seq 4: decode into the last slot of page 0 */
	s->hist[0] = 3 * ps - 6;
	s->len[0] = 3 * ps + 6;
	s->hist[1] = 0;
	s->len[1] = 5;
	s->hist[2] = ps;
	s->len[2] = ps + 1;
	s->hist[3] = 2 * ps + 3;
	s->len[3] = 2 * ps + 6;
	s->hist[4] = ps - 1;
	s->len[4] = ps;

	int need = 0;
	for (int i = 0; i < N_SEQ; i++) {
		int np = pages_for(s->len[i], ps) - (i == SHARED_SEQ ? SHARED_PAGES : 0);

		need += np;
		if (pages_for(s->len[i], ps) + 1 > s->max_pages)
			s->max_pages = pages_for(s->len[i], ps) + 1;
	}
	s->n_pages = need + 3; /* spare pages nobody uses */
	int *perm = xcalloc((size_t)s->n_pages, sizeof(int));
	for (int i = 0; i < s->n_pages; i++)
		perm[i] = i;
	for (int i = s->n_pages - 1; i > 0; i--) {
		int j = (int)(rnd_u32() % (uint32_t)(i + 1)), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	s->table = xcalloc((size_t)N_SEQ * s->max_pages, sizeof(int32_t));
	int next = 0;
	for (int i = 0; i < N_SEQ; i++) {
		int32_t *row = s->table + (size_t)i * s->max_pages;

		for (int p = 0; p < s->max_pages; p++)
			row[p] = -1;
		for (int p = 0; p < pages_for(s->len[i], ps); p++) {
			if (i == SHARED_SEQ && p < SHARED_PAGES)
				row[p] = s->table[p]; /* seq 0's page */
			else
				row[p] = perm[next++];
		}
	}
	free(perm);

	const size_t row_elems = (size_t)n_kv_heads * head_dim;
	for (int i = 0; i < N_SEQ; i++) {
		s->ref_k[i] = xcalloc((size_t)s->len[i] * row_elems, sizeof(float));
		s->ref_v[i] = xcalloc((size_t)s->len[i] * row_elems, sizeof(float));
	}
	const size_t pool_elems = (size_t)s->n_pages * n_kv_heads * ps * head_dim;
	s->K = xcalloc(pool_elems, sizeof(uint16_t));
	s->V = xcalloc(pool_elems, sizeof(uint16_t));
	s->kv.k = s->K;
	s->kv.v = s->V;
	s->kv.page_size = ps;
	s->kv.n_kv_heads = n_kv_heads;
	s->kv.head_dim = head_dim;
	s->kv.n_pages = s->n_pages;
}

static void scenario_free(struct scenario *s)
{
	for (int i = 0; i < N_SEQ; i++) {
		free(s->ref_k[i]);
		free(s->ref_v[i]);
	}
	free(s->table);
	free(s->K);
	free(s->V);
}

/* A batch: tokens (seq, pos) with random K/V/Q. */
struct batch {
	int n;
	int32_t *pos, *seq;
	float *k, *v, *q;
};

static void batch_add(struct batch *b, int seq, int pos)
{
	b->seq[b->n] = seq;
	b->pos[b->n] = pos;
	b->n++;
}

static void batch_alloc(struct batch *b, int cap)
{
	memset(b, 0, sizeof(*b));
	b->pos = xcalloc((size_t)cap, sizeof(int32_t));
	b->seq = xcalloc((size_t)cap, sizeof(int32_t));
}

/* Random K/V/Q for the batch's tokens, and the reference K/V they become
 * (sequence sharing: writes to seq 0's shared positions show in seq 3). */
static void batch_fill(struct scenario *s, struct batch *b)
{
	const size_t kvr = (size_t)s->n_kv_heads * s->head_dim;
	const size_t qr = (size_t)s->n_heads * s->head_dim;

	b->k = xcalloc((size_t)b->n * kvr, sizeof(float));
	b->v = xcalloc((size_t)b->n * kvr, sizeof(float));
	b->q = xcalloc((size_t)b->n * qr, sizeof(float));
	for (size_t i = 0; i < (size_t)b->n * kvr; i++) {
		b->k[i] = rnd_uniform();
		b->v[i] = rnd_uniform();
	}
	for (size_t i = 0; i < (size_t)b->n * qr; i++)
		b->q[i] = 4.0f * rnd_uniform(); /* peaky softmax too */
	for (int t = 0; t < b->n; t++) {
		int sq = b->seq[t], p = b->pos[t];

		for (size_t e = 0; e < kvr; e++) {
			float kr = f16_round(b->k[t * kvr + e]), vr = f16_round(b->v[t * kvr + e]);

			s->ref_k[sq][(size_t)p * kvr + e] = kr;
			s->ref_v[sq][(size_t)p * kvr + e] = vr;
			if (sq == 0 && p < SHARED_PAGES * s->page_size && s->ref_k[SHARED_SEQ]) {
				s->ref_k[SHARED_SEQ][(size_t)p * kvr + e] = kr;
				s->ref_v[SHARED_SEQ][(size_t)p * kvr + e] = vr;
			}
		}
	}
}

static void batch_free(struct batch *b)
{
	free(b->pos);
	free(b->seq);
	free(b->k);
	free(b->v);
	free(b->q);
}

static struct exl_batch_desc batch_desc(const struct scenario *s, const struct batch *b)
{
	struct exl_batch_desc d = {
		.n_tokens = b->n, .pos = b->pos, .seq = b->seq, .n_seqs = N_SEQ,
		.max_pages = s->max_pages, .page_table = s->table,
	};
	return d;
}

/* The history passes: every position below hist, in two batches (odd and
 * even positions of each sequence, so each pass has holes). */
static void history_batches(const struct scenario *s, struct batch *h)
{
	for (int half = 0; half < 2; half++) {
		int cap = 0;

		for (int i = 0; i < N_SEQ; i++)
			cap += s->hist[i];
		batch_alloc(&h[half], cap + 1);
		for (int i = 0; i < N_SEQ; i++) {
			int from = i == SHARED_SEQ ? SHARED_PAGES * s->page_size : 0;

			for (int p = from; p < s->hist[i]; p++)
				if ((p & 1) == half)
					batch_add(&h[half], i, p);
		}
	}
}

/* The final batch: the rest of every sequence, interleaved across
 * sequences. */
static void final_batch(const struct scenario *s, struct batch *b)
{
	int cap = 0, left = 1;
	int next[N_SEQ];

	for (int i = 0; i < N_SEQ; i++) {
		cap += s->len[i] - s->hist[i];
		next[i] = s->hist[i];
	}
	batch_alloc(b, cap + 1);
	while (left) {
		left = 0;
		for (int i = 0; i < N_SEQ; i++) {
			int take = 1 + (int)(rnd_u32() % 3u);

			for (; take > 0 && next[i] < s->len[i]; take--)
				batch_add(b, i, next[i]++);
			left |= next[i] < s->len[i];
		}
	}
}

/* Every stored K/V element where the layout says it is. */
static int check_layout(const struct scenario *s, const struct batch *b)
{
	const int ps = s->page_size, hd = s->head_dim;
	const size_t kvr = (size_t)s->n_kv_heads * hd;
	int bad = 0;

	for (int t = 0; t < b->n; t++) {
		int page = s->table[(size_t)b->seq[t] * s->max_pages + b->pos[t] / ps];

		for (int h = 0; h < s->n_kv_heads; h++) {
			size_t off = (((size_t)page * s->n_kv_heads + h) * ps + b->pos[t] % ps) * hd;

			for (int d = 0; d < hd; d++) {
				bad += s->K[off + d] != exl_fp32_to_fp16(b->k[t * kvr + h * hd + d]);
				bad += s->V[off + d] != exl_fp32_to_fp16(b->v[t * kvr + h * hd + d]);
			}
		}
	}
	return bad;
}

/* The naive attention of the batch over the reference copies. */
static void ref_attention(const struct scenario *s, const struct batch *b,
			  const struct exl_attn_params *ap, double *out)
{
	const int hd = s->head_dim;
	const size_t kvr = (size_t)s->n_kv_heads * hd;
	const int group = s->n_heads / s->n_kv_heads;

	for (int t = 0; t < b->n; t++) {
		const int sq = b->seq[t];
		int len = b->pos[t] + 1;

		/* non-causal: to its sequence's last position in the batch */
		for (int u = 0; ap->non_causal && u < b->n; u++)
			if (b->seq[u] == sq && b->pos[u] + 1 > len)
				len = b->pos[u] + 1;
		const int first = ap->window && len > ap->window ? len - ap->window : 0;
		double *sc = xcalloc((size_t)len, sizeof(double));

		for (int h = 0; h < s->n_heads; h++) {
			const float *q = b->q + ((size_t)t * s->n_heads + h) * hd;
			const int kvh = h / group;
			double m = -INFINITY, sum = 0.0;
			double *o = out + ((size_t)t * s->n_heads + h) * hd;

			for (int p = first; p < len; p++) {
				const float *k = s->ref_k[sq] + (size_t)p * kvr + (size_t)kvh * hd;
				double dot = 0.0;

				for (int d = 0; d < hd; d++)
					dot += (double)q[d] * k[d];
				sc[p] = dot * ap->scale;
				if (ap->softcap > 0)
					sc[p] = ap->softcap * tanh(sc[p] / ap->softcap);
				m = fmax(m, sc[p]);
			}
			/* gpt-oss's sink: a logit with no value in the softmax */
			if (ap->sinks) {
				m = fmax(m, ap->sinks[h]);
				sum = exp(ap->sinks[h] - m);
			}
			for (int p = first; p < len; p++) {
				sc[p] = exp(sc[p] - m);
				sum += sc[p];
			}
			for (int d = 0; d < hd; d++)
				o[d] = 0.0;
			for (int p = first; p < len; p++) {
				const float *v = s->ref_v[sq] + (size_t)p * kvr + (size_t)kvh * hd;

				for (int d = 0; d < hd; d++)
					o[d] += sc[p] / sum * v[d];
			}
		}
		free(sc);
	}
}

static int count_bad(const float *got, const double *want, size_t n, double tol)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++) {
		if (!(fabs((double)got[i] - want[i]) <= tol)) {
			if (!bad)
				fprintf(stderr, "  [%zu]: got %.9g want %.9g\n", i, (double)got[i],
					want[i]);
			bad++;
		}
	}
	return bad;
}

/* ---- drivers, every variant ------------------------------------------- */

static void run_drivers(const struct exl_cpu_ops *k, struct exl_pool *pool, int ps,
			int n_heads, int n_kv_heads, int head_dim)
{
	struct scenario s;
	struct batch hist[2], fin;
	struct exl_cpu_batch cb = { 0 };
	struct exl_attn_scratch scratch = { 0 };
	const float scale = 1.0f / sqrtf((float)head_dim);
	const struct exl_attn_params ap = { scale, 0.0f, 0, NULL, false };
	char err[200];
	const char *pn = pool ? "pool3" : "single";

	scenario_init(&s, ps, n_heads, n_kv_heads, head_dim);
	history_batches(&s, hist);
	final_batch(&s, &fin);
	for (int i = 0; i < 2; i++) {
		struct exl_batch_desc d = batch_desc(&s, &hist[i]);

		if (!hist[i].n)
			continue;
		batch_fill(&s, &hist[i]);
		CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0, "history: %s", err);
		CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == 0, "history: %s", err);
		exl_cpu_kv_store(pool, k, &cb, &s.kv, hist[i].k, hist[i].v);
		CHECK(check_layout(&s, &hist[i]) == 0, "%s/%s ps %d: history pass %d layout",
		      k->name, pn, ps, i);
	}
	struct exl_batch_desc d = batch_desc(&s, &fin);
	batch_fill(&s, &fin);
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0, "final: %s", err);
	CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == 0, "final: %s", err);
	exl_cpu_kv_store(pool, k, &cb, &s.kv, fin.k, fin.v);
	CHECK(check_layout(&s, &fin) == 0, "%s/%s ps %d: final pass layout", k->name, pn, ps);

	const size_t out_n = (size_t)fin.n * n_heads * head_dim;
	float *out = xcalloc(out_n, sizeof(float));
	double *ref = xcalloc(out_n, sizeof(double));
	int r = exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &ap, err,
				  sizeof(err));
	CHECK(r == 0, "attention: %s", err);
	ref_attention(&s, &fin, &ap, ref);
	CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
	      "%s/%s: attention ps %d heads %d/%d head_dim %d (%d tokens)", k->name, pn, ps,
	      n_heads, n_kv_heads, head_dim, fin.n);
	/* gemma2's soft-capped scores through a sliding window shorter than
	 * some windows, across page boundaries */
	for (int w = 1; w <= 3 * ps + 1; w += ps + 1) {
		const struct exl_attn_params aw = { scale, 4.0f, w, NULL, false };

		CHECK(exl_cpu_kv_check(&cb, &s.kv, w, err, sizeof(err)) == 0, "window: %s", err);
		CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &aw,
					err, sizeof(err)) == 0, "attention: %s", err);
		ref_attention(&s, &fin, &aw, ref);
		CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
		      "%s/%s: attention ps %d heads %d/%d head_dim %d, window %d, softcap 4",
		      k->name, pn, ps, n_heads, n_kv_heads, head_dim, w);
	}
	/* gpt-oss's sinks, one above every score of its head, the others
	 * among them, through a window */
	float *sinks = xcalloc((size_t)n_heads, sizeof(float));
	for (int h = 0; h < n_heads; h++)
		sinks[h] = h % 2 ? 3.0f : -0.5f + 0.25f * (float)h;
	for (int w = 0; w <= ps + 1; w += ps + 1) {
		const struct exl_attn_params as = { scale, 0.0f, w, sinks, false };

		CHECK(exl_cpu_kv_check(&cb, &s.kv, w, err, sizeof(err)) == 0, "sinks: %s", err);
		CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &as,
					err, sizeof(err)) == 0, "attention: %s", err);
		ref_attention(&s, &fin, &as, ref);
		CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
		      "%s/%s: attention ps %d heads %d/%d head_dim %d, window %d, sinks", k->name,
		      pn, ps, n_heads, n_kv_heads, head_dim, w);
	}
	free(sinks);
	/* an encoder's: every token sees its sequence's last position here */
	const struct exl_attn_params an = { scale, 0.0f, 0, NULL, true };
	CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &an, err,
				sizeof(err)) == 0, "attention: %s", err);
	ref_attention(&s, &fin, &an, ref);
	CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
	      "%s/%s: attention ps %d heads %d/%d head_dim %d, non-causal", k->name, pn, ps,
	      n_heads, n_kv_heads, head_dim);
	r = exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &ap, err,
			      sizeof(err));
	/* against the scalar variant on one thread: within 1e-5 */
	float *outs = xcalloc(out_n, sizeof(float));
	CHECK(exl_cpu_attention(NULL, &exl_cpu_ops_scalar, &scratch, &cb, &s.kv, fin.q, outs,
				n_heads, &ap, err, sizeof(err)) == 0, "attention: %s", err);
	for (size_t i = 0; i < out_n; i++)
		ref[i] = outs[i];
	CHECK(count_bad(out, ref, out_n, 1e-5) == 0,
	      "%s/%s: attention ps %d heads %d/%d head_dim %d vs scalar", k->name, pn, ps,
	      n_heads, n_kv_heads, head_dim);
	free(outs);
	free(out);
	free(ref);
	exl_attn_scratch_free(&scratch);
	exl_cpu_batch_free(&cb);
	batch_free(&hist[0]);
	batch_free(&hist[1]);
	batch_free(&fin);
	scenario_free(&s);
}

/* The attention of `n` query rows of sequence 0 at positions pos (all K/V
 * already stored) through a sliding window (0: none), into out
 * [n][n_heads][head_dim]. */
static void attend_rows(const struct exl_cpu_ops *k, struct exl_pool *pool, struct scenario *s,
			struct exl_attn_scratch *scratch, const int32_t *pos, int n,
			const float *q, float *out, int window)
{
	const struct exl_attn_params ap = { 1.0f / sqrtf((float)s->head_dim), 0.0f, window, NULL, false };
	int32_t seq[8] = { 0 };
	struct exl_batch_desc d = {
		.n_tokens = n, .pos = pos, .seq = seq, .n_seqs = N_SEQ,
		.max_pages = s->max_pages, .page_table = s->table,
	};
	struct exl_cpu_batch cb = { 0 };
	char err[200];

	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0 &&
	      exl_cpu_kv_check(&cb, &s->kv, window, err, sizeof(err)) == 0, "rows: %s", err);
	CHECK(exl_cpu_attention(pool, k, scratch, &cb, &s->kv, q, out, s->n_heads, &ap, err,
				sizeof(err)) == 0,
	      "rows attention: %s", err);
	exl_cpu_batch_free(&cb);
}

/* A position's output is the same bits whatever else is in the batch: the
 * last 5 positions of a window as 5 rows of one pass (a speculative step
 * verifying 4 drafted tokens), each alone (decode steps), and the last
 * beside rows of short windows (other jobs).  The partitions of a long
 * window must not depend on how many units the batch has, with or without
 * a sliding window (whose partitions start at the window's start). */
static void same_bits_any_batch(const struct exl_cpu_ops *k, struct exl_pool *pool,
				struct scenario *s, struct exl_attn_scratch *scratch, int len,
				int window)
{
	enum { R = 5 };
	const size_t row = (size_t)s->n_heads * s->head_dim;
	float *q = xcalloc(R * row, sizeof(float));
	float *together = xcalloc(R * row, sizeof(float));
	float *alone = xcalloc(row, sizeof(float));
	float *mixed = xcalloc(4 * row, sizeof(float));
	float *mq = xcalloc(4 * row, sizeof(float));
	/* (--quick's shorter decodes: the middle two within len) */
	int32_t pos[R], mpos[4] = { 3, len / 3 < 100 ? len / 3 : 100, len / 2 < 300 ? len / 2 : 300,
				    len - 1 };
	int bad = 0;

	for (size_t i = 0; i < R * row; i++)
		q[i] = 4.0f * rnd_uniform();
	for (int i = 0; i < R; i++)
		pos[i] = len - R + i;
	attend_rows(k, pool, s, scratch, pos, R, q, together, window);
	for (int i = 0; i < R; i++) {
		attend_rows(k, pool, s, scratch, &pos[i], 1, q + (size_t)i * row, alone, window);
		bad += memcmp(alone, together + (size_t)i * row, row * sizeof(float)) != 0;
	}
	CHECK(bad == 0, "%s/%s: %d of %d rows of one pass differ from the same positions "
	      "alone (ps %d heads %d/%d head_dim %d, length %d, window %d)", k->name,
	      pool ? "pool3" : "single", bad, R, s->page_size, s->n_heads, s->n_kv_heads,
	      s->head_dim, len, window);
	for (size_t i = 0; i < 3 * row; i++)
		mq[i] = 4.0f * rnd_uniform();
	memcpy(mq + 3 * row, q + (size_t)(R - 1) * row, row * sizeof(float));
	attend_rows(k, pool, s, scratch, mpos, 4, mq, mixed, window);
	CHECK(!memcmp(mixed + 3 * row, together + (size_t)(R - 1) * row, row * sizeof(float)),
	      "%s/%s: the last position beside 3 short windows differs from it alone "
	      "(ps %d heads %d/%d head_dim %d, length %d, window %d)", k->name,
	      pool ? "pool3" : "single", s->page_size, s->n_heads, s->n_kv_heads, s->head_dim,
	      len, window);
	free(q);
	free(together);
	free(alone);
	free(mixed);
	free(mq);
}

/* One long sequence and one decode token at its end: few (token, KV head)
 * units, so a pool splits each window into partitions and merges them. */
static void run_decode(const struct exl_cpu_ops *k, struct exl_pool *pool, int ps, int n_heads,
		       int n_kv_heads, int head_dim, int len)
{
	struct scenario s;
	struct batch hist, fin;
	struct exl_cpu_batch cb = { 0 };
	struct exl_attn_scratch scratch = { 0 };
	const float scale = 1.0f / sqrtf((float)head_dim);
	const struct exl_attn_params ap = { scale, 0.0f, 0, NULL, false };
	char err[200];

	scenario_init(&s, ps, n_heads, n_kv_heads, head_dim);
	/* sequence 0 only, len positions: replace its table row */
	for (int i = 0; i < N_SEQ; i++) {
		free(s.ref_k[i]);
		free(s.ref_v[i]);
		s.ref_k[i] = s.ref_v[i] = NULL;
		s.len[i] = 0;
	}
	free(s.table);
	free(s.K);
	free(s.V);
	s.len[0] = len;
	s.max_pages = pages_for(len, ps);
	s.n_pages = s.max_pages;
	s.table = xcalloc((size_t)N_SEQ * s.max_pages, sizeof(int32_t));
	for (int p = 0; p < s.max_pages; p++)
		s.table[p] = s.max_pages - 1 - p; /* pages in reverse order */
	const size_t kvr = (size_t)n_kv_heads * head_dim;
	s.ref_k[0] = xcalloc((size_t)len * kvr, sizeof(float));
	s.ref_v[0] = xcalloc((size_t)len * kvr, sizeof(float));
	s.K = xcalloc((size_t)s.n_pages * ps * kvr, sizeof(uint16_t));
	s.V = xcalloc((size_t)s.n_pages * ps * kvr, sizeof(uint16_t));
	s.kv.k = s.K;
	s.kv.v = s.V;
	s.kv.n_pages = s.n_pages;

	batch_alloc(&hist, len);
	for (int p = 0; p < len - 1; p++)
		batch_add(&hist, 0, p);
	batch_alloc(&fin, 1);
	batch_add(&fin, 0, len - 1);
	struct exl_batch_desc dh = batch_desc(&s, &hist), df = batch_desc(&s, &fin);
	batch_fill(&s, &hist);
	batch_fill(&s, &fin);
	CHECK(exl_cpu_batch_set(&cb, &dh, err, sizeof(err)) == 0 &&
	      exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == 0, "decode history: %s", err);
	exl_cpu_kv_store(pool, k, &cb, &s.kv, hist.k, hist.v);
	CHECK(exl_cpu_batch_set(&cb, &df, err, sizeof(err)) == 0 &&
	      exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == 0, "decode: %s", err);
	exl_cpu_kv_store(pool, k, &cb, &s.kv, fin.k, fin.v);
	const size_t out_n = (size_t)n_heads * head_dim;
	float *out = xcalloc(out_n, sizeof(float));
	double *ref = xcalloc(out_n, sizeof(double));
	CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &ap, err,
				sizeof(err)) == 0, "attention: %s", err);
	ref_attention(&s, &fin, &ap, ref);
	CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
	      "%s/%s: decode attention ps %d heads %d/%d head_dim %d at %d", k->name,
	      pool ? "pool3" : "single", ps, n_heads, n_kv_heads, head_dim, len - 1);
	/* sinks on a window long enough to be partitioned: they join once,
	 * at the merge */
	float *sinks = xcalloc((size_t)n_heads, sizeof(float));
	for (int h = 0; h < n_heads; h++)
		sinks[h] = h % 2 ? 4.0f : -1.0f;
	const struct exl_attn_params as = { scale, 0.0f, 0, sinks, false };
	CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &as, err,
				sizeof(err)) == 0, "attention: %s", err);
	ref_attention(&s, &fin, &as, ref);
	CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
	      "%s/%s: decode attention ps %d heads %d/%d head_dim %d at %d, sinks", k->name,
	      pool ? "pool3" : "single", ps, n_heads, n_kv_heads, head_dim, len - 1);
	free(sinks);
	same_bits_any_batch(k, pool, &s, &scratch, len, 0);
	same_bits_any_batch(k, pool, &s, &scratch, len, len - 2 * ps - 3);
	/* a window of most of the sequence: still partitioned, from its start;
	 * the pages wholly before it unmapped, as a cache that gave them back */
	const struct exl_attn_params aw = { scale, 0.0f, len - 2 * ps - 3, NULL, false };
	cb.tables[0].pages[0] = -1;
	cb.tables[0].pages[1] = -1;
	cb.tables[0].checked_page_size = 0;
	CHECK(exl_cpu_kv_check(&cb, &s.kv, aw.window, err, sizeof(err)) == 0, "window: %s", err);
	CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &aw, err,
				sizeof(err)) == 0, "attention: %s", err);
	ref_attention(&s, &fin, &aw, ref);
	CHECK(count_bad(out, ref, out_n, 2e-5) == 0,
	      "%s/%s: decode attention ps %d heads %d/%d head_dim %d at %d, window %d", k->name,
	      pool ? "pool3" : "single", ps, n_heads, n_kv_heads, head_dim, len - 1, aw.window);
	/* the same layer read through the batch's local page table (a local
	 * pool's layer, table 1) while the first table maps nothing: the same
	 * output; a table-0 layer then fails the check, and a table-1 layer
	 * without a local table too */
	int32_t *none = xcalloc((size_t)N_SEQ * s.max_pages, sizeof(int32_t));
	for (int p = 0; p < N_SEQ * s.max_pages; p++)
		none[p] = -1;
	struct exl_batch_desc dl = df;
	dl.page_table = none;
	dl.local_max_pages = df.max_pages;
	dl.local_page_table = df.page_table;
	for (int p = 0; p < (aw.window > 0 ? (len - aw.window) / ps : 0); p++)
		s.table[p] = -1; /* given back behind the window */
	s.kv.table = 1;
	memset(out, 0, out_n * sizeof(float));
	CHECK(exl_cpu_batch_set(&cb, &dl, err, sizeof(err)) == 0 &&
	      exl_cpu_kv_check(&cb, &s.kv, aw.window, err, sizeof(err)) == 0, "local: %s", err);
	CHECK(exl_cpu_attention(pool, k, &scratch, &cb, &s.kv, fin.q, out, n_heads, &aw, err,
				sizeof(err)) == 0, "local attention: %s", err);
	CHECK(count_bad(out, ref, out_n, 2e-5) == 0, "%s: attention through the local table",
	      k->name);
	s.kv.table = 0;
	CHECK(exl_cpu_kv_check(&cb, &s.kv, aw.window, err, sizeof(err)) == -1,
	      "a global layer over an empty first table passes the check");
	s.kv.table = 1;
	dl.local_max_pages = 0;
	dl.local_page_table = NULL;
	CHECK(exl_cpu_batch_set(&cb, &dl, err, sizeof(err)) == 0 &&
	      exl_cpu_kv_check(&cb, &s.kv, aw.window, err, sizeof(err)) == -1 &&
	      strstr(err, "local page table"), "a local layer without a local table: %s", err);
	s.kv.table = 0;
	free(none);
	free(out);
	free(ref);
	exl_attn_scratch_free(&scratch);
	exl_cpu_batch_free(&cb);
	batch_free(&hist);
	batch_free(&fin);
	scenario_free(&s);
}

static void test_kv_check_errors(void)
{
	struct scenario s;
	struct exl_cpu_batch cb = { 0 };
	char err[200];
	int32_t pos[2] = { 0, 40 }, seq[2] = { 0, 1 };
	struct exl_batch_desc d;

	scenario_init(&s, 16, 4, 2, 64);
	d = (struct exl_batch_desc){ 2, pos, seq, N_SEQ, s.max_pages, s.table, 0, NULL };
	err[0] = '\0';
	CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == -1 && strstr(err, "set_batch"),
	      "kv_check without a batch: %s", err);

	seq[1] = N_SEQ;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == -1 && strstr(err, "sequence 5"),
	      "sequence out of range: %s", err);
	seq[1] = 1;
	pos[1] = -1;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == -1 && strstr(err, "position -1"),
	      "negative position: %s", err);
	d.n_tokens = 0;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == -1, "empty batch accepted");
	d.n_tokens = 2;
	d.page_table = NULL;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == -1, "no page table accepted");
	d.page_table = s.table;

	/* seq 1 has one page (len 5): position 40 needs its page 2, which is -1 */
	pos[1] = 40;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0, "set: %s", err);
	CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == -1 &&
	      strstr(err, "outside the pool"), "unmapped page: %s", err);
	/* beyond the page table's row */
	pos[1] = 16 * s.max_pages;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0, "set: %s", err);
	CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == -1 &&
	      strstr(err, "the page table has"), "past the table: %s", err);
	/* a page number past the pool */
	pos[1] = 0;
	int32_t saved = s.table[s.max_pages];
	s.table[s.max_pages] = s.n_pages;
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0, "set: %s", err);
	CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == -1 &&
	      strstr(err, "outside the pool"), "page past the pool: %s", err);
	s.table[s.max_pages] = saved;
	/* the batch copies the table: fixing the caller's table needs a new set */
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0, "set: %s", err);
	CHECK(exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == 0, "good batch: %s", err);
	/* malformed layer */
	struct exl_kv_layer bad = s.kv;
	bad.page_size = 0;
	CHECK(exl_cpu_kv_check(&cb, &bad, 0, err, sizeof(err)) == -1, "page_size 0 accepted");
	bad = s.kv;
	bad.k = NULL;
	CHECK(exl_cpu_kv_check(&cb, &bad, 0, err, sizeof(err)) == -1, "no K accepted");

	/* GQA mismatch */
	struct exl_attn_scratch scr = { 0 };
	float q[2 * 3 * 64], out[2 * 3 * 64];
	CHECK(exl_cpu_attention(NULL, &exl_cpu_ops_scalar, &scr, &cb, &s.kv, q, out, 3,
				&(struct exl_attn_params){ 0.125f, 0.0f, 0, NULL, false },
				err, sizeof(err)) == -1 && strstr(err, "multiple"),
	      "3 heads over 2 KV heads: %s", err);
	exl_attn_scratch_free(&scr);
	exl_cpu_batch_free(&cb);
	scenario_free(&s);
}

/* ---- the op table ----------------------------------------------------- */

static void test_backend_memory(struct exl_backend *be)
{
	const struct exl_backend_ops *ops = be->ops;
	static const size_t sizes[] = { 0, 1, 63, 64, 65, 4096, 1000003 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		unsigned char *p = ops->alloc(be, sizes[i]);
		size_t nz = 0;

		CHECK(p != NULL && ((uintptr_t)p & 63) == 0, "alloc %zu: %p", sizes[i], (void *)p);
		if (!p)
			continue;
		for (size_t j = 0; j < sizes[i]; j++)
			nz += p[j] != 0;
		CHECK(nz == 0, "alloc %zu: %zu bytes not zero", sizes[i], nz);
		memset(p, 0x5a, sizes[i]);
		ops->free(be, p);
	}
	CHECK(ops->alloc(be, SIZE_MAX) == NULL && exl_backend_error(be),
	      "alloc of SIZE_MAX");
	char host[100], back[100];
	for (int i = 0; i < 100; i++)
		host[i] = (char)i;
	CHECK(ops->upload(be, host, sizeof(host)) == host, "upload is not zero-copy");
	ops->unload(be, host);
	char *dev = ops->alloc(be, sizeof(host));
	CHECK(ops->copy_in(be, dev, host, sizeof(host)) == 0, "copy_in");
	CHECK(ops->download(be, back, dev, sizeof(back)) == 0 && !memcmp(back, host, 100),
	      "download");
	CHECK(exl_backend_error(be) == NULL, "error after a good download: %s",
	      exl_backend_error(be));
	CHECK(ops->sync(be) == 0, "sync");
	ops->free(be, dev);
	ops->free(be, NULL);
}

/* The whole final pass through the op table matches the drivers bit for
 * bit (same variant; every (token, head) is computed the same way whatever
 * the thread). */
static void test_backend_attention(struct exl_backend *be)
{
	const struct exl_backend_ops *ops = be->ops;
	const struct exl_cpu_ops *k = exl_cpu_ops_get(exl_backend_cpu_kernels(be));
	const int ps = 16, nh = 8, nkv = 2, hd = 64;
	struct scenario s;
	struct batch hist[2], fin;
	const float scale = 0.125f;
	const struct exl_attn_params ap = { scale, 0.0f, 0, NULL, false };
	const struct exl_rope_params rp = { hd, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 };

	CHECK(k != NULL, "backend variant %s", exl_backend_cpu_kernels(be));
	if (!k)
		return;
	scenario_init(&s, ps, nh, nkv, hd);
	history_batches(&s, hist);
	final_batch(&s, &fin);
	for (int i = 0; i < 2; i++) {
		struct exl_batch_desc d = batch_desc(&s, &hist[i]);

		batch_fill(&s, &hist[i]);
		CHECK(ops->set_batch(be, &d) == 0, "set_batch: %s", exl_backend_error(be));
		ops->kv_store(be, &s.kv, hist[i].k, hist[i].v);
	}
	struct exl_batch_desc d = batch_desc(&s, &fin);
	batch_fill(&s, &fin);
	CHECK(ops->set_batch(be, &d) == 0, "set_batch: %s", exl_backend_error(be));
	ops->kv_store(be, &s.kv, fin.k, fin.v);
	const size_t qn = (size_t)fin.n * nh * hd;
	float *out = xcalloc(qn, sizeof(float)), *out2 = xcalloc(qn, sizeof(float));
	float *q2 = xcalloc(qn, sizeof(float));
	memcpy(q2, fin.q, qn * sizeof(float));
	ops->rope(be, fin.q, fin.n, nh, hd, &rp);
	ops->attention(be, &s.kv, fin.q, out, nh, &ap);
	CHECK(ops->sync(be) == 0, "sync after attention: %s", exl_backend_error(be));
	CHECK(check_layout(&s, &fin) == 0, "op table kv_store layout");

	/* the same through the drivers */
	struct exl_cpu_batch cb = { 0 };
	struct exl_rope_cache rc = { 0 };
	struct exl_attn_scratch scr = { 0 };
	char err[200];
	CHECK(exl_cpu_batch_set(&cb, &d, err, sizeof(err)) == 0 &&
	      exl_cpu_kv_check(&cb, &s.kv, 0, err, sizeof(err)) == 0, "drivers: %s", err);
	CHECK(exl_cpu_rope(NULL, k, &rc, 1, fin.pos, q2, fin.n, nh, hd, &rp, err,
			   sizeof(err)) == 0, "rope: %s", err);
	CHECK(!memcmp(q2, fin.q, qn * sizeof(float)), "op table rope differs from the driver");
	CHECK(exl_cpu_attention(NULL, k, &scr, &cb, &s.kv, q2, out2, nh, &ap, err,
				sizeof(err)) == 0, "attention: %s", err);
	CHECK(!memcmp(out, out2, qn * sizeof(float)), "op table attention differs from the driver");
	exl_rope_cache_free(&rc);
	exl_attn_scratch_free(&scr);
	exl_cpu_batch_free(&cb);
	free(out);
	free(out2);
	free(q2);
	batch_free(&hist[0]);
	batch_free(&hist[1]);
	batch_free(&fin);
	scenario_free(&s);
}

static void test_backend_embed(struct exl_backend *be)
{
	const struct exl_backend_ops *ops = be->ops;
	static const uint32_t types[] = { EXL_F32, EXL_F16, EXL_BF16, EXL_Q8_0, EXL_Q4_0 };
	const int rows = 37, cols = 256;
	int32_t tokens[40];
	float *src = xcalloc((size_t)rows * cols, sizeof(float));

	for (size_t i = 0; i < (size_t)rows * cols; i++)
		src[i] = rnd_uniform();
	for (int i = 0; i < 40; i++)
		tokens[i] = (int32_t)(rnd_u32() % (uint32_t)rows);
	tokens[0] = 0;
	tokens[1] = rows - 1;
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		const size_t rb = exl_dtype_row_bytes(types[ti], cols);
		uint8_t *data = xcalloc((size_t)rows, rb);
		float *y = xcalloc(40 * (size_t)cols, sizeof(float));
		float *want = xcalloc((size_t)cols, sizeof(float));
		int bad = 0;

		for (int r = 0; r < rows; r++)
			CHECK(exl_quantize_row(types[ti], src + (size_t)r * cols, data + r * rb, cols) == rb,
			      "quantize type %u", types[ti]);
		struct exl_weight w = { types[ti], rows, cols, rb, ops->upload(be, data, rows * rb), EXL_LAYOUT_ROWS };
		ops->embed(be, &w, tokens, y, 40);
		CHECK(ops->sync(be) == 0, "embed type %u: %s", types[ti], exl_backend_error(be));
		for (int i = 0; i < 40; i++) {
			exl_dequantize_row(types[ti], data + (size_t)tokens[i] * rb, want, cols);
			bad += memcmp(want, y + (size_t)i * cols, (size_t)cols * sizeof(float)) != 0;
		}
		CHECK(bad == 0, "embed type %u: %d rows differ", types[ti], bad);
		free(data);
		free(y);
		free(want);
	}
	free(src);
}

static void test_backend_matmul(struct exl_backend *be)
{
	const struct exl_backend_ops *ops = be->ops;
	const int rows = 48, cols = 64, n = 3;
	float *W = xcalloc((size_t)rows * cols, sizeof(float));
	float x[3 * 64], y[3 * 48];
	int bad = 0;

	for (int i = 0; i < rows * cols; i++)
		W[i] = rnd_uniform();
	for (int i = 0; i < n * cols; i++)
		x[i] = rnd_uniform();
	struct exl_weight w = { EXL_F32, rows, cols, (size_t)cols * 4, W, EXL_LAYOUT_ROWS };
	ops->matmul(be, &w, x, y, n);
	CHECK(ops->sync(be) == 0, "matmul: %s", exl_backend_error(be));
	for (int i = 0; i < n; i++) {
		for (int r = 0; r < rows; r++) {
			double s = 0.0;

			for (int c = 0; c < cols; c++)
				s += (double)W[r * cols + c] * x[i * cols + c];
			bad += fabs(s - y[i * rows + r]) > 1e-4;
		}
	}
	CHECK(bad == 0, "matmul: %d outputs off", bad);
	free(W);
}

/* A failed op: the message, later ops skipped, download/sync -1 once, then
 * clean. */
static void expect_failure(struct exl_backend *be, const char *what, const char *needle)
{
	const struct exl_backend_ops *ops = be->ops;
	float a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 1, 1, 1 }, back[4];

	/* a later op does nothing */
	ops->add(be, a, b, 4);
	CHECK(a[0] == 1.0f, "%s: op after a failure ran", what);
	CHECK(ops->copy_in(be, a, b, sizeof(a)) == -1, "%s: copy_in after a failure", what);
	const char *e = exl_backend_error(be);
	CHECK(e && strstr(e, needle), "%s: message \"%s\" lacks \"%s\"", what, e ? e : "(none)",
	      needle);
	CHECK(ops->download(be, back, a, sizeof(a)) == -1, "%s: download did not fail", what);
	e = exl_backend_error(be);
	CHECK(e && strstr(e, needle), "%s: message after download \"%s\"", what, e ? e : "(none)");
	ops->add(be, a, b, 4);
	CHECK(ops->download(be, back, a, sizeof(a)) == 0 && back[0] == 2.0f,
	      "%s: the backend did not recover", what);
	CHECK(exl_backend_error(be) == NULL, "%s: error kept after a clean pass", what);
}

static void test_backend_errors(struct exl_backend *be)
{
	const struct exl_backend_ops *ops = be->ops;
	struct scenario s;
	float buf[4096];
	int32_t tok[2] = { 0, 99 };
	int32_t pos[2] = { 0, 1 }, seq[2] = { 0, 7 };

	scenario_init(&s, 16, 4, 2, 64);
	struct exl_batch_desc d = { 2, pos, seq, N_SEQ, s.max_pages, s.table, 0, NULL };
	CHECK(ops->set_batch(be, &d) == -1, "set_batch with sequence 7 of 5");
	CHECK(exl_backend_error(be) && strstr(exl_backend_error(be), "sequence 7"),
	      "set_batch message: %s", exl_backend_error(be));
	CHECK(ops->sync(be) == 0, "a refused set_batch poisons the queue");

	seq[1] = 1;
	pos[1] = 5 * 16; /* seq 1 has 1 page */
	CHECK(ops->set_batch(be, &d) == 0, "set_batch: %s", exl_backend_error(be));
	ops->kv_store(be, &s.kv, buf, buf);
	expect_failure(be, "kv_store past the sequence's pages", "kv_store:");

	pos[1] = 1;
	CHECK(ops->set_batch(be, &d) == 0, "set_batch: %s", exl_backend_error(be));
	ops->attention(be, &s.kv, buf, buf, 3, &(struct exl_attn_params){ 0.1f, 0.0f, 0, NULL, false });
	expect_failure(be, "attention with 3 heads", "multiple");

	struct exl_rope_params rp = { 63, 10000.0f, 1.0f, false, NULL, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 };
	ops->rope(be, buf, 2, 4, 64, &rp);
	expect_failure(be, "rope n_rot 63", "rotated");
	rp.n_rot = 64;
	ops->rope(be, buf, 3, 4, 64, &rp);
	expect_failure(be, "rope of more rows than the batch", "rope:");

	float table[4 * 32];
	memset(table, 0, sizeof(table));
	struct exl_weight w = { EXL_F32, 4, 32, 128, table, EXL_LAYOUT_ROWS };
	ops->embed(be, &w, tok, buf, 2);
	expect_failure(be, "embed token 99", "vocabulary");
	w.row_bytes = 100;
	tok[1] = 1;
	ops->embed(be, &w, tok, buf, 2);
	expect_failure(be, "embed with a wrong row size", "embed:");
	w.row_bytes = 128;
	w.type = EXL_Q5_1;
	ops->matmul(be, &w, buf, buf, 1);
	expect_failure(be, "matmul of an unsupported type", "matmul:");

	int32_t rows[2] = { 0, -1 };
	ops->gather_rows(be, buf, buf + 100, rows, 2, 8);
	expect_failure(be, "gather_rows row -1", "gather_rows");
	ops->rmsnorm(be, buf, buf, buf, 1, 0, 1e-5f);
	expect_failure(be, "rmsnorm of dim 0", "rmsnorm");
	ops->rmsnorm(be, buf, buf, buf, 1, 4, NAN);
	expect_failure(be, "rmsnorm eps NaN", "epsilon");
	ops->softmax(be, NULL, 1, 4);
	expect_failure(be, "softmax of NULL", "softmax");
	scenario_free(&s);
}

int main(int argc, char **argv)
{
	static const char *const names[] = { "scalar", "avx2", "avx512" };
	/* --quick (the sanitizer build): decode runs a quarter as long, still
	 * across many pages of both sizes, and each shape of the drivers runs
	 * on the pool or on one thread, in turn, not both (the split is the
	 * same code for every shape; ASan looks at its reads either way).
	 * That build's longest test: 79 s of CI's 20 minutes. */
	const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	const int div = quick ? 4 : 1;
	/* group sizes 1, 2, 4, 3 (pieces 2 + 1) and 12 (8 + 4) */
	static const int gqa[][2] = { { 4, 4 }, { 8, 4 }, { 8, 2 }, { 12, 4 }, { 24, 2 }, { 14, 2 }, { 10, 2 } };
	static const int head_dims[] = { 64, 128, 20 };
	static const int page_sizes[] = { 16, 256 };
	char err[200];
	struct exl_pool *pool = exl_pool_create(3, err, sizeof(err));

	if (!pool) {
		fprintf(stderr, "pool: %s\n", err);
		return 1;
	}
	for (size_t vi = 0; vi < sizeof(names) / sizeof(names[0]); vi++) {
		const struct exl_cpu_ops *k = exl_cpu_ops_get(names[vi]);

		if (!k) {
			printf("variant %s: not run (this CPU lacks it)\n", names[vi]);
			continue;
		}
		printf("variant %s\n", names[vi]);
		for (size_t pi = 0; pi < 2; pi++)
			for (size_t g = 0; g < sizeof(gqa) / sizeof(gqa[0]); g++)
				for (size_t h = 0; h < 3; h++)
					for (int pool_on = 0; pool_on < 2; pool_on++)
						if (!quick || pool_on == (int)((pi + g + h) % 2))
							run_drivers(k, pool_on ? pool : NULL,
								    page_sizes[pi], gqa[g][0],
								    gqa[g][1], head_dims[h]);
	}
	for (size_t vi = 0; vi < sizeof(names) / sizeof(names[0]); vi++) {
		const struct exl_cpu_ops *k = exl_cpu_ops_get(names[vi]);

		for (size_t g = 0; k && g < sizeof(gqa) / sizeof(gqa[0]); g++) {
			run_decode(k, pool, 16, gqa[g][0], gqa[g][1], 64, 1500 / div);
			run_decode(k, pool, 256, gqa[g][0], gqa[g][1], 128, 3000 / div);
			run_decode(k, NULL, 16, gqa[g][0], gqa[g][1], 20, 700 / div);
		}
		if (k)
			run_decode(k, pool, 16, 8, 1, 64, 5000 / div);
	}
	exl_pool_destroy(pool);
	test_kv_check_errors();

	struct exl_backend *be = exl_backend_cpu_create(2, err, sizeof(err));
	CHECK(be != NULL, "create: %s", err);
	if (be) {
		printf("backend row kernels: %s\n", exl_backend_cpu_kernels(be));
		CHECK(exl_backend_cpu_threads(be) == 2, "threads %d", exl_backend_cpu_threads(be));
		CHECK(!strcmp(be->ops->name, "cpu"), "name %s", be->ops->name);
		test_backend_memory(be);
		test_backend_attention(be);
		test_backend_embed(be);
		test_backend_matmul(be);
		test_backend_errors(be);
		be->ops->destroy(be);
	}
	be = exl_backend_cpu_create(-3, err, sizeof(err));
	CHECK(be == NULL && strstr(err, "threads"), "create -3: %s", err);
	CHECK(exl_backend_cpu_threads(NULL) == 0 && exl_backend_error(NULL) == NULL,
	      "NULL backend queries");
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

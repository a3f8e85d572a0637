/* The paged KV cache on the CPU: the batch layout (set_batch), kv_store and
 * attention.
 *
 * Page layout (kernels/backend.h): page p holds page_size positions of one
 * sequence as [n_kv_heads][page_size][head_dim] F16, so the positions of one
 * KV head within a page are consecutive rows of head_dim.  Position `pos` of
 * KV head h is at element
 *   ((page * n_kv_heads + h) * page_size + pos % page_size) * head_dim
 * with page = page_table[seq * max_pages + pos / page_size].
 *
 * Attention runs one (token, head) pair at a time with an online softmax
 * (running maximum, denominator and weighted sum of V), folding in the
 * window's positions a page span of at most EXL_ATTN_CHUNK at a time, so a
 * thread needs head_dim + EXL_ATTN_CHUNK floats whatever the context length.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"

/* Bounds on a layout, far above any real model; they keep every product
 * below in range. */
#define MAX_TOKENS (1 << 20)
#define MAX_TABLE ((size_t)1 << 28)
#define MAX_HEADS 4096
#define MAX_HEAD_DIM 4096
/* Floats written (kv_store) or multiply-adds (attention) below which one
 * thread does it all. */
#define PAR_MIN_WORK 16384

/* ---- batch layout ----------------------------------------------------- */

void exl_cpu_batch_free(struct exl_cpu_batch *cb)
{
	free(cb->pos);
	free(cb->seq);
	free(cb->page_table);
	memset(cb, 0, sizeof(*cb));
}

static int grow(int32_t **a, size_t cap, size_t n)
{
	int32_t *p;

	if (n <= cap)
		return 0;
	p = realloc(*a, n * sizeof(int32_t));
	if (!p)
		return -1;
	*a = p;
	return 0;
}

int exl_cpu_batch_set(struct exl_cpu_batch *cb, const struct exl_batch_desc *b, char *err,
		      size_t errlen)
{
	size_t n, table;

	cb->n_tokens = 0;
	cb->checked_page_size = 0;
	if (!b || !b->pos || !b->seq || !b->page_table) {
		snprintf(err, errlen, "set_batch: incomplete batch layout");
		return -1;
	}
	if (b->n_tokens <= 0 || b->n_tokens > MAX_TOKENS || b->n_seqs <= 0 ||
	    b->max_pages <= 0) {
		snprintf(err, errlen, "set_batch: %d tokens of %d sequences with %d pages each "
			 "(expected 1..%d tokens and positive counts)", b->n_tokens, b->n_seqs,
			 b->max_pages, MAX_TOKENS);
		return -1;
	}
	if ((size_t)b->n_seqs > MAX_TABLE / (size_t)b->max_pages) {
		snprintf(err, errlen, "set_batch: page table of %d x %d entries is too large",
			 b->n_seqs, b->max_pages);
		return -1;
	}
	n = (size_t)b->n_tokens;
	table = (size_t)b->n_seqs * (size_t)b->max_pages;
	for (size_t t = 0; t < n; t++) {
		if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs || b->pos[t] < 0) {
			snprintf(err, errlen, "set_batch: token %zu has sequence %d (of %d) at "
				 "position %d", t, b->seq[t], b->n_seqs, b->pos[t]);
			return -1;
		}
	}
	if (grow(&cb->pos, cb->cap_tokens, n) || grow(&cb->seq, cb->cap_tokens, n) ||
	    grow(&cb->page_table, cb->cap_table, table)) {
		snprintf(err, errlen, "set_batch: out of memory for %zu tokens", n);
		return -1;
	}
	if (n > cb->cap_tokens)
		cb->cap_tokens = n;
	if (table > cb->cap_table)
		cb->cap_table = table;
	memcpy(cb->pos, b->pos, n * sizeof(int32_t));
	memcpy(cb->seq, b->seq, n * sizeof(int32_t));
	memcpy(cb->page_table, b->page_table, table * sizeof(int32_t));
	cb->n_seqs = b->n_seqs;
	cb->max_pages = b->max_pages;
	cb->n_tokens = b->n_tokens;
	return 0;
}

int exl_cpu_kv_check(struct exl_cpu_batch *b, const struct exl_kv_layer *kv, char *err,
		     size_t errlen)
{
	if (b->n_tokens <= 0) {
		snprintf(err, errlen, "no batch layout (set_batch first)");
		return -1;
	}
	if (!kv || !kv->k || !kv->v || kv->page_size <= 0 || kv->n_kv_heads <= 0 ||
	    kv->n_kv_heads > MAX_HEADS || kv->head_dim <= 0 || kv->head_dim > MAX_HEAD_DIM ||
	    kv->n_pages <= 0) {
		snprintf(err, errlen, "malformed KV layer");
		return -1;
	}
	/* Every layer of a cache has the same page geometry: check the table
	 * once per batch. */
	if (b->checked_page_size == kv->page_size && b->checked_n_pages == kv->n_pages)
		return 0;
	for (int t = 0; t < b->n_tokens; t++) {
		const int last = b->pos[t] / kv->page_size;
		const int32_t *row = b->page_table + (size_t)b->seq[t] * (size_t)b->max_pages;
		int first = 0;

		if (last >= b->max_pages) {
			snprintf(err, errlen, "token %d at position %d needs page %d of its "
				 "sequence, the page table has %d", t, b->pos[t], last,
				 b->max_pages);
			return -1;
		}
		/* A sequence's tokens come in order: from the previous token's
		 * last page on, each page is checked once. */
		if (t > 0 && b->seq[t - 1] == b->seq[t] && b->pos[t - 1] <= b->pos[t])
			first = b->pos[t - 1] / kv->page_size;
		for (int j = first; j <= last; j++) {
			if (row[j] < 0 || row[j] >= kv->n_pages) {
				snprintf(err, errlen, "sequence %d maps its page %d to %d, outside "
					 "the pool of %d pages", b->seq[t], j, row[j], kv->n_pages);
				return -1;
			}
		}
	}
	b->checked_page_size = kv->page_size;
	b->checked_n_pages = kv->n_pages;
	return 0;
}

/* Element offset of (position p, KV head h) in the pool, given the page
 * table row of p's sequence. */
static inline size_t kv_offset(const struct exl_kv_layer *kv, const int32_t *row, int p, int h)
{
	const size_t page = (size_t)row[p / kv->page_size];

	return ((page * (size_t)kv->n_kv_heads + (size_t)h) * (size_t)kv->page_size +
		(size_t)(p % kv->page_size)) * (size_t)kv->head_dim;
}

/* ---- kv_store --------------------------------------------------------- */

struct kv_store_job {
	const struct exl_cpu_ops *k;
	const struct exl_cpu_batch *b;
	const struct exl_kv_layer *kv;
	const float *kx, *vx;
};

static void kv_store_fn(void *ctx, int ith, int nth)
{
	const struct kv_store_job *j = ctx;
	const struct exl_kv_layer *kv = j->kv;
	const size_t hd = (size_t)kv->head_dim;
	uint16_t *K = kv->k;
	uint16_t *V = kv->v;
	size_t b, e;

	exl_pool_split((size_t)j->b->n_tokens * (size_t)kv->n_kv_heads, ith, nth, &b, &e);
	for (size_t r = b; r < e; r++) {
		const size_t t = r / (size_t)kv->n_kv_heads;
		const int h = (int)(r % (size_t)kv->n_kv_heads);
		const int32_t *row = j->b->page_table + (size_t)j->b->seq[t] * (size_t)j->b->max_pages;
		const size_t dst = kv_offset(kv, row, j->b->pos[t], h);

		j->k->f32_to_f16(K + dst, j->kx + r * hd, kv->head_dim);
		j->k->f32_to_f16(V + dst, j->vx + r * hd, kv->head_dim);
	}
}

void exl_cpu_kv_store(struct exl_pool *pool, const struct exl_cpu_ops *k,
		      const struct exl_cpu_batch *b, const struct exl_kv_layer *kv,
		      const float *kx, const float *vx)
{
	struct kv_store_job j = { k, b, kv, kx, vx };
	size_t work = (size_t)b->n_tokens * (size_t)kv->n_kv_heads * (size_t)kv->head_dim;

	if (pool && exl_pool_size(pool) > 1 && work >= PAR_MIN_WORK)
		exl_pool_run(pool, kv_store_fn, &j);
	else
		kv_store_fn(&j, 0, 1);
}

/* ---- attention -------------------------------------------------------- */

void exl_attn_scratch_free(struct exl_attn_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}

struct attention_job {
	const struct exl_cpu_ops *k;
	const struct exl_cpu_batch *b;
	const struct exl_kv_layer *kv;
	const float *q;
	float *out;
	int n_heads;
	float scale;
	float *scratch;       /* per thread: stride floats */
	size_t stride;
	_Atomic size_t next;  /* the next (token, head) pair to take */
};

static void attend_one(const struct attention_job *j, size_t item, float *acc, float *sbuf)
{
	const struct exl_kv_layer *kv = j->kv;
	const struct exl_cpu_batch *b = j->b;
	const size_t hd = (size_t)kv->head_dim;
	const size_t t = item / (size_t)j->n_heads;
	const int h = (int)(item % (size_t)j->n_heads);
	const int kvh = h / (j->n_heads / kv->n_kv_heads);
	const int32_t *row = b->page_table + (size_t)b->seq[t] * (size_t)b->max_pages;
	const int len = b->pos[t] + 1;
	const float *q = j->q + item * hd;
	const uint16_t *K = kv->k;
	const uint16_t *V = kv->v;
	struct exl_attn_state st = { -INFINITY, 0.0f, acc, sbuf };
	float *o = j->out + item * hd;

	memset(acc, 0, hd * sizeof(float));
	for (int p = 0; p < len;) {
		int span = kv->page_size - p % kv->page_size;
		size_t off = kv_offset(kv, row, p, kvh);

		if (span > len - p)
			span = len - p;
		if (span > EXL_ATTN_CHUNK)
			span = EXL_ATTN_CHUNK;
		j->k->attn_span(&st, q, K + off, V + off, span, kv->head_dim, j->scale);
		p += span;
	}
	/* l >= 1 (the maximum weighs 1) unless every score was -inf or NaN */
	const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
	for (size_t d = 0; d < hd; d++)
		o[d] = acc[d] * inv;
}

static void attention_fn(void *ctx, int ith, int nth)
{
	struct attention_job *j = ctx;
	const size_t total = (size_t)j->b->n_tokens * (size_t)j->n_heads;
	float *acc = j->scratch + (size_t)ith * j->stride;
	float *sbuf = acc + ((size_t)j->kv->head_dim + 15) / 16 * 16;

	(void)nth;
	/* Pairs are taken one at a time, last tokens (the longest windows in
	 * a prefill) first, so the threads finish together. */
	for (;;) {
		size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);

		if (i >= total)
			break;
		attend_one(j, total - 1 - i, acc, sbuf);
	}
}

int exl_cpu_attention(struct exl_pool *pool, const struct exl_cpu_ops *k,
		      struct exl_attn_scratch *scratch, const struct exl_cpu_batch *b,
		      const struct exl_kv_layer *kv, const float *q, float *out, int n_heads,
		      float scale, char *err, size_t errlen)
{
	struct attention_job j;
	int nth = pool ? exl_pool_size(pool) : 1;
	size_t stride, need, work = 0;

	if (n_heads <= 0 || n_heads > MAX_HEADS || n_heads < kv->n_kv_heads ||
	    n_heads % kv->n_kv_heads) {
		snprintf(err, errlen, "attention: %d query heads for %d KV heads (must be a "
			 "multiple)", n_heads, kv->n_kv_heads);
		return -1;
	}
	if (!isfinite(scale)) {
		snprintf(err, errlen, "attention: scale %g", (double)scale);
		return -1;
	}
	/* per thread: acc[head_dim] then scores[EXL_ATTN_CHUNK], each 64-byte
	 * aligned */
	stride = ((size_t)kv->head_dim + 15) / 16 * 16 + EXL_ATTN_CHUNK;
	need = stride * (size_t)nth;
	if (need > scratch->cap) {
		float *p = aligned_alloc(64, need * sizeof(float));

		if (!p) {
			snprintf(err, errlen, "attention: cannot allocate %zu bytes of scratch",
				 need * sizeof(float));
			return -1;
		}
		free(scratch->buf);
		scratch->buf = p;
		scratch->cap = need;
	}
	j.k = k;
	j.b = b;
	j.kv = kv;
	j.q = q;
	j.out = out;
	j.n_heads = n_heads;
	j.scale = scale;
	j.scratch = scratch->buf;
	j.stride = stride;
	atomic_init(&j.next, 0);
	for (int t = 0; t < b->n_tokens; t++)
		work += (size_t)b->pos[t] + 1;
	work *= (size_t)n_heads * (size_t)kv->head_dim;
	if (nth > 1 && work >= PAR_MIN_WORK)
		exl_pool_run(pool, attention_fn, &j);
	else
		attention_fn(&j, 0, 1);
	return 0;
}

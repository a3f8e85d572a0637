/* The paged KV cache on the CPU: the batch layout (set_batch), kv_store and
 * attention.
 *
 * Page layout (kernels/backend.h): page p holds page_size positions of one
 * sequence as [n_kv_heads][page_size][head_dim] F16, so the positions of one
 * KV head within a page are consecutive rows of head_dim.  Position `pos` of
 * KV head h is at element
 *   ((page * n_kv_heads + h) * page_size + pos % page_size) * head_dim
 * with page = page_table[seq * max_pages + pos / page_size] (the batch's
 * local_page_table for a KV layer whose table is 1).
 *
 * Attention runs one (token, head) pair at a time with an online softmax
 * (running maximum, denominator and weighted sum of V), folding in the
 * window's positions a page span of at most EXL_ATTN_CHUNK at a time, so a
 * thread needs head_dim + EXL_ATTN_CHUNK floats whatever the context length.
 *
 * A long window is cut into partitions whose softmax states are merged
 * (flash-decoding).  Where the cuts fall depends on the window's length
 * only, never on the batch: a position's output must be the same bits
 * whether it is decoded alone, beside other jobs, or as one of several
 * rows of its own sequence (a speculative step verifying drafted tokens,
 * daemon/core/generator/engine.c).  The batch only decides whether a
 * unit's partitions run on several threads or one after another in one.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/formats/elem_math.h"

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
	free(cb->seq_end);
	free(cb->tables[0].pages);
	free(cb->tables[1].pages);
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

/* Copies one page table of n_seqs rows of max_pages (0 and NULL: none). */
static int table_set(struct exl_cpu_page_table *pt, const int32_t *src, int n_seqs,
		     int max_pages, const char *name, char *err, size_t errlen)
{
	size_t table;

	pt->max_pages = 0;
	pt->checked_page_size = 0;
	if (!src && !max_pages)
		return 0;
	if (!src || max_pages <= 0) {
		snprintf(err, errlen, "set_batch: %s of %d pages per sequence%s", name, max_pages,
			 src ? "" : " without entries");
		return -1;
	}
	if ((size_t)n_seqs > MAX_TABLE / (size_t)max_pages) {
		snprintf(err, errlen, "set_batch: %s of %d x %d entries is too large", name,
			 n_seqs, max_pages);
		return -1;
	}
	table = (size_t)n_seqs * (size_t)max_pages;
	if (grow(&pt->pages, pt->cap, table)) {
		snprintf(err, errlen, "set_batch: out of memory for a %s of %zu entries", name,
			 table);
		return -1;
	}
	if (table > pt->cap)
		pt->cap = table;
	memcpy(pt->pages, src, table * sizeof(int32_t));
	pt->max_pages = max_pages;
	return 0;
}

int exl_cpu_batch_set(struct exl_cpu_batch *cb, const struct exl_batch_desc *b, char *err,
		      size_t errlen)
{
	size_t n;

	cb->n_tokens = 0;
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
	n = (size_t)b->n_tokens;
	for (size_t t = 0; t < n; t++) {
		if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs || b->pos[t] < 0) {
			snprintf(err, errlen, "set_batch: token %zu has sequence %d (of %d) at "
				 "position %d", t, b->seq[t], b->n_seqs, b->pos[t]);
			return -1;
		}
	}
	if (grow(&cb->pos, cb->cap_tokens, n) || grow(&cb->seq, cb->cap_tokens, n)) {
		snprintf(err, errlen, "set_batch: out of memory for %zu tokens", n);
		return -1;
	}
	if (n > cb->cap_tokens)
		cb->cap_tokens = n;
	if (table_set(&cb->tables[0], b->page_table, b->n_seqs, b->max_pages, "page table",
		      err, errlen) ||
	    table_set(&cb->tables[1], b->local_page_table, b->n_seqs, b->local_max_pages,
		      "local page table", err, errlen))
		return -1;
	if (grow(&cb->seq_end, cb->cap_seqs, (size_t)b->n_seqs)) {
		snprintf(err, errlen, "set_batch: out of memory for %d sequences", b->n_seqs);
		return -1;
	}
	if ((size_t)b->n_seqs > cb->cap_seqs)
		cb->cap_seqs = (size_t)b->n_seqs;
	memset(cb->seq_end, 0, (size_t)b->n_seqs * sizeof(int32_t));
	for (size_t t = 0; t < n; t++)
		if (b->pos[t] + 1 > cb->seq_end[b->seq[t]])
			cb->seq_end[b->seq[t]] = b->pos[t] + 1;
	memcpy(cb->pos, b->pos, n * sizeof(int32_t));
	memcpy(cb->seq, b->seq, n * sizeof(int32_t));
	cb->n_seqs = b->n_seqs;
	cb->n_tokens = b->n_tokens;
	return 0;
}

/* The first position a token at pos sees through a window (0: all). */
static inline int window_start(int pos, int window)
{
	return window > 0 && pos >= window ? pos - window + 1 : 0;
}

int exl_cpu_kv_check(struct exl_cpu_batch *b, const struct exl_kv_layer *kv, int window,
		     char *err, size_t errlen)
{
	struct exl_cpu_page_table *pt;

	if (b->n_tokens <= 0) {
		snprintf(err, errlen, "no batch layout (set_batch first)");
		return -1;
	}
	if (!kv || !kv->k || !kv->v || kv->page_size <= 0 || kv->n_kv_heads <= 0 ||
	    kv->n_kv_heads > MAX_HEADS || kv->head_dim <= 0 || kv->head_dim > MAX_HEAD_DIM ||
	    kv->n_pages <= 0 || kv->table < 0 || kv->table > 1) {
		snprintf(err, errlen, "malformed KV layer");
		return -1;
	}
	pt = &b->tables[kv->table];
	if (!pt->max_pages) {
		snprintf(err, errlen, "KV layer reads the local page table, the batch has none");
		return -1;
	}
	/* Every layer of a table has the same page geometry: check the table
	 * once per batch, again only for a window that reaches further back
	 * than the one checked (window 0 reaches back furthest). */
	if (pt->checked_page_size == kv->page_size && pt->checked_n_pages == kv->n_pages &&
	    (pt->checked_window == 0 || (window > 0 && window <= pt->checked_window)))
		return 0;
	for (int t = 0; t < b->n_tokens; t++) {
		const int last = b->pos[t] / kv->page_size;
		const int32_t *row = pt->pages + (size_t)b->seq[t] * (size_t)pt->max_pages;
		int first = window_start(b->pos[t], window) / kv->page_size;

		if (last >= pt->max_pages) {
			snprintf(err, errlen, "token %d at position %d needs page %d of its "
				 "sequence, the %spage table has %d", t, b->pos[t], last,
				 kv->table ? "local " : "", pt->max_pages);
			return -1;
		}
		/* A sequence's tokens come in order: from the previous token's
		 * last page on, each page is checked once. */
		if (t > 0 && b->seq[t - 1] == b->seq[t] && b->pos[t - 1] <= b->pos[t] &&
		    b->pos[t - 1] / kv->page_size > first)
			first = b->pos[t - 1] / kv->page_size;
		for (int j = first; j <= last; j++) {
			if (row[j] < 0 || row[j] >= kv->n_pages) {
				snprintf(err, errlen, "sequence %d maps its page %d to %d, outside "
					 "the %spool of %d pages", b->seq[t], j, row[j],
					 kv->table ? "local " : "", kv->n_pages);
				return -1;
			}
		}
	}
	pt->checked_page_size = kv->page_size;
	pt->checked_n_pages = kv->n_pages;
	pt->checked_window = window;
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
		const int32_t *row = exl_cpu_table_row(j->b, kv, j->b->seq[t]);
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

/* ---- attention --------------------------------------------------------
 * The query heads of a KV head (its group) go through the kernel together,
 * in pieces of 8, 4, 2 and 1 heads; a "unit" is one piece of one KV head of
 * one token.  A window of 2 * PART_MIN positions or more is cut into
 * partitions (part_count) whose softmax states are merged afterwards, as
 * flash-decoding does.  When there are too few units to keep the threads
 * busy (a decode step), the partitions of a unit are spread over the
 * threads ("split"); otherwise one thread computes a unit's partitions in
 * turn and merges them itself.  Both merge with merge_unit, so the result
 * is the same bits either way. */

/* Partitions are at least this many positions. */
#define PART_MIN 256
#define PART_MAX 64

/* Partitions of a window of len positions: a function of len alone (see
 * the top of the file). */
static int part_count(int len)
{
	int n = len / PART_MIN;

	if (n < 2)
		return 1;
	return n < PART_MAX ? n : PART_MAX;
}

void exl_attn_scratch_free(struct exl_attn_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

struct attention_job {
	const struct exl_cpu_ops *k;
	const struct exl_cpu_batch *b;
	const struct exl_kv_layer *kv;
	const float *q;
	float *out;
	int n_heads;
	int group;            /* query heads per KV head */
	int n_pieces;         /* pieces per group */
	bool split;           /* items are (unit, partition) pairs, else units */
	float scale;
	float softcap;
	int window;
	const float *sinks;   /* [n_heads] or NULL (exl_attn_params) */
	bool non_causal;      /* a token sees its sequence's last position here */
	unsigned char *scratch; /* per thread: thread_bytes */
	size_t thread_bytes;
	size_t local_off;     /* !split: offset in a thread's scratch of its PART_MAX
			       * partial states, 0 when no window is partitioned */
	float *partial;       /* split: PART_MAX partial states per unit */
	size_t partial_floats;
	size_t n_units;
	size_t n_items;
	_Atomic size_t next;  /* the next item to take */
};

/* Piece i of a group of g heads: first the whole 8s, then the rest in one
 * piece (kernel_group pads it). */
static void piece(int g, int i, int *start, int *size)
{
	*start = 8 * i;
	*size = g - 8 * i < 8 ? g - 8 * i : 8;
}

static int piece_count(int g)
{
	return (g + 7) / 8;
}

/* The group the kernels run for a piece of g heads: 1, 2, 4 or 8, the
 * heads past g with a zero query, their outputs dropped.  A piece of 3, 5,
 * 6 or 7 (Llama-3.2-3B's 24 heads on 8 KV heads, Qwen2.5's 7 or 6 per KV
 * head) cut into 4 + 2 + 1 read and converted its K and V rows once for
 * each part: in a decode from memory each part read them again
 * (bench_attn_streams --threads 1, 28 / 4 heads of 128 at 4096 positions:
 * 14.5-16.9 ms a step, where 32 / 4, a third more work, took 10.7). */
static int kernel_group(int g)
{
	return g <= 2 ? g : g <= 4 ? 4 : 8;
}

/* Where unit u's token, KV head and piece are. */
static void unit_of(const struct attention_job *j, size_t u, size_t *t, int *kvh, int *h0, int *g)
{
	const int pi = (int)(u % (size_t)j->n_pieces);
	const size_t tk = u / (size_t)j->n_pieces; /* t * n_kv_heads + kvh */

	*kvh = (int)(tk % (size_t)j->kv->n_kv_heads);
	*t = tk / (size_t)j->kv->n_kv_heads;
	piece(j->group, pi, h0, g);
	*h0 += *kvh * j->group;
}

/* Whether token t is the only one of its sequence in the batch (a decode
 * step's token), so that its window is read once, from memory.  A
 * sequence's tokens lie together in a batch; if some did not, this only
 * asks for lines that are there already. */
static bool token_alone(const struct exl_cpu_batch *b, size_t t)
{
	const int32_t s = b->seq[t];

	return (t == 0 || b->seq[t - 1] != s) && (t + 1 == (size_t)b->n_tokens || b->seq[t + 1] != s);
}

/* Asks for positions [p0, p1) of unit u's K and V, into L2, a chunk before
 * they are read, when its token is alone in its sequence.  Each run of a
 * page and head is one short span (4 KiB for pages of 32 positions of 64
 * dims) that the hardware prefetchers, which stop at 4 KiB boundaries,
 * take up only after its first misses: in a batched decode of many short
 * windows that was half of attention's time (tests/bench/
 * bench_attn_streams: 14 -> 19-20 GB/s on 2 Zen 4 cores).  The tokens
 * of a prompt share their windows, which the first of them brings into
 * the caches, and asking again only costs them (3 % of a prefill's). */
static void prefetch_span(const struct attention_job *j, size_t u, int p0, int p1)
{
	const struct exl_kv_layer *kv = j->kv;
	const size_t row_bytes = (size_t)kv->head_dim * sizeof(uint16_t);
	const int ps = kv->page_size;
	size_t t;
	int kvh, h0, g;

	unit_of(j, u, &t, &kvh, &h0, &g);
	if (!token_alone(j->b, t))
		return;
	const int32_t *row = exl_cpu_table_row(j->b, kv, j->b->seq[t]);

	for (int p = p0; p < p1;) {
		const int slot = p % ps;
		const size_t base = (((size_t)row[p / ps] * (size_t)kv->n_kv_heads + (size_t)kvh) *
				     (size_t)ps + (size_t)slot) * (size_t)kv->head_dim;
		const char *k = (const char *)((const uint16_t *)kv->k + base);
		const char *v = (const char *)((const uint16_t *)kv->v + base);
		int run = ps - slot < p1 - p ? ps - slot : p1 - p;

		for (size_t o = 0; o < (size_t)run * row_bytes; o += 64) {
			__builtin_prefetch(k + o, 0, 2);
			__builtin_prefetch(v + o, 0, 2);
		}
		p += run;
	}
}

/* Folds positions [p0, p1) of unit u's window into st (whose m, l and acc
 * start empty). */
static void attend_span(const struct attention_job *j, size_t u, int p0, int p1,
			unsigned char *scratch, struct exl_attn_state *st)
{
	const struct exl_kv_layer *kv = j->kv;
	const struct exl_cpu_batch *b = j->b;
	const size_t hd = (size_t)kv->head_dim;
	const uint16_t *K = kv->k;
	const uint16_t *V = kv->v;
	const int ps = kv->page_size;
	size_t t;
	int kvh, h0, g;

	unit_of(j, u, &t, &kvh, &h0, &g);
	const int32_t *row = exl_cpu_table_row(b, kv, b->seq[t]);
	const int kg = kernel_group(g);
	float *acc = (float *)(void *)scratch;
	const size_t ptr_off = align64((size_t)EXL_ATTN_MAX_GROUP * hd * sizeof(float)) +
			       align64((size_t)EXL_ATTN_MAX_GROUP * EXL_ATTN_CHUNK * sizeof(float));
	const uint16_t **kp = (const uint16_t **)(void *)(scratch + ptr_off);
	const uint16_t **vp = kp + EXL_ATTN_CHUNK;
	const float *q = j->q + (t * (size_t)j->n_heads + (size_t)h0) * hd;

	if (kg != g) {
		float *qpad = (float *)(void *)(scratch + ptr_off +
						align64(2 * EXL_ATTN_CHUNK * sizeof(uint16_t *)));

		memcpy(qpad, q, (size_t)g * hd * sizeof(float));
		memset(qpad + (size_t)g * hd, 0, (size_t)(kg - g) * hd * sizeof(float));
		q = qpad;
	}
	st->g = kg;
	st->softcap = j->softcap;
	st->q = q;
	st->acc = acc;
	st->s = (float *)(void *)(scratch +
				  align64((size_t)EXL_ATTN_MAX_GROUP * hd * sizeof(float)));
	for (int i = 0; i < kg; i++) {
		st->m[i] = -INFINITY;
		st->l[i] = 0.0f;
	}
	memset(acc, 0, (size_t)kg * hd * sizeof(float));

	for (int p = p0; p < p1;) {
		int n = 0;

		/* up to a chunk of positions, gathered over page boundaries */
		while (n < EXL_ATTN_CHUNK && p < p1) {
			const int slot = p % ps;
			const size_t base = (((size_t)row[p / ps] * (size_t)kv->n_kv_heads +
					      (size_t)kvh) * (size_t)ps + (size_t)slot) * hd;
			int run = ps - slot;

			if (run > p1 - p)
				run = p1 - p;
			if (run > EXL_ATTN_CHUNK - n)
				run = EXL_ATTN_CHUNK - n;
			for (int r = 0; r < run; r++, n++) {
				kp[n] = K + base + (size_t)r * hd;
				vp[n] = V + base + (size_t)r * hd;
			}
			p += run;
		}
		/* the kernel asks for the rest as it goes (exl_attn_prefetch) */
		for (int i = 0; i < n && i < EXL_ATTN_PF_AHEAD; i++)
			for (size_t o = 0; o < hd * sizeof(uint16_t); o += 64)
				__builtin_prefetch((const char *)kp[i] + o);
		if (p < p1)
			prefetch_span(j, u, p, p + EXL_ATTN_CHUNK < p1 ? p + EXL_ATTN_CHUNK : p1);
		j->k->attn_chunk(st, kp, vp, n, kv->head_dim, j->scale);
	}
}

/* Unit u's window: positions [*start, *end). */
static void unit_window(const struct attention_job *j, size_t u, int *start, int *end)
{
	const size_t t = u / (size_t)j->n_pieces / (size_t)j->kv->n_kv_heads;

	*start = window_start(j->b->pos[t], j->window);
	*end = j->non_causal ? j->b->seq_end[j->b->seq[t]] : j->b->pos[t] + 1;
}

/* Partition part of n_part of the window [start, end): [*p0, *p1). */
static void part_span(int start, int end, int n_part, int part, int *p0, int *p1)
{
	const int per = (end - start + n_part - 1) / n_part;

	*p0 = start + part * per < end ? start + part * per : end;
	*p1 = start + (part + 1) * per < end ? start + (part + 1) * per : end;
}

/* Head h's sink joins a finished state (m, l): the factor acc and l take
 * and the new l, as ggml's softmax with sinks (the maximum over the
 * scores and the sink). */
static float add_sink(const struct attention_job *j, int h, float m, float *l)
{
	if (!j->sinks)
		return 1.0f;
	const float sink = j->sinks[h];
	const float mx = sink > m ? sink : m;
	const float f = exl_softmax_rescale(m, mx);

	*l = *l * f + exl_softmax_weight(sink, mx);
	return f;
}

/* A window in one partition: the output straight from its state. */
static void write_out(const struct attention_job *j, size_t u, const struct exl_attn_state *st)
{
	const size_t hd = (size_t)j->kv->head_dim;
	size_t t;
	int kvh, h0, g;

	unit_of(j, u, &t, &kvh, &h0, &g);
	for (int i = 0; i < g; i++) {
		float *o = j->out + (t * (size_t)j->n_heads + (size_t)(h0 + i)) * hd;
		float l = st->l[i];
		const float f = add_sink(j, h0 + i, st->m[i], &l);
		/* l >= 1 (the maximum weighs 1) unless every score was -inf or NaN */
		const float inv = l > 0.0f ? f / l : 0.0f;

		for (size_t d = 0; d < hd; d++)
			o[d] = st->acc[(size_t)i * hd + d] * inv;
	}
}

/* A partial state: m[8], l[8], acc[8][hd]. */
static void save_partial(const struct attention_job *j, const struct exl_attn_state *st,
			 float *pa)
{
	memcpy(pa, st->m, sizeof(st->m));
	memcpy(pa + EXL_ATTN_MAX_GROUP, st->l, sizeof(st->l));
	memcpy(pa + 2 * EXL_ATTN_MAX_GROUP, st->acc,
	       (size_t)st->g * (size_t)j->kv->head_dim * sizeof(float));
}

/* Combines unit u's n_part partial states (partial_floats apart, in
 * partition order) into its output.  The one merge both schedules use. */
static void merge_unit(const struct attention_job *j, size_t u, const float *parts, int n_part)
{
	const size_t hd = (size_t)j->kv->head_dim;
	size_t t;
	int kvh, h0, g;

	unit_of(j, u, &t, &kvh, &h0, &g);
	for (int i = 0; i < g; i++) {
		float *o = j->out + (t * (size_t)j->n_heads + (size_t)(h0 + i)) * hd;
		float m = -INFINITY, l = 0.0f;

		for (int p = 0; p < n_part; p++) {
			float mp = parts[(size_t)p * j->partial_floats + (size_t)i];

			m = mp > m ? mp : m;
		}
		for (size_t d = 0; d < hd; d++)
			o[d] = 0.0f;
		for (int p = 0; p < n_part; p++) {
			const float *pa = parts + (size_t)p * j->partial_floats;
			const float f = exl_softmax_rescale(pa[i], m);
			const float *acc = pa + 2 * EXL_ATTN_MAX_GROUP + (size_t)i * hd;

			if (f == 0.0f)
				continue; /* an empty partition */
			l += pa[EXL_ATTN_MAX_GROUP + i] * f;
			for (size_t d = 0; d < hd; d++)
				o[d] += acc[d] * f;
		}
		const float f = add_sink(j, h0 + i, m, &l);
		const float inv = l > 0.0f ? f / l : 0.0f;
		for (size_t d = 0; d < hd; d++)
			o[d] *= inv;
	}
}

/* One item: a whole unit, or (split) one partition of one. */
static void attend_item(const struct attention_job *j, size_t item, unsigned char *scratch)
{
	const size_t u = j->split ? item / PART_MAX : item;
	struct exl_attn_state st;
	int start, end, p0, p1;

	unit_window(j, u, &start, &end);
	const int n_part = part_count(end - start);

	if (n_part == 1) {
		if (j->split && item % PART_MAX)
			return;
		attend_span(j, u, start, end, scratch, &st);
		write_out(j, u, &st);
		return;
	}
	if (j->split) {
		const int part = (int)(item % PART_MAX);

		if (part >= n_part)
			return;
		part_span(start, end, n_part, part, &p0, &p1);
		attend_span(j, u, p0, p1, scratch, &st);
		save_partial(j, &st, j->partial + item * j->partial_floats);
		return;
	}
	float *local = (float *)(void *)(scratch + j->local_off);

	for (int part = 0; part < n_part; part++) {
		part_span(start, end, n_part, part, &p0, &p1);
		attend_span(j, u, p0, p1, scratch, &st);
		save_partial(j, &st, local + (size_t)part * j->partial_floats);
	}
	merge_unit(j, u, local, n_part);
}

/* prefetch_span of an item's first chunk. */
static void prefetch_item(const struct attention_job *j, size_t item)
{
	const size_t u = j->split ? item / PART_MAX : item;
	int start, end, p0 = 0, p1 = 0;

	unit_window(j, u, &start, &end);
	const int n_part = part_count(end - start);

	part_span(start, end, n_part, j->split ? (int)(item % PART_MAX) : 0, &p0, &p1);
	if (p0 < p1)
		prefetch_span(j, u, p0, p0 + EXL_ATTN_CHUNK < p1 ? p0 + EXL_ATTN_CHUNK : p1);
}

static void attention_fn(void *ctx, int ith, int nth)
{
	struct attention_job *j = ctx;
	const size_t total = j->n_items;
	unsigned char *scratch = j->scratch + (size_t)ith * j->thread_bytes;
	size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);

	(void)nth;
	/* Taken one at a time, last tokens (the longest windows in a prefill)
	 * first, so the threads finish together; each thread holds the next
	 * item it will do while it does one, so that the next one's first
	 * chunk is on its way meanwhile. */
	if (i < total)
		prefetch_item(j, total - 1 - i);
	while (i < total) {
		size_t next = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);

		if (next < total)
			prefetch_item(j, total - 1 - next);
		attend_item(j, total - 1 - i, scratch);
		i = next;
	}
}

/* Split: combines the partitions of each partitioned unit into the output. */
static void merge_fn(void *ctx, int ith, int nth)
{
	struct attention_job *j = ctx;
	size_t ub, ue;

	exl_pool_split(j->n_units, ith, nth, &ub, &ue);
	for (size_t u = ub; u < ue; u++) {
		int start, end;

		unit_window(j, u, &start, &end);
		const int n_part = part_count(end - start);

		if (n_part > 1)
			merge_unit(j, u, j->partial + u * PART_MAX * j->partial_floats, n_part);
	}
}

int exl_cpu_attention(struct exl_pool *pool, const struct exl_cpu_ops *k,
		      struct exl_attn_scratch *scratch, const struct exl_cpu_batch *b,
		      const struct exl_kv_layer *kv, const float *q, float *out, int n_heads,
		      const struct exl_attn_params *ap, char *err, size_t errlen)
{
	struct attention_job j;
	const int nth = pool ? exl_pool_size(pool) : 1;
	const size_t hd = (size_t)kv->head_dim;
	size_t need, work = 0;
	int max_len = 0;

	if (n_heads <= 0 || n_heads > MAX_HEADS || n_heads < kv->n_kv_heads ||
	    n_heads % kv->n_kv_heads) {
		snprintf(err, errlen, "attention: %d query heads for %d KV heads (must be a "
			 "multiple)", n_heads, kv->n_kv_heads);
		return -1;
	}
	if (!isfinite(ap->scale) || !(ap->softcap >= 0.0f) || !isfinite(ap->softcap) ||
	    ap->window < 0 || (ap->non_causal && ap->window)) {
		snprintf(err, errlen, "attention: scale %g, softcap %g, window %d%s",
			 (double)ap->scale, (double)ap->softcap, ap->window,
			 ap->non_causal && ap->window ? " with non-causal attention" : "");
		return -1;
	}
	memset(&j, 0, sizeof(j));
	j.k = k;
	j.b = b;
	j.kv = kv;
	j.q = q;
	j.out = out;
	j.n_heads = n_heads;
	j.group = n_heads / kv->n_kv_heads;
	j.n_pieces = piece_count(j.group);
	j.scale = ap->scale;
	j.softcap = ap->softcap;
	j.window = ap->window;
	j.sinks = ap->sinks;
	j.non_causal = ap->non_causal;
	j.n_units = (size_t)b->n_tokens * (size_t)kv->n_kv_heads * (size_t)j.n_pieces;
	for (int t = 0; t < b->n_tokens; t++) {
		const int end = ap->non_causal ? b->seq_end[b->seq[t]] : b->pos[t] + 1;
		const int len = end - window_start(b->pos[t], ap->window);

		work += (size_t)len;
		if (len > max_len)
			max_len = len;
	}
	work *= (size_t)n_heads * hd;
	/* Spreading partitions over threads is worth it only when the units
	 * alone leave threads idle and some window is long enough to cut. */
	j.split = nth > 1 && j.n_units < 2 * (size_t)nth && part_count(max_len) > 1;
	j.n_items = j.split ? j.n_units * PART_MAX : j.n_units;

	/* per thread: acc[8][hd], scores[8][chunk], K and V row pointers, a
	 * padded piece's queries [8][hd], and (not split, a window
	 * partitioned) PART_MAX partial states */
	j.partial_floats = 2 * EXL_ATTN_MAX_GROUP + (size_t)EXL_ATTN_MAX_GROUP * hd;
	j.thread_bytes = align64((size_t)EXL_ATTN_MAX_GROUP * hd * sizeof(float)) +
			 align64((size_t)EXL_ATTN_MAX_GROUP * EXL_ATTN_CHUNK * sizeof(float)) +
			 align64(2 * EXL_ATTN_CHUNK * sizeof(uint16_t *)) +
			 align64((size_t)EXL_ATTN_MAX_GROUP * hd * sizeof(float));
	if (!j.split && part_count(max_len) > 1) {
		j.local_off = j.thread_bytes;
		j.thread_bytes += align64(PART_MAX * j.partial_floats * sizeof(float));
	}
	need = j.thread_bytes * (size_t)nth;
	if (j.split)
		need += j.n_units * PART_MAX * j.partial_floats * sizeof(float);
	if (need > scratch->cap) {
		void *p = aligned_alloc(64, align64(need));

		if (!p) {
			snprintf(err, errlen, "attention: cannot allocate %zu bytes of scratch",
				 need);
			return -1;
		}
		free(scratch->buf);
		scratch->buf = p;
		scratch->cap = need;
	}
	j.scratch = scratch->buf;
	j.partial = (float *)(void *)(j.scratch + j.thread_bytes * (size_t)nth);
	atomic_init(&j.next, 0);
	if (nth > 1 && work >= PAR_MIN_WORK)
		exl_pool_run(pool, attention_fn, &j);
	else
		attention_fn(&j, 0, 1);
	if (j.split) {
		if (j.n_units > 1)
			exl_pool_run(pool, merge_fn, &j);
		else
			merge_fn(&j, 0, 1);
	}
	return 0;
}

/* The CPU backend's ops other than matmul: per-row kernels in several
 * instruction-set variants, and the drivers that check an op's arguments
 * and spread it over the worker pool.
 *
 * Variants: "scalar" (portable reference, everywhere), "avx2" (AVX2 + FMA +
 * F16C) and "avx512" (AVX-512 F/BW/VL on top of those), each compiled in its
 * own file with its own -m flags.  The tests check every variant this CPU
 * can run against the scalar one.
 */
#ifndef EXL_CPU_OPS_H
#define EXL_CPU_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/pool.h"
#include "kernels/formats/elem_math.h"

/* Positions attention folds in at once (the size of its score buffer), and
 * the most query heads one call handles (heads that read the same KV head
 * go together, so each F16 K/V row is converted once for all of them). */
#define EXL_ATTN_CHUNK 64
#define EXL_ATTN_MAX_GROUP 8

/* The online-softmax state of g query heads that read one KV head: per head,
 * the running maximum m of the scores, the sum l of exp(score - m) and
 * acc[head_dim], the sum of exp(score - m) * V. */
struct exl_attn_state {
	int g;            /* 1, 2, 4 or 8 */
	const float *q;   /* [g][head_dim] */
	float m[EXL_ATTN_MAX_GROUP];
	float l[EXL_ATTN_MAX_GROUP];
	float *acc;       /* [g][head_dim] */
	float *s;         /* scratch: [g][EXL_ATTN_CHUNK] */
	float softcap;    /* > 0: scores are soft-capped (exl_attn_softcap) */
};

/* Soft-caps the scores of a chunk, g rows of n (kernels call it between
 * scoring and the softmax when st->softcap > 0). */
static inline void exl_attn_softcap(float *s, int g, int n, float cap)
{
	for (int i = 0; i < g; i++)
		for (int j = 0; j < n; j++)
			s[i * EXL_ATTN_CHUNK + j] = exl_softcap(s[i * EXL_ATTN_CHUNK + j], cap);
}

/* A unit's K/V rows are short runs (a page of one head) that the hardware
 * prefetchers do not follow in time, and the first loads of each stalled
 * (batched decode: most of attention's time).  The kernels ask, while they
 * score positions [j, j + p), for K EXL_ATTN_PF_AHEAD positions on and for
 * those positions' V, which the pass over values reads after the scores;
 * the gather asks for the first EXL_ATTN_PF_AHEAD positions' K. */
#define EXL_ATTN_PF_AHEAD 8

static inline void exl_attn_prefetch(const uint16_t *const *k, const uint16_t *const *v, int j, int p,
				     int n, size_t head_dim)
{
	for (int i = j; i < j + p; i++) {
		for (size_t o = 0; o < head_dim * sizeof(uint16_t); o += 64) {
			if (i + EXL_ATTN_PF_AHEAD < n)
				__builtin_prefetch((const char *)k[i + EXL_ATTN_PF_AHEAD] + o);
			__builtin_prefetch((const char *)v[i] + o);
		}
	}
}

struct exl_cpu_ops {
	const char *name;
	/* sum of x[i]^2 */
	float (*sum_sq)(const float *x, int n);
	/* y[i] = (x[i] * s) * w[i] */
	void (*scale_mul)(float *y, const float *x, const float *w, float s, int n);
	/* y[i] += x[i] */
	void (*add)(float *y, const float *x, size_t n);
	/* g[i] = silu(g[i]) * u[i] */
	void (*swiglu)(float *g, const float *u, size_t n);
	/* softmax of one row, in place */
	void (*softmax)(float *x, int n);
	/* Rotates the first n_rot elements of one head by per-element tables
	 * (see ops_rope.c): y[j] = x[j] * c[j] + x[partner(j)] * s[j] with
	 * partner j ^ 1 (adjacent pairs) or j +- n_rot / 2 (neox). */
	void (*rope_adjacent)(float *x, const float *c, const float *s, int n_rot);
	void (*rope_neox)(float *x, const float *c, const float *s, int n_rot);
	/* F32 -> F16, round to nearest even (bit-identical to exl_fp32_to_fp16) */
	void (*f32_to_f16)(uint16_t *y, const float *x, int n);
	/* Folds n (1..EXL_ATTN_CHUNK) positions into st: k[j] and v[j] are
	 * position j's F16 rows of head_dim. */
	void (*attn_chunk)(struct exl_attn_state *st, const uint16_t *const *k,
			   const uint16_t *const *v, int n, int head_dim, float scale);
};

extern const struct exl_cpu_ops exl_cpu_ops_scalar;
#if defined(__x86_64__)
extern const struct exl_cpu_ops exl_cpu_ops_avx2;
extern const struct exl_cpu_ops exl_cpu_ops_avx512;
#endif

/* The named variant, or NULL when the name is unknown or this CPU cannot
 * run it.  Names of the matmul kernel sets are accepted too ("avx512vnni"
 * means the avx512 ops), so one name picks both. */
const struct exl_cpu_ops *exl_cpu_ops_get(const char *name);

/* The best variant this CPU runs. */
const struct exl_cpu_ops *exl_cpu_ops_best(void);

/* ---- drivers ----------------------------------------------------------
 * pool may be NULL (the calling thread does everything).  The drivers of
 * ops that cannot fail on valid memory return nothing; the backend checks
 * their arguments first. */

void exl_cpu_rmsnorm(struct exl_pool *pool, const struct exl_cpu_ops *k, float *y,
		     const float *x, const float *w, int n, int dim, float eps);
void exl_cpu_add(struct exl_pool *pool, const struct exl_cpu_ops *k, float *y, const float *x,
		 size_t count);
void exl_cpu_add_bias(struct exl_pool *pool, const struct exl_cpu_ops *k, float *y,
		      const float *b, int n, int dim);
void exl_cpu_swiglu(struct exl_pool *pool, const struct exl_cpu_ops *k, float *g,
		    const float *u, size_t count);
void exl_cpu_softmax(struct exl_pool *pool, const struct exl_cpu_ops *k, float *x, int n,
		     int dim);
void exl_cpu_gather_rows(struct exl_pool *pool, float *dst, const float *src,
			 const int32_t *rows, int n, int dim);
void exl_cpu_scale(struct exl_pool *pool, float *x, float s, size_t count);
void exl_cpu_softcap(struct exl_pool *pool, float *x, float cap, size_t count);
void exl_cpu_geglu(struct exl_pool *pool, float *g, const float *u, size_t count);
void exl_cpu_swiglu_oai(struct exl_pool *pool, float *g, const float *u, size_t count,
			float alpha, float limit);
void exl_cpu_gelu(struct exl_pool *pool, float *x, size_t count);
void exl_cpu_layernorm(struct exl_pool *pool, float *y, const float *x, const float *w,
		       const float *b, int n, int dim, float eps);
void exl_cpu_add_rows_scaled(struct exl_pool *pool, float *y, const float *x,
			     const int32_t *rows, const float *w, int n, int dim);

/* RoPE tables for one batch: per token, cos and signed sin of every rotated
 * element (n_tokens x n_rot each), rebuilt only when the positions or the
 * parameters change.  Owned by the backend; zero-initialize. */
struct exl_rope_cache {
	float *c;
	float *s;
	size_t cap;         /* floats in each of c and s */
	bool valid;
	unsigned batch_id;  /* the batch the tables were made for */
	int n_tokens;
	struct exl_rope_params p; /* what they were made for */
	unsigned last_use;  /* when several caches take turns: the oldest goes */
};

/* Whether rc holds the tables of batch_id for n tokens under p. */
bool exl_rope_cache_matches(const struct exl_rope_cache *rc, unsigned batch_id, int n,
			    const struct exl_rope_params *p);

void exl_rope_cache_free(struct exl_rope_cache *rc);

/* x[n][n_heads][head_dim] rotated in place; pos[n] the positions.  batch_id
 * identifies pos (the same id promises the same positions).  -1 with a
 * message on a bad shape or when the tables cannot be allocated. */
int exl_cpu_rope(struct exl_pool *pool, const struct exl_cpu_ops *k, struct exl_rope_cache *rc,
		 unsigned batch_id, const int32_t *pos, float *x, int n, int n_heads,
		 int head_dim, const struct exl_rope_params *p, char *err, size_t errlen);

struct exl_cpu_page_table {
	int max_pages;       /* 0: the batch has none (local, unused) */
	int32_t *pages;      /* [n_seqs][max_pages] */
	size_t cap;
	/* the KV page geometry and window it was last checked against */
	int checked_page_size;
	int checked_n_pages;
	int checked_window;
};

/* The host copy of a batch layout (set_batch). */
struct exl_cpu_batch {
	int n_tokens;
	int n_seqs;
	int32_t *pos;
	int32_t *seq;
	size_t cap_tokens;
	int32_t *seq_end;   /* [n_seqs]: 1 + the last position each has here */
	size_t cap_seqs;
	/* [0] page_table, [1] local_page_table: a KV layer reads tables[table] */
	struct exl_cpu_page_table tables[2];
};

/* Row of sequence seq in the page table kv reads through. */
static inline const int32_t *exl_cpu_table_row(const struct exl_cpu_batch *b,
					       const struct exl_kv_layer *kv, int seq)
{
	const struct exl_cpu_page_table *pt = &b->tables[kv->table];

	return pt->pages + (size_t)seq * (size_t)pt->max_pages;
}

/* Copies b into cb after checking it.  -1 with a message (cb then holds no
 * batch). */
int exl_cpu_batch_set(struct exl_cpu_batch *cb, const struct exl_batch_desc *b, char *err,
		      size_t errlen);
void exl_cpu_batch_free(struct exl_cpu_batch *cb);

/* Checks that every page a batch token writes or reads is in kv's pool:
 * those from its window's first position (window 0: position 0) to its
 * own. */
int exl_cpu_kv_check(struct exl_cpu_batch *b, const struct exl_kv_layer *kv, int window,
		     char *err, size_t errlen);

void exl_cpu_kv_store(struct exl_pool *pool, const struct exl_cpu_ops *k,
		      const struct exl_cpu_batch *b, const struct exl_kv_layer *kv,
		      const float *kx, const float *vx);

/* Per-thread attention scratch, grown as needed.  Owned by the backend;
 * zero-initialize. */
struct exl_attn_scratch {
	void *buf;
	size_t cap; /* bytes */
};

void exl_attn_scratch_free(struct exl_attn_scratch *s);

/* -1 with a message when the head counts do not fit kv or the scratch
 * cannot be allocated. */
int exl_cpu_attention(struct exl_pool *pool, const struct exl_cpu_ops *k,
		      struct exl_attn_scratch *scratch, const struct exl_cpu_batch *b,
		      const struct exl_kv_layer *kv, const float *q, float *out, int n_heads,
		      const struct exl_attn_params *ap, char *err, size_t errlen);

#endif

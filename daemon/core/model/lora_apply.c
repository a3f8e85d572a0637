/* The adapters' low-rank products inside a batched forward pass: the
 * batch's rows grouped by adapter once per pass, then at each projection
 * every adapter in the batch runs over its own rows only (lora.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model_internal.h"

/* One adapter's rows in the current batch. */
struct lora_group {
	const struct exl_lora *lora;
	int n, n_out;
	int32_t *rows;      /* batch rows, ascending */
	float *scale;       /* their user scales */
	int32_t *rows_out;  /* indices among the rows the last layer keeps */
	float *scale_out;
};

struct exl_lora_batch {
	int n_groups, cap_groups;
	struct lora_group *g;
	int cap_rows;       /* rows each group's arrays hold */
	float *w;           /* host: one call's per-row scales */
	/* backend scratch */
	int cap_tokens;
	int max_in, max_rank, max_out;
	float *xa;          /* gathered inputs [cap][max_in] */
	float *t;           /* A x [cap][max_rank] */
	float *u;           /* B (A x) [cap][max_out] */
};

static void free_groups(struct exl_lora_batch *lb)
{
	for (int i = 0; i < lb->cap_groups; i++) {
		free(lb->g[i].rows);
		free(lb->g[i].scale);
		free(lb->g[i].rows_out);
		free(lb->g[i].scale_out);
	}
	free(lb->g);
	lb->g = NULL;
	lb->cap_groups = 0;
}

static void free_dev(struct exl_model *m, struct exl_lora_batch *lb)
{
	struct exl_backend *be = m->be;

	if (lb->xa)
		be->ops->free(be, lb->xa);
	if (lb->t)
		be->ops->free(be, lb->t);
	if (lb->u)
		be->ops->free(be, lb->u);
	lb->xa = lb->t = lb->u = NULL;
	lb->cap_tokens = 0;
}

void exl_lora_batch_free(struct exl_model *m)
{
	struct exl_lora_batch *lb = m->lora_batch;

	if (!lb)
		return;
	free_groups(lb);
	free_dev(m, lb);
	free(lb->w);
	free(lb);
	m->lora_batch = NULL;
}

bool exl_lora_batch_active(const struct exl_model *m)
{
	return m->lora_batch && m->lora_batch->n_groups > 0;
}

/* Group arrays for n_groups groups of up to n rows each. */
static int reserve_groups(struct exl_lora_batch *lb, int n_groups, int n)
{
	if (n > lb->cap_rows) {
		int cap = (n + 31) & ~31;

		free_groups(lb);
		free(lb->w);
		lb->w = malloc((size_t)cap * sizeof(*lb->w));
		if (!lb->w)
			return -1;
		lb->cap_rows = cap;
	}
	if (n_groups > lb->cap_groups) {
		struct lora_group *g = realloc(lb->g, (size_t)n_groups * sizeof(*g));

		if (!g)
			return -1;
		lb->g = g;
		for (int i = lb->cap_groups; i < n_groups; i++) {
			memset(&g[i], 0, sizeof(g[i]));
			g[i].rows = malloc((size_t)lb->cap_rows * sizeof(int32_t));
			g[i].scale = malloc((size_t)lb->cap_rows * sizeof(float));
			g[i].rows_out = malloc((size_t)lb->cap_rows * sizeof(int32_t));
			g[i].scale_out = malloc((size_t)lb->cap_rows * sizeof(float));
			lb->cap_groups = i + 1;
			if (!g[i].rows || !g[i].scale || !g[i].rows_out || !g[i].scale_out)
				return -1;
		}
	}
	return 0;
}

static int reserve_dev(struct exl_model *m, struct exl_lora_batch *lb, int n, int max_rank)
{
	const struct exl_hparams *hp = &m->hp;
	struct exl_backend *be = m->be;
	int q_dim = hp->n_head * hp->head_dim;
	int kv_dim = hp->n_head_kv * hp->head_dim;
	int dim = hp->n_embd;

	dim = q_dim > dim ? q_dim : dim;
	dim = kv_dim > dim ? kv_dim : dim;
	dim = hp->n_ff > dim ? hp->n_ff : dim;
	if (n <= lb->cap_tokens && max_rank <= lb->max_rank)
		return 0;
	free_dev(m, lb);
	int cap = (n + 31) & ~31;
	int rank = max_rank > lb->max_rank ? max_rank : lb->max_rank;

	lb->xa = be->ops->alloc(be, (size_t)cap * (size_t)dim * sizeof(float));
	lb->t = be->ops->alloc(be, (size_t)cap * (size_t)rank * sizeof(float));
	lb->u = be->ops->alloc(be, (size_t)cap * (size_t)dim * sizeof(float));
	if (!lb->xa || !lb->t || !lb->u) {
		free_dev(m, lb);
		return -1;
	}
	lb->cap_tokens = cap;
	lb->max_in = lb->max_out = dim;
	lb->max_rank = rank;
	return 0;
}

static struct lora_group *group_of(struct exl_lora_batch *lb, const struct exl_lora *l)
{
	for (int i = 0; i < lb->n_groups; i++)
		if (lb->g[i].lora == l)
			return &lb->g[i];
	return NULL;
}

/* Row r (ascending) with scale s; one adapter named twice by a job adds
 * its scales, so no row is in a group twice. */
static void put_row(int32_t *rows, float *scale, int *n, int32_t r, float s)
{
	if (*n > 0 && rows[*n - 1] == r) {
		scale[*n - 1] += s;
		return;
	}
	rows[*n] = r;
	scale[(*n)++] = s;
}

int exl_lora_batch_plan(struct exl_model *m, const struct exl_batch *b,
			const int32_t *rows_out, int n_out, char *err, size_t errlen)
{
	struct exl_lora_batch *lb = m->lora_batch;
	int n_adapters = 0, max_rank = 0;

	if (lb)
		lb->n_groups = 0;
	for (int j = 0; j < b->n_seqs; j++) {
		const struct exl_lora_set *set = b->seqs[j]->lora;

		if (!set)
			continue;
		if (set->n < 0 || set->n > EXL_LORA_MAX_PER_JOB) {
			snprintf(err, errlen, "batch sequence %d: %d adapters", j, set->n);
			return -1;
		}
		for (int k = 0; k < set->n; k++) {
			const struct exl_lora *l = set->use[k].lora;

			if (!l || l->base != m) {
				snprintf(err, errlen, "batch sequence %d: adapter %s is not bound to "
					 "this model", j, l ? l->path : "(null)");
				return -1;
			}
			n_adapters++;
			max_rank = l->max_rank > max_rank ? l->max_rank : max_rank;
		}
	}
	if (!n_adapters)
		return 0;
	if (!lb) {
		lb = calloc(1, sizeof(*lb));
		if (!lb)
			goto oom;
		m->lora_batch = lb;
	}
	if (reserve_groups(lb, n_adapters, b->n_tokens) ||
	    reserve_dev(m, lb, b->n_tokens, max_rank))
		goto oom;
	for (int i = 0; i < b->n_tokens; i++) {
		const struct exl_lora_set *set = b->seqs[b->seq[i]]->lora;

		for (int k = 0; set && k < set->n; k++) {
			struct lora_group *g = group_of(lb, set->use[k].lora);

			if (!g) {
				g = &lb->g[lb->n_groups++];
				g->lora = set->use[k].lora;
				g->n = g->n_out = 0;
			}
			put_row(g->rows, g->scale, &g->n, i, set->use[k].scale);
		}
	}
	for (int o = 0; o < n_out; o++) {
		const struct exl_lora_set *set = b->seqs[b->seq[rows_out[o]]]->lora;

		for (int k = 0; set && k < set->n; k++) {
			struct lora_group *g = group_of(lb, set->use[k].lora);

			put_row(g->rows_out, g->scale_out, &g->n_out, o, set->use[k].scale);
		}
	}
	return 0;
oom:
	if (lb)
		lb->n_groups = 0;
	snprintf(err, errlen, "out of memory for the adapters of a batch of %d tokens",
		 b->n_tokens);
	return -1;
}

void exl_lora_batch_apply(struct exl_model *m, int il, const float *x, bool gathered, int n_t,
			  const enum exl_lora_target *t, float *const *y)
{
	struct exl_lora_batch *lb = m->lora_batch;
	const struct exl_backend_ops *ops = m->be->ops;
	struct exl_backend *be = m->be;

	if (!lb)
		return;
	for (int i = 0; i < lb->n_groups; i++) {
		const struct lora_group *g = &lb->g[i];
		const struct exl_lora_pair *pairs = &g->lora->pair[(size_t)il * EXL_LORA_N_TARGETS];
		const int32_t *rows = gathered ? g->rows_out : g->rows;
		const float *scale = gathered ? g->scale_out : g->scale;
		int cnt = gathered ? g->n_out : g->n;
		bool have = false;

		if (!cnt)
			continue;
		/* the targets share their input: one gather for all of them */
		for (int k = 0; k < n_t; k++) {
			const struct exl_lora_pair *p = &pairs[t[k]];

			if (!p->a.data)
				continue;
			if (!have)
				ops->gather_rows(be, lb->xa, x, rows, cnt, (int)p->a.cols);
			have = true;
			for (int r = 0; r < cnt; r++)
				lb->w[r] = scale[r] * p->alpha_over_r;
			ops->matmul(be, &p->a, lb->xa, lb->t, cnt);
			ops->matmul(be, &p->b, lb->t, lb->u, cnt);
			ops->add_rows_scaled(be, y[k], lb->u, rows, lb->w, cnt, (int)p->b.rows);
		}
	}
}

/* RoPE on the CPU.
 *
 * The angles come from exl_rope_cos_sin (kernels/formats/elem_math.h), the formula
 *   theta = pos * freq_scale * freq_base^(-2i / n_rot)
 * in double for every pair i, shared with the CUDA backend; the rotation
 * itself is float.  They depend only on the positions, so they are
 * tabulated once per batch and reused by every layer's q and k: per
 * token, n_rot cosines c and signed sines s laid out per element, so a
 * kernel computes y[j] = x[j] * c[j] + x[partner] * s[j] with no shuffling
 * of the tables:
 *   adjacent pairs: c[2i] = c[2i+1] = cos, s[2i] = -sin, s[2i+1] = sin
 *   neox halves:    c[i] = c[i+h] = cos,   s[i] = -sin,   s[i+h] = sin
 * Frequency factors divide pair i's angle, attn_factor (and a query's
 * attention temperature) scales both tables, and YaRN blends each angle
 * with its unscaled self (exl_rope_cos_sin_yarn).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/ops.h"
#include "kernels/formats/elem_math.h"

/* Floats of x below which one thread does it all. */
#define PAR_MIN_FLOATS 16384
/* Table entries (each a pow, cos and sin in double) likewise. */
#define PAR_MIN_ANGLES 512
/* The widest head the tables are made for; bounds n_rot. */
#define ROPE_MAX_DIM 65536

void exl_rope_cache_free(struct exl_rope_cache *rc)
{
	free(rc->c);
	free(rc->s);
	rc->c = NULL;
	rc->s = NULL;
	rc->cap = 0;
	rc->valid = false;
}

struct rope_job {
	const struct exl_cpu_ops *k;
	const struct exl_rope_cache *rc;
	const int32_t *pos;
	bool build;      /* fill the tables of the slice first */
	float *x;
	int n, n_heads, head_dim;
};

static void build_row(const struct exl_rope_params *p, int32_t pos, float *c, float *s)
{
	const int n_rot = p->n_rot;
	const int h = n_rot / 2;
	const float mscale = p->attn_factor * exl_rope_temp(pos, p->temp_scale, p->temp_floor);

	for (int i = 0; i < h; i++) {
		float cs, sn;
		int a, b;

		exl_rope_cos_sin_yarn(pos, i, n_rot, p->freq_base, p->freq_scale,
				      p->freq_factors ? p->freq_factors[i] : 1.0f, p->ext_factor,
				      p->ramp_lo, p->ramp_hi, mscale, &cs, &sn);
		exl_rope_pair(i, n_rot, p->neox, &a, &b);

		c[a] = cs;
		c[b] = cs;
		s[a] = -sn;
		s[b] = sn;
	}
}

static void rope_fn(void *ctx, int ith, int nth)
{
	const struct rope_job *j = ctx;
	const struct exl_rope_cache *rc = j->rc;
	const size_t n_rot = (size_t)rc->p.n_rot;
	const size_t row = (size_t)j->n_heads * (size_t)j->head_dim;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	for (size_t t = b; t < e; t++) {
		float *c = rc->c + t * n_rot;
		float *s = rc->s + t * n_rot;
		float *x = j->x + t * row;

		if (j->build)
			build_row(&rc->p, j->pos[t], c, s);
		for (int h = 0; h < j->n_heads; h++, x += j->head_dim) {
			if (rc->p.neox)
				j->k->rope_neox(x, c, s, rc->p.n_rot);
			else
				j->k->rope_adjacent(x, c, s, rc->p.n_rot);
		}
	}
}

static int reserve(struct exl_rope_cache *rc, size_t floats, char *err, size_t errlen)
{
	float *c, *s;

	if (floats <= rc->cap)
		return 0;
	c = malloc(floats * sizeof(float));
	s = malloc(floats * sizeof(float));
	if (!c || !s) {
		free(c);
		free(s);
		snprintf(err, errlen, "rope: cannot allocate tables of %zu floats", floats);
		return -1;
	}
	exl_rope_cache_free(rc);
	rc->c = c;
	rc->s = s;
	rc->cap = floats;
	return 0;
}

bool exl_rope_cache_matches(const struct exl_rope_cache *rc, unsigned batch_id, int n,
			    const struct exl_rope_params *p)
{
	return rc->valid && rc->batch_id == batch_id && rc->n_tokens == n &&
	       exl_rope_params_same(&rc->p, p);
}

int exl_cpu_rope(struct exl_pool *pool, const struct exl_cpu_ops *k, struct exl_rope_cache *rc,
		 unsigned batch_id, const int32_t *pos, float *x, int n, int n_heads,
		 int head_dim, const struct exl_rope_params *p, char *err, size_t errlen)
{
	struct rope_job j = { k, rc, pos, false, x, n, n_heads, head_dim };

	if (!p || n <= 0 || n_heads <= 0 || head_dim <= 0 || !x || !pos) {
		snprintf(err, errlen, "rope: bad shape (%d tokens, %d heads of %d)", n, n_heads,
			 head_dim);
		return -1;
	}
	if (p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 || p->n_rot > ROPE_MAX_DIM) {
		snprintf(err, errlen, "rope: %d rotated dimensions for heads of %d (must be "
			 "even, 2..head_dim)", p->n_rot, head_dim);
		return -1;
	}
	if (!(p->freq_base > 0.0f) || !isfinite(p->freq_base) || !(p->freq_scale > 0.0f) ||
	    !isfinite(p->freq_scale) || !(p->attn_factor > 0.0f) || !isfinite(p->attn_factor)) {
		snprintf(err, errlen, "rope: frequency base %g, scale %g and attention factor %g "
			 "must be positive", (double)p->freq_base, (double)p->freq_scale,
			 (double)p->attn_factor);
		return -1;
	}
	if (!(p->ext_factor >= 0.0f && p->ext_factor <= 1.0f) || !isfinite(p->ramp_lo) ||
	    !isfinite(p->ramp_hi)) {
		snprintf(err, errlen, "rope: YaRN weight %g (must be 0..1), ramp %g..%g",
			 (double)p->ext_factor, (double)p->ramp_lo, (double)p->ramp_hi);
		return -1;
	}
	if (!isfinite(p->temp_scale) || (p->temp_scale != 0.0f && p->temp_floor < 1)) {
		snprintf(err, errlen, "rope: attention temperature %g over %d positions",
			 (double)p->temp_scale, p->temp_floor);
		return -1;
	}
	for (int i = 0; p->freq_factors && i < p->n_rot / 2; i++) {
		if (!(p->freq_factors[i] > 0.0f) || !isfinite(p->freq_factors[i])) {
			snprintf(err, errlen, "rope: frequency factor %d is %g (must be positive)",
				 i, (double)p->freq_factors[i]);
			return -1;
		}
	}
	if (!exl_rope_cache_matches(rc, batch_id, n, p)) {
		rc->valid = false;
		if (reserve(rc, (size_t)n * (size_t)p->n_rot, err, errlen))
			return -1;
		rc->batch_id = batch_id;
		rc->n_tokens = n;
		rc->p = *p;
		j.build = true;
	}
	if (pool && exl_pool_size(pool) > 1 &&
	    ((j.build && (size_t)n * (size_t)p->n_rot >= PAR_MIN_ANGLES) ||
	     (size_t)n * (size_t)n_heads * (size_t)head_dim >= PAR_MIN_FLOATS))
		exl_pool_run(pool, rope_fn, &j);
	else
		rope_fn(&j, 0, 1);
	rc->valid = true;
	return 0;
}

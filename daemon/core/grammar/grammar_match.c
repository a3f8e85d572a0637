/* The incremental parse state: sets of parse stacks (like llama.cpp's),
 * with interned stacks and states and memoised byte transitions, so a
 * state seen before costs one table lookup per byte.
 *
 * Advancing a state on byte b: every stack whose top terminal matches b
 * moves past it, then is expanded until its top is a terminal again
 * (returning from finished rules, entering every alternative of a
 * referenced rule).  A reference that ends its alternative does not keep
 * a frame, so right recursion (how repetitions are written) stays flat.
 * Expansion is bounded in steps, depth and stack count: an ambiguous
 * grammar gets an error, never a hang.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_internal.h"
#include "daemon/core/grammar/vocab_trie.h"

/* Past these the tables are rebuilt around the current state. */
#define RECLAIM_NODES (1u << 19)
#define RECLAIM_SETS (1u << 17)
#define RECLAIM_POOL (1u << 21)
#define RECLAIM_TR (1u << 20)

static int grow(void **ptr, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*ptr, c * size);
	if (!q)
		return -1;
	*ptr = q;
	*cap = c;
	return 0;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static int oom(char *err, size_t errlen)
{
	snprintf(err, errlen, "out of memory in the grammar matcher");
	return -1;
}

/* ---- interning ---- */

static int node_hash_grow(struct exl_gmatch *m)
{
	size_t cap = m->node_hash_cap ? m->node_hash_cap * 2 : 1024;
	uint32_t *h = calloc(cap, sizeof(*h));

	if (!h)
		return -1;
	for (size_t i = 1; i < m->n_nodes; i++) {
		const struct gnode *n = &m->nodes[i];
		size_t j = mix((uint64_t)n->pos << 32 | n->parent) & (cap - 1);

		while (h[j])
			j = (j + 1) & (cap - 1);
		h[j] = (uint32_t)i;
	}
	free(m->node_hash);
	m->node_hash = h;
	m->node_hash_cap = cap;
	return 0;
}

static uint32_t intern_node(struct exl_gmatch *m, uint32_t pos, uint32_t parent,
			    char *err, size_t errlen)
{
	if ((m->n_nodes + 1) * 2 > m->node_hash_cap && node_hash_grow(m)) {
		oom(err, errlen);
		return 0;
	}
	size_t mask = m->node_hash_cap - 1;
	size_t j = mix((uint64_t)pos << 32 | parent) & mask;

	for (; m->node_hash[j]; j = (j + 1) & mask) {
		const struct gnode *n = &m->nodes[m->node_hash[j]];

		if (n->pos == pos && n->parent == parent)
			return m->node_hash[j];
	}
	uint32_t depth = m->nodes[parent].depth + 1;

	if (depth > EXL_GMATCH_MAX_DEPTH) {
		snprintf(err, errlen, "grammar nesting deeper than %d rules", EXL_GMATCH_MAX_DEPTH);
		return 0;
	}
	if (m->n_nodes >= UINT32_MAX - 1 ||
	    grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof(*m->nodes))) {
		oom(err, errlen);
		return 0;
	}
	uint32_t id = (uint32_t)m->n_nodes++;

	m->nodes[id].pos = pos;
	m->nodes[id].parent = parent;
	m->nodes[id].depth = depth;
	m->node_hash[j] = id;
	return id;
}

static uint64_t set_hash_of(const uint32_t *ids, size_t n)
{
	uint64_t h = n;

	for (size_t i = 0; i < n; i++)
		h = mix(h ^ ids[i]) + i;
	return h;
}

static int set_hash_grow(struct exl_gmatch *m)
{
	size_t cap = m->set_hash_cap ? m->set_hash_cap * 2 : 256;
	uint32_t *h = calloc(cap, sizeof(*h));

	if (!h)
		return -1;
	for (size_t i = 0; i < m->n_sets; i++) {
		size_t j = m->sets[i].hash & (cap - 1);

		while (h[j])
			j = (j + 1) & (cap - 1);
		h[j] = (uint32_t)i + 1;
	}
	free(m->set_hash);
	m->set_hash = h;
	m->set_hash_cap = cap;
	return 0;
}

/* The state of the sorted, distinct stacks ids[0..n). */
static int32_t intern_set(struct exl_gmatch *m, const uint32_t *ids, size_t n,
			  char *err, size_t errlen)
{
	uint64_t h = set_hash_of(ids, n);

	if ((m->n_sets + 1) * 2 > m->set_hash_cap && set_hash_grow(m)) {
		oom(err, errlen);
		return GSET_ERROR;
	}
	size_t mask = m->set_hash_cap - 1;
	size_t j = h & mask;

	for (; m->set_hash[j]; j = (j + 1) & mask) {
		const struct gset *s = &m->sets[m->set_hash[j] - 1];

		if (s->hash == h && s->n == n &&
		    !memcmp(m->pool + s->first, ids, n * sizeof(*ids)))
			return (int32_t)(m->set_hash[j] - 1);
	}
	if (m->n_sets >= INT32_MAX - 1 ||
	    grow((void **)&m->sets, &m->cap_sets, m->n_sets + 1, sizeof(*m->sets)) ||
	    grow((void **)&m->pool, &m->cap_pool, m->n_pool + n, sizeof(*m->pool))) {
		oom(err, errlen);
		return GSET_ERROR;
	}
	struct gset *s = &m->sets[m->n_sets];

	memset(s, 0, sizeof(*s));
	s->first = (uint32_t)m->n_pool;
	s->n = (uint32_t)n;
	s->hash = h;
	s->complete = n && ids[0] == 0;
	memcpy(m->pool + m->n_pool, ids, n * sizeof(*ids));
	m->n_pool += n;
	m->set_hash[j] = (uint32_t)m->n_sets + 1;
	return (int32_t)m->n_sets++;
}

/* ---- expansion ---- */

static int add_out(struct exl_gmatch *m, uint32_t id, char *err, size_t errlen)
{
	if (grow((void **)&m->out, &m->cap_out, m->n_out + 1, sizeof(*m->out)))
		return oom(err, errlen);
	m->out[m->n_out++] = id;
	return 0;
}

static int push_work(struct exl_gmatch *m, size_t *n, uint32_t pos, uint32_t parent,
		     char *err, size_t errlen)
{
	if (grow((void **)&m->work, &m->cap_work, *n + 1, sizeof(*m->work)))
		return oom(err, errlen);
	m->work[*n].pos = pos;
	m->work[*n].parent = parent;
	(*n)++;
	return 0;
}

/* Adds to out every expanded stack reached from element pos on top of
 * parent. */
static int expand(struct exl_gmatch *m, uint32_t pos, uint32_t parent, uint32_t *steps,
		  char *err, size_t errlen)
{
	const struct exl_grammar *g = m->g;
	size_t n = 0;

	if (push_work(m, &n, pos, parent, err, errlen))
		return -1;
	while (n) {
		struct gwork w = m->work[--n];
		const struct gel *e = &g->el[w.pos];

		if (++*steps > EXL_GMATCH_MAX_STEPS) {
			snprintf(err, errlen, "grammar too ambiguous: more than %u expansion steps "
				 "for one byte", EXL_GMATCH_MAX_STEPS);
			return -1;
		}
		if (gel_is_end(e)) {
			if (!w.parent) {
				if (add_out(m, 0, err, errlen))
					return -1;
			} else if (push_work(m, &n, m->nodes[w.parent].pos, m->nodes[w.parent].parent,
					     err, errlen)) {
				return -1;
			}
		} else if (e->type == GEL_REF) {
			uint32_t cont = w.parent;

			if (!gel_is_end(e + 1)) {
				cont = intern_node(m, w.pos + 1, w.parent, err, errlen);
				if (!cont)
					return -1;
			}
			uint32_t a0 = g->rule_alt[e->arg];

			for (uint32_t a = 0; a < g->rule_n_alt[e->arg]; a++)
				if (push_work(m, &n, g->alt_start[a0 + a], cont, err, errlen))
					return -1;
		} else {
			uint32_t id = intern_node(m, w.pos, w.parent, err, errlen);

			if (!id || add_out(m, id, err, errlen))
				return -1;
		}
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts and dedups out, bounds it, interns it. */
static int32_t finish_out(struct exl_gmatch *m, char *err, size_t errlen)
{
	size_t k = 0;

	if (!m->n_out)
		return GSET_DEAD;
	qsort(m->out, m->n_out, sizeof(*m->out), cmp_u32);
	for (size_t i = 0; i < m->n_out; i++)
		if (!k || m->out[i] != m->out[k - 1])
			m->out[k++] = m->out[i];
	if (k > EXL_GMATCH_MAX_STACKS) {
		snprintf(err, errlen, "grammar too ambiguous: %zu parse stacks at once (the limit "
			 "is %d)", k, EXL_GMATCH_MAX_STACKS);
		return GSET_ERROR;
	}
	return intern_set(m, m->out, k, err, errlen);
}

static int32_t advance(struct exl_gmatch *m, int32_t s, uint8_t b, char *err, size_t errlen)
{
	const struct exl_grammar *g = m->g;
	uint32_t steps = 0;
	uint32_t first = m->sets[s].first, n = m->sets[s].n;

	m->n_out = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = m->pool[first + i];

		if (!id)
			continue;
		const struct gnode *nd = &m->nodes[id];
		uint32_t pos = nd->pos, parent = nd->parent;

		if (gel_matches(g, &g->el[pos], b) && expand(m, pos + 1, parent, &steps, err, errlen))
			return GSET_ERROR;
	}
	return finish_out(m, err, errlen);
}

static int32_t start_set(struct exl_gmatch *m, char *err, size_t errlen)
{
	const struct exl_grammar *g = m->g;
	uint32_t steps = 0;
	uint32_t a0 = g->rule_alt[g->root];

	m->n_out = 0;
	for (uint32_t a = 0; a < g->rule_n_alt[g->root]; a++)
		if (expand(m, g->alt_start[a0 + a], 0, &steps, err, errlen))
			return GSET_ERROR;
	int32_t s = finish_out(m, err, errlen);

	if (s == GSET_DEAD) {
		snprintf(err, errlen, "the grammar matches nothing");
		return GSET_ERROR;
	}
	return s;
}

/* ---- memoised transitions ---- */

static int tr_grow(struct exl_gmatch *m)
{
	size_t cap = m->cap_tr ? m->cap_tr * 2 : 4096;
	struct gtr *t = calloc(cap, sizeof(*t));

	if (!t)
		return -1;
	for (size_t i = 0; i < m->cap_tr; i++) {
		if (!m->tr[i].key)
			continue;
		size_t j = mix(m->tr[i].key) & (cap - 1);

		while (t[j].key)
			j = (j + 1) & (cap - 1);
		t[j] = m->tr[i];
	}
	free(m->tr);
	m->tr = t;
	m->cap_tr = cap;
	return 0;
}

int32_t exl_gmatch_step(struct exl_gmatch *m, int32_t s, uint8_t b, char *err, size_t errlen)
{
	int32_t *arr = m->sets[s].tr;

	if (arr && arr[b] != GSET_UNKNOWN)
		return arr[b];
	if ((m->n_tr + 1) * 2 > m->cap_tr && tr_grow(m)) {
		oom(err, errlen);
		return GSET_ERROR;
	}
	uint64_t key = ((uint64_t)(uint32_t)s << 8 | b) + 1;
	size_t mask = m->cap_tr - 1;
	size_t j = mix(key) & mask;

	for (; m->tr[j].key; j = (j + 1) & mask) {
		if (m->tr[j].key == key) {
			if (arr)
				arr[b] = m->tr[j].val;
			return m->tr[j].val;
		}
	}
	int32_t v = advance(m, s, b, err, errlen);

	if (v == GSET_ERROR)
		return v;
	/* advance() grows the node and set tables, never this one: j holds. */
	m->tr[j].key = key;
	m->tr[j].val = v;
	m->n_tr++;
	if (arr)
		arr[b] = v;
	return v;
}

/* ---- reclaiming ---- */

static void clear_tables(struct exl_gmatch *m)
{
	for (size_t i = 0; i < m->n_sets; i++) {
		free(m->sets[i].tr);
		free(m->sets[i].mask[0]);
		free(m->sets[i].mask[1]);
	}
	m->n_sets = 0;
	m->n_pool = 0;
	m->n_tr_arrays = 0;
	m->n_nodes = 1;
	if (m->node_hash)
		memset(m->node_hash, 0, m->node_hash_cap * sizeof(*m->node_hash));
	if (m->set_hash)
		memset(m->set_hash, 0, m->set_hash_cap * sizeof(*m->set_hash));
	if (m->tr)
		memset(m->tr, 0, m->cap_tr * sizeof(*m->tr));
	m->n_tr = 0;
	m->mask_ring_n = 0;
	m->mask_ring_head = 0;
}

int exl_gmatch_maybe_reclaim(struct exl_gmatch *m, char *err, size_t errlen)
{
	if (m->n_nodes < RECLAIM_NODES && m->n_sets < m->reclaim_states &&
	    m->n_pool < RECLAIM_POOL && m->n_tr < RECLAIM_TR)
		return 0;
	/* Copy the current state's stacks out as position lists, bottom
	 * first, then intern them again in empty tables. */
	const struct gset *cur = &m->sets[m->cur];
	size_t total = 0, n = cur->n;
	uint32_t *lens = malloc((n + 1) * sizeof(*lens));
	uint32_t *pos = NULL;
	int rc = -1;

	if (!lens)
		return oom(err, errlen);
	for (size_t i = 0; i < n; i++) {
		lens[i] = 0;
		for (uint32_t id = m->pool[cur->first + i]; id; id = m->nodes[id].parent)
			lens[i]++;
		total += lens[i];
	}
	pos = malloc((total + 1) * sizeof(*pos));
	if (!pos) {
		oom(err, errlen);
		goto out;
	}
	size_t at = 0;

	for (size_t i = 0; i < n; i++) {
		size_t k = at + lens[i];

		for (uint32_t id = m->pool[cur->first + i]; id; id = m->nodes[id].parent)
			pos[--k] = m->nodes[id].pos;
		at += lens[i];
	}
	clear_tables(m);
	m->st.reclaims++;
	m->n_out = 0;
	at = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t id = 0;

		for (uint32_t k = 0; k < lens[i]; k++) {
			id = intern_node(m, pos[at + k], id, err, errlen);
			if (!id)
				goto out;
		}
		at += lens[i];
		if (add_out(m, id, err, errlen))
			goto out;
	}
	m->cur = finish_out(m, err, errlen);
	if (m->cur < 0)
		goto out;
	m->start = start_set(m, err, errlen);
	if (m->start < 0)
		goto out;
	rc = 0;
out:
	free(lens);
	free(pos);
	return rc;
}

uint32_t exl_gmatch_node(struct exl_gmatch *m, uint32_t pos, uint32_t parent, char *err,
			 size_t errlen)
{
	return intern_node(m, pos, parent, err, errlen);
}

int32_t exl_gmatch_set(struct exl_gmatch *m, uint32_t *ids, size_t n, char *err, size_t errlen)
{
	size_t k = 0;

	qsort(ids, n, sizeof(*ids), cmp_u32);
	for (size_t i = 0; i < n; i++)
		if (!k || ids[i] != ids[k - 1])
			ids[k++] = ids[i];
	return intern_set(m, ids, k, err, errlen);
}

/* ---- the interface ---- */

struct exl_gmatch *exl_gmatch_create(const struct exl_grammar *g, char *err, size_t errlen)
{
	struct exl_gmatch *m = calloc(1, sizeof(*m));

	if (!m) {
		oom(err, errlen);
		return NULL;
	}
	m->g = g;
	m->reclaim_states = RECLAIM_SETS;
	m->nodes = malloc(64 * sizeof(*m->nodes));
	if (!m->nodes) {
		oom(err, errlen);
		goto fail;
	}
	m->cap_nodes = 64;
	m->n_nodes = 1;
	m->nodes[0].pos = UINT32_MAX;
	m->nodes[0].parent = 0;
	m->nodes[0].depth = 0;
	m->start = start_set(m, err, errlen);
	if (m->start < 0)
		goto fail;
	m->cur = m->start;
	return m;
fail:
	exl_gmatch_free(m);
	return NULL;
}

void exl_gmatch_free(struct exl_gmatch *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_sets; i++) {
		free(m->sets[i].tr);
		free(m->sets[i].mask[0]);
		free(m->sets[i].mask[1]);
	}
	free(m->nodes);
	free(m->node_hash);
	free(m->sets);
	free(m->set_hash);
	free(m->pool);
	free(m->tr);
	free(m->out);
	free(m->work);
	free(m->walk);
	free(m->scratch_mask);
	free(m->mask_ring);
	free(m);
}

int exl_gmatch_reset(struct exl_gmatch *m, char *err, size_t errlen)
{
	m->cur = m->start;
	return exl_gmatch_maybe_reclaim(m, err, errlen);
}

int exl_gmatch_feed(struct exl_gmatch *m, const uint8_t *p, size_t n, char *err, size_t errlen)
{
	int32_t s;

	if (exl_gmatch_maybe_reclaim(m, err, errlen))
		return -1;
	s = m->cur;
	for (size_t i = 0; i < n; i++) {
		s = exl_gmatch_step(m, s, p[i], err, errlen);
		if (s == GSET_ERROR)
			return -1;
		if (s == GSET_DEAD)
			return 0;
	}
	m->cur = s;
	return 1;
}

bool exl_gmatch_complete(const struct exl_gmatch *m)
{
	return m->sets[m->cur].complete;
}

bool exl_gmatch_can_continue(const struct exl_gmatch *m)
{
	const struct gset *s = &m->sets[m->cur];

	return s->n > (s->complete ? 1u : 0u);
}

void exl_gmatch_stats(const struct exl_gmatch *m, struct exl_gmatch_stats *s)
{
	*s = m->st;
	s->stacks = m->sets[m->cur].n;
	s->states = m->n_sets;
	s->transitions = m->n_tr;
}

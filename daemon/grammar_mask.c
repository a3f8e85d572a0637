/* Token masks: the vocabulary tree walked together with the parse state.
 * Each tree edge is one memoised byte transition; a subtree whose prefix
 * the grammar rejects is never entered.  The mask of a state is cached,
 * so a state that comes back (the inside of a string, say) costs a copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar.h"
#include "daemon/grammar_internal.h"
#include "daemon/vocab_trie.h"

/* Bytes of cached masks per matcher. */
#define MASK_CACHE_BYTES (4u << 20)
/* A state walked from this often gets a direct transition table (1 KiB),
 * up to this many tables. */
#define HOT_VISITS 4
#define MAX_TR_ARRAYS 4096

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

static int oom(char *err, size_t errlen)
{
	snprintf(err, errlen, "out of memory computing a grammar mask");
	return -1;
}

/* States walked from often get a direct transition table. */
static void visit(struct exl_gmatch *m, int32_t s)
{
	struct gset *g = &m->sets[s];

	if (g->tr || ++g->visits < HOT_VISITS || m->n_tr_arrays >= MAX_TR_ARRAYS)
		return;
	g->tr = malloc(256 * sizeof(*g->tr));
	if (!g->tr)
		return;
	for (int b = 0; b < 256; b++)
		g->tr[b] = GSET_UNKNOWN;
	m->n_tr_arrays++;
}

static int walk(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t node,
		int32_t set, int skip_byte, uint32_t *mask, char *err, size_t errlen)
{
	const struct exl_vocab_node *nodes = t->nodes;
	size_t n = 0;

	if (grow((void **)&m->walk, &m->cap_walk, 1, sizeof(*m->walk)))
		return oom(err, errlen);
	m->walk[n].node = node;
	m->walk[n].set = set;
	n++;
	m->st.mask_walks++;
	while (n) {
		struct gwalk w = m->walk[--n];
		const struct exl_vocab_node *nd = &nodes[w.node];
		uint32_t c0 = nd->first_child, c1 = c0 + nd->n_child;

		visit(m, w.set);
		if (grow((void **)&m->walk, &m->cap_walk, n + nd->n_child, sizeof(*m->walk)))
			return oom(err, errlen);
		m->st.edges_walked += nd->n_child;
		for (uint32_t c = c0; c < c1; c++) {
			const struct exl_vocab_node *ch = &nodes[c];

			if (w.node == node && ch->byte == skip_byte)
				continue;
			int32_t s = gmatch_step(m, w.set, ch->byte, err, errlen);

			if (s == GSET_ERROR)
				return -1;
			if (s == GSET_DEAD)
				continue;
			for (uint32_t k = 0; k < ch->n_tok; k++) {
				uint32_t id = (uint32_t)t->toks[ch->tok_first + k];

				mask[id >> 5] |= 1u << (id & 31);
			}
			if (ch->n_child) {
				m->walk[n].node = c;
				m->walk[n].set = s;
				n++;
			}
		}
	}
	return 0;
}

static void evict_one(struct exl_gmatch *m)
{
	int32_t s = m->mask_ring[m->mask_ring_head];

	m->mask_ring_head = (m->mask_ring_head + 1) % m->mask_ring_cap;
	m->mask_ring_n--;
	free(m->sets[s].mask);
	m->sets[s].mask = NULL;
}

/* Switches the cache to trie t (a matcher normally sees only one). */
static void cache_for(struct exl_gmatch *m, const struct exl_vocab_trie *t)
{
	if (m->mask_trie == t)
		return;
	while (m->mask_ring_n)
		evict_one(m);
	m->mask_trie = t;
	m->mask_words = ((size_t)t->n_vocab + 31) / 32;
	size_t cap = MASK_CACHE_BYTES / (m->mask_words * 4);

	if (cap < 1)
		cap = 1;
	free(m->mask_ring);
	m->mask_ring = malloc(cap * sizeof(*m->mask_ring));
	m->mask_ring_cap = m->mask_ring ? cap : 0;
	m->mask_ring_head = 0;
}

int exl_gmatch_mask_from(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t node,
			 int skip_byte, uint32_t *mask, char *err, size_t errlen)
{
	if (node >= t->n_nodes) {
		snprintf(err, errlen, "grammar mask: no vocabulary tree node %u", node);
		return -1;
	}
	if (gmatch_maybe_reclaim(m, err, errlen))
		return -1;
	return walk(m, t, node, m->cur, skip_byte, mask, err, errlen);
}

int exl_gmatch_mask(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t *mask,
		    char *err, size_t errlen)
{
	if (gmatch_maybe_reclaim(m, err, errlen))
		return -1;
	cache_for(m, t);
	size_t words = m->mask_words;
	struct gset *s = &m->sets[m->cur];

	if (s->mask) {
		for (size_t i = 0; i < words; i++)
			mask[i] |= s->mask[i];
		m->st.mask_hits++;
		return 0;
	}
	if (grow((void **)&m->scratch_mask, &m->cap_scratch_mask, words, sizeof(*mask)))
		return oom(err, errlen);
	memset(m->scratch_mask, 0, words * sizeof(*mask));
	if (walk(m, t, EXL_VOCAB_TRIE_ROOT, m->cur, -1, m->scratch_mask, err, errlen))
		return -1;
	for (size_t i = 0; i < words; i++)
		mask[i] |= m->scratch_mask[i];
	if (!m->mask_ring_cap)
		return 0;
	if (m->mask_ring_n == m->mask_ring_cap)
		evict_one(m);
	uint32_t *keep = malloc(words * sizeof(*keep));

	if (!keep)
		return 0;
	memcpy(keep, m->scratch_mask, words * sizeof(*keep));
	m->sets[m->cur].mask = keep;
	m->mask_ring[(m->mask_ring_head + m->mask_ring_n) % m->mask_ring_cap] = m->cur;
	m->mask_ring_n++;
	return 0;
}

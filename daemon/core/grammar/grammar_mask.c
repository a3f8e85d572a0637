/* Token masks: the vocabulary tree walked together with the parse state.
 * Each tree edge is one memoised byte transition; a subtree whose prefix
 * the grammar rejects is never entered.  The mask of a state is cached,
 * so a state that comes back (the inside of a string, say) costs a copy.
 *
 * Counted repetitions (a string of at most 64 characters) make a new
 * state per character.  A token can use up at most as many levels of the
 * repetition as it has bytes, so levels beyond that are cut off for the
 * cache key (canon_set): states that differ only deeper down share a
 * mask.  Cutting at the longest token's length is exact for every token;
 * cutting at EXL_VOCAB_SHORT bytes is exact for the tokens that short, so
 * when that merges more states the short tokens' mask is cached under the
 * shorter cut and the few longer tokens are fed one by one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_internal.h"
#include "daemon/core/grammar/vocab_trie.h"

/* Bytes of cached masks per matcher. */
#define MASK_CACHE_BYTES (4u << 20)
/* Direct transition tables (1 KiB each) per matcher. */
#define MAX_TR_ARRAYS 2048

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

/* A state walked from gets a direct transition table while there is
 * room (the hash table answers otherwise). */
static int32_t *tr_array(struct exl_gmatch *m, int32_t s)
{
	struct gset *g = &m->sets[s];

	if (g->tr || m->n_tr_arrays >= MAX_TR_ARRAYS)
		return g->tr;
	g->tr = malloc(256 * sizeof(*g->tr));
	if (!g->tr)
		return NULL;
	for (int b = 0; b < 256; b++)
		g->tr[b] = GSET_UNKNOWN;
	m->n_tr_arrays++;
	return g->tr;
}

/* Marks the tokens below node (at most max_depth bytes from the root)
 * that continue set. */
static int walk(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t node,
		int32_t set, int skip_byte, unsigned max_depth, uint32_t *mask, char *err,
		size_t errlen)
{
	const struct exl_vocab_node *nodes = t->nodes;
	const int32_t *toks = t->toks;
	size_t n = 0;

	/* Each node is pushed at most once. */
	if (grow((void **)&m->walk, &m->cap_walk, t->n_nodes + 1, sizeof(*m->walk)))
		return oom(err, errlen);
	struct gwalk *stack = m->walk;

	stack[n].node = node;
	stack[n].set = set;
	n++;
	m->st.mask_walks++;
	while (n) {
		struct gwalk w = stack[--n];
		const struct exl_vocab_node *nd = &nodes[w.node];
		uint32_t c0 = nd->first_child, c1 = c0 + nd->n_child;
		int32_t *tr = tr_array(m, w.set);

		m->st.edges_walked += nd->n_child;
		if (c0 < c1 && nodes[c0].depth > max_depth)
			continue;
		for (uint32_t c = c0; c < c1; c++) {
			const struct exl_vocab_node *ch = &nodes[c];
			int32_t s = tr ? tr[ch->byte] : GSET_UNKNOWN;

			if (s == GSET_UNKNOWN) {
				if (w.node == node && ch->byte == skip_byte)
					continue;
				s = exl_gmatch_step(m, w.set, ch->byte, err, errlen);
				if (s == GSET_ERROR)
					return -1;
			} else if (w.node == node && ch->byte == skip_byte) {
				continue;
			}
			if (s < 0)
				continue;
			for (uint32_t k = 0; k < ch->n_tok; k++) {
				uint32_t id = (uint32_t)toks[ch->tok_first + k];

				mask[id >> 5] |= 1u << (id & 31);
			}
			if (ch->n_child) {
				stack[n].node = c;
				stack[n].set = s;
				n++;
			}
		}
	}
	return 0;
}

/* The state masks are cached under: levels of bounded repetitions deeper
 * than the longest token are cut to that depth.  No token can use up
 * that many levels, so the walk -- and the mask -- are the same, and a
 * string with maxLength 200 costs one walk, not one per character. */
static uint32_t canon_pos(const struct exl_grammar *g, uint32_t pos, uint32_t cut)
{
	uint32_t r = g->el_rule[pos], lvl = g->chain_level[r];

	if (lvl <= cut)
		return pos;
	uint32_t r2 = r - (lvl - cut);

	return g->alt_start[g->rule_alt[r2]] + (pos - g->alt_start[g->rule_alt[r]]);
}

static int32_t canon_set(struct exl_gmatch *m, int32_t s, int which, uint32_t cut, char *err,
			 size_t errlen)
{
	const struct exl_grammar *g = m->g;

	if (!g->has_chains)
		return s;
	if (m->sets[s].canon_level[which] == cut)
		return m->sets[s].canon[which];
	uint32_t first = m->sets[s].first, n = m->sets[s].n;
	uint32_t *ids = malloc(((size_t)n + 1) * sizeof(*ids));
	uint32_t *chain = NULL;
	size_t cap_chain = 0;
	bool changed = false;
	int32_t c = GSET_ERROR;

	if (!ids) {
		oom(err, errlen);
		return GSET_ERROR;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = m->pool[first + i];
		size_t depth = 0;

		/* The stack's nodes, top first; rebuilt bottom up. */
		for (uint32_t x = id; x; x = m->nodes[x].parent) {
			if (grow((void **)&chain, &cap_chain, depth + 1, sizeof(*chain))) {
				oom(err, errlen);
				goto out;
			}
			chain[depth++] = x;
		}
		uint32_t top = 0;
		bool same = true;

		for (size_t k = depth; k-- > 0; ) {
			uint32_t pos = m->nodes[chain[k]].pos, p2 = canon_pos(g, pos, cut);

			if (same && p2 == pos) {
				top = chain[k];
				continue;
			}
			same = false;
			top = exl_gmatch_node(m, p2, top, err, errlen);
			if (!top)
				goto out;
		}
		ids[i] = top;
		changed |= !same;
	}
	c = changed ? exl_gmatch_set(m, ids, n, err, errlen) : s;
	if (c >= 0) {
		m->sets[s].canon[which] = c;
		m->sets[s].canon_level[which] = cut;
	}
out:
	free(ids);
	free(chain);
	return c;
}

static void evict_one(struct exl_gmatch *m)
{
	int32_t e = m->mask_ring[m->mask_ring_head];

	m->mask_ring_head = (m->mask_ring_head + 1) % m->mask_ring_cap;
	m->mask_ring_n--;
	free(m->sets[e / 2].mask[e % 2]);
	m->sets[e / 2].mask[e % 2] = NULL;
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
	if (exl_gmatch_maybe_reclaim(m, err, errlen))
		return -1;
	return walk(m, t, node, m->cur, skip_byte, UINT32_MAX, mask, err, errlen);
}

/* ORs set key's mask (which: 0 every token, 1 short tokens) into mask,
 * walking and caching it first when needed. */
static int cached_mask(struct exl_gmatch *m, const struct exl_vocab_trie *t, int32_t key,
		       int which, uint32_t *mask, char *err, size_t errlen)
{
	size_t words = m->mask_words;

	if (m->sets[key].mask[which]) {
		const uint32_t *cached = m->sets[key].mask[which];

		for (size_t i = 0; i < words; i++)
			mask[i] |= cached[i];
		m->st.mask_hits++;
		return 0;
	}
	if (grow((void **)&m->scratch_mask, &m->cap_scratch_mask, words, sizeof(*mask)))
		return oom(err, errlen);
	memset(m->scratch_mask, 0, words * sizeof(*mask));
	if (walk(m, t, EXL_VOCAB_TRIE_ROOT, key, -1, which ? EXL_VOCAB_SHORT : UINT32_MAX,
		 m->scratch_mask, err, errlen))
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
	m->sets[key].mask[which] = keep;
	m->mask_ring[(m->mask_ring_head + m->mask_ring_n) % m->mask_ring_cap] = key * 2 + which;
	m->mask_ring_n++;
	return 0;
}

int exl_gmatch_mask(struct exl_gmatch *m, const struct exl_vocab_trie *t, uint32_t *mask,
		    char *err, size_t errlen)
{
	if (exl_gmatch_maybe_reclaim(m, err, errlen))
		return -1;
	cache_for(m, t);
	int32_t full = canon_set(m, m->cur, 0, t->max_len + 1, err, errlen);

	if (full < 0)
		return -1;
	/* A cut key already merges states: its full mask is worth keeping. */
	if (m->sets[full].mask[0] || full != m->cur || t->max_len <= EXL_VOCAB_SHORT)
		return cached_mask(m, t, full, 0, mask, err, errlen);
	int32_t part = canon_set(m, m->cur, 1, EXL_VOCAB_SHORT + 1, err, errlen);

	if (part < 0)
		return -1;
	if (part == full)
		return cached_mask(m, t, full, 0, mask, err, errlen);
	/* The short tokens from the cache; the long ones fed from the
	 * current state (the cut key is not exact for them). */
	if (cached_mask(m, t, part, 1, mask, err, errlen))
		return -1;
	for (uint32_t i = 0; i < t->n_long; i++) {
		int32_t id = t->long_ids[i], s = m->cur;
		size_t len;
		const uint8_t *p = exl_vocab_trie_token(t, id, &len);

		for (size_t k = 0; k < len && s >= 0; k++)
			s = exl_gmatch_step(m, s, p[k], err, errlen);
		if (s == GSET_ERROR)
			return -1;
		if (s >= 0)
			mask[id >> 5] |= 1u << (id & 31);
	}
	return 0;
}

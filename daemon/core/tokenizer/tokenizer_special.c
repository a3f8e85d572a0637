/* Taking special tokens out of the text before it is tokenized.
 *
 * The rule (llama.cpp's, which follows Hugging Face's added-token
 * splitting): candidate tokens are tried longest first; each one takes every
 * occurrence, left to right, that still lies wholly in untaken text.  A
 * token with the rstrip / lstrip attribute also takes the whitespace after /
 * before it.  User-defined tokens are always candidates; control and unknown
 * ones only when the caller asks for special tokens to be parsed.
 *
 * Done naively that is one scan of the text per candidate token, which is
 * slow for vocabularies with thousands of added tokens.  Instead a trie finds,
 * at each position, the longest candidate starting there; a heap ordered by
 * (token priority, position) then replays the same decisions: an occurrence
 * is taken when its bytes are still free, and otherwise the position falls
 * back to its longest candidate that ends before the taken byte.
 *
 * The same trie over the whole vocabulary gives WordPiece its longest
 * matches (exl_tok_vocab_trie_build, exl_tok_trie_longest).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/tokenizer/tokenizer_internal.h"

static uint64_t edge_hash(uint64_t key)
{
	key ^= key >> 31;
	key *= 0x9e3779b97f4a7c15ull;
	return key ^ (key >> 29);
}

static int64_t trie_child(const struct tok_trie *tr, uint32_t node, uint8_t c)
{
	uint64_t key = (uint64_t)node << 8 | c;

	for (uint32_t pos = (uint32_t)edge_hash(key) & tr->edge_mask;;
	     pos = (pos + 1) & tr->edge_mask) {
		if (tr->edge_key[pos] == key)
			return tr->edge_child[pos];
		if (tr->edge_key[pos] == UINT64_MAX)
			return -1;
	}
}

void exl_tok_trie_free(struct tok_trie *tr)
{
	free(tr->edge_key);
	free(tr->edge_child);
	free(tr->node_id);
	memset(tr, 0, sizeof(*tr));
}

static bool is_candidate_attr(uint16_t attr)
{
	return attr & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN | TOK_ATTR_USER_DEFINED);
}

/* Builds tr over the non-empty tokens that all_tokens or their attributes
 * select; n_nodes bounds the node count (root included). */
static int trie_build(struct exl_tokenizer *t, struct tok_trie *tr, bool all_tokens,
		      uint64_t n_nodes, char *err, size_t errlen)
{
	uint32_t size = 16;

	memset(tr, 0, sizeof(*tr));
	if (n_nodes > (1u << 28)) {
		snprintf(err, errlen, all_tokens ? "tokens too long in total (%llu trie nodes)"
					      : "special tokens too long in total (%llu bytes)",
			 (unsigned long long)n_nodes);
		return -1;
	}
	while (size < 2 * n_nodes)
		size <<= 1;
	tr->edge_key = malloc((size_t)size * sizeof(*tr->edge_key));
	tr->edge_child = malloc((size_t)size * sizeof(*tr->edge_child));
	tr->node_id = malloc((size_t)n_nodes * sizeof(*tr->node_id));
	if (!tr->edge_key || !tr->edge_child || !tr->node_id) {
		exl_tok_trie_free(tr);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memset(tr->edge_key, 0xff, (size_t)size * sizeof(*tr->edge_key));
	tr->edge_mask = size - 1;
	tr->n_nodes = 1;
	tr->node_id[0] = -1;

	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t len;
		const char *s;
		uint32_t node = 0;

		if (!all_tokens && !is_candidate_attr(t->attr[id]))
			continue;
		s = tok_strtab_get(&t->texts, (uint32_t)id, &len);
		if (!len)
			continue;
		for (size_t i = 0; i < len; i++) {
			uint8_t c = (uint8_t)s[i];
			uint64_t key = (uint64_t)node << 8 | c;
			uint32_t pos = (uint32_t)edge_hash(key) & tr->edge_mask;

			while (tr->edge_key[pos] != UINT64_MAX && tr->edge_key[pos] != key)
				pos = (pos + 1) & tr->edge_mask;
			if (tr->edge_key[pos] == UINT64_MAX) {
				tr->edge_key[pos] = key;
				tr->edge_child[pos] = tr->n_nodes;
				tr->node_id[tr->n_nodes++] = -1;
			}
			node = tr->edge_child[pos];
		}
		/* The same text twice: the later id wins, as for plain lookup. */
		tr->node_id[node] = id;
		tr->first_byte[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
		if (len > tr->max_len)
			tr->max_len = (uint32_t)len;
	}
	return 0;
}

int exl_tok_trie_build(struct exl_tokenizer *t, char *err, size_t errlen)
{
	uint64_t total = 1;

	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t len;

		if (!is_candidate_attr(t->attr[id]))
			continue;
		tok_strtab_get(&t->texts, (uint32_t)id, &len);
		total += len;
	}
	return trie_build(t, &t->special, false, total, err, errlen);
}

struct text_ref {
	const char *s;
	size_t len;
};

static int by_text(const void *pa, const void *pb)
{
	const struct text_ref *a = pa, *b = pb;
	int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);

	return c ? c : (a->len > b->len) - (a->len < b->len);
}

int exl_tok_vocab_trie_build(struct exl_tokenizer *t, struct tok_trie *tr, char *err,
			     size_t errlen)
{
	struct text_ref *order = malloc((size_t)t->n_vocab * sizeof(*order));
	uint64_t n_nodes = 1;

	if (!order) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	/* The trie has one node per distinct prefix: sorted, each text adds
	 * what it does not share with the one before. */
	for (int32_t id = 0; id < t->n_vocab; id++)
		order[id].s = tok_strtab_get(&t->texts, (uint32_t)id, &order[id].len);
	qsort(order, (size_t)t->n_vocab, sizeof(*order), by_text);
	for (int32_t i = 0; i < t->n_vocab; i++) {
		size_t common = 0;

		while (i > 0 && common < order[i].len && common < order[i - 1].len &&
		       order[i].s[common] == order[i - 1].s[common])
			common++;
		n_nodes += order[i].len - common;
	}
	free(order);
	return trie_build(t, tr, true, n_nodes, err, errlen);
}

uint32_t exl_tok_trie_longest(const struct tok_trie *tr, const uint8_t *s, uint32_t len,
			      int32_t *id)
{
	uint32_t node = 0, best = 0;

	if (!len || !tr->n_nodes || !(tr->first_byte[s[0] >> 3] & (1u << (s[0] & 7))))
		return 0;
	for (uint32_t i = 0; i < len && i < tr->max_len; i++) {
		int64_t child = trie_child(tr, node, s[i]);

		if (child < 0)
			break;
		node = (uint32_t)child;
		if (tr->node_id[node] >= 0) {
			best = i + 1;
			*id = tr->node_id[node];
		}
	}
	return best;
}

static bool candidate_ok(const struct exl_tokenizer *t, int32_t id, bool parse_special)
{
	/* A user-defined token that is also control (an end-of-turn marker
	 * found by name) counts as control. */
	return parse_special || ((t->attr[id] & TOK_ATTR_USER_DEFINED) &&
				 !(t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)));
}

/* The longest candidate at text[pos..] no longer than max_len; its id in
 * *id, its length returned (0 when none). */
static uint32_t longest_at(const struct exl_tokenizer *t, const uint8_t *text, uint32_t len,
			   uint32_t pos, uint32_t max_len, bool parse_special, int32_t *id)
{
	const struct tok_trie *tr = &t->special;
	uint32_t node = 0, best = 0;

	if (!(tr->first_byte[text[pos] >> 3] & (1u << (text[pos] & 7))))
		return 0;
	for (uint32_t i = pos; i < len && i - pos < max_len; i++) {
		int64_t child = trie_child(tr, node, text[i]);

		if (child < 0)
			break;
		node = (uint32_t)child;
		if (tr->node_id[node] >= 0 && candidate_ok(t, tr->node_id[node], parse_special)) {
			best = i - pos + 1;
			*id = tr->node_id[node];
		}
	}
	return best;
}

/* A candidate occurrence: token id of length len at pos. */
struct occ {
	uint32_t pos, len;
	int32_t id;
};

/* Longer first, then lower id (a fixed order for equal lengths), then
 * leftmost. */
static bool occ_before(const struct occ *a, const struct occ *b)
{
	if (a->len != b->len)
		return a->len > b->len;
	if (a->id != b->id)
		return a->id < b->id;
	return a->pos < b->pos;
}

struct heap {
	struct occ *v;
	size_t n, cap;
};

static int heap_push(struct heap *h, struct occ o)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct occ *v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -1;
		h->v = v;
		h->cap = cap;
	}
	for (i = h->n++; i > 0; i = (i - 1) / 2) {
		struct occ *parent = &h->v[(i - 1) / 2];

		if (!occ_before(&o, parent))
			break;
		h->v[i] = *parent;
	}
	h->v[i] = o;
	return 0;
}

static struct occ heap_pop(struct heap *h)
{
	struct occ top = h->v[0], last = h->v[--h->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && occ_before(&h->v[c + 1], &h->v[c]))
			c++;
		if (!occ_before(&h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

int exl_tok_partition(const struct exl_tokenizer *t, const char *text, uint32_t len,
		      bool parse_special, struct tok_frag **frags, char *err, size_t errlen)
{
	const uint8_t *s = (const uint8_t *)text;
	/* taken[i]: 0 free text, 1 stripped whitespace, 2 start of a token,
	 * 3 inside a token */
	uint8_t *taken = NULL;
	int32_t *tok_at = NULL;
	struct heap h = { 0 };
	struct tok_frag *out = NULL;
	size_t n_out = 0, cap_out = 0;
	int ret = -1;
	bool any = false;

	*frags = NULL;
	if (t->special.n_nodes > 1) {
		for (uint32_t pos = 0; pos < len; pos++) {
			struct occ o = { .pos = pos };

			o.len = longest_at(t, s, len, pos, UINT32_MAX, parse_special, &o.id);
			if (o.len && heap_push(&h, o))
				goto oom;
		}
	}
	if (h.n) {
		taken = calloc(len, 1);
		tok_at = malloc((size_t)len * sizeof(*tok_at));
		if (!taken || !tok_at)
			goto oom;
	}
	while (h.n) {
		struct occ o = heap_pop(&h);
		uint32_t free_len = 0;

		if (taken[o.pos])
			continue;
		while (free_len < o.len && !taken[o.pos + free_len])
			free_len++;
		if (free_len < o.len) {
			/* Blocked by a taken byte: retry with what fits. */
			o.len = longest_at(t, s, len, o.pos, free_len, parse_special, &o.id);
			if (o.len && heap_push(&h, o))
				goto oom;
			continue;
		}
		any = true;
		taken[o.pos] = 2;
		tok_at[o.pos] = o.id;
		memset(taken + o.pos + 1, 3, o.len - 1);
		if (t->attr[o.id] & TOK_ATTR_LSTRIP)
			for (uint32_t i = o.pos; i > 0 && !taken[i - 1] && isspace(s[i - 1]); i--)
				taken[i - 1] = 1;
		if (t->attr[o.id] & TOK_ATTR_RSTRIP)
			for (uint32_t i = o.pos + o.len; i < len && !taken[i] && isspace(s[i]); i++)
				taken[i] = 1;
	}

	for (uint32_t pos = 0; pos < len;) {
		struct tok_frag f = { .start = pos, .len = 0, .id = -1 };

		if (any && taken[pos] == 2) {
			f.id = tok_at[pos];
			pos++;
			while (pos < len && taken[pos] == 3)
				pos++;
		} else if (any && taken[pos] == 1) {
			pos++;
			continue;
		} else {
			while (pos < len && (!any || !taken[pos]))
				pos++;
			f.len = pos - f.start;
		}
		if (n_out == cap_out) {
			size_t cap = cap_out ? cap_out * 2 : 16;
			struct tok_frag *v = realloc(out, cap * sizeof(*v));

			if (!v)
				goto oom;
			out = v;
			cap_out = cap;
		}
		out[n_out++] = f;
	}
	if (n_out > INT32_MAX) {
		snprintf(err, errlen, "too many special tokens in the text");
		goto out;
	}
	*frags = out;
	out = NULL;
	ret = (int)n_out;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	free(out);
	free(taken);
	free(tok_at);
	free(h.v);
	return ret;
}

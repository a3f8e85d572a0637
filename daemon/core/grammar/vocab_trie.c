/* The vocabulary prefix tree and its process-wide cache. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/grammar/vocab_trie.h"

/* Unreferenced trees kept for a model that comes back. */
#define MAX_IDLE 2

struct entry {
	const uint8_t *p;
	uint32_t len;
	int32_t id;
};

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	uint32_t n = x->len < y->len ? x->len : y->len;
	int c = n ? memcmp(x->p, y->p, n) : 0;

	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void trie_free(struct exl_vocab_trie *t)
{
	if (!t)
		return;
	free(t->nodes);
	free(t->toks);
	free(t->tok_off);
	free(t->bytes);
	free(t->long_ids);
	free(t);
}

/* Breadth first: a node's children are made together, so they are
 * contiguous.  Each node covers a run of the sorted tokens sharing its
 * prefix; the ones exactly as long as the prefix sort first. */
static int build_nodes(struct exl_vocab_trie *t, const struct entry *e, size_t n,
		       char *err, size_t errlen)
{
	size_t cap = 1024, n_nodes = 1, n_toks = 0;
	uint32_t *lo = malloc(cap * sizeof(*lo)), *hi = malloc(cap * sizeof(*hi));
	uint32_t *depth = malloc(cap * sizeof(*depth));
	struct exl_vocab_node *nodes = calloc(cap, sizeof(*nodes));
	int rc = -1;

	t->toks = malloc((n + 1) * sizeof(*t->toks));
	if (!lo || !hi || !depth || !nodes || !t->toks)
		goto oom;
	lo[0] = 0;
	hi[0] = (uint32_t)n;
	depth[0] = 0;
	for (size_t i = 0; i < n_nodes; i++) {
		uint32_t k = lo[i], d = depth[i];

		nodes[i].tok_first = (uint32_t)n_toks;
		while (k < hi[i] && e[k].len == d)
			t->toks[n_toks++] = e[k++].id;
		nodes[i].n_tok = (uint32_t)(n_toks - nodes[i].tok_first);
		nodes[i].first_child = (uint32_t)n_nodes;
		while (k < hi[i]) {
			uint8_t b = e[k].p[d];
			uint32_t j = k;

			while (j < hi[i] && e[j].p[d] == b)
				j++;
			if (n_nodes == cap) {
				size_t nc = cap * 2;
				void *a = realloc(lo, nc * sizeof(*lo)), *bb, *c, *dd;

				if (!a)
					goto oom;
				lo = a;
				bb = realloc(hi, nc * sizeof(*hi));
				if (!bb)
					goto oom;
				hi = bb;
				c = realloc(depth, nc * sizeof(*depth));
				if (!c)
					goto oom;
				depth = c;
				dd = realloc(nodes, nc * sizeof(*nodes));
				if (!dd)
					goto oom;
				nodes = dd;
				memset(nodes + cap, 0, (nc - cap) * sizeof(*nodes));
				cap = nc;
			}
			nodes[n_nodes].byte = b;
			nodes[n_nodes].depth = d + 1 > 255 ? 255 : (uint8_t)(d + 1);
			lo[n_nodes] = k;
			hi[n_nodes] = j;
			depth[n_nodes] = d + 1;
			n_nodes++;
			nodes[i].n_child++;
			k = j;
		}
	}
	t->nodes = nodes;
	nodes = NULL;
	t->n_nodes = (uint32_t)n_nodes;
	rc = 0;
	goto out;
oom:
	snprintf(err, errlen, "out of memory building the vocabulary tree");
out:
	free(lo);
	free(hi);
	free(depth);
	free(nodes);
	return rc;
}

/* Takes token i's bytes from get(). */
static struct exl_vocab_trie *build(int32_t n_vocab,
				    size_t (*get)(void *u, int32_t id, const char **p), void *u,
				    char *err, size_t errlen)
{
	struct exl_vocab_trie *t = calloc(1, sizeof(*t));
	struct entry *e = NULL;
	size_t total = 0, n = 0;

	if (!t)
		goto oom;
	if (n_vocab <= 0) {
		snprintf(err, errlen, "vocabulary tree: no tokens");
		goto fail;
	}
	t->n_vocab = n_vocab;
	t->refs = 1;
	t->tok_off = malloc(((size_t)n_vocab + 1) * sizeof(*t->tok_off));
	e = malloc((size_t)n_vocab * sizeof(*e));
	if (!t->tok_off || !e)
		goto oom;
	for (int32_t i = 0; i < n_vocab; i++) {
		const char *p;
		size_t len = get(u, i, &p);

		if (len > EXL_VOCAB_MAX_TOKEN_BYTES) {
			snprintf(err, errlen, "vocabulary tree: token %d has %zu bytes (the limit is %u)",
				 i, len, EXL_VOCAB_MAX_TOKEN_BYTES);
			goto fail;
		}
		total += len;
	}
	if (total >= UINT32_MAX) {
		snprintf(err, errlen, "vocabulary tree: %zu bytes of tokens is too many", total);
		goto fail;
	}
	t->bytes = malloc(total + 1);
	if (!t->bytes)
		goto oom;
	total = 0;
	for (int32_t i = 0; i < n_vocab; i++) {
		const char *p;
		size_t len = get(u, i, &p);

		t->tok_off[i] = (uint32_t)total;
		if (len)
			memcpy(t->bytes + total, p, len);
		total += len;
	}
	t->tok_off[n_vocab] = (uint32_t)total;
	for (int32_t i = 0; i < n_vocab; i++) {
		uint32_t len = t->tok_off[i + 1] - t->tok_off[i];

		if (!len)
			continue;
		e[n].p = t->bytes + t->tok_off[i];
		e[n].len = len;
		if (len > t->max_len)
			t->max_len = len;
		e[n].id = i;
		n++;
	}
	t->long_ids = malloc((n + 1) * sizeof(*t->long_ids));
	if (!t->long_ids)
		goto oom;
	for (size_t i = 0; i < n; i++)
		if (e[i].len > EXL_VOCAB_SHORT)
			t->long_ids[t->n_long++] = e[i].id;
	qsort(e, n, sizeof(*e), cmp_entry);
	if (build_nodes(t, e, n, err, errlen))
		goto fail;
	free(e);
	return t;
oom:
	snprintf(err, errlen, "out of memory building the vocabulary tree");
fail:
	free(e);
	trie_free(t);
	return NULL;
}

struct arrays {
	const char *const *bytes;
	const size_t *len;
};

static size_t get_array(void *u, int32_t id, const char **p)
{
	const struct arrays *a = u;

	*p = a->bytes[id];
	return a->bytes[id] ? a->len[id] : 0;
}

struct exl_vocab_trie *exl_vocab_trie_build(int32_t n_vocab, const char *const *bytes,
					    const size_t *len, char *err, size_t errlen)
{
	struct arrays a = { bytes, len };

	return build(n_vocab, get_array, &a, err, errlen);
}

/* ---- from a tokenizer, through the cache ---- */

struct tok_src {
	const struct exl_tokenizer *tok;
	char *buf;
	size_t cap;
	bool failed;
};

static size_t get_tok(void *u, int32_t id, const char **p)
{
	struct tok_src *s = u;
	size_t len = exl_token_bytes(s->tok, id, false, s->buf, s->cap);

	if (len > s->cap) {
		size_t cap = len > EXL_VOCAB_MAX_TOKEN_BYTES ? EXL_VOCAB_MAX_TOKEN_BYTES : len;
		char *b = realloc(s->buf, cap);

		if (!b) {
			s->failed = true;
			*p = s->buf;
			return 0;
		}
		s->buf = b;
		s->cap = cap;
		if (len > cap) {
			/* build() refuses it by its length. */
			*p = s->buf;
			return len;
		}
		exl_token_bytes(s->tok, id, false, s->buf, s->cap);
	}
	*p = s->buf;
	return len;
}

static uint64_t fingerprint(const struct exl_tokenizer *tok, struct tok_src *src)
{
	uint64_t h = 1469598103934665603ull;
	int32_t n = exl_tokenizer_n_vocab(tok);

	h = (h ^ (uint64_t)(uint32_t)n) * 1099511628211ull;
	for (int32_t i = 0; i < n; i++) {
		const char *p;
		size_t len = get_tok(src, i, &p);

		h = (h ^ len) * 1099511628211ull;
		for (size_t k = 0; k < len && k < src->cap; k++)
			h = (h ^ (uint8_t)p[k]) * 1099511628211ull;
	}
	return h;
}

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct exl_vocab_trie *cache;
static uint64_t cache_clock;

static struct exl_vocab_trie *cache_find(uint64_t fp, int32_t n_vocab)
{
	for (struct exl_vocab_trie *t = cache; t; t = t->next) {
		if (t->fingerprint == fp && t->n_vocab == n_vocab) {
			t->refs++;
			return t;
		}
	}
	return NULL;
}

struct exl_vocab_trie *exl_vocab_trie_get(const struct exl_tokenizer *tok, char *err,
					  size_t errlen)
{
	struct tok_src src = { .tok = tok };
	struct exl_vocab_trie *t, *have;
	int32_t n_vocab = exl_tokenizer_n_vocab(tok);
	uint64_t fp = fingerprint(tok, &src);

	if (src.failed) {
		free(src.buf);
		snprintf(err, errlen, "out of memory reading the vocabulary");
		return NULL;
	}
	pthread_mutex_lock(&cache_mu);
	t = cache_find(fp, n_vocab);
	pthread_mutex_unlock(&cache_mu);
	if (t) {
		free(src.buf);
		return t;
	}
	/* Built outside the lock; a racing builder's tree wins. */
	t = build(n_vocab, get_tok, &src, err, errlen);
	if (t && src.failed) {
		trie_free(t);
		t = NULL;
		snprintf(err, errlen, "out of memory reading the vocabulary");
	}
	free(src.buf);
	if (!t)
		return NULL;
	t->fingerprint = fp;
	t->cached = true;
	pthread_mutex_lock(&cache_mu);
	have = cache_find(fp, n_vocab);
	if (!have) {
		t->next = cache;
		cache = t;
	}
	pthread_mutex_unlock(&cache_mu);
	if (have) {
		trie_free(t);
		return have;
	}
	return t;
}

void exl_vocab_trie_put(struct exl_vocab_trie *t)
{
	struct exl_vocab_trie *drop = NULL;

	if (!t)
		return;
	if (!t->cached) {
		if (--t->refs == 0)
			trie_free(t);
		return;
	}
	pthread_mutex_lock(&cache_mu);
	if (--t->refs == 0) {
		int idle = 0;
		struct exl_vocab_trie **pp, *oldest = NULL;

		t->released_at = ++cache_clock;
		for (struct exl_vocab_trie *c = cache; c; c = c->next) {
			if (c->refs)
				continue;
			idle++;
			if (!oldest || c->released_at < oldest->released_at)
				oldest = c;
		}
		if (idle > MAX_IDLE) {
			for (pp = &cache; *pp != oldest; pp = &(*pp)->next)
				;
			*pp = oldest->next;
			drop = oldest;
		}
	}
	pthread_mutex_unlock(&cache_mu);
	trie_free(drop);
}

uint32_t exl_vocab_trie_child(const struct exl_vocab_trie *t, uint32_t node, uint8_t b)
{
	const struct exl_vocab_node *n = &t->nodes[node];
	uint32_t lo = n->first_child, hi = n->first_child + n->n_child;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (t->nodes[mid].byte < b)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n->first_child + n->n_child && t->nodes[lo].byte == b ? lo : 0;
}

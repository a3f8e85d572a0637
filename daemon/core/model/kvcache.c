/* The paged KV cache: page pool, per-sequence page tables, prefix sharing
 * and copy on write.
 *
 * Every page is in exactly one of three states:
 *   in use  - refcount > 0, referenced by that many sequence page tables;
 *   cached  - refcount 0 but registered for prefix sharing, kept in LRU
 *             order so a later sequence with the same prefix can revive it;
 *   free    - refcount 0, not registered, on the free stack.
 * Allocation takes free pages first and evicts the least recently released
 * cached page only when none is left, so "free pages" counts both.
 *
 * A registered page records the chained hash of every token up to its end,
 * its own tokens, and its parent (the page before it in the sequence that
 * registered it) together with the parent's generation.  A page's generation
 * changes whenever its registered content is dropped, so a match verified
 * page by page (same tokens, same parent at the same generation) proves the
 * whole prefix equal, without trusting the hash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "kernels/backend_select.h"

#define MIB (1024.0 * 1024.0)

/* The bookkeeping of one pool's pages: references, the free stack and the
 * cached pages in LRU order. */
struct kv_pool {
	int n_pages;
	int32_t *refcount;
	bool *registered;   /* global: in the prefix hash; local: a companion */
	int32_t *free_stack;
	int n_free_stack;
	int32_t *lru_prev;  /* cached pages, least recently released first */
	int32_t *lru_next;
	int32_t lru_head;
	int32_t lru_tail;
	int n_cached;
};

struct exl_kvcache {
	struct exl_backend *be;
	int n_layers;
	int n_kv_heads;
	int head_dim;
	int page_size;
	int n_pages;
	int window;        /* every layer's sliding window; 0: none */
	size_t page_bytes; /* bytes of K (or V) of one page in one layer */
	struct exl_kv_layer *layers;

	struct kv_pool g;   /* the global pool: every layer, or the global ones */
	uint32_t *gen;
	uint64_t *hash;     /* chained hash of the prefix ending with the page */
	uint64_t *root_key; /* a first page's prefix key (seq_key) */
	int32_t *parent;    /* page before it when registered, -1 for the first */
	uint32_t *parent_gen;
	int32_t *page_tokens; /* [n_pages][page_size], valid while registered */

	int32_t *bucket;    /* hash table heads, n_buckets, -1 when empty */
	int32_t *bucket_next;
	uint32_t n_buckets; /* power of two */

	/* The local pool (models that mix sliding-window and global layers):
	 * the local layers' K/V, n_local_layers of them, within local_window
	 * positions of each sequence's end.  A full local page is registered
	 * as the companion of the registered global page at the same index
	 * (owner, at the owner's generation): a prefix shared from the
	 * global pool maps its window's local pages through them. */
	int n_local_layers;
	int local_window;
	struct kv_pool l;
	int32_t *owner;       /* [l.n_pages] global page, valid while registered */
	uint32_t *owner_gen;
	int32_t *companion;   /* [n_pages] local page, or -1 */
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t chain_hash(uint64_t h, const int32_t *tokens, int n)
{
	for (int i = 0; i < n; i++)
		h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ULL));
	return h;
}

#define HASH_SEED 0x6b76636163686531ULL

/* The prefix key of s: its adapter set's (0 for none).  A first page is
 * registered with its sequence's key and matches only the same key; the
 * pages after it follow from their parent. */
static uint64_t seq_key(const struct exl_kv_seq *s)
{
	return s->lora ? s->lora->key : 0;
}

static uint64_t root_hash(uint64_t key)
{
	return key ? mix64(HASH_SEED ^ key) : HASH_SEED;
}

/* ---- page bookkeeping ---- */

static void lru_unlink(struct kv_pool *pl, int32_t p)
{
	int32_t prev = pl->lru_prev[p], next = pl->lru_next[p];

	if (prev >= 0)
		pl->lru_next[prev] = next;
	else
		pl->lru_head = next;
	if (next >= 0)
		pl->lru_prev[next] = prev;
	else
		pl->lru_tail = prev;
	pl->lru_prev[p] = pl->lru_next[p] = -1;
	pl->n_cached--;
}

static void lru_append(struct kv_pool *pl, int32_t p)
{
	pl->lru_prev[p] = pl->lru_tail;
	pl->lru_next[p] = -1;
	if (pl->lru_tail >= 0)
		pl->lru_next[pl->lru_tail] = p;
	else
		pl->lru_head = p;
	pl->lru_tail = p;
	pl->n_cached++;
}

static void hash_insert(struct exl_kvcache *kv, int32_t p)
{
	uint32_t b = (uint32_t)kv->hash[p] & (kv->n_buckets - 1);

	kv->bucket_next[p] = kv->bucket[b];
	kv->bucket[b] = p;
	kv->g.registered[p] = true;
}

/* Drops p's registration; its content no longer vouches for any prefix. */
static void unregister_page(struct exl_kvcache *kv, int32_t p)
{
	uint32_t b = (uint32_t)kv->hash[p] & (kv->n_buckets - 1);
	int32_t *link = &kv->bucket[b];

	while (*link >= 0 && *link != p)
		link = &kv->bucket_next[*link];
	if (*link == p)
		*link = kv->bucket_next[p];
	kv->bucket_next[p] = -1;
	kv->g.registered[p] = false;
	kv->gen[p]++;
}

/* Drops local page p's place as its owner's companion. */
static void unregister_local(struct exl_kvcache *kv, int32_t p)
{
	if (kv->companion[kv->owner[p]] == p)
		kv->companion[kv->owner[p]] = -1;
	kv->l.registered[p] = false;
}

/* Takes one page of pl for exclusive use; the caller has checked its
 * free pages. */
static int32_t page_alloc(struct exl_kvcache *kv, struct kv_pool *pl)
{
	int32_t p;

	if (pl->n_free_stack > 0) {
		p = pl->free_stack[--pl->n_free_stack];
	} else {
		p = pl->lru_head;
		lru_unlink(pl, p);
		if (pl == &kv->l)
			unregister_local(kv, p);
		else
			unregister_page(kv, p);
	}
	pl->refcount[p] = 1;
	return p;
}

static void page_ref(struct kv_pool *pl, int32_t p)
{
	if (pl->refcount[p]++ == 0)
		lru_unlink(pl, p); /* only registered pages sit at refcount 0 and can be revived */
}

static void page_unref(struct kv_pool *pl, int32_t p)
{
	if (--pl->refcount[p] > 0)
		return;
	if (pl->registered[p])
		lru_append(pl, p);
	else
		pl->free_stack[pl->n_free_stack++] = p;
}

static int pool_free_pages(const struct kv_pool *pl)
{
	return pl->n_free_stack + pl->n_cached;
}

static int pool_init(struct kv_pool *pl, int n_pages)
{
	size_t np = (size_t)n_pages;

	pl->n_pages = n_pages;
	pl->lru_head = pl->lru_tail = -1;
	pl->refcount = calloc(np, sizeof(*pl->refcount));
	pl->registered = calloc(np, sizeof(*pl->registered));
	pl->free_stack = malloc(np * sizeof(*pl->free_stack));
	pl->lru_prev = malloc(np * sizeof(*pl->lru_prev));
	pl->lru_next = malloc(np * sizeof(*pl->lru_next));
	if (!pl->refcount || !pl->registered || !pl->free_stack || !pl->lru_prev ||
	    !pl->lru_next)
		return -1;
	/* Pushed in reverse so page 0 is handed out first. */
	for (int p = 0; p < n_pages; p++) {
		pl->lru_prev[p] = pl->lru_next[p] = -1;
		pl->free_stack[p] = n_pages - 1 - p;
	}
	pl->n_free_stack = n_pages;
	return 0;
}

static void pool_free(struct kv_pool *pl)
{
	free(pl->refcount);
	free(pl->registered);
	free(pl->free_stack);
	free(pl->lru_prev);
	free(pl->lru_next);
}

/* ---- sizing ---- */

uint64_t exl_kv_bytes_per_token(int n_layers, int n_kv_heads, int head_dim)
{
	uint64_t heads;

	if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0)
		return 0;
	/* K and V, 2 bytes each; two ints multiply without overflow */
	heads = (uint64_t)n_layers * (uint64_t)n_kv_heads;
	if (heads > UINT64_MAX / 4 / (uint64_t)head_dim)
		return 0;
	return 4u * heads * (uint64_t)head_dim;
}

int exl_kv_tokens_for_memory(uint64_t free_bytes, uint64_t bytes_per_token, int page_size,
			     int64_t max_tokens)
{
	return exl_kv_tokens_after(free_bytes, 0, bytes_per_token, page_size, max_tokens);
}

int exl_kv_tokens_after(uint64_t free_bytes, uint64_t reserved, uint64_t bytes_per_token,
			int page_size, int64_t max_tokens)
{
	uint64_t usable, pages, cap_pages;

	if (!bytes_per_token || page_size <= 0)
		return 0;
	/* EXL_KV_FREE_PERCENT of free_bytes without overflowing */
	usable = free_bytes / 100 * EXL_KV_FREE_PERCENT +
		 free_bytes % 100 * EXL_KV_FREE_PERCENT / 100;
	if (reserved >= usable)
		return 0;
	usable -= reserved;
	pages = usable / bytes_per_token / (uint64_t)page_size;
	if (max_tokens <= 0 || max_tokens > EXL_KV_MAX_TOKENS)
		max_tokens = EXL_KV_MAX_TOKENS;
	/* The cap in whole pages, rounded up so a full context fits, but never
	 * past EXL_KV_MAX_TOKENS. */
	cap_pages = ((uint64_t)max_tokens + (uint64_t)page_size - 1) / (uint64_t)page_size;
	if (cap_pages * (uint64_t)page_size > EXL_KV_MAX_TOKENS)
		cap_pages = EXL_KV_MAX_TOKENS / (uint64_t)page_size;
	if (pages > cap_pages)
		pages = cap_pages;
	return (int)(pages * (uint64_t)page_size);
}

int exl_kvcache_auto_tokens(struct exl_backend *be, int n_layers, int n_kv_heads, int head_dim,
			    int page_size, int64_t max_tokens, char *err, size_t errlen)
{
	return exl_kvcache_auto_tokens_mixed(be, n_layers, 0, n_kv_heads, head_dim, page_size, 0,
					     max_tokens, err, errlen);
}

int exl_kvcache_auto_tokens_mixed(struct exl_backend *be, int n_layers, int n_local,
				  int n_kv_heads, int head_dim, int page_size,
				  int64_t local_tokens, int64_t max_tokens, char *err,
				  size_t errlen)
{
	uint64_t per_token = exl_kv_bytes_per_token(n_layers - n_local, n_kv_heads, head_dim);
	uint64_t per_local = n_local ? exl_kv_bytes_per_token(n_local, n_kv_heads, head_dim) : 0;
	uint64_t reserved = 0;
	struct exl_backend_mem mem;
	char msg[300];
	int tokens;

	if (!per_token || page_size <= 0 || n_local < 0 || local_tokens < 0 ||
	    (n_local && !per_local)) {
		snprintf(err, errlen, "kv cache: bad shape (layers %d, %d of them local, kv heads "
			 "%d, head dim %d, page size %d)", n_layers, n_local, n_kv_heads, head_dim,
			 page_size);
		return -1;
	}
	if (n_local) {
		if ((uint64_t)local_tokens > UINT64_MAX / per_local) {
			snprintf(err, errlen, "kv cache: a local pool of %lld positions is too large",
				 (long long)local_tokens);
			return -1;
		}
		reserved = (uint64_t)local_tokens * per_local;
	}
	if (be->ops->mem_info(be, &mem, msg, sizeof(msg))) {
		snprintf(err, errlen, "kv cache: cannot size the pool from free memory on %s: %s",
			 mem.device, msg);
		return -1;
	}
	if (!mem.total_bytes)
		return EXL_KV_DEFAULT_TOKENS; /* host memory: no pool of its own to fill */
	tokens = exl_kv_tokens_after(mem.free_bytes, reserved, per_token, page_size, max_tokens);
	if (tokens <= 0) {
		snprintf(err, errlen, "kv cache: not even one page of %d tokens (%.2f MiB) fits in "
			 "%d%% of the %.1f MiB free (of %.1f MiB) on %s after the weights%s",
			 page_size, (double)per_token * page_size / MIB, EXL_KV_FREE_PERCENT,
			 mem.free_bytes / MIB, mem.total_bytes / MIB, mem.device,
			 reserved ? " and the sliding-window layers' own pool" : "");
		return -1;
	}
	return tokens;
}

/* Refuses a pool of `need` bytes that a device with its own memory has no
 * room for, naming both numbers. */
static int check_pool_fits(struct exl_backend *be, uint64_t need, int n_tokens, char *err,
			   size_t errlen)
{
	struct exl_backend_mem mem;
	char msg[300];

	if (be->ops->mem_info(be, &mem, msg, sizeof(msg))) {
		snprintf(err, errlen, "kv cache: cannot tell whether %.1f MiB fit on %s: %s",
			 need / MIB, mem.device, msg);
		return -1;
	}
	if (!mem.total_bytes || need <= mem.free_bytes)
		return 0;
	snprintf(err, errlen, "kv cache: %d tokens need %.1f MiB of VRAM (%llu bytes), %.1f MiB "
		 "free of %.1f MiB on %s (lower kv_tokens, or leave it unset to size the pool "
		 "from free memory)", n_tokens, need / MIB, (unsigned long long)need,
		 mem.free_bytes / MIB, mem.total_bytes / MIB, mem.device);
	return -1;
}

/* ---- creation ---- */

struct exl_kvcache *exl_kvcache_create(struct exl_backend *be, int n_layers, int n_kv_heads,
				       int head_dim, int n_tokens, int page_size,
				       char *err, size_t errlen)
{
	return exl_kvcache_create_mixed(be, n_layers, n_kv_heads, head_dim, n_tokens, page_size,
					NULL, 0, 0, err, errlen);
}

/* Pages of n_tokens positions; 0 for none. */
static int pages_of(int n_tokens, int page_size)
{
	return n_tokens / page_size + (n_tokens % page_size != 0);
}

struct exl_kvcache *exl_kvcache_create_mixed(struct exl_backend *be, int n_layers,
					     int n_kv_heads, int head_dim, int n_tokens,
					     int page_size, const bool *local, int window,
					     int local_tokens, char *err, size_t errlen)
{
	struct exl_kvcache *kv;
	int n_local = 0;

	if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || n_tokens <= 0 || page_size <= 0) {
		snprintf(err, errlen, "kv cache: bad shape (layers %d, kv heads %d, head dim %d, "
			 "tokens %d, page size %d)", n_layers, n_kv_heads, head_dim, n_tokens,
			 page_size);
		return NULL;
	}
	if (page_size > (1 << 20)) {
		snprintf(err, errlen, "kv cache: page size %d too large", page_size);
		return NULL;
	}
	for (int l = 0; local && l < n_layers; l++)
		n_local += local[l];
	if (n_local && (n_local == n_layers || window <= 0 || local_tokens <= 0)) {
		snprintf(err, errlen, "kv cache: a local pool needs global layers beside its %d "
			 "local ones (of %d), a window (%d) and positions (%d)", n_local, n_layers,
			 window, local_tokens);
		return NULL;
	}
	int n_pages = pages_of(n_tokens, page_size);
	int n_lpages = n_local ? pages_of(local_tokens, page_size) : 0;
	int most = n_pages > n_lpages ? n_pages : n_lpages;
	size_t per_pos = (size_t)n_kv_heads * (size_t)head_dim * 2;
	if ((size_t)n_kv_heads > SIZE_MAX / 2 / (size_t)head_dim ||
	    per_pos > SIZE_MAX / (size_t)page_size ||
	    per_pos * (size_t)page_size > SIZE_MAX / (size_t)most) {
		snprintf(err, errlen, "kv cache: %d tokens of %d x %d too large", n_tokens,
			 n_kv_heads, head_dim);
		return NULL;
	}

	kv = calloc(1, sizeof(*kv));
	if (!kv)
		goto oom;
	kv->be = be;
	kv->n_layers = n_layers;
	kv->n_kv_heads = n_kv_heads;
	kv->head_dim = head_dim;
	kv->page_size = page_size;
	kv->n_pages = n_pages;
	kv->page_bytes = per_pos * (size_t)page_size;
	kv->n_local_layers = n_local;
	kv->local_window = n_local ? window : 0;

	kv->n_buckets = 16;
	while (kv->n_buckets < 2u * (uint32_t)n_pages)
		kv->n_buckets <<= 1;

	size_t np = (size_t)n_pages;
	kv->layers = calloc((size_t)n_layers, sizeof(*kv->layers));
	kv->gen = calloc(np, sizeof(*kv->gen));
	kv->hash = calloc(np, sizeof(*kv->hash));
	kv->root_key = calloc(np, sizeof(*kv->root_key));
	kv->parent = calloc(np, sizeof(*kv->parent));
	kv->parent_gen = calloc(np, sizeof(*kv->parent_gen));
	kv->page_tokens = calloc(np * (size_t)page_size, sizeof(*kv->page_tokens));
	kv->bucket = malloc(kv->n_buckets * sizeof(*kv->bucket));
	kv->bucket_next = malloc(np * sizeof(*kv->bucket_next));
	if (!kv->layers || !kv->gen || !kv->hash || !kv->root_key || !kv->parent ||
	    !kv->parent_gen || !kv->page_tokens || !kv->bucket || !kv->bucket_next ||
	    pool_init(&kv->g, n_pages))
		goto oom;
	for (uint32_t b = 0; b < kv->n_buckets; b++)
		kv->bucket[b] = -1;
	for (int p = 0; p < n_pages; p++)
		kv->bucket_next[p] = -1;
	if (n_local) {
		kv->owner = calloc((size_t)n_lpages, sizeof(*kv->owner));
		kv->owner_gen = calloc((size_t)n_lpages, sizeof(*kv->owner_gen));
		kv->companion = malloc(np * sizeof(*kv->companion));
		if (!kv->owner || !kv->owner_gen || !kv->companion || pool_init(&kv->l, n_lpages))
			goto oom;
		for (int p = 0; p < n_pages; p++)
			kv->companion[p] = -1;
	}

	if ((uint64_t)kv->page_bytes * (uint64_t)most > UINT64_MAX / 2 / (uint64_t)n_layers) {
		snprintf(err, errlen, "kv cache: %d tokens of %d layers too large", n_tokens,
			 n_layers);
		exl_kvcache_free(kv);
		return NULL;
	}
	if (check_pool_fits(be, exl_kvcache_bytes(kv), n_tokens, err, errlen)) {
		exl_kvcache_free(kv);
		return NULL;
	}
	for (int l = 0; l < n_layers; l++) {
		struct exl_kv_layer *kl = &kv->layers[l];
		bool in_local = n_local && local[l];
		size_t bytes = kv->page_bytes * (size_t)(in_local ? n_lpages : n_pages);
		const char *why;

		kl->page_size = page_size;
		kl->n_kv_heads = n_kv_heads;
		kl->head_dim = head_dim;
		kl->n_pages = in_local ? n_lpages : n_pages;
		kl->table = in_local;
		kl->k = be->ops->alloc(be, bytes);
		kl->v = kl->k ? be->ops->alloc(be, bytes) : NULL;
		if (!kl->k || !kl->v) {
			why = exl_backend_error(be);
			snprintf(err, errlen, "kv cache: cannot allocate %zu bytes on backend %s "
				 "for layer %d of %d (%d tokens, %.1f MiB in all): %s",
				 2 * bytes, be->ops->name, l, n_layers, n_tokens,
				 exl_kvcache_bytes(kv) / MIB, why ? why : "no reason given");
			exl_kvcache_free(kv);
			return NULL;
		}
	}
	return kv;
oom:
	snprintf(err, errlen, "kv cache: out of memory");
	exl_kvcache_free(kv);
	return NULL;
}

void exl_kvcache_free(struct exl_kvcache *kv)
{
	if (!kv)
		return;
	if (kv->layers) {
		for (int l = 0; l < kv->n_layers; l++) {
			if (kv->layers[l].k)
				kv->be->ops->free(kv->be, kv->layers[l].k);
			if (kv->layers[l].v)
				kv->be->ops->free(kv->be, kv->layers[l].v);
		}
	}
	free(kv->layers);
	pool_free(&kv->g);
	pool_free(&kv->l);
	free(kv->gen);
	free(kv->hash);
	free(kv->root_key);
	free(kv->parent);
	free(kv->parent_gen);
	free(kv->page_tokens);
	free(kv->bucket);
	free(kv->bucket_next);
	free(kv->owner);
	free(kv->owner_gen);
	free(kv->companion);
	free(kv);
}

uint64_t exl_kvcache_bytes(const struct exl_kvcache *kv)
{
	uint64_t global = (uint64_t)(kv->n_layers - kv->n_local_layers) * (uint64_t)kv->n_pages;
	uint64_t local = (uint64_t)kv->n_local_layers * (uint64_t)kv->l.n_pages;

	return 2u * (uint64_t)kv->page_bytes * (global + local);
}

uint64_t exl_kvcache_local_bytes(const struct exl_kvcache *kv)
{
	return 2u * (uint64_t)kv->page_bytes * (uint64_t)kv->n_local_layers *
	       (uint64_t)kv->l.n_pages;
}

void exl_kvcache_set_window(struct exl_kvcache *kv, int window)
{
	kv->window = window > 0 ? window : 0;
}

int exl_kvcache_window(const struct exl_kvcache *kv)
{
	return kv->window;
}

int exl_kvcache_page_size(const struct exl_kvcache *kv)
{
	return kv->page_size;
}

int exl_kvcache_n_pages(const struct exl_kvcache *kv)
{
	return kv->n_pages;
}

int exl_kvcache_free_pages(const struct exl_kvcache *kv)
{
	return pool_free_pages(&kv->g);
}

int exl_kvcache_cached_pages(const struct exl_kvcache *kv)
{
	return kv->g.n_cached;
}

int exl_kvcache_page_refcount(const struct exl_kvcache *kv, int32_t page)
{
	if (page < 0 || page >= kv->n_pages)
		return -1;
	return kv->g.refcount[page];
}

int exl_kvcache_local_n_pages(const struct exl_kvcache *kv)
{
	return kv->l.n_pages;
}

int exl_kvcache_local_free_pages(const struct exl_kvcache *kv)
{
	return pool_free_pages(&kv->l);
}

int exl_kvcache_local_cached_pages(const struct exl_kvcache *kv)
{
	return kv->l.n_cached;
}

int exl_kvcache_local_refcount(const struct exl_kvcache *kv, int32_t page)
{
	if (page < 0 || page >= kv->l.n_pages)
		return -1;
	return kv->l.refcount[page];
}

int exl_kvcache_local_window(const struct exl_kvcache *kv)
{
	return kv->local_window;
}

int exl_kvcache_local_span(const struct exl_kvcache *kv, int n)
{
	int64_t len;

	if (!kv->n_local_layers)
		return 0;
	if (n < 0)
		n = 0;
	/* positions from the kept page before the window (window - 1 + a page
	 * behind the next position) to n ahead of it, on any alignment */
	len = (int64_t)kv->local_window - 1 + kv->page_size + n;
	return (int)((len + kv->page_size - 1) / kv->page_size) + 1;
}

const struct exl_kv_layer *exl_kvcache_layer(const struct exl_kvcache *kv, int layer)
{
	if (layer < 0 || layer >= kv->n_layers)
		return NULL;
	return &kv->layers[layer];
}

/* ---- sequences ---- */

void exl_kv_seq_init(struct exl_kv_seq *s)
{
	memset(s, 0, sizeof(*s));
}

/* Drops s's references to its pages of index >= from in both pools, last
 * first. */
static void unref_from(struct exl_kvcache *kv, struct exl_kv_seq *s, int from)
{
	for (int i = s->n_pages - 1; i >= from; i--) {
		if (i >= s->n_dropped)
			page_unref(&kv->g, s->pages[i]);
		if (kv->n_local_layers && i >= s->n_ldropped)
			page_unref(&kv->l, s->lpages[i]);
	}
}

void exl_kv_seq_release(struct exl_kvcache *kv, struct exl_kv_seq *s)
{
	/* Last page first: the LRU then evicts the tail of a released prefix
	 * before its head, which more sequences are likely to share. */
	unref_from(kv, s, 0);
	free(s->pages);
	free(s->lpages);
	free(s->tokens);
	const struct exl_lora_set *lora = s->lora;
	exl_kv_seq_init(s);
	s->lora = lora;
}

static int grow_i32(int32_t **a, int *cap_io, int n, int first)
{
	if (n <= *cap_io)
		return 0;
	int cap = *cap_io ? *cap_io : first;
	while (cap < n)
		cap = cap > INT32_MAX / 2 ? n : cap * 2;
	int32_t *p = realloc(*a, (size_t)cap * sizeof(*p));
	if (!p)
		return -1;
	*a = p;
	*cap_io = cap;
	return 0;
}

/* Room for n page indices in s's tables (the local one too when kv has a
 * local pool). */
static int grow_pages(const struct exl_kvcache *kv, struct exl_kv_seq *s, int n)
{
	if (grow_i32(&s->pages, &s->cap_pages, n, 4))
		return -1;
	if (kv->n_local_layers && grow_i32(&s->lpages, &s->cap_lpages, n, 4))
		return -1;
	return 0;
}

static int grow_tokens(struct exl_kv_seq *s, int n)
{
	return grow_i32(&s->tokens, &s->cap_tokens, n, 64);
}

/* The registered page holding tokens[0..page_size) as the continuation of
 * parent, or -1. */
static int32_t lookup_page(const struct exl_kvcache *kv, uint64_t h, int32_t parent,
			   const int32_t *tokens, uint64_t key)
{
	uint32_t b = (uint32_t)h & (kv->n_buckets - 1);

	for (int32_t p = kv->bucket[b]; p >= 0; p = kv->bucket_next[p]) {
		if (kv->hash[p] != h || kv->parent[p] != parent)
			continue;
		if (parent >= 0 && kv->parent_gen[p] != kv->gen[parent])
			continue;
		if (parent < 0 && kv->root_key[p] != key)
			continue;
		if (memcmp(&kv->page_tokens[(size_t)p * (size_t)kv->page_size], tokens,
			   (size_t)kv->page_size * sizeof(*tokens)))
			continue;
		return p;
	}
	return -1;
}

/* The local page registered as the companion of global page g as it is
 * now, or -1. */
static int32_t companion_of(const struct exl_kvcache *kv, int32_t g)
{
	int32_t p = kv->companion[g];

	if (p < 0 || !kv->l.registered[p] || kv->owner[p] != g || kv->owner_gen[p] != kv->gen[g])
		return -1;
	return p;
}

/* Index of the first page the position after n_pos needs in the local
 * layers (its window's first position's page). */
static int local_first(const struct exl_kvcache *kv, int n_pos)
{
	int64_t from = (int64_t)n_pos - kv->local_window + 1;

	return from > 0 ? (int)(from / kv->page_size) : 0;
}

/* Of the m global pages s maps, the most whose local window has its
 * companions: maps those companions into s and gives back the global pages
 * past them.  Returns the pages kept. */
static int share_local(struct exl_kvcache *kv, struct exl_kv_seq *s, int m)
{
	int ps = kv->page_size;

	for (; m > 0; m--) {
		int first = local_first(kv, m * ps), i;

		for (i = first; i < m && companion_of(kv, s->pages[i]) >= 0; i++)
			;
		if (i < m)
			continue;
		for (i = 0; i < m; i++) {
			s->lpages[i] = i < first ? -1 : companion_of(kv, s->pages[i]);
			if (i >= first)
				page_ref(&kv->l, s->lpages[i]);
		}
		s->n_ldropped = first;
		break;
	}
	return m;
}

int exl_kv_seq_share_prefix(struct exl_kvcache *kv, struct exl_kv_seq *s,
			    const int32_t *tokens, int n)
{
	int ps = kv->page_size;

	if (s->n_pos != 0 || s->n_pages != 0 || n <= ps)
		return 0;
	int max_pages = (n - 1) / ps;
	uint64_t key = seq_key(s);
	uint64_t h = root_hash(key);
	int32_t parent = -1;
	int matched = 0, kept;

	if (grow_pages(kv, s, max_pages) || grow_tokens(s, max_pages * ps))
		return 0;
	for (int i = 0; i < max_pages; i++) {
		const int32_t *pt = tokens + (size_t)i * (size_t)ps;

		h = chain_hash(h, pt, ps);
		int32_t p = lookup_page(kv, h, parent, pt, key);
		if (p < 0)
			break;
		page_ref(&kv->g, p);
		s->pages[matched++] = p;
		parent = p;
	}
	kept = kv->n_local_layers ? share_local(kv, s, matched) : matched;
	for (int i = matched - 1; i >= kept; i--)
		page_unref(&kv->g, s->pages[i]);
	s->n_pages = kept;
	s->n_pos = kept * ps;
	memcpy(s->tokens, tokens, (size_t)s->n_pos * sizeof(*tokens));
	return s->n_pos;
}

/* Pages of s that positions [n_pos, n_pos + n) fall in: [*first, *end). */
static void write_span(const struct exl_kvcache *kv, const struct exl_kv_seq *s, int n,
		       int *first, int *end)
{
	int ps = kv->page_size;
	int64_t last = (int64_t)s->n_pos + n;

	*first = s->n_pos / ps;
	*end = (int)((last + ps - 1) / ps);
}

int exl_kv_seq_pages_needed(const struct exl_kvcache *kv, const struct exl_kv_seq *s, int n)
{
	int first, end, need = 0;

	if (n <= 0)
		return 0;
	write_span(kv, s, n, &first, &end);
	for (int i = first; i < end; i++) {
		if (i >= s->n_pages || kv->g.refcount[s->pages[i]] > 1)
			need++;
	}
	return need;
}

int exl_kv_seq_local_pages_needed(const struct exl_kvcache *kv, const struct exl_kv_seq *s,
				  int n)
{
	int first, end, need = 0;

	if (n <= 0 || !kv->n_local_layers)
		return 0;
	write_span(kv, s, n, &first, &end);
	for (int i = first; i < end; i++) {
		if (i >= s->n_pages || s->lpages[i] < 0 || kv->l.refcount[s->lpages[i]] > 1)
			need++;
	}
	return need;
}

/* Device to device, queued ahead of the pass that writes the copy: no
 * host round trip and no wait.  The layers of one table: local (1) or
 * global (0). */
static int copy_page(struct exl_kvcache *kv, int table, int32_t dst, int32_t src)
{
	struct exl_backend *be = kv->be;
	size_t off_d = (size_t)dst * kv->page_bytes, off_s = (size_t)src * kv->page_bytes;

	for (int l = 0; l < kv->n_layers; l++) {
		char *k = kv->layers[l].k, *v = kv->layers[l].v;

		if (kv->layers[l].table != table)
			continue;
		if (be->ops->copy(be, k + off_d, k + off_s, kv->page_bytes) ||
		    be->ops->copy(be, v + off_d, v + off_s, kv->page_bytes))
			return -1;
	}
	return 0;
}

/* Makes s's page at index i of one pool its own to write: a shared one
 * is copied, a registered one of its own unregistered.  -1 when the copy
 * cannot be queued (s unchanged). */
static int own_page(struct exl_kvcache *kv, int32_t *pages, int i, int table)
{
	struct kv_pool *pl = table ? &kv->l : &kv->g;
	int32_t old = pages[i];

	if (pl->refcount[old] > 1) {
		int32_t p = page_alloc(kv, pl);

		if (copy_page(kv, table, p, old)) {
			page_unref(pl, p);
			return -1;
		}
		pl->refcount[old]--;
		pages[i] = p;
	} else if (pl->registered[old]) {
		/* Ours alone: its tail is about to change. */
		if (table)
			unregister_local(kv, old);
		else
			unregister_page(kv, old);
	}
	return 0;
}

int exl_kv_seq_reserve(struct exl_kvcache *kv, struct exl_kv_seq *s, int n)
{
	int first, end;

	if (n < 0 || n > INT32_MAX - s->n_pos)
		return -1;
	if (n == 0)
		return 0;
	if (exl_kv_seq_pages_needed(kv, s, n) > pool_free_pages(&kv->g) ||
	    exl_kv_seq_local_pages_needed(kv, s, n) > pool_free_pages(&kv->l))
		return -1;
	write_span(kv, s, n, &first, &end);
	if (grow_pages(kv, s, end) || grow_tokens(s, s->n_pos + n))
		return -1;

	/* Copy on write first: a failed copy leaves s's pages valid (those
	 * copied so far its own). */
	for (int i = first; i < end && i < s->n_pages; i++) {
		if (own_page(kv, s->pages, i, 0))
			return -1;
		if (!kv->n_local_layers)
			continue;
		/* never behind the window: truncate forgets such a sequence */
		if (s->lpages[i] < 0 || own_page(kv, s->lpages, i, 1))
			return -1;
	}
	for (int i = s->n_pages; i < end; i++) {
		s->pages[i] = page_alloc(kv, &kv->g);
		if (kv->n_local_layers)
			s->lpages[i] = page_alloc(kv, &kv->l);
	}
	if (end > s->n_pages)
		s->n_pages = end;
	return 0;
}

int exl_kv_seq_writable(const struct exl_kvcache *kv, const struct exl_kv_seq *s, int n)
{
	int first, end;

	if (n <= 0)
		return 1;
	if (n > INT32_MAX - s->n_pos)
		return 0;
	write_span(kv, s, n, &first, &end);
	if (end > s->n_pages)
		return 0;
	for (int i = first; i < end; i++) {
		if (kv->g.refcount[s->pages[i]] != 1 || kv->g.registered[s->pages[i]])
			return 0;
		if (kv->n_local_layers && (i < s->n_ldropped || kv->l.refcount[s->lpages[i]] != 1 ||
					   kv->l.registered[s->lpages[i]]))
			return 0;
	}
	return 1;
}

/* Registers page index i of s, now full, for sharing when its whole prefix
 * is registered and no equal page already is. */
static void register_full_page(struct exl_kvcache *kv, struct exl_kv_seq *s, int i)
{
	int ps = kv->page_size;
	int32_t p = s->pages[i];
	int32_t parent = i > 0 ? s->pages[i - 1] : -1;
	const int32_t *pt = s->tokens + (size_t)i * (size_t)ps;
	uint64_t h;

	if (kv->g.registered[p])
		return;
	/* a dropped parent no longer vouches for the prefix (pages are
	 * dropped long after the page behind them filled, so this is rare) */
	if (i > 0 && (parent < 0 || !kv->g.registered[parent]))
		return;
	h = parent >= 0 ? kv->hash[parent] : root_hash(seq_key(s));
	h = chain_hash(h, pt, ps);
	if (lookup_page(kv, h, parent, pt, seq_key(s)) >= 0)
		return;
	kv->hash[p] = h;
	kv->root_key[p] = parent >= 0 ? 0 : seq_key(s);
	kv->parent[p] = parent;
	kv->parent_gen[p] = parent >= 0 ? kv->gen[parent] : 0;
	memcpy(&kv->page_tokens[(size_t)p * (size_t)ps], pt, (size_t)ps * sizeof(*pt));
	hash_insert(kv, p);
}

/* Registers s's full local page at index i as the companion of its global
 * page there, when that is registered and has none. */
static void register_companion(struct exl_kvcache *kv, struct exl_kv_seq *s, int i)
{
	int32_t g = s->pages[i], p;

	if (i < s->n_ldropped || !kv->g.registered[g] || companion_of(kv, g) >= 0)
		return;
	p = s->lpages[i];
	if (kv->l.registered[p])
		unregister_local(kv, p);
	kv->owner[p] = g;
	kv->owner_gen[p] = kv->gen[g];
	kv->companion[g] = p;
	kv->l.registered[p] = true;
}

/* Gives back s's pages wholly before the window (the next token, at
 * n_pos, sees n_pos - window + 1 on) and one more page, kept so that a
 * rewind of up to a page finds its window whole: the global pool's when
 * every layer is local, else the local pool's.  Registered pages stay
 * cached as any released page. */
static void drop_behind_window(struct exl_kvcache *kv, struct exl_kv_seq *s)
{
	int ps = kv->page_size;
	int64_t keep_from;

	if (kv->n_local_layers) {
		keep_from = (int64_t)s->n_pos - kv->local_window + 1 - ps;
		while (s->n_ldropped < s->n_pages &&
		       (int64_t)(s->n_ldropped + 1) * ps <= keep_from) {
			page_unref(&kv->l, s->lpages[s->n_ldropped]);
			s->lpages[s->n_ldropped++] = -1;
		}
		return;
	}
	if (!kv->window)
		return;
	keep_from = (int64_t)s->n_pos - kv->window + 1 - ps;
	while (s->n_dropped < s->n_pages && (int64_t)(s->n_dropped + 1) * ps <= keep_from) {
		page_unref(&kv->g, s->pages[s->n_dropped]);
		s->pages[s->n_dropped++] = -1;
	}
}

int exl_kv_seq_commit(struct exl_kvcache *kv, struct exl_kv_seq *s, const int32_t *tokens, int n)
{
	int ps = kv->page_size;

	if (n < 0 || n > INT32_MAX - s->n_pos || (int64_t)s->n_pos + n > (int64_t)s->n_pages * ps ||
	    s->n_pos + n > s->cap_tokens)
		return -1;
	if (n == 0)
		return 0;
	memcpy(s->tokens + s->n_pos, tokens, (size_t)n * sizeof(*tokens));
	int before = s->n_pos / ps;
	s->n_pos += n;
	int full = s->n_pos / ps;
	for (int i = before; i < full; i++) {
		register_full_page(kv, s, i);
		if (kv->n_local_layers)
			register_companion(kv, s, i);
	}
	drop_behind_window(kv, s);
	return 0;
}

void exl_kv_seq_truncate(struct exl_kvcache *kv, struct exl_kv_seq *s, int n_pos)
{
	int ps = kv->page_size;
	int window = kv->n_local_layers ? kv->local_window : kv->window;
	int dropped = kv->n_local_layers ? s->n_ldropped : s->n_dropped;

	if (n_pos < 0)
		n_pos = 0;
	if (n_pos > s->n_pos)
		n_pos = s->n_pos;
	/* The next token, at n_pos, would see from n_pos - window + 1: if
	 * that was given back, nothing before n_pos can be used as it is */
	if (window && dropped && (int64_t)n_pos - window + 1 < (int64_t)dropped * ps)
		n_pos = 0;
	if (n_pos == 0 && dropped) {
		unref_from(kv, s, 0);
		s->n_pages = s->n_dropped = s->n_ldropped = 0;
	}
	s->n_pos = n_pos;
	int keep = n_pos / ps + (n_pos % ps != 0);
	if (s->n_pages > keep) {
		unref_from(kv, s, keep);
		s->n_pages = keep;
	}
	if (s->n_ldropped > s->n_pages)
		s->n_ldropped = s->n_pages;
}

int exl_kv_seq_fork(struct exl_kvcache *kv, struct exl_kv_seq *dst, const struct exl_kv_seq *src)
{
	if (dst->n_pos || dst->n_pages)
		return -1;
	if (grow_pages(kv, dst, src->n_pages) || grow_tokens(dst, src->n_pos))
		return -1;
	/* pages given back behind a sliding window stay given back */
	for (int i = 0; i < src->n_pages; i++) {
		dst->pages[i] = src->pages[i];
		if (i >= src->n_dropped)
			page_ref(&kv->g, src->pages[i]);
		if (!kv->n_local_layers)
			continue;
		dst->lpages[i] = src->lpages[i];
		if (i >= src->n_ldropped)
			page_ref(&kv->l, src->lpages[i]);
	}
	dst->n_pages = src->n_pages;
	dst->n_dropped = src->n_dropped;
	dst->n_ldropped = src->n_ldropped;
	dst->n_pos = src->n_pos;
	dst->lora = src->lora;   /* its K/V were computed under src's adapters */
	if (src->n_pos)
		memcpy(dst->tokens, src->tokens, (size_t)src->n_pos * sizeof(*src->tokens));
	return 0;
}

int exl_kv_seq_local_held(const struct exl_kvcache *kv, const struct exl_kv_seq *s)
{
	return kv->n_local_layers ? s->n_pages - s->n_ldropped : 0;
}

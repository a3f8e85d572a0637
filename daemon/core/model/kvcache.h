/* Paged KV cache: one pool of fixed-size pages shared by every sequence of
 * a model, a page table per sequence, and prefix sharing between sequences.
 *
 * Pages are reference counted.  A full page whose tokens (and every token
 * before them) are known is registered under a hash of that whole prefix,
 * so a new sequence with the same prompt prefix maps the same pages instead
 * of recomputing them.  Shared pages are never written: a sequence that must
 * write into a shared page gets its own copy first (copy on write).
 *
 * Owned by one engine thread; not thread-safe.
 */
#ifndef EXL_KVCACHE_H
#define EXL_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

struct exl_kvcache;
struct exl_lora_set;

struct exl_kv_seq {
	int32_t *pages;  /* page ids, one per page_size positions; -1 for the
			  * first n_dropped, given back behind a sliding window */
	int n_pages;
	int n_dropped;
	int cap_pages;
	/* The local pool's page ids (a cache with one, exl_kvcache_create_mixed),
	 * at the same indices as pages: n_pages of them, -1 for the first
	 * n_ldropped, given back behind the local layers' window. */
	int32_t *lpages;
	int n_ldropped;
	int cap_lpages;
	int n_pos;       /* positions that hold valid K/V */
	int32_t *tokens; /* the token at each position (for prefix hashing) */
	int cap_tokens;
	/* The adapters its K/V are computed under (NULL: none; lora.h), set
	 * by its owner and kept across exl_kv_seq_release.  Its key keys
	 * the prefix pages: never shared between different sets. */
	const struct exl_lora_set *lora;
};

/* A pool of n_tokens positions (rounded up to whole pages) on be.  On a
 * device with its own memory a pool larger than what is free is refused
 * with both numbers before anything is allocated. */
struct exl_kvcache *exl_kvcache_create(struct exl_backend *be, int n_layers, int n_kv_heads,
				       int head_dim, int n_tokens, int page_size,
				       char *err, size_t errlen);
/* A cache for a model that mixes sliding-window and global layers: the
 * layers with local[l] keep their K/V in a pool of their own, of
 * local_tokens positions (rounded up to whole pages), from which each
 * sequence holds only its last `window` positions and one page more
 * (pages behind it go back as it moves on); the others in the pool of
 * n_tokens, which keeps every position and shares prefixes.  Each sequence
 * then has a second page table (lpages), which the local layers read
 * through (exl_kv_layer.table 1).  local NULL, or no local layer: the
 * plain cache of exl_kvcache_create.  Every layer local is refused: that
 * is exl_kvcache_set_window's case, one pool. */
struct exl_kvcache *exl_kvcache_create_mixed(struct exl_backend *be, int n_layers,
					     int n_kv_heads, int head_dim, int n_tokens,
					     int page_size, const bool *local, int window,
					     int local_tokens, char *err, size_t errlen);
void exl_kvcache_free(struct exl_kvcache *kv);
/* Bytes of backend memory the cache holds: K and V of every layer, in both
 * pools. */
uint64_t exl_kvcache_bytes(const struct exl_kvcache *kv);
/* Of them, the local pool's (0 without one). */
uint64_t exl_kvcache_local_bytes(const struct exl_kvcache *kv);

/* Sizing the pool when kv_tokens is not configured (0). */
#define EXL_KV_DEFAULT_TOKENS 8192   /* on the CPU backend */
#define EXL_KV_MAX_TOKENS (1 << 24)  /* the largest pool, as kv_tokens allows */
#define EXL_KV_FREE_PERCENT 90       /* of the device memory free after the
				      * weights; the rest is left for
				      * activations and the backend's scratch */

/* Bytes one position of K and V takes over every layer (F16); 0 for a bad
 * shape or one whose size overflows. */
uint64_t exl_kv_bytes_per_token(int n_layers, int n_kv_heads, int head_dim);
/* Positions a pool may hold in EXL_KV_FREE_PERCENT of free_bytes at
 * bytes_per_token each, in whole pages of page_size, at most max_tokens
 * rounded up to whole pages (max_tokens <= 0: EXL_KV_MAX_TOKENS) and never
 * more than EXL_KV_MAX_TOKENS.  0 when not one page fits.  Pure arithmetic. */
int exl_kv_tokens_for_memory(uint64_t free_bytes, uint64_t bytes_per_token, int page_size,
			     int64_t max_tokens);
/* The same after `reserved` bytes of that share went elsewhere (a mixed
 * model's local pool): 0 when they take it all. */
int exl_kv_tokens_after(uint64_t free_bytes, uint64_t reserved, uint64_t bytes_per_token,
			int page_size, int64_t max_tokens);
/* The pool size for kv_tokens unset: on a backend with memory of its own
 * (ops->mem_info gives a total), exl_kv_tokens_for_memory of what is free
 * now, so call it after the weights are uploaded; on the CPU
 * EXL_KV_DEFAULT_TOKENS.  -1 with a message giving the numbers when not one
 * page fits, or when the device cannot be asked. */
int exl_kvcache_auto_tokens(struct exl_backend *be, int n_layers, int n_kv_heads, int head_dim,
			    int page_size, int64_t max_tokens, char *err, size_t errlen);
/* The global pool's size for a model whose n_local of n_layers layers keep
 * their K/V in a pool of their own of local_tokens positions
 * (exl_kvcache_create_mixed): the global pool holds n_layers - n_local
 * layers a position, in what the local pool leaves.  n_local 0 is
 * exl_kvcache_auto_tokens. */
int exl_kvcache_auto_tokens_mixed(struct exl_backend *be, int n_layers, int n_local,
				  int n_kv_heads, int head_dim, int page_size,
				  int64_t local_tokens, int64_t max_tokens, char *err,
				  size_t errlen);

/* Every layer of the model attends through a sliding window of `window`
 * positions (0: none, the default): a sequence's pages wholly behind its
 * window, and behind one more page kept for short rewinds, go back to the
 * pool as the sequence moves on (exl_kv_seq_commit), their entries -1.
 * Models whose layers mix windowed and global attention use
 * exl_kvcache_create_mixed instead.  Set it before any sequence uses kv. */
void exl_kvcache_set_window(struct exl_kvcache *kv, int window);
int exl_kvcache_window(const struct exl_kvcache *kv);

int exl_kvcache_page_size(const struct exl_kvcache *kv);
int exl_kvcache_n_pages(const struct exl_kvcache *kv);
/* Pages a reserve can take: unused ones plus cached ones (refcount 0 but
 * still registered for prefix sharing; evicted least recently used first). */
int exl_kvcache_free_pages(const struct exl_kvcache *kv);
int exl_kvcache_cached_pages(const struct exl_kvcache *kv);
/* References to page (tests, statistics); -1 when out of range. */
int exl_kvcache_page_refcount(const struct exl_kvcache *kv, int32_t page);
const struct exl_kv_layer *exl_kvcache_layer(const struct exl_kvcache *kv, int layer);

/* The local pool (0 for each without one): its pages, those a reserve can
 * take (free and cached: a cached local page is the companion of a
 * registered global page, mapped with it by exl_kv_seq_share_prefix), the
 * cached ones, a page's references (-1 out of range), and its window. */
int exl_kvcache_local_n_pages(const struct exl_kvcache *kv);
int exl_kvcache_local_free_pages(const struct exl_kvcache *kv);
int exl_kvcache_local_cached_pages(const struct exl_kvcache *kv);
int exl_kvcache_local_refcount(const struct exl_kvcache *kv, int32_t page);
int exl_kvcache_local_window(const struct exl_kvcache *kv);
/* The most local pages one sequence holds while it reserves up to n
 * positions ahead of what it has committed: its window, the page kept
 * behind it, and n, on any alignment.  0 without a local pool. */
int exl_kvcache_local_span(const struct exl_kvcache *kv, int n);

void exl_kv_seq_init(struct exl_kv_seq *s);
/* Drops every page reference of s and frees its arrays (s->lora stays). */
void exl_kv_seq_release(struct exl_kvcache *kv, struct exl_kv_seq *s);

/* Maps into an empty s the longest run of whole cached pages that matches
 * tokens[0..n) (with a local pool: whose local pages within the window
 * before its end are cached too).  Returns the number of positions reused
 * (a multiple of page_size, and always < n so at least one token is left
 * to compute). */
int exl_kv_seq_share_prefix(struct exl_kvcache *kv, struct exl_kv_seq *s,
			    const int32_t *tokens, int n);

/* Makes positions [s->n_pos, s->n_pos + n) writable in s: allocates pages
 * and un-shares the last page when needed.  Returns 0, or -1 when the pool
 * has too few free pages (s is unchanged then). */
int exl_kv_seq_reserve(struct exl_kvcache *kv, struct exl_kv_seq *s, int n);
/* Pages a reserve of n more positions would take from the pool; from the
 * local pool. */
int exl_kv_seq_pages_needed(const struct exl_kvcache *kv, const struct exl_kv_seq *s, int n);
int exl_kv_seq_local_pages_needed(const struct exl_kvcache *kv, const struct exl_kv_seq *s,
				  int n);
/* Local pages s holds (0 without a local pool). */
int exl_kv_seq_local_held(const struct exl_kvcache *kv, const struct exl_kv_seq *s);

/* 1 when positions [s->n_pos, s->n_pos + n) are reserved and s alone may
 * write them, else 0. */
int exl_kv_seq_writable(const struct exl_kvcache *kv, const struct exl_kv_seq *s, int n);

/* Records that positions [s->n_pos, s->n_pos + n) now hold the K/V of
 * tokens[0..n), registers pages that became full for sharing and, under a
 * sliding window, gives back the pages behind it. */
int exl_kv_seq_commit(struct exl_kvcache *kv, struct exl_kv_seq *s, const int32_t *tokens, int n);

/* Forgets positions >= n_pos (rewind for banned strings, token healing, a
 * rejected speculative draft) and gives back pages reserved past them;
 * n_pos above s->n_pos means s->n_pos.  A page kept partly keeps its
 * content and registration until the sequence next reserves into it,
 * which un-shares or unregisters it first, so a sequence mapping it
 * meanwhile still reads what its tokens say.  When the window the new
 * last position needs reaches into pages already given back (the global
 * pool's when every layer is local, else the local pool's), s forgets
 * everything (n_pos 0): its tokens are computed again. */
void exl_kv_seq_truncate(struct exl_kvcache *kv, struct exl_kv_seq *s, int n_pos);

/* Makes the empty dst a copy of src that shares every page, the last
 * partial one included (beam search: a beam and its parent's other
 * children), under src's adapters (lora); the first to write a shared
 * page copies it (reserve).  Returns 0, or -1 when out of memory (dst
 * stays empty). */
int exl_kv_seq_fork(struct exl_kvcache *kv, struct exl_kv_seq *dst, const struct exl_kv_seq *src);

#endif

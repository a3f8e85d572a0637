/* The paged KV cache over the CPU backend: reserve / commit / truncate /
 * release, prefix sharing, copy on write, the page cache, pool exhaustion,
 * the pages a sliding window gives back, forks (beam search), rolling
 * back proposed tokens (speculative decoding), and the local pool of
 * models that mix sliding-window and global layers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "kernels/backend.h"

#define PS 4      /* page size */
#define LAYERS 2
#define HEADS 2
#define HDIM 8
#define PAGE_HALFS (HEADS * PS * HDIM)

struct fixture {
	struct exl_backend *be;
	struct exl_kvcache *kv;
};

static struct exl_kvcache *make_cache(struct exl_backend *be, int n_tokens)
{
	char err[256];
	struct exl_kvcache *kv = exl_kvcache_create(be, LAYERS, HEADS, HDIM, n_tokens, PS, err,
						    sizeof(err));
	if (!kv)
		fail_msg("exl_kvcache_create: %s", err);
	return kv;
}

static struct fixture fx;

static int group_setup(void **state)
{
	char err[256];

	(void)state;
	fx.be = exl_backend_cpu_create(1, err, sizeof(err));
	if (!fx.be) {
		print_error("exl_backend_cpu_create: %s\n", err);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	fx.be->ops->destroy(fx.be);
	return 0;
}

/* Every test starts from a fresh pool of 8 pages. */
static int setup(void **state)
{
	fx.kv = make_cache(fx.be, 8 * PS);
	*state = &fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	exl_kvcache_free(f->kv);
	f->kv = NULL;
	return 0;
}

static void check_all_free(struct exl_kvcache *kv)
{
	for (int p = 0; p < exl_kvcache_n_pages(kv); p++)
		assert_int_equal(exl_kvcache_page_refcount(kv, p), 0);
	assert_int_equal(exl_kvcache_free_pages(kv), exl_kvcache_n_pages(kv));
}

static void seq_fill(struct exl_kvcache *kv, struct exl_kv_seq *s, const int32_t *tokens, int n)
{
	assert_int_equal(exl_kv_seq_reserve(kv, s, n), 0);
	assert_true(exl_kv_seq_writable(kv, s, n));
	assert_int_equal(exl_kv_seq_commit(kv, s, tokens, n), 0);
}

/* Host view of K of page p, layer l (CPU backend memory is host memory). */
static uint16_t *k_page(struct exl_kvcache *kv, int l, int32_t p)
{
	const struct exl_kv_layer *kl = exl_kvcache_layer(kv, l);

	return (uint16_t *)kl->k + (size_t)p * PAGE_HALFS;
}

static uint16_t *v_page(struct exl_kvcache *kv, int l, int32_t p)
{
	const struct exl_kv_layer *kl = exl_kvcache_layer(kv, l);

	return (uint16_t *)kl->v + (size_t)p * PAGE_HALFS;
}

static void test_shape(void **state)
{
	struct fixture *f = *state;
	const struct exl_kv_layer *kl = exl_kvcache_layer(f->kv, 1);

	assert_int_equal(exl_kvcache_page_size(f->kv), PS);
	assert_int_equal(exl_kvcache_n_pages(f->kv), 8);
	assert_non_null(kl);
	assert_int_equal(kl->page_size, PS);
	assert_int_equal(kl->n_kv_heads, HEADS);
	assert_int_equal(kl->head_dim, HDIM);
	assert_int_equal(kl->n_pages, 8);
	assert_null(exl_kvcache_layer(f->kv, LAYERS));
	assert_null(exl_kvcache_layer(f->kv, -1));
	check_all_free(f->kv);

	/* A pool that is not a whole number of pages rounds up. */
	struct exl_kvcache *kv = make_cache(f->be, 9);
	assert_int_equal(exl_kvcache_n_pages(kv), 3);
	exl_kvcache_free(kv);
}

static void test_bad_create(void **state)
{
	struct fixture *f = *state;
	char err[256] = "";

	assert_null(exl_kvcache_create(f->be, 0, HEADS, HDIM, 16, PS, err, sizeof(err)));
	assert_true(strstr(err, "bad shape") != NULL);
	assert_null(exl_kvcache_create(f->be, 1, HEADS, HDIM, 16, 0, err, sizeof(err)));
	assert_null(exl_kvcache_create(f->be, 1, HEADS, HDIM, -5, PS, err, sizeof(err)));
}

static void test_reserve_commit_truncate(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq s;
	int32_t toks[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };

	exl_kv_seq_init(&s);
	assert_int_equal(exl_kv_seq_pages_needed(kv, &s, 6), 2);
	assert_int_equal(exl_kv_seq_reserve(kv, &s, 6), 0);
	assert_int_equal(s.n_pages, 2);
	assert_int_equal(s.n_pos, 0);
	assert_int_equal(exl_kvcache_free_pages(kv), 6);
	/* Reserved but not committed: a second reserve takes nothing more. */
	assert_int_equal(exl_kv_seq_pages_needed(kv, &s, 6), 0);
	assert_int_equal(exl_kv_seq_reserve(kv, &s, 6), 0);
	assert_int_equal(exl_kvcache_free_pages(kv), 6);
	assert_false(exl_kv_seq_writable(kv, &s, 9));
	assert_true(exl_kv_seq_writable(kv, &s, 8));

	assert_int_equal(exl_kv_seq_commit(kv, &s, toks, 6), 0);
	assert_int_equal(s.n_pos, 6);
	assert_memory_equal(s.tokens, toks, 6 * sizeof(int32_t));
	/* Committing past the reservation is refused. */
	assert_int_equal(exl_kv_seq_commit(kv, &s, toks + 6, 3), -1);
	assert_int_equal(s.n_pos, 6);

	seq_fill(kv, &s, toks + 6, 4);
	assert_int_equal(s.n_pos, 10);
	assert_int_equal(s.n_pages, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(exl_kvcache_page_refcount(kv, s.pages[i]), 1);

	/* Truncate inside page 1 keeps pages 0 and 1. */
	int32_t p2 = s.pages[2];
	exl_kv_seq_truncate(kv, &s, 5);
	assert_int_equal(s.n_pos, 5);
	assert_int_equal(s.n_pages, 2);
	assert_int_equal(exl_kvcache_page_refcount(kv, p2), 0);
	assert_int_equal(exl_kvcache_free_pages(kv), 6);
	/* Truncating forward does nothing. */
	exl_kv_seq_truncate(kv, &s, 9);
	assert_int_equal(s.n_pos, 5);
	/* To a page boundary drops the page after it. */
	exl_kv_seq_truncate(kv, &s, 4);
	assert_int_equal(s.n_pages, 1);
	/* Rewriting page 0's tail after the rewind. */
	seq_fill(kv, &s, toks, 3);
	assert_int_equal(s.n_pos, 7);
	assert_memory_equal(s.tokens + 4, toks, 3 * sizeof(int32_t));

	exl_kv_seq_release(kv, &s);
	assert_int_equal(s.n_pages, 0);
	assert_null(s.pages);
	check_all_free(kv);
}

/* Pages computed under one adapter set are shared only with sequences
 * under the same set (its key), never with none or another. */
static void test_share_prefix_adapters(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_lora_set one = { .key = 0x1234 }, other = { .key = 0x5678 };
	struct exl_kv_seq a, b, c, d, e;
	int32_t t[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	exl_kv_seq_init(&c);
	exl_kv_seq_init(&d);
	exl_kv_seq_init(&e);
	a.lora = &one;
	seq_fill(kv, &a, t, 10);
	/* no adapter, another set: nothing shared */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, t, 10), 0);
	c.lora = &other;
	assert_int_equal(exl_kv_seq_share_prefix(kv, &c, t, 10), 0);
	/* the same set: both full pages */
	d.lora = &one;
	assert_int_equal(exl_kv_seq_share_prefix(kv, &d, t, 10), 8);
	assert_int_equal(d.pages[0], a.pages[0]);
	/* the set is kept across a release, with the pages it keys */
	exl_kv_seq_release(kv, &d);
	assert_ptr_equal(d.lora, &one);
	/* pages registered without an adapter are not shared with one */
	seq_fill(kv, &b, t, 10);
	e.lora = &other;
	assert_int_equal(exl_kv_seq_share_prefix(kv, &e, t, 10), 0);
	/* a fork (a beam) runs under its parent's adapters */
	exl_kv_seq_release(kv, &d);
	d.lora = NULL;
	assert_int_equal(exl_kv_seq_fork(kv, &d, &a), 0);
	assert_ptr_equal(d.lora, &one);
	exl_kv_seq_release(kv, &d);
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	exl_kv_seq_release(kv, &c);
	exl_kv_seq_release(kv, &e);
	check_all_free(kv);
}

static void test_share_prefix(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq a, b, c, d;
	int32_t ta[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
	int32_t tb[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14 };
	int32_t tc[9] = { 1, 2, 3, 4, 5, 6, 7, 99, 0 };

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	exl_kv_seq_init(&c);
	exl_kv_seq_init(&d);
	seq_fill(kv, &a, ta, 10); /* pages 0, 1 full and registered, page 2 partial */

	/* Same first 8 tokens: both full pages are mapped. */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, tb, 12), 8);
	assert_int_equal(b.n_pos, 8);
	assert_int_equal(b.n_pages, 2);
	assert_int_equal(b.pages[0], a.pages[0]);
	assert_int_equal(b.pages[1], a.pages[1]);
	assert_int_equal(exl_kvcache_page_refcount(kv, a.pages[0]), 2);
	assert_int_equal(exl_kvcache_page_refcount(kv, a.pages[1]), 2);
	assert_memory_equal(b.tokens, tb, 8 * sizeof(int32_t));
	seq_fill(kv, &b, tb + 8, 4);
	assert_int_equal(exl_kvcache_page_refcount(kv, b.pages[2]), 1);
	assert_int_not_equal(b.pages[2], a.pages[2]);

	/* Differs in the second page: only the first is shared. */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &c, tc, 9), 4);
	assert_int_equal(exl_kvcache_page_refcount(kv, a.pages[0]), 3);

	/* At least one token is always left to compute: 8 identical tokens
	 * share only the first page. */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &d, ta, 8), 4);
	exl_kv_seq_release(kv, &d);
	/* An exact second page without the first does not match. */
	int32_t te[8] = { 9, 9, 9, 9, 5, 6, 7, 8 };
	assert_int_equal(exl_kv_seq_share_prefix(kv, &d, te, 8), 0);
	assert_int_equal(d.n_pages, 0);
	/* Not into a sequence that already holds positions. */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &a, ta, 10), 0);

	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	exl_kv_seq_release(kv, &c);
	exl_kv_seq_release(kv, &d);
	check_all_free(kv);
}

static void test_copy_on_write(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq a, b;
	int32_t t[9] = { 5, 6, 7, 8, 1, 2, 3, 4, 0 };

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	seq_fill(kv, &a, t, 8);
	int32_t shared = a.pages[1];
	/* Mark page 1's K and V in every layer so the copy can be checked. */
	for (int l = 0; l < LAYERS; l++) {
		for (int i = 0; i < PAGE_HALFS; i++) {
			k_page(kv, l, shared)[i] = (uint16_t)(1000 * l + i);
			v_page(kv, l, shared)[i] = (uint16_t)(2000 * l + i + 7);
		}
	}
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, t, 9), 8);
	assert_int_equal(exl_kvcache_page_refcount(kv, shared), 2);
	assert_false(exl_kv_seq_writable(kv, &b, 1));

	/* b rewinds into the shared page: writing there needs its own copy. */
	exl_kv_seq_truncate(kv, &b, 6);
	assert_int_equal(b.n_pages, 2);
	assert_int_equal(exl_kv_seq_pages_needed(kv, &b, 1), 1);
	int free_before = exl_kvcache_free_pages(kv);
	assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), 0);
	assert_int_equal(exl_kvcache_free_pages(kv), free_before - 1);
	assert_int_not_equal(b.pages[1], shared);
	assert_int_equal(b.pages[0], a.pages[0]);
	assert_int_equal(exl_kvcache_page_refcount(kv, shared), 1);
	assert_int_equal(exl_kvcache_page_refcount(kv, b.pages[1]), 1);
	assert_true(exl_kv_seq_writable(kv, &b, 1));
	for (int l = 0; l < LAYERS; l++) {
		assert_memory_equal(k_page(kv, l, b.pages[1]), k_page(kv, l, shared),
				    PAGE_HALFS * sizeof(uint16_t));
		assert_memory_equal(v_page(kv, l, b.pages[1]), v_page(kv, l, shared),
				    PAGE_HALFS * sizeof(uint16_t));
	}
	int32_t x = 42;
	assert_int_equal(exl_kv_seq_commit(kv, &b, &x, 1), 0);
	assert_int_equal(b.n_pos, 7);

	/* a alone owns its registered page; rewinding into it and writing
	 * unregisters it instead of copying. */
	exl_kv_seq_truncate(kv, &a, 5);
	assert_int_equal(exl_kv_seq_pages_needed(kv, &a, 1), 0);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 1), 0);
	assert_int_equal(a.pages[1], shared);
	assert_int_equal(exl_kv_seq_commit(kv, &a, &x, 1), 0);
	/* Its old content is no longer offered for sharing. */
	struct exl_kv_seq c;
	exl_kv_seq_init(&c);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &c, t, 9), 4);

	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	exl_kv_seq_release(kv, &c);
	check_all_free(kv);
}

static void test_cache_reuse_and_eviction(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq a, b, big;
	int32_t t[13] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };
	int32_t junk[32];

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	exl_kv_seq_init(&big);
	seq_fill(kv, &a, t, 13);
	int32_t p0 = a.pages[0], p1 = a.pages[1], p2 = a.pages[2];
	exl_kv_seq_release(kv, &a);
	/* Released full pages stay cached and count as free. */
	assert_int_equal(exl_kvcache_cached_pages(kv), 3);
	check_all_free(kv);

	/* A later sequence with the same prompt revives them. */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, t, 13), 12);
	assert_int_equal(b.pages[0], p0);
	assert_int_equal(b.pages[1], p1);
	assert_int_equal(b.pages[2], p2);
	assert_int_equal(exl_kvcache_cached_pages(kv), 0);
	exl_kv_seq_release(kv, &b);
	assert_int_equal(exl_kvcache_cached_pages(kv), 3);

	/* Filling the pool evicts them: the last page of the prefix first. */
	for (int i = 0; i < 32; i++)
		junk[i] = 100 + i;
	assert_int_equal(exl_kv_seq_reserve(kv, &big, 6 * PS), 0);
	assert_int_equal(exl_kvcache_cached_pages(kv), 2);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, t, 13), 8);
	exl_kv_seq_release(kv, &b);
	assert_int_equal(exl_kv_seq_reserve(kv, &big, 8 * PS), 0);
	assert_int_equal(exl_kvcache_cached_pages(kv), 0);
	assert_int_equal(exl_kv_seq_commit(kv, &big, junk, 8 * PS), 0);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, t, 13), 0);
	exl_kv_seq_release(kv, &b);
	exl_kv_seq_release(kv, &big);
	check_all_free(kv);
}

/* Window 5, pages of 4: as the sequence moves, pages wholly behind its
 * window and one more page go back to the pool (full ones to the prefix
 * cache), their entries -1; a rewind within the kept page keeps the rest,
 * one past it forgets everything. */
static void test_window(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq s, t;
	int32_t toks[32];

	for (int i = 0; i < 32; i++)
		toks[i] = 100 + i;
	exl_kvcache_set_window(kv, 5);
	assert_int_equal(exl_kvcache_window(kv), 5);
	exl_kv_seq_init(&s);
	/* 12 positions: the next token (12) sees 8..12; page 1 (4..7) is the
	 * one kept, page 0 goes */
	seq_fill(kv, &s, toks, 12);
	assert_int_equal(s.n_dropped, 1);
	assert_int_equal(s.pages[0], -1);
	assert_int_equal(exl_kvcache_free_pages(kv), 8 - 2);
	/* one at a time up to 20: pages 1 and 2 go too (17 sees 13..17,
	 * keeping from 9: page 2 ends at 12) */
	for (int i = 12; i < 20; i++)
		seq_fill(kv, &s, toks + i, 1);
	assert_int_equal(s.n_pos, 20);
	assert_int_equal(s.n_dropped, 3);
	assert_int_equal(s.n_pages, 5);
	assert_int_equal(exl_kvcache_free_pages(kv), 8 - 2);
	for (int i = 0; i < s.n_dropped; i++)
		assert_int_equal(s.pages[i], -1);
	/* dropped full pages stay in the prefix cache: another sequence
	 * with the same tokens maps them back */
	exl_kv_seq_init(&t);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &t, toks, 13), 12);
	exl_kv_seq_release(kv, &t);
	/* a fork (beam search) shares what is left and not what was given
	 * back */
	exl_kv_seq_init(&t);
	assert_int_equal(exl_kv_seq_fork(kv, &t, &s), 0);
	assert_int_equal(t.n_dropped, 3);
	assert_int_equal(t.n_pos, 20);
	for (int i = 0; i < t.n_pages; i++) {
		assert_int_equal(t.pages[i], s.pages[i]);
		if (i >= t.n_dropped)
			assert_int_equal(exl_kvcache_page_refcount(kv, t.pages[i]), 2);
	}
	exl_kv_seq_release(kv, &t);
	assert_int_equal(exl_kvcache_page_refcount(kv, s.pages[3]), 1);

	/* a rewind of 3 (20 -> 17: sees 13..17, kept from 12) keeps all */
	exl_kv_seq_truncate(kv, &s, 17);
	assert_int_equal(s.n_pos, 17);
	assert_int_equal(s.n_dropped, 3);
	/* one to 14 needs 10..14: page 2 was given back, so all is forgotten */
	exl_kv_seq_truncate(kv, &s, 14);
	assert_int_equal(s.n_pos, 0);
	assert_int_equal(s.n_pages, 0);
	assert_int_equal(s.n_dropped, 0);
	/* and the sequence starts over */
	seq_fill(kv, &s, toks, 6);
	assert_int_equal(s.n_dropped, 0);
	exl_kv_seq_release(kv, &s);
	for (int p = 0; p < exl_kvcache_n_pages(kv); p++)
		assert_int_equal(exl_kvcache_page_refcount(kv, p), 0);
	assert_int_equal(exl_kvcache_free_pages(kv), 8);
}

/* A cache with a local pool: layer 0 local (window 5), layer 1 global; 16
 * global pages, 6 local ones. */
static struct exl_kvcache *make_mixed(struct exl_backend *be)
{
	static const bool local[LAYERS] = { true, false };
	char err[256];
	struct exl_kvcache *kv = exl_kvcache_create_mixed(be, LAYERS, HEADS, HDIM, 16 * PS, PS,
							  local, 5, 6 * PS, err, sizeof(err));

	if (!kv)
		fail_msg("exl_kvcache_create_mixed: %s", err);
	return kv;
}

static int local_used(const struct exl_kvcache *kv)
{
	return exl_kvcache_local_n_pages(kv) - exl_kvcache_local_free_pages(kv);
}

/* The local pool: its shape, pages behind the window given back from it
 * while the global pool keeps every one, a rewind within the kept page,
 * one past it (everything forgotten), and refusals. */
static void test_local_window(void **state)
{
	struct exl_kvcache *kv = make_mixed(((struct fixture *)*state)->be);
	static const bool all[LAYERS] = { true, true };
	struct exl_kv_seq s;
	int32_t toks[40];
	char err[256];

	for (int i = 0; i < 40; i++)
		toks[i] = 200 + i;
	assert_int_equal(exl_kvcache_local_n_pages(kv), 6);
	assert_int_equal(exl_kvcache_local_window(kv), 5);
	assert_int_equal(exl_kvcache_layer(kv, 0)->table, 1);
	assert_int_equal(exl_kvcache_layer(kv, 0)->n_pages, 6);
	assert_int_equal(exl_kvcache_layer(kv, 1)->table, 0);
	assert_int_equal(exl_kvcache_layer(kv, 1)->n_pages, 16);
	assert_int_equal(exl_kvcache_local_bytes(kv), 2ull * PAGE_HALFS * 2 * 6);
	assert_int_equal(exl_kvcache_bytes(kv), 2ull * PAGE_HALFS * 2 * (6 + 16));
	/* window 5 + a page kept + 1 ahead: 3 pages, and one for alignment */
	assert_int_equal(exl_kvcache_local_span(kv, 1), 4);
	exl_kv_seq_init(&s);
	for (int i = 0; i < 36; i++) {
		seq_fill(kv, &s, toks + i, 1);
		assert_true(local_used(kv) <= 3);
		assert_int_equal(exl_kvcache_n_pages(kv) - exl_kvcache_free_pages(kv),
				 (i + PS) / PS);
	}
	/* 36 positions: the next (36) sees 32..36, keeping from 28: pages 0..6
	 * given back from the local pool, none from the global one */
	assert_int_equal(s.n_ldropped, 7);
	assert_int_equal(s.n_dropped, 0);
	assert_int_equal(s.n_pages, 9);
	for (int i = 0; i < s.n_pages; i++) {
		assert_true(s.pages[i] >= 0);
		assert_int_equal(s.lpages[i] < 0, i < 7);
	}
	/* every full local page is its global page's companion: the dropped
	 * ones stay cached in the local pool */
	assert_true(exl_kvcache_local_cached_pages(kv) > 0);
	assert_int_equal(exl_kv_seq_local_held(kv, &s), 2);
	/* a rewind of 3 (36 -> 33: sees 29..33, page 7 on) keeps it all */
	exl_kv_seq_truncate(kv, &s, 33);
	assert_int_equal(s.n_pos, 33);
	assert_int_equal(s.n_ldropped, 7);
	/* one to 30 needs 26..30: page 6 was given back, all is forgotten */
	exl_kv_seq_truncate(kv, &s, 30);
	assert_int_equal(s.n_pos, 0);
	assert_int_equal(s.n_pages, 0);
	assert_int_equal(s.n_ldropped, 0);
	assert_int_equal(local_used(kv), 0);
	exl_kv_seq_release(kv, &s);
	check_all_free(kv);
	assert_int_equal(exl_kvcache_local_free_pages(kv), 6);
	exl_kvcache_free(kv);

	/* every layer local, or no window or positions: refused */
	assert_null(exl_kvcache_create_mixed(((struct fixture *)*state)->be, LAYERS, HEADS, HDIM,
					     16 * PS, PS, all, 5, 6 * PS, err, sizeof(err)));
	assert_non_null(strstr(err, "local pool"));
	assert_null(exl_kvcache_create_mixed(((struct fixture *)*state)->be, LAYERS, HEADS, HDIM,
					     16 * PS, PS, (const bool[]){ true, false }, 0, 6 * PS,
					     err, sizeof(err)));
}

/* Forks share both tables and copy the page they write in each pool; a
 * released sequence's prefix maps back its window's local pages through
 * their companions; a reserve the local pool cannot satisfy changes
 * nothing. */
static void test_local_fork_share(void **state)
{
	struct exl_kvcache *kv = make_mixed(((struct fixture *)*state)->be);
	struct exl_kv_seq a, b, c, d[3];
	int32_t toks[40];

	for (int i = 0; i < 40; i++)
		toks[i] = 300 + i;
	exl_kv_seq_init(&a);
	seq_fill(kv, &a, toks, 14);   /* pages 0..3, the last partial */
	assert_int_equal(a.n_ldropped, 1);
	k_page(kv, 1, a.pages[3])[0] = 0x1234;
	((uint16_t *)exl_kvcache_layer(kv, 0)->k)[(size_t)a.lpages[3] * PAGE_HALFS] = 0x4321;

	exl_kv_seq_init(&b);
	assert_int_equal(exl_kv_seq_fork(kv, &b, &a), 0);
	assert_int_equal(b.n_ldropped, 1);
	assert_int_equal(b.lpages[0], -1);
	for (int i = 1; i < 4; i++) {
		assert_int_equal(b.lpages[i], a.lpages[i]);
		assert_int_equal(exl_kvcache_local_refcount(kv, a.lpages[i]), 2);
	}
	/* b writes position 14: its own copy of page 3 in both pools */
	assert_int_equal(exl_kv_seq_local_pages_needed(kv, &b, 1), 1);
	assert_int_equal(exl_kv_seq_pages_needed(kv, &b, 1), 1);
	assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), 0);
	assert_int_not_equal(b.lpages[3], a.lpages[3]);
	assert_int_not_equal(b.pages[3], a.pages[3]);
	assert_int_equal(k_page(kv, 1, b.pages[3])[0], 0x1234);
	assert_int_equal(((uint16_t *)exl_kvcache_layer(kv, 0)->k)[(size_t)b.lpages[3] *
								  PAGE_HALFS], 0x4321);
	assert_int_equal(exl_kvcache_local_refcount(kv, a.lpages[3]), 1);
	exl_kv_seq_release(kv, &b);

	/* a released: a new sequence with the same tokens maps pages 0..3
	 * globally and, through the companions, the local window's (position
	 * 16 sees 12..16: page 3 on) */
	seq_fill(kv, &a, toks + 14, 2);   /* 16: page 3 full, registered */
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_init(&c);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &c, toks, 17), 16);
	assert_int_equal(c.n_ldropped, 3);
	assert_int_equal(c.n_pages, 4);
	assert_true(c.lpages[3] >= 0);
	assert_int_equal(exl_kvcache_local_refcount(kv, c.lpages[3]), 1);
	exl_kv_seq_release(kv, &c);

	/* two sequences of 12 hold 2 local pages each (page 0 given back,
	 * cached as a companion), a third of 8 the last 2 after evicting
	 * those: its next position needs a page the local pool does not
	 * have, and the reserve fails and changes nothing */
	for (int k = 0; k < 3; k++) {
		int32_t t[12];

		for (int i = 0; i < 12; i++)
			t[i] = 1000 * (k + 1) + i;
		exl_kv_seq_init(&d[k]);
		seq_fill(kv, &d[k], t, k < 2 ? 12 : 8);
	}
	assert_int_equal(local_used(kv), 6);
	assert_int_equal(exl_kvcache_local_free_pages(kv), 0);
	assert_int_equal(exl_kv_seq_local_pages_needed(kv, &d[2], 1), 1);
	assert_true(exl_kvcache_free_pages(kv) > 0);
	int n_pages = d[2].n_pages;
	assert_int_equal(exl_kv_seq_reserve(kv, &d[2], 1), -1);
	assert_int_equal(d[2].n_pages, n_pages);
	assert_int_equal(d[2].n_pos, 8);
	for (int k = 0; k < 3; k++)
		exl_kv_seq_release(kv, &d[k]);
	check_all_free(kv);
	assert_int_equal(exl_kvcache_local_free_pages(kv), 6);
	exl_kvcache_free(kv);
}

static void test_exhaustion(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq a, b;
	int32_t t[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	/* More than the pool: refused, nothing taken. */
	assert_int_equal(exl_kv_seq_pages_needed(kv, &a, 8 * PS + 1), 9);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 8 * PS + 1), -1);
	assert_int_equal(a.n_pages, 0);
	assert_int_equal(a.n_pos, 0);
	check_all_free(kv);

	seq_fill(kv, &a, t, 8);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 6 * PS), 0);
	assert_int_equal(exl_kvcache_free_pages(kv), 0);
	assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), -1);
	assert_int_equal(b.n_pages, 0);

	/* A shared page that needs a copy with no page left: b is unchanged. */
	assert_int_equal(exl_kv_seq_share_prefix(kv, &b, t, 8), 4);
	exl_kv_seq_truncate(kv, &b, 2);
	int32_t before = b.pages[0];
	assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), -1);
	assert_int_equal(b.n_pages, 1);
	assert_int_equal(b.pages[0], before);
	assert_int_equal(b.n_pos, 2);
	assert_int_equal(exl_kvcache_page_refcount(kv, before), 2);

	/* Truncating a to where it is gives back its reserved tail. */
	exl_kv_seq_truncate(kv, &a, 8);
	assert_int_equal(a.n_pages, 2);
	assert_int_equal(exl_kvcache_free_pages(kv), 6);
	assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), 0);
	assert_int_not_equal(b.pages[0], before);
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &b);
	check_all_free(kv);
}

/* Beam search: a fork shares every page, the partial last one included;
 * the first writer of a shared page gets a copy, the last owner writes in
 * place. */
static void test_fork(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq a, b;
	int32_t t[6] = { 1, 2, 3, 4, 5, 6 }, x = 9;

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&b);
	seq_fill(kv, &a, t, 6);
	assert_int_equal(exl_kv_seq_fork(kv, &b, &a), 0);
	assert_int_equal(b.n_pos, 6);
	assert_int_equal(b.n_pages, 2);
	assert_memory_equal(b.tokens, t, sizeof(t));
	assert_int_equal(exl_kvcache_page_refcount(kv, a.pages[0]), 2);
	assert_int_equal(exl_kvcache_page_refcount(kv, a.pages[1]), 2);
	assert_int_equal(exl_kv_seq_fork(kv, &b, &a), -1); /* b is not empty */
	int32_t partial = a.pages[1];

	assert_int_equal(exl_kv_seq_reserve(kv, &b, 1), 0);
	assert_int_not_equal(b.pages[1], partial);
	assert_int_equal(b.pages[0], a.pages[0]);
	assert_int_equal(exl_kv_seq_commit(kv, &b, &x, 1), 0);
	assert_int_equal(exl_kvcache_page_refcount(kv, partial), 1);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 1), 0);
	assert_int_equal(a.pages[1], partial);
	exl_kv_seq_release(kv, &a);
	assert_int_equal(exl_kvcache_page_refcount(kv, b.pages[0]), 1);
	exl_kv_seq_release(kv, &b);
	check_all_free(kv);
}

/* Speculative decoding: a sequence writes proposed tokens that fill a
 * page (registered for sharing), and rolls back into it.  Another
 * sequence whose prompt is those very tokens maps the page meanwhile; the
 * first writing there again gets its own copy, and the page keeps what
 * the other reads. */
static void test_truncate_drafts(void **state)
{
	struct fixture *f = *state;
	struct exl_kvcache *kv = f->kv;
	struct exl_kv_seq a, c;
	int32_t t[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 0 }, x = 42;

	exl_kv_seq_init(&a);
	exl_kv_seq_init(&c);
	seq_fill(kv, &a, t, 5);
	seq_fill(kv, &a, t + 5, 3); /* the proposals 6, 7, 8 fill page 1 */
	int32_t drafted = a.pages[1];

	for (int l = 0; l < LAYERS; l++)
		k_page(kv, l, drafted)[0] = (uint16_t)(77 + l);
	exl_kv_seq_truncate(kv, &a, 6); /* 7 and 8 rejected */
	assert_int_equal(a.n_pages, 2);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &c, t, 9), 8);
	assert_int_equal(c.pages[1], drafted);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 1), 0);
	assert_int_not_equal(a.pages[1], drafted);
	assert_int_equal(exl_kv_seq_commit(kv, &a, &x, 1), 0);
	for (int l = 0; l < LAYERS; l++)
		assert_int_equal(k_page(kv, l, drafted)[0], 77 + l);
	assert_int_equal(exl_kvcache_page_refcount(kv, drafted), 1);
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &c);
	/* Alone, the same roll back writes in place and stops offering the
	 * page (other tokens: the first page 1 is still cached, and rightly
	 * offered). */
	int32_t u[9] = { 1, 2, 3, 4, 9, 10, 11, 12, 0 };

	exl_kv_seq_init(&a);
	seq_fill(kv, &a, u, 8);
	drafted = a.pages[1];
	exl_kv_seq_truncate(kv, &a, 6);
	assert_int_equal(exl_kv_seq_reserve(kv, &a, 1), 0);
	assert_int_equal(a.pages[1], drafted);
	assert_int_equal(exl_kv_seq_commit(kv, &a, &x, 1), 0);
	assert_int_equal(exl_kv_seq_share_prefix(kv, &c, u, 9), 4);
	exl_kv_seq_release(kv, &a);
	exl_kv_seq_release(kv, &c);
	check_all_free(kv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shape, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_create, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_commit_truncate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_share_prefix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_share_prefix_adapters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_on_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_reuse_and_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exhaustion, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fork, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncate_drafts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_local_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_local_fork_share, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

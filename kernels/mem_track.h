/* The bytes behind each pointer a backend handed out, and their total.
 *
 * ops->free and ops->unload get only the pointer, so a backend that reports
 * what it holds (ops->mem_info) remembers each allocation's size here.  The
 * backend's owner thread alone adds and removes; the total is read with an
 * atomic load, so a status request on another thread may read it at any
 * time.  Plain C that also compiles as C++ (the CUDA backend's .cu files).
 */
#ifndef EXL_MEM_TRACK_H
#define EXL_MEM_TRACK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct exl_mem_track {
	const void **ptr;
	size_t *bytes;
	size_t n;
	size_t cap;
	uint64_t total; /* atomic: exl_mem_track_total */
};

static inline void exl_mem_track_set_total(struct exl_mem_track *t, uint64_t v)
{
	__atomic_store_n(&t->total, v, __ATOMIC_RELAXED);
}

/* 0, or -1 when out of memory (nothing recorded). */
static inline int exl_mem_track_add(struct exl_mem_track *t, const void *p, size_t bytes)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		const void **np;
		size_t *nb;

		if (cap > SIZE_MAX / sizeof(*t->bytes))
			return -1;
		np = (const void **)realloc((void *)t->ptr, cap * sizeof(*np));
		if (!np)
			return -1;
		t->ptr = np;
		nb = (size_t *)realloc(t->bytes, cap * sizeof(*nb));
		if (!nb)
			return -1;
		t->bytes = nb;
		t->cap = cap;
	}
	t->ptr[t->n] = p;
	t->bytes[t->n] = bytes;
	t->n++;
	exl_mem_track_set_total(t, t->total + bytes);
	return 0;
}

/* The bytes recorded for p (the most recent record), or 0 when unknown. */
static inline size_t exl_mem_track_bytes(const struct exl_mem_track *t, const void *p)
{
	for (size_t i = t->n; i-- > 0;)
		if (t->ptr[i] == p)
			return t->bytes[i];
	return 0;
}

/* Forgets p (the most recent record of it): 1, or 0 when p is unknown. */
static inline int exl_mem_track_remove(struct exl_mem_track *t, const void *p)
{
	for (size_t i = t->n; i-- > 0;) {
		if (t->ptr[i] != p)
			continue;
		exl_mem_track_set_total(t, t->total - t->bytes[i]);
		t->n--;
		t->ptr[i] = t->ptr[t->n];
		t->bytes[i] = t->bytes[t->n];
		return 1;
	}
	return 0;
}

static inline uint64_t exl_mem_track_total(const struct exl_mem_track *t)
{
	return __atomic_load_n(&t->total, __ATOMIC_RELAXED);
}

static inline void exl_mem_track_free(struct exl_mem_track *t)
{
	free((void *)t->ptr);
	free(t->bytes);
	t->ptr = NULL;
	t->bytes = NULL;
	t->n = 0;
	t->cap = 0;
	exl_mem_track_set_total(t, 0);
}

#endif

/* A binary min-heap of 64-bit keys.  Both BPE tokenizers use it for their
 * merge candidates, packed as rank << 32 | position so that one integer
 * compare orders by rank and then leftmost. */
#ifndef EXL_U64_HEAP_H
#define EXL_U64_HEAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct u64_heap {
	uint64_t *v;
	size_t n, cap;
};

/* Returns 0, or -1 when growing the heap fails (it is unchanged then). */
int exl_u64_heap_push(struct u64_heap *h, uint64_t key);
/* Removes and returns the smallest key; h->n must be nonzero. */
uint64_t exl_u64_heap_pop(struct u64_heap *h);

static inline void u64_heap_free(struct u64_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}

#endif

#include "daemon/core/util/u64_heap.h"

int exl_u64_heap_push(struct u64_heap *h, uint64_t p)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		uint64_t *v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -1;
		h->v = v;
		h->cap = cap;
	}
	for (i = h->n++; i > 0; i = (i - 1) / 2) {
		uint64_t parent = h->v[(i - 1) / 2];

		if (p >= parent)
			break;
		h->v[i] = parent;
	}
	h->v[i] = p;
	return 0;
}

uint64_t exl_u64_heap_pop(struct u64_heap *h)
{
	uint64_t top = h->v[0], last = h->v[--h->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1] < h->v[c])
			c++;
		if (h->v[c] >= last)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

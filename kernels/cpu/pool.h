/* A persistent pool of worker threads for the CPU backend.
 *
 * The calling thread is worker 0 and takes part in every job, so a pool of
 * n threads starts n - 1 workers.  Workers spin briefly between jobs and
 * then sleep, so back-to-back ops of a forward pass do not pay a wake-up
 * each, and an idle daemon uses no CPU.
 */
#ifndef EXL_CPU_POOL_H
#define EXL_CPU_POOL_H

#include <stddef.h>

struct exl_pool;

/* fn runs once on each of nth threads with ith = 0 .. nth - 1. */
typedef void (*exl_pool_fn)(void *ctx, int ith, int nth);

struct exl_pool *exl_pool_create(int n_threads, char *err, size_t errlen);
void exl_pool_destroy(struct exl_pool *p);
int exl_pool_size(const struct exl_pool *p);

/* Runs fn on every thread of the pool and returns when all have finished.
 * Must be called from one thread at a time (the pool's owner). */
void exl_pool_run(struct exl_pool *p, exl_pool_fn fn, void *ctx);

/* The slice [*begin, *end) of n items that thread ith of nth takes. */
static inline void exl_pool_split(size_t n, int ith, int nth, size_t *begin, size_t *end)
{
	size_t per = (n + (size_t)nth - 1) / (size_t)nth;
	size_t b = per * (size_t)ith;
	size_t e = b + per;
	*begin = b < n ? b : n;
	*end = e < n ? e : n;
}

#endif

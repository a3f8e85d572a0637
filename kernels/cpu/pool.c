/* The CPU backend's worker pool (kernels/cpu/pool.h).
 *
 * A job is published by bumping `gen` (release) after storing fn/ctx; each
 * worker remembers the last generation it ran.  Between jobs a worker polls
 * `gen` for a bounded number of pause iterations, then sleeps on `wake`.
 * The owner runs its own share (ith 0), then waits for `pending` to reach
 * zero the same way: a bounded spin, then a sleep on `done`.
 *
 * The spin bounds adapt, as adaptive mutexes do: a wait that ends while
 * spinning doubles the waiter's bound, one that has to sleep halves it.  On
 * a quiet machine back-to-back ops find everyone spinning (no syscalls).
 * When other processes hold the cores, the thread being waited for may be
 * queued behind the spinner on the same core; then spins keep failing, the
 * bounds drop to a few microseconds, and the pool degrades to plain
 * blocking hand-offs instead of burning a whole spin per op.  (Yielding
 * instead would hand the core to the other process for a full time slice.)
 *
 * Sleeping and waking pair a flag with the watched word, both sequentially
 * consistent (a Dekker handshake): the sleeper raises its flag and then
 * re-reads the word; the publisher stores the word and then reads the flag.
 * At least one of them sees the other's store, so either the sleeper does
 * not sleep or the publisher signals it (under the mutex, so the signal
 * cannot fall between the sleeper's check and its wait).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#include "kernels/cpu/pool.h"

/* Bounds of a spin, in pause iterations (a pause is some tens of cycles):
 * at most of the order of 100 us, far more than the gap between two ops of
 * a forward pass, far less than the gap between requests; at least a few
 * microseconds. */
#define POOL_SPIN_MAX 4096
#define POOL_SPIN_MIN 64
/* More workers than any machine this runs on; bounds the allocation. */
#define POOL_MAX_THREADS 1024

struct exl_pool;

struct pool_worker {
	struct exl_pool *pool;
	pthread_t thread;
	int ith;
};

struct exl_pool {
	int n;                       /* threads, the owner included */
	struct pool_worker *workers; /* [n - 1]: ith 1 .. n - 1 */
	int n_started;

	exl_pool_fn fn;
	void *ctx;
	_Atomic unsigned gen;        /* bumped once per job */
	_Atomic int pending;         /* workers still running the job */
	_Atomic bool stop;

	pthread_mutex_t mtx;
	pthread_cond_t wake;         /* workers sleep here between jobs */
	pthread_cond_t done;         /* the owner sleeps here for the last worker */
	_Atomic int n_sleeping;      /* workers in (or entering) wait on `wake` */
	_Atomic bool owner_sleeping;
	int owner_spin;              /* the owner's adaptive spin bound */
};

static int spin_grow(int spin)
{
	return spin < POOL_SPIN_MAX / 2 ? spin * 2 : POOL_SPIN_MAX;
}

static int spin_shrink(int spin)
{
	return spin > POOL_SPIN_MIN * 2 ? spin / 2 : POOL_SPIN_MIN;
}

/* Until gen differs from seen; returns the new generation.  *spin is the
 * caller's adaptive bound. */
static unsigned wait_for_job(struct exl_pool *p, unsigned seen, int *spin)
{
	unsigned g;

	for (int i = 0; i < *spin; i++) {
		g = atomic_load_explicit(&p->gen, memory_order_acquire);
		if (g != seen) {
			*spin = spin_grow(*spin);
			return g;
		}
		cpu_relax();
	}
	*spin = spin_shrink(*spin);
	pthread_mutex_lock(&p->mtx);
	atomic_fetch_add(&p->n_sleeping, 1);
	while ((g = atomic_load(&p->gen)) == seen)
		pthread_cond_wait(&p->wake, &p->mtx);
	atomic_fetch_sub(&p->n_sleeping, 1);
	pthread_mutex_unlock(&p->mtx);
	return g;
}

static void *worker_main(void *arg)
{
	struct pool_worker *w = arg;
	struct exl_pool *p = w->pool;
	unsigned seen = 0;
	int spin = POOL_SPIN_MAX;

	for (;;) {
		seen = wait_for_job(p, seen, &spin);
		if (atomic_load_explicit(&p->stop, memory_order_relaxed))
			break;
		p->fn(p->ctx, w->ith, p->n);
		if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->owner_sleeping)) {
			pthread_mutex_lock(&p->mtx);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mtx);
		}
	}
	return NULL;
}

/* Publishes a new generation and wakes sleeping workers. */
static void publish(struct exl_pool *p)
{
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->n_sleeping) > 0) {
		pthread_mutex_lock(&p->mtx);
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->mtx);
	}
}

static void wait_for_workers(struct exl_pool *p)
{
	for (int i = 0; i < p->owner_spin; i++) {
		if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) {
			p->owner_spin = spin_grow(p->owner_spin);
			return;
		}
		cpu_relax();
	}
	p->owner_spin = spin_shrink(p->owner_spin);
	pthread_mutex_lock(&p->mtx);
	atomic_store(&p->owner_sleeping, true);
	while (atomic_load(&p->pending) != 0)
		pthread_cond_wait(&p->done, &p->mtx);
	atomic_store(&p->owner_sleeping, false);
	pthread_mutex_unlock(&p->mtx);
}

static int online_cores(void)
{
	cpu_set_t set;
	long n;

	/* The cores this process may run on (taskset, cgroup cpusets), else
	 * every online one. */
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		n = CPU_COUNT(&set);
		if (n > 0)
			return (int)n;
	}
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static void stop_workers(struct exl_pool *p)
{
	if (p->n_started == 0)
		return;
	atomic_store(&p->stop, true);
	publish(p);
	for (int i = 0; i < p->n_started; i++)
		pthread_join(p->workers[i].thread, NULL);
	p->n_started = 0;
}

struct exl_pool *exl_pool_create(int n_threads, char *err, size_t errlen)
{
	struct exl_pool *p;
	int e;

	if (n_threads < 0 || n_threads > POOL_MAX_THREADS) {
		snprintf(err, errlen, "thread pool: %d threads (expected 0 for one per core, "
			 "or 1..%d)", n_threads, POOL_MAX_THREADS);
		return NULL;
	}
	if (n_threads == 0)
		n_threads = online_cores();
	if (n_threads > POOL_MAX_THREADS)
		n_threads = POOL_MAX_THREADS;

	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "thread pool: out of memory");
		return NULL;
	}
	p->n = n_threads;
	p->owner_spin = POOL_SPIN_MAX;
	atomic_init(&p->gen, 0);
	atomic_init(&p->pending, 0);
	atomic_init(&p->stop, false);
	atomic_init(&p->n_sleeping, 0);
	atomic_init(&p->owner_sleeping, false);
	e = pthread_mutex_init(&p->mtx, NULL);
	if (e) {
		free(p);
		snprintf(err, errlen, "thread pool: mutex: %s", strerror(e));
		return NULL;
	}
	e = pthread_cond_init(&p->wake, NULL);
	if (!e) {
		e = pthread_cond_init(&p->done, NULL);
		if (e)
			pthread_cond_destroy(&p->wake);
	}
	if (e) {
		pthread_mutex_destroy(&p->mtx);
		free(p);
		snprintf(err, errlen, "thread pool: condition variable: %s", strerror(e));
		return NULL;
	}
	if (n_threads > 1) {
		p->workers = calloc((size_t)n_threads - 1, sizeof(*p->workers));
		if (!p->workers) {
			snprintf(err, errlen, "thread pool: out of memory for %d workers",
				 n_threads - 1);
			goto fail;
		}
	}
	for (int i = 0; i < n_threads - 1; i++) {
		struct pool_worker *w = &p->workers[i];

		w->pool = p;
		w->ith = i + 1;
		e = pthread_create(&w->thread, NULL, worker_main, w);
		if (e) {
			snprintf(err, errlen, "thread pool: cannot start worker %d of %d: %s",
				 i + 1, n_threads - 1, strerror(e));
			goto fail;
		}
		p->n_started++;
	}
	return p;

fail:
	exl_pool_destroy(p);
	return NULL;
}

void exl_pool_destroy(struct exl_pool *p)
{
	if (!p)
		return;
	stop_workers(p);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->mtx);
	free(p->workers);
	free(p);
}

int exl_pool_size(const struct exl_pool *p)
{
	return p->n;
}

void exl_pool_run(struct exl_pool *p, exl_pool_fn fn, void *ctx)
{
	if (p->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
	publish(p);
	fn(ctx, 0, p->n);
	wait_for_workers(p);
}

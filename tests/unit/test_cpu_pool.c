/* The CPU worker pool (kernels/cpu/pool.h):
 *  - every job runs once on each of the n threads with ith 0..n-1 and
 *    nth = n, and the owner (ith 0) is the calling thread;
 *  - exl_pool_run returns only after every thread finished (the owner sees
 *    all their writes);
 *  - thousands of back-to-back jobs (the spinning path) and jobs after
 *    pauses longer than the spin (the sleeping path), pool sizes 1..9
 *    (more threads than cores too);
 *  - exl_pool_split covers 0..n exactly once for any n and thread count;
 *  - bad thread counts are refused with a message; 0 means one per core. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/pool.h"
#include "tests/common/check.h"

#define MAX_T 16

struct count_job {
	int n;                     /* expected nth */
	_Atomic int calls[MAX_T];  /* per ith, this job */
	_Atomic int bad_nth;
	_Atomic int owner_not_caller;
	pthread_t caller;
	/* plain (non-atomic) writes each thread makes; the owner reads them
	 * after exl_pool_run returns */
	long plain[MAX_T];
	int round;
};

static void count_fn(void *ctx, int ith, int nth)
{
	struct count_job *j = ctx;

	if (nth != j->n || ith < 0 || ith >= MAX_T) {
		atomic_fetch_add(&j->bad_nth, 1);
		return;
	}
	if (ith == 0 && !pthread_equal(pthread_self(), j->caller))
		atomic_fetch_add(&j->owner_not_caller, 1);
	atomic_fetch_add(&j->calls[ith], 1);
	j->plain[ith] = (long)j->round * 1000 + ith;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void test_runs(int n_threads, int rounds, int pause_every)
{
	char err[200];
	struct exl_pool *p = exl_pool_create(n_threads, err, sizeof(err));
	struct count_job *j = calloc(1, sizeof(*j));
	int bad_rounds = 0, bad_plain = 0;

	CHECK(p != NULL, "create %d: %s", n_threads, err);
	if (!p || !j) {
		free(j);
		exl_pool_destroy(p);
		return;
	}
	CHECK(exl_pool_size(p) == n_threads, "size %d", exl_pool_size(p));
	j->n = n_threads;
	j->caller = pthread_self();
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < MAX_T; i++)
			atomic_store(&j->calls[i], 0);
		j->round = r;
		exl_pool_run(p, count_fn, j);
		for (int i = 0; i < MAX_T; i++) {
			int want = i < n_threads ? 1 : 0;

			if (atomic_load(&j->calls[i]) != want)
				bad_rounds++;
			if (i < n_threads && j->plain[i] != (long)r * 1000 + i)
				bad_plain++;
		}
		if (pause_every && r % pause_every == pause_every - 1)
			sleep_ms(5); /* past the spin: the workers go to sleep */
	}
	CHECK(bad_rounds == 0, "%d threads: %d (round, thread) counts were not 1", n_threads,
	      bad_rounds);
	CHECK(bad_plain == 0, "%d threads: %d writes not visible after run", n_threads,
	      bad_plain);
	CHECK(atomic_load(&j->bad_nth) == 0, "%d threads: %d calls with a wrong nth",
	      n_threads, atomic_load(&j->bad_nth));
	CHECK(atomic_load(&j->owner_not_caller) == 0, "%d threads: ith 0 ran elsewhere",
	      n_threads);
	exl_pool_destroy(p);
	free(j);
}

/* Every item of n marked once when each thread marks its split. */
struct split_job {
	size_t n;
	_Atomic unsigned char *mark;
};

static void split_fn(void *ctx, int ith, int nth)
{
	struct split_job *j = ctx;
	size_t b, e;

	exl_pool_split(j->n, ith, nth, &b, &e);
	for (size_t i = b; i < e; i++)
		atomic_fetch_add(&j->mark[i], 1);
}

static void test_split(void)
{
	char err[200];
	static const size_t ns[] = { 0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 100, 1000, 4097 };

	for (int nth = 1; nth <= 9; nth++) {
		struct exl_pool *p = exl_pool_create(nth, err, sizeof(err));

		CHECK(p != NULL, "create %d: %s", nth, err);
		if (!p)
			continue;
		for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
			struct split_job j = { ns[k], calloc(ns[k] + 1, 1) };
			int bad = 0;

			if (!j.mark)
				continue;
			exl_pool_run(p, split_fn, &j);
			for (size_t i = 0; i < ns[k]; i++)
				bad += atomic_load(&j.mark[i]) != 1;
			CHECK(bad == 0, "split of %zu over %d threads: %d items not covered once",
			      ns[k], nth, bad);
			free((void *)j.mark);
		}
		exl_pool_destroy(p);
	}
	/* the slices are contiguous, in order, and within [0, n) */
	for (int nth = 1; nth <= 33; nth++) {
		for (size_t n = 0; n < 200; n++) {
			size_t prev = 0;
			int bad = 0;

			for (int ith = 0; ith < nth; ith++) {
				size_t b, e;

				exl_pool_split(n, ith, nth, &b, &e);
				if (b != prev || e < b || e > n)
					bad++;
				prev = e;
			}
			if (prev != n)
				bad++;
			CHECK(bad == 0, "split of %zu into %d slices", n, nth);
		}
	}
}

static void test_create_errors(void)
{
	char err[200] = "";
	struct exl_pool *p;

	p = exl_pool_create(-1, err, sizeof(err));
	CHECK(p == NULL && strstr(err, "-1 threads"), "create -1: %s", err);
	err[0] = '\0';
	p = exl_pool_create(1 << 20, err, sizeof(err));
	CHECK(p == NULL && strstr(err, "threads"), "create 2^20: %s", err);
	p = exl_pool_create(0, err, sizeof(err));
	CHECK(p != NULL && exl_pool_size(p) >= 1, "create 0: %s", p ? "" : err);
	if (p) {
		struct count_job *j = calloc(1, sizeof(*j));

		if (j) {
			j->n = exl_pool_size(p);
			j->caller = pthread_self();
			if (j->n <= MAX_T) {
				exl_pool_run(p, count_fn, j);
				for (int i = 0; i < j->n; i++)
					CHECK(atomic_load(&j->calls[i]) == 1, "auto pool ith %d", i);
			}
			free(j);
		}
		exl_pool_destroy(p);
	}
	exl_pool_destroy(NULL);
}

int main(void)
{
	test_create_errors();
	test_split();
	for (int n = 1; n <= 9; n++)
		test_runs(n, 3000, 0);
	test_runs(2, 60, 3);
	test_runs(4, 60, 2);
	test_runs(9, 30, 1);
	/* a pool created and destroyed without ever running a job */
	for (int n = 1; n <= 4; n++) {
		char err[200];
		struct exl_pool *p = exl_pool_create(n, err, sizeof(err));

		CHECK(p != NULL, "create %d: %s", n, err);
		exl_pool_destroy(p);
	}
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

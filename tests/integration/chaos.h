/* What the chaos tests (test_chaos.c, test_http_chaos.c) share: a seeded
 * generator, and the check that a daemon has no job left. */
#ifndef EXLD_TESTS_CHAOS_H
#define EXLD_TESTS_CHAOS_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"

/* xorshift64: the next value of *s (never seeded with 0). */
static inline uint64_t chaos_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

/* 0 .. n-1 */
static inline unsigned chaos_pick(uint64_t *s, unsigned n)
{
	return (unsigned)(chaos_rand(s) % n);
}

/* Writes d->dir/chaos.conf: the small daemon both tests want (4 running
 * jobs, 64-token passes of prefill chunks of 32) and the lines in more
 * (may be "").  Its path into path; 0, or -1 after printing why. */
int chaos_config(const struct daemon *d, const char *more, char *path, size_t len);

/* Waits up to 10 s, through libexlclient's status, for d to have no job:
 * 0, or -1 after printing how many are left or why status failed. */
int chaos_wait_idle(struct daemon *d);

#endif

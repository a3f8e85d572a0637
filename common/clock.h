/* The one monotonic clock of the daemon, the library and the tools:
 * CLOCK_MONOTONIC, which never jumps with the wall clock.  Header-only so
 * that libexlclient, exld and exl use it without linking each other. */
#ifndef EXL_COMMON_CLOCK_H
#define EXL_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t exl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int64_t exl_now_ms(void)
{
	return (int64_t)(exl_now_ns() / 1000000ull);
}

static inline double exl_now_s(void)
{
	return (double)exl_now_ns() * 1e-9;
}

#endif

/* Reproducible random numbers for the test programs: xorshift64*, and
 * normal values by Box-Muller.  Each program picks its seed, so that its
 * data stay what its tolerances were set against:
 *
 *   #define EXL_TEST_RNG_SEED 0x853c49e6748fea9bull
 *   #include "tests/common/rng.h"
 */
#ifndef EXL_TESTS_RNG_H
#define EXL_TESTS_RNG_H

#include <math.h>
#include <stdint.h>

#ifndef EXL_TEST_RNG_SEED
#error "define EXL_TEST_RNG_SEED before including tests/common/rng.h"
#endif

static uint64_t rng_state = EXL_TEST_RNG_SEED;

__attribute__((unused)) static uint32_t rnd_u32(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* [-1, 1) */
__attribute__((unused)) static float rnd_uniform(void)
{
	return (float)((double)rnd_u32() / 2147483648.0 - 1.0);
}

__attribute__((unused)) static float rnd_normal(void)
{
	double u = ((double)rnd_u32() + 1.0) / 4294967297.0;
	double v = (double)rnd_u32() / 4294967296.0;

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif

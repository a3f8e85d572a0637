/* Shared bits of the CUDA device tests: skipping without a device, random
 * numbers, checks. */
#ifndef EXL_CUDA_TEST_UTIL_H
#define EXL_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"

#define SKIP_STATUS 77

/* False, after saying why, when there is no CUDA device to run on (or CUDA
 * was not built): the test then returns SKIP_STATUS (meson: skipped). */
static inline bool cuda_test_have_device(void)
{
	char err[512];

	if (exl_cuda_device_count(err, sizeof(err)) <= 0) {
		/* "no CUDA device: no NVIDIA driver found (...)", "exld was built
		 * without CUDA support", "CUDA backend module not found ..." */
		printf("skipped: %s\n", err);
		return false;
	}
	return true;
}

static uint64_t cuda_test_rng = 0x243f6a8885a308d3ull;

static inline uint32_t rnd_u32(void)
{
	cuda_test_rng ^= cuda_test_rng >> 12;
	cuda_test_rng ^= cuda_test_rng << 25;
	cuda_test_rng ^= cuda_test_rng >> 27;
	return (uint32_t)((cuda_test_rng * 0x2545f4914f6cdd1dull) >> 32);
}

/* Uniform in [-1, 1). */
static inline float rnd_uniform(void)
{
	return (float)((double)rnd_u32() / 2147483648.0 - 1.0);
}

static inline float rnd_normal(void)
{
	double u = ((double)rnd_u32() + 1.0) / 4294967297.0;
	double v = (double)rnd_u32() / 4294967296.0;

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif

/* Pieces shared by the reference quantizers (kernels/quant*.c). */
#ifndef EXL_QUANT_INTERNAL_H
#define EXL_QUANT_INTERNAL_H

#include <math.h>

#include "kernels/formats/elem.h"

/* Round to nearest, ties to even; NaN and huge values clamp to a bounded
 * int so callers' range clamps stay defined. */
static inline int exl_nearest_int(float f)
{
	if (!(f > -1e9f))
		return -1000000000;
	if (f > 1e9f)
		return 1000000000;
	return (int)lrintf(f);
}

void exl_quantize_block_q2_K(const float *x, block_q2_K *y);
void exl_quantize_block_q3_K(const float *x, block_q3_K *y);
void exl_quantize_block_q4_K(const float *x, block_q4_K *y);
void exl_quantize_block_q5_K(const float *x, block_q5_K *y);
void exl_quantize_block_q6_K(const float *x, block_q6_K *y);
void exl_quantize_block_iq4_xs(const float *x, block_iq4_xs *y);

/* IQ4: 32 values to d * level.  exl_fit_iq4 searches d (weighted least
 * squares over a few roundings) and writes the levels (indices 0..15) to
 * L; returns d, 0 for an all-zero block.  exl_round_iq4 rounds to the
 * nearest level against a given d (every value to the level nearest zero
 * when d is 0). */
float exl_fit_iq4(const float *x, uint8_t *L);
void exl_round_iq4(const float *x, float d, uint8_t *L);

#endif

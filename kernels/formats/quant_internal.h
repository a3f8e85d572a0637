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

void exl_quantize_block_q4_K(const float *x, block_q4_K *y);
void exl_quantize_block_q6_K(const float *x, block_q6_K *y);

#endif

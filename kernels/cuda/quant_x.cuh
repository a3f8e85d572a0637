/* Activations quantized to 8 bits for the decode matmul (qdot.h): parts of
 * 32 values, each its int8 values, its step and its two half sums.  One
 * definition for the two kernels that make them, quant_x in ops_matmul.cu
 * and the rmsnorm that hands its output over already quantized, so both
 * give the same bytes. */
#ifndef EXL_CUDA_QUANT_X_CUH
#define EXL_CUDA_QUANT_X_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/reduce.cuh"

/* v: this lane's value of a part that the warp's 32 lanes hold in order;
 * q: where this lane's int8 goes; xa: the part's (step, step * sum of
 * lanes 0-15, step * sum of lanes 16-31, 0), written by lane 0. */
static __device__ __forceinline__ void quant_part_warp(float v, int lane, int8_t *q,
						       float4 *xa)
{
	const float amax = warp_max(fabsf(v));
	const float d = amax / 127.0f;
	const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
	int qi = __float2int_rn(v * id);

	qi = qi < -127 ? -127 : qi > 127 ? 127 : qi;
	*q = (int8_t)qi;
	int lo = lane < 16 ? qi : 0, hi = lane < 16 ? 0 : qi;
	for (int o = 16; o > 0; o >>= 1) {
		lo += __shfl_xor_sync(0xffffffffu, lo, o);
		hi += __shfl_xor_sync(0xffffffffu, hi, o);
	}
	if (lane == 0)
		*xa = make_float4(d, d * (float)lo, d * (float)hi, 0.0f);
}

#endif

/* Warp and block reductions for the CUDA kernels.  Blocks are a multiple of
 * 32 threads, at most 1024; every thread of the block must call the block
 * reductions (they contain __syncthreads) and every thread gets the result. */
#ifndef EXL_CUDA_REDUCE_CUH
#define EXL_CUDA_REDUCE_CUH

#include <cuda_runtime.h>
#include <math.h>

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* sh: 32 floats of shared memory, reused by consecutive calls (the leading
 * barrier keeps a call from overwriting what the previous one still reads). */
static __device__ __forceinline__ float block_sum(float v, float *sh)
{
	const int lane = threadIdx.x & 31;
	const int warp = threadIdx.x >> 5;
	const int n_warps = blockDim.x >> 5;

	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	v = lane < n_warps ? sh[lane] : 0.0f;
	return warp_sum(v);
}

static __device__ __forceinline__ float block_max(float v, float *sh)
{
	const int lane = threadIdx.x & 31;
	const int warp = threadIdx.x >> 5;
	const int n_warps = blockDim.x >> 5;

	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	v = lane < n_warps ? sh[lane] : -INFINITY;
	return warp_max(v);
}

#endif

/* matmul and embed.
 *
 * matmul, y[n][rows] = x[n][cols] . W^T, two ways:
 *  - n <= GEMV_MAX_N (decode): custom matrix x vector kernels that read the
 *    weight once, in its own format, for all n vectors.
 *    Quantized rows: x is quantized to 8 bits per 32 values first
 *    (quant_x_kernel), then mmvq_kernel gives each row 32, 64 or 128
 *    threads (as many as it has parts of 32 weights, up to 128), each
 *    thread decodes one part to bytes and dots it with dp4a
 *    (kernels/cuda/qdot.h, whose arithmetic a CPU test checks).
 *    Plain rows (F32/F16/BF16): one warp per row, 16-byte loads of 8
 *    weights a lane where the width allows, else element-wise.
 *  - n > GEMV_MAX_N (prefill): cuBLAS.  F32 weights: SGEMM as they are.
 *    F16/BF16: GemmEx on the weight as it is with x converted to the same
 *    16-bit type, F32 accumulation.  Quantized: row tiles of the weight are
 *    dequantized into an F16 scratch buffer (at most W16_TILE_ELEMS at a
 *    time) and each tile goes through GemmEx against x in F16.
 *
 * cuBLAS is column-major: the row-major y (n x rows) is column-major
 * rows x n with ld rows, W row-major (rows x cols) is column-major cols x rows
 * with ld cols, so y = op_T(W) . x with m = rows, n = n, k = cols. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/qdot.h"
#include "kernels/cuda/quant_x.cuh"
#include "kernels/cuda/reduce.cuh"

#define GEMV_WARPS 4
#define MMVQ_THREADS 128
#define QUANT_THREADS 256
#define W16_TILE_ELEMS ((size_t)16 << 20) /* 32 MiB of F16 */
#define CONV_THREADS 256
#define EMBED_THREADS 128

/* ---- matrix x vector -------------------------------------------------- */

/* F32, F16 and BF16 rows: one warp a row. */
template <int T>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_kernel(const uint8_t *W, size_t row_bytes, const float *x, float *y, int rows, int cols,
	    int n, bool vec)
{
	const int lane = threadIdx.x & 31;
	const int r = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	const uint8_t *wrow = W + (size_t)r * row_bytes;
	float acc[GEMV_MAX_N];

	if (r >= rows)
		return; /* the whole warp: no block-wide barrier below */
#pragma unroll
	for (int j = 0; j < GEMV_MAX_N; j++)
		acc[j] = 0.0f;

	if (vec) {
		/* 8 weights a lane step, one 16-byte load: rows are 16-byte
		 * aligned (cudaMalloc'd, and a multiple of 8 elements long), and
		 * so is x (checked by the caller) */
		for (int k = 8 * lane; k < cols; k += 8 * 32) {
			float w[8];

			load_elem8<T>(wrow, k, w);
#pragma unroll
			for (int j = 0; j < GEMV_MAX_N; j++) {
				if (j < n) {
					const float4 *xp = (const float4 *)(x + (size_t)j * (size_t)cols +
									    (size_t)k);
					const float4 a = xp[0], b = xp[1];
					float s = acc[j];

					s = fmaf(w[0], a.x, s);
					s = fmaf(w[1], a.y, s);
					s = fmaf(w[2], a.z, s);
					s = fmaf(w[3], a.w, s);
					s = fmaf(w[4], b.x, s);
					s = fmaf(w[5], b.y, s);
					s = fmaf(w[6], b.z, s);
					s = fmaf(w[7], b.w, s);
					acc[j] = s;
				}
			}
		}
	} else {
		for (int k = lane; k < cols; k += 32) {
			const float w = load_elem<T>(wrow, k);

#pragma unroll
			for (int j = 0; j < GEMV_MAX_N; j++)
				if (j < n)
					acc[j] += w * x[(size_t)j * (size_t)cols + (size_t)k];
		}
	}

#pragma unroll
	for (int j = 0; j < GEMV_MAX_N; j++) {
		if (j < n) {
			const float s = warp_sum(acc[j]);

			if (lane == 0)
				y[(size_t)j * (size_t)rows + (size_t)r] = s;
		}
	}
}

template <int T>
static void gemv(struct cuda_backend *cb, const struct exl_weight *w, const float *x, float *y,
		 int n)
{
	const unsigned blocks = (unsigned)((w->rows + GEMV_WARPS - 1) / GEMV_WARPS);
	const bool vec = w->cols % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
			 ((uintptr_t)w->data & 15) == 0;

	cu_launch(cb, "matmul", gemv_kernel<T>, blocks, GEMV_WARPS * 32, (const uint8_t *)w->data,
			w->row_bytes, x, y, (int)w->rows, (int)w->cols, n, vec);
}

/* ---- quantized matrix x vector with 8-bit activations ----------------- */

/* x (n_parts parts of 32 floats) into xq (the values as int8) and xa (each
 * part's step and half sums): one warp a part, as tests/unit/test_cuda_qdot.c's
 * quant_part does it on the host. */
static __global__ void __launch_bounds__(QUANT_THREADS)
quant_x_kernel(const float *x, int8_t *xq, float4 *xa, size_t n_parts)
{
	const int lane = threadIdx.x & 31;
	const size_t warps = (size_t)gridDim.x * (blockDim.x >> 5);

	for (size_t part = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; part < n_parts;
	     part += warps)
		quant_part_warp(x[part * 32 + lane], lane, &xq[part * 32 + lane], &xa[part]);
}

/* y[j][r] for the rows of this block: 2^tpr_log2 threads a row (32, 64 or
 * 128), each taking every 2^tpr_log2-th part of it; NV >= n vectors. */
template <int T, int NV>
static __global__ void __launch_bounds__(MMVQ_THREADS)
mmvq_kernel(const uint8_t *W, size_t row_bytes, const int8_t *xq, const float4 *xa, float *y,
	    int rows, int cols, int n, int tpr_log2)
{
	__shared__ float warp_sums[NV][MMVQ_THREADS / 32];
	const int tpr = 1 << tpr_log2;
	const int rpb = MMVQ_THREADS >> tpr_log2;
	const int r = blockIdx.x * rpb + (threadIdx.x >> tpr_log2);
	const int n_parts = cols / 32;
	float acc[NV];

#pragma unroll
	for (int j = 0; j < NV; j++)
		acc[j] = 0.0f;
	if (r < rows) {
		const uint8_t *wrow = W + (size_t)r * row_bytes;

#pragma unroll 2
		for (int c = threadIdx.x & (tpr - 1); c < n_parts; c += tpr) {
			struct exl_qpart p;

			exl_qpart(T, wrow, c, &p);
#pragma unroll
			for (int j = 0; j < NV; j++) {
				if (j < n) {
					const int4 *xv = (const int4 *)(xq + (size_t)j * (size_t)cols +
									 32 * (size_t)c);
					const int4 a = xv[0], b = xv[1];
					const int32_t xi[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
					const float4 f = xa[(size_t)j * (size_t)n_parts + (size_t)c];
					const struct exl_qact act = { f.x, f.y, f.z, f.w };

					acc[j] += exl_qpart_dot(&p, xi, act);
				}
			}
		}
	}

	const int warp = threadIdx.x >> 5;
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const float s = warp_sum(acc[j]);

		if ((threadIdx.x & 31) == 0)
			warp_sums[j][warp] = s;
	}
	__syncthreads();
	if ((int)threadIdx.x < rpb * NV) {
		const int rr = threadIdx.x / NV, j = threadIdx.x % NV;
		const int row = blockIdx.x * rpb + rr;
		const int wpr = tpr >> 5;

		if (j < n && row < rows) {
			float s = 0.0f;

			for (int k = 0; k < wpr; k++)
				s += warp_sums[j][rr * wpr + k];
			y[(size_t)j * (size_t)rows + (size_t)row] = s;
		}
	}
}

/* x's n vectors into the xq scratch: n * cols int8, then (16-byte aligned)
 * n * cols / 32 float4. */
static bool quant_x(struct cuda_backend *cb, const float *x, int n, int cols, const int8_t **xq,
		    const float4 **xa)
{
	const size_t n_parts = (size_t)n * (size_t)(cols / 32);
	const size_t q_bytes = cu_xq_bytes(n, cols);
	const bool have = cb->xq_x == x && cb->xq_n == n && cb->xq_cols == cols &&
			  cb->xq_seq + 1 == cb->op_seq;

	cb->xq_seq = cb->op_seq;
	if (!have) {
		cb->xq_x = NULL;
		if (!cu_scratch(cb, &cb->xq, &cb->xq_cap, q_bytes + n_parts * sizeof(float4),
				"matmul"))
			return false;
		if (!cu_launch(cb, "matmul: quantize x", quant_x_kernel,
				cu_grid(n_parts * 32, QUANT_THREADS), QUANT_THREADS, x,
				(int8_t *)cb->xq, (float4 *)((uint8_t *)cb->xq + q_bytes),
				n_parts))
			return false;
		cb->xq_x = x;
		cb->xq_n = n;
		cb->xq_cols = cols;
	}
	*xq = (const int8_t *)cb->xq;
	*xa = (const float4 *)((uint8_t *)cb->xq + q_bytes);
	return true;
}

template <int T, int NV>
static void mmvq_launch(struct cuda_backend *cb, const struct exl_weight *w, const int8_t *xq,
			const float4 *xa, float *y, int n)
{
	const int n_parts = (int)w->cols / 32;
	const int tpr_log2 = cb->mmvq_tpr_log2 ? cb->mmvq_tpr_log2
				: n_parts <= 32 ? 5 : n_parts <= 64 ? 6 : 7;
	const int rpb = MMVQ_THREADS >> tpr_log2;
	const unsigned blocks = (unsigned)((w->rows + rpb - 1) / rpb);

	cu_launch(cb, "matmul", mmvq_kernel<T, NV>, blocks, MMVQ_THREADS, (const uint8_t *)w->data,
			w->row_bytes, xq, xa, y, (int)w->rows, (int)w->cols, n, tpr_log2);
}

template <int T>
static void mmvq(struct cuda_backend *cb, const struct exl_weight *w, const float *x, float *y,
		 int n)
{
	const int8_t *xq;
	const float4 *xa;

	if (!quant_x(cb, x, n, (int)w->cols, &xq, &xa))
		return;
	/* y over the x that xq holds: the next matmul must quantize again */
	if ((uintptr_t)y < (uintptr_t)(x + (size_t)n * (size_t)w->cols) &&
	    (uintptr_t)x < (uintptr_t)(y + (size_t)n * (size_t)w->rows))
		cb->xq_x = NULL;
	if (n == 1)
		mmvq_launch<T, 1>(cb, w, xq, xa, y, n);
	else if (n == 2)
		mmvq_launch<T, 2>(cb, w, xq, xa, y, n);
	else if (n <= 4)
		mmvq_launch<T, 4>(cb, w, xq, xa, y, n);
	else
		mmvq_launch<T, 8>(cb, w, xq, xa, y, n);
}

/* ---- conversions for cuBLAS ------------------------------------------- */

static __global__ void to_f16_kernel(__half *dst, const float *src, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		dst[k] = __float2half_rn(src[k]);
}

static __global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t count)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x)
		dst[k] = __float2bfloat16_rn(src[k]);
}

static __device__ __forceinline__ uint32_t pack_h2(float a, float b)
{
	return (uint32_t)__half_as_ushort(__float2half_rn(a)) |
	       (uint32_t)__half_as_ushort(__float2half_rn(b)) << 16;
}

/* Rows [r0, r0 + n_rows) of a quantized weight into dst, F16, row-major
 * with cols per row.  One thread per part of 32 weights. */
template <int T>
static __global__ void dequant_f16_kernel(__half *dst, const uint8_t *W, size_t row_bytes,
					  int r0, int n_rows, int cols)
{
	const int n_parts = cols / PART;
	const size_t count = (size_t)n_rows * (size_t)n_parts;

	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < count;
	     k += (size_t)gridDim.x * blockDim.x) {
		const size_t rr = k / (size_t)n_parts;
		const int c = (int)(k % (size_t)n_parts);
		/* 64 bytes a part, 64-byte aligned (cols is a multiple of 32) */
		uint4 *out = (uint4 *)(dst + rr * (size_t)cols + (size_t)c * PART);
		float w[PART];

		load_part<T>(W + ((size_t)r0 + rr) * row_bytes, c, w);
		/* four 16-byte stores: a warp's 2-byte stores each touched a
		 * sector of its own, which capped this kernel at ~160 GB/s */
#pragma unroll
		for (int v = 0; v < PART / 8; v++)
			out[v] = make_uint4(pack_h2(w[8 * v], w[8 * v + 1]),
					    pack_h2(w[8 * v + 2], w[8 * v + 3]),
					    pack_h2(w[8 * v + 4], w[8 * v + 5]),
					    pack_h2(w[8 * v + 6], w[8 * v + 7]));
	}
}

template <int T>
static void dequant_tile(struct cuda_backend *cb, const struct exl_weight *w, int r0,
			 int n_rows)
{
	const size_t count = (size_t)n_rows * (size_t)(w->cols / PART);

	cu_launch(cb, "matmul: dequantize", dequant_f16_kernel<T>, cu_grid(count, CONV_THREADS),
			CONV_THREADS, (__half *)cb->w16, (const uint8_t *)w->data, w->row_bytes,
			r0, n_rows, (int)w->cols);
}

/* x (n x cols floats) into the x16 scratch as F16 or BF16. */
static bool convert_x(struct cuda_backend *cb, const float *x, size_t count, bool bf16)
{
	if (!cu_scratch(cb, &cb->x16, &cb->x16_cap, count * 2, "matmul"))
		return false;
	if (bf16)
		return cu_launch(cb, "matmul: convert x", to_bf16_kernel,
				cu_grid(count, CONV_THREADS), CONV_THREADS,
				(__nv_bfloat16 *)cb->x16, x, count);
	else
		return cu_launch(cb, "matmul: convert x", to_f16_kernel,
				cu_grid(count, CONV_THREADS), CONV_THREADS, (__half *)cb->x16, x,
				count);
}

static bool gemm_16(struct cuda_backend *cb, const void *A, cudaDataType_t type, int m, int n,
		    int k, float *C, int ldc)
{
	const float one = 1.0f, zero = 0.0f;

	/* cuBLAS queues on the stream itself: what was recorded goes first */
	if (!cu_flush(cb))
		return false;
	return cu_blas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one,
					   A, type, k, cb->x16, type, k, &zero, C, CUDA_R_32F,
					   ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
			  "matmul: cublasGemmEx");
}

static void gemm(struct cuda_backend *cb, const struct exl_weight *w, const float *x, float *y,
		 int n)
{
	const int rows = (int)w->rows, cols = (int)w->cols;
	const size_t count = (size_t)n * (size_t)cols;
	const float one = 1.0f, zero = 0.0f;

	switch (w->type) {
	case EXL_F32:
		if (cu_flush(cb))
			cu_blas_ok(cb, cublasSgemm(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n,
						   cols, &one, (const float *)w->data, cols, x,
						   cols, &zero, y, rows),
				   "matmul: cublasSgemm");
		return;
	case EXL_F16:
		if (convert_x(cb, x, count, false))
			gemm_16(cb, w->data, CUDA_R_16F, rows, n, cols, y, rows);
		return;
	case EXL_BF16:
		if (convert_x(cb, x, count, true))
			gemm_16(cb, w->data, CUDA_R_16BF, rows, n, cols, y, rows);
		return;
	default:
		break;
	}

	/* Quantized: dequantize row tiles into w16, one GemmEx per tile. */
	size_t tile = W16_TILE_ELEMS / (size_t)cols;
	if (tile < 1)
		tile = 1;
	if (tile > (size_t)rows)
		tile = (size_t)rows;
	if (!convert_x(cb, x, count, false) ||
	    !cu_scratch(cb, &cb->w16, &cb->w16_cap, tile * (size_t)cols * 2, "matmul"))
		return;
	for (int r0 = 0; r0 < rows; r0 += (int)tile) {
		const int tr = rows - r0 < (int)tile ? rows - r0 : (int)tile;

		switch (w->type) {
		case EXL_Q8_0: dequant_tile<EXL_Q8_0>(cb, w, r0, tr); break;
		case EXL_Q4_0: dequant_tile<EXL_Q4_0>(cb, w, r0, tr); break;
		case EXL_Q4_1: dequant_tile<EXL_Q4_1>(cb, w, r0, tr); break;
		case EXL_Q5_0: dequant_tile<EXL_Q5_0>(cb, w, r0, tr); break;
		case EXL_Q5_1: dequant_tile<EXL_Q5_1>(cb, w, r0, tr); break;
		case EXL_IQ4_NL: dequant_tile<EXL_IQ4_NL>(cb, w, r0, tr); break;
		case EXL_MXFP4: dequant_tile<EXL_MXFP4>(cb, w, r0, tr); break;
		case EXL_Q4_K: dequant_tile<EXL_Q4_K>(cb, w, r0, tr); break;
		case EXL_Q2_K: dequant_tile<EXL_Q2_K>(cb, w, r0, tr); break;
		case EXL_Q3_K: dequant_tile<EXL_Q3_K>(cb, w, r0, tr); break;
		case EXL_Q5_K: dequant_tile<EXL_Q5_K>(cb, w, r0, tr); break;
		case EXL_IQ4_XS: dequant_tile<EXL_IQ4_XS>(cb, w, r0, tr); break;
		case EXL_Q6_K: dequant_tile<EXL_Q6_K>(cb, w, r0, tr); break;
		default: break;
		}
		if (cb->failed ||
		    !gemm_16(cb, cb->w16, CUDA_R_16F, tr, n, cols, y + r0, rows))
			return;
	}
}

/* Shape checks shared by matmul and embed. */
static bool weight_ok(struct cuda_backend *cb, const struct exl_weight *w, const char *op)
{
	const struct exl_dtype_info *info;

	if (!w || !w->data) {
		cu_fail(cb, "%s: no weight", op);
		return false;
	}
	info = exl_dtype_info(w->type);
	if (!cuda_wtype_ok(w->type)) {
		cu_fail(cb, "%s: weight type %s is not computed by the CUDA backend", op,
			info && info->name ? info->name : "(unknown)");
		return false;
	}
	if (w->rows <= 0 || w->cols <= 0 || w->rows > INT_MAX || w->cols > INT_MAX ||
	    w->row_bytes != exl_dtype_row_bytes(w->type, (uint64_t)w->cols)) {
		cu_fail(cb, "%s: malformed %s weight (%lld x %lld, %zu bytes per row)", op,
			info->name, (long long)w->rows, (long long)w->cols, w->row_bytes);
		return false;
	}
	return true;
}

void cu_op_matmul(struct exl_backend *be, const struct exl_weight *w, const float *x, float *y,
		  int n)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb) || !weight_ok(cb, w, "matmul"))
		return;
	if (n < 0) {
		cu_fail(cb, "matmul: %d input vectors", n);
		return;
	}
	if (!n)
		return;
	if (n > GEMV_MAX_N) {
		gemm(cb, w, x, y, n);
		return;
	}
	switch (w->type) {
	case EXL_F32: gemv<EXL_F32>(cb, w, x, y, n); break;
	case EXL_F16: gemv<EXL_F16>(cb, w, x, y, n); break;
	case EXL_BF16: gemv<EXL_BF16>(cb, w, x, y, n); break;
	case EXL_Q8_0: mmvq<EXL_Q8_0>(cb, w, x, y, n); break;
	case EXL_Q4_0: mmvq<EXL_Q4_0>(cb, w, x, y, n); break;
	case EXL_Q4_1: mmvq<EXL_Q4_1>(cb, w, x, y, n); break;
	case EXL_Q5_0: mmvq<EXL_Q5_0>(cb, w, x, y, n); break;
	case EXL_Q5_1: mmvq<EXL_Q5_1>(cb, w, x, y, n); break;
	case EXL_IQ4_NL: mmvq<EXL_IQ4_NL>(cb, w, x, y, n); break;
	case EXL_MXFP4: mmvq<EXL_MXFP4>(cb, w, x, y, n); break;
	case EXL_Q4_K: mmvq<EXL_Q4_K>(cb, w, x, y, n); break;
	case EXL_Q2_K: mmvq<EXL_Q2_K>(cb, w, x, y, n); break;
	case EXL_Q3_K: mmvq<EXL_Q3_K>(cb, w, x, y, n); break;
	case EXL_Q5_K: mmvq<EXL_Q5_K>(cb, w, x, y, n); break;
	case EXL_IQ4_XS: mmvq<EXL_IQ4_XS>(cb, w, x, y, n); break;
	case EXL_Q6_K: mmvq<EXL_Q6_K>(cb, w, x, y, n); break;
	default: break;
	}
}

/* ---- embed ------------------------------------------------------------ */

/* One block per token: its row of the table, dequantized into y. */
template <int T>
static __global__ void embed_kernel(const uint8_t *W, size_t row_bytes, const int32_t *tokens,
				    float *y, int cols)
{
	const uint8_t *wrow = W + (size_t)tokens[blockIdx.x] * row_bytes;
	float *out = y + (size_t)blockIdx.x * (size_t)cols;

	if constexpr (wtype<T>::quant) {
		for (int c = threadIdx.x; c < cols / PART; c += blockDim.x) {
			float w[PART];

			load_part<T>(wrow, c, w);
#pragma unroll
			for (int l = 0; l < PART; l++)
				out[c * PART + l] = w[l];
		}
	} else {
		for (int k = threadIdx.x; k < cols; k += blockDim.x)
			out[k] = load_elem<T>(wrow, k);
	}
}

template <int T>
static void embed(struct cuda_backend *cb, const struct exl_weight *w, const int32_t *d_tokens,
		  float *y, int n)
{
	cu_launch(cb, "embed", embed_kernel<T>, n, EMBED_THREADS, (const uint8_t *)w->data,
			w->row_bytes, d_tokens, y, (int)w->cols);
}

void cu_op_embed(struct exl_backend *be, const struct exl_weight *w, const int32_t *tokens,
		 float *y, int n)
{
	struct cuda_backend *cb = cuda_of(be);
	const int32_t *d_tokens;

	if (!cu_enter(cb) || !weight_ok(cb, w, "embed"))
		return;
	if (n < 0 || (n && !tokens)) {
		cu_fail(cb, "embed: %d tokens", n);
		return;
	}
	if (!n)
		return;
	for (int i = 0; i < n; i++) {
		if (tokens[i] < 0 || tokens[i] >= w->rows) {
			cu_fail(cb, "embed: token %d (at %d) is outside the vocabulary of %lld",
				tokens[i], i, (long long)w->rows);
			return;
		}
	}
	d_tokens = (const int32_t *)cu_arena_put(cb, tokens, (size_t)n * sizeof(int32_t), "embed");
	if (!d_tokens)
		return;
	switch (w->type) {
	case EXL_F32: embed<EXL_F32>(cb, w, d_tokens, y, n); break;
	case EXL_F16: embed<EXL_F16>(cb, w, d_tokens, y, n); break;
	case EXL_BF16: embed<EXL_BF16>(cb, w, d_tokens, y, n); break;
	case EXL_Q8_0: embed<EXL_Q8_0>(cb, w, d_tokens, y, n); break;
	case EXL_Q4_0: embed<EXL_Q4_0>(cb, w, d_tokens, y, n); break;
	case EXL_Q4_1: embed<EXL_Q4_1>(cb, w, d_tokens, y, n); break;
	case EXL_Q5_0: embed<EXL_Q5_0>(cb, w, d_tokens, y, n); break;
	case EXL_Q5_1: embed<EXL_Q5_1>(cb, w, d_tokens, y, n); break;
	case EXL_IQ4_NL: embed<EXL_IQ4_NL>(cb, w, d_tokens, y, n); break;
	case EXL_MXFP4: embed<EXL_MXFP4>(cb, w, d_tokens, y, n); break;
	case EXL_Q4_K: embed<EXL_Q4_K>(cb, w, d_tokens, y, n); break;
	case EXL_Q2_K: embed<EXL_Q2_K>(cb, w, d_tokens, y, n); break;
	case EXL_Q3_K: embed<EXL_Q3_K>(cb, w, d_tokens, y, n); break;
	case EXL_Q5_K: embed<EXL_Q5_K>(cb, w, d_tokens, y, n); break;
	case EXL_IQ4_XS: embed<EXL_IQ4_XS>(cb, w, d_tokens, y, n); break;
	case EXL_Q6_K: embed<EXL_Q6_K>(cb, w, d_tokens, y, n); break;
	default: break;
	}
}

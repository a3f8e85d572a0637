/* The CPU matrix multiply: y[i][r] = dot(W[r], x[i]) for n input vectors
 * (the convention of kernels/backend.h), reading the weight blocks in place.
 *
 * Quantized weights are multiplied in integers, as GGML does: the
 * activations are quantized once per call to 8 bits (32-element blocks for
 * the 32-weight types, 256-element blocks for the K-quants and IQ4_XS) and
 * each block
 * product is an exact integer dot scaled by the two block scales.  F32,
 * F16 and BF16 weights are multiplied in float.
 *
 * Kernel sets: "scalar" (portable reference), "avx2" (AVX2+FMA+F16C),
 * "avx512" (F/BW/VL) and "avx512vnni" (the same plus VNNI integer dots).
 */
#ifndef EXL_CPU_MATMUL_H
#define EXL_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/pool.h"

/* The quantized activations of one call, grown as needed.  Owned by the
 * caller (one per backend); zero-initialize before first use, release with
 * exl_matmul_scratch_free. */
struct exl_matmul_scratch {
	void *buf;
	size_t cap;
};

void exl_matmul_scratch_free(struct exl_matmul_scratch *s);

/* Chooses the kernel set exl_cpu_matmul uses from now on, process-wide.
 * force: a set's name, or NULL for the best this CPU supports; with NULL
 * the environment variable EXLD_CPU_KERNELS, when set and non-empty, names
 * the set instead.  Returns -1 with a message for an unknown name or a set
 * this CPU cannot run (the previous choice stays).  Without any call, the
 * first matmul selects as with NULL. */
int exl_cpu_kernels_select(const char *force, char *err, size_t errlen);

/* The name of the set in use ("scalar", "avx2", ...). */
const char *exl_cpu_kernels_name(void);

/* The i-th kernel set this build has, from the simplest ("scalar") up, or
 * NULL past the last; whether this CPU runs it is another question. */
const char *exl_cpu_kernels_set(size_t i);

/* True when this CPU can run the named set (false for unknown names). */
int exl_cpu_kernels_available(const char *name);

/* The layout (enum exl_weight_layout) in which the set in use reads
 * weights of this type: EXL_LAYOUT_ROWS8 where it has kernels for one
 * repacked so (kernels/cpu/repack.h), else EXL_LAYOUT_ROWS.  A weight
 * repacked for one set is refused by another (exl_cpu_matmul's error). */
uint32_t exl_cpu_matmul_layout(uint32_t type);

/* y[n][w->rows] = x[n][w->cols] . W^T on the pool's threads.  Returns 0, or
 * -1 with a message when the weight type is not supported (see
 * exl_dtype_supported), the shape is inconsistent (cols not a whole number
 * of blocks, row_bytes wrong, n < 0) or scratch memory cannot be had.  pool
 * may be NULL: then the calling thread does all the work. */
int exl_cpu_matmul(struct exl_pool *pool, const struct exl_weight *w,
		   const float *x, float *y, int n, struct exl_matmul_scratch *s,
		   char *err, size_t errlen);

/* y[i] = x . W[i]^T for count (1 to EXL_CPU_MATMUL_MAX_N) weights of one
 * input (attention's q, k and v; the FFN's gate and up): the same outputs
 * as count exl_cpu_matmul calls, with x quantized once and all the rows
 * split over the pool in one job, so a decode step pays one hand-off and
 * one tail where it paid count.  Weights whose types quantize x
 * differently are multiplied one call each. */
#define EXL_CPU_MATMUL_MAX_N 4
int exl_cpu_matmul_n(struct exl_pool *pool, const struct exl_weight *const *w, int count,
		     const float *x, float *const *y, int n, struct exl_matmul_scratch *s,
		     char *err, size_t errlen);

#endif

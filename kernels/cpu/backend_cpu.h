/* The CPU backend's C API beyond the op table (kernels/backend.h makes it:
 * exl_backend_cpu_create, exl_backend_cpu_threads).
 *
 * Ops run to completion before they return.  Most ops return nothing, so
 * an op given bad arguments (a token id out of range, a page table entry
 * outside the pool, a weight type matmul cannot do) records its message
 * (ops->error reads it), later ops do nothing, and the next ops->download
 * or ops->sync returns -1; ops->copy_in returns -1 meanwhile.  set_batch,
 * alloc and upload report their own failures at once without poisoning
 * later ops.
 */
#ifndef EXL_BACKEND_CPU_H
#define EXL_BACKEND_CPU_H

#include "kernels/backend.h"

/* The name of the row-kernel variant the backend's non-matmul ops use
 * ("scalar", "avx2", "avx512"), or NULL for a backend that is not the CPU
 * one. */
const char *exl_backend_cpu_kernels(const struct exl_backend *be);

#endif

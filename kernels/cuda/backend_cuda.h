/* The CUDA backend's C API beyond the op table: device and memory queries,
 * and the message of the first error an op ran into.
 *
 * The backend itself is made with exl_backend_cuda_create (kernels/backend.h).
 * In a build without CUDA every function here fails with the message
 * "exld was built without CUDA support".  In a build with CUDA the backend
 * lives in a module, libexld-cuda.so, that the first call to any of these
 * (from any thread) loads; when it cannot be loaded, each fails with the
 * reason (kernels/cuda_module_load.c, docs/cuda.md).
 */
#ifndef EXL_BACKEND_CUDA_H
#define EXL_BACKEND_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/backend.h"

/* Number of CUDA devices (>= 1), or -1 with a message when there is none or
 * the runtime cannot be used ("no CUDA device: <cudaGetErrorString>"). */
int exl_cuda_device_count(char *err, size_t errlen);

/* Free and total VRAM of device `device`, in bytes.  0, or -1 with a
 * message. */
int exl_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes,
		      char *err, size_t errlen);

/* Name and compute capability of device `device` ("NVIDIA A100", 8, 0). */
int exl_cuda_device_name(int device, char *name, size_t namelen, int *major, int *minor,
			 char *err, size_t errlen);

/* The device a CUDA backend runs on. */
int exl_backend_cuda_device(const struct exl_backend *be);

/* The op table has no error channel: an op that fails (a token id out of
 * range, a page outside the pool, a kernel fault) records its message in the
 * backend, later ops of the pass do nothing, and the pass's ops->download or
 * ops->sync returns -1.  ops->upload, ops->alloc and ops->set_batch fail at
 * once (NULL / -1) with a message, e.g. the bytes an upload needed and the
 * VRAM free.  This returns the message of the last such failure, or NULL;
 * a download or sync that succeeds clears it. */
const char *exl_backend_cuda_error(const struct exl_backend *be);

#ifdef __cplusplus
}
#endif

#endif

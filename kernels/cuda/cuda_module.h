/* The CUDA backend as a loadable module.
 *
 * kernels/cuda/ builds into libexld-cuda.so, linked against cudart and
 * cuBLAS.  Nothing else links it: kernels/cuda_module_load.c dlopens it the
 * first time a CUDA function of kernels/cuda/backend_cuda.h (or
 * exl_backend_cuda_create) is called, so a process that never asks for CUDA
 * never maps the CUDA libraries.
 *
 * The module exports exactly one symbol, EXL_CUDA_MODULE_ENTRY, returning
 * the table below.  A change to this table or to struct exl_backend_ops
 * that the loader cannot detect through the size fields bumps
 * EXL_CUDA_MODULE_ABI (and the entry point's name with it).
 */
#ifndef EXL_CUDA_MODULE_H
#define EXL_CUDA_MODULE_H

#include <stddef.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EXL_CUDA_MODULE_ABI 2
#define EXL_CUDA_MODULE_ENTRY "exl_cuda_module_v2"
#define EXL_CUDA_MODULE_FILE "libexld-cuda.so"

struct exl_cuda_module {
	unsigned int abi;		/* EXL_CUDA_MODULE_ABI */
	size_t table_size;		/* sizeof(struct exl_cuda_module) */
	size_t ops_size;		/* sizeof(struct exl_backend_ops) */
	const char *version;		/* the exld version it was built from */

	/* The functions of backend_cuda.h and exl_backend_cuda_create, with
	 * the same contracts. */
	struct exl_backend *(*create)(int device, char *err, size_t errlen);
	int (*device_count)(char *err, size_t errlen);
	int (*mem_info)(int device, size_t *free_bytes, size_t *total_bytes,
			char *err, size_t errlen);
	int (*device_name)(int device, char *name, size_t namelen, int *major, int *minor,
			   char *err, size_t errlen);
	int (*backend_device)(const struct exl_backend *be);
	const char *(*backend_error)(const struct exl_backend *be);
};

typedef const struct exl_cuda_module *(*exl_cuda_module_entry_fn)(void);

/* The module's own implementations, which its table points at.  They are
 * named apart from the exld side's functions of backend_cuda.h
 * (kernels/cuda_module_load.c forwards those to the table), so no symbol
 * is defined on both sides. */
struct exl_backend *cudamod_backend_create(int device, char *err, size_t errlen);
int cudamod_device_count(char *err, size_t errlen);
int cudamod_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err,
		     size_t errlen);
int cudamod_device_name(int device, char *name, size_t namelen, int *major, int *minor,
			char *err, size_t errlen);
int cudamod_backend_device(const struct exl_backend *be);
const char *cudamod_backend_error(const struct exl_backend *be);

const struct exl_cuda_module *exl_cuda_module_v2(void);

#ifdef __cplusplus
}
#endif

#endif

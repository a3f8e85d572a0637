/* The CUDA entry points of a build without CUDA: each fails with a message
 * saying so, so callers need no #ifdef. */
#include <stdio.h>

#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"

static const char no_cuda[] = "exld was built without CUDA support";

struct exl_backend *exl_backend_cuda_create(int device, char *err, size_t errlen)
{
	(void)device;
	snprintf(err, errlen, "%s", no_cuda);
	return NULL;
}

int exl_cuda_device_count(char *err, size_t errlen)
{
	snprintf(err, errlen, "%s", no_cuda);
	return -1;
}

int exl_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes,
		      char *err, size_t errlen)
{
	(void)device;
	*free_bytes = 0;
	*total_bytes = 0;
	snprintf(err, errlen, "%s", no_cuda);
	return -1;
}

int exl_cuda_device_name(int device, char *name, size_t namelen, int *major, int *minor,
			 char *err, size_t errlen)
{
	(void)device;
	if (namelen)
		name[0] = '\0';
	*major = 0;
	*minor = 0;
	snprintf(err, errlen, "%s", no_cuda);
	return -1;
}

int exl_backend_cuda_device(const struct exl_backend *be)
{
	(void)be;
	return -1;
}

const char *exl_backend_cuda_error(const struct exl_backend *be)
{
	(void)be;
	return no_cuda;
}

/* --device parsing: "cpu", "cuda", "cuda:N". */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend_select.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cuda/backend_cuda.h"

/* More than any machine has; bounds the number before it reaches CUDA. */
#define EXL_MAX_CUDA_DEVICE 1024

static int parse_device(const char *s, int *device, char *err, size_t errlen)
{
	char *end;
	long v;

	if (*s < '0' || *s > '9') {
		snprintf(err, errlen, "device \"cuda:%s\": expected a device number", s);
		return -1;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v >= EXL_MAX_CUDA_DEVICE) {
		snprintf(err, errlen, "device \"cuda:%s\": expected a device number below %d",
			 s, EXL_MAX_CUDA_DEVICE);
		return -1;
	}
	*device = (int)v;
	return 0;
}

int exl_backend_create_by_name(const char *spec, int n_threads, struct exl_backend **out,
			       char *err, size_t errlen)
{
	int device = 0;

	*out = NULL;
	if (!spec || !*spec) {
		snprintf(err, errlen, "empty device name (expected cpu, cuda or cuda:N)");
		return -1;
	}
	if (!strcmp(spec, "cpu")) {
		*out = exl_backend_cpu_create(n_threads, err, errlen);
		return *out ? 0 : -1;
	}
	if (!strncmp(spec, "cuda", 4) && (spec[4] == '\0' || spec[4] == ':')) {
		if (spec[4] == ':' && parse_device(spec + 5, &device, err, errlen))
			return -1;
		*out = exl_backend_cuda_create(device, err, errlen);
		return *out ? 0 : -1;
	}
	snprintf(err, errlen, "unknown device \"%.64s\" (expected cpu, cuda or cuda:N)", spec);
	return -1;
}

const char *exl_backend_error(const struct exl_backend *be)
{
	return be && be->ops && be->ops->error ? be->ops->error(be) : NULL;
}

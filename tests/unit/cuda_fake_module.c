/* Modules that look like libexld-cuda.so but are not a usable one, for
 * test_cuda_load: built with FAKE_NO_ENTRY (no entry point at all), or with
 * an entry point whose table has the wrong ABI (FAKE_ABI) or comes from
 * another exld version (FAKE_VERSION).  None of them has real functions:
 * the loader must refuse each before calling anything but the entry. */
#include "kernels/cuda/cuda_module.h"

#ifdef FAKE_NO_ENTRY
int exl_cuda_fake_not_the_entry(void);

int exl_cuda_fake_not_the_entry(void)
{
	return 1;
}
#else
#ifndef FAKE_ABI
#define FAKE_ABI EXL_CUDA_MODULE_ABI
#endif
#ifndef FAKE_VERSION
#error "a fake module with an entry point needs FAKE_VERSION"
#endif

static const struct exl_cuda_module fake = {
	.abi = FAKE_ABI,
	.table_size = sizeof(struct exl_cuda_module),
	.ops_size = sizeof(struct exl_backend_ops),
	.version = FAKE_VERSION,
};

const struct exl_cuda_module *exl_cuda_module_v1(void)
{
	return &fake;
}
#endif

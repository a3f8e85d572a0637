/* The entry point of libexld-cuda.so: the table of the backend's C entry
 * points (kernels/cuda/cuda_module.h).  The link's version script
 * (cuda_module.map) keeps every other symbol local, so the module's own
 * exl_cuda_* functions never clash with the loader's of the same name. */
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_module.h"
#include "kernels/cuda/cuda_module_config.h"

static const struct exl_cuda_module cuda_module = {
	.abi = EXL_CUDA_MODULE_ABI,
	.table_size = sizeof(struct exl_cuda_module),
	.ops_size = sizeof(struct exl_backend_ops),
	.version = EXL_CUDA_MODULE_VERSION,
	.create = exl_backend_cuda_create,
	.device_count = exl_cuda_device_count,
	.mem_info = exl_cuda_mem_info,
	.device_name = exl_cuda_device_name,
	.backend_device = exl_backend_cuda_device,
	.backend_error = exl_backend_cuda_error,
};

const struct exl_cuda_module *exl_cuda_module_v1(void)
{
	return &cuda_module;
}

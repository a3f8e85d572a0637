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
	.create = cudamod_backend_create,
	.device_count = cudamod_device_count,
	.mem_info = cudamod_mem_info,
	.device_name = cudamod_device_name,
	.backend_device = cudamod_backend_device,
	.backend_error = cudamod_backend_error,
};

const struct exl_cuda_module *exl_cuda_module_v2(void)
{
	return &cuda_module;
}

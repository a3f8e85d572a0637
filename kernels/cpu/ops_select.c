/* Choosing a variant of the CPU row kernels by name and CPU feature. */
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"

static bool has_avx2(void)
{
	const struct exl_cpu_features *f = exl_cpu_features();

	return f->avx2 && f->fma && f->f16c;
}

static bool has_avx512(void)
{
	const struct exl_cpu_features *f = exl_cpu_features();

	return has_avx2() && f->avx512f && f->avx512bw && f->avx512vl;
}

const struct exl_cpu_ops *exl_cpu_ops_get(const char *name)
{
	if (!name)
		return NULL;
	if (!strcmp(name, "scalar"))
		return &exl_cpu_ops_scalar;
#if defined(__x86_64__)
	/* and the matmul kernel set "avx2vnni", the avx2 kernels with VNNI */
	if (!strcmp(name, "avx2") || !strcmp(name, "avx2vnni"))
		return has_avx2() ? &exl_cpu_ops_avx2 : NULL;
	/* the matmul kernel sets "avx512", "avx512vnni" and "amx" */
	if (!strcmp(name, "avx512") || !strcmp(name, "avx512vnni") || !strcmp(name, "amx"))
		return has_avx512() ? &exl_cpu_ops_avx512 : NULL;
#endif
	return NULL;
}

const struct exl_cpu_ops *exl_cpu_ops_best(void)
{
#if defined(__x86_64__)
	if (has_avx512())
		return &exl_cpu_ops_avx512;
	if (has_avx2())
		return &exl_cpu_ops_avx2;
#endif
	return &exl_cpu_ops_scalar;
}

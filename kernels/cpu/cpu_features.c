#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/cpu_features.h"

static struct exl_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	/* __builtin_cpu_supports also checks that the OS saves the wider
	 * register state (XCR0), so a reported feature is usable. */
	features.avx2 = __builtin_cpu_supports("avx2");
	features.fma = __builtin_cpu_supports("fma");
	/* clang's __builtin_cpu_supports has no "f16c": CPUID.1:ECX bit 29.
	 * Its register state is AVX's, which the avx2 check covers. */
	unsigned a, b, c, d;
	features.f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
	features.avx512f = __builtin_cpu_supports("avx512f");
	features.avx512bw = __builtin_cpu_supports("avx512bw");
	features.avx512vl = __builtin_cpu_supports("avx512vl");
	features.avx512vnni = __builtin_cpu_supports("avx512vnni");
	features.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
}

const struct exl_cpu_features *exl_cpu_features(void)
{
	pthread_once(&features_once, detect);
	return &features;
}
